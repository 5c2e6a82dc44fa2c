/*
** as_cc.h: `--as-cc CC` for the GPU test and bench programs: the kernels a GPU of compute capability CC
** gets, picked on this one (docs/gpus.md, dfl_cuda_set_default_as_cc).
*/
#ifndef DFL_TESTS_CUDA_AS_CC_H
#define DFL_TESTS_CUDA_AS_CC_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/cuda/cuda.h"

/* Takes `--as-cc CC` off the front of argv (argv[0] kept), sets the backend's default row and says so.
** Returns CC, 0 without the option, -1 when its value is missing or not a compute capability. */
static inline int dfl_test_as_cc(int *argc, char ***argv) {
  if (*argc < 2 || strcmp((*argv)[1], "--as-cc")) return 0;
  int cc = *argc > 2 ? atoi((*argv)[2]) : 0;
  if (cc < 10) return -1;
  (*argv)[2] = (*argv)[0];
  *argc -= 2, *argv += 2;
  dfl_cuda_set_default_as_cc(cc);
  printf("as-cc %d: kernels picked as on a GPU of compute capability %d.%d\n", cc, cc / 10, cc % 10);
  return cc;
}

#endif
