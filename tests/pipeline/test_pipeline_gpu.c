/*
** pipeline_gpu (GPU; SKIP 77 without one): the pipeline runner on CUDA devices.
**  (a) one GPU, examples/nano-gpu-pipeline.dfl: target gpu0 and drafter gpu1 as two logical devices
**      (DFL_GPU_MAP=0,0: two CUDA backends, two streams, one GPU), hidden-state queue of depth 1
**      in device memory: per-step loss within LOSS_TOL relative of the single-device GPU trainer
**      on the same spec and data order (the same kernels; only the graph split differs), and no
**      deadlock (the run has to finish; ctest's timeout catches a hang).
**  (c) its diagnostics lines in metrics.jsonl: per device busy/wait fractions, the queue's
**      occupancy histogram, device memory (cudaMemGetInfo) at every report, identical after the
**      first (nothing allocates in the loop).
**  (b) two GPUs, examples/nano-gpu-replicas.dfl: two processes (this binary re-executed with a
**      torchrun-style environment), one replica each, NCCL all-reduce: the run checks the
**      replicas' params/masters/moments bit-identical (hash gathered through NCCL) and fails
**      otherwise; both ranks log the same losses; they are within LOSS_TOL of one GPU training
**      the global batch. Skipped (said so) with fewer than 2 GPUs or no libnccl.so.2.
**  (d) the same 2-process run with DFL_FAULT=drafter1=fail@1 (rank 1's replica errors out at its
**      micro-batch 1) and DFL_NCCL_TIMEOUT_S=10: both ranks must exit with an error within
**      DEADLINE_S (rank 0 waits in an all-reduce rank 1 never joins: its polled wait times out and
**      aborts the communicator), rank 1 naming its device, rank 0 the NCCL wait it gave up on.
**  (e) two GPUs in one process: (a)'s spec with DFL_GPU_MAP=0,1 (target on CUDA device 0, drafter
**      on 1, the queue's slots in the target's arena, peer copies): per-step loss within LOSS_TOL
**      of the single-device trainer. Skipped (said so) with fewer than 2 GPUs.
**  (h) (a)'s logical devices with checkpoints: the run stopped at step STEPS/2 (--stop-at) and
**      resumed from its checkpoint writes the same final state.safetensors and exported drafter,
**      byte for byte, as the uninterrupted run; the steps after the cut have the same losses.
**  `pipeline_gpu --topo` (2 GPUs, NCCL; the topologies of docs/pipeline.md's issue-7 list):
**  (f) two GPU replicas in ONE process: examples/nano-gpu-replicas.dfl without a launcher
**      environment, DFL_GPU_MAP=0,1: one NCCL communicator per GPU (ncclCommInitAll), each replica
**      thread all-reduces on its own: replicas bit-identical, per-step loss within LOSS_TOL of one
**      GPU training the global batch.
**  (g) split across processes: examples/nano-gpu-pipeline.dfl in 2 processes (torchrun-style env):
**      rank 0 the target on GPU 0, rank 1 the drafter on GPU 1, features by ncclSend/ncclRecv:
**      rank 1 (replica 0) writes metrics.jsonl; its losses within LOSS_TOL of one GPU.
** Seed from the time, printed.
*/
#include <dlfcn.h>
#include <math.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include <cuda_runtime.h>

#include "common.h"
#include "runtime/backend.h"
#include "runtime/io/checkpoint.h"
#include "runtime/pipeline/pipeline.h"
#include "runtime/train/train.h"

/* counts and goes on: one GPU session reports every part */
static int failures;
#include "tests/common/check.h"

#define STEPS 8
#define LOSS_TOL 1e-3

static double pipe_loss[STEPS];
static void on_step(void *ctx, const dfl_step_stats *st) {
  (void)ctx;
  if (st->step >= 1 && st->step <= STEPS) pipe_loss[st->step - 1] = st->loss;
}

static int load(const char *file, uint64_t seed, dfl_spec *s) {
  if (dfl_spec_load(file, s) != DFL_OK) return 1;
  s->seed = seed;
  s->init_seed = seed ^ 0x5eed;
  return 0;
}

/* The single-device trainer on the GPU, global batch. */
static int single(const dfl_spec *s, double *loss) {
  dfl_trainer *tr = calloc(1, sizeof *tr);
  dfl_train_opts o;
  memset(&o, 0, sizeof o);
  char dir[256];
  tmp_dir(dir, sizeof dir, "gpu-single");
  o.steps = STEPS;
  o.out_dir = dir;
  o.backend = DFL_TRAIN_BE_CUDA;
  o.no_eval = o.no_export = o.no_ckpt = o.quiet = 1;
  if (!tr || dfl_train_open(tr, s, &o) != DFL_OK) return 1;
  dfl_step_stats st;
  for (int i = 0; i < STEPS; i++) {
    if (dfl_train_step(tr, &st) != DFL_OK) return 1;
    loss[i] = st.loss;
  }
  dfl_train_close(tr);
  free(tr);
  return 0;
}

/* Child: one rank of the 2-GPU run. */
static int rank_main(const char *spec, uint64_t seed, const char *dir) {
  dfl_spec s;
  if (load(spec, seed, &s)) return 1;
  dfl_pipe_opts o;
  dfl_pipe_result r;
  memset(&o, 0, sizeof o);
  o.steps = STEPS;
  o.out_dir = dir;
  o.quiet = 1;
  o.no_ckpt = o.no_export = 1;
  o.diag_every = 2;
  int rc = dfl_pipe_run(&s, &o, &r);
  printf("rank %s: rc %d, replicas identical %d, %.2fs\n", getenv("RANK"), rc, r.replicas_identical, r.seconds);
  return rc == DFL_OK && r.replicas_identical ? 0 : 1;
}

/* Losses of a metrics.jsonl (step lines), n of them. */
static int read_losses(const char *path, double *loss, int n) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[65536];
  int k = 0;
  while (fgets(line, sizeof line, f) && k < n) {
    if (strstr(line, "\"diag\"")) continue;
    const char *l = strstr(line, "\"loss\":");
    if (l) loss[k++] = strtod(l + 7, NULL);
  }
  fclose(f);
  return k;
}

/* (c): diagnostics lines of a GPU run. */
static void check_diag(const char *path, int split) {
  FILE *f = fopen(path, "r");
  CHECK(f != NULL, "open %s", path);
  if (!f) return;
  char line[65536];
  int n = 0;
  long long mem0 = -1;
  while (fgets(line, sizeof line, f)) {
    if (!strstr(line, "\"diag\":true")) continue;
    n++;
    CHECK(strstr(line, "\"name\":\"gpu0\"") && (!split || strstr(line, "\"name\":\"gpu1\"")),
          "the devices in %.120s", line);
    CHECK(strstr(line, "\"busy\":") && strstr(line, "\"wait_in\":"), "state fractions in the diag line");
    CHECK(strstr(line, split ? "\"queue\"" : "\"prefetch\"") != NULL, "ring occupancy in the diag line");
    const char *m = strstr(line, "\"mem_bytes\":");
    CHECK(m != NULL, "mem_bytes in the diag line");
    if (!m) continue;
    long long mem = strtoll(m + 12, NULL, 10);
    CHECK(mem > 0, "device memory %lld > 0", mem);
    if (n == 1) mem0 = mem;
    else CHECK(mem == mem0, "device memory changes between reports: %lld vs %lld", mem, mem0);
    printf("diag report %d: device memory %lld bytes\n", n, mem);
  }
  fclose(f);
  CHECK(n >= STEPS / 2, "%d diagnostics reports (want >= %d)", n, STEPS / 2);
}

/* Two ranks of the replica spec, torchrun-style env; stderr of rank r to ERRDIR/rank<r>.err when
** errdir is given; extra env as NAME, VALUE pairs. */
static void spawn_ranks(const char *spec, const char *seeds, const char *dir, const char *port, const char *errdir,
                        const char **env, pid_t *pid) {
  for (int r = 0; r < 2; r++) {
    pid[r] = fork();
    if (pid[r] == 0) {
      char rs[8];
      snprintf(rs, sizeof rs, "%d", r);
      setenv("RANK", rs, 1);
      setenv("LOCAL_RANK", rs, 1);
      setenv("WORLD_SIZE", "2", 1);
      setenv("LOCAL_WORLD_SIZE", "2", 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", port, 1);
      unsetenv("CUDA_VISIBLE_DEVICES");
      for (const char **kv = env; kv && *kv; kv += 2) setenv(kv[0], kv[1], 1);
      if (errdir) {
        char ef[512];
        snprintf(ef, sizeof ef, "%s/rank%d.err", errdir, r);
        if (!freopen(ef, "w", stderr)) _exit(126);
      }
      execl("/proc/self/exe", "pipeline_gpu", "--rank", spec, seeds, dir, (char *)NULL);
      _exit(127);
    }
  }
}

#define DEADLINE_S 90
/* (d): one rank fails mid-run; neither may hang. */
static void rank_failure(uint64_t seed) {
  const char *spec = "examples/nano-gpu-replicas.dfl";
  char dir[256], seeds[32], port[16];
  tmp_dir(dir, sizeof dir, "gpu-nccl-fail");
  snprintf(seeds, sizeof seeds, "%llu", (unsigned long long)seed);
  snprintf(port, sizeof port, "%d", 20000 + (int)((getpid() + 7919) % 20000));
  if (dfl_mkdirs(dir)) {
    CHECK(0, "mkdir %s", dir);
    return;
  }
  const char *env[] = {"DFL_FAULT", "drafter1=fail@1", "DFL_NCCL_TIMEOUT_S", "10", NULL};
  pid_t pid[2];
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  spawn_ranks(spec, seeds, dir, port, dir, env, pid);
  int st[2] = {0, 0}, left = 2;
  double el = 0;
  while (left > 0 && el < DEADLINE_S) {
    for (int r = 0; r < 2; r++)
      if (pid[r] > 0 && waitpid(pid[r], &st[r], WNOHANG) == pid[r]) pid[r] = 0, left--;
    usleep(50000);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    el = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  }
  for (int r = 0; r < 2; r++)
    if (pid[r] > 0) {
      kill(pid[r], SIGKILL);
      waitpid(pid[r], NULL, 0);
    }
  CHECK(left == 0, "(d) %d rank(s) still running after %d s: a failed rank left its peer hanging", left, DEADLINE_S);
  char msg[2][8192];
  for (int r = 0; r < 2; r++) {
    char ef[512];
    snprintf(ef, sizeof ef, "%s/rank%d.err", dir, r);
    FILE *f = fopen(ef, "r");
    size_t n = f ? fread(msg[r], 1, sizeof msg[r] - 1, f) : 0;
    msg[r][n] = 0;
    if (f) fclose(f);
    printf("(d) rank %d exit status %d after %.1fs; stderr:\n%s", r, WIFEXITED(st[r]) ? WEXITSTATUS(st[r]) : -1, el,
           msg[r]);
    CHECK(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) != 0, "(d) rank %d did not report the failure (status %d)", r, st[r]);
  }
  CHECK(strstr(msg[1], "gpu1 (drafter replica 1): injected failure"), "(d) rank 1 does not name its device");
  CHECK(strstr(msg[0], "rank 0 of 2") && strstr(msg[0], "aborting the NCCL communicator"),
         "(d) rank 0 does not say it gave up on the NCCL wait");
}

static int two_gpus(uint64_t seed) {
  int ng = 0;
  if (cudaGetDeviceCount(&ng) != cudaSuccess || ng < 2) {
    printf("(b) SKIPPED: %d GPU(s); the NCCL replica run needs 2\n", ng);
    return 0;
  }
  const char *lib = getenv("DFL_NCCL_LIB");
  void *h = dlopen(lib && *lib ? lib : "libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    printf("(b) SKIPPED: no NCCL (%s)\n", dlerror());
    return 0;
  }
  dlclose(h);
  const char *spec = "examples/nano-gpu-replicas.dfl";
  char dir[256], seeds[32], port[16];
  tmp_dir(dir, sizeof dir, "gpu-nccl");
  snprintf(seeds, sizeof seeds, "%llu", (unsigned long long)seed);
  snprintf(port, sizeof port, "%d", 20000 + (int)(getpid() % 20000));
  pid_t pid[2];
  spawn_ranks(spec, seeds, dir, port, NULL, NULL, pid);
  int ok = 1;
  for (int r = 0; r < 2; r++) {
    int st = 0;
    waitpid(pid[r], &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d of the NCCL run failed (status %d)", r, st);
    ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  if (!ok) return 1;
  double l0[STEPS], l1[STEPS], ls[STEPS];
  char p0[300], p1[300];
  snprintf(p0, sizeof p0, "%s/metrics.jsonl", dir);
  snprintf(p1, sizeof p1, "%s/metrics-rank1.jsonl", dir);
  CHECK(read_losses(p0, l0, STEPS) == STEPS && read_losses(p1, l1, STEPS) == STEPS, "both ranks logged %d steps", STEPS);
  dfl_spec s;
  if (load(spec, seed, &s) || single(&s, ls)) {
    CHECK(0, "single-GPU reference run of %s", spec);
    return 1;
  }
  for (int i = 0; i < STEPS; i++) {
    printf("(b) step %d  loss 1 GPU %.6f  rank0 %.6f  rank1 %.6f\n", i + 1, ls[i], l0[i], l1[i]);
    CHECK(l0[i] == l1[i], "step %d: ranks log different losses", i + 1);
    CHECK(fabs(l0[i] - ls[i]) <= LOSS_TOL * fabs(ls[i]), "step %d: 2-GPU loss %.6f vs 1 GPU %.6f", i + 1, l0[i], ls[i]);
  }
  check_diag(p0, 0);
  rank_failure(seed);
  return 0;
}

/* --topo: (g) first (children before this process holds a CUDA context), then (f). */
static int topo_parts(uint64_t seed) {
  int ng = 0;
  if (cudaGetDeviceCount(&ng) != cudaSuccess || ng < 2) {
    printf("SKIP: %d GPU(s); --topo needs 2\n", ng);
    return 77;
  }
  /* (g) */
  const char *gspec = "examples/nano-gpu-pipeline.dfl";
  char dir[256], seeds[32], port[16];
  tmp_dir(dir, sizeof dir, "gpu-xproc");
  snprintf(seeds, sizeof seeds, "%llu", (unsigned long long)seed);
  snprintf(port, sizeof port, "%d", 20000 + (int)((getpid() + 3571) % 20000));
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pid_t pid[2];
  spawn_ranks(gspec, seeds, dir, port, NULL, NULL, pid);
  int ok = 1;
  for (int r = 0; r < 2; r++) {
    int st = 0;
    waitpid(pid[r], &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "(g) rank %d of the split run failed (status %d)", r, st);
    ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("(g) target rank 0 (GPU 0) -> drafter rank 1 (GPU 1), NCCL send/recv: %s in %.1fs\n", ok ? "done" : "FAILED",
         (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
  double lg[STEPS], ls[STEPS];
  dfl_spec s;
  if (ok) {
    char p1[300];
    snprintf(p1, sizeof p1, "%s/metrics.jsonl", dir);
    CHECK(read_losses(p1, lg, STEPS) == STEPS, "(g) replica 0's process logged %d steps in %s", STEPS, p1);
    if (load(gspec, seed, &s) || single(&s, ls)) CHECK(0, "(g) single-GPU reference run");
    else
      for (int i = 0; i < STEPS; i++) {
        printf("(g) step %d  loss 1 GPU %.6f  split across processes %.6f\n", i + 1, ls[i], lg[i]);
        CHECK(isfinite(lg[i]) && fabs(lg[i] - ls[i]) <= LOSS_TOL * fabs(ls[i]), "(g) step %d: %.6f vs 1 GPU %.6f",
               i + 1, lg[i], ls[i]);
      }
  }
  /* (f) */
  const char *fspec = "examples/nano-gpu-replicas.dfl";
  setenv("DFL_GPU_MAP", "0,1", 1);
  if (load(fspec, seed, &s)) return 1;
  dfl_pipe_opts o;
  dfl_pipe_result r;
  quiet_pipe_opts(&o, dir, sizeof dir, "gpu-inproc", STEPS);
  o.no_ckpt = o.no_export = 1;
  o.on_step = on_step;
  memset(pipe_loss, 0, sizeof pipe_loss);
  int rc = dfl_pipe_run(&s, &o, &r);
  CHECK(rc == DFL_OK && r.replicas_identical, "(f) 2 GPU replicas in one process: rc %d, identical %d", rc,
         r.replicas_identical);
  if (rc == DFL_OK) {
    printf("(f) %d replicas on GPUs 0,1 in one process (NCCL, ncclCommInitAll): %.2fs, replicas bit-identical\n",
           r.n_drafter, r.seconds);
    if (single(&s, ls)) CHECK(0, "(f) single-GPU reference run");
    else
      for (int i = 0; i < STEPS; i++) {
        printf("(f) step %d  loss 1 GPU %.6f  2 replicas in one process %.6f\n", i + 1, ls[i], pipe_loss[i]);
        CHECK(isfinite(pipe_loss[i]) && fabs(pipe_loss[i] - ls[i]) <= LOSS_TOL * fabs(ls[i]),
               "(f) step %d: %.6f vs 1 GPU %.6f", i + 1, pipe_loss[i], ls[i]);
      }
  }
  if (failures) printf("--topo: %d failure(s)\n", failures);
  else printf("--topo: PASS\n");
  return failures ? 1 : 0;
}

static int same_bytes(const char *a, const char *b) {
  FILE *f = fopen(a, "rb"), *g = fopen(b, "rb");
  int same = f && g;
  while (same) {
    int x = fgetc(f), y = fgetc(g);
    same = x == y;
    if (x == EOF || y == EOF) break;
  }
  if (f) fclose(f);
  if (g) fclose(g);
  return same;
}

/* (h): one pipeline run of (a)'s spec into dir, checkpoints and export kept; losses in pipe_loss */
static int ckpt_run(const dfl_spec *s, const char *dir, int64_t stop_at, const char *resume) {
  dfl_pipe_opts o;
  dfl_pipe_result r;
  resume_pipe_opts(&o, dir, STEPS, stop_at, resume, on_step, NULL);
  return dfl_pipe_run(s, &o, &r);
}

static void resume_part(const dfl_spec *s) {
  char full[128], cut[128], ck[300], a[300], b[300];
  double lf[STEPS];
  snprintf(full, sizeof full, "/tmp/dfl-gpu-resume-full-%d", (int)getpid());
  snprintf(cut, sizeof cut, "/tmp/dfl-gpu-resume-cut-%d", (int)getpid());
  memset(pipe_loss, 0, sizeof pipe_loss);
  int rc = ckpt_run(s, full, 0, NULL);
  CHECK(rc == DFL_OK, "(h) uninterrupted run with checkpoints: rc %d", rc);
  memcpy(lf, pipe_loss, sizeof lf);
  memset(pipe_loss, 0, sizeof pipe_loss);
  if (rc == DFL_OK) rc = ckpt_run(s, cut, STEPS / 2, NULL);
  CHECK(rc == DFL_OK, "(h) run stopped at step %d: rc %d", STEPS / 2, rc);
  snprintf(ck, sizeof ck, "%s/ckpt", cut);
  if (rc == DFL_OK) rc = ckpt_run(s, cut, 0, ck);
  CHECK(rc == DFL_OK, "(h) resumed run: rc %d", rc);
  if (rc != DFL_OK) return;
  for (int i = STEPS / 2; i < STEPS; i++)
    CHECK(pipe_loss[i] == lf[i], "(h) step %d: resumed %.9g vs uninterrupted %.9g", i + 1, pipe_loss[i], lf[i]);
  snprintf(a, sizeof a, "%s/ckpt/step-%08d/state.safetensors", full, STEPS);
  snprintf(b, sizeof b, "%s/ckpt/step-%08d/state.safetensors", cut, STEPS);
  CHECK(same_bytes(a, b), "(h) %s and %s differ", a, b);
  snprintf(a, sizeof a, "%s/drafter/model.safetensors", full);
  snprintf(b, sizeof b, "%s/drafter/model.safetensors", cut);
  CHECK(same_bytes(a, b), "(h) %s and %s differ", a, b);
  printf("(h) stopped at step %d and resumed: steps %d..%d, final state and export %s\n", STEPS / 2, STEPS / 2 + 1,
         STEPS, failures ? "checked (see failures)" : "the same bytes as the uninterrupted run");
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", full, cut);
  CHECK(system(cmd) == 0, "cleanup");
}

int main(int argc, char **argv) {
  if (argc == 5 && !strcmp(argv[1], "--rank")) return rank_main(argv[2], strtoull(argv[3], NULL, 10), argv[4]);
  if (argc == 2 && !strcmp(argv[1], "--topo")) {
    uint64_t seed = (uint64_t)time(NULL);
    printf("pipeline_gpu --topo: seed %llu\n", (unsigned long long)seed);
    return topo_parts(seed);
  }
  uint64_t seed = (uint64_t)time(NULL);
  printf("pipeline_gpu: seed %llu\n", (unsigned long long)seed);
  /* (b) first: the children must start before this process holds a CUDA context */
  int ng = 0;
  if (cudaGetDeviceCount(&ng) != cudaSuccess || ng < 1) {
    printf("SKIP: no CUDA device\n");
    return 77;
  }
  two_gpus(seed);

  /* (a) + (c) on one GPU */
  setenv("DFL_GPU_MAP", "0,0", 1);
  const char *spec = "examples/nano-gpu-pipeline.dfl";
  dfl_spec s;
  if (load(spec, seed, &s)) return 1;
  s.queue_depth = 1;   /* one device slot: the tightest back-pressure must not deadlock */
  double ls[STEPS];
  CHECK(single(&s, ls) == 0, "single-device GPU run");
  dfl_pipe_opts o;
  dfl_pipe_result r;
  char dir[256];
  quiet_pipe_opts(&o, dir, sizeof dir, "gpu-split", STEPS);
  o.no_ckpt = o.no_export = 1;
  o.on_step = on_step;
  o.diag_every = 2;
  int rc = dfl_pipe_run(&s, &o, &r);
  CHECK(rc == DFL_OK, "split GPU pipeline run: rc %d", rc);
  CHECK(rc != DFL_OK || r.queue_in_arena, "(a) the queue's device slots are not inside the target's arena");
  if (rc == DFL_OK) {
    printf("(a) %d target + %d drafter logical devices on one GPU, queue depth 1: %.2fs; %s\n", r.n_target,
           r.n_drafter, r.seconds, r.last_verdict);
    double worst = 0;
    for (int i = 0; i < STEPS; i++) {
      double rel = fabs(pipe_loss[i] - ls[i]) / fabs(ls[i]);
      worst = fmax(worst, rel);
      printf("(a) step %d  loss single %.6f  split %.6f\n", i + 1, ls[i], pipe_loss[i]);
      CHECK(isfinite(pipe_loss[i]) && rel <= LOSS_TOL, "step %d: split %.6f vs single %.6f", i + 1, pipe_loss[i], ls[i]);
    }
    printf("(a) worst relative loss difference %.3g (tolerance %g)\n", worst, LOSS_TOL);
    char mp[300];
    snprintf(mp, sizeof mp, "%s/metrics.jsonl", dir);
    check_diag(mp, 1);
  }
  resume_part(&s);
  if (ng >= 2) {
    setenv("DFL_GPU_MAP", "0,1", 1);
    quiet_pipe_opts(&o, dir, sizeof dir, "gpu-split2", STEPS);
    o.no_ckpt = o.no_export = 1;
    o.on_step = on_step;
    memset(pipe_loss, 0, sizeof pipe_loss);
    rc = dfl_pipe_run(&s, &o, &r);
    CHECK(rc == DFL_OK, "(e) split over 2 GPUs in one process: rc %d", rc);
    for (int i = 0; rc == DFL_OK && i < STEPS; i++) {
      printf("(e) step %d  loss single %.6f  target GPU0 -> drafter GPU1 %.6f\n", i + 1, ls[i], pipe_loss[i]);
      CHECK(isfinite(pipe_loss[i]) && fabs(pipe_loss[i] - ls[i]) <= LOSS_TOL * fabs(ls[i]),
             "(e) step %d: %.6f vs single %.6f", i + 1, pipe_loss[i], ls[i]);
    }
  } else {
    printf("(e) SKIPPED: %d GPU(s); two GPUs in one process need 2\n", ng);
  }
  if (failures) printf("%d failure(s)\n", failures);
  else printf("PASS\n");
  return failures ? 1 : 0;
}
