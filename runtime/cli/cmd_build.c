/*
** cmd_build.c: `dflc build SPEC -o DIR`, the trainer directory: everything the compiler decides
** before a run, written out so it can be read, diffed and reused.
**   DIR/build.json     the spec (absolute path), device, precision, arch, arena bytes
**   DIR/plan.yaml      the memory plan (the planner's report API, as `dflc plan --yaml`)
**   DIR/schedule.txt   the op list in schedule order: phase, op, label, output shape, FLOPs
**   DIR/kernels.cu     the CUDA source the runtime compiles, byte for byte (every kernel family)
**   DIR/kernels.txt    every op of the graph and what runs it: its launches (compiler/lower_launch.c),
**                      its fusion group, cuBLASLt, or the family still choosing at run time
**   DIR/groups.cu      the kernels generated for this graph's pointwise fusion groups (compiler/codegen.c),
**                      byte for byte what the runtime compiles beside kernels.cu
**   DIR/cubin/         the NVRTC cubin cache of kernels.cu for the target arch: `dflc train DIR`
**                      points the cache here, so it starts without compiling
** `dflc train DIR` trains the spec recorded in DIR/build.json.
*/
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <jansson.h>

#include "runtime/cli/cli.h"
#include "compiler/plan.h"
#include "compiler/spec.h"
#include "models/models.h"
#include "runtime/backend.h"
#include "runtime/compile.h"
#include "runtime/io/checkpoint.h"
#include "compiler/lower.h"
#ifdef DFL_HAVE_CUDA
#include "compiler/codegen.h"
#include "compiler/emit.h"
#include "compiler/lower_launch.h"
#endif

static int write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  int ok = f && fwrite(p, 1, n, f) == n;
  if (f && fclose(f)) ok = 0;
  if (!ok) fprintf(stderr, "dflc build: cannot write %s: %s\n", path, strerror(errno));
  return ok ? DFL_OK : DFL_EIO;
}

static int write_schedule(const char *path, const dfl_graph *g, const dfl_groups *gs) {
  static const char *ph[] = {"target", "forward", "loss", "backward", "optimizer"};
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "dflc build: cannot write %s: %s\n", path, strerror(errno));
    return DFL_EIO;
  }
  double tot[DFL_PH_COUNT] = {0};
  fprintf(f, "# op  phase      opcode           label -> output [shape] dtype  GFLOP  (pointwise fusion group: groups.cu)\n");
  for (int i = 0; i < g->nops; i++) {
    const dfl_op *op = &g->ops[i];
    double fl = dfl_op_flops(g, op);
    tot[op->phase] += fl;
    fprintf(f, "%5d %-10s %-16s %s ->", i, op->phase < DFL_PH_COUNT ? ph[op->phase] : "?",
            dfl_opcode_name(op->code), op->label);
    for (int k = 0; k < op->n_out; k++) {
      const dfl_tensor *t = &g->t[op->out[k]];
      fprintf(f, " %s[", t->name);
      for (int d = 0; d < t->ndim; d++) fprintf(f, "%s%" PRId64, d ? "," : "", t->shape[d]);
      fprintf(f, "]");
    }
    fprintf(f, "  %.3f", fl / 1e9);
    if (gs->of_op && gs->of_op[i] >= 0) fprintf(f, "  group %d", gs->of_op[i]);
    fprintf(f, "\n");
  }
  fprintf(f, "# TFLOP per micro-step by phase:");
  for (int p = 0; p < DFL_PH_COUNT; p++) fprintf(f, " %s %.3f", ph[p], tot[p] / 1e12);
  fprintf(f, "\n");
  return fclose(f) ? DFL_EIO : DFL_OK;
}

#ifdef DFL_HAVE_CUDA
static int write_groups(const char *out, const char *arch, const dfl_graph *g, const dfl_groups *gs);
static int write_launches(const char *path, const char *arch, int gemm_tune, const dfl_graph *g, const dfl_groups *gs,
                          const int64_t *offset);
#endif

int dfl_cmd_build(int argc, char **argv) {
  const char *spec_file = NULL, *out = NULL, *arch = "sm_90a"; /* what the runtime compiles for on sm_90 */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      printf("usage: dflc build SPEC.dfl -o DIR [--arch sm_90a]\n"
             "  Write the trainer directory: build.json, plan.yaml, schedule.txt, kernels.cu and the\n"
             "  cubin cache. `dflc train DIR` then trains the spec without compiling kernels.\n");
      return 0;
    } else if (!strcmp(a, "-o") || !strcmp(a, "--out") || !strcmp(a, "--arch")) {
      if (!next) {
        fprintf(stderr, "dflc build: %s needs a value\n", a);
        return 2;
      }
      if (!strcmp(a, "--arch")) arch = next;
      else out = next;
      i++;
    } else if (a[0] == '-' || spec_file) {
      fprintf(stderr, "dflc build: unexpected argument '%s'\n", a);
      return 2;
    } else {
      spec_file = a;
    }
  }
  if (!spec_file || !out) {
    fprintf(stderr, "usage: dflc build SPEC.dfl -o DIR [--arch sm_90a]\n");
    return 2;
  }
#ifdef DFL_HAVE_CUDA
  if (!dfl_emit_arch_ok(arch)) {   /* before the plan is written: a typo costs nothing */
    fprintf(stderr, "dflc build: --arch %s: dflc compiles for %s (or another sm_XY >= sm_80 this NVRTC offers; "
            "docs/gpus.md)\n", arch, dfl_emit_arch_list());
    return 2;
  }
#endif
  dfl_spec *s = malloc(sizeof *s);
  dfl_compiled *cp = calloc(1, sizeof *cp);
  if (!s || !cp) return 1;
  int rc = dfl_spec_load(spec_file, s);
  const dfl_device *dev = NULL;
  int kd = rc == DFL_OK ? dfl_compile_drafter_device(s) : -1;
  if (kd >= 0) dev = &s->devices[kd];
  if (rc == DFL_OK && dfl_spec_count_role(s, 0, 1) + dfl_spec_count_role(s, 1, 0) > 2) {
    fprintf(stderr, "dflc build: %s: multi-device specs are built per device by the pipeline runner; "
            "`dflc plan` shows their plans\n", spec_file);
    rc = DFL_ERR;
  }
  dfl_backend_kind kind = dev && dev->kind == DFL_DEV_GPU ? DFL_BE_CUDA : DFL_BE_CPU;
  int planned = 0;
  if (rc == DFL_OK) {
    /* the graph and plan the single-device trainer runs (runtime/compile.c: what `dflc train` compiles) */
    dfl_compile_req req = {.trainer = 1};
    rc = dfl_compile_device(s, kd, &req, cp);
    if (rc == DFL_ERR && cp->planned) {
      fprintf(stderr, "warning: the plan (%.2f GiB) does not fit the budget %.2f GiB\n", cp->plan.arena_bytes / 1073741824.0,
              cp->budget / 1073741824.0);
      rc = DFL_OK;
    }
    if (rc != DFL_OK) fprintf(stderr, "dflc build: cannot build the training graph of %s\n", spec_file);
    planned = rc == DFL_OK && cp->planned;
  }
  dfl_train_graph *tg = &cp->tg;
  dfl_plan plan = cp->plan;
  /* the pointwise fusion groups under the plan's offsets (schedule.txt, groups.cu) */
  dfl_groups gs = {0};
  if (rc == DFL_OK) rc = dfl_lower_groups(&tg->g, planned ? plan.offset : NULL, planned ? plan.size : NULL, &gs);
  char kernels_hash[24] = "";   /* the library's source and arch (CUDA builds) */
  char path[DFL_PATH_MAX + 64], abs_spec[DFL_PATH_MAX];
  if (rc == DFL_OK && dfl_mkdirs(out)) {
    fprintf(stderr, "dflc build: cannot create %s: %s\n", out, strerror(errno));
    rc = DFL_EIO;
  }
  if (rc == DFL_OK) {
    snprintf(path, sizeof path, "%s/plan.yaml", out);
    FILE *f = fopen(path, "w");
    dfl_plan_dev d;
    memset(&d, 0, sizeof d);
    snprintf(d.name, sizeof d.name, "node0.%s%d", kind == DFL_BE_CUDA ? "gpu" : "cpu", dev ? dev->index : 0);
    d.role = "target+drafter";
    d.g = &tg->g;
    d.p = &plan;
    d.budget = cp->budget;
    d.n_recomputed = cp->r.n_ops;
    d.recompute_flops = cp->r.flops;
    d.span_phases = cp->span;
    if (!f || dfl_plan_write_yaml(f, spec_file, &d, 1) != DFL_OK) rc = DFL_EIO;
    if (f && fclose(f)) rc = DFL_EIO;
    if (rc) fprintf(stderr, "dflc build: cannot write %s\n", path);
  }
  if (rc == DFL_OK) {
    snprintf(path, sizeof path, "%s/schedule.txt", out);
    rc = write_schedule(path, &tg->g, &gs);
  }
#ifdef DFL_HAVE_CUDA
  if (rc == DFL_OK) {
    /* kernels.cu: byte for byte the source the runtime compiles (every family; its cubin goes into
    ** DIR/cubin, the cache `dflc train DIR` uses), and kernels.txt: what runs each op. The
    ** cubin is compiled through the user's cache ($DFL_CACHE_DIR, else ~/.cache/dflc), so building a
    ** second spec, or the same kernels again, copies it instead of compiling (minutes of CPU). */
    char *src = NULL;
    void *cubin = NULL;
    size_t n = 0, len = 0;
    if ((rc = dfl_emit_source(NULL, DFL_KF_ALL, &src, &len)) == DFL_OK) {
      snprintf(kernels_hash, sizeof kernels_hash, "%016llx",
               (unsigned long long)dfl_emit_hash(dfl_emit_hash(0, src, len), arch, strlen(arch)));
      snprintf(path, sizeof path, "%s/kernels.cu", out);
      rc = write_bytes(path, src, len);
    }
    if (rc == DFL_OK) {
      snprintf(path, sizeof path, "%s/kernels.txt", out);
      rc = write_launches(path, arch, s->opt.gemm_tune != 0, &tg->g, &gs, planned ? plan.offset : NULL);
    }
    snprintf(path, sizeof path, "%s/cubin", out);
    if (rc == DFL_OK) rc = dfl_nvrtc_compile(src, arch, NULL, &cubin, &n, NULL);
    if (rc == DFL_OK) rc = dfl_nvrtc_cache_put(src, arch, path, cubin, n);
    free(src);
    free(cubin);
    if (rc == DFL_OK) printf("cubin: %s/ (%s, %zu bytes)\n", path, arch, n);
    if (rc == DFL_OK) rc = write_groups(out, arch, &tg->g, &gs);
  }
#else
  fprintf(stderr, "dflc build: this build has no CUDA toolkit: kernels.cu and cubins not written\n");
#endif
  if (rc == DFL_OK) {
    if (!realpath(spec_file, abs_spec)) snprintf(abs_spec, sizeof abs_spec, "%s", spec_file);
    snprintf(path, sizeof path, "%s/build.json", out);
    /* jansson escapes the path (quotes, backslashes, control characters); a path that is not UTF-8
    ** cannot be a JSON string: refused, not written mangled */
    char gh[24], ph[24];
    snprintf(gh, sizeof gh, "%016llx", (unsigned long long)dfl_compiled_graph_hash(cp));
    snprintf(ph, sizeof ph, "%016llx", (unsigned long long)dfl_compiled_plan_hash(cp));
    json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:i, s:i, s:I, s:{s:b, s:b, s:b, s:b, s:b, s:b}, s:{s:s, s:s, s:s}}",
                          "format", "dflc-build-1",
                          "spec", abs_spec, "device", kind == DFL_BE_CUDA ? "cuda" : "cpu", "precision",
                          s->precision == DFL_PREC_BF16 ? "bf16" : "fp32", "arch", arch, "ops", tg->g.nops, "tensors",
                          tg->g.nt, "arena_bytes", (json_int_t)(planned ? plan.arena_bytes : -1), "compile",
                          "block_rows", !s->opt.no_block_rows, "rope_pair", !s->opt.no_rope_pair, "swiglu_quant",
                          !s->opt.no_swiglu_quant, "overlap", !s->opt.no_overlap, "tf32", s->opt.tf32 != 0,
                          "gemm_tune", s->opt.gemm_tune != 0, "fingerprint", "graph", gh, "plan", ph, "kernels", kernels_hash);
    if (!o) {
      fprintf(stderr, "dflc build: %s: the spec's path is not UTF-8, which build.json (JSON) cannot hold: move the "
                      "spec to a UTF-8 path\n", abs_spec);
      rc = DFL_EFORMAT;
    } else if (json_dump_file(o, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER)) {
      fprintf(stderr, "dflc build: cannot write %s: %s\n", path, strerror(errno));
      rc = DFL_EIO;
    }
    json_decref(o);
    if (rc == DFL_OK)
      printf("built %s: %d ops, %d tensors, arena %.1f MiB -> %s/{build.json,plan.yaml,schedule.txt,kernels.cu,kernels.txt,groups.cu,cubin/}\n",
             spec_file, tg->g.nops, tg->g.nt, planned ? plan.arena_bytes / 1048576.0 : 0.0, out);
  }
  dfl_groups_free(&gs);
  dfl_compiled_free(cp);
  free(cp);
  free(s);
  return rc == DFL_OK ? 0 : 1;
}

#ifdef DFL_HAVE_CUDA
/* DIR/groups.cu: the kernels of the fusion groups (formed under the plan's offsets, as the CUDA
** backend forms them: runtime/cuda/pointwise.c), and their cubin into DIR/cubin beside the library's. */
/* kernels.txt: every op and what runs it: its launches as compiler/lower_launch.c chose them, its
** generated fusion group, cuBLASLt, or (for the ops not lowered yet) the family whose launch the
** runtime still chooses. */
static int write_launches(const char *path, const char *arch, int gemm_tune, const dfl_graph *g, const dfl_groups *gs,
                          const int64_t *offset) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "dflc build: cannot write %s: %s\n", path, strerror(errno));
    return DFL_EIO;
  }
  dfl_lower_env env = {.offset = offset};
  if (dfl_lower_env_arch(&env, arch)) {
    fclose(f);
    return DFL_ERR;
  }
  dfl_launch l[DFL_LAUNCH_MAX];
  int nl = 0, ngr = 0, nblas = 0, nrt = 0, rc = DFL_OK;
  fprintf(f, "# dflc build (%s): every op and what runs it. Launches were chosen here (compiler/lower_launch.c);\n"
             "# a grid marked <= is capped at launch at what the device's SMs hold; \"at init\": a variant the\n"
             "# backend fixes by its device when it opens; \"only when\": a launch it skips otherwise (docs/codegen.md).\n"
             "#    op phase     opcode           label: how\n", arch);
  for (int i = 0; i < g->nops && rc == DFL_OK; i++) {
    const dfl_op *op = &g->ops[i];
    fprintf(f, "%7d %-9s %-16s %s: ", i, dfl_phase_name(op->phase), dfl_opcode_name(op->code), op->label);
    int fam = dfl_emit_op_family(op->code), n = 0;
    if (gs->of_op && gs->of_op[i] >= 0) {
      fprintf(f, "fusion group %d (groups.cu)\n", gs->of_op[i]);
      ngr++;
    } else if (fam < 0) {
      fprintf(f, gemm_tune ? "cuBLASLt (the fastest of its candidates: timed at init once a machine, then cached)\n"
                           : "cuBLASLt (its heuristic's first algorithm, at init)\n");
      nblas++;
    } else if ((n = dfl_lower_launch(g, i, &env, l)) > 0) {
      for (int k = 0; k < n; k++) {
        char buf[160];
        dfl_lower_launch_str(&l[k], buf, sizeof buf);
        fprintf(f, "%s%s", k ? "; " : "", buf);
      }
      fputc('\n', f);
      nl++;
    } else if (n == 0) {
      fprintf(f, "%s family, chosen at run time (not lowered yet)\n", dfl_emit_family_name(fam));
      nrt++;
    } else {
      rc = -n;
    }
  }
  fprintf(f, "# %d ops: %d lowered here, %d in fusion groups, %d cuBLASLt, %d chosen at run time\n", g->nops, nl, ngr,
          nblas, nrt);
  if (fclose(f) && rc == DFL_OK) rc = DFL_EIO;
  if (rc == DFL_OK) printf("launches: %d ops lowered, %d in fusion groups, %d cuBLASLt, %d chosen at run time -> kernels.txt\n",
                           nl, ngr, nblas, nrt);
  return rc;
}

static int write_groups(const char *out, const char *arch, const dfl_graph *g, const dfl_groups *gs) {
  char path[DFL_PATH_MAX + 64], *src = NULL;
  void *cubin = NULL;
  size_t len = 0, n = 0;
  int rc = dfl_codegen_source(g, gs, &src, &len);
  snprintf(path, sizeof path, "%s/groups.cu", out);
  if (rc == DFL_OK) {
    static const char none[] = "// this graph has no pointwise op: no generated kernel\n";
    rc = src ? write_bytes(path, src, len) : write_bytes(path, none, sizeof none - 1);
  }
  snprintf(path, sizeof path, "%s/cubin", out);
  if (rc == DFL_OK && src) rc = dfl_nvrtc_compile(src, arch, NULL, &cubin, &n, NULL);
  if (rc == DFL_OK && src) rc = dfl_nvrtc_cache_put(src, arch, path, cubin, n);
  int nops = 0;
  for (int k = 0; k < gs->n; k++) nops += gs->g[k].n;
  if (rc == DFL_OK) printf("groups: %d fusion groups of %d pointwise ops -> %s/groups.cu\n", gs->n, nops, out);
  free(src);
  free(cubin);
  return rc;
}
#endif

/* `dflc train DIR`: the spec recorded by `dflc build`, its fingerprints, and its cubin cache. */
static void copy_str(char *dst, size_t n, json_t *v) { snprintf(dst, n, "%s", json_string_value(v) ? json_string_value(v) : ""); }
int dfl_build_resolve(const char *arg, dfl_build_info *b) {
  struct stat st;
  memset(b, 0, sizeof *b);
  if (stat(arg, &st) || !S_ISDIR(st.st_mode)) {
    if (strlen(arg) >= sizeof b->spec) {
      fprintf(stderr, "dflc train: %s: the path is longer than %zu bytes\n", arg, sizeof b->spec - 1);
      return DFL_EFORMAT;
    }
    snprintf(b->spec, sizeof b->spec, "%s", arg);
    return DFL_OK;
  }
  b->is_dir = 1;
  char path[DFL_PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/build.json", arg);
  if (stat(path, &st)) {
    fprintf(stderr, "dflc train: %s is a directory without build.json: pass a .dfl file or a directory "
            "written by `dflc build SPEC -o DIR`\n", arg);
    return DFL_EIO;
  }
  json_error_t je;
  json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
  if (!o) {
    fprintf(stderr, "%s:%d:%d: not valid JSON (%s): rebuild with `dflc build SPEC -o %s`\n", path, je.line, je.column,
            je.text, arg);
    return DFL_EFORMAT;
  }
  const char *fmt = json_string_value(json_object_get(o, "format"));
  const char *sp = json_string_value(json_object_get(o, "spec"));
  int rc = DFL_OK;
  if (!fmt || strcmp(fmt, "dflc-build-1")) {
    fprintf(stderr, "%s: \"format\" is %s%s%s, not \"dflc-build-1\": rebuild with this dflc (`dflc build SPEC -o %s`)\n",
            path, fmt ? "\"" : "missing", fmt ? fmt : "", fmt ? "\"" : "", arg);
    rc = DFL_EFORMAT;
  } else if (!sp || !*sp) {
    fprintf(stderr, "%s: no \"spec\" string: rebuild with `dflc build SPEC -o %s`\n", path, arg);
    rc = DFL_EFORMAT;
  } else if (strlen(sp) >= sizeof b->spec) {
    fprintf(stderr, "%s: the spec's path is longer than %zu bytes\n", path, sizeof b->spec - 1);
    rc = DFL_EFORMAT;
  } else {
    snprintf(b->spec, sizeof b->spec, "%s", sp);
    json_t *f = json_object_get(o, "fingerprint");
    b->has_fingerprint = json_string_value(json_object_get(f, "graph")) && json_string_value(json_object_get(f, "plan")) &&
                         json_string_value(json_object_get(f, "kernels"));
    copy_str(b->graph, sizeof b->graph, json_object_get(f, "graph"));
    copy_str(b->plan, sizeof b->plan, json_object_get(f, "plan"));
    copy_str(b->kernels, sizeof b->kernels, json_object_get(f, "kernels"));
    copy_str(b->arch, sizeof b->arch, json_object_get(o, "arch"));
  }
  json_decref(o);
  if (rc) return rc;
  snprintf(path, sizeof path, "%s/cubin", arg);
  setenv("DFL_CACHE_DIR", path, 0);   /* an explicit DFL_CACHE_DIR wins */
  return DFL_OK;
}

int dfl_build_verify(const char *dir, const dfl_build_info *b, const dfl_compiled *c) {
  char path[DFL_PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/build.json", dir);
  const char *gh = b->graph, *ph = b->plan, *kh = b->kernels, *arch = b->arch[0] ? b->arch : NULL;
  char mine[24];
  int bad = 0;
  if (!b->has_fingerprint) {
    fprintf(stderr, "%s: no \"fingerprint\" (written by an earlier dflc): rebuild with `dflc build SPEC -o %s`\n", path, dir);
    bad = 1;
  }
  snprintf(mine, sizeof mine, "%016llx", (unsigned long long)dfl_compiled_graph_hash(c));
  if (!bad && strcmp(gh, mine)) {
    fprintf(stderr, "%s: the spec no longer compiles to the graph built there (graph %s, built %s): the spec or "
                    "dflc changed since `dflc build`; rebuild with `dflc build SPEC -o %s`\n", path, mine, gh, dir);
    bad = 1;
  }
  snprintf(mine, sizeof mine, "%016llx", (unsigned long long)dfl_compiled_plan_hash(c));
  if (!bad && c->planned && strcmp(ph, mine)) {
    fprintf(stderr, "%s: the memory plan is not the one built there (plan %s, built %s): the device's memory_budget or "
                    "dflc's planner changed; rebuild with `dflc build SPEC -o %s`\n", path, mine, ph, dir);
    bad = 1;
  }
#ifdef DFL_HAVE_CUDA
  /* the kernel library DIR/cubin holds: a dflc with other kernels would compile its own there */
  char *src = NULL;
  size_t len = 0;
  if (!bad && kh[0] && arch && dfl_emit_source(NULL, DFL_KF_ALL, &src, &len) == DFL_OK) {
    snprintf(mine, sizeof mine, "%016llx",
             (unsigned long long)dfl_emit_hash(dfl_emit_hash(0, src, len), arch, strlen(arch)));
    if (strcmp(kh, mine)) {
      fprintf(stderr, "%s: this dflc's kernels are not the ones compiled into %s/cubin (kernels %s, built %s): rebuild "
                      "with `dflc build SPEC -o %s`\n", path, dir, mine, kh, dir);
      bad = 1;
    }
  }
  free(src);
#endif
  return bad;
}
