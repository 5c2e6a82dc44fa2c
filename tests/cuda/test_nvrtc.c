/*
** test_nvrtc: the CI check that needs no GPU, in parts that ctest runs in parallel (no argument: all,
** in order):
**   table     the architecture table (compiler/emit.c, docs/gpus.md): per compute capability the
**             arch NVRTC gets, the attention family, FP8; a forced row (dfl_cuda_opts.as_cc) on
**             another device, accepted or refused; the --arch values refused. No compile.
**   library   every kernel family compiles with NVRTC for sm_90a (what the backend compiles on sm_90
**             devices) and every kernel the backend loads (kernels/kernels.def) is in the cubin. It goes
**             through the cache dfl_nvrtc_compile picks ($DFL_CACHE_DIR: ctest gives every test of a
**             run the same one, so `dflc build` in later tests finds this library instead of compiling
**             it again). The cache itself, on a one-line kernel in a fresh directory: a miss, then a
**             byte-identical hit, and a cubin stored with dfl_nvrtc_cache_put found where
**             dfl_nvrtc_compile looks. A broken source fails with a message instead of crashing.
**   families  each family alone for sm_90 (a family never depends on another's definitions besides
**             common), each kernel in the family the table says.
**   ARCH      every family for one row of the table but sm_90a (the library part's): sm_80, sm_86
**             (the code under __CUDA_ARCH__ < 890), sm_89 (hardware e4m3), sm_100a, sm_120a
**             (Blackwell: no wgmma; the Hopper kernels are stubs there); every kernel in the cubin.
** Each part but table compiles about one whole library (a minute of CPU on a 2-core machine).
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

/* The whole library for one architecture (uncached: no other test reads these cubins): it compiles,
** and every kernel of kernels/kernels.def is in the cubin. The wgmma kernels too: outside sm_90a they
** are stubs (kernels/attention.cuh, __CUDA_ARCH_FEAT_SM90_ALL) the runtime never launches
** (dfl_gpu_arch.att), kept so that one kernel table loads on every device. */
static void arch_library(const char *arch) {
  char *src;
  size_t len, n = 0;
  void *bin = NULL;
  CHECK(dfl_emit_arch_ok(arch) == 1, "%s is a row of the architecture table", arch);
  CHECK(dfl_emit_source(NULL, DFL_KF_ALL, &src, &len) == DFL_OK, "emit");
  CHECK(dfl_nvrtc_compile(src, arch, "", &bin, &n, NULL) == DFL_OK, "%s compile", arch);
  for (int k = 0; bin && k < DFL_EMIT_KERNELS; k++)
    CHECK(has(bin, n, dfl_emit_kernel_name(k)), "kernel %s missing from the %s cubin", dfl_emit_kernel_name(k), arch);
  if (bin) printf("%s: %zu bytes of cubin, %d kernels\n", arch, n, DFL_EMIT_KERNELS);
  free(bin), free(src);
}

/* The architecture table (compiler/emit.c), no compile: which kernels each compute capability gets,
** what NVRTC compiles for it, and which --arch values are refused. */
static void table(void) {
  static const struct { int cc; const char *arch; int att, fp8; } want[] = {
      {80, "sm_80", DFL_ATT_MMA, 0},     {86, "sm_86", DFL_ATT_MMA, 0},      {89, "sm_89", DFL_ATT_MMA, 1},
      {90, "sm_90a", DFL_ATT_WGMMA, 1},  {100, "sm_100a", DFL_ATT_MMA, 1},   {120, "sm_120a", DFL_ATT_MMA, 1},
      /* between the rows: the row below's kernels, compiled for the device's own plain arch */
      {87, "sm_87", DFL_ATT_MMA, 0},     {103, "sm_103", DFL_ATT_MMA, 1},    {121, "sm_121", DFL_ATT_MMA, 1},
      {110, "sm_110", DFL_ATT_MMA, 1},
  };
  CHECK(dfl_emit_gpu_count() == 6, "six rows, not %d", dfl_emit_gpu_count());
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    dfl_gpu_arch g;
    memset(&g, 0, sizeof g);
    CHECK(dfl_emit_gpu_for_cc(want[i].cc, "test GPU", &g) == DFL_OK, "cc %d has a row", want[i].cc);
    CHECK(!strcmp(g.arch, want[i].arch), "cc %d compiles for %s, not %s", want[i].cc, want[i].arch, g.arch);
    CHECK(g.att == want[i].att, "cc %d: attention family %d, not %d", want[i].cc, want[i].att, g.att);
    CHECK(g.fp8 == want[i].fp8, "cc %d: FP8 %d, not %d", want[i].cc, want[i].fp8, g.fp8);
    CHECK(g.smem >= 99 * 1024, "cc %d: shared memory %d", want[i].cc, g.smem);
    CHECK(dfl_emit_arch_ok(g.arch) != 0, "the arch of cc %d (%s) is accepted", want[i].cc, g.arch);
  }
  /* only Hopper (9.0) gets wgmma; only 8.0 and 9.0/10.0 the large shared memory */
  for (int i = 0; i < dfl_emit_gpu_count(); i++) {
    const dfl_gpu_arch *r = dfl_emit_gpu_at(i);
    CHECK((r->att == DFL_ATT_WGMMA) == (r->cc == 90), "row %s: wgmma on Hopper only", r->arch);
    CHECK(r->fp8 == (r->cc >= 89), "row %s: FP8 from 8.9", r->arch);
    CHECK(dfl_emit_arch_ok(r->arch) == 1, "row %s accepted as a row", r->arch);
  }
  /* forcing another row (dfl_cuda_opts.as_cc): its kernels, FP8 and shared memory, the device's cubin */
  static const struct { int dev, as, ok, att, fp8, smem; const char *arch; } force[] = {
      {90, 80, 1, DFL_ATT_MMA, 0, 163 * 1024, "sm_90a"},  /* the A100's kernels on an H200 */
      {90, 120, 1, DFL_ATT_MMA, 1, 99 * 1024, "sm_90a"},  /* the RTX PRO 6000's */
      {90, 100, 1, DFL_ATT_MMA, 1, 227 * 1024, "sm_90a"}, /* the B200's */
      {90, 89, 1, DFL_ATT_MMA, 1, 99 * 1024, "sm_90a"},
      {90, 90, 1, DFL_ATT_WGMMA, 1, 227 * 1024, "sm_90a"}, /* itself: not forced */
      {90, 0, 1, DFL_ATT_WGMMA, 1, 227 * 1024, "sm_90a"},
      {120, 86, 1, DFL_ATT_MMA, 0, 99 * 1024, "sm_120a"},
      {80, 90, 0, 0, 0, 0, ""},  /* wgmma on an A100 */
      {80, 89, 0, 0, 0, 0, ""},  /* FP8 on an A100 */
      {86, 80, 0, 0, 0, 0, ""},  /* 163 KB on a 99 KB part */
      {120, 100, 0, 0, 0, 0, ""},
      {90, 75, 0, 0, 0, 0, ""},  /* no such row */
  };
  fprintf(stderr, "(errors about forced rows follow: expected)\n");
  for (size_t i = 0; i < sizeof force / sizeof force[0]; i++) {
    dfl_gpu_arch dev, sel;
    int forced = -1;
    memset(&sel, 0, sizeof sel);
    CHECK(dfl_emit_gpu_for_cc(force[i].dev, NULL, &dev) == DFL_OK, "row %d", force[i].dev);
    int rc = dfl_emit_gpu_force(&dev, dev.smem, force[i].as, "test GPU", &sel, &forced);
    CHECK((rc == DFL_OK) == force[i].ok, "cc %d forced to %d: %s expected", force[i].dev, force[i].as,
          force[i].ok ? "accepted" : "refused");
    if (rc != DFL_OK || !force[i].ok) continue;
    CHECK(sel.att == force[i].att && sel.fp8 == force[i].fp8 && sel.smem == force[i].smem,
          "cc %d as %d: attention %d FP8 %d shared memory %d", force[i].dev, force[i].as, sel.att, sel.fp8, sel.smem);
    CHECK(!strcmp(sel.arch, force[i].arch), "cc %d as %d compiles for %s, not %s", force[i].dev, force[i].as,
          force[i].arch, sel.arch);
    CHECK(forced == (force[i].as && force[i].as != force[i].dev), "cc %d as %d: forced %d", force[i].dev,
          force[i].as, forced);
  }
  fprintf(stderr, "(errors about compute capability 7.5 and 99.0 follow: expected)\n");
  dfl_gpu_arch g;
  CHECK(dfl_emit_gpu_for_cc(75, "Tesla T4", &g) != DFL_OK, "cc 7.5 refused (no bf16 mma.sync)");
  CHECK(dfl_emit_gpu_for_cc(990, NULL, &g) != DFL_OK, "cc 99.0: no NVRTC compiles for it");
  CHECK(dfl_emit_arch_ok("sm_90") == 2, "sm_90 (Hopper without wgmma) accepted");
  static const char *const refused[] = {"sm_75", "sm_70", "sm_90x", "sm_", "compute_90", "sm_80a", "", "gfx942"};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
    CHECK(dfl_emit_arch_ok(refused[i]) == 0, "--arch '%s' refused", refused[i]);
  void *bin = NULL;
  size_t n = 0;
  CHECK(dfl_nvrtc_compile("extern \"C\" __global__ void k() {}", "sm_75", "", &bin, &n, NULL) != DFL_OK,
        "dfl_nvrtc_compile refuses sm_75 before compiling");
  CHECK(!strcmp(dfl_emit_arch_list(), "sm_80, sm_86, sm_89, sm_90a, sm_100a, sm_120a"), "the list: %s",
        dfl_emit_arch_list());
}

int main(int argc, char **argv) {
  const char *part = argc > 1 ? argv[1] : "all";
  if (!strcmp(part, "all")) {
    table(), library(), families();
    for (int i = 0; i < dfl_emit_gpu_count(); i++) /* sm_90a: the library part's */
      if (strcmp(dfl_emit_gpu_at(i)->arch, "sm_90a")) arch_library(dfl_emit_gpu_at(i)->arch);
  } else if (!strcmp(part, "table")) table();
  else if (!strcmp(part, "library")) library();
  else if (!strcmp(part, "families")) families();
  else if (dfl_emit_arch_ok(part) == 1) arch_library(part);
  else {
    fprintf(stderr, "usage: test_nvrtc [table|library|families|ARCH], ARCH one of %s\n", dfl_emit_arch_list());
    return 2;
  }
  if (fails) { fprintf(stderr, "%d failures\n", fails); return 1; }
  printf("OK\n");
  return 0;
}
