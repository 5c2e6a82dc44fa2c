/*
** codegen.h: the CUDA source of a graph's pointwise fusion groups (compiler/lower.h), generated from
** compiler/pointwise.def: one kernel per group, its element count, dtypes and attributes compile-time
** constants, after kernels/common.cuh. The CUDA backend compiles exactly this text through NVRTC
** (cached by a hash of it and the architecture, as the library is); `dflc build` writes it as
** DIR/groups.cu. Nothing here needs a GPU.
*/
#ifndef DFL_CODEGEN_H
#define DFL_CODEGEN_H

#include <stddef.h>
#include "compiler/graph.h"
#include "compiler/lower.h"

/* The source for gs's groups of g (*src malloc'ed, NUL terminated; *len may be NULL). With no
** group, *src is NULL. */
int dfl_codegen_source(const dfl_graph *g, const dfl_groups *gs, char **src, size_t *len);
/* The symbol of group k's kernel: "dfl_pw_<k>". */
void dfl_codegen_kernel_name(int k, char *buf, size_t cap);
/* Does the generated code store tensor t? Not when t is a row group's quantized input (its QUANT_F8
** fused, lower.h) that no op outside the group reads: the row stays in registers. 1 otherwise. */
int dfl_codegen_stores(const dfl_graph *g, const dfl_groups *gs, int t);

#endif
