/*
** bench_ops.c: `dflc bench` running a step's ops outside its graphs (bench_ops.h).
**
** --ops / --gemms: every op timed alone, per (phase, op kind) and per GEMM shape.
**
** --floor: the step's compute alone at the board's power. An H200 runs the training step at its
** 700 W cap, where a step's time is its energy over the cap (docs/journal/2026-11-performance.md, session 8): what
** bounds the step is then not the GEMMs' rate in a short burst (784-814 TFLOP/s) but their rate at
** the cap. The floor runs only the step's GEMMs and loss head (LINEAR_CE: its two vocabulary GEMMs
** and the row-wise cross-entropy between them), then those and the attention kernels, back to back
** for seconds, and reads the board's energy over them. What a step spends beyond that is its
** memory-bound work and the optimizer.
** The plan lets tensors that are never live at once share bytes: run without the ops between them,
** a GEMM would read what another op of the pass wrote over its input (the CPU backend stopped on
** the loss head's labels so overwritten; the GPU would have indexed with them). So the passes run
** on a private copy of every per-step tensor and scratch (dfl_cuda_unshared / dfl_cpu_unshared:
** 32 GiB more for the 8B step), filled by one eager step: every op of a pass reads what it reads
** in a step. The outputs are read back afterwards; values gone to inf or NaN would draw another
** power, and the line would say so.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/cli/bench_ops.h"
#ifdef DFL_HAVE_CUDA
#include <cuda_runtime.h>
#include "runtime/cuda/cuda.h"
#endif

const char *const dfl_bench_phase_name[DFL_PH_COUNT] = {"target forward", "drafter forward", "loss", "backward",
                                                        "optimizer"};

double dfl_bench_clock(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* --ops: every op of one step run on its own and timed, summed per (phase, op kind), with FLOPs
** and the bytes of the op's tensors (each input read once, each output written once: a lower bound
** on its traffic) against the measured ceilings. Printed largest first. On the GPU each op is
** launched alone between CUDA events (no graph: launch gaps are not counted, since an event pair
** brackets only the op's own kernels); on the CPU backend a host clock brackets each op. The
** step is a real one (the optimizer updates the weights), as every timing run here. */
typedef struct { int ph, code, n; double ms, fl, by; } prof_row;
static int prof_cmp(const void *a, const void *b) {
  double x = ((const prof_row *)a)->ms, y = ((const prof_row *)b)->ms;
  return (x < y) - (x > y);
}
/* Op i of the step, launched (GPU) or run (CPU) alone; the first op of a multi-tensor optimizer group
** or of a pointwise fusion group (compiler/lower.h) launches the whole group, as the step's graphs do. */
static int run_op_be(dfl_backend *be, int i) {
#ifdef DFL_HAVE_CUDA
  dfl_cuda *c = dfl_be_cuda_state(be);
  if (c) return dfl_cuda_run_op_grouped(c, i);
#endif
  return be->cpu ? dfl_cpu_run_op(be->cpu, i) : DFL_ERR;
}
static int run_op(dfl_trainer *tr, int i) { return run_op_be(&tr->be, i); }

/* ms[i] += the mean time of op i over reps steps (after one warm-up step). */
static int time_ops(dfl_backend *be, const dfl_graph *g, int reps, double *ms, const char **how) {
  int rc = DFL_OK;
#ifdef DFL_HAVE_CUDA
  dfl_cuda *c = dfl_be_cuda_state(be);
  if (c) {
    *how = "each op launched alone between CUDA events; a multi-tensor optimizer group or a pointwise fusion group as "
           "one launch, timed on its first op";
    cudaStream_t st = (cudaStream_t)dfl_cuda_stream(c);
    cudaEvent_t *ev = malloc(sizeof(cudaEvent_t) * (size_t)(g->nops + 1));
    int nev = 0;
    if (!ev) return DFL_ENOMEM;
    for (; rc == DFL_OK && nev <= g->nops; nev++)
      if (cudaEventCreate(&ev[nev]) != cudaSuccess) rc = DFL_ERR;
    for (int r = 0; r <= reps && rc == DFL_OK; r++) { /* r = 0: warm-up, not counted */
      cudaEventRecord(ev[0], st);
      for (int i = 0; i < g->nops && rc == DFL_OK; i++) {
        rc = run_op_be(be, i); /* the optimizer's kernels as the step runs them */
        cudaEventRecord(ev[i + 1], st);
      }
      if (rc == DFL_OK && cudaStreamSynchronize(st) != cudaSuccess) rc = DFL_ERR;
      for (int i = 0; i < g->nops && rc == DFL_OK && r > 0; i++) {
        float t = 0;
        cudaEventElapsedTime(&t, ev[i], ev[i + 1]);
        ms[i] += t / reps;
      }
    }
    for (int i = 0; i < nev; i++) cudaEventDestroy(ev[i]);
    free(ev);
    return rc;
  }
#endif
  if (!be->cpu) return DFL_ERR;
  *how = "each op run alone, host clock";
  for (int r = 0; r <= reps && rc == DFL_OK; r++)
    for (int i = 0; i < g->nops && rc == DFL_OK; i++) {
      double t0 = dfl_bench_clock();
      rc = run_op_be(be, i);
      if (r > 0) ms[i] += 1e3 * (dfl_bench_clock() - t0) / reps;
    }
  return rc;
}
/* --gemms: the GEMM rows of --ops split by shape, so a slow GEMM is named: (phase, M x N x K,
** op(A) op(B) as N/T, output dtype, "+acc" for the accumulating or addend form). */
typedef struct { int ph, m, n, k, ta, tb, acc, dt, cnt; double ms, fl; } gemm_row;
static int gemm_cmp(const void *a, const void *b) {
  double x = ((const gemm_row *)a)->ms, y = ((const gemm_row *)b)->ms;
  return (x < y) - (x > y);
}
static void gemm_table(const dfl_graph *g, const double *ms) {
  gemm_row *r = calloc((size_t)g->nops + 1, sizeof *r);
  int nr = 0;
  if (!r) return;
  for (int i = 0; i < g->nops; i++) {
    const dfl_op *op = &g->ops[i];
    if (op->code != DFL_OP_MATMUL && op->code != DFL_OP_MATMUL_F8) continue;
    const dfl_tensor *A = &g->t[op->in[0]], *C = &g->t[op->out[0]];
    int f8 = op->code == DFL_OP_MATMUL_F8, ta = f8 ? 0 : op->a.trans_a, tb = f8 ? 1 : op->a.trans_b;
    gemm_row x = {(int)op->phase, (int)C->shape[0], (int)C->shape[1], (int)(ta ? A->shape[0] : A->shape[1]), ta, tb,
                  !f8 && op->a.beta != 0, (int)C->dtype, 0, 0, 0};
    int k = 0;
    while (k < nr && (r[k].ph != x.ph || r[k].m != x.m || r[k].n != x.n || r[k].k != x.k || r[k].ta != x.ta ||
                      r[k].tb != x.tb || r[k].acc != x.acc || r[k].dt != x.dt))
      k++;
    if (k == nr) r[nr++] = x;
    r[k].cnt++; r[k].ms += ms[i]; r[k].fl += dfl_op_flops(g, op);
  }
  qsort(r, (size_t)nr, sizeof *r, gemm_cmp);
  printf("GEMMs by shape (C[M,N] = op(A)[M,K] op(B)[K,N]; N: as stored, T: transposed):\n");
  printf("  %-16s %7s %7s %7s %-3s %-5s %4s %5s %9s %9s\n", "phase", "M", "N", "K", "op", "out", "acc", "count", "ms",
         "TFLOP/s");
  for (int k = 0; k < nr; k++)
    printf("  %-16s %7d %7d %7d %c%c  %-5s %4s %5d %9.3f %9.1f\n", dfl_bench_phase_name[r[k].ph], r[k].m, r[k].n, r[k].k,
           r[k].ta ? 'T' : 'N', r[k].tb ? 'T' : 'N', dfl_dtype_name((dfl_dtype)r[k].dt), r[k].acc ? "+acc" : "", r[k].cnt,
           r[k].ms, r[k].ms > 0 ? r[k].fl / (r[k].ms * 1e-3) / 1e12 : 0);
  free(r);
}
int dfl_bench_op_profile(dfl_trainer *tr, int reps, int gemms) { return dfl_bench_op_profile_be(&tr->be, &tr->tg.g, reps, gemms); }

int dfl_bench_op_profile_be(dfl_backend *be, const dfl_graph *g, int reps, int gemms) {
  double *ms = calloc((size_t)g->nops + 1, sizeof(double));
  prof_row *rows = calloc((size_t)g->nops + 1, sizeof(prof_row));
  const char *how = "";
  int rc = ms && rows ? time_ops(be, g, reps, ms, &how) : DFL_ENOMEM, nr = 0;
  double total = 0;
  for (int i = 0; i < g->nops && rc == DFL_OK; i++) {
    const dfl_op *op = &g->ops[i];
    int k = 0;
    while (k < nr && (rows[k].ph != (int)op->phase || rows[k].code != (int)op->code)) k++;
    if (k == nr) rows[nr++] = (prof_row){(int)op->phase, (int)op->code, 0, 0, 0, 0};
    double by = 0;
    for (int j = 0; j < op->n_in; j++) by += (double)dfl_tensor_bytes(&g->t[op->in[j]]);
    for (int j = 0; j < op->n_out; j++) by += (double)dfl_tensor_bytes(&g->t[op->out[j]]);
    rows[k].n++; rows[k].ms += ms[i]; rows[k].fl += dfl_op_flops(g, op); rows[k].by += by;
    total += ms[i];
  }
  if (rc == DFL_OK) {
    qsort(rows, (size_t)nr, sizeof *rows, prof_cmp);
#ifdef DFL_HAVE_CUDA
    char gpu[512]; /* the kernels behind the times: which family each op got on this GPU (docs/gpus.md) */
    if (be->kind == DFL_BE_CUDA && dfl_cuda_describe_device(gpu, sizeof gpu) == DFL_OK) printf("%s\n", gpu);
#endif
    printf("ops (%s, mean of %d steps; %.2f ms in all):\n", how, reps, total);
    printf("  %-16s %-16s %5s %9s %6s %9s %9s\n", "phase", "op", "count", "ms", "share", "TFLOP/s", "GB/s(min)");
    for (int k = 0; k < nr; k++)
      printf("  %-16s %-16s %5d %9.3f %5.1f%% %9.3f %9.1f\n", dfl_bench_phase_name[rows[k].ph], dfl_opcode_name((dfl_opcode)rows[k].code),
             rows[k].n, rows[k].ms, total > 0 ? 100 * rows[k].ms / total : 0,
             rows[k].ms > 0 ? rows[k].fl / (rows[k].ms * 1e-3) / 1e12 : 0,
             rows[k].ms > 0 ? rows[k].by / (rows[k].ms * 1e-3) / 1e9 : 0);
  }
  if (rc == DFL_OK && gemms) gemm_table(g, ms);
  free(ms); free(rows);
  return rc;
}

/* --floor: `passes` passes over the ops idx[0..n), then a sync */
static int floor_passes(dfl_trainer *tr, const int *idx, int n, int passes) {
  int rc = DFL_OK;
  for (int p = 0; p < passes && rc == DFL_OK; p++)
    for (int k = 0; k < n && rc == DFL_OK; k++) rc = run_op(tr, idx[k]);
  return rc == DFL_OK ? dfl_be_sync(&tr->be) : rc;
}

/* Adds the first values of tensor t (up to 4096) to f->sampled, and those not finite to f->nonfinite. */
static int floor_sample(dfl_trainer *tr, int t, dfl_bench_floor *f) {
  enum { SAMPLE = 4096 };
  const dfl_tensor *x = &tr->tg.g.t[t];
  int64_t m = dfl_tensor_numel(x);
  if (m > SAMPLE) m = SAMPLE;
#ifdef DFL_HAVE_CUDA
  dfl_cuda *c = dfl_be_cuda_state(&tr->be);
  if (c) { /* the raw bytes: the backend's copies take whole tensors */
    unsigned char b[SAMPLE * 4];
    size_t es = dfl_dtype_size(x->dtype);
    if (es > 4 || cudaMemcpy(b, c->ptr[t], (size_t)m * es, cudaMemcpyDeviceToHost) != cudaSuccess) return DFL_ERR;
    for (int64_t j = 0; j < m; j++) {
      const unsigned char *e = b + j * es;
      uint32_t u = 0;
      memcpy(&u, e, es);
      switch (x->dtype) {
      case DFL_F32: f->nonfinite += (u >> 23 & 0xff) == 0xff; break;
      case DFL_BF16: f->nonfinite += (u >> 7 & 0xff) == 0xff; break;
      case DFL_F16: f->nonfinite += (u >> 10 & 0x1f) == 0x1f; break;
      case DFL_F8E4M3: f->nonfinite += (u & 0x7f) == 0x7f; break;
      default: break; /* integers */
      }
    }
    f->sampled += m;
    return DFL_OK;
  }
#endif
  float v[SAMPLE];
  if (!tr->be.cpu) return DFL_ERR;
  dfl_cpu_get_f(tr->be.cpu, t, v, m);
  for (int64_t j = 0; j < m; j++) f->nonfinite += !isfinite(v[j]);
  f->sampled += m;
  return DFL_OK;
}

/* The pass's ops on private bytes (on = 1), after one eager step that fills them; back (on = 0). */
static int floor_unshared(dfl_trainer *tr, int on) {
  const dfl_plan *p = tr->planned ? &tr->plan : NULL;
#ifdef DFL_HAVE_CUDA
  dfl_cuda *c = dfl_be_cuda_state(&tr->be);
  if (c) {
    int rc = dfl_cuda_unshared(c, p, on);
    if (rc == DFL_OK && on) rc = dfl_cuda_run_eager(c, DFL_PH_ALL);
    return rc == DFL_OK ? dfl_cuda_sync(c) : rc;
  }
#endif
  if (!tr->be.cpu) return DFL_ERR;
  int rc = dfl_cpu_unshared(tr->be.cpu, p, on);
  return rc == DFL_OK && on ? dfl_cpu_run(tr->be.cpu, DFL_PH_ALL) : rc;
}

int dfl_bench_floor_run(dfl_trainer *tr, int with_attention, dfl_power *pw, dfl_bench_floor *f) {
  const dfl_graph *g = &tr->tg.g;
  const int gpu = tr->be.kind == DFL_BE_CUDA, accum = tr->spec.accum;
  /* on a GPU: 2 s of passes to bring the board to its steady power, then about 3 s timed; the CPU
  ** backend (tests, small specs) has no power state to reach: one pass, then two */
  const double warm_s = gpu ? 2.0 : 0, timed_s = gpu ? 3.0 : 0;
  memset(f, 0, sizeof *f);
  f->ms = f->joules = f->watts = -1;
  int *idx = malloc(sizeof(int) * (size_t)(g->nops + 1)), n = 0;
  if (!idx) return DFL_ENOMEM;
  for (int i = 0; i < g->nops; i++) {
    dfl_opcode k = g->ops[i].code;
    if (k == DFL_OP_MATMUL || k == DFL_OP_MATMUL_F8 || k == DFL_OP_LINEAR_CE ||
        (with_attention && (k == DFL_OP_ATTENTION || k == DFL_OP_ATTENTION_BWD))) {
      idx[n++] = i;
      f->tflop += dfl_op_flops(g, &g->ops[i]) * accum / 1e12;
    }
  }
  f->nops = n;
  int rc = floor_unshared(tr, 1);
  /* warm-up: one pass alone gives its length, then enough of them to fill warm_s */
  double t = dfl_bench_clock();
  if (rc == DFL_OK) rc = floor_passes(tr, idx, n, 1);
  double one = dfl_bench_clock() - t;
  if (rc == DFL_OK && one < warm_s) rc = floor_passes(tr, idx, n, (int)ceil((warm_s - one) / (one > 1e-6 ? one : 1e-6)));
  f->warm_s = dfl_bench_clock() - t;
  int timed = one > 0 && timed_s / one > 2 ? (int)ceil(timed_s / one) : 2;
  dfl_power_sample e0, em, e1;
  int pw_ok = gpu && pw && pw->lib && rc == DFL_OK && dfl_power_read(pw, &e0) == DFL_OK;
  t = dfl_bench_clock();
  /* all but the last pass, then the clock and its limits while the board is still at load */
  if (rc == DFL_OK) rc = floor_passes(tr, idx, n, timed - 1);
  if (pw_ok) pw_ok = dfl_power_read(pw, &em) == DFL_OK;
  if (rc == DFL_OK) rc = floor_passes(tr, idx, n, 1);
  double dt = dfl_bench_clock() - t;
  if (pw_ok) pw_ok = dfl_power_read(pw, &e1) == DFL_OK;
  if (rc == DFL_OK) {
    f->passes = timed;
    f->ms = 1e3 * dt / timed * accum;
  }
  if (rc == DFL_OK && pw_ok) {
    f->joules = (double)(e1.energy_mj - e0.energy_mj) * 1e-3 / timed * accum;
    f->watts = (double)(e1.energy_mj - e0.energy_mj) * 1e-3 / dt;
    f->sm_mhz = em.sm_mhz;
    f->limit_mw = em.limit_mw;
    f->reasons = em.reasons;
  }
  /* what the passes left in their outputs: a sample of each op's first output */
  for (int k = 0; k < n && rc == DFL_OK; k++) rc = floor_sample(tr, g->ops[idx[k]].out[0], f);
  free(idx);
  int rc2 = floor_unshared(tr, 0);
  return rc ? rc : rc2;
}
