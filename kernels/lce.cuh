/*
** lce.cuh: the row kernel of the fused linear cross-entropy (LINEAR_CE). The host chunks the ROWS
** (compiler/plan.c dfl_plan_lce_ws): per chunk a cuBLASLt GEMM writes the logits of those rows over
** the whole vocabulary, [rows, V] with row stride ld, in the head's dtype (bf16 for bf16 graphs, as
** the reference's bf16 matmul rounds them), then
**   dfl_lce_row  (one CTA per row) finds max, sum of exp, argmax and the number of logits above the
**                label's in one read (all in f32), writes ce / correct / topk_hit for the row, and in a
**                second read writes dlogits = w (softmax - onehot) in place over the logits (same
**                element, same dtype) for the dY GEMM;
** and after the last chunk dfl_lce_num writes the weighted sum. Every row's softmax is complete
** within its chunk, so each vocabulary GEMM runs once per row (no recomputed logits).
** Rows with weight 0 are skipped: their dlogits are 0 and ce / correct / topk_hit are 0.
** period > 1 (LINEAR_CE a.B): the blocks' anchor rows (r % period == 0, weight 0 by construction)
** are not in the chunks at all: dfl_lce_rows gathers the other rows of y into a staging buffer
** before the logits GEMM and scatters dy back after the dY GEMM; chunk row c is row
** c / (period - 1) * period + c % (period - 1) + 1 (the host zeroes the anchor rows' outputs).
*/
#define LCE_T 512
#define LCE_L2E 1.4426950408889634f

/* The full layout's row of chunk row c: with period > 1 the chunks leave out the blocks' anchor rows */
__device__ __forceinline__ ll lce_row_of(ll c, int period) {
  return period > 1 ? c / (period - 1) * period + c % (period - 1) + 1 : c;
}

struct lce_acc {
  float m, s, cnt; /* running max, sum of exp2((x - m) log2e), logits above the label's */
  int i;           /* argmax (lowest index among ties) */
};
__device__ __forceinline__ void lce_add(lce_acc *a, float x, int c, float xl) {
  a->cnt += x > xl ? 1.f : 0.f;
  if (x > a->m) {
    a->s = (a->m == DFL_NINF ? 0.f : a->s * exp2f((a->m - x) * LCE_L2E)) + 1.f;
    a->m = x; a->i = c;
  } else {
    a->s += exp2f((x - a->m) * LCE_L2E);
  }
}
__device__ __forceinline__ void lce_merge(lce_acc *a, float m, float s, int i, float cnt) {
  float mn = fmaxf(a->m, m);
  if (mn != DFL_NINF) a->s = (a->m == DFL_NINF ? 0.f : a->s * exp2f((a->m - mn) * LCE_L2E)) +
                             (m == DFL_NINF ? 0.f : s * exp2f((m - mn) * LCE_L2E));
  if (m > a->m || (m == a->m && i < a->i)) a->i = i;
  a->m = mn;
  a->cnt += cnt;
}

/* The row kernels' prologue for a row of weight 0 (an anchor row, an unsupervised position): its dlogits
** are 0 and ce, correct and topk_hit (and lrow, SOFT: dfl_lce_row_kd's) are 0. Writes them and returns 1
** (the kernel returns at once), or 0 for a row of weight > 0. SOFT is a template argument so each kernel
** compiles to the code of its former inline prologue (the same cubin). */
template <bool SOFT>
__device__ __forceinline__ int lce_zero_row(void *logits, int dtl, ll base, int V, float wr, ll row, float *ce,
                                            float *correct, float *topk_hit, float *lrow, int tid) {
  if (!(wr > 0.f)) {
    for (int c = tid; c < V; c += blockDim.x) stf(logits, dtl, base + c, 0.f);
    if (tid == 0) {
      if (SOFT) ce[row] = correct[row] = topk_hit[row] = lrow[row] = 0.f;
      else ce[row] = correct[row] = topk_hit[row] = 0.f;
    }
    return 1;
  }
  return 0;
}

/* vec: V % 8 == 0 and the logits 16-byte aligned (8 elements per access, ld8/st8). Each thread
** writes exactly the elements it read, so in-place dlogits need no barrier. */
extern "C" __global__ void __launch_bounds__(LCE_T) dfl_lce_row(void *logits, ll ld, int V, int r0,
                                                                const int *labels, const float *w, float *ce,
                                                                float *correct, float *topk_hit, int topk, int dtl,
                                                                int vec, int period) {
  __shared__ float sm[32], ss[32], sc[32];
  __shared__ int si[32];
  __shared__ float s_lse;
  int tid = threadIdx.x, lane = tid & 31, wp = tid >> 5, nw = blockDim.x >> 5;
  ll r = blockIdx.x, row = lce_row_of(r0 + r, period), base = r * ld;
  float wr = w[row];
  int lab = labels[row];
  if (lce_zero_row<false>(logits, dtl, base, V, wr, row, ce, correct, topk_hit, nullptr, tid)) return;
  float xl = lab >= 0 && lab < V ? ldf(logits, dtl, base + lab) : DFL_NINF; /* as the CPU: ce = inf */
  lce_acc a = {DFL_NINF, 0.f, 0.f, 0x7fffffff};
  if (vec) {
    for (int f = tid; f < V / 8; f += blockDim.x) {
      float v[8];
      ld8(logits, dtl, base + 8 * f, v);
#pragma unroll
      for (int k = 0; k < 8; k++) lce_add(&a, v[k], 8 * f + k, xl);
    }
  } else {
    for (int c = tid; c < V; c += blockDim.x) lce_add(&a, ldf(logits, dtl, base + c), c, xl);
  }
  for (int o = 16; o > 0; o >>= 1)
    lce_merge(&a, __shfl_xor_sync(0xffffffffu, a.m, o), __shfl_xor_sync(0xffffffffu, a.s, o),
              __shfl_xor_sync(0xffffffffu, a.i, o), __shfl_xor_sync(0xffffffffu, a.cnt, o));
  if (lane == 0) { sm[wp] = a.m; ss[wp] = a.s; si[wp] = a.i; sc[wp] = a.cnt; }
  __syncthreads();
  if (tid == 0) {
    lce_acc b = {DFL_NINF, 0.f, 0.f, 0x7fffffff};
    for (int k = 0; k < nw; k++) lce_merge(&b, sm[k], ss[k], si[k], sc[k]); /* fixed order */
    float lse = b.m + logf(b.s);
    s_lse = lse;
    ce[row] = lse - xl;
    correct[row] = b.i == lab ? 1.f : 0.f;
    topk_hit[row] = topk > 0 && b.cnt < (float)topk ? 1.f : 0.f;
  }
  __syncthreads();
  float lse = s_lse;
  /* second read: dlogits over the logits, element for element */
  if (vec) {
    for (int f = tid; f < V / 8; f += blockDim.x) {
      float v[8];
      ld8(logits, dtl, base + 8 * f, v);
#pragma unroll
      for (int k = 0; k < 8; k++) v[k] = wr * (exp2f((v[k] - lse) * LCE_L2E) - (8 * f + k == lab ? 1.f : 0.f));
      st8(logits, dtl, base + 8 * f, v);
    }
  } else {
    for (int c = tid; c < V; c += blockDim.x) {
      float v = ldf(logits, dtl, base + c);
      stf(logits, dtl, base + c, wr * (exp2f((v - lse) * LCE_L2E) - (c == lab ? 1.f : 0.f)));
    }
  }
}
/* Soft labels (LINEAR_CE with the target's rows, a.kd_alpha = a, a.kd_temp = T): the host also writes
** the target's logits of the same rows into tlogits (same layout). One CTA a row: the first read keeps
** the hard statistics of z (as dfl_lce_row), the online log-sum-exps of z / T (q) and of t / T (p), and
** p's sum of (t - z) / T rescaled with p's running max, so KL(p || q) = E_p[(t - z) / T] - lse_p +
** lse_q; the row's loss (1 - a) ce + a T^2 KL goes to lrow (ce, correct and topk_hit stay the hard
** ones); the second read writes dlogits = w ((1 - a)(softmax(z) - onehot) + a T (q - p)) over z. */
struct lce_kd {
  float mq, sq;      /* z / T: running max, sum of exp */
  float mp, sp, ep;  /* t / T: running max, sum of exp, sum of exp * (t - z) / T */
};
__device__ __forceinline__ void kd_add(lce_kd *a, float zq, float zp) {
  if (zq > a->mq) { a->sq = (a->mq == DFL_NINF ? 0.f : a->sq * exp2f((a->mq - zq) * LCE_L2E)) + 1.f; a->mq = zq; }
  else a->sq += exp2f((zq - a->mq) * LCE_L2E);
  if (zp > a->mp) {
    const float f = a->mp == DFL_NINF ? 0.f : exp2f((a->mp - zp) * LCE_L2E);
    a->sp = a->sp * f + 1.f, a->ep = a->ep * f + (zp - zq), a->mp = zp;
  } else {
    const float e = exp2f((zp - a->mp) * LCE_L2E);
    a->sp += e, a->ep += e * (zp - zq);
  }
}
__device__ __forceinline__ void kd_merge(lce_kd *a, float mq, float sq, float mp, float sp, float ep) {
  float mn = fmaxf(a->mq, mq);
  if (mn != DFL_NINF) a->sq = (a->mq == DFL_NINF ? 0.f : a->sq * exp2f((a->mq - mn) * LCE_L2E)) +
                              (mq == DFL_NINF ? 0.f : sq * exp2f((mq - mn) * LCE_L2E));
  a->mq = mn;
  mn = fmaxf(a->mp, mp);
  if (mn != DFL_NINF) {
    const float f1 = a->mp == DFL_NINF ? 0.f : exp2f((a->mp - mn) * LCE_L2E), f2 = mp == DFL_NINF ? 0.f : exp2f((mp - mn) * LCE_L2E);
    a->sp = a->sp * f1 + sp * f2, a->ep = a->ep * f1 + ep * f2;
  }
  a->mp = mn;
}
extern "C" __global__ void __launch_bounds__(LCE_T) dfl_lce_row_kd(void *logits, const void *tlogits, ll ld, int V, int r0,
                                                                   const int *labels, const float *w, float *ce,
                                                                   float *correct, float *topk_hit, float *lrow, int topk,
                                                                   int dtl, int vec, int period, float alpha, float temp) {
  __shared__ float sm[32], ss[32], sc[32], kq[32], ks[32], kp[32], kz[32], ke[32];
  __shared__ int si[32];
  __shared__ float s_lse, s_lq, s_lp;
  int tid = threadIdx.x, lane = tid & 31, wp = tid >> 5, nw = blockDim.x >> 5;
  ll r = blockIdx.x, row = lce_row_of(r0 + r, period), base = r * ld;
  float wr = w[row];
  int lab = labels[row];
  if (lce_zero_row<true>(logits, dtl, base, V, wr, row, ce, correct, topk_hit, lrow, tid)) return;
  const float iT = 1.f / temp;
  float xl = lab >= 0 && lab < V ? ldf(logits, dtl, base + lab) : DFL_NINF;
  lce_acc a = {DFL_NINF, 0.f, 0.f, 0x7fffffff};
  lce_kd k = {DFL_NINF, 0.f, DFL_NINF, 0.f, 0.f};
  if (vec) {
    for (int f = tid; f < V / 8; f += blockDim.x) {
      float v[8], t[8];
      ld8(logits, dtl, base + 8 * f, v);
      ld8(tlogits, dtl, base + 8 * f, t);
#pragma unroll
      for (int j = 0; j < 8; j++) { lce_add(&a, v[j], 8 * f + j, xl); kd_add(&k, v[j] * iT, t[j] * iT); }
    }
  } else {
    for (int c = tid; c < V; c += blockDim.x) {
      float v = ldf(logits, dtl, base + c);
      lce_add(&a, v, c, xl);
      kd_add(&k, v * iT, ldf(tlogits, dtl, base + c) * iT);
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    lce_merge(&a, __shfl_xor_sync(0xffffffffu, a.m, o), __shfl_xor_sync(0xffffffffu, a.s, o),
              __shfl_xor_sync(0xffffffffu, a.i, o), __shfl_xor_sync(0xffffffffu, a.cnt, o));
    kd_merge(&k, __shfl_xor_sync(0xffffffffu, k.mq, o), __shfl_xor_sync(0xffffffffu, k.sq, o),
             __shfl_xor_sync(0xffffffffu, k.mp, o), __shfl_xor_sync(0xffffffffu, k.sp, o),
             __shfl_xor_sync(0xffffffffu, k.ep, o));
  }
  if (lane == 0) {
    sm[wp] = a.m; ss[wp] = a.s; si[wp] = a.i; sc[wp] = a.cnt;
    kq[wp] = k.mq; ks[wp] = k.sq; kp[wp] = k.mp; kz[wp] = k.sp; ke[wp] = k.ep;
  }
  __syncthreads();
  if (tid == 0) {
    lce_acc b = {DFL_NINF, 0.f, 0.f, 0x7fffffff};
    lce_kd d = {DFL_NINF, 0.f, DFL_NINF, 0.f, 0.f};
    for (int j = 0; j < nw; j++) { /* fixed order */
      lce_merge(&b, sm[j], ss[j], si[j], sc[j]);
      kd_merge(&d, kq[j], ks[j], kp[j], kz[j], ke[j]);
    }
    float lse = b.m + logf(b.s), lq = d.mq + logf(d.sq), lp = d.mp + logf(d.sp);
    float kl = d.ep / d.sp - lp + lq; /* KL(p || q) >= 0; rounding may leave a hair below */
    s_lse = lse, s_lq = lq, s_lp = lp;
    ce[row] = lse - xl;
    lrow[row] = (1.f - alpha) * (lse - xl) + alpha * temp * temp * fmaxf(kl, 0.f);
    correct[row] = b.i == lab ? 1.f : 0.f;
    topk_hit[row] = topk > 0 && b.cnt < (float)topk ? 1.f : 0.f;
  }
  __syncthreads();
  const float lse = s_lse, lq = s_lq, lp = s_lp, a1 = wr * (1.f - alpha), aT = wr * alpha * temp;
  if (vec) {
    for (int f = tid; f < V / 8; f += blockDim.x) {
      float v[8], t[8];
      ld8(logits, dtl, base + 8 * f, v);
      ld8(tlogits, dtl, base + 8 * f, t);
#pragma unroll
      for (int j = 0; j < 8; j++)
        v[j] = a1 * (exp2f((v[j] - lse) * LCE_L2E) - (8 * f + j == lab ? 1.f : 0.f)) +
               aT * (exp2f((v[j] * iT - lq) * LCE_L2E) - exp2f((t[j] * iT - lp) * LCE_L2E));
      st8(logits, dtl, base + 8 * f, v);
    }
  } else {
    for (int c = tid; c < V; c += blockDim.x) {
      float v = ldf(logits, dtl, base + c), t = ldf(tlogits, dtl, base + c);
      stf(logits, dtl, base + c, a1 * (exp2f((v - lse) * LCE_L2E) - (c == lab ? 1.f : 0.f)) +
                                 aT * (exp2f((v * iT - lq) * LCE_L2E) - exp2f((t * iT - lp) * LCE_L2E)));
    }
  }
}
/* Chunk rows r0 .. r0 + gridDim.x of the compact layout (anchor rows left out, see above) from the
** full layout into the staging buffer (scatter 0), or back (scatter 1): rows of `words` 16-byte words. */
extern "C" __global__ void dfl_lce_rows(char *full, char *stage, ll r0, int words, int period, int scatter) {
  ll f = lce_row_of(r0 + blockIdx.x, period);
  uint4 *pf = (uint4 *)(full + f * words * 16), *ps = (uint4 *)(stage + (ll)blockIdx.x * words * 16);
  for (int k = threadIdx.x; k < words; k += blockDim.x) {
    if (scatter) pf[k] = ps[k];
    else ps[k] = pf[k];
  }
}
/* One block, fixed order: num[0] = sum_r w[r] ce[r]. */
extern "C" __global__ void dfl_lce_num(float *num, const float *ce, const float *w, int R) {
  float s = 0.f;
  for (int r = threadIdx.x; r < R; r += blockDim.x) s += w[r] > 0.f ? w[r] * ce[r] : 0.f;
  s = block_sum(s);
  if (threadIdx.x == 0) num[0] = s;
}
