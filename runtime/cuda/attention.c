/*
** attention.c: the CUDA launches of ATTENTION and ATTENTION_BWD (kernels/attention.cuh; contracts:
** compiler/ops.def): which kernel family takes an op (CUDA cores, mma.sync, Hopper wgmma), its grid
** and shared memory, and the TMA tensor maps the wgmma kernels read. cuda.c's exec_op calls these.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/cuda_internal.h"
#include "compiler/emit.h"
#include "compiler/plan.h"
#include "compiler/status.h"

/* Parts of the wgmma key-major pass (nkt CTAs of 128 keys unsplit, the op's scratch holding D's dfloats
** floats first): enough CTAs for about two waves when one wave would be short of them, as many as
** the scratch holds (its CUDA-core-path dK/dV accumulators: 2 P f32 slabs of the context keys' dK and
** dV fit in it for P up to 4 when the blocks have as many rows as the context), at most 4. */
static int bwdkv_parts(dfl_cuda *c, const dfl_op *op, int64_t nkt, int64_t dfloats) {
  int64_t nsm = c->impl->nsm;
  int P = nkt * 2 < nsm * 3 ? (int)((2 * nsm + nkt - 1) / nkt) : 1;
  if (P > 4) P = 4;
  const int64_t slab = dfl_tensor_numel(&c->g->t[op->out[1]]) * 4, have = dfl_plan_cuda_op_scratch(c->g, op);
  while (P > 1 && dfloats * 4 + 2 * P * slab > have) P--;
  return P;
}

/* --- attention geometry (kernels/attention.cuh: units of rows sharing one key range) --- */
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
** frozen target needs no backward). Everything else, and every case with dfl_cuda_opts.att_ref, runs
** the CUDA-core kernels. The choice depends only on the graph, so a captured graph never changes it. */
typedef struct { int kfwd, frows, kbq, kbkv, kvkt, kvthr, nw, wg, wgq, wgkv; size_t sf, sq, skv; } att_tc_t; /* wg*: 0 or a K_* wgmma kernel */

/* Shared memory of the mma.sync key-major pass (tc_bwdkv<HD, KT, RG, NW>): K/V of KT keys, 2 stages of q/dO
** (RG rows), P^T and dS^T (KT x (RG + 8) bf16), row data, block list and its anchors, row tables. */
static size_t bwdkv_smem(size_t SR2, int KT, int RG, int N) {
  return (size_t)(2 * KT + 4 * RG) * SR2 + 2 * (size_t)KT * (RG + 8) * 2 + 6 * (size_t)RG * 4 + (2 * (size_t)N + 3 + 2 * 128) * 4;
}
static int att_tc(dfl_cuda *c, const dfl_op *op, att_tc_t *t) {
  const dfl_attrs *a = &op->a;
  struct dfl_cuda_impl *im = c->impl;
  int hd = a->head_dim, G = a->kv_heads > 0 ? a->heads / a->kv_heads : 0, dfl = a->mask == DFL_MASK_DFLASH;
  int bwd = op->code == DFL_OP_ATTENTION_BWD;
  /* head_dim 256: the CAUSAL forward only (the hybrid targets' gated attention; below) */
  if (im->att_ref || (hd != 64 && hd != 128 && !(hd == 256 && !dfl && !bwd)) || G < 1 || G > 128) return 0;
  if (bwd && !dfl) return 0;
  for (int k = 0; k < op->n_in; k++) {
    dfl_dtype d = T(c, op->in[k])->dtype;
    if (d != DFL_BF16 && d != DFL_I32 && !(d == DFL_F32 && bwd && k == 8)) return 0; /* in 8: lse */
    if (((uintptr_t)c->ptr[op->in[k]] & 15) != 0) return 0;
  }
  for (int k = 0; k < op->n_out; k++) {
    dfl_dtype d = T(c, op->out[k])->dtype;
    if (d != DFL_BF16 && !(!bwd && k == 1 && d == DFL_F32)) return 0;
    if (((uintptr_t)c->ptr[op->out[k]] & 15) != 0) return 0;
  }
  size_t SR2 = (size_t)(hd + 8) * 2; /* bytes per padded smem row */
  int P = dfl ? a->B * G : 0, R = dfl ? (P + 15) / 16 * 16 : 128;
  if (dfl && (P > 128 || a->B < 1)) return 0;
  t->nw = R / 16;
  t->frows = 128; /* rows of a forward CTA */
  t->kfwd = hd == 64 ? K_ATT_FWD_TC64 : K_ATT_FWD_TC128;
  t->kbq = hd == 64 ? K_ATT_BWDQ_TC64 : K_ATT_BWDQ_TC128;
  t->kbkv = hd == 64 ? K_ATT_BWDKV_TC64 : K_ATT_BWDKV_TC128;
  /* Hopper: the hd 128 forward by wgmma (kernels/attention.cuh, dfl_attn_fwd_wg128 for CAUSAL,
  ** dfl_attn_fwd_wgd128 for DFLASH, B G <= 128 as above): a TMA producer warpgroup and 2 consumer
  ** warpgroups of 64 rows per CTA, K/V tiles of 128 keys in NSTG K and NSTG V slots; t->sf is then
  ** its shared memory (Q, the slots, 4 NSTG mbarriers, + 1 KB to align the swizzled tiles to 1024
  ** bytes). Only where the kernels were built for sm_90a and the driver encodes tensor maps. */
  t->wg = t->wgq = t->wgkv = 0; t->sq = t->skv = 0;
  if (im->att_wg && im->tmap_encode && !bwd && hd == 128) {
    enum { KT = 128, NSTG = 2 }; /* as WG_FWD_KERNEL(dfl_attn_fwd_wg(d)128, ...) */
    size_t sf = 2 * 64 * 256 + 2 * (size_t)NSTG * KT * 256 + 4 * NSTG * 8 + 1024;
    if (sf <= (size_t)im->smax) { /* else the mma.sync kernel below */
      t->wg = !dfl ? K_ATT_FWD_WG128 : K_ATT_FWD_WGD128;
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
    if (im->att_wg && im->tmap_encode && sf <= (size_t)im->smax) {
      t->wg = K_ATT_FWD_WG256;
      t->sf = sf;
      return 1;
    }
    t->kfwd = K_ATT_FWD_TC256; t->frows = 64;
    t->sf = (64 + 4 * 32) * SR2;
    return t->sf <= (size_t)im->smax && G <= 64;
  }
  t->sf = (128 + 4 * 64) * SR2 + (4 * 128 + 4 * 8) * 4; /* Q (128 rows), 2 stages of K/V, row ranges, warp ranges */
  /* 99 KB parts (RTX PRO 6000, RTX 50, L40S, sm_86): the hd 128 forward with stages of 32 keys fits */
  if (hd == 128 && t->sf > (size_t)im->smax) {
    t->kfwd = K_ATT_FWD_TC128S;
    t->sf = (128 + 4 * 32) * SR2 + (4 * 128 + 4 * 8) * 4;
  }
  /* query-major pass: Q, dO (128 rows), 2 stages of K/V (32 keys), row ranges, lse and D, own-block P and dS
  ** (bf16); where that does not fit at head_dim 128 (99 KB parts), stages of 16 keys */
  t->sq = (2 * 128 + 4 * 32) * SR2 + (4 * 128 + 2 * 128) * 4 + 2 * 128 * (size_t)a->B * 2;
  if (hd == 128 && t->sq > (size_t)im->smax) {
    t->kbq = K_ATT_BWDQ_TC128S;
    t->sq -= 4 * 16 * SR2;
  }
  /* key-major pass: 128 keys a CTA of 8 warps, steps of 64 rows; where that does not fit (the A100's 163 KB,
  ** 99 KB parts), 64 keys a CTA of 4 warps, steps of 32 rows */
  t->kvkt = 128; t->kvthr = 256;
  t->skv = bwdkv_smem(SR2, 128, 64, a->N);
  if (t->skv > (size_t)im->smax) {
    t->kbkv = hd == 64 ? K_ATT_BWDKV_TC64S : K_ATT_BWDKV_TC128S;
    t->kvkt = 64; t->kvthr = 128;
    t->skv = bwdkv_smem(SR2, 64, 32, a->N);
  }
  if (t->sf > (size_t)im->smax || (bwd && (t->sq > (size_t)im->smax || t->skv > (size_t)im->smax))) return 0;
  /* Hopper: the query-major DFLASH backward by wgmma (dfl_attn_bwdq_wg128, the forward's structure and
  ** tensor maps; one unit per CTA): Q and dO (128 rows), NSTG K and V slots of 128 keys, 4 NSTG
  ** mbarriers, the own blocks' P and dS (bf16), + 1 KB of alignment. */
  if (bwd && im->att_wg && im->tmap_encode && hd == 128) {
    enum { KT = 128, NSTG = 2 }; /* as WQ_KT, WQ_NSTG */
    size_t sq = 4 * 64 * 256 + 2 * (size_t)NSTG * KT * 256 + 4 * NSTG * 8 + 2 * 128 * (size_t)a->B * 2 + 1024;
    if (sq <= (size_t)im->smax) { t->wgq = K_ATT_BWDQ_WG128; t->sq = sq; }
  }
  /* Hopper: the key-major pass by wgmma (dfl_attn_bwdkv_wg128): a producer warpgroup and 2 consumers of
  ** 64 keys, K/V of the 128 keys resident, NSTG slots of a 64-row group's Q and dO (TMA boxes of G heads x
  ** 64 / G positions: B G a multiple of 64, G a divisor of 64) and its row data; t->skv is then its shared
  ** memory (+ 1 KB to align the swizzled tiles, the mbarriers, the block list and its anchors). */
  if (bwd && im->att_wg && im->tmap_encode && hd == 128 && P % 64 == 0 && 64 % G == 0) {
    enum { NSTG = 2 }; /* as WG_BWDKV_KERNEL(dfl_attn_bwdkv_wg128, ...) */
    size_t nstg = NSTG, skv = 1024 + 2 * 128 * 256 + nstg * (2 * 64 * 256 + 3 * 64 * 4) + (1 + 2 * nstg) * 8 + (1 + 2 * (size_t)a->N) * 4;
    if (skv <= (size_t)im->smax) { t->wgkv = K_ATT_BWDKV_WG128; t->skv = skv; }
  }
  return 1;
}

/* The K and V tensor maps of dfl_attn_fwd_wg128, {dim, kv head, row} over [rows, nkv, 128] bf16, a box
** of {64, 1, 128}: one 64-dim half of a 128-key tile, 128-byte swizzled (the wgmma operand layout);
** DFLASH (dfl_attn_fwd_wgd128, dfl_attn_bwdq_wg128) adds the own keys k2 and v2 with a box of 32 rows
** (a unit's own keys are few: 2 blocks of 16 for the 8B drafter), and k1, v1 again with 32 rows (the
** forward's last context tile: 96 context keys and the own ones). With qdo (ATTENTION_BWD by
** dfl_attn_bwdkv_wg128) maps 6 and 7 are q and dO (inputs 0, 9), {dim, head, row} over [rows, nh, 128]
** with a box of {64, G, 64 / G}: one 64-dim half of a row group (64 / G positions x the kv head's G
** query heads). The pointers never change after init, so they are encoded once, into device memory
** (the kernels get them through an argument: k2 for the forward and the query-major pass). */
int dfl_cu_att_tmaps(dfl_cuda *c, const dfl_op *op, opstate *os, int qdo) {
  struct dfl_cuda_impl *im = c->impl;
  int nkv = op->a.kv_heads, nh = op->a.heads, hd = op->a.head_dim, G = nh / nkv;
  int nm = op->a.mask == DFL_MASK_DFLASH ? (qdo ? 8 : 6) : 2;
  CUtensorMap m[8];
  for (int i = 0; i < nm; i++) {
    int ti = i < 6 ? op->in[1 + i % 4] : op->in[i == 6 ? 0 : 9], hs = i < 6 ? nkv : nh; /* heads per row */
    cuuint64_t dim[3] = {(cuuint64_t)hd, (cuuint64_t)hs, (cuuint64_t)(numel(c, ti) / ((int64_t)hs * hd))};
    cuuint64_t stride[2] = {(cuuint64_t)hd * 2, (cuuint64_t)hs * hd * 2}; /* bytes, dims 1 and 2 */
    cuuint32_t kt = hd == 256 ? 64 : 128; /* dfl_attn_fwd_wg256's tiles are 64 keys */
    cuuint32_t box[3] = {64, i < 6 ? 1 : (cuuint32_t)G, i < 2 ? kt : i < 6 ? 32 : (cuuint32_t)(64 / G)}, es[3] = {1, 1, 1};
    CUresult r = im->tmap_encode(&m[i], CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, c->ptr[ti], dim, stride, box, es,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
      fprintf(stderr, "dflc: cuda backend: attention (%s): cuTensorMapEncodeTiled failed (%d)\n", op->label, (int)r);
      return DFL_ERR;
    }
  }
  CU(cudaMalloc(&os->tmaps, nm * sizeof m[0]));
  CU(cudaMemcpy(os->tmaps, m, nm * sizeof m[0], cudaMemcpyHostToDevice));
  return DFL_OK;
}

/* Does op run a wgmma kernel (it then needs its tensor maps; qdo: the key-major backward's too)? */
int dfl_cu_att_wgmma(dfl_cuda *c, const dfl_op *op, int *qdo) {
  att_tc_t t;
  if (!att_tc(c, op, &t)) return 0;
  *qdo = t.wgkv != 0;
  return t.wg || t.wgq || t.wgkv;
}

/* The kernel family that runs op (compiler/emit.h dfl_att_family; docs/gpus.md): what dfl_cuda_describe
** counts. */
int dfl_cu_att_family(dfl_cuda *c, const dfl_op *op) {
  att_tc_t t;
  if (!att_tc(c, op, &t)) return DFL_ATT_CORES;
  return t.wg || t.wgq || t.wgkv ? DFL_ATT_WGMMA : DFL_ATT_MMA;
}

/* At setup: an op left to the CUDA-core kernels whose shared memory this GPU (or a forced row) cannot
** give a block fails here, by name, instead of at the launch inside a graph capture: head_dim 256's
** backward (140,032 bytes) on a 99 KB part. */
int dfl_cu_att_check(dfl_cuda *c, const dfl_op *op) {
  att_tc_t t;
  if (att_tc(c, op, &t)) return DFL_OK;
  int64_t gx;
  int gy;
  size_t sf, sb;
  att_grid(&op->a, &gx, &gy, &sf, &sb);
  const int bwd = op->code == DFL_OP_ATTENTION_BWD;
  const size_t need = bwd ? sb : sf;
  if (need <= (size_t)c->impl->smax) return DFL_OK;
  fprintf(stderr, "dflc: cuda backend: attention%s (%s): head_dim %d on the CUDA-core kernels needs %zu bytes of "
                  "shared memory per block; %s%s gives %d: use a smaller head_dim or a GPU with more (docs/gpus.md)\n",
          bwd ? " backward" : "", op->label, op->a.head_dim, need, c->impl->gpu,
          c->impl->as_cc ? " (as the forced row)" : "", c->impl->smax);
  return DFL_ESHAPE;
}

int dfl_cu_attention(dfl_cuda *c, const dfl_op *op, int bwd, char *scratch, void *tmaps) {
  const dfl_attrs *a = &op->a;
  int64_t gx;
  int gy;
  size_t sf, sb;
  att_grid(a, &gx, &gy, &sf, &sb);
  int dfl = a->mask == DFL_MASK_DFLASH;
  void *q = P(op->in[0]), *k1 = P(op->in[1]), *v1 = P(op->in[2]);
  void *k2 = dfl ? P(op->in[3]) : NULL, *v2 = dfl ? P(op->in[4]) : NULL;
  void *anc = dfl ? P(op->in[5]) : NULL, *keep = dfl ? P(op->in[6]) : NULL;
  int dtq = dt(c, op->in[0]), mask = (int)a->mask, batch = a->batch, S = a->S, N = a->N, B = a->B, nh = a->heads,
      nkv = a->kv_heads, hd = a->head_dim, win = a->window;
  float scale = (float)a->scale;
  att_tc_t tc;
  if (att_tc(c, op, &tc)) {
    int G = nh / nkv;
    if (!bwd) {
      void *o = P(op->out[0]), *lse = P(op->out[1]);
      void *args[] = {&o, &lse, &q, &k1, &v1, &k2, &v2, &anc, &keep, &dtq, &mask, &batch, &S, &N, &B, &nh, &nkv, &hd,
                      &win, &scale};
      if (tc.wg) { /* wgmma: units of 128 / G positions (CAUSAL) or 128 / (B G) blocks (DFLASH), times the
                    ** kv heads, a consumer warpgroup per 64 rows + the producer; persistent: one CTA per
                    ** SM walks the units */
        int per = dfl ? 128 / (B * G) : 128 / G;
        int64_t units = (int64_t)batch * (((dfl ? N : S) + per - 1) / per) * nkv;
        args[5] = &tmaps; /* k2: the tensor maps */
        return launch2(c, tc.wg, units < c->impl->nsm ? units : c->impl->nsm, 1, 384, tc.sf, args);
      }
      /* 128-row CTAs (tc256: 64): DFLASH 128 / (B G) whole blocks, CAUSAL frows / G positions */
      int per = dfl ? 128 / (B * G) : tc.frows / G;
      int64_t units = (int64_t)batch * (((dfl ? N : S) + per - 1) / per);
      return launch2(c, tc.kfwd, units, nkv, 128, tc.sf, args);
    }
    void *o = P(op->in[7]), *lse = P(op->in[8]), *dout = P(op->in[9]);
    void *dq = P(op->out[0]), *dkc = P(op->out[1]), *dvc = P(op->out[2]), *dkn = P(op->out[3]), *dvn = P(op->out[4]);
    float *D = (float *)scratch;
    long long pairs = (long long)numel(c, op->in[0]) / hd;
    void *ad[] = {&D, &o, &dout, &dtq, &pairs, &hd};
    TRY(launch_warps(c, K_ATT_BWD_DOT, pairs, 0, ad));
    void *aq[] = {&dq, &dkn, &dvn, &q, &k1, &v1, &k2, &v2, &anc, &keep, &lse, &D, &dout, &batch, &S, &N, &B, &nh,
                  &nkv, &win, &scale};
    int per = 128 / (B * G); /* 128-row CTAs of whole blocks, as the forward */
    if (tc.wgq) { /* wgmma: a unit per CTA (kv heads interleaved), the producer + 2 consumer warpgroups */
      aq[6] = &tmaps; /* k2: the tensor maps */
      TRY(launch2(c, tc.wgq, (int64_t)batch * ((N + per - 1) / per) * nkv, 1, 384, tc.sq, aq));
    } else
      TRY(launch2(c, tc.kbq, (int64_t)batch * ((N + per - 1) / per), nkv, 128, tc.sq, aq));
    int64_t nkt = (int64_t)((S + 127) / 128) * batch * nkv; /* CTAs of 128 keys */
    if (tc.wgkv) {
      /* A tile's work falls linearly with its keys (fewer anchors lie past them): heaviest-first dispatch
      ** balances it over two or more waves, but one wave (the 27B's S 2048: 16 tiles x 8 kv heads on 132
      ** SMs) waits for the tile-0 CTAs at twice the average. Then each tile's walk is split into P parts
      ** (CTAs) writing f32 partial sums into the op's scratch after D, and dfl_attn_bwdkv_sum adds them. */
      const int64_t dfloats = (pairs + 63) / 64 * 64; /* D, then the parts' slabs 256-byte aligned */
      int P = bwdkv_parts(c, op, nkt, dfloats);
      float *part = D + dfloats;
      void *aw[] = {&dkc, &dvc, &tmaps, &anc, &keep, &lse, &D, &batch, &S, &N, &B, &nh, &nkv, &win, &scale, &P, &part};
      TRY(launch2(c, tc.wgkv, nkt * P, 1, 384, tc.skv, aw));
      if (P == 1) return DFL_OK;
      long long n = (long long)batch * S * nkv * 128;
      void *as[] = {&dkc, &dvc, &part, &P, &n};
      return launch(c, K_ATT_BWDKV_SUM, n / 2, as);
    }
    void *ak[] = {&dkc, &dvc, &q, &k1, &v1, &anc, &keep, &lse, &D, &dout, &batch, &S, &N, &B, &nh, &nkv, &win, &scale};
    nkt = (int64_t)((S + tc.kvkt - 1) / tc.kvkt) * batch * nkv; /* CTAs of kvkt keys */
    return launch2(c, tc.kbkv, nkt, 1, tc.kvthr, tc.skv, ak);
  }
  if (!bwd) {
    void *o = P(op->out[0]), *lse = P(op->out[1]);
    void *args[] = {&o, &lse, &q, &k1, &v1, &k2, &v2, &anc, &keep, &dtq, &mask, &batch, &S, &N, &B, &nh, &nkv, &hd,
                    &win, &scale};
    return launch2(c, K_ATT_FWD, gx, gy, 256, sf, args);
  }
  /* dQ query-major, then dK and dV key-major (a CTA per 32 keys of a segment): no atomics, so a run
  ** repeats bit for bit */
  int base = dfl ? 7 : 3;
  void *o = P(op->in[base]), *lse = P(op->in[base + 1]), *dout = P(op->in[base + 2]), *dq = P(op->out[0]);
  void *args[] = {&dq, &q, &k1, &v1, &k2, &v2, &anc, &keep, &o, &lse, &dout, &dtq, &mask, &batch, &S, &N, &B, &nh,
                  &nkv, &hd, &win, &scale};
  TRY(launch2(c, K_ATT_BWD, gx, gy, 256, sb, args));
  void *dk1 = P(op->out[1]), *dv1 = P(op->out[2]), *dk2 = dfl ? P(op->out[3]) : NULL, *dv2 = dfl ? P(op->out[4]) : NULL;
  int dto = dt(c, op->out[1]);
  int64_t tiles = (int64_t)batch * ((S + 31) / 32) + (dfl ? (int64_t)batch * N * ((B + 31) / 32) : 0);
  void *ak[] = {&dk1, &dv1, &dk2, &dv2, &dto, &q, &k1, &v1, &k2, &v2, &anc, &keep, &o, &lse, &dout, &dtq, &mask, &batch,
                &S, &N, &B, &nh, &nkv, &hd, &win, &scale};
  return launch2(c, K_ATT_BWD_KV, tiles, gy, 256, sb, ak);
}

