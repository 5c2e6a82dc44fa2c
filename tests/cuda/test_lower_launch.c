/* test_lower_launch.c: the launches compiler/lower_launch.c chooses at build time, per variant.
**   - RMSNORM: bf16 rows of 1024 k take the pipelined row kernel (bf16 weight: _r; f32 weight: _rf),
**     rows of 256 V the warp kernels, groups of 8 L the vector kernel (one group a block above 32
**     lanes), anything else the warp-per-group kernel; a tensor placed off 16 bytes leaves the 16-byte
**     kernels; the quantized form's kernels likewise, and a row no quantized kernel takes is refused;
**   - the grid rules: rows (capped by CTAs an SM), warps, one CTA;
**   - the hybrid's conv (split form), L2NORM and NORM_GATE: the 16-byte kernels for 16-bit tensors;
**   - ROPE: partial, the normed pair (one launch), f32 pairs (one a tensor), the element kernel;
**   - the block-row ops' access unit and column-sum parts, SUM's partials, GATHER;
**   - multi-tensor groups (SUMSQ_ACC, ADAMW): their size limit, the flat and table kernels, members;
**   - ATTENTION and its backward: wgmma, mma.sync (and their smaller-stage forms on 99 KB parts) and
**     CUDA-core kernels by the target's row, head_dim, dtype and alignment; the wgmma key-major pass's
**     parts (at init: by the SM count and the scratch), a shape no kernel's shared memory fits refused,
**     and found by dflc check's pass over the graph (dfl_lower_check);
**   - LINEAR_CE's row kernels per chunk (a short last one, soft labels, the element path) and staging
**     copies; SCATTER_ADD with and without its conversion; RMSNORM_BWD's pipelined kernels (parts at
**     init in a build, from the occupancy on a device), vector and per-group kernels;
**   - GATED_DELTA: the chunk kernels by dk and dv, the recurrence for f32 or a small block, a refusal;
**   - CONCAT_COLS makes one launch per input; a GEMM and a pointwise op are not lowered here;
**   - the text form names the kernel, grid, cap, block and the 16-byte assumption. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "compiler/graph.h"
#include "compiler/lower_launch.h"
#include "compiler/emit.h"
#include "compiler/plan.h"
#include "compiler/status.h"

static int failures;
static int dfl_block_parts_test(int64_t Q) { return dfl_block_parts(Q); }
#include "tests/common/check.h"

/* one RMSNORM over R x D in dtype dt, groups of G, weight in wdt; quantized: the fused FP8 form */
static int norm_graph(dfl_graph *g, int64_t R, int D, int G, dfl_dtype dt, dfl_dtype wdt, int quant) {
  dfl_graph_init(g);
  int x = dfl_tensor_2d(g, "x", dt, DFL_T_INPUT, R, D), w = dfl_tensor_1d(g, "w", wdt, DFL_T_PARAM, G);
  int rs = dfl_tensor_1d(g, "rstd", DFL_F32, DFL_T_ACT, R * D / G);
  dfl_attrs a;
  memset(&a, 0, sizeof a);
  a.group = G, a.eps = 1e-6;
  if (quant) {
    int q = dfl_tensor_2d(g, "q", DFL_F8E4M3, DFL_T_ACT, R, D), s = dfl_tensor_1d(g, "s", DFL_F32, DFL_T_ACT, R);
    a.mid_dtype = DFL_BF16;
    return dfl_op_add(g, DFL_OP_RMSNORM, (int[]){x, w}, 2, (int[]){q, rs, s}, 3, &a);
  }
  int y = dfl_tensor_2d(g, "y", dt, DFL_T_ACT, R, D);
  return dfl_op_add(g, DFL_OP_RMSNORM, (int[]){x, w}, 2, (int[]){y, rs}, 2, &a);
}

/* the one launch of op i, with tensor `shift` (>= 0) placed 8 bytes off alignment */
static dfl_launch one(const dfl_graph *g, int i, int shift, int *n) {
  int64_t off[32];
  for (int t = 0; t < g->nt && t < 32; t++) off[t] = 256 * (int64_t)t;
  if (shift >= 0) off[shift] += 8;
  dfl_lower_env env = {.offset = off};
  dfl_launch l[DFL_LAUNCH_MAX];
  memset(l, 0, sizeof l);
  *n = dfl_lower_launch(g, i, &env, l);
  return l[0];
}

static void expect(int64_t R, int D, int G, dfl_dtype dt, dfl_dtype wdt, int quant, int shift, int kernel,
                   int64_t grid, int block, int fill, int vec) {
  dfl_graph g;
  int i = norm_graph(&g, R, D, G, dt, wdt, quant), n;
  dfl_launch l = one(&g, i, shift, &n);
  CHECK(n == 1 && l.kernel == kernel && l.grid == grid && l.block == block && l.fill == fill && l.vec == vec,
        ": R %lld D %d G %d %s w %s%s shift %d: n %d, %s grid %lld block %d fill %d vec %d; want %s grid %lld "
        "block %d fill %d vec %d", (long long)R, D, G, dfl_dtype_name(dt), dfl_dtype_name(wdt), quant ? " quant" : "",
        shift, n, dfl_emit_kernel_name(l.kernel), (long long)l.grid, l.block, l.fill, l.vec,
        dfl_emit_kernel_name(kernel), (long long)grid, block, fill, vec);
  dfl_graph_free(&g);
}

/* --- attention (compiler/lower_attn.c) --- */
/* ATTENTION (op 0) and ATTENTION_BWD (op 1) of 2 samples in dtype dt: DFLASH (N blocks of B) or CAUSAL */
static void att_graph(dfl_graph *g, int dflash, int S, int N, int B, int hd, int nh, int nkv, dfl_dtype dt) {
  dfl_graph_init(g);
  int batch = 2, qr = dflash ? batch * N * B : batch * S, kr = batch * S;
  dfl_attrs a;
  memset(&a, 0, sizeof a);
  a.mask = dflash ? DFL_MASK_DFLASH : DFL_MASK_CAUSAL, a.batch = batch, a.S = S, a.N = N, a.B = B;
  a.heads = nh, a.kv_heads = nkv, a.head_dim = hd, a.scale = 0.1;
  int q = dfl_tensor_2d(g, "q", dt, DFL_T_INPUT, qr, nh * hd), k = dfl_tensor_2d(g, "k", dt, DFL_T_INPUT, kr, nkv * hd);
  int v = dfl_tensor_2d(g, "v", dt, DFL_T_INPUT, kr, nkv * hd), o = dfl_tensor_2d(g, "o", dt, DFL_T_ACT, qr, nh * hd);
  int lse = dfl_tensor_1d(g, "lse", DFL_F32, DFL_T_ACT, (int64_t)qr * nh), dout = dfl_tensor_2d(g, "do", dt, DFL_T_INPUT, qr, nh * hd);
  int dq = dfl_tensor_2d(g, "dq", dt, DFL_T_ACT, qr, nh * hd), dk = dfl_tensor_2d(g, "dk", dt, DFL_T_ACT, kr, nkv * hd);
  int dv = dfl_tensor_2d(g, "dv", dt, DFL_T_ACT, kr, nkv * hd);
  if (!dflash) {
    dfl_op_add(g, DFL_OP_ATTENTION, (int[]){q, k, v}, 3, (int[]){o, lse}, 2, &a);
    dfl_op_add(g, DFL_OP_ATTENTION_BWD, (int[]){q, k, v, o, lse, dout}, 6, (int[]){dq, dk, dv}, 3, &a);
    return;
  }
  int kn = dfl_tensor_2d(g, "kn", dt, DFL_T_INPUT, qr, nkv * hd), vn = dfl_tensor_2d(g, "vn", dt, DFL_T_INPUT, qr, nkv * hd);
  int anc = dfl_tensor_1d(g, "anc", DFL_I32, DFL_T_INPUT, batch * N), kp = dfl_tensor_1d(g, "keep", DFL_I32, DFL_T_INPUT, batch * N);
  int dkn = dfl_tensor_2d(g, "dkn", dt, DFL_T_ACT, qr, nkv * hd), dvn = dfl_tensor_2d(g, "dvn", dt, DFL_T_ACT, qr, nkv * hd);
  dfl_op_add(g, DFL_OP_ATTENTION, (int[]){q, k, v, kn, vn, anc, kp}, 7, (int[]){o, lse}, 2, &a);
  dfl_op_add(g, DFL_OP_ATTENTION_BWD, (int[]){q, k, v, kn, vn, anc, kp, o, lse, dout}, 10, (int[]){dq, dk, dv, dkn, dvn}, 5, &a);
}
/* op i's launches for the target arch (nsm SMs, 0: a build; att_ref: forced to the CUDA cores); tensor
** `shift` 8 bytes off alignment (-1: none) */
static int att_lower(const dfl_graph *g, int i, const char *arch, int nsm, int att_ref, int shift, dfl_launch *l) {
  int64_t off[32];
  for (int t = 0; t < g->nt && t < 32; t++) off[t] = 256 * (int64_t)t;
  if (shift >= 0) off[shift] += 8;
  dfl_lower_env env = {.offset = off};
  if (dfl_lower_env_arch(&env, arch)) return -100;
  env.nsm = nsm;
  if (att_ref) env.att = DFL_ATT_CORES;
  memset(l, 0, sizeof *l * DFL_LAUNCH_MAX);
  return dfl_lower_launch(g, i, &env, l);
}
#define KN(k) dfl_emit_kernel_name(k)

static void attention_cases(void) {
  dfl_graph g;
  dfl_launch l[DFL_LAUNCH_MAX];
  /* DFLASH, head_dim 128, G 4, B 16 (64 rows a block): Hopper's wgmma forward, a CTA an SM at most */
  att_graph(&g, 1, 1024, 16, 16, 128, 32, 8, DFL_BF16);
  int n = att_lower(&g, 0, "sm_90a", 0, 0, -1, l);
  CHECK(n == 1 && l[0].kernel == DFL_K_ATT_FWD_WGD128 && l[0].grid == 2 * 8 * 8 && l[0].block == 384 && l[0].fill == 1 &&
        l[0].smem == 164928 && l[0].vec, ": dflash fwd sm_90a: %d %s grid %lld", n, KN(l[0].kernel), (long long)l[0].grid);
  CHECK(dfl_lower_att_family(l, n) == DFL_ATT_WGMMA);
  /* its backward: D (a warp a row pair), the wgmma query-major pass, the wgmma key-major pass whose parts
  ** a build leaves to init (the SM count), and their sum */
  n = att_lower(&g, 1, "sm_90a", 0, 0, -1, l);
  CHECK(n == 4 && l[0].kernel == DFL_K_ATT_BWD_DOT && l[0].grid == 2 * 16 * 16 * 32 / 8 && l[0].fill == DFL_FILL_OCC &&
        l[1].kernel == DFL_K_ATT_BWDQ_WG128 && l[1].grid == 128 && l[1].smem == 205888 &&
        l[2].kernel == DFL_K_ATT_BWDKV_WG128 && l[2].grid == 128 && l[2].arg == DFL_ARG_AT_INIT && l[2].block == 384 &&
        l[3].kernel == DFL_K_ATT_BWDKV_SUM && l[3].grid == 2 * 1024 * 8 * 128 / 2 / 256,
        ": dflash bwd sm_90a: %d %s %s %s arg %d", n, KN(l[0].kernel), KN(l[1].kernel), KN(l[2].kernel), l[2].arg);
  /* on a device of 132 SMs: 128 tiles fill a wave, but the scratch holds no second slab pair: one part */
  n = att_lower(&g, 1, "sm_90a", 132, 0, -1, l);
  CHECK(n == 4 && l[2].arg == 1 && l[2].grid == 128, ": dflash bwd, 132 SMs: parts %d grid %lld", l[2].arg, (long long)l[2].grid);
  /* A100 (163 KB): the mma.sync kernels, the key-major pass in 64-key CTAs of 4 warps */
  n = att_lower(&g, 0, "sm_80", 0, 0, -1, l);
  CHECK(n == 1 && l[0].kernel == DFL_K_ATT_FWD_TC128 && l[0].grid == 2 * 8 && l[0].grid_y == 8 && l[0].block == 128 &&
        l[0].smem == 106624, ": dflash fwd sm_80: %s", KN(l[0].kernel));
  CHECK(dfl_lower_att_family(l, n) == DFL_ATT_MMA);
  n = att_lower(&g, 1, "sm_80", 0, 0, -1, l);
  CHECK(n == 3 && l[1].kernel == DFL_K_ATT_BWDQ_TC128 && l[1].grid == 16 && l[1].grid_y == 8 && l[1].smem == 115712 &&
        l[2].kernel == DFL_K_ATT_BWDKV_TC128S && l[2].grid == 1024 / 64 * 2 * 8 && l[2].block == 128,
        ": dflash bwd sm_80: %d %s %s", n, KN(l[1].kernel), KN(l[2].kernel));
  /* 99 KB parts: the forward and the query-major pass with smaller stages */
  n = att_lower(&g, 0, "sm_86", 0, 0, -1, l);
  CHECK(n == 1 && l[0].kernel == DFL_K_ATT_FWD_TC128S && l[0].smem == 71808, ": dflash fwd sm_86: %s", KN(l[0].kernel));
  n = att_lower(&g, 1, "sm_86", 0, 0, -1, l);
  CHECK(n == 3 && l[1].kernel == DFL_K_ATT_BWDQ_TC128S && l[1].smem == 98304, ": dflash bwd sm_86: %s", KN(l[1].kernel));
  /* sm_90 (Hopper without the sm_90a cubin): mma.sync, the 128-key key-major pass */
  n = att_lower(&g, 1, "sm_90", 0, 0, -1, l);
  CHECK(n == 3 && l[1].kernel == DFL_K_ATT_BWDQ_TC128 && l[2].kernel == DFL_K_ATT_BWDKV_TC128 && l[2].block == 256,
        ": dflash bwd sm_90: %s %s", KN(l[1].kernel), KN(l[2].kernel));
  /* forced to the CUDA cores (dfl_cuda_opts.att_ref), a tensor off 16 bytes, f32: the CUDA-core kernels */
  n = att_lower(&g, 0, "sm_90a", 132, 1, -1, l);
  CHECK(n == 1 && l[0].kernel == DFL_K_ATT_FWD && l[0].grid == 2 * 16 * 2 && l[0].grid_y == 8 && l[0].block == 256 &&
        !l[0].vec, ": dflash fwd, att_ref: %s grid %lld", KN(l[0].kernel), (long long)l[0].grid);
  CHECK(dfl_lower_att_family(l, n) == DFL_ATT_CORES);
  n = att_lower(&g, 1, "sm_90a", 132, 0, 3, l); /* kn */
  CHECK(n == 2 && l[0].kernel == DFL_K_ATT_BWD && l[1].kernel == DFL_K_ATT_BWD_KV && l[1].grid == 2 * 32 + 2 * 16 &&
        l[0].smem == (2 * 32 * 128 + 2 * 32 * 129 + 2 * 32 * 33 + 64) * 4, ": dflash bwd, kn off 16 bytes: %d %s", n,
        KN(l[0].kernel));
  dfl_graph_free(&g);
  att_graph(&g, 1, 1024, 16, 16, 128, 32, 8, DFL_F32);
  n = att_lower(&g, 0, "sm_90a", 132, 0, -1, l);
  CHECK(n == 1 && l[0].kernel == DFL_K_ATT_FWD, ": dflash fwd f32: %s", KN(l[0].kernel));
  dfl_graph_free(&g);
  /* the blocks twice the context's rows: the scratch holds a second slab pair, two parts on 132 SMs */
  att_graph(&g, 1, 256, 32, 16, 128, 32, 8, DFL_BF16);
  n = att_lower(&g, 1, "sm_90a", 132, 0, -1, l);
  CHECK(n == 4 && l[2].kernel == DFL_K_ATT_BWDKV_WG128 && l[2].arg == 2 && l[2].grid == 32 * 2,
        ": dflash bwd, B N = 2 S: parts %d grid %lld", l[2].arg, (long long)l[2].grid);
  dfl_graph_free(&g);
  /* head_dim 64: the mma.sync 64 kernels, also on Hopper (the wgmma ones are head_dim 128) */
  att_graph(&g, 1, 1024, 16, 16, 64, 32, 8, DFL_BF16);
  n = att_lower(&g, 0, "sm_90a", 0, 0, -1, l);
  CHECK(n == 1 && l[0].kernel == DFL_K_ATT_FWD_TC64, ": dflash fwd hd 64: %s", KN(l[0].kernel));
  n = att_lower(&g, 1, "sm_90a", 0, 0, -1, l);
  CHECK(n == 3 && l[1].kernel == DFL_K_ATT_BWDQ_TC64 && l[2].kernel == DFL_K_ATT_BWDKV_TC64, ": dflash bwd hd 64: %s %s",
        KN(l[1].kernel), KN(l[2].kernel));
  dfl_graph_free(&g);
  /* CAUSAL head_dim 128 (the target): wgmma forward, units of 128 / G positions; its backward on the CUDA cores */
  att_graph(&g, 0, 2048, 0, 0, 128, 32, 8, DFL_BF16);
  n = att_lower(&g, 0, "sm_90a", 0, 0, -1, l);
  CHECK(n == 1 && l[0].kernel == DFL_K_ATT_FWD_WG128 && l[0].grid == 2 * (2048 / 32) * 8, ": causal fwd: %s grid %lld",
        KN(l[0].kernel), (long long)l[0].grid);
  n = att_lower(&g, 1, "sm_90a", 0, 0, -1, l);
  CHECK(n == 2 && l[0].kernel == DFL_K_ATT_BWD && l[1].kernel == DFL_K_ATT_BWD_KV, ": causal bwd: %s", KN(l[0].kernel));
  dfl_graph_free(&g);
  /* CAUSAL head_dim 256 (the hybrid targets): wgmma on Hopper, the 64-row mma.sync kernel elsewhere (it
  ** fits 99 KB exactly); the backward's CUDA-core kernel (140,032 bytes) is refused on a 99 KB part */
  att_graph(&g, 0, 512, 0, 0, 256, 16, 2, DFL_BF16);
  n = att_lower(&g, 0, "sm_90a", 0, 0, -1, l);
  CHECK(n == 1 && l[0].kernel == DFL_K_ATT_FWD_WG256, ": causal fwd hd 256 sm_90a: %s", KN(l[0].kernel));
  n = att_lower(&g, 0, "sm_120a", 0, 0, -1, l);
  CHECK(n == 1 && l[0].kernel == DFL_K_ATT_FWD_TC256 && l[0].smem == 101376 && l[0].grid == 2 * (512 / 8) &&
        l[0].grid_y == 2, ": causal fwd hd 256 sm_120a: %s grid %lld", KN(l[0].kernel), (long long)l[0].grid);
  n = att_lower(&g, 1, "sm_90a", 0, 0, -1, l);
  CHECK(n == 2 && l[0].kernel == DFL_K_ATT_BWD && l[0].smem == 140032, ": causal bwd hd 256 sm_90a: %d", n);
  fprintf(stderr, "(a refusal follows)\n");
  n = att_lower(&g, 1, "sm_86", 0, 0, -1, l);
  CHECK(n == -DFL_ESHAPE, ": causal bwd hd 256 on 99 KB lowered (%d)", n);
  /* `dflc check`'s pass over a graph (dfl_lower_check): the op no kernel takes, by index, on the row
  ** that lacks it; none on Hopper; an architecture without a row refused */
  {
    int bad = 7;
    fprintf(stderr, "(a refusal follows)\n");
    CHECK(dfl_lower_check(&g, NULL, "sm_86", &bad) == DFL_ESHAPE && bad == 1, ": check on sm_86: op %d", bad);
    CHECK(dfl_lower_check(&g, NULL, "sm_90a", &bad) == DFL_OK && bad == -1, ": check on sm_90a: op %d", bad);
    fprintf(stderr, "(a refusal follows)\n");
    CHECK(dfl_lower_check(&g, NULL, "sm_70", &bad) == DFL_ERR && bad == -1, ": check on sm_70: op %d", bad);
  }
  /* without the target's shared memory (an env with offsets only) attention is not lowered */
  {
    dfl_lower_env env = {NULL};
    fprintf(stderr, "(a refusal follows)\n");
    CHECK(dfl_lower_launch(&g, 0, &env, l) < 0, ": attention lowered without the target's row");
  }
  dfl_graph_free(&g);
}

/* --- the loss head, SCATTER_ADD, the norm's backward (compiler/lower_rows.c) --- */
static int occ3(void *ctx, int k, int block, int smem) { (void)ctx, (void)k, (void)block, (void)smem; return 3; }
/* op i's launches: env of row sm_90a (smem: another row's shared memory, 0: its own), with a device of
** 132 SMs whose kernels hold 3 CTAs an SM (dev), tensor shift 8 bytes off (-1: none) */
static int rows_lower(const dfl_graph *g, int i, int dev, int smem, int shift, dfl_launch *l) {
  int64_t off[32];
  for (int t = 0; t < g->nt && t < 32; t++) off[t] = 256 * (int64_t)t;
  if (shift >= 0) off[shift] += 8;
  dfl_lower_env env = {.offset = off};
  if (dfl_lower_env_arch(&env, "sm_90a")) return -100;
  if (smem) env.smem = smem;
  if (dev) env.nsm = 132, env.occupancy = occ3;
  memset(l, 0, sizeof *l * DFL_LAUNCH_MAX);
  return dfl_lower_launch(g, i, &env, l);
}
/* LINEAR_CE of R rows of 64 over a vocabulary of V, anchors every B rows (0: none), soft labels (kd) */
static int lce_graph(dfl_graph *g, int R, int V, int B, int kd) {
  dfl_graph_init(g);
  int y = dfl_tensor_2d(g, "y", DFL_BF16, DFL_T_INPUT, R, 64), W = dfl_tensor_2d(g, "w", DFL_BF16, DFL_T_FROZEN, V, 64);
  int lab = dfl_tensor_1d(g, "lab", DFL_I32, DFL_T_INPUT, R), w = dfl_tensor_1d(g, "wt", DFL_F32, DFL_T_INPUT, R);
  int tg = dfl_tensor_2d(g, "t", DFL_BF16, DFL_T_INPUT, R, 64), num = dfl_tensor_1d(g, "num", DFL_F32, DFL_T_ACT, 1);
  int ce = dfl_tensor_1d(g, "ce", DFL_F32, DFL_T_ACT, R), cor = dfl_tensor_1d(g, "cor", DFL_F32, DFL_T_ACT, R);
  int hit = dfl_tensor_1d(g, "hit", DFL_F32, DFL_T_ACT, R), dy = dfl_tensor_2d(g, "dy", DFL_BF16, DFL_T_ACT, R, 64);
  dfl_attrs a;
  memset(&a, 0, sizeof a);
  a.vocab_chunk = 256, a.topk = 8, a.B = B, a.kd_alpha = kd ? 0.5 : 0, a.kd_temp = 1;
  return dfl_op_add(g, DFL_OP_LINEAR_CE, (int[]){y, W, lab, w, tg}, kd ? 5 : 4, (int[]){num, ce, cor, hit, dy}, 5, &a);
}
/* RMSNORM_BWD over R x D, groups of G, in dt, with the addend */
static int rbw_graph(dfl_graph *g, int R, int D, int G, dfl_dtype dt, int addend) {
  dfl_graph_init(g);
  int x = dfl_tensor_2d(g, "x", dt, DFL_T_INPUT, R, D), w = dfl_tensor_1d(g, "w", dt, DFL_T_PARAM, G);
  int rs = dfl_tensor_1d(g, "rstd", DFL_F32, DFL_T_INPUT, (int64_t)R * D / G), dy = dfl_tensor_2d(g, "dy", dt, DFL_T_INPUT, R, D);
  int r = dfl_tensor_2d(g, "r", dt, DFL_T_INPUT, R, D), dx = dfl_tensor_2d(g, "dx", dt, DFL_T_ACT, R, D);
  int dw = dfl_tensor_1d(g, "dw", DFL_F32, DFL_T_ACT, G);
  dfl_attrs a;
  memset(&a, 0, sizeof a);
  a.group = G, a.eps = 1e-6;
  return dfl_op_add(g, DFL_OP_RMSNORM_BWD, (int[]){x, w, rs, dy, r}, addend ? 5 : 4, (int[]){dx, dw}, 2, &a);
}

static void rows_cases(void) {
  dfl_graph g;
  dfl_launch l[DFL_LAUNCH_MAX];
  /* the loss head: rows from vocab_chunk (2 chunks of 35), 16-byte logit rows; V 998 their element path */
  int i = lce_graph(&g, 70, 1000, 0, 0), n = rows_lower(&g, i, 0, 0, -1, l);
  CHECK(n == 3 && l[0].kernel == DFL_K_LCE_ROW && l[0].grid == 35 && l[1].grid == 35 && l[0].block == 512 &&
        l[0].arg == 1 && l[2].kernel == DFL_K_LCE_NUM && l[2].grid == 1 && l[2].block == 1024,
        ": linear_ce: %d %s grid %lld, %lld arg %d", n, KN(l[0].kernel), (long long)l[0].grid, (long long)l[1].grid, l[0].arg);
  dfl_graph_free(&g);
  i = lce_graph(&g, 70, 998, 0, 1), n = rows_lower(&g, i, 0, 0, -1, l);
  CHECK(n == 3 && l[0].kernel == DFL_K_LCE_ROW_KD && l[0].arg == 0, ": linear_ce soft V 998: %s arg %d", KN(l[0].kernel), l[0].arg);
  dfl_graph_free(&g);
  i = lce_graph(&g, 70, 1000, 0, 1), n = rows_lower(&g, i, 0, 0, -1, l);
  CHECK(n == 3 && l[0].kernel == DFL_K_LCE_ROW_KD && l[0].arg == 3, ": linear_ce soft: arg %d", l[0].arg);
  dfl_graph_free(&g);
  /* anchors every 4 rows left out: 54 rows in chunks of 16 (forced), a last one of 6, staged */
  setenv("DFL_LCE_ROWS", "16", 1);
  i = lce_graph(&g, 72, 1000, 4, 0), n = rows_lower(&g, i, 0, 0, -1, l);
  unsetenv("DFL_LCE_ROWS");
  CHECK(n == 5 && l[0].grid == 16 && l[1].grid == 6 && l[3].kernel == DFL_K_LCE_ROWS && l[3].grid == 16 &&
        l[4].grid == 6 && l[3].block == 256, ": linear_ce staged: %d grid %lld, %lld; copies %lld, %lld", n,
        (long long)l[0].grid, (long long)l[1].grid, (long long)l[3].grid, (long long)l[4].grid);
  dfl_graph_free(&g);
  /* SCATTER_ADD: into f32 directly; into bf16 through the f32 scratch and a conversion */
  for (int bf = 0; bf < 2; bf++) {
    dfl_graph_init(&g);
    int d = dfl_tensor_2d(&g, "d", DFL_BF16, DFL_T_INPUT, 70, 48), ids = dfl_tensor_1d(&g, "ids", DFL_I32, DFL_T_INPUT, 70);
    int o = dfl_tensor_2d(&g, "o", bf ? DFL_BF16 : DFL_F32, DFL_T_ACT, 50, 48);
    i = dfl_op_add(&g, DFL_OP_SCATTER_ADD, (int[]){d, ids}, 2, &o, 1, NULL);
    n = rows_lower(&g, i, 0, 0, -1, l);
    CHECK(n == 1 + bf && l[0].kernel == DFL_K_SCATTER && l[0].grid == (70 * 48 + 255) / 256 && l[0].fill == DFL_FILL_OCC &&
          (!bf || (l[1].kernel == DFL_K_COPY && l[1].grid == (50 * 48 + 255) / 256)), ": scatter_add (bf16 out %d): %d", bf, n);
    dfl_graph_free(&g);
  }
  /* the norm's backward: bf16 rows of 4096 take the pipelined kernel, its parts at init in a build; on a
  ** device (3 CTAs an SM at that block): 256 parts (a power of two <= 128 x 3), 256 CTAs */
  i = rbw_graph(&g, 1024, 4096, 4096, DFL_BF16, 0), n = rows_lower(&g, i, 0, 0, -1, l);
  CHECK(n == 2 && l[0].kernel == DFL_K_RMSNORM_BWD_P && l[0].block == 256 && l[0].smem == 128 * 256 &&
        l[0].arg == DFL_ARG_AT_INIT && l[1].kernel == DFL_K_RMSNORM_DW && l[1].grid == 128 && l[1].block == 1024,
        ": rmsnorm_bwd build: %d %s arg %d", n, KN(l[0].kernel), l[0].arg);
  n = rows_lower(&g, i, 1, 0, -1, l);
  CHECK(n == 2 && l[0].kernel == DFL_K_RMSNORM_BWD_P && l[0].arg == 256 && l[0].grid == 256, ": rmsnorm_bwd init: arg %d grid %lld",
        l[0].arg, (long long)l[0].grid);
  /* its two stages beyond the row's shared memory: the vector kernel, a 512-thread block a row */
  n = rows_lower(&g, i, 1, 32 * 1024, -1, l);
  CHECK(n == 2 && l[0].kernel == DFL_K_RMSNORM_BWD_V && l[0].block == 512 && l[0].smem == 512 * 32 && l[0].arg == 512 &&
        l[0].grid == 512, ": rmsnorm_bwd in 32 KB: %s block %d arg %d", KN(l[0].kernel), l[0].block, l[0].arg);
  /* dy off 16 bytes: the per-group kernel */
  n = rows_lower(&g, i, 1, 0, 3, l);
  CHECK(n == 2 && l[0].kernel == DFL_K_RMSNORM_BWD && l[0].block == 256 && l[0].arg == 512 && !l[0].vec,
        ": rmsnorm_bwd, dy off 16 bytes: %s", KN(l[0].kernel));
  dfl_graph_free(&g);
  /* with the addend: _pa, three stages; head norms (G 128) in rows of 4096 with the dw sums' stage */
  i = rbw_graph(&g, 1024, 4096, 4096, DFL_BF16, 1), n = rows_lower(&g, i, 0, 0, -1, l);
  CHECK(n == 2 && l[0].kernel == DFL_K_RMSNORM_BWD_PA && l[0].smem == 192 * 256, ": rmsnorm_bwd + addend: %s",
        KN(l[0].kernel));
  dfl_graph_free(&g);
  i = rbw_graph(&g, 64, 4096, 128, DFL_BF16, 0), n = rows_lower(&g, i, 0, 0, -1, l);
  CHECK(n == 2 && l[0].kernel == DFL_K_RMSNORM_BWD_P && l[0].smem == 160 * 256 && l[0].grid == 64,
        ": rmsnorm_bwd G 128: %s smem %d", KN(l[0].kernel), l[0].smem);
  dfl_graph_free(&g);
  /* f32: the vector kernel (16 groups of 16 lanes a block); G 40: a block a group */
  i = rbw_graph(&g, 64, 4096, 128, DFL_F32, 0), n = rows_lower(&g, i, 1, 0, -1, l);
  CHECK(n == 2 && l[0].kernel == DFL_K_RMSNORM_BWD_V && l[0].block == 512 && l[0].arg == 64 * 32 / 32,
        ": rmsnorm_bwd f32: %s arg %d", KN(l[0].kernel), l[0].arg);
  dfl_graph_free(&g);
  i = rbw_graph(&g, 30, 200, 40, DFL_BF16, 0), n = rows_lower(&g, i, 1, 0, -1, l);
  CHECK(n == 2 && l[0].kernel == DFL_K_RMSNORM_BWD && l[0].arg == 150 && l[0].grid == 150, ": rmsnorm_bwd G 40: %s arg %d",
        KN(l[0].kernel), l[0].arg);
  dfl_graph_free(&g);
}

/* GATED_DELTA over R rows (sequences of S), Hv value and Hk key heads of dk, values of dv, q/k/v in dt; its
** launches for sm_90a with `smem` bytes a block (0: the row's) */
static int gdn_lower(int64_t R, int S, int Hv, int Hk, int dk, int dv, dfl_dtype dt, int smem, dfl_launch *l) {
  dfl_graph g;
  dfl_graph_init(&g);
  int q = dfl_tensor_2d(&g, "q", dt, DFL_T_INPUT, R, (int64_t)Hk * dk), k = dfl_tensor_2d(&g, "k", dt, DFL_T_INPUT, R, (int64_t)Hk * dk);
  int v = dfl_tensor_2d(&g, "v", dt, DFL_T_INPUT, R, (int64_t)Hv * dv);
  int gg = dfl_tensor_2d(&g, "g", DFL_F32, DFL_T_INPUT, R, Hv), b = dfl_tensor_2d(&g, "b", DFL_F32, DFL_T_INPUT, R, Hv);
  int o = dfl_tensor_2d(&g, "o", dt, DFL_T_ACT, R, (int64_t)Hv * dv);
  dfl_attrs a;
  memset(&a, 0, sizeof a);
  a.heads = Hv, a.kv_heads = Hk, a.head_dim = dk, a.S = S;
  int op = dfl_op_add(&g, DFL_OP_GATED_DELTA, (int[]){q, k, v, gg, b}, 5, &o, 1, &a);
  dfl_lower_env env;
  memset(&env, 0, sizeof env);
  int n = -100;
  if (op >= 0 && !dfl_lower_env_arch(&env, "sm_90a")) {
    if (smem) env.smem = smem;
    n = dfl_lower_launch(&g, op, &env, l);
  }
  dfl_graph_free(&g);
  return n;
}

/* SWIGLU's quantized form (dfl_fuse_quant) over R rows of C bf16 features: its one launch */
static dfl_launch swiglu_q(int64_t R, int C, int *n) {
  dfl_graph g;
  dfl_graph_init(&g);
  int gt = dfl_tensor_2d(&g, "gate", DFL_BF16, DFL_T_INPUT, R, C), up = dfl_tensor_2d(&g, "up", DFL_BF16, DFL_T_INPUT, R, C), s;
  dfl_quant_f8(&g, dfl_swiglu(&g, gt, up, "h"), &s, "h8");
  *n = dfl_fuse_quant(&g) == 1 ? 0 : -100;
  dfl_launch l = {0};
  for (int i = 0; i < g.nops && !*n; i++)
    if (g.ops[i].code == DFL_OP_SWIGLU) l = one(&g, i, -1, n);
  dfl_graph_free(&g);
  return l;
}

int main(void) {
  { /* GATED_DELTA: the chunk kernels for bf16 dk 128 (the 27B's), dv = 2 dk's prep, the recurrence for f32 and
    ** for a block too small for the chunk kernels, and a refusal where its state does not fit either */
    dfl_launch l[DFL_LAUNCH_MAX];
    int n = gdn_lower(8192, 4096, 48, 16, 128, 128, DFL_BF16, 0, l);
    CHECK(n == 2 && l[0].kernel == DFL_K_GDN_PREP128 && l[0].grid == 2 * 64 * 48 && l[0].block == 128 &&
          l[0].smem == dfl_lower_gdn_prep_smem(128, 128) && l[0].vec && l[1].kernel == DFL_K_GDN_SCAN128 &&
          l[1].grid == 2 * 48 * 2 && l[1].smem == dfl_lower_gdn_scan_smem(128),
          ": gated delta bf16 dk 128: %d, %s grid %lld", n, n > 0 ? dfl_emit_kernel_name(l[0].kernel) : "-",
          n > 0 ? (long long)l[0].grid : 0ll);
    n = gdn_lower(140, 70, 6, 2, 64, 128, DFL_BF16, 0, l); /* 2 sequences of 70: 2 chunks each */
    CHECK(n == 2 && l[0].kernel == DFL_K_GDN_PREP64V128 && l[0].grid == 2 * 2 * 6 && l[1].kernel == DFL_K_GDN_SCAN64 &&
          l[1].grid == 2 * 6 * 2, ": gated delta dv = 2 dk: %d", n);
    n = gdn_lower(100, 50, 4, 2, 32, 32, DFL_F32, 0, l); /* 2 sequences */
    CHECK(n == 1 && l[0].kernel == DFL_K_GDN_REC && l[0].grid == 2 * 4 * 1 && l[0].block == 32 &&
          l[0].smem == (32 * 32 + 64) * 4 && !l[0].vec, ": gated delta f32: %d", n);
    n = gdn_lower(8192, 4096, 48, 16, 128, 128, DFL_BF16, 40000, l);
    CHECK(n == 1 && l[0].kernel == DFL_K_GDN_REC && l[0].grid == 2 * 48 * 4, ": gated delta, 40 KB a block: %d", n);
    fprintf(stderr, "(a refusal follows)\n");
    n = gdn_lower(8192, 4096, 48, 16, 128, 128, DFL_BF16, 10000, l);
    CHECK(n == -DFL_ESHAPE, ": gated delta, 10 KB a block: %d (a refusal expected)", n);
  }
  { /* the quantized SwiGLU: the pipelined kernel at two CTAs an SM up to 384 threads, at one up to 544 (the 27B's
    ** 17,408), the block-per-row kernel past that */
    int n;
    dfl_launch l = swiglu_q(49152, 12288, &n);
    CHECK(n == 1 && l.kernel == DFL_K_SWIGLU_QR && l.block == 384 && l.fill == 2, ": swiglu q 12288: %d", n);
    l = swiglu_q(49152, 17408, &n);
    CHECK(n == 1 && l.kernel == DFL_K_SWIGLU_QR1 && l.block == 544 && l.fill == 1 && l.grid == 49152 && l.vec,
          ": swiglu q 17408: %d %s", n, dfl_emit_kernel_name(l.kernel));
    l = swiglu_q(100, 18432, &n);
    CHECK(n == 1 && l.kernel == DFL_K_SWIGLU_Q4, ": swiglu q 18432: %d %s", n, dfl_emit_kernel_name(l.kernel));
  }
  /* tensors: 0 x, 1 w, 2 rstd, 3 y (or q, s) */
  expect(49152, 5120, 5120, DFL_BF16, DFL_BF16, 0, -1, DFL_K_RMSNORM_R, 49152, 160, 4, 1);
  expect(49152, 5120, 5120, DFL_BF16, DFL_F32, 0, -1, DFL_K_RMSNORM_RF, 49152, 160, 4, 1);  /* the hybrid's */
  expect(100, 2048, 2048, DFL_BF16, DFL_F32, 0, -1, DFL_K_RMSNORM_RF, 100, 64, 12, 1);
  expect(100, 12288, 12288, DFL_BF16, DFL_BF16, 0, -1, DFL_K_RMSNORM_R, 100, 384, 2, 1);
  expect(10, 256, 256, DFL_BF16, DFL_BF16, 0, -1, DFL_K_RMSNORM_W8, 3, 128, 0, 1);            /* V 1 */
  expect(10, 5376, 5376, DFL_BF16, DFL_BF16, 0, -1, DFL_K_RMSNORM_W24, 3, 128, 0, 1);         /* V 21 (5376 % 1024 != 0) */
  expect(10, 5120, 5120, DFL_F32, DFL_F32, 0, -1, DFL_K_RMSNORM_V, 10, 640, 3, 1);            /* f32: one group a block */
  expect(73728, 6144, 256, DFL_BF16, DFL_F32, 0, -1, DFL_K_RMSNORM_V, 73728 * 24 / 16, 512, 4, 1); /* q norm: 16 heads a block */
  expect(31, 200, 40, DFL_BF16, DFL_BF16, 0, -1, DFL_K_RMSNORM, 20, 256, DFL_FILL_OCC, 0);    /* L 5: a warp a group, 155 */
  expect(49152, 5120, 5120, DFL_BF16, DFL_F32, 0, 0, DFL_K_RMSNORM, 6144, 256, DFL_FILL_OCC, 0);  /* x off 16 bytes */
  expect(49152, 5120, 5120, DFL_BF16, DFL_F32, 0, 1, DFL_K_RMSNORM, 6144, 256, DFL_FILL_OCC, 0);  /* w off 16 bytes */
  expect(21, 4096, 4096, DFL_BF16, DFL_BF16, 1, -1, DFL_K_RMSNORM_QR, 21, 128, 6, 1);
  expect(21, 4096, 4096, DFL_BF16, DFL_F32, 1, -1, DFL_K_RMSNORM_QRF, 21, 128, 6, 1);
  expect(37, 512, 512, DFL_BF16, DFL_BF16, 1, -1, DFL_K_RMSNORM_WQ8, 10, 128, 0, 1);
  expect(3, 17408, 17408, DFL_BF16, DFL_BF16, 1, -1, DFL_K_RMSNORM_Q4, 3, 544, 0, 0);
  expect(37, 512, 512, DFL_BF16, DFL_F32, 1, -1, DFL_K_RMSNORM_Q2, 37, 32, 0, 0);            /* f32 w, not a row kernel */

  /* a quantized row no kernel takes: refused at lowering, with the op named */
  {
    dfl_graph g;
    int i = norm_graph(&g, 5, 300, 300, DFL_BF16, DFL_F32, 1), n;
    fprintf(stderr, "(a refusal follows)\n");
    one(&g, i, -1, &n);
    CHECK(n == -DFL_ESHAPE, ": a quantized norm of rows of 300 lowered (%d)", n);
    dfl_graph_free(&g);
  }
  /* CONCAT_COLS: one launch per input; a GEMM, a pointwise op: not lowered here */
  {
    dfl_graph g;
    dfl_graph_init(&g);
    int a = dfl_tensor_2d(&g, "a", DFL_BF16, DFL_T_INPUT, 9, 64), b = dfl_tensor_2d(&g, "b", DFL_BF16, DFL_T_INPUT, 9, 128);
    int c = dfl_tensor_2d(&g, "c", DFL_BF16, DFL_T_ACT, 9, 192), w = dfl_tensor_2d(&g, "w", DFL_BF16, DFL_T_PARAM, 32, 192);
    dfl_attrs at;
    memset(&at, 0, sizeof at);
    int k = dfl_op_add(&g, DFL_OP_CONCAT_COLS, (int[]){a, b}, 2, &c, 1, &at);
    int m = g.nops;
    dfl_matmul(&g, c, w, 0, 1, DFL_BF16, "m");
    int s = dfl_tensor_2d(&g, "s", DFL_BF16, DFL_T_ACT, 9, 192);
    int p = dfl_op_add(&g, DFL_OP_ADD, (int[]){c, c}, 2, &s, 1, &at);
    dfl_lower_env env = {NULL};
    dfl_launch l[DFL_LAUNCH_MAX];
    int n = dfl_lower_launch(&g, k, &env, l);
    CHECK(n == 2 && l[0].kernel == DFL_K_COPY_COLS && l[0].grid == (9 * 64 + 255) / 256 && l[1].grid == (9 * 128 + 255) / 256 &&
          l[0].fill == DFL_FILL_OCC, ": concat: %d launches", n);
    CHECK(dfl_lower_launch(&g, m, &env, l) == 0, ": a GEMM lowered here");
    CHECK(dfl_lower_launch(&g, p, &env, l) == 0, ": a pointwise op lowered here (its fusion group runs it)");
    dfl_graph_free(&g);
  }
  /* the hybrid's: the split conv (q|k|v) and L2NORM, NORM_GATE on 16-bit 16-byte tensors take the _v8
  ** kernels; f32, or a head that is not a power-of-two lane count, the warp kernels */
  for (int f32 = 0; f32 < 2; f32++) {
    dfl_dtype dt = f32 ? DFL_F32 : DFL_BF16;
    dfl_graph g;
    dfl_graph_init(&g);
    int64_t R = 1000;
    int x = dfl_tensor_2d(&g, "x", dt, DFL_T_INPUT, R, 1024), w = dfl_tensor_2d(&g, "w", dt, DFL_T_PARAM, 1024, 4);
    int q = dfl_tensor_2d(&g, "q", dt, DFL_T_ACT, R, 256), k = dfl_tensor_2d(&g, "k", dt, DFL_T_ACT, R, 256);
    int v = dfl_tensor_2d(&g, "v", dt, DFL_T_ACT, R, 512);
    dfl_attrs at;
    memset(&at, 0, sizeof at);
    at.S = 500, at.group = 128, at.eps = 1e-6;
    int cv = dfl_op_add(&g, DFL_OP_CONV1D_SILU, (int[]){x, w}, 2, (int[]){q, k, v}, 3, &at);
    int y = dfl_tensor_2d(&g, "y", dt, DFL_T_ACT, R, 256), z = dfl_tensor_2d(&g, "z", dt, DFL_T_INPUT, R, 512);
    int o = dfl_tensor_2d(&g, "o", dt, DFL_T_ACT, R, 512), nw = dfl_tensor_1d(&g, "nw", DFL_F32, DFL_T_PARAM, 128);
    int l2 = dfl_op_add(&g, DFL_OP_L2NORM, &q, 1, &y, 1, &at);
    int ngt = dfl_op_add(&g, DFL_OP_NORM_GATE, (int[]){v, z, nw}, 3, &o, 1, &at);
    at.group = 40;
    int y2 = dfl_tensor_2d(&g, "y2", dt, DFL_T_ACT, R, 280), x2 = dfl_tensor_2d(&g, "x2", dt, DFL_T_INPUT, R, 280);
    int l2w = dfl_op_add(&g, DFL_OP_L2NORM, &x2, 1, &y2, 1, &at);
    int n;
    dfl_launch l = one(&g, cv, -1, &n);
    CHECK(n == 1 && (f32 ? l.kernel == DFL_K_CONV_QKV && l.grid == (R + 7) / 8
                         : l.kernel == DFL_K_CONV_QKV_V8 && l.grid == ((R + 31) / 32 * 128 + 127) / 128 && l.fill == 3),
          ": conv %s: %s grid %lld", dfl_dtype_name(dt), dfl_emit_kernel_name(l.kernel), (long long)l.grid);
    l = one(&g, l2, -1, &n);
    CHECK(n == 1 && l.kernel == (f32 ? DFL_K_L2NORM : DFL_K_L2NORM_V8) && l.grid == (f32 ? (R * 2 + 7) / 8 : (R * 2 * 16 + 255) / 256),
          ": l2norm %s: %s grid %lld", dfl_dtype_name(dt), dfl_emit_kernel_name(l.kernel), (long long)l.grid);
    l = one(&g, ngt, -1, &n);
    CHECK(n == 1 && l.kernel == (f32 ? DFL_K_NORM_GATE : DFL_K_NORM_GATE_V8), ": norm_gate %s: %s", dfl_dtype_name(dt),
          dfl_emit_kernel_name(l.kernel));
    l = one(&g, l2w, -1, &n);
    CHECK(n == 1 && l.kernel == DFL_K_L2NORM, ": l2norm of 40-wide groups: %s", dfl_emit_kernel_name(l.kernel));
    dfl_graph_free(&g);
  }
  /* ROPE: partial rotary (the 27B's 64 of 256) on bf16 takes the 16-byte kernel; the normed pair form
  ** (the 8B's q and k) the item kernel, in one launch; f32 pairs one dfl_rope_v launch a tensor; a
  ** head_dim not a multiple of 16 the element kernel, with its heads */
  {
    dfl_graph g;
    dfl_graph_init(&g);
    int64_t R = 512;
    int pos = dfl_tensor_1d(&g, "pos", DFL_I32, DFL_T_INPUT, R);
    int xq = dfl_tensor_2d(&g, "xq", DFL_BF16, DFL_T_INPUT, R, 6 * 256), oq = dfl_tensor_2d(&g, "oq", DFL_BF16, DFL_T_ACT, R, 6 * 256);
    dfl_attrs at;
    memset(&at, 0, sizeof at);
    at.heads = 6, at.head_dim = 256, at.rot_dim = 64, at.theta = 1e7;
    int part = dfl_op_add(&g, DFL_OP_ROPE, (int[]){xq, pos}, 2, &oq, 1, &at);
    /* partial, normed pair (qwen3_5's q/k norms and RoPE: f32 weights), and a rot_dim the 16-byte kernel
    ** refuses in a fused form (8: pairs half a lane apart) */
    int xk = dfl_tensor_2d(&g, "xk", DFL_BF16, DFL_T_INPUT, R, 2 * 256), ok2 = dfl_tensor_2d(&g, "ok", DFL_BF16, DFL_T_ACT, R, 2 * 256);
    int wpq = dfl_tensor_1d(&g, "wpq", DFL_F32, DFL_T_FROZEN, 256), wpk = dfl_tensor_1d(&g, "wpk", DFL_F32, DFL_T_FROZEN, 256);
    int oq2 = dfl_tensor_2d(&g, "oq2", DFL_BF16, DFL_T_ACT, R, 6 * 256);
    at.kv_heads = 2, at.eps = 1e-6, at.mid_dtype = DFL_BF16;
    int partn = dfl_op_add(&g, DFL_OP_ROPE, (int[]){xq, pos, wpq, xk, wpk}, 5, (int[]){oq2, ok2}, 2, &at);
    int oq3 = dfl_tensor_2d(&g, "oq3", DFL_BF16, DFL_T_ACT, R, 6 * 256);
    at.kv_heads = 0, at.rot_dim = 8;
    int partbad = dfl_op_add(&g, DFL_OP_ROPE, (int[]){xq, pos, wpq}, 3, &oq3, 1, &at);
    int q = dfl_tensor_2d(&g, "q", DFL_BF16, DFL_T_INPUT, R, 32 * 128), k = dfl_tensor_2d(&g, "k", DFL_BF16, DFL_T_INPUT, R, 8 * 128);
    int wq = dfl_tensor_1d(&g, "wq", DFL_BF16, DFL_T_PARAM, 128), wk = dfl_tensor_1d(&g, "wk", DFL_BF16, DFL_T_PARAM, 128);
    int qo = dfl_tensor_2d(&g, "qo", DFL_BF16, DFL_T_ACT, R, 32 * 128), ko = dfl_tensor_2d(&g, "ko", DFL_BF16, DFL_T_ACT, R, 8 * 128);
    memset(&at, 0, sizeof at);
    at.heads = 32, at.kv_heads = 8, at.head_dim = 128, at.theta = 1e6, at.eps = 1e-6, at.mid_dtype = DFL_BF16;
    int pr = dfl_op_add(&g, DFL_OP_ROPE, (int[]){q, pos, wq, k, wk}, 5, (int[]){qo, ko}, 2, &at);
    int qf = dfl_tensor_2d(&g, "qf", DFL_F32, DFL_T_INPUT, R, 32 * 128), kf = dfl_tensor_2d(&g, "kf", DFL_F32, DFL_T_INPUT, R, 8 * 128);
    int qfo = dfl_tensor_2d(&g, "qfo", DFL_F32, DFL_T_ACT, R, 32 * 128), kfo = dfl_tensor_2d(&g, "kfo", DFL_F32, DFL_T_ACT, R, 8 * 128);
    int pf = dfl_op_add(&g, DFL_OP_ROPE, (int[]){qf, pos, kf}, 3, (int[]){qfo, kfo}, 2, &at);
    int x5 = dfl_tensor_2d(&g, "x5", DFL_F32, DFL_T_INPUT, R, 3 * 40), o5 = dfl_tensor_2d(&g, "o5", DFL_F32, DFL_T_ACT, R, 3 * 40);
    memset(&at, 0, sizeof at);
    at.heads = 3, at.head_dim = 40, at.theta = 1e4;
    int pe = dfl_op_add(&g, DFL_OP_ROPE, (int[]){x5, pos}, 2, &o5, 1, &at);
    dfl_lower_env env = {NULL};
    dfl_launch l[DFL_LAUNCH_MAX];
    int n = dfl_lower_launch(&g, part, &env, l);
    CHECK(n == 1 && l[0].kernel == DFL_K_ROPE_PN && l[0].grid == R / 8 && l[0].smem == 32 * 8 && l[0].vec &&
          l[0].fill == DFL_FILL_OCC, ": partial rope: %d, %s grid %lld", n, dfl_emit_kernel_name(l[0].kernel),
          (long long)l[0].grid);
    n = dfl_lower_launch(&g, partn, &env, l);
    CHECK(n == 1 && l[0].kernel == DFL_K_ROPE_PN && l[0].grid == R / 8, ": partial normed pair: %d, %s", n,
          dfl_emit_kernel_name(l[0].kernel));
    n = dfl_lower_launch(&g, partbad, &env, l);
    CHECK(n == -DFL_ESHAPE, ": partial normed rope, rot_dim 8: %d (a refusal expected)", n);
    n = dfl_lower_launch(&g, pr, &env, l);
    CHECK(n == 1 && l[0].kernel == DFL_K_ROPE_P8 && l[0].grid == (R * 5 + 31) / 32 && l[0].smem == 64 * 8 && l[0].fill == 2,
          ": normed pair: %d, %s grid %lld", n, dfl_emit_kernel_name(l[0].kernel), (long long)l[0].grid);
    n = dfl_lower_launch(&g, pf, &env, l);
    CHECK(n == 2 && l[0].kernel == DFL_K_ROPE_V && l[1].kernel == DFL_K_ROPE_V && l[0].grid == R / 4 && l[0].block == 256,
          ": f32 pair: %d, %s", n, dfl_emit_kernel_name(l[0].kernel));
    n = dfl_lower_launch(&g, pe, &env, l);
    CHECK(n == 1 && l[0].kernel == DFL_K_ROPE && l[0].grid == (R * 3 * 20 + 255) / 256, ": head_dim 40: %d, %s grid %lld", n,
          dfl_emit_kernel_name(l[0].kernel), (long long)l[0].grid);
    dfl_graph_free(&g);
  }
  /* BLOCK_EXPAND_BWD: the copy in the widest unit the rows and offsets allow (16 bytes; 4 when a
  ** pointer is 8 bytes off; 2 for rows of 5 bf16), then the column sums in dfl_block_parts parts (8
  ** columns a thread on 16-byte rows) and their in-order sum; SUM's partials capped at 4 an SM; GATHER */
  {
    for (int shape = 0; shape < 3; shape++) {
      dfl_graph g;
      dfl_graph_init(&g);
      int C = shape == 2 ? 5 : 64, B = 16, nb = 40;
      int d = dfl_tensor_2d(&g, "d", DFL_BF16, DFL_T_INPUT, nb * B, C), s = dfl_tensor_2d(&g, "s", DFL_BF16, DFL_T_ACT, nb + 2, C);
      dfl_attrs at;
      memset(&at, 0, sizeof at);
      at.B = B;
      int e = dfl_op_add(&g, DFL_OP_BLOCK_EXPAND_BWD, &d, 1, &s, 1, &at), n;
      int64_t off[2] = {0, shape == 1 ? 1032 : 1024};
      dfl_lower_env env = {.offset = off};
      dfl_launch l[DFL_LAUNCH_MAX];
      n = dfl_lower_launch(&g, e, &env, l);
      int unit = shape == 0 ? 16 : shape == 1 ? 4 : 2, v = shape != 2;
      CHECK(n == 3 && l[0].kernel == DFL_K_BLOCK_COPY && l[0].grid == nb && l[0].arg == unit && l[1].kernel == DFL_K_BLOCK_COLSUM &&
            l[1].grid_y == dfl_block_parts_test(nb * B) && l[1].arg == v && l[1].grid == (C + (v ? 255 : 31)) / (v ? 256 : 32) &&
            l[2].kernel == DFL_K_BLOCK_COLFIN, ": expand_bwd C %d shape %d: n %d unit %d v %d parts %d", C, shape, n,
            l[0].arg, l[1].arg, l[1].grid_y);
      dfl_graph_free(&g);
    }
    dfl_graph g;
    dfl_graph_init(&g);
    int x = dfl_tensor_2d(&g, "x", DFL_F32, DFL_T_INPUT, 1000, 1000), y = dfl_tensor_1d(&g, "y", DFL_F32, DFL_T_OUTPUT, 1);
    dfl_attrs at;
    memset(&at, 0, sizeof at);
    int sm = dfl_op_add(&g, DFL_OP_SUM, &x, 1, &y, 1, &at);
    int tb = dfl_tensor_2d(&g, "table", DFL_BF16, DFL_T_PARAM, 500, 64), ids = dfl_tensor_1d(&g, "ids", DFL_I32, DFL_T_INPUT, 300);
    int gy = dfl_tensor_2d(&g, "gy", DFL_BF16, DFL_T_ACT, 300, 64);
    int ga = dfl_op_add(&g, DFL_OP_GATHER, (int[]){tb, ids}, 2, &gy, 1, &at);
    dfl_lower_env env = {NULL};
    dfl_launch l[DFL_LAUNCH_MAX];
    int n = dfl_lower_launch(&g, sm, &env, l);
    CHECK(n == 2 && l[0].kernel == DFL_K_RED_PART && l[0].grid == 1024 && l[0].fill == 4 && l[1].kernel == DFL_K_RED_FINAL &&
          l[1].grid == 1, ": sum: %d, grid %lld", n, (long long)l[0].grid);
    n = dfl_lower_launch(&g, ga, &env, l);
    CHECK(n == 1 && l[0].kernel == DFL_K_GATHER && l[0].grid == (300 * 64 + 255) / 256, ": gather: %d", n);
    dfl_graph_free(&g);
  }
  /* multi-tensor groups: 50 SUMSQ_ACC into one sum are a group of 48 and one of 2, each launched by its
  ** first op (the flat kernel when the gradients lie end to end, the table when not); the others launch
  ** nothing. ADAMW with f32 moments groups the same way; with a bf16 moment it runs alone. */
  {
    dfl_graph g;
    dfl_graph_init(&g);
    int acc = dfl_tensor_1d(&g, "sumsq", DFL_F32, DFL_T_STATE, 1), gr[50], first = g.nops;
    dfl_attrs at;
    memset(&at, 0, sizeof at);
    for (int k = 0; k < 50; k++) {
      char nm[16];
      snprintf(nm, sizeof nm, "g%d", k);
      gr[k] = dfl_tensor_1d(&g, nm, DFL_BF16, DFL_T_INPUT, 1024);
      dfl_op_add(&g, DFL_OP_SUMSQ_ACC, (int[]){acc, gr[k]}, 2, &acc, 1, &at);
    }
    int64_t off[64];
    for (int t = 0; t < g.nt && t < 64; t++) off[t] = 2048 * (int64_t)t; /* each gradient right after the last */
    for (int gap = 0; gap < 2; gap++) {
      if (gap) off[gr[7]] += 256;
      dfl_lower_env env = {.offset = off};
      dfl_launch l[DFL_LAUNCH_MAX];
      int n = dfl_lower_launch(&g, first, &env, l);
      CHECK(n == 2 && l[0].kernel == (gap ? DFL_K_SUMSQ_MT : DFL_K_SUMSQ_FLAT) && l[0].arg == 48 &&
            l[0].grid == 48 * 256 / 256 && l[0].fill == 4 && l[1].kernel == DFL_K_RED_FINAL,
            ": sumsq leader (gap %d): %d, %s arg %d grid %lld", gap, n, dfl_emit_kernel_name(l[0].kernel), l[0].arg,
            (long long)l[0].grid);
      n = dfl_lower_launch(&g, first + 47, &env, l);
      CHECK(n == 1 && l[0].kernel == DFL_LAUNCH_GROUPED && l[0].arg == first, ": sumsq member: %d, arg %d", n, l[0].arg);
      n = dfl_lower_launch(&g, first + 48, &env, l);
      CHECK(n == 2 && l[0].arg == 2, ": second group: %d, arg %d", n, l[0].arg);
    }
    dfl_graph_free(&g);
    for (int bf = 0; bf < 2; bf++) {
      dfl_graph_init(&g);
      int st = dfl_tensor_1d(&g, "state", DFL_F32, DFL_T_STATE, 6), lead = g.nops;
      for (int k = 0; k < 3; k++) {
        int p = dfl_tensor_1d(&g, "p", DFL_BF16, DFL_T_PARAM, 4096), ms = dfl_tensor_1d(&g, "ms", DFL_F32, DFL_T_STATE, 4096);
        int m = dfl_tensor_1d(&g, "m", bf ? DFL_BF16 : DFL_F32, DFL_T_STATE, 4096), v = dfl_tensor_1d(&g, "v", DFL_F32, DFL_T_STATE, 4096);
        int gg = dfl_tensor_1d(&g, "g", DFL_BF16, DFL_T_STATE, 4096);
        at.beta1 = 0.9, at.beta2 = 0.95, at.eps = 1e-8;
        dfl_op_add(&g, DFL_OP_ADAMW, (int[]){p, ms, m, v, gg, st}, 6, (int[]){p, ms, m, v, gg}, 5, &at);
      }
      dfl_lower_env env = {NULL};
      dfl_launch l[DFL_LAUNCH_MAX];
      int n = dfl_lower_launch(&g, lead, &env, l), n1 = dfl_lower_launch(&g, lead + 1, &env, l + 1);
      CHECK(bf ? n == 1 && l[0].kernel == DFL_K_ADAMW && l[0].arg == 0 && n1 == 1 && l[1].kernel == DFL_K_ADAMW
               : n == 1 && l[0].kernel == DFL_K_ADAMW_MT && l[0].arg == 3 && l[0].grid == (3 * 1024 + 127) / 128 &&
                     n1 == 1 && l[1].kernel == DFL_LAUNCH_GROUPED,
            ": adamw (bf16 moment %d): %d %s arg %d, then %s", bf, n, dfl_emit_kernel_name(l[0].kernel), l[0].arg,
            l[1].kernel == DFL_LAUNCH_GROUPED ? "grouped" : dfl_emit_kernel_name(l[1].kernel));
      dfl_graph_free(&g);
    }
  }
  /* the text form */
  {
    dfl_launch l = {DFL_K_RMSNORM_RF, 49152, 1, 160, 0, 4, 1, 0};
    char buf[160];
    dfl_lower_launch_str(&l, buf, sizeof buf);
    CHECK(!strcmp(buf, "dfl_rmsnorm_rf grid 49152 (<= 4/SM) block 160 smem 0 vec16"), ": text '%s'", buf);
    dfl_launch o = {DFL_K_COPY_COLS, 3, 2, 256, 64, DFL_FILL_OCC, 0, 4};
    dfl_lower_launch_str(&o, buf, sizeof buf);
    CHECK(!strcmp(buf, "dfl_copy_cols grid 3 x 2 (<= resident) block 256 smem 64 arg 4"), ": text '%s'", buf);
  }
  attention_cases();
  rows_cases();
  /* the ids follow kernels.def as the emitter's table does */
  CHECK(DFL_K_COUNT == DFL_EMIT_KERNELS && !strcmp(dfl_emit_kernel_name(DFL_K_RMSNORM_QRF), "dfl_rmsnorm_qrf"));
  if (!failures) printf("lower_launch: all passed\n");
  return failures != 0;
}
