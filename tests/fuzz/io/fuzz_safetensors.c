/*
** fuzz_safetensors.c: libFuzzer harness for the safetensors reader. Any buffer must be either
** refused with a message or opened into entries whose every byte can be read: no crash, no
** out-of-bounds read, no UB, no leak. Built and run by run_fuzz.sh (ctest: io_fuzz_safetensors).
*/
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dfl_st st;
  char err[512];
  if (dfl_st_open_buffer(&st, data, size, "fuzz.safetensors", err, sizeof err) != 0) {
    if (!err[0]) abort();   /* a refusal must always say why */
    return 0;
  }
  for (int i = 0; i < st.n; i++) {
    const dfl_st_entry *e = &st.e[i];
    if (dfl_st_find(&st, e->name) != e) abort();
    int64_t n = dfl_st_numel(e);
    if (n > (1 << 20)) continue;   /* bytes were validated; keep runs fast */
    float *f = malloc((size_t)(n + 1) * sizeof *f);
    int32_t *iv = malloc((size_t)(n + 1) * sizeof *iv);
    int64_t bad = -2;
    dfl_st_read_f32_scan(&st, e, f, &bad);
    /* the scan while converting: the first non-finite element, or -1 (integers are always finite) */
    if (bad < -1 || bad >= (n > 0 ? n : 1) || (bad >= 0 && isfinite(f[bad]))) abort();
    for (int64_t k = 0; k < (bad >= 0 ? bad : n); k++) if (!isfinite(f[k]) && e->dtype <= DFL_ST_BF16) abort();
    (void)dfl_st_read_i32(&st, e, iv);
    free(f);
    free(iv);
    (void)dfl_st_expect(&st, e->name, e->ndim, e->shape, NULL, err, sizeof err);
  }
  dfl_st_close(&st);
  return 0;
}
