/*
** fuzz_check.c: libFuzzer harness for the front end. Bytes go through the scanner, the parser
** and the checker (config.json and data paths resolve against the repository, so the run must
** start in the repository root). Diagnostics are printed to /dev/null so the reporter's
** snippet code is exercised too. Build and run: tests/fuzz/run.sh BUILD_DIR [SECONDS].
*/
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "compiler/diag.h"
#include "compiler/spec.h"

static dfl_spec spec;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  FILE *devnull = fopen("/dev/null", "w");
  dfl_diag_set_stream(devnull);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dfl_diag_reset();
  dfl_spec_load_buffer("examples/fuzz.dfl", (const char *)data, size, &spec);
  return 0;
}
