/*
** test_diag: the diagnostics verdict. First the rule on synthetic summaries (including the
** boundaries), then end to end: a nano pipeline with a planted bottleneck (sleeps injected in
** every target device, then in every drafter) must be diagnosed as bound by that side in most
** report intervals (but the last, which is the drain: targets done, drafters finishing), and the metrics JSONL must carry the per-device and queue fields.
*/
#include "runtime/io/data.h"
#include "runtime/pipeline/monitor.h"
#include "runtime/pipeline/pipeline.h"
#include "tests/pipeline/common.h"

#define STEPS 6
#define EVERY 2

typedef struct { int n, count[4]; char last[256]; } verdicts;

static void on_diag(void *ctx, int64_t step, dfl_bound b, const char *v) {
  verdicts *vs = ctx;
  printf("  step %" PRId64 ": %s\n", step, v);
  if (step == STEPS) return;   /* the last interval is the drain: targets done, drafters finishing */
  vs->n++;
  vs->count[b]++;
  snprintf(vs->last, sizeof vs->last, "%s", v);
}

static void planted(dfl_spec *s, const char *fault, dfl_bound want, const char *word) {
  verdicts vs;
  memset(&vs, 0, sizeof vs);
  dfl_pipe_opts o;
  dfl_pipe_result r;
  char dir[256];
  quiet_pipe_opts(&o, dir, sizeof dir, "diag", STEPS);
  o.no_ckpt = o.no_export = 1;
  o.fault = fault;
  o.diag_every = EVERY;
  o.on_diag = on_diag;
  o.ctx = &vs;
  printf("fault '%s':\n", fault);
  CHECK(dfl_pipe_run(s, &o, &r) == DFL_OK, "run failed");
  CHECK(vs.count[want] * 2 > vs.n, "fault '%s': %d of %d intervals diagnosed as %s; last: %s", fault, vs.count[want],
        vs.n, word, vs.last);
  CHECK(strstr(vs.last, word), "verdict '%s' does not say '%s'", vs.last, word);
  /* the JSONL diag lines */
  char f[512], line[16384];
  snprintf(f, sizeof f, "%s/metrics.jsonl", dir);
  FILE *m = fopen(f, "r");
  CHECK(m, "no %s", f);
  int diag = 0;
  while (fgets(line, sizeof line, m)) {
    if (!strstr(line, "\"diag\":true")) continue;
    diag++;
    const char *need[] = {"\"name\":\"cpu0\"", "\"role\":\"target\"", "\"role\":\"drafter\"", "\"busy\":",
                          "\"wait_in\":", "\"mem_bytes\":", "\"queue\":{\"depth\":4,\"hist\":[", "\"producer_rate\":",
                          "\"consumer_rate\":", "\"verdict\":\"", NULL};
    for (int i = 0; need[i]; i++) CHECK(strstr(line, need[i]), "diag line lacks %s: %s", need[i], line);
  }
  fclose(m);
  CHECK(diag == STEPS / EVERY, "%d diag lines for %d steps", diag, STEPS);
  snprintf(line, sizeof line, "rm -rf '%s'", dir);
  CHECK(system(line) == 0, "cleanup");
}

int main(void) {
  uint64_t seed = test_seed();
  dfl_rng r;
  dfl_rng_seed(&r, seed);
  char v[256];
  /* the rule */
  for (int i = 0; i < 200; i++) {
    dfl_mon_summary s;
    memset(&s, 0, sizeof s);
    s.has_queue = 1;
    s.q_depth = 4;
    double a = dfl_rng_uniform(&r), b = dfl_rng_uniform(&r);
    s.drafter_idle = a;
    s.target_blocked = b;
    s.q_empty = dfl_rng_uniform(&r);
    s.q_full = dfl_rng_uniform(&r);
    dfl_bound got = dfl_mon_verdict(&s, 0.10, v, sizeof v);
    dfl_bound want = a >= 0.10 && a > b ? DFL_BOUND_TARGET : b >= 0.10 && b >= a ? DFL_BOUND_DRAFTER
                                                                                 : DFL_BOUND_BALANCED;
    CHECK(got == want, "idle %.3f blocked %.3f: verdict %d (%s), want %d", a, b, got, v, want);
    char pct[16];
    if (got == DFL_BOUND_TARGET) {
      snprintf(pct, sizeof pct, "%d%%", (int)(100 * a + 0.5));
      CHECK(strstr(v, "bound by target") && strstr(v, pct), "'%s' lacks %s", v, pct);
    }
    if (got == DFL_BOUND_DRAFTER) {
      snprintf(pct, sizeof pct, "%d%%", (int)(100 * b + 0.5));
      CHECK(strstr(v, "bound by drafters") && strstr(v, pct), "'%s' lacks %s", v, pct);
    }
  }
  dfl_mon_summary s;
  memset(&s, 0, sizeof s);
  s.has_queue = 1;
  s.drafter_idle = 0.6;
  s.target_starved = 0.5;
  CHECK(dfl_mon_verdict(&s, 0.10, v, sizeof v) == DFL_BOUND_DATA && strstr(v, "data loading"), "starved: %s", v);
  s.has_queue = 0;
  CHECK(dfl_mon_verdict(&s, 0.10, v, sizeof v) == DFL_BOUND_DATA, "colocated, idle: %s", v);
  s.drafter_idle = 0.01;
  CHECK(dfl_mon_verdict(&s, 0.10, v, sizeof v) == DFL_BOUND_BALANCED, "colocated, busy: %s", v);
  printf("verdict rule ok\n");

  /* planted bottlenecks: sleeps far above the compute of one micro-batch */
  static dfl_spec sp;
  CHECK(dfl_spec_load("examples/nano-pipeline.dfl", &sp) == DFL_OK, "examples/nano-pipeline.dfl does not load");
  sp.seed = seed;
  sp.init_seed = seed + 1;
  sp.seq_len = 64;
  sp.anchors = 8;
  sp.ckpt_every = 0;
  set_topology(&sp, 2, 2);
  sp.queue_depth = 4;
  planted(&sp, "target=600", DFL_BOUND_TARGET, "bound by target");
  planted(&sp, "drafter=600", DFL_BOUND_DRAFTER, "bound by drafters");
  printf("ok\n");
  return 0;
}
