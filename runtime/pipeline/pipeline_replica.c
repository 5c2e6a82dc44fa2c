/*
** pipeline_replica.c: the data-parallel drafter replicas: each replica thread's micro-steps (from
** the prefetch ring when colocated, else from the hidden-state queue), the all-reduce and the
** optimizer step (CPU collective or NCCL, with the polled NCCL waits that turn a dead peer into an
** error), a resumed replica's state, and the host view of a replica's tensors.
*/
#include "runtime/pipeline/pipeline_internal.h"

/* One process per GPU: this process's rings carry only its own slices k = rank (mod N), numbered
** k / N; in one process the ring sequence is the global micro-batch number. */
static int64_t ring_seq(const pipe_s *p, int64_t k) { return p->procs > 1 ? k / p->N : k; }

static void zero_t(dfl_cpu *c, int t) {
  if (t >= 0) memset(c->buf[t], 0, (size_t)dfl_tensor_numel(&c->g->t[t]) * dfl_cpu_elem_size(&c->g->t[t], 0));
}

/* A resumed replica: params, masters, moments and the optimizer's counters from the checkpoint
** (pushed to the device through a host shadow on a GPU); its gradient accumulators restart at zero,
** as the single-device trainer's do (runtime/train/train.c). */
int pipe_resume_replica(dev_s *d, const char *ckpt) {
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

void *pipe_drafter_main(void *arg) {
  dev_s *d = arg;
  pipe_s *p = d->p;
  dfl_train_graph *tg = &d->tg;
  dfl_cpu *c = &d->cpu;
  int from_pre = d->coloc || p->xproc;   /* its own loader's slices (features by NCCL when split) */
  dfl_queue *src = from_pre ? &p->pre : &p->hq;
  if ((d->rc = pipe_thread_start(d))) {
    pipe_fail(p, d->name, d->rc);
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
    pipe_fail(p, d->name, DFL_ENOMEM);
    return NULL;
  }
  /* the step's token count rides in the all-reduce as one more segment */
  d->segs[d->n_segs - 1] = &tokens;
  /* step counts this run's steps; the optimizer step taken is p->step0 + step + 1 */
  for (int64_t step = 0; step < p->end - p->step0 && !d->rc; step++) {
    double t0 = pipe_now_s();
    tokens = 0;
    for (int a = 0; a < p->A && !d->rc; a++) {
      int64_t k = (step * p->A + a) * p->N + d->idx;
      /* colocated: slice k from the loader; drafter-only: its hidden-state queue item */
      dfl_slot *in = pipe_wait_slot(p, d, src, from_pre ? ring_seq(p, k) : dfl_topo_hseq(&p->tp, k), 0);
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
      pipe_batch_from_slot(p, in, ids, mask, anc, keep);
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
      pipe_sleep_ms(d->fault_ms);
      if (pipe_injected_failure(d, step * p->A + a)) {
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
      if (reporter && (d->rc = pipe_step_report(p, d, p->step0 + step + 1, sums, nm, tokens, t0, opt))) break;
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
      if ((d->rc = pipe_step_report(p, d, p->step0 + step + 1, sums, nm, tokens, t0, opt))) break;
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
  if (d->rc) pipe_fail(p, d->name, d->rc);
  return NULL;
}
