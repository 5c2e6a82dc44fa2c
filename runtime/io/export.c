/*
** export.c: write a trained drafter as a DFlash Hugging Face directory, and read one back.
**
** Tensor names and shapes follow SpecForge's DFlashDraftModel state dict (dflash-training.md
** §5); config keys follow the released drafters' config.json (§1.1). No auto_map is written: we
** ship no Python module, and SGLang's export gate drops it too.
*/
#include "runtime/io/export.h"
#include "runtime/io/io_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int dfl_drafter_tensor_count(const dfl_spec *s) { return 3 + 11 * s->drafter.layers; }

static void put(dfl_drafter_tensor *t, int *k, const char *name, int64_t a, int64_t b) {
  dfl_drafter_tensor *x = &t[(*k)++];
  snprintf(x->name, sizeof x->name, "%s", name);
  x->ndim = b ? 2 : 1;
  x->shape[0] = a;
  x->shape[1] = b;
}

int dfl_drafter_tensor_list(const dfl_spec *s, dfl_drafter_tensor *out) {
  const dfl_arch *a = &s->drafter;
  int64_t H = a->hidden, hd = a->head_dim, q = (int64_t)a->heads * hd, kv = (int64_t)a->kv_heads * hd;
  int k = 0;
  char nm[96];
  put(out, &k, "fc.weight", H, (int64_t)s->n_taps * H);
  put(out, &k, "hidden_norm.weight", H, 0);
  for (int l = 0; l < a->layers; l++) {
#define P(suffix, d0, d1) snprintf(nm, sizeof nm, "layers.%d.%s", l, suffix), put(out, &k, nm, d0, d1)
    P("input_layernorm.weight", H, 0);
    P("self_attn.q_proj.weight", q, H);
    P("self_attn.k_proj.weight", kv, H);
    P("self_attn.v_proj.weight", kv, H);
    P("self_attn.o_proj.weight", H, q);
    P("self_attn.q_norm.weight", hd, 0);
    P("self_attn.k_norm.weight", hd, 0);
    P("post_attention_layernorm.weight", H, 0);
    P("mlp.gate_proj.weight", (int64_t)a->intermediate, H);
    P("mlp.up_proj.weight", (int64_t)a->intermediate, H);
    P("mlp.down_proj.weight", H, (int64_t)a->intermediate);
#undef P
  }
  put(out, &k, "norm.weight", H, 0);
  return k;
}

/* The one sliding window of the drafter (HF configs have a single sliding_window), 0 if none. */
static int sliding_window(const dfl_spec *s, int *w) {
  *w = 0;
  for (int l = 0; l < s->drafter.layers; l++) {
    if (!s->sliding[l]) continue;
    if (*w && s->window[l] != *w) return -1;
    *w = s->window[l];
  }
  return 0;
}

static json_t *config_json(const dfl_spec *s) {
  const dfl_arch *a = &s->drafter;
  int W;
  sliding_window(s, &W);
  json_t *c = json_object(), *dc = json_object(), *taps = json_array(), *lt = json_array();
  for (int i = 0; i < s->n_taps; i++) json_array_append_new(taps, json_integer(s->taps[i]));
  for (int l = 0; l < a->layers; l++)
    json_array_append_new(lt, json_string(s->sliding[l] ? "sliding_attention" : "full_attention"));
  json_object_set_new(dc, "mask_token_id", json_integer(s->mask_token));
  json_object_set_new(dc, "target_layer_ids", taps);
  int64_t maxpos = a->max_positions > 0 ? a->max_positions : s->target.max_positions;
  json_t *arch = json_array();
  json_array_append_new(arch, json_string("DFlashDraftModel"));
  json_object_set_new(c, "architectures", arch);
  json_object_set_new(c, "attention_bias", json_false());
  json_object_set_new(c, "attention_dropout", json_real(0.0));
  json_object_set_new(c, "block_size", json_integer(s->block_size));
  json_object_set_new(c, "dflash_config", dc);
  json_object_set_new(c, "dtype", json_string("bfloat16"));
  json_object_set_new(c, "head_dim", json_integer(a->head_dim));
  json_object_set_new(c, "hidden_act", json_string("silu"));
  json_object_set_new(c, "hidden_size", json_integer(a->hidden));
  json_object_set_new(c, "initializer_range", json_real(0.02));
  json_object_set_new(c, "intermediate_size", json_integer(a->intermediate));
  json_object_set_new(c, "layer_types", lt);
  json_object_set_new(c, "max_position_embeddings", json_integer(maxpos));
  json_object_set_new(c, "max_window_layers", json_integer(a->layers));
  json_object_set_new(c, "model_type", json_string("qwen3"));
  json_object_set_new(c, "num_attention_heads", json_integer(a->heads));
  json_object_set_new(c, "num_hidden_layers", json_integer(a->layers));
  json_object_set_new(c, "num_key_value_heads", json_integer(a->kv_heads));
  json_object_set_new(c, "num_target_layers", json_integer(s->target.layers));
  json_object_set_new(c, "rms_norm_eps", json_real(a->rms_eps));
  json_object_set_new(c, "rope_scaling", json_null());
  json_object_set_new(c, "rope_theta", json_real(a->rope_theta));
  json_object_set_new(c, "sliding_window", W ? json_integer(W) : json_null());
  json_object_set_new(c, "tie_word_embeddings", json_false());
  json_object_set_new(c, "torch_dtype", json_string("bfloat16"));   /* transformers < 4.56 */
  json_object_set_new(c, "use_cache", json_true());
  json_object_set_new(c, "use_sliding_window", json_boolean(W != 0));
  json_object_set_new(c, "vocab_size", json_integer(a->vocab > 0 ? a->vocab : s->target.vocab));
  return c;
}

static int mkdirs(const char *dir) {
  char p[DFL_PATH_MAX];
  snprintf(p, sizeof p, "%s", dir);
  for (char *q = p + 1; *q; q++) {
    if (*q != '/') continue;
    *q = 0;
    if (mkdir(p, 0777) != 0 && errno != EEXIST) return -1;
    *q = '/';
  }
  return mkdir(p, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

static int write_atomic(const char *path, const char *text, char *err, size_t errlen) {
  char tmp[2 * DFL_PATH_MAX + 64];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) return dfl_io_seterr(err, errlen, DFL_EIO, "%s: cannot create (%s)", tmp, strerror(errno));
  size_t n = strlen(text);
  int ok = fwrite(text, 1, n, f) == n && fputc('\n', f) != EOF && fflush(f) == 0 &&
           fsync(fileno(f)) == 0;
  if (fclose(f) != 0) ok = 0;
  if (!ok || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return dfl_io_seterr(err, errlen, DFL_EIO, "%s: write failed (%s)", path, strerror(e));
  }
  return DFL_OK;
}

int dfl_export_drafter(const char *dir, const dfl_spec *s, const dfl_st_out *t, int n, char *err,
                       size_t errlen) {
  int m = dfl_drafter_tensor_count(s), W, rc = DFL_OK;
  if (sliding_window(s, &W) != 0)
    return dfl_io_seterr(err, errlen, DFL_ERR, "%s: the drafter's sliding layers have different windows; "
                  "the Hugging Face config holds one sliding_window", dir);
  dfl_drafter_tensor *want = malloc((size_t)m * sizeof *want);
  dfl_st_out *out = calloc((size_t)m, sizeof *out);
  if (!want || !out) { rc = dfl_io_seterr(err, errlen, DFL_ENOMEM, "%s: out of memory", dir); goto done; }
  dfl_drafter_tensor_list(s, want);
  /* Every given tensor must be a drafter tensor... */
  for (int i = 0; i < n; i++) {
    int j = 0;
    while (j < m && strcmp(want[j].name, t[i].name)) j++;
    if (j == m) {
      rc = dfl_io_seterr(err, errlen, DFL_ESHAPE, "%s: tensor %s is not part of a DFlash drafter with %d "
                  "layers (export writes only the drafter's own tensors)", dir, t[i].name,
                  s->drafter.layers);
      goto done;
    }
    if (out[j].name) {
      rc = dfl_io_seterr(err, errlen, DFL_ESHAPE, "%s: tensor %s given twice", dir, t[i].name);
      goto done;
    }
    int ok = t[i].ndim == want[j].ndim;
    for (int d = 0; ok && d < want[j].ndim; d++) ok = t[i].shape[d] == want[j].shape[d];
    if (!ok) {
      char a[128], b[128];
      dfl_st_shape_str(a, sizeof a, want[j].ndim, want[j].shape);
      dfl_st_shape_str(b, sizeof b, t[i].ndim, t[i].shape);
      rc = dfl_io_seterr(err, errlen, DFL_ESHAPE, "%s: tensor %s: expected shape %s, found %s", dir,
                  t[i].name, a, b);
      goto done;
    }
    out[j] = t[i];
    out[j].dtype = DFL_ST_BF16;
    if (t[i].raw && t[i].dtype == DFL_ST_F32) { out[j].f32 = t[i].raw; out[j].raw = NULL; }
    else if (t[i].raw && t[i].dtype != DFL_ST_BF16) {
      rc = dfl_io_seterr(err, errlen, DFL_ERR, "%s: tensor %s: raw data must be F32 or BF16, not %s", dir,
                  t[i].name, dfl_st_dtype_name(t[i].dtype));
      goto done;
    } else if (!t[i].raw && !t[i].f32) {
      rc = dfl_io_seterr(err, errlen, DFL_ERR, "%s: tensor %s: no data", dir, t[i].name);
      goto done;
    }
  }
  /* ...and every drafter tensor must be given. */
  for (int j = 0; j < m; j++)
    if (!out[j].name) {
      rc = dfl_io_seterr(err, errlen, DFL_ESHAPE, "%s: tensor %s: missing (every drafter tensor must be "
                  "exported)", dir, want[j].name);
      goto done;
    }
  if (mkdirs(dir) != 0) {
    rc = dfl_io_seterr(err, errlen, DFL_EIO, "%s: cannot create directory (%s)", dir, strerror(errno));
    goto done;
  }
  char path[DFL_PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  static const char *const meta[] = {"format", "pt"};   /* transformers checks this key */
  if ((rc = dfl_st_write(path, out, m, meta, 1, err, errlen))) goto done;
  json_t *c = config_json(s);
  char *text = json_dumps(c, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
  json_decref(c);
  if (!text) { rc = dfl_io_seterr(err, errlen, DFL_ENOMEM, "%s: out of memory", dir); goto done; }
  snprintf(path, sizeof path, "%s/config.json", dir);
  rc = write_atomic(path, text, err, errlen);
  free(text);
done:
  free(want);
  free(out);
  return rc;
}

/* --- loading --- */

static int get_int(json_t *c, const char *key, json_int_t *v) {
  json_t *x = json_object_get(c, key);
  if (!json_is_integer(x)) return 0;
  *v = json_integer_value(x);
  return 1;
}

static int get_num(json_t *c, const char *key, double *v) {
  json_t *x = json_object_get(c, key);
  if (!json_is_number(x)) return 0;
  *v = json_number_value(x);
  return 1;
}

static int close_enough(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b)); }

static int check_config(const char *cpath, json_t *c, const dfl_spec *s, char *err, size_t errlen) {
  const dfl_arch *a = &s->drafter;
  json_t *arch = json_object_get(c, "architectures");
  int is_dflash = 0;
  for (size_t i = 0; i < json_array_size(arch); i++)
    is_dflash |= json_is_string(json_array_get(arch, i)) &&
                 strstr(json_string_value(json_array_get(arch, i)), "DFlash") != NULL;
  if (!is_dflash)
    return dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: architectures does not name a DFlash drafter "
                  "(expected [\"DFlashDraftModel\"]): is this a target model directory?", cpath);
  json_t *dc = json_object_get(c, "dflash_config");
  if (!json_is_object(dc))
    return dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: no dflash_config object", cpath);
  json_int_t hd;
  if (!get_int(c, "head_dim", &hd)) hd = a->heads ? a->hidden / a->heads : 0;   /* HF default */
  struct { const char *key; long long want; const char *what; } ints[] = {
    {"hidden_size", a->hidden, "hidden size"},
    {"num_hidden_layers", a->layers, "drafter layers"},
    {"num_attention_heads", a->heads, "attention heads"},
    {"num_key_value_heads", a->kv_heads, "KV heads"},
    {"intermediate_size", a->intermediate, "MLP width"},
    {"vocab_size", a->vocab > 0 ? a->vocab : s->target.vocab, "vocabulary size"},
  };
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
    json_int_t v;
    if (!get_int(c, ints[i].key, &v))
      return dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: %s is missing or not an integer", cpath, ints[i].key);
    if (v != ints[i].want)
      return dfl_io_seterr(err, errlen, DFL_ESHAPE, "%s: %s is %lld, but the spec (%s) says %s = %lld", cpath,
                    ints[i].key, (long long)v, s->file, ints[i].what, ints[i].want);
  }
  if (hd != a->head_dim)
    return dfl_io_seterr(err, errlen, DFL_ESHAPE, "%s: head_dim is %lld, but the spec (%s) has %d", cpath,
                  (long long)hd, s->file, a->head_dim);
  json_int_t B;
  if (!get_int(c, "block_size", &B) && !get_int(dc, "block_size", &B))
    return dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: no block_size", cpath);
  if (B != s->block_size)
    return dfl_io_seterr(err, errlen, DFL_ESHAPE, "%s: block_size is %lld, but the spec (%s) has %d", cpath,
                  (long long)B, s->file, s->block_size);
  json_int_t mt;
  if (!get_int(dc, "mask_token_id", &mt))
    return dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: dflash_config.mask_token_id is missing", cpath);
  if (mt != s->mask_token)
    return dfl_io_seterr(err, errlen, DFL_ESHAPE, "%s: dflash_config.mask_token_id is %lld, but the spec "
                  "(%s) uses %d", cpath, (long long)mt, s->file, s->mask_token);
  json_t *taps = json_object_get(dc, "target_layer_ids");
  int ok = json_is_array(taps) && (int)json_array_size(taps) == s->n_taps;
  for (int i = 0; ok && i < s->n_taps; i++)
    ok = json_is_integer(json_array_get(taps, (size_t)i)) &&
         json_integer_value(json_array_get(taps, (size_t)i)) == s->taps[i];
  if (!ok) {
    char want[512];
    size_t o = (size_t)snprintf(want, sizeof want, "[");
    for (int i = 0; i < s->n_taps && o < sizeof want; i++)
      o += (size_t)snprintf(want + o, sizeof want - o, "%s%d", i ? ", " : "", s->taps[i]);
    if (o < sizeof want) snprintf(want + o, sizeof want - o, "]");
    char *got = json_dumps(taps ? taps : json_null(), JSON_ENCODE_ANY | JSON_COMPACT);
    dfl_io_seterr(err, errlen, DFL_ESHAPE, "%s: dflash_config.target_layer_ids is %s, but the spec (%s) "
           "taps %s", cpath, got ? got : "?", s->file, want);
    free(got);
    return DFL_ESHAPE;
  }
  json_t *lt = json_object_get(c, "layer_types");
  json_int_t W = 0;
  get_int(c, "sliding_window", &W);
  for (int l = 0; l < a->layers; l++) {
    const char *t = lt ? json_string_value(json_array_get(lt, (size_t)l)) : "full_attention";
    if (!t || (strcmp(t, "full_attention") && strcmp(t, "sliding_attention")))
      return dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: layer_types[%d] must be \"full_attention\" or "
                    "\"sliding_attention\"", cpath, l);
    int sl = !strcmp(t, "sliding_attention");
    if (sl != !!s->sliding[l])
      return dfl_io_seterr(err, errlen, DFL_ESHAPE, "%s: layer_types[%d] is %s, but the spec (%s) makes "
                    "drafter layer %d %s", cpath, l, t, s->file, l, s->sliding[l] ? "sliding" : "full");
    if (sl && W != s->window[l])
      return dfl_io_seterr(err, errlen, DFL_ESHAPE, "%s: sliding_window is %lld, but the spec (%s) gives "
                    "layer %d a window of %d", cpath, (long long)W, s->file, l, s->window[l]);
  }
  double theta, eps;
  json_t *rp = json_object_get(c, "rope_parameters");
  if (!get_num(c, "rope_theta", &theta) && !get_num(rp, "rope_theta", &theta))
    return dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: no rope_theta (or rope_parameters.rope_theta)", cpath);
  if (!close_enough(theta, a->rope_theta))
    return dfl_io_seterr(err, errlen, DFL_ESHAPE, "%s: rope_theta is %g, but the spec (%s) has %g", cpath,
                  theta, s->file, a->rope_theta);
  if (get_num(c, "rms_norm_eps", &eps) && !close_enough(eps, a->rms_eps))
    return dfl_io_seterr(err, errlen, DFL_ESHAPE, "%s: rms_norm_eps is %g, but the spec (%s) has %g", cpath,
                  eps, s->file, a->rms_eps);
  json_t *act = json_object_get(c, "hidden_act");
  if (act && (!json_is_string(act) || strcmp(json_string_value(act), "silu")))
    return dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: hidden_act must be \"silu\"", cpath);
  return DFL_OK;
}

int dfl_drafter_check_config(const char *dir, const dfl_spec *s, char *err, size_t errlen) {
  char cpath[DFL_PATH_MAX + 16];
  snprintf(cpath, sizeof cpath, "%s/config.json", dir);
  json_error_t je;
  char why[DFL_PATH_MAX + 64];
  if (dfl_file_why(cpath, why, sizeof why) && access(cpath, F_OK) == 0)   /* a FIFO would block json_load_file */
    return dfl_io_seterr(err, errlen, DFL_EIO, "%s: not a drafter directory?", why);
  json_t *c = json_load_file(cpath, JSON_REJECT_DUPLICATES, &je);
  if (!c) {
    if (access(cpath, R_OK) != 0)
      return dfl_io_seterr(err, errlen, DFL_EIO, "%s: cannot open (%s): not a drafter directory?", cpath,
                    strerror(errno));
    return dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s:%d: not valid JSON (%s)", cpath, je.line, je.text);
  }
  int rc = json_is_object(c) ? check_config(cpath, c, s, err, errlen)
                             : dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: not a JSON object", cpath);
  json_decref(c);
  return rc;
}

int dfl_drafter_load(const char *dir, const dfl_spec *s, dfl_drafter_weights *w, char *err,
                     size_t errlen) {
  memset(w, 0, sizeof *w);
  int rc = dfl_drafter_check_config(dir, s, err, errlen);
  if (rc) return rc;
  dfl_st st;
  if ((rc = dfl_st_open(&st, dir, err, errlen))) return rc;
  int m = dfl_drafter_tensor_count(s);
  w->t = malloc((size_t)m * sizeof *w->t);
  w->data = calloc((size_t)m, sizeof *w->data);
  if (!w->t || !w->data) { rc = dfl_io_seterr(err, errlen, DFL_ENOMEM, "%s: out of memory", dir); goto done; }
  w->n = dfl_drafter_tensor_list(s, w->t);
  for (int i = 0; i < m; i++) {
    const dfl_drafter_tensor *t = &w->t[i];
    const char *name = t->name;
    char pref[128];
    snprintf(pref, sizeof pref, "model.%s", t->name);
    if (!dfl_st_find(&st, name) && dfl_st_find(&st, pref)) name = pref;
    const dfl_st_entry *e;
    if ((rc = dfl_st_expect(&st, name, t->ndim, t->shape, &e, err, errlen))) goto done;
    if (e->dtype > DFL_ST_BF16) {
      rc = dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: tensor %s: dtype %s, expected a float type",
                  st.files[e->file].path, name, dfl_st_dtype_name(e->dtype));
      goto done;
    }
    w->data[i] = malloc((size_t)dfl_st_numel(e) * sizeof(float));
    if (!w->data[i]) { rc = dfl_io_seterr(err, errlen, DFL_ENOMEM, "%s: out of memory", dir); goto done; }
    int64_t bad = -1;
    dfl_st_read_f32_scan(&st, e, w->data[i], &bad);
    if (bad >= 0) {
      rc = dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: tensor %s: element %lld is %s: the drafter's weights are "
                         "corrupt; not training on them", st.files[e->file].path, name, (long long)bad,
                         isnan(w->data[i][bad]) ? "NaN" : "Inf");
      goto done;
    }
  }
done:
  dfl_st_close(&st);
  if (rc) dfl_drafter_free(w);
  return rc;
}

const float *dfl_drafter_get(const dfl_drafter_weights *w, const char *name) {
  for (int i = 0; i < w->n; i++)
    if (!strcmp(w->t[i].name, name)) return w->data[i];
  return NULL;
}

void dfl_drafter_free(dfl_drafter_weights *w) {
  if (w->data)
    for (int i = 0; i < w->n; i++) free(w->data[i]);
  free(w->data);
  free(w->t);
  memset(w, 0, sizeof *w);
}
