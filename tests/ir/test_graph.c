/* test_graph.c: IR construction, shape inference of the builders, validation (a bad op aborts
** naming its label), queries, FLOP counts and the dump. */
#include "compiler/graph.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int fails;
#define CHECK_FAILED fails++
#include "tests/common/check.h"

/* Runs fn in a child; returns 1 if it died of SIGABRT (the builder-bug path). */
static int aborts(void (*fn)(void)) {
  fflush(NULL);
  pid_t p = fork();
  if (p == 0) {
    freopen("/dev/null", "w", stderr);
    fn();
    _exit(0);
  }
  int st = 0;
  waitpid(p, &st, 0);
  return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
}

static void bad_matmul(void) {
  dfl_graph g;
  dfl_graph_init(&g);
  int a = dfl_tensor_2d(&g, "a", DFL_F32, DFL_T_INPUT, 3, 4);
  int b = dfl_tensor_2d(&g, "b", DFL_F32, DFL_T_INPUT, 5, 6);
  dfl_matmul(&g, a, b, 0, 1, DFL_F32, "c"); /* inner 4 vs 6 */
}
static void good_matmul(void) {
  dfl_graph g;
  dfl_graph_init(&g);
  int a = dfl_tensor_2d(&g, "a", DFL_F32, DFL_T_INPUT, 3, 4);
  int b = dfl_tensor_2d(&g, "b", DFL_F32, DFL_T_INPUT, 5, 4);
  dfl_matmul(&g, a, b, 0, 1, DFL_F32, "c");
  dfl_graph_free(&g);
}
static void unproduced_act(void) {
  dfl_graph g;
  dfl_graph_init(&g);
  int a = dfl_tensor_2d(&g, "a", DFL_F32, DFL_T_ACT, 3, 4);
  dfl_add(&g, a, a, "b");
}
static void bad_rmsnorm_group(void) {
  dfl_graph g;
  dfl_graph_init(&g);
  int x = dfl_tensor_2d(&g, "x", DFL_F32, DFL_T_INPUT, 3, 10);
  int w = dfl_tensor_1d(&g, "w", DFL_F32, DFL_T_PARAM, 4);
  dfl_rmsnorm(&g, x, w, 4, 1e-6, "y");
}

int main(void) {
  dfl_graph g;
  dfl_graph_init(&g);
  g.cur_label = "layers.0";
  int ids = dfl_tensor_1d(&g, "ids", DFL_I32, DFL_T_INPUT, 6);
  int emb = dfl_tensor_2d(&g, "embed", DFL_BF16, DFL_T_FROZEN, 50, 8);
  int wq = dfl_tensor_2d(&g, "q_proj.weight", DFL_BF16, DFL_T_PARAM, 12, 8);
  int nw = dfl_tensor_1d(&g, "norm.weight", DFL_BF16, DFL_T_PARAM, 8);
  int x = dfl_gather(&g, emb, ids, DFL_BF16, "x");
  CHECK(g.t[x].shape[0] == 6 && g.t[x].shape[1] == 8 && g.t[x].producer == 0 && !g.t[x].requires_grad);
  int u = dfl_rmsnorm(&g, x, nw, 8, 1e-6, "u");
  CHECK(g.t[u].requires_grad && g.t[u].ndim == 2);
  int rstd = g.ops[1].out[1];
  CHECK(dfl_tensor_numel(&g.t[rstd]) == 6 && g.t[rstd].dtype == DFL_F32 && !g.t[rstd].requires_grad);
  CHECK(!strcmp(g.t[rstd].name, "u.rstd"));
  int q = dfl_linear(&g, u, wq, DFL_BF16, "q");
  CHECK(g.t[q].shape[0] == 6 && g.t[q].shape[1] == 12 && g.t[q].requires_grad);
  int pos = dfl_tensor_1d(&g, "pos", DFL_I32, DFL_T_INPUT, 6);
  int qr = dfl_rope(&g, q, pos, 3, 4, 10000.0, "qr");
  int s = dfl_swiglu(&g, qr, q, "s");
  int t = dfl_add(&g, s, q, "t");
  CHECK(g.nops == 6 && g.t[t].producer == 5);
  CHECK(dfl_tensor_find(&g, "qr") == qr && dfl_tensor_find(&g, "nope") == -1);
  CHECK(dfl_tensor_bytes(&g.t[emb]) == 50 * 8 * 2 && dfl_tensor_bytes(&g.t[ids]) == 24);
  CHECK(dfl_tensor_is_persistent(&g.t[wq]) && !dfl_tensor_is_persistent(&g.t[q]));
  CHECK(dfl_op_flops(&g, &g.ops[2]) == 2.0 * 6 * 12 * 8);
  CHECK(!strcmp(g.ops[2].label, "layers.0") && g.ops[2].phase == DFL_PH_FORWARD);
  CHECK(!strcmp(dfl_opcode_name(DFL_OP_LINEAR_CE), "linear_ce") && !strcmp(dfl_opcode_name(DFL_OP_FILL), "fill"));
  CHECK(!strcmp(dfl_dtype_name(DFL_BF16), "bf16") && !strcmp(dfl_tkind_name(DFL_T_GRAD), "grad"));
  CHECK(!strcmp(dfl_phase_name(DFL_PH_OPTIMIZER), "optimizer"));
  /* trans_a shapes */
  int at = dfl_tensor_2d(&g, "at", DFL_F32, DFL_T_INPUT, 7, 3);
  int bt = dfl_tensor_2d(&g, "bt", DFL_F32, DFL_T_INPUT, 5, 7);
  int ct = dfl_matmul(&g, at, bt, 1, 1, DFL_F32, "ct");
  CHECK(g.t[ct].shape[0] == 3 && g.t[ct].shape[1] == 5);

  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  dfl_graph_dump(&g, f);
  fclose(f);

  CHECK(strstr(buf, "rmsnorm") && strstr(buf, "%5:u[6,8]bf16 %6:u.rstd[6]f32") && strstr(buf, "{ta=1 tb=1 alpha=1}"));
  CHECK(strstr(buf, "param  %2:q_proj.weight[12,8]bf16"));
  free(buf);

  CHECK(!aborts(good_matmul));
  CHECK(aborts(bad_matmul));
  CHECK(aborts(unproduced_act));
  CHECK(aborts(bad_rmsnorm_group));
  dfl_graph_free(&g);
  if (fails) { fprintf(stderr, "%d check(s) failed\n", fails); return 1; }
  printf("ir_graph: ok\n");
  return 0;
}
