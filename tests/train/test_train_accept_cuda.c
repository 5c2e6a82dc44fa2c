/*
** train_accept_cuda (GPU; SKIP 77 without one): the decoder's walk and the target agreement
** on the CUDA backend against the CPU backend. The nano example (fp32) trains STEPS steps on the
** GPU (seed from the time, printed) and is exported; then, on the eval file's first ROWS rows, the
** walk through the eval graph on each backend: tokens and blocks within 1% of each other (fp32
** kernels sum in other orders, so a near tie of two logits may go the other way and change one
** block's length; a bug in the walk's inputs or outputs changes most of them), and the drafter
** accepts tokens (tokens > blocks), so the comparison is not of two all-rejecting walks. The
** agreement of the target with the data: within 0.5% (same reason).
** Linked with static OpenBLAS (the GPU machine has none), like dflc_gpu.
*/
#include <math.h>
#include <time.h>

#include "runtime/backend.h"
#include "runtime/train/accept.h"
#include "train_test.h"

#define STEPS 300
#define ROWS 32

static int walk_on(const dfl_spec *s, dfl_backend_kind kind, const char *drafter, const dfl_dataset *d,
                   dfl_eval_stats *es) {
  dfl_evaluator *ev = calloc(1, sizeof *ev);
  int rc = ev ? dfl_eval_open_on(ev, s, kind) : DFL_ENOMEM;
  if (rc == DFL_OK) rc = dfl_be_load_weights(&ev->be, s, drafter);
  memset(es, 0, sizeof *es);
  if (rc == DFL_OK) rc = dfl_eval_accept(ev, d, 0, es);
  if (ev && ev->ready) dfl_eval_close(ev);
  free(ev);
  return rc;
}

int main(void) {
  if (!dfl_be_cuda_available()) {
    printf("SKIP: no CUDA device\n");
    return 77;
  }
  uint64_t seed = (uint64_t)time(NULL);
  printf("train_accept_cuda: seed %llu\n", (unsigned long long)seed);
  char dir[256], path[300], drafter[300], cmd[1700];
  if (make_tmpdir(dir, sizeof dir, "accept_cuda")) return 1;
  dfl_spec s;
  if (dfl_spec_load("examples/nano.dfl", &s) != DFL_OK) {
    printf("FAIL: examples/nano.dfl does not load\n");
    return 1;
  }
  s.seed = seed;
  s.init_seed = seed ^ 0x5eed;
  s.precision = s.target_dtype = DFL_PREC_FP32;
  dfl_train_opts o;
  memset(&o, 0, sizeof o);
  o.steps = STEPS;
  o.out_dir = dir;
  o.backend = DFL_TRAIN_BE_CUDA;
  o.fp32 = 1;
  o.no_eval = o.quiet = 1;
  dfl_trainer *tr = calloc(1, sizeof *tr);
  if (!tr || dfl_train_open(tr, &s, &o) != DFL_OK) {
    printf("FAIL: open on the CUDA backend\n");
    return 1;
  }
  CHECK(dfl_train_run(tr, NULL, NULL) == DFL_OK, "%d steps on the GPU and the export", STEPS);
  dfl_train_close(tr);
  free(tr);
  snprintf(drafter, sizeof drafter, "%s/drafter", dir);
  snprintf(path, sizeof path, "%s/eval%d.jsonl", dir, ROWS);
  snprintf(cmd, sizeof cmd, "zcat '%s' | head -n %d > '%s'", s.eval_path, ROWS, path);
  CHECK(system(cmd) == 0, "%s", cmd);
  dfl_dataset d;
  memset(&d, 0, sizeof d);
  CHECK(dfl_data_load(path, s.target.vocab, s.seq_len, DFL_BADROW_REFUSE, stderr, &d) == DFL_OK && d.n == ROWS,
        "%s: %d rows", path, ROWS);

  dfl_eval_stats cpu, gpu;
  CHECK(walk_on(&s, DFL_BE_CPU, drafter, &d, &cpu) == DFL_OK, "the walk on the CPU");
  CHECK(walk_on(&s, DFL_BE_CUDA, drafter, &d, &gpu) == DFL_OK, "the walk on the GPU");
  printf("walk: CPU %lld tokens / %lld blocks = %.4f, CUDA %lld / %lld = %.4f\n", (long long)cpu.accept_tokens,
         (long long)cpu.accept_blocks, cpu.accept, (long long)gpu.accept_tokens, (long long)gpu.accept_blocks,
         gpu.accept);
  CHECK(cpu.accept_tokens > cpu.accept_blocks, "the drafter accepts tokens after %d steps", STEPS);
  CHECK(llabs(cpu.accept_blocks - gpu.accept_blocks) <= cpu.accept_blocks / 100 &&
        llabs(cpu.accept_tokens - gpu.accept_tokens) <= cpu.accept_tokens / 100,
        "CPU and CUDA walks within 1%%");

  dfl_agree_stats ac, ag;
  CHECK(dfl_target_agreement(&s, DFL_BE_CPU, &d, &ac) == DFL_OK, "agreement on the CPU");
  CHECK(dfl_target_agreement(&s, DFL_BE_CUDA, &d, &ag) == DFL_OK, "agreement on the GPU");
  printf("agreement: CPU %.4f (%lld tokens), CUDA %.4f (%lld tokens)\n", ac.agreement, (long long)ac.tokens,
         ag.agreement, (long long)ag.tokens);
  CHECK(ac.tokens == ag.tokens && ac.tokens > 0 && fabs(ac.agreement - ag.agreement) <= 0.005,
        "CPU and CUDA agreement within 0.5%%");
  CHECK(fabs(ac.ce - ag.ce) <= 1e-3 * (1 + ac.ce), "target CE %.5f vs %.5f", ac.ce, ag.ce);
  dfl_data_free(&d);
  return finish_test("train_accept_cuda", dir);
}
