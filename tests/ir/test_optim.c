/* test_optim.c: the optimizer nodes (ACCUM over 2 micro-steps, SUMSQ_ACC, OPT_PREP, ADAMW) over
** 3 optimizer steps against a direct double implementation of the formulas (torch.optim.AdamW,
** the schedules, global-norm clipping of the gradient of sum(num)/sum(den)), with clipping active
** and inactive. f32 mode: relative error 1e-5. */
#include "irtest.h"

static double sched_lr(const struct dfl_optim_cfg *k, double t) {
  double W = (double)k->warmup, T = (double)k->total;
  if (k->schedule == DFL_SCHED_CONSTANT) return k->lr;
  if (t < W) return k->lr * (t + 1) / W;
  if (k->schedule == DFL_SCHED_COSINE) return k->lr * 0.5 * (1 + cos(M_PI * fmin(1.0, (t - W) / fmax(1.0, T - W))));
  return k->lr * fmax(0.0, (T - t) / fmax(1.0, T - W));
}

static void run_case(const char *what, struct dfl_optim_cfg k) {
  dfl_graph g;
  dfl_graph_init(&g);
  int M = 4, K = 2, N = 3;
  int x = dfl_tensor_2d(&g, "x", DFL_F32, DFL_T_INPUT, M, K), r = dfl_tensor_2d(&g, "r", DFL_F32, DFL_T_INPUT, 1, M * N);
  int den = dfl_tensor_1d(&g, "den", DFL_F32, DFL_T_INPUT, 1);
  int p = dfl_tensor_2d(&g, "p.weight", DFL_F32, DFL_T_PARAM, K, N), b = dfl_tensor_2d(&g, "b.bias", DFL_F32, DFL_T_PARAM, M, N);
  int y = dfl_add(&g, dfl_matmul(&g, x, p, 0, 0, DFL_F32, "xp"), b, "y");
  int flat = dfl_tensor_2d(&g, "flat", DFL_F32, DFL_T_ACT, 1, M * N);
  dfl_op_add(&g, DFL_OP_COPY, &y, 1, &flat, 1, NULL);
  int loss = dfl_matmul(&g, flat, r, 0, 1, DFL_F32, "loss"); /* num = sum(y * R) */
  CHECK(dfl_autodiff(&g, loss) == DFL_OK);
  int st = dfl_build_optimizer(&g, den, &k);
  CHECK(st >= 0 && g.t[p].master >= 0 && g.t[b].grad_acc >= 0);
  if (st < 0) return;
  dfl_cpu c;
  dfl_cpu_init(&c, &g, NULL, 0);
  fill_rand(&c, p, 1), fill_rand(&c, b, 1);
  dfl_cpu_init_masters(&c);
  int np = K * N + M * N;
  double w[18], m[18] = {0}, v[18] = {0}, gacc[18];
  float tmp[18];
  dfl_cpu_get_f(&c, p, tmp, K * N), dfl_cpu_get_f(&c, b, tmp + K * N, M * N);
  for (int i = 0; i < np; i++) w[i] = tmp[i];
  int clipped = 0;
  for (int step = 0; step < 3; step++) {
    double dsum = 0, gabs[18] = {0};
    memset(gacc, 0, sizeof gacc);
    for (int micro = 0; micro < 2; micro++) {
      fill_rand(&c, x, 1), fill_rand(&c, r, 1);
      double d = 1 + 10 * urand();
      dfl_cpu_set_d(&c, den, &d, 1);
      dsum += d;
      CHECK(dfl_cpu_run(&c, DFL_PH_STEP) == DFL_OK);
      double *X = get_all(&c, x), *R = get_all(&c, r);
      for (int i = 0; i < K; i++)
        for (int j = 0; j < N; j++)
          for (int mm = 0; mm < M; mm++)
            gacc[i * N + j] += X[mm * K + i] * R[mm * N + j], gabs[i * N + j] += fabs(X[mm * K + i] * R[mm * N + j]);
      for (int i = 0; i < M * N; i++) gacc[K * N + i] += R[i], gabs[K * N + i] += fabs(R[i]);
      free(X), free(R);
    }
    /* The accumulated gradients against the sums in double, each within 1e-5 of its terms' magnitude
    ** (an f32 sum of 8 terms errs by at most about 5e-7 of it); the reference update then starts from
    ** the graph's own f32 sums. A sum that cancels to near Adam's eps makes m / (sqrt(v) + eps) hang on
    ** its last bits, so a reference from the exact sums failed about one draw in 300 by a few 1e-6. */
    {
      double *gp = get_all(&c, g.t[p].grad_acc), *gb = get_all(&c, g.t[b].grad_acc);
      for (int i = 0; i < np; i++) {
        const double got = i < K * N ? gp[i] : gb[i - K * N];
        if (!(fabs(got - gacc[i]) <= 1e-5 * gabs[i])) {
          fprintf(stderr, "FAIL %s step %d: accumulated gradient %d: %.10g, want %.10g\n", what, step, i, got, gacc[i]);
          fails++;
        }
        gacc[i] = got;
      }
      free(gp), free(gb);
    }
    CHECK(dfl_cpu_run(&c, 1u << DFL_PH_OPTIMIZER) == DFL_OK);
    double ss = 0;
    for (int i = 0; i < np; i++) ss += gacc[i] * gacc[i];
    double gnorm = sqrt(ss) / dsum, coef = k.clip > 0 ? fmin(1, k.clip / (gnorm + 1e-6)) : 1;
    clipped += coef < 1;
    double lr = sched_lr(&k, step), bc1 = 1 - pow(k.beta1, step + 1), bc2 = 1 - pow(k.beta2, step + 1);
    for (int i = 0; i < np; i++) {
      double gi = gacc[i] * coef / dsum;
      w[i] *= 1 - lr * k.wd;
      m[i] = k.beta1 * m[i] + (1 - k.beta1) * gi;
      v[i] = k.beta2 * v[i] + (1 - k.beta2) * gi * gi;
      w[i] -= lr / bc1 * m[i] / (sqrt(v[i] / bc2) + k.eps);
    }
    double got[18], *S = get_all(&c, st);
    dfl_cpu_get_d(&c, p, got, K * N), dfl_cpu_get_d(&c, b, got + K * N, M * N);
    char msg[128];
    snprintf(msg, sizeof msg, "%s step %d: params", what, step);
    near(msg, got, w, np, 1e-5, 1e-3);
    double want_state[DFL_OPT_COUNT] = {step + 1, lr, coef / dsum, gnorm, bc1, bc2};
    snprintf(msg, sizeof msg, "%s step %d: state", what, step);
    near(msg, S, want_state, DFL_OPT_COUNT, 1e-5, 1e-9);
    /* accumulators, sumsq and den are zeroed for the next window; the masters equal the params */
    double *ga = get_all(&c, g.t[p].grad_acc), *ms = get_all(&c, g.t[b].master);
    CHECK(ga[0] == 0 && ga[K * N - 1] == 0 && dfl_cpu_f32(&c, dfl_tensor_find(&g, "opt.den"))[0] == 0);
    CHECK(dfl_cpu_f32(&c, dfl_tensor_find(&g, "opt.sumsq"))[0] == 0);
    CHECK(ms[0] == dfl_cpu_f32(&c, b)[0]);
    free(ga), free(ms), free(S);
  }
  CHECK(k.clip > 0 && k.clip < 1e-2 ? clipped == 3 : clipped == 0); /* gnorm is ~0.1 here */
  dfl_cpu_free(&c);
  dfl_graph_free(&g);
}

/* The three schedules and clip settings main runs; also the op table's row for ACCUM, SUMSQ_ACC,
** OPT_PREP and ADAMW (tests/ir/op_table.h). */
static void optim_cases(void) {
  struct dfl_optim_cfg k = {.lr = 0.05, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .wd = 0.1, .clip = 0.001,
                            .warmup = 2, .total = 4, .schedule = DFL_SCHED_COSINE};
  run_case("cosine, clipped", k);
  k.clip = 0, k.schedule = DFL_SCHED_LINEAR, k.wd = 0, k.warmup = 1;
  run_case("linear, no clip", k);
  k.clip = 1e6, k.schedule = DFL_SCHED_CONSTANT;
  run_case("constant, clip inactive", k);
}
OP_CASE(optab_optim_steps, fails, rng_s, optim_cases())

DFL_TEST_MAIN {
  rng_init("ir_optim");
  optim_cases();
  if (fails) { fprintf(stderr, "%d check(s) failed\n", fails); return 1; }
  printf("ir_optim: ok\n");
  return 0;
}
