/*
** rope.c: ROPE (plain, normed, the q/k pair form; partial rotary goes to hybrid.c): which of the
** kernels of kernels/rope.cuh takes a tensor, and its launch.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/impl.h"
#include "compiler/plan.h"
#include "compiler/status.h"

/* ROPE on one tensor x (nh heads) into out by its lowered launch l; wn: the normed form's weight (NULL:
** plain). */
static int rope_one(dfl_cuda *c, int i, const dfl_launch *l, void *o0, int d0, const void *i0, int d1,
                    const void *wn, int dtw, int nh) {
  const dfl_op *op = &c->g->ops[i];
  const dfl_attrs *at = &op->a;
  int hd = at->head_dim, inv = at->inverse;
  long long rows = (long long)numel(c, op->in[0]) / ((long long)at->heads * hd);
  double th = at->theta; void *pos = P(op->in[1]);
  int dty = at->mid_dtype;
  float eps = (float)at->eps;
  void *a[] = {&o0, &d0, &i0, &d1, &pos, &rows, &nh, &hd, &th, &inv, &wn, &dtw, &dty, &eps}; /* dfl_rope_v */
  void *ar[] = {&o0, &i0, &pos, &rows, &nh, &hd, &th, &inv, &wn, &eps};                     /* dfl_rope_r */
  void *as[] = {&o0, &d0, &i0, &d1, &pos, &rows, &nh, &hd, &th, &inv};                      /* dfl_rope */
  return dfl_cu_launch(c, i, l, l->kernel == K_ROPE_R ? ar : l->kernel == K_ROPE_V ? a : as);
}

/* ROPE: single, normed (in[2] the norm weight: dfl_fuse_norm_rope; a.eps, the removed intermediate's
** dtype in a.mid_dtype) or pair form (dfl_fuse_rope_pair: x2 and its weight after the single form's
** inputs, a.kv_heads heads, out[1]), by the launches compiler/lower_launch.c chose: the item kernel
** (dfl_rope_p8, both tensors in one launch) or one launch per tensor; partial rotary (qwen3_5) in
** hybrid.c. */
int dfl_cu_rope(dfl_cuda *c, int i) {
  const dfl_op *op = &c->g->ops[i];
  const dfl_attrs *at = &op->a;
  if (at->rot_dim && at->rot_dim != at->head_dim) return dfl_cu_rope_part(c, i);
  int pair = op->n_out == 2, normed = op->n_in == (pair ? 5 : 3), hd = at->head_dim;
  const dfl_launch *l = dfl_cu_lowered(c, i, 1);
  if (!l) return DFL_ERR;
  void *o0 = P(op->out[0]), *i0 = P(op->in[0]), *wn = normed ? P(op->in[2]) : NULL;
  void *o1 = pair ? P(op->out[1]) : NULL, *i1 = pair ? P(op->in[normed ? 3 : 2]) : NULL;
  void *wn1 = pair && normed ? P(op->in[4]) : NULL;
  int d0 = dt(c, op->out[0]), d1 = dt(c, op->in[0]), dtw = normed ? dt(c, op->in[2]) : 0;
  int nh = at->heads, nh2 = pair ? at->kv_heads : 0;
  if (l->kernel == K_ROPE_P8) {
    long long rows = (long long)numel(c, op->in[0]) / ((long long)nh * hd);
    double th = at->theta; void *pos = P(op->in[1]);
    int inv = at->inverse; float eps = (float)at->eps;
    void *a[] = {&o0, &i0, &wn, &nh, &o1, &i1, &wn1, &nh2, &pos, &rows, &hd, &th, &inv, &eps};
    return dfl_cu_launch(c, i, l, a);
  }
  int rc = rope_one(c, i, &l[0], o0, d0, i0, d1, wn, dtw, nh);
  if (rc != DFL_OK || !pair) return rc;
  if (!(l = dfl_cu_lowered(c, i, 2))) return DFL_ERR;
  return rope_one(c, i, &l[1], o1, dt(c, op->out[1]), i1, dt(c, op->in[normed ? 3 : 2]), wn1,
                  wn1 ? dt(c, op->in[4]) : 0, nh2);
}
