/*
** naive_cblas.c: plain-loop cblas_sgemm/cblas_dgemm for the GPU test binaries. The GPU machine
** has no OpenBLAS and the static one is too large to ship there, and the CPU oracle's matrix
** products in these tests are small. Accumulates in double, so it is at least as exact as BLAS.
*/
#include <cblas.h>

#define NAIVE_GEMM(NAME, REAL)                                                                         \
  void NAME(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE ta, const enum CBLAS_TRANSPOSE tb,  \
            const int M, const int N, const int K, const REAL alpha, const REAL *A, const int lda,       \
            const REAL *B, const int ldb, const REAL beta, REAL *C, const int ldc) {                     \
    int rm = order == CblasRowMajor, at = ta != CblasNoTrans, bt = tb != CblasNoTrans;                  \
    for (int i = 0; i < M; i++)                                                                         \
      for (int j = 0; j < N; j++) {                                                                     \
        double s = 0;                                                                                   \
        for (int k = 0; k < K; k++) {                                                                   \
          /* element (i,k) of op(A) and (k,j) of op(B), in either storage order */                      \
          long ia = rm ? (at ? (long)k * lda + i : (long)i * lda + k) : (at ? (long)i * lda + k : (long)k * lda + i); \
          long ib = rm ? (bt ? (long)j * ldb + k : (long)k * ldb + j) : (bt ? (long)k * ldb + j : (long)j * ldb + k); \
          s += (double)A[ia] * B[ib];                                                                   \
        }                                                                                               \
        long ic = rm ? (long)i * ldc + j : (long)j * ldc + i;                                           \
        C[ic] = (REAL)(alpha * s + (beta == 0 ? 0.0 : (double)beta * C[ic]));                           \
      }                                                                                                 \
  }
NAIVE_GEMM(cblas_sgemm, float)
NAIVE_GEMM(cblas_dgemm, double)
