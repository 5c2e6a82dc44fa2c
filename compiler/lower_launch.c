/*
** lower_launch.c: the library kernels' launches, chosen at build time (lower_launch.h). Each rule
** here is the condition a kernel of kernels/<family>.cuh states in its comment (shapes, dtypes, 16-byte
** alignment); the CUDA backend (runtime/cuda/ops.c) only gathers each kernel's arguments.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "compiler/lower_launch.h"
#include "compiler/lower_internal.h"
#include "compiler/emit.h"
#include "compiler/plan.h"
#include "compiler/status.h"

typedef struct { const dfl_graph *g; const dfl_lower_env *env; const dfl_op *op; } lw_ctx;

static const dfl_tensor *lw_t(const lw_ctx *c, int t) { return &c->g->t[t]; }
static int64_t lw_numel(const lw_ctx *c, int t) { return dfl_tensor_numel(lw_t(c, t)); }
static int aligned(const lw_ctx *c, int t) { return dfl_lower_al16(c->env, t); }
/* every tensor aligned and f32, bf16 or f16 (bf16 only when bf16): the 16-byte kernels' condition */
static int vecs(const lw_ctx *c, const int *ts, int n, int bf16) {
  for (int k = 0; k < n; k++) {
    dfl_dtype d = lw_t(c, ts[k])->dtype;
    if (!aligned(c, ts[k])) return 0;
    if (bf16 ? d != DFL_BF16 : (d != DFL_F32 && d != DFL_BF16 && d != DFL_F16)) return 0;
  }
  return 1;
}

static dfl_launch L(int k, int64_t grid, int block, int smem, int fill, int vec) {
  return dfl_lower_rec(k, grid, 1, block, smem, fill, vec);
}
/* a thread an element, grid-stride (dfl_cuda launch) */
static dfl_launch elems(int k, int64_t n) { return L(k, (n + 255) / 256, 256, 0, DFL_FILL_OCC, 0); }
/* a warp a row (launch_warps) */
static dfl_launch warps(int k, int64_t rows) { return L(k, (rows + 7) / 8, 256, 0, DFL_FILL_OCC, 0); }

/* The pipelined row kernels (kernels/elementwise.cuh rowq_pipe: dfl_swiglu_qr, dfl_rmsnorm_qr,
** dfl_quant_f8r, dfl_rmsnorm_r) take rows of C % 1024 == 0 features, C <= 12288 (C / 32 threads), their
** tensors bf16 and 16-byte aligned; C / 32 threads a CTA, about 768 threads an SM (at least 2 CTAs),
** never more CTAs than rows, each CTA walking rows. */
static int rowq_ok(const lw_ctx *c, int C, const int *ts, int n) { return C % 1024 == 0 && C / 32 <= 384 && vecs(c, ts, n, 1); }
static dfl_launch rowq(int k, int64_t rows, int C) {
  int per = 768 / (C / 32);
  return L(k, rows, C / 32, 0, per < 2 ? 2 : per, 1);
}
/* The quantized norms' and SwiGLU's chunks of 8 per thread for rows of C: 2 (C <= 16384) or 4
** (C <= 32768), with C % (256 chunks) == 0 so the block is whole warps; 0 (and why) otherwise. */
static int rowq_nch(const lw_ctx *c, int C) {
  if (C % 512 == 0 && C <= 16384) return 2;
  if (C % 1024 == 0 && C <= 32768) return 4;
  fprintf(stderr, "dflc: lower: %s: a quantized %s needs rows of a multiple of 512 features up to 16384, or "
                  "of 1024 up to 32768, not %d\n", c->op->label, dfl_opcode_name(c->op->code), C);
  return 0;
}
/* The warp-per-row norms (kernels/rmsnorm.cuh rmsnorm_w / _wq): bf16, rows of G = 256 V features with
** V <= 32, 16-byte aligned; 4 rows a CTA of 128 threads. -1: they do not apply. */
static int rms_warp(const lw_ctx *c, int G, int q, const int *ts, int n) {
  int V = G / 256;
  if (G % 256 || V < 1 || V > 32 || !vecs(c, ts, n, 1)) return -1;
  return DFL_K_RMSNORM_W8 + 2 * ((V + 7) / 8 - 1) + q;
}
/* The vector norms (dfl_rmsnorm_v): a group is L = G / 8 threads holding 8 features each, L a power of
** two <= 32 (512-thread blocks of several groups) or a multiple of 32 <= 1024 (a block a group); 0: no. */
static int rms_vec_block(const lw_ctx *c, int G, const int *ts, int n) {
  int L = G / 8;
  if (G % 8 || L < 1 || !vecs(c, ts, n, 0)) return 0;
  if (L <= 32) return (L & (L - 1)) ? 0 : 512;
  return L % 32 == 0 && L <= 1024 ? L : 0;
}

/* The row norms' pipelined kernels also take an f32 weight (dfl_rmsnorm_rf, _qrf): the hybrid's */
static int w32_row(const lw_ctx *c, int G, const int *ts, int n, int w) {
  return lw_t(c, w)->dtype == DFL_F32 && aligned(c, w) && rowq_ok(c, G, ts, n);
}

static int lower_rmsnorm(const lw_ctx *c, dfl_launch *out) {
  const dfl_op *op = c->op;
  int G = (int)op->a.group, x = op->in[0], w = op->in[1], y = op->out[0];
  int64_t ng = lw_numel(c, x) / G;
  if (op->n_out == 3) { /* the quantized form (dfl_fuse_quant): its rows go to FP8 with their scales */
    int mid = op->a.mid_dtype, ts[] = {x, w};
    if (mid == DFL_BF16 && rowq_ok(c, G, ts, 2)) return out[0] = rowq(DFL_K_RMSNORM_QR, ng, G), 1;
    if (mid == DFL_BF16 && w32_row(c, G, ts, 1, w)) return out[0] = rowq(DFL_K_RMSNORM_QRF, ng, G), 1;
    int kw = mid == DFL_BF16 ? rms_warp(c, G, 1, ts, 2) : -1;
    if (kw >= 0) return out[0] = L(kw, (ng + 3) / 4, 128, 0, DFL_FILL_NONE, 1), 1;
    int nch = rowq_nch(c, G);
    if (!nch) return -DFL_ESHAPE;
    return out[0] = L(nch == 2 ? DFL_K_RMSNORM_Q2 : DFL_K_RMSNORM_Q4, ng, G / (8 * nch), 0, DFL_FILL_NONE, 0), 1;
  }
  int ts[] = {y, x, w};
  if (rowq_ok(c, G, ts, 3)) return out[0] = rowq(DFL_K_RMSNORM_R, ng, G), 1;
  if (w32_row(c, G, ts, 2, w)) return out[0] = rowq(DFL_K_RMSNORM_RF, ng, G), 1;
  int kw = rms_warp(c, G, 0, ts, 3);
  if (kw >= 0) return out[0] = L(kw, (ng + 3) / 4, 128, 0, DFL_FILL_NONE, 1), 1;
  int blk = rms_vec_block(c, G, ts, 3);
  if (blk) {
    int64_t per = blk / (G / 8);
    return out[0] = L(DFL_K_RMSNORM_V, (ng + per - 1) / per, blk, 0, 2048 / blk, 1), 1;
  }
  return out[0] = warps(DFL_K_RMSNORM, ng), 1;
}

static int lower_quant_f8(const lw_ctx *c, dfl_launch *out) {
  int x = c->op->in[0], C = (int)lw_t(c, x)->shape[1];
  int64_t rows = lw_t(c, x)->shape[0];
  if (rowq_ok(c, C, &x, 1)) return out[0] = rowq(DFL_K_QUANT_F8R, rows, C), 1;
  return out[0] = L(DFL_K_QUANT_F8, rows, 256, 0, DFL_FILL_NONE, 0), 1;
}

/* SWIGLU's quantized form (its plain form is a generated pointwise group) */
static int lower_swiglu(const lw_ctx *c, dfl_launch *out) {
  const dfl_op *op = c->op;
  if (op->n_out != 2) return 0;
  int g = op->in[0], u = op->in[1], ts[] = {g, u}, C = (int)lw_t(c, g)->shape[1];
  int64_t rows = lw_t(c, g)->shape[0];
  if (op->a.mid_dtype == DFL_BF16 && rowq_ok(c, C, ts, 2)) return out[0] = rowq(DFL_K_SWIGLU_QR, rows, C), 1;
  /* longer rows, up to 544 threads (17,408 features): the same pipelined kernel, one CTA an SM */
  if (op->a.mid_dtype == DFL_BF16 && C % 1024 == 0 && C / 32 <= 544 && vecs(c, ts, 2, 1))
    return out[0] = L(DFL_K_SWIGLU_QR1, rows, C / 32, 0, 1, 1), 1;
  int nch = rowq_nch(c, C);
  if (!nch) return -DFL_ESHAPE;
  return out[0] = L(nch == 2 ? DFL_K_SWIGLU_Q2 : DFL_K_SWIGLU_Q4, rows, C / (8 * nch), 0, DFL_FILL_NONE, 0), 1;
}

static int lower_concat_cols(const lw_ctx *c, dfl_launch *out) {
  const dfl_op *op = c->op;
  int64_t R = lw_t(c, op->out[0])->shape[0];
  for (int k = 0; k < op->n_in; k++) {
    const dfl_tensor *X = lw_t(c, op->in[k]);
    out[k] = elems(DFL_K_COPY_COLS, R * X->shape[X->ndim - 1]);
  }
  return op->n_in;
}

/* The hybrid's 16-byte kernels (kernels/hybrid.cuh *_v8) take 16-bit tensors only */
static int v16(const lw_ctx *c, int t) {
  dfl_dtype d = lw_t(c, t)->dtype;
  return (d == DFL_BF16 || d == DFL_F16) && aligned(c, t);
}
/* groups of G = 8 L features, L a power of two <= 32: a group is L lanes of one warp */
static int lanes_ok(int G) { int L = G / 8; return G >= 8 && G % 8 == 0 && L <= 32 && !(L & (L - 1)); }

/* CONV1D_SILU: kernel 4 over 16-byte rows takes dfl_conv1d_silu_qkv_v8 (a thread per 8 channels x 32
** rows, 128-thread CTAs, three an SM: 151 registers), the split form (q|k|v, q and k L2-normalized)
** with each head's lanes inside one warp; else a warp a row (split) or a thread an element. */
static int lower_conv1d(const lw_ctx *c, dfl_launch *out) {
  const dfl_op *op = c->op;
  int x = op->in[0], w = op->in[1];
  int64_t R = lw_t(c, x)->shape[0];
  int C = (int)lw_t(c, x)->shape[1], K = (int)lw_t(c, w)->shape[1];
  int64_t n = (R + 31) / 32 * (C / 8);
  if (op->n_out == 3) {
    int q = op->out[0], k = op->out[1], v = op->out[2], D = (int)lw_t(c, q)->shape[1], G = op->a.group;
    if (lw_t(c, k)->dtype != lw_t(c, q)->dtype || lw_t(c, v)->dtype != lw_t(c, q)->dtype) {
      fprintf(stderr, "dflc: lower: conv1d_silu (%s): q, k and v must share a dtype\n", op->label);
      return -DFL_ESHAPE;
    }
    if (K == 4 && lanes_ok(G) && C % G == 0 && D % G == 0 && v16(c, x) && v16(c, q) && v16(c, k) && v16(c, v))
      return out[0] = L(DFL_K_CONV_QKV_V8, (n + 127) / 128, 128, 0, 3, 1), 1;
    return out[0] = warps(DFL_K_CONV_QKV, R), 1;
  }
  int y = op->out[0];
  if (K == 4 && C % 8 == 0 && v16(c, y) && v16(c, x)) return out[0] = L(DFL_K_CONV_QKV_V8, (n + 127) / 128, 128, 0, 3, 1), 1;
  return out[0] = elems(DFL_K_CONV1D_SILU, R * C), 1;
}

/* L2NORM and NORM_GATE: groups of 8 L (lanes_ok) over 16-byte tensors take the _v8 kernels (a thread
** per 8 features), else a warp a group */
static int lower_lanes(const lw_ctx *c, dfl_launch *out, int kv8, int kw, int n16) {
  const dfl_op *op = c->op;
  int G = op->a.group;
  int64_t ng = lw_numel(c, op->in[0]) / G;
  int ok = lanes_ok(G) && v16(c, op->out[0]);
  for (int k = 0; k < n16; k++) ok = ok && v16(c, op->in[k]);
  if (op->code == DFL_OP_NORM_GATE) { /* z's window: its rows and its start on 16-byte words */
    const dfl_tensor *x = lw_t(c, op->in[0]), *z = lw_t(c, op->in[1]);
    ok = ok && x->shape[x->ndim - 1] % 8 == 0 && z->shape[z->ndim - 1] % 8 == 0 && op->a.win[1] % 8 == 0;
  }
  if (ok) return out[0] = L(kv8, (ng * (G / 8) + 255) / 256, 256, 0, DFL_FILL_OCC, 1), 1;
  return out[0] = warps(kw, ng), 1;
}

/* ROPE (kernels/rope.cuh). head_dim hd = 16 x a power of two, at most 512: a (row, head)'s hd / 16
** threads are aligned lanes of one warp (the normed form reduces across them by shuffles). */
static int rope_hd16(int hd) { return hd % 16 == 0 && (hd / 16 & (hd / 16 - 1)) == 0 && hd <= 512; }
/* ROPE on one tensor x (nh heads) into o; wn: the normed form's weight (-1: plain). */
static int rope_one(const lw_ctx *c, int o, int x, int wn, dfl_launch *out) {
  const dfl_attrs *a = &c->op->a;
  int hd = a->head_dim;
  int64_t rows = lw_numel(c, c->op->in[0]) / ((int64_t)a->heads * hd);
  int ts[] = {o, x, wn >= 0 ? wn : o};
  if (wn >= 0 && (!rope_hd16(hd) || !vecs(c, ts, 3, 0))) {
    fprintf(stderr, "dflc: lower: rope with a norm (%s): head_dim %d must be 16 x a power of two, at most 512, and "
                    "the tensors bf16/f16/f32, 16-byte aligned\n", c->op->label, hd);
    return -DFL_ESHAPE;
  }
  if (rope_hd16(hd) && vecs(c, ts, 3, 1) && (wn < 0 || a->mid_dtype == DFL_BF16)) {
    /* a row's hd / 16 threads walk its heads (dfl_rope_r); two CTAs an SM at most */
    int rb = 256 / (hd / 16);
    *out = L(DFL_K_ROPE_R, (rows + rb - 1) / rb, 256, hd / 2 * 8, 2, 1);
    return 1;
  }
  if (hd % 16 == 0 && hd <= 1024 && vecs(c, ts, 2, 0)) {
    /* 4 rows a CTA and pass, their angle table in shared memory after the hd / 2 inverse frequencies
    ** (double): 20 KiB at hd 1024, within what a launch gets without opting in */
    int ni = hd / 16;
    *out = L(DFL_K_ROPE_V, (rows + 3) / 4, 256 / ni * ni, 5 * (hd / 2) * 8, 8, 1);
    return 1;
  }
  *out = elems(DFL_K_ROPE, rows * (int64_t)(o == c->op->out[0] ? a->heads : a->kv_heads) * (hd / 2));
  return 1;
}
/* ROPE: partial rotary (qwen3_5: its own kernels), single, normed (in[2] the norm weight) or the pair
** form (x2 and its weight after the single form's inputs, a.kv_heads heads, out[1]). bf16 rows of
** rope_hd16 take the item kernel (dfl_rope_p8: 8 heads an item, both tensors in one launch); the rest
** rope_one's kernels, one launch per tensor. */
static int lower_rope(const lw_ctx *c, dfl_launch *out) {
  const dfl_op *op = c->op;
  const dfl_attrs *a = &op->a;
  int hd = a->head_dim, nh = a->heads, o0 = op->out[0], i0 = op->in[0];
  int64_t rows = lw_numel(c, i0) / ((int64_t)nh * hd);
  if (a->rot_dim && a->rot_dim != hd) {
    /* partial rotary: dfl_rope_pn (every form; a warp a row, the rd / 2 inverse frequencies in shared
    ** memory) where its lanes fit, the per-element kernel for a plain ROPE otherwise */
    int rd = a->rot_dim, pair = op->n_out == 2, normed = op->n_in == (pair ? 5 : 3);
    int ts[] = {o0, i0, pair ? op->out[1] : o0, pair ? op->in[normed ? 3 : 2] : o0};
    int same = !pair || (lw_t(c, ts[2])->dtype == lw_t(c, o0)->dtype && lw_t(c, ts[3])->dtype == lw_t(c, i0)->dtype);
    if (dfl_fuse_rope_part_ok(hd, rd) && vecs(c, ts, 4, 0) && same &&
        (!normed || (pair ? lw_t(c, op->in[2])->dtype == lw_t(c, op->in[4])->dtype : 1)))
      return out[0] = L(DFL_K_ROPE_PN, (rows + 7) / 8, 256, rd / 2 * 8, DFL_FILL_OCC, 1), 1;
    if (pair || normed) {
      fprintf(stderr, "dflc: lower: partial rope with a norm or a pair (%s): head_dim %d / 8 must be a power of two "
                      "<= 32, rot_dim %d a multiple of 16, the tensors bf16/f16/f32, 16-byte aligned, q and k of one "
                      "dtype\n", op->label, hd, rd);
      return -DFL_ESHAPE;
    }
    return out[0] = elems(DFL_K_ROPE_PART, rows * nh * (rd / 2 + hd - rd)), 1;
  }
  int pair = op->n_out == 2, normed = op->n_in == (pair ? 5 : 3), nh2 = pair ? a->kv_heads : 0;
  int wn = normed ? op->in[2] : -1, o1 = pair ? op->out[1] : -1, i1 = pair ? op->in[normed ? 3 : 2] : -1;
  int wn1 = pair && normed ? op->in[4] : -1;
  int ts[] = {o0, i0, wn >= 0 ? wn : o0, pair ? o1 : o0, pair ? i1 : o0, wn1 >= 0 ? wn1 : o0};
  if (rope_hd16(hd) && vecs(c, ts, 6, 1) && (wn < 0 || a->mid_dtype == DFL_BF16)) {
    /* at most the CTAs the SMs hold at once (two): each forms its inverse frequencies (double pow) once */
    int64_t items = rows * ((nh + 7) / 8 + (nh2 + 7) / 8), ipb = 256 / (hd / 16);
    return out[0] = L(DFL_K_ROPE_P8, (items + ipb - 1) / ipb, 256, hd / 2 * 8, 2, 1), 1;
  }
  int rc = rope_one(c, o0, i0, wn, &out[0]);
  if (rc < 0 || !pair) return rc;
  rc = rope_one(c, o1, i1, wn1, &out[1]);
  return rc < 0 ? rc : 2;
}

/* The block-row ops (BLOCK_ROWS, _EXPAND, _EXPAND_BWD, _DROP, _UNDROP): dfl_block_copy moves rows in
** 16-, 4- or 2-byte units (arg), the widest the row bytes and both pointers allow, a CTA a row;
** EXPAND_BWD then sums each block's mask rows by columns in dfl_block_parts(Q) parts (8 columns a
** thread over 16-byte rows: arg 1) and adds the parts in order (deterministic). */
static int lower_block_rows(const lw_ctx *c, dfl_launch *out) {
  const dfl_op *op = c->op;
  dfl_opcode code = op->code;
  int bwd = code == DFL_OP_BLOCK_EXPAND_BWD, outfull = code == DFL_OP_BLOCK_EXPAND || code == DFL_OP_BLOCK_UNDROP;
  int o = op->out[0], x = op->in[0];
  const dfl_tensor *full = lw_t(c, outfull ? o : x);
  int64_t Q = full->shape[0], C = full->ndim == 2 ? full->shape[1] : 1, rowb = C * (int64_t)dfl_dtype_size(full->dtype);
  int64_t nrows = bwd ? Q / op->a.B : lw_t(c, o)->shape[0];
  const int64_t *off = c->env ? c->env->offset : NULL;
  int64_t ox = off && off[o] >= 0 ? off[o] : 0, xx = off && off[x] >= 0 ? off[x] : 0;
  out[0] = L(DFL_K_BLOCK_COPY, nrows, 256, 0, DFL_FILL_OCC, 0);
  out[0].arg = rowb % 16 == 0 && ((ox | xx) & 15) == 0 ? 16 : rowb % 4 == 0 && ((ox | xx) & 3) == 0 ? 4 : 2;
  if (!bwd) return 1;
  dfl_dtype di = lw_t(c, x)->dtype;
  int v = C % 8 == 0 && aligned(c, x) && (di == DFL_BF16 || di == DFL_F16 || di == DFL_F32), cols = 32 * (v ? 8 : 1);
  out[1] = L(DFL_K_BLOCK_COLSUM, (C + cols - 1) / cols, 256, 0, DFL_FILL_NONE, 0);
  out[1].grid_y = dfl_block_parts(Q), out[1].arg = v;
  out[2] = elems(DFL_K_BLOCK_COLFIN, C);
  return 3;
}

/* SUM: partials by a grid of at most 4 CTAs an SM (and DFL_RED_PARTS, and one
** per 256 elements), then one CTA adds them in order */
static int lower_sum(const lw_ctx *c, dfl_launch *out) {
  int64_t n = lw_numel(c, c->op->in[0]), np = (n + 255) / 256;
  out[0] = L(DFL_K_RED_PART, np < DFL_RED_PARTS ? np : DFL_RED_PARTS, 256, 0, 4, 0);
  out[1] = L(DFL_K_RED_FINAL, 1, 1024, 0, DFL_FILL_NONE, 0);
  return 2;
}

/* Multi-tensor groups: runs of consecutive ADAMW ops (same phase, state, hyper-parameters, dtypes; f32
** master and moments) and of SUMSQ_ACC ops into the same sum, at most DFL_MT_MAX each; the group's
** first op launches for all of them, the others launch nothing. */
static int mt_ok(const dfl_graph *g, const dfl_op *a) {
  if (a->code == DFL_OP_SUMSQ_ACC) return 1;
  if (a->code != DFL_OP_ADAMW) return 0;
  for (int k = 1; k <= 3; k++) if (g->t[a->in[k]].dtype != DFL_F32) return 0;
  return 1;
}
static int mt_same(const dfl_graph *g, const dfl_op *a, const dfl_op *b) {
  if (!mt_ok(g, a) || !mt_ok(g, b) || a->code != b->code || a->phase != b->phase) return 0;
  if (a->code == DFL_OP_SUMSQ_ACC) return a->out[0] == b->out[0] && g->t[a->in[1]].dtype == g->t[b->in[1]].dtype;
  return a->in[5] == b->in[5] && g->t[a->in[0]].dtype == g->t[b->in[0]].dtype &&
         g->t[a->in[4]].dtype == g->t[b->in[4]].dtype && a->a.beta1 == b->a.beta1 && a->a.beta2 == b->a.beta2 &&
         a->a.eps == b->a.eps && a->a.wd == b->a.wd && a->a.keep_grad == b->a.keep_grad;
}
static int lower_mt(const lw_ctx *c, int i, dfl_launch *out) {
  const dfl_graph *g = c->g;
  int j = i;
  while (j > 0 && mt_same(g, &g->ops[j - 1], &g->ops[j])) j--;
  int lead = j + (i - j) / DFL_MT_MAX * DFL_MT_MAX, n = 1;
  if (lead != i) {
    out[0] = L(DFL_LAUNCH_GROUPED, 0, 0, 0, DFL_FILL_NONE, 0);
    out[0].grid = 0, out[0].arg = lead;
    return 1;
  }
  while (i + n < g->nops && n < DFL_MT_MAX && mt_same(g, &g->ops[i + n - 1], &g->ops[i + n])) n++;
  int adam = c->op->code == DFL_OP_ADAMW, gi = adam ? 4 : 1;
  int64_t units = 0;
  for (int k = 0; k < n; k++) units += (lw_numel(c, g->ops[i + k].in[gi]) + 3) / 4;
  if (adam) { /* one unit (4 values) a thread, 128-thread blocks, no grid-stride cap: short blocks fill SMs
              ** beside an overlapped target forward for microseconds, not for the whole kernel */
    out[0] = L(DFL_K_ADAMW_MT, (units + 127) / 128, 128, 0, DFL_FILL_NONE, 0);
    out[0].arg = n;
    return 1;
  }
  /* gradients end to end in the arena (the plan places a model's in op order), f32 or bf16: one flat
  ** array of 16-byte loads; else the table of tensors */
  const int64_t *off = c->env ? c->env->offset : NULL;
  dfl_dtype dg = lw_t(c, c->op->in[1])->dtype;
  int flat = off && (dg == DFL_BF16 || dg == DFL_F32) && aligned(c, c->op->in[1]);
  for (int k = 1; k < n && flat; k++) {
    int a = g->ops[i + k - 1].in[1], b = g->ops[i + k].in[1];
    flat = off[a] >= 0 && off[b] == off[a] + lw_numel(c, a) * (int64_t)dfl_dtype_size(dg);
  }
  int64_t np = (units + 255) / 256;
  out[0] = L(flat ? DFL_K_SUMSQ_FLAT : DFL_K_SUMSQ_MT, np < DFL_RED_PARTS ? np : DFL_RED_PARTS, 256, 0, 4, flat);
  out[0].arg = n;
  out[1] = L(DFL_K_RED_FINAL, 1, 1024, 0, DFL_FILL_NONE, 0);
  return 2;
}

int dfl_lower_launch(const dfl_graph *g, int i, const dfl_lower_env *env, dfl_launch *out) {
  lw_ctx c = {g, env, &g->ops[i]};
  const dfl_op *op = c.op;
  const dfl_attrs *a = &op->a;
  switch (op->code) {
  case DFL_OP_RMSNORM: return lower_rmsnorm(&c, out);
  case DFL_OP_QUANT_F8: return lower_quant_f8(&c, out);
  case DFL_OP_SWIGLU: return lower_swiglu(&c, out);
  case DFL_OP_CONCAT_COLS: return lower_concat_cols(&c, out);
  case DFL_OP_CONV1D_SILU: return lower_conv1d(&c, out);
  case DFL_OP_ROPE: return lower_rope(&c, out);
  case DFL_OP_BLOCK_ROWS:
  case DFL_OP_BLOCK_EXPAND:
  case DFL_OP_BLOCK_EXPAND_BWD:
  case DFL_OP_BLOCK_DROP:
  case DFL_OP_BLOCK_UNDROP: return lower_block_rows(&c, out);
  case DFL_OP_SUM: return lower_sum(&c, out);
  case DFL_OP_SUMSQ_ACC: return lower_mt(&c, i, out);
  case DFL_OP_ADAMW:
    if (mt_ok(g, op)) return lower_mt(&c, i, out);
    return out[0] = elems(DFL_K_ADAMW, lw_numel(&c, op->in[0])), 1;
  case DFL_OP_GATHER: return out[0] = elems(DFL_K_GATHER, lw_numel(&c, op->in[1]) * lw_t(&c, op->in[0])->shape[1]), 1;
  case DFL_OP_L2NORM: return lower_lanes(&c, out, DFL_K_L2NORM_V8, DFL_K_L2NORM, 1);
  case DFL_OP_NORM_GATE: return lower_lanes(&c, out, DFL_K_NORM_GATE_V8, DFL_K_NORM_GATE, 2);
  case DFL_OP_IOTA_MOD: return out[0] = elems(DFL_K_IOTA, lw_numel(&c, op->out[0])), 1;
  case DFL_OP_DFLASH_BLOCKS: return out[0] = elems(DFL_K_BLOCKS, (int64_t)a->batch * a->N * a->B), 1;
  case DFL_OP_DFLASH_METRICS: return out[0] = L(DFL_K_METRICS, 1, 256, (5 + 2 * a->B) * 4, DFL_FILL_NONE, 0), 1;
  case DFL_OP_OPT_PREP: return out[0] = L(DFL_K_OPT_PREP, 1, 32, 0, DFL_FILL_NONE, 0), 1;
  case DFL_OP_ATTENTION:
  case DFL_OP_ATTENTION_BWD: return dfl_lower_attention(g, i, env, out);
  case DFL_OP_LINEAR_CE:
  case DFL_OP_SCATTER_ADD:
  case DFL_OP_RMSNORM_BWD: return dfl_lower_rows(g, i, env, out);
  case DFL_OP_GATED_DELTA: return dfl_lower_gated_delta(g, i, env, out);
  default: return 0;
  }
}

int dfl_lower_env_arch(dfl_lower_env *env, const char *arch) {
  if (!arch || strncmp(arch, "sm_", 3)) {
    fprintf(stderr, "dflc: lower: %s is not an architecture (sm_XY)\n", arch ? arch : "(none)");
    return DFL_ERR;
  }
  dfl_gpu_arch row;
  if (dfl_emit_gpu_for_cc(atoi(arch + 3), arch, &row)) return DFL_ERR;
  env->smem = row.smem;
  /* wgmma only in the arch-specific Hopper cubin (the runtime's rule: load_kernels) */
  env->att = row.att == DFL_ATT_WGMMA && strcmp(arch, "sm_90a") ? DFL_ATT_MMA : row.att;
  env->nsm = 0; /* a build knows no device: the parts that follow its SMs are chosen at init */
  return DFL_OK;
}

int dfl_lower_check(const dfl_graph *g, const int64_t *offset, const char *arch, int *bad) {
  dfl_lower_env env = {.offset = offset};
  dfl_launch l[DFL_LAUNCH_MAX];
  *bad = -1;
  if (dfl_lower_env_arch(&env, arch)) return DFL_ERR;
  for (int i = 0; i < g->nops; i++) {
    int n = dfl_lower_launch(g, i, &env, l);
    if (n < 0) return *bad = i, -n;
  }
  return DFL_OK;
}

void dfl_lower_launch_str(const dfl_launch *l, char *buf, size_t n) {
  if (l->kernel == DFL_LAUNCH_GROUPED) {
    snprintf(buf, n, "in op %d's multi-tensor launch", l->arg);
    return;
  }
  /* The wgmma key-major attention backward runs in parts (its arg) that the backend's lowering fixes at
  ** init by the SM count and the op's scratch (lower_attn.c bwdkv_parts): a build's grid is one part's,
  ** and the sum of the parts after it is launched only when they are more than one (runtime/cuda/attention.c). */
  const int parts = l->kernel == DFL_K_ATT_BWDKV_WG128;
  char fill[32] = "";
  if (l->fill == DFL_FILL_OCC) snprintf(fill, sizeof fill, " (<= resident)");
  else if (l->fill > 0) snprintf(fill, sizeof fill, " (<= %d/SM)", l->fill);
  char gy[24] = "", arg[24] = "";
  if (l->grid_y > 1) snprintf(gy, sizeof gy, " x %d", l->grid_y);
  else if (parts && l->arg == DFL_ARG_AT_INIT) snprintf(gy, sizeof gy, " x parts");
  if (l->arg == DFL_ARG_AT_INIT) snprintf(arg, sizeof arg, " %s at init", parts ? "parts" : "arg");
  else if (l->arg) snprintf(arg, sizeof arg, " %s %d", parts ? "parts" : "arg", l->arg);
  snprintf(buf, n, "%s grid %lld%s%s block %d smem %d%s%s%s", dfl_emit_kernel_name(l->kernel), (long long)l->grid, gy,
           fill, l->block, l->smem, l->vec ? " vec16" : "", arg,
           l->kernel == DFL_K_ATT_BWDKV_SUM ? " only when parts > 1" : "");
}
