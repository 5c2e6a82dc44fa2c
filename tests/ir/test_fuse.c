/* test_fuse.c: the fusion stage (compiler/fuse.c). The weight-gradient MATMUL -> ACCUM pairs of a
** small train graph become accumulating MATMULs, and two training steps of the fused graph match
** the unfused one on the CPU backend within summation-order rounding (relative 1e-5 on every
** persistent tensor). A pair whose product is read elsewhere must not fuse.
** dfl_fuse_add: the MATMUL -> ADD pairs (residual adds, gradient sums) of a two-layer residual
** train graph become MATMULs with an addend; its forward outputs, loss sums and, after two
** optimizer steps, every persistent tensor match the graph without it within relative 1e-5 (f32:
** only the addition order differs); every refusal condition is exercised on a minimal graph; the
** addend form's gradient (autodiff) matches finite differences. The same rewrite into
** RMSNORM_BWD (the residual stream's gradient sums): legal and refused cases, values against the
** unfused graph. */
#include "irtest.h"

typedef struct { int ids, lab, wt, emb, wn, w1, w2; } net;

/* The tied head's fused CE over y (loss phase), autodiff from its sum, AdamW: the tail both
** test networks share. Returns the loss numerator. */
static int head_and_optimizer(dfl_graph *g, int y, int emb, int lab, int wt, int R, int D) {
  int out[5] = {dfl_tensor_1d(g, "num", DFL_F32, DFL_T_ACT, 1), dfl_tensor_1d(g, "ce", DFL_F32, DFL_T_ACT, R),
                dfl_tensor_1d(g, "cor", DFL_F32, DFL_T_ACT, R), dfl_tensor_1d(g, "hit", DFL_F32, DFL_T_ACT, R),
                dfl_tensor_2d(g, "dy", DFL_F32, DFL_T_ACT, R, D)};
  int in[4] = {y, emb, lab, wt};
  dfl_attrs a = {0};
  a.vocab_chunk = 5;
  g->cur_phase = DFL_PH_LOSS;
  dfl_op_add(g, DFL_OP_LINEAR_CE, in, 4, out, 5, &a);
  int den = dfl_tensor_1d(g, "den", DFL_F32, DFL_T_ACT, 1);
  dfl_op_add(g, DFL_OP_SUM, &wt, 1, &den, 1, NULL);
  CHECK(dfl_autodiff(g, out[0]) == DFL_OK);
  struct dfl_optim_cfg k = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .clip = 1, .warmup = 1, .total = 5};
  CHECK(dfl_build_optimizer(g, den, &k) >= 0);
  return out[0];
}

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
  head_and_optimizer(g, y, n->emb, n->lab, n->wt, R, D);
}

static int count(const dfl_graph *g, dfl_opcode c, int beta) {
  int k = 0;
  for (int i = 0; i < g->nops; i++) k += g->ops[i].code == c && (c != DFL_OP_MATMUL || (g->ops[i].a.beta != 0) == beta);
  return k;
}

/* The same random weights (loss weights positive) in both backends of a pair of graphs. */
/* Tensor i after the same runs of the unfused (c[0]) and fused (c[1]) graph, whose tensor tables
** are identical: the largest difference relative to the tensor's largest value must stay <= 1e-5. */
static void same_f32(dfl_cpu c[2], const dfl_graph *g, int i, const char *what) {
  double *x = get_all(&c[0], i), *y = get_all(&c[1], i), worst = 0, mag = 0;
  int64_t k = dfl_tensor_numel(&g->t[i]);
  for (int64_t e = 0; e < k; e++) mag = fmax(mag, fabs(x[e]));
  for (int64_t e = 0; e < k; e++) worst = fmax(worst, fabs(x[e] - y[e]) / (mag + 1e-30));
  if (worst > 1e-5) { fprintf(stderr, "FAIL %s: %s differs by %.3e (relative to its max)\n", what, g->t[i].name, worst); fails++; }
  free(x), free(y);
}

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

/* --- dfl_fuse_add ---------------------------------------------------------------------------- */

/* Two residual blocks: h = x1 + down(swiglu(gate(u), up(u))), u = rmsnorm(x1); h2 = o(rmsnorm(h))
** + h (the product first); x1 = x W4 so that the residual stream has a gradient. Forward: two
** residual adds. Backward: u's gradient sums gate's and up's input gradients (two GEMM outputs),
** w4 (read by x1 and o) sums two weight-gradient GEMMs; the residual stream's two sums add an
** RMSNORM_BWD's dx (they fuse into that op), and the norm weight's gradient sums three RMSNORM_BWD
** dw outputs (not a dx: those adds stay). */
typedef struct { int ids, lab, wt, emb, wn, w1, w2, w3, w4, h, h2, num; } net2;

static void build2(dfl_graph *g, net2 *n, int R, int D, int V) {
  dfl_graph_init(g);
  n->ids = dfl_tensor_1d(g, "ids", DFL_I32, DFL_T_INPUT, R), n->lab = dfl_tensor_1d(g, "labels", DFL_I32, DFL_T_INPUT, R);
  n->wt = dfl_tensor_1d(g, "weights", DFL_F32, DFL_T_INPUT, R), n->emb = dfl_tensor_2d(g, "embed", DFL_F32, DFL_T_FROZEN, V, D);
  n->wn = dfl_tensor_1d(g, "norm", DFL_F32, DFL_T_PARAM, D);
  n->w1 = dfl_tensor_2d(g, "w1", DFL_F32, DFL_T_PARAM, 2 * D, D), n->w3 = dfl_tensor_2d(g, "w3", DFL_F32, DFL_T_PARAM, 2 * D, D);
  n->w2 = dfl_tensor_2d(g, "w2", DFL_F32, DFL_T_PARAM, D, 2 * D), n->w4 = dfl_tensor_2d(g, "w4", DFL_F32, DFL_T_PARAM, D, D);
  g->cur_phase = DFL_PH_FORWARD;
  int x = dfl_gather(g, n->emb, n->ids, DFL_F32, "x");
  int x1 = dfl_matmul(g, x, n->w4, 0, 0, DFL_F32, "x1");
  int u = dfl_rmsnorm(g, x1, n->wn, D, 1e-6, "u");
  int sw = dfl_swiglu(g, dfl_linear(g, u, n->w1, DFL_F32, "gate"), dfl_linear(g, u, n->w3, DFL_F32, "up"), "sw");
  n->h = dfl_add(g, x1, dfl_linear(g, sw, n->w2, DFL_F32, "down"), "h");
  int o = dfl_linear(g, dfl_rmsnorm(g, n->h, n->wn, D, 1e-6, "v"), n->w4, DFL_F32, "o");
  n->h2 = dfl_add(g, o, n->h, "h2");
  int y = dfl_rmsnorm(g, n->h2, n->wn, D, 1e-6, "y");
  n->num = head_and_optimizer(g, y, n->emb, n->lab, n->wt, R, D);
  CHECK(dfl_fuse(g) > 0); /* as dfl_model_train_graph: the ACCUM rewrite first */
}

/* Every op of g added again to a fresh graph: dfl_op_add checks each op's contract (and aborts). */
static void revalidate(const dfl_graph *g) {
  dfl_graph v;
  dfl_graph_init(&v);
  for (int t = 0; t < g->nt; t++) {
    int id = dfl_tensor_new(&v, g->t[t].name, g->t[t].dtype, g->t[t].kind, g->t[t].ndim, g->t[t].shape);
    v.t[id].requires_grad = g->t[t].requires_grad;
  }
  for (int i = 0; i < g->nops; i++) {
    v.cur_phase = g->ops[i].phase;
    CHECK(dfl_op_add(&v, g->ops[i].code, g->ops[i].in, g->ops[i].n_in, g->ops[i].out, g->ops[i].n_out, &g->ops[i].a) == i);
  }
  dfl_graph_free(&v);
}

/* Number of RMSNORM_BWD ops with an addend (dfl_fuse_add). */
static int count_norm_addend(const dfl_graph *g) {
  int k = 0;
  for (int i = 0; i < g->nops; i++) k += g->ops[i].code == DFL_OP_RMSNORM_BWD && g->ops[i].n_in == 5;
  return k;
}

/* Number of MATMULs with an addend (out != in[2]) of phase ph (-1: any). */
static int count_addend(const dfl_graph *g, int ph) {
  int k = 0;
  for (int i = 0; i < g->nops; i++) {
    const dfl_op *op = &g->ops[i];
    k += op->code == DFL_OP_MATMUL && op->a.beta != 0 && op->n_in == 3 && op->in[2] != op->out[0] &&
         (ph < 0 || (int)op->phase == ph);
  }
  return k;
}

/* The train graph with and without dfl_fuse_add: two optimizer steps of two micro-steps each, then
** one more micro-step; forward activations, the loss and every persistent tensor agree within
** relative 1e-5 (f32: the GEMM adds r into its result, an order the unfused ADD did not use). */
static void case_add_train(int R, int D, int V) {
  dfl_graph g[2];
  net2 n[2];
  for (int m = 0; m < 2; m++) build2(&g[m], &n[m], R, D, V);
  int nops0 = g[1].nops, add0 = count(&g[1], DFL_OP_ADD, 0);
  int nf = dfl_fuse_add(&g[1]);
  /* forward: h and h2; backward: u's gradient (gate + up) and w4's (two weight GEMMs), and the
  ** residual stream's gradient at h and at x1 (each + an RMSNORM_BWD's dx) */
  CHECK(nf == 6);
  CHECK(count_addend(&g[1], DFL_PH_FORWARD) == 2 && count_addend(&g[1], DFL_PH_BACKWARD) == 2);
  CHECK(count_norm_addend(&g[1]) == 2);
  for (int i = 0; i < g[1].nops; i++) {
    const dfl_op *op = &g[1].ops[i];
    if (op->code != DFL_OP_RMSNORM_BWD || op->n_in != 5) continue;
    CHECK(g[1].t[op->out[0]].producer == i && g[1].t[op->in[4]].producer < i);
  }
  CHECK(g[1].nops == nops0 - nf && count(&g[1], DFL_OP_ADD, 0) == add0 - nf);
  CHECK(g[1].t[n[1].h].producer >= 0 && g[1].ops[g[1].t[n[1].h].producer].code == DFL_OP_MATMUL);
  CHECK(g[1].ops[g[1].t[n[1].h2].producer].in[2] == n[1].h); /* ADD(o, h): the product first */
  for (int i = 0; i < g[1].nops; i++) {
    const dfl_op *op = &g[1].ops[i];
    if (op->code != DFL_OP_MATMUL || op->n_in != 3 || op->in[2] == op->out[0]) continue;
    CHECK(g[1].t[op->out[0]].producer == i);
    CHECK(g[1].t[op->in[2]].producer < i); /* the addend is ready at the GEMM's place */
  }
  CHECK(dfl_fuse_add(&g[1]) == 0); /* idempotent */
  CHECK(dfl_fuse(&g[1]) == 0);     /* the ACCUM rewrite leaves the addend form alone */
  revalidate(&g[1]);

  dfl_cpu c[2];
  for (int m = 0; m < 2; m++) CHECK(dfl_cpu_init(&c[m], &g[m], NULL, 0) == DFL_OK);
  int fill_t[6] = {n[0].emb, n[0].wn, n[0].w1, n[0].w2, n[0].w3, n[0].w4};
  for (int i = 0; i < 7; i++) {
    int t = i < 6 ? fill_t[i] : n[0].wt;
    int64_t k = dfl_tensor_numel(&g[0].t[t]);
    fill_rand(&c[0], t, i == 1 ? 1 : 0.5);
    double *v = get_all(&c[0], t);
    if (t == n[0].wt) for (int r = 0; r < R; r++) v[r] = fabs(v[r]) + 0.1;
    if (t == n[0].wn) for (int e = 0; e < k; e++) v[e] += 1.5;
    for (int m = 0; m < 2; m++) dfl_cpu_set_d(&c[m], t, v, k);
    free(v);
  }
  for (int m = 0; m < 2; m++) dfl_cpu_init_masters(&c[m]);
  for (int step = 0; step < 3; step++)
    for (int micro = 0; micro < (step < 2 ? 2 : 1); micro++) {
      for (int r = 0; r < R; r++) {
        int id = irand(V), l = irand(V);
        for (int m = 0; m < 2; m++) dfl_cpu_i32(&c[m], n[m].ids)[r] = id, dfl_cpu_i32(&c[m], n[m].lab)[r] = l;
      }
      for (int m = 0; m < 2; m++) {
        CHECK(dfl_cpu_run(&c[m], DFL_PH_STEP) == DFL_OK);
        if (step < 2 && micro == 1) CHECK(dfl_cpu_run(&c[m], 1u << DFL_PH_OPTIMIZER) == DFL_OK);
      }
    }
  int ncmp = 0;
  for (int i = 0; i < g[0].nt; i++) {
    if ((!dfl_tensor_is_persistent(&g[0].t[i]) && i != n[0].h && i != n[0].h2 && i != n[0].num) ||
        g[0].t[i].dtype != DFL_F32)
      continue;
    same_f32(c, &g[0], i, "fused add");
    ncmp++;
  }
  CHECK(ncmp > 20);
  CHECK(dfl_cpu_f32(&c[1], n[1].num)[0] != 0 && dfl_cpu_f32(&c[1], n[1].h2)[0] != 0);
  for (int m = 0; m < 2; m++) dfl_cpu_free(&c[m]), dfl_graph_free(&g[m]);
}

/* Minimal graphs, one per condition of compiler/fuse.c. M x K times K x N; `sq` makes K = N = M so
** that A and B have the product's shape. Returns the number of ADDs dfl_fuse_add fused. */
enum {
  ADD_LEGAL, ADD_LEGAL_SWAPPED, ADD_T_READ_TWICE, ADD_OTHER_PHASE, ADD_R_DTYPE, ADD_U_DTYPE, ADD_HAS_ADDEND,
  ADD_R_WRITTEN_BETWEEN, ADD_R_IS_A, ADD_R_IS_B, ADD_U_READ_BETWEEN, ADD_U_WRITTEN_BETWEEN, ADD_U_IS_A, ADD_U_IS_R,
  ADD_T_PERSISTENT, ADD_TWO_PRODUCTS, ADD_NCASES
};
static int add_case(int which, int check_values) {
  const int M = 5, sq = which == ADD_R_IS_A || which == ADD_R_IS_B || which == ADD_U_IS_A;
  const int K = sq ? M : 7, N = sq ? M : 6;
  dfl_graph g;
  dfl_graph_init(&g);
  g.cur_phase = DFL_PH_FORWARD;
  dfl_dtype dr = which == ADD_R_DTYPE ? DFL_BF16 : DFL_F32, du = which == ADD_U_DTYPE ? DFL_BF16 : DFL_F32;
  int A = dfl_tensor_2d(&g, "A", DFL_F32, which == ADD_U_IS_A ? DFL_T_STATE : DFL_T_INPUT, M, K);
  int B = dfl_tensor_2d(&g, "B", DFL_F32, DFL_T_INPUT, K, N);
  int persistent_r = which == ADD_R_WRITTEN_BETWEEN || which == ADD_U_IS_R;
  int r = dfl_tensor_2d(&g, "r", dr, persistent_r ? DFL_T_STATE : DFL_T_INPUT, M, N);
  int x = dfl_tensor_2d(&g, "x", DFL_F32, DFL_T_INPUT, M, N), s = dfl_tensor_1d(&g, "s", DFL_F32, DFL_T_ACT, 1);
  int u = dfl_tensor_2d(&g, "u", du, which == ADD_U_READ_BETWEEN || which == ADD_U_WRITTEN_BETWEEN ? DFL_T_OUTPUT : DFL_T_ACT, M, N);
  if (which == ADD_R_IS_A) r = A;
  if (which == ADD_R_IS_B) r = B;
  if (which == ADD_U_IS_A) u = A;
  if (which == ADD_U_IS_R) u = r;
  int t;
  if (which == ADD_T_PERSISTENT) {
    t = dfl_tensor_2d(&g, "t", DFL_F32, DFL_T_OUTPUT, M, N);
    dfl_op_add(&g, DFL_OP_MATMUL, (int[]){A, B}, 2, &t, 1, &(dfl_attrs){.alpha = 1});
  } else if (which == ADD_HAS_ADDEND) {
    t = dfl_tensor_2d(&g, "t", DFL_F32, DFL_T_ACT, M, N);
    dfl_op_add(&g, DFL_OP_MATMUL, (int[]){A, B, x}, 3, &t, 1, &(dfl_attrs){.alpha = 1, .beta = 1});
  } else
    t = dfl_matmul(&g, A, B, 0, 0, DFL_F32, "t");
  if (which == ADD_TWO_PRODUCTS) r = dfl_matmul(&g, A, B, 0, 0, DFL_F32, "t2"); /* ADD(t, t2): t2 is the later */
  if (which == ADD_T_READ_TWICE) dfl_op_add(&g, DFL_OP_SUM, &t, 1, &s, 1, NULL);
  if (which == ADD_R_WRITTEN_BETWEEN) dfl_op_add(&g, DFL_OP_ACCUM, (int[]){r, x}, 2, &r, 1, NULL);
  if (which == ADD_U_READ_BETWEEN) dfl_op_add(&g, DFL_OP_SUM, &u, 1, &s, 1, NULL);
  if (which == ADD_U_WRITTEN_BETWEEN) dfl_op_add(&g, DFL_OP_COPY, &x, 1, &u, 1, NULL);
  if (which == ADD_OTHER_PHASE) g.cur_phase = DFL_PH_BACKWARD;
  int in[2] = {t, r};
  if (which == ADD_LEGAL_SWAPPED) in[0] = r, in[1] = t;
  dfl_op_add(&g, DFL_OP_ADD, in, 2, &u, 1, NULL);
  int nops0 = g.nops, nf = dfl_fuse_add(&g);
  if (nf == 1) { /* the fused op: the MATMUL that wrote the product, now out u, addend the other operand */
    int i = which == ADD_TWO_PRODUCTS ? 1 : 0;
    const dfl_op *op = &g.ops[i];
    CHECK(g.nops == nops0 - 1 && op->code == DFL_OP_MATMUL && op->n_in == 3 && op->a.beta == 1);
    CHECK(op->out[0] == u && op->in[2] == (which == ADD_TWO_PRODUCTS ? t : r) && g.t[u].producer == i);
    CHECK(g.t[which == ADD_TWO_PRODUCTS ? r : t].producer == -1);
    revalidate(&g);
  } else
    CHECK(g.nops == nops0 && g.ops[nops0 - 1].code == DFL_OP_ADD);
  if (check_values && nf == 1 && which != ADD_TWO_PRODUCTS) { /* u = A B + r on the CPU, within f32 rounding */
    dfl_cpu c;
    CHECK(dfl_cpu_init(&c, &g, NULL, 0) == DFL_OK);
    fill_rand(&c, A, 1), fill_rand(&c, B, 1), fill_rand(&c, r, 4);
    double *a = get_all(&c, A), *b = get_all(&c, B), *rv = get_all(&c, r), want[64];
    CHECK(dfl_cpu_run(&c, DFL_PH_ALL) == DFL_OK);
    double *got = get_all(&c, u);
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        double p = 0;
        for (int k = 0; k < K; k++) p += a[i * K + k] * b[k * N + j];
        want[i * N + j] = p + rv[i * N + j];
      }
    /* floor 1: the terms are O(1) (r up to 4), so a result that cancels to ~0 still carries their
    ** f32 rounding (~1e-7 absolute); a wrong formula is off by O(1) */
    near(which == ADD_LEGAL ? "fused ADD(t, r)" : "fused ADD(r, t)", got, want, (int64_t)M * N, 1e-5, 1.0);
    double *r2 = get_all(&c, r);
    CHECK(memcmp(r2, rv, sizeof(double) * (size_t)(M * N)) == 0); /* the addend is left as it was */
    free(a), free(b), free(rv), free(got), free(r2);
    dfl_cpu_free(&c);
  }
  dfl_graph_free(&g);
  return nf;
}

/* The RMSNORM_BWD form: u = ADD(dx, r) (or ADD(r, dx)) with dx = RMSNORM_BWD(x, w, rstd, dy).dx,
** on a minimal graph per condition. Legal cases: u equals the unfused graph's u on the CPU within
** the backend's f32 rounding (the same sum, rounded once instead of twice), dw is bit-identical, r
** is left as it was.
** Returns the number of ADDs fused. */
enum {
  NADD_LEGAL, NADD_SWAPPED, NADD_DX_READ_TWICE, NADD_R_IS_DY, NADD_R_IS_X, NADD_OTHER_PHASE, NADD_R_DTYPE,
  NADD_DW, NADD_U_READ_BETWEEN, NADD_R_WRITTEN_BETWEEN, NADD_NCASES
};
static int norm_add_case(int which) {
  const int R = 6, G = 8, D = 16;
  dfl_graph g[2];
  int u = -1, r = -1, dwt = -1;
  for (int m = 0; m < 2; m++) {
    dfl_graph *q = &g[m];
    dfl_graph_init(q);
    q->cur_phase = DFL_PH_BACKWARD;
    int x = dfl_tensor_2d(q, "x", DFL_F64, DFL_T_INPUT, R, D), w = dfl_tensor_1d(q, "w", DFL_F64, DFL_T_INPUT, G);
    int rs = dfl_tensor_1d(q, "rstd", DFL_F64, DFL_T_INPUT, R * D / G), dy = dfl_tensor_2d(q, "dy", DFL_F64, DFL_T_INPUT, R, D);
    r = dfl_tensor_2d(q, "r", which == NADD_R_DTYPE ? DFL_F32 : DFL_F64,
                      which == NADD_R_WRITTEN_BETWEEN ? DFL_T_STATE : DFL_T_INPUT, R, D);
    if (which == NADD_R_IS_DY) r = dy;
    if (which == NADD_R_IS_X) r = x;
    int dx = dfl_tensor_2d(q, "dx", DFL_F64, DFL_T_ACT, R, D);
    dwt = dfl_tensor_1d(q, "dw", DFL_F64, which == NADD_DW ? DFL_T_ACT : DFL_T_OUTPUT, G);
    u = dfl_tensor_2d(q, "u", DFL_F64, which == NADD_U_READ_BETWEEN ? DFL_T_OUTPUT : DFL_T_ACT, R, D);
    int s = dfl_tensor_1d(q, "s", DFL_F64, DFL_T_OUTPUT, 1);
    dfl_attrs at = {0};
    at.group = G, at.eps = 1e-6;
    dfl_op_add(q, DFL_OP_RMSNORM_BWD, (int[]){x, w, rs, dy}, 4, (int[]){dx, dwt}, 2, &at);
    if (which == NADD_DX_READ_TWICE) dfl_op_add(q, DFL_OP_SUM, &dx, 1, &s, 1, NULL);
    if (which == NADD_U_READ_BETWEEN) dfl_op_add(q, DFL_OP_SUM, &u, 1, &s, 1, NULL);
    if (which == NADD_R_WRITTEN_BETWEEN) dfl_op_add(q, DFL_OP_ACCUM, (int[]){r, dy}, 2, &r, 1, NULL);
    if (which == NADD_OTHER_PHASE) q->cur_phase = DFL_PH_FORWARD;
    if (which == NADD_DW) { /* the dw output summed: not a dx, stays */
      int u1 = dfl_tensor_1d(q, "u1", DFL_F64, DFL_T_OUTPUT, G), r1 = dfl_tensor_1d(q, "r1", DFL_F64, DFL_T_INPUT, G);
      dfl_op_add(q, DFL_OP_ADD, (int[]){dwt, r1}, 2, &u1, 1, NULL);
      dfl_op_add(q, DFL_OP_SCALE, &dx, 1, &u, 1, &(dfl_attrs){.alpha = 1});
    } else {
      int in[2] = {dx, r};
      if (which == NADD_SWAPPED) in[0] = r, in[1] = dx;
      dfl_op_add(q, DFL_OP_ADD, in, 2, &u, 1, NULL);
    }
  }
  int nops0 = g[1].nops, nf = dfl_fuse_add(&g[1]);
  if (nf == 1) {
    const dfl_op *op = &g[1].ops[0];
    CHECK(g[1].nops == nops0 - 1 && op->code == DFL_OP_RMSNORM_BWD && op->n_in == 5 && op->in[4] == r);
    CHECK(op->out[0] == u && op->out[1] == dwt && g[1].t[u].producer == 0);
    revalidate(&g[1]);
    dfl_cpu c[2];
    for (int m = 0; m < 2; m++) CHECK(dfl_cpu_init(&c[m], &g[m], NULL, 0) == DFL_OK);
    for (int t = 0; t < 5; t++) { /* x, w, rstd, dy, r: fresh values, rstd and w away from 0 */
      int64_t k = dfl_tensor_numel(&g[0].t[t]);
      fill_rand(&c[0], t, t == 1 || t == 2 ? 0.5 : 2);
      double *v = get_all(&c[0], t);
      if (t == 1 || t == 2) for (int64_t e = 0; e < k; e++) v[e] += 1;
      for (int m = 0; m < 2; m++) dfl_cpu_set_d(&c[m], t, v, k);
      free(v);
    }
    double *r0 = get_all(&c[1], r);
    for (int m = 0; m < 2; m++) CHECK(dfl_cpu_run(&c[m], DFL_PH_ALL) == DFL_OK);
    double *a = get_all(&c[0], u), *b = get_all(&c[1], u), *wa = get_all(&c[0], dwt), *wb = get_all(&c[1], dwt);
    near("fused RMSNORM_BWD addend", b, a, (int64_t)R * D, 1e-6, 1.0); /* f32 real: rounded once vs twice */
    CHECK(memcmp(wa, wb, sizeof(double) * G) == 0); /* dw: the same arithmetic */
    double *r1 = get_all(&c[1], r);
    CHECK(memcmp(r0, r1, sizeof(double) * (size_t)(R * D)) == 0);
    free(a), free(b), free(wa), free(wb), free(r0), free(r1);
    for (int m = 0; m < 2; m++) dfl_cpu_free(&c[m]);
  } else
    CHECK(g[1].nops == nops0);
  for (int m = 0; m < 2; m++) dfl_graph_free(&g[m]);
  return nf;
}

/* autodiff of the addend form (a graph fused before differentiation): d/dA, d/dB and d/dr (= the
** output's gradient) against finite differences, f64. */
static void case_add_grad(void) {
  for (int ta = 0; ta < 2; ta++) {
    dfl_graph g;
    dfl_graph_init(&g);
    int M = 4, N = 3, K = 5;
    int a = ta ? dfl_tensor_2d(&g, "A", DFL_F64, DFL_T_PARAM, K, M) : dfl_tensor_2d(&g, "A", DFL_F64, DFL_T_PARAM, M, K);
    int b = dfl_tensor_2d(&g, "B", DFL_F64, DFL_T_PARAM, N, K), r = dfl_tensor_2d(&g, "r", DFL_F64, DFL_T_PARAM, M, N);
    int u = dfl_tensor_2d(&g, "u", DFL_F64, DFL_T_ACT, M, N);
    dfl_attrs at = {0};
    at.trans_a = ta, at.trans_b = 1, at.alpha = 0.5, at.beta = 1;
    dfl_op_add(&g, DFL_OP_MATMUL, (int[]){a, b, r}, 3, &u, 1, &at);
    gradcheck(ta ? "matmul+addend ta=1" : "matmul+addend", &g, u, (int[]){a, b, r}, 3, NULL, NULL, 0, 1e-6);
    dfl_graph_free(&g);
  }
}

/* dfl_fuse_norm_rope: z = ROPE(RMSNORM(x, w) {group hd}, pos). which: 0 legal (the CPU values of
** the fused graph must equal the unfused graph's bit for bit: k_rope does k_rmsnorm's arithmetic),
** 1 rstd read by another op, 2 y read twice, 3 norm over the whole row, 4 hd 48 (48/16 not a power
** of two), 5 the norm in another phase, 6 w written between the two, 7 partial rotary (16 of 32: legal,
** qwen3_5's form), 8 partial rotary 8 of 32 (no fused kernel). Returns the pairs fused. */
static int norm_rope_case(int which) {
  const int R = 7, nh = 3, hd = which == 4 ? 48 : 32;
  dfl_graph g[2];
  int x = -1, w = -1, pos = -1, z = -1, nf = 0;
  for (int m = 0; m < 2; m++) {
    dfl_graph_init(&g[m]);
    g[m].cur_phase = which == 5 ? DFL_PH_TARGET : DFL_PH_FORWARD;
    x = dfl_tensor_2d(&g[m], "x", DFL_F32, DFL_T_INPUT, R, nh * hd);
    w = dfl_tensor_1d(&g[m], "w", DFL_F32, which == 6 ? DFL_T_STATE : DFL_T_INPUT, which == 3 ? nh * hd : hd);
    pos = dfl_tensor_1d(&g[m], "pos", DFL_I32, DFL_T_INPUT, R);
    int y = dfl_rmsnorm(&g[m], x, w, which == 3 ? nh * hd : hd, 1e-6, "y");
    g[m].cur_phase = DFL_PH_FORWARD;
    if (which == 1) { /* someone reads rstd (as RMSNORM_BWD would) */
      int rs = g[m].ops[g[m].t[y].producer].out[1];
      int o = dfl_tensor_1d(&g[m], "rs_copy", DFL_F32, DFL_T_ACT, dfl_tensor_numel(&g[m].t[rs]));
      dfl_op_add(&g[m], DFL_OP_COPY, &rs, 1, &o, 1, NULL);
    }
    if (which == 2) dfl_add(&g[m], y, y, "y2");
    if (which == 6) { /* an op between the two writes w */
      dfl_attrs a = {0};
      a.alpha = 2;
      dfl_op_add(&g[m], DFL_OP_SCALE, &w, 1, &w, 1, &a);
    }
    z = dfl_rope(&g[m], y, pos, nh, hd, 1e6, "z");
    if (which >= 7) g[m].ops[g[m].t[z].producer].a.rot_dim = which == 7 ? 16 : 8;
  }
  int nops0 = g[1].nops;
  nf = dfl_fuse_norm_rope(&g[1]);
  CHECK(nf >= 0 && dfl_fuse_norm_rope(&g[1]) == 0); /* idempotent */
  if (nf == 1) {
    const dfl_op *op = &g[1].ops[g[1].t[z].producer];
    CHECK(g[1].nops == nops0 - 1 && op->code == DFL_OP_ROPE && op->n_in == 3 && op->in[0] == x && op->in[2] == w);
    revalidate(&g[1]);
    dfl_cpu c[2];
    int p[7];
    for (int i = 0; i < R; i++) p[i] = irand(50000);
    for (int m = 0; m < 2; m++) {
      CHECK(dfl_cpu_init(&c[m], &g[m], NULL, 0) == DFL_OK);
      set_ints(&c[m], pos, p);
    }
    fill_rand(&c[0], x, 3), fill_rand(&c[0], w, 1.5);
    double *xv = get_all(&c[0], x), *wv = get_all(&c[0], w);
    dfl_cpu_set_d(&c[1], x, xv, (int64_t)R * nh * hd);
    dfl_cpu_set_d(&c[1], w, wv, hd);
    for (int m = 0; m < 2; m++) CHECK(dfl_cpu_run(&c[m], DFL_PH_ALL) == DFL_OK);
    double *a = get_all(&c[0], z), *b = get_all(&c[1], z);
    CHECK(memcmp(a, b, sizeof(double) * (size_t)R * nh * hd) == 0);
    double mx = 0;
    for (int i = 0; i < R * nh * hd; i++) mx = fmax(mx, fabs(b[i]));
    CHECK(mx > 0.1); /* not zeros */
    free(a), free(b), free(xv), free(wv);
    for (int m = 0; m < 2; m++) dfl_cpu_free(&c[m]);
  } else
    CHECK(g[1].nops == nops0);
  for (int m = 0; m < 2; m++) dfl_graph_free(&g[m]);
  return nf;
}

/* dfl_fuse_rope_pair: z1 = ROPE(x1, pos) ; z2 = ROPE(x2, pos) (5 and 3 heads: the GPU's partial
** items). which: 0 legal, adjacent (z1 moves down); 1 legal, both normed (after dfl_fuse_norm_rope);
** 2 legal, z1 read in between (z2 moves up); 3 positions differ; 4 z2 rotates what is made from z1
** in between (no order works); 5 directions differ; 6 one normed, one plain; 7 another phase. A legal pair's CPU
** values must equal the unfused graph's bit for bit. Returns the pairs fused. */
static int rope_pair_case(int which) {
  const int R = 9, nh = 5, nh2 = 3, hd = 32;
  dfl_graph g[2];
  int x1 = -1, x2 = -1, w1 = -1, w2 = -1, pos = -1, z1 = -1, z2 = -1, u = -1, nf = 0;
  for (int m = 0; m < 2; m++) {
    dfl_graph *G = &g[m];
    dfl_graph_init(G);
    G->cur_phase = DFL_PH_TARGET;
    x1 = dfl_tensor_2d(G, "x1", DFL_F32, DFL_T_INPUT, R, nh * hd);
    x2 = dfl_tensor_2d(G, "x2", DFL_F32, DFL_T_INPUT, R, nh2 * hd);
    w1 = dfl_tensor_1d(G, "w1", DFL_F32, DFL_T_INPUT, hd);
    w2 = dfl_tensor_1d(G, "w2", DFL_F32, DFL_T_INPUT, hd);
    pos = dfl_tensor_1d(G, "pos", DFL_I32, DFL_T_INPUT, R);
    int pos2 = which == 3 ? dfl_tensor_1d(G, "pos2", DFL_I32, DFL_T_INPUT, R) : pos;
    int y1 = which == 1 || which == 6 ? dfl_rmsnorm(G, x1, w1, hd, 1e-6, "y1") : x1;
    z1 = dfl_rope(G, y1, pos, nh, hd, 1e6, "z1");
    if (which == 2 || which == 4) { /* an op between the two reads z1 */
      dfl_attrs a = {0};
      a.alpha = 0.5;
      u = dfl_tensor_2d(G, "u", DFL_F32, DFL_T_ACT, R, nh * hd);
      dfl_op_add(G, DFL_OP_SCALE, &z1, 1, &u, 1, &a);
    }
    int in2 = which == 4 ? u : x2; /* 4: the second input is made from z1 (5 heads then) */
    if (which == 7) G->cur_phase = DFL_PH_FORWARD;
    int y2 = which == 1 ? dfl_rmsnorm(G, in2, w2, hd, 1e-6, "y2") : in2;
    z2 = dfl_rope(G, y2, pos2, which == 4 ? nh : nh2, hd, 1e6, "z2");
    if (which == 5) G->ops[G->nops - 1].a.inverse = 1;
  }
  for (int m = 1; m < 2; m++) CHECK(dfl_fuse_norm_rope(&g[m]) == (which == 1 ? 2 : which == 6 ? 1 : 0));
  int nops0 = g[1].nops;
  nf = dfl_fuse_rope_pair(&g[1]);
  CHECK(nf >= 0 && dfl_fuse_rope_pair(&g[1]) == 0); /* idempotent */
  if (nf == 1) {
    const dfl_op *op = &g[1].ops[g[1].t[z1].producer];
    CHECK(g[1].nops == nops0 - 1 && op->code == DFL_OP_ROPE && op->n_out == 2 && op->out[0] == z1 && op->out[1] == z2 &&
          op->a.heads == nh && op->a.kv_heads == nh2 && op->n_in == (which == 1 ? 5 : 3));
    CHECK(g[1].t[z2].producer == g[1].t[z1].producer);
    if (which == 2) CHECK(g[1].t[u].producer > g[1].t[z1].producer); /* z2 moved up, before the reader */
    revalidate(&g[1]);
    dfl_cpu c[2];
    int p[9];
    for (int i = 0; i < R; i++) p[i] = irand(50000);
    for (int m = 0; m < 2; m++) {
      CHECK(dfl_cpu_init(&c[m], &g[m], NULL, 0) == DFL_OK);
      set_ints(&c[m], pos, p);
    }
    fill_rand(&c[0], x1, 3), fill_rand(&c[0], x2, 2), fill_rand(&c[0], w1, 1.5), fill_rand(&c[0], w2, 1.5);
    const int ins[4] = {x1, x2, w1, w2};
    for (int k = 0; k < 4; k++) {
      double *v = get_all(&c[0], ins[k]);
      dfl_cpu_set_d(&c[1], ins[k], v, dfl_tensor_numel(&g[0].t[ins[k]]));
      free(v);
    }
    for (int m = 0; m < 2; m++) CHECK(dfl_cpu_run(&c[m], DFL_PH_ALL) == DFL_OK);
    const int outs[2] = {z1, z2};
    for (int k = 0; k < 2; k++) {
      int64_t n = dfl_tensor_numel(&g[0].t[outs[k]]);
      double *a = get_all(&c[0], outs[k]), *b = get_all(&c[1], outs[k]), mx = 0;
      CHECK(memcmp(a, b, sizeof(double) * (size_t)n) == 0);
      for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs(b[i]));
      CHECK(mx > 0.1); /* not zeros */
      free(a), free(b);
    }
    for (int m = 0; m < 2; m++) dfl_cpu_free(&c[m]);
  } else
    CHECK(g[1].nops == nops0);
  for (int m = 0; m < 2; m++) dfl_graph_free(&g[m]);
  return nf;
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
    same_f32(c, &g[0], i, "fused");
    ncmp++;
  }
  CHECK(ncmp > 8);
  CHECK(dfl_cpu_f32(&c[1], n[1].w1)[0] != 0);
  for (int m = 0; m < 2; m++) dfl_cpu_free(&c[m]), dfl_graph_free(&g[m]);
  case_shared_product();
  case_overwrite(R, D, V);
  case_overwrite_refused(0);
  case_overwrite_refused(1);
  case_add_train(R, D, V);
  for (int w = 0; w < ADD_NCASES; w++) {
    int want = w == ADD_LEGAL || w == ADD_LEGAL_SWAPPED || w == ADD_TWO_PRODUCTS;
    int got = add_case(w, 1);
    if (got != want) { fprintf(stderr, "FAIL fuse_add case %d: %d fused, want %d\n", w, got, want); fails++; }
  }
  case_add_grad();
  for (int w = 0; w < NADD_NCASES; w++) {
    int want = w == NADD_LEGAL || w == NADD_SWAPPED, got = norm_add_case(w);
    if (got != want) { fprintf(stderr, "FAIL fuse_add norm case %d: %d fused, want %d\n", w, got, want); fails++; }
  }
  for (int w = 0; w <= 8; w++) {
    int got = norm_rope_case(w), want = w == 0 || w == 7;
    if (got != want) { fprintf(stderr, "FAIL fuse_norm_rope case %d: %d fused, want %d\n", w, got, want); fails++; }
  }
  for (int w = 0; w <= 7; w++) {
    int got = rope_pair_case(w), want = w <= 2;
    if (got != want) { fprintf(stderr, "FAIL fuse_rope_pair case %d: %d fused, want %d\n", w, got, want); fails++; }
  }
  { /* dfl_fuse_passes: the pass list fuses the legal pair, and DFL_FUSE_NO_ROPE_PAIR (compile { rope_pair =
    ** false }) leaves it apart while the passes before it still run */
    for (int off = 0; off < 2; off++) {
      dfl_graph G;
      dfl_graph_init(&G);
      G.cur_phase = DFL_PH_TARGET;
      int x1 = dfl_tensor_2d(&G, "x1", DFL_F32, DFL_T_INPUT, 4, 64), x2 = dfl_tensor_2d(&G, "x2", DFL_F32, DFL_T_INPUT, 4, 32);
      int w = dfl_tensor_1d(&G, "w", DFL_F32, DFL_T_INPUT, 32), pos = dfl_tensor_1d(&G, "pos", DFL_I32, DFL_T_INPUT, 4);
      int z1 = dfl_rope(&G, dfl_rmsnorm(&G, x1, w, 32, 1e-6, "y1"), pos, 2, 32, 1e6, "z1");
      int z2 = dfl_rope(&G, dfl_rmsnorm(&G, x2, w, 32, 1e-6, "y2"), pos, 1, 32, 1e6, "z2");
      CHECK(dfl_fuse_passes(&G, off ? DFL_FUSE_NO_ROPE_PAIR : 0) == DFL_OK);
      int ropes = 0;
      for (int i = 0; i < G.nops; i++) ropes += G.ops[i].code == DFL_OP_ROPE;
      CHECK(G.nops == ropes && ropes == (off ? 2 : 1)); /* the norms went into the RoPEs either way */
      CHECK(off ? G.t[z1].producer != G.t[z2].producer : G.t[z1].producer == G.t[z2].producer);
      dfl_graph_free(&G);
    }
  }
  if (fails) { fprintf(stderr, "%d check(s) failed\n", fails); return 1; }
  printf("ir_fuse: ok (2 pairs fused, %d persistent tensors agree within 1e-5; overwrite rewrite exact; "
         "6 ADDs fused (4 into GEMMs, 2 into RMSNorm backward) within 1e-5, %d + %d refusals; 3 RoPE pairs exact, 5 "
         "refusals)\n", ncmp, ADD_NCASES - 3, NADD_NCASES - 2);
  return 0;
}
