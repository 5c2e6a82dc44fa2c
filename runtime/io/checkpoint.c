/*
** checkpoint.c: atomic training checkpoints (see checkpoint.h for the layout): a checkpoint's state and
** trainer.json, written and read back, and the step directories of a root (listing, pruning, the best,
** resolving a path). The run a root belongs to (run.json, a restart, metrics.jsonl) is checkpoint_run.c.
*/
#include "runtime/io/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/io/checkpoint_internal.h"
#include "runtime/io/safetensors.h"

static const char *kind_prefix(dfl_tkind k) {
  switch (k) {
  case DFL_T_PARAM: return "param";
  case DFL_T_STATE: return "state";
  case DFL_T_GRAD: return "grad";
  case DFL_T_OUTPUT: return "output";
  default: return NULL;   /* inputs, frozen weights, activations are not saved */
  }
}

static int is_int_dtype(dfl_dtype d) { return d == DFL_I32 || d == DFL_I64; }

int dfl_mkdirs(const char *dir) {
  char buf[DFL_PATH_MAX];
  if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) return DFL_ERR;
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, 0777) && errno != EEXIST) return DFL_EIO;
    *p = '/';
  }
  if (mkdir(buf, 0777) && errno != EEXIST) return DFL_EIO;
  return DFL_OK;
}

int dfl_rm_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return errno == ENOENT ? DFL_OK : DFL_EIO;
  struct dirent *e;
  char p[DFL_PATH_MAX + 256];
  int rc = DFL_OK;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (unlink(p)) rc = DFL_EIO;
  }
  closedir(d);
  if (rmdir(dir)) rc = DFL_EIO;
  return rc;
}

/* Durability: the rename is only atomic for readers if the bytes behind it reached the disk. */
static void fsync_path(const char *p) {
  int fd = open(p, O_RDONLY);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int dfl_ckpt_is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* step-NNNNNNNN directories of root, ascending; returns the count (caller frees *steps). */
int dfl_ckpt_list_steps(const char *root, int64_t **steps) {
  *steps = NULL;
  DIR *d = opendir(root);
  if (!d) return 0;
  int n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    char *end;
    if (strncmp(e->d_name, "step-", 5) || e->d_name[5] < '0' || e->d_name[5] > '9') continue;
    long long v = strtoll(e->d_name + 5, &end, 10);
    if (*end) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 16;
      int64_t *ns = realloc(*steps, cap * sizeof **steps);
      if (!ns) break;
      *steps = ns;
    }
    (*steps)[n++] = v;
  }
  closedir(d);
  for (int i = 1; i < n; i++)   /* few entries: insertion sort */
    for (int j = i; j > 0 && (*steps)[j - 1] > (*steps)[j]; j--) {
      int64_t t = (*steps)[j]; (*steps)[j] = (*steps)[j - 1]; (*steps)[j - 1] = t;
    }
  return n;
}

/* The "id" of root/run.json into id ("" when root has none: a run started by a library caller,
** or before run.json existed). */
static void root_run_id(const char *root, char *id, size_t n) {
  char f[DFL_PATH_MAX + 32];
  json_error_t je;
  snprintf(f, sizeof f, "%s/run.json", root);
  id[0] = 0;
  json_t *o = dfl_ckpt_is_file(f) ? json_load_file(f, 0, &je) : NULL;
  json_t *v = o ? json_object_get(o, "id") : NULL;
  if (json_is_string(v)) snprintf(id, n, "%s", json_string_value(v));
  json_decref(o);
}

/* A checkpoint the trainer wrote: a directory with its trainer.json and state.safetensors; its
** "run" into id ("" when it has none). 0 for anything else (a folder named step-N by hand). */
int dfl_ckpt_of_run(const char *dir, char *id, size_t n) {
  char f[DFL_PATH_MAX + 32];
  json_error_t je;
  snprintf(f, sizeof f, "%s/state.safetensors", dir);
  if (!dfl_ckpt_is_file(f)) return 0;
  snprintf(f, sizeof f, "%s/trainer.json", dir);
  if (!dfl_ckpt_is_file(f)) return 0;
  json_t *o = json_load_file(f, 0, &je);
  json_t *fmt = o ? json_object_get(o, "format") : NULL, *v = o ? json_object_get(o, "run") : NULL;
  int ok = json_is_string(fmt) && !strcmp(json_string_value(fmt), DFL_CKPT_FORMAT);
  id[0] = 0;
  if (json_is_string(v)) snprintf(id, n, "%s", json_string_value(v));
  json_decref(o);
  return ok;
}

void dfl_ckpt_step_dir(char *out, size_t len, const char *root, const char *prefix, int64_t step) {
  snprintf(out, len, "%s/%sstep-%08" PRId64, root, prefix, step);
}

static int write_meta(const char *path, const dfl_graph *g, const int *params, int n_params,
                      const dfl_ckpt_meta *m, const char *run) {
  json_t *o = json_object(), *pl = json_array(), *rng = json_array();
  char hex[24];
  for (int i = 0; i < 4; i++) {
    snprintf(hex, sizeof hex, "%016" PRIx64, m->rng[i]);
    json_array_append_new(rng, json_string(hex));
  }
  for (int i = 0; i < n_params; i++) json_array_append_new(pl, json_string(g->t[params[i]].name));
  snprintf(hex, sizeof hex, "%016" PRIx64, m->seed);
  json_object_set_new(o, "format", json_string(DFL_CKPT_FORMAT));
  json_object_set_new(o, "step", json_integer(m->step));
  json_object_set_new(o, "steps_total", json_integer(m->steps_total));
  json_object_set_new(o, "epoch", json_integer(m->epoch));
  json_object_set_new(o, "cursor", json_integer(m->cursor));
  json_object_set_new(o, "rng", rng);
  json_object_set_new(o, "seed", json_string(hex));
  json_object_set_new(o, "tokens_seen", json_real(m->tokens_seen));
  if (m->data_rows > 0)
    json_object_set_new(o, "data", json_pack("{s:I,s:I}", "rows", (json_int_t)m->data_rows, "tokens",
                                             (json_int_t)m->data_tokens));
  json_object_set_new(o, "spec", json_string(m->spec));
  if (run[0]) json_object_set_new(o, "run", json_string(run));
  json_object_set_new(o, "params", pl);
  int rc = json_dump_file(o, path, JSON_INDENT(2)) ? DFL_EIO : DFL_OK;
  json_decref(o);
  return rc;
}

int dfl_ckpt_save(const char *root, const dfl_graph *g, dfl_cpu *c, const int *params, int n_params,
                  const dfl_ckpt_meta *m, int keep, char *path, size_t pathlen) {
  char fin[DFL_PATH_MAX], tmp[DFL_PATH_MAX], old[DFL_PATH_MAX], file[DFL_PATH_MAX + 32];
  char err[512];
  if (c->f64) {
    fprintf(stderr, "dflc: checkpoint: the backend runs in f64 mode; checkpoints hold f32 state\n");
    return DFL_ERR;
  }
  if (dfl_mkdirs(root)) {
    fprintf(stderr, "dflc: checkpoint: cannot create directory %s: %s\n", root, strerror(errno));
    return DFL_EIO;
  }
  dfl_ckpt_step_dir(fin, sizeof fin, root, "", m->step);
  dfl_ckpt_step_dir(tmp, sizeof tmp, root, ".tmp-", m->step);
  dfl_ckpt_step_dir(old, sizeof old, root, ".old-", m->step);
  dfl_rm_dir(tmp);   /* left over by a crash during an earlier save of this step */
  if (mkdir(tmp, 0777)) {
    fprintf(stderr, "dflc: checkpoint: cannot create %s: %s\n", tmp, strerror(errno));
    return DFL_EIO;
  }

  int n = 0;
  for (int i = 0; i < g->nt; i++) n += kind_prefix(g->t[i].kind) != NULL;
  dfl_st_out *outs = calloc(n ? n : 1, sizeof *outs);
  char *names = calloc(n ? n : 1, DFL_NAME_MAX + 16);
  if (!outs || !names) {
    free(outs); free(names);
    return DFL_ENOMEM;
  }
  int k = 0;
  for (int i = 0; i < g->nt; i++) {
    const dfl_tensor *t = &g->t[i];
    const char *pre = kind_prefix(t->kind);
    if (!pre) continue;
    char *nm = names + (size_t)k * (DFL_NAME_MAX + 16);
    snprintf(nm, DFL_NAME_MAX + 16, "%s.%s", pre, t->name);
    dfl_st_out *o = &outs[k++];
    o->name = nm;
    o->ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) o->shape[d] = t->shape[d];
    if (is_int_dtype(t->dtype)) {
      o->dtype = DFL_ST_I32;
      o->i32 = dfl_cpu_i32(c, i);
    } else {
      o->dtype = DFL_ST_F32;    /* exact: resume must be bit-exact */
      o->f32 = dfl_cpu_f32(c, i);
    }
  }
  snprintf(file, sizeof file, "%s/state.safetensors", tmp);
  const char *meta[] = {"format", DFL_CKPT_FORMAT};
  int rc = dfl_st_write(file, outs, k, meta, 1, err, sizeof err);
  free(outs);
  free(names);
  if (rc) {
    fprintf(stderr, "dflc: checkpoint: %s\n", err);
    return rc;
  }
  fsync_path(file);
  snprintf(file, sizeof file, "%s/trainer.json", tmp);
  char run[128];
  root_run_id(root, run, sizeof run);
  if (write_meta(file, g, params, n_params, m, run)) {
    fprintf(stderr, "dflc: checkpoint: cannot write %s\n", file);
    return DFL_EIO;
  }
  fsync_path(file);
  fsync_path(tmp);

  /* Replace an existing checkpoint of the same step (a rerun) without a window where neither
  ** exists under a step-* name that a resume could pick half-removed. */
  int replaced = 0;
  if (is_dir(fin)) {
    dfl_rm_dir(old);
    if (rename(fin, old)) {
      fprintf(stderr, "dflc: checkpoint: cannot move %s aside: %s\n", fin, strerror(errno));
      return DFL_EIO;
    }
    replaced = 1;
  }
  if (rename(tmp, fin)) {
    fprintf(stderr, "dflc: checkpoint: cannot rename %s to %s: %s\n", tmp, fin, strerror(errno));
    return DFL_EIO;
  }
  fsync_path(root);
  if (replaced) dfl_rm_dir(old);
  if (path) snprintf(path, pathlen, "%s", fin);

  dfl_ckpt_prune(root, keep, m->step);
  return DFL_OK;
}

void dfl_ckpt_prune(const char *root, int keep, int64_t step) {
  if (keep <= 0) return;
  char old[DFL_PATH_MAX], run[128], id[128];
  int64_t *steps, best = -1;
  double bt, bl;
  if (!dfl_ckpt_read_best(root, &best, &bt, &bl)) best = -1;
  root_run_id(root, run, sizeof run);
  int ns = dfl_ckpt_list_steps(root, &steps), mine = 0;
  /* Only this run's checkpoints count and go: a folder without the trainer's files, or another
  ** run's checkpoint (its trainer.json names another run), is never removed. */
  for (int i = 0; i < ns; i++) {
    dfl_ckpt_step_dir(old, sizeof old, root, "", steps[i]);
    if (dfl_ckpt_of_run(old, id, sizeof id) && !strcmp(id, run)) steps[mine++] = steps[i];
  }
  for (int i = 0; i + keep < mine; i++) {
    if (steps[i] == step || steps[i] == best) continue;   /* the best by evaluation stays */
    dfl_ckpt_step_dir(old, sizeof old, root, "", steps[i]);
    dfl_rm_dir(old);
  }
  free(steps);
}

int dfl_ckpt_read_best(const char *root, int64_t *step, double *accept, double *loss) {
  char f[DFL_PATH_MAX + 32];
  snprintf(f, sizeof f, "%s/best.json", root);
  if (!dfl_ckpt_is_file(f)) return 0;
  json_error_t je;
  json_t *o = json_load_file(f, 0, &je);
  json_t *st = o ? json_object_get(o, "step") : NULL, *t = o ? json_object_get(o, "tau") : NULL;
  json_t *l = o ? json_object_get(o, "loss") : NULL, *a = o ? json_object_get(o, "acceptance_length") : NULL;
  int ok = json_is_integer(st) && json_is_number(t) && json_is_number(l);
  if (ok) {
    *step = json_integer_value(st);
    /* a record from before the walk (tau only) still names the best checkpoint, but its measure is
    ** another one: the next evaluation replaces it */
    *accept = json_is_number(a) ? json_number_value(a) : 0;
    *loss = json_number_value(l);
  } else {
    fprintf(stderr, "dflc: note: %s is not a best-checkpoint record; ignored\n", f);
  }
  json_decref(o);
  return ok;
}

void dfl_ckpt_clear_best(const char *root) {
  char f[DFL_PATH_MAX + 32];
  snprintf(f, sizeof f, "%s/best.json", root);
  unlink(f);
  snprintf(f, sizeof f, "%s/best", root);
  unlink(f);
}

int dfl_ckpt_mark_best(const char *root, int64_t step, double accept, double tau, double loss) {
  char f[DFL_PATH_MAX + 32], tmp[DFL_PATH_MAX + 32], dir[32];
  snprintf(dir, sizeof dir, "step-%08" PRId64, step);
  json_t *o = json_pack("{s:I,s:f,s:f,s:f,s:s}", "step", (json_int_t)step, "acceptance_length", accept, "tau", tau,
                        "loss", loss, "dir", dir);
  snprintf(tmp, sizeof tmp, "%s/.best.json.tmp", root);
  snprintf(f, sizeof f, "%s/best.json", root);
  int rc = !o || json_dump_file(o, tmp, JSON_INDENT(2)) ? DFL_EIO : DFL_OK;
  json_decref(o);
  if (rc == DFL_OK) fsync_path(tmp);
  if (rc == DFL_OK && rename(tmp, f)) rc = DFL_EIO;
  /* the link: made aside, renamed over the old one (relative: the run directory can move) */
  snprintf(tmp, sizeof tmp, "%s/.best.tmp", root);
  snprintf(f, sizeof f, "%s/best", root);
  unlink(tmp);
  if (rc == DFL_OK && (symlink(dir, tmp) || rename(tmp, f))) rc = DFL_EIO;
  if (rc) fprintf(stderr, "dflc: cannot record the best checkpoint under %s: %s\n", root, strerror(errno));
  else fsync_path(root);
  return rc;
}

int dfl_ckpt_resolve(const char *path, char *out, size_t outlen) {
  char f[DFL_PATH_MAX + 32];
  snprintf(f, sizeof f, "%s/trainer.json", path);
  if (dfl_ckpt_is_file(f)) {
    snprintf(out, outlen, "%s", path);
    return DFL_OK;
  }
  if (!is_dir(path)) {   /* what it is instead: missing, a file, a dangling link, a loop */
    struct stat st, lst;
    int there = stat(path, &st) == 0, e = errno;
    fprintf(stderr, "dflc: checkpoint %s: %s\n", path,
            there ? "not a directory (a checkpoint is a step-N directory, or the directory holding them)"
            : e == ELOOP ? "a symbolic link loop"
            : lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode) ? "a dangling symbolic link" : "no such directory");
    return DFL_EIO;
  }
  int64_t *steps;
  int ns = dfl_ckpt_list_steps(path, &steps);
  for (int i = ns - 1; i >= 0; i--) {   /* newest complete one */
    char d[DFL_PATH_MAX];
    dfl_ckpt_step_dir(d, sizeof d, path, "", steps[i]);
    snprintf(f, sizeof f, "%s/trainer.json", d);
    if (dfl_ckpt_is_file(f)) {
      snprintf(out, outlen, "%s", d);
      free(steps);
      return DFL_OK;
    }
  }
  free(steps);
  fprintf(stderr, "dflc: %s: not a checkpoint (no trainer.json) and holds no step-* checkpoint\n", path);
  return DFL_EIO;
}

static int get_i64(json_t *o, const char *key, int64_t *v, const char *file) {
  json_t *x = json_object_get(o, key);
  if (!json_is_integer(x)) {
    fprintf(stderr, "%s: missing or non-integer \"%s\"\n", file, key);
    return DFL_EFORMAT;
  }
  *v = json_integer_value(x);
  return DFL_OK;
}

/* A 64-bit word written as hex by write_meta: 1..16 hex digits, nothing else. */
static int hex_u64(const char *h, uint64_t *v) {
  if (!h || !*h || strlen(h) > 16) return 0;
  uint64_t x = 0;
  for (const char *q = h; *q; q++) {
    int d = *q >= '0' && *q <= '9' ? *q - '0' : *q >= 'a' && *q <= 'f' ? *q - 'a' + 10 : *q >= 'A' && *q <= 'F' ? *q - 'A' + 10 : -1;
    if (d < 0) return 0;
    x = x << 4 | (uint64_t)d;
  }
  *v = x;
  return 1;
}

static json_t *load_json(const char *path, char *file, size_t flen) {
  json_error_t je;
  snprintf(file, flen, "%s/trainer.json", path);
  json_t *o = json_load_file(file, 0, &je);
  if (!o) {
    fprintf(stderr, "%s:%d: %s\n", file, je.line, je.text);
    return NULL;
  }
  json_t *fmt = json_object_get(o, "format");
  if (!json_is_string(fmt) || strcmp(json_string_value(fmt), DFL_CKPT_FORMAT)) {
    fprintf(stderr, "%s: not a dflc checkpoint (\"format\" is not \"%s\")\n", file, DFL_CKPT_FORMAT);
    json_decref(o);
    return NULL;
  }
  return o;
}

int dfl_ckpt_read_meta(const char *path, dfl_ckpt_meta *m) {
  char file[DFL_PATH_MAX + 32];
  memset(m, 0, sizeof *m);
  json_t *o = load_json(path, file, sizeof file);
  if (!o) return DFL_EFORMAT;
  int rc = DFL_OK;
  rc |= get_i64(o, "step", &m->step, file);
  rc |= get_i64(o, "steps_total", &m->steps_total, file);
  rc |= get_i64(o, "epoch", &m->epoch, file);
  rc |= get_i64(o, "cursor", &m->cursor, file);
  json_t *rng = json_object_get(o, "rng"), *seed = json_object_get(o, "seed");
  json_t *spec = json_object_get(o, "spec"), *tok = json_object_get(o, "tokens_seen");
  if (!json_is_array(rng) || json_array_size(rng) != 4 || !json_is_string(seed) || !json_is_string(spec)) {
    fprintf(stderr, "%s: \"rng\" (4 hex strings), \"seed\" and \"spec\" are required\n", file);
    rc = DFL_EFORMAT;
  } else {
    /* the anchors' RNG resumes from these words: a damaged one must stop the resume, not train on
    ** another stream (an all-zero xoshiro state would draw zeros forever) */
    int ok = 1;
    for (int i = 0; i < 4; i++) ok &= hex_u64(json_string_value(json_array_get(rng, i)), &m->rng[i]);
    ok &= hex_u64(json_string_value(seed), &m->seed);
    if (!ok || (m->rng[0] | m->rng[1] | m->rng[2] | m->rng[3]) == 0) {
      fprintf(stderr, "%s: \"rng\" and \"seed\" must be hex words of 1-16 digits, the rng not all zero: the "
                      "checkpoint is damaged; resume from an earlier one\n", file);
      rc = DFL_EFORMAT;
    }
    snprintf(m->spec, sizeof m->spec, "%s", json_string_value(spec));
  }
  m->tokens_seen = json_is_number(tok) ? json_number_value(tok) : 0;
  json_t *data = json_object_get(o, "data");
  if (data) {   /* optional (older checkpoints lack it), but a damaged one is not ignored */
    json_t *r = json_object_get(data, "rows"), *t = json_object_get(data, "tokens");
    if (!json_is_integer(r) || !json_is_integer(t) || json_integer_value(r) <= 0 || json_integer_value(t) < 0) {
      fprintf(stderr, "%s: \"data\" must hold positive integers \"rows\" and \"tokens\": the checkpoint is "
                      "damaged; resume from an earlier one\n", file);
      rc = DFL_EFORMAT;
    } else {
      m->data_rows = json_integer_value(r);
      m->data_tokens = json_integer_value(t);
    }
  }
  json_decref(o);
  return rc ? DFL_EFORMAT : DFL_OK;
}

int dfl_ckpt_begin_resume(const char *arg, const dfl_spec *s, FILE *log, char *path, size_t n, dfl_ckpt_meta *m,
                          int64_t *steps) {
  int rc = dfl_ckpt_resolve(arg, path, n);
  if (rc || (rc = dfl_ckpt_read_meta(path, m))) return rc;
  if (*steps <= 0 && m->steps_total != s->steps) {
    if (log) fprintf(log, "note: resuming a run of %" PRId64 " steps (the spec says %" PRId64 ")\n", m->steps_total, s->steps);
    *steps = m->steps_total;
  }
  if (m->seed != s->seed)
    fprintf(stderr, "dflc: warning: %s was trained with seed %" PRIu64 ", the spec says %" PRIu64
            "; the data order will differ\n", path, m->seed, s->seed);
  return DFL_OK;
}

int dfl_ckpt_check_data(const char *ckpt, const dfl_ckpt_meta *m, const char *data_path, int64_t rows, int64_t tokens) {
  if (m->data_rows > 0 && (m->data_rows != rows || m->data_tokens != tokens)) {
    fprintf(stderr, "%s: trained on data of %" PRId64 " rows and %" PRId64 " tokens; %s has %" PRId64 " rows and %" PRId64
            " tokens: resume with the data it was trained on, or start a fresh run\n", ckpt, m->data_rows,
            m->data_tokens, data_path, rows, tokens);
    return DFL_EFORMAT;
  }
  if (m->epoch < 0 || m->cursor < 0 || m->cursor > rows) {
    fprintf(stderr, "%s/trainer.json: data position (epoch %" PRId64 ", row %" PRId64 ") does not fit %" PRId64 " rows: "
            "was it trained on other data?\n", ckpt, m->epoch, m->cursor, rows);
    return DFL_EFORMAT;
  }
  return DFL_OK;
}

int dfl_ckpt_load(const char *path, const dfl_graph *g, dfl_cpu *c, dfl_ckpt_meta *m) {
  char file[DFL_PATH_MAX + 32], err[512], nm[DFL_NAME_MAX + 16];
  int rc = dfl_ckpt_read_meta(path, m);
  if (rc) return rc;
  snprintf(file, sizeof file, "%s/state.safetensors", path);
  dfl_st st;
  if ((rc = dfl_st_open(&st, file, err, sizeof err))) {
    fprintf(stderr, "%s\n", err);
    return rc;
  }
  for (int i = 0; i < g->nt && !rc; i++) {
    const dfl_tensor *t = &g->t[i];
    const char *pre = kind_prefix(t->kind);
    if (!pre) continue;
    snprintf(nm, sizeof nm, "%s.%s", pre, t->name);
    const dfl_st_entry *e = dfl_st_find(&st, nm);
    if (!e || dfl_st_numel(e) != dfl_tensor_numel(t)) {
      fprintf(stderr, "%s: tensor %s: %s (expected %" PRId64 " elements): the checkpoint was written "
              "for a different spec; resume with the spec it was trained with\n", file, nm,
              e ? "wrong size" : "missing", dfl_tensor_numel(t));
      rc = DFL_ESHAPE;
      break;
    }
    rc = is_int_dtype(t->dtype) ? dfl_st_read_i32(&st, e, dfl_cpu_i32(c, i))
                                : dfl_st_read_f32(&st, e, dfl_cpu_f32(c, i));
    if (rc) fprintf(stderr, "%s: tensor %s: cannot read\n", file, nm);
    /* A NaN or an infinity in the weights or the optimizer's state would train on silently until
    ** the loss went NaN, whose diagnosis then blames the run: refused here, naming the tensor. */
    if (!rc && !is_int_dtype(t->dtype) && (t->kind == DFL_T_PARAM || t->kind == DFL_T_STATE)) {
      const float *x = dfl_cpu_f32(c, i);
      int64_t ne = dfl_tensor_numel(t), bad = 0, first = -1;
      for (int64_t j = 0; j < ne; j++)
        if (!isfinite(x[j])) { bad++; if (first < 0) first = j; }
      if (bad) {
        fprintf(stderr, "%s: tensor %s: %" PRId64 " of %" PRId64 " values are not finite (the first, element %" PRId64
                ", is %g): the checkpoint is damaged or its run had diverged; resume from an earlier checkpoint\n",
                file, nm, bad, ne, first, (double)x[first]);
        rc = DFL_EFORMAT;
      }
    }
  }
  dfl_st_close(&st);
  return rc;
}

int dfl_ckpt_read_params(const char *path, dfl_ckpt_params *p) {
  char file[DFL_PATH_MAX + 32], err[512], nm[DFL_NAME_MAX + 16];
  memset(p, 0, sizeof *p);
  json_t *o = load_json(path, file, sizeof file);
  if (!o) return DFL_EFORMAT;
  json_t *pl = json_object_get(o, "params");
  if (!json_is_array(pl) || json_array_size(pl) == 0) {
    fprintf(stderr, "%s: \"params\" (the parameter names) is missing\n", file);
    json_decref(o);
    return DFL_EFORMAT;
  }
  int n = (int)json_array_size(pl);
  p->names = calloc(n, sizeof *p->names);
  p->data = calloc(n, sizeof *p->data);
  p->ndim = calloc(n, sizeof *p->ndim);
  p->shape = calloc((size_t)n * 4, sizeof *p->shape);
  if (!p->names || !p->data || !p->ndim || !p->shape) {
    json_decref(o);
    dfl_ckpt_params_free(p);
    return DFL_ENOMEM;
  }
  p->n = n;
  snprintf(file, sizeof file, "%s/state.safetensors", path);
  dfl_st st;
  int rc = dfl_st_open(&st, file, err, sizeof err), opened = rc == DFL_OK;
  if (rc) fprintf(stderr, "%s\n", err);
  for (int i = 0; i < n && !rc; i++) {
    const char *name = json_string_value(json_array_get(pl, i));
    snprintf(nm, sizeof nm, "param.%s", name ? name : "");
    const dfl_st_entry *e = dfl_st_find(&st, nm);
    if (!name || !e || e->ndim > 4) {
      fprintf(stderr, "%s: tensor %s: missing\n", file, nm);
      rc = DFL_EFORMAT;
      break;
    }
    p->names[i] = strdup(name);
    p->ndim[i] = e->ndim;
    for (int d = 0; d < e->ndim; d++) p->shape[4 * i + d] = e->shape[d];
    p->data[i] = malloc((size_t)dfl_st_numel(e) * sizeof(float) + 1);
    if (!p->names[i] || !p->data[i]) rc = DFL_ENOMEM;
    else rc = dfl_st_read_f32(&st, e, p->data[i]);
  }
  if (opened) dfl_st_close(&st);
  json_decref(o);
  if (rc) dfl_ckpt_params_free(p);
  return rc;
}

void dfl_ckpt_params_free(dfl_ckpt_params *p) {
  for (int i = 0; i < p->n; i++) {
    if (p->names) free(p->names[i]);
    if (p->data) free(p->data[i]);
  }
  free(p->names);
  free(p->data);
  free(p->ndim);
  free(p->shape);
  memset(p, 0, sizeof *p);
}
