/*
** drafter.c: one DFlash drafter micro-step, forward + loss + metrics (reference §1.3-§2.6).
**
**   C = rmsnorm(F fc^T, hidden_norm)                          context, shared by every layer
**   noise_ids, pos_q, labels, weights = DFLASH_BLOCKS(ids, loss_mask, anchors, keep)
**   X = E[noise_ids]
**   per layer: U = rmsnorm(X, in_l)       (layer 0: on X's distinct rows, BLOCK_ROWS / BLOCK_EXPAND)
**              Q  = rope(rmsnorm_h(U Wq^T, q_norm), pos_q)
**              Kc = rope(rmsnorm_h(C Wk^T, k_norm), pos_c)   Vc = C Wv^T
**              Kn = rope(rmsnorm_h(U Wk^T, k_norm), pos_q)   Vn = U Wv^T
**              X += ATTENTION_dflash(Q, Kc, Vc, Kn, Vn) Wo^T
**              X += down(silu(P Wg^T) * (P Wu^T)), P = rmsnorm(X, post_l)
**              (last layer: from X += ... Wo^T on, the rows q % B != 0 only: BLOCK_DROP)
**   Y = rmsnorm(X, norm); num, per-row CE/correct = LINEAR_CE(Y, W_lm, labels, weights)
**   den = sum(weights); metrics = DFLASH_METRICS(...)
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/models.h"

static dfl_dtype act_dtype(const dfl_spec *s) { return s->precision == DFL_PREC_BF16 ? DFL_BF16 : DFL_F32; }

/* A drafter parameter, recorded in export order. */
static int param(dfl_graph *g, dfl_drafter_out *out, dfl_dtype dt, int ndim, int64_t r, int64_t c,
                 const char *fmt, int layer) {
  char name[DFL_NAME_MAX];
  snprintf(name, sizeof name, fmt, layer);
  int t = ndim == 1 ? dfl_tensor_1d(g, name, dt, DFL_T_PARAM, r)
                    : dfl_tensor_2d(g, name, dt, DFL_T_PARAM, r, c);
  g->t[t].requires_grad = 1;
  out->params[out->n_params++] = t;
  return t;
}

/* One of graph.h's block-row ops on x (1-D or 2-D), its output's rows from x's: BLOCK_ROWS [Q] -> [Q/B + 2]
** (the block heads, the MASK row twice), BLOCK_EXPAND back, BLOCK_DROP [Q] -> [Q - Q/B], BLOCK_UNDROP back. */
static int block_op(dfl_graph *g, dfl_opcode code, int x, int B, const char *name) {
  const dfl_tensor *X = &g->t[x];
  const int64_t r = X->shape[0];
  const int64_t n = code == DFL_OP_BLOCK_ROWS ? r / B + 2 : code == DFL_OP_BLOCK_EXPAND ? (r - 2) * B
                  : code == DFL_OP_BLOCK_DROP ? r - r / B : r / (B - 1) * B;
  int o = X->ndim == 1 ? dfl_tensor_1d(g, name, X->dtype, DFL_T_ACT, n) : dfl_tensor_2d(g, name, X->dtype, DFL_T_ACT, n, X->shape[1]);
  dfl_attrs at = {0};
  at.B = B;
  dfl_op_add(g, code, &x, 1, &o, 1, &at);
  return o;
}

int dfl_model_drafter(dfl_graph *g, const dfl_spec *s, int batch, int features, int ids, int loss_mask,
                      int anchors, int keep, int embed, int lm_head, int tfinal, dfl_drafter_out *out) {
  const dfl_arch *a = &s->drafter;
  const dfl_dtype dt = act_dtype(s);
  const int H = a->hidden, hd = a->head_dim, nh = a->heads, nkv = a->kv_heads, I = a->intermediate;
  const int B = s->block_size;
  const int S = (int)(g->t[ids].shape[0] * (g->t[ids].ndim > 1 ? g->t[ids].shape[1] : 1) / batch);
  const int N = (int)g->t[anchors].shape[g->t[anchors].ndim - 1];
  const int64_t R = (int64_t)batch * S, Q = (int64_t)batch * N * B;
  const int kH = s->n_taps * H;
  char nm[DFL_NAME_MAX], label[DFL_NAME_MAX];
  dfl_attrs at;

  if (a->layers > DFL_MAX_LAYERS || B < 2 || N < 1 || S < 2) {
    fprintf(stderr, "dfl_model_drafter: bad shapes (layers %d, block %d, anchors %d, S %d)\n", a->layers, B, N, S);
    return DFL_ERR;
  }
  if (g->t[features].ndim != 2 || g->t[features].shape[0] != R || g->t[features].shape[1] != kH) {
    fprintf(stderr, "dfl_model_drafter: features must be [%lld, %d]\n", (long long)R, kH);
    return DFL_ESHAPE;
  }

  memset(out, 0, sizeof *out);
  const dfl_phase saved_phase = g->cur_phase;
  const char *saved_label = g->cur_label;
  g->cur_phase = DFL_PH_FORWARD;
  g->cur_label = "drafter.context";

  /* Frozen target embedding and head: shared with a colocated target, else our own. */
  /* Named as in the target checkpoint, which is where a drafter device loads them from. */
  if (embed < 0) embed = dfl_tensor_2d(g, "model.embed_tokens.weight", dt, DFL_T_FROZEN, a->vocab, H);
  if (lm_head < 0)
    lm_head = s->target.tie_embeddings ? embed : dfl_tensor_2d(g, "lm_head.weight", dt, DFL_T_FROZEN, a->vocab, H);
  out->embed = embed;
  out->lm_head = lm_head;

  /* Parameters in export order (§5): fc, hidden_norm, per layer 11 tensors, norm. */
  int fc = param(g, out, dt, 2, H, kH, "fc.weight", 0);
  int w_hn = param(g, out, dt, 1, H, 0, "hidden_norm.weight", 0);
  int wq[DFL_MAX_LAYERS], wk[DFL_MAX_LAYERS], wv[DFL_MAX_LAYERS], wo[DFL_MAX_LAYERS];
  int wqn[DFL_MAX_LAYERS], wkn[DFL_MAX_LAYERS], w_in[DFL_MAX_LAYERS], w_post[DFL_MAX_LAYERS];
  int wg[DFL_MAX_LAYERS], wu[DFL_MAX_LAYERS], wd[DFL_MAX_LAYERS];
  for (int l = 0; l < a->layers; l++) {
    wq[l] = param(g, out, dt, 2, (int64_t)nh * hd, H, "layers.%d.self_attn.q_proj.weight", l);
    wk[l] = param(g, out, dt, 2, (int64_t)nkv * hd, H, "layers.%d.self_attn.k_proj.weight", l);
    wv[l] = param(g, out, dt, 2, (int64_t)nkv * hd, H, "layers.%d.self_attn.v_proj.weight", l);
    wo[l] = param(g, out, dt, 2, H, (int64_t)nh * hd, "layers.%d.self_attn.o_proj.weight", l);
    wqn[l] = param(g, out, dt, 1, hd, 0, "layers.%d.self_attn.q_norm.weight", l);
    wkn[l] = param(g, out, dt, 1, hd, 0, "layers.%d.self_attn.k_norm.weight", l);
    w_in[l] = param(g, out, dt, 1, H, 0, "layers.%d.input_layernorm.weight", l);
    w_post[l] = param(g, out, dt, 1, H, 0, "layers.%d.post_attention_layernorm.weight", l);
    wg[l] = param(g, out, dt, 2, I, H, "layers.%d.mlp.gate_proj.weight", l);
    wu[l] = param(g, out, dt, 2, I, H, "layers.%d.mlp.up_proj.weight", l);
    wd[l] = param(g, out, dt, 2, H, I, "layers.%d.mlp.down_proj.weight", l);
  }
  int w_norm = param(g, out, dt, 1, H, 0, "norm.weight", 0);

  /* Context stream, computed once. */
  int cf = dfl_linear(g, features, fc, dt, "drafter.ctx_fc");
  int C = dfl_rmsnorm(g, cf, w_hn, H, a->rms_eps, "drafter.ctx");
  int pos_c = dfl_tensor_1d(g, "drafter.pos_c", DFL_I32, DFL_T_ACT, R);
  memset(&at, 0, sizeof at);
  at.n = S;
  dfl_op_add(g, DFL_OP_IOTA_MOD, NULL, 0, &pos_c, 1, &at);

  /* Blocks: noise ids, query positions, labels and decay weights. */
  g->cur_label = "drafter.blocks";
  int blk[5];
  blk[0] = dfl_tensor_1d(g, "drafter.noise_ids", DFL_I32, DFL_T_ACT, Q);
  blk[1] = dfl_tensor_1d(g, "drafter.pos_q", DFL_I32, DFL_T_ACT, Q);
  blk[2] = dfl_tensor_1d(g, "drafter.labels", DFL_I32, DFL_T_ACT, Q);
  blk[3] = dfl_tensor_1d(g, "drafter.weights", DFL_F32, DFL_T_ACT, Q);
  memset(&at, 0, sizeof at);
  at.batch = batch; at.S = S; at.N = N; at.B = B;
  at.mask_id = s->mask_token;
  at.gamma = s->gamma;
  int bin[4] = {ids, loss_mask, anchors, keep};
  if (tfinal >= 0) blk[4] = dfl_tensor_1d(g, "drafter.target_rows", DFL_I32, DFL_T_ACT, Q);
  dfl_op_add(g, DFL_OP_DFLASH_BLOCKS, bin, 4, blk, tfinal >= 0 ? 5 : 4, &at);
  const int pos_q = blk[1], labels = blk[2], weights = blk[3];

  int X = dfl_gather(g, embed, blk[0], dt, "drafter.x0");
  /* X's rows are the frozen embeddings of [token, MASK x (B-1)] per block: the first layer's input
  ** norm, q/k/v projections and q/k norms run on the R block heads and one MASK row (BLOCK_ROWS),
  ** and their outputs are copied out to the Q rows before RoPE (BLOCK_EXPAND): 1/B of those GEMMs'
  ** FLOPs, the same values.
  ** At the other end, the anchor rows (never labels) leave after the last attention (BLOCK_DROP).
  ** `compile { block_rows = false }` builds the plain graph (before/after comparisons). */
  const int rows0 = !s->opt.no_block_rows && !g->t[embed].requires_grad;
  for (int l = 0; l < a->layers; l++) {
    snprintf(label, sizeof label, "drafter.layers.%d", l);
    g->cur_label = label;
#define NM(x) (snprintf(nm, sizeof nm, "drafter.%d." x, l), nm)
    int U, q, kn, vn;
    if (l == 0 && rows0) { /* the first layer's norms and projections on the distinct block rows */
      U = dfl_rmsnorm(g, block_op(g, DFL_OP_BLOCK_ROWS, X, B, "drafter.x0.rows"), w_in[l], H, a->rms_eps, NM("u.rows"));
      q = dfl_rmsnorm(g, dfl_linear(g, U, wq[l], dt, NM("q.rows")), wqn[l], hd, a->rms_eps, NM("qn.rows"));
      q = block_op(g, DFL_OP_BLOCK_EXPAND, q, B, NM("qn"));
      kn = dfl_rmsnorm(g, dfl_linear(g, U, wk[l], dt, NM("kn.rows")), wkn[l], hd, a->rms_eps, NM("knn.rows"));
      kn = block_op(g, DFL_OP_BLOCK_EXPAND, kn, B, NM("knn"));
      vn = block_op(g, DFL_OP_BLOCK_EXPAND, dfl_linear(g, U, wv[l], dt, NM("vn.rows")), B, NM("vn"));
    } else {
      U = dfl_rmsnorm(g, X, w_in[l], H, a->rms_eps, NM("u"));
      q = dfl_rmsnorm(g, dfl_linear(g, U, wq[l], dt, NM("q")), wqn[l], hd, a->rms_eps, NM("qn"));
      kn = dfl_rmsnorm(g, dfl_linear(g, U, wk[l], dt, NM("kn")), wkn[l], hd, a->rms_eps, NM("knn"));
      vn = dfl_linear(g, U, wv[l], dt, NM("vn"));
    }
    q = dfl_rope(g, q, pos_q, nh, hd, a->rope_theta, NM("qr"));
    int kc = dfl_linear(g, C, wk[l], dt, NM("kc"));
    kc = dfl_rmsnorm(g, kc, wkn[l], hd, a->rms_eps, NM("kcn"));
    kc = dfl_rope(g, kc, pos_c, nkv, hd, a->rope_theta, NM("kcr"));
    int vc = dfl_linear(g, C, wv[l], dt, NM("vc"));
    kn = dfl_rope(g, kn, pos_q, nkv, hd, a->rope_theta, NM("knr"));

    int att[2];
    att[0] = dfl_tensor_2d(g, NM("attn"), dt, DFL_T_ACT, Q, (int64_t)nh * hd);
    att[1] = dfl_tensor_1d(g, NM("lse"), DFL_F32, DFL_T_ACT, Q * nh);
    memset(&at, 0, sizeof at);
    at.mask = DFL_MASK_DFLASH;
    at.batch = batch; at.S = S; at.N = N; at.B = B;
    at.heads = nh; at.kv_heads = nkv; at.head_dim = hd;
    at.window = s->sliding[l] ? s->window[l] : 0;
    at.scale = 1.0 / sqrt((double)hd);
    int ain[7] = {q, kc, vc, kn, vn, anchors, keep};
    dfl_op_add(g, DFL_OP_ATTENTION, ain, 7, att, 2, &at);

    int o_in = att[0];
    if (l == a->layers - 1 && rows0) { /* past the last attention, only the rows that reach the loss */
      o_in = block_op(g, DFL_OP_BLOCK_DROP, att[0], B, NM("attn.drop"));
      X = block_op(g, DFL_OP_BLOCK_DROP, X, B, NM("x_in.drop"));
    }
    int o = dfl_linear(g, o_in, wo[l], dt, NM("o"));
    X = dfl_add(g, X, o, NM("x_attn"));
    int P = dfl_rmsnorm(g, X, w_post[l], H, a->rms_eps, NM("p"));
    int gt = dfl_linear(g, P, wg[l], dt, NM("gate"));
    int up = dfl_linear(g, P, wu[l], dt, NM("up"));
    int sw = dfl_swiglu(g, gt, up, NM("swiglu"));
    int dn = dfl_linear(g, sw, wd[l], dt, NM("down"));
    X = dfl_add(g, X, dn, NM("x"));
#undef NM
  }
  out->y = dfl_rmsnorm(g, X, w_norm, H, a->rms_eps, "drafter.y");

  /* Loss: fused frozen-head cross-entropy (fp32 log-sum-exp), then the metrics. */
  g->cur_phase = DFL_PH_LOSS;
  g->cur_label = "drafter.loss";
  /* With rows0 the last layer dropped the anchor rows: the labels and weights are dropped alike,
  ** and the per-row results put back in place (0 at the anchors) for the metrics. */
  const int64_t Qy = g->t[out->y].shape[0];
  int lab = labels, wts = weights, trow = tfinal >= 0 ? blk[4] : -1;
  if (Qy != Q) {
    lab = block_op(g, DFL_OP_BLOCK_DROP, labels, B, "drafter.labels.drop");
    wts = block_op(g, DFL_OP_BLOCK_DROP, weights, B, "drafter.weights.drop");
    if (trow >= 0) trow = block_op(g, DFL_OP_BLOCK_DROP, trow, B, "drafter.target_rows.drop");
  }
  /* soft labels: the target's final hidden state at the row before each label (its next-token
  ** distribution there is what the label row is pulled toward) */
  const int tsoft = trow >= 0 ? dfl_gather(g, tfinal, trow, g->t[out->y].dtype, "drafter.target_y") : -1;
  int ce[5];
  ce[0] = dfl_tensor_1d(g, "drafter.loss_num", DFL_F32, DFL_T_ACT, 1);
  ce[1] = dfl_tensor_1d(g, "drafter.ce", DFL_F32, DFL_T_ACT, Qy);
  ce[2] = dfl_tensor_1d(g, "drafter.correct", DFL_F32, DFL_T_ACT, Qy);
  ce[3] = dfl_tensor_1d(g, "drafter.topk_hit", DFL_F32, DFL_T_ACT, Qy);
  ce[4] = dfl_tensor_2d(g, "drafter.dy", dt, DFL_T_ACT, Qy, H);
  memset(&at, 0, sizeof at);
  at.vocab_chunk = s->vocab_chunk > 0 ? s->vocab_chunk : a->vocab;
  at.topk = s->topk;
  at.B = Qy == Q ? B : 0; /* block position 0 (the anchor) is never a label: its rows can skip the head */
  int cin[5] = {out->y, lm_head, lab, wts, tsoft};
  if (tsoft >= 0) at.kd_alpha = s->kd_alpha, at.kd_temp = s->kd_temp;
  dfl_op_add(g, DFL_OP_LINEAR_CE, cin, tsoft >= 0 ? 5 : 4, ce, 5, &at);
  out->num = ce[0];
  if (Qy != Q) {
    ce[2] = block_op(g, DFL_OP_BLOCK_UNDROP, ce[2], B, "drafter.correct.q");
    ce[3] = block_op(g, DFL_OP_BLOCK_UNDROP, ce[3], B, "drafter.topk_hit.q");
  }

  out->den = dfl_tensor_1d(g, "drafter.loss_den", DFL_F32, DFL_T_ACT, 1);
  memset(&at, 0, sizeof at);
  dfl_op_add(g, DFL_OP_SUM, &weights, 1, &out->den, 1, &at);

  out->metrics = dfl_tensor_1d(g, "drafter.metrics", DFL_F32, DFL_T_ACT, DFL_METRIC_COUNT + 2 * B);
  memset(&at, 0, sizeof at);
  at.batch = batch; at.N = N; at.B = B;
  int min[4] = {ce[2], weights, ce[3], keep};
  dfl_op_add(g, DFL_OP_DFLASH_METRICS, min, 4, &out->metrics, 1, &at);

  g->cur_phase = saved_phase;
  g->cur_label = saved_label;
  return DFL_OK;
}
