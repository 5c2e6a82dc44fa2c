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
#define GRID_STRIDE(i, n) for (ll i = (ll)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (ll)gridDim.x * blockDim.x)
