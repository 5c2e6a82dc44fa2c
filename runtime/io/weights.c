/*
** weights.c: loading FROZEN/PARAM tensors from safetensors by name, HF initialisation, masters,
** and reading HF config.json into a dfl_arch.
*/
#include "compiler/hash.h"
#include "runtime/io/weights.h"

#include <jansson.h>
#include <pthread.h>
#include <unistd.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/io/data.h"
#include "runtime/io/export.h"
#include "runtime/io/io_internal.h"

/* A weight holding NaN or Inf: refused, naming the tensor and the first such element. */
static int nonfinite(const dfl_st *st, const dfl_st_entry *e, int64_t i, char *err, size_t errlen) {
  double v = 0;
  const uint8_t *p = dfl_st_data(st, e);
  if (e->dtype == DFL_ST_BF16 || e->dtype == DFL_ST_F16) {
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    v = e->dtype == DFL_ST_BF16 ? dfl_bf16_to_f32(h) : dfl_f16_to_f32(h);
  } else if (e->dtype == DFL_ST_F32) {
    float f;
    memcpy(&f, p + 4 * i, 4);
    v = f;
  } else if (e->dtype == DFL_ST_F64) {
    memcpy(&v, p + 8 * i, 8);
  }
  char what[64];
  if (isfinite(v)) snprintf(what, sizeof what, "%g, beyond the f32 range", v);
  else snprintf(what, sizeof what, "%s", isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf");
  snprintf(err, errlen, "%s: tensor %s: element %lld is %s: the weights are corrupt (re-download or re-convert "
           "them); not training on them", st->files[e->file].path, e->name, (long long)i, what);
  return DFL_EFORMAT;
}

int dfl_weights_read(dfl_cpu *c, int t, const dfl_st *st, const dfl_st_entry *e, char *err, size_t errlen) {
  const dfl_tensor *tt = &c->g->t[t];
  int64_t n = dfl_tensor_numel(tt);
  if (dfl_st_numel(e) != n) {
    char a[96], b[96];
    dfl_st_shape_str(a, sizeof a, tt->ndim, tt->shape);
    dfl_st_shape_str(b, sizeof b, e->ndim, e->shape);
    snprintf(err, errlen, "%s: tensor %s: expected shape %s, found %s", st->files[e->file].path, e->name, a, b);
    return DFL_ESHAPE;
  }
  int rc;
  if (tt->dtype == DFL_I32 || tt->dtype == DFL_I64) {
    rc = dfl_st_read_i32(st, e, dfl_cpu_i32(c, t));
  } else {
    int64_t bad = -1;
    rc = c->f64 ? dfl_st_read_f64_scan(st, e, dfl_cpu_f64(c, t), &bad) : dfl_st_read_f32_scan(st, e, dfl_cpu_f32(c, t), &bad);
    if (rc == DFL_OK && bad >= 0) return nonfinite(st, e, bad, err, errlen);
  }
  if (rc != DFL_OK)
    snprintf(err, errlen, "%s: tensor %s: cannot convert %s data to %s", st->files[e->file].path, e->name,
             dfl_st_dtype_name(e->dtype), dfl_dtype_name(tt->dtype));
  return rc;
}

int dfl_weights_fp8_weight_of(const dfl_graph *g, int t) {
  const dfl_tensor *tt = &g->t[t];
  size_t n = strlen(tt->name);
  if (tt->dtype != DFL_F32 || tt->kind != DFL_T_FROZEN || n < 7 || strcmp(tt->name + n - 6, "_scale")) return -1;
  char w[DFL_NAME_MAX];
  memcpy(w, tt->name, n - 6);
  w[n - 6] = 0;
  int wi = dfl_tensor_find(g, w);
  return wi >= 0 && g->t[wi].dtype == DFL_F8E4M3 && g->t[wi].ndim == 2 && g->t[wi].shape[0] == dfl_tensor_numel(tt) ? wi : -1;
}

/* worker(job) on this thread and up to 31 more (one per core), which take work from job until it is
** done; small models (under 4 M values in all) on this thread alone. */
static void on_host_threads(void *(*worker)(void *), void *job, int64_t values) {
  long np = sysconf(_SC_NPROCESSORS_ONLN);
  int nth = values < (1 << 22) ? 1 : np < 1 ? 1 : np > 32 ? 32 : (int)np;
  pthread_t th[32];
  int started = 0;
  for (; started < nth - 1; started++)
    if (pthread_create(&th[started], NULL, worker, job)) break;
  worker(job);
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
}

/* Each f8e4m3 weight holds its checkpoint (or random) values: quantize it per row in place
** (dfl_cpu_quant_rows, as QUANT_F8 does), its scales into its "_scale" partner. An 8B target is 6.6 B values (~3 ns
** each): host threads take whole weights (the result does not depend on who takes which). */
typedef struct {
  dfl_cpu *c;
  const int (*pairs)[2]; /* {weight, scales} */
  int n, next;           /* next pair to take (atomic) */
} quant_job;

static void *quant_worker(void *arg) {
  quant_job *j = arg;
  for (int k; (k = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) < j->n;)
    dfl_cpu_quant_rows(j->c, j->pairs[k][0], j->pairs[k][1]);
  return NULL;
}

static void quantize_fp8(dfl_cpu *c, unsigned kind_mask) {
  const dfl_graph *g = c->g;
  int (*pairs)[2] = malloc(sizeof *pairs * ((size_t)g->nt + 1)), n = 0;
  int64_t total = 0;
  for (int s = 0; s < g->nt; s++) {
    int w = dfl_weights_fp8_weight_of(g, s);
    if (w < 0 || !(kind_mask & DFL_KIND_BIT(g->t[w].kind))) continue;
    if (!pairs) { dfl_cpu_quant_rows(c, w, s); continue; } /* no memory for the list: one by one, here */
    pairs[n][0] = w, pairs[n][1] = s, n++;
    total += dfl_tensor_numel(&g->t[w]);
  }
  quant_job j = {c, (const int (*)[2])pairs, n, 0};
  on_host_threads(quant_worker, &j, total);
  free(pairs);
}

/* A FROZEN tensor's name may select from its checkpoint tensor (models/ writes such names):
**   NAME[a:b]     rows a..b-1 of NAME (dimensions after the first flattened into columns)
**   NAME[a:b/p]   the rows i with a <= i % p < b: one slice of every period of p rows (the query
**                 and the gate of a gated q_proj, interleaved per head)
**   NAME(1+w)     NAME's values plus one: a zero-centred RMSNorm weight, kept in f32 */
typedef struct { char base[DFL_NAME_MAX]; int64_t a, b, p; int rows, plus1; } wsrc;

static void wsrc_parse(const char *name, wsrc *w) {
  memset(w, 0, sizeof *w);
  snprintf(w->base, sizeof w->base, "%s", name);
  size_t n = strlen(w->base);
  if (n > 5 && !strcmp(w->base + n - 5, "(1+w)")) { w->base[n - 5] = 0; w->plus1 = 1; return; }
  char *lb = strrchr(w->base, '[');
  long long a, b, p = 0;
  int used = 0;
  if (!lb || w->base[n - 1] != ']') return;
  if (sscanf(lb, "[%lld:%lld/%lld]%n", &a, &b, &p, &used) == 3 && lb[used] == 0) {}
  else if (p = 0, sscanf(lb, "[%lld:%lld]%n", &a, &b, &used) == 2 && lb[used] == 0) {}
  else return;
  *lb = 0;
  w->a = a, w->b = b, w->p = p, w->rows = 1;
}

/* The rows of e that w selects, into graph tensor t (its shape checked against them). */
/* Do the rows of e that w selects have graph tensor tt's shape? (a period must divide e's rows) */
static int rows_shape(const dfl_tensor *tt, const dfl_st *st, const dfl_st_entry *e, const wsrc *w, char *err, size_t errlen) {
  int64_t N = e->ndim ? e->shape[0] : 1, C = N ? dfl_st_numel(e) / N : 0, p = w->p ? w->p : N;
  int64_t want_r = tt->ndim == 2 ? tt->shape[0] : dfl_tensor_numel(tt), want_c = tt->ndim == 2 ? tt->shape[1] : 1;
  int64_t got_r = p > 0 && N % p == 0 && w->a >= 0 && w->a < w->b && w->b <= p ? N / p * (w->b - w->a) : -1;
  if (got_r != want_r || C != want_c) {
    char a[96], b[96];
    dfl_st_shape_str(b, sizeof b, e->ndim, e->shape);
    if (w->p > 0 && w->b > w->a && want_r % (w->b - w->a) == 0) {
      /* a per-period slice (q/k/v of a fused projection or conv): say what the whole stored tensor
      ** must be, rows and the values of a row, as the model's config implies it */
      snprintf(err, errlen, "%s: tensor %s: expected %lld rows of %lld values each (from config.json), found %s",
               st->files[e->file].path, e->name, (long long)(w->p * (want_r / (w->b - w->a))), (long long)want_c, b);
    } else {
      dfl_st_shape_str(a, sizeof a, tt->ndim, tt->shape);
      snprintf(err, errlen, "%s: tensor %s: expected %s from rows %lld:%lld of it, found %s", st->files[e->file].path,
               e->name, a, (long long)w->a, (long long)w->b, b);
    }
    return DFL_ESHAPE;
  }
  return DFL_OK;
}

static int read_rows(dfl_cpu *c, int t, const dfl_st *st, const dfl_st_entry *e, const wsrc *w, char *err, size_t errlen) {
  const dfl_tensor *tt = &c->g->t[t];
  int64_t N = e->ndim ? e->shape[0] : 1, C = N ? dfl_st_numel(e) / N : 0, p = w->p ? w->p : N;
  int rc0 = rows_shape(tt, st, e, w, err, errlen);
  if (rc0 != DFL_OK) return rc0;
  size_t esz = c->f64 ? sizeof(double) : sizeof(float);
  char *all = malloc((size_t)dfl_st_numel(e) * esz);
  if (!all) { snprintf(err, errlen, "%s: tensor %s: out of host memory", st->files[e->file].path, e->name); return DFL_ENOMEM; }
  int64_t bad = -1;
  int rc = c->f64 ? dfl_st_read_f64_scan(st, e, (double *)all, &bad) : dfl_st_read_f32_scan(st, e, (float *)all, &bad);
  if (rc == DFL_OK && bad >= 0) {
    free(all);
    return nonfinite(st, e, bad, err, errlen);
  }
  if (rc != DFL_OK) {
    snprintf(err, errlen, "%s: tensor %s: cannot convert %s data to %s", st->files[e->file].path, e->name,
             dfl_st_dtype_name(e->dtype), dfl_dtype_name(tt->dtype));
    free(all);
    return rc;
  }
  char *dst = c->f64 ? (char *)dfl_cpu_f64(c, t) : (char *)dfl_cpu_f32(c, t);
  int64_t o = 0;
  for (int64_t i = 0; i < N; i++)
    if (i % p >= w->a && i % p < w->b) memcpy(dst + (size_t)(o++ * C) * esz, all + (size_t)(i * C) * esz, (size_t)C * esz);
  free(all);
  return DFL_OK;
}

static void add_one(dfl_cpu *c, int t) {
  int64_t n = dfl_tensor_numel(&c->g->t[t]);
  for (int64_t i = 0; i < n; i++) {
    if (c->f64) dfl_cpu_f64(c, t)[i] += 1.0;
    else dfl_cpu_f32(c, t)[i] += 1.0f;
  }
}

/* Tensors of a multimodal checkpoint that a text target leaves out, said once per process. */
static void note_ignored(const dfl_st *st) {
  static int said;
  int vis = 0, mtp = 0;
  for (int i = 0; i < st->n; i++) {
    vis += !strncmp(st->e[i].name, "model.visual.", 13) || !strncmp(st->e[i].name, "visual.", 7);
    mtp += !strncmp(st->e[i].name, "mtp.", 4) || !strncmp(st->e[i].name, "model.mtp.", 10);
  }
  if ((vis || mtp) && !__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
    fprintf(stderr, "note: %s: %d vision and %d MTP tensors are not part of the text target's forward: not loaded\n",
            st->nfiles ? st->files[0].path : "?", vis, mtp);
}

/* A multimodal wrapper (Qwen3_5ForConditionalGeneration) keeps the text model's "model.*" under
** "model.language_model.*"; lm_head.weight keeps its name. */
static int is_wrapped(const dfl_st *st, unsigned kind_mask, const char *prefix) {
  return (!prefix || !prefix[0]) && (kind_mask & DFL_KIND_BIT(DFL_T_FROZEN)) &&
         !dfl_st_find(st, "model.embed_tokens.weight") && dfl_st_find(st, "model.language_model.embed_tokens.weight");
}

/* The checkpoint's name of base: under prefix, or the wrapper's "model.language_model." (is_wrapped). */
static void st_name(char *name, size_t n, const char *base, const char *prefix, int wrapped) {
  if (wrapped && !strncmp(base, "model.", 6)) snprintf(name, n, "model.language_model.%s", base + 6);
  else snprintf(name, n, "%s%s", prefix ? prefix : "", base);
}

/* A float weight stored as integers (I16 in place of BF16) converts to nonsense without a word. */
static int float_entry(const dfl_st *st, const dfl_st_entry *e, char *err, size_t errlen) {
  if (dfl_st_is_float(e->dtype)) return DFL_OK;
  snprintf(err, errlen, "%s: tensor %s: dtype %s, but it is a float tensor (BF16, F16, F32 or F64): a corrupt or "
           "mislabelled checkpoint", st->files[e->file].path, e->name, dfl_st_dtype_name(e->dtype));
  return DFL_EFORMAT;
}

/* The checkpoint entry of graph tensor t, its shape and dtype checked (header only): what load
** reads and check inspects, by one rule. */
static int resolve(const dfl_graph *g, int t, const dfl_st *st, const char *prefix, int wrapped, wsrc *w,
                   const dfl_st_entry **out, char *err, size_t errlen) {
  const dfl_tensor *tt = &g->t[t];
  char name[DFL_NAME_MAX + 64];
  wsrc_parse(tt->name, w);
  if (tt->kind != DFL_T_FROZEN) w->rows = w->plus1 = 0, snprintf(w->base, sizeof w->base, "%s", tt->name);
  st_name(name, sizeof name, w->base, prefix, wrapped);
  const dfl_st_entry *e = NULL;
  int rc;
  *out = NULL;
  if (tt->kind == DFL_T_INPUT || w->rows) {
    e = dfl_st_find(st, name);
    if (!e) {
      snprintf(err, errlen, "%s: tensor %s: missing", st->nfiles ? st->files[0].path : "?", name);
      return DFL_EFORMAT;
    }
    if (tt->kind != DFL_T_INPUT && (rc = rows_shape(tt, st, e, w, err, errlen))) return rc;
    if (tt->kind == DFL_T_INPUT && dfl_st_numel(e) != dfl_tensor_numel(tt)) {
      char a[96], b[96];
      dfl_st_shape_str(a, sizeof a, tt->ndim, tt->shape);
      dfl_st_shape_str(b, sizeof b, e->ndim, e->shape);
      snprintf(err, errlen, "%s: tensor %s: expected shape %s, found %s", st->files[e->file].path, e->name, a, b);
      return DFL_ESHAPE;
    }
  } else {
    /* Weights: the exact shape (a transposed or resized matrix must not slip through). */
    rc = dfl_st_expect(st, name, tt->ndim, tt->shape, &e, err, errlen);
    if (rc != DFL_OK) return rc;
  }
  if (tt->dtype != DFL_I32 && tt->dtype != DFL_I64 && (rc = float_entry(st, e, err, errlen))) return rc;
  *out = e;
  return DFL_OK;
}

/* A FROZEN name with one brace group, "PRE{x,y,z}POST", is the checkpoint tensors PREx POST, PREyPOST,
** PREzPOST concatenated by rows (each whole, the same columns): one GEMM's weight for several projections
** of one input (models/target_hybrid.c: the Gated DeltaNet's z, a and b). Parts into part[], their
** count returned; 0 when the name has no brace group, -1 when it is malformed. */
#define WCAT_MAX 8
static int wcat_parts(const char *name, char part[][DFL_NAME_MAX + 64]) {
  const char *lb = strchr(name, '{'), *rb = lb ? strchr(lb, '}') : NULL;
  if (!lb) return 0;
  if (!rb || strchr(lb + 1, '{') || strchr(rb + 1, '}')) return -1;
  int n = 0;
  const char *s = lb + 1;
  while (s <= rb) {
    if (n == WCAT_MAX) return -1;
    const char *e = s;
    while (e < rb && *e != ',') e++;
    if (e == s) return -1;
    snprintf(part[n++], DFL_NAME_MAX + 64, "%.*s%.*s%s", (int)(lb - name), name, (int)(e - s), s, rb + 1);
    s = e + 1;
  }
  return n;
}

/* The entries of a concatenated FROZEN tensor t (wcat_parts), each checked: present, float, t's columns;
** their rows summing to t's. */
static int resolve_cat(const dfl_graph *g, int t, const dfl_st *st, const char *prefix, int wrapped,
                       const dfl_st_entry **es, int *n, char *err, size_t errlen) {
  const dfl_tensor *tt = &g->t[t];
  char part[WCAT_MAX][DFL_NAME_MAX + 64], name[DFL_NAME_MAX + 128];
  const char *path = st->nfiles ? st->files[0].path : "?";
  *n = wcat_parts(tt->name, part);
  if (*n < 1) {
    snprintf(err, errlen, "%s: tensor %s: a concatenation must be one {a,b,..} group of names", path, tt->name);
    return DFL_EFORMAT;
  }
  int64_t R = tt->ndim == 2 ? tt->shape[0] : dfl_tensor_numel(tt), C = tt->ndim == 2 ? tt->shape[1] : 1, rows = 0;
  for (int k = 0; k < *n; k++) {
    st_name(name, sizeof name, part[k], prefix, wrapped);
    const dfl_st_entry *e = es[k] = dfl_st_find(st, name);
    if (!e) {
      snprintf(err, errlen, "%s: tensor %s: missing", path, name);
      return DFL_EFORMAT;
    }
    int64_t N = e->ndim ? e->shape[0] : 1;
    int rc = float_entry(st, e, err, errlen);
    if (rc) return rc;
    if (N < 1 || dfl_st_numel(e) != N * C) {
      char b[96];
      dfl_st_shape_str(b, sizeof b, e->ndim, e->shape);
      snprintf(err, errlen, "%s: tensor %s: expected rows of %lld values each (from config.json), found %s",
               st->files[e->file].path, e->name, (long long)C, b);
      return DFL_ESHAPE;
    }
    rows += N;
  }
  if (rows != R) {
    snprintf(err, errlen, "%s: tensor %s: its parts hold %lld rows together, expected %lld (from config.json)", path,
             tt->name, (long long)rows, (long long)R);
    return DFL_ESHAPE;
  }
  return DFL_OK;
}

static int read_cat(dfl_cpu *c, int t, const dfl_st *st, const char *prefix, int wrapped, char *err, size_t errlen) {
  const dfl_st_entry *es[WCAT_MAX];
  int n, rc = resolve_cat(c->g, t, st, prefix, wrapped, es, &n, err, errlen);
  if (rc != DFL_OK) return rc;
  int64_t o = 0;
  for (int k = 0; k < n; k++) {
    int64_t bad = -1;
    rc = c->f64 ? dfl_st_read_f64_scan(st, es[k], dfl_cpu_f64(c, t) + o, &bad)
                : dfl_st_read_f32_scan(st, es[k], dfl_cpu_f32(c, t) + o, &bad);
    if (rc == DFL_OK && bad >= 0) return nonfinite(st, es[k], bad, err, errlen);
    if (rc != DFL_OK) {
      snprintf(err, errlen, "%s: tensor %s: cannot convert %s data to %s", st->files[es[k]->file].path, es[k]->name,
               dfl_st_dtype_name(es[k]->dtype), dfl_dtype_name(c->g->t[t].dtype));
      return rc;
    }
    o += dfl_st_numel(es[k]);
  }
  return DFL_OK;
}

static int is_cat(const dfl_tensor *tt) { return tt->kind == DFL_T_FROZEN && strchr(tt->name, '{'); }

int dfl_weights_load(dfl_cpu *c, const dfl_st *st, unsigned kind_mask, const char *prefix,
                     char *err, size_t errlen) {
  const dfl_graph *g = c->g;
  int wrapped = is_wrapped(st, kind_mask, prefix);
  if (kind_mask & DFL_KIND_BIT(DFL_T_FROZEN)) note_ignored(st);
  for (int t = 0; t < g->nt; t++) {
    const dfl_tensor *tt = &g->t[t];
    if (!(kind_mask & DFL_KIND_BIT(tt->kind)) || dfl_weights_fp8_weight_of(g, t) >= 0) continue; /* scales: derived */
    if (is_cat(tt)) {
      int rc = read_cat(c, t, st, prefix, wrapped, err, errlen);
      if (rc != DFL_OK) return rc;
      continue;
    }
    wsrc w;
    const dfl_st_entry *e;
    int rc = resolve(g, t, st, prefix, wrapped, &w, &e, err, errlen);
    if (rc != DFL_OK) return rc;
    rc = w.rows ? read_rows(c, t, st, e, &w, err, errlen) : dfl_weights_read(c, t, st, e, err, errlen);
    if (rc != DFL_OK) return rc;
    if (w.plus1) add_one(c, t);
  }
  quantize_fp8(c, kind_mask);
  return DFL_OK;
}

int dfl_weights_check(const dfl_graph *g, const dfl_st *st, unsigned kind_mask, const char *prefix,
                      void (*report)(void *ctx, const char *msg), void *ctx) {
  int wrapped = is_wrapped(st, kind_mask, prefix), bad = 0;
  char err[1024], last[DFL_NAME_MAX] = "";
  for (int t = 0; t < g->nt; t++) {
    const dfl_tensor *tt = &g->t[t];
    if (!(kind_mask & DFL_KIND_BIT(tt->kind)) || dfl_weights_fp8_weight_of(g, t) >= 0) continue;
    wsrc w;
    const dfl_st_entry *e, *es[WCAT_MAX];
    int ncat;
    if (is_cat(tt)) {
      if (resolve_cat(g, t, st, prefix, wrapped, es, &ncat, err, sizeof err) != DFL_OK) {
        bad++;
        if (report) report(ctx, err);
      }
      continue;
    }
    if (resolve(g, t, st, prefix, wrapped, &w, &e, err, sizeof err) != DFL_OK) {
      bad++;
      /* the slices of one stored tensor (q, k, v of a fused projection) come one after another:
      ** one message for the stored tensor, not one per slice */
      wsrc ws;
      wsrc_parse(tt->name, &ws);
      if (report && strcmp(ws.base, last)) report(ctx, err);
      snprintf(last, sizeof last, "%s", ws.base);
    }
  }
  return bad;
}

int dfl_weights_load_path(dfl_cpu *c, const char *path, unsigned kind_mask, const char *prefix,
                          char *err, size_t errlen) {
  dfl_st st;
  int rc = dfl_st_open(&st, path, err, errlen);
  if (rc != DFL_OK) return rc;
  rc = dfl_weights_load(c, &st, kind_mask, prefix, err, errlen);
  dfl_st_close(&st);
  return rc;
}

static uint64_t fnv1a(const char *s) { return dfl_hash(DFL_HASH_INIT, s, strlen(s)); }

/* One RNG stream per tensor, seeded from (seed, name), so tensors are independent: host threads
** take whole tensors (values identical to one thread's). A fresh 27B-shaped drafter is 1.7 B values,
** about 36 s on one thread. */
typedef struct {
  dfl_cpu *c;
  unsigned kind_mask;
  uint64_t seed;
  double std;
  int next; /* next tensor to take (atomic) */
} init_job;

void dfl_weights_rng(dfl_rng *r, uint64_t seed, const char *name, int64_t first) {
  dfl_rng_seed(r, seed ^ fnv1a(name));
  for (int64_t i = 0; i < 2 * first; i++) dfl_rng_next(r); /* dfl_rng_normal takes two steps */
}

static void init_tensor(dfl_cpu *c, int t, uint64_t seed, double std) {
  const dfl_tensor *tt = &c->g->t[t];
  int64_t n = dfl_tensor_numel(tt);
  dfl_rng r;
  dfl_weights_rng(&r, seed, tt->name, 0);
  for (int64_t i = 0; i < n; i++) {
    double v = tt->ndim == 1 ? 1.0 : std * (double)dfl_rng_normal(&r);
    if (c->f64) dfl_cpu_f64(c, t)[i] = v;
    else dfl_cpu_f32(c, t)[i] = (float)v;
  }
}

static void *init_worker(void *arg) {
  init_job *j = arg;
  const dfl_graph *g = j->c->g;
  for (;;) {
    int t = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
    if (t >= g->nt) return NULL;
    const dfl_tensor *tt = &g->t[t];
    if (!(j->kind_mask & DFL_KIND_BIT(tt->kind)) || tt->dtype == DFL_I32 || tt->dtype == DFL_I64) continue;
    init_tensor(j->c, t, j->seed, j->std);
  }
}

void dfl_weights_init(dfl_cpu *c, unsigned kind_mask, uint64_t seed, double std) {
  init_job j = {c, kind_mask, seed, std, 0};
  int64_t total = 0;
  for (int t = 0; t < c->g->nt; t++)
    if (kind_mask & DFL_KIND_BIT(c->g->t[t].kind)) total += dfl_tensor_numel(&c->g->t[t]);
  on_host_threads(init_worker, &j, total);
  quantize_fp8(c, kind_mask);
}

int dfl_weights_bind(dfl_cpu *c, const dfl_spec *s, char *err, size_t errlen) {
  int rc;
  if (s->target_random) {
    dfl_weights_init(c, DFL_KIND_BIT(DFL_T_FROZEN), s->target_seed, 0.02);
  } else if ((rc = dfl_weights_load_path(c, s->target_dir, DFL_KIND_BIT(DFL_T_FROZEN), "", err, errlen)) != DFL_OK) {
    return rc;
  }
  if (s->init_from[0]) {
    if ((rc = dfl_weights_load_path(c, s->init_from, DFL_KIND_BIT(DFL_T_PARAM), "", err, errlen)) != DFL_OK)
      return rc;
  } else {
    dfl_weights_init(c, DFL_KIND_BIT(DFL_T_PARAM), s->init_seed, 0.02);
  }
  dfl_cpu_init_masters(c);
  return DFL_OK;
}

/* --- config.json --- */

static int get_int(json_t *o, const char *k, int *out, int required, char *err, size_t errlen) {
  json_t *v = json_object_get(o, k);
  if (!v || json_is_null(v)) {
    if (required) { snprintf(err, errlen, "config: key \"%s\" missing", k); return DFL_EFORMAT; }
    return DFL_OK;
  }
  if (!json_is_integer(v) || json_integer_value(v) <= 0 || json_integer_value(v) > 0x7fffffff) {
    snprintf(err, errlen, "config: key \"%s\" must be a positive integer", k);
    return DFL_EFORMAT;
  }
  *out = (int)json_integer_value(v);
  return DFL_OK;
}

int dfl_hf_arch_from_json(const void *json, dfl_arch *a, char *err, size_t errlen) {
  json_t *o = (json_t *)json;
  if (!json_is_object(o)) { snprintf(err, errlen, "config: not a JSON object"); return DFL_EFORMAT; }
  memset(a, 0, sizeof *a);
  const char *mt = json_string_value(json_object_get(o, "model_type"));
  a->family = (mt && !strcmp(mt, "llama")) ? DFL_FAMILY_LLAMA : DFL_FAMILY_QWEN3;
  int rc = DFL_OK;
  if ((rc = get_int(o, "hidden_size", &a->hidden, 1, err, errlen)) ||
      (rc = get_int(o, "num_hidden_layers", &a->layers, 1, err, errlen)) ||
      (rc = get_int(o, "num_attention_heads", &a->heads, 1, err, errlen)) ||
      (rc = get_int(o, "intermediate_size", &a->intermediate, 1, err, errlen)) ||
      (rc = get_int(o, "vocab_size", &a->vocab, 1, err, errlen)))
    return rc;
  a->kv_heads = a->heads;
  a->head_dim = a->hidden / a->heads;
  if ((rc = get_int(o, "num_key_value_heads", &a->kv_heads, 0, err, errlen)) ||
      (rc = get_int(o, "head_dim", &a->head_dim, 0, err, errlen)))
    return rc;
  if (a->layers > DFL_MAX_LAYERS) { snprintf(err, errlen, "config: more than %d layers", DFL_MAX_LAYERS); return DFL_EFORMAT; }
  if (a->heads % a->kv_heads) { snprintf(err, errlen, "config: num_attention_heads %d is not a multiple of num_key_value_heads %d", a->heads, a->kv_heads); return DFL_EFORMAT; }
  json_t *th = json_object_get(o, "rope_theta");
  if (!json_is_number(th)) th = json_object_get(json_object_get(o, "rope_parameters"), "rope_theta");
  a->rope_theta = json_is_number(th) ? json_number_value(th) : 10000.0;
  json_t *eps = json_object_get(o, "rms_norm_eps");
  a->rms_eps = json_is_number(eps) ? json_number_value(eps) : 1e-6;
  a->qk_norm = a->family == DFL_FAMILY_QWEN3;
  a->tie_embeddings = json_is_true(json_object_get(o, "tie_word_embeddings"));
  json_t *mp = json_object_get(o, "max_position_embeddings");
  a->max_positions = json_is_integer(mp) ? json_integer_value(mp) : 0;
  return DFL_OK;
}

int dfl_hf_arch_load(const char *config_path, dfl_arch *a, char *err, size_t errlen) {
  json_error_t je;
  if (dfl_file_why(config_path, err, errlen)) return DFL_EIO;
  json_t *o = json_load_file(config_path, 0, &je);
  if (!o) {
    snprintf(err, errlen, "%s:%d: %s", config_path, je.line, je.text);
    return DFL_EFORMAT;
  }
  char sub[256];
  int rc = dfl_hf_arch_from_json(o, a, sub, sizeof sub);
  if (rc != DFL_OK) snprintf(err, errlen, "%s: %s", config_path, sub);
  json_decref(o);
  return rc;
}

/* --- a spec's weights --- */

int dfl_weights_load_spec(const dfl_spec *s, dfl_cpu *c, const char *drafter_dir) {
  char err[1024];
  int rc;
  if (s->target_random) {
    dfl_weights_init(c, DFL_KIND_BIT(DFL_T_FROZEN), s->target_seed, 0.02);
  } else if ((rc = dfl_weights_load_path(c, s->target_dir, DFL_KIND_BIT(DFL_T_FROZEN), NULL, err, sizeof err))) {
    fprintf(stderr, "dflc: target weights: %s\n", err);
    return rc;
  }
  if ((rc = dfl_weights_load_drafter(s, c, drafter_dir))) return rc;
  dfl_cpu_init_masters(c);
  return DFL_OK;
}

int dfl_weights_load_drafter(const dfl_spec *s, dfl_cpu *c, const char *drafter_dir) {
  char err[1024];
  int rc = DFL_OK;
  if (drafter_dir && drafter_dir[0]) {
    /* Through the drafter loader: its config.json must describe the spec's drafter. */
    dfl_drafter_weights w;
    if ((rc = dfl_drafter_load(drafter_dir, s, &w, err, sizeof err))) {
      fprintf(stderr, "dflc: drafter %s: %s\n", drafter_dir, err);
      return rc;
    }
    const dfl_graph *g = c->g;
    for (int t = 0; t < g->nt && !rc; t++) {
      if (g->t[t].kind != DFL_T_PARAM) continue;
      const float *x = dfl_drafter_get(&w, g->t[t].name);
      if (!x) {
        fprintf(stderr, "dflc: drafter %s: tensor %s missing\n", drafter_dir, g->t[t].name);
        rc = DFL_EFORMAT;
      } else {
        dfl_cpu_set_f(c, t, x, dfl_tensor_numel(&g->t[t]));
      }
    }
    dfl_drafter_free(&w);
    if (rc) return rc;
  } else {
    dfl_weights_init(c, DFL_KIND_BIT(DFL_T_PARAM), s->init_seed, 0.02);
  }
  return DFL_OK;
}
