/*
** pipeline_base.c: what every part of the pipeline calls and that calls none of them: the clock, the
** first failure, a device thread's start, a slot wait, a host view of a replica, the NCCL waits. The
** threads (pipeline_feed.c, pipeline_replica.c), the reports and the setup sit above it.
*/
#include "runtime/pipeline/pipeline_internal.h"

double pipe_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

size_t pipe_cpu_elem(const dfl_tensor *t, void *ctx) {
  (void)ctx;
  return dfl_cpu_elem_size(t, 0);
}

/* First failure stops everything: queues and the collective wake their waiters with an error. */
void pipe_fail(pipe_s *p, const char *who, int rc) {
  pthread_mutex_lock(&p->fail_mu);
  int first = !p->failed;
  if (first) p->failed = rc ? rc : DFL_ERR;   /* the first cause is the run's result */
  pthread_mutex_unlock(&p->fail_mu);
  if (first && who) fprintf(stderr, "dflc: pipeline: %s failed; stopping every device\n", who);
  dfl_queue_close(&p->pre, NULL);
  if (p->has_hq) dfl_queue_close(&p->hq, NULL);
  dfl_coll_abort(&p->coll);
}

/* A DFL_FAULT delay (ms) before each micro-batch. */
void pipe_sleep_ms(double ms) {
  if (ms <= 0) return;
  struct timespec ts = {(time_t)(ms / 1000), (long)(fmod(ms, 1000.0) * 1e6)};
  while (nanosleep(&ts, &ts) && errno == EINTR) {}
}

/* Slot k of q, to read or to write; the wait shows in the device's diagnostics state. */
dfl_slot *pipe_wait_slot(pipe_s *p, dev_s *d, dfl_queue *q, int64_t k, int write) {
  dfl_mon_set(&p->diag, d->diag_id, write ? DFL_DS_WAIT_OUT : DFL_DS_WAIT_IN);
  dfl_slot *sl = write ? dfl_queue_acquire_write(q, k) : dfl_queue_acquire_read(q, k);
  dfl_mon_set(&p->diag, d->diag_id, DFL_DS_BUSY);
  return sl;
}

/* A device thread's first CUDA call: its GPU becomes the thread's current device. */
int pipe_thread_start(dev_s *d) {
#ifdef DFL_HAVE_CUDA
  if (d->gpu && dfl_gpu_set_device(d->phys)) {
    fprintf(stderr, "dflc: %s: cannot make CUDA device %d current\n", d->name, d->phys);
    return DFL_ERR;
  }
#else
  (void)d;
#endif
  return DFL_OK;
}

/* A host view of a replica's tensors of the given kinds: its own buffers on the CPU, a pulled
** shadow on a GPU. */
dfl_cpu *pipe_host_view(dev_s *d, unsigned kinds, dfl_cpu *shadow) {
  if (!d->gpu) return &d->cpu;
  if (dfl_be_sync(&d->be)) return NULL;
  return dfl_be_host(&d->be, kinds, 1, shadow);
}


void pipe_host_view_done(dev_s *d, dfl_cpu *h) {
  if (d->gpu && h) dfl_be_host_done(&d->be, h, 0);
}

#ifdef DFL_HAVE_CUDA
/* this process's communicator of replica d; several in one process (nccl_local), else one */
int pipe_nccl_local_of(const pipe_s *p, const dev_s *d) {
  return p->nccl_local ? d->idx : p->xproc && d->role == R_DRAFTER ? 1 : 0;
}

static int nccl_check(void *ctx, char *err, size_t errlen) {
  dev_s *d = ctx;
  pipe_s *p = d->p;
  if (p->nccl_local && p->failed) {   /* another replica thread of this process failed */
    snprintf(err, errlen, "another device of this process failed");
    return DFL_ERR;
  }
  if (p->xproc && dfl_nccl_async_error(&p->coll, 0, err, errlen)) return DFL_ERR;   /* the send/recv one */
  return dfl_nccl_async_error(&p->coll, pipe_nccl_local_of(p, d), err, errlen);
}

/* After an NCCL collective: wait for it by polling, never inside CUDA, so that a peer rank that
** failed (and will never join) costs at most DFL_NCCL_TIMEOUT_S; then the communicator is
** aborted and this rank fails with a message instead of hanging. */
int pipe_nccl_wait_on(pipe_s *p, dev_s *d, void *stream, const char *what) {
  char err[256];
  dfl_mon_set(&p->diag, d->diag_id, DFL_DS_SYNC);
  int rc = dfl_gpu_poll(stream, nccl_check, d, p->nccl_timeout, err, sizeof err);
  dfl_mon_set(&p->diag, d->diag_id, DFL_DS_BUSY);
  if (rc == DFL_OK) return DFL_OK;
  if (p->nccl_local) {   /* the communicators are aborted once, by the main thread after the joins */
    if (!p->failed)
      fprintf(stderr, "dflc: %s: %s: %s (DFL_NCCL_TIMEOUT_S=%g is the limit)\n", d->name, what, err, p->nccl_timeout);
    return DFL_ERR;
  }
  fprintf(stderr, "dflc: %s (rank %d of %d): %s: %s; a peer rank failed or stalled (DFL_NCCL_TIMEOUT_S=%g is the "
          "limit); aborting the NCCL communicator\n", d->name, p->rank, p->procs, what, err, p->nccl_timeout);
  dfl_nccl_abort(&p->coll);
  return DFL_ERR;
}

int pipe_nccl_wait(pipe_s *p, dev_s *d, const char *what) {
  return pipe_nccl_wait_on(p, d, dfl_gpu_stream(&d->be), what);
}
#endif
