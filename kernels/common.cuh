/*
** common.cuh: what every kernel family shares. Compiled by NVRTC at run time, so it includes no
** system header: bf16/f16 are handled as raw 16-bit values (cuda_bf16.h is not needed, and the
** conversions below round to nearest even like __float2bfloat16_rn).
**
** Kernels take a dtype code per tensor (graph.h dfl_dtype values) instead of being instantiated
** per dtype combination: the branch is uniform across the grid, so it costs a few instructions
** in kernels that are memory bound anyway, and one cubin serves f32 and bf16 graphs.
*/
#define DT_F32 0
#define DT_BF16 1
#define DT_F16 2
#define DT_F64 3
#define DT_I32 4
#define DFL_INF __int_as_float(0x7f800000)
#define DFL_NINF __int_as_float(0xff800000)
typedef long long ll;

__device__ __forceinline__ float dfl_bf2f(unsigned short h) { return __uint_as_float(((unsigned)h) << 16); }
__device__ __forceinline__ unsigned short dfl_f2bf(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
/* Two floats to packed bf16 (lo in the low half), rounded to nearest even as dfl_f2bf: one cvt on
** sm_80+ (a NaN becomes the canonical 0x7fff there rather than its quieted payload). */
__device__ __forceinline__ unsigned dfl_f2bf2(float lo, float hi) {
#if __CUDA_ARCH__ >= 800
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return (unsigned)dfl_f2bf(lo) | ((unsigned)dfl_f2bf(hi) << 16);
#endif
}
/* 8 floats to 8 packed bf16 (value k in half k), and back: 16-byte accesses of bf16 rows */
__device__ __forceinline__ uint4 dfl_f2bf8(const float *v) {
  return make_uint4(dfl_f2bf2(v[0], v[1]), dfl_f2bf2(v[2], v[3]), dfl_f2bf2(v[4], v[5]), dfl_f2bf2(v[6], v[7]));
}
__device__ __forceinline__ void dfl_bf8(uint4 u, float *v) {
  unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 4; k++) v[2 * k] = __uint_as_float(w[k] << 16), v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
}
/* v[0], v[1] rounded to bf16 and read back (dfl_f2bf2: one cvt for the pair) */
__device__ __forceinline__ void dfl_round_bf2(float *v) {
  const unsigned p = dfl_f2bf2(v[0], v[1]);
  v[0] = __uint_as_float(p << 16), v[1] = __uint_as_float(p & 0xffff0000u);
}
__device__ __forceinline__ float dfl_h2f(unsigned short h) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
__device__ __forceinline__ unsigned short dfl_f2h(float f) {
  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
/* Load element i of a float tensor of dtype dt as f32. */
__device__ __forceinline__ float ldf(const void *p, int dt, ll i) {
  if (dt == DT_BF16) return dfl_bf2f(((const unsigned short *)p)[i]);
  if (dt == DT_F16) return dfl_h2f(((const unsigned short *)p)[i]);
  if (dt == DT_F64) return (float)((const double *)p)[i];
  if (dt == DT_I32) return (float)((const int *)p)[i];
  return ((const float *)p)[i];
}
__device__ __forceinline__ void stf(void *p, int dt, ll i, float v) {
  if (dt == DT_BF16) ((unsigned short *)p)[i] = dfl_f2bf(v);
  else if (dt == DT_F16) ((unsigned short *)p)[i] = dfl_f2h(v);
  else if (dt == DT_F64) ((double *)p)[i] = (double)v;
  else if (dt == DT_I32) ((int *)p)[i] = (int)v;
  else ((float *)p)[i] = v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
/* Sum over a block of blockDim.x (a multiple of 32, <= 1024) threads; every thread gets it. */
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float red[32];
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) red[w] = v;
  __syncthreads();
  v = lane < nw ? red[lane] : 0.f;
  return warp_sum(v);
}
/* cp.async (sm_80+): global -> shared without registers, for the attention tiles and the pipelined
** RMSNorm backward's rows. tc_saddr: a generic pointer into shared memory as a .shared address. */
__device__ __forceinline__ unsigned tc_saddr(const void *p) {
  unsigned r;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
  return r;
}
/* 16-byte async copy; ok == 0 zero-fills the destination (tails, padding rows). */
__device__ __forceinline__ void tc_cp16(void *dst, const void *src, int ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(tc_saddr(dst)), "l"(src), "r"(ok ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void tc_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int NG> __device__ __forceinline__ void tc_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(NG) : "memory"); }
/* 16-byte vector access for the memory-bound elementwise kernels: elements [i, i + 8) (i % 8 == 0)
** of a bf16/f16 tensor are one 16-byte load, of an f32 tensor two; other dtypes go element by
** element. The caller checks vec_ok on every pointer (and n % 8 == 0) first. */
__device__ __forceinline__ int vec_ok(const void *p) { return (((unsigned long long)p) & 15) == 0; }
__device__ __forceinline__ void ld8(const void *p, int dt, ll i, float *v) {
  if (dt == DT_BF16 || dt == DT_F16) {
    uint4 u = *(const uint4 *)((const unsigned short *)p + i);
    unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
      unsigned short lo = (unsigned short)(w[k] & 0xffffu), hi = (unsigned short)(w[k] >> 16);
      v[2 * k] = dt == DT_BF16 ? dfl_bf2f(lo) : dfl_h2f(lo);
      v[2 * k + 1] = dt == DT_BF16 ? dfl_bf2f(hi) : dfl_h2f(hi);
    }
  } else if (dt == DT_F32) {
    const float4 *q = (const float4 *)((const float *)p + i);
    float4 a = q[0], b = q[1];
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
  } else {
#pragma unroll
    for (int k = 0; k < 8; k++) v[k] = ldf(p, dt, i + k);
  }
}
__device__ __forceinline__ void st8(void *p, int dt, ll i, const float *v) {
  if (dt == DT_BF16 || dt == DT_F16) {
    unsigned w[4];
#pragma unroll
    for (int k = 0; k < 4; k++)
      w[k] = dt == DT_BF16 ? dfl_f2bf2(v[2 * k], v[2 * k + 1])
                           : (unsigned)dfl_f2h(v[2 * k]) | ((unsigned)dfl_f2h(v[2 * k + 1]) << 16);
    *(uint4 *)((unsigned short *)p + i) = make_uint4(w[0], w[1], w[2], w[3]);
  } else if (dt == DT_F32) {
    float4 *q = (float4 *)((float *)p + i);
    q[0] = make_float4(v[0], v[1], v[2], v[3]);
    q[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
#pragma unroll
    for (int k = 0; k < 8; k++) stf(p, dt, i + k, v[k]);
  }
}
#define GRID_STRIDE(i, n) for (ll i = (ll)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (ll)gridDim.x * blockDim.x)
/* Max over a block of blockDim.x (a multiple of 32, <= 1024) threads; every thread gets it. red:
** 32 floats of shared memory, free on entry. */
__device__ __forceinline__ float block_max(float v, float *red) {
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) red[w] = v;
  __syncthreads();
  v = red[0];
  for (int k = 1; k < nw; k++) v = fmaxf(v, red[k]);
  return v;
}

/* 1 / (1 + e^-g). FAST: by the approximate reciprocal (MUFU.RCP and a multiply, about 1 ulp) for
** graphs that round h to bf16 or f16 anyway; the IEEE division expands to a reciprocal, four FMAs
** and a range check per element, and the SwiGLU kernels were partly issue-bound (ncu, session 12:
** 63% of issue slots busy in the target's quantized SwiGLU; 94 -> 68 us a layer with FAST, session
** 14). f32 graphs keep the division: their values stay those the fixtures were checked with.
** g -> -inf: e^-g = inf, and __fdividef(1, inf) = 0, the sigmoid's limit. */
template <bool FAST>
__device__ __forceinline__ float dfl_sigm(float g) {
  return FAST ? __fdividef(1.f, 1.f + __expf(-g)) : 1.f / (1.f + __expf(-g));
}
/* x as stored in dtype dt and read back (a fused kernel's intermediate, as the unfused graph stored it) */
__device__ __forceinline__ float dfl_round_to(float x, int dt) {
  return dt == DT_BF16 ? dfl_bf2f(dfl_f2bf(x)) : dt == DT_F16 ? dfl_h2f(dfl_f2h(x)) : x;
}

/* FP8 E4M3 (QUANT_F8 and the quantized forms; runtime/fp8.h is the host's copy of this rounding):
** round to nearest even, saturating at +-448. sm_89+ converts with cvt.rn.satfinite.e4m3x2; older
** archs (which cannot run the FP8 GEMM, but compile every family) round the same way in integer
** arithmetic. A row maps its amax to 448: dfl_fp8_inv / dfl_fp8_scale as dfl_fp8_row_inv / _scale. */
__device__ __forceinline__ float dfl_fp8_inv(float amax) {
  return amax > 0.f && amax <= 3.402823466e38f ? 448.0f / amax : 1.0f;
}
__device__ __forceinline__ float dfl_fp8_scale(float amax) {
  return amax > 0.f && amax <= 3.402823466e38f ? amax / 448.0f : 1.0f;
}
__device__ __forceinline__ unsigned dfl_e4m3x2(float lo, float hi) { /* lo -> byte 0, hi -> byte 1 */
#if __CUDA_ARCH__ >= 890
  unsigned short d;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
  return d;
#else
  unsigned r = 0;
  for (int k = 0; k < 2; k++) {
    unsigned u = __float_as_uint(k ? hi : lo), sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu, b;
    if (a > 0x7f800000u) b = sign | 0x7fu;
    else if (a >= 0x43e80000u) b = sign | 0x7eu;
    else if (a < 0x3c800000u) b = sign | (unsigned)rintf(__uint_as_float(a) * 512.0f);
    else {
      int e = (int)(a >> 23) - 127;
      unsigned q = (a & 0x7fffffu) >> 20, rem = a & 0xfffffu;
      if (rem > 0x80000u || (rem == 0x80000u && (q & 1u))) q++;
      if (q == 8) { q = 0; e++; }
      b = sign | (unsigned)(((e + 7) << 3) | (int)q);
    }
    r |= b << (8 * k);
  }
  return r;
#endif
}
/* 8 values times inv -> 8 bytes (byte k = value k) */
__device__ __forceinline__ uint2 dfl_e4m3x8(const float *v, float inv) {
  uint2 o;
  o.x = dfl_e4m3x2(v[0] * inv, v[1] * inv) | (dfl_e4m3x2(v[2] * inv, v[3] * inv) << 16);
  o.y = dfl_e4m3x2(v[4] * inv, v[5] * inv) | (dfl_e4m3x2(v[6] * inv, v[7] * inv) << 16);
  return o;
}
/* The quantized forms (dfl_fuse_quant: RMSNORM, SWIGLU): a block holds its row of C = 8 * NCH *
** blockDim.x features in registers (NCH chunks of 8 per thread, chunk c of thread t at features
** 8 (c blockDim.x + t): coalesced); rowq_store rounds y to mid (the dtype the unfused graph stored it
** in) and writes the bytes and scale of dfl_quant_f8. */
template <int NCH>
__device__ __forceinline__ void rowq_store(unsigned char *q, float *s, ll row, int C, float (&y)[NCH][8], int mid) {
  __shared__ float red[32];
  float amax = 0.f;
#pragma unroll
  for (int c = 0; c < NCH; c++)
#pragma unroll
    for (int k = 0; k < 8; k += 2) {
      if (mid == DT_BF16) dfl_round_bf2(&y[c][k]);
      else y[c][k] = dfl_round_to(y[c][k], mid), y[c][k + 1] = dfl_round_to(y[c][k + 1], mid);
      amax = fmaxf(amax, fmaxf(fabsf(y[c][k]), fabsf(y[c][k + 1])));
    }
  amax = block_max(amax, red);
  const float inv = dfl_fp8_inv(amax);
  if (threadIdx.x == 0) s[row] = dfl_fp8_scale(amax);
#pragma unroll
  for (int c = 0; c < NCH; c++)
    *(uint2 *)(q + row * C + (c * blockDim.x + threadIdx.x) * 8) = dfl_e4m3x8(y[c], inv);
}

/* --- the RoPE arithmetic rope.cuh and hybrid.cuh's partial RoPE share (a family compiles alone with
** common only) --- */
/* 8 values rounded to dt and read back (bf16: a cvt per pair, dfl_f2bf2) */
__device__ __forceinline__ void rope_round8(float *v, int dt) {
#pragma unroll
  for (int k = 0; k < 8; k += 2) {
    if (dt == DT_BF16) dfl_round_bf2(&v[k]);
    else if (dt == DT_F16) v[k] = dfl_h2f(dfl_f2h(v[k])), v[k + 1] = dfl_h2f(dfl_f2h(v[k + 1]));
  }
}
/* sin and cos of a (radians, |a| up to ~1e6) within a few f32 ulps of the double functions' values
** rounded to f32: a - k 2pi in double (2pi as hi + lo; the reduced angle is exact to ~1e-16), then
** sincosf of its f32 head and a first-order correction for its tail. */
__device__ __forceinline__ void rope_sincos(double a, float *s, float *c) {
  const double k = rint(a * 0.15915494309189535);   /* 1 / (2 pi) */
  double r = fma(-k, 6.283185307179586, a);
  r = fma(-k, 2.4492935982947064e-16, r);
  float h = (float)r, l = (float)(r - (double)h), sh, ch;
  sincosf(h, &sh, &ch);
  *s = fmaf(ch, l, sh);
  *c = fmaf(-sh, l, ch);
}
__device__ __forceinline__ void rope_angles8(double p, const double *invf, int i0, int inverse, float *cs, float *sn) {
#pragma unroll
  for (int k = 0; k < 8; k++) {
    rope_sincos(p * invf[i0 + k], &sn[k], &cs[k]);
    if (inverse) sn[k] = -sn[k];
  }
}
