/*
** backend_cuda.c: the trainer's backend interface (backend.h) on the CUDA backend (cuda.h).
**
** Everything the loop touches is set up here once: pinned staging for the INPUT tensors (two
** slots, so the host fills micro-step k+1 while the copy of k may still be queued), pinned read
** slots with one event each, the captured phase graphs (on first use, by dfl_cuda_run). In the
** loop: memcpyAsync from pinned staging, graph launches, memsetAsync, memcpyAsync to pinned read
** slots and event records: no allocation, no free, and the only waits are on events.
*/
#include "runtime/backend.h"

#ifdef DFL_HAVE_CUDA

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include "runtime/cuda/cuda_check.h"

#include "runtime/cuda/cuda.h"
#include "runtime/io/data.h"
#include "runtime/io/safetensors.h"
#include "runtime/io/weights.h"
#include "runtime/cpu/fp8.h"

#define CK(call) DFL_CU(call)

#define MAX_IN 8

typedef struct cuda_be {
  dfl_cuda c;
  cudaStream_t stream;
  int in_t[MAX_IN], n_in;
  void *in_host[2][MAX_IN];     /* pinned */
  cudaEvent_t in_ev[2];
  int in_slot, in_used[2];
  char *rd_host[DFL_BE_READ_SLOTS]; /* pinned, raw bytes of the snapshotted tensors */
  size_t rd_off[DFL_BE_READ_SLOTS];
  cudaEvent_t rd_ev[DFL_BE_READ_SLOTS];
  int device;                   /* the CUDA device this backend's arena, stream and kernels live on */
} cuda_be;

static cuda_be *CB(dfl_backend *b) { return (cuda_be *)b->impl; }

/* Several backends on several GPUs may share a thread: each call makes its own device current
** (cheap: a thread-local switch), so no caller has to remember which one is. */
static cuda_be *ON(dfl_backend *b) {
  cuda_be *cb = CB(b);
  if (cb) cudaSetDevice(cb->device);
  return cb;
}

int dfl_be_cuda_available(void) { return dfl_cuda_available(); }

int dfl_be_cuda_cc(void) {
  int dev = 0, maj = 0, mn = 0;
  if (!dfl_cuda_available() || cudaGetDevice(&dev) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&maj, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&mn, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
    return cudaGetLastError(), 0;
  return maj * 10 + mn;
}

int64_t dfl_be_cuda_memory(void) {
  size_t fr = 0, tot = 0;
  int dev = 0;
  if (!dfl_cuda_available() || cudaGetDevice(&dev) != cudaSuccess) return 0;
  if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) return cudaGetLastError(), 0;
  return (int64_t)tot;
}

int dfl_be_pci_bus_id(dfl_backend *b, char *buf, int len) {
  if (b->kind != DFL_BE_CUDA || !CB(b) || len < 13) return DFL_ERR;
  return cudaDeviceGetPCIBusId(buf, len, CB(b)->device) == cudaSuccess ? DFL_OK : DFL_ERR;
}

static int64_t mem_used(void) {
  size_t fr = 0, tot = 0;
  if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) return -1;
  return (int64_t)(tot - fr);
}

static int cb_set_f(dfl_backend *b, int t, const float *s, int64_t n) { return dfl_cuda_set_f(&ON(b)->c, t, s, n); }
static int cb_get_f(dfl_backend *b, int t, float *d, int64_t n) { return dfl_cuda_get_f(&ON(b)->c, t, d, n); }

static int32_t *cb_input(dfl_backend *b, int t) {
  cuda_be *cb = CB(b);
  int s = cb->in_slot;
  if (!cb->in_used[s]) {
    /* first fill of this slot since its last copy: wait until that copy has left it */
    if (cudaEventSynchronize(cb->in_ev[s]) != cudaSuccess) return NULL;
    cb->in_used[s] = 1;
  }
  for (int i = 0; i < cb->n_in; i++)
    if (cb->in_t[i] == t) return cb->in_host[s][i];
  fprintf(stderr, "dflc: cuda backend: tensor %s is not a registered input\n", b->g->t[t].name);
  return NULL;
}

static int cb_commit(dfl_backend *b) {
  cuda_be *cb = ON(b);
  int s = cb->in_slot;
  for (int i = 0; i < cb->n_in; i++) {
    int t = cb->in_t[i];
    CK(cudaMemcpyAsync(cb->c.ptr[t], cb->in_host[s][i], (size_t)dfl_tensor_bytes(&b->g->t[t]),
                       cudaMemcpyHostToDevice, cb->stream));
  }
  CK(cudaEventRecord(cb->in_ev[s], cb->stream));
  cb->in_used[s] = 0;
  cb->in_slot = 1 - s;
  return DFL_OK;
}

static int cb_run(dfl_backend *b, unsigned mask) { return dfl_cuda_run(&ON(b)->c, mask); }

static int cb_zero(dfl_backend *b, int t) {
  cuda_be *cb = ON(b);
  CK(cudaMemsetAsync(cb->c.ptr[t], 0, (size_t)dfl_tensor_bytes(&b->g->t[t]), cb->stream));
  return DFL_OK;
}

static int cb_read_add(dfl_backend *b, int slot, int t) {
  cuda_be *cb = ON(b);
  size_t nb = (size_t)dfl_tensor_bytes(&b->g->t[t]);
  if (b->read_n[slot] == 1) cb->rd_off[slot] = 0;
  if (cb->rd_off[slot] + nb > DFL_BE_READ_MAX * 8) return DFL_ESHAPE;
  CK(cudaMemcpyAsync(cb->rd_host[slot] + cb->rd_off[slot], cb->c.ptr[t], nb, cudaMemcpyDeviceToHost, cb->stream));
  cb->rd_off[slot] += nb;
  return DFL_OK;
}

static int cb_read_end(dfl_backend *b, int slot) {
  CK(cudaEventRecord(ON(b)->rd_ev[slot], CB(b)->stream));
  return DFL_OK;
}

static float widen(const char *p, dfl_dtype d) {
  if (d == DFL_BF16) {
    uint16_t v;
    memcpy(&v, p, 2);
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  if (d == DFL_I32) { int32_t v; memcpy(&v, p, 4); return (float)v; }
  if (d == DFL_F64) { double v; memcpy(&v, p, 8); return (float)v; }
  float f;
  memcpy(&f, p, 4);
  return f;
}

static int cb_read_wait(dfl_backend *b, int slot, float *dst) {
  cuda_be *cb = ON(b);
  CK(cudaEventSynchronize(cb->rd_ev[slot]));
  const char *p = cb->rd_host[slot];
  int k = 0;
  for (int i = 0; i < b->read_n[slot]; i++) {
    const dfl_tensor *t = &b->g->t[b->read_t[slot][i]];
    int64_t n = dfl_tensor_numel(t);
    size_t es = dfl_dtype_size(t->dtype);
    for (int64_t j = 0; j < n; j++, p += es) dst[k++] = widen(p, t->dtype);
  }
  return DFL_OK;
}

static int cb_sync(dfl_backend *b) { return dfl_cuda_sync(&ON(b)->c); }
static int64_t cb_bytes(dfl_backend *b) { ON(b); return mem_used(); }

static void cb_close(dfl_backend *b) {
  cuda_be *cb = ON(b);
  if (!cb) return;
  if (cb->c.impl) dfl_cuda_sync(&cb->c);
  for (int s = 0; s < 2; s++) {
    for (int i = 0; i < cb->n_in; i++)
      if (cb->in_host[s][i]) cudaFreeHost(cb->in_host[s][i]);
    if (cb->in_ev[s]) cudaEventDestroy(cb->in_ev[s]);
  }
  for (int s = 0; s < DFL_BE_READ_SLOTS; s++) {
    if (cb->rd_host[s]) cudaFreeHost(cb->rd_host[s]);
    if (cb->rd_ev[s]) cudaEventDestroy(cb->rd_ev[s]);
  }
  if (cb->c.g) dfl_cuda_free(&cb->c);
  free(cb);
  b->impl = NULL;
}

static const dfl_backend_vt cuda_vt = {cb_set_f, cb_get_f, cb_input, cb_commit, cb_run, cb_zero, cb_read_add,
                                       cb_read_end, cb_read_wait, cb_sync, cb_bytes, cb_close,
                                       dfl_be_cuda_init_random};

int dfl_be_open_cuda(dfl_backend *b, const dfl_graph *g, const dfl_plan *plan, const int *inputs, int n_inputs,
                     const dfl_compile_opts *opt) {
  return dfl_be_open_cuda_dev(b, g, plan, inputs, n_inputs, opt, 0);
}

void *dfl_be_workspace(dfl_backend *b, const dfl_plan *plan, const char *name, int64_t *bytes) {
  if (b->kind != DFL_BE_CUDA || !CB(b) || !plan) return NULL;
  for (int k = 0; k < plan->n_ws; k++) {
    int64_t o = plan->offset[plan->nt + k];
    if (strcmp(plan->ws[k].name, name) || o < 0 || o + plan->ws[k].bytes > (int64_t)CB(b)->c.arena_bytes) continue;
    if (bytes) *bytes = plan->ws[k].bytes;
    return CB(b)->c.arena + o;
  }
  return NULL;
}

int dfl_be_open_cuda_dev(dfl_backend *b, const dfl_graph *g, const dfl_plan *plan, const int *inputs, int n_inputs,
                         const dfl_compile_opts *opt, int device) {
  memset(b, 0, sizeof *b);
  if (n_inputs > MAX_IN) return DFL_ERR;
  if (!dfl_cuda_available()) {
    fprintf(stderr, "dflc: no CUDA device is available: run on a GPU machine, or pass --cpu to train on the CPU\n");
    return DFL_ERR;
  }
  cuda_be *cb = calloc(1, sizeof *cb);
  if (!cb) return DFL_ENOMEM;
  b->impl = cb;
  b->kind = DFL_BE_CUDA;
  b->name = "cuda";
  b->g = g;
  b->vt = &cuda_vt;
  cb->device = device;
  CK(cudaSetDevice(device));
  CK(cudaFree(0));            /* create the context first, so that mem_before excludes it */
  b->mem_before = mem_used();
  dfl_cuda_opts co = {0};
  if (opt) co.tf32 = opt->tf32, co.gemm_tune = opt->gemm_tune;
  int rc = dfl_cuda_init_opts(&cb->c, g, plan, NULL, &co);
  if (rc) {
    cb_close(b);
    return rc;
  }
  b->arena_bytes = (int64_t)cb->c.arena_bytes;
  cb->stream = (cudaStream_t)dfl_cuda_stream(&cb->c);
  cb->n_in = n_inputs;
  for (int s = 0; s < 2; s++) {
    for (int i = 0; i < n_inputs; i++) {
      cb->in_t[i] = inputs[i];
      CK(cudaMallocHost(&cb->in_host[s][i], (size_t)dfl_tensor_bytes(&g->t[inputs[i]])));
    }
    CK(cudaEventCreateWithFlags(&cb->in_ev[s], cudaEventDisableTiming));
    CK(cudaEventRecord(cb->in_ev[s], cb->stream));
  }
  for (int s = 0; s < DFL_BE_READ_SLOTS; s++) {
    CK(cudaMallocHost((void **)&cb->rd_host[s], DFL_BE_READ_MAX * 8));
    CK(cudaEventCreateWithFlags(&cb->rd_ev[s], cudaEventDisableTiming));
  }
  return DFL_OK;
}

/* --- seeded random weights, generated by host threads straight into the arena --- */

typedef struct init_job {
  dfl_backend *b;
  unsigned kinds;
  uint64_t seed;
  double std;
  int next;                    /* next tensor to take */
  int64_t next_seg;            /* its next segment */
  int rc;
  pthread_mutex_t mu;
} init_job;

/* Values exactly as dfl_weights_init (models/weights.c) draws them: one stream per tensor seeded
** from (seed, name), 1-D tensors = 1; then rounded to the tensor's dtype as dfl_cuda_set_f does.
** Large tensors are cut into segments that threads draw at once: a normal takes exactly two
** xoshiro steps, so the thread of the segment starting at value i steps the stream 2 i times
** (about 1 ns each) and draws from there (about 20 ns per value, the log and cos): the same
** values, and a 1.27 B-value embedding in seconds instead of half a minute on one thread. */
static int64_t init_seg(void) { /* DFL_INIT_SEG (values): tests cut small tensors into segments */
  const char *e = getenv("DFL_INIT_SEG");
  return e && atoll(e) > 0 ? atoll(e) : 32ll << 20;
}
/* Values per segment of tensor t: whole rows for an f8e4m3 weight (each row is quantized with its own
** scale), else DFL_INIT_SEG. */
static int64_t seg_len(const dfl_tensor *t, int64_t init_seg) {
  if (t->dtype != DFL_F8E4M3) return init_seg;
  int64_t C = t->shape[t->ndim - 1];
  return init_seg < C ? C : init_seg / C * C;
}
/* The skipped tensors: integers, and an f8e4m3 weight's scales (written with its rows). */
static int init_skip(const dfl_graph *g, const init_job *j, int t) {
  return !(j->kinds & (1u << g->t[t].kind)) || g->t[t].dtype == DFL_I32 || g->t[t].dtype == DFL_I64 ||
         dfl_weights_fp8_weight_of(g, t) >= 0;
}
static void *init_worker(void *arg) {
  init_job *j = arg;
  const dfl_graph *g = j->b->g;
  cuda_be *cb = ON(j->b);   /* a fresh thread: on the backend's device, not device 0 */
  float *v = NULL, *sc = NULL;
  int64_t cap = 0;
  const int64_t INIT_SEG = init_seg();
  for (;;) {
    pthread_mutex_lock(&j->mu);
    int t = j->next;
    while (t < g->nt && init_skip(g, j, t)) t++;
    int64_t seg = 0;
    if (t < g->nt) {
      seg = t == j->next ? j->next_seg : 0;
      if ((seg + 1) * seg_len(&g->t[t], INIT_SEG) < dfl_tensor_numel(&g->t[t])) { j->next = t; j->next_seg = seg + 1; }
      else { j->next = t + 1; j->next_seg = 0; }
    } else {
      j->next = t;
    }
    int stop = t >= g->nt || j->rc;
    pthread_mutex_unlock(&j->mu);
    if (stop) break;
    const dfl_tensor *tt = &g->t[t];
    const int64_t SEG = seg_len(tt, INIT_SEG);
    int64_t n = dfl_tensor_numel(tt), i0 = seg * SEG, m = n - i0 < SEG ? n - i0 : SEG;
    int rc = DFL_OK;
    if (SEG > cap) {
      free(v);
      free(sc);
      v = malloc(sizeof(float) * (size_t)SEG);
      sc = malloc(sizeof(float) * (size_t)SEG);
      cap = v && sc ? SEG : 0;
      if (!cap) rc = DFL_ENOMEM;
    }
    if (rc == DFL_OK) {
      dfl_rng r;
      dfl_weights_rng(&r, j->seed, tt->name, i0);
      for (int64_t i = 0; i < m; i++) v[i] = tt->ndim == 1 ? 1.0f : (float)(j->std * (double)dfl_rng_normal(&r));
      size_t es = dfl_dtype_size(tt->dtype);
      if (tt->dtype == DFL_BF16) { /* in place: element i goes to bytes [2i, 2i+2), already read */
        uint16_t *h = (uint16_t *)v;
        for (int64_t i = 0; i < m; i++) h[i] = dfl_f32_to_bf16(v[i]);
      }
      if (tt->dtype == DFL_F8E4M3) { /* as dfl_weights_init then its quantization (models/weights.c); in
                                     ** place: byte i lands in float i / 4, already read */
        int64_t C = tt->shape[1], rows = m / C;
        char sname[DFL_NAME_MAX + 8];
        snprintf(sname, sizeof sname, "%s_scale", tt->name);
        int st = dfl_tensor_find(g, sname);
        for (int64_t r0 = 0; r0 < rows; r0++) sc[r0] = dfl_fp8_quant_row(v + r0 * C, C, (uint8_t *)v + r0 * C, NULL);
        if (st < 0 || cudaMemcpy((float *)cb->c.ptr[st] + i0 / C, sc, sizeof(float) * (size_t)rows,
                                 cudaMemcpyHostToDevice) != cudaSuccess)
          rc = DFL_ERR;
      }
      if (rc == DFL_OK &&
          cudaMemcpy((char *)cb->c.ptr[t] + (size_t)i0 * es, v, (size_t)m * es, cudaMemcpyHostToDevice) != cudaSuccess)
        rc = DFL_ERR;
    }
    if (rc) {
      pthread_mutex_lock(&j->mu);
      j->rc = rc;
      pthread_mutex_unlock(&j->mu);
    }
  }
  free(v);
  free(sc);
  return NULL;
}

int dfl_be_cuda_init_random(dfl_backend *b, unsigned kinds, uint64_t seed, double std) {
  init_job j = {.b = b, .kinds = kinds, .seed = seed, .std = std};
  pthread_mutex_init(&j.mu, NULL);
  for (int t = 0; t < b->g->nt; t++) {
    dfl_dtype d = b->g->t[t].dtype;
    if ((kinds & (1u << b->g->t[t].kind)) && d != DFL_BF16 && d != DFL_F32 && d != DFL_I32 && d != DFL_I64 &&
        !(d == DFL_F8E4M3 && b->g->t[t].ndim == 2)) {
      fprintf(stderr, "dflc: random init of %s: unsupported dtype\n", b->g->t[t].name);
      return DFL_ERR;
    }
  }
  CK(cudaStreamSynchronize(ON(b)->stream));
  enum { NT = 16 };
  pthread_t th[NT];
  int nt = 0;
  for (; nt < NT; nt++)
    if (pthread_create(&th[nt], NULL, init_worker, &j)) break;
  if (nt == 0) init_worker(&j);
  for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
  pthread_mutex_destroy(&j.mu);
  if (j.rc) fprintf(stderr, "dflc: random initialisation of the target weights failed\n");
  return j.rc;
}

/* For the benchmark: the CUDA state under the interface. */
dfl_cuda *dfl_be_cuda_state(dfl_backend *b) { return b->kind == DFL_BE_CUDA ? &CB(b)->c : NULL; }

#else /* no CUDA toolkit at configure time: the CUDA backend says so */

#include <stdio.h>

int dfl_be_cuda_available(void) { return 0; }
int64_t dfl_be_cuda_memory(void) { return 0; }
int dfl_be_cuda_cc(void) { return 0; }
int dfl_be_pci_bus_id(dfl_backend *b, char *buf, int len) { return DFL_ERR; }
int dfl_be_open_cuda(dfl_backend *b, const dfl_graph *g, const dfl_plan *plan, const int *inputs, int n_inputs,
                     const dfl_compile_opts *opt) {
  (void)b; (void)g; (void)plan; (void)inputs; (void)n_inputs; (void)opt;
  fprintf(stderr, "dflc: this build has no CUDA backend (the CUDA toolkit was not found at configure time); "
                  "use --cpu\n");
  return DFL_ERR;
}
int dfl_be_open_cuda_dev(dfl_backend *b, const dfl_graph *g, const dfl_plan *plan, const int *inputs, int n_inputs,
                         const dfl_compile_opts *opt, int device) {
  (void)device;
  return dfl_be_open_cuda(b, g, plan, inputs, n_inputs, opt);
}
void *dfl_be_workspace(dfl_backend *b, const dfl_plan *plan, const char *name, int64_t *bytes) {
  (void)b; (void)plan; (void)name; (void)bytes;
  return NULL;
}
struct dfl_cuda *dfl_be_cuda_state(dfl_backend *b) { (void)b; return NULL; }
int dfl_be_cuda_init_random(dfl_backend *b, unsigned kinds, uint64_t seed, double std) {
  (void)b; (void)kinds; (void)seed; (void)std;
  return DFL_ERR;
}

#endif
