/*
** ops.c: each op's launch on the CUDA backend, cu_<name> for the op <name> of compiler/ops.def, and
** the table (cu_ops) generated from ops.def that dfl_cu_exec_op dispatches through: an op added to
** ops.def without its function here does not compile. The choices among an op's kernels follow from
** its shapes, dtypes and the architecture's row; the attention, the hybrid's mixers, RoPE, the loss
** head and the GEMMs have their own files (attention.c, hybrid.c, rope.c, loss.c, gemm.c); the
** pointwise ops run as their fusion group's generated kernel (pointwise.c).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/cuda/impl.h"

static int copy_conv(dfl_cuda *c, void *out, int dto, const void *x, int dtx, long long n) {
  if (dto == dtx) { CU(cudaMemcpyAsync(out, x, (size_t)n * dfl_dtype_size((dfl_dtype)dto), cudaMemcpyDeviceToDevice, c->impl->stream)); return DFL_OK; }
  void *a[] = {&out, &dto, &x, &dtx, &n};
  return launch(c, K_COPY, n, a);
}
/* SUM / SUMSQ: partials into scratch, one block adds them in a fixed order (deterministic). */
static int reduce(dfl_cuda *c, float *part, void *out, int dto, const void *x, int dtx, long long n, int sq, int acc) {
  int np = c->impl->nsm * 4 < DFL_RED_PARTS ? c->impl->nsm * 4 : DFL_RED_PARTS;
  if ((n + 255) / 256 < np) np = (int)((n + 255) / 256);
  if (np < 1) np = 1;
  void *a1[] = {&part, &x, &dtx, &n, &sq};
  TRY(launch2(c, K_RED_PART, np, 1, 256, 0, a1));
  void *a2[] = {&out, &dto, &part, &np, &acc};
  return launch2(c, K_RED_FINAL, 1, 1, 1024, 0, a2);
}

/* Each op's launch, cu_<name> (its name in compiler/ops.def), reached through cu_ops, the table
** generated from ops.def: an op without its function does not compile. A pointwise op runs as its
** fusion group's generated kernel (pointwise.c); its function here is reached only for a form or a
** dtype compiler/pointwise.def lacks. */
#define OP_LOCALS                                                                                           \
  const dfl_op *op = &c->g->ops[i];                                                                        \
  const dfl_attrs *at = &op->a;                                                                            \
  struct dfl_cuda_impl *im = c->impl;                                                                      \
  long long n = op->n_out > 0 ? (long long)numel(c, op->out[0]) : 0;                                       \
  int d0 = op->n_out > 0 ? dt(c, op->out[0]) : 0;                                                          \
  int d1 = op->n_in > 0 && op->in[0] >= 0 ? dt(c, op->in[0]) : 0;                                          \
  void *o0 = op->n_out > 0 ? P(op->out[0]) : NULL, *i0 = op->n_in > 0 && op->in[0] >= 0 ? P(op->in[0]) : NULL; \
  (void)op, (void)at, (void)im, (void)n, (void)d0, (void)d1, (void)o0, (void)i0

static int not_lowered(dfl_cuda *c, int i) {
  const dfl_op *op = &c->g->ops[i];
  fprintf(stderr, "dflc: cuda backend: op %s (%s): not lowered to a fusion group (compiler/lower.c "
                  "dfl_lower_pointwise: f32, bf16 and f16 tensors)\n", dfl_opcode_name(op->code), op->label);
  return DFL_ESHAPE;
}

/* An op whose launch compiler/lower_launch.c chose: its one launch */
#define LOWERED1(args) do { const dfl_launch *l_ = dfl_cu_lowered(c, i, 1); \
  return l_ ? dfl_cu_launch(c, i, l_, (args)) : DFL_ERR; } while (0)

static int cu_iota_mod(dfl_cuda *c, int i) {
  OP_LOCALS;
  int m = at->n; void *a[] = {&o0, &n, &m};
  LOWERED1(a);
}

static int cu_copy(dfl_cuda *c, int i) {
  OP_LOCALS;
  return copy_conv(c, o0, d0, i0, d1, n); /* same dtype: a plain device copy */
}

static int cu_concat_cols(dfl_cuda *c, int i) {
  OP_LOCALS;
  long long R = T(c, op->out[0])->shape[0], C = T(c, op->out[0])->shape[1], off = 0;
  const dfl_launch *l = dfl_cu_lowered(c, i, op->n_in);
  if (!l) return DFL_ERR;
  for (int k = 0; k < op->n_in; k++) {
    const dfl_tensor *X = T(c, op->in[k]);
    long long ck = X->shape[X->ndim - 1];
    void *x = P(op->in[k]); int dx = (int)X->dtype;
    void *a[] = {&o0, &d0, &C, &off, &x, &dx, &R, &ck};
    TRY(dfl_cu_launch(c, i, &l[k], a));
    off += ck;
  }
  return DFL_OK;
}

static int cu_swiglu(dfl_cuda *c, int i) {
  OP_LOCALS;
  void *u = P(op->in[1]); int du = dt(c, op->in[1]);
  if (op->n_out == 2) { /* quantized form (dfl_fuse_quant): a block per row */
    void *sc = P(op->out[1]);
    int C = (int)T(c, op->in[0])->shape[1], mid = at->mid_dtype;
    long long rows = T(c, op->in[0])->shape[0];
    const dfl_launch *l = dfl_cu_lowered(c, i, 1);
    if (!l) return DFL_ERR;
    void *ar[] = {&o0, &sc, &i0, &u, &rows, &C};  /* dfl_swiglu_qr: CTAs walk rows, the next in flight */
    void *a[] = {&o0, &sc, &i0, &d1, &u, &du, &C, &mid};
    return dfl_cu_launch(c, i, l, l->kernel == K_SWIGLU_QR || l->kernel == K_SWIGLU_QR1 ? ar : a);
  }
  return not_lowered(c, i);
}

static int cu_sum(dfl_cuda *c, int i) {
  OP_LOCALS;
  const dfl_launch *l = dfl_cu_lowered(c, i, 2);
  if (!l) return DFL_ERR;
  float *part = (float *)im->ops[i].scratch;
  long long nx = (long long)numel(c, op->in[0]);
  int np = (int)dfl_cu_grid(c, &l[0]), sq = 0, acc = 0;
  void *a1[] = {&part, &i0, &d1, &nx, &sq}, *a2[] = {&o0, &d0, &part, &np, &acc};
  TRY(dfl_cu_launch(c, i, &l[0], a1));
  return dfl_cu_launch(c, i, &l[1], a2);
}

static int cu_sumsq_acc(dfl_cuda *c, int i) {
  OP_LOCALS;
  return reduce(c, (float *)im->ops[i].scratch, o0, d0, P(op->in[1]), dt(c, op->in[1]), (long long)numel(c, op->in[1]), 1, 1);
}

static int cu_matmul(dfl_cuda *c, int i) {
  OP_LOCALS;
  /* beta 1: C = in[2], the accumulator (== out, dfl_fuse) or the addend (dfl_fuse_add) */
  return dfl_cu_mm_run_cd(c, &im->ops[i].mm[0], i0, P(op->in[1]), op->n_in == 3 && at->beta != 0 ? P(op->in[2]) : o0, o0);
}

static int cu_matmul_f8(dfl_cuda *c, int i) {
  OP_LOCALS;
  /* beta 1: C = in[4], the addend (dfl_fuse_add) */
  return dfl_cu_mm_run_cd(c, &im->ops[i].mm[0], i0, P(op->in[1]), op->n_in == 5 && at->beta != 0 ? P(op->in[4]) : o0, o0);
}

static int cu_quant_f8(dfl_cuda *c, int i) {
  OP_LOCALS;
  void *sc = P(op->out[1]);
  int C = (int)T(c, op->in[0])->shape[1];
  long long rows = T(c, op->in[0])->shape[0];
  const dfl_launch *l = dfl_cu_lowered(c, i, 1);
  if (!l) return DFL_ERR;
  void *ar[] = {&o0, &sc, &i0, &rows, &C}, *a[] = {&o0, &sc, &i0, &d1, &C};
  return dfl_cu_launch(c, i, l, l->kernel == K_QUANT_F8R ? ar : a);
}

static int cu_rmsnorm(dfl_cuda *c, int i) {
  OP_LOCALS;
  long long G = at->group, ng = (long long)numel(c, op->in[0]) / G;
  int Gi = (int)G, dw = dt(c, op->in[1]), V = Gi / 256; /* V: the warp kernels' vectors a lane */
  void *w = P(op->in[1]), *rs = P(op->out[1]);
  float eps = (float)at->eps;
  const dfl_launch *l = dfl_cu_lowered(c, i, 1);
  if (!l) return DFL_ERR;
  int k = l->kernel;
  if (op->n_out == 3) { /* quantized form (dfl_fuse_quant): a warp or a block per row */
    void *sc = P(op->out[2]);
    int mid = at->mid_dtype;
    void *ar[] = {&o0, &sc, &rs, &i0, &w, &ng, &Gi, &eps};               /* dfl_rmsnorm_qr */
    void *aw[] = {&o0, &sc, &rs, &i0, &w, &ng, &V, &eps};                /* dfl_rmsnorm_wq<8 V> */
    void *a[] = {&o0, &sc, &rs, &i0, &d1, &w, &dw, &Gi, &eps, &mid};     /* dfl_rmsnorm_q2, _q4 */
    return dfl_cu_launch(c, i, l, k == K_RMSNORM_QR || k == K_RMSNORM_QRF ? ar : k == K_RMSNORM_Q2 || k == K_RMSNORM_Q4 ? a : aw);
  }
  void *ar[] = {&o0, &rs, &i0, &w, &ng, &Gi, &eps};                      /* dfl_rmsnorm_r: rows walked, pipelined */
  void *aw[] = {&o0, &rs, &i0, &w, &ng, &V, &eps};                       /* dfl_rmsnorm_w<8 V> */
  void *a[] = {&o0, &d0, &rs, &i0, &d1, &w, &dw, &ng, &Gi, &eps};        /* dfl_rmsnorm, dfl_rmsnorm_v */
  return dfl_cu_launch(c, i, l, k == K_RMSNORM_R || k == K_RMSNORM_RF ? ar : k == K_RMSNORM || k == K_RMSNORM_V ? a : aw);
}

/* RMSNORM_BWD by its lowered launches (compiler/lower_rows.c): dx and the weight's partial sums into
** the op's scratch in l[0].arg parts (the pipelined, vector or per-group kernel), then their sum in
** order (dfl_rmsnorm_dw): deterministic for the part count the lowering fixed. */
static int cu_rmsnorm_bwd(dfl_cuda *c, int i) {
  OP_LOCALS;
  const dfl_launch *l = dfl_cu_lowered(c, i, 2);
  if (!l) return DFL_ERR;
  int Gi = at->group, np = l[0].arg, k = l[0].kernel; long long ng = (long long)numel(c, op->in[0]) / Gi;
  void *w = P(op->in[1]), *rs = P(op->in[2]), *dy = P(op->in[3]); float *dw = (float *)im->ops[i].scratch;
  void *ad = op->n_in == 5 ? P(op->in[4]) : NULL; /* the addend (dfl_fuse_add) */
  int dtw = dt(c, op->in[1]), ddy = dt(c, op->in[3]), dad = ad ? dt(c, op->in[4]) : d0;
  if (np < 1) {
    fprintf(stderr, "dflc: cuda backend: rmsnorm_bwd (%s): its parts were not lowered (%d)\n", op->label, np);
    return DFL_ERR;
  }
  if (k == K_RMSNORM_BWD_P || k == K_RMSNORM_BWD_PA) { /* blocks of C / 16 threads walk rows of C */
    int C = l[0].block * 16;
    long long nr = ng * Gi / C;
    void *ar[] = {&o0, &dw, &i0, &w, &rs, &dy, &ad, &nr, &np, &C, &Gi}, *ap[] = {&o0, &dw, &i0, &w, &rs, &dy, &nr, &np, &C, &Gi};
    TRY(dfl_cu_launch(c, i, &l[0], k == K_RMSNORM_BWD_PA ? ar : ap));
  } else {
    void *a[] = {&o0, &d0, &dw, &i0, &d1, &w, &dtw, &rs, &dy, &ddy, &ad, &dad, &ng, &Gi};
    TRY(dfl_cu_launch(c, i, &l[0], a));
  }
  void *wout = P(op->out[1]);
  int dto = dt(c, op->out[1]);
  void *a2[] = {&wout, &dto, &dw, &np, &Gi};
  return dfl_cu_launch(c, i, &l[1], a2);
}

static int cu_rope(dfl_cuda *c, int i) {
  OP_LOCALS;
  return dfl_cu_rope(c, i);
}

static int cu_conv1d_silu(dfl_cuda *c, int i) {
  OP_LOCALS;
  return dfl_cu_conv1d_silu(c, i);
}

static int cu_l2norm(dfl_cuda *c, int i) {
  OP_LOCALS;
  return dfl_cu_l2norm(c, i);
}

static int cu_gated_delta(dfl_cuda *c, int i) {
  OP_LOCALS;
  return dfl_cu_gated_delta(c, op);
}

static int cu_norm_gate(dfl_cuda *c, int i) {
  OP_LOCALS;
  return dfl_cu_norm_gate(c, i);
}

static int cu_gather(dfl_cuda *c, int i) {
  OP_LOCALS;
  const dfl_tensor *tb = T(c, op->in[0]);
  long long R = (long long)numel(c, op->in[1]); int H = (int)tb->shape[1], V = (int)tb->shape[0];
  void *ids = P(op->in[1]);
  void *a[] = {&o0, &d0, &i0, &d1, &ids, &R, &H, &V};
  LOWERED1(a);
}

static int cu_scatter_add(dfl_cuda *c, int i) {
  OP_LOCALS;
  const dfl_tensor *to = T(c, op->out[0]);
  long long R = (long long)numel(c, op->in[1]); int H = (int)to->shape[1], V = (int)to->shape[0];
  float *acc = d0 == DFL_F32 ? (float *)o0 : (float *)im->ops[i].scratch;
  void *ids = P(op->in[1]);
  /* compiler/lower_rows.c lower_scatter: the f32 sums, then (a 16-bit output) their conversion */
  const dfl_launch *l = dfl_cu_lowered(c, i, d0 == DFL_F32 ? 1 : 2);
  if (!l) return DFL_ERR;
  CU(cudaMemsetAsync(acc, 0, (size_t)V * H * 4, im->stream));
  void *a[] = {&acc, &i0, &d1, &ids, &R, &H, &V};
  TRY(dfl_cu_launch(c, i, &l[0], a));
  if (d0 == DFL_F32) return DFL_OK;
  long long nv = (long long)V * H;
  int df = DFL_F32;
  void *ac[] = {&o0, &d0, &acc, &df, &nv};
  return dfl_cu_launch(c, i, &l[1], ac);
}

static int cu_block_rows(dfl_cuda *c, int i) {
  OP_LOCALS;
  return dfl_cu_block_rows(c, i);
}

static int cu_block_expand(dfl_cuda *c, int i) {
  OP_LOCALS;
  return dfl_cu_block_rows(c, i);
}

static int cu_block_expand_bwd(dfl_cuda *c, int i) {
  OP_LOCALS;
  return dfl_cu_block_rows(c, i);
}

static int cu_block_drop(dfl_cuda *c, int i) {
  OP_LOCALS;
  return dfl_cu_block_rows(c, i);
}

static int cu_block_undrop(dfl_cuda *c, int i) {
  OP_LOCALS;
  return dfl_cu_block_rows(c, i);
}

static int cu_dflash_blocks(dfl_cuda *c, int i) {
  OP_LOCALS;
  void *pos = P(op->out[1]), *lab = P(op->out[2]), *w = P(op->out[3]), *lm = P(op->in[1]), *anc = P(op->in[2]),
       *kp = P(op->in[3]), *prev = op->n_out == 5 ? P(op->out[4]) : NULL; /* soft labels: the target's row */
  int batch = at->batch, S = at->S, N = at->N, B = at->B, mid = at->mask_id;
  float gm = (float)at->gamma;
  void *a[] = {&o0, &pos, &lab, &w, &i0, &lm, &anc, &kp, &batch, &S, &N, &B, &mid, &gm, &prev};
  LOWERED1(a);
}

static int cu_dflash_metrics(dfl_cuda *c, int i) {
  OP_LOCALS;
  void *w = P(op->in[1]), *hit = P(op->in[2]), *kp = P(op->in[3]);
  int batch = at->batch, N = at->N, B = at->B;
  void *a[] = {&o0, &i0, &w, &hit, &kp, &batch, &N, &B};
  LOWERED1(a);
}

static int cu_attention(dfl_cuda *c, int i) {
  OP_LOCALS;
  return dfl_cu_attention(c, i, 0, NULL, im->ops[i].tmaps);
}

static int cu_attention_bwd(dfl_cuda *c, int i) {
  OP_LOCALS;
  return dfl_cu_attention(c, i, 1, im->ops[i].scratch, im->ops[i].tmaps);
}

static int cu_linear_ce(dfl_cuda *c, int i) {
  OP_LOCALS;
  return dfl_cu_linear_ce(c, i);
}

static int cu_opt_prep(dfl_cuda *c, int i) {
  OP_LOCALS;
  void *sq = P(op->in[0]), *den = P(op->in[1]); int dd = dt(c, op->in[1]);
  float lr = (float)at->lr, clip = (float)at->clip, b1 = (float)at->beta1, b2 = (float)at->beta2;
  long long wu = at->warmup, tot = at->total; int sch = at->schedule;
  void *a[] = {&o0, &sq, &den, &dd, &lr, &wu, &tot, &sch, &clip, &b1, &b2};
  LOWERED1(a);
}

static int cu_adamw(dfl_cuda *c, int i) {
  OP_LOCALS;
  void *ms = P(op->in[1]), *m = P(op->in[2]), *v = P(op->in[3]), *gr = P(op->in[4]), *st = P(op->in[5]);
  int dg = dt(c, op->in[4]);
  float b1 = (float)at->beta1, b2 = (float)at->beta2, eps = (float)at->eps, wd = (float)at->wd;
  long long np = (long long)numel(c, op->in[0]);
  int keep = at->keep_grad;
  void *a[] = {&i0, &d1, &ms, &m, &v, &gr, &dg, &st, &b1, &b2, &eps, &wd, &np, &keep};
  if (im->ops[i].group >= 0) { /* a multi-tensor group's op, run alone (dfl_cuda_run_op) */
    return launch(c, K_ADAMW, np, a);
  }
  LOWERED1(a);
}


static int cu_add(dfl_cuda *c, int i) { return not_lowered(c, i); } /* pointwise: its group */

static int cu_swiglu_bwd(dfl_cuda *c, int i) { return not_lowered(c, i); } /* pointwise: its group */

static int cu_scale(dfl_cuda *c, int i) { return not_lowered(c, i); } /* pointwise: its group */

static int cu_accum(dfl_cuda *c, int i) { return not_lowered(c, i); } /* pointwise: its group */

static int cu_fill(dfl_cuda *c, int i) { return not_lowered(c, i); } /* pointwise: its group */

static int cu_gdn_gates(dfl_cuda *c, int i) { return not_lowered(c, i); } /* pointwise: its group */

static int cu_sigmoid_mul(dfl_cuda *c, int i) { return not_lowered(c, i); } /* pointwise: its group */

typedef int (*cu_op_fn)(dfl_cuda *c, int i);
static const cu_op_fn cu_ops[DFL_OP_COUNT] = {
#define DFL_OP(NAME, name, family, diff) [DFL_OP_##NAME] = cu_##name,
#include "compiler/ops.def"
#undef DFL_OP
};

int dfl_cu_exec_op(dfl_cuda *c, int i) {
  const dfl_op *op = &c->g->ops[i];
  if (c->impl->pw.of_op && c->impl->pw.of_op[i] >= 0) return dfl_cu_pw_run(c, i); /* a generated fusion group */
  if ((unsigned)op->code >= DFL_OP_COUNT) {
    fprintf(stderr, "dflc: cuda backend: op %d (%s): no such opcode\n", (int)op->code, op->label);
    return DFL_ERR;
  }
  return cu_ops[op->code](c, i);
}
