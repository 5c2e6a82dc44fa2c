/*
** train_overlap: the optimizer of step n enqueued beside the target forward of step n+1
** (runtime/train.c, compiler/sched.c) changes nothing but the schedule.
**   For accum 1 and 2: the same 7 steps pipelined as dfl_train_run does (enqueue n+1 before
**   collecting n) with the overlap off (compile { overlap = false }) and on; every step's loss, lr and gnorm
**   and every persistent tensor at the end must be identical bit for bit, with a checkpoint and an
**   evaluation in the middle of the overlapped run (both must flush the pending optimizer first:
**   the checkpoint's masters must be those of the sequential run at that step).
**   While pending, the optimizer has really not run yet (the masters are those of the step before).
**   The plan keeps the optimizer phase's per-step buffers live over the whole step.
**   dfl_sched_overlap_ok refuses a graph whose optimizer phase writes what the target reads, and
**   a graph without a target phase.
** Data is random (seed from the time, printed).
*/
#include <math.h>
#include <time.h>

#include "train_test.h"

#define N 7
#define CK_AT 3

typedef struct { double loss, lr, gnorm; } rec;

static int count_diff(dfl_trainer *tr, float **a, float **b) {
  int d = 0;
  for (int i = 0; i < tr->tg.g.nt; i++)
    if (a[i] && b[i] && memcmp(a[i], b[i], sizeof(float) * dfl_tensor_numel(&tr->tg.g.t[i]))) d++;
  return d;
}

static void snap_free(dfl_trainer *tr, float **s) {
  for (int i = 0; i < tr->tg.g.nt; i++) free(s[i]);
  free(s);
}

/* N steps, one always enqueued ahead of the one collected, as dfl_train_run. With ck, step CK_AT is
** a barrier (as a checkpoint step there); after collecting it: enqueue the next step, check that
** its optimizer is pending and has not run, then a checkpoint and an evaluation (both flush it). */
static int run(dfl_trainer *tr, rec *r, int ck, float ***mid) {
  dfl_step_stats st;
  int collected = 0;
  while (collected < N) {
    int barrier = ck && tr->step == CK_AT;
    if (tr->step < N && tr->n_pend < 2 && !(barrier && tr->n_pend > 0)) {
      if (dfl_train_enqueue(tr)) return 1;
      if (tr->n_pend < 2 && tr->step < N && !(ck && tr->step == CK_AT)) continue;
    }
    if (dfl_train_collect(tr, &st)) return 1;
    r[collected++] = (rec){st.loss, st.lr, st.gnorm};
    if (ck && st.step == CK_AT) {
      /* enqueue step CK_AT + 1 and look: its optimizer is pending, the masters are step CK_AT's */
      float **before = train_snapshot(tr);
      if (dfl_train_enqueue(tr)) return 1;
      CHECK(tr->overlap && tr->opt_pending, "step %d's optimizer is pending after its enqueue", CK_AT + 1);
      float **pend = train_snapshot(tr);
      int masters_moved = 0;
      for (int i = 0; i < tr->tg.g.nt; i++)
        if (tr->tg.g.t[i].kind == DFL_T_PARAM && memcmp(before[i], pend[i], sizeof(float) * dfl_tensor_numel(&tr->tg.g.t[i])))
          masters_moved++;
      CHECK(masters_moved == 0, "a pending optimizer has not touched the weights (%d moved)", masters_moved);
      snap_free(tr, pend);
      snap_free(tr, before);
      CHECK(dfl_train_checkpoint(tr) == DFL_OK, "checkpoint with a pending optimizer");
      CHECK(!tr->opt_pending, "the checkpoint flushed the optimizer");
      *mid = train_snapshot(tr);   /* = the sequential run's state after step CK_AT + 1 */
      dfl_eval_stats es;
      CHECK(dfl_train_evaluate(tr, &es) == DFL_OK && isfinite(es.loss), "evaluation mid-run");
    }
  }
  return 0;
}

int main(void) {
  uint64_t seed = (uint64_t)time(NULL);
  printf("train_overlap: seed %llu\n", (unsigned long long)seed);
  char dir[256], data[300], out[300];
  if (make_tmpdir(dir, sizeof dir, "overlap")) return 1;
  snprintf(data, sizeof data, "%s/train.jsonl", dir);
  snprintf(out, sizeof out, "%s/run", dir);
  dfl_rng r;
  dfl_rng_seed(&r, seed);
  if (write_random_jsonl(data, 11, &r, 8192)) return 1;
  dfl_trainer *tr = calloc(1, sizeof *tr);

  for (int accum = 1; accum <= 2; accum++) {
    dfl_spec s;
    if (small_spec(&s, data, data)) return 1;
    s.init_seed = seed;
    s.seed = seed * 31 + 7;
    s.accum = accum;
    s.steps = N + 1;
    dfl_train_opts o;
    memset(&o, 0, sizeof o);
    o.no_export = 1;
    o.quiet = 1;
    o.log = stdout;
    o.out_dir = out;
    rec ra[N], rb[N];

    /* A: sequential, and the reference state after step CK_AT + 1 */
    s.opt.no_overlap = 1;
    if (dfl_train_open(tr, &s, &o) != DFL_OK) { printf("FAIL: open A\n"); return 1; }
    CHECK(!tr->overlap, "compile { overlap = false } turns the overlap off");
    dfl_step_stats st;
    float **ref_mid = NULL;
    for (int i = 0; i < N; i++) {
      CHECK(dfl_train_step(tr, &st) == DFL_OK, "step %d of A", i + 1);
      ra[i] = (rec){st.loss, st.lr, st.gnorm};
      if (i + 1 == CK_AT + 1) ref_mid = train_snapshot(tr);
    }
    float **ref = train_snapshot(tr);
    dfl_train_close(tr);

    /* B: overlapped */
    s.opt.no_overlap = 0;
    if (dfl_train_open(tr, &s, &o) != DFL_OK) { printf("FAIL: open B\n"); return 1; }
    CHECK(tr->overlap, "the nano training graph overlaps its optimizer (accum %d)", accum);
    /* The CUDA backend's plan of this graph (it has per-step buffers in the optimizer phase: the
    ** grad-norm scratch; the CPU's has none): live over the whole step with the span, not without. */
    for (int span = 0; span <= 1; span++) {
      dfl_plan cp;
      int n_opt = 0, whole = 0;
      CHECK(dfl_be_plan(&cp, &tr->tg.g, DFL_BE_CUDA, 0, span ? 1u << DFL_PH_OPTIMIZER : 0, NULL) == DFL_OK,
            "CUDA plan, span %d", span);
      const dfl_graph *g = &tr->tg.g;
      for (int b = 0; b < cp.nbuf; b++) {
        int op = b >= cp.nt ? cp.ws[b - cp.nt].op : g->t[b].producer;
        if (cp.first[b] < 0 || op < 0 || g->ops[op].phase != DFL_PH_OPTIMIZER) continue;
        n_opt++;
        whole += cp.first[b] == 0 && cp.last[b] == g->nops - 1;
      }
      CHECK(n_opt > 0 && whole == (span ? n_opt : 0), "span %d: %d of the optimizer's %d per-step buffers live over "
            "the step", span, whole, n_opt);
      dfl_plan_free(&cp);
    }
    float **mid = NULL;
    CHECK(run(tr, rb, 1, &mid) == 0, "steps of B");
    float **got = train_snapshot(tr);
    for (int i = 0; i < N; i++)
      CHECK(ra[i].loss == rb[i].loss && ra[i].lr == rb[i].lr && ra[i].gnorm == rb[i].gnorm,
            "accum %d step %d: loss/lr/gnorm %.9g %.9g %.9g overlapped vs %.9g %.9g %.9g", accum, i + 1,
            rb[i].loss, rb[i].lr, rb[i].gnorm, ra[i].loss, ra[i].lr, ra[i].gnorm);
    int d_end = count_diff(tr, ref, got), d_mid = mid ? count_diff(tr, ref_mid, mid) : -1;
    CHECK(d_end == 0, "accum %d: %d persistent tensors differ at the end", accum, d_end);
    CHECK(d_mid == 0, "accum %d: %d persistent tensors differ at the mid-run checkpoint", accum, d_mid);
    printf("accum %d: %d steps, losses %.5f .. %.5f identical, end state identical\n", accum, N, rb[0].loss,
           rb[N - 1].loss);

    /* refusals: an optimizer-phase op writing what the target reads; no target phase */
    dfl_graph *gm = &tr->tg.g;
    int victim = -1;
    for (int i = 0; i < gm->nops && victim < 0; i++)
      if (gm->ops[i].phase == DFL_PH_TARGET && gm->ops[i].n_out > 0 && gm->t[gm->ops[i].out[0]].kind == DFL_T_ACT)
        victim = i;
    CHECK(victim >= 0 && dfl_sched_overlap_ok(gm), "a target op to move");
    if (victim >= 0) {
      gm->ops[victim].phase = DFL_PH_OPTIMIZER;
      CHECK(!dfl_sched_overlap_ok(gm), "refused: the optimizer phase writes what the target phase reads");
      gm->ops[victim].phase = DFL_PH_TARGET;
      int saved[4096], n = 0;
      for (int i = 0; i < gm->nops && n < 4096; i++)
        if (gm->ops[i].phase == DFL_PH_TARGET) { saved[n++] = i; gm->ops[i].phase = DFL_PH_FORWARD; }
      CHECK(!dfl_sched_overlap_ok(gm), "refused: no target phase");
      for (int i = 0; i < n; i++) gm->ops[saved[i]].phase = DFL_PH_TARGET;
    }
    snap_free(tr, got);
    snap_free(tr, ref);
    snap_free(tr, ref_mid);
    if (mid) snap_free(tr, mid);
    dfl_train_close(tr);
  }
  free(tr);
  if (failures) {
    printf("%d failures\n", failures);
    return 1;
  }
  printf("train_overlap: all passed\n");
  return 0;
}
