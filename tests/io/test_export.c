/*
** test_export.c: drafter export in the DFlash Hugging Face format and the loader.
**  random f32 weights -> export -> load: every value is the bf16 rounding of the original;
**  load -> export again: byte-identical model.safetensors and config.json;
**  config.json has the keys SGLang/vLLM read, with the spec's values;
**  refusals: missing/extra/misshapen tensors on export; config or tensor mismatches on load.
*/
#include <jansson.h>
#include <math.h>
#include "runtime/io/export.h"
#include "io_test.h"
#include "tests/common/test_util.h"

static dfl_rng R;

static void make_spec(dfl_spec *s) {
  memset(s, 0, sizeof *s);
  snprintf(s->file, sizeof s->file, "test.dfl");
  s->target = (dfl_arch){.family = DFL_FAMILY_QWEN3, .hidden = 64, .layers = 6, .heads = 4, .kv_heads = 2,
                         .head_dim = 16, .intermediate = 160, .vocab = 300, .rope_theta = 10000.0,
                         .rms_eps = 1e-6, .qk_norm = 1, .max_positions = 4096};
  s->drafter = s->target;
  s->drafter.layers = 3;
  s->drafter.intermediate = 96;
  s->drafter.heads = 8;
  s->drafter.head_dim = 8;
  s->drafter.rope_theta = 1e6;
  s->n_taps = 2;
  s->taps[0] = 1;
  s->taps[1] = 3;
  s->sliding[0] = s->sliding[1] = 1;
  s->window[0] = s->window[1] = 48;
  s->block_size = 8;
  s->mask_token = 290;
}

static int same_file(const char *a, const char *b) {
  size_t na, nb;
  char *x = dfl_test_slurp(a, &na), *y = dfl_test_slurp(b, &nb);
  int same = x && y && na == nb && !memcmp(x, y, na);
  free(x);
  free(y);
  return same;
}

static void check_config(const char *dir, const dfl_spec *s) {
  char p[1200];
  snprintf(p, sizeof p, "%s/config.json", dir);
  json_error_t je;
  json_t *c = json_load_file(p, 0, &je);
  CHECK(c != NULL, "config.json: %s", je.text);
  if (!c) return;
#define INT(k, v) CHECK(json_integer_value(json_object_get(c, k)) == (v) && json_is_integer(json_object_get(c, k)), "config %s", k)
#define STR(k, v) CHECK(json_is_string(json_object_get(c, k)) && !strcmp(json_string_value(json_object_get(c, k)), v), "config %s", k)
  CHECK(!strcmp(json_string_value(json_array_get(json_object_get(c, "architectures"), 0)), "DFlashDraftModel") &&
        json_array_size(json_object_get(c, "architectures")) == 1, "architectures");
  STR("model_type", "qwen3");
  STR("hidden_act", "silu");
  STR("dtype", "bfloat16");
  INT("block_size", s->block_size);
  INT("num_target_layers", s->target.layers);
  INT("num_hidden_layers", s->drafter.layers);
  INT("hidden_size", s->drafter.hidden);
  INT("intermediate_size", s->drafter.intermediate);
  INT("num_attention_heads", s->drafter.heads);
  INT("num_key_value_heads", s->drafter.kv_heads);
  INT("head_dim", s->drafter.head_dim);
  INT("vocab_size", s->target.vocab);
  INT("sliding_window", 48);
  INT("max_position_embeddings", 4096);
  CHECK(json_is_true(json_object_get(c, "use_sliding_window")), "use_sliding_window");
  CHECK(json_is_false(json_object_get(c, "attention_bias")) && json_is_false(json_object_get(c, "tie_word_embeddings")),
        "attention_bias / tie_word_embeddings");
  CHECK(json_is_null(json_object_get(c, "rope_scaling")), "rope_scaling");
  CHECK(json_real_value(json_object_get(c, "rope_theta")) == 1e6 && json_real_value(json_object_get(c, "rms_norm_eps")) == 1e-6 &&
        json_real_value(json_object_get(c, "initializer_range")) == 0.02 && json_is_number(json_object_get(c, "attention_dropout")) &&
        json_number_value(json_object_get(c, "attention_dropout")) == 0, "real-valued keys");
  json_t *lt = json_object_get(c, "layer_types");
  CHECK(json_array_size(lt) == 3 && !strcmp(json_string_value(json_array_get(lt, 0)), "sliding_attention") &&
        !strcmp(json_string_value(json_array_get(lt, 1)), "sliding_attention") &&
        !strcmp(json_string_value(json_array_get(lt, 2)), "full_attention"), "layer_types");
  json_t *dc = json_object_get(c, "dflash_config"), *taps = json_object_get(dc, "target_layer_ids");
  CHECK(json_integer_value(json_object_get(dc, "mask_token_id")) == s->mask_token, "mask_token_id");
  CHECK(json_array_size(taps) == 2 && json_integer_value(json_array_get(taps, 0)) == 1 &&
        json_integer_value(json_array_get(taps, 1)) == 3, "target_layer_ids");
  CHECK(!json_object_get(c, "auto_map"), "auto_map should not be written");
#undef INT
#undef STR
  json_decref(c);
}

int main(void) {
  dfl_rng_seed(&R, io_seed("test_export"));
  char dir[512], d1[700], d2[700], d3[700], err[1024], a[1400], b[1400];
  io_tmpdir(dir, sizeof dir, "export");
  snprintf(d1, sizeof d1, "%s/one", dir);
  snprintf(d2, sizeof d2, "%s/nested/two", dir);
  snprintf(d3, sizeof d3, "%s/three", dir);
  dfl_spec s;
  make_spec(&s);
  int m = dfl_drafter_tensor_count(&s);
  CHECK(m == 3 + 11 * 3, "count %d", m);
  dfl_drafter_tensor *t = malloc((size_t)m * sizeof *t);
  dfl_drafter_tensor_list(&s, t);
  CHECK(!strcmp(t[0].name, "fc.weight") && t[0].shape[0] == 64 && t[0].shape[1] == 128, "fc");
  CHECK(!strcmp(t[3].name, "layers.0.self_attn.q_proj.weight") && t[3].shape[0] == 64 && t[3].shape[1] == 64, "q_proj");
  CHECK(!strcmp(t[4].name, "layers.0.self_attn.k_proj.weight") && t[4].shape[0] == 16, "k_proj");
  CHECK(!strcmp(t[m - 1].name, "norm.weight"), "norm");

  /* Random weights, given in a shuffled order. */
  dfl_st_out *out = calloc((size_t)m, sizeof *out);
  float **orig = calloc((size_t)m, sizeof *orig);
  for (int i = 0; i < m; i++) {
    int64_t n = t[i].shape[0] * (t[i].ndim == 2 ? t[i].shape[1] : 1);
    orig[i] = malloc((size_t)n * 4);
    for (int64_t k = 0; k < n; k++)
      orig[i][k] = t[i].ndim == 1 ? 1.0f + 0.1f * dfl_rng_normal(&R) : 0.02f * dfl_rng_normal(&R);
  }
  int *perm = malloc((size_t)m * sizeof *perm);
  for (int i = 0; i < m; i++) perm[i] = i;
  for (int i = m - 1; i > 0; i--) { int j = (int)dfl_rng_below(&R, (uint64_t)i + 1), x = perm[i]; perm[i] = perm[j]; perm[j] = x; }
  for (int i = 0; i < m; i++) {
    const dfl_drafter_tensor *x = &t[perm[i]];
    out[i] = (dfl_st_out){.name = x->name, .dtype = DFL_ST_F32, .ndim = x->ndim, .shape = {x->shape[0], x->shape[1]},
                          .f32 = orig[perm[i]]};
  }
  int rc = dfl_export_drafter(d1, &s, out, m, err, sizeof err);
  CHECK(rc == 0, "export: %s", err);
  check_config(d1, &s);

  dfl_drafter_weights w;
  rc = dfl_drafter_load(d1, &s, &w, err, sizeof err);
  CHECK(rc == 0, "load: %s", err);
  if (!rc) {
    int64_t bad = 0;
    for (int i = 0; i < m; i++) {
      const float *g = dfl_drafter_get(&w, t[i].name);
      int64_t n = t[i].shape[0] * (t[i].ndim == 2 ? t[i].shape[1] : 1);
      for (int64_t k = 0; g && k < n; k++) {
        uint16_t h = dfl_f32_to_bf16(orig[i][k]);
        bad += g[k] != dfl_bf16_to_f32(h) || fabsf(g[k] - orig[i][k]) > fabsf(orig[i][k]) * 0x1p-8f;
      }
      bad += g == NULL;
    }
    CHECK(bad == 0, "%lld values are not the bf16 rounding of the exported weights", (long long)bad);
    /* Re-export what was loaded: identical bytes. */
    dfl_st_out *o2 = calloc((size_t)m, sizeof *o2);
    for (int i = 0; i < m; i++)
      o2[i] = (dfl_st_out){.name = w.t[i].name, .dtype = DFL_ST_F32, .ndim = w.t[i].ndim,
                           .shape = {w.t[i].shape[0], w.t[i].shape[1]}, .f32 = w.data[i]};
    rc = dfl_export_drafter(d2, &s, o2, m, err, sizeof err);
    CHECK(rc == 0, "re-export: %s", err);
    snprintf(a, sizeof a, "%s/model.safetensors", d1);
    snprintf(b, sizeof b, "%s/model.safetensors", d2);
    CHECK(same_file(a, b), "model.safetensors differs after load -> export");
    snprintf(a, sizeof a, "%s/config.json", d1);
    snprintf(b, sizeof b, "%s/config.json", d2);
    CHECK(same_file(a, b), "config.json differs after load -> export");
    /* The stored file holds exactly the drafter's tensors, in bf16. */
    dfl_st st;
    snprintf(a, sizeof a, "%s/model.safetensors", d1);
    CHECK(dfl_st_open(&st, a, err, sizeof err) == 0 && st.n == m, "reopen: %s", err);
    for (int i = 0; i < st.n; i++) CHECK(st.e[i].dtype == DFL_ST_BF16, "%s not bf16", st.e[i].name);
    CHECK(!dfl_st_find(&st, "embed_tokens.weight") && !dfl_st_find(&st, "lm_head.weight"), "no embedding/head");
    dfl_st_close(&st);

    /* Loader refusals: a tensor missing, a tensor misshapen (a drafter written as raw safetensors). */
    rc = dfl_export_drafter(d3, &s, o2, m, err, sizeof err);
    snprintf(a, sizeof a, "%s/model.safetensors", d3);
    CHECK(dfl_st_write(a, o2, m - 1, NULL, 0, err, sizeof err) == 0, "write");   /* drop norm.weight */
    dfl_drafter_weights wbad;
    rc = dfl_drafter_load(d3, &s, &wbad, err, sizeof err);
    CHECK(rc == DFL_ESHAPE && wbad.n == 0 && strstr(err, "tensor norm.weight: missing"), "missing tensor: %s", err);
    printf("  refused: %s\n", err);
    dfl_st_out sw = o2[5];
    sw.shape[0] = o2[5].shape[1];
    sw.shape[1] = o2[5].shape[0];
    dfl_st_out saved = o2[5];
    o2[5] = sw;
    CHECK(dfl_st_write(a, o2, m, NULL, 0, err, sizeof err) == 0, "write");
    rc = dfl_drafter_load(d3, &s, &wbad, err, sizeof err);
    CHECK(rc == DFL_ESHAPE && strstr(err, "tensor layers.0.self_attn.v_proj.weight: expected shape [16, 64], found [64, 16]"),
          "misshapen tensor: %s", err);
    printf("  refused: %s\n", err);
    o2[5] = saved;
    /* Names with a "model." prefix load too. */
    char (*pn)[128] = malloc((size_t)m * sizeof *pn);
    for (int i = 0; i < m; i++) { snprintf(pn[i], sizeof pn[i], "model.%s", w.t[i].name); o2[i].name = pn[i]; }
    CHECK(dfl_st_write(a, o2, m, NULL, 0, err, sizeof err) == 0, "write");
    dfl_drafter_weights w3;
    rc = dfl_drafter_load(d3, &s, &w3, err, sizeof err);
    CHECK(rc == 0 && w3.n == m && !memcmp(w3.data[m - 1], w.data[m - 1], 64 * 4), "model. prefix: %s", err);
    if (!rc) dfl_drafter_free(&w3);
    free(pn);
    free(o2);
    dfl_drafter_free(&w);
  }

  /* Config mismatches against the spec. */
  struct { const char *what, *frag; void (*edit)(dfl_spec *); } mm[] = {
    {"layers", "num_hidden_layers is 3, but the spec (test.dfl) says drafter layers = 2", NULL},
    {"taps", "dflash_config.target_layer_ids is [1,3], but the spec (test.dfl) taps [1, 4]", NULL},
    {"block", "block_size is 8, but the spec (test.dfl) has 16", NULL},
    {"window", "sliding_window is 48, but the spec (test.dfl) gives layer 0 a window of 32", NULL},
    {"kind", "layer_types[2] is full_attention, but the spec (test.dfl) makes drafter layer 2 sliding", NULL},
    {"theta", "rope_theta is 1e+06, but the spec (test.dfl) has 10000", NULL},
    {"heads", "num_key_value_heads is 2, but the spec (test.dfl) says KV heads = 4", NULL},
    {"mask", "dflash_config.mask_token_id is 290, but the spec (test.dfl) uses 7", NULL},
  };
  for (size_t i = 0; i < sizeof mm / sizeof mm[0]; i++) {
    dfl_spec s2 = s;
    switch (i) {
    case 0: s2.drafter.layers = 2; break;
    case 1: s2.taps[1] = 4; break;
    case 2: s2.block_size = 16; break;
    case 3: s2.window[0] = s2.window[1] = 32; break;
    case 4: s2.sliding[2] = 1; s2.window[2] = 48; break;
    case 5: s2.drafter.rope_theta = 10000; break;
    case 6: s2.drafter.kv_heads = 4; break;
    case 7: s2.mask_token = 7; break;
    }
    rc = dfl_drafter_load(d1, &s2, &w, err, sizeof err);
    CHECK(rc != 0 && strstr(err, mm[i].frag) && strstr(err, "one/config.json"), "%s: rc %d \"%s\"", mm[i].what, rc, err);
    printf("  refused %-6s %s\n", mm[i].what, err);
  }
  CHECK(dfl_drafter_load("examples/models/nano", &s, &w, err, sizeof err) == DFL_EFORMAT &&
        strstr(err, "does not name a DFlash drafter"), "target dir: %s", err);

  /* Export refusals: a missing tensor, an extra one, a wrong shape. */
  rc = dfl_export_drafter(d3, &s, out, m - 1, err, sizeof err);
  CHECK(rc == DFL_ESHAPE && strstr(err, "missing"), "export missing: %s", err);
  dfl_st_out extra = {.name = "lm_head.weight", .dtype = DFL_ST_F32, .ndim = 2, .shape = {300, 64}, .f32 = orig[0]};
  dfl_st_out keep = out[0];
  out[0] = extra;
  rc = dfl_export_drafter(d3, &s, out, m, err, sizeof err);
  CHECK(rc == DFL_ESHAPE && strstr(err, "tensor lm_head.weight is not part of a DFlash drafter"), "export extra: %s", err);
  out[0] = keep;
  out[1].shape[0]++;
  rc = dfl_export_drafter(d3, &s, out, m, err, sizeof err);
  CHECK(rc == DFL_ESHAPE && strstr(err, "expected shape"), "export shape: %s", err);
  printf("  refused: %s\n", err);

  for (int i = 0; i < m; i++) free(orig[i]);
  free(orig); free(out); free(t); free(perm);
  io_rmdir(dir);
  return io_finish("test_export");
}
