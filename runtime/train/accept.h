/*
** accept.h: the acceptance length a greedy speculative decoder sees, counted without a decoder,
** and the check that says when that count holds (the data is the target's greedy output).
**
** When a row's response is the target's own greedy continuation, greedy speculative decoding is a
** function of the data: the decoder's first block sits at the first response position (the token
** the prefill produced), the drafter proposes B - 1 tokens after it, the target accepts the longest
** prefix equal to its own argmax (= the data), adds one token of its own, and the next block starts
** right after: anchor += accepted + 1. Acceptance length = tokens / blocks, tokens = sum of
** (accepted + 1). The eval's tau draws anchors uniformly instead; the decoder spends more blocks
** where the drafter is weak (a row costs the sum of 1/tau over its positions, not the mean of tau),
** so tau is biased high (docs/training.md "tau and accept").
**
** The walk is sequential per row but a block's result depends only on its anchor (blocks are
** independent in attention, the context is the target's features of the row), so each round runs,
** for every row in flight, a window of the next N anchor candidates starting at the walk's next
** anchor (N = the graph's anchor slots), and the walk goes on through the window as far as its
** anchors lie inside it. Rows are batched: a slot freed by a finished row takes the next row.
** The result is the one-block-per-round walk's, exactly (train_accept checks both).
*/
#ifndef DFL_ACCEPT_H
#define DFL_ACCEPT_H

#include <stdint.h>
#include <stdio.h>

#include "compiler/spec.h"
#include "runtime/backend.h"
#include "runtime/io/data.h"

/* One row's walk. mask: the row's loss mask [S] (packed as the graph sees it). */
typedef struct dfl_walk {
  const int32_t *mask;
  int S, B;
  int from;                /* the next block's anchor is the first candidate >= from */
  int64_t tokens, blocks;  /* what the walk has counted so far */
  /* per response (a supervised span: one turn), as a decoding benchmark reports it */
  int64_t span_tokens, span_blocks, spans;
  double span_sum;         /* sum over finished spans of tokens / blocks */
} dfl_walk;

void dfl_walk_init(dfl_walk *w, const int32_t *mask, int S, int B);
/* First anchor candidate p >= from (p and p + 1 supervised: a block there has a label, as the
** training sampler requires), -1 when none: where a decoder starts a block. The first one of a
** row is its first response position; after a response's last token the walk goes to the next
** supervised span (the next turn of a conversation) or ends. */
int dfl_walk_candidate(const dfl_walk *w, int from);
/* The walk's next anchor, -1 when the row is done. */
static inline int dfl_walk_anchor(const dfl_walk *w) { return dfl_walk_candidate(w, w->from); }
/* The block at the walk's next anchor accepted `accepted` tokens: count it, move on. */
void dfl_walk_take(dfl_walk *w, int accepted);
/* Accepted tokens of the block at `anchor` whose flags are correct[0..B-1] (correct[j]: the
** drafter's token at anchor + j equals the data's): the longest prefix j = 1, 2, ... of positions
** inside the row (< S), supervised and correct. The response's last token bounds it: past it the
** data says nothing, and a decoder stops there (its end of sequence). */
int dfl_walk_accepted(const float *correct, const int32_t *mask, int S, int B, int anchor);

/* The drafter under the walk: run blocks at anchors[b*N] (keep[b*N] = 1 for a used slot) over the
** rows rows[0..k-1] (slots k..b-1 are empty) and fill correct[b*N*B]: 1 where the block's token j
** equals the row's token at anchor + j. The eval graph, or a planted oracle in tests. */
typedef int (*dfl_accept_run_fn)(void *ctx, const int *rows, int k, const int32_t *anchors, const int32_t *keep,
                                 float *correct);

typedef struct dfl_accept_stats {
  double accept;           /* tokens / blocks (0 without a block) */
  /* the mean over responses (supervised spans) of each one's tokens / blocks: what the DFlash
  ** authors' benchmark prints as "Average Acceptance length" (a mean of per-prompt means) */
  double accept_spans;
  int64_t spans;
  int64_t tokens, blocks;
  int64_t rows;            /* rows walked */
  int64_t rounds;          /* drafter runs */
  int64_t anchors_run;     /* blocks the runs computed (>= blocks: the windows' look-ahead) */
  double seconds;
} dfl_accept_stats;

/* The walk over rows 0..n-1 whose masks are masks[n*S] (row r at r*S), with b row slots of N
** anchor slots each per run of `run`, of which each row's window uses at most W (1..N; <= 0 or
** > N: N). Returns DFL_OK or the first error of `run`. */
int dfl_accept_count(const int32_t *masks, int n, int S, int B, int b, int N, int W, dfl_accept_run_fn run,
                     void *ctx, dfl_accept_stats *st);

/* The agreement of the data with the target: over the supervised positions p >= 1 of every row,
** the fraction whose token equals the target's argmax after positions 0..p-1 (the target's LM
** head on its final hidden state), and the target's mean cross-entropy there. Below
** DFL_AGREE_GREEDY the data is not the target's greedy output and accept is an estimate. */
#define DFL_AGREE_GREEDY 0.98
typedef struct dfl_agree_stats {
  double agreement;        /* agreeing / tokens */
  double ce;               /* mean target CE (nats) over those tokens */
  int64_t tokens, agreeing, rows;
  double seconds;
} dfl_agree_stats;
/* The target of `s` (its weights loaded on backend kind), batches of s->batch rows of s->seq_len. */
int dfl_target_agreement(const dfl_spec *s, dfl_backend_kind kind, const dfl_dataset *d, dfl_agree_stats *st);
/* The lines dflc eval prints: the agreement, and below DFL_AGREE_GREEDY what it means for accept. */
void dfl_agree_print(FILE *f, const dfl_agree_stats *st);

#endif
