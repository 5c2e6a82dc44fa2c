/*
** fuzz_packed.c: libFuzzer harness for the packed data reader (dfl_packed_load_mem). Each input
** is loaded twice: as is (so damaged headers, sizes and checksums are refused), and "resealed"
** (the supervised count and both CRCs recomputed as a writer would, docs/data.md) so that mutated
** offsets, ids and masks get past the checksums and reach the structural and per-row checks.
** Whatever is accepted must satisfy the loader's guarantees, and a refusal must print a message.
** Built and run by run_fuzz.sh (ctest: io_fuzz_packed).
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "runtime/io/data.h"

static uint64_t g64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static void check(const dfl_dataset *d, int V, int S) {
  if (d->n <= 0 || d->off[0] != 0 || d->off[d->n] != d->n_tokens) abort();
  int64_t sup = 0;
  for (int r = 0; r < d->n; r++) {
    int64_t len = d->off[r + 1] - d->off[r];
    int consec = 0;
    if (len <= 0 || len > S) abort();
    for (int64_t i = d->off[r]; i < d->off[r + 1]; i++) {
      if (d->ids[i] < 0 || d->ids[i] >= V || (d->mask[i] != 0 && d->mask[i] != 1)) abort();
      if (i + 1 < d->off[r + 1] && d->mask[i] && d->mask[i + 1]) consec = 1;
      sup += d->mask[i];
    }
    if (!consec) abort();
  }
  if (sup != d->n_supervised) abort();
}

static void load(const uint8_t *b, size_t size, int pol) {
  enum { V = 1000, S = 16 };
  char *log = NULL;
  size_t loglen = 0;
  FILE *lg = open_memstream(&log, &loglen);
  dfl_dataset d;
  int rc = dfl_packed_load_mem("fuzz.dflpack", b, size, V, S, (dfl_badrow_policy)pol, lg, &d);
  fclose(lg);
  if (rc != 0 && loglen == 0) abort();   /* a refusal always says why */
  if (rc == 0) {
    check(&d, V, S);
    dfl_data_free(&d);
  }
  free(log);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int pol = size & 1 ? DFL_BADROW_REFUSE : DFL_BADROW_SKIP;
  load(data, size, pol);
  if (size < DFL_PACKED_HEADER) return 0;
  uint8_t *b = malloc(size);
  memcpy(b, data, size);
  uint64_t rows = g64(b + 16), T = g64(b + 24);
  /* The documented layout; only when it fits in the input (else nothing to reseal). */
  if (rows < (1u << 20) && T < (1u << 24)) {
    uint64_t mask_at = DFL_PACKED_HEADER + 8 * (rows + 1) + ((4 * T + 7) & ~7ull);
    if (mask_at + T <= size) {
      uint64_t sup = 0;
      for (uint64_t i = 0; i < T; i++) sup += b[mask_at + i];
      memcpy(b + 32, &sup, 8);
    }
  }
  uint32_t c = (uint32_t)crc32(0, b + DFL_PACKED_HEADER, (uInt)(size - DFL_PACKED_HEADER));
  memcpy(b + 56, &c, 4);
  c = (uint32_t)crc32(0, b, 60);
  memcpy(b + 60, &c, 4);
  load(b, size, !pol);
  free(b);
  return 0;
}
