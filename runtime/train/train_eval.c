/*
** train_eval.c: the evaluator (see train.h): the eval graph on its own backend, its weights taken
** from the trainer, a checkpoint or an export, one pass over the eval rows for loss, accuracy and
** tau, then the greedy decoder's walk (accept.c) on the same graph for the acceptance length.
** Also here, below the trainer that uses them too: the clock and the metrics' ratios.
*/
#include "runtime/train/train_internal.h"
#include "runtime/compile.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "runtime/io/weights.h"
#include "runtime/io/checkpoint.h"
#include "runtime/backend.h"
#include "runtime/train/accept.h"

/* Anchors of evaluations come from their own fixed stream, so that every evaluation of a run
** (and of runs with the same spec seed) draws the same blocks and the numbers are comparable. */
#define DFL_EVAL_SEED_XOR 0x6576616c5eedull

/* --- what the trainer shares (train_internal.h) --- */

double train_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Ratios of the DFLASH_METRICS vector summed over some steps. Layout as the backends write it
** (graph.h): the DFL_METRIC_* scalars, then correct[j] for j < B, then count[j] for j < B. */
void train_metrics_ratios(const double *m, int B, double *acc, double *tau, double *topk, double *pos) {
  *acc = m[DFL_METRIC_ACC_DEN] > 0 ? m[DFL_METRIC_ACC_NUM] / m[DFL_METRIC_ACC_DEN] : 0;
  *tau = m[DFL_METRIC_TAU_BLOCKS] > 0 ? m[DFL_METRIC_TAU_SUM] / m[DFL_METRIC_TAU_BLOCKS] : 0;
  *topk = m[DFL_METRIC_ACC_DEN] > 0 ? m[DFL_METRIC_TOPK_NUM] / m[DFL_METRIC_ACC_DEN] : 0;
  for (int j = 0; j < B && j < 64; j++) {
    double c = m[DFL_METRIC_COUNT + j], n = m[DFL_METRIC_COUNT + B + j];
    pos[j] = n > 0 ? c / n : -1;
  }
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
  /* the evaluation forward through the compile entry point (runtime/compile.c): graph, then plan */
  dfl_compiled cp;
  dfl_compile_req req = {.what = DFL_COMPILE_EVAL, .no_budget = 1,
                         .backend = kind == DFL_BE_CUDA ? DFL_COMPILE_BE_CUDA : DFL_COMPILE_BE_CPU};
  int kd = dfl_compile_drafter_device(s);
  int rc = kd < 0 ? DFL_ERR : dfl_compile_graph(s, kd, &req, &cp);
  if (rc) {
    if (kd >= 0) dfl_compiled_free(&cp);
    fprintf(stderr, "dflc: cannot build the evaluation graph\n");
    return rc;
  }
  /* The decoder's walk reads each block's correct flags (the metrics op's first input): kept as an
  ** OUTPUT, so the plan gives them bytes of their own that the host reads after a run. */
  const dfl_graph *g = cp.g;
  ev->correct = -1;
  for (int i = 0; i < g->nops && ev->correct < 0; i++)
    if (g->ops[i].code == DFL_OP_DFLASH_METRICS) ev->correct = g->ops[i].in[0];
  if (ev->correct < 0 || dfl_tensor_numel(&g->t[ev->correct]) != (int64_t)cp.tg.batch * cp.tg.N * s->block_size) {
    fprintf(stderr, "dflc: the evaluation graph has no per-block correct flags for the acceptance walk\n");
    dfl_compiled_free(&cp);
    return DFL_ERR;
  }
  cp.g->t[ev->correct].kind = DFL_T_OUTPUT;
  /* The host reads only the persistent sums (out.*) and the flags, so the eval graph runs planned too. */
  dfl_compile_plan(s, &req, &cp);
  dfl_compiled_take(&cp, &ev->eg, &ev->plan, &ev->planned);
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
  double t0 = train_now_s();
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
  train_metrics_ratios(sums, B, &es->acc, &es->tau, &es->topk, es->acc_pos);
  es->seconds = train_now_s() - t0;
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
