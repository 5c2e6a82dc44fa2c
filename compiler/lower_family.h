/*
** lower_family.h: what a kernel family's lowering file (lower_attn.c, lower_rows.c, lower_hybrid.c) fills
** and exports: the launch record (dfl_launch), the environment it is chosen in (dfl_lower_env), the kernel
** ids, and each family file's entry points. lower_launch.c dispatches to the family files and
** lower_launch.h (the lowering's API, what runtime/ includes) includes this header; the family files reach
** it through lower_internal.h and include nothing of lower_launch's, so the includes and the calls of
** the lowering run one way (docs/architecture.md).
*/
#ifndef DFL_LOWER_FAMILY_H
#define DFL_LOWER_FAMILY_H

#include <stdint.h>
#include "compiler/graph.h"

/* The kernels' ids: K_<ID> in the CUDA backend, the same order. */
enum {
#define DFL_KERNEL(id, sym, fam) DFL_K_##id,
#include "kernels/kernels.def"
#undef DFL_KERNEL
  DFL_K_COUNT
};

#define DFL_MT_MAX 48 /* tensors a multi-tensor AdamW or sum-of-squares launch takes (kernels/optim.cuh) */
/* kernel of the one record of an op that a multi-tensor group's leader launches for (arg: the leader) */
#define DFL_LAUNCH_GROUPED (-1)
#define DFL_LAUNCH_MAX 12 /* launches one op makes at most (CONCAT_COLS: one per input, DFL_MAX_IO) */

enum {
  DFL_FILL_NONE = 0,  /* the grid as recorded */
  DFL_FILL_OCC = -1,  /* at most the CTAs the device's SMs hold at once (the kernel's occupancy at its block) */
  /* n > 0: at most n CTAs an SM */
};

typedef struct dfl_launch {
  int kernel;     /* DFL_K_* */
  int64_t grid;   /* CTAs along x: one per unit of work; capped at launch by fill */
  int grid_y;
  int block;      /* threads a CTA */
  int smem;       /* dynamic shared memory, bytes */
  int fill;       /* DFL_FILL_NONE, DFL_FILL_OCC or n > 0 CTAs an SM */
  int vec;        /* 1: chosen for 16-byte aligned tensors (the backend checks its pointers) */
  int arg;        /* a variant the kernel takes as an argument (the block-row copies' access bytes); a
                  ** multi-tensor group's first launch: the ops it covers; DFL_LAUNCH_GROUPED: the leader;
                  ** the wgmma key-major attention backward: its parts (DFL_ARG_AT_INIT: by the SM count) */
} dfl_launch;

/* arg of a launch whose variant follows the device's SM count or a kernel's measured occupancy: a
** build (no device) records this; the backend's lowering at init, with the device in its env, the value */
#define DFL_ARG_AT_INIT (-1)

typedef struct dfl_lower_env {
  const int64_t *offset; /* each tensor's byte offset from the arena's start (256-aligned); NULL or < 0:
                         ** its own allocation (aligned) */
  int smem;              /* dynamic shared memory a block may opt in to, bytes: the target row's (a build,
                         ** dfl_lower_env_arch) or the device's (init); attention needs it */
  int att;               /* the attention kernels the target has (compiler/emit.h dfl_att_family): WGMMA with
                         ** an sm_90a cubin and a tensor-map encoder; CORES: forced (dfl_cuda_opts.att_ref) */
  int nsm;               /* the device's SMs; 0 at build time (what follows them is DFL_ARG_AT_INIT) */
  /* the CTAs of `block` threads with `smem` bytes of dynamic shared memory an SM holds at once of kernel k
  ** (the device's measured occupancy); NULL at build time */
  int (*occupancy)(void *ctx, int k, int block, int smem);
  void *occ_ctx;
} dfl_lower_env;

/* compiler/lower_attn.c: ATTENTION and ATTENTION_BWD (dfl_lower_launch's for them) */
int dfl_lower_attention(const dfl_graph *g, int i, const dfl_lower_env *env, dfl_launch *out);
/* compiler/lower_rows.c: LINEAR_CE, SCATTER_ADD and RMSNORM_BWD (dfl_lower_launch's for them) */
int dfl_lower_rows(const dfl_graph *g, int i, const dfl_lower_env *env, dfl_launch *out);
/* compiler/lower_hybrid.c: GATED_DELTA (dfl_lower_launch's for it), and its kernels' shared memory, value
** tile and variants, which the CUDA backend's kernel load opts in to */
int dfl_lower_gated_delta(const dfl_graph *g, int i, const dfl_lower_env *env, dfl_launch *out);
int dfl_lower_gdn_bv(int dk);
int dfl_lower_gdn_prep_smem(int dk, int dv);
int dfl_lower_gdn_scan_smem(int dk);
int dfl_lower_gdn_prep_kernel(int dk, int dv);
int dfl_lower_gdn_scan_kernel(int dk);
/* The attention family (compiler/emit.h dfl_att_family) of an attention op's launches l[0 .. n) */
int dfl_lower_att_family(const dfl_launch *l, int n);

#endif
