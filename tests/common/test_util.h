/* test_util.h: small helpers shared by test programs of several areas (header-only: each test
** is one program). Area-specific helpers stay in the area's own header. */
#ifndef DFL_TEST_UTIL_H
#define DFL_TEST_UTIL_H
#include <stdio.h>
#include <stdlib.h>

/* The whole file, NUL-terminated (*n bytes before the NUL); NULL if it cannot be read. */
static inline char *dfl_test_slurp(const char *path, size_t *n) {
  *n = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  long len = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  char *b = len >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc((size_t)len + 1) : NULL;
  if (b) {
    *n = fread(b, 1, (size_t)len, f);
    b[*n] = 0;
  }
  fclose(f);
  return b;
}
#endif
