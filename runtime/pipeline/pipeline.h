/*
** pipeline.h: the multi-device training runner.
**
** Topologies (from the spec's topology section):
**   split:      M target-only devices feed N drafter-only devices through the hidden-state queue
**               (runtime/queue.h); the drafters are data-parallel replicas.
**   replicated: N devices each run target + drafter (colocate = true); no queue, data parallel.
**   mixed:      colocated replicas together with drafter-only replicas fed by target-only devices
**               (runtime/topo.h: slice k -> replica k mod N; the drafter-only replicas' slices form
**               the queue, item h from target h mod M).
**   one device running both is the single-device trainer (runtime/train.h): dflc train routes
**   there, and dfl_pipe_run accepts it too (as replicated with N = 1).
** Host side: one thread per device, one loader thread (rows, packing, anchors) ahead of the
** targets by `prefetch` batches. Micro-batch k of the global order (a slice of batch/N sequences)
** goes to drafter k mod N and is produced by target k mod M; the loader draws rows and anchors
** in exactly the order the single-device trainer does, so the run is reproducible and, up to the
** summation order of the gradients, equal to one device processing the same global batches.
** After `accum` micro-batches each replica all-reduces (sums) its gradient accumulators, the loss
** numerator/denominator and the metrics, so the loss is normalised by the global sum of weights
** (reference §2.5), and runs the same optimizer on the same numbers: replicas stay bit-identical.
**
** The CPU backend runs every device as a thread of this process ("logical devices"). GPU devices
** each get their own CUDA backend (arena, stream, graphs) on the process's GPU, the hidden-state
** queue's features move device to device ordered by CUDA events; several GPU replicas of one
** process all-reduce through NCCL (ncclCommInitAll); with a launcher environment (torchrun-style)
** there is one process per GPU replica, or, for split/mixed topologies, one per device, the
** features going target -> replica by ncclSend/ncclRecv: docs/pipeline.md.
*/
#ifndef DFL_PIPELINE_H
#define DFL_PIPELINE_H

#include <stdint.h>
#include <stdio.h>

#include "compiler/spec.h"
#include "runtime/pipeline/monitor.h"
#include "runtime/train/train.h"

typedef struct dfl_pipe_opts {
  int64_t steps;            /* <= 0: the spec's, or the resumed run's (warmup keeps its share, as in dflc train) */
  int64_t stop_at;          /* stop after this step (with a checkpoint), the schedule unchanged; 0 = none */
  const char *resume;       /* checkpoint directory (or a ckpt/ root: its newest) to continue from, NULL = fresh:
                            ** every replica takes its state, the loader its data position and anchor RNG,
                            ** so the run continues bit-exactly as the uninterrupted one on this topology */
  const char *out_dir;      /* run directory (metrics.jsonl, ckpt/, drafter/); NULL: runs/<spec name> */
  FILE *log;                /* progress and diagnostics lines; NULL: stdout */
  int quiet;                /* no progress lines (metrics.jsonl is still written) */
  int no_ckpt, no_export;   /* skip the checkpoints / the final export */
  int no_eval;              /* skip the evaluation of the exported drafter at the end (the spec's eval file) */
  int no_check;             /* skip queue slot checksums and poisoning */
  int emulate_gpus;         /* run gpu devices of the spec as CPU threads (dry runs) */
  int cpu_threads;          /* BLAS threads per device thread; 0: 1 */
  const char *fault;        /* fault injection, NULL: $DFL_FAULT. "target=MS,drafter=MS,loader=MS"
                            ** sleeps MS milliseconds per micro-batch in every device of that role;
                            ** "target1=MS" only in target device 1 (index within the role);
                            ** "drafter1=fail@K" makes drafter replica 1 return an error at its K-th
                            ** micro-batch (0-based): the run must stop every device and say which. */
  int diag_every;           /* diagnostics every this many steps; 0: the spec's log_every */
  /* called on the first replica's thread after each optimizer step (tests) */
  void (*on_step)(void *ctx, const dfl_step_stats *st);
  /* called after each diagnostics report with its verdict */
  void (*on_diag)(void *ctx, int64_t step, dfl_bound bound, const char *verdict);
  void *ctx;
} dfl_pipe_opts;

typedef struct dfl_pipe_result {
  int64_t steps;            /* the last step taken (resumed runs: counted from the run's start) */
  double seconds;
  int n_target, n_drafter;
  int replicas_identical;   /* every replica's params, masters and moments bit-equal at the end */
  int bound_count[4];       /* verdicts by dfl_bound over the run's reports */
  char last_verdict[256];
  char ckpt[DFL_PATH_MAX];  /* last checkpoint written, "" if none */
  int queue_in_arena;       /* GPU split: the queue's device slots are the targets' plan workspaces */
} dfl_pipe_result;

/* Devices with a role: 1 for the single-device trainer's case. */
int dfl_pipe_wants(const dfl_spec *s);   /* 1 when dflc train should use this runner */

/* Run the whole training of spec s. Errors are reported on stderr; returns DFL_OK or DFL_E*. */
int dfl_pipe_run(const dfl_spec *s, const dfl_pipe_opts *o, dfl_pipe_result *res);

#endif
