/*
** fuse.c: the fusion stage (DESIGN stage 5). Two rewrites, both into the GEMM's epilogue.
**
** 1. dfl_fuse: weight gradients into their accumulators.
**
**   t = MATMUL(A, B) ; ACCUM(acc, t)      ->      acc = MATMUL(A, B, acc) {beta = 1}
**
** Every trained weight's gradient is a GEMM whose result is only added into its persistent f32
** accumulator. Fused, the GEMM's epilogue does the add (cuBLASLt beta = 1, cblas beta = 1): t is
** never written nor re-read, and the ACCUM launch disappears. Per weight element, bf16 graphs:
** unfused 12 bytes (GEMM writes t 2, ACCUM reads t 2, reads acc 4, writes acc 4), fused 8 (the
** epilogue reads acc 4 and writes it 4): 4 bytes saved, plus one launch per weight.
**
** Legal when: t is an activation written by that MATMUL alone and read by that ACCUM alone; the
** accumulator is f32 with t's shape; both ops are in the same phase; and no op between them touches
** the accumulator (the add moves up to the MATMUL's place). Numerics: identical up to the order of
** the final additions (the GEMM adds into acc instead of rounding t first), and in bf16 graphs the
** gradient is no longer rounded to bf16 before it is accumulated (more accurate, not less).
**
** dfl_fuse_overwrite (gradient accumulation 1 only) then lets the single writer of an accumulator
** overwrite it instead of adding to the zero AdamW left there (graph.h).
**
** 2. dfl_fuse_add: residual adds (and autodiff's gradient sums) into the GEMM that feeds them.
**
**   t = MATMUL(A, B) ; u = ADD(t, r)  (or ADD(r, t))    ->    u = MATMUL(A, B, r) {beta = 1}
**
** The same MATMUL form with its output u a different tensor from the addend r: D = alpha A B + C
** with C = r, D = u (cuBLASLt: C != D with one layout; cblas: r copied to u, then beta = 1). Every
** transformer layer has two such adds in its forward (h + o_proj(.), h + down(.)), and autodiff
** sums GEMM outputs the same way: the gradient of each normed input (q/k/v, gate/up), of a tensor
** several layers project (the drafter's context), of a weight applied twice (k/v over context and
** noise). The residual stream's gradient sums add an RMSNORM_BWD output instead: the same rewrite
** gives that op the addend (RMSNORM_BWD(x, w, rstd, dy, r): dx = r + the norm's dx, in f32,
** rounded once), under the same conditions.
** Per element of t, bf16: unfused the GEMM writes t (2 bytes) and ADD reads t and r and writes u
** (6); fused the epilogue reads r and writes u (4): 4 bytes and one launch saved per add.
** examples/qwen3-8b.dfl: 68 of 68 target-forward ADDs, 10 of 10 drafter-forward, 34 of 48
** backward into GEMMs and 9 more into RMSNORM_BWD; the 5 left sum the two 128-element gradients of
** each layer's k-norm weight (its norm runs over context and noise keys). H200, ops timed alone
** (bench --ops): the ADD kernels' 3.97 ms per step became 0.73 ms more GEMM time plus 0.48 ms for
** the 14 ADDs then left (the step 250.1 -> 247.8 ms, same binary with and without the GEMM form);
** the RMSNORM_BWD form took those to 0.03 ms for +0.2 ms of norm backward.
**
** Legal when: t is an activation written by that MATMUL (RMSNORM_BWD: as its dx) alone and read
** by that ADD alone (once); the MATMUL has no third input yet (beta 0; RMSNORM_BWD: no fifth);
** both ops are in the same phase; t, r and u have the same shape and the same dtype (no
** broadcasting, no conversion); r is neither t nor an input of the producer, and u is none of its
** inputs, r, or (RMSNORM_BWD) its dw (the producer never writes an operand: the out-of-place form
** only); and no op between the two reads or writes u, or writes r (the add moves up to the
** producer's place, so r must already hold its value there, and u is written earlier than
** before). The planner never lets u share r's bytes (neither MATMUL nor RMSNORM_BWD is an
** in-place op; plan.c), so C and D never overlap.
**
** Numerics: f32 graphs change only in the order of the additions (the GEMM adds r into its f32
** result; a BLAS blocking over K may add r before the last K-panel). bf16 graphs are rounded once
** instead of twice: A B + r is formed in f32 and rounded to bf16 once, where unfused t = A B was
** rounded to bf16 first and t + r rounded again (more accurate, and not bit-identical to before).
** dfl_fuse_add runs after autodiff (the backward is derived from the unfused graph; autodiff
** nevertheless knows the fused form: the addend's gradient is the output's).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/graph.h"
#include "compiler/status.h"

static int same_shape(const dfl_tensor *x, const dfl_tensor *y) {
  if (x->ndim != y->ndim) return 0;
  for (int d = 0; d < x->ndim; d++)
    if (x->shape[d] != y->shape[d]) return 0;
  return 1;
}

/* Op indices moved after dropping fused ops: producers are recomputed (t of a fused pair is
** written by nothing now). */
static void compact(dfl_graph *g, const int *drop) {
  int w = 0;
  for (int i = 0; i < g->nops; i++)
    if (!drop[i]) g->ops[w++] = g->ops[i];
  g->nops = w;
  for (int x = 0; x < g->nt; x++) g->t[x].producer = -1;
  for (int i = 0; i < g->nops; i++)
    for (int k = 0; k < g->ops[i].n_out; k++) {
      int y = g->ops[i].out[k];
      if (y >= 0 && y < g->nt && g->t[y].producer < 0) g->t[y].producer = i;
    }
}

/* Per tensor: how many op inputs read it and how many op outputs write it; per op a drop flag
** (all zero). The rewrites' scratch; 1 when out of memory. */
static int uses_open(const dfl_graph *g, int **readers, int **writers, int **drop) {
  int nt = g->nt;
  *readers = calloc((size_t)nt + 1, sizeof(int));
  *writers = calloc((size_t)nt + 1, sizeof(int));
  *drop = calloc((size_t)g->nops + 1, sizeof(int));
  if (!*readers || !*writers || !*drop) {
    free(*readers); free(*writers); free(*drop);
    return 1;
  }
  for (int i = 0; i < g->nops; i++) {
    const dfl_op *op = &g->ops[i];
    for (int k = 0; k < op->n_in; k++)
      if (op->in[k] >= 0 && op->in[k] < nt) (*readers)[op->in[k]]++;
    for (int k = 0; k < op->n_out; k++)
      if (op->out[k] >= 0 && op->out[k] < nt) (*writers)[op->out[k]]++;
  }
  return 0;
}

/* The op that writes t when t is an activation that op alone writes, op j alone reads (once), and
** that op comes before j and is not dropped: the producer a pairwise rewrite may fuse with j; else -1. */
static int sole_producer(const dfl_graph *g, const int *readers, const int *writers, const int *drop, int t, int j) {
  if (t < 0 || t >= g->nt || g->t[t].kind != DFL_T_ACT || readers[t] != 1 || writers[t] != 1) return -1;
  int i = g->t[t].producer;
  return i < 0 || i >= j || drop[i] ? -1 : i;
}

int dfl_fuse(dfl_graph *g) {
  int nt = g->nt, nops = g->nops, fused = 0;
  int *readers, *writers, *drop;
  if (uses_open(g, &readers, &writers, &drop)) return -1;
  for (int j = 0; j < nops; j++) {
    dfl_op *ac = &g->ops[j];
    if (ac->code != DFL_OP_ACCUM || ac->n_in != 2) continue;
    int acc = ac->in[0], t = ac->in[1];
    if (t < 0 || t >= nt || acc < 0 || acc >= nt) continue;
    const dfl_tensor *tt = &g->t[t], *ta = &g->t[acc];
    int i = sole_producer(g, readers, writers, drop, t, j);
    if (i < 0) continue;
    dfl_op *mm = &g->ops[i];
    if (mm->code != DFL_OP_MATMUL || mm->n_in != 2 || mm->a.beta != 0 || mm->out[0] != t || mm->phase != ac->phase)
      continue;
    if (ta->dtype != DFL_F32 || !dfl_tensor_is_persistent(ta) || !same_shape(ta, tt)) continue;
    if (mm->in[0] == acc || mm->in[1] == acc) continue;
    int touched = 0; /* the accumulation moves from j up to i: nothing in between may see acc */
    for (int k = i + 1; k < j && !touched; k++) {
      const dfl_op *o = &g->ops[k];
      for (int q = 0; q < o->n_in; q++) touched |= o->in[q] == acc;
      for (int q = 0; q < o->n_out; q++) touched |= o->out[q] == acc;
    }
    if (touched) continue;
    mm->in[2] = acc;
    mm->n_in = 3;
    mm->out[0] = acc;
    mm->a.beta = 1;
    drop[j] = 1;
    fused++;
  }
  if (fused) compact(g, drop);
  free(readers); free(writers); free(drop);
  return fused;
}

/* Does an op strictly between i and j write t (or, with reads, read it)? Ops already fused away
** (drop) are skipped: their effects sit at their producer's place. */
static int touched_between(const dfl_graph *g, const int *drop, int i, int j, int t, int reads) {
  for (int k = i + 1; k < j; k++) {
    if (drop[k]) continue;
    const dfl_op *o = &g->ops[k];
    for (int q = 0; reads && q < o->n_in; q++)
      if (o->in[q] == t) return 1;
    for (int q = 0; q < o->n_out; q++)
      if (o->out[q] == t) return 1;
  }
  return 0;
}

/* Is the pair MATMUL (or RMSNORM_BWD) g->ops[i] -> t ; ADD g->ops[j] (reading t and r, writing u)
** fusable? */
static int add_pair_ok(const dfl_graph *g, const int *drop, int i, int j, int t, int r, int u) {
  const dfl_op *mm = &g->ops[i], *ad = &g->ops[j];
  int gemm = ((mm->code == DFL_OP_MATMUL && mm->n_in == 2) || (mm->code == DFL_OP_MATMUL_F8 && mm->n_in == 4)) &&
             mm->a.beta == 0 && mm->n_out == 1;
  int norm = mm->code == DFL_OP_RMSNORM_BWD && mm->n_in == 4 && mm->n_out == 2;
  if (!(gemm || norm) || mm->out[0] != t || mm->phase != ad->phase) return 0;
  const dfl_tensor *tt = &g->t[t], *tr = &g->t[r], *tu = &g->t[u];
  if (tt->dtype != tr->dtype || tt->dtype != tu->dtype || !same_shape(tt, tr) || !same_shape(tt, tu)) return 0;
  if (r == t || u == r || u == t) return 0;
  for (int k = 0; k < mm->n_in; k++) /* the producer never writes an operand, nor reads r twice */
    if (r == mm->in[k] || u == mm->in[k]) return 0;
  if (norm && (r == mm->out[1] || u == mm->out[1])) return 0;
  /* the add moves from j up to i */
  return !touched_between(g, drop, i, j, u, 1) && !touched_between(g, drop, i, j, r, 0);
}

int dfl_fuse_add(dfl_graph *g) {
  int nt = g->nt, nops = g->nops, fused = 0;
  int *readers, *writers, *drop;
  if (uses_open(g, &readers, &writers, &drop)) return -1;
  for (int j = 0; j < nops; j++) {
    const dfl_op *ad = &g->ops[j];
    if (ad->code != DFL_OP_ADD || ad->n_in != 2 || ad->n_out != 1) continue;
    int u = ad->out[0];
    if (u < 0 || u >= nt) continue;
    /* either operand may be the product; try the one written last first (the other one must
    ** already hold its value at the MATMUL's place) */
    int side[2] = {1, 0};
    int p0 = ad->in[0] >= 0 && ad->in[0] < nt ? g->t[ad->in[0]].producer : -1;
    int p1 = ad->in[1] >= 0 && ad->in[1] < nt ? g->t[ad->in[1]].producer : -1;
    if (p0 > p1) side[0] = 0, side[1] = 1;
    for (int s = 0; s < 2; s++) {
      int t = ad->in[side[s]], r = ad->in[1 - side[s]];
      if (t < 0 || t >= nt || r < 0 || r >= nt) break;
      int i = sole_producer(g, readers, writers, drop, t, j);
      if (i < 0 || !add_pair_ok(g, drop, i, j, t, r, u)) continue;
      dfl_op *mm = &g->ops[i];
      if (mm->code == DFL_OP_MATMUL || mm->code == DFL_OP_MATMUL_F8) {
        mm->in[mm->n_in++] = r;
        mm->a.beta = 1;
      } else {
        mm->in[4] = r;
        mm->n_in = 5;
      }
      mm->out[0] = u;
      drop[j] = 1;
      fused++;
      break;
    }
  }
  if (fused) compact(g, drop);
  free(readers); free(writers); free(drop);
  return fused;
}

int dfl_fuse_overwrite(dfl_graph *g) {
  int done = 0;
  for (int a = 0; a < g->nops; a++) {
    dfl_op *ad = &g->ops[a];
    if (ad->code != DFL_OP_ADAMW || ad->n_in < 5 || ad->a.keep_grad) continue;
    int acc = ad->in[4], w = -1, writers = 0, early_read = 0;
    if (acc < 0 || acc >= g->nt || g->t[acc].dtype != DFL_F32 || !dfl_tensor_is_persistent(&g->t[acc])) continue;
    for (int i = 0; i < g->nops; i++) {
      if (i == a) continue;
      const dfl_op *o = &g->ops[i];
      for (int k = 0; k < o->n_out; k++)
        if (o->out[k] == acc) { writers++; w = i; }
    }
    if (writers != 1 || w > a) continue;
    dfl_op *wo = &g->ops[w];
    int is_mm = wo->code == DFL_OP_MATMUL && wo->a.beta == 1 && wo->n_in == 3 && wo->in[2] == acc;
    int is_acc = wo->code == DFL_OP_ACCUM && wo->n_in == 2 && wo->in[0] == acc && wo->in[1] != acc;
    if (!is_mm && !is_acc) continue;
    if (is_mm && (wo->in[0] == acc || wo->in[1] == acc)) continue;
    for (int i = 0; i < w && !early_read; i++) /* who reads acc before its writer would see the zero */
      for (int k = 0; k < g->ops[i].n_in; k++) early_read |= g->ops[i].in[k] == acc;
    if (early_read) continue;
    if (is_mm) {
      wo->in[2] = -1;
      wo->n_in = 2;
      wo->a.beta = 0;
    } else {
      wo->code = DFL_OP_COPY;
      wo->in[0] = wo->in[1];
      wo->in[1] = -1;
      wo->n_in = 1;
    }
    ad->a.keep_grad = 1;
    done++;
  }
  return done;
}

/*
** dfl_fuse_grads_lowp (train.grads = bf16, after dfl_fuse_overwrite): an accumulator its single
** writer overwrites each step holds the gradient in the param's dtype (bf16), as the reference's
** BF16Optimizer keeps it ("grad (bf16) -> fp32" in AdamW). Per weight element the dW GEMM writes 2
** bytes less, the norm and AdamW read 2 less each, and the plan's grads take half the bytes. The
** writer is a MATMUL with inputs in that dtype (cuBLASLt rounds its f32 result once) or a COPY (a
** conversion); a COPY of an activation t already in that dtype, which only it reads and one op
** writes, is removed and that op writes the accumulator itself (the norm weights' RMSNORM_BWD, the
** k-norm's ADD of its two halves, the k/v weights' two summed GEMMs).
*/
int dfl_fuse_grads_lowp(dfl_graph *g) {
  int done = 0, removed = 0, *readers, *writers, *drop;
  if (uses_open(g, &readers, &writers, &drop)) return -1;
  for (int a = 0; a < g->nops; a++) {
    const dfl_op *ad = &g->ops[a];
    if (ad->code != DFL_OP_ADAMW || ad->n_in < 5 || !ad->a.keep_grad) continue;
    int acc = ad->in[4], p = ad->in[0];
    /* written by its ADAMW (in place, kept) and by one other op */
    if (acc < 0 || p < 0 || g->t[acc].dtype != DFL_F32 || writers[acc] != 2) continue;
    dfl_dtype lp = g->t[p].dtype;
    if (lp != DFL_BF16 && lp != DFL_F16) continue;
    int w = g->t[acc].producer; /* its first writer: the other one */
    if (w < 0 || w >= a) continue;
    dfl_op *wo = &g->ops[w];
    if (wo->code == DFL_OP_MATMUL) {
      if (wo->n_in != 2 || g->t[wo->in[0]].dtype != lp || g->t[wo->in[1]].dtype != lp) continue;
    } else if (wo->code == DFL_OP_COPY) {
      int t = wo->in[0], i = sole_producer(g, readers, writers, drop, t, w);
      if (i >= 0 && g->t[t].dtype == lp && same_shape(&g->t[t], &g->t[acc]) && !touched_between(g, drop, i, w, acc, 1)) {
        dfl_op *po = &g->ops[i];
        int in_use = 0;
        for (int k = 0; k < po->n_in; k++) in_use |= po->in[k] == acc;
        if (!in_use) {
          for (int k = 0; k < po->n_out; k++)
            if (po->out[k] == t) po->out[k] = acc;
          drop[w] = 1;
          removed++;
        }
      }
    } else {
      continue;
    }
    g->t[acc].dtype = lp;
    done++;
  }
  if (removed) compact(g, drop);
  free(readers); free(writers); free(drop);
  return done;
}

int dfl_fuse_rope_part_ok(int hd, int rd) {
  int ni = hd / 8;
  return hd % 8 == 0 && ni <= 32 && !(ni & (ni - 1)) && rd > 0 && rd < hd && rd % 16 == 0;
}

/*
**   y = RMSNORM(x, w) {group hd} ; z = ROPE(y, pos) {head_dim hd}      ->      z = ROPE(x, pos, w)
**
** The per-head q/k norms of Qwen3-style attention feed RoPE directly. In a forward-only graph
** (the frozen target, evaluation) nothing reads the norm's rstd, so the rotation can normalize
** each head itself: y is never written nor re-read (per element of q and k, bf16: 4 bytes and a
** launch saved). Legal when: y is an activation written by that RMSNORM alone and read by that
** ROPE alone; the norm's rstd is read by nothing; the norm's group is the rope's head_dim, a
** multiple of 16 whose 16th is a power of two (the CUDA kernel's lanes per head), or with partial
** rotary a shape dfl_fuse_rope_part_ok takes (qwen3_5's 64 of 256); same phase; x
** and w are not written between the two (the norm moves down to the rope's place). Numerics: the
** CPU computes the same values (k_rope does k_rmsnorm's arithmetic); the CUDA kernel sums a head's
** squares in another order and rounds the normalized head to y's dtype as the unfused graph stored
** it, so results match the unfused ones to the last bits of rstd.
*/
int dfl_fuse_norm_rope(dfl_graph *g) {
  int nt = g->nt, nops = g->nops, fused = 0;
  int *readers, *writers, *drop;
  if (uses_open(g, &readers, &writers, &drop)) return -1;
  for (int j = 0; j < nops; j++) {
    dfl_op *ro = &g->ops[j];
    if (ro->code != DFL_OP_ROPE || ro->n_in != 2) continue;
    int y = ro->in[0], i = sole_producer(g, readers, writers, drop, y, j);
    if (i < 0) continue;
    const dfl_op *no = &g->ops[i];
    int hd = ro->a.head_dim, rd = ro->a.rot_dim;
    if (no->code != DFL_OP_RMSNORM || no->n_in != 2 || no->n_out != 2 || no->out[0] != y || no->phase != ro->phase)
      continue;
    if (no->a.group != hd) continue;
    if (rd && rd != hd ? !dfl_fuse_rope_part_ok(hd, rd) : hd % 16 || ((hd / 16) & (hd / 16 - 1))) continue;
    int rs = no->out[1], x = no->in[0], w = no->in[1];
    if (rs < 0 || rs >= nt || readers[rs] != 0 || x == y || w == y) continue;
    dfl_dtype md = g->t[y].dtype;
    if (md != DFL_F32 && md != DFL_BF16 && md != DFL_F16) continue;
    /* the norm moves from i down to j: x and w must keep their values */
    if (touched_between(g, drop, i, j, x, 0) || touched_between(g, drop, i, j, w, 0)) continue;
    ro->in[0] = x;
    ro->in[2] = w;
    ro->n_in = 3;
    ro->a.eps = no->a.eps;
    ro->a.mid_dtype = (int)md;
    drop[i] = 1;
    fused++;
  }
  if (fused) compact(g, drop);
  free(readers); free(writers); free(drop);
  return fused;
}

/*
**   a = ROPE(x, pos) ; ... ; b = ROPE(x2, pos)      ->      (a, b) = ROPE(x, pos, x2)   (pair form)
**
** q and k of a layer rotate by the same positions, and so do their gradients in the backward. As
** two launches, each forms every row's angles (double pow, sincos) and k's (8 heads of the 8B)
** is too short to fill the GPU: on one H200 the target's k RoPE ran at 0.7 TB/s (session 12,
** ncu). The pair form rotates both in one launch. Legal when: two ROPEs of one phase with the same
** position tensor, head_dim, theta and direction, both plain or both normed with the same eps and
** mid dtype; the earlier one (i) moves down to the later one's place (j), so i's inputs are not
** written and its output neither read nor written in between, or else j moves up to i (the
** backward: dk's rotation is read by the k-norm's backward before dq's is formed), so j's inputs
** exist at i and are not written in between, and its output is not touched in between; neither op
** reads the other's output, and the outputs differ. For each ROPE j the nearest earlier unpaired match is taken (the
** drafter's q pairs with its block keys kn, which share pos_q; the context keys kc keep theirs).
** Numerics: the values of the two unfused ops (same per-element arithmetic on both backends).
*/
static int rope_pair_ok(const dfl_graph *g, const int *drop, int i, int j) {
  const dfl_op *a = &g->ops[i], *b = &g->ops[j];
  if (a->code != DFL_OP_ROPE || a->n_out != 1 || b->n_out != 1 || a->n_in != b->n_in || a->phase != b->phase) return 0;
  if (a->a.rot_dim != b->a.rot_dim) return 0;
  if (a->a.rot_dim && a->a.rot_dim != a->a.head_dim && !dfl_fuse_rope_part_ok(a->a.head_dim, a->a.rot_dim)) return 0;
  if (a->in[1] != b->in[1] || a->a.head_dim != b->a.head_dim || a->a.theta != b->a.theta || a->a.inverse != b->a.inverse)
    return 0;
  if (a->n_in == 3 && (a->a.eps != b->a.eps || a->a.mid_dtype != b->a.mid_dtype)) return 0;
  for (int k = 0; k < a->n_in; k++)
    if (a->in[k] == b->out[0]) return 0;
  for (int k = 0; k < b->n_in; k++)
    if (b->in[k] == a->out[0]) return 0;
  if (a->out[0] == b->out[0]) return 0;
  int down = 1, up = 1; /* i moves down to j, or j up to i */
  for (int k = 0; k < a->n_in; k++)
    if (touched_between(g, drop, i, j, a->in[k], 0)) down = 0;
  if (touched_between(g, drop, i, j, a->out[0], 1)) down = 0;
  for (int k = 0; k < b->n_in; k++)
    if (touched_between(g, drop, i - 1, j, b->in[k], 0)) up = 0; /* written at i or after: not there yet */
  if (touched_between(g, drop, i, j, b->out[0], 1)) up = 0;
  return down ? 1 : up ? 2 : 0;
}

int dfl_fuse_rope_pair(dfl_graph *g) {
  int nops = g->nops, fused = 0;
  int *readers, *writers, *drop;
  if (uses_open(g, &readers, &writers, &drop)) return -1;
  for (int j = 0; j < nops; j++) {
    dfl_op *b = &g->ops[j];
    if (b->code != DFL_OP_ROPE || b->n_out != 1 || (b->n_in != 2 && b->n_in != 3)) continue;
    int i = j - 1, how = 0;
    for (; i >= 0; i--)
      if (!drop[i] && g->ops[i].code == DFL_OP_ROPE && g->ops[i].n_out == 1 && (how = rope_pair_ok(g, drop, i, j))) break;
    if (i < 0) continue;
    const dfl_op *a = &g->ops[i];
    dfl_op f = *a; /* i's op at j's place, with j's tensor second */
    int normed = a->n_in == 3;
    f.in[normed ? 3 : 2] = b->in[0];
    if (normed) f.in[4] = b->in[2];
    f.n_in = normed ? 5 : 3;
    f.out[1] = b->out[0];
    f.n_out = 2;
    f.a.kv_heads = b->a.heads;
    const char *dot = strrchr(b->label, '.'); /* "layers.3.qr" + "kr" -> "layers.3.qr+kr" */
    size_t n = strlen(f.label);
    snprintf(f.label + n, sizeof f.label - n, "+%s", dot ? dot + 1 : b->label);
    if (how == 1) *b = f, drop[i] = 1;
    else g->ops[i] = f, drop[j] = 1;
    fused++;
  }
  if (fused) compact(g, drop);
  free(readers); free(writers); free(drop);
  return fused;
}

/*
**   y = RMSNORM(x, w) {group = row} ; (q, s) = QUANT_F8(y)    ->    (q, rstd, s) = RMSNORM(x, w)
**   h = SWIGLU(g, u)               ; (q, s) = QUANT_F8(h)    ->    (q, s) = SWIGLU(g, u)
**
** An FP8 target quantizes per row the outputs of its two norms (for q/k/v and gate/up) and of its
** SwiGLU (for down), and reads them nowhere else: the producer holds the row (the amax is one more
** block reduction), so it quantizes it itself and y is never written nor re-read. Per element,
** bf16: 2 bytes written and 2 read saved. examples/qwen3-8b-fp8.dfl: 102 of its 136 QUANT_F8 (the
** attention outputs' 34 stay apart). On one H200 the norms and their quantizations went from 3.8 to
** 2.2 ms per step. The SwiGLU's (9 bytes an element become 5) was first dropped as slower alone
** (session 5); its kernel now holds two blocks per SM, the 34 take 4.5 ms against ~5.0 for the
** separate kernels, and the step is ~0.5 ms shorter, same losses (docs/performance.md, session 10).
** dfl_fuse_passes with DFL_FUSE_NO_SWIGLU_Q (compile { swiglu_quant = false }) leaves it apart. Legal when: y is an activation written by
** that producer alone and read by that QUANT_F8 alone; same phase; the row is a multiple of 512
** features up to 16384 or of 1024 up to 32768 (the CUDA kernels' block holds one row in registers,
** 16 or 32 features per thread); a norm's group is the whole row and nothing reads its rstd; the
** producer's inputs are not written between the two (it moves down to the QUANT_F8's place); y is
** f32 or bf16. Numerics: both backends round y to its dtype (a.mid_dtype) before quantizing, as the
** unfused graph stores it (the CPU's unfused graph keeps f32 values: there, f32 graphs are
** bit-identical, bf16 ones differ by that rounding). The quantized SwiGLU is never in place
** (plan.c): a block's bytes land on other rows of g.
*/
int dfl_fuse_quant_ex(dfl_graph *g, int swiglu_q) {
  int nops = g->nops, fused = 0;
  int *readers, *writers, *drop;
  if (uses_open(g, &readers, &writers, &drop)) return -1;
  for (int j = 0; j < nops; j++) {
    dfl_op *qo = &g->ops[j];
    if (qo->code != DFL_OP_QUANT_F8 || qo->n_in != 1 || qo->n_out != 2) continue;
    int y = qo->in[0], i = sole_producer(g, readers, writers, drop, y, j);
    if (i < 0) continue;
    const dfl_op *no = &g->ops[i];
    int norm = no->code == DFL_OP_RMSNORM && no->n_in == 2 && no->n_out == 2;
    int swig = no->code == DFL_OP_SWIGLU && no->n_in == 2 && no->n_out == 1 && swiglu_q;
    if (!(norm || swig) || no->phase != qo->phase || no->out[0] != y) continue;
    int64_t C = g->t[y].shape[g->t[y].ndim - 1];
    if (!(C % 512 == 0 && (C <= 16384 || (C % 1024 == 0 && C <= 32768)))) continue; /* the CUDA kernel's rows */
    if (norm && (no->a.group != C || readers[no->out[1]] != 0)) continue;
    dfl_dtype md = g->t[y].dtype;
    if (md != DFL_F32 && md != DFL_BF16) continue;
    if (touched_between(g, drop, i, j, no->in[0], 0) || touched_between(g, drop, i, j, no->in[1], 0)) continue;
    dfl_op f = *no; /* the producer, moved to j with the quantizer's outputs */
    f.out[0] = qo->out[0];
    f.out[norm ? 2 : 1] = qo->out[1];
    f.n_out = norm ? 3 : 2;
    f.a.mid_dtype = (int)md;
    *qo = f;
    drop[i] = 1;
    fused++;
  }
  if (fused) compact(g, drop);
  free(readers); free(writers); free(drop);
  return fused;
}

int dfl_fuse_quant(dfl_graph *g) { return dfl_fuse_quant_ex(g, 1); }

int dfl_fuse_passes(dfl_graph *g, unsigned flags) {
  if ((flags & DFL_FUSE_TRAIN) && dfl_fuse(g) < 0) return DFL_ENOMEM;
  if (dfl_fuse_add(g) < 0 || dfl_fuse_norm_rope(g) < 0) return DFL_ENOMEM;
  if (!(flags & DFL_FUSE_NO_ROPE_PAIR) && dfl_fuse_rope_pair(g) < 0) return DFL_ENOMEM;
  if (dfl_fuse_quant_ex(g, !(flags & DFL_FUSE_NO_SWIGLU_Q)) < 0) return DFL_ENOMEM;
  return DFL_OK;
}
