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
/* dx = r (g - xh mean(g xh)), g = dy w, xh = x r; dw[i] = sum over groups of dy xh. The general path
** (any G and dtypes; the vector and row kernels below take the usual shapes): a block per group at a
** time (groups blockIdx.x, + gridDim.x, ...), each thread owning features threadIdx.x + k blockDim.x,
** so its sums of dy xh go to part[blockIdx.x] in group order, and dfl_rmsnorm_dw adds the gridDim.x
** rows in order: no atomics, the same bits every run (shared-memory atomics, before, were not). */
extern "C" __global__ void dfl_rmsnorm_bwd(void *dx, int dtdx, float *part, const void *x, int dtx, const void *w,
                                           int dtw, const float *rstd, const void *dy, int dtdy, const void *ad,
                                           int dtad, ll ngroups, int G) {
  float *pr = part + (ll)blockIdx.x * G;
  for (ll gi = blockIdx.x; gi < ngroups; gi += gridDim.x) {
    const ll base = gi * G;
    const float r = rstd[gi];
    float dot = 0.f;
    for (int i = threadIdx.x; i < G; i += blockDim.x) {
      float xh = ldf(x, dtx, base + i) * r, d = ldf(dy, dtdy, base + i);
      dot += d * ldf(w, dtw, i) * xh;
      pr[i] = (gi == blockIdx.x ? 0.f : pr[i]) + d * xh;
    }
    dot = block_sum(dot) / G;
    for (int i = threadIdx.x; i < G; i += blockDim.x) {
      float xh = ldf(x, dtx, base + i) * r, d = ldf(dy, dtdy, base + i);
      float o = r * (d * ldf(w, dtw, i) - xh * dot);
      stf(dx, dtdx, base + i, ad ? o + ldf(ad, dtad, base + i) : o); /* ad: the addend (dfl_fuse_add) */
    }
  }
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
/* dw[i] = sum over the np partial rows in a fixed order: a block of 32 x 32 threads per 32 features,
** thread (r, l) adds rows r, r + 32, ... of feature 32 blockIdx.x + l (unrolled: its loads in flight
** together), then the 32 sums in order. (8 x 32 threads with 4 loads in flight left a 128-feature norm's
** 512 rows to 4 latency-bound blocks.) */
extern "C" __global__ void __launch_bounds__(1024) dfl_rmsnorm_dw(void *dw, int dtdw, const float *part, int np, int G) {
  __shared__ float red[32][33];
  const int l = threadIdx.x & 31, r = threadIdx.x >> 5, i = blockIdx.x * 32 + l;
  float s = 0.f;
  if (i < G) {
#pragma unroll 16
    for (int b = r; b < np; b += 32) s += part[(ll)b * G + i];
  }
  red[r][l] = s;
  __syncthreads();
  if (r == 0 && i < G) {
    float t = 0.f;
#pragma unroll
    for (int k = 0; k < 32; k++) t += red[k][l];
    stf(dw, dtdw, i, t);
  }
}

/* Row form, pipelined (session 17; runtime/cuda.c takes it for bf16 x, w, dy (and the addend) when the
** groups are whole rows of C = 512 V features, C <= 8192, or G = 8 L features with L a power of two <= 32
** (the q/k head norms; the kernel then takes the tensor in rows of C = 4096 .. 512, the largest that
** divides it); other groups dfl_rmsnorm_bwd_v). A block of NT = C / 16 threads walks rows,
** each thread owning 2 16-byte vectors of a row, features (NT j + t) 8 ..+8. Rows arrive by cp.async in
** two shared-memory stages: the next row's x, dy (and addend) are in flight while this one is reduced
** and stored, and no registers hold them. A thread reads back only the bytes it copied, so waiting for
** its own copies is enough (no barrier for the stages). A group G < C is L lanes of a warp (a shuffle);
** G = C is the block (one barrier a row, the warp sums double-buffered by row parity). dw: a thread owns
** the same features of w in every row (G = C: its 2 vectors; G < C: one, t mod L, for every j); its
** partial sums stay in registers and go to part[p] at the end of part p (below), for G < C after a
** fixed-order sum over the block's threads that share them. No atomics: the same bits every run. Values
** as dfl_rmsnorm_bwd_v's; the f32 sums in another order.
** bench_memops (8B drafter, us; a copy of the same bytes 66.0 / 50.3 / 83.8 / 52.6 / 17.1): whole rows
** with the addend, without, the 27B's with, q and k head norms: session 12's block a row (loads issued
** after the previous row's stores, the addend's after the barrier) 91.7 / 61.5 / 110.7 / 75.0 (bwd_v) /
** 26.7; this kernel 78.2 / 65.3 / 108.9 / 62.6 / 23.5 (87.7 / 65.6 / 109.1 / 62.8 / 23.9 with the dw
** sums in static shared memory, whole rows too: fewer blocks an SM). Measured and not kept: the next row in registers
** (4 vectors a thread, 165-196 registers: 3 warps a scheduler) 79.4 / 71.1 / 104.9 / 76.4 / 26.3; 4
** vectors a thread here 98.2 / 68.9 / 123.0 / 65.0 / 24.9; three stages 92.0 / 63.6 / 100.6 / 73.3 / 26.7. */
#define RBP_V 2
/* dw partial sums of part p to part[p]; zeroes them. Every thread of the block calls it. */
__device__ __forceinline__ void rbp_flush(float (&dwp)[RBP_V][8], float4 *sdw, float *part, int p, bool whole, int G) {
  const int t = threadIdx.x, NT = blockDim.x, L = G / 8;
  float *pr = part + (ll)p * G;
  if (whole) {
#pragma unroll
    for (int j = 0; j < RBP_V; j++) {
      float4 *q = (float4 *)(pr + (j * NT + t) * 8);
      q[0] = make_float4(dwp[j][0], dwp[j][1], dwp[j][2], dwp[j][3]);
      q[1] = make_float4(dwp[j][4], dwp[j][5], dwp[j][6], dwp[j][7]);
    }
  } else {
    sdw[2 * t] = make_float4(dwp[0][0], dwp[0][1], dwp[0][2], dwp[0][3]);
    sdw[2 * t + 1] = make_float4(dwp[0][4], dwp[0][5], dwp[0][6], dwp[0][7]);
    __syncthreads();
    const float *sf = (const float *)sdw;
    for (int i = t; i < G; i += NT) {   /* feature i: threads q L + i / 8, q = 0 .. NT / L - 1, in order */
      float s = 0.f;
      for (int q = 0; q < NT / L; q++) s += sf[(q * L + i / 8) * 8 + i % 8];
      pr[i] = s;
    }
    __syncthreads();   /* sdw is written again at the next flush */
  }
#pragma unroll
  for (int j = 0; j < RBP_V; j++)
#pragma unroll
    for (int k = 0; k < 8; k++) dwp[j][k] = 0.f;
}
/* The row after `row` in the block's sequence: rows in np parts (np = min(rows, DFL_RMS_PARTS, what 128
** SMs hold of these blocks): runtime/cuda.c), part p is rows p, p + np, ..., block b taking parts b,
** b + gridDim.x, ... in turn, so the partial rows (and the sums' order) do not depend on the grid, that
** is on the device's SMs. */
__device__ __forceinline__ void rbp_next(int p, ll row, ll nrows, int np, int &pn, ll &rn) {
  rn = row + np;
  pn = p;
  if (rn >= nrows) pn = p + gridDim.x, rn = pn;
}
/* Stage s of array a (x, dy, the addend: NA of them), this thread's vector j: consecutive threads,
** consecutive 16 bytes. */
#define RBP_SLOT(stg, s, a, j) ((stg) + (((s) * (AD ? 3 : 2) + (a)) * RBP_V + (j)) * blockDim.x + threadIdx.x)
template <bool AD>
__device__ __forceinline__ void rbp_issue(uint4 *stg, int s, const void *x, const void *dy, const void *ad, ll row,
                                          int C, bool ok) {
  if (ok) {
    const ll o = row * C;
#pragma unroll
    for (int j = 0; j < RBP_V; j++) {
      const ll e = o + (ll)(j * blockDim.x + threadIdx.x) * 8;
      tc_cp16(RBP_SLOT(stg, s, 0, j), (const unsigned short *)x + e, 1);
      tc_cp16(RBP_SLOT(stg, s, 1, j), (const unsigned short *)dy + e, 1);
      if (AD) tc_cp16(RBP_SLOT(stg, s, 2, j), (const unsigned short *)ad + e, 1);
    }
  }
  tc_commit();   /* an empty group when !ok: one group per row slot, so wait<1> is this row's */
}
__device__ __forceinline__ void rbp_rstd(float (&r)[RBP_V], const float *rstd, ll row, int C, int G, bool ok) {
#pragma unroll
  for (int j = 0; j < RBP_V; j++)
    r[j] = !ok ? 0.f : G == C ? (j == 0 ? rstd[row] : 0.f)
                     : rstd[(row * C + (ll)(j * blockDim.x + threadIdx.x) * 8) / G];
}
template <bool AD>
__device__ __forceinline__ void rmsnorm_bwd_p(void *dx, float *part, const void *x, const void *w, const float *rstd,
                                              const void *dy, const void *ad, ll nrows, int np, int C, int G) {
  /* [2 stages][x, dy (, addend)][RBP_V][NT] (128 (192) NT bytes), then for G < C the block's dw
  ** partial sums, 8 a thread (32 NT bytes) */
  extern __shared__ uint4 stg[];
  __shared__ float red[2][16];
  const int t = threadIdx.x, NT = blockDim.x, nw = NT >> 5, L = G / 8;
  float4 *sdw = (float4 *)(stg + 2 * (AD ? 3 : 2) * RBP_V * NT);
  const bool whole = G == C;
  const uint4 *wr = (const uint4 *)w + (whole ? t : t % L);   /* read per row (L1) */
  float dwp[RBP_V][8];
#pragma unroll
  for (int j = 0; j < RBP_V; j++)
#pragma unroll
    for (int k = 0; k < 8; k++) dwp[j][k] = 0.f;
  int p = blockIdx.x, p1;
  ll row = p, row1;
  rbp_next(p, row, nrows, np, p1, row1);
  rbp_issue<AD>(stg, 0, x, dy, ad, row, C, p < np);
  rbp_issue<AD>(stg, 1, x, dy, ad, row1, C, p1 < np);
  float rv[RBP_V];
  rbp_rstd(rv, rstd, row, C, G, p < np);
  for (int s = 0, par = 0; p < np; s ^= 1, par ^= 1) {
    float rn[RBP_V];
    rbp_rstd(rn, rstd, row1, C, G, p1 < np);   /* the next row's, in flight through this one */
    tc_wait<1>();   /* this row's copies (this thread's own) have landed */
    float dot[RBP_V];
#pragma unroll
    for (int j = 0; j < RBP_V; j++) {
      const float r = whole ? rv[0] : rv[j];
      float xf[8], df[8], wf[8];
      dfl_bf8(*RBP_SLOT(stg, s, 0, j), xf);
      dfl_bf8(*RBP_SLOT(stg, s, 1, j), df);
      dfl_bf8(__ldg(wr + (whole ? j * NT : 0)), wf);
      dot[j] = 0.f;
#pragma unroll
      for (int k = 0; k < 8; k++) {
        const float xh = xf[k] * r;
        dot[j] += df[k] * wf[k] * xh;
        if (whole) dwp[j][k] += df[k] * xh;   /* static indices: the array stays in registers */
        else dwp[0][k] += df[k] * xh;
      }
    }
    if (whole) {
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < RBP_V; j++) sum += dot[j];
      sum = warp_sum(sum);
      if ((t & 31) == 0) red[par][t >> 5] = sum;
      __syncthreads();   /* red[par] is written again two rows on, after the next row's barrier */
      sum = 0.f;
      for (int q = 0; q < nw; q++) sum += red[par][q];   /* fixed order */
#pragma unroll
      for (int j = 0; j < RBP_V; j++) dot[j] = sum / G;
    } else {
#pragma unroll
      for (int j = 0; j < RBP_V; j++) {
        for (int o = L >> 1; o > 0; o >>= 1) dot[j] += __shfl_xor_sync(0xffffffffu, dot[j], o);
        dot[j] /= G;
      }
    }
    uint4 *dxr = (uint4 *)((unsigned short *)dx + row * C) + t;
#pragma unroll
    for (int j = 0; j < RBP_V; j++) {
      const float r = whole ? rv[0] : rv[j];
      float xf[8], df[8], wf[8], o[8];
      dfl_bf8(*RBP_SLOT(stg, s, 0, j), xf);
      dfl_bf8(*RBP_SLOT(stg, s, 1, j), df);
      dfl_bf8(__ldg(wr + (whole ? j * NT : 0)), wf);
#pragma unroll
      for (int k = 0; k < 8; k++) o[k] = r * (df[k] * wf[k] - xf[k] * r * dot[j]);
      if (AD) {   /* the addend (dfl_fuse_add): dx = r + the norm's dx, rounded once */
        float af[8];
        dfl_bf8(*RBP_SLOT(stg, s, 2, j), af);
#pragma unroll
        for (int k = 0; k < 8; k++) o[k] += af[k];
      }
      dxr[j * NT] = dfl_f2bf8(o);
    }
    int p2;
    ll row2;
    rbp_next(p1, row1, nrows, np, p2, row2);
    rbp_issue<AD>(stg, s, x, dy, ad, row2, C, p2 < np);   /* into the stage just read */
    if (p1 != p) rbp_flush(dwp, sdw, part, p, whole, G);
#pragma unroll
    for (int j = 0; j < RBP_V; j++) rv[j] = rn[j];
    p = p1, row = row1, p1 = p2, row1 = row2;
  }
}
extern "C" __global__ void __launch_bounds__(512) dfl_rmsnorm_bwd_p(void *dx, float *part, const void *x,
                                                                   const void *w, const float *rstd, const void *dy,
                                                                   ll nrows, int np, int C, int G) {
  rmsnorm_bwd_p<false>(dx, part, x, w, rstd, dy, 0, nrows, np, C, G);
}
extern "C" __global__ void __launch_bounds__(512) dfl_rmsnorm_bwd_pa(void *dx, float *part, const void *x,
                                                                    const void *w, const float *rstd, const void *dy,
                                                                    const void *ad, ll nrows, int np, int C, int G) {
  rmsnorm_bwd_p<true>(dx, part, x, w, rstd, dy, ad, nrows, np, C, G);
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

/* Warp-per-row forms (session 11; runtime/cuda.c takes them for bf16 x, w (and y) and rows of
** G = 256 V features, V <= 32; other rows the block kernels). A warp holds its row in registers as packed
** bf16 (V of VMAX 16-byte vectors per lane), so each lane has V loads in flight and the sum of squares
** needs no barrier. The block-per-row kernels above keep one 16-byte load in flight per thread
** between two barriers: 1.4-1.9 TB/s in the 8B step. bf16 only: with a dtype switch per access the
** unrolled rows took 300 KB of code. Values as theirs: x_i r w_i, r from the f32 sum of squares
** (taken in another order: r can differ in its last bit). */
/* Loads row `row` (G = 256 V) into raw (lane's vector j: features (32 j + lane) 8 ..+8) and returns
** its 1 / rms. */
template <int VMAX>
__device__ __forceinline__ float rmsw_load(uint4 (&raw)[VMAX], const void *x, ll row, int V, float eps) {
  const uint4 *xr = (const uint4 *)((const unsigned short *)x + row * (ll)(V * 256)) + (threadIdx.x & 31);
#pragma unroll
  for (int j = 0; j < VMAX; j++)
    if (j < V) raw[j] = xr[j * 32];
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < VMAX; j++)
    if (j < V) {
      float v[8];
      dfl_bf8(raw[j], v);
#pragma unroll
      for (int k = 0; k < 8; k++) ss += v[k] * v[k];
    }
  return rsqrtf(warp_sum(ss) / (V * 256) + eps);
}
/* lane's 8 values of vector j, normalized: x r w */
__device__ __forceinline__ void rmsw_y(uint4 raw, const void *w, int f, float r, float *v) {
  float wv[8];
  dfl_bf8(raw, v);
  dfl_bf8(*(const uint4 *)((const unsigned short *)w + f), wv);
#pragma unroll
  for (int k = 0; k < 8; k++) v[k] = v[k] * r * wv[k];
}
/* y = x r w, one warp per row, 4 rows per 128-thread block */
template <int VMAX>
__device__ __forceinline__ void rmsnorm_w(void *y, float *rstd, const void *x, const void *w, ll ngroups, int V,
                                          float eps) {
  const ll row = (ll)blockIdx.x * 4 + (threadIdx.x >> 5);
  if (row >= ngroups) return;   /* no barrier below */
  const int lane = threadIdx.x & 31;
  uint4 raw[VMAX];
  const float r = rmsw_load<VMAX>(raw, x, row, V, eps);
  if (lane == 0) rstd[row] = r;
#pragma unroll
  for (int j = 0; j < VMAX; j++)
    if (j < V) {
      const int f = (j * 32 + lane) * 8;
      float v[8];
      rmsw_y(raw[j], w, f, r, v);
      st8(y, DT_BF16, row * (ll)(V * 256) + f, v);
    }
}
/* The quantized form (dfl_fuse_quant) as rmsnorm_q: y rounded to bf16 (the unfused graph's
** intermediate) replaces x in the registers, the row's amax over a warp, then E4M3 bytes and the row
** scale as dfl_quant_f8; y is never stored. */
template <int VMAX>
__device__ __forceinline__ void rmsnorm_wq(unsigned char *q, float *s, float *rstd, const void *x, const void *w,
                                           ll ngroups, int V, float eps) {
  const ll row = (ll)blockIdx.x * 4 + (threadIdx.x >> 5);
  if (row >= ngroups) return;
  const int lane = threadIdx.x & 31;
  uint4 raw[VMAX];
  const float r = rmsw_load<VMAX>(raw, x, row, V, eps);
  if (lane == 0) rstd[row] = r;
  float amax = 0.f;
#pragma unroll
  for (int j = 0; j < VMAX; j++)
    if (j < V) {
      float v[8];
      rmsw_y(raw[j], w, (j * 32 + lane) * 8, r, v);
      raw[j] = dfl_f2bf8(v);
      dfl_bf8(raw[j], v);
#pragma unroll
      for (int k = 0; k < 8; k++) amax = fmaxf(amax, fabsf(v[k]));
    }
  amax = warp_max(amax);
  if (lane == 0) s[row] = dfl_fp8_scale(amax);
  const float inv = dfl_fp8_inv(amax);
#pragma unroll
  for (int j = 0; j < VMAX; j++)
    if (j < V) {
      float v[8];
      dfl_bf8(raw[j], v);
      *(uint2 *)(q + row * (ll)(V * 256) + (j * 32 + lane) * 8) = dfl_e4m3x8(v, inv);
    }
}
#define DFL_RMSNORM_W(VM)                                                                                          \
  extern "C" __global__ void __launch_bounds__(128) dfl_rmsnorm_w##VM(void *y, float *rstd, const void *x,         \
                                                                      const void *w, ll ngroups, int V, float eps) { \
    rmsnorm_w<VM>(y, rstd, x, w, ngroups, V, eps);                                                                  \
  }                                                                                                                 \
  extern "C" __global__ void __launch_bounds__(128) dfl_rmsnorm_wq##VM(unsigned char *q, float *s, float *rstd,    \
                                                                       const void *x, const void *w, ll ngroups,   \
                                                                       int V, float eps) {                         \
    rmsnorm_wq<VM>(q, s, rstd, x, w, ngroups, V, eps);                                                              \
  }
DFL_RMSNORM_W(8)
DFL_RMSNORM_W(16)
DFL_RMSNORM_W(24)
DFL_RMSNORM_W(32)
