/*
** compile.h: the one compile entry point. A device of a spec becomes its graph, its workspaces and
** its memory plan through one function holding the pass list once:
**   1. graph      models/: the target forward, the drafter step, or both (the device's role)
**   2. autodiff   compiler/autodiff.c   (drafter devices)
**   3. optimizer  compiler/optim.c      (drafter devices)
**   4. fuse       compiler/fuse.c: dfl_fuse_passes with the spec's `compile` flags; on a single
**                 device, the trainer's rewrites (dfl_model_single_device: overwritten gradient
**                 accumulators, bf16 gradients, the optimizer beside the next target forward)
**   5. plan       compiler/plan.c: the backend's workspaces, the queue's slots, fitted to the
**                 device's memory budget (forward ops recomputed where that fits it)
** `dflc check` (its plan verdict and the weights' names), `dflc plan`, `dflc build`, the
** single-device `dflc train`, the pipeline runner's devices and the agreement check all call it, so
** the plan `dflc plan` prints is the one `dflc train` runs. dfl_compiled_fingerprint names the
** result: `dflc build` records it in build.json and `dflc train DIR` refuses a build whose graph or
** plan this dflc no longer produces.
*/
#ifndef DFL_COMPILE_H
#define DFL_COMPILE_H

#include <stdint.h>
#include "compiler/graph.h"
#include "compiler/plan.h"
#include "compiler/spec.h"
#include "models/models.h"

enum { DFL_COMPILE_BE_DEVICE = 0, DFL_COMPILE_BE_CPU = 1, DFL_COMPILE_BE_CUDA = 2 };
enum { DFL_COMPILE_TRAIN = 0, DFL_COMPILE_EVAL = 1, DFL_COMPILE_TARGET = 2, DFL_COMPILE_AGREE = 3 };

typedef struct dfl_compile_req {
  int64_t budget;       /* > 0: replaces the device's memory_budget (`dflc plan --budget`) */
  int no_inplace;       /* `dflc plan --no-inplace` */
  int no_plan;          /* stop after the passes: the graph alone */
  int drafter_only;     /* a drafter device's graph without its colocated target (`--drafter-only`) */
  int colocate;         /* a drafter device's graph with the target on it even when the topology puts
                        ** the target elsewhere (`dflc check`: every weight any device reads) */
  int backend;          /* the backend planned for: DFL_COMPILE_BE_DEVICE (the device's kind), _CPU (`--cpu`: host
                        ** element sizes, no CUDA workspaces) or _CUDA (`--cuda`) */
  int what;             /* a drafter device's graph: DFL_COMPILE_TRAIN (the step) or DFL_COMPILE_EVAL (the
                        ** evaluation forward: no backward, no optimizer; the target colocated); on any
                        ** device DFL_COMPILE_TARGET: the target forward alone, as a pipeline's target device
                        ** runs it, for the spec's whole batch (`dflc bench --target-only`); DFL_COMPILE_AGREE:
                        ** the target's agreement graph (dfl_model_agree_graph, `dflc eval`) */
  int no_budget;        /* plan without fitting a budget (evaluation graphs, which the trainer's budget excludes) */
  int64_t device_memory;/* bytes of the GPU a GPU device without a memory_budget runs on (0: unknown): its budget is
                        ** then that less DFL_COMPILE_GPU_RESERVE (the CUDA context, cuBLASLt, graph execs) */
  int queue_given;      /* the pipeline runner: queue_bytes is what it places of the hidden-state queue in this
                        ** device's arena (0 across processes: the send slots are its own); else the queue
                        ** as one process places it (a target-only GPU device's share of the slots) */
  int64_t queue_bytes;
  int trainer;          /* as the single-device trainer runs the spec, whatever its topology: the whole
                        ** batch, the target colocated (unless drafter_only), the single-device rewrites
                        ** (the same as without it for a one-device spec) */
} dfl_compile_req;

typedef struct dfl_compiled {
  int device;                 /* index in the spec's devices */
  char name[64];              /* "node0.gpu0" */
  const char *role;           /* "target", "drafter", "target+drafter" */
  int batch;                  /* sequences per micro-step on this device (the spec's batch over its drafters) */
  dfl_train_graph tg;         /* a drafter device's graph, inputs and outputs */
  dfl_graph tgt;              /* a target-only device's graph */
  dfl_graph *g;               /* the graph compiled: &tg.g or &tgt */
  int t_ids, t_features;      /* target-only: its INPUT ids and the features the queue copies out */
  dfl_agree_io agree;         /* DFL_COMPILE_AGREE: the agreement graph's inputs and outputs */
  unsigned span;              /* the plan's span phases (the optimizer beside the next target forward) */
  dfl_plan_ws *ws;            /* the workspaces placed in the arena: cuBLASLt's, the ops', the queue's */
  int n_ws, cap_ws;
  int live_out[4], n_live_out;
  int64_t budget;             /* bytes; 0: none */
  const char *budget_from;    /* "spec" (memory_budget), "option" (budget override), "device" (device_memory), "" */
  dfl_plan plan;
  int planned;                /* plan holds a plan (it may not fit: see fits) */
  int fits;                   /* the plan fits the budget (or there is none) */
  int plan_cpu;               /* planned for the CPU backend (host element sizes, no CUDA workspaces) */
  dfl_recompute r;            /* forward ops recomputed to fit */
  /* what of the spec the graph was built with that a trainer may change after the check */
  int64_t steps, warmup;
  int precision, target_dtype, drafter_only, trainer, what;
} dfl_compiled;

/* Compiles device k of s (its role and kind from the spec's topology). Fills *c (free with
** dfl_compiled_free, also after an error). Returns DFL_OK when the graph is built and, unless
** o->no_plan, planned and within its budget; DFL_ERR with c->planned set when the plan exceeds the
** budget; another status when the graph or plan could not be made (a message on stderr). */
int dfl_compile_device(const dfl_spec *s, int k, const dfl_compile_req *o, dfl_compiled *c);
/* Its two halves: passes 1-4 (the graph; o->no_plan is dfl_compile_device stopping here) and pass 5
** on a compiled graph (again with other options: the previous plan is dropped). */
int dfl_compile_graph(const dfl_spec *s, int k, const dfl_compile_req *o, dfl_compiled *c);
int dfl_compile_plan(const dfl_spec *s, const dfl_compile_req *o, dfl_compiled *c);
/* Was c built from what s now says (the schedule, the precision: a trainer's --steps, --fp32 and
** resume change them after the check), with or without the colocated target? */
int dfl_compiled_matches(const dfl_compiled *c, const dfl_spec *s, int drafter_only);
/* What a GPU's memory keeps beyond the plan's arena: the CUDA context, cuBLASLt's handle and the captured
** graphs' executables (measured on an H100, 2026-12-05: 37.03 GiB in use for a 36.50 GiB arena; docs/gpus.md). */
#define DFL_COMPILE_GPU_RESERVE (1536ll << 20)
/* The memory of a GPU by its product name (docs/gpus.md's list: "h100", "h200", "rtx-pro-6000", ...; case
** and '-'/'_'/' ' ignored), bytes as nvidia-smi's memory.total, or 0 for a name not in the list. */
int64_t dfl_compile_gpu_memory(const char *name);
/* The names dfl_compile_gpu_memory knows, for messages: "a100-40gb, a100-80gb, ...". */
const char *dfl_compile_gpu_names(void);
/* Bytes of one device slot of the hidden-state queue: one micro-batch's features in f32 (the most any
** features dtype takes), 256-aligned. */
int64_t dfl_compile_queue_stride(const dfl_spec *s, int batch);
/* The device that trains the drafter (the first that runs one), or -1. */
int dfl_compile_drafter_device(const dfl_spec *s);
void dfl_compiled_free(dfl_compiled *c);
/* Moves *src into *dst (the graph pointer follows; src is left empty). */
void dfl_compiled_move(dfl_compiled *dst, dfl_compiled *src);
/* Hands c's graph and plan to a trainer (c keeps nothing of them): tg and plan are moved. */
void dfl_compiled_take(dfl_compiled *c, dfl_train_graph *tg, dfl_plan *plan, int *planned);
/* The same for a target-only device's graph. */
void dfl_compiled_take_target(dfl_compiled *c, dfl_graph *g, dfl_plan *plan, int *planned);

/* 64-bit names of what was compiled, for build.json: the graph (every tensor's name, dtype, kind and
** shape; every op's code, phase, attributes and operands, in schedule order) and the plan (the
** arena, every tensor's offset, the workspaces), each independent of the machine that computed it. */
uint64_t dfl_compiled_graph_hash(const dfl_compiled *c);
uint64_t dfl_compiled_plan_hash(const dfl_compiled *c);

#endif
