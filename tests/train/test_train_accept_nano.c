/*
** train_accept_nano: the decoder's walk through the real eval graph, end to end on the CPU.
**   1. examples/nano.dfl trained for 50 steps (its export in the run directory): enough for the
**      drafter to accept tokens (29 to 42 more tokens than its ~725 blocks on the 8 rows, 3 seeds
**      measured), in a quarter of the 200 steps this test first took (90 s of a loaded 2-core run).
**   2. On the eval file's first 8 rows, the walk with the spec's graph (16 anchor slots per row,
**      each row's window up to 16) and with a graph of 1 anchor slot (one block per row and round:
**      the walk as a decoder runs it) count the same tokens and blocks: a block's result depends on
**      its anchor only, so the windows change nothing. The drafter accepts tokens (tokens > blocks),
**      so the two walks take the same nontrivial path.
**   3. `dflc eval` on those rows prints tau, accept and the agreement line; its JSON's
**      acceptance_length is the walk of step 2, and the agreement is a fraction of the
**      supervised tokens (nano's data is the target's greedy output: at least 98% agree).
** Seed from the time (printed).
*/
#include <jansson.h>
#include <math.h>
#include <time.h>

#include "runtime/train/accept.h"
#include "train_test.h"

#define STEPS 50
#define ROWS 8

/* The walk over d with the exported drafter, on an eval graph of `anchors` slots per row. */
static int walk_with(const dfl_spec *s0, int anchors, const char *drafter, const dfl_dataset *d, dfl_eval_stats *es) {
  dfl_spec s = *s0;
  s.anchors = anchors;
  dfl_evaluator *ev = calloc(1, sizeof *ev);
  int rc = ev ? dfl_eval_open_on(ev, &s, DFL_BE_CPU) : DFL_ENOMEM;
  if (rc == DFL_OK) rc = dfl_be_load_weights(&ev->be, &s, drafter);
  memset(es, 0, sizeof *es);
  if (rc == DFL_OK) rc = dfl_eval_accept(ev, d, 0, es);
  if (ev && ev->ready) dfl_eval_close(ev);
  free(ev);
  return rc;
}

int main(void) {
  uint64_t seed = (uint64_t)time(NULL);
  printf("train_accept_nano: seed %llu\n", (unsigned long long)seed);
  char dir[256], path[300], drafter[300], cmd[1400];
  if (make_tmpdir(dir, sizeof dir, "accept")) return 1;
  dfl_spec s;
  if (dfl_spec_load("examples/nano.dfl", &s) != DFL_OK) {
    printf("FAIL: examples/nano.dfl does not load\n");
    return 1;
  }
  s.seed = seed;
  s.init_seed = seed ^ 0x5eed;
  dfl_train_opts o;
  memset(&o, 0, sizeof o);
  o.steps = STEPS;
  o.out_dir = dir;
  o.cpu_threads = 2;
  o.no_eval = 1;   /* the run's own evaluations: train_best */
  o.quiet = 1;
  dfl_trainer *tr = calloc(1, sizeof *tr);
  time_t t0 = time(NULL);
  if (!tr || dfl_train_open(tr, &s, &o) != DFL_OK) {
    printf("FAIL: open\n");
    return 1;
  }
  CHECK(dfl_train_run(tr, NULL, NULL) == DFL_OK, "%d steps of examples/nano.dfl and the export", STEPS);
  dfl_train_close(tr);
  free(tr);
  printf("run: %lds\n", (long)(time(NULL) - t0));
  snprintf(drafter, sizeof drafter, "%s/drafter", dir);

  /* the eval file's first rows */
  snprintf(path, sizeof path, "%s/eval%d.jsonl", dir, ROWS);
  snprintf(cmd, sizeof cmd, "zcat '%s' | head -n %d > '%s'", s.eval_path, ROWS, path);
  CHECK(system(cmd) == 0, "%s", cmd);
  dfl_dataset d;
  memset(&d, 0, sizeof d);
  CHECK(dfl_data_load(path, s.target.vocab, s.seq_len, DFL_BADROW_REFUSE, stderr, &d) == DFL_OK && d.n == ROWS,
        "%s: %d rows", path, ROWS);

  dfl_eval_stats wide, one;
  t0 = time(NULL);
  CHECK(walk_with(&s, s.anchors, drafter, &d, &wide) == DFL_OK, "the walk, %d anchor slots", s.anchors);
  printf("walk, %d slots per row: %lld tokens / %lld blocks = %.4f in %lld rounds\n", s.anchors,
         (long long)wide.accept_tokens, (long long)wide.accept_blocks, wide.accept, (long long)wide.accept_rounds);
  CHECK(walk_with(&s, 1, drafter, &d, &one) == DFL_OK, "the walk, 1 anchor slot");
  printf("walk, 1 slot per row: %lld tokens / %lld blocks = %.4f in %lld rounds (%llds for both)\n",
         (long long)one.accept_tokens, (long long)one.accept_blocks, one.accept, (long long)one.accept_rounds,
         (long long)(time(NULL) - t0));
  CHECK(wide.accept_tokens == one.accept_tokens && wide.accept_blocks == one.accept_blocks,
        "windows of %d: %lld / %lld, one block per round: %lld / %lld", s.anchors, (long long)wide.accept_tokens,
        (long long)wide.accept_blocks, (long long)one.accept_tokens, (long long)one.accept_blocks);
  CHECK(one.accept_rounds * ROWS >= one.accept_blocks, "one slot per row: a block per row and round (%lld rounds)",
        (long long)one.accept_rounds);
  CHECK(wide.accept_rounds < one.accept_rounds, "windows take fewer rounds (%lld vs %lld)",
        (long long)wide.accept_rounds, (long long)one.accept_rounds);
  CHECK(wide.accept_tokens > wide.accept_blocks, "the drafter accepts tokens after %d steps (%lld tokens, %lld blocks)",
        STEPS, (long long)wide.accept_tokens, (long long)wide.accept_blocks);
  CHECK(wide.accept >= 1.0 && wide.accept <= s.block_size, "accept %.3f within [1, B]", wide.accept);

  /* the CLI on the same rows */
  const char *bin = getenv("DFL_BINARY_DIR");
  if (!bin) {
    printf("FAIL: DFL_BINARY_DIR is not set (run under ctest)\n");
    failures++;
  } else {
    snprintf(cmd, sizeof cmd, "'%s/dflc' eval examples/nano.dfl --drafter '%s' --data '%s' --cpu", bin, drafter, path);
    FILE *p = popen(cmd, "r");
    char line[4096];
    double accept = -1, tau = -1, agree = -1;
    int saw_eval = 0, saw_agree = 0;
    long long atok = -1;
    while (p && fgets(line, sizeof line, p)) {
      fputs(line, stdout);
      if (!strncmp(line, "eval  ", 6) && strstr(line, "  tau ") && strstr(line, "  accept ")) saw_eval = 1;
      if (!strncmp(line, "agreement ", 10)) saw_agree = 1;
      json_t *j = json_loads(line, 0, NULL);
      if (j && json_is_number(json_object_get(j, "acceptance_length"))) {
        accept = json_number_value(json_object_get(j, "acceptance_length"));
        tau = json_number_value(json_object_get(j, "tau"));
        agree = json_number_value(json_object_get(j, "agreement"));
        atok = json_integer_value(json_object_get(j, "agreement_tokens"));
      }
      json_decref(j);
    }
    CHECK(p && pclose(p) == 0, "%s succeeds", cmd);
    CHECK(saw_eval, "an eval line with tau and accept");
    CHECK(saw_agree, "an agreement line");
    CHECK(fabs(accept - wide.accept) <= 1e-5 * wide.accept, "dflc eval acceptance_length %.7g, the walk %.7g", accept,
          wide.accept);
    CHECK(tau >= 1.0 && tau <= s.block_size, "tau %.4f within [1, B]", tau);
    int64_t sup = 0;   /* supervised positions p >= 1 of the rows as the graph sees them */
    for (int r = 0; r < d.n; r++)
      for (int64_t i = d.off[r] + 1; i < d.off[r + 1] && i - d.off[r] < s.seq_len; i++) sup += d.mask[i] != 0;
    CHECK(atok == sup, "the agreement counts the %lld supervised tokens (%lld)", (long long)sup, atok);
    CHECK(agree >= DFL_AGREE_GREEDY && agree <= 1.0, "nano's data is the target's greedy output: agreement %.4f", agree);
  }
  dfl_data_free(&d);
  return finish_test("train_accept_nano", dir);
}
