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
                                     const float *state, float beta1, float beta2, float eps, float wd, ll n) {
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
    stf(grad, dtg, i, 0.f);
  }
}
