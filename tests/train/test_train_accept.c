/*
** train_accept: the greedy decoder's walk (runtime/train/accept.h) on planted drafters, whose
** accepted lengths are known by construction: a drafter is a table acc[row][anchor] (the block at
** that anchor predicts the next acc tokens right, then a wrong one), the data its row masks.
**   - hand-computed walks: a perfect drafter, a useless one, a mixed one whose last block runs
**     into the response's end (the cap), two turns in one row (two supervised spans: the pooled
**     tokens / blocks and the mean over responses);
**   - the rounds and windows (b rows in flight, N anchor slots, windows W <= N) give exactly the
**     walk of a plain per-row loop written here, over random masks and random drafters;
**   - an easy/hard mix: the uniform-anchor estimate (the eval's sampler, the metric's prefix)
**     is near the arithmetic mean of 1 + acc over positions, the count is tokens / blocks with
**     blocks = sum of 1/tau over the positions: 4.53 vs 127/71 = 1.79, as predicted.
** No graph, no weights: milliseconds. The walk through the real eval graph: train_accept_nano.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/io/data.h"
#include "runtime/train/accept.h"

static int failures;
#include "tests/common/check.h"

/* The planted drafter: acc[r * S + a] tokens right after anchor a of row r, then a miss. */
typedef struct {
  const int *acc;
  int S, B, N, b;
  int64_t calls;
} oracle;

static int oracle_run(void *vctx, const int *rows, int k, const int32_t *anchors, const int32_t *keep,
                      float *correct) {
  oracle *o = vctx;
  o->calls++;
  for (int i = 0; i < o->b; i++)
    for (int n = 0; n < o->N; n++) {
      float *c = correct + ((int64_t)i * o->N + n) * o->B;
      int a = anchors[(int64_t)i * o->N + n], ok = i < k && keep[(int64_t)i * o->N + n];
      /* a kept slot outside the row's slots would be a driver bug: its flags are garbage (1s) */
      int m = ok ? o->acc[(int64_t)rows[i] * o->S + a] : o->B;
      for (int j = 0; j < o->B; j++) c[j] = j >= 1 && j <= m ? 1.0f : (ok ? 0.0f : 1.0f);
    }
  return 0;
}

/* The walk written plainly: one block at a time, straight from the table. */
static void plain_walk(const int32_t *mask, const int *acc, int S, int B, int64_t *tokens, int64_t *blocks,
                       int64_t *spans, double *span_sum) {
  *tokens = *blocks = 0;
  int a = 0;
  int64_t st = 0, sb = 0;   /* this response's */
  for (;;) {
    while (a + 1 < S && !(mask[a] && mask[a + 1])) a++;
    if (a + 1 >= S) return;
    int k = 0;
    while (k < acc[a] && k < B - 1 && a + k + 1 < S && mask[a + k + 1]) k++;
    ++*blocks;
    *tokens += k + 1;
    st += k + 1, sb++;
    a += k + 1;
    if (!(a + 1 < S && mask[a] && mask[a + 1])) {   /* the response's end */
      ++*spans;
      *span_sum += (double)st / (double)sb;
      st = sb = 0;
    }
  }
}

static dfl_accept_stats walk(const int32_t *masks, const int *acc, int n, int S, int B, int b, int N, int W) {
  oracle o = {acc, S, B, N, b, 0};
  dfl_accept_stats st;
  int rc = dfl_accept_count(masks, n, S, B, b, N, W, oracle_run, &o, &st);
  CHECK(rc == 0, "dfl_accept_count returned %d", rc);
  CHECK(st.rounds == o.calls, "rounds %lld = drafter runs %lld", (long long)st.rounds, (long long)o.calls);
  return st;
}

static void span(int32_t *mask, int from, int to) {   /* supervised [from, to) */
  for (int p = from; p < to; p++) mask[p] = 1;
}

static void hand_computed(void) {
  enum { S = 24, B = 4 };
  int32_t mask[S] = {0};
  int acc[S];
  span(mask, 4, 20);   /* prompt 0..3, response 4..19 */

  /* perfect: blocks at 4, 8, 12, 16 (4 tokens each); at 16 the labels 17..19 are the last ones */
  for (int p = 0; p < S; p++) acc[p] = B - 1;
  dfl_accept_stats st = walk(mask, acc, 1, S, B, 1, 4, 4);
  CHECK(st.blocks == 4 && st.tokens == 16 && st.accept == 4.0, "perfect: %lld tokens / %lld blocks", (long long)st.tokens,
        (long long)st.blocks);
  /* useless: one block per position 4..18 (19 is the last token: no label after it) */
  for (int p = 0; p < S; p++) acc[p] = 0;
  st = walk(mask, acc, 1, S, B, 1, 4, 4);
  CHECK(st.blocks == 15 && st.tokens == 15 && st.accept == 1.0, "useless: %lld / %lld", (long long)st.tokens,
        (long long)st.blocks);
  /* mixed: 4 -> accepts 2 (next anchor 7), 7 -> 3 (11), 11 -> 0 (12), 12 -> 1 (14), 14 -> 3 (18),
  ** 18 -> planted 3 but only 19 is left: 1 (20, the end). 3+4+1+2+4+2 = 16 tokens, 6 blocks. */
  acc[4] = 2, acc[7] = 3, acc[11] = 0, acc[12] = 1, acc[14] = 3, acc[18] = 3;
  for (int W = 1; W <= 6; W++) {
    st = walk(mask, acc, 1, S, B, 1, 6, W);
    CHECK(st.blocks == 6 && st.tokens == 16 && fabs(st.accept - 16.0 / 6.0) < 1e-12, "mixed, window %d: %lld / %lld",
          W, (long long)st.tokens, (long long)st.blocks);
  }
  st = walk(mask, acc, 1, S, B, 1, 6, 1);
  CHECK(st.rounds == 6, "window 1: one block per round (%lld rounds)", (long long)st.rounds);

  /* two turns: spans 4..9 and 14..19, perfect drafter: 4 -> 3 (8), 8 -> 1 (9 is the span's
  ** last, so 10; 10..13 are the user's turn), 14 -> 3 (18), 18 -> 1 (20): 4+2+4+2 = 12 / 4 */
  memset(mask, 0, sizeof mask);
  span(mask, 4, 10);
  span(mask, 14, 20);
  for (int p = 0; p < S; p++) acc[p] = B - 1;
  st = walk(mask, acc, 1, S, B, 2, 3, 3);
  CHECK(st.blocks == 4 && st.tokens == 12 && st.spans == 2 && st.accept_spans == 3.0, "two turns: %lld / %lld, %lld spans",
        (long long)st.tokens, (long long)st.blocks, (long long)st.spans);
  /* the second turn hopeless: 5 blocks of 1 (14..18); pooled 11 / 7, per response (3 + 1) / 2 */
  for (int p = 14; p < S; p++) acc[p] = 0;
  st = walk(mask, acc, 1, S, B, 1, 4, 4);
  CHECK(st.blocks == 7 && st.tokens == 11 && st.spans == 2 && fabs(st.accept_spans - 2.0) < 1e-12,
        "two turns, one weak: %lld / %lld, per response %.4f", (long long)st.tokens, (long long)st.blocks,
        st.accept_spans);

  /* a response that runs to the end of the row (cut at S): the last label is S - 1 */
  memset(mask, 0, sizeof mask);
  span(mask, 10, S);
  for (int p = 0; p < S; p++) acc[p] = B - 1;
  st = walk(mask, acc, 1, S, B, 1, 2, 2);   /* 10, 14, 18 -> 4 each; 22 -> 1 (23): 14 / 4 */
  CHECK(st.blocks == 4 && st.tokens == 14, "cut at S: %lld / %lld", (long long)st.tokens, (long long)st.blocks);
}

static uint64_t rng_state;
static uint32_t next_u32(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng_state >> 33);
}

/* Rounds and windows against the plain walk: random rows (1 to 3 spans, some cut at S, some with
** no block at all), random drafters, every (b, N, W). */
static void batched_equals_plain(void) {
  enum { S = 64, B = 6, n = 37 };
  int32_t *masks = calloc((size_t)n * S, sizeof *masks);
  int *acc = malloc(sizeof(int) * (size_t)n * S);
  int64_t tok = 0, blk = 0, n_spans = 0;
  double span_sum = 0;
  for (int r = 0; r < n; r++) {
    int32_t *m = masks + (int64_t)r * S;
    int spans = 1 + (int)(next_u32() % 3), p = (int)(next_u32() % 8);
    for (int s = 0; s < spans && p < S; s++) {
      int len = 1 + (int)(next_u32() % 30);
      span(m, p, p + len < S ? p + len : S);
      p += len + 1 + (int)(next_u32() % 6);
    }
    if (r == 5) memset(m, 0, sizeof(int32_t) * S);   /* no supervised token: no block */
    /* a mix of strong and weak stretches */
    for (int a = 0; a < S; a++) acc[(int64_t)r * S + a] = (a / 8) % 2 ? (int)(next_u32() % B) : (int)(next_u32() % 2);
    int64_t t, bl;
    plain_walk(m, acc + (int64_t)r * S, S, B, &t, &bl, &n_spans, &span_sum);
    tok += t;
    blk += bl;
  }
  const int cfg[][3] = {{1, 1, 1}, {1, 8, 8}, {3, 5, 5}, {4, 8, 2}, {2, 16, 16}, {8, 4, 3}, {64, 64, 64}, {5, 7, 1}};
  for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
    dfl_accept_stats st = walk(masks, acc, n, S, B, cfg[c][0], cfg[c][1], cfg[c][2]);
    CHECK(st.tokens == tok && st.blocks == blk && st.rows == n,
          "b %d N %d W %d: %lld tokens / %lld blocks over %lld rows, the plain walk %lld / %lld", cfg[c][0], cfg[c][1],
          cfg[c][2], (long long)st.tokens, (long long)st.blocks, (long long)st.rows, (long long)tok, (long long)blk);
    CHECK(st.anchors_run >= st.blocks, "the runs computed every block the walk took");
    CHECK(st.spans == n_spans && fabs(st.accept_spans - span_sum / n_spans) < 1e-12, "b %d N %d W %d: %lld responses, "
          "mean %.6f; the plain walk %lld, %.6f", cfg[c][0], cfg[c][1], cfg[c][2], (long long)st.spans, st.accept_spans,
          (long long)n_spans, span_sum / n_spans);
  }
  printf("random rows: %lld tokens / %lld blocks = %.4f on every configuration\n", (long long)tok, (long long)blk,
         blk ? (double)tok / blk : 0.0);
  free(masks);
  free(acc);
}

/* The easy/hard mix. Each row: a 16-token prompt, a 128-token response whose first 64 positions
** the drafter gets fully right (acc B - 1) and whose last 64 it never does (acc 0). The walk: 8
** blocks of 8 over the easy half, then one block per hard position but the last (63): 127 tokens
** / 71 blocks = 1.789. The uniform estimate: 127 anchor candidates, 64 worth 8 and 63 worth 1:
** mean 575/127 = 4.528, what the eval's sampler and prefix metric estimate. */
static void easy_hard(void) {
  enum { S = 160, B = 8, P = 16, L = 128, n = 64, N = 16 };
  int32_t *masks = calloc((size_t)n * S, sizeof *masks);
  int *acc = malloc(sizeof(int) * (size_t)n * S);
  for (int r = 0; r < n; r++) {
    span(masks + (int64_t)r * S, P, P + L);
    for (int a = 0; a < S; a++) acc[(int64_t)r * S + a] = a < P + L / 2 ? B - 1 : 0;
  }
  dfl_accept_stats st = walk(masks, acc, n, S, B, 8, N, N);
  double want = 127.0 / 71.0;
  CHECK(st.blocks == 71 * n && st.tokens == 127 * n && fabs(st.accept - want) < 1e-12, "easy/hard: accept %.4f, want %.4f",
        st.accept, want);

  /* the uniform estimate, as the eval computes it: N anchors per row from the sampler, 1 + the
  ** block's supervised-and-correct prefix, mean over blocks */
  dfl_rng rng;
  dfl_rng_seed(&rng, 12345);
  int32_t anc[n * N], keep[n * N];
  CHECK(dfl_anchors_sample(masks, n, S, N, &rng, anc, keep) == (int64_t)n * N, "every row has %d anchors", N);
  double sum = 0;
  for (int i = 0; i < n * N; i++) {
    const int32_t *m = masks + (int64_t)(i / N) * S;
    float c[B];
    for (int j = 0; j < B; j++) c[j] = j >= 1 && j <= acc[(i / N) * S + anc[i]];
    sum += 1 + dfl_walk_accepted(c, m, S, B, anc[i]);
  }
  double tau = sum / (n * N), mean = 575.0 / 127.0;
  /* 1024 draws of a two-valued variable (8 or 1, p ~ 1/2): standard error 0.11; 0.45 is 4 of them */
  CHECK(fabs(tau - mean) < 0.45, "uniform estimate %.3f, its expectation %.3f", tau, mean);
  CHECK(tau > 2 * st.accept, "the uniform estimate (%.3f) is far above the count (%.3f)", tau, st.accept);
  /* the count from the per-position tau: blocks = sum over the walk's positions of 1/tau */
  double inv = 0;
  for (int a = P; a < P + L - 1; a++) inv += 1.0 / (1 + (a < P + L / 2 ? B - 1 : 0));
  CHECK(fabs(127.0 / inv - st.accept) < 1e-9, "tokens / sum(1/tau) = %.4f = the count %.4f", 127.0 / inv, st.accept);
  printf("easy/hard: uniform estimate %.3f (expectation %.3f), count %.3f\n", tau, mean, st.accept);
  free(masks);
  free(acc);
}

int main(void) {
  const char *env = getenv("DFL_TEST_SEED");
  uint64_t seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
  printf("train_accept: seed %llu (DFL_TEST_SEED reproduces)\n", (unsigned long long)seed);
  rng_state = seed;
  hand_computed();
  batched_equals_plain();
  easy_hard();
  printf("train_accept: %s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
