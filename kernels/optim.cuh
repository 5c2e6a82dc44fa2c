/*
** optim.cuh: OPT_PREP (one thread: step counter, lr schedule, clip coefficient folded into the
** grad scale) and ADAMW (fp32 master, decoupled weight decay as torch.optim.AdamW).
** State layout: graph.h DFL_OPT_*.
*/
extern "C" __global__ void dfl_opt_prep(float *state, float *sumsq, void *den, int dtden, float lr, ll warmup,
                                        ll total, int schedule, float clip, float beta1, float beta2) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  /* same formulas as the CPU oracle (runtime/cpu_kernels.inc k_opt_prep), in double */
  double t = state[0], W = (double)warmup, T = (double)total, l = lr;
  if (schedule != 1 && t < W) l = lr * (t + 1.0) / W;
  else if (schedule == 0) { /* cosine */
    double span = T - W > 1 ? T - W : 1, prog = (t - W) / span;
    if (prog > 1) prog = 1;
    l = lr * 0.5 * (1.0 + cos(3.14159265358979323846 * prog));
  } else if (schedule == 2) { /* linear */
    double span = T - W > 1 ? T - W : 1, f = (T - t) / span;
    l = lr * (f > 0 ? f : 0);
  }
  float step = (float)(t + 1.0);
  state[0] = step;
  float d = ldf(den, dtden, 0);
  double gn = d > 0.f ? sqrt((double)sumsq[0]) / d : 0.0;
  double coef = clip > 0.f ? fmin(1.0, clip / (gn + 1e-6)) : 1.0;
  state[1] = (float)l;
  state[2] = (float)(d > 0.f ? coef / d : 0.0);
  state[3] = (float)gn;
  state[4] = (float)(1.0 - pow((double)beta1, (double)step));
  state[5] = (float)(1.0 - pow((double)beta2, (double)step));
  sumsq[0] = 0.f;
  stf(den, dtden, 0, 0.f);
}
extern "C" __global__ void dfl_adamw(void *param, int dtp, float *master, float *m, float *v, void *grad, int dtg,
                                     const float *state, float beta1, float beta2, float eps, float wd, ll n,
                                     int keep_grad) {
  float lr = state[1], gs = state[2], bc1 = state[4], bc2 = state[5];
  float sb2 = sqrtf(bc2);
  GRID_STRIDE(i, n) {
    float g = ldf(grad, dtg, i) * gs;
    float mi = beta1 * m[i] + (1.f - beta1) * g;
    float vi = beta2 * v[i] + (1.f - beta2) * g * g;
    float p = master[i] * (1.f - lr * wd);
    p -= (lr / bc1) * mi / (sqrtf(vi) / sb2 + eps);
    m[i] = mi; v[i] = vi; master[i] = p;
    stf(param, dtp, i, p);
    if (!keep_grad) stf(grad, dtg, i, 0.f);
  }
}

/*
** Multi-tensor AdamW and grad-norm: one launch covers up to DFL_MT_MAX tensors, passed by value
** (no device-side table, so nothing outside the plan). Work is in units of 4 elements: f32
** master/m/v move as float4 (16-byte loads/stores), bf16 params/grads as 8 bytes. Arena offsets
** are 256-aligned, so every tensor starts aligned; a ragged tail (n % 4) runs element by element.
** Layout must match runtime/cuda.c mt_args.
*/
#define DFL_MT_MAX 48
struct dfl_mt {
  void *p[DFL_MT_MAX];
  float *ms[DFL_MT_MAX], *m[DFL_MT_MAX], *v[DFL_MT_MAX];
  void *g[DFL_MT_MAX];
  ll n[DFL_MT_MAX];
  ll ustart[DFL_MT_MAX + 1];  /* first unit (4 elements) of each tensor; ustart[nt] = total */
  int nt, dtp, dtg, keep_grad; /* keep_grad: AdamW leaves the grads as they are (graph.h) */
};
__device__ __forceinline__ int mt_find(const dfl_mt &t, ll u) {
  int lo = 0, hi = t.nt - 1;
  while (lo < hi) { int mid = (lo + hi + 1) >> 1; if (t.ustart[mid] <= u) lo = mid; else hi = mid - 1; }
  return lo;
}
/* Four consecutive elements in and out, the dtype known at compile time where it is one of the
** two the benchmarks use (DT: DT_BF16 or DT_F32; -1: dt at run time). Streaming forms
** (ld.global.cs / st.global.cs): the optimizer touches each byte once, so its lines are marked
** evict-first. These kernels are bound by instructions as much as by bytes: a run-time dtype
** switch per access and a tensor search per unit held the grad norm at 1.26 TB/s and AdamW at
** 3.87 TB/s (bench_optim, 27B drafter). */
template <int DT>
__device__ __forceinline__ void ld4cs(const void *p, int dt, ll i, float *x) {
  if (DT == DT_BF16 || (DT < 0 && dt == DT_BF16)) {
    uint2 r = __ldcs((const uint2 *)((const unsigned short *)p + i));
    x[0] = __uint_as_float(r.x << 16); x[1] = __uint_as_float(r.x & 0xffff0000u);
    x[2] = __uint_as_float(r.y << 16); x[3] = __uint_as_float(r.y & 0xffff0000u);
  } else if (DT == DT_F32 || (DT < 0 && dt == DT_F32)) {
    float4 r = __ldcs((const float4 *)((const float *)p + i));
    x[0] = r.x; x[1] = r.y; x[2] = r.z; x[3] = r.w;
  } else for (int k = 0; k < 4; k++) x[k] = ldf(p, dt, i + k);
}
/* Eight, with one 16-byte load: DT_BF16 or DT_F32 only (the flat sum of squares). */
template <int DT>
__device__ __forceinline__ void ld8cs(const void *p, ll i, float *x) {
  if (DT == DT_BF16) {
    dfl_bf8(__ldcs((const uint4 *)((const unsigned short *)p + i)), x);
  } else {
    ld4cs<DT_F32>(p, DT_F32, i, x);
    ld4cs<DT_F32>(p, DT_F32, i + 4, x + 4);
  }
}
template <int DT>
__device__ __forceinline__ void st4cs(void *p, int dt, ll i, const float *x) {
  if (DT == DT_BF16 || (DT < 0 && dt == DT_BF16)) {
    uint2 r;
    r.x = (unsigned)dfl_f2bf(x[0]) | ((unsigned)dfl_f2bf(x[1]) << 16);
    r.y = (unsigned)dfl_f2bf(x[2]) | ((unsigned)dfl_f2bf(x[3]) << 16);
    __stcs((uint2 *)((unsigned short *)p + i), r);
  } else if (DT == DT_F32 || (DT < 0 && dt == DT_F32)) {
    __stcs((float4 *)((float *)p + i), make_float4(x[0], x[1], x[2], x[3]));
  } else for (int k = 0; k < 4; k++) stf(p, dt, i + k, x[k]);
}
/* Same arithmetic as dfl_adamw, element for element. */
template <int DTP, int DTG>
__device__ __forceinline__ void adamw_mt_unit(const dfl_mt &t, ll u, float beta1, float beta2, float eps, float gs,
                                              float decay, float step, float sb2) {
  int k = mt_find(t, u);
  ll i = (u - t.ustart[k]) * 4, n = t.n[k];
  float *ms = t.ms[k], *m = t.m[k], *v = t.v[k];
  if (i + 4 <= n) {
    float g[4], mi[4], vi[4], p[4], z[4] = {0.f, 0.f, 0.f, 0.f};
    ld4cs<DTG>(t.g[k], t.dtg, i, g);
    float4 m4 = __ldcs((const float4 *)(m + i)), v4 = __ldcs((const float4 *)(v + i)), p4 = __ldcs((const float4 *)(ms + i));
    float mo[4] = {m4.x, m4.y, m4.z, m4.w}, vo[4] = {v4.x, v4.y, v4.z, v4.w}, po[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
    for (int e = 0; e < 4; e++) {
      float ge = g[e] * gs;
      mi[e] = beta1 * mo[e] + (1.f - beta1) * ge;
      vi[e] = beta2 * vo[e] + (1.f - beta2) * ge * ge;
      p[e] = po[e] * decay;
      p[e] -= step * mi[e] / (sqrtf(vi[e]) / sb2 + eps);
    }
    __stcs((float4 *)(m + i), make_float4(mi[0], mi[1], mi[2], mi[3]));
    __stcs((float4 *)(v + i), make_float4(vi[0], vi[1], vi[2], vi[3]));
    __stcs((float4 *)(ms + i), make_float4(p[0], p[1], p[2], p[3]));
    st4cs<DTP>(t.p[k], t.dtp, i, p);
    if (!t.keep_grad) st4cs<DTG>(t.g[k], t.dtg, i, z);
  } else {
    for (; i < n; i++) {
      float g = ldf(t.g[k], t.dtg, i) * gs;
      float mi = beta1 * m[i] + (1.f - beta1) * g;
      float vi = beta2 * v[i] + (1.f - beta2) * g * g;
      float p = ms[i] * decay;
      p -= step * mi / (sqrtf(vi) / sb2 + eps);
      m[i] = mi; v[i] = vi; ms[i] = p;
      stf(t.p[k], t.dtp, i, p);
      if (!t.keep_grad) stf(t.g[k], t.dtg, i, 0.f);
    }
  }
}
extern "C" __global__ void dfl_adamw_mt(const dfl_mt t, const float *state, float beta1, float beta2, float eps,
                                        float wd) {
  float lr = state[1], gs = state[2], bc1 = state[4], bc2 = state[5];
  float sb2 = sqrtf(bc2), decay = 1.f - lr * wd, step = lr / bc1;
  GRID_STRIDE(u, t.ustart[t.nt]) {
    if (t.dtp == DT_BF16 && t.dtg == DT_BF16) adamw_mt_unit<DT_BF16, DT_BF16>(t, u, beta1, beta2, eps, gs, decay, step, sb2);
    else if (t.dtp == DT_BF16 && t.dtg == DT_F32) adamw_mt_unit<DT_BF16, DT_F32>(t, u, beta1, beta2, eps, gs, decay, step, sb2);
    else adamw_mt_unit<-1, -1>(t, u, beta1, beta2, eps, gs, decay, step, sb2);
  }
}
/* Sum of squares of the gradients t.g[0..nt): one partial per block (fixed grid: deterministic),
** finished by dfl_reduce_final. A thread issues SUMSQ_U loads (a grid apart: each coalesced over
** the warp) before it adds any, and finds each unit's tensor by moving forward from the last one
** (its units only grow) instead of searching. */
#define SUMSQ_U 4
template <int DT>
__device__ __forceinline__ float sumsq_mt_run(const dfl_mt &t) {
  float s = 0.f;
  ll total = t.ustart[t.nt], stride = (ll)gridDim.x * blockDim.x;
  int k = 0;
  for (ll u0 = (ll)blockIdx.x * blockDim.x + threadIdx.x; u0 < total; u0 += SUMSQ_U * stride) {
    float g[SUMSQ_U][4];
#pragma unroll
    for (int j = 0; j < SUMSQ_U; j++) {
      ll u = u0 + j * stride;
      g[j][0] = g[j][1] = g[j][2] = g[j][3] = 0.f;
      if (u < total) {
        while (u >= t.ustart[k + 1]) k++; /* ustart[nt] = total > u: stops at the last tensor */
        ll i = (u - t.ustart[k]) * 4, n = t.n[k];
        if (i + 4 <= n) ld4cs<DT>(t.g[k], t.dtg, i, g[j]);
        else for (int e = 0; i + e < n; e++) g[j][e] = ldf(t.g[k], t.dtg, i + e);
      }
    }
#pragma unroll
    for (int j = 0; j < SUMSQ_U; j++) s += g[j][0] * g[j][0] + g[j][1] * g[j][1] + g[j][2] * g[j][2] + g[j][3] * g[j][3];
  }
  return s;
}
/* The same sum when the group's gradients lie end to end in memory (the plan places them so:
** runtime/cuda.c mt_run checks it), as one flat array of n values: 16-byte streaming loads, SUMSQ_U
** in flight per thread, no tensor table. */
template <int DT>
__device__ __forceinline__ float sumsq_flat_run(const void *g, ll n) {
  float s = 0.f;
  const ll n8 = n >> 3, stride = (ll)gridDim.x * blockDim.x, t0 = (ll)blockIdx.x * blockDim.x + threadIdx.x;
  for (ll v0 = t0; v0 < n8; v0 += SUMSQ_U * stride) {
    float x[SUMSQ_U][8];
#pragma unroll
    for (int j = 0; j < SUMSQ_U; j++) {
      const ll v = v0 + j * stride;
      if (v < n8) {
        ld8cs<DT>(g, v * 8, x[j]);
      } else {
#pragma unroll
        for (int e = 0; e < 8; e++) x[j][e] = 0.f;
      }
    }
#pragma unroll
    for (int j = 0; j < SUMSQ_U; j++)
#pragma unroll
      for (int e = 0; e < 8; e++) s += x[j][e] * x[j][e];
  }
  for (ll i = n8 * 8 + t0; i < n; i += stride) { float v = ldf(g, DT, i); s += v * v; }
  return s;
}
extern "C" __global__ void dfl_sumsq_flat(float *part, const void *g, int dtg, ll n) {
  float s = dtg == DT_BF16 ? sumsq_flat_run<DT_BF16>(g, n) : sumsq_flat_run<DT_F32>(g, n);
  s = block_sum(s);
  if (threadIdx.x == 0) part[blockIdx.x] = s;
}
extern "C" __global__ void dfl_sumsq_mt(float *part, const dfl_mt t) {
  float s = t.dtg == DT_BF16 ? sumsq_mt_run<DT_BF16>(t) : t.dtg == DT_F32 ? sumsq_mt_run<DT_F32>(t) : sumsq_mt_run<-1>(t);
  s = block_sum(s);
  if (threadIdx.x == 0) part[blockIdx.x] = s;
}
