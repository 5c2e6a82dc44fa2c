/*
** dataset.c: a loaded dataset, whatever file it came from: the checks and report lines that end
** every load (JSONL in data.c, packed in packed.c), freeing, the epoch order and row packing.
*/
#include <stdlib.h>
#include <string.h>

#include "runtime/io/data.h"
#include "runtime/io/data_internal.h"

int dfl_data_finish_(const char *path, FILE *log, int cap, dfl_badrow_policy policy, int rc,
                     const char *unit, dfl_dataset *out) {
  if (rc == DFL_OK) {
    if (out->n_lines == 0) {
      fprintf(log, "%s: empty file (no rows)\n", path);
      rc = DFL_EFORMAT;
    } else if (policy == DFL_BADROW_REFUSE && out->n_skipped) {
      fprintf(log, "%s: refused: %lld bad row%s (bad_rows = refuse; fix them, or set bad_rows = skip "
              "to train on the rest)\n", path, (long long)out->n_skipped, out->n_skipped > 1 ? "s" : "");
      rc = DFL_EFORMAT;
    } else if (out->n == 0) {
      fprintf(log, "%s: no usable row (%lld %s, %lld bad)\n", path, (long long)out->n_lines, unit,
              (long long)out->n_skipped);
      rc = DFL_EFORMAT;
    }
  }
  if (rc == DFL_ENOMEM) fprintf(log, "%s: out of memory after %d rows\n", path, out->n);
  if (rc) { dfl_data_free(out); return rc; }
  fprintf(log, "%s: %d rows, %lld tokens (%lld supervised), %lld skipped, %lld truncated\n", path,
          out->n, (long long)out->n_tokens, (long long)out->n_supervised, (long long)out->n_skipped,
          (long long)out->n_truncated);
  if (out->n_truncated)
    fprintf(log, "%s: %lld rows were longer than the sequence capacity %d and were cut to it\n",
            path, (long long)out->n_truncated, cap);
  return DFL_OK;
}

void dfl_data_free(dfl_dataset *d) {
  free(d->ids);
  free(d->mask);
  free(d->off);
  memset(d, 0, sizeof *d);
}

void dfl_data_order(const dfl_dataset *d, uint64_t seed, int64_t epoch, int shuffle, int *order) {
  for (int i = 0; i < d->n; i++) order[i] = i;
  if (!shuffle) return;
  dfl_rng r;
  /* A distinct, well-mixed stream per epoch (splitmix64 inside dfl_rng_seed does the mixing). */
  dfl_rng_seed(&r, seed ^ (0xd1b54a32d192ed03ull * (uint64_t)(epoch + 1)));
  for (int i = d->n - 1; i > 0; i--) {   /* Fisher-Yates */
    int j = (int)dfl_rng_below(&r, (uint64_t)i + 1);
    int t = order[i]; order[i] = order[j]; order[j] = t;
  }
}

void dfl_data_pack(const dfl_dataset *d, const int *rows, int b, int S, int32_t *ids, int32_t *mask) {
  for (int i = 0; i < b; i++) {
    int64_t o = d->off[rows[i]], n = d->off[rows[i] + 1] - o;
    if (n > S) n = S;   /* rows were cut to the capacity at load; a smaller S cuts again */
    memcpy(ids + (int64_t)i * S, d->ids + o, (size_t)n * 4);
    memcpy(mask + (int64_t)i * S, d->mask + o, (size_t)n * 4);
    memset(ids + (int64_t)i * S + n, 0, (size_t)(S - n) * 4);
    memset(mask + (int64_t)i * S + n, 0, (size_t)(S - n) * 4);
  }
}
