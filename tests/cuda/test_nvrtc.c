/*
** test_nvrtc: the CI check that needs no GPU. Every kernel family compiles with NVRTC for sm_90
** (and each family alone, so a family never depends on another's definitions besides common),
** every kernel the backend loads (kernels/kernels.def) is in the cubin and in its family, a second compile comes from the cache and is
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
  for (int k = 0; bin && k < DFL_EMIT_KERNELS; k++)
    CHECK(has(bin, n, dfl_emit_kernel_name(k)), "kernel %s missing from the cubin", dfl_emit_kernel_name(k));
  CHECK(dfl_nvrtc_compile(src, "sm_90", dir, &bin2, &n2, &cached) == DFL_OK && cached == 1, "second compile from the cache");
  CHECK(bin && bin2 && n == n2 && !memcmp(bin, bin2, n), "cached cubin differs");
  printf("all families: %zu bytes of source, %zu bytes of sm_90 cubin\n", len, n);
  free(bin), free(bin2), free(src);
  for (int f = 1; f < DFL_KF_COUNT; f++) {
    CHECK(dfl_emit_source(NULL, 1u << f, &src, &len) == DFL_OK, "emit %s", dfl_emit_family_name(f));
    void *b = NULL;
    CHECK(dfl_nvrtc_compile(src, "sm_90", "", &b, &n, NULL) == DFL_OK, "family %s alone", dfl_emit_family_name(f));
    for (int k = 0; b && k < DFL_EMIT_KERNELS; k++) /* each kernel is in the family the table says */
      if (dfl_emit_kernel_family(k) == f)
        CHECK(has(b, n, dfl_emit_kernel_name(k)), "kernel %s missing from family %s", dfl_emit_kernel_name(k), dfl_emit_family_name(f));
    free(b), free(src);
  }
  /* another architecture (the option the backend exposes) */
  CHECK(dfl_emit_source(NULL, DFL_KF_ALL, &src, &len) == DFL_OK, "emit");
  CHECK(dfl_nvrtc_compile(src, "sm_80", "", &bin, &n, NULL) == DFL_OK, "sm_80 compile");
  free(bin);
  /* sm_90a, what the backend uses on sm_90 devices: the wgmma attention kernels are real there */
  bin = NULL;
  CHECK(dfl_nvrtc_compile(src, "sm_90a", "", &bin, &n, NULL) == DFL_OK, "sm_90a compile");
  for (int k = 0; bin && k < DFL_EMIT_KERNELS; k++)
    CHECK(has(bin, n, dfl_emit_kernel_name(k)), "kernel %s missing from the sm_90a cubin", dfl_emit_kernel_name(k));
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
