/*
** checkpoint_run.c: the run a checkpoint root belongs to (checkpoint.h): ROOT/run.json written at the
** start of a run and compared on a resume (dfl_run_begin), the root's own checkpoints counted
** (dfl_ckpt_count) or moved aside by --restart, and metrics.jsonl cut back to a resumed step. The
** checkpoints themselves and the step directories are checkpoint.c's (checkpoint_internal.h).
*/
#include "runtime/io/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/io/checkpoint_internal.h"

/* The "step" of one metrics.jsonl line, or -1. */
static int64_t line_step(const char *line) {
  const char *k = strstr(line, "\"step\":");
  return k ? strtoll(k + 7, NULL, 10) : -1;
}

int dfl_ckpt_trim_metrics(const char *path, int64_t step) {
  FILE *in = fopen(path, "r");
  if (!in) return errno == ENOENT ? DFL_OK : DFL_EIO;   /* no file yet: nothing to trim */
  char tmp[DFL_PATH_MAX + 16];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *out = fopen(tmp, "w");
  if (!out) {
    fclose(in);
    fprintf(stderr, "dflc: cannot write %s: %s\n", tmp, strerror(errno));
    return DFL_EIO;
  }
  char *line = NULL;
  size_t cap = 0;
  int64_t dropped = 0;
  ssize_t k;
  int ok = 1;
  while ((k = getline(&line, &cap, in)) > 0) {
    if (line[k - 1] != '\n' || line_step(line) > step) { dropped++; continue; }   /* a torn last line, or after the checkpoint */
    ok &= fputs(line, out) >= 0;
  }
  free(line);
  fclose(in);
  ok &= fclose(out) == 0;
  if (!ok || rename(tmp, path) != 0) {
    fprintf(stderr, "dflc: cannot rewrite %s: %s\n", path, strerror(errno));
    unlink(tmp);
    return DFL_EIO;
  }
  (void)dropped;
  return DFL_OK;
}

/* ---- the run a checkpoint root belongs to ---- */

int dfl_ckpt_root_of(const dfl_spec *s, const char *out_dir, char *root, size_t n) {
  int k = !out_dir && s->ckpt_dir[0] ? snprintf(root, n, "%s", s->ckpt_dir) : snprintf(root, n, "%s/ckpt", out_dir);
  return k >= 0 && (size_t)k < n ? DFL_OK : DFL_ERR;
}

int dfl_ckpt_count(const char *root, int64_t *newest) {
  int64_t *steps;
  int ns = dfl_ckpt_list_steps(root, &steps), n = 0;
  char d[DFL_PATH_MAX], id[128];
  *newest = -1;
  for (int i = 0; i < ns; i++) {
    dfl_ckpt_step_dir(d, sizeof d, root, "", steps[i]);
    if (dfl_ckpt_of_run(d, id, sizeof id)) {
      n++;
      *newest = steps[i];
    }
  }
  free(steps);
  return n;
}

int dfl_ckpt_restart(const char *root, char *moved, size_t n) {
  char stamp[32], from[DFL_PATH_MAX + 256], to[2 * DFL_PATH_MAX + 256];
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  /* a second restart within the same second gets its own folder */
  for (int k = 1;; k++) {
    int w = k == 1 ? snprintf(moved, n, "%s/old-%s", root, stamp) : snprintf(moved, n, "%s/old-%s-%d", root, stamp, k);
    if (w < 0 || (size_t)w >= n) return DFL_ERR;
    if (mkdir(moved, 0777) == 0) break;
    if (errno != EEXIST || k > 99) {
      fprintf(stderr, "dflc: cannot create %s: %s\n", moved, strerror(errno));
      return DFL_EIO;
    }
  }
  DIR *d = opendir(root);
  if (!d) return DFL_EIO;
  struct dirent *e;
  int rc = DFL_OK;
  while ((e = readdir(d))) {
    const char *nm = e->d_name;
    if (strncmp(nm, "step-", 5) && strcmp(nm, "best") && strcmp(nm, "best.json") && strcmp(nm, "run.json")) continue;
    snprintf(from, sizeof from, "%s/%s", root, nm);
    snprintf(to, sizeof to, "%s/%s", moved, nm);
    if (rename(from, to)) {
      fprintf(stderr, "dflc: cannot move %s into %s: %s\n", from, moved, strerror(errno));
      rc = DFL_EIO;
    }
  }
  closedir(d);
  return rc;
}

/* FNV-1a of the spec file's bytes: whether the spec changed since the run started. */
static uint64_t file_hash(const char *path) {
  FILE *f = fopen(path, "rb");
  uint64_t h = 0xcbf29ce484222325ull;
  if (!f) return 0;
  int ch;
  while ((ch = getc(f)) != EOF) h = (h ^ (uint64_t)(unsigned char)ch) * 0x100000001b3ull;
  fclose(f);
  return h;
}

/* The values a resume compares: those the checkpoint cannot continue under (must), then those a
** resume may change (noted). */
static json_t *run_values(const dfl_spec *s, int64_t steps) {
  json_t *must = json_object(), *may = json_object(), *taps = json_array();
  for (int i = 0; i < s->n_taps; i++) json_array_append_new(taps, json_integer(s->taps[i]));
  json_object_set_new(must, "block_size", json_integer(s->block_size));
  json_object_set_new(must, "mask_token_id", json_integer(s->mask_token));
  json_object_set_new(must, "target_layer_ids", taps);
  json_object_set_new(must, "drafter.layers", json_integer(s->drafter.layers));
  json_object_set_new(must, "vocab", json_integer(s->target.vocab));
  if (steps > 0) json_object_set_new(may, "steps", json_integer(steps));
  json_object_set_new(may, "lr", json_real(s->lr));
  json_object_set_new(may, "warmup_steps", json_integer(s->warmup_steps));
  json_object_set_new(may, "schedule", json_integer(s->schedule));
  json_object_set_new(may, "weight_decay", json_real(s->weight_decay));
  json_object_set_new(may, "clip", json_real(s->clip));
  json_object_set_new(may, "batch", json_integer(s->batch));
  json_object_set_new(may, "accum", json_integer(s->accum));
  json_object_set_new(may, "seq_len", json_integer(s->seq_len));
  json_object_set_new(may, "anchors", json_integer(s->anchors));
  json_object_set_new(may, "gamma", json_real(s->gamma));
  return json_pack("{s:o,s:o}", "must_match", must, "may_change", may);
}

/* Compare one group; returns how many values differ (each printed on f with `what`). */
static int compare_values(json_t *was, json_t *now, FILE *f, const char *what, const char *ckpt) {
  const char *k;
  json_t *v;
  int n = 0;
  json_object_foreach(now, k, v) {
    json_t *w = json_object_get(was, k);
    if (!w || json_equal(w, v)) continue;
    char *a = json_dumps(w, JSON_ENCODE_ANY | JSON_REAL_PRECISION(6)), *b = json_dumps(v, JSON_ENCODE_ANY | JSON_REAL_PRECISION(6));
    if (f) fprintf(f, "%s%s: %s when %s was written, %s now\n", what, k, a ? a : "?", ckpt, b ? b : "?");
    free(a);
    free(b);
    n++;
  }
  return n;
}

static void parent_dir(const char *path, char *out, size_t n) {
  snprintf(out, n, "%s", path);
  size_t l = strlen(out);
  while (l > 1 && out[l - 1] == '/') out[--l] = 0;
  char *sl = strrchr(out, '/');
  if (!sl) snprintf(out, n, ".");
  else if (sl == out) out[1] = 0;
  else *sl = 0;
}

int dfl_run_begin(const char *root, const dfl_spec *s, int64_t steps, const char *resume_ckpt, FILE *log) {
  char f[DFL_PATH_MAX + 32], id[128] = "", started[64] = "", stamp[32], spec[DFL_PATH_MAX];
  json_error_t je;
  json_t *values = run_values(s, steps);
  uint64_t hash = file_hash(s->file);
  int rc = DFL_OK;
  if (resume_ckpt) {
    char croot[DFL_PATH_MAX];
    parent_dir(resume_ckpt, croot, sizeof croot);
    snprintf(f, sizeof f, "%s/run.json", croot);
    json_t *o = dfl_ckpt_is_file(f) ? json_load_file(f, 0, &je) : NULL;
    if (o) {
      json_t *v = json_object_get(o, "values"), *i = json_object_get(o, "id"), *st = json_object_get(o, "started");
      json_t *h = json_object_get(o, "spec_hash");
      if (json_is_string(i)) snprintf(id, sizeof id, "%s", json_string_value(i));
      if (json_is_string(st)) snprintf(started, sizeof started, "%s", json_string_value(st));
      int bad = compare_values(json_object_get(v, "must_match"), json_object_get(values, "must_match"), stderr,
                               "dflc: error: resume refused: ", resume_ckpt);
      if (bad) {
        fprintf(stderr, "  = help: %s was trained under another drafter definition; resume it with the spec it was "
                "trained with (%s), or start a fresh run (`--restart` moves its checkpoints aside)\n", resume_ckpt,
                json_is_string(json_object_get(o, "spec")) ? json_string_value(json_object_get(o, "spec")) : "see run.json");
        rc = DFL_EFORMAT;
      } else {
        int changed = compare_values(json_object_get(v, "may_change"), json_object_get(values, "may_change"), log,
                                     "note: resuming with a changed ", resume_ckpt);
        char hx[24];
        snprintf(hx, sizeof hx, "%016" PRIx64, hash);
        if (!changed && json_is_string(h) && strcmp(json_string_value(h), hx) && log)
          fprintf(log, "note: %s changed since the run started, in nothing a resume compares\n", s->file);
      }
      json_decref(o);
    }
  }
  if (rc == DFL_OK) {
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    if (!id[0]) {   /* a fresh run, or a checkpoint from before run.json: a new identity */
      strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
      snprintf(id, sizeof id, "%s-%ld", stamp, (long)getpid());
      strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", &tm);
    }
    if (!realpath(s->file, spec)) snprintf(spec, sizeof spec, "%s", s->file);
    char hx[24];
    snprintf(hx, sizeof hx, "%016" PRIx64, hash);
    json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:s,s:O}", "format", "dflc-run-1", "id", id, "started", started, "spec",
                          spec, "spec_hash", hx, "values", values);
    char tmp[DFL_PATH_MAX + 32];
    snprintf(f, sizeof f, "%s/run.json", root);
    snprintf(tmp, sizeof tmp, "%s/.run.json.tmp", root);
    if (dfl_mkdirs(root) || !o || json_dump_file(o, tmp, JSON_INDENT(2)) || rename(tmp, f)) {
      fprintf(stderr, "dflc: cannot write %s: %s\n", f, strerror(errno));
      rc = DFL_EIO;
    }
    json_decref(o);
  }
  json_decref(values);
  return rc;
}
