/*
** sched.c: which phases of consecutive steps may run at the same time.
**
** The optimizer phase of step n reads gradients and writes the drafter's weights and its own
** state; the target phase of step n+1 reads the frozen target and the step's inputs and writes
** hidden states. When the two touch no common tensor that either writes, step n+1's target
** forward (GEMM-bound) can run while step n's optimizer (memory-bound) does: the trainer captures
** them as two streams of one graph (runtime/train.c). Everything after them (the drafter's forward)
** waits for both, so the drafter always sees the updated weights: the values are those of the
** sequential schedule, bit for bit.
*/
#include <stdlib.h>

#include "compiler/graph.h"

/* bit 0: read by phase A, 1: written by A, 2: read by B, 3: written by B */
static void mark(unsigned char *u, const dfl_op *op, int shift, int nt) {
  for (int k = 0; k < op->n_in; k++)
    if (op->in[k] >= 0 && op->in[k] < nt) u[op->in[k]] |= (unsigned char)(1u << shift);
  for (int k = 0; k < op->n_out; k++)
    if (op->out[k] >= 0 && op->out[k] < nt) u[op->out[k]] |= (unsigned char)(2u << shift);
}

int dfl_sched_overlap_ok(const dfl_graph *g) {
  int n_opt = 0, n_tgt = 0;
  unsigned char *u = calloc((size_t)g->nt + 1, 1);
  if (!u) return 0;
  for (int i = 0; i < g->nops; i++) {
    const dfl_op *op = &g->ops[i];
    if (op->phase == DFL_PH_OPTIMIZER) {
      /* a GEMM would share the library's one workspace with the target's GEMMs */
      if (op->code == DFL_OP_MATMUL || op->code == DFL_OP_LINEAR_CE) { free(u); return 0; }
      mark(u, op, 0, g->nt);
      n_opt++;
    } else if (op->phase == DFL_PH_TARGET) {
      mark(u, op, 2, g->nt);
      n_tgt++;
    }
  }
  int ok = n_opt > 0 && n_tgt > 0;
  for (int t = 0; ok && t < g->nt; t++) {
    unsigned m = u[t];
    if (((m & 2) && (m & 12)) || ((m & 8) && (m & 3))) ok = 0;
  }
  free(u);
  return ok;
}
