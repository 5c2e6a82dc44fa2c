/*
** test_pipeline_resume: a pipeline run stopped and resumed continues bit-exactly.
**   For a split (2 targets -> 2 replicas), a replicated (2 colocated) and a mixed (C, D <- T)
**   topology: STEPS steps uninterrupted, against --stop-at K then --resume from that run's last
**   checkpoint, and against a resume from the uninterrupted run's periodic checkpoint: the same
**   losses and gradient norms to the bit, the same final state.safetensors and exported drafter
**   bytes, every step once in metrics.jsonl.
**   Across topologies: a single-device checkpoint continued by the split pipeline tracks the
**   single device's own continuation (the equivalence tolerances, equiv.h), with accum 1 (the
**   checkpoint's gradient accumulators hold its last step's gradients: the replicas restart at zero).
**   Refused, with a message: a checkpoint already at the run's end; one of another drafter; one
**   trained on other data (the eval file in place of the training file).
** Random seed (printed); nano-pipeline's model and data on CPU threads.
*/
#include <math.h>

#include "runtime/pipeline/pipeline.h"
#include "runtime/train/train.h"
#include "tests/pipeline/common.h"

#define STEPS 5
#define STOP 2
#include "tests/pipeline/equiv.h"

/* One pipeline run into dir (kept), its steps recorded in t; returns dfl_pipe_run's status. */
static int run(const dfl_spec *s, const char *dir, int64_t stop_at, const char *resume, trace *t) {
  dfl_pipe_opts o;
  dfl_pipe_result r;
  resume_pipe_opts(&o, dir, STEPS, stop_at, resume, on_step, t);
  int rc = dfl_pipe_run(s, &o, &r);
  if (rc == DFL_OK) CHECK(r.replicas_identical, "%s: replicas differ", dir);
  return rc;
}

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  CHECK(f, "cannot read %s", path);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)len + 1);
  CHECK(b && fread(b, 1, (size_t)len, f) == (size_t)len, "cannot read %s", path);
  fclose(f);
  *n = (size_t)len;
  b[len] = 0;
  return b;
}

static void same_file(const char *a, const char *b) {
  size_t na, nb;
  unsigned char *x = slurp(a, &na), *y = slurp(b, &nb);
  CHECK(na == nb && memcmp(x, y, na) == 0, "%s and %s differ (%zu and %zu bytes)", a, b, na, nb);
  free(x);
  free(y);
}

/* metrics.jsonl holds steps 1..STEPS, each once, in order. */
static void steps_once(const char *dir) {
  char path[512];
  snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
  size_t n;
  char *b = (char *)slurp(path, &n), *line = b;
  int64_t want = 1;
  while (line && *line) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = 0;
    if (!strstr(line, "\"diag\"")) {
      long long st = -1;
      CHECK(sscanf(line, "{\"step\":%lld", &st) == 1 && st == want, "%s: step %lld where %" PRId64 " was due", path,
            st, want);
      want++;
    }
    line = nl ? nl + 1 : NULL;
  }
  CHECK(want == STEPS + 1, "%s: %" PRId64 " step lines, %d due", path, want - 1, STEPS);
  free(b);
}

static void bit_equal_from(const trace *a, const trace *b, int from, const char *what) {
  for (int i = from; i <= STEPS; i++)
    CHECK(a->loss[i] == b->loss[i] && a->gnorm[i] == b->gnorm[i] && a->tokens[i] == b->tokens[i],
          "%s: step %d loss %.9g gnorm %.9g vs uninterrupted %.9g %.9g", what, i, b->loss[i], b->gnorm[i], a->loss[i],
          a->gnorm[i]);
}

static void rm_rf(const char *dir) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0, "cleanup of %s", dir);
}

static void topology(dfl_spec *s, const char *roles, const char *what) {
  char full[256], cut[256], mid[256], ck[600], a[600], b[600];
  static trace t_full, t_cut, t_mid;
  memset(&t_full, 0, sizeof t_full);
  memset(&t_cut, 0, sizeof t_cut);
  memset(&t_mid, 0, sizeof t_mid);
  set_roles(s, roles);
  snprintf(full, sizeof full, "/tmp/dfl-test-resume-%s-full-%d", what, (int)getpid());
  snprintf(cut, sizeof cut, "/tmp/dfl-test-resume-%s-cut-%d", what, (int)getpid());
  snprintf(mid, sizeof mid, "/tmp/dfl-test-resume-%s-mid-%d", what, (int)getpid());
  CHECK(run(s, full, 0, NULL, &t_full) == DFL_OK, "%s: the uninterrupted run failed", what);
  CHECK(t_full.n == STEPS, "%s: %d steps reported", what, t_full.n);

  /* stopped after STOP, resumed from the newest checkpoint under its ckpt/ root */
  CHECK(run(s, cut, STOP, NULL, &t_cut) == DFL_OK, "%s: the run stopped at %d failed", what, STOP);
  CHECK(t_cut.n == STOP, "%s: --stop-at %d took %d steps", what, STOP, t_cut.n);
  snprintf(ck, sizeof ck, "%s/drafter/model.safetensors", cut);
  CHECK(access(ck, F_OK) != 0, "%s: a run stopped early exported a drafter", what);
  snprintf(ck, sizeof ck, "%s/ckpt", cut);
  CHECK(run(s, cut, 0, ck, &t_cut) == DFL_OK, "%s: the resumed run failed", what);
  CHECK(t_cut.n == STEPS, "%s: %d steps over both runs", what, t_cut.n);
  bit_equal_from(&t_full, &t_cut, 1, what);
  snprintf(a, sizeof a, "%s/ckpt/step-%08d/state.safetensors", full, STEPS);
  snprintf(b, sizeof b, "%s/ckpt/step-%08d/state.safetensors", cut, STEPS);
  same_file(a, b);
  snprintf(a, sizeof a, "%s/drafter/model.safetensors", full);
  snprintf(b, sizeof b, "%s/drafter/model.safetensors", cut);
  same_file(a, b);
  steps_once(cut);

  /* from the uninterrupted run's periodic checkpoint (ckpt_every = 2: step 4) into another dir */
  snprintf(ck, sizeof ck, "%s/ckpt/step-%08d", full, 4);
  CHECK(run(s, mid, 0, ck, &t_mid) == DFL_OK, "%s: the run resumed at step 4 failed", what);
  CHECK(t_mid.n == STEPS - 4, "%s: %d steps after step 4", what, t_mid.n);
  bit_equal_from(&t_full, &t_mid, 5, what);
  snprintf(a, sizeof a, "%s/ckpt/step-%08d/state.safetensors", full, STEPS);
  snprintf(b, sizeof b, "%s/ckpt/step-%08d/state.safetensors", mid, STEPS);
  same_file(a, b);
  printf("%s (%s): steps 1..%d, %d + %d and 4 + 1 bit-equal; step %d loss %.7f\n", what, roles, STEPS, STOP,
         STEPS - STOP, STEPS, t_full.loss[STEPS]);
  rm_rf(cut);
  rm_rf(mid);
  if (strcmp(what, "split")) rm_rf(full);
}

int main(void) {
  uint64_t seed = test_seed();
  static dfl_spec s;
  equiv_spec(&s, seed);
  s.ckpt_every = 2;
  s.ckpt_keep = 0;   /* every checkpoint stays: step 4 is resumed from */
  topology(&s, "CC", "replicated");
  topology(&s, "CDT", "mixed");
  topology(&s, "TTDD", "split");   /* last: its uninterrupted run's checkpoint is used below */
  char full[256], ck[600], dir[256];
  snprintf(full, sizeof full, "/tmp/dfl-test-resume-split-full-%d", (int)getpid());

  /* refused: nothing left to train, with the way out in the message */
  static trace bad;
  snprintf(ck, sizeof ck, "%s/ckpt", full);
  snprintf(dir, sizeof dir, "/tmp/dfl-test-resume-bad-%d", (int)getpid());
  CHECK(run(&s, dir, 0, ck, &bad) == DFL_EFORMAT && bad.n == 0, "a checkpoint at the run's end was resumed");

  /* refused: another drafter (one more layer) */
  static dfl_spec other;
  other = s;
  other.drafter.layers++;
  snprintf(ck, sizeof ck, "%s/ckpt/step-%08d", full, 4);
  CHECK(run(&other, dir, 0, ck, &bad) != DFL_OK && bad.n == 0, "a checkpoint of another drafter was resumed");

  /* refused: other training data */
  other = s;
  snprintf(other.train_path, sizeof other.train_path, "%s", s.eval_path);
  CHECK(run(&other, dir, 0, ck, &bad) == DFL_EFORMAT && bad.n == 0, "a checkpoint was resumed on other data");

  /* across topologies: one device's checkpoint at step STOP, continued by the 2 + 2 split; accum 1,
  ** so the checkpoint holds that step's gradients (the trainer overwrites its accumulators), which
  ** the replicas must not add to */
  s.accum = 1;
  static trace one, one_cut, split;
  dfl_trainer tr;
  dfl_train_opts o;
  memset(&o, 0, sizeof o);
  char sdir[256];
  snprintf(sdir, sizeof sdir, "/tmp/dfl-test-resume-single-%d", (int)getpid());
  o.steps = STEPS;
  o.out_dir = sdir;
  o.no_eval = o.no_export = o.quiet = 1;
  o.cpu_threads = 1;
  set_roles(&s, "C");
  CHECK(dfl_train_open(&tr, &s, &o) == DFL_OK, "single-device trainer did not open");
  for (int i = 1; i <= STEPS; i++) {
    dfl_step_stats st;
    CHECK(dfl_train_step(&tr, &st) == DFL_OK, "single step %d", i);
    on_step(&one, &st);
    on_step(&one_cut, &st);
    if (i == STOP) CHECK(dfl_train_checkpoint(&tr) == DFL_OK, "single-device checkpoint");
  }
  dfl_train_close(&tr);
  set_roles(&s, "TTDD");
  snprintf(ck, sizeof ck, "%s/ckpt/step-%08d", sdir, STOP);
  CHECK(run(&s, dir, 0, ck, &split) == DFL_OK, "the split pipeline did not resume a single-device checkpoint");
  CHECK(split.n == STEPS - STOP, "the split pipeline took %d steps after step %d", split.n, STOP);
  for (int i = STOP + 1; i <= STEPS; i++) {
    one_cut.loss[i] = split.loss[i];
    one_cut.gnorm[i] = split.gnorm[i];
    one_cut.tokens[i] = split.tokens[i];
  }
  compare(&one, &one_cut, "single -> split");
  rm_rf(dir);
  rm_rf(sdir);
  rm_rf(full);
  printf("ok\n");
  return 0;
}
