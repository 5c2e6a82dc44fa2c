/*
** cuda.c: the CUDA backend (see cuda.h): the arena, the kernels' load, each op's setup and launch.
** One stream; every op is one or a few kernel launches or cuBLASLt calls whose descriptors,
** algorithms and workspace were fixed at init (the pointwise ops: their fusion group's generated
** kernel, pointwise.c); capture.c records them into the graphs that dfl_cuda_run replays.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h> /* cuTensorMapEncodeTiled's type: reached through cudaGetDriverEntryPointByVersion */
#include "runtime/cuda/cuda_check.h"
#include <cublasLt.h>
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/impl.h"
#include "compiler/emit.h"
#include "compiler/plan.h"
#include "compiler/status.h"
#include "runtime/cpu/fp8.h"

#define ALIGN 256

/* The kernels' symbols (their ids: impl.h) */
static const char *kname[] = {
#define DFL_KERNEL(id, sym, fam) #sym,
#include "kernels/kernels.def"
#undef DFL_KERNEL
};

/* kernels/optim.cuh struct dfl_mt, by value: the multi-tensor AdamW / grad-norm launches */
#define MT_MAX DFL_MT_MAX
typedef struct {
  void *p[MT_MAX];
  float *ms[MT_MAX], *m[MT_MAX], *v[MT_MAX];
  void *g[MT_MAX];
  long long n[MT_MAX];
  long long ustart[MT_MAX + 1];
  int nt, dtp, dtg, keep_grad;
} mt_args;


static size_t align_up(size_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

size_t dfl_cuda_elem_size(const dfl_tensor *t, void *ctx) { (void)ctx; return dfl_dtype_size(t->dtype); }

int dfl_cuda_available(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) { cudaGetLastError(); return 0; }
  return n > 0;
}

float dfl_bf16_round(float x) { return dfl_bf16_rne(x); }

/* --- Which kernels a device gets (compiler/emit.c's table of architectures, docs/gpus.md) --- */
static int default_as_cc;
void dfl_cuda_set_default_as_cc(int cc) { default_as_cc = cc; }

typedef struct {
  int cc, smax;        /* the device's compute capability and opt-in shared memory per block */
  char gpu[64];        /* its name */
  dfl_gpu_arch dev;    /* its row: what the cubin is compiled for */
  dfl_gpu_arch sel;    /* the row kernels are picked by: dev's, or a forced as_cc's (never more than dev) */
  int forced;          /* sel is a forced row */
} gpu_choice;

/* The rows of device dev, as_cc forcing another (0: none). The forced row may take away what the device
** has (wgmma, FP8, shared memory), never add it: the kernels still run on this device. */
static int gpu_pick(int dev, int as_cc, gpu_choice *ch) {
  int maj = 0, min = 0;
  memset(ch, 0, sizeof *ch);
  CU(cudaDeviceGetAttribute(&maj, cudaDevAttrComputeCapabilityMajor, dev));
  CU(cudaDeviceGetAttribute(&min, cudaDevAttrComputeCapabilityMinor, dev));
  CU(cudaDeviceGetAttribute(&ch->smax, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  struct cudaDeviceProp pr;
  if (cudaGetDeviceProperties(&pr, dev) == cudaSuccess) snprintf(ch->gpu, sizeof ch->gpu, "%.63s", pr.name);
  else (void)cudaGetLastError(), snprintf(ch->gpu, sizeof ch->gpu, "GPU %d", dev);
  ch->cc = maj * 10 + min;
  char what[96];
  snprintf(what, sizeof what, "%s (device %d)", ch->gpu, dev);
  TRY(dfl_emit_gpu_for_cc(ch->cc, what, &ch->dev));
  return dfl_emit_gpu_force(&ch->dev, ch->smax, as_cc, ch->gpu, &ch->sel, &ch->forced);
}

static const char *att_name(int att) {
  return att == DFL_ATT_WGMMA ? "wgmma (head_dim 128; 256 causal forward) + mma.sync (64, 128)"
       : att == DFL_ATT_MMA   ? "mma.sync (head_dim 64, 128; 256 causal forward)"
                              : "CUDA cores";
}
/* wg: -1 from the row; 0 the row's wgmma is off (kernels not built for sm_90a, or no tensor-map encoder).
** natt: NULL, or the attention ops of a backend per family (dfl_att_family). */
static void describe(const gpu_choice *ch, const char *arch, int smax, int wg, const int *natt, char *buf, size_t cap) {
  char as[128] = "";
  if (ch->forced)
    snprintf(as, sizeof as, "; kernels picked as cc %d.%d, %s (forced)", ch->sel.cc / 10, ch->sel.cc % 10, ch->sel.gpus);
  int att = ch->sel.att == DFL_ATT_WGMMA && wg == 0 ? DFL_ATT_MMA : ch->sel.att;
  snprintf(buf, cap, "gpu: %s (cc %d.%d), cubin %s%s: attention %s where %d KB of shared memory per block holds it, "
                     "else CUDA cores%s; GEMMs cuBLASLt; FP8 GEMMs %s",
           ch->gpu, ch->cc / 10, ch->cc % 10, arch, as, att_name(att), smax / 1024,
           att != ch->sel.att ? " (wgmma off: no sm_90a cubin or no tensor-map encoder)" : "",
           ch->sel.fp8 ? "yes" : ch->dev.fp8 ? "no (the forced row has none)" : "no (needs cc 8.9)");
  size_t n = strlen(buf);
  if (natt && n < cap)
    snprintf(buf + n, cap - n, "; attention ops: %d wgmma, %d mma.sync, %d CUDA cores", natt[DFL_ATT_WGMMA],
             natt[DFL_ATT_MMA], natt[DFL_ATT_CORES]);
}

int dfl_cuda_describe_device(char *buf, size_t cap) {
  int dev = 0;
  gpu_choice ch;
  if (!dfl_cuda_available()) {
    snprintf(buf, cap, "gpu: none");
    return DFL_ERR;
  }
  CU(cudaGetDevice(&dev));
  TRY(gpu_pick(dev, default_as_cc, &ch));
  describe(&ch, ch.dev.arch, ch.forced && ch.sel.smem < ch.smax ? ch.sel.smem : ch.smax, -1, NULL, buf, cap);
  return DFL_OK;
}

int dfl_cuda_describe(const dfl_cuda *c, char *buf, size_t cap) {
  const struct dfl_cuda_impl *im = c->impl;
  if (!im || !im->cc) { snprintf(buf, cap, "gpu: not initialized"); return DFL_ERR; }
  gpu_choice ch;
  memset(&ch, 0, sizeof ch);
  ch.cc = im->cc;
  snprintf(ch.gpu, sizeof ch.gpu, "%s", im->gpu);
  if (dfl_emit_gpu_for_cc(im->cc, im->gpu, &ch.dev)) return DFL_ERR;
  ch.sel = ch.dev;
  if (im->as_cc && im->as_cc != im->cc) {
    if (dfl_emit_gpu_for_cc(im->as_cc, "the forced row", &ch.sel)) return DFL_ERR;
    ch.forced = 1;
  }
  ch.sel.fp8 = im->fp8;
  int natt[3] = {0, 0, 0};
  for (int i = 0; i < c->g->nops; i++)
    if (c->g->ops[i].code == DFL_OP_ATTENTION || c->g->ops[i].code == DFL_OP_ATTENTION_BWD)
      natt[dfl_lower_att_family(im->ops[i].l, im->ops[i].nl)]++;
  describe(&ch, im->arch, im->smax, im->att_wg && im->tmap_encode, natt, buf, cap);
  size_t used = strlen(buf);
  if (used + 2 < cap) {
    snprintf(buf + used, cap - used, "; ");
    dfl_cu_tune_describe(c, buf + used + 2, cap - used - 2);
  }
  return DFL_OK;
}

static int load_kernels(dfl_cuda *c, const char *arch) {
  struct dfl_cuda_impl *im = c->impl;
  char *src = NULL;
  void *cubin = NULL;
  size_t n = 0;
  int cached = 0;
  TRY(dfl_emit_source(NULL, DFL_KF_ALL, &src, NULL));
  int rc = dfl_nvrtc_compile(src, arch, NULL, &cubin, &n, &cached);
  free(src);
  if (rc) return rc;
  cudaError_t e = cudaLibraryLoadData(&im->lib, cubin, NULL, NULL, 0, NULL, NULL, 0);
  free(cubin);
  if (e != cudaSuccess) {
    fprintf(stderr, "%s:%d: cudaLibraryLoadData(%s cubin) failed: %s\n", __FILE__, __LINE__, arch, cudaGetErrorString(e));
    return DFL_ERR;
  }
  for (int k = 0; k < K_COUNT; k++) {
    CU(cudaLibraryGetKernel(&im->k[k], im->lib, kname[k]));
    /* kernels bounded below 256 threads (never launched by launch()) report an error or 0: 8, unused */
    int nb = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, (const void *)im->k[k], 256, 0) != cudaSuccess || nb < 1)
      (void)cudaGetLastError(), nb = 8;
    im->occ[k] = (unsigned char)(nb > 8 ? 8 : nb);
  }
  /* attention needs more than the default 48 KB of dynamic shared memory for hd = 128 */
  int smax = 0, dev = 0;
  CU(cudaGetDevice(&dev)); /* the backend's device (dfl_cuda_init_opts), not device 0 */
  CU(cudaDeviceGetAttribute(&smax, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  /* a forced row (dfl_cuda_opts.as_cc) with less shared memory: the kernels that fit there (compiler/lower_attn.c att_tc) */
  if (im->as_cc && im->smax > 0 && im->smax < smax) smax = im->smax;
  int sneed = (2 * 32 * 256 + 2 * 32 * 257 + 2 * 32 * 33 + 64) * 4;
  if (sneed > smax) sneed = smax;
  CU(cudaFuncSetAttribute((const void *)im->k[K_ATT_FWD], cudaFuncAttributeMaxDynamicSharedMemorySize, sneed));
  CU(cudaFuncSetAttribute((const void *)im->k[K_ATT_BWD], cudaFuncAttributeMaxDynamicSharedMemorySize, sneed));
  CU(cudaFuncSetAttribute((const void *)im->k[K_ATT_BWD_KV], cudaFuncAttributeMaxDynamicSharedMemorySize, sneed));
  im->smax = smax;
  TRY(dfl_cu_hybrid_load(c));
  for (int k = K_ATT_FWD_TC64; k <= K_ATT_BWDQ_TC128S; k++)
    CU(cudaFuncSetAttribute((const void *)im->k[k], cudaFuncAttributeMaxDynamicSharedMemorySize, smax));
  /* the RMSNorm backward's row stages; compiler/lower_rows.c checks a row's fit */
  CU(cudaFuncSetAttribute((const void *)im->k[K_RMSNORM_BWD_P], cudaFuncAttributeMaxDynamicSharedMemorySize, RBP_SMEM(smax)));
  CU(cudaFuncSetAttribute((const void *)im->k[K_RMSNORM_BWD_PA], cudaFuncAttributeMaxDynamicSharedMemorySize, RBP_SMEM(smax)));
  for (int k = K_ATT_FWD_WG128; k <= K_ATT_BWDKV_WG128; k++)
    CU(cudaFuncSetAttribute((const void *)im->k[k], cudaFuncAttributeMaxDynamicSharedMemorySize, smax));
  /* the wgmma attention kernels where the row has them (Hopper, not forced off) and the cubin holds
  ** them (sm_90a: elsewhere they are stubs); else the mma.sync ones (compiler/lower_attn.c att_tc) */
  im->att_wg = im->att_wg && !strcmp(arch, "sm_90a");
  im->tmap_encode = NULL;
  if (im->att_wg) {
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult qr;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &qr) == cudaSuccess &&
        qr == cudaDriverEntryPointSuccess)
      im->tmap_encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
    else
      cudaGetLastError();
  }
  return DFL_OK;
}

/* The CTAs of block threads with smem bytes of dynamic shared memory an SM holds at once of kernel k:
** what a lowering that follows the measured occupancy asks (dfl_lower_env.occupancy) */
static int occupancy(void *ctx, int k, int block, int smem) {
  struct dfl_cuda_impl *im = ctx;
  int nb = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, (const void *)im->k[k], block, (size_t)smem) != cudaSuccess)
    (void)cudaGetLastError(), nb = 0;
  return nb < 1 ? 1 : nb;
}

/* Each op's launches, chosen from its shapes, dtypes and placed offsets (compiler/lower_launch.c, the
** choice `dflc build` lists in kernels.txt) and this device: its opt-in shared memory (or a forced
** row's), the attention kernels it runs, its SMs and its kernels' occupancy. After load_kernels, which
** settles those. A pointwise op of a fusion group launches its group. */
static int lower_ops(dfl_cuda *c, const int64_t *off) {
  struct dfl_cuda_impl *im = c->impl;
  dfl_lower_env env = {off, im->smax, im->att_ref ? DFL_ATT_CORES : im->att_wg && im->tmap_encode ? DFL_ATT_WGMMA
                                                                                                   : DFL_ATT_MMA,
                       im->nsm, occupancy, im};
  dfl_launch l[DFL_LAUNCH_MAX];
  for (int i = 0; i < c->g->nops; i++) {
    int n = dfl_lower_launch(c->g, i, &env, l);
    if (n < 0) return -n;
    if (n == 0) continue;
    opstate *os = &c->impl->ops[i];
    if (!(os->l = malloc(sizeof *l * (size_t)n))) return DFL_ENOMEM;
    memcpy(os->l, l, sizeof *l * (size_t)n);
    os->nl = n;
  }
  return DFL_OK;
}

static int setup_op(dfl_cuda *c, int i) {
  const dfl_op *op = &c->g->ops[i];
  opstate *os = &c->impl->ops[i];
  const dfl_tensor *t = c->g->t;
  if (op->code == DFL_OP_MATMUL) {
    const dfl_tensor *A = &t[op->in[0]], *B = &t[op->in[1]], *C = &t[op->out[0]];
    int M = (int)C->shape[0], N = (int)C->shape[1], K = (int)(op->a.trans_a ? A->shape[0] : A->shape[1]);
    float alpha = op->a.alpha == 0 ? 1.f : (float)op->a.alpha;
    return dfl_cu_mm_setup(c, &os->mm[0], op->a.trans_a, op->a.trans_b, M, N, K, A->dtype, B->dtype, C->dtype,
                    (int)A->shape[1], (int)B->shape[1], N, alpha, (float)op->a.beta); /* beta 1: fused accumulate */
  }
  if (op->code == DFL_OP_MATMUL_F8) {
    const dfl_tensor *X = &t[op->in[0]], *W = &t[op->in[1]];
    return dfl_cu_mm_setup_f8(c, &os->mm[0], (int)X->shape[0], (int)W->shape[0], (int)X->shape[1], t[op->out[0]].dtype,
                       (const float *)P(op->in[2]), (const float *)P(op->in[3]), (float)op->a.beta, op->a.fast_accum,
                       op->label);
  }
  if (op->code == DFL_OP_LINEAR_CE && op->n_in == 5) { /* soft labels: the target's rows as y, same GEMMs */
    const dfl_tensor *Y = &t[op->in[0]], *Tg = &t[op->in[4]];
    if (Tg->dtype != Y->dtype || Tg->ndim != 2 || Tg->shape[0] != Y->shape[0] || Tg->shape[1] != Y->shape[1]) {
      fprintf(stderr, "dflc: cuda backend: linear_ce (%s): the target's rows must be y's shape and dtype (%s)\n",
              op->label, dfl_dtype_name(Y->dtype));
      return DFL_ESHAPE;
    }
  }
  if (op->code == DFL_OP_LINEAR_CE) {
    const dfl_tensor *Y = &t[op->in[0]], *W = &t[op->in[1]], *DY = &t[op->out[4]];
    int H = (int)Y->shape[1], V = (int)W->shape[0];
    if (Y->dtype != W->dtype) {
      fprintf(stderr, "dflc: cuda backend: linear_ce (%s): y is %s but lm_head is %s\n", op->label,
              dfl_dtype_name(Y->dtype), dfl_dtype_name(W->dtype));
      return DFL_ESHAPE;
    }
    dfl_plan_lce_ws(c->g, op, &os->lce);
    int rc = (int)os->lce.rows, tail = (int)(os->lce.rows_used % rc), ld = (int)os->lce.ld;
    /* logits[rc, V] = y_c W^T in W's dtype; dy_c[rc, H] = dlogits W (dlogits in place over the
    ** logits, straight into dY's dtype) */
    TRY(dfl_cu_mm_setup(c, &os->mm[0], 0, 1, rc, V, H, Y->dtype, W->dtype, W->dtype, H, H, ld, 1.f, 0.f));
    if (tail) TRY(dfl_cu_mm_setup(c, &os->mm[1], 0, 1, tail, V, H, Y->dtype, W->dtype, W->dtype, H, H, ld, 1.f, 0.f));
    TRY(dfl_cu_mm_setup(c, &os->mm[2], 0, 0, rc, H, V, W->dtype, W->dtype, DY->dtype, ld, H, H, 1.f, 0.f));
    if (tail) TRY(dfl_cu_mm_setup(c, &os->mm[3], 0, 0, tail, H, V, W->dtype, W->dtype, DY->dtype, ld, H, H, 1.f, 0.f));
  }
  if (op->code == DFL_OP_ATTENTION || op->code == DFL_OP_ATTENTION_BWD) {
    int hd = op->a.head_dim;
    if (hd < 2 || hd % 2 || hd > 256 || op->a.kv_heads <= 0 || op->a.heads % op->a.kv_heads) {
      fprintf(stderr, "dflc: cuda backend: attention (%s): head_dim %d must be even and <= 256, and heads "
                      "a multiple of kv_heads\n", op->label, hd);
      return DFL_ESHAPE;
    }
    for (int k = 0; k < op->n_in; k++)
      if (t[op->in[k]].dtype != t[op->in[0]].dtype && t[op->in[k]].dtype != DFL_I32 && t[op->in[k]].dtype != DFL_F32) {
        fprintf(stderr, "dflc: cuda backend: attention (%s): inputs must share q's dtype\n", op->label);
        return DFL_ESHAPE;
      }
    int qdo;
    if (dfl_cu_att_wgmma(c, i, &qdo)) return dfl_cu_att_tmaps(c, op, os, qdo);
  }
  return DFL_OK;
}

/* Multi-tensor groups (compiler/lower_launch.c lower_mt): a group's first op launches for its ops, the
** others launch nothing. */
static void mt_group(dfl_cuda *c) {
  for (int i = 0; i < c->g->nops; i++) {
    const opstate *os = &c->impl->ops[i];
    dfl_opcode code = c->g->ops[i].code;
    c->impl->ops[i].group = os->nl < 1 ? -1 : os->l[0].kernel == DFL_LAUNCH_GROUPED ? 0
                            : (code == DFL_OP_ADAMW || code == DFL_OP_SUMSQ_ACC) && os->l[0].arg > 0 ? os->l[0].arg : -1;
  }
}
static void mt_fill(dfl_cuda *c, int i0, int n, mt_args *t) {
  memset(t, 0, sizeof *t);
  long long u = 0;
  for (int k = 0; k < n; k++) {
    const dfl_op *op = &c->g->ops[i0 + k];
    int adam = op->code == DFL_OP_ADAMW, gi = adam ? 4 : 1;
    if (adam) {
      t->p[k] = P(op->in[0]); t->ms[k] = P(op->in[1]); t->m[k] = P(op->in[2]); t->v[k] = P(op->in[3]);
      t->dtp = dt(c, op->in[0]);
      t->keep_grad = op->a.keep_grad;
    }
    t->g[k] = P(op->in[gi]);
    t->dtg = dt(c, op->in[gi]);
    t->n[k] = numel(c, op->in[gi]);
    t->ustart[k] = u;
    u += (t->n[k] + 3) / 4;
  }
  t->ustart[n] = u;
  t->nt = n;
}
/* Launches group i0 (its leader's op): AdamW over all its tensors, or their sum of squares added
** to the leader's output (partials in the leader's scratch, then dfl_reduce_final). */
static int mt_run(dfl_cuda *c, int i0) {
  const dfl_op *op = &c->g->ops[i0];
  const dfl_launch *l = dfl_cu_lowered(c, i0, op->code == DFL_OP_ADAMW ? 1 : 2);
  if (!l) return DFL_ERR;
  mt_args t;
  mt_fill(c, i0, c->impl->ops[i0].group, &t);
  if (op->code == DFL_OP_ADAMW) {
    void *st = P(op->in[5]);
    float b1 = (float)op->a.beta1, b2 = (float)op->a.beta2, eps = (float)op->a.eps, wd = (float)op->a.wd;
    void *a[] = {&t, &st, &b1, &b2, &eps, &wd};
    return dfl_cu_launch(c, i0, &l[0], a);
  }
  float *part = (float *)c->impl->ops[i0].scratch;
  int np = (int)dfl_cu_grid(c, &l[0]);
  long long flat = -1;
  if (l[0].kernel == K_SUMSQ_FLAT) { /* lowered for gradients end to end in the plan's arena */
    size_t es = dfl_dtype_size((dfl_dtype)t.dtg);
    flat = t.n[0];
    for (int k = 1; k < t.nt && flat >= 0; k++)
      flat = (char *)t.g[k] == (char *)t.g[k - 1] + (size_t)t.n[k - 1] * es ? flat + t.n[k] : -1;
  }
  if (flat >= 0) {
    int dtg = t.dtg;
    void *g0 = t.g[0], *a0[] = {&part, &g0, &dtg, &flat};
    TRY(dfl_cu_launch(c, i0, &l[0], a0));
  } else if (l[0].kernel == K_SUMSQ_FLAT) {
    /* the gradients moved out of the plan's places (dfl_cuda_unshared's private copy, for timing one op):
    ** the table kernel, the same grid */
    dfl_launch lt = l[0];
    lt.kernel = K_SUMSQ_MT;
    void *a1[] = {&part, &t};
    TRY(dfl_cu_launch(c, i0, &lt, a1));
  } else {
    void *a1[] = {&part, &t};
    TRY(dfl_cu_launch(c, i0, &l[0], a1));
  }
  void *out = P(op->out[0]);
  int dto = dt(c, op->out[0]), acc = 1;
  void *a2[] = {&out, &dto, &part, &np, &acc};
  return dfl_cu_launch(c, i0, &l[1], a2);
}

int dfl_cuda_init(dfl_cuda *c, const dfl_graph *g, const dfl_plan *plan, const char *arch) {
  return dfl_cuda_init_opts(c, g, plan, arch, NULL);
}
int dfl_cuda_init_opts(dfl_cuda *c, const dfl_graph *g, const dfl_plan *plan, const char *arch, const dfl_cuda_opts *o) {
  memset(c, 0, sizeof *c);
  c->g = g;
  struct dfl_cuda_impl *im = calloc(1, sizeof *im);
  c->impl = im;
  c->ptr = calloc((size_t)(g->nt ? g->nt : 1), sizeof *c->ptr);
  im->ops = calloc((size_t)(g->nops ? g->nops : 1), sizeof *im->ops);
  if (!im || !c->ptr || !im->ops) return DFL_ENOMEM;
  if (o) im->tf32 = o->tf32, im->att_ref = o->att_ref;
  im->gemm_tune = o && o->gemm_tune;
  if (!dfl_cuda_available()) {
    fprintf(stderr, "dflc: no CUDA device is available (cudaGetDeviceCount found none): run on a GPU machine or use "
                    "the CPU backend\n");
    return DFL_ERR;
  }
  int dev = 0;   /* the caller's current device (dfl_be_open_cuda_dev chose it) */
  CU(cudaGetDevice(&dev));
  CU(cudaDeviceGetAttribute(&im->nsm, cudaDevAttrMultiProcessorCount, dev));
  /* The device's row of compiler/emit.c's table (or a forced one): what NVRTC compiles for (sm_90a on
  ** Hopper, so the wgmma kernels exist; sm_100a, sm_120a on Blackwell; the device's own sm_XY between
  ** rows), the attention family, FP8, and a forced row's shared memory (load_kernels). */
  gpu_choice ch;
  TRY(gpu_pick(dev, o && o->as_cc ? o->as_cc : default_as_cc, &ch));
  im->cc = ch.cc;
  im->as_cc = ch.forced ? ch.sel.cc : 0;
  im->att_wg = ch.sel.att == DFL_ATT_WGMMA;
  im->fp8 = ch.sel.fp8;
  im->smax = ch.forced ? ch.sel.smem : 0;
  snprintf(im->gpu, sizeof im->gpu, "%s", ch.gpu);
  if (!arch) arch = ch.dev.arch;
  snprintf(im->arch, sizeof im->arch, "%s", arch);
  /* tensor offsets: the plan's, or packed end to end */
  int64_t *off = malloc((size_t)(g->nt ? g->nt : 1) * sizeof *off);
  if (!off) return DFL_ENOMEM;
  size_t tb = 0;
  if (plan) {
    if (plan->nt != g->nt) {
      fprintf(stderr, "dflc: cuda backend: the plan has %d tensors, the graph %d (plan built for another graph?)\n",
              plan->nt, g->nt);
      free(off);
      return DFL_ERR;
    }
    tb = (size_t)plan->arena_bytes;
    for (int i = 0; i < g->nt; i++) {
      off[i] = plan->offset[i];
      if (off[i] < 0 || (size_t)off[i] + (size_t)dfl_tensor_bytes(&g->t[i]) > tb) {
        fprintf(stderr, "dflc: cuda backend: tensor %s is not placed inside the plan's arena\n", g->t[i].name);
        free(off);
        return DFL_ERR;
      }
    }
  } else {
    for (int i = 0; i < g->nt; i++) { off[i] = (int64_t)tb; tb += align_up((size_t)dfl_tensor_bytes(&g->t[i])); }
  }
  tb = align_up(tb);
  /* Workspaces: the plan's (dfl_plan_cuda_workspaces: the cuBLASLt one and one per op that needs
  ** scratch, each checked against what the op needs), so the arena is exactly the plan; without
  ** them (plan NULL, or a plan built without workspaces) one shared scratch is appended. */
  int64_t blas_off = -1, *scr_off = malloc(sizeof(int64_t) * (size_t)(g->nops ? g->nops : 1));
  if (!scr_off) { free(off); return DFL_ENOMEM; }
  for (int i = 0; i < g->nops; i++) scr_off[i] = -1;
  for (int k = 0; plan && k < plan->n_ws; k++) {
    const dfl_plan_ws *w = &plan->ws[k];
    int64_t o = plan->offset[plan->nt + k];
    if (w->cat == DFL_PCAT_LIBRARY && !strcmp(w->name, "cublaslt.workspace") && w->bytes >= (int64_t)BLAS_WS)
      blas_off = o;
    else if (w->op >= 0 && w->op < g->nops && w->bytes >= dfl_plan_cuda_op_scratch(g, &g->ops[w->op]))
      scr_off[w->op] = o;
  }
  size_t scratch = 0;
  for (int i = 0; i < g->nops; i++) {
    size_t s = (size_t)dfl_plan_cuda_op_scratch(g, &g->ops[i]);
    if (s && scr_off[i] < 0 && s > scratch) scratch = s;
  }
  c->tensor_bytes = tb;
  im->scratch_bytes = scratch;
  size_t extra_blas = blas_off < 0 ? BLAS_WS : 0;
  if (plan && (extra_blas || scratch))
    fprintf(stderr, "dflc: cuda backend: note: the plan lacks the backend's workspaces (dfl_plan_cuda_workspaces); "
                    "%.1f MiB are allocated beyond it\n", (double)(extra_blas + scratch) / 1048576.0);
  c->arena_bytes = tb + extra_blas + scratch;
  dfl_cu_memtrace("init: before the arena");
  cudaError_t ae = cudaMalloc((void **)&c->arena, c->arena_bytes); /* the one allocation */
  if (ae != cudaSuccess) {
    cudaGetLastError();
    c->arena = NULL;
    free(off);
    free(scr_off);
    dfl_plan_oom(stderr, "cuda backend", (int64_t)c->arena_bytes, plan);
    return DFL_ENOMEM;
  }
  dfl_cu_memtrace("init: arena allocated");
  CU(cudaMemset(c->arena, 0, tb));
  for (int i = 0; i < g->nt; i++) c->ptr[i] = c->arena + off[i];
  im->blas_ws = blas_off >= 0 ? c->arena + blas_off : c->arena + tb;
  for (int i = 0; i < g->nops; i++)
    im->ops[i].scratch = scr_off[i] >= 0 ? c->arena + scr_off[i] : c->arena + tb + extra_blas;
  free(scr_off);
  CU(cudaStreamCreateWithFlags(&im->stream, cudaStreamNonBlocking));
  LT(cublasLtCreate(&im->lt));
  dfl_cu_memtrace("init: cuBLASLt handle");
  int lrc = load_kernels(c, arch);
  if (!lrc) lrc = lower_ops(c, off);
  free(off);
  TRY(lrc);
  TRY(dfl_cu_pw_load(c, plan));
  dfl_cu_memtrace("init: kernels loaded");
  for (int i = 0; i < g->nops; i++) TRY(setup_op(c, i));
  if (im->tune.timed) { /* a first run on this machine (or a new shape): say what the timing cost and won */
    char tb2[256];
    dfl_cu_tune_describe(c, tb2, sizeof tb2);
    fprintf(stderr, "dflc: %s\n", tb2);
  }
  mt_group(c);
  dfl_cu_memtrace("init: ops set up");
  return DFL_OK;
}

/* The attention tensor maps hold the tensors' addresses: rebuilt for the private copy, kept aside
** for the planned one. */
static int unshared_tmaps(dfl_cuda *c, int on) {
  struct dfl_cuda_impl *im = c->impl;
  for (int i = 0; i < c->g->nops; i++) {
    if (!im->planned_tm[i]) continue;
    if (on) {
      im->ops[i].tmaps = NULL;
      int qdo;
      const dfl_op *op = &c->g->ops[i];
      if (!dfl_cu_att_wgmma(c, i, &qdo)) return DFL_ERR;
      TRY(dfl_cu_att_tmaps(c, op, &im->ops[i], qdo));
    } else {
      if (im->ops[i].tmaps && im->ops[i].tmaps != im->planned_tm[i]) cudaFree(im->ops[i].tmaps);
      im->ops[i].tmaps = im->planned_tm[i];
    }
  }
  return DFL_OK;
}

/* Frees what dfl_cuda_unshared allocated (the pointers must be back to the planned ones). */
static void unshared_free(struct dfl_cuda_impl *im) {
  free(im->planned_ptr); free(im->planned_scr); free(im->planned_tm);
  im->planned_ptr = NULL; im->planned_scr = NULL; im->planned_tm = NULL;
  if (im->priv) cudaFree(im->priv);
  im->priv = NULL;
}

int dfl_cuda_unshared(dfl_cuda *c, const struct dfl_plan *plan, int on) {
  struct dfl_cuda_impl *im = c->impl;
  const dfl_graph *g = c->g;
  if (!on) {
    if (!im->planned_ptr) return DFL_OK;
    TRY(dfl_cuda_sync(c));
    unshared_tmaps(c, 0);
    memcpy(c->ptr, im->planned_ptr, sizeof *c->ptr * (size_t)g->nt);
    for (int i = 0; i < g->nops; i++) im->ops[i].scratch = im->planned_scr[i];
    unshared_free(im);
    return DFL_OK;
  }
  if (!plan || im->planned_ptr) return DFL_OK; /* unplanned: nothing shares bytes but the scratch, used one op at a time */
  size_t total = 0;
  for (int i = 0; i < g->nt; i++)
    if (plan->first[i] >= 0 && plan->offset[i] >= 0) total += align_up((size_t)dfl_tensor_bytes(&g->t[i]));
  for (int i = 0; i < g->nops; i++) total += align_up((size_t)dfl_plan_cuda_op_scratch(g, &g->ops[i]));
  TRY(dfl_cuda_sync(c));
  cudaError_t e = cudaMalloc((void **)&im->priv, total ? total : ALIGN);
  if (e != cudaSuccess) {
    cudaGetLastError();
    im->priv = NULL;
    fprintf(stderr, "dflc: cuda backend: no room for an unshared copy of the step's tensors (%.2f GiB): %s\n",
            total / 1073741824.0, cudaGetErrorString(e));
    return DFL_ENOMEM;
  }
  im->planned_ptr = malloc(sizeof *c->ptr * (size_t)(g->nt + 1));
  im->planned_scr = malloc(sizeof(char *) * (size_t)(g->nops + 1));
  im->planned_tm = malloc(sizeof(void *) * (size_t)(g->nops + 1));
  if (!im->planned_ptr || !im->planned_scr || !im->planned_tm) {
    unshared_free(im);
    return DFL_ENOMEM;
  }
  if ((e = cudaMemset(im->priv, 0, total)) != cudaSuccess) {
    unshared_free(im);
    CU(e);
  }
  memcpy(im->planned_ptr, c->ptr, sizeof *c->ptr * (size_t)g->nt);
  size_t off = 0;
  for (int i = 0; i < g->nt; i++)
    if (plan->first[i] >= 0 && plan->offset[i] >= 0) {
      c->ptr[i] = im->priv + off;
      off += align_up((size_t)dfl_tensor_bytes(&g->t[i]));
    }
  for (int i = 0; i < g->nops; i++) {
    im->planned_scr[i] = im->ops[i].scratch;
    im->planned_tm[i] = im->ops[i].tmaps;
    size_t s = align_up((size_t)dfl_plan_cuda_op_scratch(g, &g->ops[i]));
    if (s) im->ops[i].scratch = im->priv + off;
    off += s;
  }
  int rc = unshared_tmaps(c, 1);
  if (rc) dfl_cuda_unshared(c, plan, 0);
  return rc;
}

void dfl_cuda_free(dfl_cuda *c) {
  struct dfl_cuda_impl *im = c->impl;
  if (im && im->planned_ptr) dfl_cuda_unshared(c, NULL, 0);
  if (im) {
    for (int i = 0; i < im->nexec; i++) cudaGraphExecDestroy(im->execs[i].exec);
    for (int i = 0; im->ops && i < c->g->nops; i++) {
      for (int k = 0; k < 4; k++) dfl_cu_mm_free(&im->ops[i].mm[k]);
      if (im->ops[i].tmaps) cudaFree(im->ops[i].tmaps);
      free(im->ops[i].l);
    }
    if (im->lt) cublasLtDestroy(im->lt);
    dfl_cu_tune_free(im);
    if (im->lib) cudaLibraryUnload(im->lib);
    dfl_cu_pw_free(c);
    if (im->stream) cudaStreamDestroy(im->stream);
    if (im->hi) cudaStreamDestroy(im->hi);
    if (im->lo) cudaStreamDestroy(im->lo);
    if (im->fork) cudaEventDestroy(im->fork);
    for (int k = 0; k < 2; k++)
      if (im->join[k]) cudaEventDestroy(im->join[k]);
    free(im->ops);
    free(im);
  }
  if (c->arena) cudaFree(c->arena);
  free(c->ptr);
  memset(c, 0, sizeof *c);
}


int dfl_cuda_run_op(dfl_cuda *c, int i) { return dfl_cu_exec_op(c, i); }

int dfl_cuda_run_op_grouped(dfl_cuda *c, int i) {
  int grp = c->impl->ops[i].group;
  return grp == 0 ? DFL_OK : grp > 0 ? mt_run(c, i) : dfl_cu_exec_op(c, i);
}

int dfl_cuda_sync(dfl_cuda *c) {
  CU(cudaStreamSynchronize(c->impl->stream));
  CU(cudaGetLastError());
  return DFL_OK;
}

static int check_n(dfl_cuda *c, int t, int64_t n) {
  if (t < 0 || t >= c->g->nt || n != numel(c, t)) {
    fprintf(stderr, "dflc: cuda backend: copy of %lld elements does not match tensor %d\n", (long long)n, t);
    return DFL_ESHAPE;
  }
  return DFL_OK;
}

int dfl_cuda_set_f(dfl_cuda *c, int t, const float *src, int64_t n) {
  TRY(check_n(c, t, n));
  TRY(dfl_cuda_sync(c));
  dfl_dtype d = T(c, t)->dtype;
  size_t es = dfl_dtype_size(d);
  char *h = malloc((size_t)n * es);
  if (!h) return DFL_ENOMEM;
  for (int64_t i = 0; i < n; i++) {
    if (d == DFL_BF16) { float r = dfl_bf16_round(src[i]); uint32_t u; memcpy(&u, &r, 4); uint16_t v = (uint16_t)(u >> 16); memcpy(h + 2 * i, &v, 2); }
    else if (d == DFL_F8E4M3) h[i] = (char)dfl_f32_to_e4m3(src[i]); /* values already quantized: exact */
    else if (d == DFL_I32) { int32_t v = (int32_t)src[i]; memcpy(h + 4 * i, &v, 4); }
    else if (d == DFL_F64) { double v = src[i]; memcpy(h + 8 * i, &v, 8); }
    else memcpy(h + 4 * i, &src[i], 4);
  }
  cudaError_t e = cudaMemcpy(c->ptr[t], h, (size_t)n * es, cudaMemcpyHostToDevice);
  free(h);
  CU(e);
  return DFL_OK;
}

int dfl_cuda_get_f(dfl_cuda *c, int t, float *dst, int64_t n) {
  TRY(check_n(c, t, n));
  TRY(dfl_cuda_sync(c));
  dfl_dtype d = T(c, t)->dtype;
  size_t es = dfl_dtype_size(d);
  char *h = malloc((size_t)n * es);
  if (!h) return DFL_ENOMEM;
  cudaError_t e = cudaMemcpy(h, c->ptr[t], (size_t)n * es, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) { free(h); CU(e); }
  for (int64_t i = 0; i < n; i++) {
    if (d == DFL_BF16) { uint16_t v; memcpy(&v, h + 2 * i, 2); uint32_t u = (uint32_t)v << 16; memcpy(&dst[i], &u, 4); }
    else if (d == DFL_F8E4M3) dst[i] = dfl_e4m3_to_f32((uint8_t)h[i]);
    else if (d == DFL_I32) { int32_t v; memcpy(&v, h + 4 * i, 4); dst[i] = (float)v; }
    else if (d == DFL_F64) { double v; memcpy(&v, h + 8 * i, 8); dst[i] = (float)v; }
    else memcpy(&dst[i], h + 4 * i, 4);
  }
  free(h);
  return DFL_OK;
}

int dfl_cuda_set_i32(dfl_cuda *c, int t, const int32_t *src, int64_t n) {
  TRY(check_n(c, t, n));
  TRY(dfl_cuda_sync(c));
  if (T(c, t)->dtype != DFL_I32) { fprintf(stderr, "dflc: cuda backend: %s is not i32\n", T(c, t)->name); return DFL_ESHAPE; }
  CU(cudaMemcpy(c->ptr[t], src, (size_t)n * 4, cudaMemcpyHostToDevice));
  return DFL_OK;
}

int dfl_cuda_get_i32(dfl_cuda *c, int t, int32_t *dst, int64_t n) {
  TRY(check_n(c, t, n));
  TRY(dfl_cuda_sync(c));
  if (T(c, t)->dtype != DFL_I32) { fprintf(stderr, "dflc: cuda backend: %s is not i32\n", T(c, t)->name); return DFL_ESHAPE; }
  CU(cudaMemcpy(dst, c->ptr[t], (size_t)n * 4, cudaMemcpyDeviceToHost));
  return DFL_OK;
}

void *dfl_cuda_stream(dfl_cuda *c) { return c->impl ? (void *)c->impl->stream : NULL; }
