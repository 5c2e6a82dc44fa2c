/*
** bench_attention (GPU, not in the default ctest run): the attention ops at the Qwen3-8B drafter
** shapes (and DFLASH at the 27B benchmark's S=2048, last), tensor-core kernels against the CUDA-core
** reference kernels (dfl_cuda_opts.att_ref), one layer:
**   DFLASH forward + backward: S=4096, N=512 anchors (uniform over positions 0..S-2 without
**     replacement, sorted, like runtime/anchors.c with every position supervised), B=16,
**     nh=32, nkv=8, hd=128, batch 1, bf16; full layer, and a sliding layer (window 2048);
**   CAUSAL forward (the frozen target): S=4096, nh=32, nkv=8, hd=128, bf16; and the Qwen3.6-27B
**     target's gated attention, S=4096, nh=24, nkv=4, hd=256 (ref: the CUDA-core kernel it replaced).
** FLOPs count only unmasked work: 4*hd per visible (query head, key) forward, 2.5x that backward.
** Each mode prints median ms over the repetitions (host clock around launch + sync; the kernels
** run for milliseconds, so launch overhead is noise) and checks the tensor-core outputs against
** the reference kernels' (max |diff| / max |ref| per tensor, bf16 tolerance 3e-2). The kernels of the
** lost comparisons (the mma.sync ones on Hopper, the separate own-key tile, the shared-memory Q of the
** query-major backward; docs/journal/2026-11-performance.md) are deleted, with their switches.
** Usage: bench_attention [--as-cc CC] [reps] [only]   (DFL_SEED=... fixes the inputs; only: run the
** configurations whose name contains it, e.g. causal; --as-cc: the tensor-core kernels a GPU of compute
** capability CC gets, picked on this one, docs/gpus.md)
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "compiler/graph.h"
#include "compiler/status.h"
#include "runtime/cuda/cuda.h"
#include "tests/cuda/as_cc.h"
#include "tests/cuda/bench_util.h"

static unsigned long long rng_s;
static double urand(void) { /* splitmix64 */
  unsigned long long z = (rng_s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) / 9007199254740992.0;
}
static int cmp_i(const void *a, const void *b) { return *(const int32_t *)a - *(const int32_t *)b; }

enum { N_ = 512, B_ = 16, S_MAX = 4096 };
static int NH = 32, NKV = 8, HD = 128; /* heads of the configuration being run */
static int S_ = 4096; /* context length of the configuration being run */

typedef struct {
  dfl_graph g;
  int in[10], nin, out[7], nout, fwd_op, bwd_op; /* tensors of the attention ops */
} bgraph;

static void build(bgraph *b, int dflash, int window) {
  dfl_graph *g = &b->g;
  dfl_graph_init(g);
  dfl_attrs a = {0};
  a.mask = dflash ? DFL_MASK_DFLASH : DFL_MASK_CAUSAL; a.batch = 1; a.S = S_; a.N = N_; a.B = B_;
  a.heads = NH; a.kv_heads = NKV; a.head_dim = HD; a.window = window; a.scale = 1.0 / sqrt(HD);
  int qr = dflash ? N_ * B_ : S_;
  int q = dfl_tensor_2d(g, "q", DFL_BF16, DFL_T_INPUT, qr, NH * HD);
  int k = dfl_tensor_2d(g, "k", DFL_BF16, DFL_T_INPUT, S_, NKV * HD), v = dfl_tensor_2d(g, "v", DFL_BF16, DFL_T_INPUT, S_, NKV * HD);
  int o = dfl_tensor_2d(g, "o", DFL_BF16, DFL_T_ACT, qr, NH * HD), lse = dfl_tensor_1d(g, "lse", DFL_F32, DFL_T_ACT, (int64_t)qr * NH);
  if (!dflash) {
    int in[] = {q, k, v}, out[] = {o, lse};
    b->fwd_op = dfl_op_add(g, DFL_OP_ATTENTION, in, 3, out, 2, &a);
    b->bwd_op = -1;
    memcpy(b->in, in, sizeof in); b->nin = 3;
    memcpy(b->out, out, sizeof out); b->nout = 2;
    return;
  }
  int kn = dfl_tensor_2d(g, "kn", DFL_BF16, DFL_T_INPUT, qr, NKV * HD), vn = dfl_tensor_2d(g, "vn", DFL_BF16, DFL_T_INPUT, qr, NKV * HD);
  int anc = dfl_tensor_1d(g, "anchors", DFL_I32, DFL_T_INPUT, N_), kp = dfl_tensor_1d(g, "keep", DFL_I32, DFL_T_INPUT, N_);
  int dout = dfl_tensor_2d(g, "do", DFL_BF16, DFL_T_INPUT, qr, NH * HD);
  int dq = dfl_tensor_2d(g, "dq", DFL_BF16, DFL_T_ACT, qr, NH * HD);
  int dk = dfl_tensor_2d(g, "dk", DFL_BF16, DFL_T_ACT, S_, NKV * HD), dv = dfl_tensor_2d(g, "dv", DFL_BF16, DFL_T_ACT, S_, NKV * HD);
  int dkn = dfl_tensor_2d(g, "dkn", DFL_BF16, DFL_T_ACT, qr, NKV * HD), dvn = dfl_tensor_2d(g, "dvn", DFL_BF16, DFL_T_ACT, qr, NKV * HD);
  int fin[] = {q, k, v, kn, vn, anc, kp}, fout[] = {o, lse};
  b->fwd_op = dfl_op_add(g, DFL_OP_ATTENTION, fin, 7, fout, 2, &a);
  int bin[] = {q, k, v, kn, vn, anc, kp, o, lse, dout}, bout[] = {dq, dk, dv, dkn, dvn};
  b->bwd_op = dfl_op_add(g, DFL_OP_ATTENTION_BWD, bin, 10, bout, 5, &a);
  int in[] = {q, k, v, kn, vn, anc, kp, dout}, out[] = {o, lse, dq, dk, dv, dkn, dvn};
  memcpy(b->in, in, sizeof in); b->nin = 8;
  memcpy(b->out, out, sizeof out); b->nout = 7;
}

/* Visible (query head, key) pairs: the unmasked work. */
static double visible(int dflash, int window, const int32_t *anc) {
  double n = 0;
  if (!dflash) {
    for (int s = 0; s < S_; s++) n += window > 0 && s + 1 > window ? window : s + 1;
    return n * NH;
  }
  for (int i = 0; i < N_; i++)
    for (int j = 0; j < B_; j++) {
      int lo = window > 0 ? anc[i] + j - (window - 1) : 0;
      if (lo < 0) lo = 0;
      n += (anc[i] - lo) + (window > 0 ? j + 1 : B_);
    }
  return n * NH;
}

/* One configuration: both kernel sets on the same inputs; returns the number of failures. */
static int bench(const char *name, int dflash, int window, int reps) {
  bgraph b;
  build(&b, dflash, window);
  int32_t anc[N_], kp[N_];
  { /* N distinct positions of [0, S-2], sorted */
    static int32_t cand[S_MAX];
    int nc = S_ - 1;
    for (int i = 0; i < nc; i++) cand[i] = i;
    for (int i = 0; i < N_; i++) {
      int j = i + (int)(urand() * (nc - i));
      int32_t x = cand[i]; cand[i] = cand[j]; cand[j] = x;
      anc[i] = cand[i]; kp[i] = 1;
    }
    qsort(anc, N_, sizeof anc[0], cmp_i);
  }
  /* inputs: drawn once, the same for both modes */
  float *vals[10] = {0};
  for (int k = 0; k < b.nin; k++) {
    const dfl_tensor *T = &b.g.t[b.in[k]];
    if (T->dtype == DFL_I32) continue;
    int64_t n = dfl_tensor_numel(T);
    vals[k] = malloc((size_t)n * 4);
    double sc = !strcmp(T->name, "q") ? 2.5 : 1.0;
    for (int64_t i = 0; i < n; i++) vals[k][i] = (float)((urand() * 2 - 1) * sc);
  }
  double fl = 4.0 * HD * visible(dflash, window, anc);
  /* modes: 0 reference kernels, 1 tensor cores */
  enum { MM = 2 };
  int nm = MM;
  double ms[MM][2] = {{0}};
  float *res[MM][7] = {{0}};
  int fails = 0;
  for (int mode = 0; mode < nm; mode++) {
    dfl_cuda_opts co = {0};
    co.att_ref = mode == 0;
    dfl_cuda c;
    if (dfl_cuda_init_opts(&c, &b.g, NULL, NULL, &co) != DFL_OK) { fprintf(stderr, "FAIL %s: cuda init\n", name); return 1; }
    for (int k = 0; k < b.nin; k++) {
      const dfl_tensor *T = &b.g.t[b.in[k]];
      int64_t n = dfl_tensor_numel(T);
      if (T->dtype == DFL_I32) dfl_cuda_set_i32(&c, b.in[k], !strcmp(T->name, "anchors") ? anc : kp, n);
      else dfl_cuda_set_f(&c, b.in[k], vals[k], n);
    }
    int r = mode == 0 ? (reps < 3 ? reps : 3) : reps; /* the reference kernels are slow */
    if (dfl_bench_median_ms(&c, dfl_cuda_run_op, b.fwd_op, r, &ms[mode][0]) ||
        (b.bwd_op >= 0 && dfl_bench_median_ms(&c, dfl_cuda_run_op, b.bwd_op, r, &ms[mode][1]))) {
      fprintf(stderr, "FAIL %s: run failed\n", name);
      dfl_cuda_free(&c);
      return 1;
    }
    for (int k = 0; k < b.nout; k++) {
      int64_t n = dfl_tensor_numel(&b.g.t[b.out[k]]);
      res[mode][k] = malloc((size_t)n * 4);
      dfl_cuda_get_f(&c, b.out[k], res[mode][k], n);
    }
    dfl_cuda_free(&c);
  }
  for (int mode = 1; mode < nm; mode++) {
    const char *lab = "tc";
    for (int k = 0; k < b.nout; k++) {
      const dfl_tensor *T = &b.g.t[b.out[k]];
      int64_t n = dfl_tensor_numel(T), bad = 0;
      double mx = 0, err = 0;
      for (int64_t i = 0; i < n; i++) {
        float x = res[mode][k][i], y = res[0][k][i];
        if (isinf(x) || isinf(y) || isnan(x) || isnan(y)) { bad += !(x == y); continue; }
        if (fabs(y) > mx) mx = fabs(y);
        if (fabs(x - y) > err) err = fabs(x - y);
      }
      double rel = err / (mx > 1e-20 ? mx : 1e-20);
      int ok = bad == 0 && rel <= 3e-2;
      printf("  %s %-4s %s vs ref: max|ref| %.3g rel err %.3g nan/inf mismatches %lld %s\n", name, T->name, lab, mx,
             rel, (long long)bad, ok ? "ok" : "FAIL");
      fails += !ok;
    }
  }
  for (int mode = 0; mode < nm; mode++)
    for (int k = 0; k < b.nout; k++) free(res[mode][k]);
  printf("%-28s fwd: ref %8.3f ms %6.1f TF/s | tc %7.3f ms %6.1f TF/s | %5.1fx\n", name, ms[0][0],
         fl / ms[0][0] * 1e-9, ms[1][0], fl / ms[1][0] * 1e-9, ms[0][0] / ms[1][0]);
  if (b.bwd_op >= 0) {
    printf("%-28s bwd: ref %8.3f ms %6.1f TF/s | tc %7.3f ms %6.1f TF/s | %5.1fx\n", name, ms[0][1],
           2.5 * fl / ms[0][1] * 1e-9, ms[1][1], 2.5 * fl / ms[1][1] * 1e-9, ms[0][1] / ms[1][1]);
  }
  for (int k = 0; k < 10; k++) free(vals[k]);
  dfl_graph_free(&b.g);
  return fails;
}

int main(int argc, char **argv) {
  if (!dfl_cuda_available()) { printf("SKIP: no CUDA device\n"); return 77; }
  if (dfl_test_as_cc(&argc, &argv) < 0) {
    fprintf(stderr, "usage: bench_attention [--as-cc CC] [reps] [only]\n");
    return 2;
  }
  int reps = argc > 1 ? atoi(argv[1]) : 10;
  if (reps < 1) reps = 1;
  const char *e = getenv("DFL_SEED");
  rng_s = e ? strtoull(e, NULL, 10) : (unsigned long long)time(NULL);
  printf("seed %llu (DFL_SEED=%llu reproduces), %d reps\n", rng_s, rng_s, reps);
  int fails = 0;
  const char *only = argc > 2 ? argv[2] : "";
  if (strstr("dflash full S4096 N512", only)) fails += bench("dflash full S4096 N512", 1, 0, reps);
  if (strstr("dflash sliding W2048", only)) fails += bench("dflash sliding W2048", 1, 2048, reps);
  if (strstr("causal S4096", only)) fails += bench("causal S4096", 0, 0, reps);
  NH = 24, NKV = 4, HD = 256; /* the Qwen3.6-27B target's attention layers */
  if (strstr("causal S4096 hd256 (27B target)", only)) fails += bench("causal S4096 hd256 (27B target)", 0, 0, reps);
  NH = 32, NKV = 8, HD = 128;
  S_ = 2048; /* the Qwen3.6-27B drafter's benchmark: 2048-token sequences, the same heads */
  if (strstr("dflash full S2048 N512 (27B)", only)) fails += bench("dflash full S2048 N512 (27B)", 1, 0, reps);
  S_ = 4096;
  printf("%s\n", fails ? "FAIL" : "OK");
  return fails ? 1 : 0;
}
