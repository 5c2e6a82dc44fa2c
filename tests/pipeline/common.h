/* common.h: helpers shared by the pipeline tests (header-only: each test is one program). */
#ifndef DFL_TEST_PIPELINE_COMMON_H
#define DFL_TEST_PIPELINE_COMMON_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "compiler/spec.h"
#include "runtime/pipeline/pipeline.h"

#define CHECK_FAILED exit(1)
#include "tests/common/check.h"

static inline uint64_t test_seed(void) {
  const char *e = getenv("DFL_TEST_SEED");
  uint64_t s = e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
  printf("seed %" PRIu64 " (DFL_TEST_SEED=%" PRIu64 " reproduces)\n", s, s);
  return s;
}

/* Rewrite the topology: n_t target-only + n_d drafter-only CPU devices, or (n_t = 0) n_d devices
** that each run target + drafter. */
static inline void set_topology(dfl_spec *s, int n_t, int n_d) {
  memset(s->devices, 0, sizeof s->devices);
  s->n_nodes = 1;
  s->n_devices = n_t + n_d;
  for (int i = 0; i < s->n_devices; i++) {
    s->devices[i].kind = DFL_DEV_CPU;
    s->devices[i].index = i;
    s->devices[i].runs_target = n_t == 0 || i < n_t;
    s->devices[i].runs_drafter = n_t == 0 || i >= n_t;
  }
}

static inline void tmp_dir(char *out, size_t n, const char *what) {
  snprintf(out, n, "/tmp/dfl-test-%s-%d", what, (int)getpid());
}

/* Rewrite the topology from one letter per device cpuI: C colocated (target + drafter), D
** drafter-only, T target-only. */
static inline void set_roles(dfl_spec *s, const char *roles) {
  memset(s->devices, 0, sizeof s->devices);
  s->n_nodes = 1;
  s->n_devices = (int)strlen(roles);
  for (int i = 0; i < s->n_devices; i++) {
    s->devices[i].kind = DFL_DEV_CPU;
    s->devices[i].index = i;
    s->devices[i].runs_target = roles[i] != 'D';
    s->devices[i].runs_drafter = roles[i] != 'T';
  }
}

/* Options of a quiet run of `steps` steps into dir that keeps its checkpoints and export, stops
** after stop_at (0: the end) and resumes from resume (NULL: fresh); steps reported to on_step. */
static inline void resume_pipe_opts(dfl_pipe_opts *o, const char *dir, int64_t steps, int64_t stop_at,
                                    const char *resume, void (*on_step)(void *, const dfl_step_stats *), void *ctx) {
  memset(o, 0, sizeof *o);
  o->steps = steps;
  o->stop_at = stop_at;
  o->resume = resume;
  o->out_dir = dir;
  o->quiet = 1;
  o->on_step = on_step;
  o->ctx = ctx;
  o->no_eval = 1;   /* the end-of-run evaluation is checked once, in test_pipeline_equiv */
}

/* Options of a quiet pipeline run of `steps` steps into tmp_dir(dir, n, what); the caller sets
** the rest (checkpoints, export, callbacks, faults). */
static inline void quiet_pipe_opts(dfl_pipe_opts *o, char *dir, size_t n, const char *what, int64_t steps) {
  memset(o, 0, sizeof *o);
  tmp_dir(dir, n, what);
  o->steps = steps;
  o->out_dir = dir;
  o->quiet = 1;
  o->no_eval = 1;
}

#endif
