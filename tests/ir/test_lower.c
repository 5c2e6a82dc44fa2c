/* test_lower.c: the pointwise fusion groups (compiler/lower.c) and the plan's liveness over them.
**   - every row of compiler/pointwise.def is pointwise in its plain form; SWIGLU's quantized form,
**     an i64, i32 or f8 tensor, a column input of the wrong length are not;
**   - a chain of pointwise ops over one iteration space is one group; a phase change, another
**     element count, a non-pointwise op, a scalar or column input written inside the group, the
**     op and tensor limits each start a new group;
**   - placed offsets that overlap split a group there (and only there);
**   - the plan keeps every tensor of a multi-op group live across the whole group (dfl_plan_check
**     passes, and no two tensors of a group share bytes), and runs on the CPU as before. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "compiler/graph.h"
#include "compiler/lower.h"
#include "compiler/plan.h"

static int failures;
#include "tests/common/check.h"

static int act(dfl_graph *g, const char *n, dfl_dtype dt, int64_t r, int64_t c) { return dfl_tensor_2d(g, n, dt, DFL_T_ACT, r, c); }
static int op(dfl_graph *g, dfl_opcode code, const int *in, int nin, const int *out, int nout, double alpha) {
  dfl_attrs a;
  memset(&a, 0, sizeof a);
  a.alpha = alpha;
  return dfl_op_add(g, code, in, nin, out, nout, &a);
}

/* x, y -> a = x + y -> s = swiglu(a, y) (f32) -> z = s * alpha (scale), [R, C], bf16 but s; then a MATMUL
** (not pointwise), then a copy of its output. */
static void chain(dfl_graph *g, int64_t R, int64_t C) {
  dfl_graph_init(g);
  int x = dfl_tensor_2d(g, "x", DFL_BF16, DFL_T_INPUT, R, C), y = dfl_tensor_2d(g, "y", DFL_BF16, DFL_T_INPUT, R, C);
  int w = dfl_tensor_2d(g, "w", DFL_BF16, DFL_T_FROZEN, C, C);
  int a = act(g, "a", DFL_BF16, R, C), s = act(g, "s", DFL_F32, R, C), z = act(g, "z", DFL_BF16, R, C);
  op(g, DFL_OP_ADD, (int[]){x, y}, 2, &a, 1, 0);
  op(g, DFL_OP_SWIGLU, (int[]){a, y}, 2, &s, 1, 0);
  op(g, DFL_OP_SCALE, (int[]){s, -1}, 2, &z, 1, 0.5);
  int m = dfl_matmul(g, z, w, 0, 1, DFL_BF16, "m");
  int o = dfl_tensor_2d(g, "o", DFL_F32, DFL_T_OUTPUT, R, C);
  op(g, DFL_OP_COPY, &m, 1, &o, 1, 0);
}

static void test_rows(void) {
  dfl_graph g;
  dfl_graph_init(&g);
  int64_t R = 4, C = 8;
  int x = dfl_tensor_2d(&g, "x", DFL_BF16, DFL_T_INPUT, R, C), y = dfl_tensor_2d(&g, "y", DFL_BF16, DFL_T_INPUT, R, C);
  int h = act(&g, "h", DFL_BF16, R, C), a = act(&g, "a", DFL_F32, R, C), b = act(&g, "b", DFL_F32, R, C);
  int s1 = dfl_tensor_1d(&g, "s", DFL_F32, DFL_T_INPUT, 1);
  int al = dfl_tensor_1d(&g, "alog", DFL_F32, DFL_T_FROZEN, C), db = dfl_tensor_1d(&g, "dtb", DFL_F32, DFL_T_FROZEN, C);
  int acc = dfl_tensor_2d(&g, "acc", DFL_F32, DFL_T_STATE, R, C);
  int n0 = g.nops;
  op(&g, DFL_OP_ADD, (int[]){x, y}, 2, &h, 1, 0);
  op(&g, DFL_OP_SCALE, (int[]){h, s1}, 2, &a, 1, 2);
  op(&g, DFL_OP_COPY, &a, 1, &b, 1, 0);
  op(&g, DFL_OP_FILL, NULL, 0, &b, 1, 3);
  op(&g, DFL_OP_ACCUM, (int[]){acc, b}, 2, &acc, 1, 0);
  op(&g, DFL_OP_SWIGLU, (int[]){x, y}, 2, &h, 1, 0);
  int dg = act(&g, "dg", DFL_BF16, R, C), du = act(&g, "du", DFL_BF16, R, C);
  op(&g, DFL_OP_SWIGLU_BWD, (int[]){x, y, h}, 3, (int[]){dg, du}, 2, 0);
  op(&g, DFL_OP_SIGMOID_MUL, (int[]){x, y}, 2, &h, 1, 0);
  int gg = act(&g, "g", DFL_F32, R, C), beta = act(&g, "beta", DFL_F32, R, C);
  op(&g, DFL_OP_GDN_GATES, (int[]){x, y, al, db}, 4, (int[]){gg, beta}, 2, 0);
  for (int i = n0; i < g.nops; i++)
    CHECK(dfl_lower_pointwise(&g, &g.ops[i]), "op %d %s", i, dfl_opcode_name(g.ops[i].code));
  /* every row's op appears above */
  int seen[DFL_OP_COUNT] = {0};
  for (int i = n0; i < g.nops; i++) seen[g.ops[i].code] = 1;
  for (int c = 0; c < DFL_OP_COUNT; c++)
    if (dfl_lower_pw_ins((dfl_opcode)c) && !dfl_lower_row_pre((dfl_opcode)c))
      CHECK(seen[c], "pointwise.def row %s has no case here", dfl_opcode_name((dfl_opcode)c));
  /* not pointwise: the quantized SWIGLU (two outputs), a column input of the wrong length, a MATMUL */
  dfl_op q = g.ops[n0 + 5];
  q.n_out = 2, q.out[1] = s1;
  CHECK(!dfl_lower_pointwise(&g, &q));
  dfl_op bad = g.ops[g.nops - 1];
  bad.in[2] = s1;
  CHECK(!dfl_lower_pointwise(&g, &bad));
  int i8 = dfl_tensor_2d(&g, "i8", DFL_I64, DFL_T_ACT, R, C), i32 = dfl_tensor_2d(&g, "i32", DFL_I32, DFL_T_ACT, R, C);
  dfl_op cp = g.ops[n0 + 2];
  cp.in[0] = i8;
  CHECK(!dfl_lower_pointwise(&g, &cp));
  cp.in[0] = i32, cp.out[0] = i32; /* a same-dtype i32 COPY: the library's byte copy */
  CHECK(!dfl_lower_pointwise(&g, &cp));
  dfl_graph_free(&g);
}

static void test_groups(void) {
  dfl_graph g;
  dfl_groups gs;
  chain(&g, 16, 64);
  CHECK(dfl_lower_groups(&g, NULL, NULL, &gs) == 0);
  /* ADD, SWIGLU, SCALE: one group of three; MATMUL none; COPY alone */
  CHECK(gs.n == 2, "%d groups", gs.n);
  CHECK(gs.g[0].first == 0 && gs.g[0].n == 3 && gs.g[0].numel == 16 * 64 && gs.g[0].vec == 8);
  CHECK(gs.of_op[0] == 0 && gs.of_op[1] == 0 && gs.of_op[2] == 0 && gs.of_op[3] == -1 && gs.of_op[4] == 1);
  CHECK(gs.g[0].nt == 5, "tensors x y a s z: %d", gs.g[0].nt); /* x, y, a, s, z */
  int sf[8], sl[8];
  CHECK(dfl_lower_span(&g, sf, sl) == 0);
  CHECK(sf[1] == 0 && sl[1] == 2 && sf[3] == 3 && sl[3] == 3 && sf[4] == 4 && sl[4] == 4);
  dfl_groups_free(&gs);

  /* overlapping offsets split the group where the overlap enters it: s over x */
  int64_t off[16], size[16];
  for (int t = 0; t < g.nt; t++) off[t] = t * 4096, size[t] = 4096;
  off[dfl_tensor_find(&g, "s")] = off[dfl_tensor_find(&g, "x")] + 2048;
  CHECK(dfl_lower_groups(&g, off, size, &gs) == 0);
  CHECK(gs.n == 3 && gs.g[0].n == 1 && gs.g[1].first == 1 && gs.g[1].n == 2, "%d groups", gs.n);
  dfl_groups_free(&gs);
  /* disjoint offsets keep it */
  for (int t = 0; t < g.nt; t++) off[t] = t * 4096;
  CHECK(dfl_lower_groups(&g, off, size, &gs) == 0 && gs.n == 2 && gs.g[0].n == 3);
  dfl_groups_free(&gs);

  /* a phase change splits; another element count splits; odd counts take the element path */
  g.ops[2].phase = DFL_PH_BACKWARD;
  CHECK(dfl_lower_groups(&g, NULL, NULL, &gs) == 0 && gs.n == 3 && gs.g[0].n == 2 && gs.g[1].first == 2);
  dfl_groups_free(&gs);
  dfl_graph_free(&g);
  chain(&g, 3, 5);
  CHECK(dfl_lower_groups(&g, NULL, NULL, &gs) == 0 && gs.g[0].vec == 1 && gs.g[0].n == 3);
  dfl_groups_free(&gs);
  dfl_graph_free(&g);

  /* a scalar input written inside the group: SCALE by s where s is the previous op's output */
  dfl_graph_init(&g);
  int one = dfl_tensor_1d(&g, "one", DFL_F32, DFL_T_INPUT, 1), s = dfl_tensor_1d(&g, "s", DFL_F32, DFL_T_ACT, 1);
  int v = dfl_tensor_1d(&g, "v", DFL_F32, DFL_T_ACT, 1);
  op(&g, DFL_OP_ADD, (int[]){one, one}, 2, &s, 1, 0);
  op(&g, DFL_OP_SCALE, (int[]){one, s}, 2, &v, 1, 1);
  CHECK(dfl_lower_groups(&g, NULL, NULL, &gs) == 0 && gs.n == 2, "%d groups", gs.n);
  dfl_groups_free(&gs);
  dfl_graph_free(&g);

  /* the op limit: DFL_PW_MAX_OPS + 1 adds in a row are two groups */
  dfl_graph_init(&g);
  int x = dfl_tensor_1d(&g, "x", DFL_F32, DFL_T_INPUT, 64), prev = x;
  for (int i = 0; i <= DFL_PW_MAX_OPS; i++) {
    int y = dfl_tensor_1d(&g, "y", DFL_F32, DFL_T_ACT, 64);
    op(&g, DFL_OP_ADD, (int[]){prev, x}, 2, &y, 1, 0);
    prev = y;
  }
  CHECK(dfl_lower_groups(&g, NULL, NULL, &gs) == 0 && gs.n == 2 && gs.g[0].n == DFL_PW_MAX_OPS && gs.g[1].n == 1);
  dfl_groups_free(&gs);
  dfl_graph_free(&g);
}

/* the plan over a multi-op group: its tensors live across it, no two of them share bytes, the
** checker agrees; in-place stays for the lone ops */
static void test_plan(void) {
  dfl_graph g;
  chain(&g, 16, 64);
  dfl_plan p;
  CHECK(dfl_plan_build(&p, &g, NULL, NULL) == 0);
  CHECK(dfl_plan_check(&p, &g) == 0);
  int a = dfl_tensor_find(&g, "a"), s = dfl_tensor_find(&g, "s"), z = dfl_tensor_find(&g, "z");
  CHECK(p.first[a] == 0 && p.last[a] == 2, "a live %d..%d", p.first[a], p.last[a]);
  CHECK(p.first[z] == 0, "z from %d", p.first[z]);
  int ts[] = {a, s, z};
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < i; j++)
      CHECK(p.offset[ts[i]] + p.size[ts[i]] <= p.offset[ts[j]] || p.offset[ts[j]] + p.size[ts[j]] <= p.offset[ts[i]],
            "%s and %s share bytes", g.t[ts[i]].name, g.t[ts[j]].name);
  dfl_groups gs;
  CHECK(dfl_lower_groups(&g, p.offset, p.size, &gs) == 0 && gs.g[0].n == 3, "the placed plan keeps the group");
  dfl_groups_free(&gs);
  dfl_plan_free(&p);
  dfl_graph_free(&g);
}

/* Row groups (lower.h): a QUANT_F8 of the group's output closes it when its rows are whole 16-byte words
** of at most DFL_PW_ROW_MAX; not of an input, not of another row width, not across a phase. */
static void test_row_groups(void) {
  const int64_t widths[] = {48, 44, DFL_PW_ROW_MAX, DFL_PW_ROW_MAX + 8};
  for (int w = 0; w < 4; w++)
    for (int form = 0; form < 3; form++) { /* 0: SIGMOID_MUL -> QUANT; 1: QUANT of an input; 2: across phases */
      dfl_graph g;
      dfl_graph_init(&g);
      const int64_t R = 3, C = widths[w];
      int x = dfl_tensor_2d(&g, "x", DFL_BF16, DFL_T_INPUT, R, C), y = dfl_tensor_2d(&g, "y", DFL_BF16, DFL_T_INPUT, R, C);
      int sm = dfl_tensor_2d(&g, "sm", DFL_BF16, DFL_T_ACT, R, C), q = dfl_tensor_2d(&g, "q", DFL_F8E4M3, DFL_T_ACT, R, C);
      int s = dfl_tensor_1d(&g, "s", DFL_F32, DFL_T_ACT, R);
      op(&g, DFL_OP_SIGMOID_MUL, (int[]){x, y}, 2, &sm, 1, 0);
      if (form == 2) g.cur_phase = DFL_PH_LOSS;
      op(&g, DFL_OP_QUANT_F8, form == 1 ? &y : &sm, 1, (int[]){q, s}, 2, 0);
      dfl_groups gs;
      CHECK(dfl_lower_groups(&g, NULL, NULL, &gs) == 0 && gs.n == 1);
      const int row = form == 0 && C % 8 == 0 && C <= DFL_PW_ROW_MAX;
      CHECK(row ? gs.g[0].n == 2 && gs.g[0].rows == R && gs.g[0].cols == C && gs.of_op[1] == 0
                : gs.g[0].n == 1 && gs.g[0].rows == 0 && gs.of_op[1] == -1,
            "C %lld form %d: %d ops, rows %lld", (long long)C, form, gs.g[0].n, (long long)gs.g[0].rows);
      dfl_groups_free(&gs);
      dfl_graph_free(&g);
    }
  /* row ops (rowwise.def): NORM_GATE with its z a window, then its output's QUANT_F8: one row group; alone:
  ** the library's; L2NORM then a COPY: a row group without a quantization; a segment of 40 (not 8 L, L a
  ** power of two): the library's */
  int seen[DFL_OP_COUNT] = {0};
  for (int form = 0; form < 4; form++) {
    dfl_graph g;
    dfl_graph_init(&g);
    const int64_t R = 5, G = form == 3 ? 40 : 128, D = 3 * G;
    int x = dfl_tensor_2d(&g, "x", DFL_BF16, DFL_T_INPUT, R, D), zab = dfl_tensor_2d(&g, "zab", DFL_BF16, DFL_T_INPUT, R, D + 16);
    int w = dfl_tensor_1d(&g, "w", DFL_BF16, DFL_T_FROZEN, G), y = dfl_tensor_2d(&g, "y", DFL_BF16, DFL_T_ACT, R, D);
    int q = dfl_tensor_2d(&g, "q", DFL_F8E4M3, DFL_T_ACT, R, D), s = dfl_tensor_1d(&g, "s", DFL_F32, DFL_T_ACT, R);
    int cp = dfl_tensor_2d(&g, "cp", DFL_F32, DFL_T_ACT, R, D);
    dfl_attrs at;
    memset(&at, 0, sizeof at);
    at.group = (int)G, at.eps = 1e-6;
    if (form == 2) {
      dfl_op_add(&g, DFL_OP_L2NORM, &x, 1, &y, 1, &at);
      seen[DFL_OP_L2NORM] = 1;
      op(&g, DFL_OP_COPY, &y, 1, &cp, 1, 0);
    } else {
      dfl_op_add(&g, DFL_OP_NORM_GATE, (int[]){x, zab, w}, 3, &y, 1, &at);
      seen[DFL_OP_NORM_GATE] = 1;
      if (form != 1) op(&g, DFL_OP_QUANT_F8, &y, 1, (int[]){q, s}, 2, 0);
    }
    dfl_groups gs;
    CHECK(dfl_lower_groups(&g, NULL, NULL, &gs) == 0);
    if (form == 0 || form == 2)
      CHECK(gs.n == 1 && gs.g[0].n == 2 && gs.g[0].rows == R && gs.g[0].cols == D && gs.g[0].quant == (form == 0) &&
            gs.of_op[0] == 0 && gs.of_op[1] == 0, "form %d: %d groups", form, gs.n);
    else
      CHECK(gs.n == (form == 3 ? 0 : 0) && gs.of_op[0] == -1, "form %d: %d groups, op 0 in %d", form, gs.n, gs.of_op[0]);
    dfl_groups_free(&gs);
    dfl_graph_free(&g);
  }
  for (int c = 0; c < DFL_OP_COUNT; c++)
    if (dfl_lower_row_pre((dfl_opcode)c)) CHECK(seen[c], "rowwise.def row %s has no case here", dfl_opcode_name((dfl_opcode)c));
}

int main(void) {
  test_rows();
  test_groups();
  test_row_groups();
  test_plan();
  if (failures) fprintf(stderr, "ir_lower: %d failure(s)\n", failures);
  else printf("ir_lower: ok\n");
  return failures != 0;
}
