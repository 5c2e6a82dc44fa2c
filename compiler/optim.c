/*
** optim.c: the optimizer part of a training graph (reference §2.5, §4).
**
** Per micro-step (backward phase) every PARAM gradient is added into its persistent fp32
** accumulator and the micro-step's loss denominator into a persistent sum. At the optimizer
** boundary (optimizer phase, run once per `accum` micro-steps): the squared norm of all
** accumulators, OPT_PREP (schedule, clip coefficient, 1/den, bias corrections) and one ADAMW per
** PARAM, which also zeroes its accumulator. The fp32 masters are not filled by any op: the host
** copies the params in once (dfl_cpu_init_masters on the CPU) after loading them.
*/
#include "compiler/graph.h"
#include "compiler/status.h"

#include <string.h>

static int state_like(dfl_graph *g, int p, const char *suffix, dfl_tkind kind) {
  dfl_tensor t = g->t[p];
  char name[DFL_NAME_MAX];
  size_t ls = strlen(suffix), ln = strlen(t.name);
  if (ln + ls + 1 > sizeof name) ln = sizeof name - ls - 1;
  memcpy(name, t.name, ln);
  memcpy(name + ln, suffix, ls + 1);
  return dfl_tensor_new(g, name, DFL_F32, kind, t.ndim, t.shape);
}

int dfl_build_optimizer(dfl_graph *g, int den, const struct dfl_optim_cfg *cfg) {
  if (den < 0 || den >= g->nt || dfl_tensor_numel(&g->t[den]) != 1) {
    fprintf(stderr, "dflc: optimizer: the loss denominator must be a scalar tensor\n");
    return -1;
  }
  dfl_phase saved_phase = g->cur_phase;
  const char *saved_label = g->cur_label;
  int nt0 = g->nt, np = 0;
  for (int i = 0; i < nt0; i++) {
    if (g->t[i].kind != DFL_T_PARAM) continue;
    if (g->t[i].grad < 0) {
      fprintf(stderr, "dflc: optimizer: warning: parameter %s has no gradient (does it reach the loss?); it is not trained\n",
              g->t[i].name);
      continue;
    }
    int ms = state_like(g, i, ".master", DFL_T_STATE);
    int m = state_like(g, i, ".adam_m", DFL_T_STATE);
    int v = state_like(g, i, ".adam_v", DFL_T_STATE);
    int acc = state_like(g, i, ".grad_acc", DFL_T_GRAD);
    dfl_tensor *t = &g->t[i];
    t->master = ms, t->adam_m = m, t->adam_v = v, t->grad_acc = acc;
    np++;
  }
  if (!np) {
    fprintf(stderr, "dflc: optimizer: no parameter has a gradient (run dfl_autodiff first)\n");
    return -1;
  }
  int den_acc = dfl_tensor_1d(g, "opt.den", DFL_F32, DFL_T_STATE, 1);
  int sumsq = dfl_tensor_1d(g, "opt.sumsq", DFL_F32, DFL_T_STATE, 1);
  int st = dfl_tensor_1d(g, "opt.state", DFL_F32, DFL_T_STATE, DFL_OPT_COUNT);

  g->cur_phase = DFL_PH_BACKWARD;
  g->cur_label = "optim.accum";
  for (int i = 0; i < nt0; i++) {
    const dfl_tensor *t = &g->t[i];
    if (t->kind != DFL_T_PARAM || t->grad_acc < 0) continue;
    int in[2] = {t->grad_acc, t->grad}, out = t->grad_acc;
    dfl_op_add(g, DFL_OP_ACCUM, in, 2, &out, 1, NULL);
  }
  {
    int in[2] = {den_acc, den};
    dfl_op_add(g, DFL_OP_ACCUM, in, 2, &den_acc, 1, NULL);
  }

  g->cur_phase = DFL_PH_OPTIMIZER;
  g->cur_label = "optim.norm";
  for (int i = 0; i < nt0; i++) {
    const dfl_tensor *t = &g->t[i];
    if (t->kind != DFL_T_PARAM || t->grad_acc < 0) continue;
    int in[2] = {sumsq, t->grad_acc};
    dfl_op_add(g, DFL_OP_SUMSQ_ACC, in, 2, &sumsq, 1, NULL);
  }
  dfl_attrs a = {0};
  a.lr = cfg->lr, a.beta1 = cfg->beta1, a.beta2 = cfg->beta2, a.eps = cfg->eps, a.wd = cfg->wd, a.clip = cfg->clip;
  a.warmup = cfg->warmup, a.total = cfg->total, a.schedule = cfg->schedule;
  g->cur_label = "optim.prep";
  {
    int in[3] = {sumsq, den_acc, st};
    dfl_op_add(g, DFL_OP_OPT_PREP, in, 3, &st, 1, &a);
  }
  g->cur_label = "optim.adamw";
  for (int i = 0; i < nt0; i++) {
    const dfl_tensor *t = &g->t[i];
    if (t->kind != DFL_T_PARAM || t->grad_acc < 0) continue;
    int in[6] = {i, t->master, t->adam_m, t->adam_v, t->grad_acc, st};
    dfl_op_add(g, DFL_OP_ADAMW, in, 6, in, 5, &a);
  }
  g->cur_phase = saved_phase;
  g->cur_label = saved_label;
  return st;
}
