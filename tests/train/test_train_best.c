/*
** train_best: the best checkpoint by evaluation.
**   A run of 8 steps with a checkpoint and an evaluation every 2 steps and ckpt_keep = 1:
**   ROOT/best.json and the link ROOT/best name the checkpoint whose eval acceptance length
**   (metrics.jsonl "acceptance_length", the greedy decoder's walk) is the highest (the earliest of
**   equal ones), and that checkpoint exists although ckpt_keep = 1 pruned the other older ones.
**   Resumed to 12 steps with the record pointed at step 8 (an acceptance length no evaluation
**   reaches): the pruning keeps step 8, removes step 10, and the record stays at 8.
**   `dflc eval`'s path on ROOT/best (a checkpoint: its f32 params) gives the trainer's own
**   evaluation of that step (metrics.jsonl, 6 digits), accept included.
**   A fresh run into the same directory forgets the record (its metrics.jsonl starts over too).
** nano's data and target (the eval file's first 8 rows: the walk costs a block every few
** tokens), a 1-layer drafter (seed from the time, printed), the CPU backend.
*/
#include <math.h>
#include <sys/stat.h>
#include <time.h>

#include "runtime/io/checkpoint.h"
#include "train_test.h"

static int exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

/* acceptance length, tau and loss of each evaluation in metrics.jsonl by step (-1: none); the
** number of eval lines */
static int eval_taus(const char *path, double *acc, double *tau, double *loss, int max_step) {
  for (int i = 0; i <= max_step; i++) acc[i] = tau[i] = loss[i] = -1;
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[8192];
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    long long st;
    const char *t = strstr(line, "\"tau\":"), *l = strstr(line, "\"loss\":");
    const char *a = strstr(line, "\"acceptance_length\":");
    if (sscanf(line, "{\"eval\":true,\"step\":%lld", &st) != 1 || !t || !l || !a || st < 0 || st > max_step) continue;
    acc[st] = strtod(a + 20, NULL);
    tau[st] = strtod(t + 6, NULL);
    loss[st] = strtod(l + 7, NULL);
    n++;
  }
  fclose(f);
  return n;
}

int main(void) {
  const char *env_seed = getenv("DFL_TEST_SEED");
  uint64_t seed = env_seed ? strtoull(env_seed, NULL, 0) : (uint64_t)time(NULL);
  printf("train_best: seed %llu (DFL_TEST_SEED reproduces)\n", (unsigned long long)seed);
  char dir[256], run[300], root[320], p[400];
  if (make_tmpdir(dir, sizeof dir, "best")) return 1;
  snprintf(run, sizeof run, "%s/run", dir);
  snprintf(root, sizeof root, "%s/ckpt", run);
  /* nano's real data (its 128-token rows): the drafter learns a little, so the evaluations differ */
  dfl_spec s;
  /* the eval file's first 8 rows */
  char evp[340];
  snprintf(evp, sizeof evp, "%s/eval8.jsonl", dir);
  snprintf(p, sizeof p, "zcat examples/data/nano_eval.jsonl.gz | head -n 8 > '%s'", evp);
  if (system(p)) {
    printf("FAIL: %s\n", p);
    return 1;
  }
  if (small_spec(&s, "examples/data/nano_train.jsonl.gz", evp)) return 1;
  s.seq_len = 128;
  s.anchors = 8;
  s.init_seed = seed;
  s.seed = seed * 31 + 7;
  s.steps = 8;
  s.ckpt_every = 2;
  s.ckpt_keep = 1;
  s.lr = 1e-2;   /* big steps, so that the evaluations differ */
  dfl_train_opts o;
  memset(&o, 0, sizeof o);
  o.no_export = o.quiet = 1;
  o.out_dir = run;
  o.log = stdout;
  dfl_trainer *tr = calloc(1, sizeof *tr);
  CHECK(tr && dfl_train_open(tr, &s, &o) == DFL_OK, "open");
  CHECK(dfl_train_run(tr, NULL, NULL) == DFL_OK, "the run of 8 steps");
  dfl_train_close(tr);

  /* the record against metrics.jsonl: the highest acceptance length of the checkpointed
  ** evaluations (2, 4, 6, 8; step 0's has no checkpoint), the earliest of equal ones */
  double acc[13], tau[13], loss[13];
  snprintf(p, sizeof p, "%s/metrics.jsonl", run);
  CHECK(eval_taus(p, acc, tau, loss, 12) == 5, "5 evaluations (steps 0, 2, 4, 6, 8) in %s", p);
  int64_t want = -1;
  for (int st = 2; st <= 8; st += 2) {
    CHECK(acc[st] >= 1 && tau[st] >= 1, "eval at step %d in metrics.jsonl", st);
    if (want < 0 || acc[st] > acc[want]) want = st;
  }
  int64_t bs;
  double bt, bl;
  CHECK(dfl_ckpt_read_best(root, &bs, &bt, &bl) == 1, "%s/best.json", root);
  /* metrics.jsonl prints 6 digits: the record's step must hold the highest printed acceptance
  ** length, and no earlier evaluation a higher one */
  CHECK(bs >= 2 && bs <= 8 && bs % 2 == 0 && acc[bs] == acc[want] && fabs(bt - acc[bs]) <= 1e-5 * acc[bs],
        "best step %lld (accept %.6g), metrics say %lld (%.6g)", (long long)bs, bt, (long long)want, acc[want]);
  for (int st = 2; st < bs; st += 2) CHECK(acc[st] < acc[bs] + 1e-6, "step %d accept %.6g above the best's", st, acc[st]);
  char link[340], ck[DFL_PATH_MAX];
  snprintf(link, sizeof link, "%s/best", root);
  dfl_ckpt_meta m;
  CHECK(dfl_ckpt_resolve(link, ck, sizeof ck) == DFL_OK && dfl_ckpt_read_meta(ck, &m) == DFL_OK && m.step == bs,
        "%s resolves to the checkpoint of step %lld", link, (long long)bs);
  for (int st = 2; st < 8; st += 2) {
    snprintf(p, sizeof p, "%s/step-%08d", root, st);
    CHECK(exists(p) == (st == bs), "step %d %s (best %lld, ckpt_keep 1)", st, exists(p) ? "kept" : "pruned",
          (long long)bs);
  }
  printf("evaluations: tau %.4f %.4f %.4f %.4f, accept %.4f %.4f %.4f %.4f at steps 2..8; best step %lld\n", tau[2],
         tau[4], tau[6], tau[8], acc[2], acc[4], acc[6], acc[8], (long long)bs);

  /* dflc eval's path on the best checkpoint: the trainer's evaluation of that step */
  dfl_dataset d;
  dfl_eval_stats es;
  CHECK(dfl_data_load_fmt(s.eval_path, s.format, s.target.vocab, s.seq_len, s.bad_rows, stderr, &d) == DFL_OK,
        "eval data");
  CHECK(dfl_eval_drafter(&s, DFL_BE_CPU, link, &d, &es) == DFL_OK, "evaluate %s", link);
  CHECK(fabs(es.tau - tau[bs]) <= 1e-5 * tau[bs] && fabs(es.loss - loss[bs]) <= 1e-5 * loss[bs] &&
        fabs(es.accept - acc[bs]) <= 1e-5 * acc[bs],
        "%s: loss %.7g tau %.7g accept %.7g, the run's step %lld evaluation %.7g %.7g %.7g", link, es.loss, es.tau,
        es.accept, (long long)bs, loss[bs], tau[bs], acc[bs]);
  dfl_data_free(&d);

  /* resumed to 12 steps, the record at step 8 with an acceptance length no evaluation reaches
  ** (accept <= block size) */
  CHECK(dfl_ckpt_mark_best(root, 8, 99.0, 99.0, 1.0) == DFL_OK, "mark step 8");
  o.resume = root;
  o.steps = 12;
  CHECK(dfl_train_open(tr, &s, &o) == DFL_OK && tr->best_step == 8, "resume keeps the record (best %lld)",
        (long long)tr->best_step);
  CHECK(dfl_train_run(tr, NULL, NULL) == DFL_OK, "steps 9..12");
  dfl_train_close(tr);
  CHECK(dfl_ckpt_read_best(root, &bs, &bt, &bl) == 1 && bs == 8 && bt == 99.0, "the record moved to %lld", (long long)bs);
  snprintf(p, sizeof p, "%s/step-00000008", root);
  CHECK(exists(p), "pruning removed the best checkpoint (step 8)");
  snprintf(p, sizeof p, "%s/step-00000010", root);
  CHECK(!exists(p), "step 10 not pruned with ckpt_keep 1");
  snprintf(p, sizeof p, "%s/step-00000012", root);
  CHECK(exists(p), "step 12 written");

  /* a fresh run into the same directory starts the record over */
  o.resume = NULL;
  o.steps = 0;
  CHECK(dfl_train_open(tr, &s, &o) == DFL_OK, "fresh open");
  CHECK(!exists(link) && dfl_ckpt_read_best(root, &bs, &bt, &bl) == 0, "a fresh run kept the old run's record");
  dfl_train_close(tr);
  free(tr);
  return finish_test("train_best", dir);
}
