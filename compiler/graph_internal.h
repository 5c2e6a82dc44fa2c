/* graph_internal.h: what graph.c and graph_validate.c share. */
#ifndef DFL_GRAPH_INTERNAL_H
#define DFL_GRAPH_INTERNAL_H
#include "compiler/ir.h"

/* Aborts with the op's label and shapes when the op breaks its contract (graph_validate.c). */
void dfl_graph_validate_op(const dfl_graph *g, dfl_opcode code, const char *label, const int *in, int n_in,
                           const int *out, int n_out, const dfl_attrs *a);
#endif
