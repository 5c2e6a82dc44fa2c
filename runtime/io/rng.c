/*
** rng.c: xoshiro256** (Blackman & Vigna), seeded through splitmix64 so that nearby seeds give
** unrelated streams. Used for data order, anchor sampling and initialisation: deterministic
** across platforms, unlike rand().
*/
#include <math.h>
#include "runtime/io/data.h"

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void dfl_rng_seed(dfl_rng *r, uint64_t seed) {
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);   /* never all zero */
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t dfl_rng_next(dfl_rng *r) {
  uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return out;
}

double dfl_rng_uniform(dfl_rng *r) { return (double)(dfl_rng_next(r) >> 11) * 0x1p-53; }

/* Box-Muller; 1-u keeps the log argument in (0, 1]. */
float dfl_rng_normal(dfl_rng *r) {
  double u = 1.0 - dfl_rng_uniform(r), v = dfl_rng_uniform(r);
  return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* Uniform integer in [0, n) without modulo bias (rejection on the short top range). */
uint64_t dfl_rng_below(dfl_rng *r, uint64_t n) {
  if (n <= 1) return 0;
  uint64_t lim = -n % n;   /* 2^64 mod n */
  for (;;) {
    uint64_t x = dfl_rng_next(r);
    if (x >= lim) return x % n;
  }
}
