/*
** hybrid.c: the CUDA launches of the hybrid (Gated DeltaNet) target's ops and of partial RoPE
** (kernels/hybrid.cuh; contracts: compiler/ops.def). cuda.c's exec_op calls these.
*/
#include <stdio.h>
#include <stdint.h>
#include "runtime/cuda/cuda_internal.h"

#define HY_CHUNK_ROWS 64

/* The chunk path (kernels/hybrid.cuh gdn_prep + gdn_scan): dk in {32, 64, 128}, dv = dk or 2 dk, the scan's value
** tiles of bv columns. Shared memory: prep holds the K chunk, T diag(beta e^gamma) and T diag(beta) (Q's
** chunk, then T in f32, before them), A (f32; then the V chunk) and three per-row vectors; scan the K, Q and W chunks, M, a tile of U
** (then of O) and three per-row vectors. */
static int gdn_chunk_ok(int dk, int dv) { return (dk == 32 || dk == 64 || dk == 128) && (dv == dk || dv == 2 * dk); }
static int gdn_chunk_bv(int dk) { return dk == 32 ? 32 : 64; }
static size_t gdn_prep_smem(int dk, int dv) {
  const size_t C = HY_CHUNK_ROWS;
  const size_t a = C * (C + 4) * 4, vb = C * (dv + 8) * 2; /* A, then V in its place */
  return C * (dk + 8) * 2 + 2 * C * (C + 8) * 2 + (a > vb ? a : vb) + 3 * C * 4;
}
static size_t gdn_scan_smem(int dk, int bv) {
  const size_t C = HY_CHUNK_ROWS, sv = (size_t)bv + 8;
  return 3 * C * (dk + 8) * 2 + C * (C + 8) * 2 + C * sv * 2 + 3 * C * 4;
}
static int gdn_prep_kernel(int dk, int dv) {
  if (dv == 2 * dk) return dk == 32 ? K_GDN_PREP32V64 : dk == 64 ? K_GDN_PREP64V128 : K_GDN_PREP128V256;
  return dk == 32 ? K_GDN_PREP32 : dk == 64 ? K_GDN_PREP64 : K_GDN_PREP128;
}
static int gdn_scan_kernel(int dk) { return dk == 32 ? K_GDN_SCAN32 : dk == 64 ? K_GDN_SCAN64 : K_GDN_SCAN128; }

int dfl_cu_hybrid_load(dfl_cuda *c) {
  static const int dks[3] = {32, 64, 128};
  for (int i = 0; i < 3; i++) {
    size_t ss = gdn_scan_smem(dks[i], gdn_chunk_bv(dks[i]));
    if ((int)ss <= c->impl->smax)
      CU(cudaFuncSetAttribute((const void *)c->impl->k[gdn_scan_kernel(dks[i])],
                              cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ss));
    for (int x = 1; x <= 2; x++) {
      size_t sp = gdn_prep_smem(dks[i], x * dks[i]);
      if ((int)sp <= c->impl->smax)
        CU(cudaFuncSetAttribute((const void *)c->impl->k[gdn_prep_kernel(dks[i], x * dks[i])],
                                cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sp));
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
  void *y = P(op->out[0]), *x = P(op->in[0]), *z = P(op->in[1]), *w = P(op->in[2]);
  int dty = dt(c, op->out[0]), dtx = dt(c, op->in[0]), dtz = dt(c, op->in[1]), dtw = dt(c, op->in[2]);
  int G = op->a.group, L = G / 8;
  long long ng = (long long)numel(c, op->in[0]) / G, n8 = ng * L;
  float eps = (float)op->a.eps;
  void *a8[] = {&y, &dty, &x, &dtx, &z, &dtz, &w, &dtw, &n8, &L, &eps};
  void *a[] = {&y, &dty, &x, &dtx, &z, &dtz, &w, &dtw, &ng, &G, &eps};
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

/* GATED_DELTA: bf16 q, k, v with dk in {32, 64, 128}, dv = dk or 2 dk and 16-byte aligned rows take the chunk path
** (tensor cores): gdn_prep writes every chunk's W, U and M into the op's scratch (compiler/plan.c sizes it),
** then gdn_scan walks each sequence (a CTA per sequence, value head and tile of bv columns); everything
** else (f32 graphs, other head sizes) the per-token recurrence in f32, a warp per 32 value columns. */
int dfl_cu_gated_delta(dfl_cuda *c, const dfl_op *op) {
  const dfl_attrs *at = &op->a;
  void *o = P(op->out[0]), *q = P(op->in[0]), *k = P(op->in[1]), *v = P(op->in[2]);
  void *g = P(op->in[3]), *b = P(op->in[4]);
  int dto = dt(c, op->out[0]), dtq = dt(c, op->in[0]), dtk = dt(c, op->in[1]), dtv = dt(c, op->in[2]);
  int Hv = at->heads, Hk = at->kv_heads, dk = at->head_dim, S = at->S;
  long long R = T(c, op->in[0])->shape[0];
  int dv = (int)(numel(c, op->in[2]) / R / Hv);
  long long nseq = (R + S - 1) / S;
  int bv = gdn_chunk_bv(dk);
  int aligned = !(((uintptr_t)q | (uintptr_t)k | (uintptr_t)v) & 15);
  const int bf = gdn_chunk_ok(dk, dv) && dtq == DFL_BF16 && dtk == DFL_BF16 && dtv == DFL_BF16 && aligned;
  size_t sp = bf ? gdn_prep_smem(dk, dv) : 0, ss = bf ? gdn_scan_smem(dk, bv) : 0;
  void *scr = c->impl->ops[op - c->g->ops].scratch;
  size_t need = (size_t)R * Hv * (size_t)(dk + dv + HY_CHUNK_ROWS) * 2;
  if (bf && scr && (size_t)dfl_plan_cuda_op_scratch(c->g, op) >= need && (int)sp <= c->impl->smax &&
      (int)ss <= c->impl->smax) {
    unsigned short *wo = (unsigned short *)scr, *uo = wo + (size_t)R * Hv * dk, *mo = uo + (size_t)R * Hv * dv;
    int cps = (S + HY_CHUNK_ROWS - 1) / HY_CHUNK_ROWS;
    void *ap[] = {&wo, &uo, &mo, &q, &k, &v, &g, &b, &R, &S, &Hv, &Hk};
    TRY(launch2(c, gdn_prep_kernel(dk, dv), nseq * cps * Hv, 1, 128, sp, ap));
    void *as[] = {&o, &dto, &q, &k, &wo, &uo, &mo, &g, &R, &S, &Hv, &Hk, &dv};
    return launch2(c, gdn_scan_kernel(dk), nseq * Hv * (dv / bv), 1, 128, ss, as);
  }
  size_t smr = ((size_t)dk * 32 + 2 * (size_t)dk) * 4;
  if ((int)smr > c->impl->smax) {
    fprintf(stderr, "dflc: cuda backend: gated_delta (%s): head_dim %d needs %zu bytes of shared memory for its "
                    "state; this GPU gives a block %d\n", op->label, dk, smr, c->impl->smax);
    return DFL_ESHAPE;
  }
  void *a[] = {&o, &dto, &q, &dtq, &k, &dtk, &v, &dtv, &g, &b, &R, &S, &Hv, &Hk, &dk, &dv};
  return launch2(c, K_GDN_REC, nseq * Hv * ((dv + 31) / 32), 1, 32, smr, a);
}
