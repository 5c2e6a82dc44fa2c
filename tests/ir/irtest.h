/* irtest.h: shared helpers of the IR / CPU backend tests: a seeded RNG (fresh each run, printed,
** DFL_SEED=... to replay), checks, and a finite-difference gradient checker. Header-only. */
#ifndef DFL_IRTEST_H
#define DFL_IRTEST_H

#include "compiler/graph.h"
#include "compiler/spec.h"
#include "runtime/cpu/cpu.h"
#include "tests/ir/op_table.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int fails;
#define CHECK_FAILED fails++
#include "tests/common/check.h"

static uint64_t rng_s;
static inline void rng_init(const char *test) {
  const char *e = getenv("DFL_SEED");
  rng_s = e ? strtoull(e, NULL, 0) : ((uint64_t)time(NULL) * 2654435761u) ^ ((uint64_t)getpid() << 16);
  if (!rng_s) rng_s = 1;
  printf("%s: seed %llu (DFL_SEED=%llu to replay)\n", test, (unsigned long long)rng_s, (unsigned long long)rng_s);
}
static inline uint64_t rng_u64(void) {
  rng_s ^= rng_s >> 12, rng_s ^= rng_s << 25, rng_s ^= rng_s >> 27;
  return rng_s * 2685821657736338717ull;
}
static inline double urand(void) { return (double)(rng_u64() >> 11) / 9007199254740992.0; } /* [0,1) */
static inline double srand1(void) { return 2 * urand() - 1; }                             /* [-1,1) */
static inline int irand(int n) { return (int)(rng_u64() % (uint64_t)n); }

/* Fill a float tensor with values in [-amp, amp) (never all zero). */
static inline void fill_rand(dfl_cpu *c, int t, double amp) {
  int64_t n = dfl_tensor_numel(&c->g->t[t]);
  double *v = malloc((size_t)n * sizeof *v);
  for (int64_t i = 0; i < n; i++) v[i] = amp * srand1();
  dfl_cpu_set_d(c, t, v, n);
  free(v);
}
static inline void set_ints(dfl_cpu *c, int t, const int *v) {
  int64_t n = dfl_tensor_numel(&c->g->t[t]);
  for (int64_t i = 0; i < n; i++) dfl_cpu_i32(c, t)[i] = v[i];
}
static double *get_all(dfl_cpu *c, int t) {
  int64_t n = dfl_tensor_numel(&c->g->t[t]);
  double *v = malloc((size_t)n * sizeof *v);
  dfl_cpu_get_d(c, t, v, n);
  return v;
}

/* max |a-b| / (|b| + floor) over n values; prints the worst index when over tol. */
static inline int near(const char *what, const double *a, const double *b, int64_t n, double tol, double floor_) {
  double worst = 0;
  int64_t wi = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs(a[i] - b[i]) / (fabs(b[i]) + floor_);
    if (!(e <= worst)) worst = e, wi = i;
  }
  if (!(worst <= tol)) {
    fprintf(stderr, "FAIL %s: rel error %.3g > %.3g at %lld (got %.10g want %.10g)\n", what, worst, tol, (long long)wi, a[wi], b[wi]);
    fails++;
    return 0;
  }
  return 1;
}

#define FWD_PHASES ((1u << DFL_PH_TARGET) | (1u << DFL_PH_FORWARD) | (1u << DFL_PH_LOSS))

/* Gradient check. `g` holds the forward of the op(s) under test with output `out`; the params
** (kind PARAM) are the inputs to check. Appends loss = sum(out * R) for a random R (or uses `out`
** as the loss when it is already a scalar and use_out_as_loss), runs autodiff, and compares every
** param gradient element to a central difference in f64 mode. fill() sets the non-param inputs. */
typedef void (*fill_fn)(dfl_cpu *c, void *ctx);
static inline void gradcheck(const char *what, dfl_graph *g, int out, const int *params, int np, fill_fn fill, void *ctx,
                      int use_out_as_loss, double tol) {
  int loss = out, rnd = -1;
  g->cur_phase = DFL_PH_LOSS;
  g->cur_label = "test.loss";
  if (!use_out_as_loss) {
    int64_t n = dfl_tensor_numel(&g->t[out]);
    int flat = dfl_tensor_2d(g, "test.flat", DFL_F64, DFL_T_ACT, 1, n);
    dfl_op_add(g, DFL_OP_COPY, &out, 1, &flat, 1, NULL);
    rnd = dfl_tensor_2d(g, "test.r", DFL_F64, DFL_T_INPUT, 1, n);
    loss = dfl_matmul(g, flat, rnd, 0, 1, DFL_F64, "test.loss");
  }
  if (dfl_autodiff(g, loss) != DFL_OK) { fprintf(stderr, "FAIL %s: autodiff\n", what); fails++; return; }
  dfl_cpu c;
  if (dfl_cpu_init(&c, g, NULL, 1) != DFL_OK) { fails++; return; }
  for (int i = 0; i < np; i++) fill_rand(&c, params[i], 1.0);
  if (rnd >= 0) fill_rand(&c, rnd, 1.0);
  if (fill) fill(&c, ctx);
  if (dfl_cpu_run(&c, DFL_PH_ALL) != DFL_OK) { fprintf(stderr, "FAIL %s: run\n", what); fails++; dfl_cpu_free(&c); return; }
  for (int i = 0; i < np; i++) {
    int p = params[i], gi = g->t[p].grad;
    if (gi < 0) { fprintf(stderr, "FAIL %s: param %s got no gradient\n", what, g->t[p].name); fails++; continue; }
    int64_t n = dfl_tensor_numel(&g->t[p]);
    double *an = get_all(&c, gi), *fd = malloc((size_t)n * sizeof *fd), *x = dfl_cpu_f64(&c, p), scale = 0;
    for (int64_t k = 0; k < n; k++) scale = fmax(scale, fabs(an[k]));
    for (int64_t k = 0; k < n; k++) {
      double x0 = x[k], h = 1e-5 * fmax(1.0, fabs(x0)); /* balances truncation (h^2) and round-off (1/h) */
      x[k] = x0 + h;
      dfl_cpu_run(&c, FWD_PHASES);
      double lp = dfl_cpu_f64(&c, loss)[0];
      x[k] = x0 - h;
      dfl_cpu_run(&c, FWD_PHASES);
      double lm = dfl_cpu_f64(&c, loss)[0];
      x[k] = x0;
      fd[k] = (lp - lm) / (2 * h);
    }
    char msg[256];
    snprintf(msg, sizeof msg, "%s: d/d %s", what, g->t[p].name);
    near(msg, an, fd, n, tol, 1e-2 * fmax(scale, 1e-6)); /* FD round-off is ~1e-10 of the loss */
    free(an), free(fd);
  }
  dfl_cpu_free(&c);
}

#endif
