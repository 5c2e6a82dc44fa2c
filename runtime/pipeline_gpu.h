/*
** pipeline_gpu.h (private to runtime/pipeline.c): the CUDA side of the pipeline runner, kept out of
** pipeline.c so that file needs no CUDA header. Built only with the CUDA toolkit (DFL_HAVE_CUDA).
**
** Device slot ring (the hidden-state queue's payload on the GPU): the host ring (queue.h) keeps
** the sequence numbers and the small host fields (ids, mask, anchors, keep); the features live in
** `depth` device slots, and the data dependencies are CUDA events, never host waits:
**   put (producer, after acquire_write(k) returned slot i):
**       cudaStreamWaitEvent(prod, done[i]); memcpyAsync(slot[i] <- features, prod);
**       cudaEventRecord(ready[i], prod)                      ... then commit publishes slot i
**   get (consumer, after acquire_read(k) returned slot i):
**       cudaStreamWaitEvent(cons, ready[i]); memcpyAsync(features <- slot[i], cons);
**       cudaEventRecord(done[i], cons)                       ... then release frees slot i
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
** arena: the plan's "queue.slots" workspace); not freed by dfl_gq_free. An event must live on the
** device of the stream that records it: ready[i] on slot i's producer's device prod_dev[i],
** done[i] on the consumer's cons_dev (prod_dev NULL: the current device for all). */
int dfl_gq_init_at(dfl_gq **q, int depth, size_t bytes, void *const *slot, const int *prod_dev, int cons_dev);

/* Number of CUDA devices this process sees (0 on error). */
int dfl_gpu_count(void);
/* Make `device` current for the calling thread (each device thread, before its first CUDA call). */
int dfl_gpu_set_device(int device);
/* Let `from`'s kernels and copies reach `to`'s memory directly (NVLink / PCIe peer access) when
** the pair supports it; otherwise copies between them are staged by the driver. */
void dfl_gpu_peer(int from, int to);
void dfl_gq_free(dfl_gq *q);
int dfl_gq_put(dfl_gq *q, int slot, void *stream, const void *src);
int dfl_gq_get(dfl_gq *q, int slot, void *stream, void *dst);

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
