/*
** train.c: the single-device trainer (see train.h): opening a run (spec, data, resume, graph, plan,
** backend, evaluator, run directory), the micro-batches, the pipelined steps (enqueue, collect,
** flush), the checkpoint of a step. The loop of a whole run and what it prints: train_run.c; the
** evaluator: train_eval.c.
*/
#include "runtime/train/train_internal.h"

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
#include "runtime/compile.h"
#include "runtime/train/train_export.h"

void dfl_train_set_threads(int n) {
  if (n > 0) openblas_set_num_threads(n);
}

/* --- trainer --- */

static void spec_name(const char *file, char *out, size_t n) {
  const char *b = strrchr(file, '/');
  b = b ? b + 1 : file;
  snprintf(out, n, "%s", b);
  char *dot = strrchr(out, '.');
  if (dot && dot != out) *dot = 0;
}

int train_ckpt_root(const dfl_trainer *tr, char *out, size_t n) {
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

  double t_stage = train_now_s();
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

  /* The graph and plan: the check's (dflc train compiles once) when it was made from what the spec
  ** says now, else compiled here (runtime/compile.c) */
  dfl_compiled *cp = tr->opts.pre, own;
  int kd = dfl_compile_drafter_device(s);
  if (!cp || !dfl_compiled_matches(cp, s, tr->opts.drafter_only) || (cp->planned && cp->plan_cpu != (kind == DFL_BE_CPU)) ||
      (!cp->planned && !tr->opts.unplanned)) {
    dfl_compile_req co = {.trainer = 1, .drafter_only = tr->opts.drafter_only, .no_plan = tr->opts.unplanned, .backend = kind == DFL_BE_CPU ? DFL_COMPILE_BE_CPU : DFL_COMPILE_BE_CUDA,
                          .device_memory = kind == DFL_BE_CUDA ? dfl_be_cuda_memory() : 0};
    cp = &own;
    rc = dfl_compile_device(s, kd, &co, cp);
    if (rc != DFL_OK && !(rc == DFL_ERR && cp->planned)) {
      fprintf(stderr, "dflc: cannot build the training graph of %s\n", s->file);
      dfl_compiled_free(cp);
      dfl_train_close(tr);
      return rc;
    }
  }
  /* Overwritten gradient accumulators with accum 1 (same values); the optimizer of step n beside
  ** the target forward of step n+1 when they share nothing, its per-step buffers then live over
  ** the whole step in the plan. */
  tr->overlap = cp->span != 0;
  if (cp->planned && !cp->fits)
    fprintf(log, "warning: the plan (%.2f GiB) does not fit the budget %.2f GiB\n", cp->plan.arena_bytes / 1073741824.0,
            cp->budget / 1073741824.0);
  if (cp->planned && cp->r.n_ops)
    fprintf(log, "note: %d forward ops recomputed to fit the memory budget (+%.3g FLOP per micro-step)\n", cp->r.n_ops,
            cp->r.flops);
  if (!cp->planned && !tr->opts.unplanned)
    fprintf(log, "notice: no valid memory plan; running unplanned (one allocation per tensor)\n");
  dfl_compiled_take(cp, &tr->tg, &tr->plan, &tr->planned);
  if (tr->opts.unplanned && tr->planned) {
    dfl_plan_free(&tr->plan);
    tr->planned = 0;
  }
  dfl_graph *g = &tr->tg.g;
  tr->setup_s[0] = train_now_s() - t_stage;
  t_stage = train_now_s();
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
  tr->setup_s[1] = train_now_s() - t_stage;
  t_stage = train_now_s();
  if ((rc = dfl_be_load_weights(&tr->be, s, s->init_from))) {
    dfl_train_close(tr);
    return rc;
  }
  tr->setup_s[2] = train_now_s() - t_stage;
  t_stage = train_now_s();
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
  if (!tr->opts.no_ckpt && train_ckpt_root(tr, croot, sizeof croot) == DFL_OK) {
    double bl;
    if (!resume[0]) dfl_ckpt_clear_best(croot);
    else if (!dfl_ckpt_read_best(croot, &tr->best_step, &tr->best_accept, &bl)) tr->best_step = -1;
  }
  tr->setup_s[3] = train_now_s() - t_stage;
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
  double t0 = train_now_s(), tokens = 0;
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
  double t1 = train_now_s();
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
  train_metrics_ratios(m, st->B, &st->acc, &st->tau, &st->topk, st->acc_pos);
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
  if (train_ckpt_root(tr, root, sizeof root)) {
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
