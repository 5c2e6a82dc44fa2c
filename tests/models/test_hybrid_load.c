/*
** test_hybrid_load: loading the qwen3_5 hybrid target (examples/models/nano-hybrid) in the layouts
** users have, and refusing the broken ones with the file and the tensor named:
**   - the multimodal wrapper (config `qwen3_5` with `text_config`, weights under
**     model.language_model., vision and MTP tensors beside them) gives hidden states bit-equal to
**     the plain Qwen3_5ForCausalLM layout;
**   - a missing linear_attn tensor, a conv1d weight of another kernel size and an in_proj_qkv of
**     another width are refused at load, each error naming the file and the tensor.
** The variants are written to a temporary directory from the real model's tensors.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compiler/hfconfig.h"
#include "models/models.h"
#include "runtime/cpu/cpu.h"
#include "runtime/io/safetensors.h"
#include "runtime/io/weights.h"

static int failures;
#include "tests/common/check.h"

#define SRC "examples/models/nano-hybrid"

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)len + 1);
  *n = fread(b, 1, (size_t)len, f);
  b[*n] = 0;
  fclose(f);
  return b;
}

/* Writes DIR/config.json and DIR/model.safetensors: the source model's tensors renamed by `rename`
** (NULL: dropped), with `extra` tensors added; `edit` may change an entry's shape in place. */
typedef const char *(*rename_fn)(const char *name, char *buf, size_t n);
static int write_variant(const char *dir, const char *config, rename_fn rename, int wrapped_extras,
                         const char *reshape_name, int reshape_dim, int64_t reshape_to) {
  char path[512], err[512];
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fputs(config, f);
  fclose(f);
  dfl_st st;
  if (dfl_st_open(&st, SRC "/model.safetensors", err, sizeof err) != DFL_OK) { printf("%s\n", err); return -1; }
  dfl_st_out *out = calloc((size_t)st.n + 2, sizeof *out);
  char (*names)[128] = calloc((size_t)st.n + 2, sizeof *names);
  int n = 0;
  for (int i = 0; i < st.n; i++) {
    const dfl_st_entry *e = &st.e[i];
    const char *nm = rename ? rename(e->name, names[n], sizeof names[n]) : e->name;
    if (!nm) continue;
    if (nm != names[n]) snprintf(names[n], sizeof names[n], "%s", nm);
    out[n].name = names[n];
    out[n].dtype = e->dtype;
    out[n].ndim = e->ndim;
    memcpy(out[n].shape, e->shape, sizeof e->shape);
    out[n].raw = dfl_st_data(&st, e);
    if (reshape_name && !strcmp(e->name, reshape_name)) {
      /* keep the byte count legal: shrink one dimension and read a prefix of the data */
      out[n].shape[reshape_dim] = reshape_to;
    }
    n++;
  }
  static const uint16_t vis[8] = {0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80};
  if (wrapped_extras) { /* a vision and an MTP tensor, which a text target leaves out */
    out[n] = (dfl_st_out){"model.visual.patch_embed.proj.weight", DFL_ST_BF16, 2, {2, 4}, NULL, NULL, vis};
    n++;
    out[n] = (dfl_st_out){"mtp.fc.weight", DFL_ST_BF16, 2, {4, 2}, NULL, NULL, vis};
    n++;
  }
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  int rc = dfl_st_write(path, out, n, NULL, 0, err, sizeof err);
  if (rc != DFL_OK) printf("%s\n", err);
  dfl_st_close(&st);
  free(out);
  free(names);
  return rc;
}

static const char *to_wrapped(const char *name, char *buf, size_t n) {
  if (strncmp(name, "model.", 6)) return name;
  snprintf(buf, n, "model.language_model.%s", name + 6);
  return buf;
}
static const char *drop_alog(const char *name, char *buf, size_t n) {
  (void)buf, (void)n;
  return strcmp(name, "model.layers.1.linear_attn.A_log") ? name : NULL;
}

/* Runs the target of DIR (all hidden states, fp32) on fixed ids; returns hidden[1..L] or NULL with
** the load error in err. */
static float *forward(const char *dir, int *n_out, char *err, size_t errlen) {
  dfl_spec s;
  memset(&s, 0, sizeof s);
  dfl_source from = {"test_hybrid_load", "", 0};
  if (dfl_hfconfig_load(dir, &s.target, dfl_loc_file(&from)) != DFL_OK) { snprintf(err, errlen, "config"); return NULL; }
  s.precision = DFL_PREC_FP32;
  s.n_taps = 1;
  s.taps[0] = s.target.layers - 1;
  const int S = 70, L = s.target.layers, H = s.target.hidden;
  dfl_graph g;
  dfl_graph_init(&g);
  int ids = dfl_tensor_1d(&g, "input_ids", DFL_I32, DFL_T_INPUT, S);
  dfl_target_out to;
  float *h = NULL;
  if (dfl_model_target(&g, &s, 1, S, ids, 1, 0, &to) != DFL_OK) { snprintf(err, errlen, "graph"); dfl_graph_free(&g); return NULL; }
  dfl_cpu c;
  dfl_cpu_init(&c, &g, NULL, 0);
  if (dfl_weights_load_path(&c, dir, DFL_KIND_BIT(DFL_T_FROZEN), "", err, errlen) == DFL_OK) {
    for (int i = 0; i < S; i++) dfl_cpu_i32(&c, ids)[i] = (i * 977 + 13) % s.target.vocab;
    if (dfl_cpu_run(&c, DFL_PH_ALL) == DFL_OK) {
      h = malloc(sizeof(float) * (size_t)L * S * H);
      for (int l = 1; l <= L; l++) dfl_cpu_get_f(&c, to.hidden[l], h + (size_t)(l - 1) * S * H, (int64_t)S * H);
      *n_out = L * S * H;
    }
  }
  dfl_cpu_free(&c);
  dfl_graph_free(&g);
  return h;
}

int main(void) {
  char tmpl[] = "/tmp/dfl_hybrid_load_XXXXXX";
  const char *tmp = mkdtemp(tmpl);
  if (!tmp) { printf("FAIL: mkdtemp\n"); return 1; }
  size_t clen;
  char *plain_cfg = slurp(SRC "/config.json", &clen);
  CHECK(plain_cfg != NULL, "read " SRC "/config.json");
  if (!plain_cfg) return 1;
  /* the wrapper's config: the text model's config under text_config, the wrapper's own keys beside */
  char *cfg = malloc(clen + 512);
  char *body = strchr(plain_cfg, '{') + 1;
  snprintf(cfg, clen + 512,
           "{\"architectures\": [\"Qwen3_5ForConditionalGeneration\"], \"model_type\": \"qwen3_5\",\n"
           " \"language_model_only\": false, \"vision_config\": {\"depth\": 2, \"hidden_size\": 8},\n"
           " \"text_config\": {%s}\n", body);
  char dir[600], err[1024];
  int n1 = 0, n2 = 0;

  float *plain = forward(SRC, &n1, err, sizeof err);
  CHECK(plain != NULL, "plain layout: %s", err);
  snprintf(dir, sizeof dir, "%s/wrapped", tmp);
  mkdir(dir, 0755);
  CHECK(write_variant(dir, cfg, to_wrapped, 1, NULL, 0, 0) == DFL_OK, "write the wrapped layout");
  float *wrapped = forward(dir, &n2, err, sizeof err);
  CHECK(wrapped != NULL, "wrapped layout: %s", err);
  if (plain && wrapped) {
    CHECK(n1 == n2 && !memcmp(plain, wrapped, sizeof(float) * (size_t)n1), "wrapped and plain hidden states differ");
    printf("  wrapped layout (model.language_model., vision and MTP tensors beside): %d values bit-equal to the plain one\n", n1);
  }

  struct { const char *what, *want; rename_fn rn; const char *reshape; int dim; int64_t to; } bad[] = {
    {"missing A_log", "model.layers.1.linear_attn.A_log", drop_alog, NULL, 0, 0},
    {"conv1d kernel 3", "model.layers.0.linear_attn.conv1d.weight", NULL, "model.layers.0.linear_attn.conv1d.weight", 2, 3},
    {"in_proj_qkv narrower", "model.layers.2.linear_attn.in_proj_qkv.weight", NULL,
     "model.layers.2.linear_attn.in_proj_qkv.weight", 0, 256},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(dir, sizeof dir, "%s/bad%zu", tmp, i);
    mkdir(dir, 0755);
    CHECK(write_variant(dir, plain_cfg, bad[i].rn, 0, bad[i].reshape, bad[i].dim, bad[i].to) == DFL_OK, "write %s", bad[i].what);
    int n = 0;
    err[0] = 0;
    float *h = forward(dir, &n, err, sizeof err);
    CHECK(!h, "%s: loaded", bad[i].what);
    CHECK(strstr(err, bad[i].want) && strstr(err, "model.safetensors"), "%s: the error does not name the file and %s: %s",
          bad[i].what, bad[i].want, err);
    printf("  %-22s refused: %s\n", bad[i].what, err);
    free(h);
  }
  free(plain), free(wrapped), free(cfg), free(plain_cfg);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  if (system(cmd) != 0) printf("note: could not remove %s\n", tmp);
  printf("%s\n", failures ? "FAILED" : "passed");
  return failures ? 1 : 0;
}
