/*
** test_place.c: the placement on random interval sets, and the checker on broken plans.
**
** Random schedules are built straight into the graph's op array (the planner reads only the op
** list and the tensors; op contracts do not matter to it): each op reads a few live tensors and
** writes one or two new ones of random sizes; some ops are ADD/SCALE of equal shapes so that the
** in-place rule is exercised. Every plan must pass the checker, and greedy-by-size best fit must
** stay close to the max-live lower bound. Then deliberately broken plans must make it fire.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "compiler/plan.h"
#include "compiler/status.h"

static int failures;
#include "tests/common/check.h"

static uint64_t rng_state;
static uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static int rint_(int n) { return (int)(rnd() % (uint64_t)n); }

static void raw_op(dfl_graph *g, dfl_opcode code, const int *in, int n_in, const int *out, int n_out) {
  if (g->nops == g->cap_ops) {
    g->cap_ops = g->cap_ops ? 2 * g->cap_ops : 64;
    g->ops = realloc(g->ops, sizeof *g->ops * g->cap_ops);
  }
  dfl_op *op = &g->ops[g->nops];
  memset(op, 0, sizeof *op);
  op->code = code; op->n_in = n_in; op->n_out = n_out;
  memcpy(op->in, in, sizeof(int) * n_in);
  memcpy(op->out, out, sizeof(int) * n_out);
  snprintf(op->label, sizeof op->label, "op%d", g->nops);
  for (int k = 0; k < n_out; k++)
    if (g->t[out[k]].producer < 0) g->t[out[k]].producer = g->nops;
  g->nops++;
}

/* A random schedule of n ops; window bounds how far back an op reads (short and long lives). */
static void random_graph(dfl_graph *g, int n, int window) {
  dfl_graph_init(g);
  int64_t sh[2];
  int w = dfl_tensor_1d(g, "w", DFL_F32, DFL_T_PARAM, 1000);
  int first = g->nt;
  sh[0] = 1 + rint_(64); sh[1] = 1 + rint_(4096);
  int x0 = dfl_tensor_new(g, "act0", DFL_F32, DFL_T_ACT, 2, sh);
  raw_op(g, DFL_OP_COPY, &w, 1, &x0, 1);
  for (int i = 1; i < n; i++) {
    int live_lo = g->nt - window > first ? g->nt - window : first;
    int nin = 1 + rint_(3), in[4], out[2], nout = 1 + (rint_(4) == 0);
    for (int k = 0; k < nin; k++) in[k] = live_lo + rint_(g->nt - live_lo);
    char nm[32];
    dfl_opcode code = DFL_OP_MATMUL;
    if (rint_(3) == 0) { /* elementwise: same shape as its first input, one output */
      code = rint_(2) ? DFL_OP_ADD : DFL_OP_SCALE;
      nout = 1;
      if (code == DFL_OP_SCALE) nin = 1;
      else { nin = 2; in[1] = in[0]; }
      snprintf(nm, sizeof nm, "act%d", g->nt);
      out[0] = dfl_tensor_new(g, nm, DFL_F32, DFL_T_ACT, g->t[in[0]].ndim, g->t[in[0]].shape);
    } else {
      for (int k = 0; k < nout; k++) {
        sh[0] = 1 + rint_(64); sh[1] = 1 + rint_(rint_(8) == 0 ? 65536 : 4096);
        snprintf(nm, sizeof nm, "act%d", g->nt);
        out[k] = dfl_tensor_new(g, nm, rint_(4) ? DFL_BF16 : DFL_F32, DFL_T_ACT, 2, sh);
      }
    }
    if (code == DFL_OP_MATMUL) in[nin++] = w; /* persistent inputs are skipped by liveness */
    raw_op(g, code, in, nin, out, nout);
  }
}

/* Two per-step buffers live at the same time, or -1. */
static int overlapping_pair(const dfl_plan *p, int *a, int *b) {
  for (int x = 0; x < p->nbuf; x++)
    for (int y = x + 1; y < p->nbuf; y++)
      if (p->first[x] >= 0 && p->first[y] >= 0 && p->first[x] <= p->last[y] && p->first[y] <= p->last[x] &&
          p->alias[x] != y && p->alias[y] != x) {
        *a = x; *b = y;
        return 0;
      }
  return -1;
}

int main(void) {
  uint64_t seed = getenv("DFL_SEED") ? strtoull(getenv("DFL_SEED"), 0, 0) : (uint64_t)time(NULL);
  rng_state = seed;
  printf("test_place: seed %llu (DFL_SEED=%llu reproduces)\n", (unsigned long long)seed, (unsigned long long)seed);

  double worst = 0, sum = 0;
  int trials = 60, inplace_seen = 0;
  for (int tr = 0; tr < trials; tr++) {
    dfl_graph g;
    random_graph(&g, 20 + rint_(400), 2 + rint_(tr % 2 ? 8 : 60));
    dfl_plan_ws ws[2] = {{"lib.cublaslt", 1 << 20, DFL_PCAT_LIBRARY, -1},
                         {"loss.scratch", 12345, DFL_PCAT_LOSS, rint_(g.nops)}};
    dfl_plan_opts o = {.ws = ws, .n_ws = 2, .no_inplace = tr % 5 == 4};
    dfl_plan p;
    CHECK(dfl_plan_build_ex(&p, &g, NULL, NULL, &o) == DFL_OK, "build");
    CHECK(dfl_plan_check(&p, &g) == DFL_OK, "trial %d: checker fired on a planner's plan", tr);
    CHECK(p.step_bytes >= p.step_lower_bound, "plan below its lower bound");
    CHECK(p.arena_bytes == p.persistent_bytes + p.step_bytes, "arena sum");
    int64_t parts = 0;
    for (int c = 0; c < DFL_PCAT_COUNT; c++) parts += p.cat_bytes[c];
    CHECK(parts == p.persistent_bytes + p.step_lower_bound, "categories sum to %lld, want %lld",
          (long long)parts, (long long)(p.persistent_bytes + p.step_lower_bound));
    /* independent lower bound: live bytes per op from the plan's intervals, aliases counted once */
    int64_t lb = 0;
    for (int i = 0; i < g.nops; i++) {
      int64_t l = 0;
      for (int b = 0; b < p.nbuf; b++)
        if (p.first[b] >= 0 && p.first[b] <= i && i <= p.last[b] &&
            !(p.alias[b] >= 0 && p.last[p.alias[b]] >= i))
          l += p.size[b];
      if (l > lb) lb = l;
    }
    CHECK(lb == p.step_lower_bound, "lower bound %lld, recomputed %lld", (long long)p.step_lower_bound, (long long)lb);
    double ratio = (double)p.step_bytes / (double)p.step_lower_bound;
    sum += ratio;
    if (ratio > worst) worst = ratio;
    inplace_seen += p.n_inplace;
    if (o.no_inplace) CHECK(p.n_inplace == 0, "in-place with no_inplace");

    /* broken plans: the checker must fire on each */
    int a, b;
    if (overlapping_pair(&p, &a, &b) == 0) {
      int64_t keep = p.offset[b];
      p.offset[b] = p.offset[a];
      fprintf(stderr, "(expected) ");
      CHECK(dfl_plan_check(&p, &g) != DFL_OK, "checker missed two live buffers at one offset");
      p.offset[b] = keep;
    }
    for (int t = 0; t < g.nt; t++) /* an interval cut short: a later reader would see reused bytes */
      if (p.first[t] >= 0 && p.last[t] > p.first[t]) {
        int keep = p.last[t];
        p.last[t] = p.first[t];
        fprintf(stderr, "(expected) ");
        CHECK(dfl_plan_check(&p, &g) != DFL_OK, "checker missed a too-short lifetime");
        p.last[t] = keep;
        break;
      }
    int64_t keep_arena = p.arena_bytes;
    p.arena_bytes -= p.alignment;
    fprintf(stderr, "(expected) ");
    CHECK(dfl_plan_check(&p, &g) != DFL_OK, "checker missed a buffer outside the arena");
    p.arena_bytes = keep_arena;
    int pers = g.t[0].kind == DFL_T_PARAM ? 0 : -1; /* a persistent buffer overlapping anything */
    if (pers == 0 && g.nt > 1) {
      int64_t keep = p.offset[0];
      p.offset[0] = p.persistent_bytes; /* on top of the per-step region */
      fprintf(stderr, "(expected) ");
      CHECK(dfl_plan_check(&p, &g) != DFL_OK, "checker missed a persistent buffer inside the step region");
      p.offset[0] = keep;
    }
    CHECK(dfl_plan_check(&p, &g) == DFL_OK, "restored plan must pass");
    dfl_plan_free(&p);
    dfl_graph_free(&g);
  }
  printf("test_place: %d random schedules, plan/bound mean %.4f worst %.4f, %d in-place outputs\n", trials,
         sum / trials, worst, inplace_seen);
  CHECK(inplace_seen > 0, "no in-place reuse was ever made");
  CHECK(sum / trials <= 1.10, "mean plan/bound %.4f above 1.10", sum / trials);
  CHECK(worst <= 1.35, "worst plan/bound %.4f above 1.35", worst);
  if (failures) { fprintf(stderr, "test_place: %d failures\n", failures); return 1; }
  printf("test_place: ok\n");
  return 0;
}
