/*
** test_block_rows: the drafter's first layer on its distinct block rows (models/drafter.c: BLOCK_ROWS
** before the input norm, BLOCK_EXPAND after the q/k/v projections) and its last layer without the
** anchor rows after the attention (BLOCK_DROP, BLOCK_UNDROP of the per-row results) compute the same
** step as the plain graph (compile { block_rows = false }). Both training graphs of a small spec (nano's shapes, 2 layers,
** batch 2, some invalid blocks, a partial supervision mask) run on the CPU in f64 from the same
** random values, tensor by name; the loss, the metrics and every parameter's gradient must agree to
** 1e-10 (relative to each tensor's largest entry). The rewrite must also cut the step's FLOPs.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "models/models.h"
#include "runtime/cpu/cpu.h"
#include "tests/train/train_test.h"

static uint64_t seed;

/* A value per (tensor name, index) in [-1, 1): the same in both graphs. */
static double val(const char *name, int64_t i) {
  uint64_t h = seed ^ 1469598103934665603ull;
  for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  h ^= (uint64_t)i * 0x9e3779b97f4a7c15ull;
  h ^= h >> 33, h *= 0xff51afd7ed558ccdull, h ^= h >> 33, h *= 0xc4ceb9fe1a85ec53ull, h ^= h >> 33;
  return (double)(h >> 11) / 4503599627370496.0 - 1.0;
}

/* train_test.h's nano spec, with two drafter layers (one first, one last) and one micro-step */
static void spec_init(dfl_spec *s) {
  if (small_spec(s, "unused.jsonl", NULL)) failures++;
  s->drafter.layers = 2;
  s->drafter.intermediate = 96;
  s->seq_len = 24;
  s->accum = 1;
}

typedef struct {
  dfl_train_graph tg;
  dfl_cpu cpu;
  double flops;
} run_t;

static double step_flops(const dfl_graph *g) {
  double f = 0;
  for (int i = 0; i < g->nops; i++)
    if (g->ops[i].phase != DFL_PH_OPTIMIZER) f += dfl_op_flops(g, &g->ops[i]);
  return f;
}

/* Builds the training graph with compile { block_rows = rows } and runs forward, loss and backward. */
static int run(run_t *r, const dfl_spec *s0, int rows) {
  dfl_spec *s = malloc(sizeof *s);
  if (!s) return DFL_ENOMEM;
  *s = *s0;
  s->opt.no_block_rows = !rows;
  memset(r, 0, sizeof *r);
  int rc = dfl_model_train_graph(&r->tg, s, 0);
  free(s);
  if (rc != DFL_OK) return DFL_ERR;
  dfl_graph *g = &r->tg.g;
  r->flops = step_flops(g);
  if (dfl_cpu_init(&r->cpu, g, NULL, 1) != DFL_OK) return DFL_ERR;
  for (int t = 0; t < g->nt; t++) {
    const dfl_tensor *T = &g->t[t];
    if ((T->kind != DFL_T_PARAM && T->kind != DFL_T_FROZEN && T->kind != DFL_T_INPUT) || T->dtype == DFL_I32) continue;
    int64_t n = dfl_tensor_numel(T);
    double *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = 0.5 * val(T->name, i);
    dfl_cpu_set_d(&r->cpu, t, v, n);
    free(v);
  }
  /* ids over the vocabulary; supervision with gaps; anchors sorted, one invalid block per sample */
  const int S = r->tg.S, N = r->tg.N, b = r->tg.batch, V = s0->target.vocab;
  int32_t *ids = dfl_cpu_i32(&r->cpu, r->tg.ids), *lm = dfl_cpu_i32(&r->cpu, r->tg.loss_mask);
  int32_t *an = dfl_cpu_i32(&r->cpu, r->tg.anchors), *kp = dfl_cpu_i32(&r->cpu, r->tg.keep);
  for (int i = 0; i < b * S; i++) ids[i] = (int32_t)((val("ids", i) + 1) * 0.5 * (V - 1));
  for (int i = 0; i < b * S; i++) lm[i] = val("mask", i) > -0.6;
  for (int k = 0; k < b; k++)
    for (int n = 0; n < N; n++) {
      an[k * N + n] = 1 + n * (S - 2) / N + (int)((val("anchor", k * N + n) + 1) * 0.5 * ((S - 2) / N - 1));
      kp[k * N + n] = n != (k + 1) % N;
    }
  unsigned ph = (1u << DFL_PH_FORWARD) | (1u << DFL_PH_LOSS) | (1u << DFL_PH_BACKWARD);
  return dfl_cpu_run(&r->cpu, ph);
}

/* max |a - b| over max |b| of tensor ta in run A and tb in run B */
static double rel(run_t *A, int ta, run_t *B, int tb) {
  int64_t n = dfl_tensor_numel(&A->tg.g.t[ta]);
  if (n != dfl_tensor_numel(&B->tg.g.t[tb])) return INFINITY;
  double *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b), d = 0, m = 0;
  dfl_cpu_get_d(&A->cpu, ta, a, n);
  dfl_cpu_get_d(&B->cpu, tb, b, n);
  for (int64_t i = 0; i < n; i++) {
    if (!(fabs(a[i] - b[i]) <= d)) d = fabs(a[i] - b[i]);
    if (fabs(b[i]) > m) m = fabs(b[i]);
  }
  free(a), free(b);
  return m > 0 ? d / m : d;
}

int main(void) {
  const char *e = getenv("DFL_SEED");
  seed = e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL);
  printf("test_block_rows: seed %llu (DFL_SEED=%llu to replay)\n", (unsigned long long)seed, (unsigned long long)seed);
  dfl_spec s;
  spec_init(&s);
  run_t *A = calloc(1, sizeof *A), *B = calloc(1, sizeof *B); /* A: block rows, B: plain */
  CHECK(run(A, &s, 1) == DFL_OK, "the graph with block rows did not run");
  CHECK(run(B, &s, 0) == DFL_OK, "the plain graph did not run");
  if (failures) return 1;
  int nrows = 0, ndrop = 0;
  for (int i = 0; i < A->tg.g.nops; i++) {
    nrows += A->tg.g.ops[i].code == DFL_OP_BLOCK_EXPAND;
    ndrop += A->tg.g.ops[i].code == DFL_OP_BLOCK_DROP && A->tg.g.ops[i].phase != DFL_PH_BACKWARD;
  }
  for (int i = 0; i < B->tg.g.nops; i++)
    CHECK(B->tg.g.ops[i].code < DFL_OP_BLOCK_ROWS, "block_rows = false kept a %s", dfl_opcode_name(B->tg.g.ops[i].code));
  CHECK(nrows == 3, "%d BLOCK_EXPAND ops, want 3 (q, k, v of layer 0)", nrows);
  CHECK(ndrop == 4, "%d forward BLOCK_DROP ops, want 4 (attention output, residual, labels, weights)", ndrop);
  CHECK(A->flops < B->flops, "FLOPs %.4g with block rows, %.4g without", A->flops, B->flops);
  double worst = 0;
  const char *wn = "";
  double r = rel(A, A->tg.drafter.num, B, B->tg.drafter.num);
  if (r > worst) worst = r, wn = "loss";
  r = rel(A, A->tg.drafter.metrics, B, B->tg.drafter.metrics);
  if (r > worst) worst = r, wn = "metrics";
  for (int k = 0; k < A->tg.drafter.n_params; k++) {
    int pa = A->tg.drafter.params[k], pb = B->tg.drafter.params[k];
    const dfl_tensor *ta = &A->tg.g.t[pa], *tb = &B->tg.g.t[pb];
    CHECK(strcmp(ta->name, tb->name) == 0, "param %d: %s vs %s", k, ta->name, tb->name);
    CHECK(ta->grad >= 0 && tb->grad >= 0, "%s has no gradient", ta->name);
    if (ta->grad < 0 || tb->grad < 0) continue;
    r = rel(A, ta->grad, B, tb->grad);
    if (!(r <= worst)) worst = r, wn = ta->name;
  }
  printf("FLOPs a step %.4g -> %.4g; worst relative difference %.3g (%s) over the loss, metrics and %d gradients\n",
         B->flops, A->flops, worst, wn, A->tg.drafter.n_params);
  CHECK(worst <= 1e-10, "worst relative difference %.3g (%s) > 1e-10", worst, wn);
  dfl_cpu_free(&A->cpu), dfl_cpu_free(&B->cpu);
  dfl_graph_free(&A->tg.g), dfl_graph_free(&B->tg.g);
  free(A), free(B);
  if (failures) printf("%d failure(s)\n", failures);
  else printf("PASS\n");
  return failures != 0;
}
