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
#include "runtime/cuda/cuda_internal.h"
#include "compiler/plan.h"
#include "compiler/status.h"

/* head_dim hd = 16 x a power of two, at most 512: a (row, head)'s hd / 16 threads are aligned lanes
** of one warp (the vector RoPE kernels' normed form reduces across them by shuffles) */
static int rope_hd16(int hd) { return hd % 16 == 0 && (hd / 16 & (hd / 16 - 1)) == 0 && hd <= 512; }
/* ROPE on one tensor x (nh heads) into out; wn: the normed form's weight (NULL: plain). */
static int rope_one(dfl_cuda *c, const dfl_op *op, void *o0, int d0, const void *i0, int d1, const void *wn, int dtw,
                    int nh) {
  struct dfl_cuda_impl *im = c->impl;
  const dfl_attrs *at = &op->a;
  int hd = at->head_dim, inv = at->inverse;
  long long rows = (long long)numel(c, op->in[0]) / ((long long)at->heads * hd);
  double th = at->theta; void *pos = P(op->in[1]);
  int dty = at->mid_dtype;
  float eps = (float)at->eps;
  void *a[] = {&o0, &d0, &i0, &d1, &pos, &rows, &nh, &hd, &th, &inv, &wn, &dtw, &dty, &eps};
  if (wn && (!rope_hd16(hd) || !dfl_cu_vec_dtypes((const void *[]){o0, i0, wn}, (const int[]){d0, d1, dtw}, 3))) {
    fprintf(stderr, "dflc: cuda backend: rope with a norm (%s): head_dim %d must be 16 x a power of two, at most 512, "
                    "and the tensors bf16/f16/f32\n", op->label, hd);
    return DFL_ESHAPE;
  }
  if (rope_hd16(hd) &&
      dfl_cu_bf16_vecs((const void *[]){o0, i0, wn ? wn : o0}, (const int[]){d0, d1, wn ? dtw : d0}, 3) &&
      (!wn || dty == DFL_BF16)) {
    /* a row's hd / 16 threads walk its heads (kernels/rope.cuh dfl_rope_r); two CTAs an SM at most */
    int ni = hd / 16, rb = 256 / ni;
    int64_t nb = (rows + rb - 1) / rb, cap = (int64_t)im->nsm * 2;
    void *ar[] = {&o0, &i0, &pos, &rows, &nh, &hd, &th, &inv, &wn, &eps};
    return launch2(c, K_ROPE_R, nb < cap ? nb : cap, 1, 256, (size_t)(hd / 2) * 8, ar);
  }
  if (hd % 16 == 0 && hd <= 1024 && dfl_cu_vec_dtypes((const void *[]){o0, i0}, (const int[]){d0, d1}, 2)) {
    /* DFL_ROPE_RT (4) rows per CTA and pass, their angle table in shared memory after the hd / 2
    ** inverse frequencies (double): 20 KiB at hd 1024, within what a launch gets without opting in */
    int64_t nb = (rows + 3) / 4, cap = (int64_t)im->nsm * 8;
    int ni = hd / 16;   /* threads of a (row, head); the block a multiple of them (kernels/rope.cuh) */
    return launch2(c, K_ROPE_V, nb < cap ? nb : cap, 1, 256 / ni * ni, (size_t)5 * (hd / 2) * 8, a);
  }
  void *as[] = {&o0, &d0, &i0, &d1, &pos, &rows, &nh, &hd, &th, &inv};
  return launch(c, K_ROPE, rows * nh * (hd / 2), as);
}

/* ROPE: single, normed (in[2] the norm weight: dfl_fuse_norm_rope; a.eps, the removed intermediate's
** dtype in a.mid_dtype) or pair form (dfl_fuse_rope_pair: x2 and its weight after the single form's
** inputs, a.kv_heads heads, out[1]). bf16 rows of hd = 16 x a power of two <= 512 go to the item
** kernel (kernels/rope.cuh dfl_rope_p8: 8 heads an item), both tensors in one launch; the rest takes
** rope_one's kernels, one launch per tensor. */
int dfl_cu_rope(dfl_cuda *c, const dfl_op *op) {
  const dfl_attrs *at = &op->a;
  /* partial rotary (qwen3_5): its own kernel; the graph never fuses it (compiler/graph.c) */
  if (at->rot_dim && at->rot_dim != at->head_dim) return dfl_cu_rope_part(c, op);
  int pair = op->n_out == 2, normed = op->n_in == (pair ? 5 : 3), hd = at->head_dim;
  void *o0 = P(op->out[0]), *i0 = P(op->in[0]), *wn = normed ? P(op->in[2]) : NULL;
  void *o1 = pair ? P(op->out[1]) : NULL, *i1 = pair ? P(op->in[normed ? 3 : 2]) : NULL;
  void *wn1 = pair && normed ? P(op->in[4]) : NULL;
  int d0 = dt(c, op->out[0]), d1 = dt(c, op->in[0]), dtw = normed ? dt(c, op->in[2]) : 0;
  int nh = at->heads, nh2 = pair ? at->kv_heads : 0;
  const void *pv[] = {o0, i0, wn ? wn : o0, pair ? o1 : o0, pair ? i1 : o0, wn1 ? wn1 : o0};
  int dv[] = {d0, d1, wn ? dtw : d0, pair ? dt(c, op->out[1]) : d0, pair ? dt(c, op->in[normed ? 3 : 2]) : d0,
              wn1 ? dt(c, op->in[4]) : d0};
  if (rope_hd16(hd) && dfl_cu_bf16_vecs(pv, dv, 6) &&
      (!wn || at->mid_dtype == DFL_BF16)) {
    int ph = 8, ni = hd / 16;
    long long rows = (long long)numel(c, op->in[0]) / ((long long)nh * hd);
    int64_t items = rows * ((nh + ph - 1) / ph + (nh2 + ph - 1) / ph), ipb = 256 / ni;
    double th = at->theta; void *pos = P(op->in[1]);
    int inv = at->inverse; float eps = (float)at->eps;
    void *a[] = {&o0, &i0, &wn, &nh, &o1, &i1, &wn1, &nh2, &pos, &rows, &hd, &th, &inv, &eps};
    /* at most the CTAs the SMs hold at once (two): each forms its inverse frequencies (double pow) once */
    int64_t nb = (items + ipb - 1) / ipb, cap = (int64_t)c->impl->nsm * 2;
    if (nb > cap) nb = cap;
    return launch2(c, K_ROPE_P8, nb, 1, 256, (size_t)(hd / 2) * 8, a);
  }
  int rc = rope_one(c, op, o0, d0, i0, d1, wn, dtw, nh);
  if (rc != DFL_OK || !pair) return rc;
  return rope_one(c, op, o1, dt(c, op->out[1]), i1, dt(c, op->in[normed ? 3 : 2]), wn1,
                  wn1 ? dt(c, op->in[4]) : 0, nh2);
}

