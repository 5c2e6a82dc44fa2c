/*
** lower_hybrid.c: the gated delta rule's launches (GATED_DELTA, kernels/hybrid.cuh), chosen at build time
** (lower_launch.h). bf16 q, k, v with dk in {32, 64, 128}, dv = dk or 2 dk, 16-byte aligned rows and the
** op's scratch planned (compiler/plan.c: W, U and M of every chunk) take the chunk path on tensor cores:
** gdn_prep (a CTA per chunk and value head) then gdn_scan (a CTA per sequence, value head and tile of bv
** value columns); anything else the per-token recurrence in f32 (a warp per 32 value columns), whose
** state must fit the target's shared memory. runtime/cuda/hybrid.c gathers the arguments and launches.
*/
#include <stdio.h>
#include "compiler/lower_internal.h"
#include "compiler/plan.h"
#include "compiler/status.h"

#define GDN_C 64 /* rows of a chunk (kernels/hybrid.cuh HY_C) */

static int chunk_ok(int dk, int dv) { return (dk == 32 || dk == 64 || dk == 128) && (dv == dk || dv == 2 * dk); }
int dfl_lower_gdn_bv(int dk) { return dk == 32 ? 32 : 64; }
/* prep: the K chunk, T diag(beta e^gamma) and T diag(beta) (Q's chunk, then T in f32, before them), A (f32;
** then the V chunk) and three per-row vectors */
int dfl_lower_gdn_prep_smem(int dk, int dv) {
  const int a = GDN_C * (GDN_C + 4) * 4, vb = GDN_C * (dv + 8) * 2;
  return GDN_C * (dk + 8) * 2 + 2 * GDN_C * (GDN_C + 8) * 2 + (a > vb ? a : vb) + 3 * GDN_C * 4;
}
/* scan: the K, Q and W chunks, M, a tile of U (then of O) and three per-row vectors */
int dfl_lower_gdn_scan_smem(int dk) {
  const int sv = dfl_lower_gdn_bv(dk) + 8;
  return 3 * GDN_C * (dk + 8) * 2 + GDN_C * (GDN_C + 8) * 2 + GDN_C * sv * 2 + 3 * GDN_C * 4;
}
int dfl_lower_gdn_prep_kernel(int dk, int dv) {
  if (dv == 2 * dk) return dk == 32 ? DFL_K_GDN_PREP32V64 : dk == 64 ? DFL_K_GDN_PREP64V128 : DFL_K_GDN_PREP128V256;
  return dk == 32 ? DFL_K_GDN_PREP32 : dk == 64 ? DFL_K_GDN_PREP64 : DFL_K_GDN_PREP128;
}
int dfl_lower_gdn_scan_kernel(int dk) { return dk == 32 ? DFL_K_GDN_SCAN32 : dk == 64 ? DFL_K_GDN_SCAN64 : DFL_K_GDN_SCAN128; }

static dfl_launch GL(int k, int64_t grid, int block, int smem, int vec) {
  return dfl_lower_rec(k, grid, 1, block, smem, DFL_FILL_NONE, vec);
}

int dfl_lower_gated_delta(const dfl_graph *g, int i, const dfl_lower_env *env, dfl_launch *out) {
  const dfl_op *op = &g->ops[i];
  const dfl_attrs *at = &op->a;
  const dfl_tensor *q = &g->t[op->in[0]], *k = &g->t[op->in[1]], *v = &g->t[op->in[2]];
  int Hv = at->heads, dk = at->head_dim, S = at->S;
  int64_t R = q->shape[0];
  int dv = (int)(dfl_tensor_numel(v) / R / Hv), smax = env ? env->smem : 0;
  int64_t nseq = (R + S - 1) / S, cps = (S + GDN_C - 1) / GDN_C;
  int bf = chunk_ok(dk, dv) && q->dtype == DFL_BF16 && k->dtype == DFL_BF16 && v->dtype == DFL_BF16 &&
           dfl_lower_al16(env, op->in[0]) && dfl_lower_al16(env, op->in[1]) && dfl_lower_al16(env, op->in[2]);
  int64_t need = R * Hv * (int64_t)(dk + dv + GDN_C) * 2;
  if (bf && dfl_plan_cuda_op_scratch(g, op) >= need && dfl_lower_gdn_prep_smem(dk, dv) <= smax &&
      dfl_lower_gdn_scan_smem(dk) <= smax) {
    out[0] = GL(dfl_lower_gdn_prep_kernel(dk, dv), nseq * cps * Hv, 128, dfl_lower_gdn_prep_smem(dk, dv), 1);
    out[1] = GL(dfl_lower_gdn_scan_kernel(dk), nseq * Hv * (dv / dfl_lower_gdn_bv(dk)), 128, dfl_lower_gdn_scan_smem(dk), 1);
    return 2;
  }
  int smr = (dk * 32 + 2 * dk) * 4; /* the state (dk x 32 floats) and the row's k and q */
  if (smr > smax) {
    fprintf(stderr, "dflc: lower: gated_delta (%s): head_dim %d needs %d bytes of shared memory for its state; the "
                    "target gives a block %d\n", op->label, dk, smr, smax);
    return -DFL_ESHAPE;
  }
  out[0] = GL(DFL_K_GDN_REC, nseq * Hv * ((dv + 31) / 32), 32, smr, 0);
  return 1;
}
