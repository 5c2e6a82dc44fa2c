/*
** test_data.c: JSONL loading (plain and gzip), bad-row policies, truncation, long lines, epoch
** order and packing.
*/
#include <zlib.h>
#include <sys/stat.h>
#include "io_test.h"

static dfl_rng R;

/* Load PATH with the log captured into *logtext (caller frees). */
static int load_log(const char *path, int vocab, int cap, dfl_badrow_policy pol, dfl_dataset *d,
                    char **logtext) {
  size_t n;
  FILE *lg = open_memstream(logtext, &n);
  int rc = dfl_data_load(path, vocab, cap, pol, lg, d);
  fclose(lg);
  return rc;
}

static void test_examples(void) {
  dfl_dataset d;
  char *log = NULL;
  int rc = load_log("examples/data/nano_train.jsonl.gz", 8192, 128, DFL_BADROW_REFUSE, &d, &log);
  printf("  %s", log);
  CHECK(rc == 0, "nano_train: rc %d: %s", rc, log);
  if (!rc) {
    /* README: 2048 rows of 32 prompt (mask 0) + 96 response (mask 1) tokens. */
    CHECK(d.n == 2048 && d.n_tokens == 2048 * 128 && d.n_supervised == 2048 * 96 && d.n_skipped == 0 &&
          d.n_truncated == 0 && d.n_lines == 2048, "nano counts: n %d tokens %lld sup %lld", d.n,
          (long long)d.n_tokens, (long long)d.n_supervised);
    int64_t bad = 0;
    for (int64_t i = 0; i < d.n_tokens; i++) bad += d.ids[i] < 0 || d.ids[i] >= 8192 || (d.mask[i] & ~1);
    for (int r = 0; r < d.n; r++) bad += d.off[r + 1] - d.off[r] != 128;
    CHECK(bad == 0, "nano: %lld bad ids/masks/lengths", (long long)bad);
    CHECK(strstr(log, "examples/data/nano_train.jsonl.gz: 2048 rows, 262144 tokens (196608 supervised), "
                      "0 skipped, 0 truncated"), "summary line: %s", log);
    dfl_data_free(&d);
  }
  free(log);
  /* tiny_train with a capacity below the row length: every row cut, counted, reported once. */
  rc = load_log("examples/data/tiny_train.jsonl.gz", 8192, 200, DFL_BADROW_SKIP, &d, &log);
  printf("  %s", log);
  CHECK(rc == 0 && d.n == 8192 && d.n_truncated == 8192 && d.n_tokens == 8192LL * 200 &&
        d.n_supervised == 8192LL * (200 - 64), "tiny cut: rc %d n %d trunc %lld sup %lld", rc, d.n,
        (long long)d.n_truncated, (long long)d.n_supervised);
  CHECK(log && strstr(log, "8192 rows were longer than the sequence capacity 200"), "truncation summary");
  if (!rc) {
    int64_t bad = 0;
    for (int64_t i = 0; i < d.n_tokens; i++) bad += d.ids[i] < 0 || d.ids[i] >= 8192;
    CHECK(bad == 0, "tiny: %lld ids outside the vocabulary", (long long)bad);
    dfl_data_free(&d);
  }
  free(log);
}

typedef struct { const char *text, *frag; } row_case;   /* frag NULL: a good row */

static void write_rows(const char *path, const row_case *rc, int n, int gz) {
  if (gz) {
    gzFile f = gzopen(path, "wb");
    for (int i = 0; i < n; i++) { gzputs(f, rc[i].text); gzputs(f, "\n"); }
    gzclose(f);
  } else {
    FILE *f = fopen(path, "w");
    for (int i = 0; i < n; i++) fprintf(f, "%s\n", rc[i].text);
    fclose(f);
  }
}

static void test_bad_rows(const char *dir) {
  static const row_case rows[] = {
    {"{\"input_ids\": [5, 6, 7, 8], \"loss_mask\": [0, 1, 1, 0]}", NULL},
    {"{\"input_ids\": [5, 6, 7]}", "no \"loss_mask\" array"},
    {"{\"input_ids\": [5, 6, 7], \"loss_mask\": [1, 1]}", "input_ids has 3 tokens but loss_mask has 2"},
    {"{\"input_ids\": [5, 100, 7], \"loss_mask\": [1, 1, 1]}", "input_ids[1] = 100 is outside the vocabulary [0, 100)"},
    {"{\"input_ids\": [5, -1, 7], \"loss_mask\": [1, 1, 1]}", "input_ids[1] = -1 is outside"},
    {"{\"input_ids\": [5, 6.5, 7], \"loss_mask\": [1, 1, 1]}", "input_ids[1] is not an integer"},
    {"{\"input_ids\": [5, \"6\", 7], \"loss_mask\": [1, 1, 1]}", "input_ids[1] is not an integer"},
    {"{\"input_ids\": [5, 6, 7], \"loss_mask\": [1, 2, 1]}", "loss_mask[1] = 2 is not 0 or 1"},
    {"{\"input_ids\": [5, 6, 7, 8], \"loss_mask\": [1, 0, 1, 0]}", "no two consecutive supervised tokens"},
    {"{\"input_ids\": [5, 6, 7", "not JSON"},
    {"[1, 2, 3]", "not a JSON object"},
    {"", NULL},   /* blank: ignored silently */
    {"{\"input_ids\": [], \"loss_mask\": []}", "empty row"},
    {"{\"loss_mask\": [1, 1]}", "no \"input_ids\" array"},
    {"{\"input_ids\": [1, 2], \"loss_mask\": [1, 1], \"input_ids\": [3, 4]}", "not JSON (duplicate"},
    {"{\"input_ids\": [9, 8, 7], \"loss_mask\": [true, true, false], \"extra\": 1}", NULL},
    {"   ", NULL},
    {"{\"input_ids\": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], \"loss_mask\": [0, 0, 0, 0, 0, 0, 0, 0, 1, 1]}",
     "no two consecutive supervised tokens in the first 8 tokens (the sequence capacity"},
    {"{\"input_ids\": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], \"loss_mask\": [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]}", NULL},
  };
  int n = (int)(sizeof rows / sizeof rows[0]), ngood = 0;
  for (int i = 0; i < n; i++) ngood += rows[i].frag == NULL && !strstr(rows[i].text, "   ") && rows[i].text[0];
  for (int gz = 0; gz < 2; gz++) {
    char path[1200];
    snprintf(path, sizeof path, "%s/bad%s", dir, gz ? ".jsonl.gz" : ".jsonl");
    write_rows(path, rows, n, gz);
    for (int pol = 0; pol < 2; pol++) {
      dfl_dataset d;
      char *log = NULL;
      int rc = load_log(path, 100, 8, (dfl_badrow_policy)pol, &d, &log);
      if (gz && pol) printf("%s", log);
      for (int i = 0; i < n; i++) {
        if (!rows[i].frag) continue;
        char want[2048];
        snprintf(want, sizeof want, "%s:%d: %s", path, i + 1, rows[i].frag);
        CHECK(strstr(log, want), "line %d not reported as \"%s\"", i + 1, want);
      }
      if (pol == DFL_BADROW_SKIP) {
        CHECK(rc == 0 && d.n == ngood && d.n_skipped == n - ngood - 2 && d.n_lines == n && d.n_truncated == 1,
              "skip: rc %d n %d skipped %lld lines %lld truncated %lld", rc, d.n, (long long)d.n_skipped,
              (long long)d.n_lines, (long long)d.n_truncated);
        if (!rc) {
          /* The kept rows, in order: [5,6,7,8], [9,8,7] (booleans), and the 10-token row cut to 8. */
          int32_t want_ids[] = {5, 6, 7, 8, 9, 8, 7, 1, 2, 3, 4, 5, 6, 7, 8};
          int32_t want_mask[] = {0, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1};
          CHECK(d.n_tokens == 15 && d.n_supervised == 12 && d.off[1] == 4 && d.off[2] == 7 && d.off[3] == 15,
                "kept rows");
          for (int i = 0; i < 15 && d.n_tokens == 15; i++)
            CHECK(d.ids[i] == want_ids[i] && d.mask[i] == want_mask[i], "token %d", i);
          dfl_data_free(&d);
        }
        CHECK(strstr(log, "row skipped") && strstr(log, "3 rows, 15 tokens (12 supervised), 14 skipped, 1 truncated"),
              "skip summary: %s", log);
      } else {
        CHECK(rc == DFL_EFORMAT && strstr(log, "refused: 14 bad rows") && strstr(log, "row refused"),
              "refuse: rc %d", rc);
      }
      free(log);
    }
  }
}

static void test_refusals(const char *dir) {
  char path[1200], *log = NULL;
  dfl_dataset d;
  /* Empty file; only blank lines; missing file. */
  snprintf(path, sizeof path, "%s/empty.jsonl", dir);
  io_write_file(path, "", 0);
  CHECK(load_log(path, 100, 8, DFL_BADROW_SKIP, &d, &log) == DFL_EFORMAT && strstr(log, "empty file"), "empty: %s", log);
  free(log);
  snprintf(path, sizeof path, "%s/blank.jsonl", dir);
  io_write_file(path, "\n  \n\n", 5);
  CHECK(load_log(path, 100, 8, DFL_BADROW_SKIP, &d, &log) == DFL_EFORMAT && strstr(log, "no usable row"), "blank: %s", log);
  free(log);
  snprintf(path, sizeof path, "%s/allbad.jsonl", dir);
  io_write_file(path, "{\"input_ids\":[1]}\n", 18);
  CHECK(load_log(path, 100, 8, DFL_BADROW_SKIP, &d, &log) == DFL_EFORMAT && strstr(log, "no usable row (1 lines, 1 bad)"),
        "all bad: %s", log);
  free(log);
  /* A UTF-8 BOM before the first row is accepted (Windows editors write one). */
  snprintf(path, sizeof path, "%s/bom.jsonl", dir);
  io_write_file(path, "\xef\xbb\xbf{\"input_ids\":[1,2,3],\"loss_mask\":[0,1,1]}\n", 45);
  CHECK(load_log(path, 100, 8, DFL_BADROW_REFUSE, &d, &log) == DFL_OK && d.n == 1, "BOM refused: %s", log);
  if (d.n == 1) dfl_data_free(&d);
  free(log);
  /* A .gz that is plain text: one line, not a row-by-row "not JSON". */
  snprintf(path, sizeof path, "%s/plain.jsonl.gz", dir);
  io_write_file(path, "{\"input_ids\":[1,2,3],\"loss_mask\":[0,1,1]}\n{\n{\n", 46);
  CHECK(load_log(path, 100, 8, DFL_BADROW_SKIP, &d, &log) == DFL_EFORMAT && strstr(log, "not gzip") &&
        !strchr(log, '\n')[1], "plain .gz: %s", log);
  free(log);
  /* A FIFO: refused at once (reading it would block or never end). */
  snprintf(path, sizeof path, "%s/fifo.jsonl", dir);
  CHECK(mkfifo(path, 0600) == 0, "mkfifo");
  CHECK(load_log(path, 100, 8, DFL_BADROW_SKIP, &d, &log) == DFL_EFORMAT && strstr(log, "not a regular file"), "fifo: %s", log);
  free(log);
  unlink(path);
  snprintf(path, sizeof path, "%s/missing.jsonl", dir);
  CHECK(load_log(path, 100, 8, DFL_BADROW_SKIP, &d, &log) == DFL_EIO && strstr(log, "cannot open"), "missing: %s", log);
  free(log);

  /* Truncated gzip: a valid stream of many random rows, cut at a random point. */
  snprintf(path, sizeof path, "%s/cut.jsonl.gz", dir);
  gzFile g = gzopen(path, "wb");
  for (int r = 0; r < 3000; r++) {
    gzprintf(g, "{\"input_ids\": [");
    for (int i = 0; i < 64; i++) gzprintf(g, "%s%d", i ? ", " : "", (int)dfl_rng_below(&R, 100));
    gzprintf(g, "], \"loss_mask\": [");
    for (int i = 0; i < 64; i++) gzprintf(g, "%s%d", i ? ", " : "", i >= 16);
    gzprintf(g, "]}\n");
  }
  gzclose(g);
  CHECK(load_log(path, 100, 64, DFL_BADROW_REFUSE, &d, &log) == 0 && d.n == 3000, "whole gzip: %s", log);
  dfl_data_free(&d);
  free(log);
  struct stat sb;
  stat(path, &sb);
  /* Corrupt a copy in the middle of the deflate stream: a data or CRC error, never a clean load. */
  {
    size_t n;
    FILE *f = fopen(path, "rb");
    char *b = malloc((size_t)sb.st_size), bad[1300];
    n = fread(b, 1, (size_t)sb.st_size, f);
    fclose(f);
    size_t at = 64 + (size_t)dfl_rng_below(&R, n - 128);
    for (int i = 0; i < 8; i++) b[at + (size_t)i] ^= (char)(1 + dfl_rng_below(&R, 255));
    snprintf(bad, sizeof bad, "%s/corrupt.jsonl.gz", dir);
    io_write_file(bad, b, n);
    free(b);
    int crc = load_log(bad, 100, 64, DFL_BADROW_SKIP, &d, &log);
    char *last = strrchr(log, '\n');
    while (last && last > log && last[-1] != '\n') last--;
    printf("  corrupted at byte %zu: %s", at, last ? last : log);
    CHECK(crc == DFL_EIO && strstr(log, "corrupt.jsonl.gz"), "corrupt gzip: rc %d %s", crc, log);
    if (!crc) dfl_data_free(&d);
    free(log);
  }
  off_t cut = (off_t)(sb.st_size * (0.2 + 0.75 * dfl_rng_uniform(&R)));
  CHECK(truncate(path, cut) == 0, "truncate");
  int rc = load_log(path, 100, 64, DFL_BADROW_SKIP, &d, &log);
  printf("  cut at %lld of %lld bytes: %s", (long long)cut, (long long)sb.st_size, log);
  CHECK(rc == DFL_EIO && strstr(log, "gzip stream is truncated") && strstr(log, path), "truncated gzip: rc %d %s", rc, log);
  free(log);
  /* Cut inside the 8-byte trailer: all data decodes, only the CRC/length check can tell. */
  CHECK(truncate(path, 0) == 0, "truncate");
  g = gzopen(path, "wb");
  gzprintf(g, "{\"input_ids\": [1, 2], \"loss_mask\": [1, 1]}\n");
  gzclose(g);
  stat(path, &sb);
  CHECK(truncate(path, sb.st_size - 3) == 0, "truncate");
  rc = load_log(path, 100, 64, DFL_BADROW_SKIP, &d, &log);
  CHECK(rc == DFL_EIO && strstr(log, "gzip stream is"), "trailer cut: rc %d %s", rc, log);
  if (!rc) dfl_data_free(&d);
  free(log);
}

static void test_long_lines(void) {
  /* A 1M-token row (a ~7 MB line, over several read chunks) loads; cap cuts it. */
  int T = 1000000;
  size_t cap = (size_t)T * 16 + 64, o = 0;
  char *buf = malloc(cap);
  o += (size_t)sprintf(buf + o, "{\"input_ids\": [");
  for (int i = 0; i < T; i++) o += (size_t)sprintf(buf + o, "%s%d", i ? "," : "", (int)(((int64_t)i * 7919) % 8192));
  o += (size_t)sprintf(buf + o, "], \"loss_mask\": [");
  for (int i = 0; i < T; i++) o += (size_t)sprintf(buf + o, "%s1", i ? "," : "");
  o += (size_t)sprintf(buf + o, "]}\n");
  dfl_dataset d;
  char *log = NULL;
  size_t ln;
  FILE *lg = open_memstream(&log, &ln);
  int rc = dfl_data_load_mem("long.jsonl", buf, o, 8192, 0, DFL_BADROW_REFUSE, lg, &d);
  fclose(lg);
  CHECK(rc == 0 && d.n == 1 && d.n_tokens == T && d.ids[T - 1] == (int)(((int64_t)(T - 1) * 7919) % 8192), "long row: %s", log);
  if (!rc) dfl_data_free(&d);
  free(log);
  free(buf);
  /* A line over 64 MiB is refused (without a newline anywhere). */
  size_t big = (64u << 20) + 10;
  buf = malloc(big);
  memset(buf, ' ', big);
  buf[0] = '{';
  lg = open_memstream(&log, &ln);
  rc = dfl_data_load_mem("huge.jsonl", buf, big, 8192, 0, DFL_BADROW_SKIP, lg, &d);
  fclose(lg);
  CHECK(rc == DFL_EFORMAT && strstr(log, "huge.jsonl:1: line longer than 64 MiB"), "huge line: rc %d %s", rc, log);
  free(log);
  free(buf);
}

static void test_order_pack(void) {
  /* A random in-memory dataset. */
  int n = 50 + (int)dfl_rng_below(&R, 50);
  size_t cap = (size_t)n * 1200 + 16, o = 0;
  char *buf = malloc(cap);
  int *len = malloc((size_t)n * sizeof *len);
  for (int r = 0; r < n; r++) {
    len[r] = 2 + (int)dfl_rng_below(&R, 40);
    o += (size_t)sprintf(buf + o, "{\"input_ids\":[");
    for (int i = 0; i < len[r]; i++) o += (size_t)sprintf(buf + o, "%s%d", i ? "," : "", 1 + r * 100 + i);
    o += (size_t)sprintf(buf + o, "],\"loss_mask\":[");
    for (int i = 0; i < len[r]; i++) o += (size_t)sprintf(buf + o, "%s%d", i ? "," : "", i < 2 ? 1 : (int)dfl_rng_below(&R, 2));
    o += (size_t)sprintf(buf + o, "]}\n");
  }
  dfl_dataset d;
  FILE *lg = fopen("/dev/null", "w");
  int rc = dfl_data_load_mem("mem.jsonl", buf, o, 100000, 0, DFL_BADROW_REFUSE, lg, &d);
  fclose(lg);
  CHECK(rc == 0 && d.n == n, "mem dataset");
  if (rc) return;
  int *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b), *seen = calloc((size_t)n, sizeof *seen);
  uint64_t seed = dfl_rng_next(&R);
  dfl_data_order(&d, seed, 3, 1, a);
  dfl_data_order(&d, seed, 3, 1, b);
  int same = 1, perm = 1, ident = 1;
  for (int i = 0; i < n; i++) { same &= a[i] == b[i]; if (a[i] >= 0 && a[i] < n) seen[a[i]]++; else perm = 0; ident &= a[i] == i; }
  for (int i = 0; i < n; i++) perm &= seen[i] == 1;
  CHECK(same && perm && !ident, "order: reproducible %d permutation %d identity %d", same, perm, ident);
  dfl_data_order(&d, seed, 4, 1, b);
  int diff = 0;
  for (int i = 0; i < n; i++) diff += a[i] != b[i];
  CHECK(diff > 0, "epochs 3 and 4 gave the same order");
  dfl_data_order(&d, seed, 3, 0, b);
  for (int i = 0; i < n; i++) CHECK(b[i] == i, "no shuffle: order[%d] = %d", i, b[i]);

  /* Pack 5 rows into S = 32: ids/mask copied (cut at S), the rest 0/0. */
  int S = 32, rows[5];
  int32_t ids[5 * 32], mask[5 * 32];
  for (int i = 0; i < 5; i++) rows[i] = a[i];
  memset(ids, 0x55, sizeof ids);
  memset(mask, 0x55, sizeof mask);
  dfl_data_pack(&d, rows, 5, S, ids, mask);
  int bad = 0;
  for (int i = 0; i < 5; i++) {
    int r = rows[i], L = len[r] < S ? len[r] : S;
    for (int j = 0; j < S; j++) {
      int64_t k = d.off[r] + j;
      if (j < L) bad += ids[i * S + j] != 1 + r * 100 + j || mask[i * S + j] != d.mask[k];
      else bad += ids[i * S + j] != 0 || mask[i * S + j] != 0;
    }
  }
  CHECK(bad == 0, "pack: %d wrong entries", bad);
  free(a); free(b); free(seen); free(len); free(buf);
  dfl_data_free(&d);
}

int main(void) {
  dfl_rng_seed(&R, io_seed("test_data"));
  char dir[512];
  io_tmpdir(dir, sizeof dir, "data");
  test_examples();
  test_bad_rows(dir);
  test_refusals(dir);
  test_long_lines();
  test_order_pack();
  io_rmdir(dir);
  return io_finish("test_data");
}
