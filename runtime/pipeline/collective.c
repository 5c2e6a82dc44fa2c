/*
** collective.c: deterministic CPU all-reduce across threads, and NCCL through dlopen
** (see collective.h).
*/
#include "runtime/pipeline/collective.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/status.h"

/* --- barrier --- */

int dfl_barrier_init(dfl_barrier *b, int n) {
  memset(b, 0, sizeof *b);
  b->n = n;
  if (pthread_mutex_init(&b->mu, NULL) || pthread_cond_init(&b->cv, NULL)) return DFL_ERR;
  return DFL_OK;
}

void dfl_barrier_free(dfl_barrier *b) {
  pthread_mutex_destroy(&b->mu);
  pthread_cond_destroy(&b->cv);
}

int dfl_barrier_wait(dfl_barrier *b) {
  pthread_mutex_lock(&b->mu);
  if (b->aborted) {
    pthread_mutex_unlock(&b->mu);
    return DFL_ERR;
  }
  unsigned long gen = b->gen;
  if (++b->waiting == b->n) {
    b->waiting = 0;
    b->gen++;
    pthread_cond_broadcast(&b->cv);
  } else {
    while (gen == b->gen && !b->aborted) pthread_cond_wait(&b->cv, &b->mu);
  }
  int rc = b->aborted ? DFL_ERR : DFL_OK;
  pthread_mutex_unlock(&b->mu);
  return rc;
}

void dfl_barrier_abort(dfl_barrier *b) {
  pthread_mutex_lock(&b->mu);
  b->aborted = 1;
  pthread_cond_broadcast(&b->cv);
  pthread_mutex_unlock(&b->mu);
}

/* --- CPU all-reduce --- */

int dfl_coll_init_cpu(dfl_coll *c, int world) {
  memset(c, 0, sizeof *c);
  c->kind = DFL_COLL_CPU;
  c->world = world;
  c->seg_ptr = calloc((size_t)world * DFL_COLL_MAX_SEGS, sizeof *c->seg_ptr);
  c->seg_len = calloc(DFL_COLL_MAX_SEGS, sizeof *c->seg_len);
  c->n_segs = calloc((size_t)world, sizeof *c->n_segs);
  if (world < 1 || !c->seg_ptr || !c->seg_len || !c->n_segs || dfl_barrier_init(&c->bar, world)) {
    free(c->seg_ptr);
    free(c->seg_len);
    free(c->n_segs);
    memset(c, 0, sizeof *c);
    return DFL_ENOMEM;
  }
  return DFL_OK;
}

void dfl_coll_free(dfl_coll *c) {
  if (c->seg_ptr) dfl_barrier_free(&c->bar);
  /* communicators first: NCCL's proxy threads must be gone before the library is unloaded */
  typedef int (*destroy_fn)(void *);
  destroy_fn destroy = c->nccl && c->comms ? (destroy_fn)dlsym(c->nccl, "ncclCommDestroy") : NULL;
  for (int i = 0; destroy && i < c->n_local; i++)
    if (c->comms[i]) destroy(c->comms[i]);
  free(c->seg_ptr);
  free(c->seg_len);
  free(c->n_segs);
  free(c->scratch);
  free(c->comms);
  if (c->nccl) dlclose(c->nccl);
  memset(c, 0, sizeof *c);
}

void dfl_coll_abort(dfl_coll *c) {
  if (c->kind == DFL_COLL_CPU) dfl_barrier_abort(&c->bar);
}

int dfl_coll_allreduce(dfl_coll *c, int rank, float **bufs, const size_t *lens, int n_segs) {
  const int W = c->world;
  if (n_segs > DFL_COLL_MAX_SEGS) {
    fprintf(stderr, "dflc: all-reduce of %d buffers (at most %d)\n", n_segs, DFL_COLL_MAX_SEGS);
    dfl_coll_abort(c);
    return DFL_ERR;
  }
  /* 1. publish. Nobody touches scratch between calls (the last barrier below), so rank 0 may
  **    grow it here. */
  size_t total = 0;
  for (int i = 0; i < n_segs; i++) total += lens[i];
  memcpy(&c->seg_ptr[(size_t)rank * DFL_COLL_MAX_SEGS], bufs, sizeof *bufs * (size_t)n_segs);
  c->n_segs[rank] = n_segs;
  if (rank == 0) {
    memcpy(c->seg_len, lens, sizeof *lens * (size_t)n_segs);
    c->mismatch = 0;
    if (c->scratch_n < total) {
      free(c->scratch);
      c->scratch = malloc(sizeof *c->scratch * total);
      c->scratch_n = c->scratch ? total : 0;
      if (!c->scratch) c->mismatch = 1;
    }
  }
  if (dfl_barrier_wait(&c->bar)) return DFL_ERR;
  /* 2. every rank checks its list against rank 0's */
  int bad = n_segs != c->n_segs[0];
  for (int i = 0; i < n_segs && !bad; i++) bad = lens[i] != c->seg_len[i];
  if (bad) {
    pthread_mutex_lock(&c->bar.mu);
    c->mismatch = 1;
    pthread_mutex_unlock(&c->bar.mu);
    fprintf(stderr, "dflc: all-reduce: rank %d passed buffers that differ from rank 0's\n", rank);
  }
  if (dfl_barrier_wait(&c->bar)) return DFL_ERR;
  if (c->mismatch) return DFL_ERR;
  /* 3. my chunk of the concatenated index space, summed over ranks in rank order */
  size_t lo = total * (size_t)rank / (size_t)W, hi = total * (size_t)(rank + 1) / (size_t)W, base = 0;
  for (int s = 0; s < n_segs && base < hi; s++) {
    size_t n = lens[s], a = lo > base ? lo - base : 0, b = hi - base < n ? hi - base : n;
    for (size_t i = a; i < b; i++) {
      double acc = 0;
      for (int r = 0; r < W; r++) acc += (double)c->seg_ptr[(size_t)r * DFL_COLL_MAX_SEGS + s][i];
      c->scratch[base + i] = acc;
    }
    base += n;
  }
  if (dfl_barrier_wait(&c->bar)) return DFL_ERR;
  /* 4. copy back: everyone reads the same sums */
  base = 0;
  for (int s = 0; s < n_segs; s++) {
    for (size_t i = 0; i < lens[s]; i++) bufs[s][i] = (float)c->scratch[base + i];
    base += lens[s];
  }
  return dfl_barrier_wait(&c->bar);
}

/* --- NCCL through dlopen ---
** The few NCCL types and constants used, declared here so nothing needs nccl.h at build time;
** when nccl.h is on the include path they are checked against it. */
typedef struct { char internal[DFL_NCCL_ID_BYTES]; } dfl_nccl_id;
typedef void *dfl_nccl_comm;
enum { DFL_NCCL_SUCCESS = 0, DFL_NCCL_FLOAT32 = 7, DFL_NCCL_SUM = 0, DFL_NCCL_IN_PROGRESS = 7, DFL_NCCL_INT8 = 0,
       DFL_NCCL_NOCOLOR = -1 };
#if defined(__has_include)
#if __has_include(<nccl.h>)
#include <nccl.h>
_Static_assert(sizeof(ncclUniqueId) == sizeof(dfl_nccl_id), "ncclUniqueId size");
_Static_assert((int)ncclFloat32 == (int)DFL_NCCL_FLOAT32 && (int)ncclSum == (int)DFL_NCCL_SUM &&
                   (int)ncclSuccess == (int)DFL_NCCL_SUCCESS && (int)ncclInProgress == (int)DFL_NCCL_IN_PROGRESS &&
                   (int)ncclInt8 == (int)DFL_NCCL_INT8 && NCCL_SPLIT_NOCOLOR == DFL_NCCL_NOCOLOR,
               "NCCL enum values");
#endif
#endif

typedef int (*nccl_get_id_fn)(dfl_nccl_id *);
typedef int (*nccl_init_rank_fn)(dfl_nccl_comm *, int, dfl_nccl_id, int);
typedef int (*nccl_allreduce_fn)(const void *, void *, size_t, int, int, dfl_nccl_comm, void *);
typedef int (*nccl_group_fn)(void);
typedef const char *(*nccl_err_fn)(int);

static void *sym(dfl_coll *c, const char *name, char *err, size_t errlen) {
  void *p = dlsym(c->nccl, name);
  if (!p) snprintf(err, errlen, "libnccl has no %s (NCCL >= 2.7 needed)", name);
  return p;
}

static const char *nccl_msg(dfl_coll *c, int rc) {
  nccl_err_fn f = (nccl_err_fn)dlsym(c->nccl, "ncclGetErrorString");
  return f ? f(rc) : "unknown NCCL error";
}

int dfl_nccl_load(dfl_coll *c, char *err, size_t errlen) {
  const char *lib = getenv("DFL_NCCL_LIB");
  c->nccl = dlopen(lib && lib[0] ? lib : "libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!c->nccl) {
    snprintf(err, errlen, "cannot load %s (%s): install NCCL 2 or set DFL_NCCL_LIB to its path",
             lib && lib[0] ? lib : "libnccl.so.2", dlerror());
    return DFL_EIO;
  }
  c->kind = DFL_COLL_NCCL;
  return DFL_OK;
}

int dfl_nccl_unique_id(dfl_coll *c, unsigned char id[DFL_NCCL_ID_BYTES], char *err, size_t errlen) {
  nccl_get_id_fn f = (nccl_get_id_fn)sym(c, "ncclGetUniqueId", err, errlen);
  if (!f) return DFL_ERR;
  dfl_nccl_id u;
  int rc = f(&u);
  if (rc != DFL_NCCL_SUCCESS) {
    snprintf(err, errlen, "ncclGetUniqueId: %s", nccl_msg(c, rc));
    return DFL_ERR;
  }
  memcpy(id, u.internal, DFL_NCCL_ID_BYTES);
  return DFL_OK;
}

int dfl_nccl_init_rank(dfl_coll *c, int local, int n_local, const unsigned char id[DFL_NCCL_ID_BYTES],
                       int world, int rank, void *stream, char *err, size_t errlen) {
  nccl_init_rank_fn f = (nccl_init_rank_fn)sym(c, "ncclCommInitRank", err, errlen);
  if (!f) return DFL_ERR;
  if (!c->comms) {
    /* the first thread in sizes the tables; callers serialise init (the runner holds a lock) */
    c->comms = calloc((size_t)n_local * 2, sizeof *c->comms);
    if (!c->comms) return DFL_ENOMEM;
    c->streams = c->comms + n_local;
    c->n_local = n_local;
    c->world = world;
  }
  dfl_nccl_id u;
  memcpy(u.internal, id, DFL_NCCL_ID_BYTES);
  int rc = f(&c->comms[local], world, u, rank);
  if (rc != DFL_NCCL_SUCCESS) {
    snprintf(err, errlen, "ncclCommInitRank(rank %d of %d): %s", rank, world, nccl_msg(c, rc));
    return DFL_ERR;
  }
  c->streams[local] = stream;
  return DFL_OK;
}

int dfl_nccl_init_all(dfl_coll *c, int n, const int *devs, void *const *streams, char *err, size_t errlen) {
  typedef int (*init_all_fn)(dfl_nccl_comm *, int, const int *);
  init_all_fn f = (init_all_fn)sym(c, "ncclCommInitAll", err, errlen);
  if (!f) return DFL_ERR;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < i; j++)
      if (devs[i] == devs[j]) {
        snprintf(err, errlen, "replicas %d and %d are both on CUDA device %d: NCCL needs one GPU per replica "
                 "(DFL_GPU_MAP / the topology's gpuN)", j, i, devs[i]);
        return DFL_EFORMAT;
      }
  c->comms = calloc((size_t)n * 2, sizeof *c->comms);
  if (!c->comms) return DFL_ENOMEM;
  c->streams = c->comms + n;
  c->n_local = n;
  c->world = n;
  int rc = f(c->comms, n, devs);
  if (rc != DFL_NCCL_SUCCESS) {
    snprintf(err, errlen, "ncclCommInitAll(%d GPUs): %s", n, nccl_msg(c, rc));
    memset(c->comms, 0, sizeof(void *) * (size_t)n);
    return DFL_ERR;
  }
  for (int i = 0; i < n; i++) c->streams[i] = streams[i];
  return DFL_OK;
}

int dfl_nccl_allreduce(dfl_coll *c, int local, float **dbufs, const size_t *lens, int n_segs, char *err,
                       size_t errlen) {
  nccl_allreduce_fn ar = (nccl_allreduce_fn)sym(c, "ncclAllReduce", err, errlen);
  nccl_group_fn gs = (nccl_group_fn)sym(c, "ncclGroupStart", err, errlen);
  nccl_group_fn ge = (nccl_group_fn)sym(c, "ncclGroupEnd", err, errlen);
  if (!ar || !gs || !ge) return DFL_ERR;
  int rc = gs();
  for (int s = 0; s < n_segs && rc == DFL_NCCL_SUCCESS; s++)   /* in place */
    rc = ar(dbufs[s], dbufs[s], lens[s], DFL_NCCL_FLOAT32, DFL_NCCL_SUM, c->comms[local], c->streams[local]);
  int rc2 = ge();
  if (rc == DFL_NCCL_SUCCESS) rc = rc2;
  if (rc != DFL_NCCL_SUCCESS) {
    snprintf(err, errlen, "ncclAllReduce: %s", nccl_msg(c, rc));
    return DFL_ERR;
  }
  return DFL_OK;
}

int dfl_nccl_split(dfl_coll *c, int from, int to, int color, int key, void *stream, char *err, size_t errlen) {
  typedef int (*split_fn)(dfl_nccl_comm, int, int, dfl_nccl_comm *, void *);
  split_fn f = (split_fn)sym(c, "ncclCommSplit", err, errlen);
  if (!f) {
    snprintf(err, errlen, "libnccl has no ncclCommSplit (NCCL >= 2.18 needed for split topologies across processes)");
    return DFL_ERR;
  }
  if (!c->comms || from >= c->n_local || to >= c->n_local || !c->comms[from]) {
    snprintf(err, errlen, "ncclCommSplit: no communicator %d to split", from);
    return DFL_ERR;
  }
  int rc = f(c->comms[from], color < 0 ? DFL_NCCL_NOCOLOR : color, key, &c->comms[to], NULL);
  if (rc != DFL_NCCL_SUCCESS) {
    snprintf(err, errlen, "ncclCommSplit: %s", nccl_msg(c, rc));
    return DFL_ERR;
  }
  c->streams[to] = stream;
  return DFL_OK;
}

int dfl_nccl_p2p(dfl_coll *c, int local, int send, void *buf, size_t bytes, int peer, void *stream, char *err,
                 size_t errlen) {
  typedef int (*p2p_fn)(void *, size_t, int, int, dfl_nccl_comm, void *);
  p2p_fn f = (p2p_fn)sym(c, send ? "ncclSend" : "ncclRecv", err, errlen);
  if (!f) return DFL_ERR;
  int rc = f(buf, bytes, DFL_NCCL_INT8, peer, c->comms[local], stream ? stream : c->streams[local]);
  if (rc != DFL_NCCL_SUCCESS) {
    snprintf(err, errlen, "%s(peer rank %d, %zu bytes): %s", send ? "ncclSend" : "ncclRecv", peer, bytes,
             nccl_msg(c, rc));
    return DFL_ERR;
  }
  return DFL_OK;
}

int dfl_nccl_async_error(dfl_coll *c, int local, char *err, size_t errlen) {
  typedef int (*get_fn)(dfl_nccl_comm, int *);
  get_fn f = c->nccl ? (get_fn)dlsym(c->nccl, "ncclCommGetAsyncError") : NULL;
  if (!f || !c->comms || local >= c->n_local || !c->comms[local]) return DFL_OK;
  int res = DFL_NCCL_SUCCESS, rc = f(c->comms[local], &res);
  if (rc != DFL_NCCL_SUCCESS) res = rc;
  if (res == DFL_NCCL_SUCCESS || res == DFL_NCCL_IN_PROGRESS) return DFL_OK;
  snprintf(err, errlen, "NCCL reports an error on the communicator: %s", nccl_msg(c, res));
  return DFL_ERR;
}

void dfl_nccl_abort(dfl_coll *c) {
  typedef int (*abort_fn)(dfl_nccl_comm);
  abort_fn f = c->nccl ? (abort_fn)dlsym(c->nccl, "ncclCommAbort") : NULL;
  for (int i = 0; f && c->comms && i < c->n_local; i++)
    if (c->comms[i]) {
      f(c->comms[i]);
      c->comms[i] = NULL;   /* aborted: freed by NCCL, never destroyed */
    }
}
