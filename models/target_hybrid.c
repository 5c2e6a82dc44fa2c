/*
** target_hybrid.c: the mixers of the qwen3_5 hybrid target (Qwen3.5 / Qwen3.6; reference
** ../shared/reference/qwen35-hybrid.md, Hugging Face semantics), on u = input_layernorm(h):
**
**   Gated DeltaNet (linear_attention):  q|k|v = conv1d_silu(u Wqkv^T) (in_proj_qkv is [q | k | v]:
**     one GEMM, then the depthwise conv in its split form), q, k = l2norm per head (q scaled by
**     1/sqrt(dk)) in the same pass; z|a|b = u [Wz; Wa; Wb]^T (one GEMM: zab_merged); g, beta = gates(a, b,
**     A_log, dt_bias); o = gated delta rule; n = rmsnorm(o) per head * w * silu(z); out = n Wout^T
**   gated attention (full_attention):  q_proj emits query and gate interleaved per head, loaded as
**     two weights (rows [0, hd) and [hd, 2hd) of every 2hd); (1 + w) q/k norms; partial RoPE;
**     causal GQA; out = (attn * sigmoid(gate)) Wo^T
**
** The row selections, concatenations and the (1 + w) weights are written into the tensor names the loader
** reads (runtime/io/weights.c): "NAME[a:b/p]" is rows i with a <= i % p < b; "P{x,y}Q" is PxQ's rows, then PyQ's.
*/
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/target_internal.h"

#define LIN "model.layers.%d.linear_attn."
#define ATT "model.layers.%d.self_attn."

/* The weight of layer l named fmt (which holds the layer's %d), looked up after creation. */
static int wfind(const dfl_graph *g, const char *fmt, int l) {
  char name[DFL_NAME_MAX];
  snprintf(name, sizeof name, fmt, l);
  return dfl_tensor_find(g, name);
}

/* Rows [a, b) of every p of a checkpoint weight, as an [b-a, c] (x count) frozen weight. */
static int slice_w(dfl_graph *g, const dfl_spec *s, const char *base, int l, int64_t a, int64_t b, int64_t p, int64_t c,
                   int64_t periods, char *name_out, int *scale) {
  char fmt[DFL_NAME_MAX];
  snprintf(fmt, sizeof fmt, "%s[%lld:%lld/%lld]", base, (long long)a, (long long)b, (long long)p);
  snprintf(name_out, DFL_NAME_MAX, fmt, l);
  return dfl_target_weight(g, s, dfl_target_act_dtype(s), (b - a) * periods, c, fmt, l, scale);
}

/* A frozen [r, c] weight that is not a GEMM operand (the conv's), never FP8. */
static int plain_slice(dfl_graph *g, const dfl_spec *s, const char *base, int l, int64_t a, int64_t b, int64_t p,
                       int64_t c) {
  char fmt[DFL_NAME_MAX];
  snprintf(fmt, sizeof fmt, "%s[%lld:%lld/%lld]", base, (long long)a, (long long)b, (long long)p);
  return dfl_target_frozen2(g, dfl_target_act_dtype(s), b - a, c, fmt, l);
}

/* z, a and b as one GEMM's weight, [Wz; Wa; Wb] by rows: u is read once for the three, where the a and b
** projections (Hv columns each) alone read all of u for a few FLOPs (13 ms of the 27B forward as two
** GEMMs, 2026-12-04). Their readers take their columns in place (GDN_GATES' and NORM_GATE's windows). In
** FP8 only where the rows, vd + 2 Hv, are a multiple of 16 (the shape dfl_target_weight quantizes): else
** z stays an FP8 GEMM of its own beside a and b. */
static int zab_merged(const dfl_spec *s) { return !s->target_fp8 || s->target.lin_value_heads % 8 == 0; }
#define ZAB "in_proj_{z,a,b}.weight"

int dfl_target_hybrid_weights(dfl_graph *g, const dfl_spec *s, int l) {
  const dfl_arch *a = &s->target;
  const dfl_dtype dt = dfl_target_act_dtype(s);
  const int64_t H = a->hidden;
  char nm[DFL_NAME_MAX];
  int sc;
  if (a->linear[l]) {
    const int64_t kd = (int64_t)a->lin_key_heads * a->lin_key_dim, vd = (int64_t)a->lin_value_heads * a->lin_value_dim;
    const int64_t cd = 2 * kd + vd, Hv = a->lin_value_heads;
    dfl_target_weight(g, s, dt, cd, H, LIN "in_proj_qkv.weight", l, &sc);
    if (zab_merged(s)) {
      dfl_target_weight(g, s, dt, vd + 2 * Hv, H, LIN ZAB, l, &sc);
    } else {
      dfl_target_weight(g, s, dt, vd, H, LIN "in_proj_z.weight", l, &sc);
      dfl_target_weight(g, s, dt, Hv, H, LIN "in_proj_a.weight", l, &sc);
      dfl_target_weight(g, s, dt, Hv, H, LIN "in_proj_b.weight", l, &sc);
    }
    plain_slice(g, s, LIN "conv1d.weight", l, 0, cd, cd, a->conv_kernel); /* [cd, 1, K] stored: all rows */
    /* g is formed in f32 from f32 A_log and dt_bias (HF casts them up), whatever they are stored as */
    dfl_target_frozen1(g, DFL_F32, Hv, LIN "A_log", l);
    dfl_target_frozen1(g, DFL_F32, Hv, LIN "dt_bias", l);
    dfl_target_frozen1(g, dt, a->lin_value_dim, LIN "norm.weight", l); /* plain w, not 1 + w */
    dfl_target_weight(g, s, dt, H, vd, LIN "out_proj.weight", l, &sc);
  } else {
    const int64_t hd = a->head_dim, nh = a->heads, nkv = a->kv_heads;
    slice_w(g, s, ATT "q_proj.weight", l, 0, hd, 2 * hd, H, nh, nm, &sc);
    slice_w(g, s, ATT "q_proj.weight", l, hd, 2 * hd, 2 * hd, H, nh, nm, &sc);
    dfl_target_weight(g, s, dt, nkv * hd, H, ATT "k_proj.weight", l, &sc);
    dfl_target_weight(g, s, dt, nkv * hd, H, ATT "v_proj.weight", l, &sc);
    dfl_target_weight(g, s, dt, H, nh * hd, ATT "o_proj.weight", l, &sc);
    dfl_target_norm_w(g, s, hd, ATT "q_norm.weight", l);
    dfl_target_norm_w(g, s, hd, ATT "k_norm.weight", l);
  }
  return DFL_OK;
}

/* A weight and its FP8 scales (or -1), by name. */
static int wget(const dfl_graph *g, const char *fmt, int l, int *scale) {
  char name[DFL_NAME_MAX + 8];
  snprintf(name, sizeof name, fmt, l);
  int w = dfl_tensor_find(g, name);
  strcat(name, "_scale");
  *scale = dfl_tensor_find(g, name);
  return w;
}

static int act_like(dfl_graph *g, int x, dfl_dtype dt, int64_t cols, const char *name) {
  return dfl_tensor_2d(g, name, dt, DFL_T_ACT, g->t[x].shape[0], cols);
}

static int op1(dfl_graph *g, dfl_opcode code, const int *in, int n_in, int y, const dfl_attrs *at) {
  return dfl_op_add(g, code, in, n_in, &y, 1, at) < 0 ? -1 : y;
}

static int gated_deltanet(dfl_graph *g, const dfl_spec *s, int l, int u, int batch, int S) {
  const dfl_arch *a = &s->target;
  const dfl_dtype dt = dfl_target_act_dtype(s);
  const int Hk = a->lin_key_heads, Hv = a->lin_value_heads, dk = a->lin_key_dim, dv = a->lin_value_dim;
  const int64_t kd = (int64_t)Hk * dk, vd = (int64_t)Hv * dv, cd = 2 * kd + vd;
  char nm[DFL_NAME_MAX], wn[DFL_NAME_MAX];
  int sq, sz = -1, sa = -1, sb = -1, so, xs, unused;
#define NM(x) (snprintf(nm, sizeof nm, "target.%d." x, l), nm)
#define W(fmt, ...) (snprintf(wn, sizeof wn, LIN fmt, l, __VA_ARGS__), wn) /* no %% left: wget reads it as is */
  int wqkv = wget(g, LIN "in_proj_qkv.weight", l, &sq);
  int cw = wget(g, W("conv1d.weight[0:%lld/%lld]", (long long)cd, (long long)cd), l, &unused);
#undef W
  const int merged = zab_merged(s);
  int wz = wget(g, merged ? LIN ZAB : LIN "in_proj_z.weight", l, &sz), wo = wget(g, LIN "out_proj.weight", l, &so);
  int wa = merged ? -1 : wget(g, LIN "in_proj_a.weight", l, &sa), wb = merged ? -1 : wget(g, LIN "in_proj_b.weight", l, &sb);
  int alog = wfind(g, LIN "A_log", l), dtb = wfind(g, LIN "dt_bias", l), wnorm = wfind(g, LIN "norm.weight", l);

  int ux = dfl_target_quant(g, s, u, &xs, NM("u8"));
  /* one GEMM for q|k|v, then the conv, SiLU and q/k's L2 norms (eps 1e-6 inside the square root, as
  ** HF and FLA; q scaled by 1/sqrt(dk)) in one pass writing q, k and v apart */
  int qkv = dfl_target_lin(g, s, ux, xs, wqkv, sq, dt, NM("qkvx"));
  dfl_attrs at;
  memset(&at, 0, sizeof at);
  at.S = S, at.group = dk, at.eps = 1e-6, at.alpha = 1.0 / sqrt((double)dk);
  int cin[2] = {qkv, cw}, cout[3] = {act_like(g, qkv, dt, kd, NM("qn")), act_like(g, qkv, dt, kd, NM("kn")),
                                     act_like(g, qkv, dt, vd, NM("vc"))};
  if (dfl_op_add(g, DFL_OP_CONV1D_SILU, cin, 2, cout, 3, &at) < 0) return -1;
  int q = cout[0], k = cout[1], v = cout[2];

  /* z|a|b (merged), or a and b apart: unquantized where their rows are not a multiple of 16 (dfl_target_weight) */
  int z = -1, ga, gb;
  memset(&at, 0, sizeof at);
  if (merged) {
    z = ga = gb = dfl_target_lin(g, s, sz < 0 ? u : ux, sz < 0 ? -1 : xs, wz, sz, dt, NM("zab"));
    at.win[0] = vd, at.win[1] = vd + Hv;
  } else {
    ga = dfl_target_lin(g, s, sa < 0 ? u : ux, sa < 0 ? -1 : xs, wa, sa, dt, NM("a"));
    gb = dfl_target_lin(g, s, sb < 0 ? u : ux, sb < 0 ? -1 : xs, wb, sb, dt, NM("b"));
  }
  int gates[2] = {act_like(g, ga, DFL_F32, Hv, NM("g")), act_like(g, ga, DFL_F32, Hv, NM("beta"))};
  int gin[4] = {ga, gb, alog, dtb};
  if (dfl_op_add(g, DFL_OP_GDN_GATES, gin, 4, gates, 2, &at) < 0) return -1;

  memset(&at, 0, sizeof at);
  at.heads = Hv, at.kv_heads = Hk, at.head_dim = dk, at.S = S, at.batch = batch;
  int din[5] = {q, k, v, gates[0], gates[1]};
  int o = op1(g, DFL_OP_GATED_DELTA, din, 5, act_like(g, v, dt, vd, NM("delta")), &at);

  if (!merged) z = dfl_target_lin(g, s, ux, xs, wz, sz, dt, NM("z"));
  memset(&at, 0, sizeof at);
  at.group = dv, at.eps = a->rms_eps; /* z: columns [0, vd) of z|a|b, or z itself */
  int nin[3] = {o, z, wnorm};
  int n = op1(g, DFL_OP_NORM_GATE, nin, 3, act_like(g, o, dt, vd, NM("normed")), &at);
  int nx = dfl_target_quant(g, s, n, &xs, NM("normed8"));
  return dfl_target_lin(g, s, nx, xs, wo, so, dt, NM("o"));
#undef NM
}

static int gated_attention(dfl_graph *g, const dfl_spec *s, int l, int u, int pos, int batch, int S) {
  const dfl_arch *a = &s->target;
  const dfl_dtype dt = dfl_target_act_dtype(s);
  const int hd = a->head_dim, nh = a->heads, nkv = a->kv_heads;
  char nm[DFL_NAME_MAX], wn[DFL_NAME_MAX];
  int sq, sg, sk, sv, so, xs;
#define NM(x) (snprintf(nm, sizeof nm, "target.%d." x, l), nm)
  snprintf(wn, sizeof wn, ATT "q_proj.weight[0:%d/%d]", l, hd, 2 * hd);
  int wq = wget(g, wn, l, &sq);
  snprintf(wn, sizeof wn, ATT "q_proj.weight[%d:%d/%d]", l, hd, 2 * hd, 2 * hd);
  int wg = wget(g, wn, l, &sg);
  int wk = wget(g, ATT "k_proj.weight", l, &sk), wv = wget(g, ATT "v_proj.weight", l, &sv);
  int wo = wget(g, ATT "o_proj.weight", l, &so);
  int wqn = wfind(g, ATT "q_norm.weight(1+w)", l), wkn = wfind(g, ATT "k_norm.weight(1+w)", l);

  int ux = dfl_target_quant(g, s, u, &xs, NM("u8"));
  int q = dfl_target_lin(g, s, ux, xs, wq, sq, dt, NM("q"));
  int gate = dfl_target_lin(g, s, ux, xs, wg, sg, dt, NM("gate_q"));
  int k = dfl_target_lin(g, s, ux, xs, wk, sk, dt, NM("k"));
  int v = dfl_target_lin(g, s, ux, xs, wv, sv, dt, NM("v"));
  q = dfl_rmsnorm(g, q, wqn, hd, a->rms_eps, NM("qn"));
  k = dfl_rmsnorm(g, k, wkn, hd, a->rms_eps, NM("kn"));
  q = dfl_rope(g, q, pos, nh, hd, a->rope_theta, NM("qr"));
  g->ops[g->nops - 1].a.rot_dim = a->rot_dim;
  k = dfl_rope(g, k, pos, nkv, hd, a->rope_theta, NM("kr"));
  g->ops[g->nops - 1].a.rot_dim = a->rot_dim;

  int att = dfl_target_causal_attention(g, s, l, q, k, v, batch, S);
  if (att < 0) return -1;
  dfl_attrs at;
  int gin[2] = {att, gate};
  memset(&at, 0, sizeof at);
  int y = op1(g, DFL_OP_SIGMOID_MUL, gin, 2, act_like(g, att, dt, (int64_t)nh * hd, NM("gated")), &at);
  int yx = dfl_target_quant(g, s, y, &xs, NM("gated8"));
  return dfl_target_lin(g, s, yx, xs, wo, so, dt, NM("o"));
#undef NM
}

int dfl_target_hybrid_mixer(dfl_graph *g, const dfl_spec *s, int l, int u, int pos, int batch, int S) {
  return s->target.linear[l] ? gated_deltanet(g, s, l, u, batch, S) : gated_attention(g, s, l, u, pos, batch, S);
}
