/* test_ops.c: forward of the CPU ops against direct implementations on small random shapes
** (f32 mode: relative error 1e-5; f64 mode: 1e-12), LINEAR_CE against a dense log-softmax, and
** DFLASH_BLOCKS / DFLASH_METRICS on hand-checked cases, the block-row copies on their definitions. */
#include "irtest.h"

static double tol_of(int f64) { return f64 ? 1e-12 : 2e-5; }

/* One-op graph helper: run and return the cpu (caller frees). */
static void run(dfl_cpu *c, dfl_graph *g, int f64) {
  dfl_cpu_init(c, g, NULL, f64);
}

static void test_matmul(int f64) {
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      dfl_graph g;
      dfl_graph_init(&g);
      dfl_dtype dt = f64 ? DFL_F64 : DFL_F32;
      int M = 2 + irand(5), N = 2 + irand(5), K = 2 + irand(7);
      int a = ta ? dfl_tensor_2d(&g, "A", dt, DFL_T_INPUT, K, M) : dfl_tensor_2d(&g, "A", dt, DFL_T_INPUT, M, K);
      int b = tb ? dfl_tensor_2d(&g, "B", dt, DFL_T_INPUT, N, K) : dfl_tensor_2d(&g, "B", dt, DFL_T_INPUT, K, N);
      int cc = dfl_tensor_2d(&g, "C", dt, DFL_T_ACT, M, N);
      dfl_attrs at = {0};
      at.trans_a = ta, at.trans_b = tb, at.alpha = 1.25;
      int in[2] = {a, b};
      dfl_op_add(&g, DFL_OP_MATMUL, in, 2, &cc, 1, &at);
      dfl_cpu c;
      run(&c, &g, f64);
      fill_rand(&c, a, 1), fill_rand(&c, b, 1);
      CHECK(dfl_cpu_run(&c, DFL_PH_ALL) == DFL_OK);
      double *A = get_all(&c, a), *B = get_all(&c, b), *C = get_all(&c, cc), *R = calloc((size_t)(M * N), sizeof *R);
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++)
          for (int k = 0; k < K; k++)
            R[i * N + j] += 1.25 * (ta ? A[k * M + i] : A[i * K + k]) * (tb ? B[j * K + k] : B[k * N + j]);
      near("matmul", C, R, M * N, tol_of(f64), 1e-2);
      free(A), free(B), free(C), free(R);
      dfl_cpu_free(&c);
      dfl_graph_free(&g);
    }
}

static void test_elementwise(int f64) {
  dfl_graph g;
  dfl_graph_init(&g);
  dfl_dtype dt = f64 ? DFL_F64 : DFL_F32;
  int R = 5, nh = 3, hd = 4, D = nh * hd, V = 9;
  int x = dfl_tensor_2d(&g, "x", dt, DFL_T_INPUT, R, D), y = dfl_tensor_2d(&g, "y", dt, DFL_T_INPUT, R, D);
  int w = dfl_tensor_1d(&g, "w", dt, DFL_T_INPUT, D), wh = dfl_tensor_1d(&g, "wh", dt, DFL_T_INPUT, hd);
  int pos = dfl_tensor_1d(&g, "pos", DFL_I32, DFL_T_INPUT, R), ids = dfl_tensor_1d(&g, "ids", DFL_I32, DFL_T_INPUT, R);
  int tab = dfl_tensor_2d(&g, "tab", dt, DFL_T_INPUT, V, D);
  int n1 = dfl_rmsnorm(&g, x, w, D, 1e-5, "n1"), n2 = dfl_rmsnorm(&g, x, wh, hd, 1e-5, "n2");
  int ro = dfl_rope(&g, x, pos, nh, hd, 500.0, "ro");
  int back = dfl_tensor_2d(&g, "back", dt, DFL_T_ACT, R, D);
  dfl_attrs inv = g.ops[g.nops - 1].a;
  inv.inverse = 1;
  int rin[2] = {ro, pos};
  dfl_op_add(&g, DFL_OP_ROPE, rin, 2, &back, 1, &inv);
  int sw = dfl_swiglu(&g, x, y, "sw"), ad = dfl_add(&g, x, y, "ad");
  int ga = dfl_gather(&g, tab, ids, dt, "ga");
  int sc = dfl_tensor_2d(&g, "sc", dt, DFL_T_ACT, V, D);
  int sin_[2] = {x, ids};
  dfl_op_add(&g, DFL_OP_SCATTER_ADD, sin_, 2, &sc, 1, NULL);
  int cat = dfl_tensor_2d(&g, "cat", dt, DFL_T_ACT, R, 2 * D);
  int cin[2] = {x, y};
  dfl_op_add(&g, DFL_OP_CONCAT_COLS, cin, 2, &cat, 1, NULL);
  int sm = dfl_tensor_1d(&g, "sum", dt, DFL_T_ACT, 1);
  dfl_op_add(&g, DFL_OP_SUM, &x, 1, &sm, 1, NULL);
  int io = dfl_tensor_1d(&g, "iota", DFL_I32, DFL_T_ACT, 10);
  dfl_attrs ia = {0};
  ia.n = 4;
  dfl_op_add(&g, DFL_OP_IOTA_MOD, NULL, 0, &io, 1, &ia);
  dfl_cpu c;
  run(&c, &g, f64);
  fill_rand(&c, x, 2), fill_rand(&c, y, 2), fill_rand(&c, w, 1), fill_rand(&c, wh, 1), fill_rand(&c, tab, 1);
  for (int r = 0; r < R; r++) dfl_cpu_i32(&c, pos)[r] = irand(4000), dfl_cpu_i32(&c, ids)[r] = irand(V);
  dfl_cpu_i32(&c, ids)[R - 1] = dfl_cpu_i32(&c, ids)[0]; /* a repeated id for scatter_add */
  CHECK(dfl_cpu_run(&c, DFL_PH_ALL) == DFL_OK);
  double *X = get_all(&c, x), *Y = get_all(&c, y), *W = get_all(&c, w), *WH = get_all(&c, wh), *T = get_all(&c, tab);
  double *ref = calloc((size_t)(V * D * 2), sizeof *ref);
  int *P = dfl_cpu_i32(&c, pos), *I = dfl_cpu_i32(&c, ids);
  double tol = tol_of(f64);
#define CMP(name, t, n) do { double *got_ = get_all(&c, t); near(name, got_, ref, n, tol, 1e-2); free(got_); } while (0)
  for (int r = 0; r < R; r++) {
    double ss = 0;
    for (int i = 0; i < D; i++) ss += X[r * D + i] * X[r * D + i];
    for (int i = 0; i < D; i++) ref[r * D + i] = X[r * D + i] / sqrt(ss / D + 1e-5) * W[i];
  }
  CMP("rmsnorm", n1, R * D);
  for (int r = 0; r < R; r++)
    for (int h = 0; h < nh; h++) {
      double ss = 0;
      for (int i = 0; i < hd; i++) ss += pow(X[r * D + h * hd + i], 2);
      for (int i = 0; i < hd; i++) ref[r * D + h * hd + i] = X[r * D + h * hd + i] / sqrt(ss / hd + 1e-5) * WH[i];
    }
  CMP("rmsnorm per-head", n2, R * D);
  for (int r = 0; r < R; r++)
    for (int h = 0; h < nh; h++)
      for (int i = 0; i < hd / 2; i++) {
        double ang = P[r] * pow(500.0, -2.0 * i / hd), *xr = X + r * D + h * hd;
        ref[r * D + h * hd + i] = xr[i] * cos(ang) - xr[i + hd / 2] * sin(ang);
        ref[r * D + h * hd + i + hd / 2] = xr[i + hd / 2] * cos(ang) + xr[i] * sin(ang);
      }
  CMP("rope", ro, R * D);
  memcpy(ref, X, sizeof(double) * R * D);
  CMP("rope inverse", back, R * D);
  for (int i = 0; i < R * D; i++) ref[i] = X[i] / (1 + exp(-X[i])) * Y[i];
  CMP("swiglu", sw, R * D);
  for (int i = 0; i < R * D; i++) ref[i] = X[i] + Y[i];
  CMP("add", ad, R * D);
  for (int r = 0; r < R; r++) memcpy(ref + r * D, T + I[r] * D, sizeof(double) * D);
  CMP("gather", ga, R * D);
  memset(ref, 0, sizeof(double) * V * D);
  for (int r = 0; r < R; r++)
    for (int i = 0; i < D; i++) ref[I[r] * D + i] += X[r * D + i];
  CMP("scatter_add", sc, V * D);
  for (int r = 0; r < R; r++) memcpy(ref + r * 2 * D, X + r * D, sizeof(double) * D), memcpy(ref + r * 2 * D + D, Y + r * D, sizeof(double) * D);
  CMP("concat_cols", cat, R * 2 * D);
  ref[0] = 0;
  for (int i = 0; i < R * D; i++) ref[0] += X[i];
  CMP("sum", sm, 1);
  for (int i = 0; i < 10; i++) CHECK(dfl_cpu_i32(&c, io)[i] == i % 4);
  free(X), free(Y), free(W), free(WH), free(T), free(ref);
  dfl_cpu_free(&c);
  dfl_graph_free(&g);
}

/* LINEAR_CE vs dense logits = y W^T, log-softmax, in both modes; vocabulary not a multiple of
** the chunk; a forced tie for the argmax (lowest index wins). */
static void test_linear_ce(int f64) {
  dfl_graph g;
  dfl_graph_init(&g);
  dfl_dtype dt = f64 ? DFL_F64 : DFL_F32;
  int R = 260 + irand(40), H = 6, V = 50 + irand(20), K = 3; /* R > one 256-row block */
  int y = dfl_tensor_2d(&g, "y", dt, DFL_T_INPUT, R, H), w = dfl_tensor_2d(&g, "w", dt, DFL_T_INPUT, V, H);
  int lab = dfl_tensor_1d(&g, "lab", DFL_I32, DFL_T_INPUT, R), wt = dfl_tensor_1d(&g, "wt", DFL_F32, DFL_T_INPUT, R);
  int out[5] = {dfl_tensor_1d(&g, "num", DFL_F32, DFL_T_ACT, 1), dfl_tensor_1d(&g, "ce", DFL_F32, DFL_T_ACT, R),
                dfl_tensor_1d(&g, "cor", DFL_F32, DFL_T_ACT, R), dfl_tensor_1d(&g, "hit", DFL_F32, DFL_T_ACT, R),
                dfl_tensor_2d(&g, "dy", dt, DFL_T_ACT, R, H)};
  int in[4] = {y, w, lab, wt};
  dfl_attrs a = {0};
  a.vocab_chunk = 16, a.topk = K;
  dfl_op_add(&g, DFL_OP_LINEAR_CE, in, 4, out, 5, &a);
  dfl_cpu c;
  run(&c, &g, f64);
  fill_rand(&c, y, 2), fill_rand(&c, w, 1);
  /* y row 0 = W row 7 = W row 40, longer than any other row: a tie between ids 7 and 40 */
  double *Wv = get_all(&c, w), nrm = 0;
  for (int i = 0; i < H; i++) nrm += Wv[7 * H + i] * Wv[7 * H + i];
  for (int i = 0; i < H; i++) Wv[7 * H + i] *= 5 / sqrt(nrm); /* |W7| = 5 > 5 |W_v| / 5 for every other row */
  memcpy(Wv + 40 * H, Wv + 7 * H, sizeof(double) * H);
  dfl_cpu_set_d(&c, w, Wv, (int64_t)V * H);
  double *Yv = get_all(&c, y);
  for (int i = 0; i < H; i++) Yv[i] = Wv[7 * H + i];
  dfl_cpu_set_d(&c, y, Yv, (int64_t)R * H);
  int *L = dfl_cpu_i32(&c, lab);
  double *wv = malloc(sizeof(double) * R);
  for (int r = 0; r < R; r++) {
    L[r] = irand(V);
    wv[r] = irand(4) == 0 ? 0 : urand() + 0.1;
  }
  L[0] = 7, wv[0] = 1; /* the tie: argmax must be 7 (lowest index) */
  dfl_cpu_set_d(&c, wt, wv, R);
  CHECK(dfl_cpu_run(&c, DFL_PH_ALL) == DFL_OK);
  double *rce = calloc((size_t)R, sizeof(double)), *rcor = calloc((size_t)R, sizeof(double)), *rhit = calloc((size_t)R, sizeof(double));
  double *rdy = calloc((size_t)(R * H), sizeof(double)), *lg = malloc(sizeof(double) * V), rnum = 0;
  for (int r = 0; r < R; r++) {
    if (wv[r] <= 0) continue;
    double mx = -INFINITY;
    int am = 0;
    for (int v = 0; v < V; v++) {
      lg[v] = 0;
      for (int i = 0; i < H; i++) lg[v] += Yv[r * H + i] * Wv[v * H + i];
      if (lg[v] > mx) mx = lg[v], am = v;
    }
    double s = 0;
    for (int v = 0; v < V; v++) s += exp(lg[v] - mx);
    double lse = mx + log(s);
    rce[r] = lse - lg[L[r]];
    rnum += wv[r] * rce[r];
    rcor[r] = am == L[r];
    int gt = 0;
    for (int v = 0; v < V; v++) gt += lg[v] > lg[L[r]] && v != L[r];
    rhit[r] = gt < K;
    for (int v = 0; v < V; v++) {
      double d = wv[r] * (exp(lg[v] - lse) - (v == L[r]));
      for (int i = 0; i < H; i++) rdy[r * H + i] += d * Wv[v * H + i];
    }
  }
  double tol = f64 ? 1e-11 : 1e-4;
  double *got = get_all(&c, out[0]);
  near("linear_ce num", got, &rnum, 1, tol, 1e-2);
  free(got);
  got = get_all(&c, out[1]), near("linear_ce ce", got, rce, R, tol, 1e-2), free(got);
  /* f32: dy sums V float products: absolute error ~1e-6, so the floor is larger */
  got = get_all(&c, out[4]), near("linear_ce dy", got, rdy, R * H, tol, f64 ? 1e-2 : 0.1), free(got);
  /* correct / hit are exact 0/1 flags; in f32 a near-tie may flip, so f32 allows a few differences */
  double *gc = get_all(&c, out[2]), *gh = get_all(&c, out[3]);
  int dc = 0, dh = 0;
  for (int r = 0; r < R; r++) dc += gc[r] != rcor[r], dh += gh[r] != rhit[r];
  CHECK(gc[0] == 1 && rcor[0] == 1);
  CHECK(f64 ? dc == 0 && dh == 0 : dc <= 1 && dh <= 1);
  free(gc), free(gh);
  free(rce), free(rcor), free(rhit), free(rdy), free(lg), free(wv), free(Wv), free(Yv);
  dfl_cpu_free(&c);
  dfl_graph_free(&g);
}

/* DFLASH_BLOCKS: S=6, B=3, N=2, gamma=2, mask_id 99. Sample 0 anchors {1, 4} (4: partial tail),
** sample 1 anchors {2, 0} with block 1 invalid. */
static void test_dflash_blocks(void) {
  dfl_graph g;
  dfl_graph_init(&g);
  int S = 6, B = 3, N = 2;
  int ids = dfl_tensor_1d(&g, "ids", DFL_I32, DFL_T_INPUT, 2 * S), lm = dfl_tensor_1d(&g, "lm", DFL_I32, DFL_T_INPUT, 2 * S);
  int an = dfl_tensor_2d(&g, "anchors", DFL_I32, DFL_T_INPUT, 2, N), kp = dfl_tensor_2d(&g, "keep", DFL_I32, DFL_T_INPUT, 2, N);
  int Q = 2 * N * B;
  int out[5] = {dfl_tensor_1d(&g, "noise", DFL_I32, DFL_T_ACT, Q), dfl_tensor_1d(&g, "posq", DFL_I32, DFL_T_ACT, Q),
                dfl_tensor_1d(&g, "labels", DFL_I32, DFL_T_ACT, Q), dfl_tensor_1d(&g, "weights", DFL_F32, DFL_T_ACT, Q),
                dfl_tensor_1d(&g, "prev", DFL_I32, DFL_T_ACT, Q)};
  int in[4] = {ids, lm, an, kp};
  dfl_attrs a = {0};
  a.batch = 2, a.S = S, a.N = N, a.B = B, a.mask_id = 99, a.gamma = 2;
  CHECK(dfl_op_add(&g, DFL_OP_DFLASH_BLOCKS, in, 4, out, 5, &a) >= 0);
  dfl_cpu c;
  dfl_cpu_init(&c, &g, NULL, 0);
  int vids[12] = {10, 11, 12, 13, 14, 15, 20, 21, 22, 23, 24, 25};
  int vlm[12] = {1, 1, 1, 0, 1, 1, 0, 0, 1, 1, 1, 1};
  int van[4] = {1, 4, 2, 0}, vkp[4] = {1, 1, 1, 0};
  set_ints(&c, ids, vids), set_ints(&c, lm, vlm), set_ints(&c, an, van), set_ints(&c, kp, vkp);
  CHECK(dfl_cpu_run(&c, DFL_PH_ALL) == DFL_OK);
  static const int noise[12] = {11, 99, 99, 14, 99, 99, 22, 99, 99, 99, 99, 99};
  static const int posq[12] = {1, 2, 3, 4, 5, 6, 2, 3, 4, 0, 1, 2};
  static const int labels[12] = {11, 12, 13, 14, 15, 15, 22, 23, 24, 20, 21, 22};
  /* the soft labels' target rows: b S + p - 1 for the label at p = min(anchor + j, S - 1), b S at p = 0 */
  static const int prev[12] = {0, 1, 2, 3, 4, 4, 7, 8, 9, 6, 6, 7};
  double e = exp(-0.5);
  /* block (0,0): j=1 pos 2 lm 1 -> 1; j=2 pos 3 lm 0 -> 0 (no cumprod, but this one is masked)
  ** block (0,1): j=1 pos 5 -> 1; j=2 pos 6 >= S -> 0 (partial tail)
  ** block (1,0): j=1 pos 3 -> 1; j=2 pos 4 -> e;  block (1,1) invalid -> 0 */
  double wref[12] = {0, 1, 0, 0, 1, 0, 0, 1, e, 0, 0, 0};
  int ok = 1;
  for (int r = 0; r < 12; r++) {
    ok &= dfl_cpu_i32(&c, out[0])[r] == noise[r] && dfl_cpu_i32(&c, out[1])[r] == posq[r] && dfl_cpu_i32(&c, out[2])[r] == labels[r];
    ok &= fabs(dfl_cpu_f32(&c, out[3])[r] - wref[r]) < 1e-7 && dfl_cpu_i32(&c, out[4])[r] == prev[r];
    if (!ok) { fprintf(stderr, "dflash_blocks: row %d differs\n", r); break; }
  }
  CHECK(ok);
  dfl_cpu_free(&c);
  dfl_graph_free(&g);
}

/* DFLASH_METRICS: batch 1, N=3, B=4. Block 0: supervised j=1..3, correct 1,1,0 -> prefix 2.
** Block 1: j=1 unsupervised (prefix stops: 0), j=2 correct. Block 2 invalid. */
static void test_dflash_metrics(void) {
  dfl_graph g;
  dfl_graph_init(&g);
  int N = 3, B = 4, Q = N * B;
  int cor = dfl_tensor_1d(&g, "cor", DFL_F32, DFL_T_INPUT, Q), wt = dfl_tensor_1d(&g, "wt", DFL_F32, DFL_T_INPUT, Q);
  int hit = dfl_tensor_1d(&g, "hit", DFL_F32, DFL_T_INPUT, Q), kp = dfl_tensor_1d(&g, "keep", DFL_I32, DFL_T_INPUT, N);
  int m = dfl_tensor_1d(&g, "m", DFL_F32, DFL_T_ACT, DFL_METRIC_COUNT + 2 * B);
  int in[4] = {cor, wt, hit, kp};
  dfl_attrs a = {0};
  a.batch = 1, a.N = N, a.B = B;
  dfl_op_add(&g, DFL_OP_DFLASH_METRICS, in, 4, &m, 1, &a);
  dfl_cpu c;
  dfl_cpu_init(&c, &g, NULL, 0);
  float vc[12] = {1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 0};
  float vw[12] = {0, 1, .5f, .3f, 0, 0, .8f, .2f, 0, 0, 0, 0};
  float vh[12] = {1, 1, 1, 1, 0, 1, 1, 0, 0, 0, 0, 0};
  int vk[3] = {1, 1, 0};
  dfl_cpu_set_f(&c, cor, vc, 12), dfl_cpu_set_f(&c, wt, vw, 12), dfl_cpu_set_f(&c, hit, vh, 12);
  set_ints(&c, kp, vk);
  CHECK(dfl_cpu_run(&c, DFL_PH_ALL) == DFL_OK);
  float *r = dfl_cpu_f32(&c, m);
  /* supervised: (0,1)c (0,2)c (0,3)x (1,2)c (1,3)c -> acc 4/5; topk hits 1+1+1+1+0 = 4 */
  CHECK(r[DFL_METRIC_ACC_NUM] == 4 && r[DFL_METRIC_ACC_DEN] == 5 && r[DFL_METRIC_TOPK_NUM] == 4);
  CHECK(r[DFL_METRIC_TAU_SUM] == 3 + 1 && r[DFL_METRIC_TAU_BLOCKS] == 2);
  float wc[4] = {0, 1, 2, 1}, wn[4] = {0, 1, 2, 2};
  for (int j = 0; j < B; j++) CHECK(r[DFL_METRIC_COUNT + j] == wc[j] && r[DFL_METRIC_COUNT + B + j] == wn[j]);
  dfl_cpu_free(&c);
  dfl_graph_free(&g);
}

/* BLOCK_ROWS, BLOCK_EXPAND and BLOCK_EXPAND_BWD on random rows against their definitions (graph.h),
** with several samples' blocks (Q = 3 blocks x B); the backward's high and low parts must add up to
** the MASK rows' sums. */
static void test_block_rows(int f64) {
  dfl_graph g;
  dfl_graph_init(&g);
  dfl_dtype dt = f64 ? DFL_F64 : DFL_F32;
  int B = 2 + irand(4), R = 3, Q = R * B, C = 1 + irand(9);
  int x = dfl_tensor_2d(&g, "x", dt, DFL_T_INPUT, Q, C), s = dfl_tensor_2d(&g, "s", dt, DFL_T_INPUT, R + 2, C);
  int rows = dfl_tensor_2d(&g, "rows", dt, DFL_T_ACT, R + 2, C), ex = dfl_tensor_2d(&g, "ex", dt, DFL_T_ACT, Q, C);
  int bw = dfl_tensor_2d(&g, "bw", dt, DFL_T_ACT, R + 2, C);
  dfl_attrs at = {0};
  at.B = B;
  dfl_op_add(&g, DFL_OP_BLOCK_ROWS, &x, 1, &rows, 1, &at);
  dfl_op_add(&g, DFL_OP_BLOCK_EXPAND, &s, 1, &ex, 1, &at);
  dfl_op_add(&g, DFL_OP_BLOCK_EXPAND_BWD, &x, 1, &bw, 1, &at);
  dfl_cpu c;
  run(&c, &g, f64);
  fill_rand(&c, x, 1), fill_rand(&c, s, 1);
  CHECK(dfl_cpu_run(&c, DFL_PH_ALL) == DFL_OK);
  double *X = get_all(&c, x), *S = get_all(&c, s), *RO = get_all(&c, rows), *EX = get_all(&c, ex), *BW = get_all(&c, bw);
  double *want = calloc((size_t)(Q * C), sizeof *want);
  for (int r = 0; r < R + 2; r++)
    for (int j = 0; j < C; j++) want[r * C + j] = X[(r < R ? r * B : 1) * C + j];
  near("block_rows", RO, want, (R + 2) * C, 0, 1);
  for (int q = 0; q < Q; q++)
    for (int j = 0; j < C; j++) want[q * C + j] = S[(q % B ? R : q / B) * C + j];
  near("block_expand", EX, want, Q * C, 0, 1);
  double *got = calloc((size_t)((R + 1) * C), sizeof *got);
  for (int r = 0; r < R; r++)
    for (int j = 0; j < C; j++) want[r * C + j] = X[r * B * C + j], got[r * C + j] = BW[r * C + j];
  for (int j = 0; j < C; j++) {
    want[R * C + j] = 0;
    for (int q = 0; q < Q; q++) want[R * C + j] += q % B ? X[q * C + j] : 0;
    got[R * C + j] = BW[R * C + j] + BW[(R + 1) * C + j];
  }
  near("block_expand_bwd", got, want, (R + 1) * C, f64 ? 1e-15 : 1e-12, 1e-3);
  /* BLOCK_DROP keeps the rows q % B != 0 in order (also of an i32 vector); BLOCK_UNDROP puts them back
  ** with zero head rows */
  int dr = dfl_tensor_2d(&g, "drop", dt, DFL_T_ACT, Q - R, C), ud = dfl_tensor_2d(&g, "undrop", dt, DFL_T_ACT, Q, C);
  int iv = dfl_tensor_1d(&g, "iv", DFL_I32, DFL_T_INPUT, Q), id = dfl_tensor_1d(&g, "iv.drop", DFL_I32, DFL_T_ACT, Q - R);
  dfl_cpu_free(&c);
  dfl_op_add(&g, DFL_OP_BLOCK_DROP, &x, 1, &dr, 1, &at);
  dfl_op_add(&g, DFL_OP_BLOCK_UNDROP, &dr, 1, &ud, 1, &at);
  dfl_op_add(&g, DFL_OP_BLOCK_DROP, &iv, 1, &id, 1, &at);
  run(&c, &g, f64);
  fill_rand(&c, x, 1), fill_rand(&c, s, 1);
  for (int q = 0; q < Q; q++) dfl_cpu_i32(&c, iv)[q] = 1000 + q;
  CHECK(dfl_cpu_run(&c, DFL_PH_ALL) == DFL_OK);
  free(X);
  X = get_all(&c, x);
  double *DR = get_all(&c, dr), *UD = get_all(&c, ud);
  int k = 0;
  for (int q = 0; q < Q; q++) {
    for (int j = 0; j < C; j++) {
      CHECK(UD[q * C + j] == (q % B ? X[q * C + j] : 0.0));
      if (q % B) CHECK(DR[k * C + j] == X[q * C + j]);
    }
    if (q % B) CHECK(dfl_cpu_i32(&c, id)[k++] == 1000 + q);
  }
  CHECK(k == Q - R);
  free(DR), free(UD);
  free(X), free(S), free(RO), free(EX), free(BW), free(want), free(got);
  dfl_cpu_free(&c);
  dfl_graph_free(&g);
}

/* LINEAR_CE with soft labels (in[4]: the target's rows t): num = sum_r w_r ((1 - a) CE_r + a T^2
** KL(p || q)), p = softmax(t W^T / T), q = softmax(y W^T / T), and dy its gradient, against the
** definition in f64 over the whole vocabulary (the kernel streams chunks with online rescaling).
** ce stays the hard CE. a and T drawn fresh: a = 1 (soft alone) and a mix, T from 0.5 to 4. f64: the
** same sums in another order (1e-11); f32: expf of logits up to ~10, summed over V (1e-4). */
static void test_linear_ce_soft(int f64, int alone) {
  dfl_graph g;
  dfl_graph_init(&g);
  dfl_dtype dt = f64 ? DFL_F64 : DFL_F32;
  int R = 260 + irand(40), H = 6, V = 50 + irand(20);
  int y = dfl_tensor_2d(&g, "y", dt, DFL_T_INPUT, R, H), w = dfl_tensor_2d(&g, "w", dt, DFL_T_INPUT, V, H);
  int t = dfl_tensor_2d(&g, "t", dt, DFL_T_INPUT, R, H);
  int lab = dfl_tensor_1d(&g, "lab", DFL_I32, DFL_T_INPUT, R), wt = dfl_tensor_1d(&g, "wt", DFL_F32, DFL_T_INPUT, R);
  int out[5] = {dfl_tensor_1d(&g, "num", DFL_F32, DFL_T_ACT, 1), dfl_tensor_1d(&g, "ce", DFL_F32, DFL_T_ACT, R),
                dfl_tensor_1d(&g, "cor", DFL_F32, DFL_T_ACT, R), dfl_tensor_1d(&g, "hit", DFL_F32, DFL_T_ACT, R),
                dfl_tensor_2d(&g, "dy", dt, DFL_T_ACT, R, H)};
  int in[5] = {y, w, lab, wt, t};
  dfl_attrs a = {0};
  a.vocab_chunk = 16;
  a.kd_alpha = alone ? 1.0 : 0.2 + 0.6 * urand();
  a.kd_temp = 0.5 + 3.5 * urand();
  CHECK(dfl_op_add(&g, DFL_OP_LINEAR_CE, in, 5, out, 5, &a) >= 0);
  dfl_cpu c;
  run(&c, &g, f64);
  fill_rand(&c, y, 2), fill_rand(&c, w, 1), fill_rand(&c, t, 2);
  double *Wv = get_all(&c, w), *Yv = get_all(&c, y), *Tv = get_all(&c, t);
  int *L = dfl_cpu_i32(&c, lab);
  double *wv = malloc(sizeof(double) * R);
  for (int r = 0; r < R; r++) L[r] = irand(V), wv[r] = irand(4) == 0 ? 0 : urand() + 0.1;
  dfl_cpu_set_d(&c, wt, wv, R);
  CHECK(dfl_cpu_run(&c, DFL_PH_ALL) == DFL_OK);
  const double ka = a.kd_alpha, T = a.kd_temp;
  double *rce = calloc((size_t)R, sizeof(double)), *rdy = calloc((size_t)(R * H), sizeof(double));
  double *zy = malloc(sizeof(double) * V), *zt = malloc(sizeof(double) * V), rnum = 0;
  for (int r = 0; r < R; r++) {
    if (wv[r] <= 0) continue;
    for (int v = 0; v < V; v++) {
      zy[v] = zt[v] = 0;
      for (int i = 0; i < H; i++) zy[v] += Yv[r * H + i] * Wv[v * H + i], zt[v] += Tv[r * H + i] * Wv[v * H + i];
    }
    double s1 = 0, sq = 0, sp = 0;
    for (int v = 0; v < V; v++) s1 += exp(zy[v]), sq += exp(zy[v] / T), sp += exp(zt[v] / T);
    double kl = 0;
    for (int v = 0; v < V; v++) {
      double p = exp(zt[v] / T) / sp, q = exp(zy[v] / T) / sq;
      kl += p * (log(p) - log(q));
    }
    rce[r] = log(s1) - zy[L[r]];
    rnum += wv[r] * ((1 - ka) * rce[r] + ka * T * T * kl);
    for (int v = 0; v < V; v++) {
      double p = exp(zt[v] / T) / sp, q = exp(zy[v] / T) / sq;
      double d = wv[r] * ((1 - ka) * (exp(zy[v]) / s1 - (v == L[r])) + ka * T * (q - p));
      for (int i = 0; i < H; i++) rdy[r * H + i] += d * Wv[v * H + i];
    }
  }
  double tol = f64 ? 1e-11 : 1e-4;
  double *got = get_all(&c, out[0]);
  near("linear_ce soft num", got, &rnum, 1, tol, 1e-2), free(got);
  got = get_all(&c, out[1]), near("linear_ce soft ce (hard)", got, rce, R, tol, 1e-2), free(got);
  got = get_all(&c, out[4]), near("linear_ce soft dy", got, rdy, R * H, tol, f64 ? 1e-2 : 0.1), free(got);
  free(rce), free(rdy), free(zy), free(zt), free(wv), free(Wv), free(Yv), free(Tv);
  dfl_cpu_free(&c);
  dfl_graph_free(&g);
}

/* The op table's rows in this file (tests/ir/op_table.h). */
OP_CASE(optab_ops_matmul, fails, rng_s, test_matmul(0), test_matmul(1))
OP_CASE(optab_ops_elementwise, fails, rng_s, test_elementwise(0), test_elementwise(1))
OP_CASE(optab_ops_linear_ce, fails, rng_s, test_linear_ce(0), test_linear_ce(1), test_linear_ce_soft(1, 0),
        test_linear_ce_soft(0, 1))
OP_CASE(optab_ops_block_rows, fails, rng_s, test_block_rows(0), test_block_rows(1))
OP_CASE(optab_ops_dflash_blocks, fails, rng_s, test_dflash_blocks())
OP_CASE(optab_ops_dflash_metrics, fails, rng_s, test_dflash_metrics())

DFL_TEST_MAIN {
  rng_init("ir_ops");
  for (int f64 = 0; f64 < 2; f64++) {
    test_matmul(f64);
    test_elementwise(f64);
    test_linear_ce(f64);
    test_linear_ce_soft(f64, 0);
    test_linear_ce_soft(f64, 1);
    test_block_rows(f64);
  }
  test_dflash_blocks();
  test_dflash_metrics();
  if (fails) { fprintf(stderr, "%d check(s) failed\n", fails); return 1; }
  printf("ir_ops: ok\n");
  return 0;
}
