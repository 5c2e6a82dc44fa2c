/* io_internal.h: helpers shared by the runtime/ file-format readers and writers (defined in
** safetensors.c); not part of the public I/O interface. */
#ifndef DFL_IO_INTERNAL_H
#define DFL_IO_INTERNAL_H
#include <stddef.h>
#include "compiler/file.h"

/* Formats the message into err (when err and errlen are set) and returns code. */
int dfl_io_seterr(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#endif
