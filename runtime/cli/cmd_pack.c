/*
** cmd_pack.c: `dflc pack IN.jsonl[.gz] -o OUT.dflpack [--vocab V] [--bad-rows skip|refuse]`.
** Converts pre-tokenized JSONL (or another packed file) into the packed binary format
** (docs/data.md). Rows are validated by the ordinary loader: the rows it would skip are reported
** as IN:LINE and not written. Rows are kept whole (no sequence capacity here: each spec cuts to
** its own seq_len at load), so one packed file serves every seq_len.
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "runtime/cli/cli.h"
#include "runtime/io/data.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: dflc pack IN.jsonl[.gz] -o OUT.dflpack [--vocab V] [--bad-rows skip|refuse]\n"
          "  Convert pre-tokenized JSONL ({\"input_ids\": [...], \"loss_mask\": [...]} per line) to\n"
          "  dflc's packed binary data (data { format = packed }), which loads without parsing.\n"
          "  -o, --out FILE      the packed file to write (replaced atomically)\n"
          "  --vocab V           refuse ids >= V (the target's vocab_size); recorded in the file\n"
          "  --bad-rows POLICY   skip (default: report bad rows, write the rest) or refuse\n"
          "  --quiet             no summary line\n");
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int dfl_cmd_pack(int argc, char **argv) {
  const char *in = NULL, *out = NULL;
  long vocab = 0;
  int quiet = 0;
  dfl_badrow_policy policy = DFL_BADROW_SKIP;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "-o") || !strcmp(a, "--out")) {
      if (!next) { fprintf(stderr, "dflc pack: %s needs a path\n", a); return 2; }
      out = argv[++i];
    } else if (!strcmp(a, "--vocab")) {
      char *end = NULL;
      errno = 0;
      vocab = next ? strtol(next, &end, 10) : 0;
      if (!next || !*next || *end || errno || vocab <= 0 || vocab > 0x7fffffffL) {
        fprintf(stderr, "dflc pack: --vocab needs a positive integer (the target's vocab_size)\n");
        return 2;
      }
      i++;
    } else if (!strcmp(a, "--bad-rows")) {
      if (!next || (strcmp(next, "skip") && strcmp(next, "refuse"))) {
        fprintf(stderr, "dflc pack: --bad-rows needs skip or refuse\n");
        return 2;
      }
      policy = !strcmp(next, "refuse") ? DFL_BADROW_REFUSE : DFL_BADROW_SKIP;
      i++;
    } else if (!strcmp(a, "--quiet")) {
      quiet = 1;
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "dflc pack: unknown option %s\n", a);
      usage(stderr);
      return 2;
    } else if (!in) {
      in = a;
    } else {
      fprintf(stderr, "dflc pack: unexpected argument %s (one input file)\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (!in || !out) {
    if (in && !out) fprintf(stderr, "dflc pack: -o OUT.dflpack is required\n");
    usage(stderr);
    return 2;
  }
  double t0 = now();
  dfl_dataset d;
  if (dfl_data_load(in, (int)vocab, 0, policy, stderr, &d) != DFL_OK) {
    fprintf(stderr, "dflc pack: %s refused (see the messages above); nothing written\n", in);
    return 1;
  }
  double t1 = now();
  int rc = dfl_packed_write(out, &d, (int)vocab, stderr);
  double t2 = now();
  if (rc == DFL_OK && !quiet) {
    struct stat st;
    long long bytes = stat(out, &st) == 0 ? (long long)st.st_size : -1;
    printf("dflc pack: wrote %s: %d rows, %lld tokens (%lld supervised), %lld bytes; %lld bad rows "
           "not written; read %.2f s, write %.2f s\n", out, d.n, (long long)d.n_tokens,
           (long long)d.n_supervised, bytes, (long long)d.n_skipped, t1 - t0, t2 - t1);
    if (!vocab)
      printf("dflc pack: note: no --vocab: ids were only checked to fit in int32; the trainer checks "
             "them against the target's vocabulary at load\n");
  }
  dfl_data_free(&d);
  return rc == DFL_OK ? 0 : 1;
}
