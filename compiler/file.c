/*
** file.c: what a path is, before anything opens it (compiler/file.h).
*/
#include "compiler/file.h"
#include "compiler/spec.h" /* DFL_PATH_MAX */

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int dfl_file_why(const char *path, char *why, size_t n) {
  struct stat st, lst;
  if (stat(path, &st) != 0) {
    int e = errno;
    char to[DFL_PATH_MAX];
    ssize_t k;
    if (e == ELOOP) snprintf(why, n, "`%s` is a symbolic link loop", path);
    else if (e == ENOENT && lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode) && (k = readlink(path, to, sizeof to - 1)) >= 0)
      snprintf(why, n, "`%s` is a dangling symbolic link (to `%.*s`)", path, (int)k, to);
    else if (e == ENOENT) snprintf(why, n, "`%s` does not exist", path);
    else snprintf(why, n, "`%s`: %s", path, strerror(e));
    errno = e;
    return DFL_EIO;
  }
  if (S_ISREG(st.st_mode)) return DFL_OK;
  snprintf(why, n, "`%s` is %s, not a regular file", path, S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO"
           : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" : S_ISSOCK(st.st_mode) ? "a socket" : "not a file");
  errno = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
  return DFL_EIO;
}
