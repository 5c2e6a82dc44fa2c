/* cuda_check.h: the one check for CUDA runtime calls (llm.c style): it names the call and the
** file:line, and returns DFL_ERR from the calling function. */
#ifndef DFL_CUDA_CHECK_H
#define DFL_CUDA_CHECK_H

#include <stdio.h>
#include <cuda_runtime.h>
#include "compiler/status.h"

#define DFL_CU(call)                                                                                 \
  do {                                                                                               \
    cudaError_t e_ = (call);                                                                         \
    if (e_ != cudaSuccess) {                                                                         \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));  \
      return DFL_ERR;                                                                                \
    }                                                                                                \
  } while (0)

#endif
