/*
** bench_kernel.cuh: what the nvcc-built kernel benches (bench_rope.cu, bench_conv.cu) share: a CUDA check,
** one variant's timing (median of 20 launches after 3, CUDA events) and its output against the first
** variant's, bit for bit.
*/
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)

/* kernel kfn's occupancy at `block` threads and smem bytes, and the grid that fills it (at most want) */
struct bench_fill { int occ, regs, spill; long long grid; };
static bench_fill bench_grid(const void *kfn, int block, int smem, long long want) {
  int occ = 0, sms = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kfn, block, smem));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaFuncAttributes fa;
  CK(cudaFuncGetAttributes(&fa, kfn));
  return {occ, fa.numRegs, (int)fa.localSizeBytes, std::min<long long>(want, (long long)occ * sms)};
}

/* the median time of launch() in ms */
template <typename F> static double bench_median_ms(F launch) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int it = 0; it < 23; it++) {
    CK(cudaEventRecord(e0));
    launch();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    float t;
    CK(cudaEventElapsedTime(&t, e0, e1));
    if (it >= 3) ms.push_back(t);
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

/* how many of h differ from *ref (the first variant's output, which the first call keeps) */
static size_t bench_differ(const std::vector<unsigned short> &h, std::vector<unsigned short> *ref) {
  if (ref->empty()) { *ref = h; return 0; }
  size_t d = 0;
  for (size_t i = 0; i < h.size(); i++) d += h[i] != (*ref)[i];
  return d;
}

static void bench_report(const char *name, const bench_fill &f, double ms, double bytes, size_t diff) {
  printf("%-28s regs %3d spill %4d B  occ %d/SM grid %6lld  %.3f ms  %.0f GB/s  %zu values differ\n", name, f.regs,
         f.spill, f.occ, f.grid, ms, bytes / ms * 1e-6, diff);
}
