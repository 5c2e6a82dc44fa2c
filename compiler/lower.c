/*
** lower.c: the pointwise fusion groups (lower.h): which ops pointwise.def defines, and the runs of
** them that one generated kernel computes.
*/
#include <stdlib.h>
#include <string.h>
#include "compiler/lower.h"
#include "compiler/status.h"

typedef struct { dfl_opcode code; const char *ins; int outs; const char *body; } pw_row;
static const pw_row rows[] = {
#define DFL_PW(NAME, ins, outs, body) {DFL_OP_##NAME, ins, outs, body},
#include "compiler/pointwise.def"
#undef DFL_PW
};
enum { NROWS = sizeof rows / sizeof rows[0] };

typedef struct { dfl_opcode code; const char *ins; int outs; const char *pre, *body; } ro_row;
static const ro_row rrows[] = {
#define DFL_ROW(NAME, ins, outs, pre, body) {DFL_OP_##NAME, ins, outs, pre, body},
#include "compiler/rowwise.def"
#undef DFL_ROW
};
enum { NRROWS = sizeof rrows / sizeof rrows[0] };

static const pw_row *row_of(dfl_opcode code) {
  for (int k = 0; k < NROWS; k++)
    if (rows[k].code == code) return &rows[k];
  return NULL;
}
static const ro_row *rrow_of(dfl_opcode code) {
  for (int k = 0; k < NRROWS; k++)
    if (rrows[k].code == code) return &rrows[k];
  return NULL;
}
const char *dfl_lower_pw_ins(dfl_opcode code) {
  const pw_row *r = row_of(code);
  const ro_row *q = rrow_of(code);
  return r ? r->ins : q ? q->ins : NULL;
}
int dfl_lower_pw_outs(dfl_opcode code) { const pw_row *r = row_of(code); return r ? r->outs : 0; }
const char *dfl_lower_pw_body(dfl_opcode code) {
  const pw_row *r = row_of(code);
  const ro_row *q = rrow_of(code);
  return r ? r->body : q ? q->body : NULL;
}
const char *dfl_lower_row_pre(dfl_opcode code) { const ro_row *q = rrow_of(code); return q ? q->pre : NULL; }

char dfl_lower_pw_in(const dfl_graph *g, const dfl_op *op, int k) {
  const char *ins = dfl_lower_pw_ins(op->code);
  if (!ins || ins[k] != 'w' || k >= op->n_in || op->in[k] < 0 || op->a.win[k]) return ins ? ins[k] : 0;
  return dfl_tensor_numel(&g->t[op->in[k]]) == dfl_tensor_numel(&g->t[op->out[0]]) ? 'e' : 'w';
}

/* Is op's input k a window ('w') inside rows of its tensor: rows of n / cols, columns [win[k], win[k] + cols)? */
static int win_ok(const dfl_graph *g, const dfl_op *op, int k, int64_t n, int64_t cols) {
  const dfl_tensor *x = &g->t[op->in[k]];
  int64_t c = x->ndim == 2 ? x->shape[1] : 0, at = k < 2 ? op->a.win[k] : -1;
  return c >= 1 && cols >= 1 && dfl_tensor_numel(x) / c == n / cols && at >= 0 && at + cols <= c;
}

/* the float dtypes an f32 register holds exactly: an f64 or i32 value would pass through a float (a
** same-dtype COPY of them stays the library's byte copy); f8 and i64 ldf and stf do not read */
static int dtype_ok(dfl_dtype d) { return d == DFL_F32 || d == DFL_BF16 || d == DFL_F16; }

int dfl_lower_pointwise(const dfl_graph *g, const dfl_op *op) {
  const pw_row *r = row_of(op->code);
  if (!r || op->n_out != r->outs || op->n_in > (int)strlen(r->ins)) return 0;
  const dfl_tensor *y = &g->t[op->out[0]];
  int64_t n = dfl_tensor_numel(y), cols = y->ndim > 0 ? y->shape[y->ndim - 1] : 1;
  if (n <= 0) return 0;
  for (int k = 0; r->ins[k]; k++) {
    int t = k < op->n_in ? op->in[k] : -1;
    if (t < 0) { if (r->ins[k] != 's') return 0; continue; }
    const dfl_tensor *x = &g->t[t];
    int64_t m = dfl_tensor_numel(x);
    if (!dtype_ok(x->dtype)) return 0;
    if (dfl_lower_pw_in(g, op, k) == 'e' && m != n) return 0;
    if (r->ins[k] == 'c' && (cols < 1 || m != cols || n % cols)) return 0;
    if (r->ins[k] == 's' && m != 1) return 0;
    if (dfl_lower_pw_in(g, op, k) == 'w' && (y->ndim != 2 || !win_ok(g, op, k, n, cols))) return 0;
  }
  for (int k = 0; k < op->n_out; k++)
    if (!dtype_ok(g->t[op->out[k]].dtype) || dfl_tensor_numel(&g->t[op->out[k]]) != n) return 0;
  return 1;
}

/* Is op a row op in a form rowwise.def and a row group take? Its output [R, D] (D % 8 == 0, at most
** DFL_PW_ROW_MAX), segments of G = a.group = 8 L (L a power of two <= 32) dividing D; element inputs
** of its size, g inputs of G values, windows inside their rows; f32, bf16 or f16 tensors. */
int dfl_lower_rowop(const dfl_graph *g, const dfl_op *op) {
  const ro_row *r = rrow_of(op->code);
  if (!r || op->n_out != r->outs || op->n_in != (int)strlen(r->ins)) return 0;
  const dfl_tensor *y = &g->t[op->out[0]];
  const int64_t D = y->ndim == 2 ? y->shape[1] : 0, n = dfl_tensor_numel(y), G = op->a.group, L = G / 8;
  if (D < 8 || D % 8 || D > DFL_PW_ROW_MAX || G < 8 || G % 8 || L > 32 || (L & (L - 1)) || D % G || !dtype_ok(y->dtype))
    return 0;
  for (int k = 0; r->ins[k]; k++) {
    if (op->in[k] < 0) return 0;
    const dfl_tensor *x = &g->t[op->in[k]];
    const int64_t m = dfl_tensor_numel(x);
    const char in = dfl_lower_pw_in(g, op, k);
    if (!dtype_ok(x->dtype)) return 0;
    if (in == 'e' && m != n) return 0;
    if (in == 'g' && m != G) return 0;
    if (in == 'w' && !win_ok(g, op, k, n, D)) return 0;
  }
  return 1;
}

/* op's input k is read at other indices than the element's (a column, a scalar, a window, a segment
** vector): no op of the group may write it */
static int shared_in(const dfl_graph *g, const dfl_op *op, int k) {
  const char in = dfl_lower_pw_in(g, op, k);
  return in == 'c' || in == 's' || in == 'w' || in == 'g';
}
static int writes(const dfl_op *op, int t) {
  for (int k = 0; k < op->n_out; k++) if (op->out[k] == t) return 1;
  return 0;
}
static int has(const dfl_pw_group *p, int t) {
  for (int k = 0; k < p->nt; k++) if (p->t[k] == t) return 1;
  return 0;
}
static int overlaps(const int64_t *off, const int64_t *size, int a, int b) {
  if (!off || off[a] < 0 || off[b] < 0) return 0;
  return off[a] < off[b] + size[b] && off[b] < off[a] + size[a];
}

/* Can op i join p (the group of ops [p->first, i))? */
static int joins(const dfl_graph *g, const dfl_pw_group *p, int i, const int64_t *off, const int64_t *size) {
  const dfl_op *op = &g->ops[i], *first = &g->ops[p->first];
  if (p->n >= DFL_PW_MAX_OPS || op->phase != first->phase || dfl_tensor_numel(&g->t[op->out[0]]) != p->numel) return 0;
  if (dfl_lower_rowop(g, op) && p->cols && p->cols != g->t[op->out[0]].shape[1]) return 0; /* another row width */
  int add[2 * DFL_MAX_IO], na = 0;
  for (int k = 0; k < op->n_in + op->n_out; k++) {
    int t = k < op->n_in ? op->in[k] : op->out[k - op->n_in];
    if (t < 0 || has(p, t)) continue;
    int dup = 0;
    for (int m = 0; m < na; m++) dup |= add[m] == t;
    if (!dup) add[na++] = t;
  }
  if (p->nt + na > DFL_PW_MAX_T) return 0;
  /* a column or scalar input written inside the group, by an earlier op or by this one */
  for (int j = p->first; j <= i; j++) {
    const dfl_op *a = &g->ops[j];
    for (int k = 0; k < a->n_in; k++) {
      if (a->in[k] < 0 || !shared_in(g, a, k)) continue;
      for (int m = p->first; m <= i; m++)
        if (writes(&g->ops[m], a->in[k])) return 0;
    }
  }
  /* two tensors of the group in the same bytes */
  for (int m = 0; m < na; m++)
    for (int k = 0; k < p->nt; k++)
      if (overlaps(off, size, add[m], p->t[k])) return 0;
  for (int m = 0; m < na; m++)
    for (int k = 0; k < m; k++)
      if (overlaps(off, size, add[m], add[k])) return 0;
  return 1;
}

static void take(const dfl_graph *g, dfl_pw_group *p, int i) {
  const dfl_op *op = &g->ops[i];
  for (int k = 0; k < op->n_in + op->n_out; k++) {
    int t = k < op->n_in ? op->in[k] : op->out[k - op->n_in];
    if (t >= 0 && !has(p, t)) p->t[p->nt++] = t;
  }
  p->n++;
}

/* Can QUANT_F8 op i close group p as a row group (lower.h)? */
static int quant_tail(const dfl_graph *g, const dfl_pw_group *p, int i, const int64_t *off, const int64_t *size) {
  const dfl_op *op = &g->ops[i];
  if (op->code != DFL_OP_QUANT_F8 || op->n_in != 1 || op->n_out != 2 || p->quant || p->first + p->n != i ||
      p->n >= DFL_PW_MAX_OPS || op->phase != g->ops[p->first].phase || p->nt + 2 > DFL_PW_MAX_T)
    return 0;
  const dfl_tensor *x = &g->t[op->in[0]];
  int64_t C = x->shape[x->ndim - 1];
  if (!dtype_ok(x->dtype) || dfl_tensor_numel(x) != p->numel || C % 8 || C > DFL_PW_ROW_MAX || (p->cols && p->cols != C))
    return 0;
  int written = 0;
  for (int j = p->first; j < i; j++) written |= writes(&g->ops[j], op->in[0]);
  if (!written) return 0;
  for (int m = 0; m < 2; m++)
    for (int k = 0; k < p->nt; k++)
      if (op->out[m] == p->t[k] || overlaps(off, size, op->out[m], p->t[k])) return 0;
  return 1;
}

int dfl_lower_groups(const dfl_graph *g, const int64_t *offset, const int64_t *size, dfl_groups *out) {
  memset(out, 0, sizeof *out);
  out->nops = g->nops;
  out->of_op = malloc(sizeof(int) * (g->nops + 1));
  out->g = malloc(sizeof(dfl_pw_group) * (g->nops + 1));
  if (!out->of_op || !out->g) { dfl_groups_free(out); return DFL_ENOMEM; }
  dfl_pw_group *cur = NULL;
  for (int i = 0; i < g->nops; i++) {
    out->of_op[i] = -1;
    if (cur && quant_tail(g, cur, i, offset, size)) { /* the group becomes a row group; nothing joins after */
      const dfl_tensor *x = &g->t[g->ops[i].in[0]];
      cur->cols = x->shape[x->ndim - 1];
      cur->rows = cur->numel / cur->cols;
      cur->quant = 1;
      take(g, cur, i);
      out->of_op[i] = (int)(cur - out->g);
      cur = NULL;
      continue;
    }
    const int ro = dfl_lower_rowop(g, &g->ops[i]);
    if (!ro && !dfl_lower_pointwise(g, &g->ops[i])) { cur = NULL; continue; }
    if (!cur || !joins(g, cur, i, offset, size)) {
      cur = &out->g[out->n++];
      memset(cur, 0, sizeof *cur);
      cur->first = i;
      cur->numel = dfl_tensor_numel(&g->t[g->ops[i].out[0]]);
      cur->vec = cur->numel % 8 == 0 ? 8 : 1;
    }
    if (ro) cur->cols = g->t[g->ops[i].out[0]].shape[1], cur->rows = cur->numel / cur->cols;
    take(g, cur, i);
    out->of_op[i] = (int)(cur - out->g);
  }
  /* a row op alone stays its library kernel (rowwise.def): its group dissolves */
  int n = 0;
  for (int k = 0; k < out->n; k++) {
    const dfl_pw_group *p = &out->g[k];
    if (p->n == 1 && dfl_lower_rowop(g, &g->ops[p->first])) { out->of_op[p->first] = -1; continue; }
    for (int j = p->first; j < p->first + p->n; j++) out->of_op[j] = n;
    out->g[n++] = *p;
  }
  out->n = n;
  return DFL_OK;
}

void dfl_groups_free(dfl_groups *gs) {
  free(gs->g);
  free(gs->of_op);
  memset(gs, 0, sizeof *gs);
}

int dfl_lower_span(const dfl_graph *g, int *first, int *last) {
  dfl_groups gs;
  int rc = dfl_lower_groups(g, NULL, NULL, &gs);
  if (rc) return rc;
  for (int i = 0; i < g->nops; i++) {
    int k = gs.of_op[i];
    first[i] = k < 0 ? i : gs.g[k].first;
    last[i] = k < 0 ? i : gs.g[k].first + gs.g[k].n - 1;
  }
  dfl_groups_free(&gs);
  return DFL_OK;
}
