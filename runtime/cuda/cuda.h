/*
** cuda.h: the CUDA backend, mirroring runtime/cpu.h.
**
** dfl_cuda_init places every tensor of a graph at its plan offset inside ONE device arena (one
** cudaMalloc, which also holds the cuBLASLt workspace and the op scratch), compiles the graph's
** kernels with NVRTC (cached cubin) and loads them through the runtime API
** (cudaLibraryLoadData: no driver API symbol is linked, so binaries run on machines without a
** driver until a GPU is actually asked for). dfl_cuda_run captures the ops of a phase mask into
** one CUDA graph the first time and replays it afterwards: no allocation, free or sync inside the
** training loop. Float tensors are stored in their declared dtype (bf16 or f32).
*/
#ifndef DFL_CUDA_H
#define DFL_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include "compiler/graph.h"

struct dfl_plan;

typedef struct dfl_cuda {
  const dfl_graph *g;
  char *arena;            /* device: the one allocation */
  size_t arena_bytes;
  size_t tensor_bytes;    /* tensors occupy [0, tensor_bytes); workspace follows */
  void **ptr;             /* device pointer of each tensor */
  struct dfl_cuda_impl *impl;
} dfl_cuda;

/* 1 if a CUDA device can be used, else 0 (prints nothing: tests use it to SKIP). */
int dfl_cuda_available(void);
/* Bytes per element the CUDA backend stores (its dtype): the plan's element function. */
size_t dfl_cuda_elem_size(const dfl_tensor *t, void *ctx);
/* plan NULL: tensors are packed end to end without overlap. arch NULL: from the device. Persistent
** tensors start zeroed. Runs on the calling thread's current CUDA device (cudaSetDevice before to
** choose one; 0 by default); every later call must find that device current. */
int dfl_cuda_init(dfl_cuda *c, const dfl_graph *g, const struct dfl_plan *plan, const char *arch);
/* The backend's named choices, fixed at init; zero is every default. */
typedef struct dfl_cuda_opts {
  int tf32;    /* compile { tf32 = true }: f32 GEMMs on TF32 tensor cores (docs/language.md#compile) */
  int gemm_tune; /* compile { gemm_tune = true }: each GEMM's algorithm the fastest of cuBLASLt's candidates,
                 ** timed on the device and cached (runtime/cuda/gemm_tune.c); 0: its heuristic's first */
  int att_ref; /* every attention op on the CUDA-core reference kernels: what tests/cuda/bench_attention
               ** checks the tensor-core kernels against (no spec key) */
  int as_cc;   /* 0: the device's kernels. Else pick kernels as a device of this compute capability
               ** (major * 10 + minor: 80, 86, 89, 100, 120) would get (compiler/emit.h dfl_gpu_arch):
               ** its attention family, its FP8 GEMMs, its shared memory per block, while the cubin is
               ** still compiled for the real device (an sm_80 cubin does not load on sm_90). A row
               ** asking for what the device lacks (wgmma off Hopper, FP8 below 8.9, more shared memory)
               ** is refused. How the Ampere/Blackwell paths are checked on a Hopper GPU (docs/gpus.md). */
} dfl_cuda_opts;
/* The as_cc that dfl_cuda_init_opts uses when its opts leave it 0 (and dfl_cuda_init always): for
** drivers whose backend is opened below them (dflc bench through runtime/backend_cuda.c, a test's
** main) to force the non-Hopper paths from a command-line flag. 0 (the default): the device's. */
void dfl_cuda_set_default_as_cc(int cc);
/* One line naming the kernels c picked: the GPU and its compute capability, the cubin's arch, the row
** the choice followed (forced or not), attention family and shared memory, FP8, and how many of the
** graph's attention ops run on each family (wgmma, mma.sync, CUDA cores). */
int dfl_cuda_describe(const dfl_cuda *c, char *buf, size_t cap);
/* The same for the current device before (or without) a dfl_cuda, from the table and the default
** as_cc: what a backend opened now would pick. DFL_ERR (with a message) without a usable device. */
int dfl_cuda_describe_device(char *buf, size_t cap);
/* dfl_cuda_init with choices (o NULL: the defaults). */
int dfl_cuda_init_opts(dfl_cuda *c, const dfl_graph *g, const struct dfl_plan *plan, const char *arch,
                       const dfl_cuda_opts *o);
void dfl_cuda_free(dfl_cuda *c);

/* Enqueue the ops whose phase bit is in phase_mask (runtime/cpu.h DFL_PH_*): the first call for a
** mask captures them into a CUDA graph, later calls replay it. Asynchronous. */
int dfl_cuda_run(dfl_cuda *c, unsigned phase_mask);
/* The kernel nodes (launches) and the other nodes (copies, memsets) of the graph captured for
** phase_mask; -1 when none is captured yet. What `dflc bench` reports as launches per step. */
int dfl_cuda_graph_nodes(const dfl_cuda *c, unsigned phase_mask, int *other);
/* The same ops launched one by one (no graph): debugging, and the check that capture changes nothing. */
int dfl_cuda_run_eager(dfl_cuda *c, unsigned phase_mask);
int dfl_cuda_run_op(dfl_cuda *c, int op_index);
/* As the graphs run it: a multi-tensor group's leader launches the whole group (AdamW, grad norm),
** its other ops launch nothing; any other op as dfl_cuda_run_op. */
int dfl_cuda_run_op_grouped(dfl_cuda *c, int op_index);
int dfl_cuda_sync(dfl_cuda *c);
/* on = 1: every per-step tensor of plan (the one c was initialized with) and every op's scratch
** move to bytes of their own (one more allocation, the sum of their sizes), so that any subset of
** the ops can be launched in order and read what a step wrote: dflc bench --floor. The plan lets
** tensors never live at once share bytes, which such a subset would otherwise read over. Contents
** are not copied (run a step eagerly first); the captured graphs keep the planned addresses and
** must not be replayed until on = 0 restores them and frees the copy. */
int dfl_cuda_unshared(dfl_cuda *c, const struct dfl_plan *plan, int on);
/* The backend's stream (a cudaStream_t): callers order their own async copies and events on it. */
void *dfl_cuda_stream(dfl_cuda *c);

/* Host <-> device copies of one tensor, converting float <-> its dtype (synchronous). */
int dfl_cuda_set_f(dfl_cuda *c, int t, const float *src, int64_t n);
int dfl_cuda_get_f(dfl_cuda *c, int t, float *dst, int64_t n);
int dfl_cuda_set_i32(dfl_cuda *c, int t, const int32_t *src, int64_t n);
int dfl_cuda_get_i32(dfl_cuda *c, int t, int32_t *dst, int64_t n);

/* Round to bf16 (nearest even) as the device does: tests feed the CPU oracle the same values. */
float dfl_bf16_round(float x);

#endif
