/*
** bench_ops.h: the parts of `dflc bench` that run a step's ops outside its graphs (bench_ops.c):
** every op timed alone (--ops, --gemms), and the step's compute floor (--floor).
*/
#ifndef DFL_BENCH_OPS_H
#define DFL_BENCH_OPS_H

#include <stdint.h>

#include "runtime/cli/power.h"
#include "runtime/train/train.h"

extern const char *const dfl_bench_phase_name[DFL_PH_COUNT];
double dfl_bench_clock(void); /* monotonic seconds */

/* --ops (and --gemms): every op of one step run alone, `reps` times after one warm-up, printed per
** (phase, op kind) and, with gemms, per GEMM shape. */
int dfl_bench_op_profile(dfl_trainer *tr, int reps, int gemms);
/* The same for any graph open on a backend (the target-only bench); "step" reads as one run of g. */
int dfl_bench_op_profile_be(dfl_backend *be, const dfl_graph *g, int reps, int gemms);
/* `dflc bench --target-only`: the target forward alone (bench_target.c). */
int dfl_bench_target(const dfl_spec *s, const char *spec_file, int64_t steps, int64_t warmup, int reps, int ops, int gemms,
                     int cpu, const char *json);

/* --floor: the step's GEMMs and loss head (and, with_attention, its attention kernels) alone, back to
** back, for seconds: on a power-capped GPU the time and energy a step of nothing else would take at
** the board's power. Per optimizer step (accum passes of the micro-step's ops). */
typedef struct dfl_bench_floor {
  int nops;                 /* ops in one pass (one micro-step) */
  int passes;               /* timed passes */
  double warm_s;            /* seconds of passes before the timed ones */
  double ms;                /* per step; -1: not measured (the run failed) */
  double tflop;             /* per step, dfl_op_flops */
  double joules, watts;     /* per step and average; -1: not measured (CPU, no NVML) */
  unsigned sm_mhz, limit_mw;
  unsigned long long reasons;
  int64_t sampled, nonfinite; /* output values read back after the passes, and how many were not finite */
} dfl_bench_floor;
/* pw: an open dfl_power (energy and clock), or NULL. */
int dfl_bench_floor_run(dfl_trainer *tr, int with_attention, dfl_power *pw, dfl_bench_floor *f);

#endif
