/*
** train_cuda (GPU; SKIP 77 without one): the trainer on the CUDA backend against the CPU
** backend, pipelined with the optimizer beside the next target forward (runtime/train.c). The nano
** example (fp32) trains STEPS steps on each from the same spec and a seed drawn
** from the time (printed): every step's loss and grad norm agree within 2e-3 relative (fp32 GPU
** kernels sum in other orders; the CPU accumulates GEMMs differently too), the final drafter
** params within 1e-3; device memory in use is identical at every step after the first, and the
** growth over the context is the backend's arena within 1% + 16 MiB (module, cuBLASLt, graphs). Then a bf16 run: finite and learning.
** Linked with static OpenBLAS (the GPU machine has none), like dflc_gpu.
*/
#include <math.h>
#include <time.h>

#include "runtime/backend.h"
#include "train_test.h"

#define STEPS 12

static int run(const dfl_spec *s, int backend, int fp32, double *loss, double *gnorm, float **params, int64_t *np,
               dfl_trainer *tr) {
  dfl_train_opts o;
  memset(&o, 0, sizeof o);
  char dir[256];
  if (make_tmpdir(dir, sizeof dir, "cuda")) return 1;
  o.steps = STEPS;
  o.out_dir = dir;
  o.backend = backend;
  o.fp32 = fp32;
  o.no_eval = o.no_export = o.no_ckpt = o.quiet = 1;
  o.cpu_threads = 4;
  if (dfl_train_open(tr, s, &o) != DFL_OK) return 1;
  /* pipelined as dfl_train_run (step i+1 enqueued before step i is collected), so that each step's
  ** optimizer runs beside the next step's target forward (the two-branch graph) */
  if (!tr->overlap) {
    printf("FAIL: the trainer does not overlap the optimizer with the target forward\n");
    return 1;
  }
  dfl_step_stats st;
  if (dfl_train_enqueue(tr) != DFL_OK) return 1;
  for (int i = 0; i < STEPS; i++) {
    if ((i + 1 < STEPS && dfl_train_enqueue(tr) != DFL_OK) || dfl_train_collect(tr, &st) != DFL_OK) return 1;
    loss[i] = st.loss;
    gnorm[i] = st.gnorm;
  }
  *np = 0;
  for (int i = 0; i < tr->tg.drafter.n_params; i++) *np += dfl_tensor_numel(&tr->tg.g.t[tr->tg.drafter.params[i]]);
  *params = malloc(sizeof(float) * (size_t)*np);
  int64_t k = 0;
  for (int i = 0; i < tr->tg.drafter.n_params; i++) {
    int t = tr->tg.drafter.params[i];
    int64_t n = dfl_tensor_numel(&tr->tg.g.t[t]);
    if (dfl_be_get_f(&tr->be, t, *params + k, n)) return 1;
    k += n;
  }
  return 0;
}

int main(void) {
  if (!dfl_be_cuda_available()) {
    printf("SKIP: no CUDA device\n");
    return 77;
  }
  uint64_t seed = (uint64_t)time(NULL);
  printf("train_cuda: seed %llu\n", (unsigned long long)seed);
  dfl_spec s;
  if (dfl_spec_load("examples/nano.dfl", &s) != DFL_OK) return 1;
  s.seed = seed;
  s.init_seed = seed ^ 0x5eed;
  double lc[STEPS], gc[STEPS], lg[STEPS], gg[STEPS];
  float *pc = NULL, *pg = NULL;
  int64_t nc = 0, ng = 0;
  dfl_trainer *tc = calloc(1, sizeof *tc), *tgp = calloc(1, sizeof *tgp);
  if (run(&s, DFL_TRAIN_BE_CPU, 1, lc, gc, &pc, &nc, tc)) { printf("FAIL: cpu run\n"); return 1; }
  if (run(&s, DFL_TRAIN_BE_CUDA, 1, lg, gg, &pg, &ng, tgp)) { printf("FAIL: cuda run\n"); return 1; }
  CHECK(tgp->be.kind == DFL_BE_CUDA, "the CUDA backend ran");
  for (int i = 0; i < STEPS; i++) {
    printf("step %2d  loss cpu %.6f gpu %.6f   gnorm cpu %.5f gpu %.5f\n", i + 1, lc[i], lg[i], gc[i], gg[i]);
    CHECK(fabs(lc[i] - lg[i]) <= 2e-3 * fabs(lc[i]), "step %d loss %.6f vs %.6f", i + 1, lc[i], lg[i]);
    CHECK(fabs(gc[i] - gg[i]) <= 2e-3 * fabs(gc[i]) + 1e-5, "step %d gnorm %.6f vs %.6f", i + 1, gc[i], gg[i]);
  }
  CHECK(lc[STEPS - 1] < lc[0], "the loss falls");
  CHECK(nc == ng, "same parameter count");
  double maxd = 0;
  for (int64_t i = 0; i < nc && nc == ng; i++) maxd = fmax(maxd, fabs((double)pc[i] - pg[i]));
  printf("final params: max |cpu - gpu| = %.3g over %lld values\n", maxd, (long long)nc);
  CHECK(maxd <= 1e-3, "final params differ by %.3g", maxd);
  /* memory: nothing allocates in the loop, and the arena is what the device holds */
  int64_t before = tgp->be.mem_before, arena = tgp->be.arena_bytes;
  printf("device memory: %lld .. %lld bytes over steps 2..%d; %lld above the context, arena %lld\n",
         (long long)tgp->mem_min, (long long)tgp->mem_max, STEPS, (long long)(tgp->mem_max - before), (long long)arena);
  CHECK(tgp->mem_min > 0 && tgp->mem_min == tgp->mem_max, "device memory changes between steps");
  /* + a fixed few MiB that do not scale with the model: the loaded cubin, cuBLASLt, graph execs */
  CHECK(llabs(tgp->mem_max - before - arena) <= arena / 100 + (16 << 20), "device growth vs arena");
  dfl_train_close(tc);
  dfl_train_close(tgp);
  free(pc);
  free(pg);
  /* bf16 (the spec's fp32 overridden): finite and learning */
  s.precision = DFL_PREC_BF16;
  s.target_dtype = DFL_PREC_BF16;
  if (run(&s, DFL_TRAIN_BE_CUDA, 0, lg, gg, &pg, &ng, tgp)) { printf("FAIL: bf16 run\n"); return 1; }
  printf("bf16: loss %.4f -> %.4f\n", lg[0], lg[STEPS - 1]);
  CHECK(isfinite(lg[STEPS - 1]) && lg[STEPS - 1] < lg[0], "bf16 learns");
  CHECK(fabs(lg[0] - lc[0]) <= 2e-2 * lc[0], "bf16 first loss %.4f near fp32 %.4f", lg[0], lc[0]);
  dfl_train_close(tgp);
  free(pg);
  free(tc);
  free(tgp);
  if (failures) printf("%d failure(s)\n", failures);
  else printf("PASS\n");
  return failures ? 1 : 0;
}
