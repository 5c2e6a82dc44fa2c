/*
** pipeline.c: the multi-device runner (see pipeline.h): loader thread, target device threads,
** data-parallel drafter replica threads, hidden-state queue, all-reduce, diagnostics. Building each
** device's graph, plan and GPU, and the teardown: pipeline_setup.c.
*/
#include "runtime/pipeline/pipeline_internal.h"

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

size_t pipe_cpu_elem(const dfl_tensor *t, void *ctx) {
  (void)ctx;
  return dfl_cpu_elem_size(t, 0);
}

/* First failure stops everything: queues and the collective wake their waiters with an error. */
static void fail(pipe_s *p, const char *who, int rc) {
  pthread_mutex_lock(&p->fail_mu);
  int first = !p->failed;
  if (first) p->failed = rc ? rc : DFL_ERR;   /* the first cause is the run's result */
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
    if (n > rl && !strncmp(p, role, rl) && !memchr(p, '@', n)) {   /* "=fail@K" is fault_fail_at's */
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

/* "ROLE[i]=fail@K" in the fault string: the device (every one of the role, or index i) returns an
** error when it reaches its own K-th micro-batch (0-based); -1 when none applies. */
static int64_t fault_fail_at(const char *f, const char *role, int idx) {
  int64_t at = -1;
  size_t rl = strlen(role);
  for (const char *p = f; p && *p;) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n > rl && !strncmp(p, role, rl)) {
      const char *q = p + rl;
      char *e;
      long k = -1;
      if (*q != '=') {
        k = strtol(q, &e, 10);
        q = e != q ? e : p;
      }
      if (*q == '=' && !strncmp(q + 1, "fail@", 5) && (k < 0 || k == idx)) at = strtoll(q + 6, NULL, 10);
    }
    p += n;
    if (*p == ',') p++;
  }
  return at;
}

/* A device that DFL_FAULT tells to fail at its n-th micro-batch: says so, naming itself. */
static int injected_failure(const dev_s *d, int64_t n) {
  if (d->fail_at < 0 || n != d->fail_at) return 0;
  fprintf(stderr, "dflc: pipeline: %s (%s %d): injected failure at its micro-batch %" PRId64 " (DFL_FAULT)\n",
          d->name, d->role == R_TARGET ? "target" : "drafter replica", d->idx, n);
  return 1;
}

/* Bytes between two device slots of the hidden-state queue: one micro-batch's features (fp32,
** the most any features dtype takes), 256-aligned. */
static int64_t qslot_stride(const pipe_s *p) {
  int64_t b = (int64_t)p->b * p->S * p->s.n_taps * p->s.target.hidden * 4;
  return (b + 255) / 256 * 256;
}

/* One process per GPU: this process's rings carry only its own slices k = rank (mod N), numbered
** k / N; in one process the ring sequence is the global micro-batch number. */
static int64_t ring_seq(const pipe_s *p, int64_t k) { return p->procs > 1 ? k / p->N : k; }

/* Slice k's sequence in this process's loader ring, -1 when no device of this process uses it. */
static int64_t local_seq(const pipe_s *p, int64_t k) {
  if (p->procs <= 1) return k;
  if (p->xproc) return dfl_topo_local_seq(&p->tp, p->rank, k);
  return k % p->N == p->rank ? k / p->N : -1;
}

/* Slot k of q, to read or to write; the wait shows in the device's diagnostics state. */
static dfl_slot *wait_slot(pipe_s *p, dev_s *d, dfl_queue *q, int64_t k, int write) {
  dfl_mon_set(&p->diag, d->diag_id, write ? DFL_DS_WAIT_OUT : DFL_DS_WAIT_IN);
  dfl_slot *sl = write ? dfl_queue_acquire_write(q, k) : dfl_queue_acquire_read(q, k);
  dfl_mon_set(&p->diag, d->diag_id, DFL_DS_BUSY);
  return sl;
}

/* One micro-batch's ids, loss mask, anchors and keep flags out of a slot / into a slot. */
static void batch_from_slot(const pipe_s *p, const dfl_slot *in, int32_t *ids, int32_t *mask, int32_t *anc,
                            int32_t *keep) {
  size_t R = (size_t)p->b * p->S, RA = (size_t)p->b * p->NA;
  memcpy(ids, in->field[F_IDS], R * 4);
  memcpy(mask, in->field[F_MASK], R * 4);
  memcpy(anc, in->field[F_ANCHORS], RA * 4);
  memcpy(keep, in->field[F_KEEP], RA * 4);
}

static void batch_to_slot(const pipe_s *p, dfl_slot *out, const int32_t *ids, const int32_t *mask,
                          const int32_t *anc, const int32_t *keep) {
  size_t R = (size_t)p->b * p->S, RA = (size_t)p->b * p->NA;
  memcpy(out->field[F_IDS], ids, R * 4);
  memcpy(out->field[F_MASK], mask, R * 4);
  memcpy(out->field[F_ANCHORS], anc, RA * 4);
  memcpy(out->field[F_KEEP], keep, RA * 4);
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
  size_t R = (size_t)p->b * p->S, RA = (size_t)p->b * p->NA;
  for (int64_t k = 0; k < p->total; k++) {
    /* another process's slice: drawn all the same (the RNG and the cursor walk every slice) */
    int64_t ls = local_seq(p, k);
    int mine = ls >= 0;
    dfl_slot *sl = mine ? wait_slot(p, d, &p->pre, ls, 1) : NULL;
    if (mine && !sl) {
      d->rc = DFL_ERR;
      break;
    }
    void *f_ids = mine ? sl->field[F_IDS] : p->skip, *f_mask = mine ? sl->field[F_MASK] : p->skip + R;
    void *f_anc = mine ? sl->field[F_ANCHORS] : p->skip + 2 * R, *f_keep = mine ? sl->field[F_KEEP] : p->skip + 2 * R + RA;
    sleep_ms(p->fault_loader);
    double tokens = 0;
    next_rows(p, rows, &tokens);
    /* Slices of one global micro-step are drawn in order with the one anchor RNG: the same rows
    ** and anchors the single-device trainer draws for its batch of N slices. */
    dfl_data_pack(&p->train, rows, p->b, p->S, f_ids, f_mask);
    if (dfl_anchors_sample(f_mask, p->b, p->S, p->NA, &p->ld.rng, f_anc, f_keep) < 0) {
      d->rc = DFL_ENOMEM;
      break;
    }
    p->ld.tokens += tokens;
    if ((k + 1) % ((int64_t)p->A * p->N) == 0) p->snaps[(k + 1) / ((int64_t)p->A * p->N)] = p->ld;
    if (!mine) continue;
    sl->tokens = tokens;
    if (dfl_queue_commit(&p->pre, sl)) {
      d->rc = DFL_ERR;
      break;
    }
  }
  dfl_mon_set(&p->diag, d->diag_id, DFL_DS_IDLE);
  free(rows);
  if (d->rc) fail(p, "loader", d->rc);
  return NULL;
}

/* --- target devices --- */

#ifdef DFL_HAVE_CUDA
static int nccl_wait_on(pipe_s *p, dev_s *d, void *stream, const char *what);
#endif

/* A device thread's first CUDA call: its GPU becomes the thread's current device. */
static int device_thread_start(dev_s *d) {
#ifdef DFL_HAVE_CUDA
  if (d->gpu && dfl_gpu_set_device(d->phys)) {
    fprintf(stderr, "dflc: %s: cannot make CUDA device %d current\n", d->name, d->phys);
    return DFL_ERR;
  }
#else
  (void)d;
#endif
  return DFL_OK;
}

static void *target_main(void *arg) {
  dev_s *d = arg;
  pipe_s *p = d->p;
  if ((d->rc = device_thread_start(d))) {
    fail(p, d->name, d->rc);
    return NULL;
  }
  size_t R = (size_t)p->b * p->S, RA = (size_t)p->b * p->NA;
  int32_t *mask = d->stage, *anc = mask + R, *keep = anc + RA;
  int32_t *ids = d->gpu ? NULL : dfl_cpu_i32(&d->cpu, d->t_ids);
  const float *feat = d->gpu ? NULL : dfl_cpu_f32(&d->cpu, d->t_features);
  size_t fbytes = d->gpu ? 0 : p->hq.field_bytes[F_FEATURES];
  /* hidden-state queue items h = idx, idx + M, ...: slice dfl_topo_slice(h) of the global order */
  int64_t nh = dfl_topo_hcount(&p->tp, p->total);
  for (int64_t h = d->idx; h < nh && !d->rc; h += p->M) {
    int64_t k = dfl_topo_slice(&p->tp, h);
    dfl_slot *in = wait_slot(p, d, &p->pre, p->xproc ? h / p->M : k, 0);
    if (!in) {
      d->rc = DFL_ERR;
      break;
    }
    /* GPU: the ids go through the backend's pinned staging (double-buffered, async copy) */
    if (d->gpu && !(ids = dfl_be_input_i32(&d->be, d->t_ids))) {
      d->rc = DFL_ERR;
      break;
    }
    batch_from_slot(p, in, ids, mask, anc, keep);
    double tokens = in->tokens;
    if (dfl_queue_release(&p->pre, in)) {
      d->rc = DFL_ERR;
      break;
    }
    sleep_ms(d->fault_ms);
    if (injected_failure(d, (h - d->idx) / p->M)) {
      d->rc = DFL_ERR;
      break;
    }
    if (d->gpu) {
      if ((d->rc = dfl_be_commit_inputs(&d->be)) || (d->rc = dfl_be_run(&d->be, DFL_PH_ALL))) break;
    } else if ((d->rc = dfl_cpu_run(&d->cpu, DFL_PH_ALL))) {
      break;
    }
#ifdef DFL_HAVE_CUDA
    if (p->xproc) {   /* to the replica's process: staged in a send slot, sent on the send stream */
      int i = (int)((h / p->M) % p->s.queue_depth);
      void *slot = NULL;
      char err[256];
      int peer = p->tp.rdev[p->tp.drep[h % p->tp.D]];
      if ((d->rc = dfl_gsend_stage(d->gs, i, dfl_gpu_stream(&d->be), dfl_gpu_ptr(&d->be, d->t_features), &slot)))
        break;
      if ((d->rc = dfl_nccl_p2p(&p->coll, 0, 1, slot, (size_t)dfl_tensor_bytes(&d->g->t[d->t_features]), peer,
                                dfl_gsend_stream(d->gs), err, sizeof err))) {
        fprintf(stderr, "dflc: %s: %s\n", d->name, err);
        break;
      }
      if ((d->rc = dfl_gsend_sent(d->gs, i))) break;
      dfl_mon_item(&p->diag, d->diag_id);
      continue;
    }
#endif
    dfl_slot *out = wait_slot(p, d, &p->hq, h, 1);
    if (!out) {
      d->rc = DFL_ERR;
      break;
    }
#ifdef DFL_HAVE_CUDA
    /* enqueued after the forward on this device's stream, after the slot's previous reader */
    /* the slot's previous occupant, h - depth, went to drafter-only replica (h - depth) mod D */
    if (d->gpu && (d->rc = dfl_gq_put(p->gq, out->index, d->idx, h >= p->hq.depth ? (int)((h - p->hq.depth) % p->tp.D) : -1,
                                      dfl_gpu_stream(&d->be), dfl_gpu_ptr(&d->be, d->t_features))))
      break;
#endif
    if (!d->gpu) memcpy(out->field[F_FEATURES], feat, fbytes);
    batch_to_slot(p, out, ids, mask, anc, keep);
    out->tokens = tokens;
    out->producer = d->idx;
    if (dfl_queue_commit(&p->hq, out)) {
      d->rc = DFL_ERR;
      break;
    }
    dfl_mon_item(&p->diag, d->diag_id);
  }
#ifdef DFL_HAVE_CUDA
  /* the last sends complete when the replicas have taken them (or a peer failed: timeout) */
  if (!d->rc && p->xproc) d->rc = nccl_wait_on(p, d, dfl_gsend_stream(d->gs), "the last sends to the drafter replicas");
#endif
  dfl_mon_set(&p->diag, d->diag_id, DFL_DS_IDLE);
  if (d->rc && p->procs > 1) dfl_nccl_abort(&p->coll);
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

/* A host view of a replica's tensors of the given kinds: its own buffers on the CPU, a pulled
** shadow on a GPU. */
dfl_cpu *pipe_host_view(dev_s *d, unsigned kinds, dfl_cpu *shadow) {
  if (!d->gpu) return &d->cpu;
  if (dfl_be_sync(&d->be)) return NULL;
  return dfl_be_host(&d->be, kinds, 1, shadow);
}


void pipe_host_view_done(dev_s *d, dfl_cpu *h) {
  if (d->gpu && h) dfl_be_host_done(&d->be, h, 0);
}

/* A resumed replica: params, masters, moments and the optimizer's counters from the checkpoint
** (pushed to the device through a host shadow on a GPU); its gradient accumulators restart at zero,
** as the single-device trainer's do (runtime/train.c). */
static int resume_replica(dev_s *d, const char *ckpt) {
  const dfl_graph *g = d->g;
  dfl_ckpt_meta m;
  dfl_cpu shadow, *h = d->gpu ? dfl_be_host(&d->be, DFL_CKPT_KINDS, 0, &shadow) : &d->cpu;
  int rc = h ? dfl_ckpt_load(ckpt, g, h, &m) : DFL_ENOMEM;
  int rc2 = d->gpu && h ? dfl_be_host_done(&d->be, h, rc ? 0 : DFL_CKPT_KINDS) : DFL_OK;
  for (int t = 0; !rc && !rc2 && t < g->nt; t++) {
    if (g->t[t].kind != DFL_T_GRAD) continue;
    if (d->gpu) rc2 = dfl_be_zero(&d->be, t);
    else zero_t(&d->cpu, t);
  }
  if (rc || rc2) fprintf(stderr, "dflc: %s: cannot take the state of %s\n", d->name, ckpt);
  return rc ? rc : rc2;
}

/* The end of a finished run, after the devices are closed (the writer's device has its memory back):
** the exported drafter evaluated on that device with the spec's eval file, as `dflc eval` does,
** printed and appended to metrics.jsonl as the run's last evaluation. */
static int final_eval(pipe_s *p, const char *dir, int phys) {
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

static int checkpoint(pipe_s *p, dev_s *d, int64_t step) {
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
      dfl_train_eta(eta, sizeof eta, now_s() - p->t_run, step - p->step0, p->end - step);
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
    int rc = checkpoint(p, d, step);
    if (rc) return rc;
    if (!p->o.quiet) fprintf(p->log, "checkpoint: %s\n", p->res->ckpt);
  }
  return DFL_OK;
}

#ifdef DFL_HAVE_CUDA
/* this process's communicator of replica d; several in one process (nccl_local), else one */
int pipe_nccl_local_of(const pipe_s *p, const dev_s *d) {
  return p->nccl_local ? d->idx : p->xproc && d->role == R_DRAFTER ? 1 : 0;
}

static int nccl_check(void *ctx, char *err, size_t errlen) {
  dev_s *d = ctx;
  pipe_s *p = d->p;
  if (p->nccl_local && p->failed) {   /* another replica thread of this process failed */
    snprintf(err, errlen, "another device of this process failed");
    return DFL_ERR;
  }
  if (p->xproc && dfl_nccl_async_error(&p->coll, 0, err, errlen)) return DFL_ERR;   /* the send/recv one */
  return dfl_nccl_async_error(&p->coll, pipe_nccl_local_of(p, d), err, errlen);
}

/* After an NCCL collective: wait for it by polling, never inside CUDA, so that a peer rank that
** failed (and will never join) costs at most DFL_NCCL_TIMEOUT_S; then the communicator is
** aborted and this rank fails with a message instead of hanging. */
static int nccl_wait_on(pipe_s *p, dev_s *d, void *stream, const char *what) {
  char err[256];
  dfl_mon_set(&p->diag, d->diag_id, DFL_DS_SYNC);
  int rc = dfl_gpu_poll(stream, nccl_check, d, p->nccl_timeout, err, sizeof err);
  dfl_mon_set(&p->diag, d->diag_id, DFL_DS_BUSY);
  if (rc == DFL_OK) return DFL_OK;
  if (p->nccl_local) {   /* the communicators are aborted once, by the main thread after the joins */
    if (!p->failed)
      fprintf(stderr, "dflc: %s: %s: %s (DFL_NCCL_TIMEOUT_S=%g is the limit)\n", d->name, what, err, p->nccl_timeout);
    return DFL_ERR;
  }
  fprintf(stderr, "dflc: %s (rank %d of %d): %s: %s; a peer rank failed or stalled (DFL_NCCL_TIMEOUT_S=%g is the "
          "limit); aborting the NCCL communicator\n", d->name, p->rank, p->procs, what, err, p->nccl_timeout);
  dfl_nccl_abort(&p->coll);
  return DFL_ERR;
}

int pipe_nccl_wait(pipe_s *p, dev_s *d, const char *what) { return nccl_wait_on(p, d, dfl_gpu_stream(&d->be), what); }
#endif

/* GPU replica, after its accum micro-steps are enqueued: all-reduce (NCCL, one process per GPU),
** then the sums are snapshotted before the optimizer phase and its state after, as the trainer
** does; one wait per optimizer step for those few floats. */
static int gpu_optimizer_step(pipe_s *p, dev_s *d, int64_t step, float *sums, int nm, float *tokens, float *opt) {
#ifdef DFL_HAVE_CUDA
  dfl_train_graph *tg = &d->tg;
  dfl_backend *be = &d->be;
  void *st = dfl_gpu_stream(be);
  int rc;
  int nccl = p->procs > 1 || p->nccl_local;
  if (nccl) {
    char err[256];
    if ((rc = dfl_gpu_h2d(d->tok_dev, tokens, 1, st))) return rc;
    dfl_mon_set(&p->diag, d->diag_id, DFL_DS_SYNC);
    rc = dfl_nccl_allreduce(&p->coll, pipe_nccl_local_of(p, d), d->dsegs, d->seg_len, d->n_segs, err, sizeof err);
    dfl_mon_set(&p->diag, d->diag_id, DFL_DS_BUSY);
    if (rc) {
      fprintf(stderr, "dflc: %s: %s\n", d->name, err);
      return rc;
    }
    char what[64];
    snprintf(what, sizeof what, "the all-reduce of step %" PRId64, step);
    if ((rc = pipe_nccl_wait(p, d, what))) return rc;
  }
  float v[DFL_METRIC_COUNT + 2 * 64 + 2 + DFL_OPT_COUNT];
  if ((rc = dfl_be_read_begin(be, 0)) || (rc = dfl_be_read_add(be, 0, tg->loss_num_acc)) ||
      (rc = dfl_be_read_add(be, 0, tg->loss_den_acc)) || (rc = dfl_be_read_add(be, 0, tg->metrics_acc)) ||
      (rc = dfl_be_run(be, 1u << DFL_PH_OPTIMIZER)) || (rc = dfl_be_read_add(be, 0, tg->opt_state)) ||
      (rc = dfl_be_read_end(be, 0)) || (rc = dfl_be_zero(be, tg->metrics_acc)) ||
      (rc = dfl_be_zero(be, tg->loss_num_acc)) || (rc = dfl_be_zero(be, tg->loss_den_acc)))
    return rc;
  if ((rc = dfl_be_read_wait(be, 0, v))) return rc;
  memcpy(sums, v, sizeof(float) * (size_t)(2 + nm));
  memcpy(opt, v + 2 + nm, sizeof(float) * DFL_OPT_COUNT);
  if (nccl && (rc = dfl_gpu_d2h_sync(tokens, d->tok_dev, 1, st))) return rc;
  return DFL_OK;
#else
  (void)p, (void)d, (void)step, (void)sums, (void)nm, (void)tokens, (void)opt;
  return DFL_ERR;
#endif
}

static void *drafter_main(void *arg) {
  dev_s *d = arg;
  pipe_s *p = d->p;
  dfl_train_graph *tg = &d->tg;
  dfl_cpu *c = &d->cpu;
  int from_pre = d->coloc || p->xproc;   /* its own loader's slices (features by NCCL when split) */
  dfl_queue *src = from_pre ? &p->pre : &p->hq;
  if ((d->rc = device_thread_start(d))) {
    fail(p, d->name, d->rc);
    return NULL;
  }
  int g = d->gpu;
  int32_t *ids = g ? NULL : dfl_cpu_i32(c, tg->ids), *mask = g ? NULL : dfl_cpu_i32(c, tg->loss_mask);
  int32_t *anc = g ? NULL : dfl_cpu_i32(c, tg->anchors), *keep = g ? NULL : dfl_cpu_i32(c, tg->keep);
  float *feat = d->coloc || g ? NULL : dfl_cpu_f32(c, tg->features);
  int reporter = d == p->rep0;   /* the first replica of this process */
  int nm = DFL_METRIC_COUNT + 2 * p->s.block_size;
  float *sums = calloc((size_t)(2 + nm), sizeof(float)), tokens = 0, opt[DFL_OPT_COUNT];
  if (!sums) {
    fail(p, d->name, DFL_ENOMEM);
    return NULL;
  }
  /* the step's token count rides in the all-reduce as one more segment */
  d->segs[d->n_segs - 1] = &tokens;
  /* step counts this run's steps; the optimizer step taken is p->step0 + step + 1 */
  for (int64_t step = 0; step < p->end - p->step0 && !d->rc; step++) {
    double t0 = now_s();
    tokens = 0;
    for (int a = 0; a < p->A && !d->rc; a++) {
      int64_t k = (step * p->A + a) * p->N + d->idx;
      /* colocated: slice k from the loader; drafter-only: its hidden-state queue item */
      dfl_slot *in = wait_slot(p, d, src, from_pre ? ring_seq(p, k) : dfl_topo_hseq(&p->tp, k), 0);
      if (!in) {
        d->rc = DFL_ERR;
        break;
      }
      if (g) {   /* staging of this micro-step (the backend double-buffers it) */
        ids = dfl_be_input_i32(&d->be, tg->ids), mask = dfl_be_input_i32(&d->be, tg->loss_mask);
        anc = dfl_be_input_i32(&d->be, tg->anchors), keep = dfl_be_input_i32(&d->be, tg->keep);
        if (!ids || !mask || !anc || !keep) {
          d->rc = DFL_ERR;
          break;
        }
      }
      batch_from_slot(p, in, ids, mask, anc, keep);
      if (feat) memcpy(feat, in->field[F_FEATURES], src->field_bytes[F_FEATURES]);
#ifdef DFL_HAVE_CUDA
      /* features: device to device out of the producer's slot, ordered by the slot's events */
      if (g && !d->coloc && p->xproc) {   /* from the producing target's process, before this step */
        char err[256];
        int64_t h = dfl_topo_hseq(&p->tp, k);
        const dfl_tensor *ft = &d->g->t[tg->features];
        if ((d->rc = dfl_nccl_p2p(&p->coll, 0, 0, dfl_gpu_ptr(&d->be, tg->features), (size_t)dfl_tensor_bytes(ft),
                                  p->tp.tdev[dfl_topo_producer(&p->tp, h)], dfl_gpu_stream(&d->be), err, sizeof err))) {
          fprintf(stderr, "dflc: %s: %s\n", d->name, err);
          break;
        }
      } else if (g && !d->coloc &&
          (d->rc = dfl_gq_get(p->gq, in->index, dfl_topo_producer(&p->tp, dfl_topo_hseq(&p->tp, k)),
                              p->tp.dpos[d->idx], dfl_gpu_stream(&d->be), dfl_gpu_ptr(&d->be, tg->features))))
        break;
#endif
      tokens += (float)in->tokens;
      if (dfl_queue_release(src, in)) {
        d->rc = DFL_ERR;
        break;
      }
      sleep_ms(d->fault_ms);
      if (injected_failure(d, step * p->A + a)) {
        d->rc = DFL_ERR;
        break;
      }
      if (g) {
        if ((d->rc = dfl_be_commit_inputs(&d->be)) || (d->rc = dfl_be_run(&d->be, DFL_PH_STEP))) break;
      } else if ((d->rc = dfl_cpu_run(c, DFL_PH_STEP))) {
        break;
      }
      dfl_mon_item(&p->diag, d->diag_id);
    }
    if (d->rc) break;
    if (g) {
      if ((d->rc = gpu_optimizer_step(p, d, p->step0 + step + 1, sums, nm, &tokens, opt))) break;
      if (reporter && (d->rc = step_report(p, d, p->step0 + step + 1, sums, nm, tokens, t0, opt))) break;
      continue;
    }
    /* Global sums: gradients, the optimizer's denominator (§2.5: Σw over all replicas), the
    ** logging sums and the token count. Same bits on every replica afterwards. */
    dfl_mon_set(&p->diag, d->diag_id, DFL_DS_SYNC);
    int rc = dfl_coll_allreduce(&p->coll, d->idx, d->segs, d->seg_len, d->n_segs);
    dfl_mon_set(&p->diag, d->diag_id, DFL_DS_BUSY);
    if (rc) {
      d->rc = rc;
      break;
    }
    if (reporter) {
      dfl_cpu_get_f(c, tg->loss_num_acc, &sums[0], 1);
      dfl_cpu_get_f(c, tg->loss_den_acc, &sums[1], 1);
      dfl_cpu_get_f(c, tg->metrics_acc, sums + 2, nm);
    }
    if ((d->rc = dfl_cpu_run(c, 1u << DFL_PH_OPTIMIZER))) break;
    zero_t(c, tg->metrics_acc);
    zero_t(c, tg->loss_num_acc);
    zero_t(c, tg->loss_den_acc);
    if (reporter) {
      dfl_cpu_get_f(c, tg->opt_state, opt, DFL_OPT_COUNT);
      if ((d->rc = step_report(p, d, p->step0 + step + 1, sums, nm, tokens, t0, opt))) break;
    }
  }
  dfl_mon_set(&p->diag, d->diag_id, DFL_DS_IDLE);
  free(sums);
  /* one process per GPU: the peers may sit in an all-reduce this rank will never join; abort the
  ** communicator (its own pending kernels return) and exit with the error: the launcher (mpirun,
  ** torchrun) ends the job, or the peers' polled waits time out (pipe_nccl_wait) */
  if (d->rc && p->procs > 1) dfl_nccl_abort(&p->coll);
  /* several replicas in this process: the others leave their polled waits (nccl_check sees the
  ** failure) and the main thread aborts the communicators after the joins */
  if (d->rc) fail(p, d->name, d->rc);
  return NULL;
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
  char eval_dir[DFL_PATH_MAX + 16] = "";   /* the export to evaluate after the devices are closed */
  int eval_phys = 0;

  /* roles */
  int n_gpu = 0, n_cpu = 0, roles[DFL_TOPO_MAX] = {0}, n_roles = 0;
  for (int i = 0; i < s->n_devices; i++) {
    const dfl_device *dv = &s->devices[i];
    if (!dv->runs_target && !dv->runs_drafter) continue;
    if (dv->kind == DFL_DEV_GPU && !p->o.emulate_gpus) n_gpu++;
    else n_cpu++;
    if (n_roles < DFL_TOPO_MAX) roles[n_roles] = (dv->runs_target ? 1 : 0) | (dv->runs_drafter ? 2 : 0);
    n_roles++;
  }
  {
    char err[256];
    if (dfl_topo_init(&p->tp, roles, n_roles, err, sizeof err)) {
      fprintf(stderr, "%s: topology: %s\n", s->file, err);
      return DFL_EFORMAT;
    }
  }
  /* M target-only devices feed the D drafter-only replicas; the C colocated ones feed themselves */
  int M = p->tp.M, N = p->tp.N;
  if (s->grads_bf16 && !p->o.quiet) /* docs/training.md: the all-reduced accumulators stay f32 */
    fprintf(p->log, "note: `grads = bf16` applies to single-device runs; this %d-device run keeps f32 gradients "
            "(all-reduced across replicas)\n", n_roles);
  p->replicated = p->tp.D == 0;
  if (n_gpu && n_cpu) {
    fprintf(stderr, "%s: topology mixes GPU and CPU devices; the runner drives all-GPU or all-CPU pipelines\n",
            s->file);
    return DFL_EFORMAT;
  }
  p->gpu = n_gpu > 0;
  if ((rc = pipe_gpu_topology(p, N))) return rc;
  if (s->n_nodes > 1 && !p->gpu) {
    fprintf(stderr, "%s: %d nodes: the CPU runner is one process (logical devices are threads); multi-node runs "
            "need the CUDA backend with NCCL (docs/pipeline.md)\n", s->file, s->n_nodes);
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
  /* split or mixed across processes: one device per process, rank r = the r-th device with a role */
  p->xproc = p->procs > 1 && !p->replicated;
  if (p->xproc && p->procs != p->tp.n_dev) {
    fprintf(stderr, "%s: %d processes for %d devices (%d target-only, %d drafter): a split topology across "
            "processes runs one process per device, rank r = the r-th device of the topology\n", s->file, p->procs,
            p->tp.n_dev, M, N);
    return DFL_EFORMAT;
  }
  if (p->procs > 1 && !p->xproc && p->procs != N) {
    fprintf(stderr, "%s: %d processes for %d drafter replicas: launch one process per replica GPU\n", s->file,
            p->procs, N);
    return DFL_EFORMAT;
  }
  /* several GPU replicas in one process: one NCCL communicator per replica GPU (ncclCommInitAll) */
  p->nccl_local = p->gpu && p->procs <= 1 && N > 1;
  p->M = M;
  p->N = N;
  p->G = s->batch;
  p->b = s->batch / N;
  s->batch = p->b;    /* every graph is built for one device's micro-batch */
  p->S = s->seq_len;
  p->NA = s->anchors;
  p->A = s->accum > 0 ? s->accum : 1;
  /* Resumed: the schedule is the checkpoint's unless --steps says otherwise (as in dflc train). */
  char resume[DFL_PATH_MAX] = "";
  dfl_ckpt_meta meta;
  memset(&meta, 0, sizeof meta);
  if (p->o.resume && (rc = dfl_ckpt_begin_resume(p->o.resume, s, p->o.quiet ? NULL : p->log, resume, sizeof resume,
                                                  &meta, &p->o.steps)))
    return rc;
  if (p->o.steps > 0 && p->o.steps != s->steps) {
    s->warmup_steps = s->steps > 0 ? (int64_t)((double)s->warmup_steps * p->o.steps / s->steps) : 0;
    s->steps = p->o.steps;
  }
  if (s->steps <= 0) {
    fprintf(stderr, "%s: train.steps must be positive\n", s->file);
    return DFL_EFORMAT;
  }
  p->steps = s->steps;
  p->step0 = resume[0] ? meta.step : 0;
  p->end = p->o.stop_at > 0 && p->o.stop_at < p->steps ? p->o.stop_at : p->steps;
  if (p->step0 < 0 || p->step0 > p->steps) {
    fprintf(stderr, "%s/trainer.json: step %" PRId64 " does not fit a schedule of %" PRId64 " steps\n", resume,
            p->step0, p->steps);
    return DFL_EFORMAT;
  }
  if (p->step0 >= p->end) {
    fprintf(stderr, "dflc: %s is at step %" PRId64 " and this run would end at step %" PRId64 ": nothing to train; %s%s%s\n",
            resume, p->step0, p->end, p->step0 >= p->steps ? "its drafter: dflc export " : "raise --stop-at",
            p->step0 >= p->steps ? resume : "", p->step0 >= p->steps ? " -o DIR" : "");
    return DFL_EFORMAT;
  }
  p->total = (p->end - p->step0) * p->A * p->N;
  pthread_mutex_init(&p->fail_mu, NULL);
  openblas_set_num_threads(p->o.cpu_threads > 0 ? p->o.cpu_threads : 1);
  const char *fault = p->o.fault ? p->o.fault : getenv("DFL_FAULT");

  if ((rc = dfl_data_load_fmt(s->train_path, s->format, s->target.vocab, s->seq_len, s->bad_rows, stderr, &p->train))) {
    fprintf(stderr, "dflc: training data %s refused (see the messages above)\n", s->train_path);
    return rc;
  }
  p->order = malloc(sizeof(int) * (size_t)p->train.n);
  p->snaps = calloc((size_t)(p->end - p->step0) + 1, sizeof *p->snaps);
  p->n_dev = p->procs > 1 ? 1 : M + N;   /* one process per GPU: its own device only */
  p->dev = calloc((size_t)p->n_dev, sizeof *p->dev);
  if (!p->order || !p->snaps || !p->dev) {
    rc = DFL_ENOMEM;
    goto out;
  }
  dfl_rng_seed(&p->ld.rng, s->seed);
  if (resume[0]) {   /* the loader continues where the checkpointed step's last micro-batch left it */
    if ((rc = dfl_ckpt_check_data(resume, &meta, s->train_path, p->train.n, p->train.n_tokens))) goto out;
    p->ld.epoch = meta.epoch;
    p->ld.cursor = meta.cursor;
    memcpy(p->ld.rng.s, meta.rng, sizeof p->ld.rng.s);
    p->ld.tokens = meta.tokens_seen;
  }
  dfl_data_order(&p->train, s->seed, p->ld.epoch, s->shuffle, p->order);

  /* rings: loader -> first stage (prefetch), targets -> drafters (the hidden-state queue) */
  size_t R = (size_t)p->b * p->S, RA = (size_t)p->b * p->NA;
  size_t fb[5] = {R * 4, R * 4, RA * 4, RA * 4, R * (size_t)s->n_taps * s->target.hidden * sizeof(float)};
  int pre_depth = s->prefetch > 0 ? s->prefetch : 1;
  /* every consumer of the prefetch ring must be able to hold one slot without stalling the rest */
  int consumers = p->procs > 1 ? 1 : M + p->tp.C;
  if (pre_depth < consumers) pre_depth = consumers;
  if ((rc = dfl_queue_init(&p->pre, "prefetch", pre_depth, fb, 4, !p->o.no_check))) goto out;
  if (p->xproc && s->queue_depth <= 0) s->queue_depth = 2;   /* send slots per target process */
  if (!p->replicated && !p->xproc) {
    int depth = s->queue_depth > 0 ? s->queue_depth : 2 * M;
    /* GPU: the features live in device slots (pipeline_gpu.h), the host ring carries the rest */
    if ((rc = dfl_queue_init(&p->hq, "hidden", depth, fb, p->gpu ? 4 : 5, !p->o.no_check))) goto out;
    p->has_hq = 1;
  }
  if ((rc = dfl_coll_init_cpu(&p->coll, p->procs > 1 ? 1 : N))) goto out;
  if (p->procs > 1 && (rc = pipe_nccl_setup(p))) goto out;
  if (p->procs > 1 && !(p->skip = malloc(sizeof(int32_t) * (2 * R + 2 * RA)))) {
    rc = DFL_ENOMEM;
    goto out;
  }
  dfl_mon_init(&p->diag, p->has_hq ? &p->hq : NULL, &p->pre);
  p->fault_loader = fault_for(fault, "loader", 0);

  /* devices, in spec order: targets then drafters */
  int ti = 0, di = 0, ri = 0;
  for (int i = 0; i < s->n_devices; i++) {
    const dfl_device *dv = &s->devices[i];
    if (!dv->runs_target && !dv->runs_drafter) continue;
    int is_target = dv->runs_target && !dv->runs_drafter;
    int idx = is_target ? ti++ : di++;
    if (p->procs > 1 && ri++ != p->rank) continue;   /* replicated: every device is a replica, ri = idx */
    dev_s *d = &p->dev[p->procs > 1 ? 0 : is_target ? idx : M + idx];
    d->p = p;
    d->spec_dev = dv;
    d->gpu = p->gpu;
    d->role = is_target ? R_TARGET : R_DRAFTER;
    d->coloc = !is_target && dv->runs_target;
    d->idx = idx;
    snprintf(d->name, sizeof d->name, "%s%d", dv->kind == DFL_DEV_GPU ? "gpu" : "cpu", dv->index);
    d->fault_ms = fault_for(fault, is_target ? "target" : "drafter", d->idx);
    d->fail_at = fault_fail_at(fault, is_target ? "target" : "drafter", d->idx);
    if (d->gpu && (rc = pipe_gpu_device(p, dv, &d->phys))) goto out;
    if (d->gpu && is_target && p->has_hq && idx < p->hq.depth) {
      /* queue slot i lives on target i mod M (at i / M in its workspace), as `dflc plan` accounts */
      int own = (p->hq.depth - idx + M - 1) / M;
      d->qslot_bytes = own * qslot_stride(p);
    }
    if ((rc = is_target ? pipe_setup_target(p, d) : pipe_setup_drafter(p, d))) goto out;
  }
  for (int i = 0; i < p->n_dev && !p->rep0; i++)
    if (p->dev[i].role == R_DRAFTER) p->rep0 = &p->dev[i];
  p->writer = p->rep0 && p->rep0->idx == 0;
  for (int i = 0; i < p->n_dev && resume[0]; i++)
    if (p->dev[i].role == R_DRAFTER && (rc = resume_replica(&p->dev[i], resume))) goto out;
#ifdef DFL_HAVE_CUDA
  if (p->xproc) {
    /* communicator 0 over every process (the features' send/recv), 1 split off for the replicas'
    ** all-reduce; a target process also gets its send slots */
    dev_s *d = &p->dev[0];
    char err[512];
    void *st = dfl_gpu_stream(&d->be);
    if ((rc = dfl_nccl_init_rank(&p->coll, 0, 2, p->nccl_id, p->procs, p->rank, st, err, sizeof err)) ||
        (rc = dfl_nccl_split(&p->coll, 0, 1, d->role == R_DRAFTER ? 0 : -1, d->idx, st, err, sizeof err)) ||
        (d->role == R_TARGET &&
         (rc = dfl_gsend_init(&d->gs, s->queue_depth, (size_t)dfl_tensor_bytes(&d->g->t[d->t_features]), d->phys)))) {
      fprintf(stderr, "dflc: %s (rank %d of %d): %s\n", d->name, p->rank, p->procs, rc == DFL_ENOMEM ? "out of memory" : err);
      goto out;
    }
  }
#endif
  for (int i = 0; i < p->n_dev; i++) {
    dev_s *d = &p->dev[i];
    d->diag_id = dfl_mon_add_dev(&p->diag, d->name,
                                  d->role == R_TARGET ? DFL_DR_TARGET : d->coloc ? DFL_DR_BOTH : DFL_DR_DRAFTER,
                                  pipe_dev_bytes(d));
  }
#ifdef DFL_HAVE_CUDA
  if (p->gpu && p->has_hq) {
    /* the device slots hold the target's features exactly as the drafter's INPUT takes them */
    dev_s *cons = &p->dev[M + p->tp.drep[0]];   /* the first drafter-only replica (all take the same shape) */
    const dfl_tensor *tf = &p->dev[0].g->t[p->dev[0].t_features], *df = &cons->g->t[cons->tg.features];
    if (dfl_tensor_bytes(tf) != dfl_tensor_bytes(df)) {
      fprintf(stderr, "dflc: pipeline: target features (%lld bytes) and drafter input (%lld bytes) differ\n",
              (long long)dfl_tensor_bytes(tf), (long long)dfl_tensor_bytes(df));
      rc = DFL_ESHAPE;
      goto out;
    }
    /* the slots: inside the targets' arenas (their plans' "queue.slots"); cudaMalloc'ed only if
    ** a plan could not be built with them */
    void *at[256];
    int placed = p->hq.depth <= 256, pdev[DFL_TOPO_MAX], cdev[DFL_TOPO_MAX];
    for (int i = 0; i < M; i++) pdev[i] = p->dev[i].phys;
    for (int q = 0; q < p->tp.D; q++) cdev[q] = p->dev[M + p->tp.drep[q]].phys;
    for (int i = 0; i < p->hq.depth && placed; i++) {
      dev_s *t = &p->dev[i % M];
      int64_t nb = 0;
      char *base = t->planned ? dfl_be_workspace(&t->be, &t->plan, "queue.slots", &nb) : NULL;
      int64_t o = (int64_t)(i / M) * qslot_stride(p);
      placed = base && o + dfl_tensor_bytes(tf) <= nb;
      at[i] = placed ? base + o : NULL;
    }
    p->res->queue_in_arena = placed;
    if (!placed)
      fprintf(stderr, "dflc: note: the queue's device slots are allocated outside the plan's arenas\n");
    if ((rc = dfl_gq_init_at(&p->gq, p->hq.depth, (size_t)dfl_tensor_bytes(tf), placed ? at : NULL, M, pdev,
                             p->tp.D, cdev))) goto out;
    /* producer and consumer GPUs reach each other's memory directly where the hardware allows */
    for (int i = 0; i < M; i++)
      for (int q = 0; q < p->tp.D; q++) {
        dfl_gpu_peer(pdev[i], cdev[q]);
        dfl_gpu_peer(cdev[q], pdev[i]);
      }
  }
  if (p->nccl_local) {
    /* one communicator per replica GPU of this process, all made at once (no bootstrap needed) */
    char err[512];
    int devs[DFL_TOPO_MAX];
    void *streams[DFL_TOPO_MAX];
    for (int j = 0; j < N; j++) {
      devs[j] = p->dev[M + j].phys;
      streams[j] = dfl_gpu_stream(&p->dev[M + j].be);
    }
    if ((rc = dfl_nccl_load(&p->coll, err, sizeof err)) || (rc = dfl_nccl_init_all(&p->coll, N, devs, streams, err, sizeof err))) {
      fprintf(stderr, "dflc: NCCL for %d GPU replicas in one process: %s\n", N, err);
      goto out;
    }
  }
  if (p->gpu) p->diag.mem_fn = dfl_gpu_mem_used;   /* cudaMemGetInfo at every report */
#endif
  p->loader.p = p;
  snprintf(p->loader.name, sizeof p->loader.name, "loader");
  p->loader.diag_id = dfl_mon_add_dev(&p->diag, "loader", DFL_DR_LOADER, 0);

  /* run directory */
  if (p->o.out_dir) snprintf(p->out_dir, sizeof p->out_dir, "%s", p->o.out_dir);
  else {
    char nm[256];
    pipe_spec_name(s->file, nm, sizeof nm);
    snprintf(p->out_dir, sizeof p->out_dir, "runs/%s", nm);
  }
  if (dfl_mkdirs(p->out_dir)) {
    fprintf(stderr, "dflc: cannot create the run directory %s: %s\n", p->out_dir, strerror(errno));
    rc = DFL_EIO;
    goto out;
  }
  char path[DFL_PATH_MAX + 32];
  int pn = !p->writer ? snprintf(path, sizeof path, "%s/metrics-rank%d.jsonl", p->out_dir, p->rank)
                   : snprintf(path, sizeof path, "%s/metrics.jsonl", p->out_dir);
  if (pn >= (int)sizeof path || (resume[0] && dfl_ckpt_trim_metrics(path, p->step0)) ||
      !(p->mjsonl = fopen(path, resume[0] ? "a" : "w"))) {   /* a resumed run appends, each step once */
    fprintf(stderr, "dflc: cannot write %s: %s\n", path, strerror(errno));
    rc = DFL_EIO;
    goto out;
  }
  if (!p->o.quiet) {
    fprintf(p->log, "pipeline: %s, %s; %d target device%s -> %d drafter replica%s, global batch %d (%d per replica) "
            "x %d tokens, accum %d, %" PRId64 " steps; queue depth %d, prefetch %d\n", s->file,
            p->replicated ? "replicated target+drafter" : p->tp.C ? "mixed colocated + split" : "split target/drafter", M, M == 1 ? "" : "s", N,
            N == 1 ? "" : "s", p->G, p->b, p->S, p->A, p->steps, p->has_hq ? p->hq.depth : 0, p->pre.depth);
    fprintf(p->log, "run directory: %s\n", p->out_dir);
    if (resume[0]) fprintf(p->log, "resumed from %s at step %" PRId64 "\n", resume, p->step0);
    if (p->end < p->steps) fprintf(p->log, "stopping after step %" PRId64 " (--stop-at)\n", p->end);
    fflush(p->log);
  }

  double t0 = now_s();
  p->t_run = t0;
  dfl_mon_report(&p->diag, 0, NULL, NULL, NULL, NULL, 0);   /* start the first interval now */
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
    /* replicas of this process may have left an all-reduce pending on their streams: abort the
    ** communicators so that those kernels return before the backends are closed */
    if (p->nccl_local) dfl_nccl_abort(&p->coll);
    goto out;
  }
  p->res->steps = p->end;
  p->res->replicas_identical = pipe_replicas_identical(p);
  if (!p->res->replicas_identical) {
    rc = DFL_ERR;
    goto out;
  }
  dev_s *r0 = p->rep0;
  if (!p->writer) p->o.no_ckpt = p->o.no_export = 1;   /* replica 0's process writes the run's files */
  if (!p->o.no_ckpt) {
    if ((rc = checkpoint(p, r0, p->end))) goto out;
    if (!p->o.quiet) fprintf(p->log, "checkpoint: %s\n", p->res->ckpt);
  }
  if (!p->o.no_export && p->end == p->steps) {   /* a run stopped early is continued, not exported */
    char dir[DFL_PATH_MAX + 16];
    if (snprintf(dir, sizeof dir, "%s/drafter", p->out_dir) >= (int)sizeof dir) {
      rc = DFL_EIO;
      goto out;
    }
    dfl_ckpt_params view;
    dfl_cpu shadow, *h = pipe_host_view(r0, MODEL_KINDS, &shadow);
    if (!h) {
      rc = DFL_ERR;
      goto out;
    }
    /* the view points into h's buffers: h lives until the export is verified */
    if ((rc = dfl_train_params_view(&r0->tg, h, &view)) == DFL_OK) {
      rc = dfl_train_export_params(spec, &view, dir);
      if (rc == DFL_OK) rc = dfl_train_verify_params(spec, &view, dir);
      dfl_train_params_view_free(&view);
    }
    pipe_host_view_done(r0, h);
    if (rc) goto out;
    if (!p->o.quiet) fprintf(p->log, "exported drafter: %s (reloaded bit-exactly)\n", dir);
    if (!p->o.no_eval && s->eval_path[0]) {   /* the writer has replica 0 (a target-only process has none) */
      snprintf(eval_dir, sizeof eval_dir, "%s", dir);
      eval_phys = r0->phys;
    }
  }
  if (!p->o.quiet) {
    fprintf(p->log, "pipeline done: steps %" PRId64 "..%" PRId64 " in %.1fs; replicas bit-identical\n", p->step0 + 1,
            p->end, p->res->seconds);
    if (p->writer) dfl_train_next_steps(p->log, s->file, p->out_dir, !p->o.no_export && p->end == p->steps, p->res->ckpt);
    fflush(p->log);
  }
out:
  if (p->diag.n || p->diag.t_last > 0) dfl_mon_free(&p->diag);
  pipe_teardown(p);
  if (rc == DFL_OK && eval_dir[0]) rc = final_eval(p, eval_dir, eval_phys);
  /* MPI_Finalize (when the bootstrap initialised MPI) only on success: it waits for every rank,
  ** and a failed rank must instead exit so that mpirun ends the job */
  if (p->procs > 1 && rc == DFL_OK) dfl_launch_finalize();
  pthread_mutex_destroy(&p->fail_mu);
  return rc;
}
