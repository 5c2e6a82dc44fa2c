/*
** pipeline_internal.h: what the runner's files share: the run's and each device's state, and the
** functions one file calls in another: pipeline.c (dfl_pipe_run), pipeline_feed.c (loader and
** target threads), pipeline_replica.c (drafter replica threads), pipeline_report.c (per-step
** reports, checkpoints, final eval), pipeline_setup.c (graphs, plans, GPUs, NCCL, teardown).
*/
#ifndef DFL_PIPELINE_INTERNAL_H
#define DFL_PIPELINE_INTERNAL_H
#include "runtime/pipeline/pipeline.h"

#include <cblas.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compiler/plan.h"
#include "runtime/backend.h"
#include "runtime/io/checkpoint.h"
#include "runtime/pipeline/collective.h"
#include "runtime/io/weights.h"
#include "runtime/pipeline/launch.h"
#include "runtime/pipeline/queue.h"
#include "runtime/pipeline/topo.h"
#include "runtime/train/train_export.h"
#ifdef DFL_HAVE_CUDA
#include "runtime/pipeline/pipeline_gpu.h"
#endif

enum { F_IDS = 0, F_MASK, F_ANCHORS, F_KEEP, F_FEATURES };   /* slot fields */
enum { R_LOADER = 0, R_TARGET, R_DRAFTER };

typedef struct loader_snap { int64_t epoch, cursor; dfl_rng rng; double tokens; } loader_snap;

typedef struct pipe_s pipe_s;

typedef struct dev_s {
  pipe_s *p;
  int role, idx, diag_id;
  int coloc;                 /* drafter replica that runs its own target (reads the prefetch ring) */
  const dfl_device *spec_dev;
  char name[48];
  /* target-only devices */
  dfl_graph tgt;
  int t_ids, t_features;
  /* drafters (with the target when replicated) */
  dfl_train_graph tg;
  int den_acc;
  float **segs;
  size_t *seg_len;
  int n_segs;
  /* either */
  dfl_graph *g;
  dfl_plan plan;
  int planned;
  dfl_cpu cpu;
  /* GPU devices: a CUDA backend of their own (arena, stream, captured graphs) */
  int gpu;
  int phys;                  /* its CUDA device (cudaSetDevice index) */
  int64_t qslot_bytes;       /* split GPU target: its share of the queue's device slots, in its plan */
  dfl_backend be;
  int be_open;
  float *tok_dev;            /* the step's token count as an all-reduce segment (NCCL) */
  float **dsegs;             /* device pointers of the all-reduce segments (NCCL) */
  int ready;
  double fault_ms;
  int64_t fail_at;           /* DFL_FAULT "ROLEi=fail@K": error out at this device's K-th micro-batch; -1: never */
  int32_t *stage;            /* target: mask, anchors, keep of the micro-batch in flight */
  struct dfl_gsend *gs;      /* target whose drafters are other processes: send slots (pipeline_gpu.h) */
  pthread_t th;
  int rc;
} dev_s;

struct pipe_s {
  dfl_spec s;                /* per-device micro-batch: s.batch = global batch / N */
  int G, b, S, NA, A, M, N, replicated;   /* replicated: every replica colocated, no queue */
  dfl_topo tp;               /* micro-batch assignment (topo.h): mixed topologies too */
  int64_t steps;             /* the schedule's optimizer steps */
  int64_t step0, end;        /* this run takes steps step0+1 .. end (step0 > 0: resumed; end < steps: --stop-at) */
  double t_run;              /* when this run's first step began (progress lines: elapsed, eta) */
  int64_t total;             /* this run's micro-batches: (end - step0) * A * N, numbered from 0 */
  dfl_pipe_opts o;
  FILE *log, *mjsonl;
  double win[2 + DFL_METRIC_COUNT + 2 * 64], win_tok, win_t; /* sums since the last progress line */
  char out_dir[DFL_PATH_MAX];
  dfl_dataset train;
  int *order;
  loader_snap ld;            /* loader's live position */
  loader_snap *snaps;        /* position after the last micro-batch of step step0 + k, k = 0..end - step0 */
  dfl_queue pre, hq;
  int has_hq;
  int gpu;                   /* the devices are GPUs (each a CUDA backend) */
  struct dfl_gq *gq;         /* device slots of the hidden-state queue (GPU split) */
  int procs, rank;           /* one process per GPU (NCCL): world size, this process's replica */
  int nccl_local;            /* several GPU replicas in this process: one communicator each (ncclCommInitAll) */
  int xproc;                 /* target and drafter devices in different processes: one device per process,
                             ** features by NCCL send/recv (communicator 0: every rank; 1: the replicas) */
  dev_s *rep0;               /* this process's first drafter replica (NULL: a target-only process) */
  int writer;                /* this process writes metrics.jsonl, checkpoints, the export (has replica 0) */
  int gpu_map[64], n_map;    /* DFL_GPU_MAP: CUDA device of logical gpu0, gpu1, ... */
  int n_cuda;                /* CUDA devices this process sees */
  unsigned char nccl_id[DFL_NCCL_ID_BYTES];
  double nccl_timeout;       /* seconds an NCCL wait may take before the rank gives up (DFL_NCCL_TIMEOUT_S) */
  int32_t *skip;             /* loader scratch for the other processes' slices */
  dfl_coll coll;
  dfl_mon diag;
  dev_s *dev;                /* targets first (split), then drafters */
  int n_dev;
  dev_s loader;
  pthread_mutex_t fail_mu;
  int failed;
  dfl_pipe_result *res;
  double fault_loader;
};

/* a replica's model: params, masters, moments (what the export and the replicas' comparison read) */
#define MODEL_KINDS (DFL_KIND_BIT(DFL_T_PARAM) | DFL_KIND_BIT(DFL_T_STATE))

/* pipeline_base.c: called by every part below, calls none of them */
size_t pipe_cpu_elem(const dfl_tensor *t, void *ctx);
double pipe_now_s(void);
void pipe_fail(pipe_s *p, const char *who, int rc);
void pipe_sleep_ms(double ms);
dfl_slot *pipe_wait_slot(pipe_s *p, dev_s *d, dfl_queue *q, int64_t k, int write);
int pipe_thread_start(dev_s *d);
dfl_cpu *pipe_host_view(dev_s *d, unsigned kinds, dfl_cpu *shadow);
void pipe_host_view_done(dev_s *d, dfl_cpu *h);
int pipe_nccl_local_of(const pipe_s *p, const dev_s *d);
int pipe_nccl_wait_on(pipe_s *p, dev_s *d, void *stream, const char *what);
int pipe_nccl_wait(pipe_s *p, dev_s *d, const char *what);
/* pipeline_feed.c */
double pipe_fault_for(const char *f, const char *role, int idx);
int64_t pipe_fault_fail_at(const char *f, const char *role, int idx);
int pipe_injected_failure(const dev_s *d, int64_t n);
void pipe_batch_from_slot(const pipe_s *p, const dfl_slot *in, int32_t *ids, int32_t *mask, int32_t *anc,
                          int32_t *keep);
void *pipe_loader_main(void *arg);
void *pipe_target_main(void *arg);
/* pipeline_replica.c */
int pipe_resume_replica(dev_s *d, const char *ckpt);
void *pipe_drafter_main(void *arg);
/* pipeline_report.c */
int pipe_final_eval(pipe_s *p, const char *dir, int phys);
int pipe_checkpoint(pipe_s *p, dev_s *d, int64_t step);
int pipe_step_report(pipe_s *p, dev_s *d, int64_t step, const float *sums, int nm, float tokens, double t0,
                     const float *opt);
/* pipeline_setup.c */
int64_t pipe_dev_bytes(const dev_s *d);
int pipe_setup_target(pipe_s *p, dev_s *d);
int pipe_setup_drafter(pipe_s *p, dev_s *d);
int pipe_replicas_identical(pipe_s *p);
void pipe_spec_name(const char *file, char *out, size_t n);
int pipe_gpu_topology(pipe_s *p, int n_rep);
int pipe_gpu_device(pipe_s *p, const dfl_device *dv, int *dev);
int pipe_nccl_setup(pipe_s *p);
void pipe_teardown(pipe_s *p);

#endif
