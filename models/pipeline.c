/*
** pipeline.c: the whole graph of one drafter device: (colocated target forward) + drafter step,
** then for training autodiff of the loss numerator and the optimizer. The host fills the INPUT
** tensors each micro-step and reads the OUTPUT sums (loss_num_acc, loss_den_acc, metrics_acc),
** zeroing them when it has logged them.
*/
#include <stdio.h>
#include <string.h>

#include "models/models.h"

static int build_common(dfl_train_graph *tg, const dfl_spec *s, int colocated) {
  memset(tg, 0, sizeof *tg);
  dfl_graph *g = &tg->g;
  dfl_graph_init(g);
  tg->batch = s->batch;
  tg->S = s->seq_len;
  tg->N = s->anchors;
  tg->features = -1;
  tg->opt_state = -1;
  const dfl_dtype dt = s->precision == DFL_PREC_BF16 ? DFL_BF16 : DFL_F32;
  const int64_t R = (int64_t)tg->batch * tg->S;

  if (s->drafter.hidden != s->target.hidden || s->drafter.vocab != s->target.vocab) {
    fprintf(stderr, "dfl_model_train_graph: drafter hidden/vocab (%d/%d) differ from the target's (%d/%d)\n",
            s->drafter.hidden, s->drafter.vocab, s->target.hidden, s->target.vocab);
    return DFL_ESHAPE;
  }

  g->cur_phase = colocated ? DFL_PH_TARGET : DFL_PH_FORWARD;
  tg->ids = dfl_tensor_1d(g, "input_ids", DFL_I32, DFL_T_INPUT, R);
  tg->loss_mask = dfl_tensor_1d(g, "loss_mask", DFL_I32, DFL_T_INPUT, R);
  tg->anchors = dfl_tensor_2d(g, "anchors", DFL_I32, DFL_T_INPUT, tg->batch, tg->N);
  tg->keep = dfl_tensor_2d(g, "keep", DFL_I32, DFL_T_INPUT, tg->batch, tg->N);

  int features, embed = -1, lm_head = -1, tfinal = -1, rc;
  if (colocated) {
    /* soft labels: every layer and the final norm, whose states the loss reads */
    rc = dfl_model_target(g, s, tg->batch, tg->S, tg->ids, s->kd_alpha > 0, 0, &tg->target);
    if (rc != DFL_OK) return rc;
    if (s->kd_alpha > 0) tfinal = tg->target.hidden[s->target.layers];
    features = tg->target.features;
    embed = tg->target.embed;
    lm_head = tg->target.lm_head;
  } else if (s->kd_alpha > 0) {
    /* soft labels: the target device's features end with its final norm's output (DFL_TARGET_WITH_FINAL);
    ** the taps and that block as column windows of them (COPY), for the drafter and its loss head */
    const int64_t H = s->target.hidden, nH = (int64_t)s->n_taps * H;
    tg->features = dfl_tensor_2d(g, "features", dt, DFL_T_INPUT, R, nH + H);
    features = dfl_tensor_2d(g, "features.taps", dt, DFL_T_ACT, R, nH);
    tfinal = dfl_tensor_2d(g, "features.final", dt, DFL_T_ACT, R, H);
    dfl_attrs at;
    memset(&at, 0, sizeof at);
    g->cur_label = "features";
    dfl_op_add(g, DFL_OP_COPY, &tg->features, 1, &features, 1, &at);
    at.win[0] = nH;
    dfl_op_add(g, DFL_OP_COPY, &tg->features, 1, &tfinal, 1, &at);
    g->cur_label = NULL;
  } else {
    tg->features = dfl_tensor_2d(g, "features", dt, DFL_T_INPUT, R, (int64_t)s->n_taps * s->target.hidden);
    features = tg->features;
  }
  rc = dfl_model_drafter(g, s, tg->batch, features, tg->ids, tg->loss_mask, tg->anchors, tg->keep, embed,
                         lm_head, tfinal, &tg->drafter);
  if (rc != DFL_OK) return rc;

  /* Window sums for logging; after the forward so they never feed the loss. */
  g->cur_phase = DFL_PH_LOSS;
  g->cur_label = "metrics";
  tg->loss_num_acc = dfl_tensor_1d(g, "out.loss_num", DFL_F32, DFL_T_OUTPUT, 1);
  tg->loss_den_acc = dfl_tensor_1d(g, "out.loss_den", DFL_F32, DFL_T_OUTPUT, 1);
  tg->metrics_acc = dfl_tensor_1d(g, "out.metrics", DFL_F32, DFL_T_OUTPUT,
                                  dfl_tensor_numel(&g->t[tg->drafter.metrics]));
  dfl_attrs at;
  memset(&at, 0, sizeof at);
  int pairs[3][2] = {{tg->loss_num_acc, tg->drafter.num},
                     {tg->loss_den_acc, tg->drafter.den},
                     {tg->metrics_acc, tg->drafter.metrics}};
  for (int i = 0; i < 3; i++) dfl_op_add(g, DFL_OP_ACCUM, pairs[i], 2, &pairs[i][0], 1, &at);
  g->cur_label = NULL;
  return DFL_OK;
}

int dfl_model_train_graph(dfl_train_graph *tg, const dfl_spec *s, int colocated) {
  int rc = build_common(tg, s, colocated);
  if (rc != DFL_OK) return rc;
  dfl_graph *g = &tg->g;
  g->cur_phase = DFL_PH_BACKWARD;
  rc = dfl_autodiff(g, tg->drafter.num);
  if (rc != DFL_OK) return rc;
  struct dfl_optim_cfg cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.lr = s->lr;
  cfg.beta1 = s->beta1;
  cfg.beta2 = s->beta2;
  cfg.eps = s->eps;
  cfg.wd = s->weight_decay;
  cfg.clip = s->clip;
  cfg.warmup = s->warmup_steps;
  cfg.total = s->steps;
  cfg.schedule = (int)s->schedule;
  tg->opt_state = dfl_build_optimizer(g, tg->drafter.den, &cfg);
  if (tg->opt_state < 0) return DFL_ERR;
  /* stage 5: weight-gradient GEMMs accumulate straight into their f32 accumulators, residual
  ** adds (forward and backward) run in the epilogue of the GEMM that feeds them, and the target's
  ** q/k norms in its RoPE, q's and k's RoPE in one launch, an FP8 target's row quantizations in
  ** their norm or SwiGLU */
  return dfl_fuse_passes(g, DFL_FUSE_TRAIN | dfl_model_fuse_flags(s));
}

unsigned dfl_model_fuse_flags(const dfl_spec *s) {
  return (s->opt.no_rope_pair ? DFL_FUSE_NO_ROPE_PAIR : 0u) | (s->opt.no_swiglu_quant ? DFL_FUSE_NO_SWIGLU_Q : 0u);
}

unsigned dfl_model_single_device(dfl_graph *g, const dfl_spec *s) {
  if (s->accum == 1) {
    dfl_fuse_overwrite(g);
    if (s->grads_bf16) dfl_fuse_grads_lowp(g);
  }
  return dfl_sched_overlap_ok(g) ? 1u << DFL_PH_OPTIMIZER : 0;
}

int dfl_model_eval_graph(dfl_train_graph *tg, const dfl_spec *s, int colocated) {
  int rc = build_common(tg, s, colocated);
  if (rc != DFL_OK) return rc;
  /* the forward as the train graph runs it (same rounding): residual adds in the GEMM epilogue;
  ** nothing differentiates here, so every q/k norm goes into its RoPE */
  dfl_graph *g = &tg->g;
  return dfl_fuse_passes(g, dfl_model_fuse_flags(s));
}

int dfl_model_agree_graph(dfl_graph *g, const dfl_spec *s, dfl_agree_io *io) {
  const int b = s->batch, S = s->seq_len;
  const int64_t R = (int64_t)b * S;
  g->cur_phase = DFL_PH_TARGET;
  io->ids = dfl_tensor_1d(g, "input_ids", DFL_I32, DFL_T_INPUT, R);
  io->labels = dfl_tensor_1d(g, "agree.labels", DFL_I32, DFL_T_INPUT, R);
  io->weights = dfl_tensor_1d(g, "agree.weights", DFL_F32, DFL_T_INPUT, R);
  dfl_target_out to;
  /* all layers and the final norm (all_hidden): the LM head then runs inside LINEAR_CE, which
  ** streams the vocabulary, so no [rows, V] logits are ever stored (151k columns on Qwen3) */
  int rc = dfl_model_target(g, s, b, S, io->ids, 1, 0, &to);
  if (rc) return rc;
  int y = to.hidden[s->target.layers];
  const int64_t H = g->t[y].shape[1];
  int ce[5];
  ce[0] = io->num = dfl_tensor_1d(g, "agree.num", DFL_F32, DFL_T_OUTPUT, 1);
  ce[1] = dfl_tensor_1d(g, "agree.ce", DFL_F32, DFL_T_ACT, R);
  ce[2] = io->correct = dfl_tensor_1d(g, "agree.correct", DFL_F32, DFL_T_OUTPUT, R);
  ce[3] = dfl_tensor_1d(g, "agree.topk_hit", DFL_F32, DFL_T_ACT, R);
  ce[4] = dfl_tensor_2d(g, "agree.dy", g->t[y].dtype, DFL_T_ACT, R, H);
  dfl_attrs at;
  memset(&at, 0, sizeof at);
  at.vocab_chunk = s->vocab_chunk > 0 ? s->vocab_chunk : s->target.vocab;
  /* the target builds no LM head when it computes no logits: the fused head below streams it */
  int head = to.lm_head >= 0 ? to.lm_head
                             : dfl_tensor_2d(g, "lm_head.weight", g->t[to.embed].dtype, DFL_T_FROZEN, s->target.vocab, H);
  int cin[4] = {y, head, io->labels, io->weights};
  g->cur_label = "agree.head";
  if (dfl_op_add(g, DFL_OP_LINEAR_CE, cin, 4, ce, 5, &at) < 0) return DFL_ERR;
  /* the target forward as the training graph runs it (same rounding) */
  return dfl_fuse_passes(g, dfl_model_fuse_flags(s)) != DFL_OK ? DFL_ENOMEM : DFL_OK;
}
