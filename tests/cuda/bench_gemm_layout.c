/*
** bench_gemm_layout.c: does a bf16 GEMM of the drafter's backward or loss head run faster with its
** weight operand stored transposed? dflc's backward dX GEMMs read the weight W[N_out, K_in] as stored
** ("NN": dX = dY W, W's rows along the output) and run at ~690 TFLOP/s on the 27B against ~800 for
** the forward's "NT" (both operands K-major, Hopper's native wgmma layout). This times each shape
** both ways, cuBLASLt's first heuristic choice and the best of its first 8, on fresh random data.
** Not a ctest test: run build/bench_gemm_layout on a GPU.   bench_gemm_layout [reps]
**
** bench_gemm_layout sustained [seconds]: the step runs at the H200's power cap, where a GEMM's rate
** is set by its energy per FLOP, not by its speed in a burst. This runs the step's largest GEMM
** shapes back to back for `seconds` (default 1.5) with each of cuBLASLt's first 8 algorithms, after
** 2 s that bring the board to its cap, and prints the rate of the last part of each run: whether an
** algorithm other than the first heuristic would do more work per joule.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <cuda_runtime.h>
#include <cublasLt.h>
#include "tests/cuda/bench_util.h"

#define CU(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define LT(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { fprintf(stderr, "%s:%d: %s: status %d\n", __FILE__, __LINE__, #x, (int)s_); exit(1); } } while (0)

static cublasLtHandle_t lt;
static void *ws;
static const size_t WS = 32u << 20; /* runtime/cuda.c's BLAS_WS */

static uint64_t rs;
static uint16_t rbf(void) { /* a random bf16 in [-1, 1) */
  rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
  float f = (float)((rs >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
  uint32_t u; memcpy(&u, &f, 4); return (uint16_t)(u >> 16);
}
/* n random bf16 on the device: a fresh 32 MB random block, copied over the buffer from varying offsets
** (drawing billions of values on the host would take longer than the timing) */
#define POOL (16u << 20)
static uint16_t *pool;
static void *drand_bf(size_t n) {
  if (!pool) pool = malloc((size_t)POOL * 2);
  for (size_t i = 0; i < POOL; i++) pool[i] = rbf();
  uint16_t *d; CU(cudaMalloc((void **)&d, n * 2));
  for (size_t o = 0; o < n;) {
    size_t off = (size_t)(rbf() & 0x3fff) * 64, len = POOL - off;
    if (len > n - o) len = n - o;
    CU(cudaMemcpy(d + o, pool + off, len * 2, cudaMemcpyHostToDevice));
    o += len;
  }
  return d;
}

/* Row-major C[M,N] = op(A)[M,K] op(B)[K,N] as runtime/cuda.c's mm_setup: cuBLASLt's column-major
** C^T = op(B)^T op(A)^T. ta: A stored [K,M]; tb: B stored [N,K]. Fresh random operands, and
** cuBLASLt's first 8 heuristic algorithms. */
typedef struct {
  void *A, *B, *C;
  cublasLtMatmulDesc_t d;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulHeuristicResult_t h[8];
  int n;
} gemm;
static void gemm_setup(gemm *g, int ta, int tb, int M, int N, int K, int f32out) {
  size_t ec = f32out ? 4 : 2;
  g->A = drand_bf((size_t)M * K), g->B = drand_bf((size_t)K * N);
  CU(cudaMalloc(&g->C, (size_t)M * N * ec));
  LT(cublasLtMatmulDescCreate(&g->d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT(cublasLtMatmulDescSetAttribute(g->d, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  LT(cublasLtMatmulDescSetAttribute(g->d, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  LT(cublasLtMatrixLayoutCreate(&g->la, CUDA_R_16BF, tb ? K : N, tb ? N : K, tb ? K : N));
  LT(cublasLtMatrixLayoutCreate(&g->lb, CUDA_R_16BF, ta ? M : K, ta ? K : M, ta ? M : K));
  LT(cublasLtMatrixLayoutCreate(&g->lc, f32out ? CUDA_R_32F : CUDA_R_16BF, N, M, N));
  cublasLtMatmulPreference_t p;
  LT(cublasLtMatmulPreferenceCreate(&p));
  LT(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &WS, sizeof WS));
  g->n = 0;
  LT(cublasLtMatmulAlgoGetHeuristic(lt, g->d, g->la, g->lb, g->lc, g->lc, p, 8, g->h, &g->n));
  cublasLtMatmulPreferenceDestroy(p);
}
static void gemm_run(gemm *g, int a) {
  float alpha = 1, beta = 0;
  LT(cublasLtMatmul(lt, g->d, &alpha, g->B, g->la, g->A, g->lb, &beta, g->C, g->lc, g->C, g->lc, &g->h[a].algo, ws, WS, 0));
}
static void gemm_free(gemm *g) {
  cublasLtMatrixLayoutDestroy(g->la); cublasLtMatrixLayoutDestroy(g->lb); cublasLtMatrixLayoutDestroy(g->lc);
  cublasLtMatmulDescDestroy(g->d);
  CU(cudaFree(g->A)); CU(cudaFree(g->B)); CU(cudaFree(g->C));
}

/* Each algorithm timed over reps back-to-back runs; returns the first's ms, *best the best's. */
static double time_gemm(int ta, int tb, int M, int N, int K, int f32out, int reps, double *best, int *nalg) {
  gemm g;
  gemm_setup(&g, ta, tb, M, N, K, f32out);
  cudaEvent_t e0, e1; CU(cudaEventCreate(&e0)); CU(cudaEventCreate(&e1));
  double first = 0; *best = 1e30; *nalg = g.n;
  for (int a = 0; a < g.n; a++) {
    for (int w = 0; w < 3; w++) gemm_run(&g, a);
    CU(cudaEventRecord(e0, 0));
    for (int r = 0; r < reps; r++) gemm_run(&g, a);
    CU(cudaEventRecord(e1, 0)); CU(cudaEventSynchronize(e1));
    float ms; CU(cudaEventElapsedTime(&ms, e0, e1));
    double t = ms / reps;
    if (a == 0) first = t;
    if (t < *best) *best = t;
  }
  CU(cudaEventDestroy(e0)); CU(cudaEventDestroy(e1));
  gemm_free(&g);
  return first;
}

typedef struct { const char *what; int M, N, K, f32out; } shape;

/* Each algorithm run back to back for `sec` seconds; the rate over the part after the first 0.3 s. */
static void sustain(const char *what, int ta, int tb, int M, int N, int K, int f32out, double sec) {
  gemm g;
  gemm_setup(&g, ta, tb, M, N, K, f32out);
  double fl = 2.0 * M * N * K;
  printf("%s %dx%dx%d%s:", what, M, N, K, f32out ? " f32 out" : "");
  for (int a = -1; a < g.n; a++) { /* a = -1: the 2 s that bring the board to its cap, algorithm 0 */
    double t0 = dfl_bench_now(), tm = 0, lim = a < 0 ? 2.0 : sec;
    long cnt = 0;
    while (dfl_bench_now() - t0 < lim) {
      int measured = dfl_bench_now() - t0 >= 0.3;
      double b0 = dfl_bench_now();
      for (int r = 0; r < 4; r++) gemm_run(&g, a < 0 ? 0 : a);
      CU(cudaDeviceSynchronize());
      if (measured) { tm += dfl_bench_now() - b0; cnt += 4; }
    }
    if (a >= 0) printf(" %d:%.0f", a, cnt ? fl * cnt / tm / 1e12 : 0.0);
  }
  printf("  TF/s sustained\n");
  fflush(stdout);
  gemm_free(&g);
}

int main(int argc, char **argv) {
  int sus = argc > 1 && !strcmp(argv[1], "sustained");
  int reps = argc > 1 && !sus ? atoi(argv[1]) : 20;
  double sec = sus && argc > 2 ? atof(argv[2]) : 1.5;
  if (reps < 1 || sec < 0.5) { fprintf(stderr, "usage: bench_gemm_layout [reps >= 1] | sustained [seconds >= 0.5]\n"); return 2; }
  rs = 0x9e3779b97f4a7c15ull ^ (uint64_t)time(NULL); /* fresh data every run */
  LT(cublasLtCreate(&lt));
  CU(cudaMalloc(&ws, WS));
  if (sus) {
    /* the step's heaviest GEMMs (row-major C[M,N]; ta: A stored [K,M], tb: B stored [N,K]) */
    static const struct { const char *what; int ta, tb, M, N, K, f32out; } big[] = {
        {"27B fwd gate/up NT", 0, 1, 8192, 17408, 5120, 0}, {"27B bwd dX of down NN", 0, 0, 8192, 5120, 17408, 0},
        {"27B bwd dW of gate/up TN", 1, 0, 17408, 5120, 8192, 0}, {"27B loss logits NT", 0, 1, 1920, 248320, 5120, 0},
        {"27B loss dX NN", 0, 0, 1920, 5120, 248320, 0},          {"8B target fwd gate/up NT", 0, 1, 4096, 12288, 4096, 0}};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
      sustain(big[i].what, big[i].ta, big[i].tb, big[i].M, big[i].N, big[i].K, big[i].f32out, sec);
    return 0;
  }
  /* dX-like shapes: C[M,N] = A[M,K] W, W stored [K,N] ("NN", as dflc's backward reads it) or
  ** transposed, [N,K] ("NT"); the loss head's logits GEMM (NT) for scale */
  static const shape sh[] = {
      {"27B loss dX (1920 rows)", 1920, 5120, 248320, 0},
      {"27B loss dX (7680 rows)", 7680, 5120, 248320, 0},
      {"27B bwd dX of down (K 17408)", 8192, 5120, 17408, 0},
      {"27B bwd dX of gate/up (K 5120)", 8192, 17408, 5120, 0},
      {"27B bwd dX of q (K 4096)", 8192, 5120, 4096, 0},
      {"27B bwd dX of k/v (K 1024)", 8192, 5120, 1024, 0},
      {"27B bwd dX of k+v (K 2048)", 8192, 5120, 2048, 0},
      {"8B loss dX (2560 rows)", 2560, 4096, 151936, 0},
      {"8B bwd dX of down (K 12288)", 8192, 4096, 12288, 0},
      {"8B bwd dX of k/v (K 1024)", 8192, 4096, 1024, 0},
      {"8B bwd dX of k+v (K 2048)", 8192, 4096, 2048, 0},
  };
  printf("%-32s %6s %6s %7s | %-23s | %-23s\n", "shape", "M", "N", "K", "NN first / best TF/s", "NT first / best TF/s");
  for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) {
    const shape *s = &sh[i];
    double fl = 2.0 * s->M * s->N * s->K, b0, b1;
    int n0, n1;
    double t0 = time_gemm(0, 0, s->M, s->N, s->K, s->f32out, reps, &b0, &n0);
    double t1 = time_gemm(0, 1, s->M, s->N, s->K, s->f32out, reps, &b1, &n1);
    printf("%-32s %6d %6d %7d | %6.3f %5.0f / %5.0f (%d) | %6.3f %5.0f / %5.0f (%d)\n", s->what, s->M, s->N, s->K,
           t0, fl / t0 / 1e9, fl / b0 / 1e9, n0, t1, fl / t1 / 1e9, fl / b1 / 1e9, n1);
  }
  /* the logits GEMM and the weight gradients in their one layout, for the same machine's scale */
  static const struct { const char *what; int ta, tb, M, N, K, f32out; } one[] = {
      {"27B loss logits NT", 0, 1, 1920, 248320, 5120, 0}, {"27B dW TN f32", 1, 0, 17408, 5120, 8192, 1},
      {"27B dW TN bf16", 1, 0, 17408, 5120, 8192, 0},      {"8B dW TN bf16", 1, 0, 12288, 4096, 8192, 0},
      {"8B dW TN f32", 1, 0, 12288, 4096, 8192, 1}};
  for (size_t i = 0; i < sizeof one / sizeof one[0]; i++) {
    double b, fl = 2.0 * one[i].M * one[i].N * one[i].K;
    int n;
    double t = time_gemm(one[i].ta, one[i].tb, one[i].M, one[i].N, one[i].K, one[i].f32out, reps, &b, &n);
    printf("%s %dx%dx%d: %.3f ms, %.0f TF/s (best %.0f)\n", one[i].what, one[i].M, one[i].N, one[i].K, t, fl / t / 1e9,
           fl / b / 1e9);
  }
  return 0;
}
