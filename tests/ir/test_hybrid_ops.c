/*
** test_hybrid_ops: the hybrid target's ops on the CPU backend (f64 and f32) against their
** definitions, written out here independently of runtime/cpu/cpu_hybrid.inc:
**   GATED_DELTA (the backend runs the chunked WY/UT form) against the per-token recurrence, at
**     sequence lengths 1, 63, 64, 65 and 200 (two sequences each: the state must restart), GVA
**     ratio 3, gates mixing decays near 0 (g = -8: alpha 3e-4) and near 1 (g = -1e-4);
**   CONV1D_SILU, L2NORM, GDN_GATES, NORM_GATE, SIGMOID_MUL and partial-rotary ROPE.
** Tolerances: f64 1e-10 relative to the largest |value| (the chunked form's reassociation);
** f32 2e-5 (storage rounding of inputs and outputs; sums in double). Inputs are fresh random draws
** from a seed printed at the start (DFL_SEED reproduces a run).
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compiler/graph.h"
#include "compiler/status.h"
#include "runtime/cpu/cpu.h"
#include "tests/ir/op_table.h"

static int failures;
#include "tests/common/check.h"

static unsigned long long rs;
static double ur(void) { /* splitmix64, uniform in [0, 1) */
  unsigned long long z = (rs += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}
static double *rnd(int64_t n, double lo, double hi) {
  double *v = malloc(sizeof(double) * (size_t)n);
  for (int64_t i = 0; i < n; i++) v[i] = lo + (hi - lo) * ur();
  return v;
}
static double silu(double x) { return x / (1 + exp(-x)); }

/* Runs g (its ops already added) in f64 and f32 with inputs vals[i] for tensors ins[i], compares
** output tensor `out` with ref. */
static void run(const char *what, dfl_graph *g, const int *ins, double *const *vals, int nin, int out, const double *ref) {
  for (int f64 = 1; f64 >= 0; f64--) {
    dfl_cpu c;
    if (dfl_cpu_init(&c, g, NULL, f64) != DFL_OK) { CHECK(0, "%s: cpu init", what); return; }
    for (int i = 0; i < nin; i++) {
      int64_t n = dfl_tensor_numel(&g->t[ins[i]]);
      for (int64_t j = 0; j < n; j++) {
        if (f64) dfl_cpu_f64(&c, ins[i])[j] = vals[i][j];
        else dfl_cpu_f32(&c, ins[i])[j] = (float)vals[i][j];
      }
    }
    int rc = dfl_cpu_run(&c, DFL_PH_ALL);
    CHECK(rc == DFL_OK, "%s: run", what);
    int64_t n = dfl_tensor_numel(&g->t[out]);
    double mx = 0, err = 0;
    for (int64_t j = 0; j < n; j++) {
      double y = f64 ? dfl_cpu_f64(&c, out)[j] : dfl_cpu_f32(&c, out)[j];
      if (fabs(ref[j]) > mx) mx = fabs(ref[j]);
      if (!(fabs(y - ref[j]) <= err)) err = fabs(y - ref[j]);
    }
    double rel = mx > 0 ? err / mx : err, tol = f64 ? 1e-10 : 2e-5;
    CHECK(mx > 0, "%s: the reference is all zeros", what);
    CHECK(rel <= tol, "%s (%s): max error %.3e of max %.3e (rel %.3e > %.1e)", what, f64 ? "f64" : "f32", err, mx, rel, tol);
    printf("  %-40s %s rel %.2e\n", what, f64 ? "f64" : "f32", rel);
    dfl_cpu_free(&c);
  }
}

static int t2(dfl_graph *g, const char *n, dfl_dtype d, dfl_tkind k, int64_t r, int64_t c) { return dfl_tensor_2d(g, n, d, k, r, c); }

static void case_gated_delta(int S, int nseq, int Hk, int grp, int dk, int dv) {
  const int Hv = Hk * grp;
  const int64_t R = (int64_t)S * nseq;
  dfl_graph g;
  dfl_graph_init(&g);
  int q = t2(&g, "q", DFL_F64, DFL_T_INPUT, R, (int64_t)Hk * dk), k = t2(&g, "k", DFL_F64, DFL_T_INPUT, R, (int64_t)Hk * dk);
  int v = t2(&g, "v", DFL_F64, DFL_T_INPUT, R, (int64_t)Hv * dv);
  int gg = t2(&g, "g", DFL_F32, DFL_T_INPUT, R, Hv), b = t2(&g, "beta", DFL_F32, DFL_T_INPUT, R, Hv);
  int o = t2(&g, "o", DFL_F64, DFL_T_ACT, R, (int64_t)Hv * dv);
  dfl_attrs at = {0};
  at.heads = Hv, at.kv_heads = Hk, at.head_dim = dk, at.S = S, at.batch = nseq;
  int in[5] = {q, k, v, gg, b};
  CHECK(dfl_op_add(&g, DFL_OP_GATED_DELTA, in, 5, &o, 1, &at) >= 0, "add GATED_DELTA");
  /* q, k unit-norm per head as L2NORM leaves them (q scaled), v in [-1, 1] */
  double *qv = rnd(R * Hk * dk, -1, 1), *kv = rnd(R * Hk * dk, -1, 1), *vv = rnd(R * Hv * dv, -1, 1);
  for (int64_t r = 0; r < R * Hk; r++) {
    double sq = 0, sk = 0;
    for (int i = 0; i < dk; i++) sq += qv[r * dk + i] * qv[r * dk + i], sk += kv[r * dk + i] * kv[r * dk + i];
    for (int i = 0; i < dk; i++) qv[r * dk + i] /= sqrt(sq) * sqrt((double)dk), kv[r * dk + i] /= sqrt(sk);
  }
  double *gv = rnd(R * Hv, 0, 1), *bv = rnd(R * Hv, 0.02, 0.98);
  for (int64_t i = 0; i < R * Hv; i++) { /* a third near 0 (alpha ~ 3e-4), a third near 1, the rest in between */
    double u = gv[i];
    gv[i] = u < 1.0 / 3 ? -8.0 + u : u < 2.0 / 3 ? -1e-4 * (1 + u) : -3.0 * u;
    gv[i] = (float)gv[i], bv[i] = (float)bv[i];
  }
  /* the definition: per sequence and value head, S = alpha S; u = beta (v - S^T k); S += k u^T; o = S^T q */
  double *ref = calloc((size_t)(R * Hv * dv), sizeof *ref), *st = malloc(sizeof(double) * (size_t)(dk * dv));
  for (int s = 0; s < nseq; s++)
    for (int h = 0; h < Hv; h++) {
      int kh = h / grp;
      memset(st, 0, sizeof(double) * (size_t)(dk * dv));
      for (int64_t r = (int64_t)s * S; r < (int64_t)(s + 1) * S; r++) {
        const double *kr = kv + (r * Hk + kh) * dk, *qr = qv + (r * Hk + kh) * dk, *vr = vv + (r * Hv + h) * dv;
        double a = exp(gv[r * Hv + h]), be = bv[r * Hv + h];
        for (int i = 0; i < dk * dv; i++) st[i] *= a;
        for (int j = 0; j < dv; j++) {
          double p = 0;
          for (int i = 0; i < dk; i++) p += st[i * dv + j] * kr[i];
          double u = be * (vr[j] - p);
          for (int i = 0; i < dk; i++) st[i * dv + j] += kr[i] * u;
        }
        for (int j = 0; j < dv; j++) {
          double acc = 0;
          for (int i = 0; i < dk; i++) acc += st[i * dv + j] * qr[i];
          ref[(r * Hv + h) * dv + j] = acc;
        }
      }
    }
  char what[96];
  snprintf(what, sizeof what, "gated_delta S=%d x%d Hk=%d Hv=%d dk=%d dv=%d", S, nseq, Hk, Hv, dk, dv);
  double *vals[5] = {qv, kv, vv, gv, bv};
  run(what, &g, in, vals, 5, o, ref);
  free(qv), free(kv), free(vv), free(gv), free(bv), free(ref), free(st);
  dfl_graph_free(&g);
}

static void case_conv(int S, int nseq, int C, int K) {
  const int64_t R = (int64_t)S * nseq;
  dfl_graph g;
  dfl_graph_init(&g);
  int x = t2(&g, "x", DFL_F64, DFL_T_INPUT, R, C), w = t2(&g, "w", DFL_F64, DFL_T_INPUT, C, K);
  int y = t2(&g, "y", DFL_F64, DFL_T_ACT, R, C);
  dfl_attrs at = {0};
  at.S = S;
  int in[2] = {x, w};
  CHECK(dfl_op_add(&g, DFL_OP_CONV1D_SILU, in, 2, &y, 1, &at) >= 0, "add CONV1D_SILU");
  double *xv = rnd(R * C, -2, 2), *wv = rnd((int64_t)C * K, -1, 1), *ref = malloc(sizeof(double) * (size_t)(R * C));
  for (int64_t r = 0; r < R; r++)
    for (int ch = 0; ch < C; ch++) {
      double acc = 0;
      for (int j = 0; j < K; j++) { /* x[t - K + 1 + j], zero before the sequence's first row */
        int64_t t = r - K + 1 + j;
        if (t >= r / S * S) acc += wv[ch * K + j] * xv[t * C + ch];
      }
      ref[r * C + ch] = silu(acc);
    }
  char what[96];
  snprintf(what, sizeof what, "conv1d_silu S=%d x%d C=%d K=%d", S, nseq, C, K);
  double *vals[2] = {xv, wv};
  run(what, &g, in, vals, 2, y, ref);
  free(xv), free(wv), free(ref);
  dfl_graph_free(&g);
}

static void case_rows(void) {
  const int R = 37, H = 6, G = 16, D = H * G;
  /* L2NORM with a scale */
  {
    dfl_graph g;
    dfl_graph_init(&g);
    int x = t2(&g, "x", DFL_F64, DFL_T_INPUT, R, D), y = t2(&g, "y", DFL_F64, DFL_T_ACT, R, D);
    dfl_attrs at = {0};
    at.group = G, at.eps = 1e-6, at.alpha = 0.25;
    CHECK(dfl_op_add(&g, DFL_OP_L2NORM, &x, 1, &y, 1, &at) >= 0, "add L2NORM");
    double *xv = rnd(R * D, -1, 1), *ref = malloc(sizeof(double) * R * D);
    for (int r = 0; r < R * H; r++) {
      double ss = 0;
      for (int i = 0; i < G; i++) ss += xv[r * G + i] * xv[r * G + i];
      for (int i = 0; i < G; i++) ref[r * G + i] = 0.25 * xv[r * G + i] / sqrt(ss + 1e-6);
    }
    run("l2norm", &g, &x, &xv, 1, y, ref);
    free(xv), free(ref);
    dfl_graph_free(&g);
  }
  /* GDN_GATES: g (softplus both sides of its threshold) and beta */
  for (int which = 0; which < 2; which++) {
    dfl_graph g;
    dfl_graph_init(&g);
    int a = t2(&g, "a", DFL_F64, DFL_T_INPUT, R, H), b = t2(&g, "b", DFL_F64, DFL_T_INPUT, R, H);
    int al = dfl_tensor_1d(&g, "A_log", DFL_F32, DFL_T_INPUT, H), dt = dfl_tensor_1d(&g, "dt_bias", DFL_F32, DFL_T_INPUT, H);
    int out[2] = {t2(&g, "g", DFL_F32, DFL_T_ACT, R, H), t2(&g, "beta", DFL_F32, DFL_T_ACT, R, H)};
    int in[4] = {a, b, al, dt};
    dfl_attrs at = {0};
    CHECK(dfl_op_add(&g, DFL_OP_GDN_GATES, in, 4, out, 2, &at) >= 0, "add GDN_GATES");
    double *av = rnd(R * H, -25, 25), *bv = rnd(R * H, -6, 6), *alv = rnd(H, -2, 2), *dtv = rnd(H, -1, 1);
    double *ref = malloc(sizeof(double) * R * H);
    for (int r = 0; r < R; r++)
      for (int h = 0; h < H; h++) {
        double x = av[r * H + h] + dtv[h], sp = x > 20 ? x : log(1 + exp(x));
        ref[r * H + h] = which ? 1 / (1 + exp(-bv[r * H + h])) : -exp(alv[h]) * sp;
      }
    double *vals[4] = {av, bv, alv, dtv};
    run(which ? "gdn_gates beta" : "gdn_gates g", &g, in, vals, 4, out[which], ref);
    free(av), free(bv), free(alv), free(dtv), free(ref);
    dfl_graph_free(&g);
  }
  /* NORM_GATE and SIGMOID_MUL */
  {
    dfl_graph g;
    dfl_graph_init(&g);
    int x = t2(&g, "x", DFL_F64, DFL_T_INPUT, R, D), z = t2(&g, "z", DFL_F64, DFL_T_INPUT, R, D);
    int w = dfl_tensor_1d(&g, "w", DFL_F64, DFL_T_INPUT, G);
    int y = t2(&g, "y", DFL_F64, DFL_T_ACT, R, D), y2 = t2(&g, "y2", DFL_F64, DFL_T_ACT, R, D);
    dfl_attrs at = {0};
    at.group = G, at.eps = 1e-6;
    int in[3] = {x, z, w};
    CHECK(dfl_op_add(&g, DFL_OP_NORM_GATE, in, 3, &y, 1, &at) >= 0, "add NORM_GATE");
    memset(&at, 0, sizeof at);
    CHECK(dfl_op_add(&g, DFL_OP_SIGMOID_MUL, in, 2, &y2, 1, &at) >= 0, "add SIGMOID_MUL");
    double *xv = rnd(R * D, -2, 2), *zv = rnd(R * D, -4, 4), *wv = rnd(G, 0.5, 1.5);
    double *ref = malloc(sizeof(double) * R * D), *ref2 = malloc(sizeof(double) * R * D);
    for (int r = 0; r < R * H; r++) {
      double ss = 0;
      for (int i = 0; i < G; i++) ss += xv[r * G + i] * xv[r * G + i];
      for (int i = 0; i < G; i++) {
        int j = r * G + i;
        ref[j] = xv[j] / sqrt(ss / G + 1e-6) * wv[i] * silu(zv[j]);
        ref2[j] = xv[j] / (1 + exp(-zv[j]));
      }
    }
    double *vals[3] = {xv, zv, wv};
    run("norm_gate", &g, in, vals, 3, y, ref);
    run("sigmoid_mul", &g, in, vals, 3, y2, ref2);
    free(xv), free(zv), free(wv), free(ref), free(ref2);
    dfl_graph_free(&g);
  }
}

/* The windows (ops.def): z|a|b as one GEMM's output [R, D + 2H] (+ 3 spare columns), NORM_GATE reading
** z = its columns [0, D) and GDN_GATES a = [D, D + H), b = [D + H, D + 2H), against the plain forms. */
static void case_windows(void) {
  const int R = 29, H = 6, G = 16, D = H * G, C = D + 2 * H + 3;
  dfl_graph g;
  dfl_graph_init(&g);
  int zab = t2(&g, "zab", DFL_F64, DFL_T_INPUT, R, C), x = t2(&g, "x", DFL_F64, DFL_T_INPUT, R, D);
  int w = dfl_tensor_1d(&g, "w", DFL_F64, DFL_T_INPUT, G);
  int al = dfl_tensor_1d(&g, "A_log", DFL_F32, DFL_T_INPUT, H), dt = dfl_tensor_1d(&g, "dt_bias", DFL_F32, DFL_T_INPUT, H);
  int y = t2(&g, "y", DFL_F64, DFL_T_ACT, R, D);
  int out[2] = {t2(&g, "g", DFL_F32, DFL_T_ACT, R, H), t2(&g, "beta", DFL_F32, DFL_T_ACT, R, H)};
  dfl_attrs at = {0};
  at.win[0] = D, at.win[1] = D + H;
  CHECK(dfl_op_add(&g, DFL_OP_GDN_GATES, (int[]){zab, zab, al, dt}, 4, out, 2, &at) >= 0, "add GDN_GATES (windows)");
  memset(&at, 0, sizeof at);
  at.group = G, at.eps = 1e-6;
  CHECK(dfl_op_add(&g, DFL_OP_NORM_GATE, (int[]){x, zab, w}, 3, &y, 1, &at) >= 0, "add NORM_GATE (window)");
  double *zv = rnd(R * C, -6, 6), *xv = rnd(R * D, -2, 2), *wv = rnd(G, 0.5, 1.5), *alv = rnd(H, -2, 2), *dtv = rnd(H, -1, 1);
  double *rg = malloc(sizeof(double) * R * H), *rb = malloc(sizeof(double) * R * H), *ry = malloc(sizeof(double) * R * D);
  for (int r = 0; r < R; r++) {
    for (int h = 0; h < H; h++) {
      double a = zv[r * C + D + h] + dtv[h], sp = a > 20 ? a : log(1 + exp(a));
      rg[r * H + h] = -exp(alv[h]) * sp;
      rb[r * H + h] = 1 / (1 + exp(-zv[r * C + D + H + h]));
    }
    for (int hh = 0; hh < H; hh++) {
      double ss = 0;
      for (int i = 0; i < G; i++) ss += xv[r * D + hh * G + i] * xv[r * D + hh * G + i];
      for (int i = 0; i < G; i++)
        ry[r * D + hh * G + i] = xv[r * D + hh * G + i] / sqrt(ss / G + 1e-6) * wv[i] * silu(zv[r * C + hh * G + i]);
    }
  }
  int ins[5] = {zab, x, w, al, dt};
  double *vals[5] = {zv, xv, wv, alv, dtv};
  run("gdn_gates g (windows)", &g, ins, vals, 5, out[0], rg);
  run("gdn_gates beta (windows)", &g, ins, vals, 5, out[1], rb);
  run("norm_gate (z a window)", &g, ins, vals, 5, y, ry);
  free(zv), free(xv), free(wv), free(alv), free(dtv), free(rg), free(rb), free(ry);
  dfl_graph_free(&g);
}

/* Partial rotary: dims [0, rd) of each head rotate (pairs i, i + rd/2, inv_freq theta^(-2i/rd)), the rest pass. */
static void case_partial_rope(int nh, int hd, int rd) {
  const int R = 23;
  dfl_graph g;
  dfl_graph_init(&g);
  int x = t2(&g, "x", DFL_F64, DFL_T_INPUT, R, (int64_t)nh * hd), pos = dfl_tensor_1d(&g, "pos", DFL_I32, DFL_T_INPUT, R);
  int y = dfl_rope(&g, x, pos, nh, hd, 1e7, "y");
  g.ops[g.nops - 1].a.rot_dim = rd;
  double *xv = rnd((int64_t)R * nh * hd, -1, 1), *ref = malloc(sizeof(double) * (size_t)R * nh * hd);
  int32_t pv[23];
  for (int r = 0; r < R; r++) pv[r] = (int32_t)(ur() * 4000);
  for (int r = 0; r < R; r++)
    for (int h = 0; h < nh; h++) {
      const double *xr = xv + ((int64_t)r * nh + h) * hd;
      double *yr = ref + ((int64_t)r * nh + h) * hd;
      for (int i = 0; i < hd; i++) yr[i] = xr[i];
      for (int i = 0; i < rd / 2; i++) {
        double ang = pv[r] * pow(1e7, -2.0 * i / rd);
        yr[i] = xr[i] * cos(ang) - xr[i + rd / 2] * sin(ang);
        yr[i + rd / 2] = xr[i + rd / 2] * cos(ang) + xr[i] * sin(ang);
      }
    }
  for (int f64 = 1; f64 >= 0; f64--) { /* run() has no integer inputs: the positions by hand */
    dfl_cpu c;
    dfl_cpu_init(&c, &g, NULL, f64);
    memcpy(dfl_cpu_i32(&c, pos), pv, sizeof pv);
    for (int64_t j = 0; j < (int64_t)R * nh * hd; j++) {
      if (f64) dfl_cpu_f64(&c, x)[j] = xv[j];
      else dfl_cpu_f32(&c, x)[j] = (float)xv[j];
    }
    CHECK(dfl_cpu_run(&c, DFL_PH_ALL) == DFL_OK, "rope run");
    double err = 0;
    for (int64_t j = 0; j < (int64_t)R * nh * hd; j++) {
      double d = fabs((f64 ? dfl_cpu_f64(&c, y)[j] : dfl_cpu_f32(&c, y)[j]) - ref[j]);
      if (!(d <= err)) err = d;
    }
    CHECK(err <= (f64 ? 1e-12 : 2e-6), "partial rope nh=%d hd=%d rd=%d (%s): max error %.3e", nh, hd, rd, f64 ? "f64" : "f32", err);
    printf("  partial rope nh=%d hd=%d rot=%-3d            %s max %.2e\n", nh, hd, rd, f64 ? "f64" : "f32", err);
    dfl_cpu_free(&c);
  }
  free(xv), free(ref);
  dfl_graph_free(&g);
}

/* The op table's rows in this file (tests/ir/op_table.h): the cases main runs, by op. */
/* GATED_DELTA at sequence lengths 1, 63, 64, 65, 200 (two sequences, GVA 3), then one of 130 (MHA). */
static void gated_delta_cases(void) {
  const int lens[] = {1, 63, 64, 65, 200};
  for (int i = 0; i < 5; i++) case_gated_delta(lens[i], 2, 2, 3, 16, 8);
  case_gated_delta(130, 1, 1, 1, 32, 32);
}
OP_CASE(optab_hybrid_gated_delta, failures, rs, gated_delta_cases())
OP_CASE(optab_hybrid_conv, failures, rs, case_conv(1, 3, 5, 4), case_conv(70, 2, 12, 4), case_conv(9, 2, 7, 2))
OP_CASE(optab_hybrid_rows, failures, rs, case_rows())
OP_CASE(optab_hybrid_partial_rope, failures, rs, case_partial_rope(3, 32, 8), case_partial_rope(2, 64, 16),
        case_partial_rope(2, 16, 16))

DFL_TEST_MAIN {
  const char *seed = getenv("DFL_SEED");
  rs = seed ? strtoull(seed, NULL, 10) : (unsigned long long)time(NULL);
  printf("test_hybrid_ops: DFL_SEED=%llu\n", rs);
  gated_delta_cases();
  case_conv(1, 3, 5, 4);
  case_conv(70, 2, 12, 4);
  case_conv(9, 2, 7, 2);
  case_rows();
  case_windows();
  case_partial_rope(3, 32, 8);
  case_partial_rope(2, 64, 16);
  case_partial_rope(2, 16, 16);
  printf("%s\n", failures ? "FAIL" : "ok");
  return failures ? 1 : 0;
}
