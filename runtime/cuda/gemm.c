/*
** gemm.c: the GEMMs through cuBLASLt: descriptors, layouts and the algorithm fixed once per op at init
** (MATMUL, MATMUL_F8, the loss head's chunks; gemm_tune.c picks it), and the launch. The workspace is fixed (BLAS_WS), so a
** captured graph never allocates.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include "runtime/cuda/cuda_check.h"
#include <cublasLt.h>
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/impl.h"
#include "compiler/plan.h"
#include "compiler/status.h"

static cudaDataType_t cuda_type(dfl_dtype d) {
  return d == DFL_BF16 ? CUDA_R_16BF : d == DFL_F16 ? CUDA_R_16F : d == DFL_F64 ? CUDA_R_64F : CUDA_R_32F;
}

/* Row-major C[M,N] = alpha op(A) op(B) + beta C, as the column-major C^T = op(B)^T op(A)^T. */
int dfl_cu_mm_setup(dfl_cuda *c, mm_t *m, int ta, int tb, int M, int N, int K, dfl_dtype da, dfl_dtype db,
                    dfl_dtype dc, int lda, int ldb, int ldc, float alpha, float beta) {
  if (da != db || (da != DFL_F32 && da != DFL_BF16 && da != DFL_F16) || (dc != da && dc != DFL_F32)) {
    fprintf(stderr, "dflc: cuda backend: matmul of %s x %s -> %s is not supported (inputs must share a float dtype; "
                    "output the same or f32)\n", dfl_dtype_name(da), dfl_dtype_name(db), dfl_dtype_name(dc));
    return DFL_ESHAPE;
  }
  cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
  if (da == DFL_F32 && c->impl->tf32) ct = CUBLAS_COMPUTE_32F_FAST_TF32; /* compile { tf32 = true } */
  LT(cublasLtMatmulDescCreate(&m->d, ct, CUDA_R_32F));
  cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT(cublasLtMatmulDescSetAttribute(m->d, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  LT(cublasLtMatmulDescSetAttribute(m->d, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  LT(cublasLtMatrixLayoutCreate(&m->a, cuda_type(db), tb ? K : N, tb ? N : K, ldb));
  LT(cublasLtMatrixLayoutCreate(&m->b, cuda_type(da), ta ? M : K, ta ? K : M, lda));
  LT(cublasLtMatrixLayoutCreate(&m->c, cuda_type(dc), N, M, ldc));
  m->alpha = alpha;
  m->beta = beta;
  char desc[256];
  snprintf(desc, sizeof desc, "mm %c%c [%d,%d]x[%d] %s->%s ld %d %d %d alpha %g beta %g%s", ta ? 'T' : 'N',
           tb ? 'T' : 'N', M, N, K, dfl_dtype_name(da), dfl_dtype_name(dc), lda, ldb, ldc, alpha, beta,
           ct == CUBLAS_COMPUTE_32F_FAST_TF32 ? " tf32" : "");
  return dfl_cu_mm_pick(c, m, desc, dfl_dtype_name(da));
}
/* MATMUL_F8: row-major Y[M,N] = (X[M,K] W[N,K]^T) sx[M] sw[N] (+ R): cuBLASLt's column-major
** Y^T = W X^T, both e4m3 operands K-major ("TN", the layout Hopper's FP8 GEMMs require), per-row
** scales as outer vectors (A's: sw, N of them; B's: sx, M), f32 accumulation, or with fast set cuBLASLt's
** fast accumulation (quantize = fp8_fast: docs/fp8.md). */
int dfl_cu_mm_setup_f8(dfl_cuda *c, mm_t *m, int M, int N, int K, dfl_dtype dy, const float *sx, const float *sw,
                       float beta, int fast, const char *label) {
  /* the row's FP8 (compiler/emit.c's table: cc 8.9 and newer), or a forced row's (dfl_cuda_opts.as_cc) */
  const struct dfl_cuda_impl *im = c->impl;
  if (!im->fp8) {
    if (im->as_cc)
      fprintf(stderr, "dflc: cuda backend: %s: FP8 GEMMs (target `quantize = fp8`) are off: kernels are picked as "
                      "compute capability %d.%d (forced, dfl_cuda_opts.as_cc), which has none; %s (%d.%d) has them\n",
              label, im->as_cc / 10, im->as_cc % 10, im->gpu, im->cc / 10, im->cc % 10);
    else
      fprintf(stderr, "dflc: cuda backend: %s: FP8 GEMMs (target `quantize = fp8`) need compute capability 8.9 or "
                      "newer (Ada, Hopper, Blackwell); %s is %d.%d: remove `quantize = fp8` from the target\n",
              label, im->gpu, im->cc / 10, im->cc % 10);
    return DFL_ESHAPE;
  }
  if (dy != DFL_BF16 && dy != DFL_F32) {
    fprintf(stderr, "dflc: cuda backend: %s: an FP8 GEMM writes bf16 or f32, not %s\n", label, dfl_dtype_name(dy));
    return DFL_ESHAPE;
  }
  if (N % 16 || K % 16) {
    fprintf(stderr, "dflc: cuda backend: %s: cuBLASLt's FP8 GEMMs need the output and inner dimensions to be "
                    "multiples of 16, not %d and %d: remove `quantize = fp8` from the target\n", label, N, K);
    return DFL_ESHAPE;
  }
  LT(cublasLtMatmulDescCreate(&m->d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t opt = CUBLAS_OP_T, opn = CUBLAS_OP_N;
  cublasLtMatmulMatrixScale_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  LT(cublasLtMatmulDescSetAttribute(m->d, CUBLASLT_MATMUL_DESC_TRANSA, &opt, sizeof opt));
  LT(cublasLtMatmulDescSetAttribute(m->d, CUBLASLT_MATMUL_DESC_TRANSB, &opn, sizeof opn));
  LT(cublasLtMatmulDescSetAttribute(m->d, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode));
  LT(cublasLtMatmulDescSetAttribute(m->d, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode));
  LT(cublasLtMatmulDescSetAttribute(m->d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sw, sizeof sw));
  LT(cublasLtMatmulDescSetAttribute(m->d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sx, sizeof sx));
  /* fast: quantize = fp8_fast (the op's a.fast_accum): cuBLASLt's FP8 fast accumulation, the partial
  ** sums never promoted to f32 */
  if (fast) {
    int8_t on = 1;
    LT(cublasLtMatmulDescSetAttribute(m->d, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &on, sizeof on));
  }
  LT(cublasLtMatrixLayoutCreate(&m->a, CUDA_R_8F_E4M3, K, N, K));
  LT(cublasLtMatrixLayoutCreate(&m->b, CUDA_R_8F_E4M3, K, M, K));
  LT(cublasLtMatrixLayoutCreate(&m->c, cuda_type(dy), N, M, N));
  m->alpha = 1.f;
  m->beta = beta;
  char desc[256];
  snprintf(desc, sizeof desc, "f8 [%d,%d]x[%d] ->%s beta %g%s", M, N, K, dfl_dtype_name(dy), beta, fast ? " fast" : "");
  return dfl_cu_mm_pick(c, m, desc, label);
}
void dfl_cu_mm_free(mm_t *m) {
  if (!m->ok) return;
  cublasLtMatrixLayoutDestroy(m->a); cublasLtMatrixLayoutDestroy(m->b); cublasLtMatrixLayoutDestroy(m->c);
  cublasLtMatmulDescDestroy(m->d);
  m->ok = 0;
}
/* D = alpha op(A) op(B) + beta C; note the swap: cuBLASLt's A is our B. C and D share one layout
** (and dtype); C == D (in place) or disjoint (MATMUL's addend form, dfl_fuse_add), never a partial
** overlap (the planner does not alias a MATMUL's output with its inputs). */
int dfl_cu_mm_run_cd(dfl_cuda *c, mm_t *m, const void *A, const void *B, const void *C, void *D) {
  struct dfl_cuda_impl *im = c->impl;
  LT(cublasLtMatmul(im->lt, m->d, &m->alpha, B, m->a, A, m->b, &m->beta, C, m->c, D, m->c, &m->algo, im->blas_ws,
                    BLAS_WS, im->stream));
  return DFL_OK;
}
/* C = alpha op(A) op(B) + beta C */
int dfl_cu_mm_run(dfl_cuda *c, mm_t *m, const void *A, const void *B, void *C) { return dfl_cu_mm_run_cd(c, m, A, B, C, C); }
