/*
** plan_report.c: what a user reads of a memory plan.
**
**   dfl_plan_print       the table: parts of the total, peak and where, bound and ratio, the largest
**                        buffers live at the peak, FLOPs per step;
**   dfl_plan_write_yaml  the plan itself (schema in docs/plan.md), written with libyaml's emitter;
**   dfl_plan_write_html  one self-contained page: an offset-by-time SVG of every buffer, each rect
**                        carrying a <title> so that hovering names it;
**   dfl_plan_doc_read / dfl_plan_diff   a plan YAML read back and compared with another.
*/
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>
#include "compiler/plan.h"
#include "compiler/status.h"

const char *dfl_plan_bytes_str(char *buf, size_t n, int64_t b) {
  double v = (double)(b < 0 ? -b : b);
  const char *sign = b < 0 ? "-" : "";
  if (v >= 1024.0 * 1024 * 1024) snprintf(buf, n, "%s%.2f GiB", sign, v / (1024.0 * 1024 * 1024));
  else if (v >= 1024.0 * 1024) snprintf(buf, n, "%s%.2f MiB", sign, v / (1024.0 * 1024));
  else if (v >= 1024.0) snprintf(buf, n, "%s%.1f KiB", sign, v / 1024.0);
  else snprintf(buf, n, "%s%lld B", sign, (long long)(b < 0 ? -b : b));
  return buf;
}

static const char *op_label(const dfl_graph *g, int i) {
  return i >= 0 && i < g->nops ? g->ops[i].label : "-";
}

static void shape_str(const dfl_tensor *t, char *buf, size_t n) {
  size_t k = 0;
  buf[k++] = '[';
  for (int d = 0; d < t->ndim && k + 24 < n; d++)
    k += (size_t)snprintf(buf + k, n - k, d ? ",%lld" : "%lld", (long long)t->shape[d]);
  snprintf(buf + k, n - k, "]");
}

static const char *buf_kind(const dfl_plan *p, const dfl_graph *g, int b) {
  return b < p->nt ? dfl_tkind_name(g->t[b].kind) : (p->ws[b - p->nt].op >= 0 ? "SCRATCH" : "WORKSPACE");
}

/* --- table ---------------------------------------------------------------------------------- */

static int cmp_desc_size(const void *a, const void *b) {
  int64_t x = ((const int64_t *)a)[0], y = ((const int64_t *)b)[0];
  return x > y ? -1 : x < y;
}

void dfl_plan_print(FILE *f, const dfl_plan_dev *d) {
  const dfl_plan *p = d->p;
  const dfl_graph *g = d->g;
  char b1[32], b2[32], b3[32];
  static const char *labels[DFL_PCAT_COUNT] = {"weights", "optimizer state", "gradients", "inputs/outputs",
                                               "queue slots", "library workspace", "activations",
                                               "loss workspace"};
  fprintf(f, "device %s (%s): %d ops, %d tensors, %d in-place\n", d->name, d->role, g->nops, g->nt, p->n_inplace);
  for (int c = 0; c < DFL_PCAT_COUNT; c++)
    fprintf(f, "  %-20s %12s%s\n", labels[c], dfl_plan_bytes_str(b1, sizeof b1, p->cat_bytes[c]),
            c >= DFL_PCAT_ACT ? "   (live at the peak)" : "");
  fprintf(f, "  %-20s %12s\n", "fragmentation",
          dfl_plan_bytes_str(b1, sizeof b1, p->step_bytes - p->step_lower_bound));
  fprintf(f, "  %-20s %12s", "total", dfl_plan_bytes_str(b1, sizeof b1, p->arena_bytes));
  if (d->budget > 0)
    fprintf(f, "   budget %s: %s", dfl_plan_bytes_str(b2, sizeof b2, d->budget),
            p->arena_bytes <= d->budget ? "fits" : "EXCEEDED");
  fprintf(f, "\n");
  double ratio = p->step_lower_bound > 0 ? (double)p->step_bytes / (double)p->step_lower_bound : 1.0;
  fprintf(f, "  per-step region %s, lower bound %s, ratio %.3f\n", dfl_plan_bytes_str(b1, sizeof b1, p->step_bytes),
          dfl_plan_bytes_str(b2, sizeof b2, p->step_lower_bound), ratio);
  if (p->peak_op >= 0)
    fprintf(f, "  peak at op %d '%s' (%s, %s)\n", p->peak_op, op_label(g, p->peak_op),
            dfl_opcode_name(g->ops[p->peak_op].code), dfl_phase_name(g->ops[p->peak_op].phase));
  if (d->n_recomputed)
    fprintf(f, "  recomputed %d forward ops in the backward to fit: +%.3g FLOPs per step\n", d->n_recomputed,
            d->recompute_flops);

  /* the ten largest buffers live at the peak */
  int64_t(*live)[2] = malloc(sizeof *live * (p->nbuf + 1));
  int nl = 0;
  for (int b = 0; live && b < p->nbuf; b++)
    if (p->first[b] >= 0 && p->first[b] <= p->peak_op && p->peak_op <= p->last[b]) {
      live[nl][0] = p->size[b];
      live[nl][1] = b;
      nl++;
    }
  if (nl) {
    qsort(live, nl, sizeof *live, cmp_desc_size);
    fprintf(f, "  largest buffers live at the peak:\n");
    for (int k = 0; k < nl && k < 10; k++) {
      int b = (int)live[k][1];
      char sh[64] = "";
      if (b < p->nt) shape_str(&g->t[b], sh, sizeof sh);
      fprintf(f, "    %12s  %-40s %-6s %-16s made by %s, last read by %s\n",
              dfl_plan_bytes_str(b1, sizeof b1, p->size[b]), dfl_plan_buf_name(p, g, b),
              b < p->nt ? dfl_dtype_name(g->t[b].dtype) : "", sh, op_label(g, p->first[b]), op_label(g, p->last[b]));
    }
  }
  free(live);

  double ph[DFL_PH_COUNT] = {0};
  for (int i = 0; i < g->nops; i++) ph[g->ops[i].phase] += dfl_op_flops(g, &g->ops[i]);
  double step = ph[DFL_PH_TARGET] + ph[DFL_PH_FORWARD] + ph[DFL_PH_LOSS] + ph[DFL_PH_BACKWARD];
  fprintf(f, "  FLOPs per micro-step %.4g (target %.3g, forward %.3g, loss %.3g, backward %.3g); optimizer %.3g\n",
          step, ph[DFL_PH_TARGET], ph[DFL_PH_FORWARD], ph[DFL_PH_LOSS], ph[DFL_PH_BACKWARD], ph[DFL_PH_OPTIMIZER]);
  /* what compiler/fuse.c did to this graph, so that the op count above reads against the model */
  int acc = 0, addend = 0, nadd = 0, nrope = 0, npair = 0, kept = 0, nq = 0, lowp = 0;
  for (int i = 0; i < g->nops; i++) {
    const dfl_op *op = &g->ops[i];
    if (op->code == DFL_OP_MATMUL && g->t[op->out[0]].kind == DFL_T_GRAD) acc++; /* adding or, accum 1, writing */
    if (op->code == DFL_OP_MATMUL && op->n_in == 3 && op->a.beta != 0 && op->in[2] != op->out[0]) addend++;
    if (op->code == DFL_OP_MATMUL_F8 && op->n_in == 5) addend++;
    if (op->code == DFL_OP_RMSNORM_BWD && op->n_in == 5) nadd++;
    if (op->code == DFL_OP_ROPE && op->n_out == 1 && op->n_in == 3) nrope++; /* normed */
    if (op->code == DFL_OP_ROPE && op->n_out == 2) npair++, nrope += op->n_in == 5 ? 2 : 0; /* pair, normed pair */
    if (op->code == DFL_OP_RMSNORM && op->n_out == 3) nq++;
    if (op->code == DFL_OP_ADAMW && op->a.keep_grad) kept++;
    if (op->code == DFL_OP_ADAMW && op->n_in >= 5 && g->t[op->in[4]].dtype != DFL_F32) lowp++;
  }
  if (acc + addend + nadd + nrope + npair + kept)
    fprintf(f, "  fused: %d weight-gradient GEMMs straight into their accumulators, %d adds in GEMM epilogues and %d in "
            "RMSNorm backward, %d q/k norms in their RoPE, %d RoPE pairs (q and k) in one launch; %d gradients "
            "overwritten, not zeroed\n", acc, addend, nadd, nrope, npair, kept);
  if (lowp) fprintf(f, "  gradients: %d in the params' dtype (train.grads = bf16), the rest f32\n", lowp);
  /* models/drafter.c's row rewrites: how many rows the first layer's row-wise ops and the last layer's
  ** tail run on, against the drafter's rows */
  int64_t rows_in = 0, rows_full = 0, rows_tail = 0;
  int nexp = 0;
  for (int i = 0; i < g->nops; i++) {
    const dfl_op *op = &g->ops[i];
    if (op->code == DFL_OP_BLOCK_ROWS) rows_in = g->t[op->out[0]].shape[0], rows_full = g->t[op->in[0]].shape[0];
    if (op->code == DFL_OP_BLOCK_EXPAND) nexp++;
    if (op->code == DFL_OP_BLOCK_DROP && op->phase == DFL_PH_FORWARD) rows_tail = g->t[op->out[0]].shape[0];
  }
  if (rows_in || rows_tail)
    fprintf(f, "  drafter rows: the first layer's norms and projections on %" PRId64 " distinct rows of %" PRId64
            " (%d outputs copied out), the last layer after its attention on %" PRId64 " rows without the anchors "
            "(compile { block_rows = false }: off)\n", rows_in, rows_full, nexp, rows_tail);
  if (nq) fprintf(f, "  fused: %d FP8 row quantizations in the RMSNorm that produces their row\n", nq);
  if (d->span_phases & (1u << DFL_PH_OPTIMIZER))
    fprintf(f, "  schedule: each step's optimizer runs beside the next step's target forward (its per-step buffers "
            "live over the whole step)\n");
  (void)b3;
}

/* --- YAML ----------------------------------------------------------------------------------- */

typedef struct { yaml_emitter_t e; yaml_event_t ev; int ok; } emit;

static void y_scalar(emit *m, const char *s) {
  if (!m->ok) return;
  yaml_scalar_event_initialize(&m->ev, NULL, NULL, (yaml_char_t *)s, (int)strlen(s), 1, 1, YAML_ANY_SCALAR_STYLE);
  m->ok = yaml_emitter_emit(&m->e, &m->ev);
}
static void y_str(emit *m, const char *s) { /* quoted when it could read as something else */
  if (!m->ok) return;
  yaml_scalar_event_initialize(&m->ev, NULL, NULL, (yaml_char_t *)s, (int)strlen(s), 1, 1,
                               YAML_DOUBLE_QUOTED_SCALAR_STYLE);
  m->ok = yaml_emitter_emit(&m->e, &m->ev);
}
static void y_int(emit *m, int64_t v) {
  char b[32];
  snprintf(b, sizeof b, "%lld", (long long)v);
  y_scalar(m, b);
}
static void y_num(emit *m, double v) {
  char b[32];
  snprintf(b, sizeof b, "%.6g", v);
  y_scalar(m, b);
}
static void y_map(emit *m, int flow) {
  if (!m->ok) return;
  yaml_mapping_start_event_initialize(&m->ev, NULL, NULL, 1, flow ? YAML_FLOW_MAPPING_STYLE : YAML_BLOCK_MAPPING_STYLE);
  m->ok = yaml_emitter_emit(&m->e, &m->ev);
}
static void y_map_end(emit *m) {
  if (!m->ok) return;
  yaml_mapping_end_event_initialize(&m->ev);
  m->ok = yaml_emitter_emit(&m->e, &m->ev);
}
static void y_seq(emit *m, int flow) {
  if (!m->ok) return;
  yaml_sequence_start_event_initialize(&m->ev, NULL, NULL, 1, flow ? YAML_FLOW_SEQUENCE_STYLE : YAML_BLOCK_SEQUENCE_STYLE);
  m->ok = yaml_emitter_emit(&m->e, &m->ev);
}
static void y_seq_end(emit *m) {
  if (!m->ok) return;
  yaml_sequence_end_event_initialize(&m->ev);
  m->ok = yaml_emitter_emit(&m->e, &m->ev);
}

static int yaml_write_cb(void *data, unsigned char *buf, size_t n) {
  return fwrite(buf, 1, n, (FILE *)data) == n;
}

int dfl_plan_write_yaml(FILE *f, const char *spec_file, const dfl_plan_dev *d, int n) {
  emit m;
  memset(&m, 0, sizeof m);
  if (!yaml_emitter_initialize(&m.e)) return DFL_ENOMEM;
  yaml_emitter_set_output(&m.e, yaml_write_cb, f);
  yaml_emitter_set_width(&m.e, 200);
  m.ok = 1;
  yaml_stream_start_event_initialize(&m.ev, YAML_UTF8_ENCODING);
  m.ok = yaml_emitter_emit(&m.e, &m.ev);
  if (m.ok) {
    yaml_document_start_event_initialize(&m.ev, NULL, NULL, NULL, 1);
    m.ok = yaml_emitter_emit(&m.e, &m.ev);
  }
  y_map(&m, 0);
  y_scalar(&m, "dflc_plan"); y_int(&m, 1); /* schema version */
  y_scalar(&m, "spec"); y_str(&m, spec_file ? spec_file : "");
  y_scalar(&m, "devices");
  y_seq(&m, 0);
  for (int k = 0; k < n; k++) {
    const dfl_plan *p = d[k].p;
    const dfl_graph *g = d[k].g;
    y_map(&m, 0);
    y_scalar(&m, "device"); y_str(&m, d[k].name);
    y_scalar(&m, "role"); y_str(&m, d[k].role);
    y_scalar(&m, "alignment"); y_int(&m, p->alignment);
    y_scalar(&m, "arena_bytes"); y_int(&m, p->arena_bytes);
    y_scalar(&m, "persistent_bytes"); y_int(&m, p->persistent_bytes);
    y_scalar(&m, "step_bytes"); y_int(&m, p->step_bytes);
    y_scalar(&m, "step_lower_bound"); y_int(&m, p->step_lower_bound);
    y_scalar(&m, "ratio");
    y_num(&m, p->step_lower_bound > 0 ? (double)p->step_bytes / (double)p->step_lower_bound : 1.0);
    y_scalar(&m, "budget"); y_int(&m, d[k].budget);
    y_scalar(&m, "peak_op"); y_int(&m, p->peak_op);
    y_scalar(&m, "peak_label"); y_str(&m, op_label(g, p->peak_op));
    double fl = 0;
    for (int i = 0; i < g->nops; i++)
      if (g->ops[i].phase != DFL_PH_OPTIMIZER) fl += dfl_op_flops(g, &g->ops[i]);
    y_scalar(&m, "flops_per_step"); y_num(&m, fl);
    y_scalar(&m, "recomputed_ops"); y_int(&m, d[k].n_recomputed);
    y_scalar(&m, "recompute_flops"); y_num(&m, d[k].recompute_flops);
    y_scalar(&m, "categories");
    y_map(&m, 0);
    for (int c = 0; c < DFL_PCAT_COUNT; c++) { y_scalar(&m, dfl_plan_cat_name(c)); y_int(&m, p->cat_bytes[c]); }
    y_map_end(&m);
    y_scalar(&m, "ops");
    y_seq(&m, 0);
    for (int i = 0; i < g->nops; i++) {
      y_map(&m, 1);
      y_scalar(&m, "op"); y_scalar(&m, dfl_opcode_name(g->ops[i].code));
      y_scalar(&m, "phase"); y_scalar(&m, dfl_phase_name(g->ops[i].phase));
      y_scalar(&m, "label"); y_str(&m, g->ops[i].label);
      y_map_end(&m);
    }
    y_seq_end(&m);
    y_scalar(&m, "buffers");
    y_seq(&m, 0);
    for (int b = 0; b < p->nbuf; b++) {
      if (p->offset[b] < 0) continue;
      y_map(&m, 1);
      y_scalar(&m, "id"); y_int(&m, b);
      y_scalar(&m, "name"); y_str(&m, dfl_plan_buf_name(p, g, b));
      y_scalar(&m, "kind"); y_scalar(&m, buf_kind(p, g, b));
      y_scalar(&m, "category"); y_scalar(&m, dfl_plan_cat_name(p->cat[b]));
      y_scalar(&m, "dtype"); y_scalar(&m, b < p->nt ? dfl_dtype_name(g->t[b].dtype) : "u8");
      y_scalar(&m, "shape");
      y_seq(&m, 1);
      if (b < p->nt)
        for (int j = 0; j < g->t[b].ndim; j++) y_int(&m, g->t[b].shape[j]);
      else
        y_int(&m, p->ws[b - p->nt].bytes);
      y_seq_end(&m);
      y_scalar(&m, "offset"); y_int(&m, p->offset[b]);
      y_scalar(&m, "size"); y_int(&m, p->size[b]);
      y_scalar(&m, "first"); y_int(&m, p->first[b]);
      y_scalar(&m, "last"); y_int(&m, p->last[b]);
      if (p->alias[b] >= 0) { y_scalar(&m, "inplace_of"); y_int(&m, p->alias[b]); }
      y_map_end(&m);
    }
    y_seq_end(&m);
    y_map_end(&m);
  }
  y_seq_end(&m);
  y_map_end(&m);
  if (m.ok) {
    yaml_document_end_event_initialize(&m.ev, 1);
    m.ok = yaml_emitter_emit(&m.e, &m.ev);
  }
  if (m.ok) {
    yaml_stream_end_event_initialize(&m.ev);
    m.ok = yaml_emitter_emit(&m.e, &m.ev);
  }
  int ok = m.ok && yaml_emitter_flush(&m.e);
  if (!ok) fprintf(stderr, "dflc plan: writing YAML failed: %s\n", m.e.problem ? m.e.problem : "write error");
  yaml_emitter_delete(&m.e);
  return ok ? DFL_OK : DFL_EIO;
}

/* --- YAML reading ---------------------------------------------------------------------------- */

static yaml_node_t *y_get(yaml_document_t *doc, yaml_node_t *map, const char *key) {
  if (!map || map->type != YAML_MAPPING_NODE) return NULL;
  for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top; pr++) {
    yaml_node_t *k = yaml_document_get_node(doc, pr->key);
    if (k && k->type == YAML_SCALAR_NODE && !strcmp((const char *)k->data.scalar.value, key))
      return yaml_document_get_node(doc, pr->value);
  }
  return NULL;
}
static const char *y_sval(yaml_document_t *doc, yaml_node_t *map, const char *key) {
  yaml_node_t *v = y_get(doc, map, key);
  return v && v->type == YAML_SCALAR_NODE ? (const char *)v->data.scalar.value : NULL;
}
static int y_ival(yaml_document_t *doc, yaml_node_t *map, const char *key, int64_t *out) {
  const char *s = y_sval(doc, map, key);
  char *end;
  if (!s) return 0;
  *out = strtoll(s, &end, 10);
  return *end == 0 && end != s;
}

void dfl_plan_doc_free(dfl_plan_doc *doc) {
  for (int k = 0; k < doc->ndev; k++) free(doc->dev[k].buf);
  free(doc->dev);
  memset(doc, 0, sizeof *doc);
}

int dfl_plan_doc_read(dfl_plan_doc *doc, const char *path) {
  memset(doc, 0, sizeof *doc);
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "%s: cannot open the plan file (write one with `dflc plan SPEC --yaml %s`)\n", path, path);
    return DFL_EIO;
  }
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {   /* fopen succeeds on a directory */
    fprintf(stderr, "%s: is a directory, not a plan file (write one with `dflc plan SPEC --yaml FILE`)\n", path);
    fclose(f);
    return DFL_EIO;
  }
  yaml_parser_t ps;
  yaml_document_t yd;
  yaml_parser_initialize(&ps);
  yaml_parser_set_input_file(&ps, f);
  int rc = DFL_OK;
  if (!yaml_parser_load(&ps, &yd)) {
    fprintf(stderr, "%s:%zu:%zu: not valid YAML: %s\n", path, ps.problem_mark.line + 1, ps.problem_mark.column + 1,
            ps.problem ? ps.problem : "?");
    yaml_parser_delete(&ps);
    fclose(f);
    return DFL_EFORMAT;
  }
  yaml_node_t *root = yaml_document_get_root_node(&yd);
  yaml_node_t *devs = y_get(&yd, root, "devices");
  if (!y_sval(&yd, root, "dflc_plan") || !devs || devs->type != YAML_SEQUENCE_NODE) {
    fprintf(stderr, "%s: not a dflc plan file (no 'dflc_plan' key or 'devices' list)\n", path);
    rc = DFL_EFORMAT;
    goto done;
  }
  int nd = (int)(devs->data.sequence.items.top - devs->data.sequence.items.start);
  doc->dev = calloc((size_t)nd + 1, sizeof *doc->dev);
  if (!doc->dev) { rc = DFL_ENOMEM; goto done; }
  for (int k = 0; k < nd && rc == DFL_OK; k++) {
    yaml_node_t *dn = yaml_document_get_node(&yd, devs->data.sequence.items.start[k]);
    dfl_plan_doc_dev *dv = &doc->dev[doc->ndev++];
    const char *nm = y_sval(&yd, dn, "device");
    snprintf(dv->name, sizeof dv->name, "%s", nm ? nm : "?");
    if (!y_ival(&yd, dn, "arena_bytes", &dv->arena_bytes) || !y_ival(&yd, dn, "persistent_bytes", &dv->persistent_bytes) ||
        !y_ival(&yd, dn, "step_bytes", &dv->step_bytes) || !y_ival(&yd, dn, "step_lower_bound", &dv->lower_bound)) {
      fprintf(stderr, "%s: device %d lacks arena_bytes/persistent_bytes/step_bytes/step_lower_bound\n", path, k);
      rc = DFL_EFORMAT;
      break;
    }
    yaml_node_t *cats = y_get(&yd, dn, "categories");
    for (int c = 0; c < DFL_PCAT_COUNT; c++) y_ival(&yd, cats, dfl_plan_cat_name(c), &dv->cat_bytes[c]);
    yaml_node_t *bufs = y_get(&yd, dn, "buffers");
    if (!bufs || bufs->type != YAML_SEQUENCE_NODE) {
      fprintf(stderr, "%s: device '%s' has no 'buffers' list\n", path, dv->name);
      rc = DFL_EFORMAT;
      break;
    }
    int nb = (int)(bufs->data.sequence.items.top - bufs->data.sequence.items.start);
    dv->buf = calloc((size_t)nb + 1, sizeof *dv->buf);
    if (!dv->buf) { rc = DFL_ENOMEM; break; }
    for (int j = 0; j < nb; j++) {
      yaml_node_t *bn = yaml_document_get_node(&yd, bufs->data.sequence.items.start[j]);
      dfl_plan_doc_buf *x = &dv->buf[dv->nbuf++];
      int64_t first = -1, last = -1;
      const char *s;
      if ((s = y_sval(&yd, bn, "name"))) snprintf(x->name, sizeof x->name, "%s", s);
      if ((s = y_sval(&yd, bn, "kind"))) snprintf(x->kind, sizeof x->kind, "%s", s);
      if ((s = y_sval(&yd, bn, "category"))) snprintf(x->cat, sizeof x->cat, "%s", s);
      if (!y_ival(&yd, bn, "offset", &x->offset) || !y_ival(&yd, bn, "size", &x->size) ||
          !y_ival(&yd, bn, "first", &first) || !y_ival(&yd, bn, "last", &last)) {
        fprintf(stderr, "%s: device '%s' buffer %d ('%s') lacks offset/size/first/last\n", path, dv->name, j, x->name);
        rc = DFL_EFORMAT;
        break;
      }
      x->first = (int)first;
      x->last = (int)last;
      x->alias = -1;
    }
    for (int j = 0; j < dv->nbuf && rc == DFL_OK; j++) { /* ids may be listed after their users */
      yaml_node_t *bj = yaml_document_get_node(&yd, bufs->data.sequence.items.start[j]);
      int64_t want, id;
      if (!y_ival(&yd, bj, "inplace_of", &want)) continue;
      for (int i = 0; i < dv->nbuf; i++) {
        yaml_node_t *bi = yaml_document_get_node(&yd, bufs->data.sequence.items.start[i]);
        if (y_ival(&yd, bi, "id", &id) && id == want) dv->buf[j].alias = i;
      }
    }
  }
done:
  if (rc != DFL_OK) dfl_plan_doc_free(doc);
  yaml_document_delete(&yd);
  yaml_parser_delete(&ps);
  fclose(f);
  return rc;
}

int dfl_plan_doc_from(dfl_plan_doc *doc, const dfl_plan_dev *d, int n) {
  memset(doc, 0, sizeof *doc);
  doc->dev = calloc((size_t)n + 1, sizeof *doc->dev);
  if (!doc->dev) return DFL_ENOMEM;
  for (int k = 0; k < n; k++) {
    const dfl_plan *p = d[k].p;
    dfl_plan_doc_dev *dv = &doc->dev[doc->ndev++];
    snprintf(dv->name, sizeof dv->name, "%s", d[k].name);
    dv->arena_bytes = p->arena_bytes;
    dv->persistent_bytes = p->persistent_bytes;
    dv->step_bytes = p->step_bytes;
    dv->lower_bound = p->step_lower_bound;
    memcpy(dv->cat_bytes, p->cat_bytes, sizeof dv->cat_bytes);
    dv->buf = calloc((size_t)p->nbuf + 1, sizeof *dv->buf);
    if (!dv->buf) { dfl_plan_doc_free(doc); return DFL_ENOMEM; }
    for (int b = 0; b < p->nbuf; b++) {
      if (p->offset[b] < 0) continue;
      dfl_plan_doc_buf *x = &dv->buf[dv->nbuf++];
      snprintf(x->name, sizeof x->name, "%s", dfl_plan_buf_name(p, d[k].g, b));
      snprintf(x->kind, sizeof x->kind, "%s", buf_kind(p, d[k].g, b));
      snprintf(x->cat, sizeof x->cat, "%s", dfl_plan_cat_name(p->cat[b]));
      x->offset = p->offset[b];
      x->size = p->size[b];
      x->first = p->first[b];
      x->last = p->last[b];
      x->alias = -1;
    }
  }
  return DFL_OK;
}

/* --- diff ------------------------------------------------------------------------------------- */

static const dfl_plan_doc_buf *find_buf(const dfl_plan_doc_dev *d, const char *name) {
  for (int i = 0; i < d->nbuf; i++)
    if (!strcmp(d->buf[i].name, name)) return &d->buf[i];
  return NULL;
}

static void diff_line(FILE *f, const char *what, int64_t a, int64_t b) {
  char s1[32], s2[32], s3[32];
  fprintf(f, "    %-40s %12s -> %12s  (%s%s)\n", what, dfl_plan_bytes_str(s1, sizeof s1, a),
          dfl_plan_bytes_str(s2, sizeof s2, b), b >= a ? "+" : "", dfl_plan_bytes_str(s3, sizeof s3, b - a));
}

void dfl_plan_diff(FILE *f, const dfl_plan_doc *before, const dfl_plan_doc *after) {
  for (int k = 0; k < after->ndev || k < before->ndev; k++) {
    const dfl_plan_doc_dev *a = NULL, *b = k < after->ndev ? &after->dev[k] : NULL;
    const char *nm = b ? b->name : before->dev[k].name;
    for (int j = 0; j < before->ndev; j++)
      if (!strcmp(before->dev[j].name, nm)) a = &before->dev[j];
    if (!a) { fprintf(f, "device %s: only in the new plan\n", nm); continue; }
    if (!b) { fprintf(f, "device %s: only in the old plan\n", nm); continue; }
    fprintf(f, "device %s: total %s\n", nm, a->arena_bytes == b->arena_bytes ? "unchanged" : "changed");
    diff_line(f, "total", a->arena_bytes, b->arena_bytes);
    diff_line(f, "per-step region", a->step_bytes, b->step_bytes);
    diff_line(f, "lower bound", a->lower_bound, b->lower_bound);
    for (int c = 0; c < DFL_PCAT_COUNT; c++)
      if (a->cat_bytes[c] != b->cat_bytes[c]) diff_line(f, dfl_plan_cat_name(c), a->cat_bytes[c], b->cat_bytes[c]);
    int shown = 0, same = 0;
    for (int i = 0; i < b->nbuf; i++) {
      const dfl_plan_doc_buf *x = find_buf(a, b->buf[i].name);
      if (x && x->size == b->buf[i].size) { same++; continue; }
      if (!shown++) fprintf(f, "  buffers (name: before -> after):\n");
      diff_line(f, b->buf[i].name, x ? x->size : 0, b->buf[i].size);
    }
    for (int i = 0; i < a->nbuf; i++)
      if (!find_buf(b, a->buf[i].name)) {
        if (!shown++) fprintf(f, "  buffers (name: before -> after):\n");
        diff_line(f, a->buf[i].name, a->buf[i].size, 0);
      }
    fprintf(f, "  %d buffers changed, %d the same size\n", shown, same);
  }
}

/* --- HTML ------------------------------------------------------------------------------------- */

static void html_esc(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '<') fputs("&lt;", f);
    else if (*s == '>') fputs("&gt;", f);
    else if (*s == '&') fputs("&amp;", f);
    else if (*s == '"') fputs("&quot;", f);
    else fputc(*s, f);
  }
}

static const char *cat_color[DFL_PCAT_COUNT] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                                "#59a14f", "#edc948", "#b07aa1", "#ff9da7"};
static const char *phase_color[DFL_PH_COUNT] = {"#9c755f", "#4e79a7", "#edc948", "#e15759", "#76b7b2"};

static void html_device(FILE *f, const dfl_plan_dev *d) {
  const dfl_plan *p = d->p;
  const dfl_graph *g = d->g;
  char b1[32], b2[32];
  const double W = 1100, H = 520, X0 = 60;
  int nops = g->nops > 0 ? g->nops : 1;
  double step = p->step_bytes > 0 ? (double)p->step_bytes : 1.0;
  fprintf(f, "<section class=\"device\" data-device=\"");
  html_esc(f, d->name);
  fprintf(f, "\"><h2>");
  html_esc(f, d->name);
  fprintf(f, " (%s)</h2>\n<p>total %s", d->role, dfl_plan_bytes_str(b1, sizeof b1, p->arena_bytes));
  fprintf(f, "; per-step region %s, lower bound %s, ratio %.3f; peak at op %d &lsquo;",
          dfl_plan_bytes_str(b1, sizeof b1, p->step_bytes), dfl_plan_bytes_str(b2, sizeof b2, p->step_lower_bound),
          p->step_lower_bound > 0 ? (double)p->step_bytes / (double)p->step_lower_bound : 1.0, p->peak_op);
  html_esc(f, op_label(g, p->peak_op));
  fprintf(f, "&rsquo;.</p>\n<table><tr><th>part</th><th>bytes</th></tr>\n");
  for (int c = 0; c < DFL_PCAT_COUNT; c++)
    fprintf(f, "<tr><td><span class=\"sw\" style=\"background:%s\"></span>%s</td><td>%s</td></tr>\n", cat_color[c],
            dfl_plan_cat_name(c), dfl_plan_bytes_str(b1, sizeof b1, p->cat_bytes[c]));
  fprintf(f, "</table>\n");

  /* per-step region: x = op index (time), y = offset; one rect per buffer */
  fprintf(f, "<h3>per-step region: offset by time</h3>\n");
  fprintf(f, "<svg class=\"timeline\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
             "xmlns=\"http://www.w3.org/2000/svg\">\n", W + X0 + 10, H + 40, W + X0 + 10, H + 40);
  for (int i = 0; i < g->nops; i++) { /* phase band along the time axis */
    dfl_phase ph = g->ops[i].phase;
    int j = i;
    while (j + 1 < g->nops && g->ops[j + 1].phase == ph) j++;
    fprintf(f, "<g class=\"phase\"><line x1=\"%.2f\" y1=\"%.0f\" x2=\"%.2f\" y2=\"%.0f\" stroke=\"%s\" "
               "stroke-width=\"6\"><title>%s: ops %d..%d</title></line></g>\n",
            X0 + W * i / nops, H + 8, X0 + W * (j + 1) / nops, H + 8, phase_color[ph], dfl_phase_name(ph), i, j);
    i = j;
  }
  fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\">op index (schedule) &#8594;</text>\n", X0, H + 30);
  fprintf(f, "<text x=\"2\" y=\"12\" font-size=\"11\">%s</text><text x=\"2\" y=\"%.0f\" font-size=\"11\">0</text>\n",
          dfl_plan_bytes_str(b1, sizeof b1, p->step_bytes), H);
  for (int b = 0; b < p->nbuf; b++) {
    if (p->offset[b] < 0 || p->first[b] < 0) continue;
    double x = X0 + W * p->first[b] / nops, w = W * (p->last[b] - p->first[b] + 1) / nops;
    double h = H * (double)p->size[b] / step, y = H - H * (double)(p->offset[b] - p->persistent_bytes) / step - h;
    if (h < 0.5) { y -= 0.5 - h; h = 0.5; }
    fprintf(f, "<rect class=\"buf\" data-name=\"");
    html_esc(f, dfl_plan_buf_name(p, g, b));
    fprintf(f, "\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"><title>", x, y, w, h,
            cat_color[p->cat[b]]);
    html_esc(f, dfl_plan_buf_name(p, g, b));
    fprintf(f, " %s @%lld, ops %d..%d (", dfl_plan_bytes_str(b1, sizeof b1, p->size[b]),
            (long long)(p->offset[b] - p->persistent_bytes), p->first[b], p->last[b]);
    html_esc(f, op_label(g, p->first[b]));
    fputs(" .. ", f);
    html_esc(f, op_label(g, p->last[b]));
    fprintf(f, ")</title></rect>\n");
  }
  if (p->peak_op >= 0)
    fprintf(f, "<line x1=\"%.2f\" y1=\"0\" x2=\"%.2f\" y2=\"%.0f\" stroke=\"#000\" stroke-dasharray=\"4 3\">"
               "<title>peak: op %d</title></line>\n", X0 + W * (p->peak_op + 0.5) / nops,
            X0 + W * (p->peak_op + 0.5) / nops, H, p->peak_op);
  fprintf(f, "<rect x=\"%.0f\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#888\"/>\n", X0, W, H);
  fprintf(f, "</svg>\n");

  /* persistent region: one bar, a rect per buffer */
  double pers = p->persistent_bytes > 0 ? (double)p->persistent_bytes : 1.0;
  fprintf(f, "<h3>persistent region (%s)</h3>\n<svg class=\"persistent\" width=\"%.0f\" height=\"40\" "
             "xmlns=\"http://www.w3.org/2000/svg\">\n", dfl_plan_bytes_str(b1, sizeof b1, p->persistent_bytes),
          W + X0 + 10);
  for (int b = 0; b < p->nbuf; b++) {
    if (p->offset[b] < 0 || p->first[b] >= 0) continue;
    double x = X0 + W * (double)p->offset[b] / pers, w = W * (double)p->size[b] / pers;
    fprintf(f, "<rect class=\"pbuf\" data-name=\"");
    html_esc(f, dfl_plan_buf_name(p, g, b));
    fprintf(f, "\" x=\"%.3f\" y=\"4\" width=\"%.3f\" height=\"30\" fill=\"%s\" stroke=\"#fff\" stroke-width=\"0.2\"><title>",
            x, w < 0.05 ? 0.05 : w, cat_color[p->cat[b]]);
    html_esc(f, dfl_plan_buf_name(p, g, b));
    fprintf(f, " (%s) %s @%lld</title></rect>\n", dfl_plan_cat_name(p->cat[b]),
            dfl_plan_bytes_str(b1, sizeof b1, p->size[b]), (long long)p->offset[b]);
  }
  fprintf(f, "</svg>\n</section>\n");
}

int dfl_plan_write_html(FILE *f, const char *spec_file, const dfl_plan_dev *d, int n) {
  fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>dflc plan: ");
  html_esc(f, spec_file ? spec_file : "");
  fprintf(f, "</title>\n<style>body{font:13px sans-serif;margin:16px}table{border-collapse:collapse}"
             "td,th{padding:1px 8px;text-align:right}td:first-child{text-align:left}"
             ".sw{display:inline-block;width:10px;height:10px;margin-right:4px}"
             "rect.buf:hover,rect.pbuf:hover{stroke:#000;stroke-width:1}</style></head>\n<body>\n<h1>memory plan of ");
  html_esc(f, spec_file ? spec_file : "");
  fprintf(f, "</h1>\n<p>Hover a rectangle to name its buffer. Time runs left to right over the schedule; "
             "height is bytes.</p>\n");
  for (int k = 0; k < n; k++) html_device(f, &d[k]);
  fprintf(f, "</body></html>\n");
  return ferror(f) ? DFL_EIO : DFL_OK;
}
