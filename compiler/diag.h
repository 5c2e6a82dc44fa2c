/*
** diag.h: the one diagnostics reporter (chibicc style), shared by every stage.
**
** A diagnostic is `FILE:LINE:COL: error: message`, then the source line and a caret under the
** offending token, then optional `= help:` / `= note:` lines. Sources are registered as
** dfl_source buffers so the reporter can print the line long after lexing.
*/
#ifndef DFL_DIAG_H
#define DFL_DIAG_H

#include <stddef.h>
#include <stdio.h>

/* A named text buffer (a .dfl file, a config.json). The reporter never owns it. */
typedef struct dfl_source {
  const char *name;   /* path as shown to the user */
  const char *text;
  size_t len;
} dfl_source;

/* A span in a source. line 0: the whole file (no snippet). src NULL: no file at all. */
typedef struct dfl_loc {
  const dfl_source *src;
  int line, col;      /* 1-based; col counts bytes */
  int len;            /* bytes under the caret, >= 1 */
} dfl_loc;

dfl_loc dfl_loc_file(const dfl_source *src);     /* "the whole file" */
extern const dfl_loc dfl_loc_none;               /* "dflc: error: ..." */

void dfl_diag_error(dfl_loc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dfl_diag_warning(dfl_loc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A secondary location attached to the previous diagnostic ("first defined here"). */
void dfl_diag_note(dfl_loc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Advice attached to the previous diagnostic: `      = help: ...`. */
void dfl_diag_help(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

int dfl_diag_errors(void);                       /* errors since the last reset */
int dfl_diag_warnings(void);
void dfl_diag_reset(void);
/* Where diagnostics go (stderr by default); NULL silences them but still counts (fuzzing). */
void dfl_diag_set_stream(FILE *f);

/* After this many errors the rest are counted but not printed. */
#define DFL_DIAG_MAX_ERRORS 100

#endif
