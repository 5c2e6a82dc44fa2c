/* bench_util.h: what the GPU benchmark programs share (header-only: each is one program): the
** clock, the median of repeated synchronous runs, and VAR=VAL[,VAR=VAL..] settings for variants. */
#ifndef DFL_BENCH_UTIL_H
#define DFL_BENCH_UTIL_H
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "runtime/cuda/cuda.h"

static inline double dfl_bench_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static inline int dfl_bench_cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median milliseconds of run(c, arg) and a sync, host clock around both (the runs last milliseconds:
** launch overhead is noise), over reps runs (at most 64) after one warm-up run; 1 when a run fails. */
static inline int dfl_bench_median_ms(dfl_cuda *c, int (*run)(dfl_cuda *, int), int arg, int reps, double *ms) {
  double t[64];
  if (reps > 64) reps = 64;
  if (run(c, arg) || dfl_cuda_sync(c)) return 1; /* warm-up */
  for (int r = 0; r < reps; r++) {
    double t0 = dfl_bench_now();
    if (run(c, arg) || dfl_cuda_sync(c)) return 1;
    t[r] = (dfl_bench_now() - t0) * 1e3;
  }
  qsort(t, (size_t)reps, sizeof t[0], dfl_bench_cmp_d);
  *ms = t[reps / 2];
  return 0;
}

/* splitmix64 -> [-1, 1): the benchmarks' fresh random inputs */
static inline float dfl_bench_urand(unsigned long long *s) {
  unsigned long long z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (float)((double)(z >> 11) / 4503599627370496.0 - 1.0);
}

/* setenv each VAR=VAL of spec (comma separated); set 0: unsetenv each VAR instead. */
static inline void dfl_bench_setvars(const char *spec, int set) {
  char *buf = strdup(spec);
  for (char *t = buf ? strtok(buf, ",") : NULL; t; t = strtok(NULL, ",")) {
    char *eq = strchr(t, '=');
    if (eq) *eq = 0;
    if (!set) unsetenv(t);
    else if (eq) setenv(t, eq + 1, 1);
  }
  free(buf);
}
#endif
