/* Crash-safe file operations (fsio.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/fsio.h"

zc_status zc__ck_pwrite(int fd, const void *buf, size_t n, uint64_t off, const char *path)
{
    const char *p = buf;
    while (n) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return ZC_ERR(ZC_ERR_IO, "%s: write of %zu bytes at offset %" PRIu64 ": %s", path, n,
                          off, w < 0 ? strerror(errno) : "no progress");
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return ZC_OK;
}

zc_status zc__ck_pread(int fd, void *buf, size_t n, uint64_t off, const char *path)
{
    char *p = buf;
    while (n) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return ZC_ERR(ZC_ERR_IO, "%s: read of %zu bytes at offset %" PRIu64 ": %s", path, n,
                          off, strerror(errno));
        if (r == 0)
            return ZC_ERR(ZC_ERR_IO, "%s: truncated: it ends before offset %" PRIu64
                          " (%zu more bytes expected)", path, off, n);
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return ZC_OK;
}

zc_status zc__ck_create_at(int dfd, const char *shown, const char *name, int *fd)
{
    *fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (*fd < 0)
        return ZC_ERR(ZC_ERR_IO, "%s/%s: cannot create: %s", shown, name, strerror(errno));
    return ZC_OK;
}

zc_status zc__ck_fsync_fd(int dfd, const char *shown)
{
    if (fsync(dfd) != 0)
        return ZC_ERR(ZC_ERR_IO, "%s: fsync of the directory: %s", shown, strerror(errno));
    return ZC_OK;
}

zc_status zc__ck_sync_close(int fd, const char *shown, const char *name, bool sync_data)
{
    zc_status rc = ZC_OK;
    if (sync_data && fsync(fd) != 0)
        rc = ZC_ERR(ZC_ERR_IO, "%s/%s: fsync: %s", shown, name, strerror(errno));
    if (close(fd) != 0 && rc == ZC_OK)
        rc = ZC_ERR(ZC_ERR_IO, "%s/%s: close: %s", shown, name, strerror(errno));
    return rc;
}

zc_status zc__ck_place_staged_at(int fd, int sfd, const char *shown, const char *tmp,
                                 const char *final, bool sync_data)
{
    zc_status rc = zc__ck_sync_close(fd, shown, tmp, sync_data);
    if (rc == ZC_OK && renameat(sfd, tmp, sfd, final) != 0)
        rc = ZC_ERR(ZC_ERR_IO, "rename %s/%s -> %s: %s", shown, tmp, final, strerror(errno));
    if (rc != ZC_OK)
        unlinkat(sfd, tmp, 0);
    return rc;
}

zc_status zc__ck_join(char *out, size_t cap, const char *a, const char *b)
{
    int n = snprintf(out, cap, "%s/%s", a, b);
    if (n < 0 || (size_t)n >= cap)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "path '%s/%s' is longer than %zu bytes", a, b, cap - 1);
    return ZC_OK;
}
