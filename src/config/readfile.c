/* Reading a config file: what the path is decides whether it is read at all.
 *
 * Only a regular file is a config (base/regfile.h: a FIFO, device, socket or
 * directory is refused at once, without blocking), and the read
 * loop stops one byte past the limit, so a file that grows while it is read
 * (or a /proc file whose st_size is 0) is bounded too. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/internal.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/regfile.h"

zc_status zc__cfg_read_file(const char *path, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    int fd;
    struct stat st;
    char why[768];
    if (zc__open_regular(path, 0, "a regular JSON file", &fd, &st, why, sizeof why) !=
        ZC_OPEN_OK)
        return ZC_ERR(ZC_ERR_IO, "%s", why);
    zc_status rc = ZC_OK;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    if ((uintmax_t)st.st_size > ZC_CFG_MAX_BYTES) {
        rc = ZC_ERR(ZC_ERR_CONFIG,
                    "%s is %jd bytes; a config may be at most " ZC_CFG_MAX_BYTES_TEXT
                    " (%zu bytes)",
                    path, (intmax_t)st.st_size, ZC_CFG_MAX_BYTES);
        goto out;
    }
    /* The common case costs one buffer of exactly st_size + 1 bytes: read
     * st_size bytes, then probe for one more. Only a file whose size moved
     * (or a /proc file, whose st_size is 0) takes the slow path below. */
    cap = (size_t)st.st_size + 1;
    ZC_CHECK_GOTO(zc__host_alloc(NULL, ZC_MEM_OTHER, cap, "config text", (void **)&buf), rc, out);
    bool grew = false;
    for (;;) {
        if (n + 1 == cap) {
            char probe;
            ssize_t r = read(fd, &probe, 1);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0) {
                rc = ZC_ERR(ZC_ERR_IO, "%s: read failed: %s", path, strerror(errno));
                goto out;
            }
            if (r == 0)
                break;
            /* Past what fstat said: grow by doubling, never past the limit
             * + 1 byte, which is enough to know the file is too large. */
            grew = true;
            if (n + 1 > ZC_CFG_MAX_BYTES) {
                rc = ZC_ERR(ZC_ERR_CONFIG,
                            "%s is larger than " ZC_CFG_MAX_BYTES_TEXT
                            " (%zu bytes), the most a config may be",
                            path, ZC_CFG_MAX_BYTES);
                goto out;
            }
            size_t ncap = cap < 2048 ? 4096 : cap * 2;
            if (ncap > ZC_CFG_MAX_BYTES + 2)
                ncap = ZC_CFG_MAX_BYTES + 2;
            char *nb;
            ZC_CHECK_GOTO(zc__host_alloc(NULL, ZC_MEM_OTHER, ncap, "config text", (void **)&nb),
                          rc, out);
            memcpy(nb, buf, n);
            zc__host_free(NULL, ZC_MEM_OTHER, buf, cap);
            buf = nb;
            cap = ncap;
            buf[n++] = probe;
            continue;
        }
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = ZC_ERR(ZC_ERR_IO, "%s: read failed: %s", path, strerror(errno));
            goto out;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    if (n > ZC_CFG_MAX_BYTES) {
        rc = ZC_ERR(ZC_ERR_CONFIG,
                    "%s is larger than " ZC_CFG_MAX_BYTES_TEXT " (%zu bytes), the most a config "
                    "may be",
                    path, ZC_CFG_MAX_BYTES);
        goto out;
    }
    if (grew || n + 1 != cap) {
        /* Callers free len + 1 bytes: hand back an exact-size copy. */
        char *exact;
        ZC_CHECK_GOTO(zc__host_alloc(NULL, ZC_MEM_OTHER, n + 1, "config text", (void **)&exact),
                      rc, out);
        memcpy(exact, buf, n);
        zc__host_free(NULL, ZC_MEM_OTHER, buf, cap);
        buf = exact;
        cap = n + 1;
    }
    buf[n] = 0;
    *text = buf;
    *len = n;
    buf = NULL; /* handed over */
out:
    if (buf)
        zc__host_free(NULL, ZC_MEM_OTHER, buf, cap);
    close(fd);
    return rc;
}
