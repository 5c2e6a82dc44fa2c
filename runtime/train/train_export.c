/*
** train_export.c: exporting a trained drafter and proving the export reloads exactly.
*/
#include "runtime/train/train_export.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/io/export.h"
#include "runtime/io/safetensors.h"

int dfl_train_params_view(const dfl_train_graph *tg, dfl_cpu *c, dfl_ckpt_params *v) {
  int n = tg->drafter.n_params;
  memset(v, 0, sizeof *v);
  v->names = calloc(n ? n : 1, sizeof *v->names);
  v->data = calloc(n ? n : 1, sizeof *v->data);
  v->ndim = calloc(n ? n : 1, sizeof *v->ndim);
  v->shape = calloc((size_t)(n ? n : 1) * 4, sizeof *v->shape);
  if (!v->names || !v->data || !v->ndim || !v->shape) {
    dfl_train_params_view_free(v);
    return DFL_ENOMEM;
  }
  v->n = n;
  for (int i = 0; i < n; i++) {
    int t = tg->drafter.params[i];
    const dfl_tensor *tt = &tg->g.t[t];
    v->names[i] = (char *)tt->name;
    v->data[i] = dfl_cpu_f32(c, t);
    v->ndim[i] = tt->ndim;
    for (int d = 0; d < tt->ndim && d < 4; d++) v->shape[4 * i + d] = tt->shape[d];
  }
  return DFL_OK;
}

void dfl_train_params_view_free(dfl_ckpt_params *v) {
  free(v->names);
  free(v->data);
  free(v->ndim);
  free(v->shape);
  memset(v, 0, sizeof *v);
}

int dfl_train_export_params(const dfl_spec *s, const dfl_ckpt_params *p, const char *dir) {
  char err[1024];
  dfl_st_out *o = calloc(p->n ? p->n : 1, sizeof *o);
  if (!o) return DFL_ENOMEM;
  for (int i = 0; i < p->n; i++) {
    o[i].name = p->names[i];
    o[i].dtype = DFL_ST_F32;    /* the export rounds to bf16 itself */
    o[i].ndim = p->ndim[i];
    for (int d = 0; d < p->ndim[i]; d++) o[i].shape[d] = p->shape[4 * i + d];
    o[i].f32 = p->data[i];
  }
  int rc = dfl_export_drafter(dir, s, o, p->n, err, sizeof err);
  free(o);
  if (rc) fprintf(stderr, "dflc: export to %s: %s\n", dir, err);
  return rc;
}

static int64_t numel_of(const dfl_ckpt_params *p, int i) {
  int64_t n = 1;
  for (int d = 0; d < p->ndim[i]; d++) n *= p->shape[4 * i + d];
  return n;
}

int dfl_train_verify_params(const dfl_spec *s, const dfl_ckpt_params *p, const char *dir) {
  char err[1024];
  dfl_drafter_weights w;
  int rc = dfl_drafter_load(dir, s, &w, err, sizeof err);
  if (rc) {
    fprintf(stderr, "dflc: export check: %s\n", err);
    return rc;
  }
  if (w.n != p->n) {
    fprintf(stderr, "dflc: export check: %s holds %d tensors, the drafter has %d\n", dir, w.n, p->n);
    rc = DFL_ETOL;
  }
  for (int i = 0; i < p->n && rc == DFL_OK; i++) {
    const float *y = dfl_drafter_get(&w, p->names[i]);
    if (!y) {
      fprintf(stderr, "dflc: export check: %s: tensor %s is missing\n", dir, p->names[i]);
      rc = DFL_ETOL;
      break;
    }
    /* The export stores bf16: the reload must be exactly the trained value rounded once. */
    int64_t n = numel_of(p, i);
    for (int64_t k = 0; k < n; k++) {
      float want = dfl_bf16_to_f32(dfl_f32_to_bf16(p->data[i][k]));
      if (memcmp(&want, &y[k], sizeof want)) {
        fprintf(stderr, "dflc: export check: %s: tensor %s element %" PRId64 " reloads as %.9g, trained %.9g "
                "(bf16 %.9g)\n", dir, p->names[i], k, y[k], p->data[i][k], want);
        rc = DFL_ETOL;
        break;
      }
    }
  }
  dfl_drafter_free(&w);
  return rc;
}
