/*
** test_nvrtc: the CI check that needs no GPU. Every kernel family compiles with NVRTC for sm_90
** (and each family alone, so a family never depends on another's definitions besides common),
** every kernel the backend loads is in the cubin, a second compile comes from the cache and is
** byte-identical, and a broken source fails with a message instead of crashing.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "compiler/emit.h"
#include "compiler/status.h"

static int fails;
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); fails++; } } while (0)

static const char *kernels[] = {
  "dfl_iota_mod", "dfl_add", "dfl_scale", "dfl_copy", "dfl_swiglu", "dfl_swiglu_bwd", "dfl_accum",
  "dfl_reduce_part", "dfl_reduce_final", "dfl_fill", "dfl_copy_cols", "dfl_rmsnorm", "dfl_rmsnorm_bwd",
  "dfl_rope", "dfl_rmsnorm_v", "dfl_rmsnorm_bwd_v", "dfl_rmsnorm_dw", "dfl_rope_v", "dfl_gather", "dfl_scatter_add", "dfl_dflash_blocks", "dfl_dflash_metrics", "dfl_attn_fwd",
  "dfl_attn_bwd", "dfl_attn_fwd_tc64", "dfl_attn_fwd_tc128", "dfl_attn_bwdq_tc64", "dfl_attn_bwdq_tc128",
  "dfl_attn_bwdkv_tc64", "dfl_attn_bwdkv_tc128", "dfl_attn_bwd_dot", "dfl_attn_fwd_wg128", "dfl_attn_fwd_wgd128", "dfl_attn_fwd_wgd128s",
  "dfl_attn_bwdq_wg128", "dfl_attn_bwdkv_wg128", "dfl_attn_bwdkv_sum", "dfl_lce_row", "dfl_lce_num",
  "dfl_opt_prep", "dfl_adamw"};

static int has(const void *bin, size_t n, const char *name) {
  size_t l = strlen(name) + 1; /* with the NUL: a symbol, not a prefix of a longer one */
  for (size_t i = 0; i + l <= n; i++)
    if (!memcmp((const char *)bin + i, name, l)) return 1;
  return 0;
}

int main(void) {
  char dir[] = "/tmp/dfl_nvrtc_cacheXXXXXX";
  if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
  char *src;
  size_t len;
  CHECK(dfl_emit_source(NULL, DFL_KF_ALL, &src, &len) == DFL_OK, "emit all families");
  void *bin = NULL, *bin2 = NULL;
  size_t n = 0, n2 = 0;
  int cached = -1;
  CHECK(dfl_nvrtc_compile(src, "sm_90", dir, &bin, &n, &cached) == DFL_OK, "NVRTC compile of all families (sm_90)");
  CHECK(cached == 0, "first compile should not come from the cache");
  for (size_t k = 0; bin && k < sizeof kernels / sizeof kernels[0]; k++)
    CHECK(has(bin, n, kernels[k]), "kernel %s missing from the cubin", kernels[k]);
  CHECK(dfl_nvrtc_compile(src, "sm_90", dir, &bin2, &n2, &cached) == DFL_OK && cached == 1, "second compile from the cache");
  CHECK(bin && bin2 && n == n2 && !memcmp(bin, bin2, n), "cached cubin differs");
  printf("all families: %zu bytes of source, %zu bytes of sm_90 cubin\n", len, n);
  free(bin), free(bin2), free(src);
  for (int f = 1; f < DFL_KF_COUNT; f++) {
    CHECK(dfl_emit_source(NULL, 1u << f, &src, &len) == DFL_OK, "emit %s", dfl_emit_family_name(f));
    void *b = NULL;
    CHECK(dfl_nvrtc_compile(src, "sm_90", "", &b, &n, NULL) == DFL_OK, "family %s alone", dfl_emit_family_name(f));
    free(b), free(src);
  }
  /* another architecture (the option the backend exposes) */
  CHECK(dfl_emit_source(NULL, DFL_KF_ALL, &src, &len) == DFL_OK, "emit");
  CHECK(dfl_nvrtc_compile(src, "sm_80", "", &bin, &n, NULL) == DFL_OK, "sm_80 compile");
  free(bin);
  /* sm_90a, what the backend uses on sm_90 devices: the wgmma attention kernels are real there */
  bin = NULL;
  CHECK(dfl_nvrtc_compile(src, "sm_90a", "", &bin, &n, NULL) == DFL_OK, "sm_90a compile");
  for (size_t k = 0; bin && k < sizeof kernels / sizeof kernels[0]; k++)
    CHECK(has(bin, n, kernels[k]), "kernel %s missing from the sm_90a cubin", kernels[k]);
  free(bin), free(src);
  fprintf(stderr, "(an NVRTC error log follows: expected)\n");
  bin = NULL;
  CHECK(dfl_nvrtc_compile("extern \"C\" __global__ void k() { undefined_thing(); }", "sm_90", "", &bin, &n, NULL) != DFL_OK,
        "a broken source must fail");
  char cmd[64];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  if (fails) { fprintf(stderr, "%d failures\n", fails); return 1; }
  printf("OK\n");
  return 0;
}
