/*
** test_queue: the hidden-state slot ring. Producers and consumers (threads) with random delays
** move sequence-numbered micro-batches; every consumer checks that it got exactly micro-batch k
** (content derived from k and the seed) in the deterministic assignment k mod C, that the ring
** never held more than `depth` micro-batches, and that nothing deadlocks at depth 1. Then the
** poisoning checks are shown to fire: a write after release, a producer overwriting a held slot,
** a corrupted payload; and close() wakes a waiter.
*/
#include <pthread.h>
#include <stdatomic.h>

#include "runtime/io/data.h"
#include "runtime/pipeline/queue.h"
#include "tests/pipeline/common.h"

typedef struct {
  dfl_queue *q;
  int id, n, total;
  uint64_t seed;
  int max_delay_us;
  int errors;
} worker;

static atomic_int in_flight, max_in_flight;

static uint32_t value(uint64_t seed, int64_t k, size_t i) {
  uint64_t x = seed ^ ((uint64_t)k * 0x9e3779b97f4a7c15ull) ^ (i * 0xbf58476d1ce4e5b9ull);
  x ^= x >> 31;
  return (uint32_t)(x * 0x94d049bb133111ebull >> 32);
}

static void nap(dfl_rng *r, int max_us) {
  if (max_us > 0) usleep((useconds_t)dfl_rng_below(r, (uint64_t)max_us));
}

static void *producer(void *arg) {
  worker *w = arg;
  dfl_rng r;
  dfl_rng_seed(&r, w->seed + 17 * (uint64_t)w->id);
  for (int64_t k = w->id; k < w->total; k += w->n) {
    nap(&r, w->max_delay_us);
    dfl_slot *s = dfl_queue_acquire_write(w->q, k);
    if (!s) { w->errors++; return NULL; }
    for (int f = 0; f < w->q->n_fields; f++) {
      uint32_t *p = s->field[f];
      for (size_t i = 0; i < w->q->field_bytes[f] / 4; i++) p[i] = value(w->seed, k, i + 1000 * (size_t)f);
    }
    int now = atomic_fetch_add(&in_flight, 1) + 1, m = atomic_load(&max_in_flight);
    while (now > m && !atomic_compare_exchange_weak(&max_in_flight, &m, now)) {}
    nap(&r, w->max_delay_us / 4);   /* slow writer: the slot must not be visible before commit */
    if (dfl_queue_commit(w->q, s)) { w->errors++; return NULL; }
  }
  return NULL;
}

static void *consumer(void *arg) {
  worker *w = arg;
  dfl_rng r;
  dfl_rng_seed(&r, w->seed + 31 * (uint64_t)w->id + 5);
  for (int64_t k = w->id; k < w->total; k += w->n) {
    dfl_slot *s = dfl_queue_acquire_read(w->q, k);
    if (!s) { w->errors++; return NULL; }
    if (s->seq != k) w->errors++;
    nap(&r, w->max_delay_us);       /* slow reader: the producer of k + depth must wait */
    for (int f = 0; f < w->q->n_fields; f++) {
      const uint32_t *p = s->field[f];
      for (size_t i = 0; i < w->q->field_bytes[f] / 4; i++)
        if (p[i] != value(w->seed, k, i + 1000 * (size_t)f)) { w->errors++; break; }
    }
    atomic_fetch_sub(&in_flight, 1);
    if (dfl_queue_release(w->q, s)) { w->errors++; return NULL; }
  }
  return NULL;
}

static void run(uint64_t seed, int depth, int P, int C, int total, int delay_us) {
  dfl_queue q;
  size_t fb[3] = {4 * (1 + seed % 97), 4 * 33, 4 * (1 + (seed >> 8) % 500)};
  CHECK(dfl_queue_init(&q, "test", depth, fb, 3, 1) == DFL_OK, "init");
  atomic_store(&in_flight, 0);
  atomic_store(&max_in_flight, 0);
  worker w[16];
  pthread_t th[16];
  for (int i = 0; i < P + C; i++) {
    w[i] = (worker){&q, i < P ? i : i - P, i < P ? P : C, total, seed, delay_us, 0};
    pthread_create(&th[i], NULL, i < P ? producer : consumer, &w[i]);
  }
  int errors = 0;
  for (int i = 0; i < P + C; i++) {
    pthread_join(th[i], NULL);
    errors += w[i].errors;
  }
  dfl_queue_sample smp;
  dfl_queue_sample_take(&q, &smp);
  CHECK(errors == 0, "depth %d, %d producers, %d consumers: %d errors (%s)", depth, P, C, errors, q.error);
  CHECK(atomic_load(&max_in_flight) <= depth, "depth %d but %d micro-batches in flight", depth,
        atomic_load(&max_in_flight));
  CHECK(smp.committed == total && smp.released == total, "committed %" PRId64 " released %" PRId64, smp.committed,
        smp.released);
  double hs = 0;
  for (int i = 0; i <= depth; i++) hs += smp.hist[i];
  CHECK(hs > 0.999 && hs < 1.001, "occupancy histogram sums to %g", hs);
  printf("depth %d, %d producers -> %d consumers, %d micro-batches: ok (max in flight %d, mean full %.2f)\n", depth,
         P, C, total, atomic_load(&max_in_flight), smp.mean);
  dfl_queue_free(&q);
}

static void *waiter(void *arg) {
  dfl_queue *q = arg;
  return dfl_queue_acquire_read(q, 3);   /* never produced */
}

int main(void) {
  uint64_t seed = test_seed();
  dfl_rng r;
  dfl_rng_seed(&r, seed);
  run(seed, 1, 1, 1, 40, 300);
  run(seed + 1, 1, 2, 2, 60, 300);
  run(seed + 2, 1 + (int)dfl_rng_below(&r, 4), 1 + (int)dfl_rng_below(&r, 3), 1 + (int)dfl_rng_below(&r, 3), 120, 500);
  run(seed + 3, 8, 3, 2, 200, 200);
  run(seed + 4, 2, 2, 3, 100, 0);   /* no delays: maximum contention */

  /* the checks fire */
  size_t fb[1] = {256};
  dfl_queue q;
  /* 1. a consumer that writes into a slot after releasing it: caught by the next producer */
  CHECK(dfl_queue_init(&q, "poison", 1, fb, 1, 1) == DFL_OK, "init");
  dfl_slot *s = dfl_queue_acquire_write(&q, 0);
  memset(s->field[0], 7, 256);
  dfl_queue_commit(&q, s);
  s = dfl_queue_acquire_read(&q, 0);
  CHECK(s && dfl_queue_release(&q, s) == DFL_OK, "clean release");
  ((char *)s->field[0])[100] = 1;   /* the bug */
  CHECK(dfl_queue_acquire_write(&q, 1) == NULL && q.closed, "write after release not detected");
  printf("write after release detected: %s\n", q.error);
  dfl_queue_free(&q);
  /* 2. a producer that overwrites a slot its consumer still holds: caught at release */
  CHECK(dfl_queue_init(&q, "held", 1, fb, 1, 1) == DFL_OK, "init");
  s = dfl_queue_acquire_write(&q, 0);
  memset(s->field[0], 3, 256);
  dfl_queue_commit(&q, s);
  s = dfl_queue_acquire_read(&q, 0);
  ((char *)s->field[0])[5] = 9;     /* the bug: written while held */
  CHECK(dfl_queue_release(&q, s) != DFL_OK && q.closed, "overwrite of a held slot not detected");
  printf("overwrite while held detected: %s\n", q.error);
  dfl_queue_free(&q);
  /* 3. corrupted between commit and read */
  CHECK(dfl_queue_init(&q, "corrupt", 2, fb, 1, 1) == DFL_OK, "init");
  s = dfl_queue_acquire_write(&q, 0);
  memset(s->field[0], 1, 256);
  dfl_queue_commit(&q, s);
  ((char *)s->field[0])[255] ^= 1;
  CHECK(dfl_queue_acquire_read(&q, 0) == NULL && q.closed, "corruption not detected");
  printf("corruption detected: %s\n", q.error);
  dfl_queue_free(&q);
  /* 4. close wakes a blocked consumer (no hang on a failed producer) */
  CHECK(dfl_queue_init(&q, "close", 2, fb, 1, 1) == DFL_OK, "init");
  pthread_t th;
  void *got = (void *)1;
  pthread_create(&th, NULL, waiter, &q);
  usleep(20000);
  dfl_queue_close(&q, "test shutdown");
  pthread_join(th, &got);
  CHECK(got == NULL, "waiter not woken with NULL");
  dfl_queue_free(&q);
  /* 5. bad shapes are refused */
  CHECK(dfl_queue_init(&q, "bad", 0, fb, 1, 1) != DFL_OK, "depth 0 accepted");
  printf("ok\n");
  return 0;
}
