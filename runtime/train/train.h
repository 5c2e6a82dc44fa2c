/*
** train.h: the training loop of one CPU device (colocated target + drafter), its evaluation,
** and the glue to checkpoints and export.
**
** The trainer owns everything a run needs, allocated once in dfl_train_open: the training graph
** and its memory plan, the backend (CPU reference or CUDA, runtime/backend.h), the datasets, the
** host staging buffers. A step never allocates; on the GPU it never waits except for the metrics
** of the previous step (dfl_train_enqueue / dfl_train_collect). The run is a pure function of (spec, data, seed): the data order comes from
** (seed, epoch), anchors from one RNG seeded from the spec seed whose state is checkpointed, so
** resuming from a checkpoint continues bit-exactly.
*/
#ifndef DFL_TRAIN_H
#define DFL_TRAIN_H

#include <stdint.h>
#include <stdio.h>
#include "compiler/spec.h"
#include "models/models.h"
#include "compiler/plan.h"
#include "runtime/cpu/cpu.h"
#include "runtime/backend.h"
#include "runtime/io/data.h"

enum { DFL_TRAIN_BE_AUTO = 0, DFL_TRAIN_BE_CPU = 1, DFL_TRAIN_BE_CUDA = 2 };

typedef struct dfl_train_opts {
  int64_t steps;          /* total optimizer steps (the schedule's length); <= 0: the spec's */
  int64_t stop_at;        /* stop after this step (with a checkpoint), schedule unchanged; 0 = none */
  const char *out_dir;    /* run directory: metrics.jsonl, ckpt/, drafter/; NULL: runs/<spec name> */
  const char *resume;     /* checkpoint directory (or a ckpt/ root: its latest), NULL = fresh */
  int cpu_threads;        /* BLAS threads; 0 = leave the default */
  int quiet;              /* no progress lines */
  int no_eval;            /* skip evaluations */
  int no_export;          /* skip the final export */
  int unplanned;          /* run without the memory plan (debug) */
  int backend;            /* DFL_TRAIN_BE_AUTO (the spec's device; CPU when no GPU is usable),
                          ** DFL_TRAIN_BE_CPU (--cpu) or DFL_TRAIN_BE_CUDA (--cuda: a GPU or an error) */
  int fp32;               /* --fp32: precision and target dtype fp32 (verification) */
  int no_ckpt;            /* no checkpoints (benchmarks) */
  int drafter_only;       /* no target on the graph: features are an INPUT filled once with random
                          ** values of unit scale (`dflc bench --drafter-only`); no eval */
  FILE *log;              /* progress lines; NULL = stdout */
  struct dfl_compiled *pre; /* the check's compiled graph and plan (runtime/compile.h), taken when
                          ** made from what the spec says at open (else compiled again); NULL: none */
} dfl_train_opts;

/* Metrics of one optimizer step (sums over its `accum` micro-steps, formed into ratios). */
typedef struct dfl_step_stats {
  int64_t step;           /* 1-based optimizer step just taken */
  double loss;            /* sum w*CE / sum w */
  double acc;             /* token accuracy over supervised positions */
  double tau;             /* 1 + mean accepted prefix over valid blocks */
  double topk;            /* top-K hit rate (0 without the metric) */
  double acc_pos[64];     /* per block position j (j = 0 is never a label: reported as -1) */
  int B;
  double lr, gnorm;
  double tokens;          /* real (non-padding) sequence tokens in the step */
  double seconds;
  double sums[2 + 5 + 2 * 64]; /* raw: loss num, den, then the metrics vector (graph.h layout) */
} dfl_step_stats;

typedef struct dfl_eval_stats {
  double loss, acc, tau, topk;
  double acc_pos[64];
  int B;
  int64_t rows, blocks;
  double seconds;
  /* the greedy decoder's walk over the same rows (runtime/train/accept.h): tokens / blocks */
  double accept;
  double accept_responses;     /* the mean over responses of each one's tokens / blocks */
  int64_t accept_tokens, accept_blocks, accept_rounds, accept_n_responses;
  double accept_seconds;
} dfl_eval_stats;

/* Forward-only evaluation graph sharing the trainer's weights by copy. */
typedef struct dfl_evaluator {
  dfl_spec spec;
  dfl_train_graph eg;
  dfl_plan plan;
  int planned;
  dfl_cpu cpu;                 /* CPU backend state (unused on the GPU) */
  dfl_backend be;
  int ready;
  int *rows;
  int correct;                 /* the per-row correct flags [batch*N*B], kept as an OUTPUT for the walk */
} dfl_evaluator;

typedef struct dfl_trainer {
  dfl_spec spec;               /* the spec with command-line overrides applied */
  dfl_train_opts opts;
  char out_dir[DFL_PATH_MAX];
  dfl_train_graph tg;
  dfl_plan plan;
  int planned;
  dfl_cpu cpu;                 /* CPU backend state (unused on the GPU) */
  dfl_backend be;
  dfl_dataset train, eval;
  int random_data;             /* data format random: synthetic ids, every token supervised */
  int has_eval;
  dfl_evaluator ev;
  /* data position and randomness: all of it is in the checkpoint */
  int *order;                  /* permutation of the current epoch */
  int64_t epoch, cursor;       /* next row = order[cursor] of epoch `epoch` */
  dfl_rng rng;                 /* anchors */
  int64_t step;                /* optimizer steps taken */
  double tokens_seen;
  /* host staging, allocated once */
  int *rows;
  float *metrics;              /* DFL_METRIC_COUNT + 2*B */
  float opt[DFL_OPT_COUNT];
  FILE *mjsonl;                /* out_dir/metrics.jsonl */
  /* steps enqueued whose metrics are not read yet (at most 2: read slot = step % 2) */
  struct { int64_t step; double tokens, t0; } pend[2];
  int n_pend;
  double t_last;               /* when the previous step's metrics were collected */
  int overlap;                 /* the optimizer of step n runs with step n+1's target forward
                               ** (dfl_sched_overlap_ok; compile { overlap = false }: never) */
  int opt_pending;             /* the last enqueued step's optimizer has not been enqueued yet */
  double setup_s[4];           /* dfl_train_open's stages (s): data + graph + plan, backend (device
                               ** memory, kernels), weights (load or random init, masters, push), rest */
  int64_t mem_min, mem_max;    /* device bytes in use sampled at every step after the first */
  int64_t mem_first;           /* ... after this process's first step, first_step (1, or a resumed step + 1) */
  int64_t first_step;
  char last_ckpt[DFL_PATH_MAX];
  int64_t best_step;           /* the checkpoint with the best eval accept so far (ROOT/best), -1: none */
  double best_accept;
} dfl_trainer;

/* Build everything for SPEC: graph, plan, backend, weights, data; fresh drafter or resumed from
** opts->resume. Errors are reported on stderr; returns DFL_OK or a DFL_E* code. */
int dfl_train_open(dfl_trainer *tr, const dfl_spec *spec, const dfl_train_opts *opts);
void dfl_train_close(dfl_trainer *tr);

/* One optimizer step: `accum` micro-steps (next rows, pack, anchors, forward+backward), then the
** optimizer. Fills *st. (= dfl_train_enqueue + dfl_train_collect) */
int dfl_train_step(dfl_trainer *tr, dfl_step_stats *st);
/* Enqueue the next optimizer step (asynchronous on the GPU); at most two may be pending. */
int dfl_train_enqueue(dfl_trainer *tr);
/* Wait for the oldest pending step's metrics and fill *st. DFL_ERR when none is pending. */
int dfl_train_collect(dfl_trainer *tr, dfl_step_stats *st);
/* With tr->overlap, a step's optimizer phase is enqueued with the next step's target forward;
** this enqueues it now if it is still pending (before reading weights, evaluating, saving).
** Collecting the last enqueued step, evaluating and checkpointing call it themselves. */
int dfl_train_flush(dfl_trainer *tr);

/* Evaluate the current drafter on the eval file (whole file, anchors from a fixed seed), then the
** greedy decoder's walk over it (accept). */
int dfl_train_evaluate(dfl_trainer *tr, dfl_eval_stats *es);

/* Write a checkpoint of the current state under out_dir/ckpt (atomically); path in tr->last_ckpt. */
int dfl_train_checkpoint(dfl_trainer *tr);

/* The whole run: steps with progress lines and metrics.jsonl, evaluations, checkpoints every
** ckpt_every steps and at the end, final export to out_dir/drafter (verified by reloading).
** first/last eval stats are returned when non-NULL (first = before the first step of this run). */
int dfl_train_run(dfl_trainer *tr, dfl_eval_stats *first, dfl_eval_stats *last);

/* BLAS threads of the CPU backend. */
void dfl_train_set_threads(int n);

/* --- pieces shared with `dflc eval` / `dflc export` --- */

/* The backend a spec's drafter runs on: force (DFL_TRAIN_BE_CPU / _CUDA) if given, else its first
** drafter device's kind, the CPU (with a notice on log naming `doing`) when that is a GPU and none is
** usable here. */
dfl_backend_kind dfl_train_backend(const dfl_spec *s, int force, FILE *log, const char *doing);

/* Evaluator: the eval graph of `s`, weights copied from a training graph with dfl_eval_sync or
** loaded with dfl_weights_load_spec. On the CPU backend. */
int dfl_eval_open(dfl_evaluator *ev, const dfl_spec *s);
/* Same on backend kind (DFL_BE_CPU / DFL_BE_CUDA); weights with dfl_be_load_weights(&ev->be, ..). */
int dfl_eval_open_on(dfl_evaluator *ev, const dfl_spec *s, dfl_backend_kind kind);
void dfl_eval_close(dfl_evaluator *ev);
/* Copy FROZEN (when frozen != 0) and PARAM tensors of `g`/`c` into the evaluator by name. */
int dfl_eval_sync(dfl_evaluator *ev, const dfl_graph *g, dfl_cpu *c, int frozen);
/* Uniform anchors (loss, acc, tau), then the decoder's walk (accept). */
int dfl_eval_run(dfl_evaluator *ev, const dfl_dataset *d, dfl_eval_stats *es);
/* The walk alone (es->accept*), with at most `window` anchors per row and run (<= the graph's N;
** <= 0: N). window 1 is the one-block-per-round walk (tests compare the two). */
int dfl_eval_accept(dfl_evaluator *ev, const dfl_dataset *d, int window, dfl_eval_stats *es);

/* Print an eval line ("eval  loss .. acc .. acc@j .. tau .. accept ..") to f. */
void dfl_eval_print(FILE *f, const char *what, const dfl_eval_stats *es);
/* Its metrics.jsonl line ({"eval":true,"step":..}). */
void dfl_eval_jsonl(FILE *f, int64_t step, const dfl_eval_stats *es);

/* The drafter in drafter_dir (an export, a released DFlash drafter, or a checkpoint directory: its
** exact f32 params) with the spec's target, on backend kind, over the whole dataset d: what
** `dflc eval` prints. NULL: a fresh drafter. */
int dfl_eval_drafter(const dfl_spec *s, dfl_backend_kind kind, const char *drafter_dir, const dfl_dataset *d,
                     dfl_eval_stats *es);

/* "elapsed H:MM:SS  eta H:MM:SS" for a progress line: done steps took elapsed seconds, left remain. */
void dfl_train_eta(char *buf, size_t n, double elapsed, int64_t done, int64_t left);
/* The last lines of a run: where the drafter is and the command to run next (dflc eval), or, when
** it stopped before the end, the checkpoint and how to resume or export it. */
void dfl_train_next_steps(FILE *log, const char *spec, const char *out_dir, int exported, const char *ckpt);

#endif
