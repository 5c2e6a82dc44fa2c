/*
** bench_memops (GPU, not in the default ctest run): the step's memory-bound row kernels alone, at
** the shapes the 8B and 27B steps give them, each next to a device copy of the same bytes, so that
** kernel variants are compared in seconds and against what a copy of that size reaches (the 4.3 TB/s
** of docs/journal/2026-11-performance.md is a 2 GiB copy's; a 50 MB kernel pays its ramp and tail too).
**   timed: each case's op launched back to back over four buffer sets (together larger than the
**     50 MB L2) behind a 1 GiB copy, so the host's launches are queued before the first one starts;
**     CUDA events around the case's launches only; median of the repetitions, per launch.
**   bytes: what the op must move (its inputs read once, its outputs written once; the RMSNorm
**     backward's f32 partial dw rows are the kernel's own overhead and not counted).
** A variant under comparison is picked by a temporary setting runtime/cuda reads at each launch (none
** today: a comparison's loser is deleted with its switch): BENCH_MEM_V="VAR=VAL,.. VAR=VAL" times each
** setting after the default. Usage: bench_memops [reps] [case-substring]
*/
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "compiler/graph.h"
#include "compiler/status.h"
#include "runtime/cuda/cuda.h"
#include "tests/cuda/bench_util.h"

#define CU(call)                                                                                                   \
  do {                                                                                                             \
    cudaError_t e_ = (call);                                                                                       \
    if (e_ != cudaSuccess) {                                                                                       \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));                       \
      exit(1);                                                                                                     \
    }                                                                                                              \
  } while (0)

static unsigned long long rng_s = 2026113001;
static float urand(void) { return dfl_bench_urand(&rng_s); }

enum { NSET = 4, MAXC = 16, MAXT = 512 };
typedef struct {
  char name[64];
  int op0, op1;     /* the case's ops: one per buffer set */
  int cp0, cp1;     /* the same bytes copied, one per set */
  double bytes;     /* per op */
} bcase;

static dfl_graph g;
static bcase cs[MAXC];
static int ncs;
/* tensors to fill, with a value range: [lo, hi) */
static struct { int t; float lo, hi; } fills[MAXT];
static int nfill, ipos[MAXC * NSET], nipos; /* ipos: i32 positions */

static int tens(const char *base, int k, dfl_dtype dt, int64_t r, int64_t c, float lo, float hi) {
  char nm[64];
  snprintf(nm, sizeof nm, "c%d.%s.%d", ncs, base, k);
  int t = r > 0 ? dfl_tensor_2d(&g, nm, dt, DFL_T_INPUT, r, c) : dfl_tensor_1d(&g, nm, dt, DFL_T_INPUT, c);
  if (lo < hi) fills[nfill].t = t, fills[nfill].lo = lo, fills[nfill].hi = hi, nfill++;
  return t;
}

/* a bf16 copy moving `bytes` (half read, half written), one per set */
static void add_copy(bcase *b) {
  int64_t n = (int64_t)(b->bytes / 4);
  b->cp0 = g.nops;
  for (int k = 0; k < NSET; k++) {
    int x = tens("cpx", k, DFL_BF16, 0, n, -1, 1), y = tens("cpy", k, DFL_BF16, 0, n, 0, 0);
    dfl_op_add(&g, DFL_OP_COPY, &x, 1, &y, 1, NULL);
  }
  b->cp1 = g.nops;
}

/* A case's first op and its name (printf-style), then, once its NSET ops are in, the rest: its last
** op, its bytes and the copy of as many. */
__attribute__((format(printf, 1, 2))) static bcase *case_begin(const char *fmt, ...) {
  bcase *b = &cs[ncs];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b->name, sizeof b->name, fmt, ap);
  va_end(ap);
  b->op0 = g.nops;
  return b;
}
static void case_end(bcase *b, double bytes) {
  b->op1 = g.nops;
  b->bytes = bytes;
  add_copy(b);
  ncs++;
}
/* an i32 position tensor of set k, drawn in main */
static int positions(int k, int64_t R) {
  int pos = tens("pos", k, DFL_I32, 0, R, 0, 0);
  ipos[nipos++] = pos;
  return pos;
}

/* RMSNORM over rows of C; quant: its FP8 form (the FP8 target's norms, dfl_fuse_quant) */
static void case_norm(const char *nm, int64_t R, int64_t C, int quant) {
  bcase *b = case_begin("%s %lldx%lld", nm, (long long)R, (long long)C);
  for (int k = 0; k < NSET; k++) {
    int x = tens("x", k, DFL_BF16, R, C, -2, 2), w = tens("w", k, DFL_BF16, 0, C, 0.5f, 1.5f);
    int y = dfl_rmsnorm(&g, x, w, (int)C, 1e-6, "y");
    if (quant) {
      int s;
      dfl_quant_f8(&g, y, &s, "y8");
    }
  }
  if (quant && dfl_fuse_quant(&g) != NSET) { fprintf(stderr, "FAIL: %s: the norm did not fuse\n", b->name); exit(1); }
  case_end(b, (double)R * C * (quant ? 3 : 4) + R * (quant ? 8 : 4) + C * 2);
}

/* RMSNORM_BWD over R rows of D features in groups of G, with the residual's addend or not */
static void case_norm_bwd(const char *nm, int64_t R, int64_t D, int G, int addend) {
  bcase *b = case_begin("%s %lldx%lld G%d%s", nm, (long long)R, (long long)D, G, addend ? " +add" : "");
  int64_t ng = R * D / G;
  for (int k = 0; k < NSET; k++) {
    int x = tens("x", k, DFL_BF16, R, D, -2, 2), w = tens("w", k, DFL_BF16, 0, G, 0.5f, 1.5f);
    int rs = tens("rstd", k, DFL_F32, 0, ng, 0.5f, 1.5f), dy = tens("dy", k, DFL_BF16, R, D, -1, 1);
    int ad = addend ? tens("ad", k, DFL_BF16, R, D, -1, 1) : -1;
    int dx = tens("dx", k, DFL_BF16, R, D, 0, 0), dw = tens("dw", k, DFL_F32, 0, G, 0, 0);
    dfl_attrs a = {0};
    a.group = G, a.eps = 1e-6;
    dfl_op_add(&g, DFL_OP_RMSNORM_BWD, (int[]){x, w, rs, dy, ad}, addend ? 5 : 4, (int[]){dx, dw}, 2, &a);
  }
  case_end(b, (double)R * D * 2 * (addend ? 4 : 3) + ng * 4 + G * 6);
}

/* SWIGLU + QUANT_F8 fused (the FP8 target's MLP), and QUANT_F8 alone (its attention output) */
static void case_quant(const char *nm, int64_t R, int64_t C, int swiglu) {
  bcase *b = case_begin("%s %lldx%lld", nm, (long long)R, (long long)C);
  for (int k = 0; k < NSET; k++) {
    int x = tens("x", k, DFL_BF16, R, C, -3, 3), s;
    if (swiglu) x = dfl_swiglu(&g, x, tens("u", k, DFL_BF16, R, C, -2, 2), "h");
    dfl_quant_f8(&g, x, &s, "h8");
  }
  if (swiglu && dfl_fuse_quant(&g) != NSET) { fprintf(stderr, "FAIL: %s: did not fuse\n", b->name); exit(1); }
  case_end(b, (double)R * C * (swiglu ? 5 : 3) + R * 4);
}

/* ROPE over R rows of nh heads of 128 (theta 1e6), positions drawn below 40,000 */
static void case_rope(const char *nm, int64_t R, int nh) {
  bcase *b = case_begin("%s %lldx%dx128", nm, (long long)R, nh);
  for (int k = 0; k < NSET; k++) {
    int x = tens("x", k, DFL_BF16, R, nh * 128, -2, 2);
    int pos = positions(k, R);
    dfl_rope(&g, x, pos, nh, 128, 1e6, "xr");
  }
  case_end(b, (double)R * nh * 128 * 4 + R * 4);
}

/* the target's per-head q/k norms and RoPE, fused into one launch (dfl_fuse_norm_rope, then
** dfl_fuse_rope_pair): q R x 32 x 128, k R x 8 x 128 */
static void case_norm_rope_pair(const char *nm, int64_t R) {
  bcase *b = case_begin("%s %lldx(32+8)x128", nm, (long long)R);
  for (int k = 0; k < NSET; k++) {
    int xq = tens("xq", k, DFL_BF16, R, 32 * 128, -2, 2), xk = tens("xk", k, DFL_BF16, R, 8 * 128, -2, 2);
    int wq = tens("wq", k, DFL_BF16, 0, 128, 0.5f, 1.5f), wk = tens("wk", k, DFL_BF16, 0, 128, 0.5f, 1.5f);
    int pos = positions(k, R);
    dfl_rope(&g, dfl_rmsnorm(&g, xq, wq, 128, 1e-6, "qn"), pos, 32, 128, 1e6, "qr");
    dfl_rope(&g, dfl_rmsnorm(&g, xk, wk, 128, 1e-6, "kn"), pos, 8, 128, 1e6, "kr");
  }
  int f1 = dfl_fuse_norm_rope(&g), f2 = dfl_fuse_rope_pair(&g);
  if (f1 != 2 * NSET || f2 != NSET) { fprintf(stderr, "FAIL: %s: fused %d and %d\n", b->name, f1, f2); exit(1); }
  case_end(b, (double)R * 40 * 128 * 4 + R * 4 + 2 * 128 * 2);
}

static dfl_cuda c;
static cudaEvent_t e0, e1;
static int busy_op;

/* ms per op of ops [a, b), launched `rounds` times back to back behind the busy copy */
static double time_ops(int a, int b, int rounds) {
  if (dfl_cuda_run_op(&c, busy_op)) exit(1);
  cudaStream_t st = (cudaStream_t)dfl_cuda_stream(&c);
  CU(cudaEventRecord(e0, st));
  for (int r = 0; r < rounds; r++)
    for (int i = a; i < b; i++)
      if (dfl_cuda_run_op(&c, i)) { fprintf(stderr, "FAIL: op %d\n", i); exit(1); }
  CU(cudaEventRecord(e1, st));
  CU(cudaEventSynchronize(e1));
  float ms = 0;
  CU(cudaEventElapsedTime(&ms, e0, e1));
  return ms / (rounds * (b - a));
}

static double median_ops(int a, int b, int reps) {
  double t[64];
  if (reps > 64) reps = 64;
  time_ops(a, b, 1); /* warm-up */
  for (int r = 0; r < reps; r++) t[r] = time_ops(a, b, 4);
  qsort(t, (size_t)reps, sizeof t[0], dfl_bench_cmp_d);
  return t[reps / 2];
}

int main(int argc, char **argv) {
  if (!dfl_cuda_available()) { printf("SKIP: no CUDA device\n"); return 77; }
  int reps = argc > 1 ? atoi(argv[1]) : 15;
  const char *only = argc > 2 ? argv[2] : NULL;
  if (reps < 1) reps = 1;
  dfl_graph_init(&g);
  g.cur_phase = DFL_PH_TARGET;
  /* the 8B step's shapes: target rows S = 4096 of 4096 features (MLP 12288); drafter rows 512 x 16 =
  ** 8192, 32 query and 8 kv heads of 128; the 27B drafter's hidden 5120 */
  case_norm("norm fp8 (FP8 target)", 4096, 4096, 1);
  case_norm("norm bf16 (bf16 target)", 4096, 4096, 0);
  case_norm("norm bf16 (8B drafter)", 8192, 4096, 0);
  case_norm("norm bf16 (27B drafter)", 8192, 5120, 0);
  case_quant("swiglu fp8 (FP8 target)", 4096, 12288, 1);
  case_quant("quant fp8 (attention out)", 4096, 4096, 0);
  case_norm_bwd("norm bwd (8B drafter)", 8192, 4096, 4096, 1);
  case_norm_bwd("norm bwd (8B drafter)", 8192, 4096, 4096, 0);
  case_norm_bwd("norm bwd (27B drafter)", 8192, 5120, 5120, 1);
  case_norm_bwd("q-norm bwd (drafter)", 8192, 4096, 128, 0);
  case_norm_bwd("k-norm bwd (drafter)", 8192, 1024, 128, 0);
  case_norm_rope_pair("q/k norm+rope (target)", 4096);
  case_rope("rope q (drafter)", 8192, 32);
  case_rope("rope k (drafter)", 8192, 8);
  { /* the busy op: 1 GiB copied */
    int x = dfl_tensor_1d(&g, "busy.x", DFL_BF16, DFL_T_INPUT, (int64_t)1 << 28);
    int y = dfl_tensor_1d(&g, "busy.y", DFL_BF16, DFL_T_INPUT, (int64_t)1 << 28);
    busy_op = dfl_op_add(&g, DFL_OP_COPY, &x, 1, &y, 1, NULL);
  }
  if (dfl_cuda_init(&c, &g, NULL, NULL) != DFL_OK) { fprintf(stderr, "FAIL: cuda init\n"); return 1; }
  /* fresh random values in each tensor's range (only bandwidth is measured, but no zeros) */
  int64_t nmax = 0;
  for (int i = 0; i < nfill; i++) {
    int64_t n = dfl_tensor_numel(&g.t[fills[i].t]);
    if (n > nmax) nmax = n;
  }
  float *h = malloc((size_t)nmax * 4);
  if (!h) { fprintf(stderr, "FAIL: out of host memory\n"); return 1; }
  for (int i = 0; i < nfill; i++) {
    int64_t n = dfl_tensor_numel(&g.t[fills[i].t]);
    float lo = fills[i].lo, sp = fills[i].hi - lo;
    for (int64_t k = 0; k < n; k++) h[k] = lo + sp * 0.5f * (urand() + 1.f);
    if (dfl_cuda_set_f(&c, fills[i].t, h, n)) return 1;
  }
  free(h);
  int32_t *pv = malloc(8192 * sizeof *pv);
  if (!pv) { fprintf(stderr, "FAIL: out of host memory\n"); return 1; }
  for (int i = 0; i < nipos; i++) {
    int64_t n = dfl_tensor_numel(&g.t[ipos[i]]);
    for (int64_t k = 0; k < n; k++) pv[k] = (int32_t)(20000.f * (urand() + 1.f));
    if (dfl_cuda_set_i32(&c, ipos[i], pv, n)) return 1;
  }
  free(pv);
  CU(cudaEventCreate(&e0));
  CU(cudaEventCreate(&e1));
  printf("%d reps; per launch: kernel ms, GB/s by the op's bytes, a copy of those bytes, the ratio\n", reps);
  const char *ex = getenv("BENCH_MEM_V");
  char list[1024];
  snprintf(list, sizeof list, "default %s", ex ? ex : "");
  for (char *save = NULL, *it = strtok_r(list, " ", &save); it; it = strtok_r(NULL, " ", &save)) {
    int dflt = !strcmp(it, "default");
    if (!dflt) dfl_bench_setvars(it, 1);
    printf("== %s\n", it);
    for (int k = 0; k < ncs; k++) {
      if (only && !strstr(cs[k].name, only)) continue;
      double t = median_ops(cs[k].op0, cs[k].op1, reps), tc = median_ops(cs[k].cp0, cs[k].cp1, reps);
      printf("%-46s %7.1f us %7.1f GB/s | copy %7.1f us %7.1f GB/s | %5.1f%%\n", cs[k].name, t * 1e3,
             cs[k].bytes / t * 1e-6, tc * 1e3, cs[k].bytes / tc * 1e-6, 100.0 * tc / t);
    }
    if (!dflt) dfl_bench_setvars(it, 0);
  }
  dfl_cuda_free(&c);
  dfl_graph_free(&g);
  return 0;
}
