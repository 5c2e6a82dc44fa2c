/*
** loss.c: the drafter's block rows (BLOCK_ROWS and its family: row copies, the backward's column sums)
** and the fused loss head (LINEAR_CE: cuBLASLt logit chunks and the row kernels of kernels/lce.cuh).
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

/* BLOCK_ROWS, BLOCK_EXPAND, BLOCK_EXPAND_BWD, BLOCK_DROP, BLOCK_UNDROP (graph.h): row copies by
** dfl_block_copy; the backward's head rows the same way (BLOCK_ROWS's first R rows), its MASK rows'
** sums through f32 parts in the op's scratch (dfl_block_colsum, dfl_block_colfin: a fixed order). */
int dfl_cu_block_rows(dfl_cuda *c, int i) {
  const dfl_op *op = &c->g->ops[i];
  const dfl_opcode code = op->code;
  const int bwd = code == DFL_OP_BLOCK_EXPAND_BWD, outfull = code == DFL_OP_BLOCK_EXPAND || code == DFL_OP_BLOCK_UNDROP;
  const dfl_tensor *full = T(c, outfull ? op->out[0] : op->in[0]);
  int Q = (int)full->shape[0], C = full->ndim == 2 ? (int)full->shape[1] : 1, B = op->a.B, R = Q / B;
  int dto = dt(c, op->out[0]);
  void *o = P(op->out[0]), *x = P(op->in[0]);
  const dfl_launch *l = dfl_cu_lowered(c, i, bwd ? 3 : 1); /* compiler/lower_launch.c lower_block_rows */
  if (!l) return DFL_ERR;
  long long rowb = (long long)C * (long long)dfl_dtype_size(full->dtype);
  int u = l[0].arg;
  if (((uintptr_t)o | (uintptr_t)x) & (u - 1)) {
    fprintf(stderr, "dflc: cuda backend: %s (%s): lowered for %d-byte units, its pointers are not\n", op->label,
            dfl_opcode_name(code), u);
    return DFL_ERR;
  }
  int nrows = (int)T(c, op->out[0])->shape[0], mode = code == DFL_OP_BLOCK_EXPAND ? 1 : code == DFL_OP_BLOCK_DROP ? 2
                                                    : code == DFL_OP_BLOCK_UNDROP ? 3 : 0;
  if (bwd) nrows = R; /* the head rows by BLOCK_ROWS's copy; then the MASK rows' sums */
  void *a[] = {&o, &x, &nrows, &rowb, &B, &R, &mode, &u};
  TRY(dfl_cu_launch(c, i, &l[0], a));
  if (!bwd) return DFL_OK;
  float *part = (float *)c->impl->ops[i].scratch;
  int Pn = l[1].grid_y, rpp = (Q + Pn - 1) / Pn, dti = dt(c, op->in[0]), v = l[1].arg;
  if (v && ((uintptr_t)x & 15)) {
    fprintf(stderr, "dflc: cuda backend: %s (%s): lowered for 16-byte rows, x is not\n", op->label, dfl_opcode_name(code));
    return DFL_ERR;
  }
  void *a1[] = {&part, &x, &dti, &Q, &C, &B, &rpp, &v};
  TRY(dfl_cu_launch(c, i, &l[1], a1));
  void *a2[] = {&o, &dto, &part, &Pn, &R, &C};
  return dfl_cu_launch(c, i, &l[2], a2);
}

/* Chunk rows r0 .. r0 + rn of the compact layout (anchor rows left out) between a full-layout tensor of
** rows of `words` 16-byte words and the staging rows: gathered into them (scatter 0) or back (1), by
** the chunk's lowered copy l. */
static int lce_stage(dfl_cuda *c, int i, const dfl_launch *l, char *full, char *stage, long long r0, int words, int per,
                     int scatter) {
  void *a[] = {&full, &stage, &r0, &words, &per, &scatter};
  return dfl_cu_launch(c, i, l, a);
}

int dfl_cu_linear_ce(dfl_cuda *c, int i) {
  const dfl_op *op = &c->g->ops[i];
  opstate *os = &c->impl->ops[i];
  const dfl_tensor *Y = T(c, op->in[0]), *W = T(c, op->in[1]);
  int R = (int)Y->shape[0], H = (int)Y->shape[1], V = (int)W->shape[0], rc = (int)os->lce.rows;
  int per = (int)os->lce.period, Ru = (int)os->lce.rows_used;
  void *logits = os->scratch + os->lce.lg_off;
  char *stage = os->scratch + os->lce.st_off;
  char *y = P(op->in[0]), *dy = P(op->out[4]);
  const void *wl = P(op->in[1]);
  void *labels = P(op->in[2]), *w = P(op->in[3]);
  float *ce = P(op->out[1]), *cor = P(op->out[2]), *hit = P(op->out[3]), *num = P(op->out[0]);
  long long ld = os->lce.ld;
  /* compiler/lower_rows.c lower_lce: the row kernel of a full and of the last chunk, the sum, and with
  ** the anchor rows left out the staging copies of a full and of the last chunk */
  const dfl_launch *l = dfl_cu_lowered(c, i, per > 1 ? 5 : 3);
  if (!l) return DFL_ERR;
  int dtl = (int)W->dtype, topk = op->a.topk, vec = l[0].arg & 1, tvec = l[0].arg >> 1 & 1;
  if (vec && ((uintptr_t)logits & 15)) {
    fprintf(stderr, "dflc: cuda backend: linear_ce (%s): lowered for 16-byte logit rows, its scratch is not\n", op->label);
    return DFL_ERR;
  }
  size_t ey = dfl_dtype_size(Y->dtype), ed = dfl_dtype_size(T(c, op->out[4])->dtype);
  struct dfl_cuda_impl *im = c->impl;
  int wy = (int)((size_t)H * ey / 16), wd = (int)((size_t)H * ed / 16);
  /* soft labels: the target's rows t (in[4], as y), their logits beside y's, each row's loss */
  char *tg = op->n_in == 5 ? P(op->in[4]) : NULL;
  void *tlogits = tg ? os->scratch + os->lce.tl_off : NULL;
  float *lrow = tg ? (float *)(os->scratch + os->lce.lr_off) : NULL;
  float alpha = (float)op->a.kd_alpha, temp = op->a.kd_temp > 0 ? (float)op->a.kd_temp : 1.f;
  if (per > 1) { /* the anchor rows are not computed: their outputs are 0 */
    if (lrow) CU(cudaMemsetAsync(lrow, 0, (size_t)R * 4, im->stream));
    CU(cudaMemsetAsync(ce, 0, (size_t)R * 4, im->stream));
    CU(cudaMemsetAsync(cor, 0, (size_t)R * 4, im->stream));
    CU(cudaMemsetAsync(hit, 0, (size_t)R * 4, im->stream));
    CU(cudaMemset2DAsync(dy, (size_t)per * H * ed, 0, (size_t)H * ed, (size_t)(R / per), im->stream));
  }
  for (int r0 = 0; r0 < Ru; r0 += rc) {
    int rn = Ru - r0 < rc ? Ru - r0 : rc, full = rn == rc, last = r0 + rc >= Ru;
    const dfl_launch *lk = &l[last], *lst = per > 1 ? &l[3 + last] : NULL;
    const void *ysrc = y + (size_t)r0 * H * ey;
    if (per > 1) {
      TRY(lce_stage(c, i, lst, y, stage, r0, wy, per, 0));
      ysrc = stage;
    }
    TRY(dfl_cu_mm_run(c, &os->mm[full ? 0 : 1], ysrc, wl, logits));
    if (tg) { /* the target's logits of the same rows: the same GEMM on t (through the staging rows, free
              ** again once y's GEMM has read them) */
      const void *tsrc = tg + (size_t)r0 * H * ey;
      if (per > 1) {
        TRY(lce_stage(c, i, lst, tg, stage, r0, wy, per, 0));
        tsrc = stage;
      }
      TRY(dfl_cu_mm_run(c, &os->mm[full ? 0 : 1], tsrc, wl, tlogits));
      if (tvec && ((uintptr_t)tlogits & 15)) {
        fprintf(stderr, "dflc: cuda backend: linear_ce (%s): lowered for 16-byte target logit rows, they are not\n",
                op->label);
        return DFL_ERR;
      }
      void *ak[] = {&logits, &tlogits, &ld, &V, &r0, &labels, &w, &ce, &cor, &hit, &lrow, &topk, &dtl, &tvec, &per,
                    &alpha, &temp};
      TRY(dfl_cu_launch(c, i, lk, ak));
    } else {
      void *a[] = {&logits, &ld, &V, &r0, &labels, &w, &ce, &cor, &hit, &topk, &dtl, &vec, &per};
      TRY(dfl_cu_launch(c, i, lk, a));
    }
    TRY(dfl_cu_mm_run(c, &os->mm[full ? 2 : 3], logits, wl, per > 1 ? (void *)stage : (void *)(dy + (size_t)r0 * H * ed)));
    if (per > 1) TRY(lce_stage(c, i, lst, dy, stage, r0, wd, per, 1));
  }
  float *lsum = lrow ? lrow : ce; /* soft labels: the weighted sum of each row's (1 - a) ce + a T^2 KL */
  void *an[] = {&num, &lsum, &w, &R};
  return dfl_cu_launch(c, i, &l[2], an);
}

