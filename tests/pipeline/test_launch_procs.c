/*
** test_launch_procs: the launcher bootstrap across real processes (test_launch covers threads).
**   test_launch_procs mpi       mpirun -np 2 of this program: each rank finds itself through
**                               OpenMPI's environment, rank 0's random 128-byte id reaches rank 1
**                               through MPI_Bcast (libmpi.so.40 via dlopen). SKIP (77) without mpirun.
**   test_launch_procs torchrun  two fork/exec'd processes with RANK / WORLD_SIZE / MASTER_ADDR=127.0.0.1 /
**                               MASTER_PORT: the id goes over the TCP bootstrap on loopback.
** The driver (this program without "child") checks what each rank wrote: the launcher it detected,
** its rank / world / local rank, and the 128 bytes it ended with, which must equal the id the driver
** derives from the same seed (so a rank that kept its own filler bytes fails). Every child runs under
** a deadline; the driver kills the whole process group when it passes.
*/
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "runtime/io/data.h"
#include "runtime/pipeline/launch.h"
#include "tests/pipeline/common.h"

#define ID_BYTES 128
#define DEADLINE_S 60

static void make_id(uint64_t seed, unsigned char *id) {
  dfl_rng r;
  dfl_rng_seed(&r, seed);
  for (int k = 0; k < ID_BYTES; k++) id[k] = (unsigned char)dfl_rng_below(&r, 256);
}

/* child: argv = self child DIR SEED SOURCE */
static int child(int argc, char **argv) {
  if (argc < 5) return 2;
  const char *dir = argv[2], *want = argv[4];
  uint64_t seed = strtoull(argv[3], NULL, 0);
  dfl_launch l;
  char err[512] = "";
  if (dfl_launch_detect(&l, NULL, NULL, err, sizeof err)) {
    fprintf(stderr, "child: detect: %s\n", err);
    return 1;
  }
  unsigned char id[ID_BYTES];
  if (l.rank == 0) make_id(seed, id);
  else memset(id, 0xa5, sizeof id);   /* must be overwritten by rank 0's bytes */
  int rc = dfl_launch_bcast(&l, id, sizeof id, 10000, err, sizeof err);
  if (rc) fprintf(stderr, "child rank %d: bcast: %s\n", l.rank, err);
  dfl_launch_finalize();
  char path[512];
  snprintf(path, sizeof path, "%s/rank%d.txt", dir, l.rank);
  FILE *f = fopen(path, "w");
  if (!f) return 1;
  fprintf(f, "%s %d %d %d %d\n", l.source, l.rank, l.world, l.local_rank, rc);
  for (int k = 0; k < ID_BYTES; k++) fprintf(f, "%02x", id[k]);
  fprintf(f, "\n");
  fclose(f);
  if (strcmp(l.source, want)) fprintf(stderr, "child rank %d: detected %s, want %s\n", l.rank, l.source, want);
  /* rank 0 failing to listen is told apart (exit 3): the driver retries another port */
  return rc ? (l.rank == 0 && strstr(err, "cannot listen") ? 3 : 1) : 0;
}

static double now_sec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Wait for n children (each leading its own process group) until the deadline; on timeout kill
** every group. Returns the worst exit status (3 wins over 1: a busy port), -1 on timeout. */
static int wait_all(pid_t *pid, int n, double deadline) {
  int worst = 0, left = n;
  while (left > 0) {
    int st;
    pid_t w = waitpid(-1, &st, WNOHANG);
    if (w > 0) {
      for (int i = 0; i < n; i++)
        if (pid[i] == w) {
          pid[i] = 0;
          left--;
          int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
          if (code == 3 || (code > worst && worst != 3)) worst = code;
        }
      continue;
    }
    if (now_sec() > deadline) {
      for (int i = 0; i < n; i++)
        if (pid[i] > 0) kill(-pid[i], SIGKILL);
      for (int i = 0; i < n; i++)
        if (pid[i] > 0) waitpid(pid[i], NULL, 0);
      return -1;
    }
    usleep(20000);
  }
  return worst;
}

static pid_t spawn(char **args, const char **env) {
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);   /* the driver can kill the child and everything it started */
    for (const char **kv = env; kv && *kv; kv += 2) setenv(kv[0], kv[1], 1);
    execvp(args[0], args);
    fprintf(stderr, "cannot run %s: %s\n", args[0], strerror(errno));
    _exit(127);
  }
  return pid;
}

static void check_ranks(const char *dir, const char *source, uint64_t seed) {
  unsigned char want[ID_BYTES];
  make_id(seed, want);
  char hex[2 * ID_BYTES + 1];
  for (int k = 0; k < ID_BYTES; k++) snprintf(hex + 2 * k, 3, "%02x", want[k]);
  for (int r = 0; r < 2; r++) {
    char path[512], src[32], got[2 * ID_BYTES + 8];
    snprintf(path, sizeof path, "%s/rank%d.txt", dir, r);
    FILE *f = fopen(path, "r");
    CHECK(f, "rank %d wrote no %s", r, path);
    int rank, world, lr, rc;
    CHECK(fscanf(f, "%31s %d %d %d %d %260s", src, &rank, &world, &lr, &rc, got) == 6, "rank %d: unreadable %s", r,
          path);
    fclose(f);
    CHECK(!strcmp(src, source) && rank == r && world == 2 && lr == r, "rank %d detected %s rank %d of %d local %d",
          r, src, rank, world, lr);
    CHECK(rc == 0, "rank %d: broadcast failed (%d)", r, rc);
    CHECK(!strcmp(got, hex), "rank %d holds %.16s..., want rank 0's %.16s...", r, got, hex);
    unlink(path);
  }
  printf("%s: both ranks detected themselves and hold rank 0's 128-byte id (%.16s...)\n", source, hex);
}

static int have_mpirun(void) {
  const char *path = getenv("PATH");
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", path ? path : "/usr/bin:/bin");
  for (char *d = strtok(buf, ":"); d; d = strtok(NULL, ":")) {
    char f[4200];
    snprintf(f, sizeof f, "%s/mpirun", d);
    if (access(f, X_OK) == 0) return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "child")) return child(argc, argv);
  const char *mode = argc >= 2 ? argv[1] : "";
  if (strcmp(mode, "mpi") && strcmp(mode, "torchrun")) {
    fprintf(stderr, "usage: %s mpi|torchrun\n", argv[0]);
    return 2;
  }
  uint64_t seed = test_seed();
  char dir[256], seeds[32];
  tmp_dir(dir, sizeof dir, mode);
  mkdir(dir, 0700);
  snprintf(seeds, sizeof seeds, "%" PRIu64, seed);
  /* a stale launcher environment (a test run under mpirun or torchrun) must not leak in */
  const char *stale[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                         "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS"};
  for (size_t i = 0; i < sizeof stale / sizeof stale[0]; i++) unsetenv(stale[i]);
  double t0 = now_sec();
  if (!strcmp(mode, "mpi")) {
    if (!have_mpirun()) {
      printf("SKIP: mpirun not found (install openmpi-bin and libopenmpi-dev: scripts/setup.sh --deps)\n");
      return 77;
    }
    /* one host, loopback only: OpenMPI's runtime wire and the byte transport stay on lo */
    char *args[] = {"mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "2",
                    "--mca", "btl", "self,vader", "--mca", "oob_tcp_if_include", "lo",
                    argv[0], "child", dir, seeds, "openmpi", NULL};
    pid_t pid = spawn(args, NULL);
    int rc = wait_all(&pid, 1, now_sec() + DEADLINE_S);
    CHECK(rc != -1, "mpirun did not finish within %d s (killed)", DEADLINE_S);
    CHECK(rc == 0, "mpirun -np 2 exited with %d", rc);
    check_ranks(dir, "openmpi", seed);
  } else {
    dfl_rng r;
    dfl_rng_seed(&r, seed ^ 0x9e3779b97f4a7c15ull);
    int rc = 3;
    for (int attempt = 0; attempt < 4 && rc == 3; attempt++) {   /* 3: rank 0's random port was busy */
      char port[16];
      snprintf(port, sizeof port, "%d", 20000 + (int)dfl_rng_below(&r, 30000));
      pid_t pid[2];
      for (int i = 0; i < 2; i++) {   /* rank 1 first: it must retry until rank 0 listens */
        int k = 1 - i;
        char rk[4];
        snprintf(rk, sizeof rk, "%d", k);
        const char *env[] = {"RANK", rk, "LOCAL_RANK", rk, "WORLD_SIZE", "2", "LOCAL_WORLD_SIZE", "2",
                             "MASTER_ADDR", "127.0.0.1", "MASTER_PORT", port, NULL};
        char *args[] = {argv[0], "child", dir, seeds, "torchrun", NULL};
        pid[k] = spawn(args, (const char **)env);
      }
      rc = wait_all(pid, 2, now_sec() + DEADLINE_S);
      CHECK(rc != -1, "torchrun-style ranks did not finish within %d s (killed)", DEADLINE_S);
      if (rc == 3) printf("port %s busy, another\n", port);
    }
    CHECK(rc == 0, "a torchrun-style rank exited with %d", rc);
    check_ranks(dir, "torchrun", seed);
  }
  rmdir(dir);
  printf("ok (%.2fs)\n", now_sec() - t0);
  return 0;
}
