/*
** check_train.c: the `data`, `loss`, `train` and `compile` sections (their schemas and their
** meaning): the data files (present, regular, real gzip), sequence and anchors, the metrics, the
** optimizer, schedule, warmup and gradients, the checkpoint directory (creatable, never the root),
** and the compile choices.
*/
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compiler/check_internal.h"

/* ---- schema ---- */

static const dfl_kdef data_keys[] = {
  {"train", K_STRING, 0, 0, 0, 0, 0, "train = \"data/train.jsonl.gz\""},
  {"eval", K_STRING, 0, 0, 0, 0, 0, "eval = \"data/eval.jsonl.gz\""},
  {"format", K_ENUM, 0, 0, "jsonl|packed|random", 0, 0, "format = jsonl"},
  {"seq_len", K_INT, 2, 16777216, 0, 0, 0, "seq_len = 4096"},
  {"anchors", K_INT, 1, 1048576, 0, 0, 0, "anchors = 512"},
  {"batch", K_INT, 1, 1048576, 0, 0, 0, "batch = 8"},
  {"shuffle", K_BOOL, 0, 0, 0, 0, 0, "shuffle = true"},
  {"seed", K_INT, 0, I64MAX, 0, 0, 0, "seed = 0"},
  {"bad_rows", K_ENUM, 0, 0, "skip|refuse", 0, 0, "bad_rows = skip"},
  {0}};

static const dfl_kdef loss_keys[] = {
  {"gamma", K_FLOAT, -1e9, 1e9, 0, 0, 0, "gamma = 7"},
  {"vocab_chunk", K_INT, 1, IMAX, 0, 0, 0, "vocab_chunk = 32768"},
  {"metrics", K_ANY, 0, 0, 0, 0, 0, "metrics = [accuracy, tau, topk(4)]"},
  {"labels", K_ANY, 0, 0, 0, 0, 0, "labels = mix(0.5)"},
  {"temperature", K_FLOAT, 0.01, 100, 0, 0, 0, "temperature = 1"},
  {0}};

static const dfl_kdef adamw_keys[] = {
  {"lr", K_FLOAT, 1e-300, 1e3, 0, 0, 0, "lr = 6e-4"},
  {"betas", K_ANY, 0, 0, 0, 0, 0, "betas = [0.9, 0.999]"},
  {"eps", K_FLOAT, 1e-300, 1, 0, 0, 0, "eps = 1e-8"},
  {"weight_decay", K_FLOAT, 0, 1e3, 0, 0, 0, "weight_decay = 0"},
  {0}};
const dfl_sdef dfl_adamw_schema = {"train.optimizer", adamw_keys, "adamw"};

static const dfl_kdef ckpt_keys[] = {
  {"every", K_INT, 0, I64MAX, 0, 0, 0, "every = 1000"},
  {"dir", K_STRING, 0, 0, 0, 0, 0, "dir = \"runs/ckpt\""},
  {"keep", K_INT, 0, IMAX, 0, 0, 0, "keep = 3"},
  {0}};
const dfl_sdef dfl_ckpt_schema = {"train.checkpoint", ckpt_keys, NULL};

static const dfl_kdef train_keys[] = {
  {"steps", K_INT, 1, I64MAX, 0, 0, 0, "steps = 10000"},
  {"optimizer", K_BLOCK, 0, 0, 0, &dfl_adamw_schema, 0, "optimizer adamw { lr = 6e-4 }"},
  {"schedule", K_ENUM, 0, 0, "cosine|constant|linear", 0, 0, "schedule = cosine"},
  {"warmup", K_INT, 0, I64MAX, 0, 0, 0, "warmup = 100"},
  {"warmup_ratio", K_FLOAT, 0, 1, 0, 0, 0, "warmup_ratio = 0.04"},
  {"clip", K_FLOAT, -1e300, 1e300, 0, 0, 0, "clip = 1.0"},
  {"accum", K_INT, 1, 1048576, 0, 0, 0, "accum = 1"},
  {"precision", K_ENUM, 0, 0, "bf16|fp32", 0, 0, "precision = bf16"},
  {"grads", K_ENUM, 0, 0, "f32|bf16", 0, 0, "grads = bf16"},
  {"checkpoint", K_BLOCK, 0, 0, 0, &dfl_ckpt_schema, 0, "checkpoint { every = 1000 }"},
  {"log_every", K_INT, 1, IMAX, 0, 0, 0, "log_every = 10"},
  {0}};

/* Choices of what the compiler builds (docs/language.md "compile"): the first four's default is what runs
** fastest where it was measured, turning one off builds the plain form, for comparisons; tf32 (f32
** GEMMs on TF32 tensor cores) trades exactness for speed, off by default; gemm_tune (cuBLASLt's
** candidates timed on the device) is off until a GPU run has measured it. */
static const dfl_kdef compile_keys[] = {
  {"block_rows", K_BOOL, 0, 0, 0, 0, 0, "block_rows = true"},
  {"rope_pair", K_BOOL, 0, 0, 0, 0, 0, "rope_pair = true"},
  {"swiglu_quant", K_BOOL, 0, 0, 0, 0, 0, "swiglu_quant = true"},
  {"overlap", K_BOOL, 0, 0, 0, 0, 0, "overlap = true"},
  {"tf32", K_BOOL, 0, 0, 0, 0, 0, "tf32 = false"},
  {"gemm_tune", K_BOOL, 0, 0, 0, 0, 0, "gemm_tune = true"},
  {0}};

const dfl_sdef dfl_data_schema = {"data", data_keys, NULL};
const dfl_sdef dfl_loss_schema = {"loss", loss_keys, NULL};
const dfl_sdef dfl_train_schema = {"train", train_keys, NULL};
const dfl_sdef dfl_compile_schema = {"compile", compile_keys, NULL};

/* ---- data, loss, train ---- */

int dfl_spec_dir_creatable(const char *dir, char *why, size_t n) {
  char p[DFL_PATH_MAX];
  snprintf(p, sizeof p, "%s", dir && dir[0] ? dir : ".");
  struct stat st;
  for (;;) {
    if (stat(p, &st) == 0) {
      if (!S_ISDIR(st.st_mode)) {
        snprintf(why, n, "`%s` exists and is not a directory", p);
        return 0;
      }
      if (access(p, W_OK | X_OK) != 0) {
        snprintf(why, n, "`%s` is not writable (%s)", p, strerror(errno));
        return 0;
      }
      /* access() says yes to root everywhere (under /proc too): a directory made and removed
      ** proves what train does at its first save */
      char probe[DFL_PATH_MAX + 64];
      snprintf(probe, sizeof probe, "%s/.dflc-probe-%ld", p, (long)getpid());
      if (mkdir(probe, 0777) != 0) {
        snprintf(why, n, "cannot create a directory in `%s` (%s)", p, strerror(errno));
        return 0;
      }
      rmdir(probe);
      return 1;
    }
    int e = errno;
    struct stat lst;
    if (e == ELOOP) {
      snprintf(why, n, "`%s` is a symbolic link loop", p);
      return 0;
    }
    if (e == ENOENT && lstat(p, &lst) == 0 && S_ISLNK(lst.st_mode)) {   /* not its parent: mkdir would fail here */
      snprintf(why, n, "`%s` is a dangling symbolic link", p);
      return 0;
    }
    if (e != ENOENT && e != ENOTDIR) {
      snprintf(why, n, "`%s`: %s", p, strerror(e));
      return 0;
    }
    char *slash = strrchr(p, '/');
    while (slash && slash > p && slash[1] == 0) { *slash = 0; slash = strrchr(p, '/'); }   /* trailing '/' */
    if (!slash) snprintf(p, sizeof p, ".");
    else if (slash == p) p[1] = 0;
    else *slash = 0;
  }
}

/* A data file train will read: a regular file (not a FIFO or a device, which train would read
** forever), not empty, and gzip when its name ends in .gz. Only a few bytes are read. */
static void need_file(dfl_check *c, dfl_node *v, char *out, const char *what) {
  if (!dfl_check_path(c, v, out)) return;
  struct stat st;
  if (stat(out, &st) != 0) {
    dfl_diag_error(v->loc, "%s file `%s` does not exist", what, out);
    dfl_diag_help("paths are relative to the directory of this .dfl file");
    return;
  }
  if (S_ISDIR(st.st_mode)) {
    dfl_diag_error(v->loc, "%s file `%s` is a directory", what, out);
    return;
  }
  if (!S_ISREG(st.st_mode)) {
    dfl_diag_error(v->loc, "%s file `%s` is not a regular file (%s)", what, out,
                   S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISCHR(st.st_mode) ? "a character device"
                   : S_ISBLK(st.st_mode) ? "a block device" : S_ISSOCK(st.st_mode) ? "a socket" : "not a plain file");
    dfl_diag_help("training reads the data once per epoch and needs its size: give a file (JSONL, .jsonl.gz or packed)");
    return;
  }
  if (st.st_size == 0) {
    dfl_diag_error(v->loc, "%s file `%s` is empty", what, out);
    dfl_diag_help("each line of a JSONL file is one row: {\"input_ids\": [...], \"loss_mask\": [...]}");
    return;
  }
  size_t n = strlen(out);
  if (n > 3 && !strcmp(out + n - 3, ".gz")) {
    unsigned char h[2] = {0, 0}, tail[4] = {0, 0, 0, 0};
    FILE *f = fopen(out, "rb");
    int ok = f && fread(h, 1, 2, f) == 2;
    if (!f) {
      dfl_diag_error(v->loc, "%s file `%s` cannot be read: %s", what, out, strerror(errno));
      return;
    }
    if (!ok || h[0] != 0x1f || h[1] != 0x8b) {
      fclose(f);
      dfl_diag_error(v->loc, "%s file `%s` is named .gz but is not gzip (it starts with bytes %02x %02x, not 1f 8b)",
                     what, out, h[0], h[1]);
      dfl_diag_help("compress it with `gzip`, or drop the .gz from its name if it is plain JSONL");
      return;
    }
    /* gzip's trailer holds the uncompressed size mod 2^32: 0 in a small file means no rows */
    int empty = st.st_size < (1 << 20) && fseek(f, -4, SEEK_END) == 0 && fread(tail, 1, 4, f) == 4 &&
                !(tail[0] | tail[1] | tail[2] | tail[3]);
    fclose(f);
    if (empty) {
      dfl_diag_error(v->loc, "%s file `%s` is an empty gzip stream (no rows)", what, out);
      return;
    }
  }
}

void dfl_check_data(dfl_check *c) {
  dfl_spec *s = c->spec;
  dfl_sect *d = c->data;
  const char *fmt = dfl_check_enum(d, "format", "jsonl");
  s->format = !strcmp(fmt, "packed") ? DFL_DATA_PACKED : !strcmp(fmt, "random") ? DFL_DATA_RANDOM : DFL_DATA_JSONL;
  if (s->format != DFL_DATA_RANDOM) {
    if (dfl_check_require(c, d, "train")) need_file(c, dfl_check_get(d, "train"), s->train_path, "train");
  } else if (dfl_check_get(d, "train")) {
    dfl_diag_warning(dfl_check_where(d, "train"), "`train` is ignored with `format = random`");
  }
  if (dfl_check_get(d, "eval")) need_file(c, dfl_check_get(d, "eval"), s->eval_path, "eval");
  if (dfl_check_require(c, d, "seq_len")) s->seq_len = (int)dfl_check_int(d, "seq_len", 0);
  s->anchors = (int)dfl_check_int(d, "anchors", 512);
  s->batch = (int)dfl_check_int(d, "batch", 1);
  s->shuffle = (int)dfl_check_int(d, "shuffle", 1);
  s->seed = (uint64_t)dfl_check_int(d, "seed", 0);
  s->bad_rows = strcmp(dfl_check_enum(d, "bad_rows", "skip"), "refuse") ? DFL_BADROW_SKIP : DFL_BADROW_REFUSE;
  if (s->seq_len >= 2 && s->anchors > s->seq_len - 1 && (dfl_check_get(d, "anchors") || !dfl_check_has(d, "anchors")))
    dfl_diag_warning(dfl_check_where(d, "anchors"), "%d anchors per sequence, but a %d-token sequence has at most %d anchor positions",
                     s->anchors, s->seq_len, s->seq_len - 1);
  if (s->seq_len >= 2 && s->block_size >= 2 && s->seq_len < s->block_size) {
    dfl_diag_error(dfl_check_where(d, "seq_len"), "seq_len %d is shorter than one block of %d tokens (drafter.block_size)",
                   s->seq_len, s->block_size);
    dfl_diag_help("a sequence holds whole blocks: set seq_len to at least %d (real specs use 1024..4096)", s->block_size);
  }
  if (c->arch_ok && s->seq_len > s->target.max_positions)
    dfl_diag_warning(dfl_check_where(d, "seq_len"), "seq_len %d is longer than the target's max_positions %lld",
                     s->seq_len, (long long)s->target.max_positions);
}

/* labels = hard | soft | mix(a): what the loss pulls the drafter toward (docs/training.md) */
static void check_labels(dfl_check *c) {
  dfl_spec *s = c->spec;
  dfl_sect *l = c->loss;
  s->kd_alpha = 0;
  s->kd_temp = dfl_check_float(l, "temperature", 1.0);
  dfl_node *e = dfl_check_get(l, "labels");
  if (e && e->bad) return;
  if (!e || (e->kind == DFL_V_IDENT && !strcmp(e->s, "hard"))) s->kd_alpha = 0;
  else if (e->kind == DFL_V_IDENT && !strcmp(e->s, "soft")) s->kd_alpha = 1;
  else if (e->kind == DFL_V_CALL && !strcmp(e->s, "mix")) {
    const dfl_node *a = e->nkids == 1 ? e->kids : NULL;
    double x = !a ? -1 : a->kind == DFL_V_FLOAT ? a->f : a->kind == DFL_V_INT ? (double)a->i : -1;
    if (!(x > 0 && x < 1)) {
      dfl_diag_error(e->loc, "`mix` takes the soft part's weight, a number between 0 and 1 (exclusive)");
      dfl_diag_help("write `labels = mix(0.5)`: half the data's tokens, half the target's distribution");
      return;
    }
    s->kd_alpha = x;
  } else {
    dfl_diag_error(e->loc, "`labels` is `hard`, `soft` or `mix(a)`");
    dfl_diag_help("hard: the data's next tokens (the default); soft: the target's distribution (forward KL at "
                  "`temperature`); mix(0.5): both, the soft part weighted 0.5");
    return;
  }
  if (s->kd_alpha == 0 && dfl_check_get(l, "temperature"))
    dfl_diag_warning(dfl_check_where(l, "temperature"), "`temperature` shapes the soft labels only; these are hard");
}

void dfl_check_loss(dfl_check *c) {
  dfl_spec *s = c->spec;
  dfl_sect *l = c->loss;
  s->gamma = dfl_check_float(l, "gamma", 7.0);
  int v = s->target.vocab > 0 ? s->target.vocab : 1;
  s->vocab_chunk = (int)dfl_check_int(l, "vocab_chunk", v < 32768 ? v : 32768);
  if (c->arch_ok && s->vocab_chunk > s->target.vocab) {
    dfl_diag_error(dfl_check_where(l, "vocab_chunk"), "vocab_chunk %d is larger than the vocabulary (%d)", s->vocab_chunk, s->target.vocab);
    dfl_diag_help("vocab_chunk is the number of vocabulary columns per loss chunk: 1..%d", s->target.vocab);
  }
  check_labels(c);
  dfl_node *m = dfl_check_get(l, "metrics");
  if (!m) { s->metric_accuracy = s->metric_tau = 1; s->topk = 0; return; }
  if (m->bad) return;
  dfl_node single = *m;
  if (m->kind != DFL_V_LIST) { single.kind = DFL_V_LIST; single.kids = m; single.nkids = 1; m->next = NULL; m = &single; }
  static const char *const names[] = {"accuracy", "tau", "topk", NULL};
  for (dfl_node *e = m->kids; e; e = e->next) {
    if (e->bad) continue;
    int dup = 0;
    if (e->kind == DFL_V_IDENT && !strcmp(e->s, "accuracy")) { dup = s->metric_accuracy; s->metric_accuracy = 1; }
    else if (e->kind == DFL_V_IDENT && !strcmp(e->s, "tau")) { dup = s->metric_tau; s->metric_tau = 1; }
    else if (e->kind == DFL_V_CALL && !strcmp(e->s, "topk")) {
      if (e->nkids != 1 || e->kids->kind != DFL_V_INT || e->kids->i < 1 || e->kids->i > 1024) {
        dfl_diag_error(e->loc, "`topk` takes one K between 1 and 1024, like `topk(4)`");
        continue;
      }
      dup = s->topk != 0;
      s->topk = (int)e->kids->i;
    } else if (e->kind == DFL_V_IDENT && !strcmp(e->s, "topk")) {
      dfl_diag_error(e->loc, "`topk` needs K");
      dfl_diag_help("write `topk(4)`");
      continue;
    } else {
      char buf[64];
      dfl_diag_error(e->loc, "unknown metric `%s`", e->s ? e->s : dfl_vkind_name(e->kind));
      const char *sug = e->s ? dfl_check_nearest(e->s, names, NULL, buf, sizeof buf) : NULL;
      if (sug) dfl_diag_help("did you mean `%s`? metrics are `accuracy`, `tau` and `topk(K)`", sug);
      else dfl_diag_help("metrics are `accuracy`, `tau` (acceptance length) and `topk(K)`");
      continue;
    }
    if (dup) dfl_diag_error(e->loc, "metric `%s` is listed twice", e->s);
  }
}

void dfl_check_train(dfl_check *c) {
  dfl_spec *s = c->spec;
  dfl_sect *t = c->train;
  if (dfl_check_require(c, t, "steps")) s->steps = dfl_check_int(t, "steps", 0);
  dfl_sect *o = dfl_check_sub(t, "optimizer");
  dfl_sect none;
  if (!o) { memset(&none, 0, sizeof none); none.def = &dfl_adamw_schema; o = &none; }
  s->lr = dfl_check_float(o, "lr", 6e-4);
  s->beta1 = 0.9;
  s->beta2 = 0.999;
  s->eps = dfl_check_float(o, "eps", 1e-8);
  s->weight_decay = dfl_check_float(o, "weight_decay", 0.0);
  dfl_node *b = dfl_check_get(o, "betas");
  if (b && !b->bad) {
    int ok = b->kind == DFL_V_LIST && b->nkids == 2;
    for (dfl_node *e = ok ? b->kids : NULL; e; e = e->next) {
      double x = e->kind == DFL_V_FLOAT ? e->f : e->kind == DFL_V_INT ? (double)e->i : -1;
      if (e->bad || !(x >= 0 && x < 1)) ok = 0;
    }
    if (!ok) {
      dfl_diag_error(b->loc, "`betas` must be two numbers in [0, 1)");
      dfl_diag_help("write `betas = [0.9, 0.999]`");
    } else {
      dfl_node *e = b->kids;
      s->beta1 = e->kind == DFL_V_FLOAT ? e->f : (double)e->i;
      s->beta2 = e->next->kind == DFL_V_FLOAT ? e->next->f : (double)e->next->i;
    }
  }
  const char *sch = dfl_check_enum(t, "schedule", "cosine");
  s->schedule = !strcmp(sch, "constant") ? DFL_SCHED_CONSTANT : !strcmp(sch, "linear") ? DFL_SCHED_LINEAR : DFL_SCHED_COSINE;
  /* warmup: steps or a ratio of the steps (reference: int(warmup_ratio * steps)), not both */
  if (dfl_check_has(t, "warmup") && dfl_check_has(t, "warmup_ratio")) {
    dfl_diag_error(dfl_check_where(t, "warmup_ratio"), "both `warmup` and `warmup_ratio` are set");
    dfl_diag_note(dfl_check_where(t, "warmup"), "`warmup` is set here");
    dfl_diag_help("keep one: `warmup = STEPS` or `warmup_ratio = FRACTION`");
  } else if (dfl_check_get(t, "warmup")) {
    s->warmup_steps = dfl_check_int(t, "warmup", 0);
  } else {
    s->warmup_steps = (int64_t)(dfl_check_float(t, "warmup_ratio", 0.04) * (double)s->steps);
  }
  if (s->steps > 0 && s->warmup_steps > s->steps)
    dfl_diag_error(dfl_check_where(t, "warmup"), "warmup of %lld steps is longer than the %lld training steps",
                   (long long)s->warmup_steps, (long long)s->steps);
  s->clip = dfl_check_float(t, "clip", 1.0);
  s->accum = (int)dfl_check_int(t, "accum", 1);
  s->precision = strcmp(dfl_check_enum(t, "precision", "bf16"), "fp32") ? DFL_PREC_BF16 : DFL_PREC_FP32;
  s->grads_bf16 = !strcmp(dfl_check_enum(t, "grads", "f32"), "bf16");
  if (s->grads_bf16 && s->precision == DFL_PREC_FP32) {
    dfl_diag_error(dfl_check_where(t, "grads"), "`grads = bf16` needs bf16 weights, but `precision = fp32`");
    dfl_diag_help("remove `grads = bf16` (fp32 training keeps fp32 gradients) or set `precision = bf16`");
  } else if (s->grads_bf16 && s->accum > 1) {
    dfl_diag_warning(dfl_check_where(t, "grads"), "`grads = bf16` applies with `accum = 1` only: with accum %d the "
                     "gradients are summed over micro-steps in f32", s->accum);
    dfl_diag_help("remove `grads = bf16`, or train with `accum = 1` to keep the gradients in bf16");
  }
  s->log_every = (int)dfl_check_int(t, "log_every", 10);
  dfl_sect *k = dfl_check_sub(t, "checkpoint");
  s->ckpt_every = k ? dfl_check_int(k, "every", 0) : 0;
  s->ckpt_keep = k ? (int)dfl_check_int(k, "keep", 0) : 0;
  dfl_node *dir = k ? dfl_check_get(k, "dir") : NULL;
  int dir_ok = 1;
  if (dir) dir_ok = dfl_check_path(c, dir, s->ckpt_dir);
  else dfl_check_resolve(c, "checkpoints", s->ckpt_dir);
  char why[DFL_PATH_MAX + 128], real[PATH_MAX];
  /* pruning and --restart move and remove step-* and old-* folders inside it: never the root */
  if (dir_ok && (!strcmp(s->ckpt_dir, "/") || (realpath(s->ckpt_dir, real) && !strcmp(real, "/")))) {
    dfl_diag_error(dir ? dir->loc : dfl_check_where(t, NULL), "the checkpoint directory `%s` is the root directory", s->ckpt_dir);
    dfl_diag_help("give checkpoints a directory of their own: `checkpoint { dir = \"...\" }`");
  } else if (dir_ok && !dfl_spec_dir_creatable(s->ckpt_dir, why, sizeof why)) {
    dfl_diag_error(dir ? dir->loc : dfl_check_where(t, NULL), "the checkpoint directory `%s` cannot be created: %s",
                   s->ckpt_dir, why);
    dfl_diag_help("set `checkpoint { dir = \"...\" }` to a directory you can write (relative to this .dfl file)");
  }
  if (s->ckpt_every > 0 && s->steps > 0 && s->ckpt_every > s->steps)
    dfl_diag_warning(dfl_check_where(k, "every"), "checkpoint every %lld steps, but training has only %lld steps",
                     (long long)s->ckpt_every, (long long)s->steps);
}

void dfl_check_compile(dfl_check *c) {
  dfl_spec *s = c->spec;
  dfl_sect *k = c->compile;
  s->opt.no_block_rows = !dfl_check_int(k, "block_rows", 1);
  s->opt.no_rope_pair = !dfl_check_int(k, "rope_pair", 1);
  s->opt.no_swiglu_quant = !dfl_check_int(k, "swiglu_quant", 1);
  s->opt.no_overlap = !dfl_check_int(k, "overlap", 1);
  s->opt.tf32 = dfl_check_int(k, "tf32", 0) != 0;
  s->opt.gemm_tune = dfl_check_int(k, "gemm_tune", 0) != 0;
}

/* "key = value" of the compile choices that differ from their defaults (all: every choice), comma
** separated into buf; returns how many were written. */
int dfl_spec_compile_desc(const dfl_spec *s, int all, char *buf, size_t n) {
  const struct { const char *key; int on, def; } o[] = {
    {"block_rows", !s->opt.no_block_rows, 1}, {"rope_pair", !s->opt.no_rope_pair, 1},
    {"swiglu_quant", !s->opt.no_swiglu_quant, 1}, {"overlap", !s->opt.no_overlap, 1}, {"tf32", s->opt.tf32 != 0, 0},
    {"gemm_tune", s->opt.gemm_tune != 0, 0}};
  int k = 0;
  size_t used = 0;
  if (n) buf[0] = 0;
  for (size_t i = 0; i < sizeof o / sizeof o[0]; i++) {
    if (!all && o[i].on == o[i].def) continue;
    int w = snprintf(buf + used, n > used ? n - used : 0, "%s%s = %s", k ? ", " : "", o[i].key, o[i].on ? "true" : "false");
    if (w > 0) used += (size_t)w;
    if (used >= n) used = n ? n - 1 : 0;
    k++;
  }
  return k;
}
