/*
** accept.c: the greedy decoder's acceptance length counted on the eval data, and the target's
** agreement with that data (see accept.h).
*/
#include "runtime/train/accept.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "models/models.h"
#include "runtime/compile.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* --- the walk --- */

void dfl_walk_init(dfl_walk *w, const int32_t *mask, int S, int B) {
  memset(w, 0, sizeof *w);
  w->mask = mask;
  w->S = S;
  w->B = B;
}

int dfl_walk_candidate(const dfl_walk *w, int from) {
  for (int p = from < 0 ? 0 : from; p + 1 < w->S; p++)
    if (w->mask[p] && w->mask[p + 1]) return p;
  return -1;
}

void dfl_walk_take(dfl_walk *w, int accepted) {
  int a = dfl_walk_anchor(w);
  if (a < 0) return;
  w->blocks++;
  w->tokens += accepted + 1;   /* the accepted drafts and the target's own next token */
  w->from = a + accepted + 1;
  w->span_blocks++;
  w->span_tokens += accepted + 1;
  /* the positions a .. from are all supervised, so the response goes on iff from is a candidate */
  if (dfl_walk_candidate(w, w->from) != w->from) {
    w->span_sum += (double)w->span_tokens / (double)w->span_blocks;
    w->spans++;
    w->span_tokens = w->span_blocks = 0;
  }
}

int dfl_walk_accepted(const float *correct, const int32_t *mask, int S, int B, int anchor) {
  int k = 0;
  for (int j = 1; j < B && anchor + j < S && mask[anchor + j] && correct[j] > 0.5f; j++) k++;
  return k;
}

/* --- rounds over the rows --- */

int dfl_accept_count(const int32_t *masks, int n, int S, int B, int b, int N, int W, dfl_accept_run_fn run,
                     void *ctx, dfl_accept_stats *st) {
  double t0 = now_s();
  memset(st, 0, sizeof *st);
  if (n <= 0) return DFL_OK;
  if (b <= 0 || N <= 0 || B < 2) return DFL_ERR;
  if (W <= 0 || W > N) W = N;
  dfl_walk *w = malloc(sizeof *w * (size_t)b);
  int *row = malloc(sizeof(int) * (size_t)b);
  int32_t *anc = malloc(sizeof(int32_t) * (size_t)b * N), *keep = malloc(sizeof(int32_t) * (size_t)b * N);
  int *used = malloc(sizeof(int) * (size_t)b);
  float *cor = malloc(sizeof(float) * (size_t)b * N * B);
  int rc = w && row && anc && keep && used && cor ? DFL_OK : DFL_ENOMEM;
  int k = 0, next = 0;   /* rows in flight (slots 0..k-1), next row to start */
  while (rc == DFL_OK) {
    /* fill free slots with the next rows; a row without any block ends at once */
    while (k < b && next < n) {
      dfl_walk_init(&w[k], masks + (int64_t)next * S, S, B);
      row[k] = next++;
      st->rows++;
      if (dfl_walk_anchor(&w[k]) >= 0) k++;
    }
    if (k == 0) break;
    /* each row's window: its next N anchor candidates, from the walk's next anchor on */
    for (int i = 0; i < b; i++) {
      int m = 0;
      for (int p = i < k ? dfl_walk_anchor(&w[i]) : -1; p >= 0 && m < W; p = dfl_walk_candidate(&w[i], p + 1)) {
        anc[(int64_t)i * N + m] = p;
        keep[(int64_t)i * N + m++] = 1;
      }
      used[i] = m;
      for (; m < N; m++) anc[(int64_t)i * N + m] = keep[(int64_t)i * N + m] = 0;
    }
    if ((rc = run(ctx, row, k, anc, keep, cor))) break;
    st->rounds++;
    /* the walk through each window: blocks whose anchors it holds, in order */
    for (int i = 0; i < k; i++) {
      const int32_t *a = anc + (int64_t)i * N;
      int m = 0;
      st->anchors_run += used[i];
      for (int p = dfl_walk_anchor(&w[i]); p >= 0 && p <= a[used[i] - 1]; p = dfl_walk_anchor(&w[i])) {
        while (a[m] < p) m++;   /* p is a candidate >= a[m], and the window holds every candidate */
        dfl_walk_take(&w[i], dfl_walk_accepted(cor + ((int64_t)i * N + m) * B, w[i].mask, S, B, p));
      }
    }
    /* finished rows out, the others moved down (slots stay in row order) */
    int kk = 0;
    for (int i = 0; i < k; i++) {
      if (dfl_walk_anchor(&w[i]) < 0) {
        st->tokens += w[i].tokens;
        st->blocks += w[i].blocks;
        st->spans += w[i].spans;
        st->accept_spans += w[i].span_sum;   /* a sum until the end */
        continue;
      }
      w[kk] = w[i];
      row[kk++] = row[i];
    }
    k = kk;
  }
  free(w);
  free(row);
  free(anc);
  free(keep);
  free(used);
  free(cor);
  st->accept = st->blocks > 0 ? (double)st->tokens / (double)st->blocks : 0;
  st->accept_spans = st->spans > 0 ? st->accept_spans / (double)st->spans : 0;
  st->seconds = now_s() - t0;
  return rc;
}

/* --- the target's agreement with the data --- */

int dfl_target_agreement(const dfl_spec *s, dfl_backend_kind kind, const dfl_dataset *d, dfl_agree_stats *st) {
  double t0 = now_s();
  memset(st, 0, sizeof *st);
  const int b = s->batch, S = s->seq_len;
  const int64_t R = (int64_t)b * S;
  /* the graph and plan from the compile entry point (runtime/compile.c, DFL_COMPILE_AGREE) */
  dfl_compile_req req = {.what = DFL_COMPILE_AGREE, .backend = kind == DFL_BE_CUDA ? DFL_COMPILE_BE_CUDA : DFL_COMPILE_BE_CPU,
                         .device_memory = kind == DFL_BE_CUDA ? dfl_be_cuda_memory() : 0};
  dfl_compiled c;
  int kd = dfl_compile_drafter_device(s);
  int rc = dfl_compile_device(s, kd < 0 ? 0 : kd, &req, &c);
  if (rc != DFL_OK && !(rc == DFL_ERR && c.planned)) {
    dfl_compiled_free(&c);
    fprintf(stderr, "dflc: cannot build the target graph for the agreement check\n");
    return rc;
  }
  rc = DFL_OK;
  const dfl_agree_io io = c.agree;
  const int ids = io.ids, labels = io.labels, wts = io.weights;
  dfl_graph g;
  dfl_plan plan;
  int planned;
  dfl_compiled_take_target(&c, &g, &plan, &planned);
  dfl_cpu cpu;
  memset(&cpu, 0, sizeof cpu);
  dfl_backend be;
  memset(&be, 0, sizeof be);
  if (kind == DFL_BE_CUDA) {
    int in[2] = {ids, labels};
    rc = dfl_be_open_cuda(&be, &g, planned ? &plan : NULL, in, 2, &s->opt);
  } else if ((rc = dfl_cpu_init(&cpu, &g, planned ? &plan : NULL, 0)) == DFL_OK) {
    if ((rc = dfl_be_open_cpu(&be, &cpu))) dfl_cpu_free(&cpu);
  }
  int opened = rc == DFL_OK;
  if (rc) fprintf(stderr, "dflc: cannot set up the %s backend for the agreement check\n", kind == DFL_BE_CUDA ? "CUDA" : "CPU");
  if (rc == DFL_OK) rc = dfl_be_load_weights(&be, s, NULL);
  int32_t *mrows = malloc(sizeof(int32_t) * (size_t)R), *idrows = malloc(sizeof(int32_t) * (size_t)R);
  float *w = malloc(sizeof(float) * (size_t)R), *cor = malloc(sizeof(float) * (size_t)R);
  int *rows = malloc(sizeof(int) * (size_t)b);
  if (rc == DFL_OK && !(mrows && idrows && w && cor && rows)) rc = DFL_ENOMEM;
  double num_sum = 0;
  for (int start = 0; rc == DFL_OK && start < d->n; start += b) {
    int k = d->n - start < b ? d->n - start : b;
    for (int r = 0; r < k; r++) rows[r] = start + r;
    memset(idrows, 0, sizeof(int32_t) * (size_t)R);
    memset(mrows, 0, sizeof(int32_t) * (size_t)R);
    dfl_data_pack(d, rows, k, S, idrows, mrows);
    int32_t *in_ids = dfl_be_input_i32(&be, ids), *in_lab = dfl_be_input_i32(&be, labels);
    if (!in_ids || !in_lab) {
      rc = DFL_ERR;
      break;
    }
    memcpy(in_ids, idrows, sizeof(int32_t) * (size_t)R);
    /* row position p predicts the token at p + 1: supervised there = counted */
    for (int64_t i = 0; i < R; i++) {
      int last = (i % S) == S - 1;
      in_lab[i] = last ? 0 : idrows[i + 1];
      w[i] = !last && mrows[i + 1] ? 1.0f : 0.0f;
    }
    float num = 0;
    if ((rc = dfl_be_set_f(&be, wts, w, R)) || (rc = dfl_be_commit_inputs(&be)) || (rc = dfl_be_run(&be, DFL_PH_ALL)) ||
        (rc = dfl_be_get_f(&be, io.correct, cor, R)) || (rc = dfl_be_get_f(&be, io.num, &num, 1)))
      break;
    for (int64_t i = 0; i < R; i++) {
      if (w[i] <= 0) continue;
      st->tokens++;
      st->agreeing += cor[i] > 0.5f;
    }
    num_sum += num;
    st->rows += k;
  }
  free(mrows);
  free(idrows);
  free(w);
  free(cor);
  free(rows);
  if (opened) dfl_be_close(&be);
  if (cpu.g) dfl_cpu_free(&cpu);
  if (planned) dfl_plan_free(&plan);
  dfl_graph_free(&g);
  st->agreement = st->tokens > 0 ? (double)st->agreeing / (double)st->tokens : 0;
  st->ce = st->tokens > 0 ? num_sum / (double)st->tokens : 0;
  st->seconds = now_s() - t0;
  return rc;
}

void dfl_agree_print(FILE *f, const dfl_agree_stats *st) {
  fprintf(f, "agreement %.4f  (%lld of %lld supervised tokens are the target's argmax; target CE %.3f, %.1fs)\n",
          st->agreement, (long long)st->agreeing, (long long)st->tokens, st->ce, st->seconds);
  if (st->tokens > 0 && st->agreement < DFL_AGREE_GREEDY)
    fprintf(f, "note: below %.0f%%: the data is not the target's greedy output, so accept is an estimate. A greedy "
            "decoder verifies drafts against the target's argmax, not against these tokens: where they differ it "
            "would accept other tokens and walk another path. Regenerate the responses with the target (greedy) "
            "for the decoder's own count.\n", 100 * DFL_AGREE_GREEDY);
  fflush(f);
}
