/*
** plan.c: the static memory plan of one device (see plan.h).
**
**   1. liveness: for every ACT tensor, the first and last op of the schedule that touch it;
**   2. in-place: an elementwise op's output takes the bytes of an input that dies at that op;
**      the chain becomes one allocation group with the union of the members' lifetimes;
**   3. persistent buffers (weights, state, grads, inputs, outputs, persistent workspaces) are
**      packed end to end at the bottom of the arena;
**   4. the per-step groups are placed greedy-by-size with best fit among the groups whose
**      lifetimes overlap (TFLite ArenaPlanner, XLA GlobalDecreasingSizeBestFitHeap), once per
**      ordering of a small portfolio; the smallest result is kept;
**   5. the lower bound is the maximum over schedule points of the group bytes live there.
**
** The checker recomputes liveness from the graph itself, so a plan whose intervals are too short
** is caught as well as one whose bytes overlap.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "compiler/plan.h"
#include "compiler/lower.h"
#include "compiler/status.h"

static const size_t dtype_bytes[DFL_DTYPE_COUNT] = {4, 2, 2, 8, 4, 8, 1};

size_t dfl_plan_dtype_elem(const dfl_tensor *t, void *ctx) {
  (void)ctx;
  return t->dtype < DFL_DTYPE_COUNT ? dtype_bytes[t->dtype] : 4;
}

const char *dfl_plan_cat_name(dfl_plan_cat c) {
  static const char *names[DFL_PCAT_COUNT] = {"weights", "optimizer_state", "gradients", "inputs_outputs",
                                              "queue_slots", "library_workspace", "activations",
                                              "loss_workspace"};
  return c < DFL_PCAT_COUNT ? names[c] : "?";
}

int dfl_plan_op_inplace_ok(dfl_opcode code) {
  /* Left out on purpose: ROPE (rotate-half reads x[i + hd/2] to write y[i]: a kernel that writes
  ** the first half before reading the second corrupts an aliased input; the CPU kernel happens to
  ** be safe, a CUDA one need not be), COPY (the CPU kernel is a memcpy, undefined on overlap), and
  ** SWIGLU_BWD (its second output is computed from g after the first is written). */
  return code == DFL_OP_ADD || code == DFL_OP_SCALE || code == DFL_OP_SWIGLU;
}

/* Inputs an in-place op's output may alias (its elementwise operands). */
static int inplace_inputs(const dfl_op *op) {
  switch (op->code) {
  case DFL_OP_ADD: return 2;
  case DFL_OP_SWIGLU: return op->n_out == 1 ? 2 : 0; /* the quantized form's blocks write bytes of other rows */
  case DFL_OP_SCALE: return 1;
  default: return 0;
  }
}

static int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

static dfl_plan_cat tensor_cat(const dfl_tensor *t) {
  switch (t->kind) {
  case DFL_T_PARAM: case DFL_T_FROZEN: return DFL_PCAT_WEIGHTS;
  case DFL_T_STATE: return DFL_PCAT_OPTSTATE;
  case DFL_T_GRAD: return DFL_PCAT_GRADS;
  case DFL_T_INPUT: case DFL_T_OUTPUT: return DFL_PCAT_IO;
  default: return DFL_PCAT_ACT;
  }
}

const char *dfl_plan_buf_name(const dfl_plan *p, const dfl_graph *g, int i) {
  if (i < p->nt) return g->t[i].name;
  return p->ws[i - p->nt].name;
}

/* First and last op touching each ACT tensor (-1, -1 when no op touches it). An op of a pointwise
** fusion group (compiler/lower.h) touches its tensors over the whole group: one kernel computes it,
** so no other tensor may take their bytes in between. */
static int liveness(const dfl_graph *g, int *first, int *last) {
  int *sf = malloc(sizeof(int) * (g->nops + 1)), *sl = malloc(sizeof(int) * (g->nops + 1));
  if (!sf || !sl || dfl_lower_span(g, sf, sl)) { free(sf); free(sl); return DFL_ENOMEM; }
  for (int t = 0; t < g->nt; t++) first[t] = last[t] = -1;
  for (int i = 0; i < g->nops; i++) {
    const dfl_op *op = &g->ops[i];
    for (int k = 0; k < op->n_in + op->n_out; k++) {
      int t = k < op->n_in ? op->in[k] : op->out[k - op->n_in];
      if (t < 0 || t >= g->nt || g->t[t].kind != DFL_T_ACT) continue;
      if (first[t] < 0) first[t] = sf[i];
      if (sl[i] > last[t]) last[t] = sl[i];
    }
  }
  free(sf);
  free(sl);
  return DFL_OK;
}

typedef struct { int64_t size; int first, last; int64_t off; } group;
typedef struct { int64_t off, end; } span;

static int cmp_span(const void *a, const void *b) {
  const span *x = a, *y = b;
  return x->off < y->off ? -1 : x->off > y->off;
}

static group *sort_groups; /* qsort has no context argument */
static int sort_mode;
static int cmp_order(const void *a, const void *b) {
  const group *x = &sort_groups[*(const int *)a], *y = &sort_groups[*(const int *)b];
  int64_t kx, ky;
  if (sort_mode == 0) { kx = x->size; ky = y->size; }                       /* size */
  else if (sort_mode == 1) { kx = x->last - x->first; ky = y->last - y->first; } /* lifetime */
  else { kx = x->size * (x->last - x->first + 1); ky = y->size * (y->last - y->first + 1); } /* area */
  if (kx != ky) return kx > ky ? -1 : 1;
  if (x->size != y->size) return x->size > y->size ? -1 : 1;
  if (x->first != y->first) return x->first < y->first ? -1 : 1;
  return *(const int *)a - *(const int *)b;
}

/* Places the groups in the given order, each at the smallest gap that fits among the already
** placed groups it overlaps in time (or on top of them). Returns the region's size. */
static int64_t place(group *gr, int n, const int *order, span *tmp) {
  int64_t top = 0;
  for (int k = 0; k < n; k++) {
    group *x = &gr[order[k]];
    int ns = 0;
    for (int j = 0; j < k; j++) {
      const group *y = &gr[order[j]];
      if (y->first <= x->last && x->first <= y->last) tmp[ns++] = (span){y->off, y->off + y->size};
    }
    qsort(tmp, ns, sizeof *tmp, cmp_span);
    int64_t best = -1, best_gap = INT64_MAX, cur = 0;
    for (int j = 0; j < ns; j++) {
      if (tmp[j].off > cur) {
        int64_t gap = tmp[j].off - cur;
        if (gap >= x->size && gap < best_gap) { best = cur; best_gap = gap; }
      }
      if (tmp[j].end > cur) cur = tmp[j].end;
    }
    x->off = best >= 0 ? best : cur;
    if (x->off + x->size > top) top = x->off + x->size;
  }
  return top;
}

/* --- build --------------------------------------------------------------------------------- */

void dfl_plan_free(dfl_plan *p) {
  free(p->offset); free(p->size); free(p->first); free(p->last);
  free(p->alias); free(p->cat); free(p->ws);
  memset(p, 0, sizeof *p);
}

int dfl_plan_build(dfl_plan *p, const dfl_graph *g, dfl_plan_elem_fn elem, void *ctx) {
  return dfl_plan_build_ex(p, g, elem, ctx, NULL);
}

int dfl_plan_build_ex(dfl_plan *p, const dfl_graph *g, dfl_plan_elem_fn elem, void *ctx,
                      const dfl_plan_opts *o) {
  static const dfl_plan_opts defaults;
  if (!o) o = &defaults;
  if (!elem) elem = dfl_plan_dtype_elem;
  memset(p, 0, sizeof *p);
  int nt = g->nt, nb = nt + o->n_ws;
  p->nt = nt; p->nbuf = nb; p->n_ws = o->n_ws;
  p->alignment = o->alignment > 0 ? o->alignment : 256;
  p->offset = malloc(sizeof(int64_t) * (nb + 1));
  p->size = malloc(sizeof(int64_t) * (nb + 1));
  p->first = malloc(sizeof(int) * (nb + 1));
  p->last = malloc(sizeof(int) * (nb + 1));
  p->alias = malloc(sizeof(int) * (nb + 1));
  p->cat = malloc(nb + 1);
  p->ws = malloc(sizeof(dfl_plan_ws) * (o->n_ws + 1));
  int *taken = malloc(sizeof(int) * (nb + 1));
  int *gid = malloc(sizeof(int) * (nb + 1));
  group *gr = malloc(sizeof(group) * (nb + 1));
  int *order = malloc(sizeof(int) * (nb + 1)), *best_order = malloc(sizeof(int) * (nb + 1));
  span *tmp = malloc(sizeof(span) * (nb + 1));
  int64_t *live = calloc((size_t)g->nops + 1, sizeof(int64_t));
  if (!p->offset || !p->size || !p->first || !p->last || !p->alias || !p->cat || !p->ws ||
      !taken || !gid || !gr || !order || !best_order || !tmp || !live) {
    free(taken); free(gid); free(gr); free(order); free(best_order); free(tmp); free(live);
    dfl_plan_free(p);
    fprintf(stderr, "dflc plan: out of memory planning %d buffers\n", nb);
    return DFL_ENOMEM;
  }
  if (o->n_ws) memcpy(p->ws, o->ws, sizeof(dfl_plan_ws) * o->n_ws);

  /* sizes, categories, liveness */
  if (liveness(g, p->first, p->last)) {
    free(taken); free(gid); free(gr); free(order); free(best_order); free(tmp); free(live);
    dfl_plan_free(p);
    return DFL_ENOMEM;
  }
  for (int t = 0; t < nt; t++) {
    const dfl_tensor *x = &g->t[t];
    p->size[t] = align_up(dfl_tensor_numel(x) * (int64_t)elem(x, ctx), p->alignment);
    p->cat[t] = (unsigned char)tensor_cat(x);
    if (x->kind != DFL_T_ACT) p->first[t] = p->last[t] = -1;
  }
  for (int i = 0; i < o->n_ws; i++) {
    int b = nt + i;
    p->size[b] = align_up(o->ws[i].bytes, p->alignment);
    p->cat[b] = (unsigned char)o->ws[i].cat;
    p->first[b] = p->last[b] = o->ws[i].op >= 0 && o->ws[i].op < g->nops ? o->ws[i].op : -1;
  }
  if (o->span_phases && g->nops > 0) /* concurrent phases: their buffers are live throughout */
    for (int i = 0; i < g->nops; i++) {
      const dfl_op *op = &g->ops[i];
      if (!(o->span_phases & (1u << op->phase))) continue;
      for (int k = 0; k < op->n_in + op->n_out; k++) {
        int t = k < op->n_in ? op->in[k] : op->out[k - op->n_in];
        if (t >= 0 && t < nt && p->first[t] >= 0) { p->first[t] = 0; p->last[t] = g->nops - 1; }
      }
      for (int w = 0; w < o->n_ws; w++)
        if (o->ws[w].op == i) { p->first[nt + w] = 0; p->last[nt + w] = g->nops - 1; }
    }
  for (int k = 0; k < o->n_live_out; k++) {
    int t = o->live_out[k];
    if (t >= 0 && t < nt && p->first[t] >= 0) p->last[t] = g->nops - 1;
  }
  for (int b = 0; b < nb; b++) { p->alias[b] = -1; taken[b] = 0; p->offset[b] = -1; }

  /* in-place: ops run in order, so a chain x -> y -> z links up as we go */
  if (!o->no_inplace)
    for (int i = 0; i < g->nops; i++) {
      const dfl_op *op = &g->ops[i];
      int nin = dfl_plan_op_inplace_ok(op->code) ? inplace_inputs(op) : 0;
      if (!nin || op->n_out < 1) continue;
      int y = op->out[0];
      if (y < 0 || y >= nt || g->t[y].kind != DFL_T_ACT || p->first[y] != i) continue;
      for (int k = 0; k < nin && k < op->n_in; k++) {
        int x = op->in[k];
        if (x < 0 || x >= nt || x == y || g->t[x].kind != DFL_T_ACT || p->last[x] != i || taken[x]) continue;
        if (p->size[x] != p->size[y]) continue;
        if (elem(&g->t[x], ctx) != elem(&g->t[y], ctx)) continue; /* a converting COPY changes width */
        p->alias[y] = x; taken[x] = 1; p->n_inplace++;
        break;
      }
    }

  /* groups: one per alias chain of per-step buffers */
  int ng = 0;
  for (int b = 0; b < nb; b++) {
    gid[b] = -1;
    if (p->first[b] >= 0 && p->alias[b] < 0) {
      gr[ng] = (group){p->size[b], p->first[b], p->last[b], 0};
      gid[b] = ng++;
    }
  }
  for (int b = 0; b < nb; b++) {
    if (p->first[b] < 0 || p->alias[b] < 0) continue;
    int r = b;
    while (p->alias[r] >= 0) r = p->alias[r]; /* chains follow op order, so they end */
    group *x = &gr[gid[r]];
    gid[b] = gid[r];
    if (p->last[b] > x->last) x->last = p->last[b];
    if (p->size[b] > x->size) x->size = p->size[b];
  }

  /* persistent region: packed by category so that the YAML and the picture read in blocks */
  int64_t off = 0;
  for (int c = 0; c < DFL_PCAT_COUNT; c++)
    for (int b = 0; b < nb; b++) {
      if (p->cat[b] != c || p->first[b] >= 0) continue;
      if (b < nt && g->t[b].kind == DFL_T_ACT) continue; /* an ACT no op touches: below */
      p->offset[b] = off;
      off += p->size[b];
      p->cat_bytes[c] += p->size[b];
    }
  p->persistent_bytes = off;

  /* lower bound and its peak */
  for (int k = 0; k < ng; k++) {
    live[gr[k].first] += gr[k].size;
    live[gr[k].last + 1] -= gr[k].size;
  }
  int64_t run = 0;
  p->peak_op = g->nops > 0 ? 0 : -1;
  for (int i = 0; i < g->nops; i++) {
    run += live[i];
    if (run > p->step_lower_bound) { p->step_lower_bound = run; p->peak_op = i; }
  }
  for (int b = 0; b < nb; b++) /* what is live at the peak, by category (one member per group) */
    if (gid[b] >= 0 && p->first[b] <= p->peak_op && p->last[b] >= p->peak_op &&
        !(p->alias[b] >= 0 && p->last[p->alias[b]] >= p->peak_op))
      p->cat_bytes[p->cat[b]] += gr[gid[b]].size;

  if (o->bound_only) {
    p->step_bytes = p->step_lower_bound;
    p->arena_bytes = p->persistent_bytes + p->step_bytes;
    free(taken); free(gid); free(gr); free(order); free(best_order); free(tmp); free(live);
    return DFL_OK;
  }

  /* placement portfolio: keep the smallest */
  int64_t best = INT64_MAX;
  for (int mode = 0; mode < 3 && ng > 0; mode++) {
    for (int k = 0; k < ng; k++) order[k] = k;
    sort_groups = gr; sort_mode = mode;
    qsort(order, ng, sizeof *order, cmp_order);
    int64_t top = place(gr, ng, order, tmp);
    if (top < best) { best = top; memcpy(best_order, order, sizeof(int) * ng); }
    if (best == p->step_lower_bound) break; /* cannot do better */
  }
  p->step_bytes = ng > 0 ? place(gr, ng, best_order, tmp) : 0;
  for (int b = 0; b < nb; b++)
    if (gid[b] >= 0) p->offset[b] = p->persistent_bytes + gr[gid[b]].off;
  p->arena_bytes = p->persistent_bytes + p->step_bytes;
  /* An ACT tensor no op touches is never read or written: it gets an address (backends want one
  ** for every tensor) that may overlap anything, and the checker ignores it. */
  for (int t = 0; t < nt; t++)
    if (g->t[t].kind == DFL_T_ACT && p->first[t] < 0)
      p->offset[t] = p->persistent_bytes + p->size[t] <= p->arena_bytes ? p->persistent_bytes : 0;

  free(taken); free(gid); free(gr); free(order); free(best_order); free(tmp); free(live);
  return DFL_OK;
}

/* --- checker ------------------------------------------------------------------------------- */

static int legal_alias(const dfl_plan *p, const dfl_graph *g, int x, int y) {
  if (y >= p->nt || p->alias[y] != x || p->offset[x] != p->offset[y]) return 0;
  int i = p->first[y];
  if (i < 0 || p->last[x] != i || i >= g->nops) return 0;
  const dfl_op *op = &g->ops[i];
  if (!dfl_plan_op_inplace_ok(op->code) || op->n_out < 1 || op->out[0] != y) return 0;
  for (int k = 0; k < inplace_inputs(op) && k < op->n_in; k++)
    if (op->in[k] == x) return 1;
  return 0;
}

int dfl_plan_check(const dfl_plan *p, const dfl_graph *g) {
  if (p->nt != g->nt) {
    fprintf(stderr, "plan check: plan has %d tensors, graph %d\n", p->nt, g->nt);
    return DFL_ERR;
  }
  int *first = malloc(sizeof(int) * (g->nt + 1)), *last = malloc(sizeof(int) * (g->nt + 1));
  if (!first || !last) { free(first); free(last); return DFL_ENOMEM; }
  int rc = liveness(g, first, last);
  for (int b = 0; b < p->nbuf && rc == DFL_OK; b++) {
    const char *nm = dfl_plan_buf_name(p, g, b);
    int used = b >= p->nt || first[b] >= 0 || g->t[b].kind != DFL_T_ACT;
    if (p->offset[b] < 0) {
      if (used) { fprintf(stderr, "plan check: buffer '%s' is used but not placed\n", nm); rc = DFL_ERR; }
      continue;
    }
    if (!used) continue;
    if (p->offset[b] % p->alignment || p->offset[b] + p->size[b] > p->arena_bytes) {
      fprintf(stderr, "plan check: buffer '%s' at [%lld, %lld) is misaligned or outside the %lld-byte arena\n",
              nm, (long long)p->offset[b], (long long)(p->offset[b] + p->size[b]), (long long)p->arena_bytes);
      rc = DFL_ERR;
    }
    if (b < p->nt && g->t[b].kind == DFL_T_ACT &&
        (p->first[b] > first[b] || p->last[b] < last[b] || p->first[b] < 0)) {
      fprintf(stderr, "plan check: '%s' is used over ops %d..%d but planned live over %d..%d only\n", nm,
              first[b], last[b], p->first[b], p->last[b]);
      rc = DFL_ERR;
    }
    if (b < p->nt && g->t[b].kind != DFL_T_ACT && p->first[b] >= 0) {
      fprintf(stderr, "plan check: persistent tensor '%s' is in the per-step region\n", nm);
      rc = DFL_ERR;
    }
    if (b < p->nt && p->size[b] < dfl_tensor_numel(&g->t[b])) {
      fprintf(stderr, "plan check: buffer '%s' has %lld bytes, fewer than its elements\n", nm, (long long)p->size[b]);
      rc = DFL_ERR;
    }
  }
  /* every pair: persistent buffers share nothing; per-step ones only when not live together */
  for (int a = 0; a < p->nbuf && rc == DFL_OK; a++) {
    if (p->offset[a] < 0 || (a < p->nt && g->t[a].kind == DFL_T_ACT && first[a] < 0)) continue;
    for (int b = a + 1; b < p->nbuf; b++) {
      if (p->offset[b] < 0 || (b < p->nt && g->t[b].kind == DFL_T_ACT && first[b] < 0)) continue;
      if (p->offset[a] >= p->offset[b] + p->size[b] || p->offset[b] >= p->offset[a] + p->size[a]) continue;
      int pa = p->first[a] < 0, pb = p->first[b] < 0;
      if (!pa && !pb && (p->last[a] < p->first[b] || p->last[b] < p->first[a])) continue;
      if (!pa && !pb && (legal_alias(p, g, a, b) || legal_alias(p, g, b, a))) continue;
      fprintf(stderr,
              "plan check: '%s' [%lld, +%lld) live %d..%d overlaps '%s' [%lld, +%lld) live %d..%d\n",
              dfl_plan_buf_name(p, g, a), (long long)p->offset[a], (long long)p->size[a], p->first[a], p->last[a],
              dfl_plan_buf_name(p, g, b), (long long)p->offset[b], (long long)p->size[b], p->first[b], p->last[b]);
      rc = DFL_ERR;
      break;
    }
  }
  free(first); free(last);
  return rc;
}

/* --- the CUDA backend's workspaces (plan.h) --- */

static int64_t ws_align(int64_t x) { return (x + 255) / 256 * 256; }

void dfl_plan_lce_ws(const dfl_graph *g, const dfl_op *op, dfl_lce_ws *l) {
  const dfl_tensor *Y = &g->t[op->in[0]], *W = &g->t[op->in[1]], *DY = &g->t[op->out[4]];
  int64_t R = Y->shape[0], H = Y->shape[1], V = W->shape[0];
  int64_t ch = op->a.vocab_chunk > 0 ? op->a.vocab_chunk : 8192;
  /* anchor rows left out when whole rows move as 16-byte words (the staging copies) */
  int64_t ey = (int64_t)dfl_dtype_size(Y->dtype), ed = (int64_t)dfl_dtype_size(DY->dtype), est = ey > ed ? ey : ed;
  int64_t per = op->a.B > 1 && R % op->a.B == 0 && (H * ey) % 16 == 0 && (H * ed) % 16 == 0 ? op->a.B : 0;
  int64_t R0 = R;
  l->period = per;
  if (per) R -= R / per;
  l->rows_used = R;
  if (ch > V) ch = V;
  /* logits in the head's dtype (bf16 as the reference's matmul rounds them; the sums are f32) */
  int64_t es = (int64_t)dfl_dtype_size(W->dtype), kd = op->n_in == 5 ? 2 : 1; /* soft labels: two logits */
  int64_t rc = R * (ch + H) * 4 / (V > 0 ? kd * V * es : 1);
  if (per) { /* logits and staging rows within what the knob allowed for all R0 rows */
    int64_t cap = R0 * (ch + H) * 4 / (kd * V * es + H * est);
    if (rc > cap) rc = cap;
  }
  /* DFL_LCE_ROWS forces the rows per chunk: tests cover several chunks and a short last one */
  const char *fr = getenv("DFL_LCE_ROWS");
  int64_t forced = fr ? atoll(fr) : 0;
  if (forced > 0) rc = forced;
  else if (rc >= 128) rc = rc / 128 * 128; /* GEMM-tile multiples */
  if (rc < 1) rc = 1;
  if (rc >= R) rc = R;
  else if (forced <= 0) { /* balanced: no narrow last chunk (8B: 3 x 2816 rows, not 2 x 3968 + 256) */
    int64_t nch = (R + rc - 1) / rc, bal = (R + nch - 1) / nch;
    if (rc >= 128) bal = (bal + 127) / 128 * 128;
    if (bal < rc) rc = bal;
  }
  l->rows = rc;
  l->ld = V;
  l->lg_off = 0;
  l->bytes = ws_align(rc * V * es);
  l->st_off = l->bytes;
  if (per) l->bytes += ws_align(rc * H * est);
  l->tl_off = l->lr_off = -1;
  if (kd == 2) {
    l->tl_off = l->bytes;
    l->bytes += ws_align(rc * V * es);
    l->lr_off = l->bytes;
    l->bytes += ws_align(R0 * 4);
  }
}

int64_t dfl_plan_cuda_op_scratch(const dfl_graph *g, const dfl_op *op) {
  switch (op->code) {
  case DFL_OP_SUM: case DFL_OP_SUMSQ_ACC: return DFL_RED_PARTS * 4;
  case DFL_OP_RMSNORM_BWD: return ws_align((int64_t)DFL_RMS_PARTS * op->a.group * 4); /* partial dw rows */
  case DFL_OP_SCATTER_ADD:
    return g->t[op->out[0]].dtype == DFL_F32 ? 0 : ws_align(dfl_tensor_numel(&g->t[op->out[0]]) * 4);
  case DFL_OP_ATTENTION_BWD: { /* tensor cores: D = rowsum(dO o), then the split key-major pass's f32 dK/dV
                                ** slabs (compiler/lower_attn.c bwdkv_parts), as many as the four gradients' f32 size
                                ** holds (the CUDA-core kernels, which once summed into it, need none) */
    int64_t s = 0;
    for (int i = 1; i < op->n_out; i++) s += ws_align(dfl_tensor_numel(&g->t[op->out[i]]) * 4);
    int64_t d = ws_align(dfl_tensor_numel(&g->t[op->in[0]]) / (op->a.head_dim > 0 ? op->a.head_dim : 1) * 4);
    return s > d ? s : d;
  }
  case DFL_OP_LINEAR_CE: { dfl_lce_ws l; dfl_plan_lce_ws(g, op, &l); return l.bytes; }
  case DFL_OP_GATED_DELTA: { /* bf16 q/k/v, dk in {32, 64, 128}, dv = dk or 2 dk: the chunks' W [R, Hv, dk], U
                             ** [R, Hv, dv] and M [R, Hv, 64] in bf16 between gdn_prep and gdn_scan
                             ** (runtime/cuda/hybrid.c) */
    const dfl_tensor *q = &g->t[op->in[0]], *v = &g->t[op->in[2]];
    int64_t R = q->shape[0], dk = op->a.head_dim, dv = op->a.heads > 0 ? v->shape[1] / op->a.heads : 0;
    if (q->dtype != DFL_BF16 || v->dtype != DFL_BF16 || (dv != dk && dv != 2 * dk) || (dk != 32 && dk != 64 && dk != 128))
      return 0;
    return ws_align(R * op->a.heads * (dk + dv + 64) * 2);
  }
  case DFL_OP_BLOCK_EXPAND_BWD: { /* the column sums' f32 parts */
    const dfl_tensor *d = &g->t[op->in[0]];
    return ws_align((int64_t)dfl_block_parts(d->shape[0]) * d->shape[1] * 4);
  }
  default: return 0;
  }
}

int dfl_plan_cuda_workspaces(const dfl_graph *g, dfl_plan_ws *ws) {
  int n = 0;
  memset(&ws[n], 0, sizeof ws[n]);
  snprintf(ws[n].name, sizeof ws[n].name, "cublaslt.workspace");
  ws[n].bytes = DFL_CUBLASLT_WS_BYTES;
  ws[n].cat = DFL_PCAT_LIBRARY;
  ws[n++].op = -1;
  for (int i = 0; i < g->nops; i++) {
    int64_t b = dfl_plan_cuda_op_scratch(g, &g->ops[i]);
    if (b <= 0) continue;
    int lce = g->ops[i].code == DFL_OP_LINEAR_CE;
    memset(&ws[n], 0, sizeof ws[n]);
    snprintf(ws[n].name, sizeof ws[n].name, "%s@%d", lce ? "loss.ce_chunk" : "scratch", i);
    ws[n].bytes = b;
    ws[n].cat = lce ? DFL_PCAT_LOSS : DFL_PCAT_ACT;
    ws[n++].op = i;
  }
  return n;
}
