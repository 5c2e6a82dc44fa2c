/*
** bench_conv.cu: the 27B target's short convolution (kernels/hybrid.cuh hy_conv_qkv_v8: conv1d + SiLU over
** q|k|v, q and k L2-normalized in registers) at other rows a thread and rows in flight. A kernel
** experiment, built here: nvcc -O3 -std=c++17 -arch=sm_90a -I. bench/cuda/bench_conv.cu. The 27B shape:
** 49,152 rows (12 sequences of 4,096), C 10,240 (q 2,048, k 2,048, v 6,144), heads of 128, bf16, f32
** weights. The library's template at each count, timed and checked bit for bit against the first:
**   CRT rows a thread; CRB rows loaded a batch ahead; MINB CTAs an SM.
** 2026-12-06, H100: CRB 4 -> 8 took it 0.789 -> 0.763 ms (landed); the 32 weights read through the cache
** per use instead of held in registers ran 11x slower (that variant was removed).
** GB/s counts x read once and q, k, v written once.
*/
#include <cstring>
#include "bench/cuda/bench_kernel.cuh"
#include "kernels/common.cuh"
#include "kernels/hybrid.cuh"

template <int CRT, int CRB, int MINB>
__global__ void __launch_bounds__(128, MINB) conv_k(void *q, void *k, void *v, const void *x, const void *w, ll R,
                                                  int C, int D, int S, float eps, float alpha) {
  hy_conv_qkv_v8<16, DT_BF16, CRT, CRB>(q, k, v, DT_BF16, x, w, DT_F32, R, C, D, S, eps, alpha);
}

static const ll R = 49152;
static const int C = 10240, D = 2048, S = 4096;
struct Bufs { unsigned short *x, *q, *k, *v; float *w; };

template <int CRT, int CRB, int MINB>
static void run(const char *name, Bufs &b, std::vector<unsigned short> *ref) {
  auto kf = conv_k<CRT, CRB, MINB>;
  const bench_fill f = bench_grid((const void *)kf, 128, 0, ((R + CRT - 1) / CRT * (C / 8) + 127) / 128);
  const double t = bench_median_ms([&] {
    kf<<<(unsigned)f.grid, 128>>>(b.q, b.k, b.v, b.x, b.w, R, C, D, S, 1e-6f, 0.08838834764831845f);
  });
  const size_t nq = (size_t)R * D, nv = (size_t)R * (C - 2 * D);
  std::vector<unsigned short> h(2 * nq + nv);
  CK(cudaMemcpy(h.data(), b.q, nq * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(h.data() + nq, b.k, nq * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(h.data() + 2 * nq, b.v, nv * 2, cudaMemcpyDeviceToHost));
  bench_report(name, f, t, 2.0 * 2 * R * C, bench_differ(h, ref));
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
  run<32, HY_CRB, 3>("CRT32 CRB8 minb3 (library)", b, &ref);
  run<32, 4, 3>("CRT32 CRB4 minb3", b, &ref);
  run<32, 8, 2>("CRT32 CRB8 minb2", b, &ref);
  run<64, 8, 3>("CRT64 CRB8 minb3", b, &ref);
  run<16, 4, 4>("CRT16 CRB4 minb4", b, &ref);
  run<32, HY_CRB, 3>("CRT32 CRB8 minb3 (again)", b, &ref);
  return 0;
}
