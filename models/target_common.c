/*
** target_common.c: what the target's layer builders share (target.c: the dense layers and the
** frame; target_hybrid.c: the qwen3_5 mixers), so that neither calls into the other's file.
*/
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/target_internal.h"

dfl_dtype dfl_target_act_dtype(const dfl_spec *s) { return s->precision == DFL_PREC_BF16 ? DFL_BF16 : DFL_F32; }

int dfl_target_frozen2(dfl_graph *g, dfl_dtype dt, int64_t r, int64_t c, const char *fmt, int layer) {
  char name[DFL_NAME_MAX];
  snprintf(name, sizeof name, fmt, layer);
  return dfl_tensor_2d(g, name, dt, DFL_T_FROZEN, r, c);
}

int dfl_target_frozen1(dfl_graph *g, dfl_dtype dt, int64_t n, const char *fmt, int layer) {
  char name[DFL_NAME_MAX];
  snprintf(name, sizeof name, fmt, layer);
  return dfl_tensor_1d(g, name, dt, DFL_T_FROZEN, n);
}

int dfl_target_weight(dfl_graph *g, const dfl_spec *s, dfl_dtype dt, int64_t r, int64_t c, const char *fmt, int layer,
                      int *scale) {
  /* FP8 only where cuBLASLt's FP8 GEMMs take the shape (output and inner dimensions multiples of 16):
  ** the rest (the hybrid's a and b projections at a few value heads) stay in the activations' dtype */
  const int f8 = s->target_fp8 && r % 16 == 0 && c % 16 == 0;
  int w = dfl_target_frozen2(g, f8 ? DFL_F8E4M3 : dt, r, c, fmt, layer);
  *scale = -1;
  if (f8) {
    char name[DFL_NAME_MAX + 8];
    snprintf(name, sizeof name, "%s_scale", g->t[w].name);
    *scale = dfl_tensor_1d(g, name, DFL_F32, DFL_T_FROZEN, r);
  }
  return w;
}

/* In FP8 the GEMM is marked for fast accumulation when the spec asks for it (quantize = fp8_fast). */
int dfl_target_lin(dfl_graph *g, const dfl_spec *s, int x, int sx, int w, int sw, dfl_dtype dt, const char *name) {
  if (sw < 0 && sx >= 0) { /* an unquantized weight needs the unquantized input: the caller's to pass */
    fprintf(stderr, "dflc: internal error: %s: an FP8 input for a weight kept in %s\n", name, dfl_dtype_name(g->t[w].dtype));
    return -1;
  }
  if (sw < 0) return dfl_linear(g, x, w, dt, name);
  int y = dfl_linear_f8(g, x, sx, w, sw, dt, name);
  g->ops[g->nops - 1].a.fast_accum = s->target_fp8_fast;
  return y;
}

int dfl_target_quant(dfl_graph *g, const dfl_spec *s, int x, int *sx, const char *name) {
  *sx = -1;
  return s->target_fp8 ? dfl_quant_f8(g, x, sx, name) : x;
}

/* HF's Qwen3_5RMSNorm multiplies by (1 + w) in f32 before rounding: the weight, 1 + w, is an f32
** tensor (its name ends in "(1+w)": runtime/io/weights.c adds the one), so nothing is rounded early. */
int dfl_target_norm_w(dfl_graph *g, const dfl_spec *s, int64_t n, const char *fmt, int layer) {
  if (!s->target.norm_plus1) return dfl_target_frozen1(g, dfl_target_act_dtype(s), n, fmt, layer);
  char f2[DFL_NAME_MAX];
  snprintf(f2, sizeof f2, "%s(1+w)", fmt);
  return dfl_target_frozen1(g, DFL_F32, n, f2, layer);
}

/* Causal GQA attention of q [R, nh*hd] over k, v [R, nkv*hd], sequences of S rows: its output. */
int dfl_target_causal_attention(dfl_graph *g, const dfl_spec *s, int l, int q, int k, int v, int batch, int S) {
  const dfl_arch *a = &s->target;
  const int hd = a->head_dim, nh = a->heads;
  const int64_t R = (int64_t)batch * S;
  char nm[DFL_NAME_MAX];
  int att[2];
  snprintf(nm, sizeof nm, "target.%d.attn", l);
  att[0] = dfl_tensor_2d(g, nm, dfl_target_act_dtype(s), DFL_T_ACT, R, (int64_t)nh * hd);
  snprintf(nm, sizeof nm, "target.%d.lse", l);
  att[1] = dfl_tensor_1d(g, nm, DFL_F32, DFL_T_ACT, R * nh);
  dfl_attrs at;
  memset(&at, 0, sizeof at);
  at.mask = DFL_MASK_CAUSAL;
  at.batch = batch, at.S = S;
  at.heads = nh, at.kv_heads = a->kv_heads, at.head_dim = hd;
  at.scale = 1.0 / sqrt((double)hd);
  int ain[3] = {q, k, v};
  return dfl_op_add(g, DFL_OP_ATTENTION, ain, 3, att, 2, &at) < 0 ? -1 : att[0];
}
