/*
** lower.h: the pointwise fusion groups of a scheduled graph. A group is a run of consecutive ops of
** compiler/pointwise.def over one iteration space (the same element count), in one phase; the CUDA
** backend launches it as one kernel that compiler/codegen.c generates from the ops' definitions,
** with its shapes and dtypes as compile-time constants. Every pointwise op is in a group (alone when
** nothing next to it fuses), so the backend has no library kernel for these ops.
**
** Inside a group one thread takes the same elements of every tensor, loads before it stores, and
** keeps the values one op passes to the next in registers (rounded to their tensor's dtype, as the
** op-by-op graph stores them). That is exact when no two tensors of the group share bytes: the plan
** keeps every tensor a group touches live over the whole group (dfl_lower_span), and
** dfl_lower_groups, given the placed offsets, splits a group wherever two of its tensors overlap.
** Column and scalar inputs (pointwise.def) are read by every thread: no op of their group writes one.
**
** A row group: a group with a row op of compiler/rowwise.def (a sum over segments of each row, then
** a body per element: the gated norm, the L2 norm), or whose last output is quantized right after it
** (QUANT_F8 over rows of C <= DFL_PW_ROW_MAX columns, C % 8 == 0: that QUANT_F8 joins). Its kernel
** runs a CTA a row of C columns (all its ops', and C % 8 == 0), segments inside one warp's lanes,
** the row's amax reduced across the CTA, and the quantized row written without a pass over the
** unquantized one (stored only where an op outside the group reads it). A row op alone stays its
** library kernel.
*/
#ifndef DFL_LOWER_H
#define DFL_LOWER_H

#include <stdint.h>
#include "compiler/graph.h"

#define DFL_PW_MAX_OPS 8   /* ops a group takes at most */
#define DFL_PW_MAX_T 16    /* tensors a group touches at most: its kernel's pointer arguments */
#define DFL_PW_ROW_MAX 8192 /* a row group's columns at most: 4 chunks of 8 per thread of 256 */

typedef struct dfl_pw_group {
  int first, n;            /* ops [first, first + n) of the schedule */
  int64_t numel;           /* the iteration space */
  int vec;                 /* 8: 16-byte accesses (numel % 8 == 0, checked on the pointers at run time), else 1 */
  int64_t rows, cols;      /* rows > 0: a row group (a row op, or a QUANT_F8 last, over rows x cols), a CTA a row */
  int quant;               /* a row group whose last op is a QUANT_F8 */
  int nt;
  int t[DFL_PW_MAX_T];     /* the tensors it touches, in order of first use: the kernel's arguments */
} dfl_pw_group;

typedef struct dfl_groups {
  int n;
  dfl_pw_group *g;
  int *of_op;              /* per op of the graph: its group, or -1 (not pointwise) */
  int nops;
} dfl_groups;

/* Is op a pointwise op in a form pointwise.def defines (its tensors f32, bf16 or f16)? */
int dfl_lower_pointwise(const dfl_graph *g, const dfl_op *op);
/* The definition row of code: its input letters, outputs and body; NULL when code is not pointwise. */
const char *dfl_lower_pw_ins(dfl_opcode code);
/* How op (pointwise) reads its input k: its pointwise.def letter, except a window ('w') at column 0
** of an input with the output's element count (whole rows: the element itself), read as 'e' */
char dfl_lower_pw_in(const dfl_graph *g, const dfl_op *op, int k);
int dfl_lower_pw_outs(dfl_opcode code);
const char *dfl_lower_pw_body(dfl_opcode code);
/* Row ops (rowwise.def; pw_ins and pw_body give their letters and their per-element body too): */
int dfl_lower_rowop(const dfl_graph *g, const dfl_op *op);
const char *dfl_lower_row_pre(dfl_opcode code);
/* Forms the groups of g. offset (may be NULL: tensors that never share bytes) holds each tensor's
** byte offset (-1: not placed, its own allocation) and size its bytes, as a dfl_plan places them: a
** group whose tensors overlap is split there. Free with dfl_groups_free. */
int dfl_lower_groups(const dfl_graph *g, const int64_t *offset, const int64_t *size, dfl_groups *out);
void dfl_groups_free(dfl_groups *gs);
/* The plan's liveness: per op, the first and last op of its group (itself when alone), so that every
** tensor a group touches is live across it. first and last have g->nops entries. */
int dfl_lower_span(const dfl_graph *g, int *first, int *last);

#endif
