/*
** queue.h: the hidden-state queue, a ring of fixed-size slots between producers and consumers.
**
** A slot is one drafter micro-batch: the tapped target features [b*S, k*H] plus the ids, loss
** mask, anchors and keep the drafter needs; its layout (the byte size of each field) is fixed when
** the queue is made, from shapes the compiler knows. The same ring carries the loader's packed
** batches to the target devices (the prefetch ring), with other fields.
**
** Slots are sequence numbered: micro-batch k of the global order lives in slot k % depth. A
** producer of k waits until micro-batch k - depth has been released; a consumer of k waits until k
** has been committed. This gives the deterministic assignment (micro-batch k -> drafter k mod N,
** produced by target k mod M) without any reordering, back-pressure in both directions, and can
** not deadlock as long as every producer and consumer walks its own micro-batches in increasing
** order (the earliest unreleased micro-batch can always make progress). Waiting is on condition
** variables: no thread spins.
**
** Checking (on by default in the runner, always in the tests): commit stores an FNV-1a checksum
** of the payload, acquire_read verifies it, release verifies it again (a producer that wrote into
** a slot its consumer still held shows up here) and then poisons the payload; acquire_write
** verifies the poison is intact (a consumer that wrote into a released slot shows up there).
** A violation is reported and closes the queue, so every waiter returns an error: never a hang.
**
** Device queues (CUDA): the slot payload lives in device memory of the producer (or pinned host
** memory for cross-node), and ordering is by events instead of host state: see dfl_queue_xfer.
*/
#ifndef DFL_QUEUE_H
#define DFL_QUEUE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define DFL_QUEUE_MAX_FIELDS 8
#define DFL_QUEUE_MAX_DEPTH 4096

/* Hooks a device backend fills so that slots can live in device memory and the ring orders
** device work instead of host work (see docs/pipeline.md, "CUDA"). All NULL for the CPU backend:
** the producer's writes are complete when it calls commit.
**   on_commit(slot): producer side, after enqueueing its copies into the slot on its stream:
**                    cudaEventRecord(slot_event[i], producer_stream).
**   on_acquire(slot): consumer side, before reading: cudaStreamWaitEvent(consumer_stream,
**                    slot_event[i]) (peer access) or cudaMemcpyPeerAsync into the landing slot
**                    then an event of its own.
**   on_release(slot): consumer side, after enqueueing its reads: cudaEventRecord(done_event[i],
**                    consumer_stream); the next producer of slot i waits on done_event[i] in
**                    on_reuse before overwriting.
**   on_reuse(slot):  producer side, before writing: cudaStreamWaitEvent(producer_stream,
**                    done_event[i]). */
typedef struct dfl_queue_xfer {
  void *ctx;
  int (*on_commit)(void *ctx, int slot);
  int (*on_acquire)(void *ctx, int slot);
  int (*on_release)(void *ctx, int slot);
  int (*on_reuse)(void *ctx, int slot);
} dfl_queue_xfer;

typedef struct dfl_slot {
  int64_t seq;             /* the micro-batch it holds (valid while full) */
  int index;               /* slot number in the ring */
  int full;
  uint64_t checksum;
  void *field[DFL_QUEUE_MAX_FIELDS]; /* payload fields, contiguous in one block */
  double tokens;           /* real (non-padding) tokens of the micro-batch, for rates */
  int producer;            /* which device wrote it (diagnostics) */
} dfl_slot;

typedef struct dfl_queue {
  char name[32];
  int depth;
  int n_fields;
  size_t field_bytes[DFL_QUEUE_MAX_FIELDS];
  size_t slot_bytes;
  int check;               /* checksum + poisoning */
  dfl_slot *slots;
  void *payload;           /* depth * slot_bytes */
  int64_t *next_write;     /* per slot: the only seq a producer may write there next */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int closed;              /* error or shutdown: every wait returns NULL */
  char error[256];
  dfl_queue_xfer xfer;
  /* occupancy over time: seconds spent with i full slots, since the last dfl_queue_sample */
  double *occ_time;
  double last_change;
  int n_full;
  int64_t committed, released; /* since the last sample */
  double tokens_released;
} dfl_queue;

/* Make a queue of `depth` slots whose payload is n_fields fields of the given byte sizes.
** check = 1: checksum and poison (see above). Returns DFL_OK or DFL_ENOMEM / DFL_EFORMAT. */
int dfl_queue_init(dfl_queue *q, const char *name, int depth, const size_t *field_bytes, int n_fields, int check);
void dfl_queue_free(dfl_queue *q);

/* Producer: block until slot seq % depth may hold micro-batch `seq`; NULL when the queue was
** closed (error already recorded). Fill slot->field[...] then commit. */
dfl_slot *dfl_queue_acquire_write(dfl_queue *q, int64_t seq);
int dfl_queue_commit(dfl_queue *q, dfl_slot *s);

/* Consumer: block until micro-batch `seq` is committed; NULL when closed or its checksum is
** wrong. Read the fields, then release. */
dfl_slot *dfl_queue_acquire_read(dfl_queue *q, int64_t seq);
int dfl_queue_release(dfl_queue *q, dfl_slot *s);

/* Stop: wake every waiter (they return NULL). why may be NULL (normal shutdown). */
void dfl_queue_close(dfl_queue *q, const char *why);

/* Occupancy since the previous call: hist[i] = fraction of the time with i full slots
** (i = 0..depth), rates in slots committed / released; resets the window. */
typedef struct dfl_queue_sample {
  double seconds;
  double hist[DFL_QUEUE_MAX_DEPTH + 1];
  double empty, full, mean;   /* fraction of time empty / full, mean full slots */
  int64_t committed, released;
  double tokens_released;
} dfl_queue_sample;
void dfl_queue_sample_take(dfl_queue *q, dfl_queue_sample *out);

/* FNV-1a over bytes (exposed for tests). */
uint64_t dfl_queue_hash(const void *p, size_t n, uint64_t h);

#endif
