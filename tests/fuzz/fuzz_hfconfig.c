/*
** fuzz_hfconfig.c: libFuzzer harness for the Hugging Face config.json reader (dfl_hfconfig_parse):
** any bytes either give an architecture whose fields the checker can divide by (heads a multiple of
** kv_heads, even head_dim, positive sizes) or an error through the reporter; never a crash.
** Built and run by tests/fuzz/run.sh after the front-end harness.
*/
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "compiler/diag.h"
#include "compiler/hfconfig.h"
#include "compiler/spec.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  dfl_diag_set_stream(fopen("/dev/null", "w"));
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dfl_diag_reset();
  dfl_arch a;
  if (dfl_hfconfig_parse("config.json", (const char *)data, size, &a) != DFL_OK) return 0;
  if (a.hidden < 1 || a.layers < 1 || a.heads < 1 || a.kv_heads < 1 || a.heads % a.kv_heads || a.head_dim < 2 ||
      a.head_dim % 2 || a.intermediate < 1 || a.vocab < 1 || a.max_positions < 1 || !(a.rope_theta > 0) ||
      !(a.rms_eps > 0))
    abort();
  return 0;
}
