/*
** topo.h: which device handles which micro-batch of the global order, for every topology the
** language allows (pure functions, no threads; docs/pipeline.md "Data order").
**
** Roles: M target-only devices; N drafter replicas, of which C are colocated (target + drafter on
** one device, fed straight from the loader) and D = N - C drafter-only (fed through the hidden-state
** queue by the target-only devices). Replicas are numbered 0..N-1 in spec order.
**   slice k (batch/N sequences) -> replica k mod N, so the replicas' union per micro-step is the
**   single device's batch, whatever their kinds;
**   the slices of drafter-only replicas, in k order, are the hidden-state queue's sequence
**   h = (k / N) * D + q (q: the replica's position among the drafter-only ones); target-only
**   device h mod M produces h.
** Pure split (C = 0) gives h = k: the queue order of the split runner; all colocated (D = 0) has
** no queue.
*/
#ifndef DFL_TOPO_H
#define DFL_TOPO_H

#include <stddef.h>
#include <stdint.h>

#define DFL_TOPO_MAX 256

typedef struct dfl_topo {
  int M, N, C, D;
  int n_dev;                 /* devices with a role (one process each when split across processes) */
  int role[DFL_TOPO_MAX];    /* of device i: 1 target-only, 2 drafter-only, 3 both */
  int idx[DFL_TOPO_MAX];     /* of device i: its target index (role 1) or replica index */
  int tdev[DFL_TOPO_MAX];    /* target m -> device index */
  int rdev[DFL_TOPO_MAX];    /* replica j -> device index */
  int coloc[DFL_TOPO_MAX];   /* replica j runs the target too */
  int dpos[DFL_TOPO_MAX];    /* replica j's position among the drafter-only replicas; -1 if colocated */
  int drep[DFL_TOPO_MAX];    /* drafter-only position q -> replica index */
} dfl_topo;

/* roles[i] for the spec's devices with a role, in spec order: 1 target-only, 2 drafter-only,
** 3 both. Errors (no replica, drafter-only replicas without a target-only device, target-only
** devices with nobody to feed, too many devices) say what to change; returns DFL_OK or DFL_EFORMAT. */
int dfl_topo_init(dfl_topo *t, const int *roles, int n, char *err, size_t errlen);

static inline int dfl_topo_replica(const dfl_topo *t, int64_t k) { return (int)(k % t->N); }
/* the hidden-state queue sequence of slice k, -1 when its replica is colocated */
int64_t dfl_topo_hseq(const dfl_topo *t, int64_t k);
/* the slice carried by hidden-state queue sequence h */
int64_t dfl_topo_slice(const dfl_topo *t, int64_t h);
static inline int dfl_topo_producer(const dfl_topo *t, int64_t h) { return (int)(h % t->M); }
/* hidden-state queue items in `total` slices (total a multiple of N) */
static inline int64_t dfl_topo_hcount(const dfl_topo *t, int64_t total) { return total / t->N * t->D; }

/* One process per device (rank = device index among those with a role): the sequence number of
** slice k in device dev's own loader ring, -1 when the device does not use slice k. A target
** uses the slices it produces (h mod M = its index: local h / M); a replica uses its own slices
** (k mod N = its index: local k / N), a drafter-only one for their ids, masks and anchors (its
** loader draws the same rows and anchors; only the features travel, target -> replica). */
int64_t dfl_topo_local_seq(const dfl_topo *t, int dev, int64_t k);

#endif
