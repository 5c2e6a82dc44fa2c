/*
** test_ops_dense.c (cuda_ops, GPU): the GEMMs (bf16/f32, FP8 with per-row scales, the addend), the
** elementwise and row ops (SwiGLU, casts, concat, the norms, RoPE, the fused FP8 producers), the
** embedding gather and the DFlash block rows and data ops, each against the CPU oracle (run_case,
** test_ops.c: tolerances there).
*/
#include "ops.h"

void case_matmul(void) {
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      dfl_graph g; dfl_graph_init(&g);
      int M = 37, N = 53, K = 64;
      int A = ta ? t2(&g, "A", ACT, DFL_T_INPUT, K, M) : t2(&g, "A", ACT, DFL_T_INPUT, M, K);
      int B = tb ? t2(&g, "B", ACT, DFL_T_INPUT, N, K) : t2(&g, "B", ACT, DFL_T_INPUT, K, N);
      int C = t2(&g, "C", ACT, DFL_T_ACT, M, N);
      dfl_attrs a = {0}; a.trans_a = ta; a.trans_b = tb; a.alpha = ta ? 0.5 : 0;
      op(&g, DFL_OP_MATMUL, 2, (int[]){A, B}, 1, &C, &a);
      char nm[32]; snprintf(nm, sizeof nm, "matmul ta%d tb%d", ta, tb);
      run_case(nm, &g, NULL, 0, NULL, NULL);
      dfl_graph_free(&g);
    }
}

/* The fused form (compiler/fuse.c): acc (f32, persistent, random start) += alpha op(A) op(B),
** A and B in the graph's dtype: cuBLASLt beta = 1 with C = D = the f32 accumulator. */
void case_matmul_accum(void) {
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      dfl_graph g; dfl_graph_init(&g);
      int M = 48, N = 40, K = 72;
      int A = ta ? t2(&g, "A", ACT, DFL_T_INPUT, K, M) : t2(&g, "A", ACT, DFL_T_INPUT, M, K);
      int B = tb ? t2(&g, "B", ACT, DFL_T_INPUT, N, K) : t2(&g, "B", ACT, DFL_T_INPUT, K, N);
      int acc = t2(&g, "acc", DFL_F32, DFL_T_GRAD, M, N);
      dfl_attrs a = {0}; a.trans_a = ta; a.trans_b = tb; a.alpha = tb ? 0.25 : 0; a.beta = 1;
      op(&g, DFL_OP_MATMUL, 3, (int[]){A, B, acc}, 1, &acc, &a);
      char nm[40]; snprintf(nm, sizeof nm, "matmul-accum ta%d tb%d", ta, tb);
      double sc_[8] = {0};
      sc_[acc] = 4; /* the start value matters: beta = 0 would be caught */
      run_case(nm, &g, NULL, 0, sc_, NULL);
      dfl_graph_free(&g);
    }
}

/* The addend form (compiler/fuse.c, dfl_fuse_add): u = alpha op(A) op(B) + r with u != r, r and u
** of one dtype (the graph's, or f32 over bf16 operands): cuBLASLt beta = 1 with C = r, D = u.
** M, N, K not multiples of 8 (unaligned leading dimensions). A GEMM that wrote D into r (C == D)
** would leave u unwritten, and one that ignored r (beta 0) would miss its range of +-4: caught. */
void case_matmul_addend(void) {
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int of32 = 0; of32 < 1 + (ACT != DFL_F32); of32++) {
        dfl_graph g; dfl_graph_init(&g);
        int M = 37, N = 53, K = 29;
        dfl_dtype dc = of32 ? DFL_F32 : ACT;
        int A = ta ? t2(&g, "A", ACT, DFL_T_INPUT, K, M) : t2(&g, "A", ACT, DFL_T_INPUT, M, K);
        int B = tb ? t2(&g, "B", ACT, DFL_T_INPUT, N, K) : t2(&g, "B", ACT, DFL_T_INPUT, K, N);
        int r = t2(&g, "r", dc, DFL_T_INPUT, M, N), u = t2(&g, "u", dc, DFL_T_ACT, M, N);
        dfl_attrs a = {0}; a.trans_a = ta; a.trans_b = tb; a.alpha = ta ? 0.5 : 0; a.beta = 1;
        op(&g, DFL_OP_MATMUL, 3, (int[]){A, B, r}, 1, &u, &a);
        char nm[48]; snprintf(nm, sizeof nm, "matmul-addend ta%d tb%d out %s", ta, tb, dfl_dtype_name(dc));
        double sc_[8] = {0};
        sc_[r] = 4; /* the addend matters: beta = 0 (or C = D) would be caught */
        run_case(nm, &g, NULL, 0, sc_, NULL);
        dfl_graph_free(&g);
      }
}

/* FP8 target (quantize = fp8): QUANT_F8 of x [R,K] and w [N,K] (bytes equal to the CPU's, scales
** within tolerance), then MATMUL_F8 through cuBLASLt's outer-vector scales, optionally with the
** residual addend (range +-4: a GEMM that ignored it is caught). One row of x is scaled down by
** 1e-3 (its own scale must follow) and one is zero (scale 1, bytes 0). K % 8 != 0 takes the
** kernel's scalar path; such a K has no FP8 GEMM (cuBLASLt wants N, K multiples of 16), so only QUANT runs. */
void case_fp8_(int R, int K, int N, int addend, int fast) {
  dfl_graph g; dfl_graph_init(&g);
  int x = t2(&g, "x", ACT, DFL_T_INPUT, R, K), w = t2(&g, "w", ACT, DFL_T_INPUT, N, K);
  int sx, sw;
  int x8 = dfl_quant_f8(&g, x, &sx, "x8"), w8 = dfl_quant_f8(&g, w, &sw, "w8");
  int r = t2(&g, "r", ACT, DFL_T_INPUT, R, N);
  if (K % 16 == 0 && N % 16 == 0) {
    int y = t2(&g, "y", ACT, DFL_T_ACT, R, N);
    dfl_attrs a = {0}; a.beta = addend; a.fast_accum = fast;
    op(&g, DFL_OP_MATMUL_F8, addend ? 5 : 4, (int[]){x8, w8, sx, sw, r}, 1, &y, &a);
  }
  float *xv = rand_f((int64_t)R * K, 3.0, ACT);
  for (int k = 0; k < K; k++) xv[k] = 0.f, xv[K + k] = ACT == DFL_BF16 ? dfl_bf16_round(xv[K + k] * 1e-3f) : xv[K + k] * 1e-3f;
  char nm[64];
  snprintf(nm, sizeof nm, "fp8 quant+matmul R%d K%d N%d%s%s", R, K, N, addend ? " +r" : "", fast ? " fast" : "");
  double sc_[16] = {0};
  sc_[w] = 0.05; sc_[r] = 4;
  preset_t = x, preset_v = xv;
  run_case(nm, &g, NULL, 0, sc_, NULL);
  preset_t = -1, preset_v = NULL;
  free(xv);
  dfl_graph_free(&g);
}
void case_fp8(int R, int K, int N, int addend) { case_fp8_(R, K, N, addend, 0); }

/* The quantized forms of RMSNORM and SWIGLU (compiler/fuse.c dfl_fuse_quant: whole rows), fused into
** the same graph on both backends; R odd. */
void case_fp8_fused_w(int R, int C, dfl_dtype wdt) {
  dfl_graph g; dfl_graph_init(&g);
  int x = t2(&g, "x", ACT, DFL_T_INPUT, R, C), w = t1(&g, "w", wdt, DFL_T_INPUT, C);
  int gt = t2(&g, "gate", ACT, DFL_T_INPUT, R, C), up = t2(&g, "up", ACT, DFL_T_INPUT, R, C);
  int y = dfl_rmsnorm(&g, x, w, C, 1e-6, "y"), s1, s2;
  dfl_quant_f8(&g, y, &s1, "norm8");
  dfl_quant_f8(&g, dfl_swiglu(&g, gt, up, "h"), &s2, "swiglu8");
  int nf = dfl_fuse_quant(&g);
  if (nf != 2) { fprintf(stderr, "FAIL fp8 fused norm/swiglu R%d C%d: %d fused, want 2\n", R, C, nf); fails++; }
  char nm[64]; snprintf(nm, sizeof nm, "fp8 fused norm+swiglu R%d C%d w %s", R, C, dfl_dtype_name(wdt));
  run_case(nm, &g, NULL, 0, NULL, NULL);
  dfl_graph_free(&g);
}
void case_fp8_fused(int R, int C) { case_fp8_fused_w(R, C, ACT); }

/* CONCAT_COLS with every column count a multiple of 8: the 16-byte path of dfl_copy_cols (16-bit
** dtypes; f32 takes the scalar one), as the target's taps are concatenated */
void case_concat(int R) {
  dfl_graph g; dfl_graph_init(&g);
  int a0 = t2(&g, "a", ACT, DFL_T_INPUT, R, 64), b0 = t2(&g, "b", ACT, DFL_T_INPUT, R, 128);
  int c0 = t2(&g, "c", ACT, DFL_T_INPUT, R, 8), cat = t2(&g, "concat", ACT, DFL_T_ACT, R, 200);
  dfl_attrs a = {0};
  op(&g, DFL_OP_CONCAT_COLS, 3, (int[]){a0, b0, c0}, 1, &cat, &a);
  char nm[40]; snprintf(nm, sizeof nm, "concat %d x (64, 128, 8)", R);
  run_case(nm, &g, NULL, 0, NULL, NULL);
  dfl_graph_free(&g);
}

/* BLOCK_ROWS, BLOCK_EXPAND, BLOCK_EXPAND_BWD, BLOCK_DROP and BLOCK_UNDROP over nb blocks of B rows: C % 8 == 0 takes the 16-byte
** copies and the vector column sums, other C the 4- or 2-byte copies and scalar sums; over 128 rows
** the sums run in several parts (the last one short when 128 does not divide the rows). */
void case_block_rows(int nb, int B, int C) {
  dfl_graph g; dfl_graph_init(&g);
  int Q = nb * B;
  int x = t2(&g, "x", ACT, DFL_T_INPUT, Q, C), s = t2(&g, "s", ACT, DFL_T_INPUT, nb + 2, C);
  int d = t2(&g, "d", ACT, DFL_T_INPUT, Q, C);
  int rows = t2(&g, "rows", ACT, DFL_T_ACT, nb + 2, C), ex = t2(&g, "expand", ACT, DFL_T_ACT, Q, C);
  int bw = t2(&g, "expand_bwd", ACT, DFL_T_ACT, nb + 2, C);
  dfl_attrs a = {0};
  a.B = B;
  op(&g, DFL_OP_BLOCK_ROWS, 1, &x, 1, &rows, &a);
  op(&g, DFL_OP_BLOCK_EXPAND, 1, &s, 1, &ex, &a);
  op(&g, DFL_OP_BLOCK_EXPAND_BWD, 1, &d, 1, &bw, &a);
  /* the last layer's: rows q % B != 0 out and back (head rows 0), and a vector of i32 labels */
  int dr = t2(&g, "drop", ACT, DFL_T_ACT, Q - nb, C), ud = t2(&g, "undrop", ACT, DFL_T_ACT, Q, C);
  int lab = t1(&g, "labels", DFL_I32, DFL_T_INPUT, Q), ld = t1(&g, "labels.drop", DFL_I32, DFL_T_ACT, Q - nb);
  op(&g, DFL_OP_BLOCK_DROP, 1, &x, 1, &dr, &a);
  op(&g, DFL_OP_BLOCK_UNDROP, 1, &dr, 1, &ud, &a);
  op(&g, DFL_OP_BLOCK_DROP, 1, &lab, 1, &ld, &a);
  int32_t *lv = malloc((size_t)Q * 4);
  for (int q = 0; q < Q; q++) lv[q] = irand(1 << 20);
  ifill fi = {lab, lv};
  char nm[48]; snprintf(nm, sizeof nm, "block rows %d x %d, C %d", nb, B, C);
  run_case(nm, &g, &fi, 1, NULL, NULL);
  free(lv);
  dfl_graph_free(&g);
}

/* R * C % 8 == 0 takes the 16-byte vector path of ADD / SWIGLU / SWIGLU_BWD, otherwise the scalar one. */
void case_elementwise(int R, int C) {
  dfl_graph g; dfl_graph_init(&g);
  int x = t2(&g, "x", ACT, DFL_T_INPUT, R, C), y = t2(&g, "y", ACT, DFL_T_INPUT, R, C), dy = t2(&g, "dy", ACT, DFL_T_INPUT, R, C);
  int s = t1(&g, "s", DFL_F32, DFL_T_INPUT, 1);
  int add = t2(&g, "add", ACT, DFL_T_ACT, R, C), sw = t2(&g, "swiglu", ACT, DFL_T_ACT, R, C);
  int dg = t2(&g, "dg", ACT, DFL_T_ACT, R, C), du = t2(&g, "du", ACT, DFL_T_ACT, R, C);
  int sc = t2(&g, "scale_s", ACT, DFL_T_ACT, R, C), sc2 = t2(&g, "scale", ACT, DFL_T_ACT, R, C);
  int cp = t2(&g, "copy_f32", DFL_F32, DFL_T_ACT, R, C), fl = t2(&g, "fill", ACT, DFL_T_ACT, R, C);
  int cat = t2(&g, "concat", ACT, DFL_T_ACT, R, 2 * C + 5), z = t2(&g, "z", ACT, DFL_T_INPUT, R, 5);
  int acc = t2(&g, "acc", DFL_F32, DFL_T_GRAD, R, C), sum = t1(&g, "sum", DFL_F32, DFL_T_ACT, 1);
  int ssq = t1(&g, "sumsq", DFL_F32, DFL_T_STATE, 1);
  dfl_attrs a = {0};
  op(&g, DFL_OP_ADD, 2, (int[]){x, y}, 1, &add, &a);
  op(&g, DFL_OP_SWIGLU, 2, (int[]){x, y}, 1, &sw, &a);
  op(&g, DFL_OP_SWIGLU_BWD, 3, (int[]){x, y, dy}, 2, (int[]){dg, du}, &a);
  a.alpha = -0.75;
  op(&g, DFL_OP_SCALE, 2, (int[]){x, s}, 1, &sc, &a);
  op(&g, DFL_OP_SCALE, 1, (int[]){y}, 1, &sc2, &a);
  op(&g, DFL_OP_FILL, 0, NULL, 1, &fl, &a);
  op(&g, DFL_OP_COPY, 1, &x, 1, &cp, &a);
  op(&g, DFL_OP_CONCAT_COLS, 3, (int[]){x, z, y}, 1, &cat, &a);
  op(&g, DFL_OP_ACCUM, 2, (int[]){acc, add}, 1, &acc, &a);
  /* over an input: both backends sum the same bf16 values (a bf16-rounded activation would make
  ** the GPU sum differ by the rounding of 1,536 cancelling terms, beyond 3e-2 of the result) */
  op(&g, DFL_OP_SUM, 1, &y, 1, &sum, &a);
  op(&g, DFL_OP_SUMSQ_ACC, 2, (int[]){ssq, dg}, 1, &ssq, &a);
  int32_t *ids = malloc(37 * 4);
  for (int i = 0; i < 37; i++) ids[i] = i % 7;
  int io = t1(&g, "iota", DFL_I32, DFL_T_ACT, 37);
  dfl_attrs ai = {0}; ai.n = 7;
  op(&g, DFL_OP_IOTA_MOD, 0, NULL, 1, &io, &ai);
  double sc_[64] = {0};
  sc_[x] = 3; /* swiglu over a useful range of the sigmoid */
  char nm[40]; snprintf(nm, sizeof nm, "elementwise %dx%d", R, C);
  run_case(nm, &g, NULL, 0, sc_, NULL);
  free(ids);
  dfl_graph_free(&g);
}

/* A vertical fusion group (compiler/lower.c): every op reads the one before it, the values passed in
** registers rounded as the op-by-op graph stores them (ACT), one of them f32; it ends in the GDN
** gates (column inputs) beside a SWIGLU_BWD (two outputs). R * C % 8 == 0 takes the 16-byte path. */
void case_pw_chain(int R, int C) {
  dfl_graph g; dfl_graph_init(&g);
  int x = t2(&g, "x", ACT, DFL_T_INPUT, R, C), y = t2(&g, "y", ACT, DFL_T_INPUT, R, C);
  int al = t1(&g, "alog", DFL_F32, DFL_T_PARAM, C), db = t1(&g, "dtb", DFL_F32, DFL_T_PARAM, C);
  int a = t2(&g, "a", ACT, DFL_T_ACT, R, C), sw = t2(&g, "sw", DFL_F32, DFL_T_ACT, R, C), z = t2(&g, "z", ACT, DFL_T_ACT, R, C);
  int sm = t2(&g, "sm", ACT, DFL_T_ACT, R, C), gg = t2(&g, "g", DFL_F32, DFL_T_ACT, R, C), be = t2(&g, "beta", DFL_F32, DFL_T_ACT, R, C);
  int dg = t2(&g, "dg", ACT, DFL_T_ACT, R, C), du = t2(&g, "du", ACT, DFL_T_ACT, R, C);
  dfl_attrs at = {0};
  op(&g, DFL_OP_ADD, 2, (int[]){x, y}, 1, &a, &at);
  op(&g, DFL_OP_SWIGLU, 2, (int[]){a, y}, 1, &sw, &at);
  at.alpha = 1.5;
  op(&g, DFL_OP_SCALE, 1, (int[]){sw}, 1, &z, &at);
  at.alpha = 0;
  op(&g, DFL_OP_SIGMOID_MUL, 2, (int[]){z, a}, 1, &sm, &at);
  op(&g, DFL_OP_GDN_GATES, 4, (int[]){sm, z, al, db}, 2, (int[]){gg, be}, &at);
  op(&g, DFL_OP_SWIGLU_BWD, 3, (int[]){a, z, sm}, 2, (int[]){dg, du}, &at);
  char nm[40]; snprintf(nm, sizeof nm, "pointwise chain %dx%d", R, C);
  run_case(nm, &g, NULL, 0, NULL, NULL);
  dfl_graph_free(&g);
}

/* A row group (compiler/lower.h): SIGMOID_MUL then QUANT_F8 of its output, by a CTA a row; `keep`: the
** product is read after (a COPY), so the group stores it too; C % 8 != 0 leaves the QUANT_F8 to the
** library */
void case_pw_rowq(int R, int C, int keep) {
  dfl_graph g; dfl_graph_init(&g);
  int x = t2(&g, "x", ACT, DFL_T_INPUT, R, C), gt = t2(&g, "gate", ACT, DFL_T_INPUT, R, C);
  int sm = t2(&g, "gated", ACT, DFL_T_ACT, R, C), q = t2(&g, "q", DFL_F8E4M3, DFL_T_ACT, R, C);
  int s = t1(&g, "q_scale", DFL_F32, DFL_T_ACT, R);
  dfl_attrs at = {0};
  op(&g, DFL_OP_SIGMOID_MUL, 2, (int[]){x, gt}, 1, &sm, &at);
  op(&g, DFL_OP_QUANT_F8, 1, &sm, 2, (int[]){q, s}, &at);
  if (keep) {
    int cp = t2(&g, "gated_copy", DFL_F32, DFL_T_ACT, R, C);
    op(&g, DFL_OP_COPY, 1, &sm, 1, &cp, &at);
  }
  double sc[16] = {0};
  sc[x] = 3, sc[gt] = 4;
  char nm[64]; snprintf(nm, sizeof nm, "row group sigmoid_mul+quant %dx%d%s", R, C, keep ? " kept" : "");
  run_case(nm, &g, NULL, 0, sc, NULL);
  dfl_graph_free(&g);
}

/* Row groups with a segmented reduction (compiler/rowwise.def): NORM_GATE over heads of G with z a
** window of a wider z|a|b row, then QUANT_F8 of its output (the FP8 hybrid's gated norm); L2NORM then
** a converting COPY (no quantization). Against the CPU as every case. */
void case_pw_rownorm(int R, int H, int G) {
  dfl_graph g; dfl_graph_init(&g);
  int D = H * G;
  int x = t2(&g, "x", ACT, DFL_T_INPUT, R, D), zab = t2(&g, "zab", ACT, DFL_T_INPUT, R, D + 2 * H);
  int w = t1(&g, "w", ACT, DFL_T_PARAM, G), y = t2(&g, "normed", ACT, DFL_T_ACT, R, D);
  int q = t2(&g, "q", DFL_F8E4M3, DFL_T_ACT, R, D), s = t1(&g, "q_scale", DFL_F32, DFL_T_ACT, R);
  int l2 = t2(&g, "l2", ACT, DFL_T_ACT, R, D), l2f = t2(&g, "l2_f32", DFL_F32, DFL_T_ACT, R, D);
  dfl_attrs at = {0};
  at.group = G, at.eps = 1e-6;
  op(&g, DFL_OP_NORM_GATE, 3, (int[]){x, zab, w}, 1, &y, &at);
  dfl_attrs a0 = {0};
  op(&g, DFL_OP_QUANT_F8, 1, &y, 2, (int[]){q, s}, &a0);
  at.alpha = 0.125;
  op(&g, DFL_OP_L2NORM, 1, &x, 1, &l2, &at);
  op(&g, DFL_OP_COPY, 1, &l2, 1, &l2f, &a0);
  double sc[16] = {0};
  sc[x] = 3, sc[zab] = 4;
  char nm[64]; snprintf(nm, sizeof nm, "row group norms R %d H %d G %d", R, H, G);
  run_case(nm, &g, NULL, 0, sc, NULL);
  dfl_graph_free(&g);
}

/* COPY of a column window (a pipeline's features split under soft labels, models/pipeline.c): columns
** [off, off + c) of x [R, C] into y [R, c] in the graph's dtype and into f32, and the rest of the row
** into a third; 16-byte loads where c, C and off are multiples of 8 (compiler/codegen.c win_vec) */
void case_pw_windows(int R, int C, int off, int c) {
  dfl_graph g; dfl_graph_init(&g);
  int x = t2(&g, "x", ACT, DFL_T_INPUT, R, C), y = t2(&g, "y", ACT, DFL_T_ACT, R, c);
  int yf = t2(&g, "y_f32", DFL_F32, DFL_T_ACT, R, c);
  dfl_attrs at = {0};
  at.win[0] = off;
  op(&g, DFL_OP_COPY, 1, &x, 1, &y, &at);
  op(&g, DFL_OP_COPY, 1, &x, 1, &yf, &at);
  at.win[0] = off + c;
  if (C - off - c > 0) {
    int rest = t2(&g, "rest", ACT, DFL_T_ACT, R, C - off - c);
    op(&g, DFL_OP_COPY, 1, &x, 1, &rest, &at);
  }
  char nm[64]; snprintf(nm, sizeof nm, "copy window %dx%d [%d, %d)", R, C, off, off + c);
  run_case(nm, &g, NULL, 0, NULL, NULL);
  dfl_graph_free(&g);
}

/* The vector kernels take G = 8 L with L a power of two <= 32 (several groups per block) or a
** multiple of 32 (one group per block); the others (G = 40 here) take the warp-per-group kernels.
** Enough groups for several blocks and grid-stride passes with a partial last one. `addend`: the
** backward's fused residual gradient (dfl_fuse_add: dx = r + the norm's dx). */
void case_rmsnorm(int R, int D, int G, int addend) {
  dfl_graph g; dfl_graph_init(&g);
  int x = t2(&g, "x", ACT, DFL_T_INPUT, R, D), w = t1(&g, "w", ACT, DFL_T_PARAM, G), dy = t2(&g, "dy", ACT, DFL_T_INPUT, R, D);
  int y = t2(&g, "y", ACT, DFL_T_ACT, R, D), rs = t1(&g, "rstd", DFL_F32, DFL_T_ACT, (int64_t)R * D / G);
  int dx = t2(&g, "dx", ACT, DFL_T_ACT, R, D), dw = t1(&g, "dw", DFL_F32, DFL_T_ACT, G);
  dfl_attrs a = {0}; a.group = G; a.eps = 1e-6;
  op(&g, DFL_OP_RMSNORM, 2, (int[]){x, w}, 2, (int[]){y, rs}, &a);
  int r = addend ? t2(&g, "r", ACT, DFL_T_INPUT, R, D) : -1;
  op(&g, DFL_OP_RMSNORM_BWD, addend ? 5 : 4, (int[]){x, w, rs, dy, r}, 2, (int[]){dx, dw}, &a);
  char nm[96];
  snprintf(nm, sizeof nm, "rmsnorm R %d D %d G %d%s", R, D, G, addend ? " + addend" : "");
  run_case(nm, &g, NULL, 0, NULL, NULL);
  dfl_graph_free(&g);
}

/* hd % 16 == 0 takes the vector kernel (heads in chunks of 4: nh = 3 and 9 leave partial chunks),
** hd = 24 the scalar one. */
void case_rope(int R, int nh, int hd) {
  dfl_graph g; dfl_graph_init(&g);
  int x = t2(&g, "x", ACT, DFL_T_INPUT, R, nh * hd), pos = t1(&g, "pos", DFL_I32, DFL_T_INPUT, R);
  int y = t2(&g, "y", ACT, DFL_T_ACT, R, nh * hd), z = t2(&g, "z", ACT, DFL_T_ACT, R, nh * hd);
  dfl_attrs a = {0}; a.heads = nh; a.head_dim = hd; a.theta = 1e6;
  op(&g, DFL_OP_ROPE, 2, (int[]){x, pos}, 1, &y, &a);
  a.inverse = 1;
  op(&g, DFL_OP_ROPE, 2, (int[]){y, pos}, 1, &z, &a);
  int32_t *p = malloc(sizeof(int32_t) * (size_t)R);
  for (int i = 0; i < R; i++) p[i] = irand(40000);
  ifill f = {pos, p};
  char nm[96];
  snprintf(nm, sizeof nm, "rope R %d nh %d hd %d", R, nh, hd);
  run_case(nm, &g, &f, 1, NULL, NULL);
  free(p);
  dfl_graph_free(&g);
}

/* The normed ROPE (dfl_fuse_norm_rope: each head RMS-normalized, scaled, rounded to the
** intermediate's dtype, then rotated) against the CPU's, whose values are the unfused pair's. */
void case_rope_norm(int R, int nh, int hd) {
  dfl_graph g; dfl_graph_init(&g);
  int x = t2(&g, "x", ACT, DFL_T_INPUT, R, nh * hd), pos = t1(&g, "pos", DFL_I32, DFL_T_INPUT, R);
  int w = t1(&g, "wn", ACT, DFL_T_FROZEN, hd), y = t2(&g, "y", ACT, DFL_T_ACT, R, nh * hd);
  dfl_attrs a = {0}; a.heads = nh; a.head_dim = hd; a.theta = 1e6; a.eps = 1e-6; a.mid_dtype = ACT;
  op(&g, DFL_OP_ROPE, 3, (int[]){x, pos, w}, 1, &y, &a);
  char nm[96];
  snprintf(nm, sizeof nm, "rope with norm R %d nh %d hd %d", R, nh, hd);
  free(rope_run(nm, &g, pos, x, R));
  dfl_graph_free(&g);
}

/* The pair form (dfl_fuse_rope_pair: q and k by the same positions in one op), plain or normed, and
** its inverse, against the CPU; nh, nh2 not multiples of 4 or 8 leave partial items. */
void case_rope_pair(int R, int nh, int nh2, int hd, int normed) {
  dfl_graph g; dfl_graph_init(&g);
  int x = t2(&g, "x", ACT, DFL_T_INPUT, R, nh * hd), x2 = t2(&g, "x2", ACT, DFL_T_INPUT, R, nh2 * hd);
  int pos = t1(&g, "pos", DFL_I32, DFL_T_INPUT, R);
  int w = t1(&g, "wn", ACT, DFL_T_FROZEN, hd), w2 = t1(&g, "wn2", ACT, DFL_T_FROZEN, hd);
  int y = t2(&g, "y", ACT, DFL_T_ACT, R, nh * hd), y2 = t2(&g, "y2", ACT, DFL_T_ACT, R, nh2 * hd);
  int z = t2(&g, "z", ACT, DFL_T_ACT, R, nh * hd), z2 = t2(&g, "z2", ACT, DFL_T_ACT, R, nh2 * hd);
  dfl_attrs a = {0}; a.heads = nh; a.kv_heads = nh2; a.head_dim = hd; a.theta = 1e6;
  if (normed) a.eps = 1e-6, a.mid_dtype = ACT;
  if (normed) op(&g, DFL_OP_ROPE, 5, (int[]){x, pos, w, x2, w2}, 2, (int[]){y, y2}, &a);
  else op(&g, DFL_OP_ROPE, 3, (int[]){x, pos, x2}, 2, (int[]){y, y2}, &a);
  dfl_attrs b = {0}; b.heads = nh; b.kv_heads = nh2; b.head_dim = hd; b.theta = 1e6; b.inverse = 1;
  op(&g, DFL_OP_ROPE, 3, (int[]){y, pos, y2}, 2, (int[]){z, z2}, &b);
  char nm[96];
  snprintf(nm, sizeof nm, "rope pair%s R %d nh %d + %d hd %d", normed ? " with norm" : "", R, nh, nh2, hd);
  int32_t *p = rope_run(nm, &g, pos, x, R);
  free(p);
  dfl_graph_free(&g);
}

void case_gather(void) {
  dfl_graph g; dfl_graph_init(&g);
  int V = 50, H = 48, R = 70;
  int tab = t2(&g, "table", ACT, DFL_T_FROZEN, V, H), ids = t1(&g, "ids", DFL_I32, DFL_T_INPUT, R);
  int out = t2(&g, "out", ACT, DFL_T_ACT, R, H), d = t2(&g, "dout", ACT, DFL_T_INPUT, R, H);
  int dt = t2(&g, "dtable", DFL_F32, DFL_T_ACT, V, H), dt2 = t2(&g, "dtable_act", ACT, DFL_T_ACT, V, H);
  op(&g, DFL_OP_GATHER, 2, (int[]){tab, ids}, 1, &out, NULL);
  op(&g, DFL_OP_SCATTER_ADD, 2, (int[]){d, ids}, 1, &dt, NULL);
  op(&g, DFL_OP_SCATTER_ADD, 2, (int[]){d, ids}, 1, &dt2, NULL);
  int32_t v[70];
  for (int i = 0; i < R; i++) v[i] = irand(V);
  ifill f = {ids, v};
  rerun_exact = 0; /* SCATTER_ADD adds by atomics: its last bits may change from run to run (docs/architecture.md) */
  run_case("gather/scatter_add", &g, &f, 1, NULL, NULL);
  rerun_exact = 1;
  dfl_graph_free(&g);
}

void case_dflash_data(int soft) {
  dfl_graph g; dfl_graph_init(&g);
  int batch = 3, S = 40, N = 7, B = 5, Q = N * B;
  int ids = t1(&g, "ids", DFL_I32, DFL_T_INPUT, batch * S), lm = t1(&g, "loss_mask", DFL_I32, DFL_T_INPUT, batch * S);
  int anc = t1(&g, "anchors", DFL_I32, DFL_T_INPUT, batch * N), kp = t1(&g, "keep", DFL_I32, DFL_T_INPUT, batch * N);
  int noise = t1(&g, "noise", DFL_I32, DFL_T_ACT, batch * Q), pq = t1(&g, "pos_q", DFL_I32, DFL_T_ACT, batch * Q);
  int lab = t1(&g, "labels", DFL_I32, DFL_T_ACT, batch * Q), w = t1(&g, "weights", DFL_F32, DFL_T_ACT, batch * Q);
  dfl_attrs a = {0}; a.batch = batch; a.S = S; a.N = N; a.B = B; a.mask_id = 999; a.gamma = 7;
  int prev = t1(&g, "prev", DFL_I32, DFL_T_ACT, batch * Q); /* soft labels: the target's row before each label */
  op(&g, DFL_OP_DFLASH_BLOCKS, 4, (int[]){ids, lm, anc, kp}, soft ? 5 : 4, (int[]){noise, pq, lab, w, prev}, &a);
  int cor = t1(&g, "correct", DFL_F32, DFL_T_INPUT, batch * Q), hit = t1(&g, "topk_hit", DFL_F32, DFL_T_INPUT, batch * Q);
  int met = t1(&g, "metrics", DFL_F32, DFL_T_ACT, DFL_METRIC_COUNT + 2 * B);
  op(&g, DFL_OP_DFLASH_METRICS, 4, (int[]){cor, w, hit, kp}, 1, &met, &a);
  int32_t vi[120], vm[120], va[21], vk[21], vc[105], vh[105];
  for (int i = 0; i < batch * S; i++) vi[i] = irand(900), vm[i] = irand(4) != 0;
  rand_anchors(batch, S, N, B, va, vk, 0);
  for (int i = 0; i < batch * Q; i++) vc[i] = irand(3) != 0, vh[i] = vc[i] || irand(2);
  ifill f[] = {{ids, vi}, {lm, vm}, {anc, va}, {kp, vk}, {cor, vc}, {hit, vh}};
  run_case(soft ? "dflash blocks+metrics, the target's rows (soft labels)" : "dflash blocks+metrics", &g, f, 6, NULL, NULL);
  dfl_graph_free(&g);
}
