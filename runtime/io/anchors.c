/*
** anchors.c: DFlash anchor sampling (reference dflash-training.md §2.2) with a fixed capacity N,
** so every shape downstream is static: unused slots are padding with keep = 0.
**
** The reference draws r ~ U(0,1) for each valid position and takes the N smallest (argsort);
** that is a uniformly random N-subset, which a partial Fisher-Yates over the valid positions draws
** exactly, in O(count) instead of a sort over S.
*/
#include <stdlib.h>
#include "runtime/io/data.h"

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

int64_t dfl_anchors_sample(const int32_t *mask, int b, int S, int N, dfl_rng *rng,
                           int32_t *anchors, int32_t *keep) {
  int32_t *cand = malloc((size_t)(S > 0 ? S : 1) * sizeof *cand);
  if (!cand) return -1;   /* out of memory: the only failure */
  int64_t total = 0;
  for (int r = 0; r < b; r++) {
    const int32_t *m = mask + (int64_t)r * S;
    int count = 0;
    for (int p = 0; p + 1 < S; p++)   /* anchor and its successor both supervised */
      if (m[p] && m[p + 1]) cand[count++] = p;
    int k = count < N ? count : N;
    for (int i = 0; i < k; i++) {
      int j = i + (int)dfl_rng_below(rng, (uint64_t)(count - i));
      int32_t t = cand[i]; cand[i] = cand[j]; cand[j] = t;
    }
    qsort(cand, (size_t)k, sizeof *cand, cmp_i32);
    int32_t *a = anchors + (int64_t)r * N, *kp = keep + (int64_t)r * N;
    for (int i = 0; i < N; i++) {
      a[i] = i < k ? cand[i] : 0;
      kp[i] = i < k;
    }
    total += k;
  }
  free(cand);
  return total;
}
