/*
** hybrid.c: the CUDA launches of the hybrid (Gated DeltaNet) target's ops and of partial RoPE
** (kernels/hybrid.cuh; contracts: compiler/ops.def). cuda.c's exec_op calls these.
*/
#include <stdio.h>
#include <stdint.h>
#include "runtime/cuda/impl.h"

int dfl_cu_hybrid_load(dfl_cuda *c) { /* the chunk kernels' shared memory (compiler/lower_hybrid.c) */
  static const int dks[3] = {32, 64, 128};
  for (int i = 0; i < 3; i++) {
    int ss = dfl_lower_gdn_scan_smem(dks[i]);
    if (ss <= c->impl->smax)
      CU(cudaFuncSetAttribute((const void *)c->impl->k[dfl_lower_gdn_scan_kernel(dks[i])],
                              cudaFuncAttributeMaxDynamicSharedMemorySize, ss));
    for (int x = 1; x <= 2; x++) {
      int sp = dfl_lower_gdn_prep_smem(dks[i], x * dks[i]);
      if (sp <= c->impl->smax)
        CU(cudaFuncSetAttribute((const void *)c->impl->k[dfl_lower_gdn_prep_kernel(dks[i], x * dks[i])],
                                cudaFuncAttributeMaxDynamicSharedMemorySize, sp));
    }
  }
  /* the recurrence's state is dk x 32 floats: over 48 KiB from dk 384 */
  CU(cudaFuncSetAttribute((const void *)c->impl->k[K_GDN_REC], cudaFuncAttributeMaxDynamicSharedMemorySize, c->impl->smax));
  return DFL_OK;
}

/* A tensor the 16-byte kernels take: bf16 or f16, 16-byte aligned (ld8/st8's packed path). */
static int vec16(const void *p, int dt) { return (dt == DFL_BF16 || dt == DFL_F16) && !((uintptr_t)p & 15); }

/* CONV1D_SILU, L2NORM, NORM_GATE: the kernel compiler/lower_launch.c chose, with its arguments */
int dfl_cu_conv1d_silu(dfl_cuda *c, int i) {
  const dfl_op *op = &c->g->ops[i];
  const dfl_launch *l = dfl_cu_lowered(c, i, 1);
  if (!l) return DFL_ERR;
  void *x = P(op->in[0]), *w = P(op->in[1]);
  int dtx = dt(c, op->in[0]), dtw = dt(c, op->in[1]);
  long long R = T(c, op->in[0])->shape[0];
  int C = (int)T(c, op->in[0])->shape[1], K = (int)T(c, op->in[1])->shape[1], S = op->a.S;
  if (op->n_out == 3) { /* the split form: q|k|v in one pass, q and k L2-normalized in registers */
    void *q = P(op->out[0]), *k = P(op->out[1]), *v = P(op->out[2]);
    int dty = dt(c, op->out[0]), D = (int)T(c, op->out[0])->shape[1], G = op->a.group, L = G / 8;
    float eps = (float)op->a.eps, alpha = op->a.alpha == 0 ? 1.f : (float)op->a.alpha;
    void *a8[] = {&q, &k, &v, &dty, &x, &dtx, &w, &dtw, &R, &C, &D, &S, &L, &eps, &alpha};
    void *a[] = {&q, &k, &v, &dty, &x, &dtx, &w, &dtw, &R, &C, &D, &K, &S, &G, &eps, &alpha};
    return dfl_cu_launch(c, i, l, l->kernel == K_CONV_QKV_V8 ? a8 : a);
  }
  void *y = P(op->out[0]);
  int dty = dt(c, op->out[0]);
  /* 16-byte rows: the split form's kernel with no q or k (D = 0: every channel is v's; L = 1, unused) */
  int D = 0, L = 1;
  float eps = 0.f, alpha = 1.f;
  void *a8[] = {&y, &y, &y, &dty, &x, &dtx, &w, &dtw, &R, &C, &D, &S, &L, &eps, &alpha};
  void *a[] = {&y, &dty, &x, &dtx, &w, &dtw, &R, &C, &K, &S};
  return dfl_cu_launch(c, i, l, l->kernel == K_CONV_QKV_V8 ? a8 : a);
}

int dfl_cu_l2norm(dfl_cuda *c, int i) {
  const dfl_op *op = &c->g->ops[i];
  const dfl_launch *l = dfl_cu_lowered(c, i, 1);
  if (!l) return DFL_ERR;
  void *y = P(op->out[0]), *x = P(op->in[0]);
  int dty = dt(c, op->out[0]), dtx = dt(c, op->in[0]), G = op->a.group, L = G / 8;
  long long ng = (long long)numel(c, op->in[0]) / G, n8 = ng * L;
  float eps = (float)op->a.eps, alpha = op->a.alpha == 0 ? 1.f : (float)op->a.alpha;
  void *a8[] = {&y, &dty, &x, &dtx, &n8, &L, &eps, &alpha}, *a[] = {&y, &dty, &x, &dtx, &ng, &G, &eps, &alpha};
  return dfl_cu_launch(c, i, l, l->kernel == K_L2NORM_V8 ? a8 : a);
}

int dfl_cu_norm_gate(dfl_cuda *c, int i) {
  const dfl_op *op = &c->g->ops[i];
  const dfl_launch *l = dfl_cu_lowered(c, i, 1);
  if (!l) return DFL_ERR;
  void *y = P(op->out[0]), *x = P(op->in[0]), *w = P(op->in[2]);
  int dty = dt(c, op->out[0]), dtx = dt(c, op->in[0]), dtz = dt(c, op->in[1]), dtw = dt(c, op->in[2]);
  const dfl_tensor *tx = T(c, op->in[0]), *tz = T(c, op->in[1]);
  void *z = (char *)P(op->in[1]) + op->a.win[1] * (long long)dfl_dtype_size(tz->dtype); /* z's window */
  int G = op->a.group, L = G / 8;
  long long ng = (long long)numel(c, op->in[0]) / G, n8 = ng * L;
  long long zd = tx->shape[tx->ndim - 1], zs = tz->shape[tz->ndim - 1];
  float eps = (float)op->a.eps;
  void *a8[] = {&y, &dty, &x, &dtx, &z, &dtz, &w, &dtw, &n8, &L, &eps, &zd, &zs};
  void *a[] = {&y, &dty, &x, &dtx, &z, &dtz, &w, &dtw, &ng, &G, &eps, &zd, &zs};
  return dfl_cu_launch(c, i, l, l->kernel == K_NORM_GATE_V8 ? a8 : a);
}

int dfl_cu_rope_part(dfl_cuda *c, int i) {
  const dfl_op *op = &c->g->ops[i];
  const dfl_attrs *at = &op->a;
  const dfl_launch *l = dfl_cu_lowered(c, i, 1);
  if (!l) return DFL_ERR;
  void *o = P(op->out[0]), *x = P(op->in[0]), *pos = P(op->in[1]);
  int dto = dt(c, op->out[0]), dtx = dt(c, op->in[0]), nh = at->heads, hd = at->head_dim, rd = at->rot_dim;
  int inv = at->inverse;
  long long rows = (long long)numel(c, op->in[0]) / ((long long)nh * hd);
  double th = at->theta;
  if (l->kernel == K_ROPE_PN) { /* every form: plain, normed (in[2]), pair (x2 [, its weight], out[1]) */
    int pair = op->n_out == 2, normed = op->n_in == (pair ? 5 : 3), nh2 = pair ? at->kv_heads : 0;
    void *wn = normed ? P(op->in[2]) : NULL, *o2 = pair ? P(op->out[1]) : NULL;
    void *x2 = pair ? P(op->in[normed ? 3 : 2]) : NULL, *wn2 = pair && normed ? P(op->in[4]) : NULL;
    int dtw = normed ? dt(c, op->in[2]) : 0, mid = at->mid_dtype;
    float eps = (float)at->eps;
    void *a[] = {&o, &x, &wn, &nh, &o2, &x2, &wn2, &nh2, &dto, &dtx, &dtw, &mid, &pos, &rows, &hd, &rd, &th, &inv, &eps};
    return dfl_cu_launch(c, i, l, a);
  }
  void *a[] = {&o, &dto, &x, &dtx, &pos, &rows, &nh, &hd, &rd, &th, &inv}; /* dfl_rope_part */
  return dfl_cu_launch(c, i, l, a);
}

/* GATED_DELTA by the launches compiler/lower_hybrid.c chose: the chunk path (gdn_prep writes every chunk's W,
** U and M into the op's scratch, then gdn_scan walks each sequence) or the per-token recurrence in f32. */
int dfl_cu_gated_delta(dfl_cuda *c, const dfl_op *op) {
  const int i = (int)(op - c->g->ops);
  const dfl_attrs *at = &op->a;
  const dfl_launch *l = dfl_cu_lowered(c, i, 1);
  if (!l) return DFL_ERR;
  void *o = P(op->out[0]), *q = P(op->in[0]), *k = P(op->in[1]), *v = P(op->in[2]);
  void *g = P(op->in[3]), *b = P(op->in[4]);
  int dto = dt(c, op->out[0]), dtq = dt(c, op->in[0]), dtk = dt(c, op->in[1]), dtv = dt(c, op->in[2]);
  int Hv = at->heads, Hk = at->kv_heads, dk = at->head_dim, S = at->S;
  long long R = T(c, op->in[0])->shape[0];
  int dv = (int)(numel(c, op->in[2]) / R / Hv);
  if (l->kernel == K_GDN_REC) {
    void *a[] = {&o, &dto, &q, &dtq, &k, &dtk, &v, &dtv, &g, &b, &R, &S, &Hv, &Hk, &dk, &dv};
    return dfl_cu_launch(c, i, l, a);
  }
  void *scr = c->impl->ops[i].scratch;
  if (!(l = dfl_cu_lowered(c, i, 2)) || !scr) {
    fprintf(stderr, "dflc: cuda backend: gated_delta (%s): the chunk path was lowered but its scratch is missing\n",
            op->label);
    return DFL_ERR;
  }
  unsigned short *wo = (unsigned short *)scr, *uo = wo + (size_t)R * Hv * dk, *mo = uo + (size_t)R * Hv * dv;
  void *ap[] = {&wo, &uo, &mo, &q, &k, &v, &g, &b, &R, &S, &Hv, &Hk};
  TRY(dfl_cu_launch(c, i, &l[0], ap));
  void *as[] = {&o, &dto, &q, &k, &wo, &uo, &mo, &g, &R, &S, &Hv, &Hk, &dv};
  return dfl_cu_launch(c, i, &l[1], as);
}
