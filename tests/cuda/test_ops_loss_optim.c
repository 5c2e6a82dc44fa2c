/*
** test_ops_loss_optim.c (cuda_ops, GPU): the fused linear cross-entropy (chunked, staged rows) and
** the optimizer (sum of squares, clip preparation, AdamW; one tensor and multi-tensor) against the
** CPU oracle.
*/
#include "ops.h"

/* mode 0: rows per chunk from vocab_chunk (2 x 35); 1: 16-row chunks (several, and a short last one); 2: V % 8 != 0 (the
** kernel's scalar path) in 32-row chunks. */
/* mode 3, 4: anchor rows every 4 (a.B, weight 0 there as DFLASH_BLOCKS makes them) left out of the
** GEMMs: staged rows, all in one chunk, then in 16-row chunks with a short last one (54 = 3 x 16 + 6). */
void case_linear_ce(int mode) {
  static const char *rows[] = {NULL, "16", "32", NULL, "16"};
  if (rows[mode]) setenv("DFL_LCE_ROWS", rows[mode], 1); else unsetenv("DFL_LCE_ROWS");
  dfl_graph g; dfl_graph_init(&g);
  int R = mode >= 3 ? 72 : 70, H = 64, V = mode == 2 ? 998 : 1000;
  int y = t2(&g, "y", ACT, DFL_T_INPUT, R, H), W = t2(&g, "w_lm", ACT, DFL_T_FROZEN, V, H);
  int lab = t1(&g, "labels", DFL_I32, DFL_T_INPUT, R), w = t1(&g, "weights", DFL_F32, DFL_T_INPUT, R);
  int num = t1(&g, "num", DFL_F32, DFL_T_ACT, 1), ce = t1(&g, "ce", DFL_F32, DFL_T_ACT, R);
  int cor = t1(&g, "correct", DFL_F32, DFL_T_ACT, R), hit = t1(&g, "topk_hit", DFL_F32, DFL_T_ACT, R);
  int dy = t2(&g, "dy", ACT, DFL_T_ACT, R, H);
  dfl_attrs a = {0}; a.vocab_chunk = mode == 3 ? 1000 : 256; a.topk = 8;
  if (mode >= 3) a.B = 4;
  op(&g, DFL_OP_LINEAR_CE, 4, (int[]){y, W, lab, w}, 5, (int[]){num, ce, cor, hit, dy}, &a);
  int32_t vl[72], vw[72];
  for (int i = 0; i < R; i++) vl[i] = irand(V), vw[i] = irand(4) && !(mode >= 3 && i % 4 == 0) ? 1 + irand(3) : 0;
  ifill f[] = {{lab, vl}, {w, vw}};
  int bin[64] = {0};
  bin[cor] = bin[hit] = 1;
  double sc[64] = {0};
  sc[y] = 2;
  static const char *nm[] = {"linear_ce rows from vocab_chunk", "linear_ce 16-row chunks", "linear_ce V 998, 32-row chunks",
                             "linear_ce anchor rows left out, one chunk", "linear_ce anchor rows left out, 16-row chunks"};
  run_case(nm[mode], &g, f, 2, sc, bin);
  dfl_graph_free(&g);
  unsetenv("DFL_LCE_ROWS");
}

/* Soft labels: LINEAR_CE with the target's rows t (as y) and a.kd_alpha, a.kd_temp: the loss head's
** second GEMM per chunk and dfl_lce_row_kd against the CPU's streamed evaluation. Modes: 0 soft (a 1,
** T 2), rows from vocab_chunk; 1 mix(0.5), T 1, 16-row chunks; 2 mix(0.3), T 1.5, V 998 (the element
** path), anchor rows left out (the staging rows carry y, then t, then dy), 16-row chunks. */
void case_linear_ce_kd(int mode) {
  if (mode) setenv("DFL_LCE_ROWS", "16", 1); else unsetenv("DFL_LCE_ROWS");
  dfl_graph g; dfl_graph_init(&g);
  int R = mode == 2 ? 72 : 70, H = 64, V = mode == 2 ? 998 : 1000;
  int y = t2(&g, "y", ACT, DFL_T_INPUT, R, H), W = t2(&g, "w_lm", ACT, DFL_T_FROZEN, V, H);
  int lab = t1(&g, "labels", DFL_I32, DFL_T_INPUT, R), w = t1(&g, "weights", DFL_F32, DFL_T_INPUT, R);
  int tg = t2(&g, "target_y", ACT, DFL_T_INPUT, R, H);
  int num = t1(&g, "num", DFL_F32, DFL_T_ACT, 1), ce = t1(&g, "ce", DFL_F32, DFL_T_ACT, R);
  int cor = t1(&g, "correct", DFL_F32, DFL_T_ACT, R), hit = t1(&g, "topk_hit", DFL_F32, DFL_T_ACT, R);
  int dy = t2(&g, "dy", ACT, DFL_T_ACT, R, H);
  dfl_attrs a = {0}; a.vocab_chunk = 256; a.topk = 8;
  a.kd_alpha = mode == 0 ? 1.0 : mode == 1 ? 0.5 : 0.3;
  a.kd_temp = mode == 0 ? 2.0 : mode == 1 ? 1.0 : 1.5;
  if (mode == 2) a.B = 4;
  op(&g, DFL_OP_LINEAR_CE, 5, (int[]){y, W, lab, w, tg}, 5, (int[]){num, ce, cor, hit, dy}, &a);
  int32_t vl[72], vw[72];
  for (int i = 0; i < R; i++) vl[i] = irand(V), vw[i] = irand(4) && !(mode == 2 && i % 4 == 0) ? 1 + irand(3) : 0;
  ifill f[] = {{lab, vl}, {w, vw}};
  int bin[64] = {0};
  bin[cor] = bin[hit] = 1;
  double sc[64] = {0};
  sc[y] = 2, sc[tg] = 2;
  static const char *nm[] = {"linear_ce soft labels (T 2)", "linear_ce mix(0.5), 16-row chunks",
                             "linear_ce mix(0.3) T 1.5, V 998, anchor rows left out"};
  run_case(nm[mode], &g, f, 2, sc, bin);
  dfl_graph_free(&g);
  unsetenv("DFL_LCE_ROWS");
}

void case_optimizer(void) {
  dfl_graph g; dfl_graph_init(&g);
  int n = 300;
  int p = t1(&g, "param", ACT, DFL_T_PARAM, n), ms = t1(&g, "master", DFL_F32, DFL_T_STATE, n);
  int m = t1(&g, "m", DFL_F32, DFL_T_STATE, n), v = t1(&g, "v", DFL_F32, DFL_T_STATE, n);
  int gr = t1(&g, "grad", DFL_F32, DFL_T_GRAD, n), st = t1(&g, "state", DFL_F32, DFL_T_STATE, DFL_OPT_COUNT);
  int ssq = t1(&g, "sumsq", DFL_F32, DFL_T_STATE, 1), den = t1(&g, "den", DFL_F32, DFL_T_STATE, 1);
  dfl_attrs a = {0};
  a.lr = 6e-4; a.warmup = 3; a.total = 20; a.schedule = DFL_SCHED_COSINE; a.clip = 1.0; a.beta1 = 0.9; a.beta2 = 0.999;
  a.eps = 1e-8; a.wd = 0.01;
  a.alpha = 1;
  op(&g, DFL_OP_SUMSQ_ACC, 2, (int[]){ssq, gr}, 1, &ssq, &a);
  op(&g, DFL_OP_OPT_PREP, 3, (int[]){ssq, den, st}, 1, &st, &a);
  op(&g, DFL_OP_ADAMW, 6, (int[]){p, ms, m, v, gr, st}, 5, (int[]){p, ms, m, v, gr}, &a);
  int32_t sv[DFL_OPT_COUNT] = {5, 0, 0, 0, 0, 0}, dv[1] = {37}, sq[1] = {0};
  ifill f[] = {{st, sv}, {den, dv}, {ssq, sq}};
  double sc[64] = {0};
  sc[gr] = 30; sc[v] = -1e-3; /* v >= 0: a signed v cancels to ~0 in v' = b2 v + (1-b2) g^2, where
                               ** sqrt(v') and the update hang on the last bits (flaky at 2e-4) */
  run_case("sumsq+opt_prep+adamw", &g, f, 3, sc, NULL);
  dfl_graph_free(&g);
}

/* Three tensors of ragged sizes in one multi-tensor launch each (consecutive SUMSQ_ACC / ADAMW ops
** with one state): the kernels' table search crosses tensors, and each tensor has a ragged tail.
** keep: AdamW leaves the gradients as they are (a.keep_grad) instead of zeroing them; 3: larger tensors (several passes of the sum of
** squares' grid) with gradients in the params' dtype (train.grads = bf16), kept; 4: as 3, the
** gradients created one after the other with sizes of 256-byte multiples (but the last, whose odd
** size leaves a tail of 1), so that unplanned they lie end to end as the plan places a model's, and
** the sum of squares takes its flat kernel (dfl_sumsq_flat). */
void case_optimizer_mt(int keep) {
  dfl_graph g; dfl_graph_init(&g);
  static const int small[3] = {37, 301, 1030}, large[3] = {100003, 1000001, 257}, flat[3] = {128 * 781, 128 * 7813, 257};
  const int *sz = keep == 4 ? flat : keep >= 3 ? large : small;
  int p[3], ms[3], m[3], v[3], gr[3];
  for (int k = 0; k < 3 && keep == 4; k++) {
    char nm[32];
    snprintf(nm, sizeof nm, "grad%d", k); gr[k] = t1(&g, nm, ACT, DFL_T_GRAD, sz[k]);
  }
  for (int k = 0; k < 3; k++) {
    char nm[32];
    snprintf(nm, sizeof nm, "param%d", k); p[k] = t1(&g, nm, ACT, DFL_T_PARAM, sz[k]);
    snprintf(nm, sizeof nm, "master%d", k); ms[k] = t1(&g, nm, DFL_F32, DFL_T_STATE, sz[k]);
    snprintf(nm, sizeof nm, "m%d", k); m[k] = t1(&g, nm, DFL_F32, DFL_T_STATE, sz[k]);
    snprintf(nm, sizeof nm, "v%d", k); v[k] = t1(&g, nm, DFL_F32, DFL_T_STATE, sz[k]);
    if (keep != 4) { snprintf(nm, sizeof nm, "grad%d", k); gr[k] = t1(&g, nm, keep >= 3 ? ACT : DFL_F32, DFL_T_GRAD, sz[k]); }
  }
  int st = t1(&g, "state", DFL_F32, DFL_T_STATE, DFL_OPT_COUNT);
  int ssq = t1(&g, "sumsq", DFL_F32, DFL_T_STATE, 1), den = t1(&g, "den", DFL_F32, DFL_T_STATE, 1);
  dfl_attrs a = {0};
  a.lr = 6e-4; a.warmup = 3; a.total = 20; a.schedule = DFL_SCHED_COSINE; a.clip = 1.0; a.beta1 = 0.9; a.beta2 = 0.999;
  a.eps = 1e-8; a.wd = 0.01;
  a.alpha = 1;
  for (int k = 0; k < 3; k++) op(&g, DFL_OP_SUMSQ_ACC, 2, (int[]){ssq, gr[k]}, 1, &ssq, &a);
  op(&g, DFL_OP_OPT_PREP, 3, (int[]){ssq, den, st}, 1, &st, &a);
  a.keep_grad = keep != 0;
  for (int k = 0; k < 3; k++)
    op(&g, DFL_OP_ADAMW, 6, (int[]){p[k], ms[k], m[k], v[k], gr[k], st}, 5, (int[]){p[k], ms[k], m[k], v[k], gr[k]}, &a);
  int32_t sv[DFL_OPT_COUNT] = {5, 0, 0, 0, 0, 0}, dv[1] = {37}, sq[1] = {0};
  ifill f[] = {{st, sv}, {den, dv}, {ssq, sq}};
  double sc[64] = {0};
  for (int k = 0; k < 3; k++) sc[gr[k]] = 30, sc[v[k]] = -1e-3;
  static const char *nm[] = {"sumsq+opt_prep+adamw, 3 tensors (multi-tensor)",
                             "sumsq+opt_prep+adamw, 3 tensors (multi-tensor), grads kept",
                             "",
                             "sumsq+opt_prep+adamw, 3 large tensors (multi-tensor), grads in the params' dtype",
                             "sumsq+opt_prep+adamw, 3 large tensors (multi-tensor), grads end to end (flat sum of squares)"};
  run_case(nm[keep], &g, f, 3, sc, NULL);
  dfl_graph_free(&g);
}
