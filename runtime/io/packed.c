/*
** packed.c: the packed binary data format (docs/data.md has it byte by byte): a writer, and a
** reader that validates everything before a row is used.
**
** Why this shape: JSONL parsing costs far more than training a small drafter on the same
** tokens needs; the packed file is the loader's own arrays (offsets, ids, masks) on disk, so a
** load is a checksum pass plus copies. Nothing in the file is trusted: a header checksum, the
** exact size the counts imply, a checksum of the data, zero padding, an offset table that is
** monotonic and inside the arrays, then the same per-row rules as JSONL (ids < the spec's vocab,
** masks 0/1, two consecutive supervised tokens after the cut to the capacity), with the same
** skip/refuse policy and report, rows named "PATH: row R:" (1-based).
**
** The rows are copied out of the mapping (into the int32 arrays of dfl_dataset) rather than used
** in place: the dataset outlives the mapping, and a file changed under a long run cannot change
** the rows already validated.
*/
#include "runtime/io/data.h"
#include "runtime/io/data_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "packed.c reads and writes its little-endian fields with native loads: add byte swaps first"
#endif

#define MAX_REPORTS 100

/* Header fields: byte offsets (docs/data.md). */
enum { H_MAGIC = 0, H_VERSION = 8, H_FLAGS = 12, H_ROWS = 16, H_TOKENS = 24, H_SUP = 32,
       H_VOCAB = 40, H_IDEND = 44, H_SIZE = 48, H_DCRC = 56, H_HCRC = 60 };

/* Unaligned little-endian loads and stores (an in-memory buffer may sit anywhere). */
static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static void wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void wr64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint64_t pad8(uint64_t n) { return (n + 7) & ~(uint64_t)7; }

/* zlib's crc32 takes a uInt length: feed it in pieces. */
static uint32_t crc_big(uint32_t c, const uint8_t *p, uint64_t n) {
  while (n) {
    uInt k = n > (1u << 30) ? 1u << 30 : (uInt)n;
    c = (uint32_t)crc32(c, p, k);
    p += k;
    n -= k;
  }
  return c;
}

/* The file size the counts imply, or 0 when they are absurd (bounds keep the sum from
** overflowing: 2^40 rows, 2^56 tokens are far beyond any real data set). */
static uint64_t implied_size(uint64_t rows, uint64_t tokens) {
  if (rows >= (1ull << 40) || tokens >= (1ull << 56)) return 0;
  return DFL_PACKED_HEADER + 8 * (rows + 1) + pad8(4 * tokens) + pad8(tokens);
}

static int refuse(FILE *log, const char *path, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(log, "%s: ", path);
  vfprintf(log, fmt, ap);
  fputc('\n', log);
  va_end(ap);
  return DFL_EFORMAT;
}

typedef struct {
  const char *path;
  FILE *log;
  dfl_badrow_policy policy;
  int64_t n_reported;
  dfl_dataset *d;
} reporter;

static void bad_row(reporter *R, uint64_t row, const char *msg) {
  R->d->n_skipped++;
  if (R->n_reported++ < MAX_REPORTS)
    fprintf(R->log, "%s: row %llu: %s; row %s\n", R->path, (unsigned long long)row, msg,
            R->policy == DFL_BADROW_SKIP ? "skipped" : "refused");
  else if (R->n_reported == MAX_REPORTS + 1)
    fprintf(R->log, "%s: more bad rows follow; only the first %d are shown\n", R->path, MAX_REPORTS);
}

/* The structure: header, size, checksums, padding, offsets. DFL_OK or a message + DFL_EFORMAT. */
static int check_structure(const char *name, const uint8_t *b, size_t len, FILE *log) {
  if (len < 8 || memcmp(b + H_MAGIC, DFL_PACKED_MAGIC, 8))
    return refuse(log, name, "not a dflc packed file (no %s magic at byte 0): make one with "
                  "`dflc pack IN.jsonl -o OUT.dflpack`", DFL_PACKED_MAGIC);
  if (len < DFL_PACKED_HEADER)
    return refuse(log, name, "truncated: %zu bytes, shorter than the %d-byte header (an interrupted "
                  "copy? copy it again or re-run dflc pack)", len, DFL_PACKED_HEADER);
  if ((uint32_t)crc32(0, b, H_HCRC) != rd32(b + H_HCRC))
    return refuse(log, name, "header checksum mismatch: the header is corrupt (copy the file again "
                  "or re-run dflc pack)");
  if (rd32(b + H_VERSION) != DFL_PACKED_VERSION)
    return refuse(log, name, "packed format version %u; this dflc reads version %d (re-run dflc "
                  "pack)", rd32(b + H_VERSION), DFL_PACKED_VERSION);
  if (rd32(b + H_FLAGS))
    return refuse(log, name, "unknown header flags 0x%x (written by a newer dflc?)",
                  rd32(b + H_FLAGS));
  uint64_t rows = rd64(b + H_ROWS), T = rd64(b + H_TOKENS), size = rd64(b + H_SIZE);
  uint64_t want = implied_size(rows, T);
  if (!want || want != size)
    return refuse(log, name, "header is inconsistent: %llu rows and %llu tokens make %llu bytes, "
                  "the header says %llu (not written by dflc pack?)", (unsigned long long)rows,
                  (unsigned long long)T, (unsigned long long)want, (unsigned long long)size);
  if (rows > INT_MAX - 1)
    return refuse(log, name, "%llu rows: more than one data file may hold (%d); split it",
                  (unsigned long long)rows, INT_MAX - 1);
  if (len < size)
    return refuse(log, name, "truncated: %zu of %llu bytes (an interrupted copy? copy it again or "
                  "re-run dflc pack)", len, (unsigned long long)size);
  if (len > size)
    return refuse(log, name, "%llu unexpected bytes after the end of the data (%llu bytes): two "
                  "files concatenated?", (unsigned long long)(len - size), (unsigned long long)size);
  if (crc_big(0, b + DFL_PACKED_HEADER, size - DFL_PACKED_HEADER) != rd32(b + H_DCRC))
    return refuse(log, name, "checksum mismatch: the data is corrupt (copy the file again or re-run "
                  "dflc pack)");
  const uint8_t *po = b + DFL_PACKED_HEADER, *pi = po + 8 * (rows + 1), *pm = pi + pad8(4 * T);
  for (const uint8_t *p = pi + 4 * T; p < pm; p++)
    if (*p) return refuse(log, name, "nonzero padding after the ids (corrupt file)");
  for (const uint8_t *p = pm + T; p < b + size; p++)
    if (*p) return refuse(log, name, "nonzero padding after the masks (corrupt file)");
  if (rd64(po))
    return refuse(log, name, "the offset table starts at token %llu, not 0 (corrupt file)",
                  (unsigned long long)rd64(po));
  uint64_t prev = 0;
  for (uint64_t r = 1; r <= rows; r++) {
    uint64_t o = rd64(po + 8 * r);
    if (o < prev)
      return refuse(log, name, "row %llu: offsets go backwards (ends at token %llu, before its "
                    "start %llu): the offset table is corrupt", (unsigned long long)r,
                    (unsigned long long)o, (unsigned long long)prev);
    if (o > T)
      return refuse(log, name, "row %llu: ends at token %llu, past the end of the ids (%llu "
                    "tokens): the offset table is corrupt", (unsigned long long)r,
                    (unsigned long long)o, (unsigned long long)T);
    prev = o;
  }
  if (prev != T)
    return refuse(log, name, "the offset table ends at token %llu but the file has %llu tokens "
                  "(corrupt file)", (unsigned long long)prev, (unsigned long long)T);
  return DFL_OK;
}

int dfl_packed_load_mem(const char *name, const void *buf, size_t len, int vocab, int cap,
                        dfl_badrow_policy policy, FILE *log, dfl_dataset *out) {
  memset(out, 0, sizeof *out);
  if (!log) log = stderr;
  const uint8_t *b = buf;
  int rc = check_structure(name, b, len, log);
  if (rc) return rc;
  uint64_t rows = rd64(b + H_ROWS), T = rd64(b + H_TOKENS);
  const uint8_t *po = b + DFL_PACKED_HEADER, *pi = po + 8 * (rows + 1), *pm = pi + pad8(4 * T);
  out->n_lines = (int64_t)rows;
  if (rows == 0) return dfl_data_finish_(name, log, cap, policy, DFL_OK, "rows", out);

  out->ids = malloc((size_t)(T ? T : 1) * 4);
  out->mask = malloc((size_t)(T ? T : 1) * 4);
  out->off = malloc((size_t)(rows + 1) * 8);
  if (!out->ids || !out->mask || !out->off)
    return dfl_data_finish_(name, log, cap, policy, DFL_ENOMEM, "rows", out);
  out->off[0] = 0;
  reporter R = {.path = name, .log = log, .policy = policy, .d = out};
  uint64_t bound = vocab > 0 ? (uint64_t)vocab : (uint64_t)INT32_MAX + 1, sup_all = 0;
  int hinted = 0;
  char msg[256];
  for (uint64_t r = 0; r < rows; r++) {
    uint64_t o = rd64(po + 8 * r), n = rd64(po + 8 * (r + 1)) - o;
    const uint8_t *ids = pi + 4 * o, *m = pm + o;
    uint32_t maxv = 0;
    unsigned mor = 0;
    /* Whole-row scans first (every token, also past the cut, as JSONL does), located on failure. */
    for (uint64_t i = 0; i < n; i++) {
      uint32_t v = rd32(ids + 4 * i);
      maxv = v > maxv ? v : maxv;
      mor |= m[i];
      sup_all += m[i];
    }
    if (n == 0) {
      bad_row(&R, r + 1, "empty row (no tokens)");
      continue;
    }
    if (maxv >= bound) {
      uint64_t i = 0;
      while (rd32(ids + 4 * i) < bound) i++;
      snprintf(msg, sizeof msg, "input_ids[%llu] = %u is outside the vocabulary [0, %llu) (data "
               "tokenized for another model?)", (unsigned long long)i, rd32(ids + 4 * i),
               (unsigned long long)bound);
      bad_row(&R, r + 1, msg);
      uint32_t pv = rd32(b + H_VOCAB), idend = rd32(b + H_IDEND);
      if (!hinted++ && vocab > 0 && (pv > (uint32_t)vocab || idend > (uint32_t)vocab))
        fprintf(log, "%s: note: this file holds ids up to %u (packed with vocab %u%s); the spec's "
                "target has %d tokens\n", name, idend ? idend - 1 : 0, pv, pv ? "" : " = unchecked",
                vocab);
      continue;
    }
    if (mor & ~1u) {
      uint64_t i = 0;
      while (m[i] <= 1) i++;
      snprintf(msg, sizeof msg, "loss_mask[%llu] = %u is not 0 or 1", (unsigned long long)i, m[i]);
      bad_row(&R, r + 1, msg);
      continue;
    }
    uint64_t keep = cap > 0 && n > (uint64_t)cap ? (uint64_t)cap : n;
    int32_t *di = out->ids + out->off[out->n], *dm = out->mask + out->off[out->n];
    memcpy(di, ids, (size_t)keep * 4);   /* u32 < bound <= 2^31: the same bits as int32 */
    int consec = 0;
    int64_t sup = 0;
    for (uint64_t i = 0; i < keep; i++) {
      dm[i] = m[i];
      sup += m[i];
      consec |= i + 1 < keep && m[i] && m[i + 1];
    }
    if (!consec) {
      if (keep < n)
        snprintf(msg, sizeof msg, "no two consecutive supervised tokens in the first %llu tokens "
                 "(the sequence capacity; nothing to train on)", (unsigned long long)keep);
      else
        snprintf(msg, sizeof msg, "no two consecutive supervised tokens (nothing to train on)");
      bad_row(&R, r + 1, msg);
      continue;
    }
    out->n_tokens += (int64_t)keep;
    out->n_supervised += sup;
    out->n_truncated += keep < n;
    out->off[out->n + 1] = out->off[out->n] + (int64_t)keep;
    out->n++;
  }
  if (sup_all != rd64(b + H_SUP))
    rc = refuse(log, name, "the header counts %llu supervised tokens but the masks hold %llu "
                "(corrupt file)", (unsigned long long)rd64(b + H_SUP), (unsigned long long)sup_all);
  return dfl_data_finish_(name, log, cap, policy, rc, "rows", out);
}

int dfl_packed_load_fd_(const char *path, int fd, size_t size, int vocab, int cap,
                        dfl_badrow_policy policy, FILE *log, dfl_dataset *out) {
  memset(out, 0, sizeof *out);
  if (size == 0) return dfl_packed_load_mem(path, "", 0, vocab, cap, policy, log, out);
  void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) {
    fprintf(log, "%s: cannot map the file (%s)\n", path, strerror(errno));
    return DFL_EIO;
  }
  madvise(p, size, MADV_SEQUENTIAL);   /* one pass for the checksum, one for the rows */
  int rc = dfl_packed_load_mem(path, p, size, vocab, cap, policy, log, out);
  munmap(p, size);
  return rc;
}

/* --- writer --- */

typedef struct {
  FILE *f;
  uint32_t crc;
  int err;
} sink;

static void put(sink *s, const void *p, size_t n) {
  if (!n || s->err) return;
  s->crc = crc_big(s->crc, p, n);
  if (fwrite(p, 1, n, s->f) != n) s->err = errno ? errno : EIO;
}

static void put_pad(sink *s, uint64_t n) {
  static const uint8_t zero[8];
  put(s, zero, (size_t)(pad8(n) - n));
}

int dfl_packed_write(const char *path, const dfl_dataset *d, int vocab, FILE *log) {
  if (!log) log = stderr;
  if (d->n <= 0) return refuse(log, path, "nothing to write (no rows)");
  /* Check what goes in, so the writer never makes a file its reader refuses. */
  uint64_t T = (uint64_t)d->off[d->n], sup = 0;
  uint32_t idend = 0;
  int64_t bound = vocab > 0 ? vocab : (int64_t)INT32_MAX + 1;
  if (d->off[0] != 0) return refuse(log, path, "dataset offsets do not start at 0");
  for (int r = 0; r < d->n; r++) {
    if (d->off[r + 1] <= d->off[r]) return refuse(log, path, "row %d: empty or negative length", r + 1);
    for (int64_t i = d->off[r]; i < d->off[r + 1]; i++) {
      if (d->ids[i] < 0 || d->ids[i] >= bound || (d->mask[i] != 0 && d->mask[i] != 1))
        return refuse(log, path, "row %d: token %lld: id %d / mask %d outside [0, %lld) / {0, 1}",
                      r + 1, (long long)(i - d->off[r]), d->ids[i], d->mask[i], (long long)bound);
      if ((uint32_t)d->ids[i] + 1 > idend) idend = (uint32_t)d->ids[i] + 1;
      sup += (uint64_t)d->mask[i];
    }
  }
  char tmp[DFL_PATH_MAX + 32];
  snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    fprintf(log, "%s: cannot create (%s)\n", path, strerror(errno));
    return DFL_EIO;
  }
  setvbuf(f, NULL, _IOFBF, 1u << 20);
  uint8_t h[DFL_PACKED_HEADER] = {0};
  sink s = {.f = f, .crc = (uint32_t)crc32(0, NULL, 0)};
  if (fwrite(h, 1, sizeof h, f) != sizeof h) s.err = errno ? errno : EIO;
  s.crc = (uint32_t)crc32(0, NULL, 0);   /* the data checksum starts after the header */
  enum { CH = 1 << 14 };
  union { uint64_t u64[CH]; uint32_t u32[CH]; uint8_t u8[CH]; } cb;
  for (int64_t r = 0; r <= d->n; r += CH) {   /* offsets: n + 1 of them */
    int64_t k = d->n + 1 - r < CH ? d->n + 1 - r : CH;
    for (int64_t i = 0; i < k; i++) cb.u64[i] = (uint64_t)d->off[r + i];
    put(&s, cb.u64, (size_t)k * 8);
  }
  for (uint64_t t = 0; t < T; t += CH) {
    uint64_t k = T - t < CH ? T - t : CH;
    for (uint64_t i = 0; i < k; i++) cb.u32[i] = (uint32_t)d->ids[t + i];
    put(&s, cb.u32, (size_t)k * 4);
  }
  put_pad(&s, 4 * T);
  for (uint64_t t = 0; t < T; t += CH) {
    uint64_t k = T - t < CH ? T - t : CH;
    for (uint64_t i = 0; i < k; i++) cb.u8[i] = (uint8_t)d->mask[t + i];
    put(&s, cb.u8, (size_t)k);
  }
  put_pad(&s, T);
  memcpy(h + H_MAGIC, DFL_PACKED_MAGIC, 8);
  wr32(h + H_VERSION, DFL_PACKED_VERSION);
  wr32(h + H_FLAGS, 0);
  wr64(h + H_ROWS, (uint64_t)d->n);
  wr64(h + H_TOKENS, T);
  wr64(h + H_SUP, sup);
  wr32(h + H_VOCAB, vocab > 0 ? (uint32_t)vocab : 0);
  wr32(h + H_IDEND, idend);
  wr64(h + H_SIZE, implied_size((uint64_t)d->n, T));
  wr32(h + H_DCRC, s.crc);
  wr32(h + H_HCRC, (uint32_t)crc32(0, h, H_HCRC));
  if (!s.err && (fseek(f, 0, SEEK_SET) || fwrite(h, 1, sizeof h, f) != sizeof h || fflush(f) ||
                 fsync(fileno(f))))
    s.err = errno ? errno : EIO;
  if (fclose(f) && !s.err) s.err = errno ? errno : EIO;
  if (!s.err && rename(tmp, path)) s.err = errno ? errno : EIO;
  if (s.err) {
    fprintf(log, "%s: cannot write (%s)\n", path, strerror(s.err));
    remove(tmp);
    return DFL_EIO;
  }
  return DFL_OK;
}
