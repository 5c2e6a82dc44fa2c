/*
** cmd_plan.c: `dflc plan SPEC.dfl [--device N] [--yaml FILE] [--html FILE] [--diff OLD.yaml]
**                                 [--budget BYTES] [--no-inplace] [--quiet]`
**
** Builds every device's graph from the spec alone (shapes come from config.json; no weights are
** read), plans it, and reports. Devices: a drafter device gets the training graph (with the target
** forward when colocated); a target-only device gets the target forward for one micro-batch, whose
** tapped features are copied into a queue slot (so they stay live to the end of the step). Around
** the graph's tensors the plan holds fixed workspaces: hidden-state queue slots on both sides of a
** split topology and, on GPUs, exactly the workspaces the CUDA backend allocates
** (dfl_plan_cuda_workspaces: cuBLASLt's, the fused CE's per-chunk scratch, other ops' scratch), so
** the total printed is what the trainer's arena holds.
** Over a budget, forward ops are recomputed in the backward to fit; if nothing fits, the command
** fails with the numbers and, for each shape knob, the largest value that would fit.
*/
#include <errno.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/cli/cli.h"
#include "compiler/plan.h"
#include "compiler/spec.h"
#include "models/models.h"
#include "runtime/backend.h"
#include "runtime/compile.h"
#include "runtime/cpu/cpu.h"
#ifdef DFL_HAVE_CUDA
#include "compiler/emit.h"
#include "compiler/lower_launch.h"
#endif

/* One device's compiled graph and plan (runtime/compile.c, what train runs) and its report view. */
typedef struct plan_dev {
  dfl_compiled c;
  dfl_plan_dev d;
} plan_dev;

static void free_dev(plan_dev *pd) { dfl_compiled_free(&pd->c); }

/* The memory of the GPUs a GPU device without memory_budget gets as its budget: `--gpu NAME`, else this
** machine's GPU when it has one, else none (set once, before any device is planned). */
static int64_t gpu_memory = -1;
static const char *gpu_name;   /* --gpu's, for the report */
static int64_t plan_gpu_memory(void) {
  if (gpu_memory < 0) gpu_memory = dfl_be_cuda_memory();
  return gpu_memory;
}

/* Compiles and plans device k of s. Returns DFL_OK when it fits its budget (or has none). */
static int plan_device(const dfl_spec *s, int k, int64_t budget_override, int no_inplace, plan_dev *pd) {
  memset(pd, 0, sizeof *pd);
  dfl_compile_req o = {.budget = budget_override, .no_inplace = no_inplace, .device_memory = plan_gpu_memory()};
  int rc = dfl_compile_device(s, k, &o, &pd->c);
  const dfl_compiled *c = &pd->c;
  snprintf(pd->d.name, sizeof pd->d.name, "%s", c->name);
  pd->d.role = c->role;
  pd->d.g = c->g;
  pd->d.p = &c->plan;
  pd->d.budget = c->budget;
  pd->d.n_recomputed = c->r.n_ops;
  pd->d.recompute_flops = c->r.flops;
  pd->d.span_phases = c->span;
  return rc;
}

/* Largest value of one shape knob at most `cur - 1` for which device k fits; 0 if none. */
static int knob_fit(const dfl_spec *s, int k, int64_t budget, int no_inplace, int which, int cur, int lo) {
  dfl_spec *t = malloc(sizeof *t);
  if (!t) return 0;
  int best = 0, hi = cur - 1;
  int nd = dfl_spec_count_role(s, 0, 1), per = which == 0 && nd > 1 ? nd : 1;
  if (which == 0) hi = cur / per - 1; /* search the per-device micro-batch; report the total */
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2;
    *t = *s;
    if (which == 0) t->batch = mid * per;
    else if (which == 1) t->seq_len = mid;
    else if (which == 2) t->anchors = mid;
    else t->vocab_chunk = mid;
    plan_dev pd;
    int ok = plan_device(t, k, budget, no_inplace, &pd) == DFL_OK;
    free_dev(&pd);
    if (ok) { best = mid * (which == 0 ? per : 1); lo = mid + 1; }
    else hi = mid - 1;
  }
  free(t);
  return best;
}

static void explain_no_fit(const dfl_spec *s, int k, const plan_dev *pd, int no_inplace) {
  char b1[32], b2[32], b3[32];
  fprintf(stderr, "%s: error: device %s needs %s but its budget is %s, even recomputing %d forward ops "
                  "(+%.3g FLOPs per step)\n", s->file, pd->d.name, dfl_plan_bytes_str(b1, sizeof b1, pd->c.plan.arena_bytes),
          dfl_plan_bytes_str(b2, sizeof b2, pd->d.budget), pd->d.n_recomputed, pd->d.recompute_flops);
  fprintf(stderr, "  persistent %s (weights %s, optimizer state %s, gradients %s), per-step %s (bound %s)\n",
          dfl_plan_bytes_str(b1, sizeof b1, pd->c.plan.persistent_bytes),
          dfl_plan_bytes_str(b2, sizeof b2, pd->c.plan.cat_bytes[DFL_PCAT_WEIGHTS]),
          dfl_plan_bytes_str(b3, sizeof b3, pd->c.plan.cat_bytes[DFL_PCAT_OPTSTATE]),
          dfl_plan_bytes_str((char[32]){0}, 32, pd->c.plan.cat_bytes[DFL_PCAT_GRADS]),
          dfl_plan_bytes_str((char[32]){0}, 32, pd->c.plan.step_bytes),
          dfl_plan_bytes_str((char[32]){0}, 32, pd->c.plan.step_lower_bound));
  static const char *knob[4] = {"batch", "seq_len", "anchors", "vocab_chunk"};
  int cur[4] = {s->batch, s->seq_len, s->anchors, s->vocab_chunk};
  int lo[4] = {1, s->block_size + 1, 1, 256};
  fprintf(stderr, "  what would fit, changing one knob at a time:\n");
  int any = 0;
  for (int w = 0; w < 4; w++) {
    if (w == 2 && !s->devices[k].runs_drafter) continue; /* a target device has no anchors */
    if (w == 3 && s->devices[k].kind != DFL_DEV_GPU) continue;
    int v = cur[w] > lo[w] ? knob_fit(s, k, pd->d.budget, no_inplace, w, cur[w], lo[w]) : 0;
    if (v > 0) {
      fprintf(stderr, "    %-12s %d (now %d)\n", knob[w], v, cur[w]);
      any = 1;
    } else
      fprintf(stderr, "    %-12s no value fits\n", knob[w]);
  }
  if (!any) fprintf(stderr, "  the persistent part alone may exceed the budget: raise memory_budget or use more devices\n");
}

int64_t dfl_plan_host_memory(void) {
  const char *env = getenv("DFL_HOST_MEMORY");   /* tests: a machine of another size */
  if (env && *env) {
    char *end;
    double v = strtod(env, &end);
    if (end != env && v > 0) return (int64_t)v;
  }
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? (int64_t)pages * page : 0;
}

/* A CPU device without a memory budget is bounded by this machine's memory. */
static int over_host(const dfl_spec *s, int k, const plan_dev *pd) {
  int64_t host = dfl_plan_host_memory();
  return s->devices[k].kind == DFL_DEV_CPU && !pd->d.budget && host > 0 && pd->c.plan.arena_bytes > host;
}

/* A GPU device's planned graph lowered op by op as the CUDA backend lowers it at init (compiler/
** lower_launch.c), for this machine's GPU's row, else for the row `dflc build` compiles for by default
** (sm_90a): the first op no kernel takes goes into *m (its message printed above). Returns its status. */
static int lower_check(const dfl_spec *s, int k, const dfl_compiled *c, dfl_plan_miss *m) {
#ifdef DFL_HAVE_CUDA
  if (s->devices[k].kind != DFL_DEV_GPU || !c->planned || !c->g || c->plan_cpu) return DFL_OK;
  dfl_gpu_arch row;
  int cc = dfl_be_cuda_cc(), bad;
  const char *arch = cc && dfl_emit_gpu_for_cc(cc, NULL, &row) == DFL_OK ? row.arch : "sm_90a";
  int rc = dfl_lower_check(c->g, c->plan.offset, arch, &bad);
  if (rc && bad >= 0) {
    snprintf(m->op, sizeof m->op, "%s (%s)", c->g->ops[bad].label, dfl_opcode_name(c->g->ops[bad].code));
    snprintf(m->arch, sizeof m->arch, "%s", arch);
    m->lower = rc;
    return rc;
  }
#else
  (void)s, (void)k, (void)c, (void)m;
#endif
  return DFL_OK;
}

int dfl_plan_verdict(const dfl_spec *s, dfl_plan_miss *miss, int max_miss, dfl_compiled *one) {
  int n = 0;
  for (int k = 0; k < s->n_devices; k++) {
    plan_dev pd;
    int rc;
    if (one && s->n_devices == 1 && one->g) {   /* the caller's graph, planned here and kept */
      memset(&pd, 0, sizeof pd);
      dfl_compile_req req = {.device_memory = plan_gpu_memory()};
      rc = dfl_compile_plan(s, &req, one);
      pd.c = *one;
      pd.d.budget = one->budget;
      snprintf(pd.d.name, sizeof pd.d.name, "%s", one->name);
    } else
      rc = plan_device(s, k, 0, 0, &pd);
    int host = rc == DFL_OK && over_host(s, k, &pd);
    dfl_plan_miss low;
    memset(&low, 0, sizeof low);
    int lrc = lower_check(s, k, &pd.c, &low);
    if ((rc != DFL_OK || host || lrc) && n < max_miss) {
      dfl_plan_miss *m = &miss[n];
      *m = low;
      snprintf(m->device, sizeof m->device, "%s", pd.d.name);
      m->device_index = k;
      m->failed = !pd.c.planned;
      m->need = pd.c.plan.offset ? pd.c.plan.arena_bytes : 0;
      m->budget = host ? dfl_plan_host_memory() : pd.d.budget;
      m->host = host;
      m->persistent = pd.c.plan.offset ? pd.c.plan.persistent_bytes : 0;
      m->step = pd.c.plan.offset ? pd.c.plan.step_bytes : 0;
      m->mem = rc != DFL_OK || host;
    }
    if (rc != DFL_OK || host || lrc) n++;
    if (!(one && s->n_devices == 1 && one->g)) free_dev(&pd);
  }
  return n;
}

static int64_t parse_bytes(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || v <= 0) return -1;
  if (!*end) return (int64_t)v;
  static const struct { const char *u; double m; } units[] = {
    {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}};
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (!strcmp(end, units[i].u)) return (int64_t)(v * units[i].m);
  return -1;
}

static void usage(FILE *f) {
  fprintf(f, "usage: dflc plan SPEC.dfl [--device N] [--yaml FILE] [--html FILE] [--diff OLD.yaml]\n"
             "                 [--budget BYTES] [--gpu NAME] [--no-inplace] [--quiet] [--graph FILE]\n"
             "  Plans every device's memory from the spec alone (no weights are read) and prints, per device,\n"
             "  the total and its parts, the peak and where it happens, the lower bound and the ratio, the\n"
             "  largest buffers live at the peak and the FLOPs per step.\n"
             "  --device N      only device N (0-based, in the order the topology lists them)\n"
             "  --yaml FILE     write the plan as YAML (schema: docs/plan.md)\n"
             "  --html FILE     write a self-contained page with an offset-by-time picture of every buffer\n"
             "  --diff OLD.yaml compare with an earlier plan: per part and per buffer, bytes before/after\n"
             "  --budget BYTES  override every device's memory_budget (e.g. 80GiB, 512MiB)\n"
             "  --gpu NAME      the GPUs the spec's GPU devices run on (h100, h200, rtx-pro-6000, ...: docs/gpus.md):\n"
             "                  a GPU device without memory_budget gets that card's memory less 1.5 GiB (by default:\n"
             "                  this machine's GPU, if it has one)\n"
             "  --no-inplace    do not let elementwise outputs take their dying input's bytes\n"
             "  --quiet         no table (with --yaml/--html/--diff)\n"
             "  --graph FILE    write each planned device's graph as text: persistent tensors, then every op\n"
             "                  in schedule order with its phase, label, tensor shapes and attributes\n");
}

int dfl_cmd_plan(int argc, char **argv) {
  const char *spec_file = NULL, *yaml = NULL, *html = NULL, *diff = NULL, *graph = NULL;
  int device = -1, no_inplace = 0, quiet = 0;
  int64_t budget = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int more = i + 1 < argc;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
    else if (!more && (!strcmp(a, "--device") || !strcmp(a, "--yaml") || !strcmp(a, "--html") ||
                       !strcmp(a, "--diff") || !strcmp(a, "--budget") || !strcmp(a, "--graph") ||
                       !strcmp(a, "--gpu"))) {
      fprintf(stderr, "dflc plan: %s needs a value (see `dflc plan --help`)\n", a);
      return 2;
    } else if (!strcmp(a, "--device") && more) {
      char *end;
      device = (int)strtol(argv[++i], &end, 10);
      if (*end || device < 0) { fprintf(stderr, "dflc plan: --device wants a device number, got '%s'\n", argv[i]); return 2; }
    } else if (!strcmp(a, "--yaml") && more) yaml = argv[++i];
    else if (!strcmp(a, "--html") && more) html = argv[++i];
    else if (!strcmp(a, "--diff") && more) diff = argv[++i];
    else if (!strcmp(a, "--graph") && more) graph = argv[++i];
    else if (!strcmp(a, "--gpu") && more) {
      gpu_memory = dfl_compile_gpu_memory(argv[++i]);
      gpu_name = argv[i];
      if (gpu_memory <= 0) {
        fprintf(stderr, "dflc plan: --gpu %s: not a GPU dflc knows the memory of (%s); give the budget instead: "
                "--budget 96GiB\n", argv[i], dfl_compile_gpu_names());
        return 2;
      }
    }
    else if (!strcmp(a, "--budget") && more) {
      budget = parse_bytes(argv[++i]);
      if (budget <= 0) {
        fprintf(stderr, "dflc plan: --budget wants a size such as 80GiB or 512MiB, got '%s'\n", argv[i]);
        return 2;
      }
    } else if (!strcmp(a, "--no-inplace")) no_inplace = 1;
    else if (!strcmp(a, "--quiet")) quiet = 1;
    else if (a[0] == '-' ) { fprintf(stderr, "dflc plan: unknown option '%s'\n", a); usage(stderr); return 2; }
    else if (!spec_file) spec_file = a;
    else { fprintf(stderr, "dflc plan: one spec file only ('%s' and '%s')\n", spec_file, a); return 2; }
  }
  if (!spec_file) { usage(stderr); return 2; }

  dfl_spec *s = malloc(sizeof *s);
  if (!s) return 1;
  if (dfl_spec_load(spec_file, s) != DFL_OK) { free(s); return 1; }
  if (device >= s->n_devices) {
    fprintf(stderr, "%s: error: --device %d, but the topology has %d device%s (0..%d)\n", spec_file, device,
            s->n_devices, s->n_devices == 1 ? "" : "s", s->n_devices - 1);
    free(s);
    return 2;
  }
  int lo = device >= 0 ? device : 0, hi = device >= 0 ? device + 1 : s->n_devices;
  plan_dev *pd = calloc((size_t)(hi - lo) + 1, sizeof *pd);
  dfl_plan_dev *views = calloc((size_t)(hi - lo) + 1, sizeof *views);
  int n = 0, status = 0;
  for (int k = lo; k < hi && pd && views; k++) {
    int rc = plan_device(s, k, budget, no_inplace, &pd[n]);
    if (pd[n].c.planned) views[n] = pd[n].d;
    else { free_dev(&pd[n]); status = 1; continue; }
    if (!quiet) {
      dfl_plan_print(stdout, &views[n]);
      if (!strcmp(pd[n].c.budget_from, "device"))
        printf("  budget: %s's memory (%.2f GiB) less 1.5 GiB for the CUDA context and libraries; the spec gives no "
               "memory_budget\n", gpu_name ? gpu_name : "this machine's GPU", plan_gpu_memory() / 1073741824.0);
      if (s->devices[k].runs_target) {
        char line[256];
        dfl_model_target_describe(s, line, sizeof line);
        printf("  %s\n", line);
      }
      printf("\n");
    }
    if (rc != DFL_OK) {
      explain_no_fit(s, k, &pd[n], no_inplace);
      status = 1;
    } else if (!budget && over_host(s, k, &pd[n])) {
      char b1[32], b2[32];
      fprintf(stderr, "%s: error: device %s needs %s, more than this machine's %s of memory (it has no memory_budget)\n",
              s->file, pd[n].d.name, dfl_plan_bytes_str(b1, sizeof b1, pd[n].c.plan.arena_bytes),
              dfl_plan_bytes_str(b2, sizeof b2, dfl_plan_host_memory()));
      fprintf(stderr, "  lower batch, seq_len or anchors, or give the device a memory_budget to plan recomputation against\n");
      status = 1;
    }
    n++;
  }
  if (yaml) {
    FILE *f = fopen(yaml, "w");
    if (!f || dfl_plan_write_yaml(f, spec_file, views, n) != DFL_OK) {
      fprintf(stderr, "dflc plan: cannot write '%s'%s%s\n", yaml, f ? "" : ": ", f ? "" : strerror(errno));
      status = 1;
    }
    if (f) fclose(f);
  }
  if (html) {
    FILE *f = fopen(html, "w");
    if (!f || dfl_plan_write_html(f, spec_file, views, n) != DFL_OK) {
      fprintf(stderr, "dflc plan: cannot write '%s'%s%s\n", html, f ? "" : ": ", f ? "" : strerror(errno));
      status = 1;
    }
    if (f) fclose(f);
  }
  if (graph) {
    FILE *f = fopen(graph, "w");
    if (!f) {
      fprintf(stderr, "dflc plan: cannot write '%s': %s\n", graph, strerror(errno));
      status = 1;
    } else {
      for (int k = 0; k < n; k++) {
        fprintf(f, "# device %d of %s\n", lo + k, spec_file);
        dfl_graph_dump(pd[k].c.g, f);
      }
      if (fclose(f)) status = 1;
    }
  }
  if (diff) {
    dfl_plan_doc before, after;
    if (dfl_plan_doc_read(&before, diff) != DFL_OK) status = 1;
    else {
      if (dfl_plan_doc_from(&after, views, n) == DFL_OK) {
        printf("diff against %s:\n", diff);
        dfl_plan_diff(stdout, &before, &after);
        dfl_plan_doc_free(&after);
      }
      dfl_plan_doc_free(&before);
    }
  }
  for (int k = 0; k < n; k++) free_dev(&pd[k]);
  free(pd);
  free(views);
  free(s);
  return status;
}
