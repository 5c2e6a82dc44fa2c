/*
** gemm_tune.c: compile { gemm_tune = true } (opt-in: on an H100 it kept cuBLASLt's first choice for all seven of
** the 27B target's GEMMs, docs/language.md). cuBLASLt's first heuristic algorithm is a
** guess from the shape; for the long GEMMs of a training step another of its candidates is often a few
** percent faster on the device at hand. Each distinct GEMM (the descriptor, the layouts, beta) is timed
** once: up to DFL_TUNE_CANDS candidates on scratch operands filled with random values (a GEMM over zeros
** draws less power, and at the 700 W cap that changes the ranking), in interleaved rounds so that the
** board's clock drift falls on all of them alike. The fastest replaces the heuristic's choice only when
** it is DFL_TUNE_MARGIN faster: below that the ranking is noise. The choice is kept in the cache
** directory (the cubins'), one file per GEMM named by a hash of its key (GPU, cuBLASLt version,
** descriptor), so a machine times a shape once and every later run, and every process of a pipeline,
** picks the same algorithm, and so the same numerics.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <cuda_runtime.h>
#include "runtime/cuda/cuda_check.h"
#include <cublasLt.h>
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/impl.h"
#include "compiler/emit.h"
#include "compiler/status.h"

#define DFL_TUNE_CANDS 8
#define DFL_TUNE_ROUNDS 3
#define DFL_TUNE_REPS 3
#define DFL_TUNE_MARGIN 0.01
#define TUNE_PATH 1024

static uint64_t fnv1a(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* The file's first line is the key, the second the algorithm's 8 words in hex; anything else
** (another key under the same hash, a truncated file) is a miss. */
static int cache_read(const char *path, const char *key, cublasLtMatmulAlgo_t *a) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[1024];
  int ok = fgets(line, sizeof line, f) && !strncmp(line, key, strlen(key)) && line[strlen(key)] == '\n';
  unsigned long long w[8];
  ok = ok && fscanf(f, "%llx %llx %llx %llx %llx %llx %llx %llx", &w[0], &w[1], &w[2], &w[3], &w[4], &w[5], &w[6],
                    &w[7]) == 8;
  fclose(f);
  if (ok)
    for (int i = 0; i < 8; i++) a->data[i] = (uint64_t)w[i];
  return ok;
}

/* Written to a temporary name and renamed, so a reader (another process of a pipeline) sees the
** whole file or none. A cache that cannot be written costs only the next run's timing. */
static void cache_write(const char *root, const char *dir, const char *path, const char *key,
                        const cublasLtMatmulAlgo_t *a, const char *why) {
  char tmp[TUNE_PATH + 96];
  mkdir(root, 0755);
  mkdir(dir, 0755);
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) return;
  fprintf(f, "%s\n", key);
  for (int i = 0; i < 8; i++) fprintf(f, "%llx%c", (unsigned long long)a->data[i], i == 7 ? '\n' : ' ');
  fprintf(f, "%s\n", why);
  if (fclose(f) == 0) rename(tmp, path);
  else remove(tmp);
}

static size_t dtype_bytes(cudaDataType_t t) {
  switch (t) {
  case CUDA_R_8F_E4M3: case CUDA_R_8F_E5M2: return 1;
  case CUDA_R_16BF: case CUDA_R_16F: return 2;
  case CUDA_R_64F: return 8;
  default: return 4;
  }
}

static int layout(cublasLtMatrixLayout_t l, cudaDataType_t *t, uint64_t *rows, uint64_t *cols, int64_t *ld) {
  size_t w;
  uint32_t ty;
  LT(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_TYPE, &ty, sizeof ty, &w));
  LT(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ROWS, rows, sizeof *rows, &w));
  LT(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_COLS, cols, sizeof *cols, &w));
  LT(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_LD, ld, sizeof *ld, &w));
  *t = (cudaDataType_t)ty;
  return DFL_OK;
}

/* Random values of t's type, |x| in about [1/8, 2] with random signs: the operands' power draw of a
** real step, never an FP8 NaN or an overflow over a few dozen accumulating runs. */
static void fill_host(unsigned char *h, size_t n, cudaDataType_t t, uint64_t *s) {
  size_t e = dtype_bytes(t);
  for (size_t i = 0; i + e <= n; i += e) {
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    float v = (float)((*s >> 11) & 0xffff) / 65536.f * 1.875f + 0.125f;
    if (*s & 1) v = -v;
    if (e == 1) {
      int ex = 4 + (int)((*s >> 40) % 5); /* e4m3: 2^(ex - 7), mantissa random */
      h[i] = (unsigned char)(((*s & 1) << 7) | (ex << 3) | ((*s >> 50) & 7));
    } else if (e == 2) {
      uint32_t u;
      memcpy(&u, &v, 4);
      uint16_t b = (uint16_t)(u >> 16); /* bf16; as f16 bits it is a finite value too (exponent < 31) */
      if (t == CUDA_R_16F) b = (uint16_t)((*s & 1) << 15 | (14 + ((*s >> 40) % 2)) << 10 | ((*s >> 30) & 0x3ff));
      memcpy(h + i, &b, 2);
    } else if (e == 4) memcpy(h + i, &v, 4);
    else { double d = v; memcpy(h + i, &d, 8); }
  }
}

static int fill_dev(char *d, size_t n, cudaDataType_t t, uint64_t seed) {
  size_t chunk = n < ((size_t)8 << 20) ? n : ((size_t)8 << 20);
  unsigned char *h = malloc(chunk);
  if (!h) return DFL_ENOMEM;
  fill_host(h, chunk, t, &seed);
  int rc = DFL_OK;
  for (size_t o = 0; o < n && !rc; o += chunk)
    if (cudaMemcpy(d + o, h, n - o < chunk ? n - o : chunk, cudaMemcpyHostToDevice) != cudaSuccess) rc = DFL_ERR;
  free(h);
  return rc;
}

static int run_cand(struct dfl_cuda_impl *im, mm_t *m, const cublasLtMatmulAlgo_t *a, const char *A, const char *B,
                    char *C) {
  return cublasLtMatmul(im->lt, m->d, &m->alpha, A, m->a, B, m->b, &m->beta, C, m->c, C, m->c, a, im->blas_ws,
                        BLAS_WS, im->stream) == CUBLAS_STATUS_SUCCESS ? DFL_OK : DFL_ERR;
}

/* Times the n candidates h (each its mean over DFL_TUNE_REPS runs, the minimum over DFL_TUNE_ROUNDS
** interleaved rounds) into ms[] (a candidate that fails to run: -1). DFL_ENOMEM: no room for the
** scratch operands (the caller keeps the heuristic's choice). */
static int time_cands(dfl_cuda *c, mm_t *m, const cublasLtMatmulHeuristicResult_t *h, int n, double *ms) {
  struct dfl_cuda_impl *im = c->impl;
  cudaDataType_t ta, tb, tc;
  uint64_t r[3], k[3];
  int64_t ld[3];
  TRY(layout(m->a, &ta, &r[0], &k[0], &ld[0]));
  TRY(layout(m->b, &tb, &r[1], &k[1], &ld[1]));
  TRY(layout(m->c, &tc, &r[2], &k[2], &ld[2]));
  size_t by[3] = {(size_t)ld[0] * k[0] * dtype_bytes(ta), (size_t)ld[1] * k[1] * dtype_bytes(tb),
                  (size_t)ld[2] * k[2] * dtype_bytes(tc)};
  char *buf[3] = {NULL, NULL, NULL};
  int rc = DFL_OK;
  for (int i = 0; i < 3 && !rc; i++)
    if (cudaMalloc((void **)&buf[i], by[i]) != cudaSuccess) {
      cudaGetLastError();
      buf[i] = NULL;
      rc = DFL_ENOMEM;
    }
  if (!rc) rc = fill_dev(buf[0], by[0], ta, 0x9e3779b97f4a7c15ull);
  if (!rc) rc = fill_dev(buf[1], by[1], tb, 0xd1b54a32d192ed03ull);
  if (!rc) rc = fill_dev(buf[2], by[2], tc, 0x8cb92ba72f3d8dd7ull);
  cudaEvent_t e0 = NULL, e1 = NULL;
  if (!rc && (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess)) rc = DFL_ERR;
  for (int i = 0; i < n; i++) ms[i] = h[i].state == CUBLAS_STATUS_SUCCESS ? 1e30 : -1;
  for (int round = 0; round < DFL_TUNE_ROUNDS && !rc; round++)
    for (int i = 0; i < n && !rc; i++) {
      if (ms[i] < 0) continue;
      if (round == 0 && run_cand(im, m, &h[i].algo, buf[0], buf[1], buf[2])) { ms[i] = -1; continue; } /* warm-up */
      if (cudaEventRecord(e0, im->stream) != cudaSuccess) { rc = DFL_ERR; break; }
      int bad = 0;
      for (int j = 0; j < DFL_TUNE_REPS && !bad; j++) bad = run_cand(im, m, &h[i].algo, buf[0], buf[1], buf[2]);
      float t = 0;
      if (cudaEventRecord(e1, im->stream) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
          cudaEventElapsedTime(&t, e0, e1) != cudaSuccess) rc = DFL_ERR;
      if (bad) ms[i] = -1;
      else if (t / DFL_TUNE_REPS < ms[i]) ms[i] = t / DFL_TUNE_REPS;
    }
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  for (int i = 0; i < 3; i++)
    if (buf[i]) cudaFree(buf[i]);
  if (rc == DFL_ERR) {
    fprintf(stderr, "dflc: gemm_tune: timing cuBLASLt's candidates failed: %s\n", cudaGetErrorString(cudaGetLastError()));
    return DFL_ERR;
  }
  return rc;
}

int dfl_cu_mm_pick(dfl_cuda *c, mm_t *m, const char *desc, const char *what) {
  struct dfl_cuda_impl *im = c->impl;
  cublasLtMatmulPreference_t pref;
  LT(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = BLAS_WS;
  LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  cublasLtMatmulHeuristicResult_t h[DFL_TUNE_CANDS];
  int nres = 0, want = im->gemm_tune ? DFL_TUNE_CANDS : 1;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(im->lt, m->d, m->a, m->b, m->c, m->c, pref, want, h, &nres);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || nres < 1) {
    fprintf(stderr, "%s:%d: cublasLtMatmulAlgoGetHeuristic found no algorithm for %s (%s): status %d\n", __FILE__,
            __LINE__, desc, what, (int)st);
    return DFL_ERR;
  }
  m->algo = h[0].algo;
  m->ok = 1;
  if (!im->gemm_tune || nres == 1) return DFL_OK;

  char key[768], root[TUNE_PATH], dir[TUNE_PATH + 8], path[TUNE_PATH + 40];
  snprintf(key, sizeof key, "%s cc%d cublasLt %zu | %s", im->gpu, im->cc, cublasLtGetVersion(), desc);
  for (int i = 0; i < im->tune.n; i++) /* the same GEMM earlier in this graph */
    if (!strcmp(im->tune.key[i], key)) {
      m->algo = im->tune.algo[i];
      return DFL_OK;
    }
  dfl_cache_dir(root, sizeof root);
  dir[0] = 0;
  if (root[0]) {
    snprintf(dir, sizeof dir, "%s/gemm", root);
    snprintf(path, sizeof path, "%s/%016llx.algo", dir, (unsigned long long)fnv1a(key));
  }
  cublasLtMatmulAlgo_t a;
  cublasLtMatmulHeuristicResult_t chk;
  if (dir[0] && cache_read(path, key, &a) &&
      cublasLtMatmulAlgoCheck(im->lt, m->d, m->a, m->b, m->c, m->c, &a, &chk) == CUBLAS_STATUS_SUCCESS &&
      chk.workspaceSize <= BLAS_WS) {
    m->algo = a;
    im->tune.cached++;
  } else {
    double ms[DFL_TUNE_CANDS];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = time_cands(c, m, h, nres, ms);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc == DFL_ENOMEM) {
      fprintf(stderr, "dflc: gemm_tune: no device memory left to time %s (%s): cuBLASLt's first choice kept\n", desc,
              what);
      return DFL_OK;
    }
    TRY(rc);
    int best = ms[0] > 0 ? 0 : -1;
    for (int i = 1; i < nres; i++)
      if (ms[i] > 0 && (best < 0 || ms[i] < ms[best])) best = i;
    if (best < 0) return DFL_OK; /* none ran: the heuristic's, and the first launch reports why */
    if (best != 0 && ms[0] > 0 && ms[best] > ms[0] * (1 - DFL_TUNE_MARGIN)) best = 0;
    m->algo = h[best].algo;
    im->tune.timed++;
    im->tune.changed += best != 0;
    im->tune.secs += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (ms[0] > 0) im->tune.saved_ms += ms[0] - ms[best];
    char why[160];
    snprintf(why, sizeof why, "candidate %d of %d: %.4f ms, cuBLASLt's first %.4f ms", best, nres, ms[best], ms[0]);
    if (dir[0]) cache_write(root, dir, path, key, &m->algo, why);
  }
  if (im->tune.n < DFL_TUNE_KEYS) {
    im->tune.key[im->tune.n] = strdup(key);
    if (im->tune.key[im->tune.n]) im->tune.algo[im->tune.n++] = m->algo;
  }
  return DFL_OK;
}

void dfl_cu_tune_free(struct dfl_cuda_impl *im) {
  for (int i = 0; i < im->tune.n; i++) free(im->tune.key[i]);
  im->tune.n = 0;
}

int dfl_cu_tune_describe(const dfl_cuda *c, char *buf, size_t cap) {
  const struct dfl_cuda_impl *im = c->impl;
  if (!im->gemm_tune) return snprintf(buf, cap, "gemm_tune = false: cuBLASLt's first heuristic choice");
  return snprintf(buf, cap, "gemm_tune: %d GEMM shapes, %d timed now (%.1f s, %d changed from cuBLASLt's first "
                            "choice, %.3f ms a pass saved), %d from the cache",
                  im->tune.n, im->tune.timed, im->tune.secs, im->tune.changed, im->tune.saved_ms, im->tune.cached);
}
