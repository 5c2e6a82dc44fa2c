/*
** test_pipeline_faults: the pipeline's numbers do not depend on timing or topology details.
** Runs of nano with N = 2 drafter replicas must give bit-identical per-step losses and gradient
** norms whatever the number of target devices (1, 2, 3), the queue depth (1 = tightest), the
** prefetch depth, and injected stalls (DFL_FAULT-style sleeps in the loader, one target, one
** drafter). Every run also checks its queue slots (checksums + poisoning), so a slot reused
** before its consumer is done fails the run.
** Failures: DFL_FAULT "drafter1=fail@K" / "target0=fail@K" makes one device return an error at its
** K-th micro-batch, mid-run (the other replica inside the all-reduce, targets blocked on a full
** queue, ...): the run must end within seconds (no deadlock; alarm() turns a hang into a failure)
** with an error naming the device.
*/
#include <fcntl.h>
#include <signal.h>

#include "runtime/pipeline/pipeline.h"
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

static void on_alarm(int sig) {
  (void)sig;
  static const char m[] = "FAIL: a failing device left the pipeline hanging (deadlock)\n";
  if (write(2, m, sizeof m - 1) < 0) _exit(2);
  _exit(1);
}

/* A run with one failing device: an error within FAIL_S seconds, stderr naming the device. */
#define FAIL_S 20
static void run_fail(dfl_spec *s, int M, int depth, const char *fault, const char *dev, const char *role) {
  set_topology(s, M, 2);
  s->queue_depth = depth;
  s->prefetch = 1;
  dfl_pipe_opts o;
  dfl_pipe_result r;
  char dir[256], errf[300];
  quiet_pipe_opts(&o, dir, sizeof dir, "fail", STEPS);
  o.no_ckpt = o.no_export = 1;
  o.fault = fault;
  snprintf(errf, sizeof errf, "%s.stderr", dir);
  fflush(stderr);
  int saved = dup(2), fd = open(errf, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  CHECK(saved >= 0 && fd >= 0, "cannot capture stderr in %s", errf);
  dup2(fd, 2);
  close(fd);
  alarm(FAIL_S);
  int rc = dfl_pipe_run(s, &o, &r);
  alarm(0);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char msg[4096] = "";
  FILE *f = fopen(errf, "r");
  size_t n = f ? fread(msg, 1, sizeof msg - 1, f) : 0;
  msg[n] = 0;
  if (f) fclose(f);
  unlink(errf);
  CHECK(rc != DFL_OK, "fault '%s': the run succeeded", fault);
  char want[96];
  snprintf(want, sizeof want, "%s (%s", dev, role);
  CHECK(strstr(msg, want) && strstr(msg, "injected failure") && strstr(msg, "stopping every device"),
        "fault '%s': stderr does not name %s (%s):\n%s", fault, dev, role, msg);
  printf("fault '%s' (%d targets, depth %d): error %d after %.2fs, stderr:\n%s", fault, M, depth, rc, r.seconds, msg);
  CHECK(r.seconds < FAIL_S, "took %.1fs", r.seconds);
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

  signal(SIGALRM, on_alarm);
  dfl_rng r;
  dfl_rng_seed(&r, seed);
  int per = STEPS * s.accum;   /* micro-batches per drafter replica */
  /* the last micro-batch of a step: replica 0 is then in (or on its way to) the all-reduce */
  run_fail(&s, 2, 1, "drafter1=fail@1", "cpu3", "drafter replica 1");
  char f[64];
  snprintf(f, sizeof f, "drafter0=fail@%d", (int)dfl_rng_below(&r, (uint64_t)per));
  run_fail(&s, 1, 2, f, "cpu1", "drafter replica 0");
  /* a target failing while the drafters wait on the queue and the other target is blocked */
  snprintf(f, sizeof f, "target1=fail@%d,drafter=5", 1 + (int)dfl_rng_below(&r, (uint64_t)(per - 1)));
  run_fail(&s, 2, 1, f, "cpu1", "target 1");
  printf("ok\n");
  return 0;
}
