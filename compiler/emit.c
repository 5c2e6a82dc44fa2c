/*
** emit.c: writes the CUDA source a graph needs and compiles it with NVRTC (see emit.h).
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <nvrtc.h>
#include "compiler/emit.h"
#include "compiler/spec.h"

/* Every NVRTC call goes through this: it names the call and where it was made. */
#define NVRTC_CHECK(call)                                                                        \
  do {                                                                                           \
    nvrtcResult r_ = (call);                                                                     \
    if (r_ != NVRTC_SUCCESS) {                                                                   \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, nvrtcGetErrorString(r_)); \
      goto fail;                                                                                 \
    }                                                                                            \
  } while (0)

extern const char dfl_kernel_src_common[], dfl_kernel_src_elementwise[], dfl_kernel_src_rmsnorm[],
    dfl_kernel_src_rope[], dfl_kernel_src_gather[], dfl_kernel_src_dflash[], dfl_kernel_src_attention[],
    dfl_kernel_src_lce[], dfl_kernel_src_optim[];

static const struct { const char *name; const char *src; } families[DFL_KF_COUNT] = {
  {"common", dfl_kernel_src_common},       {"elementwise", dfl_kernel_src_elementwise},
  {"rmsnorm", dfl_kernel_src_rmsnorm},     {"rope", dfl_kernel_src_rope},
  {"gather", dfl_kernel_src_gather},       {"dflash", dfl_kernel_src_dflash},
  {"attention", dfl_kernel_src_attention}, {"lce", dfl_kernel_src_lce},
  {"optim", dfl_kernel_src_optim},
};

const char *dfl_emit_family_name(int f) { return f >= 0 && f < DFL_KF_COUNT ? families[f].name : "?"; }
const char *dfl_emit_family_source(int f) { return f >= 0 && f < DFL_KF_COUNT ? families[f].src : ""; }

/* The family and kernels that implement an op (MATMUL is cuBLASLt: no family). */
static int op_family(dfl_opcode c, const char **kernels) {
  const char *k = "";
  int f = DFL_KF_ELEMENTWISE;
  switch (c) {
  case DFL_OP_IOTA_MOD: k = "dfl_iota_mod"; break;
  case DFL_OP_DFLASH_BLOCKS: f = DFL_KF_DFLASH; k = "dfl_dflash_blocks"; break;
  case DFL_OP_GATHER: f = DFL_KF_GATHER; k = "dfl_gather"; break;
  case DFL_OP_MATMUL: f = -1; k = "cublasLtMatmul"; break;
  case DFL_OP_ADD: k = "dfl_add"; break;
  case DFL_OP_RMSNORM: f = DFL_KF_RMSNORM; k = "dfl_rmsnorm_v dfl_rmsnorm dfl_rmsnorm_q2 dfl_rmsnorm_q4"; break;
  case DFL_OP_ROPE: f = DFL_KF_ROPE; k = "dfl_rope_v dfl_rope"; break;
  case DFL_OP_ATTENTION: f = DFL_KF_ATTENTION; k = "dfl_attn_fwd"; break;
  case DFL_OP_SWIGLU: k = "dfl_swiglu dfl_swiglu_q2 dfl_swiglu_q4"; break;
  case DFL_OP_LINEAR_CE:
    f = DFL_KF_LCE; k = "dfl_lce_rows cublasLtMatmul dfl_lce_row cublasLtMatmul dfl_lce_num"; break;
  case DFL_OP_SCATTER_ADD: f = DFL_KF_GATHER; k = "dfl_scatter_add dfl_copy"; break;
  case DFL_OP_RMSNORM_BWD: f = DFL_KF_RMSNORM; k = "dfl_rmsnorm_bwd_v dfl_rmsnorm_dw dfl_rmsnorm_bwd"; break;
  case DFL_OP_ATTENTION_BWD: f = DFL_KF_ATTENTION; k = "dfl_attn_bwd dfl_attn_bwd_kv"; break;
  case DFL_OP_SWIGLU_BWD: k = "dfl_swiglu_bwd"; break;
  case DFL_OP_SCALE: k = "dfl_scale"; break;
  case DFL_OP_SUM: k = "dfl_reduce_part dfl_reduce_final"; break;
  case DFL_OP_DFLASH_METRICS: f = DFL_KF_DFLASH; k = "dfl_dflash_metrics"; break;
  case DFL_OP_ACCUM: k = "dfl_accum"; break;
  case DFL_OP_SUMSQ_ACC: f = DFL_KF_OPTIM; k = "dfl_sumsq_mt dfl_reduce_part dfl_reduce_final"; break;
  case DFL_OP_OPT_PREP: f = DFL_KF_OPTIM; k = "dfl_opt_prep"; break;
  case DFL_OP_ADAMW: f = DFL_KF_OPTIM; k = "dfl_adamw_mt dfl_adamw"; break;
  case DFL_OP_COPY: k = "dfl_copy"; break;
  case DFL_OP_QUANT_F8: k = "dfl_quant_f8"; break;
  case DFL_OP_MATMUL_F8: f = -1; k = "cublasLtMatmul"; break;
  case DFL_OP_BLOCK_ROWS: case DFL_OP_BLOCK_EXPAND: case DFL_OP_BLOCK_DROP: case DFL_OP_BLOCK_UNDROP:
    f = DFL_KF_GATHER; k = "dfl_block_copy"; break;
  case DFL_OP_BLOCK_EXPAND_BWD: f = DFL_KF_GATHER; k = "dfl_block_colsum dfl_block_colfin"; break;
  default: f = -1; k = "?"; break;
  }
  if (kernels) *kernels = k;
  return f;
}

unsigned dfl_emit_families(const dfl_graph *g) {
  unsigned m = (1u << DFL_KF_COMMON) | (1u << DFL_KF_ELEMENTWISE);
  for (int i = 0; g && i < g->nops; i++) {
    int f = op_family(g->ops[i].code, NULL);
    if (f >= 0) m |= 1u << f;
  }
  return m;
}

typedef struct { char *p; size_t n, cap; int oom; } sbuf;
static void sb_put(sbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t c = b->cap ? b->cap : 4096;
    while (c < b->n + n + 1) c *= 2;
    char *q = realloc(b->p, c);
    if (!q) { b->oom = 1; return; }
    b->p = q; b->cap = c;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}
static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

int dfl_emit_source(const dfl_graph *g, unsigned fam, char **src, size_t *len) {
  sbuf b = {0};
  char line[512];
  sb_str(&b, "/* Generated by dflc (compiler/emit.c): the kernels of one graph. Do not edit. */\n");
  if (g) {
    snprintf(line, sizeof line, "/* %d ops, %d tensors. op  phase  opcode  label: kernels launched\n", g->nops, g->nt);
    sb_str(&b, line);
    for (int i = 0; i < g->nops; i++) {
      const char *k;
      op_family(g->ops[i].code, &k);
      snprintf(line, sizeof line, "** %5d %-9s %-16s %s: %s\n", i, dfl_phase_name(g->ops[i].phase),
               dfl_opcode_name(g->ops[i].code), g->ops[i].label, k);
      sb_str(&b, line);
    }
    sb_str(&b, "*/\n");
  }
  fam |= 1u << DFL_KF_COMMON;
  for (int f = 0; f < DFL_KF_COUNT; f++) {
    if (!(fam & (1u << f))) continue;
    /* #line keeps NVRTC's error messages pointing at kernels/<family>.cuh. */
    snprintf(line, sizeof line, "#line 1 \"kernels/%s.cuh\"\n", families[f].name);
    sb_str(&b, line);
    sb_str(&b, families[f].src);
    sb_str(&b, "\n");
  }
  if (b.oom) { free(b.p); return DFL_ENOMEM; }
  *src = b.p;
  if (len) *len = b.n;
  return DFL_OK;
}

int dfl_emit_write(const dfl_graph *g, const char *path) {
  char *src;
  size_t n;
  int rc = dfl_emit_source(g, dfl_emit_families(g), &src, &n);
  if (rc) return rc;
  FILE *f = fopen(path, "wb");
  if (!f) { fprintf(stderr, "%s: cannot write: %s\n", path, strerror(errno)); free(src); return DFL_EIO; }
  int ok = fwrite(src, 1, n, f) == n;
  ok &= fclose(f) == 0;
  free(src);
  if (!ok) { fprintf(stderr, "%s: write failed\n", path); return DFL_EIO; }
  return DFL_OK;
}

uint64_t dfl_emit_hash(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  if (!h) h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 1099511628211ull; }
  return h;
}

static int read_file(const char *path, void **data, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return DFL_EIO;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *p = n > 0 ? malloc((size_t)n) : NULL;
  int ok = p && fread(p, 1, (size_t)n, f) == (size_t)n;
  fclose(f);
  if (!ok) { free(p); return DFL_EIO; }
  *data = p; *size = (size_t)n;
  return DFL_OK;
}

static void mkdirs(const char *dir) {
  char tmp[DFL_PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s", dir);
  for (char *s = tmp + 1; *s; s++)
    if (*s == '/') { *s = 0; mkdir(tmp, 0755); *s = '/'; }
  mkdir(tmp, 0755);
}

int dfl_nvrtc_compile(const char *src, const char *arch, const char *cache_dir, void **cubin, size_t *size,
                      int *cached) {
  char archopt[64], dir[DFL_PATH_MAX], path[DFL_PATH_MAX + 64];
  if (!arch) arch = "sm_90";
  snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
  const char *opts[] = {archopt, "--std=c++17", "-default-device", "-lineinfo"};
  int nopts = (int)(sizeof opts / sizeof opts[0]);
  if (cached) *cached = 0;

  dir[0] = 0;
  if (!cache_dir) {
    const char *e = getenv("DFL_CACHE_DIR"), *home = getenv("HOME");
    if (e) snprintf(dir, sizeof dir, "%s", e);
    else if (home) snprintf(dir, sizeof dir, "%s/.cache/dflc", home);
  } else snprintf(dir, sizeof dir, "%s", cache_dir);
  if (dir[0]) {
    int major = 0, minor = 0;
    nvrtcVersion(&major, &minor);
    uint64_t h = dfl_emit_hash(0, src, strlen(src));
    for (int i = 0; i < nopts; i++) h = dfl_emit_hash(h, opts[i], strlen(opts[i]) + 1);
    h = dfl_emit_hash(h, &major, sizeof major);
    h = dfl_emit_hash(h, &minor, sizeof minor);
    snprintf(path, sizeof path, "%s/%016llx-%s.cubin", dir, (unsigned long long)h, arch);
    if (read_file(path, cubin, size) == DFL_OK) {
      if (cached) *cached = 1;
      return DFL_OK;
    }
  }

  nvrtcProgram prog = NULL;
  char *log = NULL, *bin = NULL;
  size_t n = 0;
  NVRTC_CHECK(nvrtcCreateProgram(&prog, src, "dflc_kernels.cu", 0, NULL, NULL));
  nvrtcResult cr = nvrtcCompileProgram(prog, nopts, opts);
  size_t logn = 0;
  nvrtcGetProgramLogSize(prog, &logn);
  if (cr != NVRTC_SUCCESS) {
    log = malloc(logn + 1);
    if (log && nvrtcGetProgramLog(prog, log) == NVRTC_SUCCESS) fprintf(stderr, "%s\n", log);
    fprintf(stderr, "%s:%d: nvrtcCompileProgram (%s) failed: %s\n", __FILE__, __LINE__, arch, nvrtcGetErrorString(cr));
    goto fail;
  }
  NVRTC_CHECK(nvrtcGetCUBINSize(prog, &n));
  bin = malloc(n);
  if (!bin) goto fail;
  NVRTC_CHECK(nvrtcGetCUBIN(prog, bin));
  nvrtcDestroyProgram(&prog);
  if (dir[0]) { /* write then rename: concurrent builds never see half a cubin */
    char tmp[DFL_PATH_MAX + 96];
    mkdirs(dir);
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (f) {
      int ok = fwrite(bin, 1, n, f) == n;
      ok &= fclose(f) == 0;
      if (!ok || rename(tmp, path) != 0) remove(tmp);
    }
  }
  *cubin = bin;
  *size = n;
  return DFL_OK;
fail:
  free(log);
  free(bin);
  if (prog) nvrtcDestroyProgram(&prog);
  return DFL_ERR;
}
