/*
** collective.h: all-reduce (sum) across the data-parallel drafter replicas.
**
** Two implementations behind one interface:
**   CPU:  the replicas are threads of this process (logical devices cpu0..cpuN-1). Every rank
**         publishes its buffers, then the index space is cut into one chunk per rank and each
**         rank sums its chunk over ranks 0..N-1 in that fixed order, and all ranks copy the sums
**         back. The result is the same bits on every rank and on every run, whatever the thread
**         timing (and is independent of which rank summed which chunk).
**   NCCL: libnccl.so.2 is opened with dlopen at run time (nothing links NCCL at build time);
**         one communicator per GPU, ncclAllReduce(ncclSum) over fp32 buffers on the device's
**         stream. The unique id comes from dfl_launch (runtime/launch.h) across processes, or
**         ncclCommInitAll in-process. Run on H200s only (docs/pipeline.md, "Evidence").
** Every call with the same (comm, rank) must pass the same list shape on every rank.
** A failed or aborted collective returns an error on every rank: never a hang.
*/
#ifndef DFL_COLLECTIVE_H
#define DFL_COLLECTIVE_H

#include <pthread.h>
#include <stddef.h>

/* A barrier that can be aborted (a thread that fails wakes the others instead of leaving them
** stuck). */
typedef struct dfl_barrier {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int n, waiting;
  unsigned long gen;
  int aborted;
} dfl_barrier;
int dfl_barrier_init(dfl_barrier *b, int n);
void dfl_barrier_free(dfl_barrier *b);
int dfl_barrier_wait(dfl_barrier *b);   /* DFL_OK, or DFL_ERR once aborted */
void dfl_barrier_abort(dfl_barrier *b);

#define DFL_COLL_MAX_SEGS 4096

typedef enum { DFL_COLL_CPU = 0, DFL_COLL_NCCL = 1 } dfl_coll_kind;

typedef struct dfl_coll {
  dfl_coll_kind kind;
  int world;
  /* CPU */
  dfl_barrier bar;
  float **seg_ptr;        /* [world][n_segs] published by each rank */
  size_t *seg_len;        /* [n_segs], from rank 0 (checked on the others) */
  int *n_segs;            /* per rank */
  double *scratch;        /* chunk sums (fp32 values summed in double, rounded once) */
  size_t scratch_n;
  int mismatch;
  /* NCCL */
  void *nccl;             /* dlopen handle */
  void **comms;           /* ncclComm_t per local rank */
  void **streams;         /* cudaStream_t per local rank (owned by the backend) */
  int n_local;
} dfl_coll;

/* CPU collective among `world` threads. */
int dfl_coll_init_cpu(dfl_coll *c, int world);
void dfl_coll_free(dfl_coll *c);

/* Sum n_segs float buffers element-wise across all ranks; every rank ends with the sums. Called
** by each rank's thread with its own buffers (same lengths on every rank). Returns DFL_OK, or
** DFL_ERR on any rank when a rank aborted or the lengths differ. */
int dfl_coll_allreduce(dfl_coll *c, int rank, float **bufs, const size_t *lens, int n_segs);

/* Wake every rank waiting in the collective with an error (called by a failing thread). */
void dfl_coll_abort(dfl_coll *c);

/* --- NCCL (dlopen) --- */
#define DFL_NCCL_ID_BYTES 128
/* Load libnccl.so.2 (or $DFL_NCCL_LIB). DFL_EIO with a message in err when it is not there. */
int dfl_nccl_load(dfl_coll *c, char *err, size_t errlen);
/* Rank 0 of a multi-process job: a fresh unique id to hand to dfl_launch_bcast. */
int dfl_nccl_unique_id(dfl_coll *c, unsigned char id[DFL_NCCL_ID_BYTES], char *err, size_t errlen);
/* One communicator per local GPU: local GPU i is global rank first_rank + i of world. The
** caller has made each GPU current before (cudaSetDevice) as ncclCommInitRank requires: the
** pipeline runner does this from each device thread, so this call is per thread: */
int dfl_nccl_init_rank(dfl_coll *c, int local, int n_local, const unsigned char id[DFL_NCCL_ID_BYTES],
                       int world, int rank, void *stream, char *err, size_t errlen);
/* Several replicas' GPUs in this process (one thread each): ncclCommInitAll over CUDA devices
** devs[0..n-1] (distinct), local i = rank i, its collectives on streams[i]. Called once, from any
** thread, before the device threads start. */
int dfl_nccl_init_all(dfl_coll *c, int n, const int *devs, void *const *streams, char *err, size_t errlen);
/* Sum fp32 device buffers on the rank's stream (grouped: one NCCL launch for all segments). */
int dfl_nccl_allreduce(dfl_coll *c, int local, float **dbufs, const size_t *lens, int n_segs, char *err,
                       size_t errlen);

/* ncclCommSplit of communicator `from` into `to` (color < 0: this rank joins none; its `to` stays
** NULL); collective over `from`'s ranks. The drafter replicas' all-reduce communicator when target
** and drafter devices are different processes. NCCL >= 2.18. */
int dfl_nccl_split(dfl_coll *c, int from, int to, int color, int key, void *stream, char *err, size_t errlen);
/* ncclSend (send = 1) / ncclRecv of `bytes` bytes with peer rank `peer` of communicator `local`, on
** `stream` (NULL: the communicator's). Stream-ordered: the send's kernel completes once the peer's
** matching receive has taken the bytes. */
int dfl_nccl_p2p(dfl_coll *c, int local, int send, void *buf, size_t bytes, int peer, void *stream, char *err,
                 size_t errlen);

/* The communicator's asynchronous error (ncclCommGetAsyncError): DFL_OK while healthy or still in
** progress, DFL_ERR with the message in err once NCCL reports a failure (a remote peer's, too). */
int dfl_nccl_async_error(dfl_coll *c, int local, char *err, size_t errlen);
/* ncclCommAbort on every communicator of this process: the rank's pending NCCL kernels return
** instead of waiting forever for a peer that failed; dfl_coll_free then skips the destroy. Called
** by the thread that drives the communicator, on its error path (a failure of its own, or a wait
** that timed out: the pipeline's DFL_NCCL_TIMEOUT_S). */
void dfl_nccl_abort(dfl_coll *c);

#endif
