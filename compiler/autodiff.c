/*
** autodiff.c: reverse-mode differentiation of a dfl_graph.
**
** Walks the op list backwards from the scalar loss and appends, for every op on a path from a
** PARAM to the loss, the ops that turn its output gradient into input gradients. Only tensors
** that both require a gradient (computed from a PARAM) and reach the loss get one, so nothing is
** spent on frozen weights, inputs or dead branches. The seed d(loss)/d(loss) = 1 is kept
** implicit: LINEAR_CE then hands its saved dy over as is, and a FILL is only emitted for rules
** that need the seed as a tensor.
*/
#include "compiler/graph.h"
#include "compiler/status.h"

#include <stdlib.h>
#include <string.h>

#define SEED (-2) /* grad[] value of the loss: the implicit 1 */

typedef struct {
  dfl_graph *g;
  int *grad;   /* per tensor: accumulated gradient id, SEED, or -1 */
  char *want;  /* per tensor: requires a gradient and reaches the loss */
  int cap;
  char label[DFL_NAME_MAX];
} ad;

static int is_float(dfl_dtype d) { return d == DFL_F32 || d == DFL_BF16 || d == DFL_F16 || d == DFL_F64; }

/* A new gradient tensor shaped like tensor `like`. */
static int new_like(ad *s, int like, const char *suffix) {
  dfl_tensor t = s->g->t[like];
  char name[DFL_NAME_MAX];
  size_t ls = strlen(suffix), ln = strlen(t.name);
  if (ln + ls + 1 > sizeof name) ln = sizeof name - ls - 1;
  memcpy(name, t.name, ln);
  memcpy(name + ln, suffix, ls + 1);
  return dfl_tensor_new(s->g, name, t.dtype, DFL_T_ACT, t.ndim, t.shape);
}

static int emit(ad *s, dfl_opcode code, const int *in, int n_in, const int *out, int n_out, const dfl_attrs *a) {
  return dfl_op_add(s->g, code, in, n_in, out, n_out, a);
}

/* The gradient of `t` as a real tensor (materialising the seed as a FILL of 1). */
static int real_grad(ad *s, int t) {
  if (s->grad[t] != SEED) return s->grad[t];
  int o = new_like(s, t, ".grad");
  dfl_attrs a = {0};
  a.alpha = 1.0;
  emit(s, DFL_OP_FILL, NULL, 0, &o, 1, &a);
  return o;
}

/* Adds contribution d to the gradient of t (ADD when t already has one). */
static void contribute(ad *s, int t, int d) {
  if (t < 0 || !s->want[t]) return;
  if (s->grad[t] == -1) {
    s->grad[t] = d;
    return;
  }
  int prev = real_grad(s, t);
  int o = new_like(s, t, ".grad");
  int in[2] = {prev, d};
  emit(s, DFL_OP_ADD, in, 2, &o, 1, NULL);
  s->grad[t] = o;
}

static void bwd_matmul(ad *s, const dfl_op *op, int dc) {
  int A = op->in[0], B = op->in[1], ta = op->a.trans_a, tb = op->a.trans_b;
  dfl_attrs at = {0};
  at.alpha = op->a.alpha == 0 ? 1.0 : op->a.alpha;
  if (s->want[A]) { /* dA = alpha dC op(B)^T, transposed back when A was */
    int in[2], o = new_like(s, A, ".grad");
    if (!ta) in[0] = dc, in[1] = B, at.trans_a = 0, at.trans_b = !tb;
    else in[0] = B, in[1] = dc, at.trans_a = tb, at.trans_b = 1;
    emit(s, DFL_OP_MATMUL, in, 2, &o, 1, &at);
    contribute(s, A, o);
  }
  if (s->want[B]) { /* dB = alpha op(A)^T dC, transposed back when B was */
    int in[2], o = new_like(s, B, ".grad");
    if (!tb) in[0] = A, in[1] = dc, at.trans_a = !ta, at.trans_b = 0;
    else in[0] = dc, in[1] = A, at.trans_a = 1, at.trans_b = ta;
    emit(s, DFL_OP_MATMUL, in, 2, &o, 1, &at);
    contribute(s, B, o);
  }
  if (op->n_in == 3 && op->a.beta != 0 && op->in[2] != op->out[0]) contribute(s, op->in[2], dc); /* + r */
}

/* The gradient rules, grad_<name> for the op <name> of compiler/ops.def, one per op the table marks
** differentiable: the table below is generated from ops.def, so a differentiable op without its rule
** does not compile (and a rule for an op marked otherwise is an unused function: a warning). Each gets a copy of the op (emitting ops may
** move g->ops) and its output y, whose gradient exists. */
typedef int (*grad_fn)(ad *s, const dfl_op *op, int y);
static int grad_matmul(ad *s, const dfl_op *op, int y) {
  bwd_matmul(s, op, real_grad(s, y));
  return DFL_OK;
}

static int grad_add(ad *s, const dfl_op *op, int y) {
  int d = real_grad(s, y);
  contribute(s, op->in[0], d);
  contribute(s, op->in[1], d);
  return DFL_OK;
}

static int grad_copy(ad *s, const dfl_op *op, int y) {
  const dfl_graph *g = s->g;
  int x = op->in[0], d = real_grad(s, y);
  const dfl_tensor *X = &g->t[x], *D = &g->t[d];
  if (s->want[x] && (op->a.win[0] || dfl_tensor_numel(X) != dfl_tensor_numel(D))) {
    fprintf(stderr, "dflc: autodiff: %s: a column window's COPY has no backward rule\n", op->label);
    return DFL_ERR;
  }
  int same = X->dtype == D->dtype && X->ndim == D->ndim;
  for (int k = 0; same && k < X->ndim; k++) same = X->shape[k] == D->shape[k];
  if (!same && s->want[x]) { /* reshape / convert back */
    int o = new_like(s, x, ".grad");
    emit(s, DFL_OP_COPY, &d, 1, &o, 1, NULL);
    d = o;
  }
  contribute(s, x, d);
  return DFL_OK;
}

static int grad_scale(ad *s, const dfl_op *op, int y) {
  if (op->n_in == 2 && op->in[1] >= 0 && s->want[op->in[1]]) {
    fprintf(stderr, "dflc: autodiff (%s): the gradient of a SCALE factor is not supported\n", op->label);
    return DFL_ERR;
  }
  int x = op->in[0];
  if (!s->want[x]) return DFL_OK;
  int d = real_grad(s, y), o = new_like(s, x, ".grad");
  int in[2] = {d, op->n_in == 2 ? op->in[1] : -1};
  dfl_attrs a = {0};
  a.alpha = op->a.alpha == 0 ? 1.0 : op->a.alpha;
  emit(s, DFL_OP_SCALE, in, 2, &o, 1, &a);
  contribute(s, x, o);
  return DFL_OK;
}

static int grad_sum(ad *s, const dfl_op *op, int y) {
  /* dx = broadcast(dy): a FILL of 1 scaled by dy (or the FILL itself for the seed) */
  int x = op->in[0], o = new_like(s, x, ".grad");
  dfl_attrs a = {0};
  a.alpha = 1.0;
  if (s->grad[y] == SEED) {
    emit(s, DFL_OP_FILL, NULL, 0, &o, 1, &a);
  } else {
    int ones = new_like(s, x, ".ones");
    emit(s, DFL_OP_FILL, NULL, 0, &ones, 1, &a);
    int in[2] = {ones, s->grad[y]};
    emit(s, DFL_OP_SCALE, in, 2, &o, 1, &a);
  }
  contribute(s, x, o);
  return DFL_OK;
}

static int grad_rmsnorm(ad *s, const dfl_op *op, int y) {
  if (op->n_out == 3) { /* FP8: fusion runs after autodiff, on the frozen target only */
    fprintf(stderr, "dflc: autodiff (%s): a quantized RMSNORM (dfl_fuse_quant) has no backward\n", op->label);
    return DFL_ERR;
  }
  int x = op->in[0], w = op->in[1], d = real_grad(s, y);
  int dx = new_like(s, x, ".grad"), dw = new_like(s, w, ".grad");
  int in[4] = {x, w, op->out[1], d}, out[2] = {dx, dw};
  emit(s, DFL_OP_RMSNORM_BWD, in, 4, out, 2, &op->a);
  contribute(s, x, dx);
  contribute(s, w, dw);
  return DFL_OK;
}

static int grad_rope(ad *s, const dfl_op *op, int y) {
  if (op->n_in == 3) { /* fusion runs after autodiff and keeps differentiated norms apart */
    fprintf(stderr, "dflc: autodiff (%s): a ROPE with a norm weight (dfl_fuse_norm_rope) has no backward\n", op->label);
    return DFL_ERR;
  }
  int x = op->in[0], d = real_grad(s, y), o = new_like(s, x, ".grad");
  dfl_attrs a = op->a;
  a.inverse = !a.inverse; /* a rotation's transpose is the rotation by -angle */
  int in[2] = {d, op->in[1]};
  emit(s, DFL_OP_ROPE, in, 2, &o, 1, &a);
  contribute(s, x, o);
  return DFL_OK;
}

static int grad_swiglu(ad *s, const dfl_op *op, int y) {
  if (op->n_out == 2) { /* FP8: fusion runs after autodiff, on the frozen target only */
    fprintf(stderr, "dflc: autodiff (%s): a quantized SWIGLU (dfl_fuse_quant) has no backward\n", op->label);
    return DFL_ERR;
  }
  int gt = op->in[0], up = op->in[1], d = real_grad(s, y);
  int dg = new_like(s, gt, ".grad"), du = new_like(s, up, ".grad");
  int in[3] = {gt, up, d}, out[2] = {dg, du};
  emit(s, DFL_OP_SWIGLU_BWD, in, 3, out, 2, NULL);
  contribute(s, gt, dg);
  contribute(s, up, du);
  return DFL_OK;
}

static int grad_gather(ad *s, const dfl_op *op, int y) {
  int tab = op->in[0];
  if (!s->want[tab]) return DFL_OK;
  int d = real_grad(s, y), o = new_like(s, tab, ".grad");
  int in[2] = {d, op->in[1]};
  emit(s, DFL_OP_SCATTER_ADD, in, 2, &o, 1, NULL);
  contribute(s, tab, o);
  return DFL_OK;
}

static int grad_block_expand(ad *s, const dfl_op *op, int y) {
  if (!s->want[op->in[0]]) return DFL_OK;
  int x = op->in[0], d = real_grad(s, y), o = new_like(s, x, ".grad");
  emit(s, DFL_OP_BLOCK_EXPAND_BWD, &d, 1, &o, 1, &op->a);
  contribute(s, x, o);
  return DFL_OK;
}

static int grad_block_drop(ad *s, const dfl_op *op, int y) {
  /* each is the other's transpose */
  if (!s->want[op->in[0]]) return DFL_OK;
  int x = op->in[0], d = real_grad(s, y), o = new_like(s, x, ".grad");
  emit(s, op->code == DFL_OP_BLOCK_DROP ? DFL_OP_BLOCK_UNDROP : DFL_OP_BLOCK_DROP, &d, 1, &o, 1, &op->a);
  contribute(s, x, o);
  return DFL_OK;
}

static int grad_attention(ad *s, const dfl_op *op, int y) {
  int nf = op->a.mask == DFL_MASK_DFLASH ? 5 : 3, nfi = op->a.mask == DFL_MASK_DFLASH ? 7 : 3;
  int in[DFL_MAX_IO], out[5];
  for (int i = 0; i < nfi; i++) in[i] = op->in[i];
  in[nfi] = op->out[0], in[nfi + 1] = op->out[1], in[nfi + 2] = real_grad(s, y);
  for (int i = 0; i < nf; i++) out[i] = new_like(s, op->in[i], ".grad");
  emit(s, DFL_OP_ATTENTION_BWD, in, nfi + 3, out, nf, &op->a);
  for (int i = 0; i < nf; i++) contribute(s, op->in[i], out[i]);
  return DFL_OK;
}

static int grad_linear_ce(ad *s, const dfl_op *op, int y) {
  /* d y = dy_saved * d(num) */
  int yin = op->in[0], dy = op->out[4];
  if (s->grad[y] == SEED) {
    contribute(s, yin, dy);
  } else {
    int o = new_like(s, yin, ".grad");
    int in[2] = {dy, s->grad[y]};
    dfl_attrs a = {0};
    a.alpha = 1.0;
    emit(s, DFL_OP_SCALE, in, 2, &o, 1, &a);
    contribute(s, yin, o);
  }
  return DFL_OK;
}

#define DFL_GRAD_0(name) NULL
#define DFL_GRAD_1(name) grad_##name
#define grad_block_undrop grad_block_drop /* each is the other's transpose: one rule */
static const grad_fn grad_rules[DFL_OP_COUNT] = {
#define DFL_OP(NAME, name, family, diff) [DFL_OP_##NAME] = DFL_GRAD_##diff(name),
#include "compiler/ops.def"
#undef DFL_OP
};
#undef DFL_GRAD_0
#undef DFL_GRAD_1
#undef grad_block_undrop

static int backward_op(ad *s, int oi) {
  dfl_graph *g = s->g;
  dfl_op op = g->ops[oi]; /* copy: emitting ops may move g->ops */
  int y = op.out[0];
  if (s->grad[y] == -1) return DFL_OK;
  snprintf(s->label, sizeof s->label, "%s", op.label);
  size_t ll = strlen(s->label);
  if (ll + 5 < sizeof s->label) memcpy(s->label + ll, ".bwd", 5);
  g->cur_label = s->label;
  grad_fn rule = (unsigned)op.code < DFL_OP_COUNT ? grad_rules[op.code] : NULL;
  if (!rule) {
    fprintf(stderr, "dflc: autodiff: op %s (%s) has no backward rule\n", dfl_opcode_name(op.code), op.label);
    return DFL_ERR;
  }
  return rule(s, &op, y);
}

/* Float inputs of op that carry a gradient path (ATTENTION's anchors/keep, indices never do). */
static int n_diff_inputs(const dfl_op *op) {
  switch (op->code) {
  case DFL_OP_ATTENTION: return op->a.mask == DFL_MASK_DFLASH ? 5 : 3;
  case DFL_OP_SCALE: case DFL_OP_GATHER: case DFL_OP_ROPE: case DFL_OP_LINEAR_CE: return 1;
  case DFL_OP_MATMUL: /* the addend form (dfl_fuse_add) passes the gradient to its addend too */
    return op->n_in == 3 && op->a.beta != 0 && op->in[2] != op->out[0] ? 3 : 2;
  case DFL_OP_ADD: case DFL_OP_RMSNORM: case DFL_OP_SWIGLU: return 2;
  case DFL_OP_SUM: case DFL_OP_COPY: case DFL_OP_BLOCK_EXPAND: case DFL_OP_BLOCK_DROP: case DFL_OP_BLOCK_UNDROP:
    return 1;
  default: return 0;
  }
}

int dfl_autodiff(dfl_graph *g, int loss) {
  if (loss < 0 || loss >= g->nt || dfl_tensor_numel(&g->t[loss]) != 1 || !is_float(g->t[loss].dtype)) {
    fprintf(stderr, "dflc: autodiff: the loss must be a float scalar tensor\n");
    return DFL_ERR;
  }
  if (!g->t[loss].requires_grad) {
    fprintf(stderr, "dflc: autodiff: the loss '%s' does not depend on any trained parameter\n", g->t[loss].name);
    return DFL_ERR;
  }
  ad s = {0};
  s.g = g;
  int nt0 = g->nt, nops0 = g->nops;
  s.want = calloc((size_t)nt0, 1);
  s.grad = malloc((size_t)nt0 * sizeof *s.grad);
  if (!s.want || !s.grad) {
    free(s.want), free(s.grad);
    return DFL_ENOMEM;
  }
  /* Backward reachability from the loss through differentiable ops. */
  s.want[loss] = 1;
  for (int i = nops0 - 1; i >= 0; i--) {
    const dfl_op *op = &g->ops[i];
    int nd = n_diff_inputs(op);
    if (!nd || !s.want[op->out[0]]) continue;
    for (int k = 0; k < nd; k++) {
      int x = op->in[k];
      if (x >= 0 && g->t[x].requires_grad && is_float(g->t[x].dtype)) s.want[x] = 1;
    }
  }
  for (int i = 0; i < nt0; i++) s.grad[i] = -1;
  s.grad[loss] = SEED;
  /* grad[] grows with the graph: new gradient tensors are never differentiated again, so only
  ** the first nt0 entries are read; `want` of new tensors is 0. */
  dfl_phase saved_phase = g->cur_phase;
  const char *saved_label = g->cur_label;
  g->cur_phase = DFL_PH_BACKWARD;
  int rc = DFL_OK;
  for (int i = nops0 - 1; i >= 0 && rc == DFL_OK; i--) {
    if (n_diff_inputs(&g->ops[i]) == 0) continue;
    rc = backward_op(&s, i);
  }
  if (rc == DFL_OK)
    for (int i = 0; i < nt0; i++) {
      if (!s.want[i] || i == loss) continue;
      if (s.grad[i] == SEED) s.grad[i] = real_grad(&s, i);
      g->t[i].grad = s.grad[i];
    }
  g->cur_phase = saved_phase;
  g->cur_label = saved_label;
  free(s.want), free(s.grad);
  return rc;
}
