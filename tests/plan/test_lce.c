/*
** test_lce.c: the LINEAR_CE workspace of the CUDA backend (compiler/plan.c dfl_plan_lce_ws), for
** the shapes of the examples and random ones. The contract the backend and the planner share:
** the chunks of `rows` cover every row, no chunk is empty, the logits of one chunk fit in `bytes`
** in the head's dtype, `bytes` never exceeds what vocab_chunk f32 columns over all rows plus the
** [R, H] f32 accumulator of the column-chunked design took (256-byte rounding aside), GEMM-sized
** chunks are multiples of 128 rows with no chunk much narrower than the others, and
** DFL_LCE_ROWS forces the rows per chunk. With anchor rows left out (a.B): the chunks cover the
** other rows, and the logits plus the staging rows stay within the same budget.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "compiler/plan.h"

static int failures;
#include "tests/common/check.h"

static void one(int64_t R0, int64_t H, int64_t V, int chunk, dfl_dtype dt, int per, int64_t want_rows) {
  int64_t R = R0;
  dfl_graph g;
  dfl_graph_init(&g);
  int y = dfl_tensor_2d(&g, "y", dt, DFL_T_INPUT, R, H), w = dfl_tensor_2d(&g, "w", dt, DFL_T_FROZEN, V, H);
  int lab = dfl_tensor_1d(&g, "labels", DFL_I32, DFL_T_INPUT, R), wt = dfl_tensor_1d(&g, "weights", DFL_F32, DFL_T_INPUT, R);
  int out[5] = {dfl_tensor_1d(&g, "num", DFL_F32, DFL_T_ACT, 1), dfl_tensor_1d(&g, "ce", DFL_F32, DFL_T_ACT, R),
                dfl_tensor_1d(&g, "cor", DFL_F32, DFL_T_ACT, R), dfl_tensor_1d(&g, "hit", DFL_F32, DFL_T_ACT, R),
                dfl_tensor_2d(&g, "dy", dt, DFL_T_ACT, R, H)};
  dfl_attrs a = {0};
  a.vocab_chunk = chunk;
  a.B = per;
  int op = dfl_op_add(&g, DFL_OP_LINEAR_CE, (int[]){y, w, lab, wt}, 4, out, 5, &a);
  CHECK(op >= 0, "op");
  dfl_lce_ws l;
  dfl_plan_lce_ws(&g, &g.ops[op], &l);
  int64_t es = dt == DFL_F32 ? 4 : 2, ch = chunk > V ? V : chunk, budget = R * (ch + H) * 4;
  /* anchor rows (every per-th) are left out when per > 1 divides R and rows are 16-byte words */
  int skip = per > 1 && R % per == 0 && (H * es) % 16 == 0;
  CHECK(l.period == (skip ? per : 0) && l.rows_used == (skip ? R - R / per : R), "R %lld per %d: period %lld, %lld rows used",
        (long long)R, per, (long long)l.period, (long long)l.rows_used);
  if (skip) {
    CHECK(l.st_off >= l.rows * V * es && l.bytes >= l.st_off + l.rows * H * es, "R %lld per %d: staging at %lld of %lld bytes",
          (long long)R, per, (long long)l.st_off, (long long)l.bytes);
    budget += 256; /* two buffers, each rounded to 256 bytes */
  }
  R = l.rows_used;
  int64_t nch = (R + l.rows - 1) / l.rows, last = R - (nch - 1) * l.rows;
  CHECK(l.rows >= 1 && l.rows <= R && last >= 1, "R %lld V %lld: %lld rows per chunk", (long long)R, (long long)V, (long long)l.rows);
  CHECK(l.ld == V && l.lg_off == 0 && l.bytes >= l.rows * V * es, "R %lld V %lld: %lld bytes for %lld rows", (long long)R,
        (long long)V, (long long)l.bytes, (long long)l.rows);
  CHECK(l.rows == 1 || l.bytes <= budget + 255, "R %lld V %lld chunk %d: %lld bytes above the %lld of the knob", (long long)R,
        (long long)V, chunk, (long long)l.bytes, (long long)budget);
  if (l.rows >= 128 && l.rows < R) {
    CHECK(l.rows % 128 == 0, "%lld rows per chunk, not a multiple of 128", (long long)l.rows);
    CHECK(last > l.rows - 128 * nch, "last chunk %lld rows of %lld: not balanced", (long long)last, (long long)l.rows);
  }
  if (want_rows) CHECK(l.rows == want_rows, "R %lld H %lld V %lld: %lld rows per chunk, want %lld", (long long)R, (long long)H,
                       (long long)V, (long long)l.rows, (long long)want_rows);
  dfl_graph_free(&g);
}

int main(void) {
  unsetenv("DFL_LCE_ROWS");
  one(8192, 4096, 151936, 32768, DFL_BF16, 0, 2816);  /* Qwen3-8B drafter, every row: 3 chunks */
  one(8192, 4096, 151936, 32768, DFL_BF16, 16, 2560); /* its 7,680 non-anchor rows: 3 chunks */
  one(8192, 5120, 248320, 32768, DFL_BF16, 0, 2048);  /* Qwen3.6-27B drafter: 4 chunks */
  one(8192, 5120, 248320, 32768, DFL_BF16, 16, 1920); /* its 7,680 non-anchor rows: 4 chunks */
  one(8192, 4096, 151936, 32768, DFL_F32, 0, 1664);   /* f32 logits: half the rows, 5 chunks */
  one(70, 64, 1000, 256, DFL_BF16, 0, 35);            /* 44 rows fit the knob: 2 balanced chunks */
  one(70, 64, 1000, 1000, DFL_BF16, 0, 70);           /* all rows fit: one chunk */
  one(70, 64, 1000, 1000, DFL_BF16, 7, 60);           /* 10 anchor rows left out */
  one(70, 12, 1000, 1000, DFL_BF16, 7, 70);           /* 24-byte rows: no staging copies, every row */
  unsigned seed = (unsigned)time(NULL);
  printf("seed %u\n", seed);
  srand(seed);
  for (int t = 0; t < 2000; t++) {
    int64_t R = 1 + rand() % 20000, H = 8 * (1 + rand() % 800), V = 2 + rand() % 300000;
    int chunk = 1 + rand() % (int)V;
    int per = rand() % 3 ? 0 : 2 + rand() % 16;
    if (per) R = (R + per - 1) / per * per; /* the op wants whole blocks */
    one(R, H, V, chunk, rand() % 2 ? DFL_BF16 : DFL_F32, per, 0);
  }
  setenv("DFL_LCE_ROWS", "16", 1);
  one(70, 64, 1000, 256, DFL_BF16, 0, 16);
  one(70, 64, 1000, 256, DFL_BF16, 7, 16);
  unsetenv("DFL_LCE_ROWS");
  if (failures) { fprintf(stderr, "%d failure(s)\n", failures); return 1; }
  printf("plan_lce: ok\n");
  return 0;
}
