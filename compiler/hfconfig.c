/*
** hfconfig.c: reading a target's config.json and tokenizer.json (jansson, duplicates rejected).
*/
#include "compiler/hfconfig.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CONFIG_MAX_BYTES (16u << 20)
#define TOKENIZER_MAX_BYTES (256u << 20)

int dfl_read_file(const char *path, size_t max, char **text, size_t *len) {
  *text = NULL;
  *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return DFL_EIO;
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) { fclose(f); errno = EISDIR; return DFL_EFORMAT; }
  if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size > max) {
    fclose(f);
    errno = EFBIG;
    return DFL_EFORMAT;
  }
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap + 1);
  if (!buf) { fclose(f); return DFL_ENOMEM; }
  for (;;) {
    if (n == cap) {
      if (cap > max) { free(buf); fclose(f); errno = EFBIG; return DFL_EFORMAT; }
      cap *= 2;
      char *nb = realloc(buf, cap + 1);
      if (!nb) { free(buf); fclose(f); return DFL_ENOMEM; }
      buf = nb;
    }
    size_t r = fread(buf + n, 1, cap - n, f);
    n += r;
    if (r == 0) break;
  }
  int err = ferror(f);
  fclose(f);
  if (err) { free(buf); errno = EIO; return DFL_EIO; }
  if (n > max) { free(buf); errno = EFBIG; return DFL_EFORMAT; }
  buf[n] = 0;
  *text = buf;
  *len = n;
  return DFL_OK;
}

/* The line/column of the first `"key"` in the text, so value errors get a caret too. */
static dfl_loc key_loc(const dfl_source *src, const char *key) {
  char pat[128];
  snprintf(pat, sizeof pat, "\"%s\"", key);
  const char *p = memmem(src->text, src->len, pat, strlen(pat)); /* the text need not end in a NUL */
  if (!p) return dfl_loc_file(src);
  dfl_loc l = {src, 1, 1, (int)strlen(pat)};
  for (const char *q = src->text; q < p; q++) {
    if (*q == '\n') { l.line++; l.col = 1; }
    else l.col++;
  }
  return l;
}

typedef struct { const dfl_source *src; int errors; } cfgctx;

/* A positive integer field; -1 when absent (dflt < 0 means required). */
static int64_t int_field(cfgctx *c, json_t *obj, const char *key, int64_t dflt, int64_t max) {
  json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) {
    if (dflt >= 0) return dflt;
    dfl_diag_error(dfl_loc_file(c->src), "missing `%s`", key);
    dfl_diag_help("the target's config.json needs `%s` (a positive integer)", key);
    c->errors++;
    return -1;
  }
  if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > max) {
    dfl_diag_error(key_loc(c->src, key), "`%s` must be an integer between 1 and %lld", key, (long long)max);
    c->errors++;
    return -1;
  }
  return json_integer_value(v);
}

static double num_field(cfgctx *c, json_t *obj, const char *key, double dflt) {
  json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) return dflt;
  if (!json_is_number(v) || !(json_number_value(v) > 0)) {
    dfl_diag_error(key_loc(c->src, key), "`%s` must be a positive number", key);
    c->errors++;
    return dflt;
  }
  return json_number_value(v);
}

static int family_of(const char *s, dfl_family *f) {
  if (!s) return 0;
  if (!strcmp(s, "qwen3") || !strcmp(s, "Qwen3ForCausalLM")) { *f = DFL_FAMILY_QWEN3; return 1; }
  if (!strcmp(s, "llama") || !strcmp(s, "LlamaForCausalLM")) { *f = DFL_FAMILY_LLAMA; return 1; }
  if (!strcmp(s, "qwen3_5_text") || !strcmp(s, "qwen3_5") || !strcmp(s, "Qwen3_5ForCausalLM") ||
      !strcmp(s, "Qwen3_5ForConditionalGeneration")) { *f = DFL_FAMILY_QWEN3_5; return 1; }
  return 0;
}

/* A number from `obj`, else from `inner` (rope_parameters); `dflt` when neither has it. */
static double num_either(cfgctx *c, json_t *obj, json_t *inner, const char *key, double dflt) {
  /* both places, disagreeing: which one HF applies depends on its version, so neither is taken */
  json_t *a = json_object_get(obj, key), *b = json_is_object(inner) ? json_object_get(inner, key) : NULL;
  if (json_is_number(a) && json_is_number(b) && json_number_value(a) != json_number_value(b)) {
    dfl_diag_error(key_loc(c->src, key), "`%s` is %g here and %g in rope_parameters", key, json_number_value(a),
                   json_number_value(b));
    dfl_diag_help("keep one value (the checkpoint's model card says which): the two disagree, and HF versions "
                  "differ in which they read");
    c->errors++;
    return json_number_value(a);
  }
  if (json_object_get(obj, key)) return num_field(c, obj, key, dflt);
  if (json_is_object(inner) && json_object_get(inner, key)) return num_field(c, inner, key, dflt);
  return dflt;
}

/* qwen3_5: the layer pattern (`layer_types`, else `full_attention_interval`, HF's default 4), the
** Gated DeltaNet's heads and dims, partial rotary (top level or in rope_parameters), (1 + w) norms. */
static void hybrid_fields(cfgctx *c, json_t *obj, json_t *rp, dfl_arch *a) {
  a->norm_plus1 = 1;
  a->lin_key_heads = (int)int_field(c, obj, "linear_num_key_heads", -1, 65536);
  a->lin_value_heads = (int)int_field(c, obj, "linear_num_value_heads", -1, 65536);
  a->lin_key_dim = (int)int_field(c, obj, "linear_key_head_dim", -1, 65536);
  a->lin_value_dim = (int)int_field(c, obj, "linear_value_head_dim", -1, 65536);
  a->conv_kernel = (int)int_field(c, obj, "linear_conv_kernel_dim", 4, 64);
  json_t *lt = json_object_get(obj, "layer_types");
  if (lt && !json_is_null(lt)) {
    if (!json_is_array(lt) || (int)json_array_size(lt) != a->layers) {
      dfl_diag_error(key_loc(c->src, "layer_types"), "`layer_types` must be a list of %d strings (num_hidden_layers)",
                     a->layers);
      c->errors++;
    } else {
      for (int l = 0; l < a->layers; l++) {
        const char *t = json_string_value(json_array_get(lt, (size_t)l));
        if (t && !strcmp(t, "linear_attention")) a->linear[l] = 1;
        else if (t && !strcmp(t, "full_attention")) a->linear[l] = 0;
        else {
          dfl_diag_error(key_loc(c->src, "layer_types"), "`layer_types[%d]` is %s%s%s: neither \"linear_attention\" nor "
                         "\"full_attention\"", l, t ? "\"" : "", t ? t : "not a string", t ? "\"" : "");
          c->errors++;
          break;
        }
      }
    }
  } else {
    int every = (int)int_field(c, obj, "full_attention_interval", 4, DFL_MAX_LAYERS);
    for (int l = 0; l < a->layers && every > 0; l++) a->linear[l] = (l + 1) % every != 0;
  }
  double f = num_either(c, obj, rp, "partial_rotary_factor", 1.0);
  if (c->errors) return;
  if (!(f <= 1.0)) {
    dfl_diag_error(key_loc(c->src, "partial_rotary_factor"), "`partial_rotary_factor` %g is above 1", f);
    c->errors++;
    return;
  }
  a->rot_dim = (int)(f * a->head_dim + 0.5);
  if (a->rot_dim < 2 || a->rot_dim % 2) {
    dfl_diag_error(key_loc(c->src, "partial_rotary_factor"), "partial_rotary_factor %g of head_dim %d rotates %d dims: "
                   "RoPE needs an even number, at least 2", f, a->head_dim, a->rot_dim);
    c->errors++;
  }
  if (a->rot_dim == a->head_dim) a->rot_dim = 0;
  if (a->lin_value_heads % a->lin_key_heads) {
    dfl_diag_error(key_loc(c->src, "linear_num_value_heads"), "linear_num_value_heads %d is not a multiple of "
                   "linear_num_key_heads %d", a->lin_value_heads, a->lin_key_heads);
    c->errors++;
  }
}

int dfl_hfconfig_parse(const char *name, const char *text, size_t len, dfl_arch *out) {
  dfl_source src = {name, text, len};
  cfgctx c = {&src, 0};
  memset(out, 0, sizeof *out);
  json_error_t je;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  if (!root) {
    dfl_loc l = {&src, je.line > 0 ? je.line : 0, je.column > 0 ? je.column : 1, 1};
    dfl_diag_error(l, "malformed JSON: %s", je.text);
    return DFL_EFORMAT;
  }
  if (!json_is_object(root)) {
    dfl_diag_error(dfl_loc_file(&src), "expected a JSON object at the top level");
    json_decref(root);
    return DFL_EFORMAT;
  }
  json_t *obj = root;
  json_t *tc = json_object_get(root, "text_config");
  if (json_is_object(tc)) obj = tc;   /* multimodal wrappers keep the LM in text_config */

  /* Family: model_type first, then architectures[0]; the wrapper's fields count too. */
  dfl_family fam = DFL_FAMILY_QWEN3;
  const char *mt = json_string_value(json_object_get(obj, "model_type"));
  const char *mt_root = json_string_value(json_object_get(root, "model_type"));
  json_t *archs = json_object_get(root, "architectures");
  const char *arch0 = json_is_array(archs) ? json_string_value(json_array_get(archs, 0)) : NULL;
  if (!family_of(mt, &fam) && !family_of(mt_root, &fam) && !family_of(arch0, &fam)) {
    const char *what = mt ? mt : mt_root ? mt_root : arch0;
    dfl_diag_error(key_loc(&src, mt || mt_root ? "model_type" : "architectures"),
                   what ? "unsupported model `%s`" : "%s", what ? what : "no `model_type` or `architectures`");
    dfl_diag_help("dflc supports dense Qwen3 (`qwen3`, Qwen3ForCausalLM), Llama (`llama`, LlamaForCausalLM) and hybrid "
                  "Qwen3.5/3.6 (`qwen3_5_text`, `qwen3_5`) targets");
    c.errors++;
  }
  out->family = fam;
  out->qk_norm = fam != DFL_FAMILY_LLAMA;
  out->hidden = (int)int_field(&c, obj, "hidden_size", -1, INT_MAX);
  out->layers = (int)int_field(&c, obj, "num_hidden_layers", -1, DFL_MAX_LAYERS);
  out->heads = (int)int_field(&c, obj, "num_attention_heads", -1, 65536);
  out->kv_heads = (int)int_field(&c, obj, "num_key_value_heads", out->heads > 0 ? out->heads : 1, 65536);
  int64_t hd_default = out->hidden > 0 && out->heads > 0 ? out->hidden / out->heads : 1;
  out->head_dim = (int)int_field(&c, obj, "head_dim", hd_default, 65536);
  out->intermediate = (int)int_field(&c, obj, "intermediate_size", -1, INT_MAX);
  out->vocab = (int)int_field(&c, obj, "vocab_size", -1, INT_MAX);
  out->max_positions = int_field(&c, obj, "max_position_embeddings", fam == DFL_FAMILY_LLAMA ? 2048 : 32768,
                                 INT64_MAX);
  /* rope_theta moved into rope_parameters in newer transformers; accept both. */
  json_t *rp = json_object_get(obj, "rope_parameters");
  if (json_object_get(obj, "rope_theta")) out->rope_theta = num_field(&c, obj, "rope_theta", 10000.0);
  else if (json_is_object(rp)) out->rope_theta = num_field(&c, rp, "rope_theta", 10000.0);
  else out->rope_theta = 10000.0;
  out->rms_eps = num_field(&c, obj, "rms_norm_eps", 1e-6);
  json_t *tie = json_object_get(obj, "tie_word_embeddings");
  if (!tie) tie = json_object_get(root, "tie_word_embeddings");
  if (tie && !json_is_boolean(tie) && !json_is_null(tie)) {
    dfl_diag_error(key_loc(&src, "tie_word_embeddings"), "`tie_word_embeddings` must be true or false");
    c.errors++;
  }
  out->tie_embeddings = json_is_true(tie);
  if (!c.errors && out->heads % out->kv_heads) {
    dfl_diag_error(key_loc(&src, "num_key_value_heads"), "num_attention_heads %d is not a multiple of num_key_value_heads %d",
                   out->heads, out->kv_heads);
    c.errors++;
  }
  if (!c.errors && out->head_dim < 1) { /* no head_dim, and hidden_size // num_attention_heads is 0 */
    dfl_diag_error(key_loc(&src, "hidden_size"), "no `head_dim`, and hidden_size %d // num_attention_heads %d is 0",
                   out->hidden, out->heads);
    dfl_diag_help("give `head_dim`, or a hidden_size of at least num_attention_heads");
    c.errors++;
  }
  if (!c.errors && out->head_dim % 2) {
    dfl_diag_error(key_loc(&src, "head_dim"), "head_dim %d is odd; RoPE needs an even head dimension", out->head_dim);
    c.errors++;
  }
  if (fam == DFL_FAMILY_QWEN3_5 && !c.errors) hybrid_fields(&c, obj, rp, out);
  json_decref(root);
  return c.errors ? DFL_EFORMAT : DFL_OK;
}

static void join(char *out, size_t n, const char *dir, const char *file) {
  size_t l = strlen(dir);
  snprintf(out, n, "%s%s%s", dir, l && dir[l - 1] != '/' ? "/" : "", file);
}

int dfl_hfconfig_load(const char *dir, dfl_arch *out, dfl_loc from) {
  char path[DFL_PATH_MAX + 32];
  join(path, sizeof path, dir, "config.json");
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    dfl_diag_error(from, "target model directory `%s` %s", dir, stat(dir, &st) != 0 ? "does not exist" : "is not a directory");
    dfl_diag_help("`model` names a Hugging Face model directory (config.json + *.safetensors), relative to this file");
    return DFL_EIO;
  }
  char *text = NULL, why[DFL_PATH_MAX + 64];
  size_t len;
  /* stat'ed first: open() of a FIFO would block until a writer comes (a missing file keeps
  ** strerror's words; a dangling link or a loop is named as one) */
  struct stat lst;
  int rc = dfl_file_why(path, why, sizeof why) && lstat(path, &lst) == 0 ? DFL_EIO : DFL_OK;
  if (rc == DFL_OK) rc = dfl_read_file(path, CONFIG_MAX_BYTES, &text, &len);
  else errno = 0;
  if (rc != DFL_OK) {
    dfl_source s = {path, "", 0};
    dfl_diag_error(dfl_loc_file(&s), "cannot read the target's config: %s", errno ? strerror(errno) : why);
    dfl_diag_note(from, "the target model is named here");
    return rc;
  }
  rc = dfl_hfconfig_parse(path, text, len, out);
  if (rc != DFL_OK) dfl_diag_note(from, "the target model is named here");
  free(text);
  return rc;
}

/* A byte-level BPE vocabulary key (GPT-2's bytes_to_unicode: printable bytes stand for themselves,
** the other 68 are U+0100.. in byte order) as the text it stands for, so a message shows `，`, not
** `ï¼Į`. Bytes that are not printable UTF-8 are written \xNN. A key with other code points is
** not byte-level: copied as is. */
static void byte_level_text(const char *key, char *out, size_t n) {
  unsigned char b[512];
  size_t k = 0;
  const unsigned char *p = (const unsigned char *)key;
  while (*p && k < sizeof b) {
    unsigned cp, len = *p < 0x80 ? 1 : (*p >> 5) == 6 ? 2 : (*p >> 4) == 14 ? 3 : 0;
    if (len == 1) cp = *p;
    else if (len == 2 && (p[1] & 0xc0) == 0x80) cp = (unsigned)(*p & 0x1f) << 6 | (p[1] & 0x3f);
    else { snprintf(out, n, "%s", key); return; }   /* not a byte-level key */
    int self = (cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255);
    if (self) b[k++] = (unsigned char)cp;
    else if (cp >= 256 && cp < 256 + 68) {
      unsigned idx = cp - 256;   /* the idx-th byte outside the printable ranges */
      b[k++] = (unsigned char)(idx <= 32 ? idx : idx <= 66 ? 127 + (idx - 33) : 173);
    } else { snprintf(out, n, "%s", key); return; }
    p += len;
  }
  size_t o = 0;
  for (size_t i = 0; i < k && o + 5 < n;) {
    unsigned len = b[i] < 0x80 ? 1 : (b[i] >> 5) == 6 ? 2 : (b[i] >> 4) == 14 ? 3 : (b[i] >> 3) == 30 ? 4 : 0;
    int ok = len && i + len <= k && (len == 1 ? b[i] >= 0x20 && b[i] != 0x7f : 1);
    for (unsigned j = 1; ok && j < len; j++) ok = (b[i + j] & 0xc0) == 0x80;
    if (ok && o + len < n) { memcpy(out + o, b + i, len); o += len; i += len; }
    else { o += (size_t)snprintf(out + o, n - o, "\\x%02X", b[i]); i++; }
  }
  out[o < n ? o : n - 1] = 0;
}

dfl_token_class dfl_tokenizer_classify(const char *dir, int id, char *buf, size_t n) {
  char path[DFL_PATH_MAX + 32];
  join(path, sizeof path, dir, "tokenizer.json");
  if (n) buf[0] = 0;
  char *text, why[DFL_PATH_MAX + 64];
  size_t len;
  struct stat lst;
  if (dfl_file_why(path, why, sizeof why)) {   /* a FIFO would block the read; absent: nothing to say */
    if (lstat(path, &lst) != 0) return DFL_TOKEN_UNKNOWN;
    if (n) snprintf(buf, n, "%s", why);
    return DFL_TOKEN_BROKEN;
  }
  if (dfl_read_file(path, TOKENIZER_MAX_BYTES, &text, &len) != DFL_OK) {
    if (n) snprintf(buf, n, "`%s` cannot be read (%s)", path, strerror(errno));
    return DFL_TOKEN_BROKEN;
  }
  json_error_t je;
  json_t *root = json_loadb(text, len, 0, &je);
  free(text);
  if (!root) {
    if (n) snprintf(buf, n, "`%s`:%d: not valid JSON (%s)", path, je.line, je.text);
    return DFL_TOKEN_BROKEN;
  }
  dfl_token_class cls = DFL_TOKEN_UNKNOWN;
  json_t *added = json_object_get(root, "added_tokens");
  size_t i;
  json_t *t;
  json_array_foreach(added, i, t) {
    if (json_integer_value(json_object_get(t, "id")) == id && json_is_integer(json_object_get(t, "id"))) {
      cls = DFL_TOKEN_SPECIAL;
      goto done;
    }
  }
  json_t *vocab = json_object_get(json_object_get(root, "model"), "vocab");
  if (json_is_object(vocab)) {
    const char *key;
    json_t *v;
    json_int_t maxid = -1;
    cls = DFL_TOKEN_UNUSED;
    json_object_foreach(vocab, key, v) {
      json_int_t x = json_integer_value(v);
      if (x > maxid) maxid = x;
      if (x == id && cls != DFL_TOKEN_ORDINARY) {
        cls = DFL_TOKEN_ORDINARY;
        if (n) byte_level_text(key, buf, n);
      }
    }
    if (cls != DFL_TOKEN_ORDINARY && id > maxid) cls = DFL_TOKEN_PAST_VOCAB;
  }
done:
  json_decref(root);
  return cls;
}
