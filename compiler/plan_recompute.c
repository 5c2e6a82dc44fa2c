/*
** plan_recompute.c: selective activation checkpointing under a memory budget.
**
** A forward activation that the backward reads is normally live from the forward to its backward
** use, across the peak (the forward/backward boundary). Recomputing it means duplicating its
** producer right before its first backward reader: the forward copy then dies at its last forward
** reader, and the duplicate lives only inside the backward. The duplicate reads the producer's
** inputs, which must stay live until then; when such an input would be kept alive across the peak
** only for this, its own producer is duplicated along (a chain, e.g. q-norm then RoPE).
**
** Choice: greedy. At each round, the peak op P of the current graph's live bytes is found; each
** candidate (with its chain) is scored by the bytes it frees at P minus the bytes it keeps alive
** over P, divided by the FLOPs it adds; the best is taken. Rounds use the lower bound (cheap); the
** real placement is checked once the bound fits. Every round rebuilds the graph from the original
** with the chosen set, so the rewrite is one function and easy to test.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "compiler/plan.h"
#include "compiler/status.h"

static int recomputable(const dfl_graph *g, const dfl_op *op) {
  if (op->phase != DFL_PH_FORWARD && op->phase != DFL_PH_LOSS) return 0;
  switch (op->code) {
  case DFL_OP_RMSNORM: case DFL_OP_ROPE: case DFL_OP_SWIGLU: case DFL_OP_ADD: case DFL_OP_SCALE:
  case DFL_OP_COPY: case DFL_OP_GATHER: case DFL_OP_MATMUL:
    break;
  default: return 0;
  }
  for (int k = 0; k < op->n_out; k++)
    if (g->t[op->out[k]].kind != DFL_T_ACT) return 0;
  return 1;
}

/* Builds into *out the graph g with every op in S duplicated right before the first backward op
** that reads one of its outputs (recursively for inputs produced by S). map[i] receives the new
** index of original op i. Returns the number of duplicates emitted. */
typedef struct {
  const dfl_graph *g;
  dfl_graph *out;
  const unsigned char *S;
  int *clone;   /* original tensor -> its recomputed copy, -1 */
  int n_dup;    /* duplicates emitted */
  double flops; /* and their FLOPs */
} rewrite;

static int emit(rewrite *w, const dfl_op *src, const int *in, const int *outs, dfl_phase ph, const char *suffix) {
  dfl_attrs a = src->a;
  dfl_op_add(w->out, src->code, in, src->n_in, outs, src->n_out, &a);
  dfl_op *op = &w->out->ops[w->out->nops - 1];
  op->phase = ph;
  snprintf(op->label, sizeof op->label, "%.*s%s", (int)(sizeof op->label - strlen(suffix) - 1), src->label, suffix);
  return w->out->nops - 1;
}

static int need(rewrite *w, int x) {
  if (x < 0) return x;
  int pr = w->g->t[x].producer;
  if (pr < 0 || !w->S[pr] || w->g->t[x].kind != DFL_T_ACT) return x;
  if (w->clone[x] >= 0) return w->clone[x];
  const dfl_op *src = &w->g->ops[pr];
  int in[DFL_MAX_IO], outs[DFL_MAX_IO];
  for (int k = 0; k < src->n_in; k++) in[k] = need(w, src->in[k]);
  for (int k = 0; k < src->n_out; k++) {
    const dfl_tensor *t = &w->g->t[src->out[k]];
    char nm[DFL_NAME_MAX];
    snprintf(nm, sizeof nm, "%.*s@rc", DFL_NAME_MAX - 4, t->name);
    outs[k] = dfl_tensor_new(w->out, nm, t->dtype, DFL_T_ACT, t->ndim, t->shape);
    w->clone[src->out[k]] = outs[k];
  }
  int id = emit(w, src, in, outs, DFL_PH_BACKWARD, " (recompute)");
  w->n_dup++;
  w->flops += dfl_op_flops(w->out, &w->out->ops[id]);
  return w->clone[x];
}

static int do_rewrite(const dfl_graph *g, const unsigned char *S, dfl_graph *out, int *map, double *flops) {
  dfl_graph_init(out);
  for (int t = 0; t < g->nt; t++) {
    int id = dfl_tensor_new(out, g->t[t].name, g->t[t].dtype, g->t[t].kind, g->t[t].ndim, g->t[t].shape);
    out->t[id] = g->t[t];
    out->t[id].producer = -1;
  }
  int *clone = malloc(sizeof(int) * (g->nt + 1));
  for (int t = 0; t < g->nt; t++) clone[t] = -1;
  rewrite w = {g, out, S, clone, 0, 0.0};
  for (int i = 0; i < g->nops; i++) {
    const dfl_op *op = &g->ops[i];
    int in[DFL_MAX_IO];
    for (int k = 0; k < op->n_in; k++)
      in[k] = op->phase == DFL_PH_BACKWARD ? need(&w, op->in[k]) : op->in[k];
    map[i] = emit(&w, op, in, op->out, op->phase, "");
  }
  out->cur_phase = g->cur_phase;
  out->cur_label = NULL;
  free(clone);
  if (flops) *flops = w.flops;
  return w.n_dup;
}

static int plan_with(const dfl_graph *g, const int *map, dfl_plan_elem_fn elem, void *ctx, const dfl_plan_opts *o,
                     int bound_only, dfl_plan *p) {
  dfl_plan_opts oo = o ? *o : (dfl_plan_opts){0};
  dfl_plan_ws *ws = malloc(sizeof *ws * (oo.n_ws + 1));
  for (int k = 0; k < oo.n_ws; k++) {
    ws[k] = oo.ws[k];
    if (map && ws[k].op >= 0) ws[k].op = map[ws[k].op];
  }
  oo.ws = ws;
  oo.bound_only = bound_only;
  int rc = dfl_plan_build_ex(p, g, elem, ctx, &oo);
  free(ws);
  return rc;
}

/* Per-tensor facts of the current rewritten graph that the scoring needs. */
typedef struct { int lastF, r0; } use;

int dfl_plan_fit(dfl_graph *g, int64_t budget, dfl_plan_elem_fn elem, void *ctx, const dfl_plan_opts *o,
                 dfl_plan *p, dfl_recompute *r) {
  memset(r, 0, sizeof *r);
  int rc = plan_with(g, NULL, elem, ctx, o, 0, p);
  if (rc != DFL_OK) return rc;
  r->before = r->after = p->arena_bytes;
  if (budget <= 0 || p->arena_bytes <= budget) return DFL_OK;

  const dfl_graph *g0 = g;
  int nops = g0->nops;
  unsigned char *S = calloc((size_t)nops + 1, 1), *member = calloc((size_t)nops + 1, 1);
  int *map = malloc(sizeof(int) * (nops + 1)), *stack = malloc(sizeof(int) * (nops + 1));
  double *fl = malloc(sizeof(double) * (nops + 1));
  use *u = NULL;
  dfl_graph cur;
  int have_cur = 0, n_dup = 0, fits = 0, best_chain[8], best_n = 0;
  double dup_flops = 0;
  dfl_plan bp;
  memset(&bp, 0, sizeof bp);
  for (int i = 0; i < nops; i++) fl[i] = dfl_op_flops(g0, &g0->ops[i]);

  for (int round = 0; round < nops; round++) {
    if (have_cur) dfl_graph_free(&cur);
    n_dup = do_rewrite(g0, S, &cur, map, &dup_flops);
    have_cur = 1;
    dfl_plan_free(&bp);
    plan_with(&cur, map, elem, ctx, o, 1, &bp);
    if (bp.arena_bytes <= budget) { /* the bound fits: does the placement? */
      dfl_plan_free(&bp);
      plan_with(&cur, map, elem, ctx, o, 0, &bp);
      if (bp.arena_bytes <= budget) { fits = 1; break; }
    }
    /* uses of every original tensor in the current graph, relative to the peak P */
    int P = bp.peak_op;
    free(u);
    u = malloc(sizeof(use) * (cur.nt + 1));
    for (int t = 0; t < cur.nt; t++) u[t] = (use){-1, -1};
    for (int i = 0; i < cur.nops; i++)
      for (int k = 0; k < cur.ops[i].n_in; k++) {
        int x = cur.ops[i].in[k];
        if (x < 0) continue;
        if (cur.ops[i].phase == DFL_PH_BACKWARD) { if (u[x].r0 < 0) u[x].r0 = i; }
        else u[x].lastF = i;
      }
    double best_score = 0;
    int best = -1;
    for (int c = 0; c < nops; c++) {
      const dfl_op *op = &g0->ops[c];
      if (S[c] || !recomputable(g0, op)) continue;
      int r0 = -1;
      for (int k = 0; k < op->n_out; k++) {
        int rr = u[op->out[k]].r0;
        if (rr >= 0 && (r0 < 0 || rr < r0)) r0 = rr;
      }
      if (r0 < 0 || r0 <= P) continue; /* no backward use after the peak: nothing to free there */
      /* the chain: c plus producers of inputs that would otherwise be kept alive over P */
      int ns = 0, nm = 0, mem[8];
      int64_t gain = 0, cost = 0;
      double flops = 0;
      stack[ns++] = c;
      while (ns) {
        int m = stack[--ns];
        if (member[m]) continue;
        member[m] = 1;
        mem[nm++] = m;
        flops += fl[m];
        const dfl_op *mo = &g0->ops[m];
        for (int k = 0; k < mo->n_out; k++) {
          int o2 = mo->out[k], f = cur.t[o2].producer;
          int lf = u[o2].lastF >= 0 ? u[o2].lastF : f;
          if (lf < P && u[o2].r0 > P) gain += bp.size[o2];
        }
        for (int k = 0; k < mo->n_in; k++) {
          int x = mo->in[k];
          if (x < 0 || cur.t[x].kind != DFL_T_ACT) continue;
          int q = g0->t[x].producer;
          if (q >= 0 && (S[q] || member[q])) continue; /* recomputed already, or in this chain */
          int lx = bp.last[x];
          if (lx >= P) continue;                          /* live over P anyway */
          if (q >= 0 && nm + ns < 8 && recomputable(g0, &g0->ops[q])) stack[ns++] = q;
          else cost += bp.size[x];
        }
      }
      for (int k = 0; k < nm; k++) member[mem[k]] = 0;
      int64_t net = gain - cost;
      if (net <= 0) continue;
      double score = (double)net / (flops + 1.0);
      if (score > best_score) {
        best_score = score;
        best = c;
        best_n = nm;
        memcpy(best_chain, mem, sizeof(int) * nm);
      }
    }
    if (best < 0) break; /* nothing frees bytes at the peak */
    for (int k = 0; k < best_n; k++) S[best_chain[k]] = 1;
  }

  /* the result: the rewritten graph and its full plan */
  dfl_plan_free(&bp);
  if (!have_cur) { n_dup = do_rewrite(g0, S, &cur, map, &dup_flops); have_cur = 1; }
  plan_with(&cur, map, elem, ctx, o, 0, &bp);
  if (bp.arena_bytes < p->arena_bytes || fits) {
    r->flops = dup_flops;
    r->n_ops = n_dup;
    dfl_plan_free(p);
    *p = bp;
    dfl_graph_free(g);
    *g = cur;
  } else {
    dfl_plan_free(&bp);
    dfl_graph_free(&cur);
  }
  r->after = p->arena_bytes;
  free(S); free(member); free(map); free(stack); free(fl); free(u);
  return p->arena_bytes <= budget ? DFL_OK : DFL_ERR;
}
