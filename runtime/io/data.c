/*
** data.c: pre-tokenized JSONL training data (plain or gzip), epoch order and batch packing.
**
** Policy decisions (see data.h):
**  - blank lines (only whitespace) are ignored silently: editors and `cat a b` leave them;
**  - every other bad row is reported as PATH:LINE: what; the first DFL_DATA_MAX_REPORTS are
**    printed, the rest only counted. Under bad_rows = refuse the whole file is still scanned so
**    that one run shows every problem, then refused;
**  - a row longer than the capacity is cut to it (counted, reported once in the summary), and the
**    "two consecutive supervised tokens" rule is applied after the cut, since that is what the
**    drafter will see;
**  - lines longer than DFL_DATA_MAX_LINE refuse the file: no real row is that long, and it bounds
**    memory on a file that is not JSONL at all.
*/
#include "runtime/io/data.h"
#include "runtime/io/data_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define DFL_DATA_MAX_LINE (64u << 20)
#define DFL_DATA_MAX_REPORTS 100
#define CHUNK (1u << 20)

typedef struct {
  gzFile gz;                 /* file source, or */
  const uint8_t *mem;        /* in-memory source */
  size_t memlen, mempos;
} src;

static long src_read(src *s, uint8_t *dst, size_t n) {
  if (!s->gz) {
    size_t k = s->memlen - s->mempos < n ? s->memlen - s->mempos : n;
    memcpy(dst, s->mem + s->mempos, k);
    s->mempos += k;
    return (long)k;
  }
  return gzread(s->gz, dst, (unsigned)n);
}

typedef struct {
  const char *path;
  FILE *log;
  int vocab, cap;
  dfl_badrow_policy policy;
  dfl_dataset *d;
  int64_t cap_ids, cap_rows;   /* allocated sizes */
  int64_t n_reported;
} loader;

static int grow(loader *L, int64_t need_tokens) {
  dfl_dataset *d = L->d;
  int64_t used = d->off[d->n];
  if (used + need_tokens > L->cap_ids) {
    int64_t nc = L->cap_ids ? L->cap_ids : 1 << 12;
    while (nc < used + need_tokens) nc *= 2;
    int32_t *a = realloc(d->ids, (size_t)nc * 4), *b = a ? realloc(d->mask, (size_t)nc * 4) : NULL;
    if (a) d->ids = a;
    if (!b) return DFL_ENOMEM;
    d->mask = b;
    L->cap_ids = nc;
  }
  if (d->n + 2 > L->cap_rows) {
    int64_t nc = L->cap_rows * 2;
    int64_t *o = realloc(d->off, (size_t)nc * 8);
    if (!o) return DFL_ENOMEM;
    d->off = o;
    L->cap_rows = nc;
  }
  return DFL_OK;
}

static void bad_row(loader *L, int64_t line, const char *msg) {
  L->d->n_skipped++;
  if (L->n_reported++ < DFL_DATA_MAX_REPORTS)
    fprintf(L->log, "%s:%lld: %s; row %s\n", L->path, (long long)line, msg,
            L->policy == DFL_BADROW_SKIP ? "skipped" : "refused");
  else if (L->n_reported == DFL_DATA_MAX_REPORTS + 1)
    fprintf(L->log, "%s: more bad rows follow; only the first %d are shown\n", L->path,
            DFL_DATA_MAX_REPORTS);
}

/* Validate one non-blank line and append it. Returns DFL_OK (row kept or reported), or
** DFL_ENOMEM. */
static int row(loader *L, const char *line, size_t len, int64_t lineno) {
  char msg[256];
  json_error_t je;
  json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
  if (!o) {
    snprintf(msg, sizeof msg, "not JSON (%s, column %d)", je.text, je.column);
    bad_row(L, lineno, msg);
    return DFL_OK;
  }
  int rc = DFL_OK;
  json_t *ids = json_object_get(o, "input_ids"), *mask = json_object_get(o, "loss_mask");
  size_t n = json_array_size(ids);
  msg[0] = 0;
  if (!json_is_object(o))
    snprintf(msg, sizeof msg, "not a JSON object (each line must be {\"input_ids\": [...], "
             "\"loss_mask\": [...]})");
  else if (!json_is_array(ids))
    snprintf(msg, sizeof msg, "no \"input_ids\" array");
  else if (!json_is_array(mask))
    snprintf(msg, sizeof msg, "no \"loss_mask\" array (every row needs one: 1 marks the tokens the "
             "drafter learns to predict)");
  else if (json_array_size(mask) != n)
    snprintf(msg, sizeof msg, "input_ids has %zu tokens but loss_mask has %zu", n,
             json_array_size(mask));
  else if (n == 0)
    snprintf(msg, sizeof msg, "empty row (no tokens)");
  if (msg[0]) goto bad;

  size_t keep = L->cap > 0 && n > (size_t)L->cap ? (size_t)L->cap : n;
  if ((rc = grow(L, (int64_t)keep))) goto out;
  dfl_dataset *d = L->d;
  int32_t *di = d->ids + d->off[d->n], *dm = d->mask + d->off[d->n];
  /* Check every token (also past the cut: a bad id means a bad row, whatever its length). */
  for (size_t i = 0; i < n; i++) {
    json_t *a = json_array_get(ids, i), *m = json_array_get(mask, i);
    if (!json_is_integer(a)) {
      snprintf(msg, sizeof msg, "input_ids[%zu] is not an integer", i);
      goto bad;
    }
    json_int_t v = json_integer_value(a);
    /* vocab <= 0 (no model to check against, e.g. `dflc pack` without --vocab): still int32 */
    int64_t bound = L->vocab > 0 ? L->vocab : (int64_t)INT32_MAX + 1;
    if (v < 0 || v >= bound) {
      snprintf(msg, sizeof msg, "input_ids[%zu] = %lld is outside the vocabulary [0, %lld) (data "
               "tokenized for another model?)", i, (long long)v, (long long)bound);
      goto bad;
    }
    int mv;
    if (json_is_boolean(m)) mv = json_is_true(m);
    else if (json_is_integer(m) && (json_integer_value(m) == 0 || json_integer_value(m) == 1))
      mv = (int)json_integer_value(m);
    else {
      char *s = json_dumps(m, JSON_ENCODE_ANY | JSON_COMPACT);
      snprintf(msg, sizeof msg, "loss_mask[%zu] = %.40s is not 0 or 1", i, s ? s : "?");
      free(s);
      goto bad;
    }
    if (i < keep) { di[i] = (int32_t)v; dm[i] = mv; }
  }
  int consec = 0;
  for (size_t i = 0; i + 1 < keep && !consec; i++) consec = dm[i] && dm[i + 1];
  if (!consec) {
    if (keep < n)
      snprintf(msg, sizeof msg, "no two consecutive supervised tokens in the first %zu tokens (the "
               "sequence capacity; nothing to train on)", keep);
    else
      snprintf(msg, sizeof msg, "no two consecutive supervised tokens (nothing to train on)");
    goto bad;
  }
  int64_t sup = 0;
  for (size_t i = 0; i < keep; i++) sup += dm[i];
  d->n_tokens += (int64_t)keep;
  d->n_supervised += sup;
  d->n_truncated += keep < n;
  d->off[d->n + 1] = d->off[d->n] + (int64_t)keep;
  d->n++;
  goto out;
bad:
  bad_row(L, lineno, msg);
out:
  json_decref(o);
  return rc;
}

static int is_blank(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
  return 1;
}

static int load(src *s, const char *path, int vocab, int cap, dfl_badrow_policy policy, FILE *log,
                dfl_dataset *out) {
  memset(out, 0, sizeof *out);
  loader L = {.path = path, .log = log ? log : stderr, .vocab = vocab, .cap = cap,
              .policy = policy, .d = out, .cap_rows = 64};
  out->off = calloc((size_t)L.cap_rows, 8);
  /* Read in 1 MiB chunks; a small in-memory input gets a small buffer (fuzzing speed). */
  size_t chunk = !s->gz && s->memlen < CHUNK ? s->memlen + 64 : CHUNK;
  size_t bcap = 2 * chunk, beg = 0, end = 0, scan = 0;
  char *buf = malloc(bcap);
  int rc = DFL_OK, eof = 0;
  if (!out->off || !buf) { rc = DFL_ENOMEM; goto done; }
  for (;;) {
    char *nl = memchr(buf + scan, '\n', end - scan);
    if (!nl && !eof) {
      if (end - beg > DFL_DATA_MAX_LINE) {
        fprintf(L.log, "%s:%lld: line longer than %u MiB: not a JSONL row of tokens (is this the "
                "right file?)\n", path, (long long)out->n_lines + 1, DFL_DATA_MAX_LINE >> 20);
        rc = DFL_EFORMAT;
        goto done;
      }
      if (beg > 0) {   /* keep the partial line, make room behind it */
        memmove(buf, buf + beg, end - beg);
        end -= beg; scan -= beg; beg = 0;
      }
      if (bcap - end < chunk) {
        char *nb = realloc(buf, bcap * 2);
        if (!nb) { rc = DFL_ENOMEM; goto done; }
        buf = nb;
        bcap *= 2;
      }
      scan = end;
      long k = src_read(s, (uint8_t *)buf + end, chunk);
      if (k < 0) {
        int zerr;
        const char *m = gzerror(s->gz, &zerr);
        if (!strncmp(m, path, strlen(path)) && m[strlen(path)] == ':') m += strlen(path) + 2;
        fprintf(L.log, "%s: %s after line %lld (%s)%s\n", path,
                zerr == Z_ERRNO ? "read error" : "corrupt gzip data", (long long)out->n_lines,
                zerr == Z_ERRNO ? strerror(errno) : m,
                zerr == Z_ERRNO ? "" : ": re-download or re-compress the file");
        rc = DFL_EIO;
        goto done;
      }
      if (k == 0) {
        eof = 1;
        if (s->gz) {   /* a gzip stream cut short reads as a clean EOF with a pending error */
          int zerr;
          const char *m = gzerror(s->gz, &zerr);
          if (!strncmp(m, path, strlen(path)) && m[strlen(path)] == ':') m += strlen(path) + 2;
          if (zerr != Z_OK) {
            fprintf(L.log, "%s:%lld: gzip stream is truncated or corrupt (%s) after line %lld: "
                    "re-download or re-compress the file\n", path, (long long)out->n_lines + 1, m,
                    (long long)out->n_lines);
            rc = DFL_EIO;
            goto done;
          }
        }
      }
      end += (size_t)k;
      continue;
    }
    size_t len = nl ? (size_t)(nl - (buf + beg)) : end - beg;
    if (!nl && len == 0) break;   /* clean end of input */
    if (out->n_lines == 0 && len >= 3 && !memcmp(buf + beg, "\xef\xbb\xbf", 3)) {   /* a UTF-8 BOM (Windows editors) */
      beg += 3;
      len -= 3;
    }
    out->n_lines++;
    if (len > DFL_DATA_MAX_LINE) {
      fprintf(L.log, "%s:%lld: line longer than %u MiB: not a JSONL row of tokens\n", path,
              (long long)out->n_lines, DFL_DATA_MAX_LINE >> 20);
      rc = DFL_EFORMAT;
      goto done;
    }
    if (!is_blank(buf + beg, len) && (rc = row(&L, buf + beg, len, out->n_lines))) goto done;
    beg = scan = nl ? (size_t)(nl - buf) + 1 : end;
    if (!nl) break;
  }
done:
  free(buf);
  return dfl_data_finish_(path, L.log, cap, policy, rc, "lines", out);
}

/* What the first bytes say the file is. */
enum { KIND_JSONL, KIND_PACKED, KIND_OTHER_PACKED, KIND_GZ_PACKED, KIND_UNKNOWN };

static int sniff(const uint8_t *b, size_t n) {
  if (n >= 8 && !memcmp(b, DFL_PACKED_MAGIC, 8)) return KIND_PACKED;
  if (n >= 8 && !memcmp(b, DFL_PACKED_MAGIC, 7)) return KIND_OTHER_PACKED;   /* another version */
  size_t i = n >= 3 && !memcmp(b, "\xef\xbb\xbf", 3) ? 3 : 0;   /* a UTF-8 BOM */
  while (i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n')) i++;
  return i == n || b[i] == '{' ? KIND_JSONL : KIND_UNKNOWN;   /* blank start: let JSONL judge */
}

static int load_jsonl(const char *path, int vocab, int cap, dfl_badrow_policy policy, FILE *log,
                      dfl_dataset *out) {
  src s = {0};
  s.gz = gzopen(path, "rb");   /* reads plain files transparently */
  if (!s.gz) {
    fprintf(log, "%s: cannot open (%s)\n", path, errno ? strerror(errno) : "zlib");
    return DFL_EIO;
  }
  gzbuffer(s.gz, 1u << 18);
  int rc = load(&s, path, vocab, cap, policy, log, out);
  int crc = gzclose_r(s.gz);
  if (!rc && crc != Z_OK) {   /* e.g. a CRC or length trailer that does not match */
    fprintf(log, "%s: gzip stream is corrupt (trailer check failed)\n", path);
    dfl_data_free(out);
    return DFL_EIO;
  }
  return rc;
}

int dfl_data_load_fmt(const char *path, int format, int vocab, int cap, dfl_badrow_policy policy,
                      FILE *log, dfl_dataset *out) {
  memset(out, 0, sizeof *out);
  if (!log) log = stderr;
  /* O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below); no effect on files */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    fprintf(log, "%s: cannot open (%s)\n", path, strerror(errno));
    return DFL_EIO;
  }
  struct stat st;
  memset(&st, 0, sizeof st);
  if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {   /* gzopen opens a directory; reads then fail */
    fprintf(log, "%s: %s\n", path, S_ISDIR(st.st_mode) ? "is a directory, not a data file"
                                                        : "cannot stat");
    close(fd);
    return DFL_EIO;
  }
  /* A FIFO or a device would be read forever; an empty file or a .gz that is not gzip would be
  ** reported row by row. One line each, as dflc check says it. */
  size_t plen = strlen(path);
  const char *what = !S_ISREG(st.st_mode) ? "is not a regular file (a FIFO, a device or a socket): give a data file"
                     : st.st_size == 0 ? "empty file (no rows)" : NULL;
  uint8_t head[64];
  ssize_t k = what ? 0 : pread(fd, head, sizeof head, 0);
  if (!what && plen > 3 && !strcmp(path + plen - 3, ".gz") && !(k >= 2 && head[0] == 0x1f && head[1] == 0x8b))
    what = "is named .gz but is not gzip: compress it with gzip, or drop the .gz from its name";
  if (what) {
    fprintf(log, "%s: %s\n", path, what);
    close(fd);
    return DFL_EFORMAT;
  }
  int kind = sniff(head, k > 0 ? (size_t)k : 0);
  if (k >= 2 && head[0] == 0x1f && head[1] == 0x8b) {   /* gzip: look at what it holds */
    gzFile g = gzopen(path, "rb");
    int n = g ? gzread(g, head, sizeof head) : -1;
    if (g) gzclose_r(g);
    kind = n > 0 ? sniff(head, (size_t)n) : KIND_JSONL;   /* a broken stream: JSONL reports it */
    if (kind == KIND_PACKED || kind == KIND_OTHER_PACKED) kind = KIND_GZ_PACKED;
  }
  int rc;
  const char *fmtname = format == DFL_DATA_PACKED ? "packed" : "jsonl";
  switch (kind) {
  case KIND_PACKED:
    if (format == DFL_DATA_JSONL)
      fprintf(log, "%s: note: data.format = jsonl but this is a packed file (%s); reading it as "
              "packed (set format = packed to silence this note)\n", path, DFL_PACKED_MAGIC);
    rc = dfl_packed_load_fd_(path, fd, (size_t)st.st_size, vocab, cap, policy, log, out);
    break;
  case KIND_OTHER_PACKED:
    fprintf(log, "%s: packed data of another format version (%.8s); this dflc reads %s: re-run "
            "`dflc pack` on the JSONL source\n", path, (const char *)head, DFL_PACKED_MAGIC);
    rc = DFL_EFORMAT;
    break;
  case KIND_GZ_PACKED:
    fprintf(log, "%s: a gzip-compressed packed file: packed data is read in place, uncompressed; "
            "gunzip it first\n", path);
    rc = DFL_EFORMAT;
    break;
  case KIND_UNKNOWN:
    if (format == DFL_DATA_PACKED) {
      fprintf(log, "%s: data.format = packed but this is not a dflc packed file (no %s magic, "
              "not JSONL either): make one with `dflc pack IN.jsonl -o OUT.dflpack`\n", path,
              DFL_PACKED_MAGIC);
      rc = DFL_EFORMAT;
      break;
    }
    /* otherwise JSONL reports its rows (e.g. "not JSON") */
    /* fall through */
  default:
    if (format == DFL_DATA_PACKED && st.st_size > 0)
      fprintf(log, "%s: note: data.format = %s but this is a JSONL file; reading it as JSONL "
              "(`dflc pack %s -o FILE.dflpack` makes a packed copy that loads faster)\n", path,
              fmtname, path);
    rc = load_jsonl(path, vocab, cap, policy, log, out);
  }
  close(fd);
  return rc;
}

int dfl_data_load(const char *path, int vocab, int cap, dfl_badrow_policy policy, FILE *log,
                  dfl_dataset *out) {
  return dfl_data_load_fmt(path, -1, vocab, cap, policy, log, out);
}

int dfl_data_load_mem(const char *name, const void *buf, size_t len, int vocab, int cap,
                      dfl_badrow_policy policy, FILE *log, dfl_dataset *out) {
  src s = {.mem = buf, .memlen = len};
  return load(&s, name, vocab, cap, policy, log, out);
}
