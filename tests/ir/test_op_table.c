/*
** test_op_table.c (ctest ir_op_table): one row per opcode of compiler/ops.def, naming the case that
** checks its CPU forward against an f64 reference and, for an op marked differentiable there, the
** case that checks its autodiff gradient against central finite differences in f64 mode. The walk
** goes over every opcode of the X-macro, not over the rows, so an op added to ops.def without a row
** (or a differentiable one without a gradient case) fails here, by name.
**
** The cases are the existing tests' own functions (tests/ir/op_table.h: OP_CASE), run once each
** with this run's seed; the few ops no other test checked by value (SCALE, COPY, FILL) have their
** case below. A case counts for an op only if it really ran it: dfl_cpu_init is wrapped
** (-Wl,--wrap, cmake/ir.cmake) to record the opcodes of every graph a case hands the CPU backend,
** and a row whose case never ran its op fails like a missing one. A backward op (RMSNORM_BWD,
** SWIGLU_BWD, ATTENTION_BWD, SCATTER_ADD of GATHER, BLOCK_EXPAND_BWD) counts its forward op's
** gradient check as its reference: its outputs are the gradients compared with f64 differences.
**
** To add an op: give it a row in `rows` below (its forward case and, when differentiable, its
** gradient case); a case is an OP_CASE in the test file that checks it (declared in op_table.h,
** that file added to ir_op_table's SOURCES in cmake/ir.cmake) or a small function here.
**
** --drop NAME / --drop-grad NAME: the walk alone, as if NAME's row (or its gradient case) were
** missing; exits 0 only when exactly that op is reported (ir_op_table_drop*: the walk's own test).
*/
#include "irtest.h"

/* --- which ops each case runs: every graph a case gives the CPU backend --- */
static unsigned char seen[DFL_OP_COUNT];
int __real_dfl_cpu_init(dfl_cpu *c, const dfl_graph *g, const struct dfl_plan *plan, int f64);
int __wrap_dfl_cpu_init(dfl_cpu *c, const dfl_graph *g, const struct dfl_plan *plan, int f64);
int __wrap_dfl_cpu_init(dfl_cpu *c, const dfl_graph *g, const struct dfl_plan *plan, int f64) {
  for (int i = 0; i < g->nops; i++)
    if ((int)g->ops[i].code >= 0 && g->ops[i].code < DFL_OP_COUNT) seen[g->ops[i].code] = 1;
  return __real_dfl_cpu_init(c, g, plan, f64);
}

/* --- the ops no other test checked by value --- */

/* SCALE: out = x * s[0] * alpha, and x * alpha without s (in[1] = -1); alpha 0 reads as 1 (the CPU's
** k_alpha, the contract's default). One multiply per element in f64: within 1e-15 relative (the
** reference multiplies in the other order); f32 storage rounds twice: 2e-7. */
static void case_scale(void) {
  for (int f64 = 0; f64 < 2; f64++) {
    dfl_graph g;
    dfl_graph_init(&g);
    dfl_dtype dt = f64 ? DFL_F64 : DFL_F32;
    int R = 3 + irand(4), C = 2 + irand(6);
    int x = dfl_tensor_2d(&g, "x", dt, DFL_T_INPUT, R, C), s = dfl_tensor_1d(&g, "s", dt, DFL_T_INPUT, 1);
    int y1 = dfl_tensor_2d(&g, "xs", dt, DFL_T_ACT, R, C), y2 = dfl_tensor_2d(&g, "xa", dt, DFL_T_ACT, R, C);
    int y3 = dfl_tensor_2d(&g, "x1", dt, DFL_T_ACT, R, C);
    dfl_attrs a = {0};
    a.alpha = -1.75;
    dfl_op_add(&g, DFL_OP_SCALE, (int[]){x, s}, 2, &y1, 1, &a);
    dfl_op_add(&g, DFL_OP_SCALE, (int[]){x, -1}, 2, &y2, 1, &a);
    a.alpha = 0;
    dfl_op_add(&g, DFL_OP_SCALE, (int[]){x, s}, 2, &y3, 1, &a);
    dfl_cpu c;
    CHECK(dfl_cpu_init(&c, &g, NULL, f64) == DFL_OK);
    fill_rand(&c, x, 3), fill_rand(&c, s, 2);
    CHECK(dfl_cpu_run(&c, DFL_PH_ALL) == DFL_OK);
    double *X = get_all(&c, x), *S = get_all(&c, s), *ref = malloc(sizeof(double) * (size_t)(R * C));
    double tol = f64 ? 1e-15 : 2e-7;
    const int outs[3] = {y1, y2, y3};
    const double mul[3] = {-1.75 * S[0], -1.75, S[0]};
    const char *what[3] = {"scale x*s*alpha", "scale x*alpha (no s)", "scale alpha 0 = 1"};
    for (int k = 0; k < 3; k++) {
      for (int i = 0; i < R * C; i++) ref[i] = X[i] * mul[k];
      double *got = get_all(&c, outs[k]);
      near(what[k], got, ref, R * C, tol, 1e-3);
      free(got);
    }
    free(X), free(S), free(ref);
    dfl_cpu_free(&c);
    dfl_graph_free(&g);
  }
}

/* COPY: float to float of another shape (the reshape autodiff and the loss use) keeps every value
** bit for bit; i32 to float converts exactly (integers below 2^24); float to i32 truncates toward 0.
** Exact comparisons. */
static void case_copy(void) {
  for (int f64 = 0; f64 < 2; f64++) {
    dfl_graph g;
    dfl_graph_init(&g);
    dfl_dtype dt = f64 ? DFL_F64 : DFL_F32;
    int x = dfl_tensor_2d(&g, "x", dt, DFL_T_INPUT, 4, 6), y = dfl_tensor_2d(&g, "y", dt, DFL_T_ACT, 3, 8);
    int n = dfl_tensor_1d(&g, "n", DFL_I32, DFL_T_INPUT, 24), nf = dfl_tensor_1d(&g, "nf", dt, DFL_T_ACT, 24);
    int xi = dfl_tensor_2d(&g, "xi", DFL_I32, DFL_T_ACT, 4, 6);
    dfl_op_add(&g, DFL_OP_COPY, &x, 1, &y, 1, NULL);
    dfl_op_add(&g, DFL_OP_COPY, &n, 1, &nf, 1, NULL);
    dfl_op_add(&g, DFL_OP_COPY, &x, 1, &xi, 1, NULL);
    dfl_cpu c;
    CHECK(dfl_cpu_init(&c, &g, NULL, f64) == DFL_OK);
    fill_rand(&c, x, 50);
    for (int i = 0; i < 24; i++) dfl_cpu_i32(&c, n)[i] = irand(1 << 23) - (1 << 22);
    CHECK(dfl_cpu_run(&c, DFL_PH_ALL) == DFL_OK);
    double *X = get_all(&c, x), *Y = get_all(&c, y), *NF = get_all(&c, nf);
    int bad = 0;
    for (int i = 0; i < 24; i++) {
      bad += Y[i] != X[i] || NF[i] != (double)dfl_cpu_i32(&c, n)[i];
      bad += dfl_cpu_i32(&c, xi)[i] != (int32_t)trunc(X[i]);
    }
    CHECK(bad == 0, "copy (%s): %d values differ", f64 ? "f64" : "f32", bad);
    free(X), free(Y), free(NF);
    dfl_cpu_free(&c);
    dfl_graph_free(&g);
  }
}

/* FILL: every element a.alpha (autodiff's seed and broadcasts), in a float tensor of each mode; exact. */
static void case_fill(void) {
  for (int f64 = 0; f64 < 2; f64++) {
    dfl_graph g;
    dfl_graph_init(&g);
    int R = 1 + irand(5), C = 1 + irand(9);
    int o = dfl_tensor_2d(&g, "o", f64 ? DFL_F64 : DFL_F32, DFL_T_ACT, R, C);
    dfl_attrs a = {0};
    a.alpha = 0.375 * (1 + irand(16)); /* a binary fraction: exact in both modes */
    dfl_op_add(&g, DFL_OP_FILL, NULL, 0, &o, 1, &a);
    dfl_cpu c;
    CHECK(dfl_cpu_init(&c, &g, NULL, f64) == DFL_OK);
    CHECK(dfl_cpu_run(&c, DFL_PH_ALL) == DFL_OK);
    double *O = get_all(&c, o);
    int bad = 0;
    for (int i = 0; i < R * C; i++) bad += O[i] != a.alpha;
    CHECK(bad == 0, "fill (%s) %g: %d values differ", f64 ? "f64" : "f32", a.alpha, bad);
    free(O);
    dfl_cpu_free(&c);
    dfl_graph_free(&g);
  }
}

OP_CASE(optab_table_scale, fails, rng_s, case_scale())
OP_CASE(optab_table_copy, fails, rng_s, case_copy())
OP_CASE(optab_table_fill, fails, rng_s, case_fill())

/* --- the table --- */
typedef int (*op_case_fn)(uint64_t seed);
typedef struct { const char *name; op_case_fn fn; } op_case;
#define CASE(f) {#f, optab_##f}
#define NONE {NULL, NULL}
typedef struct { dfl_opcode op; op_case fwd, grad; } op_row;

static const op_row rows[] = {
  {DFL_OP_IOTA_MOD, CASE(ops_elementwise), NONE},
  {DFL_OP_DFLASH_BLOCKS, CASE(ops_dflash_blocks), NONE},
  {DFL_OP_GATHER, CASE(ops_elementwise), CASE(grad_simple)},
  {DFL_OP_MATMUL, CASE(ops_matmul), CASE(grad_matmul)},
  {DFL_OP_ADD, CASE(ops_elementwise), CASE(grad_simple)},
  {DFL_OP_RMSNORM, CASE(ops_elementwise), CASE(grad_simple)},
  {DFL_OP_ROPE, CASE(ops_elementwise), CASE(grad_simple)},
  {DFL_OP_ATTENTION, CASE(attention_forward), CASE(attention_grad)},
  {DFL_OP_SWIGLU, CASE(ops_elementwise), CASE(grad_simple)},
  {DFL_OP_LINEAR_CE, CASE(ops_linear_ce), CASE(grad_linear_ce)},
  {DFL_OP_SCATTER_ADD, CASE(ops_elementwise), NONE},
  {DFL_OP_RMSNORM_BWD, CASE(grad_simple), NONE},
  {DFL_OP_ATTENTION_BWD, CASE(attention_grad), NONE},
  {DFL_OP_SWIGLU_BWD, CASE(grad_simple), NONE},
  {DFL_OP_SCALE, CASE(table_scale), CASE(grad_simple)},
  {DFL_OP_SUM, CASE(ops_elementwise), CASE(grad_simple)},
  {DFL_OP_DFLASH_METRICS, CASE(ops_dflash_metrics), NONE},
  {DFL_OP_ACCUM, CASE(optim_steps), NONE},
  {DFL_OP_SUMSQ_ACC, CASE(optim_steps), NONE},
  {DFL_OP_OPT_PREP, CASE(optim_steps), NONE},
  {DFL_OP_ADAMW, CASE(optim_steps), NONE},
  {DFL_OP_COPY, CASE(table_copy), CASE(grad_simple)},
  {DFL_OP_CONCAT_COLS, CASE(ops_elementwise), NONE},
  {DFL_OP_FILL, CASE(table_fill), NONE},
  {DFL_OP_QUANT_F8, CASE(fp8_ops), NONE},
  {DFL_OP_MATMUL_F8, CASE(fp8_ops), NONE},
  {DFL_OP_BLOCK_ROWS, CASE(ops_block_rows), NONE},
  {DFL_OP_BLOCK_EXPAND, CASE(ops_block_rows), CASE(grad_block_rows)},
  {DFL_OP_BLOCK_EXPAND_BWD, CASE(ops_block_rows), NONE},
  {DFL_OP_BLOCK_DROP, CASE(ops_block_rows), CASE(grad_block_rows)},
  {DFL_OP_BLOCK_UNDROP, CASE(ops_block_rows), CASE(grad_block_rows)},
  {DFL_OP_CONV1D_SILU, CASE(hybrid_conv), NONE},
  {DFL_OP_L2NORM, CASE(hybrid_rows), NONE},
  {DFL_OP_GDN_GATES, CASE(hybrid_rows), NONE},
  {DFL_OP_GATED_DELTA, CASE(hybrid_gated_delta), NONE},
  {DFL_OP_NORM_GATE, CASE(hybrid_rows), NONE},
  {DFL_OP_SIGMOID_MUL, CASE(hybrid_rows), NONE},
};
#define NROWS ((int)(sizeof rows / sizeof rows[0]))

/* Every opcode, with its name and differentiable flag, from the op table itself. */
static const struct { dfl_opcode op; const char *name; int differentiable; } ops[] = {
#define DFL_OP(NAME, name, family, diff) {DFL_OP_##NAME, #name, diff},
#include "compiler/ops.def"
#undef DFL_OP
};
#define NOPS ((int)(sizeof ops / sizeof ops[0]))

/* A case's result: run once, whatever the number of rows naming it. */
typedef struct { op_case_fn fn; int failed; unsigned char ran[DFL_OP_COUNT]; } case_run;
static case_run runs[2 * NROWS];
static int nruns;

static case_run *run_once(op_case_fn fn, uint64_t seed) {
  for (int i = 0; i < nruns; i++)
    if (runs[i].fn == fn) return &runs[i];
  case_run *r = &runs[nruns++];
  r->fn = fn;
  memset(seen, 0, sizeof seen);
  r->failed = fn(seed);
  memcpy(r->ran, seen, sizeof seen);
  return r;
}

int main(int argc, char **argv) {
  const char *drop = NULL;
  int drop_grad = 0;
  if (argc == 3 && (!strcmp(argv[1], "--drop") || !strcmp(argv[1], "--drop-grad")))
    drop = argv[2], drop_grad = !strcmp(argv[1], "--drop-grad");
  else if (argc != 1) { fprintf(stderr, "usage: %s [--drop NAME | --drop-grad NAME]\n", argv[0]); return 2; }
  CHECK(NOPS == DFL_OP_COUNT, "ops.def has %d rows, DFL_OP_COUNT is %d", NOPS, (int)DFL_OP_COUNT);
  for (int i = 0; i < NROWS; i++) /* one row an op: a second one would be silently ignored */
    for (int j = i + 1; j < NROWS; j++) CHECK(rows[i].op != rows[j].op, "two rows for %s", dfl_opcode_name(rows[i].op));
  uint64_t seed = 0;
  if (!drop) {
    rng_init("ir_op_table");
    seed = rng_s;
  }
  int missing = 0, reported_other = 0, case_fails = 0;
  for (int k = 0; k < NOPS; k++) {
    const op_row *row = NULL;
    for (int i = 0; i < NROWS; i++)
      if (rows[i].op == ops[k].op) row = &rows[i];
    int dropped = drop && !strcmp(drop, ops[k].name);
    if (dropped && !drop_grad) row = NULL;
    const op_case *fwd = row && row->fwd.fn ? &row->fwd : NULL;
    const op_case *grad = row && row->grad.fn && !(dropped && drop_grad) ? &row->grad : NULL;
    const char *why = !row ? "no row in the op table" : !fwd ? "no CPU forward case"
                    : ops[k].differentiable && !grad ? "differentiable, but no finite-difference gradient case" : NULL;
    if (why) {
      fprintf(drop ? stdout : stderr, "%s %s: %s (tests/ir/test_op_table.c)\n", drop ? "missing" : "FAIL", ops[k].name, why);
      missing++;
      reported_other += !dropped;
      continue;
    }
    if (drop) continue; /* the walk alone */
    char status[160] = "ok";
    for (int j = 0; j < 2; j++) {
      const op_case *oc = j ? grad : fwd;
      if (!oc) continue;
      case_run *r = run_once(oc->fn, seed);
      if (r->failed) snprintf(status, sizeof status, "FAIL: %s failed %d check(s)", oc->name, r->failed), case_fails++;
      else if (!r->ran[ops[k].op])
        snprintf(status, sizeof status, "FAIL: %s never ran %s on the CPU", oc->name, ops[k].name), case_fails++;
    }
    printf("%-18s forward %-20s gradient %-16s %s\n", ops[k].name, fwd->name,
           grad ? grad->name : ops[k].differentiable ? "?" : "-", status);
    if (strcmp(status, "ok")) fprintf(stderr, "%s %s\n", ops[k].name, status);
  }
  if (drop) { /* the walk must report the dropped op, and only it */
    int ok = missing == 1 && reported_other == 0;
    printf("ir_op_table %s %s: %s\n", drop_grad ? "--drop-grad" : "--drop", drop, ok ? "reported (ok)" : "NOT reported as the only one");
    return ok ? 0 : 1;
  }
  if (missing || case_fails || fails) {
    fprintf(stderr, "ir_op_table: %d op(s) without a case, %d failing, %d other check(s)\n", missing, case_fails, fails);
    return 1;
  }
  printf("ir_op_table: every op of compiler/ops.def (%d) has its cases, all pass\n", NOPS);
  return 0;
}
