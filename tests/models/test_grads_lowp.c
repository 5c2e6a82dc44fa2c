/*
** test_grads_lowp: `train { grads = bf16 }` in the graph the single-device trainer runs
** (dfl_model_single_device: dfl_fuse_overwrite, then dfl_fuse_grads_lowp). On a bf16 train graph
** (nano target, 2-layer drafter) every gradient accumulator takes its param's dtype (bf16), and each
** is written by one op besides its AdamW: a weight-gradient MATMUL of bf16 operands, a converting
** COPY, or the op that made the gradient (no bf16 -> bf16 copy is left: the norm weights'
** RMSNORM_BWD, the k-norm's ADD and the k/v weights' summed GEMMs write the accumulator). The
** graph without the knob, with `accum = 2`, and an fp32 graph keep f32 accumulators. The values are
** checked on the GPU (`dflc verify --cuda --bf16 --grads-bf16`, bench/gpu_session.sh): the CPU
** backend computes in f32 whatever the storage dtype.
*/
#include <stdio.h>
#include <string.h>

#include "models/models.h"
#include "runtime/io/weights.h"

static int failures;
#include "tests/common/check.h"

static void spec_init(dfl_spec *s, int precision, int grads_bf16, int accum) {
  char err[512];
  memset(s, 0, sizeof *s);
  if (dfl_hf_arch_load("examples/models/nano/config.json", &s->target, err, sizeof err) != DFL_OK) {
    printf("%s\n", err);
    failures++;
  }
  s->drafter = s->target;
  s->drafter.layers = 2;
  s->drafter.intermediate = 256;
  s->n_taps = 2, s->taps[0] = 1, s->taps[1] = 2;
  s->block_size = 4, s->mask_token = 8190, s->seq_len = 32, s->anchors = 4, s->batch = 2, s->gamma = 7;
  s->precision = precision;
  s->target_dtype = precision;
  s->grads_bf16 = grads_bf16;
  s->lr = 3e-3, s->beta1 = 0.9, s->beta2 = 0.999, s->eps = 1e-8, s->clip = 1.0;
  s->schedule = DFL_SCHED_CONSTANT;
  s->steps = 10;
  s->accum = accum;
  s->vocab_chunk = 3000;
}

/* The number of accumulators in dtype want among the params with one; checks their writers. */
static int count_acc(const dfl_graph *g, dfl_dtype want, int *nparams, const char *what) {
  int n = 0;
  *nparams = 0;
  for (int i = 0; i < g->nt; i++) {
    const dfl_tensor *p = &g->t[i];
    if (p->kind != DFL_T_PARAM || p->grad_acc < 0) continue;
    (*nparams)++;
    int acc = p->grad_acc;
    if (g->t[acc].dtype != want) continue;
    n++;
    if (want != DFL_BF16) continue;
    int writers = 0;
    for (int k = 0; k < g->nops; k++) {
      const dfl_op *o = &g->ops[k];
      int writes = 0;
      for (int q = 0; q < o->n_out; q++) writes |= o->out[q] == acc;
      if (!writes || o->code == DFL_OP_ADAMW) continue;
      writers++;
      if (o->code == DFL_OP_MATMUL)
        CHECK(g->t[o->in[0]].dtype == DFL_BF16 && g->t[o->in[1]].dtype == DFL_BF16,
              "%s: %s: its MATMUL reads non-bf16 operands", what, p->name);
      else if (o->code == DFL_OP_COPY)
        CHECK(g->t[o->in[0]].dtype != DFL_BF16, "%s: %s: a bf16 -> bf16 COPY is left (%s)", what, p->name,
              g->t[o->in[0]].name);
    }
    CHECK(writers == 1, "%s: %s: %d writers besides AdamW", what, p->name, writers);
  }
  return n;
}

static void run(const char *what, int precision, int grads_bf16, int accum, int want_lowp) {
  dfl_spec s;
  spec_init(&s, precision, grads_bf16, accum);
  dfl_train_graph tg;
  memset(&tg, 0, sizeof tg);
  if (dfl_model_train_graph(&tg, &s, 1) != DFL_OK) {
    CHECK(0, "%s: cannot build the train graph", what);
    return;
  }
  dfl_model_single_device(&tg.g, &s);
  int np = 0, nl = count_acc(&tg.g, DFL_BF16, &np, what), nf = count_acc(&tg.g, DFL_F32, &np, what);
  CHECK(np > 10, "%s: only %d params with gradients", what, np);
  if (want_lowp) CHECK(nl == np && nf == 0, "%s: %d of %d accumulators in bf16, %d in f32", what, nl, np, nf);
  else CHECK(nl == 0 && nf == np, "%s: %d of %d accumulators in bf16, want none", what, nl, np);
  printf("%s: %d params, %d bf16 accumulators\n", what, np, nl);
  dfl_graph_free(&tg.g);
}

int main(void) {
  run("bf16, grads = bf16", DFL_PREC_BF16, 1, 1, 1);
  run("bf16, grads = f32", DFL_PREC_BF16, 0, 1, 0);
  run("bf16, grads = bf16, accum 2", DFL_PREC_BF16, 1, 2, 0);
  run("fp32, grads = bf16 (refused by check; here a no-op)", DFL_PREC_FP32, 1, 1, 0);
  if (failures) printf("%d failure(s)\n", failures);
  else printf("PASS\n");
  return failures != 0;
}
