/*
** pipeline_feed.c: the threads that feed the drafter replicas: the loader (draws every micro-batch
** in the single-device trainer's order into the prefetch ring) and the target devices (forward,
** then the tapped hidden states into the hidden-state queue, or to another process by NCCL);
** the slot helpers they share with the replicas, and DFL_FAULT's fault injection.
*/
#include "runtime/pipeline/pipeline_internal.h"

/* --- fault injection --- */

/* "ROLE=MS" or "ROLEi=MS" in the fault string: the delay of every device of the role or of index i
** (the latter wins); 0 when none applies. */
double pipe_fault_for(const char *f, const char *role, int idx) {
  double all = 0, one = 0;
  if (!f) return 0;
  size_t rl = strlen(role);
  for (const char *p = f; *p;) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n > rl && !strncmp(p, role, rl) && !memchr(p, '@', n)) {   /* "=fail@K" is pipe_fault_fail_at's */
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
int64_t pipe_fault_fail_at(const char *f, const char *role, int idx) {
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
int pipe_injected_failure(const dev_s *d, int64_t n) {
  if (d->fail_at < 0 || n != d->fail_at) return 0;
  fprintf(stderr, "dflc: pipeline: %s (%s %d): injected failure at its micro-batch %" PRId64 " (DFL_FAULT)\n",
          d->name, d->role == R_TARGET ? "target" : "drafter replica", d->idx, n);
  return 1;
}

/* Slice k's sequence in this process's loader ring, -1 when no device of this process uses it. */
static int64_t local_seq(const pipe_s *p, int64_t k) {
  if (p->procs <= 1) return k;
  if (p->xproc) return dfl_topo_local_seq(&p->tp, p->rank, k);
  return k % p->N == p->rank ? k / p->N : -1;
}

/* One micro-batch's ids, loss mask, anchors and keep flags out of a slot / into a slot. */
void pipe_batch_from_slot(const pipe_s *p, const dfl_slot *in, int32_t *ids, int32_t *mask, int32_t *anc,
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

void *pipe_loader_main(void *arg) {
  dev_s *d = arg;
  pipe_s *p = d->p;
  int *rows = malloc(sizeof(int) * (size_t)p->b);
  if (!rows) {
    pipe_fail(p, "loader", DFL_ENOMEM);
    return NULL;
  }
  p->snaps[0] = p->ld;
  size_t R = (size_t)p->b * p->S, RA = (size_t)p->b * p->NA;
  for (int64_t k = 0; k < p->total; k++) {
    /* another process's slice: drawn all the same (the RNG and the cursor walk every slice) */
    int64_t ls = local_seq(p, k);
    int mine = ls >= 0;
    dfl_slot *sl = mine ? pipe_wait_slot(p, d, &p->pre, ls, 1) : NULL;
    if (mine && !sl) {
      d->rc = DFL_ERR;
      break;
    }
    void *f_ids = mine ? sl->field[F_IDS] : p->skip, *f_mask = mine ? sl->field[F_MASK] : p->skip + R;
    void *f_anc = mine ? sl->field[F_ANCHORS] : p->skip + 2 * R, *f_keep = mine ? sl->field[F_KEEP] : p->skip + 2 * R + RA;
    pipe_sleep_ms(p->fault_loader);
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
  if (d->rc) pipe_fail(p, "loader", d->rc);
  return NULL;
}

/* --- target devices --- */

void *pipe_target_main(void *arg) {
  dev_s *d = arg;
  pipe_s *p = d->p;
  if ((d->rc = pipe_thread_start(d))) {
    pipe_fail(p, d->name, d->rc);
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
    dfl_slot *in = pipe_wait_slot(p, d, &p->pre, p->xproc ? h / p->M : k, 0);
    if (!in) {
      d->rc = DFL_ERR;
      break;
    }
    /* GPU: the ids go through the backend's pinned staging (double-buffered, async copy) */
    if (d->gpu && !(ids = dfl_be_input_i32(&d->be, d->t_ids))) {
      d->rc = DFL_ERR;
      break;
    }
    pipe_batch_from_slot(p, in, ids, mask, anc, keep);
    double tokens = in->tokens;
    if (dfl_queue_release(&p->pre, in)) {
      d->rc = DFL_ERR;
      break;
    }
    pipe_sleep_ms(d->fault_ms);
    if (pipe_injected_failure(d, (h - d->idx) / p->M)) {
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
    dfl_slot *out = pipe_wait_slot(p, d, &p->hq, h, 1);
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
  if (!d->rc && p->xproc)
    d->rc = pipe_nccl_wait_on(p, d, dfl_gsend_stream(d->gs), "the last sends to the drafter replicas");
#endif
  dfl_mon_set(&p->diag, d->diag_id, DFL_DS_IDLE);
  if (d->rc && p->procs > 1) dfl_nccl_abort(&p->coll);
  if (d->rc) pipe_fail(p, d->name, d->rc);
  return NULL;
}
