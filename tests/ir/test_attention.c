/* test_attention.c: the DFlash mask predicate on the reference's example, the ATTENTION kernel
** (causal and DFlash, full and sliding, GQA, invalid blocks, anchors near the end) against a
** dense reference that materialises the mask, in f32 and f64 modes, and its gradients against
** finite differences. */
#include "irtest.h"

typedef struct {
  int batch, S, N, B, nh, nkv, hd, W, dflash;
  int anchors[64], keep[64];
} cfg;

static void random_anchors(cfg *k) {
  for (int i = 0; i < k->batch * k->N; i++) {
    int r = irand(4);
    k->keep[i] = r != 0;
    /* r == 1: an anchor at the very end or within B of it (partial tail); invalid blocks get 0 */
    k->anchors[i] = !k->keep[i] ? 0 : r == 1 ? k->S - 1 - irand(k->B < k->S ? k->B : 1) : irand(k->S);
  }
  k->keep[0] = 1, k->anchors[0] = 0; /* anchor 0: no context key at all, only the block */
}

static int build(dfl_graph *g, const cfg *k, dfl_dtype dt, int *io) {
  int qd = k->nh * k->hd, kd = k->nkv * k->hd;
  int Q = k->N * k->B, qrows = k->dflash ? k->batch * Q : k->batch * k->S;
  dfl_attrs a = {0};
  a.mask = k->dflash ? DFL_MASK_DFLASH : DFL_MASK_CAUSAL;
  a.batch = k->batch, a.S = k->S, a.N = k->N, a.B = k->B, a.heads = k->nh, a.kv_heads = k->nkv, a.head_dim = k->hd;
  a.window = k->W, a.scale = 1.0 / sqrt((double)k->hd);
  int n = 0;
  io[n++] = dfl_tensor_2d(g, "q", dt, DFL_T_PARAM, qrows, qd);
  io[n++] = dfl_tensor_2d(g, "k", dt, DFL_T_PARAM, k->batch * k->S, kd);
  io[n++] = dfl_tensor_2d(g, "v", dt, DFL_T_PARAM, k->batch * k->S, kd);
  if (k->dflash) {
    io[n++] = dfl_tensor_2d(g, "kn", dt, DFL_T_PARAM, qrows, kd);
    io[n++] = dfl_tensor_2d(g, "vn", dt, DFL_T_PARAM, qrows, kd);
    io[n++] = dfl_tensor_2d(g, "anchors", DFL_I32, DFL_T_INPUT, k->batch, k->N);
    io[n++] = dfl_tensor_2d(g, "keep", DFL_I32, DFL_T_INPUT, k->batch, k->N);
  }
  int o = dfl_tensor_2d(g, "o", dt, DFL_T_ACT, qrows, qd);
  int lse = dfl_tensor_1d(g, "lse", DFL_F32, DFL_T_ACT, (int64_t)qrows * k->nh);
  int out[2] = {o, lse};
  dfl_op_add(g, DFL_OP_ATTENTION, io, n, out, 2, &a);
  io[n] = o, io[n + 1] = lse;
  return n;
}

static void set_anchors(dfl_cpu *c, const cfg *k, const int *io) {
  if (!k->dflash) return;
  set_ints(c, io[5], k->anchors);
  set_ints(c, io[6], k->keep);
}

/* Dense reference: score every (query, key) pair, mask with the predicate, softmax. */
static void dense(const cfg *k, const double *q, const double *kc, const double *vc, const double *kn, const double *vn,
                  double *o, double *lse) {
  int qd = k->nh * k->hd, kd = k->nkv * k->hd, Q = k->N * k->B;
  int rows_per = k->dflash ? Q : k->S, KV = k->dflash ? k->S + Q : k->S;
  double *sc = malloc((size_t)KV * sizeof *sc);
  for (int b = 0; b < k->batch; b++)
    for (int r = 0; r < rows_per; r++)
      for (int h = 0; h < k->nh; h++) {
        int row = b * rows_per + r, kh = h / (k->nh / k->nkv);
        const double *qv = q + (int64_t)row * qd + h * k->hd;
        double mx = -INFINITY;
        for (int kv = 0; kv < KV; kv++) {
          int ok;
          if (k->dflash) ok = dfl_dflash_allowed(k->S, k->B, k->W, k->anchors[b * k->N + r / k->B], k->keep[b * k->N + r / k->B], r, kv);
          else ok = kv <= r && (k->W == 0 || kv > r - k->W);
          sc[kv] = -INFINITY;
          if (!ok) continue;
          const double *kr = kv < k->S ? kc + (int64_t)(b * k->S + kv) * kd : kn + (int64_t)(b * Q + kv - k->S) * kd;
          double d = 0;
          for (int e = 0; e < k->hd; e++) d += qv[e] * kr[kh * k->hd + e];
          sc[kv] = d / sqrt((double)k->hd);
          mx = fmax(mx, sc[kv]);
        }
        double *ov = o + (int64_t)row * qd + h * k->hd;
        for (int e = 0; e < k->hd; e++) ov[e] = 0;
        if (mx == -INFINITY) { lse[row * k->nh + h] = -INFINITY; continue; }
        double s = 0;
        for (int kv = 0; kv < KV; kv++) s += sc[kv] == -INFINITY ? 0 : exp(sc[kv] - mx);
        for (int kv = 0; kv < KV; kv++) {
          if (sc[kv] == -INFINITY) continue;
          double p = exp(sc[kv] - mx) / s;
          const double *vr = kv < k->S ? vc + (int64_t)(b * k->S + kv) * kd : vn + (int64_t)(b * Q + kv - k->S) * kd;
          for (int e = 0; e < k->hd; e++) ov[e] += p * vr[kh * k->hd + e];
        }
        lse[row * k->nh + h] = mx + log(s);
      }
  free(sc);
}

static void check_forward(const char *what, cfg *k, int f64) {
  dfl_graph g;
  dfl_graph_init(&g);
  int io[16];
  int n = build(&g, k, f64 ? DFL_F64 : DFL_F32, io);
  dfl_cpu c;
  dfl_cpu_init(&c, &g, NULL, f64);
  int nf = k->dflash ? 5 : 3;
  for (int i = 0; i < nf; i++) fill_rand(&c, io[i], 1.5);
  set_anchors(&c, k, io);
  CHECK(dfl_cpu_run(&c, DFL_PH_ALL) == DFL_OK);
  double *in[5] = {0};
  for (int i = 0; i < nf; i++) in[i] = get_all(&c, io[i]);
  int64_t no = dfl_tensor_numel(&g.t[io[n]]), nl = dfl_tensor_numel(&g.t[io[n + 1]]);
  double *o = get_all(&c, io[n]), *lse = get_all(&c, io[n + 1]);
  double *ro = malloc((size_t)no * sizeof *ro), *rl = malloc((size_t)nl * sizeof *rl);
  dense(k, in[0], in[1], in[2], in[3], in[4], ro, rl);
  /* masked rows: lse -inf in both; compare finite values otherwise */
  int masked_ok = 1;
  for (int64_t i = 0; i < nl; i++) {
    if (isinf(rl[i]) != isinf(lse[i])) masked_ok = 0;
    if (isinf(rl[i])) rl[i] = lse[i] = 0;
  }
  char msg[128];
  snprintf(msg, sizeof msg, "%s %s: o", what, f64 ? "f64" : "f32");
  CHECK(masked_ok);
  near(msg, o, ro, no, f64 ? 1e-12 : 2e-5, 1e-2);
  snprintf(msg, sizeof msg, "%s %s: lse", what, f64 ? "f64" : "f32");
  near(msg, lse, rl, nl, f64 ? 1e-12 : 2e-5, 1e-2);
  for (int i = 0; i < nf; i++) free(in[i]);
  free(o), free(lse), free(ro), free(rl);
  dfl_cpu_free(&c);
  dfl_graph_free(&g);
}

static void fill_anchor_ctx(dfl_cpu *c, void *p) {
  cfg *k = p;
  int n = 0;
  for (int i = 0; i < c->g->nt; i++)
    if (c->g->t[i].kind == DFL_T_INPUT && !strcmp(c->g->t[i].name, "anchors")) n = i;
  if (k->dflash) {
    set_ints(c, n, k->anchors);
    set_ints(c, n + 1, k->keep);
  }
}

static void check_grad(const char *what, cfg *k) {
  dfl_graph g;
  dfl_graph_init(&g);
  int io[16];
  int n = build(&g, k, DFL_F64, io);
  char msg[128];
  snprintf(msg, sizeof msg, "%s grad", what);
  gradcheck(msg, &g, io[n], io, k->dflash ? 5 : 3, fill_anchor_ctx, k, 0, 1e-6);
  dfl_graph_free(&g);
}

/* ATTENTION's forward (causal, sliding, MHA; DFlash full and sliding) against the dense reference,
** f32 and f64; the op table's forward row (tests/ir/op_table.h). */
static void attention_forwards(void) {
  for (int f64 = 0; f64 < 2; f64++) {
    cfg k = {.batch = 2, .S = 11, .nh = 4, .nkv = 2, .hd = 4};
    check_forward("causal", &k, f64);
    k.W = 3;
    check_forward("causal sliding", &k, f64);
    k.nkv = 4, k.W = 0;
    check_forward("causal mha", &k, f64);
    cfg d = {.batch = 2, .S = 10, .N = 4, .B = 4, .nh = 4, .nkv = 2, .hd = 4, .dflash = 1};
    random_anchors(&d);
    check_forward("dflash full", &d, f64);
    d.W = 3;
    check_forward("dflash sliding", &d, f64);
  }
}

/* ATTENTION's gradient (ATTENTION_BWD) against finite differences; the op table's gradient row. */
static void attention_grads(void) {
  cfg k = {.batch = 2, .S = 6, .nh = 2, .nkv = 1, .hd = 4};
  check_grad("causal", &k);
  k.W = 2;
  check_grad("causal sliding", &k);
  cfg d = {.batch = 2, .S = 7, .N = 3, .B = 3, .nh = 4, .nkv = 2, .hd = 2, .dflash = 1};
  random_anchors(&d);
  check_grad("dflash full", &d);
  d.W = 3;
  check_grad("dflash sliding", &d);
}

OP_CASE(optab_attention_forward, fails, rng_s, attention_forwards())
OP_CASE(optab_attention_grad, fails, rng_s, attention_grads())

DFL_TEST_MAIN {
  rng_init("ir_attention");
  /* reference §1.4 sliding example: S=12, B=4, W=4, a=6 */
  static const int want[4][4] = {{3, 4, 5, 12}, {4, 5, 12, 13}, {5, 12, 13, 14}, {12, 13, 14, 15}};
  for (int j = 0; j < 4; j++) {
    int got[32], ng = 0;
    for (int kv = 0; kv < 16; kv++)
      if (dfl_dflash_allowed(12, 4, 4, 6, 1, j, kv)) got[ng++] = kv;
    CHECK(ng == 4 && !memcmp(got, want[j], sizeof want[j]));
    /* full layer: [0, 6) and the whole own block; invalid block: nothing */
    int nf = 0, ni = 0;
    for (int kv = 0; kv < 16; kv++) {
      nf += dfl_dflash_allowed(12, 4, 0, 6, 1, j, kv) == (kv < 6 || kv >= 12);
      ni += dfl_dflash_allowed(12, 4, 0, 6, 0, j, kv);
    }
    CHECK(nf == 16 && ni == 0);
    /* second block (q = 4 + j) never sees block 0's keys */
    CHECK(!dfl_dflash_allowed(12, 4, 0, 6, 1, 4 + j, 12 + j));
  }

  attention_forwards();
  attention_grads();
  if (fails) { fprintf(stderr, "%d check(s) failed\n", fails); return 1; }
  printf("ir_attention: ok\n");
  return 0;
}
