/*
** lower_internal.h: what the lowering's files share (lower_launch.c, lower_attn.c, lower_rows.c,
** lower_hybrid.c): a launch record and the 16-byte alignment test on the plan's offsets.
*/
#ifndef DFL_LOWER_INTERNAL_H
#define DFL_LOWER_INTERNAL_H

#include "compiler/lower_family.h"

/* tensor t 16-byte aligned: the arena's start is (256 bytes), so its offset says; no offsets (a build
** without a plan) or a tensor of its own allocation: aligned; t < 0 (an absent input): aligned */
static inline int dfl_lower_al16(const dfl_lower_env *env, int t) {
  const int64_t *off = env ? env->offset : NULL;
  return !off || t < 0 || off[t] < 0 || off[t] % 16 == 0;
}
/* a launch of kernel k: grid x gy CTAs (at least 1) of block threads, smem bytes, fill, 16-byte assumption */
static inline dfl_launch dfl_lower_rec(int k, int64_t grid, int gy, int block, int smem, int fill, int vec) {
  dfl_launch l = {k, grid < 1 ? 1 : grid, gy, block, smem, fill, vec, 0};
  return l;
}

#endif
