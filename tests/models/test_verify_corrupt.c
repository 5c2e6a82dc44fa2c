/*
** test_verify_corrupt: `dflc verify` must be able to fail. Copies of the public fixture are
** corrupted (seeded from the time, printed) and each must be refused:
**   - one parameter element perturbed     -> FAIL (exit 1): the step no longer matches
**   - one reference gradient element off  -> FAIL (exit 1)
**   - a gradient tensor of the wrong shape -> refused (exit 2) naming the tensor
**   - one tensor's reference update scaled by 1.001 (an optimizer off by 0.1%, as a wrong lr or bias
**     correction would be) -> FAIL (exit 1): the update's bound (tol + the part carried from the
**     gradient's error, <= 1.8e-4 on this fixture) must stay below such an error
** while the untouched copy passes (exit 0).
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/cli/cli.h"
#include "runtime/io/data.h"
#include "runtime/io/safetensors.h"

#define FIX "tests/fixtures/dflash_step_public"

static int failures;

static int copy_file(const char *from, const char *to) {
  FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
  if (!a || !b) return -1;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, a)) > 0) fwrite(buf, 1, n, b);
  fclose(a);
  fclose(b);
  return 0;
}

typedef enum { KEEP, PERTURB_PARAM, PERTURB_GRAD, RESHAPE_GRAD, SCALE_UPDATE } corruption;

/* Write dir/fx.{json,safetensors}: the fixture with one corruption. Returns the tensor touched. */
static void write_copy(const char *dir, corruption how, dfl_rng *rng, char *touched, size_t tn) {
  char err[512], path[512];
  dfl_st st;
  if (dfl_st_open(&st, FIX ".safetensors", err, sizeof err) != DFL_OK) {
    printf("%s\n", err);
    exit(1);
  }
  dfl_st_out *out = calloc((size_t)st.n, sizeof *out);
  float **bufs = calloc((size_t)st.n, sizeof *bufs);
  /* Pick the victim among the tensors of the kind to corrupt. */
  const char *prefix = how == PERTURB_PARAM ? "param.layers." : how == SCALE_UPDATE ? "updated." : "grad.";
  int cand[256], nc = 0;
  for (int i = 0; i < st.n && nc < 256; i++)
    if (!strncmp(st.e[i].name, prefix, strlen(prefix)) && dfl_st_numel(&st.e[i]) > 16) cand[nc++] = i;
  int victim = how == KEEP ? -1 : cand[dfl_rng_next(rng) % (uint64_t)nc];
  touched[0] = 0;
  for (int i = 0; i < st.n; i++) {
    dfl_st_entry *e = &st.e[i];
    out[i].name = e->name;
    out[i].dtype = e->dtype;
    out[i].ndim = e->ndim;
    for (int k = 0; k < e->ndim; k++) out[i].shape[k] = e->shape[k];
    out[i].raw = dfl_st_data(&st, e);
    if (i != victim) continue;
    snprintf(touched, tn, "%s", e->name);
    int64_t n = dfl_st_numel(e);
    bufs[i] = malloc(sizeof(float) * (size_t)n);
    dfl_st_read_f32(&st, e, bufs[i]);
    out[i].raw = NULL;
    out[i].dtype = DFL_ST_F32;
    out[i].f32 = bufs[i];
    if (how == RESHAPE_GRAD) {
      /* Same bytes, transposed-looking shape: [n/2, 2] instead of the real one. */
      out[i].ndim = 2;
      out[i].shape[0] = n / 2;
      out[i].shape[1] = 2;
    } else if (how == SCALE_UPDATE) {
      char pname[256];
      snprintf(pname, sizeof pname, "param.%s", e->name + strlen("updated."));
      const dfl_st_entry *pe = dfl_st_find(&st, pname);
      if (!pe || dfl_st_numel(pe) != n) {
        printf("fixture: %s has no parameter %s of its size\n", e->name, pname);
        exit(1);
      }
      float *pv = malloc(sizeof(float) * (size_t)n);
      dfl_st_read_f32(&st, pe, pv);
      for (int64_t j = 0; j < n; j++) bufs[i][j] = pv[j] + (bufs[i][j] - pv[j]) * 1.001f;
      free(pv);
    } else {
      /* Off by a large fraction of the tensor's RMS, at one element: well above 1e-4 relative. */
      double rms = 0;
      for (int64_t j = 0; j < n; j++) rms += (double)bufs[i][j] * bufs[i][j];
      rms = sqrt(rms / n);
      int64_t j = (int64_t)(dfl_rng_next(rng) % (uint64_t)n);
      bufs[i][j] += (float)((0.5 + dfl_rng_uniform(rng)) * rms * (how == PERTURB_GRAD ? 2.0 : 20.0));
    }
  }
  snprintf(path, sizeof path, "%s/fx.safetensors", dir);
  if (dfl_st_write(path, out, st.n, NULL, 0, err, sizeof err) != DFL_OK) {
    printf("%s\n", err);
    exit(1);
  }
  snprintf(path, sizeof path, "%s/fx.json", dir);
  copy_file(FIX ".json", path);
  for (int i = 0; i < st.n; i++) free(bufs[i]);
  free(bufs);
  free(out);
  dfl_st_close(&st);
}

static void expect(const char *dir, corruption how, dfl_rng *rng, int want, const char *what) {
  char touched[128], base[512];
  write_copy(dir, how, rng, touched, sizeof touched);
  snprintf(base, sizeof base, "%s/fx", dir);
  char *argv[] = {"verify", "--quiet", base, NULL};
  fflush(stdout);
  int rc = dfl_cmd_verify(3, argv);
  int ok = rc == want;
  printf("  %-28s %-48s exit %d (want %d) %s\n", what, touched, rc, want, ok ? "ok" : "FAIL");
  if (!ok) failures++;
}

int main(void) {
  uint64_t seed = (uint64_t)time(NULL);
  printf("test_verify_corrupt: seed %llu\n", (unsigned long long)seed);
  dfl_rng rng;
  dfl_rng_seed(&rng, seed);
  char dir[] = "/tmp/dflc_verify_XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  expect(dir, KEEP, &rng, 0, "untouched copy");
  expect(dir, PERTURB_PARAM, &rng, 1, "perturbed parameter");
  expect(dir, PERTURB_GRAD, &rng, 1, "perturbed reference grad");
  expect(dir, RESHAPE_GRAD, &rng, 2, "grad of the wrong shape");
  for (int k = 0; k < 3; k++) expect(dir, SCALE_UPDATE, &rng, 1, "update scaled by 1.001");
  char path[600];
  snprintf(path, sizeof path, "%s/fx.json", dir);
  unlink(path);
  snprintf(path, sizeof path, "%s/fx.safetensors", dir);
  unlink(path);
  rmdir(dir);
  printf("%s\n", failures ? "FAILED" : "passed");
  return failures ? 1 : 0;
}
