/*
** bench.c: `dflc bench SPEC [--steps N] [--warmup W] [--json FILE]` (docs/bench.md): training throughput of a
** spec on its device, through the real trainer (dfl_train_open / enqueue / collect; no eval,
** checkpoint or export).
**
** 1. warmup steps (the first captures the CUDA graphs), then N pipelined steps timed end to end:
**    sequence tokens/s, step time, device memory in use at every step (min/max) against the plan;
** 2. a separate timing run of a few steps with one launch per phase and CUDA events between them
**    (one captured graph only gives the total): target forward / drafter forward / loss /
**    backward / optimizer;
** 3. FLOPs per step from dfl_op_flops, achieved TFLOP/s and MFU against 989 TFLOP/s (H200 dense
**    bf16, the peer baseline's peak);
** 4. on a GPU, the board's energy over the timed steps (NVML, runtime/power.c): joules per step,
**    average power against the power limit, and what held the SM clock back near their end. An
**    H200 runs these steps at its 700 W cap, where time = energy / cap (docs/performance.md).
**
** --drafter-only (issue 6): the drafter step alone (dfl_train_opts.drafter_only: no target on the
** graph, random unit-scale features written once, random frozen embedding/head), reporting drafter
** positions/s = anchors x block x batch x accum / step time, and the FLOPs also by the peer's count
** (SpecForge's, which adds the frozen head's weight gradient, one more T x H x V GEMM that dflc
** never computes) so that the two MFUs compare.
*/
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "compiler/cli.h"
#include "runtime/power.h"
#include "runtime/train.h"
#ifdef DFL_HAVE_CUDA
#include <cuda_runtime.h>
#include "runtime/cuda.h"
#endif

#define PEAK_TFLOPS 989.0

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *ph_name[DFL_PH_COUNT] = {"target forward", "drafter forward", "loss", "backward", "optimizer"};

/* Per-phase milliseconds of one optimizer step (accum micro-steps), averaged over `reps` steps.
** The device keeps the last micro-batch's inputs: timing does not depend on the values. */
static int phase_times(dfl_trainer *tr, int reps, double ms[DFL_PH_COUNT]) {
  dfl_backend *be = &tr->be;
  int accum = tr->spec.accum, rc;
  memset(ms, 0, sizeof(double) * DFL_PH_COUNT);
#ifdef DFL_HAVE_CUDA
  dfl_cuda *c = dfl_be_cuda_state(be);
  if (c) {
    cudaStream_t st = (cudaStream_t)dfl_cuda_stream(c);
    cudaEvent_t ev[DFL_PH_COUNT + 1];
    for (int i = 0; i <= DFL_PH_COUNT; i++)
      if (cudaEventCreate(&ev[i]) != cudaSuccess) return DFL_ERR;
    for (int r = 0; r <= reps; r++) {  /* r = 0 captures the per-phase graphs: not counted */
      float part[DFL_PH_COUNT] = {0};
      for (int a = 0; a < accum; a++) {
        cudaEventRecord(ev[0], st);
        for (int p = 0; p < DFL_PH_OPTIMIZER; p++) {
          if ((rc = dfl_cuda_run(c, 1u << p))) return rc;
          cudaEventRecord(ev[p + 1], st);
        }
        if (cudaEventSynchronize(ev[DFL_PH_OPTIMIZER]) != cudaSuccess) return DFL_ERR;
        for (int p = 0; p < DFL_PH_OPTIMIZER; p++) {
          float t = 0;
          cudaEventElapsedTime(&t, ev[p], ev[p + 1]);
          part[p] += t;
        }
      }
      cudaEventRecord(ev[0], st);
      if ((rc = dfl_cuda_run(c, 1u << DFL_PH_OPTIMIZER))) return rc;
      cudaEventRecord(ev[1], st);
      if (cudaEventSynchronize(ev[1]) != cudaSuccess) return DFL_ERR;
      cudaEventElapsedTime(&part[DFL_PH_OPTIMIZER], ev[0], ev[1]);
      if (r > 0)
        for (int p = 0; p < DFL_PH_COUNT; p++) ms[p] += part[p] / reps;
    }
    for (int i = 0; i <= DFL_PH_COUNT; i++) cudaEventDestroy(ev[i]);
    return dfl_be_sync(be);
  }
#endif
  for (int r = 0; r < reps; r++) {
    for (int a = 0; a < accum; a++)
      for (int p = 0; p < DFL_PH_OPTIMIZER; p++) {
        double t0 = now_s();
        if ((rc = dfl_be_run(be, 1u << p))) return rc;
        ms[p] += 1e3 * (now_s() - t0) / reps;
      }
    double t0 = now_s();
    if ((rc = dfl_be_run(be, 1u << DFL_PH_OPTIMIZER))) return rc;
    ms[DFL_PH_OPTIMIZER] += 1e3 * (now_s() - t0) / reps;
  }
  return DFL_OK;
}

/* n steps pipelined as dfl_train_run: one step always queued ahead of the one being read (and,
** with tr->overlap, the optimizer of each beside the next one's target forward). at (NULL: not
** wanted) receives the host time at which each step's results arrived: with a step always queued
** behind the one being read, the device never waits, so successive arrivals are one step apart. */
static int run_steps(dfl_trainer *tr, int64_t n, double *tokens, double *loss0, double *loss1, int64_t *done,
                     double *at) {
  dfl_step_stats st;
  int rc = dfl_train_enqueue(tr);
  for (int64_t i = 1; i <= n && rc == DFL_OK; i++) {
    if (i < n && (rc = dfl_train_enqueue(tr))) break;
    if ((rc = dfl_train_collect(tr, &st))) break;
    if (at) at[i - 1] = now_s();
    *tokens += st.tokens;
    if (i == 1) *loss0 = st.loss;
    *loss1 = st.loss;
    ++*done;
  }
  return rc;
}

/* --ops: every op of one step run on its own and timed, summed per (phase, op kind), with FLOPs
** and the bytes of the op's tensors (each input read once, each output written once: a lower bound
** on its traffic) against the measured ceilings. Printed largest first. On the GPU each op is
** launched alone between CUDA events (no graph: launch gaps are not counted, since an event pair
** brackets only the op's own kernels); on the CPU backend a host clock brackets each op. The
** step is a real one (the optimizer updates the weights), as every timing run here. */
typedef struct { int ph, code, n; double ms, fl, by; } prof_row;
static int dbl_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static int prof_cmp(const void *a, const void *b) {
  double x = ((const prof_row *)a)->ms, y = ((const prof_row *)b)->ms;
  return (x < y) - (x > y);
}
/* ms[i] += the mean time of op i over reps steps (after one warm-up step). */
static int time_ops(dfl_trainer *tr, int reps, double *ms, const char **how) {
  const dfl_graph *g = &tr->tg.g;
  int rc = DFL_OK;
#ifdef DFL_HAVE_CUDA
  dfl_cuda *c = dfl_be_cuda_state(&tr->be);
  if (c) {
    *how = "each op launched alone between CUDA events; a multi-tensor optimizer group as one launch, timed on its first op";
    cudaStream_t st = (cudaStream_t)dfl_cuda_stream(c);
    cudaEvent_t *ev = malloc(sizeof(cudaEvent_t) * (size_t)(g->nops + 1));
    int nev = 0;
    if (!ev) return DFL_ENOMEM;
    for (; rc == DFL_OK && nev <= g->nops; nev++)
      if (cudaEventCreate(&ev[nev]) != cudaSuccess) rc = DFL_ERR;
    for (int r = 0; r <= reps && rc == DFL_OK; r++) { /* r = 0: warm-up, not counted */
      cudaEventRecord(ev[0], st);
      for (int i = 0; i < g->nops && rc == DFL_OK; i++) {
        rc = dfl_cuda_run_op_grouped(c, i); /* the optimizer's kernels as the step runs them */
        cudaEventRecord(ev[i + 1], st);
      }
      if (rc == DFL_OK && cudaStreamSynchronize(st) != cudaSuccess) rc = DFL_ERR;
      for (int i = 0; i < g->nops && rc == DFL_OK && r > 0; i++) {
        float t = 0;
        cudaEventElapsedTime(&t, ev[i], ev[i + 1]);
        ms[i] += t / reps;
      }
    }
    for (int i = 0; i < nev; i++) cudaEventDestroy(ev[i]);
    free(ev);
    return rc;
  }
#endif
  if (!tr->be.cpu) return DFL_ERR;
  *how = "each op run alone, host clock";
  for (int r = 0; r <= reps && rc == DFL_OK; r++)
    for (int i = 0; i < g->nops && rc == DFL_OK; i++) {
      double t0 = now_s();
      rc = dfl_cpu_run_op(tr->be.cpu, i);
      if (r > 0) ms[i] += 1e3 * (now_s() - t0) / reps;
    }
  return rc;
}
/* --gemms: the GEMM rows of --ops split by shape, so a slow GEMM is named: (phase, M x N x K,
** op(A) op(B) as N/T, output dtype, "+acc" for the accumulating or addend form). */
typedef struct { int ph, m, n, k, ta, tb, acc, dt, cnt; double ms, fl; } gemm_row;
static int gemm_cmp(const void *a, const void *b) {
  double x = ((const gemm_row *)a)->ms, y = ((const gemm_row *)b)->ms;
  return (x < y) - (x > y);
}
static void gemm_table(const dfl_graph *g, const double *ms) {
  gemm_row *r = calloc((size_t)g->nops + 1, sizeof *r);
  int nr = 0;
  if (!r) return;
  for (int i = 0; i < g->nops; i++) {
    const dfl_op *op = &g->ops[i];
    if (op->code != DFL_OP_MATMUL && op->code != DFL_OP_MATMUL_F8) continue;
    const dfl_tensor *A = &g->t[op->in[0]], *C = &g->t[op->out[0]];
    int f8 = op->code == DFL_OP_MATMUL_F8, ta = f8 ? 0 : op->a.trans_a, tb = f8 ? 1 : op->a.trans_b;
    gemm_row x = {(int)op->phase, (int)C->shape[0], (int)C->shape[1], (int)(ta ? A->shape[0] : A->shape[1]), ta, tb,
                  !f8 && op->a.beta != 0, (int)C->dtype, 0, 0, 0};
    int k = 0;
    while (k < nr && (r[k].ph != x.ph || r[k].m != x.m || r[k].n != x.n || r[k].k != x.k || r[k].ta != x.ta ||
                      r[k].tb != x.tb || r[k].acc != x.acc || r[k].dt != x.dt))
      k++;
    if (k == nr) r[nr++] = x;
    r[k].cnt++; r[k].ms += ms[i]; r[k].fl += dfl_op_flops(g, op);
  }
  qsort(r, (size_t)nr, sizeof *r, gemm_cmp);
  printf("GEMMs by shape (C[M,N] = op(A)[M,K] op(B)[K,N]; N: as stored, T: transposed):\n");
  printf("  %-16s %7s %7s %7s %-3s %-5s %4s %5s %9s %9s\n", "phase", "M", "N", "K", "op", "out", "acc", "count", "ms",
         "TFLOP/s");
  for (int k = 0; k < nr; k++)
    printf("  %-16s %7d %7d %7d %c%c  %-5s %4s %5d %9.3f %9.1f\n", ph_name[r[k].ph], r[k].m, r[k].n, r[k].k,
           r[k].ta ? 'T' : 'N', r[k].tb ? 'T' : 'N', dfl_dtype_name((dfl_dtype)r[k].dt), r[k].acc ? "+acc" : "", r[k].cnt,
           r[k].ms, r[k].ms > 0 ? r[k].fl / (r[k].ms * 1e-3) / 1e12 : 0);
  free(r);
}
static int op_profile(dfl_trainer *tr, int reps, int gemms) {
  const dfl_graph *g = &tr->tg.g;
  double *ms = calloc((size_t)g->nops + 1, sizeof(double));
  prof_row *rows = calloc((size_t)g->nops + 1, sizeof(prof_row));
  const char *how = "";
  int rc = ms && rows ? time_ops(tr, reps, ms, &how) : DFL_ENOMEM, nr = 0;
  double total = 0;
  for (int i = 0; i < g->nops && rc == DFL_OK; i++) {
    const dfl_op *op = &g->ops[i];
    int k = 0;
    while (k < nr && (rows[k].ph != (int)op->phase || rows[k].code != (int)op->code)) k++;
    if (k == nr) rows[nr++] = (prof_row){(int)op->phase, (int)op->code, 0, 0, 0, 0};
    double by = 0;
    for (int j = 0; j < op->n_in; j++) by += (double)dfl_tensor_bytes(&g->t[op->in[j]]);
    for (int j = 0; j < op->n_out; j++) by += (double)dfl_tensor_bytes(&g->t[op->out[j]]);
    rows[k].n++; rows[k].ms += ms[i]; rows[k].fl += dfl_op_flops(g, op); rows[k].by += by;
    total += ms[i];
  }
  if (rc == DFL_OK) {
    qsort(rows, (size_t)nr, sizeof *rows, prof_cmp);
    printf("ops (%s, mean of %d steps; %.2f ms in all):\n", how, reps, total);
    printf("  %-16s %-16s %5s %9s %6s %9s %9s\n", "phase", "op", "count", "ms", "share", "TFLOP/s", "GB/s(min)");
    for (int k = 0; k < nr; k++)
      printf("  %-16s %-16s %5d %9.3f %5.1f%% %9.3f %9.1f\n", ph_name[rows[k].ph], dfl_opcode_name((dfl_opcode)rows[k].code),
             rows[k].n, rows[k].ms, total > 0 ? 100 * rows[k].ms / total : 0,
             rows[k].ms > 0 ? rows[k].fl / (rows[k].ms * 1e-3) / 1e12 : 0,
             rows[k].ms > 0 ? rows[k].by / (rows[k].ms * 1e-3) / 1e9 : 0);
  }
  if (rc == DFL_OK && gemms) gemm_table(g, ms);
  free(ms); free(rows);
  return rc;
}

int dfl_cmd_bench(int argc, char **argv) {
  const char *spec_file = NULL, *json = NULL;
  int64_t steps = 20, warmup = 3, reps = 3;
  int fp32 = 0, cpu = 0, drafter_only = 0, ops = 0, gemms = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      printf("usage: dflc bench SPEC.dfl [--steps N] [--warmup W] [--phase-steps R] [--json FILE] [--fp32] [--cpu]\n"
             "                 [--drafter-only] [--ops] [--gemms]\n"
             "  Training throughput on the spec's device: sequence tokens/s, step time split by phase,\n"
             "  TFLOP/s and MFU (peak %.0f TFLOP/s), device memory planned and measured, and on a GPU the\n"
             "  board's energy per step and average power (NVML; at the power cap, time = energy / cap).\n"
             "  --drafter-only  the drafter step alone (no target; random features written once): drafter\n"
             "                  positions/s, MFU by dflc's FLOP count and by the peer's\n"
             "  --ops           also time every op alone (CUDA events) and print the time per phase and\n"
             "                  op kind, with TFLOP/s and the GB/s of its tensors\n"
             "  --gemms         --ops and also each GEMM shape's time and TFLOP/s\n", PEAK_TFLOPS);
      return 0;
    } else if (!strcmp(a, "--steps") || !strcmp(a, "--warmup") || !strcmp(a, "--phase-steps")) {
      char *end;
      long long v = next ? strtoll(next, &end, 10) : -1;
      if (!next || *end || v < (strcmp(a, "--warmup") ? 1 : 0)) {
        fprintf(stderr, "dflc bench: %s needs a positive integer\n", a);
        return 2;
      }
      if (!strcmp(a, "--steps")) steps = v;
      else if (!strcmp(a, "--warmup")) warmup = v;
      else reps = v;
      i++;
    } else if (!strcmp(a, "--json")) {
      if (!next) {
        fprintf(stderr, "dflc bench: --json needs a file\n");
        return 2;
      }
      json = next;
      i++;
    } else if (!strcmp(a, "--fp32")) {
      fp32 = 1;
    } else if (!strcmp(a, "--cpu")) {
      cpu = 1;
    } else if (!strcmp(a, "--drafter-only")) {
      drafter_only = 1;
    } else if (!strcmp(a, "--ops")) {
      ops = 1;
    } else if (!strcmp(a, "--gemms")) {
      ops = gemms = 1;
    } else if (a[0] == '-' || spec_file) {
      fprintf(stderr, "dflc bench: unexpected argument '%s'\n", a);
      return 2;
    } else {
      spec_file = a;
    }
  }
  if (!spec_file) {
    fprintf(stderr, "usage: dflc bench SPEC.dfl [--steps N]\n");
    return 2;
  }
  dfl_spec *s = malloc(sizeof *s);
  dfl_trainer *tr = calloc(1, sizeof *tr);
  int rc = s && tr ? dfl_spec_load(spec_file, s) : DFL_ENOMEM;
  if (rc) {
    free(tr);
    free(s);
    return 1;
  }
  /* The CPU reference backend would need hours (and tens of GiB) for a production-sized vocabulary
  ** head: refuse before allocating anything. */
  if ((cpu || !dfl_be_cuda_available()) && (double)s->target.hidden * s->target.vocab > 2e8) {
    fprintf(stderr, "dflc bench: %s: hidden %d x vocabulary %d is too large for the CPU reference backend "
            "(%s); run it on a GPU, or bench a small spec (e.g. examples/nano.dfl)\n",
            spec_file, s->target.hidden, s->target.vocab, cpu ? "--cpu given" : "no usable GPU here");
    free(tr);
    free(s);
    return 1;
  }
  dfl_train_opts o;
  memset(&o, 0, sizeof o);
  o.drafter_only = drafter_only;
  o.steps = warmup + steps + 1;
  o.no_eval = o.no_export = o.no_ckpt = o.quiet = 1;
  o.fp32 = fp32;
  o.backend = cpu ? DFL_TRAIN_BE_CPU : DFL_TRAIN_BE_AUTO;
  o.out_dir = "runs/bench";
  double t_open = now_s();
  if ((rc = dfl_train_open(tr, s, &o))) {
    free(tr);
    free(s);
    return 1;
  }
  t_open = now_s() - t_open;
  const dfl_graph *g = &tr->tg.g;
  int accum = tr->spec.accum;
  double fl[DFL_PH_COUNT] = {0}, fl_step = 0;
  int prev_ph = 0, monotone = 1;
  for (int i = 0; i < g->nops; i++) {
    const dfl_op *op = &g->ops[i];
    fl[op->phase] += dfl_op_flops(g, op) * (op->phase == DFL_PH_OPTIMIZER ? 1 : accum);
    if (op->phase < (dfl_phase)prev_ph && op->phase != DFL_PH_OPTIMIZER) monotone = 0;
    if (op->phase != DFL_PH_OPTIMIZER) prev_ph = op->phase;
  }
  for (int p = 0; p < DFL_PH_COUNT; p++) fl_step += fl[p];
  /* drafter positions per step, and what the peer counts that dflc does not compute: the frozen
  ** head's dW GEMM, and the loss head's anchor rows (both vocabulary GEMMs; dfl_op_flops leaves
  ** them out when LINEAR_CE skips them) */
  double positions = (double)tr->tg.N * tr->spec.block_size * tr->tg.batch * accum;
  double fl_peer_extra = 2.0 * positions * tr->spec.target.hidden * tr->spec.target.vocab;
  for (int i = 0; i < g->nops; i++) {
    const dfl_op *op = &g->ops[i];
    if (op->code != DFL_OP_LINEAR_CE || op->a.B <= 1) continue;
    const dfl_tensor *Y = &g->t[op->in[0]], *W = &g->t[op->in[1]];
    fl_peer_extra += 4.0 * (double)(Y->shape[0] / op->a.B) * (double)W->shape[0] * (double)Y->shape[1] * accum;
  }
  /* an FP8 target (quantize = fp8) changes the numbers: every report says so */
  const int fp8 = tr->spec.target_fp8 && !drafter_only;
  printf("bench: %s%s on %s (%s%s), batch %d x %d tokens, %d anchors x %d, accum %d; setup %.1f s\n", spec_file,
         drafter_only ? " (drafter alone: random features, no target)" : "", tr->be.name,
         tr->spec.precision == DFL_PREC_BF16 ? "bf16" : "fp32", fp8 ? ", target GEMMs in FP8" : "", tr->tg.batch,
         tr->tg.S, tr->tg.N, tr->spec.block_size, accum, t_open);
  if (tr->overlap) printf("schedule: each step's optimizer beside the next step's target forward (DFL_NO_OVERLAP=1: off)\n");
  printf("setup: data, graph and plan %.1f s; backend (device memory, kernels) %.1f s; weights %.1f s; rest %.1f s\n",
         tr->setup_s[0], tr->setup_s[1], tr->setup_s[2], tr->setup_s[3]);
  const double *ls = tr->be.load_s;
  if (ls[0] + ls[1] + ls[2] + ls[3] + ls[4] > 0)
    printf("weights: host shadow %.1f s, target %.1f s, drafter %.1f s, fp32 masters %.1f s, push %.1f s\n", ls[0], ls[1],
           ls[2], ls[3], ls[4]);
  fflush(stdout);

  /* the board's energy over the timed steps (GPU only): at its power cap, time is energy / cap.
  ** NVML opens before the warm-up: its start (up to a second) must not idle the GPU before t0. */
  dfl_power pw;
  dfl_power_sample e0, e1, em;
  int pw_ok = 0;
  char bus[32] = "";
  memset(&pw, 0, sizeof pw);
  if (tr->be.kind == DFL_BE_CUDA) {
    if (dfl_be_pci_bus_id(&tr->be, bus, (int)sizeof bus) != DFL_OK)
      snprintf(pw.err, sizeof pw.err, "the backend's GPU has no PCI bus id");
    else
      pw_ok = dfl_power_open(&pw, bus) == DFL_OK;
  }
  double tw = now_s(), tokens = 0, loss0 = 0, loss1 = 0;
  int64_t done = 0;
  /* warmup runs the same pipelined schedule, so that every graph it uses is captured before t0 */
  if (warmup > 0) rc = run_steps(tr, warmup, &tokens, &loss0, &loss1, &done, NULL);
  tw = now_s() - tw;
  if (pw_ok) pw_ok = dfl_power_read(&pw, &e0) == DFL_OK;
  double t0 = now_s();
  tokens = 0;
  done = 0;
  double *at = calloc((size_t)steps, sizeof *at);
  if (!at) rc = DFL_ENOMEM;
  if (rc == DFL_OK) rc = run_steps(tr, steps, &tokens, &loss0, &loss1, &done, at);
  /* the clock and its limits while the last steps still run */
  if (pw_ok) pw_ok = dfl_power_read(&pw, &em) == DFL_OK;
  if (rc == DFL_OK) rc = dfl_be_sync(&tr->be);
  double dt = now_s() - t0;
  if (pw_ok) pw_ok = dfl_power_read(&pw, &e1) == DFL_OK;
  double joules = pw_ok && done > 0 ? (double)(e1.energy_mj - e0.energy_mj) * 1e-3 : -1;
  dfl_power_close(&pw);
  double ms_ph[DFL_PH_COUNT] = {0};
  if (rc == DFL_OK) rc = phase_times(tr, (int)reps, ms_ph);
  if (rc == DFL_OK && ops) rc = op_profile(tr, (int)reps, gemms);
  if (rc) {
    fprintf(stderr, "dflc bench: failed\n");
    free(at);
    dfl_train_close(tr);
    free(tr);
    free(s);
    return 1;
  }
  double step_ms = 1e3 * dt / (double)done, tps = tokens / dt;
  /* the spread: intervals between successive results while a next step was queued (the last step
  ** has none behind it: on the CPU backend, whose steps run as they are enqueued, its interval is
  ** only the last optimizer update) */
  int64_t niv = done - 2;
  double med = -1, lo = -1, hi = -1; /* -1 in the JSON: too few steps for a spread */
  if (niv >= 1) {
    for (int64_t i = 0; i < niv; i++) at[i] = 1e3 * (at[i + 1] - at[i]);
    qsort(at, (size_t)niv, sizeof *at, dbl_cmp);
    med = niv % 2 ? at[niv / 2] : 0.5 * (at[niv / 2 - 1] + at[niv / 2]);
    lo = at[0];
    hi = at[niv - 1];
  }
  free(at);
  double tflops = fl_step / (step_ms * 1e-3) / 1e12;
  printf("warmup: %" PRId64 " steps in %.2f s (the first captures the CUDA graphs)\n", warmup, tw);
  printf("steps: %" PRId64 " in %.3f s: %.1f ms/step, %.0f sequence tokens/s; loss %.4f -> %.4f\n", done, dt,
         step_ms, tps, loss0, loss1);
  if (niv >= 1)
    printf("step time over %" PRId64 " intervals between results: median %.1f ms, min %.1f, max %.1f\n", niv, med,
           lo, hi);
  printf("FLOPs/step: %.2f TFLOP (", fl_step / 1e12);
  for (int p = 0; p < DFL_PH_COUNT; p++) printf("%s%s %.2f", p ? ", " : "", ph_name[p], fl[p] / 1e12);
  printf("); achieved %.1f TFLOP/s, MFU %.1f%% of %.0f\n", tflops, 100 * tflops / PEAK_TFLOPS, PEAK_TFLOPS);
  double tflops_peer = (fl_step + fl_peer_extra) / (step_ms * 1e-3) / 1e12;
  if (drafter_only) {
    printf("drafter positions/s: %.0f (%.0f positions/step, %.1f ms/step)\n", positions / (step_ms * 1e-3),
           positions, step_ms);
    printf("by the peer's count (+ frozen head dW and anchor rows, %.2f TFLOP): %.2f TFLOP/step, %.1f TFLOP/s, MFU "
           "%.1f%% of %.0f\n",
           fl_peer_extra / 1e12, (fl_step + fl_peer_extra) / 1e12, tflops_peer, 100 * tflops_peer / PEAK_TFLOPS,
           PEAK_TFLOPS);
  }
  double sum_ph = 0;
  for (int p = 0; p < DFL_PH_COUNT; p++) sum_ph += ms_ph[p];
  printf("phases (separate timing run, one graph per phase, %" PRId64 " steps%s):\n", reps,
         monotone ? "" : "; NOTE: phases interleave in the schedule, the split is approximate");
  for (int p = drafter_only ? 1 : 0; p < DFL_PH_COUNT; p++)
    printf("  %-16s %8.2f ms  %6.1f TFLOP/s\n", ph_name[p], ms_ph[p], ms_ph[p] > 0 ? fl[p] / (ms_ph[p] * 1e-3) / 1e12 : 0);
  printf("  %-16s %8.2f ms\n", "sum", sum_ph);
  if (tr->overlap) /* the previous step's optimizer with the target forward, then the rest of the step */
    printf("graph launches per step: %d (optimizer + target forward, drafter%s), plus %d async copies and 3 memsets; "
           "the phases above run alone, so their sum exceeds the step by what the overlap hides\n",
           accum + 1, accum > 1 ? ", then the other micro-steps" : "", 4 * accum + 4);
  else
    printf("graph launches per step: %d (%d step graph%s + 1 optimizer graph), plus %d async copies and 3 memsets\n",
           accum + 1, accum, accum > 1 ? "s" : "", 4 * accum + 4);
  double gib = 1073741824.0;
  int64_t used_delta = tr->mem_max > 0 && tr->be.mem_before >= 0 ? tr->mem_max - tr->be.mem_before : -1;
  printf("memory: plan %.2f GiB (tensors), backend arena %.2f GiB (+ cuBLASLt workspace and op scratch)",
         tr->planned ? tr->plan.arena_bytes / gib : 0.0, tr->be.arena_bytes / gib);
  if (tr->mem_max > 0)
    printf("; device in use %.2f..%.2f GiB over steps 2..%" PRId64 " (%.2f GiB above the context, %+.2f%% vs the "
           "arena)", tr->mem_min / gib, tr->mem_max / gib, tr->step, used_delta / gib,
           100.0 * ((double)used_delta - (double)tr->be.arena_bytes) / (double)tr->be.arena_bytes);
  printf("\n");
  if (joules >= 0) {
    char why[160];
    dfl_power_reasons(em.reasons, why, sizeof why);
    printf("energy: %.1f J/step, %.0f W average over the %" PRId64 " timed steps (power limit %.0f W); near their end "
           "the SM clock was %u MHz, held back by: %s\n", joules / (double)done, joules / dt, done, em.limit_mw * 1e-3,
           em.sm_mhz, why);
  } else if (tr->be.kind == DFL_BE_CUDA) {
    printf("energy: not measured: %s\n", pw.err[0] ? pw.err : "no NVML reading");
  }
  int status = 0;
  if (json) { /* jansson: the spec's path may hold any character a JSON string must escape */
    json_t *ph = json_object();
    for (int p = 0; p < DFL_PH_COUNT; p++) json_object_set_new(ph, ph_name[p], json_real(ms_ph[p]));
    json_t *o = json_pack(
        "{s:s, s:s, s:I, s:f, s:f, s:f, s:f, s:f, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:o, s:I, s:I, s:I, s:I, s:I, s:i, "
        "s:i, s:f, s:f, s:f}",
        "spec", spec_file, "backend", tr->be.name, "steps", (json_int_t)done, "step_ms", step_ms, "seq_tokens_per_s", tps,
        "tflop_per_step", fl_step / 1e12, "tflops", tflops, "mfu", tflops / PEAK_TFLOPS, "drafter_only", drafter_only,
        "positions_per_s", positions / (step_ms * 1e-3), "tflop_per_step_peer_count", (fl_step + fl_peer_extra) / 1e12,
        "mfu_peer_count", tflops_peer / PEAK_TFLOPS, "step_ms_median", med, "step_ms_min", lo, "step_ms_max", hi,
        "phase_ms", ph, "plan_bytes", (json_int_t)(tr->planned ? tr->plan.arena_bytes : 0), "arena_bytes",
        (json_int_t)tr->be.arena_bytes, "mem_min", (json_int_t)tr->mem_min, "mem_max", (json_int_t)tr->mem_max,
        "mem_before", (json_int_t)tr->be.mem_before, "graph_launches_per_step", accum + 1, "target_fp8", fp8,
        "joules_per_step", joules >= 0 ? joules / (double)done : -1.0, "watts_avg", joules >= 0 ? joules / dt : -1.0,
        "power_limit_watts", joules >= 0 ? em.limit_mw * 1e-3 : -1.0);
    if (!o) {
      fprintf(stderr, "dflc bench: %s: the spec's path is not UTF-8, which JSON cannot hold: %s not written\n", spec_file,
              json);
      status = 1;
    } else if (json_dump_file(o, json, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10))) {
      fprintf(stderr, "dflc bench: cannot write %s: %s\n", json, strerror(errno));
      status = 1;
    }
    json_decref(o);
  }
  dfl_train_close(tr);
  free(tr);
  free(s);
  return status;
}
