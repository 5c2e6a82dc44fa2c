/*
** test_packed.c: the packed data format (runtime/packed.c, docs/data.md).
**  - round trip: JSONL -> dfl_packed_write -> dfl_data_load gives the rows, counts and report of
**    loading the JSONL directly (examples/data/nano_train.jsonl.gz, with and without a cut to the
**    capacity, and random rows with bad ones mixed in, drawn fresh each run);
**  - load time of JSONL vs packed, printed (not asserted: the machine is shared);
**  - a table of corrupted packed files, made here from a random data set, each refused (or its
**    bad row skipped) with the expected message. The test re-seals checksums itself from the
**    layout in docs/data.md, so a case reaches the check it targets and the docs are checked too;
**  - format dispatch: a packed file under format = jsonl and JSONL under format = packed load with
**    a note; a gzip-compressed or other-version packed file is refused.
*/
#include <sys/stat.h>
#include <time.h>
#include <zlib.h>
#include "io_test.h"

static dfl_rng R;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Load with format FMT and the log captured into *logtext (caller frees). */
static int load_log(const char *path, int fmt, int vocab, int cap, dfl_badrow_policy pol,
                    dfl_dataset *d, char **logtext) {
  size_t n;
  FILE *lg = open_memstream(logtext, &n);
  int rc = dfl_data_load_fmt(path, fmt, vocab, cap, pol, lg, d);
  fclose(lg);
  return rc;
}

static int same_rows(const dfl_dataset *a, const dfl_dataset *b, const char *what) {
  int ok = a->n == b->n && a->n_tokens == b->n_tokens && a->n_supervised == b->n_supervised &&
           a->n_truncated == b->n_truncated;
  CHECK(ok, "%s: counts differ: n %d/%d tokens %lld/%lld sup %lld/%lld trunc %lld/%lld", what, a->n,
        b->n, (long long)a->n_tokens, (long long)b->n_tokens, (long long)a->n_supervised,
        (long long)b->n_supervised, (long long)a->n_truncated, (long long)b->n_truncated);
  if (!ok) return 0;
  int64_t bad = 0;
  for (int r = 0; r <= a->n; r++) bad += a->off[r] != b->off[r];
  for (int64_t i = 0; i < a->n_tokens; i++) bad += a->ids[i] != b->ids[i] || a->mask[i] != b->mask[i];
  CHECK(bad == 0, "%s: %lld offsets/ids/masks differ", what, (long long)bad);
  return bad == 0;
}

/* The summary line without its "PATH: " prefix, for comparing two loads' reports. */
static const char *summary(const char *log, const char *path) {
  static char buf[2][512];
  static int k;
  k ^= 1;
  char key[1200];
  snprintf(key, sizeof key, "%s: ", path);
  const char *p = log;
  buf[k][0] = 0;
  while ((p = strstr(p, key))) {
    p += strlen(key);
    if (p[0] >= '0' && p[0] <= '9' && strstr(p, " rows, ")) {
      size_t n = strcspn(p, "\n");
      snprintf(buf[k], sizeof buf[k], "%.*s", (int)n, p);
      break;
    }
  }
  return buf[k];
}

static void round_trip(const char *dir, const char *jsonl, int vocab, int cap, dfl_badrow_policy pol,
                       const char *what) {
  char packed[1200], *l1 = NULL, *l2 = NULL;
  snprintf(packed, sizeof packed, "%s/rt.dflpack", dir);
  dfl_dataset full, a, b;
  /* Pack as `dflc pack` does: whole rows (no cut), bad rows dropped. */
  int rc = load_log(jsonl, -1, vocab, 0, DFL_BADROW_SKIP, &full, &l1);
  CHECK(rc == 0, "%s: load for packing: %s", what, l1);
  free(l1);
  if (rc) return;
  rc = dfl_packed_write(packed, &full, vocab, stderr);
  dfl_data_free(&full);
  CHECK(rc == 0, "%s: write", what);
  double t0 = now();
  int ra = load_log(jsonl, DFL_DATA_JSONL, vocab, cap, pol, &a, &l1);
  double t1 = now();
  int rb = load_log(packed, DFL_DATA_PACKED, vocab, cap, pol, &b, &l2);
  double t2 = now();
  CHECK(ra == 0 && rb == 0, "%s: rc %d %d:\n%s\n%s", what, ra, rb, l1, l2);
  if (!ra && !rb) {
    same_rows(&a, &b, what);
    /* Bad rows were dropped at pack time, so only the skipped count may differ. */
    char s1[512], s2[512];
    snprintf(s1, sizeof s1, "%s", summary(l1, jsonl));
    snprintf(s2, sizeof s2, "%s", summary(l2, packed));
    char *k1 = strstr(s1, " skipped"), *k2 = strstr(s2, " skipped");
    if (k1 && k2) {
      while (k1 > s1 && k1[-1] != ',') k1--;
      while (k2 > s2 && k2[-1] != ',') k2--;
      *k1 = *k2 = 0;
    }
    CHECK(s1[0] && !strcmp(s1, s2), "%s: summaries differ:\n  %s\n  %s", what, s1, s2);
    if (a.n_truncated)
      CHECK(strstr(l2, "rows were longer than the sequence capacity"), "%s: truncation reported", what);
    printf("  %-28s %d rows, %lld tokens: JSONL %.1f ms, packed %.1f ms (x%.0f)\n", what, a.n,
           (long long)a.n_tokens, 1e3 * (t1 - t0), 1e3 * (t2 - t1), (t1 - t0) / (t2 - t1 + 1e-9));
    dfl_data_free(&a);
    dfl_data_free(&b);
  }
  free(l1);
  free(l2);
}

/* Random rows, some bad, as JSONL. Returns the number of lines. */
static int write_random_jsonl(const char *path, int vocab) {
  FILE *f = fopen(path, "w");
  int n = 30 + (int)dfl_rng_below(&R, 40);
  for (int r = 0; r < n; r++) {
    int len = 2 + (int)dfl_rng_below(&R, 60), kind = (int)dfl_rng_below(&R, 10);
    fprintf(f, "{\"input_ids\": [");
    for (int i = 0; i < len; i++)
      fprintf(f, "%s%d", i ? ", " : "", kind == 0 && i == len / 2 ? vocab + (int)dfl_rng_below(&R, 9)
                                                                     : (int)dfl_rng_below(&R, (uint64_t)vocab));
    fprintf(f, "], \"loss_mask\": [");
    int start = (int)dfl_rng_below(&R, (uint64_t)len - 1);
    for (int i = 0; i < len; i++)   /* kind 1: alternating mask, no consecutive pair */
      fprintf(f, "%s%d", i ? ", " : "", kind == 1 ? i % 2 : i >= start);
    fprintf(f, "]}\n");
  }
  fclose(f);
  return n;
}

/* --- corrupted files --- */

static uint64_t g64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static void s64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static void s32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static uint64_t p8(uint64_t n) { return (n + 7) & ~7ull; }

typedef struct { uint8_t *b; size_t len; uint64_t rows, T; uint8_t *off, *ids, *mask; } pk;

static void pk_view(pk *p) {
  p->rows = g64(p->b + 16);
  p->T = g64(p->b + 24);
  p->off = p->b + 64;
  p->ids = p->off + 8 * (p->rows + 1);
  p->mask = p->ids + p8(4 * p->T);
}

/* Recompute what a writer would (docs/data.md): supervised count, data CRC, header CRC. */
static void reseal(pk *p) {
  uint64_t sup = 0;
  for (uint64_t i = 0; i < p->T; i++) sup += p->mask[i];
  s64(p->b + 32, sup);
  s32(p->b + 56, (uint32_t)crc32(0, p->b + 64, (uInt)(p->len - 64)));
  s32(p->b + 60, (uint32_t)crc32(0, p->b, 60));
}

typedef struct {
  const char *name;
  int fmt;             /* format passed to the loader */
  int reseal;          /* fix the checksums after the damage */
  int skip_loads;      /* under bad_rows = skip the file still loads (a bad row, skipped) */
  const char *frag;    /* expected message fragment; "%R" in it is the damaged row */
} corrupt_case;

static void corruptions(const char *dir) {
  enum { V = 1000 };
  /* A random, valid data set of 10..25 rows of 4..40 tokens. */
  dfl_dataset d;
  memset(&d, 0, sizeof d);
  int n = 10 + (int)dfl_rng_below(&R, 16);
  d.off = calloc((size_t)n + 1, 8);
  d.ids = malloc(4 * 40 * (size_t)n);
  d.mask = malloc(4 * 40 * (size_t)n);
  for (int r = 0; r < n; r++) {
    int len = 4 + (int)dfl_rng_below(&R, 37), start = (int)dfl_rng_below(&R, (uint64_t)len - 1);
    for (int i = 0; i < len; i++) {
      d.ids[d.off[r] + i] = (int32_t)dfl_rng_below(&R, V);
      d.mask[d.off[r] + i] = i >= start;
    }
    d.off[r + 1] = d.off[r] + len;
  }
  d.n = n;
  char good[1200], bad[1200];
  snprintf(good, sizeof good, "%s/good.dflpack", dir);
  snprintf(bad, sizeof bad, "%s/bad.dflpack", dir);
  CHECK(dfl_packed_write(good, &d, V, stderr) == 0, "write the clean file");
  FILE *f = fopen(good, "rb");
  fseek(f, 0, SEEK_END);
  size_t len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *orig = malloc(len + 64);
  CHECK(fread(orig, 1, len, f) == len, "read back");
  fclose(f);
  CHECK(len == 64 + 8 * ((size_t)n + 1) + p8(4 * (uint64_t)d.off[n]) + p8((uint64_t)d.off[n]),
        "file size %zu matches the documented layout", len);

  /* The clean file loads, equal to the data set. */
  dfl_dataset back;
  char *log = NULL;
  int rc = load_log(good, DFL_DATA_PACKED, V, 0, DFL_BADROW_REFUSE, &back, &log);
  CHECK(rc == 0, "clean file: %s", log);
  free(log);
  if (!rc) {
    back.n_truncated = d.n_truncated;
    int64_t sup = 0;
    for (int64_t i = 0; i < d.off[n]; i++) sup += d.mask[i];
    d.n_tokens = d.off[n];
    d.n_supervised = sup;
    same_rows(&d, &back, "clean file");
    dfl_data_free(&back);
  }

  static const corrupt_case cases[] = {
    {"bad magic", DFL_DATA_PACKED, 0, 0, "not a dflc packed file"},
    {"bad magic (mem)", -2, 0, 0, "not a dflc packed file (no DFLPACK1 magic"},
    {"other version", -1, 0, 0, "packed data of another format version"},
    {"shorter than header", -1, 0, 0, "shorter than the 64-byte header"},
    {"truncated", -1, 0, 0, "truncated: "},
    {"trailing bytes", -1, 0, 0, "unexpected bytes after the end of the data"},
    {"header checksum", -1, 0, 0, "header checksum mismatch"},
    {"data checksum", -1, 0, 0, "checksum mismatch: the data is corrupt"},
    {"counts inconsistent", -1, 1, 0, "header is inconsistent"},
    {"offsets past the end", -1, 1, 0, "row %R: ends at token"},
    {"offsets backwards", -1, 1, 0, "row %R: offsets go backwards"},
    {"empty row", -1, 1, 1, "row %R: empty row (no tokens)"},
    {"id >= vocab", -1, 1, 1, "row %R: input_ids["},
    {"mask 2", -1, 1, 1, "row %R: loss_mask["},
    {"no consecutive pair", -1, 1, 1, "row %R: no two consecutive supervised tokens"},
    {"supervised count", -1, 0, 0, "the header counts"},
    {"gzip-compressed", -1, 0, 0, "gzip-compressed packed file"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const corrupt_case *k = &cases[c];
    pk p = {.b = malloc(len + 64), .len = len};
    memcpy(p.b, orig, len);
    pk_view(&p);
    uint64_t row = 2 + dfl_rng_below(&R, p.rows - 2);   /* a middle row, 1-based: 2..rows-1 */
    uint64_t o0 = g64(p.off + 8 * (row - 1)), o1 = g64(p.off + 8 * row);
    uint64_t tok = o0 + dfl_rng_below(&R, o1 - o0);
    int gz = 0;
    switch (c) {
    case 0: {   /* bytes 0..6 (byte 7 is the version digit), never turned into JSON's '{' */
      uint64_t i = dfl_rng_below(&R, 7);
      do p.b[i] = (uint8_t)dfl_rng_below(&R, 256);
      while (p.b[i] == orig[i] || p.b[i] == '{' || p.b[i] == ' ' || p.b[i] == '\t' || p.b[i] == '\r' ||
             p.b[i] == '\n');
      break;
    }
    case 1: p.b[dfl_rng_below(&R, 8)] ^= (uint8_t)(1 + dfl_rng_below(&R, 255)); break;
    case 2: p.b[7] = '2'; break;
    case 3: p.len = 8 + dfl_rng_below(&R, 56); break;
    case 4: p.len = 64 + dfl_rng_below(&R, len - 64); break;
    case 5: p.len = len + 1 + dfl_rng_below(&R, 63); memset(p.b + len, 0, p.len - len); break;
    case 6: p.b[16 + dfl_rng_below(&R, 44)] ^= (uint8_t)(1 + dfl_rng_below(&R, 255)); break;
    case 7: p.b[64 + dfl_rng_below(&R, len - 64)] ^= (uint8_t)(1 + dfl_rng_below(&R, 255)); break;
    /* tokens + 8k: the implied size grows by 40k bytes (a smaller step can vanish in the 8-byte
    ** padding of the id and mask sections and reach a later check instead) */
    case 8: s64(p.b + 24, p.T + 8 * (1 + dfl_rng_below(&R, 5))); break;
    case 9: s64(p.off + 8 * row, p.T + 1 + dfl_rng_below(&R, 1000)); break;
    case 10: s64(p.off + 8 * row, o0 - 1 - dfl_rng_below(&R, o0)); break;  /* row >= 1 starts at > 0 */
    case 11: s64(p.off + 8 * row, o0); break;   /* row ends where it starts; the next row grows */
    case 12: s32(p.ids + 4 * tok, V + (uint32_t)dfl_rng_below(&R, 1u << 20)); break;
    case 13: p.mask[tok] = (uint8_t)(2 + dfl_rng_below(&R, 254)); break;
    case 14: for (uint64_t i = o0; i < o1; i++) p.mask[i] = (uint8_t)((i - o0) % 2); break;
    case 15: s64(p.b + 32, g64(p.b + 32) + 1 + dfl_rng_below(&R, 9)); s32(p.b + 60, (uint32_t)crc32(0, p.b, 60)); break;
    case 16: gz = 1; break;
    }
    if (k->reseal) reseal(&p);
    if (gz) {
      gzFile g = gzopen(bad, "wb");
      gzwrite(g, p.b, (unsigned)p.len);
      gzclose(g);
    } else {
      io_write_file(bad, p.b, p.len);
    }
    char want[512], rowtxt[32];
    snprintf(rowtxt, sizeof rowtxt, "%llu", (unsigned long long)row);
    const char *pr = strstr(k->frag, "%R");
    if (pr) snprintf(want, sizeof want, "%.*s%s%s", (int)(pr - k->frag), k->frag, rowtxt, pr + 2);
    else snprintf(want, sizeof want, "%s", k->frag);
    for (int pol = 0; pol < 2; pol++) {
      dfl_dataset o;
      char *lg = NULL;
      if (k->fmt == -2) {   /* the in-memory reader (fuzz entry point) */
        size_t ln;
        FILE *m = open_memstream(&lg, &ln);
        rc = dfl_packed_load_mem(bad, p.b, p.len, V, 0, (dfl_badrow_policy)pol, m, &o);
        fclose(m);
      } else {
        rc = load_log(bad, k->fmt, V, 0, (dfl_badrow_policy)pol, &o, &lg);
      }
      int expect_ok = pol == DFL_BADROW_SKIP && k->skip_loads;
      CHECK(expect_ok ? rc == 0 : rc != 0, "%s (policy %d): rc %d", k->name, pol, rc);
      CHECK(lg && strstr(lg, want), "%s (policy %d): no \"%s\" in:\n%s", k->name, pol, want, lg);
      if (rc == 0) {
        CHECK(o.n == n - 1 && o.n_skipped == 1, "%s: n %d of %d, skipped %lld", k->name, o.n, n,
              (long long)o.n_skipped);
        dfl_data_free(&o);
      } else if (pol == DFL_BADROW_REFUSE && k->skip_loads) {
        CHECK(strstr(lg, "refused: 1 bad row"), "%s: the refusal is summarized", k->name);
      }
      if (pol) printf("  %-22s %s", k->name, lg ? lg : "(no message)\n");
      free(lg);
    }
    free(p.b);
  }
  free(orig);
  dfl_data_free(&d);
}

/* The file's kind wins over data.format, with a note; an empty file is JSONL's "empty file". */
static void dispatch(const char *dir) {
  char packed[1200], *lg = NULL;
  dfl_dataset d;
  snprintf(packed, sizeof packed, "%s/rt.dflpack", dir);   /* from round_trip */
  int rc = load_log(packed, DFL_DATA_JSONL, 8192, 128, DFL_BADROW_REFUSE, &d, &lg);
  CHECK(rc == 0 && strstr(lg, "note: data.format = jsonl but this is a packed file"), "packed as jsonl: %s", lg);
  if (!rc) dfl_data_free(&d);
  free(lg);
  rc = load_log("examples/data/nano_eval.jsonl.gz", DFL_DATA_PACKED, 8192, 128, DFL_BADROW_REFUSE, &d, &lg);
  CHECK(rc == 0 && strstr(lg, "note: data.format = packed but this is a JSONL file"), "jsonl as packed: %s", lg);
  if (!rc) dfl_data_free(&d);
  free(lg);
  char empty[1200];
  snprintf(empty, sizeof empty, "%s/empty.dflpack", dir);
  io_write_file(empty, "", 0);
  rc = load_log(empty, DFL_DATA_PACKED, 8192, 128, DFL_BADROW_REFUSE, &d, &lg);
  CHECK(rc != 0 && strstr(lg, "empty file"), "empty file: %s", lg);
  free(lg);
}

int main(void) {
  dfl_rng_seed(&R, io_seed("test_packed"));
  char dir[512], path[1200];
  io_tmpdir(dir, sizeof dir, "packed");
  round_trip(dir, "examples/data/nano_train.jsonl.gz", 8192, 128, DFL_BADROW_REFUSE, "nano_train");
  int cap = 40 + (int)dfl_rng_below(&R, 80);   /* < 128: every row cut */
  round_trip(dir, "examples/data/nano_train.jsonl.gz", 8192, cap, DFL_BADROW_SKIP, "nano_train, cut");
  round_trip(dir, "examples/data/tiny_train.jsonl.gz", 8192, 0, DFL_BADROW_SKIP, "tiny_train");
  snprintf(path, sizeof path, "%s/random.jsonl", dir);
  write_random_jsonl(path, 500);
  round_trip(dir, path, 500, 8 + (int)dfl_rng_below(&R, 40), DFL_BADROW_SKIP, "random rows, cut");
  dispatch(dir);
  corruptions(dir);
  io_rmdir(dir);
  return io_finish("test_packed");
}
