/*
** attention.c: the CUDA launches of ATTENTION and ATTENTION_BWD (kernels/attention.cuh; contracts:
** compiler/ops.def). Which kernel family takes an op (CUDA cores, mma.sync, Hopper wgmma), its grids,
** blocks and shared memory are its lowered launches (compiler/lower_attn.c, at init with this device's
** shared memory, attention family and SM count); here: the TMA tensor maps the wgmma kernels read (they
** hold pointers) and each kernel's arguments. cuda.c's exec_op calls these.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/impl.h"
#include "compiler/emit.h"
#include "compiler/plan.h"
#include "compiler/status.h"

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

/* Does op i run a wgmma kernel (it then needs its tensor maps; qdo: the key-major backward's too)? */
int dfl_cu_att_wgmma(dfl_cuda *c, int i, int *qdo) {
  const opstate *os = &c->impl->ops[i];
  *qdo = 0;
  for (int k = 0; k < os->nl; k++) *qdo |= os->l[k].kernel == K_ATT_BWDKV_WG128;
  return dfl_lower_att_family(os->l, os->nl) == DFL_ATT_WGMMA;
}

int dfl_cu_attention(dfl_cuda *c, int i, int bwd, char *scratch, void *tmaps) {
  const dfl_op *op = &c->g->ops[i];
  const dfl_attrs *a = &op->a;
  const dfl_launch *l = dfl_cu_lowered(c, i, bwd ? 2 : 1); /* compiler/lower_attn.c */
  if (!l) return DFL_ERR;
  int dfl = a->mask == DFL_MASK_DFLASH;
  void *q = P(op->in[0]), *k1 = P(op->in[1]), *v1 = P(op->in[2]);
  void *k2 = dfl ? P(op->in[3]) : NULL, *v2 = dfl ? P(op->in[4]) : NULL;
  void *anc = dfl ? P(op->in[5]) : NULL, *keep = dfl ? P(op->in[6]) : NULL;
  int dtq = dt(c, op->in[0]), mask = (int)a->mask, batch = a->batch, S = a->S, N = a->N, B = a->B, nh = a->heads,
      nkv = a->kv_heads, hd = a->head_dim, win = a->window;
  float scale = (float)a->scale;
  if (!bwd) { /* every forward kernel takes these; the wgmma ones their tensor maps in k2's place */
    void *o = P(op->out[0]), *lse = P(op->out[1]);
    void *args[] = {&o, &lse, &q, &k1, &v1, &k2, &v2, &anc, &keep, &dtq, &mask, &batch, &S, &N, &B, &nh, &nkv, &hd,
                    &win, &scale};
    if (dfl_lower_att_family(l, 1) == DFL_ATT_WGMMA) args[5] = &tmaps;
    return dfl_cu_launch(c, i, &l[0], args);
  }
  if (l[0].kernel == K_ATT_BWD) {
    /* the CUDA-core kernels: dQ query-major, then dK and dV key-major (a CTA per 32 keys of a segment):
    ** no atomics, so a run repeats bit for bit */
    int base = dfl ? 7 : 3;
    void *o = P(op->in[base]), *lse = P(op->in[base + 1]), *dout = P(op->in[base + 2]), *dq = P(op->out[0]);
    void *args[] = {&dq, &q, &k1, &v1, &k2, &v2, &anc, &keep, &o, &lse, &dout, &dtq, &mask, &batch, &S, &N, &B, &nh,
                    &nkv, &hd, &win, &scale};
    TRY(dfl_cu_launch(c, i, &l[0], args));
    void *dk1 = P(op->out[1]), *dv1 = P(op->out[2]), *dk2 = dfl ? P(op->out[3]) : NULL, *dv2 = dfl ? P(op->out[4]) : NULL;
    int dto = dt(c, op->out[1]);
    void *ak[] = {&dk1, &dv1, &dk2, &dv2, &dto, &q, &k1, &v1, &k2, &v2, &anc, &keep, &o, &lse, &dout, &dtq, &mask, &batch,
                  &S, &N, &B, &nh, &nkv, &hd, &win, &scale};
    return dfl_cu_launch(c, i, &l[1], ak);
  }
  /* tensor cores: D = rowsum(dO o) (l[0]), the query-major pass (l[1]), the key-major pass (l[2]; split in
  ** l[2].arg parts by the wgmma kernel, which l[3] adds when more than one) */
  if (!dfl_cu_lowered(c, i, 3)) return DFL_ERR;
  void *o = P(op->in[7]), *lse = P(op->in[8]), *dout = P(op->in[9]);
  void *dq = P(op->out[0]), *dkc = P(op->out[1]), *dvc = P(op->out[2]), *dkn = P(op->out[3]), *dvn = P(op->out[4]);
  float *D = (float *)scratch;
  long long pairs = (long long)numel(c, op->in[0]) / hd;
  void *ad[] = {&D, &o, &dout, &dtq, &pairs, &hd};
  TRY(dfl_cu_launch(c, i, &l[0], ad));
  void *aq[] = {&dq, &dkn, &dvn, &q, &k1, &v1, &k2, &v2, &anc, &keep, &lse, &D, &dout, &batch, &S, &N, &B, &nh,
                &nkv, &win, &scale};
  if (l[1].kernel == K_ATT_BWDQ_WG128) aq[6] = &tmaps; /* k2: the tensor maps */
  TRY(dfl_cu_launch(c, i, &l[1], aq));
  if (l[2].kernel == K_ATT_BWDKV_WG128) {
    int Pn = l[2].arg;
    if (Pn < 1 || !dfl_cu_lowered(c, i, 4)) {
      fprintf(stderr, "dflc: cuda backend: attention backward (%s): its key-major parts were not lowered (%d)\n",
              op->label, Pn);
      return DFL_ERR;
    }
    float *part = D + (pairs + 63) / 64 * 64; /* after D, 256-byte aligned (lower_attn.c bwdkv_parts) */
    void *aw[] = {&dkc, &dvc, &tmaps, &anc, &keep, &lse, &D, &batch, &S, &N, &B, &nh, &nkv, &win, &scale, &Pn, &part};
    TRY(dfl_cu_launch(c, i, &l[2], aw));
    if (Pn == 1) return DFL_OK;
    long long n = (long long)batch * S * nkv * 128;
    void *as[] = {&dkc, &dvc, &part, &Pn, &n};
    return dfl_cu_launch(c, i, &l[3], as);
  }
  void *ak[] = {&dkc, &dvc, &q, &k1, &v1, &anc, &keep, &lse, &D, &dout, &batch, &S, &N, &B, &nh, &nkv, &win, &scale};
  return dfl_cu_launch(c, i, &l[2], ak);
}
