/*
** fp8.h: FP8 E4M3 (the "fn" variant: no infinities, max 448, NaN = 0x7f) and the per-row
** quantization of a frozen target's GEMM operands (docs/fp8.md).
**
** A row x[0..n) becomes bytes q[i] = e4m3(x[i] * (448 / amax)) and one f32 scale amax / 448, so
** that x[i] ~ e4m3_value(q[i]) * scale. Rounding is to nearest even, saturating at +-448, exactly
** as PTX cvt.rn.satfinite.e4m3x2.f32; kernels/quant.cuh computes the same bytes on the GPU (the
** tests check that byte for byte), so the CPU backend is an exact oracle of the GPU's operands.
*/
#ifndef DFL_FP8_H
#define DFL_FP8_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define DFL_E4M3_MAX 448.0f

static inline uint8_t dfl_f32_to_e4m3(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint8_t)(sign | 0x7fu);  /* NaN */
  if (a >= 0x43e80000u) return (uint8_t)(sign | 0x7eu); /* >= 464 (incl. inf): satfinite 448 */
  if (a < 0x3c800000u) {                                /* < 2^-6: subnormal, steps of 2^-9 */
    float f;
    memcpy(&f, &a, 4);
    return (uint8_t)(sign | (uint8_t)rintf(f * 512.0f)); /* 8 encodes 2^-6, the smallest normal */
  }
  int e = (int)(a >> 23) - 127; /* -6..8 */
  uint32_t mant = a & 0x7fffffu, q = mant >> 20, rem = mant & 0xfffffu;
  if (rem > 0x80000u || (rem == 0x80000u && (q & 1u))) q++;
  if (q == 8) { q = 0; e++; }
  return (uint8_t)(sign | (uint8_t)(((e + 7) << 3) | (int)q));
}

static inline float dfl_e4m3_to_f32(uint8_t b) {
  int e = (b >> 3) & 15, m = b & 7;
  float v = e == 15 && m == 7 ? NAN : e == 0 ? ldexpf((float)m, -9) : ldexpf((float)(8 + m), e - 10);
  return (b & 0x80) ? -v : v;
}

/* x rounded to bf16 (nearest even) and back: the intermediate a fused producer quantizes
** (dfl_fuse_quant) when the unfused graph would have stored it in bf16. */
static inline float dfl_bf16_rne(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  memcpy(&x, &u, 4);
  return x;
}

/* The multiplier that maps a row's amax to 448, and the scale that maps back (amax 0: 1, 1). */
static inline float dfl_fp8_row_inv(float amax) { return amax > 0.0f && isfinite(amax) ? DFL_E4M3_MAX / amax : 1.0f; }
static inline float dfl_fp8_row_scale(float amax) { return amax > 0.0f && isfinite(amax) ? amax / DFL_E4M3_MAX : 1.0f; }

/* Quantize one row: q (may be NULL) gets the bytes, qf (may be NULL) their values as floats. */
static inline float dfl_fp8_quant_row(const float *x, int64_t n, uint8_t *q, float *qf) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
  float inv = dfl_fp8_row_inv(amax);
  for (int64_t i = 0; i < n; i++) {
    uint8_t b = dfl_f32_to_e4m3(x[i] * inv);
    if (q) q[i] = b;
    if (qf) qf[i] = dfl_e4m3_to_f32(b);
  }
  return dfl_fp8_row_scale(amax);
}

#endif
