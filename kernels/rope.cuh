/*
** rope.cuh: NeoX rotate-half RoPE on every head. One thread per (row, head, i < hd/2) pair.
** The angle is formed in double: positions reach 1e5 and an f32 angle would be off by ~1e-2 rad.
*/
extern "C" __global__ void dfl_rope(void *out, int dto, const void *x, int dtx, const int *pos, ll rows, int nh,
                                    int hd, double theta, int inverse) {
  int half = hd / 2;
  ll n = rows * nh * half;
  GRID_STRIDE(t, n) {
    int i = (int)(t % half);
    ll rh = t / half, r = rh / nh;
    ll base = rh * hd;
    double ang = (double)pos[r] * pow(theta, -2.0 * i / hd);
    double sn, cs;
    sincos(ang, &sn, &cs);
    float c = (float)cs, s = inverse ? -(float)sn : (float)sn;
    float x1 = ldf(x, dtx, base + i), x2 = ldf(x, dtx, base + i + half);
    stf(out, dto, base + i, x1 * c - x2 * s);
    stf(out, dto, base + i + half, x2 * c + x1 * s);
  }
}
/* Vector path (hd % 16 == 0, 16-byte aligned, bf16/f16/f32): a CTA takes DFL_ROPE_RT rows at a
** time. Their angles (rows x hd/2, formed in double as above: same values) go to shared memory
** once, then every (row, head, 8 consecutive i) of those rows is rotated with 16-byte accesses.
** Each angle is formed once per op: the double pow/sincos, not the bytes, bounded the earlier
** kernel that formed 8 angles per thread for every group of 4 heads (1.1 TB/s). Since session 11
** the CTA forms its hd/2 inverse frequencies once (double pow, as before: the same angles), and
** an angle's sine and cosine come from a double range reduction and an f32 sincosf of the reduced
** angle with a first-order correction (rope_sincos): a few DP operations instead of a double sincos,
** whose latency one wave of CTAs could not hide (RoPE ran at 1.2 TB/s in the 8B step). Issuing four
** items' loads at once (126 registers, two CTAs an SM) was slower: 0.87 TB/s.
** Normed form (wn != NULL: ROPE with a norm weight, made by dfl_fuse_norm_rope): each head is
** first RMS-normalized (f32 statistics over its hd features, the ni threads of a (row, head)
** reducing by shuffles) and scaled by wn, rounded to dty (the dtype of the intermediate the fusion
** removed), then rotated: the per-head q/k norm and RoPE of the target in one pass. It needs
** ni = hd / 16 to be a power of two (a (row, head) is ni aligned lanes of one warp). */
#define DFL_ROPE_RT 4
/* The normed form's per-head step, shared by both vector kernels so that they give the same values: a
** (row, head)'s 8 + 8 features of this lane normalized by the f32 RMS over its hd features (the sum of
** its ni lanes by shuffles), scaled by the norm weight and rounded to dty. wts(w1, w2) gives the
** lane's 8 + 8 weights once the sum is taken (dfl_rope_r loads them only then: fewer registers). */
template <class Wts>
__device__ __forceinline__ void rope_norm16(float *x1, float *x2, Wts wts, int ni, int hd, float eps, int dty) {
  float ss = 0.f, w1[8], w2[8];
#pragma unroll
  for (int k = 0; k < 8; k++) ss += x1[k] * x1[k] + x2[k] * x2[k];
  for (int o = ni >> 1; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float r = rsqrtf(ss / hd + eps);
  wts(w1, w2);
#pragma unroll
  for (int k = 0; k < 8; k++) x1[k] = x1[k] * r * w1[k], x2[k] = x2[k] * r * w2[k];
  rope_round8(x1, dty);
  rope_round8(x2, dty);
}
extern "C" __global__ void __launch_bounds__(256) dfl_rope_v(void *out, int dto, const void *x, int dtx,
                                                             const int *pos, ll rows, int nh, int hd, double theta,
                                                             int inverse, const void *wn, int dtw, int dty, float eps) {
  extern __shared__ double dfl_rope_sm[];   /* half inverse frequencies, then DFL_ROPE_RT x half (cos, +-sin) */
  int half = hd / 2, ni = half / 8;
  double *invf = dfl_rope_sm;
  float2 *dfl_rope_tab = (float2 *)(dfl_rope_sm + half);
  for (int i = threadIdx.x; i < half; i += blockDim.x) invf[i] = pow(theta, -2.0 * i / hd);   /* the barrier below */
  float w1[8], w2[8];
  if (wn) {   /* every thread keeps the same 8 + 8 weights: its i0 is fixed (blockDim % ni == 0) */
    int i0 = (threadIdx.x % ni) * 8;
    ld8(wn, dtw, i0, w1);
    ld8(wn, dtw, i0 + half, w2);
  }
  for (ll r0 = (ll)blockIdx.x * DFL_ROPE_RT; r0 < rows; r0 += (ll)gridDim.x * DFL_ROPE_RT) {
    int nr = rows - r0 < DFL_ROPE_RT ? (int)(rows - r0) : DFL_ROPE_RT;
    __syncthreads();   /* the previous rows' readers are done with the table */
    for (int t = threadIdx.x; t < nr * half; t += blockDim.x) {
      float sn, cs;
      rope_sincos((double)pos[r0 + t / half] * invf[t % half], &sn, &cs);
      dfl_rope_tab[t] = make_float2(cs, inverse ? -sn : sn);
    }
    __syncthreads();
    int items = nr * nh * ni;
    /* blockDim.x % ni == 0: a thread keeps its i0 and steps its (row, head) by blockDim.x / ni, so
    ** no division by ni per item (the kernel is partly instruction-bound) */
    const int i0 = (threadIdx.x % ni) * 8, gstep = blockDim.x / ni;
    /* a uniform trip count: the normed form's shuffles need every lane of a (row, head) group */
    for (int t0 = 0, g = threadIdx.x / ni; t0 < items; t0 += blockDim.x, g += gstep) {
      int ok = t0 + (int)threadIdx.x < items, rr = g / nh;
      ll base = (r0 * nh + g) * hd;   /* row r0 + rr, head g % nh */
      const float2 *cs = dfl_rope_tab + rr * half + i0;
      float x1[8], x2[8], o1[8], o2[8];
      if (ok) {
        ld8(x, dtx, base + i0, x1);
        ld8(x, dtx, base + i0 + half, x2);
      } else for (int k = 0; k < 8; k++) x1[k] = x2[k] = 0.f;
      if (wn)
        rope_norm16(x1, x2, [&](float *a, float *b) { for (int k = 0; k < 8; k++) a[k] = w1[k], b[k] = w2[k]; }, ni, hd,
                    eps, dty);
      if (!ok) continue;
#pragma unroll
      for (int k = 0; k < 8; k++) {
        float c = cs[k].x, s = cs[k].y;
        o1[k] = x1[k] * c - x2[k] * s;
        o2[k] = x2[k] * c + x1[k] * s;
      }
      st8(out, dto, base + i0, o1);
      st8(out, dto, base + i0 + half, o2);
    }
  }
}

/* This lane's 8 angles of a row at position p (frequencies i0 .. i0 + 7 of invf), sine negated for
** the inverse rotation: dfl_rope_r and the item kernels form them alike. */
/* One (row, head)'s 8 + 8 bf16 features of this lane (a: i0 .., b: i0 + half ..), in place: normed
** first when wn is set (rope_norm16, the weights read at wv), then rotated by the row's angles. */
__device__ __forceinline__ void rope_head_bf16(uint4 &a, uint4 &b, const float *cs, const float *sn, const void *wn,
                                               const uint4 *wv, int half, int ni, int hd, float eps) {
  float x1[8], x2[8], o1[8], o2[8];
  dfl_bf8(a, x1);
  dfl_bf8(b, x2);
  if (wn)
    rope_norm16(x1, x2, [&](float *u, float *v) { dfl_bf8(__ldg(wv), u); dfl_bf8(__ldg(wv + half / 8), v); }, ni, hd,
                eps, DT_BF16);
#pragma unroll
  for (int k = 0; k < 8; k++) {
    o1[k] = x1[k] * cs[k] - x2[k] * sn[k];
    o2[k] = x2[k] * cs[k] + x1[k] * sn[k];
  }
  a = dfl_f2bf8(o1);
  b = dfl_f2bf8(o2);
}

/* Row form (session 12; runtime/cuda.c takes it for bf16 x and out (normed: bf16 norm weight and
** intermediate) and ni = hd / 16 a power of two <= 32; other rows dfl_rope_v). ni threads
** hold a row's 8 frequencies each and walk all its heads, ROPE_HB heads' loads at once. A row's
** angles are formed once, in registers: no table, no barrier but the one after the CTA's inverse
** frequencies. dfl_rope_v formed a 4-row angle table between two barriers per 4 rows and kept one
** head's two loads in flight per thread: 1.7 TB/s on the target's q and 0.7 on its k (ncu, 8B step).
** The same arithmetic as dfl_rope_v (inverse frequencies, angles, the norm by rope_norm16), so the
** same values; cuda_ops checks both against the CPU. */
#define ROPE_HB 8
extern "C" __global__ void __launch_bounds__(256) dfl_rope_r(void *out, const void *x, const int *pos, ll rows, int nh,
                                                             int hd, double theta, int inverse, const void *wn,
                                                             float eps) {
  extern __shared__ double dfl_rope_sm[];   /* the hd / 2 inverse frequencies */
  const int half = hd / 2, ni = half / 8, rb = blockDim.x / ni, li = threadIdx.x % ni, i0 = li * 8;
  for (int i = threadIdx.x; i < half; i += blockDim.x) dfl_rope_sm[i] = pow(theta, -2.0 * i / hd);
  const uint4 *wv = (const uint4 *)((const unsigned short *)wn + i0);   /* read per head (L1): registers */
  __syncthreads();
  const unsigned short *xs = (const unsigned short *)x;
  unsigned short *os = (unsigned short *)out;
  /* a uniform trip count per block: the normed form's shuffles need every lane of a row's group */
  for (ll r0 = (ll)blockIdx.x * rb; r0 < rows; r0 += (ll)gridDim.x * rb) {
    const ll row = r0 + threadIdx.x / ni;
    const int ok = row < rows;
    const ll base = (ok ? row : 0) * nh * hd + i0;
    float cs[8], sn[8];
    for (int h0 = 0; h0 < nh; h0 += ROPE_HB) {
      uint4 a[ROPE_HB], b[ROPE_HB];
#pragma unroll
      for (int j = 0; j < ROPE_HB; j++)
        if (ok && h0 + j < nh) {
          a[j] = *(const uint4 *)(xs + base + (ll)(h0 + j) * hd);
          b[j] = *(const uint4 *)(xs + base + (ll)(h0 + j) * hd + half);
        } else a[j] = b[j] = make_uint4(0, 0, 0, 0);
      if (h0 == 0)   /* the row's angles, while its first loads are in flight */
        rope_angles8(ok ? (double)pos[row] : 0.0, dfl_rope_sm, i0, inverse, cs, sn);
#pragma unroll
      for (int j = 0; j < ROPE_HB; j++) {
        if (h0 + j >= nh) break;   /* uniform over the block */
        rope_head_bf16(a[j], b[j], cs, sn, wn, wv, half, ni, hd, eps);
        if (ok) {
          *(uint4 *)(os + base + (ll)(h0 + j) * hd) = a[j];
          *(uint4 *)(os + base + (ll)(h0 + j) * hd + half) = b[j];
        }
      }
    }
  }
}

/* Item form (session 14; runtime/cuda.c takes it where it took dfl_rope_r, and for the pair form of
** ROPE: dfl_fuse_rope_pair). An item is ROPE_PH heads of one row of one tensor (x: nh heads; x2: nh2,
** 0 for a single ROPE); the hd / 16 threads of an item form the row's 8 angles each in registers
** and issue the item's ROPE_PH x 2 loads at once. dfl_rope_r walked a row's heads ROPE_HB at a time,
** a row per thread group: the target's q (4096 rows) gave the H200 one CTA an SM, 8 warps, each
** waiting out every batch's loads in turn; k's launch ran alone at 0.7-1.7 TB/s. Here q and k are
** one launch of 4096 x 5 items, several per SM at once. The angles are formed once per item instead
** of once per row (a few DP operations and a sincosf per frequency: about 2% of the instructions).
** Same arithmetic as dfl_rope_r and dfl_rope_v, so the same values. */
template <int PH>
__device__ __forceinline__ void rope_items(void *out, const void *x, const void *wn, int nh, void *out2, const void *x2,
                                           const void *wn2, int nh2, const int *pos, ll rows, int hd, int inverse,
                                           float eps, const double *invf) {
  const int half = hd / 2, ni = half / 8, ipb = blockDim.x / ni, i0 = (threadIdx.x % ni) * 8;
  const int nc = (nh + PH - 1) / PH, nc2 = (nh2 + PH - 1) / PH, nct = nc + nc2;
  const ll items = rows * nct;
  /* a uniform trip count per block: the normed form's shuffles need every lane of the warp */
  for (ll t0 = (ll)blockIdx.x * ipb; t0 < items; t0 += (ll)gridDim.x * ipb) {
    const ll it = t0 + threadIdx.x / ni;
    const int ok = it < items;
    const ll row = ok ? it / nct : 0;
    const int c = ok ? (int)(it - row * nct) : 0, sec = c >= nc;
    const int h0 = (sec ? c - nc : c) * PH, nhs = sec ? nh2 : nh;
    const unsigned short *xs = (const unsigned short *)(sec ? x2 : x);
    unsigned short *os = (unsigned short *)(sec ? out2 : out);
    const uint4 *wv = (const uint4 *)((const unsigned short *)(sec ? wn2 : wn) + i0);
    const ll base = (row * nhs + h0) * hd + i0;
    const int nv = ok ? (nhs - h0 < PH ? nhs - h0 : PH) : 0;   /* heads of this item */
    uint4 a[PH], b[PH];
#pragma unroll
    for (int j = 0; j < PH; j++)
      if (j < nv) {
        a[j] = *(const uint4 *)(xs + base + (ll)j * hd);
        b[j] = *(const uint4 *)(xs + base + (ll)j * hd + half);
      } else a[j] = b[j] = make_uint4(0, 0, 0, 0);
    float cs[8], sn[8];   /* the row's angles, while the loads are in flight */
    rope_angles8(ok ? (double)pos[row] : 0.0, invf, i0, inverse, cs, sn);
#pragma unroll
    for (int j = 0; j < PH; j++) {   /* every lane runs every j: the shuffles of rope_norm16 */
      rope_head_bf16(a[j], b[j], cs, sn, wn, wv, half, ni, hd, eps);
      if (j < nv) {
        *(uint4 *)(os + base + (ll)j * hd) = a[j];
        *(uint4 *)(os + base + (ll)j * hd + half) = b[j];
      }
    }
  }
}
/* bf16 x, x2, out, out2 (normed: bf16 weights and intermediate); wn and wn2 both set or both NULL.
** p8: two CTAs an SM (p4, 4 heads an item and three CTAs, lost the comparison: deleted). */
#define DFL_ROPE_P(NAME, PH, MINB)                                                                                      \
  extern "C" __global__ void __launch_bounds__(256, MINB) NAME(void *out, const void *x, const void *wn, int nh, void *out2,  \
                                                         const void *x2, const void *wn2, int nh2, const int *pos,      \
                                                         ll rows, int hd, double theta, int inverse, float eps) {       \
    extern __shared__ double dfl_rope_sm[];                                                                             \
    for (int i = threadIdx.x; i < hd / 2; i += blockDim.x) dfl_rope_sm[i] = pow(theta, -2.0 * i / hd);                 \
    __syncthreads();                                                                                                    \
    rope_items<PH>(out, x, wn, nh, out2, x2, wn2, nh2, pos, rows, hd, inverse, eps, dfl_rope_sm);                                \
  }
DFL_ROPE_P(dfl_rope_p8, 8, 2)
