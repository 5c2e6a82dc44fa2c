/*
** queue.c: the sequence-numbered slot ring (see queue.h).
*/
#include "runtime/pipeline/queue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compiler/status.h"

#define POISON 0xff   /* NaN as float, -1 as int: a read of a released slot is loud */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t dfl_queue_hash(const void *p, size_t n, uint64_t h) {
  const unsigned char *b = p;
  /* 8 bytes at a time: FNV-1a over 64-bit words, fast enough to run on every slot. */
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, b + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static uint64_t slot_hash(const dfl_queue *q, const dfl_slot *s) {
  uint64_t h = 1469598103934665603ull ^ (uint64_t)s->seq;
  return dfl_queue_hash(s->field[0], q->slot_bytes, h);
}

static int poisoned(const dfl_queue *q, const dfl_slot *s) {
  const unsigned char *b = s->field[0];
  for (size_t i = 0; i < q->slot_bytes; i++)
    if (b[i] != POISON) return 0;
  return 1;
}

/* Occupancy accounting: called with the lock held before n_full changes. */
static void occ_tick(dfl_queue *q) {
  double t = now_s();
  q->occ_time[q->n_full] += t - q->last_change;
  q->last_change = t;
}

/* Record the first error and wake everyone; lock held. */
static void fail_locked(dfl_queue *q, const char *fmt, long long a, long long b) {
  if (!q->closed) {
    snprintf(q->error, sizeof q->error, fmt, q->name, a, b);
    fprintf(stderr, "dflc: %s\n", q->error);
  }
  q->closed = 1;
  pthread_cond_broadcast(&q->cv);
}

int dfl_queue_init(dfl_queue *q, const char *name, int depth, const size_t *field_bytes, int n_fields, int check) {
  memset(q, 0, sizeof *q);
  snprintf(q->name, sizeof q->name, "%s", name);
  if (depth < 1 || depth > DFL_QUEUE_MAX_DEPTH || n_fields < 1 || n_fields > DFL_QUEUE_MAX_FIELDS) {
    fprintf(stderr, "dflc: queue %s: depth %d (1..%d) or %d fields (1..%d) out of range\n", name, depth,
            DFL_QUEUE_MAX_DEPTH, n_fields, DFL_QUEUE_MAX_FIELDS);
    return DFL_EFORMAT;
  }
  q->depth = depth;
  q->n_fields = n_fields;
  q->check = check;
  for (int f = 0; f < n_fields; f++) {
    /* fields 64-byte aligned inside the slot so each can be handed to a kernel directly */
    q->field_bytes[f] = field_bytes[f];
    q->slot_bytes += (field_bytes[f] + 63) & ~(size_t)63;
  }
  q->slots = calloc((size_t)depth, sizeof *q->slots);
  q->next_write = calloc((size_t)depth, sizeof *q->next_write);
  q->occ_time = calloc((size_t)depth + 1, sizeof *q->occ_time);
  q->payload = aligned_alloc(64, q->slot_bytes * (size_t)depth);
  if (!q->slots || !q->next_write || !q->occ_time || !q->payload) {
    dfl_queue_free(q);
    return DFL_ENOMEM;
  }
  memset(q->payload, POISON, q->slot_bytes * (size_t)depth);
  for (int i = 0; i < depth; i++) {
    dfl_slot *s = &q->slots[i];
    s->index = i;
    s->seq = -1;
    q->next_write[i] = i;
    size_t off = 0;
    for (int f = 0; f < n_fields; f++) {
      s->field[f] = (char *)q->payload + (size_t)i * q->slot_bytes + off;
      off += (field_bytes[f] + 63) & ~(size_t)63;
    }
  }
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->cv, NULL);
  q->last_change = now_s();
  return DFL_OK;
}

void dfl_queue_free(dfl_queue *q) {
  if (q->slots) {
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
  }
  free(q->slots);
  free(q->next_write);
  free(q->occ_time);
  free(q->payload);
  memset(q, 0, sizeof *q);
}

dfl_slot *dfl_queue_acquire_write(dfl_queue *q, int64_t seq) {
  int i = (int)(seq % q->depth);
  dfl_slot *s = &q->slots[i];
  pthread_mutex_lock(&q->mu);
  while (!q->closed && q->next_write[i] != seq) {
    if (q->next_write[i] > seq) {
      fail_locked(q, "queue %s: micro-batch %lld produced twice (slot already at %lld)", (long long)seq,
                  (long long)q->next_write[i]);
      break;
    }
    pthread_cond_wait(&q->cv, &q->mu);
  }
  if (q->closed) {
    pthread_mutex_unlock(&q->mu);
    return NULL;
  }
  pthread_mutex_unlock(&q->mu);
  if (q->xfer.on_reuse && q->xfer.on_reuse(q->xfer.ctx, i)) {
    dfl_queue_close(q, "device wait before slot reuse failed");
    return NULL;
  }
  if (q->check && !poisoned(q, s)) {
    pthread_mutex_lock(&q->mu);
    fail_locked(q, "queue %s: slot of micro-batch %lld was written after its release (poison damaged, seq %lld)",
                (long long)seq, (long long)s->seq);
    pthread_mutex_unlock(&q->mu);
    return NULL;
  }
  s->seq = seq;
  return s;
}

int dfl_queue_commit(dfl_queue *q, dfl_slot *s) {
  if (q->check) s->checksum = slot_hash(q, s);
  if (q->xfer.on_commit && q->xfer.on_commit(q->xfer.ctx, s->index)) {
    dfl_queue_close(q, "device event record on commit failed");
    return DFL_ERR;
  }
  pthread_mutex_lock(&q->mu);
  occ_tick(q);
  s->full = 1;
  q->n_full++;
  q->committed++;
  pthread_cond_broadcast(&q->cv);
  int rc = q->closed ? DFL_ERR : DFL_OK;
  pthread_mutex_unlock(&q->mu);
  return rc;
}

dfl_slot *dfl_queue_acquire_read(dfl_queue *q, int64_t seq) {
  dfl_slot *s = &q->slots[seq % q->depth];
  pthread_mutex_lock(&q->mu);
  while (!q->closed && !(s->full && s->seq == seq)) pthread_cond_wait(&q->cv, &q->mu);
  if (q->closed) {
    pthread_mutex_unlock(&q->mu);
    return NULL;
  }
  pthread_mutex_unlock(&q->mu);
  if (q->xfer.on_acquire && q->xfer.on_acquire(q->xfer.ctx, s->index)) {
    dfl_queue_close(q, "device wait on a slot failed");
    return NULL;
  }
  if (q->check && slot_hash(q, s) != s->checksum) {
    pthread_mutex_lock(&q->mu);
    fail_locked(q, "queue %s: micro-batch %lld arrived corrupted (checksum mismatch in slot %lld)", (long long)seq,
                (long long)s->index);
    pthread_mutex_unlock(&q->mu);
    return NULL;
  }
  return s;
}

int dfl_queue_release(dfl_queue *q, dfl_slot *s) {
  if (q->check) {
    if (slot_hash(q, s) != s->checksum) {
      pthread_mutex_lock(&q->mu);
      fail_locked(q, "queue %s: micro-batch %lld changed while its consumer held it (slot %lld reused too early)",
                  (long long)s->seq, (long long)s->index);
      pthread_mutex_unlock(&q->mu);
      return DFL_ERR;
    }
    memset(s->field[0], POISON, q->slot_bytes);
  }
  if (q->xfer.on_release && q->xfer.on_release(q->xfer.ctx, s->index)) {
    dfl_queue_close(q, "device event record on release failed");
    return DFL_ERR;
  }
  pthread_mutex_lock(&q->mu);
  occ_tick(q);
  s->full = 0;
  q->n_full--;
  q->released++;
  q->tokens_released += s->tokens;
  q->next_write[s->index] = s->seq + q->depth;
  pthread_cond_broadcast(&q->cv);
  int rc = q->closed ? DFL_ERR : DFL_OK;
  pthread_mutex_unlock(&q->mu);
  return rc;
}

void dfl_queue_close(dfl_queue *q, const char *why) {
  pthread_mutex_lock(&q->mu);
  if (why && !q->closed) {
    snprintf(q->error, sizeof q->error, "queue %s: %s", q->name, why);
    fprintf(stderr, "dflc: %s\n", q->error);
  }
  q->closed = 1;
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->mu);
}

void dfl_queue_sample_take(dfl_queue *q, dfl_queue_sample *out) {
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&q->mu);
  occ_tick(q);
  double tot = 0;
  for (int i = 0; i <= q->depth; i++) tot += q->occ_time[i];
  out->seconds = tot;
  for (int i = 0; i <= q->depth; i++) {
    out->hist[i] = tot > 0 ? q->occ_time[i] / tot : 0;
    out->mean += i * out->hist[i];
    q->occ_time[i] = 0;
  }
  out->empty = out->hist[0];
  out->full = out->hist[q->depth];
  out->committed = q->committed;
  out->released = q->released;
  out->tokens_released = q->tokens_released;
  q->committed = q->released = 0;
  q->tokens_released = 0;
  pthread_mutex_unlock(&q->mu);
}
