/*
** test_collective: the CPU all-reduce across replica threads. Random segment lists and values;
** every rank must end with exactly sum over ranks 0..W-1 (in rank order, in double, rounded
** once), the same bits on every rank, over several reuses of one communicator. Mismatched
** lengths and an aborting rank must give an error on every rank, not a hang. dlopen of NCCL
** must fail cleanly with a message when the library is absent.
*/
#include <math.h>
#include <pthread.h>

#include "runtime/pipeline/collective.h"
#include "runtime/io/data.h"
#include "tests/pipeline/common.h"

#define MAXW 6
#define NSEG 5

typedef struct {
  dfl_coll *c;
  int rank, rounds;
  size_t lens[NSEG];
  float *buf[NSEG];
  int bad_len, abort_at;
  int rc;
} rank_t;

static float *data[MAXW][NSEG];   /* the inputs of every round, per rank */

static void fill(uint64_t seed, int round, int W, const size_t *lens) {
  dfl_rng r;
  dfl_rng_seed(&r, seed + (uint64_t)round);
  for (int w = 0; w < W; w++)
    for (int s = 0; s < NSEG; s++)
      for (size_t i = 0; i < lens[s]; i++) data[w][s][i] = dfl_rng_normal(&r) * (float)(1 + s);
}

static void *rank_main(void *arg) {
  rank_t *t = arg;
  for (int round = 0; round < t->rounds; round++) {
    for (int s = 0; s < NSEG; s++) memcpy(t->buf[s], data[t->rank][s], t->lens[s] * sizeof(float));
    if (t->abort_at == round) {
      dfl_coll_abort(t->c);
      t->rc = DFL_ERR;
      return NULL;
    }
    size_t lens[NSEG];
    memcpy(lens, t->lens, sizeof lens);
    if (t->bad_len) lens[2]--;
    t->rc = dfl_coll_allreduce(t->c, t->rank, t->buf, lens, NSEG);
    if (t->rc) return NULL;
  }
  return NULL;
}

static int run(int W, const size_t *lens, int rounds, int bad_rank, int abort_rank, rank_t *t) {
  dfl_coll c;
  CHECK(dfl_coll_init_cpu(&c, W) == DFL_OK, "init");
  pthread_t th[MAXW];
  for (int w = 0; w < W; w++) {
    t[w] = (rank_t){&c, w, rounds, {0}, {0}, w == bad_rank, w == abort_rank ? rounds - 1 : -1, 0};
    for (int s = 0; s < NSEG; s++) {
      t[w].lens[s] = lens[s];
      t[w].buf[s] = malloc(sizeof(float) * lens[s]);
    }
    pthread_create(&th[w], NULL, rank_main, &t[w]);
  }
  int errs = 0;
  for (int w = 0; w < W; w++) {
    pthread_join(th[w], NULL);
    errs += t[w].rc != DFL_OK;
  }
  dfl_coll_free(&c);
  return errs;
}

int main(void) {
  uint64_t seed = test_seed();
  dfl_rng r;
  dfl_rng_seed(&r, seed);
  size_t lens[NSEG];
  for (int s = 0; s < NSEG; s++) lens[s] = 1 + dfl_rng_below(&r, s == 0 ? 3 : 3000);
  for (int w = 0; w < MAXW; w++)
    for (int s = 0; s < NSEG; s++) data[w][s] = malloc(sizeof(float) * lens[s]);
  rank_t t[MAXW];
  for (int W = 1; W <= MAXW; W++) {
    const int rounds = 3;
    fill(seed, rounds - 1, W, lens);   /* the last round's inputs are what the ranks end with */
    /* every round uses the same inputs: fill once, so the reference is the last round's sum */
    CHECK(run(W, lens, rounds, -1, -1, t) == 0, "W=%d: all-reduce failed", W);
    for (int s = 0; s < NSEG; s++)
      for (size_t i = 0; i < lens[s]; i++) {
        double ref = 0;
        for (int w = 0; w < W; w++) ref += (double)data[w][s][i];
        float want = (float)ref;
        for (int w = 0; w < W; w++)
          CHECK(memcmp(&t[w].buf[s][i], &want, sizeof want) == 0, "W=%d rank %d seg %d [%zu]: %.9g, want %.9g", W, w,
                s, i, t[w].buf[s][i], want);
      }
    for (int w = 0; w < W; w++)
      for (int s = 0; s < NSEG; s++) free(t[w].buf[s]);
    printf("W=%d: %zu+%zu+%zu+%zu+%zu floats, bit-identical sums on every rank\n", W, lens[0], lens[1], lens[2],
           lens[3], lens[4]);
  }
  /* a rank with different lengths: every rank errors */
  CHECK(run(3, lens, 1, 1, -1, t) == 3, "mismatched lengths not reported on every rank");
  for (int w = 0; w < 3; w++) for (int s = 0; s < NSEG; s++) free(t[w].buf[s]);
  /* a rank that fails before the collective: the others return an error instead of hanging */
  CHECK(run(4, lens, 2, -1, 2, t) == 4, "abort did not release every rank");
  for (int w = 0; w < 4; w++) for (int s = 0; s < NSEG; s++) free(t[w].buf[s]);
  /* NCCL: absent here (or present): either way no crash, a message when absent */
  dfl_coll c;
  memset(&c, 0, sizeof c);
  char err[512] = "";
  setenv("DFL_NCCL_LIB", "/nonexistent/libnccl.so.2", 1);
  CHECK(dfl_nccl_load(&c, err, sizeof err) == DFL_EIO && strstr(err, "DFL_NCCL_LIB"), "missing NCCL: '%s'", err);
  printf("missing NCCL reported: %s\n", err);
  printf("ok\n");
  return 0;
}
