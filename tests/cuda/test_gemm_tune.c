/*
** test_gemm_tune (GPU): compile { gemm_tune } (runtime/cuda/gemm_tune.c). Three MATMULs, two of one
** shape and one with an addend (beta 1), in bf16 on random operands (seed from the time, printed):
**  - a backend opened on an empty cache directory times each distinct GEMM once (2 of 3; the repeat
**    takes the first's pick), writes one file a GEMM, and its results match the CPU's at bf16's
**    tolerance (the same as with cuBLASLt's first choice: every candidate is a correct algorithm);
**  - a second backend on the same cache times nothing, reads both picks, and gives bit-identical
**    results (same algorithm, same numerics: what the cache is for);
**  - a cache file holding another key under the same name is a miss (timed again, rewritten);
**  - gemm_tune off times and writes nothing.
** Exit 77 without a GPU.
*/
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "runtime/backend.h"
#include "runtime/cpu/cpu.h"
#include "runtime/io/weights.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/impl.h"

static int fails;
#define EXPECT(c, ...) do { if (!(c)) { printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); fails++; } } while (0)

static int count_files(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strstr(e->d_name, ".algo")) n++;
  closedir(d);
  return n;
}

typedef struct { dfl_graph g; int y[3]; } net;

static void build(net *n) {
  dfl_graph *g = &n->g;
  dfl_graph_init(g);
  /* frozen, so that both backends draw the same random values (dfl_be_cuda_init_random) */
  int x = dfl_tensor_2d(g, "x", DFL_BF16, DFL_T_FROZEN, 1000, 768);
  int w1 = dfl_tensor_2d(g, "w1.weight", DFL_BF16, DFL_T_FROZEN, 1536, 768);
  int w2 = dfl_tensor_2d(g, "w2.weight", DFL_BF16, DFL_T_FROZEN, 1536, 768);
  int r = dfl_tensor_2d(g, "r", DFL_BF16, DFL_T_FROZEN, 1000, 640);
  int w3 = dfl_tensor_2d(g, "w3.weight", DFL_BF16, DFL_T_FROZEN, 640, 768);
  n->y[0] = dfl_tensor_2d(g, "y0", DFL_BF16, DFL_T_ACT, 1000, 1536);
  n->y[1] = dfl_tensor_2d(g, "y1", DFL_BF16, DFL_T_ACT, 1000, 1536);
  n->y[2] = dfl_tensor_2d(g, "y2", DFL_BF16, DFL_T_ACT, 1000, 640);
  dfl_attrs at = {0};
  at.trans_b = 1;
  dfl_op_add(g, DFL_OP_MATMUL, (int[]){x, w1}, 2, &n->y[0], 1, &at);
  dfl_op_add(g, DFL_OP_MATMUL, (int[]){x, w2}, 2, &n->y[1], 1, &at);
  at.beta = 1; /* y2 = x w3^T + r: the addend form (dfl_fuse_add), C = r, D = y2 */
  dfl_op_add(g, DFL_OP_MATMUL, (int[]){x, w3, r}, 3, &n->y[2], 1, &at);
}

/* Runs the graph on a CUDA backend (gemm_tune on or off): the three outputs, the backend's
** description, and how many GEMMs it timed, read from the cache, and told apart. 0: ran. */
static int run_gpu(net *n, int tune, uint64_t seed, float **out, char *desc, size_t cap, int *timed, int *cached,
                   int *distinct) {
  dfl_compile_opts o = {0};
  o.gemm_tune = tune;
  dfl_backend be;
  if (dfl_be_open_cuda(&be, &n->g, NULL, NULL, 0, &o)) return 1;
  dfl_cuda *cu = dfl_be_cuda_state(&be);
  int rc = dfl_be_cuda_init_random(&be, DFL_KIND_BIT(DFL_T_FROZEN), seed, 0.5) || dfl_cuda_run_eager(cu, ~0u) ||
           dfl_cuda_sync(cu);
  for (int k = 0; k < 3 && !rc; k++) {
    int64_t m = dfl_tensor_numel(&n->g.t[n->y[k]]);
    out[k] = malloc(sizeof(float) * (size_t)m);
    rc = !out[k] || dfl_cuda_get_f(cu, n->y[k], out[k], m);
  }
  dfl_cuda_describe(cu, desc, cap);
  const struct dfl_cuda_impl *im = cu->impl;
  *timed = im->tune.timed, *cached = im->tune.cached, *distinct = im->tune.n;
  dfl_be_close(&be);
  return rc;
}

int main(void) {
  if (!dfl_cuda_available()) { printf("SKIP: no CUDA device\n"); return 77; }
  char dir[] = "/tmp/dflc-gemm-tune-XXXXXX", sub[64];
  if (!mkdtemp(dir)) { printf("FAIL: mkdtemp\n"); return 1; }
  setenv("DFL_CACHE_DIR", dir, 1);
  snprintf(sub, sizeof sub, "%s/gemm", dir);
  uint64_t seed = (uint64_t)time(NULL);
  printf("seed %llu, cache %s\n", (unsigned long long)seed, dir);
  net n;
  build(&n);

  /* the CPU's results, in f32 on bf16-rounded operands */
  dfl_cpu cpu;
  if (dfl_cpu_init(&cpu, &n.g, NULL, 0)) { printf("FAIL: cpu backend\n"); return 1; }
  dfl_weights_init(&cpu, DFL_KIND_BIT(DFL_T_FROZEN), seed, 0.5);
  /* the CPU draws in f32; the GPU holds the same values rounded to bf16 (dfl_be_cuda_init_random): the
  ** oracle must multiply what the GPU multiplies (unrounded, 17% of y missed bf16's tolerance on an H100) */
  for (int t = 0; t < n.g.nt; t++)
    if (n.g.t[t].kind == DFL_T_FROZEN && n.g.t[t].dtype == DFL_BF16) {
      float *v = dfl_cpu_f32(&cpu, t);
      for (int64_t i = 0, m = dfl_tensor_numel(&n.g.t[t]); i < m; i++) v[i] = dfl_bf16_round(v[i]);
    }
  if (dfl_cpu_run(&cpu, ~0u)) { printf("FAIL: cpu run\n"); return 1; }

  float *a[3], *b[3], *c[3], *d[3];
  char desc[1024];
  int timed, cached, distinct;
  if (run_gpu(&n, 1, seed, a, desc, sizeof desc, &timed, &cached, &distinct)) { printf("FAIL: first tuned run\n"); return 1; }
  printf("first:  %s\n", desc);
  EXPECT(timed == 2 && cached == 0 && distinct == 2, "first run: timed %d cached %d distinct %d, want 2 0 2", timed,
         cached, distinct);
  EXPECT(count_files(sub) == 2, "%d cache files, want 2", count_files(sub));
  /* the repeat of a shape and the addend form must still be right with the picks they got */
  for (int k = 0; k < 3; k++) {
    const float *h = dfl_cpu_f32(&cpu, n.y[k]);
    int64_t m = dfl_tensor_numel(&n.g.t[n.y[k]]), bad = 0;
    double worst = 0;
    for (int64_t i = 0; i < m; i++) {
      /* bf16 output: half an ulp of the result (2^-9 relative) plus the f32 accumulation order over K 768
      ** (products about 0.25, sums about 7: ~1e-5 absolute); 1e-2 + 2^-8 relative covers both with margin */
      double e = fabs((double)a[k][i] - h[i]), tol = 1e-2 + fabs(h[i]) * (1.0 / 256);
      if (e > tol) bad++;
      if (e > worst) worst = e;
    }
    printf("y%d: %lld of %lld outside bf16's tolerance, max |gpu - cpu| %.3g\n", k, (long long)bad, (long long)m, worst);
    EXPECT(!bad, "y%d differs from the CPU", k);
  }

  int rc = run_gpu(&n, 1, seed, b, desc, sizeof desc, &timed, &cached, &distinct);
  printf("second: %s\n", desc);
  EXPECT(!rc && timed == 0 && cached == 2 && distinct == 2, "second run: timed %d cached %d, want 0 2", timed, cached);
  for (int k = 0; k < 3; k++)
    EXPECT(!memcmp(a[k], b[k], sizeof(float) * (size_t)dfl_tensor_numel(&n.g.t[n.y[k]])),
           "y%d: the cached algorithm gave other bits", k);

  /* another key under each file's name: a miss, timed again and rewritten */
  DIR *dd = opendir(sub);
  struct dirent *e;
  while (dd && (e = readdir(dd))) {
    if (!strstr(e->d_name, ".algo")) continue;
    char p[600];
    snprintf(p, sizeof p, "%s/%s", sub, e->d_name);
    FILE *f = fopen(p, "w");
    if (f) { fprintf(f, "another GPU | mm NT [1,1]x[1]\n0 0 0 0 0 0 0 0\n"); fclose(f); }
  }
  if (dd) closedir(dd);
  rc = run_gpu(&n, 1, seed, c, desc, sizeof desc, &timed, &cached, &distinct);
  EXPECT(!rc && timed == 2 && cached == 0, "foreign cache files: timed %d cached %d, want 2 0", timed, cached);
  for (int k = 0; k < 3; k++) free(c[k]);
  rc = run_gpu(&n, 1, seed, c, desc, sizeof desc, &timed, &cached, &distinct);
  EXPECT(!rc && timed == 0 && cached == 2, "rewritten cache: timed %d cached %d, want 0 2", timed, cached);

  rc = run_gpu(&n, 0, seed, d, desc, sizeof desc, &timed, &cached, &distinct);
  printf("off:    %s\n", desc);
  EXPECT(!rc && timed == 0 && cached == 0 && distinct == 0, "gemm_tune off: timed %d cached %d distinct %d", timed,
         cached, distinct);
  for (int k = 0; k < 3; k++) free(a[k]), free(b[k]), free(c[k]), free(d[k]);
  dfl_cpu_free(&cpu);
  dfl_graph_free(&n.g);
  printf("%s\n", fails ? "FAIL" : "PASS");
  return fails ? 1 : 0;
}
