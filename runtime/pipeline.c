/*
** pipeline.c: the multi-device runner (see pipeline.h): loader thread, target device threads,
** data-parallel drafter replica threads, hidden-state queue, all-reduce, diagnostics.
*/
#include "runtime/pipeline.h"

#include <cblas.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compiler/plan.h"
#include "runtime/checkpoint.h"
#include "runtime/collective.h"
#include "runtime/queue.h"
#include "runtime/train_export.h"

enum { F_IDS = 0, F_MASK, F_ANCHORS, F_KEEP, F_FEATURES };   /* slot fields */
enum { R_LOADER = 0, R_TARGET, R_DRAFTER };

typedef struct loader_snap { int64_t epoch, cursor; dfl_rng rng; double tokens; } loader_snap;

typedef struct pipe_s pipe_s;

typedef struct dev_s {
  pipe_s *p;
  int role, idx, diag_id;
  const dfl_device *spec_dev;
  char name[48];
  /* target-only devices */
  dfl_graph tgt;
  int t_ids, t_features;
  /* drafters (with the target when replicated) */
  dfl_train_graph tg;
  int den_acc;
  float **segs;
  size_t *seg_len;
  int n_segs;
  /* either */
  dfl_graph *g;
  dfl_plan plan;
  int planned;
  dfl_cpu cpu;
  int ready;
  double fault_ms;
  int32_t *stage;            /* target: mask, anchors, keep of the micro-batch in flight */
  pthread_t th;
  int rc;
} dev_s;

struct pipe_s {
  dfl_spec s;                /* per-device micro-batch: s.batch = global batch / N */
  int G, b, S, NA, A, M, N, replicated;
  int64_t steps, total;      /* optimizer steps, micro-batches */
  dfl_pipe_opts o;
  FILE *log, *mjsonl;
  char out_dir[DFL_PATH_MAX];
  dfl_dataset train;
  int *order;
  loader_snap ld;            /* loader's live position */
  loader_snap *snaps;        /* position after the last micro-batch of step k, k = 0..steps */
  dfl_queue pre, hq;
  int has_hq;
  dfl_coll coll;
  dfl_diag diag;
  dev_s *dev;                /* targets first (split), then drafters */
  int n_dev;
  dev_s loader;
  pthread_mutex_t fail_mu;
  int failed;
  dfl_pipe_result *res;
  double fault_loader;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_ms(double ms) {
  if (ms <= 0) return;
  struct timespec ts = {(time_t)(ms / 1000), (long)(fmod(ms, 1000.0) * 1e6)};
  while (nanosleep(&ts, &ts) && errno == EINTR) {}
}

static size_t cpu_elem(const dfl_tensor *t, void *ctx) {
  (void)ctx;
  return dfl_cpu_elem_size(t, 0);
}

/* First failure stops everything: queues and the collective wake their waiters with an error. */
static void fail(pipe_s *p, const char *who, int rc) {
  pthread_mutex_lock(&p->fail_mu);
  int first = !p->failed;
  p->failed = rc ? rc : DFL_ERR;
  pthread_mutex_unlock(&p->fail_mu);
  if (first && who) fprintf(stderr, "dflc: pipeline: %s failed; stopping every device\n", who);
  dfl_queue_close(&p->pre, NULL);
  if (p->has_hq) dfl_queue_close(&p->hq, NULL);
  dfl_coll_abort(&p->coll);
}

int dfl_pipe_wants(const dfl_spec *s) {
  int n = 0;
  for (int i = 0; i < s->n_devices; i++) n += s->devices[i].runs_target || s->devices[i].runs_drafter;
  return n > 1;
}

/* --- fault injection --- */

static double fault_for(const char *f, const char *role, int idx) {
  double all = 0, one = 0;
  if (!f) return 0;
  size_t rl = strlen(role);
  for (const char *p = f; *p;) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n > rl && !strncmp(p, role, rl)) {
      const char *q = p + rl;
      char *e;
      if (*q == '=') all = strtod(q + 1, NULL);
      else {
        long k = strtol(q, &e, 10);
        if (e != q && *e == '=' && k == idx) one = strtod(e + 1, NULL);
      }
    }
    p += n;
    if (*p == ',') p++;
  }
  return one > 0 ? one : all;
}

/* --- loader --- */

static void next_rows(pipe_s *p, int *rows, double *tokens) {
  for (int r = 0; r < p->b; r++) {
    if (p->ld.cursor >= p->train.n) {   /* next epoch: the same deterministic order as the trainer */
      p->ld.epoch++;
      p->ld.cursor = 0;
      dfl_data_order(&p->train, p->s.seed, p->ld.epoch, p->s.shuffle, p->order);
    }
    int row = p->order[p->ld.cursor++];
    rows[r] = row;
    int64_t len = p->train.off[row + 1] - p->train.off[row];
    *tokens += (double)(len < p->S ? len : p->S);
  }
}

static void *loader_main(void *arg) {
  dev_s *d = arg;
  pipe_s *p = d->p;
  int *rows = malloc(sizeof(int) * (size_t)p->b);
  if (!rows) {
    fail(p, "loader", DFL_ENOMEM);
    return NULL;
  }
  p->snaps[0] = p->ld;
  for (int64_t k = 0; k < p->total; k++) {
    dfl_diag_set(&p->diag, d->diag_id, DFL_DS_WAIT_OUT);
    dfl_slot *sl = dfl_queue_acquire_write(&p->pre, k);
    dfl_diag_set(&p->diag, d->diag_id, DFL_DS_BUSY);
    if (!sl) {
      d->rc = DFL_ERR;
      break;
    }
    sleep_ms(p->fault_loader);
    double tokens = 0;
    next_rows(p, rows, &tokens);
    /* Slices of one global micro-step are drawn in order with the one anchor RNG: the same rows
    ** and anchors the single-device trainer draws for its batch of N slices. */
    dfl_data_pack(&p->train, rows, p->b, p->S, sl->field[F_IDS], sl->field[F_MASK]);
    if (dfl_anchors_sample(sl->field[F_MASK], p->b, p->S, p->NA, &p->ld.rng, sl->field[F_ANCHORS],
                           sl->field[F_KEEP]) < 0) {
      d->rc = DFL_ENOMEM;
      break;
    }
    sl->tokens = tokens;
    p->ld.tokens += tokens;
    if ((k + 1) % ((int64_t)p->A * p->N) == 0) p->snaps[(k + 1) / ((int64_t)p->A * p->N)] = p->ld;
    if (dfl_queue_commit(&p->pre, sl)) {
      d->rc = DFL_ERR;
      break;
    }
  }
  dfl_diag_set(&p->diag, d->diag_id, DFL_DS_IDLE);
  free(rows);
  if (d->rc) fail(p, "loader", d->rc);
  return NULL;
}

/* --- target devices --- */

static void *target_main(void *arg) {
  dev_s *d = arg;
  pipe_s *p = d->p;
  size_t R = (size_t)p->b * p->S, RA = (size_t)p->b * p->NA;
  int32_t *mask = d->stage, *anc = mask + R, *keep = anc + RA;
  int32_t *ids = dfl_cpu_i32(&d->cpu, d->t_ids);
  const float *feat = dfl_cpu_f32(&d->cpu, d->t_features);
  size_t fbytes = p->hq.field_bytes[F_FEATURES];
  for (int64_t k = d->idx; k < p->total && !d->rc; k += p->M) {
    dfl_diag_set(&p->diag, d->diag_id, DFL_DS_WAIT_IN);
    dfl_slot *in = dfl_queue_acquire_read(&p->pre, k);
    dfl_diag_set(&p->diag, d->diag_id, DFL_DS_BUSY);
    if (!in) {
      d->rc = DFL_ERR;
      break;
    }
    memcpy(ids, in->field[F_IDS], R * 4);
    memcpy(mask, in->field[F_MASK], R * 4);
    memcpy(anc, in->field[F_ANCHORS], RA * 4);
    memcpy(keep, in->field[F_KEEP], RA * 4);
    double tokens = in->tokens;
    if (dfl_queue_release(&p->pre, in)) {
      d->rc = DFL_ERR;
      break;
    }
    sleep_ms(d->fault_ms);
    if ((d->rc = dfl_cpu_run(&d->cpu, DFL_PH_ALL))) break;
    dfl_diag_set(&p->diag, d->diag_id, DFL_DS_WAIT_OUT);
    dfl_slot *out = dfl_queue_acquire_write(&p->hq, k);
    dfl_diag_set(&p->diag, d->diag_id, DFL_DS_BUSY);
    if (!out) {
      d->rc = DFL_ERR;
      break;
    }
    memcpy(out->field[F_FEATURES], feat, fbytes);
    memcpy(out->field[F_IDS], ids, R * 4);
    memcpy(out->field[F_MASK], mask, R * 4);
    memcpy(out->field[F_ANCHORS], anc, RA * 4);
    memcpy(out->field[F_KEEP], keep, RA * 4);
    out->tokens = tokens;
    out->producer = d->idx;
    if (dfl_queue_commit(&p->hq, out)) {
      d->rc = DFL_ERR;
      break;
    }
    dfl_diag_item(&p->diag, d->diag_id);
  }
  dfl_diag_set(&p->diag, d->diag_id, DFL_DS_IDLE);
  if (d->rc) fail(p, d->name, d->rc);
  return NULL;
}

/* --- drafter replicas --- */

static void zero_t(dfl_cpu *c, int t) {
  if (t >= 0) memset(c->buf[t], 0, (size_t)dfl_tensor_numel(&c->g->t[t]) * dfl_cpu_elem_size(&c->g->t[t], 0));
}

static void ratios(const double *m, int B, dfl_step_stats *st) {
  st->acc = m[DFL_METRIC_ACC_DEN] > 0 ? m[DFL_METRIC_ACC_NUM] / m[DFL_METRIC_ACC_DEN] : 0;
  st->tau = m[DFL_METRIC_TAU_BLOCKS] > 0 ? m[DFL_METRIC_TAU_SUM] / m[DFL_METRIC_TAU_BLOCKS] : 0;
  st->topk = m[DFL_METRIC_ACC_DEN] > 0 ? m[DFL_METRIC_TOPK_NUM] / m[DFL_METRIC_ACC_DEN] : 0;
  for (int j = 0; j < B && j < 64; j++) {
    double c = m[DFL_METRIC_COUNT + j], n = m[DFL_METRIC_COUNT + B + j];
    st->acc_pos[j] = n > 0 ? c / n : -1;
  }
}

static int checkpoint(pipe_s *p, dev_s *d, int64_t step) {
  char root[DFL_PATH_MAX + 8];
  dfl_ckpt_meta m;
  memset(&m, 0, sizeof m);
  if (!p->o.out_dir && p->s.ckpt_dir[0]) snprintf(root, sizeof root, "%s", p->s.ckpt_dir);
  else snprintf(root, sizeof root, "%s/ckpt", p->out_dir);
  const loader_snap *ls = &p->snaps[step];
  m.step = step;
  m.steps_total = p->steps;
  m.epoch = ls->epoch;
  m.cursor = ls->cursor;
  memcpy(m.rng, ls->rng.s, sizeof m.rng);
  m.seed = p->s.seed;
  m.tokens_seen = ls->tokens;
  if (!realpath(p->s.file, m.spec)) snprintf(m.spec, sizeof m.spec, "%s", p->s.file);
  return dfl_ckpt_save(root, &d->tg.g, &d->cpu, d->tg.drafter.params, d->tg.drafter.n_params, &m, p->s.ckpt_keep,
                       p->res->ckpt, sizeof p->res->ckpt);
}

/* Rank 0 after each optimizer step: metrics line, progress line, diagnostics, checkpoint. */
static int step_report(pipe_s *p, dev_s *d, int64_t step, const float *sums, int nm, float tokens, double t0,
                       const float *opt) {
  dfl_step_stats st;
  memset(&st, 0, sizeof st);
  int B = p->s.block_size < 64 ? p->s.block_size : 64;
  double m[DFL_METRIC_COUNT + 2 * 64];
  for (int i = 0; i < nm && i < DFL_METRIC_COUNT + 2 * 64; i++) m[i] = sums[2 + i];
  st.step = step;
  st.B = B;
  st.loss = sums[1] > 0 ? (double)sums[0] / sums[1] : 0;
  ratios(m, B, &st);
  st.lr = opt[DFL_OPT_LR];
  st.gnorm = opt[DFL_OPT_GNORM];
  st.tokens = tokens;
  st.seconds = now_s() - t0;
  for (int i = 0; i < 2 + nm && i < (int)(sizeof st.sums / sizeof st.sums[0]); i++) st.sums[i] = sums[i];
  if (p->o.on_step) p->o.on_step(p->o.ctx, &st);
  if (!isfinite(st.loss)) {
    fprintf(stderr, "dflc: step %" PRId64 ": loss is %g; stopping (try a lower lr or clipping)\n", step, st.loss);
    return DFL_ERR;
  }
  if (p->mjsonl) {
    fprintf(p->mjsonl, "{\"step\":%" PRId64 ",\"loss\":%.6g,\"acc\":%.6g,\"tau\":%.6g,\"topk\":%.6g,\"lr\":%.6g,"
            "\"gnorm\":%.6g,\"tokens\":%.0f,\"seconds\":%.4f,\"replicas\":%d}\n", step, st.loss, st.acc, st.tau,
            st.topk, st.lr, st.gnorm, st.tokens, st.seconds, p->N);
  }
  int every = p->o.diag_every > 0 ? p->o.diag_every : (p->s.log_every > 0 ? p->s.log_every : 10);
  if (step % every == 0 || step == p->steps) {
    if (!p->o.quiet) {
      fprintf(p->log, "step %" PRId64 "/%" PRId64 "  loss %.3f  acc %.3f  tau %.2f  lr %.1e  gnorm %.2f  "
              "tok/s %.0f\n", step, p->steps, st.loss, st.acc, st.tau, st.lr, st.gnorm,
              st.seconds > 0 ? st.tokens / st.seconds : 0);
    }
    char v[256];
    dfl_bound b = dfl_diag_report(&p->diag, step, p->o.quiet ? NULL : p->log, p->mjsonl, NULL, v, sizeof v);
    p->res->bound_count[b]++;
    snprintf(p->res->last_verdict, sizeof p->res->last_verdict, "%s", v);
    if (p->o.on_diag) p->o.on_diag(p->o.ctx, step, b, v);
  }
  if (!p->o.no_ckpt && p->s.ckpt_every > 0 && step % p->s.ckpt_every == 0 && step < p->steps) {
    int rc = checkpoint(p, d, step);
    if (rc) return rc;
    if (!p->o.quiet) fprintf(p->log, "checkpoint: %s\n", p->res->ckpt);
  }
  return DFL_OK;
}

static void *drafter_main(void *arg) {
  dev_s *d = arg;
  pipe_s *p = d->p;
  dfl_train_graph *tg = &d->tg;
  dfl_cpu *c = &d->cpu;
  dfl_queue *src = p->replicated ? &p->pre : &p->hq;
  size_t R = (size_t)p->b * p->S, RA = (size_t)p->b * p->NA;
  int32_t *ids = dfl_cpu_i32(c, tg->ids), *mask = dfl_cpu_i32(c, tg->loss_mask);
  int32_t *anc = dfl_cpu_i32(c, tg->anchors), *keep = dfl_cpu_i32(c, tg->keep);
  float *feat = p->replicated ? NULL : dfl_cpu_f32(c, tg->features);
  int nm = DFL_METRIC_COUNT + 2 * p->s.block_size;
  float *sums = calloc((size_t)(2 + nm), sizeof(float)), tokens = 0, opt[DFL_OPT_COUNT];
  if (!sums) {
    fail(p, d->name, DFL_ENOMEM);
    return NULL;
  }
  /* the step's token count rides in the all-reduce as one more segment */
  d->segs[d->n_segs - 1] = &tokens;
  for (int64_t step = 0; step < p->steps && !d->rc; step++) {
    double t0 = now_s();
    tokens = 0;
    for (int a = 0; a < p->A && !d->rc; a++) {
      int64_t k = (step * p->A + a) * p->N + d->idx;
      dfl_diag_set(&p->diag, d->diag_id, DFL_DS_WAIT_IN);
      dfl_slot *in = dfl_queue_acquire_read(src, k);
      dfl_diag_set(&p->diag, d->diag_id, DFL_DS_BUSY);
      if (!in) {
        d->rc = DFL_ERR;
        break;
      }
      memcpy(ids, in->field[F_IDS], R * 4);
      memcpy(mask, in->field[F_MASK], R * 4);
      memcpy(anc, in->field[F_ANCHORS], RA * 4);
      memcpy(keep, in->field[F_KEEP], RA * 4);
      if (feat) memcpy(feat, in->field[F_FEATURES], src->field_bytes[F_FEATURES]);
      tokens += (float)in->tokens;
      if (dfl_queue_release(src, in)) {
        d->rc = DFL_ERR;
        break;
      }
      sleep_ms(d->fault_ms);
      if ((d->rc = dfl_cpu_run(c, DFL_PH_STEP))) break;
      dfl_diag_item(&p->diag, d->diag_id);
    }
    if (d->rc) break;
    /* Global sums: gradients, the optimizer's denominator (§2.5: Σw over all replicas), the
    ** logging sums and the token count. Same bits on every replica afterwards. */
    dfl_diag_set(&p->diag, d->diag_id, DFL_DS_SYNC);
    int rc = dfl_coll_allreduce(&p->coll, d->idx, d->segs, d->seg_len, d->n_segs);
    dfl_diag_set(&p->diag, d->diag_id, DFL_DS_BUSY);
    if (rc) {
      d->rc = rc;
      break;
    }
    if (d->idx == 0) {
      dfl_cpu_get_f(c, tg->loss_num_acc, &sums[0], 1);
      dfl_cpu_get_f(c, tg->loss_den_acc, &sums[1], 1);
      dfl_cpu_get_f(c, tg->metrics_acc, sums + 2, nm);
    }
    if ((d->rc = dfl_cpu_run(c, 1u << DFL_PH_OPTIMIZER))) break;
    zero_t(c, tg->metrics_acc);
    zero_t(c, tg->loss_num_acc);
    zero_t(c, tg->loss_den_acc);
    if (d->idx == 0) {
      dfl_cpu_get_f(c, tg->opt_state, opt, DFL_OPT_COUNT);
      if ((d->rc = step_report(p, d, step + 1, sums, nm, tokens, t0, opt))) break;
    }
  }
  dfl_diag_set(&p->diag, d->diag_id, DFL_DS_IDLE);
  free(sums);
  if (d->rc) fail(p, d->name, d->rc);
  return NULL;
}

/* --- setup --- */

static int plan_and_alloc(dev_s *d, const int *live, int n_live) {
  dfl_plan_opts po;
  memset(&po, 0, sizeof po);
  po.live_out = live;
  po.n_live_out = n_live;
  if (dfl_plan_build_ex(&d->plan, d->g, cpu_elem, NULL, &po) == DFL_OK) {
    d->planned = 1;
    if (dfl_plan_check(&d->plan, d->g) != DFL_OK) {
      dfl_plan_free(&d->plan);
      d->planned = 0;
    }
  }
  int rc = dfl_cpu_init(&d->cpu, d->g, d->planned ? &d->plan : NULL, 0);
  if (rc) fprintf(stderr, "dflc: %s: cannot allocate the CPU backend state\n", d->name);
  return rc;
}

static int64_t dev_bytes(const dev_s *d) {
  int64_t b = d->planned ? d->plan.arena_bytes : 0;
  if (!d->planned)
    for (int i = 0; i < d->g->nt; i++) b += (int64_t)dfl_tensor_numel(&d->g->t[i]) * (int64_t)dfl_cpu_elem_size(&d->g->t[i], 0);
  return b;
}

static int setup_target(pipe_s *p, dev_s *d) {
  dfl_graph_init(&d->tgt);
  d->g = &d->tgt;
  d->g->cur_phase = DFL_PH_TARGET;
  d->t_ids = dfl_tensor_1d(d->g, "input_ids", DFL_I32, DFL_T_INPUT, (int64_t)p->b * p->S);
  dfl_target_out out;
  int rc = dfl_model_target(d->g, &p->s, p->b, p->S, d->t_ids, 0, 0, &out);
  if (rc || out.features < 0) {
    fprintf(stderr, "dflc: %s: cannot build the target graph\n", d->name);
    return rc ? rc : DFL_ERR;
  }
  d->t_features = out.features;
  if ((rc = plan_and_alloc(d, &d->t_features, 1))) return rc;
  if ((rc = dfl_train_load_weights(&p->s, &d->cpu, NULL))) return rc;
  d->stage = malloc(sizeof(int32_t) * ((size_t)p->b * p->S + 2 * (size_t)p->b * p->NA));
  return d->stage ? DFL_OK : DFL_ENOMEM;
}

static int setup_drafter(pipe_s *p, dev_s *d) {
  int rc = dfl_model_train_graph(&d->tg, &p->s, p->replicated);
  if (rc) {
    fprintf(stderr, "dflc: %s: cannot build the training graph\n", d->name);
    return rc;
  }
  d->g = &d->tg.g;
  if ((rc = plan_and_alloc(d, NULL, 0))) return rc;
  if ((rc = dfl_train_load_weights(&p->s, &d->cpu, p->s.init_from))) return rc;
  d->den_acc = dfl_tensor_find(d->g, "opt.den");
  if (d->den_acc < 0) {
    fprintf(stderr, "dflc: %s: the training graph has no optimizer denominator (opt.den)\n", d->name);
    return DFL_ERR;
  }
  /* all-reduce list: every gradient accumulator, opt.den, the three logging sums, tokens */
  const dfl_graph *g = d->g;
  int n = 0;
  for (int i = 0; i < g->nt; i++) n += g->t[i].kind == DFL_T_PARAM && g->t[i].grad_acc >= 0;
  d->segs = calloc((size_t)n + 5, sizeof *d->segs);
  d->seg_len = calloc((size_t)n + 5, sizeof *d->seg_len);
  if (!d->segs || !d->seg_len) return DFL_ENOMEM;
  for (int i = 0; i < g->nt; i++) {
    if (g->t[i].kind != DFL_T_PARAM || g->t[i].grad_acc < 0) continue;
    int t = g->t[i].grad_acc;
    d->segs[d->n_segs] = dfl_cpu_f32(&d->cpu, t);
    d->seg_len[d->n_segs++] = (size_t)dfl_tensor_numel(&g->t[t]);
  }
  int extra[4] = {d->den_acc, d->tg.loss_num_acc, d->tg.loss_den_acc, d->tg.metrics_acc};
  for (int i = 0; i < 4; i++) {
    d->segs[d->n_segs] = dfl_cpu_f32(&d->cpu, extra[i]);
    d->seg_len[d->n_segs++] = (size_t)dfl_tensor_numel(&g->t[extra[i]]);
  }
  d->seg_len[d->n_segs++] = 1;   /* tokens: pointer set by the thread */
  return DFL_OK;
}

/* Are all replicas' persistent drafter tensors bit-identical to replica 0's? */
static int replicas_identical(pipe_s *p) {
  dev_s *r0 = &p->dev[p->replicated ? 0 : p->M];
  for (int j = 1; j < p->N; j++) {
    dev_s *r = r0 + j;
    const dfl_graph *g = r0->g;
    for (int i = 0; i < g->nt; i++) {
      const dfl_tensor *t = &g->t[i];
      if (t->kind != DFL_T_PARAM && t->kind != DFL_T_STATE) continue;
      int k = dfl_tensor_find(r->g, t->name);
      if (k < 0 || memcmp(r0->cpu.buf[i], r->cpu.buf[k], (size_t)dfl_tensor_numel(t) * dfl_cpu_elem_size(t, 0))) {
        fprintf(stderr, "dflc: replica %d differs from replica 0 in %s\n", j, t->name);
        return 0;
      }
    }
  }
  return 1;
}

static void spec_name(const char *file, char *out, size_t n) {
  const char *b = strrchr(file, '/');
  if (snprintf(out, n, "%s", b ? b + 1 : file) >= (int)n) out[n - 1] = 0;
  char *dot = strrchr(out, '.');
  if (dot && dot != out) *dot = 0;
}

static void teardown(pipe_s *p) {
  for (int i = 0; i < p->n_dev; i++) {
    dev_s *d = &p->dev[i];
    if (d->cpu.g) dfl_cpu_free(&d->cpu);
    if (d->planned) dfl_plan_free(&d->plan);
    if (d->g) dfl_graph_free(d->g);
    free(d->segs);
    free(d->seg_len);
    free(d->stage);
  }
  free(p->dev);
  if (p->pre.slots) dfl_queue_free(&p->pre);
  if (p->has_hq) dfl_queue_free(&p->hq);
  if (p->coll.seg_ptr) dfl_coll_free(&p->coll);
  dfl_data_free(&p->train);
  free(p->order);
  free(p->snaps);
  if (p->mjsonl) fclose(p->mjsonl);
}

int dfl_pipe_run(const dfl_spec *spec, const dfl_pipe_opts *opts, dfl_pipe_result *res) {
  static pipe_s P;   /* large (the diag and queue samples): off the stack; one run at a time */
  pipe_s *p = &P;
  memset(p, 0, sizeof *p);
  dfl_pipe_result dummy;
  p->res = res ? res : &dummy;
  memset(p->res, 0, sizeof *p->res);
  if (opts) p->o = *opts;
  p->log = p->o.log ? p->o.log : stdout;
  p->s = *spec;
  dfl_spec *s = &p->s;
  int rc = DFL_OK;

  /* roles */
  int M = 0, N = 0, both = 0;
  for (int i = 0; i < s->n_devices; i++) {
    const dfl_device *dv = &s->devices[i];
    if (!dv->runs_target && !dv->runs_drafter) continue;
    if (dv->kind == DFL_DEV_GPU && !p->o.emulate_gpus) {
      fprintf(stderr, "%s: device gpu%d: the pipeline runner drives CPU devices only so far (the CUDA queue and "
              "NCCL paths are not wired to the CUDA backend yet; docs/pipeline.md). Use cpus = N and "
              "cpuN devices for a run on CPU threads\n", s->file, dv->index);
      return DFL_EFORMAT;
    }
    if (dv->runs_target && dv->runs_drafter) both++;
    else if (dv->runs_target) M++;
    else N++;
  }
  if (s->n_nodes > 1) {
    fprintf(stderr, "%s: %d nodes: the CPU runner is one process (logical devices are threads); multi-node runs "
            "need the CUDA backend with NCCL (docs/pipeline.md)\n", s->file, s->n_nodes);
    return DFL_EFORMAT;
  }
  if (both && (M || N)) {
    fprintf(stderr, "%s: topology mixes devices that run target+drafter with target-only/drafter-only devices; "
            "the runner supports all-colocated replicas or disjoint target and drafter devices\n", s->file);
    return DFL_EFORMAT;
  }
  if (both) {
    p->replicated = 1;
    N = both;
    M = 0;
  }
  if (N < 1 || (!p->replicated && M < 1)) {
    fprintf(stderr, "%s: the topology needs at least one target and one drafter device\n", s->file);
    return DFL_EFORMAT;
  }
  if (s->batch % N) {
    fprintf(stderr, "%s: batch %d does not split over %d drafter devices\n", s->file, s->batch, N);
    return DFL_EFORMAT;
  }
  if (s->block_size > 64) {
    fprintf(stderr, "%s: block_size %d: the trainer reports at most 64 block positions\n", s->file, s->block_size);
    return DFL_EFORMAT;
  }
  p->M = M;
  p->N = N;
  p->G = s->batch;
  p->b = s->batch / N;
  s->batch = p->b;    /* every graph is built for one device's micro-batch */
  p->S = s->seq_len;
  p->NA = s->anchors;
  p->A = s->accum > 0 ? s->accum : 1;
  if (p->o.steps > 0 && p->o.steps != s->steps) {
    s->warmup_steps = s->steps > 0 ? (int64_t)((double)s->warmup_steps * p->o.steps / s->steps) : 0;
    s->steps = p->o.steps;
  }
  if (s->steps <= 0) {
    fprintf(stderr, "%s: train.steps must be positive\n", s->file);
    return DFL_EFORMAT;
  }
  p->steps = s->steps;
  p->total = p->steps * p->A * p->N;
  pthread_mutex_init(&p->fail_mu, NULL);
  openblas_set_num_threads(p->o.cpu_threads > 0 ? p->o.cpu_threads : 1);
  const char *fault = p->o.fault ? p->o.fault : getenv("DFL_FAULT");

  if ((rc = dfl_data_load(s->train_path, s->target.vocab, s->seq_len, s->bad_rows, stderr, &p->train))) {
    fprintf(stderr, "dflc: training data %s refused (see the messages above)\n", s->train_path);
    return rc;
  }
  p->order = malloc(sizeof(int) * (size_t)p->train.n);
  p->snaps = calloc((size_t)p->steps + 1, sizeof *p->snaps);
  p->n_dev = M + N;
  p->dev = calloc((size_t)p->n_dev, sizeof *p->dev);
  if (!p->order || !p->snaps || !p->dev) {
    rc = DFL_ENOMEM;
    goto out;
  }
  dfl_rng_seed(&p->ld.rng, s->seed);
  dfl_data_order(&p->train, s->seed, 0, s->shuffle, p->order);

  /* rings: loader -> first stage (prefetch), targets -> drafters (the hidden-state queue) */
  size_t R = (size_t)p->b * p->S, RA = (size_t)p->b * p->NA;
  size_t fb[5] = {R * 4, R * 4, RA * 4, RA * 4, R * (size_t)s->n_taps * s->target.hidden * sizeof(float)};
  int pre_depth = s->prefetch > 0 ? s->prefetch : 1;
  /* every consumer of the prefetch ring must be able to hold one slot without stalling the rest */
  int consumers = p->replicated ? N : M;
  if (pre_depth < consumers) pre_depth = consumers;
  if ((rc = dfl_queue_init(&p->pre, "prefetch", pre_depth, fb, 4, !p->o.no_check))) goto out;
  if (!p->replicated) {
    int depth = s->queue_depth > 0 ? s->queue_depth : 2 * M;
    if ((rc = dfl_queue_init(&p->hq, "hidden", depth, fb, 5, !p->o.no_check))) goto out;
    p->has_hq = 1;
  }
  if ((rc = dfl_coll_init_cpu(&p->coll, N))) goto out;
  dfl_diag_init(&p->diag, p->has_hq ? &p->hq : NULL, &p->pre);
  p->fault_loader = fault_for(fault, "loader", 0);

  /* devices, in spec order: targets then drafters */
  int ti = 0, di = 0;
  for (int i = 0; i < s->n_devices; i++) {
    const dfl_device *dv = &s->devices[i];
    if (!dv->runs_target && !dv->runs_drafter) continue;
    int is_target = !p->replicated && dv->runs_target;
    dev_s *d = &p->dev[is_target ? ti : M + di];
    d->p = p;
    d->spec_dev = dv;
    d->role = is_target ? R_TARGET : R_DRAFTER;
    d->idx = is_target ? ti++ : di++;
    snprintf(d->name, sizeof d->name, "%s%d", dv->kind == DFL_DEV_GPU ? "gpu" : "cpu", dv->index);
    d->fault_ms = fault_for(fault, is_target ? "target" : "drafter", d->idx);
    if ((rc = is_target ? setup_target(p, d) : setup_drafter(p, d))) goto out;
  }
  for (int i = 0; i < p->n_dev; i++) {
    dev_s *d = &p->dev[i];
    d->diag_id = dfl_diag_add_dev(&p->diag, d->name,
                                  d->role == R_TARGET ? DFL_DR_TARGET : p->replicated ? DFL_DR_BOTH : DFL_DR_DRAFTER,
                                  dev_bytes(d));
  }
  p->loader.p = p;
  snprintf(p->loader.name, sizeof p->loader.name, "loader");
  p->loader.diag_id = dfl_diag_add_dev(&p->diag, "loader", DFL_DR_LOADER, 0);

  /* run directory */
  if (p->o.out_dir) snprintf(p->out_dir, sizeof p->out_dir, "%s", p->o.out_dir);
  else {
    char nm[256];
    spec_name(s->file, nm, sizeof nm);
    snprintf(p->out_dir, sizeof p->out_dir, "runs/%s", nm);
  }
  if (dfl_mkdirs(p->out_dir)) {
    fprintf(stderr, "dflc: cannot create the run directory %s: %s\n", p->out_dir, strerror(errno));
    rc = DFL_EIO;
    goto out;
  }
  char path[DFL_PATH_MAX + 32];
  if (snprintf(path, sizeof path, "%s/metrics.jsonl", p->out_dir) >= (int)sizeof path ||
      !(p->mjsonl = fopen(path, "w"))) {
    fprintf(stderr, "dflc: cannot write %s: %s\n", path, strerror(errno));
    rc = DFL_EIO;
    goto out;
  }
  if (!p->o.quiet) {
    fprintf(p->log, "pipeline: %s, %s; %d target device%s -> %d drafter replica%s, global batch %d (%d per replica) "
            "x %d tokens, accum %d, %" PRId64 " steps; queue depth %d, prefetch %d\n", s->file,
            p->replicated ? "replicated target+drafter" : "split target/drafter", M, M == 1 ? "" : "s", N,
            N == 1 ? "" : "s", p->G, p->b, p->S, p->A, p->steps, p->has_hq ? p->hq.depth : 0, p->pre.depth);
    fprintf(p->log, "run directory: %s\n", p->out_dir);
    fflush(p->log);
  }

  double t0 = now_s();
  dfl_diag_report(&p->diag, 0, NULL, NULL, NULL, NULL, 0);   /* start the first interval now */
  int started = 0;
  if (pthread_create(&p->loader.th, NULL, loader_main, &p->loader) == 0) started = 1;
  for (int i = 0; i < p->n_dev && started == i + 1; i++) {
    dev_s *d = &p->dev[i];
    if (pthread_create(&d->th, NULL, d->role == R_TARGET ? target_main : drafter_main, d) == 0) started++;
  }
  if (started != p->n_dev + 1) {
    fprintf(stderr, "dflc: cannot start the device threads\n");
    fail(p, NULL, DFL_ERR);
  }
  if (started > 0) pthread_join(p->loader.th, NULL);
  for (int i = 0; i + 1 < started; i++) pthread_join(p->dev[i].th, NULL);
  p->res->seconds = now_s() - t0;
  p->res->n_target = M;
  p->res->n_drafter = N;
  if (p->failed) {
    rc = p->failed;
    goto out;
  }
  p->res->steps = p->steps;
  p->res->replicas_identical = replicas_identical(p);
  if (!p->res->replicas_identical) {
    rc = DFL_ERR;
    goto out;
  }
  dev_s *r0 = &p->dev[p->replicated ? 0 : M];
  if (!p->o.no_ckpt) {
    if ((rc = checkpoint(p, r0, p->steps))) goto out;
    if (!p->o.quiet) fprintf(p->log, "checkpoint: %s\n", p->res->ckpt);
  }
  if (!p->o.no_export) {
    char dir[DFL_PATH_MAX + 16];
    if (snprintf(dir, sizeof dir, "%s/drafter", p->out_dir) >= (int)sizeof dir) {
      rc = DFL_EIO;
      goto out;
    }
    dfl_ckpt_params view;
    if ((rc = dfl_train_params_view(&r0->tg, &r0->cpu, &view))) goto out;
    rc = dfl_train_export_params(spec, &view, dir);
    if (rc == DFL_OK) rc = dfl_train_verify_params(spec, &view, dir);
    dfl_train_params_view_free(&view);
    if (rc) goto out;
    if (!p->o.quiet) fprintf(p->log, "exported drafter: %s (reloaded bit-exactly)\n", dir);
  }
  if (!p->o.quiet) {
    fprintf(p->log, "pipeline done: %" PRId64 " steps in %.1fs; replicas bit-identical\n", p->steps, p->res->seconds);
    fflush(p->log);
  }
out:
  if (p->diag.n || p->diag.t_last > 0) dfl_diag_free(&p->diag);
  teardown(p);
  pthread_mutex_destroy(&p->fail_mu);
  return rc;
}
