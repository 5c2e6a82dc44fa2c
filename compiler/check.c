/*
** check.c: the schema-driven checker. A .dfl file parses into generic sections/keys/values
** (grammar/dfl.y); here every section and key is looked up in a schema (type, range, choices),
** unknown keys get a "did you mean", duplicates point at both places, and then the meaning is
** checked section by section (target, drafter, data, loss, train; topology in
** check_topology.c) while filling dfl_spec. Every error is reported; checking never stops at
** the first.
*/
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compiler/ast.h"
#include "compiler/front_internal.h"
#include "compiler/hfconfig.h"
#include "compiler/spec.h"

#define IMAX 2147483647.0
#define I64MAX 9.2e18

/* ---- schema ---- */

static const dfl_kdef target_keys[] = {
  {"model", K_STRING, 0, 0, 0, 0, 0, "model = \"path/to/hf-model-dir\""},
  {"weights", K_ENUM, 0, 0, "pretrained|random", 0, 0, "weights = random"},
  {"seed", K_INT, 0, I64MAX, 0, 0, 0, "seed = 0"},
  {"taps", K_ANY, 0, 0, 0, 0, 0, "taps = [1, 9, 17]"},
  {"dtype", K_ENUM, 0, 0, "bf16|fp32", 0, 0, "dtype = bf16"},
  {"quantize", K_ENUM, 0, 0, "none|fp8|fp8_fast", 0, 0, "quantize = fp8"},
  {"family", K_ENUM, 0, 0, "qwen3|llama|qwen3_5", 0, 0, "family = qwen3"},
  {"hidden", K_INT, 1, IMAX, 0, 0, 0, "hidden = 4096"},
  {"layers", K_INT, 1, DFL_MAX_LAYERS, 0, 0, 0, "layers = 36"},
  {"heads", K_INT, 1, 65536, 0, 0, 0, "heads = 32"},
  {"kv_heads", K_INT, 1, 65536, 0, 0, 0, "kv_heads = 8"},
  {"head_dim", K_INT, 1, 65536, 0, 0, 0, "head_dim = 128"},
  {"mlp", K_INT, 1, IMAX, 0, 0, 0, "mlp = 12288"},
  {"vocab", K_INT, 2, IMAX, 0, 0, 0, "vocab = 151936"},
  {"rope_theta", K_FLOAT, 1e-300, 1e300, 0, 0, 0, "rope_theta = 1e6"},
  {"rms_eps", K_FLOAT, 1e-300, 1, 0, 0, 0, "rms_eps = 1e-6"},
  {"tie_embeddings", K_BOOL, 0, 0, 0, 0, 0, "tie_embeddings = false"},
  {"qk_norm", K_BOOL, 0, 0, 0, 0, 0, "qk_norm = true"},
  {"max_positions", K_INT, 1, I64MAX, 0, 0, 0, "max_positions = 40960"},
  /* family = qwen3_5 (hybrid) */
  {"full_attention_interval", K_INT, 1, DFL_MAX_LAYERS, 0, 0, 0, "full_attention_interval = 4"},
  {"linear_key_heads", K_INT, 1, 65536, 0, 0, 0, "linear_key_heads = 16"},
  {"linear_value_heads", K_INT, 1, 65536, 0, 0, 0, "linear_value_heads = 48"},
  {"linear_key_dim", K_INT, 1, 65536, 0, 0, 0, "linear_key_dim = 128"},
  {"linear_value_dim", K_INT, 1, 65536, 0, 0, 0, "linear_value_dim = 128"},
  {"conv_kernel", K_INT, 1, 64, 0, 0, 0, "conv_kernel = 4"},
  {"partial_rotary", K_FLOAT, 1e-9, 1, 0, 0, 0, "partial_rotary = 0.25"},
  {0}};

static const dfl_kdef drafter_keys[] = {
  {"layers", K_INT, 1, DFL_MAX_LAYERS, 0, 0, 0, "layers = 5"},
  {"heads", K_INT, 1, 65536, 0, 0, 0, "heads = 32"},
  {"kv_heads", K_INT, 1, 65536, 0, 0, 0, "kv_heads = 8"},
  {"head_dim", K_INT, 1, 65536, 0, 0, 0, "head_dim = 128"},
  {"mlp", K_INT, 1, IMAX, 0, 0, 0, "mlp = 12288"},
  {"hidden", K_INT, 1, IMAX, 0, 0, 0, "hidden = 4096"},
  {"vocab", K_INT, 1, IMAX, 0, 0, 0, "vocab = 151936"},
  {"rope_theta", K_FLOAT, 1e-300, 1e300, 0, 0, 0, "rope_theta = 1e6"},
  {"rms_eps", K_FLOAT, 1e-300, 1, 0, 0, 0, "rms_eps = 1e-6"},
  {"attention", K_ANY, 0, 0, 0, 0, 0, "attention = full"},
  /* 64: the trainer's per-position metrics (runtime/train/train.c) */
  {"block_size", K_INT, 2, 64, 0, 0, 0, "block_size = 16"},
  {"mask_token", K_INT, 0, IMAX, 0, 0, 0, "mask_token = 151669"},
  {"init", K_ANY, 0, 0, 0, 0, 0, "init = fresh"},
  {"seed", K_INT, 0, I64MAX, 0, 0, 0, "seed = 0"},
  {0}};

static const dfl_kdef data_keys[] = {
  {"train", K_STRING, 0, 0, 0, 0, 0, "train = \"data/train.jsonl.gz\""},
  {"eval", K_STRING, 0, 0, 0, 0, 0, "eval = \"data/eval.jsonl.gz\""},
  {"format", K_ENUM, 0, 0, "jsonl|packed|random", 0, 0, "format = jsonl"},
  {"seq_len", K_INT, 2, 16777216, 0, 0, 0, "seq_len = 4096"},
  {"anchors", K_INT, 1, 1048576, 0, 0, 0, "anchors = 512"},
  {"batch", K_INT, 1, 1048576, 0, 0, 0, "batch = 8"},
  {"shuffle", K_BOOL, 0, 0, 0, 0, 0, "shuffle = true"},
  {"seed", K_INT, 0, I64MAX, 0, 0, 0, "seed = 0"},
  {"bad_rows", K_ENUM, 0, 0, "skip|refuse", 0, 0, "bad_rows = skip"},
  {0}};

static const dfl_kdef loss_keys[] = {
  {"gamma", K_FLOAT, -1e9, 1e9, 0, 0, 0, "gamma = 7"},
  {"vocab_chunk", K_INT, 1, IMAX, 0, 0, 0, "vocab_chunk = 32768"},
  {"metrics", K_ANY, 0, 0, 0, 0, 0, "metrics = [accuracy, tau, topk(4)]"},
  {0}};

static const dfl_kdef adamw_keys[] = {
  {"lr", K_FLOAT, 1e-300, 1e3, 0, 0, 0, "lr = 6e-4"},
  {"betas", K_ANY, 0, 0, 0, 0, 0, "betas = [0.9, 0.999]"},
  {"eps", K_FLOAT, 1e-300, 1, 0, 0, 0, "eps = 1e-8"},
  {"weight_decay", K_FLOAT, 0, 1e3, 0, 0, 0, "weight_decay = 0"},
  {0}};
static const dfl_sdef adamw_schema = {"train.optimizer", adamw_keys, "adamw"};

static const dfl_kdef ckpt_keys[] = {
  {"every", K_INT, 0, I64MAX, 0, 0, 0, "every = 1000"},
  {"dir", K_STRING, 0, 0, 0, 0, 0, "dir = \"runs/ckpt\""},
  {"keep", K_INT, 0, IMAX, 0, 0, 0, "keep = 3"},
  {0}};
static const dfl_sdef ckpt_schema = {"train.checkpoint", ckpt_keys, NULL};

static const dfl_kdef train_keys[] = {
  {"steps", K_INT, 1, I64MAX, 0, 0, 0, "steps = 10000"},
  {"optimizer", K_BLOCK, 0, 0, 0, &adamw_schema, 0, "optimizer adamw { lr = 6e-4 }"},
  {"schedule", K_ENUM, 0, 0, "cosine|constant|linear", 0, 0, "schedule = cosine"},
  {"warmup", K_INT, 0, I64MAX, 0, 0, 0, "warmup = 100"},
  {"warmup_ratio", K_FLOAT, 0, 1, 0, 0, 0, "warmup_ratio = 0.04"},
  {"clip", K_FLOAT, -1e300, 1e300, 0, 0, 0, "clip = 1.0"},
  {"accum", K_INT, 1, 1048576, 0, 0, 0, "accum = 1"},
  {"precision", K_ENUM, 0, 0, "bf16|fp32", 0, 0, "precision = bf16"},
  {"grads", K_ENUM, 0, 0, "f32|bf16", 0, 0, "grads = bf16"},
  {"checkpoint", K_BLOCK, 0, 0, 0, &ckpt_schema, 0, "checkpoint { every = 1000 }"},
  {"log_every", K_INT, 1, IMAX, 0, 0, 0, "log_every = 10"},
  {0}};

/* Choices of what the compiler builds (docs/language.md "compile"): the first four's default is what runs
** fastest where it was measured, turning one off builds the plain form, for comparisons; tf32 (f32
** GEMMs on TF32 tensor cores) trades exactness for speed, off by default. */
static const dfl_kdef compile_keys[] = {
  {"block_rows", K_BOOL, 0, 0, 0, 0, 0, "block_rows = true"},
  {"rope_pair", K_BOOL, 0, 0, 0, 0, 0, "rope_pair = true"},
  {"swiglu_quant", K_BOOL, 0, 0, 0, 0, 0, "swiglu_quant = true"},
  {"overlap", K_BOOL, 0, 0, 0, 0, 0, "overlap = true"},
  {"tf32", K_BOOL, 0, 0, 0, 0, 0, "tf32 = false"},
  {0}};

static const dfl_sdef target_schema = {"target", target_keys, NULL};
static const dfl_sdef drafter_schema = {"drafter", drafter_keys, NULL};
static const dfl_sdef data_schema = {"data", data_keys, NULL};
static const dfl_sdef loss_schema = {"loss", loss_keys, NULL};
static const dfl_sdef train_schema = {"train", train_keys, NULL};
static const dfl_sdef compile_schema = {"compile", compile_keys, NULL};

static const dfl_sdef *const sections[] = {&target_schema, &drafter_schema, &data_schema, &loss_schema,
                                           &train_schema, &dfl_topology_schema, &compile_schema, &adamw_schema,
                                           &ckpt_schema};
enum { N_TOP = 7, N_ALL = 9 };


static dfl_sect *sub(const dfl_sect *s, const char *key) {
  int k = dfl_check_key_index(s->def, key);
  return k >= 0 ? s->kid[k] : NULL;
}

/* "missing key" for required keys, at the section header. */
static int require(dfl_check *c, const dfl_sect *s, const char *key) {
  if (dfl_check_has(s, key)) return dfl_check_get(s, key) != NULL;
  /* an absent section or entries lost to a syntax error were reported already */
  if (!s->node || c->quiet_missing) return 0;
  int k = dfl_check_key_index(s->def, key);
  if (s->node) dfl_diag_error(s->node->key_loc, "missing key `%s` in section `%s`", key, s->def->name);
  else dfl_diag_error(dfl_loc_file(&c->ast->src), "missing key `%s` in section `%s`", key, s->def->name);
  dfl_diag_help("add `%s`", s->def->keys[k].doc);
  return 0;
}

/* ---- paths ---- */

/* dir + p, with "." and ".." folded lexically so messages show tidy paths. */
static void resolve(const dfl_check *c, const char *p, char *out) {
  char tmp[2 * DFL_PATH_MAX + 2];
  if (p[0] == '/' || !c->dir[0]) snprintf(tmp, sizeof tmp, "%s", p);
  else snprintf(tmp, sizeof tmp, "%s/%s", c->dir, p);
  int abs = tmp[0] == '/';
  char *parts[512];
  int n = 0, up = 0;
  for (char *save, *t = strtok_r(tmp, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
    if (!strcmp(t, ".")) continue;
    if (!strcmp(t, "..")) {
      if (n > 0 && strcmp(parts[n - 1], "..")) n--;
      else if (!abs) { if (n < 512) parts[n++] = t; up++; }
      continue;
    }
    if (n < 512) parts[n++] = t;
  }
  (void)up;
  size_t m = 0;
  out[0] = 0;
  if (abs) out[m++] = '/', out[m] = 0;
  for (int i = 0; i < n; i++) {
    int w = snprintf(out + m, DFL_PATH_MAX - m, "%s%s", i ? "/" : "", parts[i]);
    if (w < 0 || (size_t)w >= DFL_PATH_MAX - m) break;
    m += (size_t)w;
  }
  if (!out[0]) snprintf(out, DFL_PATH_MAX, ".");
}

static int path_value(dfl_check *c, dfl_node *v, char *out) {
  if (strlen(v->s) + strlen(c->dir) + 2 >= DFL_PATH_MAX) {
    dfl_diag_error(v->loc, "path is longer than %d bytes", DFL_PATH_MAX - 1);
    return 0;
  }
  if (!v->s[0]) {
    dfl_diag_error(v->loc, "empty path");
    return 0;
  }
  resolve(c, v->s, out);
  return 1;
}

/* ---- target ---- */

typedef struct { const char *key; size_t off; int is_float; const char *cfg; } arch_field;
#define AF(k, f, fl, cfg) {k, offsetof(dfl_arch, f), fl, cfg}
static const arch_field arch_fields[] = {
  AF("hidden", hidden, 0, "hidden_size"), AF("layers", layers, 0, "num_hidden_layers"),
  AF("heads", heads, 0, "num_attention_heads"), AF("kv_heads", kv_heads, 0, "num_key_value_heads"),
  AF("head_dim", head_dim, 0, "head_dim"), AF("mlp", intermediate, 0, "intermediate_size"),
  AF("vocab", vocab, 0, "vocab_size"), AF("rope_theta", rope_theta, 1, "rope_theta"),
  AF("rms_eps", rms_eps, 1, "rms_norm_eps"),
  AF("linear_key_heads", lin_key_heads, 0, "linear_num_key_heads"),
  AF("linear_value_heads", lin_value_heads, 0, "linear_num_value_heads"),
  AF("linear_key_dim", lin_key_dim, 0, "linear_key_head_dim"),
  AF("linear_value_dim", lin_value_dim, 0, "linear_value_head_dim"),
  AF("conv_kernel", conv_kernel, 0, "linear_conv_kernel_dim"), {0, 0, 0, 0}};

static dfl_family family_named(const char *s) {
  return !strcmp(s, "llama") ? DFL_FAMILY_LLAMA : !strcmp(s, "qwen3_5") ? DFL_FAMILY_QWEN3_5 : DFL_FAMILY_QWEN3;
}

/* family = qwen3_5 written out: the hybrid's keys, HF's defaults where it has them. */
static int check_hybrid_arch(dfl_check *c, dfl_sect *t, dfl_arch *a) {
  int ok = 1;
  const char *req[] = {"linear_key_heads", "linear_value_heads", "linear_key_dim"};
  for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) ok &= require(c, t, req[i]);
  if (!ok) return 0;
  if (!dfl_check_get(t, "linear_value_dim")) a->lin_value_dim = a->lin_key_dim;
  if (!dfl_check_get(t, "conv_kernel")) a->conv_kernel = 4;
  a->norm_plus1 = 1;
  int every = (int)dfl_check_int(t, "full_attention_interval", 4);
  for (int l = 0; l < a->layers; l++) a->linear[l] = (l + 1) % every != 0;
  double f = dfl_check_float(t, "partial_rotary", 1.0);
  a->rot_dim = (int)(f * a->head_dim + 0.5);
  if (a->rot_dim < 2 || a->rot_dim % 2) {
    dfl_diag_error(dfl_check_where(t, "partial_rotary"), "partial_rotary %g of head_dim %d rotates %d dims: RoPE needs "
                   "an even number, at least 2", f, a->head_dim, a->rot_dim);
    return 0;
  }
  if (a->rot_dim == a->head_dim) a->rot_dim = 0;
  if (a->lin_value_heads % a->lin_key_heads) {
    dfl_diag_error(dfl_check_where(t, "linear_value_heads"), "linear_value_heads %d is not a multiple of "
                   "linear_key_heads %d", a->lin_value_heads, a->lin_key_heads);
    return 0;
  }
  return 1;
}

/* Hybrid keys next to a non-hybrid family say the user expects something else. */
static int no_hybrid_keys(dfl_sect *t, const dfl_arch *a) {
  static const char *k[] = {"full_attention_interval", "linear_key_heads", "linear_value_heads", "linear_key_dim",
                            "linear_value_dim", "conv_kernel", "partial_rotary"};
  if (a->family == DFL_FAMILY_QWEN3_5) return 1;
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
    if (dfl_check_get(t, k[i])) {
      dfl_diag_error(dfl_check_where(t, k[i]), "`%s` is a key of the hybrid family (`family = qwen3_5`)", k[i]);
      dfl_diag_help("this target is a dense decoder: remove `%s`, or set `family = qwen3_5`", k[i]);
      return 0;
    }
  return 1;
}

static double arch_get(const dfl_arch *a, const arch_field *f) {
  const char *p = (const char *)a + f->off;
  return f->is_float ? *(const double *)p : (double)*(const int *)p;
}
static void arch_set(dfl_arch *a, const arch_field *f, double v) {
  char *p = (char *)a + f->off;
  if (f->is_float) *(double *)p = v;
  else *(int *)p = (int)v;
}

static void check_target(dfl_check *c) {
  dfl_spec *s = c->spec;
  dfl_sect *t = c->target;
  dfl_arch *a = &s->target;
  const char *weights = dfl_check_enum(t, "weights", NULL);
  dfl_node *model = dfl_check_get(t, "model");
  s->target_random = weights && !strcmp(weights, "random");
  s->target_seed = (uint64_t)dfl_check_int(t, "seed", 0);
  s->target_dtype = strcmp(dfl_check_enum(t, "dtype", "bf16"), "fp32") ? DFL_PREC_BF16 : DFL_PREC_FP32;
  const char *qz = dfl_check_enum(t, "quantize", "none");
  s->target_fp8 = !strcmp(qz, "fp8") || !strcmp(qz, "fp8_fast");
  s->target_fp8_fast = !strcmp(qz, "fp8_fast");
  if (dfl_check_has(t, "seed") && !s->target_random && dfl_check_get(t, "seed"))
    dfl_diag_warning(dfl_check_where(t, "seed"), "`seed` has no effect unless `weights = random`");

  if (dfl_check_has(t, "model") && !model) return;   /* reported already */
  if (model) {
    if (!path_value(c, model, s->target_dir)) return;
    if (dfl_hfconfig_load(s->target_dir, a, model->loc) != DFL_OK) return;
    /* Architecture keys next to `model` are assertions: they must agree with config.json. */
    char cfg[DFL_PATH_MAX + 16];
    snprintf(cfg, sizeof cfg, "%s/config.json", s->target_dir);
    int ok = 1;
    for (const arch_field *f = arch_fields; f->key; f++) {
      dfl_node *v = dfl_check_get(t, f->key);
      if (!v) continue;
      double want = arch_get(a, f);
      if (f->is_float ? fabs(v->f - want) > 1e-9 * fabs(want) : (double)v->i != want) {
        dfl_diag_error(v->loc, "`%s = %g` does not match the model: `%s` is %g in %s", f->key, v->f, f->cfg, want, cfg);
        dfl_diag_help("remove `%s` (it comes from config.json) or fix it", f->key);
        ok = 0;
      }
    }
    dfl_node *fam = dfl_check_get(t, "family");
    if (fam && family_named(fam->s) != a->family) {
      dfl_diag_error(fam->loc, "`family = %s` does not match the model in %s", fam->s, cfg);
      ok = 0;
    }
    dfl_node *tie = dfl_check_get(t, "tie_embeddings");
    if (tie && (int)tie->i != a->tie_embeddings) {
      dfl_diag_error(tie->loc, "`tie_embeddings = %s` does not match `tie_word_embeddings` in %s", tie->i ? "true" : "false", cfg);
      ok = 0;
    }
    if (dfl_check_get(t, "max_positions")) a->max_positions = dfl_check_int(t, "max_positions", a->max_positions);
    if (dfl_check_get(t, "qk_norm")) a->qk_norm = (int)dfl_check_int(t, "qk_norm", a->qk_norm);
    dfl_node *pr = dfl_check_get(t, "partial_rotary");
    if (pr && a->family == DFL_FAMILY_QWEN3_5 && (int)(pr->f * a->head_dim + 0.5) != (a->rot_dim ? a->rot_dim : a->head_dim)) {
      dfl_diag_error(pr->loc, "`partial_rotary = %g` does not match the model: it rotates %d of %d dims (%s)", pr->f,
                     a->rot_dim ? a->rot_dim : a->head_dim, a->head_dim, cfg);
      ok = 0;
    }
    ok &= no_hybrid_keys(t, a);
    c->arch_ok = ok;
    return;
  }
  if (!s->target_random) {
    dfl_loc where = t->node ? t->node->key_loc : dfl_loc_file(&c->ast->src);
    if (weights) where = dfl_check_where(t, "weights");
    dfl_diag_error(where, weights ? "`weights = pretrained` needs `model`" : "the target has no weights");
    dfl_diag_help("write `model = \"path/to/hf-dir\"`, or an explicit architecture with `weights = random`");
    return;
  }
  /* Explicit architecture (random weights, for benchmarks). */
  int ok = 1;
  const char *req[] = {"hidden", "layers", "heads", "mlp", "vocab"};
  for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) ok &= require(c, t, req[i]);
  for (const arch_field *f = arch_fields; f->key; f++)
    if (dfl_check_get(t, f->key)) arch_set(a, f, f->is_float ? dfl_check_float(t, f->key, 0) : (double)dfl_check_int(t, f->key, 0));
  for (const arch_field *f = arch_fields; f->key; f++)
    if (dfl_check_has(t, f->key) && !dfl_check_get(t, f->key)) ok = 0;
  if (!ok) return;
  a->family = family_named(dfl_check_enum(t, "family", "qwen3"));
  if (!no_hybrid_keys(t, a)) return;
  if (!dfl_check_get(t, "kv_heads")) a->kv_heads = a->heads;
  if (!dfl_check_get(t, "head_dim")) {
    if (a->hidden % a->heads) {
      dfl_diag_error(dfl_check_where(t, "heads"), "hidden %d is not a multiple of heads %d, so head_dim can not be derived",
                     a->hidden, a->heads);
      dfl_diag_help("set `head_dim` explicitly");
      return;
    }
    a->head_dim = a->hidden / a->heads;
  }
  if (!dfl_check_get(t, "rope_theta")) a->rope_theta = 10000.0;
  if (!dfl_check_get(t, "rms_eps")) a->rms_eps = 1e-6;
  a->tie_embeddings = (int)dfl_check_int(t, "tie_embeddings", 0);
  a->qk_norm = (int)dfl_check_int(t, "qk_norm", a->family != DFL_FAMILY_LLAMA);
  if (a->family == DFL_FAMILY_QWEN3_5 && !check_hybrid_arch(c, t, a)) return;
  a->max_positions = dfl_check_int(t, "max_positions", a->family == DFL_FAMILY_LLAMA ? 2048 : 32768);
  if (a->heads % a->kv_heads) {
    dfl_diag_error(dfl_check_where(t, "kv_heads"), "heads %d is not a multiple of kv_heads %d", a->heads, a->kv_heads);
    ok = 0;
  }
  if (a->head_dim % 2) {
    dfl_diag_error(dfl_check_where(t, "head_dim"), "head_dim %d is odd; RoPE needs an even head dimension", a->head_dim);
    ok = 0;
  }
  c->arch_ok = ok;
}

/* Default taps: build_target_layer_ids(Lt, Ld) of the reference (Python's round: half to even). */
void dfl_default_taps(int target_layers, int drafter_layers, int *taps, int *n) {
  if (drafter_layers <= 1) {
    taps[0] = target_layers / 2;
    *n = 1;
    return;
  }
  int k = drafter_layers < DFL_MAX_TAPS ? drafter_layers : DFL_MAX_TAPS;
  for (int i = 0; i < k; i++)
    taps[i] = (int)nearbyint(1.0 + (double)i * (target_layers - 4) / (double)(drafter_layers - 1));
  *n = k;
}

static void check_taps(dfl_check *c) {
  dfl_spec *s = c->spec;
  dfl_node *v = dfl_check_get(c->target, "taps");
  if (!v) {
    if (c->arch_ok) {
      dfl_default_taps(s->target.layers, s->drafter.layers, s->taps, &s->n_taps);
      for (int i = 0; i < s->n_taps; i++)
        if (s->taps[i] < 0 || s->taps[i] >= s->target.layers) {
          dfl_diag_error(dfl_check_where(c->target, NULL), "the default taps do not fit a %d-layer target", s->target.layers);
          dfl_diag_help("set `taps = [...]` explicitly (layer ids 0..%d)", s->target.layers - 1);
          break;
        }
    }
    return;
  }
  if (v->kind != DFL_V_LIST) {
    dfl_diag_error(v->loc, "`taps` must be a list of layer ids, not %s", dfl_vkind_name(v->kind));
    dfl_diag_help("write `taps = [1, 9, 17]`");
    return;
  }
  if (v->nkids == 0 || v->nkids > DFL_MAX_TAPS) {
    dfl_diag_error(v->loc, "`taps` must list between 1 and %d layers", DFL_MAX_TAPS);
    return;
  }
  int prev = INT_MIN, warned = 0;
  s->n_taps = 0;
  for (dfl_node *e = v->kids; e; e = e->next) {
    if (e->bad) continue;
    if (e->kind != DFL_V_INT) {
      dfl_diag_error(e->loc, "a tap must be a layer id (an integer), not %s", dfl_vkind_name(e->kind));
      continue;
    }
    if (c->arch_ok && (e->i < 0 || e->i >= s->target.layers)) {
      dfl_diag_error(e->loc, "tap %lld is outside the target's layers 0..%d", (long long)e->i, s->target.layers - 1);
      dfl_diag_help("tap i reads the output of decoder layer i; the target has %d layers", s->target.layers);
      continue;
    }
    if (e->i < 0 || e->i > INT_MAX) continue;
    if (e->i <= prev && !warned) {
      dfl_diag_warning(e->loc, "taps are not strictly increasing");
      dfl_diag_help("the reference taps evenly spaced layers in increasing order; a repeated or reversed tap is probably a typo");
      warned = 1;
    }
    prev = (int)e->i;
    s->taps[s->n_taps++] = (int)e->i;
  }
}

/* ---- drafter ---- */

static int parse_attn(dfl_node *v, int *sliding, int *window) {
  if (v->kind == DFL_V_IDENT && !strcmp(v->s, "full")) { *sliding = 0; *window = 0; return 1; }
  if (v->kind == DFL_V_CALL && !strcmp(v->s, "sliding")) {
    if (v->nkids != 1 || v->kids->kind != DFL_V_INT) {
      dfl_diag_error(v->loc, "`sliding` takes one window size, like `sliding(2048)`");
      return 0;
    }
    if (v->kids->i < 1 || v->kids->i > INT_MAX) {
      dfl_diag_error(v->kids->loc, "sliding window must be at least 1");
      dfl_diag_help("the window counts the query's own token; `sliding(1)` sees only itself");
      return 0;
    }
    *sliding = 1;
    *window = (int)v->kids->i;
    return 1;
  }
  char buf[64];
  static const char *const kinds[] = {"full", "sliding", NULL};
  dfl_diag_error(v->loc, "unknown attention `%s`", v->s ? v->s : dfl_vkind_name(v->kind));
  const char *sug = v->s ? dfl_check_nearest(v->s, kinds, NULL, buf, sizeof buf) : NULL;
  if (sug) dfl_diag_help("did you mean `%s`? attention is `full` or `sliding(WINDOW)`", sug);
  else dfl_diag_help("attention is `full` or `sliding(WINDOW)`, or a list with one per layer");
  return 0;
}

static void check_drafter(dfl_check *c) {
  dfl_spec *s = c->spec;
  dfl_sect *d = c->drafter;
  dfl_arch *a = &s->drafter;
  const dfl_arch *t = &s->target;
  a->family = DFL_FAMILY_QWEN3;
  a->qk_norm = 1;
  a->tie_embeddings = 0;
  a->layers = (int)dfl_check_int(d, "layers", 1);
  a->hidden = t->hidden;
  a->vocab = t->vocab;
  a->heads = (int)dfl_check_int(d, "heads", t->heads);
  a->kv_heads = (int)dfl_check_int(d, "kv_heads", dfl_check_get(d, "heads") ? a->heads : t->kv_heads);
  a->head_dim = (int)dfl_check_int(d, "head_dim", t->head_dim);
  a->intermediate = (int)dfl_check_int(d, "mlp", t->intermediate);
  a->rope_theta = dfl_check_float(d, "rope_theta", t->rope_theta);
  a->rms_eps = dfl_check_float(d, "rms_eps", t->rms_eps);
  a->max_positions = t->max_positions;
  s->block_size = (int)dfl_check_int(d, "block_size", 16);
  s->init_seed = (uint64_t)dfl_check_int(d, "seed", 0);

  if (c->arch_ok) {
    static const char *const same[] = {"hidden", "vocab"};
    for (int i = 0; i < 2; i++) {
      dfl_node *v = dfl_check_get(d, same[i]);
      int want = i ? t->vocab : t->hidden;
      if (v && v->i != want) {
        dfl_diag_error(v->loc, "drafter %s %lld differs from the target's %d", same[i], (long long)v->i, want);
        dfl_diag_help("the drafter reads the target's hidden states and shares its embedding and lm_head; "
                      "remove `%s` (it always equals the target's)", same[i]);
      }
    }
    if (!dfl_check_has(d, "heads") && !dfl_check_has(d, "head_dim") && a->heads * a->head_dim <= 0) {}
  }
  if ((dfl_check_get(d, "heads") || dfl_check_get(d, "kv_heads")) && a->heads % a->kv_heads)
    dfl_diag_error(dfl_check_where(d, dfl_check_get(d, "kv_heads") ? "kv_heads" : "heads"),
                   "drafter heads %d is not a multiple of kv_heads %d", a->heads, a->kv_heads);
  if (dfl_check_get(d, "head_dim") && a->head_dim % 2)
    dfl_diag_error(dfl_check_where(d, "head_dim"), "head_dim %d is odd; RoPE needs an even head dimension", a->head_dim);

  /* attention: one value for all layers or one per layer */
  dfl_node *at = dfl_check_get(d, "attention");
  for (int i = 0; i < a->layers && i < DFL_MAX_LAYERS; i++) s->sliding[i] = s->window[i] = 0;
  if (at) {
    if (at->kind == DFL_V_LIST) {
      if (at->nkids != a->layers)
        dfl_diag_error(at->loc, "`attention` lists %d kinds for %d drafter layers", at->nkids, a->layers);
      if (at->nkids != a->layers)
        dfl_diag_help("give one per layer, e.g. [sliding(2048), full], or a single value for all layers");
      int i = 0;
      for (dfl_node *e = at->kids; e; e = e->next, i++) {
        int sl = 0, w = 0;
        if (!e->bad && parse_attn(e, &sl, &w) && i < DFL_MAX_LAYERS) { s->sliding[i] = sl; s->window[i] = w; }
      }
    } else if (!at->bad) {
      int sl = 0, w = 0;
      if (parse_attn(at, &sl, &w))
        for (int i = 0; i < a->layers; i++) { s->sliding[i] = sl; s->window[i] = w; }
    }
  }

  /* mask token: a row of the target's embedding table */
  if (require(c, d, "mask_token")) {
    dfl_node *m = dfl_check_get(d, "mask_token");
    s->mask_token = (int)m->i;
    if (c->arch_ok && m->i >= t->vocab) {
      dfl_diag_error(m->loc, "mask token %lld is not a row of the target's embedding table (vocab %d)", (long long)m->i, t->vocab);
      dfl_diag_help("use a reserved or special token id below %d", t->vocab);
    } else if (c->arch_ok && s->target_dir[0]) {
      char tok[DFL_PATH_MAX + 256];
      dfl_token_class tc = dfl_tokenizer_classify(s->target_dir, s->mask_token, tok, sizeof tok);
      if (tc == DFL_TOKEN_ORDINARY) {
        dfl_diag_warning(m->loc, "mask token %d is the ordinary token `%s` in %s/tokenizer.json", s->mask_token, tok, s->target_dir);
        dfl_diag_help("the MASK row should be a token the target never sees in text: a special/added token or an id past the tokenizer's vocabulary");
      } else if (tc == DFL_TOKEN_BROKEN) {   /* was passed over as if absent */
        dfl_diag_warning(m->loc, "the mask token is not checked against the tokenizer: %s", tok);
        dfl_diag_help("a damaged download? fetch tokenizer.json again (training does not read it)");
      }
    }
  }

  /* init = fresh | "path/to/released-drafter" */
  dfl_node *init = dfl_check_get(d, "init");
  if (init && !init->bad) {
    if (init->kind == DFL_V_IDENT && !strcmp(init->s, "fresh")) {
      s->init_from[0] = 0;
    } else if (init->kind == DFL_V_STRING) {
      if (path_value(c, init, s->init_from)) {
        struct stat st;
        if (stat(s->init_from, &st) != 0 || !S_ISDIR(st.st_mode)) {
          dfl_diag_error(init->loc, "drafter directory `%s` %s", s->init_from, stat(s->init_from, &st) ? "does not exist" : "is not a directory");
          dfl_diag_help("`init` is `fresh` or a released DFlash drafter directory (config.json + model.safetensors)");
        }
      }
    } else {
      dfl_diag_error(init->loc, "`init` must be `fresh` or a \"path\" to a released drafter, not %s", dfl_vkind_name(init->kind));
    }
  }
}

/* ---- data, loss, train ---- */

int dfl_spec_dir_creatable(const char *dir, char *why, size_t n) {
  char p[DFL_PATH_MAX];
  snprintf(p, sizeof p, "%s", dir && dir[0] ? dir : ".");
  struct stat st;
  for (;;) {
    if (stat(p, &st) == 0) {
      if (!S_ISDIR(st.st_mode)) {
        snprintf(why, n, "`%s` exists and is not a directory", p);
        return 0;
      }
      if (access(p, W_OK | X_OK) != 0) {
        snprintf(why, n, "`%s` is not writable (%s)", p, strerror(errno));
        return 0;
      }
      /* access() says yes to root everywhere (under /proc too): a directory made and removed
      ** proves what train does at its first save */
      char probe[DFL_PATH_MAX + 64];
      snprintf(probe, sizeof probe, "%s/.dflc-probe-%ld", p, (long)getpid());
      if (mkdir(probe, 0777) != 0) {
        snprintf(why, n, "cannot create a directory in `%s` (%s)", p, strerror(errno));
        return 0;
      }
      rmdir(probe);
      return 1;
    }
    int e = errno;
    struct stat lst;
    if (e == ELOOP) {
      snprintf(why, n, "`%s` is a symbolic link loop", p);
      return 0;
    }
    if (e == ENOENT && lstat(p, &lst) == 0 && S_ISLNK(lst.st_mode)) {   /* not its parent: mkdir would fail here */
      snprintf(why, n, "`%s` is a dangling symbolic link", p);
      return 0;
    }
    if (e != ENOENT && e != ENOTDIR) {
      snprintf(why, n, "`%s`: %s", p, strerror(e));
      return 0;
    }
    char *slash = strrchr(p, '/');
    while (slash && slash > p && slash[1] == 0) { *slash = 0; slash = strrchr(p, '/'); }   /* trailing '/' */
    if (!slash) snprintf(p, sizeof p, ".");
    else if (slash == p) p[1] = 0;
    else *slash = 0;
  }
}

/* A data file train will read: a regular file (not a FIFO or a device, which train would read
** forever), not empty, and gzip when its name ends in .gz. Only a few bytes are read. */
static void need_file(dfl_check *c, dfl_node *v, char *out, const char *what) {
  if (!path_value(c, v, out)) return;
  struct stat st;
  if (stat(out, &st) != 0) {
    dfl_diag_error(v->loc, "%s file `%s` does not exist", what, out);
    dfl_diag_help("paths are relative to the directory of this .dfl file");
    return;
  }
  if (S_ISDIR(st.st_mode)) {
    dfl_diag_error(v->loc, "%s file `%s` is a directory", what, out);
    return;
  }
  if (!S_ISREG(st.st_mode)) {
    dfl_diag_error(v->loc, "%s file `%s` is not a regular file (%s)", what, out,
                   S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISCHR(st.st_mode) ? "a character device"
                   : S_ISBLK(st.st_mode) ? "a block device" : S_ISSOCK(st.st_mode) ? "a socket" : "not a plain file");
    dfl_diag_help("training reads the data once per epoch and needs its size: give a file (JSONL, .jsonl.gz or packed)");
    return;
  }
  if (st.st_size == 0) {
    dfl_diag_error(v->loc, "%s file `%s` is empty", what, out);
    dfl_diag_help("each line of a JSONL file is one row: {\"input_ids\": [...], \"loss_mask\": [...]}");
    return;
  }
  size_t n = strlen(out);
  if (n > 3 && !strcmp(out + n - 3, ".gz")) {
    unsigned char h[2] = {0, 0}, tail[4] = {0, 0, 0, 0};
    FILE *f = fopen(out, "rb");
    int ok = f && fread(h, 1, 2, f) == 2;
    if (!f) {
      dfl_diag_error(v->loc, "%s file `%s` cannot be read: %s", what, out, strerror(errno));
      return;
    }
    if (!ok || h[0] != 0x1f || h[1] != 0x8b) {
      fclose(f);
      dfl_diag_error(v->loc, "%s file `%s` is named .gz but is not gzip (it starts with bytes %02x %02x, not 1f 8b)",
                     what, out, h[0], h[1]);
      dfl_diag_help("compress it with `gzip`, or drop the .gz from its name if it is plain JSONL");
      return;
    }
    /* gzip's trailer holds the uncompressed size mod 2^32: 0 in a small file means no rows */
    int empty = st.st_size < (1 << 20) && fseek(f, -4, SEEK_END) == 0 && fread(tail, 1, 4, f) == 4 &&
                !(tail[0] | tail[1] | tail[2] | tail[3]);
    fclose(f);
    if (empty) {
      dfl_diag_error(v->loc, "%s file `%s` is an empty gzip stream (no rows)", what, out);
      return;
    }
  }
}

static void check_data(dfl_check *c) {
  dfl_spec *s = c->spec;
  dfl_sect *d = c->data;
  const char *fmt = dfl_check_enum(d, "format", "jsonl");
  s->format = !strcmp(fmt, "packed") ? DFL_DATA_PACKED : !strcmp(fmt, "random") ? DFL_DATA_RANDOM : DFL_DATA_JSONL;
  if (s->format != DFL_DATA_RANDOM) {
    if (require(c, d, "train")) need_file(c, dfl_check_get(d, "train"), s->train_path, "train");
  } else if (dfl_check_get(d, "train")) {
    dfl_diag_warning(dfl_check_where(d, "train"), "`train` is ignored with `format = random`");
  }
  if (dfl_check_get(d, "eval")) need_file(c, dfl_check_get(d, "eval"), s->eval_path, "eval");
  if (require(c, d, "seq_len")) s->seq_len = (int)dfl_check_int(d, "seq_len", 0);
  s->anchors = (int)dfl_check_int(d, "anchors", 512);
  s->batch = (int)dfl_check_int(d, "batch", 1);
  s->shuffle = (int)dfl_check_int(d, "shuffle", 1);
  s->seed = (uint64_t)dfl_check_int(d, "seed", 0);
  s->bad_rows = strcmp(dfl_check_enum(d, "bad_rows", "skip"), "refuse") ? DFL_BADROW_SKIP : DFL_BADROW_REFUSE;
  if (s->seq_len >= 2 && s->anchors > s->seq_len - 1 && (dfl_check_get(d, "anchors") || !dfl_check_has(d, "anchors")))
    dfl_diag_warning(dfl_check_where(d, "anchors"), "%d anchors per sequence, but a %d-token sequence has at most %d anchor positions",
                     s->anchors, s->seq_len, s->seq_len - 1);
  if (s->seq_len >= 2 && s->block_size >= 2 && s->seq_len < s->block_size) {
    dfl_diag_error(dfl_check_where(d, "seq_len"), "seq_len %d is shorter than one block of %d tokens (drafter.block_size)",
                   s->seq_len, s->block_size);
    dfl_diag_help("a sequence holds whole blocks: set seq_len to at least %d (real specs use 1024..4096)", s->block_size);
  }
  if (c->arch_ok && s->seq_len > s->target.max_positions)
    dfl_diag_warning(dfl_check_where(d, "seq_len"), "seq_len %d is longer than the target's max_positions %lld",
                     s->seq_len, (long long)s->target.max_positions);
}

static void check_loss(dfl_check *c) {
  dfl_spec *s = c->spec;
  dfl_sect *l = c->loss;
  s->gamma = dfl_check_float(l, "gamma", 7.0);
  int v = s->target.vocab > 0 ? s->target.vocab : 1;
  s->vocab_chunk = (int)dfl_check_int(l, "vocab_chunk", v < 32768 ? v : 32768);
  if (c->arch_ok && s->vocab_chunk > s->target.vocab) {
    dfl_diag_error(dfl_check_where(l, "vocab_chunk"), "vocab_chunk %d is larger than the vocabulary (%d)", s->vocab_chunk, s->target.vocab);
    dfl_diag_help("vocab_chunk is the number of vocabulary columns per loss chunk: 1..%d", s->target.vocab);
  }
  dfl_node *m = dfl_check_get(l, "metrics");
  if (!m) { s->metric_accuracy = s->metric_tau = 1; s->topk = 0; return; }
  if (m->bad) return;
  dfl_node single = *m;
  if (m->kind != DFL_V_LIST) { single.kind = DFL_V_LIST; single.kids = m; single.nkids = 1; m->next = NULL; m = &single; }
  static const char *const names[] = {"accuracy", "tau", "topk", NULL};
  for (dfl_node *e = m->kids; e; e = e->next) {
    if (e->bad) continue;
    int dup = 0;
    if (e->kind == DFL_V_IDENT && !strcmp(e->s, "accuracy")) { dup = s->metric_accuracy; s->metric_accuracy = 1; }
    else if (e->kind == DFL_V_IDENT && !strcmp(e->s, "tau")) { dup = s->metric_tau; s->metric_tau = 1; }
    else if (e->kind == DFL_V_CALL && !strcmp(e->s, "topk")) {
      if (e->nkids != 1 || e->kids->kind != DFL_V_INT || e->kids->i < 1 || e->kids->i > 1024) {
        dfl_diag_error(e->loc, "`topk` takes one K between 1 and 1024, like `topk(4)`");
        continue;
      }
      dup = s->topk != 0;
      s->topk = (int)e->kids->i;
    } else if (e->kind == DFL_V_IDENT && !strcmp(e->s, "topk")) {
      dfl_diag_error(e->loc, "`topk` needs K");
      dfl_diag_help("write `topk(4)`");
      continue;
    } else {
      char buf[64];
      dfl_diag_error(e->loc, "unknown metric `%s`", e->s ? e->s : dfl_vkind_name(e->kind));
      const char *sug = e->s ? dfl_check_nearest(e->s, names, NULL, buf, sizeof buf) : NULL;
      if (sug) dfl_diag_help("did you mean `%s`? metrics are `accuracy`, `tau` and `topk(K)`", sug);
      else dfl_diag_help("metrics are `accuracy`, `tau` (acceptance length) and `topk(K)`");
      continue;
    }
    if (dup) dfl_diag_error(e->loc, "metric `%s` is listed twice", e->s);
  }
}

static void check_train(dfl_check *c) {
  dfl_spec *s = c->spec;
  dfl_sect *t = c->train;
  if (require(c, t, "steps")) s->steps = dfl_check_int(t, "steps", 0);
  dfl_sect *o = sub(t, "optimizer");
  dfl_sect none;
  if (!o) { memset(&none, 0, sizeof none); none.def = &adamw_schema; o = &none; }
  s->lr = dfl_check_float(o, "lr", 6e-4);
  s->beta1 = 0.9;
  s->beta2 = 0.999;
  s->eps = dfl_check_float(o, "eps", 1e-8);
  s->weight_decay = dfl_check_float(o, "weight_decay", 0.0);
  dfl_node *b = dfl_check_get(o, "betas");
  if (b && !b->bad) {
    int ok = b->kind == DFL_V_LIST && b->nkids == 2;
    for (dfl_node *e = ok ? b->kids : NULL; e; e = e->next) {
      double x = e->kind == DFL_V_FLOAT ? e->f : e->kind == DFL_V_INT ? (double)e->i : -1;
      if (e->bad || !(x >= 0 && x < 1)) ok = 0;
    }
    if (!ok) {
      dfl_diag_error(b->loc, "`betas` must be two numbers in [0, 1)");
      dfl_diag_help("write `betas = [0.9, 0.999]`");
    } else {
      dfl_node *e = b->kids;
      s->beta1 = e->kind == DFL_V_FLOAT ? e->f : (double)e->i;
      s->beta2 = e->next->kind == DFL_V_FLOAT ? e->next->f : (double)e->next->i;
    }
  }
  const char *sch = dfl_check_enum(t, "schedule", "cosine");
  s->schedule = !strcmp(sch, "constant") ? DFL_SCHED_CONSTANT : !strcmp(sch, "linear") ? DFL_SCHED_LINEAR : DFL_SCHED_COSINE;
  /* warmup: steps or a ratio of the steps (reference: int(warmup_ratio * steps)), not both */
  if (dfl_check_has(t, "warmup") && dfl_check_has(t, "warmup_ratio")) {
    dfl_diag_error(dfl_check_where(t, "warmup_ratio"), "both `warmup` and `warmup_ratio` are set");
    dfl_diag_note(dfl_check_where(t, "warmup"), "`warmup` is set here");
    dfl_diag_help("keep one: `warmup = STEPS` or `warmup_ratio = FRACTION`");
  } else if (dfl_check_get(t, "warmup")) {
    s->warmup_steps = dfl_check_int(t, "warmup", 0);
  } else {
    s->warmup_steps = (int64_t)(dfl_check_float(t, "warmup_ratio", 0.04) * (double)s->steps);
  }
  if (s->steps > 0 && s->warmup_steps > s->steps)
    dfl_diag_error(dfl_check_where(t, "warmup"), "warmup of %lld steps is longer than the %lld training steps",
                   (long long)s->warmup_steps, (long long)s->steps);
  s->clip = dfl_check_float(t, "clip", 1.0);
  s->accum = (int)dfl_check_int(t, "accum", 1);
  s->precision = strcmp(dfl_check_enum(t, "precision", "bf16"), "fp32") ? DFL_PREC_BF16 : DFL_PREC_FP32;
  s->grads_bf16 = !strcmp(dfl_check_enum(t, "grads", "f32"), "bf16");
  if (s->grads_bf16 && s->precision == DFL_PREC_FP32) {
    dfl_diag_error(dfl_check_where(t, "grads"), "`grads = bf16` needs bf16 weights, but `precision = fp32`");
    dfl_diag_help("remove `grads = bf16` (fp32 training keeps fp32 gradients) or set `precision = bf16`");
  } else if (s->grads_bf16 && s->accum > 1) {
    dfl_diag_warning(dfl_check_where(t, "grads"), "`grads = bf16` applies with `accum = 1` only: with accum %d the "
                     "gradients are summed over micro-steps in f32", s->accum);
    dfl_diag_help("remove `grads = bf16`, or train with `accum = 1` to keep the gradients in bf16");
  }
  s->log_every = (int)dfl_check_int(t, "log_every", 10);
  dfl_sect *k = sub(t, "checkpoint");
  s->ckpt_every = k ? dfl_check_int(k, "every", 0) : 0;
  s->ckpt_keep = k ? (int)dfl_check_int(k, "keep", 0) : 0;
  dfl_node *dir = k ? dfl_check_get(k, "dir") : NULL;
  int dir_ok = 1;
  if (dir) dir_ok = path_value(c, dir, s->ckpt_dir);
  else resolve(c, "checkpoints", s->ckpt_dir);
  char why[DFL_PATH_MAX + 128], real[PATH_MAX];
  /* pruning and --restart move and remove step-* and old-* folders inside it: never the root */
  if (dir_ok && (!strcmp(s->ckpt_dir, "/") || (realpath(s->ckpt_dir, real) && !strcmp(real, "/")))) {
    dfl_diag_error(dir ? dir->loc : dfl_check_where(t, NULL), "the checkpoint directory `%s` is the root directory", s->ckpt_dir);
    dfl_diag_help("give checkpoints a directory of their own: `checkpoint { dir = \"...\" }`");
  } else if (dir_ok && !dfl_spec_dir_creatable(s->ckpt_dir, why, sizeof why)) {
    dfl_diag_error(dir ? dir->loc : dfl_check_where(t, NULL), "the checkpoint directory `%s` cannot be created: %s",
                   s->ckpt_dir, why);
    dfl_diag_help("set `checkpoint { dir = \"...\" }` to a directory you can write (relative to this .dfl file)");
  }
  if (s->ckpt_every > 0 && s->steps > 0 && s->ckpt_every > s->steps)
    dfl_diag_warning(dfl_check_where(k, "every"), "checkpoint every %lld steps, but training has only %lld steps",
                     (long long)s->ckpt_every, (long long)s->steps);
}

static void check_compile(dfl_check *c) {
  dfl_spec *s = c->spec;
  dfl_sect *k = c->compile;
  s->opt.no_block_rows = !dfl_check_int(k, "block_rows", 1);
  s->opt.no_rope_pair = !dfl_check_int(k, "rope_pair", 1);
  s->opt.no_swiglu_quant = !dfl_check_int(k, "swiglu_quant", 1);
  s->opt.no_overlap = !dfl_check_int(k, "overlap", 1);
  s->opt.tf32 = dfl_check_int(k, "tf32", 0) != 0;
}

/* "key = value" of the compile choices that differ from their defaults (all: every choice), comma
** separated into buf; returns how many were written. */
int dfl_spec_compile_desc(const dfl_spec *s, int all, char *buf, size_t n) {
  const struct { const char *key; int on, def; } o[] = {
    {"block_rows", !s->opt.no_block_rows, 1}, {"rope_pair", !s->opt.no_rope_pair, 1},
    {"swiglu_quant", !s->opt.no_swiglu_quant, 1}, {"overlap", !s->opt.no_overlap, 1}, {"tf32", s->opt.tf32 != 0, 0}};
  int k = 0;
  size_t used = 0;
  if (n) buf[0] = 0;
  for (size_t i = 0; i < sizeof o / sizeof o[0]; i++) {
    if (!all && o[i].on == o[i].def) continue;
    int w = snprintf(buf + used, n > used ? n - used : 0, "%s%s = %s", k ? ", " : "", o[i].key, o[i].on ? "true" : "false");
    if (w > 0) used += (size_t)w;
    if (used >= n) used = n ? n - 1 : 0;
    k++;
  }
  return k;
}

/* ---- driver ---- */

static int check_sections(dfl_check *c) {
  dfl_sect *slots[N_TOP];
  dfl_node *first[N_TOP] = {0};
  for (int i = 0; i < N_TOP; i++) {
    slots[i] = dfl_arena_alloc(c->ast->arena, sizeof(dfl_sect));
    if (!slots[i]) return DFL_ENOMEM;
  }
  for (dfl_node *e = c->ast->entries; e; e = e->next) {
    int k = -1;
    for (int i = 0; i < N_TOP; i++) if (!strcmp(sections[i]->name, e->key)) k = i;
    if (k < 0) {
      const char *names[N_TOP + 1];
      for (int i = 0; i < N_TOP; i++) names[i] = sections[i]->name;
      names[N_TOP] = NULL;
      char buf[64];
      const char *sug = dfl_check_nearest(e->key, names, NULL, buf, sizeof buf);
      int in_sect = 0;
      for (int i = 0; i < N_TOP && !sug; i++) if (dfl_check_key_index(sections[i], e->key) >= 0 && !in_sect) {
        dfl_diag_error(e->key_loc, "`%s` must be inside a section", e->key);
        dfl_diag_help("move it into `%s { ... }`", sections[i]->name);
        in_sect = 1;
      }
      if (in_sect) continue;
      dfl_diag_error(e->key_loc, "unknown section `%s`", e->key);
      if (sug) dfl_diag_help("did you mean `%s`?", sug);
      else dfl_diag_help("sections are target, drafter, data, loss, train, topology and compile");
      continue;
    }
    if (e->kind != DFL_V_BLOCK) {
      dfl_diag_error(e->key_loc, "`%s` is a section", e->key);
      dfl_diag_help("write `%s { ... }`", e->key);
      continue;
    }
    if (first[k]) {
      dfl_diag_error(e->key_loc, "duplicate section `%s`", e->key);
      dfl_diag_note(first[k]->key_loc, "first defined here");
      continue;
    }
    first[k] = e;
  }
  for (int i = 0; i < N_TOP; i++) dfl_check_walk(c, sections[i], first[i], slots[i]);
  c->target = slots[0]; c->drafter = slots[1]; c->data = slots[2];
  c->loss = slots[3]; c->train = slots[4]; c->topology = slots[5]; c->compile = slots[6];
  static const int required[] = {0, 1, 2, 4};   /* target, drafter, data, train */
  for (int i = 0; i < 4 && !c->quiet_missing; i++) if (!first[required[i]]) {
    dfl_diag_error(dfl_loc_file(&c->ast->src), "missing section `%s`", sections[required[i]]->name);
    dfl_diag_help("every spec has `target`, `drafter`, `data` and `train` sections; see docs/language.md");
  }
  return DFL_OK;
}

struct dfl_spec_where { dfl_check *c; };

dfl_loc dfl_spec_where_key(const dfl_spec_where *w, const char *section, const char *key) {
  dfl_check *c = w->c;
  dfl_sect *top[N_TOP] = {c->target, c->drafter, c->data, c->loss, c->train, c->topology, c->compile}, *s = NULL;
  char head[64];
  snprintf(head, sizeof head, "%s", section ? section : "");
  char *dot = strchr(head, '.');
  if (dot) *dot = 0;
  for (int i = 0; i < N_TOP; i++) if (!strcmp(sections[i]->name, head)) s = top[i];
  if (s && dot) s = sub(s, dot + 1);
  if (!s || !s->node) return dfl_loc_file(&c->ast->src);
  return dfl_check_where(s, key);
}

/* Limits of the runtime that depend on where the spec runs. */
static void check_runtime_limits(dfl_check *c) {
  const dfl_spec *s = c->spec;
  int gpus = 0;
  for (int i = 0; i < s->n_devices; i++) gpus += s->devices[i].kind == DFL_DEV_GPU;
  /* the CUDA attention kernels (runtime/cuda/cuda.c): head_dim even and at most 256 */
  if (gpus && c->arch_ok && s->drafter.head_dim > 256) {
    dfl_diag_error(dfl_check_where(dfl_check_get(c->drafter, "head_dim") ? c->drafter : c->target, "head_dim"),
                   "drafter head_dim %d: the CUDA backend's attention supports head_dim up to 256", s->drafter.head_dim);
    dfl_diag_help("set `head_dim` to 256 or less in `drafter`, or put the drafter on a CPU device");
  }
}

static int load_buffer(const char *name, const char *bytes, size_t len, dfl_spec *out, dfl_spec_deep_fn fn,
                       void *user);

int dfl_spec_load_buffer(const char *name, const char *bytes, size_t len, dfl_spec *out) {
  return load_buffer(name, bytes, len, out, NULL, NULL);
}

static int load_buffer(const char *name, const char *bytes, size_t len, dfl_spec *out, dfl_spec_deep_fn fn,
                       void *user) {
  int errors0 = dfl_diag_errors();
  memset(out, 0, sizeof *out);
  snprintf(out->file, sizeof out->file, "%s", name);
  dfl_ast ast;
  int rc = dfl_parse_buffer(name, bytes, len, &ast);
  if (rc == DFL_ENOMEM) {
    dfl_diag_error(dfl_loc_none, "out of memory while parsing %s", name);
    dfl_ast_free(&ast);
    return DFL_ENOMEM;
  }
  if (!(len > DFL_MAX_SPEC_BYTES) && !ast.partial) {
    dfl_check c;
    memset(&c, 0, sizeof c);
    c.ast = &ast;
    c.spec = out;
    c.quiet_missing = ast.syntax_errors > 0;
    c.sections = sections;
    c.n_sections = N_ALL;
    const char *slash = strrchr(name, '/');
    if (slash) {   /* memcpy, not "%.*s": gcc -fsanitize flags a false "argument is null" there */
      size_t n = (size_t)(slash - name) < sizeof c.dir - 1 ? (size_t)(slash - name) : sizeof c.dir - 1;
      memcpy(c.dir, name, n);
      c.dir[n] = 0;
    }
    if (slash == name) snprintf(c.dir, sizeof c.dir, "/");
    if (check_sections(&c) != DFL_OK) {
      dfl_diag_error(dfl_loc_none, "out of memory while checking %s", name);
      dfl_ast_free(&ast);
      return DFL_ENOMEM;
    }
    if (c.target->node) check_target(&c);
    check_drafter(&c);
    check_taps(&c);
    check_data(&c);
    check_loss(&c);
    check_train(&c);
    check_compile(&c);
    dfl_check_topology(&c);
    if (dfl_diag_errors() == errors0) check_runtime_limits(&c);
    if (fn && dfl_diag_errors() == errors0) {
      dfl_spec_where w = {&c};
      fn(out, &w, user);
    }
  }
  dfl_ast_free(&ast);
  return dfl_diag_errors() > errors0 ? DFL_ERR : DFL_OK;
}

static int load_file(const char *file, dfl_spec *out, dfl_spec_deep_fn fn, void *user);

int dfl_spec_load(const char *file, dfl_spec *out) { return load_file(file, out, NULL, NULL); }

int dfl_spec_load_deep(const char *file, dfl_spec *out, dfl_spec_deep_fn fn, void *user) {
  return load_file(file, out, fn, user);
}

static int load_file(const char *file, dfl_spec *out, dfl_spec_deep_fn fn, void *user) {
  memset(out, 0, sizeof *out);
  dfl_source src = {file, "", 0};
  struct stat st;
  if (stat(file, &st) != 0) {
    dfl_diag_error(dfl_loc_file(&src), "cannot open: %s", strerror(errno));
    return DFL_EIO;
  }
  if (S_ISDIR(st.st_mode)) {
    dfl_diag_error(dfl_loc_file(&src), "is a directory, not a .dfl file");
    return DFL_EIO;
  }
  if (S_ISREG(st.st_mode) && st.st_size > DFL_MAX_SPEC_BYTES) {
    dfl_diag_error(dfl_loc_file(&src), "file is %lld bytes; a spec may be at most %d bytes (1 MiB)", (long long)st.st_size,
                   DFL_MAX_SPEC_BYTES);
    return DFL_EFORMAT;
  }
  char *text;
  size_t len;
  int rc = dfl_read_file(file, DFL_MAX_SPEC_BYTES, &text, &len);
  if (rc == DFL_EFORMAT) {
    dfl_diag_error(dfl_loc_file(&src), "file is larger than %d bytes (1 MiB), the limit for a spec", DFL_MAX_SPEC_BYTES);
    return rc;
  }
  if (rc != DFL_OK) {
    dfl_diag_error(dfl_loc_file(&src), "cannot read: %s", strerror(errno));
    return rc;
  }
  rc = load_buffer(file, text, len, out, fn, user);
  free(text);
  return rc;
}
