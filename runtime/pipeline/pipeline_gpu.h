/*
** pipeline_gpu.h (private to runtime/pipeline.c): the CUDA side of the pipeline runner, kept out of
** pipeline.c so that file needs no CUDA header. Built only with the CUDA toolkit (DFL_HAVE_CUDA).
**
** Device slot ring (the hidden-state queue's payload on the GPU): the host ring (queue.h) keeps
** the sequence numbers and the small host fields (ids, mask, anchors, keep); the features live in
** `depth` device slots, and the data dependencies are CUDA events, never host waits:
**   put (producer m, after acquire_write(h) returned slot i; c = consumer of h - depth):
**       cudaStreamWaitEvent(prod, done[i][c]); memcpyAsync(slot[i] <- features, prod);
**       cudaEventRecord(ready[i][m], prod)                   ... then commit publishes slot i
**   get (consumer c, after acquire_read(h) returned slot i; m = producer of h):
**       cudaStreamWaitEvent(cons, ready[i][m]); memcpyAsync(features <- slot[i], cons);
**       cudaEventRecord(done[i][c], cons)                    ... then release frees slot i
** The host ring orders the records before the waits (a record happens before the commit/release
** that lets the other side reach its wait), so each wait sees the event of the right occupant.
*/
#ifndef DFL_PIPELINE_GPU_H
#define DFL_PIPELINE_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/backend.h"

typedef struct dfl_gq dfl_gq;

int dfl_gq_init(dfl_gq **q, int depth, size_t bytes);
/* The same on slots the caller placed (slot[i]: `bytes` of device memory each, in a backend's
** arena: the plan's "queue.slots" workspace); not freed by dfl_gq_free. n_prod producers on
** devices prod_dev[], n_cons consumers on cons_dev[] (NULL: the current device): each slot gets an
** event per producer and per consumer, since an event lives on the device of the stream that
** records it and a slot's occupants come from / go to different devices. */
int dfl_gq_init_at(dfl_gq **q, int depth, size_t bytes, void *const *slot, int n_prod, const int *prod_dev,
                   int n_cons, const int *cons_dev);

/* A target whose drafters are other processes (NCCL send/recv): `depth` device slots on its GPU and
** a send stream. The credit protocol of the host queue becomes stream order: slot i is
** overwritten only after its previous send completed (event sent[i]), and an NCCL send completes
** only once the receiving replica has posted the matching receive, i.e. has taken that item; so
** a target runs at most `depth` items ahead of its consumers, and never waits on the host.
**   stage(i): compute stream waits sent[i], copies the features into slot i, records ready[i];
**             the send stream waits ready[i]      ... then the caller's ncclSend on the send stream
**   sent(i):  records sent[i] on the send stream after that send. */
typedef struct dfl_gsend dfl_gsend;
int dfl_gsend_init(dfl_gsend **q, int depth, size_t bytes, int dev);
void dfl_gsend_free(dfl_gsend *q);
void *dfl_gsend_stream(dfl_gsend *q);
int dfl_gsend_stage(dfl_gsend *q, int slot, void *compute, const void *src, void **slot_ptr);
int dfl_gsend_sent(dfl_gsend *q, int slot);

/* Number of CUDA devices this process sees (0 on error). */
int dfl_gpu_count(void);
/* Make `device` current for the calling thread (each device thread, before its first CUDA call). */
int dfl_gpu_set_device(int device);
/* Let `from`'s kernels and copies reach `to`'s memory directly (NVLink / PCIe peer access) when
** the pair supports it; otherwise copies between them are staged by the driver. */
void dfl_gpu_peer(int from, int to);
void dfl_gq_free(dfl_gq *q);
/* Producer `prod` puts an occupant into slot; prev_cons: the consumer of the slot's previous
** occupant (-1: none). Consumer `cons` gets the occupant producer `prod` put there. */
int dfl_gq_put(dfl_gq *q, int slot, int prod, int prev_cons, void *stream, const void *src);
int dfl_gq_get(dfl_gq *q, int slot, int prod, int cons, void *stream, void *dst);

/* Device pointer and stream of a CUDA backend's tensor. */
void *dfl_gpu_ptr(dfl_backend *b, int t);
void *dfl_gpu_stream(dfl_backend *b);
/* Device float buffer of n values (zeroed) / free. */
float *dfl_gpu_floats(int64_t n);
void dfl_gpu_free(void *p);
/* Stream-ordered copies of host floats (pageable: the source may be reused on return). */
int dfl_gpu_h2d(float *dst, const float *src, int64_t n, void *stream);
/* Synchronous read of n floats after the work on the stream. */
int dfl_gpu_d2h_sync(float *dst, const float *src, int64_t n, void *stream);
int dfl_gpu_sync(void *stream);
/* Wait for the work enqueued so far on the stream without blocking in CUDA: polls an event, and
** `check` (if any; non-zero = give up, its message in err) every millisecond, until done or
** timeout_s. DFL_OK, or DFL_ERR with the reason in err (timeout, check, CUDA error). Used after an
** NCCL all-reduce, whose kernel would otherwise wait forever for a peer rank that failed. */
int dfl_gpu_poll(void *stream, int (*check)(void *ctx, char *err, size_t errlen), void *ctx, double timeout_s,
                 char *err, size_t errlen);
/* Device bytes in use now (cudaMemGetInfo): the diagnostics' mem_fn. */
int64_t dfl_gpu_mem_used(void *ctx, int dev);

#endif
