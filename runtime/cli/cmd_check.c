/*
** cmd_check.c: `dflc check FILE.dfl` — parse and validate a spec. Silent with exit 0 when the
** spec is good (warnings may be printed), every error and exit 1 otherwise, 2 for bad usage.
*/
#include <inttypes.h>
#include <jansson.h>
#include <sys/stat.h>
#include <zlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cli/cli.h"
#include "runtime/compile.h"
#include "compiler/diag.h"
#include "compiler/plan.h"
#include "compiler/spec.h"
#include "models/models.h"
#include "runtime/io/checkpoint.h"
#include "runtime/io/data.h"
#include "runtime/io/export.h"
#include "runtime/io/safetensors.h"
#include "runtime/io/weights.h"

/* ---- the checks beyond the spec: what train would refuse before its first step ---- */

#define DEEP_MAX_REPORTS 20

typedef struct { dfl_loc at; int n; } reporter;

static void report_line(void *ctx, const char *msg) {
  reporter *r = ctx;
  if (r->n++ < DEEP_MAX_REPORTS) dfl_diag_error(r->at, "%s", msg);
}

static void report_rest(reporter *r, const char *what) {
  if (r->n > DEEP_MAX_REPORTS)
    dfl_diag_error(r->at, "... and %d more problems with %s", r->n - DEEP_MAX_REPORTS, what);
}

/* The target's weights (FROZEN tensors of the colocated training graph: the names and shapes
** every device's target reads) and a released drafter's (PARAMs), from the headers only. */
static void check_weights(const dfl_spec *s, const dfl_spec_where *w, const dfl_graph *g) {
  int target = !s->target_random && s->target_dir[0], drafter = s->init_from[0] != 0;
  if (!target && !drafter) return;
  if (!g) {
    dfl_diag_error(dfl_spec_where_key(w, "drafter", NULL), "cannot build the training graph of this spec");
    return;
  }
  char err[2048];
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 0 ? !target : !drafter) continue;
    const char *dir = pass == 0 ? s->target_dir : s->init_from;
    reporter r = {dfl_spec_where_key(w, pass == 0 ? "target" : "drafter", pass == 0 ? "model" : "init"), 0};
    dfl_st st;
    int rc;
    /* a released drafter's config.json, as train's loader checks it (block size, taps, mask token,
    ** sizes), before its headers: train refuses a disagreeing or empty one */
    if (pass == 1 && (rc = dfl_drafter_check_config(dir, s, err, sizeof err)) != DFL_OK) {
      dfl_diag_error(r.at, "drafter config: %s", err);
      if (strstr(err, "but the spec"))
        dfl_diag_help("the drafter in `init` was made for another spec: fix the spec's `drafter` and `target` "
                      "(taps, mask_token, block_size) to match it, or train fresh (`init = fresh`)");
      else
        dfl_diag_help("a drafter directory holds the config.json written with its weights (`dflc export` writes both)");
      continue;
    }
    rc = dfl_st_open(&st, dir, err, sizeof err);
    if (rc != DFL_OK) {
      dfl_diag_error(r.at, "%s weights: %s", pass == 0 ? "target" : "drafter", err);
      if (rc == DFL_EIO && (strstr(err, "not a regular file") || strstr(err, "symbolic link")))
        dfl_diag_help("weights are mapped by their size: give the file itself (a FIFO or a device would block or be read "
                      "forever; a link must reach an existing file)");
      else if (rc == DFL_EIO)
        dfl_diag_help("the directory needs model.safetensors, or model.safetensors.index.json and every shard it names");
      else
        dfl_diag_help("a damaged download or not safetensors: fetch the weights again");
      continue;
    }
    unsigned kind = DFL_KIND_BIT(pass == 0 ? DFL_T_FROZEN : DFL_T_PARAM);
    if (pass == 1 && dfl_weights_check(g, &st, kind, "", NULL, NULL) > dfl_weights_check(g, &st, kind, "model.", NULL, NULL))
      dfl_weights_check(g, &st, kind, "model.", report_line, &r);   /* names under "model." */
    else
      dfl_weights_check(g, &st, kind, "", report_line, &r);
    report_rest(&r, pass == 0 ? "the target's weights" : "the drafter's weights");
    if (r.n)
      dfl_diag_help("these weights do not belong to the %s this spec describes (%s): re-download them, or fix the spec",
                    pass == 0 ? "target" : "drafter", pass == 0 ? "config.json" : "its config.json and `drafter`");
    dfl_st_close(&st);
  }
}

static void check_run_dir(const dfl_spec *s, const dfl_spec_where *w, const char *out_dir) {
  char dir[DFL_PATH_MAX + 16], why[DFL_PATH_MAX + 128], nm[DFL_PATH_MAX];
  if (out_dir) snprintf(dir, sizeof dir, "%s", out_dir);
  else {   /* as dflc train names it: runs/<the spec's file name without its extension> */
    const char *b = strrchr(s->file, '/');
    snprintf(nm, sizeof nm, "%s", b ? b + 1 : s->file);
    char *dot = strrchr(nm, '.');
    if (dot && dot != nm) *dot = 0;
    snprintf(dir, sizeof dir, "runs/%s", nm);
  }
  if (!dfl_spec_dir_creatable(dir, why, sizeof why)) {
    dfl_diag_error(dfl_spec_where_key(w, "", NULL), "the run directory `%s` cannot be created: %s", dir, why);
    dfl_diag_help("run from a directory you can write, or name another with `dflc train --out DIR`");
  }
}

static void check_plan(const dfl_spec *s, const dfl_spec_where *w, dfl_compiled *one) {
  dfl_plan_miss miss[8];
  int n = dfl_plan_verdict(s, miss, 8, one);
  dfl_loc at = dfl_spec_where_key(w, "topology", "memory");
  for (int i = 0; i < n && i < 8; i++) {
    const dfl_plan_miss *m = &miss[i];
    char b1[32], b2[32], b3[32], b4[32];
    if (m->lower) {
      dfl_diag_error(dfl_spec_where_key(w, "topology", NULL), "device %s: op %s: no CUDA kernel takes its shape on %s "
                     "(see the message above)", m->device,
                     m->op, m->arch);
      dfl_diag_help("the CUDA backend would refuse it at init (docs/codegen.md, library launches); change the model's "
                    "shapes or run this device on the CPU");
      if (!m->mem) continue;
    }
    if (m->failed) {
      dfl_diag_error(at, "device %s: no memory plan (see the messages above)", m->device);
      continue;
    }
    if (m->host)
      dfl_diag_error(at, "device %s needs %s of memory, more than this machine's %s (it has no memory_budget)",
                     m->device, dfl_plan_bytes_str(b1, sizeof b1, m->need), dfl_plan_bytes_str(b2, sizeof b2, m->budget));
    else
      dfl_diag_error(at, "device %s needs %s but its memory budget is %s, even recomputing forward ops", m->device,
                     dfl_plan_bytes_str(b1, sizeof b1, m->need), dfl_plan_bytes_str(b2, sizeof b2, m->budget));
    dfl_diag_help("persistent %s, per-step %s: `dflc plan %s` shows the parts and the batch, seq_len or anchors that "
                  "would fit (`dflc train --over-budget` trains anyway)", dfl_plan_bytes_str(b3, sizeof b3, m->persistent),
                  dfl_plan_bytes_str(b4, sizeof b4, m->step), s->file);
  }
  if (n > 8) dfl_diag_error(at, "... and %d more devices that do not fit", n - 8);
}

/* A fresh run into a checkpoint directory that holds an earlier run's checkpoints would mix the
** two: --resume would pick the earlier run's newest step, pruning would delete the new run's. */
static void check_earlier_run(const dfl_spec *s, const dfl_spec_where *w, const char *out_dir) {
  char root[DFL_PATH_MAX + 16];
  int64_t newest;
  if (dfl_ckpt_root_of(s, out_dir, root, sizeof root)) return;
  int n = dfl_ckpt_count(root, &newest);
  if (n == 0) return;
  dfl_diag_error(out_dir ? dfl_spec_where_key(w, "", NULL) : dfl_spec_where_key(w, "train.checkpoint", "dir"),
                 "the checkpoint directory `%s` holds %d checkpoint%s of an earlier run (the newest step-%08" PRId64
                 "); a fresh run would mix its checkpoints with them", root, n, n == 1 ? "" : "s", newest);
  dfl_diag_help("`dflc train ... --resume %s` continues that run; `dflc train ... --restart` moves its checkpoints into "
                "%s/old-DATE and starts over; or name another directory with --out", root, root);
}

/* Rows made by scripts/dflc-prepare carry FILE.prepare.json: the tokenizer they were made with (its
** size and CRC-32) must be the target's own, or the drafter learns from another vocabulary's ids. */
static void check_prepared(const dfl_spec *s, const dfl_spec_where *w) {
  const char *files[2] = {s->train_path, s->eval_path}, *keys[2] = {"train", "eval"};
  char side[DFL_PATH_MAX + 32], tokp[DFL_PATH_MAX + 32];
  if (!s->target_dir[0]) return;
  snprintf(tokp, sizeof tokp, "%s/tokenizer.json", s->target_dir);
  for (int i = 0; i < 2; i++) {
    if (!files[i][0]) continue;
    snprintf(side, sizeof side, "%s.prepare.json", files[i]);
    struct stat sb;
    if (stat(side, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
    json_error_t je;
    json_t *o = json_load_file(side, 0, &je);
    json_t *crc = o ? json_object_get(o, "tokenizer_crc32") : NULL, *len = o ? json_object_get(o, "tokenizer_bytes") : NULL;
    if (!json_is_integer(crc) || !json_is_integer(len)) {
      dfl_diag_warning(dfl_spec_where_key(w, "data", keys[i]), "%s: no tokenizer record (tokenizer_crc32, "
                       "tokenizer_bytes): the rows' tokenizer cannot be compared with the target's", side);
      json_decref(o);
      continue;
    }
    FILE *f = fopen(tokp, "rb");
    if (!f) { json_decref(o); continue; } /* the target's tokenizer is optional (check_weights reads what it needs) */
    unsigned char buf[1 << 16];
    size_t n;
    uLong c = crc32(0L, Z_NULL, 0);
    long long total = 0;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) { c = crc32(c, buf, (uInt)n); total += (long long)n; }
    fclose(f);
    if ((long long)json_integer_value(len) != total || (uLong)json_integer_value(crc) != c) {
      dfl_diag_error(dfl_spec_where_key(w, "data", keys[i]), "`%s` was prepared with another tokenizer than the "
                     "target's (%s: %lld bytes, CRC-32 %08lx; %s records %lld bytes, %08lx)", files[i], tokp, total,
                     (unsigned long)c, side, (long long)json_integer_value(len), (unsigned long)json_integer_value(crc));
      dfl_diag_help("make the rows again with this target: `scripts/dflc-prepare %s CONVERSATIONS -o %s`", s->target_dir,
                    files[i]);
    }
    json_decref(o);
  }
}

/* The data files loaded as train loads them (its bad-row policy, vocab and capacity): a packed
** file with a bad checksum, truncated or compressed, or a file with no usable row, fails here and
** not after the run has started. The loader's messages become this check's, at the file's key. */
static void check_data(const dfl_spec *s, const dfl_spec_where *w) {
  if (s->format == DFL_DATA_RANDOM) return;
  for (int pass = 0; pass < 2; pass++) {
    const char *path = pass == 0 ? s->train_path : s->eval_path;
    if (!path[0]) continue;
    char *buf = NULL;
    size_t len = 0;
    FILE *log = open_memstream(&buf, &len);
    if (!log) return;
    dfl_dataset d;
    memset(&d, 0, sizeof d);
    int rc = dfl_data_load_fmt(path, s->format, s->target.vocab, s->seq_len, s->bad_rows, log, &d);
    fclose(log);
    if (rc == DFL_OK) dfl_data_free(&d);
    else {
      reporter r = {dfl_spec_where_key(w, "data", pass == 0 ? "train" : "eval"), 0};
      int any = 0;
      for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
        if (strncmp(line, "note:", 5) && !strstr(line, ": note: ")) { report_line(&r, line); any = 1; }   /* notes are not refusals */
      if (!any) report_line(&r, "the data file is refused");
      report_rest(&r, "the data");
      dfl_diag_help("train refuses this file before its first step (`bad_rows = skip` passes over bad rows, not a "
                    "damaged file or one with no usable row)");
    }
    free(buf);
  }
}

void dfl_check_deep(const dfl_spec *s, const dfl_spec_where *w, void *opts) {
  const dfl_deep_opts *o = opts;
  /* The graph, compiled once (runtime/compile.c): a one-device spec's as the trainer runs it, whose
  ** plan the verdict makes and `dflc train` then takes; with several devices, the drafter's with the
  ** target colocated, for the weights every device reads (the verdict compiles each device). */
  int one = s->n_devices == 1, kd = dfl_compile_drafter_device(s);
  dfl_compiled *cp = calloc(1, sizeof *cp);
  dfl_compile_req req = {.trainer = one, .colocate = 1, .no_plan = 1};
  int built = cp && kd >= 0 && dfl_compile_graph(s, kd, &req, cp) == DFL_OK;
  check_run_dir(s, w, o ? o->out_dir : NULL);
  if (o && o->fresh_train && !o->restart) check_earlier_run(s, w, o->out_dir);
  if (o && o->data && dfl_diag_errors() == 0) check_data(s, w);
  check_weights(s, w, built ? cp->g : NULL);
  check_prepared(s, w);
  if (!(o && o->no_plan) && dfl_diag_errors() == 0) check_plan(s, w, one && built ? cp : NULL);
  if (o && o->keep && one && built) dfl_compiled_move(o->keep, cp);   /* the trainer's now */
  else if (cp) dfl_compiled_free(cp);
  free(cp);
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: dflc check FILE.dfl\n"
          "\n"
          "Parse and validate a pipeline spec: everything `dflc train` would refuse before its first\n"
          "step. The target's config.json and the safetensors headers of its weights are read (never\n"
          "the weight data): every tensor the graph needs, with its shape and a float dtype, shards and\n"
          "index in agreement. Data files must be regular, non-empty files (gzip when named .gz), loaded\n"
          "as train loads them (a packed file's checksum, at least one usable row), and the\n"
          "target's config.json, index and weights regular files (a FIFO is refused, never opened); the\n"
          "checkpoint and run (runs/NAME) directories must be creatable; every device's memory plan\n"
          "must fit its budget (the verdict of `dflc plan`; a CPU without a budget: this machine's\n"
          "memory). Prints nothing and exits 0 when the spec is good;\n"
          "otherwise prints every error as FILE:LINE:COL with the source line and exits 1.\n"
          "Warnings (legal but suspicious) do not change the exit status.\n"
          "\n"
          "options:\n"
          "  -h, --help   this help\n"
          "\n"
          "The language is described in docs/language.md.\n");
}

int dfl_cmd_check(int argc, char **argv) {
  const char *file = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      usage(stdout);
      return 0;
    }
    if (argv[i][0] == '-' && argv[i][1]) {
      fprintf(stderr, "dflc check: unknown option `%s`\n", argv[i]);
      usage(stderr);
      return 2;
    }
    if (file) {
      fprintf(stderr, "dflc check: one spec at a time (got `%s` and `%s`)\n", file, argv[i]);
      return 2;
    }
    file = argv[i];
  }
  if (!file) {
    usage(stderr);
    return 2;
  }
  static dfl_spec spec;   /* large (device table, paths): keep it off the stack */
  dfl_diag_reset();
  dfl_deep_opts o = {0, NULL, NULL, 0, 0, 1, NULL};
  int rc = dfl_spec_load_deep(file, &spec, dfl_check_deep, &o);
  return rc == DFL_OK && dfl_diag_errors() == 0 ? 0 : 1;
}
