/*
** dflc.c: the command-line driver. `dflc COMMAND ...`; each command lives with the stage it
** drives and is declared in cli.h.
*/
#include <stdio.h>
#include <string.h>
#include "runtime/cli/cli.h"

typedef struct { const char *name; int (*fn)(int, char **); const char *help; } dfl_command;

static const dfl_command commands[] = {
  {"check", dfl_cmd_check, "check FILE.dfl        parse and validate a pipeline spec"},
  {"plan", dfl_cmd_plan, "plan FILE.dfl         per-device memory plan: table, --yaml, --html, --diff"},
  {"verify", dfl_cmd_verify, "verify FIXTURE        one training step on the CPU against a reference fixture"},
  {"golden", dfl_cmd_golden, "golden MODEL GOLDEN   the target forward against a golden file's hidden states"},
  {"train", dfl_cmd_train, "train FILE.dfl|DIR    train the drafter on its GPU or the CPU (checkpoints, eval, export)"},
  {"build", dfl_cmd_build, "build FILE.dfl -o DIR trainer directory: plan, schedule, kernels.cu, cubins"},
  {"bench", dfl_cmd_bench, "bench FILE.dfl        training throughput, phase split, MFU, memory"},
  {"eval", dfl_cmd_eval, "eval FILE.dfl --drafter DIR   tau and per-position accuracy of a drafter"},
  {"pack", dfl_cmd_pack, "pack IN.jsonl -o OUT    JSONL data -> packed binary data (format = packed)"},
  {"export", dfl_cmd_export, "export CKPT -o DIR    checkpoint -> Hugging Face DFlash drafter"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: dflc COMMAND [ARGS]\n\ncommands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(f, "  %s\n", commands[i].help);
  fprintf(f, "\n`dflc COMMAND --help` for a command's options.\n");
}

int main(int argc, char **argv) {
  /* Line-buffered stdout: notes and progress (stdout) and errors (stderr) keep their order when
  ** both are redirected to one file, and a `tail -f` of a log sees every line as it is written. */
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
  fprintf(stderr, "dflc: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
