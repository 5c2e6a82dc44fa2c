/*
** pointwise.c: the CUDA backend's pointwise ops, by fusion group (compiler/lower.h): the groups of
** the graph under the plan's offsets, their generated source (compiler/codegen.c) compiled through
** NVRTC beside the library, and one launch per group at its first op (the others launch nothing).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/cuda/impl.h"
#include "compiler/codegen.h"
#include "compiler/emit.h"

int dfl_cu_pw_load(dfl_cuda *c, const dfl_plan *plan) {
  struct dfl_cuda_impl *im = c->impl;
  TRY(dfl_lower_groups(c->g, plan ? plan->offset : NULL, plan ? plan->size : NULL, &im->pw));
  if (im->pw.n == 0) return DFL_OK;
  char *src = NULL;
  void *cubin = NULL;
  size_t n = 0;
  int cached = 0;
  TRY(dfl_codegen_source(c->g, &im->pw, &src, NULL));
  int rc = dfl_nvrtc_compile(src, im->arch, NULL, &cubin, &n, &cached);
  free(src);
  if (rc) return rc;
  cudaError_t e = cudaLibraryLoadData(&im->pwlib, cubin, NULL, NULL, 0, NULL, NULL, 0);
  free(cubin);
  if (e != cudaSuccess) {
    fprintf(stderr, "%s:%d: cudaLibraryLoadData(the fusion groups' %s cubin) failed: %s\n", __FILE__, __LINE__,
            im->arch, cudaGetErrorString(e));
    return DFL_ERR;
  }
  im->pwk = calloc((size_t)im->pw.n, sizeof *im->pwk);
  im->pwocc = calloc((size_t)im->pw.n, 1);
  if (!im->pwk || !im->pwocc) return DFL_ENOMEM;
  for (int k = 0; k < im->pw.n; k++) {
    char name[32];
    dfl_codegen_kernel_name(k, name, sizeof name);
    CU(cudaLibraryGetKernel(&im->pwk[k], im->pwlib, name));
    int nb = 0;
    CU(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, (const void *)im->pwk[k], 256, 0));
    im->pwocc[k] = (unsigned char)(nb < 1 ? 1 : nb > 8 ? 8 : nb);
  }
  return DFL_OK;
}

int dfl_cu_pw_run(dfl_cuda *c, int i) {
  struct dfl_cuda_impl *im = c->impl;
  int k = im->pw.of_op[i];
  const dfl_pw_group *p = &im->pw.g[k];
  if (p->first != i) return DFL_OK; /* launched with the group's first op */
  void *ptr[DFL_PW_MAX_T], *args[DFL_PW_MAX_T];
  for (int m = 0; m < p->nt; m++) ptr[m] = P(p->t[m]), args[m] = &ptr[m];
  /* grid-stride over 8 elements a thread (fewer when a pointer is not 16-byte aligned: the same grid); a
  ** row group: a CTA a row */
  int64_t items = p->vec == 8 ? p->numel / 8 : p->numel, g = p->rows > 0 ? p->rows : (items + 255) / 256;
  int64_t cap = (int64_t)im->nsm * im->pwocc[k];
  if (g > cap) g = cap;
  if (g < 1) g = 1;
  CU(cudaLaunchKernel((const void *)im->pwk[k], d3((unsigned)g, 1), d3(256, 1), args, 0, im->stream));
  return DFL_OK;
}

void dfl_cu_pw_free(dfl_cuda *c) {
  struct dfl_cuda_impl *im = c->impl;
  if (im->pwlib) cudaLibraryUnload(im->pwlib);
  free(im->pwk);
  free(im->pwocc);
  dfl_groups_free(&im->pw);
  im->pwlib = NULL, im->pwk = NULL, im->pwocc = NULL;
}
