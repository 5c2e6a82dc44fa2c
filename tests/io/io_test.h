/* io_test.h: tiny helpers shared by the tests/io programs (checks, seeding, temp dirs). */
#ifndef DFL_IO_TEST_H
#define DFL_IO_TEST_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include "runtime/io/data.h"

static int io_failures;
#define CHECK_FAILED io_failures++
#include "tests/common/check.h"

/* Fresh seed each run (printed), or DFL_SEED=... to reproduce a failure. */
static inline uint64_t io_seed(const char *test) {
  const char *s = getenv("DFL_SEED");
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t seed = s ? strtoull(s, NULL, 0)
                    : (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
  printf("%s: seed %llu (rerun with DFL_SEED=%llu)\n", test, (unsigned long long)seed,
         (unsigned long long)seed);
  return seed;
}

/* A fresh private directory under $TMPDIR (or /tmp); removed by io_rmdir at the end. */
static inline void io_tmpdir(char *buf, size_t len, const char *tag) {
  const char *t = getenv("TMPDIR");
  snprintf(buf, len, "%s/dfl_%s_XXXXXX", t && *t ? t : "/tmp", tag);
  if (!mkdtemp(buf)) { perror("mkdtemp"); exit(2); }
}
static inline void io_rmdir(const char *dir) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}
static inline int io_write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t w = fwrite(data, 1, n, f);
  fclose(f);
  return w == n ? 0 : -1;
}
static inline int io_finish(const char *test) {
  if (io_failures) { fprintf(stderr, "%s: %d check(s) failed\n", test, io_failures); return 1; }
  printf("%s: all checks passed\n", test);
  return 0;
}
#endif
