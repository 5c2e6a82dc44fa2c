/*
** bench_rope.cu: why the 27B target's normed partial RoPE (kernels/hybrid.cuh dfl_rope_pn) moves 1.05 TB/s.
** A kernel experiment, built on the GPU machine: nvcc -O3 -arch=sm_90a -I. bench/cuda/bench_rope.cu.
** The 27B shape: 49,152 rows, q 24 heads and k 4 heads of 256 dims, 64 rotated, per-head RMSNorm in
** front, bf16. Variants of the same arithmetic, each timed (median of 20 launches, CUDA events) and
** checked bit for bit against the first (the library's dfl_rope_pn as it builds now), the library's own code
** (hy_rope_pn) at other settings and copies of its arithmetic:
**   U      heads a warp loads before it computes (ILP)
**   MINB   __launch_bounds__'s CTAs an SM (occupancy)
**   PIPE   the next U heads' loads issued before this U's arithmetic (software pipelining)
**   WS     the norm weights read from shared memory per use instead of held in 16 registers
** GB/s counts q and k read once and written once. The copy's variants hold the dtypes constant (bf16, f32
** weights); the library's code takes them as arguments (2026-12-06: the copy at U 2 and 4 CTAs an SM ran
** 0.758 ms against the library's 1.022 at U 4 and 2).
*/
#include <cstring>
#include "bench/cuda/bench_kernel.cuh"
#include "kernels/common.cuh"
#include "kernels/hybrid.cuh" /* the library's dfl_rope_pn, as it is now */

template <int U, int MINB, bool PIPE, bool WS>
__global__ void __launch_bounds__(256, MINB) rope_v(void *out, const void *x, const void *wn, int nh, void *out2,
                                                  const void *x2, const void *wn2, int nh2, const int *pos, ll rows,
                                                  int hd, int rd, double theta, float eps) {
  extern __shared__ double sm[];
  float *wsm = (float *)(sm + rd / 2); /* WS: the two norm weights, read from shared memory per use */
  for (int i = threadIdx.x; i < rd / 2; i += blockDim.x) sm[i] = pow(theta, -2.0 * i / rd);
  if (WS) for (int i = threadIdx.x; i < hd; i += blockDim.x) wsm[i] = ldf(wn, DT_F32, i), wsm[hd + i] = ldf(wn2, DT_F32, i);
  __syncthreads();
  const int dt = DT_BF16;
  const int ni = hd / 8, h8 = rd / 16, lane = threadIdx.x & 31, li = lane & (ni - 1), hpw = 32 / ni, hl = lane / ni;
  const int src = li < h8 ? lane + h8 : li < 2 * h8 ? lane - h8 : lane, rot = li < 2 * h8;
  float w1[8], w2[8];
#pragma unroll
  for (int k = 0; k < 8; k++) w1[k] = WS ? 0.f : ldf(wn, DT_F32, li * 8 + k), w2[k] = WS ? 0.f : ldf(wn2, DT_F32, li * 8 + k);
  const int nt = nh + nh2;
  const ll nw = ((ll)gridDim.x * blockDim.x) >> 5;
  for (ll r = ((ll)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < rows; r += nw) {
    float cs[8], sn[8];
#pragma unroll
    for (int k = 0; k < 8; k++) cs[k] = 1.f, sn[k] = 0.f;
    float v[U][8], nx[U][8];
    auto load = [&](int h0, float (*d)[8]) {
#pragma unroll
      for (int u = 0; u < U; u++) {
        const int h = h0 + u * hpw + hl, sec = h >= nh;
        if (h < nt) ld8(sec ? x2 : x, dt, ((r * (sec ? nh2 : nh)) + (sec ? h - nh : h)) * hd + li * 8, d[u]);
        else
#pragma unroll
          for (int k = 0; k < 8; k++) d[u][k] = 0.f;
      }
    };
    load(0, v);
    if (rot) rope_angles8((double)pos[r], sm, (li % h8) * 8, 0, cs, sn);
    for (int h0 = 0; h0 < nt; h0 += hpw * U) {
      if (PIPE && h0 + hpw * U < nt) load(h0 + hpw * U, nx);
      else if (!PIPE && h0) load(h0, v);
#pragma unroll
      for (int u = 0; u < U; u++) {
        const int h = h0 + u * hpw + hl, sec = h >= nh;
        float ss = 0.f;
#pragma unroll
        for (int k = 0; k < 8; k++) ss += v[u][k] * v[u][k];
        for (int o = ni >> 1; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        const float rs = rsqrtf(ss / hd + eps);
#pragma unroll
        for (int k = 0; k < 8; k++) v[u][k] = v[u][k] * rs * (WS ? wsm[sec * hd + li * 8 + k] : sec ? w2[k] : w1[k]);
        rope_round8(v[u], DT_BF16);
        float o[8];
#pragma unroll
        for (int k = 0; k < 8; k++) {
          const float pv = __shfl_sync(0xffffffffu, v[u][k], src);
          o[k] = li < h8 ? v[u][k] * cs[k] - pv * sn[k] : rot ? v[u][k] * cs[k] + pv * sn[k] : v[u][k];
        }
        if (h < nt) st8(sec ? out2 : out, dt, ((r * (sec ? nh2 : nh)) + (sec ? h - nh : h)) * hd + li * 8, o);
      }
      if (PIPE)
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
          for (int k = 0; k < 8; k++) v[u][k] = nx[u][k];
    }
  }
}


static const ll R = 49152;
static const int NH = 24, NH2 = 4, HD = 256, RD = 64;

struct Bufs { unsigned short *x, *x2, *o, *o2; float *w, *w2; int *pos; };

/* Times launch, reports it and checks the outputs against the first variant's */
template <typename F>
static void timed(const char *name, Bufs &b, std::vector<unsigned short> *ref, const void *kfn, int smem, F launch) {
  const bench_fill f = bench_grid(kfn, 256, smem, (R + 7) / 8);
  const double t = bench_median_ms([&] { launch((unsigned)f.grid, smem); });
  const size_t n1 = (size_t)R * NH * HD, n2 = (size_t)R * NH2 * HD;
  std::vector<unsigned short> h(n1 + n2);
  CK(cudaMemcpy(h.data(), b.o, n1 * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(h.data() + n1, b.o2, n2 * 2, cudaMemcpyDeviceToHost));
  bench_report(name, f, t, 2.0 * 2 * R * (NH + NH2) * HD, bench_differ(h, ref));
}

template <int U, int MINB, bool PIPE, bool WS = false>
static void run(const char *name, Bufs &b, std::vector<unsigned short> *ref) {
  auto k = rope_v<U, MINB, PIPE, WS>;
  const int smem = RD / 2 * 8 + 2 * HD * 4;
  timed(name, b, ref, (const void *)k, smem, [&](unsigned grid, int sm) {
    k<<<grid, 256, sm>>>(b.o, b.x, b.w, NH, b.o2, b.x2, b.w2, NH2, b.pos, R, HD, RD, 1e7, 1e-6f);
  });
}

/* the library's code (kernels/hybrid.cuh hy_rope_pn) at U heads in flight and MINB CTAs an SM, with the 27B's
** arguments: normed pair, bf16, f32 weights. lib_v<ROPE_PN_U, ROPE_PN_MINB> is dfl_rope_pn as the library builds it. */
template <int U, int MINB>
__global__ void __launch_bounds__(256, MINB) lib_v(void *out, const void *x, const void *wn, int nh, void *out2,
                                                 const void *x2, const void *wn2, int nh2, int dto, int dtx, int dtw,
                                                 int mid, const int *pos, ll rows, int hd, int rd, double theta,
                                                 int inverse, float eps) {
  hy_rope_pn<U>(out, x, wn, nh, out2, x2, wn2, nh2, dto, dtx, dtw, mid, pos, rows, hd, rd, theta, inverse, eps);
}
template <int U, int MINB>
static void run_lib(const char *name, Bufs &b, std::vector<unsigned short> *ref) {
  auto k = lib_v<U, MINB>;
  timed(name, b, ref, (const void *)k, RD / 2 * 8, [&](unsigned grid, int sm) {
    k<<<grid, 256, sm>>>(b.o, b.x, b.w, NH, b.o2, b.x2, b.w2, NH2, DT_BF16, DT_BF16, DT_F32, DT_BF16, b.pos, R, HD, RD,
                         1e7, 0, 1e-6f);
  });
}

int main() {
  Bufs b;
  const size_t n1 = (size_t)R * NH * HD, n2 = (size_t)R * NH2 * HD;
  CK(cudaMalloc(&b.x, n1 * 2)); CK(cudaMalloc(&b.o, n1 * 2));
  CK(cudaMalloc(&b.x2, n2 * 2)); CK(cudaMalloc(&b.o2, n2 * 2));
  CK(cudaMalloc(&b.w, HD * 4)); CK(cudaMalloc(&b.w2, HD * 4)); CK(cudaMalloc(&b.pos, R * 4));
  std::vector<unsigned short> hx(n1 + n2);
  unsigned s = 12345;
  for (auto &v : hx) { s = s * 1664525u + 1013904223u; float f = ((s >> 8) * (1.f / 16777216.f) - 0.5f) * 4.f; unsigned u; memcpy(&u, &f, 4); v = (unsigned short)(u >> 16); }
  std::vector<float> hw(HD);
  for (int i = 0; i < HD; i++) hw[i] = 1.f + 0.01f * (i % 17);
  std::vector<int> hp(R);
  for (ll i = 0; i < R; i++) hp[i] = (int)(i % 4096);
  CK(cudaMemcpy(b.x, hx.data(), n1 * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b.x2, hx.data() + n1, n2 * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b.w, hw.data(), HD * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b.w2, hw.data(), HD * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b.pos, hp.data(), R * 4, cudaMemcpyHostToDevice));
  std::vector<unsigned short> ref;
  run_lib<ROPE_PN_U, ROPE_PN_MINB>("library dfl_rope_pn", b, &ref);
  run_lib<2, 4>("library U2 minb4", b, &ref);
  run_lib<2, 3>("library U2 minb3", b, &ref);
  run_lib<4, 3>("library U4 minb3", b, &ref);
  run_lib<2, 2>("library U2 minb2", b, &ref);
  run<4, 2, false>("copy U4 minb2", b, &ref);
  run<2, 4, false>("copy U2 minb4", b, &ref);
  run<2, 4, false, true>("copy U2 minb4 ws", b, &ref);
  run<2, 3, false, true>("copy U2 minb3 ws", b, &ref);
  run_lib<ROPE_PN_U, ROPE_PN_MINB>("library dfl_rope_pn (again)", b, &ref);
  return 0;
}
