/*
** fuse.c: the fusion stage (DESIGN stage 5). One rewrite so far, the one that pays on the GPU:
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
*/
#include <stdlib.h>
#include <string.h>

#include "compiler/graph.h"

static int same_shape(const dfl_tensor *x, const dfl_tensor *y) {
  if (x->ndim != y->ndim) return 0;
  for (int d = 0; d < x->ndim; d++)
    if (x->shape[d] != y->shape[d]) return 0;
  return 1;
}

int dfl_fuse(dfl_graph *g) {
  int nt = g->nt, nops = g->nops, fused = 0;
  int *readers = calloc((size_t)nt + 1, sizeof(int)), *writers = calloc((size_t)nt + 1, sizeof(int));
  int *drop = calloc((size_t)nops + 1, sizeof(int));
  if (!readers || !writers || !drop) {
    free(readers); free(writers); free(drop);
    return -1;
  }
  for (int i = 0; i < nops; i++) {
    const dfl_op *op = &g->ops[i];
    for (int k = 0; k < op->n_in; k++)
      if (op->in[k] >= 0 && op->in[k] < nt) readers[op->in[k]]++;
    for (int k = 0; k < op->n_out; k++)
      if (op->out[k] >= 0 && op->out[k] < nt) writers[op->out[k]]++;
  }
  for (int j = 0; j < nops; j++) {
    dfl_op *ac = &g->ops[j];
    if (ac->code != DFL_OP_ACCUM || ac->n_in != 2) continue;
    int acc = ac->in[0], t = ac->in[1];
    if (t < 0 || t >= nt || acc < 0 || acc >= nt) continue;
    const dfl_tensor *tt = &g->t[t], *ta = &g->t[acc];
    int i = tt->producer;
    if (i < 0 || i >= j || drop[i] || tt->kind != DFL_T_ACT || readers[t] != 1 || writers[t] != 1) continue;
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
  if (fused) {
    int w = 0;
    for (int i = 0; i < nops; i++)
      if (!drop[i]) g->ops[w++] = g->ops[i];
    g->nops = w;
    /* op indices moved: producers are recomputed (t of a fused pair is written by nothing now) */
    for (int x = 0; x < nt; x++) g->t[x].producer = -1;
    for (int i = 0; i < g->nops; i++)
      for (int k = 0; k < g->ops[i].n_out; k++) {
        int y = g->ops[i].out[k];
        if (y >= 0 && y < nt && g->t[y].producer < 0) g->t[y].producer = i;
      }
  }
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
