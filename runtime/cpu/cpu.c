/*
** cpu.c: storage and dispatch of the CPU reference backend.
**
** The numeric kernels are written once in cpu_kernels.inc and compiled twice (cpu_f32.c with
** float, cpu_f64.c with double), so the f64 gradient checks exercise exactly the code the f32
** training path runs.
*/
#include "runtime/cpu/cpu.h"
#include "runtime/cpu/cpu_internal.h"
#include "compiler/plan.h"
#include "compiler/status.h"

#include <stdlib.h>
#include <string.h>

/* f8e4m3 is stored as its values, like bf16: the oracle computes on exactly what the GPU stores. */
static int is_float(dfl_dtype d) {
  return d == DFL_F32 || d == DFL_BF16 || d == DFL_F16 || d == DFL_F64 || d == DFL_F8E4M3;
}

size_t dfl_cpu_elem_size(const dfl_tensor *t, int f64) { return is_float(t->dtype) ? (f64 ? 8 : 4) : 4; }

static void *own(dfl_cpu *c, size_t bytes) {
  void *p = calloc(1, bytes ? bytes : 1);
  if (!p) return NULL;
  c->owned[c->n_owned++] = p;
  return p;
}

int dfl_cpu_init(dfl_cpu *c, const dfl_graph *g, const struct dfl_plan *plan, int f64) {
  memset(c, 0, sizeof *c);
  c->g = g;
  c->f64 = f64;
  c->buf = calloc((size_t)g->nt + 1, sizeof *c->buf);
  c->owned = calloc((size_t)g->nt + 2, sizeof *c->owned);
  if (!c->buf || !c->owned) goto oom;
  if (plan) {
    if (plan->nt != g->nt) {
      fprintf(stderr, "dflc: cpu backend: the plan has %d tensors, the graph %d (plan built for another graph?)\n", plan->nt, g->nt);
      dfl_cpu_free(c);
      return DFL_ERR;
    }
    c->arena_bytes = (size_t)plan->arena_bytes;
    c->arena = own(c, c->arena_bytes);
    if (!c->arena) {
      dfl_plan_oom(stderr, "cpu backend", plan->arena_bytes, plan);
      dfl_cpu_free(c);
      return DFL_ENOMEM;
    }
  }
  for (int i = 0; i < g->nt; i++) {
    const dfl_tensor *t = &g->t[i];
    size_t bytes = (size_t)dfl_tensor_numel(t) * dfl_cpu_elem_size(t, f64);
    if (plan && plan->offset[i] >= 0) {
      if ((size_t)plan->offset[i] + bytes > c->arena_bytes) {
        fprintf(stderr, "dflc: cpu backend: tensor %s (%zu bytes at offset %lld) lies outside the %zu-byte arena\n",
                t->name, bytes, (long long)plan->offset[i], c->arena_bytes);
        dfl_cpu_free(c);
        return DFL_ERR;
      }
      c->buf[i] = (char *)c->arena + plan->offset[i];
    } else {
      if (plan && t->kind == DFL_T_ACT) {
        fprintf(stderr, "dflc: cpu backend: the plan gives activation %s no offset\n", t->name);
        dfl_cpu_free(c);
        return DFL_ERR;
      }
      c->buf[i] = own(c, bytes);
      if (!c->buf[i]) {
        char who[DFL_NAME_MAX + 64];
        snprintf(who, sizeof who, "cpu backend (tensor %s)", t->name);
        dfl_plan_oom(stderr, who, (int64_t)bytes, NULL);
        dfl_cpu_free(c);
        return DFL_ENOMEM;
      }
    }
  }
  return DFL_OK;
oom:
  fprintf(stderr, "dflc: cpu backend: out of memory allocating tensors\n");
  dfl_cpu_free(c);
  return DFL_ENOMEM;
}

/* Bytes of tensor i in dfl_cpu_unshared's private copy: its elements, rounded up to 64. */
static size_t priv_bytes(const dfl_cpu *c, int i) {
  return ((size_t)dfl_tensor_numel(&c->g->t[i]) * dfl_cpu_elem_size(&c->g->t[i], c->f64) + 63) / 64 * 64;
}

int dfl_cpu_unshared(dfl_cpu *c, const struct dfl_plan *plan, int on) {
  const dfl_graph *g = c->g;
  if (!on) {
    if (c->planned_buf) memcpy(c->buf, c->planned_buf, sizeof *c->buf * (size_t)g->nt);
    free(c->planned_buf);
    free(c->priv);
    c->planned_buf = c->priv = NULL;
    return DFL_OK;
  }
  if (!plan || c->planned_buf) return DFL_OK;
  size_t total = 0;
  for (int i = 0; i < g->nt; i++)
    if (plan->first[i] >= 0 && plan->offset[i] >= 0)
      total += priv_bytes(c, i);
  c->planned_buf = malloc(sizeof *c->buf * (size_t)(g->nt + 1));
  c->priv = calloc(1, total ? total : 1); /* 16-byte aligned, the tensors at 64-byte steps */
  if (!c->planned_buf || !c->priv) {
    free(c->planned_buf); free(c->priv);
    c->planned_buf = c->priv = NULL;
    return DFL_ENOMEM;
  }
  memcpy(c->planned_buf, c->buf, sizeof *c->buf * (size_t)g->nt);
  size_t off = 0;
  for (int i = 0; i < g->nt; i++)
    if (plan->first[i] >= 0 && plan->offset[i] >= 0) {
      c->buf[i] = (char *)c->priv + off;
      off += priv_bytes(c, i);
    }
  return DFL_OK;
}

void dfl_cpu_free(dfl_cpu *c) {
  dfl_cpu_unshared(c, NULL, 0);
  if (c->owned)
    for (int i = 0; i < c->n_owned; i++) free(c->owned[i]);
  free(c->owned);
  free(c->buf);
  memset(c, 0, sizeof *c);
}

int dfl_cpu_run_op(dfl_cpu *c, int op_index) {
  const dfl_op *op = &c->g->ops[op_index];
  return c->f64 ? dfl_cpu_exec_f64(c, op) : dfl_cpu_exec_f32(c, op);
}

int dfl_cpu_run(dfl_cpu *c, unsigned phase_mask) {
  for (int i = 0; i < c->g->nops; i++) {
    if (!(phase_mask & (1u << c->g->ops[i].phase))) continue;
    int rc = dfl_cpu_run_op(c, i);
    if (rc != DFL_OK) {
      fprintf(stderr, "dflc: cpu backend: op %d (%s, %s) failed\n", i, dfl_opcode_name(c->g->ops[i].code), c->g->ops[i].label);
      return rc;
    }
  }
  return DFL_OK;
}

void dfl_cpu_quant_rows(dfl_cpu *c, int x, int s) {
  if (c->f64) dfl_cpu_quant_rows_f64(c, x, s);
  else dfl_cpu_quant_rows_f32(c, x, s);
}

void dfl_cpu_init_masters(dfl_cpu *c) {
  const dfl_graph *g = c->g;
  for (int i = 0; i < g->nt; i++) {
    const dfl_tensor *t = &g->t[i];
    if (t->kind != DFL_T_PARAM || t->master < 0) continue;
    memcpy(c->buf[t->master], c->buf[i], (size_t)dfl_tensor_numel(t) * dfl_cpu_elem_size(t, c->f64));
  }
}

float *dfl_cpu_f32(dfl_cpu *c, int t) { return (float *)c->buf[t]; }
double *dfl_cpu_f64(dfl_cpu *c, int t) { return (double *)c->buf[t]; }
int32_t *dfl_cpu_i32(dfl_cpu *c, int t) { return (int32_t *)c->buf[t]; }

/* Copies convert between the caller's type and the tensor's storage; integer tensors round-trip
** through the float value (ids are far below 2^24). */
void dfl_cpu_set_f(dfl_cpu *c, int t, const float *src, int64_t n) {
  const dfl_tensor *T = &c->g->t[t];
  if (!is_float(T->dtype)) for (int64_t i = 0; i < n; i++) ((int32_t *)c->buf[t])[i] = (int32_t)src[i];
  else if (c->f64) for (int64_t i = 0; i < n; i++) ((double *)c->buf[t])[i] = src[i];
  else memcpy(c->buf[t], src, (size_t)n * sizeof *src);
}

void dfl_cpu_get_f(dfl_cpu *c, int t, float *dst, int64_t n) {
  const dfl_tensor *T = &c->g->t[t];
  if (!is_float(T->dtype)) for (int64_t i = 0; i < n; i++) dst[i] = (float)((int32_t *)c->buf[t])[i];
  else if (c->f64) for (int64_t i = 0; i < n; i++) dst[i] = (float)((double *)c->buf[t])[i];
  else memcpy(dst, c->buf[t], (size_t)n * sizeof *dst);
}

void dfl_cpu_set_d(dfl_cpu *c, int t, const double *src, int64_t n) {
  const dfl_tensor *T = &c->g->t[t];
  if (!is_float(T->dtype)) for (int64_t i = 0; i < n; i++) ((int32_t *)c->buf[t])[i] = (int32_t)src[i];
  else if (c->f64) memcpy(c->buf[t], src, (size_t)n * sizeof *src);
  else for (int64_t i = 0; i < n; i++) ((float *)c->buf[t])[i] = (float)src[i];
}

void dfl_cpu_get_d(dfl_cpu *c, int t, double *dst, int64_t n) {
  const dfl_tensor *T = &c->g->t[t];
  if (!is_float(T->dtype)) for (int64_t i = 0; i < n; i++) dst[i] = ((int32_t *)c->buf[t])[i];
  else if (c->f64) memcpy(dst, c->buf[t], (size_t)n * sizeof *dst);
  else for (int64_t i = 0; i < n; i++) dst[i] = ((float *)c->buf[t])[i];
}

/* reference §1.4 allowed(q, kv), for one sample; kv >= S indexes the concatenated block keys. */
int dfl_dflash_allowed(int S, int B, int window, int anchor, int keep, int q, int kv) {
  if (!keep) return 0;
  int n = q / B, j = q % B;
  if (kv < S) {
    if (kv >= anchor) return 0;
    if (window > 0 && kv < anchor + j - (window - 1)) return 0;
    return 1;
  }
  int m = kv - S;
  if (m / B != n) return 0;
  if (window > 0 && m % B > j) return 0;
  return 1;
}
