/*
** lower_rows.c: the launches of the loss head (LINEAR_CE's row kernels, kernels/lce.cuh), SCATTER_ADD
** and the norm's backward (RMSNORM_BWD, kernels/rmsnorm.cuh), chosen at build time (lower_launch.h).
** The CUDA backend (runtime/cuda/loss.c, ops.c) gathers the arguments and launches what these say;
** the loss head's GEMMs stay cuBLASLt's.
*/
#include <stdio.h>
#include <string.h>
#include "compiler/lower_internal.h"
#include "compiler/plan.h"
#include "compiler/status.h"

static dfl_launch RL(int k, int64_t grid, int block, int smem, int fill, int vec) {
  return dfl_lower_rec(k, grid, 1, block, smem, fill, vec);
}

/* LINEAR_CE: the rows run in chunks of the plan's workspace (dfl_plan_lce_ws: rows per chunk, the last
** one shorter); per chunk cuBLASLt's logits, one CTA of 512 threads a row (dfl_lce_row, or dfl_lce_row_kd
** with the target's rows as soft labels), cuBLASLt's dy; then one CTA sums the loss (dfl_lce_num).
** Where the anchor rows are left out (period > 1) the chunk's rows are gathered into staging rows and
** dy scattered back (dfl_lce_rows, a CTA a row). The launches: [0] the row kernel of a full chunk, [1]
** of the last chunk, [2] the sum, and with staging [3] and [4] the copies of a full and of the last
** chunk. arg of [0] and [1]: bit 0 when the logits' rows are 16-byte words (V % 8 == 0, the head's dtype
** a float one; the scratch is 256-byte aligned, which the backend checks), bit 1 the target's logits'
** rows too (soft labels). */
static int lower_lce(const dfl_graph *g, const dfl_op *op, dfl_launch *out) {
  dfl_lce_ws ws;
  dfl_plan_lce_ws(g, op, &ws);
  const dfl_tensor *W = &g->t[op->in[1]];
  int64_t rc = ws.rows, last = ws.rows_used - (ws.rows_used - 1) / rc * rc, V = W->shape[0];
  int kd = op->n_in == 5, k = kd ? DFL_K_LCE_ROW_KD : DFL_K_LCE_ROW;
  dfl_dtype d = W->dtype;
  int vec = V % 8 == 0 && ws.lg_off % 16 == 0 && (d == DFL_BF16 || d == DFL_F16 || d == DFL_F32);
  out[0] = RL(k, rc, 512, 0, DFL_FILL_NONE, 0);
  out[1] = RL(k, last, 512, 0, DFL_FILL_NONE, 0);
  out[0].arg = out[1].arg = vec | (kd && vec && ws.tl_off % 16 == 0) << 1;
  out[2] = RL(DFL_K_LCE_NUM, 1, 1024, 0, DFL_FILL_NONE, 0);
  if (ws.period <= 1) return 3;
  out[3] = RL(DFL_K_LCE_ROWS, rc, 256, 0, DFL_FILL_NONE, 0);
  out[4] = RL(DFL_K_LCE_ROWS, last, 256, 0, DFL_FILL_NONE, 0);
  return 5;
}

/* SCATTER_ADD: a thread an element into an f32 accumulator (the output, or the op's scratch then
** converted into the output's dtype by dfl_copy) */
static int lower_scatter(const dfl_graph *g, const dfl_op *op, dfl_launch *out) {
  const dfl_tensor *to = &g->t[op->out[0]];
  int64_t n = dfl_tensor_numel(&g->t[op->in[1]]) * to->shape[1], nv = to->shape[0] * to->shape[1];
  out[0] = RL(DFL_K_SCATTER, (n + 255) / 256, 256, 0, DFL_FILL_OCC, 0);
  if (to->dtype == DFL_F32) return 1;
  out[1] = RL(DFL_K_COPY, (nv + 255) / 256, 256, 0, DFL_FILL_OCC, 0);
  return 2;
}

/* RMSNORM_BWD (kernels/rmsnorm.cuh). dx = out 0, x = in 0, w = in 1, dy = in 3, the addend in 4 (or dx
** again). The weight's gradient is summed from `parts` partial rows (arg of the first launch, at most
** DFL_RMS_PARTS) in order by dfl_rmsnorm_dw (the second launch): deterministic for a given part count.
**   - the pipelined kernel (rmsnorm_bwd_p, _pa with the addend): bf16 tensors, 16-byte aligned, groups
**     of whole rows of G = 512 V features (G <= 8192) or of G = 8 L features, L a power of two <= 32,
**     taken in rows of C = 4096 .. 512 (the largest that divides the tensor); its two row stages (+ dw
**     sums) must fit the target's shared memory less 1 KB. Blocks of C / 16 threads, as many as the SMs
**     hold at once, walk `parts` parts: at most as many as 128 SMs hold (the kernel's measured occupancy
**     at that block and shared memory), a power of two, so the parts, and the sums' order, are the same
**     on every part of one architecture; a build records them as DFL_ARG_AT_INIT;
**   - the vector kernel (dfl_rmsnorm_bwd_v): groups of 8 L features (rms_vec_block), 16-byte tensors of
**     f32, bf16 or f16, up to DFL_RMS_PARTS blocks;
**   - else a block a group (dfl_rmsnorm_bwd), up to DFL_RMS_PARTS blocks. */
static int rbw_vecs(const dfl_graph *g, const dfl_lower_env *env, const int *ts, int n, int bf16) {
  for (int k = 0; k < n; k++) {
    dfl_dtype d = g->t[ts[k]].dtype;
    if (!dfl_lower_al16(env, ts[k]) || (bf16 ? d != DFL_BF16 : (d != DFL_F32 && d != DFL_BF16 && d != DFL_F16))) return 0;
  }
  return 1;
}
static int rbw_row(int G, int64_t numel) {
  int L = G / 8;
  if (G % 512 == 0) return G <= 8192 ? G : 0;
  if (G % 8 || L < 1 || L > 32 || (L & (L - 1))) return 0;
  for (int C = 4096; C >= 512; C /= 2)
    if (numel % C == 0) return C;
  return 0;
}
static int lower_rmsnorm_bwd(const dfl_graph *g, const dfl_op *op, const dfl_lower_env *env, dfl_launch *out) {
  int G = (int)op->a.group, ad = op->n_in == 5;
  int64_t numel = dfl_tensor_numel(&g->t[op->in[0]]), ng = numel / G;
  int ts[] = {op->out[0], op->in[0], op->in[1], op->in[3], ad ? op->in[4] : op->out[0]};
  int C = rbw_vecs(g, env, ts, 5, 1) ? rbw_row(G, numel) : 0, np;
  int stg = ((ad ? 192 : 128) + (C != G ? 32 : 0)) * (C / 16); /* two row stages (+ dw sums) */
  int smax = env ? env->smem : 0;
  if (C && stg > smax - 1024) C = 0; /* they do not fit (RBP_SMEM: 1 KB left for its static array) */
  out[1] = RL(DFL_K_RMSNORM_DW, (G + 31) / 32, 1024, 0, DFL_FILL_NONE, 0);
  if (C) {
    int64_t nr = numel / C;
    int k = ad ? DFL_K_RMSNORM_BWD_PA : DFL_K_RMSNORM_BWD_P;
    if (!env || !env->occupancy || env->nsm <= 0) { /* a build: the parts follow the measured occupancy */
      out[0] = RL(k, nr < DFL_RMS_PARTS ? nr : DFL_RMS_PARTS, C / 16, stg, DFL_FILL_NONE, 1);
      out[0].arg = DFL_ARG_AT_INIT;
      return 2;
    }
    int occ = env->occupancy(env->occ_ctx, k, C / 16, stg), cap = DFL_RMS_PARTS;
    if (occ < 1) occ = 1;
    /* more parts than resident blocks left some blocks two parts, the rest one (the 27B's rows of 5120
    ** with the addend: 3 blocks an SM, 396 for 512 parts, 107.2 us; 384 parts 97.4, 256 parts 95.4:
    ** bench_memops). 128 SMs, not the device's count: the parts stay the same on every Hopper part. */
    if (cap > 128 * occ)
      for (cap = 1; 2 * cap <= 128 * occ;) cap *= 2; /* a power of two: equal parts of 2^k rows */
    np = (int)(nr < cap ? nr : cap);
    int64_t nb = (int64_t)env->nsm * occ;
    out[0] = RL(k, nb < np ? nb : np, C / 16, stg, DFL_FILL_NONE, 1);
    out[0].arg = np;
    return 2;
  }
  int L = G / 8, blk = 0;
  if (G % 8 == 0 && L >= 1 && rbw_vecs(g, env, ts, 5, 0))
    blk = L <= 32 ? ((L & (L - 1)) ? 0 : 512) : (L % 32 == 0 && L <= 1024 ? L : 0);
  if (blk) { /* up to 512 blocks (256 before session 10: a 27B per-head norm's 512-thread blocks filled half
             ** the SMs' threads) */
    int64_t per = blk / L, nb = (ng + per - 1) / per;
    np = (int)(nb < DFL_RMS_PARTS ? nb : DFL_RMS_PARTS);
    out[0] = RL(DFL_K_RMSNORM_BWD_V, np, blk, blk * 8 * 4, DFL_FILL_NONE, 1);
  } else {
    np = (int)(ng < DFL_RMS_PARTS ? ng : DFL_RMS_PARTS);
    out[0] = RL(DFL_K_RMSNORM_BWD, np, 256, 0, DFL_FILL_NONE, 0);
  }
  out[0].arg = np;
  return 2;
}

int dfl_lower_rows(const dfl_graph *g, int i, const dfl_lower_env *env, dfl_launch *out) {
  const dfl_op *op = &g->ops[i];
  switch (op->code) {
  case DFL_OP_LINEAR_CE: return lower_lce(g, op, out);
  case DFL_OP_SCATTER_ADD: return lower_scatter(g, op, out);
  case DFL_OP_RMSNORM_BWD: return lower_rmsnorm_bwd(g, op, env, out);
  default: return 0;
  }
}
