/*
** test_anchors.c: anchor sampling (dflash-training.md §2.2 with a fixed capacity N): the
** reference example, validity (padding and unsupervised positions never anchors), exact count,
** sortedness and distinctness, reproducibility, and uniformity over subsets.
*/
#include <math.h>
#include "io_test.h"

static dfl_rng R;

static void test_reference_example(void) {
  int32_t mask[7] = {1, 1, 0, 1, 0, 1, 1}, a[8], k[8];
  int64_t n = dfl_anchors_sample(mask, 1, 7, 8, &R, a, k);
  CHECK(n == 2 && a[0] == 0 && a[1] == 5 && k[0] == 1 && k[1] == 1, "got n %lld anchors %d %d", (long long)n, a[0], a[1]);
  for (int i = 2; i < 8; i++) CHECK(a[i] == 0 && k[i] == 0, "slot %d: %d/%d", i, a[i], k[i]);
  /* count 0: every slot anchor 0, keep 0. */
  int32_t none[6] = {1, 0, 1, 0, 1, 0};
  n = dfl_anchors_sample(none, 1, 6, 4, &R, a, k);
  CHECK(n == 0, "no valid position: %lld anchors", (long long)n);
  for (int i = 0; i < 4; i++) CHECK(a[i] == 0 && k[i] == 0, "slot %d", i);
}

/* Random batches with padding tails: every property of a correct sample. */
static void test_random_batches(void) {
  for (int trial = 0; trial < 200; trial++) {
    int b = 1 + (int)dfl_rng_below(&R, 4), S = 2 + (int)dfl_rng_below(&R, 300), N = 1 + (int)dfl_rng_below(&R, 64);
    int32_t *mask = malloc((size_t)b * S * 4), *a = malloc((size_t)b * N * 4), *k = malloc((size_t)b * N * 4);
    double p1 = dfl_rng_uniform(&R);
    int64_t want_total = 0;
    for (int r = 0; r < b; r++) {
      int len = (int)dfl_rng_below(&R, (uint64_t)S + 1);   /* the rest is padding (mask 0) */
      int count = 0;
      for (int p = 0; p < S; p++) mask[r * S + p] = p < len && dfl_rng_uniform(&R) < p1;
      for (int p = 0; p + 1 < S; p++) count += mask[r * S + p] && mask[r * S + p + 1];
      want_total += count < N ? count : N;
    }
    uint64_t seed = dfl_rng_next(&R);
    dfl_rng r1, r2;
    dfl_rng_seed(&r1, seed);
    int64_t tot = dfl_anchors_sample(mask, b, S, N, &r1, a, k);
    CHECK(tot == want_total, "trial %d: %lld anchors, expected %lld", trial, (long long)tot, (long long)want_total);
    for (int r = 0; r < b; r++) {
      int kk = 0;
      for (int i = 0; i < N; i++) {
        int32_t x = a[r * N + i];
        if (k[r * N + i]) {
          CHECK(i == kk, "keep not a prefix");
          kk++;
          CHECK(x >= 0 && x + 1 < S && mask[r * S + x] && mask[r * S + x + 1], "invalid anchor %d", x);
          if (i) CHECK(a[r * N + i - 1] < x, "not sorted/distinct at slot %d", i);
        } else {
          CHECK(x == 0, "unused slot %d holds %d", i, x);
        }
      }
    }
    /* Same seed, same anchors. */
    int32_t *a2 = malloc((size_t)b * N * 4), *k2 = malloc((size_t)b * N * 4);
    dfl_rng_seed(&r2, seed);
    dfl_anchors_sample(mask, b, S, N, &r2, a2, k2);
    CHECK(!memcmp(a, a2, (size_t)b * N * 4) && !memcmp(k, k2, (size_t)b * N * 4), "not reproducible");
    free(mask); free(a); free(k); free(a2); free(k2);
  }
}

/* Uniformity over subsets: 9 valid positions, N = 3, so 84 equally likely subsets. A fixed seed
** makes this deterministic (a statistical check with a fresh seed would fail at its false-alarm
** rate); the threshold is far above the 99.99th percentile of chi-square(83), about 140, yet far
** below what a biased sampler gives (drawing from the first 8 only puts 28 subsets at zero: > 8000). */
static void test_uniformity(void) {
  dfl_rng r;
  dfl_rng_seed(&r, 12345);
  int32_t mask[10] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, a[3], k[3];
  int counts[1 << 9] = {0}, draws = 84 * 400;
  for (int t = 0; t < draws; t++) {
    dfl_anchors_sample(mask, 1, 10, 3, &r, a, k);
    counts[(1 << a[0]) | (1 << a[1]) | (1 << a[2])]++;
  }
  double chi = 0, e = draws / 84.0;
  int subsets = 0;
  for (int m = 0; m < (1 << 9); m++) {
    if (__builtin_popcount((unsigned)m) != 3) { CHECK(counts[m] == 0, "impossible subset %x", m); continue; }
    subsets++;
    chi += (counts[m] - e) * (counts[m] - e) / e;
  }
  printf("  uniformity: chi-square %.1f over %d subsets (83 dof)\n", chi, subsets);
  CHECK(subsets == 84 && chi < 160, "chi-square %.1f", chi);
}

int main(void) {
  dfl_rng_seed(&R, io_seed("test_anchors"));
  test_reference_example();
  test_random_batches();
  test_uniformity();
  return io_finish("test_anchors");
}
