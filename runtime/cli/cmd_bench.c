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
**    H200 runs these steps at its 700 W cap, where time = energy / cap (docs/journal/2026-11-performance.md).
** 5. --ops / --gemms / --floor (runtime/bench_ops.c): every op timed alone; and the step's compute
**    floor, its GEMMs and loss head (then with its attention) alone, back to back, at the board's power.
**
** --drafter-only (issue 6): the drafter step alone (dfl_train_opts.drafter_only: no target on the
** graph, random unit-scale features written once, random frozen embedding/head), reporting drafter
** positions/s = anchors x block x batch x accum / step time, and the FLOPs also by the peer's count
** (SpecForge's, which adds the frozen head's weight gradient, one more T x H x V GEMM that dflc
** never computes, the anchor rows of the loss head and the drafter rows dflc skips) so that the two
** MFUs compare.
*/
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "runtime/cli/cli.h"
#include "runtime/cli/bench_ops.h"
#include "runtime/cli/power.h"
#include "runtime/train/train.h"
#ifdef DFL_HAVE_CUDA
#include <cuda_runtime.h>
#include "runtime/cuda/cuda.h"
#endif

#define PEAK_TFLOPS 989.0

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
        double t0 = dfl_bench_clock();
        if ((rc = dfl_be_run(be, 1u << p))) return rc;
        ms[p] += 1e3 * (dfl_bench_clock() - t0) / reps;
      }
    double t0 = dfl_bench_clock();
    if ((rc = dfl_be_run(be, 1u << DFL_PH_OPTIMIZER))) return rc;
    ms[DFL_PH_OPTIMIZER] += 1e3 * (dfl_bench_clock() - t0) / reps;
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
    if (at) at[i - 1] = dfl_bench_clock();
    *tokens += st.tokens;
    if (i == 1) *loss0 = st.loss;
    *loss1 = st.loss;
    ++*done;
  }
  return rc;
}

static int dbl_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* One --floor line: what the pass ran, its time and energy, and the throughput of a step of only that work. */
static void floor_print(const char *what, const dfl_bench_floor *f, double tokens_per_step, const char *unit) {
  printf("%s (%d ops a micro-step; %d passes timed after %.1f s of them): %.2f ms/step", what, f->nops, f->passes,
         f->warm_s, f->ms);
  if (f->joules >= 0) printf(", %.1f J/step at %.0f W", f->joules, f->watts);
  printf(", %.2f TFLOP at %.1f TFLOP/s", f->tflop, f->ms > 0 ? f->tflop / (f->ms * 1e-3) : 0);
  if (f->joules >= 0) {
    char why[160];
    dfl_power_reasons(f->reasons, why, sizeof why);
    printf("; SM clock %u MHz, held back by: %s", f->sm_mhz, why);
  }
  printf("; a step of only this work: %.0f %s/s\n", f->ms > 0 ? tokens_per_step / (f->ms * 1e-3) : 0, unit);
  if (f->nonfinite)
    printf("  NOTE: %" PRId64 " of %" PRId64 " output values read back after the passes are not finite: a GPU draws "
           "another power on them, so this line is not the step's floor\n", f->nonfinite, f->sampled);
}

/* FLOPs of one micro-step (optimizer left out) that the plain drafter graph (compile { block_rows =
** false }) computes and this one does not: both graphs built unfused from the spec, their dfl_op_flops
** summed. 0 when the spec already asks for the plain graph. */
static double skipped_rows_flops(const dfl_spec *s, int colocated) {
  double f[2] = {0, 0};
  dfl_spec *plain = malloc(sizeof *plain);
  if (!plain) return 0;
  *plain = *s;
  plain->opt.no_block_rows = 1;
  for (int k = 0; k < 2; k++) {
    dfl_train_graph *tg = calloc(1, sizeof *tg);
    if (tg && dfl_model_train_graph(tg, k ? plain : s, colocated) == DFL_OK)
      for (int i = 0; i < tg->g.nops; i++)
        if (tg->g.ops[i].phase != DFL_PH_OPTIMIZER) f[k] += dfl_op_flops(&tg->g, &tg->g.ops[i]);
    if (tg) dfl_graph_free(&tg->g);
    free(tg);
  }
  free(plain);
  return f[1] > f[0] ? f[1] - f[0] : 0;
}

int dfl_cmd_bench(int argc, char **argv) {
  const char *spec_file = NULL, *json = NULL;
  int64_t steps = 20, warmup = 3, reps = 3;
  int fp32 = 0, cpu = 0, drafter_only = 0, target_only = 0, ops = 0, gemms = 0, floor_ = 0, as_cc = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      printf("usage: dflc bench SPEC.dfl [--steps N] [--warmup W] [--phase-steps R] [--json FILE] [--fp32] [--cpu]\n"
             "                 [--drafter-only | --target-only] [--ops] [--gemms] [--floor]\n"
             "  Training throughput on the spec's device: sequence tokens/s, step time split by phase,\n"
             "  TFLOP/s and MFU (peak %.0f TFLOP/s), device memory planned and measured, and on a GPU the\n"
             "  board's energy per step and average power (NVML; at the power cap, time = energy / cap).\n"
             "  --drafter-only  the drafter step alone (no target; random features written once): drafter\n"
             "                  positions/s, MFU by dflc's FLOP count and by the peer's\n"
             "  --target-only   the frozen target forward alone, as a pipeline's target device runs it:\n"
             "                  sequence tokens/s, TFLOP/s, the GEMMs' share of the FLOPs (--ops: of the time)\n"
             "  --ops           also time every op alone (CUDA events) and print the time per phase and\n"
             "                  op kind, with TFLOP/s and the GB/s of its tensors\n"
             "  --gemms         --ops and also each GEMM shape's time and TFLOP/s\n"
             "  --floor         last, the step's GEMMs and loss head alone, back to back for seconds, then\n"
             "                  those and its attention: their time and (GPU) energy per step at the board's\n"
             "                  power, the floor of a step that did nothing else\n"
             "  --as-cc CC      pick kernels as a GPU of compute capability CC would (80, 86, 89, 90, 100,\n"
             "                  120: docs/gpus.md), on this GPU: which kernels another architecture runs\n"
             "                  and that they agree, not its speed\n", PEAK_TFLOPS);
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
    } else if (!strcmp(a, "--target-only")) {
      target_only = 1;
    } else if (!strcmp(a, "--ops")) {
      ops = 1;
    } else if (!strcmp(a, "--gemms")) {
      ops = gemms = 1;
    } else if (!strcmp(a, "--floor")) {
      floor_ = 1;
    } else if (!strcmp(a, "--as-cc")) {
      char *end;
      long v = next ? strtol(next, &end, 10) : -1;
      if (!next || *end || v < 80 || v > 200) {
        fprintf(stderr, "dflc bench: --as-cc needs a compute capability as major*10+minor (80, 86, 89, 90, 100, 120)\n");
        return 2;
      }
      as_cc = (int)v;
      i++;
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
#ifdef DFL_HAVE_CUDA
  dfl_cuda_set_default_as_cc(as_cc);   /* every backend this command opens picks that row's kernels */
#else
  if (as_cc) {
    fprintf(stderr, "dflc bench: --as-cc: this dflc was built without CUDA\n");
    return 2;
  }
#endif
  dfl_spec *s = malloc(sizeof *s);
  dfl_trainer *tr = calloc(1, sizeof *tr);
  int rc = s && tr ? dfl_spec_load(spec_file, s) : DFL_ENOMEM;
  if (rc) {
    free(tr);
    free(s);
    return 1;
  }
  if (target_only && (drafter_only || floor_ || fp32)) {
    fprintf(stderr, "dflc bench: --target-only times the forward alone: drop --drafter-only, --floor and --fp32\n");
    free(tr);
    free(s);
    return 2;
  }
  if (target_only) {
    if ((cpu || !dfl_be_cuda_available()) && (double)s->target.hidden * s->target.intermediate * s->target.layers > 4e9) {
      fprintf(stderr, "dflc bench: %s: a %d-layer target of hidden %d is too large for the CPU reference backend; run it on "
              "a GPU\n", spec_file, s->target.layers, s->target.hidden);
      rc = 1;
    } else {
      rc = dfl_bench_target(s, spec_file, steps, warmup, (int)reps, ops, gemms, cpu, json);
    }
    free(tr);
    free(s);
    return rc;
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
  double t_open = dfl_bench_clock();
  if ((rc = dfl_train_open(tr, s, &o))) {
    free(tr);
    free(s);
    return 1;
  }
  t_open = dfl_bench_clock() - t_open;
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
  ** head's dW GEMM, the loss head's anchor rows (both vocabulary GEMMs) and the drafter rows dflc
  ** skips (models/drafter.c: the first layer's repeated MASK rows, the last layer's anchor rows) */
  double positions = (double)tr->tg.N * tr->spec.block_size * tr->tg.batch * accum;
  double fl_peer_extra = 2.0 * positions * tr->spec.target.hidden * tr->spec.target.vocab;
  fl_peer_extra += 4.0 * (double)tr->tg.N * tr->tg.batch * accum * tr->spec.target.hidden * tr->spec.target.vocab;
  double fl_skipped = skipped_rows_flops(&tr->spec, !drafter_only) * accum;
  fl_peer_extra += fl_skipped;
  /* an FP8 target (quantize = fp8) changes the numbers: every report says so */
  const int fp8 = tr->spec.target_fp8 && !drafter_only, fp8f = fp8 && tr->spec.target_fp8_fast;
  printf("bench: %s%s on %s (%s%s), batch %d x %d tokens, %d anchors x %d, accum %d; setup %.1f s\n", spec_file,
         drafter_only ? " (drafter alone: random features, no target)" : "", tr->be.name,
         tr->spec.precision == DFL_PREC_BF16 ? "bf16" : "fp32",
         fp8f ? ", target GEMMs in FP8 (fast accumulation)" : fp8 ? ", target GEMMs in FP8" : "", tr->tg.batch,
         tr->tg.S, tr->tg.N, tr->spec.block_size, accum, t_open);
  /* a multi-device spec: say what is timed instead of letting one device's step pass for the pipeline's */
  int ndev = 0;
  for (int i = 0; i < tr->spec.n_devices; i++) ndev += tr->spec.devices[i].runs_target || tr->spec.devices[i].runs_drafter;
  if (ndev > 1)
    printf("note: the topology has %d devices; this times ONE device running %s on the global batch. The "
           "pipeline's throughput: dflc train (progress and diag lines, docs/pipeline.md)\n", ndev,
           drafter_only ? "the drafter step" : "target + drafter");
  if (tr->overlap) printf("schedule: each step's optimizer beside the next step's target forward (compile { overlap = false }: off)\n");
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
  double tw = dfl_bench_clock(), tokens = 0, loss0 = 0, loss1 = 0;
  int64_t done = 0;
  /* warmup runs the same pipelined schedule, so that every graph it uses is captured before t0 */
  if (warmup > 0) rc = run_steps(tr, warmup, &tokens, &loss0, &loss1, &done, NULL);
  tw = dfl_bench_clock() - tw;
  if (pw_ok) pw_ok = dfl_power_read(&pw, &e0) == DFL_OK;
  double t0 = dfl_bench_clock();
  tokens = 0;
  done = 0;
  double *at = calloc((size_t)steps, sizeof *at);
  if (!at) rc = DFL_ENOMEM;
  if (rc == DFL_OK) rc = run_steps(tr, steps, &tokens, &loss0, &loss1, &done, at);
  /* the clock and its limits while the last steps still run */
  if (pw_ok) pw_ok = dfl_power_read(&pw, &em) == DFL_OK;
  if (rc == DFL_OK) rc = dfl_be_sync(&tr->be);
  double dt = dfl_bench_clock() - t0;
  if (pw_ok) pw_ok = dfl_power_read(&pw, &e1) == DFL_OK;
  double joules = pw_ok && done > 0 ? (double)(e1.energy_mj - e0.energy_mj) * 1e-3 : -1;
  double ms_ph[DFL_PH_COUNT] = {0};
  if (rc == DFL_OK) rc = phase_times(tr, (int)reps, ms_ph);
  if (rc == DFL_OK && ops) rc = dfl_bench_op_profile(tr, (int)reps, gemms);
  if (rc) {
    dfl_power_close(&pw);
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
  for (int p = 0; p < DFL_PH_COUNT; p++) printf("%s%s %.2f", p ? ", " : "", dfl_bench_phase_name[p], fl[p] / 1e12);
  printf("); achieved %.1f TFLOP/s, MFU %.1f%% of %.0f\n", tflops, 100 * tflops / PEAK_TFLOPS, PEAK_TFLOPS);
  double tflops_peer = (fl_step + fl_peer_extra) / (step_ms * 1e-3) / 1e12;
  if (drafter_only) {
    printf("drafter positions/s: %.0f (%.0f positions/step, %.1f ms/step)\n", positions / (step_ms * 1e-3),
           positions, step_ms);
    printf("by the peer's count (+ frozen head dW, anchor rows and the drafter rows dflc skips, %.2f TFLOP, %.2f of "
           "them skipped rows): %.2f TFLOP/step, %.1f TFLOP/s, MFU %.1f%% of %.0f\n",
           fl_peer_extra / 1e12, fl_skipped / 1e12, (fl_step + fl_peer_extra) / 1e12, tflops_peer,
           100 * tflops_peer / PEAK_TFLOPS, PEAK_TFLOPS);
  }
  double sum_ph = 0;
  for (int p = 0; p < DFL_PH_COUNT; p++) sum_ph += ms_ph[p];
  printf("phases (separate timing run, one graph per phase, %" PRId64 " steps%s):\n", reps,
         monotone ? "" : "; NOTE: phases interleave in the schedule, the split is approximate");
  for (int p = drafter_only ? 1 : 0; p < DFL_PH_COUNT; p++)
    printf("  %-16s %8.2f ms  %6.1f TFLOP/s\n", dfl_bench_phase_name[p], ms_ph[p], ms_ph[p] > 0 ? fl[p] / (ms_ph[p] * 1e-3) / 1e12 : 0);
  printf("  %-16s %8.2f ms\n", "sum", sum_ph);
#ifdef DFL_HAVE_CUDA
  dfl_cuda *cu = dfl_be_cuda_state(&tr->be);
  if (cu) { /* the per-phase graphs the timing run captured: every launch of a step is in one of them */
    int total = 0, other = 0, o;
    printf("kernel launches (the phase graphs' kernel nodes):");
    for (int p = drafter_only ? 1 : 0; p < DFL_PH_COUNT; p++) {
      int k = dfl_cuda_graph_nodes(cu, 1u << p, &o);
      if (k < 0) continue;
      int times = p == DFL_PH_OPTIMIZER ? 1 : accum;
      printf(" %s %d,", dfl_bench_phase_name[p], k);
      total += k * times, other += o * times;
    }
    printf(" per step %d (and %d copy or memset nodes)\n", total, other);
  }
#endif
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
  /* Last, after everything above is printed: its passes leave the tensors as no step would, and it
  ** needs device memory beside the plan (bench_ops.c), which a full device may not have: a floor that
  ** cannot run loses nothing of the rest, and the command exits 1. */
  dfl_bench_floor fl_g = {.ms = -1, .joules = -1}, fl_a = {.ms = -1, .joules = -1};
  int floor_rc = DFL_OK;
  if (floor_) {
    fflush(stdout);
    double per_step = drafter_only ? positions : (done > 0 ? tokens / (double)done : 0);
    const char *unit = drafter_only ? "drafter positions" : "sequence tokens";
    if ((floor_rc = dfl_bench_floor_run(tr, 0, pw.lib ? &pw : NULL, &fl_g)) == DFL_OK)
      floor_print("floor: GEMMs and loss head alone", &fl_g, per_step, unit);
    if (floor_rc == DFL_OK && (floor_rc = dfl_bench_floor_run(tr, 1, pw.lib ? &pw : NULL, &fl_a)) == DFL_OK)
      floor_print("floor: GEMMs, loss head and attention alone", &fl_a, per_step, unit);
    if (floor_rc != DFL_OK) printf("floor: not measured (the messages above say why)\n");
  }
  dfl_power_close(&pw);
  int status = floor_rc == DFL_OK ? 0 : 1;
  if (json) { /* jansson: the spec's path may hold any character a JSON string must escape */
    json_t *ph = json_object();
    for (int p = 0; p < DFL_PH_COUNT; p++) json_object_set_new(ph, dfl_bench_phase_name[p], json_real(ms_ph[p]));
    json_t *o = json_pack(
        "{s:s, s:s, s:I, s:f, s:f, s:f, s:f, s:f, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:o, s:I, s:I, s:I, s:I, s:I, s:i, "
        "s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
        "spec", spec_file, "backend", tr->be.name, "steps", (json_int_t)done, "step_ms", step_ms, "seq_tokens_per_s", tps,
        "tflop_per_step", fl_step / 1e12, "tflops", tflops, "mfu", tflops / PEAK_TFLOPS, "drafter_only", drafter_only,
        "positions_per_s", positions / (step_ms * 1e-3), "tflop_per_step_peer_count", (fl_step + fl_peer_extra) / 1e12,
        "tflop_per_step_skipped_rows", fl_skipped / 1e12,
        "mfu_peer_count", tflops_peer / PEAK_TFLOPS, "step_ms_median", med, "step_ms_min", lo, "step_ms_max", hi,
        "phase_ms", ph, "plan_bytes", (json_int_t)(tr->planned ? tr->plan.arena_bytes : 0), "arena_bytes",
        (json_int_t)tr->be.arena_bytes, "mem_min", (json_int_t)tr->mem_min, "mem_max", (json_int_t)tr->mem_max,
        "mem_before", (json_int_t)tr->be.mem_before, "graph_launches_per_step", accum + 1, "target_fp8", fp8,
        "target_fp8_fast", fp8f,
        "joules_per_step", joules >= 0 ? joules / (double)done : -1.0, "watts_avg", joules >= 0 ? joules / dt : -1.0,
        "power_limit_watts", joules >= 0 ? em.limit_mw * 1e-3 : -1.0, "floor_gemm_ms", fl_g.ms,
        "floor_gemm_joules", fl_g.nonfinite ? -1.0 : fl_g.joules, "floor_attention_ms", fl_a.ms,
        "floor_attention_joules", fl_a.nonfinite ? -1.0 : fl_a.joules);
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
