/*
** lce.cuh: the row kernels of the fused linear cross-entropy (LINEAR_CE). The host streams the
** vocabulary in chunks: a cuBLASLt GEMM writes a chunk of f32 logits [R, vc] (row stride ld) and
**   dfl_lce_stats  updates the running max / sum of exp (online softmax), argmax and label logit;
** once every chunk has been seen the lse is final, and per chunk (logits kept from the first pass
** when the workspace holds them all, else recomputed)
**   dfl_lce_grad   counts logits above the label's (top-K) and writes dlogits = w (softmax - onehot)
**                  for the dY GEMM;
**   dfl_lce_finish writes ce, correct, topk_hit per row, and dfl_lce_num the weighted sum.
** Rows with weight 0 are skipped (their dlogits are 0). Row state: 6 arrays of R floats
** (max, sum, label logit, best logit, count above label, argmax as int bits).
*/
#define LCE_M 0
#define LCE_S 1
#define LCE_LAB 2
#define LCE_BEST 3
#define LCE_CNT 4
#define LCE_IDX 5

extern "C" __global__ void dfl_lce_init(float *st, int R) {
  GRID_STRIDE(r, R) {
    st[LCE_M * R + r] = DFL_NINF; st[LCE_S * R + r] = 0.f; st[LCE_LAB * R + r] = DFL_NINF;
    st[LCE_BEST * R + r] = DFL_NINF; st[LCE_CNT * R + r] = 0.f; ((int *)st)[LCE_IDX * R + r] = 0;
  }
}
/* One warp per row. Ties in the argmax go to the lowest vocabulary index. */
extern "C" __global__ void dfl_lce_stats(const float *logits, int ld, int vc, int v0, const int *labels,
                                         const float *w, float *st, int R) {
  int lane = threadIdx.x & 31;
  ll warp = ((ll)blockIdx.x * blockDim.x + threadIdx.x) >> 5, nw = ((ll)gridDim.x * blockDim.x) >> 5;
  for (ll r = warp; r < R; r += nw) {
    if (!(w[r] > 0.f)) continue;
    const float *x = logits + r * ld;
    float cm = DFL_NINF; int ci = 0x7fffffff;
    for (int c = lane; c < vc; c += 32) if (x[c] > cm) { cm = x[c]; ci = c; }
    for (int o = 16; o > 0; o >>= 1) {
      float om = __shfl_xor_sync(0xffffffffu, cm, o); int oi = __shfl_xor_sync(0xffffffffu, ci, o);
      if (om > cm || (om == cm && oi < ci)) { cm = om; ci = oi; }
    }
    float m = st[LCE_M * R + r], mn = fmaxf(m, cm), cs = 0.f;
    for (int c = lane; c < vc; c += 32) cs += __expf(x[c] - mn);
    cs = warp_sum(cs);
    if (lane == 0) {
      st[LCE_S * R + r] = st[LCE_S * R + r] * __expf(m - mn) + cs;
      st[LCE_M * R + r] = mn;
      if (cm > st[LCE_BEST * R + r]) { st[LCE_BEST * R + r] = cm; ((int *)st)[LCE_IDX * R + r] = v0 + ci; }
      int lab = labels[r] - v0;
      if (lab >= 0 && lab < vc) st[LCE_LAB * R + r] = x[lab];
    }
  }
}
extern "C" __global__ void dfl_lce_grad(const float *logits, int ld, int vc, int v0, const int *labels,
                                        const float *w, float *st, void *dlog, int ldd, int dtl, int R) {
  int lane = threadIdx.x & 31;
  ll warp = ((ll)blockIdx.x * blockDim.x + threadIdx.x) >> 5, nw = ((ll)gridDim.x * blockDim.x) >> 5;
  for (ll r = warp; r < R; r += nw) {
    float wr = w[r];
    if (!(wr > 0.f)) {
      for (int c = lane; c < vc; c += 32) stf(dlog, dtl, r * ldd + c, 0.f);
      continue;
    }
    const float *x = logits + r * ld;
    float lse = st[LCE_M * R + r] + logf(st[LCE_S * R + r]), lab = st[LCE_LAB * R + r];
    int lb = labels[r] - v0;
    float cnt = 0.f;
    /* dlog may overwrite the logits in place (same row start; a bf16 element c lands on f32 element
    ** c/2 <= c): the warp reads its 32 logits, syncs, then writes, so no lane overwrites a logit
    ** another lane has yet to read. */
    for (int c0 = 0; c0 < vc; c0 += 32) {
      int c = c0 + lane;
      float xv = c < vc ? x[c] : 0.f;
      __syncwarp();
      if (c < vc) {
        cnt += xv > lab ? 1.f : 0.f;
        stf(dlog, dtl, r * ldd + c, wr * (__expf(xv - lse) - (c == lb ? 1.f : 0.f)));
      }
    }
    cnt = warp_sum(cnt);
    if (lane == 0) st[LCE_CNT * R + r] += cnt;
  }
}
extern "C" __global__ void dfl_lce_finish(float *ce, float *correct, float *topk_hit, const float *st,
                                          const int *labels, const float *w, int R, int topk) {
  GRID_STRIDE(r, R) {
    int sup = w[r] > 0.f;
    float lse = st[LCE_M * R + r] + logf(st[LCE_S * R + r]);
    ce[r] = sup ? lse - st[LCE_LAB * R + r] : 0.f;
    correct[r] = sup && ((const int *)st)[LCE_IDX * R + r] == labels[r] ? 1.f : 0.f;
    topk_hit[r] = sup && topk > 0 && st[LCE_CNT * R + r] < (float)topk ? 1.f : 0.f;
  }
}
/* One block, fixed order: num[0] = sum_r w[r] ce[r]. */
extern "C" __global__ void dfl_lce_num(float *num, const float *ce, const float *w, int R) {
  float s = 0.f;
  for (int r = threadIdx.x; r < R; r += blockDim.x) s += w[r] > 0.f ? w[r] * ce[r] : 0.f;
  s = block_sum(s);
  if (threadIdx.x == 0) num[0] = s;
}
