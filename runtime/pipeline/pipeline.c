/*
** pipeline.c: the multi-device runner (see pipeline.h): dfl_pipe_run checks the topology and the
** schedule, loads the data, makes the rings, the devices and the run directory, starts and joins
** the threads, then writes the final checkpoint and export. The threads: pipeline_feed.c (loader,
** targets) and pipeline_replica.c (drafter replicas); what they report: pipeline_report.c; each
** device's graph, plan and GPU, and the teardown: pipeline_setup.c; what they all call (the clock,
** the first failure, slot and NCCL waits): pipeline_base.c.
*/
#include "runtime/pipeline/pipeline_internal.h"
#include "runtime/compile.h"

int dfl_pipe_wants(const dfl_spec *s) {
  int n = 0;
  for (int i = 0; i < s->n_devices; i++) n += s->devices[i].runs_target || s->devices[i].runs_drafter;
  return n > 1;
}

/* Bytes between two device slots of the hidden-state queue (the compile entry point's, so that the
** plan holds what this run places). */
static int64_t qslot_stride(const pipe_s *p) { return dfl_compile_queue_stride(&p->s, p->b); }

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
  size_t fb[5] = {R * 4, R * 4, RA * 4, RA * 4, R * (size_t)dfl_spec_feature_blocks(s) * s->target.hidden * sizeof(float)};
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
  p->fault_loader = pipe_fault_for(fault, "loader", 0);

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
    d->fault_ms = pipe_fault_for(fault, is_target ? "target" : "drafter", d->idx);
    d->fail_at = pipe_fault_fail_at(fault, is_target ? "target" : "drafter", d->idx);
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
    if (p->dev[i].role == R_DRAFTER && (rc = pipe_resume_replica(&p->dev[i], resume))) goto out;
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
  if (!p->gpu && p->has_hq) { /* the host ring's slots hold the target's features as the drafter takes them */
    dev_s *cons = &p->dev[M + p->tp.drep[0]];
    int64_t tb = dfl_tensor_numel(&p->dev[0].g->t[p->dev[0].t_features]) * (int64_t)sizeof(float);
    int64_t db = dfl_tensor_numel(&cons->g->t[cons->tg.features]) * (int64_t)sizeof(float);
    if (tb != (int64_t)p->hq.field_bytes[F_FEATURES] || db != tb) {
      fprintf(stderr, "dflc: pipeline: target features (%lld bytes), the queue's slots (%lld) and the drafter's input "
              "(%lld) differ\n", (long long)tb, (long long)p->hq.field_bytes[F_FEATURES], (long long)db);
      rc = DFL_ESHAPE;
      goto out;
    }
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

  double t0 = pipe_now_s();
  p->t_run = t0;
  dfl_mon_report(&p->diag, 0, NULL, NULL, NULL, NULL, 0);   /* start the first interval now */
  int started = 0;
  if (pthread_create(&p->loader.th, NULL, pipe_loader_main, &p->loader) == 0) started = 1;
  for (int i = 0; i < p->n_dev && started == i + 1; i++) {
    dev_s *d = &p->dev[i];
    if (pthread_create(&d->th, NULL, d->role == R_TARGET ? pipe_target_main : pipe_drafter_main, d) == 0) started++;
  }
  if (started != p->n_dev + 1) {
    fprintf(stderr, "dflc: cannot start the device threads\n");
    pipe_fail(p, NULL, DFL_ERR);
  }
  if (started > 0) pthread_join(p->loader.th, NULL);
  for (int i = 0; i + 1 < started; i++) pthread_join(p->dev[i].th, NULL);
  p->res->seconds = pipe_now_s() - t0;
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
    if ((rc = pipe_checkpoint(p, r0, p->end))) goto out;
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
  if (rc == DFL_OK && eval_dir[0]) rc = pipe_final_eval(p, eval_dir, eval_phys);
  /* MPI_Finalize (when the bootstrap initialised MPI) only on success: it waits for every rank,
  ** and a failed rank must instead exit so that mpirun ends the job */
  if (p->procs > 1 && rc == DFL_OK) dfl_launch_finalize();
  pthread_mutex_destroy(&p->fail_mu);
  return rc;
}
