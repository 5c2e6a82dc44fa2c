/*
** test_packed_train.c: training smoke on packed data. examples/nano.dfl is copied twice into a
** temp directory with absolute paths: once as is (JSONL), once with `format = packed` pointing at
** a packed file made here from the same JSONL. Three optimizer steps of each, with the same seed
** (drawn fresh from the time, written into both specs), must give the same losses: the trainer
** sees identical rows. Tolerance: relative 1e-6 (the same arithmetic on the same bytes; it is
** expected to be bit-exact, a little slack only for BLAS threading).
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io_test.h"
#include "runtime/train/train.h"

#define STEPS 3

/* Replace the line of SRC that starts (after blanks) with KEY by REPL; DST gets the result. */
static int replace_line(char *dst, size_t n, const char *src, const char *key, const char *repl) {
  const char *p = src;
  while (*p) {
    const char *q = p;
    while (*q == ' ') q++;
    if (!strncmp(q, key, strlen(key))) {
      const char *e = strchr(p, '\n');
      snprintf(dst, n, "%.*s%s%s", (int)(p - src), src, repl, e ? e : "");
      return 0;
    }
    const char *e = strchr(p, '\n');
    if (!e) break;
    p = e + 1;
  }
  return -1;
}

static int run(const char *spec_text, const char *name, const char *out, double *loss) {
  dfl_spec *s = calloc(1, sizeof *s);
  int rc = dfl_spec_load_buffer(name, spec_text, strlen(spec_text), s);
  CHECK(rc == 0, "%s: the spec does not load", name);
  if (rc) { free(s); return rc; }
  dfl_train_opts o;
  memset(&o, 0, sizeof o);
  o.steps = STEPS;
  o.out_dir = out;
  o.quiet = o.no_eval = o.no_export = o.no_ckpt = 1;
  o.backend = DFL_TRAIN_BE_CPU;
  o.cpu_threads = 1;
  dfl_trainer *tr = calloc(1, sizeof *tr);
  rc = dfl_train_open(tr, s, &o);
  CHECK(rc == 0, "%s: dfl_train_open rc %d", name, rc);
  int opened = rc == 0;
  for (int i = 0; i < STEPS && rc == 0; i++) {
    dfl_step_stats st;
    rc = dfl_train_step(tr, &st);
    CHECK(rc == 0, "%s: step %d rc %d", name, i + 1, rc);
    loss[i] = st.loss;
  }
  if (opened) dfl_train_close(tr);
  free(tr);
  free(s);
  return rc;
}

int main(void) {
  uint64_t seed = io_seed("test_packed_train");
  char dir[512], cwd[1024], packed[1200], line[2048];
  io_tmpdir(dir, sizeof dir, "packed_train");
  if (!getcwd(cwd, sizeof cwd)) return 2;
  dfl_train_set_threads(1);

  /* The packed copy, as `dflc pack --vocab 8192` makes it. */
  dfl_dataset d;
  snprintf(packed, sizeof packed, "%s/nano_train.dflpack", dir);
  int rc = dfl_data_load("examples/data/nano_train.jsonl.gz", 8192, 0, DFL_BADROW_SKIP, stderr, &d);
  CHECK(rc == 0, "load nano_train");
  if (rc) return 1;
  CHECK(dfl_packed_write(packed, &d, 8192, stderr) == 0, "write %s", packed);
  dfl_data_free(&d);

  FILE *f = fopen("examples/nano.dfl", "r");
  if (!f) { fprintf(stderr, "run from the repository root (no examples/nano.dfl)\n"); return 2; }
  static char a[1 << 16], b[1 << 16], jsonl[1 << 16], pk[1 << 16];
  size_t n = fread(a, 1, sizeof a - 1, f);
  fclose(f);
  a[n] = 0;
  /* Absolute paths (the copies live in a temp directory), no eval file, a fresh data seed. */
  int bad = 0;
  snprintf(line, sizeof line, "  model = \"%s/examples/models/nano\"", cwd);
  bad |= replace_line(b, sizeof b, a, "model", line);
  bad |= replace_line(a, sizeof a, b, "eval ", "");
  snprintf(line, sizeof line, "  seed    = %llu", (unsigned long long)(seed % 1000000007u));
  bad |= replace_line(b, sizeof b, a, "seed    =", line);
  snprintf(line, sizeof line, "    dir   = \"%s/ckpt\"", dir);
  bad |= replace_line(a, sizeof a, b, "dir ", line);
  snprintf(line, sizeof line, "  train   = \"%s/examples/data/nano_train.jsonl.gz\"", cwd);
  bad |= replace_line(jsonl, sizeof jsonl, a, "train ", line);
  snprintf(line, sizeof line, "  train   = \"%s\"\n  format  = packed", packed);
  bad |= replace_line(pk, sizeof pk, a, "train ", line);
  CHECK(!bad, "examples/nano.dfl no longer has the lines this test edits");
  if (bad) return io_finish("test_packed_train");

  char name_j[1200], name_p[1200], out_j[1200], out_p[1200];
  snprintf(name_j, sizeof name_j, "%s/nano_jsonl.dfl", dir);
  snprintf(name_p, sizeof name_p, "%s/nano_packed.dfl", dir);
  snprintf(out_j, sizeof out_j, "%s/run_jsonl", dir);
  snprintf(out_p, sizeof out_p, "%s/run_packed", dir);
  double lj[STEPS] = {0}, lp[STEPS] = {0};
  int rj = run(jsonl, name_j, out_j, lj), rp = run(pk, name_p, out_p, lp);
  if (!rj && !rp) {
    for (int i = 0; i < STEPS; i++) {
      double rel = fabs(lj[i] - lp[i]) / fmax(fabs(lj[i]), 1e-30);
      printf("  step %d: loss jsonl %.9g packed %.9g (rel diff %.2g)\n", i + 1, lj[i], lp[i], rel);
      CHECK(isfinite(lj[i]) && lj[i] > 0 && rel <= 1e-6, "step %d: losses differ", i + 1);
    }
  }
  io_rmdir(dir);
  return io_finish("test_packed_train");
}
