/*
** cmd_check.c: `dflc check FILE.dfl` — parse and validate a spec. Silent with exit 0 when the
** spec is good (warnings may be printed), every error and exit 1 otherwise, 2 for bad usage.
*/
#include <stdio.h>
#include <string.h>

#include "runtime/cli/cli.h"
#include "compiler/diag.h"
#include "compiler/spec.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: dflc check FILE.dfl\n"
          "\n"
          "Parse and validate a pipeline spec: the target's config.json is read, shapes, taps,\n"
          "devices and data files are checked. Prints nothing and exits 0 when the spec is good;\n"
          "otherwise prints every error as FILE:LINE:COL with the source line and exits 1.\n"
          "Warnings (legal but suspicious) do not change the exit status.\n"
          "\n"
          "options:\n"
          "  -h, --help   this help\n"
          "\n"
          "The language is described in docs/language.md.\n");
}

int dfl_cmd_check(int argc, char **argv) {
  const char *file = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      usage(stdout);
      return 0;
    }
    if (argv[i][0] == '-' && argv[i][1]) {
      fprintf(stderr, "dflc check: unknown option `%s`\n", argv[i]);
      usage(stderr);
      return 2;
    }
    if (file) {
      fprintf(stderr, "dflc check: one spec at a time (got `%s` and `%s`)\n", file, argv[i]);
      return 2;
    }
    file = argv[i];
  }
  if (!file) {
    usage(stderr);
    return 2;
  }
  static dfl_spec spec;   /* large (device table, paths): keep it off the stack */
  dfl_diag_reset();
  int rc = dfl_spec_load(file, &spec);
  return rc == DFL_OK && dfl_diag_errors() == 0 ? 0 : 1;
}
