/*
** bench_optim (GPU, not in the default ctest run): the optimizer's memory-bound kernels alone, at
** a drafter's parameter shapes, so that kernel variants can be compared in seconds instead of a
** full step (docs/journal/2026-11-performance.md, session 8).
**   shapes: the Qwen3.6-27B-shaped drafter (hidden 5120, mlp 17408, 32 x 128 heads, 8 kv heads,
**     5 layers, fc over 5 taps: 1.73 G parameters) or, with argument "8b", the Qwen3-8B one;
**   dtypes: bf16 params and gradients (`grads = bf16`), f32 masters and moments, as the examples;
**   timed: the grad norm (multi-tensor SUMSQ_ACC), AdamW (multi-tensor ADAMW, keep_grad) and a
**     device copy of 2 GiB for scale; median of the repetitions, host clock around launch + sync.
** A kernel variant under comparison is picked by a temporary setting the backend reads at each eager
** launch (runtime/cuda/cuda.c mt_run; none today: a comparison's loser is deleted with its switch):
** BENCH_OPT_V="VAR=VAL VAR=VAL,OTHER=1 ..." times each setting after the default. Bandwidth counts the
** bytes each kernel must move (28 B a parameter for AdamW:
** read grad 2, master 4, m 4, v 4; write master, m, v, param).
** Usage: bench_optim [27b|8b] [reps]
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "compiler/graph.h"
#include "compiler/status.h"
#include "runtime/cuda/cuda.h"
#include "tests/cuda/bench_util.h"

static unsigned long long rng_s = 12345;
static float urand(void) { return dfl_bench_urand(&rng_s); }

enum { MAXP = 64 };
typedef struct { int64_t r, c; } shape;

static int shapes(int is8b, shape *s) {
  int64_t H = is8b ? 4096 : 5120, F = is8b ? 12288 : 17408, Q = 32 * 128, KV = 8 * 128, n = 0;
  s[n++] = (shape){H, 5 * H}; /* fc over the five taps */
  s[n++] = (shape){1, H};
  for (int l = 0; l < 5; l++) {
    s[n++] = (shape){1, H};
    s[n++] = (shape){Q, H}; s[n++] = (shape){KV, H}; s[n++] = (shape){KV, H};
    s[n++] = (shape){1, 128}; s[n++] = (shape){1, 128};
    s[n++] = (shape){H, Q};
    s[n++] = (shape){1, H};
    s[n++] = (shape){F, H}; s[n++] = (shape){F, H}; s[n++] = (shape){H, F};
  }
  s[n++] = (shape){1, H};
  return (int)n;
}

/* The eager run of a phase mask (the graphs would time their capture once). */
static int run_mask(dfl_cuda *c, int mask) { return dfl_cuda_run_eager(c, (unsigned)mask); }

int main(int argc, char **argv) {
  if (!dfl_cuda_available()) { printf("SKIP: no CUDA device\n"); return 77; }
  int is8b = argc > 1 && !strcmp(argv[1], "8b"), reps = argc > 2 ? atoi(argv[2]) : 10;
  if (reps < 1) reps = 1;
  shape s[MAXP];
  int np = shapes(is8b, s);
  dfl_graph g;
  dfl_graph_init(&g);
  int p[MAXP], ms[MAXP], m[MAXP], v[MAXP], gr[MAXP];
  int64_t total = 0;
  char nm[64];
  for (int i = 0; i < np; i++) {
#define T2(var, suf, dt, kind) snprintf(nm, sizeof nm, "w%d%s", i, suf); var[i] = dfl_tensor_2d(&g, nm, dt, kind, s[i].r, s[i].c)
    T2(p, "", DFL_BF16, DFL_T_PARAM);
    T2(ms, ".master", DFL_F32, DFL_T_STATE);
    T2(m, ".m", DFL_F32, DFL_T_STATE);
    T2(v, ".v", DFL_F32, DFL_T_STATE);
    T2(gr, ".grad", DFL_BF16, DFL_T_GRAD);
#undef T2
    total += s[i].r * s[i].c;
  }
  int sumsq = dfl_tensor_1d(&g, "sumsq", DFL_F32, DFL_T_STATE, 1), den = dfl_tensor_1d(&g, "den", DFL_F32, DFL_T_STATE, 1);
  int st = dfl_tensor_1d(&g, "state", DFL_F32, DFL_T_STATE, DFL_OPT_COUNT);
  const int64_t ncopy = (int64_t)1 << 30; /* 2 GiB of bf16 */
  int cx = dfl_tensor_1d(&g, "copy.x", DFL_BF16, DFL_T_STATE, ncopy), cy = dfl_tensor_1d(&g, "copy.y", DFL_BF16, DFL_T_STATE, ncopy);
  /* phases only split the timing: grad norm (backward), AdamW (optimizer), copy (target) */
  g.cur_phase = DFL_PH_TARGET;
  dfl_op_add(&g, DFL_OP_COPY, &cx, 1, &cy, 1, NULL);
  g.cur_phase = DFL_PH_BACKWARD;
  for (int i = 0; i < np; i++) {
    int in[2] = {sumsq, gr[i]};
    dfl_op_add(&g, DFL_OP_SUMSQ_ACC, in, 2, &sumsq, 1, NULL);
  }
  g.cur_phase = DFL_PH_OPTIMIZER;
  dfl_attrs a = {0};
  a.lr = 6e-4, a.beta1 = 0.9, a.beta2 = 0.95, a.eps = 1e-8, a.wd = 0.01, a.clip = 1.0, a.warmup = 10, a.total = 1000;
  {
    int in[3] = {sumsq, den, st};
    dfl_op_add(&g, DFL_OP_OPT_PREP, in, 3, &st, 1, &a);
  }
  a.keep_grad = 1; /* grads = bf16, accum 1: the backward overwrites them */
  for (int i = 0; i < np; i++) {
    int in[6] = {p[i], ms[i], m[i], v[i], gr[i], st};
    dfl_op_add(&g, DFL_OP_ADAMW, in, 6, in, 5, &a);
  }
  dfl_cuda c;
  if (dfl_cuda_init(&c, &g, NULL, NULL) != DFL_OK) { fprintf(stderr, "FAIL: cuda init\n"); return 1; }
  /* fresh random values, drawn once at the largest tensor's size and shared by the tensors (only
  ** the bandwidth is measured): params and masters equal (as after loading), small gradients,
  ** moments of a trained state (v > 0) */
  int64_t nmax = 0;
  for (int i = 0; i < np; i++) if (s[i].r * s[i].c > nmax) nmax = s[i].r * s[i].c;
  float *hp = malloc((size_t)nmax * 4), *hg = malloc((size_t)nmax * 4), *hv = malloc((size_t)nmax * 4);
  if (!hp || !hg || !hv) { fprintf(stderr, "FAIL: out of host memory\n"); return 1; }
  for (int64_t k = 0; k < nmax; k++) {
    hp[k] = dfl_bf16_round(0.02f * urand());
    hg[k] = 1e-3f * urand();
    hv[k] = 1e-7f * (1.5f + urand());
  }
  for (int i = 0; i < np; i++) {
    int64_t n = s[i].r * s[i].c;
    if (dfl_cuda_set_f(&c, p[i], hp, n) || dfl_cuda_set_f(&c, ms[i], hp, n) || dfl_cuda_set_f(&c, gr[i], hg, n) ||
        dfl_cuda_set_f(&c, m[i], hg, n) || dfl_cuda_set_f(&c, v[i], hv, n))
      return 1;
  }
  free(hp); free(hg); free(hv);
  float one = 1.f;
  if (dfl_cuda_set_f(&c, den, &one, 1)) return 1;
  printf("%s drafter: %d tensors, %.3f G parameters; %d reps\n", is8b ? "Qwen3-8B" : "Qwen3.6-27B", np, total * 1e-9, reps);
  double t = 0;
  if (dfl_bench_median_ms(&c, run_mask, 1 << DFL_PH_TARGET, reps, &t)) return 1;
  printf("%-40s %8.3f ms %7.1f GB/s\n", "copy 2 GiB (read + write)", t, 2.0 * 2 * ncopy / t * 1e-6);
  const char *ex = getenv("BENCH_OPT_V");
  char list[1024];
  snprintf(list, sizeof list, "default %s", ex ? ex : "");
  int runs = 0;
  for (char *save = NULL, *it = strtok_r(list, " ", &save); it; it = strtok_r(NULL, " ", &save)) {
    runs += reps < 64 ? reps + 1 : 65; /* dfl_bench_median_ms: a warm-up, then at most 64 */
    int dflt = !strcmp(it, "default");
    if (!dflt) dfl_bench_setvars(it, 1);
    double tn = 0, ta = 0;
    if (dfl_bench_median_ms(&c, run_mask, 1 << DFL_PH_BACKWARD, reps, &tn) ||
        dfl_bench_median_ms(&c, run_mask, 1 << DFL_PH_OPTIMIZER, reps, &ta)) return 1;
    double bpp = 28;
    printf("%-40s grad norm %7.3f ms %7.1f GB/s | adamw %7.3f ms %7.1f GB/s | sum %7.3f ms\n", it, tn,
           2.0 * total / tn * 1e-6, ta, bpp * total / ta * 1e-6, tn + ta);
    if (!dflt) dfl_bench_setvars(it, 0);
  }
  /* every optimizer run counted its step (OPT_PREP ran each time, nothing was skipped) */
  float chk[DFL_OPT_COUNT];
  if (dfl_cuda_get_f(&c, st, chk, DFL_OPT_COUNT)) return 1;
  printf("optimizer steps counted on the device: %.0f of %d runs\n", chk[0], runs);
  if ((int)chk[0] != runs) { fprintf(stderr, "FAIL: the step counter does not match the runs\n"); return 1; }
  dfl_cuda_free(&c);
  dfl_graph_free(&g);
  return 0;
}
