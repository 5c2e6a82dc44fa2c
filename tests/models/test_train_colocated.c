/*
** test_train_colocated: the whole training graph of one device with the target colocated:
** nano target (real weights) -> 2 tapped layers -> fresh 1-layer DFlash drafter -> loss,
** autodiff, AdamW. Checks that
**   - the eval graph fed the same features as an INPUT gives the same loss as the colocated
**     graph (the two ways of building a drafter device agree);
**   - a few optimizer steps on one batch of real text lower the loss (the gradients point
**     downhill and the optimizer applies them), and the metric sums are consistent.
** Anchors are drawn at random (seed from the time, printed).
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "models/models.h"
#include "runtime/io/weights.h"
#include "runtime/cpu/cpu.h"
#include "runtime/io/data.h"
#include "runtime/io/safetensors.h"

static int failures;
#include "tests/common/check.h"

#define BATCH 2
#define S 32
#define N 4
#define B 4

static void fill_inputs(dfl_cpu *c, const dfl_train_graph *tg, const int32_t *ids, const int32_t *mask,
                        const int32_t *anc, const int32_t *keep) {
  memcpy(dfl_cpu_i32(c, tg->ids), ids, sizeof(int32_t) * BATCH * S);
  memcpy(dfl_cpu_i32(c, tg->loss_mask), mask, sizeof(int32_t) * BATCH * S);
  memcpy(dfl_cpu_i32(c, tg->anchors), anc, sizeof(int32_t) * BATCH * N);
  memcpy(dfl_cpu_i32(c, tg->keep), keep, sizeof(int32_t) * BATCH * N);
}

static double take(dfl_cpu *c, int t) {
  float v;
  dfl_cpu_get_f(c, t, &v, 1);
  float z = 0;
  dfl_cpu_set_f(c, t, &z, 1);
  return v;
}

int main(void) {
  uint64_t seed = (uint64_t)time(NULL);
  printf("test_train_colocated: seed %llu\n", (unsigned long long)seed);
  char err[512];
  dfl_spec s;
  memset(&s, 0, sizeof s);
  if (dfl_hf_arch_load("examples/models/nano/config.json", &s.target, err, sizeof err) != DFL_OK) {
    printf("%s\n", err);
    return 1;
  }
  s.drafter = s.target;
  s.drafter.layers = 1;
  s.drafter.intermediate = 256;
  s.n_taps = 2;
  s.taps[0] = 1;
  s.taps[1] = 2;
  s.block_size = B;
  s.mask_token = 8190;
  s.seq_len = S;
  s.anchors = N;
  s.batch = BATCH;
  s.gamma = 7;
  s.precision = DFL_PREC_FP32;
  s.lr = 3e-3; s.beta1 = 0.9; s.beta2 = 0.999; s.eps = 1e-8; s.clip = 1.0;
  s.schedule = DFL_SCHED_CONSTANT;
  s.steps = 100;
  s.accum = 1;
  s.vocab_chunk = 3000;   /* does not divide V: the last chunk is ragged */

  /* Two sequences of real text: the halves of the golden input; supervise from position 4 on. */
  int32_t ids[BATCH * S], mask[BATCH * S], anc[BATCH * N], keep[BATCH * N];
  dfl_st gold;
  if (dfl_st_open(&gold, "examples/models/nano/golden_forward.safetensors", err, sizeof err) != DFL_OK) {
    printf("%s\n", err);
    return 1;
  }
  dfl_st_read_i32(&gold, dfl_st_find(&gold, "input_ids"), ids);
  dfl_st_close(&gold);
  for (int i = 0; i < BATCH * S; i++) mask[i] = i % S >= 4;
  dfl_rng rng;
  dfl_rng_seed(&rng, seed);
  for (int b = 0; b < BATCH; b++) {
    int pos[S], np = 0;
    for (int p = 0; p < S - 1; p++)
      if (mask[b * S + p] && mask[b * S + p + 1]) pos[np++] = p;
    for (int i = 0; i < N; i++) {       /* partial Fisher-Yates, then sort */
      int j = i + (int)(dfl_rng_next(&rng) % (uint64_t)(np - i));
      int t = pos[i]; pos[i] = pos[j]; pos[j] = t;
    }
    for (int i = 0; i < N; i++)
      for (int j = i + 1; j < N; j++)
        if (pos[j] < pos[i]) { int t = pos[i]; pos[i] = pos[j]; pos[j] = t; }
    for (int i = 0; i < N; i++) { anc[b * N + i] = pos[i]; keep[b * N + i] = 1; }
  }
  keep[BATCH * N - 1] = 0;            /* one invalid block */
  anc[BATCH * N - 1] = 0;

  dfl_train_graph tg, eg;
  CHECK(dfl_model_train_graph(&tg, &s, 1) == DFL_OK, "train graph");
  CHECK(dfl_model_eval_graph(&eg, &s, 0) == DFL_OK, "eval graph");
  dfl_cpu c, e;
  dfl_cpu_init(&c, &tg.g, NULL, 0);
  dfl_cpu_init(&e, &eg.g, NULL, 0);
  CHECK(dfl_weights_load_path(&c, "examples/models/nano", DFL_KIND_BIT(DFL_T_FROZEN), "", err, sizeof err) == DFL_OK, "%s", err);
  dfl_weights_init(&c, DFL_KIND_BIT(DFL_T_PARAM), seed, 0.02);
  dfl_cpu_init_masters(&c);
  fill_inputs(&c, &tg, ids, mask, anc, keep);

  double loss[8], den0 = 0;
  for (int step = 0; step < 8; step++) {
    CHECK(dfl_cpu_run(&c, DFL_PH_STEP) == DFL_OK, "step");
    double num = take(&c, tg.loss_num_acc), den = take(&c, tg.loss_den_acc);
    loss[step] = num / den;
    float m[DFL_METRIC_COUNT + 2 * B];
    dfl_cpu_get_f(&c, tg.metrics_acc, m, DFL_METRIC_COUNT + 2 * B);
    memset(m, 0, sizeof m);
    dfl_cpu_set_f(&c, tg.metrics_acc, m, DFL_METRIC_COUNT + 2 * B);
    if (step == 0) {
      den0 = den;
      /* Expected denominator: sum over valid blocks of the decay weights of supervised labels. */
      double want = 0;
      for (int b = 0; b < BATCH; b++)
        for (int n = 0; n < N; n++)
          for (int j = 1; j < B && keep[b * N + n]; j++) {
            int p = anc[b * N + n] + j;
            if (p < S && mask[b * S + p]) want += exp(-(j - 1) / 7.0);
          }
      CHECK(fabs(den - want) < 1e-4 * want, "den %g, want %g", den, want);
      /* The same drafter fed the colocated features as an INPUT. */
      for (int t = 0; t < eg.g.nt; t++) {
        const dfl_tensor *et = &eg.g.t[t];
        if (et->kind != DFL_T_PARAM && et->kind != DFL_T_FROZEN) continue;
        const char *name = et->name;   /* the drafter device names its frozen tensors like the target */
        int ct = dfl_tensor_find(&tg.g, name);
        CHECK(ct >= 0, "%s not in the colocated graph", name);
        if (ct >= 0) memcpy(e.buf[t], c.buf[ct], sizeof(float) * (size_t)dfl_tensor_numel(et));
      }
      fill_inputs(&e, &eg, ids, mask, anc, keep);
      memcpy(e.buf[eg.features], c.buf[tg.target.features], sizeof(float) * BATCH * S * 2 * 128);
      CHECK(dfl_cpu_run(&e, DFL_PH_ALL) == DFL_OK, "eval run");
      double enum_ = take(&e, eg.loss_num_acc), eden = take(&e, eg.loss_den_acc);
      printf("  colocated loss %.6f, eval graph with input features %.6f\n", loss[0], enum_ / eden);
      CHECK(fabs(enum_ / eden - loss[0]) < 1e-5 * loss[0] && eden == den, "colocated and input-fed drafters differ");
      /* Not ln V exactly: the real head was trained for the target's final norm, not ours. */
      CHECK(loss[0] > 0.5 * log(8192.0) && loss[0] < 2 * log(8192.0), "fresh drafter loss %g, ln V = %g", loss[0], log(8192.0));
    }
    CHECK(dfl_cpu_run(&c, 1u << DFL_PH_OPTIMIZER) == DFL_OK, "optimizer");
    float st[DFL_OPT_COUNT];
    dfl_cpu_get_f(&c, tg.opt_state, st, DFL_OPT_COUNT);
    printf("  step %d loss %.4f grad_norm %.4f lr %g\n", step, loss[step], st[DFL_OPT_GNORM], st[DFL_OPT_LR]);
    CHECK(isfinite(loss[step]) && st[DFL_OPT_STEP] == step + 1, "step %d: loss %g, optimizer step %g", step, loss[step], st[DFL_OPT_STEP]);
  }
  (void)den0;
  CHECK(loss[7] < loss[0] - 0.5, "8 steps on one batch should lower the loss: %g -> %g", loss[0], loss[7]);

  /* bf16 precision: activations and working params are declared bf16, masters stay f32; the CPU
  ** backend computes in fp32, so the first loss matches the fp32 graph's to bf16 accuracy. */
  s.precision = DFL_PREC_BF16;
  dfl_train_graph bg;
  CHECK(dfl_model_train_graph(&bg, &s, 1) == DFL_OK, "bf16 train graph");
  const dfl_tensor *fc = &bg.g.t[bg.drafter.params[0]];
  CHECK(fc->dtype == DFL_BF16 && bg.g.t[fc->master].dtype == DFL_F32 && bg.g.t[bg.drafter.y].dtype == DFL_BF16,
        "bf16 dtypes: param %s master %s act %s", dfl_dtype_name(fc->dtype), dfl_dtype_name(bg.g.t[fc->master].dtype),
        dfl_dtype_name(bg.g.t[bg.drafter.y].dtype));
  dfl_cpu bc;
  dfl_cpu_init(&bc, &bg.g, NULL, 0);
  CHECK(dfl_weights_load_path(&bc, "examples/models/nano", DFL_KIND_BIT(DFL_T_FROZEN), "", err, sizeof err) == DFL_OK, "%s", err);
  dfl_weights_init(&bc, DFL_KIND_BIT(DFL_T_PARAM), seed, 0.02);
  dfl_cpu_init_masters(&bc);
  fill_inputs(&bc, &bg, ids, mask, anc, keep);
  CHECK(dfl_cpu_run(&bc, DFL_PH_STEP) == DFL_OK, "bf16 step");
  double bl = take(&bc, bg.loss_num_acc) / take(&bc, bg.loss_den_acc);
  printf("  bf16 graph first loss %.6f (fp32 %.6f)\n", bl, loss[0]);
  CHECK(fabs(bl - loss[0]) < 2e-2 * loss[0], "bf16 loss %g vs fp32 %g", bl, loss[0]);
  dfl_cpu_free(&bc);
  dfl_graph_free(&bg.g);

  dfl_cpu_free(&c);
  dfl_cpu_free(&e);
  dfl_graph_free(&tg.g);
  dfl_graph_free(&eg.g);
  printf("%s\n", failures ? "FAILED" : "passed");
  return failures ? 1 : 0;
}
