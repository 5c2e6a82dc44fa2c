/*
** equiv.h: what the pipeline equivalence tests share: a per-step trace of loss, gradient norm and
** tokens, the single-device reference run, and the comparison with its tolerances (2e-5 relative
** on the loss, 1e-4 on the gradient norm: the replicas sum their gradients in another order than
** one device does, in fp32). Include after common.h; STEPS must be defined.
**
** Adam's eps is raised to 1e-6 in these runs (equiv_spec). Adam's first step moves a weight by
** lr * g / (|g| + eps): where |g| is near eps (1e-8), the 1e-10 that another summation order leaves
** in g is amplified by lr / eps. Seed 21424367044 flipped the sign of one such gradient entry of
** layers.1.v_proj (the weights 5e-4 apart after step 1) and moved step 3's loss by 6.9e-5 relative,
** with the 5x3 pipeline bit-equal to three colocated replicas: the optimizer's conditioning, not the
** pipeline. With eps = 1e-6 the same rounding moves a weight by at most ~3e-7 (lr 3e-3 x 1e-10 / eps,
** a bound, not a measurement).
*/
#ifndef DFL_TEST_PIPELINE_EQUIV_H
#define DFL_TEST_PIPELINE_EQUIV_H

#include <math.h>
#include "runtime/pipeline/pipeline.h"
#include "runtime/train/train.h"

typedef struct { double loss[STEPS + 1], gnorm[STEPS + 1], tokens[STEPS + 1]; int n; } trace;

static void on_step(void *ctx, const dfl_step_stats *st) {
  trace *t = ctx;
  if (st->step >= 1 && st->step <= STEPS) {
    t->loss[st->step] = st->loss;
    t->gnorm[st->step] = st->gnorm;
    t->tokens[st->step] = st->tokens;
  }
  t->n++;
}

/* The spec every equivalence run starts from: nano-pipeline's model and data, the seed for the data
** order and anchors (and one derived for the init), accum 2 (the loss denominator is summed over
** micro-batches and replicas), no checkpoints, Adam's eps 1e-6 (see the header). */
static void equiv_spec(dfl_spec *s, uint64_t seed) {
  CHECK(dfl_spec_load("examples/nano-pipeline.dfl", s) == DFL_OK, "examples/nano-pipeline.dfl does not load");
  s->seed = seed;
  s->init_seed = seed * 2654435761u + 1;
  s->accum = 2;
  s->ckpt_every = 0;
  s->eps = 1e-6;
}

/* The single-device trainer on the whole global batch: the reference every pipeline must match. */
static inline void single(const dfl_spec *s, trace *t, const char *what) {
  dfl_trainer tr;
  dfl_train_opts o;
  memset(&o, 0, sizeof o);
  char dir[256];
  tmp_dir(dir, sizeof dir, what);
  o.steps = STEPS;
  o.out_dir = dir;
  o.no_eval = o.no_export = o.quiet = 1;
  o.cpu_threads = 1;
  CHECK(dfl_train_open(&tr, s, &o) == DFL_OK, "single-device trainer did not open");
  for (int i = 1; i <= STEPS; i++) {
    dfl_step_stats st;
    CHECK(dfl_train_step(&tr, &st) == DFL_OK, "single step %d", i);
    on_step(t, &st);
  }
  dfl_train_close(&tr);
}

/* A pipeline run of STEPS steps with o's options (quiet_pipe_opts and the caller's), traced into t: it
** must finish every step with its replicas identical. */
static inline void equiv_pipe(const dfl_spec *s, dfl_pipe_opts *o, trace *t, const char *what, dfl_pipe_result *r) {
  o->on_step = on_step;
  o->ctx = t;
  o->fault = "";
  CHECK(dfl_pipe_run(s, o, r) == DFL_OK, "%s pipeline failed", what);
  CHECK(r->steps == STEPS && t->n == STEPS, "%s: %" PRId64 " steps, %d reports", what, r->steps, t->n);
  CHECK(r->replicas_identical, "%s: replicas differ after %d steps", what, STEPS);
}

static void compare(const trace *a, const trace *b, const char *what) {
  for (int i = 1; i <= STEPS; i++) {
    double dl = fabs(a->loss[i] - b->loss[i]) / fabs(a->loss[i]);
    double dg = fabs(a->gnorm[i] - b->gnorm[i]) / fabs(a->gnorm[i]);
    printf("  step %d  single loss %.7f gnorm %.5f   %s loss %.7f gnorm %.5f  (rel %.1e, %.1e)\n", i, a->loss[i],
           a->gnorm[i], what, b->loss[i], b->gnorm[i], dl, dg);
    CHECK(isfinite(b->loss[i]) && dl <= 2e-5, "%s: step %d loss %.8g vs single %.8g", what, i, b->loss[i], a->loss[i]);
    CHECK(dg <= 1e-4, "%s: step %d gnorm %.8g vs single %.8g", what, i, b->gnorm[i], a->gnorm[i]);
    CHECK(a->tokens[i] == b->tokens[i], "%s: step %d tokens %.0f vs %.0f", what, i, b->tokens[i], a->tokens[i]);
  }
}

#endif
