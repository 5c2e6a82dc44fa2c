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
  ll r = blockIdx.x, row = r0 + r, base = r * ld;
  if (period > 1) row = row / (period - 1) * period + row % (period - 1) + 1;
  float wr = w[row];
  int lab = labels[row];
  if (!(wr > 0.f)) {
    for (int c = tid; c < V; c += blockDim.x) stf(logits, dtl, base + c, 0.f);
    if (tid == 0) ce[row] = correct[row] = topk_hit[row] = 0.f;
    return;
  }
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
/* Chunk rows r0 .. r0 + gridDim.x of the compact layout (anchor rows left out, see above) from the
** full layout into the staging buffer (scatter 0), or back (scatter 1): rows of `words` 16-byte words. */
extern "C" __global__ void dfl_lce_rows(char *full, char *stage, ll r0, int words, int period, int scatter) {
  ll c = r0 + blockIdx.x, f = c / (period - 1) * period + c % (period - 1) + 1;
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
