/*
** bench_gdn DIR B T HK HV D [REPS]: dflc's GATED_DELTA (kernels/hybrid.cuh, the bf16 chunk kernel) on the
** inputs bench/cuda/gdn_fla.py wrote into DIR, timed (median of REPS CUDA-graph replays, host clock
** around each and a sync), with TFLOP/s at 10 C d + 6 d^2 + 2730 FLOP per token and value head (C = 64:
** 183 K at d 128, ../shared/reference/qwen35-hybrid.md section 3; 68 K at d 64), and o against flash-linear-attention's o from the
** same inputs: max |o - o_fla| / max |o_fla|. Run it on the GPU machine after gdn_fla.py (bench/cuda/run.sh).
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "compiler/graph.h"
#include "compiler/status.h"
#include "runtime/cpu/cpu.h"
#include "runtime/cuda/cuda.h"
#include "tests/cuda/bench_util.h"

/* n values of DIR/name: bf16 (bf = 1) or f32, as floats */
static float *load(const char *dir, const char *name, int64_t n, int bf) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "rb");
  float *v = malloc((size_t)n * 4);
  if (!f || !v) { fprintf(stderr, "bench_gdn: cannot read %s\n", p); exit(1); }
  size_t got;
  if (bf) {
    unsigned short *h = (unsigned short *)v + n; /* the bf16 halves in the upper half, expanded upward */
    got = fread(h, 2, (size_t)n, f);
    for (int64_t i = 0; i < n; i++) { unsigned u = (unsigned)h[i] << 16; memcpy(&v[i], &u, 4); }
  } else got = fread(v, 4, (size_t)n, f);
  fclose(f);
  if (got != (size_t)n) { fprintf(stderr, "bench_gdn: %s: %zu of %lld values\n", p, got, (long long)n); exit(1); }
  return v;
}

static int run_all(dfl_cuda *c, int arg) { (void)arg; return dfl_cuda_run(c, DFL_PH_ALL); }

int main(int argc, char **argv) {
  if (argc < 7) { fprintf(stderr, "usage: bench_gdn DIR B T HK HV D [REPS]\n"); return 2; }
  if (!dfl_cuda_available()) { printf("SKIP: no CUDA device\n"); return 77; }
  const char *dir = argv[1];
  int B = atoi(argv[2]), Tn = atoi(argv[3]), Hk = atoi(argv[4]), Hv = atoi(argv[5]), D = atoi(argv[6]);
  int reps = argc > 7 ? atoi(argv[7]) : 10;
  int64_t R = (int64_t)B * Tn;
  dfl_graph g;
  dfl_graph_init(&g);
  int q = dfl_tensor_2d(&g, "q", DFL_BF16, DFL_T_INPUT, R, (int64_t)Hk * D);
  int k = dfl_tensor_2d(&g, "k", DFL_BF16, DFL_T_INPUT, R, (int64_t)Hk * D);
  int v = dfl_tensor_2d(&g, "v", DFL_BF16, DFL_T_INPUT, R, (int64_t)Hv * D);
  int gg = dfl_tensor_2d(&g, "g", DFL_F32, DFL_T_INPUT, R, Hv), bt = dfl_tensor_2d(&g, "beta", DFL_F32, DFL_T_INPUT, R, Hv);
  int o = dfl_tensor_2d(&g, "o", DFL_BF16, DFL_T_ACT, R, (int64_t)Hv * D);
  dfl_attrs a;
  memset(&a, 0, sizeof a);
  a.heads = Hv, a.kv_heads = Hk, a.head_dim = D, a.S = Tn, a.batch = B;
  if (dfl_op_add(&g, DFL_OP_GATED_DELTA, (int[]){q, k, v, gg, bt}, 5, &o, 1, &a) < 0) return 1;
  dfl_cuda c;
  if (dfl_cuda_init(&c, &g, NULL, NULL) != DFL_OK) { fprintf(stderr, "bench_gdn: cuda init failed\n"); return 1; }
  const int ts[5] = {q, k, v, gg, bt};
  const char *fs[5] = {"q.bf16", "k.bf16", "v.bf16", "g.f32", "beta.f32"};
  for (int i = 0; i < 5; i++) {
    int64_t n = dfl_tensor_numel(&g.t[ts[i]]);
    float *x = load(dir, fs[i], n, i < 3);
    if (dfl_cuda_set_f(&c, ts[i], x, n) != DFL_OK) return 1;
    free(x);
  }
  double ms = 0;
  if (dfl_bench_median_ms(&c, run_all, 0, reps, &ms)) { fprintf(stderr, "bench_gdn: run failed\n"); return 1; }
  int64_t no = dfl_tensor_numel(&g.t[o]);
  float *got = malloc((size_t)no * 4), *ref = load(dir, "o_fla.bf16", no, 1);
  if (!got || dfl_cuda_get_f(&c, o, got, no) != DFL_OK) return 1;
  double mx = 0, err = 0;
  int64_t nan = 0;
  for (int64_t i = 0; i < no; i++) {
    if (!isfinite(got[i])) { nan++; continue; }
    if (fabs(ref[i]) > mx) mx = fabs(ref[i]);
    if (fabs(got[i] - ref[i]) > err) err = fabs(got[i] - ref[i]);
  }
  const double fl = 10.0 * 64 * D + 6.0 * D * D + 2730; /* per token and value head */
  printf("dflc gated_delta B %d T %d Hk %d Hv %d d %d: %.3f ms, %.1f TFLOP/s; vs fla: max|o_fla| %.3g, max err %.3g, "
         "rel %.3g, non-finite %lld\n", B, Tn, Hk, Hv, D, ms, fl * (double)R * Hv / (ms * 1e-3) / 1e12, mx, err,
         err / (mx > 0 ? mx : 1), (long long)nan);
  free(got), free(ref);
  dfl_cuda_free(&c);
  dfl_graph_free(&g);
  return 0;
}
