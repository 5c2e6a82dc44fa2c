/*
** test_examples.c: `dflc plan` on every every example under examples/, end to end.
**
** For each example: the command succeeds (each device fits its budget) in a few seconds; its YAML
** is read back (libyaml) and checked independently of the planner: no two buffers live at the
** same time share a byte (persistent ones share nothing), the recorded lower bound equals the max
** over ops of the live bytes recomputed from the buffers, and plan / bound <= 1.10 per device. The
** HTML page is loaded in headless chromium (when installed) and its DOM must hold one rect per
** buffer, named. Finally --diff of a plan against an in-place-free one reports changed bytes.
*/
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <strings.h> /* strcasecmp: the YAML writes kinds in lower case ("act") */
#include <time.h>
#include <unistd.h>
#include "compiler/plan.h"
#include "compiler/status.h"
#include "tests/common/test_util.h"

static int failures;
#include "tests/common/check.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int count(const char *hay, const char *needle) {
  int c = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) c++;
  return c;
}

/* The independent check of one device read back from YAML. */
static void check_device(const char *ex, const dfl_plan_doc_dev *d) {
  int nops = 0, conflicts = 0;
  for (int i = 0; i < d->nbuf; i++) {
    const dfl_plan_doc_buf *a = &d->buf[i];
    if (a->last + 1 > nops) nops = a->last + 1;
    CHECK(a->offset >= 0 && a->offset + a->size <= d->arena_bytes, "%s %s: '%s' outside the arena", ex, d->name, a->name);
    if (a->first < 0 && !strcasecmp(a->kind, "ACT")) continue; /* never touched: any address */
    for (int j = i + 1; j < d->nbuf && conflicts < 3; j++) {
      const dfl_plan_doc_buf *b = &d->buf[j];
      if (b->first < 0 && !strcasecmp(b->kind, "ACT")) continue;
      if (a->offset >= b->offset + b->size || b->offset >= a->offset + a->size) continue;
      int pa = a->first < 0, pb = b->first < 0;
      if (!pa && !pb && (a->last < b->first || b->last < a->first)) continue;
      if (!pa && !pb && ((b->alias == i && a->last == b->first) || (a->alias == j && b->last == a->first)) &&
          a->offset == b->offset)
        continue; /* in place: the output takes its input's bytes at the op where the input dies */
      CHECK(0, "%s %s: '%s' and '%s' overlap in bytes while both live", ex, d->name, a->name, b->name);
      conflicts++;
    }
  }
  int64_t *live = calloc((size_t)nops + 2, sizeof *live), lb = 0;
  for (int i = 0; i < d->nbuf; i++) {
    const dfl_plan_doc_buf *a = &d->buf[i];
    if (a->first < 0) continue;
    int from = a->first;
    if (a->alias >= 0) from = a->first + 1; /* shares its input's bytes at its first op */
    for (int t = from; t <= a->last; t++) live[t] += a->size;
  }
  for (int t = 0; t < nops; t++) if (live[t] > lb) lb = live[t];
  free(live);
  CHECK(lb == d->lower_bound, "%s %s: lower bound %lld, recomputed from the buffers %lld", ex, d->name,
        (long long)d->lower_bound, (long long)lb);
  double ratio = d->lower_bound > 0 ? (double)d->step_bytes / (double)d->lower_bound : 1.0;
  printf("  %-28s %-12s arena %14lld  per-step %14lld  bound %14lld  ratio %.4f\n", ex, d->name,
         (long long)d->arena_bytes, (long long)d->step_bytes, (long long)d->lower_bound, ratio);
  CHECK(ratio <= 1.10, "%s %s: plan / lower bound %.4f above 1.10", ex, d->name, ratio);
}

int main(void) {
  const char *bin = getenv("DFL_BINARY_DIR");
  char dflc[1024], cmd[4096];
  snprintf(dflc, sizeof dflc, "%s/dflc", bin ? bin : "build");
  const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  char yaml[512], html[512], yaml2[512], out[512];
  snprintf(yaml, sizeof yaml, "%s/dfl_plan_test_%d.yaml", tmp, (int)getpid());
  snprintf(yaml2, sizeof yaml2, "%s/dfl_plan_test_%d_b.yaml", tmp, (int)getpid());
  snprintf(html, sizeof html, "%s/dfl_plan_test_%d.html", tmp, (int)getpid());
  snprintf(out, sizeof out, "%s/dfl_plan_test_%d.txt", tmp, (int)getpid());
  int have_chromium = system("command -v chromium >/dev/null 2>&1") == 0;
  if (!have_chromium) printf("test_examples: chromium not installed (scripts/setup.sh installs it): DOM checks use the file\n");

  DIR *dir = opendir("examples");
  CHECK(dir != NULL, "no examples/ directory (run from the repository root)");
  int n_ex = 0;
  struct dirent *e;
  while (dir && (e = readdir(dir))) {
    size_t l = strlen(e->d_name);
    if (l < 5 || strcmp(e->d_name + l - 4, ".dfl")) continue;
    n_ex++;
    /* a spec whose model is kept out of the repository (examples/hybrid.dfl): without it, plan must
    ** refuse, naming the missing directory on the spec's line (whose comment says where to get it) */
    char spath[512], mdir[512] = "";
    snprintf(spath, sizeof spath, "examples/%s", e->d_name);
    size_t sn;
    char *stext = dfl_test_slurp(spath, &sn);
    const char *m = stext ? strstr(stext, "model = \"models/") : NULL;
    if (m) {
      const char *q = m + strlen("model = \"");
      const char *qe = strchr(q, '"');
      if (qe) snprintf(mdir, sizeof mdir, "examples/%.*s", (int)(qe - q), q);
    }
    free(stext);
    struct stat mst;
    if (mdir[0] && stat(mdir, &mst) != 0) {
      snprintf(cmd, sizeof cmd, "%s plan examples/%s --quiet > %s 2>&1", dflc, e->d_name, out);
      int rc = system(cmd);
      size_t n;
      char *log = dfl_test_slurp(out, &n);
      CHECK(rc != 0 && log && strstr(log, "does not exist") && strstr(log, "absent?"),
            "`dflc plan examples/%s` without %s: expected a refusal naming it and the line that says where to put it:\n%s",
            e->d_name, mdir, log ? log : "");
      printf("examples/%s: %s is absent: refused, as it must be\n", e->d_name, mdir);
      free(log);
      continue;
    }
    snprintf(cmd, sizeof cmd, "%s plan examples/%s --quiet --yaml %s --html %s > %s 2>&1", dflc, e->d_name, yaml, html, out);
    double t0 = now();
    int rc = system(cmd);
    double dt = now() - t0;
    size_t n;
    char *log = dfl_test_slurp(out, &n);
    CHECK(rc == 0, "`dflc plan examples/%s` failed (rc %d):\n%s", e->d_name, rc, log ? log : "");
    free(log);
    CHECK(dt < 10.0, "`dflc plan examples/%s` took %.2f s", e->d_name, dt);
    printf("examples/%s: planned in %.2f s\n", e->d_name, dt);
    dfl_plan_doc doc;
    if (dfl_plan_doc_read(&doc, yaml) != DFL_OK) { CHECK(0, "YAML of %s does not read back", e->d_name); continue; }
    CHECK(doc.ndev > 0, "%s: no devices in the YAML", e->d_name);
    int n_step = 0, n_pers = 0;
    for (int k = 0; k < doc.ndev; k++) {
      check_device(e->d_name, &doc.dev[k]);
      for (int i = 0; i < doc.dev[k].nbuf; i++) {
        if (doc.dev[k].buf[i].first >= 0) n_step++;
        else n_pers++; /* persistent buffers and never-touched ACTs: the page draws both */
      }
    }
    /* the page: through chromium's DOM when there is one */
    char *dom = NULL;
    if (have_chromium) {
      snprintf(cmd, sizeof cmd, "timeout 60 chromium --headless --no-sandbox --disable-gpu --dump-dom file://%s > %s 2>/dev/null",
               html, out);
      CHECK(system(cmd) == 0, "chromium could not load %s", html);
      dom = dfl_test_slurp(out, &n);
    } else
      dom = dfl_test_slurp(html, &n);
    CHECK(dom && strstr(dom, "</svg>"), "%s: the page has no SVG", e->d_name);
    if (dom) {
      int rects = count(dom, "class=\"buf\""), prects = count(dom, "class=\"pbuf\"");
      CHECK(rects == n_step, "%s: %d per-step rects in the DOM, %d per-step buffers in the plan", e->d_name, rects, n_step);
      CHECK(prects == n_pers, "%s: %d persistent rects in the DOM, %d persistent buffers", e->d_name, prects, n_pers);
      CHECK(count(dom, "<title>") >= rects + prects, "%s: rects without a <title>", e->d_name);
      CHECK(!strstr(dom, "src=\"http") && !strstr(dom, "href=\"http"), "%s: the page loads external resources", e->d_name);
      int named = 0, want_n = doc.dev[0].nbuf < 200 ? doc.dev[0].nbuf : 200;
      for (int i = 0; i < want_n; i++) {
        char want[160];
        snprintf(want, sizeof want, "data-name=\"%s\"", doc.dev[0].buf[i].name);
        named += strstr(dom, want) != NULL;
      }
      CHECK(named == want_n, "%s: %d of the first %d buffer names found in the DOM", e->d_name, named, want_n);
    }
    free(dom);
    dfl_plan_doc_free(&doc);
  }
  if (dir) closedir(dir);
  CHECK(n_ex >= 2, "found %d examples", n_ex);

  /* The fusion stage on the 8B example, as the report counts it: every target residual add and q/k
  ** norm pair folded (34 layers run: 68 each), 121 adds (112 into GEMMs, the 9 backward adds of
  ** an RMSNorm backward's dx into it; the 5 left sum the k-norm weight's two 128-element gradients),
  ** and the single-device optimizer overlapped. The example sets `grads = bf16`: all 58 gradients in
  ** bf16, so the k/v weights' summed GEMMs write their accumulators too (36 GEMMs, not 26). q's and
  ** k's RoPE are one op in every target layer (34), drafter layer (q with the block keys: 5) and
  ** drafter layer's backward (5). */
  snprintf(cmd, sizeof cmd, "%s plan examples/qwen3-8b.dfl > %s 2>&1", dflc, out);
  CHECK(system(cmd) == 0, "dflc plan examples/qwen3-8b.dfl failed");
  {
    size_t nr;
    char *r = dfl_test_slurp(out, &nr);
    CHECK(r && strstr(r, "fused: 36 weight-gradient GEMMs straight into their accumulators, 112 adds in GEMM epilogues "
                         "and 9 in RMSNorm backward, 68 q/k norms in their RoPE, 44 RoPE pairs (q and k) in one launch; 58 gradients "
                         "overwritten") &&
              strstr(r, "gradients: 58 in the params' dtype (train.grads = bf16)"),
          "the 8B report's fusion counts changed:\n%s", r ? r : "");
    CHECK(r && strstr(r, "schedule: each step's optimizer runs beside the next step's target forward"),
          "the 8B report lacks the overlap schedule");
    /* models/drafter.c's row rewrites: 512 block heads + the MASK row twice, 8192 - 512 tail rows */
    CHECK(r && strstr(r, "drafter rows: the first layer's norms and projections on 514 distinct rows of 8192 (3 outputs "
                         "copied out), the last layer after its attention on 7680 rows without the anchors"),
          "the 8B report's drafter rows changed:\n%s", r ? r : "");
    free(r);
  }
  /* compile { block_rows = false }: the plain drafter graph (a copy of the spec, which names no file) */
  snprintf(cmd, sizeof cmd, "f=/tmp/dflc-plain-rows-$$.dfl; { cat examples/qwen3-8b.dfl; printf '\\ncompile { block_rows = false }\\n'; } "
           "> $f && %s plan $f > %s 2>&1; rc=$?; rm -f $f; exit $rc", dflc, out);
  CHECK(system(cmd) == 0, "dflc plan on qwen3-8b.dfl with compile { block_rows = false } failed");
  {
    size_t nr;
    char *r = dfl_test_slurp(out, &nr);
    CHECK(r && !strstr(r, "drafter rows:") && strstr(r, "total"), "block_rows = false still rewrites rows:\n%s", r ? r : "");
    free(r);
  }

  /* The FP8 8B (quantize = fp8): the same fusions, and 68 of its 136 row quantizations in the norm
  ** before them (those of the attention and SwiGLU outputs stay separate). */
  snprintf(cmd, sizeof cmd, "%s plan examples/qwen3-8b-fp8.dfl > %s 2>&1", dflc, out);
  CHECK(system(cmd) == 0, "dflc plan examples/qwen3-8b-fp8.dfl failed");
  {
    size_t nr;
    char *r = dfl_test_slurp(out, &nr);
    CHECK(r && strstr(r, "112 adds in GEMM epilogues") && strstr(r, "fused: 68 FP8 row quantizations"),
          "the FP8 8B report's fusion counts changed:\n%s", r ? r : "");
    free(r);
  }

  /* --diff: the nano plan without in-place reuse against the one with it */
  snprintf(cmd, sizeof cmd, "%s plan examples/nano.dfl --quiet --no-inplace --yaml %s > /dev/null 2>&1", dflc, yaml2);
  CHECK(system(cmd) == 0, "dflc plan --no-inplace failed");
  snprintf(cmd, sizeof cmd, "%s plan examples/nano.dfl --quiet --diff %s > %s 2>&1", dflc, yaml2, out);
  CHECK(system(cmd) == 0, "dflc plan --diff failed");
  size_t n;
  char *d = dfl_test_slurp(out, &n);
  CHECK(d && strstr(d, "device node0") && strstr(d, "total") && strstr(d, "buffers changed"),
        "--diff output lacks the per-device and per-buffer lines:\n%s", d ? d : "");
  free(d);
  /* a broken file is a clear error, not a crash */
  FILE *f = fopen(yaml2, "w");
  fputs("dflc_plan: 1\ndevices: [ {device: x} ]\n", f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "%s plan examples/nano.dfl --quiet --diff %s > %s 2>&1", dflc, yaml2, out);
  int rc = system(cmd);
  d = dfl_test_slurp(out, &n);
  CHECK(rc != 0 && d && strstr(d, yaml2), "a malformed --diff file must fail naming the file:\n%s", d ? d : "");
  free(d);
  remove(yaml); remove(yaml2); remove(html); remove(out);
  if (failures) { fprintf(stderr, "test_examples: %d failures\n", failures); return 1; }
  printf("test_examples: ok\n");
  return 0;
}
