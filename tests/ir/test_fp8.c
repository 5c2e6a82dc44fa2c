/* test_fp8.c: the FP8 E4M3 rounding of runtime/fp8.h against a brute-force nearest-value search
** (ties to the even code), the per-row quantization, and the CPU's QUANT_F8 / MATMUL_F8 ops (plain
** and with the residual addend dfl_fuse_add gives them) against a direct f64 computation, and
** dfl_fuse_quant (bit-identical on the CPU; refusals). */
#include "irtest.h"
#include "runtime/cpu/fp8.h"

/* The 126 positive finite E4M3 values, ascending: value(code) for codes 1..0x7e. */
static double pos_val(int code) { return (double)dfl_e4m3_to_f32((uint8_t)code); }

/* Independent oracle: the nearest code by search, ties to the even code, saturating at 448. */
static uint8_t oracle(float x) {
  if (isnan(x)) return (uint8_t)(signbit(x) ? 0xff : 0x7f);
  double a = fabs((double)x);
  int best = 0;
  double bd = a;
  for (int c = 1; c <= 0x7e; c++) {
    double d = fabs(a - pos_val(c));
    if (d < bd || (d == bd && !(c & 1) && (best & 1))) best = c, bd = d;
  }
  if (a > 448.0) best = 0x7e;
  return (uint8_t)(best | (signbit(x) ? 0x80 : 0));
}

static void test_codec(void) {
  /* every code decodes to a value that encodes back to it; the values ascend */
  for (int b = 0; b < 256; b++) {
    float v = dfl_e4m3_to_f32((uint8_t)b);
    if ((b & 0x7f) == 0x7f) { CHECK(isnan(v)); CHECK(dfl_f32_to_e4m3(v) == b); continue; }
    CHECK(dfl_f32_to_e4m3(v) == b);
    if ((b & 0x7f) > 0 && (b & 0x7f) < 0x7e) CHECK(fabsf(dfl_e4m3_to_f32((uint8_t)(b + 1))) > fabsf(v));
  }
  CHECK(dfl_e4m3_to_f32(0x7e) == 448.0f && dfl_e4m3_to_f32(0x01) == ldexpf(1, -9) && dfl_e4m3_to_f32(0x08) == ldexpf(1, -6));
  /* midpoints go to the even code, a hair off them to the nearer one */
  for (int c = 0; c < 0x7e; c++) {
    float lo = dfl_e4m3_to_f32((uint8_t)c), hi = dfl_e4m3_to_f32((uint8_t)(c + 1)), mid = 0.5f * (lo + hi);
    CHECK(dfl_f32_to_e4m3(mid) == (c & 1 ? c + 1 : c));
    CHECK(dfl_f32_to_e4m3(nextafterf(mid, 0)) == c);
    CHECK(dfl_f32_to_e4m3(nextafterf(mid, 1e9f)) == c + 1);
    CHECK(dfl_f32_to_e4m3(-mid) == (0x80 | (c & 1 ? c + 1 : c)));
  }
  /* saturation: 448 <= |x| (and infinity) -> +-448 */
  float big[] = {448.0f, 463.9f, 464.0f, 480.0f, 1e6f, INFINITY};
  for (int i = 0; i < 6; i++) CHECK(dfl_f32_to_e4m3(big[i]) == 0x7e && dfl_f32_to_e4m3(-big[i]) == 0xfe);
  /* random values of every magnitude against the search */
  int bad = 0;
  for (int i = 0; i < 200000; i++) {
    float x = (float)(srand1() * ldexp(1.0, irand(22) - 12));
    if (dfl_f32_to_e4m3(x) != oracle(x) && bad++ < 5)
      fprintf(stderr, "FAIL e4m3(%.9g) = 0x%02x, nearest is 0x%02x\n", x, dfl_f32_to_e4m3(x), oracle(x));
  }
  CHECK(bad == 0);
}

static void test_quant_row(void) {
  enum { N = 300 };
  float x[N], qf[N];
  uint8_t q[N];
  for (int rep = 0; rep < 50; rep++) {
    double amp = ldexp(1.0, irand(40) - 20);
    for (int i = 0; i < N; i++) x[i] = (float)(amp * srand1());
    int imax = irand(N);
    x[imax] = (float)(rep & 1 ? -amp : amp); /* the row's amax, exactly */
    float s = dfl_fp8_quant_row(x, N, q, qf);
    CHECK(s == fabsf(x[imax]) / 448.0f);
    CHECK((q[imax] & 0x7f) == 0x7e);
    for (int i = 0; i < N; i++) {
      CHECK(qf[i] == dfl_e4m3_to_f32(q[i]));
      /* error <= half a step: 2^-4 of the value for normals, 2^-10 of the scale below 2^-6 */
      double e = fabs((double)qf[i] * s - x[i]), bound = fmax(fabs((double)x[i]) / 16.0, ldexp(s, -10)) * 1.0001;
      if (!(e <= bound)) { CHECK(e <= bound); break; }
    }
  }
  float zero[4] = {0, 0, 0, 0};
  CHECK(dfl_fp8_quant_row(zero, 4, q, qf) == 1.0f && q[0] == 0 && qf[3] == 0);
}

/* y = MATMUL_F8(QUANT_F8(x), QUANT_F8(w)) [+ r], in f32 or f64 storage, against the oracle's bytes. */
static void test_ops(int f64, int addend) {
  dfl_graph g;
  dfl_graph_init(&g);
  dfl_dtype dt = f64 ? DFL_F64 : DFL_F32;
  int M = 3 + irand(6), N = 2 + irand(7), K = 5 + irand(40);
  int x = dfl_tensor_2d(&g, "x", dt, DFL_T_INPUT, M, K), w = dfl_tensor_2d(&g, "w", dt, DFL_T_INPUT, N, K);
  int r = dfl_tensor_2d(&g, "r", dt, DFL_T_INPUT, M, N);
  int sx, sw;
  int x8 = dfl_quant_f8(&g, x, &sx, "x8"), w8 = dfl_quant_f8(&g, w, &sw, "w8");
  int y = dfl_tensor_2d(&g, "y", dt, DFL_T_ACT, M, N);
  dfl_attrs at = {0};
  at.beta = addend;
  int in[5] = {x8, w8, sx, sw, r};
  dfl_op_add(&g, DFL_OP_MATMUL_F8, in, addend ? 5 : 4, &y, 1, &at);
  dfl_cpu c;
  CHECK(dfl_cpu_init(&c, &g, NULL, f64) == DFL_OK);
  fill_rand(&c, x, 3.0), fill_rand(&c, w, 0.05), fill_rand(&c, r, 1.0);
  /* one row far from the others' range, one row of zeros */
  double *X = get_all(&c, x);
  for (int k = 0; k < K; k++) X[k] *= 1e-4, X[(M - 1) * K + k] = 0;
  dfl_cpu_set_d(&c, x, X, (int64_t)M * K);
  CHECK(dfl_cpu_run(&c, DFL_PH_ALL) == DFL_OK);
  double *W = get_all(&c, w), *R = get_all(&c, r), *Y = get_all(&c, y), *SX = get_all(&c, sx), *SW = get_all(&c, sw);
  double *X8 = get_all(&c, x8), *W8 = get_all(&c, w8), *ref = calloc((size_t)(M * N), sizeof *ref);
  double sxr[64], swr[64], xq[64 * 64], wq[64 * 64];
  for (int pass = 0; pass < 2; pass++) { /* the oracle's quantization of x (pass 0) and w (pass 1) */
    const double *src = pass ? W : X;
    int rows = pass ? N : M;
    for (int i = 0; i < rows; i++) {
      float amax = 0;
      for (int k = 0; k < K; k++) amax = fmaxf(amax, fabsf((float)src[i * K + k]));
      float inv = amax > 0 ? 448.0f / amax : 1.0f;
      (pass ? swr : sxr)[i] = amax > 0 ? amax / 448.0f : 1.0f;
      for (int k = 0; k < K; k++) (pass ? wq : xq)[i * K + k] = dfl_e4m3_to_f32(oracle((float)src[i * K + k] * inv));
    }
  }
  int same = 1;
  for (int i = 0; i < M * K; i++) same &= X8[i] == xq[i];
  for (int i = 0; i < N * K; i++) same &= W8[i] == wq[i];
  for (int i = 0; i < M; i++) same &= SX[i] == (double)(float)sxr[i];
  for (int i = 0; i < N; i++) same &= SW[i] == (double)(float)swr[i];
  CHECK(same);
  /* The error of a sum is bounded by the rounding unit times the sum of its terms' magnitudes, not
  ** by the result's: under cancellation (y near 0 from a product and an addend of opposite signs)
  ** an f32 result can be off by more than 1e-5 of itself (seed 4768698887467806156: 1.02e-5 at
  ** y = -1.1e-3 against terms near 1). So each element is compared against mag = sum_k |xq wq|
  ** sx sw + |r|: K f32 products and sums and the addend's add take well under 1e-5 of it
  ** (2^-24 ~ 6e-8 a rounding, K = 64 of them at most); f64 against 1e-12. */
  double *mag = calloc((size_t)(M * N), sizeof *mag);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      for (int k = 0; k < K; k++) {
        ref[i * N + j] += xq[i * K + k] * wq[j * K + k];
        mag[i * N + j] += fabs(xq[i * K + k] * wq[j * K + k]);
      }
      ref[i * N + j] = ref[i * N + j] * (float)sxr[i] * (float)swr[j] + (addend ? R[i * N + j] : 0);
      mag[i * N + j] = mag[i * N + j] * (float)sxr[i] * (float)swr[j] + (addend ? fabs(R[i * N + j]) : 0);
    }
  double worst = 0, tol = f64 ? 1e-12 : 1e-5;
  int64_t wi = 0;
  for (int64_t i = 0; i < (int64_t)M * N; i++) {
    double e = fabs(Y[i] - ref[i]) / (mag[i] + 1e-30);
    if (!(e <= worst)) worst = e, wi = i;
  }
  CHECK(worst <= tol, "%s: error %.3g of the terms' magnitude > %.3g at %lld (got %.10g want %.10g)",
        addend ? "matmul_f8 + r" : "matmul_f8", worst, tol, (long long)wi, Y[wi], ref[wi]);
  free(mag);
  free(X), free(W), free(R), free(Y), free(SX), free(SW), free(X8), free(W8), free(ref);
  dfl_cpu_free(&c);
  dfl_graph_free(&g);
}

/* dfl_fuse_add folds u = ADD(MATMUL_F8(...), r) into the GEMM's addend form, same values. */
static void test_fuse(void) {
  double *out[2];
  for (int fuse = 0; fuse < 2; fuse++) {
    dfl_graph g;
    dfl_graph_init(&g);
    int M = 4, N = 6, K = 16;
    int x = dfl_tensor_2d(&g, "x", DFL_F32, DFL_T_INPUT, M, K), w = dfl_tensor_2d(&g, "w", DFL_F32, DFL_T_INPUT, N, K);
    int r = dfl_tensor_2d(&g, "r", DFL_F32, DFL_T_INPUT, M, N);
    int sx, sw;
    int x8 = dfl_quant_f8(&g, x, &sx, "x8"), w8 = dfl_quant_f8(&g, w, &sw, "w8");
    int t = dfl_linear_f8(&g, x8, sx, w8, sw, DFL_F32, "t");
    int u = dfl_add(&g, r, t, "u");
    int nops = g.nops;
    if (fuse) {
      CHECK(dfl_fuse_add(&g) == 1);
      CHECK(g.nops == nops - 1 && g.ops[g.nops - 1].code == DFL_OP_MATMUL_F8 && g.ops[g.nops - 1].n_in == 5);
    }
    dfl_cpu c;
    CHECK(dfl_cpu_init(&c, &g, NULL, 0) == DFL_OK);
    uint64_t keep = rng_s;
    fill_rand(&c, x, 1.0), fill_rand(&c, w, 1.0), fill_rand(&c, r, 1.0);
    if (!fuse) rng_s = keep; /* the same inputs in both runs */
    CHECK(dfl_cpu_run(&c, DFL_PH_ALL) == DFL_OK);
    out[fuse] = get_all(&c, u);
    dfl_cpu_free(&c);
    dfl_graph_free(&g);
  }
  near("fused matmul_f8 addend", out[1], out[0], 24, 1e-6, 1e-3);
  free(out[0]), free(out[1]);
}

/* dfl_fuse_quant: RMSNORM (whole rows) and SWIGLU absorb the QUANT_F8 of their output (the SwiGLU's
** unless dfl_fuse_quant_ex leaves them out). The fused bytes and scales must equal the unfused graph's y rounded to
** y's dtype (bf16: as the GPU stores it; f32: unchanged) and quantized by runtime/fp8.h. Cases it
** must refuse stay unfused. extra_read: 1 reads the norm's y twice, 2 the SwiGLU's. */
static int swiglu_q = 1; /* dfl_fuse_quant_ex's switch for the cases below */
static void fuse_quant_case(dfl_dtype dt, int C, int group, int extra_read, int rstd_read, int expect) {
  enum { NR = 5 };
  double *got[4], *ys[2] = {NULL, NULL};
  for (int fuse = 0; fuse < 2; fuse++) {
    dfl_graph g;
    dfl_graph_init(&g);
    int x = dfl_tensor_2d(&g, "x", dt, DFL_T_INPUT, NR, C), w = dfl_tensor_1d(&g, "w", dt, DFL_T_INPUT, group);
    int gt = dfl_tensor_2d(&g, "g", dt, DFL_T_INPUT, NR, C), up = dfl_tensor_2d(&g, "u", dt, DFL_T_INPUT, NR, C);
    int y = dfl_rmsnorm(&g, x, w, group, 1e-6, "y");
    int sw = dfl_swiglu(&g, gt, up, "sw");
    int s1, s2;
    int q1 = dfl_quant_f8(&g, y, &s1, "q1"), q2 = dfl_quant_f8(&g, sw, &s2, "q2");
    if (extra_read) (void)dfl_add(&g, extra_read == 1 ? y : sw, extra_read == 1 ? y : sw, "yy");
    if (rstd_read) {
      int rs = g.ops[g.t[y].producer].out[1], cp = dfl_tensor_1d(&g, "rs_copy", DFL_F32, DFL_T_ACT, dfl_tensor_numel(&g.t[rs]));
      dfl_op_add(&g, DFL_OP_COPY, &rs, 1, &cp, 1, NULL);
    }
    if (fuse) {
      int nf = dfl_fuse_quant_ex(&g, swiglu_q);
      if (nf != expect) fprintf(stderr, "FAIL fuse_quant %s C %d group %d extra %d rstd %d: %d fused, want %d\n",
                                dfl_dtype_name(dt), C, group, extra_read, rstd_read, nf, expect);
      CHECK(nf == expect);
      CHECK(dfl_fuse_quant_ex(&g, swiglu_q) == 0); /* idempotent */
    }
    dfl_cpu c;
    CHECK(dfl_cpu_init(&c, &g, NULL, 0) == DFL_OK);
    uint64_t keep = rng_s;
    fill_rand(&c, x, 2.0), fill_rand(&c, w, 1.0), fill_rand(&c, gt, 3.0), fill_rand(&c, up, 1.0);
    if (!fuse) rng_s = keep; /* the same inputs in both runs */
    CHECK(dfl_cpu_run(&c, DFL_PH_ALL) == DFL_OK);
    if (!fuse) {
      ys[0] = get_all(&c, y), ys[1] = get_all(&c, sw);
    } else {
      got[0] = get_all(&c, q1), got[1] = get_all(&c, s1), got[2] = get_all(&c, q2), got[3] = get_all(&c, s2);
      /* what each fused op must produce: its unfused y if it was fused, else the unfused QUANT_F8 */
      int fused_norm = g.t[q1].producer >= 0 && g.ops[g.t[q1].producer].code == DFL_OP_RMSNORM;
      int fused_swig = g.t[q2].producer >= 0 && g.ops[g.t[q2].producer].code == DFL_OP_SWIGLU;
      CHECK(fused_norm + fused_swig == expect);
      for (int k = 0; k < 2; k++) {
        int rounds = dt == DFL_BF16 && (k ? fused_swig : fused_norm);
        float row[4096], qf[4096];
        int ok = 1;
        for (int r = 0; r < NR; r++) {
          for (int i = 0; i < C; i++) row[i] = rounds ? dfl_bf16_rne((float)ys[k][r * C + i]) : (float)ys[k][r * C + i];
          float sc = dfl_fp8_quant_row(row, C, NULL, qf);
          ok &= got[2 * k + 1][r] == (double)sc;
          for (int i = 0; i < C; i++) ok &= got[2 * k][r * C + i] == (double)qf[i];
        }
        if (!ok) fprintf(stderr, "FAIL fuse_quant %s C %d: %s bytes or scales differ\n", dfl_dtype_name(dt), C, k ? "swiglu" : "norm");
        CHECK(ok);
      }
    }
    dfl_cpu_free(&c);
    dfl_graph_free(&g);
  }
  for (int k = 0; k < 4; k++) free(got[k]);
  free(ys[0]), free(ys[1]);
}

/* The op table's row in this file (tests/ir/op_table.h): QUANT_F8's bytes and scales exactly the
** oracle's, MATMUL_F8 against the f64 product of the oracle's bytes. */
static void quant_matmul_cases(void) {
  for (int rep = 0; rep < 4; rep++)
    for (int f64 = 0; f64 < 2; f64++) test_ops(f64, rep & 1);
}
OP_CASE(optab_fp8_ops, fails, rng_s, quant_matmul_cases())

DFL_TEST_MAIN {
  rng_init("ir_fp8");
  test_codec();
  test_quant_row();
  quant_matmul_cases();
  test_fuse();
  for (int b = 0; b < 2; b++) {
    dfl_dtype dt = b ? DFL_BF16 : DFL_F32;
    fuse_quant_case(dt, 512, 512, 0, 0, 2);   /* the norm and the SwiGLU */
    fuse_quant_case(dt, 1024, 64, 0, 0, 1);   /* per-head norm: the SwiGLU only */
    fuse_quant_case(dt, 384, 384, 0, 0, 0);   /* rows not a multiple of 512 */
    fuse_quant_case(dt, 512, 512, 1, 0, 1);   /* the norm's y read twice: the SwiGLU only */
    fuse_quant_case(dt, 512, 512, 2, 0, 1);   /* the SwiGLU's output read twice: the norm only */
    fuse_quant_case(dt, 512, 512, 0, 1, 1);   /* the norm's rstd is read: the SwiGLU only */
    swiglu_q = 0;
    fuse_quant_case(dt, 512, 512, 0, 0, 1);   /* switched off: the norm only */
    swiglu_q = 1;
  }
  if (fails) { fprintf(stderr, "ir_fp8: %d failures\n", fails); return 1; }
  printf("ir_fp8: ok\n");
  return 0;
}
