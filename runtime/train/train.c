/*
** train.c: the CPU training loop (see train.h).
*/
#include "runtime/train/train.h"

#include <cblas.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "runtime/io/weights.h"
#include "runtime/io/checkpoint.h"
#include "runtime/io/export.h"
#include "runtime/backend.h"
#include "runtime/train/train_export.h"
#include "runtime/train/accept.h"

/* Anchors of evaluations come from their own fixed stream, so that every evaluation of a run
** (and of runs with the same spec seed) draws the same blocks and the numbers are comparable. */
#define DFL_EVAL_SEED_XOR 0x6576616c5eedull

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Ratios of the DFLASH_METRICS vector summed over some steps. Layout as the backends write it
** (graph.h): the DFL_METRIC_* scalars, then correct[j] for j < B, then count[j] for j < B. */
static void metrics_ratios(const double *m, int B, double *acc, double *tau, double *topk, double *pos) {
  *acc = m[DFL_METRIC_ACC_DEN] > 0 ? m[DFL_METRIC_ACC_NUM] / m[DFL_METRIC_ACC_DEN] : 0;
  *tau = m[DFL_METRIC_TAU_BLOCKS] > 0 ? m[DFL_METRIC_TAU_SUM] / m[DFL_METRIC_TAU_BLOCKS] : 0;
  *topk = m[DFL_METRIC_ACC_DEN] > 0 ? m[DFL_METRIC_TOPK_NUM] / m[DFL_METRIC_ACC_DEN] : 0;
  for (int j = 0; j < B && j < 64; j++) {
    double c = m[DFL_METRIC_COUNT + j], n = m[DFL_METRIC_COUNT + B + j];
    pos[j] = n > 0 ? c / n : -1;
  }
}

void dfl_train_set_threads(int n) {
  if (n > 0) openblas_set_num_threads(n);
}

/* --- evaluation --- */

int dfl_eval_open(dfl_evaluator *ev, const dfl_spec *s) { return dfl_eval_open_on(ev, s, DFL_BE_CPU); }

int dfl_eval_open_on(dfl_evaluator *ev, const dfl_spec *s, dfl_backend_kind kind) {
  memset(ev, 0, sizeof *ev);
  ev->spec = *s;
  if (s->block_size > 64) {
    fprintf(stderr, "%s: block_size %d: the trainer reports at most 64 block positions\n", s->file, s->block_size);
    return DFL_EFORMAT;
  }
  int rc = dfl_model_eval_graph(&ev->eg, s, 1);
  if (rc) {
    fprintf(stderr, "dflc: cannot build the evaluation graph\n");
    return rc;
  }
  /* The decoder's walk reads each block's correct flags (the metrics op's first input): kept as an
  ** OUTPUT, so the plan gives them bytes of their own that the host reads after a run. */
  ev->correct = -1;
  for (int i = 0; i < ev->eg.g.nops && ev->correct < 0; i++)
    if (ev->eg.g.ops[i].code == DFL_OP_DFLASH_METRICS) ev->correct = ev->eg.g.ops[i].in[0];
  if (ev->correct < 0 || dfl_tensor_numel(&ev->eg.g.t[ev->correct]) != (int64_t)ev->eg.batch * ev->eg.N * s->block_size) {
    fprintf(stderr, "dflc: the evaluation graph has no per-block correct flags for the acceptance walk\n");
    dfl_graph_free(&ev->eg.g);
    return DFL_ERR;
  }
  ev->eg.g.t[ev->correct].kind = DFL_T_OUTPUT;
  /* The host reads only the persistent sums (out.*) and the flags, so the eval graph runs planned too. */
  ev->planned = dfl_be_plan(&ev->plan, &ev->eg.g, kind, 0, 0, NULL) == DFL_OK;
  if (kind == DFL_BE_CUDA) {
    const dfl_train_graph *e = &ev->eg;
    int in[4] = {e->ids, e->loss_mask, e->anchors, e->keep};
    rc = dfl_be_open_cuda(&ev->be, &ev->eg.g, ev->planned ? &ev->plan : NULL, in, 4, &s->opt);
  } else if ((rc = dfl_cpu_init(&ev->cpu, &ev->eg.g, ev->planned ? &ev->plan : NULL, 0)) == DFL_OK) {
    if ((rc = dfl_be_open_cpu(&ev->be, &ev->cpu))) dfl_cpu_free(&ev->cpu);
  }
  if (rc) {
    dfl_be_close(&ev->be);
    if (ev->planned) dfl_plan_free(&ev->plan);
    dfl_graph_free(&ev->eg.g);
    memset(ev, 0, sizeof *ev);
    return rc;
  }
  ev->rows = malloc(sizeof(int) * (size_t)ev->eg.batch);
  if (!ev->rows) {
    dfl_eval_close(ev);
    return DFL_ENOMEM;
  }
  ev->ready = 1;
  return DFL_OK;
}

void dfl_eval_close(dfl_evaluator *ev) {
  if (ev->ready || ev->rows) {
    dfl_be_close(&ev->be);
    if (ev->cpu.g) dfl_cpu_free(&ev->cpu);
    if (ev->planned) dfl_plan_free(&ev->plan);
    dfl_graph_free(&ev->eg.g);
    free(ev->rows);
  }
  memset(ev, 0, sizeof *ev);
}

int dfl_eval_sync(dfl_evaluator *ev, const dfl_graph *g, dfl_cpu *c, int frozen) {
  const dfl_graph *eg = &ev->eg.g;
  for (int i = 0; i < eg->nt; i++) {
    const dfl_tensor *t = &eg->t[i];
    if (!(t->kind == DFL_T_PARAM || (frozen && t->kind == DFL_T_FROZEN))) continue;
    int j = dfl_tensor_find(g, t->name);
    if (j < 0 || dfl_tensor_numel(&g->t[j]) != dfl_tensor_numel(t)) {
      fprintf(stderr, "dflc: eval graph tensor %s has no counterpart in the training graph\n", t->name);
      return DFL_ESHAPE;
    }
    memcpy(ev->cpu.buf[i], c->buf[j], (size_t)dfl_tensor_numel(t) * dfl_cpu_elem_size(t, 0));
  }
  return DFL_OK;
}

int dfl_eval_run(dfl_evaluator *ev, const dfl_dataset *d, dfl_eval_stats *es) {
  dfl_backend *be = &ev->be;
  const dfl_train_graph *e = &ev->eg;
  int b = e->batch, S = e->S, N = e->N, B = ev->spec.block_size;
  int nm = DFL_METRIC_COUNT + 2 * B;
  double sums[DFL_METRIC_COUNT + 2 * 64 + 2] = {0};
  float m[DFL_METRIC_COUNT + 2 * 64], num = 0, den = 0;
  double t0 = now_s();
  dfl_rng rng;
  dfl_rng_seed(&rng, ev->spec.seed ^ DFL_EVAL_SEED_XOR);
  memset(es, 0, sizeof *es);
  if (B > 64) B = 64;
  int rc;
  if ((rc = dfl_be_zero(be, e->metrics_acc)) || (rc = dfl_be_zero(be, e->loss_num_acc)) ||
      (rc = dfl_be_zero(be, e->loss_den_acc)))
    return rc;
  for (int start = 0; start < d->n; start += b) {
    int32_t *ids = dfl_be_input_i32(be, e->ids), *mask = dfl_be_input_i32(be, e->loss_mask);
    int32_t *anc = dfl_be_input_i32(be, e->anchors), *keep = dfl_be_input_i32(be, e->keep);
    if (!ids || !mask || !anc || !keep) return DFL_ERR;
    int k = d->n - start < b ? d->n - start : b;
    for (int r = 0; r < k; r++) ev->rows[r] = start + r;
    dfl_data_pack(d, ev->rows, k, S, ids, mask);
    /* A short last batch: empty rows (no supervised token, so no anchor and no weight). */
    memset(ids + (size_t)k * S, 0, sizeof(int32_t) * (size_t)(b - k) * S);
    memset(mask + (size_t)k * S, 0, sizeof(int32_t) * (size_t)(b - k) * S);
    dfl_anchors_sample(mask, b, S, N, &rng, anc, keep);
    if ((rc = dfl_be_commit_inputs(be)) || (rc = dfl_be_run(be, DFL_PH_ALL))) return rc;
    es->rows += k;
  }
  if (nm > DFL_METRIC_COUNT + 2 * 64) nm = DFL_METRIC_COUNT + 2 * 64;
  if ((rc = dfl_be_get_f(be, e->metrics_acc, m, nm)) || (rc = dfl_be_get_f(be, e->loss_num_acc, &num, 1)) ||
      (rc = dfl_be_get_f(be, e->loss_den_acc, &den, 1)))
    return rc;
  for (int i = 0; i < nm; i++) sums[i] = m[i];
  es->B = B;
  es->loss = den > 0 ? num / den : 0;
  es->blocks = (int64_t)sums[DFL_METRIC_TAU_BLOCKS];
  metrics_ratios(sums, B, &es->acc, &es->tau, &es->topk, es->acc_pos);
  es->seconds = now_s() - t0;
  return dfl_eval_accept(ev, d, 0, es);
}

/* The walk's drafter: the eval graph on the rows in flight, at the walk's anchors. */
typedef struct { dfl_evaluator *ev; const dfl_dataset *d; } walk_ctx;

static int walk_run(void *vctx, const int *rows, int k, const int32_t *anchors, const int32_t *keep, float *correct) {
  walk_ctx *c = vctx;
  dfl_evaluator *ev = c->ev;
  dfl_backend *be = &ev->be;
  const dfl_train_graph *e = &ev->eg;
  int b = e->batch, S = e->S, N = e->N, rc;
  int32_t *ids = dfl_be_input_i32(be, e->ids), *mask = dfl_be_input_i32(be, e->loss_mask);
  int32_t *anc = dfl_be_input_i32(be, e->anchors), *kp = dfl_be_input_i32(be, e->keep);
  if (!ids || !mask || !anc || !kp) return DFL_ERR;
  dfl_data_pack(c->d, rows, k, S, ids, mask);
  memset(ids + (size_t)k * S, 0, sizeof(int32_t) * (size_t)(b - k) * S);
  memset(mask + (size_t)k * S, 0, sizeof(int32_t) * (size_t)(b - k) * S);
  memcpy(anc, anchors, sizeof(int32_t) * (size_t)b * N);
  memcpy(kp, keep, sizeof(int32_t) * (size_t)b * N);
  if ((rc = dfl_be_commit_inputs(be)) || (rc = dfl_be_run(be, DFL_PH_ALL))) return rc;
  return dfl_be_get_f(be, ev->correct, correct, (int64_t)b * N * ev->spec.block_size);
}

int dfl_eval_accept(dfl_evaluator *ev, const dfl_dataset *d, int window, dfl_eval_stats *es) {
  const dfl_train_graph *e = &ev->eg;
  int S = e->S;
  es->accept = es->accept_responses = 0;
  es->accept_tokens = es->accept_blocks = es->accept_rounds = es->accept_n_responses = 0;
  es->accept_seconds = 0;
  if (d->n <= 0) return DFL_OK;
  /* every row's mask as the graph sees it (cut to S), packed one row at a time */
  int32_t *masks = malloc(sizeof(int32_t) * (size_t)d->n * S), *ids = malloc(sizeof(int32_t) * (size_t)S);
  if (!masks || !ids) {
    free(masks);
    free(ids);
    return DFL_ENOMEM;
  }
  for (int r = 0; r < d->n; r++) dfl_data_pack(d, &r, 1, S, ids, masks + (size_t)r * S);
  free(ids);
  walk_ctx c = {ev, d};
  dfl_accept_stats st;
  int rc = dfl_accept_count(masks, d->n, S, ev->spec.block_size, e->batch, e->N, window, walk_run, &c, &st);
  free(masks);
  if (rc) return rc;
  es->accept = st.accept;
  es->accept_responses = st.accept_spans;
  es->accept_n_responses = st.spans;
  es->accept_tokens = st.tokens;
  es->accept_blocks = st.blocks;
  es->accept_rounds = st.rounds;
  es->accept_seconds = st.seconds;
  return DFL_OK;
}

static void print_pos(FILE *f, const double *pos, int B, int maxn) {
  fprintf(f, "  acc@j");
  for (int j = 1; j < B && j <= maxn; j++) fprintf(f, " %.2f", pos[j] < 0 ? 0.0 : pos[j]);
  if (B - 1 > maxn) fprintf(f, " ...");
}

void dfl_eval_print(FILE *f, const char *what, const dfl_eval_stats *es) {
  fprintf(f, "%s  loss %.3f  acc %.3f", what, es->loss, es->acc);
  print_pos(f, es->acc_pos, es->B, 7);
  fprintf(f, "  tau %.3f  accept %.3f  (%" PRId64 " rows, %" PRId64 " blocks, %.1fs; the walk %" PRId64
          " blocks, %.1fs)\n", es->tau, es->accept, es->rows, es->blocks, es->seconds, es->accept_blocks,
          es->accept_seconds);
  fflush(f);
}

static void json_pos(FILE *f, const double *pos, int B) {
  fprintf(f, "[");
  for (int j = 0; j < B; j++) {
    if (pos[j] < 0) fprintf(f, "%snull", j ? "," : "");
    else fprintf(f, "%s%.6g", j ? "," : "", pos[j]);
  }
  fprintf(f, "]");
}

/* --- trainer --- */

static void spec_name(const char *file, char *out, size_t n) {
  const char *b = strrchr(file, '/');
  b = b ? b + 1 : file;
  snprintf(out, n, "%s", b);
  char *dot = strrchr(out, '.');
  if (dot && dot != out) *dot = 0;
}

static int ckpt_root(const dfl_trainer *tr, char *out, size_t n) {
  int k = !tr->opts.out_dir && tr->spec.ckpt_dir[0] ? snprintf(out, n, "%s", tr->spec.ckpt_dir)
                                                   : snprintf(out, n, "%s/ckpt", tr->out_dir);
  return k >= 0 && (size_t)k < n ? DFL_OK : DFL_ERR;
}

/* Drafter alone: the context features (normally a target's tapped hidden states) are random,
** N(0, 1) like normalized hidden states, written once; the plan keeps INPUTs for the whole run. */
static int fill_features(dfl_trainer *tr) {
  const dfl_tensor *t = &tr->tg.g.t[tr->tg.features];
  int64_t n = t->shape[0] * t->shape[1];
  float *f = malloc(sizeof(float) * (size_t)n);
  if (!f) return DFL_ENOMEM;
  dfl_rng r;
  dfl_rng_seed(&r, tr->spec.seed ^ 0x66656174ull);
  for (int64_t i = 0; i + 1 < n; i += 2) {   /* Box-Muller, two values per draw */
    double u1 = ((double)(dfl_rng_next(&r) >> 11) + 1.0) * 0x1.0p-53, u2 = (double)(dfl_rng_next(&r) >> 11) * 0x1.0p-53;
    double m = sqrt(-2.0 * log(u1));
    f[i] = (float)(m * cos(6.283185307179586 * u2));
    f[i + 1] = (float)(m * sin(6.283185307179586 * u2));
  }
  if (n % 2) f[n - 1] = 0.5f;
  int rc = dfl_be_set_f(&tr->be, tr->tg.features, f, n);
  free(f);
  return rc;
}

dfl_backend_kind dfl_train_backend(const dfl_spec *s, int force, FILE *log, const char *doing) {
  if (force != DFL_TRAIN_BE_AUTO) return force == DFL_TRAIN_BE_CUDA ? DFL_BE_CUDA : DFL_BE_CPU;
  const dfl_device *dev = NULL;
  for (int i = 0; i < s->n_devices && !dev; i++)
    if (s->devices[i].runs_drafter) dev = &s->devices[i];
  if (!dev || dev->kind != DFL_DEV_GPU) return DFL_BE_CPU;
  if (dfl_be_cuda_available()) return DFL_BE_CUDA;
  fprintf(log, "notice: %s puts the drafter on a GPU but none is usable here: %s on the CPU backend (--cpu says "
          "so explicitly, --cuda makes this an error)\n", s->file, doing);
  return DFL_BE_CPU;
}

int dfl_train_open(dfl_trainer *tr, const dfl_spec *spec, const dfl_train_opts *opts) {
  memset(tr, 0, sizeof *tr);
  tr->spec = *spec;
  if (opts) tr->opts = *opts;
  dfl_spec *s = &tr->spec;
  FILE *log = tr->opts.log ? tr->opts.log : stdout;
  char resume[DFL_PATH_MAX] = "";
  dfl_ckpt_meta meta;
  int rc;

  if (tr->opts.cpu_threads > 0) dfl_train_set_threads(tr->opts.cpu_threads);
  if (tr->opts.fp32) {
    s->precision = DFL_PREC_FP32;
    s->target_dtype = DFL_PREC_FP32;
  }
  const dfl_device *dev = NULL;   /* the drafter's (its memory budget) */
  for (int i = 0; i < s->n_devices && !dev; i++)
    if (s->devices[i].runs_drafter) dev = &s->devices[i];
  dfl_backend_kind kind = dfl_train_backend(s, tr->opts.backend, log, "training");
  if (tr->opts.out_dir) snprintf(tr->out_dir, sizeof tr->out_dir, "%s", tr->opts.out_dir);
  else {
    char nm[256];
    spec_name(s->file, nm, sizeof nm);
    snprintf(tr->out_dir, sizeof tr->out_dir, "runs/%s", nm);
  }

  /* The schedule length is part of the graph (OPT_PREP attributes), so it is settled first:
  ** --steps, else the resumed run's, else the spec's. */
  if (tr->opts.resume &&
      (rc = dfl_ckpt_begin_resume(tr->opts.resume, s, log, resume, sizeof resume, &meta, &tr->opts.steps)))
    return rc;
  if (tr->opts.steps > 0 && tr->opts.steps != s->steps) {
    /* A shortened (or longer) run keeps the warmup's share of the schedule. */
    int64_t w = s->steps > 0 ? (int64_t)((double)s->warmup_steps * tr->opts.steps / s->steps) : 0;
    if (w != s->warmup_steps)
      fprintf(log, "note: %" PRId64 " steps instead of %" PRId64 ": warmup scaled to %" PRId64 " steps\n",
              tr->opts.steps, s->steps, w);
    s->warmup_steps = w;
    s->steps = tr->opts.steps;
  }
  if (s->steps <= 0) {
    fprintf(stderr, "%s: train.steps must be positive\n", s->file);
    return DFL_EFORMAT;
  }
  if (s->block_size > 64) {   /* the host's per-position metric arrays */
    fprintf(stderr, "%s: block_size %d: the trainer reports at most 64 block positions\n", s->file, s->block_size);
    return DFL_EFORMAT;
  }

  double t_stage = now_s();
  /* Data first: a refused data file should fail before minutes of weight loading. */
  tr->random_data = s->format == DFL_DATA_RANDOM;
  if (tr->random_data) {
    /* synthetic: no rows, the ids come from the (checkpointed) RNG step by step */
  } else if ((rc = dfl_data_load_fmt(s->train_path, s->format, s->target.vocab, s->seq_len, s->bad_rows, stderr, &tr->train))) {
    fprintf(stderr, "dflc: training data %s refused (see the messages above)\n", s->train_path);
    return rc;
  }
  if (s->eval_path[0] && !tr->opts.no_eval && !tr->random_data && !tr->opts.drafter_only) {
    if ((rc = dfl_data_load_fmt(s->eval_path, s->format, s->target.vocab, s->seq_len, s->bad_rows, stderr, &tr->eval))) {
      fprintf(stderr, "dflc: eval data %s refused (see the messages above)\n", s->eval_path);
      dfl_train_close(tr);
      return rc;
    }
    tr->has_eval = 1;
  }

  if ((rc = dfl_model_train_graph(&tr->tg, s, !tr->opts.drafter_only))) {
    fprintf(stderr, "dflc: cannot build the training graph of %s\n", s->file);
    dfl_train_close(tr);
    return rc;
  }
  dfl_graph *g = &tr->tg.g;
  /* Overwritten gradient accumulators with accum 1 (same values); the optimizer of step n beside
  ** the target forward of step n+1 when they share nothing, its per-step buffers then live over
  ** the whole step in the plan. */
  tr->overlap = dfl_model_single_device(g, s) != 0 && !s->opt.no_overlap;
  if (!tr->opts.unplanned) {
    tr->planned = dfl_be_plan(&tr->plan, g, kind, dev ? dev->memory_budget : 0,
                              tr->overlap ? 1u << DFL_PH_OPTIMIZER : 0, log) == DFL_OK;
    if (!tr->planned) {
      fprintf(log, "notice: no valid memory plan; running unplanned (one allocation per tensor)\n");
    }
  }
  tr->setup_s[0] = now_s() - t_stage;
  t_stage = now_s();
  if (kind == DFL_BE_CUDA) {
    int in[4] = {tr->tg.ids, tr->tg.loss_mask, tr->tg.anchors, tr->tg.keep};
    rc = dfl_be_open_cuda(&tr->be, g, tr->planned ? &tr->plan : NULL, in, 4, &tr->spec.opt);
  } else if ((rc = dfl_cpu_init(&tr->cpu, g, tr->planned ? &tr->plan : NULL, 0)) == DFL_OK) {
    rc = dfl_be_open_cpu(&tr->be, &tr->cpu);
  }
  if (rc) {
    fprintf(stderr, "dflc: cannot set up the %s backend\n", kind == DFL_BE_CUDA ? "CUDA" : "CPU");
    dfl_train_close(tr);
    return rc;
  }
  tr->setup_s[1] = now_s() - t_stage;
  t_stage = now_s();
  if ((rc = dfl_be_load_weights(&tr->be, s, s->init_from))) {
    dfl_train_close(tr);
    return rc;
  }
  tr->setup_s[2] = now_s() - t_stage;
  t_stage = now_s();
  if (tr->opts.drafter_only && tr->tg.features >= 0 && (rc = fill_features(tr))) {
    dfl_train_close(tr);
    return rc;
  }

  /* Host staging, once. */
  int B = s->block_size;
  tr->rows = malloc(sizeof(int) * (size_t)tr->tg.batch);
  tr->metrics = calloc((size_t)(DFL_METRIC_COUNT + 2 * B), sizeof(float));
  tr->order = malloc(sizeof(int) * (size_t)(tr->train.n ? tr->train.n : 1));
  if (!tr->rows || !tr->metrics || !tr->order) {
    dfl_train_close(tr);
    return DFL_ENOMEM;
  }
  dfl_rng_seed(&tr->rng, s->seed);

  if (resume[0]) {
    /* On the GPU: into a host shadow of the persistent tensors, pushed back after. */
    dfl_cpu shadow, *h = dfl_be_host(&tr->be, DFL_CKPT_KINDS, 0, &shadow);
    rc = h ? dfl_ckpt_load(resume, g, h, &meta) : DFL_ENOMEM;
    int rc2 = h ? dfl_be_host_done(&tr->be, h, rc ? 0 : DFL_CKPT_KINDS) : DFL_OK;
    /* Gradient accumulators restart at zero: with accum = 1 a checkpoint holds the last step's
    ** gradients (dfl_fuse_overwrite leaves them), which a run resumed with accum > 1 would add to. */
    for (int t = 0; !rc && !rc2 && t < g->nt; t++)
      if (g->t[t].kind == DFL_T_GRAD) rc2 = dfl_be_zero(&tr->be, t);
    if (rc || (rc = rc2)) {
      dfl_train_close(tr);
      return rc;
    }
    if ((rc = dfl_ckpt_check_data(resume, &meta, s->train_path, tr->train.n, tr->train.n_tokens))) {
      dfl_train_close(tr);
      return rc;
    }
    if (meta.step < 0 || meta.step > s->steps) {
      fprintf(stderr, "%s/trainer.json: step %" PRId64 " does not fit a schedule of %" PRId64 " steps\n", resume,
              meta.step, s->steps);
      dfl_train_close(tr);
      return DFL_EFORMAT;
    }
    tr->step = meta.step;
    tr->epoch = meta.epoch;
    tr->cursor = meta.cursor;
    memcpy(tr->rng.s, meta.rng, sizeof tr->rng.s);
    tr->tokens_seen = meta.tokens_seen;
    fprintf(log, "resumed from %s at step %" PRId64 "\n", resume, tr->step);
  }
  tr->first_step = tr->step + 1;
  if (!tr->random_data) dfl_data_order(&tr->train, s->seed, tr->epoch, s->shuffle, tr->order);

  if (tr->has_eval) {
    if ((rc = dfl_eval_open_on(&tr->ev, s, kind)) || (rc = dfl_be_copy_weights(&tr->ev.be, &tr->be, 1))) {
      dfl_train_close(tr);
      return rc;
    }
  }

  char path[DFL_PATH_MAX + 32];
  if (dfl_mkdirs(tr->out_dir)) {
    fprintf(stderr, "dflc: cannot create the run directory %s: %s\n", tr->out_dir, strerror(errno));
    dfl_train_close(tr);
    return DFL_EIO;
  }
  snprintf(path, sizeof path, "%s/metrics.jsonl", tr->out_dir);
  /* A resumed run appends (after the steps past its checkpoint are dropped); a fresh one starts over. */
  if (resume[0] && (rc = dfl_ckpt_trim_metrics(path, tr->step))) {
    dfl_train_close(tr);
    return rc;
  }
  tr->mjsonl = fopen(path, resume[0] ? "a" : "w");
  if (!tr->mjsonl) {
    fprintf(stderr, "dflc: cannot write %s: %s\n", path, strerror(errno));
    dfl_train_close(tr);
    return DFL_EIO;
  }
  /* The best checkpoint by evaluation: a resumed run goes on from the record under its checkpoint
  ** root, a fresh one starts over (as its metrics.jsonl does). */
  tr->best_step = -1;
  char croot[DFL_PATH_MAX];
  if (!tr->opts.no_ckpt && ckpt_root(tr, croot, sizeof croot) == DFL_OK) {
    double bl;
    if (!resume[0]) dfl_ckpt_clear_best(croot);
    else if (!dfl_ckpt_read_best(croot, &tr->best_step, &tr->best_accept, &bl)) tr->best_step = -1;
  }
  tr->setup_s[3] = now_s() - t_stage;
  return DFL_OK;
}

void dfl_train_close(dfl_trainer *tr) {
  if (tr->mjsonl) fclose(tr->mjsonl);
  dfl_eval_close(&tr->ev);
  dfl_be_close(&tr->be);
  if (tr->cpu.g) dfl_cpu_free(&tr->cpu);
  if (tr->planned) dfl_plan_free(&tr->plan);
  if (tr->tg.g.t) dfl_graph_free(&tr->tg.g);
  if (!tr->random_data) dfl_data_free(&tr->train);
  if (tr->has_eval) dfl_data_free(&tr->eval);
  free(tr->rows);
  free(tr->metrics);
  free(tr->order);
  memset(tr, 0, sizeof *tr);
}

/* Next micro-batch into the backend's input staging; returns its real token count. */
static int fill_micro(dfl_trainer *tr, double *tokens) {
  const dfl_spec *s = &tr->spec;
  dfl_train_graph *tg = &tr->tg;
  int b = tg->batch, S = tg->S, N = tg->N;
  int32_t *ids = dfl_be_input_i32(&tr->be, tg->ids), *mask = dfl_be_input_i32(&tr->be, tg->loss_mask);
  int32_t *anc = dfl_be_input_i32(&tr->be, tg->anchors), *keep = dfl_be_input_i32(&tr->be, tg->keep);
  if (!ids || !mask || !anc || !keep) return DFL_ERR;
  if (tr->random_data) {
    /* the peer baseline's synthetic batches: uniform ids, every position supervised */
    for (int64_t i = 0; i < (int64_t)b * S; i++) {
      ids[i] = (int32_t)dfl_rng_below(&tr->rng, (uint64_t)s->target.vocab);
      mask[i] = 1;
    }
    *tokens += (double)b * S;
  } else {
    for (int r = 0; r < b; r++) {
      if (tr->cursor >= tr->train.n) {   /* next epoch: a new deterministic order */
        tr->epoch++;
        tr->cursor = 0;
        dfl_data_order(&tr->train, s->seed, tr->epoch, s->shuffle, tr->order);
      }
      int row = tr->order[tr->cursor++];
      tr->rows[r] = row;
      int64_t len = tr->train.off[row + 1] - tr->train.off[row];
      *tokens += (double)(len < S ? len : S);
    }
    dfl_data_pack(&tr->train, tr->rows, b, S, ids, mask);
  }
  dfl_anchors_sample(mask, b, S, N, &tr->rng, anc, keep);
  return dfl_be_commit_inputs(&tr->be);
}

/* After step tr->step's optimizer phase has been enqueued: its state completes the step's read
** slot, and the window's sums restart (the optimizer read their denominator). */
static int opt_done(dfl_trainer *tr) {
  dfl_train_graph *tg = &tr->tg;
  dfl_backend *be = &tr->be;
  int rc, slot = (int)((tr->step - 1) % 2);
  if ((rc = dfl_be_read_add(be, slot, tg->opt_state)) || (rc = dfl_be_read_end(be, slot)) ||
      (rc = dfl_be_zero(be, tg->metrics_acc)) || (rc = dfl_be_zero(be, tg->loss_num_acc)) ||
      (rc = dfl_be_zero(be, tg->loss_den_acc)))
    return rc;
  tr->opt_pending = 0;
  return DFL_OK;
}

int dfl_train_flush(dfl_trainer *tr) {
  if (!tr->opt_pending) return DFL_OK;
  int rc = dfl_be_run(&tr->be, 1u << DFL_PH_OPTIMIZER);
  return rc ? rc : opt_done(tr);
}

int dfl_train_enqueue(dfl_trainer *tr) {
  dfl_train_graph *tg = &tr->tg;
  dfl_backend *be = &tr->be;
  double t0 = now_s(), tokens = 0;
  int rc, slot = (int)(tr->step % 2);
  const unsigned tgt = 1u << DFL_PH_TARGET, opt = 1u << DFL_PH_OPTIMIZER;
  if (tr->n_pend >= 2) {
    fprintf(stderr, "dflc: internal error: a third step enqueued before the first was collected\n");
    return DFL_ERR;
  }
  for (int micro = 0; micro < tr->spec.accum; micro++) {
    if ((rc = fill_micro(tr, &tokens))) return rc;
    if (micro == 0 && tr->opt_pending) {
      /* the previous step's optimizer beside this step's target forward (one graph, two
      ** streams), then the drafter, which needs both */
      if ((rc = dfl_be_run(be, DFL_RUN_OVERLAP_OPT | opt | tgt)) || (rc = opt_done(tr)) ||
          (rc = dfl_be_run(be, DFL_PH_STEP & ~tgt)))
        return rc;
    } else if ((rc = dfl_be_run(be, DFL_PH_STEP)))
      return rc;
  }
  /* The window's sums are read before the optimizer phase (which may reset its denominator),
  ** the optimizer state after (opt_done); the slot is complete once the optimizer is. */
  if ((rc = dfl_be_read_begin(be, slot)) || (rc = dfl_be_read_add(be, slot, tg->metrics_acc)) ||
      (rc = dfl_be_read_add(be, slot, tg->loss_num_acc)) || (rc = dfl_be_read_add(be, slot, tg->loss_den_acc)))
    return rc;
  tr->step++;
  tr->opt_pending = 1;
  if (!tr->overlap && (rc = dfl_train_flush(tr))) return rc;
  tr->tokens_seen += tokens;
  tr->pend[tr->n_pend].step = tr->step;
  tr->pend[tr->n_pend].tokens = tokens;
  tr->pend[tr->n_pend].t0 = t0;
  tr->n_pend++;
  return DFL_OK;
}

int dfl_train_collect(dfl_trainer *tr, dfl_step_stats *st) {
  const dfl_spec *s = &tr->spec;
  int B = s->block_size, nm = DFL_METRIC_COUNT + 2 * B, rc;
  if (tr->n_pend == 0) return DFL_ERR;
  int64_t step = tr->pend[0].step;
  int slot = (int)((step - 1) % 2);
  /* the last step enqueued: its optimizer (hence its slot) waits for the next step unless flushed */
  if (step == tr->step && (rc = dfl_train_flush(tr))) return rc;
  float v[DFL_METRIC_COUNT + 2 * 64 + 2 + DFL_OPT_COUNT];
  if ((rc = dfl_be_read_wait(&tr->be, slot, v))) return rc;
  double t1 = now_s();
  /* device memory: identical at every step after the first (nothing allocates in the loop) */
  int64_t used = dfl_be_bytes_in_use(&tr->be);
  if (step == tr->first_step) tr->mem_first = used;
  else if (used >= 0) {
    if (tr->mem_min == 0 || used < tr->mem_min) tr->mem_min = used;
    if (used > tr->mem_max) tr->mem_max = used;
  }
  float num = v[nm], den = v[nm + 1];
  memcpy(tr->metrics, v, sizeof(float) * (size_t)nm);
  memcpy(tr->opt, v + nm + 2, sizeof tr->opt);
  memset(st, 0, sizeof *st);
  double m[DFL_METRIC_COUNT + 2 * 64];
  for (int i = 0; i < nm && i < DFL_METRIC_COUNT + 2 * 64; i++) m[i] = tr->metrics[i];
  st->step = step;
  st->B = B < 64 ? B : 64;
  st->loss = den > 0 ? (double)num / den : 0;
  metrics_ratios(m, st->B, &st->acc, &st->tau, &st->topk, st->acc_pos);
  st->lr = tr->opt[DFL_OPT_LR];
  st->gnorm = tr->opt[DFL_OPT_GNORM];
  st->tokens = tr->pend[0].tokens;
  /* a step's time: since the previous one completed (or since it was enqueued, if later) */
  double from = tr->t_last > tr->pend[0].t0 ? tr->t_last : tr->pend[0].t0;
  st->seconds = t1 - from;
  tr->t_last = t1;
  st->sums[0] = num;
  st->sums[1] = den;
  for (int i = 0; i < nm && i < DFL_METRIC_COUNT + 2 * 64; i++) st->sums[2 + i] = m[i];
  tr->pend[0] = tr->pend[1];
  tr->n_pend--;
  return DFL_OK;
}

int dfl_train_step(dfl_trainer *tr, dfl_step_stats *st) {
  int rc = dfl_train_enqueue(tr);
  return rc ? rc : dfl_train_collect(tr, st);
}

int dfl_train_evaluate(dfl_trainer *tr, dfl_eval_stats *es) {
  if (!tr->has_eval) return DFL_ERR;
  int rc = dfl_train_flush(tr);
  if (rc == DFL_OK) rc = dfl_be_copy_weights(&tr->ev.be, &tr->be, 0);
  return rc ? rc : dfl_eval_run(&tr->ev, &tr->eval, es);
}

int dfl_train_checkpoint(dfl_trainer *tr) {
  char root[DFL_PATH_MAX];
  dfl_ckpt_meta m;
  memset(&m, 0, sizeof m);
  if (ckpt_root(tr, root, sizeof root)) {
    fprintf(stderr, "dflc: checkpoint directory name too long under %s\n", tr->out_dir);
    return DFL_ERR;
  }
  m.step = tr->step;
  m.steps_total = tr->spec.steps;
  m.epoch = tr->epoch;
  m.cursor = tr->cursor;
  memcpy(m.rng, tr->rng.s, sizeof m.rng);
  m.seed = tr->spec.seed;
  m.tokens_seen = tr->tokens_seen;
  m.data_rows = tr->train.n;   /* 0 for random data: nothing to check on resume */
  m.data_tokens = tr->train.n_tokens;
  if (!realpath(tr->spec.file, m.spec)) snprintf(m.spec, sizeof m.spec, "%s", tr->spec.file);
  dfl_cpu shadow, *h;
  if (dfl_train_flush(tr) || dfl_be_sync(&tr->be) || !(h = dfl_be_host(&tr->be, DFL_CKPT_KINDS, 1, &shadow)))
    return DFL_ERR;
  int rc = dfl_ckpt_save(root, &tr->tg.g, h, tr->tg.drafter.params, tr->tg.drafter.n_params, &m,
                         tr->spec.ckpt_keep, tr->last_ckpt, sizeof tr->last_ckpt);
  dfl_be_host_done(&tr->be, h, 0);
  return rc;
}

void dfl_train_eta(char *buf, size_t n, double elapsed, int64_t done, int64_t left) {
  double eta = done > 0 ? elapsed / (double)done * (double)left : 0;
  long e = (long)(elapsed + 0.5), r = (long)(eta + 0.5);
  snprintf(buf, n, "elapsed %ld:%02ld:%02ld  eta %ld:%02ld:%02ld", e / 3600, e / 60 % 60, e % 60, r / 3600, r / 60 % 60,
           r % 60);
}

/* A loss that is not finite: what went non-finite first, then the advice for that. The drafter's
** weights are read back (on a GPU through a host copy); the features only where they are still
** there (an INPUT, or an unplanned run); the target's weights were scanned when they were loaded. */
static void explain_nonfinite(dfl_trainer *tr, const dfl_step_stats *st, double prev_gnorm) {
  const dfl_graph *g = &tr->tg.g;
  char wname[DFL_NAME_MAX] = "";
  int64_t wat = -1;
  dfl_cpu shadow, *h = dfl_train_flush(tr) || dfl_be_sync(&tr->be) ? NULL : dfl_be_host(&tr->be, DFL_KIND_BIT(DFL_T_PARAM), 1, &shadow);
  for (int t = 0; h && t < g->nt && wat < 0; t++) {
    if (g->t[t].kind != DFL_T_PARAM) continue;
    const float *v = dfl_cpu_f32(h, t);
    int64_t n = dfl_tensor_numel(&g->t[t]);
    for (int64_t i = 0; v && i < n; i++)
      if (!isfinite(v[i])) { wat = i; snprintf(wname, sizeof wname, "%s", g->t[t].name); break; }
  }
  if (h) dfl_be_host_done(&tr->be, h, 0);
  int feat = -1;   /* -1: not readable, 0: finite, 1: not */
  int ft = tr->tg.features;
  if (ft >= 0 && (g->t[ft].kind == DFL_T_INPUT || !tr->planned)) {
    int64_t n = dfl_tensor_numel(&g->t[ft]);
    float *f = malloc(sizeof(float) * (size_t)n);
    if (f && dfl_be_get_f(&tr->be, ft, f, n) == DFL_OK) {
      feat = 0;
      for (int64_t i = 0; i < n && !feat; i++) feat = !isfinite(f[i]);
    }
    free(f);
  }
  /* The step's weights are those after the previous step's update: finite when its gradients
  ** were (an Adam step is bounded by lr). What the drafter holds now is this step's update. */
  fprintf(stderr, "dflc: step %" PRId64 ": the loss is %s; stopping. What went non-finite first:\n", st->step,
          isnan(st->loss) ? "NaN" : "infinite");
  if (feat == 1) {
    fprintf(stderr, "  the features: the target's tapped hidden states hold NaN/Inf (its weights were finite when loaded)\n"
                    "  = help: the target overflows in this precision: try `target { dtype = fp32 }`; a lower lr will not help\n");
  } else if (!isfinite(prev_gnorm)) {
    fprintf(stderr, "  the gradients of step %" PRId64 " (gnorm %s), whose update made the drafter's weights non-finite%s%s\n",
            st->step - 1, isnan(prev_gnorm) ? "NaN" : "Inf", wat >= 0 ? " (first: " : "", wat >= 0 ? wname : "");
    if (wat >= 0) fprintf(stderr, "  )\n");
    fprintf(stderr, "  = help: the training diverged: try a lower lr (now %.3g), `clip = 1.0`, or a longer warmup\n", tr->spec.lr);
  } else {
    fprintf(stderr, "  the loss itself: the drafter's weights were finite (the previous step's gradients were) and %s\n",
            feat == 0 ? "so were the features" : "the features are not kept after the step (not checked)");
    fprintf(stderr, "  = help: the logits overflow: a target lm_head or embedding with huge values (a damaged checkpoint?), "
                    "or bf16 overflow: try `precision = fp32`\n");
  }
  (void)wat;
}

/* 12345 -> "12,345" */
static const char *thousands(double v, char *buf, size_t n) {
  char raw[32];
  snprintf(raw, sizeof raw, "%.0f", v < 0 ? 0 : v);
  size_t len = strlen(raw), k = 0;
  for (size_t i = 0; i < len && k + 2 < n; i++) {
    if (i && (len - i) % 3 == 0) buf[k++] = ',';
    buf[k++] = raw[i];
  }
  buf[k] = 0;
  return buf;
}

void dfl_eval_jsonl(FILE *f, int64_t step, const dfl_eval_stats *es) {
  fprintf(f, "{\"eval\":true,\"step\":%" PRId64 ",\"loss\":%.6g,\"acc\":%.6g,\"tau\":%.6g,"
          "\"acceptance_length\":%.6g,\"acceptance_length_responses\":%.6g,\"topk\":%.6g,\"rows\":%" PRId64
          ",\"blocks\":%" PRId64 ",\"accept_tokens\":%" PRId64 ",\"accept_blocks\":%" PRId64 ",\"acc_pos\":", step,
          es->loss, es->acc, es->tau, es->accept, es->accept_responses, es->topk, es->rows, es->blocks,
          es->accept_tokens, es->accept_blocks);
  json_pos(f, es->acc_pos, es->B);
  fprintf(f, "}\n");
  fflush(f);
}

static void eval_jsonl(dfl_trainer *tr, const dfl_eval_stats *es) { dfl_eval_jsonl(tr->mjsonl, tr->step, es); }

/* A checkpoint's exact f32 params over the evaluator's drafter (loaded fresh before), by name. */
static int eval_take_ckpt(dfl_evaluator *ev, const char *ckpt) {
  dfl_ckpt_params cp;
  int rc = dfl_ckpt_read_params(ckpt, &cp);
  if (rc) return rc;
  const dfl_graph *g = &ev->eg.g;
  dfl_cpu sh, *h = dfl_be_host(&ev->be, DFL_KIND_BIT(DFL_T_PARAM), 0, &sh);
  if (!h) rc = DFL_ENOMEM;
  for (int t = 0; !rc && t < g->nt; t++) {
    if (g->t[t].kind != DFL_T_PARAM) continue;
    int k = 0;
    while (k < cp.n && strcmp(cp.names[k], g->t[t].name)) k++;
    int64_t n = 1;
    for (int d = 0; k < cp.n && d < cp.ndim[k]; d++) n *= cp.shape[4 * k + d];
    if (k == cp.n || n != dfl_tensor_numel(&g->t[t])) {
      fprintf(stderr, "%s: parameter %s %s: the checkpoint was written for another drafter\n", ckpt, g->t[t].name,
              k == cp.n ? "missing" : "of another size");
      rc = DFL_ESHAPE;
    } else {
      dfl_cpu_set_f(h, t, cp.data[k], n);
    }
  }
  if (h) {
    int rc2 = dfl_be_host_done(&ev->be, h, rc ? 0 : DFL_KIND_BIT(DFL_T_PARAM));
    if (!rc) rc = rc2;
  }
  dfl_ckpt_params_free(&cp);
  return rc;
}

int dfl_eval_drafter(const dfl_spec *s, dfl_backend_kind kind, const char *drafter_dir, const dfl_dataset *d,
                     dfl_eval_stats *es) {
  dfl_evaluator *ev = calloc(1, sizeof *ev);
  if (!ev) return DFL_ENOMEM;
  /* a checkpoint directory (trainer.json): its fp32 params over a fresh drafter; else an export */
  char tj[DFL_PATH_MAX + 32];
  struct stat st;
  snprintf(tj, sizeof tj, "%s/trainer.json", drafter_dir ? drafter_dir : "");
  int ckpt = drafter_dir && stat(tj, &st) == 0;
  int rc = dfl_eval_open_on(ev, s, kind);
  /* the target's weights and the drafter's, through the backend (a host shadow pushed on a GPU) */
  if (rc == DFL_OK) rc = dfl_be_load_weights(&ev->be, s, ckpt ? NULL : drafter_dir);
  if (rc == DFL_OK && ckpt) rc = eval_take_ckpt(ev, drafter_dir);
  if (rc == DFL_OK) rc = dfl_eval_run(ev, d, es);
  if (ev->ready) dfl_eval_close(ev);
  free(ev);
  return rc;
}

/* After the evaluation of a step that has its checkpoint: a higher accept than every earlier one
** (an equal one keeps the earlier) makes it ROOT/best. accept, not tau: it is the number a greedy
** decoder will show, and tau can rank two drafters the other way (tau is a mean over positions,
** accept weighs the weak ones more, accept.h). */
static int note_best(dfl_trainer *tr, const dfl_eval_stats *es, FILE *log) {
  if (tr->best_step >= 0 && !(es->accept > tr->best_accept)) return DFL_OK;
  char root[DFL_PATH_MAX];
  int rc = ckpt_root(tr, root, sizeof root);
  if (rc == DFL_OK) rc = dfl_ckpt_mark_best(root, tr->step, es->accept, es->tau, es->loss);
  if (rc) return rc;
  dfl_ckpt_prune(root, tr->spec.ckpt_keep, tr->step);   /* the former best, if outside ckpt_keep now */
  tr->best_step = tr->step;
  tr->best_accept = es->accept;
  if (!tr->opts.quiet)
    fprintf(log, "best so far (eval accept %.3f, tau %.3f): %s/best -> step %" PRId64 "\n", es->accept, es->tau, root,
            tr->step);
  return DFL_OK;
}

static int do_eval(dfl_trainer *tr, dfl_eval_stats *es, FILE *log) {
  int rc = dfl_train_evaluate(tr, es);
  if (rc) {
    fprintf(stderr, "dflc: evaluation failed at step %" PRId64 "\n", tr->step);
    return rc;
  }
  char what[64];
  snprintf(what, sizeof what, "eval %" PRId64 "/%" PRId64, tr->step, tr->spec.steps);
  dfl_eval_print(log, what, es);
  eval_jsonl(tr, es);
  return DFL_OK;
}

int dfl_train_run(dfl_trainer *tr, dfl_eval_stats *first, dfl_eval_stats *last) {
  const dfl_spec *s = &tr->spec;
  FILE *log = tr->opts.log ? tr->opts.log : stdout;
  int quiet = tr->opts.quiet;
  int64_t end = s->steps;
  if (tr->opts.stop_at > 0 && tr->opts.stop_at < end) end = tr->opts.stop_at;
  int nm = DFL_METRIC_COUNT + 2 * s->block_size;
  int64_t np = 0;
  for (int i = 0; i < tr->tg.drafter.n_params; i++) np += dfl_tensor_numel(&tr->tg.g.t[tr->tg.drafter.params[i]]);
  fprintf(log, "backend: %s, precision %s\n", tr->be.name, s->precision == DFL_PREC_BF16 ? "bf16" : "fp32");
  char cdesc[256];
  if (dfl_spec_compile_desc(s, 0, cdesc, sizeof cdesc)) fprintf(log, "compile: %s (not the defaults)\n", cdesc);
  fprintf(log, "train: %s, drafter %d layers (%.2fM params), batch %d x %d tokens, %d anchors x %d, accum %d, "
          "%" PRId64 " steps; memory %s %.1f MiB\n", s->file, s->drafter.layers, np / 1e6, tr->tg.batch,
          tr->tg.S, tr->tg.N, s->block_size, s->accum, s->steps, tr->planned ? "planned arena" : "unplanned",
          tr->planned ? tr->plan.arena_bytes / 1048576.0 : 0.0);
  if (tr->overlap)
    fprintf(log, "schedule: each step's optimizer runs beside the next step's target forward\n");
  fprintf(log, "run directory: %s\n", tr->out_dir);
  fflush(log);

  dfl_eval_stats es;
  int rc;
  if (tr->has_eval && tr->step < end) {
    if ((rc = do_eval(tr, &es, log))) return rc;
    if (first) *first = es;
  }

  /* Progress lines report the window since the previous line. */
  double win[2 + DFL_METRIC_COUNT + 2 * 64] = {0}, win_tok = 0, win_t = 0;
  dfl_step_stats st;
  int ckpts = !tr->opts.no_ckpt;
  double prev_gnorm = 0, t_run = now_s();
  int64_t step0 = tr->step;
  /* Pipelined: step k+1 is enqueued before the metrics of step k are read, so the device never
  ** waits for the host; a checkpoint step is a barrier (the state saved must be that step's). */
  while (tr->step < end || tr->n_pend > 0) {
    int64_t k = tr->step;
    int barrier = ckpts && k > 0 && s->ckpt_every > 0 && k % s->ckpt_every == 0 && k < end;
    if (k < end && tr->n_pend < 2 && !(barrier && tr->n_pend > 0)) {
      if ((rc = dfl_train_enqueue(tr))) {
        fprintf(stderr, "dflc: step %" PRId64 " failed\n", tr->step + 1);
        return rc;
      }
      if (tr->n_pend < 2 && tr->step < end && !(ckpts && s->ckpt_every > 0 && tr->step % s->ckpt_every == 0))
        continue;
    }
    if ((rc = dfl_train_collect(tr, &st))) {
      fprintf(stderr, "dflc: step %" PRId64 " failed\n", tr->step);
      return rc;
    }
    if (!isfinite(st.loss)) {
      fflush(tr->mjsonl);
      explain_nonfinite(tr, &st, prev_gnorm);
      return DFL_ERR;
    }
    prev_gnorm = st.gnorm;
    fprintf(tr->mjsonl, "{\"step\":%" PRId64 ",\"loss\":%.6g,\"acc\":%.6g,\"tau\":%.6g,\"topk\":%.6g,"
            "\"lr\":%.6g,\"gnorm\":%.6g,\"tokens\":%.0f,\"seconds\":%.4f,\"acc_pos\":", st.step, st.loss, st.acc,
            st.tau, st.topk, st.lr, st.gnorm, st.tokens, st.seconds);
    json_pos(tr->mjsonl, st.acc_pos, st.B);
    fprintf(tr->mjsonl, "}\n");
    for (int i = 0; i < 2 + nm && i < 2 + DFL_METRIC_COUNT + 2 * 64; i++) win[i] += st.sums[i];
    win_tok += st.tokens;
    win_t += st.seconds;
    int at_ckpt = ckpts && s->ckpt_every > 0 && st.step % s->ckpt_every == 0 && st.step < end;
    if (!quiet && (st.step == 1 || (s->log_every > 0 && st.step % s->log_every == 0) || st.step == end ||
                   at_ckpt)) {
      double acc, tau, topk, pos[64];
      char tb[48];
      metrics_ratios(win + 2, st.B, &acc, &tau, &topk, pos);
      fprintf(log, "step %" PRId64 "/%" PRId64 "  loss %.3f  acc %.3f", st.step, s->steps,
              win[1] > 0 ? win[0] / win[1] : 0.0, acc);
      print_pos(log, pos, st.B, 7);
      char eta[64];
      dfl_train_eta(eta, sizeof eta, now_s() - t_run, st.step - step0, end - st.step);
      fprintf(log, "  tau %.2f  lr %.1e  gnorm %.2f  tok/s %s  %s\n", tau, st.lr, st.gnorm,
              thousands(win_t > 0 ? win_tok / win_t : 0, tb, sizeof tb), eta);
      fflush(log);
      memset(win, 0, sizeof win);
      win_tok = win_t = 0;
      fflush(tr->mjsonl);
    }
    if (at_ckpt) {
      if ((rc = dfl_train_checkpoint(tr))) return rc;
      if (!quiet) fprintf(log, "checkpoint: %s\n", tr->last_ckpt);
      if (tr->has_eval && ((rc = do_eval(tr, &es, log)) || (rc = note_best(tr, &es, log)))) return rc;
    }
  }
  fflush(tr->mjsonl);
  if ((rc = dfl_be_sync(&tr->be))) return rc;
  if (tr->be.kind == DFL_BE_CUDA && tr->mem_max > 0) {
    /* growth over the CUDA context (measured when the backend opened) is what the plan predicts */
    double growth = (double)(tr->mem_max - tr->be.mem_before), plan = tr->planned ? (double)tr->plan.arena_bytes : 0;
    /* the evaluator is a second graph with its own planned arena on the same device */
    int ev = tr->ev.ready && tr->ev.be.kind == DFL_BE_CUDA;
    double ev_plan = ev && tr->ev.planned ? (double)tr->ev.plan.arena_bytes : 0;
    fprintf(log, "device memory in use: %.1f MiB after step %" PRId64 ", %.1f .. %.1f MiB over steps %" PRId64
            "..%" PRId64 " (backend arena %.1f MiB, plan %.1f MiB)\n", tr->mem_first / 1048576.0, tr->first_step,
            tr->mem_min / 1048576.0, tr->mem_max / 1048576.0, tr->first_step + 1, tr->step,
            tr->be.arena_bytes / 1048576.0, plan / 1048576.0);
    if (plan > 0)
      fprintf(log, "device memory above the CUDA context: %.1f MiB = plans %.1f MiB (training %.1f%s) %+.2f%% "
              "(the rest: kernels, cuBLASLt, graphs)\n", growth / 1048576.0, (plan + ev_plan) / 1048576.0,
              plan / 1048576.0, ev ? " + evaluation" : "", 100.0 * (growth - plan - ev_plan) / (plan + ev_plan));
  }
  if (ckpts) {
    if ((rc = dfl_train_checkpoint(tr))) return rc;
    fprintf(log, "checkpoint: %s\n", tr->last_ckpt);
  }
  if (tr->has_eval) {
    if ((rc = do_eval(tr, &es, log))) return rc;
    if (ckpts && (rc = note_best(tr, &es, log))) return rc;
    if (last) *last = es;
  }
  if (tr->step >= s->steps && !tr->opts.no_export) {
    char dir[DFL_PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/drafter", tr->out_dir);
    dfl_ckpt_params view;
    if ((rc = dfl_train_flush(tr))) return rc;
    dfl_cpu shadow, *h = dfl_be_host(&tr->be, DFL_KIND_BIT(DFL_T_PARAM), 1, &shadow);
    if (!h) return DFL_ENOMEM;
    if ((rc = dfl_train_params_view(&tr->tg, h, &view)) == DFL_OK) {
      rc = dfl_train_export_params(&tr->spec, &view, dir);
      if (rc == DFL_OK) rc = dfl_train_verify_params(&tr->spec, &view, dir);
      dfl_train_params_view_free(&view);
    }
    dfl_be_host_done(&tr->be, h, 0);
    if (rc) return rc;
    fprintf(log, "exported drafter: %s (reloaded bit-exactly)\n", dir);
  }
  dfl_train_next_steps(log, s->file, tr->out_dir, tr->step >= s->steps && !tr->opts.no_export, ckpts ? tr->last_ckpt : "");
  return DFL_OK;
}

/* A path as a shell word: as is when it holds only safe characters, else in single quotes (a
** quote inside as '\''), so the printed command can be pasted for a path with spaces. */
static const char *shell_word(char *buf, size_t n, const char *p, const char *suffix) {
  char full[2 * DFL_PATH_MAX];
  snprintf(full, sizeof full, "%s%s", p, suffix);
  int safe = full[0] != 0;
  for (const char *q = full; *q && safe; q++)
    safe = (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || strchr("/._-+,:=@%", *q);
  if (safe) {
    snprintf(buf, n, "%s", full);
    return buf;
  }
  size_t k = 0;
  if (k + 1 < n) buf[k++] = '\'';
  for (const char *q = full; *q && k + 5 < n; q++) {
    if (*q == '\'') { memcpy(buf + k, "'\\''", 4); k += 4; }
    else buf[k++] = *q;
  }
  if (k + 1 < n) buf[k++] = '\'';
  buf[k < n ? k : n - 1] = 0;
  return buf;
}

void dfl_train_next_steps(FILE *log, const char *spec, const char *out_dir, int exported, const char *ckpt) {
  char a[4 * DFL_PATH_MAX + 8], b[4 * DFL_PATH_MAX + 8], c[4 * DFL_PATH_MAX + 8];
  if (exported) {
    fprintf(log, "the drafter is in %s/drafter (Hugging Face DFlash format, for SGLang/vLLM)\n", out_dir);
    fprintf(log, "next: dflc eval %s --drafter %s\n", shell_word(a, sizeof a, spec, ""),
            shell_word(b, sizeof b, out_dir, "/drafter"));
  } else if (ckpt && ckpt[0]) {
    fprintf(log, "the newest checkpoint is %s\n", ckpt);
    shell_word(c, sizeof c, ckpt, "");
    fprintf(log, "next: dflc train %s --out %s --resume %s   (or: dflc export %s -o DIR)\n", shell_word(a, sizeof a, spec, ""),
            shell_word(b, sizeof b, out_dir, ""), c, c);
  }
  fflush(log);
}
