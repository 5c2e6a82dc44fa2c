/*
** test_ops_hybrid.c (cuda_ops, GPU): the hybrid (Gated DeltaNet) target's ops (kernels/hybrid.cuh):
** the causal conv1d and its split q/k/v form, the row ops (l2norm, gated norm, sigmoid gate, the
** decay and beta), partial RoPE, the f32-weight norm and the gated delta rule, against the CPU oracle.
*/
#include "ops.h"

/* --- the hybrid (Gated DeltaNet) target's ops (kernels/hybrid.cuh) --- */
/* CONV1D_SILU over nseq sequences of S rows (the window restarts at each), K = 4 taps; w in the
** graph's dtype or f32 */
void case_conv1d(int nseq, int S, int C, int wf32) {
  dfl_graph g; dfl_graph_init(&g);
  int R = nseq * S;
  int x = t2(&g, "x", ACT, DFL_T_INPUT, R, C), w = t2(&g, "w", wf32 ? DFL_F32 : ACT, DFL_T_PARAM, C, 4);
  int y = t2(&g, "y", ACT, DFL_T_ACT, R, C);
  dfl_attrs a = {0}; a.S = S;
  op(&g, DFL_OP_CONV1D_SILU, 2, (int[]){x, w}, 1, &y, &a);
  double sc[8] = {0};
  sc[x] = 3;
  char nm[64]; snprintf(nm, sizeof nm, "conv1d_silu %d x %d C %d%s", nseq, S, C, wf32 ? " w f32" : "");
  run_case(nm, &g, NULL, 0, sc, NULL);
  dfl_graph_free(&g);
}

/* CONV1D_SILU's split form: x[R, 2D + Cv] -> q, k [R, D] L2-normalized per group of G (q times
** 1/sqrt(G)), v [R, Cv] */
void case_conv_qkv(int nseq, int S, int D, int Cv, int G, int wf32) {
  dfl_graph g; dfl_graph_init(&g);
  int R = nseq * S, C = 2 * D + Cv;
  int x = t2(&g, "x", ACT, DFL_T_INPUT, R, C), w = t2(&g, "w", wf32 ? DFL_F32 : ACT, DFL_T_PARAM, C, 4);
  int y[3] = {t2(&g, "q", ACT, DFL_T_ACT, R, D), t2(&g, "k", ACT, DFL_T_ACT, R, D), t2(&g, "v", ACT, DFL_T_ACT, R, Cv)};
  dfl_attrs a = {0}; a.S = S, a.group = G, a.eps = 1e-6, a.alpha = 1.0 / sqrt((double)G);
  op(&g, DFL_OP_CONV1D_SILU, 2, (int[]){x, w}, 3, y, &a);
  double sc[8] = {0};
  sc[x] = 3;
  char nm[80];
  snprintf(nm, sizeof nm, "conv1d_silu q|k|v %d x %d D %d Cv %d G %d%s", nseq, S, D, Cv, G, wf32 ? " w f32" : "");
  run_case(nm, &g, NULL, 0, sc, NULL);
  dfl_graph_free(&g);
}

/* L2NORM (q: alpha 1/sqrt(G); k: 1), NORM_GATE (x, z [R, H G], w [G]), SIGMOID_MUL, GDN_GATES (a in
** [-25, 25]: softplus's x > 20 branch too) on R rows of H heads */
void case_hybrid_rows(int R, int H, int G) {
  dfl_graph g; dfl_graph_init(&g);
  int D = H * G;
  int x = t2(&g, "x", ACT, DFL_T_INPUT, R, D), z = t2(&g, "z", ACT, DFL_T_INPUT, R, D);
  int w = t1(&g, "w", ACT, DFL_T_PARAM, G);
  int qn = t2(&g, "l2norm_q", ACT, DFL_T_ACT, R, D), kn = t2(&g, "l2norm_k", ACT, DFL_T_ACT, R, D);
  int ng = t2(&g, "norm_gate", ACT, DFL_T_ACT, R, D), sm = t2(&g, "sigmoid_mul", ACT, DFL_T_ACT, R, D);
  int ga = t2(&g, "a", ACT, DFL_T_INPUT, R, H), gb = t2(&g, "b", ACT, DFL_T_INPUT, R, H);
  int al = t1(&g, "A_log", DFL_F32, DFL_T_PARAM, H), db = t1(&g, "dt_bias", ACT, DFL_T_PARAM, H);
  int gg = t2(&g, "g", DFL_F32, DFL_T_ACT, R, H), gbeta = t2(&g, "beta", DFL_F32, DFL_T_ACT, R, H);
  dfl_attrs a = {0};
  a.group = G, a.eps = 1e-6, a.alpha = 1.0 / sqrt((double)G);
  op(&g, DFL_OP_L2NORM, 1, &x, 1, &qn, &a);
  a.alpha = 1.0;
  op(&g, DFL_OP_L2NORM, 1, &z, 1, &kn, &a);
  dfl_attrs an = {0}; an.group = G, an.eps = 1e-6;
  op(&g, DFL_OP_NORM_GATE, 3, (int[]){x, z, w}, 1, &ng, &an);
  dfl_attrs a0 = {0};
  op(&g, DFL_OP_SIGMOID_MUL, 2, (int[]){x, z}, 1, &sm, &a0);
  op(&g, DFL_OP_GDN_GATES, 4, (int[]){ga, gb, al, db}, 2, (int[]){gg, gbeta}, &a0);
  double sc[32] = {0};
  sc[x] = 3, sc[z] = 4, sc[ga] = 25, sc[gb] = 6, sc[al] = 2;
  char nm[64]; snprintf(nm, sizeof nm, "hybrid rows R %d H %d G %d", R, H, G);
  run_case(nm, &g, NULL, 0, sc, NULL);
  dfl_graph_free(&g);
}

/* The hybrid's z|a|b GEMM output read in place (models/target_hybrid.c): zab [R, H G + 2 H + extra],
** NORM_GATE's z its columns [0, H G) (the 16-byte kernel where the row keeps 16-byte words), GDN_GATES' a
** and b the next H and H (a generated group's windows) */
void case_hybrid_windows(int R, int H, int G, int extra) {
  dfl_graph g; dfl_graph_init(&g);
  int D = H * G, C = D + 2 * H + extra;
  int x = t2(&g, "x", ACT, DFL_T_INPUT, R, D), zab = t2(&g, "zab", ACT, DFL_T_INPUT, R, C);
  int w = t1(&g, "w", ACT, DFL_T_PARAM, G);
  int al = t1(&g, "A_log", DFL_F32, DFL_T_PARAM, H), db = t1(&g, "dt_bias", ACT, DFL_T_PARAM, H);
  int ng = t2(&g, "norm_gate", ACT, DFL_T_ACT, R, D);
  int gg = t2(&g, "g", DFL_F32, DFL_T_ACT, R, H), gbeta = t2(&g, "beta", DFL_F32, DFL_T_ACT, R, H);
  dfl_attrs an = {0}; an.group = G, an.eps = 1e-6;
  op(&g, DFL_OP_NORM_GATE, 3, (int[]){x, zab, w}, 1, &ng, &an);
  dfl_attrs aw = {0}; aw.win[0] = D, aw.win[1] = D + H;
  op(&g, DFL_OP_GDN_GATES, 4, (int[]){zab, zab, al, db}, 2, (int[]){gg, gbeta}, &aw);
  double sc[16] = {0};
  sc[x] = 3, sc[zab] = 6, sc[al] = 2;
  char nm[80]; snprintf(nm, sizeof nm, "hybrid z|a|b windows R %d H %d G %d +%d", R, H, G, extra);
  run_case(nm, &g, NULL, 0, sc, NULL);
  dfl_graph_free(&g);
}

/* ROPE with partial rotary (rot_dim < head_dim: the qwen3_5 attention's 64 of 256), and its inverse */
void case_rope_partial(int R, int nh, int hd, int rd) {
  dfl_graph g; dfl_graph_init(&g);
  int x = t2(&g, "x", ACT, DFL_T_INPUT, R, nh * hd), pos = t1(&g, "pos", DFL_I32, DFL_T_INPUT, R);
  int y = t2(&g, "y", ACT, DFL_T_ACT, R, nh * hd), z = t2(&g, "z", ACT, DFL_T_ACT, R, nh * hd);
  dfl_attrs a = {0}; a.heads = nh; a.head_dim = hd; a.theta = 1e7; a.rot_dim = rd;
  op(&g, DFL_OP_ROPE, 2, (int[]){x, pos}, 1, &y, &a);
  a.inverse = 1;
  op(&g, DFL_OP_ROPE, 2, (int[]){y, pos}, 1, &z, &a);
  char nm[96]; snprintf(nm, sizeof nm, "rope partial R %d nh %d hd %d rot %d", R, nh, hd, rd);
  free(rope_run(nm, &g, pos, x, R));
  dfl_graph_free(&g);
}

/* Partial rotary's fused forms (dfl_rope_pn): normed (the q/k norms folded in: dfl_fuse_norm_rope, f32
** weights as the qwen3_5 checkpoints' folded 1 + w), pair (q and k in one op: dfl_fuse_rope_pair) or both;
** then the inverse pair, plain. nh + nh2 not a multiple of the kernel's 4 heads a step leaves a partial
** step; hd 64 puts 4 heads in a warp. */
void case_rope_partial_fused(int R, int nh, int nh2, int hd, int rd, int normed) {
  dfl_graph g; dfl_graph_init(&g);
  int pair = nh2 > 0;
  int x = t2(&g, "x", ACT, DFL_T_INPUT, R, nh * hd), pos = t1(&g, "pos", DFL_I32, DFL_T_INPUT, R);
  int x2 = pair ? t2(&g, "x2", ACT, DFL_T_INPUT, R, nh2 * hd) : -1;
  int w = t1(&g, "wn", DFL_F32, DFL_T_FROZEN, hd), w2 = t1(&g, "wn2", DFL_F32, DFL_T_FROZEN, hd);
  int y = t2(&g, "y", ACT, DFL_T_ACT, R, nh * hd), z = t2(&g, "z", ACT, DFL_T_ACT, R, nh * hd);
  int y2 = pair ? t2(&g, "y2", ACT, DFL_T_ACT, R, nh2 * hd) : -1, z2 = pair ? t2(&g, "z2", ACT, DFL_T_ACT, R, nh2 * hd) : -1;
  dfl_attrs a = {0}; a.heads = nh; a.kv_heads = nh2; a.head_dim = hd; a.rot_dim = rd; a.theta = 1e7;
  if (normed) a.eps = 1e-6, a.mid_dtype = ACT;
  if (pair && normed) op(&g, DFL_OP_ROPE, 5, (int[]){x, pos, w, x2, w2}, 2, (int[]){y, y2}, &a);
  else if (pair) op(&g, DFL_OP_ROPE, 3, (int[]){x, pos, x2}, 2, (int[]){y, y2}, &a);
  else op(&g, DFL_OP_ROPE, 3, (int[]){x, pos, w}, 1, &y, &a);
  dfl_attrs b = {0}; b.heads = nh; b.head_dim = hd; b.rot_dim = rd; b.theta = 1e7; b.inverse = 1;
  if (pair) b.kv_heads = nh2, op(&g, DFL_OP_ROPE, 3, (int[]){y, pos, y2}, 2, (int[]){z, z2}, &b);
  else op(&g, DFL_OP_ROPE, 2, (int[]){y, pos}, 1, &z, &b);
  char nm[96];
  snprintf(nm, sizeof nm, "rope partial%s%s R %d nh %d + %d hd %d rot %d", pair ? " pair" : "", normed ? " with norm" : "",
           R, nh, nh2, hd, rd);
  free(rope_run(nm, &g, pos, x, R));
  dfl_graph_free(&g);
}

/* RMSNORM with an f32 weight under bf16 x (the (1 + w) norms of qwen3_5, folded at load): forward only */
void case_rmsnorm_w32(int R, int D, int G) {
  dfl_graph g; dfl_graph_init(&g);
  int x = t2(&g, "x", ACT, DFL_T_INPUT, R, D), w = t1(&g, "w", DFL_F32, DFL_T_PARAM, G);
  int y = t2(&g, "y", ACT, DFL_T_ACT, R, D), rs = t1(&g, "rstd", DFL_F32, DFL_T_ACT, (int64_t)R * D / G);
  dfl_attrs a = {0}; a.group = G; a.eps = 1e-6;
  op(&g, DFL_OP_RMSNORM, 2, (int[]){x, w}, 2, (int[]){y, rs}, &a);
  char nm[64]; snprintf(nm, sizeof nm, "rmsnorm f32 w R %d D %d G %d", R, D, G);
  run_case(nm, &g, NULL, 0, NULL, NULL);
  dfl_graph_free(&g);
}

/* GATED_DELTA over nseq sequences of S rows (the state restarts at each), Hv value heads on Hk key
** heads. Inputs as the target makes them: q, k unit per head (q times 1/sqrt(dk)), g log-uniform in
** [-8, -1e-4] (decays from 3e-4 to 0.9999: long and short memories), beta uniform in (0, 1). bf16
** graphs with dk = dv in {32, 64, 128} run the chunk kernel, others the f32 recurrence. */
float *unit_heads(int64_t R, int H, int d, double scale) {
  float *v = rand_f(R * H * d, 1.0, DFL_F32);
  for (int64_t i = 0; i < R * H; i++) {
    double ss = 0;
    for (int j = 0; j < d; j++) ss += (double)v[i * d + j] * v[i * d + j];
    for (int j = 0; j < d; j++) {
      float x = (float)(v[i * d + j] * scale / sqrt(ss + 1e-6));
      v[i * d + j] = ACT == DFL_BF16 ? dfl_bf16_round(x) : x;
    }
  }
  return v;
}
void case_gated_delta(int nseq, int S, int Hk, int Hv, int dk, int dv) {
  dfl_graph g; dfl_graph_init(&g);
  int64_t R = (int64_t)nseq * S;
  int q = t2(&g, "q", ACT, DFL_T_INPUT, R, (int64_t)Hk * dk), k = t2(&g, "k", ACT, DFL_T_INPUT, R, (int64_t)Hk * dk);
  int v = t2(&g, "v", ACT, DFL_T_INPUT, R, (int64_t)Hv * dv);
  int gg = t2(&g, "g", DFL_F32, DFL_T_INPUT, R, Hv), bt = t2(&g, "beta", DFL_F32, DFL_T_INPUT, R, Hv);
  int o = t2(&g, "o", ACT, DFL_T_ACT, R, (int64_t)Hv * dv);
  dfl_attrs a = {0};
  a.heads = Hv, a.kv_heads = Hk, a.head_dim = dk, a.S = S, a.batch = nseq;
  op(&g, DFL_OP_GATED_DELTA, 5, (int[]){q, k, v, gg, bt}, 1, &o, &a);
  float *qv = unit_heads(R, Hk, dk, 1.0 / sqrt((double)dk)), *kv = unit_heads(R, Hk, dk, 1.0);
  float *gv = malloc((size_t)(R * Hv) * 4), *bv = malloc((size_t)(R * Hv) * 4);
  for (int64_t i = 0; i < R * Hv; i++) {
    gv[i] = (float)-exp(log(1e-4) + urand() * (log(8.0) - log(1e-4)));
    bv[i] = (float)(0.001 + 0.998 * urand());
  }
  preset_ts[0] = q, preset_vs[0] = qv, preset_ts[1] = k, preset_vs[1] = kv;
  preset_ts[2] = gg, preset_vs[2] = gv, preset_ts[3] = bt, preset_vs[3] = bv;
  char nm[96];
  snprintf(nm, sizeof nm, "gated_delta %d x %d Hk %d Hv %d dk %d dv %d", nseq, S, Hk, Hv, dk, dv);
  run_case(nm, &g, NULL, 0, NULL, NULL);
  for (int i = 0; i < NPRESET; i++) preset_ts[i] = -1;
  free(qv), free(kv), free(gv), free(bv);
  dfl_graph_free(&g);
}
