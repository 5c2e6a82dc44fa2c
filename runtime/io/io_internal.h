/* io_internal.h: helpers shared by the runtime/ file-format readers and writers (defined in
** safetensors.c); not part of the public I/O interface. */
#ifndef DFL_IO_INTERNAL_H
#define DFL_IO_INTERNAL_H
#include <stddef.h>

/* Formats the message into err (when err and errlen are set) and returns code. */
int dfl_io_seterr(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Whether path is a regular file, stat'ed before anything opens it (open() of a FIFO blocks until a
** writer comes): DFL_OK, or DFL_EIO with why naming a FIFO, device, socket or directory, a dangling
** symbolic link or a loop as such, or a missing file. (compiler/hfconfig.c has its own for the spec.) */
int dfl_io_file_why(const char *path, char *why, size_t n);
#endif
