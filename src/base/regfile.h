/* Opening a file to read it: only a regular file is read (internal).
 *
 * Every path zeroc reads (a config, a checkpoint's `latest`, manifest and
 * shard files, an example's --data, /proc and /sys figures) goes through
 * zc__open_regular, so none of them can hang on a FIFO without a writer, read
 * a device or a socket, or call a directory "truncated". The type is taken
 * from fstat on the opened descriptor (no race between a check and the read);
 * the open itself is O_NONBLOCK, so a FIFO that appears at the last moment
 * does not block it either, and a path that is plainly not a regular file is
 * refused before it is opened at all (opening some devices has effects).
 *
 * Plain C with no dependency on the rest of zeroc: the examples link it too
 * (meson: zc_regfile_dep). Messages go into the caller's buffer, like
 * tools/cliarg.h, and say what the path is:
 *   "ck/t/rank_00000.bin is a directory; expected a checkpoint shard file" */
#ifndef ZC_BASE_REGFILE_H
#define ZC_BASE_REGFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>

/* What a file of this mode is, for messages: "a directory", "a named pipe
 * (FIFO)", "a character device", "a block device", "a socket", "a symbolic
 * link", "a regular file" or "not a regular file". */
const char *zc__file_kind(mode_t mode);

typedef enum zc_open_result {
    ZC_OPEN_OK = 0,
    ZC_OPEN_FAILED,      /* open failed: errno is the open's */
    ZC_OPEN_NOT_REGULAR, /* a directory, FIFO, device or socket: refused */
} zc_open_result;

/* Opens `name` (relative to dirfd, or AT_FDCWD) read-only, adding `flags`
 * (e.g. O_DIRECT, O_NOFOLLOW), and keeps it only when it is a regular file.
 * On success *fd is the descriptor (close-on-exec, blocking again) and *st
 * (may be NULL) its fstat. On failure *fd is -1 and err (errlen bytes) says
 *   "SHOWN is KIND; expected WHAT"   (ZC_OPEN_NOT_REGULAR)
 *   "SHOWN: cannot open: REASON"     (ZC_OPEN_FAILED, errno kept)
 * where SHOWN is `shown` or, when NULL, `name`, and WHAT defaults to "a
 * regular file". Nothing is read. */
zc_open_result zc__open_regular_at(int dirfd, const char *name, int flags, const char *shown,
                                   const char *what, int *fd, struct stat *st, char *err,
                                   size_t errlen);

/* zc__open_regular_at(AT_FDCWD, path, flags, NULL, what, ...). */
zc_open_result zc__open_regular(const char *path, int flags, const char *what, int *fd,
                                struct stat *st, char *err, size_t errlen);

/* The same for stdio readers: a FILE opened "r" on the regular file, or NULL
 * with err set (errno kept when the open failed). */
FILE *zc__fopen_regular(const char *path, const char *what, char *err, size_t errlen);

#endif
