/*
** test_pipeline_mixed: topologies that mix colocated devices (target + drafter) with target-only
** and drafter-only ones train to the single device's per-step losses on the same global batches
** (same tolerances as test_pipeline_equiv: 2e-5 relative loss, 1e-4 gradient norm: the replicas sum
** their gradients in another order than one device), and, with the same number of replicas, to
** the very bits of the all-colocated pipeline (same slices per replica, same all-reduce order).
**   mixed-3: cpu0 colocated, cpu1 drafter-only fed by cpu2 target-only (the example);
**   mixed-5: cpu0, cpu2 colocated; cpu1, cpu3 drafter-only; cpu4 target-only; queue depth 1,
**            prefetch 1, random stalls in the loader, the target and one replica;
**   5x3: the layout of examples/qwen36-27b-5x3.dfl on CPU threads (5 target-only, 3 drafter-only
**        devices, global batch 6) vs one device with batch 6, and bit-equal to 3 colocated replicas;
**   a drafter-only replica of mixed-3 failing at a random micro-batch: an error naming it.
*/
#include <math.h>

#include "runtime/pipeline/pipeline.h"
#include "runtime/train/train.h"
#include "tests/pipeline/common.h"

#define STEPS 4
#include "tests/pipeline/equiv.h"

static int pipe_run(const dfl_spec *s, trace *t, const char *what, const char *fault, int export) {
  dfl_pipe_opts o;
  dfl_pipe_result r;
  char dir[256];
  quiet_pipe_opts(&o, dir, sizeof dir, what, STEPS);
  o.no_export = !export;
  o.no_ckpt = 1;
  o.on_step = on_step;
  o.ctx = t;
  o.fault = fault;
  int rc = dfl_pipe_run(s, &o, &r);
  if (rc == DFL_OK) {
    CHECK(r.steps == STEPS && t->n == STEPS, "%s: %" PRId64 " steps, %d reports", what, r.steps, t->n);
    CHECK(r.replicas_identical, "%s: replicas differ after %d steps", what, STEPS);
    if (export) {
      char f[512];
      snprintf(f, sizeof f, "%s/drafter/model.safetensors", dir);
      CHECK(access(f, R_OK) == 0, "%s: no exported drafter at %s", what, f);
    }
    printf("%s: %.2fs, %d targets -> %d replicas, verdict: %s\n", what, r.seconds, r.n_target, r.n_drafter,
           r.last_verdict);
  }
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0, "cleanup");
  return rc;
}

static void bit_equal(const trace *a, const trace *b, const char *wa, const char *wb) {
  for (int i = 1; i <= STEPS; i++)
    CHECK(a->loss[i] == b->loss[i] && a->gnorm[i] == b->gnorm[i], "step %d: %s %.9g vs %s %.9g: not bit-equal", i,
          wa, a->loss[i], wb, b->loss[i]);
}

int main(void) {
  uint64_t seed = test_seed();
  srand((unsigned)seed);
  static dfl_spec s;
  equiv_spec(&s, seed);
  static trace one, rep2, mix3, rep4, mix5, one6, rep3, s53, bad;
  single(&s, &one, "mixed-single");

  /* N = 2: the example vs one device and vs two colocated replicas */
  set_roles(&s, "CC");
  CHECK(pipe_run(&s, &rep2, "mixed-rep2", "", 0) == DFL_OK, "2 colocated replicas failed");
  set_roles(&s, "CDT");
  s.queue_depth = 2;
  CHECK(pipe_run(&s, &mix3, "mixed-3", "", 1) == DFL_OK, "mixed cpu0 C, cpu1 D <- cpu2 T failed");
  compare(&one, &mix3, "mixed-3");
  bit_equal(&rep2, &mix3, "colocated-2", "mixed-3");

  /* N = 4, depth 1, prefetch 1, stalls: no deadlock, the same bits as 4 colocated replicas */
  set_roles(&s, "CCCC");
  CHECK(pipe_run(&s, &rep4, "mixed-rep4", "", 0) == DFL_OK, "4 colocated replicas failed");
  set_roles(&s, "CDCDT");
  s.queue_depth = 1;
  s.prefetch = 1;
  char fault[128];
  snprintf(fault, sizeof fault, "loader=%d,target0=%d,drafter%d=%d", rand() % 3, rand() % 3, rand() % 4, 1 + rand() % 4);
  printf("mixed-5 stalls: %s\n", fault);
  CHECK(pipe_run(&s, &mix5, "mixed-5", fault, 0) == DFL_OK, "mixed 2 C + 2 D <- 1 T failed");
  compare(&one, &mix5, "mixed-5");
  bit_equal(&rep4, &mix5, "colocated-4", "mixed-5");

  /* the 5 + 3 layout: slices k -> replica k mod 3, queue item k from target k mod 5 */
  s.batch = 6;
  s.queue_depth = 5 + rand() % 6;
  s.prefetch = 2;
  single(&s, &one6, "mixed-single");
  set_roles(&s, "CCC");
  CHECK(pipe_run(&s, &rep3, "mixed-rep3", "", 0) == DFL_OK, "3 colocated replicas failed");
  set_roles(&s, "TTTTTDDD");
  printf("5x3: queue depth %d\n", s.queue_depth);
  CHECK(pipe_run(&s, &s53, "split-5x3", "", 0) == DFL_OK, "5 targets -> 3 drafters failed");
  compare(&one6, &s53, "split-5x3");
  bit_equal(&rep3, &s53, "colocated-3", "split-5x3");
  s.batch = 8;

  /* a failing drafter-only replica stops the mixed run with an error */
  set_roles(&s, "CDT");
  snprintf(fault, sizeof fault, "drafter1=fail@%d", rand() % (2 * STEPS));
  printf("mixed-3 failure: %s\n", fault);
  alarm(20);
  CHECK(pipe_run(&s, &bad, "mixed-fail", fault, 0) != DFL_OK, "injected failure %s not reported", fault);
  alarm(0);

  /* refused: target-only devices that feed nobody */
  set_roles(&s, "CT");
  CHECK(pipe_run(&s, &bad, "mixed-refused", "", 0) == DFL_EFORMAT, "C + T accepted");
  printf("ok\n");
  return 0;
}
