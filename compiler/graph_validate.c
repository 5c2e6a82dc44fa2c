/*
** graph_validate.c: every op checked against its contract (compiler/ops.def, graph.h) as
** dfl_op_add adds it. A mismatch is a bug in a graph builder, not a user error (users never write
** ops), so it aborts with the op's label and the offending shapes rather than returning a status
** nobody could act on.
*/
#include "compiler/ir.h"
#include "compiler/graph_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int float_dtype(dfl_dtype d) { return d == DFL_F32 || d == DFL_BF16 || d == DFL_F16 || d == DFL_F64; }


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
  if (!float_dtype(TI(v, i)->dtype)) vfail(v, "input %d must be a float tensor", i);
}
static void need_float_out(const vctx *v, int i) {
  if (!float_dtype(TO(v, i)->dtype)) vfail(v, "output %d must be a float tensor", i);
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

/* Each op's contract, vr_<name> for the op <name> of compiler/ops.def (ops.def's comments state
** them), through a table generated from ops.def: an op without its check does not compile. */
static void vr_iota_mod(const vctx *v, const dfl_attrs *a) {
  need_io(v, 0, 1);
  need_i32_out(v, 0);
  if (a->n <= 0) vfail(v, "a.n must be positive");
}

static void vr_dflash_blocks(const vctx *v, const dfl_attrs *a) {
  need_io(v, 4, v->n_out == 5 ? 5 : 4);
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
  if (v->n_out == 5) need_i32_out(v, 4), need_numel_out(v, 4, q);
}

static void vr_gather(const vctx *v, const dfl_attrs *a) {
  need_io(v, 2, 1);
  need_float_in(v, 0);
  need_2d_in(v, 0);
  need_i32_in(v, 1);
  need_float_out(v, 0);
  if (TO(v, 0)->ndim != 2 || TO(v, 0)->shape[0] != NI(v, 1) || TO(v, 0)->shape[1] != TI(v, 0)->shape[1])
    vfail(v, "output must be [len(ids), table columns]");
}

static void vr_matmul(const vctx *v, const dfl_attrs *a) {
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
}

static void vr_add(const vctx *v, const dfl_attrs *a) {
  need_io(v, 2, 1);
  need_float_in(v, 0), need_float_in(v, 1), need_float_out(v, 0);
  need_same_shape_in(v, 0, 1);
  need_same_shape_out(v, 0, 0);
}

static void vr_rmsnorm(const vctx *v, const dfl_attrs *a) {
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
}

static void vr_rope(const vctx *v, const dfl_attrs *a) {
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
  need_numel_in(v, 1, NI(v, 0) / cols(TI(v, 0)));
  need_same_shape_out(v, 0, 0);
}

static void vr_attention(const vctx *v, const dfl_attrs *a) {
  check_attention(v, a, 0);
}

static void vr_attention_bwd(const vctx *v, const dfl_attrs *a) {
  check_attention(v, a, 1);
}

static void vr_swiglu(const vctx *v, const dfl_attrs *a) {
  /* quantized form (dfl_fuse_quant): out q f8e4m3, s[R] f32 */
  need_io(v, 2, v->n_out == 2 ? 2 : 1);
  need_float_in(v, 0), need_float_in(v, 1);
  if (v->n_out == 2) need_quant_out(v, a, 0, 1, cols(TI(v, 0)));
  else need_float_out(v, 0);
  need_same_shape_in(v, 0, 1);
  need_same_shape_out(v, 0, 0);
}

static void vr_swiglu_bwd(const vctx *v, const dfl_attrs *a) {
  need_io(v, 3, 2);
  for (int i = 0; i < 3; i++) need_float_in(v, i);
  need_same_shape_in(v, 0, 1);
  need_same_shape_in(v, 0, 2);
  need_same_shape_out(v, 0, 0);
  need_same_shape_out(v, 1, 0);
}

static void vr_linear_ce(const vctx *v, const dfl_attrs *a) {
  need_io(v, v->n_in == 5 ? 5 : 4, 5);
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
  if (v->n_in == 5) { /* soft labels: the target's rows */
    need_float_in(v, 4);
    if (TI(v, 4)->ndim != 2 || TI(v, 4)->shape[0] != R || TI(v, 4)->shape[1] != H)
      vfail(v, "the target's rows (input 4) must be [%lld, %lld] like y", (long long)R, (long long)H);
    if (!(a->kd_alpha >= 0 && a->kd_alpha <= 1)) vfail(v, "kd_alpha must be in [0, 1]");
    if (!(a->kd_temp >= 0 && a->kd_temp <= 100)) vfail(v, "kd_temp must be in (0, 100] (0 reads as 1)");
  } else if (a->kd_alpha != 0) vfail(v, "kd_alpha needs the target's rows (input 4)");
}

static void vr_scatter_add(const vctx *v, const dfl_attrs *a) {
  need_io(v, 2, 1);
  need_float_in(v, 0), need_2d_in(v, 0), need_i32_in(v, 1), need_float_out(v, 0);
  need_numel_in(v, 1, TI(v, 0)->shape[0]);
  if (TO(v, 0)->ndim != 2 || TO(v, 0)->shape[1] != TI(v, 0)->shape[1]) vfail(v, "output must be [V, %lld]", (long long)TI(v, 0)->shape[1]);
}

static void vr_scale(const vctx *v, const dfl_attrs *a) {
  if (v->n_in < 1 || v->n_in > 2 || v->n_out != 1) vfail(v, "expects 1 or 2 inputs and 1 output");
  need_float_in(v, 0), need_float_out(v, 0);
  if (v->n_in == 2 && v->in[1] >= 0) need_float_in(v, 1), need_numel_in(v, 1, 1);
  need_numel_out(v, 0, NI(v, 0));
}

static void vr_sum(const vctx *v, const dfl_attrs *a) {
  need_io(v, 1, 1);
  need_float_in(v, 0), need_float_out(v, 0), need_numel_out(v, 0, 1);
}

static void vr_dflash_metrics(const vctx *v, const dfl_attrs *a) {
  need_io(v, 4, 1);
  if (a->batch <= 0 || a->N <= 0 || a->B <= 0) vfail(v, "batch, N, B must be positive");
  int64_t q = (int64_t)a->batch * a->N * a->B;
  for (int i = 0; i < 3; i++) need_float_in(v, i), need_numel_in(v, i, q);
  need_i32_in(v, 3), need_numel_in(v, 3, (int64_t)a->batch * a->N);
  need_float_out(v, 0), need_numel_out(v, 0, DFL_METRIC_COUNT + 2 * (int64_t)a->B);
}

static void vr_accum(const vctx *v, const dfl_attrs *a) {
  need_io(v, 2, 1);
  need_float_in(v, 0), need_float_in(v, 1);
  if (v->out[0] != v->in[0]) vfail(v, "output must be the accumulator itself (in place)");
  if (!dfl_tensor_is_persistent(TI(v, 0))) vfail(v, "the accumulator must be persistent");
  need_numel_in(v, 1, NI(v, 0));
}

static void vr_sumsq_acc(const vctx *v, const dfl_attrs *a) {
  need_io(v, 2, 1);
  need_float_in(v, 0), need_float_in(v, 1), need_numel_in(v, 0, 1);
  if (v->out[0] != v->in[0]) vfail(v, "output must be the accumulator itself (in place)");
}

static void vr_opt_prep(const vctx *v, const dfl_attrs *a) {
  need_io(v, 3, 1);
  for (int i = 0; i < 3; i++) need_float_in(v, i);
  need_numel_in(v, 0, 1), need_numel_in(v, 1, 1), need_numel_in(v, 2, DFL_OPT_COUNT);
  if (v->out[0] != v->in[2]) vfail(v, "output must be the state itself (in place)");
}

static void vr_adamw(const vctx *v, const dfl_attrs *a) {
  need_io(v, 6, 5);
  for (int i = 0; i < 6; i++) need_float_in(v, i);
  for (int i = 1; i < 5; i++) need_numel_in(v, i, NI(v, 0));
  need_numel_in(v, 5, DFL_OPT_COUNT);
  for (int i = 0; i < 5; i++)
    if (v->out[i] != v->in[i]) vfail(v, "outputs must be param, master, m, v, grad themselves (in place)");
}

static void need_window_in(const vctx *v, int i, int64_t rows, int64_t w, int64_t at, const char *what);
static void vr_copy(const vctx *v, const dfl_attrs *a) {
  /* also a reshape: only the element count must agree; or a column window of x's rows (a.win[0]) */
  need_io(v, 1, 1);
  if (a->win[0] == 0 && NO(v, 0) == NI(v, 0)) return;
  if (TO(v, 0)->ndim != 2) vfail(v, "a column window's output must be [rows, cols]");
  need_float_in(v, 0), need_float_out(v, 0);
  need_window_in(v, 0, rows(TO(v, 0)), cols(TO(v, 0)), a->win[0], "x");
}

static void vr_concat_cols(const vctx *v, const dfl_attrs *a) {
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
}

static void vr_fill(const vctx *v, const dfl_attrs *a) {
  need_io(v, 0, 1);
  need_float_out(v, 0);
}

static void vr_block_rows(const vctx *v, const dfl_attrs *a) {
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
}

static void vr_block_drop(const vctx *v, const dfl_attrs *a) {
  need_io(v, 1, 1);
  const dfl_tensor *X = TI(v, 0), *O = TO(v, 0);
  if (X->dtype != O->dtype) vfail(v, "input and output must have one dtype");
  if (!float_dtype(X->dtype) && (X->dtype != DFL_I32 || v->code == DFL_OP_BLOCK_UNDROP))
    vfail(v, "the tensors must be float (BLOCK_DROP: or i32)");
  if (X->ndim != O->ndim || X->ndim < 1 || X->ndim > 2) vfail(v, "input and output must both be 1-D or 2-D");
  if (a->B < 2) vfail(v, "a.B (the block size) must be >= 2, got %d", a->B);
  const dfl_tensor *full = v->code == DFL_OP_BLOCK_DROP ? X : O, *part = v->code == DFL_OP_BLOCK_DROP ? O : X;
  int64_t Q = full->shape[0];
  if (Q % a->B) vfail(v, "the full tensor's rows (%lld) must be a multiple of B = %d", (long long)Q, a->B);
  if (part->shape[0] != Q - Q / a->B || (X->ndim == 2 && X->shape[1] != O->shape[1]))
    vfail(v, "the dropped tensor must have %lld rows (Q - Q/B) of the full tensor's columns", (long long)(Q - Q / a->B));
}

static void vr_quant_f8(const vctx *v, const dfl_attrs *a) {
  need_io(v, 1, 2);
  need_float_in(v, 0), need_2d_in(v, 0);
  need_same_shape_out(v, 0, 0);
  if (TO(v, 0)->dtype != DFL_F8E4M3) vfail(v, "output 0 must be f8e4m3");
  if (TO(v, 1)->dtype != DFL_F32) vfail(v, "output 1 (the row scales) must be f32");
  need_numel_out(v, 1, rows(TI(v, 0)));
}

static void vr_matmul_f8(const vctx *v, const dfl_attrs *a) {
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
}

static void vr_conv1d_silu(const vctx *v, const dfl_attrs *a) {
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
}

static void vr_l2norm(const vctx *v, const dfl_attrs *a) {
  need_io(v, 1, 1);
  need_float_in(v, 0), need_float_out(v, 0);
  if (a->group <= 0 || cols(TI(v, 0)) % a->group) vfail(v, "group %d must divide the row width", a->group);
  if (!(a->eps > 0)) vfail(v, "eps must be positive");
  need_same_shape_out(v, 0, 0);
}

/* Input i holds rows of the output's rows, each with a window of w columns at a->win[k] (k = 0, 1). */
static void need_window_in(const vctx *v, int i, int64_t rows, int64_t w, int64_t at, const char *what) {
  int64_t c = cols(TI(v, i));
  if (TI(v, i)->ndim != 2 || c < 1 || NI(v, i) / c != rows || at < 0 || at + w > c)
    vfail(v, "%s: columns %lld..%lld of rows of input %d must exist, with %lld rows", what, (long long)at,
          (long long)(at + w - 1), i, (long long)rows);
}

static void vr_gdn_gates(const vctx *v, const dfl_attrs *a) {
  need_io(v, 4, 2);
  for (int i = 0; i < 4; i++) need_float_in(v, i);
  const int64_t H = NI(v, 2), R = TO(v, 0)->ndim == 2 && H > 0 ? NO(v, 0) / H : -1;
  if (TO(v, 0)->ndim != 2 || cols(TO(v, 0)) != H) vfail(v, "g must be [rows, heads], heads = A_log's length");
  need_numel_in(v, 3, H);
  need_window_in(v, 0, R, H, a->win[0], "a");
  need_window_in(v, 1, R, H, a->win[1], "b");
  if (TO(v, 1)->ndim != 2 || NO(v, 1) != NO(v, 0) || cols(TO(v, 1)) != H) vfail(v, "beta must have g's shape");
  if (TO(v, 0)->dtype != DFL_F32 || TO(v, 1)->dtype != DFL_F32) vfail(v, "g and beta must be f32");
}

static void vr_gated_delta(const vctx *v, const dfl_attrs *a) {
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
}

static void vr_norm_gate(const vctx *v, const dfl_attrs *a) {
  need_io(v, 3, 1);
  for (int i = 0; i < 3; i++) need_float_in(v, i);
  need_float_out(v, 0);
  if (a->group <= 0 || cols(TI(v, 0)) % a->group) vfail(v, "group %d must divide the row width", a->group);
  int64_t c0 = cols(TI(v, 0));
  need_window_in(v, 1, c0 > 0 ? NI(v, 0) / c0 : -1, c0, a->win[1], "z");
  need_numel_in(v, 2, a->group);
  need_same_shape_out(v, 0, 0);
}

static void vr_sigmoid_mul(const vctx *v, const dfl_attrs *a) {
  need_io(v, 2, 1);
  need_float_in(v, 0), need_float_in(v, 1), need_float_out(v, 0);
  need_same_shape_in(v, 1, 0);
  need_same_shape_out(v, 0, 0);
}

#define vr_rmsnorm_bwd vr_rmsnorm
#define vr_block_expand vr_block_rows
#define vr_block_expand_bwd vr_block_rows
#define vr_block_undrop vr_block_drop
static void (*const vr_rules[DFL_OP_COUNT])(const vctx *v, const dfl_attrs *a) = {
#define DFL_OP(NAME, name, family, diff) [DFL_OP_##NAME] = vr_##name,
#include "compiler/ops.def"
#undef DFL_OP
};

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
  vr_rules[v->code](v, a);
}


void dfl_graph_validate_op(const dfl_graph *g, dfl_opcode code, const char *label, const int *in, int n_in,
                           const int *out, int n_out, const dfl_attrs *a) {
  vctx v = {g, code, label, in, out, n_in, n_out};
  if (n_in < 0 || n_in > DFL_MAX_IO || n_out < 1 || n_out > DFL_MAX_IO || (unsigned)code >= DFL_OP_COUNT)
    vfail(&(vctx){g, code, label, in, out, 0, 0}, "bad op: %d inputs, %d outputs", n_in, n_out);
  validate(&v, a);
}
