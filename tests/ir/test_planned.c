/* test_planned.c: planned execution (tensors placed at plan offsets inside one arena) gives the
** same bits as the unplanned oracle. Until the planner is linked here the plan is a simple one
** that packs every tensor end to end; the planner's tests reuse the same comparison with
** dfl_plan_build (hook: plan_for()). */
#include "irtest.h"
#include "compiler/plan.h"

static void plan_for(dfl_plan *p, const dfl_graph *g) {
  memset(p, 0, sizeof *p);
  p->nt = g->nt;
  p->alignment = 64;
  p->offset = calloc((size_t)g->nt, sizeof *p->offset);
  p->size = calloc((size_t)g->nt, sizeof *p->size);
  int64_t off = 0;
  for (int i = 0; i < g->nt; i++) {
    /* persistent tensors alternate between the arena and separate allocations: both paths */
    p->size[i] = ((int64_t)dfl_tensor_numel(&g->t[i]) * (int64_t)dfl_cpu_elem_size(&g->t[i], 0) + 63) / 64 * 64;
    if (dfl_tensor_is_persistent(&g->t[i]) && i % 2) { p->offset[i] = -1; continue; }
    p->offset[i] = off;
    off += p->size[i];
  }
  p->arena_bytes = off;
}

int main(void) {
  rng_init("ir_planned");
  dfl_graph g;
  dfl_graph_init(&g);
  int R = 6, D = 8, V = 13;
  int ids = dfl_tensor_1d(&g, "ids", DFL_I32, DFL_T_INPUT, R), lab = dfl_tensor_1d(&g, "labels", DFL_I32, DFL_T_INPUT, R);
  int wt = dfl_tensor_1d(&g, "weights", DFL_F32, DFL_T_INPUT, R), emb = dfl_tensor_2d(&g, "embed", DFL_F32, DFL_T_FROZEN, V, D);
  int wn = dfl_tensor_1d(&g, "norm", DFL_F32, DFL_T_PARAM, D), w1 = dfl_tensor_2d(&g, "w1", DFL_F32, DFL_T_PARAM, D, D);
  int x = dfl_gather(&g, emb, ids, DFL_F32, "x");
  int h = dfl_add(&g, x, dfl_linear(&g, dfl_rmsnorm(&g, x, wn, D, 1e-6, "u"), w1, DFL_F32, "p"), "h");
  int y = dfl_rmsnorm(&g, h, wn, D, 1e-6, "y");
  int out[5] = {dfl_tensor_1d(&g, "num", DFL_F32, DFL_T_ACT, 1), dfl_tensor_1d(&g, "ce", DFL_F32, DFL_T_ACT, R),
                dfl_tensor_1d(&g, "cor", DFL_F32, DFL_T_ACT, R), dfl_tensor_1d(&g, "hit", DFL_F32, DFL_T_ACT, R),
                dfl_tensor_2d(&g, "dy", DFL_F32, DFL_T_ACT, R, D)};
  int in[4] = {y, emb, lab, wt};
  dfl_attrs a = {0};
  a.vocab_chunk = 5;
  g.cur_phase = DFL_PH_LOSS;
  dfl_op_add(&g, DFL_OP_LINEAR_CE, in, 4, out, 5, &a);
  int den = dfl_tensor_1d(&g, "den", DFL_F32, DFL_T_ACT, 1);
  dfl_op_add(&g, DFL_OP_SUM, &wt, 1, &den, 1, NULL);
  CHECK(dfl_autodiff(&g, out[0]) == DFL_OK);
  struct dfl_optim_cfg k = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .clip = 1, .warmup = 1, .total = 5};
  CHECK(dfl_build_optimizer(&g, den, &k) >= 0);

  dfl_plan p;
  plan_for(&p, &g);
  dfl_cpu c[2];
  CHECK(dfl_cpu_init(&c[0], &g, NULL, 0) == DFL_OK);
  CHECK(dfl_cpu_init(&c[1], &g, &p, 0) == DFL_OK);
  int fill_t[4] = {emb, wn, w1, wt};
  for (int i = 0; i < 4; i++) {
    fill_rand(&c[0], fill_t[i], 1);
    double *v = get_all(&c[0], fill_t[i]);
    if (fill_t[i] == wt) for (int r = 0; r < R; r++) v[r] = fabs(v[r]) + 0.1;
    for (int m = 0; m < 2; m++) dfl_cpu_set_d(&c[m], fill_t[i], v, dfl_tensor_numel(&g.t[fill_t[i]]));
    free(v);
  }
  for (int r = 0; r < R; r++) {
    int id = irand(V), l = irand(V);
    for (int m = 0; m < 2; m++) dfl_cpu_i32(&c[m], ids)[r] = id, dfl_cpu_i32(&c[m], lab)[r] = l;
  }
  for (int m = 0; m < 2; m++) {
    dfl_cpu_init_masters(&c[m]);
    for (int step = 0; step < 2; step++) CHECK(dfl_cpu_run(&c[m], DFL_PH_ALL) == DFL_OK);
  }
  /* every persistent tensor and the last activations agree bit for bit */
  for (int i = 0; i < g.nt; i++) {
    size_t n = (size_t)dfl_tensor_numel(&g.t[i]) * dfl_cpu_elem_size(&g.t[i], 0);
    if (memcmp(c[0].buf[i], c[1].buf[i], n)) {
      fprintf(stderr, "FAIL planned: tensor %s differs\n", g.t[i].name);
      fails++;
    }
  }
  CHECK(c[1].arena && (char *)c[1].buf[y] >= (char *)c[1].arena);
  CHECK(dfl_cpu_f32(&c[0], wn)[0] != 0);
  dfl_cpu_free(&c[0]), dfl_cpu_free(&c[1]);
  free(p.offset), free(p.size);
  dfl_graph_free(&g);
  if (fails) { fprintf(stderr, "%d check(s) failed\n", fails); return 1; }
  printf("ir_planned: ok\n");
  return 0;
}
