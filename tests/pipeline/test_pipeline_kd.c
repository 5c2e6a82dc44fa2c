/*
** test_pipeline_kd: soft labels through the pipeline's queue. A 2-target + 2-drafter CPU pipeline
** (logical devices cpu0..cpu3) trains nano with labels = mix(0.5) at T = 2 to the same per-step losses
** and gradient norms as one device that holds target and drafter: the target devices send their final
** norm's output after the taps (DFL_TARGET_WITH_FINAL), the drafter devices split it off by column
** windows (models/pipeline.c) for the loss head. Tolerances: equiv.h's (the replicas' gradient sums
** run in another order). The soft term must move the loss: hard labels' first loss differs.
*/
#include <math.h>

#include "runtime/pipeline/pipeline.h"
#include "runtime/train/train.h"
#include "tests/pipeline/common.h"

#define STEPS 3
#include "tests/pipeline/equiv.h"

static void pipe_run(const dfl_spec *s, trace *t, const char *what) {
  dfl_pipe_opts o;
  dfl_pipe_result r;
  char dir[256], cmd[300];
  quiet_pipe_opts(&o, dir, sizeof dir, what, STEPS);
  o.no_export = o.no_ckpt = 1;
  equiv_pipe(s, &o, t, what, &r);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0, "cleanup");
}

int main(void) {
  uint64_t seed = test_seed();
  static dfl_spec s;
  equiv_spec(&s, seed);
  static trace hard, one, split;
  single(&s, &hard, "kd-hard");
  s.kd_alpha = 0.5, s.kd_temp = 2.0;
  single(&s, &one, "kd-single");
  CHECK(fabs(one.loss[1] - hard.loss[1]) > 1e-3 * fabs(hard.loss[1]), "mix(0.5) at T 2 left the loss at %.7g (hard %.7g)",
        one.loss[1], hard.loss[1]);
  set_topology(&s, 2, 2);
  pipe_run(&s, &split, "kd-split-2x2");
  compare(&one, &split, "kd split");
  printf("ok\n");
  return 0;
}
