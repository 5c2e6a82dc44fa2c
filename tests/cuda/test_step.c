/*
** test_step (GPU): a whole nano training step on the CUDA backend against the CPU oracle.
** Colocated nano target (real weights) -> 2 taps -> fresh 1-layer DFlash drafter -> fused CE,
** metrics, autodiff, AdamW; f32 and bf16 graphs. The GPU arena comes from the memory plan
** (dfl_plan_build with the CUDA element sizes); the step and the optimizer are each captured once
** into a CUDA graph and replayed for 3 steps. Compared after every step: the loss sums, the metric
** sums, every gradient accumulator (cosine similarity and max error relative to the largest
** entry), and after every optimizer step every trained parameter.
** Tolerances: f32 graphs: loss 1e-4 relative, gradients cos >= 0.9999 and rel <= 5e-3;
** bf16 graphs (GPU activations rounded to bf16, the CPU's are not): loss 2e-2, gradients
** cos >= 0.7, params cos >= 0.997: measured on the H200 over 80 seeds (DFL_STEP_SEEDS), the worst
** gradient cosine per seed has median 0.996, 5% quantile 0.92, minimum 0.805 (k_norm, q_norm,
** k_proj: small, cancellation-heavy sums, also with the reference attention kernels), the worst
** param cosine minimum 0.9984 (docs/journal/2026-11-performance.md). Metric sums: f32 exact up to 1 flip per 50 supervised positions (argmax near ties).
** Then the bf16 step with an FP8 target (quantize = fp8): its quantized weights and scales read back
** from the GPU equal the CPU's bit for bit; the step's tolerances are in run_mode.
** Seed from the time (printed). Exit 77 without a GPU.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "compiler/plan.h"
#include "models/models.h"
#include "runtime/io/weights.h"
#include "runtime/cpu/cpu.h"
#include "runtime/cuda/cuda.h"
#include "tests/cuda/as_cc.h"
#include "runtime/io/data.h"

static int fails;
static double worst_cos, worst_pcos; /* lowest gradient / parameter cosine of the last run_mode */
#define CHECK_FAILED fails++
#include "tests/common/check.h"
#define BATCH 2
#define S 32
#define N 4
#define B 4

static double cpu_val(dfl_cpu *c, int t) { float v; dfl_cpu_get_f(c, t, &v, 1); return v; }
static double gpu_val(dfl_cuda *g, int t) { float v; dfl_cuda_get_f(g, t, &v, 1); return v; }

/* cos similarity and max |a-b| / max |b| of tensor t on both backends */
static void cmp(dfl_cpu *c, dfl_cuda *g, int t, double *cosv, double *rel) {
  int64_t n = dfl_tensor_numel(&c->g->t[t]);
  float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4);
  dfl_cuda_get_f(g, t, a, n);
  dfl_cpu_get_f(c, t, b, n);
  double ab = 0, aa = 0, bb = 0, mx = 0, err = 0;
  for (int64_t i = 0; i < n; i++) {
    ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
    if (fabs(b[i]) > mx) mx = fabs(b[i]);
    if (fabs(a[i] - b[i]) > err || isnan(a[i])) err = isnan(a[i]) ? INFINITY : fabs(a[i] - b[i]);
  }
  *cosv = aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : (aa == bb ? 1 : 0);
  *rel = err / (mx > 0 ? mx : 1e-30);
  free(a), free(b);
}

static void run_mode(dfl_precision prec, uint64_t seed, int fp8) {
  int bf = prec == DFL_PREC_BF16;
  const char *mode = fp8 ? "bf16+fp8" : bf ? "bf16" : "f32";
  char err[512];
  dfl_spec s;
  memset(&s, 0, sizeof s);
  if (dfl_hf_arch_load("examples/models/nano/config.json", &s.target, err, sizeof err) != DFL_OK) {
    printf("FAIL %s\n", err); fails++; return;
  }
  s.drafter = s.target;
  s.drafter.layers = 1;
  s.drafter.intermediate = 256;
  s.n_taps = 2; s.taps[0] = 1; s.taps[1] = 2;
  s.block_size = B; s.mask_token = 8190; s.seq_len = S; s.anchors = N; s.batch = BATCH; s.gamma = 7;
  s.precision = prec;
  s.target_fp8 = fp8;
  s.lr = 3e-3; s.beta1 = 0.9; s.beta2 = 0.999; s.eps = 1e-8; s.clip = 1.0;
  s.schedule = DFL_SCHED_COSINE; s.warmup_steps = 1; s.steps = 10; s.accum = 1;
  s.vocab_chunk = 3000; /* ragged last chunk */
  s.topk = 4; s.metric_accuracy = s.metric_tau = 1;

  dfl_rng rng;
  dfl_rng_seed(&rng, seed);
  int32_t ids[BATCH * S], mask[BATCH * S], anc[BATCH * N], keep[BATCH * N];
  for (int i = 0; i < BATCH * S; i++) ids[i] = (int32_t)(dfl_rng_next(&rng) % 8000), mask[i] = i % S >= 3;
  for (int i = 0; i < BATCH * N; i++) anc[i] = 3 + (int32_t)(dfl_rng_next(&rng) % (S - 4)), keep[i] = 1;
  keep[BATCH * N - 1] = 0, anc[BATCH * N - 1] = 0;

  dfl_train_graph tg;
  if (dfl_model_train_graph(&tg, &s, 1) != DFL_OK) { printf("FAIL %s: train graph\n", mode); fails++; return; }
  dfl_plan plan;
  /* the plan holds the backend's workspaces (cuBLASLt, per-op scratch): the arena is exactly the plan */
  dfl_plan_ws *ws = malloc(sizeof *ws * ((size_t)tg.g.nops + 1));
  dfl_plan_opts po = {.ws = ws, .n_ws = dfl_plan_cuda_workspaces(&tg.g, ws)};
  CHECK(dfl_plan_build_ex(&plan, &tg.g, dfl_cuda_elem_size, NULL, &po) == DFL_OK, "plan");
  free(ws);
  dfl_cpu c;
  dfl_cuda g;
  dfl_cpu_init(&c, &tg.g, NULL, 0);
  CHECK(dfl_weights_load_path(&c, "examples/models/nano", DFL_KIND_BIT(DFL_T_FROZEN), "", err, sizeof err) == DFL_OK, "%s", err);
  dfl_weights_init(&c, DFL_KIND_BIT(DFL_T_PARAM), seed, 0.02);
  if (bf) /* the working bf16 params hold bf16 values: give the CPU the same ones */
    for (int t = 0; t < tg.g.nt; t++) {
      const dfl_tensor *T = &tg.g.t[t];
      if (T->dtype != DFL_BF16 || T->kind == DFL_T_ACT) continue;
      float *f = dfl_cpu_f32(&c, t);
      for (int64_t i = 0; i < dfl_tensor_numel(T); i++) f[i] = dfl_bf16_round(f[i]);
    }
  dfl_cpu_init_masters(&c);
  memcpy(dfl_cpu_i32(&c, tg.ids), ids, sizeof ids);
  memcpy(dfl_cpu_i32(&c, tg.loss_mask), mask, sizeof mask);
  memcpy(dfl_cpu_i32(&c, tg.anchors), anc, sizeof anc);
  memcpy(dfl_cpu_i32(&c, tg.keep), keep, sizeof keep);
  if (dfl_cuda_init(&g, &tg.g, &plan, NULL) != DFL_OK) { printf("FAIL %s: cuda init\n", mode); fails++; goto out; }
  printf("%s: %d ops, %d tensors, arena %.2f MiB (plan %.2f MiB with %d workspaces)\n", mode, tg.g.nops, tg.g.nt,
         g.arena_bytes / 1048576.0, plan.arena_bytes / 1048576.0, plan.n_ws);
  CHECK(g.arena_bytes == (size_t)plan.arena_bytes, "%s: arena %zu bytes != plan %lld", mode, g.arena_bytes,
        (long long)plan.arena_bytes);
  for (int t = 0; t < tg.g.nt; t++) { /* every persistent tensor and input, CPU -> GPU */
    const dfl_tensor *T = &tg.g.t[t];
    if (!dfl_tensor_is_persistent(T) && T->kind != DFL_T_INPUT) continue;
    int64_t n = dfl_tensor_numel(T);
    if (T->dtype == DFL_I32) { dfl_cuda_set_i32(&g, t, dfl_cpu_i32(&c, t), n); continue; }
    float *f = malloc((size_t)n * 4);
    dfl_cpu_get_f(&c, t, f, n);
    dfl_cuda_set_f(&g, t, f, n);
    free(f);
  }
  if (fp8) { /* the quantized weights and their scales, read back: exactly the CPU's (runtime/cuda.c set_f) */
    int64_t nw = 0, bad = 0;
    for (int t = 0; t < tg.g.nt; t++) {
      const dfl_tensor *T = &tg.g.t[t];
      if (T->kind != DFL_T_FROZEN || (T->dtype != DFL_F8E4M3 && dfl_weights_fp8_weight_of(&tg.g, t) < 0)) continue;
      int64_t n = dfl_tensor_numel(T);
      float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4);
      dfl_cuda_get_f(&g, t, a, n);
      dfl_cpu_get_f(&c, t, b, n);
      for (int64_t i = 0; i < n; i++) bad += memcmp(&a[i], &b[i], 4) != 0;
      nw++;
      free(a), free(b);
    }
    printf("  %s: %lld quantized weights and scales on the GPU, %lld values differ from the CPU's\n", mode,
           (long long)nw, (long long)bad);
    /* the layers up to the deepest tap run: 7 weights and 7 scale vectors each */
    CHECK(nw == 2 * 7 * (s.taps[1] + 1) && bad == 0, "%s quantized weights", mode);
  }
  for (int step = 0; step < 3; step++) {
    /* FP8 target: a GPU activation one bf16 rounding away from the CPU's may land on the other side
    ** of an E4M3 rounding boundary (a whole step), so the two runs part faster than in bf16. Step 0
    ** (same parameters; the strong check): loss within 1e-2, gradients cos >= 0.98; then the loss
    ** within 8e-2 and the parameters cos >= 0.99. Measured on the H200 over 110 seeds in two sweeps
    ** (DFL_STEP_SEEDS=60 and 50, DFL_STEP_FP8=1): step 0 loss <= 0.26%, gradient cos >= 0.9927;
    ** steps 1-2 loss <= 1.2% / 4.6%, gradient cos down to 0.79 / 0.35 (not compared), parameter
    ** cos >= 0.9948. */
    double ltol = fp8 ? (step ? 8e-2 : 1e-2) : bf ? 2e-2 : 1e-4;
    double ctol = fp8 ? (step ? -2 : 0.98) : bf ? 0.7 : 0.9999, rtol = bf ? 1e9 : 5e-3;
    CHECK(dfl_cpu_run(&c, DFL_PH_STEP) == DFL_OK, "cpu step");
    CHECK(dfl_cuda_run(&g, DFL_PH_STEP) == DFL_OK, "gpu step");
    double cn = cpu_val(&c, tg.loss_num_acc), cd = cpu_val(&c, tg.loss_den_acc);
    double gn = gpu_val(&g, tg.loss_num_acc), gd = gpu_val(&g, tg.loss_den_acc);
    printf("  %s step %d: loss cpu %.6f gpu %.6f (den %.4f / %.4f)\n", mode, step, cn / cd, gn / gd, cd, gd);
    CHECK(fabs(gn / gd - cn / cd) <= ltol * cn / cd && fabs(gd - cd) <= 1e-5 * cd, "%s step %d loss", mode, step);
    float mc[DFL_METRIC_COUNT + 2 * B], mg[DFL_METRIC_COUNT + 2 * B];
    dfl_cpu_get_f(&c, tg.metrics_acc, mc, DFL_METRIC_COUNT + 2 * B);
    dfl_cuda_get_f(&g, tg.metrics_acc, mg, DFL_METRIC_COUNT + 2 * B);
    double md = 0;
    for (int i = 0; i < DFL_METRIC_COUNT + 2 * B; i++) md += fabs(mc[i] - mg[i]);
    printf("  %s metrics: acc %g/%g (gpu %g/%g) tau %g/%g (gpu %g/%g), sum |diff| %g\n", mode, mc[0], mc[1], mg[0],
           mg[1], mc[2], mc[3], mg[2], mg[3], md);
    CHECK(mc[1] == mg[1] && mc[3] == mg[3] && (bf || md * 50 <= mc[1] + 1), "%s step %d metrics", mode, step);
    double wc = 1, wr = 0;
    for (int t = 0; t < tg.g.nt; t++) {
      if (tg.g.t[t].kind != DFL_T_GRAD) continue;
      double cs, rel;
      cmp(&c, &g, t, &cs, &rel);
      if (cs < wc) wc = cs;
      if (rel > wr) wr = rel;
      if (cs < ctol || rel > rtol) printf("  %s grad %s: cos %.6f rel %.3g\n", mode, tg.g.t[t].name, cs, rel);
      CHECK(cs >= ctol && rel <= rtol, "%s step %d gradient %s", mode, step, tg.g.t[t].name);
    }
    printf("  %s gradients: worst cos %.6f worst rel err %.3g\n", mode, wc, wr);
    if (wc < worst_cos) worst_cos = wc;
    CHECK(dfl_cpu_run(&c, 1u << DFL_PH_OPTIMIZER) == DFL_OK, "cpu opt");
    CHECK(dfl_cuda_run(&g, 1u << DFL_PH_OPTIMIZER) == DFL_OK, "gpu opt");
    double pc = 1, pr = 0;
    for (int t = 0; t < tg.g.nt; t++) {
      if (tg.g.t[t].kind != DFL_T_PARAM) continue;
      double cs, rel;
      cmp(&c, &g, t, &cs, &rel);
      if (cs < pc) pc = cs;
      if (rel > pr) pr = rel;
    }
    printf("  %s params after the optimizer: worst cos %.7f worst rel err %.3g\n", mode, pc, pr);
    if (pc < worst_pcos) worst_pcos = pc;
    CHECK(pc >= (fp8 ? 0.99 : bf ? 0.997 : 0.999999), "%s step %d params", mode, step);
    float zero = 0, zm[DFL_METRIC_COUNT + 2 * B] = {0};
    dfl_cpu_set_f(&c, tg.loss_num_acc, &zero, 1), dfl_cuda_set_f(&g, tg.loss_num_acc, &zero, 1);
    dfl_cpu_set_f(&c, tg.loss_den_acc, &zero, 1), dfl_cuda_set_f(&g, tg.loss_den_acc, &zero, 1);
    dfl_cpu_set_f(&c, tg.metrics_acc, zm, DFL_METRIC_COUNT + 2 * B), dfl_cuda_set_f(&g, tg.metrics_acc, zm, DFL_METRIC_COUNT + 2 * B);
  }
  /* replay speed of the captured step (no host work in between) */
  {
    struct timespec t0, t1;
    dfl_cuda_sync(&g);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 50; i++) dfl_cuda_run(&g, DFL_PH_STEP);
    dfl_cuda_sync(&g);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("  %s: captured nano step replay %.1f us/step\n", mode, ((t1.tv_sec - t0.tv_sec) * 1e6 + (t1.tv_nsec - t0.tv_nsec) / 1e3) / 50);
  }
  /* the captured graphs' launches (`dflc bench`): the step has some; a mask without ops (a drafter
  ** alone has no target phase) captures an empty graph, counted as none, not an error */
  {
    int other = -1, k = dfl_cuda_graph_nodes(&g, DFL_PH_STEP, &other);
    CHECK(k > 0 && other >= 0, "%s: the step graph's kernel nodes: %d", mode, k);
    CHECK(dfl_cuda_run(&g, 0) == DFL_OK && dfl_cuda_sync(&g) == DFL_OK, "%s: an empty mask's capture", mode);
    CHECK(dfl_cuda_graph_nodes(&g, 0, &other) == 0 && other == 0, "%s: the empty graph's nodes", mode);
  }
  dfl_cuda_free(&g);
out:
  dfl_cpu_free(&c);
  dfl_plan_free(&plan);
  dfl_graph_free(&tg.g);
}

int main(int argc, char **argv) {
  int as_cc = dfl_test_as_cc(&argc, &argv); /* the step with the kernels a GPU of compute capability CC gets */
  if (as_cc < 0 || argc > 1) {
    fprintf(stderr, "usage: cuda_step [--as-cc CC]\n");
    return 2;
  }
  if (!dfl_cuda_available()) { printf("SKIP: no CUDA device\n"); return 77; }
  const char *e = getenv("DFL_SEED");
  uint64_t seed = e ? strtoull(e, NULL, 10) : (uint64_t)time(NULL);
  printf("test_step: seed %llu (DFL_SEED reproduces)\n", (unsigned long long)seed);
  /* DFL_STEP_SEEDS=N: the bf16 step for N consecutive seeds, then the distribution of the worst
  ** gradient cosine (how the bf16 tolerance was measured: docs/journal/2026-11-performance.md) */
  const char *ns = getenv("DFL_STEP_SEEDS");
  if (ns && atoi(ns) > 0) {
    int n = atoi(ns), fp8 = getenv("DFL_STEP_FP8") != NULL; /* DFL_STEP_FP8: the FP8-target step instead */
    double *w = malloc(sizeof *w * (size_t)n), *pw = malloc(sizeof *pw * (size_t)n);
    for (int k = 0; k < n; k++) {
      worst_cos = worst_pcos = 1;
      run_mode(DFL_PREC_BF16, seed + (uint64_t)k, fp8);
      w[k] = worst_cos, pw[k] = worst_pcos;
      printf("sweep: seed %llu worst gradient cos %.6f worst param cos %.7f\n", (unsigned long long)(seed + (uint64_t)k),
             w[k], worst_pcos);
    }
    for (int a = 1; a < n; a++) for (int b = a; b > 0 && w[b] < w[b - 1]; b--) { double t = w[b]; w[b] = w[b - 1]; w[b - 1] = t; }
    for (int a = 1; a < n; a++) for (int b = a; b > 0 && pw[b] < pw[b - 1]; b--) { double t = pw[b]; pw[b] = pw[b - 1]; pw[b - 1] = t; }
    printf("sweep: %d seeds from %llu: worst cos min %.6f, 1%% %.6f, 5%% %.6f, median %.6f; worst param cos min %.7f, "
           "median %.7f\n", n, (unsigned long long)seed, w[0], w[n / 100], w[n / 20], w[n / 2], pw[0], pw[n / 2]);
    free(w), free(pw);
    return fails ? 1 : 0;
  }
  worst_cos = 1;
  run_mode(DFL_PREC_FP32, seed, 0);
  worst_cos = 1;
  run_mode(DFL_PREC_BF16, seed, 0);
  worst_cos = 1;
  if (!as_cc || as_cc >= 89) run_mode(DFL_PREC_BF16, seed, 1); /* target { quantize = fp8 }: the bf16 tolerances */
  if (worst_cos < 1) printf("bf16+fp8: worst gradient cos %.6f\n", worst_cos);
  printf("%s\n", fails ? "FAILED" : "passed");
  return fails ? 1 : 0;
}
