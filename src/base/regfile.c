/* Opening a file to read it: see regfile.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "regfile.h"

const char *zc__file_kind(mode_t m)
{
    if (S_ISREG(m))
        return "a regular file";
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISFIFO(m))
        return "a named pipe (FIFO)";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISSOCK(m))
        return "a socket";
    if (S_ISLNK(m))
        return "a symbolic link";
    return "not a regular file";
}

static zc_open_result refuse(const char *shown, mode_t m, const char *what, char *err,
                             size_t errlen)
{
    snprintf(err, errlen, "%s is %s; expected %s", shown, zc__file_kind(m),
             what ? what : "a regular file");
    return ZC_OPEN_NOT_REGULAR;
}

zc_open_result zc__open_regular_at(int dirfd, const char *name, int flags, const char *shown,
                                   const char *what, int *fd, struct stat *st, char *err,
                                   size_t errlen)
{
    struct stat local;
    if (!st)
        st = &local;
    if (!shown)
        shown = name;
    *fd = -1;
    /* A path that plainly is not a regular file is not opened at all: the
     * open of a device can do things (a tape rewinds, a watchdog arms). The
     * fstat below decides; this only spares the open. */
    const int stat_flags = (flags & O_NOFOLLOW) ? AT_SYMLINK_NOFOLLOW : 0;
    if (fstatat(dirfd, name, st, stat_flags) == 0 && !S_ISREG(st->st_mode))
        return refuse(shown, st->st_mode, what, err, errlen);
    int f = openat(dirfd, name, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY | flags);
    if (f < 0) {
        const int e = errno;
        /* A socket cannot be opened (ENXIO), nor a symbolic link with
         * O_NOFOLLOW (ELOOP): say what it is rather than the errno. */
        if (fstatat(dirfd, name, st, stat_flags) == 0 && !S_ISREG(st->st_mode)) {
            refuse(shown, st->st_mode, what, err, errlen);
            errno = e;
            return ZC_OPEN_NOT_REGULAR;
        }
        snprintf(err, errlen, "%s: cannot open: %s", shown, strerror(e));
        errno = e;
        return ZC_OPEN_FAILED;
    }
    if (fstat(f, st) != 0) {
        const int e = errno;
        snprintf(err, errlen, "%s: cannot examine the opened file: %s", shown, strerror(e));
        close(f);
        errno = e;
        return ZC_OPEN_FAILED;
    }
    if (!S_ISREG(st->st_mode)) {
        close(f);
        return refuse(shown, st->st_mode, what, err, errlen);
    }
    /* Blocking again: O_NONBLOCK means nothing to a regular file's read(),
     * but io_uring turns it into -EAGAIN instead of waiting for the disk. */
    const int fl = fcntl(f, F_GETFL);
    if (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        const int e = errno;
        snprintf(err, errlen, "%s: cannot clear O_NONBLOCK: %s", shown, strerror(e));
        close(f);
        errno = e;
        return ZC_OPEN_FAILED;
    }
    *fd = f;
    return ZC_OPEN_OK;
}

zc_open_result zc__open_regular(const char *path, int flags, const char *what, int *fd,
                                struct stat *st, char *err, size_t errlen)
{
    return zc__open_regular_at(AT_FDCWD, path, flags, NULL, what, fd, st, err, errlen);
}

FILE *zc__fopen_regular(const char *path, const char *what, char *err, size_t errlen)
{
    int fd;
    if (zc__open_regular(path, 0, what, &fd, NULL, err, errlen) != ZC_OPEN_OK)
        return NULL;
    FILE *f = fdopen(fd, "r");
    if (!f) {
        const int e = errno;
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(e));
        close(fd);
        errno = e;
    }
    return f;
}
