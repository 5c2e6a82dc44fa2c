/*
** plan.h: the static memory plan of one device.
**
** Every tensor of a graph gets a byte offset in one arena before anything runs. The arena has two
** regions: persistent tensors (weights, masters, Adam moments, gradients, metric outputs, inputs,
** queue slots, library workspaces) first, packed end to end; then the per-step region, where ACT
** tensors whose lifetimes (first write .. last read in the schedule) do not overlap share bytes,
** placed greedy-by-size with best fit (TFLite/XLA). The lower bound of the per-step region is the
** maximum, over schedule points, of the bytes live at that point.
*/
#ifndef DFL_PLAN_H
#define DFL_PLAN_H

#include <stdint.h>
#include <stdio.h>
#include "compiler/graph.h"

/* Bytes per element a backend stores for tensor t (the CUDA backend: its dtype; the CPU
** backend: 4 or 8 for every float). */
typedef size_t (*dfl_plan_elem_fn)(const dfl_tensor *t, void *ctx);

/* What a buffer is for: the parts of a device's total that `dflc plan` reports. */
typedef enum {
  DFL_PCAT_WEIGHTS = 0, /* PARAM + FROZEN */
  DFL_PCAT_OPTSTATE,    /* STATE: fp32 masters, Adam moments, step state, loss sums */
  DFL_PCAT_GRADS,       /* GRAD accumulators */
  DFL_PCAT_IO,          /* INPUT + OUTPUT */
  DFL_PCAT_QUEUE,       /* hidden-state queue slots (workspace) */
  DFL_PCAT_LIBRARY,     /* library workspaces: cuBLASLt, NCCL (workspace) */
  DFL_PCAT_ACT,         /* per-step activations */
  DFL_PCAT_LOSS,        /* loss workspace (per-step scratch of the fused CE) */
  DFL_PCAT_COUNT
} dfl_plan_cat;

/* A fixed-size named buffer that is not a graph tensor (queue slots, library workspaces, kernel
** scratch). op = -1: persistent; op >= 0: per-step scratch live only while that op runs. */
typedef struct dfl_plan_ws {
  char name[DFL_NAME_MAX];
  int64_t bytes;
  dfl_plan_cat cat;
  int op;
} dfl_plan_ws;

typedef struct dfl_plan_opts {
  int64_t alignment;      /* 0: 256 (what cudaMalloc and cuBLASLt want) */
  int no_inplace;         /* 1: never let an elementwise op's output take its dying input's bytes */
  const dfl_plan_ws *ws;  /* workspaces to place with the tensors */
  int n_ws;
  const int *live_out;    /* ACT tensors the host reads after the step: kept live to the end */
  int n_live_out;
  int bound_only;         /* 1: liveness, lower bound and persistent region only; per-step
                          ** buffers are left unplaced (for searches that only need the bound) */
  unsigned span_phases;   /* bit 1u << phase: per-step buffers an op of that phase touches (and its
                          ** scratch) stay live over the whole step, because the phase may run
                          ** concurrently with others (dfl_sched_overlap_ok) */
} dfl_plan_opts;

typedef struct dfl_plan {
  int nt;
  int64_t *offset;        /* per tensor: byte offset from the arena start; -1 if not placed */
  int64_t *size;          /* per tensor: bytes (aligned) */
  int *first, *last;      /* per tensor: first and last op index that touch it (-1: persistent) */
  int64_t persistent_bytes; /* size of the persistent region (per-step region starts here) */
  int64_t step_bytes;     /* size of the per-step region as placed */
  int64_t step_lower_bound; /* max live per-step bytes at any schedule point */
  int peak_op;            /* op index where the live per-step bytes peak */
  int64_t arena_bytes;    /* persistent_bytes + step_bytes */
  int64_t alignment;
  /* Buffers are the nt tensors followed by the n_ws workspaces: offset, size, first, last and
  ** the arrays below have nbuf entries; buffer nt + i is ws[i]. */
  int nbuf;
  int n_ws;
  dfl_plan_ws *ws;
  int *alias;             /* per buffer: the buffer whose bytes it takes in place, else -1 */
  unsigned char *cat;     /* per buffer: dfl_plan_cat */
  /* Persistent categories: their bytes. Per-step categories (ACT, LOSS): bytes live at peak_op,
  ** so that the parts plus fragmentation (step_bytes - step_lower_bound) sum to arena_bytes. */
  int64_t cat_bytes[DFL_PCAT_COUNT];
  int n_inplace;          /* outputs that took an input's bytes */
} dfl_plan;

/* Bytes per element of t's dtype (the CUDA backend); what elem = NULL means. */
size_t dfl_plan_dtype_elem(const dfl_tensor *t, void *ctx);
const char *dfl_plan_cat_name(dfl_plan_cat c);
/* Ops whose output may take an input's bytes: elementwise kernels that read x[i] before writing
** y[i] and nothing else (ADD, SCALE, SWIGLU, COPY between equal element sizes). */
int dfl_plan_op_inplace_ok(dfl_opcode code);

int dfl_plan_build(dfl_plan *p, const dfl_graph *g, dfl_plan_elem_fn elem, void *ctx);
/* Same with options (o may be NULL). */
int dfl_plan_build_ex(dfl_plan *p, const dfl_graph *g, dfl_plan_elem_fn elem, void *ctx,
                      const dfl_plan_opts *o);
/* Name of buffer i: a tensor's name or a workspace's. */
const char *dfl_plan_buf_name(const dfl_plan *p, const dfl_graph *g, int i);
void dfl_plan_free(dfl_plan *p);
/* Checks that no two tensors live at the same time share a byte and that every tensor is inside
** the arena; returns DFL_OK or DFL_ERR after printing the first conflict to stderr. */
int dfl_plan_check(const dfl_plan *p, const dfl_graph *g);

/* --- the CUDA backend's workspaces (runtime/cuda.c uses exactly these, at the plan's offsets) ---
** One persistent cuBLASLt workspace, and per op that needs scratch besides its tensors one per-step
** workspace live only while that op runs: "loss.ce_chunk@OP" for LINEAR_CE (cat LOSS), "scratch@OP"
** for reductions, RMSNORM_BWD, SCATTER_ADD and ATTENTION_BWD (cat ACT). */
#define DFL_CUBLASLT_WS_BYTES (32ll << 20)
#define DFL_RED_PARTS 1024          /* partial sums of SUM / SUMSQ_ACC reductions, at most */
#define DFL_RMS_PARTS 512           /* partial dw rows of the vector RMSNORM_BWD kernel, at most */
/* Row parts of BLOCK_EXPAND_BWD's column sums over Q rows: 128 rows each, at most 64 parts. Fixed by
** the shape alone, so the sums' order is the same on every device. */
static inline int dfl_block_parts(int64_t Q) { int64_t p = (Q + 127) / 128; return (int)(p < 1 ? 1 : p > 64 ? 64 : p); }
/* LINEAR_CE workspace layout: the logits of one chunk of rows over the whole vocabulary, [rows, V]
** (row stride V) in the head's dtype: bf16 logits, as the reference's bf16 matmul rounds them,
** with the log-sum-exp, argmax and counts taken in f32. Rows, not vocabulary columns, are chunked
** so that every row's softmax is complete after ONE logits GEMM: per chunk, logits GEMM -> row
** kernel (lse, ce, argmax, top-K, dlogits written in place over the logits) -> dY GEMM straight into
** the dY tensor. Two vocabulary GEMMs per row, no recomputation and no dY accumulator. The chunk
** takes as many bytes as vocab_chunk f32 columns over all rows plus the [R, H] f32 accumulator the
** column-chunked design needed, so the spec's vocab_chunk knob still bounds the workspace. */
typedef struct dfl_lce_ws {
  int64_t rows;           /* rows per chunk (the last chunk may be shorter) */
  int64_t ld;             /* logits row stride in elements (= V) */
  int64_t lg_off, bytes;
  int64_t period;         /* > 1: the anchor rows (r % period == 0) are left out (LINEAR_CE a.B);
                          ** the chunks run over the others, gathered into a staging buffer */
  int64_t rows_used;      /* rows the chunks cover: R, or R - R / period */
  int64_t st_off;         /* staging rows [rows, H] (y in, then the target's rows, then dy out), when period > 1 */
  int64_t tl_off;         /* soft labels (5 inputs): the target's logits of the chunk's rows, as the logits */
  int64_t lr_off;         /* soft labels: each row's loss (1 - a) ce + a T^2 KL, [R] f32 */
} dfl_lce_ws;
void dfl_plan_lce_ws(const dfl_graph *g, const dfl_op *op, dfl_lce_ws *l);
/* Bytes of scratch op needs on the CUDA backend (0: none). */
int64_t dfl_plan_cuda_op_scratch(const dfl_graph *g, const dfl_op *op);
/* Fills ws (room for g->nops + 1 entries) with the CUDA backend's workspaces; returns the count. */
int dfl_plan_cuda_workspaces(const dfl_graph *g, dfl_plan_ws *ws);

/* --- recomputation under a budget (compiler/plan_recompute.c) ---
** When the plan of *g exceeds `budget` bytes, duplicates cheap forward ops (RMSNORM, ROPE, SWIGLU,
** ADD, SCALE, COPY, GATHER, MATMUL) right before their first backward reader, so that the forward
** copy dies early, choosing greedily the most bytes freed at the peak per FLOP added. The rewrite
** keeps semantics: the backward reads bit-identical recomputed values. On DFL_OK *g is the rewritten
** graph (tensor ids kept; clones appended) and *p its plan within budget; otherwise DFL_ERR with *p
** the smallest plan found (and *g rewritten to match it). Workspace op indices in o are remapped. */
typedef struct dfl_recompute {
  int n_ops;              /* forward ops duplicated */
  double flops;           /* FLOPs per micro-step they add */
  int64_t before, after;  /* arena bytes before and after */
} dfl_recompute;
int dfl_plan_fit(dfl_graph *g, int64_t budget, dfl_plan_elem_fn elem, void *ctx, const dfl_plan_opts *o,
                 dfl_plan *p, dfl_recompute *r);

/* --- reports (compiler/plan_report.c) --- */

/* One device's plan as `dflc plan` shows it. */
typedef struct dfl_plan_dev {
  char name[64];          /* "node0.gpu1" */
  const char *role;       /* "target", "drafter", "target+drafter" */
  const dfl_graph *g;
  const dfl_plan *p;
  int64_t budget;         /* bytes, 0 = none */
  int n_recomputed;       /* forward ops duplicated into the backward to fit the budget */
  double recompute_flops; /* FLOPs per step those duplicates add */
  unsigned span_phases;   /* the plan's dfl_plan_opts.span_phases (phases run beside others) */
} dfl_plan_dev;

void dfl_plan_print(FILE *f, const dfl_plan_dev *d);
int dfl_plan_write_yaml(FILE *f, const char *spec_file, const dfl_plan_dev *d, int n);
int dfl_plan_write_html(FILE *f, const char *spec_file, const dfl_plan_dev *d, int n);
/* Formats bytes as "12.3 MiB" into buf (returns buf). */
const char *dfl_plan_bytes_str(char *buf, size_t n, int64_t bytes);
/* An allocation that failed: its bytes, the parts of the plan p (NULL: unplanned) and a pointer to
** `dflc plan`, on f. who names the allocator ("cpu backend", "cuda backend"). Inline: the backends
** report with it and do not link the planner. */
static inline void dfl_plan_oom(FILE *f, const char *who, int64_t bytes, const dfl_plan *p) {
  static const char *const part[DFL_PCAT_COUNT] = {"weights", "optimizer state", "gradients", "inputs/outputs",
                                                   "queue slots", "library workspace", "activations", "loss workspace"};
  fprintf(f, "dflc: %s: out of memory: cannot allocate %.2f GiB (%lld bytes)", who, (double)bytes / 1073741824.0,
          (long long)bytes);
  if (p && p->offset) {
    fprintf(f, "; the planned arena:");
    for (int c = 0, k = 0; c < DFL_PCAT_COUNT; c++)
      if (p->cat_bytes[c] > 0) fprintf(f, "%s %s %.2f GiB", k++ ? "," : "", part[c], (double)p->cat_bytes[c] / 1073741824.0);
  }
  fprintf(f, "\n  `dflc plan SPEC` shows where these bytes go and the batch, seq_len or anchors that fit a memory budget; "
             "give the device its real memory as `topology { memory { default = ... } }`\n");
}

/* A plan as read back from YAML: what --diff and the tests need. */
typedef struct dfl_plan_doc_buf {
  char name[DFL_NAME_MAX];
  char kind[16], cat[24];
  int64_t offset, size;
  int first, last, alias;
} dfl_plan_doc_buf;
typedef struct dfl_plan_doc_dev {
  char name[64];
  int64_t arena_bytes, persistent_bytes, step_bytes, lower_bound;
  int64_t cat_bytes[DFL_PCAT_COUNT];
  dfl_plan_doc_buf *buf;
  int nbuf;
} dfl_plan_doc_dev;
typedef struct dfl_plan_doc {
  dfl_plan_doc_dev *dev;
  int ndev;
} dfl_plan_doc;

/* Reads a plan YAML written by dfl_plan_write_yaml; errors name the file and what is wrong. */
int dfl_plan_doc_read(dfl_plan_doc *doc, const char *path);
/* The document of in-memory plans (to diff against one read from a file). */
int dfl_plan_doc_from(dfl_plan_doc *doc, const dfl_plan_dev *d, int n);
void dfl_plan_doc_free(dfl_plan_doc *doc);
/* Prints, per device, category and per-buffer byte changes from `before` to `after`. */
void dfl_plan_diff(FILE *f, const dfl_plan_doc *before, const dfl_plan_doc *after);

#endif
