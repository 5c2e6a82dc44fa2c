/*
** attention.cuh: ATTENTION and ATTENTION_BWD for both masks, never materialising the score
** matrix. Flash-style: key tiles of 32 in shared memory, online softmax in f32, lse saved.
**
** Work unit: a set of query rows that share one key range, times the GQA group of one KV head:
**   DFLASH: the B rows of block n (they all see context [0, a_n) plus their own block), so each
**           context key tile is loaded once for B x G (row, head) pairs (reference §6);
**   CAUSAL: T = 32/G consecutive positions of one sequence.
** One CTA (8 warps) takes up to 32 (row, head) pairs of a unit, 4 per warp; a lane owns one key
** of the tile when scoring and dims lane + 32 t (t < ceil(hd/32)) when accumulating; lanes past hd
** still join the shuffles but read 0 and store nothing. Any hd <= 256 (the fixtures' drafters: 16).
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

/* Chunks of ATT_PAIRS pairs per unit, and units per sample (DFLASH: blocks; CAUSAL: runs of T positions). */
__device__ __forceinline__ int dfl_att_chunks(int mask, int B, int G) {
  int T = ATT_PAIRS / G < 1 ? 1 : ATT_PAIRS / G;
  return ((mask == 1 ? B : T) * G + ATT_PAIRS - 1) / ATT_PAIRS;
}
__device__ __forceinline__ int dfl_att_units(int mask, int S, int N, int G) {
  int T = ATT_PAIRS / G < 1 ? 1 : ATT_PAIRS / G;
  return mask == 1 ? N : (S + T - 1) / T;
}
/* Unit x (blockIdx.x's numbering: sample-major units, chunks within a unit) of kv head g; 0 when it has
** no pairs (tail of a causal sequence). */
__device__ __forceinline__ int dfl_att_unit_at(dfl_att_unit *u, ll x, int g, int mask, int batch, int S, int N, int B,
                                               int nh, int nkv, int hd, int window, const int *anchors, const int *keep) {
  int G = nh / nkv;
  u->mask = mask; u->G = G; u->S = S; u->N = N; u->B = B; u->nh = nh; u->nkv = nkv; u->hd = hd;
  u->window = window; u->g = g;
  int U, chunks;
  if (mask == 1) {
    chunks = (B * G + ATT_PAIRS - 1) / ATT_PAIRS;
    int unit = (int)(x / chunks);
    u->b = unit / N; u->n = unit % N; u->s0 = 0;
    u->a = anchors[(ll)u->b * N + u->n]; u->keep = keep[(ll)u->b * N + u->n] != 0;
    U = B;
    u->qrow0 = (ll)u->b * N * B + (ll)u->n * B;
  } else {
    int T = ATT_PAIRS / G; if (T < 1) T = 1;
    chunks = (T * G + ATT_PAIRS - 1) / ATT_PAIRS;
    int ups = (S + T - 1) / T, unit = (int)(x / chunks);
    u->b = unit / ups; u->s0 = (unit % ups) * T; u->n = 0; u->a = 0; u->keep = 1;
    U = S - u->s0 < T ? S - u->s0 : T;
    u->qrow0 = (ll)u->b * S + u->s0;
  }
  u->pair0 = (int)(x % chunks) * ATT_PAIRS;
  int P = U * G;
  u->np = P - u->pair0 < ATT_PAIRS ? P - u->pair0 : ATT_PAIRS;
  return u->np > 0 && u->b < batch;
}
/* Decode blockIdx into a unit; 0 when this CTA has no pairs (tail of a causal sequence). */
__device__ __forceinline__ int dfl_att_setup(dfl_att_unit *u, int mask, int batch, int S, int N, int B, int nh,
                                             int nkv, int hd, int window, const int *anchors, const int *keep) {
  return dfl_att_unit_at(u, blockIdx.x, blockIdx.y, mask, batch, S, N, B, nh, nkv, hd, window, anchors, keep);
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
/* Backward: P and dS = P (dP - D) of pair p and key kv < hi of the staged tile (this lane's key), from the
** staged q (scaled), dO, lse and D; 0 where the mask hides the key or the row sees none. */
__device__ __forceinline__ void dfl_att_pds(const dfl_att_unit *u, int hd, int lane, int p, int seg, int kv, int hi,
                                            const float *qs, const float *dos, const float *ks, const float *vs,
                                            const float *lses, const float *Ds, float *pr, float *ds) {
  *pr = 0.f, *ds = 0.f;
  if (p < u->np && kv < hi && lses[p] != DFL_NINF && dfl_att_allowed(u, p, seg, kv)) {
    const float *qp = qs + p * hd, *dp_ = dos + p * hd, *kp = ks + lane * (hd + 1), *vp = vs + lane * (hd + 1);
    float s = 0.f, dp = 0.f;
    for (int d = 0; d < hd; d++) { s += qp[d] * kp[d]; dp += dp_[d] * vp[d]; }
    *pr = __expf(s - lses[p]);
    *ds = *pr * (dp - Ds[p]);
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
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, dpl = (hd + 31) >> 5;
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
            int d = lane + 32 * t, dd = d < hd ? d : hd - 1; /* lanes past hd: a valid address, result unused */
            float a = acc[r][t] * corr;
#pragma unroll 8
            for (int kk = 0; kk < 32; kk++) a += __shfl_sync(0xffffffffu, pr, kk) * vs[kk * hd + dd];
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
      if (t < dpl && lane + 32 * t < hd) stf(o, dt, row * nh * hd + (ll)h * hd + lane + 32 * t, acc[r][t] * inv);
    if (lane == 0) lse[row * nh + h] = l[r] > 0.f ? m[r] + logf(l[r]) : DFL_NINF;
  }
}

/* A backward unit's rows into shared memory: q (scaled) and dO [ATT_PAIRS][hd] (0 past np), lse and
** D = rowsum(dO o) per pair (a warp per ATT_RPW pairs). */
__device__ __forceinline__ void dfl_att_stage_rows(const dfl_att_unit *u, const void *q, const void *dout,
                                                   const void *o, const float *lse, int dt, float scale, float *qs,
                                                   float *dos, float *lses, float *Ds) {
  const int hd = u->hd, nh = u->nh, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int t = threadIdx.x; t < ATT_PAIRS * hd; t += blockDim.x) {
    int p = t / hd, d = t % hd;
    float qx = 0.f, dx = 0.f;
    if (p < u->np) {
      ll off = dfl_att_qrow(u, p) * nh * hd + (ll)dfl_att_head(u, p) * hd + d;
      qx = ldf(q, dt, off) * scale; dx = ldf(dout, dt, off);
    }
    qs[t] = qx; dos[t] = dx;
  }
#pragma unroll
  for (int r = 0; r < ATT_RPW; r++) {
    int p = warp * ATT_RPW + r;
    float dsum = 0.f, ls = DFL_NINF;
    if (p < u->np) {
      ll off = dfl_att_qrow(u, p) * nh * hd + (ll)dfl_att_head(u, p) * hd;
      for (int d = lane; d < hd; d += 32) dsum += ldf(dout, dt, off + d) * ldf(o, dt, off + d);
      ls = lse[dfl_att_qrow(u, p) * nh + dfl_att_head(u, p)];
    }
    dsum = warp_sum(dsum);
    if (lane == 0) { Ds[p] = dsum; lses[p] = ls; }
  }
}
/* Backward, dQ: recompute P per tile from lse; dS = P (dP - D), D = rowsum(dO o); dq is owned by the
** CTA. dK and dV come from dfl_attn_bwd_kv, key-major, so that no output is summed by atomics (an
** atomic sum's order, and so its last bits, changes from run to run). */
extern "C" __global__ void __launch_bounds__(256) dfl_attn_bwd(
    void *dq, const void *q, const void *k1, const void *v1, const void *k2, const void *v2, const int *anchors,
    const int *keep, const void *o, const float *lse, const void *dout, int dt, int mask, int batch, int S, int N,
    int B, int nh, int nkv, int hd, int window, float scale) {
  extern __shared__ float smem[];
  dfl_att_unit u;
  if (!dfl_att_setup(&u, mask, batch, S, N, B, nh, nkv, hd, window, anchors, keep)) return;
  float *qs = smem, *dos = qs + ATT_PAIRS * hd, *ks = dos + ATT_PAIRS * hd, *vs = ks + 32 * (hd + 1);
  float *lses = vs + 32 * (hd + 1), *Ds = lses + ATT_PAIRS;
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, dpl = (hd + 31) >> 5;
  dfl_att_stage_rows(&u, q, dout, o, lse, dt, scale, qs, dos, lses, Ds);
  float dqa[ATT_RPW][ATT_MAXD];
#pragma unroll
  for (int r = 0; r < ATT_RPW; r++)
#pragma unroll
    for (int t = 0; t < ATT_MAXD; t++) dqa[r][t] = 0.f;
  for (int seg = 0; seg < 2; seg++) {
    int lo, hi;
    dfl_att_range(&u, seg, &lo, &hi);
    for (int k0 = lo; k0 < hi; k0 += 32) {
      __syncthreads();
      dfl_att_load_kv(&u, seg, k0, hi, seg ? k2 : k1, seg ? v2 : v1, dt, ks, vs, hd + 1);
      __syncthreads();
#pragma unroll
      for (int r = 0; r < ATT_RPW; r++) {
        int p = warp * ATT_RPW + r;
        float pr, ds;
        dfl_att_pds(&u, hd, lane, p, seg, k0 + lane, hi, qs, dos, ks, vs, lses, Ds, &pr, &ds);
        if (p < u.np) {
#pragma unroll
          for (int t = 0; t < ATT_MAXD; t++) {
            if (t < dpl) {
              int d = lane + 32 * t, dd = d < hd ? d : hd - 1;
              float a = dqa[r][t];
#pragma unroll 8
              for (int kk = 0; kk < 32; kk++) a += __shfl_sync(0xffffffffu, ds, kk) * ks[kk * (hd + 1) + dd];
              dqa[r][t] = a;
            }
          }
        }
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
      if (t < dpl && lane + 32 * t < hd) stf(dq, dt, off + lane + 32 * t, dqa[r][t] * scale);
  }
}

/* Backward, dK and dV, key-major: a CTA per 32 keys of a segment and kv head (grid.y) owns their
** gradients. grid.x: segment 0's tiles, batch x ceil(S / 32), then (DFLASH) the own keys', batch x N x
** ceil(B / 32). It walks, in a fixed order, the units (chunks of ATT_PAIRS pairs, dfl_attn_bwd's) whose
** rows may see its keys, recomputes their P and dS as dfl_attn_bwd does, and sums dK = dS^T (q scale) and
** dV = P^T dO in registers (thread t: elements t + 256 i of the [32][hd] tile), then stores them: keys no
** row sees get 0. The S and dP recomputed here are the price of having no atomics. One block an SM
** (176 registers): the 64 accumulators spilled at the default bound of 128. */
extern "C" __global__ void __launch_bounds__(256, 1) dfl_attn_bwd_kv(
    void *dk1, void *dv1, void *dk2, void *dv2, int dto, const void *q, const void *k1, const void *v1,
    const void *k2, const void *v2, const int *anchors, const int *keep, const void *o, const float *lse,
    const void *dout, int dt, int mask, int batch, int S, int N, int B, int nh, int nkv, int hd, int window,
    float scale) {
  extern __shared__ float smem[];
  float *qs = smem, *dos = qs + ATT_PAIRS * hd, *ks = dos + ATT_PAIRS * hd, *vs = ks + 32 * (hd + 1);
  float *ps = vs + 32 * (hd + 1), *dss = ps + ATT_PAIRS * 33, *lses = dss + ATT_PAIRS * 33, *Ds = lses + ATT_PAIRS;
  const int G = nh / nkv, g = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nper = (32 * hd + 255) / 256;
  const int kt0 = (S + 31) / 32, kt1 = (B + 31) / 32, chunks = dfl_att_chunks(mask, B, G);
  ll x = blockIdx.x;
  int seg = 0, b, n = 0, k0;
  if (x < (ll)batch * kt0) {
    b = (int)(x / kt0); k0 = (int)(x % kt0) * 32;
  } else {
    if (mask != 1) return;
    x -= (ll)batch * kt0;
    seg = 1; b = (int)(x / ((ll)N * kt1)); n = (int)(x / kt1 % N); k0 = (int)(x % kt1) * 32;
  }
  const int nkeys = seg ? B : S; /* keys [k0, min(k0 + 32, nkeys)) */
  dfl_att_unit ku; /* what dfl_att_krow and dfl_att_load_kv read of a unit: the tile's sample, block, head */
  ku.b = b; ku.n = n; ku.S = S; ku.N = N; ku.B = B; ku.nkv = nkv; ku.hd = hd; ku.g = g;
  dfl_att_load_kv(&ku, seg, k0, nkeys, seg ? k2 : k1, seg ? v2 : v1, dt, ks, vs, hd + 1); /* once */
  float gk[32], gv[32];
#pragma unroll
  for (int i = 0; i < 32; i++) gk[i] = gv[i] = 0.f;
  /* units of sample b: DFLASH context keys, every block; own keys, block n; CAUSAL, every run of positions */
  const int u0 = seg ? n : 0, u1 = seg ? n + 1 : dfl_att_units(mask, S, N, G);
  for (int un = u0; un < u1; un++)
    for (int c = 0; c < chunks; c++) {
      dfl_att_unit u;
      if (!dfl_att_unit_at(&u, ((ll)b * (mask == 1 ? N : u1) + un) * chunks + c, g, mask, batch, S, N, B, nh, nkv, hd,
                           window, anchors, keep))
        continue;
      int lo, hi;
      dfl_att_range(&u, seg, &lo, &hi);
      if (hi <= k0 || lo >= k0 + 32) continue; /* the same for every thread: the barriers below are safe */
      __syncthreads(); /* the last unit's qs, ps read */
      dfl_att_stage_rows(&u, q, dout, o, lse, dt, scale, qs, dos, lses, Ds);
      __syncthreads();
#pragma unroll
      for (int r = 0; r < ATT_RPW; r++) {
        int p = warp * ATT_RPW + r;
        float pr, ds;
        dfl_att_pds(&u, hd, lane, p, seg, k0 + lane, hi < nkeys ? hi : nkeys, qs, dos, ks, vs, lses, Ds, &pr, &ds);
        ps[p * 33 + lane] = pr;
        dss[p * 33 + lane] = ds;
      }
      __syncthreads();
#pragma unroll
      for (int i = 0; i < 32; i++) {
        const int e = threadIdx.x + 256 * i;
        if (i < nper && e < 32 * hd) {
          const int kk = e / hd, d = e % hd;
          float a = gk[i], v = gv[i];
          for (int p = 0; p < u.np; p++) { a += dss[p * 33 + kk] * qs[p * hd + d]; v += ps[p * 33 + kk] * dos[p * hd + d]; }
          gk[i] = a; gv[i] = v;
        }
      }
    }
#pragma unroll
  for (int i = 0; i < 32; i++) {
    const int e = threadIdx.x + 256 * i;
    if (i < nper && e < 32 * hd && k0 + e / hd < nkeys) {
      const ll off = dfl_att_krow(&ku, seg, k0 + e / hd) * nkv * hd + (ll)g * hd + e % hd;
      stf(seg ? dk2 : dk1, dto, off, gk[i]);
      stf(seg ? dv2 : dv1, dto, off, gv[i]);
    }
  }
}

/*
** ---- Tensor-core path (bf16, head_dim 64 or 128): FlashAttention-2 style ----
** mma.sync.m16n8k16 bf16 -> f32, K/V (or Q/dO) tiles staged by cp.async into shared memory
** (double buffered), rows padded by 16 bytes so fragment loads and ldmatrix are conflict free.
** A warp owns 32 rows (forward, query-major backward) or 32 keys (key-major backward) of the score
** tile, so every fragment read from shared memory feeds at least two mma. Scores live in the log2
** domain (scale * log2 e folded in) so the softmax is ex2.approx; lse is stored in natural log like
** the reference.
**
** Row order in a CTA (DFLASH and CAUSAL alike): r = j * G + h, j the query position in the unit,
** h the head within the GQA group, so one staged K/V tile serves all G heads of the group.
** Every mask of reference §1.4 is an interval of keys per row, which is what the kernels test.
**
** Kernels (runtime/cuda.c picks them; f32 graphs and other head dims use the kernels above):
**   dfl_attn_fwd_tc{64,128}    forward, both masks, 128-row CTAs (4 warps); DFLASH: 128/(B*G) whole
**                              blocks of one (sample, kv head); CAUSAL: 128/G positions.
**   dfl_attn_bwd_dot           D = rowsum(dO * O) per (row, head), f32.
**   dfl_attn_bwdq_tc{64,128}   DFLASH backward, query-major, the forward's 128-row CTAs (4 warps): dQ
**                              over context + own blocks, and the own blocks' dKn/dVn (only this
**                              CTA's rows see those keys).
**   dfl_attn_bwdkv_tc{64,128}  DFLASH backward, key-major: one CTA (8 warps) per (128 context keys,
**                              sample, kv head) loops over the blocks whose rows see its keys and
**                              owns dKc/dVc.
** No atomics: every output element has exactly one writer, and untouched keys are written 0.
*/
#define TC_KT 64
#define TC_LOG2E 1.4426950408889634f
#define TC_LN2 0.6931471805599453f
typedef unsigned short tc_bf;

/* 4-byte async copy (lse, D); ok == 0 zero-fills. */
__device__ __forceinline__ void tc_cp4(void *dst, const void *src, int ok) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(tc_saddr(dst)), "l"(src), "r"(ok ? 4 : 0) : "memory");
}
__device__ __forceinline__ void tc_mma(float *c, const unsigned *a, unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* Four 8x8 bf16 matrices, transposed: the B operand of X @ M for M stored [k][n] row-major. */
__device__ __forceinline__ void tc_ldsm4t(unsigned *r, const tc_bf *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(tc_saddr(p))
               : "memory");
}
__device__ __forceinline__ unsigned tc_pack(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ float tc_ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
/* The C fragments of two adjacent 8-column tiles as the A fragment of the next product. */
__device__ __forceinline__ void tc_c2a(unsigned *a, const float *c0, const float *c1) {
  a[0] = tc_pack(c0[0], c0[1]); a[1] = tc_pack(c0[2], c0[3]); a[2] = tc_pack(c1[0], c1[1]); a[3] = tc_pack(c1[2], c1[3]);
}
/* Stage keys [k0, k0 + 64) of a segment (K and V) for kv head g; keys >= khi are zero. */
template <int HD>
__device__ __forceinline__ void tc_load_kv(tc_bf *ks, tc_bf *vs, const tc_bf *k, const tc_bf *v, ll row0, int k0,
                                           int khi, int nkv, int g) {
  constexpr int SR = HD + 8, C = HD / 8;
  for (int c = threadIdx.x; c < TC_KT * C; c += blockDim.x) {
    int kk = c / C, d8 = c % C, ok = k0 + kk < khi;
    ll off = ok ? ((row0 + k0 + kk) * nkv + g) * HD + d8 * 8 : 0;
    tc_cp16(ks + kk * SR + d8 * 8, k + off, ok);
    tc_cp16(vs + kk * SR + d8 * 8, v + off, ok);
  }
}
/* A DFLASH unit's context keys: the union [*lo, *hi) of the key ranges of its nb blocks that are
** kept (a block at anchor a sees context keys [a - W + 1, a) with a sliding window W > 0, else
** [0, a)); *lo <= *hi. Returns whether any block is kept (then its nb B own keys count too). */
__device__ __forceinline__ int dfl_unit_ctx(const int *anchors, const int *keep, int nb, int W, int *lo, int *hi) {
  int l0 = 0x7fffffff, h0 = 0, any = 0;
  for (int i = 0; i < nb; i++) {
    if (!keep[i]) continue;
    int a = anchors[i], l = W > 0 && a - (W - 1) > 0 ? a - (W - 1) : 0;
    l0 = l < l0 ? l : l0; h0 = a > h0 ? a : h0; any = 1;
  }
  *lo = l0 > h0 ? h0 : l0;
  *hi = h0;
  return any;
}
/* K/V tile t of a unit's two key segments into double-buffer slot t & 1 ([K rows][V rows], KT
** each, row stride HD + 8): tiles 0 .. nt0 - 1 hold context keys [lo0, hi0) of k1/v1 (rows from
** kvrow1), the rest own-block keys [0, hi1) of k2/v2, which sit at the query rows (qrow0); keys past
** a segment's end are zero. Each of the NTHR threads copies 16-byte pieces: keys lr + RPI i, dims
** 8 ld8 .. 8 ld8 + 7 (lr = thread / (HD / 8), ld8 = thread % (HD / 8), kstep = RPI key rows). */
template <int HD, int KT, int NTHR>
__device__ __forceinline__ void tc_load_seg_tile(tc_bf *kvb, const tc_bf *k1, const tc_bf *v1, const tc_bf *k2,
                                                 const tc_bf *v2, int t, int nt0, int lo0, int hi0, int hi1,
                                                 ll qrow0, ll kvrow1, int nkv, int g, int lr, int ld8, ll kstep) {
  constexpr int SR = HD + 8, RPI = NTHR / (HD / 8), NI = KT / RPI;
  int seg = t >= nt0, k0 = seg ? (t - nt0) * KT : lo0 + t * KT, khi = seg ? hi1 : hi0;
  ll off = (((seg ? qrow0 : kvrow1) + k0 + lr) * nkv + g) * HD + ld8 * 8;
  const tc_bf *kg = (seg ? k2 : k1) + off, *vg = (seg ? v2 : v1) + off;
  tc_bf *kd = kvb + (t & 1) * 2 * KT * SR + lr * SR + ld8 * 8, *vd = kd + KT * SR;
#pragma unroll
  for (int i = 0; i < NI; i++) {
    int ok = k0 + lr + i * RPI < khi;
    tc_cp16(kd + i * RPI * SR, ok ? kg + i * kstep : k1, ok);
    tc_cp16(vd + i * RPI * SR, ok ? vg + i * kstep : v1, ok);
  }
}
/* Stage the unit's query-side rows (q or dO: R rows, zero past P). */
template <int HD>
__device__ __forceinline__ void tc_load_rows(tc_bf *dst, const tc_bf *src, ll qrow0, int G, int g, int P, int R, int nh) {
  constexpr int SR = HD + 8, C = HD / 8;
  for (int c = threadIdx.x; c < R * C; c += blockDim.x) {
    int r = c / C, d8 = c % C, ok = r < P;
    ll off = ok ? (qrow0 + r / G) * nh * HD + (ll)(g * G + r % G) * HD + d8 * 8 : 0;
    tc_cp16(dst + r * SR + d8 * 8, src + off, ok);
  }
}

/* A fragment (16 x 16 bf16, row-major at p with row stride sr) by ldmatrix: lane l addresses row l & 15,
** column 8 (l >> 4) of the 16 x 16 tile. Also two B fragments (two 8-key n tiles) of K stored
** [key][d], with the lane addresses of tc_koff. */
__device__ __forceinline__ void tc_ldsm4(unsigned *r, const tc_bf *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(tc_saddr(p))
               : "memory");
}
/* Lane offsets (elements, row stride sr) for ldmatrix: A fragments; K as B operand (matrices: keys
** 0-7 d 0-7, keys 0-7 d 8-15, keys 8-15 d 0-7, keys 8-15 d 8-15); V as B operand (.trans). */
__device__ __forceinline__ int tc_aoff(int lane, int sr) { return (lane & 15) * sr + (lane >> 4) * 8; }
__device__ __forceinline__ int tc_koff(int lane, int sr) { return ((lane & 7) + (lane >> 4) * 8) * sr + ((lane >> 3) & 1) * 8; }
__device__ __forceinline__ int tc_voff(int lane, int sr) { return ((lane & 7) + ((lane >> 3) & 1) * 8) * sr + (lane >> 4) * 8; }

/* Unit and kv head of a 128-row CTA (grid: units x kv heads). CTAs are dispatched in linear order
** (x fastest); the kv heads are interleaved along it, so the heaviest units of every kv head start
** first (with kv head = blockIdx.y, the last heads' heaviest units started late and ran alone at the
** end). Units: heaviest first = reversed unit order. */
__device__ __forceinline__ void tc_unit(int *g, int *gi) {
  unsigned L = blockIdx.x + gridDim.x * blockIdx.y;
  *g = (int)(L % gridDim.y);
  *gi = (int)(gridDim.x - 1 - L / gridDim.y);
}

/* Scores of a warp's 16 MT rows against the first 16 NC keys of a tile (NC = 0: kn decides, 16-key
** chunks past kn skipped; no row of the warp sees those keys). */
template <int HD, int KH, int NC, int MT = 2>
__device__ __forceinline__ void tf_qk(float (&s)[MT][KH / 8][4], const tc_bf *qa, const tc_bf *kp, int kn) {
  constexpr int SR = HD + 8;
#pragma unroll
  for (int ks = 0; ks < HD / 16; ks++) {
    unsigned a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) tc_ldsm4(a[mt], qa + mt * 16 * SR + ks * 16);
#pragma unroll
    for (int c2 = 0; c2 < KH / 16; c2++) {
      if (NC ? c2 < NC : c2 * 16 < kn) {
        unsigned b[4];
        tc_ldsm4(b, kp + c2 * 16 * SR + ks * 16);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
          tc_mma(s[mt][2 * c2], a[mt], b[0], b[1]);
          tc_mma(s[mt][2 * c2 + 1], a[mt], b[2], b[3]);
        }
      }
    }
  }
}
/* oacc += P V over the first 16 NC keys of a tile (NC = 0: kn decides). */
template <int HD, int KH, int NC, int MT = 2>
__device__ __forceinline__ void tf_pv(float (&oacc)[MT][HD / 8][4], const unsigned (&pf)[MT][KH / 16][4],
                                      const tc_bf *vp, int kn) {
  constexpr int SR = HD + 8;
#pragma unroll
  for (int kk = 0; kk < KH / 16; kk++) {
    if (NC ? kk < NC : kk * 16 < kn) {
#pragma unroll
      for (int d2 = 0; d2 < HD / 16; d2++) {
        unsigned b[4];
        tc_ldsm4t(b, vp + kk * 16 * SR + d2 * 16);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
          tc_mma(oacc[mt][2 * d2], pf[mt][kk], b[0], b[1]);
          tc_mma(oacc[mt][2 * d2 + 1], pf[mt][kk], b[2], b[3]);
        }
      }
    }
  }
}

/*
** Forward: 128 rows per CTA, 4 warps of 32 rows (two m16 tiles, so every K/V fragment read from
** shared memory feeds two mma). Row r of a CTA is (query row qrow0 + r / G, head g G + r % G):
**   DFLASH: NB = 128 / (B G) whole blocks n0 .. n0 + nb - 1 of one sample; the context segment is
**           the union of their ranges (anchors are sorted in practice, so the union is barely more
**           than the last block's), the own segment their nb * B consecutive own keys, of which
**           block i's rows see [i B, i B + B) (window: [i B, i B + j + 1)).
**   CAUSAL: 128 / G consecutive positions from s0.
** Q stays in shared memory (A fragments by ldmatrix), K/V tiles of 64 keys double buffered and
** consumed KH = TF_KH keys at a time (32: the score and P registers of a 64-key step leave the
** compiler too few registers to overlap loads with mma; measured 1.02 ms against 1.20 ms for 64 on
** the 8B DFLASH layer, docs/performance.md; 64 with the lazy max below, P and P V still 32 keys at
** a time: no faster, 40 bytes of spills); K B-fragments by ldmatrix (non-transposed), V by
** ldmatrix.trans, each fragment feeding the warp's two m16 tiles. Per KH keys, a warp skips them
** when none of its rows sees any of them, and skips the per-element range test when all of its
** rows see all of them (warp-uniform tests on per-warp aggregates of the row ranges). The running
** max is kept in the log2 domain (scale folded into the FMAs) and moves lazily (TF_LAZY): the
** rescale of O and l runs only when some row of the warp gained more than 2^TF_LAZY, i.e. almost
** never after the first keys (row sums by mma against ones instead of FADDs: no faster).
** CTAs are issued heaviest first, kv heads interleaved (tc_unit). 128 threads.
** MT = 1 (warps of 16 rows, 64 a CTA) with CZ (CAUSAL only: each row's key range computed from its
** position, no range tables in shared memory) is the head_dim 256 forward of the GPUs without wgmma:
** Q (64 rows) and two stages of 32 keys take exactly 99 KB (101,376 bytes), and the O accumulators of
** 16 rows x 256 dims 128 registers a thread.
*/
#define TF_R 128
#ifndef TF_KH
#define TF_KH 32
#endif
#ifndef TF_LAZY
#define TF_LAZY 8
#endif
template <int HD, int KH = TF_KH, int KT = TC_KT, int MT = 2, bool CZ = false>
__device__ __forceinline__ void tc_fwd(tc_bf *o, float *lse, const tc_bf *q, const tc_bf *k1, const tc_bf *v1,
                                       const tc_bf *k2, const tc_bf *v2, const int *anchors, const int *keep, int mask,
                                       int batch, int S, int N, int B, int nh, int nkv, int W, float scale) {
  constexpr int SR = HD + 8, WR = 16 * MT, R = 4 * WR; /* WR rows a warp, 4 warps */
  extern __shared__ __align__(16) tc_bf tc_sm[];
  tc_bf *qs = tc_sm, *kvb = qs + R * SR; /* stage s: K at kvb + 2 s KT SR, V after it */
  int *rng = (int *)(kvb + 4 * KT * SR); /* [seg][lo, hi][R] */
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int G = nh / nkv, g, gi;
  tc_unit(&g, &gi);
  int P, lo0, hi0, hi1, n0 = 0, s0 = 0, PB = B * G;
  ll qrow0, kvrow1;
  if (!CZ && mask == 1) {
    int NB = R / PB, ngr = (N + NB - 1) / NB, b = gi / ngr;
    if (b >= batch) return;
    n0 = (gi % ngr) * NB;
    int nb = N - n0 < NB ? N - n0 : NB;
    P = nb * PB; qrow0 = ((ll)b * N + n0) * B; kvrow1 = (ll)b * S;
    anchors += (ll)b * N + n0; keep += (ll)b * N + n0;
    hi1 = dfl_unit_ctx(anchors, keep, nb, W, &lo0, &hi0) ? nb * B : 0;
  } else {
    int T = R / G, ups = (S + T - 1) / T, b = gi / ups;
    if (b >= batch) return;
    s0 = (gi % ups) * T;
    int U = S - s0 < T ? S - s0 : T;
    P = U * G; qrow0 = (ll)b * S + s0; kvrow1 = qrow0 - s0;
    int lo = W > 0 ? s0 - (W - 1) : 0;
    lo0 = lo < 0 ? 0 : lo; hi0 = s0 + U; hi1 = 0;
  }
  int nt0 = (hi0 - lo0 + KT - 1) / KT, nt = nt0 + (hi1 + KT - 1) / KT;
  constexpr int C = HD / 8; /* tc_load_seg_tile's 16-byte pieces: keys lr + RPI i, dims 8 ld8 .. */
  const int lr = threadIdx.x / C, ld8 = threadIdx.x % C;
  const ll kstep = (ll)(TF_R / C) * nkv * HD;
  auto load_tile = [&](int t) {
    tc_load_seg_tile<HD, KT, TF_R>(kvb, k1, v1, k2, v2, t, nt0, lo0, hi0, hi1, qrow0, kvrow1, nkv, g, lr, ld8, kstep);
  };
  tc_load_rows<HD>(qs, q, qrow0, G, g, P, R, nh);
  if (nt > 0) load_tile(0);
  tc_commit();
  /* allowed keys of every row, per segment (padding rows: none) */
  auto czr = [&](int r, int *lo, int *hi) { /* CZ: row r's context keys */
    const int s = s0 + r / G;
    *lo = r < P && W > 0 ? s - (W - 1) : 0; *hi = r < P ? s + 1 : 0;
  };
  for (int r = threadIdx.x; !CZ && r < R; r += blockDim.x) {
    int l0 = 0, h0 = 0, l1 = 0, h1 = 0;
    if (r < P) {
      if (mask == 1) {
        int bi = r / PB, j = (r / G) % B;
        if (keep[bi]) {
          int a = anchors[bi];
          l0 = W > 0 ? a + j - (W - 1) : 0; h0 = a;
          l1 = bi * B; h1 = bi * B + (W > 0 ? (j + 1 < B ? j + 1 : B) : B);
        }
      } else {
        int s = s0 + r / G;
        l0 = W > 0 ? s - (W - 1) : 0; h0 = s + 1;
      }
    }
    rng[r] = l0; rng[R + r] = h0; rng[2 * R + r] = l1; rng[3 * R + r] = h1;
  }
  __syncthreads();
  /* per-warp aggregates, per segment: union [ulo, uhi) of the nonempty rows, intersection [ilo, ihi)
  ** of all rows (kept in shared memory: registers are short; CZ: segment 0 only, in registers) */
  int *wag = rng + 4 * R + warp * 8, wcz[4];
#pragma unroll
  for (int sg = 0; sg < (CZ ? 1 : 2); sg++) {
    int r = warp * WR + lane % WR, l, h;
    if (CZ) czr(r, &l, &h);
    else l = rng[2 * sg * R + r], h = rng[(2 * sg + 1) * R + r];
    int v = r < P, ne = v && l < h;
    int a0 = __reduce_min_sync(0xffffffffu, ne ? l : 0x7fffffff), a1 = __reduce_max_sync(0xffffffffu, ne ? h : 0);
    int a2 = __reduce_max_sync(0xffffffffu, v ? l : -0x7fffffff);
    int a3 = __reduce_min_sync(0xffffffffu, v ? (l < h ? h : -0x7fffffff) : 0x7fffffff);
    if (CZ) { wcz[0] = a0; wcz[1] = a1; wcz[2] = a2; wcz[3] = a3; }
    else if (lane == 0) { wag[4 * sg] = a0; wag[4 * sg + 1] = a1; wag[4 * sg + 2] = a2; wag[4 * sg + 3] = a3; }
  }
  __syncwarp();
  const int gid = lane >> 2, t4 = lane & 3;
  float oacc[MT][HD / 8][4], m[2 * MT], l[2 * MT]; /* m: running max of the scores, log2 domain (scale folded in) */
#pragma unroll
  for (int i = 0; i < 2 * MT; i++) { m[i] = DFL_NINF; l[i] = 0.f; }
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int d = 0; d < HD / 8; d++) oacc[mt][d][0] = oacc[mt][d][1] = oacc[mt][d][2] = oacc[mt][d][3] = 0.f;
  const float sl2 = scale * TC_LOG2E;
  const tc_bf *qa = qs + warp * WR * SR + tc_aoff(lane, SR);
  const int koff = tc_koff(lane, SR), voff = tc_voff(lane, SR);
  for (int t = 0; t < nt; t++) {
    if (t + 1 < nt) {
      load_tile(t + 1);
      tc_commit();
      tc_wait<1>();
    } else {
      tc_wait<0>();
    }
    __syncthreads();
    int seg = t >= nt0, khi = seg ? hi1 : hi0;
    const int *wa = CZ ? wcz : wag + 4 * seg;
    int wuhi = wa[1];
#pragma unroll
    for (int hh = 0; hh < KT / KH; hh++) { /* KH keys at a time */
      int k0 = (seg ? (t - nt0) * KT : lo0 + t * KT) + hh * KH;
      if (k0 < wuhi && k0 < khi && k0 + KH > wa[0]) { /* some row of this warp sees some key of these */
        const int full = k0 >= wa[2] && k0 + KH <= wa[3]; /* full implies kn >= KH */
        const int kn = (khi < wuhi ? khi : wuhi) - k0;    /* keys past kn: no row of the warp sees them */
        const tc_bf *ks_ = kvb + (t & 1) * 2 * KT * SR + hh * KH * SR, *vs_ = ks_ + KT * SR;
        float s[MT][KH / 8][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
          for (int c = 0; c < KH / 8; c++) s[mt][c][0] = s[mt][c][1] = s[mt][c][2] = s[mt][c][3] = 0.f;
        /* branch free per 32 keys: keys past kn inside a computed 32 are masked (not full) or zero */
        if (KH > 32 && kn <= 32) tf_qk<HD, KH, 2, MT>(s, qa, ks_ + koff, kn);
        else tf_qk<HD, KH, KH / 16, MT>(s, qa, ks_ + koff, kn);
        if (!full) {
          const int *rl = rng + 2 * seg * R + warp * WR + gid, *rh = rl + R;
#pragma unroll
          for (int mt = 0; mt < MT; mt++) {
            int lo_[2], hi_[2];
            if (CZ) {
              czr(warp * WR + mt * 16 + gid, &lo_[0], &hi_[0]);
              czr(warp * WR + mt * 16 + gid + 8, &lo_[1], &hi_[1]);
            } else {
              lo_[0] = rl[mt * 16]; lo_[1] = rl[mt * 16 + 8]; hi_[0] = rh[mt * 16]; hi_[1] = rh[mt * 16 + 8];
            }
#pragma unroll
            for (int c = 0; c < KH / 8; c++)
#pragma unroll
              for (int e = 0; e < 4; e++) {
                int kv = k0 + c * 8 + 2 * t4 + (e & 1);
                if (!(kv >= lo_[e >> 1] && kv < hi_[e >> 1])) s[mt][c][e] = DFL_NINF;
              }
          }
        }
        /* Running max, lazily: it moves only when a row's new maximum exceeds it by more than TF_LAZY
        ** (log2 units), so p <= 2^TF_LAZY; the final O / l and lse = m ln2 + log l do not depend on
        ** which m was used. The rescale of O and l runs only when some row of the warp moved. */
        float mx[2 * MT];
        int need = 0;
#pragma unroll
        for (int i = 0; i < 2 * MT; i++) { /* row i: m tile i >> 1, half i & 1 */
          float v = DFL_NINF;
#pragma unroll
          for (int c = 0; c < KH / 8; c++) v = fmaxf(v, fmaxf(s[i >> 1][c][2 * (i & 1)], s[i >> 1][c][2 * (i & 1) + 1]));
          v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
          v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
          mx[i] = v * sl2;
          need |= mx[i] > m[i] + (float)TF_LAZY;
        }
        if (__any_sync(0xffffffffu, need)) {
#pragma unroll
          for (int i = 0; i < 2 * MT; i++) {
            float corr = 1.f;
            if (mx[i] > m[i] + (float)TF_LAZY) { corr = tc_ex2(m[i] - mx[i]); m[i] = mx[i]; } /* m = -inf: corr 0 */
            l[i] *= corr;
#pragma unroll
            for (int d = 0; d < HD / 8; d++) { oacc[i >> 1][d][2 * (i & 1)] *= corr; oacc[i >> 1][d][2 * (i & 1) + 1] *= corr; }
          }
        }
        float mu[2 * MT];
#pragma unroll
        for (int i = 0; i < 2 * MT; i++) mu[i] = m[i] == DFL_NINF ? 0.f : m[i]; /* nothing allowed yet: exp2(-inf - 0) = 0 */
#pragma unroll
        for (int ph = 0; ph < KH / 32; ph++) { /* P and P V 32 keys at a time: fewer live registers */
          if (ph == 0 || kn > 32) {
            unsigned pf[MT][2][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
              for (int cc = 0; cc < 4; cc++) {
                const int c = ph * 4 + cc;
                float p0 = tc_ex2(fmaf(s[mt][c][0], sl2, -mu[2 * mt])), p1 = tc_ex2(fmaf(s[mt][c][1], sl2, -mu[2 * mt]));
                float p2 = tc_ex2(fmaf(s[mt][c][2], sl2, -mu[2 * mt + 1])), p3 = tc_ex2(fmaf(s[mt][c][3], sl2, -mu[2 * mt + 1]));
                l[2 * mt] += p0 + p1; l[2 * mt + 1] += p2 + p3;
                pf[mt][cc >> 1][2 * (cc & 1)] = tc_pack(p0, p1);
                pf[mt][cc >> 1][2 * (cc & 1) + 1] = tc_pack(p2, p3);
              }
            tf_pv<HD, 32, 2, MT>(oacc, pf, vs_ + ph * 32 * SR + voff, 0);
          }
        }
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2 * MT; i++) {
    float lq = l[i];
    lq += __shfl_xor_sync(0xffffffffu, lq, 1);
    lq += __shfl_xor_sync(0xffffffffu, lq, 2);
    int r = warp * WR + (i >> 1) * 16 + gid + 8 * (i & 1);
    if (r >= P) continue;
    ll row = qrow0 + r / G;
    int h = g * G + r % G;
    float inv = lq > 0.f ? 1.f / lq : 0.f;
    tc_bf *op = o + row * nh * HD + (ll)h * HD + 2 * t4;
#pragma unroll
    for (int d = 0; d < HD / 8; d++)
      *(unsigned *)(op + d * 8) = tc_pack(oacc[i >> 1][d][2 * (i & 1)] * inv, oacc[i >> 1][d][2 * (i & 1) + 1] * inv);
    if (t4 == 0) lse[row * nh + h] = lq > 0.f ? m[i] * TC_LN2 + logf(lq) : DFL_NINF;
  }
}

/* D[row * nh + h] = sum_d dO * O. bf16 with hd / 8 a power of two <= 32 (the tensor-core path):
** hd / 8 lanes per (row, head), 16-byte loads; otherwise one warp per (row, head). */
extern "C" __global__ void __launch_bounds__(256) dfl_attn_bwd_dot(float *D, const void *o, const void *dout, int dt,
                                                                  ll pairs, int hd) {
  int lane = threadIdx.x & 31, L = hd >> 3;
  if (dt == DT_BF16 && (hd & 7) == 0 && L <= 32 && (L & (L - 1)) == 0 && (((unsigned long long)o | (unsigned long long)dout) & 15) == 0) {
    ll nth = (ll)gridDim.x * blockDim.x;
    /* whole warps step together (nth is a multiple of 32), so the shuffles see converged lanes */
    for (ll t = (ll)blockIdx.x * blockDim.x + threadIdx.x; t - lane < pairs * L; t += nth) {
      ll w = t / L;
      float s = 0.f;
      if (w < pairs) {
        uint4 a = *(const uint4 *)((const tc_bf *)o + w * hd + (t % L) * 8);
        uint4 b = *(const uint4 *)((const tc_bf *)dout + w * hd + (t % L) * 8);
        unsigned aw[4] = {a.x, a.y, a.z, a.w}, bw[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
        for (int i = 0; i < 4; i++)
          s += __uint_as_float(aw[i] << 16) * __uint_as_float(bw[i] << 16) +
               __uint_as_float(aw[i] & 0xffff0000u) * __uint_as_float(bw[i] & 0xffff0000u);
      }
      for (int off = L >> 1; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
      if (w < pairs && t % L == 0) D[w] = s;
    }
    return;
  }
  for (ll w = ((ll)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < pairs; w += ((ll)gridDim.x * blockDim.x) >> 5) {
    float s = 0.f;
    for (int d = lane; d < hd; d += 32) s += ldf(o, dt, w * hd + d) * ldf(dout, dt, w * hd + d);
    s = warp_sum(s);
    if (lane == 0) D[w] = s;
  }
}

/* Own-block keys of the query-major pass (tc_bwdq, wg_bwdq): dKn = scale dS^T Q, dVn = P^T dO over
** each block's rows. ps, dss: the own P and dS in shared memory, bf16 [row][key of its block]; at(v, r, d):
** Q (v 0) or dO (v 1) element (r, d) in shared memory, the callers' only difference (padded rows,
** swizzled tiles). B and B G multiples of 16 (the drafters): by mma, a warp per (block, 16 keys, dK or
** dV, 32 dims), dS^T / P^T A fragments by ldmatrix.trans of the [row][key] arrays, Q / dO B fragments
** by ldmatrix.trans; otherwise a thread owns 8 dims of a key (16-byte loads of Q and dO rows, 16-byte
** stores). Threads tix = 0 .. nthr - 1 (a multiple of 32) of the caller take part. */
template <int HD, class At>
__device__ __forceinline__ void tc_own_dkv(tc_bf *dk2, tc_bf *dv2, const tc_bf *ps, const tc_bf *dss, At at, int tix,
                                           int nthr, int nb, int B, int PB, ll qrow0, int nkv, int g, float scale) {
  const int lane = tix & 31, gid = lane >> 2, t4 = lane & 3;
  if ((B & 15) == 0 && (PB & 15) == 0) {
    const int mb = B / 16, nitem = nb * mb * 2 * (HD / 32), aof = tc_koff(lane, B);
    const int lr = (lane & 7) + ((lane >> 3) & 1) * 8, lc = (lane >> 4) * 8; /* tc_voff's row, column */
    for (int it = tix >> 5; it < nitem; it += nthr >> 5) {
      const int dc = it % (HD / 32), rest = it / (HD / 32), isv = rest & 1, bi = (rest >> 1) / mb, mt = (rest >> 1) % mb;
      const tc_bf *A = (isv ? ps : dss) + bi * PB * B + mt * 16 + aof;
      float acc[4][4];
#pragma unroll
      for (int n = 0; n < 4; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
      for (int kk = 0; kk < PB / 16; kk++) {
        unsigned af[4], b0[4], b1[4];
        const int r = bi * PB + kk * 16 + lr;
        tc_ldsm4t(af, A + kk * 16 * B);
        tc_ldsm4t(b0, at(isv, r, dc * 32 + lc));
        tc_ldsm4t(b1, at(isv, r, dc * 32 + 16 + lc));
        tc_mma(acc[0], af, b0[0], b0[1]);
        tc_mma(acc[1], af, b0[2], b0[3]);
        tc_mma(acc[2], af, b1[0], b1[1]);
        tc_mma(acc[3], af, b1[2], b1[3]);
      }
      const float sc = isv ? 1.f : scale;
      tc_bf *out = isv ? dv2 : dk2;
#pragma unroll
      for (int h = 0; h < 2; h++) {
        ll off = ((qrow0 + bi * B + mt * 16 + gid + 8 * h) * nkv + g) * HD + dc * 32 + 2 * t4;
#pragma unroll
        for (int n = 0; n < 4; n++) *(unsigned *)(out + off + n * 8) = tc_pack(acc[n][2 * h] * sc, acc[n][2 * h + 1] * sc);
      }
    }
  } else {
    for (int c = tix; c < nb * B * (HD / 8); c += nthr) {
      int key = c / (HD / 8), d8 = (c % (HD / 8)) * 8, bi = key / B, kk = key % B;
      float gk[8], gv[8];
#pragma unroll
      for (int i = 0; i < 8; i++) gk[i] = gv[i] = 0.f;
      for (int r = bi * PB; r < bi * PB + PB; r++) {
        float ds = __uint_as_float((unsigned)dss[r * B + kk] << 16), pp = __uint_as_float((unsigned)ps[r * B + kk] << 16);
        uint4 qv = *(const uint4 *)at(0, r, d8), dv = *(const uint4 *)at(1, r, d8);
        unsigned qw[4] = {qv.x, qv.y, qv.z, qv.w}, dw[4] = {dv.x, dv.y, dv.z, dv.w};
#pragma unroll
        for (int i = 0; i < 4; i++) { /* bf16 pair -> two floats: low half first */
          gk[2 * i] += ds * __uint_as_float(qw[i] << 16); gk[2 * i + 1] += ds * __uint_as_float(qw[i] & 0xffff0000u);
          gv[2 * i] += pp * __uint_as_float(dw[i] << 16); gv[2 * i + 1] += pp * __uint_as_float(dw[i] & 0xffff0000u);
        }
      }
      ll off = ((qrow0 + key) * nkv + g) * HD + d8;
      uint4 ko, vo;
      ko.x = tc_pack(gk[0] * scale, gk[1] * scale); ko.y = tc_pack(gk[2] * scale, gk[3] * scale);
      ko.z = tc_pack(gk[4] * scale, gk[5] * scale); ko.w = tc_pack(gk[6] * scale, gk[7] * scale);
      vo.x = tc_pack(gv[0], gv[1]); vo.y = tc_pack(gv[2], gv[3]); vo.z = tc_pack(gv[4], gv[5]); vo.w = tc_pack(gv[6], gv[7]);
      *(uint4 *)(dk2 + off) = ko; *(uint4 *)(dv2 + off) = vo;
    }
  }
}

/*
** Query-major DFLASH backward: dQ, and dKn/dVn of the own blocks. Same CTA geometry as the forward:
** 128 rows, NB = 128 / (B G) whole blocks n0 .. n0 + nb - 1 of one (sample, kv head), 4 warps of
** 32 rows (two m16 tiles, so every K/V fragment feeds two mma). The context segment is the union
** of the blocks' ranges, the own segment their nb B consecutive own keys (block i's rows see
** [i B, i B + B), window: [i B, i B + j + 1)). K/V tiles of 32 keys, double buffered; per tile
** and warp: S = Q K^T and dP = dO V^T (Q, dO fragments by ldmatrix from shared memory, 16
** independent accumulator chains), P and dS = P (dP - D) in registers, dQ += dS K (K by
** ldmatrix.trans). Own-block P and dS go to shared memory in bf16 ([row][key of its block]); after
** the loop dKn = scale dS^T Q and dVn = P^T dO over each block's rows (by mma when B and B G are
** multiples of 16, else 16-byte loads, 8 dims per thread). Rows of an invalid block have empty
** ranges: dq, dKn, dVn come out 0. 128 threads.
*/
#define TQ_KT 32
template <int HD, int KT = TQ_KT>
__device__ __forceinline__ void tc_bwdq(tc_bf *dq, tc_bf *dk2, tc_bf *dv2, const tc_bf *q, const tc_bf *k1,
                                        const tc_bf *v1, const tc_bf *k2, const tc_bf *v2, const int *anchors,
                                        const int *keep, const float *lse, const float *Dg, const tc_bf *dout,
                                        int batch, int S, int N, int B, int nh, int nkv, int W, float scale) {
  constexpr int SR = HD + 8, R = TF_R;
  extern __shared__ __align__(16) tc_bf tc_sm[];
  tc_bf *qs = tc_sm, *dos = qs + R * SR, *kvb = dos + R * SR; /* stage s: K at kvb + 2 s KT SR, V after it */
  int *rng = (int *)(kvb + 4 * KT * SR);                       /* [seg][lo, hi][R] */
  float *lsr = (float *)(rng + 4 * R), *dsr = lsr + R;         /* per row: lse (log2 domain), D */
  tc_bf *ps = (tc_bf *)(dsr + R), *dss = ps + R * B;            /* own-block P, dS: [R][B] bf16 */
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, t4 = lane & 3;
  const int G = nh / nkv;
  int g, gi;
  tc_unit(&g, &gi);
  const int PB = B * G, NB = R / PB, ngr = (N + NB - 1) / NB, b = gi / ngr;
  if (b >= batch) return;
  const int n0 = (gi % ngr) * NB, nb = N - n0 < NB ? N - n0 : NB, P = nb * PB;
  const ll qrow0 = ((ll)b * N + n0) * B, kvrow1 = (ll)b * S;
  anchors += (ll)b * N + n0; keep += (ll)b * N + n0;
  int lo0, hi0;
  const int hi1 = dfl_unit_ctx(anchors, keep, nb, W, &lo0, &hi0) ? nb * B : 0;
  const int nt0 = (hi0 - lo0 + KT - 1) / KT, nt = nt0 + (hi1 + KT - 1) / KT;
  constexpr int C = HD / 8; /* tc_load_seg_tile's 16-byte pieces: keys lr + RPI i, dims 8 ld8 .. */
  const int lr = threadIdx.x / C, ld8 = threadIdx.x % C;
  const ll kstep = (ll)(128 / C) * nkv * HD;
  auto load_tile = [&](int t) {
    tc_load_seg_tile<HD, KT, 128>(kvb, k1, v1, k2, v2, t, nt0, lo0, hi0, hi1, qrow0, kvrow1, nkv, g, lr, ld8, kstep);
  };
  tc_load_rows<HD>(qs, q, qrow0, G, g, P, R, nh);
  tc_load_rows<HD>(dos, dout, qrow0, G, g, P, R, nh);
  if (nt > 0) load_tile(0);
  tc_commit();
  /* allowed keys of every row, per segment (padding rows and invalid blocks: none) */
  for (int r = threadIdx.x; r < R; r += blockDim.x) {
    int l0 = 0, h0 = 0, l1 = 0, h1 = 0;
    if (r < P) {
      int bi = r / PB, j = (r / G) % B;
      if (keep[bi]) {
        int a = anchors[bi];
        l0 = W > 0 ? a + j - (W - 1) : 0; h0 = a;
        l1 = bi * B; h1 = bi * B + (W > 0 ? (j + 1 < B ? j + 1 : B) : B);
      }
    }
    rng[r] = l0; rng[R + r] = h0; rng[2 * R + r] = l1; rng[3 * R + r] = h1;
  }
  for (int c = threadIdx.x; c < R * B; c += blockDim.x) { ps[c] = 0; dss[c] = 0; }
  for (int r = threadIdx.x; r < R; r += blockDim.x) {
    ll idx = (qrow0 + r / G) * nh + g * G + r % G;
    lsr[r] = r < P ? lse[idx] * TC_LOG2E : 0.f;
    dsr[r] = r < P ? Dg[idx] : 0.f;
  }
  float dqa[2][HD / 8][4];
#pragma unroll
  for (int mt = 0; mt < 2; mt++)
#pragma unroll
    for (int d = 0; d < HD / 8; d++) dqa[mt][d][0] = dqa[mt][d][1] = dqa[mt][d][2] = dqa[mt][d][3] = 0.f;
  const float sl2 = scale * TC_LOG2E;
  const tc_bf *qa = qs + warp * 32 * SR + tc_aoff(lane, SR), *da = dos + warp * 32 * SR + tc_aoff(lane, SR);
  const int koff = tc_koff(lane, SR), voff = tc_voff(lane, SR);
  for (int t = 0; t < nt; t++) {
    if (t + 1 < nt) {
      load_tile(t + 1);
      tc_commit();
      tc_wait<1>();
    } else {
      tc_wait<0>();
    }
    __syncthreads();
    const int seg = t >= nt0, k0 = seg ? (t - nt0) * KT : lo0 + t * KT;
    const tc_bf *ks_ = kvb + (t & 1) * 2 * KT * SR, *vs_ = ks_ + KT * SR;
    float s[2][KT / 8][4], dp[2][KT / 8][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
      for (int c = 0; c < KT / 8; c++) {
        s[mt][c][0] = s[mt][c][1] = s[mt][c][2] = s[mt][c][3] = 0.f;
        dp[mt][c][0] = dp[mt][c][1] = dp[mt][c][2] = dp[mt][c][3] = 0.f;
      }
#pragma unroll
    for (int ks = 0; ks < HD / 16; ks++) {
      unsigned aq[2][4], ad[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; mt++) {
        tc_ldsm4(aq[mt], qa + mt * 16 * SR + ks * 16);
        tc_ldsm4(ad[mt], da + mt * 16 * SR + ks * 16);
      }
#pragma unroll
      for (int c2 = 0; c2 < KT / 16; c2++) {
        unsigned bk[4], bv[4];
        tc_ldsm4(bk, ks_ + c2 * 16 * SR + koff + ks * 16);
        tc_ldsm4(bv, vs_ + c2 * 16 * SR + koff + ks * 16);
#pragma unroll
        for (int mt = 0; mt < 2; mt++) {
          tc_mma(s[mt][2 * c2], aq[mt], bk[0], bk[1]);
          tc_mma(s[mt][2 * c2 + 1], aq[mt], bk[2], bk[3]);
          tc_mma(dp[mt][2 * c2], ad[mt], bv[0], bv[1]);
          tc_mma(dp[mt][2 * c2 + 1], ad[mt], bv[2], bv[3]);
        }
      }
    }
    const int *rl = rng + 2 * seg * R + warp * 32 + gid, *rh = rl + R;
    const float *lw = lsr + warp * 32 + gid, *dw = dsr + warp * 32 + gid;
#pragma unroll
    for (int mt = 0; mt < 2; mt++) {
      int lo_[2] = {rl[mt * 16], rl[mt * 16 + 8]}, hi_[2] = {rh[mt * 16], rh[mt * 16 + 8]};
      float lq[2] = {lw[mt * 16], lw[mt * 16 + 8]}, dq_[2] = {dw[mt * 16], dw[mt * 16 + 8]};
#pragma unroll
      for (int c = 0; c < KT / 8; c++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          int h = e >> 1, kv = k0 + c * 8 + 2 * t4 + (e & 1);
          float p = kv >= lo_[h] && kv < hi_[h] ? tc_ex2(s[mt][c][e] * sl2 - lq[h]) : 0.f;
          float d = p * (dp[mt][c][e] - dq_[h]);
          s[mt][c][e] = p; dp[mt][c][e] = d;
        }
    }
    if (seg) { /* own keys: keep P and dS of the keys of the row's block ([l1, h1) lies in it) */
#pragma unroll
      for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
          int r = warp * 32 + mt * 16 + gid + 8 * h, kb = r < P ? (r / PB) * B : 0;
#pragma unroll
          for (int c = 0; c < KT / 8; c++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
              int kk = k0 + c * 8 + 2 * t4 + e - kb;
              if (r < P && kk >= 0 && kk < B) {
                ps[r * B + kk] = (tc_bf)(tc_pack(s[mt][c][2 * h + e], 0.f) & 0xffffu);
                dss[r * B + kk] = (tc_bf)(tc_pack(dp[mt][c][2 * h + e], 0.f) & 0xffffu);
              }
            }
        }
    }
#pragma unroll
    for (int kk = 0; kk < KT / 16; kk++) { /* dQ += dS K, 16 keys at a time */
      unsigned a0[4], a1[4];
      tc_c2a(a0, dp[0][2 * kk], dp[0][2 * kk + 1]);
      tc_c2a(a1, dp[1][2 * kk], dp[1][2 * kk + 1]);
#pragma unroll
      for (int d2 = 0; d2 < HD / 16; d2++) {
        unsigned bk[4];
        tc_ldsm4t(bk, ks_ + kk * 16 * SR + voff + d2 * 16);
        tc_mma(dqa[0][2 * d2], a0, bk[0], bk[1]);
        tc_mma(dqa[0][2 * d2 + 1], a0, bk[2], bk[3]);
        tc_mma(dqa[1][2 * d2], a1, bk[0], bk[1]);
        tc_mma(dqa[1][2 * d2 + 1], a1, bk[2], bk[3]);
      }
    }
    __syncthreads();
  }
  tc_wait<0>(); /* no tile at all: the Q/dO group is still outstanding */
#pragma unroll
  for (int i = 0; i < 4; i++) {
    int r = warp * 32 + (i >> 1) * 16 + gid + 8 * (i & 1);
    if (r >= P) continue;
    tc_bf *p = dq + (qrow0 + r / G) * nh * HD + (ll)(g * G + r % G) * HD + 2 * t4;
#pragma unroll
    for (int d = 0; d < HD / 8; d++)
      *(unsigned *)(p + d * 8) = tc_pack(dqa[i >> 1][d][2 * (i & 1)] * scale, dqa[i >> 1][d][2 * (i & 1) + 1] * scale);
  }
  __syncthreads();
  /* own-block keys (tc_own_dkv): Q / dO rows padded to SR */
  tc_own_dkv<HD>(dk2, dv2, ps, dss, [&](int v, int r, int d) { return (v ? dos : qs) + r * SR + d; }, threadIdx.x, blockDim.x,
                 nb, B, PB, qrow0, nkv, g, scale);
}

/* Key-major passes (tc_bwdkv, wg_bwdkv), one warp: the blocks of sample b whose rows see some key of
** [k0, k0 + KT) (kept, anchor past k0, window reaching it), in order, into list and their anchors into
** lista; returns their count. */
__device__ __forceinline__ int tc_block_list(int *list, int *lista, const int *anchors, const int *keep, int b, int N,
                                             int k0, int KT, int W, int lane) {
  int c = 0;
  for (int base = 0; base < N; base += 32) {
    int n = base + lane, rel = 0, a = 0;
    if (n < N && keep[(ll)b * N + n]) {
      a = anchors[(ll)b * N + n];
      rel = k0 < a && (W == 0 || k0 + KT - 1 >= a - (W - 1));
    }
    unsigned bal = __ballot_sync(0xffffffffu, rel), at = c + __popc(bal & ((1u << lane) - 1u));
    if (rel) list[at] = n, lista[at] = a;
    c += __popc(bal);
  }
  return c;
}

/*
** Key-major DFLASH backward (FlashAttention-2 layout): one CTA of 8 warps per (128 context keys,
** sample, kv head) owns dKc/dVc of those keys and loops over the blocks whose rows see some of them,
** last block first (for full attention every CTA then reads the same block at about the same time,
** so Q/dO come from L2), 64 query rows (one row group of a block) per step:
**   phase A: S^T = K Q^T and dP^T = V dO^T, warp w: keys 32 (w & 3) .. + 31 x rows 32 (w >> 2) .. + 31
**            (every K/V fragment feeds four mma, every Q/dO fragment two); P^T and dS^T go to shared
**            memory in bf16 (key-major, the A operand of phase B);
**   phase B: dV += P^T dO, dK += dS^T Q, warp w: keys 32 (w & 3) .. + 31 x dims HD/2 (w >> 2) .. :
**            every dO/Q fragment feeds four mma, accumulators 2 x 32 keys x HD/2 dims per warp.
** Q/dO of the next step are staged by cp.async while this one computes, and so are its rows' lse and
** D (4-byte cp.async; the block list's anchors and the per-row global offsets are tables in shared
** memory built once): no synchronous global load and no division by G in the step loop (with lse and
** D loaded by plain loads, warps 0-1 started every step a global-memory latency late and the rest
** waited for them at the barrier: 4.11 -> 3.41 ms for the whole backward, docs/performance.md).
** Between phase A and B only the warp pair (w, w ^ 4) that shares 32 keys synchronizes (named
** barrier). A third Q/dO stage (one more step of load lead) measured no faster. Keys no block sees
** get 0.
*/
#define TK_KT 128 /* keys per CTA (8 warps) */
#define TK_RG 64  /* query rows per step: a block's rows in groups of 64, the last zero padded */
/* KT keys per CTA of NW warps, RG rows per step: warp w takes keys 32 (w % KG) .. + 31 (KG = KT / 32) and,
** of the RS = NW / KG warps sharing them, rows RW (w / KG) .. + RW - 1 in phase A (RW = RG / RS) and
** dims HD / RS (w / KG) .. in phase B. <HD, 128, 64, 8> is the layout above; <HD, 64, 32, 4> fits 99 KB
** of shared memory (81.7 KB + the block list at head_dim 128, against 176 KB). */
template <int HD, int KT = TK_KT, int RG = TK_RG, int NW = 8>
__device__ __forceinline__ void tc_bwdkv(tc_bf *dk1, tc_bf *dv1, const tc_bf *q, const tc_bf *k1, const tc_bf *v1,
                                         const int *anchors, const int *keep, const float *lse, const float *Dg,
                                         const tc_bf *dout, int batch, int S, int N, int B, int nh, int nkv, int W,
                                         float scale) {
  constexpr int SR = HD + 8, PR = RG + 8; /* PR: row stride of P^T / dS^T */
  constexpr int KG = KT / 32, RS = NW / KG, RW = RG / RS, DW = HD / RS; /* see above */
  static_assert(KT % 64 == 0 && NW % KG == 0 && RW % 16 == 0 && DW % 16 == 0, "tc_bwdkv layout");
  extern __shared__ __align__(16) tc_bf tc_sm[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, t4 = lane & 3;
  const int G = nh / nkv, P = B * G, ng = (P + RG - 1) / RG;
  /* heaviest tiles (small k0: most anchors lie past them) first, across every sample and head */
  const int tile = blockIdx.x / (batch * nkv), rem = blockIdx.x % (batch * nkv), b = rem / nkv, g = rem % nkv;
  const int k0 = tile * KT;
  tc_bf *ks_ = tc_sm, *vs_ = ks_ + KT * SR, *qb = vs_ + KT * SR; /* qb: [2][q, dO][RG][SR] */
  tc_bf *pt = qb + 4 * RG * SR, *dst = pt + KT * PR;              /* P^T, dS^T: [KT][PR] bf16 */
  float *ls = (float *)(dst + KT * PR), *dsv = ls + 2 * RG;
  int *lov = (int *)(dsv + 2 * RG), *rowoff = lov + 2 * RG, *rowj = rowoff + 128; /* per row of a block */
  int *cnt = rowj + 128, *anc = cnt + 1, *list = anc + 2, *lista = list + N;       /* blocks, their anchors */
#pragma unroll
  for (int h = 0; h < KT / TC_KT; h++)
    tc_load_kv<HD>(ks_ + h * TC_KT * SR, vs_ + h * TC_KT * SR, k1, v1, (ll)b * S, k0 + h * TC_KT, S, nkv, g);
  tc_commit();
  if (warp == 0) { /* the blocks whose rows see some key of the tile, in order */
    const int c = tc_block_list(list, lista, anchors, keep, b, N, k0, KT, W, lane);
    if (lane == 0) *cnt = c;
  }
  for (int r = threadIdx.x; r < 128; r += blockDim.x) { /* element offset of row r of a block (-1: padding) */
    rowoff[r] = r < P ? (r / G) * nh * HD + (r % G) * HD : -1;
    rowj[r] = r / G;
  }
  __syncthreads();
  const int nit = *cnt * ng;
  /* this thread's 16-byte pieces of a step's Q / dO rows: rows lr + RPI j, dims 8 ld8 .. */
  constexpr int C = HD / 8, RPI = NW * 32 / C, NI = RG / RPI;
  auto load_item = [&](int i, int s) { /* step i: block list[nl - 1 - i / ng], rows RG (i % ng) .. */
    const int li = *cnt - 1 - i / ng, n = list[li], r0 = (i % ng) * RG, a = lista[li];
    const ll base = ((ll)b * N + n) * B * nh * HD + (ll)g * G * HD;
    const int lr = threadIdx.x / C, ld8 = threadIdx.x % C;
    tc_bf *qd = qb + (2 * s) * RG * SR + lr * SR + ld8 * 8, *dd = qd + RG * SR;
#pragma unroll
    for (int j = 0; j < NI; j++) {
      const int off = rowoff[r0 + lr + j * RPI], ok = off >= 0;
      const ll o = ok ? base + off + ld8 * 8 : 0;
      tc_cp16(qd + j * RPI * SR, q + o, ok);
      tc_cp16(dd + j * RPI * SR, dout + o, ok);
    }
    if (threadIdx.x < RG) { /* lse (natural log), D; padding rows: lo = a, so p = 0 */
      const int r = threadIdx.x, R = r0 + r, off = rowoff[R], ok = off >= 0;
      const ll idx = ok ? (base + off) / HD : 0;
      tc_cp4(ls + s * RG + r, lse + idx, ok);
      tc_cp4(dsv + s * RG + r, Dg + idx, ok);
      lov[s * RG + r] = !ok ? a : W > 0 ? a + rowj[R] - (W - 1) : 0;
      if (r == 0) anc[s] = a;
    }
  };
  if (nit > 0) load_item(0, 0);
  tc_commit();
  const int kq = (warp % KG) * 32, rh = (warp / KG) * RW, dh = (warp / KG) * DW;
  float dka[2][DW / 8][4], dva[2][DW / 8][4]; /* [key m tile][dim n8 tile of this warp's share] */
#pragma unroll
  for (int m = 0; m < 2; m++)
#pragma unroll
    for (int d = 0; d < DW / 8; d++) {
      dka[m][d][0] = dka[m][d][1] = dka[m][d][2] = dka[m][d][3] = 0.f;
      dva[m][d][0] = dva[m][d][1] = dva[m][d][2] = dva[m][d][3] = 0.f;
    }
  const float sl2 = scale * TC_LOG2E;
  const int aoff = tc_aoff(lane, SR), koff = tc_koff(lane, SR), voff = tc_voff(lane, SR), poff = tc_aoff(lane, PR);
  for (int i = 0; i < nit; i++) {
    tc_wait<0>();
    __syncthreads(); /* step i staged; every warp is past step i - 1 (its stage and P^T/dS^T are free) */
    if (i + 1 < nit) load_item(i + 1, (i + 1) & 1);
    tc_commit();
    const int s = i & 1, a = anc[s];
    const tc_bf *qs = qb + (2 * s) * RG * SR, *dos = qb + (2 * s + 1) * RG * SR;
    { /* phase A */
      const float *lsb = ls + s * RG, *dsb = dsv + s * RG;
      const int *lob = lov + s * RG;
      float st[2][RW / 8][4], dt_[2][RW / 8][4]; /* [key m tile][row n8 tile][4] */
#pragma unroll
      for (int m = 0; m < 2; m++)
#pragma unroll
        for (int c = 0; c < RW / 8; c++) {
          st[m][c][0] = st[m][c][1] = st[m][c][2] = st[m][c][3] = 0.f;
          dt_[m][c][0] = dt_[m][c][1] = dt_[m][c][2] = dt_[m][c][3] = 0.f;
        }
#pragma unroll
      for (int ks = 0; ks < HD / 16; ks++) {
        unsigned ka[2][4], va[2][4], bq[RW / 16][4], bd[RW / 16][4];
#pragma unroll
        for (int m = 0; m < 2; m++) {
          tc_ldsm4(ka[m], ks_ + (kq + 16 * m) * SR + aoff + ks * 16);
          tc_ldsm4(va[m], vs_ + (kq + 16 * m) * SR + aoff + ks * 16);
        }
#pragma unroll
        for (int h = 0; h < RW / 16; h++) {
          tc_ldsm4(bq[h], qs + (rh + 16 * h) * SR + koff + ks * 16);
          tc_ldsm4(bd[h], dos + (rh + 16 * h) * SR + koff + ks * 16);
        }
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
          for (int h = 0; h < RW / 16; h++) {
            tc_mma(st[m][2 * h], ka[m], bq[h][0], bq[h][1]);
            tc_mma(st[m][2 * h + 1], ka[m], bq[h][2], bq[h][3]);
            tc_mma(dt_[m][2 * h], va[m], bd[h][0], bd[h][1]);
            tc_mma(dt_[m][2 * h + 1], va[m], bd[h][2], bd[h][3]);
          }
      }
#pragma unroll
      for (int c = 0; c < RW / 8; c++) {
        int r = rh + c * 8 + 2 * t4; /* rows r, r + 1 (8-byte aligned pairs) */
        float2 lv = *(const float2 *)(lsb + r), dv = *(const float2 *)(dsb + r);
        int2 lw = *(const int2 *)(lob + r);
        lv.x *= TC_LOG2E; lv.y *= TC_LOG2E;
#pragma unroll
        for (int m = 0; m < 2; m++) {
          float p[4], d[4];
#pragma unroll
          for (int e = 0; e < 4; e++) {
            int key = k0 + kq + 16 * m + gid + 8 * (e >> 1), lo = e & 1 ? lw.y : lw.x;
            p[e] = key < a && key >= lo ? tc_ex2(st[m][c][e] * sl2 - (e & 1 ? lv.y : lv.x)) : 0.f;
            d[e] = p[e] * (dt_[m][c][e] - (e & 1 ? dv.y : dv.x));
          }
          int o = (kq + 16 * m + gid) * PR + r;
          *(unsigned *)(pt + o) = tc_pack(p[0], p[1]);
          *(unsigned *)(pt + o + 8 * PR) = tc_pack(p[2], p[3]);
          *(unsigned *)(dst + o) = tc_pack(d[0], d[1]);
          *(unsigned *)(dst + o + 8 * PR) = tc_pack(d[2], d[3]);
        }
      }
    }
    /* P^T, dS^T of this warp's 32 keys complete: they come from the RS warps sharing them only */
    asm volatile("bar.sync %0, %1;" ::"r"(1 + warp % KG), "r"(32 * RS) : "memory");
    /* phase B */
#pragma unroll
    for (int kr = 0; kr < RG / 16; kr++) {
      unsigned pa[2][4], da[2][4];
#pragma unroll
      for (int m = 0; m < 2; m++) {
        tc_ldsm4(pa[m], pt + (kq + 16 * m) * PR + poff + kr * 16);
        tc_ldsm4(da[m], dst + (kq + 16 * m) * PR + poff + kr * 16);
      }
#pragma unroll
      for (int d2 = 0; d2 < DW / 16; d2++) {
        unsigned bv[4], bk[4];
        tc_ldsm4t(bv, dos + kr * 16 * SR + voff + dh + d2 * 16);
        tc_ldsm4t(bk, qs + kr * 16 * SR + voff + dh + d2 * 16);
#pragma unroll
        for (int m = 0; m < 2; m++) {
          tc_mma(dva[m][2 * d2], pa[m], bv[0], bv[1]);
          tc_mma(dva[m][2 * d2 + 1], pa[m], bv[2], bv[3]);
          tc_mma(dka[m][2 * d2], da[m], bk[0], bk[1]);
          tc_mma(dka[m][2 * d2 + 1], da[m], bk[2], bk[3]);
        }
      }
    }
  }
  tc_wait<0>(); /* no block at all: the K/V group is still outstanding */
#pragma unroll
  for (int m = 0; m < 2; m++)
#pragma unroll
    for (int i = 0; i < 2; i++) {
      int key = k0 + kq + 16 * m + gid + 8 * i;
      if (key >= S) continue;
      ll off = (((ll)b * S + key) * nkv + g) * HD + dh + 2 * t4;
#pragma unroll
      for (int d = 0; d < DW / 8; d++) {
        *(unsigned *)(dk1 + off + d * 8) = tc_pack(dka[m][d][2 * i] * scale, dka[m][d][2 * i + 1] * scale);
        *(unsigned *)(dv1 + off + d * 8) = tc_pack(dva[m][d][2 * i], dva[m][d][2 * i + 1]);
      }
    }
}

#define TC_FWD_ARGS                                                                                                \
  tc_bf *o, float *lse, const tc_bf *q, const tc_bf *k1, const tc_bf *v1, const tc_bf *k2, const tc_bf *v2,        \
      const int *anchors, const int *keep, int dt, int mask, int batch, int S, int N, int B, int nh, int nkv, int hd, \
      int window, float scale
#define TC_BWDQ_ARGS                                                                                               \
  tc_bf *dq, tc_bf *dk2, tc_bf *dv2, const tc_bf *q, const tc_bf *k1, const tc_bf *v1, const tc_bf *k2,            \
      const tc_bf *v2, const int *anchors, const int *keep, const float *lse, const float *D, const tc_bf *dout,   \
      int batch, int S, int N, int B, int nh, int nkv, int window, float scale
#define TC_BWDKV_ARGS                                                                                              \
  tc_bf *dk1, tc_bf *dv1, const tc_bf *q, const tc_bf *k1, const tc_bf *v1, const int *anchors, const int *keep,  \
      const float *lse, const float *D, const tc_bf *dout, int batch, int S, int N, int B, int nh, int nkv,        \
      int window, float scale
extern "C" __global__ void __launch_bounds__(128, 2) dfl_attn_fwd_tc64(TC_FWD_ARGS) {
  (void)dt; (void)hd;
  tc_fwd<64>(o, lse, q, k1, v1, k2, v2, anchors, keep, mask, batch, S, N, B, nh, nkv, window, scale);
}
extern "C" __global__ void __launch_bounds__(128, 2) dfl_attn_fwd_tc128(TC_FWD_ARGS) {
  (void)dt; (void)hd;
  tc_fwd<128>(o, lse, q, k1, v1, k2, v2, anchors, keep, mask, batch, S, N, B, nh, nkv, window, scale);
}
/* The same with stages of 32 keys (Q and two stages: 71.8 KB at head_dim 128, against 104 KB): what GPUs
** with 99 KB of shared memory a block run (RTX PRO 6000, RTX 50, L40S, sm_86), where the 64-key kernel
** above does not fit (runtime/cuda/attention.c att_tc, docs/gpus.md). */
extern "C" __global__ void __launch_bounds__(128, 2) dfl_attn_fwd_tc128s(TC_FWD_ARGS) {
  (void)dt; (void)hd;
  tc_fwd<128, TF_KH, 32>(o, lse, q, k1, v1, k2, v2, anchors, keep, mask, batch, S, N, B, nh, nkv, window, scale);
}
/* head_dim 256, CAUSAL only, where there is no wgmma (every row but Hopper's): 64 rows a CTA, stages of 32
** keys, 99 KB (the Qwen3.5/3.6 targets' gated attention; runtime/cuda/attention.c att_tc). */
extern "C" __global__ void __launch_bounds__(128) dfl_attn_fwd_tc256(TC_FWD_ARGS) {
  (void)dt; (void)hd;
  tc_fwd<256, TF_KH, 32, 1, true>(o, lse, q, k1, v1, k2, v2, anchors, keep, mask, batch, S, N, B, nh, nkv, window, scale);
}
extern "C" __global__ void __launch_bounds__(128, 2) dfl_attn_bwdq_tc64(TC_BWDQ_ARGS) {
  tc_bwdq<64>(dq, dk2, dv2, q, k1, v1, k2, v2, anchors, keep, lse, D, dout, batch, S, N, B, nh, nkv, window, scale);
}
extern "C" __global__ void __launch_bounds__(128, 2) dfl_attn_bwdq_tc128(TC_BWDQ_ARGS) {
  tc_bwdq<128>(dq, dk2, dv2, q, k1, v1, k2, v2, anchors, keep, lse, D, dout, batch, S, N, B, nh, nkv, window, scale);
}
extern "C" __global__ void __launch_bounds__(256) dfl_attn_bwdkv_tc64(TC_BWDKV_ARGS) {
  tc_bwdkv<64>(dk1, dv1, q, k1, v1, anchors, keep, lse, D, dout, batch, S, N, B, nh, nkv, window, scale);
}
extern "C" __global__ void __launch_bounds__(256) dfl_attn_bwdkv_tc128(TC_BWDKV_ARGS) {
  tc_bwdkv<128>(dk1, dv1, q, k1, v1, anchors, keep, lse, D, dout, batch, S, N, B, nh, nkv, window, scale);
}
/* 99 KB parts (and the A100's 163 KB, which the 128-key pass's 176 KB exceeds): the key-major pass with 64
** keys a CTA and 32-row steps on 4 warps, and the query-major pass at head_dim 128 with stages of 16 keys
** (96 KB at B 16, against 113 KB); runtime/cuda/attention.c att_tc picks them where the others do not fit. */
extern "C" __global__ void __launch_bounds__(128) dfl_attn_bwdkv_tc64s(TC_BWDKV_ARGS) {
  tc_bwdkv<64, 64, 32, 4>(dk1, dv1, q, k1, v1, anchors, keep, lse, D, dout, batch, S, N, B, nh, nkv, window, scale);
}
extern "C" __global__ void __launch_bounds__(128) dfl_attn_bwdkv_tc128s(TC_BWDKV_ARGS) {
  tc_bwdkv<128, 64, 32, 4>(dk1, dv1, q, k1, v1, anchors, keep, lse, D, dout, batch, S, N, B, nh, nkv, window, scale);
}
extern "C" __global__ void __launch_bounds__(128, 2) dfl_attn_bwdq_tc128s(TC_BWDQ_ARGS) {
  tc_bwdq<128, 16>(dq, dk2, dv2, q, k1, v1, k2, v2, anchors, keep, lse, D, dout, batch, S, N, B, nh, nkv, window, scale);
}

/*
** ---- Hopper path (sm_90a only): CAUSAL forward, bf16, head_dim 128, by wgmma.mma_async ----
** Same unit and row order as dfl_attn_fwd_tc128 (rows r = j G + h of T = R / G consecutive positions
** of one (sample, kv head), heaviest units first, kv heads interleaved: tc_unit), same semantics
** (scores in the log2 domain, lazy running max TF_LAZY, lse in natural log, rows past P unwritten),
** but with FlashAttention-3's structure (wg_fwd below): R = 128 rows per unit, a TMA producer
** warpgroup and two consumer warpgroups of 64 rows, persistent CTAs.
**   S = Q K^T   wgmma m64nKTk16, A = Q and B = K both from shared memory (K-major, 128-byte
**               swizzle: a 64-dim half of a row is one 128-byte line, its 16-byte chunks XORed
**               with line & 7; the two halves are separate [rows][64] blocks: what TMA's 128-byte
**               swizzle writes for a {64 dims, KT keys} box);
**   O += P V    wgmma m64n128k16, A = P from registers (the S accumulator layout is the A
**               fragment layout: tc_c2a), B = V from shared memory in the same layout as K, read
**               N-major (imm-trans-b: LBO = the 64-dim block stride, SBO = 8 keys).
** Iteration t (0 <= t <= nt) issues S_t = Q K_t^T and then O += P_{t-1} V_{t-1}, waits for S_t
** only, and runs the mask and softmax of tile t while the tensor cores do P_{t-1} V_{t-1} (and,
** ping-pong, the other consumer's GEMMs); the rare rescale of O waits for that product first. Only
** tiles crossing a row's range boundary are masked per element.
** Kept: KT 128, 2 K and 2 V slots, ping-pong, persistent (runtime/cuda/attention.c att_tc; the mma.sync
** kernel where the kernels are not built for sm_90a). Measured on the H200 (bench_attention CAUSAL S 4096, 32/8 heads, medians
** of 30, same run): 0.238 ms (578 TF/s) against 0.420 for the previous wgmma kernel (3 warpgroups
** of 64 rows, KT 64, every thread loading by cp.async, a CTA barrier per tile); not persistent 0.254;
** persistent with 3 slots 0.238; earlier run: not ping-pong 0.263 against 0.255. Registers: 240 per
** consumer thread (S, O and two P sets: 229 used, no spills), 24 for the producer. Other archs
** compile the kernels as empty stubs that the runtime never launches.
** head_dim 256 (dfl_attn_fwd_wg256, CAUSAL only: the hybrid targets' gated attention, GQA 24/4) takes the
** same kernel with HD a template argument: K/V tiles of 64 keys (four 64-dim TMA boxes each), O as two
** m64n128 accumulators (128 registers a thread). Measured on the H200 (bench_attention "causal S4096
** hd256 (27B target)", same process): 0.332 ms (621 TF/s) against 36.45 ms for the CUDA-core kernel it
** replaces; in the Qwen3.6-27B forward (dflc bench --target-only --ops) 84 ms for the 15 layers.
** The DFLASH forward (dfl_attn_fwd_wgd128: wg_fwd with DFL) and the query-major DFLASH backward
** (dfl_attn_bwdq_wg128: wg_bwdq) take the same structure. Measured on the H200 (bench_attention 20,
** 8B drafter layer: S 4096, N 512, B 16, 32/8 heads, same process as the mma.sync kernels): forward
** full 0.946 -> 0.511 ms (293 -> 542 TF/s), sliding W 2048 0.741 -> 0.442 ms (1.68x; 1.69-1.73x
** in two earlier runs); whole backward (bwd_dot + query-major + key-major) full 3.264 -> 2.862 ms,
** sliding 2.945 -> 2.665.
*/
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* Shared-memory matrix descriptor, 128-byte swizzle (start address, leading and stride byte offsets). */
__device__ __forceinline__ unsigned long long wg_desc(unsigned saddr, unsigned lbo, unsigned sbo) {
  return (unsigned long long)((saddr & 0x3ffffu) >> 4) | ((unsigned long long)((lbo & 0x3ffffu) >> 4) << 16) |
         ((unsigned long long)((sbo & 0x3ffffu) >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
/* Pin a register across an asynchronous wgmma (the compiler must not move or reuse it). */
__device__ __forceinline__ void wg_keep(float &x) { asm volatile("" : "+f"(x)::"memory"); }
__device__ __forceinline__ void wg_keepu(unsigned &x) { asm volatile("" : "+r"(x)::"memory"); }
__device__ __forceinline__ void wg_cp16(unsigned dst, const void *src, int ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0) : "memory");
}
/* The accumulator operands of an m64nN wgmma: N/2 f32 registers per thread, %0.. in order. */
#define WG_ACC32 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define WG_ACC64 WG_ACC32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define WG_D8(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                    "+f"(d[i + 6]), "+f"(d[i + 7])
#define WG_D32(d) WG_D8(d, 0), WG_D8(d, 8), WG_D8(d, 16), WG_D8(d, 24)
#define WG_D64(d) WG_D32(d), WG_D8(d, 32), WG_D8(d, 40), WG_D8(d, 48), WG_D8(d, 56)
/* D (+)= A B, A and B from shared memory (descriptors); SD 0: D = A B (scale-d) */
template <int SD> __device__ __forceinline__ void wg_ss64(float *d, unsigned long long da, unsigned long long db) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" WG_ACC32 "}, %32, %33, %34, 1, 1, 0, 0;"
               : WG_D32(d)
               : "l"(da), "l"(db), "n"(SD));
}
template <int SD> __device__ __forceinline__ void wg_ss128(float *d, unsigned long long da, unsigned long long db) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" WG_ACC64 "}, %64, %65, %66, 1, 1, 0, 0;"
               : WG_D64(d)
               : "l"(da), "l"(db), "n"(SD));
}
/* D += A B, A from registers (4 x 32 bits: a 64 x 16 bf16 fragment), B from shared memory read
** transposed (N-major) */
__device__ __forceinline__ void wg_rs128t(float *d, const unsigned *a, unsigned long long db) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" WG_ACC64 "}, {%64, %65, %66, %67}, %68, 1, 1, 1, 1;"
               : WG_D64(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
/* D = A B^T over 128 dims by eight m64n64k16 steps (no wait): A (64 rows) and B (64 rows) in the 128-byte
** swizzled layout, each as two [rows][64 dims] halves ah / bh bytes apart (the backward's S and dP) */
__device__ __forceinline__ void wg_abt64(float *d, unsigned a, unsigned ah, unsigned b, unsigned bh) {
#pragma unroll
  for (int k = 0; k < 8; k++) {
    unsigned long long da = wg_desc(a + (k >> 2) * ah + (k & 3) * 32, 16, 1024);
    unsigned long long db = wg_desc(b + (k >> 2) * bh + (k & 3) * 32, 16, 1024);
    if (k) wg_ss64<1>(d, da, db); else wg_ss64<0>(d, da, db);
  }
}
/* D (+)= A B, A from registers (a 64 x 16 bf16 fragment), B from shared memory K-major; SD 0: D = A B */
template <int SD> __device__ __forceinline__ void wg_rs64(float *d, const unsigned *a, unsigned long long db) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" WG_ACC32 "}, {%32, %33, %34, %35}, %36, %37, 1, 1, 0;"
               : WG_D32(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(SD));
}
/* wg_abt64 with A from registers: eight 64 x 16 fragments over the 128 dims */
__device__ __forceinline__ void wg_rbt64(float *d, const unsigned (*a)[4], unsigned b, unsigned bh) {
#pragma unroll
  for (int k = 0; k < 8; k++) {
    unsigned long long db = wg_desc(b + (k >> 2) * bh + (k & 3) * 32, 16, 1024);
    if (k) wg_rs64<1>(d, a[k], db); else wg_rs64<0>(d, a[k], db);
  }
}
/* mbarriers (shared::cta addresses) and named barriers */
__device__ __forceinline__ void mb_init(unsigned a, unsigned n) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(a), "r"(n) : "memory");
}
__device__ __forceinline__ void mb_arrive(unsigned a) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(a) : "memory");
}
/* The K/V pipeline barriers of wg_fwd and wg_bwdq: NSTG slots, each a K-full and a V-full barrier
** (the producer's arrive, plus the TMA bytes) and a K-empty and a V-empty one (each of the 256
** consumer threads, its wgmma on the slot done), 8 bytes each from shared address b. */
template <int NSTG>
struct wg_kvbars {
  unsigned b;
  __device__ __forceinline__ unsigned fk(int t) const { return b + (t % NSTG) * 8; }
  __device__ __forceinline__ unsigned fv(int t) const { return b + (NSTG + t % NSTG) * 8; }
  __device__ __forceinline__ unsigned ek(int t) const { return b + (2 * NSTG + t % NSTG) * 8; }
  __device__ __forceinline__ unsigned ev(int t) const { return b + (3 * NSTG + t % NSTG) * 8; }
  /* thread 0 initializes them all; every thread then waits at the barrier */
  __device__ __forceinline__ void init() const {
    if (threadIdx.x == 0) {
#pragma unroll
      for (int i = 0; i < NSTG; i++) {
        mb_init(fk(i), 1); mb_init(fv(i), 1);
        mb_init(ek(i), 256); mb_init(ev(i), 256);
      }
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
  }
};
__device__ __forceinline__ void mb_expect(unsigned a, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(a), "r"(bytes) : "memory");
}
/* until the phase of parity ph has completed (ph of the phase before the first: at once) */
__device__ __forceinline__ void mb_wait(unsigned a, unsigned ph) {
  asm volatile("{\n.reg .pred p;\nWAIT:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra WAIT;\n}"
               ::"r"(a), "r"(ph) : "memory");
}
__device__ __forceinline__ void nb_sync(int id, int n) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void nb_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory"); }
/* TMA: box {64 dims, 1 head, KT rows} of a 3-d tensor map {dim, head, row} into shared memory (128-byte
** swizzle, the layout of the wgmma operands), completing bytes on mbarrier mb */
__device__ __forceinline__ void wg_tma3(unsigned dst, const void *map, int c0, int c1, int c2, unsigned mb) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
               ::"r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(mb) : "memory");
}
/*
** FlashAttention-3 structure: warpgroup 0 is the producer (one thread issues the TMA copies of K/V
** tiles into NSTG-slot rings guarded by full/empty mbarriers; the warpgroup gives its registers away
** with setmaxnreg), warpgroups 1 and 2 are consumers of 64 rows each (R = 128 rows per CTA) with 240
** registers, which KT = 128 needs (S, O and two P sets). No CTA-wide barrier after the start: a
** consumer waits for "K_t full" / "V_t full" and frees each slot as soon as its wgmma have read it.
** tm: the K and V tensor maps (runtime/cuda.c att_tmaps), in global memory. PP: ping-pong, the two
** consumers take turns issuing their GEMMs (named barriers), so one's softmax runs under the other's
** GEMMs instead of both competing for the tensor cores at the same time. PERS: persistent CTAs (one
** per SM, grid.y 1) that walk the units (tc_unit's order, heaviest first) in a snake (round k takes
** units k C .. k C + C - 1, odd rounds reversed, C CTAs: the rounds' loads even out); the rings and
** the ping-pong run on across units, so the producer fetches a unit's first tiles and a consumer its
** Q while the previous unit finishes. Else one unit per CTA, as tc_unit.
** DFL: the DFLASH mask, units as dfl_attn_fwd_tc128's (NB = R / (B G) whole blocks n0 .. of one
** sample, rows r = j G + h per block, heaviest = last first). Tiles 0 .. nt0 - 1: the context union
** [lo0, hi0) of k1/v1 (maps 0, 1), as CAUSAL's keys; then one own tile: the nb B own keys of k2/v2
** (maps 2, 3: boxes of 32 rows, as many as the keys need), whose S is an m64n32/64/128 wgmma (the
** first 16/32/64 accumulator registers, the rest masked) and whose P V takes only its 16-key steps
** that hold keys. Per-row ranges: context [a + j - (W - 1), a) ([0, a) without a window), own
** [i B, i B + B) (window: up to j + 1) of the row's block i; invalid blocks: none (o 0, lse -inf).
** DFL 2 (MG): when the own keys are <= 32 and the last context tile holds <= 96 keys, the own keys
** ride in that tile's last 32 rows (context by 32-key boxes of maps 4, 5, the own box after them;
** columns 96 .. 127 masked with the own ranges): one tile step less per unit, the common case (a
** sliding window's context union is W - 1 + a few keys: 17 tiles of 128 + an own tile otherwise).
** Measured: 1% (0.516 -> 0.511 ms full, 0.444 -> 0.442 sliding, same process) against DFL 1 (the own
** keys always in a tile of their own, dfl_attn_fwd_wgd128s, deleted with its switch). An m64n32 S for the own tile instead
** (the rest of S masked) made ptxas spill 316 bytes: not kept.
*/
template <int N> struct wg_ic { static constexpr int v = N; };
template <int HD, int KT, int NSTG, int PP, int PERS, int DFL>
__device__ __forceinline__ void wg_fwd(tc_bf *o, float *lse, const tc_bf *q, const unsigned char *tm,
                                       const int *anchors, const int *keep, int batch, int S, int N, int B, int nh,
                                       int nkv, int W, float scale) {
  constexpr int R = 128, NS = KT / 2, MG = DFL == 2 && KT == 128, NO = HD / 2, NDB = HD / 64;
  /* bytes: Q of a warpgroup, one K or V tile, and their 64-dim blocks ([rows][64 dims] each) */
  constexpr unsigned QB = 64 * HD * 2, TB = KT * HD * 2, QBB = QB / NDB, TBB = TB / NDB;
  static_assert(HD == 128 || (HD == 256 && !DFL && KT == 64), "wg_fwd: head_dim 128, or 256 CAUSAL with 64-key tiles");
  extern __shared__ __align__(1024) unsigned char wg_sm[];
  const unsigned sm0 = tc_saddr(wg_sm), qs = (sm0 + 1023u) & ~1023u, ks = qs + 2 * QB, vs = ks + NSTG * TB,
                 bars = vs + NSTG * TB; /* K full, V full, K empty, V empty: NSTG 8-byte barriers each */
  const wg_kvbars<NSTG> kb{bars};
  const int G = nh / nkv, T = R / G, PB = B * G, NB = R / (PB > 0 ? PB : 1);
  const int ups = DFL ? (N + NB - 1) / NB : (S + T - 1) / T, units = batch * ups * nkv;
  /* a unit's geometry from its linear index L (tc_unit: kv head L % nkv, heaviest first): rows P,
  ** context keys from lo0 (k1/v1 row kvrow + key), nt0 context tiles, nown own keys (k2/v2 rows
  ** qrow0 ..), nt tiles in all (nt = nt0 with own keys: they are in the last context tile, MG);
  ** ab: the index of its first block in anchors/keep */
  struct unit { int g, s0, P, kvrow, lo0, nt0, nown, nt, ab; ll qrow0; };
  auto geom = [&](int L) {
    unit u;
    int gi = batch * ups - 1 - L / nkv, b = gi / ups;
    u.g = L % nkv; u.kvrow = b * S;
    if constexpr (DFL) {
      int n0 = (gi % ups) * NB, nb = N - n0 < NB ? N - n0 : NB, hi;
      u.s0 = 0; u.P = nb * PB; u.ab = b * N + n0; u.qrow0 = (ll)u.ab * B;
      u.nown = dfl_unit_ctx(anchors + u.ab, keep + u.ab, nb, W, &u.lo0, &hi) ? nb * B : 0;
      u.nt0 = (hi - u.lo0 + KT - 1) / KT;
      const int mg = MG && u.nown > 0 && u.nown <= 32 && u.nt0 > 0 && hi - u.lo0 - (u.nt0 - 1) * KT <= KT - 32;
      u.nt = u.nt0 + (u.nown > 0 && !mg);
    } else {
      u.s0 = (gi % ups) * T;
      int U = S - u.s0 < T ? S - u.s0 : T;
      u.P = U * G; u.ab = 0; u.nown = 0;
      u.qrow0 = (ll)b * S + u.s0;
      u.lo0 = W > 0 && u.s0 - (W - 1) > 0 ? u.s0 - (W - 1) : 0;
      u.nt = u.nt0 = (u.s0 + U - u.lo0 + KT - 1) / KT;
    }
    return u;
  };
  const int C = gridDim.x, c = blockIdx.x, L0 = PERS ? c : blockIdx.x + gridDim.x * blockIdx.y;
  auto next = [&](int L) { /* snake: the index after L (>= units: done) */
    if (!PERS) return units;
    int k = L / C + 1;
    return k * C + (k & 1 ? C - 1 - c : c);
  };
  if (L0 >= units) return;
  kb.init();
  if (threadIdx.x < 128) { /* producer: K_{j+1} before V_j, the order the consumers need them in */
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;" ::: "memory");
    if (threadIdx.x == 0) {
#pragma unroll
      for (int i = 0; i < (MG ? 6 : DFL ? 4 : 2); i++)
        asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(tm + 128 * i) : "memory");
      /* tile j of the unit (ring position it + j) of K (v 0) or V (v 1) into its slot: the two
      ** 64-dim halves, keys past the tensor zero filled (context keys in [hi0, lo0 + nt0 KT) are
      ** loaded, and masked by the consumers); DFLASH's own tile: 32-key boxes of k2/v2 */
      int it = 0; /* ring position of the unit's tile 0 */
      for (int L = L0; L < units; L = next(L)) {
        const unit u = geom(L);
        auto load = [&](int v, int j) {
          const int i = it + j;
          mb_wait(bars + (2 + v) * NSTG * 8 + (i % NSTG) * 8, ((i / NSTG) & 1) ^ 1);
          const unsigned fb = bars + v * NSTG * 8 + (i % NSTG) * 8, d = (v ? vs : ks) + (i % NSTG) * TB;
          /* pieces: a KT-key context box (map v), nc 32-key context boxes (map 4 + v), no own boxes
          ** (map 2 + v, after them; the consumers' S and P V read all 4 past 32 own keys) */
          const int mgd = MG && u.nown > 0 && u.nt == u.nt0 && j == u.nt0 - 1, ctx = !DFL || j < u.nt0;
          const int nc = mgd ? 3 : 0, no = mgd ? 1 : ctx ? 0 : u.nown <= 32 ? 1 : KT / 32;
          const int crow = u.kvrow + u.lo0 + j * KT;
          mb_expect(fb, ctx ? TB : no * 32 * 256);
          if (ctx && !mgd) {
#pragma unroll
            for (int db = 0; db < NDB; db++) wg_tma3(d + db * TBB, tm + 128 * v, 64 * db, u.g, crow, fb);
          }
          for (int x = 0; x < nc + no; x++) {
            const unsigned char *m = tm + (x < nc ? 512 : 256) + 128 * v;
            const int row = x < nc ? crow + 32 * x : (int)u.qrow0 + 32 * (x - nc);
            wg_tma3(d + x * 4096, m, 0, u.g, row, fb);
            wg_tma3(d + TB / 2 + x * 4096, m, 64, u.g, row, fb);
          }
        };
        if (u.nt > 0) load(0, 0);
        for (int j = 0; j < u.nt; j++) {
          if (j + 1 < u.nt) load(0, j + 1);
          load(1, j);
        }
        it += u.nt;
      }
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;" ::: "memory");
  const int wg = (threadIdx.x >> 7) - 1, tid = threadIdx.x & 127, lane = threadIdx.x & 31, gid = lane >> 2,
            t4 = lane & 3;
  /* Q of unit u: this warpgroup's rows r (line r % 64 of its two 64-dim blocks), by cp.async; waited
  ** for and fenced to the async proxy before the warpgroup's barrier at the unit's start */
  const unsigned qw = qs + wg * QB;
  auto load_q = [&](const unit &u) {
    for (int c = tid; c < 64 * (HD / 8); c += 128) {
      int rr = c / (HD / 8), ch = c % (HD / 8), r = wg * 64 + rr, ok = r < u.P;
      const tc_bf *src = ok ? q + ((u.qrow0 + r / G) * nh + u.g * G + r % G) * HD + ch * 8 : q;
      wg_cp16(qw + (ch >> 3) * QBB + rr * 128 + (((ch & 7) ^ (rr & 7)) << 4), src, ok);
    }
    tc_commit();
  };
  const float sl2 = scale * TC_LOG2E;
  /* ping-pong turns: named barrier 3 + w is warpgroup w's turn; each issue waits for its own turn
  ** and then gives the other one its turn (consumer 0 starts and, at the very end, takes the turn
  ** consumer 1's last issue gave it: both issue as often) */
  auto turn_wait = [&]() { if (PP) nb_sync(3 + wg, 256); };
  auto turn_give = [&]() { if (PP) nb_arrive(3 + (wg ^ 1), 256); };
  if (PP && wg == 0) nb_arrive(3, 256);
  float oacc[NO], m[2], l[2];
  int it = 0, rlo[2], rhi[2]; /* ring position of the unit's tile 0; allowed (context) keys [rlo, rhi)
                              ** of this thread's rows (padding rows: none) */
  auto keep_op = [&](unsigned (*pu)[4]) { /* O and the P operand in their registers around a P V */
#pragma unroll
    for (int i = 0; i < NO; i++) wg_keep(oacc[i]);
#pragma unroll
    for (int c = 0; c < KT / 16; c++) { wg_keepu(pu[c][0]); wg_keepu(pu[c][1]); wg_keepu(pu[c][2]); wg_keepu(pu[c][3]); }
  };
  auto issue_s = [&](float *s, int t) { /* S_t = Q K_t^T */
    const unsigned kb = ks + ((it + t) % NSTG) * TB;
#pragma unroll
    for (int k = 0; k < HD / 16; k++) {
      unsigned long long da = wg_desc(qw + (k >> 2) * QBB + (k & 3) * 32, 16, 1024);
      unsigned long long db = wg_desc(kb + (k >> 2) * TBB + (k & 3) * 32, 16, 1024);
      if constexpr (KT == 128) { if (k) wg_ss128<1>(s, da, db); else wg_ss128<0>(s, da, db); }
      else { if (k) wg_ss64<1>(s, da, db); else wg_ss64<0>(s, da, db); }
    }
    wg_commit();
  };
  /* O += P_t V_t over the tile's first NN keys (a wgmma skipped inside the loop by a run-time test
  ** makes ptxas fence every one of them: the count is a template argument) */
  auto issue_pv = [&](int t, unsigned (*pu)[4], auto nn) {
    constexpr int NN = decltype(nn)::v;
    const unsigned vb = vs + ((it + t) % NSTG) * TB;
    /* per 128 output dims (two 64-dim blocks of V, LBO the block stride) an m64n128 product */
#pragma unroll
    for (int c = 0; c < NN / 16; c++)
#pragma unroll
      for (int h = 0; h < HD / 128; h++) wg_rs128t(oacc + 64 * h, pu[c], wg_desc(vb + 2 * h * TBB + c * 2048, TBB, 1024));
    wg_commit();
  };
  /* mask (allowed keys [lo, hi) of the thread's two rows) and softmax of S_t (keys from k0) into P (A
  ** fragments); corr: the factor O still has to take. mgd: a merged tile, whose last 32 columns are
  ** own keys 0 .. 31, allowed where bit 8 i + 2 (c - 12) + e of om is set (row i, column 8 c + 2 t4 + e:
  ** one register instead of the own ranges, which made ptxas spill) */
  auto softmax = [&](float *s, int k0, const int *lo, const int *hi, unsigned (*pn)[4], float *corr, int mgd,
                     unsigned om) {
#pragma unroll
    for (int i = 0; i < NS; i++) wg_keep(s[i]);
#pragma unroll
    for (int i = 0; i < 2; i++)
      if (mgd || !(k0 >= lo[i] && k0 + KT <= hi[i])) {
#pragma unroll
        for (int c = 0; c < KT / 8; c++)
#pragma unroll
          for (int e = 0; e < 2; e++) {
            int kv = k0 + c * 8 + 2 * t4 + e, bad = kv < lo[i] || kv >= hi[i];
            if (MG && c >= KT / 8 - 4) bad = mgd ? !((om >> (8 * i + 2 * (c - (KT / 8 - 4)) + e)) & 1u) : bad;
            if (bad) s[4 * c + 2 * i + e] = DFL_NINF;
          }
      }
    /* lazy running max, as tc_fwd: moves only when a row gains more than TF_LAZY (log2 units) */
    float mu[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
      float v = DFL_NINF;
#pragma unroll
      for (int c = 0; c < KT / 8; c++) v = fmaxf(v, fmaxf(s[4 * c + 2 * i], s[4 * c + 2 * i + 1]));
      v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
      v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
      float mx = v * sl2;
      corr[i] = 1.f;
      if (mx > m[i] + (float)TF_LAZY) { corr[i] = tc_ex2(m[i] - mx); m[i] = mx; } /* m = -inf: corr 0 */
      l[i] *= corr[i];
      mu[i] = m[i] == DFL_NINF ? 0.f : m[i]; /* nothing allowed yet: exp2(-inf - 0) = 0 */
    }
#pragma unroll
    for (int c = 0; c < KT / 8; c++) {
      float p0 = tc_ex2(fmaf(s[4 * c], sl2, -mu[0])), p1 = tc_ex2(fmaf(s[4 * c + 1], sl2, -mu[0]));
      float p2 = tc_ex2(fmaf(s[4 * c + 2], sl2, -mu[1])), p3 = tc_ex2(fmaf(s[4 * c + 3], sl2, -mu[1]));
      l[0] += p0 + p1; l[1] += p2 + p3;
      pn[c >> 1][2 * (c & 1)] = tc_pack(p0, p1);
      pn[c >> 1][2 * (c & 1) + 1] = tc_pack(p2, p3);
    }
  };
  unsigned pa[KT / 16][4], pb[KT / 16][4];
  load_q(geom(L0));
  for (int L = L0; L < units;) {
    const unit u = geom(L);
    const int nxt = next(L);
    tc_wait<0>();
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    nb_sync(1 + wg, 128);
#pragma unroll
    for (int i = 0; i < 2; i++) {
      int r = wg * 64 + (tid >> 5) * 16 + gid + 8 * i;
      if constexpr (DFL) {
        int bi = r / PB, j = (r / G) % B, ok = r < u.P && keep[u.ab + bi], a = ok ? anchors[u.ab + bi] : 0;
        rlo[i] = W > 0 ? a + j - (W - 1) : 0;
        rhi[i] = a;
      } else {
        int s = u.s0 + r / G;
        rlo[i] = r < u.P && W > 0 ? s - (W - 1) : 0;
        rhi[i] = r < u.P ? s + 1 : 0;
      }
      m[i] = DFL_NINF; l[i] = 0.f;
    }
#pragma unroll
    for (int i = 0; i < NO; i++) oacc[i] = 0.f;
    /* tile t's S (its width for DFLASH's own tile) and softmax with its segment's row ranges */
    /* DFLASH's own tile: P V over its first 32 keys when the unit has no more (its S stays KT wide:
    ** an m64n32 S, the rest of S masked, made ptxas spill) */
    auto pv_tile = [&](int t, unsigned (*pu)[4]) {
      if (DFL && t >= u.nt0 && u.nown <= 32) issue_pv(t, pu, wg_ic<32>());
      else issue_pv(t, pu, wg_ic<KT>());
    };
    auto sm_tile = [&](float *s, int t, unsigned (*pn)[4], float *corr) {
      const int mgd = MG && u.nown > 0 && u.nt == u.nt0 && t == u.nt0 - 1, own = DFL && t >= u.nt0;
      int olo[2] = {0, 0}, ohi[2] = {0, 0};
      if (DFL && (own || mgd)) { /* own keys of the row's block i: [i B, i B + B), window: up to j + 1 */
#pragma unroll
        for (int i = 0; i < 2; i++) {
          int r = wg * 64 + (tid >> 5) * 16 + gid + 8 * i, bi = r / PB, j = (r / G) % B;
          int ok = r < u.P && keep[u.ab + bi];
          olo[i] = bi * B; ohi[i] = ok ? bi * B + (W > 0 ? j + 1 : B) : 0;
        }
      }
      unsigned om = 0;
      if (MG && mgd) {
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
          for (int c = 0; c < 4; c++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
              int ko = c * 8 + 2 * t4 + e;
              om |= (unsigned)(ko >= olo[i] && ko < ohi[i]) << (8 * i + 2 * c + e);
            }
      }
      const int lo[2] = {own ? olo[0] : rlo[0], own ? olo[1] : rlo[1]}, hi[2] = {own ? ohi[0] : rhi[0], own ? ohi[1] : rhi[1]};
      softmax(s, own ? 0 : u.lo0 + t * KT, lo, hi, pn, corr, mgd, om);
    };
    /* iteration t: S_t and P_{t-1} V_{t-1} in flight together, the softmax of S_t under the latter;
    ** K_t's slot is freed once S_t is done, V_{t-1}'s once the product is. P alternates between two
    ** register sets (pa: even tiles, pb: odd), never copied: a copy lets the register allocator
    ** merge the two, and ptxas then serializes the wgmma. */
    auto step = [&](int t, unsigned (*pu)[4], unsigned (*pw)[4]) {
      float s[NS], corr[2];
      mb_wait(kb.fk(it + t), ((it + t) / NSTG) & 1);
      turn_wait();
      keep_op(pu);
      wg_fence();
      issue_s(s, t);
      mb_wait(kb.fv(it + t - 1), ((it + t - 1) / NSTG) & 1);
      pv_tile(t - 1, pu);
      turn_give();
      wg_wait<1>();
      mb_arrive(kb.ek(it + t));
      sm_tile(s, t, pw, corr);
      wg_wait<0>();
      mb_arrive(kb.ev(it + t - 1));
      keep_op(pu);
      if (corr[0] != 1.f || corr[1] != 1.f) {
#pragma unroll
        for (int c = 0; c < HD / 8; c++) { oacc[4 * c] *= corr[0]; oacc[4 * c + 1] *= corr[0]; oacc[4 * c + 2] *= corr[1]; oacc[4 * c + 3] *= corr[1]; }
      }
    };
    auto last = [&](unsigned (*pu)[4]) { /* the last P V */
      const int t = u.nt - 1;
      mb_wait(kb.fv(it + t), ((it + t) / NSTG) & 1);
      turn_wait();
      keep_op(pu);
      wg_fence();
      pv_tile(t, pu);
      turn_give();
      wg_wait<0>();
      mb_arrive(kb.ev(it + t));
      keep_op(pu);
    };
    if (u.nt > 0) {
      { /* tile 0: S only (O is still 0, no rescale) */
        float s[NS], corr[2];
        mb_wait(kb.fk(it), (it / NSTG) & 1);
        turn_wait();
        wg_fence();
        issue_s(s, 0);
        turn_give();
        wg_wait<0>();
        mb_arrive(kb.ek(it));
        sm_tile(s, 0, pa, corr);
      }
      for (int t = 1; t < u.nt; t += 2) {
        step(t, pa, pb);
        if (t + 1 < u.nt) step(t + 1, pb, pa);
      }
      if (u.nt & 1) last(pa); else last(pb);
    }
    if (nxt < units) { /* the next unit's Q, under this one's epilogue */
      nb_sync(1 + wg, 128); /* every warp past its last wgmma reading Q */
      load_q(geom(nxt));
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
      float lq = l[i];
      lq += __shfl_xor_sync(0xffffffffu, lq, 1);
      lq += __shfl_xor_sync(0xffffffffu, lq, 2);
      int r = wg * 64 + (tid >> 5) * 16 + gid + 8 * i;
      if (r >= u.P) continue;
      ll row = u.qrow0 + r / G;
      int h = u.g * G + r % G;
      float inv = lq > 0.f ? 1.f / lq : 0.f;
      tc_bf *op = o + (row * nh + h) * HD + 2 * t4;
#pragma unroll
      for (int c = 0; c < HD / 8; c++) *(unsigned *)(op + c * 8) = tc_pack(oacc[4 * c + 2 * i] * inv, oacc[4 * c + 2 * i + 1] * inv);
      if (t4 == 0) lse[row * nh + h] = lq > 0.f ? m[i] * TC_LN2 + logf(lq) : DFL_NINF;
    }
    it += u.nt;
    L = nxt;
  }
  if (PP && wg == 0) nb_sync(3, 256); /* the turn consumer 1's last issue gave */
}
/*
** Query-major DFLASH backward by wgmma (dQ and the own blocks' dKn/dVn; tc_bwdq's semantics), in the
** forward's structure: units as dfl_attn_fwd_wgd128's (R = 128 rows: NB = R / (B G) whole blocks),
** a TMA producer warpgroup filling NSTG-slot K and V rings (tiles of 128 keys: the context union,
** then the own tile, by the forward's tensor maps), two consumer warpgroups of 64 rows in ping-pong.
** A consumer walks 64-key steps (the halves of a tile that hold keys of the unit's range):
**   S = Q K^T, dP = dO V^T   two m64n64 wgmma groups, B from shared memory; A: dO from shared memory
**                            (Q and dO of the warpgroup's rows stay there, swizzled as the forward's
**                            Q), Q from registers (QR: its fragments read once, 32 registers);
**   P = exp2(S scale log2e - lse log2e) on the row's allowed keys, dS = P (dP - D), in registers;
**   dQ += dS K               m64n128 wgmma, A = dS from registers (the accumulator layout is the A
**                            fragment layout), B = K read N-major, exactly the forward's P V.
** Step k issues S_k, dP_k and then dQ_{k-1}, waits for S_k and dP_k only, and computes P, dS of step k
** under dQ_{k-1} (and the other consumer's GEMMs); dS alternates between two register sets. V's slot
** is freed once the tile's last dP is done, K's once its last dQ is. Own keys: P and dS go to shared
** memory in bf16 ([row][key of its block]) and after the loop all 8 consumer warps form dKn = scale
** dS^T Q and dVn = P^T dO per block by mma.sync (tc_own_dkv, with the swizzled Q/dO addresses).
** One unit per CTA (not persistent: the own-block products need both warpgroups' Q and dO after
** the loop). k2 carries the tensor maps. Registers: S, dP (32 each), dQ (64), two dS sets (16 each),
** Q (32).
** Q from registers (session 18): per 64-key step each consumer read Q, K, dO, V and K again from shared
** memory (80 KB, and the ring's 32 KB of TMA writes, for 3 x 1 MFLOP: about what the SM's shared
** memory moves while its tensor cores do that work). Measured on the H200 (bench_attention 20, the
** query-major pass plus D, the key-major pass skipped by a timing switch since deleted, same process;
** QR 0, dfl_attn_bwdq_wg128s, deleted with its switch): 8B full 0.940 -> 0.902 ms, sliding 0.780 -> 0.747, 27B 0.604 -> 0.585; the whole
** backward 1.841 -> 1.798 ms (8B). dO from registers too (64 more: 124 bytes of spills): 0.916 ms.
*/
#define WQ_KT 128
#define WQ_NSTG 2
template <int PP, int QR>
__device__ __forceinline__ void wg_bwdq(tc_bf *dq, tc_bf *dk2, tc_bf *dv2, const tc_bf *q, const unsigned char *tm,
                                        const int *anchors, const int *keep, const float *lse, const float *Dg,
                                        const tc_bf *dout, int batch, int S, int N, int B, int nh, int nkv, int W,
                                        float scale) {
  constexpr int HD = 128, R = 128, KT = WQ_KT, NSTG = WQ_NSTG;
  constexpr unsigned QB = 64 * HD * 2, TB = KT * HD * 2; /* bytes: Q (or dO) of a warpgroup, one K or V tile */
  extern __shared__ __align__(1024) unsigned char wg_sm[];
  const unsigned sm0 = tc_saddr(wg_sm), qs = (sm0 + 1023u) & ~1023u, dos = qs + 2 * QB, ks = dos + 2 * QB,
                 vs = ks + NSTG * TB, bars = vs + NSTG * TB; /* K full, V full, K empty, V empty */
  tc_bf *ps = (tc_bf *)(wg_sm + (bars + 4 * NSTG * 8 - sm0)), *dss = ps + R * B; /* own-block P, dS: [R][B] */
  const wg_kvbars<NSTG> kb{bars};
  const int G = nh / nkv, PB = B * G, NB = R / PB, ups = (N + NB - 1) / NB, L = blockIdx.x;
  if (L >= batch * ups * nkv) return;
  /* the unit (as wg_fwd's geom with DFL) */
  const int gi = batch * ups - 1 - L / nkv, b = gi / ups, g = L % nkv, n0 = (gi % ups) * NB;
  const int nb = N - n0 < NB ? N - n0 : NB, P = nb * PB, ab = b * N + n0, kvrow = b * S;
  const ll qrow0 = (ll)ab * B;
  int lo0, hi0;
  const int nown = dfl_unit_ctx(anchors + ab, keep + ab, nb, W, &lo0, &hi0) ? nb * B : 0;
  const int nt0 = (hi0 - lo0 + KT - 1) / KT, nt = nt0 + (nown > 0);
  /* 64-key halves of tile t that hold keys: 2, or 1 for a last context tile of <= 64 keys and an own
  ** tile of <= 64 keys */
  auto halves = [&](int t) { return t < nt0 ? (hi0 - lo0 - t * KT > 64 ? 2 : 1) : (nown > 64 ? 2 : 1); };
  kb.init();
  if (threadIdx.x < 128) { /* producer: K_j and V_j, in tile order */
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;" ::: "memory");
    if (threadIdx.x == 0) {
#pragma unroll
      for (int i = 0; i < 4; i++)
        asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(tm + 128 * i) : "memory");
      for (int j = 0; j < nt; j++)
#pragma unroll
        for (int v = 0; v < 2; v++) {
          mb_wait(bars + (2 + v) * NSTG * 8 + (j % NSTG) * 8, ((j / NSTG) & 1) ^ 1);
          const unsigned fb = bars + v * NSTG * 8 + (j % NSTG) * 8, d = (v ? vs : ks) + (j % NSTG) * TB;
          if (j < nt0) {
            mb_expect(fb, TB);
            wg_tma3(d, tm + 128 * v, 0, g, kvrow + lo0 + j * KT, fb);
            wg_tma3(d + TB / 2, tm + 128 * v, 64, g, kvrow + lo0 + j * KT, fb);
          } else { /* the own tile: 32-key boxes, as many as the steps read (all 4 past 32 keys) */
            const int nbx = nown <= 32 ? 1 : KT / 32;
            mb_expect(fb, nbx * 32 * 256);
            for (int x = 0; x < nbx; x++) {
              wg_tma3(d + x * 4096, tm + 256 + 128 * v, 0, g, (int)qrow0 + 32 * x, fb);
              wg_tma3(d + TB / 2 + x * 4096, tm + 256 + 128 * v, 64, g, (int)qrow0 + 32 * x, fb);
            }
          }
        }
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;" ::: "memory");
  const int wg = (threadIdx.x >> 7) - 1, tid = threadIdx.x & 127, lane = threadIdx.x & 31, gid = lane >> 2,
            t4 = lane & 3;
  const unsigned qw = qs + wg * QB, dw = dos + wg * QB;
  for (int c = tid; c < 64 * 16; c += 128) { /* Q and dO of the warpgroup's rows, swizzled as wg_fwd's Q */
    int rr = c >> 4, ch = c & 15, r = wg * 64 + rr, ok = r < P;
    ll off = ok ? ((qrow0 + r / G) * nh + g * G + r % G) * HD + ch * 8 : 0;
    unsigned so = (ch >> 3) * (QB / 2) + rr * 128 + (((ch & 7) ^ (rr & 7)) << 4);
    wg_cp16(qw + so, q + off, ok);
    wg_cp16(dw + so, dout + off, ok);
  }
  tc_commit();
  for (int c = threadIdx.x - 128; c < R * B; c += 256) { ps[c] = 0; dss[c] = 0; }
  /* this thread's rows: allowed context keys [rlo, rhi) and own keys [olo, ohi); lse (log2), D */
  int rlo[2], rhi[2], olo[2], ohi[2];
  float lq[2], dd[2];
#pragma unroll
  for (int i = 0; i < 2; i++) {
    int r = wg * 64 + (tid >> 5) * 16 + gid + 8 * i, bi = r / PB, j = (r / G) % B;
    int ok = r < P && keep[ab + bi], a = ok ? anchors[ab + bi] : 0;
    rlo[i] = W > 0 ? a + j - (W - 1) : 0; rhi[i] = a;
    olo[i] = bi * B; ohi[i] = ok ? bi * B + (W > 0 ? j + 1 : B) : 0;
    ll idx = (qrow0 + r / G) * nh + g * G + r % G;
    lq[i] = r < P ? lse[idx] * TC_LOG2E : 0.f;
    dd[i] = r < P ? Dg[idx] : 0.f;
  }
  tc_wait<0>();
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  nb_sync(5, 256); /* Q, dO and the zeroed P / dS of both warpgroups */
  /* QR: Q's A fragments in registers (row gid (+ 8) of the warp's 16, dims 16 k + 2 t4 (+ 8) ..+1),
  ** read once from the swizzled tile */
  unsigned qa[QR ? 8 : 1][4];
  if (QR) {
#pragma unroll
    for (int k = 0; k < 8; k++)
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int rr = (tid >> 5) * 16 + gid + (i & 1) * 8, d = 16 * k + (i >> 1) * 8 + 2 * t4;
        qa[k][i] = *(const unsigned *)(wg_sm + (qw - sm0) + (d >> 6) * (QB / 2) + rr * 128 +
                                       ((((d & 63) >> 3) ^ (rr & 7)) << 4) + (d & 7) * 2);
      }
  }
  const float sl2 = scale * TC_LOG2E;
  auto turn_wait = [&]() { if (PP) nb_sync(3 + wg, 256); };
  auto turn_give = [&]() { if (PP) nb_arrive(3 + (wg ^ 1), 256); };
  if (PP && wg == 0) nb_arrive(3, 256);
  float dqa[64];
#pragma unroll
  for (int i = 0; i < 64; i++) dqa[i] = 0.f;
  auto keep_op = [&](unsigned (*du)[4]) {
#pragma unroll
    for (int i = 0; i < 64; i++) wg_keep(dqa[i]);
#pragma unroll
    for (int c = 0; c < 4; c++) { wg_keepu(du[c][0]); wg_keepu(du[c][1]); wg_keepu(du[c][2]); wg_keepu(du[c][3]); }
  };
  /* S and dP of half h of tile t */
  auto issue_sdp = [&](float *s, float *dp, int t, int h) {
    const unsigned kb = ks + (t % NSTG) * TB + h * 64 * 128, vb = vs + (t % NSTG) * TB + h * 64 * 128;
    if (QR) wg_rbt64(s, qa, kb, TB / 2);
    else wg_abt64(s, qw, QB / 2, kb, TB / 2);
    wg_abt64(dp, dw, QB / 2, vb, TB / 2);
    wg_commit();
  };
  /* dQ += dS K over half h of tile t: its first NN keys (32: an own tile of <= 32 keys, whose other
  ** K rows are not loaded) */
  auto issue_dq = [&](int t, int h, unsigned (*du)[4], auto nn) {
    constexpr int NN = decltype(nn)::v;
    const unsigned kb = ks + (t % NSTG) * TB + h * 64 * 128;
#pragma unroll
    for (int c = 0; c < NN / 16; c++) wg_rs128t(dqa, du[c], wg_desc(kb + c * 2048, TB / 2, 1024));
    wg_commit();
  };
  auto dq_step = [&](int t, int h, unsigned (*du)[4]) {
    if (t >= nt0 && nown <= 32) issue_dq(t, h, du, wg_ic<32>());
    else issue_dq(t, h, du, wg_ic<64>());
  };
  /* P and dS of half h of tile t into dS A fragments (own tile: also P, dS of the block's keys to
  ** shared memory) */
  auto grad = [&](float *s, float *dp, int t, int h, unsigned (*dn)[4]) {
#pragma unroll
    for (int i = 0; i < 32; i++) { wg_keep(s[i]); wg_keep(dp[i]); }
    const int own = t >= nt0, k0 = own ? h * 64 : lo0 + t * KT + h * 64;
    const int lo[2] = {own ? olo[0] : rlo[0], own ? olo[1] : rlo[1]}, hi[2] = {own ? ohi[0] : rhi[0], own ? ohi[1] : rhi[1]};
    const int full = k0 >= lo[0] && k0 + 64 <= hi[0] && k0 >= lo[1] && k0 + 64 <= hi[1];
#pragma unroll
    for (int c = 0; c < 8; c++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int i = e >> 1, kv = k0 + c * 8 + 2 * t4 + (e & 1);
        const int ok = full || (kv >= lo[i] && kv < hi[i]);
        float p = tc_ex2(fmaf(s[4 * c + e], sl2, -lq[i]));
        p = ok ? p : 0.f;
        s[4 * c + e] = p;
        dp[4 * c + e] = ok ? p * (dp[4 * c + e] - dd[i]) : 0.f;
      }
    if (own) {
#pragma unroll
      for (int i = 0; i < 2; i++) {
        const int r = wg * 64 + (tid >> 5) * 16 + gid + 8 * i;
#pragma unroll
        for (int c = 0; c < 8; c++)
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const int kk = k0 + c * 8 + 2 * t4 + e - olo[i];
            if (r < P && kk >= 0 && kk < B) {
              ps[r * B + kk] = (tc_bf)(tc_pack(s[4 * c + 2 * i + e], 0.f) & 0xffffu);
              dss[r * B + kk] = (tc_bf)(tc_pack(dp[4 * c + 2 * i + e], 0.f) & 0xffffu);
            }
          }
      }
    }
#pragma unroll
    for (int c = 0; c < 8; c++) {
      dn[c >> 1][2 * (c & 1)] = tc_pack(dp[4 * c], dp[4 * c + 1]);
      dn[c >> 1][2 * (c & 1) + 1] = tc_pack(dp[4 * c + 2], dp[4 * c + 3]);
    }
  };
  unsigned da_[4][4], db_[4][4];
  if (nt > 0) {
    int t = 0, h = 0; /* the step just issued */
    { /* step 0: S and dP only */
      float s[32], dp[32];
      mb_wait(kb.fk(0), 0);
      mb_wait(kb.fv(0), 0);
      turn_wait();
      wg_fence();
      issue_sdp(s, dp, 0, 0);
      turn_give();
      wg_wait<0>();
      if (halves(0) == 1) mb_arrive(kb.ev(0));
      grad(s, dp, 0, 0, da_);
    }
    /* step (t, h) after (pt, ph): S_k, dP_k, then dQ_{k-1} with du; the new dS into dn */
    auto step = [&](unsigned (*du)[4], unsigned (*dn)[4]) {
      const int pt = t, ph = h;
      if (h + 1 < halves(t)) h++;
      else { t++; h = 0; }
      float s[32], dp[32];
      if (h == 0) { mb_wait(kb.fk(t), (t / NSTG) & 1); mb_wait(kb.fv(t), (t / NSTG) & 1); }
      turn_wait();
      keep_op(du);
      wg_fence();
      issue_sdp(s, dp, t, h);
      dq_step(pt, ph, du);
      turn_give();
      wg_wait<1>();
      if (h + 1 == halves(t)) mb_arrive(kb.ev(t)); /* the tile's last dP done */
      grad(s, dp, t, h, dn);
      wg_wait<0>();
      if (ph + 1 == halves(pt)) mb_arrive(kb.ek(pt)); /* the tile's last dQ done */
      keep_op(du);
    };
    auto last = [&](unsigned (*du)[4]) {
      turn_wait();
      keep_op(du);
      wg_fence();
      dq_step(t, h, du);
      turn_give();
      wg_wait<0>();
      mb_arrive(kb.ek(t));
      keep_op(du);
    };
    for (;;) {
      if (t == nt - 1 && h + 1 == halves(t)) { last(da_); break; }
      step(da_, db_);
      if (t == nt - 1 && h + 1 == halves(t)) { last(db_); break; }
      step(db_, da_);
    }
  }
  if (PP && wg == 0) nb_sync(3, 256); /* the turn consumer 1's last issue gave */
#pragma unroll
  for (int i = 0; i < 2; i++) {
    int r = wg * 64 + (tid >> 5) * 16 + gid + 8 * i;
    if (r >= P) continue;
    tc_bf *p = dq + ((qrow0 + r / G) * nh + g * G + r % G) * HD + 2 * t4;
#pragma unroll
    for (int c = 0; c < 16; c++) *(unsigned *)(p + c * 8) = tc_pack(dqa[4 * c + 2 * i] * scale, dqa[4 * c + 2 * i + 1] * scale);
  }
  nb_sync(5, 256); /* every own P and dS stored */
  /* own-block keys (tc_own_dkv): Q / dO element (r, d) at (r / 64) QB + (d / 64) QB / 2 + (r % 64) 128 +
  ** 16 ((d % 64 / 8) ^ (r % 8)) + 2 (d % 8) of its swizzled tiles */
  auto swz = [&](int v, int r, int d) {
    return (const tc_bf *)(wg_sm + ((v ? dos : qs) - sm0) + (r >> 6) * QB + (d >> 6) * (QB / 2) + (r & 63) * 128 +
                           ((((d & 63) >> 3) ^ (r & 7)) << 4) + (d & 7) * 2);
  };
  tc_own_dkv<HD>(dk2, dv2, ps, dss, swz, threadIdx.x - 128, 256, nb, B, PB, qrow0, nkv, g, scale);
}
#endif
/* 384 threads: the producer warpgroup and two consumers. k2 (no key pointer the kernel reads) carries
** the tensor maps. */
#define WG_FWD_KERNEL(name, HD_, KT, NS, PP, PERS, DFL)                                                           \
  extern "C" __global__ void __launch_bounds__(384, 1) name(TC_FWD_ARGS) {                                      \
    (void)dt; (void)hd; (void)k1; (void)v1; (void)v2; (void)anchors; (void)keep; (void)mask; (void)N; (void)B;  \
    WG_FWD_BODY(HD_, KT, NS, PP, PERS, DFL)                                                                    \
  }
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_FWD_BODY(HD_, KT, NS, PP, PERS, DFL) \
  wg_fwd<HD_, KT, NS, PP, PERS, DFL>(o, lse, q, (const unsigned char *)k2, anchors, keep, batch, S, N, B, nh, nkv, window, scale);
#else
/* Outside sm_90a the wgmma kernels are stubs that keep one kernel table loadable on every GPU; the runtime
** never launches them there (dfl_gpu_arch.att), and one launched by mistake traps instead of leaving
** its output unwritten. */
#define WG_FWD_BODY(HD_, KT, NS, PP, PERS, DFL) (void)o; (void)lse; (void)q; (void)k2; (void)batch; (void)S; (void)nh; (void)nkv; (void)window; (void)scale; \
  __trap();
#endif
WG_FWD_KERNEL(dfl_attn_fwd_wg128, 128, 128, 2, 1, 1, 0)
WG_FWD_KERNEL(dfl_attn_fwd_wgd128, 128, 128, 2, 1, 1, 2)
/* head_dim 256 (the Qwen3.5/3.6 targets' gated attention), CAUSAL: 64-key tiles (a 256-dim tile of 128
** keys is 64 KB: four slots would not fit beside Q), O an m64n256 accumulator as two m64n128 halves */
WG_FWD_KERNEL(dfl_attn_fwd_wg256, 256, 64, 2, 1, 1, 0)
/* 384 threads, as the forward; k2 carries the tensor maps */
#define WG_BWDQ_KERNEL(name, QR)                                                                                  \
  extern "C" __global__ void __launch_bounds__(384, 1) name(TC_BWDQ_ARGS) {                                     \
    (void)k1; (void)v1; (void)v2;                                                                               \
    WG_BWDQ_BODY(QR)                                                                                           \
  }
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_BWDQ_BODY(QR) \
  wg_bwdq<1, QR>(dq, dk2, dv2, q, (const unsigned char *)k2, anchors, keep, lse, D, dout, batch, S, N, B, nh, nkv, window, scale);
#else
#define WG_BWDQ_BODY(QR) (void)dq; (void)dk2; (void)dv2; (void)q; (void)k2; (void)anchors; (void)keep; (void)lse; (void)D; \
  (void)dout; (void)batch; (void)S; (void)N; (void)B; (void)nh; (void)nkv; (void)window; (void)scale; __trap();
#endif
WG_BWDQ_KERNEL(dfl_attn_bwdq_wg128, 1)

/*
** ---- Hopper path (sm_90a only): DFLASH key-major backward (dKc/dVc), bf16, head_dim 128, by wgmma ----
** The work of dfl_attn_bwdkv_tc128 (a CTA per 128 context keys of one (sample, kv head), heaviest tiles
** first; it walks the blocks whose rows see some of its keys, last block first, 64 query rows a step;
** keys no block sees get 0) in wg_fwd's structure: warpgroup 0 produces, warpgroups 1 and 2 consume
** 64 keys each. K and V of the tile stay in shared memory for the whole CTA (one TMA box {64, 1, 128}
** per 64-dim half, 128-byte swizzled, K-major: wg_fwd's K tile layout). A step is a row group: 64 rows
** of one block (64 / G positions x G heads, row r = j G + h as the other kernels), one TMA box {64 dims,
** G heads, 64 / G positions} per 64-dim half of q and of dO (3-d maps {hd, nh, rows}); NSTG slots of
** Q, dO and the rows' lse (log2 domain), D and window start under full/empty mbarriers (thread 0 issues
** the TMA, warps 1-2 load lse and D by plain loads, a step ahead of the slot's release). Per step and
** consumer warpgroup (keys x rows = 64 x 64):
**   S^T = K Q^T, dP^T = V dO^T   wgmma m64n64k16, A = K / V and B = Q / dO, K-major, shared memory;
**   P^T = exp2(S^T scale log2e - lse log2e) on allowed (key, row), else 0; dS^T = P^T (dP^T - D);
**   dV += P^T dO, dK += dS^T Q   wgmma m64n128k16, A = P^T / dS^T from registers (the accumulator
**                                layout: tc_c2a), B = dO / Q read N-major (imm-trans-b, as V in wg_fwd).
** dK, dV: 64 f32 registers each per thread (232 per consumer thread, no spills), scaled (dK) and written
** bf16 at the end. Not persistent: the CTAs' work falls linearly with the tile (fewer anchors lie past
** it), and heaviest-first dispatch balances it over two waves or more (the 8B's S 4096: 256 CTAs, the 8
** tile-0 CTAs carry about the average load of an SM). With one wave (the 27B's S 2048: 128 CTAs on 132
** SMs) the pass would last as long as a tile-0 CTA, twice the average: then each tile's steps are shared
** by P CTAs (part pi: steps [nall pi / P, nall (pi + 1) / P)), which write f32 partial dK / dV to slabs
** of the op's scratch, added by dfl_attn_bwdkv_sum (runtime/cuda.c bwdkv_parts chooses P).
** Kept: 2 slots, SPLIT 0, PP 0 (runtime/cuda/attention.c att_tc; not on sm_90a: dfl_attn_bwdkv_tc128).
** Measured on the H200 (bench_attention, DFLASH S 4096 N 512, 32/8 heads, full attention, medians of 30,
** the key-major pass plus D = rowsum(dO O) (0.043 ms), the other pass skipped by a timing switch since deleted, same run): 0.939 ms against
** 1.983 for dfl_attn_bwdkv_tc128 (the pass alone 0.896 against 1.940 ms: 2.2x; 614 against 283 TF/s
** counting 4 GEMMs x 2 hd FLOPs per visible (row, context key) pair, 550 GFLOP);
** SPLIT 1 (S^T and dP^T in separate commit groups, P^T computed while dP^T runs and dV += P^T dO issued
** before dS^T: 12-16 bytes of spills) 0.968; PP 1 (the consumers take turns issuing, as wg_fwd) 0.962;
** 3 slots: no gain (whole backward 2.231 against 2.256 ms, within the run's noise).
*/
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <int NSTG, int SPLIT, int PP>
__device__ __forceinline__ void wg_bwdkv(tc_bf *dk1, tc_bf *dv1, const unsigned char *tm, const int *anchors,
                                         const int *keep, const float *lse, const float *Dg, int batch, int S, int N,
                                         int B, int nh, int nkv, int W, float scale, int P, float *part) {
  constexpr int HD = 128, KT = 128, RG = 64;
  constexpr unsigned KB = KT * HD * 2, QB = RG * HD * 2, MB = 3 * RG * 4; /* bytes: K or V; Q or dO; a slot's row data */
  extern __shared__ __align__(1024) unsigned char wg_sm[];
  const unsigned sm0 = tc_saddr(wg_sm), ks = (sm0 + 1023u) & ~1023u, vs = ks + KB, qs = vs + KB, /* slot i: Q at qs + 2 i QB, dO after */
                 ms = qs + 2 * NSTG * QB, bars = ms + NSTG * MB; /* K/V full, NSTG full, NSTG empty */
  float *mrow = (float *)(wg_sm + (ms - sm0));                   /* slot i: lse log2e, D, lo ([3][RG]) at mrow + 3 RG i */
  int *cnt = (int *)(wg_sm + (bars + (1 + 2 * NSTG) * 8 - sm0)), *list = cnt + 1, *lista = list + N;
  auto full = [&](int i) { return bars + 8 + (i % NSTG) * 8; };
  auto empty = [&](int i) { return bars + 8 + (NSTG + i % NSTG) * 8; };
  const int G = nh / nkv, ng = B * G / RG, PG = RG / G; /* row groups per block, positions per group */
  /* CTA: tile (heaviest first), then part pi, sample, kv head; part pi walks its share [i0, i0 + nit) of
  ** the tile's nall steps */
  const int per_t = P * batch * nkv, tile = blockIdx.x / per_t, r2 = blockIdx.x % per_t, pi = r2 / (batch * nkv),
            rem = r2 % (batch * nkv), b = rem / nkv, g = rem % nkv;
  const int k0 = tile * KT;
  if (threadIdx.x < 32) { /* the blocks whose rows see some key of the tile, in order (as tc_bwdkv) */
    const int lane = threadIdx.x;
    const int c = tc_block_list(list, lista, anchors, keep, b, N, k0, KT, W, lane);
    if (lane == 0) {
      *cnt = c;
      mb_init(bars, 1);
#pragma unroll
      for (int i = 0; i < NSTG; i++) {
        mb_init(full(i), 1 + RG); /* thread 0's arrive (+ the TMA bytes), the RG row-data threads */
        mb_init(empty(i), 256);   /* every consumer thread, its wgmma on the slot done */
      }
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
  }
  __syncthreads();
  const int nall = *cnt * ng, i0 = (int)((long long)nall * pi / P), nit = (int)((long long)nall * (pi + 1) / P) - i0;
  /* local step i (slot i % NSTG) is the tile's step i0 + i: block list[cnt - 1 - (i0 + i) / ng], its rows
  ** RG ((i0 + i) % ng) .. */
  if (threadIdx.x < 128) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;" ::: "memory");
    if (threadIdx.x == 0 && nit > 0) {
      /* the op's maps (runtime/cuda.c att_tmaps): k1, v1 (128-key boxes) first, q and dO last, 6 and 7 */
      const unsigned char *mk = tm, *mv = tm + 128, *mq = tm + 6 * 128, *md = tm + 7 * 128;
      const unsigned char *mps[4] = {mk, mv, mq, md};
#pragma unroll
      for (int i = 0; i < 4; i++) asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(mps[i]) : "memory");
      mb_expect(bars, 2 * KB);
      wg_tma3(ks, mk, 0, g, b * S + k0, bars);
      wg_tma3(ks + KB / 2, mk, 64, g, b * S + k0, bars);
      wg_tma3(vs, mv, 0, g, b * S + k0, bars);
      wg_tma3(vs + KB / 2, mv, 64, g, b * S + k0, bars);
      for (int i = 0; i < nit; i++) {
        const int row = (b * N + list[*cnt - 1 - (i0 + i) / ng]) * B + ((i0 + i) % ng) * PG;
        const unsigned d = qs + (i % NSTG) * 2 * QB;
        mb_wait(empty(i), ((i / NSTG) & 1) ^ 1);
        mb_expect(full(i), 2 * QB);
        wg_tma3(d, mq, 0, g * G, row, full(i));
        wg_tma3(d + QB / 2, mq, 64, g * G, row, full(i));
        wg_tma3(d + QB, md, 0, g * G, row, full(i));
        wg_tma3(d + QB + QB / 2, md, 64, g * G, row, full(i));
      }
    } else if (threadIdx.x >= 32 && threadIdx.x < 32 + RG) { /* row r's lse, D, window start */
      const int r = threadIdx.x - 32;
      for (int i = 0; i < nit; i++) {
        const int li = *cnt - 1 - (i0 + i) / ng, a = lista[li], j = ((i0 + i) % ng) * PG + r / G;
        const ll idx = ((ll)(b * N + list[li]) * B + j) * nh + g * G + r % G;
        const float l2 = lse[idx] * TC_LOG2E, dd = Dg[idx];
        float *m = mrow + (i % NSTG) * 3 * RG + r;
        mb_wait(empty(i), ((i / NSTG) & 1) ^ 1);
        m[0] = l2; m[RG] = dd; ((int *)m)[2 * RG] = W > 0 ? a + j - (W - 1) : 0;
        mb_arrive(full(i));
      }
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;" ::: "memory");
  const int wg = (threadIdx.x >> 7) - 1, tid = threadIdx.x & 127, lane = threadIdx.x & 31, gid = lane >> 2,
            t4 = lane & 3;
  float dka[64], dva[64];
#pragma unroll
  for (int i = 0; i < 64; i++) dka[i] = dva[i] = 0.f;
  if (nit > 0) mb_wait(bars, 0);
  const float sl2 = scale * TC_LOG2E;
  const int key0 = k0 + wg * 64 + (tid >> 5) * 16 + gid; /* this thread's keys: key0, key0 + 8 */
  const unsigned kw = ks + wg * 64 * 128, vw = vs + wg * 64 * 128; /* this warpgroup's 64 keys of each half */
  auto keep_acc = [&]() {
#pragma unroll
    for (int i = 0; i < 64; i++) { wg_keep(dka[i]); wg_keep(dva[i]); }
  };
  /* ping-pong (PP, with SPLIT 0): the warpgroups take turns issuing (named barrier 3 + w: warpgroup w's
  ** turn, as wg_fwd), so one's exponentials run under the other's GEMMs; consumer 1 skips its very last
  ** hand-over, which nobody would take */
  auto turn_wait = [&]() { if (PP) nb_sync(3 + wg, 256); };
  auto turn_give = [&](int final_) { if (PP && !(final_ && wg == 1)) nb_arrive(3 + (wg ^ 1), 256); };
  if (PP && wg == 0 && nit > 0) nb_arrive(3, 256);
  for (int i = 0; i < nit; i++) {
    const unsigned qb = qs + (i % NSTG) * 2 * QB, db = qb + QB;
    const float *m = mrow + (i % NSTG) * 3 * RG;
    const int a = lista[*cnt - 1 - (i0 + i) / ng];
    float s[32], dp[32];
    unsigned pu[4][4], du[4][4];
    mb_wait(full(i), (i / NSTG) & 1);
    turn_wait();
    keep_acc();
    wg_fence();
    wg_abt64(s, kw, KB / 2, qb, QB / 2);
    if (SPLIT) wg_commit();
    wg_abt64(dp, vw, KB / 2, db, QB / 2);
    wg_commit();
    turn_give(0);
    if (SPLIT) wg_wait<1>(); else wg_wait<0>();
#pragma unroll
    for (int x = 0; x < 32; x++) wg_keep(s[x]);
    /* P^T: element (key key0 + 8 h, row 8 c + 2 t4 + e) at s[4 c + 2 h + e]; a row sees keys [lo, a) */
#pragma unroll
    for (int c = 0; c < 8; c++) {
      const float2 l2 = *(const float2 *)(m + 8 * c + 2 * t4);
      const int2 lo = *(const int2 *)((const int *)m + 2 * RG + 8 * c + 2 * t4);
      float p[4];
#pragma unroll
      for (int x = 0; x < 4; x++) {
        const int key = key0 + 8 * (x >> 1), e = x & 1;
        p[x] = key < a && key >= (e ? lo.y : lo.x) ? tc_ex2(fmaf(s[4 * c + x], sl2, -(e ? l2.y : l2.x))) : 0.f;
        s[4 * c + x] = p[x];
      }
      pu[c >> 1][2 * (c & 1)] = tc_pack(p[0], p[1]);
      pu[c >> 1][2 * (c & 1) + 1] = tc_pack(p[2], p[3]);
    }
    if (SPLIT) { /* dV += P^T dO under dS^T's arithmetic */
      keep_acc();
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < 4; kk++) wg_rs128t(dva, pu[kk], wg_desc(db + kk * 2048, QB / 2, 1024));
      wg_commit();
      wg_wait<1>();
    }
#pragma unroll
    for (int x = 0; x < 32; x++) wg_keep(dp[x]);
#pragma unroll
    for (int c = 0; c < 8; c++) {
      const float2 dd = *(const float2 *)(m + RG + 8 * c + 2 * t4);
      float d[4];
#pragma unroll
      for (int x = 0; x < 4; x++) d[x] = s[4 * c + x] * (dp[4 * c + x] - (x & 1 ? dd.y : dd.x));
      du[c >> 1][2 * (c & 1)] = tc_pack(d[0], d[1]);
      du[c >> 1][2 * (c & 1) + 1] = tc_pack(d[2], d[3]);
    }
    turn_wait();
    keep_acc();
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
      if (!SPLIT) wg_rs128t(dva, pu[kk], wg_desc(db + kk * 2048, QB / 2, 1024));
      wg_rs128t(dka, du[kk], wg_desc(qb + kk * 2048, QB / 2, 1024));
    }
    wg_commit();
    turn_give(i == nit - 1);
    wg_wait<0>();
    keep_acc();
#pragma unroll
    for (int kk = 0; kk < 4; kk++) { wg_keepu(pu[kk][0]); wg_keepu(pu[kk][1]); wg_keepu(pu[kk][2]); wg_keepu(pu[kk][3]);
                                     wg_keepu(du[kk][0]); wg_keepu(du[kk][1]); wg_keepu(du[kk][2]); wg_keepu(du[kk][3]); }
    mb_arrive(empty(i));
  }
  /* element (key key0 + 8 h, dim 8 c + 2 t4 + e) at [4 c + 2 h + e]; split (P > 1): f32 partial sums of part
  ** pi into its slab (dfl_attn_bwdkv_sum adds the P slabs), every key written so no slab needs clearing */
  const ll slab = (ll)batch * S * nkv * HD;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int key = key0 + 8 * h;
    if (key >= S) continue;
    const ll off = (((ll)b * S + key) * nkv + g) * HD + 2 * t4;
    if (P > 1) {
      float *pk = part + pi * slab + off, *pv = part + (P + pi) * slab + off;
#pragma unroll
      for (int c = 0; c < 16; c++) {
        *(float2 *)(pk + c * 8) = make_float2(dka[4 * c + 2 * h] * scale, dka[4 * c + 2 * h + 1] * scale);
        *(float2 *)(pv + c * 8) = make_float2(dva[4 * c + 2 * h], dva[4 * c + 2 * h + 1]);
      }
      continue;
    }
#pragma unroll
    for (int c = 0; c < 16; c++) {
      *(unsigned *)(dk1 + off + c * 8) = tc_pack(dka[4 * c + 2 * h] * scale, dka[4 * c + 2 * h + 1] * scale);
      *(unsigned *)(dv1 + off + c * 8) = tc_pack(dva[4 * c + 2 * h], dva[4 * c + 2 * h + 1]);
    }
  }
}
#endif
/* 384 threads: the producer warpgroup and two consumers; tm: the op's tensor maps (K, V first, q and dO 7th and 8th: runtime/cuda.c
** att_tmaps). Grid: (S / 128 tiles) x batch x kv heads, as dfl_attn_bwdkv_tc128. */
#define WG_BWDKV_ARGS                                                                                              \
  tc_bf *dk1, tc_bf *dv1, const unsigned char *tm, const int *anchors, const int *keep, const float *lse,          \
      const float *D, int batch, int S, int N, int B, int nh, int nkv, int window, float scale, int P, float *part
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_BWDKV_BODY(NS, SP, PP) wg_bwdkv<NS, SP, PP>(dk1, dv1, tm, anchors, keep, lse, D, batch, S, N, B, nh, nkv, window, scale, P, part);
#else
#define WG_BWDKV_BODY(NS, SP, PP)                                                                                  \
  (void)dk1; (void)dv1; (void)tm; (void)anchors; (void)keep; (void)lse; (void)D; (void)batch; (void)S; (void)N;    \
  (void)B; (void)nh; (void)nkv; (void)window; (void)scale; (void)P; (void)part; __trap();
#endif
#define WG_BWDKV_KERNEL(name, NS, SP, PP) \
  extern "C" __global__ void __launch_bounds__(384, 1) name(WG_BWDKV_ARGS) { WG_BWDKV_BODY(NS, SP, PP) }
WG_BWDKV_KERNEL(dfl_attn_bwdkv_wg128, 2, 0, 0)

/* The split key-major pass (dfl_attn_bwdkv_wg128 with P > 1): dK = sum of the P f32 slabs of part, then
** dV from the next P; n elements each, bf16 out, 4 a thread (n % 4 == 0: hd 128). */
extern "C" __global__ void __launch_bounds__(256) dfl_attn_bwdkv_sum(tc_bf *dk1, tc_bf *dv1, const float *part, int P,
                                                                     ll n) {
  const ll n4 = n / 4;
  for (ll t = (ll)blockIdx.x * blockDim.x + threadIdx.x; t < 2 * n4; t += (ll)gridDim.x * blockDim.x) {
    const int v = t >= n4;
    const ll e = (t - v * n4) * 4;
    const float *src = part + (ll)v * P * n + e;
    float4 a = __ldcs((const float4 *)src);
    for (int q = 1; q < P; q++) {
      const float4 b = __ldcs((const float4 *)(src + q * n));
      a.x += b.x; a.y += b.y; a.z += b.z; a.w += b.w;
    }
    tc_bf *d = (v ? dv1 : dk1) + e;
    *(uint2 *)d = make_uint2(tc_pack(a.x, a.y), tc_pack(a.z, a.w));
  }
}
