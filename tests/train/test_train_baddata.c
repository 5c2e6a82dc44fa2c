/*
** train_baddata: training on a data file where every row is bad is refused before any
** weight is loaded, with FILE:LINE messages naming each bad row, under both bad-row policies
** (skip: "no usable row"; refuse: the first bad row). A missing file and a bad resume path are
** refused with a message too. The bad rows are drawn at random (seed printed).
*/
#include <time.h>

#include "train_test.h"

static const char *bad_row(int kind, int vocab, dfl_rng *r, char *buf, size_t n) {
  int a = 1 + (int)(dfl_rng_next(r) % 100), b = 1 + (int)(dfl_rng_next(r) % 100);
  switch (kind) {
  case 0: snprintf(buf, n, "{\"input_ids\": [%d, %d, %d], \"loss_mask\": [0, 1]}", a, b, a); break;  /* lengths */
  case 1: snprintf(buf, n, "{\"input_ids\": [%d, %d, %d], \"loss_mask\": [0, 1, 1]}", a, vocab + b, a); break; /* id */
  case 2: snprintf(buf, n, "{\"input_ids\": [%d, %d, %d, %d]}", a, b, a, b); break;          /* no loss_mask */
  case 3: snprintf(buf, n, "{\"input_ids\": [%d, %d, %d], \"loss_mask\": [1, 0, 1]}", a, b, a); break; /* no pair */
  default: snprintf(buf, n, "{\"input_ids\": [%d, %d", a, b); break;                          /* not JSON */
  }
  return buf;
}

int main(void) {
  uint64_t seed = (uint64_t)time(NULL);
  printf("train_baddata: seed %llu\n", (unsigned long long)seed);
  char dir[256], data[300], line[256], want[400];
  if (make_tmpdir(dir, sizeof dir, "baddata")) return 1;
  snprintf(data, sizeof data, "%s/bad.jsonl", dir);
  dfl_rng r;
  dfl_rng_seed(&r, seed);
  int nrows = 5 + (int)(dfl_rng_next(&r) % 5);
  FILE *f = fopen(data, "w");
  for (int i = 0; i < nrows; i++) fprintf(f, "%s\n", bad_row(i % 5, 8192, &r, line, sizeof line));
  fclose(f);

  dfl_spec s;
  if (small_spec(&s, data, NULL)) return 1;
  dfl_train_opts o;
  memset(&o, 0, sizeof o);
  o.no_eval = o.no_export = 1;
  o.out_dir = dir;
  dfl_trainer *tr = calloc(1, sizeof *tr);

  for (int policy = 0; policy < 2; policy++) {
    s.bad_rows = policy ? DFL_BADROW_REFUSE : DFL_BADROW_SKIP;
    stderr_cap cap;
    cap_begin(&cap);
    int rc = dfl_train_open(tr, &s, &o);
    char *msg = cap_end(&cap);
    CHECK(rc != DFL_OK, "policy %d: a file of bad rows is refused", policy);
    if (rc == DFL_OK) dfl_train_close(tr);
    snprintf(want, sizeof want, "%s:1:", data);
    CHECK(msg && strstr(msg, want), "policy %d: the message names %s", policy, want);
    if (!policy) {
      /* skip: every row is reported */
      snprintf(want, sizeof want, "%s:%d:", data, nrows);
      CHECK(msg && strstr(msg, want), "policy skip: the last bad row is named (%s)", want);
    }
    CHECK(msg && strstr(msg, "refused"), "policy %d: the trainer says the data was refused", policy);
    free(msg);
  }

  /* A missing data file. */
  snprintf(s.train_path, sizeof s.train_path, "%s/missing.jsonl", dir);
  stderr_cap cap;
  cap_begin(&cap);
  int rc = dfl_train_open(tr, &s, &o);
  char *msg = cap_end(&cap);
  CHECK(rc != DFL_OK && msg && strstr(msg, "missing.jsonl"), "a missing file is refused, naming it");
  free(msg);

  /* A resume path that is not a checkpoint. */
  if (small_spec(&s, "examples/data/nano_eval.jsonl.gz", NULL)) return 1;
  o.resume = dir;
  cap_begin(&cap);
  rc = dfl_train_open(tr, &s, &o);
  msg = cap_end(&cap);
  CHECK(rc != DFL_OK && msg && strstr(msg, "not a checkpoint"), "resume from a non-checkpoint is refused");
  free(msg);

  free(tr);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) printf("note: could not remove %s\n", dir);
  printf("train_baddata: %s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
