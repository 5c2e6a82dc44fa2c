/*
** verify.c: `dflc verify FIXTURE` -- one DFlash training step on the CPU backend against a
** reference step computed by SpecForge in float64 (tests/fixtures/README.md). The drafter is
** built from the fixture's config.json and constants; batch, S and N come from its tensors.
** Prints the relative error of every quantity, then PASS or FAIL with the worst one.
*/
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cli/cli.h"
#include "models/models.h"
#include "runtime/io/weights.h"
#include "runtime/backend.h"
#include "runtime/cpu/cpu.h"
#include "runtime/io/safetensors.h"

typedef struct {
  double tol;
  int f64;
  int vocab_chunk;
  int quiet;
  int cuda;               /* 1: the step runs on the CUDA backend (the CPU backend only stages) */
  int bf16;               /* with cuda: a bf16 graph (params and activations bf16, masters f32) */
  int grads_bf16;         /* with bf16: the gradients in bf16 too, as train.grads = bf16 runs them */
} verify_opts;

/* Each quantity is judged against its own bound: --tol, plus for the f32/f64 AdamW update the part
** of its error carried in from the gradient's (see update_carry). worst: the quantity nearest to
** (or furthest past) its bound, by error / bound. */
typedef struct {
  double worst, worst_err, worst_bound;
  char worst_name[128];
  int n;
  int quiet;
  double tol;   /* --tol: every quantity's bound, the update's plus what it carries */
} verify_tally;

static double rel_err(const double *ours, const double *ref, int64_t n) {
  double d = 0, r = 0;
  for (int64_t i = 0; i < n; i++) {
    d += (ours[i] - ref[i]) * (ours[i] - ref[i]);
    r += ref[i] * ref[i];
  }
  /* A zero reference (e.g. no correct prediction) is compared absolutely. */
  double e = r > 0 ? sqrt(d) / sqrt(r) : sqrt(d);
  return isfinite(e) ? e : INFINITY;
}

/* rel_err with each element weighted by |g|, g the reference gradient. The bf16 update check: the
** first AdamW step is ~ -lr sign(g), so where |g| is below the bf16 gradient noise (~1e-2 of its
** rms) the sign, hence the update, is a coin flip on any correct bf16 backend: on the H200 the plain
** update error reached 0.06-0.25 with every gradient within 1.3e-2 (docs/journal/2026-11-performance.md). Weighting
** by |g| keeps what an optimizer bug would break (lr, bias correction, clip, sign: O(1) errors)
** and drops those coin flips (simulated at the measured gradient errors: <= 3.3e-3). */
static double rel_err_weighted(const double *ours, const double *ref, const double *g, int64_t n) {
  double d = 0, r = 0;
  for (int64_t i = 0; i < n; i++) {
    double w = fabs(g[i]);
    d += (ours[i] - ref[i]) * (ours[i] - ref[i]) * w * w;
    r += ref[i] * ref[i] * w * w;
  }
  double e = r > 0 ? sqrt(d) / sqrt(r) : sqrt(d);
  return isfinite(e) ? e : INFINITY;
}

static void report_bound(verify_tally *t, const char *name, double e, double bound) {
  if (!t->quiet) {
    if (bound > t->tol) printf("  %-52s %.3e (bound %.3e = tol + %.3e from the gradient's error)\n", name, e, bound, bound - t->tol);
    else printf("  %-52s %.3e\n", name, e);
  }
  double r = e / bound;
  if (t->n == 0 || !(r <= t->worst)) {   /* NaN counts as worst */
    t->worst = isnan(r) ? INFINITY : r;
    t->worst_err = e;
    t->worst_bound = bound;
    snprintf(t->worst_name, sizeof t->worst_name, "%s", name);
  }
  t->n++;
}
static void report(verify_tally *t, const char *name, double e) { report_bound(t, name, e, t->tol); }

/* The first AdamW step from fresh moments (what every fixture holds: m = v = 0, step 1) moves a
** parameter by -lr (c g / (|c g| + eps) + wd p), c the clip coefficient of the global norm. Its
** derivative in g is lr eps / (|c g| + eps)^2 per unit of c g: where |g| is near eps a gradient error
** far below the gradient tolerance becomes an update error of its order. The f32 gradient's rounding
** depends on the BLAS kernels (OpenBLAS picks them per CPU: 7e-5 .. 1.3e-4 on the public fixture's
** down_proj update, the gradients all within 2e-6), so the update is judged against
**     ||u - u_ref|| <= tol ||u_ref|| + ||U(g) - U(g_ref)||,
** the second term computed here in f64 from our gradient g (its own error already judged against
** tol) and the fixture's: exactly the update error that the gradient's error explains (triangle
** inequality), nothing tuned. An optimizer bug (lr, eps, bias correction, clip, decay) still shows in
** full; the f64 path's gradients agree to ~1e-12, so its bar stays tight. */
static double update_carry(const double *g, const double *gref, int64_t n, double c, double cref,
                           double lr, double eps) {
  double d = 0;
  for (int64_t i = 0; i < n; i++) {
    double x = c * g[i], y = cref * gref[i];
    double du = lr * (x / (fabs(x) + eps) - y / (fabs(y) + eps));
    d += du * du;
  }
  return sqrt(d);
}

/* Read a reference tensor into a fresh double array, checking its element count. */
static double *ref_read(const dfl_st *st, const char *name, int ndim, const int64_t *shape, char *err, size_t errlen) {
  const dfl_st_entry *e = NULL;
  if (dfl_st_expect(st, name, ndim, shape, &e, err, errlen) != DFL_OK) return NULL;
  double *v = malloc(sizeof(double) * (size_t)(dfl_st_numel(e) > 0 ? dfl_st_numel(e) : 1));
  if (!v || dfl_st_read_f64(st, e, v) != DFL_OK) {
    snprintf(err, errlen, "%s: tensor %s: unreadable", st->files[e->file].path, name);
    free(v);
    return NULL;
  }
  return v;
}

static int json_num(json_t *o, const char *k, double *out) {
  json_t *v = json_object_get(o, k);
  if (!json_is_number(v)) return 0;
  *out = json_number_value(v);
  return 1;
}

/* Fill a spec from the fixture json and the batch/sequence/anchor shapes. */
static int spec_from_fixture(json_t *root, const dfl_st *st, const verify_opts *o, dfl_spec *s,
                             char *err, size_t errlen) {
  memset(s, 0, sizeof *s);
  json_t *dc = json_object_get(root, "draft_config");
  json_t *tr = json_object_get(root, "training");
  if (!json_is_object(dc) || !json_is_object(tr)) {
    snprintf(err, errlen, "needs objects \"draft_config\" and \"training\"");
    return DFL_EFORMAT;
  }
  int rc = dfl_hf_arch_from_json(dc, &s->drafter, err, errlen);
  if (rc != DFL_OK) return rc;
  s->drafter.family = DFL_FAMILY_QWEN3;
  s->drafter.qk_norm = 1;                 /* the DFlash drafter always has q/k norms */
  s->drafter.tie_embeddings = 0;
  s->target = s->drafter;
  json_t *ntl = json_object_get(dc, "num_target_layers");
  if (json_is_integer(ntl)) s->target.layers = (int)json_integer_value(ntl);

  json_t *dfc = json_object_get(dc, "dflash_config");
  json_t *taps = json_object_get(dfc, "target_layer_ids");
  json_t *mask = json_object_get(dfc, "mask_token_id");
  if (!json_is_array(taps) || json_array_size(taps) < 1 || json_array_size(taps) > DFL_MAX_IO ||
      !json_is_integer(mask)) {
    snprintf(err, errlen, "draft_config.dflash_config needs target_layer_ids (1..%d layers) and mask_token_id", DFL_MAX_IO);
    return DFL_EFORMAT;
  }
  s->n_taps = (int)json_array_size(taps);
  for (int i = 0; i < s->n_taps; i++) {
    s->taps[i] = (int)json_integer_value(json_array_get(taps, (size_t)i));
    if (s->taps[i] >= s->target.layers) s->target.layers = s->taps[i] + 1;
  }
  s->mask_token = (int)json_integer_value(mask);
  if (s->mask_token < 0 || s->mask_token >= s->drafter.vocab) {
    snprintf(err, errlen, "mask_token_id %d outside the vocabulary", s->mask_token);
    return DFL_EFORMAT;
  }

  json_t *lt = json_object_get(dc, "layer_types");
  json_t *sw = json_object_get(dc, "sliding_window");
  for (int l = 0; l < s->drafter.layers; l++) {
    const char *ty = json_string_value(json_array_get(lt, (size_t)l));
    s->sliding[l] = ty && !strcmp(ty, "sliding_attention");
    if (ty && !s->sliding[l] && strcmp(ty, "full_attention")) {
      snprintf(err, errlen, "layer_types[%d] = \"%s\": expected full_attention or sliding_attention", l, ty);
      return DFL_EFORMAT;
    }
    if (s->sliding[l]) {
      if (!json_is_integer(sw) || json_integer_value(sw) < 1) {
        snprintf(err, errlen, "sliding layers need a positive integer sliding_window");
        return DFL_EFORMAT;
      }
      s->window[l] = (int)json_integer_value(sw);
    }
  }

  json_t *bs = json_object_get(tr, "block_size");
  if (!json_is_integer(bs)) bs = json_object_get(dc, "block_size");
  if (!json_is_integer(bs) || json_integer_value(bs) < 2) {
    snprintf(err, errlen, "block_size must be an integer >= 2");
    return DFL_EFORMAT;
  }
  s->block_size = (int)json_integer_value(bs);
  if (!json_num(tr, "loss_decay_gamma", &s->gamma)) s->gamma = 0;

  json_t *opt = json_object_get(tr, "optimizer");
  json_t *betas = json_object_get(opt, "betas");
  if (!json_num(opt, "lr", &s->lr) || !json_num(opt, "eps", &s->eps) || json_array_size(betas) != 2) {
    snprintf(err, errlen, "training.optimizer needs lr, betas [2] and eps");
    return DFL_EFORMAT;
  }
  s->beta1 = json_number_value(json_array_get(betas, 0));
  s->beta2 = json_number_value(json_array_get(betas, 1));
  if (!json_num(opt, "weight_decay", &s->weight_decay)) s->weight_decay = 0;
  if (!json_num(opt, "max_grad_norm", &s->clip)) s->clip = 0;
  s->schedule = DFL_SCHED_CONSTANT;
  s->warmup_steps = 0;
  s->steps = 1;
  s->accum = 1;
  s->precision = o->bf16 ? DFL_PREC_BF16 : DFL_PREC_FP32;
  s->vocab_chunk = o->vocab_chunk > 0 ? o->vocab_chunk : s->drafter.vocab;
  s->topk = 0;

  const dfl_st_entry *ids = dfl_st_find(st, "input_ids"), *anc = dfl_st_find(st, "anchors");
  if (!ids || ids->ndim != 2 || !anc || anc->ndim != 2 || anc->shape[0] != ids->shape[0]) {
    snprintf(err, errlen, "needs input_ids [b, S] and anchors [b, N]");
    return DFL_EFORMAT;
  }
  s->batch = (int)ids->shape[0];
  s->seq_len = (int)ids->shape[1];
  s->anchors = (int)anc->shape[1];
  return DFL_OK;
}

/* --cuda: runs phase mask `mask` on a CUDA backend with the CPU backend's values as input (every
** non-activation tensor up), then copies every non-activation tensor back into the CPU backend, so
** that the comparisons below read the GPU's results through the same code. */
static int gpu_run(dfl_backend *b, dfl_cpu *cpu, unsigned mask) {
  const dfl_graph *g = cpu->g;
  int rc = DFL_OK;
  for (int dir = 0; dir < 2 && !rc; dir++) {
    for (int t = 0; t < g->nt && !rc; t++) {
      const dfl_tensor *x = &g->t[t];
      if (x->kind == DFL_T_ACT) continue;
      int64_t n = dfl_tensor_numel(x);
      float *f = malloc(sizeof(float) * (size_t)(n ? n : 1));
      if (!f) return DFL_ENOMEM;
      if (x->dtype == DFL_I32) {
        int32_t *v = dfl_cpu_i32(cpu, t);
        if (dir == 0) {
          for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
          rc = dfl_be_set_f(b, t, f, n);
        } else if ((rc = dfl_be_get_f(b, t, f, n)) == DFL_OK)
          for (int64_t i = 0; i < n; i++) v[i] = (int32_t)f[i];
      } else if (dir == 0) {
        dfl_cpu_get_f(cpu, t, f, n);
        rc = dfl_be_set_f(b, t, f, n);
      } else if ((rc = dfl_be_get_f(b, t, f, n)) == DFL_OK)
        dfl_cpu_set_f(cpu, t, f, n);
      free(f);
    }
    if (dir == 0 && !rc) rc = dfl_be_run(b, mask);
    if (dir == 0 && !rc) rc = dfl_be_sync(b);
  }
  return rc;
}

static void usage(FILE *f) {
  fprintf(f, "usage: dflc verify FIXTURE [--tol X] [--f64] [--vocab-chunk N] [--quiet] [--cuda [--fp32|--bf16 [--grads-bf16]]]\n"
             "  FIXTURE: path of NAME.json / NAME.safetensors (with or without the extension)\n"
             "  Runs one DFlash training step on the CPU backend (--cuda: on the CUDA backend, fp32 graph,\n"
             "  or with --bf16 bf16 params and activations) and compares it with the fixture.\n"
             "  Exit status: 0 PASS, 1 FAIL (an error above --tol, default 1e-4; --bf16: 5e-2), 2 bad input,\n"
             "  77 --cuda without a usable GPU. --bf16 judges the AdamW update weighted by |grad| (the sign\n"
             "  of a near-zero bf16 gradient, hence its first-step update, is noise). --grads-bf16 keeps the\n"
             "  weight gradients in bf16 as `train { grads = bf16 }` does.\n");
}

static int verify_run(const char *base, const verify_opts *o, verify_tally *tally) {
  char jpath[DFL_PATH_MAX + 16], spath[DFL_PATH_MAX + 16], err[1024];
  snprintf(jpath, sizeof jpath, "%s.json", base);
  snprintf(spath, sizeof spath, "%s.safetensors", base);
  json_error_t je;
  json_t *root = json_load_file(jpath, 0, &je);
  if (!root) {
    fprintf(stderr, "%s:%d: %s\n", jpath, je.line, je.text);
    return 2;
  }
  dfl_st st;
  if (dfl_st_open(&st, spath, err, sizeof err) != DFL_OK) {
    fprintf(stderr, "%s\n", err);
    json_decref(root);
    return 2;
  }
  int status = 2;
  dfl_spec spec;
  dfl_train_graph tg;
  dfl_cpu cpu;
  int have_graph = 0, have_cpu = 0, have_gpu = 0;
  dfl_backend gpu;
  dfl_plan gplan;
  memset(&gpu, 0, sizeof gpu);
  memset(&gplan, 0, sizeof gplan);
  double *buf = NULL, *ref = NULL, *ref2 = NULL;
  double **before = NULL, **gours = NULL, **grefs = NULL;
  int nkept = 0; /* entries of before/gours/grefs */

  if (spec_from_fixture(root, &st, o, &spec, err, sizeof err) != DFL_OK) {
    fprintf(stderr, "%s: %s\n", jpath, err);
    goto done;
  }
  have_graph = 1;
  if (dfl_model_train_graph(&tg, &spec, 0) != DFL_OK) {
    fprintf(stderr, "%s: cannot build the training graph\n", jpath);
    goto done;
  }
  dfl_graph *g = &tg.g;
  if (o->grads_bf16) { /* as the single-device trainer with accum 1 and train.grads = bf16 */
    dfl_fuse_overwrite(g);
    if (dfl_fuse_grads_lowp(g) <= 0) {
      fprintf(stderr, "%s: --grads-bf16: no gradient could be kept in bf16\n", jpath);
      goto done;
    }
  }
  if (dfl_cpu_init(&cpu, g, NULL, o->f64) != DFL_OK) {
    fprintf(stderr, "verify: cannot allocate the CPU backend\n");
    goto done;
  }
  have_cpu = 1;

  /* Weights and the batch. */
  const dfl_st_entry *e;
  if (dfl_weights_load(&cpu, &st, DFL_KIND_BIT(DFL_T_PARAM), "param.", err, sizeof err) != DFL_OK) {
    fprintf(stderr, "%s\n", err);
    goto done;
  }
  /* The fixture names the frozen tensors without the target's "model." prefix. */
  struct { int t; const char *name; int exact; } inputs[] = {
    {tg.drafter.embed, "embed_tokens.weight", 1}, {tg.drafter.lm_head, "lm_head.weight", 1},
    {tg.features, "target_hidden", 0}, {tg.ids, "input_ids", 0}, {tg.loss_mask, "loss_mask", 0},
    {tg.anchors, "anchors", 0}, {tg.keep, "keep", 0}};
  for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
    const dfl_tensor *t = &g->t[inputs[i].t];
    if (inputs[i].exact) {
      if (dfl_st_expect(&st, inputs[i].name, t->ndim, t->shape, &e, err, sizeof err) != DFL_OK) {
        fprintf(stderr, "%s\n", err);
        goto done;
      }
    } else if (!(e = dfl_st_find(&st, inputs[i].name))) {
      fprintf(stderr, "%s: tensor %s: missing\n", spath, inputs[i].name);
      goto done;
    }
    if (dfl_weights_read(&cpu, inputs[i].t, &st, e, err, sizeof err) != DFL_OK) {
      fprintf(stderr, "%s\n", err);
      goto done;
    }
  }
  dfl_cpu_init_masters(&cpu);
  if (o->cuda) {
    if (dfl_be_plan(&gplan, g, DFL_BE_CUDA, 0, 0, stderr) != DFL_OK ||
        dfl_be_open_cuda(&gpu, g, &gplan, NULL, 0, NULL) != DFL_OK) {
      fprintf(stderr, "verify: cannot open the CUDA backend\n");
      goto done;
    }
    have_gpu = 1;
    if (!o->quiet)
      printf("  (CUDA backend, %s graph, arena %.1f MiB = plan %.1f MiB)\n", o->bf16 ? "bf16" : "fp32",
             gpu.arena_bytes / 1048576.0, gplan.arena_bytes / 1048576.0);
  }

  const int np = tg.drafter.n_params;
  before = calloc((size_t)np, sizeof *before);
  gours = calloc((size_t)np, sizeof *gours);
  grefs = calloc((size_t)np, sizeof *grefs);
  if (!before || !gours || !grefs) goto done;
  nkept = np;
  for (int i = 0; i < np; i++) {
    const dfl_tensor *t = &g->t[tg.drafter.params[i]];
    int64_t n = dfl_tensor_numel(t);
    before[i] = malloc(sizeof(double) * (size_t)n);
    dfl_cpu_get_d(&cpu, tg.drafter.params[i], before[i], n);
  }

  /* Forward, loss, backward. */
  if (have_gpu ? gpu_run(&gpu, &cpu, DFL_PH_STEP) != DFL_OK : dfl_cpu_run(&cpu, DFL_PH_STEP) != DFL_OK) {
    fprintf(stderr, "verify: the step failed on the CPU backend\n");
    goto done;
  }
  double num, den;
  dfl_cpu_get_d(&cpu, tg.loss_num_acc, &num, 1);
  dfl_cpu_get_d(&cpu, tg.loss_den_acc, &den, 1);
  int64_t nm = dfl_tensor_numel(&g->t[tg.metrics_acc]);
  double metrics[DFL_METRIC_COUNT + 2 * 4096];
  if (nm > (int64_t)(sizeof metrics / sizeof metrics[0])) goto done;
  dfl_cpu_get_d(&cpu, tg.metrics_acc, metrics, nm);
  double loss = num / den;
  struct { const char *name; double v; } scalars[] = {
    {"out.loss", loss}, {"out.loss_num", num}, {"out.loss_den", den},
    {"out.acc_num", metrics[DFL_METRIC_ACC_NUM]}, {"out.acc_den", metrics[DFL_METRIC_ACC_DEN]}};
  int64_t one = 1;
  for (size_t i = 0; i < sizeof scalars / sizeof scalars[0]; i++) {
    if (!(ref = ref_read(&st, scalars[i].name, 1, &one, err, sizeof err))) { fprintf(stderr, "%s\n", err); goto done; }
    report(tally, scalars[i].name, rel_err(&scalars[i].v, ref, 1));
    free(ref); ref = NULL;
  }

  /* Gradients of loss = num / den: the accumulators hold d num, so divide by den. */
  char name[DFL_NAME_MAX + 16];
  for (int i = 0; i < np; i++) {
    const dfl_tensor *t = &g->t[tg.drafter.params[i]];
    int64_t n = dfl_tensor_numel(t);
    snprintf(name, sizeof name, "grad.%s", t->name);
    if (!(ref = ref_read(&st, name, t->ndim, t->shape, err, sizeof err))) { fprintf(stderr, "%s\n", err); goto done; }
    if (t->grad_acc < 0) {
      fprintf(stderr, "verify: parameter %s got no gradient\n", t->name);
      goto done;
    }
    buf = malloc(sizeof(double) * (size_t)n);
    dfl_cpu_get_d(&cpu, t->grad_acc, buf, n);
    for (int64_t j = 0; j < n; j++) buf[j] /= den;
    report(tally, name, rel_err(buf, ref, n));
    gours[i] = buf; buf = NULL;   /* kept for the update's bound */
    grefs[i] = ref; ref = NULL;
  }

  /* The optimizer step: clip, AdamW; compare the update (updated - param), not the weights. */
  if (have_gpu ? gpu_run(&gpu, &cpu, 1u << DFL_PH_OPTIMIZER) != DFL_OK
               : dfl_cpu_run(&cpu, 1u << DFL_PH_OPTIMIZER) != DFL_OK) {
    fprintf(stderr, "verify: the optimizer step failed on the CPU backend\n");
    goto done;
  }
  double state[DFL_OPT_COUNT];
  dfl_cpu_get_d(&cpu, tg.opt_state, state, DFL_OPT_COUNT);
  if (!(ref = ref_read(&st, "out.grad_norm_preclip", 1, &one, err, sizeof err))) { fprintf(stderr, "%s\n", err); goto done; }
  report(tally, "out.grad_norm_preclip", rel_err(&state[DFL_OPT_GNORM], ref, 1));
  /* clip coefficients of our step and of the reference's, as OPT_PREP computes them */
  const double cl = spec.clip, cours = cl > 0 ? fmin(1.0, cl / (state[DFL_OPT_GNORM] + 1e-6)) : 1.0,
               cref = cl > 0 ? fmin(1.0, cl / (ref[0] + 1e-6)) : 1.0;
  free(ref); ref = NULL;
  for (int i = 0; i < np; i++) {
    const dfl_tensor *t = &g->t[tg.drafter.params[i]];
    int64_t n = dfl_tensor_numel(t);
    snprintf(name, sizeof name, "updated.%s", t->name);
    if (!(ref = ref_read(&st, name, t->ndim, t->shape, err, sizeof err))) { fprintf(stderr, "%s\n", err); goto done; }
    snprintf(name, sizeof name, "param.%s", t->name);
    if (!(ref2 = ref_read(&st, name, t->ndim, t->shape, err, sizeof err))) { fprintf(stderr, "%s\n", err); goto done; }
    buf = malloc(sizeof(double) * (size_t)n);
    dfl_cpu_get_d(&cpu, t->master >= 0 ? t->master : tg.drafter.params[i], buf, n);
    for (int64_t j = 0; j < n; j++) {
      buf[j] -= before[i][j];
      ref[j] -= ref2[j];
    }
    snprintf(name, sizeof name, "update.%s", t->name);
    if (o->bf16) {
      /* judged |grad|-weighted (rel_err_weighted); the plain error is printed for information */
      double plain = rel_err(buf, ref, n);
      free(ref2); ref2 = NULL;
      snprintf(name, sizeof name, "grad.%s", t->name);
      if (!(ref2 = ref_read(&st, name, t->ndim, t->shape, err, sizeof err))) { fprintf(stderr, "%s\n", err); goto done; }
      snprintf(name, sizeof name, "update.%s", t->name);
      if (!tally->quiet) printf("  %-52s %.3e (plain; not judged in bf16)\n", name, plain);
      report(tally, name, rel_err_weighted(buf, ref, ref2, n));
    } else {
      double un = 0;
      for (int64_t j = 0; j < n; j++) un += ref[j] * ref[j];
      double carry = update_carry(gours[i], grefs[i], n, cours, cref, spec.lr, spec.eps);
      report_bound(tally, name, rel_err(buf, ref, n), o->tol + (un > 0 ? carry / sqrt(un) : carry));
    }
    free(buf); buf = NULL;
    free(ref); ref = NULL;
    free(ref2); ref2 = NULL;
  }
  status = tally->worst <= 1.0 ? 0 : 1;

done:
  free(buf);
  free(ref);
  free(ref2);
  for (int i = 0; i < nkept; i++) {
    if (before) free(before[i]);
    if (gours) free(gours[i]);
    if (grefs) free(grefs[i]);
  }
  free(before);
  free(gours);
  free(grefs);
  if (have_gpu) dfl_be_close(&gpu);
  if (gplan.offset) dfl_plan_free(&gplan);
  if (have_cpu) dfl_cpu_free(&cpu);
  if (have_graph) dfl_graph_free(&tg.g);
  dfl_st_close(&st);
  json_decref(root);
  return status;
}

int dfl_cmd_verify(int argc, char **argv) {
  verify_opts o = {1e-4, 0, 0, 0, 0, 0, 0};
  const char *fixture = NULL;
  int tol_set = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return 0; }
    else if (!strcmp(argv[i], "--f64")) o.f64 = 1;
    else if (!strcmp(argv[i], "--quiet")) o.quiet = 1;
    else if (!strcmp(argv[i], "--cuda")) o.cuda = 1;
    else if (!strcmp(argv[i], "--fp32")) o.bf16 = 0;
    else if (!strcmp(argv[i], "--bf16")) o.bf16 = 1;
    else if (!strcmp(argv[i], "--grads-bf16")) o.grads_bf16 = 1;
    else if (!strcmp(argv[i], "--tol") && i + 1 < argc) {
      char *end;
      o.tol = strtod(argv[++i], &end);
      tol_set = 1;
      if (*end || !(o.tol > 0)) { fprintf(stderr, "dflc verify: --tol needs a positive number, got '%s'\n", argv[i]); return 2; }
    } else if (!strcmp(argv[i], "--vocab-chunk") && i + 1 < argc) {
      char *end;
      long v = strtol(argv[++i], &end, 10);
      if (*end || v < 1 || v > 0x7fffffff) { fprintf(stderr, "dflc verify: --vocab-chunk needs a positive integer, got '%s'\n", argv[i]); return 2; }
      o.vocab_chunk = (int)v;
    } else if (argv[i][0] == '-') {
      fprintf(stderr, "dflc verify: unknown option '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    } else if (!fixture) fixture = argv[i];
    else { fprintf(stderr, "dflc verify: one fixture at a time ('%s')\n", argv[i]); return 2; }
  }
  if (!fixture) { usage(stderr); return 2; }
  if (o.grads_bf16 && !o.bf16) { fprintf(stderr, "dflc verify: --grads-bf16 needs --cuda --bf16\n"); return 2; }
  if (o.bf16 && !o.cuda) { fprintf(stderr, "dflc verify: --bf16 needs --cuda (the CPU backend computes in f32/f64)\n"); return 2; }
  if (o.cuda && o.f64) { fprintf(stderr, "dflc verify: --f64 is for the CPU backend; drop it with --cuda\n"); return 2; }
  if (o.cuda && !dfl_be_cuda_available()) {
    printf("SKIP: --cuda needs a usable CUDA device (none found, or this build has no CUDA backend)\n");
    return 77;
  }
  /* bf16: the fixture is float64; bf16 params and activations (8 mantissa bits) give ~1e-2
  ** relative errors, the AdamW update of near-zero gradients more: see docs/journal/2026-11-performance.md */
  if (o.bf16 && !tol_set) o.tol = 5e-2;
  char base[DFL_PATH_MAX];
  snprintf(base, sizeof base, "%s", fixture);
  size_t n = strlen(base);
  if (n > 5 && !strcmp(base + n - 5, ".json")) base[n - 5] = 0;
  else if (n > 12 && !strcmp(base + n - 12, ".safetensors")) base[n - 12] = 0;

  verify_tally t = {0, 0, 0, "", 0, o.quiet, o.tol};
  printf("dflc verify %s (%s%s, tol %.1e)\n", base, o.cuda ? "cuda " : "", o.f64 ? "f64" : o.bf16 ? "bf16" : "f32", o.tol);
  int rc = verify_run(base, &o, &t);
  if (rc == 2) {
    printf("FAIL: the fixture could not be checked (see the error above)\n");
    return 2;
  }
  printf("%s: worst relative error %.3e (%s, bound %.3e) over %d quantities, tolerance %.1e\n",
         rc == 0 ? "PASS" : "FAIL", t.worst_err, t.worst_name, t.worst_bound, t.n, o.tol);
  return rc;
}
