/*
** check_topology.c: nodes, devices, roles, the hidden-state queue and memory budgets.
**
** Devices are named `gpuN` / `cpuN` on a node, or `NODE.gpuN` when there are several nodes;
** `gpu0..gpu4` (or `gpu0..4`) is a range. A device listed under both `target` and `drafter`
** is colocated, which the spec must say with `colocate = true`.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/front_internal.h"

static const dfl_kdef node_keys[] = {
  {"gpus", K_INT, 0, 1024, 0, 0, 0, "gpus = 8"},
  {"cpus", K_INT, 0, 1024, 0, 0, 0, "cpus = 1"},
  {0}};
static const dfl_sdef node_schema = {"topology.node", node_keys, "*"};

static const dfl_kdef queue_keys[] = {
  {"depth", K_INT, 1, 1000000, 0, 0, 0, "depth = 8"},
  {"prefetch", K_INT, 0, 1000000, 0, 0, 0, "prefetch = 2"},
  {0}};
static const dfl_sdef queue_schema = {"topology.queue", queue_keys, NULL};

static const dfl_kdef topology_keys[] = {
  {"node", K_BLOCK, 0, 0, 0, &node_schema, 1, "node n0 { gpus = 8 }"},
  {"gpus", K_INT, 0, 1024, 0, 0, 0, "gpus = 1"},
  {"cpus", K_INT, 0, 1024, 0, 0, 0, "cpus = 1"},
  {"target", K_ANY, 0, 0, 0, 0, 0, "target = [gpu0]"},
  {"drafter", K_ANY, 0, 0, 0, 0, 0, "drafter = [gpu1]"},
  {"colocate", K_BOOL, 0, 0, 0, 0, 0, "colocate = true"},
  {"queue", K_BLOCK, 0, 0, 0, &queue_schema, 0, "queue { depth = 8 }"},
  {"memory", K_BLOCK, 0, 0, 0, NULL, 0, "memory { default = 80GiB }"},
  {0}};
const dfl_sdef dfl_topology_schema = {"topology", topology_keys, NULL};

typedef struct {
  const char *name;
  dfl_loc loc;
  int gpus, cpus;
} node_t;

typedef struct {
  node_t nodes[DFL_MAX_NODES];
  int n;
} nodes_t;

/* A device reference resolved: node, kind, index range [lo, hi]. */
typedef struct { int node, kind, lo, hi; } dref;

static int parse_one(const char *s, const char **node, size_t *node_len, int *kind, int *index, const char **end) {
  const char *p = s;
  const char *dot = NULL;
  for (const char *q = s; *q && !(q[0] == '.' && q[1] == '.'); q++)
    if (*q == '.') { dot = q; break; }
  *node = NULL;
  *node_len = 0;
  if (dot) { *node = s; *node_len = (size_t)(dot - s); p = dot + 1; }
  if (!strncmp(p, "gpu", 3)) *kind = DFL_DEV_GPU;
  else if (!strncmp(p, "cpu", 3)) *kind = DFL_DEV_CPU;
  else return 0;
  p += 3;
  if (*p < '0' || *p > '9') return 0;
  long v = 0;
  while (*p >= '0' && *p <= '9') { v = v * 10 + (*p - '0'); if (v > 1000000) return 0; p++; }
  *index = (int)v;
  *end = p;
  return 1;
}

static const char *kind_name(int k) { return k == DFL_DEV_GPU ? "gpu" : "cpu"; }

/* Resolve `[NODE.]KINDi[..[[NODE.]KIND]j]`. Errors are reported at v. */
static int resolve_ref(const nodes_t *ns, dfl_node *v, dref *out) {
  if (v->bad) return 0;
  if (v->kind != DFL_V_IDENT) {
    dfl_diag_error(v->loc, "a device is a name like `gpu0`, `cpu0` or `n1.gpu3`, not %s", dfl_vkind_name(v->kind));
    return 0;
  }
  const char *node, *end;
  size_t nl;
  int kind, lo;
  if (!parse_one(v->s, &node, &nl, &kind, &lo, &end)) {
    dfl_diag_error(v->loc, "`%s` is not a device", v->s);
    dfl_diag_help("devices are `gpuN` or `cpuN`, `NODE.gpuN` with several nodes, and ranges like `gpu0..gpu4`");
    return 0;
  }
  int hi = lo;
  if (end[0] == '.' && end[1] == '.') {
    const char *q = end + 2;
    if (*q >= '0' && *q <= '9') {
      long x = 0;
      while (*q >= '0' && *q <= '9') { x = x * 10 + (*q - '0'); if (x > 1000000) break; q++; }
      hi = (int)x;
      end = q;
    } else {
      const char *n2, *e2;
      size_t nl2;
      int k2, i2;
      if (!parse_one(q, &n2, &nl2, &k2, &i2, &e2) || k2 != kind ||
          (n2 && (!node || nl2 != nl || strncmp(n2, node, nl)))) {
        dfl_diag_error(v->loc, "bad device range `%s`", v->s);
        dfl_diag_help("a range stays on one node and one kind: `gpu0..gpu4` or `n1.gpu0..gpu7`");
        return 0;
      }
      hi = i2;
      end = e2;
    }
  }
  if (*end) {
    dfl_diag_error(v->loc, "`%s` is not a device", v->s);
    dfl_diag_help("devices are `gpuN` or `cpuN`, `NODE.gpuN` with several nodes, and ranges like `gpu0..gpu4`");
    return 0;
  }
  if (hi < lo) {
    dfl_diag_error(v->loc, "empty device range `%s`", v->s);
    return 0;
  }
  int ni = -1;
  if (node) {
    for (int i = 0; i < ns->n; i++)
      if (strlen(ns->nodes[i].name) == nl && !strncmp(ns->nodes[i].name, node, nl)) ni = i;
    if (ni < 0) {
      dfl_diag_error(v->loc, "unknown node `%.*s`", (int)nl, node);
      if (ns->n == 1) dfl_diag_help("the only node is `%s`", ns->nodes[0].name);
      else dfl_diag_help("declare it with `node %.*s { gpus = 8 }`", (int)nl, node);
      return 0;
    }
  } else if (ns->n == 1) {
    ni = 0;
  } else {
    dfl_diag_error(v->loc, "`%s` is ambiguous with %d nodes", v->s, ns->n);
    dfl_diag_help("name the node: `%s.%s`", ns->nodes[0].name, v->s);
    return 0;
  }
  const node_t *n = &ns->nodes[ni];
  int count = kind == DFL_DEV_GPU ? n->gpus : n->cpus;
  if (hi >= count) {
    if (count == 0)
      dfl_diag_error(v->loc, "device `%s` does not exist: node `%s` has no %ss", v->s, n->name, kind_name(kind));
    else
      dfl_diag_error(v->loc, "device `%s` does not exist: node `%s` has %s0..%s%d", v->s, n->name, kind_name(kind),
                     kind_name(kind), count - 1);
    if (kind == DFL_DEV_GPU) dfl_diag_help("declare the GPUs: `gpus = %d`%s", hi + 1, ns->n > 1 || n->loc.src ? " in the node" : " in `topology`");
    return 0;
  }
  out->node = ni;
  out->kind = kind;
  out->lo = lo;
  out->hi = hi;
  return 1;
}

typedef struct {
  dfl_device dev;
  dfl_loc target_loc, drafter_loc;
} slot_t;

typedef struct {
  slot_t *s;
  int n, cap;
  int full;
} devset;

static slot_t *find_dev(devset *d, int node, int kind, int index, int add) {
  for (int i = 0; i < d->n; i++)
    if (d->s[i].dev.node == node && (int)d->s[i].dev.kind == kind && d->s[i].dev.index == index) return &d->s[i];
  if (!add) return NULL;
  if (d->n == DFL_MAX_DEVICES) { d->full = 1; return NULL; }
  slot_t *x = &d->s[d->n++];
  memset(x, 0, sizeof *x);
  x->dev.node = node;
  x->dev.kind = (dfl_device_kind)kind;
  x->dev.index = index;
  return x;
}

/* Assign a role to each device of the value (one name or a list). */
static void roles(dfl_check *c, const nodes_t *ns, devset *ds, dfl_node *v, int drafter, int colocate) {
  dfl_node one = *v;
  if (v->kind != DFL_V_LIST) { one.kind = DFL_V_LIST; one.kids = v; one.nkids = 1; v->next = NULL; v = &one; }
  if (v->nkids == 0) {
    dfl_diag_error(v->loc, "no %s devices", drafter ? "drafter" : "target");
    return;
  }
  for (dfl_node *e = v->kids; e; e = e->next) {
    dref r;
    if (!resolve_ref(ns, e, &r)) continue;
    for (int i = r.lo; i <= r.hi; i++) {
      slot_t *s = find_dev(ds, r.node, r.kind, i, 1);
      if (!s) {
        if (ds->full == 1) { dfl_diag_error(e->loc, "more than %d devices", DFL_MAX_DEVICES); ds->full = 2; }
        break;
      }
      dfl_loc *mine = drafter ? &s->drafter_loc : &s->target_loc;
      int *flag = drafter ? &s->dev.runs_drafter : &s->dev.runs_target;
      if (*flag) {
        dfl_diag_error(e->loc, "%s.%s%d is listed twice as a %s device", ns->nodes[r.node].name, kind_name(r.kind), i,
                       drafter ? "drafter" : "target");
        dfl_diag_note(*mine, "first listed here");
        break;
      }
      *flag = 1;
      *mine = e->loc;
      if (drafter && s->dev.runs_target && !colocate) {
        dfl_diag_error(e->loc, "%s.%s%d runs both the target and the drafter", ns->nodes[r.node].name, kind_name(r.kind), i);
        dfl_diag_note(s->target_loc, "it is a target device here");
        dfl_diag_help("to share one device between the target and the drafter, set `colocate = true` in `topology`");
      }
    }
  }
  (void)c;
}

static int cmp_dev(const void *a, const void *b) {
  const dfl_device *x = &((const slot_t *)a)->dev, *y = &((const slot_t *)b)->dev;
  if (x->node != y->node) return x->node - y->node;
  if (x->kind != y->kind) return (int)x->kind - (int)y->kind;
  return x->index - y->index;
}

void dfl_check_topology(dfl_check *c) {
  dfl_spec *s = c->spec;
  dfl_sect *t = c->topology;
  nodes_t *ns = calloc(1, sizeof *ns);
  devset ds = {calloc(DFL_MAX_DEVICES, sizeof(slot_t)), 0, DFL_MAX_DEVICES, 0};
  if (!ns || !ds.s) {
    dfl_diag_error(dfl_loc_none, "out of memory");
    free(ns);
    free(ds.s);
    return;
  }

  /* nodes */
  dfl_node *first_node = NULL;
  if (t->node)
    for (dfl_node *e = t->node->kids; e; e = e->next) {
      if (strcmp(e->key, "node") || e->kind != DFL_V_BLOCK) continue;
      dfl_sect ns_sect;
      dfl_check_walk(c, &node_schema, e, &ns_sect);
      if (!first_node) first_node = e;
      if (!e->label) continue;
      int dup = -1;
      for (int i = 0; i < ns->n; i++) if (!strcmp(ns->nodes[i].name, e->label)) dup = i;
      if (dup >= 0) {
        dfl_diag_error(e->label_loc, "duplicate node `%s`", e->label);
        dfl_diag_note(ns->nodes[dup].loc, "first defined here");
        continue;
      }
      if (strchr(e->label, '.')) {
        dfl_diag_error(e->label_loc, "a node name can not contain `.`");
        continue;
      }
      if (ns->n == DFL_MAX_NODES) {
        dfl_diag_error(e->label_loc, "more than %d nodes", DFL_MAX_NODES);
        break;
      }
      node_t *n = &ns->nodes[ns->n++];
      n->name = e->label;
      n->loc = e->label_loc;
      n->gpus = (int)dfl_check_int(&ns_sect, "gpus", 0);
      n->cpus = (int)dfl_check_int(&ns_sect, "cpus", 1);
    }
  if (first_node) {
    static const char *const single[] = {"gpus", "cpus"};
    for (int i = 0; i < 2; i++)
      if (dfl_check_get(t, single[i])) {
        dfl_diag_error(dfl_check_where(t, single[i]), "`%s` at the topology level describes a single node, but `node` blocks are given",
                       single[i]);
        dfl_diag_help("move `%s` into each `node NAME { ... }`", single[i]);
      }
  }
  if (ns->n == 0) {
    /* one implicit node */
    ns->n = 1;
    ns->nodes[0].name = "n0";
    ns->nodes[0].loc = dfl_loc_none;
    ns->nodes[0].gpus = (int)dfl_check_int(t, "gpus", 0);
    ns->nodes[0].cpus = (int)dfl_check_int(t, "cpus", 1);
  }
  s->n_nodes = ns->n;

  /* roles */
  int errors_before_roles = dfl_diag_errors();
  int colocate = (int)dfl_check_int(t, "colocate", 0);
  dfl_node *tv = dfl_check_get(t, "target"), *dv = dfl_check_get(t, "drafter");
  if (!t->node) {
    /* no topology: everything on the host CPU */
    slot_t *x = find_dev(&ds, 0, DFL_DEV_CPU, 0, 1);
    x->dev.runs_target = x->dev.runs_drafter = 1;
  } else {
    if (tv) roles(c, ns, &ds, tv, 0, colocate);
    else if (!dfl_check_has(t, "target")) {
      dfl_diag_error(t->node->key_loc, "missing key `target` in section `topology`");
      dfl_diag_help("add `target = [gpu0]`: the devices that run the frozen target");
    }
    if (dv) roles(c, ns, &ds, dv, 1, colocate);
    else if (!dfl_check_has(t, "drafter")) {
      dfl_diag_error(t->node->key_loc, "missing key `drafter` in section `topology`");
      dfl_diag_help("add `drafter = [gpu1]`: the devices that train the drafter");
    }
    if (colocate && tv && dv) {
      int shared = 0;
      for (int i = 0; i < ds.n; i++) shared |= ds.s[i].dev.runs_target && ds.s[i].dev.runs_drafter;
      if (!shared) dfl_diag_warning(dfl_check_where(t, "colocate"), "`colocate = true`, but no device runs both the target and the drafter");
    }
  }
  qsort(ds.s, (size_t)ds.n, sizeof(slot_t), cmp_dev);

  /* memory budgets: `default` and per-device overrides */
  dfl_node *mem = dfl_check_get(t, "memory");
  int64_t dflt = 0;
  if (mem) {
    for (dfl_node *e = mem->kids; e; e = e->next) {
      for (dfl_node *f = mem->kids; f != e; f = f->next)
        if (!strcmp(f->key, e->key)) {
          dfl_diag_error(e->key_loc, "duplicate key `%s` in section `topology.memory`", e->key);
          dfl_diag_note(f->key_loc, "first set here");
          goto next;
        }
      if (e->kind == DFL_V_BLOCK || !e->value) {
        dfl_diag_error(e->key_loc, "`%s` in `memory` must be a size", e->key);
        dfl_diag_help("write `%s = 80GiB`", e->key);
        continue;
      }
      dfl_node *v = e->value;
      if (v->bad) continue;
      if ((v->kind != DFL_V_SIZE && v->kind != DFL_V_INT) || v->i <= 0) {
        dfl_diag_error(v->loc, "memory budget must be a positive size, like 80GiB");
        continue;
      }
      if (!strcmp(e->key, "default")) { dflt = v->i; continue; }
      dfl_node ref = *e;
      ref.kind = DFL_V_IDENT;
      ref.s = e->key;
      ref.loc = e->key_loc;
      dref r;
      if (!resolve_ref(ns, &ref, &r)) continue;
      int any = 0;
      for (int i = r.lo; i <= r.hi; i++) {
        slot_t *x = find_dev(&ds, r.node, r.kind, i, 0);
        if (x) { x->dev.memory_budget = v->i; any = 1; }
      }
      if (!any) dfl_diag_warning(e->key_loc, "`%s` has a memory budget but runs neither the target nor the drafter", e->key);
    next:;
    }
  }
  for (int i = 0; i < ds.n; i++) if (!ds.s[i].dev.memory_budget) ds.s[i].dev.memory_budget = dflt;

  s->n_devices = ds.n;
  for (int i = 0; i < ds.n; i++) s->devices[i] = ds.s[i].dev;
  int n_target = dfl_spec_count_role(s, 1, 0), n_drafter = dfl_spec_count_role(s, 0, 1);

  /* declared GPUs without a role are probably a mistake */
  for (int k = 0; k < ns->n && t->node; k++) {
    int idle = 0;
    for (int g = 0; g < ns->nodes[k].gpus; g++) if (!find_dev(&ds, k, DFL_DEV_GPU, g, 0)) idle++;
    if (idle && tv && dv && dfl_diag_errors() == errors_before_roles)
      dfl_diag_warning(ns->nodes[k].loc.src ? ns->nodes[k].loc : dfl_check_where(t, "gpus"),
                       "%d of the %d GPUs of node `%s` run neither the target nor the drafter", idle, ns->nodes[k].gpus,
                       ns->nodes[k].name);
  }

  /* the queue: deep enough that every target device can have a batch in flight and one ready */
  dfl_sect *q = NULL;
  for (int i = 0; dfl_topology_schema.keys[i].name; i++)
    if (!strcmp(dfl_topology_schema.keys[i].name, "queue")) q = t->kid[i];
  int want = 2 * (n_target > 0 ? n_target : 1);
  s->queue_depth = q ? (int)dfl_check_int(q, "depth", want) : want;
  s->prefetch = q ? (int)dfl_check_int(q, "prefetch", 2) : 2;
  if (q && dfl_check_get(q, "depth") && s->queue_depth < want) {
    dfl_diag_warning(dfl_check_where(q, "depth"), "queue depth %d is too shallow to hide the latency of %d target device%s",
                     s->queue_depth, n_target, n_target == 1 ? "" : "s");
    dfl_diag_help("use depth >= %d (2 per target device: one batch being filled, one ready)", want);
  }

  /* data parallel drafters split each batch evenly */
  if (n_drafter > 0 && s->batch > 0 && s->batch % n_drafter) {
    dfl_diag_error(dfl_check_where(c->data, "batch"), "batch %d does not split evenly over %d drafter devices", s->batch, n_drafter);
    dfl_diag_help("`batch` counts sequences per step over all drafter devices; use a multiple of %d", n_drafter);
  }
  /* soft labels on a drafter device of its own: the queue carries the target's final hidden state as one
  ** more block after the taps (models/target.c DFL_TARGET_WITH_FINAL), one concatenation of at most
  ** DFL_MAX_FEATURE_BLOCKS blocks */
  for (int i = 0; i < s->n_devices && s->kd_alpha > 0 && dfl_diag_errors() == errors_before_roles; i++) {
    const dfl_device *d = &s->devices[i];
    if (!d->runs_drafter || d->runs_target || s->n_taps + 1 <= DFL_MAX_FEATURE_BLOCKS) continue;
    dfl_diag_error(dfl_check_where(c->loss, "labels"), "soft labels on a drafter device of its own (%s%d) send the "
                   "target's final hidden state beside its %d taps: at most %d taps then",
                   d->kind == DFL_DEV_GPU ? "gpu" : "cpu", d->index, s->n_taps, DFL_MAX_FEATURE_BLOCKS - 1);
    dfl_diag_help("tap at most %d layers, or colocate target and drafter (`colocate = true`)", DFL_MAX_FEATURE_BLOCKS - 1);
    break;
  }
  free(ns);
  free(ds.s);
}
