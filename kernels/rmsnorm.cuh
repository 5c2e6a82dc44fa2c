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
                                           int dtw, const float *rstd, const void *dy, int dtdy, const void *ad,
                                           int dtad, ll ngroups, int G) {
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
      float o = r * (d * ldf(w, dtw, i) - xh * dot);
      stf(dx, dtdx, base + i, ad ? o + ldf(ad, dtad, base + i) : o); /* ad: the addend (dfl_fuse_add) */
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < G; i += blockDim.x) atomicAdd(&dw[i], sdw[i]);
}

/*
** Vector path (runtime/cuda.c picks it when G % 8 == 0, G / 8 is a power of two <= 32 or a multiple
** of 32 <= 1024, every pointer is 16-byte aligned and the dtypes are bf16/f16/f32): a group is
** L = G / 8 threads, each holding 8 consecutive features in registers, so x and dy are read once
** with 16-byte loads (the warp-per-group kernels above read 2 bytes per lane, twice). The block
** (blockDim.x = a multiple of L) covers blockDim.x / L groups per pass, grid-stride over groups.
*/
/* Sum over the L threads of a group: a sub-warp shuffle (L <= 32), or shared memory (L % 32 == 0;
** then the block is one group wide). Every thread of the block must call it (barriers). */
__device__ __forceinline__ float rms_group_sum(float v, int L, float *red) {
  if (L <= 32) {
    for (int o = L >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
  }
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) red[w] = v;
  __syncthreads();
  float s = 0.f;
  for (int k = 0; k < nw; k++) s += red[k]; /* fixed order */
  return s;
}
extern "C" __global__ void __launch_bounds__(1024) dfl_rmsnorm_v(void *y, int dty, float *rstd, const void *x,
                                                                 int dtx, const void *w, int dtw, ll ngroups, int G,
                                                                 float eps) {
  __shared__ float red[32];
  int L = G / 8, per = blockDim.x / L, sub = threadIdx.x / L, f = (threadIdx.x % L) * 8;
  float wv[8];
  ld8(w, dtw, f, wv);
  /* the pass count is uniform over the block (barriers inside rms_group_sum) */
  for (ll g0 = (ll)blockIdx.x * per; g0 < ngroups; g0 += (ll)gridDim.x * per) {
    ll gi = g0 + sub;
    int ok = gi < ngroups;
    float v[8], ss = 0.f;
    if (ok) ld8(x, dtx, gi * G + f, v);
    else for (int k = 0; k < 8; k++) v[k] = 0.f;
#pragma unroll
    for (int k = 0; k < 8; k++) ss += v[k] * v[k];
    ss = rms_group_sum(ss, L, red);
    float r = rsqrtf(ss / G + eps);
    if (ok) {
      if (f == 0) rstd[gi] = r;
#pragma unroll
      for (int k = 0; k < 8; k++) v[k] = v[k] * r * wv[k];
      st8(y, dty, gi * G + f, v);
    }
  }
}
/* dx as dfl_rmsnorm_bwd; dw: each thread sums dy xh of its 8 features over the groups it visits,
** the block adds its sub-groups in a fixed order and writes part[blockIdx.x][G] (no atomics:
** deterministic); dfl_rmsnorm_dw adds the gridDim.x partial rows in order. */
/* At most 48 registers (64 unbounded): two blocks of a 5120-feature row's 640 threads per SM instead
** of one. */
extern "C" __global__ void __maxnreg__(48) dfl_rmsnorm_bwd_v(void *dx, int dtdx, float *part, const void *x,
                                                                     int dtx, const void *w, int dtw,
                                                                     const float *rstd, const void *dy, int dtdy,
                                                                     const void *ad, int dtad, ll ngroups, int G) {
  __shared__ float red[32];
  extern __shared__ float sdw[]; /* [blockDim.x / L][G] */
  int L = G / 8, per = blockDim.x / L, sub = threadIdx.x / L, f = (threadIdx.x % L) * 8;
  float wv[8], dwp[8];
  ld8(w, dtw, f, wv);
#pragma unroll
  for (int k = 0; k < 8; k++) dwp[k] = 0.f;
  for (ll g0 = (ll)blockIdx.x * per; g0 < ngroups; g0 += (ll)gridDim.x * per) {
    ll gi = g0 + sub;
    int ok = gi < ngroups;
    float xv[8], d[8], dot = 0.f, r = 0.f;
    if (ok) {
      r = rstd[gi];
      ld8(x, dtx, gi * G + f, xv);
      ld8(dy, dtdy, gi * G + f, d);
    } else {
      for (int k = 0; k < 8; k++) xv[k] = d[k] = 0.f;
    }
#pragma unroll
    for (int k = 0; k < 8; k++) {
      xv[k] *= r; /* xh */
      dot += d[k] * wv[k] * xv[k];
      dwp[k] += d[k] * xv[k];
    }
    dot = rms_group_sum(dot, L, red) / G;
    if (ok) {
      float o[8];
#pragma unroll
      for (int k = 0; k < 8; k++) o[k] = r * (d[k] * wv[k] - xv[k] * dot);
      if (ad) { /* the addend (dfl_fuse_add): dx = r + the norm's dx, rounded once */
        float av[8];
        ld8(ad, dtad, gi * G + f, av);
#pragma unroll
        for (int k = 0; k < 8; k++) o[k] += av[k];
      }
      st8(dx, dtdx, gi * G + f, o);
    }
  }
#pragma unroll
  for (int k = 0; k < 8; k++) sdw[sub * G + f + k] = dwp[k];
  __syncthreads();
  for (int i = threadIdx.x; i < G; i += blockDim.x) {
    float s = 0.f;
    for (int q = 0; q < per; q++) s += sdw[q * G + i];
    part[(ll)blockIdx.x * G + i] = s;
  }
}
/* dw[i] = sum over the np partial rows in a fixed order: a block of 8 x 32 threads per 32 features,
** thread (r, l) adds rows r, r + 8, ... of feature 32 blockIdx.x + l, then the 8 sums in order (one
** thread per feature walking all np rows left a 128-feature norm's sum to 128 threads). */
extern "C" __global__ void dfl_rmsnorm_dw(void *dw, int dtdw, const float *part, int np, int G) {
  __shared__ float red[8][33];
  const int l = threadIdx.x & 31, r = threadIdx.x >> 5, i = blockIdx.x * 32 + l;
  float s = 0.f;
  if (i < G)
    for (int b = r; b < np; b += 8) s += part[(ll)b * G + i];
  red[r][l] = s;
  __syncthreads();
  if (r == 0 && i < G) {
    float t = 0.f;
#pragma unroll
    for (int k = 0; k < 8; k++) t += red[k][l];
    stf(dw, dtdw, i, t);
  }
}

/* RMSNORM's quantized form (dfl_fuse_quant; G is the row): one block per row of C =
** 8 * NCH * blockDim.x features, the row held in registers (common.cuh rowq_store). One read of the
** inputs, one byte written per feature; y is never stored. */
template <int NCH>
__device__ __forceinline__ void rmsnorm_q(unsigned char *q, float *s, float *rstd, const void *x, int dtx,
                                          const void *w, int dtw, int C, float eps, int mid) {
  const ll row = blockIdx.x;
  float y[NCH][8], wv[8], ss = 0.f;
#pragma unroll
  for (int c = 0; c < NCH; c++) {
    ld8(x, dtx, row * C + (c * blockDim.x + threadIdx.x) * 8, y[c]);
#pragma unroll
    for (int k = 0; k < 8; k++) ss += y[c][k] * y[c][k];
  }
  const float r = rsqrtf(block_sum(ss) / C + eps);
  if (threadIdx.x == 0) rstd[row] = r;
#pragma unroll
  for (int c = 0; c < NCH; c++) {
    ld8(w, dtw, (c * blockDim.x + threadIdx.x) * 8, wv);
#pragma unroll
    for (int k = 0; k < 8; k++) y[c][k] = y[c][k] * r * wv[k];
  }
  rowq_store<NCH>(q, s, row, C, y, mid);
}
#define DFL_RMSNORM_Q(N)                                                                                            \
  extern "C" __global__ void __launch_bounds__(1024) dfl_rmsnorm_q##N(unsigned char *q, float *s, float *rstd,     \
                                                                      const void *x, int dtx, const void *w,       \
                                                                      int dtw, int C, float eps, int mid) {        \
    rmsnorm_q<N>(q, s, rstd, x, dtx, w, dtw, C, eps, mid);                                                          \
  }
DFL_RMSNORM_Q(2)
DFL_RMSNORM_Q(4)
