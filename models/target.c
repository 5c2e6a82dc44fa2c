/*
** target.c: the frozen target forward (Qwen3 / Llama dense decoders, Hugging Face semantics).
**
**   h = embed[ids]
**   per layer: u = rmsnorm(h); q,k,v = u Wq^T, u Wk^T, u Wv^T; (Qwen3: per-head q/k rmsnorm);
**              rope(q), rope(k) at positions 0..S-1 of each sequence; causal GQA attention;
**              h += a Wo^T; h += down(silu(p Wg^T) * (p Wu^T)), p = rmsnorm(h)
**   hidden i+1 = output of layer i (before any final norm); logits = rmsnorm(h) W_lm^T
** With `quantize = fp8` the seven projections of each layer are FP8 GEMMs: each input quantized
** per row (QUANT_F8, once for q/k/v and once for gate/up), the weights per output row at load.
*/
#include <stdio.h>
#include <string.h>
#include <math.h>

#include "models/models.h"

static dfl_dtype act_dtype(const dfl_spec *s) { return s->precision == DFL_PREC_BF16 ? DFL_BF16 : DFL_F32; }

static int frozen2(dfl_graph *g, dfl_dtype dt, int64_t r, int64_t c, const char *fmt, int layer) {
  char name[DFL_NAME_MAX];
  snprintf(name, sizeof name, fmt, layer);
  return dfl_tensor_2d(g, name, dt, DFL_T_FROZEN, r, c);
}

static int frozen1(dfl_graph *g, dfl_dtype dt, int64_t n, const char *fmt, int layer) {
  char name[DFL_NAME_MAX];
  snprintf(name, sizeof name, fmt, layer);
  return dfl_tensor_1d(g, name, dt, DFL_T_FROZEN, n);
}

/* A linear layer's frozen weight [r, c]: bf16/f32, or (quantize = fp8) f8e4m3 plus its per-row
** scales "<name>_scale" [r] f32, which the loader derives from the checkpoint's weight. */
static int frozen_w(dfl_graph *g, const dfl_spec *s, dfl_dtype dt, int64_t r, int64_t c, const char *fmt, int layer,
                    int *scale) {
  int w = frozen2(g, s->target_fp8 ? DFL_F8E4M3 : dt, r, c, fmt, layer);
  *scale = -1;
  if (s->target_fp8) {
    char name[DFL_NAME_MAX + 8];
    snprintf(name, sizeof name, "%s_scale", g->t[w].name);
    *scale = dfl_tensor_1d(g, name, DFL_F32, DFL_T_FROZEN, r);
  }
  return w;
}

/* y = x W^T; in FP8, x is (x8, sx), quantized once per input by dfl_quant_f8, and the GEMM marked
** for fast accumulation when the spec asks for it (quantize = fp8_fast). */
static int lin(dfl_graph *g, const dfl_spec *s, int x, int sx, int w, int sw, dfl_dtype dt, const char *name) {
  if (sw < 0) return dfl_linear(g, x, w, dt, name);
  int y = dfl_linear_f8(g, x, sx, w, sw, dt, name);
  g->ops[g->nops - 1].a.fast_accum = s->target_fp8_fast;
  return y;
}
static int quant(dfl_graph *g, const dfl_spec *s, int x, int *sx, const char *name) {
  *sx = -1;
  return s->target_fp8 ? dfl_quant_f8(g, x, sx, name) : x;
}

int dfl_model_target(dfl_graph *g, const dfl_spec *s, int batch, int S, int ids, int all_hidden,
                     int logits, dfl_target_out *out) {
  const dfl_arch *a = &s->target;
  const dfl_dtype dt = act_dtype(s);
  const int H = a->hidden, hd = a->head_dim, nh = a->heads, nkv = a->kv_heads;
  const int64_t R = (int64_t)batch * S;
  char nm[DFL_NAME_MAX], label[DFL_NAME_MAX];

  if (s->n_taps < 1 || s->n_taps > DFL_MAX_IO) {
    fprintf(stderr, "dfl_model_target: %d tapped layers (1..%d supported)\n", s->n_taps, DFL_MAX_IO);
    return DFL_ERR;
  }
  int deepest = 0;
  for (int i = 0; i < s->n_taps; i++) {
    if (s->taps[i] < 0 || s->taps[i] >= a->layers) {
      fprintf(stderr, "dfl_model_target: tap %d outside the target's %d layers\n", s->taps[i], a->layers);
      return DFL_ERR;
    }
    if (s->taps[i] > deepest) deepest = s->taps[i];
  }
  const int n_layers = (all_hidden || logits) ? a->layers : deepest + 1;

  memset(out, 0, sizeof *out);
  for (int i = 0; i <= DFL_MAX_LAYERS; i++) out->hidden[i] = -1;
  out->logits = -1;

  const dfl_phase saved_phase = g->cur_phase;
  const char *saved_label = g->cur_label;
  g->cur_phase = DFL_PH_TARGET;
  g->cur_label = "target.embed";

  out->embed = dfl_tensor_2d(g, "model.embed_tokens.weight", dt, DFL_T_FROZEN, a->vocab, H);
  out->lm_head = a->tie_embeddings ? out->embed
                                   : dfl_tensor_2d(g, "lm_head.weight", dt, DFL_T_FROZEN, a->vocab, H);

  int pos = dfl_tensor_1d(g, "target.pos", DFL_I32, DFL_T_ACT, R);
  dfl_attrs at;
  memset(&at, 0, sizeof at);
  at.n = S;
  dfl_op_add(g, DFL_OP_IOTA_MOD, NULL, 0, &pos, 1, &at);

  int h = dfl_gather(g, out->embed, ids, dt, "target.h0");
  out->hidden[0] = h;

  for (int l = 0; l < n_layers; l++) {
    snprintf(label, sizeof label, "target.layers.%d", l);
    g->cur_label = label;
    int w_in = frozen1(g, dt, H, "model.layers.%d.input_layernorm.weight", l);
    int sq, sk, sv, so, sg, su, sd, xs; /* FP8 scales of the weights, and of the current input */
    int wq = frozen_w(g, s, dt, (int64_t)nh * hd, H, "model.layers.%d.self_attn.q_proj.weight", l, &sq);
    int wk = frozen_w(g, s, dt, (int64_t)nkv * hd, H, "model.layers.%d.self_attn.k_proj.weight", l, &sk);
    int wv = frozen_w(g, s, dt, (int64_t)nkv * hd, H, "model.layers.%d.self_attn.v_proj.weight", l, &sv);
    int wo = frozen_w(g, s, dt, H, (int64_t)nh * hd, "model.layers.%d.self_attn.o_proj.weight", l, &so);
    int w_post = frozen1(g, dt, H, "model.layers.%d.post_attention_layernorm.weight", l);
    int wg = frozen_w(g, s, dt, a->intermediate, H, "model.layers.%d.mlp.gate_proj.weight", l, &sg);
    int wu = frozen_w(g, s, dt, a->intermediate, H, "model.layers.%d.mlp.up_proj.weight", l, &su);
    int wd = frozen_w(g, s, dt, H, a->intermediate, "model.layers.%d.mlp.down_proj.weight", l, &sd);

#define NM(x) (snprintf(nm, sizeof nm, "target.%d." x, l), nm)
    int u = dfl_rmsnorm(g, h, w_in, H, a->rms_eps, NM("u"));
    int ux = quant(g, s, u, &xs, NM("u8"));
    int q = lin(g, s, ux, xs, wq, sq, dt, NM("q"));
    int k = lin(g, s, ux, xs, wk, sk, dt, NM("k"));
    int v = lin(g, s, ux, xs, wv, sv, dt, NM("v"));
    if (a->qk_norm) {
      int wqn = frozen1(g, dt, hd, "model.layers.%d.self_attn.q_norm.weight", l);
      int wkn = frozen1(g, dt, hd, "model.layers.%d.self_attn.k_norm.weight", l);
      q = dfl_rmsnorm(g, q, wqn, hd, a->rms_eps, NM("qn"));
      k = dfl_rmsnorm(g, k, wkn, hd, a->rms_eps, NM("kn"));
    }
    q = dfl_rope(g, q, pos, nh, hd, a->rope_theta, NM("qr"));
    k = dfl_rope(g, k, pos, nkv, hd, a->rope_theta, NM("kr"));

    int att[2];
    att[0] = dfl_tensor_2d(g, NM("attn"), dt, DFL_T_ACT, R, (int64_t)nh * hd);
    att[1] = dfl_tensor_1d(g, NM("lse"), DFL_F32, DFL_T_ACT, R * nh);
    memset(&at, 0, sizeof at);
    at.mask = DFL_MASK_CAUSAL;
    at.batch = batch; at.S = S;
    at.heads = nh; at.kv_heads = nkv; at.head_dim = hd;
    at.window = 0;
    at.scale = 1.0 / sqrt((double)hd);
    int ain[3] = {q, k, v};
    dfl_op_add(g, DFL_OP_ATTENTION, ain, 3, att, 2, &at);

    int ax = quant(g, s, att[0], &xs, NM("attn8"));
    int o = lin(g, s, ax, xs, wo, so, dt, NM("o"));
    h = dfl_add(g, h, o, NM("h_attn"));
    int p = dfl_rmsnorm(g, h, w_post, H, a->rms_eps, NM("p"));
    int px = quant(g, s, p, &xs, NM("p8"));
    int gt = lin(g, s, px, xs, wg, sg, dt, NM("gate"));
    int up = lin(g, s, px, xs, wu, su, dt, NM("up"));
    int sw = dfl_swiglu(g, gt, up, NM("swiglu"));
    int swx = quant(g, s, sw, &xs, NM("swiglu8"));
    int dn = lin(g, s, swx, xs, wd, sd, dt, NM("down"));
    h = dfl_add(g, h, dn, NM("h"));
#undef NM
    out->hidden[l + 1] = h;
  }

  /* Tapped features, in taps order. */
  g->cur_label = "target.features";
  if (s->n_taps == 1) {
    out->features = out->hidden[s->taps[0] + 1];
  } else {
    int in[DFL_MAX_IO];
    for (int i = 0; i < s->n_taps; i++) in[i] = out->hidden[s->taps[i] + 1];
    out->features = dfl_tensor_2d(g, "target.features", dt, DFL_T_ACT, R, (int64_t)s->n_taps * H);
    memset(&at, 0, sizeof at);
    dfl_op_add(g, DFL_OP_CONCAT_COLS, in, s->n_taps, &out->features, 1, &at);
  }

  if (all_hidden || logits) {
    g->cur_label = "target.head";
    int wn = dfl_tensor_1d(g, "model.norm.weight", dt, DFL_T_FROZEN, H);
    int y = dfl_rmsnorm(g, h, wn, H, a->rms_eps, "target.final_norm");
    if (all_hidden) out->hidden[a->layers] = y;
    if (logits) out->logits = dfl_linear(g, y, out->lm_head, DFL_F32, "target.logits");
  }

  g->cur_phase = saved_phase;
  g->cur_label = saved_label;
  return DFL_OK;
}
