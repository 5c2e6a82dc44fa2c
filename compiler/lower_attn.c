/*
** lower_attn.c: ATTENTION and ATTENTION_BWD's launches, chosen at build time (lower_launch.h): which
** kernel family takes an op (CUDA cores, mma.sync, Hopper wgmma; kernels/attention.cuh), its grids,
** blocks and shared memory. The choice follows the target's row (dfl_lower_env: the shared memory a
** block may opt in to, whether the wgmma kernels exist) and, for the wgmma key-major backward's parts,
** the device's SM count. The CUDA backend (runtime/cuda/attention.c) gathers the arguments, builds the
** wgmma kernels' tensor maps (they hold pointers) and launches what the records say.
*/
#include <stdio.h>
#include <string.h>
#include "compiler/lower_internal.h"
#include "compiler/emit.h"
#include "compiler/plan.h"
#include "compiler/status.h"

static dfl_launch AL(int k, int64_t grid, int gy, int block, size_t smem, int fill, int vec) {
  return dfl_lower_rec(k, grid, gy, block, (int)smem, fill, vec);
}

/* --- the CUDA-core kernels' geometry (kernels/attention.cuh: units of rows sharing one key range) --- */
static void att_grid(const dfl_attrs *a, int64_t *gx, int *gy, size_t *smem_f, size_t *smem_b) {
  int G = a->heads / a->kv_heads, hd = a->head_dim;
  if (a->mask == DFL_MASK_DFLASH) {
    int chunks = (a->B * G + 31) / 32;
    *gx = (int64_t)a->batch * a->N * chunks;
  } else {
    int Tr = 32 / G < 1 ? 1 : 32 / G, chunks = (Tr * G + 31) / 32, ups = (a->S + Tr - 1) / Tr;
    *gx = (int64_t)a->batch * ups * chunks;
  }
  *gy = a->kv_heads;
  *smem_f = (size_t)(32 * hd + 32 * (hd + 1) + 32 * hd) * 4;
  *smem_b = (size_t)(2 * 32 * hd + 2 * 32 * (hd + 1) + 2 * 32 * 33 + 64) * 4;
}

/* Tensor-core attention (kernels/attention.cuh, second half): bf16 tensors, head_dim 64 or 128.
** DFLASH: forward and backward, B*G <= 128 rows per (block, kv head). CAUSAL: forward only (the
** frozen target needs no backward). Everything else, and every op of a target forced to the CUDA-core
** kernels (dfl_cuda_opts.att_ref: env->att DFL_ATT_CORES), runs the CUDA-core kernels. */
typedef struct { int kfwd, frows, kbq, kbkv, kvkt, kvthr, nw, wg, wgq, wgkv; size_t sf, sq, skv; } att_tc_t; /* wg*: 0 or a wgmma kernel */

/* Shared memory of the mma.sync key-major pass (tc_bwdkv<HD, KT, RG, NW>): K/V of KT keys, 2 stages of q/dO
** (RG rows), P^T and dS^T (KT x (RG + 8) bf16), row data, block list and its anchors, row tables. */
static size_t bwdkv_smem(size_t SR2, int KT, int RG, int N) {
  return (size_t)(2 * KT + 4 * RG) * SR2 + 2 * (size_t)KT * (RG + 8) * 2 + 6 * (size_t)RG * 4 + (2 * (size_t)N + 3 + 2 * 128) * 4;
}
static int att_tc(const dfl_graph *g, const dfl_op *op, const dfl_lower_env *env, att_tc_t *t) {
  const dfl_attrs *a = &op->a;
  const size_t smax = (size_t)env->smem;
  const int wgmma = env->att == DFL_ATT_WGMMA;
  int hd = a->head_dim, G = a->kv_heads > 0 ? a->heads / a->kv_heads : 0, dfl = a->mask == DFL_MASK_DFLASH;
  int bwd = op->code == DFL_OP_ATTENTION_BWD;
  /* head_dim 256: the CAUSAL forward only (the hybrid targets' gated attention; below) */
  if (env->att == DFL_ATT_CORES || (hd != 64 && hd != 128 && !(hd == 256 && !dfl && !bwd)) || G < 1 || G > 128) return 0;
  if (bwd && !dfl) return 0;
  for (int k = 0; k < op->n_in; k++) {
    dfl_dtype d = g->t[op->in[k]].dtype;
    if (d != DFL_BF16 && d != DFL_I32 && !(d == DFL_F32 && bwd && k == 8)) return 0; /* in 8: lse */
    if (!dfl_lower_al16(env, op->in[k])) return 0;
  }
  for (int k = 0; k < op->n_out; k++) {
    dfl_dtype d = g->t[op->out[k]].dtype;
    if (d != DFL_BF16 && !(!bwd && k == 1 && d == DFL_F32)) return 0;
    if (!dfl_lower_al16(env, op->out[k])) return 0;
  }
  size_t SR2 = (size_t)(hd + 8) * 2; /* bytes per padded smem row */
  int P = dfl ? a->B * G : 0, R = dfl ? (P + 15) / 16 * 16 : 128;
  if (dfl && (P > 128 || a->B < 1)) return 0;
  t->nw = R / 16;
  t->frows = 128; /* rows of a forward CTA */
  t->kfwd = hd == 64 ? DFL_K_ATT_FWD_TC64 : DFL_K_ATT_FWD_TC128;
  t->kbq = hd == 64 ? DFL_K_ATT_BWDQ_TC64 : DFL_K_ATT_BWDQ_TC128;
  t->kbkv = hd == 64 ? DFL_K_ATT_BWDKV_TC64 : DFL_K_ATT_BWDKV_TC128;
  /* Hopper: the hd 128 forward by wgmma (kernels/attention.cuh, dfl_attn_fwd_wg128 for CAUSAL,
  ** dfl_attn_fwd_wgd128 for DFLASH, B G <= 128 as above): a TMA producer warpgroup and 2 consumer
  ** warpgroups of 64 rows per CTA, K/V tiles of 128 keys in NSTG K and NSTG V slots; t->sf is then
  ** its shared memory (Q, the slots, 4 NSTG mbarriers, + 1 KB to align the swizzled tiles to 1024
  ** bytes). Only where the kernels were built for sm_90a and the driver encodes tensor maps. */
  t->wg = t->wgq = t->wgkv = 0; t->sq = t->skv = 0;
  if (wgmma && !bwd && hd == 128) {
    enum { KT = 128, NSTG = 2 }; /* as WG_FWD_KERNEL(dfl_attn_fwd_wg(d)128, ...) */
    size_t sf = 2 * 64 * 256 + 2 * (size_t)NSTG * KT * 256 + 4 * NSTG * 8 + 1024;
    if (sf <= smax) { /* else the mma.sync kernel below */
      t->wg = !dfl ? DFL_K_ATT_FWD_WG128 : DFL_K_ATT_FWD_WGD128;
      t->sf = sf;
      return 1;
    }
  }
  /* head_dim 256, CAUSAL (dfl_attn_fwd_wg256): the same structure with K/V tiles of 64 keys (2 K and 2 V
  ** slots of 32 KB beside 64 KB of Q); without Hopper's wgmma, the mma.sync kernel dfl_attn_fwd_tc256 (64
  ** rows a CTA, Q and two stages of 32 keys at 528 bytes a padded row: 99 KB), else the CUDA-core one */
  if (hd == 256) {
    enum { KT = 64, NSTG = 2 }; /* as WG_FWD_KERNEL(dfl_attn_fwd_wg256, ...) */
    size_t sf = 2 * 64 * 512 + 2 * (size_t)NSTG * KT * 512 + 4 * NSTG * 8 + 1024;
    if (wgmma && sf <= smax) {
      t->wg = DFL_K_ATT_FWD_WG256;
      t->sf = sf;
      return 1;
    }
    t->kfwd = DFL_K_ATT_FWD_TC256; t->frows = 64;
    t->sf = (64 + 4 * 32) * SR2;
    return t->sf <= smax && G <= 64;
  }
  t->sf = (128 + 4 * 64) * SR2 + (4 * 128 + 4 * 8) * 4; /* Q (128 rows), 2 stages of K/V, row ranges, warp ranges */
  /* 99 KB parts (RTX PRO 6000, RTX 50, L40S, sm_86): the hd 128 forward with stages of 32 keys fits */
  if (hd == 128 && t->sf > smax) {
    t->kfwd = DFL_K_ATT_FWD_TC128S;
    t->sf = (128 + 4 * 32) * SR2 + (4 * 128 + 4 * 8) * 4;
  }
  /* query-major pass: Q, dO (128 rows), 2 stages of K/V (32 keys), row ranges, lse and D, own-block P and dS
  ** (bf16); where that does not fit at head_dim 128 (99 KB parts), stages of 16 keys */
  t->sq = (2 * 128 + 4 * 32) * SR2 + (4 * 128 + 2 * 128) * 4 + 2 * 128 * (size_t)a->B * 2;
  if (hd == 128 && t->sq > smax) {
    t->kbq = DFL_K_ATT_BWDQ_TC128S;
    t->sq -= 4 * 16 * SR2;
  }
  /* key-major pass: 128 keys a CTA of 8 warps, steps of 64 rows; where that does not fit (the A100's 163 KB,
  ** 99 KB parts), 64 keys a CTA of 4 warps, steps of 32 rows */
  t->kvkt = 128; t->kvthr = 256;
  t->skv = bwdkv_smem(SR2, 128, 64, a->N);
  if (t->skv > smax) {
    t->kbkv = hd == 64 ? DFL_K_ATT_BWDKV_TC64S : DFL_K_ATT_BWDKV_TC128S;
    t->kvkt = 64; t->kvthr = 128;
    t->skv = bwdkv_smem(SR2, 64, 32, a->N);
  }
  if (t->sf > smax || (bwd && (t->sq > smax || t->skv > smax))) return 0;
  /* Hopper: the query-major DFLASH backward by wgmma (dfl_attn_bwdq_wg128, the forward's structure and
  ** tensor maps; one unit per CTA): Q and dO (128 rows), NSTG K and V slots of 128 keys, 4 NSTG
  ** mbarriers, the own blocks' P and dS (bf16), + 1 KB of alignment. */
  if (bwd && wgmma && hd == 128) {
    enum { KT = 128, NSTG = 2 }; /* as WQ_KT, WQ_NSTG */
    size_t sq = 4 * 64 * 256 + 2 * (size_t)NSTG * KT * 256 + 4 * NSTG * 8 + 2 * 128 * (size_t)a->B * 2 + 1024;
    if (sq <= smax) { t->wgq = DFL_K_ATT_BWDQ_WG128; t->sq = sq; }
  }
  /* Hopper: the key-major pass by wgmma (dfl_attn_bwdkv_wg128): a producer warpgroup and 2 consumers of
  ** 64 keys, K/V of the 128 keys resident, NSTG slots of a 64-row group's Q and dO (TMA boxes of G heads x
  ** 64 / G positions: B G a multiple of 64, G a divisor of 64) and its row data; t->skv is then its shared
  ** memory (+ 1 KB to align the swizzled tiles, the mbarriers, the block list and its anchors). */
  if (bwd && wgmma && hd == 128 && P % 64 == 0 && 64 % G == 0) {
    enum { NSTG = 2 }; /* as WG_BWDKV_KERNEL(dfl_attn_bwdkv_wg128, ...) */
    size_t nstg = NSTG, skv = 1024 + 2 * 128 * 256 + nstg * (2 * 64 * 256 + 3 * 64 * 4) + (1 + 2 * nstg) * 8 + (1 + 2 * (size_t)a->N) * 4;
    if (skv <= smax) { t->wgkv = DFL_K_ATT_BWDKV_WG128; t->skv = skv; }
  }
  return 1;
}

/* Parts of the wgmma key-major pass (nkt CTAs of 128 keys unsplit, the op's scratch holding D's dfloats
** floats first): enough CTAs for about two waves when one wave would be short of them, as many as
** the scratch holds (its CUDA-core-path dK/dV accumulators: 2 P f32 slabs of the context keys' dK and
** dV fit in it for P up to 4 when the blocks have as many rows as the context), at most 4. It follows
** the device's SM count: DFL_ARG_AT_INIT when the env has none (a build). */
static int bwdkv_parts(const dfl_graph *g, const dfl_op *op, int64_t nsm, int64_t nkt, int64_t dfloats) {
  if (nsm <= 0) return DFL_ARG_AT_INIT;
  int P = nkt * 2 < nsm * 3 ? (int)((2 * nsm + nkt - 1) / nkt) : 1;
  if (P > 4) P = 4;
  const int64_t slab = dfl_tensor_numel(&g->t[op->out[1]]) * 4, have = dfl_plan_cuda_op_scratch(g, op);
  while (P > 1 && dfloats * 4 + 2 * P * slab > have) P--;
  return P;
}

/* The tensor-core launches. Forward: one. Backward: D (a warp a row pair), the query-major pass, the
** key-major pass, and for the wgmma key-major pass split in P parts (arg) their sum (launched when the
** parts are more than one). */
static int att_tc_launch(const dfl_graph *g, const dfl_op *op, const dfl_lower_env *env, const att_tc_t *t, dfl_launch *out) {
  const dfl_attrs *a = &op->a;
  int dfl = a->mask == DFL_MASK_DFLASH, B = a->B, N = a->N, S = a->S, batch = a->batch, nkv = a->kv_heads;
  int G = a->heads / nkv;
  if (op->code == DFL_OP_ATTENTION) {
    if (t->wg) { /* wgmma: units of 128 / G positions (CAUSAL) or 128 / (B G) blocks (DFLASH), times the kv
                 ** heads, a consumer warpgroup per 64 rows + the producer; persistent: at most one CTA an
                 ** SM, each walking units */
      int per = dfl ? 128 / (B * G) : 128 / G;
      int64_t units = (int64_t)batch * (((dfl ? N : S) + per - 1) / per) * nkv;
      out[0] = AL(t->wg, units, 1, 384, t->sf, 1, 1);
      return 1;
    }
    /* 128-row CTAs (tc256: 64): DFLASH 128 / (B G) whole blocks, CAUSAL frows / G positions */
    int per = dfl ? 128 / (B * G) : t->frows / G;
    int64_t units = (int64_t)batch * (((dfl ? N : S) + per - 1) / per);
    out[0] = AL(t->kfwd, units, nkv, 128, t->sf, DFL_FILL_NONE, 1);
    return 1;
  }
  int64_t pairs = dfl_tensor_numel(&g->t[op->in[0]]) / a->head_dim;
  out[0] = AL(DFL_K_ATT_BWD_DOT, (pairs + 7) / 8, 1, 256, 0, DFL_FILL_OCC, 1);
  int per = 128 / (B * G); /* 128-row CTAs of whole blocks, as the forward */
  if (t->wgq) /* wgmma: a unit per CTA (kv heads interleaved), the producer + 2 consumer warpgroups */
    out[1] = AL(t->wgq, (int64_t)batch * ((N + per - 1) / per) * nkv, 1, 384, t->sq, DFL_FILL_NONE, 1);
  else
    out[1] = AL(t->kbq, (int64_t)batch * ((N + per - 1) / per), nkv, 128, t->sq, DFL_FILL_NONE, 1);
  if (!t->wgkv) {
    int64_t nkt = (int64_t)((S + t->kvkt - 1) / t->kvkt) * batch * nkv; /* CTAs of kvkt keys */
    out[2] = AL(t->kbkv, nkt, 1, t->kvthr, t->skv, DFL_FILL_NONE, 1);
    return 3;
  }
  /* A tile's work falls linearly with its keys (fewer anchors lie past them): heaviest-first dispatch
  ** balances it over two or more waves, but one wave (the 27B's S 2048: 16 tiles x 8 kv heads on 132
  ** SMs) waits for the tile-0 CTAs at twice the average. Then each tile's walk is split into P parts
  ** (CTAs) writing f32 partial sums into the op's scratch after D, and dfl_attn_bwdkv_sum adds them. */
  int64_t nkt = (int64_t)((S + 127) / 128) * batch * nkv; /* CTAs of 128 keys */
  const int64_t dfloats = (pairs + 63) / 64 * 64;          /* D, then the parts' slabs 256-byte aligned */
  int P = bwdkv_parts(g, op, env->nsm, nkt, dfloats);
  out[2] = AL(t->wgkv, nkt * (P > 0 ? P : 1), 1, 384, t->skv, DFL_FILL_NONE, 1);
  out[2].arg = P;
  out[3] = AL(DFL_K_ATT_BWDKV_SUM, ((int64_t)batch * S * nkv * 128 / 2 + 255) / 256, 1, 256, 0, DFL_FILL_OCC, 1);
  return 4;
}

int dfl_lower_attention(const dfl_graph *g, int i, const dfl_lower_env *env, dfl_launch *out) {
  const dfl_op *op = &g->ops[i];
  const dfl_attrs *a = &op->a;
  const int bwd = op->code == DFL_OP_ATTENTION_BWD, hd = a->head_dim;
  if (!env || env->smem <= 0) {
    fprintf(stderr, "dflc: lower: attention (%s): the target's shared memory per block is not known "
                    "(dfl_lower_env.smem: dfl_lower_env_arch)\n", op->label);
    return -DFL_ERR;
  }
  if (hd < 2 || hd % 2 || hd > 256 || a->kv_heads <= 0 || a->heads % a->kv_heads) {
    fprintf(stderr, "dflc: lower: attention (%s): head_dim %d must be even and <= 256, and heads a multiple of "
                    "kv_heads\n", op->label, hd);
    return -DFL_ESHAPE;
  }
  att_tc_t t;
  memset(&t, 0, sizeof t);
  if (att_tc(g, op, env, &t)) return att_tc_launch(g, op, env, &t, out);
  /* the CUDA-core kernels: 256 threads, a CTA per unit and kv head. Their shared memory must fit a
  ** block: head_dim 256's backward (140,032 bytes) does not on a 99 KB part. */
  int64_t gx;
  int gy;
  size_t sf, sb;
  att_grid(a, &gx, &gy, &sf, &sb);
  if ((bwd ? sb : sf) > (size_t)env->smem) {
    fprintf(stderr, "dflc: lower: attention%s (%s): head_dim %d on the CUDA-core kernels needs %zu bytes of shared "
                    "memory per block; the target gives %d: use a smaller head_dim or a GPU with more (docs/gpus.md)\n",
            bwd ? " backward" : "", op->label, hd, bwd ? sb : sf, env->smem);
    return -DFL_ESHAPE;
  }
  if (!bwd) {
    out[0] = AL(DFL_K_ATT_FWD, gx, gy, 256, sf, DFL_FILL_NONE, 0);
    return 1;
  }
  /* dQ query-major, then dK and dV key-major (a CTA per 32 keys of a segment): no atomics, so a run
  ** repeats bit for bit */
  int dfl = a->mask == DFL_MASK_DFLASH;
  int64_t tiles = (int64_t)a->batch * ((a->S + 31) / 32) + (dfl ? (int64_t)a->batch * a->N * ((a->B + 31) / 32) : 0);
  out[0] = AL(DFL_K_ATT_BWD, gx, gy, 256, sb, DFL_FILL_NONE, 0);
  out[1] = AL(DFL_K_ATT_BWD_KV, tiles, gy, 256, sb, DFL_FILL_NONE, 0);
  return 2;
}

int dfl_lower_att_family(const dfl_launch *l, int n) {
  int fam = DFL_ATT_CORES;
  for (int k = 0; k < n; k++) {
    int kk = l[k].kernel;
    if (kk >= DFL_K_ATT_FWD_WG128 && kk <= DFL_K_ATT_BWDKV_WG128) return DFL_ATT_WGMMA;
    if (kk >= DFL_K_ATT_FWD_TC64 && kk <= DFL_K_ATT_BWDQ_TC128S) fam = DFL_ATT_MMA;
  }
  return fam;
}
