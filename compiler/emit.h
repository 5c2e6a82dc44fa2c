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
/* The kernel family (DFL_KF_*) of an op of compiler/ops.def; -1 for the cuBLASLt ones (MATMUL, MATMUL_F8). */
int dfl_emit_op_family(dfl_opcode code);
/* Bit set of the kernel families the ops of g need (common and elementwise always). */
unsigned dfl_emit_families(const dfl_graph *g);
/* The .cu text for the families in `families`; g (may be NULL) adds the per-op table as comments.
** *src is malloc'ed and NUL terminated. */
int dfl_emit_source(const dfl_graph *g, unsigned families, char **src, size_t *len);
/* Write the .cu for g to path (beside the plan). */
int dfl_emit_write(const dfl_graph *g, const char *path);

/* The user's cache directory: $DFL_CACHE_DIR, else $HOME/.cache/dflc, else "" (none). The cubins
** live there, and the GEMM algorithms runtime/cuda/gemm_tune.c picks. */
void dfl_cache_dir(char *dir, size_t n);
/* Compile src with NVRTC for arch ("sm_90" when NULL). cache_dir NULL: $DFL_CACHE_DIR, else
** $HOME/.cache/dflc; "" disables the cache. On success *cubin is malloc'ed. *cached (may be NULL)
** tells whether it came from the cache. Errors print the NVRTC log with the kernel line numbers. An
** arch dfl_emit_arch_ok refuses is an error naming the accepted ones, before any compile. */
int dfl_nvrtc_compile(const char *src, const char *arch, const char *cache_dir, void **cubin, size_t *size,
                      int *cached);
/* Store cubin (compiled from src for arch) in the cache directory dir, under the name
** dfl_nvrtc_compile(src, arch, dir, ...) looks up: how `dflc build` fills DIR/cubin from the
** user's cache without compiling again. */
int dfl_nvrtc_cache_put(const char *src, const char *arch, const char *dir, const void *cubin, size_t size);
/* --- The GPU architectures dflc compiles for (docs/gpus.md) ---
** One row per architecture: what NVRTC compiles for it and which kernels the runtime picks there. The
** CUDA backend reads its device's row (dfl_emit_gpu_for_cc); `dflc build --arch` and dfl_nvrtc_compile
** accept what dfl_emit_arch_ok accepts. Pure data: no GPU, no NVRTC call (but for dfl_emit_arch_ok's
** plain sm_XY, which asks this NVRTC what it can compile). */
typedef enum {
  DFL_ATT_CORES, /* CUDA-core kernels (dfl_attn_fwd, dfl_attn_bwd, dfl_attn_bwd_kv): any head_dim */
  DFL_ATT_MMA,   /* mma.sync bf16 kernels (dfl_attn_*_tc64/tc128), where their shared memory fits */
  DFL_ATT_WGMMA  /* Hopper's wgmma + TMA kernels (dfl_attn_*_wg*), beside mma.sync for the rest */
} dfl_att_family;
typedef struct dfl_gpu_arch {
  int cc;          /* compute capability, major * 10 + minor: 80 is 8.0 */
  char arch[16];   /* NVRTC --gpu-architecture for a device of this row: sm_80 ... sm_90a, sm_100a */
  const char *gpus;/* the family and a few of its GPUs, for messages */
  int att;         /* the fastest attention kernels it has: dfl_att_family */
  int fp8;         /* e4m3 conversions in hardware and cuBLASLt FP8 GEMMs (target quantize = fp8): cc >= 8.9 */
  int smem;        /* shared memory one block may opt in to, bytes: which mma.sync attention kernels fit */
} dfl_gpu_arch;
/* The table's rows (i < dfl_emit_gpu_count()), oldest first. */
int dfl_emit_gpu_count(void);
const dfl_gpu_arch *dfl_emit_gpu_at(int i);
/* The row for a device of compute capability cc (major * 10 + minor) into *out: the table's own row,
** or for a cc between or past the rows the newest row at or below it (its kernels), compiled for this
** device's own plain sm_XY (a cubin for sm_100a runs on 10.0 only). DFL_ERR with a message naming
** the GPU (name, may be NULL) when cc is below 8.0 or this NVRTC cannot compile for it. */
int dfl_emit_gpu_for_cc(int cc, const char *name, dfl_gpu_arch *out);
/* The row kernels are picked by on a device of row dev whose blocks may opt in to smem bytes of shared
** memory, forced to compute capability as_cc (0 or dev's own: dev itself): the forced row's attention
** family, FP8 and shared memory, still compiled for dev's arch (an sm_80 cubin does not load on sm_90).
** DFL_ERR with a message naming the GPU (name) when the forced row asks for what the device lacks:
** wgmma off Hopper, FP8 below 8.9, more shared memory. *forced: whether *out is another row. */
int dfl_emit_gpu_force(const dfl_gpu_arch *dev, int smem, int as_cc, const char *name, dfl_gpu_arch *out,
                       int *forced);
/* 1: arch is a row's (sm_80, sm_86, sm_89, sm_90a, sm_100a, sm_120a); 2: another architecture
** NVRTC compiles the kernels for (sm_90: Hopper without wgmma; sm_87, sm_103, sm_121 ...: plain
** sm_XY >= sm_80 that this NVRTC offers, what dfl_emit_gpu_for_cc gives devices between the rows);
** 0: refused (below sm_80, or unknown). */
int dfl_emit_arch_ok(const char *arch);
/* "sm_80, sm_86, sm_89, sm_90a, sm_100a, sm_120a": the rows' architectures, for messages. */
const char *dfl_emit_arch_list(void);

/* 64-bit FNV-1a, the cache key hash. */
uint64_t dfl_emit_hash(uint64_t h, const void *data, size_t n);

#endif
