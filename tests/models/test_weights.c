/*
** test_weights: HF initialisation (norms 1, linear N(0, 0.02), reproducible from the seed),
** loading by name with strict shapes (wrong shape and missing tensor refused, naming the tensor
** and both shapes), config.json reading, and the per-tensor stream entered at any value.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "models/models.h"
#include "runtime/io/weights.h"
#include "runtime/cpu/cpu.h"
#include "runtime/io/safetensors.h"

static int failures;
#include "tests/common/check.h"

static void small_spec(dfl_spec *s) {
  memset(s, 0, sizeof *s);
  dfl_arch a = {.family = DFL_FAMILY_QWEN3, .hidden = 32, .layers = 2, .heads = 2, .kv_heads = 1, .head_dim = 16,
                .intermediate = 48, .vocab = 40, .rope_theta = 10000.0, .rms_eps = 1e-6, .qk_norm = 1, .max_positions = 4096};
  s->drafter = a;
  s->target = a;
  s->target.layers = 4;
  s->n_taps = 2;
  s->taps[0] = 1;
  s->taps[1] = 2;
  s->sliding[0] = 1;
  s->window[0] = 5;
  s->block_size = 4;
  s->mask_token = 39;
  s->seq_len = 16;
  s->anchors = 3;
  s->batch = 2;
  s->gamma = 7;
  s->precision = DFL_PREC_FP32;
}

/* Write the PARAMs of c to path; `bad` (if >= 0) is written with its dims swapped, `skip` left out. */
static void write_params(dfl_cpu *c, const char *path, int bad, int skip) {
  const dfl_graph *g = c->g;
  dfl_st_out *o = calloc((size_t)g->nt, sizeof *o);
  int n = 0;
  for (int t = 0; t < g->nt; t++) {
    if (g->t[t].kind != DFL_T_PARAM || t == skip) continue;
    o[n].name = g->t[t].name;
    o[n].dtype = DFL_ST_F32;
    o[n].ndim = g->t[t].ndim;
    for (int k = 0; k < g->t[t].ndim; k++) o[n].shape[k] = g->t[t].shape[k];
    if (t == bad) { o[n].shape[0] = g->t[t].shape[1]; o[n].shape[1] = g->t[t].shape[0]; }
    o[n].f32 = dfl_cpu_f32(c, t);
    n++;
  }
  char err[512];
  int rc = dfl_st_write(path, o, n, NULL, 0, err, sizeof err);
  CHECK(rc == DFL_OK, "write %s: %s", path, err);
  free(o);
}

static void count_line(void *ctx, const char *msg) {
  (void)msg;
  ++*(int *)ctx;
}

/* Concatenations "P{x,y,z}Q" (models/target_hybrid.c's z|a|b): the parts' rows in order; a missing part,
** a part of other columns, rows that do not sum and a malformed group refused by the check and the loader. */
static void test_concat(void) {
  float zv[12], av[3] = {100, 101, 102}, bv[6] = {200, 201, 202, 203, 204, 205};
  for (int i = 0; i < 12; i++) zv[i] = (float)i;
  char err[512], path[64];
  snprintf(path, sizeof path, "/tmp/dfl_test_cat_%d.safetensors", (int)getpid());
  dfl_st_out o[3] = {{.name = "l.in_proj_z.weight", .dtype = DFL_ST_BF16, .ndim = 2, .shape = {4, 3}, .f32 = zv},
                     {.name = "l.in_proj_a.weight", .dtype = DFL_ST_F32, .ndim = 2, .shape = {1, 3}, .f32 = av},
                     {.name = "l.in_proj_b.weight", .dtype = DFL_ST_BF16, .ndim = 2, .shape = {2, 3}, .f32 = bv}};
  const char *names[] = {"l.in_proj_{z,a,b}.weight", "l.in_proj_{z,a,c}.weight", "l.in_proj_{z,a}.weight",
                         "l.in_proj_{z,,b}.weight", "l.in_proj_{z,a.weight", "l.in_proj_{z}{a}.weight"};
  const int64_t rows[] = {7, 7, 7, 7, 7, 7};
  for (int k = 0; k < 6; k++) {
    for (int cols_bad = 0; cols_bad < (k == 0 ? 2 : 1); cols_bad++) {
      o[1].ndim = cols_bad ? 1 : 2, o[1].shape[0] = cols_bad ? 3 : 1, o[1].shape[1] = cols_bad ? 0 : 3;
      CHECK(dfl_st_write(path, o, 3, NULL, 0, err, sizeof err) == DFL_OK, "write: %s", err);
      dfl_st st;
      CHECK(dfl_st_open(&st, path, err, sizeof err) == DFL_OK, "open: %s", err);
      dfl_graph g;
      dfl_graph_init(&g);
      int t = dfl_tensor_2d(&g, names[k], DFL_F32, DFL_T_FROZEN, rows[k], 3);
      const int good = k == 0 && !cols_bad;
      int n = 0;
      CHECK(dfl_weights_check(&g, &st, DFL_KIND_BIT(DFL_T_FROZEN), "", count_line, &n) == !good && n == !good,
            "check of %s%s: %d problems", names[k], cols_bad ? " (a part of other columns)" : "", n);
      dfl_cpu c;
      CHECK(dfl_cpu_init(&c, &g, NULL, 0) == DFL_OK, "cpu");
      err[0] = 0;
      int rc = dfl_weights_load(&c, &st, DFL_KIND_BIT(DFL_T_FROZEN), "", err, sizeof err);
      if (good) {
        const float *y = dfl_cpu_f32(&c, t);
        CHECK(rc == DFL_OK, "load %s: %s", names[k], err);
        CHECK(rc == DFL_OK && y[0] == 0 && y[11] == 11 && y[12] == 100 && y[14] == 102 && y[15] == 200 && y[20] == 205,
              "%s: the rows of z, then a, then b", names[k]);
      } else {
        CHECK(rc != DFL_OK && err[0], "%s%s loaded", names[k], cols_bad ? " (a part of other columns)" : "");
        printf("  %s%s: %s\n", names[k], cols_bad ? " (a part of other columns)" : "", err);
      }
      dfl_cpu_free(&c);
      dfl_graph_free(&g);
      dfl_st_close(&st);
    }
  }
  unlink(path);
}

/* The header check (dfl_weights_check) and the loader agree, through row selections NAME[a:b/p],
** (1+w) norms, integer dtypes where floats belong, and NaN/Inf found while converting. */
static void test_header_check(void) {
  dfl_graph g;
  dfl_graph_init(&g);
  int sel = dfl_tensor_2d(&g, "x.weight[1:3/4]", DFL_F32, DFL_T_FROZEN, 4, 3);   /* rows i % 4 in 1..2 of [8,3] */
  int nrm = dfl_tensor_1d(&g, "n.weight(1+w)", DFL_F32, DFL_T_FROZEN, 3);
  int pl = dfl_tensor_2d(&g, "y.weight", DFL_F32, DFL_T_FROZEN, 2, 3);
  CHECK(sel >= 0 && nrm >= 0 && pl >= 0, "graph");
  float xv[24], nv[3] = {0, 0.5f, -0.5f}, yv[6] = {1, 2, 3, 4, 5, 6};
  for (int i = 0; i < 24; i++) xv[i] = (float)i;
  char err[512];
  dfl_st st;
  char path[64];
  snprintf(path, sizeof path, "/tmp/dfl_test_hdr_%d.safetensors", (int)getpid());
  /* good: [8,3] with period 4 */
  dfl_st_out o[3] = {{.name = "x.weight", .dtype = DFL_ST_BF16, .ndim = 2, .shape = {8, 3}, .f32 = xv},
                     {.name = "n.weight", .dtype = DFL_ST_F32, .ndim = 1, .shape = {3}, .f32 = nv},
                     {.name = "y.weight", .dtype = DFL_ST_BF16, .ndim = 2, .shape = {2, 3}, .f32 = yv}};
  CHECK(dfl_st_write(path, o, 3, NULL, 0, err, sizeof err) == DFL_OK, "write: %s", err);
  CHECK(dfl_st_open(&st, path, err, sizeof err) == DFL_OK, "open: %s", err);
  int n = 0;
  CHECK(dfl_weights_check(&g, &st, DFL_KIND_BIT(DFL_T_FROZEN), "", count_line, &n) == 0 && n == 0,
        "a good header refused (%d problems)", n);
  dfl_cpu c;
  CHECK(dfl_cpu_init(&c, &g, NULL, 0) == DFL_OK, "cpu");
  CHECK(dfl_weights_load(&c, &st, DFL_KIND_BIT(DFL_T_FROZEN), "", err, sizeof err) == DFL_OK, "load: %s", err);
  CHECK(dfl_cpu_f32(&c, sel)[0] == 3 && dfl_cpu_f32(&c, sel)[3] == 6 && dfl_cpu_f32(&c, sel)[6] == 15, "rows 1,2,5,6");
  CHECK(dfl_cpu_f32(&c, nrm)[1] == 1.5f, "(1+w)");
  dfl_st_close(&st);
  /* [6,3]: the period 4 does not divide 6 rows */
  o[0].shape[0] = 6;
  CHECK(dfl_st_write(path, o, 3, NULL, 0, err, sizeof err) == DFL_OK, "write: %s", err);
  CHECK(dfl_st_open(&st, path, err, sizeof err) == DFL_OK, "open: %s", err);
  n = 0;
  CHECK(dfl_weights_check(&g, &st, DFL_KIND_BIT(DFL_T_FROZEN), "", count_line, &n) == 1 && n == 1,
        "a period that does not divide the rows passed the check");
  CHECK(dfl_weights_load(&c, &st, DFL_KIND_BIT(DFL_T_FROZEN), "", err, sizeof err) == DFL_ESHAPE && strstr(err, "x.weight"),
        "load of [6,3] rows: %s", err);
  dfl_st_close(&st);
  /* an integer dtype for a float weight: refused by the check and by the loader */
  int32_t yi[6] = {1, 2, 3, 4, 5, 6};
  o[0].shape[0] = 8;
  o[2].dtype = DFL_ST_I16;
  o[2].f32 = NULL;
  o[2].i32 = yi;
  CHECK(dfl_st_write(path, o, 3, NULL, 0, err, sizeof err) == DFL_OK, "write: %s", err);
  CHECK(dfl_st_open(&st, path, err, sizeof err) == DFL_OK, "open: %s", err);
  n = 0;
  CHECK(dfl_weights_check(&g, &st, DFL_KIND_BIT(DFL_T_FROZEN), "", count_line, &n) == 1, "I16 weight passed the check");
  err[0] = 0;
  CHECK(dfl_weights_load(&c, &st, DFL_KIND_BIT(DFL_T_FROZEN), "", err, sizeof err) != DFL_OK && strstr(err, "y.weight") &&
        strstr(err, "I16"), "I16 weight loaded: %s", err);
  printf("  integer dtype: %s\n", err);
  dfl_st_close(&st);
  /* NaN and Inf: refused while converting, naming the tensor and the element */
  for (int k = 0; k < 2; k++) {
    o[2].dtype = k ? DFL_ST_F32 : DFL_ST_BF16;
    o[2].i32 = NULL;
    o[2].f32 = yv;
    yv[4] = k ? INFINITY : NAN;
    CHECK(dfl_st_write(path, o, 3, NULL, 0, err, sizeof err) == DFL_OK, "write: %s", err);
    CHECK(dfl_st_open(&st, path, err, sizeof err) == DFL_OK, "open: %s", err);
    CHECK(dfl_weights_check(&g, &st, DFL_KIND_BIT(DFL_T_FROZEN), "", NULL, NULL) == 0, "the header is fine");
    err[0] = 0;
    CHECK(dfl_weights_load(&c, &st, DFL_KIND_BIT(DFL_T_FROZEN), "", err, sizeof err) == DFL_EFORMAT &&
          strstr(err, "y.weight") && strstr(err, "element 4") && strstr(err, k ? "+Inf" : "NaN"), "non-finite loaded: %s", err);
    printf("  non-finite: %s\n", err);
    dfl_st_close(&st);
    yv[4] = 5;
  }
  dfl_cpu_free(&c);
  dfl_graph_free(&g);
  unlink(path);
}

int main(void) {
  uint64_t seed = (uint64_t)time(NULL);
  printf("test_weights: seed %llu\n", (unsigned long long)seed);
  dfl_spec s;
  small_spec(&s);
  dfl_train_graph tg;
  CHECK(dfl_model_eval_graph(&tg, &s, 0) == DFL_OK, "eval graph");
  const dfl_graph *g = &tg.g;
  CHECK(tg.drafter.n_params == 2 + 11 * s.drafter.layers + 1, "n_params %d", tg.drafter.n_params);
  CHECK(!strcmp(g->t[tg.drafter.params[0]].name, "fc.weight"), "first param %s", g->t[tg.drafter.params[0]].name);
  CHECK(g->t[tg.drafter.params[0]].shape[1] == 2 * 32, "fc is [H, k*H]");

  dfl_cpu c1, c2, c3;
  dfl_cpu_init(&c1, g, NULL, 0);
  dfl_cpu_init(&c2, g, NULL, 0);
  dfl_cpu_init(&c3, g, NULL, 0);
  unsigned pk = DFL_KIND_BIT(DFL_T_PARAM);
  dfl_weights_init(&c1, pk, seed, 0.02);
  dfl_weights_init(&c2, pk, seed, 0.02);
  dfl_weights_init(&c3, pk, seed + 1, 0.02);
  /* dfl_weights_rng positioned at a value continues the tensor's stream from there (the GPU's
  ** threads draw segments of one tensor this way: cuda_init) */
  int tf = tg.drafter.params[0];
  int64_t nf = dfl_tensor_numel(&g->t[tf]), first = nf / 3 + 1, seg_bad = 0;
  dfl_rng rs;
  dfl_weights_rng(&rs, seed, g->t[tf].name, first);
  for (int64_t j = first; j < nf; j++) seg_bad += (float)(0.02 * (double)dfl_rng_normal(&rs)) != dfl_cpu_f32(&c1, tf)[j];
  CHECK(nf > 100 && seg_bad == 0, "%s from value %lld: %lld values differ from dfl_weights_init's", g->t[tf].name,
        (long long)first, (long long)seg_bad);
  for (int i = 0; i < tg.drafter.n_params; i++) {
    int t = tg.drafter.params[i];
    int64_t n = dfl_tensor_numel(&g->t[t]);
    const float *a = dfl_cpu_f32(&c1, t), *b = dfl_cpu_f32(&c2, t), *d = dfl_cpu_f32(&c3, t);
    CHECK(!memcmp(a, b, sizeof(float) * (size_t)n), "%s: same seed, different values", g->t[t].name);
    if (g->t[t].ndim == 1) {
      for (int64_t j = 0; j < n; j++) CHECK(a[j] == 1.0f, "%s[%lld] = %g, norms start at 1", g->t[t].name, (long long)j, a[j]);
      continue;
    }
    CHECK(memcmp(a, d, sizeof(float) * (size_t)n), "%s: another seed, same values", g->t[t].name);
    double m = 0, v = 0;
    for (int64_t j = 0; j < n; j++) m += a[j];
    m /= n;
    for (int64_t j = 0; j < n; j++) v += (a[j] - m) * (a[j] - m);
    double sd = sqrt(v / n);
    /* n >= 512 here: the sample std is within ~6% of 0.02 with overwhelming probability. */
    CHECK(fabs(sd - 0.02) < 0.2 * 0.02 && fabs(m) < 0.2 * 0.02, "%s: mean %g std %g, want N(0, 0.02)", g->t[t].name, m, sd);
  }

  /* Round trip through a safetensors file, then the refusals. */
  char dir[] = "/tmp/dflc_weights_XXXXXX", path[128], err[512];
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  snprintf(path, sizeof path, "%s/w.safetensors", dir);
  write_params(&c1, path, -1, -1);
  CHECK(dfl_weights_load_path(&c3, path, pk, "", err, sizeof err) == DFL_OK, "load: %s", err);
  for (int i = 0; i < tg.drafter.n_params; i++) {
    int t = tg.drafter.params[i];
    CHECK(!memcmp(dfl_cpu_f32(&c1, t), dfl_cpu_f32(&c3, t), sizeof(float) * (size_t)dfl_tensor_numel(&g->t[t])),
          "%s: loaded values differ", g->t[t].name);
  }
  int q = dfl_tensor_find(g, "layers.1.self_attn.q_proj.weight");
  int k = dfl_tensor_find(g, "layers.0.self_attn.k_proj.weight");
  CHECK(q >= 0 && k >= 0, "params by name");
  write_params(&c1, path, k, -1);
  err[0] = 0;
  int rc = dfl_weights_load_path(&c3, path, pk, "", err, sizeof err);
  printf("  wrong shape: %s\n", err);
  CHECK(rc != DFL_OK && strstr(err, "layers.0.self_attn.k_proj.weight") && strstr(err, "[16, 32]") && strstr(err, "[32, 16]"),
        "wrong shape not refused clearly (rc %d): %s", rc, err);
  write_params(&c1, path, -1, q);
  err[0] = 0;
  rc = dfl_weights_load_path(&c3, path, pk, "", err, sizeof err);
  printf("  missing: %s\n", err);
  CHECK(rc != DFL_OK && strstr(err, "layers.1.self_attn.q_proj.weight") && strstr(err, "missing"),
        "missing tensor not refused clearly (rc %d): %s", rc, err);
  /* A prefix: the fixture layout ("param." + name). */
  CHECK(dfl_weights_load_path(&c3, path, pk, "param.", err, sizeof err) != DFL_OK && strstr(err, "param.fc.weight"),
        "prefix lookup: %s", err);
  unlink(path);
  rmdir(dir);

  /* config.json */
  dfl_arch a;
  CHECK(dfl_hf_arch_load("examples/models/nano/config.json", &a, err, sizeof err) == DFL_OK, "nano config: %s", err);
  CHECK(a.hidden == 128 && a.layers == 4 && a.heads == 4 && a.kv_heads == 2 && a.head_dim == 32 &&
        a.intermediate == 384 && a.vocab == 8192 && a.rope_theta == 10000.0 && a.qk_norm && !a.tie_embeddings &&
        a.rms_eps == 1e-6, "nano config read wrong");
  CHECK(dfl_hf_arch_load("examples/models/tiny/config.json", &a, err, sizeof err) == DFL_OK && a.layers == 8 &&
        a.hidden == 384 && a.head_dim == 64, "tiny config: %s", err);
  CHECK(dfl_hf_arch_load("examples/models/nano/missing.json", &a, err, sizeof err) != DFL_OK &&
        strstr(err, "missing.json"), "missing config not named: %s", err);

  dfl_cpu_free(&c1);
  dfl_cpu_free(&c2);
  dfl_cpu_free(&c3);
  dfl_graph_free(&tg.g);
  test_header_check();
  test_concat();
  printf("%s\n", failures ? "FAILED" : "passed");
  return failures ? 1 : 0;
}
