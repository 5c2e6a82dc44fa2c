/*
** pipeline_gpu.c: the CUDA side of the pipeline runner (see pipeline_gpu.h): the device slot ring
** of the hidden-state queue, ordered by events, and a few stream-ordered helpers.
*/
#include "runtime/pipeline/pipeline_gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <cuda_runtime.h>

#include "runtime/cuda/cuda.h"


#define CK(call)                                                                                     \
  do {                                                                                               \
    cudaError_t e_ = (call);                                                                         \
    if (e_ != cudaSuccess) {                                                                         \
      fprintf(stderr, "dflc: pipeline: %s failed: %s\n", #call, cudaGetErrorString(e_));            \
      return DFL_ERR;                                                                                \
    }                                                                                                \
  } while (0)

struct dfl_gq {
  int depth, n_prod, n_cons;
  size_t bytes;
  void **slot;               /* device memory, one per ring slot */
  int owned;                 /* slots cudaMalloc'ed here (else in a backend's arena) */
  /* producer m's copy in of slot i: ready[i * n_prod + m] (on m's device); consumer c's copy out:
  ** done[i * n_cons + c] (on c's device). An event must be recorded by a stream of its own device,
  ** and a slot's occupants come from different producers and go to different consumers. */
  cudaEvent_t *ready, *done;
};

int dfl_gq_init(dfl_gq **out, int depth, size_t bytes) {
  return dfl_gq_init_at(out, depth, bytes, NULL, 1, NULL, 1, NULL);
}

int dfl_gq_init_at(dfl_gq **out, int depth, size_t bytes, void *const *at, int n_prod, const int *prod_dev,
                   int n_cons, const int *cons_dev) {
  dfl_gq *q = calloc(1, sizeof *q);
  if (!q) return DFL_ENOMEM;
  *out = q;
  q->depth = depth;
  q->n_prod = n_prod;
  q->n_cons = n_cons;
  q->bytes = bytes;
  q->slot = calloc((size_t)depth, sizeof *q->slot);
  q->ready = calloc((size_t)depth * (size_t)n_prod, sizeof *q->ready);
  q->done = calloc((size_t)depth * (size_t)n_cons, sizeof *q->done);
  if (!q->slot || !q->ready || !q->done) return DFL_ENOMEM;
  q->owned = at == NULL;
  for (int i = 0; i < depth; i++) {
    if (at) q->slot[i] = at[i];
    else CK(cudaMalloc(&q->slot[i], bytes));
    /* never recorded yet: a wait on them is a no-op, which is right for the first occupant */
    for (int m = 0; m < n_prod; m++) {
      if (prod_dev) CK(cudaSetDevice(prod_dev[m]));
      CK(cudaEventCreateWithFlags(&q->ready[i * n_prod + m], cudaEventDisableTiming));
    }
    for (int c = 0; c < n_cons; c++) {
      if (cons_dev) CK(cudaSetDevice(cons_dev[c]));
      CK(cudaEventCreateWithFlags(&q->done[i * n_cons + c], cudaEventDisableTiming));
    }
  }
  return DFL_OK;
}

void dfl_gq_free(dfl_gq *q) {
  if (!q) return;
  cudaDeviceSynchronize();
  for (int i = 0; i < q->depth; i++) {
    if (q->owned && q->slot && q->slot[i]) cudaFree(q->slot[i]);
    for (int m = 0; q->ready && m < q->n_prod; m++)
      if (q->ready[i * q->n_prod + m]) cudaEventDestroy(q->ready[i * q->n_prod + m]);
    for (int c = 0; q->done && c < q->n_cons; c++)
      if (q->done[i * q->n_cons + c]) cudaEventDestroy(q->done[i * q->n_cons + c]);
  }
  free(q->slot);
  free(q->ready);
  free(q->done);
  free(q);
}

int dfl_gq_put(dfl_gq *q, int i, int prod, int prev_cons, void *stream, const void *src) {
  cudaStream_t s = (cudaStream_t)stream;
  if (prev_cons >= 0)   /* the previous occupant has been copied out by its consumer */
    CK(cudaStreamWaitEvent(s, q->done[i * q->n_cons + prev_cons], 0));
  CK(cudaMemcpyAsync(q->slot[i], src, q->bytes, cudaMemcpyDeviceToDevice, s));
  CK(cudaEventRecord(q->ready[i * q->n_prod + prod], s));
  return DFL_OK;
}

int dfl_gq_get(dfl_gq *q, int i, int prod, int cons, void *stream, void *dst) {
  cudaStream_t s = (cudaStream_t)stream;
  CK(cudaStreamWaitEvent(s, q->ready[i * q->n_prod + prod], 0));  /* the producer's copy in has landed */
  CK(cudaMemcpyAsync(dst, q->slot[i], q->bytes, cudaMemcpyDeviceToDevice, s));
  CK(cudaEventRecord(q->done[i * q->n_cons + cons], s));
  return DFL_OK;
}

struct dfl_gsend {
  int depth;
  size_t bytes;
  void **slot;
  cudaStream_t send;         /* the NCCL sends, in the queue's order */
  cudaEvent_t *ready, *sent; /* per slot: copy in on the compute stream / its send complete */
};

int dfl_gsend_init(dfl_gsend **out, int depth, size_t bytes, int dev) {
  dfl_gsend *q = calloc(1, sizeof *q);
  if (!q) return DFL_ENOMEM;
  *out = q;
  q->depth = depth;
  q->bytes = bytes;
  q->slot = calloc((size_t)depth, sizeof *q->slot);
  q->ready = calloc((size_t)depth, sizeof *q->ready);
  q->sent = calloc((size_t)depth, sizeof *q->sent);
  if (!q->slot || !q->ready || !q->sent) return DFL_ENOMEM;
  CK(cudaSetDevice(dev));
  CK(cudaStreamCreateWithFlags(&q->send, cudaStreamNonBlocking));
  for (int i = 0; i < depth; i++) {
    CK(cudaMalloc(&q->slot[i], bytes));
    CK(cudaEventCreateWithFlags(&q->ready[i], cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&q->sent[i], cudaEventDisableTiming));
  }
  return DFL_OK;
}

void dfl_gsend_free(dfl_gsend *q) {
  if (!q) return;
  for (int i = 0; i < q->depth; i++) {
    if (q->slot && q->slot[i]) cudaFree(q->slot[i]);
    if (q->ready && q->ready[i]) cudaEventDestroy(q->ready[i]);
    if (q->sent && q->sent[i]) cudaEventDestroy(q->sent[i]);
  }
  if (q->send) cudaStreamDestroy(q->send);
  free(q->slot);
  free(q->ready);
  free(q->sent);
  free(q);
}

void *dfl_gsend_stream(dfl_gsend *q) { return q->send; }

int dfl_gsend_stage(dfl_gsend *q, int i, void *compute, const void *src, void **slot) {
  cudaStream_t s = (cudaStream_t)compute;
  CK(cudaStreamWaitEvent(s, q->sent[i], 0));      /* the slot's previous occupant has been sent */
  CK(cudaMemcpyAsync(q->slot[i], src, q->bytes, cudaMemcpyDeviceToDevice, s));
  CK(cudaEventRecord(q->ready[i], s));
  CK(cudaStreamWaitEvent(q->send, q->ready[i], 0));
  *slot = q->slot[i];
  return DFL_OK;
}

int dfl_gsend_sent(dfl_gsend *q, int i) {
  CK(cudaEventRecord(q->sent[i], q->send));
  return DFL_OK;
}

void *dfl_gpu_ptr(dfl_backend *b, int t) {
  dfl_cuda *c = dfl_be_cuda_state(b);
  return c && t >= 0 ? c->ptr[t] : NULL;
}

void *dfl_gpu_stream(dfl_backend *b) {
  dfl_cuda *c = dfl_be_cuda_state(b);
  return c ? dfl_cuda_stream(c) : NULL;
}

float *dfl_gpu_floats(int64_t n) {
  void *p = NULL;
  if (cudaMalloc(&p, (size_t)n * sizeof(float)) != cudaSuccess) return NULL;
  if (cudaMemset(p, 0, (size_t)n * sizeof(float)) != cudaSuccess) {
    cudaFree(p);
    return NULL;
  }
  return p;
}

void dfl_gpu_free(void *p) {
  if (p) cudaFree(p);
}

int dfl_gpu_h2d(float *dst, const float *src, int64_t n, void *stream) {
  CK(cudaMemcpyAsync(dst, src, (size_t)n * sizeof(float), cudaMemcpyHostToDevice, (cudaStream_t)stream));
  /* pageable source: the call returns once the bytes are staged, so src may be reused */
  return DFL_OK;
}

int dfl_gpu_d2h_sync(float *dst, const float *src, int64_t n, void *stream) {
  CK(cudaMemcpyAsync(dst, src, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost, (cudaStream_t)stream));
  CK(cudaStreamSynchronize((cudaStream_t)stream));
  return DFL_OK;
}

int dfl_gpu_sync(void *stream) {
  CK(cudaStreamSynchronize((cudaStream_t)stream));
  return DFL_OK;
}

int64_t dfl_gpu_mem_used(void *ctx, int dev) {
  (void)ctx;
  (void)dev;
  size_t fr = 0, tot = 0;
  if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) return -1;
  return (int64_t)(tot - fr);
}

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int dfl_gpu_poll(void *stream, int (*check)(void *ctx, char *err, size_t errlen), void *ctx, double timeout_s,
                 char *err, size_t errlen) {
  cudaEvent_t ev;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventRecord(ev, (cudaStream_t)stream);
  if (e != cudaSuccess) {
    snprintf(err, errlen, "cannot record a CUDA event: %s", cudaGetErrorString(e));
    return DFL_ERR;
  }
  double t0 = mono_s();
  int rc = DFL_OK;
  for (;;) {
    e = cudaEventQuery(ev);
    if (e == cudaSuccess) break;
    if (e != cudaErrorNotReady) {
      snprintf(err, errlen, "CUDA error while waiting: %s", cudaGetErrorString(e));
      rc = DFL_ERR;
      break;
    }
    if (check && check(ctx, err, errlen)) {
      rc = DFL_ERR;
      break;
    }
    if (mono_s() - t0 > timeout_s) {
      snprintf(err, errlen, "not complete after %.0f s", timeout_s);
      rc = DFL_ERR;
      break;
    }
    struct timespec ts = {0, 1000000};   /* 1 ms: the host thread idles, the GPU runs */
    nanosleep(&ts, NULL);
  }
  cudaEventDestroy(ev);   /* legal while pending: released when it completes (or never) */
  return rc;
}

int dfl_gpu_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

int dfl_gpu_set_device(int device) {
  CK(cudaSetDevice(device));
  return DFL_OK;
}

void dfl_gpu_peer(int from, int to) {
  int ok = 0;
  if (from == to || cudaDeviceCanAccessPeer(&ok, from, to) != cudaSuccess || !ok) return;
  int cur = 0;
  cudaGetDevice(&cur);
  cudaSetDevice(from);
  if (cudaDeviceEnablePeerAccess(to, 0) != cudaSuccess) cudaGetLastError();   /* already enabled: fine */
  cudaSetDevice(cur);
}
