/*
** pipeline_report.c: what a pipeline run writes as it goes: after each optimizer step the metrics
** line, the progress line, the diagnostics verdict and the periodic checkpoint; the checkpoint
** itself (the loader's position at that step); the final evaluation of the exported drafter.
*/
#include "runtime/pipeline/pipeline_internal.h"

static void ratios(const double *m, int B, dfl_step_stats *st) {
  st->acc = m[DFL_METRIC_ACC_DEN] > 0 ? m[DFL_METRIC_ACC_NUM] / m[DFL_METRIC_ACC_DEN] : 0;
  st->tau = m[DFL_METRIC_TAU_BLOCKS] > 0 ? m[DFL_METRIC_TAU_SUM] / m[DFL_METRIC_TAU_BLOCKS] : 0;
  st->topk = m[DFL_METRIC_ACC_DEN] > 0 ? m[DFL_METRIC_TOPK_NUM] / m[DFL_METRIC_ACC_DEN] : 0;
  for (int j = 0; j < B && j < 64; j++) {
    double c = m[DFL_METRIC_COUNT + j], n = m[DFL_METRIC_COUNT + B + j];
    st->acc_pos[j] = n > 0 ? c / n : -1;
  }
}

/* The end of a finished run, after the devices are closed (the writer's device has its memory back):
** the exported drafter evaluated on that device with the spec's eval file, as `dflc eval` does,
** printed and appended to metrics.jsonl as the run's last evaluation. */
int pipe_final_eval(pipe_s *p, const char *dir, int phys) {
  dfl_dataset d;
  dfl_eval_stats es;
  memset(&d, 0, sizeof d);
  int rc = dfl_data_load_fmt(p->s.eval_path, p->s.format, p->s.target.vocab, p->s.seq_len, p->s.bad_rows, stderr, &d);
  if (rc) {
    fprintf(stderr, "dflc: eval data %s refused (see the messages above)\n", p->s.eval_path);
    return rc;
  }
#ifdef DFL_HAVE_CUDA
  if (p->gpu && (rc = dfl_gpu_set_device(phys))) {
    dfl_data_free(&d);
    return rc;
  }
#else
  (void)phys;
#endif
  rc = dfl_eval_drafter(&p->s, p->gpu ? DFL_BE_CUDA : DFL_BE_CPU, dir, &d, &es);
  dfl_data_free(&d);
  if (rc) {
    fprintf(stderr, "dflc: the evaluation of %s failed (the drafter is exported; dflc eval retries it)\n", dir);
    return rc;
  }
  char what[64], path[DFL_PATH_MAX + 32];
  snprintf(what, sizeof what, "eval %" PRId64 "/%" PRId64, p->end, p->steps);
  if (!p->o.quiet) dfl_eval_print(p->log, what, &es);
  snprintf(path, sizeof path, "%s/metrics.jsonl", p->out_dir);
  FILE *f = fopen(path, "a");
  if (!f) {
    fprintf(stderr, "dflc: cannot append to %s: %s\n", path, strerror(errno));
    return DFL_EIO;
  }
  dfl_eval_jsonl(f, p->end, &es);
  fclose(f);
  return DFL_OK;
}

int pipe_checkpoint(pipe_s *p, dev_s *d, int64_t step) {
  char root[DFL_PATH_MAX + 8];
  dfl_ckpt_meta m;
  memset(&m, 0, sizeof m);
  if (!p->o.out_dir && p->s.ckpt_dir[0]) snprintf(root, sizeof root, "%s", p->s.ckpt_dir);
  else snprintf(root, sizeof root, "%s/ckpt", p->out_dir);
  const loader_snap *ls = &p->snaps[step - p->step0];
  m.step = step;
  m.steps_total = p->steps;
  m.epoch = ls->epoch;
  m.cursor = ls->cursor;
  memcpy(m.rng, ls->rng.s, sizeof m.rng);
  m.seed = p->s.seed;
  m.tokens_seen = ls->tokens;
  m.data_rows = p->train.n;
  m.data_tokens = p->train.n_tokens;
  if (!realpath(p->s.file, m.spec)) snprintf(m.spec, sizeof m.spec, "%s", p->s.file);
  /* every persistent kind: a GPU replica's gradient accumulators and sums are saved too */
  dfl_cpu shadow, *h = pipe_host_view(d, DFL_CKPT_KINDS, &shadow);
  if (!h) return DFL_ERR;
  int rc = dfl_ckpt_save(root, &d->tg.g, h, d->tg.drafter.params, d->tg.drafter.n_params, &m, p->s.ckpt_keep,
                         p->res->ckpt, sizeof p->res->ckpt);
  pipe_host_view_done(d, h);
  return rc;
}

/* Rank 0 after each optimizer step: metrics line, progress line, diagnostics, checkpoint. */
int pipe_step_report(pipe_s *p, dev_s *d, int64_t step, const float *sums, int nm, float tokens, double t0,
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
  st.seconds = pipe_now_s() - t0;
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
  /* the progress line: loss, acc, tau and tok/s over the steps since the previous line, as the
  ** single-device trainer prints them (the JSONL above has every step) */
  for (int i = 0; i < 2 + nm && i < (int)(sizeof p->win / sizeof p->win[0]); i++) p->win[i] += sums[i];
  p->win_tok += st.tokens;
  p->win_t += st.seconds;
  int every = p->o.diag_every > 0 ? p->o.diag_every : (p->s.log_every > 0 ? p->s.log_every : 10);
  int diag_now = step % every == 0 || step == p->end;
  if (step == 1 || diag_now) {
    if (!p->o.quiet) {
      dfl_step_stats w;
      memset(&w, 0, sizeof w);
      ratios(p->win + 2, B, &w);
      char eta[64];
      dfl_train_eta(eta, sizeof eta, pipe_now_s() - p->t_run, step - p->step0, p->end - step);
      fprintf(p->log, "step %" PRId64 "/%" PRId64 "  loss %.3f  acc %.3f  tau %.2f  lr %.1e  gnorm %.2f  "
              "tok/s %.0f  %s\n", step, p->steps, p->win[1] > 0 ? p->win[0] / p->win[1] : 0.0, w.acc, w.tau, st.lr,
              st.gnorm, p->win_t > 0 ? p->win_tok / p->win_t : 0, eta);
    }
    memset(p->win, 0, sizeof p->win);
    p->win_tok = p->win_t = 0;
  }
  if (diag_now) {
    char v[256];
    dfl_bound b = dfl_mon_report(&p->diag, step, p->o.quiet ? NULL : p->log, p->mjsonl, NULL, v, sizeof v);
    p->res->bound_count[b]++;
    snprintf(p->res->last_verdict, sizeof p->res->last_verdict, "%s", v);
    if (p->o.on_diag) p->o.on_diag(p->o.ctx, step, b, v);
  }
  if (!p->o.no_ckpt && p->writer && p->s.ckpt_every > 0 && step % p->s.ckpt_every == 0 && step < p->end) {
    int rc = pipe_checkpoint(p, d, step);
    if (rc) return rc;
    if (!p->o.quiet) fprintf(p->log, "checkpoint: %s\n", p->res->ckpt);
  }
  return DFL_OK;
}
