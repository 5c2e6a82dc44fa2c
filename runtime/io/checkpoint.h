/*
** checkpoint.h: training checkpoints.
**
** A checkpoint is a directory ROOT/step-NNNNNNNN holding
**   state.safetensors  every persistent tensor a step changes, exact f32, named KIND.NAME
**                      (param.fc.weight, state.fc.weight.master, grad..., output...)
**   trainer.json       step, data position (epoch, row cursor), anchor RNG state, the spec path,
**                      the schedule length, the PARAM names in export order
** It is written into ROOT/.tmp-step-NNNNNNNN and renamed into place, so a crash mid-write leaves
** the previous checkpoints intact and never a half-written step-* (a leftover .tmp-* is ignored
** and cleaned by the next save).
**
** ROOT/run.json names the run the checkpoints belong to (dfl_run_begin, before the first step): an
** id, the start time, the spec (path, a hash of its bytes) and the values a resume compares. Each
** trainer.json carries the id as "run"; pruning removes only checkpoints of that id.
*/
#ifndef DFL_CHECKPOINT_H
#define DFL_CHECKPOINT_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include "compiler/graph.h"
#include "compiler/spec.h"
#include "runtime/cpu/cpu.h"

#define DFL_CKPT_FORMAT "dflc-checkpoint-1"
/* The tensor kinds a checkpoint holds and a resume restores, as a kind-bit mask (models/weights.h
** DFL_KIND_BIT): all but activations, frozen weights and inputs. */
#define DFL_CKPT_KINDS (~((1u << DFL_T_ACT) | (1u << DFL_T_FROZEN) | (1u << DFL_T_INPUT)))

typedef struct dfl_ckpt_meta {
  int64_t step;             /* optimizer steps taken */
  int64_t steps_total;      /* schedule length the run was started with */
  int64_t epoch, cursor;    /* data position */
  uint64_t rng[4];          /* anchor RNG state */
  uint64_t seed;
  double tokens_seen;
  int64_t data_rows, data_tokens; /* the training data's usable rows and tokens; 0: not recorded (random
                            ** data, or a checkpoint written before 2026-11-30) */
  char spec[DFL_PATH_MAX];  /* absolute path of the .dfl file */
} dfl_ckpt_meta;

/* Save the persistent state of g (PARAM, STATE, GRAD, OUTPUT tensors) and meta as
** root/step-NNNNNNNN, atomically; keep only the newest `keep` checkpoints (keep <= 0: all).
** The directory written is returned in path. */
int dfl_ckpt_save(const char *root, const dfl_graph *g, dfl_cpu *c, const int *params, int n_params,
                  const dfl_ckpt_meta *m, int keep, char *path, size_t pathlen);

/* Resolve PATH: a checkpoint directory itself, or a root holding step-* (its newest complete one). */
int dfl_ckpt_resolve(const char *path, char *out, size_t outlen);

/* Read trainer.json of the checkpoint at path. */
int dfl_ckpt_read_meta(const char *path, dfl_ckpt_meta *m);

/* The start of a resume, for the single-device trainer and the pipeline alike: arg resolved to its
** checkpoint (path) and meta read; the schedule is the checkpoint's unless *steps (> 0: --steps)
** says otherwise (a note on log when it differs from the spec's); a seed other than the spec's
** is warned about (the data order will differ). */
int dfl_ckpt_begin_resume(const char *arg, const dfl_spec *s, FILE *log, char *path, size_t n, dfl_ckpt_meta *m,
                          int64_t *steps);

/* A resume's data must be the data the checkpoint was trained on: its rows and tokens are compared
** with what was recorded (nothing recorded: not compared), and its position (epoch, row cursor)
** must lie in it. Otherwise the cursor would index another row order and the run would continue
** on other data without a word: a message naming both, DFL_EFORMAT. */
int dfl_ckpt_check_data(const char *ckpt, const dfl_ckpt_meta *m, const char *data_path, int64_t rows, int64_t tokens);

/* Restore every persistent tensor of g from the checkpoint (all must be present with the same
** element count) and its meta. */
int dfl_ckpt_load(const char *path, const dfl_graph *g, dfl_cpu *c, dfl_ckpt_meta *m);

/* Read the checkpoint's PARAMs in export order: names[i] (malloc'd strings), data[i] (malloc'd
** f32), shapes. Free with dfl_ckpt_params_free. */
typedef struct dfl_ckpt_params {
  int n;
  char **names;
  float **data;
  int *ndim;
  int64_t *shape;           /* 4 per tensor */
} dfl_ckpt_params;
int dfl_ckpt_read_params(const char *path, dfl_ckpt_params *p);
void dfl_ckpt_params_free(dfl_ckpt_params *p);

/* The best checkpoint by evaluation (the highest eval acceptance length, the greedy decoder's walk
** of runtime/train/accept.h; the earlier on a tie) under root:
** root/best.json {"step", "acceptance_length", "tau", "loss", "dir"} and the symlink root/best -> step-N, both replaced
** atomically, so `--resume ROOT/best` and `dflc export ROOT/best` take it. dfl_ckpt_save's pruning
** (ckpt_keep) never removes it. read_best: 1 and the record when root has one, else 0 (a record
** without acceptance_length, written before it existed, reads as 0: any evaluation beats it). */
int dfl_ckpt_mark_best(const char *root, int64_t step, double accept, double tau, double loss);
int dfl_ckpt_read_best(const char *root, int64_t *step, double *accept, double *loss);
/* Before a resumed run appends to its metrics.jsonl: drop the lines of steps after the checkpoint's
** (those a killed run wrote after it, which the resumed run writes again) and a torn last line, so
** every step is there once. A missing file is fine. */
int dfl_ckpt_trim_metrics(const char *path, int64_t step);
/* Keep the newest `keep` checkpoints under root, step's and the best's (keep <= 0: all): what every
** save does, and what a move of the best record does for the checkpoint it leaves. */
void dfl_ckpt_prune(const char *root, int keep, int64_t step);
/* Forget root's best record (a fresh run into an old run directory). */
void dfl_ckpt_clear_best(const char *root);

/* The checkpoint root a run writes: the spec's checkpoint.dir, or OUT/ckpt with --out (as the
** trainer and the pipeline name it). */
int dfl_ckpt_root_of(const dfl_spec *s, const char *out_dir, char *root, size_t n);
/* How many complete checkpoints (step-* with trainer.json) root holds; the newest in *newest. */
int dfl_ckpt_count(const char *root, int64_t *newest);
/* `dflc train --restart`: move root's checkpoints, best record and run.json into a new
** root/old-YYYYMMDD-HHMMSS (its path in moved), so a fresh run starts over without deleting them. */
int dfl_ckpt_restart(const char *root, char *moved, size_t n);
/* The run's identity in root/run.json, before its first step. Fresh (resume_ckpt NULL): a new id.
** Resumed: the id of the run in the checkpoint's root (its run.json, if any) is kept, and the spec
** is compared with the values recorded there: a change the checkpoint cannot continue under
** (block_size, mask_token_id, target_layer_ids, the drafter's layers) is refused naming it
** (DFL_EFORMAT); the others (steps, lr, schedule, batch, ...) are printed on log as notes.
** steps: the schedule this run takes (--steps, else the spec's; 0: not compared). */
int dfl_run_begin(const char *root, const dfl_spec *s, int64_t steps, const char *resume_ckpt, FILE *log);

/* Remove a directory and the plain files in it (checkpoints have no subdirectories). */
int dfl_rm_dir(const char *dir);
/* mkdir -p */
int dfl_mkdirs(const char *dir);

#endif
