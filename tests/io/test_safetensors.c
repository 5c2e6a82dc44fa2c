/*
** test_safetensors.c: the safetensors reader and writer.
**  - real checkpoints: nano (single file) and tiny (sharded), whose bf16 embeddings must decode to
**    exactly the fp32 embedding output that Hugging Face computed (golden_forward.safetensors);
**  - bf16/f16 conversion against independent references (exhaustive where cheap);
**  - write/read round trip of every dtype with random data and random shapes;
**  - a table of malformed files, each refused with the expected message fragment.
*/
#include <math.h>
#include <sys/stat.h>
#include <jansson.h>
#include "runtime/io/safetensors.h"
#include "io_test.h"

static dfl_rng R;

/* Golden check: hidden_states.0 (the embedding output, fp32, from HF) == embed[input_ids]. */
static void check_golden(const char *model, const char *golden) {
  char err[512];
  dfl_st w, g;
  int rc = dfl_st_open(&w, model, err, sizeof err);
  CHECK(rc == 0, "open %s: %s", model, err);
  if (rc) return;
  rc = dfl_st_open(&g, golden, err, sizeof err);
  CHECK(rc == 0, "open %s: %s", golden, err);
  if (rc) { dfl_st_close(&w); return; }
  const dfl_st_entry *emb = dfl_st_find(&w, "model.embed_tokens.weight");
  const dfl_st_entry *ids = dfl_st_find(&g, "input_ids"), *h0 = dfl_st_find(&g, "hidden_states.0");
  CHECK(emb && ids && h0, "expected tensors missing");
  if (emb && ids && h0) {
    CHECK(emb->dtype == DFL_ST_BF16 && emb->ndim == 2 && emb->shape[0] == 8192, "embedding %s",
          dfl_st_dtype_name(emb->dtype));
    int64_t H = emb->shape[1], T = dfl_st_numel(ids);
    CHECK(h0->shape[0] == T && h0->shape[1] == H, "golden shape");
    float *E = malloc((size_t)dfl_st_numel(emb) * 4), *X = malloc((size_t)dfl_st_numel(h0) * 4);
    double *E64 = malloc((size_t)dfl_st_numel(emb) * 8);
    int32_t *tok = malloc((size_t)T * 4);
    CHECK(dfl_st_read_f32(&w, emb, E) == 0 && dfl_st_read_f32(&g, h0, X) == 0 &&
          dfl_st_read_i32(&g, ids, tok) == 0 && dfl_st_read_f64(&w, emb, E64) == 0, "read");
    int64_t bad = 0, lowbits = 0, nz = 0;
    for (int64_t t = 0; t < T; t++)
      for (int64_t j = 0; j < H; j++)
        bad += E[(int64_t)tok[t] * H + j] != X[t * H + j];
    for (int64_t i = 0; i < dfl_st_numel(emb); i++) {
      uint32_t u;
      memcpy(&u, &E[i], 4);
      lowbits += (u & 0xffff) != 0;   /* a decoded bf16 has 16 zero low bits */
      nz += E[i] != 0;
      bad += (double)E[i] != E64[i];
    }
    CHECK(bad == 0, "%s: %lld embedding values differ from the golden embedding output", model,
          (long long)bad);
    CHECK(lowbits == 0 && nz > dfl_st_numel(emb) / 2, "bf16 decode: %lld low bits, %lld nonzero",
          (long long)lowbits, (long long)nz);
    free(E); free(X); free(E64); free(tok);
  }
  /* A trained RMSNorm weight: finite, positive on average, not constant. */
  const dfl_st_entry *nw = dfl_st_find(&w, "model.norm.weight");
  CHECK(nw && nw->ndim == 1 && nw->shape[0] == emb->shape[1], "model.norm.weight");
  if (nw) {
    float v[1024];
    dfl_st_read_f32(&w, nw, v);
    double s = 0, s2 = 0;
    int fin = 1;
    for (int i = 0; i < nw->shape[0]; i++) { s += v[i]; s2 += v[i] * v[i]; fin &= isfinite(v[i]); }
    double mean = s / nw->shape[0], var = s2 / nw->shape[0] - mean * mean;
    printf("  %s norm.weight: mean %.4f std %.4f\n", model, mean, sqrt(var > 0 ? var : 0));
    CHECK(fin && mean > 0.01 && mean < 100 && var > 1e-8, "norm stats mean %g var %g", mean, var);
  }
  dfl_st_close(&w);
  dfl_st_close(&g);
}

static void test_models(void) {
  char err[512];
  dfl_st st;
  int rc = dfl_st_open(&st, "examples/models/nano/model.safetensors", err, sizeof err);
  CHECK(rc == 0, "%s", err);
  if (!rc) {
    CHECK(st.n == 47 && st.nfiles == 1, "nano: %d tensors", st.n);   /* 4 layers * 11 + 3 */
    const int64_t qs[2] = {128, 128}, ks[2] = {64, 128}, wrong[2] = {128, 64};
    CHECK(dfl_st_expect(&st, "model.layers.0.self_attn.q_proj.weight", 2, qs, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(dfl_st_expect(&st, "model.layers.3.self_attn.k_proj.weight", 2, ks, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(dfl_st_expect(&st, "model.layers.3.self_attn.k_proj.weight", 2, wrong, NULL, err, sizeof err) == DFL_ESHAPE &&
          !strcmp(err, "examples/models/nano/model.safetensors: tensor model.layers.3.self_attn.k_proj.weight: "
                       "expected shape [128, 64], found [64, 128]"), "message: %s", err);
    CHECK(dfl_st_expect(&st, "model.layers.4.mlp.up_proj.weight", 2, ks, NULL, err, sizeof err) == DFL_ESHAPE &&
          strstr(err, "tensor model.layers.4.mlp.up_proj.weight: missing (the weights"), "message: %s", err);
    dfl_st_close(&st);
  }
  check_golden("examples/models/nano/model.safetensors", "examples/models/nano/golden_forward.safetensors");

  /* tiny: sharded; every weight_map entry must be found in its shard. */
  rc = dfl_st_open(&st, "examples/models/tiny", err, sizeof err);
  CHECK(rc == 0, "%s", err);
  if (!rc) {
    json_t *idx = json_load_file("examples/models/tiny/model.safetensors.index.json", 0, NULL);
    json_t *wm = json_object_get(idx, "weight_map");
    CHECK(st.nfiles == 3 && st.n == (int)json_object_size(wm) && st.n == 8 * 11 + 3, "tiny: %d tensors in %d files",
          st.n, st.nfiles);
    const char *k;
    json_t *v;
    json_object_foreach(wm, k, v) {
      const dfl_st_entry *e = dfl_st_find(&st, k);
      CHECK(e && strstr(st.files[e->file].path, json_string_value(v)), "tiny: %s", k);
    }
    json_decref(idx);
    const int64_t es[2] = {8192, 384};
    CHECK(dfl_st_expect(&st, "model.embed_tokens.weight", 2, es, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(dfl_st_expect(&st, "nope", 2, es, NULL, err, sizeof err) == DFL_ESHAPE &&
          strstr(err, "examples/models/tiny: tensor nope: missing (the weights directory has no tensor nope)"),
          "message: %s", err);
    dfl_st_close(&st);
  }
  check_golden("examples/models/tiny", "examples/models/tiny/golden_forward.safetensors");
}

/* Independent bf16 reference: the nearer of the two truncation neighbours, ties to even. */
static uint16_t ref_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
  double dl = fabs((double)f - dfl_bf16_to_f32(lo)), dh = fabs((double)f - dfl_bf16_to_f32(hi));
  if ((hi & 0x7f80) == 0x7f80 && (hi & 0x7f) == 0)
    dh = fabs((double)f) >= 0x1.ffp127 ? 0 : 1e300;   /* inf iff >= the midpoint to 2^128 (odd max ties up) */
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1) ? hi : lo;
}

static void test_conversions(void) {
  int64_t bad = 0;
  for (int i = 0; i < 2000000; i++) {
    uint32_t u = (uint32_t)dfl_rng_next(&R);
    float f;
    memcpy(&f, &u, 4);
    if (isnan(f)) { bad += !isnan(dfl_bf16_to_f32(dfl_f32_to_bf16(f))); continue; }
    uint16_t a = dfl_f32_to_bf16(f), b = ref_bf16(f);
    if (a != b && bad++ < 5) fprintf(stderr, "bf16(%a): %04x, reference %04x\n", f, a, b);
  }
  CHECK(bad == 0, "%lld bf16 roundings differ from the reference", (long long)bad);
  bad = 0;
  for (uint32_t h = 0; h < 65536; h++) {   /* exhaustive: every f16 survives f16->f32->f16 */
    float f = dfl_f16_to_f32((uint16_t)h);
    if (isnan(f)) { bad += (dfl_f32_to_f16(f) & 0x7c00) != 0x7c00 || !(dfl_f32_to_f16(f) & 0x3ff); continue; }
    bad += dfl_f32_to_f16(f) != h;
    bad += dfl_bf16_to_f32(dfl_f32_to_bf16(dfl_bf16_to_f32((uint16_t)h))) != dfl_bf16_to_f32((uint16_t)h) &&
           !isnan(dfl_bf16_to_f32((uint16_t)h));
  }
  CHECK(bad == 0, "%lld f16/bf16 exhaustive round trips failed", (long long)bad);
#ifdef __FLT16_MAX__
  bad = 0;   /* compiler's _Float16 conversion (IEEE round to nearest even) as the reference */
  for (int i = 0; i < 2000000; i++) {
    float f = (float)((dfl_rng_uniform(&R) * 2 - 1) * ldexp(1.0, (int)dfl_rng_below(&R, 44) - 28));
    _Float16 r = (_Float16)f;
    uint16_t rb;
    memcpy(&rb, &r, 2);
    if (dfl_f32_to_f16(f) != rb && bad++ < 5) fprintf(stderr, "f16(%a): %04x, reference %04x\n", f, dfl_f32_to_f16(f), rb);
  }
  CHECK(bad == 0, "%lld f16 roundings differ from _Float16", (long long)bad);
#else
  printf("  (no _Float16: f16 rounding checked only by round trips)\n");
#endif
}

static void test_roundtrip(const char *dir) {
  char path[1200], err[512];
  snprintf(path, sizeof path, "%s/rt.safetensors", dir);
  enum { NT = 2 * DFL_ST_DTYPE_COUNT + 2 };
  dfl_st_out t[NT];
  char names[NT][32];
  float *f[NT];
  int32_t *iv[NT];
  memset(t, 0, sizeof t);
  for (int i = 0; i < NT; i++) {
    dfl_st_dtype dt = (dfl_st_dtype)(i % DFL_ST_DTYPE_COUNT);
    snprintf(names[i], sizeof names[i], "t%02d.%s", i, dfl_st_dtype_name(dt));
    t[i].name = names[i];
    t[i].dtype = dt;
    t[i].ndim = i == NT - 1 ? 0 : 1 + (int)dfl_rng_below(&R, 3);   /* last one: a scalar */
    int64_t n = 1;
    for (int d = 0; d < t[i].ndim; d++) { t[i].shape[d] = 1 + (int64_t)dfl_rng_below(&R, 9); n *= t[i].shape[d]; }
    if (i == NT - 2) { t[i].shape[0] = 0; n = 0; }                    /* and an empty tensor */
    f[i] = malloc((size_t)(n + 1) * 4);
    iv[i] = malloc((size_t)(n + 1) * 4);
    for (int64_t k = 0; k < n; k++) {
      f[i][k] = dfl_rng_normal(&R) * 100.0f;
      int64_t lo = dt == DFL_ST_I8 ? -128 : dt == DFL_ST_I16 ? -32768 : dt == DFL_ST_U8 || dt == DFL_ST_BOOL ? 0 : -2000000000;
      int64_t hi = dt == DFL_ST_I8 ? 127 : dt == DFL_ST_I16 ? 32767 : dt == DFL_ST_U8 ? 255 : dt == DFL_ST_BOOL ? 1 : 2000000000;
      iv[i][k] = (int32_t)(lo + (int64_t)dfl_rng_below(&R, (uint64_t)(hi - lo + 1)));
    }
    t[i].f32 = f[i];
    t[i].i32 = iv[i];
  }
  const char *meta[] = {"format", "pt", "producer", "dflc test"};
  int rc = dfl_st_write(path, t, NT, meta, 2, err, sizeof err);
  CHECK(rc == 0, "write: %s", err);
  struct stat sb;
  char tmp[1300];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  CHECK(stat(tmp, &sb) != 0, "temporary file left behind");
  dfl_st st;
  rc = dfl_st_open(&st, path, err, sizeof err);
  CHECK(rc == 0, "reopen: %s", err);
  if (rc) return;
  CHECK(st.n == NT && st.files[0].data_start % 8 == 0, "n %d data_start %llu", st.n,
        (unsigned long long)st.files[0].data_start);
  uint64_t total = 0;
  for (int i = 0; i < NT; i++) {
    const dfl_st_entry *e = dfl_st_find(&st, names[i]);
    CHECK(e != NULL, "%s missing", names[i]);
    if (!e) continue;
    int64_t n = dfl_st_numel(e);
    total += e->end - e->begin;
    CHECK(e->dtype == t[i].dtype && e->ndim == t[i].ndim, "%s dtype/rank", names[i]);
    for (int d = 0; d < e->ndim; d++) CHECK(e->shape[d] == t[i].shape[d], "%s shape", names[i]);
    CHECK((st.files[0].data_start + e->begin) % dfl_st_dtype_size(e->dtype) == 0, "%s misaligned", names[i]);
    float *g = malloc((size_t)(n + 1) * 4);
    double *g64 = malloc((size_t)(n + 1) * 8);
    int32_t *gi = malloc((size_t)(n + 1) * 4);
    dfl_st_read_f32(&st, e, g);
    dfl_st_read_f64(&st, e, g64);
    int irc = dfl_st_read_i32(&st, e, gi);
    int64_t bad = 0;
    for (int64_t k = 0; k < n; k++) {
      switch (e->dtype) {
      case DFL_ST_F32: bad += g[k] != f[i][k] || g64[k] != f[i][k]; break;
      case DFL_ST_F64: bad += g64[k] != (double)f[i][k]; break;
      case DFL_ST_BF16: bad += g[k] != dfl_bf16_to_f32(ref_bf16(f[i][k])) || fabsf(g[k] - f[i][k]) > fabsf(f[i][k]) * 0x1p-8f; break;
      case DFL_ST_F16: bad += fabsf(g[k] - f[i][k]) > fabsf(f[i][k]) * 0x1p-11f + 0x1p-25f; break;
      default: bad += g[k] != (float)iv[i][k] || g64[k] != iv[i][k] || irc != 0 || gi[k] != iv[i][k]; break;
      }
    }
    CHECK(bad == 0, "%s: %lld values differ after the round trip", names[i], (long long)bad);
    free(g); free(g64); free(gi);
  }
  CHECK(total == st.files[0].size - st.files[0].data_start, "tensors are not contiguous");
  dfl_st_close(&st);
  /* Integer out of range for the stored dtype is refused, and no file is left behind. */
  int32_t big = 300;
  dfl_st_out o = {.name = "x", .dtype = DFL_ST_I8, .ndim = 1, .shape = {1}, .i32 = &big};
  snprintf(path, sizeof path, "%s/bad.safetensors", dir);
  CHECK(dfl_st_write(path, &o, 1, NULL, 0, err, sizeof err) != 0 && strstr(err, "does not fit I8") &&
        stat(path, &sb) != 0, "out-of-range write: %s", err);
  for (int i = 0; i < NT; i++) { free(f[i]); free(iv[i]); }
}

/* --- malformed files --- */

static size_t mkfile(uint8_t *buf, const char *hdr, uint64_t declared, size_t data) {
  size_t n = strlen(hdr);
  for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(declared >> (8 * i));
  memcpy(buf + 8, hdr, n);
  for (size_t i = 0; i < data; i++) buf[8 + n + i] = (uint8_t)dfl_rng_next(&R);
  return 8 + n + data;
}

typedef struct { const char *what, *hdr; int64_t declared; size_t data; const char *frag; } bad_case;

static void test_malformed(const char *dir) {
  static const bad_case cases[] = {
    {"truncated header", NULL, 0, 0, "shorter than the 8-byte"},
    {"header length past EOF", "{}", 4096, 0, "runs past the end of the file"},
    {"header length over limit", "{}", 200000000, 0, "over the 100000000-byte limit"},
    {"not JSON", "{\"a\": {\"dtype\": \"F32\", ", -1, 0, "header is not valid JSON"},
    {"not an object", "[1, 2, 3]", -1, 0, "header is not a JSON object"},
    {"duplicate key", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                      "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", -1, 8, "duplicate"},
    {"overlapping ranges", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                           "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", -1, 12, "overlap tensor"},
    {"offsets out of range", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", -1, 8,
     "tensor a: data_offsets [0, 16] run past the data area (8 bytes)"},
    {"size mismatch", "{\"a\":{\"dtype\":\"BF16\",\"shape\":[3,2],\"data_offsets\":[0,8]}}", -1, 8,
     "tensor a: size mismatch: BF16 [3, 2] needs 12 bytes, data_offsets span 8"},
    {"unknown dtype", "{\"q\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]}}", -1, 1,
     "tensor q: dtype F8_E4M3 is not supported"},
    {"negative dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1,4],\"data_offsets\":[0,0]}}", -1, 0,
     "tensor a: shape entry 0 is not a non-negative integer"},
    {"overflowing shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}", -1, 0,
     "tensor a: shape overflows"},
    {"byte size overflow", "{\"a\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,0]}}", -1, 0,
     "tensor a: shape overflows"},
    {"shape not array", "{\"a\":{\"dtype\":\"F32\",\"shape\":\"4\",\"data_offsets\":[0,16]}}", -1, 16, "tensor a: entry must be"},
    {"float dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", -1, 4, "tensor a: shape entry 0"},
    {"reversed offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", -1, 8, "tensor a: data_offsets must be"},
    {"metadata not string", "{\"__metadata__\":{\"format\":1}}", -1, 0, "__metadata__ value for \"format\" is not a string"},
    {"too many dims", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", -1, 1, "9 dimensions"},
  };
  uint8_t buf[4096];
  char path[1200], err[512];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const bad_case *c = &cases[i];
    size_t n;
    if (!c->hdr) { n = 5; memset(buf, 1, n); }
    else n = mkfile(buf, c->hdr, c->declared >= 0 ? (uint64_t)c->declared : strlen(c->hdr), c->data);
    snprintf(path, sizeof path, "%s/bad%02zu.safetensors", dir, i);
    io_write_file(path, buf, n);
    dfl_st st;
    int rc = dfl_st_open(&st, path, err, sizeof err);
    CHECK(rc != 0 && strstr(err, c->frag) && strstr(err, path), "%s: rc %d, message \"%s\", expected \"%s\"",
          c->what, rc, err, c->frag);
    printf("  refused %-26s %s\n", c->what, err);
    rc = dfl_st_open_buffer(&st, buf, n, "mem", err, sizeof err);   /* same verdict in memory */
    CHECK(rc != 0 && strstr(err, c->frag), "%s (buffer): %s", c->what, err);
  }

  /* Sharded: a missing shard, a tensor in two shards, an index naming the wrong shard. */
  const char *s1 = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
  const char *s2 = "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                   "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}";
  const char *s3 = "{\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
  struct { const char *what, *index, *frag; } sh[] = {
    {"missing shard", "{\"weight_map\":{\"a\":\"s1.safetensors\",\"z\":\"gone.safetensors\"}}",
     "tensor z: shard"},
    {"same tensor in two shards", "{\"metadata\":{},\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}",
     "tensor a: also present in"},
    {"index names wrong shard", "{\"weight_map\":{\"c\":\"s1.safetensors\",\"x\":\"s3.safetensors\"}}",
     "tensor c: the index maps it to s1.safetensors, but it is in"},
    {"index names absent tensor", "{\"weight_map\":{\"a\":\"s1.safetensors\",\"q\":\"s3.safetensors\"}}",
     "tensor q: the index maps it to s3.safetensors, which does not hold it"},
    {"index without weight_map", "{\"metadata\":{}}", "no \"weight_map\" object"},
    {"index not JSON", "{\"weight_map\":", "not valid JSON"},
  };
  snprintf(path, sizeof path, "%s/s1.safetensors", dir);
  io_write_file(path, buf, mkfile(buf, s1, strlen(s1), 4));
  snprintf(path, sizeof path, "%s/s2.safetensors", dir);
  io_write_file(path, buf, mkfile(buf, s2, strlen(s2), 8));
  snprintf(path, sizeof path, "%s/s3.safetensors", dir);
  io_write_file(path, buf, mkfile(buf, s3, strlen(s3), 4));
  for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) {
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    io_write_file(path, sh[i].index, strlen(sh[i].index));
    dfl_st st;
    int rc = dfl_st_open(&st, dir, err, sizeof err);
    CHECK(rc != 0 && strstr(err, sh[i].frag), "%s: rc %d, message \"%s\", expected \"%s\"", sh[i].what, rc, err,
          sh[i].frag);
    printf("  refused %-26s %s\n", sh[i].what, err);
  }
  /* And a good index over the same shards opens. */
  const char *good = "{\"weight_map\":{\"a\":\"s1.safetensors\",\"c\":\"s3.safetensors\"}}";
  io_write_file(path, good, strlen(good));
  dfl_st st;
  int rc = dfl_st_open(&st, dir, err, sizeof err);
  CHECK(rc == 0 && st.n == 2 && st.nfiles == 2, "good index: %s", err);
  if (!rc) dfl_st_close(&st);
  CHECK(dfl_st_open(&st, "no/such/file.safetensors", err, sizeof err) == DFL_EIO &&
        strstr(err, "no/such/file.safetensors: cannot open"), "missing file: %s", err);
}

int main(void) {
  dfl_rng_seed(&R, io_seed("test_safetensors"));
  char dir[512];
  io_tmpdir(dir, sizeof dir, "st");
  test_models();
  test_conversions();
  test_roundtrip(dir);
  test_malformed(dir);
  io_rmdir(dir);
  return io_finish("test_safetensors");
}
