/*
** target.c: the frozen target forward (Qwen3 / Llama dense decoders, Hugging Face semantics; the
** qwen3_5 hybrid's mixers are in target_hybrid.c, its frame, MLP and norms are these).
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

#include "models/target_internal.h"

/* The dense decoder's attention weights of layer l (with their FP8 scales, or -1). */
typedef struct { int wq, wk, wv, wo, sq, sk, sv, so; } dense_w;
static void dense_weights(dfl_graph *g, const dfl_spec *s, int l, dense_w *w) {
  const dfl_arch *a = &s->target;
  const dfl_dtype dt = dfl_target_act_dtype(s);
  const int H = a->hidden, hd = a->head_dim, nh = a->heads, nkv = a->kv_heads;
  w->wq = dfl_target_weight(g, s, dt, (int64_t)nh * hd, H, "model.layers.%d.self_attn.q_proj.weight", l, &w->sq);
  w->wk = dfl_target_weight(g, s, dt, (int64_t)nkv * hd, H, "model.layers.%d.self_attn.k_proj.weight", l, &w->sk);
  w->wv = dfl_target_weight(g, s, dt, (int64_t)nkv * hd, H, "model.layers.%d.self_attn.v_proj.weight", l, &w->sv);
  w->wo = dfl_target_weight(g, s, dt, H, (int64_t)nh * hd, "model.layers.%d.self_attn.o_proj.weight", l, &w->so);
}

/* The dense decoder's attention on u = input_layernorm(h): what layer l adds to the residual. */
static int dense_attention(dfl_graph *g, const dfl_spec *s, int l, const dense_w *w, int u, int pos, int batch, int S) {
  const dfl_arch *a = &s->target;
  const dfl_dtype dt = dfl_target_act_dtype(s);
  const int hd = a->head_dim, nh = a->heads, nkv = a->kv_heads;
  char nm[DFL_NAME_MAX];
  int wq = w->wq, wk = w->wk, wv = w->wv, wo = w->wo, sq = w->sq, sk = w->sk, sv = w->sv, so = w->so, xs;
#define NM(x) (snprintf(nm, sizeof nm, "target.%d." x, l), nm)
  int ux = dfl_target_quant(g, s, u, &xs, NM("u8"));
  int q = dfl_target_lin(g, s, ux, xs, wq, sq, dt, NM("q"));
  int k = dfl_target_lin(g, s, ux, xs, wk, sk, dt, NM("k"));
  int v = dfl_target_lin(g, s, ux, xs, wv, sv, dt, NM("v"));
  if (a->qk_norm) {
    int wqn = dfl_target_frozen1(g, dt, hd, "model.layers.%d.self_attn.q_norm.weight", l);
    int wkn = dfl_target_frozen1(g, dt, hd, "model.layers.%d.self_attn.k_norm.weight", l);
    q = dfl_rmsnorm(g, q, wqn, hd, a->rms_eps, NM("qn"));
    k = dfl_rmsnorm(g, k, wkn, hd, a->rms_eps, NM("kn"));
  }
  q = dfl_rope(g, q, pos, nh, hd, a->rope_theta, NM("qr"));
  k = dfl_rope(g, k, pos, nkv, hd, a->rope_theta, NM("kr"));

  int att = dfl_target_causal_attention(g, s, l, q, k, v, batch, S);
  if (att < 0) return -1;

  int ax = dfl_target_quant(g, s, att, &xs, NM("attn8"));
  return dfl_target_lin(g, s, ax, xs, wo, so, dt, NM("o"));
#undef NM
}

int dfl_model_target(dfl_graph *g, const dfl_spec *s, int batch, int S, int ids, int all_hidden,
                     int logits, dfl_target_out *out) {
  const dfl_arch *a = &s->target;
  const dfl_dtype dt = dfl_target_act_dtype(s);
  const int H = a->hidden;
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
  /* the LM head only where the target itself computes logits: a target device never holds it (the
  ** drafter's loss head makes it when it is colocated: dfl_model_drafter) */
  out->lm_head = a->tie_embeddings ? out->embed
                 : logits ? dfl_tensor_2d(g, "lm_head.weight", dt, DFL_T_FROZEN, a->vocab, H) : -1;

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
    int w_in = dfl_target_norm_w(g, s, H, "model.layers.%d.input_layernorm.weight", l);
    dense_w dw;
    if (a->family != DFL_FAMILY_QWEN3_5) dense_weights(g, s, l, &dw);
    else if (dfl_target_hybrid_weights(g, s, l) != DFL_OK) return DFL_ERR;
    int w_post = dfl_target_norm_w(g, s, H, "model.layers.%d.post_attention_layernorm.weight", l);
    int sg, su, sd, xs; /* FP8 scales of the weights, and of the current input */
    int wg = dfl_target_weight(g, s, dt, a->intermediate, H, "model.layers.%d.mlp.gate_proj.weight", l, &sg);
    int wu = dfl_target_weight(g, s, dt, a->intermediate, H, "model.layers.%d.mlp.up_proj.weight", l, &su);
    int wd = dfl_target_weight(g, s, dt, H, a->intermediate, "model.layers.%d.mlp.down_proj.weight", l, &sd);

#define NM(x) (snprintf(nm, sizeof nm, "target.%d." x, l), nm)
    int u = dfl_rmsnorm(g, h, w_in, H, a->rms_eps, NM("u"));
    int o = a->family == DFL_FAMILY_QWEN3_5 ? dfl_target_hybrid_mixer(g, s, l, u, pos, batch, S)
                                           : dense_attention(g, s, l, &dw, u, pos, batch, S);
    if (o < 0) return DFL_ERR;
    h = dfl_add(g, h, o, NM("h_attn"));
    int p = dfl_rmsnorm(g, h, w_post, H, a->rms_eps, NM("p"));
    int px = dfl_target_quant(g, s, p, &xs, NM("p8"));
    int gt = dfl_target_lin(g, s, px, xs, wg, sg, dt, NM("gate"));
    int up = dfl_target_lin(g, s, px, xs, wu, su, dt, NM("up"));
    int sw = dfl_swiglu(g, gt, up, NM("swiglu"));
    int swx = dfl_target_quant(g, s, sw, &xs, NM("swiglu8"));
    int dn = dfl_target_lin(g, s, swx, xs, wd, sd, dt, NM("down"));
    h = dfl_add(g, h, dn, NM("h"));
#undef NM
    out->hidden[l + 1] = h;
  }

  /* Tapped features, in taps order (with the final norm's output last: after it) */
  const int with_final = all_hidden == DFL_TARGET_WITH_FINAL;
  if (with_final && s->n_taps + 1 > DFL_MAX_IO) {
    fprintf(stderr, "dfl_model_target: %d taps and the final hidden state: at most %d blocks\n", s->n_taps, DFL_MAX_IO);
    return DFL_ERR;
  }
  g->cur_label = "target.features";
  if (s->n_taps == 1 && !with_final) {
    out->features = out->hidden[s->taps[0] + 1];
  } else if (!with_final) {
    int in[DFL_MAX_IO];
    for (int i = 0; i < s->n_taps; i++) in[i] = out->hidden[s->taps[i] + 1];
    out->features = dfl_tensor_2d(g, "target.features", dt, DFL_T_ACT, R, (int64_t)s->n_taps * H);
    memset(&at, 0, sizeof at);
    dfl_op_add(g, DFL_OP_CONCAT_COLS, in, s->n_taps, &out->features, 1, &at);
  }

  if (all_hidden || logits) {
    g->cur_label = "target.head";
    int wn = dfl_target_norm_w(g, s, H, "model.norm.weight", 0);
    int y = dfl_rmsnorm(g, h, wn, H, a->rms_eps, "target.final_norm");
    if (all_hidden) out->hidden[a->layers] = y;
    if (logits) out->logits = dfl_linear(g, y, out->lm_head, DFL_F32, "target.logits");
  }
  if (with_final) {
    g->cur_label = "target.features";
    int in[DFL_MAX_IO];
    for (int i = 0; i < s->n_taps; i++) in[i] = out->hidden[s->taps[i] + 1];
    in[s->n_taps] = out->hidden[a->layers];
    out->features = dfl_tensor_2d(g, "target.features", dt, DFL_T_ACT, R, (int64_t)(s->n_taps + 1) * H);
    memset(&at, 0, sizeof at);
    dfl_op_add(g, DFL_OP_CONCAT_COLS, in, s->n_taps + 1, &out->features, 1, &at);
  }

  g->cur_phase = saved_phase;
  g->cur_label = saved_label;
  return DFL_OK;
}

void dfl_model_target_describe(const dfl_spec *s, char *buf, size_t n) {
  const dfl_arch *a = &s->target;
  int deepest = 0, lin = 0;
  for (int i = 0; i < s->n_taps; i++)
    if (s->taps[i] > deepest) deepest = s->taps[i];
  if (s->kd_alpha > 0) { /* soft labels: every layer and the final norm (the LM head is the loss head's) */
    for (int l = 0; l < a->layers; l++) lin += a->family == DFL_FAMILY_QWEN3_5 && a->linear[l];
    const char *fam = a->family == DFL_FAMILY_QWEN3_5 ? "qwen3_5" : a->family == DFL_FAMILY_LLAMA ? "llama" : "qwen3";
    int k = snprintf(buf, n, "target forward: %s, all %d layers", fam, a->layers);
    if (k > 0 && (size_t)k < n && a->family == DFL_FAMILY_QWEN3_5)
      k += snprintf(buf + k, n - (size_t)k, " (%d Gated DeltaNet, %d gated attention)", lin, a->layers - lin);
    if (k > 0 && (size_t)k < n)
      snprintf(buf + k, n - (size_t)k, " and the final norm: soft labels read its last hidden state (the LM head "
               "runs in the loss head, beside the drafter's)");
    return;
  }
  for (int l = 0; l <= deepest && l < a->layers; l++) lin += a->family == DFL_FAMILY_QWEN3_5 && a->linear[l];
  const char *fam = a->family == DFL_FAMILY_QWEN3_5 ? "qwen3_5" : a->family == DFL_FAMILY_LLAMA ? "llama" : "qwen3";
  int k = snprintf(buf, n, "target forward: %s, layers 0..%d of %d", fam, deepest, a->layers);
  if (k > 0 && (size_t)k < n && a->family == DFL_FAMILY_QWEN3_5)
    k += snprintf(buf + k, n - (size_t)k, " (%d Gated DeltaNet, %d gated attention)", lin, deepest + 1 - lin);
  if (k > 0 && (size_t)k < n)
    snprintf(buf + k, n - (size_t)k, deepest + 1 < a->layers ? "; the deepest tap is %d: layers %d..%d, the final norm "
             "and the LM head are not computed" : "; the deepest tap is %d: the final norm and the LM head are not computed",
             deepest, deepest + 1, a->layers - 1);
}
