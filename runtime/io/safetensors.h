/*
** safetensors.h: reading and writing the safetensors format (single file, or sharded with a
** model.safetensors.index.json), the format of Hugging Face weights and of dflc exports.
**
** Reading maps the files and validates the header completely before any tensor is touched:
** 8-byte little-endian header length within the file, a JSON object, known dtypes, shapes whose
** byte size matches data_offsets, offsets inside the data area, no two tensors overlapping, and
** no duplicate names (across shards too). Errors name the file and the tensor.
*/
#ifndef DFL_SAFETENSORS_H
#define DFL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  DFL_ST_F64 = 0, DFL_ST_F32, DFL_ST_F16, DFL_ST_BF16,
  DFL_ST_I64, DFL_ST_I32, DFL_ST_I16, DFL_ST_I8, DFL_ST_U8, DFL_ST_BOOL,
  DFL_ST_DTYPE_COUNT
} dfl_st_dtype;

#define DFL_ST_MAX_DIMS 8

typedef struct dfl_st_entry {
  char *name;
  dfl_st_dtype dtype;
  int ndim;
  int64_t shape[DFL_ST_MAX_DIMS];
  int file;                 /* index into dfl_st.files */
  uint64_t begin, end;      /* byte range inside that file's data area */
} dfl_st_entry;

typedef struct dfl_st_file {
  char *path;
  const uint8_t *map;       /* whole file, read-only mapping */
  size_t size;
  uint64_t data_start;      /* 8 + header length */
  int mapped;               /* 1: map is an mmap we own; 0: a caller's buffer (dfl_st_open_buffer) */
} dfl_st_file;

typedef struct dfl_st {
  dfl_st_entry *e;          /* sorted by name (dfl_st_find bisects) */
  int n;
  dfl_st_file *files;
  int nfiles;
} dfl_st;

/* Open PATH: a .safetensors file, or a directory holding model.safetensors or
** model.safetensors.index.json (+ its shards). On error returns a DFL_E* code and writes a
** one-line message ("FILE: tensor NAME: what is wrong") into err. */
int dfl_st_open(dfl_st *st, const char *path, char *err, size_t errlen);
/* Same validation over an in-memory safetensors file (the buffer must outlive st; it is not
** copied). NAME stands for the file in messages. Used by the fuzz harness and by tests. */
int dfl_st_open_buffer(dfl_st *st, const void *buf, size_t size, const char *name, char *err,
                       size_t errlen);
/* Largest header accepted: real headers are a few MB even for thousands of tensors. */
#define DFL_ST_MAX_HEADER (100u * 1000u * 1000u)
void dfl_st_close(dfl_st *st);
const dfl_st_entry *dfl_st_find(const dfl_st *st, const char *name);
int64_t dfl_st_numel(const dfl_st_entry *e);
const char *dfl_st_dtype_name(dfl_st_dtype dt);
/* "[d0, d1, ...]" into buf, truncated to len (for messages about shapes). */
void dfl_st_shape_str(char *buf, size_t len, int ndim, const int64_t *shape);
size_t dfl_st_dtype_size(dfl_st_dtype dt);
const void *dfl_st_data(const dfl_st *st, const dfl_st_entry *e);

/* Convert a tensor's elements (any float or int dtype) into dst (numel elements). */
int dfl_st_read_f32(const dfl_st *st, const dfl_st_entry *e, float *dst);
int dfl_st_read_f64(const dfl_st *st, const dfl_st_entry *e, double *dst);
int dfl_st_read_i32(const dfl_st *st, const dfl_st_entry *e, int32_t *dst);
/* The same conversions, noting in *bad the index of the first element that is NaN or infinite
** (-1: none) while converting, with no second pass over the data. */
int dfl_st_read_f32_scan(const dfl_st *st, const dfl_st_entry *e, float *dst, int64_t *bad);
int dfl_st_read_f64_scan(const dfl_st *st, const dfl_st_entry *e, double *dst, int64_t *bad);
/* F64, F32, F16 or BF16 */
int dfl_st_is_float(dfl_st_dtype dt);

/* Look NAME up and check its shape; on a missing tensor or a shape mismatch, err says
** "FILE: tensor NAME: expected shape [..], found [..]" (or "missing"). */
int dfl_st_expect(const dfl_st *st, const char *name, int ndim, const int64_t *shape,
                  const dfl_st_entry **out, char *err, size_t errlen);

/* --- writing --- */
typedef struct dfl_st_out {
  const char *name;
  dfl_st_dtype dtype;       /* stored dtype: F32, BF16 (round to nearest even), F16, I32 ... */
  int ndim;
  int64_t shape[DFL_ST_MAX_DIMS];
  const float *f32;         /* source for float dtypes */
  const int32_t *i32;       /* source for integer dtypes */
  const void *raw;          /* or: raw bytes already in `dtype` (wins if set) */
} dfl_st_out;

/* Write n tensors to PATH atomically (PATH.tmp, fsync, rename). Metadata: optional key/value
** string pairs (meta[2i], meta[2i+1]), n_meta pairs. The header is space-padded so the data area
** starts 8-byte aligned; tensors are stored contiguously (as Hugging Face's loader requires),
** larger element sizes first, so every tensor is aligned to its element size. Integer sources
** that do not fit the stored dtype are refused. */
int dfl_st_write(const char *path, const dfl_st_out *t, int n, const char *const *meta, int n_meta,
                 char *err, size_t errlen);

/* bf16 helpers (round to nearest even; NaN stays NaN) */
uint16_t dfl_f32_to_bf16(float f);
float dfl_bf16_to_f32(uint16_t h);
float dfl_f16_to_f32(uint16_t h);
uint16_t dfl_f32_to_f16(float f);

#endif
