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
  /* normal: round the f32 bits to nearest even at bit 20 (a carry moves into the exponent), then
  ** (exponent field << 3 | 3 mantissa bits) = code + (127 - 7) << 3 */
  a += 0x7ffffu + ((a >> 20) & 1u);
  return (uint8_t)(sign | (uint8_t)((a >> 20) - (120u << 3)));
}

/* The value of each code: m 2^-9 (exponent field 0), (8 + m) 2^(e - 10) otherwise, 0x7f/0xff NaN.
** A table: the loader decodes billions of weights (ldexpf took ~10 ns a value). */
static const float dfl_e4m3_val[256] = {
  0.0f, 0x1p-9f, 0x1p-8f, 0x1.8p-8f, 0x1p-7f, 0x1.4p-7f, 0x1.8p-7f, 0x1.cp-7f,
  0x1p-6f, 0x1.2p-6f, 0x1.4p-6f, 0x1.6p-6f, 0x1.8p-6f, 0x1.ap-6f, 0x1.cp-6f, 0x1.ep-6f,
  0x1p-5f, 0x1.2p-5f, 0x1.4p-5f, 0x1.6p-5f, 0x1.8p-5f, 0x1.ap-5f, 0x1.cp-5f, 0x1.ep-5f,
  0x1p-4f, 0x1.2p-4f, 0x1.4p-4f, 0x1.6p-4f, 0x1.8p-4f, 0x1.ap-4f, 0x1.cp-4f, 0x1.ep-4f,
  0x1p-3f, 0x1.2p-3f, 0x1.4p-3f, 0x1.6p-3f, 0x1.8p-3f, 0x1.ap-3f, 0x1.cp-3f, 0x1.ep-3f,
  0x1p-2f, 0x1.2p-2f, 0x1.4p-2f, 0x1.6p-2f, 0x1.8p-2f, 0x1.ap-2f, 0x1.cp-2f, 0x1.ep-2f,
  0x1p-1f, 0x1.2p-1f, 0x1.4p-1f, 0x1.6p-1f, 0x1.8p-1f, 0x1.ap-1f, 0x1.cp-1f, 0x1.ep-1f,
  0x1p+0f, 0x1.2p+0f, 0x1.4p+0f, 0x1.6p+0f, 0x1.8p+0f, 0x1.ap+0f, 0x1.cp+0f, 0x1.ep+0f,
  0x1p+1f, 0x1.2p+1f, 0x1.4p+1f, 0x1.6p+1f, 0x1.8p+1f, 0x1.ap+1f, 0x1.cp+1f, 0x1.ep+1f,
  0x1p+2f, 0x1.2p+2f, 0x1.4p+2f, 0x1.6p+2f, 0x1.8p+2f, 0x1.ap+2f, 0x1.cp+2f, 0x1.ep+2f,
  0x1p+3f, 0x1.2p+3f, 0x1.4p+3f, 0x1.6p+3f, 0x1.8p+3f, 0x1.ap+3f, 0x1.cp+3f, 0x1.ep+3f,
  0x1p+4f, 0x1.2p+4f, 0x1.4p+4f, 0x1.6p+4f, 0x1.8p+4f, 0x1.ap+4f, 0x1.cp+4f, 0x1.ep+4f,
  0x1p+5f, 0x1.2p+5f, 0x1.4p+5f, 0x1.6p+5f, 0x1.8p+5f, 0x1.ap+5f, 0x1.cp+5f, 0x1.ep+5f,
  0x1p+6f, 0x1.2p+6f, 0x1.4p+6f, 0x1.6p+6f, 0x1.8p+6f, 0x1.ap+6f, 0x1.cp+6f, 0x1.ep+6f,
  0x1p+7f, 0x1.2p+7f, 0x1.4p+7f, 0x1.6p+7f, 0x1.8p+7f, 0x1.ap+7f, 0x1.cp+7f, 0x1.ep+7f,
  0x1p+8f, 0x1.2p+8f, 0x1.4p+8f, 0x1.6p+8f, 0x1.8p+8f, 0x1.ap+8f, 0x1.cp+8f, NAN,
  -0.0f, -0x1p-9f, -0x1p-8f, -0x1.8p-8f, -0x1p-7f, -0x1.4p-7f, -0x1.8p-7f, -0x1.cp-7f,
  -0x1p-6f, -0x1.2p-6f, -0x1.4p-6f, -0x1.6p-6f, -0x1.8p-6f, -0x1.ap-6f, -0x1.cp-6f, -0x1.ep-6f,
  -0x1p-5f, -0x1.2p-5f, -0x1.4p-5f, -0x1.6p-5f, -0x1.8p-5f, -0x1.ap-5f, -0x1.cp-5f, -0x1.ep-5f,
  -0x1p-4f, -0x1.2p-4f, -0x1.4p-4f, -0x1.6p-4f, -0x1.8p-4f, -0x1.ap-4f, -0x1.cp-4f, -0x1.ep-4f,
  -0x1p-3f, -0x1.2p-3f, -0x1.4p-3f, -0x1.6p-3f, -0x1.8p-3f, -0x1.ap-3f, -0x1.cp-3f, -0x1.ep-3f,
  -0x1p-2f, -0x1.2p-2f, -0x1.4p-2f, -0x1.6p-2f, -0x1.8p-2f, -0x1.ap-2f, -0x1.cp-2f, -0x1.ep-2f,
  -0x1p-1f, -0x1.2p-1f, -0x1.4p-1f, -0x1.6p-1f, -0x1.8p-1f, -0x1.ap-1f, -0x1.cp-1f, -0x1.ep-1f,
  -0x1p+0f, -0x1.2p+0f, -0x1.4p+0f, -0x1.6p+0f, -0x1.8p+0f, -0x1.ap+0f, -0x1.cp+0f, -0x1.ep+0f,
  -0x1p+1f, -0x1.2p+1f, -0x1.4p+1f, -0x1.6p+1f, -0x1.8p+1f, -0x1.ap+1f, -0x1.cp+1f, -0x1.ep+1f,
  -0x1p+2f, -0x1.2p+2f, -0x1.4p+2f, -0x1.6p+2f, -0x1.8p+2f, -0x1.ap+2f, -0x1.cp+2f, -0x1.ep+2f,
  -0x1p+3f, -0x1.2p+3f, -0x1.4p+3f, -0x1.6p+3f, -0x1.8p+3f, -0x1.ap+3f, -0x1.cp+3f, -0x1.ep+3f,
  -0x1p+4f, -0x1.2p+4f, -0x1.4p+4f, -0x1.6p+4f, -0x1.8p+4f, -0x1.ap+4f, -0x1.cp+4f, -0x1.ep+4f,
  -0x1p+5f, -0x1.2p+5f, -0x1.4p+5f, -0x1.6p+5f, -0x1.8p+5f, -0x1.ap+5f, -0x1.cp+5f, -0x1.ep+5f,
  -0x1p+6f, -0x1.2p+6f, -0x1.4p+6f, -0x1.6p+6f, -0x1.8p+6f, -0x1.ap+6f, -0x1.cp+6f, -0x1.ep+6f,
  -0x1p+7f, -0x1.2p+7f, -0x1.4p+7f, -0x1.6p+7f, -0x1.8p+7f, -0x1.ap+7f, -0x1.cp+7f, -0x1.ep+7f,
  -0x1p+8f, -0x1.2p+8f, -0x1.4p+8f, -0x1.6p+8f, -0x1.8p+8f, -0x1.ap+8f, -0x1.cp+8f, -NAN,
};
static inline float dfl_e4m3_to_f32(uint8_t b) { return dfl_e4m3_val[b]; }

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
