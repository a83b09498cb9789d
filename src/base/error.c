/* Thread-local last-error message (zc_last_error). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"

#define ZC_ERRBUF 1024

static _Thread_local char errbuf[ZC_ERRBUF];

static const char *basename_of(const char *path)
{
    /* Keep "dir/file.c" (one directory) so messages say zero3/gather.c:212. */
    const char *last = strrchr(path, '/');
    if (!last)
        return path;
    const char *p = last;
    while (p > path && p[-1] != '/')
        p--;
    if (p > path)
        return p;
    return last + 1;
}

zc_status zc__error(zc_status s, const char *file, int line, const char *fmt, ...)
{
    int n = snprintf(errbuf, sizeof errbuf, "%s:%d ", basename_of(file), line);
    if (n < 0 || (size_t)n >= sizeof errbuf)
        n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf + n, sizeof errbuf - (size_t)n, fmt, ap);
    va_end(ap);
    return s;
}

void zc__error_clear(void) { errbuf[0] = '\0'; }

void zc__error_restore(const char *msg) { snprintf(errbuf, sizeof errbuf, "%s", msg); }

void zc__error_context(const char *fmt, ...)
{
    char prefix[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    char old[ZC_ERRBUF];
    memcpy(old, errbuf, sizeof old);
    size_t n = strlen(prefix);
    if (n > sizeof errbuf - 3)
        n = sizeof errbuf - 3;
    memcpy(errbuf, prefix, n);
    errbuf[n] = ':';
    errbuf[n + 1] = ' ';
    size_t room = sizeof errbuf - n - 3;
    size_t m = strnlen(old, room);
    memcpy(errbuf + n + 2, old, m);
    errbuf[n + 2 + m] = '\0';
}

const char *zc_last_error(void) { return errbuf; }

zc_status zc__kept_error_keep(zc_kept_error *ke, zc_status rc)
{
    if (rc != ZC_OK && ke->rc == ZC_OK) {
        ke->rc = rc;
        snprintf(ke->msg, sizeof ke->msg, "%s", errbuf);
    }
    return rc;
}

void zc__kept_error_clear(zc_kept_error *ke)
{
    ke->rc = ZC_OK;
    ke->msg[0] = '\0';
}

zc_status zc__out_check(const char *fn, const char *type, const size_t *size, size_t need)
{
    if (!size)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: out is NULL", fn);
    if (*size < need)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "%s: out->size %zu is smaller than sizeof(%s) %zu; set out->size", fn,
                      *size, type, need);
    return ZC_OK;
}
