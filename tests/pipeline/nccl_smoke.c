/*
** nccl_smoke: a manual check of the NCCL path on a GPU machine (not a ctest: no GPU in CI).
** One process, world = number of visible GPUs (one thread per GPU): dlopen NCCL through
** collective.c, a unique id, ncclCommInitRank per thread, an in-place sum of random fp32 buffers,
** compared with the host sum. libcudart is opened with dlopen too.
**   cc -std=c11 -D_GNU_SOURCE -I. tests/pipeline/nccl_smoke.c runtime/collective.c -ldl -lpthread -lm
*/
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/pipeline/collective.h"

#define N 100003
static int (*setdev)(int), (*getcount)(int *), (*dmalloc)(void **, size_t), (*memcpy_)(void *, const void *, size_t, int),
    (*sync_)(void);
static dfl_coll C;
static unsigned char id[DFL_NCCL_ID_BYTES];
static int W;
static float host[8][N];
static int ok[8];

static void *rank_main(void *arg) {
  int r = (int)(long)arg;
  char err[256];
  setdev(r);
  float *d;
  if (dmalloc((void **)&d, sizeof(float) * N)) return NULL;
  memcpy_(d, host[r], sizeof(float) * N, 1);
  if (dfl_nccl_init_rank(&C, r, W, id, W, r, NULL, err, sizeof err)) { printf("rank %d: %s\n", r, err); return NULL; }
  size_t len = N;
  if (dfl_nccl_allreduce(&C, r, &d, &len, 1, err, sizeof err)) { printf("rank %d: %s\n", r, err); return NULL; }
  sync_();
  static float out[8][N];
  memcpy_(out[r], d, sizeof(float) * N, 2);
  double maxerr = 0;
  for (int i = 0; i < N; i++) {
    double ref = 0;
    for (int k = 0; k < W; k++) ref += host[k][i];
    maxerr = fmax(maxerr, fabs(out[r][i] - ref));
  }
  printf("rank %d: max |nccl - host| = %.3g\n", r, maxerr);
  ok[r] = maxerr < 1e-4;
  return NULL;
}

int main(void) {
  char err[512];
  void *rt = dlopen("libcudart.so", RTLD_NOW);
  if (!rt) rt = dlopen("libcudart.so.13", RTLD_NOW);
  if (!rt) rt = dlopen("libcudart.so.12", RTLD_NOW);
  if (!rt) { printf("no libcudart: %s\n", dlerror()); return 2; }
  setdev = dlsym(rt, "cudaSetDevice");
  getcount = dlsym(rt, "cudaGetDeviceCount");
  dmalloc = dlsym(rt, "cudaMalloc");
  memcpy_ = dlsym(rt, "cudaMemcpy");
  sync_ = dlsym(rt, "cudaDeviceSynchronize");
  getcount(&W);
  if (W > 8) W = 8;
  printf("%d GPUs\n", W);
  if (dfl_nccl_load(&C, err, sizeof err)) { printf("%s\n", err); return 2; }
  if (dfl_nccl_unique_id(&C, id, err, sizeof err)) { printf("%s\n", err); return 1; }
  /* size the tables before the threads race for them */
  C.comms = calloc(16, sizeof *C.comms);
  C.streams = C.comms + 8;
  C.n_local = W;
  C.world = W;
  srand(7);
  for (int r = 0; r < W; r++) for (int i = 0; i < N; i++) host[r][i] = (float)rand() / RAND_MAX - 0.5f;
  pthread_t th[8];
  for (int r = 0; r < W; r++) pthread_create(&th[r], NULL, rank_main, (void *)(long)r);
  int good = 1;
  for (int r = 0; r < W; r++) { pthread_join(th[r], NULL); good &= ok[r]; }
  printf(good ? "ok\n" : "FAIL\n");
  return good ? 0 : 1;
}
