/*
** impl.h: what the CUDA backend's files share: the kernel ids, the per-op and backend state
** (struct dfl_cuda_impl), the tensor accessors and the launch helpers. Not for use outside runtime/cuda.
*/
#ifndef DFL_CUDA_IMPL_H
#define DFL_CUDA_IMPL_H

#include <stdint.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <cublasLt.h>
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/cuda_check.h"
#include "compiler/plan.h"
#include "compiler/lower.h"
#include "compiler/lower_launch.h"
#include "compiler/status.h"

/* Every CUDA call goes through DFL_CU: it names the call and file:line (llm.c style). */
#define CU(call) DFL_CU(call)
#define TRY(x) do { int rc_ = (x); if (rc_) return rc_; } while (0)
/* Every cuBLASLt call goes through LT (CUDA calls: CU, above): it names the call and file:line. */
#define LT(call)                                                                                     \
  do {                                                                                               \
    cublasStatus_t s_ = (call);                                                                      \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                               \
      fprintf(stderr, "%s:%d: %s failed: status %d\n", __FILE__, __LINE__, #call, (int)s_);         \
      return DFL_ERR;                                                                                \
    }                                                                                                \
  } while (0)

#define BLAS_WS ((size_t)DFL_CUBLASLT_WS_BYTES) /* fixed so the captured graph never allocates */

#define DFL_TUNE_KEYS 256 /* distinct GEMMs a backend remembers its pick of (more are picked again) */

#define MAX_EXECS 8 /* captured graphs (phase masks) a backend keeps */

/* The kernels (kernels/kernels.def): their ids and symbols. */
enum {
#define DFL_KERNEL(id, sym, fam) K_##id,
#include "kernels/kernels.def"
#undef DFL_KERNEL
  K_COUNT
};

typedef struct {
  cublasLtMatmulDesc_t d;
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatmulAlgo_t algo;
  float alpha, beta;
  int ok;
} mm_t;

/* runtime/cuda/gemm.c: cuBLASLt GEMMs, set up once per op */
int dfl_cu_mm_setup_f8(dfl_cuda *c, mm_t *m, int M, int N, int K, dfl_dtype dy, const float *sx, const float *sw, float beta, int fast, const char *label);
int dfl_cu_mm_setup(dfl_cuda *c, mm_t *m, int ta, int tb, int M, int N, int K, dfl_dtype da, dfl_dtype db, dfl_dtype dc, int lda, int ldb, int ldc, float alpha, float beta);
void dfl_cu_mm_free(mm_t *m);
/* runtime/cuda/gemm_tune.c: m's algorithm: cuBLASLt's first heuristic choice, or with gemm_tune the
** fastest of its candidates (timed once per GEMM and machine, kept in the cache); desc names the GEMM
** (shape, dtypes, leading dimensions, beta: the cache key), what it in messages. */
int dfl_cu_mm_pick(dfl_cuda *c, mm_t *m, const char *desc, const char *what);
struct dfl_cuda_impl;
void dfl_cu_tune_free(struct dfl_cuda_impl *im);
int dfl_cu_tune_describe(const dfl_cuda *c, char *buf, size_t cap);
int dfl_cu_mm_run_cd(dfl_cuda *c, mm_t *m, const void *A, const void *B, const void *C, void *D);
int dfl_cu_mm_run(dfl_cuda *c, mm_t *m, const void *A, const void *B, void *C);

typedef struct {
  mm_t mm[4];       /* MATMUL: [0]. LINEAR_CE: logits of a full row chunk, of the last chunk, dY of each */
  dfl_lce_ws lce;   /* LINEAR_CE: workspace layout (plan.h), shared with the planner */
  char *scratch;    /* this op's scratch: its plan workspace (or the shared fallback) */
  void *tmaps;      /* ATTENTION by dfl_attn_fwd_wg(d)128, ATTENTION_BWD by dfl_attn_bwd{q,kv}_wg128: their
                    ** tensor maps (device memory, att_tmaps) */
  int group;        /* ADAMW / SUMSQ_ACC: > 0 leads a multi-tensor launch over this many consecutive
                    ** ops; 0 member of an earlier op's group (nothing to launch); -1 alone */
  int nl;           /* its launches as compiler/lower_launch.c chose them at init (0: the op chooses) */
  dfl_launch *l;
} opstate;

struct dfl_cuda_impl {
  cudaStream_t stream;
  cudaLibrary_t lib;
  cudaKernel_t k[K_COUNT];
  unsigned char occ[K_COUNT]; /* CTAs of 256 threads an SM holds at once (no dynamic shared memory) */
  cublasLtHandle_t lt;
  opstate *ops;
  char *blas_ws;
  size_t scratch_bytes; /* op scratch outside the plan (only without a plan's workspaces) */
  int nsm;
  int smax;         /* opt-in dynamic shared memory per block */
  int att_ref;      /* dfl_cuda_opts.att_ref: always the CUDA-core attention kernels (bench_attention's check) */
  int att_wg;       /* the wgmma attention kernels (kernels compiled for sm_90a; else the mma.sync ones) */
  int fp8;          /* FP8 GEMMs allowed: the row's (dfl_gpu_arch.fp8; a forced row's, dfl_cuda_opts.as_cc) */
  int cc, as_cc;    /* the device's compute capability (major * 10 + minor); the forced row's, or 0 */
  char arch[16];    /* what the cubin was compiled for */
  char gpu[64];     /* the device's name, for messages */
  int tf32;         /* dfl_cuda_opts.tf32 (compile { tf32 = true }): f32 GEMMs on TF32 tensor cores */
  int gemm_tune;    /* dfl_cuda_opts.gemm_tune: each GEMM's cuBLASLt algorithm timed (gemm_tune.c) */
  struct {          /* gemm_tune.c: the GEMMs picked so far (key -> algorithm) and what it cost */
    char *key[DFL_TUNE_KEYS];
    cublasLtMatmulAlgo_t algo[DFL_TUNE_KEYS];
    int n, timed, cached, changed;
    double secs, saved_ms;
  } tune;
  PFN_cuTensorMapEncodeTiled_v12000 tmap_encode; /* their tensor maps (NULL: driver without TMA, kernels off) */
  struct { unsigned mask; cudaGraphExec_t exec; int kernels, other; } execs[MAX_EXECS];
  int nexec;
  cudaStream_t hi, lo;  /* DFL_RUN_OVERLAP_OPT capture: the main branch, the optimizer's branch */
  /* dfl_cuda_unshared: the planned pointers, op scratch and tensor maps, and the private allocation */
  void **planned_ptr;
  char **planned_scr;
  void **planned_tm;
  char *priv;
  cudaEvent_t fork, join[2];
  /* the pointwise fusion groups (pointwise.c): their generated kernels and CTAs an SM of each */
  dfl_groups pw;
  cudaLibrary_t pwlib;
  cudaKernel_t *pwk;
  unsigned char *pwocc;
};

static inline const dfl_tensor *T(dfl_cuda *c, int t) { return &c->g->t[t]; }
static inline int64_t numel(dfl_cuda *c, int t) { return dfl_tensor_numel(T(c, t)); }
static inline int dt(dfl_cuda *c, int t) { return (int)T(c, t)->dtype; }
#define P(t) (c->ptr[(t)])
static inline dim3 d3(unsigned x, unsigned y) { dim3 d; d.x = x; d.y = y; d.z = 1; return d; }
static inline int launch2(dfl_cuda *c, int k, int64_t gx, int gy, int block, size_t smem, void **args) {
  struct dfl_cuda_impl *im = c->impl;
  if (gx < 1) gx = 1;
  CU(cudaLaunchKernel((const void *)im->k[k], d3((unsigned)gx, (unsigned)gy), d3((unsigned)block, 1), args, smem,
                      im->stream));
  return DFL_OK;
}
/* Grid-stride kernels: enough blocks to fill the machine, never more than the work, and never more
** than the SMs hold at once (up to 8 CTAs an SM): a CTA past that starts only when a resident one
** has walked its whole slice, and the last ones then run on a third of the chip (dfl_swiglu_bwd, 40
** registers: 6 CTAs an SM against 8 launched per SM until session 14). */
static inline int launch(dfl_cuda *c, int k, int64_t n, void **args) {
  int64_t g = (n + 255) / 256, cap = (int64_t)c->impl->nsm * c->impl->occ[k];
  return launch2(c, k, g < cap ? g : cap, 1, 256, 0, args);
}
/* Warp-per-row kernels. */
static inline int launch_warps(dfl_cuda *c, int k, int64_t rows, size_t smem, void **args) {
  int64_t g = (rows + 7) / 8, cap = (int64_t)c->impl->nsm * c->impl->occ[k];
  return launch2(c, k, g < cap ? g : cap, 1, 256, smem, args);
}

/* impl.c, the launch helpers. Launch l (a lowered launch of op i, lower_launch.h) with args: its grid capped by its fill rule on
** this device, after checking that op i's pointers are 16-byte aligned where l was chosen for that. */
int dfl_cu_launch(dfl_cuda *c, int i, const dfl_launch *l, void **args);
/* l's grid (x) on this device, after its fill cap: what dfl_cu_launch launches */
int64_t dfl_cu_grid(const dfl_cuda *c, const dfl_launch *l);
/* Op i's lowered launches (im->ops[i].l), or NULL with a message when it has not n of them. */
const dfl_launch *dfl_cu_lowered(dfl_cuda *c, int i, int n);

/* Dynamic shared memory of the pipelined RMSNorm backward (kernels/rmsnorm.cuh rmsnorm_bwd_p), at most:
** its two row stages take 96 KB for rows of 8192 with the addend; 1 KB left for its static array. */
#define RBP_SMEM(smax) ((smax) - 1024)

/* runtime/cuda/ops.c: op i's launches (its fusion group's, or its cu_<name>) */
int dfl_cu_exec_op(dfl_cuda *c, int i);
/* runtime/cuda/impl.c: shared by the op files */
void dfl_cu_memtrace(const char *what); /* DFL_MEMTRACE: device memory in use at a stage of setup */
int dfl_cu_vec_dtypes(const void *const *p, const int *d, int n);
int dfl_cu_bf16_vecs(const void *const *p, const int *d, int n);
/* runtime/cuda/pointwise.c: the pointwise ops by generated fusion group */
int dfl_cu_pw_load(dfl_cuda *c, const dfl_plan *plan); /* at init: the groups, compiled and loaded */
int dfl_cu_pw_run(dfl_cuda *c, int i);                  /* op i of a group: the group's launch at its first op */
void dfl_cu_pw_free(dfl_cuda *c);
/* runtime/cuda/loss.c, rope.c */
int dfl_cu_block_rows(dfl_cuda *c, int i);
int dfl_cu_linear_ce(dfl_cuda *c, int i);
int dfl_cu_rope(dfl_cuda *c, int i);

/* runtime/cuda/attention.c: ATTENTION and ATTENTION_BWD */
int dfl_cu_att_wgmma(dfl_cuda *c, int i, int *qdo); /* 1: op i's launches run a wgmma kernel: tensor maps */
int dfl_cu_att_tmaps(dfl_cuda *c, const dfl_op *op, opstate *os, int qdo);
int dfl_cu_attention(dfl_cuda *c, int i, int bwd, char *scratch, void *tmaps); /* by its lowered launches */

/* runtime/cuda/hybrid.c: the hybrid target's ops (compiler/ops.def HYBRID family) and partial RoPE */
int dfl_cu_hybrid_load(dfl_cuda *c);  /* at kernel load: the chunk kernels' shared memory */
int dfl_cu_conv1d_silu(dfl_cuda *c, int i);  /* op i, by its lowered launch (compiler/lower_launch.c) */
int dfl_cu_l2norm(dfl_cuda *c, int i);
int dfl_cu_gated_delta(dfl_cuda *c, const dfl_op *op);
int dfl_cu_norm_gate(dfl_cuda *c, int i);
int dfl_cu_rope_part(dfl_cuda *c, int i);  /* ROPE with 0 < rot_dim < head_dim */

#endif
