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
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, dpl = (hd + 31) >> 5;
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
              int d = lane + 32 * t, dd = d < hd ? d : hd - 1;
              float a = dqa[r][t];
#pragma unroll 8
              for (int kk = 0; kk < 32; kk++) a += __shfl_sync(0xffffffffu, ds, kk) * ks[kk * (hd + 1) + dd];
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
      if (t < dpl && lane + 32 * t < hd) stf(dq, dt, off + lane + 32 * t, dqa[r][t] * scale);
  }
}

/*
** ---- Tensor-core path (bf16, head_dim 64 or 128): FlashAttention-2 style ----
** mma.sync.m16n8k16 bf16 -> f32, K/V (or Q/dO) tiles staged by cp.async into shared memory
** (double buffered), rows padded by 16 bytes so fragment loads and ldmatrix are conflict free.
** A warp owns 16 rows of the score tile. Scores live in the log2 domain (scale * log2 e folded in)
** so the softmax is ex2.approx; lse is stored in natural log like the reference.
**
** Row order in a CTA (DFLASH and CAUSAL alike): r = j * G + h, j the query position in the unit,
** h the head within the GQA group, so one staged K/V tile serves all G heads of the group.
** Every mask of reference §1.4 is an interval of keys per row, which is what the kernels test.
**
** Kernels (runtime/cuda.c picks them; f32 graphs and other head dims use the kernels above):
**   dfl_attn_fwd_tc{64,128}    forward, both masks; DFLASH: one CTA per (sample, block, kv head),
**                              B*G rows; CAUSAL: 128-row CTAs of 128/G positions.
**   dfl_attn_bwd_dot           D = rowsum(dO * O) per (row, head), f32.
**   dfl_attn_bwdq_tc{64,128}   DFLASH backward, query-major: dQ over context + own block, and the
**                              own block's dKn/dVn (only this CTA's rows see those keys).
**   dfl_attn_bwdkv_tc{64,128}  DFLASH backward, key-major: one CTA per (64 context keys, sample, kv
**                              head) loops over the blocks whose rows see its keys and owns dKc/dVc.
** No atomics: every output element has exactly one writer, and untouched keys are written 0.
*/
#define TC_KT 64
#define TC_LOG2E 1.4426950408889634f
#define TC_LN2 0.6931471805599453f
typedef unsigned short tc_bf;

__device__ __forceinline__ unsigned tc_saddr(const void *p) {
  unsigned r;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
  return r;
}
/* 16-byte async copy; ok == 0 zero-fills the destination (tails, padding rows). */
__device__ __forceinline__ void tc_cp16(void *dst, const void *src, int ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(tc_saddr(dst)), "l"(src), "r"(ok ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void tc_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int NG> __device__ __forceinline__ void tc_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(NG) : "memory"); }
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
__device__ __forceinline__ unsigned tc_ld32(const tc_bf *p) { return *(const unsigned *)p; }
/* A fragment (16 rows x 16 cols at p, row stride sr) for mma m16n8k16. */
__device__ __forceinline__ void tc_lda(unsigned *a, const tc_bf *p, int sr) {
  a[0] = tc_ld32(p); a[1] = tc_ld32(p + 8 * sr); a[2] = tc_ld32(p + 8); a[3] = tc_ld32(p + 8 * sr + 8);
}
/* The C fragments of two adjacent 8-column tiles as the A fragment of the next product. */
__device__ __forceinline__ void tc_c2a(unsigned *a, const float *c0, const float *c1) {
  a[0] = tc_pack(c0[0], c0[1]); a[1] = tc_pack(c0[2], c0[3]); a[2] = tc_pack(c1[0], c1[1]); a[3] = tc_pack(c1[2], c1[3]);
}
/* acc[HD/8][4] += A(16 x 16) @ M[16 rows at m][HD], M row-major with stride sr (ldmatrix.trans). */
template <int HD>
__device__ __forceinline__ void tc_mma_rowsT(float (*acc)[4], const unsigned *a, const tc_bf *m, int sr, int lane) {
  const tc_bf *base = m + ((lane & 7) + ((lane >> 3) & 1) * 8) * sr + (lane >> 4) * 8;
#pragma unroll
  for (int d2 = 0; d2 < HD / 16; d2++) {
    unsigned b[4];
    tc_ldsm4t(b, base + d2 * 16);
    tc_mma(acc[2 * d2], a, b[0], b[1]);
    tc_mma(acc[2 * d2 + 1], a, b[2], b[3]);
  }
}

/* Unit geometry shared by the forward and the query-major backward. */
struct tc_unit {
  int b, n, a, kp, s0, P, G, g;
  ll qrow0;
  int lo0, hi0, hi1; /* context segment [lo0, hi0), own-block segment [0, hi1) */
};
__device__ __forceinline__ int tc_setup(tc_unit *u, int mask, int batch, int S, int N, int B, int nh, int nkv,
                                        int W, const int *anchors, const int *keep, int R) {
  int G = nh / nkv;
  u->G = G; u->g = blockIdx.y; u->n = 0; u->a = 0; u->kp = 1; u->s0 = 0;
  if (mask == 1) {
    u->b = blockIdx.x / N; u->n = blockIdx.x % N;
    if (u->b >= batch) return 0;
    u->a = anchors[(ll)u->b * N + u->n]; u->kp = keep[(ll)u->b * N + u->n] != 0;
    u->P = B * G; u->qrow0 = (ll)u->b * N * B + (ll)u->n * B;
    u->hi0 = u->kp ? u->a : 0;
    int lo = W > 0 ? u->a - (W - 1) : 0;
    u->lo0 = lo < 0 ? 0 : lo > u->hi0 ? u->hi0 : lo;
    u->hi1 = u->kp ? B : 0;
  } else {
    int T = R / G, ups = (S + T - 1) / T;
    u->b = blockIdx.x / ups; u->s0 = (blockIdx.x % ups) * T;
    if (u->b >= batch) return 0;
    int U = S - u->s0 < T ? S - u->s0 : T;
    u->P = U * G; u->qrow0 = (ll)u->b * S + u->s0;
    int lo = W > 0 ? u->s0 - (W - 1) : 0;
    u->lo0 = lo < 0 ? 0 : lo; u->hi0 = u->s0 + U; u->hi1 = 0;
  }
  return 1;
}
/* Allowed keys [lo, hi) of row j in segment seg (reference §1.4; CAUSAL has segment 0 only). */
__device__ __forceinline__ void tc_row_range(const tc_unit *u, int mask, int W, int B, int j, int seg, int *lo, int *hi) {
  if (!u->kp) { *lo = *hi = 0; return; }
  if (mask == 1) {
    if (seg == 0) { *lo = W > 0 ? u->a + j - (W - 1) : 0; *hi = u->a; }
    else { *lo = 0; *hi = W > 0 ? (j + 1 < B ? j + 1 : B) : B; }
  } else {
    int s = u->s0 + j;
    *lo = W > 0 ? s - (W - 1) : 0; *hi = s + 1;
  }
}
/* Tile t of the unit's key sequence: context tiles first, then the own block. */
__device__ __forceinline__ void tc_tile(const tc_unit *u, int nt0, int t, int *seg, int *k0, int *khi) {
  if (t < nt0) { *seg = 0; *k0 = u->lo0 + t * TC_KT; *khi = u->hi0; }
  else { *seg = 1; *k0 = (t - nt0) * TC_KT; *khi = u->hi1; }
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

template <int HD>
__device__ __forceinline__ void tc_fwd(tc_bf *o, float *lse, const tc_bf *q, const tc_bf *k1, const tc_bf *v1,
                                       const tc_bf *k2, const tc_bf *v2, const int *anchors, const int *keep, int mask,
                                       int batch, int S, int N, int B, int nh, int nkv, int W, float scale) {
  constexpr int SR = HD + 8;
  extern __shared__ __align__(16) tc_bf tc_sm[];
  int nw = blockDim.x >> 5, R = nw * 16, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, t4 = lane & 3;
  tc_unit u;
  if (!tc_setup(&u, mask, batch, S, N, B, nh, nkv, W, anchors, keep, R)) return;
  int G = u.G, g = u.g;
  int nt0 = (u.hi0 - u.lo0 + TC_KT - 1) / TC_KT, nt = nt0 + (u.hi1 + TC_KT - 1) / TC_KT;
  ll kvrow1 = (ll)u.b * S, kvrow2 = u.qrow0; /* context rows by sample; own-block rows = query rows */
  /* Q through shared memory into registers; the space is then reused for K/V */
  tc_load_rows<HD>(tc_sm, q, u.qrow0, G, g, u.P, R, nh);
  tc_commit();
  tc_wait<0>();
  __syncthreads();
  unsigned qf[HD / 16][4];
#pragma unroll
  for (int ks = 0; ks < HD / 16; ks++) tc_lda(qf[ks], tc_sm + (warp * 16 + gid) * SR + ks * 16 + 2 * t4, SR);
  __syncthreads();
  tc_bf *kvb = tc_sm; /* stage s: K at kvb + 2 s KT SR, V after it */
  int jr[2];
  jr[0] = (warp * 16 + gid) / G; jr[1] = (warp * 16 + gid + 8) / G;
  float oacc[HD / 8][4], m[2] = {DFL_NINF, DFL_NINF}, l[2] = {0.f, 0.f};
#pragma unroll
  for (int d = 0; d < HD / 8; d++) oacc[d][0] = oacc[d][1] = oacc[d][2] = oacc[d][3] = 0.f;
  const float sl2 = scale * TC_LOG2E;
  if (nt > 0) {
    int seg, k0, khi;
    tc_tile(&u, nt0, 0, &seg, &k0, &khi);
    tc_load_kv<HD>(kvb, kvb + TC_KT * SR, seg ? k2 : k1, seg ? v2 : v1, seg ? kvrow2 : kvrow1, k0, khi, nkv, g);
    tc_commit();
  }
  for (int t = 0; t < nt; t++) {
    int seg, k0, khi;
    if (t + 1 < nt) {
      tc_tile(&u, nt0, t + 1, &seg, &k0, &khi);
      tc_bf *kd = kvb + ((t + 1) & 1) * 2 * TC_KT * SR;
      tc_load_kv<HD>(kd, kd + TC_KT * SR, seg ? k2 : k1, seg ? v2 : v1, seg ? kvrow2 : kvrow1, k0, khi, nkv, g);
      tc_commit();
      tc_wait<1>();
    } else {
      tc_wait<0>();
    }
    __syncthreads();
    tc_tile(&u, nt0, t, &seg, &k0, &khi);
    const tc_bf *ks_ = kvb + (t & 1) * 2 * TC_KT * SR, *vs_ = ks_ + TC_KT * SR;
    int kn = khi - k0;
    int lo[2], hi[2];
    tc_row_range(&u, mask, W, B, jr[0], seg, &lo[0], &hi[0]);
    tc_row_range(&u, mask, W, B, jr[1], seg, &lo[1], &hi[1]);
    float s[TC_KT / 8][4];
#pragma unroll
    for (int c = 0; c < TC_KT / 8; c++) {
      s[c][0] = s[c][1] = s[c][2] = s[c][3] = 0.f;
      if (c * 8 < kn) {
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++) {
          const tc_bf *p = ks_ + (c * 8 + gid) * SR + ks * 16 + 2 * t4;
          tc_mma(s[c], qf[ks], tc_ld32(p), tc_ld32(p + 8));
        }
      }
    }
    float mx[2] = {DFL_NINF, DFL_NINF};
#pragma unroll
    for (int c = 0; c < TC_KT / 8; c++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int i = e >> 1, kv = k0 + c * 8 + 2 * t4 + (e & 1);
        float x = kv >= lo[i] && kv < hi[i] ? s[c][e] * sl2 : DFL_NINF;
        s[c][e] = x;
        mx[i] = fmaxf(mx[i], x);
      }
    float mu[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
      float mn = fmaxf(m[i], mx[i]);
      mu[i] = mn == DFL_NINF ? 0.f : mn; /* a row with nothing allowed yet: exp2(-inf - 0) = 0 */
      float corr = tc_ex2(m[i] - mu[i]);
      m[i] = mn;
      l[i] *= corr;
#pragma unroll
      for (int d = 0; d < HD / 8; d++) { oacc[d][2 * i] *= corr; oacc[d][2 * i + 1] *= corr; }
    }
#pragma unroll
    for (int c = 0; c < TC_KT / 8; c++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        float p = tc_ex2(s[c][e] - mu[e >> 1]);
        l[e >> 1] += p;
        s[c][e] = p;
      }
#pragma unroll
    for (int kk = 0; kk < TC_KT / 16; kk++) {
      if (kk * 16 < kn) {
        unsigned a[4];
        tc_c2a(a, s[2 * kk], s[2 * kk + 1]);
        tc_mma_rowsT<HD>(oacc, a, vs_ + kk * 16 * SR, SR, lane);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; i++) {
    float lq = l[i];
    lq += __shfl_xor_sync(0xffffffffu, lq, 1);
    lq += __shfl_xor_sync(0xffffffffu, lq, 2);
    int r = warp * 16 + gid + 8 * i;
    if (r >= u.P) continue;
    ll row = u.qrow0 + r / G;
    int h = g * G + r % G;
    float inv = lq > 0.f ? 1.f / lq : 0.f;
    tc_bf *op = o + row * nh * HD + (ll)h * HD + 2 * t4;
#pragma unroll
    for (int d = 0; d < HD / 8; d++) *(unsigned *)(op + d * 8) = tc_pack(oacc[d][2 * i] * inv, oacc[d][2 * i + 1] * inv);
    if (t4 == 0) lse[row * nh + h] = lq > 0.f ? m[i] * TC_LN2 + logf(lq) : DFL_NINF;
  }
}

/* D[row * nh + h] = sum_d dO * O: one warp per (row, head). */
extern "C" __global__ void __launch_bounds__(256) dfl_attn_bwd_dot(float *D, const void *o, const void *dout, int dt,
                                                                  ll pairs, int hd) {
  int lane = threadIdx.x & 31;
  for (ll w = ((ll)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < pairs; w += ((ll)gridDim.x * blockDim.x) >> 5) {
    float s = 0.f;
    for (int d = lane; d < hd; d += 32) s += ldf(o, dt, w * hd + d) * ldf(dout, dt, w * hd + d);
    s = warp_sum(s);
    if (lane == 0) D[w] = s;
  }
}

/* Query-major DFLASH backward: dQ, and dKn/dVn of the own block. */
template <int HD>
__device__ __forceinline__ void tc_bwdq(tc_bf *dq, tc_bf *dk2, tc_bf *dv2, const tc_bf *q, const tc_bf *k1,
                                        const tc_bf *v1, const tc_bf *k2, const tc_bf *v2, const int *anchors,
                                        const int *keep, const float *lse, const float *Dg, const tc_bf *dout,
                                        int batch, int S, int N, int B, int nh, int nkv, int W, float scale) {
  constexpr int SR = HD + 8;
  extern __shared__ __align__(16) tc_bf tc_sm[];
  int nw = blockDim.x >> 5, R = nw * 16, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, t4 = lane & 3;
  tc_unit u;
  if (!tc_setup(&u, 1, batch, S, N, B, nh, nkv, W, anchors, keep, R)) return;
  int G = u.G, g = u.g, P = u.P, BP = B + 1;
  if (!u.kp) { /* an invalid block passes no gradient */
    for (int c = threadIdx.x; c < P * HD; c += blockDim.x) {
      int r = c / HD, d = c % HD;
      dq[(u.qrow0 + r / G) * nh * HD + (ll)(g * G + r % G) * HD + d] = 0;
    }
    for (int c = threadIdx.x; c < B * HD; c += blockDim.x) {
      ll off = ((u.qrow0 + c / HD) * nkv + g) * HD + c % HD;
      dk2[off] = 0; dv2[off] = 0;
    }
    return;
  }
  tc_bf *qs = tc_sm, *dos = qs + R * SR, *kvb = dos + R * SR;
  float *ls = (float *)(kvb + 4 * TC_KT * SR), *ds_ = ls + R, *ps = ds_ + R, *dss = ps + R * BP;
  tc_load_rows<HD>(qs, q, u.qrow0, G, g, P, R, nh);
  tc_load_rows<HD>(dos, dout, u.qrow0, G, g, P, R, nh);
  tc_commit();
  for (int r = threadIdx.x; r < R; r += blockDim.x) {
    ll idx = (u.qrow0 + r / G) * nh + g * G + r % G;
    ls[r] = r < P ? lse[idx] * TC_LOG2E : DFL_INF; /* padding rows: p = exp2(-inf) = 0 */
    ds_[r] = r < P ? Dg[idx] : 0.f;
  }
  int nt0 = (u.hi0 - u.lo0 + TC_KT - 1) / TC_KT, nt = nt0 + (u.hi1 + TC_KT - 1) / TC_KT;
  ll kvrow1 = (ll)u.b * S, kvrow2 = u.qrow0;
  {
    int seg, k0, khi;
    tc_tile(&u, nt0, 0, &seg, &k0, &khi);
    tc_load_kv<HD>(kvb, kvb + TC_KT * SR, seg ? k2 : k1, seg ? v2 : v1, seg ? kvrow2 : kvrow1, k0, khi, nkv, g);
    tc_commit();
  }
  tc_wait<1>();
  __syncthreads();
  unsigned qf[HD / 16][4], df[HD / 16][4];
#pragma unroll
  for (int ks = 0; ks < HD / 16; ks++) {
    tc_lda(qf[ks], qs + (warp * 16 + gid) * SR + ks * 16 + 2 * t4, SR);
    tc_lda(df[ks], dos + (warp * 16 + gid) * SR + ks * 16 + 2 * t4, SR);
  }
  int rr[2] = {warp * 16 + gid, warp * 16 + gid + 8}, jr[2] = {rr[0] / G, rr[1] / G};
  float lr[2] = {ls[rr[0]], ls[rr[1]]}, Dr[2] = {ds_[rr[0]], ds_[rr[1]]};
  float dqa[HD / 8][4];
#pragma unroll
  for (int d = 0; d < HD / 8; d++) dqa[d][0] = dqa[d][1] = dqa[d][2] = dqa[d][3] = 0.f;
  const float sl2 = scale * TC_LOG2E;
  for (int t = 0; t < nt; t++) {
    int seg, k0, khi;
    if (t + 1 < nt) {
      tc_tile(&u, nt0, t + 1, &seg, &k0, &khi);
      tc_bf *kd = kvb + ((t + 1) & 1) * 2 * TC_KT * SR;
      tc_load_kv<HD>(kd, kd + TC_KT * SR, seg ? k2 : k1, seg ? v2 : v1, seg ? kvrow2 : kvrow1, k0, khi, nkv, g);
      tc_commit();
      tc_wait<1>();
    } else {
      tc_wait<0>();
    }
    __syncthreads();
    tc_tile(&u, nt0, t, &seg, &k0, &khi);
    const tc_bf *ks_ = kvb + (t & 1) * 2 * TC_KT * SR, *vs_ = ks_ + TC_KT * SR;
    int kn = khi - k0, lo[2], hi[2];
    tc_row_range(&u, 1, W, B, jr[0], seg, &lo[0], &hi[0]);
    tc_row_range(&u, 1, W, B, jr[1], seg, &lo[1], &hi[1]);
    for (int kk = 0; kk < TC_KT / 16 && kk * 16 < kn; kk++) {
      float s[2][4], dp[2][4];
#pragma unroll
      for (int c = 0; c < 2; c++) {
        s[c][0] = s[c][1] = s[c][2] = s[c][3] = 0.f;
        dp[c][0] = dp[c][1] = dp[c][2] = dp[c][3] = 0.f;
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++) {
          int off = (kk * 16 + c * 8 + gid) * SR + ks * 16 + 2 * t4;
          tc_mma(s[c], qf[ks], tc_ld32(ks_ + off), tc_ld32(ks_ + off + 8));
          tc_mma(dp[c], df[ks], tc_ld32(vs_ + off), tc_ld32(vs_ + off + 8));
        }
      }
#pragma unroll
      for (int c = 0; c < 2; c++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          int i = e >> 1, kv = k0 + kk * 16 + c * 8 + 2 * t4 + (e & 1);
          float p = kv >= lo[i] && kv < hi[i] ? tc_ex2(s[c][e] * sl2 - lr[i]) : 0.f;
          float d = p * (dp[c][e] - Dr[i]);
          s[c][e] = p; dp[c][e] = d;
          if (seg && kv < B) { ps[rr[i] * BP + kv] = p; dss[rr[i] * BP + kv] = d; }
        }
      unsigned a[4];
      tc_c2a(a, dp[0], dp[1]);
      tc_mma_rowsT<HD>(dqa, a, ks_ + kk * 16 * SR, SR, lane);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; i++) {
    if (rr[i] >= P) continue;
    tc_bf *p = dq + (u.qrow0 + jr[i]) * nh * HD + (ll)(g * G + rr[i] % G) * HD + 2 * t4;
#pragma unroll
    for (int d = 0; d < HD / 8; d++) *(unsigned *)(p + d * 8) = tc_pack(dqa[d][2 * i] * scale, dqa[d][2 * i + 1] * scale);
  }
  __syncthreads();
  /* own-block keys: dKn = scale dS^T Q, dVn = P^T dO over the CTA's rows (B x HD, small) */
  for (int c = threadIdx.x; c < B * HD; c += blockDim.x) {
    int key = c / HD, d = c % HD;
    float gk = 0.f, gv = 0.f;
    for (int r = 0; r < P; r++) {
      gk += dss[r * BP + key] * dfl_bf2f(qs[r * SR + d]);
      gv += ps[r * BP + key] * dfl_bf2f(dos[r * SR + d]);
    }
    ll off = ((u.qrow0 + key) * nkv + g) * HD + d;
    dk2[off] = dfl_f2bf(gk * scale); dv2[off] = dfl_f2bf(gv);
  }
}

/* Key-major DFLASH backward: dKc, dVc of 64 context keys of one (sample, kv head). */
template <int HD>
__device__ __forceinline__ void tc_bwdkv(tc_bf *dk1, tc_bf *dv1, const tc_bf *q, const tc_bf *k1, const tc_bf *v1,
                                         const int *anchors, const int *keep, const float *lse, const float *Dg,
                                         const tc_bf *dout, int batch, int S, int N, int B, int nh, int nkv, int W,
                                         float scale) {
  constexpr int SR = HD + 8;
  extern __shared__ __align__(16) tc_bf tc_sm[];
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, t4 = lane & 3;
  int G = nh / nkv, P = B * G, Rb = (P + 15) / 16 * 16;
  /* heaviest tiles (small k0: most anchors lie past them) first, across every sample and head */
  int tile = blockIdx.x / (batch * nkv), rem = blockIdx.x % (batch * nkv), b = rem / nkv, g = rem % nkv;
  int k0 = tile * TC_KT;
  tc_bf *ks_ = tc_sm, *vs_ = ks_ + TC_KT * SR, *qb = vs_ + TC_KT * SR; /* qb: [2][q, dO][Rb][SR] */
  float *ls = (float *)(qb + 4 * Rb * SR), *dsv = ls + 2 * Rb;
  int *lov = (int *)(dsv + 2 * Rb), *list = lov + 2 * Rb, *cnt = list + N, *anc = cnt + 1;
  tc_load_kv<HD>(ks_, vs_, k1, v1, (ll)b * S, k0, S, nkv, g);
  tc_commit();
  if (warp == 0) { /* the blocks whose rows see some key of the tile, in order */
    int c = 0;
    for (int base = 0; base < N; base += 32) {
      int n = base + lane, rel = 0;
      if (n < N && keep[(ll)b * N + n]) {
        int a = anchors[(ll)b * N + n];
        rel = k0 < a && (W == 0 || k0 + TC_KT - 1 >= a - (W - 1));
      }
      unsigned bal = __ballot_sync(0xffffffffu, rel);
      if (rel) list[c + __popc(bal & ((1u << lane) - 1u))] = n;
      c += __popc(bal);
    }
    if (lane == 0) *cnt = c;
  }
  __syncthreads();
  int nl = *cnt;
  auto load_blk = [&](int i, int s) {
    int n = list[i], a = anchors[(ll)b * N + n];
    ll qrow0 = (ll)b * N * B + (ll)n * B;
    tc_load_rows<HD>(qb + (2 * s) * Rb * SR, q, qrow0, G, g, P, Rb, nh);
    tc_load_rows<HD>(qb + (2 * s + 1) * Rb * SR, dout, qrow0, G, g, P, Rb, nh);
    for (int r = threadIdx.x; r < Rb; r += blockDim.x) {
      ll idx = (qrow0 + r / G) * nh + g * G + r % G;
      ls[s * Rb + r] = r < P ? lse[idx] * TC_LOG2E : DFL_INF;
      dsv[s * Rb + r] = r < P ? Dg[idx] : 0.f;
      lov[s * Rb + r] = r >= P ? a : W > 0 ? a + r / G - (W - 1) : 0;
    }
    if (threadIdx.x == 0) anc[s] = a;
  };
  float dka[HD / 8][4], dva[HD / 8][4];
#pragma unroll
  for (int d = 0; d < HD / 8; d++) {
    dka[d][0] = dka[d][1] = dka[d][2] = dka[d][3] = 0.f;
    dva[d][0] = dva[d][1] = dva[d][2] = dva[d][3] = 0.f;
  }
  const float sl2 = scale * TC_LOG2E;
  if (nl > 0) { load_blk(0, 0); tc_commit(); }
  const tc_bf *kw = ks_ + (warp * 16 + gid) * SR + 2 * t4, *vw = vs_ + (warp * 16 + gid) * SR + 2 * t4;
  int key0 = k0 + warp * 16 + gid;
  for (int i = 0; i < nl; i++) {
    if (i + 1 < nl) { load_blk(i + 1, (i + 1) & 1); tc_commit(); tc_wait<1>(); }
    else tc_wait<0>();
    __syncthreads();
    int s = i & 1, a = anc[s];
    const tc_bf *qs = qb + (2 * s) * Rb * SR, *dos = qb + (2 * s + 1) * Rb * SR;
    const float *lsb = ls + s * Rb, *dsb = dsv + s * Rb;
    const int *lob = lov + s * Rb;
    for (int rc = 0; rc < Rb / 16; rc++) {
      float st[2][4], dt_[2][4];
#pragma unroll
      for (int c = 0; c < 2; c++) {
        st[c][0] = st[c][1] = st[c][2] = st[c][3] = 0.f;
        dt_[c][0] = dt_[c][1] = dt_[c][2] = dt_[c][3] = 0.f;
      }
#pragma unroll
      for (int ks = 0; ks < HD / 16; ks++) {
        unsigned ka[4], va[4];
        tc_lda(ka, kw + ks * 16, SR);
        tc_lda(va, vw + ks * 16, SR);
#pragma unroll
        for (int c = 0; c < 2; c++) {
          int off = (rc * 16 + c * 8 + gid) * SR + ks * 16 + 2 * t4;
          tc_mma(st[c], ka, tc_ld32(qs + off), tc_ld32(qs + off + 8));
          tc_mma(dt_[c], va, tc_ld32(dos + off), tc_ld32(dos + off + 8));
        }
      }
#pragma unroll
      for (int c = 0; c < 2; c++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          int key = key0 + 8 * (e >> 1), r = rc * 16 + c * 8 + 2 * t4 + (e & 1);
          float p = key < a && key >= lob[r] ? tc_ex2(st[c][e] * sl2 - lsb[r]) : 0.f;
          st[c][e] = p;
          dt_[c][e] = p * (dt_[c][e] - dsb[r]);
        }
      unsigned pa[4], da[4];
      tc_c2a(pa, st[0], st[1]);
      tc_c2a(da, dt_[0], dt_[1]);
      tc_mma_rowsT<HD>(dva, pa, dos + rc * 16 * SR, SR, lane);
      tc_mma_rowsT<HD>(dka, da, qs + rc * 16 * SR, SR, lane);
    }
    __syncthreads();
  }
  tc_wait<0>(); /* no block at all: the K/V group is still outstanding */
#pragma unroll
  for (int i = 0; i < 2; i++) {
    int key = key0 + 8 * i;
    if (key >= S) continue;
    ll off = (((ll)b * S + key) * nkv + g) * HD + 2 * t4;
#pragma unroll
    for (int d = 0; d < HD / 8; d++) {
      *(unsigned *)(dk1 + off + d * 8) = tc_pack(dka[d][2 * i] * scale, dka[d][2 * i + 1] * scale);
      *(unsigned *)(dv1 + off + d * 8) = tc_pack(dva[d][2 * i], dva[d][2 * i + 1]);
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
extern "C" __global__ void __launch_bounds__(256) dfl_attn_fwd_tc64(TC_FWD_ARGS) {
  (void)dt; (void)hd;
  tc_fwd<64>(o, lse, q, k1, v1, k2, v2, anchors, keep, mask, batch, S, N, B, nh, nkv, window, scale);
}
extern "C" __global__ void __launch_bounds__(256) dfl_attn_fwd_tc128(TC_FWD_ARGS) {
  (void)dt; (void)hd;
  tc_fwd<128>(o, lse, q, k1, v1, k2, v2, anchors, keep, mask, batch, S, N, B, nh, nkv, window, scale);
}
extern "C" __global__ void __launch_bounds__(256) dfl_attn_bwdq_tc64(TC_BWDQ_ARGS) {
  tc_bwdq<64>(dq, dk2, dv2, q, k1, v1, k2, v2, anchors, keep, lse, D, dout, batch, S, N, B, nh, nkv, window, scale);
}
extern "C" __global__ void __launch_bounds__(256) dfl_attn_bwdq_tc128(TC_BWDQ_ARGS) {
  tc_bwdq<128>(dq, dk2, dv2, q, k1, v1, k2, v2, anchors, keep, lse, D, dout, batch, S, N, B, nh, nkv, window, scale);
}
extern "C" __global__ void __launch_bounds__(128) dfl_attn_bwdkv_tc64(TC_BWDKV_ARGS) {
  tc_bwdkv<64>(dk1, dv1, q, k1, v1, anchors, keep, lse, D, dout, batch, S, N, B, nh, nkv, window, scale);
}
extern "C" __global__ void __launch_bounds__(128) dfl_attn_bwdkv_tc128(TC_BWDKV_ARGS) {
  tc_bwdkv<128>(dk1, dv1, q, k1, v1, anchors, keep, lse, D, dout, batch, S, N, B, nh, nkv, window, scale);
}
