/* test_fuse.c: the fusion stage (compiler/fuse.c). The weight-gradient MATMUL -> ACCUM pairs of a
** small train graph become accumulating MATMULs, and two training steps of the fused graph match
** the unfused one on the CPU backend within summation-order rounding (relative 1e-5 on every
** persistent tensor). A pair whose product is read elsewhere must not fuse. */
#include "irtest.h"

typedef struct { int ids, lab, wt, emb, wn, w1, w2; } net;

static void build(dfl_graph *g, net *n, int R, int D, int V) {
  dfl_graph_init(g);
  n->ids = dfl_tensor_1d(g, "ids", DFL_I32, DFL_T_INPUT, R), n->lab = dfl_tensor_1d(g, "labels", DFL_I32, DFL_T_INPUT, R);
  n->wt = dfl_tensor_1d(g, "weights", DFL_F32, DFL_T_INPUT, R), n->emb = dfl_tensor_2d(g, "embed", DFL_F32, DFL_T_FROZEN, V, D);
  n->wn = dfl_tensor_1d(g, "norm", DFL_F32, DFL_T_PARAM, D), n->w1 = dfl_tensor_2d(g, "w1", DFL_F32, DFL_T_PARAM, 2 * D, D);
  n->w2 = dfl_tensor_2d(g, "w2", DFL_F32, DFL_T_PARAM, D, 2 * D);
  int x = dfl_gather(g, n->emb, n->ids, DFL_F32, "x");
  int u = dfl_linear(g, dfl_rmsnorm(g, x, n->wn, D, 1e-6, "u"), n->w1, DFL_F32, "p");
  int h = dfl_add(g, x, dfl_linear(g, u, n->w2, DFL_F32, "q"), "h");
  int y = dfl_rmsnorm(g, h, n->wn, D, 1e-6, "y");
  int out[5] = {dfl_tensor_1d(g, "num", DFL_F32, DFL_T_ACT, 1), dfl_tensor_1d(g, "ce", DFL_F32, DFL_T_ACT, R),
                dfl_tensor_1d(g, "cor", DFL_F32, DFL_T_ACT, R), dfl_tensor_1d(g, "hit", DFL_F32, DFL_T_ACT, R),
                dfl_tensor_2d(g, "dy", DFL_F32, DFL_T_ACT, R, D)};
  int in[4] = {y, n->emb, n->lab, n->wt};
  dfl_attrs a = {0};
  a.vocab_chunk = 5;
  g->cur_phase = DFL_PH_LOSS;
  dfl_op_add(g, DFL_OP_LINEAR_CE, in, 4, out, 5, &a);
  int den = dfl_tensor_1d(g, "den", DFL_F32, DFL_T_ACT, 1);
  dfl_op_add(g, DFL_OP_SUM, &n->wt, 1, &den, 1, NULL);
  CHECK(dfl_autodiff(g, out[0]) == DFL_OK);
  struct dfl_optim_cfg k = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .clip = 1, .warmup = 1, .total = 5};
  CHECK(dfl_build_optimizer(g, den, &k) >= 0);
}

static int count(const dfl_graph *g, dfl_opcode c, int beta) {
  int k = 0;
  for (int i = 0; i < g->nops; i++) k += g->ops[i].code == c && (c != DFL_OP_MATMUL || (g->ops[i].a.beta != 0) == beta);
  return k;
}

/* The same random weights (loss weights positive) in both backends of a pair of graphs. */
static void same_weights(dfl_cpu c[2], dfl_graph g[2], net n[2], int R) {
  int fill_t[5] = {n[0].emb, n[0].wn, n[0].w1, n[0].w2, n[0].wt};
  for (int i = 0; i < 5; i++) {
    fill_rand(&c[0], fill_t[i], 1);
    double *v = get_all(&c[0], fill_t[i]);
    if (fill_t[i] == n[0].wt) for (int r = 0; r < R; r++) v[r] = fabs(v[r]) + 0.1;
    for (int m = 0; m < 2; m++) dfl_cpu_set_d(&c[m], fill_t[i], v, dfl_tensor_numel(&g[0].t[fill_t[i]]));
    free(v);
  }
}
/* The same random ids and labels in both. */
static void same_tokens(dfl_cpu c[2], net n[2], int R, int V) {
  for (int r = 0; r < R; r++) {
    int id = irand(V), l = irand(V);
    for (int m = 0; m < 2; m++) dfl_cpu_i32(&c[m], n[m].ids)[r] = id, dfl_cpu_i32(&c[m], n[m].lab)[r] = l;
  }
}

/* t = A B read by ACCUM and by SUM: t must stay. */
static void case_shared_product(void) {
  dfl_graph g;
  dfl_graph_init(&g);
  int A = dfl_tensor_2d(&g, "A", DFL_F32, DFL_T_INPUT, 3, 4), B = dfl_tensor_2d(&g, "B", DFL_F32, DFL_T_INPUT, 4, 5);
  int acc = dfl_tensor_2d(&g, "acc", DFL_F32, DFL_T_GRAD, 3, 5), s = dfl_tensor_1d(&g, "s", DFL_F32, DFL_T_ACT, 1);
  g.cur_phase = DFL_PH_BACKWARD;
  int t = dfl_matmul(&g, A, B, 0, 0, DFL_F32, "t");
  int in[2] = {acc, t};
  dfl_op_add(&g, DFL_OP_ACCUM, in, 2, &acc, 1, NULL);
  dfl_op_add(&g, DFL_OP_SUM, &t, 1, &s, 1, NULL);
  CHECK(dfl_fuse(&g) == 0);
  CHECK(g.nops == 3 && count(&g, DFL_OP_ACCUM, 0) == 1);
  dfl_graph_free(&g);
}

/* An accumulator with two writers, or read before its writer, keeps AdamW's zeroing. */
static void case_overwrite_refused(int early_read) {
  dfl_graph g;
  dfl_graph_init(&g);
  int p = dfl_tensor_1d(&g, "p", DFL_F32, DFL_T_PARAM, 4), ms = dfl_tensor_1d(&g, "ms", DFL_F32, DFL_T_STATE, 4);
  int m = dfl_tensor_1d(&g, "m", DFL_F32, DFL_T_STATE, 4), v = dfl_tensor_1d(&g, "v", DFL_F32, DFL_T_STATE, 4);
  int acc = dfl_tensor_1d(&g, "acc", DFL_F32, DFL_T_GRAD, 4), st = dfl_tensor_1d(&g, "st", DFL_F32, DFL_T_STATE, DFL_OPT_COUNT);
  int x1 = dfl_tensor_1d(&g, "x1", DFL_F32, DFL_T_INPUT, 4), x2 = dfl_tensor_1d(&g, "x2", DFL_F32, DFL_T_INPUT, 4);
  int sq = dfl_tensor_1d(&g, "sq", DFL_F32, DFL_T_STATE, 1);
  g.cur_phase = DFL_PH_BACKWARD;
  if (early_read) dfl_op_add(&g, DFL_OP_SUMSQ_ACC, (int[]){sq, acc}, 2, &sq, 1, NULL);
  dfl_op_add(&g, DFL_OP_ACCUM, (int[]){acc, x1}, 2, &acc, 1, NULL);
  if (!early_read) dfl_op_add(&g, DFL_OP_ACCUM, (int[]){acc, x2}, 2, &acc, 1, NULL);
  g.cur_phase = DFL_PH_OPTIMIZER;
  dfl_attrs a = {0};
  a.beta1 = 0.9, a.beta2 = 0.99, a.eps = 1e-8;
  CHECK(dfl_op_add(&g, DFL_OP_ADAMW, (int[]){p, ms, m, v, acc, st}, 6, (int[]){p, ms, m, v, acc}, 5, &a) >= 0);
  CHECK(dfl_fuse_overwrite(&g) == 0);
  CHECK(g.ops[g.nops - 1].a.keep_grad == 0 && g.ops[early_read ? 1 : 0].code == DFL_OP_ACCUM);
  dfl_graph_free(&g);
}

/* dfl_fuse_overwrite on the fused graph: every accumulator here has one writer per step (w1 and
** w2 an accumulating GEMM, norm an ACCUM of the sum of its two RMSNORM_BWD outputs): all three are
** overwritten instead of zeroed and added to. Three optimizer steps of one micro-step each, then
** one more step: every persistent tensor equal to the fused graph's (0 + x = x). */
static void case_overwrite(int R, int D, int V) {
  dfl_graph g[2];
  net n[2];
  for (int m = 0; m < 2; m++) {
    build(&g[m], &n[m], R, D, V);
    CHECK(dfl_fuse(&g[m]) == 2);
  }
  int nacc0 = count(&g[1], DFL_OP_ACCUM, 0), ncopy0 = count(&g[1], DFL_OP_COPY, 0);
  CHECK(dfl_fuse_overwrite(&g[1]) == 3);
  CHECK(count(&g[1], DFL_OP_MATMUL, 1) == 0 && count(&g[1], DFL_OP_ACCUM, 0) == nacc0 - 1 &&
        count(&g[1], DFL_OP_COPY, 0) == ncopy0 + 1);
  int kept = 0;
  for (int i = 0; i < g[1].nops; i++) kept += g[1].ops[i].code == DFL_OP_ADAMW && g[1].ops[i].a.keep_grad;
  CHECK(kept == 3);
  CHECK(dfl_fuse_overwrite(&g[1]) == 0); /* idempotent */
  dfl_cpu c[2];
  for (int m = 0; m < 2; m++) CHECK(dfl_cpu_init(&c[m], &g[m], NULL, 0) == DFL_OK);
  same_weights(c, g, n, R);
  for (int m = 0; m < 2; m++) dfl_cpu_init_masters(&c[m]);
  for (int step = 0; step < 4; step++) {
    same_tokens(c, n, R, V);
    for (int m = 0; m < 2; m++) {
      CHECK(dfl_cpu_run(&c[m], DFL_PH_STEP) == DFL_OK);
      if (step < 3) CHECK(dfl_cpu_run(&c[m], 1u << DFL_PH_OPTIMIZER) == DFL_OK);
    }
  }
  int ncmp = 0, nz = 0;
  for (int i = 0; i < g[0].nt; i++) {
    if (!dfl_tensor_is_persistent(&g[0].t[i]) || g[0].t[i].dtype != DFL_F32) continue;
    double *x = get_all(&c[0], i), *y = get_all(&c[1], i);
    int64_t k = dfl_tensor_numel(&g[0].t[i]), bad = 0;
    for (int64_t e = 0; e < k; e++) bad += x[e] != y[e], nz += x[e] != 0;
    if (bad) { fprintf(stderr, "FAIL overwrite: %s differs in %lld of %lld values\n", g[0].t[i].name, (long long)bad, (long long)k); fails++; }
    ncmp++;
    free(x), free(y);
  }
  CHECK(ncmp > 8 && nz > 100);
  for (int m = 0; m < 2; m++) dfl_cpu_free(&c[m]), dfl_graph_free(&g[m]);
}

int main(void) {
  rng_init("ir_fuse");
  int R = 6, D = 8, V = 13;
  dfl_graph g[2];
  net n[2];
  for (int m = 0; m < 2; m++) build(&g[m], &n[m], R, D, V);
  int nops0 = g[1].nops, acc0 = count(&g[1], DFL_OP_ACCUM, 0);
  int nf = dfl_fuse(&g[1]);
  /* w1 and w2: their gradients are single GEMMs; norm's is a sum of two RMSNORM_BWD outputs */
  CHECK(nf == 2);
  CHECK(g[1].nops == nops0 - 2 && count(&g[1], DFL_OP_ACCUM, 0) == acc0 - 2 && count(&g[1], DFL_OP_MATMUL, 1) == 2);
  for (int i = 0; i < g[1].nops; i++) {
    const dfl_op *op = &g[1].ops[i];
    if (op->code == DFL_OP_MATMUL && op->a.beta != 0) {
      CHECK(op->n_in == 3 && op->out[0] == op->in[2] && g[1].t[op->out[0]].kind == DFL_T_GRAD);
      CHECK(g[1].t[op->out[0]].producer <= i);
    }
  }
  CHECK(dfl_fuse(&g[1]) == 0); /* idempotent */

  dfl_cpu c[2];
  for (int m = 0; m < 2; m++) CHECK(dfl_cpu_init(&c[m], &g[m], NULL, 0) == DFL_OK);
  same_weights(c, g, n, R);
  same_tokens(c, n, R, V);
  for (int m = 0; m < 2; m++) {
    dfl_cpu_init_masters(&c[m]);
    /* two micro-steps per optimizer step: the second must add to the first's gradients */
    for (int step = 0; step < 2; step++) {
      for (int micro = 0; micro < 2; micro++) CHECK(dfl_cpu_run(&c[m], DFL_PH_STEP) == DFL_OK);
      CHECK(dfl_cpu_run(&c[m], 1u << DFL_PH_OPTIMIZER) == DFL_OK);
    }
    CHECK(dfl_cpu_run(&c[m], DFL_PH_STEP) == DFL_OK); /* and leave gradients in the accumulators */
  }
  /* the tensor tables are identical (fusion only rewrites ops): compare every persistent tensor */
  int ncmp = 0;
  for (int i = 0; i < g[0].nt; i++) {
    if (!dfl_tensor_is_persistent(&g[0].t[i]) || g[0].t[i].dtype != DFL_F32) continue;
    double *x = get_all(&c[0], i), *y = get_all(&c[1], i), worst = 0, mag = 0;
    int64_t k = dfl_tensor_numel(&g[0].t[i]);
    for (int64_t e = 0; e < k; e++) mag = fmax(mag, fabs(x[e]));
    for (int64_t e = 0; e < k; e++) worst = fmax(worst, fabs(x[e] - y[e]) / (mag + 1e-30));
    if (worst > 1e-5) { fprintf(stderr, "FAIL fused: %s differs by %.3e (relative to its max)\n", g[0].t[i].name, worst); fails++; }
    ncmp++;
    free(x), free(y);
  }
  CHECK(ncmp > 8);
  CHECK(dfl_cpu_f32(&c[1], n[1].w1)[0] != 0);
  for (int m = 0; m < 2; m++) dfl_cpu_free(&c[m]), dfl_graph_free(&g[m]);
  case_shared_product();
  case_overwrite(R, D, V);
  case_overwrite_refused(0);
  case_overwrite_refused(1);
  if (fails) { fprintf(stderr, "%d check(s) failed\n", fails); return 1; }
  printf("ir_fuse: ok (2 pairs fused, %d persistent tensors agree within 1e-5; overwrite rewrite exact)\n", ncmp);
  return 0;
}
