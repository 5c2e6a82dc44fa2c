/*
** test_launch: launcher discovery from OpenMPI / torchrun / Slurm environments (tables, not the
** process env), the errors for inconsistent values, and the TCP bootstrap broadcast of a random
** 128-byte id among threads on 127.0.0.1 (plus its timeout when rank 0 never comes).
*/
#include <pthread.h>

#include "runtime/io/data.h"
#include "runtime/pipeline/launch.h"
#include "tests/pipeline/common.h"

static const char *tget(void *ctx, const char *name) {
  for (const char **kv = ctx; *kv; kv += 2)
    if (!strcmp(kv[0], name)) return kv[1];
  return NULL;
}

static void detect_ok(const char **env, const char *src, int rank, int world, int lr, int lw, const char *addr, int port) {
  dfl_launch l;
  char err[512] = "";
  CHECK(dfl_launch_detect(&l, tget, env, err, sizeof err) == DFL_OK, "%s: %s", src, err);
  CHECK(!strcmp(l.source, src) && l.rank == rank && l.world == world && l.local_rank == lr && l.local_world == lw,
        "%s: got %s rank %d/%d local %d/%d", src, l.source, l.rank, l.world, l.local_rank, l.local_world);
  CHECK(!strcmp(l.master_addr, addr) && l.master_port == port, "%s: master %s:%d", src, l.master_addr, l.master_port);
}

static void detect_bad(const char **env, const char *needle) {
  dfl_launch l;
  char err[512] = "";
  CHECK(dfl_launch_detect(&l, tget, env, err, sizeof err) == DFL_EFORMAT, "accepted (want an error on %s)", needle);
  CHECK(strstr(err, needle), "error '%s' does not name %s", err, needle);
  printf("refused: %s\n", err);
}

typedef struct { dfl_launch l; unsigned char id[128]; int rc; char err[256]; int timeout; } peer;

static void *bcast_main(void *arg) {
  peer *p = arg;
  p->rc = dfl_launch_bcast_tcp(&p->l, p->id, sizeof p->id, p->timeout, p->err, sizeof p->err);
  return NULL;
}

int main(void) {
  uint64_t seed = test_seed();
  dfl_rng r;
  dfl_rng_seed(&r, seed);
  char rk[16], ws[16], port[16];
  int world = 2 + (int)dfl_rng_below(&r, 6), rank = (int)dfl_rng_below(&r, (uint64_t)world);
  snprintf(rk, sizeof rk, "%d", rank);
  snprintf(ws, sizeof ws, "%d", world);
  int p0 = 20000 + (int)dfl_rng_below(&r, 30000);
  snprintf(port, sizeof port, "%d", p0);

  const char *none[] = {NULL};
  detect_ok(none, "single", 0, 1, 0, 1, "", 0);
  const char *ompi[] = {"OMPI_COMM_WORLD_RANK", rk, "OMPI_COMM_WORLD_SIZE", ws, "OMPI_COMM_WORLD_LOCAL_RANK", "1",
                        "OMPI_COMM_WORLD_LOCAL_SIZE", "2", NULL};
  detect_ok(ompi, "openmpi", rank, world, 1, 2, "", 0);
  const char *torch[] = {"RANK", rk, "WORLD_SIZE", ws, "LOCAL_RANK", "0", "MASTER_ADDR", "node7", "MASTER_PORT", port,
                         NULL};
  detect_ok(torch, "torchrun", rank, world, 0, 1, "node7", p0);
  const char *slurm[] = {"SLURM_PROCID", rk, "SLURM_NTASKS", ws, "SLURM_LOCALID", "0", "SLURM_STEP_NODELIST",
                         "gpu[03-05,09],cpu1", NULL};
  detect_ok(slurm, "slurm", rank, world, 0, 1, "gpu03", 29500);
  /* OpenMPI wins over a stale torchrun environment */
  const char *both[] = {"OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "1", "RANK", "3", "WORLD_SIZE", "4", NULL};
  detect_ok(both, "openmpi", 0, 1, 0, 1, "", 0);

  const char *b1[] = {"RANK", "4", "WORLD_SIZE", "4", NULL};
  detect_bad(b1, "RANK=4");
  const char *b2[] = {"RANK", "x", "WORLD_SIZE", "4", NULL};
  detect_bad(b2, "RANK");
  const char *b3[] = {"SLURM_PROCID", "0", NULL};
  detect_bad(b3, "SLURM_NTASKS");
  const char *b4[] = {"RANK", "0", "WORLD_SIZE", "2", "MASTER_PORT", "99999", NULL};
  detect_bad(b4, "MASTER_PORT");

  /* TCP bootstrap: world W threads, rank 0 publishes a random id */
  enum { W = 4 };
  peer pr[W];
  pthread_t th[W];
  int ok = 0;
  for (int attempt = 0; attempt < 3 && !ok; attempt++) {   /* a busy random port: try another */
    int pt = 20000 + (int)dfl_rng_below(&r, 30000);
    for (int i = 0; i < W; i++) {
      memset(&pr[i], 0, sizeof pr[i]);
      pr[i].l = (dfl_launch){i, W, 0, 1, "127.0.0.1", pt, "torchrun"};
      pr[i].timeout = 5000;
      for (int k = 0; k < 128; k++) pr[i].id[k] = i == 0 ? (unsigned char)dfl_rng_below(&r, 256) : 0;
    }
    /* the others start first: they must retry until rank 0 listens */
    for (int i = W - 1; i >= 0; i--) {
      pthread_create(&th[i], NULL, bcast_main, &pr[i]);
      if (i == 1) usleep(100000);
    }
    for (int i = 0; i < W; i++) pthread_join(th[i], NULL);
    ok = pr[0].rc == DFL_OK;
    if (!ok) printf("attempt %d: %s\n", attempt, pr[0].err);
  }
  CHECK(ok, "rank 0 could not serve the id");
  for (int i = 1; i < W; i++) {
    CHECK(pr[i].rc == DFL_OK, "rank %d: %s", i, pr[i].err);
    CHECK(!memcmp(pr[i].id, pr[0].id, 128), "rank %d received a different id", i);
  }
  printf("bootstrap: %d ranks received rank 0's 128-byte id over TCP\n", W);
  /* nobody serves: a clear error within the timeout */
  peer lone;
  memset(&lone, 0, sizeof lone);
  lone.l = (dfl_launch){1, 2, 0, 1, "127.0.0.1", 1, "torchrun"};
  lone.timeout = 300;
  bcast_main(&lone);
  CHECK(lone.rc != DFL_OK && strstr(lone.err, "rank 0"), "missing rank 0 not reported: %s", lone.err);
  printf("no rank 0: %s\n", lone.err);
  dfl_launch nomaster = {1, 2, 0, 1, "", 0, "slurm"};
  char err[256];
  CHECK(dfl_launch_bcast_tcp(&nomaster, lone.id, 128, 100, err, sizeof err) == DFL_EFORMAT && strstr(err, "MASTER_ADDR"),
        "no MASTER_ADDR: %s", err);
  printf("ok\n");
  return 0;
}
