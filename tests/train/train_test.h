/*
** train_test.h: helpers of the training-loop tests: a small spec on the nano target built in
** code (independent of the .dfl front end), random JSONL data, temp directories, stderr capture.
*/
#ifndef DFL_TRAIN_TEST_H
#define DFL_TRAIN_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/io/weights.h"
#include "runtime/io/data.h"
#include "runtime/train/train.h"

static int failures;
#include "tests/common/check.h"

/* Nano target, 2 taps, 1-layer drafter, short sequences: a step takes milliseconds. */
static inline int small_spec(dfl_spec *s, const char *train, const char *eval) {
  char err[512];
  memset(s, 0, sizeof *s);
  snprintf(s->target_dir, sizeof s->target_dir, "examples/models/nano");
  if (dfl_hf_arch_load("examples/models/nano/config.json", &s->target, err, sizeof err) != DFL_OK) {
    printf("%s\n", err);
    return 1;
  }
  s->drafter = s->target;
  s->drafter.layers = 1;
  s->drafter.intermediate = 256;
  s->n_taps = 2;
  s->taps[0] = 1;
  s->taps[1] = 2;
  s->block_size = 4;
  s->mask_token = 8190;
  s->init_seed = 7;
  snprintf(s->train_path, sizeof s->train_path, "%s", train);
  if (eval) snprintf(s->eval_path, sizeof s->eval_path, "%s", eval);
  s->seq_len = 32;
  s->anchors = 4;
  s->batch = 2;
  s->shuffle = 1;
  s->seed = 1234;
  s->bad_rows = DFL_BADROW_SKIP;
  s->gamma = 7;
  s->vocab_chunk = 4096;
  s->metric_accuracy = s->metric_tau = 1;
  s->steps = 6;
  s->lr = 1e-3; s->beta1 = 0.9; s->beta2 = 0.999; s->eps = 1e-8; s->clip = 1.0;
  s->schedule = DFL_SCHED_COSINE;
  s->warmup_steps = 2;
  s->accum = 2;
  s->precision = DFL_PREC_FP32;
  s->ckpt_keep = 0;
  s->log_every = 1;
  s->n_nodes = 1;
  s->n_devices = 1;
  s->devices[0].kind = DFL_DEV_CPU;
  s->devices[0].runs_target = s->devices[0].runs_drafter = 1;
  return 0;
}

/* Copies (f32) of the persistent tensors a step changes: PARAM, STATE and GRAD; NULL elsewhere. */
static inline float **train_snapshot(dfl_trainer *tr) {
  const dfl_graph *g = &tr->tg.g;
  float **snap = calloc(g->nt, sizeof *snap);
  for (int i = 0; i < g->nt; i++) {
    dfl_tkind k = g->t[i].kind;
    if (k != DFL_T_PARAM && k != DFL_T_STATE && k != DFL_T_GRAD) continue;
    int64_t n = dfl_tensor_numel(&g->t[i]);
    snap[i] = malloc(sizeof(float) * n);
    dfl_cpu_get_f(&tr->cpu, i, snap[i], n);
  }
  return snap;
}

/* `rows` rows of random tokens: a prompt (mask 0) then a response (mask 1); lengths vary and some
** exceed the 32-token capacity (cut and counted by the loader). */
static inline int write_random_jsonl(const char *path, int rows, dfl_rng *r, int vocab) {
  FILE *f = fopen(path, "w");
  if (!f) return 1;
  for (int i = 0; i < rows; i++) {
    int len = 8 + (int)(dfl_rng_next(r) % 40), prompt = 1 + (int)(dfl_rng_next(r) % 6);
    fprintf(f, "{\"input_ids\": [");
    for (int k = 0; k < len; k++) fprintf(f, "%s%d", k ? ", " : "", 1 + (int)(dfl_rng_next(r) % (uint64_t)(vocab - 1)));
    fprintf(f, "], \"loss_mask\": [");
    for (int k = 0; k < len; k++) fprintf(f, "%s%d", k ? ", " : "", k >= prompt);
    fprintf(f, "]}\n");
  }
  return fclose(f) != 0;
}

static inline int make_tmpdir(char *out, size_t n, const char *tag) {
  snprintf(out, n, "/tmp/dfl_%s_XXXXXX", tag);
  return mkdtemp(out) ? 0 : 1;
}

/* The end of a test: its temporary directory removed when everything passed (kept to look at
** otherwise), the verdict printed; the exit status. */
static inline int finish_test(const char *name, const char *dir) {
  if (!failures) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) printf("note: could not remove %s\n", dir);
  }
  printf("%s: %s\n", name, failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}

/* Redirect stderr into a file while a call runs; returns the captured text (malloc'd). */
typedef struct { int saved; char path[256]; } stderr_cap;
static inline void cap_begin(stderr_cap *c) {
  snprintf(c->path, sizeof c->path, "/tmp/dfl_stderr_XXXXXX");
  int fd = mkstemp(c->path);
  fflush(stderr);
  c->saved = dup(2);
  dup2(fd, 2);
  close(fd);
}
static inline char *cap_end(stderr_cap *c) {
  fflush(stderr);
  dup2(c->saved, 2);
  close(c->saved);
  FILE *f = fopen(c->path, "rb");
  char *buf = calloc(1, 1 << 16);
  if (f && buf) {
    size_t n = fread(buf, 1, (1 << 16) - 1, f);
    buf[n] = 0;
  }
  if (f) fclose(f);
  unlink(c->path);
  fputs(buf ? buf : "", stderr);   /* keep it visible in the test log */
  return buf;
}

#endif
