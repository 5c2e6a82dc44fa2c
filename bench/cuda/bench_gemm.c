/*
** bench_gemm [REPS] [M N K ...]: the question behind dflc's GEMM choice (runtime/cuda/gemm.c takes
** cuBLASLt's first heuristic algorithm): would timing cuBLASLt's other candidates pay? For each shape
** (row-major Y[M,N] = X[M,K] W[N,K]^T in bf16 with f32 accumulation, dflc's MATMUL form; the Qwen3.6-27B
** target forward's shapes by default) it asks the heuristic for up to 16 algorithms within dflc's
** 32 MiB workspace, times each (median of REPS back-to-back runs, events around each run, random
** N(0,1) operands: zeros draw less power and would flatter a 700 W part), and prints each one's
** TFLOP/s, tile, stages, split-K and cluster, the first (dflc's) marked. Then the first algorithm of
** the largest shape runs back to back for about three seconds, in windows of 20 runs: the sustained
** rate a forward's GEMMs see once the part is at its power limit.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cuda_runtime.h>
#include <cublasLt.h>

#define CK(call)                                                                                     \
  do {                                                                                               \
    cudaError_t e_ = (call);                                                                         \
    if (e_ != cudaSuccess) {                                                                         \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));  \
      exit(1);                                                                                       \
    }                                                                                                \
  } while (0)
#define LK(call)                                                                                     \
  do {                                                                                               \
    cublasStatus_t s_ = (call);                                                                      \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                               \
      fprintf(stderr, "%s:%d: %s failed: status %d\n", __FILE__, __LINE__, #call, (int)s_);          \
      exit(1);                                                                                       \
    }                                                                                                \
  } while (0)

#define WS (32u << 20)
#define MAXALG 16

/* bf16 N(0,1) by Box-Muller, rounded to nearest even */
static void fill(unsigned short *h, size_t n, unsigned *seed) {
  for (size_t i = 0; i < n; i++) {
    *seed = *seed * 1664525u + 1013904223u;
    float u1 = ((*seed >> 8) + 1) / 16777217.f;
    *seed = *seed * 1664525u + 1013904223u;
    float u2 = (*seed >> 8) / 16777216.f;
    float v = sqrtf(-2.f * logf(u1)) * cosf(6.2831853f * u2);
    unsigned u;
    memcpy(&u, &v, 4);
    h[i] = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
  }
}

static int cmpf(const void *a, const void *b) { float x = *(const float *)a, y = *(const float *)b; return (x > y) - (x < y); }

static int cfg(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t at) {
  int v = 0;
  size_t w = 0;
  uint32_t u = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(a, at, &u, sizeof u, &w) != CUBLAS_STATUS_SUCCESS) return -1;
  v = (int)u;
  return v;
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 20;
  int def[][3] = {{49152, 17408, 5120}, {49152, 5120, 17408}, {49152, 6144, 5120}, {49152, 5120, 6144},
                  {49152, 2048, 5120},  {49152, 1024, 5120},  {49152, 48, 5120},   {49152, 16480, 5120},
                  {49152, 14336, 5120}, {49152, 34816, 5120}};
  int nsh = (int)(sizeof def / sizeof def[0]);
  int (*sh)[3] = def;
  if (argc > 4) {
    nsh = (argc - 2) / 3;
    sh = malloc(sizeof(int[3]) * (size_t)nsh);
    for (int i = 0; i < nsh; i++) for (int j = 0; j < 3; j++) sh[i][j] = atoi(argv[2 + 3 * i + j]);
  }
  size_t maxx = 0, maxw = 0, maxy = 0;
  for (int i = 0; i < nsh; i++) {
    size_t x = (size_t)sh[i][0] * sh[i][2], w = (size_t)sh[i][1] * sh[i][2], y = (size_t)sh[i][0] * sh[i][1];
    if (x > maxx) maxx = x;
    if (w > maxw) maxw = w;
    if (y > maxy) maxy = y;
  }
  unsigned short *h = malloc((maxx > maxw ? maxx : maxw) * 2);
  unsigned seed = 12345;
  void *X, *W, *Y, *ws;
  CK(cudaMalloc(&X, maxx * 2));
  CK(cudaMalloc(&W, maxw * 2));
  CK(cudaMalloc(&Y, maxy * 2));
  CK(cudaMalloc(&ws, WS));
  fill(h, maxx, &seed);
  CK(cudaMemcpy(X, h, maxx * 2, cudaMemcpyHostToDevice));
  fill(h, maxw, &seed);
  for (size_t i = 0; i < maxw; i++) h[i] = (unsigned short)(h[i] - (1u << 7) * 5); /* weights ~ N(0,1)/32: exponent - 5 */
  CK(cudaMemcpy(W, h, maxw * 2, cudaMemcpyHostToDevice));
  cublasLtHandle_t lt;
  LK(cublasLtCreate(&lt));
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  float *t = malloc(sizeof(float) * (size_t)(reps > 20 ? reps : 20));
  int dev = 0;
  struct cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, dev));
  printf("device %s, %d SMs; median of %d runs each, 32 MiB workspace\n", p.name, p.multiProcessorCount, reps);
  float alpha = 1.f, beta = 0.f;
  for (int s = 0; s < nsh; s++) {
    int M = sh[s][0], N = sh[s][1], K = sh[s][2];
    cublasLtMatmulDesc_t d;
    cublasLtMatrixLayout_t la, lb, lc;
    LK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t opt = CUBLAS_OP_T, opn = CUBLAS_OP_N;
    LK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &opt, sizeof opt));
    LK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &opn, sizeof opn));
    LK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, K, N, K));
    LK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, K, M, K));
    LK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, N, M, N));
    cublasLtMatmulPreference_t pref;
    LK(cublasLtMatmulPreferenceCreate(&pref));
    size_t wsb = WS;
    LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    cublasLtMatmulHeuristicResult_t hr[MAXALG];
    int nres = 0;
    LK(cublasLtMatmulAlgoGetHeuristic(lt, d, la, lb, lc, lc, pref, MAXALG, hr, &nres));
    double flop = 2.0 * M * N * K;
    printf("\n%d x %d x %d: %d algorithms\n", M, N, K, nres);
    float first = 0, best = 0;
    int bi = -1;
    for (int a = 0; a < nres; a++) {
      if (hr[a].state != CUBLAS_STATUS_SUCCESS) continue;
      int bad = 0;
      for (int r = 0; r < 3 && !bad; r++)
        bad = cublasLtMatmul(lt, d, &alpha, W, la, X, lb, &beta, Y, lc, Y, lc, &hr[a].algo, ws, WS, st) != CUBLAS_STATUS_SUCCESS;
      if (bad) { printf("  #%-2d fails to launch\n", a); continue; }
      for (int r = 0; r < reps; r++) {
        CK(cudaEventRecord(e0, st));
        LK(cublasLtMatmul(lt, d, &alpha, W, la, X, lb, &beta, Y, lc, Y, lc, &hr[a].algo, ws, WS, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&t[r], e0, e1));
      }
      qsort(t, (size_t)reps, sizeof(float), cmpf);
      float ms = t[reps / 2], tf = (float)(flop / (ms * 1e-3) / 1e12);
      if (a == 0) first = tf;
      if (tf > best) best = tf, bi = a;
      printf("  #%-2d %7.3f ms %6.1f TFLOP/s  tile %3d stages %3d splitk %2d cluster %2d swizzle %d%s\n", a, ms, tf,
             cfg(&hr[a].algo, CUBLASLT_ALGO_CONFIG_TILE_ID), cfg(&hr[a].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
             cfg(&hr[a].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), cfg(&hr[a].algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
             cfg(&hr[a].algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING), a == 0 ? "  <- heuristic's first (dflc)" : "");
    }
    printf("  best #%d %.1f TFLOP/s against the first's %.1f: %+.1f%%\n", bi, best, first, first > 0 ? 100 * (best / first - 1) : 0);
    if (s == 0) {
      /* sustained: the first algorithm back to back, windows of 20 runs */
      printf("  sustained (first algorithm, back to back):");
      for (int wdw = 0; wdw < 12; wdw++) {
        CK(cudaEventRecord(e0, st));
        for (int r = 0; r < 20; r++)
          LK(cublasLtMatmul(lt, d, &alpha, W, la, X, lb, &beta, Y, lc, Y, lc, &hr[0].algo, ws, WS, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        printf(" %.0f", flop * 20 / (ms * 1e-3) / 1e12);
      }
      printf(" TFLOP/s\n");
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb); cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(d);
  }
  return 0;
}
