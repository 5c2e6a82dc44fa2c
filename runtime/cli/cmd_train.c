/*
** cmd_train.c: `dflc train` (CPU or CUDA backend, from a .dfl or a `dflc build` directory),
** `dflc eval` and `dflc export`.
*/
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "runtime/cli/cli.h"
#include "runtime/compile.h"
#include "compiler/spec.h"
#include "runtime/io/checkpoint.h"
#include "runtime/io/data.h"
#include "runtime/pipeline/pipeline.h"
#include "runtime/train/accept.h"
#include "runtime/train/train.h"
#include "runtime/train/train_export.h"

static int parse_i64(const char *cmd, const char *opt, const char *v, int64_t min, int64_t *out) {
  char *end;
  errno = 0;
  long long x = v ? strtoll(v, &end, 10) : 0;
  if (v && errno == ERANGE) {   /* strtoll clamps to INT64_MAX: refused, not taken as a huge schedule */
    fprintf(stderr, "dflc %s: %s %s does not fit in 64 bits\n", cmd, opt, v);
    return 0;
  }
  if (!v || *end || end == v || x < min) {
    fprintf(stderr, "dflc %s: %s needs an integer >= %" PRId64 "%s%s%s\n", cmd, opt, min, v ? " (got '" : "",
            v ? v : "", v ? "')" : "");
    return 0;
  }
  *out = x;
  return 1;
}

/* A JSON string, or null for bytes that are not UTF-8 (which no JSON string holds). */
static json_t *jstr(const char *v) {
  json_t *j = json_string(v);
  return j ? j : json_null();
}

static void train_usage(FILE *f) {
  fprintf(f,
          "usage: dflc train SPEC.dfl|BUILD_DIR [--steps N] [--stop-at K] [--out DIR] [--resume CKPT]\n"
          "                  [--cpu | --cuda] [--fp32] [--cpu-threads N] [--no-eval] [--no-export] [--quiet]\n"
          "                  [--over-budget] [--restart]\n"
          "  Train the spec's drafter on its device: the CUDA backend when the spec puts the drafter on a\n"
          "  GPU (the CPU backend, with a notice, when no GPU is usable), else the CPU backend. BUILD_DIR\n"
          "  is a directory written by `dflc build` (its spec, and its cubins: no kernel compilation).\n"
          "  Progress every log_every steps, every step's metrics in DIR/metrics.jsonl, checkpoints in\n"
          "  DIR/ckpt/step-N, the drafter in DIR/drafter.\n"
          "  A spec whose topology has several devices runs the pipeline (docs/pipeline.md); the options\n"
          "  are the same (--cpu runs its GPU devices as CPU threads; --unplanned is single-device only).\n"
          "  --cpu / --cuda  force the CPU reference backend / require the CUDA backend\n"
          "  --fp32          precision and target dtype fp32 (verification against the CPU)\n"
          "  --steps N       schedule length (default: the spec's train.steps; warmup keeps its share)\n"
          "  --stop-at K     stop after step K with a checkpoint (the schedule stays N steps long)\n"
          "  --out DIR       run directory (default runs/<spec name>)\n"
          "  --resume CKPT   continue bit-exactly from a checkpoint (or the newest one under a ckpt/ dir)\n"
          "  --restart       a fresh run whose checkpoint directory holds an earlier run's checkpoints: move\n"
          "                  them into CKPT_DIR/old-DATE first (without it train refuses such a directory)\n"
          "  --cpu-threads N BLAS threads\n"
          "  --over-budget   train although the memory plan does not fit a device's memory_budget (or, for a\n"
          "                  CPU without one, this machine's memory); without it train refuses, as dflc check does\n"
          "  Before anything is loaded, train refuses what `dflc check` refuses (weights' headers, data\n"
          "  files, directories, the memory plan).\n");
}

/* The run's identity before its first step: --restart moves an earlier run's checkpoints aside;
** root/run.json names this run (a resume keeps the id of the run it continues, and compares the
** spec with it: runtime/io/checkpoint.h). */
static int begin_run(const dfl_spec *s, const dfl_train_opts *o, int restart) {
  char root[DFL_PATH_MAX + 16], moved[DFL_PATH_MAX + 64], ckpt[DFL_PATH_MAX];
  int64_t newest;
  if (dfl_ckpt_root_of(s, o->out_dir, root, sizeof root)) {
    fprintf(stderr, "dflc train: the checkpoint directory's name is too long\n");
    return DFL_ERR;
  }
  if (restart && dfl_ckpt_count(root, &newest) > 0) {
    int rc = dfl_ckpt_restart(root, moved, sizeof moved);
    if (rc) return rc;
    printf("restart: the earlier run's checkpoints moved to %s\n", moved);
  }
  if (o->resume && dfl_ckpt_resolve(o->resume, ckpt, sizeof ckpt)) return DFL_EIO;
  return dfl_run_begin(root, s, o->steps > 0 ? o->steps : o->resume ? 0 : s->steps, o->resume ? ckpt : NULL, stdout);
}

int dfl_cmd_train(int argc, char **argv) {
  dfl_train_opts o;
  memset(&o, 0, sizeof o);
  const char *spec_file = NULL;
  int64_t v;
  int over_budget = 0, restart = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      train_usage(stdout);
      return 0;
    } else if (!strcmp(a, "--steps")) {
      if (!parse_i64("train", a, next, 1, &o.steps)) return 2;
      i++;
    } else if (!strcmp(a, "--stop-at")) {
      if (!parse_i64("train", a, next, 1, &o.stop_at)) return 2;
      i++;
    } else if (!strcmp(a, "--cpu-threads")) {
      if (!parse_i64("train", a, next, 1, &v)) return 2;
      o.cpu_threads = (int)v;
      i++;
    } else if (!strcmp(a, "--out") || !strcmp(a, "-o") || !strcmp(a, "--resume")) {
      if (!next) {
        fprintf(stderr, "dflc train: %s needs a directory\n", a);
        return 2;
      }
      if (!strcmp(a, "--resume")) o.resume = next;
      else o.out_dir = next;
      i++;
    } else if (!strcmp(a, "--no-eval")) {
      o.no_eval = 1;
    } else if (!strcmp(a, "--no-export")) {
      o.no_export = 1;
    } else if (!strcmp(a, "--quiet")) {
      o.quiet = 1;
    } else if (!strcmp(a, "--over-budget")) {
      over_budget = 1;
    } else if (!strcmp(a, "--restart")) {
      restart = 1;
    } else if (!strcmp(a, "--unplanned")) {
      o.unplanned = 1;
    } else if (!strcmp(a, "--cpu")) {
      o.backend = DFL_TRAIN_BE_CPU;
    } else if (!strcmp(a, "--cuda")) {
      o.backend = DFL_TRAIN_BE_CUDA;
    } else if (!strcmp(a, "--fp32")) {
      o.fp32 = 1;
    } else if (a[0] == '-' || spec_file) {
      fprintf(stderr, "dflc train: unexpected argument '%s'\n", a);
      train_usage(stderr);
      return 2;
    } else {
      spec_file = a;
    }
  }
  if (!spec_file) {
    train_usage(stderr);
    return 2;
  }
  if (restart && o.resume) {
    fprintf(stderr, "dflc train: --restart starts a fresh run; --resume continues one: pass one of them\n");
    return 2;
  }
  static dfl_build_info bi;   /* DIR/build.json, read once */
  if (dfl_build_resolve(spec_file, &bi)) return 1;
  const char *spec_path = bi.spec;
  const int from_build = bi.is_dir;
  dfl_spec *s = malloc(sizeof *s);
  dfl_trainer *tr = malloc(sizeof *tr);
  static dfl_compiled pre;   /* the check's graph and plan, which the trainer takes */
  if (!s || !tr) return 1;
  /* everything dflc check refuses, before minutes of loading (the plan: unless --over-budget, or
  ** --unplanned, which allocates per tensor) */
  dfl_deep_opts deep = {over_budget || o.unplanned, o.out_dir, o.resume, !o.resume, restart, 0, &pre};
  int rc = dfl_spec_load_deep(spec_path, s, dfl_check_deep, &deep);
  if (rc == DFL_OK && from_build) {
    /* DIR runs what `dflc build` wrote: the spec compiled as built (before --steps and the rest) */
    dfl_compiled own;
    memset(&own, 0, sizeof own);
    const dfl_compiled *c = &pre;
    if (!pre.g) {   /* the check kept nothing (a spec of two devices): compiled as `dflc build` compiles it */
      dfl_compile_req req = {.trainer = 1, .no_plan = deep.no_plan};
      int kd = dfl_compile_drafter_device(s);
      if ((kd < 0 || dfl_compile_device(s, kd, &req, &own) != DFL_OK) && !own.planned) rc = DFL_ERR;
      c = &own;
    }
    if (rc == DFL_OK && dfl_build_verify(spec_file, &bi, c)) rc = DFL_ERR;
    dfl_compiled_free(&own);
  }
  o.pre = &pre;
  if (rc == DFL_OK) rc = begin_run(s, &o, restart);
  if (rc == DFL_OK && dfl_pipe_wants(s)) {
    /* several devices: target devices, a hidden-state queue, data-parallel drafters */
    int gpus = 0;
    for (int i = 0; i < s->n_devices; i++) gpus += s->devices[i].kind == DFL_DEV_GPU;
    if (o.unplanned || (o.backend == DFL_TRAIN_BE_CUDA && !gpus)) {
      fprintf(stderr, "dflc train: %s: %s\n", spec_path, o.unplanned ? "--unplanned applies to single-device runs"
              : "--cuda, but the topology's devices are CPUs");
      free(tr);
      free(s);
      return 2;
    }
    if (o.fp32) {   /* as dfl_train_open does for one device */
      s->precision = DFL_PREC_FP32;
      s->target_dtype = DFL_PREC_FP32;
    }
    dfl_pipe_opts po = {.steps = o.steps, .stop_at = o.stop_at, .resume = o.resume, .out_dir = o.out_dir,
                        .quiet = o.quiet, .no_export = o.no_export, .no_eval = o.no_eval,
                        .cpu_threads = o.cpu_threads,
                        .emulate_gpus = o.backend == DFL_TRAIN_BE_CPU};
    dfl_compiled_free(&pre);   /* the runner compiles each device itself */
    rc = dfl_pipe_run(s, &po, NULL);
    free(tr);
    free(s);
    return rc == DFL_OK ? 0 : 1;
  }
  if (rc == DFL_OK) rc = dfl_train_open(tr, s, &o);
  else memset(tr, 0, sizeof *tr);
  if (rc == DFL_OK) {
    rc = dfl_train_run(tr, NULL, NULL);
    dfl_train_close(tr);
  }
  dfl_compiled_free(&pre);   /* when the trainer did not take it */
  free(tr);
  free(s);
  return rc == DFL_OK ? 0 : 1;
}

int dfl_cmd_eval(int argc, char **argv) {
  const char *spec_file = NULL, *drafter = NULL, *data = NULL;
  int64_t threads = 0;
  int force = DFL_TRAIN_BE_AUTO, agree = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      printf("usage: dflc eval SPEC.dfl --drafter DIR [--data FILE.jsonl[.gz]] [--cpu | --cuda] [--cpu-threads N]\n"
             "                 [--no-agreement]\n"
             "  tau (1 + mean accepted prefix at uniform anchors), accept (the acceptance length of greedy\n"
             "  speculative decoding, walked block by block over each row's response), loss, accuracy and\n"
             "  per-position accuracy of a drafter (an export, a released DFlash drafter, or a checkpoint\n"
             "  directory such as RUN/ckpt/best: its exact fp32 params) on the spec's eval file (or --data),\n"
             "  then the agreement: the fraction of supervised tokens that are the target's argmax (accept\n"
             "  is the decoder's count when the data is the target's greedy output; --no-agreement skips\n"
             "  this target forward). On the device that trains it: the CUDA backend when the spec puts\n"
             "  the drafter on a GPU and one is usable, else the CPU backend (--cpu / --cuda force one).\n");
      return 0;
    } else if (!strcmp(a, "--no-agreement")) {
      agree = 0;
    } else if (!strcmp(a, "--cpu") || !strcmp(a, "--cuda")) {
      force = !strcmp(a, "--cpu") ? DFL_TRAIN_BE_CPU : DFL_TRAIN_BE_CUDA;
    } else if (!strcmp(a, "--drafter") || !strcmp(a, "--data")) {
      if (!next) {
        fprintf(stderr, "dflc eval: %s needs a path\n", a);
        return 2;
      }
      if (!strcmp(a, "--drafter")) drafter = next;
      else data = next;
      i++;
    } else if (!strcmp(a, "--cpu-threads")) {
      if (!parse_i64("eval", a, next, 1, &threads)) return 2;
      i++;
    } else if (a[0] == '-' || spec_file) {
      fprintf(stderr, "dflc eval: unexpected argument '%s'\n", a);
      return 2;
    } else {
      spec_file = a;
    }
  }
  if (!spec_file || !drafter) {
    fprintf(stderr, "usage: dflc eval SPEC.dfl --drafter DIR [--data FILE]\n");
    return 2;
  }
  dfl_spec *s = malloc(sizeof *s);
  dfl_dataset d;
  memset(&d, 0, sizeof d);
  int rc = !s ? DFL_ENOMEM : dfl_spec_load(spec_file, s);
  if (rc == DFL_OK) {
    if (data) snprintf(s->eval_path, sizeof s->eval_path, "%s", data);
    if (!s->eval_path[0]) {
      fprintf(stderr, "%s: the spec names no eval file; pass one with --data FILE\n", spec_file);
      rc = DFL_EFORMAT;
    }
  }
  if (rc == DFL_OK && threads > 0) dfl_train_set_threads((int)threads);
  if (rc == DFL_OK && (rc = dfl_data_load_fmt(s->eval_path, s->format, s->target.vocab, s->seq_len, s->bad_rows, stderr, &d)))
    fprintf(stderr, "dflc eval: data %s refused (see the messages above)\n", s->eval_path);
  int have_data = rc == DFL_OK;
  /* the backend: as dflc train picks it (its drafter device), unless forced */
  dfl_backend_kind kind = DFL_BE_CPU;
  if (rc == DFL_OK && force == DFL_TRAIN_BE_CUDA && !dfl_be_cuda_available()) {
    fprintf(stderr, "dflc eval: --cuda, but no CUDA device is usable here\n");
    rc = DFL_ERR;
  } else if (rc == DFL_OK) {
    kind = dfl_train_backend(s, force, stderr, "evaluating");
  }
  if (rc == DFL_OK) {
    dfl_eval_stats es;
    printf("eval: %s on the %s backend\n", drafter, kind == DFL_BE_CUDA ? "CUDA" : "CPU");
    dfl_agree_stats ag;
    memset(&ag, 0, sizeof ag);
    if ((rc = dfl_eval_drafter(s, kind, drafter, &d, &es)) == DFL_OK) {
      dfl_eval_print(stdout, "eval", &es);
      printf("accept %.4f: %" PRId64 " tokens in %" PRId64 " blocks of greedy decoding over %" PRId64
             " responses; their mean acceptance length %.4f (a benchmark's per-prompt average)\n", es.accept,
             es.accept_tokens, es.accept_blocks, es.accept_n_responses, es.accept_responses);
    }
    /* after the evaluator is closed: on a GPU the two graphs never hold device memory together */
    if (rc == DFL_OK && agree && (rc = dfl_target_agreement(s, kind, &d, &ag)) == DFL_OK) dfl_agree_print(stdout, &ag);
    if (rc == DFL_OK) {
      /* jansson escapes the paths; one that is not UTF-8 is written as null, the numbers still come */
      json_t *o = json_object();
      json_object_set_new(o, "drafter", jstr(drafter));
      json_object_set_new(o, "data", jstr(s->eval_path));
      json_object_set_new(o, "loss", json_real(es.loss));
      json_object_set_new(o, "acc", json_real(es.acc));
      json_object_set_new(o, "tau", json_real(es.tau));
      json_object_set_new(o, "acceptance_length", json_real(es.accept));
      json_object_set_new(o, "acceptance_length_responses", json_real(es.accept_responses));
      json_object_set_new(o, "rows", json_integer(es.rows));
      json_object_set_new(o, "blocks", json_integer(es.blocks));
      json_object_set_new(o, "accept_tokens", json_integer(es.accept_tokens));
      json_object_set_new(o, "accept_blocks", json_integer(es.accept_blocks));
      if (agree) {
        json_object_set_new(o, "agreement", json_real(ag.agreement));
        json_object_set_new(o, "agreement_tokens", json_integer(ag.tokens));
        json_object_set_new(o, "target_ce", json_real(ag.ce));
      }
      char *line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
      if (line) printf("%s\n", line);
      free(line);
      json_decref(o);
    }
  }
  if (have_data) dfl_data_free(&d);
  free(s);
  return rc == DFL_OK ? 0 : 1;
}

int dfl_cmd_export(int argc, char **argv) {
  const char *ckpt = NULL, *out = NULL, *spec_file = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      printf("usage: dflc export CKPT -o DIR [--spec SPEC.dfl]\n"
             "  Write a checkpoint's drafter in the Hugging Face DFlash format (config.json +\n"
             "  model.safetensors) that SGLang/vLLM load. CKPT is a step-N directory or a ckpt/ root\n"
             "  (its newest checkpoint). The spec recorded in the checkpoint is used unless --spec.\n");
      return 0;
    } else if (!strcmp(a, "-o") || !strcmp(a, "--out") || !strcmp(a, "--spec")) {
      if (!next) {
        fprintf(stderr, "dflc export: %s needs a path\n", a);
        return 2;
      }
      if (!strcmp(a, "--spec")) spec_file = next;
      else out = next;
      i++;
    } else if (a[0] == '-' || ckpt) {
      fprintf(stderr, "dflc export: unexpected argument '%s'\n", a);
      return 2;
    } else {
      ckpt = a;
    }
  }
  if (!ckpt || !out) {
    fprintf(stderr, "usage: dflc export CKPT -o DIR [--spec SPEC.dfl]\n");
    return 2;
  }
  char path[DFL_PATH_MAX];
  dfl_ckpt_meta m;
  int rc = dfl_ckpt_resolve(ckpt, path, sizeof path);
  if (rc == DFL_OK) rc = dfl_ckpt_read_meta(path, &m);
  if (rc != DFL_OK) return 1;
  dfl_spec *s = malloc(sizeof *s);
  if (!s) return 1;
  if (!spec_file) spec_file = m.spec;
  if ((rc = dfl_spec_load(spec_file, s)) != DFL_OK) {
    fprintf(stderr, "dflc export: cannot load the spec %s the checkpoint was trained with; pass it with --spec\n",
            spec_file);
    free(s);
    return 1;
  }
  dfl_ckpt_params p;
  if ((rc = dfl_ckpt_read_params(path, &p)) == DFL_OK) {
    rc = dfl_train_export_params(s, &p, out);
    if (rc == DFL_OK) rc = dfl_train_verify_params(s, &p, out);
    if (rc == DFL_OK) printf("exported %s (step %" PRId64 ") to %s (reloaded bit-exactly)\n", path, m.step, out);
    dfl_ckpt_params_free(&p);
  }
  free(s);
  return rc == DFL_OK ? 0 : 1;
}
