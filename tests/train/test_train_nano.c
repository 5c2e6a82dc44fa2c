/*
** train_nano: a shortened run of the nano example (examples/nano.dfl, --steps 60) learns:
** the training loss at the end is clearly below the start, the eval tau rises above its start
** value, the exported drafter reloads bit-exactly (checked inside the run), and the `dflc export`
** and `dflc eval` commands work on its output. The anchors and data order come from the spec's
** seed, which this test replaces with one drawn from the time (printed).
*/
#include <jansson.h>
#include <math.h>
#include <time.h>

#include "runtime/io/safetensors.h"
#include "train_test.h"

#define STEPS 60

/* Mean training loss of steps [a, b] from metrics.jsonl. */
static double mean_loss(const char *path, int a, int b) {
  FILE *f = fopen(path, "r");
  char line[8192];
  double sum = 0;
  int n = 0;
  while (f && fgets(line, sizeof line, f)) {
    json_t *o = json_loads(line, 0, NULL);
    if (!o) continue;
    json_t *st = json_object_get(o, "step"), *ev = json_object_get(o, "eval"), *l = json_object_get(o, "loss");
    if (json_is_integer(st) && !ev && json_is_number(l)) {
      int k = (int)json_integer_value(st);
      if (k >= a && k <= b) { sum += json_number_value(l); n++; }
    }
    json_decref(o);
  }
  if (f) fclose(f);
  return n ? sum / n : NAN;
}

int main(void) {
  uint64_t seed = (uint64_t)time(NULL);
  printf("train_nano: seed %llu\n", (unsigned long long)seed);
  char dir[256], path[400], cmd[2600];
  if (make_tmpdir(dir, sizeof dir, "nano")) return 1;
  dfl_spec s;
  if (dfl_spec_load("examples/nano.dfl", &s) != DFL_OK) {
    printf("FAIL: examples/nano.dfl does not load\n");
    return 1;
  }
  s.seed = seed;
  /* the eval file's first 32 rows: every evaluation also walks each row as a decoder does (a block
  ** every few tokens), which on all 128 rows would take most of the test's time */
  char evp[300];
  snprintf(evp, sizeof evp, "%s/eval32.jsonl", dir);
  snprintf(cmd, sizeof cmd, "zcat '%s' | head -n 32 > '%s'", s.eval_path, evp);
  if (system(cmd)) {
    printf("FAIL: %s\n", cmd);
    return 1;
  }
  snprintf(s.eval_path, sizeof s.eval_path, "%s", evp);
  dfl_train_opts o;
  memset(&o, 0, sizeof o);
  o.steps = STEPS;
  o.out_dir = dir;
  o.cpu_threads = 2;
  dfl_trainer *tr = calloc(1, sizeof *tr);
  if (dfl_train_open(tr, &s, &o) != DFL_OK) { printf("FAIL: open\n"); return 1; }
  CHECK(tr->has_eval, "the nano example has an eval file");
  dfl_eval_stats first, last;
  memset(&first, 0, sizeof first);
  memset(&last, 0, sizeof last);
  time_t t0 = time(NULL);
  int rc = dfl_train_run(tr, &first, &last);
  CHECK(rc == DFL_OK, "the run completes (including the export and its bit-exact reload)");
  printf("run: %lds\n", (long)(time(NULL) - t0));
  dfl_train_close(tr);

  snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
  double l0 = mean_loss(path, 1, 5), l1 = mean_loss(path, STEPS - 4, STEPS);
  printf("loss: first 5 steps %.3f, last 5 steps %.3f; eval tau %.3f -> %.3f, acc %.3f -> %.3f\n", l0, l1,
         first.tau, last.tau, first.acc, last.acc);
  CHECK(isfinite(l0) && isfinite(l1) && l1 < 0.8 * l0, "loss falls clearly: %.3f -> %.3f", l0, l1);
  CHECK(last.tau > first.tau + 0.02, "eval tau rises: %.3f -> %.3f", first.tau, last.tau);
  CHECK(first.tau >= 1.0 && last.tau <= s.block_size, "tau within [1, B]");
  CHECK(last.acc > first.acc, "eval accuracy rises: %.3f -> %.3f", first.acc, last.acc);

  /* The CLI on the run's output: export the last checkpoint, evaluate the exported drafter. */
  const char *bin = getenv("DFL_BINARY_DIR");
  if (!bin) {
    printf("FAIL: DFL_BINARY_DIR is not set (run under ctest)\n");
    failures++;
  } else {
    snprintf(cmd, sizeof cmd, "'%s/dflc' export '%s/ckpt' -o '%s/exported'", bin, dir, dir);
    CHECK(system(cmd) == 0, "%s", cmd);
    /* Same checkpoint, same export: identical tensors to the run's own export. */
    char err[512], a[400], b[400];
    snprintf(a, sizeof a, "%s/drafter", dir);
    snprintf(b, sizeof b, "%s/exported", dir);
    dfl_st sa, sb;
    if (dfl_st_open(&sa, a, err, sizeof err) == DFL_OK) {
      if (dfl_st_open(&sb, b, err, sizeof err) == DFL_OK) {
        CHECK(sa.n == sb.n && sa.n > 0, "both exports hold %d / %d tensors", sa.n, sb.n);
        for (int i = 0; i < sa.n; i++) {
          const dfl_st_entry *x = &sa.e[i], *y = dfl_st_find(&sb, x->name);
          CHECK(y && y->end - y->begin == x->end - x->begin &&
                !memcmp(dfl_st_data(&sa, x), dfl_st_data(&sb, y), x->end - x->begin),
                "tensor %s identical in both exports", x->name);
        }
        dfl_st_close(&sb);
      } else CHECK(0, "%s", err);
      dfl_st_close(&sa);
    } else CHECK(0, "%s", err);

    snprintf(cmd, sizeof cmd, "'%s/dflc' eval examples/nano.dfl --drafter '%s/drafter' --data '%s'", bin, dir, evp);
    FILE *p = popen(cmd, "r");
    char line[4096];
    double tau = -1;
    while (p && fgets(line, sizeof line, p)) {
      fputs(line, stdout);
      json_t *j = json_loads(line, 0, NULL);
      if (j && json_is_number(json_object_get(j, "tau"))) tau = json_number_value(json_object_get(j, "tau"));
      json_decref(j);
    }
    CHECK(p && pclose(p) == 0, "%s succeeds", cmd);
    /* The export is bf16, so tau moves a little; the spec seed differs (fixed eval anchors of the
    ** file's seed vs this run's), so only a loose agreement is expected. */
    CHECK(tau > first.tau && fabs(tau - last.tau) < 0.25, "dflc eval tau %.3f vs the run's %.3f", tau, last.tau);
  }
  free(tr);
  if (!failures) {
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) printf("note: could not remove %s\n", dir);
  }
  printf("train_nano: %s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
