/*
** impl.c: the helpers every op file of the CUDA backend calls (impl.h): an op's lowered
** launches and their launch, the vector kernels' alignment and dtype tests, the memory trace. cuda.c (setup,
** replay, copies) calls the op files and they call these: no op file calls back into cuda.c.
*/
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include "runtime/cuda/impl.h"
#include "compiler/emit.h"

const dfl_launch *dfl_cu_lowered(dfl_cuda *c, int i, int n) {
  const opstate *os = &c->impl->ops[i];
  if (os->nl >= n && os->l) return os->l;
  fprintf(stderr, "dflc: cuda backend: op %s (%s): %d lowered launches, %d expected (compiler/lower_launch.c)\n",
          c->g->ops[i].label, dfl_opcode_name(c->g->ops[i].code), os->nl, n);
  return NULL;
}

int dfl_cu_launch(dfl_cuda *c, int i, const dfl_launch *l, void **args) {
  const dfl_op *op = &c->g->ops[i];
  if (l->vec) /* chosen from the plan's offsets: a pointer set since (a view, a private copy) must agree */
    for (int k = 0; k < op->n_in + op->n_out; k++) {
      int t = k < op->n_in ? op->in[k] : op->out[k - op->n_in];
      if (t >= 0 && ((uintptr_t)c->ptr[t] & 15)) {
        fprintf(stderr, "dflc: cuda backend: op %s (%s): %s was lowered for 16-byte aligned tensors, but %s is "
                        "at %p\n", op->label, dfl_opcode_name(op->code), dfl_emit_kernel_name(l->kernel),
                c->g->t[t].name, c->ptr[t]);
        return DFL_ERR;
      }
    }
  return launch2(c, l->kernel, dfl_cu_grid(c, l), l->grid_y, l->block, (size_t)l->smem, args);
}

int64_t dfl_cu_grid(const dfl_cuda *c, const dfl_launch *l) {
  const struct dfl_cuda_impl *im = c->impl;
  int64_t g = l->grid, cap = l->fill == DFL_FILL_OCC ? (int64_t)im->nsm * im->occ[l->kernel]
                             : l->fill > 0 ? (int64_t)im->nsm * l->fill : g;
  if (cap < 1) cap = 1;
  return g < cap ? g : cap;
}

/* DFL_MEMTRACE=1: device memory in use at each stage of init and of the first replays, to tell
** the plan's arena from what the driver and libraries take for themselves. */
void dfl_cu_memtrace(const char *what) {
  static int on = -1;
  if (on < 0) on = getenv("DFL_MEMTRACE") != NULL;
  if (!on) return;
  size_t fr = 0, tot = 0;
  cudaDeviceSynchronize();
  if (cudaMemGetInfo(&fr, &tot) == cudaSuccess)
    fprintf(stderr, "memtrace: %-28s %10.1f MiB in use\n", what, (double)(tot - fr) / 1048576.0);
}

/* The 16-byte vector kernels: every pointer 16-byte aligned, every dtype bf16, f16 or f32. */
int dfl_cu_vec_dtypes(const void *const *p, const int *d, int n) {
  for (int k = 0; k < n; k++)
    if (((uintptr_t)p[k] & 15) || (d[k] != DFL_F32 && d[k] != DFL_BF16 && d[k] != DFL_F16)) return 0;
  return 1;
}
/* vec_dtypes, and every tensor bf16: the bf16-only kernels (their 16-byte rows are packed bf16) */
int dfl_cu_bf16_vecs(const void *const *p, const int *d, int n) {
  for (int k = 0; k < n; k++)
    if (d[k] != DFL_BF16) return 0;
  return dfl_cu_vec_dtypes(p, d, n);
}
