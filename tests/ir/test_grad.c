/* test_grad.c: every differentiable op's autodiff gradient against central finite differences
** in f64 mode (relative error < 1e-6 against the largest gradient entry), plus a composite
** transformer-like chain that reads tensors several times. */
#include "irtest.h"

#define TOL 1e-6

typedef struct { int t[4]; int n[4]; int k; int range; } int_inputs;
static void fill_ints(dfl_cpu *c, void *ctx) {
  int_inputs *ii = ctx;
  for (int k = 0; k < ii->k; k++)
    for (int i = 0; i < ii->n[k]; i++) dfl_cpu_i32(c, ii->t[k])[i] = irand(ii->range);
}

static void check_matmul(int ta, int tb, double alpha) {
  dfl_graph g;
  dfl_graph_init(&g);
  int M = 3 + irand(3), N = 2 + irand(4), K = 2 + irand(4);
  int a = ta ? dfl_tensor_2d(&g, "A", DFL_F64, DFL_T_PARAM, K, M) : dfl_tensor_2d(&g, "A", DFL_F64, DFL_T_PARAM, M, K);
  int b = tb ? dfl_tensor_2d(&g, "B", DFL_F64, DFL_T_PARAM, N, K) : dfl_tensor_2d(&g, "B", DFL_F64, DFL_T_PARAM, K, N);
  int cc = dfl_tensor_2d(&g, "C", DFL_F64, DFL_T_ACT, M, N);
  dfl_attrs at = {0};
  at.trans_a = ta, at.trans_b = tb, at.alpha = alpha;
  int in[2] = {a, b};
  dfl_op_add(&g, DFL_OP_MATMUL, in, 2, &cc, 1, &at);
  char what[64];
  snprintf(what, sizeof what, "matmul ta=%d tb=%d alpha=%g", ta, tb, alpha);
  gradcheck(what, &g, cc, in, 2, NULL, NULL, 0, TOL);
  dfl_graph_free(&g);
}

static void check_simple(void) {
  /* ADD with the same tensor twice: the gradient must be summed */
  dfl_graph g;
  dfl_graph_init(&g);
  int x = dfl_tensor_2d(&g, "x", DFL_F64, DFL_T_PARAM, 3, 5), y = dfl_tensor_2d(&g, "y", DFL_F64, DFL_T_PARAM, 3, 5);
  int s = dfl_add(&g, x, x, "xx");
  int o = dfl_add(&g, s, y, "o");
  int p[2] = {x, y};
  gradcheck("add (x+x+y)", &g, o, p, 2, NULL, NULL, 0, TOL);
  dfl_graph_free(&g);

  dfl_graph_init(&g);
  x = dfl_tensor_2d(&g, "g", DFL_F64, DFL_T_PARAM, 4, 6), y = dfl_tensor_2d(&g, "u", DFL_F64, DFL_T_PARAM, 4, 6);
  o = dfl_swiglu(&g, x, y, "o");
  p[0] = x, p[1] = y;
  gradcheck("swiglu", &g, o, p, 2, NULL, NULL, 0, TOL);
  dfl_graph_free(&g);

  for (int grp = 0; grp < 2; grp++) {
    dfl_graph_init(&g);
    int G = grp ? 4 : 12;
    x = dfl_tensor_2d(&g, "x", DFL_F64, DFL_T_PARAM, 3, 12), y = dfl_tensor_1d(&g, "w", DFL_F64, DFL_T_PARAM, G);
    o = dfl_rmsnorm(&g, x, y, G, 1e-5, "o");
    p[0] = x, p[1] = y;
    gradcheck(grp ? "rmsnorm per-head" : "rmsnorm", &g, o, p, 2, NULL, NULL, 0, TOL);
    dfl_graph_free(&g);
  }

  dfl_graph_init(&g);
  x = dfl_tensor_2d(&g, "x", DFL_F64, DFL_T_PARAM, 5, 12);
  int pos = dfl_tensor_1d(&g, "pos", DFL_I32, DFL_T_INPUT, 5);
  o = dfl_rope(&g, x, pos, 2, 6, 10000.0, "o");
  int_inputs ii = {{pos}, {5}, 1, 100};
  gradcheck("rope", &g, o, &x, 1, fill_ints, &ii, 0, TOL);
  dfl_graph_free(&g);

  dfl_graph_init(&g);
  x = dfl_tensor_2d(&g, "table", DFL_F64, DFL_T_PARAM, 7, 3);
  int ids = dfl_tensor_1d(&g, "ids", DFL_I32, DFL_T_INPUT, 10); /* 10 ids over 7 rows: repeats */
  o = dfl_gather(&g, x, ids, DFL_F64, "o");
  int_inputs gi = {{ids}, {10}, 1, 7};
  gradcheck("gather", &g, o, &x, 1, fill_ints, &gi, 0, TOL);
  dfl_graph_free(&g);

  /* SCALE by a runtime scalar, SUM (non-seed path), COPY as reshape */
  dfl_graph_init(&g);
  x = dfl_tensor_2d(&g, "x", DFL_F64, DFL_T_PARAM, 4, 3);
  int sc = dfl_tensor_1d(&g, "s", DFL_F64, DFL_T_INPUT, 1);
  int x2 = dfl_tensor_2d(&g, "x2", DFL_F64, DFL_T_ACT, 2, 6);
  dfl_op_add(&g, DFL_OP_COPY, &x, 1, &x2, 1, NULL);
  int xs = dfl_tensor_2d(&g, "xs", DFL_F64, DFL_T_ACT, 2, 6);
  dfl_attrs a = {0};
  a.alpha = -1.5;
  int in[2] = {x2, sc};
  dfl_op_add(&g, DFL_OP_SCALE, in, 2, &xs, 1, &a);
  int sm = dfl_tensor_1d(&g, "sum", DFL_F64, DFL_T_ACT, 1);
  dfl_op_add(&g, DFL_OP_SUM, &xs, 1, &sm, 1, NULL);
  int sm2 = dfl_tensor_1d(&g, "sum2", DFL_F64, DFL_T_ACT, 1);
  a.alpha = 0.5;
  in[0] = sm, in[1] = sc;
  dfl_op_add(&g, DFL_OP_SCALE, in, 2, &sm2, 1, &a);
  gradcheck("copy/scale/sum", &g, sm2, &x, 1, NULL, NULL, 1, TOL);
  dfl_graph_free(&g);
}

/* LINEAR_CE: d num / d y through the seed path, and through SCALE (non-seed). */
typedef struct { int labels, weights, R, V, w; } ce_ctx;
static void fill_ce(dfl_cpu *c, void *p) {
  ce_ctx *x = p;
  for (int r = 0; r < x->R; r++) {
    dfl_cpu_i32(c, x->labels)[r] = irand(x->V);
    dfl_cpu_f64(c, x->weights)[r] = r % 3 == 1 ? 0.0 : 0.2 + urand(); /* some rows unsupervised */
  }
  fill_rand(c, x->w, 1.0);
}
/* y [R, H] (the PARAM checked), the frozen head, labels and weights into one LINEAR_CE, and with t >= 0
** the target's rows t [R, H] as its soft-label input; returns num and fills cx */
static int ce_graph(dfl_graph *g, int R, int H, int V, int t, const dfl_attrs *a, int *y, ce_ctx *cx) {
  *y = dfl_tensor_2d(g, "y", DFL_F64, DFL_T_PARAM, R, H);
  int w = dfl_tensor_2d(g, "w_lm", DFL_F64, DFL_T_FROZEN, V, H);
  int lab = dfl_tensor_1d(g, "labels", DFL_I32, DFL_T_INPUT, R), wt = dfl_tensor_1d(g, "weights", DFL_F64, DFL_T_INPUT, R);
  int num = dfl_tensor_1d(g, "num", DFL_F64, DFL_T_ACT, 1);
  int ce = dfl_tensor_1d(g, "ce", DFL_F64, DFL_T_ACT, R), cor = dfl_tensor_1d(g, "cor", DFL_F64, DFL_T_ACT, R);
  int hit = dfl_tensor_1d(g, "hit", DFL_F64, DFL_T_ACT, R), dy = dfl_tensor_2d(g, "dy", DFL_F64, DFL_T_ACT, R, H);
  int in[5] = {*y, w, lab, wt, t}, out[5] = {num, ce, cor, hit, dy};
  dfl_op_add(g, DFL_OP_LINEAR_CE, in, t >= 0 ? 5 : 4, out, 5, a);
  *cx = (ce_ctx){lab, wt, R, V, w};
  return num;
}
static void check_linear_ce(int seed_path) {
  dfl_graph g;
  dfl_graph_init(&g);
  dfl_attrs a = {0};
  a.vocab_chunk = 6, a.topk = 3;
  int y;
  ce_ctx cx;
  int num = ce_graph(&g, 7, 5, 23, -1, &a, &y, &cx), loss = num;
  if (!seed_path) {
    loss = dfl_tensor_1d(&g, "l", DFL_F64, DFL_T_ACT, 1);
    dfl_attrs s = {0};
    s.alpha = 0.37;
    int sin_[2] = {num, -1};
    dfl_op_add(&g, DFL_OP_SCALE, sin_, 2, &loss, 1, &s);
  }
  gradcheck(seed_path ? "linear_ce (seed)" : "linear_ce (scaled)", &g, loss, &y, 1, fill_ce, &cx, 1, TOL);
  dfl_graph_free(&g);
}

/* Soft labels: LINEAR_CE with the target's rows t (in[4]), the mix a and temperature T drawn fresh;
** d num / d y against central differences (t, W frozen). */
typedef struct { ce_ctx ce; int t; } kd_ctx;
static void fill_kd(dfl_cpu *c, void *p) {
  kd_ctx *x = p;
  fill_ce(c, &x->ce);
  fill_rand(c, x->t, 1.5);
}
static void check_linear_ce_soft(double ka) {
  dfl_graph g;
  dfl_graph_init(&g);
  const int R = 7, H = 5;
  dfl_attrs a = {0};
  a.vocab_chunk = 6, a.kd_alpha = ka, a.kd_temp = 0.5 + 3 * urand();
  kd_ctx cx;
  cx.t = dfl_tensor_2d(&g, "t", DFL_F64, DFL_T_INPUT, R, H);
  int y, num = ce_graph(&g, R, H, 23, cx.t, &a, &y, &cx.ce);
  char nm[64];
  snprintf(nm, sizeof nm, "linear_ce soft a=%.2f T=%.2f", ka, a.kd_temp);
  gradcheck(nm, &g, num, &y, 1, fill_kd, &cx, 1, TOL);
  dfl_graph_free(&g);
}

/* A tiny transformer-like chain: the normed input u is read by three projections and the residual
** stream is read twice; attention is checked separately. */
static void check_composite(void) {
  dfl_graph g;
  dfl_graph_init(&g);
  int R = 6, D = 8, I = 12, V = 11;
  int ids = dfl_tensor_1d(&g, "ids", DFL_I32, DFL_T_INPUT, R), pos = dfl_tensor_1d(&g, "pos", DFL_I32, DFL_T_INPUT, R);
  int emb = dfl_tensor_2d(&g, "embed", DFL_F64, DFL_T_PARAM, V, D);
  int wn = dfl_tensor_1d(&g, "norm", DFL_F64, DFL_T_PARAM, D), wq = dfl_tensor_2d(&g, "wq", DFL_F64, DFL_T_PARAM, D, D);
  int qn = dfl_tensor_1d(&g, "qnorm", DFL_F64, DFL_T_PARAM, 4);
  int wg = dfl_tensor_2d(&g, "wg", DFL_F64, DFL_T_PARAM, I, D), wu = dfl_tensor_2d(&g, "wu", DFL_F64, DFL_T_PARAM, I, D);
  int wd = dfl_tensor_2d(&g, "wd", DFL_F64, DFL_T_PARAM, D, I);
  int x = dfl_gather(&g, emb, ids, DFL_F64, "x");
  int u = dfl_rmsnorm(&g, x, wn, D, 1e-6, "u");
  int q = dfl_linear(&g, u, wq, DFL_F64, "q");
  q = dfl_rmsnorm(&g, q, qn, 4, 1e-6, "qn");
  q = dfl_rope(&g, q, pos, 2, 4, 1000.0, "qr");
  int h = dfl_add(&g, x, q, "h");
  int gt = dfl_linear(&g, u, wg, DFL_F64, "gate"), up = dfl_linear(&g, h, wu, DFL_F64, "up");
  int m = dfl_swiglu(&g, gt, up, "m");
  int o = dfl_add(&g, h, dfl_linear(&g, m, wd, DFL_F64, "down"), "o");
  int p[8] = {emb, wn, wq, qn, wg, wu, wd};
  int_inputs ii = {{ids, pos}, {R, R}, 2, V};
  gradcheck("composite", &g, o, p, 7, fill_ints, &ii, 0, TOL);
  dfl_graph_free(&g);
}

/* BLOCK_EXPAND's backward (BLOCK_EXPAND_BWD): each output row depends on one input row; the MASK
** row R feeds every non-head row, row R + 1 none (its gradient is the low part of R's, here 0 up to
** rounding: the f64 sums are exact enough that the check sees R's whole gradient in row R). */
static void check_block_expand(void) {
  dfl_graph g;
  dfl_graph_init(&g);
  int B = 2 + irand(3), R = 2 + irand(2), C = 1 + irand(5);
  int sm = dfl_tensor_2d(&g, "s", DFL_F64, DFL_T_PARAM, R + 2, C), o = dfl_tensor_2d(&g, "o", DFL_F64, DFL_T_ACT, R * B, C);
  dfl_attrs at = {0};
  at.B = B;
  dfl_op_add(&g, DFL_OP_BLOCK_EXPAND, &sm, 1, &o, 1, &at);
  gradcheck("block_expand", &g, o, &sm, 1, NULL, NULL, 0, TOL);
  dfl_graph_free(&g);
  /* BLOCK_DROP and BLOCK_UNDROP: each the other's transpose */
  dfl_graph_init(&g);
  int x = dfl_tensor_2d(&g, "x", DFL_F64, DFL_T_PARAM, R * B, C), y = dfl_tensor_2d(&g, "y", DFL_F64, DFL_T_PARAM, R * (B - 1), C);
  int dx = dfl_tensor_2d(&g, "drop", DFL_F64, DFL_T_ACT, R * (B - 1), C), uy = dfl_tensor_2d(&g, "undrop", DFL_F64, DFL_T_ACT, R * B, C);
  dfl_op_add(&g, DFL_OP_BLOCK_DROP, &x, 1, &dx, 1, &at);
  dfl_op_add(&g, DFL_OP_BLOCK_UNDROP, &y, 1, &uy, 1, &at);
  int z = dfl_tensor_2d(&g, "drop.undrop", DFL_F64, DFL_T_ACT, R * B, C);
  dfl_op_add(&g, DFL_OP_BLOCK_UNDROP, &dx, 1, &z, 1, &at);
  int sum = dfl_add(&g, z, uy, "sum");
  int p2[2] = {x, y};
  gradcheck("block_drop / block_undrop", &g, sum, p2, 2, NULL, NULL, 0, TOL);
  dfl_graph_free(&g);
}

/* The op table's rows in this file (tests/ir/op_table.h); the composite chain stays ir_grad's. */
static void matmul_grads(void) {
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) check_matmul(ta, tb, ta == tb ? 1.0 : 0.75);
}
OP_CASE(optab_grad_matmul, fails, rng_s, matmul_grads())
OP_CASE(optab_grad_simple, fails, rng_s, check_simple())
OP_CASE(optab_grad_linear_ce, fails, rng_s, check_linear_ce(1), check_linear_ce(0), check_linear_ce_soft(1.0),
        check_linear_ce_soft(0.2 + 0.6 * urand()))
OP_CASE(optab_grad_block_rows, fails, rng_s, check_block_expand())

DFL_TEST_MAIN {
  rng_init("ir_grad");
  matmul_grads();
  check_simple();
  check_linear_ce(1);
  check_linear_ce(0);
  check_linear_ce_soft(1.0);
  check_linear_ce_soft(0.2 + 0.6 * urand());
  check_composite();
  check_block_expand();
  if (fails) { fprintf(stderr, "%d check(s) failed\n", fails); return 1; }
  printf("ir_grad: ok\n");
  return 0;
}
