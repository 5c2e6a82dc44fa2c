/*
** monitor.h: pipeline diagnostics: where each device's time goes, how full the hidden-state queue
** is over time, producer/consumer rates, device memory, and a one-line verdict per report
** interval naming the side that bounds throughput.
**
** Each device thread is always in exactly one state (busy computing, waiting for its input,
** blocked on its output, in the all-reduce, or done); it announces transitions with dfl_mon_set
** and the time between transitions is charged to the state it leaves. A report charges the
** states in progress up to "now", so a device stalled across the whole interval is seen in that
** interval, not when it finally wakes.
*/
#ifndef DFL_MON_H
#define DFL_MON_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/pipeline/queue.h"

#define DFL_MON_MAX_DEV 64

typedef enum {
  DFL_DS_BUSY = 0,   /* computing (including copies into / out of its slots) */
  DFL_DS_WAIT_IN,    /* waiting for its input: a drafter on the queue, a target on the loader */
  DFL_DS_WAIT_OUT,   /* blocked on a full ring: a target (or the loader) with no free slot */
  DFL_DS_SYNC,       /* in the gradient all-reduce (waiting for the slowest replica) */
  DFL_DS_IDLE,       /* finished / not started */
  DFL_DS_COUNT
} dfl_mon_state;

typedef enum { DFL_DR_LOADER = 0, DFL_DR_TARGET, DFL_DR_DRAFTER, DFL_DR_BOTH } dfl_mon_role;

typedef struct dfl_mon_dev {
  char name[48];
  dfl_mon_role role;
  dfl_mon_state state;
  double since;                /* when the current state began (or the last report) */
  double t[DFL_DS_COUNT];      /* seconds per state in this interval */
  int64_t items;               /* micro-batches finished in this interval */
  int64_t mem_bytes;           /* device memory in use (CPU: planned arena + persistent, constant) */
} dfl_mon_dev;

/* One interval's summary across devices: what the verdict reads. Fractions of the interval. */
typedef struct dfl_mon_summary {
  int has_queue;               /* separate target and drafter devices */
  double target_busy, target_blocked, target_starved; /* means over target devices */
  double target_done;          /* targets finished their share while drafters still work: ahead */
  double drafter_busy, drafter_idle, drafter_sync;    /* means over drafter devices */
  double q_empty, q_full, q_mean;                     /* hidden-state queue occupancy */
  int q_depth;
} dfl_mon_summary;

typedef enum { DFL_BOUND_BALANCED = 0, DFL_BOUND_TARGET, DFL_BOUND_DRAFTER, DFL_BOUND_DATA } dfl_bound;

typedef struct dfl_mon {
  pthread_mutex_t mu;
  int n;
  dfl_mon_dev dev[DFL_MON_MAX_DEV];
  dfl_queue *queue;            /* hidden-state queue, NULL when colocated */
  dfl_queue *prefetch;         /* loader -> first stage */
  double t_last;
  /* device memory query (CUDA fills it with cudaMemGetInfo); NULL: mem_bytes as set */
  int64_t (*mem_fn)(void *ctx, int dev);
  void *mem_ctx;
  double threshold;            /* a side counts as the bound above this idle/blocked share (0.10) */
} dfl_mon;

int dfl_mon_init(dfl_mon *d, dfl_queue *queue, dfl_queue *prefetch);
void dfl_mon_free(dfl_mon *d);
int dfl_mon_add_dev(dfl_mon *d, const char *name, dfl_mon_role role, int64_t mem_bytes);
void dfl_mon_set(dfl_mon *d, int dev, dfl_mon_state st);
void dfl_mon_item(dfl_mon *d, int dev);   /* one micro-batch done */

/* The verdict for a summary: writes the one-liner into out and returns the bound side. */
dfl_bound dfl_mon_verdict(const dfl_mon_summary *s, double threshold, char *out, size_t n);

/* Close the interval [t_last, now): summary and verdict; a "diag ..." line to log (if not NULL)
** and one JSON object line to jsonl (if not NULL). Returns the bound side. */
dfl_bound dfl_mon_report(dfl_mon *d, int64_t step, FILE *log, FILE *jsonl, dfl_mon_summary *sum_out,
                          char *verdict, size_t vn);

#endif
