/*
** graph.c: construction, validation, queries, FLOP counts and the text dump of the IR.
**
** dfl_op_add checks every op against its contract in graph.h. A mismatch is a bug in a graph
** builder, not a user error (users never write ops), so it aborts with the op's label and the
** offending shapes rather than returning a status nobody could act on.
*/
#include "compiler/graph.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void dfl_graph_init(dfl_graph *g) {
  memset(g, 0, sizeof *g);
  g->cur_phase = DFL_PH_FORWARD;
}

void dfl_graph_free(dfl_graph *g) {
  free(g->t);
  free(g->ops);
  memset(g, 0, sizeof *g);
}

static void *xrealloc(void *p, size_t n) {
  void *q = realloc(p, n);
  if (!q) {
    fprintf(stderr, "dflc: out of memory growing the graph\n");
    abort();
  }
  return q;
}

int dfl_tensor_new(dfl_graph *g, const char *name, dfl_dtype dt, dfl_tkind kind, int ndim, const int64_t *shape) {
  if (ndim < 1 || ndim > DFL_MAX_DIMS || (unsigned)dt >= DFL_DTYPE_COUNT || (unsigned)kind >= DFL_TKIND_COUNT) {
    fprintf(stderr, "dflc: internal error: tensor '%s': bad ndim %d / dtype / kind\n", name ? name : "?", ndim);
    abort();
  }
  for (int i = 0; i < ndim; i++)
    if (shape[i] <= 0) {
      fprintf(stderr, "dflc: internal error: tensor '%s': dimension %d is %lld (must be > 0)\n",
              name ? name : "?", i, (long long)shape[i]);
      abort();
    }
  /* Callers pass another tensor's shape or name (dfl_add: X->shape), which lives in g->t: copy
  ** both before the realloc below can free it. */
  int64_t sh[DFL_MAX_DIMS];
  char nm[sizeof g->t[0].name];
  for (int i = 0; i < ndim; i++) sh[i] = shape[i];
  snprintf(nm, sizeof nm, "%s", name ? name : "");
  if (g->nt == g->cap_t) {
    g->cap_t = g->cap_t ? 2 * g->cap_t : 64;
    g->t = xrealloc(g->t, (size_t)g->cap_t * sizeof *g->t);
  }
  int id = g->nt++;
  dfl_tensor *t = &g->t[id];
  memset(t, 0, sizeof *t);
  if (nm[0])
    memcpy(t->name, nm, sizeof nm);
  else
    snprintf(t->name, sizeof t->name, "t%d", id);
  t->dtype = dt;
  t->kind = kind;
  t->ndim = ndim;
  for (int i = 0; i < ndim; i++) t->shape[i] = sh[i];
  t->producer = -1;
  t->requires_grad = kind == DFL_T_PARAM;
  t->grad = t->master = t->adam_m = t->adam_v = t->grad_acc = -1;
  return id;
}

int dfl_tensor_2d(dfl_graph *g, const char *name, dfl_dtype dt, dfl_tkind kind, int64_t r, int64_t c) {
  int64_t s[2] = {r, c};
  return dfl_tensor_new(g, name, dt, kind, 2, s);
}

int dfl_tensor_1d(dfl_graph *g, const char *name, dfl_dtype dt, dfl_tkind kind, int64_t n) {
  return dfl_tensor_new(g, name, dt, kind, 1, &n);
}

int dfl_tensor_find(const dfl_graph *g, const char *name) {
  for (int i = 0; i < g->nt; i++)
    if (!strcmp(g->t[i].name, name)) return i;
  return -1;
}

/* --- queries --- */

int64_t dfl_tensor_numel(const dfl_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n;
}

size_t dfl_dtype_size(dfl_dtype dt) {
  switch (dt) {
  case DFL_F32: return 4;
  case DFL_BF16: return 2;
  case DFL_F16: return 2;
  case DFL_F64: return 8;
  case DFL_I32: return 4;
  case DFL_I64: return 8;
  case DFL_F8E4M3: return 1;
  default: return 0;
  }
}

int64_t dfl_tensor_bytes(const dfl_tensor *t) { return dfl_tensor_numel(t) * (int64_t)dfl_dtype_size(t->dtype); }

const char *dfl_dtype_name(dfl_dtype dt) {
  static const char *n[] = {"f32", "bf16", "f16", "f64", "i32", "i64", "f8e4m3"};
  return (unsigned)dt < DFL_DTYPE_COUNT ? n[dt] : "?";
}

const char *dfl_opcode_name(dfl_opcode c) {
  static const char *n[] = {
#define DFL_OP(NAME, name, family, diff) #name,
#include "compiler/ops.def"
#undef DFL_OP
  };
  return (unsigned)c < DFL_OP_COUNT ? n[c] : "?";
}

const char *dfl_tkind_name(dfl_tkind k) {
  static const char *n[] = {"input", "param", "frozen", "state", "grad", "output", "act"};
  return (unsigned)k < DFL_TKIND_COUNT ? n[k] : "?";
}

const char *dfl_phase_name(dfl_phase p) {
  static const char *n[] = {"target", "forward", "loss", "backward", "optimizer"};
  return (unsigned)p < DFL_PH_COUNT ? n[p] : "?";
}

int dfl_tensor_is_persistent(const dfl_tensor *t) { return t->kind != DFL_T_ACT; }

static int is_float(dfl_dtype d) { return d == DFL_F32 || d == DFL_BF16 || d == DFL_F16 || d == DFL_F64; }

/* --- validation --- */

typedef struct {
  const dfl_graph *g;
  dfl_opcode code;
  const char *label;
  const int *in, *out;
  int n_in, n_out;
} vctx;

static void shape_str(const dfl_tensor *t, char *buf, size_t n) {
  int k = snprintf(buf, n, "%s[", t->name);
  for (int i = 0; i < t->ndim && k < (int)n; i++)
    k += snprintf(buf + k, n - (size_t)k, "%s%lld", i ? "," : "", (long long)t->shape[i]);
  if (k < (int)n) snprintf(buf + k, n - (size_t)k, "] %s", dfl_dtype_name(t->dtype));
}

static void vfail(const vctx *v, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "dflc: internal error: op %s (%s): ", dfl_opcode_name(v->code), v->label);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n  inputs:");
  char b[256];
  for (int i = 0; i < v->n_in; i++) {
    if (v->in[i] < 0 || v->in[i] >= v->g->nt) { fprintf(stderr, " (%d)", v->in[i]); continue; }
    shape_str(&v->g->t[v->in[i]], b, sizeof b);
    fprintf(stderr, " %s;", b);
  }
  fprintf(stderr, "\n  outputs:");
  for (int i = 0; i < v->n_out; i++) {
    if (v->out[i] < 0 || v->out[i] >= v->g->nt) { fprintf(stderr, " (%d)", v->out[i]); continue; }
    shape_str(&v->g->t[v->out[i]], b, sizeof b);
    fprintf(stderr, " %s;", b);
  }
  fprintf(stderr, "\n");
  abort();
}

static const dfl_tensor *TI(const vctx *v, int i) { return &v->g->t[v->in[i]]; }
static const dfl_tensor *TO(const vctx *v, int i) { return &v->g->t[v->out[i]]; }
static int64_t NI(const vctx *v, int i) { return dfl_tensor_numel(TI(v, i)); }
static int64_t NO(const vctx *v, int i) { return dfl_tensor_numel(TO(v, i)); }

static void need_io(const vctx *v, int n_in, int n_out) {
  if (v->n_in != n_in || v->n_out != n_out)
    vfail(v, "expects %d inputs and %d outputs, got %d and %d", n_in, n_out, v->n_in, v->n_out);
}
static void need_float_in(const vctx *v, int i) {
  if (!is_float(TI(v, i)->dtype)) vfail(v, "input %d must be a float tensor", i);
}
static void need_float_out(const vctx *v, int i) {
  if (!is_float(TO(v, i)->dtype)) vfail(v, "output %d must be a float tensor", i);
}
static void need_i32_in(const vctx *v, int i) {
  if (TI(v, i)->dtype != DFL_I32) vfail(v, "input %d must be i32", i);
}
static void need_i32_out(const vctx *v, int i) {
  if (TO(v, i)->dtype != DFL_I32) vfail(v, "output %d must be i32", i);
}
static void need_2d_in(const vctx *v, int i) {
  if (TI(v, i)->ndim != 2) vfail(v, "input %d must be 2-D", i);
}
static void need_numel_in(const vctx *v, int i, int64_t n) {
  if (NI(v, i) != n) vfail(v, "input %d must have %lld elements", i, (long long)n);
}
static void need_numel_out(const vctx *v, int i, int64_t n) {
  if (NO(v, i) != n) vfail(v, "output %d must have %lld elements", i, (long long)n);
}
static void need_same_shape_out(const vctx *v, int o, int i) {
  const dfl_tensor *a = TO(v, o), *b = TI(v, i);
  int same = a->ndim == b->ndim;
  for (int k = 0; same && k < a->ndim; k++) same = a->shape[k] == b->shape[k];
  if (!same) vfail(v, "output %d must have the shape of input %d", o, i);
}
static void need_same_shape_in(const vctx *v, int i, int j) {
  const dfl_tensor *a = TI(v, i), *b = TI(v, j);
  int same = a->ndim == b->ndim;
  for (int k = 0; same && k < a->ndim; k++) same = a->shape[k] == b->shape[k];
  if (!same) vfail(v, "inputs %d and %d must have the same shape", i, j);
}
static int64_t rows(const dfl_tensor *t) { return t->ndim == 1 ? 1 : t->shape[0]; }
static int64_t cols(const dfl_tensor *t) { return t->shape[t->ndim - 1]; }

/* RMSNORM's quantized form (dfl_fuse_quant): output q is f8e4m3, output s the f32 row scales; rows
** are whole groups (width w), values rounded to a.mid_dtype before quantizing. */
static void need_quant_out(const vctx *v, const dfl_attrs *a, int q, int s, int64_t w) {
  if (TO(v, q)->dtype != DFL_F8E4M3) vfail(v, "quantized form: output %d must be f8e4m3", q);
  if (TO(v, s)->dtype != DFL_F32) vfail(v, "quantized form: output %d (row scales) must be f32", s);
  if (w != cols(TI(v, 0))) vfail(v, "quantized form: the group must be the whole row");
  need_numel_out(v, s, rows(TI(v, 0)));
  if (a->mid_dtype != DFL_F32 && a->mid_dtype != DFL_BF16) vfail(v, "quantized form: the intermediate dtype must be f32 or bf16");
}

static void check_attention(const vctx *v, const dfl_attrs *a, int bwd) {
  if (a->heads <= 0 || a->kv_heads <= 0 || a->head_dim <= 0 || a->heads % a->kv_heads)
    vfail(v, "heads %d must be a positive multiple of kv_heads %d (head_dim %d)", a->heads, a->kv_heads, a->head_dim);
  if (a->batch <= 0 || a->S <= 0 || a->window < 0) vfail(v, "batch %d, S %d, window %d", a->batch, a->S, a->window);
  int64_t qd = (int64_t)a->heads * a->head_dim, kd = (int64_t)a->kv_heads * a->head_dim;
  int64_t qrows, nf; /* rows of q, number of float forward inputs */
  if (a->mask == DFL_MASK_CAUSAL) {
    nf = 3;
    qrows = (int64_t)a->batch * a->S;
    if (bwd) need_io(v, 6, 3); else need_io(v, 3, 2);
    need_numel_in(v, 0, qrows * qd);
    need_numel_in(v, 1, qrows * kd);
    need_numel_in(v, 2, qrows * kd);
  } else if (a->mask == DFL_MASK_DFLASH) {
    nf = 5;
    if (a->N <= 0 || a->B <= 0) vfail(v, "N %d and B %d must be positive", a->N, a->B);
    qrows = (int64_t)a->batch * a->N * a->B;
    if (bwd) need_io(v, 10, 5); else need_io(v, 7, 2);
    need_numel_in(v, 0, qrows * qd);
    need_numel_in(v, 1, (int64_t)a->batch * a->S * kd);
    need_numel_in(v, 2, (int64_t)a->batch * a->S * kd);
    need_numel_in(v, 3, qrows * kd);
    need_numel_in(v, 4, qrows * kd);
    need_i32_in(v, 5);
    need_i32_in(v, 6);
    need_numel_in(v, 5, (int64_t)a->batch * a->N);
    need_numel_in(v, 6, (int64_t)a->batch * a->N);
  } else {
    vfail(v, "unknown mask kind %d", (int)a->mask);
    return;
  }
  for (int i = 0; i < nf; i++) need_float_in(v, i);
  int base = (int)(a->mask == DFL_MASK_CAUSAL ? 3 : 7);
  if (!bwd) {
    need_same_shape_out(v, 0, 0);
    need_float_out(v, 0);
    need_float_out(v, 1);
    need_numel_out(v, 1, qrows * a->heads);
  } else {
    need_numel_in(v, base, qrows * qd);           /* o */
    need_numel_in(v, base + 1, qrows * a->heads); /* lse */
    need_numel_in(v, base + 2, qrows * qd);       /* do */
    for (int i = 0; i < nf; i++) {
      need_float_out(v, i);
      need_numel_out(v, i, NI(v, i));
    }
  }
}

static void validate(const vctx *v, const dfl_attrs *a) {
  for (int i = 0; i < v->n_in; i++) {
    if (v->code == DFL_OP_SCALE && i == 1 && v->in[i] == -1) continue;
    if (v->in[i] < 0 || v->in[i] >= v->g->nt) vfail(v, "input %d is not a tensor id (%d)", i, v->in[i]);
    const dfl_tensor *t = TI(v, i);
    if (t->kind == DFL_T_ACT && t->producer < 0)
      vfail(v, "input %d (%s) is an activation that no earlier op writes", i, t->name);
  }
  for (int i = 0; i < v->n_out; i++)
    if (v->out[i] < 0 || v->out[i] >= v->g->nt) vfail(v, "output %d is not a tensor id (%d)", i, v->out[i]);
  switch (v->code) {
  case DFL_OP_IOTA_MOD:
    need_io(v, 0, 1);
    need_i32_out(v, 0);
    if (a->n <= 0) vfail(v, "a.n must be positive");
    break;
  case DFL_OP_DFLASH_BLOCKS: {
    need_io(v, 4, 4);
    if (a->batch <= 0 || a->S <= 0 || a->N <= 0 || a->B <= 0) vfail(v, "batch, S, N, B must be positive");
    int64_t bs = (int64_t)a->batch * a->S, bn = (int64_t)a->batch * a->N, q = bn * a->B;
    for (int i = 0; i < 4; i++) need_i32_in(v, i);
    need_numel_in(v, 0, bs);
    need_numel_in(v, 1, bs);
    need_numel_in(v, 2, bn);
    need_numel_in(v, 3, bn);
    for (int i = 0; i < 3; i++) need_i32_out(v, i), need_numel_out(v, i, q);
    need_float_out(v, 3);
    need_numel_out(v, 3, q);
    break;
  }
  case DFL_OP_GATHER:
    need_io(v, 2, 1);
    need_float_in(v, 0);
    need_2d_in(v, 0);
    need_i32_in(v, 1);
    need_float_out(v, 0);
    if (TO(v, 0)->ndim != 2 || TO(v, 0)->shape[0] != NI(v, 1) || TO(v, 0)->shape[1] != TI(v, 0)->shape[1])
      vfail(v, "output must be [len(ids), table columns]");
    break;
  case DFL_OP_MATMUL: {
    need_io(v, a->beta != 0 ? 3 : 2, 1);
    need_float_in(v, 0), need_float_in(v, 1), need_float_out(v, 0);
    if (a->beta != 0) {
      if (a->beta != 1) vfail(v, "beta must be 0 or 1 (accumulate)");
      if (v->out[0] == v->in[2]) { /* accumulating, in place (dfl_fuse) */
        if (!dfl_tensor_is_persistent(TI(v, 2)) || TI(v, 2)->dtype != DFL_F32)
          vfail(v, "accumulating: the accumulator must be a persistent f32 tensor");
      } else { /* addend, out of place (dfl_fuse_add) */
        if (v->out[0] == v->in[0] || v->out[0] == v->in[1]) vfail(v, "with an addend: the output must not be A or B");
        if (TI(v, 2)->dtype != TO(v, 0)->dtype) vfail(v, "with an addend: in[2] must have the output's dtype");
        need_same_shape_out(v, 0, 2);
      }
    }
    need_2d_in(v, 0), need_2d_in(v, 1);
    const dfl_tensor *A = TI(v, 0), *B = TI(v, 1), *C = TO(v, 0);
    int64_t M = a->trans_a ? A->shape[1] : A->shape[0], K = a->trans_a ? A->shape[0] : A->shape[1];
    int64_t K2 = a->trans_b ? B->shape[1] : B->shape[0], N = a->trans_b ? B->shape[0] : B->shape[1];
    if (K != K2) vfail(v, "inner dimensions differ (%lld vs %lld, trans_a %d trans_b %d)", (long long)K, (long long)K2, a->trans_a, a->trans_b);
    if (C->ndim != 2 || C->shape[0] != M || C->shape[1] != N) vfail(v, "output must be [%lld,%lld]", (long long)M, (long long)N);
    break;
  }
  case DFL_OP_ADD:
    need_io(v, 2, 1);
    need_float_in(v, 0), need_float_in(v, 1), need_float_out(v, 0);
    need_same_shape_in(v, 0, 1);
    need_same_shape_out(v, 0, 0);
    break;
  case DFL_OP_RMSNORM:
  case DFL_OP_RMSNORM_BWD: {
    int bwd = v->code == DFL_OP_RMSNORM_BWD, q8 = !bwd && v->n_out == 3;
    /* bwd: an addend (dfl_fuse_add) as 5th input; forward: a quantized form (dfl_fuse_quant) */
    need_io(v, bwd ? (v->n_in == 5 ? 5 : 4) : 2, q8 ? 3 : 2);
    for (int i = 0; i < v->n_in; i++) need_float_in(v, i);
    if (q8) need_quant_out(v, a, 0, 2, a->group);
    else need_float_out(v, 0);
    need_float_out(v, 1);
    int64_t D = cols(TI(v, 0));
    if (a->group <= 0 || D % a->group) vfail(v, "group %d must divide the row width %lld", a->group, (long long)D);
    need_numel_in(v, 1, a->group);
    need_same_shape_out(v, 0, 0);
    if (!bwd) {
      need_numel_out(v, 1, NI(v, 0) / a->group);
    } else {
      need_numel_in(v, 2, NI(v, 0) / a->group);
      need_same_shape_in(v, 3, 0);
      if (v->n_in == 5) need_same_shape_in(v, 4, 0);
      need_numel_out(v, 1, a->group);
    }
    break;
  }
  case DFL_OP_ROPE: {
    /* pair form (dfl_fuse_rope_pair): x2 (and w2) after the single form's inputs, out2 */
    int pair = v->n_out == 2, normed = v->n_in == (pair ? 5 : 3);
    if (pair) {
      need_io(v, normed ? 5 : 3, 2);
      int x2 = normed ? 3 : 2;
      need_float_in(v, x2), need_float_out(v, 1);
      if (normed) need_float_in(v, 4), need_numel_in(v, 4, a->head_dim);
      if (a->kv_heads <= 0 || cols(TI(v, x2)) != (int64_t)a->kv_heads * a->head_dim)
        vfail(v, "pair form: the second row width must be kv_heads*head_dim = %d", a->kv_heads * a->head_dim);
      if (NI(v, x2) / cols(TI(v, x2)) != NI(v, 1)) vfail(v, "pair form: both inputs need one row per position");
      need_same_shape_out(v, 1, x2);
    }
    if (normed) { /* normed form (dfl_fuse_norm_rope) */
      if (!pair) need_io(v, 3, 1);
      need_float_in(v, 2);
      need_numel_in(v, 2, a->head_dim);
      if (!(a->eps > 0)) vfail(v, "with a norm weight: eps must be positive");
      if (a->mid_dtype != DFL_F32 && a->mid_dtype != DFL_BF16 && a->mid_dtype != DFL_F16)
        vfail(v, "with a norm weight: the intermediate dtype must be f32, bf16 or f16");
    } else if (!pair)
      need_io(v, 2, 1);
    need_float_in(v, 0), need_i32_in(v, 1), need_float_out(v, 0);
    if (a->heads <= 0 || a->head_dim <= 0 || a->head_dim % 2) vfail(v, "heads %d, head_dim %d (must be even)", a->heads, a->head_dim);
    if (cols(TI(v, 0)) != (int64_t)a->heads * a->head_dim) vfail(v, "row width must be heads*head_dim = %d", a->heads * a->head_dim);
    if (a->rot_dim < 0 || a->rot_dim % 2 || a->rot_dim > a->head_dim) vfail(v, "rot_dim %d must be even and at most head_dim", a->rot_dim);
    if (a->rot_dim && a->rot_dim != a->head_dim && (normed || pair)) vfail(v, "partial rotary has no fused form");
    need_numel_in(v, 1, NI(v, 0) / cols(TI(v, 0)));
    need_same_shape_out(v, 0, 0);
    break;
  }
  case DFL_OP_ATTENTION: check_attention(v, a, 0); break;
  case DFL_OP_ATTENTION_BWD: check_attention(v, a, 1); break;
  case DFL_OP_SWIGLU: /* quantized form (dfl_fuse_quant): out q f8e4m3, s[R] f32 */
    need_io(v, 2, v->n_out == 2 ? 2 : 1);
    need_float_in(v, 0), need_float_in(v, 1);
    if (v->n_out == 2) need_quant_out(v, a, 0, 1, cols(TI(v, 0)));
    else need_float_out(v, 0);
    need_same_shape_in(v, 0, 1);
    need_same_shape_out(v, 0, 0);
    break;
  case DFL_OP_SWIGLU_BWD:
    need_io(v, 3, 2);
    for (int i = 0; i < 3; i++) need_float_in(v, i);
    need_same_shape_in(v, 0, 1);
    need_same_shape_in(v, 0, 2);
    need_same_shape_out(v, 0, 0);
    need_same_shape_out(v, 1, 0);
    break;
  case DFL_OP_LINEAR_CE: {
    need_io(v, 4, 5);
    need_float_in(v, 0), need_float_in(v, 1), need_i32_in(v, 2), need_float_in(v, 3);
    need_2d_in(v, 0), need_2d_in(v, 1);
    int64_t R = TI(v, 0)->shape[0], H = TI(v, 0)->shape[1];
    if (TI(v, 1)->shape[1] != H) vfail(v, "w_lm must be [V, %lld]", (long long)H);
    need_numel_in(v, 2, R);
    need_numel_in(v, 3, R);
    need_numel_out(v, 0, 1);
    for (int i = 1; i < 4; i++) need_numel_out(v, i, R);
    for (int i = 0; i < 5; i++) need_float_out(v, i);
    if (a->B > 1 && R % a->B) vfail(v, "anchor rows every %d: the row count %lld must be a multiple", a->B, (long long)R);
    need_same_shape_out(v, 4, 0);
    if (a->vocab_chunk < 0 || a->topk < 0) vfail(v, "vocab_chunk and topk must be >= 0");
    break;
  }
  case DFL_OP_SCATTER_ADD:
    need_io(v, 2, 1);
    need_float_in(v, 0), need_2d_in(v, 0), need_i32_in(v, 1), need_float_out(v, 0);
    need_numel_in(v, 1, TI(v, 0)->shape[0]);
    if (TO(v, 0)->ndim != 2 || TO(v, 0)->shape[1] != TI(v, 0)->shape[1]) vfail(v, "output must be [V, %lld]", (long long)TI(v, 0)->shape[1]);
    break;
  case DFL_OP_SCALE:
    if (v->n_in < 1 || v->n_in > 2 || v->n_out != 1) vfail(v, "expects 1 or 2 inputs and 1 output");
    need_float_in(v, 0), need_float_out(v, 0);
    if (v->n_in == 2 && v->in[1] >= 0) need_float_in(v, 1), need_numel_in(v, 1, 1);
    need_numel_out(v, 0, NI(v, 0));
    break;
  case DFL_OP_SUM:
    need_io(v, 1, 1);
    need_float_in(v, 0), need_float_out(v, 0), need_numel_out(v, 0, 1);
    break;
  case DFL_OP_DFLASH_METRICS: {
    need_io(v, 4, 1);
    if (a->batch <= 0 || a->N <= 0 || a->B <= 0) vfail(v, "batch, N, B must be positive");
    int64_t q = (int64_t)a->batch * a->N * a->B;
    for (int i = 0; i < 3; i++) need_float_in(v, i), need_numel_in(v, i, q);
    need_i32_in(v, 3), need_numel_in(v, 3, (int64_t)a->batch * a->N);
    need_float_out(v, 0), need_numel_out(v, 0, DFL_METRIC_COUNT + 2 * (int64_t)a->B);
    break;
  }
  case DFL_OP_ACCUM:
    need_io(v, 2, 1);
    need_float_in(v, 0), need_float_in(v, 1);
    if (v->out[0] != v->in[0]) vfail(v, "output must be the accumulator itself (in place)");
    if (!dfl_tensor_is_persistent(TI(v, 0))) vfail(v, "the accumulator must be persistent");
    need_numel_in(v, 1, NI(v, 0));
    break;
  case DFL_OP_SUMSQ_ACC:
    need_io(v, 2, 1);
    need_float_in(v, 0), need_float_in(v, 1), need_numel_in(v, 0, 1);
    if (v->out[0] != v->in[0]) vfail(v, "output must be the accumulator itself (in place)");
    break;
  case DFL_OP_OPT_PREP:
    need_io(v, 3, 1);
    for (int i = 0; i < 3; i++) need_float_in(v, i);
    need_numel_in(v, 0, 1), need_numel_in(v, 1, 1), need_numel_in(v, 2, DFL_OPT_COUNT);
    if (v->out[0] != v->in[2]) vfail(v, "output must be the state itself (in place)");
    break;
  case DFL_OP_ADAMW:
    need_io(v, 6, 5);
    for (int i = 0; i < 6; i++) need_float_in(v, i);
    for (int i = 1; i < 5; i++) need_numel_in(v, i, NI(v, 0));
    need_numel_in(v, 5, DFL_OPT_COUNT);
    for (int i = 0; i < 5; i++)
      if (v->out[i] != v->in[i]) vfail(v, "outputs must be param, master, m, v, grad themselves (in place)");
    break;
  case DFL_OP_COPY: /* also a reshape: only the element count must agree */
    need_io(v, 1, 1);
    need_numel_out(v, 0, NI(v, 0));
    break;
  case DFL_OP_CONCAT_COLS: {
    if (v->n_in < 1 || v->n_out != 1) vfail(v, "expects 1..%d inputs and 1 output", DFL_MAX_IO);
    int64_t R = rows(TI(v, 0)), C = 0;
    for (int i = 0; i < v->n_in; i++) {
      need_float_in(v, i);
      if (rows(TI(v, i)) != R || TI(v, i)->ndim > 2) vfail(v, "input %d must be [%lld, C] like input 0", i, (long long)R);
      C += cols(TI(v, i));
    }
    need_float_out(v, 0);
    if (TO(v, 0)->ndim != 2 || TO(v, 0)->shape[0] != R || TO(v, 0)->shape[1] != C)
      vfail(v, "output must be [%lld, %lld]", (long long)R, (long long)C);
    break;
  }
  case DFL_OP_FILL:
    need_io(v, 0, 1);
    need_float_out(v, 0);
    break;
  case DFL_OP_BLOCK_ROWS: case DFL_OP_BLOCK_EXPAND: case DFL_OP_BLOCK_EXPAND_BWD: {
    need_io(v, 1, 1);
    need_float_in(v, 0), need_float_out(v, 0);
    need_2d_in(v, 0);
    if (TO(v, 0)->ndim != 2) vfail(v, "output must be 2-D");
    if (TI(v, 0)->dtype != TO(v, 0)->dtype) vfail(v, "input and output must have one dtype");
    if (a->B < 2) vfail(v, "a.B (the block size) must be >= 2, got %d", a->B);
    const dfl_tensor *full = v->code == DFL_OP_BLOCK_EXPAND ? TO(v, 0) : TI(v, 0);
    const dfl_tensor *part = v->code == DFL_OP_BLOCK_EXPAND ? TI(v, 0) : TO(v, 0);
    int64_t Q = full->shape[0], C = full->shape[1];
    if (Q % a->B) vfail(v, "the full tensor's rows (%lld) must be a multiple of B = %d", (long long)Q, a->B);
    if (part->shape[0] != Q / a->B + 2 || part->shape[1] != C)
      vfail(v, "the block-row tensor must be [%lld, %lld] (Q/B + 2 rows)", (long long)(Q / a->B + 2), (long long)C);
    if (v->code == DFL_OP_BLOCK_ROWS && TI(v, 0)->requires_grad)
      vfail(v, "input %s requires a gradient, which BLOCK_ROWS does not pass back", TI(v, 0)->name);
    break;
  }
  case DFL_OP_BLOCK_DROP: case DFL_OP_BLOCK_UNDROP: {
    need_io(v, 1, 1);
    const dfl_tensor *X = TI(v, 0), *O = TO(v, 0);
    if (X->dtype != O->dtype) vfail(v, "input and output must have one dtype");
    if (!is_float(X->dtype) && (X->dtype != DFL_I32 || v->code == DFL_OP_BLOCK_UNDROP))
      vfail(v, "the tensors must be float (BLOCK_DROP: or i32)");
    if (X->ndim != O->ndim || X->ndim < 1 || X->ndim > 2) vfail(v, "input and output must both be 1-D or 2-D");
    if (a->B < 2) vfail(v, "a.B (the block size) must be >= 2, got %d", a->B);
    const dfl_tensor *full = v->code == DFL_OP_BLOCK_DROP ? X : O, *part = v->code == DFL_OP_BLOCK_DROP ? O : X;
    int64_t Q = full->shape[0];
    if (Q % a->B) vfail(v, "the full tensor's rows (%lld) must be a multiple of B = %d", (long long)Q, a->B);
    if (part->shape[0] != Q - Q / a->B || (X->ndim == 2 && X->shape[1] != O->shape[1]))
      vfail(v, "the dropped tensor must have %lld rows (Q - Q/B) of the full tensor's columns", (long long)(Q - Q / a->B));
    break;
  }
  case DFL_OP_QUANT_F8:
    need_io(v, 1, 2);
    need_float_in(v, 0), need_2d_in(v, 0);
    need_same_shape_out(v, 0, 0);
    if (TO(v, 0)->dtype != DFL_F8E4M3) vfail(v, "output 0 must be f8e4m3");
    if (TO(v, 1)->dtype != DFL_F32) vfail(v, "output 1 (the row scales) must be f32");
    need_numel_out(v, 1, rows(TI(v, 0)));
    break;
  case DFL_OP_MATMUL_F8: {
    need_io(v, a->beta != 0 ? 5 : 4, 1);
    for (int i = 0; i < 2; i++)
      if (TI(v, i)->dtype != DFL_F8E4M3 || TI(v, i)->ndim != 2) vfail(v, "input %d must be a 2-D f8e4m3 tensor", i);
    for (int i = 2; i < 4; i++)
      if (TI(v, i)->dtype != DFL_F32) vfail(v, "input %d (scales) must be f32", i);
    need_float_out(v, 0);
    const dfl_tensor *X = TI(v, 0), *W = TI(v, 1), *Y = TO(v, 0);
    if (X->shape[1] != W->shape[1]) vfail(v, "inner dimensions differ (%lld vs %lld)", (long long)X->shape[1], (long long)W->shape[1]);
    need_numel_in(v, 2, X->shape[0]), need_numel_in(v, 3, W->shape[0]);
    if (Y->ndim != 2 || Y->shape[0] != X->shape[0] || Y->shape[1] != W->shape[0])
      vfail(v, "output must be [%lld,%lld]", (long long)X->shape[0], (long long)W->shape[0]);
    if (a->beta != 0) {
      if (a->beta != 1) vfail(v, "beta must be 0 or 1 (addend)");
      if (TI(v, 4)->dtype != Y->dtype || v->out[0] == v->in[4]) vfail(v, "the addend must have the output's dtype, and not be the output");
      need_same_shape_out(v, 0, 4);
    }
    break;
  }
  case DFL_OP_CONV1D_SILU:
    need_io(v, 2, v->n_out == 3 ? 3 : 1);
    need_float_in(v, 0), need_float_in(v, 1), need_float_out(v, 0);
    if (TI(v, 0)->ndim != 2 || TI(v, 1)->ndim != 2 || TI(v, 1)->shape[0] != cols(TI(v, 0)))
      vfail(v, "x must be [R,C] and w [C,K]");
    if (a->S <= 0 || rows(TI(v, 0)) % a->S) vfail(v, "the rows must be whole sequences of a.S = %d", a->S);
    if (v->n_out == 3) { /* split form: q, k normalized, v */
      const int64_t D = cols(TO(v, 0)), R = rows(TI(v, 0)), C = cols(TI(v, 0));
      need_float_out(v, 1), need_float_out(v, 2);
      if (2 * D >= C || rows(TO(v, 0)) != R || rows(TO(v, 1)) != R || cols(TO(v, 1)) != D || rows(TO(v, 2)) != R ||
          cols(TO(v, 2)) != C - 2 * D)
        vfail(v, "the split form's outputs must be q[R,D], k[R,D], v[R,C-2D] with 2D < C");
      if (a->group <= 0 || D % a->group) vfail(v, "group %d must divide q's width %lld", a->group, (long long)D);
      if (!(a->eps > 0)) vfail(v, "eps must be positive");
    } else
      need_same_shape_out(v, 0, 0);
    break;
  case DFL_OP_L2NORM:
    need_io(v, 1, 1);
    need_float_in(v, 0), need_float_out(v, 0);
    if (a->group <= 0 || cols(TI(v, 0)) % a->group) vfail(v, "group %d must divide the row width", a->group);
    if (!(a->eps > 0)) vfail(v, "eps must be positive");
    need_same_shape_out(v, 0, 0);
    break;
  case DFL_OP_GDN_GATES:
    need_io(v, 4, 2);
    for (int i = 0; i < 4; i++) need_float_in(v, i);
    need_same_shape_in(v, 1, 0);
    need_numel_in(v, 2, cols(TI(v, 0))), need_numel_in(v, 3, cols(TI(v, 0)));
    need_same_shape_out(v, 0, 0), need_same_shape_out(v, 1, 0);
    if (TO(v, 0)->dtype != DFL_F32 || TO(v, 1)->dtype != DFL_F32) vfail(v, "g and beta must be f32");
    break;
  case DFL_OP_GATED_DELTA: {
    need_io(v, 5, 1);
    for (int i = 0; i < 5; i++) need_float_in(v, i);
    need_float_out(v, 0);
    if (a->heads <= 0 || a->kv_heads <= 0 || a->heads % a->kv_heads || a->head_dim <= 0)
      vfail(v, "heads %d must be a positive multiple of kv_heads %d, head_dim positive", a->heads, a->kv_heads);
    if (cols(TI(v, 0)) != (int64_t)a->kv_heads * a->head_dim) vfail(v, "q must have kv_heads*head_dim columns");
    need_same_shape_in(v, 1, 0);
    if (a->heads > 0 && cols(TI(v, 2)) % a->heads) vfail(v, "v's width must be a multiple of heads");
    int64_t R = NI(v, 0) / (cols(TI(v, 0)) > 0 ? cols(TI(v, 0)) : 1);
    if (NI(v, 2) / (cols(TI(v, 2)) > 0 ? cols(TI(v, 2)) : 1) != R) vfail(v, "q and v need the same rows");
    need_numel_in(v, 3, R * a->heads), need_numel_in(v, 4, R * a->heads);
    if (TI(v, 3)->dtype != DFL_F32 || TI(v, 4)->dtype != DFL_F32) vfail(v, "g and beta must be f32");
    if (a->S <= 0 || R % a->S) vfail(v, "the rows must be whole sequences of a.S = %d", a->S);
    need_same_shape_out(v, 0, 2);
    break;
  }
  case DFL_OP_NORM_GATE:
    need_io(v, 3, 1);
    for (int i = 0; i < 3; i++) need_float_in(v, i);
    need_float_out(v, 0);
    if (a->group <= 0 || cols(TI(v, 0)) % a->group) vfail(v, "group %d must divide the row width", a->group);
    need_same_shape_in(v, 1, 0);
    need_numel_in(v, 2, a->group);
    need_same_shape_out(v, 0, 0);
    break;
  case DFL_OP_SIGMOID_MUL:
    need_io(v, 2, 1);
    need_float_in(v, 0), need_float_in(v, 1), need_float_out(v, 0);
    need_same_shape_in(v, 1, 0);
    need_same_shape_out(v, 0, 0);
    break;
  default: vfail(v, "unknown opcode %d", (int)v->code);
  }
}

/* Outputs of these ops carry a gradient path (first output only: rstd, lse, ce, ... do not). */
static int differentiable(dfl_opcode c) {
  static const unsigned char d[] = {
#define DFL_OP(NAME, name, family, diff) diff,
#include "compiler/ops.def"
#undef DFL_OP
  };
  return (unsigned)c < DFL_OP_COUNT && d[c];
}

int dfl_op_add(dfl_graph *g, dfl_opcode code, const int *in, int n_in, const int *out, int n_out, const dfl_attrs *a) {
  static const dfl_attrs zero;
  if (!a) a = &zero;
  vctx v = {g, code, g->cur_label ? g->cur_label : "?", in, out, n_in, n_out};
  if (n_in < 0 || n_in > DFL_MAX_IO || n_out < 1 || n_out > DFL_MAX_IO || (unsigned)code >= DFL_OP_COUNT)
    vfail(&(vctx){g, code, v.label, in, out, 0, 0}, "bad op: %d inputs, %d outputs", n_in, n_out);
  validate(&v, a);
  if (g->nops == g->cap_ops) {
    g->cap_ops = g->cap_ops ? 2 * g->cap_ops : 64;
    g->ops = xrealloc(g->ops, (size_t)g->cap_ops * sizeof *g->ops);
  }
  int id = g->nops++;
  dfl_op *op = &g->ops[id];
  memset(op, 0, sizeof *op);
  op->code = code;
  op->n_in = n_in;
  op->n_out = n_out;
  for (int i = 0; i < n_in; i++) op->in[i] = in[i];
  for (int i = 0; i < n_out; i++) op->out[i] = out[i];
  op->a = *a;
  op->phase = g->cur_phase;
  snprintf(op->label, sizeof op->label, "%s", g->cur_label ? g->cur_label : dfl_opcode_name(code));
  int rg = 0;
  if (differentiable(code))
    for (int i = 0; i < n_in; i++)
      if (in[i] >= 0 && g->t[in[i]].requires_grad && is_float(g->t[in[i]].dtype)) rg = 1;
  for (int i = 0; i < n_out; i++) {
    dfl_tensor *t = &g->t[out[i]];
    if (t->producer < 0) t->producer = id;
    if (i == 0 && rg && t->kind == DFL_T_ACT) t->requires_grad = 1;
  }
  return id;
}

/* --- convenience builders --- */

static void derived_name(char *buf, size_t n, const char *name, const char *suffix) {
  /* names longer than DFL_NAME_MAX are cut, keeping the suffix */
  size_t ls = strlen(suffix), ln = name ? strlen(name) : 0;
  if (ln + ls + 1 > n) ln = n - ls - 1;
  memcpy(buf, name, ln);
  memcpy(buf + ln, suffix, ls + 1);
}

int dfl_matmul(dfl_graph *g, int a, int b, int trans_a, int trans_b, dfl_dtype dt, const char *name) {
  const dfl_tensor *A = &g->t[a], *B = &g->t[b];
  int64_t M = A->ndim == 2 ? (trans_a ? A->shape[1] : A->shape[0]) : 1;
  int64_t N = B->ndim == 2 ? (trans_b ? B->shape[0] : B->shape[1]) : 1;
  int c = dfl_tensor_2d(g, name, dt, DFL_T_ACT, M, N);
  dfl_attrs at = {0};
  at.trans_a = trans_a, at.trans_b = trans_b, at.alpha = 1.0;
  int in[2] = {a, b};
  dfl_op_add(g, DFL_OP_MATMUL, in, 2, &c, 1, &at);
  return c;
}

int dfl_linear(dfl_graph *g, int x, int w, dfl_dtype dt, const char *name) { return dfl_matmul(g, x, w, 0, 1, dt, name); }

int dfl_quant_f8(dfl_graph *g, int x, int *scale, const char *name) {
  const dfl_tensor *X = &g->t[x];
  char nm[DFL_NAME_MAX];
  int q = dfl_tensor_2d(g, name, DFL_F8E4M3, DFL_T_ACT, X->shape[0], X->shape[1]);
  derived_name(nm, sizeof nm, name, ".scale");
  int s = dfl_tensor_1d(g, nm, DFL_F32, DFL_T_ACT, g->t[x].shape[0]);
  int out[2] = {q, s};
  dfl_op_add(g, DFL_OP_QUANT_F8, &x, 1, out, 2, NULL);
  *scale = s;
  return q;
}

int dfl_linear_f8(dfl_graph *g, int x8, int sx, int w8, int sw, dfl_dtype dt, const char *name) {
  int y = dfl_tensor_2d(g, name, dt, DFL_T_ACT, g->t[x8].shape[0], g->t[w8].shape[0]);
  int in[4] = {x8, w8, sx, sw};
  dfl_op_add(g, DFL_OP_MATMUL_F8, in, 4, &y, 1, NULL);
  return y;
}

int dfl_add(dfl_graph *g, int x, int y, const char *name) {
  dfl_tensor *X = &g->t[x];
  int o = dfl_tensor_new(g, name, X->dtype, DFL_T_ACT, X->ndim, X->shape);
  int in[2] = {x, y};
  dfl_op_add(g, DFL_OP_ADD, in, 2, &o, 1, NULL);
  return o;
}

int dfl_rmsnorm(dfl_graph *g, int x, int w, int group, double eps, const char *name) {
  dfl_tensor X = g->t[x];
  int y = dfl_tensor_new(g, name, X.dtype, DFL_T_ACT, X.ndim, X.shape);
  char nb[DFL_NAME_MAX];
  derived_name(nb, sizeof nb, g->t[y].name, ".rstd");
  int r = dfl_tensor_1d(g, nb, DFL_F32, DFL_T_ACT, group > 0 ? dfl_tensor_numel(&X) / group : 1);
  dfl_attrs at = {0};
  at.group = group, at.eps = eps;
  int in[2] = {x, w}, out[2] = {y, r};
  dfl_op_add(g, DFL_OP_RMSNORM, in, 2, out, 2, &at);
  return y;
}

int dfl_rope(dfl_graph *g, int x, int pos, int heads, int head_dim, double theta, const char *name) {
  dfl_tensor X = g->t[x];
  int y = dfl_tensor_new(g, name, X.dtype, DFL_T_ACT, X.ndim, X.shape);
  dfl_attrs at = {0};
  at.heads = heads, at.head_dim = head_dim, at.theta = theta;
  int in[2] = {x, pos};
  dfl_op_add(g, DFL_OP_ROPE, in, 2, &y, 1, &at);
  return y;
}

int dfl_swiglu(dfl_graph *g, int gate, int up, const char *name) {
  dfl_tensor X = g->t[gate];
  int y = dfl_tensor_new(g, name, X.dtype, DFL_T_ACT, X.ndim, X.shape);
  int in[2] = {gate, up};
  dfl_op_add(g, DFL_OP_SWIGLU, in, 2, &y, 1, NULL);
  return y;
}

int dfl_gather(dfl_graph *g, int table, int ids, dfl_dtype dt, const char *name) {
  int64_t R = dfl_tensor_numel(&g->t[ids]), H = g->t[table].shape[g->t[table].ndim - 1];
  int y = dfl_tensor_2d(g, name, dt, DFL_T_ACT, R, H);
  int in[2] = {table, ids};
  dfl_op_add(g, DFL_OP_GATHER, in, 2, &y, 1, NULL);
  return y;
}

/* --- FLOPs --- */

/* Visible (query, key) pairs of one head of an attention op. DFlash anchors are only known at run
** time: a full layer is estimated with anchors uniform over the sequence (S/2 context keys) plus
** the B block keys; a sliding layer sees at most W keys. */
static double attn_pairs(const dfl_attrs *a) {
  if (a->mask == DFL_MASK_CAUSAL) {
    double S = a->S, per = a->window > 0 && a->window < a->S ? (double)a->window : (S + 1) / 2;
    return (double)a->batch * S * per;
  }
  double rows = (double)a->batch * a->N * a->B;
  double per = a->window > 0 ? (double)a->window : a->S / 2.0 + a->B;
  return rows * per;
}

double dfl_op_flops(const dfl_graph *g, const dfl_op *op) {
  const dfl_attrs *a = &op->a;
  const dfl_tensor *o0 = &g->t[op->out[0]];
  double n0 = (double)dfl_tensor_numel(o0);
  switch (op->code) {
  case DFL_OP_MATMUL: {
    const dfl_tensor *A = &g->t[op->in[0]];
    double K = (double)(a->trans_a ? A->shape[0] : A->shape[1]);
    return 2.0 * n0 * K;
  }
  case DFL_OP_MATMUL_F8: return 2.0 * n0 * (double)g->t[op->in[0]].shape[1];
  case DFL_OP_ATTENTION: /* QK^T and PV */
    return 4.0 * attn_pairs(a) * a->heads * a->head_dim;
  case DFL_OP_ATTENTION_BWD: /* recomputed QK^T, dV, dP, dQ, dK */
    return 10.0 * attn_pairs(a) * a->heads * a->head_dim;
  case DFL_OP_LINEAR_CE: { /* logits and dy: two GEMMs over the vocabulary, anchor rows left out */
    const dfl_tensor *Y = &g->t[op->in[0]], *W = &g->t[op->in[1]];
    double R = (double)Y->shape[0];
    if (op->a.B > 1) R -= R / op->a.B;
    return 4.0 * R * (double)W->shape[0] * (double)Y->shape[1];
  }
  case DFL_OP_ROPE: /* normed: + the norm; pair form: both outputs */
    return (op->n_in == (op->n_out == 2 ? 5 : 3) ? 8.0 : 4.0) *
           (n0 + (op->n_out == 2 ? (double)dfl_tensor_numel(&g->t[op->out[1]]) : 0.0));
  case DFL_OP_RMSNORM: case DFL_OP_SWIGLU: return 4.0 * n0;
  case DFL_OP_RMSNORM_BWD: return (op->n_in == 5 ? 9.0 : 8.0) * n0; /* + the addend */
  case DFL_OP_SWIGLU_BWD: return 8.0 * n0;
  case DFL_OP_ADD: case DFL_OP_SCALE: case DFL_OP_ACCUM: return n0;
  case DFL_OP_SUM: case DFL_OP_SUMSQ_ACC: return (double)dfl_tensor_numel(&g->t[op->in[op->code == DFL_OP_SUM ? 0 : 1]]) * (op->code == DFL_OP_SUM ? 1 : 2);
  case DFL_OP_SCATTER_ADD: case DFL_OP_BLOCK_EXPAND_BWD: return (double)dfl_tensor_numel(&g->t[op->in[0]]);
  case DFL_OP_ADAMW: return 12.0 * n0;
  case DFL_OP_CONV1D_SILU: /* + the split form's L2 norms of q and k */
    return (2.0 * (double)g->t[op->in[1]].shape[1] + 4.0) * (double)dfl_tensor_numel(&g->t[op->in[0]]) +
           (op->n_out == 3 ? 8.0 * n0 : 0);
  case DFL_OP_L2NORM: case DFL_OP_SIGMOID_MUL: return 4.0 * n0;
  case DFL_OP_NORM_GATE: return 8.0 * n0;
  case DFL_OP_GDN_GATES: return 8.0 * n0;
  case DFL_OP_GATED_DELTA: { /* the chunked form (chunk 64, reference §3): per row and value head,
                             ** five 64 x d products (KK^T, W, QK^T: dk; U, PV: dv), three dk x dv ones */
    double dk = op->a.head_dim, dv = (double)g->t[op->out[0]].shape[1] / op->a.heads;
    double rows = (double)g->t[op->out[0]].shape[0], c = op->a.S < 64 ? op->a.S : 64;
    return rows * op->a.heads * (2.0 * c * (3 * dk + 2 * dv) + 6.0 * dk * dv);
  }
  default: return 0.0;
  }
}

/* --- dump --- */

static void dump_tensor(const dfl_tensor *t, int id, FILE *f) {
  fprintf(f, "%%%d:%s[", id, t->name);
  for (int i = 0; i < t->ndim; i++) fprintf(f, "%s%lld", i ? "," : "", (long long)t->shape[i]);
  fprintf(f, "]%s", dfl_dtype_name(t->dtype));
}

void dfl_graph_dump(const dfl_graph *g, FILE *f) {
  fprintf(f, "graph: %d tensors, %d ops\n", g->nt, g->nops);
  for (int i = 0; i < g->nt; i++) {
    const dfl_tensor *t = &g->t[i];
    if (!dfl_tensor_is_persistent(t)) continue;
    fprintf(f, "  %-6s ", dfl_tkind_name(t->kind));
    dump_tensor(t, i, f);
    fprintf(f, "\n");
  }
  for (int i = 0; i < g->nops; i++) {
    const dfl_op *op = &g->ops[i];
    fprintf(f, "%4d %-9s %-14s %s:", i, dfl_phase_name(op->phase), dfl_opcode_name(op->code), op->label);
    for (int k = 0; k < op->n_in; k++) {
      fprintf(f, " ");
      if (op->in[k] < 0) fprintf(f, "-");
      else dump_tensor(&g->t[op->in[k]], op->in[k], f);
    }
    fprintf(f, " ->");
    for (int k = 0; k < op->n_out; k++) {
      fprintf(f, " ");
      dump_tensor(&g->t[op->out[k]], op->out[k], f);
    }
    const dfl_attrs *a = &op->a;
    switch (op->code) {
    case DFL_OP_MATMUL:
      fprintf(f, " {ta=%d tb=%d alpha=%g", a->trans_a, a->trans_b, a->alpha);
      if (a->beta != 0) fprintf(f, " beta=%g", a->beta); /* only fused graphs: unfused dumps unchanged */
      fprintf(f, "}");
      break;
    case DFL_OP_RMSNORM: case DFL_OP_RMSNORM_BWD: fprintf(f, " {group=%d eps=%g}", a->group, a->eps); break;
    case DFL_OP_ROPE:
      fprintf(f, " {heads=%d hd=%d theta=%g inv=%d", a->heads, a->head_dim, a->theta, a->inverse);
      if (op->n_out == 2) fprintf(f, " heads2=%d", a->kv_heads);
      if (op->n_in == (op->n_out == 2 ? 5 : 3)) fprintf(f, " norm eps=%g mid=%s", a->eps, dfl_dtype_name((dfl_dtype)a->mid_dtype));
      if (a->rot_dim) fprintf(f, " rot=%d", a->rot_dim);
      fprintf(f, "}");
      break;
    case DFL_OP_CONV1D_SILU:
      if (op->n_out == 3) fprintf(f, " {S=%d, q|k|v, l2norm group=%d eps=%g alpha=%g}", a->S, a->group, a->eps, a->alpha);
      else fprintf(f, " {S=%d}", a->S);
      break;
    case DFL_OP_L2NORM: fprintf(f, " {group=%d eps=%g alpha=%g}", a->group, a->eps, a->alpha); break;
    case DFL_OP_NORM_GATE: fprintf(f, " {group=%d eps=%g}", a->group, a->eps); break;
    case DFL_OP_GATED_DELTA:
      fprintf(f, " {heads=%d kv_heads=%d dk=%d S=%d}", a->heads, a->kv_heads, a->head_dim, a->S);
      break;
    case DFL_OP_ATTENTION: case DFL_OP_ATTENTION_BWD:
      fprintf(f, " {%s b=%d S=%d N=%d B=%d nh=%d nkv=%d hd=%d W=%d scale=%g}", a->mask == DFL_MASK_DFLASH ? "dflash" : "causal",
              a->batch, a->S, a->N, a->B, a->heads, a->kv_heads, a->head_dim, a->window, a->scale);
      break;
    case DFL_OP_LINEAR_CE: fprintf(f, " {chunk=%d topk=%d anchors_every=%d}", a->vocab_chunk, a->topk, a->B); break;
    case DFL_OP_SCALE: case DFL_OP_FILL: fprintf(f, " {alpha=%g}", a->alpha); break;
    case DFL_OP_IOTA_MOD: fprintf(f, " {n=%d}", a->n); break;
    case DFL_OP_DFLASH_BLOCKS: fprintf(f, " {b=%d S=%d N=%d B=%d mask_id=%d gamma=%g}", a->batch, a->S, a->N, a->B, a->mask_id, a->gamma); break;
    case DFL_OP_OPT_PREP: fprintf(f, " {lr=%g warmup=%lld total=%lld sched=%d clip=%g}", a->lr, (long long)a->warmup, (long long)a->total, a->schedule, a->clip); break;
    case DFL_OP_ADAMW:
      fprintf(f, " {b1=%g b2=%g eps=%g wd=%g%s}", a->beta1, a->beta2, a->eps, a->wd, a->keep_grad ? " keep_grad" : "");
      break;
    default: break;
    }
    fprintf(f, "\n");
  }
}
