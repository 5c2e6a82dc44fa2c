/*
** compile.c: the one compile entry point (see compile.h): a device of a spec to its graph, passes,
** workspaces and plan, and the fingerprints `dflc build` records.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/compile.h"
#include "compiler/hash.h"
#include "runtime/cpu/cpu.h"

static size_t cpu_elem(const dfl_tensor *t, void *ctx) {
  (void)ctx;
  return dfl_cpu_elem_size(t, 0);
}

int64_t dfl_compile_queue_stride(const dfl_spec *s, int batch) {
  int64_t b = (int64_t)batch * s->seq_len * dfl_spec_feature_blocks(s) * s->target.hidden * 4;
  return (b + 255) / 256 * 256;
}

/* The hidden-state queue's device slots on target-only GPU device k, as the pipeline runner places them in
** one process (runtime/pipeline/pipeline.c): slot i on target i mod M, at i / M in its "queue.slots". */
static int64_t queue_bytes(const dfl_spec *s, int k, int batch) {
  const dfl_device *dv = &s->devices[k];
  int M = 0, idx = -1, nd = 0;
  for (int i = 0; i < s->n_devices; i++) {
    const dfl_device *e = &s->devices[i];
    nd += e->runs_drafter && !e->runs_target;
    if (e->runs_target && !e->runs_drafter) {
      if (i == k) idx = M;
      M++;
    }
  }
  if (dv->kind != DFL_DEV_GPU || idx < 0 || nd == 0) return 0;
  int depth = s->queue_depth > 0 ? s->queue_depth : 2 * M;
  if (idx >= depth) return 0;
  return (int64_t)((depth - idx + M - 1) / M) * dfl_compile_queue_stride(s, batch);
}

static void add_ws(dfl_compiled *c, const char *name, int64_t bytes, dfl_plan_cat cat, int op) {
  if (c->n_ws >= c->cap_ws || bytes <= 0) return;
  dfl_plan_ws *w = &c->ws[c->n_ws++];
  snprintf(w->name, sizeof w->name, "%s", name);
  w->bytes = bytes;
  w->cat = cat;
  w->op = op;
}

/* Sequences per micro-batch on one device: `batch` counts sequences over all drafter devices
** (data parallel), and a target device fills one queue slot (one drafter micro-batch) at a time. */
static int device_batch(const dfl_spec *s) {
  int nd = dfl_spec_count_role(s, 0, 1);
  return nd > 1 && s->batch % nd == 0 ? s->batch / nd : s->batch;
}

/* Each card's memory.total as nvidia-smi reports it, MiB. Only the H100's (81559) was read on a device
** here (2026-12-05); the others are published figures, not checked on the cards (docs/gpus.md). */
static const struct { const char *name; int64_t mib; } gpu_mem[] = {
    {"a100-40gb", 40960}, {"a100-80gb", 81920}, {"a100", 81920},   {"l40s", 46068},       {"h100", 81559},
    {"h100-nvl", 95830},  {"h200", 143771},     {"b200", 183359},  {"rtx-pro-6000", 97887}, {"rtx-5090", 32607},
};

int64_t dfl_compile_gpu_memory(const char *name) {
  char n[32];   /* lower case, '_' and ' ' as '-' */
  size_t k = 0;
  for (; name && name[k] && k + 1 < sizeof n; k++)
    n[k] = name[k] == '_' || name[k] == ' ' ? '-' : name[k] >= 'A' && name[k] <= 'Z' ? (char)(name[k] - 'A' + 'a') : name[k];
  n[k] = 0;
  for (size_t i = 0; name && i < sizeof gpu_mem / sizeof gpu_mem[0]; i++)
    if (!strcmp(n, gpu_mem[i].name)) return gpu_mem[i].mib << 20;
  return 0;
}

const char *dfl_compile_gpu_names(void) {
  static char buf[256];
  if (!buf[0])
    for (size_t i = 0, k = 0; i < sizeof gpu_mem / sizeof gpu_mem[0]; i++)
      k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%s", i ? ", " : "", gpu_mem[i].name);
  return buf;
}

int dfl_compile_drafter_device(const dfl_spec *s) {
  for (int i = 0; i < s->n_devices; i++)
    if (s->devices[i].runs_drafter) return i;
  return -1;
}

int dfl_compile_graph(const dfl_spec *s_all, int k, const dfl_compile_req *o, dfl_compiled *c) {
  static const dfl_compile_req none;
  if (!o) o = &none;
  memset(c, 0, sizeof *c);
  c->device = k;
  c->t_ids = c->t_features = -1;
  if (k < 0 || k >= s_all->n_devices) {
    fprintf(stderr, "dflc: internal error: device %d of a spec with %d\n", k, s_all->n_devices);
    return DFL_ERR;
  }
  const dfl_device *dv = &s_all->devices[k];
  /* the spec with this device's micro-batch: too big for the stack */
  dfl_spec *s = malloc(sizeof *s);
  if (!s) return DFL_ENOMEM;
  *s = *s_all;
  s->batch = c->batch = o->trainer || o->what != DFL_COMPILE_TRAIN ? s_all->batch : device_batch(s_all);
  c->trainer = o->trainer || o->what != DFL_COMPILE_TRAIN;
  c->what = o->what;
  c->steps = s->steps, c->warmup = s->warmup_steps, c->precision = s->precision, c->target_dtype = s->target_dtype;
  snprintf(c->name, sizeof c->name, "node%d.%s%d", dv->node, dv->kind == DFL_DEV_GPU ? "gpu" : "cpu", dv->index);
  int coloc = dv->runs_drafter && (dv->runs_target || o->colocate || c->trainer) && !o->drafter_only;
  c->drafter_only = dv->runs_drafter && !coloc;
  const int drafts = dv->runs_drafter && o->what != DFL_COMPILE_TARGET && o->what != DFL_COMPILE_AGREE;
  c->role = drafts ? (coloc ? "target+drafter" : "drafter") : "target";
  int rc;
  if (drafts && o->what == DFL_COMPILE_EVAL) {
    /* the forward as the train graph runs it, fused the same way (models/pipeline.c) */
    rc = dfl_model_eval_graph(&c->tg, s, 1);
    c->g = &c->tg.g;
  } else if (drafts) {
    /* passes 1-4: graph, autodiff, optimizer, fuse (models/pipeline.c) */
    rc = dfl_model_train_graph(&c->tg, s, coloc);
    c->g = &c->tg.g;
    /* the single-device trainer's rewrites; `compile { overlap = false }` keeps the optimizer apart */
    if (rc == DFL_OK && (s_all->n_devices == 1 || o->trainer)) c->span = dfl_model_single_device(c->g, s);
    if (rc == DFL_OK && s->opt.no_overlap) c->span = 0;
  } else if (o->what == DFL_COMPILE_AGREE) {
    dfl_graph_init(&c->tgt);
    c->g = &c->tgt;
    rc = dfl_model_agree_graph(c->g, s, &c->agree);
  } else {
    dfl_graph_init(&c->tgt);
    c->g = &c->tgt;
    c->g->cur_phase = DFL_PH_TARGET;
    c->t_ids = dfl_tensor_1d(c->g, "input_ids", DFL_I32, DFL_T_INPUT, (int64_t)s->batch * s->seq_len);
    dfl_target_out out;
    /* soft labels: the features carry the final norm's output to the drafter's loss head too */
    rc = dfl_model_target(c->g, s, s->batch, s->seq_len, c->t_ids, s->kd_alpha > 0 ? DFL_TARGET_WITH_FINAL : 0, 0, &out);
    if (rc == DFL_OK && dfl_fuse_passes(c->g, dfl_model_fuse_flags(s)) != DFL_OK) rc = DFL_ENOMEM;
    if (rc == DFL_OK && out.features < 0) rc = DFL_ERR;
    if (rc == DFL_OK) c->live_out[c->n_live_out++] = c->t_features = out.features;
  }
  free(s);
  if (rc != DFL_OK) fprintf(stderr, "dflc: building the graph of %s failed\n", c->name);
  return rc;
}

int dfl_compile_plan(const dfl_spec *s_all, const dfl_compile_req *o, dfl_compiled *c) {
  static const dfl_compile_req none;
  if (!o) o = &none;
  const dfl_device *dv = &s_all->devices[c->device];
  /* pass 5: workspaces and plan. The queue's device slots live on the producers: each target-only
  ** GPU device holds its share (queue_bytes, or what the pipeline runner says it places); the
  ** drafters read a slot straight into their graph's INPUT tensors. */
  if (c->planned) dfl_plan_free(&c->plan);
  free(c->ws);
  c->planned = c->fits = c->n_ws = 0;
  c->cap_ws = c->g->nops + 4;
  c->ws = calloc((size_t)c->cap_ws, sizeof *c->ws);
  if (!c->ws) return DFL_ENOMEM;
  if (!c->trainer) add_ws(c, "queue.slots", o->queue_given ? o->queue_bytes : queue_bytes(s_all, c->device, c->batch), DFL_PCAT_QUEUE, -1);
  c->plan_cpu = o->backend == DFL_COMPILE_BE_CPU || (o->backend == DFL_COMPILE_BE_DEVICE && dv->kind != DFL_DEV_GPU);
  if (!c->plan_cpu) /* the CUDA backend's own list: what it allocates */
    c->n_ws += dfl_plan_cuda_workspaces(c->g, c->ws + c->n_ws);
  dfl_plan_opts po = {.ws = c->ws, .n_ws = c->n_ws, .live_out = c->live_out, .n_live_out = c->n_live_out,
                      .no_inplace = o->no_inplace, .span_phases = c->span};
  c->budget = 0, c->budget_from = "";
  if (o->no_budget) {
  } else if (o->budget > 0) c->budget = o->budget, c->budget_from = "option";
  else if (dv->memory_budget > 0) c->budget = dv->memory_budget, c->budget_from = "spec";
  else if (dv->kind == DFL_DEV_GPU && o->device_memory > DFL_COMPILE_GPU_RESERVE)
    c->budget = o->device_memory - DFL_COMPILE_GPU_RESERVE, c->budget_from = "device";
  int rc = dfl_plan_fit(c->g, c->budget, c->plan_cpu ? cpu_elem : NULL, NULL, &po, &c->plan, &c->r);
  c->planned = c->plan.offset != NULL;
  c->fits = rc == DFL_OK;
  if (c->planned && dfl_plan_check(&c->plan, c->g) != DFL_OK) {
    fprintf(stderr, "dflc: internal error: the plan of %s failed its check\n", c->name);
    dfl_plan_free(&c->plan);
    c->planned = c->fits = 0;
    return DFL_ERR;
  }
  return c->fits ? DFL_OK : DFL_ERR;
}

int dfl_compile_device(const dfl_spec *s, int k, const dfl_compile_req *o, dfl_compiled *c) {
  int rc = dfl_compile_graph(s, k, o, c);
  if (rc != DFL_OK || (o && o->no_plan)) return rc;
  return dfl_compile_plan(s, o, c);
}

int dfl_compiled_matches(const dfl_compiled *c, const dfl_spec *s, int drafter_only) {
  return c->g && c->trainer && c->what == DFL_COMPILE_TRAIN && c->steps == s->steps && c->warmup == s->warmup_steps && c->precision == (int)s->precision &&
         c->target_dtype == (int)s->target_dtype && c->drafter_only == !!drafter_only;
}

void dfl_compiled_free(dfl_compiled *c) {
  if (c->planned) dfl_plan_free(&c->plan);
  free(c->ws);
  if (c->g) dfl_graph_free(c->g);
  memset(c, 0, sizeof *c);
}

void dfl_compiled_move(dfl_compiled *dst, dfl_compiled *src) {
  *dst = *src;
  if (src->g) dst->g = src->g == &src->tg.g ? &dst->tg.g : &dst->tgt;
  memset(src, 0, sizeof *src);
}

void dfl_compiled_take_target(dfl_compiled *c, dfl_graph *g, dfl_plan *plan, int *planned) {
  *g = c->tgt;
  if (c->planned) *plan = c->plan;
  *planned = c->planned;
  free(c->ws);
  memset(c, 0, sizeof *c);
}

void dfl_compiled_take(dfl_compiled *c, dfl_train_graph *tg, dfl_plan *plan, int *planned) {
  *tg = c->tg;
  if (c->planned) *plan = c->plan;
  *planned = c->planned;
  free(c->ws);
  memset(c, 0, sizeof *c);
}

/* --- fingerprints: compiler/hash.h over values written out field by field (no struct padding, no pointers) --- */

typedef struct { uint64_t h; } fnv;
static void h_bytes(fnv *f, const void *p, size_t n) { f->h = dfl_hash(f->h, p, n); }
static void h_i64(fnv *f, int64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)v >> (8 * i));   /* little-endian on any host */
  h_bytes(f, b, 8);
}
static void h_dbl(fnv *f, double d) {
  int64_t v;
  memcpy(&v, &d, sizeof v);
  h_i64(f, d == 0 ? 0 : v);   /* -0 and +0 alike */
}
static void h_str(fnv *f, const char *s) { h_bytes(f, s, strlen(s) + 1); }

static void h_attrs(fnv *f, const dfl_attrs *a) {
  const int64_t iv[] = {a->trans_a, a->trans_b, a->group, a->heads, a->kv_heads, a->head_dim, a->inverse, a->mask,
                        a->batch, a->S, a->N, a->B, a->window, a->mask_id, a->vocab_chunk, a->topk, a->n,
                        a->warmup, a->total, a->schedule, a->keep_grad, a->mid_dtype, a->fast_accum, a->rot_dim};
  const double dv[] = {a->alpha, a->eps, a->theta, a->scale, a->gamma, a->lr, a->beta1, a->beta2, a->wd, a->clip,
                       a->beta};
  for (size_t i = 0; i < sizeof iv / sizeof iv[0]; i++) h_i64(f, iv[i]);
  for (size_t i = 0; i < sizeof dv / sizeof dv[0]; i++) h_dbl(f, dv[i]);
}

uint64_t dfl_compiled_graph_hash(const dfl_compiled *c) {
  fnv f = {DFL_HASH_INIT};
  const dfl_graph *g = c->g;
  if (!g) return 0;
  h_i64(&f, g->nt);
  for (int i = 0; i < g->nt; i++) {
    const dfl_tensor *t = &g->t[i];
    h_str(&f, t->name);
    h_i64(&f, t->dtype), h_i64(&f, t->kind), h_i64(&f, t->ndim);
    for (int d = 0; d < t->ndim; d++) h_i64(&f, t->shape[d]);
  }
  h_i64(&f, g->nops);
  for (int i = 0; i < g->nops; i++) {
    const dfl_op *op = &g->ops[i];
    h_i64(&f, op->code), h_i64(&f, op->phase), h_i64(&f, op->n_in), h_i64(&f, op->n_out);
    for (int k = 0; k < op->n_in; k++) h_i64(&f, op->in[k]);
    for (int k = 0; k < op->n_out; k++) h_i64(&f, op->out[k]);
    h_attrs(&f, &op->a);
  }
  return f.h;
}

uint64_t dfl_compiled_plan_hash(const dfl_compiled *c) {
  fnv f = {DFL_HASH_INIT};
  if (!c->planned) return 0;
  const dfl_plan *p = &c->plan;
  h_i64(&f, p->arena_bytes), h_i64(&f, p->persistent_bytes), h_i64(&f, p->nbuf), h_i64(&f, c->span);
  for (int i = 0; i < p->nbuf; i++) {
    h_i64(&f, p->offset[i]), h_i64(&f, p->size[i]);
    if (i >= p->nt) h_str(&f, p->ws[i - p->nt].name), h_i64(&f, p->ws[i - p->nt].bytes);
  }
  return f.h;
}
