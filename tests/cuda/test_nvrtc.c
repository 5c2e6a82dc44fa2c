/*
** test_nvrtc: the CI check that needs no GPU, in three parts that ctest runs in parallel (no argument:
** all three, in order):
**   library   every kernel family compiles with NVRTC for sm_90a (what the backend compiles on sm_90
**             devices) and every kernel the backend loads (kernels/kernels.def) is in the cubin. It goes
**             through the cache dfl_nvrtc_compile picks ($DFL_CACHE_DIR: ctest gives every test of a
**             run the same one, so `dflc build` in later tests finds this library instead of compiling
**             it again). The cache itself, on a one-line kernel in a fresh directory: a miss, then a
**             byte-identical hit, and a cubin stored with dfl_nvrtc_cache_put found where
**             dfl_nvrtc_compile looks. A broken source fails with a message instead of crashing.
**   families  each family alone for sm_90 (a family never depends on another's definitions besides
**             common), each kernel in the family the table says.
**   sm_80     every family for sm_80 (the code under __CUDA_ARCH__ < 890 and without the wgmma path).
** Each part compiles about one whole library (a minute of CPU on a 2-core machine).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "compiler/emit.h"
#include "compiler/status.h"

static int fails;
#define CHECK_FAILED fails++
#include "tests/common/check.h"

static int has(const void *bin, size_t n, const char *name) {
  size_t l = strlen(name) + 1; /* with the NUL: a symbol, not a prefix of a longer one */
  for (size_t i = 0; i + l <= n; i++)
    if (!memcmp((const char *)bin + i, name, l)) return 1;
  return 0;
}

static void library(void) {
  char *src;
  size_t len, n = 0;
  void *bin = NULL;
  int cached = -1;
  CHECK(dfl_emit_source(NULL, DFL_KF_ALL, &src, &len) == DFL_OK, "emit all families");
  CHECK(dfl_nvrtc_compile(src, "sm_90a", NULL, &bin, &n, &cached) == DFL_OK, "NVRTC compile of all families (sm_90a)");
  for (int k = 0; bin && k < DFL_EMIT_KERNELS; k++)
    CHECK(has(bin, n, dfl_emit_kernel_name(k)), "kernel %s missing from the sm_90a cubin", dfl_emit_kernel_name(k));
  printf("all families: %zu bytes of source, %zu bytes of sm_90a cubin%s\n", len, n, cached == 1 ? " (cached)" : "");
  free(bin), free(src);

  /* the cache, on a kernel that compiles in a moment */
  char dir[] = "/tmp/dfl_nvrtc_cacheXXXXXX", dir2[sizeof dir + 8], cmd[128];
  if (!mkdtemp(dir)) { perror("mkdtemp"); fails++; return; }
  snprintf(dir2, sizeof dir2, "%s/put", dir);
  const char *k1 = "extern \"C\" __global__ void dfl_cache_probe(float *x) { x[threadIdx.x] *= 2.0f; }\n";
  void *b1 = NULL, *b2 = NULL, *b3 = NULL;
  size_t n1 = 0, n2 = 0, n3 = 0;
  CHECK(dfl_nvrtc_compile(k1, "sm_90a", dir, &b1, &n1, &cached) == DFL_OK && cached == 0,
        "first compile into an empty cache: a miss (cached %d)", cached);
  CHECK(dfl_nvrtc_compile(k1, "sm_90a", dir, &b2, &n2, &cached) == DFL_OK && cached == 1, "second compile from the cache");
  CHECK(b1 && b2 && n1 == n2 && !memcmp(b1, b2, n1), "cached cubin differs");
  CHECK(dfl_nvrtc_cache_put(k1, "sm_90a", dir2, b1, n1) == DFL_OK, "dfl_nvrtc_cache_put into %s", dir2);
  CHECK(dfl_nvrtc_compile(k1, "sm_90a", dir2, &b3, &n3, &cached) == DFL_OK && cached == 1 && n3 == n1 &&
        !memcmp(b1, b3, n1), "a stored cubin is what the lookup finds (cached %d)", cached);
  free(b1), free(b2), free(b3);
  b1 = NULL;
  CHECK(dfl_nvrtc_compile(k1, "sm_80", dir, &b1, &n1, &cached) == DFL_OK && cached == 0,
        "another architecture is another cache entry (cached %d)", cached);
  free(b1);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);

  fprintf(stderr, "(an NVRTC error log follows: expected)\n");
  bin = NULL;
  CHECK(dfl_nvrtc_compile("extern \"C\" __global__ void k() { undefined_thing(); }", "sm_90", "", &bin, &n, NULL) != DFL_OK,
        "a broken source must fail");
}

static void families(void) {
  char *src;
  size_t len, n = 0;
  for (int f = 1; f < DFL_KF_COUNT; f++) {
    CHECK(dfl_emit_source(NULL, 1u << f, &src, &len) == DFL_OK, "emit %s", dfl_emit_family_name(f));
    void *b = NULL;
    CHECK(dfl_nvrtc_compile(src, "sm_90", "", &b, &n, NULL) == DFL_OK, "family %s alone", dfl_emit_family_name(f));
    for (int k = 0; b && k < DFL_EMIT_KERNELS; k++) /* each kernel is in the family the table says */
      if (dfl_emit_kernel_family(k) == f)
        CHECK(has(b, n, dfl_emit_kernel_name(k)), "kernel %s missing from family %s", dfl_emit_kernel_name(k), dfl_emit_family_name(f));
    free(b), free(src);
  }
}

static void sm80(void) {
  char *src;
  size_t len, n = 0;
  void *bin = NULL;
  /* uncached: the sm_80 library is no other test's */
  CHECK(dfl_emit_source(NULL, DFL_KF_ALL, &src, &len) == DFL_OK, "emit");
  CHECK(dfl_nvrtc_compile(src, "sm_80", "", &bin, &n, NULL) == DFL_OK, "sm_80 compile");
  for (int k = 0; bin && k < DFL_EMIT_KERNELS; k++)
    CHECK(has(bin, n, dfl_emit_kernel_name(k)), "kernel %s missing from the sm_80 cubin", dfl_emit_kernel_name(k));
  free(bin), free(src);
}

int main(int argc, char **argv) {
  const char *part = argc > 1 ? argv[1] : "all";
  int all = !strcmp(part, "all");
  if (!all && strcmp(part, "library") && strcmp(part, "families") && strcmp(part, "sm_80")) {
    fprintf(stderr, "usage: test_nvrtc [library|families|sm_80]\n");
    return 2;
  }
  if (all || !strcmp(part, "library")) library();
  if (all || !strcmp(part, "families")) families();
  if (all || !strcmp(part, "sm_80")) sm80();
  if (fails) { fprintf(stderr, "%d failures\n", fails); return 1; }
  printf("OK\n");
  return 0;
}
