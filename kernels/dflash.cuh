/*
** dflash.cuh: DFLASH_BLOCKS (block construction, labels, decayed weights; reference §2.3-2.4)
** and DFLASH_METRICS (accuracy, Domino-style acceptance length tau, top-K, per-position sums).
*/
extern "C" __global__ void dfl_dflash_blocks(int *noise, int *pos_q, int *labels, float *weights, const int *ids,
                                             const int *loss_mask, const int *anchors, const int *keep, int batch,
                                             int S, int N, int B, int mask_id, float gamma, int *prev) {
  ll Q = (ll)N * B;
  GRID_STRIDE(t, batch * Q) {
    ll b = t / Q; int q = (int)(t % Q), n = q / B, j = q % B;
    int a = anchors[b * N + n], k = keep[b * N + n] != 0;
    int idx = a + j < S - 1 ? a + j : S - 1;
    noise[t] = (j == 0 && k) ? ids[b * S + a] : mask_id;
    pos_q[t] = a + j;
    labels[t] = ids[b * S + idx];
    if (prev) prev[t] = (int)(b * S + (idx > 0 ? idx - 1 : 0)); /* soft labels: the target row before the label */
    int m = k && a + j < S && j >= 1 && loss_mask[b * S + idx] != 0;
    weights[t] = m ? (gamma > 0.f ? expf(-(float)(j > 1 ? j - 1 : 0) / gamma) : 1.f) : 0.f;
  }
}
/* Layout: 5 scalars (graph.h DFL_METRIC_*), then correct[j] for j < B, then count[j] for j < B.
** One block. Sums of 0/1 values are exact in f32, so the atomics below are order independent. */
extern "C" __global__ void dfl_dflash_metrics(float *metrics, const float *correct, const float *weights,
                                              const float *topk, const int *keep, int batch, int N, int B) {
  extern __shared__ float sm[]; /* DFL_METRIC_COUNT(5) + 2B */
  int nm = 5 + 2 * B;
  for (int i = threadIdx.x; i < nm; i += blockDim.x) sm[i] = 0.f;
  __syncthreads();
  for (int blk = threadIdx.x; blk < batch * N; blk += blockDim.x) {
    ll base = (ll)blk * B;
    float an = 0, ad = 0, tk = 0;
    int run = 1, acc = 0;
    for (int j = 0; j < B; j++) {
      int sup = weights[base + j] > 0.f, ok = sup && correct[base + j] > 0.5f;
      if (sup) {
        an += ok; ad += 1.f; tk += topk[base + j] > 0.5f ? 1.f : 0.f;
        atomicAdd(&sm[5 + j], (float)ok);
        atomicAdd(&sm[5 + B + j], 1.f);
      }
      if (j >= 1) { if (run && ok) acc++; else run = 0; }
    }
    atomicAdd(&sm[0], an); atomicAdd(&sm[1], ad); atomicAdd(&sm[4], tk);
    if (keep[blk]) { atomicAdd(&sm[2], 1.f + acc); atomicAdd(&sm[3], 1.f); }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < nm; i += blockDim.x) metrics[i] = sm[i];
}
