/*
** lower_launch.h: the library kernels' launches, chosen at build time. For an op of a scheduled,
** placed graph: which kernel of kernels/kernels.def runs it, with which block, grid and dynamic shared
** memory, from its shapes, dtypes, its tensors' byte offsets (16-byte alignment) and the target
** architecture's row. `dflc build` writes the list (DIR/kernels.txt); the CUDA backend lowers its own
** graph with the same function at init and launches what it says, checking only that its pointers
** have the alignment the choice assumed.
**
** What stays with the device: a grid-stride kernel's grid is capped at the CTAs the device's SMs hold
** at once (fill), so the SM count and the kernel's measured occupancy are applied at launch; a choice
** that follows them is DFL_ARG_AT_INIT in a build and the device's value in the backend's lowering.
** The GEMMs are cuBLASLt's (its heuristic, at init); every other library op is lowered here (an op
** a later change adds without a lowering shows in kernels.txt as chosen at run time, docs/codegen.md).
*/
#ifndef DFL_LOWER_LAUNCH_H
#define DFL_LOWER_LAUNCH_H

#include <stddef.h>
#include "compiler/lower_family.h"

/* Op i's launches into out[0 .. n): n, or 0 when the op is not lowered here (see above), or a negated
** status (< 0) with a message naming the op when no kernel takes its shape. */
int dfl_lower_launch(const dfl_graph *g, int i, const dfl_lower_env *env, dfl_launch *out);
/* env's smem and att for the row of architecture arch (sm_90a ...; dflc build --arch), nsm 0 (no device):
** DFL_ERR with a message for an arch no row covers. Leaves offset and occupancy as they are. */
int dfl_lower_env_arch(dfl_lower_env *env, const char *arch);
/* Every op of g lowered for architecture arch's row (dfl_lower_env_arch) at a plan's offsets, as the
** CUDA backend lowers it at init (`dflc check`, runtime/cli/cmd_plan.c): DFL_OK, or the status of the
** first op no kernel takes (its message printed), its index in *bad (-1: the arch has no row). */
int dfl_lower_check(const dfl_graph *g, const int64_t *offset, const char *arch, int *bad);
/* One launch as text: "dfl_rmsnorm_r grid 49152 (<= 4/SM) x 160 smem 0" */
void dfl_lower_launch_str(const dfl_launch *l, char *buf, size_t n);

#endif
