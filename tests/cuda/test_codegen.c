/*
** test_codegen: the generated CUDA of pointwise fusion groups (compiler/codegen.c), without a GPU.
**   - a chain of pointwise ops (every row of compiler/pointwise.def: element, column and scalar
**     inputs, two-output ops, an in-place accumulator, an f32 value between bf16 ones, an odd
**     element count beside a multiple of 8) generates exactly tests/cuda/codegen_chain.cu (the
**     golden file: `cuda_codegen --update` writes it again after a deliberate change);
**   - that source compiles with NVRTC for sm_80 and sm_90a, and each group's kernel is in the cubin;
**   - a graph without a pointwise op generates nothing.
** The kernels' numbers are checked against the CPU on the GPU machine (cuda_ops: every pointwise
** case runs through its group; case_pw_chain is a vertical one).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "compiler/codegen.h"
#include "compiler/emit.h"
#include "compiler/lower.h"
#include "compiler/status.h"

static int fails;
#define CHECK_FAILED fails++
#include "tests/common/check.h"

#define GOLDEN "tests/cuda/codegen_chain.cu"

static int has(const void *bin, size_t n, const char *name) {
  size_t l = strlen(name) + 1;
  for (size_t i = 0; i + l <= n; i++)
    if (!memcmp((const char *)bin + i, name, l)) return 1;
  return 0;
}

static void build(dfl_graph *g) {
  dfl_graph_init(g);
  const int64_t R = 4, C = 48;
  int x = dfl_tensor_2d(g, "x", DFL_BF16, DFL_T_INPUT, R, C), y = dfl_tensor_2d(g, "y", DFL_BF16, DFL_T_INPUT, R, C);
  int s = dfl_tensor_1d(g, "s", DFL_F32, DFL_T_INPUT, 1);
  int al = dfl_tensor_1d(g, "A_log", DFL_F32, DFL_T_FROZEN, C), db = dfl_tensor_1d(g, "dt_bias", DFL_F32, DFL_T_FROZEN, C);
  int acc = dfl_tensor_2d(g, "acc", DFL_F32, DFL_T_STATE, R, C);
  int a = dfl_tensor_2d(g, "a", DFL_BF16, DFL_T_ACT, R, C), sw = dfl_tensor_2d(g, "sw", DFL_F32, DFL_T_ACT, R, C);
  int z = dfl_tensor_2d(g, "z", DFL_BF16, DFL_T_ACT, R, C), sm = dfl_tensor_2d(g, "sm", DFL_BF16, DFL_T_ACT, R, C);
  int ga = dfl_tensor_2d(g, "g", DFL_F32, DFL_T_ACT, R, C), be = dfl_tensor_2d(g, "beta", DFL_F32, DFL_T_ACT, R, C);
  int dg = dfl_tensor_2d(g, "dg", DFL_BF16, DFL_T_ACT, R, C), du = dfl_tensor_2d(g, "du", DFL_BF16, DFL_T_ACT, R, C);
  int cp = dfl_tensor_2d(g, "cp", DFL_F32, DFL_T_ACT, R, C);
  dfl_attrs at;
  memset(&at, 0, sizeof at);
  dfl_op_add(g, DFL_OP_ADD, (int[]){x, y}, 2, &a, 1, &at);
  dfl_op_add(g, DFL_OP_SWIGLU, (int[]){a, y}, 2, &sw, 1, &at);
  at.alpha = -0.75;
  dfl_op_add(g, DFL_OP_SCALE, (int[]){sw, s}, 2, &z, 1, &at);
  at.alpha = 0;
  dfl_op_add(g, DFL_OP_SIGMOID_MUL, (int[]){z, a}, 2, &sm, 1, &at);
  dfl_op_add(g, DFL_OP_GDN_GATES, (int[]){sm, z, al, db}, 4, (int[]){ga, be}, 2, &at);
  dfl_op_add(g, DFL_OP_SWIGLU_BWD, (int[]){a, z, sm}, 3, (int[]){dg, du}, 2, &at);
  dfl_op_add(g, DFL_OP_ACCUM, (int[]){acc, ga}, 2, &acc, 1, &at);
  dfl_op_add(g, DFL_OP_COPY, &dg, 1, &cp, 1, &at);
  /* a second group: 7 elements (the element-at-a-time path), FILL and a COPY of it */
  int f = dfl_tensor_1d(g, "f", DFL_F32, DFL_T_ACT, 7), f2 = dfl_tensor_1d(g, "f16", DFL_F16, DFL_T_OUTPUT, 7);
  at.alpha = 0.1;
  g->cur_phase = DFL_PH_LOSS;
  dfl_op_add(g, DFL_OP_FILL, NULL, 0, &f, 1, &at);
  dfl_op_add(g, DFL_OP_COPY, &f, 1, &f2, 1, &at);
  /* a third: windows of a wider row, columns 16..31 of [4, 40] copied (16-byte words) and GDN_GATES' a and
  ** b at columns 3 and 19 (element at a time) */
  int wide = dfl_tensor_2d(g, "wide", DFL_BF16, DFL_T_INPUT, R, 40), cw = dfl_tensor_2d(g, "cw", DFL_BF16, DFL_T_ACT, R, 16);
  int al2 = dfl_tensor_1d(g, "A_log2", DFL_F32, DFL_T_FROZEN, 16), db2 = dfl_tensor_1d(g, "dt_bias2", DFL_F32, DFL_T_FROZEN, 16);
  int g2 = dfl_tensor_2d(g, "g2", DFL_F32, DFL_T_ACT, R, 16), b2 = dfl_tensor_2d(g, "beta2", DFL_F32, DFL_T_ACT, R, 16);
  memset(&at, 0, sizeof at);
  at.win[0] = 16;
  dfl_op_add(g, DFL_OP_COPY, &wide, 1, &cw, 1, &at);
  at.win[0] = 3, at.win[1] = 19;
  dfl_op_add(g, DFL_OP_GDN_GATES, (int[]){wide, wide, al2, db2}, 4, (int[]){g2, b2}, 2, &at);
  /* a fourth, a row group: the gated attention's output gate and its FP8 quantization (rows of 40) */
  int gx = dfl_tensor_2d(g, "gx", DFL_BF16, DFL_T_INPUT, R, 40), gsm = dfl_tensor_2d(g, "gsm", DFL_BF16, DFL_T_ACT, R, 40);
  int gq = dfl_tensor_2d(g, "gq", DFL_F8E4M3, DFL_T_ACT, R, 40), gs = dfl_tensor_1d(g, "gq_scale", DFL_F32, DFL_T_ACT, R);
  memset(&at, 0, sizeof at);
  dfl_op_add(g, DFL_OP_SIGMOID_MUL, (int[]){gx, wide}, 2, &gsm, 1, &at);
  dfl_op_add(g, DFL_OP_QUANT_F8, &gsm, 1, (int[]){gq, gs}, 2, &at);
  /* a fifth, a row group with a segmented reduction: the gated norm over heads of 16 with its z a window
  ** of `wide` at column 8, then its output's quantization */
  int nx = dfl_tensor_2d(g, "nx", DFL_BF16, DFL_T_INPUT, R, 32), nw = dfl_tensor_1d(g, "nw", DFL_BF16, DFL_T_FROZEN, 16);
  int ny = dfl_tensor_2d(g, "ny", DFL_BF16, DFL_T_ACT, R, 32), nq = dfl_tensor_2d(g, "nq", DFL_F8E4M3, DFL_T_ACT, R, 32);
  int ns = dfl_tensor_1d(g, "nq_scale", DFL_F32, DFL_T_ACT, R);
  memset(&at, 0, sizeof at);
  at.group = 16, at.eps = 1e-6, at.win[1] = 8;
  dfl_op_add(g, DFL_OP_NORM_GATE, (int[]){nx, wide, nw}, 3, &ny, 1, &at);
  memset(&at, 0, sizeof at);
  dfl_op_add(g, DFL_OP_QUANT_F8, &ny, 1, (int[]){nq, ns}, 2, &at);
}

static int tensor(const dfl_graph *g, const char *name) {
  for (int t = 0; t < g->nt; t++)
    if (!strcmp(g->t[t].name, name)) return t;
  return -1;
}

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long m = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)m + 1);
  *n = s ? fread(s, 1, (size_t)m, f) : 0;
  if (s) s[*n] = 0;
  fclose(f);
  return s;
}

int main(int argc, char **argv) {
  int update = argc > 1 && !strcmp(argv[1], "--update");
  dfl_graph g;
  build(&g);
  dfl_groups gs;
  CHECK(dfl_lower_groups(&g, NULL, NULL, &gs) == DFL_OK);
  CHECK(gs.n == 5 && gs.g[0].n == 8 && gs.g[1].n == 2 && gs.g[2].n == 2 && gs.g[3].n == 2 && gs.g[3].rows == 4 &&
        gs.g[3].cols == 40 && !gs.g[0].rows && gs.g[4].n == 2 && gs.g[4].cols == 32 && gs.g[4].quant, "%d groups", gs.n);
  /* which tensors the generated code stores: a row group's quantized input that nothing else reads
  ** stays in registers (the harness of cuda_ops compares only what is stored) */
  CHECK(!dfl_codegen_stores(&g, &gs, tensor(&g, "gsm")) && !dfl_codegen_stores(&g, &gs, tensor(&g, "ny")),
        "a fused quantization's input is stored");
  CHECK(dfl_codegen_stores(&g, &gs, tensor(&g, "gq")) && dfl_codegen_stores(&g, &gs, tensor(&g, "nq_scale")) &&
            dfl_codegen_stores(&g, &gs, tensor(&g, "cw")) && dfl_codegen_stores(&g, &gs, tensor(&g, "g2")),
        "a group's output is not stored");
  char *src = NULL;
  size_t len = 0;
  CHECK(dfl_codegen_source(&g, &gs, &src, &len) == DFL_OK && src && len == strlen(src));
  if (src && update) {
    FILE *f = fopen(GOLDEN, "wb");
    CHECK(f && fwrite(src, 1, len, f) == len && !fclose(f), "cannot write " GOLDEN);
    printf("wrote %s\n", GOLDEN);
  } else if (src) {
    size_t glen = 0;
    char *want = slurp(GOLDEN, &glen);
    CHECK(want, "cannot read %s (run from the repository root)", GOLDEN);
    if (want && (glen != len || memcmp(want, src, len))) {
      size_t i = 0;
      while (i < len && i < glen && want[i] == src[i]) i++;
      CHECK(0, "the generated source differs from %s at byte %zu: `cuda_codegen --update` after a deliberate change", GOLDEN, i);
    }
    free(want);
  }
  const char *archs[] = {"sm_80", "sm_90a"};
  for (int k = 0; src && k < 2; k++) {
    void *bin = NULL;
    size_t n = 0;
    CHECK(dfl_nvrtc_compile(src, archs[k], "", &bin, &n, NULL) == DFL_OK, "NVRTC compile for %s", archs[k]);
    for (int m = 0; bin && m < gs.n; m++) {
      char name[32];
      dfl_codegen_kernel_name(m, name, sizeof name);
      CHECK(has(bin, n, name), "%s missing from the %s cubin", name, archs[k]);
    }
    free(bin);
  }
  free(src);
  dfl_groups_free(&gs);
  dfl_graph_free(&g);

  /* the quantized input read after the group (a COPY): stored */
  dfl_graph_init(&g);
  int qx = dfl_tensor_2d(&g, "x", DFL_BF16, DFL_T_INPUT, 4, 40), qg = dfl_tensor_2d(&g, "gate", DFL_BF16, DFL_T_INPUT, 4, 40);
  int qm = dfl_tensor_2d(&g, "gated", DFL_BF16, DFL_T_ACT, 4, 40), qq = dfl_tensor_2d(&g, "q", DFL_F8E4M3, DFL_T_ACT, 4, 40);
  int qs = dfl_tensor_1d(&g, "q_scale", DFL_F32, DFL_T_ACT, 4), qc = dfl_tensor_2d(&g, "copy", DFL_F32, DFL_T_ACT, 4, 40);
  dfl_attrs a0 = {0};
  dfl_op_add(&g, DFL_OP_SIGMOID_MUL, (int[]){qx, qg}, 2, &qm, 1, &a0);
  dfl_op_add(&g, DFL_OP_QUANT_F8, &qm, 1, (int[]){qq, qs}, 2, &a0);
  dfl_op_add(&g, DFL_OP_COPY, &qm, 1, &qc, 1, &a0);
  CHECK(dfl_lower_groups(&g, NULL, NULL, &gs) == DFL_OK && gs.n >= 1 && gs.g[0].quant, "the row group did not form");
  CHECK(dfl_codegen_stores(&g, &gs, qm), "a quantized input read outside its group is not stored");
  dfl_groups_free(&gs);
  dfl_graph_free(&g);

  /* nothing pointwise: no source */
  dfl_graph_init(&g);
  int x = dfl_tensor_2d(&g, "x", DFL_BF16, DFL_T_INPUT, 4, 8), w = dfl_tensor_2d(&g, "w", DFL_BF16, DFL_T_FROZEN, 8, 8);
  dfl_matmul(&g, x, w, 0, 1, DFL_BF16, "y");
  CHECK(dfl_lower_groups(&g, NULL, NULL, &gs) == DFL_OK && gs.n == 0);
  src = (char *)1;
  CHECK(dfl_codegen_source(&g, &gs, &src, &len) == DFL_OK && src == NULL && len == 0);
  dfl_groups_free(&gs);
  dfl_graph_free(&g);
  if (fails) fprintf(stderr, "cuda_codegen: %d failure(s)\n", fails);
  else printf("cuda_codegen: ok\n");
  return fails != 0;
}
