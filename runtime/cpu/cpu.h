/*
** cpu.h: the CPU reference backend, a plain interpreter of a dfl_graph.
**
** It is the oracle every CUDA kernel is checked against and how CI (no GPU) proves shapes,
** gradients, the memory plan and the training loop. Floating tensors are held as float (f32
** mode) or double (f64 mode, used by the finite-difference gradient checks) whatever their
** declared dtype; integer tensors are int32. Matrix products go through OpenBLAS.
*/
#ifndef DFL_CPU_H
#define DFL_CPU_H

#include "compiler/graph.h"

struct dfl_plan;

typedef struct dfl_cpu {
  const dfl_graph *g;
  int f64;            /* 1: every float tensor is double */
  void **buf;         /* per tensor: its storage */
  void *arena;        /* planned mode: the one block every ACT tensor lives in */
  size_t arena_bytes;
  void **owned;       /* allocations to free */
  int n_owned;
  void **planned_buf; /* dfl_cpu_unshared: buf as planned, while the private copy is on */
  void *priv;
} dfl_cpu;

/* Element size the CPU backend uses for a tensor (4 or 8 for floats, 4 for ints). */
size_t dfl_cpu_elem_size(const dfl_tensor *t, int f64);

/* Allocate storage. plan == NULL: one zeroed allocation per tensor (the unplanned oracle).
** Otherwise per-step tensors are placed at the plan's offsets inside one arena (persistent ones
** are still allocated apart) so that a wrong overlap shows up as wrong numbers. */
int dfl_cpu_init(dfl_cpu *c, const dfl_graph *g, const struct dfl_plan *plan, int f64);
void dfl_cpu_free(dfl_cpu *c);

/* Run every op whose phase bit is set in phase_mask (1u << DFL_PH_x), in schedule order. */
int dfl_cpu_run(dfl_cpu *c, unsigned phase_mask);
#define DFL_PH_ALL 0xffffffffu
#define DFL_PH_STEP (DFL_PH_ALL & ~(1u << DFL_PH_OPTIMIZER))

/* on = 1: every per-step tensor of plan (the one c was opened with) moves to bytes of its own, so
** that any subset of the ops can run in order and read what a step wrote (dflc bench --floor; the
** plan lets tensors never live at once share bytes). Their contents are not copied: run a step
** first. on = 0: back to the plan's arena. */
int dfl_cpu_unshared(dfl_cpu *c, const struct dfl_plan *plan, int on);

/* Run a single op (used by the op tests). */
int dfl_cpu_run_op(dfl_cpu *c, int op_index);

/* Quantize the rows of the 2-D float tensor x to FP8 E4M3 in place (the values of the bytes QUANT_F8
** would write, runtime/fp8.h), their scales into the f32 tensor s (one per row). */
void dfl_cpu_quant_rows(dfl_cpu *c, int x, int s);

/* Copy every PARAM into its fp32 master (after loading or initialising the params, before the
** first optimizer step): dfl_build_optimizer creates masters but no op that fills them. */
void dfl_cpu_init_masters(dfl_cpu *c);

/* reference §1.4 allowed(q, kv) for one sample: q = n*B + j (query row within the sample's
** blocks), kv < S a context key, kv >= S block key kv - S; window 0 = full layer. The
** attention kernels enumerate exactly these keys. */
int dfl_dflash_allowed(int S, int B, int window, int anchor, int keep, int q, int kv);

/* Typed access to a tensor's storage (f32 mode / f64 mode / int). */
float *dfl_cpu_f32(dfl_cpu *c, int t);
double *dfl_cpu_f64(dfl_cpu *c, int t);
int32_t *dfl_cpu_i32(dfl_cpu *c, int t);
/* Copy in/out converting to/from float regardless of mode. */
void dfl_cpu_set_f(dfl_cpu *c, int t, const float *src, int64_t n);
void dfl_cpu_get_f(dfl_cpu *c, int t, float *dst, int64_t n);
void dfl_cpu_set_d(dfl_cpu *c, int t, const double *src, int64_t n);
void dfl_cpu_get_d(dfl_cpu *c, int t, double *dst, int64_t n);

#endif
