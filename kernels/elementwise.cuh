/*
** elementwise.cuh: IOTA_MOD, COPY's conversions outside a fusion group, SWIGLU's quantized form, the
** row-quantizing kernels, CONCAT_COLS, and the deterministic two-level reductions behind SUM and
** SUMSQ_ACC (partials per block, then one block adds them in a fixed order, so a replayed step gives
** bit-identical sums). The pointwise ops (ADD, SCALE, COPY, FILL, SWIGLU, SWIGLU_BWD, ACCUM, ...) are
** generated per graph from compiler/pointwise.def (compiler/codegen.c), not written here.
*/
extern "C" __global__ void dfl_iota_mod(int *out, ll n, int m) {
  GRID_STRIDE(i, n) out[i] = (int)(i % m);
}
extern "C" __global__ void dfl_copy(void *out, int dto, const void *x, int dtx, ll n) {
  GRID_STRIDE(i, n) stf(out, dto, i, ldf(x, dtx, i));
}
__device__ __forceinline__ float dfl_sigmoid(float g) { return dfl_sigm<false>(g); }
/* SWIGLU's quantized form (dfl_fuse_quant; an FP8 target's input of its down projection): a block
** per row (common.cuh rowq_store), h = silu(g) u with the IEEE division (the generated SWIGLU and the pipelined
** kernel below take the approximate reciprocal in bf16 graphs: h's last bits may differ from this
** kernel's, which takes the rows it cannot): g and u read once, one
** byte written per feature, h never stored (9 bytes an element unfused in bf16, 5 fused). */
template <int NCH>
__device__ __forceinline__ void swiglu_q(unsigned char *q, float *s, const void *g, int dtg, const void *u, int dtu,
                                         int C, int mid) {
  const ll row = blockIdx.x;
  float y[NCH][8], b[8];
#pragma unroll
  for (int c = 0; c < NCH; c++) {
    const ll o = row * C + (c * blockDim.x + threadIdx.x) * 8;
    ld8(g, dtg, o, y[c]);
    ld8(u, dtu, o, b);
#pragma unroll
    for (int k = 0; k < 8; k++) y[c][k] = y[c][k] * dfl_sigmoid(y[c][k]) * b[k];
  }
  rowq_store<NCH>(q, s, row, C, y, mid);
}
/* At most 40 registers: two blocks of the 8B's 768 threads fit an SM (the 46 it takes unbounded
** leave room for one, and an SM whose only block sits at its barrier has no load in flight). */
#define DFL_SWIGLU_Q(N, BOUND)                                                                                      \
  extern "C" __global__ void BOUND dfl_swiglu_q##N(unsigned char *q, float *s, const void *g, int dtg,              \
                                                   const void *u, int dtu, int C, int mid) {                        \
    swiglu_q<N>(q, s, g, dtg, u, dtu, C, mid);                                                                      \
  }
DFL_SWIGLU_Q(2, __maxnreg__(40))
DFL_SWIGLU_Q(4, __launch_bounds__(1024))
/* Pipelined forms (session 12; runtime/cuda.c takes them for bf16 inputs and intermediate, rows of
** C = 8 SQ_NCH blockDim.x features with blockDim.x a multiple of 32 <= 384 (two CTAs an SM); other
** rows the kernels above): CTAs walk rows (grid-stride), and a row's
** loads are issued before the previous row's max is reduced and its bytes written, so a CTA has loads
** in flight through its barrier. The block-per-row kernels have none there: dfl_swiglu_q2 2.6 TB/s,
** dfl_quant_f8 2.2 (ncu, 8B target). SW: h = silu(g) u (dfl_swiglu_qr), h = g r u with r the row's
** 1 / rms (dfl_rmsnorm_qr: u the norm weight, a barrier more a row; rmsnorm_wq took 1.9 TB/s), or
** h = g (dfl_quant_f8r, u unused); h held as bf16 pairs (the intermediate's dtype: the same bytes as
** rowq_store's and dfl_quant_f8's; the norm's r from its f32 sum in another order). SW 3 (session 17,
** dfl_rmsnorm_r): the norm's y = x r w stored as bf16, not quantized, one barrier a row; the
** warp-per-row rmsnorm_w (one row a warp, no loads in flight past it) took 25.8 us for the 8B target's
** 4096 x 4096 where this takes 20.2 and a copy of its bytes 19.0 (bench_memops). */
#define SQ_NCH 4
/* WF (SW >= 2): the norm weight is f32 (the (1 + w) norms of qwen3_5, folded at load), read as two
** 16-byte words per 8 features; x and y stay bf16 */
template <int SW, bool WF = false>
__device__ __forceinline__ void rowq_pipe(unsigned char *q, float *s, const void *g, const void *u, ll rows, int C,
                                          float *rstd = 0, float eps = 0.f) {
  __shared__ float red[2][32], rss[2][32];
  const int t = threadIdx.x, nw = blockDim.x >> 5;
  const uint4 *gp = (const uint4 *)g + t, *up = (const uint4 *)u + t;
  const ll cv = C / 8;   /* 16-byte vectors a row */
  uint4 ga[SQ_NCH], ua[SQ_NCH];
  ll row = blockIdx.x;
  if (row < rows)
#pragma unroll
    for (int c = 0; c < SQ_NCH; c++) {
      ga[c] = gp[row * cv + c * blockDim.x];
      if (SW == 1) ua[c] = up[row * cv + c * blockDim.x];
    }
  for (int par = 0; row < rows; row += gridDim.x, par ^= 1) {
    uint4 h[SQ_NCH];
    float amax = 0.f, r = 0.f;
    if (SW >= 2) {   /* RMSNORM: the row's 1 / rms first, the next row's loads in flight meanwhile */
      float ss = 0.f;
#pragma unroll
      for (int c = 0; c < SQ_NCH; c++) {
        float a[8];
        h[c] = ga[c];
        dfl_bf8(h[c], a);
#pragma unroll
        for (int k = 0; k < 8; k++) ss += a[k] * a[k];
      }
      if (row + gridDim.x < rows)
#pragma unroll
        for (int c = 0; c < SQ_NCH; c++) ga[c] = gp[(row + gridDim.x) * cv + c * blockDim.x];
      ss = warp_sum(ss);
      if ((t & 31) == 0) rss[par][t >> 5] = ss;
      __syncthreads();
      ss = 0.f;
      for (int w = 0; w < nw; w++) ss += rss[par][w];   /* fixed order */
      r = rsqrtf(ss / C + eps);
      if (t == 0) rstd[row] = r;
    }
#pragma unroll
    for (int c = 0; c < SQ_NCH; c++) {
      float a[8];
      if (SW >= 2) {   /* y = x r w, rounded to bf16 (the unfused graph's intermediate) */
        float b[8];
        dfl_bf8(h[c], a);
        if (WF) {
          const float4 *wp = (const float4 *)u + 2 * (c * blockDim.x + t);
          const float4 w0 = __ldg(wp), w1 = __ldg(wp + 1);
          b[0] = w0.x, b[1] = w0.y, b[2] = w0.z, b[3] = w0.w, b[4] = w1.x, b[5] = w1.y, b[6] = w1.z, b[7] = w1.w;
        } else {
          dfl_bf8(__ldg(up + c * blockDim.x), b);
        }
#pragma unroll
        for (int k = 0; k < 8; k++) a[k] = a[k] * r * b[k];
        h[c] = dfl_f2bf8(a);
      } else if (SW) {
        float b[8];
        dfl_bf8(ga[c], a);
        dfl_bf8(ua[c], b);
#pragma unroll
        for (int k = 0; k < 8; k++) a[k] = a[k] * dfl_sigm<true>(a[k]) * b[k];   /* bf16 only */
        h[c] = dfl_f2bf8(a);
      } else h[c] = ga[c];
      if (SW == 3) {   /* y itself, no quantization: the row is done */
        ((uint4 *)q)[row * cv + c * blockDim.x + t] = h[c];
        continue;
      }
      dfl_bf8(h[c], a);
#pragma unroll
      for (int k = 0; k < 8; k++) amax = fmaxf(amax, fabsf(a[k]));
    }
    if (SW == 3) continue;
    const ll nx = row + gridDim.x;
    if (SW < 2 && nx < rows)   /* the next row's loads, in flight through the barrier below */
#pragma unroll
      for (int c = 0; c < SQ_NCH; c++) {
        ga[c] = gp[nx * cv + c * blockDim.x];
        if (SW == 1) ua[c] = up[nx * cv + c * blockDim.x];
      }
    amax = warp_max(amax);
    if ((t & 31) == 0) red[par][t >> 5] = amax;
    __syncthreads();   /* red[par] is written again two rows on, after the next row's barrier */
    amax = red[par][0];
    for (int w = 1; w < nw; w++) amax = fmaxf(amax, red[par][w]);
    const float inv = dfl_fp8_inv(amax);
    if (t == 0) s[row] = dfl_fp8_scale(amax);
#pragma unroll
    for (int c = 0; c < SQ_NCH; c++) {
      float a[8];
      dfl_bf8(h[c], a);
      *(uint2 *)(q + row * C + (c * blockDim.x + t) * 8) = dfl_e4m3x8(a, inv);
    }
  }
}
extern "C" __global__ void __launch_bounds__(384, 2) dfl_swiglu_qr(unsigned char *q, float *s, const void *g,
                                                                  const void *u, ll rows, int C) {
  rowq_pipe<1>(q, s, g, u, rows, C);
}
/* Rows of up to 17,408 features (the 27B's MLP: C / 32 = 544 threads) at one CTA an SM: the block-per-row
** dfl_swiglu_q4 took them at 1.28 TB/s (207 ms of the FP8 27B forward, one H100) */
extern "C" __global__ void __launch_bounds__(544, 1) dfl_swiglu_qr1(unsigned char *q, float *s, const void *g,
                                                                   const void *u, ll rows, int C) {
  rowq_pipe<1>(q, s, g, u, rows, C);
}
extern "C" __global__ void __launch_bounds__(384, 2) dfl_rmsnorm_qr(unsigned char *q, float *s, float *rstd,
                                                                   const void *x, const void *w, ll rows, int C,
                                                                   float eps) {
  rowq_pipe<2>(q, s, x, w, rows, C, rstd, eps);
}
extern "C" __global__ void __launch_bounds__(384, 2) dfl_rmsnorm_r(void *y, float *rstd, const void *x, const void *w,
                                                                  ll rows, int C, float eps) {
  rowq_pipe<3>((unsigned char *)y, 0, x, w, rows, C, rstd, eps);
}
/* the same with an f32 weight (the hybrid target's norms: the vector kernel took them at 2 TB/s) */
extern "C" __global__ void __launch_bounds__(384, 2) dfl_rmsnorm_rf(void *y, float *rstd, const void *x,
                                                                   const void *w, ll rows, int C, float eps) {
  rowq_pipe<3, true>((unsigned char *)y, 0, x, w, rows, C, rstd, eps);
}
extern "C" __global__ void __launch_bounds__(384, 2) dfl_rmsnorm_qrf(unsigned char *q, float *s, float *rstd,
                                                                    const void *x, const void *w, ll rows, int C,
                                                                    float eps) {
  rowq_pipe<2, true>(q, s, x, w, rows, C, rstd, eps);
}
extern "C" __global__ void __launch_bounds__(384, 2) dfl_quant_f8r(unsigned char *q, float *s, const void *x, ll rows,
                                                                  int C) {
  rowq_pipe<0>(q, s, x, x, rows, C);
}
/* Stage 1 of a reduction: part[blockIdx.x] = sum (squared when sq) over a grid-stride slice. */
extern "C" __global__ void dfl_reduce_part(float *part, const void *x, int dtx, ll n, int sq) {
  float s = 0.f;
  GRID_STRIDE(i, n) { float v = ldf(x, dtx, i); s += sq ? v * v : v; }
  s = block_sum(s);
  if (threadIdx.x == 0) part[blockIdx.x] = s;
}
/* Stage 2, one block: out[0] = (acc ? out[0] : 0) + sum of the np partials. */
extern "C" __global__ void dfl_reduce_final(void *out, int dto, const float *part, int np, int acc) {
  float s = 0.f;
  for (int i = threadIdx.x; i < np; i += blockDim.x) s += part[i];
  s = block_sum(s);
  if (threadIdx.x == 0) stf(out, dto, 0, (acc ? ldf(out, dto, 0) : 0.f) + s);
}
/* CONCAT_COLS, one input at a time: out[r, off + c] = x[r, c] for c < C. */
extern "C" __global__ void dfl_copy_cols(void *out, int dto, ll ldo, ll off, const void *x, int dtx, ll R, ll C) {
  /* 16-bit to the same dtype, columns, offset and stride in whole 16-byte vectors: the bytes as they
  ** are, one division per 8 values (the target's feature concatenation ran at 1 TB/s by value) */
  if (dto == dtx && (dtx == DT_BF16 || dtx == DT_F16) && ((C | off | ldo) & 7) == 0 && vec_ok(out) && vec_ok(x)) {
    const ll c8 = C >> 3;
    GRID_STRIDE(v, R * c8)
      *((uint4 *)((unsigned short *)out + (v / c8) * ldo + off) + v % c8) = ((const uint4 *)x)[v];
    return;
  }
  GRID_STRIDE(t, R * C) stf(out, dto, (t / C) * ldo + off + t % C, ldf(x, dtx, t));
}

/* QUANT_F8 (graph.h): one block per row, amax, then bytes e4m3(x * (448 / amax)) (common.cuh's
** dfl_e4m3x2). The second pass re-reads the row from L2. */
extern "C" __global__ void __launch_bounds__(256) dfl_quant_f8(unsigned char *q, float *s, const void *x, int dtx,
                                                               int C) {
  __shared__ float red[32];
  const ll row = blockIdx.x;
  const int vec = (C & 7) == 0 && vec_ok(x) && vec_ok(q) && (dtx == DT_BF16 || dtx == DT_F16 || dtx == DT_F32);
  float v[8], amax = 0.f;
  if (vec) {
    for (int i = threadIdx.x * 8; i < C; i += blockDim.x * 8) {
      ld8(x, dtx, row * C + i, v);
#pragma unroll
      for (int k = 0; k < 8; k++) amax = fmaxf(amax, fabsf(v[k]));
    }
  } else {
    for (int i = threadIdx.x; i < C; i += blockDim.x) amax = fmaxf(amax, fabsf(ldf(x, dtx, row * C + i)));
  }
  amax = block_max(amax, red);
  const float inv = dfl_fp8_inv(amax);
  if (threadIdx.x == 0) s[row] = dfl_fp8_scale(amax);
  if (vec) {
    for (int i = threadIdx.x * 8; i < C; i += blockDim.x * 8) {
      ld8(x, dtx, row * C + i, v);
      *(uint2 *)(q + row * C + i) = dfl_e4m3x8(v, inv);
    }
  } else {
    for (int i = threadIdx.x; i < C; i += blockDim.x)
      q[row * C + i] = (unsigned char)(dfl_e4m3x2(ldf(x, dtx, row * C + i) * inv, 0.f) & 0xffu);
  }
}
