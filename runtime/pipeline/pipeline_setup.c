/*
** pipeline_setup.c: a pipeline run's devices made and unmade: each device's graph (target, drafter
** replica), plan and backend, the GPU topology and NCCL, the replicas' identity check, the teardown.
*/
#include "runtime/pipeline/pipeline_internal.h"
#include "runtime/compile.h"

/* The device's graph and plan, from the compile entry point (runtime/compile.c: what `dflc plan` shows):
** the spec with the run's whole batch (p->s holds one device's micro-batch), the queue's device slots as
** this run places them, and on a GPU device without a memory_budget its share of the card (the logical
** devices of one process share its GPU). */
static int compile_dev(pipe_s *p, dev_s *d) {
  dfl_spec *sc = malloc(sizeof *sc);
  if (!sc) return DFL_ENOMEM;
  *sc = p->s;
  sc->batch = p->G;
  int64_t mem = d->gpu ? dfl_be_cuda_memory() : 0;
  if (p->procs <= 1 && p->n_dev > 1) mem /= p->n_dev;
  dfl_compile_req req = {.queue_given = 1, .queue_bytes = d->gpu ? d->qslot_bytes : 0, .device_memory = mem};
  dfl_compiled c;
  int rc = dfl_compile_device(sc, (int)(d->spec_dev - p->s.devices), &req, &c);
  free(sc);
  if (rc != DFL_OK && !(rc == DFL_ERR && c.planned)) {
    fprintf(stderr, "dflc: %s: cannot build its graph\n", d->name);
    dfl_compiled_free(&c);
    return rc;
  }
  if (c.planned && !c.fits)
    fprintf(p->log, "warning: %s: the plan (%.2f GiB) does not fit the budget %.2f GiB\n", d->name,
            c.plan.arena_bytes / 1073741824.0, c.budget / 1073741824.0);
  if (c.planned && c.r.n_ops)
    fprintf(p->log, "note: %s: %d forward ops recomputed to fit the memory budget (+%.3g FLOP per micro-step)\n",
            d->name, c.r.n_ops, c.r.flops);
  if (d->role == R_TARGET) {
    d->t_ids = c.t_ids;
    d->t_features = c.t_features;
    dfl_compiled_take_target(&c, &d->tgt, &d->plan, &d->planned);
    d->g = &d->tgt;
  } else {
    dfl_compiled_take(&c, &d->tg, &d->plan, &d->planned);
    d->g = &d->tg.g;
  }
  return DFL_OK;
}

/* GPU device: its own CUDA backend on the graph (inputs staged through pinned memory). */
static int open_gpu(dev_s *d, const dfl_spec *s, const int *in, int n_in, int target) {
  int rc = dfl_be_open_cuda_dev(&d->be, d->g, d->planned ? &d->plan : NULL, in, n_in, &s->opt, d->phys);
  if (rc) {
    fprintf(stderr, "dflc: %s: cannot open the CUDA backend on CUDA device %d\n", d->name, d->phys);
    return rc;
  }
  d->be_open = 1;
  return dfl_be_load_weights(&d->be, s, target ? NULL : s->init_from);
}

static int open_cpu(dev_s *d) {
  int rc = dfl_cpu_init(&d->cpu, d->g, d->planned ? &d->plan : NULL, 0);
  if (rc) fprintf(stderr, "dflc: %s: cannot allocate the CPU backend state\n", d->name);
  return rc;
}

int64_t pipe_dev_bytes(const dev_s *d) {
  if (d->gpu) return d->be.arena_bytes;
  int64_t b = d->planned ? d->plan.arena_bytes : 0;
  if (!d->planned)
    for (int i = 0; i < d->g->nt; i++) b += (int64_t)dfl_tensor_numel(&d->g->t[i]) * (int64_t)dfl_cpu_elem_size(&d->g->t[i], 0);
  return b;
}

int pipe_setup_target(pipe_s *p, dev_s *d) {
  int rc = compile_dev(p, d); /* the target forward, its features live at the end (the queue copies them out) */
  if (rc) return rc;
  if (d->gpu) {
    if ((rc = open_gpu(d, &p->s, &d->t_ids, 1, 1))) return rc;
  } else {
    if ((rc = open_cpu(d))) return rc;
    if ((rc = dfl_weights_load_spec(&p->s, &d->cpu, NULL))) return rc;
  }
  d->stage = malloc(sizeof(int32_t) * ((size_t)p->b * p->S + 2 * (size_t)p->b * p->NA));
  return d->stage ? DFL_OK : DFL_ENOMEM;
}

int pipe_setup_drafter(pipe_s *p, dev_s *d) {
  int rc = compile_dev(p, d); /* the drafter step (with the target where colocated) */
  if (rc) return rc;
  if (d->gpu) {
    int in[4] = {d->tg.ids, d->tg.loss_mask, d->tg.anchors, d->tg.keep};
    if ((rc = open_gpu(d, &p->s, in, 4, 0))) return rc;
  } else {
    if ((rc = open_cpu(d))) return rc;
    if ((rc = dfl_weights_load_spec(&p->s, &d->cpu, p->s.init_from))) return rc;
  }
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
  d->dsegs = calloc((size_t)n + 5, sizeof *d->dsegs);
  d->seg_len = calloc((size_t)n + 5, sizeof *d->seg_len);
  if (!d->segs || !d->dsegs || !d->seg_len) return DFL_ENOMEM;
  /* on a GPU the segments are device pointers (all fp32: accumulators and sums are F32) */
  for (int i = 0; i < g->nt; i++) {
    if (g->t[i].kind != DFL_T_PARAM || g->t[i].grad_acc < 0) continue;
    int t = g->t[i].grad_acc;
    if (!d->gpu) d->segs[d->n_segs] = dfl_cpu_f32(&d->cpu, t);
#ifdef DFL_HAVE_CUDA
    else d->dsegs[d->n_segs] = dfl_gpu_ptr(&d->be, t);
#endif
    d->seg_len[d->n_segs++] = (size_t)dfl_tensor_numel(&g->t[t]);
  }
  int extra[4] = {d->den_acc, d->tg.loss_num_acc, d->tg.loss_den_acc, d->tg.metrics_acc};
  for (int i = 0; i < 4; i++) {
    if (!d->gpu) d->segs[d->n_segs] = dfl_cpu_f32(&d->cpu, extra[i]);
#ifdef DFL_HAVE_CUDA
    else d->dsegs[d->n_segs] = dfl_gpu_ptr(&d->be, extra[i]);
#endif
    d->seg_len[d->n_segs++] = (size_t)dfl_tensor_numel(&g->t[extra[i]]);
  }
#ifdef DFL_HAVE_CUDA
  if (d->gpu && (p->procs > 1 || p->nccl_local)) {
    if (dfl_gpu_set_device(d->phys) || !(d->tok_dev = dfl_gpu_floats(1))) return DFL_ENOMEM;
    d->dsegs[d->n_segs] = d->tok_dev;
  }
  if (d->gpu && p->procs > 1 && !p->xproc) {
    char err[256];
    /* ncclCommInitRank blocks until every rank has joined: one communicator per process */
    rc = dfl_nccl_init_rank(&p->coll, 0, 1, p->nccl_id, p->procs, p->rank, dfl_gpu_stream(&d->be), err, sizeof err);
    if (rc) {
      fprintf(stderr, "dflc: %s: %s\n", d->name, err);
      return rc;
    }
  }
#endif
  d->seg_len[d->n_segs++] = 1;   /* tokens: pointer set by the thread (host), tok_dev (NCCL) */
  return DFL_OK;
}

/* FNV-1a over a replica's params, masters and moments (a pulled copy on a GPU). */
static uint64_t state_hash(dev_s *d, int *ok) {
  dfl_cpu sh, *h = pipe_host_view(d, MODEL_KINDS, &sh);
  uint64_t x = 1469598103934665603ull;
  *ok = h != NULL;
  for (int i = 0; h && i < d->g->nt; i++) {
    const dfl_tensor *t = &d->g->t[i];
    if (t->kind == DFL_T_PARAM || t->kind == DFL_T_STATE)
      x = dfl_queue_hash(h->buf[i], (size_t)dfl_tensor_numel(t) * dfl_cpu_elem_size(t, 0), x);
  }
  pipe_host_view_done(d, h);
  return x;
}

/* One process per GPU: every rank's state hash reaches every rank through one NCCL all-reduce
** (rank r fills its four 16-bit pieces, exact in fp32, zeros elsewhere); equal to rank 0's? */
static int replicas_identical_procs(pipe_s *p, dev_s *d) {
#ifdef DFL_HAVE_CUDA
  int ok, W = p->N, me = d->idx;   /* the replicas' communicator: replica j is its rank j */
  uint64_t x = state_hash(d, &ok);
  float *h = calloc((size_t)W * 4, sizeof(float)), *dv = dfl_gpu_floats((int64_t)W * 4);
  void *st = dfl_gpu_stream(&d->be);
  char err[256];
  int same = ok && h && dv;
  for (int i = 0; same && i < 4; i++) h[me * 4 + i] = (float)((x >> (16 * i)) & 0xffff);
  size_t len = (size_t)W * 4;
  if (same && (dfl_gpu_h2d(dv, h, W * 4, st) ||
               dfl_nccl_allreduce(&p->coll, pipe_nccl_local_of(p, d), &dv, &len, 1, err, sizeof err) ||
               pipe_nccl_wait(p, d, "the replica hash exchange") || dfl_gpu_d2h_sync(h, dv, W * 4, st)))
    same = 0;
  for (int r = 1; same && r < W; r++)
    if (memcmp(h + 4 * r, h, 4 * sizeof(float))) {
      fprintf(stderr, "dflc: replica %d (process rank %d) differs from replica 0\n", r, p->tp.rdev[r]);
      same = 0;
    }
  free(h);
  dfl_gpu_free(dv);
  return same;
#else
  (void)p, (void)d;
  return 0;
#endif
}

/* Are all replicas' persistent drafter tensors bit-identical to replica 0's? */
int pipe_replicas_identical(pipe_s *p) {
  dev_s *r0 = p->rep0;
  if (!r0) return 1;   /* a target-only process: the replicas' processes check */
  if (p->procs > 1) return replicas_identical_procs(p, r0);
  if (r0->gpu) {   /* GPU replicas of this process: their pulled states' hashes */
    int ok;
    uint64_t x0 = state_hash(r0, &ok);
    for (int j = 1; ok && j < p->N; j++) {
      uint64_t x = state_hash(r0 + j, &ok);
      if (ok && x != x0) {
        fprintf(stderr, "dflc: replica %d (%s) differs from replica 0 (%s)\n", j, r0[j].name, r0->name);
        return 0;
      }
    }
    return ok;
  }
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

void pipe_spec_name(const char *file, char *out, size_t n) {
  const char *b = strrchr(file, '/');
  if (snprintf(out, n, "%s", b ? b + 1 : file) >= (int)n) out[n - 1] = 0;
  char *dot = strrchr(out, '.');
  if (dot && dot != out) *dot = 0;
}

/* GPU devices: which process drives which GPU. In one process every logical GPU device runs on
** the process's current GPU (each with its own backend, arena and stream): DFL_GPU_MAP (a comma
** list, physical GPU of logical gpu0, gpu1, ...) may only map them all to one GPU. With one
** process per replica (torchrun / mpirun / srun environment, runtime/launch.h) the process of
** local rank r uses the GPU DFL_GPU_MAP gives its device (default: r) through
** CUDA_VISIBLE_DEVICES, set here before the first CUDA call unless the launcher set it. */
int pipe_gpu_topology(pipe_s *p, int n_rep) {
  p->procs = 1;
  if (!p->gpu) return DFL_OK;
#ifndef DFL_HAVE_CUDA
  (void)n_rep;
  fprintf(stderr, "%s: GPU devices, but this dflc was built without the CUDA toolkit\n", p->s.file);
  return DFL_EFORMAT;
#else
  dfl_launch l;
  char err[256];
  if (dfl_launch_detect(&l, NULL, NULL, err, sizeof err)) {
    fprintf(stderr, "dflc: %s\n", err);
    return DFL_EFORMAT;
  }
  p->procs = l.world;
  p->rank = l.rank;
  const char *to = getenv("DFL_NCCL_TIMEOUT_S");
  p->nccl_timeout = to && atof(to) > 0 ? atof(to) : 300;
  int *map = p->gpu_map, n_map = 0;
  const char *m = getenv("DFL_GPU_MAP");
  for (const char *q = m; q && *q && n_map < 64;) {
    char *e;
    long v = strtol(q, &e, 10);
    if (e == q || v < 0 || (*e && *e != ',')) {
      fprintf(stderr, "dflc: DFL_GPU_MAP=%s: expected GPU numbers separated by commas, e.g. 0,0\n", m);
      return DFL_EFORMAT;
    }
    map[n_map++] = (int)v;
    q = *e ? e + 1 : e;
  }
  p->n_map = n_map;
  /* one process: each logical device opens its own CUDA device (pipe_gpu_device); several per process */
  if (p->procs > 1 && !getenv("CUDA_VISIBLE_DEVICES")) {
    char v[16];
    snprintf(v, sizeof v, "%d", l.local_rank < n_map ? map[l.local_rank] : l.local_rank);
    setenv("CUDA_VISIBLE_DEVICES", v, 1);
  }
  if (!dfl_be_cuda_available()) {
    fprintf(stderr, "%s: the topology puts devices on GPUs, but no CUDA device is usable here (CUDA_VISIBLE_DEVICES=%s)"
            "; `dflc train --cpu` runs them as CPU threads\n", p->s.file,
            getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "unset");
    return DFL_EFORMAT;
  }
  (void)n_rep;
  p->n_cuda = dfl_gpu_count();
  return DFL_OK;
#endif
}

/* CUDA device of logical GPU device gpuN in this process: DFL_GPU_MAP's entry N; else N when the
** process sees that many GPUs, else 0 (said once). One process per replica: its one visible GPU. */
int pipe_gpu_device(pipe_s *p, const dfl_device *dv, int *dev) {
  if (p->procs > 1) {
    *dev = 0;
    return DFL_OK;
  }
  int n = dv->index;
  *dev = n < p->n_map ? p->gpu_map[n] : n < p->n_cuda ? n : 0;
  if (n >= p->n_map && n >= p->n_cuda && !p->o.quiet)
    fprintf(stderr, "dflc: note: gpu%d runs on CUDA device 0 (this process sees %d GPU%s; DFL_GPU_MAP chooses)\n",
            n, p->n_cuda, p->n_cuda == 1 ? "" : "s");
  if (*dev >= p->n_cuda) {
    fprintf(stderr, "dflc: DFL_GPU_MAP puts gpu%d on CUDA device %d, but this process sees %d GPU%s "
            "(CUDA_VISIBLE_DEVICES=%s)\n", n, *dev, p->n_cuda, p->n_cuda == 1 ? "" : "s",
            getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "unset");
    return DFL_EFORMAT;
  }
  return DFL_OK;
}

/* One process per GPU: NCCL loaded, the unique id from rank 0 to every rank (launch.h). */
int pipe_nccl_setup(pipe_s *p) {
  char err[512];
  int rc = dfl_nccl_load(&p->coll, err, sizeof err);
  if (!rc && p->rank == 0) rc = dfl_nccl_unique_id(&p->coll, p->nccl_id, err, sizeof err);
  if (!rc) {
    dfl_launch l;
    if (!(rc = dfl_launch_detect(&l, NULL, NULL, err, sizeof err)))
      rc = dfl_launch_bcast(&l, p->nccl_id, sizeof p->nccl_id, 120000, err, sizeof err);
  }
  if (rc) fprintf(stderr, "dflc: NCCL setup (rank %d of %d): %s\n", p->rank, p->procs, err);
  return rc;
}

void pipe_teardown(pipe_s *p) {
  for (int i = 0; i < p->n_dev; i++) {
    dev_s *d = &p->dev[i];
    if (d->be_open) dfl_be_close(&d->be);
#ifdef DFL_HAVE_CUDA
    dfl_gpu_free(d->tok_dev);
    dfl_gsend_free(d->gs);
#endif
    free(d->dsegs);
    if (d->cpu.g) dfl_cpu_free(&d->cpu);
    if (d->planned) dfl_plan_free(&d->plan);
    if (d->g) dfl_graph_free(d->g);
    free(d->segs);
    free(d->seg_len);
    free(d->stage);
  }
  free(p->dev);
#ifdef DFL_HAVE_CUDA
  if (p->gq) dfl_gq_free(p->gq);
#endif
  free(p->skip);
  if (p->pre.slots) dfl_queue_free(&p->pre);
  if (p->has_hq) dfl_queue_free(&p->hq);
  if (p->coll.seg_ptr) dfl_coll_free(&p->coll);
  dfl_data_free(&p->train);
  free(p->order);
  free(p->snaps);
  if (p->mjsonl) fclose(p->mjsonl);
}

