/*
** synth.h: a small decoder training graph for the plan tests, built with graph.h's API only:
** L layers of rmsnorm -> q/k/v -> q/k norm -> RoPE -> causal attention -> o_proj -> residual ->
** rmsnorm -> SwiGLU MLP -> residual, a fused linear-CE head, autodiff and AdamW. The shape of a
** real drafter step, small enough to run on the CPU backend in milliseconds.
*/
#ifndef DFL_TEST_PLAN_SYNTH_H
#define DFL_TEST_PLAN_SYNTH_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "compiler/graph.h"

typedef struct synth {
  dfl_graph g;
  int x, pos, labels, weights; /* INPUTs */
  int num, den, opt_state;
} synth;

static int synth_param(dfl_graph *g, const char *fmt, int l, int64_t r, int64_t c) {
  char nm[DFL_NAME_MAX];
  snprintf(nm, sizeof nm, fmt, l);
  return c ? dfl_tensor_2d(g, nm, DFL_F32, DFL_T_PARAM, r, c) : dfl_tensor_1d(g, nm, DFL_F32, DFL_T_PARAM, r);
}

static void synth_build(synth *s, int L, int batch, int S, int H, int nh, int nkv, int hd, int I, int V) {
  dfl_graph *g = &s->g;
  dfl_graph_init(g);
  int64_t R = (int64_t)batch * S;
  g->cur_phase = DFL_PH_FORWARD;
  s->x = dfl_tensor_2d(g, "x", DFL_F32, DFL_T_INPUT, R, H);
  s->pos = dfl_tensor_1d(g, "pos", DFL_I32, DFL_T_INPUT, R);
  s->labels = dfl_tensor_1d(g, "labels", DFL_I32, DFL_T_INPUT, R);
  s->weights = dfl_tensor_1d(g, "weights", DFL_F32, DFL_T_INPUT, R);
  int h = dfl_tensor_2d(g, "h0", DFL_F32, DFL_T_ACT, R, H);
  dfl_op_add(g, DFL_OP_COPY, &s->x, 1, &h, 1, NULL);
  for (int l = 0; l < L; l++) {
    char lab[64];
    snprintf(lab, sizeof lab, "layers.%d", l);
    g->cur_label = lab;
    int w1 = synth_param(g, "layers.%d.norm1", l, H, 0), w2 = synth_param(g, "layers.%d.norm2", l, H, 0);
    int wq = synth_param(g, "layers.%d.q", l, (int64_t)nh * hd, H), wk = synth_param(g, "layers.%d.k", l, (int64_t)nkv * hd, H);
    int wv = synth_param(g, "layers.%d.v", l, (int64_t)nkv * hd, H), wo = synth_param(g, "layers.%d.o", l, H, (int64_t)nh * hd);
    int qn = synth_param(g, "layers.%d.qn", l, hd, 0), kn = synth_param(g, "layers.%d.kn", l, hd, 0);
    int wg = synth_param(g, "layers.%d.gate", l, I, H), wu = synth_param(g, "layers.%d.up", l, I, H);
    int wd = synth_param(g, "layers.%d.down", l, H, I);
    int n1 = dfl_rmsnorm(g, h, w1, H, 1e-6, NULL);
    int q = dfl_linear(g, n1, wq, DFL_F32, NULL), k = dfl_linear(g, n1, wk, DFL_F32, NULL);
    int v = dfl_linear(g, n1, wv, DFL_F32, NULL);
    q = dfl_rmsnorm(g, q, qn, hd, 1e-6, NULL);
    k = dfl_rmsnorm(g, k, kn, hd, 1e-6, NULL);
    q = dfl_rope(g, q, s->pos, nh, hd, 10000.0, NULL);
    k = dfl_rope(g, k, s->pos, nkv, hd, 10000.0, NULL);
    int o = dfl_tensor_2d(g, NULL, DFL_F32, DFL_T_ACT, R, (int64_t)nh * hd);
    int lse = dfl_tensor_1d(g, NULL, DFL_F32, DFL_T_ACT, R * nh);
    dfl_attrs at;
    memset(&at, 0, sizeof at);
    at.mask = DFL_MASK_CAUSAL; at.batch = batch; at.S = S; at.heads = nh; at.kv_heads = nkv; at.head_dim = hd;
    at.scale = 1.0 / sqrt((double)hd);
    int ain[3] = {q, k, v}, aout[2] = {o, lse};
    dfl_op_add(g, DFL_OP_ATTENTION, ain, 3, aout, 2, &at);
    h = dfl_add(g, h, dfl_linear(g, o, wo, DFL_F32, NULL), NULL);
    int n2 = dfl_rmsnorm(g, h, w2, H, 1e-6, NULL);
    int sw = dfl_swiglu(g, dfl_linear(g, n2, wg, DFL_F32, NULL), dfl_linear(g, n2, wu, DFL_F32, NULL), NULL);
    h = dfl_add(g, h, dfl_linear(g, sw, wd, DFL_F32, NULL), NULL);
  }
  g->cur_phase = DFL_PH_LOSS;
  g->cur_label = "loss";
  int wn = dfl_tensor_1d(g, "norm", DFL_F32, DFL_T_PARAM, H);
  int y = dfl_rmsnorm(g, h, wn, H, 1e-6, NULL);
  int lm = dfl_tensor_2d(g, "lm_head", DFL_F32, DFL_T_FROZEN, V, H);
  int ce_out[5];
  ce_out[0] = dfl_tensor_1d(g, "num", DFL_F32, DFL_T_ACT, 1);
  for (int i = 1; i < 4; i++) ce_out[i] = dfl_tensor_1d(g, NULL, DFL_F32, DFL_T_ACT, R);
  ce_out[4] = dfl_tensor_2d(g, "dy", DFL_F32, DFL_T_ACT, R, H);
  int ce_in[4] = {y, lm, s->labels, s->weights};
  dfl_attrs ca;
  memset(&ca, 0, sizeof ca);
  ca.vocab_chunk = V / 2;
  dfl_op_add(g, DFL_OP_LINEAR_CE, ce_in, 4, ce_out, 5, &ca);
  s->num = ce_out[0];
  s->den = dfl_tensor_1d(g, "den", DFL_F32, DFL_T_ACT, 1);
  dfl_op_add(g, DFL_OP_SUM, &s->weights, 1, &s->den, 1, NULL);
  g->cur_label = NULL;
  g->cur_phase = DFL_PH_BACKWARD;
  if (dfl_autodiff(g, s->num) != 0) { fprintf(stderr, "synth: autodiff failed\n"); exit(1); }
  struct dfl_optim_cfg cfg = {1e-3, 0.9, 0.95, 1e-8, 0.01, 1.0, 0, 100, 1};
  s->opt_state = dfl_build_optimizer(g, s->den, &cfg);
  if (s->opt_state < 0) { fprintf(stderr, "synth: optimizer failed\n"); exit(1); }
}

#endif
