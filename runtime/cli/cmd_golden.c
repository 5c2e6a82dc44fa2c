/*
** cmd_golden.c: `dflc golden MODEL_DIR GOLDEN.safetensors [--cuda] [--tol X] [--f64]`: the target forward
** on the golden file's input_ids against its hidden_states.i (and logits when present), one line per
** tensor with its relative L2 error, then PASS or FAIL (exit 0 / 1; 2 usage, 3 unreadable input, 77
** --cuda without a GPU). For every family: it proves a target loads as its authors meant and that a
** tap reads the layer the user thinks (hidden_states.i+1 is the output of layer i).
** The CPU runs the weights in f32 (or f64); --cuda in bf16, the training precision. The default
** tolerances are the measured distance to Hugging Face's bf16 forward with margin (docs/targets.md).
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/hfconfig.h"
#include "models/models.h"
#include "runtime/backend.h"
#include "runtime/cli/cli.h"
#include "runtime/cpu/cpu.h"
#include "runtime/io/safetensors.h"
#include "runtime/io/weights.h"
#ifdef DFL_HAVE_CUDA
#include "runtime/cuda/cuda.h"
#endif

#define GOLDEN_TOL_CPU 2e-2
#define GOLDEN_TOL_CUDA 5e-2

static void usage(FILE *f) {
  fprintf(f, "usage: dflc golden MODEL_DIR GOLDEN.safetensors [--cuda] [--tol X] [--f64]\n"
             "  Runs the target in MODEL_DIR (a Hugging Face directory) on GOLDEN's `input_ids` and compares\n"
             "  every `hidden_states.i` (0 = the embeddings, i+1 = the output of layer i, the last one after\n"
             "  the final norm) and `logits` when GOLDEN has them: relative L2 error per tensor, then PASS\n"
             "  (exit 0) or FAIL (exit 1). CPU in f32 (--f64: f64); --cuda: the CUDA backend in bf16.\n"
             "  --tol: the largest relative error that passes (default %.0e on the CPU, %.0e with --cuda).\n",
          GOLDEN_TOL_CPU, GOLDEN_TOL_CUDA);
}

static double rel_l2(const float *a, const float *ref, int64_t n) {
  double d = 0, r = 0;
  for (int64_t i = 0; i < n; i++) {
    d += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
    r += (double)ref[i] * ref[i];
  }
  return r > 0 ? sqrt(d / r) : sqrt(d);
}

typedef struct { dfl_cpu *cpu; void *gpu; const dfl_graph *g; } runner;

static int fetch(const runner *r, int t, float *dst) {
  int64_t n = dfl_tensor_numel(&r->g->t[t]);
#ifdef DFL_HAVE_CUDA
  if (r->gpu) return dfl_cuda_get_f(r->gpu, t, dst, n);
#endif
  dfl_cpu_get_f(r->cpu, t, dst, n);
  return DFL_OK;
}

#ifdef DFL_HAVE_CUDA
/* The CPU context's weights and inputs onto an unplanned GPU context (every tensor its own bytes, so
** every hidden state can be read back), then the forward. */
static int run_gpu(dfl_cuda *gc, dfl_cpu *c, const dfl_graph *g) {
  int rc = dfl_cuda_init(gc, g, NULL, NULL);
  if (rc != DFL_OK) return rc;
  for (int t = 0; t < g->nt && rc == DFL_OK; t++) {
    const dfl_tensor *T = &g->t[t];
    if (!dfl_tensor_is_persistent(T) && T->kind != DFL_T_INPUT) continue;
    int64_t n = dfl_tensor_numel(T);
    if (T->dtype == DFL_I32) { rc = dfl_cuda_set_i32(gc, t, dfl_cpu_i32(c, t), n); continue; }
    float *f = malloc(sizeof(float) * (size_t)n);
    if (!f) return DFL_ENOMEM;
    dfl_cpu_get_f(c, t, f, n);
    rc = dfl_cuda_set_f(gc, t, f, n);
    free(f);
  }
  if (rc == DFL_OK) rc = dfl_cuda_run(gc, DFL_PH_ALL);
  if (rc == DFL_OK) rc = dfl_cuda_sync(gc);
  return rc;
}
#endif

int dfl_cmd_golden(int argc, char **argv) {
  const char *dir = NULL, *gpath = NULL;
  int cuda = 0, f64 = 0;
  double tol = -1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(stdout); return 0; }
    else if (!strcmp(argv[i], "--cuda")) cuda = 1;
    else if (!strcmp(argv[i], "--f64")) f64 = 1;
    else if (!strcmp(argv[i], "--tol") && i + 1 < argc) {
      char *end;
      tol = strtod(argv[++i], &end);
      if (*end || !(tol > 0)) { fprintf(stderr, "dflc golden: --tol `%s`: expected a positive number\n", argv[i]); return 2; }
    } else if (argv[i][0] == '-') { fprintf(stderr, "dflc golden: unknown option `%s`\n", argv[i]); usage(stderr); return 2; }
    else if (!dir) dir = argv[i];
    else if (!gpath) gpath = argv[i];
    else { fprintf(stderr, "dflc golden: unexpected argument `%s`\n", argv[i]); usage(stderr); return 2; }
  }
  if (!dir || !gpath) { usage(stderr); return 2; }
  if (cuda && f64) { fprintf(stderr, "dflc golden: --f64 is for the CPU backend; drop it with --cuda\n"); return 2; }
  if (tol < 0) tol = cuda ? GOLDEN_TOL_CUDA : GOLDEN_TOL_CPU;
#ifndef DFL_HAVE_CUDA
  if (cuda) { printf("SKIP: this build of dflc has no CUDA backend\n"); return 77; }
#else
  if (cuda && !dfl_be_cuda_available()) { printf("SKIP: --cuda needs a usable CUDA device (none found)\n"); return 77; }
#endif

  dfl_spec s;
  memset(&s, 0, sizeof s);
  dfl_source cmdline = {"the command line", "", 0};
  if (dfl_hfconfig_load(dir, &s.target, dfl_loc_file(&cmdline)) != DFL_OK) return 3;
  char err[1024];
  dfl_st gold;
  if (dfl_st_open(&gold, gpath, err, sizeof err) != DFL_OK) { fprintf(stderr, "dflc golden: %s\n", err); return 3; }
  const dfl_st_entry *ids_e = dfl_st_find(&gold, "input_ids");
  if (!ids_e) {
    fprintf(stderr, "dflc golden: %s: no tensor `input_ids`\n", gpath);
    dfl_st_close(&gold);
    return 3;
  }
  const int L = s.target.layers, H = s.target.hidden, V = s.target.vocab;
  const int S = (int)dfl_st_numel(ids_e);
  int n_hidden = 0;
  char name[64];
  for (int i = 0; i <= L; i++) {
    snprintf(name, sizeof name, "hidden_states.%d", i);
    n_hidden += dfl_st_find(&gold, name) != NULL;
  }
  const dfl_st_entry *logit_e = dfl_st_find(&gold, "logits");
  if (n_hidden == 0 && !logit_e) {
    fprintf(stderr, "dflc golden: %s: neither `hidden_states.i` nor `logits`: nothing to compare\n", gpath);
    dfl_st_close(&gold);
    return 3;
  }
  s.precision = cuda ? DFL_PREC_BF16 : DFL_PREC_FP32;
  s.n_taps = 1;
  s.taps[0] = L - 1;

  dfl_graph g;
  dfl_graph_init(&g);
  int tid = dfl_tensor_1d(&g, "input_ids", DFL_I32, DFL_T_INPUT, S);
  dfl_target_out to;
  int rc = dfl_model_target(&g, &s, 1, S, tid, 1, logit_e != NULL, &to);
  dfl_cpu c;
  int cpu_ok = 0;
  if (rc == DFL_OK) rc = dfl_cpu_init(&c, &g, NULL, f64), cpu_ok = rc == DFL_OK;
  if (rc == DFL_OK && (rc = dfl_weights_load_path(&c, dir, DFL_KIND_BIT(DFL_T_FROZEN), "", err, sizeof err)) != DFL_OK)
    fprintf(stderr, "dflc golden: %s\n", err);
  if (rc == DFL_OK && (rc = dfl_st_read_i32(&gold, ids_e, dfl_cpu_i32(&c, tid))) != DFL_OK)
    fprintf(stderr, "dflc golden: %s: cannot read `input_ids` as integers\n", gpath);
  for (int i = 0; rc == DFL_OK && i < S; i++)
    if (dfl_cpu_i32(&c, tid)[i] < 0 || dfl_cpu_i32(&c, tid)[i] >= V) {
      fprintf(stderr, "dflc golden: %s: input_ids[%d] = %d is outside the vocabulary (%d)\n", gpath, i,
              dfl_cpu_i32(&c, tid)[i], V);
      rc = DFL_EFORMAT;
    }
  runner r = {&c, NULL, &g};
#ifdef DFL_HAVE_CUDA
  dfl_cuda gc;
  memset(&gc, 0, sizeof gc);
  if (rc == DFL_OK && cuda) {
    if ((rc = run_gpu(&gc, &c, &g)) != DFL_OK) fprintf(stderr, "dflc golden: the CUDA forward failed\n");
    r.gpu = &gc;
  }
#endif
  if (rc == DFL_OK && !cuda && (rc = dfl_cpu_run(&c, DFL_PH_ALL)) != DFL_OK) fprintf(stderr, "dflc golden: the forward failed\n");
  int fails = 0, compared = 0, passed = 0;
  if (rc == DFL_OK) {
    printf("dflc golden %s: %d tokens, %s, tolerance %.1e (relative L2)\n", dir, S,
           cuda ? "CUDA bf16" : f64 ? "CPU f64" : "CPU f32", tol);
    for (int i = 0; i <= L + 1; i++) {
      const dfl_st_entry *e;
      int t;
      if (i <= L) {
        snprintf(name, sizeof name, "hidden_states.%d", i);
        e = dfl_st_find(&gold, name);
        t = to.hidden[i];
      } else {
        snprintf(name, sizeof name, "logits");
        e = logit_e;
        t = to.logits;
      }
      if (!e) continue;
      int64_t n = dfl_tensor_numel(&g.t[t]);
      if (dfl_st_numel(e) != n) {
        printf("  %-18s FAIL: %lld values in the golden, the forward has %lld ([%d, %d])\n", name,
               (long long)dfl_st_numel(e), (long long)n, S, i <= L ? H : V);
        fails++;
        continue;
      }
      float *a = malloc(sizeof(float) * (size_t)n), *ref = malloc(sizeof(float) * (size_t)n);
      if (!a || !ref || fetch(&r, t, a) != DFL_OK || dfl_st_read_f32(&gold, e, ref) != DFL_OK) {
        printf("  %-18s FAIL: cannot read\n", name);
        fails++;
      } else {
        double err_l2 = rel_l2(a, ref, n);
        int ok = isfinite(err_l2) && err_l2 <= tol;
        printf("  %-18s rel L2 %.3e  %s%s\n", name, err_l2, ok ? "ok" : "FAIL",
               i == 0 ? "  (embeddings)" : i == L ? "  (after the final norm)" : "");
        fails += !ok;
        passed += ok;
        compared++;
      }
      free(a);
      free(ref);
    }
    printf("%s: %d of %d tensors within %.1e\n", fails ? "FAIL" : "PASS", passed, compared + (fails - (compared - passed)), tol);
  }
#ifdef DFL_HAVE_CUDA
  if (r.gpu) dfl_cuda_free(&gc);
#endif
  if (cpu_ok) dfl_cpu_free(&c);
  dfl_graph_free(&g);
  dfl_st_close(&gold);
  if (rc != DFL_OK) return 3;
  return fails ? 1 : 0;
}
