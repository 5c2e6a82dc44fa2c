// hybrid.cuh: the hybrid (Gated DeltaNet + gated attention) target's forward kernels: causal conv
// with SiLU, per-head L2 norm, the chunked gated delta rule, the gated RMSNorm and partial RoPE (the
// GDN gates and the sigmoid output gate are pointwise: generated, compiler/pointwise.def). Contracts:
// compiler/ops.def. Rows come in sequences of S (row r belongs to sequence r / S): the conv window
// and the recurrent state restart at each start.
// Row kernels load through ldf/stf (any float dtype per tensor), sum in f32 and round once at the store.

__device__ __forceinline__ float hy_silu(float x) { return x / (1.f + expf(-x)); }

/* y[r,c] = silu(sum_j w[c,j] x[r-K+1+j, c]), rows before r's sequence read as 0. One thread per
** output: consecutive threads take consecutive channels, so each of the K row reads is coalesced. */
extern "C" __global__ void dfl_conv1d_silu(void *y, int dty, const void *x, int dtx, const void *w, int dtw, ll R,
                                           int C, int K, int S) {
  GRID_STRIDE(i, R * C) {
    const ll r = i / C, s0 = r - r % S;
    const int c = (int)(i - r * C);
    float acc = 0.f;
    for (int j = 0; j < K; j++) {
      const ll src = r - (K - 1) + j;
      if (src >= s0) acc += ldf(w, dtw, (ll)c * K + j) * ldf(x, dtx, src * C + c);
    }
    stf(y, dty, i, hy_silu(acc));
  }
}

/* 16-byte rows (x and y bf16 or f16, C % 8 == 0, K = 4: what the qwen3_5 checkpoints hold) go to the
** split form's kernel below (dfl_conv1d_silu_qkv_v8; the plain form is its D = 0 case, every channel
** to v): a thread per 8 channels and HY_CRT consecutive rows. Each input row is loaded and decoded once
** and added to the up to four outputs it reaches (three partial sums in registers, the taps in the
** per-element kernel's order, so the same sums); x's dtype is a template argument. Rows are loaded
** HY_CRB at a time, a batch ahead of its use: one row at a time left two 16-byte loads in flight a
** thread, too few to cover DRAM latency (1.2 TB/s); decoding the 3-row window again for every row
** (four decodes a row) held the kernel at 1.9 TB/s on the H200; 8 rows in flight instead of 4: 0.789 ->
** 0.763 ms at the 27B's shape on an H100 (bench/cuda/bench_conv.cu, the same bits; 168 registers keep
** three CTAs an SM). SiLU through the fast exponential and divide (bf16 output: their error is below its
** step). */
#define HY_CRT 32
#define HY_CRB 8
__device__ __forceinline__ float hy_silu_fast(float x) { return __fdividef(x, 1.f + __expf(-x)); }
/* eight bf16 or f16 values of one 16-byte word */
__device__ __forceinline__ void hy_dec8(uint4 u, int dt, float *v) {
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 4; k++) {
    const unsigned short lo = (unsigned short)(w[k] & 0xffffu), hi = (unsigned short)(w[k] >> 16);
    v[2 * k] = dt == DT_BF16 ? dfl_bf2f(lo) : dfl_h2f(lo);
    v[2 * k + 1] = dt == DT_BF16 ? dfl_bf2f(hi) : dfl_h2f(hi);
  }
}
/* L2NORM and NORM_GATE on 16-byte rows (bf16/f16 x, y, z; G % 8 == 0, G / 8 a power of two <= 32):
** a thread per 8 features, the group's G / 8 lanes reduce by shuffles; the warp-per-group kernels
** below read 2 bytes a lane and left most of a warp idle at G = 128. */
template <int L> __device__ __forceinline__ float hy_lanes_sum(float v) {
#pragma unroll
  for (int o = L / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <int L>
__device__ __forceinline__ void hy_l2norm_v8(void *y, int dty, const void *x, int dtx, ll n8, float eps, float alpha) {
  /* n8 (a multiple of L) vectors; whole warps iterate together so every shuffle has its lanes */
  for (ll b = ((ll)blockIdx.x * blockDim.x + threadIdx.x) & ~31ll; b < n8; b += (ll)gridDim.x * blockDim.x) {
    const ll i = b + (threadIdx.x & 31);
    const int ok = i < n8;
    float v[8], ss = 0.f;
    if (ok) ld8(x, dtx, i * 8, v);
#pragma unroll
    for (int k = 0; k < 8; k++) ss += ok ? v[k] * v[k] : 0.f;
    const float r = alpha / sqrtf(hy_lanes_sum<L>(ss) + eps);
#pragma unroll
    for (int k = 0; k < 8; k++) v[k] *= r;
    if (ok) st8(y, dty, i * 8, v);
  }
}
/* z: rows of zs elements, x's zd columns of each read (zd, zs multiples of 8: a window of a wider row) */
template <int L>
__device__ __forceinline__ void hy_norm_gate_v8(void *y, int dty, const void *x, int dtx, const void *z, int dtz,
                                                const void *w, int dtw, ll n8, int G, float eps, ll zd, ll zs) {
  for (ll b = ((ll)blockIdx.x * blockDim.x + threadIdx.x) & ~31ll; b < n8; b += (ll)gridDim.x * blockDim.x) {
    const ll i = b + (threadIdx.x & 31);
    const int ok = i < n8, f0 = (int)(i % L) * 8;
    float v[8], zz[8], ss = 0.f;
    if (ok) { ld8(x, dtx, i * 8, v); ld8(z, dtz, i * 8 / zd * zs + i * 8 % zd, zz); }
#pragma unroll
    for (int k = 0; k < 8; k++) ss += ok ? v[k] * v[k] : 0.f;
    const float r = 1.f / sqrtf(hy_lanes_sum<L>(ss) / (float)G + eps);
#pragma unroll
    for (int k = 0; k < 8; k++) v[k] = v[k] * r * ldf(w, dtw, f0 + k) * hy_silu(zz[k]);
    if (ok) st8(y, dty, i * 8, v);
  }
}
#define HY_V8_LANES(F, L, ...) \
  switch (L) { case 1: F<1>(__VA_ARGS__); break; case 2: F<2>(__VA_ARGS__); break; case 4: F<4>(__VA_ARGS__); break; \
               case 8: F<8>(__VA_ARGS__); break; case 16: F<16>(__VA_ARGS__); break; default: F<32>(__VA_ARGS__); }
extern "C" __global__ void __launch_bounds__(256) dfl_l2norm_v8(void *y, int dty, const void *x, int dtx, ll n8, int L,
                                                                 float eps, float alpha) {
  HY_V8_LANES(hy_l2norm_v8, L, y, dty, x, dtx, n8, eps, alpha)
}
extern "C" __global__ void __launch_bounds__(256) dfl_norm_gate_v8(void *y, int dty, const void *x, int dtx,
                                                                    const void *z, int dtz, const void *w, int dtw,
                                                                    ll n8, int L, float eps, ll zd, ll zs) {
  HY_V8_LANES(hy_norm_gate_v8, L, y, dty, x, dtx, z, dtz, w, dtw, n8, L * 8, eps, zd, zs)
}

/* CONV1D_SILU's split form (compiler/ops.def: the Gated DeltaNet's q|k|v from one GEMM): the kernel
** above over all C channels, each row's q and k heads L2-normalized in registers before the store, so
** q and k never travel through memory unnormalized. A head of G features is L = G / 8 consecutive
** lanes; C % G == 0 and D % G == 0 keep every L-lane group inside one head and one run of rows, so
** each group's shuffles see all its lanes (the other lanes of the warp may be in another region).
** CRT and CRB are template arguments so that bench/cuda/bench_conv.cu can time other counts. */
template <int L, int DTX, int CRT = HY_CRT, int CRB = HY_CRB>
__device__ __forceinline__ void hy_conv_qkv_v8(void *q, void *k, void *v, int dty, const void *x, const void *w,
                                               int dtw, ll R, int C, int D, int S, float eps, float alpha) {
  const int C8 = C >> 3, lane = threadIdx.x & 31;
  const unsigned gmask = L == 32 ? 0xffffffffu : ((1u << L) - 1u) << (lane & ~(L - 1));
  const ll nt = (R + CRT - 1) / CRT;
  GRID_STRIDE(i, nt * C8) {
    const int c0 = (int)(i % C8) * 8;
    const ll r0 = (i / C8) * CRT, r1 = r0 + CRT < R ? r0 + CRT : R;
    /* where the row's 8 values go: q, k (normalized; scale applied after the norm) or v */
    const int part = c0 < D ? 0 : c0 < 2 * D ? 1 : 2;
    void *dst = part == 0 ? q : part == 1 ? k : v;
    const int ldd = part == 2 ? C - 2 * D : D, cd = c0 - (part == 0 ? 0 : part == 1 ? D : 2 * D);
    const float sc = part == 0 ? alpha : 1.f;
    float wk[4][8];
#pragma unroll
    for (int c = 0; c < 8; c++)
#pragma unroll
      for (int j = 0; j < 4; j++) wk[j][c] = ldf(w, dtw, (ll)(c0 + c) * 4 + j);
    int pos = (int)(r0 % S);
    /* p[a]: output row (this row + a)'s sum so far, taps in order 0..3 (the per-element kernel's order):
    ** each input row is decoded once and added to the four outputs it reaches */
    float p[3][8];
#pragma unroll
    for (int c = 0; c < 8; c++) p[0][c] = p[1][c] = p[2][c] = 0.f;
    const unsigned short *xs = (const unsigned short *)x + c0;
#pragma unroll
    for (int j = 0; j < 3; j++) /* the halo: the up to 3 rows of r0's sequence before it (p stays 0 before them) */
      if (pos - 3 + j >= 0) {
        float xh[8];
        hy_dec8(*(const uint4 *)(xs + (r0 - 3 + j) * C), DTX, xh);
#pragma unroll
        for (int c = 0; c < 8; c++) {
          p[0][c] = fmaf(wk[2][c], xh[c], p[1][c]);
          p[1][c] = fmaf(wk[1][c], xh[c], p[2][c]);
          p[2][c] = wk[0][c] * xh[c];
        }
      }
    uint4 nxt[CRB];
#pragma unroll
    for (int b = 0; b < CRB; b++)
      if (r0 + b < r1) nxt[b] = *(const uint4 *)(xs + (r0 + b) * C);
    for (ll rb = r0; rb < r1; rb += CRB) {
      uint4 raw[CRB];
#pragma unroll
      for (int b = 0; b < CRB; b++) {
        raw[b] = nxt[b];
        if (rb + CRB + b < r1) nxt[b] = *(const uint4 *)(xs + (rb + CRB + b) * C);
      }
#pragma unroll
      for (int b = 0; b < CRB; b++) {
        if (rb + b >= r1) break;
        if (pos == S) { /* a new sequence: the rows before it read as 0 */
          pos = 0;
#pragma unroll
          for (int c = 0; c < 8; c++) p[0][c] = p[1][c] = p[2][c] = 0.f;
        }
        float o[8], xc[8], ss = 0.f;
        hy_dec8(raw[b], DTX, xc);
#pragma unroll
        for (int c = 0; c < 8; c++) {
          o[c] = hy_silu_fast(fmaf(wk[3][c], xc[c], p[0][c]));
          p[0][c] = fmaf(wk[2][c], xc[c], p[1][c]);
          p[1][c] = fmaf(wk[1][c], xc[c], p[2][c]);
          p[2][c] = wk[0][c] * xc[c];
          ss += o[c] * o[c];
        }
        if (part < 2) { /* the group's lanes all take this branch together */
#pragma unroll
          for (int m = L / 2; m > 0; m >>= 1) ss += __shfl_xor_sync(gmask, ss, m);
          const float r = sc / sqrtf(ss + eps);
#pragma unroll
          for (int c = 0; c < 8; c++) o[c] *= r;
        }
        st8(dst, dty, (rb + b) * ldd + cd, o);
        pos++;
      }
    }
  }
}
template <int L>
__device__ __forceinline__ void hy_conv_qkv_dt(void *q, void *k, void *v, int dty, const void *x, int dtx,
                                               const void *w, int dtw, ll R, int C, int D, int S, float eps,
                                               float alpha) {
  if (dtx == DT_BF16) hy_conv_qkv_v8<L, DT_BF16>(q, k, v, dty, x, w, dtw, R, C, D, S, eps, alpha);
  else hy_conv_qkv_v8<L, DT_F16>(q, k, v, dty, x, w, dtw, R, C, D, S, eps, alpha);
}
extern "C" __global__ void __launch_bounds__(128, 3) dfl_conv1d_silu_qkv_v8(void *q, void *k, void *v, int dty,
                                                                          const void *x, int dtx, const void *w,
                                                                          int dtw, ll R, int C, int D, int S, int L,
                                                                          float eps, float alpha) {
  HY_V8_LANES(hy_conv_qkv_dt, L, q, k, v, dty, x, dtx, w, dtw, R, C, D, S, eps, alpha)
}
/* Any shape and dtype: a warp per row, q and k heads twice over (their sum of squares, then the
** normalized values), v once. */
extern "C" __global__ void dfl_conv1d_silu_qkv(void *q, void *k, void *v, int dty, const void *x, int dtx, const void *w,
                                               int dtw, ll R, int C, int D, int K, int S, int G, float eps, float alpha) {
  for (ll r = ((ll)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < R; r += ((ll)gridDim.x * blockDim.x) >> 5) {
    const int lane = threadIdx.x & 31;
    const ll s0 = r - r % S;
    for (int c0 = 0; c0 < C; c0 += c0 < 2 * D ? G : 32) {
      const int part = c0 < D ? 0 : c0 < 2 * D ? 1 : 2, n = part < 2 ? G : 32;
      float r2 = 1.f;
      for (int pass = part < 2 ? 0 : 1; pass < 2; pass++) {
        float ss = 0.f;
        for (int c = c0 + lane; c < c0 + n && c < C; c += 32) {
          float acc = 0.f;
          for (int j = 0; j < K; j++) {
            const ll src = r - (K - 1) + j;
            if (src >= s0) acc += ldf(w, dtw, (ll)c * K + j) * ldf(x, dtx, src * C + c);
          }
          const float o = hy_silu_fast(acc);
          if (pass == 0) ss += o * o;
          else if (part == 2) stf(v, dty, r * (C - 2 * D) + c - 2 * D, o);
          else stf(part ? k : q, dty, r * D + c - part * D, o * r2);
        }
        if (pass == 0) r2 = (part ? 1.f : alpha) / sqrtf(warp_sum(ss) + eps);
      }
    }
  }
}

/* A warp per group of G features (the q/k heads: G = dk, 32..256): the sum of squares by shuffles. */
#define HY_WARPS_FOR(gi, ng)                                                                          \
  for (ll gi = ((ll)blockIdx.x * blockDim.x + threadIdx.x) >> 5; gi < (ng); gi += ((ll)gridDim.x * blockDim.x) >> 5)
extern "C" __global__ void dfl_l2norm(void *y, int dty, const void *x, int dtx, ll ng, int G, float eps, float alpha) {
  const int lane = threadIdx.x & 31;
  HY_WARPS_FOR(gi, ng) {
    float ss = 0.f;
    for (int i = lane; i < G; i += 32) { float v = ldf(x, dtx, gi * G + i); ss += v * v; }
    const float r = alpha / sqrtf(warp_sum(ss) + eps);
    for (int i = lane; i < G; i += 32) stf(y, dty, gi * G + i, ldf(x, dtx, gi * G + i) * r);
  }
}
/* y = x rsqrt(mean_G(x^2) + eps) w silu(z): the GDN output's gated RMSNorm (a plain weight); z's rows
** zs apart, x's zd columns of each read */
extern "C" __global__ void dfl_norm_gate(void *y, int dty, const void *x, int dtx, const void *z, int dtz,
                                         const void *w, int dtw, ll ng, int G, float eps, ll zd, ll zs) {
  const int lane = threadIdx.x & 31;
  HY_WARPS_FOR(gi, ng) {
    float ss = 0.f;
    for (int i = lane; i < G; i += 32) { float v = ldf(x, dtx, gi * G + i); ss += v * v; }
    const float r = 1.f / sqrtf(warp_sum(ss) / (float)G + eps);
    for (int i = lane; i < G; i += 32)
      stf(y, dty, gi * G + i, ldf(x, dtx, gi * G + i) * r * ldf(w, dtw, i) * hy_silu(ldf(z, dtz, (gi * G + i) / zd * zs + (gi * G + i) % zd)));
  }
}

/* Partial rotary (ROPE with 0 < rot_dim < hd): per (row, head), item i < rd / 2 rotates the NeoX pair
** (i, i + rd / 2) by pos theta^(-2i/rd) (the angle in double, as dfl_rope), the other items copy dims
** rd .. hd - 1. The target's RoPE is a few percent of its bytes: one simple kernel serves it. */
extern "C" __global__ void dfl_rope_part(void *out, int dto, const void *x, int dtx, const int *pos, ll rows, int nh,
                                         int hd, int rd, double theta, int inverse) {
  const int half = rd / 2, per = half + hd - rd;
  GRID_STRIDE(t, rows * nh * per) {
    const int i = (int)(t % per);
    const ll rh = t / per, r = rh / nh, base = rh * hd;
    if (i < half) {
      double sn, cs;
      sincos((double)pos[r] * pow(theta, -2.0 * i / rd), &sn, &cs);
      const float c = (float)cs, s = inverse ? -(float)sn : (float)sn;
      const float x1 = ldf(x, dtx, base + i), x2 = ldf(x, dtx, base + i + half);
      stf(out, dto, base + i, x1 * c - x2 * s);
      stf(out, dto, base + i + half, x2 * c + x1 * s);
    } else {
      const int e = rd + i - half;
      stf(out, dto, base + e, ldf(x, dtx, base + e));
    }
  }
}

/* Partial RoPE on 16-byte rows (compiler/lower_launch.c: hd / 8 a power of two <= 32, rot_dim % 16 == 0,
** bf16, f16 or f32 tensors 16-byte aligned), in every form: plain, normed (the per-head q/k RMSNorm in
** front of it, dfl_fuse_norm_rope) and pair (q and k in one launch, dfl_fuse_rope_pair). A warp per row
** walks the row's nh + nh2 heads, ROPE_PN_U heads' loads at once; a head is ni = hd / 8 aligned lanes of
** 8 features. The row's angles are formed once, by the lanes that rotate (li < rd / 8: the pair (i, i + rd
** / 2) is lanes li and li + rd / 16, which trade values by a shuffle); the normed form's sum of squares
** is the head's ni lanes reducing by shuffles (rope_norm16's arithmetic: rsqrtf, the weight, the
** removed intermediate's rounding). The earlier 16-byte kernel (a thread per (row, 8 dims) walking the
** heads, one 16-byte load at a time, the q/k norms a launch of their own) ran the 27B's q at about a
** third of memory speed. This one: 1.05 TB/s on an H100 (20.1 ms a forward against 26.3 for the norms
** and RoPE apart); a warp an item of a row's heads at 62 registers (four CTAs an SM, each item forming
** its angles) ran at 0.82 (25.9 ms). Still well under memory speed: not understood yet.
** U (heads a warp loads at once) and the CTAs an SM are template arguments so that bench/cuda/bench_rope.cu
** times this code at other settings; dfl_rope_pn is the library's instance. */
#define ROPE_PN_U 4
#define ROPE_PN_MINB 2
template <int U>
__device__ __forceinline__ void hy_rope_pn(void *out, const void *x, const void *wn, int nh, void *out2, const void *x2,
                                           const void *wn2, int nh2, int dto, int dtx, int dtw, int mid,
                                           const int *pos, ll rows, int hd, int rd, double theta, int inverse,
                                           float eps) {
  extern __shared__ double dfl_rope_sm[]; /* the rd / 2 inverse frequencies */
  for (int i = threadIdx.x; i < rd / 2; i += blockDim.x) dfl_rope_sm[i] = pow(theta, -2.0 * i / rd);
  __syncthreads();
  const int ni = hd / 8, h8 = rd / 16, lane = threadIdx.x & 31, li = lane & (ni - 1), hpw = 32 / ni, hl = lane / ni;
  const int src = li < h8 ? lane + h8 : li < 2 * h8 ? lane - h8 : lane, rot = li < 2 * h8;
  float w1[8], w2[8];
#pragma unroll
  for (int k = 0; k < 8; k++) {
    w1[k] = wn ? ldf(wn, dtw, li * 8 + k) : 1.f;
    w2[k] = wn2 ? ldf(wn2, dtw, li * 8 + k) : 1.f;
  }
  const int nt = nh + nh2;
  const ll nw = ((ll)gridDim.x * blockDim.x) >> 5;
  for (ll r = ((ll)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < rows; r += nw) {
    float cs[8], sn[8];
#pragma unroll
    for (int k = 0; k < 8; k++) cs[k] = 1.f, sn[k] = 0.f;
    for (int h0 = 0; h0 < nt; h0 += hpw * U) {
      float v[U][8];
#pragma unroll
      for (int u = 0; u < U; u++) {
        const int h = h0 + u * hpw + hl, sec = h >= nh;
        if (h < nt) ld8(sec ? x2 : x, dtx, ((r * (sec ? nh2 : nh)) + (sec ? h - nh : h)) * hd + li * 8, v[u]);
        else
#pragma unroll
          for (int k = 0; k < 8; k++) v[u][k] = 0.f;
      }
      if (h0 == 0 && rot) /* the row's angles, while its first loads are in flight */
        rope_angles8((double)pos[r], dfl_rope_sm, (li % h8) * 8, inverse, cs, sn);
#pragma unroll
      for (int u = 0; u < U; u++) { /* every lane runs every u: the shuffles */
        const int h = h0 + u * hpw + hl, sec = h >= nh;
        if (wn) {
          float ss = 0.f;
#pragma unroll
          for (int k = 0; k < 8; k++) ss += v[u][k] * v[u][k];
          for (int o = ni >> 1; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
          const float rs = rsqrtf(ss / hd + eps);
#pragma unroll
          for (int k = 0; k < 8; k++) v[u][k] = v[u][k] * rs * (sec ? w2[k] : w1[k]);
          rope_round8(v[u], mid);
        }
        float o[8];
#pragma unroll
        for (int k = 0; k < 8; k++) {
          const float pv = __shfl_sync(0xffffffffu, v[u][k], src);
          o[k] = li < h8 ? v[u][k] * cs[k] - pv * sn[k] : rot ? v[u][k] * cs[k] + pv * sn[k] : v[u][k];
        }
        if (h < nt) st8(sec ? out2 : out, dto, ((r * (sec ? nh2 : nh)) + (sec ? h - nh : h)) * hd + li * 8, o);
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(256, ROPE_PN_MINB) dfl_rope_pn(void *out, const void *x, const void *wn,
                                                                         int nh, void *out2, const void *x2,
                                                                         const void *wn2, int nh2, int dto, int dtx,
                                                                         int dtw, int mid, const int *pos, ll rows,
                                                                         int hd, int rd, double theta, int inverse,
                                                                         float eps) {
  hy_rope_pn<ROPE_PN_U>(out, x, wn, nh, out2, x2, wn2, nh2, dto, dtx, dtw, mid, pos, rows, hd, rd, theta, inverse, eps);
}

/* --- the gated delta rule ---
** Exact path (f32 graphs, and shapes the chunk kernel does not take): the per-token recurrence in f32,
** a warp per (sequence, value head, 32 value columns); lane j keeps column j of the state S[dk, 32] in
** shared memory (conflict free: S[i][j] at i * 32 + j) and the row's k and q are staged there too.
**   S = exp(g) S;  u = beta (v - S^T k);  S += k u^T;  o = S^T q */
extern "C" __global__ void __launch_bounds__(32) dfl_gdn_rec(void *o, int dto, const void *q, int dtq, const void *k,
                                                             int dtk, const void *v, int dtv, const float *g,
                                                             const float *beta, ll R, int S, int Hv, int Hk, int dk,
                                                             int dv) {
  extern __shared__ float hy_rec_sm[]; /* S[dk][32], then k[dk], q[dk] */
  float *st = hy_rec_sm, *ks = st + dk * 32, *qs = ks + dk;
  const int lane = threadIdx.x, nvt = (dv + 31) / 32;
  const int vt = blockIdx.x % nvt, h = (blockIdx.x / nvt) % Hv, kh = h / (Hv / Hk);
  const ll r0 = (ll)(blockIdx.x / nvt / Hv) * S, r1 = r0 + S < R ? r0 + S : R;
  const int col = vt * 32 + lane, ok = col < dv;
  for (int i = 0; i < dk; i++) st[i * 32 + lane] = 0.f;
  for (ll r = r0; r < r1; r++) {
    __syncwarp();   /* the previous row's readers of ks / qs are done */
    for (int i = lane; i < dk; i += 32) {
      ks[i] = ldf(k, dtk, (r * Hk + kh) * dk + i);
      qs[i] = ldf(q, dtq, (r * Hk + kh) * dk + i);
    }
    __syncwarp();
    const float a = expf(g[r * Hv + h]), b = beta[r * Hv + h];
    float kv = 0.f;
    for (int i = 0; i < dk; i++) {
      const float s = st[i * 32 + lane] * a;
      st[i * 32 + lane] = s;
      kv += s * ks[i];
    }
    const float u = b * ((ok ? ldf(v, dtv, (r * Hv + h) * dv + col) : 0.f) - kv);
    float ov = 0.f;
    for (int i = 0; i < dk; i++) {
      const float s = st[i * 32 + lane] + ks[i] * u;
      st[i * 32 + lane] = s;
      ov += s * qs[i];
    }
    if (ok) stf(o, dto, (r * Hv + h) * dv + col, ov);
  }
}

/* Chunk path (bf16 q, k, v; dk = dv in {32, 64, 128}): FLA's chunk_gated_delta_rule algorithm
** (reference §3, C = 64), the one the CPU runs in double (runtime/cpu/cpu_hybrid.inc). Per chunk of
** n <= 64 rows (rows n.. zero: g = beta = 0 there, so they add nothing), gamma = the in-chunk cumsum of g:
**   A = strict_tril(diag(beta) K K^T o exp(gamma_r - gamma_s))   (mma; f32 to shared memory)
**   T = (I + A)^-1                   (forward substitution in f32, a thread per column: columns are
**                                     independent, so no barrier inside the 64 steps)
**   W = T diag(beta e^gamma) K,  U = T diag(beta) V                (mma, warp w: rows 16w ..)
**   Vn = U - W S
**   O = diag(e^gamma) Q S + (tril(Q K^T) o exp(gamma_r - gamma_s)) Vn
**   S = e^gamma_last S + K^T diag(e^(gamma_last - gamma)) Vn
** Every mma is m16n8k16 bf16 -> f32 (sm_80+); operands in bf16 as FLA keeps them (T, W, U, S's copy for
** the products, Vn), the state and every accumulation in f32. Every exponent is <= 0. */
#define HY_C 64
__device__ __forceinline__ void hy_mma(float *c, const unsigned *a, unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void hy_ldsm4(unsigned *r, const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(tc_saddr(p)) : "memory");
}
__device__ __forceinline__ void hy_ldsm4t(unsigned *r, const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(tc_saddr(p)) : "memory");
}
/* ldmatrix lane offsets (elements; sr the row stride) of a 16 x 16 tile:
**   hy_aoff: an A fragment of a row-major [m][k] tile, or (.trans) two B n-tiles of a [k][n] tile;
**   hy_boff: two B n-tiles of an [n][k] tile, or (.trans) an A fragment of a [k][m] tile (K^T). */
__device__ __forceinline__ int hy_aoff(int lane, int sr) { return ((lane & 7) + ((lane >> 3) & 1) * 8) * sr + (lane >> 4) * 8; }
__device__ __forceinline__ int hy_boff(int lane, int sr) { return ((lane & 7) + (lane >> 4) * 8) * sr + ((lane >> 3) & 1) * 8; }
/* two 16 x 8 accumulator tiles (columns 0-7, 8-15) as the A fragment of a 16 x 16 operand, times s */
__device__ __forceinline__ void hy_c2a(unsigned *a, const float *c0, const float *c1, float s) {
  a[0] = dfl_f2bf2(c0[0] * s, c0[1] * s), a[1] = dfl_f2bf2(c0[2] * s, c0[3] * s);
  a[2] = dfl_f2bf2(c1[0] * s, c1[1] * s), a[3] = dfl_f2bf2(c1[2] * s, c1[3] * s);
}

/*
** Split in two, as flash-linear-attention splits it: what does not depend on the state runs for every
** chunk at once, and only the state's scan stays sequential.
**   gdn_prep (a CTA per chunk and value head: nseq ceil(S/64) Hv CTAs):
**     A, T = (I + A)^-1, W = T diag(beta e^gamma) K, U = T diag(beta) V, M = tril(Q K^T) o exp(gamma_r -
**     gamma_s)   -> w [R, Hv, dk], u [R, Hv, dv], m [R, Hv, 64] bf16
**   gdn_scan (a CTA of 4 warps per sequence, value head and BV value columns; warp w's 16 columns of the
**     state in f32 registers, transposed):
**     Vn = U - W S;  O = diag(e^gamma) Q S + M Vn;  S = e^gamma_last S + K^T diag(e^(gamma_last - gamma)) Vn
** W, U and M round to bf16 in between (FLA keeps them in v's dtype). Against one kernel doing all of it per
** chunk in the scan (the inversion's 64 dependent steps, A, W and U inside the sequential loop, and
** repeated per value tile): 436 -> 319 ms for the 47 layers of the Qwen3.6-27B forward on the H200
** (dflc bench --target-only --ops). */
/* One warp's tile of out = Tm X, Tm [64, 64] lower triangular, X [64, D] in shared memory: row block rb (k-steps
** 0 .. rb), columns cb .. cb + CW - 1 (CW / 2 accumulators a lane); this lane's rows go out at orow and
** orow + 8 Hv (orow = (c0 + 16 rb + g4) Hv + h). */
template <int D, int CW>
__device__ __forceinline__ void gdn_tx_tile(unsigned short *out, const unsigned short *Tm, const unsigned short *Xs,
                                            int rb, int cb, ll orow, int Hv, int n) {
  constexpr int SX = D + 8, SC = HY_C + 8;
  const int lane = threadIdx.x & 31, g4 = lane >> 2, t4 = lane & 3;
  float acc[CW / 8][4];
#pragma unroll
  for (int j = 0; j < CW / 8; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < 4; kk++)
    if (kk <= rb) {
      unsigned a[4], b[4];
      hy_ldsm4(a, Tm + 16 * rb * SC + kk * 16 + hy_aoff(lane, SC));
#pragma unroll
      for (int dp = 0; dp < CW / 16; dp++) {
        hy_ldsm4t(b, Xs + 16 * kk * SX + cb + dp * 16 + hy_aoff(lane, SX));
        hy_mma(acc[2 * dp], a, b[0], b[1]);
        hy_mma(acc[2 * dp + 1], a, b[2], b[3]);
      }
    }
#pragma unroll
  for (int hf = 0; hf < 2; hf++)
    if (16 * rb + g4 + 8 * hf < n)
#pragma unroll
      for (int j = 0; j < CW / 8; j++)
        *(unsigned *)(out + (orow + 8 * hf * Hv) * D + cb + 8 * j + 2 * t4) = dfl_f2bf2(acc[j][2 * hf], acc[j][2 * hf + 1]);
}
/* Warp w's 16 rows of out = Tm X (k-steps 0 .. w; orow: the lane's first row), D in column blocks of at most 64. */
template <int D>
__device__ __forceinline__ void gdn_tx(unsigned short *out, const unsigned short *Tm, const unsigned short *Xs,
                                       ll orow, int Hv, int n) {
  constexpr int CB = D < 64 ? D : 64;
#pragma unroll
  for (int cb = 0; cb < D; cb += CB) gdn_tx_tile<D, CB>(out, Tm, Xs, threadIdx.x >> 5, cb, orow, Hv, n);
}
/* gdn_tx with the triangle's work spread evenly: warp w takes columns w D/4 .. (w + 1) D/4 - 1 of all four row
** blocks (10 of the 16 (row block, k-step) products each) instead of its own row block (k-steps 0 .. w: warp 3
** did 4x warp 0's). Each output element sums the same products in the same order: the same bits. D >= 64. */
template <int D>
__device__ __forceinline__ void gdn_tx_bal(unsigned short *out, const unsigned short *Tm, const unsigned short *Xs,
                                           ll orow0, int Hv, int n) {
  static_assert(D / 4 % 16 == 0, "a warp's columns in 16-column steps");
#pragma unroll
  for (int rb = 0; rb < 4; rb++)
    gdn_tx_tile<D, D / 4>(out, Tm, Xs, rb, (threadIdx.x >> 5) * (D / 4), orow0 + 16 * rb * (ll)Hv, Hv, n);
}

/* A (f32, scaled by beta and the decays, zero on and above the diagonal) and M (bf16 to global, zero above
** the diagonal) as gdn_prep forms them, with the 10 (row block, key block) tiles of the triangle spread 3, 3,
** 3, 1 over the warps instead of warp w taking row block w's w + 1; the last warp also writes the 6 zero
** tiles. Every element sums the same products in the same order: the same bits. */
template <int DK>
__device__ __forceinline__ void gdn_am_bal(float *Af, unsigned short *mo, const unsigned short *Ks,
                                           const unsigned short *Qs, const float *gam, const float *bet, ll mrow0,
                                           int Hv, int n) {
  constexpr int SK = DK + 8, SA = HY_C + 4;
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g4 = lane >> 2, t4 = lane & 3;
  /* tiles (row block, key block) of warp w: 0: (3,0) (3,1) (3,2); 1: (2,0) (2,1) (2,2); 2: (1,0) (1,1) (3,3);
  ** 3: (0,0) */
  const int nt = w == 3 ? 1 : 3;
  int rb[3], kb[3];
#pragma unroll
  for (int t = 0; t < 3; t++) {
    rb[t] = w == 0 ? 3 : w == 1 ? 2 : w == 2 ? (t == 2 ? 3 : 1) : 0;
    kb[t] = w == 2 && t == 2 ? 3 : w == 3 ? 0 : t;
  }
  float acc[3][2][4], macc[3][2][4];
#pragma unroll
  for (int t = 0; t < 3; t++)
#pragma unroll
    for (int jj = 0; jj < 2; jj++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[t][jj][e] = macc[t][jj][e] = 0.f;
#pragma unroll
  for (int kk = 0; kk < DK / 16; kk++) {
    unsigned a[4], aq[4];
#pragma unroll
    for (int t = 0; t < 3; t++)
      if (t < nt) {
        if (t == 0 || rb[t] != rb[t - 1]) {
          hy_ldsm4(a, Ks + 16 * rb[t] * SK + kk * 16 + hy_aoff(lane, SK));
          hy_ldsm4(aq, Qs + 16 * rb[t] * SK + kk * 16 + hy_aoff(lane, SK));
        }
        unsigned b[4];
        hy_ldsm4(b, Ks + 16 * kb[t] * SK + kk * 16 + hy_boff(lane, SK));
        hy_mma(acc[t][0], a, b[0], b[1]);
        hy_mma(acc[t][1], a, b[2], b[3]);
        hy_mma(macc[t][0], aq, b[0], b[1]);
        hy_mma(macc[t][1], aq, b[2], b[3]);
      }
  }
#pragma unroll
  for (int t = 0; t < 3; t++)
    if (t < nt) {
#pragma unroll
      for (int jj = 0; jj < 2; jj++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int r = 16 * rb[t] + g4 + 8 * (e >> 1), s = 16 * kb[t] + 8 * jj + 2 * t4 + (e & 1);
          const bool in = s <= r;
          const float dcy = in ? expf(gam[r] - gam[s]) : 0.f;
          Af[r * SA + s] = in && s < r ? bet[r] * acc[t][jj][e] * dcy : 0.f;
          macc[t][jj][e] = in ? macc[t][jj][e] * dcy : 0.f;
        }
#pragma unroll
      for (int hf = 0; hf < 2; hf++) {
        const int r = 16 * rb[t] + g4 + 8 * hf;
        if (r < n)
#pragma unroll
          for (int jj = 0; jj < 2; jj++)
            *(unsigned *)(mo + (mrow0 + (16 * rb[t] + 8 * hf) * (ll)Hv) * HY_C + 16 * kb[t] + 8 * jj + 2 * t4) =
                dfl_f2bf2(macc[t][jj][2 * hf], macc[t][jj][2 * hf + 1]);
      }
    }
  if (w == 3) /* the zero tiles above the diagonal: (0,1) (0,2) (0,3) (1,2) (1,3) (2,3) */
#pragma unroll
    for (int zr = 0; zr < 3; zr++)
#pragma unroll
      for (int zc = 1; zc < 4; zc++)
        if (zc > zr)
#pragma unroll
          for (int hf = 0; hf < 2; hf++) {
            const int r = 16 * zr + g4 + 8 * hf;
#pragma unroll
            for (int jj = 0; jj < 2; jj++) {
              const int s = 16 * zc + 8 * jj + 2 * t4;
              Af[r * SA + s] = Af[r * SA + s + 1] = 0.f;
              if (r < n) *(unsigned *)(mo + (mrow0 + (16 * zr + 8 * hf) * (ll)Hv) * HY_C + s) = 0u;
            }
          }
}

/* BAL: bit 1, W and U by gdn_tx_bal; bit 2, A and M by gdn_am_bal (bench/cuda/bench_gdn_scan.cu times them
** against the library's prep) */
template <int DK, int DV, int BAL = 0>
__device__ __forceinline__ void gdn_prep(unsigned short *wo, unsigned short *uo, unsigned short *mo,
                                         const unsigned short *q, const unsigned short *k, const unsigned short *v,
                                         const float *g, const float *beta, ll R, int S, int Hv, int Hk) {
  constexpr int SK = DK + 8, SV = DV + 8, SC = HY_C + 8, SA = HY_C + 4;
  constexpr int R3 = HY_C * SA * 4 > HY_C * SV * 2 ? HY_C * SA * 4 : HY_C * SV * 2; /* A, then V */
  static_assert(SK <= 2 * SC && SA * 2 <= 2 * SC, "Q's chunk, then T in f32, live in T1 and T2");
  extern __shared__ __align__(16) unsigned char hy_sm[];
  unsigned short *Ks = (unsigned short *)hy_sm, *T1 = Ks + HY_C * SK, *T2 = T1 + HY_C * SC;
  unsigned short *Qs = T1;
  float *Af = (float *)(T2 + HY_C * SC), *Tf = (float *)T1;
  unsigned short *Vs = (unsigned short *)Af;
  float *gam = (float *)((unsigned char *)Af + R3), *bet = gam + HY_C, *eg = bet + HY_C;
  const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g4 = lane >> 2, t4 = lane & 3;
  const int cps = (S + HY_C - 1) / HY_C, h = blockIdx.x % Hv, kh = h / (Hv / Hk);
  const ll ci = blockIdx.x / Hv, r0 = ci / cps * S, r1 = r0 + S < R ? r0 + S : R, c0 = r0 + ci % cps * HY_C;
  if (c0 >= r1) return; /* a short last sequence */
  const int n = r1 - c0 < HY_C ? (int)(r1 - c0) : HY_C;
  for (int i = tid; i < HY_C * (DK / 8); i += blockDim.x) {
    const int r = i / (DK / 8), c = (i % (DK / 8)) * 8, ok = r < n;
    const ll off = ((c0 + (ok ? r : 0)) * Hk + kh) * DK + c;
    tc_cp16(Ks + r * SK + c, k + off, ok);
    tc_cp16(Qs + r * SK + c, q + off, ok);
  }
  tc_commit();
  if (w == 0) { /* gamma: inclusive cumsum of g over the chunk (rows lane, lane + 32) */
    float x0 = lane < n ? g[(c0 + lane) * Hv + h] : 0.f, x1 = lane + 32 < n ? g[(c0 + lane + 32) * Hv + h] : 0.f;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const float y0 = __shfl_up_sync(0xffffffffu, x0, d), y1 = __shfl_up_sync(0xffffffffu, x1, d);
      if (lane >= d) x0 += y0, x1 += y1;
    }
    x1 += __shfl_sync(0xffffffffu, x0, 31);
    gam[lane] = x0, gam[lane + 32] = x1;
    eg[lane] = expf(x0), eg[lane + 32] = expf(x1);
    bet[lane] = lane < n ? beta[(c0 + lane) * Hv + h] : 0.f;
    bet[lane + 32] = lane + 32 < n ? beta[(c0 + lane + 32) * Hv + h] : 0.f;
  }
  tc_wait<0>();
  __syncthreads();
  if constexpr ((BAL & 2) != 0) gdn_am_bal<DK>(Af, mo, Ks, Qs, gam, bet, (c0 + g4) * Hv + h, Hv, n);
  else { /* A and M: warp w's rows 16w .. 16w + 15 against keys 0 .. 16w + 15 */
    float acc[8][4], macc[8][4];
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[j][e] = macc[j][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < DK / 16; kk++) {
      unsigned a[4], aq[4];
      hy_ldsm4(a, Ks + 16 * w * SK + kk * 16 + hy_aoff(lane, SK));
      hy_ldsm4(aq, Qs + 16 * w * SK + kk * 16 + hy_aoff(lane, SK));
#pragma unroll
      for (int np = 0; np < 4; np++)
        if (np <= w) {
          unsigned b[4];
          hy_ldsm4(b, Ks + 16 * np * SK + kk * 16 + hy_boff(lane, SK));
          hy_mma(acc[2 * np], a, b[0], b[1]);
          hy_mma(acc[2 * np + 1], a, b[2], b[3]);
          hy_mma(macc[2 * np], aq, b[0], b[1]);
          hy_mma(macc[2 * np + 1], aq, b[2], b[3]);
        }
    }
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int r = 16 * w + g4 + 8 * (e >> 1), s = 8 * j + 2 * t4 + (e & 1);
        const bool in = j < 2 * w + 2 && s <= r;
        const float dcy = in ? expf(gam[r] - gam[s]) : 0.f;
        Af[r * SA + s] = in && s < r ? bet[r] * acc[j][e] * dcy : 0.f;
        macc[j][e] = in ? macc[j][e] * dcy : 0.f;
      }
#pragma unroll
    for (int hf = 0; hf < 2; hf++) { /* M's rows, zeros above the diagonal included: the scan reads them all */
      const int r = 16 * w + g4 + 8 * hf;
      if (r < n)
#pragma unroll
        for (int j = 0; j < 8; j++)
          *(unsigned *)(mo + ((c0 + r) * Hv + h) * HY_C + 8 * j + 2 * t4) = dfl_f2bf2(macc[j][2 * hf], macc[j][2 * hf + 1]);
    }
  }
  __syncthreads();
  /* T = (I + A)^-1 in two halves of 32 rows: T11 = (I + A11)^-1 and T22 = (I + A22)^-1 by forward
  ** substitution (a thread per column, 32 dependent steps), then T21 = -T22 (A21 T11) by all 128 threads.
  ** Against one 64-step substitution on 64 threads: half the chain, and the rest spread over every warp. */
  if (tid < HY_C) {
    const int j = tid & 31, o = tid & 32;
    float t[32];
#pragma unroll
    for (int r = 0; r < 32; r++) {
      const float *ar = Af + (o + r) * SA + o;
      float a0 = r == j ? 1.f : 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
#pragma unroll
      for (int s = 0; s + 4 <= r; s += 4) {
        const float4 x = *(const float4 *)(ar + s);
        a0 -= x.x * t[s], a1 -= x.y * t[s + 1], a2 -= x.z * t[s + 2], a3 -= x.w * t[s + 3];
      }
#pragma unroll
      for (int s = r & ~3; s < r; s++) a0 -= ar[s] * t[s];
      t[r] = (a0 + a1) + (a2 + a3);
    }
#pragma unroll
    for (int r = 0; r < 32; r++) Tf[(o + r) * SA + o + j] = t[r];
  }
  __syncthreads();
  const int pr = (tid >> 3) * 2, pc = (tid & 7) * 4; /* this thread's 2 x 4 of a 32 x 32 block */
  float p[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll 8
  for (int s = 0; s < 32; s++) { /* P = A21 T11 */
    const float a0 = Af[(32 + pr) * SA + s], a1 = Af[(33 + pr) * SA + s];
    const float4 x = *(const float4 *)(Tf + s * SA + pc);
    p[0][0] += a0 * x.x, p[0][1] += a0 * x.y, p[0][2] += a0 * x.z, p[0][3] += a0 * x.w;
    p[1][0] += a1 * x.x, p[1][1] += a1 * x.y, p[1][2] += a1 * x.z, p[1][3] += a1 * x.w;
  }
  __syncthreads(); /* A21 read by all: P takes its place */
#pragma unroll
  for (int i = 0; i < 2; i++) *(float4 *)(Af + (32 + pr + i) * SA + pc) = make_float4(p[i][0], p[i][1], p[i][2], p[i][3]);
  __syncthreads();
  float u[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}}, t11[2][4], t22[2][4];
#pragma unroll 8
  for (int s = 0; s < 32; s++) { /* T21 = -T22 P */
    const float b0 = Tf[(32 + pr) * SA + 32 + s], b1 = Tf[(33 + pr) * SA + 32 + s];
    const float4 x = *(const float4 *)(Af + (32 + s) * SA + pc);
    u[0][0] -= b0 * x.x, u[0][1] -= b0 * x.y, u[0][2] -= b0 * x.z, u[0][3] -= b0 * x.w;
    u[1][0] -= b1 * x.x, u[1][1] -= b1 * x.y, u[1][2] -= b1 * x.z, u[1][3] -= b1 * x.w;
  }
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const float4 x = *(const float4 *)(Tf + (pr + i) * SA + pc), y = *(const float4 *)(Tf + (32 + pr + i) * SA + 32 + pc);
    t11[i][0] = x.x, t11[i][1] = x.y, t11[i][2] = x.z, t11[i][3] = x.w;
    t22[i][0] = y.x, t22[i][1] = y.y, t22[i][2] = y.z, t22[i][3] = y.w;
  }
  __syncthreads(); /* T read in f32 by all; A dead: T1, T2 (bf16, columns scaled) replace T, V's chunk comes into A's place */
  for (int i = tid; i < HY_C * (DV / 8); i += blockDim.x) {
    const int r = i / (DV / 8), c = (i % (DV / 8)) * 8, ok = r < n;
    tc_cp16(Vs + r * SV + c, v + ((c0 + (ok ? r : 0)) * Hv + h) * DV + c, ok);
  }
  tc_commit();
  {
    float x1[2][4], x2[2][4]; /* column scales: beta e^gamma (T1), beta (T2), for columns pc .. and 32 + pc .. */
#pragma unroll
    for (int c = 0; c < 4; c++)
#pragma unroll
      for (int hb = 0; hb < 2; hb++) x2[hb][c] = bet[32 * hb + pc + c], x1[hb][c] = x2[hb][c] * eg[32 * hb + pc + c];
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const int ra = pr + i, rb = 32 + pr + i;
      uint2 z = make_uint2(0u, 0u);
      *(uint2 *)(T1 + ra * SC + pc) = make_uint2(dfl_f2bf2(t11[i][0] * x1[0][0], t11[i][1] * x1[0][1]), dfl_f2bf2(t11[i][2] * x1[0][2], t11[i][3] * x1[0][3]));
      *(uint2 *)(T2 + ra * SC + pc) = make_uint2(dfl_f2bf2(t11[i][0] * x2[0][0], t11[i][1] * x2[0][1]), dfl_f2bf2(t11[i][2] * x2[0][2], t11[i][3] * x2[0][3]));
      *(uint2 *)(T1 + ra * SC + 32 + pc) = z, *(uint2 *)(T2 + ra * SC + 32 + pc) = z;
      *(uint2 *)(T1 + rb * SC + pc) = make_uint2(dfl_f2bf2(u[i][0] * x1[0][0], u[i][1] * x1[0][1]), dfl_f2bf2(u[i][2] * x1[0][2], u[i][3] * x1[0][3]));
      *(uint2 *)(T2 + rb * SC + pc) = make_uint2(dfl_f2bf2(u[i][0] * x2[0][0], u[i][1] * x2[0][1]), dfl_f2bf2(u[i][2] * x2[0][2], u[i][3] * x2[0][3]));
      *(uint2 *)(T1 + rb * SC + 32 + pc) = make_uint2(dfl_f2bf2(t22[i][0] * x1[1][0], t22[i][1] * x1[1][1]), dfl_f2bf2(t22[i][2] * x1[1][2], t22[i][3] * x1[1][3]));
      *(uint2 *)(T2 + rb * SC + 32 + pc) = make_uint2(dfl_f2bf2(t22[i][0] * x2[1][0], t22[i][1] * x2[1][1]), dfl_f2bf2(t22[i][2] * x2[1][2], t22[i][3] * x2[1][3]));
    }
  }
  __syncthreads();
  /* W = T1 K (while V arrives) and U = T2 V for warp w's rows */
  if constexpr ((BAL & 1) != 0) {
    gdn_tx_bal<DK>(wo, T1, Ks, (c0 + g4) * Hv + h, Hv, n);
    tc_wait<0>();
    __syncthreads();
    gdn_tx_bal<DV>(uo, T2, Vs, (c0 + g4) * Hv + h, Hv, n);
  } else {
    const ll orow = (c0 + 16 * w + g4) * Hv + h; /* output row of this lane's first fragment row */
    gdn_tx<DK>(wo, T1, Ks, orow, Hv, n);
    tc_wait<0>();
    __syncthreads();
    gdn_tx<DV>(uo, T2, Vs, orow, Hv, n);
  }
}


/* One warp's chunk of the transposed scan (gdn_scan, bench/cuda/bench_gdn_scan.cu), in two steps around the
** caller's write of O: gdn_warp_vo forms Vn^T (va) and O^T (oa) for the warp's 16 value columns (cv .. cv + 15
** of the U tile Us, row stride SV) from its state slice st and the chunk's K, Q, W and M (row strides DK + 8
** and HY_C + 8) with the chunk's decays eg = e^gamma; gdn_warp_state then decays st by e^gamma_last and adds
** Vd^T K, ed = e^(gamma_last - gamma). */
template <int DK, int SV>
__device__ __forceinline__ void gdn_warp_vo(float (*va)[4], float (*oa)[4], const float (*st)[4],
                                            const unsigned short *Us, int cv, const unsigned short *Qs,
                                            const unsigned short *Ws, const unsigned short *Ms, const float *eg) {
  constexpr int SK = DK + 8, SM = HY_C + 8;
  const int lane = threadIdx.x & 31, g4 = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int j = 0; j < 8; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) va[j][e] = dfl_bf2f(Us[(8 * j + 2 * t4 + (e & 1)) * SV + cv + g4 + 8 * (e >> 1)]);
#pragma unroll
  for (int kk = 0; kk < DK / 16; kk++) { /* the negated state: Vn^T = U^T - S^T W^T */
    unsigned a[4];
    hy_c2a(a, st[2 * kk], st[2 * kk + 1], -1.f);
#pragma unroll
    for (int np = 0; np < 4; np++) {
      unsigned b[4];
      hy_ldsm4(b, Ws + 16 * np * SK + kk * 16 + hy_boff(lane, SK));
      hy_mma(va[2 * np], a, b[0], b[1]);
      hy_mma(va[2 * np + 1], a, b[2], b[3]);
    }
  }
#pragma unroll
  for (int j = 0; j < 8; j++) oa[j][0] = oa[j][1] = oa[j][2] = oa[j][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < DK / 16; kk++) {
    unsigned a[4];
    hy_c2a(a, st[2 * kk], st[2 * kk + 1], 1.f);
#pragma unroll
    for (int np = 0; np < 4; np++) {
      unsigned b[4];
      hy_ldsm4(b, Qs + 16 * np * SK + kk * 16 + hy_boff(lane, SK));
      hy_mma(oa[2 * np], a, b[0], b[1]);
      hy_mma(oa[2 * np + 1], a, b[2], b[3]);
    }
  }
#pragma unroll
  for (int j = 0; j < 8; j++) {
    const float e0 = eg[8 * j + 2 * t4], e1 = eg[8 * j + 2 * t4 + 1];
    oa[j][0] *= e0, oa[j][1] *= e1, oa[j][2] *= e0, oa[j][3] *= e1;
  }
#pragma unroll
  for (int kk = 0; kk < 4; kk++) { /* + Vn^T M^T: rows s of chunk group kk reach rows r >= s */
    unsigned a[4];
    hy_c2a(a, va[2 * kk], va[2 * kk + 1], 1.f);
#pragma unroll
    for (int np = 0; np < 4; np++)
      if (np >= kk) {
        unsigned b[4];
        hy_ldsm4(b, Ms + 16 * np * SM + kk * 16 + hy_boff(lane, SM));
        hy_mma(oa[2 * np], a, b[0], b[1]);
        hy_mma(oa[2 * np + 1], a, b[2], b[3]);
      }
  }
}
template <int DK>
__device__ __forceinline__ void gdn_warp_state(float (*st)[4], const float (*va)[4], const unsigned short *Ks,
                                               const float *eg, const float *ed) {
  constexpr int SK = DK + 8, NT = DK / 8;
  const int lane = threadIdx.x & 31, t4 = lane & 3;
  const float el = eg[HY_C - 1];
#pragma unroll
  for (int j = 0; j < NT; j++) st[j][0] *= el, st[j][1] *= el, st[j][2] *= el, st[j][3] *= el;
#pragma unroll
  for (int kk = 0; kk < 4; kk++) { /* S^T += Vd^T K */
    const float d0 = ed[16 * kk + 2 * t4], d1 = ed[16 * kk + 2 * t4 + 1];
    const float d2 = ed[16 * kk + 8 + 2 * t4], d3 = ed[16 * kk + 9 + 2 * t4];
    unsigned a[4];
    a[0] = dfl_f2bf2(va[2 * kk][0] * d0, va[2 * kk][1] * d1), a[1] = dfl_f2bf2(va[2 * kk][2] * d0, va[2 * kk][3] * d1);
    a[2] = dfl_f2bf2(va[2 * kk + 1][0] * d2, va[2 * kk + 1][1] * d3);
    a[3] = dfl_f2bf2(va[2 * kk + 1][2] * d2, va[2 * kk + 1][3] * d3);
#pragma unroll
    for (int dp = 0; dp < DK / 16; dp++) {
      unsigned b[4];
      hy_ldsm4t(b, Ks + 16 * kk * SK + dp * 16 + hy_aoff(lane, SK));
      hy_mma(st[2 * dp], a, b[0], b[1]);
      hy_mma(st[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

/* The scan's cp.async loads of one chunk (rows c0 .. c0 + n - 1, zeros past n) by the CTA's threads: K, Q
** and W (row stride DK + 8), M (HY_C + 8) and U's columns vt BV .. vt BV + BV - 1 (BV + 8); the caller commits. */
template <int DK, int BV>
__device__ __forceinline__ void gdn_scan_load(unsigned short *Ks, unsigned short *Qs, unsigned short *Ws,
                                              unsigned short *Ms, unsigned short *Us, const unsigned short *q,
                                              const unsigned short *k, const unsigned short *wi,
                                              const unsigned short *ui, const unsigned short *mi, ll c0, int n,
                                              int h, int kh, int Hv, int Hk, int dv, int vt) {
  constexpr int SK = DK + 8, SV = BV + 8, SM = HY_C + 8;
  const int tid = threadIdx.x;
  for (int i = tid; i < HY_C * (DK / 8); i += blockDim.x) {
    const int r = i / (DK / 8), c = (i % (DK / 8)) * 8, ok = r < n;
    const ll rr = c0 + (ok ? r : 0), off = (rr * Hk + kh) * DK + c;
    tc_cp16(Ks + r * SK + c, k + off, ok);
    tc_cp16(Qs + r * SK + c, q + off, ok);
    tc_cp16(Ws + r * SK + c, wi + (rr * Hv + h) * DK + c, ok);
  }
  for (int i = tid; i < HY_C * (HY_C / 8); i += blockDim.x) {
    const int r = i / (HY_C / 8), c = (i % (HY_C / 8)) * 8, ok = r < n;
    tc_cp16(Ms + r * SM + c, mi + ((c0 + (ok ? r : 0)) * Hv + h) * HY_C + c, ok);
  }
  for (int i = tid; i < HY_C * (BV / 8); i += blockDim.x) {
    const int r = i / (BV / 8), c = (i % (BV / 8)) * 8, ok = r < n;
    tc_cp16(Us + r * SV + c, ui + ((c0 + (ok ? r : 0)) * Hv + h) * dv + vt * BV + c, ok);
  }
}
/* The scan, transposed: warp w owns value columns 16w .. 16w + 15 of the CTA's tile and keeps its slice of
** the state as S^T [16, dk] in f32 accumulators, so every product it needs takes S^T or Vn^T straight
** from registers as the A operand (an accumulator pair is an A fragment) and the chunk's K, Q, W and M
** from shared memory as B:
**   Vn^T = U^T - S^T W^T;   O^T = (S^T Q^T) diag(e^gamma) + Vn^T M^T;   S^T = e^gamma_last S^T + Vd^T K
** with M = tril(Q K^T) o exp(gamma_r - gamma_s) from gdn_prep and Vd = diag(e^(gamma_last - gamma)) Vn.
** No warp reads another's state: one barrier pair per chunk (the loads), none around the state. O goes
** out through shared memory (U's buffer: each warp reads U's and writes O's own columns) in 16-byte rows.
** Two CTAs an SM (launch bounds (128, 2)): at three (168 registers, 100 bytes spilled) the 27B shape took
** 3.99 ms against 3.74 (bench/cuda/run.sh, one H200). */
template <int DK, int BV>
__device__ __forceinline__ void gdn_scan(void *o, int dto, const unsigned short *q, const unsigned short *k,
                                         const unsigned short *wi, const unsigned short *ui,
                                         const unsigned short *mi, const float *g, ll R, int S, int Hv, int Hk,
                                         int dv) {
  constexpr int SK = DK + 8, SV = BV + 8, SM = HY_C + 8, NT = DK / 8;
  extern __shared__ __align__(16) unsigned char hy_sm[];
  unsigned short *Ks = (unsigned short *)hy_sm, *Qs = Ks + HY_C * SK, *Ws = Qs + HY_C * SK, *Ms = Ws + HY_C * SK;
  unsigned short *Us = Ms + HY_C * SM; /* U in, O out */
  float *gam = (float *)(Us + HY_C * SV), *eg = gam + HY_C, *ed = eg + HY_C;
  const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g4 = lane >> 2, t4 = lane & 3;
  const int nvt = dv / BV, vt = blockIdx.x % nvt, h = (blockIdx.x / nvt) % Hv, kh = h / (Hv / Hk);
  const ll r0 = (ll)(blockIdx.x / nvt / Hv) * S, r1 = r0 + S < R ? r0 + S : R;
  const bool act = w < BV / 16; /* BV 32: warps 2, 3 only load */
  const int cv = 16 * w;        /* this warp's first column in the tile */
  float st[NT][4];
#pragma unroll
  for (int j = 0; j < NT; j++) st[j][0] = st[j][1] = st[j][2] = st[j][3] = 0.f;
  for (ll c0 = r0; c0 < r1; c0 += HY_C) {
    const int n = r1 - c0 < HY_C ? (int)(r1 - c0) : HY_C;
    gdn_scan_load<DK, BV>(Ks, Qs, Ws, Ms, Us, q, k, wi, ui, mi, c0, n, h, kh, Hv, Hk, dv, vt);
    tc_commit();
    if (w == 0) {
      float x0 = lane < n ? g[(c0 + lane) * Hv + h] : 0.f, x1 = lane + 32 < n ? g[(c0 + lane + 32) * Hv + h] : 0.f;
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const float y0 = __shfl_up_sync(0xffffffffu, x0, d), y1 = __shfl_up_sync(0xffffffffu, x1, d);
        if (lane >= d) x0 += y0, x1 += y1;
      }
      x1 += __shfl_sync(0xffffffffu, x0, 31);
      const float gl = __shfl_sync(0xffffffffu, x1, 31);
      gam[lane] = x0, gam[lane + 32] = x1;
      eg[lane] = expf(x0), eg[lane + 32] = expf(x1);
      ed[lane] = expf(gl - x0), ed[lane + 32] = expf(gl - x1);
    }
    tc_wait<0>();
    __syncthreads();
    if (act) {
      float va[8][4], oa[8][4]; /* Vn^T and O^T: [16 columns, 64 rows] */
      gdn_warp_vo<DK, SV>(va, oa, st, Us, cv, Qs, Ws, Ms, eg);
#pragma unroll
      for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
          Us[(8 * j + 2 * t4 + (e & 1)) * SV + cv + g4 + 8 * (e >> 1)] = dfl_f2bf(oa[j][e]);
      gdn_warp_state<DK>(st, va, Ks, eg, ed);
    }
    __syncthreads(); /* O's tile complete in Us */
    for (int i = tid; i < n * (BV / 8); i += blockDim.x) {
      const int r = i / (BV / 8), c = (i % (BV / 8)) * 8;
      const ll base = ((c0 + r) * Hv + h) * dv + vt * BV + c;
      if (dto == DT_BF16) *(uint4 *)((unsigned short *)o + base) = *(const uint4 *)(Us + r * SV + c);
      else
        for (int e = 0; e < 8; e++) stf(o, dto, base + e, dfl_bf2f(Us[r * SV + c + e]));
    }
    __syncthreads(); /* every buffer free for the next chunk */
  }
}
#define HY_PREP(NAME, DK, DV)                                                                                          \
  extern "C" __global__ void __launch_bounds__(128) NAME(unsigned short *wo, unsigned short *uo,                  \
                                                         unsigned short *mo, const unsigned short *q,             \
                                                         const unsigned short *k, const unsigned short *v,        \
                                                         const float *g, const float *beta, ll R, int S, int Hv,  \
                                                         int Hk) {                                               \
    gdn_prep<DK, DV>(wo, uo, mo, q, k, v, g, beta, R, S, Hv, Hk);                                                \
  }
#define HY_SCAN(NAME, DK, BV)                                                                                      \
  extern "C" __global__ void __launch_bounds__(128, 2) NAME(void *o, int dto, const unsigned short *q,            \
                                                            const unsigned short *k, const unsigned short *wi,    \
                                                            const unsigned short *ui, const unsigned short *mi,   \
                                                            const float *g, ll R, int S, int Hv, int Hk, int dv) { \
    gdn_scan<DK, BV>(o, dto, q, k, wi, ui, mi, g, R, S, Hv, Hk, dv);                                             \
  }
HY_PREP(dfl_gdn_prep_k32, 32, 32)
HY_PREP(dfl_gdn_prep_k64, 64, 64)
HY_PREP(dfl_gdn_prep_k128, 128, 128)
HY_PREP(dfl_gdn_prep_k32v64, 32, 64) /* dv = 2 dk: Gated DeltaNet's expanded values */
HY_PREP(dfl_gdn_prep_k64v128, 64, 128)
HY_PREP(dfl_gdn_prep_k128v256, 128, 256)
HY_SCAN(dfl_gdn_scan_k32, 32, 32)
HY_SCAN(dfl_gdn_scan_k64, 64, 64)
HY_SCAN(dfl_gdn_scan_k128, 128, 64)

