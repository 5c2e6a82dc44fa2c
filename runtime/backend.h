/*
** backend.h: what the trainer needs from a device backend, so that one training loop, its
** checkpoints, evaluation and export run on the CPU reference backend and on the CUDA backend.
**
** A backend is opened from a graph and its memory plan. Inside the loop the trainer only
**   - fills INPUT tensors through host staging (dfl_be_input_i32 + dfl_be_commit_inputs: on the
**     GPU a double-buffered pinned buffer and an asynchronous copy),
**   - runs phase masks (asynchronous on the GPU: captured CUDA graphs),
**   - zeroes persistent sums,
**   - snapshots small tensors into a numbered read slot (dfl_be_read_*: on the GPU an asynchronous
**     copy to pinned memory and an event, waited for one step later).
** Nothing there allocates, frees or synchronizes beyond waiting for the previous step's slot.
** Everything else (weights, checkpoints, export) goes through synchronous float copies or a host
** shadow of the persistent tensors (dfl_be_host).
*/
#ifndef DFL_BACKEND_H
#define DFL_BACKEND_H

#include <stdint.h>
#include "compiler/graph.h"
#include "compiler/plan.h"
#include "compiler/spec.h"
#include "runtime/cpu/cpu.h"

typedef enum { DFL_BE_CPU = 0, DFL_BE_CUDA = 1 } dfl_backend_kind;

#define DFL_BE_READ_SLOTS 2
#define DFL_BE_READ_MAX 1024   /* floats per read slot */

typedef struct dfl_backend dfl_backend;

typedef struct dfl_backend_vt {
  int (*set_f)(dfl_backend *b, int t, const float *src, int64_t n);   /* synchronous */
  int (*get_f)(dfl_backend *b, int t, float *dst, int64_t n);         /* synchronous */
  int32_t *(*input_i32)(dfl_backend *b, int t);
  int (*commit_inputs)(dfl_backend *b);
  int (*run)(dfl_backend *b, unsigned phase_mask);
  int (*zero)(dfl_backend *b, int t);
  int (*read_add)(dfl_backend *b, int slot, int t);
  int (*read_end)(dfl_backend *b, int slot);
  int (*read_wait)(dfl_backend *b, int slot, float *dst);   /* the slot's floats, in add order */
  int (*sync)(dfl_backend *b);
  int64_t (*bytes_in_use)(dfl_backend *b);                  /* device bytes in use now; -1: n/a */
  void (*close)(dfl_backend *b);
  /* the random weights of the kinds in `kinds` drawn on the device's side (dfl_be_cuda_init_random);
  ** NULL: the backend has none, they are drawn into host tensors (dfl_weights_init) */
  int (*init_random)(dfl_backend *b, unsigned kinds, uint64_t seed, double std);
} dfl_backend_vt;

struct dfl_backend {
  dfl_backend_kind kind;
  const char *name;            /* "cpu" / "cuda" */
  const dfl_graph *g;
  const dfl_backend_vt *vt;
  dfl_cpu *cpu;                /* the CPU backend's state (not owned), NULL on the GPU */
  void *impl;
  int64_t arena_bytes;         /* bytes the backend allocated for the graph (arena + workspaces) */
  int64_t mem_before;          /* device bytes in use before the backend was opened (-1: n/a) */
  double load_s[5];            /* GPU dfl_be_load_weights, seconds: host shadow, target weights,
                               ** drafter weights, fp32 masters, push to the device */
  /* read slots (both backends keep the bookkeeping here) */
  int read_t[DFL_BE_READ_SLOTS][16];
  int read_n[DFL_BE_READ_SLOTS];
};

/* CPU: wraps an initialized dfl_cpu (not owned). */
int dfl_be_open_cpu(dfl_backend *b, dfl_cpu *c);
/* CUDA: places g at the plan's offsets in one device arena; `inputs` are the INPUT tensors the
** host fills every micro-step (pinned staging is allocated for them here, once). opt: the spec's
** compile section, for the backend's choices (tf32); NULL: the defaults. */
int dfl_be_open_cuda(dfl_backend *b, const dfl_graph *g, const dfl_plan *plan, const int *inputs, int n_inputs,
                     const dfl_compile_opts *opt);
/* The same on CUDA device `device` (cudaSetDevice index): one process may drive several GPUs, one
** backend each; the backend makes its device current in each of its calls. dfl_be_open_cuda is
** device 0. */
int dfl_be_open_cuda_dev(dfl_backend *b, const dfl_graph *g, const dfl_plan *plan, const int *inputs, int n_inputs,
                         const dfl_compile_opts *opt, int device);
/* CUDA: device pointer of the plan workspace `name` (plan.h dfl_plan_ws) inside the backend's
** arena; `plan` is the one the backend was opened with. NULL when the plan has no such workspace
** (bytes, if given, gets its size). The pipeline's hidden-state queue slots live there. */
void *dfl_be_workspace(dfl_backend *b, const dfl_plan *plan, const char *name, int64_t *bytes);
/* 1 when this build has the CUDA backend and a device is usable. */
int dfl_be_cuda_available(void);
/* The current CUDA device's memory in bytes (cudaMemGetInfo's total), 0 without one: the budget of a GPU
** device whose spec gives none (runtime/compile.h, device_memory). */
int64_t dfl_be_cuda_memory(void);
/* The current CUDA device's compute capability (major * 10 + minor), 0 without one. */
int dfl_be_cuda_cc(void);
/* The PCI bus id of a CUDA backend's GPU ("0000:19:00.0", as cudaDeviceGetPCIBusId writes it):
** DFL_OK, or DFL_ERR for a CPU backend or a build without CUDA. */
int dfl_be_pci_bus_id(dfl_backend *b, char *buf, int len);
/* runtime/backend_cuda.c; without the CUDA toolkit these say so and fail. */
/* CUDA builds only. The backend's dfl_cuda (NULL for a CPU backend):
** benchmarks and tests reach the ops and tensors under the interface. */
struct dfl_cuda *dfl_be_cuda_state(dfl_backend *b);
/* Random tensors of the kinds in `kinds`, drawn by host threads straight into the arena: exactly
** the values dfl_weights_init draws on the CPU (rounded to the tensor's dtype). */
int dfl_be_cuda_init_random(dfl_backend *b, unsigned kinds, uint64_t seed, double std);
void dfl_be_close(dfl_backend *b);

/* Plan of g for backend kind: CPU element sizes or the CUDA dtypes, fitted to `budget` bytes
** (0 = none) by recomputation when needed; span_phases: dfl_plan_opts.span_phases. Returns DFL_OK,
** or an error when no valid plan exists. */
int dfl_be_plan(dfl_plan *p, dfl_graph *g, dfl_backend_kind kind, int64_t budget, unsigned span_phases, FILE *log);

static inline int dfl_be_set_f(dfl_backend *b, int t, const float *s, int64_t n) { return b->vt->set_f(b, t, s, n); }
static inline int dfl_be_get_f(dfl_backend *b, int t, float *d, int64_t n) { return b->vt->get_f(b, t, d, n); }
static inline int32_t *dfl_be_input_i32(dfl_backend *b, int t) { return b->vt->input_i32(b, t); }
static inline int dfl_be_commit_inputs(dfl_backend *b) { return b->vt->commit_inputs(b); }
static inline int dfl_be_run(dfl_backend *b, unsigned mask) { return b->vt->run(b, mask); }
static inline int dfl_be_zero(dfl_backend *b, int t) { return t < 0 ? DFL_OK : b->vt->zero(b, t); }
static inline int dfl_be_sync(dfl_backend *b) { return b->vt->sync(b); }
static inline int64_t dfl_be_bytes_in_use(dfl_backend *b) { return b->vt->bytes_in_use(b); }
/* Read slots: read_begin clears the list, read_add snapshots t (enqueued after the work so far),
** read_end closes the slot; read_wait blocks until it is complete and converts to float. */
int dfl_be_read_begin(dfl_backend *b, int slot);
int dfl_be_read_add(dfl_backend *b, int slot, int t);
int dfl_be_read_end(dfl_backend *b, int slot);
int dfl_be_read_wait(dfl_backend *b, int slot, float *dst);

/* Weights: the target's FROZEN ones (safetensors, or seeded random), the drafter's PARAMs (from
** drafter_dir or the fresh HF init), masters = params. Same values on every backend. */
int dfl_be_load_weights(dfl_backend *b, const dfl_spec *s, const char *drafter_dir);

/* A host dfl_cpu view of the tensors whose kind bit is in kind_mask: the backend's own state on
** the CPU; on the GPU a shadow (pull = 1: filled from the device). dfl_be_host_done pushes the
** kinds in push_mask back to the device and frees the shadow. */
dfl_cpu *dfl_be_host(dfl_backend *b, unsigned kind_mask, int pull, dfl_cpu *shadow);
int dfl_be_host_done(dfl_backend *b, dfl_cpu *h, unsigned push_mask);

/* Copy FROZEN (when frozen) and PARAM tensors from src to dst by name (different graphs). */
int dfl_be_copy_weights(dfl_backend *dst, dfl_backend *src, int frozen);

#endif
