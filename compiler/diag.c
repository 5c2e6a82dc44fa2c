/*
** diag.c: the diagnostics reporter. See diag.h for the format.
**
** State is a handful of counters (the reporter is process-wide, like stderr itself); sources are
** borrowed, never copied, so printing a diagnostic costs one scan of the file up to its line.
*/
#include "compiler/diag.h"

#include <stdarg.h>
#include <string.h>

const dfl_loc dfl_loc_none = {NULL, 0, 0, 0};

static FILE *g_out;
static int g_stream_set;
static int g_errors, g_warnings;
static int g_last_shown;   /* notes and help follow the fate of their diagnostic */
static int g_width = 5;    /* gutter width of the last snippet, so `= help` lines up */

dfl_loc dfl_loc_file(const dfl_source *src) {
  dfl_loc l = {src, 0, 0, 0};
  return l;
}

static FILE *out(void) { return g_stream_set ? g_out : stderr; }

void dfl_diag_set_stream(FILE *f) { g_out = f; g_stream_set = 1; }
int dfl_diag_errors(void) { return g_errors; }
int dfl_diag_warnings(void) { return g_warnings; }
void dfl_diag_reset(void) { g_errors = g_warnings = 0; g_last_shown = 0; }

/* Length of a valid UTF-8 sequence at p (n bytes available), 0 if invalid. Used so that the
** caret counts characters, not bytes, and so that garbage bytes print as '?'. */
static int utf8_len(const unsigned char *p, size_t n) {
  int len;
  if (p[0] < 0x80) return 1;
  if ((p[0] & 0xe0) == 0xc0 && p[0] >= 0xc2) len = 2;
  else if ((p[0] & 0xf0) == 0xe0) len = 3;
  else if ((p[0] & 0xf8) == 0xf0 && p[0] <= 0xf4) len = 4;
  else return 0;
  if ((size_t)len > n) return 0;
  for (int i = 1; i < len; i++)
    if ((p[i] & 0xc0) != 0x80) return 0;
  return len;
}

static int digits(int v) {
  int d = 1;
  while (v >= 10) { v /= 10; d++; }
  return d;
}

static int gutter(int line) { int d = digits(line) + 1; return d < 5 ? 5 : d; }

/* Print the source line of loc and a caret line under [col, col+len). */
static void snippet(FILE *f, dfl_loc loc) {
  const dfl_source *s = loc.src;
  size_t i = 0;
  int line = 1;
  while (i < s->len && line < loc.line) {
    if (s->text[i] == '\n') line++;
    i++;
  }
  if (line != loc.line) return;
  size_t b = i, e = i;
  while (e < s->len && s->text[e] != '\n') e++;
  if (e > b && s->text[e - 1] == '\r') e--;
  int w = gutter(loc.line);
  fprintf(f, "%*d | ", w, loc.line);
  for (size_t k = b; k < e;) {
    const unsigned char *p = (const unsigned char *)s->text + k;
    int n = utf8_len(p, e - k);
    if (n == 0) { fputc('?', f); k++; continue; }
    if (n == 1 && ((*p < 0x20 && *p != '\t') || *p == 0x7f)) fputc('?', f);
    else fwrite(p, 1, (size_t)n, f);
    k += (size_t)n;
  }
  fprintf(f, "\n%*s | ", w, "");
  /* Pad with the same whitespace shape as the source so tabs keep the caret aligned. */
  size_t start = b + (size_t)(loc.col > 0 ? loc.col - 1 : 0);
  if (start > e) start = e;
  for (size_t k = b; k < start;) {
    int n = utf8_len((const unsigned char *)s->text + k, e - k);
    fputc(s->text[k] == '\t' ? '\t' : ' ', f);
    k += n ? (size_t)n : 1;
  }
  fputc('^', f);
  size_t stop = start + (size_t)(loc.len > 1 ? loc.len : 1);
  if (stop > e) stop = e;
  for (size_t k = start + 1; k < stop;) {
    int n = utf8_len((const unsigned char *)s->text + k, e - k);
    if (!((unsigned char)s->text[k] >= 0x80 && (s->text[k] & 0xc0) == 0x80)) fputc('~', f);
    k += n ? (size_t)n : 1;
  }
  fputc('\n', f);
}

static void report(dfl_loc loc, const char *kind, const char *fmt, va_list ap) {
  FILE *f = out();
  if (!f) return;
  if (!loc.src) fprintf(f, "dflc: %s: ", kind);
  else if (loc.line <= 0) fprintf(f, "%s: %s: ", loc.src->name, kind);
  else fprintf(f, "%s:%d:%d: %s: ", loc.src->name, loc.line, loc.col, kind);
  vfprintf(f, fmt, ap);
  fputc('\n', f);
  if (loc.src && loc.line > 0) snippet(f, loc);
  g_width = loc.src && loc.line > 0 ? gutter(loc.line) : 5;
}

void dfl_diag_error(dfl_loc loc, const char *fmt, ...) {
  g_errors++;
  g_last_shown = g_errors <= DFL_DIAG_MAX_ERRORS;
  if (g_errors == DFL_DIAG_MAX_ERRORS + 1 && out())
    fprintf(out(), "dflc: error: too many errors (%d); not printing the rest\n", DFL_DIAG_MAX_ERRORS);
  if (!g_last_shown) return;
  va_list ap;
  va_start(ap, fmt);
  report(loc, "error", fmt, ap);
  va_end(ap);
}

void dfl_diag_warning(dfl_loc loc, const char *fmt, ...) {
  g_warnings++;
  g_last_shown = g_errors <= DFL_DIAG_MAX_ERRORS;
  if (!g_last_shown) return;
  va_list ap;
  va_start(ap, fmt);
  report(loc, "warning", fmt, ap);
  va_end(ap);
}

void dfl_diag_note(dfl_loc loc, const char *fmt, ...) {
  if (!g_last_shown) return;
  va_list ap;
  va_start(ap, fmt);
  report(loc, "note", fmt, ap);
  va_end(ap);
}

void dfl_diag_help(const char *fmt, ...) {
  FILE *f = out();
  if (!g_last_shown || !f) return;
  fprintf(f, "%*s = help: ", g_width, "");
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
}
