/*
** test_pipeline_equiv: the evidence test. A 2-target + 2-drafter CPU pipeline (logical devices
** cpu0..cpu3) trains the nano example to the same per-step losses as one device processing the
** same global batches; so does a 2-replica colocated pipeline. Tolerance: 2e-5 relative on the
** loss and 1e-4 relative on the gradient norm: the replicas sum their gradients in a different
** order than one device does (fp32), and Adam turns that rounding into parameter differences of
** the same relative size, which the following steps' losses see. The replicas must end
** bit-identical, and with accum = 2 the loss must be normalised by the global sum of weights.
** The exporting run evaluates its drafter at the end: the eval line in metrics.jsonl is what
** `dflc eval` gives for the export, and better than a fresh drafter's.
*/
#include <math.h>

#include "runtime/pipeline/pipeline.h"
#include "runtime/train/train.h"
#include "tests/pipeline/common.h"

#define STEPS 4
#include "tests/pipeline/equiv.h"

static void pipe_run(const dfl_spec *s, trace *t, const char *what, int export) {
  dfl_pipe_opts o;
  dfl_pipe_result r;
  char dir[256];
  quiet_pipe_opts(&o, dir, sizeof dir, what, STEPS);
  o.no_export = !export;
  o.no_ckpt = !export;
  o.no_eval = !export;
  equiv_pipe(s, &o, t, what, &r);
  if (export) {
    char f[512];
    snprintf(f, sizeof f, "%s/drafter/model.safetensors", dir);
    CHECK(access(f, R_OK) == 0, "%s: no exported drafter at %s", what, f);
    snprintf(f, sizeof f, "%s/metrics.jsonl", dir);
    FILE *m = fopen(f, "r");
    CHECK(m, "no %s", f);
    char line[8192];
    int steps = 0, diags = 0, evals = 0;
    double eloss = 0, etau = 0;
    long long estep = -1, erows = -1;
    while (fgets(line, sizeof line, m)) {
      if (strstr(line, "\"eval\":true")) {
        evals++;
        CHECK(sscanf(line, "{\"eval\":true,\"step\":%lld,\"loss\":%lf", &estep, &eloss) == 2 &&
              strstr(line, "\"tau\":") && sscanf(strstr(line, "\"tau\":"), "\"tau\":%lf", &etau) == 1 &&
              strstr(line, "\"rows\":") && sscanf(strstr(line, "\"rows\":"), "\"rows\":%lld", &erows) == 1,
              "%s: eval line %.200s", what, line);
        continue;
      }
      steps += strstr(line, "\"loss\"") != NULL;
      diags += strstr(line, "\"verdict\"") != NULL && strstr(line, "\"hist\"") != NULL &&
               strstr(line, "\"mem_bytes\"") != NULL && strstr(line, "\"producer_rate\"") != NULL;
    }
    fclose(m);
    CHECK(steps == STEPS && diags >= 1, "%s: metrics.jsonl has %d step lines and %d diag lines", what, steps, diags);
    /* the end-of-run evaluation: the export's, as dflc eval computes it; a fresh drafter's is worse */
    dfl_dataset d;
    dfl_eval_stats es, fresh;
    CHECK(dfl_data_load_fmt(s->eval_path, s->format, s->target.vocab, s->seq_len, s->bad_rows, stderr, &d) == DFL_OK,
          "eval data");
    snprintf(f, sizeof f, "%s/drafter", dir);
    CHECK(dfl_eval_drafter(s, DFL_BE_CPU, f, &d, &es) == DFL_OK, "dflc eval's path on %s", f);
    CHECK(dfl_eval_drafter(s, DFL_BE_CPU, NULL, &d, &fresh) == DFL_OK, "a fresh drafter's evaluation");
    CHECK(evals == 1 && estep == STEPS && erows == d.n, "%s: %d eval lines, step %lld, %lld rows of %d", what, evals,
          estep, erows, d.n);
    CHECK(fabs(eloss - es.loss) <= 1e-5 * es.loss && fabs(etau - es.tau) <= 1e-5 * es.tau,
          "%s: end-of-run eval loss %.7g tau %.7g, dflc eval's %.7g %.7g", what, eloss, etau, es.loss, es.tau);
    CHECK(eloss < fresh.loss, "%s: eval loss %.5f not below a fresh drafter's %.5f", what, eloss, fresh.loss);
    printf("%s: end-of-run eval loss %.5f tau %.4f (%lld rows); the export through dflc eval's path %.5f %.4f; "
           "a fresh drafter %.5f %.4f\n", what, eloss, etau, erows, es.loss, es.tau, fresh.loss, fresh.tau);
    dfl_data_free(&d);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup");
  }
  printf("%s: %.2fs, verdict: %s\n", what, r.seconds, r.last_verdict);
}

/* the single device must also learn: a pipeline matching a flat curve would prove little */
static void compare_learning(const trace *a, const trace *b, const char *what) {
  compare(a, b, what);
  CHECK(a->loss[STEPS] < a->loss[1], "training does not lower the loss (%.4f -> %.4f)", a->loss[1], a->loss[STEPS]);
}

int main(void) {
  uint64_t seed = test_seed();
  static dfl_spec s;
  equiv_spec(&s, seed);
  /* the end-of-run evaluations (the run's, dflc eval's path, a fresh drafter's) on the eval file's
  ** first 16 rows: each greedy walk over all 128 takes about 30 s on 2 cores */
  char edir[256], epath[300], cmd[2048];
  tmp_dir(edir, sizeof edir, "equiv-eval");
  snprintf(epath, sizeof epath, "%s/eval16.jsonl", edir);
  snprintf(cmd, sizeof cmd, "mkdir -p '%s' && zcat '%s' | head -n 16 > '%s'", edir, s.eval_path, epath);
  CHECK(system(cmd) == 0, "%s", cmd);
  snprintf(s.eval_path, sizeof s.eval_path, "%s", epath);
  /* single device: the whole global batch (8 sequences) per micro-step */
  static trace one, split, rep;
  single(&s, &one, "single");
  /* 2 targets -> 2 drafters (4 sequences each), the example's queue */
  set_topology(&s, 2, 2);
  pipe_run(&s, &split, "split-2x2", 1);
  compare_learning(&one, &split, "split");
  /* 2 colocated replicas */
  set_topology(&s, 0, 2);
  pipe_run(&s, &rep, "replicated-2", 0);
  compare_learning(&one, &rep, "replicated");
  /* same N, same data: the two pipelines sum the same gradients in the same order */
  for (int i = 1; i <= STEPS; i++)
    CHECK(split.loss[i] == rep.loss[i], "step %d: split %.9g vs replicated %.9g: not bit-equal", i, split.loss[i],
          rep.loss[i]);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", edir);
  CHECK(system(cmd) == 0, "cleanup");
  printf("ok\n");
  return 0;
}
