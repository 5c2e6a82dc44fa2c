/*
** file.h: the one check of a path made before dflc opens any file it reads (the spec's target files
** in compiler/hfconfig.c, checkpoints, weights and exports in runtime/io).
*/
#ifndef DFL_FILE_H
#define DFL_FILE_H

#include <stddef.h>
#include "compiler/status.h"

/* Whether path is a regular file (stat'ed before anything opens it: open() of a FIFO blocks until a
** writer comes). DFL_OK, or DFL_EIO with why: a FIFO, device, socket or directory, a dangling
** symbolic link or a loop named as such, a missing file. */
int dfl_file_why(const char *path, char *why, size_t n);

#endif
