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
#include "compiler/graph.h"

/* Bytes per element a backend stores for tensor t (the CUDA backend: its dtype; the CPU
** backend: 4 or 8 for every float). */
typedef size_t (*dfl_plan_elem_fn)(const dfl_tensor *t, void *ctx);

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
} dfl_plan;

int dfl_plan_build(dfl_plan *p, const dfl_graph *g, dfl_plan_elem_fn elem, void *ctx);
void dfl_plan_free(dfl_plan *p);
/* Checks that no two tensors live at the same time share a byte and that every tensor is inside
** the arena; returns DFL_OK or DFL_ERR after printing the first conflict to stderr. */
int dfl_plan_check(const dfl_plan *p, const dfl_graph *g);

#endif
