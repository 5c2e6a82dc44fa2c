/*
** safetensors.c: reader (mmap, full header validation, sharded checkpoints) and atomic writer
** for the safetensors format, plus bf16/f16 conversions.
**
** Format: u64 little-endian header length n, n bytes of JSON header, then the data area. Each
** header entry is {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]} with offsets
** relative to the data area; "__metadata__" is an optional string->string object.
** The reader trusts nothing in the header: everything is checked before an offset is used.
** Host byte order is assumed little-endian (x86-64, aarch64), as the format is.
*/
#include "runtime/io/safetensors.h"
#include "compiler/spec.h"
#include "runtime/io/io_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const dtype_names[DFL_ST_DTYPE_COUNT] = {
  "F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL"};
static const size_t dtype_sizes[DFL_ST_DTYPE_COUNT] = {8, 4, 2, 2, 8, 4, 2, 1, 1, 1};

const char *dfl_st_dtype_name(dfl_st_dtype dt) {
  return (unsigned)dt < DFL_ST_DTYPE_COUNT ? dtype_names[dt] : "?";
}
size_t dfl_st_dtype_size(dfl_st_dtype dt) {
  return (unsigned)dt < DFL_ST_DTYPE_COUNT ? dtype_sizes[dt] : 0;
}

int dfl_io_seterr(char *err, size_t errlen, int code, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return code;
}

/* --- bf16 / f16 --- */

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

uint16_t dfl_f32_to_bf16(float f) {
  uint32_t u = f2u(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);                                             /* nearest even */
  return (uint16_t)(u >> 16);
}

float dfl_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

float dfl_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu;
  if (e == 0x1f) return u2f(sign | 0x7f800000u | (m << 13));   /* inf / NaN (payload kept) */
  if (e == 0) {
    if (m == 0) return u2f(sign);
    float v = (float)m * 0x1p-24f;                              /* subnormal: exact in f32 */
    return sign ? -v : v;
  }
  return u2f(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t dfl_f32_to_f16(float f) {
  uint32_t u = f2u(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);   /* rounds to >= 65520: inf */
  if (a < 0x38800000u) {                                     /* below 2^-14: f16 subnormal */
    if (a < 0x33000000u) return (uint16_t)sign;              /* below 2^-25: rounds to 0 */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;                                /* m * 2^(e-150) in units of 2^-24 */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    return (uint16_t)(sign | q);
  }
  uint32_t r = a - 0x38000000u;                              /* rebias exponent 127 -> 15 */
  r += 0xfffu + ((r >> 13) & 1u);                            /* nearest even on 13 dropped bits */
  return (uint16_t)(sign | (r >> 13));
}

/* --- header validation --- */

static int parse_dtype(const char *s, dfl_st_dtype *dt) {
  for (int i = 0; i < DFL_ST_DTYPE_COUNT; i++)
    if (!strcmp(s, dtype_names[i])) { *dt = (dfl_st_dtype)i; return 1; }
  return 0;
}

void dfl_st_shape_str(char *buf, size_t len, int ndim, const int64_t *shape) {
  size_t o = 0;
  o += (size_t)snprintf(buf + o, len - o, "[");
  for (int i = 0; i < ndim && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (o < len) snprintf(buf + o, len - o, "]");
}

static int cmp_begin(const void *a, const void *b) {
  const dfl_st_entry *x = *(dfl_st_entry *const *)a, *y = *(dfl_st_entry *const *)b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Append the entries of file st->files[fi] (already mapped) to st->e. */
static int parse_file(dfl_st *st, int fi, char *err, size_t errlen) {
  dfl_st_file *f = &st->files[fi];
  const char *P = f->path;
  if (f->size < 8)
    return dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: not a safetensors file (%zu bytes, shorter than "
                  "the 8-byte header length)", P, f->size);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = (n << 8) | f->map[i];
  if (n > DFL_ST_MAX_HEADER)
    return dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: header length %llu is over the %u-byte limit "
                  "(corrupt file, or not safetensors)", P, (unsigned long long)n, DFL_ST_MAX_HEADER);
  if (n > f->size - 8)
    return dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: header length %llu runs past the end of the "
                  "file (%zu bytes): truncated download?", P, (unsigned long long)n, f->size);
  f->data_start = 8 + n;
  uint64_t data_size = f->size - f->data_start;

  json_error_t je;
  json_t *root = json_loadb((const char *)f->map + 8, (size_t)n, JSON_REJECT_DUPLICATES, &je);
  if (!root)
    return dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: header is not valid JSON (%s, at byte %d of "
                  "the header)", P, je.text, je.position);
  if (!json_is_object(root)) {
    json_decref(root);
    return dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: header is not a JSON object", P);
  }
  size_t cnt = json_object_size(root);
  dfl_st_entry *ne = realloc(st->e, (size_t)(st->n + (int)cnt + 1) * sizeof *ne);
  if (!ne) { json_decref(root); return dfl_io_seterr(err, errlen, DFL_ENOMEM, "%s: out of memory", P); }
  st->e = ne;
  int first = st->n, rc = DFL_OK;
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (!strcmp(key, "__metadata__")) {
      const char *mk;
      json_t *mv;
      if (!json_is_object(v)) {
        rc = dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: __metadata__ is not an object", P);
        break;
      }
      json_object_foreach(v, mk, mv) if (!json_is_string(mv)) {
        rc = dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: __metadata__ value for \"%s\" is not a string",
                    P, mk);
        break;
      }
      if (rc) break;
      continue;
    }
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!json_is_object(v) || !json_is_string(jd) || !json_is_array(js) || !json_is_array(jo)) {
      rc = dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: tensor %s: entry must be an object with a string "
                  "\"dtype\", an array \"shape\" and an array \"data_offsets\"", P, key);
      break;
    }
    dfl_st_entry e;
    memset(&e, 0, sizeof e);
    e.file = fi;
    if (!parse_dtype(json_string_value(jd), &e.dtype)) {
      rc = dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: tensor %s: dtype %s is not supported (dflc reads "
                  "F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL; convert the checkpoint to bf16)", P,
                  key, json_string_value(jd));
      break;
    }
    size_t nd = json_array_size(js);
    if (nd > DFL_ST_MAX_DIMS) {
      rc = dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: tensor %s: %zu dimensions (at most %d supported)",
                  P, key, nd, DFL_ST_MAX_DIMS);
      break;
    }
    e.ndim = (int)nd;
    int64_t numel = 1;
    for (size_t i = 0; i < nd && !rc; i++) {
      json_t *d = json_array_get(js, i);
      if (!json_is_integer(d) || json_integer_value(d) < 0)
        rc = dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: tensor %s: shape entry %zu is not a "
                    "non-negative integer", P, key, i);
      else {
        e.shape[i] = (int64_t)json_integer_value(d);
        if (__builtin_mul_overflow(numel, e.shape[i], &numel))
          rc = dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: tensor %s: shape overflows (element count "
                      "above 2^63)", P, key);
      }
    }
    if (rc) break;
    int64_t nbytes;
    if (__builtin_mul_overflow(numel, (int64_t)dtype_sizes[e.dtype], &nbytes)) {
      rc = dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: tensor %s: shape overflows (byte size above 2^63)",
                  P, key);
      break;
    }
    json_t *b0 = json_array_get(jo, 0), *b1 = json_array_get(jo, 1);
    if (json_array_size(jo) != 2 || !json_is_integer(b0) || !json_is_integer(b1) ||
        json_integer_value(b0) < 0 || json_integer_value(b1) < json_integer_value(b0)) {
      rc = dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: tensor %s: data_offsets must be [begin, end] "
                  "with 0 <= begin <= end", P, key);
      break;
    }
    e.begin = (uint64_t)json_integer_value(b0);
    e.end = (uint64_t)json_integer_value(b1);
    if (e.end > data_size) {
      rc = dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: tensor %s: data_offsets [%llu, %llu] run past the "
                  "data area (%llu bytes): truncated file?", P, key, (unsigned long long)e.begin,
                  (unsigned long long)e.end, (unsigned long long)data_size);
      break;
    }
    if (e.end - e.begin != (uint64_t)nbytes) {
      char sb[256];
      dfl_st_shape_str(sb, sizeof sb, e.ndim, e.shape);
      rc = dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: tensor %s: size mismatch: %s %s needs %lld bytes, "
                  "data_offsets span %llu", P, key, dtype_names[e.dtype], sb, (long long)nbytes,
                  (unsigned long long)(e.end - e.begin));
      break;
    }
    e.name = strdup(key);
    if (!e.name) { rc = dfl_io_seterr(err, errlen, DFL_ENOMEM, "%s: out of memory", P); break; }
    st->e[st->n++] = e;
  }
  json_decref(root);
  if (rc) return rc;

  /* Overlap check: sort this file's ranges by begin (empty tensors occupy nothing). */
  int m = st->n - first;
  dfl_st_entry **by = malloc((size_t)(m ? m : 1) * sizeof *by);
  if (!by) return dfl_io_seterr(err, errlen, DFL_ENOMEM, "%s: out of memory", P);
  int k = 0;
  for (int i = first; i < st->n; i++)
    if (st->e[i].end > st->e[i].begin) by[k++] = &st->e[i];
  qsort(by, (size_t)k, sizeof *by, cmp_begin);
  for (int i = 1; i < k && !rc; i++)
    if (by[i]->begin < by[i - 1]->end)
      rc = dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: tensor %s: bytes [%llu, %llu) overlap tensor %s "
                  "[%llu, %llu)", P, by[i]->name, (unsigned long long)by[i]->begin,
                  (unsigned long long)by[i]->end, by[i - 1]->name,
                  (unsigned long long)by[i - 1]->begin, (unsigned long long)by[i - 1]->end);
  free(by);
  return rc;
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(((const dfl_st_entry *)a)->name, ((const dfl_st_entry *)b)->name);
}

/* Sort entries by name (dfl_st_find bisects) and refuse a name held twice (only possible across
** shards: within one header the JSON parser already refuses duplicate keys). */
static int finish(dfl_st *st, char *err, size_t errlen) {
  if (st->n > 1) qsort(st->e, (size_t)st->n, sizeof *st->e, cmp_name);
  for (int i = 1; i < st->n; i++)
    if (!strcmp(st->e[i].name, st->e[i - 1].name))
      return dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: tensor %s: also present in %s (a tensor must be "
                    "in exactly one shard)", st->files[st->e[i].file].path, st->e[i].name,
                    st->files[st->e[i - 1].file].path);
  return DFL_OK;
}

static int add_file(dfl_st *st, const char *path, char *err, size_t errlen) {
  dfl_st_file *nf = realloc(st->files, (size_t)(st->nfiles + 1) * sizeof *nf);
  if (!nf) return dfl_io_seterr(err, errlen, DFL_ENOMEM, "%s: out of memory", path);
  st->files = nf;
  dfl_st_file *f = &st->files[st->nfiles];
  memset(f, 0, sizeof *f);
  f->path = strdup(path);
  if (!f->path) return dfl_io_seterr(err, errlen, DFL_ENOMEM, "%s: out of memory", path);
  st->nfiles++;
  char why[DFL_PATH_MAX + 64];
  if (dfl_file_why(path, why, sizeof why)) return dfl_io_seterr(err, errlen, DFL_EIO, "%s", why);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return dfl_io_seterr(err, errlen, DFL_EIO, "%s: cannot open (%s)", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return dfl_io_seterr(err, errlen, DFL_EIO, "%s: not a regular file", path);
  }
  f->size = (size_t)sb.st_size;
  if (f->size > 0) {
    void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      int e = errno;
      close(fd);
      return dfl_io_seterr(err, errlen, DFL_EIO, "%s: cannot map (%s)", path, strerror(e));
    }
    f->map = m;
    f->mapped = 1;
  }
  close(fd);
  return parse_file(st, st->nfiles - 1, err, errlen);
}

static int has_suffix(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

/* A sharded checkpoint: {"metadata": {...}, "weight_map": {tensor: shard file}}. */
static int open_index(dfl_st *st, const char *ipath, char *err, size_t errlen) {
  json_error_t je;
  char why[DFL_PATH_MAX + 64];
  if (dfl_file_why(ipath, why, sizeof why)) return dfl_io_seterr(err, errlen, DFL_EIO, "%s", why);
  json_t *root = json_load_file(ipath, JSON_REJECT_DUPLICATES, &je);
  if (!root) {
    if (access(ipath, R_OK) != 0)
      return dfl_io_seterr(err, errlen, DFL_EIO, "%s: cannot open (%s)", ipath, strerror(errno));
    return dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s:%d: not valid JSON (%s)", ipath, je.line, je.text);
  }
  json_t *wm = json_object_get(root, "weight_map");
  int rc = DFL_OK;
  if (!json_is_object(root) || !json_is_object(wm) || json_object_size(wm) == 0) {
    json_decref(root);
    return dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: no \"weight_map\" object (expected {\"weight_map\": "
                  "{tensor: shard file}})", ipath);
  }
  char dir[DFL_PATH_MAX];
  snprintf(dir, sizeof dir, "%s", ipath);
  char *slash = strrchr(dir, '/');
  if (slash) slash[1] = 0; else dir[0] = 0;

  const char *key;
  json_t *v;
  json_object_foreach(wm, key, v) {
    if (!json_is_string(v)) {
      rc = dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: tensor %s: shard name is not a string", ipath, key);
      break;
    }
    const char *shard = json_string_value(v);
    if (!*shard || shard[0] == '/' || strstr(shard, "..")) {
      rc = dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: tensor %s: shard \"%s\" must be a file name in "
                  "the checkpoint directory", ipath, key, shard);
      break;
    }
    char full[2 * DFL_PATH_MAX];
    snprintf(full, sizeof full, "%s%s", dir, shard);
    int seen = 0;
    for (int i = 0; i < st->nfiles && !seen; i++) seen = !strcmp(st->files[i].path, full);
    if (seen) continue;
    if (access(full, F_OK) != 0) {
      rc = dfl_io_seterr(err, errlen, DFL_EIO, "%s: tensor %s: shard %s is missing (%s)", ipath, key, full,
                  strerror(errno));
      break;
    }
    if ((rc = add_file(st, full, err, errlen))) break;
  }
  if (!rc) rc = finish(st, err, errlen);
  /* Every mapped name must be in the shard the index names. */
  if (!rc) json_object_foreach(wm, key, v) {
    const dfl_st_entry *e = dfl_st_find(st, key);
    const char *shard = json_string_value(v);
    if (!e) {
      rc = dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: tensor %s: the index maps it to %s, which does not "
                  "hold it", ipath, key, shard);
      break;
    }
    if (!has_suffix(st->files[e->file].path, shard)) {
      rc = dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: tensor %s: the index maps it to %s, but it is in %s",
                  ipath, key, shard, st->files[e->file].path);
      break;
    }
  }
  /* ... and every tensor of a shard in the index: a shard from another download does not agree. */
  for (int i = 0; !rc && i < st->n; i++)
    if (!json_object_get(wm, st->e[i].name))
      rc = dfl_io_seterr(err, errlen, DFL_EFORMAT, "%s: tensor %s is in %s but not in the index's weight_map: "
                  "the shards and the index disagree (a shard of another download?)", ipath, st->e[i].name,
                  st->files[st->e[i].file].path);
  json_decref(root);
  return rc;
}

int dfl_st_open(dfl_st *st, const char *path, char *err, size_t errlen) {
  memset(st, 0, sizeof *st);
  if (err && errlen) err[0] = 0;
  struct stat sb;
  if (stat(path, &sb) != 0)
    return dfl_io_seterr(err, errlen, DFL_EIO, "%s: cannot open (%s)", path, strerror(errno));
  int rc;
  if (S_ISDIR(sb.st_mode)) {
    char p[2 * DFL_PATH_MAX];
    /* lstat, not access: a dangling or looping link is there, and is reported as what it is */
    struct stat lsb;
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", path);
    if (lstat(p, &lsb) == 0) {
      rc = open_index(st, p, err, errlen);
    } else {
      snprintf(p, sizeof p, "%s/model.safetensors", path);
      if (lstat(p, &lsb) != 0) {
        rc = dfl_io_seterr(err, errlen, DFL_EIO, "%s: no model.safetensors or model.safetensors.index.json "
                    "in this directory", path);
      } else {
        rc = add_file(st, p, err, errlen);
        if (!rc) rc = finish(st, err, errlen);
      }
    }
  } else if (has_suffix(path, ".json")) {
    rc = open_index(st, path, err, errlen);
  } else {
    rc = add_file(st, path, err, errlen);
    if (!rc) rc = finish(st, err, errlen);
  }
  if (rc) dfl_st_close(st);
  return rc;
}

int dfl_st_open_buffer(dfl_st *st, const void *buf, size_t size, const char *name, char *err,
                       size_t errlen) {
  memset(st, 0, sizeof *st);
  if (err && errlen) err[0] = 0;
  st->files = calloc(1, sizeof *st->files);
  if (!st->files || !(st->files[0].path = strdup(name ? name : "<buffer>"))) {
    dfl_st_close(st);
    return dfl_io_seterr(err, errlen, DFL_ENOMEM, "out of memory");
  }
  st->nfiles = 1;
  st->files[0].map = buf;
  st->files[0].size = size;
  int rc = parse_file(st, 0, err, errlen);
  if (!rc) rc = finish(st, err, errlen);
  if (rc) dfl_st_close(st);
  return rc;
}

void dfl_st_close(dfl_st *st) {
  for (int i = 0; i < st->n; i++) free(st->e[i].name);
  for (int i = 0; i < st->nfiles; i++) {
    if (st->files[i].mapped && st->files[i].map) munmap((void *)st->files[i].map, st->files[i].size);
    free(st->files[i].path);
  }
  free(st->e);
  free(st->files);
  memset(st, 0, sizeof *st);
}

const dfl_st_entry *dfl_st_find(const dfl_st *st, const char *name) {
  int lo = 0, hi = st->n - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2, c = strcmp(st->e[mid].name, name);
    if (!c) return &st->e[mid];
    if (c < 0) lo = mid + 1; else hi = mid - 1;
  }
  return NULL;
}

int64_t dfl_st_numel(const dfl_st_entry *e) {
  int64_t n = 1;
  for (int i = 0; i < e->ndim; i++) n *= e->shape[i];   /* validated not to overflow */
  return n;
}

const void *dfl_st_data(const dfl_st *st, const dfl_st_entry *e) {
  const dfl_st_file *f = &st->files[e->file];
  return f->map + f->data_start + e->begin;
}

/* Element i of e as double; data may be unaligned, hence memcpy. */
static double elem(const uint8_t *p, dfl_st_dtype dt, int64_t i) {
  switch (dt) {
  case DFL_ST_F64: { double v; memcpy(&v, p + 8 * i, 8); return v; }
  case DFL_ST_F32: { float v; memcpy(&v, p + 4 * i, 4); return v; }
  case DFL_ST_F16: { uint16_t v; memcpy(&v, p + 2 * i, 2); return dfl_f16_to_f32(v); }
  case DFL_ST_BF16: { uint16_t v; memcpy(&v, p + 2 * i, 2); return dfl_bf16_to_f32(v); }
  case DFL_ST_I64: { int64_t v; memcpy(&v, p + 8 * i, 8); return (double)v; }
  case DFL_ST_I32: { int32_t v; memcpy(&v, p + 4 * i, 4); return v; }
  case DFL_ST_I16: { int16_t v; memcpy(&v, p + 2 * i, 2); return v; }
  case DFL_ST_I8: return (int8_t)p[i];
  case DFL_ST_U8: return p[i];
  case DFL_ST_BOOL: return p[i] != 0;
  default: return 0;
  }
}

/* The conversions note the first element that is NaN or infinite as they go (no second pass):
** a corrupt checkpoint must never reach training. Integer dtypes are always finite. */
int dfl_st_read_f32_scan(const dfl_st *st, const dfl_st_entry *e, float *dst, int64_t *bad) {
  const uint8_t *p = dfl_st_data(st, e);
  int64_t n = dfl_st_numel(e), first = -1;
  if (e->dtype == DFL_ST_BF16) {   /* the common case: keep it a tight loop */
    for (int64_t i = 0; i < n; i++) {
      uint16_t h;
      memcpy(&h, p + 2 * i, 2);
      if ((h & 0x7f80u) == 0x7f80u && first < 0) first = i;
      dst[i] = dfl_bf16_to_f32(h);
    }
  } else if (e->dtype == DFL_ST_F32) {
    for (int64_t i = 0; i < n; i++) {
      uint32_t u;
      memcpy(&u, p + 4 * i, 4);
      if ((u & 0x7f800000u) == 0x7f800000u && first < 0) first = i;
      memcpy(&dst[i], &u, 4);
    }
  } else {
    for (int64_t i = 0; i < n; i++) {   /* an F64 beyond the f32 range is infinite once converted */
      dst[i] = (float)elem(p, e->dtype, i);
      if (!isfinite(dst[i]) && first < 0) first = i;
    }
  }
  if (bad) *bad = first;
  return DFL_OK;
}

int dfl_st_read_f64_scan(const dfl_st *st, const dfl_st_entry *e, double *dst, int64_t *bad) {
  const uint8_t *p = dfl_st_data(st, e);
  int64_t n = dfl_st_numel(e), first = -1;
  for (int64_t i = 0; i < n; i++) {
    dst[i] = elem(p, e->dtype, i);
    if (!isfinite(dst[i]) && first < 0) first = i;
  }
  if (bad) *bad = first;
  return DFL_OK;
}

int dfl_st_read_f32(const dfl_st *st, const dfl_st_entry *e, float *dst) { return dfl_st_read_f32_scan(st, e, dst, NULL); }

int dfl_st_read_f64(const dfl_st *st, const dfl_st_entry *e, double *dst) { return dfl_st_read_f64_scan(st, e, dst, NULL); }

int dfl_st_is_float(dfl_st_dtype dt) { return dt == DFL_ST_F64 || dt == DFL_ST_F32 || dt == DFL_ST_F16 || dt == DFL_ST_BF16; }

/* Integers convert exactly; a value outside int32 or a non-integral float is refused. */
int dfl_st_read_i32(const dfl_st *st, const dfl_st_entry *e, int32_t *dst) {
  const uint8_t *p = dfl_st_data(st, e);
  int64_t n = dfl_st_numel(e);
  for (int64_t i = 0; i < n; i++) {
    if (e->dtype == DFL_ST_I64) {
      int64_t v;
      memcpy(&v, p + 8 * i, 8);
      if (v < INT32_MIN || v > INT32_MAX) return DFL_EFORMAT;
      dst[i] = (int32_t)v;
      continue;
    }
    double v = elem(p, e->dtype, i);
    if (!(v >= INT32_MIN && v <= INT32_MAX) || v != floor(v)) return DFL_EFORMAT;
    dst[i] = (int32_t)v;
  }
  return DFL_OK;
}

int dfl_st_expect(const dfl_st *st, const char *name, int ndim, const int64_t *shape,
                  const dfl_st_entry **out, char *err, size_t errlen) {
  const char *where = st->nfiles ? st->files[0].path : "?";
  const dfl_st_entry *e = dfl_st_find(st, name);
  if (out) *out = e;
  if (!e) {
    char dir[DFL_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", where);
    char *slash = strrchr(dir, '/');
    if (slash && st->nfiles > 1) *slash = 0;   /* sharded: name the checkpoint directory */
    return dfl_io_seterr(err, errlen, DFL_ESHAPE, "%s: tensor %s: missing (the weights %s has no tensor %s)",
                  dir, name, st->nfiles > 1 ? "directory" : "file", name);
  }
  int ok = e->ndim == ndim;
  for (int i = 0; ok && i < ndim; i++) ok = e->shape[i] == shape[i];
  if (!ok) {
    char a[256], b[256];
    dfl_st_shape_str(a, sizeof a, ndim, shape);
    dfl_st_shape_str(b, sizeof b, e->ndim, e->shape);
    return dfl_io_seterr(err, errlen, DFL_ESHAPE, "%s: tensor %s: expected shape %s, found %s",
                  st->files[e->file].path, name, a, b);
  }
  return DFL_OK;
}

/* --- writer --- */

static int cmp_out(const void *a, const void *b) {
  /* Larger elements first, then input order: contiguous tensors that are all naturally aligned. */
  const dfl_st_out *const *x = a, *const *y = b;
  size_t sx = dtype_sizes[(*x)->dtype], sy = dtype_sizes[(*y)->dtype];
  if (sx != sy) return sx > sy ? -1 : 1;
  return *x < *y ? -1 : *x > *y;
}

/* Convert one tensor to its stored bytes in buf. */
static int encode(const dfl_st_out *t, int64_t n, uint8_t *buf, char *err, size_t errlen,
                  const char *path) {
  size_t es = dtype_sizes[t->dtype];
  if (t->raw) { memcpy(buf, t->raw, (size_t)n * es); return DFL_OK; }
  int isf = t->dtype <= DFL_ST_BF16;
  if (isf ? !t->f32 : !t->i32)
    return dfl_io_seterr(err, errlen, DFL_ERR, "%s: tensor %s: no %s source data given", path, t->name,
                  isf ? "f32" : "i32");
  for (int64_t i = 0; i < n; i++) {
    uint8_t *q = buf + (size_t)i * es;
    if (isf) {
      float v = t->f32[i];
      if (t->dtype == DFL_ST_F64) { double d = v; memcpy(q, &d, 8); }
      else if (t->dtype == DFL_ST_F32) memcpy(q, &v, 4);
      else { uint16_t h = t->dtype == DFL_ST_F16 ? dfl_f32_to_f16(v) : dfl_f32_to_bf16(v); memcpy(q, &h, 2); }
      continue;
    }
    int32_t v = t->i32[i];
    int64_t lo = INT32_MIN, hi = INT32_MAX;
    if (t->dtype == DFL_ST_I16) { lo = INT16_MIN; hi = INT16_MAX; }
    else if (t->dtype == DFL_ST_I8) { lo = INT8_MIN; hi = INT8_MAX; }
    else if (t->dtype == DFL_ST_U8) { lo = 0; hi = 255; }
    else if (t->dtype == DFL_ST_BOOL) { lo = 0; hi = 1; }
    if (v < lo || v > hi)
      return dfl_io_seterr(err, errlen, DFL_ERR, "%s: tensor %s: value %d at element %lld does not fit %s",
                    path, t->name, v, (long long)i, dtype_names[t->dtype]);
    switch (t->dtype) {
    case DFL_ST_I64: { int64_t w = v; memcpy(q, &w, 8); break; }
    case DFL_ST_I32: memcpy(q, &v, 4); break;
    case DFL_ST_I16: { int16_t w = (int16_t)v; memcpy(q, &w, 2); break; }
    default: q[0] = (uint8_t)v; break;
    }
  }
  return DFL_OK;
}

int dfl_st_write(const char *path, const dfl_st_out *t, int n, const char *const *meta, int n_meta,
                 char *err, size_t errlen) {
  if (err && errlen) err[0] = 0;
  int rc = DFL_OK;
  const dfl_st_out **ord = malloc((size_t)(n > 0 ? n : 1) * sizeof *ord);
  json_t *root = json_object();
  char *hdr = NULL;
  FILE *f = NULL;
  uint8_t *buf = NULL;
  char tmp[2 * DFL_PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  if (!ord || !root) { rc = dfl_io_seterr(err, errlen, DFL_ENOMEM, "%s: out of memory", path); goto done; }
  for (int i = 0; i < n; i++) {
    if ((unsigned)t[i].dtype >= DFL_ST_DTYPE_COUNT || t[i].ndim < 0 || t[i].ndim > DFL_ST_MAX_DIMS ||
        !t[i].name || !strcmp(t[i].name, "__metadata__")) {
      rc = dfl_io_seterr(err, errlen, DFL_ERR, "%s: tensor %s: bad name, dtype or rank", path,
                  t[i].name ? t[i].name : "(null)");
      goto done;
    }
    ord[i] = &t[i];
  }
  qsort(ord, (size_t)n, sizeof *ord, cmp_out);
  if (n_meta > 0) {
    json_t *m = json_object();
    for (int i = 0; i < n_meta; i++) json_object_set_new(m, meta[2 * i], json_string(meta[2 * i + 1]));
    json_object_set_new(root, "__metadata__", m);
  }
  uint64_t off = 0, maxbytes = 0;
  for (int i = 0; i < n; i++) {
    const dfl_st_out *o = ord[i];
    json_t *e = json_object(), *sh = json_array(), *of = json_array();
    int64_t numel = 1;
    for (int d = 0; d < o->ndim; d++) {
      if (o->shape[d] < 0 || __builtin_mul_overflow(numel, o->shape[d], &numel)) {
        json_decref(e); json_decref(sh); json_decref(of);
        rc = dfl_io_seterr(err, errlen, DFL_ERR, "%s: tensor %s: bad shape", path, o->name);
        goto done;
      }
      json_array_append_new(sh, json_integer(o->shape[d]));
    }
    uint64_t bytes = (uint64_t)numel * dtype_sizes[o->dtype];
    json_array_append_new(of, json_integer((json_int_t)off));
    json_array_append_new(of, json_integer((json_int_t)(off + bytes)));
    json_object_set_new(e, "dtype", json_string(dtype_names[o->dtype]));
    json_object_set_new(e, "shape", sh);
    json_object_set_new(e, "data_offsets", of);
    if (json_object_get(root, o->name)) {
      json_decref(e);
      rc = dfl_io_seterr(err, errlen, DFL_ERR, "%s: tensor %s: given twice", path, o->name);
      goto done;
    }
    json_object_set_new(root, o->name, e);
    off += bytes;
    if (bytes > maxbytes) maxbytes = bytes;
  }
  hdr = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (!hdr) { rc = dfl_io_seterr(err, errlen, DFL_ENOMEM, "%s: out of memory", path); goto done; }
  size_t hl = strlen(hdr), padded = (hl + 7) & ~(size_t)7;   /* data area starts 8-aligned */
  f = fopen(tmp, "wb");
  if (!f) { rc = dfl_io_seterr(err, errlen, DFL_EIO, "%s: cannot create (%s)", tmp, strerror(errno)); goto done; }
  uint8_t len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
  int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(hdr, 1, hl, f) == hl;
  for (size_t i = hl; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
  buf = malloc(maxbytes ? (size_t)maxbytes : 1);
  if (!buf) { rc = dfl_io_seterr(err, errlen, DFL_ENOMEM, "%s: out of memory", path); goto done; }
  for (int i = 0; ok && i < n; i++) {
    int64_t numel = 1;
    for (int d = 0; d < ord[i]->ndim; d++) numel *= ord[i]->shape[d];
    if ((rc = encode(ord[i], numel, buf, err, errlen, path))) goto done;
    size_t bytes = (size_t)numel * dtype_sizes[ord[i]->dtype];
    ok = fwrite(buf, 1, bytes, f) == bytes;
  }
  ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
  if (fclose(f) != 0) ok = 0;
  f = NULL;
  if (!ok) { rc = dfl_io_seterr(err, errlen, DFL_EIO, "%s: write failed (%s)", tmp, strerror(errno)); goto done; }
  if (rename(tmp, path) != 0) {
    rc = dfl_io_seterr(err, errlen, DFL_EIO, "%s: cannot rename into place (%s)", path, strerror(errno));
    goto done;
  }
  /* Make the rename itself durable. */
  char dir[2 * DFL_PATH_MAX];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0; else snprintf(dir, sizeof dir, ".");
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) { (void)fsync(dfd); close(dfd); }
done:
  if (f) fclose(f);
  if (rc) unlink(tmp);
  free(buf);
  free(hdr);
  json_decref(root);
  free(ord);
  return rc;
}
