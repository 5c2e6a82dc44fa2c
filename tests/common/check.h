/* check.h: the one CHECK of the test programs (header-only: each test is one program).
**
**   CHECK(cond);  CHECK(cond, "format", args...);
**
** A false cond prints "FAIL file:line: cond[: message]" on stderr, then does CHECK_FAILED: by default
** `failures++` (the including program declares `static int failures;` and returns failures != 0).
** A program that counts elsewhere, or stops at the first failure, defines CHECK_FAILED before
** including this header (`#define CHECK_FAILED fails++`, `#define CHECK_FAILED exit(1)`). The message
** is a string literal format. */
#ifndef DFL_TEST_CHECK_H
#define DFL_TEST_CHECK_H
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef CHECK_FAILED
#define CHECK_FAILED failures++
#endif

/* fmt is ": " followed by the caller's format, if any */
__attribute__((format(printf, 4, 5), unused)) static void dfl_check_report(const char *file, int line, const char *cond,
                                                                            const char *fmt, ...) {
  fprintf(stderr, "FAIL %s:%d: %s", file, line, cond);
  if (fmt[2]) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
  }
  fputc('\n', stderr);
  fflush(stderr);
}

#define CHECK(cond, ...)                                                  \
  do {                                                                    \
    if (!(cond)) {                                                        \
      dfl_check_report(__FILE__, __LINE__, #cond, ": " __VA_ARGS__);      \
      CHECK_FAILED;                                                       \
    }                                                                     \
  } while (0)
#endif
