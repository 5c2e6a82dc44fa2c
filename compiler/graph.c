/*
** graph.c: construction, queries, FLOP counts and the text dump of the IR. dfl_op_add checks
** every op against its contract first (graph_validate.c).
*/
#include "compiler/graph.h"
#include "compiler/graph_internal.h"

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

static int is_float(dfl_dtype d) { return d == DFL_F32 || d == DFL_BF16 || d == DFL_F16 || d == DFL_F64; }

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
  dfl_graph_validate_op(g, code, g->cur_label ? g->cur_label : "?", in, n_in, out, n_out, a);
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

/* FLOPs per op, fl_<name> for the op <name> of compiler/ops.def (n0: its first output's elements),
** through a table generated from ops.def: an op without its count does not compile. The ops that
** move or index data, and the step's bookkeeping, count none (fl_zero). */
static double fl_zero(const dfl_graph *g, const dfl_op *op, double n0) { return 0.0; }
static double fl_matmul(const dfl_graph *g, const dfl_op *op, double n0) {
  const dfl_tensor *A = &g->t[op->in[0]];
  double K = (double)(op->a.trans_a ? A->shape[0] : A->shape[1]);
  return 2.0 * n0 * K;
}

static double fl_matmul_f8(const dfl_graph *g, const dfl_op *op, double n0) {
  return 2.0 * n0 * (double)g->t[op->in[0]].shape[1];
}

static double fl_attention(const dfl_graph *g, const dfl_op *op, double n0) {
  /* QK^T and PV */
  return 4.0 * attn_pairs(&op->a) * op->a.heads * op->a.head_dim;
}

static double fl_attention_bwd(const dfl_graph *g, const dfl_op *op, double n0) {
  /* recomputed QK^T, dV, dP, dQ, dK */
  return 10.0 * attn_pairs(&op->a) * op->a.heads * op->a.head_dim;
}

static double fl_linear_ce(const dfl_graph *g, const dfl_op *op, double n0) {
  /* logits and dy: two GEMMs over the vocabulary, anchor rows left out */
  const dfl_tensor *Y = &g->t[op->in[0]], *W = &g->t[op->in[1]];
  double R = (double)Y->shape[0];
  if (op->a.B > 1) R -= R / op->a.B;
  /* soft labels: the target's logits too, in both passes */
  return (op->n_in == 5 ? 8.0 : 4.0) * R * (double)W->shape[0] * (double)Y->shape[1];
}

static double fl_rope(const dfl_graph *g, const dfl_op *op, double n0) {
  /* normed: + the norm; pair form: both outputs */
  return (op->n_in == (op->n_out == 2 ? 5 : 3) ? 8.0 : 4.0) *
         (n0 + (op->n_out == 2 ? (double)dfl_tensor_numel(&g->t[op->out[1]]) : 0.0));
}

static double fl_rmsnorm(const dfl_graph *g, const dfl_op *op, double n0) {
  return 4.0 * n0;
}

static double fl_rmsnorm_bwd(const dfl_graph *g, const dfl_op *op, double n0) {
  return (op->n_in == 5 ? 9.0 : 8.0) * n0; /* + the addend */
}

static double fl_swiglu_bwd(const dfl_graph *g, const dfl_op *op, double n0) {
  return 8.0 * n0;
}

static double fl_add(const dfl_graph *g, const dfl_op *op, double n0) {
  return n0;
}

static double fl_sum(const dfl_graph *g, const dfl_op *op, double n0) {
  return (double)dfl_tensor_numel(&g->t[op->in[op->code == DFL_OP_SUM ? 0 : 1]]) * (op->code == DFL_OP_SUM ? 1 : 2);
}

static double fl_scatter_add(const dfl_graph *g, const dfl_op *op, double n0) {
  return (double)dfl_tensor_numel(&g->t[op->in[0]]);
}

static double fl_adamw(const dfl_graph *g, const dfl_op *op, double n0) {
  return 12.0 * n0;
}

static double fl_conv1d_silu(const dfl_graph *g, const dfl_op *op, double n0) {
  /* + the split form's L2 norms of q and k */
  return (2.0 * (double)g->t[op->in[1]].shape[1] + 4.0) * (double)dfl_tensor_numel(&g->t[op->in[0]]) +
         (op->n_out == 3 ? 8.0 * n0 : 0);
}

static double fl_l2norm(const dfl_graph *g, const dfl_op *op, double n0) {
  return 4.0 * n0;
}

static double fl_norm_gate(const dfl_graph *g, const dfl_op *op, double n0) {
  return 8.0 * n0;
}

static double fl_gdn_gates(const dfl_graph *g, const dfl_op *op, double n0) {
  return 8.0 * n0;
}

static double fl_gated_delta(const dfl_graph *g, const dfl_op *op, double n0) {
  /* the chunked form (chunk 64, reference §3): per row and value head,
                           ** five 64 x d products (KK^T, W, QK^T: dk; U, PV: dv), three dk x dv ones */
  double dk = op->a.head_dim, dv = (double)g->t[op->out[0]].shape[1] / op->a.heads;
  double rows = (double)g->t[op->out[0]].shape[0], c = op->a.S < 64 ? op->a.S : 64;
  return rows * op->a.heads * (2.0 * c * (3 * dk + 2 * dv) + 6.0 * dk * dv);
}

#define fl_swiglu fl_rmsnorm
#define fl_scale fl_add
#define fl_accum fl_add
#define fl_sumsq_acc fl_sum
#define fl_block_expand_bwd fl_scatter_add
#define fl_sigmoid_mul fl_l2norm
#define fl_iota_mod fl_zero
#define fl_dflash_blocks fl_zero
#define fl_gather fl_zero
#define fl_dflash_metrics fl_zero
#define fl_opt_prep fl_zero
#define fl_copy fl_zero
#define fl_concat_cols fl_zero
#define fl_fill fl_zero
#define fl_quant_f8 fl_zero
#define fl_block_rows fl_zero
#define fl_block_expand fl_zero
#define fl_block_drop fl_zero
#define fl_block_undrop fl_zero
static double (*const fl_rules[DFL_OP_COUNT])(const dfl_graph *g, const dfl_op *op, double n0) = {
#define DFL_OP(NAME, name, family, diff) [DFL_OP_##NAME] = fl_##name,
#include "compiler/ops.def"
#undef DFL_OP
};

double dfl_op_flops(const dfl_graph *g, const dfl_op *op) {
  if ((unsigned)op->code >= DFL_OP_COUNT) return 0.0;
  return fl_rules[op->code](g, op, (double)dfl_tensor_numel(&g->t[op->out[0]]));
}

/* --- dump --- */

static void dump_tensor(const dfl_tensor *t, int id, FILE *f) {
  fprintf(f, "%%%d:%s[", id, t->name);
  for (int i = 0; i < t->ndim; i++) fprintf(f, "%s%lld", i ? "," : "", (long long)t->shape[i]);
  fprintf(f, "]%s", dfl_dtype_name(t->dtype));
}

/* Each op's attributes in the dump, pr_<name> for the op <name> of compiler/ops.def, through a table
** generated from ops.def (an op without its printer does not compile; pr_none: nothing to show). */
static void pr_none(FILE *f, const dfl_op *op) {}
static void pr_matmul(FILE *f, const dfl_op *op) {
  const dfl_attrs *a = &op->a;
  fprintf(f, " {ta=%d tb=%d alpha=%g", a->trans_a, a->trans_b, a->alpha);
  if (a->beta != 0) fprintf(f, " beta=%g", a->beta); /* only fused graphs: unfused dumps unchanged */
  fprintf(f, "}");
}

static void pr_rmsnorm(FILE *f, const dfl_op *op) {
  const dfl_attrs *a = &op->a;
  fprintf(f, " {group=%d eps=%g}", a->group, a->eps);
}

static void pr_rope(FILE *f, const dfl_op *op) {
  const dfl_attrs *a = &op->a;
  fprintf(f, " {heads=%d hd=%d theta=%g inv=%d", a->heads, a->head_dim, a->theta, a->inverse);
  if (op->n_out == 2) fprintf(f, " heads2=%d", a->kv_heads);
  if (op->n_in == (op->n_out == 2 ? 5 : 3)) fprintf(f, " norm eps=%g mid=%s", a->eps, dfl_dtype_name((dfl_dtype)a->mid_dtype));
  if (a->rot_dim) fprintf(f, " rot=%d", a->rot_dim);
  fprintf(f, "}");
}

static void pr_conv1d_silu(FILE *f, const dfl_op *op) {
  const dfl_attrs *a = &op->a;
  if (op->n_out == 3) fprintf(f, " {S=%d, q|k|v, l2norm group=%d eps=%g alpha=%g}", a->S, a->group, a->eps, a->alpha);
  else fprintf(f, " {S=%d}", a->S);
}

static void pr_l2norm(FILE *f, const dfl_op *op) {
  const dfl_attrs *a = &op->a;
  fprintf(f, " {group=%d eps=%g alpha=%g}", a->group, a->eps, a->alpha);
}

static void pr_norm_gate(FILE *f, const dfl_op *op) {
  const dfl_attrs *a = &op->a;
  fprintf(f, " {group=%d eps=%g", a->group, a->eps);
  if (a->win[1]) fprintf(f, " z_col=%lld", (long long)a->win[1]);
  fprintf(f, "}");
}

static void pr_gdn_gates(FILE *f, const dfl_op *op) {
  const dfl_attrs *a = &op->a;
  if (a->win[0] || a->win[1]) fprintf(f, " {a_col=%lld b_col=%lld}", (long long)a->win[0], (long long)a->win[1]);
}

static void pr_gated_delta(FILE *f, const dfl_op *op) {
  const dfl_attrs *a = &op->a;
  fprintf(f, " {heads=%d kv_heads=%d dk=%d S=%d}", a->heads, a->kv_heads, a->head_dim, a->S);
}

static void pr_attention(FILE *f, const dfl_op *op) {
  const dfl_attrs *a = &op->a;
  fprintf(f, " {%s b=%d S=%d N=%d B=%d nh=%d nkv=%d hd=%d W=%d scale=%g}", a->mask == DFL_MASK_DFLASH ? "dflash" : "causal",
          a->batch, a->S, a->N, a->B, a->heads, a->kv_heads, a->head_dim, a->window, a->scale);
}

static void pr_linear_ce(FILE *f, const dfl_op *op) {
  const dfl_attrs *a = &op->a;
  fprintf(f, " {chunk=%d topk=%d anchors_every=%d", a->vocab_chunk, a->topk, a->B);
  if (op->n_in == 5) fprintf(f, " soft=%g temp=%g", a->kd_alpha, a->kd_temp > 0 ? a->kd_temp : 1.0);
  fprintf(f, "}");
}

static void pr_scale(FILE *f, const dfl_op *op) {
  const dfl_attrs *a = &op->a;
  fprintf(f, " {alpha=%g}", a->alpha);
}

static void pr_iota_mod(FILE *f, const dfl_op *op) {
  const dfl_attrs *a = &op->a;
  fprintf(f, " {n=%d}", a->n);
}

static void pr_dflash_blocks(FILE *f, const dfl_op *op) {
  const dfl_attrs *a = &op->a;
  fprintf(f, " {b=%d S=%d N=%d B=%d mask_id=%d gamma=%g}", a->batch, a->S, a->N, a->B, a->mask_id, a->gamma);
}

static void pr_opt_prep(FILE *f, const dfl_op *op) {
  const dfl_attrs *a = &op->a;
  fprintf(f, " {lr=%g warmup=%lld total=%lld sched=%d clip=%g}", a->lr, (long long)a->warmup, (long long)a->total, a->schedule, a->clip);
}

static void pr_adamw(FILE *f, const dfl_op *op) {
  const dfl_attrs *a = &op->a;
  fprintf(f, " {b1=%g b2=%g eps=%g wd=%g%s}", a->beta1, a->beta2, a->eps, a->wd, a->keep_grad ? " keep_grad" : "");
}

#define pr_rmsnorm_bwd pr_rmsnorm
#define pr_attention_bwd pr_attention
#define pr_fill pr_scale
#define pr_gather pr_none
#define pr_add pr_none
#define pr_swiglu pr_none
#define pr_scatter_add pr_none
#define pr_swiglu_bwd pr_none
#define pr_sum pr_none
#define pr_dflash_metrics pr_none
#define pr_accum pr_none
#define pr_sumsq_acc pr_none
#define pr_copy pr_none
#define pr_concat_cols pr_none
#define pr_quant_f8 pr_none
#define pr_matmul_f8 pr_none
#define pr_block_rows pr_none
#define pr_block_expand pr_none
#define pr_block_expand_bwd pr_none
#define pr_block_drop pr_none
#define pr_block_undrop pr_none
#define pr_sigmoid_mul pr_none
static void (*const pr_rules[DFL_OP_COUNT])(FILE *f, const dfl_op *op) = {
#define DFL_OP(NAME, name, family, diff) [DFL_OP_##NAME] = pr_##name,
#include "compiler/ops.def"
#undef DFL_OP
};

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
    if ((unsigned)op->code < DFL_OP_COUNT) pr_rules[op->code](f, op);
    fprintf(f, "\n");
  }
}
