/*
** train_resume: checkpoints resume bit-exactly and are written atomically.
**   A: train 2k optimizer steps straight through.
**   B: train k steps, checkpoint; C: resume from B's checkpoint root and train k more.
** The losses of C's steps and every persistent tensor at the end (params, fp32 masters, Adam
** moments, optimizer state) must equal A's bit for bit. The data is small enough that the run
** crosses an epoch boundary (new shuffled order), with gradient accumulation 2.
** Atomicity: a leftover .tmp-step-* directory (a crash mid-write) and a step-* directory without
** trainer.json are ignored by resume, and a save over a stale temp dir succeeds. A checkpoint of
** another spec is refused. D: a checkpoint written with accum = 1 (whose gradient accumulators are
** left holding the last step's gradients) resumed with accum = 2 starts from zero gradients.
** A damaged trainer.json (rng or seed not hex words, an all-zero rng, a "data" record that is not
** two positive integers) is refused. E: resuming on other data (two more rows) is refused, naming
** both row counts; the checkpoint records the data's rows and tokens.
** Data is random (seed from the time, printed).
*/
#include <math.h>
#include <sys/stat.h>
#include <time.h>

#include "runtime/io/checkpoint.h"
#include "train_test.h"

#define K 3

/* The whole file, NUL-terminated; NULL when unreadable. */
static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "r");
  char *b = f ? calloc(1 << 20, 1) : NULL;
  *n = b ? fread(b, 1, (1 << 20) - 1, f) : 0;
  if (f) fclose(f);
  return b;
}

/* Writes text[0, pre) + mid + rest to the checkpoint's trainer.json tj and reads its meta: the
** status, and what it printed in *msg. */
static int meta_from(const char *tj, const char *ck, const char *text, size_t pre, const char *mid, const char *rest,
                     char **msg) {
  FILE *f = fopen(tj, "w");
  if (!f) return -1;
  fprintf(f, "%.*s%s%s", (int)pre, text, mid, rest);
  fclose(f);
  dfl_ckpt_meta m;
  stderr_cap c;
  cap_begin(&c);
  int rc = dfl_ckpt_read_meta(ck, &m);
  *msg = cap_end(&c);
  return rc;
}

static int run_steps(dfl_trainer *tr, int n, double *loss) {
  dfl_step_stats st;
  for (int i = 0; i < n; i++) {
    if (dfl_train_step(tr, &st)) return 1;
    loss[i] = st.loss;
  }
  return 0;
}

/* Non-zero values in the gradient accumulators (and how many accumulators there are). */
static int nonzero_grads(dfl_trainer *tr, int *ngrad) {
  int nz = 0, ng = 0;
  for (int i = 0; i < tr->tg.g.nt; i++)
    if (tr->tg.g.t[i].kind == DFL_T_GRAD) {
      ng++;
      int64_t n = dfl_tensor_numel(&tr->tg.g.t[i]);
      const float *x = dfl_cpu_f32(&tr->cpu, i);
      for (int64_t e = 0; e < n; e++) nz += x[e] != 0;
    }
  if (ngrad) *ngrad = ng;
  return nz;
}

static int exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

int main(void) {
  uint64_t seed = (uint64_t)time(NULL);
  printf("train_resume: seed %llu\n", (unsigned long long)seed);
  char dir[256], data[300], da[300], db[300], root[320], p[400];
  if (make_tmpdir(dir, sizeof dir, "resume")) return 1;
  snprintf(data, sizeof data, "%s/train.jsonl", dir);
  snprintf(da, sizeof da, "%s/a", dir);
  snprintf(db, sizeof db, "%s/b", dir);
  snprintf(root, sizeof root, "%s/ckpt", db);
  dfl_rng r;
  dfl_rng_seed(&r, seed);
  if (write_random_jsonl(data, 9, &r, 8192)) return 1;

  dfl_spec s;
  if (small_spec(&s, data, NULL)) return 1;
  s.init_seed = seed;
  s.seed = seed * 31 + 7;
  dfl_train_opts o;
  memset(&o, 0, sizeof o);
  o.no_eval = o.no_export = 1;
  o.log = stdout;
  dfl_trainer *tr = calloc(1, sizeof *tr);

  /* A: 2k steps straight. */
  double la[2 * K], lb[K], lc[K];
  o.out_dir = da;
  if (dfl_train_open(tr, &s, &o) != DFL_OK) { printf("FAIL: open A\n"); return 1; }
  CHECK(tr->train.n == 9, "9 rows loaded, got %d", tr->train.n);
  CHECK(run_steps(tr, 2 * K, la) == 0, "steps of A");
  CHECK(tr->epoch >= 1, "the run crosses an epoch boundary (epoch %lld)", (long long)tr->epoch);
  int nt = tr->tg.g.nt;
  float **snap = train_snapshot(tr);
  dfl_train_close(tr);
  for (int i = 0; i < 2 * K; i++) printf("A step %d loss %.7f\n", i + 1, la[i]);
  CHECK(isfinite(la[0]) && la[0] > 1.0, "a fresh drafter has a large loss (%g)", la[0]);

  /* B: k steps and a checkpoint. */
  o.out_dir = db;
  if (dfl_train_open(tr, &s, &o) != DFL_OK) { printf("FAIL: open B\n"); return 1; }
  CHECK(run_steps(tr, K, lb) == 0, "steps of B");
  CHECK(dfl_train_checkpoint(tr) == DFL_OK, "checkpoint B");
  printf("checkpoint: %s\n", tr->last_ckpt);
  dfl_train_close(tr);
  for (int i = 0; i < K; i++) CHECK(lb[i] == la[i], "B step %d loss %.9g != A %.9g", i + 1, lb[i], la[i]);

  /* A crash while writing a later checkpoint: a temp dir with a half-written state, and a
  ** step-* directory without trainer.json. Resuming from the root must take step K. */
  snprintf(p, sizeof p, "%s/.tmp-step-%08d", root, K + 1);
  mkdir(p, 0777);
  snprintf(p, sizeof p, "%s/.tmp-step-%08d/state.safetensors", root, K + 1);
  FILE *f = fopen(p, "w");
  fputs("garbage", f);
  fclose(f);
  snprintf(p, sizeof p, "%s/step-%08d", root, K + 2);
  mkdir(p, 0777);
  char resolved[DFL_PATH_MAX];
  CHECK(dfl_ckpt_resolve(root, resolved, sizeof resolved) == DFL_OK && strstr(resolved, "step-00000003"),
        "resolve picks the newest complete checkpoint, got %s", resolved);
  rmdir(p);

  /* C: resume and finish. */
  o.resume = root;
  if (dfl_train_open(tr, &s, &o) != DFL_OK) { printf("FAIL: open C\n"); return 1; }
  CHECK(tr->step == K, "resumed at step %lld", (long long)tr->step);
  CHECK(run_steps(tr, K, lc) == 0, "steps of C");
  for (int i = 0; i < K; i++) CHECK(lc[i] == la[K + i], "C step %d loss %.9g != A %.9g", K + i + 1, lc[i], la[K + i]);
  int mism = 0, compared = 0;
  const dfl_graph *g = &tr->tg.g;
  for (int i = 0; i < nt && i < g->nt; i++) {
    if (!snap[i]) continue;
    int64_t n = dfl_tensor_numel(&g->t[i]);
    float *x = malloc(sizeof(float) * n);
    dfl_cpu_get_f(&tr->cpu, i, x, n);
    compared++;
    if (memcmp(x, snap[i], sizeof(float) * n)) {
      if (mism++ < 5) printf("FAIL: tensor %s differs after resume\n", g->t[i].name);
    }
    free(x);
  }
  CHECK(mism == 0 && compared > 10, "%d of %d persistent tensors differ", mism, compared);

  /* A stale temp dir of the step about to be saved does not stop the save. */
  snprintf(p, sizeof p, "%s/.tmp-step-%08d", root, 2 * K);
  mkdir(p, 0777);
  snprintf(p, sizeof p, "%s/.tmp-step-%08d/junk", root, 2 * K);
  f = fopen(p, "w");
  fclose(f);
  tr->spec.ckpt_keep = 1;
  CHECK(dfl_train_checkpoint(tr) == DFL_OK, "save over a stale temp dir");
  snprintf(p, sizeof p, "%s/.tmp-step-%08d", root, 2 * K);
  CHECK(!exists(p), "the temp dir is gone after the save");
  snprintf(p, sizeof p, "%s/step-%08d/trainer.json", root, 2 * K);
  CHECK(exists(p), "step %d saved", 2 * K);
  snprintf(p, sizeof p, "%s/step-%08d", root, K);
  CHECK(!exists(p), "ckpt_keep = 1 pruned step %d", K);
  dfl_ckpt_meta m;
  CHECK(dfl_ckpt_read_meta(tr->last_ckpt, &m) == DFL_OK && m.step == 2 * K && m.cursor == tr->cursor,
        "meta of the last checkpoint");
  dfl_train_close(tr);

  /* A checkpoint of another spec (different drafter width) is refused with a message. */
  dfl_spec s2 = s;
  s2.drafter.intermediate = 128;
  stderr_cap cap;
  cap_begin(&cap);
  int rc = dfl_train_open(tr, &s2, &o);
  char *msg = cap_end(&cap);
  CHECK(rc != DFL_OK, "resuming with another spec is refused");
  CHECK(msg && strstr(msg, "different spec"), "the refusal says why: %s", msg ? msg : "");
  free(msg);
  if (rc == DFL_OK) dfl_train_close(tr);

  /* D: with accum = 1 AdamW leaves the last step's gradients in the accumulators (their single
  ** writers overwrite them next step), so a checkpoint holds them; resumed with accum = 2 (the
  ** spec's shapes are unchanged, so the checkpoint is accepted) they must start at zero. */
  char dd[300], rootd[320];
  snprintf(dd, sizeof dd, "%s/d", dir);
  snprintf(rootd, sizeof rootd, "%s/ckpt", dd);
  dfl_spec s1 = s;
  s1.accum = 1;
  o.out_dir = dd;
  o.resume = NULL;
  double ld[K];
  if (dfl_train_open(tr, &s1, &o) != DFL_OK) { printf("FAIL: open D\n"); return 1; }
  CHECK(run_steps(tr, K, ld) == 0 && dfl_train_checkpoint(tr) == DFL_OK, "steps and checkpoint of D");
  int ngrad = 0, nz_before = nonzero_grads(tr, &ngrad);
  CHECK(ngrad > 3 && nz_before > 100, "accum 1 keeps gradients after the optimizer (%d non-zero)", nz_before);
  dfl_train_close(tr);
  dfl_spec s3 = s1;
  s3.accum = 2;
  o.resume = rootd;
  if (dfl_train_open(tr, &s3, &o) != DFL_OK) { printf("FAIL: open D resumed\n"); return 1; }
  int nz_after = nonzero_grads(tr, NULL);
  CHECK(nz_after == 0, "gradient accumulators start at zero after a resume (%d non-zero)", nz_after);
  dfl_train_close(tr);

  /* A damaged trainer.json: the anchors' RNG words must be hex and not all zero, else the resume
  ** would draw from another stream (all zero: xoshiro's fixed point) without a word. D's checkpoint
  ** meta, the rng array's first word or the seed replaced, then all four rng words zero. */
  {
    char tj[DFL_PATH_MAX + 32], ck[DFL_PATH_MAX];
    CHECK(dfl_ckpt_resolve(rootd, ck, sizeof ck) == DFL_OK, "resolve D's checkpoint");
    snprintf(tj, sizeof tj, "%s/trainer.json", ck);
    size_t nr = 0;
    char *orig = slurp(tj, &nr);
    CHECK(orig && strstr(orig, "\"rng\": [") && strstr(orig, "\"seed\": \""), "read %s", tj);
    /* {what to find, its replacement, up to where the original resumes (NULL: right after it)} */
    static const char *bad[][3] = {{"\"rng\": [", "\"rng\": [\"zz\",", ","},
                                   {"\"seed\": \"", "\"seed\": \"x", NULL},
                                   {"\"rng\": [", "\"rng\": [\"11111111111111111\",", ","},
                                   {"\"rng\": [", "\"rng\": [\"0\", \"0\", \"0\", \"0\"", "]"}};
    for (int k = 0; orig && k < 4; k++) {
      const char *at = strstr(orig, bad[k][0]), *rest = at ? at + strlen(bad[k][0]) : NULL;
      if (rest && bad[k][2]) rest = strstr(rest, bad[k][2]) + (bad[k][2][0] == ',');
      char *msg = NULL;
      int r2 = rest ? meta_from(tj, ck, orig, (size_t)(at - orig), bad[k][1], rest, &msg) : -1;
      CHECK(r2 == DFL_EFORMAT && msg && strstr(msg, "must be hex words"), "damaged meta %d accepted (rc %d): %s", k, r2,
            msg ? msg : "");
      free(msg);
    }
    /* the data record: present, and refused when damaged */
    const char *dat = orig ? strstr(orig, "\"data\": {") : NULL;
    CHECK(dat != NULL, "%s records the training data's size", tj);
    if (dat) {
      char *dmsg = NULL;
      const char *rest = strchr(dat, '}') + 1;
      int r2 = meta_from(tj, ck, orig, (size_t)(dat - orig), "\"data\": {\"rows\": -1, \"tokens\": 5}", rest, &dmsg);
      CHECK(r2 == DFL_EFORMAT && dmsg && strstr(dmsg, "positive integers"), "a damaged data record accepted (rc %d): %s",
            r2, dmsg ? dmsg : "");
      free(dmsg);
    }
    char *msg = NULL;
    CHECK(orig && meta_from(tj, ck, orig, nr, "", "", &msg) == DFL_OK, "the restored trainer.json reads: %s",
          msg ? msg : "");
    free(msg);
    free(orig);
  }

  /* E: other data (the same random rows and two more) under the checkpoint of B: refused, the
  ** message naming both sizes; nothing trains. */
  {
    char other[320];
    snprintf(other, sizeof other, "%s/other.jsonl", dir);
    dfl_rng r3;
    dfl_rng_seed(&r3, seed);
    CHECK(write_random_jsonl(other, 11, &r3, 8192) == 0, "write %s", other);
    dfl_spec s4 = s;
    snprintf(s4.train_path, sizeof s4.train_path, "%s", other);
    o.out_dir = db;
    o.resume = root;
    stderr_cap c4;
    cap_begin(&c4);
    int r4 = dfl_train_open(tr, &s4, &o);
    char *m4 = cap_end(&c4);
    CHECK(r4 == DFL_EFORMAT && m4 && strstr(m4, "trained on data of 9 rows") && strstr(m4, "has 11 rows"),
          "resuming on other data: rc %d: %s", r4, m4 ? m4 : "");
    free(m4);
    if (r4 == DFL_OK) dfl_train_close(tr);
  }

  for (int i = 0; i < nt; i++) free(snap[i]);
  free(snap);
  free(tr);
  return finish_test("train_resume", dir);
}
