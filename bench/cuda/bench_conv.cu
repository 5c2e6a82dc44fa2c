/*
** bench_conv.cu: the 27B target's short convolution (kernels/hybrid.cuh dfl_conv1d_silu_qkv_v8: conv1d +
** SiLU over q|k|v, q and k L2-normalized in registers) runs at 2.25 TB/s on an H100; is it latency bound?
** A kernel experiment, built here: nvcc -O3 -std=c++17 -arch=sm_90a -I. bench/cuda/bench_conv.cu. The 27B
** shape: 49,152 rows (12 sequences of 4,096), C 10,240 (q 2,048, k 2,048, v 6,144), heads of 128, bf16, f32
** weights. Variants of the library's arithmetic, timed (median of 20, CUDA events) and checked bit for bit
** against the first (the library's: 32 rows a thread, 4 in flight, (128, 3)):
**   CRT rows a thread; CRB rows loaded a batch ahead; MINB CTAs an SM; WS the 32 weights read through
**   the read-only cache per use (L1 hits) instead of held in 32 registers.
** GB/s counts x read once and q, k, v written once.
*/
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#include "kernels/common.cuh"
__device__ __forceinline__ float hy_silu_fast(float x) { return __fdividef(x, 1.f + __expf(-x)); }
__device__ __forceinline__ void hy_dec8(uint4 u, int dt, float *v) {
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 4; k++) {
    const unsigned short lo = (unsigned short)(w[k] & 0xffffu), hi = (unsigned short)(w[k] >> 16);
    v[2 * k] = dt == DT_BF16 ? dfl_bf2f(lo) : dfl_h2f(lo);
    v[2 * k + 1] = dt == DT_BF16 ? dfl_bf2f(hi) : dfl_h2f(hi);
  }
}
template <int L, int DTX, int CRT, int CRB, bool WS>
__device__ __forceinline__ void conv_v(void *q, void *k, void *v, int dty, const void *x, const void *w,
                                               int dtw, ll R, int C, int D, int S, float eps, float alpha) {
  const int C8 = C >> 3, lane = threadIdx.x & 31;
  const unsigned gmask = L == 32 ? 0xffffffffu : ((1u << L) - 1u) << (lane & ~(L - 1));
  const ll nt = (R + CRT - 1) / CRT;
  GRID_STRIDE(i, nt * C8) {
    const int c0 = (int)(i % C8) * 8;
    const ll r0 = (i / C8) * CRT, r1 = r0 + CRT < R ? r0 + CRT : R;
    /* where the row's 8 values go: q, k (normalized; scale applied after the norm) or v */
    const int part = c0 < D ? 0 : c0 < 2 * D ? 1 : 2;
    void *dst = part == 0 ? q : part == 1 ? k : v;
    const int ldd = part == 2 ? C - 2 * D : D, cd = c0 - (part == 0 ? 0 : part == 1 ? D : 2 * D);
    const float sc = part == 0 ? alpha : 1.f;
    float wk[4][8];
#pragma unroll
    for (int c = 0; c < 8; c++)
#pragma unroll
      for (int j = 0; j < 4; j++) wk[j][c] = WS ? 0.f : ldf(w, dtw, (ll)(c0 + c) * 4 + j);
#define WK(j, c) (WS ? __ldg((const float *)w + (ll)(c0 + (c)) * 4 + (j)) : wk[j][c])
    int pos = (int)(r0 % S);
    /* p[a]: output row (this row + a)'s sum so far, taps in order 0..3 (the per-element kernel's order):
    ** each input row is decoded once and added to the four outputs it reaches */
    float p[3][8];
#pragma unroll
    for (int c = 0; c < 8; c++) p[0][c] = p[1][c] = p[2][c] = 0.f;
    const unsigned short *xs = (const unsigned short *)x + c0;
#pragma unroll
    for (int j = 0; j < 3; j++) /* the halo: the up to 3 rows of r0's sequence before it (p stays 0 before them) */
      if (pos - 3 + j >= 0) {
        float xh[8];
        hy_dec8(*(const uint4 *)(xs + (r0 - 3 + j) * C), DTX, xh);
#pragma unroll
        for (int c = 0; c < 8; c++) {
          p[0][c] = fmaf(WK(2, c), xh[c], p[1][c]);
          p[1][c] = fmaf(WK(1, c), xh[c], p[2][c]);
          p[2][c] = WK(0, c) * xh[c];
        }
      }
    uint4 nxt[CRB];
#pragma unroll
    for (int b = 0; b < CRB; b++)
      if (r0 + b < r1) nxt[b] = *(const uint4 *)(xs + (r0 + b) * C);
    for (ll rb = r0; rb < r1; rb += CRB) {
      uint4 raw[CRB];
#pragma unroll
      for (int b = 0; b < CRB; b++) {
        raw[b] = nxt[b];
        if (rb + CRB + b < r1) nxt[b] = *(const uint4 *)(xs + (rb + CRB + b) * C);
      }
#pragma unroll
      for (int b = 0; b < CRB; b++) {
        if (rb + b >= r1) break;
        if (pos == S) { /* a new sequence: the rows before it read as 0 */
          pos = 0;
#pragma unroll
          for (int c = 0; c < 8; c++) p[0][c] = p[1][c] = p[2][c] = 0.f;
        }
        float o[8], xc[8], ss = 0.f;
        hy_dec8(raw[b], DTX, xc);
#pragma unroll
        for (int c = 0; c < 8; c++) {
          o[c] = hy_silu_fast(fmaf(WK(3, c), xc[c], p[0][c]));
          p[0][c] = fmaf(WK(2, c), xc[c], p[1][c]);
          p[1][c] = fmaf(WK(1, c), xc[c], p[2][c]);
          p[2][c] = WK(0, c) * xc[c];
          ss += o[c] * o[c];
        }
        if (part < 2) { /* the group's lanes all take this branch together */
#pragma unroll
          for (int m = L / 2; m > 0; m >>= 1) ss += __shfl_xor_sync(gmask, ss, m);
          const float r = sc / sqrtf(ss + eps);
#pragma unroll
          for (int c = 0; c < 8; c++) o[c] *= r;
        }
        st8(dst, dty, (rb + b) * ldd + cd, o);
        pos++;
      }
    }
  }
}
template <int CRT, int CRB, int MINB, bool WS>
__global__ void __launch_bounds__(128, MINB) conv_k(void *q, void *k, void *v, const void *x, const void *w, ll R,
                                                  int C, int D, int S, float eps, float alpha) {
  conv_v<16, DT_BF16, CRT, CRB, WS>(q, k, v, DT_BF16, x, w, DT_F32, R, C, D, S, eps, alpha);
}

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)
static const ll R = 49152;
static const int C = 10240, D = 2048, S = 4096;
struct Bufs { unsigned short *x, *q, *k, *v; float *w; };

template <int CRT, int CRB, int MINB, bool WS>
static void run(const char *name, Bufs &b, std::vector<unsigned short> *ref) {
  auto kf = conv_k<CRT, CRB, MINB, WS>;
  int occ = 0, sms = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kf, 128, 0));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaFuncAttributes fa;
  CK(cudaFuncGetAttributes(&fa, kf));
  const ll items = (R + CRT - 1) / CRT * (C / 8), want = (items + 127) / 128, grid = std::min<ll>(want, (ll)occ * sms);
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int it = 0; it < 23; it++) {
    CK(cudaEventRecord(e0));
    kf<<<(unsigned)grid, 128>>>(b.q, b.k, b.v, b.x, b.w, R, C, D, S, 1e-6f, 0.08838834764831845f);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    float t;
    CK(cudaEventElapsedTime(&t, e0, e1));
    if (it >= 3) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double t = ms[ms.size() / 2], bytes = 2.0 * 2 * R * C;
  const size_t nq = (size_t)R * D, nv = (size_t)R * (C - 2 * D);
  std::vector<unsigned short> h(2 * nq + nv);
  CK(cudaMemcpy(h.data(), b.q, nq * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(h.data() + nq, b.k, nq * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(h.data() + 2 * nq, b.v, nv * 2, cudaMemcpyDeviceToHost));
  size_t diff = 0;
  if (ref->empty()) *ref = h;
  else for (size_t i = 0; i < h.size(); i++) diff += h[i] != (*ref)[i];
  printf("%-26s regs %3d spill %4d B  occ %d/SM grid %6lld  %.3f ms  %.0f GB/s  %zu values differ\n", name, fa.numRegs,
         (int)fa.localSizeBytes, occ, grid, t, bytes / t * 1e-6, diff);
}

int main() {
  Bufs b;
  const size_t nx = (size_t)R * C, nq = (size_t)R * D, nv = (size_t)R * (C - 2 * D);
  CK(cudaMalloc(&b.x, nx * 2)); CK(cudaMalloc(&b.q, nq * 2)); CK(cudaMalloc(&b.k, nq * 2)); CK(cudaMalloc(&b.v, nv * 2));
  CK(cudaMalloc(&b.w, (size_t)C * 4 * 4));
  std::vector<unsigned short> hx(nx);
  unsigned s = 12345;
  for (auto &e : hx) { s = s * 1664525u + 1013904223u; float f = ((s >> 8) * (1.f / 16777216.f) - 0.5f) * 4.f; unsigned u; memcpy(&u, &f, 4); e = (unsigned short)(u >> 16); }
  std::vector<float> hw((size_t)C * 4);
  for (size_t i = 0; i < hw.size(); i++) { s = s * 1664525u + 1013904223u; hw[i] = ((s >> 8) * (1.f / 16777216.f) - 0.5f); }
  CK(cudaMemcpy(b.x, hx.data(), nx * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b.w, hw.data(), hw.size() * 4, cudaMemcpyHostToDevice));
  std::vector<unsigned short> ref;
  run<32, 4, 3, false>("CRT32 CRB4 minb3 (library)", b, &ref);
  run<32, 8, 3, false>("CRT32 CRB8 minb3", b, &ref);
  run<32, 8, 2, false>("CRT32 CRB8 minb2", b, &ref);
  run<32, 4, 4, true>("CRT32 CRB4 minb4 ws", b, &ref);
  run<32, 8, 3, true>("CRT32 CRB8 minb3 ws", b, &ref);
  run<32, 8, 4, true>("CRT32 CRB8 minb4 ws", b, &ref);
  run<16, 4, 4, true>("CRT16 CRB4 minb4 ws", b, &ref);
  run<64, 8, 3, true>("CRT64 CRB8 minb3 ws", b, &ref);
  run<32, 4, 3, false>("CRT32 CRB4 minb3 (again)", b, &ref);
  return 0;
}
