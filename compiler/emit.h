/*
** emit.h: CUDA source emission and NVRTC compilation.
**
** The kernels live in kernels/<family>.cuh (embedded into the library at build time). For a graph,
** the emitter writes one .cu holding the families its ops need plus a table of the ops and the
** kernels each launches; NVRTC compiles it to a cubin for one architecture (sm_90 by default).
** Cubins are cached on disk keyed by a hash of source + options + arch, so a second build or run
** of the same graph does not invoke NVRTC. Nothing here needs a GPU or libcuda.
*/
#ifndef DFL_EMIT_H
#define DFL_EMIT_H

#include <stddef.h>
#include <stdint.h>
#include "compiler/graph.h"

typedef enum {
#define DFL_KFAMILY(id, name) DFL_KF_##id,
#include "kernels/families.def"
#undef DFL_KFAMILY
  DFL_KF_COUNT
} dfl_kfamily;
#define DFL_KF_ALL ((1u << DFL_KF_COUNT) - 1u)

const char *dfl_emit_family_name(int family);
const char *dfl_emit_family_source(int family);
/* The family (DFL_KF_*) of kernel k of kernels/kernels.def and its symbol; DFL_EMIT_KERNELS of them. */
int dfl_emit_kernel_family(int k);
const char *dfl_emit_kernel_name(int k);
extern const int DFL_EMIT_KERNELS;
/* Bit set of the kernel families the ops of g need (common and elementwise always). */
unsigned dfl_emit_families(const dfl_graph *g);
/* The .cu text for the families in `families`; g (may be NULL) adds the per-op table as comments.
** *src is malloc'ed and NUL terminated. */
int dfl_emit_source(const dfl_graph *g, unsigned families, char **src, size_t *len);
/* Write the .cu for g to path (beside the plan). */
int dfl_emit_write(const dfl_graph *g, const char *path);

/* Compile src with NVRTC for arch ("sm_90" when NULL). cache_dir NULL: $DFL_CACHE_DIR, else
** $HOME/.cache/dflc; "" disables the cache. On success *cubin is malloc'ed. *cached (may be NULL)
** tells whether it came from the cache. Errors print the NVRTC log with the kernel line numbers. */
int dfl_nvrtc_compile(const char *src, const char *arch, const char *cache_dir, void **cubin, size_t *size,
                      int *cached);
/* Store cubin (compiled from src for arch) in the cache directory dir, under the name
** dfl_nvrtc_compile(src, arch, dir, ...) looks up: how `dflc build` fills DIR/cubin from the
** user's cache without compiling again. */
int dfl_nvrtc_cache_put(const char *src, const char *arch, const char *dir, const void *cubin, size_t size);
/* 64-bit FNV-1a, the cache key hash. */
uint64_t dfl_emit_hash(uint64_t h, const void *data, size_t n);

#endif
