/*
** train_run.c: a whole `dflc train` run over the trainer (dfl_train_run): the pipelined loop, the
** progress lines and metrics.jsonl, the periodic checkpoints and evaluations, the best checkpoint,
** the diagnosis of a non-finite loss, the export at the end and the next-steps hint; the printing
** of evaluations and step timings that `dflc eval` and the pipeline runner share.
*/
#include "runtime/train/train_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/io/weights.h"
#include "runtime/io/checkpoint.h"
#include "runtime/backend.h"
#ifdef DFL_HAVE_CUDA
#include "runtime/cuda/cuda.h"
#endif
#include "runtime/train/train_export.h"

/* --- printing: evaluations, step positions, timings --- */

static void print_pos(FILE *f, const double *pos, int B, int maxn) {
  fprintf(f, "  acc@j");
  for (int j = 1; j < B && j <= maxn; j++) fprintf(f, " %.2f", pos[j] < 0 ? 0.0 : pos[j]);
  if (B - 1 > maxn) fprintf(f, " ...");
}

void dfl_eval_print(FILE *f, const char *what, const dfl_eval_stats *es) {
  fprintf(f, "%s  loss %.3f  acc %.3f", what, es->loss, es->acc);
  print_pos(f, es->acc_pos, es->B, 7);
  fprintf(f, "  tau %.3f  accept %.3f  (%" PRId64 " rows, %" PRId64 " blocks, %.1fs; the walk %" PRId64
          " blocks, %.1fs)\n", es->tau, es->accept, es->rows, es->blocks, es->seconds, es->accept_blocks,
          es->accept_seconds);
  fflush(f);
}

static void json_pos(FILE *f, const double *pos, int B) {
  fprintf(f, "[");
  for (int j = 0; j < B; j++) {
    if (pos[j] < 0) fprintf(f, "%snull", j ? "," : "");
    else fprintf(f, "%s%.6g", j ? "," : "", pos[j]);
  }
  fprintf(f, "]");
}

void dfl_train_eta(char *buf, size_t n, double elapsed, int64_t done, int64_t left) {
  double eta = done > 0 ? elapsed / (double)done * (double)left : 0;
  long e = (long)(elapsed + 0.5), r = (long)(eta + 0.5);
  snprintf(buf, n, "elapsed %ld:%02ld:%02ld  eta %ld:%02ld:%02ld", e / 3600, e / 60 % 60, e % 60, r / 3600, r / 60 % 60,
           r % 60);
}

/* 12345 -> "12,345" */
static const char *thousands(double v, char *buf, size_t n) {
  char raw[32];
  snprintf(raw, sizeof raw, "%.0f", v < 0 ? 0 : v);
  size_t len = strlen(raw), k = 0;
  for (size_t i = 0; i < len && k + 2 < n; i++) {
    if (i && (len - i) % 3 == 0) buf[k++] = ',';
    buf[k++] = raw[i];
  }
  buf[k] = 0;
  return buf;
}

void dfl_eval_jsonl(FILE *f, int64_t step, const dfl_eval_stats *es) {
  fprintf(f, "{\"eval\":true,\"step\":%" PRId64 ",\"loss\":%.6g,\"acc\":%.6g,\"tau\":%.6g,"
          "\"acceptance_length\":%.6g,\"acceptance_length_responses\":%.6g,\"topk\":%.6g,\"rows\":%" PRId64
          ",\"blocks\":%" PRId64 ",\"accept_tokens\":%" PRId64 ",\"accept_blocks\":%" PRId64 ",\"acc_pos\":", step,
          es->loss, es->acc, es->tau, es->accept, es->accept_responses, es->topk, es->rows, es->blocks,
          es->accept_tokens, es->accept_blocks);
  json_pos(f, es->acc_pos, es->B);
  fprintf(f, "}\n");
  fflush(f);
}

static void eval_jsonl(dfl_trainer *tr, const dfl_eval_stats *es) { dfl_eval_jsonl(tr->mjsonl, tr->step, es); }

/* --- the run --- */

/* A loss that is not finite: what went non-finite first, then the advice for that. The drafter's
** weights are read back (on a GPU through a host copy); the features only where they are still
** there (an INPUT, or an unplanned run); the target's weights were scanned when they were loaded. */
static void explain_nonfinite(dfl_trainer *tr, const dfl_step_stats *st, double prev_gnorm) {
  const dfl_graph *g = &tr->tg.g;
  char wname[DFL_NAME_MAX] = "";
  int64_t wat = -1;
  dfl_cpu shadow, *h = dfl_train_flush(tr) || dfl_be_sync(&tr->be) ? NULL : dfl_be_host(&tr->be, DFL_KIND_BIT(DFL_T_PARAM), 1, &shadow);
  for (int t = 0; h && t < g->nt && wat < 0; t++) {
    if (g->t[t].kind != DFL_T_PARAM) continue;
    const float *v = dfl_cpu_f32(h, t);
    int64_t n = dfl_tensor_numel(&g->t[t]);
    for (int64_t i = 0; v && i < n; i++)
      if (!isfinite(v[i])) { wat = i; snprintf(wname, sizeof wname, "%s", g->t[t].name); break; }
  }
  if (h) dfl_be_host_done(&tr->be, h, 0);
  int feat = -1;   /* -1: not readable, 0: finite, 1: not */
  int ft = tr->tg.features;
  if (ft >= 0 && (g->t[ft].kind == DFL_T_INPUT || !tr->planned)) {
    int64_t n = dfl_tensor_numel(&g->t[ft]);
    float *f = malloc(sizeof(float) * (size_t)n);
    if (f && dfl_be_get_f(&tr->be, ft, f, n) == DFL_OK) {
      feat = 0;
      for (int64_t i = 0; i < n && !feat; i++) feat = !isfinite(f[i]);
    }
    free(f);
  }
  /* The step's weights are those after the previous step's update: finite when its gradients
  ** were (an Adam step is bounded by lr). What the drafter holds now is this step's update. */
  fprintf(stderr, "dflc: step %" PRId64 ": the loss is %s; stopping. What went non-finite first:\n", st->step,
          isnan(st->loss) ? "NaN" : "infinite");
  if (feat == 1) {
    fprintf(stderr, "  the features: the target's tapped hidden states hold NaN/Inf (its weights were finite when loaded)\n"
                    "  = help: the target overflows in this precision: try `target { dtype = fp32 }`; a lower lr will not help\n");
  } else if (!isfinite(prev_gnorm)) {
    fprintf(stderr, "  the gradients of step %" PRId64 " (gnorm %s), whose update made the drafter's weights non-finite%s%s\n",
            st->step - 1, isnan(prev_gnorm) ? "NaN" : "Inf", wat >= 0 ? " (first: " : "", wat >= 0 ? wname : "");
    if (wat >= 0) fprintf(stderr, "  )\n");
    fprintf(stderr, "  = help: the training diverged: try a lower lr (now %.3g), `clip = 1.0`, or a longer warmup\n", tr->spec.lr);
  } else {
    fprintf(stderr, "  the loss itself: the drafter's weights were finite (the previous step's gradients were) and %s\n",
            feat == 0 ? "so were the features" : "the features are not kept after the step (not checked)");
    fprintf(stderr, "  = help: the logits overflow: a target lm_head or embedding with huge values (a damaged checkpoint?), "
                    "or bf16 overflow: try `precision = fp32`\n");
  }
  (void)wat;
}

/* After the evaluation of a step that has its checkpoint: a higher accept than every earlier one
** (an equal one keeps the earlier) makes it ROOT/best. accept, not tau: it is the number a greedy
** decoder will show, and tau can rank two drafters the other way (tau is a mean over positions,
** accept weighs the weak ones more, accept.h). */
static int note_best(dfl_trainer *tr, const dfl_eval_stats *es, FILE *log) {
  if (tr->best_step >= 0 && !(es->accept > tr->best_accept)) return DFL_OK;
  char root[DFL_PATH_MAX];
  int rc = train_ckpt_root(tr, root, sizeof root);
  if (rc == DFL_OK) rc = dfl_ckpt_mark_best(root, tr->step, es->accept, es->tau, es->loss);
  if (rc) return rc;
  dfl_ckpt_prune(root, tr->spec.ckpt_keep, tr->step);   /* the former best, if outside ckpt_keep now */
  tr->best_step = tr->step;
  tr->best_accept = es->accept;
  if (!tr->opts.quiet)
    fprintf(log, "best so far (eval accept %.3f, tau %.3f): %s/best -> step %" PRId64 "\n", es->accept, es->tau, root,
            tr->step);
  return DFL_OK;
}

static int do_eval(dfl_trainer *tr, dfl_eval_stats *es, FILE *log) {
  int rc = dfl_train_evaluate(tr, es);
  if (rc) {
    fprintf(stderr, "dflc: evaluation failed at step %" PRId64 "\n", tr->step);
    return rc;
  }
  char what[64];
  snprintf(what, sizeof what, "eval %" PRId64 "/%" PRId64, tr->step, tr->spec.steps);
  dfl_eval_print(log, what, es);
  eval_jsonl(tr, es);
  return DFL_OK;
}

int dfl_train_run(dfl_trainer *tr, dfl_eval_stats *first, dfl_eval_stats *last) {
  const dfl_spec *s = &tr->spec;
  FILE *log = tr->opts.log ? tr->opts.log : stdout;
  int quiet = tr->opts.quiet;
  int64_t end = s->steps;
  if (tr->opts.stop_at > 0 && tr->opts.stop_at < end) end = tr->opts.stop_at;
  int nm = DFL_METRIC_COUNT + 2 * s->block_size;
  int64_t np = 0;
  for (int i = 0; i < tr->tg.drafter.n_params; i++) np += dfl_tensor_numel(&tr->tg.g.t[tr->tg.drafter.params[i]]);
  fprintf(log, "backend: %s, precision %s\n", tr->be.name, s->precision == DFL_PREC_BF16 ? "bf16" : "fp32");
#ifdef DFL_HAVE_CUDA
  char gdesc[512];   /* which kernels this GPU's architecture gets (docs/gpus.md) */
  if (tr->be.kind == DFL_BE_CUDA && dfl_cuda_describe_device(gdesc, sizeof gdesc) == DFL_OK) fprintf(log, "%s\n", gdesc);
#endif
  char cdesc[256];
  if (dfl_spec_compile_desc(s, 0, cdesc, sizeof cdesc)) fprintf(log, "compile: %s (not the defaults)\n", cdesc);
  fprintf(log, "train: %s, drafter %d layers (%.2fM params), batch %d x %d tokens, %d anchors x %d, accum %d, "
          "%" PRId64 " steps; memory %s %.1f MiB\n", s->file, s->drafter.layers, np / 1e6, tr->tg.batch,
          tr->tg.S, tr->tg.N, s->block_size, s->accum, s->steps, tr->planned ? "planned arena" : "unplanned",
          tr->planned ? tr->plan.arena_bytes / 1048576.0 : 0.0);
  if (tr->overlap)
    fprintf(log, "schedule: each step's optimizer runs beside the next step's target forward\n");
  fprintf(log, "run directory: %s\n", tr->out_dir);
  fflush(log);

  dfl_eval_stats es;
  int rc;
  if (tr->has_eval && tr->step < end) {
    if ((rc = do_eval(tr, &es, log))) return rc;
    if (first) *first = es;
  }

  /* Progress lines report the window since the previous line. */
  double win[2 + DFL_METRIC_COUNT + 2 * 64] = {0}, win_tok = 0, win_t = 0;
  dfl_step_stats st;
  int ckpts = !tr->opts.no_ckpt;
  double prev_gnorm = 0, t_run = train_now_s();
  int64_t step0 = tr->step;
  /* Pipelined: step k+1 is enqueued before the metrics of step k are read, so the device never
  ** waits for the host; a checkpoint step is a barrier (the state saved must be that step's). */
  while (tr->step < end || tr->n_pend > 0) {
    int64_t k = tr->step;
    int barrier = ckpts && k > 0 && s->ckpt_every > 0 && k % s->ckpt_every == 0 && k < end;
    if (k < end && tr->n_pend < 2 && !(barrier && tr->n_pend > 0)) {
      if ((rc = dfl_train_enqueue(tr))) {
        fprintf(stderr, "dflc: step %" PRId64 " failed\n", tr->step + 1);
        return rc;
      }
      if (tr->n_pend < 2 && tr->step < end && !(ckpts && s->ckpt_every > 0 && tr->step % s->ckpt_every == 0))
        continue;
    }
    if ((rc = dfl_train_collect(tr, &st))) {
      fprintf(stderr, "dflc: step %" PRId64 " failed\n", tr->step);
      return rc;
    }
    if (!isfinite(st.loss)) {
      fflush(tr->mjsonl);
      explain_nonfinite(tr, &st, prev_gnorm);
      return DFL_ERR;
    }
    prev_gnorm = st.gnorm;
    fprintf(tr->mjsonl, "{\"step\":%" PRId64 ",\"loss\":%.6g,\"acc\":%.6g,\"tau\":%.6g,\"topk\":%.6g,"
            "\"lr\":%.6g,\"gnorm\":%.6g,\"tokens\":%.0f,\"seconds\":%.4f,\"acc_pos\":", st.step, st.loss, st.acc,
            st.tau, st.topk, st.lr, st.gnorm, st.tokens, st.seconds);
    json_pos(tr->mjsonl, st.acc_pos, st.B);
    fprintf(tr->mjsonl, "}\n");
    for (int i = 0; i < 2 + nm && i < 2 + DFL_METRIC_COUNT + 2 * 64; i++) win[i] += st.sums[i];
    win_tok += st.tokens;
    win_t += st.seconds;
    int at_ckpt = ckpts && s->ckpt_every > 0 && st.step % s->ckpt_every == 0 && st.step < end;
    if (!quiet && (st.step == 1 || (s->log_every > 0 && st.step % s->log_every == 0) || st.step == end ||
                   at_ckpt)) {
      double acc, tau, topk, pos[64];
      char tb[48];
      train_metrics_ratios(win + 2, st.B, &acc, &tau, &topk, pos);
      fprintf(log, "step %" PRId64 "/%" PRId64 "  loss %.3f  acc %.3f", st.step, s->steps,
              win[1] > 0 ? win[0] / win[1] : 0.0, acc);
      print_pos(log, pos, st.B, 7);
      char eta[64];
      dfl_train_eta(eta, sizeof eta, train_now_s() - t_run, st.step - step0, end - st.step);
      fprintf(log, "  tau %.2f  lr %.1e  gnorm %.2f  tok/s %s  %s\n", tau, st.lr, st.gnorm,
              thousands(win_t > 0 ? win_tok / win_t : 0, tb, sizeof tb), eta);
      fflush(log);
      memset(win, 0, sizeof win);
      win_tok = win_t = 0;
      fflush(tr->mjsonl);
    }
    if (at_ckpt) {
      if ((rc = dfl_train_checkpoint(tr))) return rc;
      if (!quiet) fprintf(log, "checkpoint: %s\n", tr->last_ckpt);
      if (tr->has_eval && ((rc = do_eval(tr, &es, log)) || (rc = note_best(tr, &es, log)))) return rc;
    }
  }
  fflush(tr->mjsonl);
  if ((rc = dfl_be_sync(&tr->be))) return rc;
  if (tr->be.kind == DFL_BE_CUDA && tr->mem_max > 0) {
    /* growth over the CUDA context (measured when the backend opened) is what the plan predicts */
    double growth = (double)(tr->mem_max - tr->be.mem_before), plan = tr->planned ? (double)tr->plan.arena_bytes : 0;
    /* the evaluator is a second graph with its own planned arena on the same device */
    int ev = tr->ev.ready && tr->ev.be.kind == DFL_BE_CUDA;
    double ev_plan = ev && tr->ev.planned ? (double)tr->ev.plan.arena_bytes : 0;
    fprintf(log, "device memory in use: %.1f MiB after step %" PRId64 ", %.1f .. %.1f MiB over steps %" PRId64
            "..%" PRId64 " (backend arena %.1f MiB, plan %.1f MiB)\n", tr->mem_first / 1048576.0, tr->first_step,
            tr->mem_min / 1048576.0, tr->mem_max / 1048576.0, tr->first_step + 1, tr->step,
            tr->be.arena_bytes / 1048576.0, plan / 1048576.0);
    if (plan > 0)
      fprintf(log, "device memory above the CUDA context: %.1f MiB = plans %.1f MiB (training %.1f%s) %+.2f%% "
              "(the rest: kernels, cuBLASLt, graphs)\n", growth / 1048576.0, (plan + ev_plan) / 1048576.0,
              plan / 1048576.0, ev ? " + evaluation" : "", 100.0 * (growth - plan - ev_plan) / (plan + ev_plan));
  }
  if (ckpts) {
    if ((rc = dfl_train_checkpoint(tr))) return rc;
    fprintf(log, "checkpoint: %s\n", tr->last_ckpt);
  }
  if (tr->has_eval) {
    if ((rc = do_eval(tr, &es, log))) return rc;
    if (ckpts && (rc = note_best(tr, &es, log))) return rc;
    if (last) *last = es;
  }
  if (tr->step >= s->steps && !tr->opts.no_export) {
    char dir[DFL_PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/drafter", tr->out_dir);
    dfl_ckpt_params view;
    if ((rc = dfl_train_flush(tr))) return rc;
    dfl_cpu shadow, *h = dfl_be_host(&tr->be, DFL_KIND_BIT(DFL_T_PARAM), 1, &shadow);
    if (!h) return DFL_ENOMEM;
    if ((rc = dfl_train_params_view(&tr->tg, h, &view)) == DFL_OK) {
      rc = dfl_train_export_params(&tr->spec, &view, dir);
      if (rc == DFL_OK) rc = dfl_train_verify_params(&tr->spec, &view, dir);
      dfl_train_params_view_free(&view);
    }
    dfl_be_host_done(&tr->be, h, 0);
    if (rc) return rc;
    fprintf(log, "exported drafter: %s (reloaded bit-exactly)\n", dir);
  }
  dfl_train_next_steps(log, s->file, tr->out_dir, tr->step >= s->steps && !tr->opts.no_export, ckpts ? tr->last_ckpt : "");
  return DFL_OK;
}

/* --- after the run --- */

/* A path as a shell word: as is when it holds only safe characters, else in single quotes (a
** quote inside as '\''), so the printed command can be pasted for a path with spaces. */
static const char *shell_word(char *buf, size_t n, const char *p, const char *suffix) {
  char full[2 * DFL_PATH_MAX];
  snprintf(full, sizeof full, "%s%s", p, suffix);
  int safe = full[0] != 0;
  for (const char *q = full; *q && safe; q++)
    safe = (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || strchr("/._-+,:=@%", *q);
  if (safe) {
    snprintf(buf, n, "%s", full);
    return buf;
  }
  size_t k = 0;
  if (k + 1 < n) buf[k++] = '\'';
  for (const char *q = full; *q && k + 5 < n; q++) {
    if (*q == '\'') { memcpy(buf + k, "'\\''", 4); k += 4; }
    else buf[k++] = *q;
  }
  if (k + 1 < n) buf[k++] = '\'';
  buf[k < n ? k : n - 1] = 0;
  return buf;
}

void dfl_train_next_steps(FILE *log, const char *spec, const char *out_dir, int exported, const char *ckpt) {
  char a[4 * DFL_PATH_MAX + 8], b[4 * DFL_PATH_MAX + 8], c[4 * DFL_PATH_MAX + 8];
  if (exported) {
    fprintf(log, "the drafter is in %s/drafter (Hugging Face DFlash format, for SGLang/vLLM)\n", out_dir);
    fprintf(log, "next: dflc eval %s --drafter %s\n", shell_word(a, sizeof a, spec, ""),
            shell_word(b, sizeof b, out_dir, "/drafter"));
  } else if (ckpt && ckpt[0]) {
    fprintf(log, "the newest checkpoint is %s\n", ckpt);
    shell_word(c, sizeof c, ckpt, "");
    fprintf(log, "next: dflc train %s --out %s --resume %s   (or: dflc export %s -o DIR)\n", shell_word(a, sizeof a, spec, ""),
            shell_word(b, sizeof b, out_dir, ""), c, c);
  }
  fflush(log);
}
