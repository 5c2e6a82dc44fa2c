/*
** data.h: drafter training data. Pre-tokenized JSONL (optionally gzip), one object per line with
** "input_ids" and "loss_mask" arrays, read into memory, validated row by row, and packed into
** static [batch, S] buffers (padding: id 0, loss_mask 0, so padding is never an anchor, a label
** or visible context).
**
** Bad rows (no loss_mask, lengths that differ, ids outside the vocabulary, masks not 0/1, no two
** consecutive supervised tokens, not JSON) are reported as FILE:LINE: what, and skipped or refused
** according to the spec. Rows longer than the compiled capacity are cut to it and counted in the
** load report (never silently). An empty file, or one with no usable row, is an error; so is a
** truncated gzip stream. Blank lines are ignored; lines over 64 MiB refuse the file. The first
** 100 bad rows are printed, the rest counted; under `refuse` the whole file is scanned first so
** one run lists every problem.
*/
#ifndef DFL_DATA_H
#define DFL_DATA_H

#include <stdint.h>
#include <stdio.h>
#include "compiler/spec.h"

typedef struct dfl_rng { uint64_t s[4]; } dfl_rng;   /* xoshiro256** */
void dfl_rng_seed(dfl_rng *r, uint64_t seed);
uint64_t dfl_rng_next(dfl_rng *r);
double dfl_rng_uniform(dfl_rng *r);                    /* [0, 1) with 53 bits */
float dfl_rng_normal(dfl_rng *r);                      /* N(0,1) */
uint64_t dfl_rng_below(dfl_rng *r, uint64_t n);        /* uniform in [0, n), unbiased */

typedef struct dfl_dataset {
  int32_t *ids;         /* all rows back to back */
  int32_t *mask;
  int64_t *off;         /* row r occupies [off[r], off[r+1]) */
  int n;                /* usable rows */
  int64_t n_lines;      /* lines read */
  int64_t n_skipped;    /* rows rejected (reported) */
  int64_t n_truncated;  /* rows cut to the capacity */
  int64_t n_tokens, n_supervised;
} dfl_dataset;

/* Load PATH. vocab bounds the ids; cap is the compiled sequence capacity S (<= 0: no cut); the
** consecutive-supervised rule is checked after the cut. Errors and skipped
** rows are printed to `log` (stderr if NULL) as PATH:LINE: message. Returns DFL_OK, or DFL_EFORMAT
** / DFL_EIO when the file is refused. */
int dfl_data_load(const char *path, int vocab, int cap, dfl_badrow_policy policy, FILE *log,
                  dfl_dataset *out);
/* The same over an in-memory, uncompressed JSONL buffer; NAME stands for the file in messages
** (fuzz harness, tests). */
int dfl_data_load_mem(const char *name, const void *buf, size_t len, int vocab, int cap,
                      dfl_badrow_policy policy, FILE *log, dfl_dataset *out);
void dfl_data_free(dfl_dataset *d);

/* --- packed binary data (runtime/packed.c; the format byte by byte: docs/data.md) ---
** A file starting with DFL_PACKED_MAGIC is read as packed, whatever its name: dfl_data_load
** dispatches on the first bytes, not on the spec. dfl_data_load_fmt also takes the spec's
** data.format (DFL_DATA_JSONL / DFL_DATA_PACKED, or -1: no expectation): when the file is the
** other kind, a note says so and the file's own kind wins, since its bytes say unambiguously
** what it is; a file that is neither JSONL nor packed under format = packed is refused. */
#define DFL_PACKED_MAGIC "DFLPACK1"
#define DFL_PACKED_VERSION 1
#define DFL_PACKED_HEADER 64
int dfl_data_load_fmt(const char *path, int format, int vocab, int cap, dfl_badrow_policy policy,
                      FILE *log, dfl_dataset *out);
/* Validate and load a packed file held in memory (LEN bytes, any alignment); NAME stands for
** the file in messages. Same per-row rules, policies and report as JSONL, rows named
** "NAME: row R:" (1-based). Structural damage (truncation, checksums, offsets) refuses the file. */
int dfl_packed_load_mem(const char *name, const void *buf, size_t len, int vocab, int cap,
                        dfl_badrow_policy policy, FILE *log, dfl_dataset *out);
/* Write D as a packed file at PATH (through PATH.tmp + rename, so a reader never sees half a
** file). VOCAB is recorded as the bound the ids were checked against (0: none). Errors are
** printed to log (stderr if NULL); returns DFL_OK, DFL_EIO or DFL_EFORMAT. */
int dfl_packed_write(const char *path, const dfl_dataset *d, int vocab, FILE *log);

/* Deterministic epoch order: a permutation of 0..n-1 from (seed, epoch). */
void dfl_data_order(const dfl_dataset *d, uint64_t seed, int64_t epoch, int shuffle, int *order);

/* Pack rows rows[0..b-1] into ids[b*S], mask[b*S] (padding 0/0). */
void dfl_data_pack(const dfl_dataset *d, const int *rows, int b, int S, int32_t *ids, int32_t *mask);

/* Anchor sampling (reference §2.2) with a fixed capacity N per sequence: the candidate positions
** p in [0, S-2] with mask[p] and mask[p+1] set; draw min(count, N) of them uniformly without
** replacement; anchors sorted ascending in slots 0..k-1 with keep = 1; the remaining slots have
** anchor 0 and keep 0. Returns the number of valid anchors summed over the batch (-1: out of
** memory). Mask entries count as set when nonzero. */
int64_t dfl_anchors_sample(const int32_t *mask, int b, int S, int N, dfl_rng *rng,
                           int32_t *anchors, int32_t *keep);

#endif
