/*
** attention.cuh: ATTENTION and ATTENTION_BWD for both masks, never materialising the score
** matrix. Flash-style: key tiles of 32 in shared memory, online softmax in f32, lse saved.
**
** Work unit: a set of query rows that share one key range, times the GQA group of one KV head:
**   DFLASH: the B rows of block n (they all see context [0, a_n) plus their own block), so each
**           context key tile is loaded once for B x G (row, head) pairs (reference §6);
**   CAUSAL: T = 32/G consecutive positions of one sequence.
** One CTA (8 warps) takes up to 32 (row, head) pairs of a unit, 4 per warp; a lane owns one key
** of the tile when scoring and hd/32 output dims when accumulating. Requires hd % 32 == 0, hd <= 256.
** Segment 0 is the context (DFLASH) or the sequence itself (CAUSAL); segment 1 the own block.
** A row with no allowed key (invalid block) outputs 0, lse = -inf, and passes no gradient.
*/
#define ATT_PAIRS 32
#define ATT_RPW 4
#define ATT_MAXD 8

struct dfl_att_unit {
  int mask, b, n, g, s0, a, keep, pair0, np, G, B, S, N, nh, nkv, hd, window;
  ll qrow0;  /* first query row of the unit */
};

/* Decode blockIdx into a unit; 0 when this CTA has no pairs (tail of a causal sequence). */
__device__ __forceinline__ int dfl_att_setup(dfl_att_unit *u, int mask, int batch, int S, int N, int B, int nh,
                                             int nkv, int hd, int window, const int *anchors, const int *keep) {
  int G = nh / nkv;
  u->mask = mask; u->G = G; u->S = S; u->N = N; u->B = B; u->nh = nh; u->nkv = nkv; u->hd = hd;
  u->window = window; u->g = blockIdx.y;
  int U, chunks;
  if (mask == 1) {
    chunks = (B * G + ATT_PAIRS - 1) / ATT_PAIRS;
    int unit = blockIdx.x / chunks;
    u->b = unit / N; u->n = unit % N; u->s0 = 0;
    u->a = anchors[(ll)u->b * N + u->n]; u->keep = keep[(ll)u->b * N + u->n] != 0;
    U = B;
    u->qrow0 = (ll)u->b * N * B + (ll)u->n * B;
  } else {
    int T = ATT_PAIRS / G; if (T < 1) T = 1;
    chunks = (T * G + ATT_PAIRS - 1) / ATT_PAIRS;
    int ups = (S + T - 1) / T, unit = blockIdx.x / chunks;
    u->b = unit / ups; u->s0 = (unit % ups) * T; u->n = 0; u->a = 0; u->keep = 1;
    U = S - u->s0 < T ? S - u->s0 : T;
    u->qrow0 = (ll)u->b * S + u->s0;
  }
  u->pair0 = (blockIdx.x % chunks) * ATT_PAIRS;
  int P = U * G;
  u->np = P - u->pair0 < ATT_PAIRS ? P - u->pair0 : ATT_PAIRS;
  return u->np > 0 && u->b < batch;
}
/* Key range [lo, hi) of segment seg for this CTA's pairs. */
__device__ __forceinline__ void dfl_att_range(const dfl_att_unit *u, int seg, int *lo, int *hi) {
  int W = u->window;
  int jmin = u->pair0 / u->G, jmax = (u->pair0 + u->np - 1) / u->G;
  if (u->mask == 1) {
    if (!u->keep) { *lo = *hi = 0; return; }
    if (seg == 0) {
      int l = W > 0 ? u->a + jmin - (W - 1) : 0;
      *lo = l < 0 ? 0 : l; *hi = u->a;
    } else { *lo = 0; *hi = u->B; }
  } else {
    if (seg == 1) { *lo = *hi = 0; return; }
    int l = W > 0 ? u->s0 + jmin - (W - 1) : 0;
    *lo = l < 0 ? 0 : l; *hi = u->s0 + jmax + 1;
  }
}
/* Reference §1.4, for pair p (unit-relative) and key kv of segment seg. */
__device__ __forceinline__ int dfl_att_allowed(const dfl_att_unit *u, int p, int seg, int kv) {
  int j = (u->pair0 + p) / u->G, W = u->window;
  if (u->mask == 1) {
    if (!u->keep) return 0;
    if (seg == 0) return kv < u->a && (W == 0 || kv >= u->a + j - (W - 1));
    return W == 0 || kv <= j;
  }
  int s = u->s0 + j;
  return kv <= s && (W == 0 || kv >= s - (W - 1));
}
__device__ __forceinline__ ll dfl_att_qrow(const dfl_att_unit *u, int p) { return u->qrow0 + (u->pair0 + p) / u->G; }
__device__ __forceinline__ int dfl_att_head(const dfl_att_unit *u, int p) { return u->g * u->G + (u->pair0 + p) % u->G; }
__device__ __forceinline__ ll dfl_att_krow(const dfl_att_unit *u, int seg, int kv) {
  return seg == 0 ? (ll)u->b * u->S + kv : (ll)u->b * u->N * u->B + (ll)u->n * u->B + kv;
}
/* Stage a 32-key tile of K (row stride hd+1: lane-per-key reads hit distinct banks) and V. */
__device__ __forceinline__ void dfl_att_load_kv(const dfl_att_unit *u, int seg, int k0, int hi, const void *k,
                                                const void *v, int dt, float *ks, float *vs, int vstride) {
  int hd = u->hd;
  for (int t = threadIdx.x; t < 32 * hd; t += blockDim.x) {
    int kk = t / hd, d = t % hd, kv = k0 + kk;
    float kx = 0.f, vx = 0.f;
    if (kv < hi) {
      ll off = dfl_att_krow(u, seg, kv) * u->nkv * hd + (ll)u->g * hd + d;
      kx = ldf(k, dt, off); vx = ldf(v, dt, off);
    }
    ks[kk * (hd + 1) + d] = kx;
    vs[kk * vstride + d] = vx;
  }
}

extern "C" __global__ void __launch_bounds__(256) dfl_attn_fwd(
    void *o, float *lse, const void *q, const void *k1, const void *v1, const void *k2, const void *v2,
    const int *anchors, const int *keep, int dt, int mask, int batch, int S, int N, int B, int nh, int nkv,
    int hd, int window, float scale) {
  extern __shared__ float smem[];
  dfl_att_unit u;
  if (!dfl_att_setup(&u, mask, batch, S, N, B, nh, nkv, hd, window, anchors, keep)) return;
  float *qs = smem, *ks = qs + ATT_PAIRS * hd, *vs = ks + 32 * (hd + 1);
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, dpl = hd >> 5;
  for (int t = threadIdx.x; t < ATT_PAIRS * hd; t += blockDim.x) {
    int p = t / hd, d = t % hd;
    qs[t] = p < u.np ? ldf(q, dt, dfl_att_qrow(&u, p) * nh * hd + (ll)dfl_att_head(&u, p) * hd + d) * scale : 0.f;
  }
  float m[ATT_RPW], l[ATT_RPW], acc[ATT_RPW][ATT_MAXD];
#pragma unroll
  for (int r = 0; r < ATT_RPW; r++) {
    m[r] = DFL_NINF; l[r] = 0.f;
#pragma unroll
    for (int t = 0; t < ATT_MAXD; t++) acc[r][t] = 0.f;
  }
  for (int seg = 0; seg < 2; seg++) {
    int lo, hi;
    dfl_att_range(&u, seg, &lo, &hi);
    for (int k0 = lo; k0 < hi; k0 += 32) {
      __syncthreads();
      dfl_att_load_kv(&u, seg, k0, hi, seg ? k2 : k1, seg ? v2 : v1, dt, ks, vs, hd);
      __syncthreads();
#pragma unroll
      for (int r = 0; r < ATT_RPW; r++) {
        int p = warp * ATT_RPW + r;
        if (p >= u.np) continue;
        int kv = k0 + lane;
        float s = DFL_NINF;
        if (kv < hi && dfl_att_allowed(&u, p, seg, kv)) {
          const float *qp = qs + p * hd, *kp = ks + lane * (hd + 1);
          float x = 0.f;
          for (int d = 0; d < hd; d++) x += qp[d] * kp[d];
          s = x;
        }
        float mn = fmaxf(m[r], warp_max(s));
        if (mn == DFL_NINF) continue;
        float corr = __expf(m[r] - mn);
        float pr = s == DFL_NINF ? 0.f : __expf(s - mn);
        l[r] = l[r] * corr + warp_sum(pr);
#pragma unroll
        for (int t = 0; t < ATT_MAXD; t++) {
          if (t < dpl) {
            float a = acc[r][t] * corr;
#pragma unroll 8
            for (int kk = 0; kk < 32; kk++) a += __shfl_sync(0xffffffffu, pr, kk) * vs[kk * hd + lane + 32 * t];
            acc[r][t] = a;
          }
        }
        m[r] = mn;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < ATT_RPW; r++) {
    int p = warp * ATT_RPW + r;
    if (p >= u.np) continue;
    ll row = dfl_att_qrow(&u, p);
    int h = dfl_att_head(&u, p);
    float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;
#pragma unroll
    for (int t = 0; t < ATT_MAXD; t++)
      if (t < dpl) stf(o, dt, row * nh * hd + (ll)h * hd + lane + 32 * t, acc[r][t] * inv);
    if (lane == 0) lse[row * nh + h] = l[r] > 0.f ? m[r] + logf(l[r]) : DFL_NINF;
  }
}

/* Backward: recompute P per tile from lse; dS = P (dP - D), D = rowsum(dO o). dq is owned by the
** CTA (plain store); dK, dV of a key are summed over the tile's pairs in shared memory and then
** added atomically into f32 accumulators (context keys are shared by every block of a sample). */
extern "C" __global__ void __launch_bounds__(256) dfl_attn_bwd(
    void *dq, float *dk1, float *dv1, float *dk2, float *dv2, const void *q, const void *k1, const void *v1,
    const void *k2, const void *v2, const int *anchors, const int *keep, const void *o, const float *lse,
    const void *dout, int dt, int mask, int batch, int S, int N, int B, int nh, int nkv, int hd, int window,
    float scale) {
  extern __shared__ float smem[];
  dfl_att_unit u;
  if (!dfl_att_setup(&u, mask, batch, S, N, B, nh, nkv, hd, window, anchors, keep)) return;
  float *qs = smem, *dos = qs + ATT_PAIRS * hd, *ks = dos + ATT_PAIRS * hd, *vs = ks + 32 * (hd + 1);
  float *ps = vs + 32 * (hd + 1), *dss = ps + ATT_PAIRS * 33, *lses = dss + ATT_PAIRS * 33, *Ds = lses + ATT_PAIRS;
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, dpl = hd >> 5;
  for (int t = threadIdx.x; t < ATT_PAIRS * hd; t += blockDim.x) {
    int p = t / hd, d = t % hd;
    float qx = 0.f, dx = 0.f;
    if (p < u.np) {
      ll off = dfl_att_qrow(&u, p) * nh * hd + (ll)dfl_att_head(&u, p) * hd + d;
      qx = ldf(q, dt, off) * scale; dx = ldf(dout, dt, off);
    }
    qs[t] = qx; dos[t] = dx;
  }
#pragma unroll
  for (int r = 0; r < ATT_RPW; r++) {
    int p = warp * ATT_RPW + r;
    float dsum = 0.f, ls = DFL_NINF;
    if (p < u.np) {
      ll off = dfl_att_qrow(&u, p) * nh * hd + (ll)dfl_att_head(&u, p) * hd;
      for (int d = lane; d < hd; d += 32) dsum += ldf(dout, dt, off + d) * ldf(o, dt, off + d);
      ls = lse[dfl_att_qrow(&u, p) * nh + dfl_att_head(&u, p)];
    }
    dsum = warp_sum(dsum);
    if (lane == 0) { Ds[p] = dsum; lses[p] = ls; }
  }
  float dqa[ATT_RPW][ATT_MAXD];
#pragma unroll
  for (int r = 0; r < ATT_RPW; r++)
#pragma unroll
    for (int t = 0; t < ATT_MAXD; t++) dqa[r][t] = 0.f;
  for (int seg = 0; seg < 2; seg++) {
    int lo, hi;
    dfl_att_range(&u, seg, &lo, &hi);
    float *dk = seg ? dk2 : dk1, *dv = seg ? dv2 : dv1;
    for (int k0 = lo; k0 < hi; k0 += 32) {
      __syncthreads();
      dfl_att_load_kv(&u, seg, k0, hi, seg ? k2 : k1, seg ? v2 : v1, dt, ks, vs, hd + 1);
      __syncthreads();
#pragma unroll
      for (int r = 0; r < ATT_RPW; r++) {
        int p = warp * ATT_RPW + r;
        int kv = k0 + lane;
        float pr = 0.f, ds = 0.f;
        if (p < u.np && kv < hi && lses[p] != DFL_NINF && dfl_att_allowed(&u, p, seg, kv)) {
          const float *qp = qs + p * hd, *dp_ = dos + p * hd, *kp = ks + lane * (hd + 1), *vp = vs + lane * (hd + 1);
          float s = 0.f, dp = 0.f;
          for (int d = 0; d < hd; d++) { s += qp[d] * kp[d]; dp += dp_[d] * vp[d]; }
          pr = __expf(s - lses[p]);
          ds = pr * (dp - Ds[p]);
        }
        ps[p * 33 + lane] = pr;
        dss[p * 33 + lane] = ds;
        if (p < u.np) {
#pragma unroll
          for (int t = 0; t < ATT_MAXD; t++) {
            if (t < dpl) {
              float a = dqa[r][t];
#pragma unroll 8
              for (int kk = 0; kk < 32; kk++) a += __shfl_sync(0xffffffffu, ds, kk) * ks[kk * (hd + 1) + lane + 32 * t];
              dqa[r][t] = a;
            }
          }
        }
      }
      __syncthreads();
      for (int t = threadIdx.x; t < 32 * hd; t += blockDim.x) {
        int kk = t / hd, d = t % hd;
        if (k0 + kk >= hi) continue;
        float gk = 0.f, gv = 0.f;
        for (int p = 0; p < u.np; p++) { gk += dss[p * 33 + kk] * qs[p * hd + d]; gv += ps[p * 33 + kk] * dos[p * hd + d]; }
        ll off = dfl_att_krow(&u, seg, k0 + kk) * nkv * hd + (ll)u.g * hd + d;
        if (gk != 0.f) atomicAdd(&dk[off], gk);
        if (gv != 0.f) atomicAdd(&dv[off], gv);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < ATT_RPW; r++) {
    int p = warp * ATT_RPW + r;
    if (p >= u.np) continue;
    ll off = dfl_att_qrow(&u, p) * nh * hd + (ll)dfl_att_head(&u, p) * hd;
#pragma unroll
    for (int t = 0; t < ATT_MAXD; t++)
      if (t < dpl) stf(dq, dt, off + lane + 32 * t, dqa[r][t] * scale);
  }
}
