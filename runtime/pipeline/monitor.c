/*
** monitor.c: pipeline diagnostics (see monitor.h).
*/
#include "runtime/pipeline/monitor.h"

#include <inttypes.h>
#include <string.h>
#include <time.h>

#include "compiler/status.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *state_name[DFL_DS_COUNT] = {"busy", "wait_in", "wait_out", "sync", "idle"};
static const char *role_name[] = {"loader", "target", "drafter", "target+drafter"};

int dfl_mon_init(dfl_mon *d, dfl_queue *queue, dfl_queue *prefetch) {
  memset(d, 0, sizeof *d);
  if (pthread_mutex_init(&d->mu, NULL)) return DFL_ERR;
  d->queue = queue;
  d->prefetch = prefetch;
  d->t_last = now_s();
  d->threshold = 0.10;
  return DFL_OK;
}

void dfl_mon_free(dfl_mon *d) { pthread_mutex_destroy(&d->mu); }

int dfl_mon_add_dev(dfl_mon *d, const char *name, dfl_mon_role role, int64_t mem_bytes) {
  if (d->n >= DFL_MON_MAX_DEV) return -1;
  dfl_mon_dev *v = &d->dev[d->n];
  snprintf(v->name, sizeof v->name, "%s", name);
  v->role = role;
  v->state = DFL_DS_WAIT_IN;   /* not started yet: waiting for its first input */
  v->since = now_s();
  v->mem_bytes = mem_bytes;
  return d->n++;
}

void dfl_mon_set(dfl_mon *d, int dev, dfl_mon_state st) {
  double t = now_s();
  pthread_mutex_lock(&d->mu);
  dfl_mon_dev *v = &d->dev[dev];
  v->t[v->state] += t - v->since;
  v->state = st;
  v->since = t;
  pthread_mutex_unlock(&d->mu);
}

void dfl_mon_item(dfl_mon *d, int dev) {
  pthread_mutex_lock(&d->mu);
  d->dev[dev].items++;
  pthread_mutex_unlock(&d->mu);
}

static int pct(double x) { return (int)(100.0 * x + 0.5); }

dfl_bound dfl_mon_verdict(const dfl_mon_summary *s, double thr, char *out, size_t n) {
  if (!s->has_queue) {
    /* colocated replicas: the only queue is the loader's */
    if (s->drafter_idle >= thr) {
      snprintf(out, n, "bound by data loading: devices idle %d%% waiting on the loader", pct(s->drafter_idle));
      return DFL_BOUND_DATA;
    }
    snprintf(out, n, "bound by compute (colocated target+drafter): devices busy %d%%, in all-reduce %d%%",
             pct(s->drafter_busy), pct(s->drafter_sync));
    return DFL_BOUND_BALANCED;
  }
  /* A target that has produced its whole share is as far ahead as a blocked one. */
  double ahead = s->target_blocked + s->target_done;
  if (s->drafter_idle >= thr && s->drafter_idle > ahead) {
    if (s->target_starved >= thr && s->target_starved >= 0.5 * s->drafter_idle) {
      snprintf(out, n, "bound by data loading: targets wait on the loader %d%%, drafters idle %d%% waiting on "
               "the queue", pct(s->target_starved), pct(s->drafter_idle));
      return DFL_BOUND_DATA;
    }
    snprintf(out, n, "bound by target: drafters idle %d%% waiting on the queue; queue empty %d%% of the time",
             pct(s->drafter_idle), pct(s->q_empty));
    return DFL_BOUND_TARGET;
  }
  if (ahead >= thr && ahead >= s->drafter_idle) {
    if (s->target_done > 0.005)
      snprintf(out, n, "bound by drafters: queue full %d%%, targets blocked %d%% (finished their share %d%%)",
               pct(s->q_full), pct(s->target_blocked), pct(s->target_done));
    else
      snprintf(out, n, "bound by drafters: queue full %d%%, targets blocked %d%%", pct(s->q_full),
               pct(s->target_blocked));
    return DFL_BOUND_DRAFTER;
  }
  snprintf(out, n, "balanced: drafters idle %d%%, targets blocked %d%%, queue %.1f/%d slots full on average",
           pct(s->drafter_idle), pct(s->target_blocked), s->q_mean, s->q_depth);
  return DFL_BOUND_BALANCED;
}

dfl_bound dfl_mon_report(dfl_mon *d, int64_t step, FILE *log, FILE *jsonl, dfl_mon_summary *sum_out,
                          char *verdict, size_t vn) {
  dfl_mon_dev snap[DFL_MON_MAX_DEV];
  static __thread dfl_queue_sample qs, ps;   /* large: off the stack */
  double t = now_s();
  pthread_mutex_lock(&d->mu);
  double span = t - d->t_last;
  d->t_last = t;
  int n = d->n;
  for (int i = 0; i < n; i++) {
    dfl_mon_dev *v = &d->dev[i];
    v->t[v->state] += t - v->since;
    v->since = t;
    if (d->mem_fn && v->role != DFL_DR_LOADER) v->mem_bytes = d->mem_fn(d->mem_ctx, i);   /* the loader holds none */
    snap[i] = *v;
    memset(v->t, 0, sizeof v->t);
    v->items = 0;
  }
  pthread_mutex_unlock(&d->mu);
  memset(&qs, 0, sizeof qs);
  memset(&ps, 0, sizeof ps);
  if (d->queue) dfl_queue_sample_take(d->queue, &qs);
  if (d->prefetch) dfl_queue_sample_take(d->prefetch, &ps);
  if (span <= 0) span = 1e-9;

  dfl_mon_summary s;
  memset(&s, 0, sizeof s);
  s.has_queue = d->queue != NULL;
  int nt = 0, nd = 0;
  for (int i = 0; i < n; i++) {
    const dfl_mon_dev *v = &snap[i];
    if (v->role == DFL_DR_TARGET) {
      nt++;
      s.target_busy += v->t[DFL_DS_BUSY] / span;
      s.target_blocked += v->t[DFL_DS_WAIT_OUT] / span;
      s.target_starved += v->t[DFL_DS_WAIT_IN] / span;
      s.target_done += v->t[DFL_DS_IDLE] / span;
    } else if (v->role == DFL_DR_DRAFTER || v->role == DFL_DR_BOTH) {
      nd++;
      s.drafter_busy += v->t[DFL_DS_BUSY] / span;
      s.drafter_idle += v->t[DFL_DS_WAIT_IN] / span;
      s.drafter_sync += v->t[DFL_DS_SYNC] / span;
    }
  }
  if (nt) s.target_busy /= nt, s.target_blocked /= nt, s.target_starved /= nt, s.target_done /= nt;
  if (nd) s.drafter_busy /= nd, s.drafter_idle /= nd, s.drafter_sync /= nd;
  if (d->queue) {
    s.q_empty = qs.empty;
    s.q_full = qs.full;
    s.q_mean = qs.mean;
    s.q_depth = d->queue->depth;
  }
  char v[256];
  dfl_bound b = dfl_mon_verdict(&s, d->threshold, v, sizeof v);
  if (verdict) snprintf(verdict, vn, "%s", v);
  if (sum_out) *sum_out = s;

  if (log) {
    fprintf(log, "diag step %" PRId64 " (%.1fs):", step, span);
    for (int i = 0; i < n; i++)
      if (snap[i].role != DFL_DR_LOADER) fprintf(log, " %s %d%%", snap[i].name, pct(snap[i].t[DFL_DS_BUSY] / span));
    fprintf(log, " busy");
    if (d->queue)
      fprintf(log, "; queue %.1f/%d, empty %d%% full %d%%; %.1f/%.1f slots/s in/out", qs.mean, d->queue->depth,
              pct(qs.empty), pct(qs.full), qs.committed / span, qs.released / span);
    fprintf(log, "\n  verdict: %s\n", v);
    fflush(log);
  }
  if (jsonl) {
    fprintf(jsonl, "{\"diag\":true,\"step\":%" PRId64 ",\"seconds\":%.4f,\"devices\":[", step, span);
    for (int i = 0; i < n; i++) {
      const dfl_mon_dev *dv = &snap[i];
      fprintf(jsonl, "%s{\"name\":\"%s\",\"role\":\"%s\"", i ? "," : "", dv->name, role_name[dv->role]);
      for (int k = 0; k < DFL_DS_IDLE; k++) fprintf(jsonl, ",\"%s\":%.4f", state_name[k], dv->t[k] / span);
      fprintf(jsonl, ",\"items_per_s\":%.4f,\"mem_bytes\":%" PRId64 "}", dv->items / span, dv->mem_bytes);
    }
    fprintf(jsonl, "]");
    const dfl_queue_sample *smp[2] = {&qs, &ps};
    const dfl_queue *qq[2] = {d->queue, d->prefetch};
    const char *qn[2] = {"queue", "prefetch"};
    for (int k = 0; k < 2; k++) {
      if (!qq[k]) continue;
      fprintf(jsonl, ",\"%s\":{\"depth\":%d,\"hist\":[", qn[k], qq[k]->depth);
      for (int i = 0; i <= qq[k]->depth; i++) fprintf(jsonl, "%s%.4f", i ? "," : "", smp[k]->hist[i]);
      fprintf(jsonl, "],\"empty\":%.4f,\"full\":%.4f,\"mean\":%.4f,\"in_per_s\":%.4f,\"out_per_s\":%.4f}",
              smp[k]->empty, smp[k]->full, smp[k]->mean, smp[k]->committed / span, smp[k]->released / span);
    }
    if (d->queue)
      fprintf(jsonl, ",\"producer_rate\":%.4f,\"consumer_rate\":%.4f,\"consumer_tokens_per_s\":%.1f",
              qs.committed / span, qs.released / span, qs.tokens_released / span);
    static const char *bn[] = {"balanced", "target", "drafter", "data"};
    fprintf(jsonl, ",\"bound\":\"%s\",\"verdict\":\"%s\"}\n", bn[b], v);
    fflush(jsonl);
  }
  return b;
}
