/*
** bench_target.c: `dflc bench SPEC --target-only`: the frozen target forward alone, as a pipeline's
** target device runs it (the same graph, fusions and plan: features live at the end), on the
** spec's batch x seq_len tokens. Reports sequence tokens/s and TFLOP/s of the forward, and with
** --ops the time of every op alone: the share outside the GEMMs is what a target-side kernel can
** still win. Random weights (weights = random) are drawn on the device.
*/
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/plan.h"
#include "models/models.h"
#include "runtime/backend.h"
#include "runtime/compile.h"
#include "runtime/cli/bench_ops.h"
#include "runtime/io/weights.h"
#ifdef DFL_HAVE_CUDA
#include "runtime/cuda/cuda.h"
#endif
#ifdef DFL_HAVE_CUDA
#include "runtime/cuda/cuda.h"
#endif

int dfl_bench_target(const dfl_spec *s, const char *spec_file, int64_t steps, int64_t warmup, int reps, int ops, int gemms,
                     int cpu, const char *json) {
  const int64_t B = s->batch, S = s->seq_len;
  const dfl_backend_kind kind = cpu || !dfl_be_cuda_available() ? DFL_BE_CPU : DFL_BE_CUDA;
  /* the target forward as a pipeline's target device runs it, through the compile entry point */
  dfl_compiled *cp = calloc(1, sizeof *cp);
  dfl_compile_req req = {.what = DFL_COMPILE_TARGET, .no_budget = 1,
                         .backend = kind == DFL_BE_CUDA ? DFL_COMPILE_BE_CUDA : DFL_COMPILE_BE_CPU};
  int kd = dfl_compile_drafter_device(s);
  if (!cp || kd < 0 || dfl_compile_device(s, kd, &req, cp) != DFL_OK) {
    fprintf(stderr, "dflc bench: %s: cannot build the target graph\n", spec_file);
    if (cp) dfl_compiled_free(cp);
    free(cp);
    return 1;
  }
  dfl_graph *gp = cp->g;
  int ids = cp->t_ids, planned = cp->planned, rc;
  dfl_backend be;
  dfl_cpu c;
  memset(&be, 0, sizeof be);
  int cpu_open = 0;
  double flops = 0, gemm_fl = 0;
  for (int i = 0; i < gp->nops; i++) {
    double f = dfl_op_flops(gp, &gp->ops[i]);
    flops += f;
    if (gp->ops[i].code == DFL_OP_MATMUL || gp->ops[i].code == DFL_OP_MATMUL_F8) gemm_fl += f;
  }
  char what[256];
  dfl_model_target_describe(s, what, sizeof what);
  if (kind == DFL_BE_CUDA) {
    rc = dfl_be_open_cuda(&be, gp, planned ? &cp->plan : NULL, &ids, 1, &s->opt);
    if (!rc) rc = dfl_be_load_weights(&be, s, NULL);
  } else {
    rc = dfl_cpu_init(&c, gp, planned ? &cp->plan : NULL, 0);
    cpu_open = rc == DFL_OK;
    if (!rc) rc = dfl_weights_load_spec(s, &c, NULL);
    if (!rc) rc = dfl_be_open_cpu(&be, &c);
  }
  if (rc) {
    fprintf(stderr, "dflc bench: %s: cannot open the %s backend for the target graph\n", spec_file,
            kind == DFL_BE_CUDA ? "CUDA" : "CPU");
    if (cpu_open) dfl_cpu_free(&c);
    dfl_compiled_free(cp);
    free(cp);
    return 1;
  }
  printf("bench: %s --target-only on %s (%s), batch %" PRId64 " x %" PRId64 " tokens; %s\n", spec_file, be.name,
         s->precision == DFL_PREC_BF16 ? "bf16" : "fp32", B, S, what);
#ifdef DFL_HAVE_CUDA
  char gpu[512]; /* which kernels this GPU gets (docs/gpus.md) */
  if (kind == DFL_BE_CUDA && dfl_cuda_describe_device(gpu, sizeof gpu) == DFL_OK) printf("%s\n", gpu);
#endif
  printf("memory: plan %.2f GiB, backend arena %.2f GiB\n", planned ? cp->plan.arena_bytes / 1073741824.0 : 0.0,
         be.arena_bytes / 1073741824.0);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  int32_t *in = dfl_be_input_i32(&be, ids);
  for (int64_t i = 0; i < B * S; i++) { /* uniform token ids: the forward's cost does not depend on them */
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    in[i] = (int32_t)(x % (uint64_t)s->target.vocab);
  }
  rc = dfl_be_commit_inputs(&be);
  for (int64_t i = 0; i < warmup && !rc; i++) rc = dfl_be_run(&be, DFL_PH_ALL);
  if (!rc) rc = dfl_be_sync(&be);
  double t0 = dfl_bench_clock();
  for (int64_t i = 0; i < steps && !rc; i++) rc = dfl_be_run(&be, DFL_PH_ALL);
  if (!rc) rc = dfl_be_sync(&be);
  double dt = dfl_bench_clock() - t0;
  int status = rc ? 1 : 0;
  if (!rc) {
    double ms = 1e3 * dt / (double)steps, tps = (double)(B * S) / (ms * 1e-3);
    printf("forward: %" PRId64 " runs in %.3f s: %.2f ms each, %.0f sequence tokens/s\n", steps, dt, ms, tps);
    printf("FLOPs/forward: %.2f TFLOP (GEMMs %.2f, %.1f%%); achieved %.1f TFLOP/s\n", flops / 1e12, gemm_fl / 1e12,
           100 * gemm_fl / flops, flops / (ms * 1e-3) / 1e12);
#ifdef DFL_HAVE_CUDA
    dfl_cuda *cu = dfl_be_cuda_state(&be);
    int other = 0, kernels = cu ? dfl_cuda_graph_nodes(cu, DFL_PH_ALL, &other) : -1;
    if (kernels >= 0) printf("kernel launches per forward: %d (and %d copy or memset nodes)\n", kernels, other);
#endif
    if (ops) rc = dfl_bench_op_profile_be(&be, gp, reps, gemms);
    if (rc) status = 1;
    if (json && !rc) {
      FILE *f = fopen(json, "w");
      if (!f) { fprintf(stderr, "dflc bench: cannot write %s\n", json); status = 1; }
      else {
        fprintf(f, "{\"target_only\":1,\"backend\":\"%s\",\"tokens\":%" PRId64 ",\"forward_ms\":%.6f,"
                   "\"seq_tokens_per_s\":%.3f,\"tflop_per_forward\":%.6f,\"gemm_tflop\":%.6f,\"tflops\":%.4f}\n",
                be.name, B * S, ms, tps, flops / 1e12, gemm_fl / 1e12, flops / (ms * 1e-3) / 1e12);
        fclose(f);
      }
    }
  } else {
    fprintf(stderr, "dflc bench: the target forward failed\n");
  }
  dfl_be_close(&be);
  if (cpu_open) dfl_cpu_free(&c);
  dfl_compiled_free(cp);
  free(cp);
  return status;
}
