/*
** test_pipeline_faults: the pipeline's numbers do not depend on timing or topology details.
** Runs of nano with N = 2 drafter replicas must give bit-identical per-step losses and gradient
** norms whatever the number of target devices (1, 2, 3), the queue depth (1 = tightest), the
** prefetch depth, and injected stalls (DFL_FAULT-style sleeps in the loader, one target, one
** drafter). Every run also checks its queue slots (checksums + poisoning), so a slot reused
** before its consumer is done fails the run.
*/
#include "runtime/pipeline.h"
#include "tests/pipeline/common.h"

#define STEPS 3

typedef struct { double loss[STEPS + 1], gnorm[STEPS + 1]; } trace;

static void on_step(void *ctx, const dfl_step_stats *st) {
  trace *t = ctx;
  if (st->step >= 1 && st->step <= STEPS) t->loss[st->step] = st->loss, t->gnorm[st->step] = st->gnorm;
}

static void run(dfl_spec *s, int M, int depth, int prefetch, const char *fault, trace *t) {
  set_topology(s, M, 2);
  s->queue_depth = depth;
  s->prefetch = prefetch;
  dfl_pipe_opts o;
  dfl_pipe_result r;
  char dir[256];
  quiet_pipe_opts(&o, dir, sizeof dir, "faults", STEPS);
  o.no_ckpt = o.no_export = 1;
  o.on_step = on_step;
  o.ctx = t;
  o.fault = fault;
  CHECK(dfl_pipe_run(s, &o, &r) == DFL_OK, "M=%d depth %d prefetch %d fault '%s': run failed", M, depth, prefetch,
        fault);
  CHECK(r.replicas_identical, "replicas differ");
  printf("%d targets, depth %d, prefetch %d, fault '%s': %.2fs, losses %.6f %.6f %.6f\n", M, depth, prefetch, fault,
         r.seconds, t->loss[1], t->loss[2], t->loss[3]);
}

static void same(const trace *a, const trace *b, const char *what) {
  for (int i = 1; i <= STEPS; i++)
    CHECK(a->loss[i] == b->loss[i] && a->gnorm[i] == b->gnorm[i], "%s: step %d loss %.9g vs %.9g, gnorm %.9g vs %.9g",
          what, i, b->loss[i], a->loss[i], b->gnorm[i], a->gnorm[i]);
}

int main(void) {
  uint64_t seed = test_seed();
  static dfl_spec s;
  CHECK(dfl_spec_load("examples/nano-pipeline.dfl", &s) == DFL_OK, "examples/nano-pipeline.dfl does not load");
  s.seed = seed;
  s.init_seed = seed ^ 0x5eed;
  s.seq_len = 64;   /* shorter sequences: the same code paths, faster */
  s.anchors = 8;
  s.accum = 2;
  s.ckpt_every = 0;
  static trace base, t;
  run(&s, 2, 4, 2, "", &base);
  CHECK(base.loss[1] > 0 && base.loss[STEPS] > 0, "no losses recorded");
  run(&s, 2, 1, 1, "", &t);
  same(&base, &t, "depth 1, prefetch 1");
  run(&s, 1, 1, 1, "target=2", &t);
  same(&base, &t, "1 target, slow");
  run(&s, 3, 2, 1, "target1=15,loader=1", &t);
  same(&base, &t, "3 targets, one stalled");
  run(&s, 2, 1, 3, "drafter1=20", &t);
  same(&base, &t, "one stalled drafter");
  printf("ok\n");
  return 0;
}
