/*
** test_topo: the micro-batch assignment of runtime/topo.h on random role lists, against a brute
** force walk of the global order: slice k goes to replica k mod N; the drafter-only replicas'
** slices, in k order, are the hidden-state queue's sequence 0, 1, 2, ... (a bijection, increasing
** in k, producer h mod M); pure split gives h = k; bad role sets are refused with a message.
*/
#include "runtime/pipeline/topo.h"
#include "tests/pipeline/common.h"

static void check_one(const int *roles, int n) {
  dfl_topo t;
  char err[256];
  int M = 0, C = 0, D = 0;
  for (int i = 0; i < n; i++) M += roles[i] == 1, C += roles[i] == 3, D += roles[i] == 2;
  int rc = dfl_topo_init(&t, roles, n, err, sizeof err);
  int valid = C + D > 0 && (D == 0 || M > 0) && (M == 0 || D > 0);
  CHECK((rc == DFL_OK) == valid, "M=%d C=%d D=%d: rc %d (%s)", M, C, D, rc, rc ? err : "");
  if (!valid) {
    CHECK(strlen(err) > 20, "refusal without a message");
    return;
  }
  CHECK(t.M == M && t.C == C && t.D == D && t.N == C + D, "counts");
  int64_t total = (int64_t)t.N * (1 + rand() % 7), h = 0;
  int64_t *per_target = calloc((size_t)(M + 1), sizeof *per_target);
  /* replica numbering: spec order of the devices that run the drafter */
  int rep_of[64], nr = 0;
  for (int i = 0; i < n; i++)
    if (roles[i] & 2) rep_of[nr++] = roles[i];
  for (int64_t k = 0; k < total; k++) {
    int j = dfl_topo_replica(&t, k);
    CHECK(j == k % t.N, "replica of %" PRId64, k);
    CHECK(t.coloc[j] == (rep_of[j] == 3), "replica %d colocated flag", j);
    int64_t hs = dfl_topo_hseq(&t, k);
    if (rep_of[j] == 3) {
      CHECK(hs == -1, "colocated slice %" PRId64 " has queue seq %" PRId64, k, hs);
      continue;
    }
    CHECK(hs == h, "slice %" PRId64 ": queue seq %" PRId64 ", brute force %" PRId64, k, hs, h);
    CHECK(dfl_topo_slice(&t, h) == k, "slice of seq %" PRId64, h);
    int pr = dfl_topo_producer(&t, h);
    CHECK(pr >= 0 && pr < M, "producer %d", pr);
    per_target[pr]++;
    if (C == 0) CHECK(hs == k, "pure split: seq %" PRId64 " != slice %" PRId64, hs, k);
    h++;
  }
  /* one process per device: each device's own slices are numbered 0, 1, 2, ... in k order; each
  ** slice has its replica, and a target too when the replica is drafter-only */
  int64_t next[64] = {0};
  for (int64_t k = 0; k < total; k++) {
    int users = 0, targets = 0;
    for (int dv = 0; dv < t.n_dev; dv++) {
      int64_t ls = dfl_topo_local_seq(&t, dv, k);
      if (ls < 0) continue;
      CHECK(ls == next[dv], "device %d: slice %" PRId64 " local seq %" PRId64 ", expected %" PRId64, dv, k, ls, next[dv]);
      next[dv]++;
      users++;
      if (t.role[dv] == 1) {
        targets++;
        CHECK(t.idx[dv] == dfl_topo_producer(&t, dfl_topo_hseq(&t, k)), "slice %" PRId64 " on the wrong target", k);
      } else {
        CHECK(t.idx[dv] == k % t.N && t.rdev[t.idx[dv]] == dv, "slice %" PRId64 " on the wrong replica", k);
      }
    }
    int dk = t.dpos[k % t.N] >= 0;
    CHECK(users == 1 + dk && targets == dk, "slice %" PRId64 ": %d users, %d targets", k, users, targets);
  }
  for (int m = 0; m < M; m++) CHECK(t.role[t.tdev[m]] == 1 && t.idx[t.tdev[m]] == m, "target %d device", m);
  CHECK(h == dfl_topo_hcount(&t, total), "queue items %" PRId64 " vs %" PRId64, h, dfl_topo_hcount(&t, total));
  /* producers share the queue round robin: counts differ by at most one */
  for (int i = 1; i < M; i++)
    CHECK(per_target[i] <= per_target[0] && per_target[0] - per_target[i] <= 1, "target %d share", i);
  free(per_target);
}

int main(void) {
  uint64_t seed = test_seed();
  srand((unsigned)seed);
  int n_valid = 0;
  for (int it = 0; it < 3000; it++) {
    int n = 1 + rand() % 12, roles[12];
    for (int i = 0; i < n; i++) roles[i] = rand() % 4;   /* 0: a device with no role */
    check_one(roles, n);
    dfl_topo t;
    char err[256];
    n_valid += dfl_topo_init(&t, roles, n, err, sizeof err) == DFL_OK;
  }
  CHECK(n_valid > 500, "only %d valid random topologies", n_valid);
  /* the example: cpu0 colocated, cpu1 drafter-only fed by cpu2 target-only */
  int ex[3] = {3, 2, 1};
  dfl_topo t;
  char err[256];
  CHECK(dfl_topo_init(&t, ex, 3, err, sizeof err) == DFL_OK, "%s", err);
  CHECK(t.N == 2 && t.M == 1 && dfl_topo_hseq(&t, 0) == -1 && dfl_topo_hseq(&t, 1) == 0 && dfl_topo_hseq(&t, 3) == 1,
        "example assignment");
  int bad[2] = {3, 1};
  CHECK(dfl_topo_init(&t, bad, 2, err, sizeof err) == DFL_EFORMAT && strstr(err, "target-only"), "%s", err);
  int bad2[2] = {2, 2};
  CHECK(dfl_topo_init(&t, bad2, 2, err, sizeof err) == DFL_EFORMAT && strstr(err, "no target-only"), "%s", err);
  printf("ok (%d valid topologies)\n", n_valid);
  return 0;
}
