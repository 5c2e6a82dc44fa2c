/*
** bench_gdn_scan.cu: the gated delta rule's two kernels (kernels/hybrid.cuh gdn_prep and gdn_scan) at the
** Qwen3.6-27B shape (12 x 4,096 tokens, 16 key heads, 48 value heads, dk = dv = 128), and a variant of the
** scan: a whole value head a CTA of 8 warps (the same 8 warps an SM as the library's two CTAs of 4), its
** loads two chunks deep. A kernel experiment, built here (nvcc -O3 -std=c++17 -arch=sm_90a -I.
** bench/cuda/bench_gdn_scan.cu), run on the GPU machine. The library's prep makes W, U and M from
** random q, k (unit rows, as the l2norm leaves them), v, g in [-1, 0) and beta in (0, 1); each scan is timed
** (median of 20 launches, CUDA events) and its o compared with the library scan's, bit for bit (the same
** arithmetic in the same order: none should differ). GB/s counts the bytes each kernel must move once.
** The prep is also timed with its triangles' products spread evenly over the warps (kernels/hybrid.cuh
** gdn_prep's BAL: W and U, A and M, or both), its W, U and M compared bit for bit with the library's.
*/
#include <climits>
#include <cstring>
#include "bench/cuda/bench_kernel.cuh"
#include "kernels/common.cuh"
#include "kernels/hybrid.cuh"

/* The scan for a whole value head in one CTA (NW warps, BV = 16 NW columns: the 27B's 128), its loads two
** chunks deep: chunk c + 2's K, Q, W, M, U and g go into the buffer chunk c has just freed while chunk c + 1
** computes. Each warp's arithmetic is gdn_scan's. Against gdn_scan (a CTA per 64 columns, two an SM, loads
** waited for): the same 8 warps an SM, K, Q, W and M staged once for the head instead of once per tile, and
** the load latency hidden without losing warps (the pipelined 4-warp scans lost their second CTA an SM).
** Each warp forms the chunk's decays itself (its g row in the buffer) and writes its O columns out through
** its own staging tile: two barriers a chunk, no more. Each warp's products are the library's
** (gdn_warp_vo, gdn_warp_state). Shared memory: 2 stages x 79 KB + 28 KB (dk 128). */
template <int DK, int NW, int NS = 2>
__device__ __forceinline__ void gdn_scan_h(void *o, int dto, const unsigned short *q, const unsigned short *k,
                                           const unsigned short *wi, const unsigned short *ui,
                                           const unsigned short *mi, const float *g, ll R, int S, int Hv, int Hk,
                                           int dv) {
  constexpr int BV = 16 * NW, SK = DK + 8, SV = BV + 8, SM = HY_C + 8, NT = DK / 8, SO = 24;
  constexpr int STAGE = (3 * HY_C * SK + HY_C * SM + HY_C * SV) * 2 + HY_C * 4; /* bytes */
  extern __shared__ __align__(16) unsigned char hy_sm[];
  const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g4 = lane >> 2, t4 = lane & 3;
  const int nvt = dv / BV, vt = blockIdx.x % nvt, h = (blockIdx.x / nvt) % Hv, kh = h / (Hv / Hk);
  const ll r0 = (ll)(blockIdx.x / nvt / Hv) * S, r1 = r0 + S < R ? r0 + S : R;
  const int nch = (int)((r1 - r0 + HY_C - 1) / HY_C);
  unsigned short *Os = (unsigned short *)(hy_sm + NS * STAGE) + w * HY_C * SO; /* this warp's O tile [64][16] */
  float *eg = (float *)(hy_sm + NS * STAGE + NW * HY_C * SO * 2) + w * 2 * HY_C, *ed = eg + HY_C;
  const int cv = 16 * w;
  auto load = [&](int st, ll c0) {
    unsigned char *b = hy_sm + st * STAGE;
    unsigned short *Ks = (unsigned short *)b, *Qs = Ks + HY_C * SK, *Ws = Qs + HY_C * SK, *Ms = Ws + HY_C * SK;
    unsigned short *Us = Ms + HY_C * SM;
    float *gs = (float *)(Us + HY_C * SV);
    const int n = r1 - c0 < HY_C ? (int)(r1 - c0) : HY_C;
    gdn_scan_load<DK, BV>(Ks, Qs, Ws, Ms, Us, q, k, wi, ui, mi, c0, n, h, kh, Hv, Hk, dv, vt);
    if (tid < HY_C) { /* g's column for this head: 4-byte copies, 0 past the sequence */
      const int ok = tid < n;
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(tc_saddr(gs + tid)),
                   "l"(g + (c0 + (ok ? tid : 0)) * Hv + h), "r"(ok ? 4 : 0) : "memory");
    }
  };
  float st[NT][4];
#pragma unroll
  for (int j = 0; j < NT; j++) st[j][0] = st[j][1] = st[j][2] = st[j][3] = 0.f;
  load(0, r0);
  tc_commit();
  if (NS == 2 && nch > 1) load(1, r0 + HY_C);
  if (NS == 2) tc_commit();
  for (int ci = 0; ci < nch; ci++) {
    const ll c0 = r0 + (ll)ci * HY_C;
    const int n = r1 - c0 < HY_C ? (int)(r1 - c0) : HY_C;
    unsigned char *b = hy_sm + (NS == 2 ? ci & 1 : 0) * STAGE;
    const unsigned short *Ks = (const unsigned short *)b, *Qs = Ks + HY_C * SK, *Ws = Qs + HY_C * SK;
    const unsigned short *Ms = Ws + HY_C * SK, *Us = Ms + HY_C * SM;
    const float *gs = (const float *)(Us + HY_C * SV);
    if (NS == 2) tc_wait<1>(); /* this chunk's group; the next one's may still be in flight */
    else tc_wait<0>();
    __syncthreads();
    {
      float x0 = gs[lane], x1 = gs[lane + 32];
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const float y0 = __shfl_up_sync(0xffffffffu, x0, d), y1 = __shfl_up_sync(0xffffffffu, x1, d);
        if (lane >= d) x0 += y0, x1 += y1;
      }
      x1 += __shfl_sync(0xffffffffu, x0, 31);
      const float gl = __shfl_sync(0xffffffffu, x1, 31);
      eg[lane] = expf(x0), eg[lane + 32] = expf(x1);
      ed[lane] = expf(gl - x0), ed[lane + 32] = expf(gl - x1);
      __syncwarp();
    }
    float va[8][4], oa[8][4]; /* Vn^T and O^T: the library's per-warp arithmetic (kernels/hybrid.cuh) */
    gdn_warp_vo<DK, SV>(va, oa, st, Us, cv, Qs, Ws, Ms, eg);
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) Os[(8 * j + 2 * t4 + (e & 1)) * SO + g4 + 8 * (e >> 1)] = dfl_f2bf(oa[j][e]);
    __syncwarp();
    for (int i = lane; i < 2 * n; i += 32) { /* the warp's 16 columns of each row: two 16-byte pieces */
      const int r = i >> 1, c = (i & 1) * 8;
      const ll base = ((c0 + r) * Hv + h) * dv + vt * BV + cv + c;
      if (dto == DT_BF16) *(uint4 *)((unsigned short *)o + base) = *(const uint4 *)(Os + r * SO + c);
      else
        for (int e = 0; e < 8; e++) stf(o, dto, base + e, dfl_bf2f(Os[r * SO + c + e]));
    }
    gdn_warp_state<DK>(st, va, Ks, eg, ed);
    __syncthreads(); /* every warp done with this buffer: chunk ci + 2 goes into it */
    if (ci + NS < nch) load(NS == 2 ? ci & 1 : 0, c0 + NS * HY_C);
    tc_commit(); /* empty at the end: one group an iteration keeps wait<1> counting right */
  }
}
template <int NW, int NS>
__global__ void __launch_bounds__(256, 1) scan_h(void *o, int dto, const unsigned short *q, const unsigned short *k,
                                               const unsigned short *wi, const unsigned short *ui,
                                               const unsigned short *mi, const float *g, ll R, int S, int Hv, int Hk,
                                               int dv) {
  gdn_scan_h<128, NW, NS>(o, dto, q, k, wi, ui, mi, g, R, S, Hv, Hk, dv);
}

template <int B>
__global__ void __launch_bounds__(128) prep_bal(unsigned short *wo, unsigned short *uo, unsigned short *mo,
                                                 const unsigned short *q, const unsigned short *k,
                                                 const unsigned short *v, const float *g, const float *beta, ll R,
                                                 int S, int Hv, int Hk) {
  gdn_prep<128, 128, B>(wo, uo, mo, q, k, v, g, beta, R, S, Hv, Hk);
}
/* deterministic values on the device: a hash of the index */
__device__ __forceinline__ float hrand(unsigned long long i, unsigned salt) {
  unsigned x = (unsigned)(i * 2654435761ull) ^ (unsigned)(i >> 32) ^ salt;
  x ^= x >> 16, x *= 0x7feb352du, x ^= x >> 15, x *= 0x846ca68bu, x ^= x >> 16;
  return (x >> 8) * (1.f / 16777216.f);
}
/* rows of d values, each scaled to unit length (q and k) or not (v) */
__global__ void init_rows(unsigned short *x, ll rows, int d, unsigned salt, int unit) {
  for (ll r = (ll)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += (ll)gridDim.x * blockDim.x) {
    float ss = 0.f;
    for (int c = 0; c < d; c++) { const float v = hrand(r * d + c, salt) - 0.5f; ss += v * v; }
    const float sc = unit ? rsqrtf(ss) : 1.f;
    for (int c = 0; c < d; c++) x[r * d + c] = dfl_f2bf((hrand(r * d + c, salt) - 0.5f) * sc);
  }
}
__global__ void init_gb(float *g, float *beta, ll n) {
  for (ll i = (ll)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (ll)gridDim.x * blockDim.x)
    g[i] = -0.001f - hrand(i, 7u) * 0.999f, beta[i] = 0.02f + 0.96f * hrand(i, 9u);
}


static const ll R = 12 * 4096;
static const int S = 4096, Hk = 16, Hv = 48, DK = 128, DV = 128;

/* the whole-head scan with NS stages: timed, o against the library scan's */
template <int NS>
static void run_h(const char *name, std::vector<unsigned short> &ref, std::vector<unsigned short> &h, double sbytes,
                  unsigned short *o, const unsigned short *q, const unsigned short *k, const unsigned short *w,
                  const unsigned short *u, const unsigned short *m, const float *g) {
  const int stage = (3 * HY_C * (DK + 8) + HY_C * (HY_C + 8) + HY_C * (128 + 8)) * 2 + HY_C * 4;
  const int ss = NS * stage + 8 * (HY_C * 24 * 2 + 2 * HY_C * 4);
  auto kf = scan_h<8, NS>;
  CK(cudaFuncSetAttribute((const void *)kf, cudaFuncAttributeMaxDynamicSharedMemorySize, ss));
  bench_fill f = bench_grid((const void *)kf, 256, ss, LLONG_MAX);
  f.grid = R / S * Hv * (DV / 128);
  CK(cudaMemset(o, 0, h.size() * 2));
  const double t = bench_median_ms([&] { kf<<<(unsigned)f.grid, 256, ss>>>(o, DT_BF16, q, k, w, u, m, g, R, S, Hv, Hk, DV); });
  CK(cudaMemcpy(h.data(), o, h.size() * 2, cudaMemcpyDeviceToHost));
  bench_report(name, f, t, sbytes, bench_differ(h, &ref));
}

int main() {
  unsigned short *q, *k, *v, *w, *u, *m, *o;
  float *g, *beta;
  const size_t nqk = (size_t)R * Hk * DK, nv = (size_t)R * Hv * DV;
  CK(cudaMalloc(&q, nqk * 2)); CK(cudaMalloc(&k, nqk * 2)); CK(cudaMalloc(&v, nv * 2)); CK(cudaMalloc(&o, nv * 2));
  CK(cudaMalloc(&w, (size_t)R * Hv * DK * 2)); CK(cudaMalloc(&u, nv * 2)); CK(cudaMalloc(&m, (size_t)R * Hv * HY_C * 2));
  CK(cudaMalloc(&g, (size_t)R * Hv * 4)); CK(cudaMalloc(&beta, (size_t)R * Hv * 4));
  init_rows<<<1024, 256>>>(q, R * Hk, DK, 1u, 1);
  init_rows<<<1024, 256>>>(k, R * Hk, DK, 2u, 1);
  init_rows<<<1024, 256>>>(v, R * Hv, DV, 3u, 0);
  init_gb<<<1024, 256>>>(g, beta, R * Hv);
  CK(cudaGetLastError());
  const ll nseq = R / S, cps = S / HY_C;
  /* the library's prep */
  const int sp = HY_C * (DK + 8) * 2 + 2 * HY_C * (HY_C + 8) * 2 + std::max(HY_C * (HY_C + 4) * 4, HY_C * (DV + 8) * 2) + 3 * HY_C * 4;
  CK(cudaFuncSetAttribute((const void *)dfl_gdn_prep_k128, cudaFuncAttributeMaxDynamicSharedMemorySize, sp));
  bench_fill fp = bench_grid((const void *)dfl_gdn_prep_k128, 128, sp, LLONG_MAX);
  fp.grid = nseq * cps * Hv;
  const double tp = bench_median_ms([&] { dfl_gdn_prep_k128<<<(unsigned)fp.grid, 128, sp>>>(w, u, m, q, k, v, g, beta, R, S, Hv, Hk); });
  bench_report("prep (library)", fp, tp, 2.0 * nqk * 2 + nv * 2 + (double)R * Hv * 4 * 2 + (double)R * Hv * (DK + DV + HY_C) * 2, 0);
  { /* the prep with the triangles' work spread evenly over the warps (1: W and U, 2: A and M, 3: both): W, U
    ** and M against the library's */
    unsigned short *w2, *u2, *m2;
    const size_t nw = (size_t)R * Hv * DK, nm = (size_t)R * Hv * HY_C;
    CK(cudaMalloc(&w2, nw * 2)); CK(cudaMalloc(&u2, nv * 2)); CK(cudaMalloc(&m2, nm * 2));
    std::vector<unsigned short> a(nw + nv + nm), b;
    CK(cudaMemcpy(a.data(), w, nw * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(a.data() + nw, u, nv * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(a.data() + nw + nv, m, nm * 2, cudaMemcpyDeviceToHost));
    const double pbytes = 2.0 * nqk * 2 + nv * 2 + (double)R * Hv * 4 * 2 + (double)R * Hv * (DK + DV + HY_C) * 2;
    auto one = [&](const char *name, auto kf) {
      CK(cudaFuncSetAttribute((const void *)kf, cudaFuncAttributeMaxDynamicSharedMemorySize, sp));
      bench_fill fb = bench_grid((const void *)kf, 128, sp, LLONG_MAX);
      fb.grid = nseq * cps * Hv;
      CK(cudaMemset(w2, 0xff, nw * 2)); CK(cudaMemset(u2, 0xff, nv * 2)); CK(cudaMemset(m2, 0xff, nm * 2));
      const double tb = bench_median_ms([&] { kf<<<(unsigned)fb.grid, 128, sp>>>(w2, u2, m2, q, k, v, g, beta, R, S, Hv, Hk); });
      b = a;
      CK(cudaMemcpy(b.data(), w2, nw * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(b.data() + nw, u2, nv * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(b.data() + nw + nv, m2, nm * 2, cudaMemcpyDeviceToHost));
      bench_report(name, fb, tb, pbytes, bench_differ(b, &a));
    };
    one("prep, W and U balanced", prep_bal<1>);
    one("prep, A and M balanced", prep_bal<2>);
    one("prep, both balanced", prep_bal<3>);
    CK(cudaFree(w2)); CK(cudaFree(u2)); CK(cudaFree(m2));
  }
  std::vector<unsigned short> ref, h(nv);
  const double sbytes = 2.0 * nqk * 2 + (double)R * Hv * (DK + DV + HY_C) * 2 + (double)R * Hv * 4 + nv * 2;
  { /* the library's scan: a CTA per 64 value columns, two an SM */
    const int ss = 3 * HY_C * (DK + 8) * 2 + HY_C * (HY_C + 8) * 2 + HY_C * (64 + 8) * 2 + 3 * HY_C * 4;
    CK(cudaFuncSetAttribute((const void *)dfl_gdn_scan_k128, cudaFuncAttributeMaxDynamicSharedMemorySize, ss));
    bench_fill f = bench_grid((const void *)dfl_gdn_scan_k128, 128, ss, LLONG_MAX);
    f.grid = nseq * Hv * (DV / 64);
    const double t = bench_median_ms([&] { dfl_gdn_scan_k128<<<(unsigned)f.grid, 128, ss>>>(o, DT_BF16, q, k, w, u, m, g, R, S, Hv, Hk, DV); });
    CK(cudaMemcpy(h.data(), o, nv * 2, cudaMemcpyDeviceToHost));
    bench_report("scan (library)", f, t, sbytes, bench_differ(h, &ref));
    size_t bad = 0;
    for (size_t i = 0; i < h.size(); i++) bad += (h[i] & 0x7f80) == 0x7f80;
    printf("  library o: %zu non-finite of %zu\n", bad, h.size());
  }
  run_h<2>("scan, a head a CTA, 2 stages", ref, h, sbytes, o, q, k, w, u, m, g);
  run_h<1>("scan, a head a CTA, 1 stage", ref, h, sbytes, o, q, k, w, u, m, g);
  return 0;
}
