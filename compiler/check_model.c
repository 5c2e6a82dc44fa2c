/*
** check_model.c: the `target` and `drafter` sections (their schemas and their meaning): the
** target's architecture, from config.json (keys beside `model` must agree with it) or written out
** for random weights (the qwen3_5 hybrid's keys too); the taps; the drafter's shape, attention
** kinds, mask token and `init`.
*/
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>

#include "compiler/check_internal.h"
#include "compiler/hfconfig.h"

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

const dfl_sdef dfl_target_schema = {"target", target_keys, NULL};
const dfl_sdef dfl_drafter_schema = {"drafter", drafter_keys, NULL};

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
  for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) ok &= dfl_check_require(c, t, req[i]);
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

void dfl_check_target(dfl_check *c) {
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
    if (!dfl_check_path(c, model, s->target_dir)) return;
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
  for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) ok &= dfl_check_require(c, t, req[i]);
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

void dfl_check_taps(dfl_check *c) {
  dfl_spec *s = c->spec;
  dfl_node *v = dfl_check_get(c->target, "taps");
  if (!v) {
    if (c->arch_ok && s->drafter.layers > DFL_MAX_FEATURE_BLOCKS) {
      dfl_diag_error(dfl_check_where(c->target, NULL), "the default taps are one per drafter layer: %d, more than the "
                     "%d the features can concatenate", s->drafter.layers, DFL_MAX_FEATURE_BLOCKS);
      dfl_diag_help("set `taps = [...]` explicitly: at most %d target layers", DFL_MAX_FEATURE_BLOCKS);
      return;
    }
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
  if (v->nkids == 0 || v->nkids > DFL_MAX_FEATURE_BLOCKS) {
    dfl_diag_error(v->loc, "`taps` must list between 1 and %d layers", DFL_MAX_FEATURE_BLOCKS);
    if (v->nkids > DFL_MAX_FEATURE_BLOCKS)
      dfl_diag_help("the tapped states are concatenated into the drafter's features by one op of at most %d inputs",
                    DFL_MAX_FEATURE_BLOCKS);
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

void dfl_check_drafter(dfl_check *c) {
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
  if (dfl_check_require(c, d, "mask_token")) {
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
      if (dfl_check_path(c, init, s->init_from)) {
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
