/*
** rmsnorm.cuh: RMSNORM and RMSNORM_BWD over groups of G consecutive features (G = D: a
** row norm; G = head_dim: the per-head q/k norm). One warp per group; f32 statistics.
*/
extern "C" __global__ void dfl_rmsnorm(void *y, int dty, float *rstd, const void *x, int dtx, const void *w,
                                       int dtw, ll ngroups, int G, float eps) {
  int lane = threadIdx.x & 31;
  ll warp = ((ll)blockIdx.x * blockDim.x + threadIdx.x) >> 5, nwarps = ((ll)gridDim.x * blockDim.x) >> 5;
  for (ll gi = warp; gi < ngroups; gi += nwarps) {
    ll base = gi * G;
    float ss = 0.f;
    for (int i = lane; i < G; i += 32) { float v = ldf(x, dtx, base + i); ss += v * v; }
    ss = warp_sum(ss);
    float r = rsqrtf(ss / G + eps);
    if (lane == 0) rstd[gi] = r;
    for (int i = lane; i < G; i += 32) stf(y, dty, base + i, ldf(x, dtx, base + i) * r * ldf(w, dtw, i));
  }
}
/* dx = r (g - xh mean(g xh)), g = dy w, xh = x r; dw[i] = sum over groups of dy xh, summed per
** block in shared memory (dynamic, G floats) and then atomically into the f32 dw accumulator. */
extern "C" __global__ void dfl_rmsnorm_bwd(void *dx, int dtdx, float *dw, const void *x, int dtx, const void *w,
                                           int dtw, const float *rstd, const void *dy, int dtdy, ll ngroups,
                                           int G) {
  extern __shared__ float sdw[];
  for (int i = threadIdx.x; i < G; i += blockDim.x) sdw[i] = 0.f;
  __syncthreads();
  int lane = threadIdx.x & 31;
  ll warp = ((ll)blockIdx.x * blockDim.x + threadIdx.x) >> 5, nwarps = ((ll)gridDim.x * blockDim.x) >> 5;
  for (ll gi = warp; gi < ngroups; gi += nwarps) {
    ll base = gi * G;
    float r = rstd[gi], dot = 0.f;
    for (int i = lane; i < G; i += 32) {
      float xh = ldf(x, dtx, base + i) * r, d = ldf(dy, dtdy, base + i);
      dot += d * ldf(w, dtw, i) * xh;
      atomicAdd(&sdw[i], d * xh);
    }
    dot = warp_sum(dot) / G;
    for (int i = lane; i < G; i += 32) {
      float xh = ldf(x, dtx, base + i) * r, d = ldf(dy, dtdy, base + i);
      stf(dx, dtdx, base + i, r * (d * ldf(w, dtw, i) - xh * dot));
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < G; i += blockDim.x) atomicAdd(&dw[i], sdw[i]);
}
