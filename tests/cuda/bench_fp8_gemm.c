/*
** bench_fp8_gemm.c: the Qwen3-8B target's GEMM shapes (4096 tokens) in bf16 and in FP8 E4M3 with
** per-row (outer-vector) scales through cuBLASLt, the form runtime/cuda.c uses for a target with
** `quantize = fp8` (docs/fp8.md). First checks one small FP8 GEMM against a host reference of the
** dequantized operands; then times each shape. Not a ctest test: run build/bench_fp8_gemm on a GPU.
**   bench_fp8_gemm [reps]
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cuda_runtime.h>
#include <cublasLt.h>

#include "runtime/cpu/fp8.h"

#define CU(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define LT(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { fprintf(stderr, "%s:%d: %s: status %d\n", __FILE__, __LINE__, #x, (int)s_); exit(1); } } while (0)

static cublasLtHandle_t lt;
static void *ws;
static const size_t WS = 64u << 20;

static uint64_t rs = 0x9e3779b97f4a7c15ull;
static float urand(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (float)((rs >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; }
static uint16_t f2bf(float f) { uint32_t u; memcpy(&u, &f, 4); u += 0x7fffu + ((u >> 16) & 1u); return (uint16_t)(u >> 16); }
static float bf2f(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }

typedef struct { cublasLtMatmulDesc_t d; cublasLtMatrixLayout_t a, b, c; cublasLtMatmulAlgo_t algo; } gemm;

/* Row-major Y[M,N] = X[M,K] W[N,K]^T (+ C), as cuBLASLt's column-major Y^T = W X^T ("TN"). */
static void setup(gemm *g, int M, int N, int K, int fp8, const float *sx, const float *sw, int addend) {
  LT(cublasLtMatmulDescCreate(&g->d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
  LT(cublasLtMatmulDescSetAttribute(g->d, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
  LT(cublasLtMatmulDescSetAttribute(g->d, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof n));
  cudaDataType_t in = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  if (fp8) {
    cublasLtMatmulMatrixScale_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    LT(cublasLtMatmulDescSetAttribute(g->d, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode));
    LT(cublasLtMatmulDescSetAttribute(g->d, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode));
    LT(cublasLtMatmulDescSetAttribute(g->d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sw, sizeof sw));
    LT(cublasLtMatmulDescSetAttribute(g->d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sx, sizeof sx));
  }
  LT(cublasLtMatrixLayoutCreate(&g->a, in, K, N, K));
  LT(cublasLtMatrixLayoutCreate(&g->b, in, K, M, K));
  LT(cublasLtMatrixLayoutCreate(&g->c, CUDA_R_16BF, N, M, N));
  cublasLtMatmulPreference_t p;
  LT(cublasLtMatmulPreferenceCreate(&p));
  LT(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &WS, sizeof WS));
  cublasLtMatmulHeuristicResult_t h;
  int nres = 0;
  LT(cublasLtMatmulAlgoGetHeuristic(lt, g->d, g->a, g->b, g->c, g->c, p, 1, &h, &nres));
  if (nres < 1) { fprintf(stderr, "no algorithm for %d %d %d fp8 %d\n", M, N, K, fp8); exit(1); }
  g->algo = h.algo;
  cublasLtMatmulPreferenceDestroy(p);
  (void)addend;
}
static void run(gemm *g, const void *x, const void *w, const void *c, void *y, float beta) {
  float alpha = 1.0f;
  LT(cublasLtMatmul(lt, g->d, &alpha, w, g->a, x, g->b, &beta, c, g->c, y, g->c, &g->algo, ws, WS, 0));
}

/* One small FP8 GEMM against the host: quantized operands, f64 dot, scales, bf16 output. */
static int check(void) {
  enum { M = 96, N = 160, K = 512 };
  float *x = malloc(sizeof(float) * M * K), *w = malloc(sizeof(float) * N * K);
  float *xq = malloc(sizeof(float) * M * K), *wq = malloc(sizeof(float) * N * K), sx[M], sw[N];
  uint8_t *x8 = malloc(M * K), *w8 = malloc(N * K);
  uint16_t *c = malloc(2 * M * N), *y = malloc(2 * M * N);
  for (int i = 0; i < M * K; i++) x[i] = urand() * (1.0f + 3.0f * (i / K % 3)); /* rows of different ranges */
  for (int i = 0; i < N * K; i++) w[i] = 0.02f * urand();
  for (int i = 0; i < M * N; i++) c[i] = f2bf(urand());
  for (int r = 0; r < M; r++) sx[r] = dfl_fp8_quant_row(x + (size_t)r * K, K, x8 + (size_t)r * K, xq + (size_t)r * K);
  for (int r = 0; r < N; r++) sw[r] = dfl_fp8_quant_row(w + (size_t)r * K, K, w8 + (size_t)r * K, wq + (size_t)r * K);
  void *dx, *dw, *dc, *dy;
  float *dsx, *dsw;
  CU(cudaMalloc(&dx, M * K)); CU(cudaMalloc(&dw, N * K)); CU(cudaMalloc(&dc, 2 * M * N)); CU(cudaMalloc(&dy, 2 * M * N));
  CU(cudaMalloc((void **)&dsx, 4 * M)); CU(cudaMalloc((void **)&dsw, 4 * N));
  CU(cudaMemcpy(dx, x8, M * K, cudaMemcpyHostToDevice)); CU(cudaMemcpy(dw, w8, N * K, cudaMemcpyHostToDevice));
  CU(cudaMemcpy(dc, c, 2 * M * N, cudaMemcpyHostToDevice));
  CU(cudaMemcpy(dsx, sx, 4 * M, cudaMemcpyHostToDevice)); CU(cudaMemcpy(dsw, sw, 4 * N, cudaMemcpyHostToDevice));
  gemm g;
  setup(&g, M, N, K, 1, dsx, dsw, 1);
  run(&g, dx, dw, dc, dy, 1.0f);
  CU(cudaMemcpy(y, dy, 2 * M * N, cudaMemcpyDeviceToHost));
  double worst = 0, worst_q = 0;
  for (int r = 0; r < M; r++)
    for (int n = 0; n < N; n++) {
      double s = 0, e = 0, mag = 0; /* mag: the sum of |terms|, the scale of rounding errors */
      for (int k = 0; k < K; k++) {
        s += (double)xq[(size_t)r * K + k] * wq[(size_t)n * K + k];
        e += (double)x[(size_t)r * K + k] * w[(size_t)n * K + k];
        mag += fabs((double)x[(size_t)r * K + k] * w[(size_t)n * K + k]);
      }
      double cv = bf2f(c[r * N + n]), ref = s * sx[r] * sw[n] + cv, exact = e + cv;
      mag += fabs(cv);
      double d = fabs(bf2f(y[r * N + n]) - ref) / mag, dq = fabs(ref - exact) / mag;
      if (d > worst) worst = d;
      if (dq > worst_q) worst_q = dq;
    }
  printf("check fp8 [%d,%d]x[%d] + C: worst error vs the dequantized reference %.3e of sum|terms| (tol 1e-2); "
         "quantization's own worst error vs the unquantized product %.3e\n", M, N, K, worst, worst_q);
  cudaFree(dx); cudaFree(dw); cudaFree(dc); cudaFree(dy); cudaFree(dsx); cudaFree(dsw);
  free(x); free(w); free(xq); free(wq); free(x8); free(w8); free(c); free(y);
  return worst <= 1e-2 ? 0 : 1;
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 20;
  CU(cudaSetDevice(0));
  LT(cublasLtCreate(&lt));
  CU(cudaMalloc(&ws, WS));
  int bad = check();
  static const struct { const char *name; int N, K, addend; } sh[] = {
    {"q", 4096, 4096, 0}, {"k/v", 1024, 4096, 0}, {"o (+h)", 4096, 4096, 1},
    {"gate/up", 12288, 4096, 0}, {"down (+h)", 4096, 12288, 1},
  };
  const int M = 4096;
  size_t maxe = (size_t)M * 12288;
  void *x, *w, *c, *y;
  float *sx, *sw;
  CU(cudaMalloc(&x, 2 * maxe)); CU(cudaMalloc(&w, 2 * maxe)); CU(cudaMalloc(&c, 2 * maxe)); CU(cudaMalloc(&y, 2 * maxe));
  CU(cudaMalloc((void **)&sx, 4 * 16384)); CU(cudaMalloc((void **)&sw, 4 * 16384));
  /* bytes 0x00..0x3f: finite e4m3 values below 2, and bf16 pairs of small finite values */
  unsigned char *h = malloc(2 * maxe);
  for (size_t i = 0; i < 2 * maxe; i++) h[i] = (unsigned char)((rs = rs * 6364136223846793005ull + 1) >> 58);
  CU(cudaMemcpy(x, h, 2 * maxe, cudaMemcpyHostToDevice)); CU(cudaMemcpy(w, h, 2 * maxe, cudaMemcpyHostToDevice));
  CU(cudaMemcpy(c, h, 2 * maxe, cudaMemcpyHostToDevice));
  float *ones = malloc(4 * 16384);
  for (int i = 0; i < 16384; i++) ones[i] = 1.0f / 64;
  CU(cudaMemcpy(sx, ones, 4 * 16384, cudaMemcpyHostToDevice)); CU(cudaMemcpy(sw, ones, 4 * 16384, cudaMemcpyHostToDevice));
  cudaEvent_t e0, e1;
  CU(cudaEventCreate(&e0)); CU(cudaEventCreate(&e1));
  printf("%-10s %6s %6s %6s | %9s %8s | %9s %8s | %s\n", "gemm", "M", "N", "K", "bf16 ms", "TFLOP/s", "fp8 ms", "TFLOP/s", "speedup");
  double tb = 0, tf = 0;
  for (size_t s = 0; s < sizeof sh / sizeof sh[0]; s++) {
    double ms[2];
    for (int f = 0; f < 2; f++) {
      gemm g;
      setup(&g, M, sh[s].N, sh[s].K, f, sx, sw, sh[s].addend);
      float beta = sh[s].addend ? 1.0f : 0.0f;
      for (int i = 0; i < 3; i++) run(&g, x, w, c, y, beta);
      CU(cudaEventRecord(e0, 0));
      for (int i = 0; i < reps; i++) run(&g, x, w, c, y, beta);
      CU(cudaEventRecord(e1, 0));
      CU(cudaEventSynchronize(e1));
      float t;
      CU(cudaEventElapsedTime(&t, e0, e1));
      ms[f] = t / reps;
      cublasLtMatmulDescDestroy(g.d); cublasLtMatrixLayoutDestroy(g.a); cublasLtMatrixLayoutDestroy(g.b); cublasLtMatrixLayoutDestroy(g.c);
    }
    double fl = 2.0 * M * sh[s].N * sh[s].K;
    int mult = !strcmp(sh[s].name, "k/v") || !strcmp(sh[s].name, "gate/up") ? 2 : 1;
    tb += mult * ms[0]; tf += mult * ms[1];
    printf("%-10s %6d %6d %6d | %9.4f %8.1f | %9.4f %8.1f | %.2fx\n", sh[s].name, M, sh[s].N, sh[s].K, ms[0],
           fl / ms[0] * 1e-9, ms[1], fl / ms[1] * 1e-9, ms[0] / ms[1]);
  }
  printf("one target layer's 7 GEMMs: bf16 %.3f ms, fp8 %.3f ms (%.2fx); x34 layers: %.1f vs %.1f ms\n", tb, tf, tb / tf,
         34 * tb, 34 * tf);
  return bad;
}
