/*
** test_planned_cpu.c: the CPU backend running from the planned arena gives bit-identical results
** to unplanned execution (one allocation per tensor), for two training steps of a small decoder
** with autodiff and AdamW. Variants: in-place on/off, and the graph rewritten by recomputation to
** fit a budget (the recomputed values must be the same numbers). A deliberately broken plan (two
** live activations at one offset) must change the numbers, which shows the comparison can fail.
*/
#include <math.h>
#include <stdint.h>
#include <time.h>
#include "compiler/plan.h"
#include "compiler/status.h"
#include "runtime/cpu/cpu.h"
#include "tests/plan/synth.h"

static int failures;
#include "tests/common/check.h"

static uint64_t seed;
static uint64_t rs;
static double urand(void) { /* xorshift64*, uniform in [0, 1) */
  rs ^= rs >> 12; rs ^= rs << 25; rs ^= rs >> 27;
  return (double)((rs * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0;
}

#define L_ 3
#define B_ 2
#define S_ 16
#define H_ 32
#define V_ 96

static void synth_std(synth *s) { synth_build(s, L_, B_, S_, H_, 4, 2, 8, 64, V_); }

/* Same values for the same seed: weights (and their masters), inputs. Everything else zero. */
static void fill(dfl_cpu *c, const dfl_graph *g, const synth *s, int step) {
  rs = seed * 2654435761u + 1 + (uint64_t)step * 7919;
  float *buf = malloc(sizeof(float) * 1 << 20);
  for (int t = 0; t < g->nt; t++) {
    const dfl_tensor *x = &g->t[t];
    int64_t n = dfl_tensor_numel(x);
    if (step > 0 && x->kind != DFL_T_INPUT) continue;
    if (x->kind == DFL_T_PARAM || x->kind == DFL_T_FROZEN || (x->kind == DFL_T_INPUT && x->dtype == DFL_F32)) {
      int norm = x->ndim == 1 && x->kind == DFL_T_PARAM;
      for (int64_t i = 0; i < n; i++) buf[i] = norm ? (float)(1.0 + 0.2 * (urand() - 0.5)) : (float)(urand() - 0.5);
      if (t == s->weights)
        for (int64_t i = 0; i < n; i++) buf[i] = urand() < 0.8 ? 1.0f : 0.0f;
      dfl_cpu_set_f(c, t, buf, n);
      if (x->kind == DFL_T_PARAM && x->master >= 0) dfl_cpu_set_f(c, x->master, buf, n);
    }
  }
  int32_t *pos = dfl_cpu_i32(c, s->pos), *lab = dfl_cpu_i32(c, s->labels);
  for (int i = 0; i < B_ * S_; i++) {
    pos[i] = i % S_;
    lab[i] = (int32_t)(urand() * V_);
  }
  free(buf);
}

/* Runs two training steps; returns a copy of every persistent float tensor, concatenated. */
static float *run(const dfl_graph *g, const synth *s, const dfl_plan *p, int64_t *n_out) {
  dfl_cpu c;
  if (dfl_cpu_init(&c, g, p, 0) != DFL_OK) return NULL;
  int64_t n = 0;
  for (int t = 0; t < s->g.nt; t++)
    if (g->t[t].kind != DFL_T_ACT && g->t[t].kind != DFL_T_INPUT && g->t[t].dtype == DFL_F32) n += dfl_tensor_numel(&g->t[t]);
  float *out = malloc(sizeof(float) * (n + 1));
  for (int step = 0; step < 2; step++) {
    fill(&c, g, s, step);
    if (dfl_cpu_run(&c, DFL_PH_ALL) != DFL_OK) { dfl_cpu_free(&c); free(out); return NULL; }
  }
  int64_t k = 0;
  for (int t = 0; t < s->g.nt; t++) /* the original tensors only: a rewritten graph appends clones */
    if (g->t[t].kind != DFL_T_ACT && g->t[t].kind != DFL_T_INPUT && g->t[t].dtype == DFL_F32) {
      dfl_cpu_get_f(&c, t, out + k, dfl_tensor_numel(&g->t[t]));
      k += dfl_tensor_numel(&g->t[t]);
    }
  *n_out = n;
  dfl_cpu_free(&c);
  return out;
}

static int64_t n_diff(const float *a, const float *b, int64_t n) {
  int64_t d = 0;
  for (int64_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return d;
}

static size_t cpu_elem(const dfl_tensor *t, void *ctx) { return dfl_cpu_elem_size(t, 0); }

int main(void) {
  seed = getenv("DFL_SEED") ? strtoull(getenv("DFL_SEED"), 0, 0) : (uint64_t)time(NULL);
  printf("test_planned_cpu: seed %llu (DFL_SEED=%llu reproduces)\n", (unsigned long long)seed, (unsigned long long)seed);
  synth s;
  synth_std(&s);
  int64_t n_ref, n;
  float *ref = run(&s.g, &s, NULL, &n_ref);
  CHECK(ref != NULL, "unplanned run failed");
  if (!ref) return 1;
  double mag = 0;
  for (int64_t i = 0; i < n_ref; i++) mag += fabs(ref[i]);
  CHECK(mag > 0 && mag == mag, "reference results are zero or NaN (sum |x| = %g)", mag);

  for (int variant = 0; variant < 2; variant++) {
    dfl_plan p;
    dfl_plan_opts o = {.no_inplace = variant};
    CHECK(dfl_plan_build_ex(&p, &s.g, cpu_elem, NULL, &o) == DFL_OK, "plan");
    CHECK(dfl_plan_check(&p, &s.g) == DFL_OK, "checker fired");
    printf("  plan (in-place %s): %d in-place, per-step %lld, bound %lld, ratio %.3f\n", variant ? "off" : "on",
           p.n_inplace, (long long)p.step_bytes, (long long)p.step_lower_bound,
           (double)p.step_bytes / (double)p.step_lower_bound);
    if (!variant) CHECK(p.n_inplace > 0, "the decoder has residual adds: expected in-place reuse");
    float *got = run(&s.g, &s, &p, &n);
    CHECK(got && n == n_ref, "planned run failed");
    if (got) CHECK(n_diff(ref, got, n) == 0, "planned run differs in %lld of %lld values", (long long)n_diff(ref, got, n), (long long)n);
    free(got);

    if (!variant) { /* a broken plan must show up as different numbers */
      int a = -1, b = -1;
      for (int i = 0; i < s.g.nops && a < 0; i++) /* two outputs of one attention op: o and lse */
        if (s.g.ops[i].code == DFL_OP_ATTENTION) { a = s.g.ops[i].out[0]; b = s.g.ops[i].out[1]; }
      int64_t keep = p.offset[b];
      p.offset[b] = p.offset[a];
      fprintf(stderr, "(expected) ");
      CHECK(dfl_plan_check(&p, &s.g) != DFL_OK, "checker missed the broken plan");
      got = run(&s.g, &s, &p, &n);
      CHECK(got && n_diff(ref, got, n) > 0, "a broken plan gave identical numbers: the comparison cannot fail");
      printf("  broken plan: %lld values differ (expected)\n", got ? (long long)n_diff(ref, got, n) : -1ll);
      free(got);
      p.offset[b] = keep;
    }
    dfl_plan_free(&p);
  }

  /* recomputation to fit a budget: a rewritten graph, same numbers */
  synth s2;
  synth_std(&s2);
  dfl_plan p0;
  dfl_plan_build_ex(&p0, &s2.g, cpu_elem, NULL, NULL);
  int64_t budget = p0.persistent_bytes + p0.step_bytes * 7 / 10;
  dfl_plan_free(&p0);
  dfl_plan p;
  dfl_recompute r;
  int rc = dfl_plan_fit(&s2.g, budget, cpu_elem, NULL, NULL, &p, &r);
  printf("  recompute: %d ops, +%.3g FLOPs, arena %lld -> %lld (budget %lld)\n", r.n_ops, r.flops,
         (long long)r.before, (long long)r.after, (long long)budget);
  CHECK(rc == DFL_OK && p.arena_bytes <= budget, "recompute did not fit 70%% of the per-step region");
  CHECK(r.n_ops > 0 && r.flops > 0, "recompute chose nothing");
  CHECK(dfl_plan_check(&p, &s2.g) == DFL_OK, "checker fired on the recomputed plan");
  float *got = run(&s2.g, &s, &p, &n);
  CHECK(got && n == n_ref, "recomputed run failed");
  if (got) CHECK(n_diff(ref, got, n) == 0, "recomputed run differs in %lld values", (long long)n_diff(ref, got, n));
  free(got);
  /* the same rewritten graph, unplanned: recomputation alone keeps the numbers */
  got = run(&s2.g, &s, NULL, &n);
  if (got) CHECK(n_diff(ref, got, n) == 0, "recomputed graph (unplanned) differs");
  free(got);
  dfl_plan_free(&p);

  /* an impossible budget: fails, and leaves a checked plan */
  synth s3;
  synth_std(&s3);
  rc = dfl_plan_fit(&s3.g, 1024, cpu_elem, NULL, NULL, &p, &r);
  CHECK(rc != DFL_OK, "a 1 KiB budget cannot fit");
  CHECK(dfl_plan_check(&p, &s3.g) == DFL_OK, "checker fired on the best-effort plan");
  dfl_plan_free(&p);

  dfl_graph_free(&s.g);
  dfl_graph_free(&s2.g);
  dfl_graph_free(&s3.g);
  free(ref);
  if (failures) { fprintf(stderr, "test_planned_cpu: %d failures\n", failures); return 1; }
  printf("test_planned_cpu: ok\n");
  return 0;
}
