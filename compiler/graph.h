/*
** graph.h: the typed dataflow IR.
**
** One dfl_graph per device. Tensors have a static shape (at most 4 dims, row-major), a dtype and
** a kind (what owns their memory and for how long). Ops are kept in a valid schedule order: an op
** only reads tensors produced by earlier ops (or inputs, weights and state). The op list *is* the
** schedule every backend runs and the memory planner plans.
**
** Layout conventions (all row-major, batch folded into rows):
**   activations  [rows, features]; heads are contiguous slices of features: head h of a
**                [R, nh*hd] tensor is columns h*hd .. h*hd+hd-1.
**   linear       weight [out, in]; y = x W^T  (MATMUL with trans_b = 1).
**   per-sample   DFlash: context rows b*S + s; block rows b*Q + n*B + j, Q = N*B.
**
** Persistent tensors (PARAM, FROZEN, STATE, GRAD, OUTPUT) live for the whole run and may be
** updated in place: an op may list the same persistent tensor as input and output. ACT tensors
** are written once per step (SSA) and are what the memory planner overlaps.
*/
#ifndef DFL_GRAPH_H
#define DFL_GRAPH_H

#include "compiler/ir.h"

/* --- construction --- */
void dfl_graph_init(dfl_graph *g);
void dfl_graph_free(dfl_graph *g);
/* New tensor; shape is ndim values. Returns its id. */
int dfl_tensor_new(dfl_graph *g, const char *name, dfl_dtype dt, dfl_tkind kind, int ndim, const int64_t *shape);
int dfl_tensor_2d(dfl_graph *g, const char *name, dfl_dtype dt, dfl_tkind kind, int64_t r, int64_t c);
int dfl_tensor_1d(dfl_graph *g, const char *name, dfl_dtype dt, dfl_tkind kind, int64_t n);
/* Append an op; outputs must already exist. Checks shapes and dtypes of the op against its
** contract and aborts with a message naming the op's label on a mismatch (a builder bug). */
int dfl_op_add(dfl_graph *g, dfl_opcode code, const int *in, int n_in, const int *out, int n_out, const dfl_attrs *a);
int dfl_tensor_find(const dfl_graph *g, const char *name); /* -1 if none */

/* Convenience builders: create the output tensor(s) (kind ACT) and append the op. The
** activation dtype is `dt` (bf16 or f32). Return the output id (first output). */
int dfl_matmul(dfl_graph *g, int a, int b, int trans_a, int trans_b, dfl_dtype dt, const char *name);
int dfl_linear(dfl_graph *g, int x, int w, dfl_dtype dt, const char *name); /* x W^T */
/* FP8: q8 = quantized x (QUANT_F8, its scales in *scale), then y = MATMUL_F8(q8, w8, scale, ws). */
int dfl_quant_f8(dfl_graph *g, int x, int *scale, const char *name);
int dfl_linear_f8(dfl_graph *g, int x8, int sx, int w8, int sw, dfl_dtype dt, const char *name);
int dfl_add(dfl_graph *g, int x, int y, const char *name);
int dfl_rmsnorm(dfl_graph *g, int x, int w, int group, double eps, const char *name);
int dfl_rope(dfl_graph *g, int x, int pos, int heads, int head_dim, double theta, const char *name);
int dfl_swiglu(dfl_graph *g, int gate, int up, const char *name);
int dfl_gather(dfl_graph *g, int table, int ids, dfl_dtype dt, const char *name);

/* --- queries (sizes and names: compiler/ir.h) --- */
/* FLOPs of one op (multiply-add = 2), for reports and MFU. */
double dfl_op_flops(const dfl_graph *g, const dfl_op *op);
/* Print the graph as text (one op per line with shapes): golden tests use this. */
void dfl_graph_dump(const dfl_graph *g, FILE *f);

/* --- autodiff (compiler/autodiff.c) ---
** Appends the reverse-mode backward of every op that (transitively) reads a requires_grad
** tensor, seeded with d(loss)/d(loss) = 1 for the scalar `loss`. After it, tensor->grad is set
** for every PARAM that influences loss. Gradients of a tensor read several times are summed. */
int dfl_autodiff(dfl_graph *g, int loss);

/* --- optimizer (compiler/optim.c) ---
** For every PARAM with a grad: creates its master (f32 STATE), Adam m and v (f32 STATE), and a
** persistent grad accumulator (f32 GRAD); appends ACCUM (backward phase), then at the optimizer
** phase SUMSQ_ACC, OPT_PREP and ADAMW. `den` is the scalar sum of loss weights of the micro-step,
** accumulated into a persistent denominator. Returns the id of the optimizer state tensor. */
/* --- fusion (compiler/fuse.c), the design's stage 5 ---
** Rewrites MATMUL -> t ; ACCUM(acc, t), t read by nothing else, into one accumulating MATMUL
** (a.beta = 1, in: A, B, acc -> out acc): the gradient GEMM adds straight into the f32
** accumulator instead of writing t and re-reading it. Run after dfl_build_optimizer. t is left
** in the tensor table untouched by any op. Returns the number of pairs fused (>= 0). */
int dfl_fuse(dfl_graph *g);
/* For graphs run once per optimizer step (gradient accumulation 1) only, after dfl_fuse: a grad
** accumulator written by ONE op per step (an accumulating MATMUL or an ACCUM) and read by nothing
** before it needs no zeroing: that op overwrites it (MATMUL beta 0, ACCUM -> COPY) and its ADAMW
** keeps it (a.keep_grad). Same values (0 + x = x exactly); per weight element 4 bytes fewer read
** by the GEMM epilogue and 4 fewer written by AdamW. Returns the number of accumulators rewritten. */
int dfl_fuse_overwrite(dfl_graph *g);
/* After dfl_fuse_overwrite, for train.grads = bf16: every overwritten accumulator of a bf16 (f16)
** param whose writer is a MATMUL of that dtype or a COPY takes the param's dtype (the reference's
** bf16 gradients); a same-dtype COPY is removed, its source's producer writing the accumulator.
** Returns the number of accumulators retyped, -1 when out of memory. */
int dfl_fuse_grads_lowp(dfl_graph *g);
/* Rewrites MATMUL -> t ; u = ADD(t, r) (either order), t read by nothing else, into one MATMUL
** with an addend (a.beta = 1, in: A, B, r -> out u, u != r): the residual adds of every layer and
** autodiff's gradient sums run in the GEMM epilogue. Conditions and numerics: compiler/fuse.c. Run
** after autodiff (and dfl_fuse); t is left in the tensor table untouched by any op. Returns the
** number of ADDs fused (>= 0), -1 when out of memory. */
int dfl_fuse_add(dfl_graph *g);

/* Rewrites y = RMSNORM(x, w) over groups of head_dim, whose rstd output nothing reads, and
** z = ROPE(y, pos), y read by nothing else, into one normed ROPE (in: x, pos, w): the per-head
** q/k norm and the rotation of forward-only graphs (the frozen target, evaluation) in one pass,
** without writing y. Graphs that differentiate the norm read its rstd, so theirs stay. Run after
** autodiff. Returns the number of pairs fused (>= 0), -1 when out of memory. */
/* Partial rotary (0 < rd < hd) shapes with a fused form (normed, pair): hd / 8 a power of two <= 32 and
** rd % 16 == 0, what kernels/hybrid.cuh dfl_rope_pn takes (a head is hd / 8 lanes of a warp). */
int dfl_fuse_rope_part_ok(int hd, int rd);
int dfl_fuse_norm_rope(dfl_graph *g);

/* Rewrites two ROPEs of one phase that rotate by the same positions (q and k of a layer, their
** gradients in the backward), both plain or both normed, into one ROPE of the pair form (graph.h):
** one launch, the angles formed once per row. Run after dfl_fuse_norm_rope. Conditions: compiler/
** fuse.c. Returns the number of pairs fused
** (>= 0), -1 when out of memory. */
int dfl_fuse_rope_pair(dfl_graph *g);

/* FP8 targets (quantize = fp8): rewrites y = RMSNORM(x, w) over whole rows, whose rstd nothing
** reads, and (q, s) = QUANT_F8(y), y read by nothing else, into the norm's quantized form
** (graph.h): y is never written nor re-read. Run after autodiff. Returns the number of pairs
** fused (>= 0), -1 when out of memory. */
int dfl_fuse_quant(dfl_graph *g);
/* The same, the SwiGLUs' quantizations left apart when swiglu is 0 (compile { swiglu_quant = false }). */
int dfl_fuse_quant_ex(dfl_graph *g, int swiglu);

/* The fusion pass list, held here once for every graph dflc builds (train, eval, a pipeline's
** target devices, the agreement graph, bench, plan): in order dfl_fuse (only with DFL_FUSE_TRAIN:
** a differentiated graph with its optimizer), dfl_fuse_add, dfl_fuse_norm_rope, dfl_fuse_rope_pair,
** dfl_fuse_quant. Forward-only graphs pass 0 and come out with the rounding of the training graph's
** forward. DFL_FUSE_NO_ROPE_PAIR leaves every RoPE pair apart, DFL_FUSE_NO_SWIGLU_Q every SwiGLU's
** quantization (the spec's `compile` section: dfl_model_fuse_flags). Returns DFL_OK, or DFL_ENOMEM. */
enum { DFL_FUSE_TRAIN = 1, DFL_FUSE_NO_ROPE_PAIR = 2, DFL_FUSE_NO_SWIGLU_Q = 4 };
int dfl_fuse_passes(dfl_graph *g, unsigned flags);

/* --- schedule (compiler/sched.c) ---
** 1 when the optimizer phase of one step may run concurrently with the target phase of the next
** (a second stream inside one captured graph): the graph has ops in both phases, no tensor written
** by one is read or written by the other, and the optimizer runs no GEMM (the GEMM library's
** workspace is shared). The memory plan must then keep the optimizer phase's per-step buffers
** live over the whole step (dfl_plan_opts.span_phases). */
int dfl_sched_overlap_ok(const dfl_graph *g);

struct dfl_optim_cfg { double lr, beta1, beta2, eps, wd, clip; int64_t warmup, total; int schedule; };
int dfl_build_optimizer(dfl_graph *g, int den, const struct dfl_optim_cfg *cfg);

#endif
