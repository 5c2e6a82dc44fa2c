/*
** check.c: the schema-driven checker's driver. A .dfl file parses into generic sections/keys/values
** (grammar/dfl.y); here the top-level entries are matched to sections, every section is walked
** through its schema (check_schema.c: types, ranges, choices, "did you mean", duplicates), and
** then the meaning is checked section by section while filling dfl_spec: target, taps and drafter
** in check_model.c; data, loss, train and compile in check_train.c; topology in check_topology.c;
** last, the limits of the runtime. Every error is reported; checking never stops at the first.
*/
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "compiler/ast.h"
#include "compiler/check_internal.h"
#include "compiler/hfconfig.h"

/* ---- sections ---- */

/* The top-level sections' schemas (N_TOP, in the order of dfl_check's slots), then the nested
** ones, for "`key` belongs in section ...". */
static const dfl_sdef *const sections[] = {&dfl_target_schema, &dfl_drafter_schema, &dfl_data_schema,
                                           &dfl_loss_schema, &dfl_train_schema, &dfl_topology_schema,
                                           &dfl_compile_schema, &dfl_adamw_schema, &dfl_ckpt_schema};
enum { N_TOP = 7, N_ALL = 9 };

/* ---- driver ---- */

static int check_sections(dfl_check *c) {
  dfl_sect *slots[N_TOP];
  dfl_node *first[N_TOP] = {0};
  for (int i = 0; i < N_TOP; i++) {
    slots[i] = dfl_arena_alloc(c->ast->arena, sizeof(dfl_sect));
    if (!slots[i]) return DFL_ENOMEM;
  }
  for (dfl_node *e = c->ast->entries; e; e = e->next) {
    int k = -1;
    for (int i = 0; i < N_TOP; i++) if (!strcmp(sections[i]->name, e->key)) k = i;
    if (k < 0) {
      const char *names[N_TOP + 1];
      for (int i = 0; i < N_TOP; i++) names[i] = sections[i]->name;
      names[N_TOP] = NULL;
      char buf[64];
      const char *sug = dfl_check_nearest(e->key, names, NULL, buf, sizeof buf);
      int in_sect = 0;
      for (int i = 0; i < N_TOP && !sug; i++) if (dfl_check_key_index(sections[i], e->key) >= 0 && !in_sect) {
        dfl_diag_error(e->key_loc, "`%s` must be inside a section", e->key);
        dfl_diag_help("move it into `%s { ... }`", sections[i]->name);
        in_sect = 1;
      }
      if (in_sect) continue;
      dfl_diag_error(e->key_loc, "unknown section `%s`", e->key);
      if (sug) dfl_diag_help("did you mean `%s`?", sug);
      else dfl_diag_help("sections are target, drafter, data, loss, train, topology and compile");
      continue;
    }
    if (e->kind != DFL_V_BLOCK) {
      dfl_diag_error(e->key_loc, "`%s` is a section", e->key);
      dfl_diag_help("write `%s { ... }`", e->key);
      continue;
    }
    if (first[k]) {
      dfl_diag_error(e->key_loc, "duplicate section `%s`", e->key);
      dfl_diag_note(first[k]->key_loc, "first defined here");
      continue;
    }
    first[k] = e;
  }
  for (int i = 0; i < N_TOP; i++) dfl_check_walk(c, sections[i], first[i], slots[i]);
  c->target = slots[0]; c->drafter = slots[1]; c->data = slots[2];
  c->loss = slots[3]; c->train = slots[4]; c->topology = slots[5]; c->compile = slots[6];
  static const int required[] = {0, 1, 2, 4};   /* target, drafter, data, train */
  for (int i = 0; i < 4 && !c->quiet_missing; i++) if (!first[required[i]]) {
    dfl_diag_error(dfl_loc_file(&c->ast->src), "missing section `%s`", sections[required[i]]->name);
    dfl_diag_help("every spec has `target`, `drafter`, `data` and `train` sections; see docs/language.md");
  }
  return DFL_OK;
}

struct dfl_spec_where { dfl_check *c; };

dfl_loc dfl_spec_where_key(const dfl_spec_where *w, const char *section, const char *key) {
  dfl_check *c = w->c;
  dfl_sect *top[N_TOP] = {c->target, c->drafter, c->data, c->loss, c->train, c->topology, c->compile}, *s = NULL;
  char head[64];
  snprintf(head, sizeof head, "%s", section ? section : "");
  char *dot = strchr(head, '.');
  if (dot) *dot = 0;
  for (int i = 0; i < N_TOP; i++) if (!strcmp(sections[i]->name, head)) s = top[i];
  if (s && dot) s = dfl_check_sub(s, dot + 1);
  if (!s || !s->node) return dfl_loc_file(&c->ast->src);
  return dfl_check_where(s, key);
}

/* Limits of the runtime that depend on where the spec runs. */
static void check_runtime_limits(dfl_check *c) {
  const dfl_spec *s = c->spec;
  int gpus = 0;
  for (int i = 0; i < s->n_devices; i++) gpus += s->devices[i].kind == DFL_DEV_GPU;
  /* the CUDA attention kernels (runtime/cuda/cuda.c): head_dim even and at most 256 */
  if (gpus && c->arch_ok && s->drafter.head_dim > 256) {
    dfl_diag_error(dfl_check_where(dfl_check_get(c->drafter, "head_dim") ? c->drafter : c->target, "head_dim"),
                   "drafter head_dim %d: the CUDA backend's attention supports head_dim up to 256", s->drafter.head_dim);
    dfl_diag_help("set `head_dim` to 256 or less in `drafter`, or put the drafter on a CPU device");
  }
}

static int load_buffer(const char *name, const char *bytes, size_t len, dfl_spec *out, dfl_spec_deep_fn fn,
                       void *user);

int dfl_spec_load_buffer(const char *name, const char *bytes, size_t len, dfl_spec *out) {
  return load_buffer(name, bytes, len, out, NULL, NULL);
}

static int load_buffer(const char *name, const char *bytes, size_t len, dfl_spec *out, dfl_spec_deep_fn fn,
                       void *user) {
  int errors0 = dfl_diag_errors();
  memset(out, 0, sizeof *out);
  snprintf(out->file, sizeof out->file, "%s", name);
  dfl_ast ast;
  int rc = dfl_parse_buffer(name, bytes, len, &ast);
  if (rc == DFL_ENOMEM) {
    dfl_diag_error(dfl_loc_none, "out of memory while parsing %s", name);
    dfl_ast_free(&ast);
    return DFL_ENOMEM;
  }
  if (!(len > DFL_MAX_SPEC_BYTES) && !ast.partial) {
    dfl_check c;
    memset(&c, 0, sizeof c);
    c.ast = &ast;
    c.spec = out;
    c.quiet_missing = ast.syntax_errors > 0;
    c.sections = sections;
    c.n_sections = N_ALL;
    const char *slash = strrchr(name, '/');
    if (slash) {   /* memcpy, not "%.*s": gcc -fsanitize flags a false "argument is null" there */
      size_t n = (size_t)(slash - name) < sizeof c.dir - 1 ? (size_t)(slash - name) : sizeof c.dir - 1;
      memcpy(c.dir, name, n);
      c.dir[n] = 0;
    }
    if (slash == name) snprintf(c.dir, sizeof c.dir, "/");
    if (check_sections(&c) != DFL_OK) {
      dfl_diag_error(dfl_loc_none, "out of memory while checking %s", name);
      dfl_ast_free(&ast);
      return DFL_ENOMEM;
    }
    if (c.target->node) dfl_check_target(&c);
    dfl_check_drafter(&c);
    dfl_check_taps(&c);
    dfl_check_data(&c);
    dfl_check_loss(&c);
    dfl_check_train(&c);
    dfl_check_compile(&c);
    dfl_check_topology(&c);
    if (dfl_diag_errors() == errors0) check_runtime_limits(&c);
    if (fn && dfl_diag_errors() == errors0) {
      dfl_spec_where w = {&c};
      fn(out, &w, user);
    }
  }
  dfl_ast_free(&ast);
  return dfl_diag_errors() > errors0 ? DFL_ERR : DFL_OK;
}

static int load_file(const char *file, dfl_spec *out, dfl_spec_deep_fn fn, void *user);

int dfl_spec_load(const char *file, dfl_spec *out) { return load_file(file, out, NULL, NULL); }

int dfl_spec_load_deep(const char *file, dfl_spec *out, dfl_spec_deep_fn fn, void *user) {
  return load_file(file, out, fn, user);
}

static int load_file(const char *file, dfl_spec *out, dfl_spec_deep_fn fn, void *user) {
  memset(out, 0, sizeof *out);
  dfl_source src = {file, "", 0};
  struct stat st;
  if (stat(file, &st) != 0) {
    dfl_diag_error(dfl_loc_file(&src), "cannot open: %s", strerror(errno));
    return DFL_EIO;
  }
  if (S_ISDIR(st.st_mode)) {
    dfl_diag_error(dfl_loc_file(&src), "is a directory, not a .dfl file");
    return DFL_EIO;
  }
  if (S_ISREG(st.st_mode) && st.st_size > DFL_MAX_SPEC_BYTES) {
    dfl_diag_error(dfl_loc_file(&src), "file is %lld bytes; a spec may be at most %d bytes (1 MiB)", (long long)st.st_size,
                   DFL_MAX_SPEC_BYTES);
    return DFL_EFORMAT;
  }
  char *text;
  size_t len;
  int rc = dfl_read_file(file, DFL_MAX_SPEC_BYTES, &text, &len);
  if (rc == DFL_EFORMAT) {
    dfl_diag_error(dfl_loc_file(&src), "file is larger than %d bytes (1 MiB), the limit for a spec", DFL_MAX_SPEC_BYTES);
    return rc;
  }
  if (rc != DFL_OK) {
    dfl_diag_error(dfl_loc_file(&src), "cannot read: %s", strerror(errno));
    return rc;
  }
  rc = load_buffer(file, text, len, out, fn, user);
  free(text);
  return rc;
}
