/*
** backend.c: the CPU implementation of the trainer's backend interface, and the parts shared by
** both backends (plans, weights, host shadows). The CUDA one is runtime/backend_cuda.c.
*/
#include "runtime/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/io/weights.h"

/* --- CPU --- */

typedef struct cpu_reads { float v[DFL_BE_READ_SLOTS][DFL_BE_READ_MAX]; int n[DFL_BE_READ_SLOTS]; } cpu_reads;

static int cpu_set_f(dfl_backend *b, int t, const float *s, int64_t n) { dfl_cpu_set_f(b->cpu, t, s, n); return DFL_OK; }
static int cpu_get_f(dfl_backend *b, int t, float *d, int64_t n) { dfl_cpu_get_f(b->cpu, t, d, n); return DFL_OK; }
static int32_t *cpu_input(dfl_backend *b, int t) { return dfl_cpu_i32(b->cpu, t); }
static int cpu_commit(dfl_backend *b) { (void)b; return DFL_OK; }
static int cpu_run(dfl_backend *b, unsigned mask) { return dfl_cpu_run(b->cpu, mask); }
static int cpu_zero(dfl_backend *b, int t) {
  const dfl_tensor *tt = &b->g->t[t];
  memset(b->cpu->buf[t], 0, (size_t)dfl_tensor_numel(tt) * dfl_cpu_elem_size(tt, b->cpu->f64));
  return DFL_OK;
}
/* The CPU ran everything already: a read is an immediate copy. */
static int cpu_read_add(dfl_backend *b, int slot, int t) {
  cpu_reads *r = b->impl;
  int64_t n = dfl_tensor_numel(&b->g->t[t]);
  if (b->read_n[slot] == 1) r->n[slot] = 0;   /* first tensor since dfl_be_read_begin */
  if (r->n[slot] + n > DFL_BE_READ_MAX) return DFL_ESHAPE;
  dfl_cpu_get_f(b->cpu, t, r->v[slot] + r->n[slot], n);
  r->n[slot] += (int)n;
  return DFL_OK;
}
static int cpu_read_end(dfl_backend *b, int slot) { (void)b; (void)slot; return DFL_OK; }
static int cpu_read_wait(dfl_backend *b, int slot, float *dst) {
  cpu_reads *r = b->impl;
  memcpy(dst, r->v[slot], sizeof(float) * (size_t)r->n[slot]);
  return DFL_OK;
}
static int cpu_sync(dfl_backend *b) { (void)b; return DFL_OK; }
static int64_t cpu_bytes(dfl_backend *b) { (void)b; return -1; }
static void cpu_close(dfl_backend *b) { free(b->impl); }

static const dfl_backend_vt cpu_vt = {cpu_set_f, cpu_get_f, cpu_input, cpu_commit, cpu_run, cpu_zero, cpu_read_add,
                                      cpu_read_end, cpu_read_wait, cpu_sync, cpu_bytes, cpu_close, NULL};

int dfl_be_open_cpu(dfl_backend *b, dfl_cpu *c) {
  memset(b, 0, sizeof *b);
  b->impl = calloc(1, sizeof(cpu_reads));
  if (!b->impl) return DFL_ENOMEM;
  b->kind = DFL_BE_CPU;
  b->name = "cpu";
  b->g = c->g;
  b->vt = &cpu_vt;
  b->cpu = c;
  b->arena_bytes = (int64_t)c->arena_bytes;
  b->mem_before = -1;
  return DFL_OK;
}

void dfl_be_close(dfl_backend *b) {
  if (b->vt) b->vt->close(b);
  memset(b, 0, sizeof *b);
}


/* --- read slots --- */

int dfl_be_read_begin(dfl_backend *b, int slot) {
  b->read_n[slot] = 0;
  return DFL_OK;
}
int dfl_be_read_add(dfl_backend *b, int slot, int t) {
  if (b->read_n[slot] >= 16) return DFL_ERR;
  b->read_t[slot][b->read_n[slot]++] = t;
  return b->vt->read_add(b, slot, t);
}
int dfl_be_read_end(dfl_backend *b, int slot) { return b->vt->read_end(b, slot); }
int dfl_be_read_wait(dfl_backend *b, int slot, float *dst) { return b->vt->read_wait(b, slot, dst); }

/* --- plans --- */

static size_t cpu_elem(const dfl_tensor *t, void *ctx) {
  (void)ctx;
  return dfl_cpu_elem_size(t, 0);
}

int dfl_be_plan(dfl_plan *p, dfl_graph *g, dfl_backend_kind kind, int64_t budget, unsigned span_phases, FILE *log) {
  /* CUDA: the backend's cuBLASLt workspace and op scratch are buffers of the plan (plan.h). */
  dfl_recompute r;
  memset(&r, 0, sizeof r);
  dfl_plan_ws *ws = kind == DFL_BE_CUDA ? malloc(sizeof *ws * ((size_t)g->nops + 1)) : NULL;
  dfl_plan_opts o = {.ws = ws, .n_ws = ws ? dfl_plan_cuda_workspaces(g, ws) : 0, .span_phases = span_phases};
  if (kind == DFL_BE_CUDA && !ws) return DFL_ENOMEM;
  int rc = dfl_plan_fit(g, budget, kind == DFL_BE_CPU ? cpu_elem : NULL, NULL, &o, p, &r);
  free(ws);
  if (rc != DFL_OK && p->offset) {
    fprintf(log ? log : stderr, "warning: the plan (%.2f GiB) does not fit the budget %.2f GiB\n",
            p->arena_bytes / 1073741824.0, budget / 1073741824.0);
    rc = DFL_OK;
  }
  if (rc == DFL_OK && r.n_ops && log)
    fprintf(log, "note: %d forward ops recomputed to fit the memory budget (+%.3g FLOP per micro-step)\n", r.n_ops,
            r.flops);
  if (rc == DFL_OK && dfl_plan_check(p, g) != DFL_OK) {
    dfl_plan_free(p);
    rc = DFL_ERR;
  }
  return rc;
}

/* --- host shadows --- */

static int shadow_open(const dfl_graph *g, unsigned kinds, dfl_cpu *sh) {
  memset(sh, 0, sizeof *sh);
  sh->g = g;
  sh->buf = calloc((size_t)(g->nt ? g->nt : 1), sizeof *sh->buf);
  if (!sh->buf) return DFL_ENOMEM;
  for (int t = 0; t < g->nt; t++) {
    if (!(kinds & DFL_KIND_BIT(g->t[t].kind))) continue;
    sh->buf[t] = calloc((size_t)dfl_tensor_numel(&g->t[t]) + 1, dfl_cpu_elem_size(&g->t[t], 0));
    if (!sh->buf[t]) return DFL_ENOMEM;
  }
  return DFL_OK;
}

static void shadow_free(dfl_cpu *sh) {
  if (sh->buf)
    for (int t = 0; t < sh->g->nt; t++) free(sh->buf[t]);
  free(sh->buf);
  memset(sh, 0, sizeof *sh);
}

/* Copies between a shadow and the backend, as floats (ints round-trip exactly below 2^24). */
static int shadow_xfer(dfl_backend *b, dfl_cpu *sh, unsigned kinds, int to_device) {
  const dfl_graph *g = b->g;
  float *tmp = NULL;
  int64_t cap = 0;
  int rc = DFL_OK;
  for (int t = 0; t < g->nt && !rc; t++) {
    if (!sh->buf[t] || !(kinds & DFL_KIND_BIT(g->t[t].kind))) continue;
    int64_t n = dfl_tensor_numel(&g->t[t]);
    int isint = g->t[t].dtype == DFL_I32;
    if (!isint) {
      rc = to_device ? dfl_be_set_f(b, t, sh->buf[t], n) : dfl_be_get_f(b, t, sh->buf[t], n);
      continue;
    }
    if (n > cap) {
      free(tmp);
      cap = n;
      if (!(tmp = malloc(sizeof(float) * (size_t)n))) return DFL_ENOMEM;
    }
    int32_t *v = sh->buf[t];
    if (to_device) {
      for (int64_t i = 0; i < n; i++) tmp[i] = (float)v[i];
      rc = dfl_be_set_f(b, t, tmp, n);
    } else if ((rc = dfl_be_get_f(b, t, tmp, n)) == DFL_OK) {
      for (int64_t i = 0; i < n; i++) v[i] = (int32_t)tmp[i];
    }
  }
  free(tmp);
  return rc;
}

dfl_cpu *dfl_be_host(dfl_backend *b, unsigned kind_mask, int pull, dfl_cpu *shadow) {
  if (b->cpu) return b->cpu;
  if (shadow_open(b->g, kind_mask, shadow) || (pull && shadow_xfer(b, shadow, kind_mask, 0))) {
    shadow_free(shadow);
    return NULL;
  }
  return shadow;
}

int dfl_be_host_done(dfl_backend *b, dfl_cpu *h, unsigned push_mask) {
  if (!h || h == b->cpu) return DFL_OK;
  int rc = push_mask ? shadow_xfer(b, h, push_mask, 1) : DFL_OK;
  shadow_free(h);
  return rc;
}

int dfl_be_copy_weights(dfl_backend *dst, dfl_backend *src, int frozen) {
  const dfl_graph *dg = dst->g, *sg = src->g;
  float *tmp = NULL;
  int64_t cap = 0;
  int rc = DFL_OK;
  for (int i = 0; i < dg->nt && !rc; i++) {
    const dfl_tensor *t = &dg->t[i];
    if (!(t->kind == DFL_T_PARAM || (frozen && t->kind == DFL_T_FROZEN))) continue;
    int j = dfl_tensor_find(sg, t->name);
    int64_t n = dfl_tensor_numel(t);
    if (j < 0 || dfl_tensor_numel(&sg->t[j]) != n) {
      fprintf(stderr, "dflc: tensor %s has no counterpart in the training graph\n", t->name);
      rc = DFL_ESHAPE;
      break;
    }
    if (dst->cpu && src->cpu) {   /* both on the host: plain copy, no conversion */
      memcpy(dst->cpu->buf[i], src->cpu->buf[j], (size_t)n * dfl_cpu_elem_size(t, 0));
      continue;
    }
    if (n > cap) {
      free(tmp);
      cap = n;
      if (!(tmp = malloc(sizeof(float) * (size_t)n))) return DFL_ENOMEM;
    }
    if ((rc = dfl_be_get_f(src, j, tmp, n)) == DFL_OK) rc = dfl_be_set_f(dst, i, tmp, n);
  }
  free(tmp);
  return rc;
}

/* --- weights --- */

static double load_clock(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int dfl_be_load_weights(dfl_backend *b, const dfl_spec *s, const char *drafter_dir) {
  if (b->cpu) return dfl_weights_load_spec(s, b->cpu, drafter_dir);
  /* GPU: a host shadow of what is loaded, pushed once. Masters are STATE: only theirs are needed,
  ** but the shadow holds every STATE (small next to the weights) and pushes only the masters. */
  unsigned kinds = DFL_KIND_BIT(DFL_T_PARAM) | DFL_KIND_BIT(DFL_T_STATE);
  if (!s->target_random) kinds |= DFL_KIND_BIT(DFL_T_FROZEN);
  dfl_cpu sh;
  double t = load_clock();
  if (!dfl_be_host(b, kinds, 0, &sh)) return DFL_ENOMEM;
  b->load_s[0] = load_clock() - t;
  int rc = DFL_OK;
  char err[1024];
  if (s->target_random) {
    /* Billions of values: generated by host threads straight into the arena, same values. */
    rc = b->vt->init_random ? b->vt->init_random(b, DFL_KIND_BIT(DFL_T_FROZEN), s->target_seed, 0.02) : DFL_ERR;
  } else if ((rc = dfl_weights_load_path(&sh, s->target_dir, DFL_KIND_BIT(DFL_T_FROZEN), NULL, err, sizeof err))) {
    fprintf(stderr, "dflc: target weights: %s\n", err);
  }
  b->load_s[1] = load_clock() - t - b->load_s[0];
  t = load_clock();
  if (rc == DFL_OK) rc = dfl_weights_load_drafter(s, &sh, drafter_dir);
  b->load_s[2] = load_clock() - t;
  if (rc == DFL_OK) {
    t = load_clock();
    dfl_cpu_init_masters(&sh);
    b->load_s[3] = load_clock() - t;
    t = load_clock();
    rc = dfl_be_host_done(b, &sh, kinds);
    b->load_s[4] = load_clock() - t;
  } else {
    dfl_be_host_done(b, &sh, 0);
  }
  return rc;
}
