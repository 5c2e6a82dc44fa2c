/*
** codegen.c: a fusion group's kernel (codegen.h). Each thread takes 8 consecutive elements (16-byte
** accesses when every element tensor's pointer is 16-byte aligned; else one element at a time) and
** walks them grid-stride: it loads the group's inputs, runs the ops' bodies in schedule order with
** the values passed between them in registers, and stores every output once. Scalar inputs are read
** before any store; column inputs per element (index % columns), window inputs per element from
** their wider rows.
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "compiler/codegen.h"
#include "compiler/emit.h"
#include "compiler/status.h"

typedef struct { char *s; size_t n, cap; int oom; } sbuf;
static void put(sbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (w < 0) { b->oom = 1; return; }
    if (b->s && b->n + (size_t)w < b->cap) { b->n += (size_t)w; return; }
    size_t cap = (b->cap ? b->cap * 2 : 1 << 16) + (size_t)w;
    char *s = realloc(b->s, cap);
    if (!s) { b->oom = 1; return; }
    b->s = s, b->cap = cap;
  }
}

void dfl_codegen_kernel_name(int k, char *buf, size_t cap) { snprintf(buf, cap, "dfl_pw_%d", k); }

static const char *dt_code(dfl_dtype d) {
  switch (d) {
  case DFL_BF16: return "DT_BF16";
  case DFL_F16: return "DT_F16";
  case DFL_F64: return "DT_F64";
  case DFL_I32: return "DT_I32";
  default: return "DT_F32";
  }
}

/* a float literal that reads back as v: "1.0f", "-0.5f", "1e-06f" */
static void flit(char *buf, size_t cap, float v) {
  if (v != v || v - v != 0) { /* inf, nan: by their bits */
    unsigned u;
    memcpy(&u, &v, 4);
    snprintf(buf, cap, "__int_as_float(0x%08x)", u);
    return;
  }
  snprintf(buf, cap, "%.9g", v);
  if (!strpbrk(buf, ".en")) strncat(buf, ".0", cap - strlen(buf) - 1);
  strncat(buf, "f", cap - strlen(buf) - 1);
}

/* the end of the group's pointwise ops (a row group's last op is its QUANT_F8) */
static int pw_end(const dfl_pw_group *p) { return p->first + p->n - p->quant; }

/* the group's argument index of tensor t */
static int arg_of(const dfl_pw_group *p, int t) {
  for (int k = 0; k < p->nt; k++) if (p->t[k] == t) return k;
  return -1;
}

/* How the group uses each argument: read as an element before any op writes it (loaded), written
** (stored), read as a column or scalar, read as an element by an op after the one that wrote it. */
typedef struct { int elem, load, store, col, scalar, win; } use;

static void uses(const dfl_graph *g, const dfl_pw_group *p, use *u) {
  memset(u, 0, sizeof(use) * DFL_PW_MAX_T);
  int written[DFL_PW_MAX_T] = {0};
  for (int i = p->first; i < pw_end(p); i++) {
    const dfl_op *op = &g->ops[i];
    for (int k = 0; k < op->n_in; k++) {
      int a = op->in[k] < 0 ? -1 : arg_of(p, op->in[k]);
      const char in = dfl_lower_pw_in(g, op, k);
      if (a < 0) continue;
      if (in == 'e') { u[a].elem = 1; if (!written[a]) u[a].load = 1; }
      else if (in == 'c' || in == 'g') u[a].col = 1;
      else if (in == 'w') u[a].win = 1;
      else u[a].scalar = 1;
    }
    for (int k = 0; k < op->n_out; k++) {
      int a = arg_of(p, op->out[k]);
      u[a].elem = u[a].store = 1;
      written[a] = 1;
    }
  }
}

/* Is tensor t read as an element by an op of the group after op i? */
static int read_after(const dfl_graph *g, const dfl_pw_group *p, int i, int t) {
  for (int j = i + 1; j < pw_end(p); j++) {
    const dfl_op *op = &g->ops[j];
    for (int k = 0; k < op->n_in; k++) if (op->in[k] == t && dfl_lower_pw_in(g, op, k) == 'e') return 1;
  }
  return 0;
}

/* Op o's window input k in 16-byte words: 8 consecutive elements (from a multiple of 8) stay in one
** row of x and start on a word (the output's columns, x's and the window's start multiples of 8). */
static int win_vec(const dfl_graph *g, const dfl_op *op, int k) {
  const dfl_tensor *x = &g->t[op->in[k]], *y = &g->t[op->out[0]];
  return y->shape[y->ndim - 1] % 8 == 0 && x->shape[x->ndim - 1] % 8 == 0 && op->a.win[k] % 8 == 0;
}

/* The 16-byte loads of the group's windows on words (win_vec) into w<op>_<input>[8], for the 8 elements
** from i; row: a row kernel's chunk (only where ok, element by element where a pointer is not aligned) */
static void win_loads(sbuf *b, const dfl_graph *g, const dfl_pw_group *p, const char *ind, int row) {
  for (int o = p->first; o < pw_end(p); o++) {
    const dfl_op *op = &g->ops[o];
    for (int k = 0; k < op->n_in; k++) {
      if (op->in[k] < 0 || dfl_lower_pw_in(g, op, k) != 'w' || !win_vec(g, op, k)) continue;
      const dfl_tensor *x = &g->t[op->in[k]], *y = &g->t[op->out[0]];
      long long cols = (long long)y->shape[y->ndim - 1], C = (long long)x->shape[x->ndim - 1];
      const int a = arg_of(p, op->in[k]);
      const char *d = dt_code(x->dtype);
      put(b, "%sfloat w%d_%d[8]%s;\n", ind, o, k, row ? " = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f}" : "");
      if (!row) put(b, "%sld8(t%d, %s, i / %lldLL * %lldLL + %lldLL + i %% %lldLL, w%d_%d);\n", ind, a, d, cols, C,
                    (long long)op->a.win[k], cols, o, k);
      else put(b, "%sif (ok) { const ll wi = i / %lldLL * %lldLL + %lldLL + i %% %lldLL; if (vec && vec_ok(t%d)) ld8(t%d, %s, wi, "
                  "w%d_%d); else for (int k = 0; k < 8; k++) w%d_%d[k] = ldf(t%d, %s, wi + k); }\n",
               ind, cols, C, (long long)op->a.win[k], cols, a, a, d, o, k, o, k, a, d);
    }
  }
}

/* The declarations of op i's inputs x0, x1, .. for element e (value k of the arrays). V 8: the 16-byte
** pass (windows on 16-byte words preloaded as w<op>_<input>), 1 the element pass, 0 a row kernel's chunk
** (windows on words preloaded; others read only where ok). */
static void op_inputs(sbuf *b, const dfl_graph *g, const dfl_pw_group *p, int i, const char *ind, int V) {
  const dfl_op *op = &g->ops[i];
  const char *ins = dfl_lower_pw_ins(op->code);
  for (int k = 0; ins[k]; k++) {
    int t = k < op->n_in ? op->in[k] : -1;
    int a = t < 0 ? -1 : arg_of(p, t);
    const dfl_tensor *x = t < 0 ? NULL : &g->t[t];
    const char in = t < 0 ? 's' : dfl_lower_pw_in(g, op, k);
    if (a < 0) put(b, "%s  const float x%d = 1.f;\n", ind, k);
    else if (in == 'e') put(b, "%s  const float x%d = v%d[k];\n", ind, k, a);
    else if (in == 's') put(b, "%s  const float x%d = s%d;\n", ind, k, a);
    else if (in == 'g') put(b, "%s  const float x%d = ldf(t%d, %s, e %% %dLL);\n", ind, k, a, dt_code(x->dtype), op->a.group);
    else if (in == 'w' && V != 1 && win_vec(g, op, k)) put(b, "%s  const float x%d = w%d_%d[k];\n", ind, k, i, k);
    else if (in == 'w') { /* element (e / cols, e % cols) of the window at column win[k] of x's rows; in a row
                          ** kernel (V 0) only for an element of the row (ok) */
      const dfl_tensor *y = &g->t[op->out[0]];
      long long cols = (long long)y->shape[y->ndim - 1], C = (long long)x->shape[x->ndim - 1];
      put(b, "%s  const float x%d = %sldf(t%d, %s, e / %lldLL * %lldLL + %lldLL + e %% %lldLL);\n", ind, k, V == 0 ? "!ok ? 0.f : " : "",
          a, dt_code(x->dtype), cols, C, (long long)op->a.win[k], cols);
    }
    else put(b, "%s  const float x%d = ldf(t%d, %s, e %% %lldLL);\n", ind, k, a, dt_code(x->dtype), (long long)dfl_tensor_numel(x));
  }
}

/* op i's body and the stores of its outputs into their arrays (a row op's: S its segment's sum) */
static void op_body(sbuf *b, const dfl_graph *g, const dfl_pw_group *p, int i, const char *ind, int V) {
  const dfl_op *op = &g->ops[i];
  const char *body = dfl_lower_pw_body(op->code);
  int fast = 1;
  for (int k = 0; k < op->n_in + op->n_out; k++) {
    int t = k < op->n_in ? op->in[k] : op->out[k - op->n_in];
    if (t >= 0 && g->t[t].dtype == DFL_F32) fast = 0;
  }
  char A[32], A1[32], E[32];
  flit(A, sizeof A, (float)op->a.alpha);
  flit(A1, sizeof A1, op->a.alpha == 0 ? 1.f : (float)op->a.alpha);
  flit(E, sizeof E, (float)op->a.eps);
  put(b, "%s{ /* op %d %s (%s) */\n", ind, i, dfl_opcode_name(op->code), op->label);
  put(b, "%s  const float A = %s, A1 = %s;\n%s  (void)A, (void)A1;\n", ind, A, A1, ind);
  if (dfl_lower_row_pre(op->code))
    put(b, "%s  const float EPS = %s, G = %d.f, S = sum%d;\n%s  (void)EPS, (void)G, (void)S;\n", ind, E, op->a.group, i, ind);
  op_inputs(b, g, p, i, ind, V);
  put(b, "%s  float", ind);
  for (int k = 0; k < op->n_out; k++) put(b, "%s y%d", k ? "," : "", k);
  put(b, ";\n%s  ", ind);
  for (const char *s = body; *s; s++) {
    if (!strncmp(s, "SIGM(", 5)) { put(b, "dfl_sigm<%s>(", fast ? "true" : "false"); s += 4; }
    else put(b, "%c", *s);
  }
  put(b, "\n");
  for (int k = 0; k < op->n_out; k++) {
    int t = op->out[k], a = arg_of(p, t);
    dfl_dtype d = g->t[t].dtype;
    if (!read_after(g, p, i, t) || d == DFL_F32 || d == DFL_F64) put(b, "%s  v%d[k] = y%d;\n", ind, a, k);
    else if (d == DFL_I32) put(b, "%s  v%d[k] = (float)(int)y%d;\n", ind, a, k);
    else put(b, "%s  v%d[k] = dfl_round_to(y%d, %s);\n", ind, a, k, dt_code(d)); /* as the next op reads it */
  }
  put(b, "%s}\n", ind);
}

/* The bodies of the group's ops for the element at index e, value k of each argument's array. */
static void bodies(sbuf *b, const dfl_graph *g, const dfl_pw_group *p, const char *ind, int V) {
  for (int i = p->first; i < pw_end(p); i++) op_body(b, g, p, i, ind, V);
}

static void row_kernel(sbuf *b, const dfl_graph *g, const dfl_pw_group *p, int gi, const use *u);
static int read_outside(const dfl_graph *g, const dfl_pw_group *p, int t);

static void group_kernel(sbuf *b, const dfl_graph *g, const dfl_pw_group *p, int gi) {
  use u[DFL_PW_MAX_T];
  uses(g, p, u);
  char name[32];
  dfl_codegen_kernel_name(gi, name, sizeof name);
  put(b, "\n/* group %d: op%s %d", gi, p->n > 1 ? "s" : "", p->first);
  if (p->n > 1) put(b, "..%d", p->first + p->n - 1);
  put(b, " (%s), %lld element%s\n", dfl_phase_name(g->ops[p->first].phase), (long long)p->numel, p->numel == 1 ? "" : "s");
  const dfl_op *last = &g->ops[p->first + p->n - 1];
  for (int k = 0; k < p->nt; k++) {
    const dfl_tensor *x = &g->t[p->t[k]];
    const int quant_in = p->quant && p->t[k] == last->in[0], quant_out = p->quant && !quant_in &&
                         (p->t[k] == last->out[0] || p->t[k] == last->out[1]);
    put(b, "**   t%d %%%d %s %s%s%s%s%s%s%s\n", k, p->t[k], x->name, dfl_dtype_name(x->dtype), u[k].load ? " load" : "",
        u[k].store && !(quant_in && !read_outside(g, p, p->t[k])) ? " store" : "", u[k].col ? " column" : "",
        u[k].scalar ? " scalar" : "", u[k].win ? " window" : "", quant_in ? " quantized" : quant_out ? " store" : "");
  }
  if (p->rows > 0) {
    put(b, "**   a row group: %lld rows of %lld columns, a CTA a row%s\n", (long long)p->rows, (long long)p->cols,
        p->quant ? ", the last op's quantization fused" : "");
    row_kernel(b, g, p, gi, u);
    return;
  }
  put(b, "*/\nextern \"C\" __global__ void __launch_bounds__(256) %s(", name);
  for (int k = 0; k < p->nt; k++) put(b, "%svoid *t%d", k ? ", " : "", k);
  put(b, ") {\n  const ll N = %lldLL;\n", (long long)p->numel);
  for (int k = 0; k < p->nt; k++)
    if (u[k].scalar) put(b, "  const float s%d = ldf(t%d, %s, 0);\n", k, k, dt_code(g->t[p->t[k]].dtype));
  for (int pass = p->vec == 8 ? 0 : 1; pass < 2; pass++) {
    const int V = pass == 0 ? 8 : 1;
    if (pass == 0) {
      put(b, "  if (");
      int m = 0;
      for (int k = 0; k < p->nt; k++) if (u[k].elem) put(b, "%svec_ok(t%d)", m++ ? " && " : "", k);
      for (int o = p->first; o < pw_end(p); o++)
        for (int k = 0; k < g->ops[o].n_in; k++)
          if (g->ops[o].in[k] >= 0 && dfl_lower_pw_in(g, &g->ops[o], k) == 'w' && win_vec(g, &g->ops[o], k))
            put(b, "%svec_ok(t%d)", m++ ? " && " : "", arg_of(p, g->ops[o].in[k]));
      put(b, "%s) {\n    GRID_STRIDE(j, N / 8) {\n      const ll i = j * 8;\n", m ? "" : "true");
    } else {
      put(b, "  GRID_STRIDE(i, N) {\n");
    }
    const char *ind = pass == 0 ? "      " : "    ";
    for (int k = 0; k < p->nt; k++) {
      if (!u[k].elem) continue;
      const char *d = dt_code(g->t[p->t[k]].dtype);
      put(b, "%sfloat v%d[%d];\n", ind, k, V);
      if (u[k].load) {
        if (V == 8) put(b, "%sld8(t%d, %s, i, v%d);\n", ind, k, d, k);
        else put(b, "%sv%d[0] = ldf(t%d, %s, i);\n", ind, k, k, d);
      }
    }
    if (V == 8) win_loads(b, g, p, ind, 0);
    if (V == 8) put(b, "%s#pragma unroll\n%sfor (int k = 0; k < 8; k++) {\n%s  const ll e = i + k;\n%s  (void)e;\n", ind, ind, ind, ind);
    else put(b, "%s{\n%s  const int k = 0;\n%s  const ll e = i;\n%s  (void)e;\n", ind, ind, ind, ind);
    char in2[16];
    snprintf(in2, sizeof in2, "%s  ", ind);
    bodies(b, g, p, in2, V);
    put(b, "%s}\n", ind);
    for (int k = 0; k < p->nt; k++) {
      if (!u[k].store) continue;
      const char *d = dt_code(g->t[p->t[k]].dtype);
      if (V == 8) put(b, "%sst8(t%d, %s, i, v%d);\n", ind, k, d, k);
      else put(b, "%sstf(t%d, %s, i, v%d[0]);\n", ind, k, d, k);
    }
    if (pass == 0) put(b, "    }\n    return;\n  }\n");
    else put(b, "  }\n");
  }
  put(b, "}\n");
}

/* Is tensor t read by an op outside the group, or kept past the step (not an activation)? */
static int read_outside(const dfl_graph *g, const dfl_pw_group *p, int t) {
  if (g->t[t].kind != DFL_T_ACT) return 1;
  for (int j = 0; j < g->nops; j++) {
    if (j >= p->first && j < p->first + p->n) continue;
    for (int k = 0; k < g->ops[j].n_in; k++) if (g->ops[j].in[k] == t) return 1;
  }
  return 0;
}

int dfl_codegen_stores(const dfl_graph *g, const dfl_groups *gs, int t) {
  const int k = g->t[t].producer >= 0 ? gs->of_op[g->t[t].producer] : -1;
  if (k < 0 || !gs->g[k].quant) return 1;
  const dfl_pw_group *p = &gs->g[k];
  return g->ops[p->first + p->n - 1].in[0] != t || read_outside(g, p, t);
}

/* A row group (lower.h): a CTA a row of C columns, 8 consecutive columns a thread and chunk (NCH chunks
** of blockDim.x * 8). Per chunk: the loads, each op in order (a row op: its pre summed over the
** thread's 8 values, then over the segment's L lanes by shuffles, then its body), the stores; then,
** with a QUANT_F8 last, the quantized input's amax over the row (block_max), its scale and its FP8
** bytes, with the library's rounding (common.cuh). Every thread runs every chunk (the shuffles need
** the whole warp): a thread past the row's end computes zeros and stores nothing; segments never
** straddle it (C % G == 0). */
static void row_kernel(sbuf *b, const dfl_graph *g, const dfl_pw_group *p, int gi, const use *u) {
  const dfl_op *qo = p->quant ? &g->ops[p->first + p->n - 1] : NULL;
  const int ax = qo ? arg_of(p, qo->in[0]) : -1, aq = qo ? arg_of(p, qo->out[0]) : -1, as = qo ? arg_of(p, qo->out[1]) : -1;
  const int nch = (int)((p->cols + 2047) / 2048), keep_x = qo ? read_outside(g, p, qo->in[0]) : 1;
  char name[32];
  dfl_codegen_kernel_name(gi, name, sizeof name);
  put(b, "*/\nextern \"C\" __global__ void __launch_bounds__(256) %s(", name);
  for (int k = 0; k < p->nt; k++) put(b, "%svoid *t%d", k ? ", " : "", k);
  put(b, ") {\n  __shared__ float red[32];\n  (void)red;\n  const ll NR = %lldLL, NC = %lldLL;\n", (long long)p->rows, (long long)p->cols);
  for (int k = 0; k < p->nt; k++)
    if (u[k].scalar) put(b, "  const float s%d = ldf(t%d, %s, 0);\n", k, k, dt_code(g->t[p->t[k]].dtype));
  put(b, "  const bool vec = true");
  for (int k = 0; k < p->nt; k++) if (u[k].elem) put(b, " && vec_ok(t%d)", k);
  put(b, ";\n  for (ll row = blockIdx.x; row < NR; row += gridDim.x) {\n");
  if (qo) put(b, "    float xq[%d][8], amax = 0.f;\n", nch);
  put(b, "#pragma unroll\n    for (int c = 0; c < %d; c++) {\n", nch);
  put(b, "      const ll col = ((ll)c * blockDim.x + threadIdx.x) * 8, i = row * NC + col;\n      const bool ok = col < NC;\n");
  for (int k = 0; k < p->nt; k++) {
    if (!u[k].elem) continue;
    const char *d = dt_code(g->t[p->t[k]].dtype);
    put(b, "      float v%d[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};\n", k);
    if (u[k].load)
      put(b, "      if (ok) { if (vec) ld8(t%d, %s, i, v%d); else for (int k = 0; k < 8; k++) v%d[k] = ldf(t%d, %s, i + k); }\n",
          k, d, k, k, k, d);
  }
  win_loads(b, g, p, "      ", 1);
  for (int o = p->first; o < pw_end(p); o++) {
    const dfl_op *op = &g->ops[o];
    const char *pre = dfl_lower_row_pre(op->code);
    if (pre) { /* the segment's sum: the thread's 8 values, then its L lanes */
      put(b, "      float sum%d = 0.f;\n#pragma unroll\n      for (int k = 0; k < 8; k++) {\n        const ll e = i + k;\n"
             "        (void)e;\n        {\n", o);
      op_inputs(b, g, p, o, "        ", 0);
      put(b, "          sum%d += %s;\n        }\n      }\n", o, pre);
      put(b, "      for (int m = %d; m > 0; m >>= 1) sum%d += __shfl_xor_sync(0xffffffffu, sum%d, m);\n", op->a.group / 16, o, o);
    }
    put(b, "#pragma unroll\n      for (int k = 0; k < 8; k++) {\n        const ll e = i + k;\n        (void)e;\n");
    op_body(b, g, p, o, "        ", 0);
    put(b, "      }\n");
  }
  for (int k = 0; k < p->nt; k++) {
    if (!u[k].store || (k == ax && !keep_x)) continue;
    const char *d = dt_code(g->t[p->t[k]].dtype);
    put(b, "      if (ok) { if (vec) st8(t%d, %s, i, v%d); else for (int k = 0; k < 8; k++) stf(t%d, %s, i + k, v%d[k]); }\n", k,
        d, k, k, d, k);
  }
  if (qo) {
    put(b, "#pragma unroll\n      for (int k = 0; k < 8; k++) {\n        xq[c][k] = dfl_round_to(v%d[k], %s); /* as stored */\n"
           "        amax = fmaxf(amax, ok ? fabsf(xq[c][k]) : 0.f);\n      }\n", ax, dt_code(g->t[qo->in[0]].dtype));
  }
  put(b, "    }\n");
  if (qo) {
    put(b, "    amax = block_max(amax, red);\n    const float inv = dfl_fp8_inv(amax);\n");
    put(b, "    if (threadIdx.x == 0) ((float *)t%d)[row] = dfl_fp8_scale(amax);\n", as);
    put(b, "#pragma unroll\n    for (int c = 0; c < %d; c++) {\n      const ll col = ((ll)c * blockDim.x + threadIdx.x) * 8;\n"
           "      if (col < NC) *(uint2 *)((unsigned char *)t%d + row * NC + col) = dfl_e4m3x8(xq[c], inv);\n    }\n", nch, aq);
  }
  put(b, "  }\n}\n");
}

int dfl_codegen_source(const dfl_graph *g, const dfl_groups *gs, char **src, size_t *len) {
  *src = NULL;
  if (len) *len = 0;
  if (gs->n == 0) return DFL_OK;
  sbuf b = {0};
  put(&b, "// Generated by dflc (compiler/codegen.c) from compiler/pointwise.def: the pointwise fusion\n"
          "// groups of one graph, after kernels/common.cuh. Do not edit: `dflc build` writes it again.\n");
  put(&b, "%s", dfl_emit_family_source(DFL_KF_COMMON));
  for (int k = 0; k < gs->n; k++) group_kernel(&b, g, &gs->g[k], k);
  if (b.oom) { free(b.s); return DFL_ENOMEM; }
  *src = b.s;
  if (len) *len = b.n;
  return DFL_OK;
}
