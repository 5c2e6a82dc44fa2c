/* data_internal.h: what the JSONL (data.c) and packed (packed.c) readers share, so both end a
** load with the same checks and the same report lines. Not part of the public API. */
#ifndef DFL_DATA_INTERNAL_H
#define DFL_DATA_INTERNAL_H
#include "runtime/io/data.h"

/* End a load: with rc == DFL_OK, refuse an empty file (n_lines == 0), bad rows under `refuse`, or
** no usable row (UNIT names what n_lines counts); then print the summary, or free OUT on error. */
int dfl_data_finish_(const char *path, FILE *log, int cap, dfl_badrow_policy policy, int rc,
                     const char *unit, dfl_dataset *out);
/* The packed reader on an open file descriptor of SIZE bytes (mmapped; the caller closes fd). */
int dfl_packed_load_fd_(const char *path, int fd, size_t size, int vocab, int cap,
                        dfl_badrow_policy policy, FILE *log, dfl_dataset *out);
#endif
