/*
** fuzz_jsonl.c: libFuzzer harness for JSONL rows (dfl_data_load_mem), then packing and anchor
** sampling of what was accepted. Every accepted row must satisfy the loader's guarantees.
** Built and run by run_fuzz.sh (ctest: io_fuzz_jsonl).
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "runtime/io/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static FILE *devnull;
  if (!devnull) devnull = fopen("/dev/null", "w");
  enum { V = 1000, S = 16, N = 4 };
  dfl_dataset d;
  dfl_badrow_policy pol = size & 1 ? DFL_BADROW_REFUSE : DFL_BADROW_SKIP;
  if (dfl_data_load_mem("fuzz.jsonl", data, size, V, S, pol, devnull, &d) != 0) return 0;
  if (d.n <= 0) abort();
  for (int r = 0; r < d.n; r++) {
    int64_t len = d.off[r + 1] - d.off[r];
    int consec = 0;
    if (len <= 0 || len > S) abort();
    for (int64_t i = d.off[r]; i < d.off[r + 1]; i++) {
      if (d.ids[i] < 0 || d.ids[i] >= V || (d.mask[i] != 0 && d.mask[i] != 1)) abort();
      if (i + 1 < d.off[r + 1] && d.mask[i] && d.mask[i + 1]) consec = 1;
    }
    if (!consec) abort();
  }
  int rows[4], b = d.n < 4 ? d.n : 4;
  int32_t ids[4 * S], mask[4 * S], anchors[4 * N], keep[4 * N];
  int *order = malloc((size_t)d.n * sizeof *order);
  dfl_data_order(&d, size, 1, 1, order);
  for (int i = 0; i < b; i++) rows[i] = order[i];
  dfl_data_pack(&d, rows, b, S, ids, mask);
  dfl_rng rng;
  dfl_rng_seed(&rng, size);
  if (dfl_anchors_sample(mask, b, S, N, &rng, anchors, keep) < b) abort();   /* each row has one */
  free(order);
  dfl_data_free(&d);
  return 0;
}
