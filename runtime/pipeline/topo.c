/* topo.c: the micro-batch assignment of topo.h. */
#include "runtime/pipeline/topo.h"

#include <stdio.h>
#include <string.h>

#include "compiler/status.h"

int dfl_topo_init(dfl_topo *t, const int *roles, int n, char *err, size_t errlen) {
  memset(t, 0, sizeof *t);
  if (n > DFL_TOPO_MAX) {
    snprintf(err, errlen, "%d devices: the runner drives at most %d", n, DFL_TOPO_MAX);
    return DFL_EFORMAT;
  }
  for (int i = 0; i < n; i++) {
    if (roles[i] < 1 || roles[i] > 3) continue;
    int dev = t->n_dev++;
    t->role[dev] = roles[i];
    if (roles[i] == 1) {
      t->idx[dev] = t->M;
      t->tdev[t->M++] = dev;
      continue;
    }
    int j = t->N++;
    t->idx[dev] = j;
    t->rdev[j] = dev;
    t->coloc[j] = roles[i] == 3;
    if (t->coloc[j]) {
      t->dpos[j] = -1;
      t->C++;
    } else {
      t->dpos[j] = t->D;
      t->drep[t->D++] = j;
    }
  }
  if (t->N < 1) {
    snprintf(err, errlen, "the topology needs at least one device that runs the drafter");
    return DFL_EFORMAT;
  }
  if (t->D > 0 && t->M < 1) {
    snprintf(err, errlen, "%d drafter-only device%s but no target-only device to feed %s: list a target device "
             "that is not a drafter, or make the drafters colocated", t->D, t->D == 1 ? "" : "s",
             t->D == 1 ? "it" : "them");
    return DFL_EFORMAT;
  }
  if (t->M > 0 && t->D == 0) {
    snprintf(err, errlen, "%d target-only device%s but every drafter device is colocated (runs its own target): "
             "nothing would consume %s hidden states; drop %s or make a drafter device drafter-only", t->M,
             t->M == 1 ? "" : "s", t->M == 1 ? "its" : "their", t->M == 1 ? "it" : "them");
    return DFL_EFORMAT;
  }
  return DFL_OK;
}

int64_t dfl_topo_hseq(const dfl_topo *t, int64_t k) {
  int q = t->dpos[k % t->N];
  return q < 0 ? -1 : k / t->N * t->D + q;
}

int64_t dfl_topo_slice(const dfl_topo *t, int64_t h) {
  return h / t->D * t->N + t->drep[h % t->D];
}

int64_t dfl_topo_local_seq(const dfl_topo *t, int dev, int64_t k) {
  if (dev < 0 || dev >= t->n_dev) return -1;
  if (t->role[dev] == 1) {
    int64_t h = dfl_topo_hseq(t, k);
    return h >= 0 && h % t->M == t->idx[dev] ? h / t->M : -1;
  }
  return k % t->N == t->idx[dev] ? k / t->N : -1;
}
