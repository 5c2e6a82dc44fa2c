/*
** check_schema.c: the schema walker under check.c and the section checks (check_model.c,
** check_train.c, check_topology.c): every key of a section looked up in its schema (type, range,
** choices), unknown keys with a "did you mean", duplicates pointing at both places, and the typed
** accessors the checks read values through (required keys, sub-blocks, spec-relative paths too).
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/ast.h"
#include "compiler/check_internal.h"
#include "compiler/spec.h"

/* ---- edit distance and suggestions ---- */

int dfl_edit_distance(const char *a, const char *b, int cap) {
  /* Optimal string alignment: insert, delete, substitute, swap two neighbours, each cost 1
  ** (`tua` -> `tau` is one typo, not two). */
  size_t la = strlen(a), lb = strlen(b);
  if (la > 64 || lb > 64) return cap + 1;
  int d[65][65];
  for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    int best = d[i][0];
    for (size_t j = 1; j <= lb; j++) {
      int v = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v) v = d[i - 2][j - 2] + 1;
      d[i][j] = v;
      if (v < best) best = v;
    }
    if (best > cap + 1) return cap + 1;   /* +1: a later swap can still lower the row minimum by one */
  }
  return d[la][lb] > cap ? cap + 1 : d[la][lb];
}

/* The closest of names (NULL-terminated, or a "a|b|c" string when names is NULL) to word,
** close enough to be a plausible typo or a prefix; NULL if none. */
const char *dfl_check_nearest(const char *word, const char *const *names, const char *bar, char *buf, size_t n) {
  const char *best = NULL;
  int bestd = 1 << 20;
  size_t lw = strlen(word);
  char tmp[64];
  for (int i = 0;; i++) {
    const char *cand;
    if (names) {
      cand = names[i];
      if (!cand) break;
    } else {
      if (!*bar) break;
      const char *e = strchr(bar, '|');
      size_t l = e ? (size_t)(e - bar) : strlen(bar);
      if (l >= sizeof tmp) l = sizeof tmp - 1;
      memcpy(tmp, bar, l);
      tmp[l] = 0;
      bar += l + (e ? 1 : 0);
      cand = tmp;
    }
    size_t lc = strlen(cand);
    int cap = (int)((lw < lc ? lw : lc) / 3);
    if (cap < 1) cap = 1;
    if (cap > 3) cap = 3;
    int d = dfl_edit_distance(word, cand, cap);
    if (d > cap && lw >= 3 && (!strncmp(word, cand, lw) || !strncmp(word, cand, lc))) d = cap;
    if (d <= cap && d < bestd) {
      bestd = d;
      snprintf(buf, n, "%s", cand);
      best = buf;
    }
  }
  return best;
}

static int in_choices(const char *word, const char *bar) {
  size_t l = strlen(word);
  while (*bar) {
    const char *e = strchr(bar, '|');
    size_t lc = e ? (size_t)(e - bar) : strlen(bar);
    if (lc == l && !strncmp(word, bar, l)) return 1;
    bar += lc + (e ? 1 : 0);
  }
  return 0;
}

/* "a, b or c" from "a|b|c" */
static const char *choices_text(const char *bar, char *buf, size_t n) {
  size_t m = 0;
  int count = 1;
  for (const char *p = bar; *p; p++) count += *p == '|';
  int k = 0;
  buf[0] = 0;
  for (const char *p = bar; *p && m + 8 < n; p++) {
    if (*p == '|') {
      k++;
      const char *sep = k == count - 1 ? "` or `" : "`, `";
      m += (size_t)snprintf(buf + m, n - m, "%s", sep);
    } else {
      if (p == bar) buf[m++] = '`';
      buf[m++] = *p;
      buf[m] = 0;
    }
  }
  if (m + 2 < n) { buf[m++] = '`'; buf[m] = 0; }
  return buf;
}

/* ---- the walker ---- */

int dfl_check_key_index(const dfl_sdef *def, const char *key) {
  for (int i = 0; def->keys[i].name; i++)
    if (!strcmp(def->keys[i].name, key)) return i;
  return -1;
}

static void unknown_key(const dfl_check *c, const dfl_sdef *def, dfl_node *e) {
  dfl_diag_error(e->key_loc, "unknown key `%s` in section `%s`", e->key, def->name);
  const char *names[DFL_MAX_KEYS + 1];
  int n = 0;
  for (int i = 0; def->keys[i].name && n < DFL_MAX_KEYS; i++) names[n++] = def->keys[i].name;
  names[n] = NULL;
  char buf[64];
  const char *s = dfl_check_nearest(e->key, names, NULL, buf, sizeof buf);
  if (s) { dfl_diag_help("did you mean `%s`?", s); return; }
  for (int k = 0; k < c->n_sections; k++) {
    if (c->sections[k] == def) continue;
    if (dfl_check_key_index(c->sections[k], e->key) >= 0) {
      dfl_diag_help("`%s` belongs in section `%s`", e->key, c->sections[k]->name);
      return;
    }
  }
  char list[512];
  size_t m = 0;
  list[0] = 0;
  for (int i = 0; i < n && m < sizeof list - 40; i++)
    m += (size_t)snprintf(list + m, sizeof list - m, "%s%s", i ? ", " : "", names[i]);
  dfl_diag_help("keys of `%s`: %s", def->name, list);
}

static int check_value(const dfl_kdef *k, const char *sect, dfl_node *e) {
  dfl_node *v = e->value;
  if (k->type == K_BLOCK) {
    if (e->kind != DFL_V_BLOCK) {
      dfl_diag_error(e->key_loc, "`%s` is a block", k->name);
      dfl_diag_help("write `%s`", k->doc);
      return 0;
    }
    return 1;
  }
  if (!v) {
    dfl_diag_error(e->key_loc, "`%s` is a value, not a block", k->name);
    dfl_diag_help("write `%s`", k->doc);
    return 0;
  }
  if (v->bad) return 0;
  char buf[256];
  switch (k->type) {
    case K_INT:
    case K_FLOAT:
    case K_SIZE: {
      double x;
      int ok = v->kind == DFL_V_INT || (k->type == K_FLOAT && v->kind == DFL_V_FLOAT) ||
               (k->type == K_SIZE && v->kind == DFL_V_SIZE);
      if (k->type == K_INT && v->kind == DFL_V_FLOAT && v->f == floor(v->f) && fabs(v->f) < 9e18) {
        v->kind = DFL_V_INT;   /* 1e4 steps: an integer written in float notation */
        v->i = (int64_t)v->f;
        ok = 1;
      }
      if (!ok) {
        const char *want = k->type == K_INT ? "an integer" : k->type == K_FLOAT ? "a number" : "a size";
        dfl_diag_error(v->loc, "`%s` must be %s, not %s", k->name, want, dfl_vkind_name(v->kind));
        dfl_diag_help("write `%s`", k->doc);
        return 0;
      }
      x = v->kind == DFL_V_FLOAT ? v->f : (double)v->i;
      if (v->kind != DFL_V_FLOAT) v->f = (double)v->i;
      if (x < k->min || x > k->max) {
        if (k->type != K_FLOAT && k->max < 9e18)
          dfl_diag_error(v->loc, "`%s` must be between %lld and %lld", k->name, (long long)k->min, (long long)k->max);
        else if (x > k->max)   /* not "at least": the value is over the (64-bit) top of the range */
          dfl_diag_error(v->loc, "`%s` must be at most %.4g", k->name, k->max);
        else if (k->max >= 9e18 || k->max >= 1e300)
          dfl_diag_error(v->loc, "`%s` must be %s %g", k->name, k->min > 0 && k->min < 1e-200 ? "greater than" : "at least",
                         k->min > 0 && k->min < 1e-200 ? 0.0 : k->min);
        else
          dfl_diag_error(v->loc, "`%s` must be between %g and %g", k->name, k->min, k->max);
        return 0;
      }
      return 1;
    }
    case K_BOOL:
      if (v->kind != DFL_V_BOOL) {
        dfl_diag_error(v->loc, "`%s` must be `true` or `false`, not %s", k->name, dfl_vkind_name(v->kind));
        return 0;
      }
      return 1;
    case K_STRING:
      if (v->kind != DFL_V_STRING) {
        dfl_diag_error(v->loc, "`%s` must be a string, not %s", k->name, dfl_vkind_name(v->kind));
        dfl_diag_help("write `%s`", k->doc);
        return 0;
      }
      return 1;
    case K_ENUM:
      if ((v->kind != DFL_V_IDENT && v->kind != DFL_V_STRING) || !in_choices(v->s, k->choices)) {
        if (v->kind == DFL_V_IDENT || v->kind == DFL_V_STRING)
          dfl_diag_error(v->loc, "unknown %s `%s`", k->name, v->s);
        else
          dfl_diag_error(v->loc, "`%s` must be a name, not %s", k->name, dfl_vkind_name(v->kind));
        char sug[64];
        const char *s = v->s ? dfl_check_nearest(v->s, NULL, k->choices, sug, sizeof sug) : NULL;
        if (s) dfl_diag_help("did you mean `%s`? (one of %s)", s, choices_text(k->choices, buf, sizeof buf));
        else dfl_diag_help("`%s` is one of %s", k->name, choices_text(k->choices, buf, sizeof buf));
        return 0;
      }
      if (v->kind == DFL_V_STRING) {
        dfl_diag_error(v->loc, "`%s` takes a name, not a string", k->name);
        dfl_diag_help("write `%s = %s` without quotes", k->name, v->s);
        return 0;
      }
      return 1;
    default:
      (void)sect;
      return 1;
  }
}

static void check_label(const dfl_sdef *def, dfl_node *e) {
  if (!def->label) {
    if (e->label) {
      dfl_diag_error(e->label_loc, "section `%s` takes no name", def->name);
      dfl_diag_help("write `%s { ... }`", e->key);
    }
    return;
  }
  if (!e->label) {
    dfl_diag_error(e->key_loc, "`%s` needs a name", e->key);
    dfl_diag_help("write `%s %s { ... }`", e->key, strcmp(def->label, "*") ? def->label : "NAME");
    return;
  }
  if (strcmp(def->label, "*") && !in_choices(e->label, def->label)) {
    char buf[128];
    dfl_diag_error(e->label_loc, "unknown %s `%s`", e->key, e->label);
    dfl_diag_help("dflc knows %s", choices_text(def->label, buf, sizeof buf));
  }
}

void dfl_check_walk(dfl_check *c, const dfl_sdef *def, dfl_node *block, dfl_sect *out) {
  memset(out, 0, sizeof *out);
  out->def = def;
  out->node = block;
  if (!block) return;
  check_label(def, block);
  for (dfl_node *e = block->kids; e; e = e->next) {
    int k = dfl_check_key_index(def, e->key);
    if (k < 0) { unknown_key(c, def, e); continue; }
    const dfl_kdef *kd = &def->keys[k];
    if (kd->repeat) {
      if (e->kind != DFL_V_BLOCK) { dfl_diag_error(e->key_loc, "`%s` is a block", kd->name); dfl_diag_help("write `%s`", kd->doc); }
      continue;
    }
    if (out->val[k] || out->invalid[k]) {
      dfl_node *first = out->val[k] ? out->val[k] : NULL;
      dfl_diag_error(e->key_loc, "duplicate key `%s` in section `%s`", e->key, def->name);
      /* find the first occurrence for the note */
      for (dfl_node *f = block->kids; f && f != e; f = f->next)
        if (!strcmp(f->key, e->key)) { dfl_diag_note(f->key_loc, "first set here"); break; }
      (void)first;
      continue;
    }
    if (!check_value(kd, def->name, e)) { out->invalid[k] = 1; continue; }
    out->val[k] = kd->type == K_BLOCK ? e : e->value;
    if (kd->type == K_BLOCK && kd->sub) {
      out->kid[k] = dfl_arena_alloc(c->ast->arena, sizeof(dfl_sect));
      if (out->kid[k]) dfl_check_walk(c, kd->sub, e, out->kid[k]);
    }
  }
}

dfl_node *dfl_check_get(const dfl_sect *s, const char *key) {
  int k = dfl_check_key_index(s->def, key);
  return k >= 0 ? s->val[k] : NULL;
}
int dfl_check_has(const dfl_sect *s, const char *key) {
  int k = dfl_check_key_index(s->def, key);
  return k >= 0 && (s->val[k] || s->invalid[k]);
}
int64_t dfl_check_int(const dfl_sect *s, const char *key, int64_t dflt) {
  dfl_node *v = dfl_check_get(s, key);
  return v ? v->i : dflt;
}
double dfl_check_float(const dfl_sect *s, const char *key, double dflt) {
  dfl_node *v = dfl_check_get(s, key);
  return v ? v->f : dflt;
}
const char *dfl_check_enum(const dfl_sect *s, const char *key, const char *dflt) {
  dfl_node *v = dfl_check_get(s, key);
  return v ? (v->kind == DFL_V_BOOL ? (v->i ? "true" : "false") : v->s) : dflt;
}
dfl_loc dfl_check_where(const dfl_sect *s, const char *key) {
  dfl_node *v = key ? dfl_check_get(s, key) : NULL;
  if (v) return v->kind == DFL_V_BLOCK && v->key ? v->key_loc : v->loc;
  return s->node ? s->node->key_loc : dfl_loc_file(NULL);
}

dfl_sect *dfl_check_sub(const dfl_sect *s, const char *key) {
  int k = dfl_check_key_index(s->def, key);
  return k >= 0 ? s->kid[k] : NULL;
}

/* "missing key" for required keys, at the section header. */
int dfl_check_require(dfl_check *c, const dfl_sect *s, const char *key) {
  if (dfl_check_has(s, key)) return dfl_check_get(s, key) != NULL;
  /* an absent section or entries lost to a syntax error were reported already */
  if (!s->node || c->quiet_missing) return 0;
  int k = dfl_check_key_index(s->def, key);
  if (s->node) dfl_diag_error(s->node->key_loc, "missing key `%s` in section `%s`", key, s->def->name);
  else dfl_diag_error(dfl_loc_file(&c->ast->src), "missing key `%s` in section `%s`", key, s->def->name);
  dfl_diag_help("add `%s`", s->def->keys[k].doc);
  return 0;
}

/* dir + p, with "." and ".." folded lexically so messages show tidy paths. */
void dfl_check_resolve(const dfl_check *c, const char *p, char *out) {
  char tmp[2 * DFL_PATH_MAX + 2];
  if (p[0] == '/' || !c->dir[0]) snprintf(tmp, sizeof tmp, "%s", p);
  else snprintf(tmp, sizeof tmp, "%s/%s", c->dir, p);
  int abs = tmp[0] == '/';
  char *parts[512];
  int n = 0, up = 0;
  for (char *save, *t = strtok_r(tmp, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
    if (!strcmp(t, ".")) continue;
    if (!strcmp(t, "..")) {
      if (n > 0 && strcmp(parts[n - 1], "..")) n--;
      else if (!abs) { if (n < 512) parts[n++] = t; up++; }
      continue;
    }
    if (n < 512) parts[n++] = t;
  }
  (void)up;
  size_t m = 0;
  out[0] = 0;
  if (abs) out[m++] = '/', out[m] = 0;
  for (int i = 0; i < n; i++) {
    int w = snprintf(out + m, DFL_PATH_MAX - m, "%s%s", i ? "/" : "", parts[i]);
    if (w < 0 || (size_t)w >= DFL_PATH_MAX - m) break;
    m += (size_t)w;
  }
  if (!out[0]) snprintf(out, DFL_PATH_MAX, ".");
}

int dfl_check_path(dfl_check *c, dfl_node *v, char *out) {
  if (strlen(v->s) + strlen(c->dir) + 2 >= DFL_PATH_MAX) {
    dfl_diag_error(v->loc, "path is longer than %d bytes", DFL_PATH_MAX - 1);
    return 0;
  }
  if (!v->s[0]) {
    dfl_diag_error(v->loc, "empty path");
    return 0;
  }
  dfl_check_resolve(c, v->s, out);
  return 1;
}

int dfl_spec_count_role(const dfl_spec *s, int target, int drafter) {
  int n = 0;
  for (int i = 0; i < s->n_devices; i++)
    if ((!target || s->devices[i].runs_target) && (!drafter || s->devices[i].runs_drafter)) n++;
  return n;
}
