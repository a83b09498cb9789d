/* Collected validation messages (errors, warnings, infos) with their paths.
 *
 * Each kept message owns exact-size copies of its path and text, so a long or
 * non-ASCII key name is reported whole (a fixed buffer would cut it, possibly
 * inside a UTF-8 sequence, and the JSON output would then hold null). Only
 * ZC_CFG_DIAG_KEEP messages per severity are kept: memory for messages is
 * bounded whatever the document holds. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "config/internal.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/log.h"

static char *dup_counted(const char *s)
{
    size_t n = strlen(s) + 1;
    void *p;
    if (zc__host_alloc(NULL, ZC_MEM_OTHER, n, "config message", &p) != ZC_OK)
        return NULL;
    memcpy(p, s, n);
    return p;
}

static void free_counted(char *s)
{
    if (s)
        zc__host_free(NULL, ZC_MEM_OTHER, s, strlen(s) + 1);
}

bool zc__diag_keeps(const zc_cfg_diag *d, zc_cfg_sev sev)
{
    return d && d->kept[sev] < ZC_CFG_DIAG_KEEP;
}

int zc__diag_dropped(const zc_cfg_diag *d, zc_cfg_sev sev)
{
    return d->count[sev] - d->kept[sev];
}

static bool grow(zc_cfg_diag *d)
{
    if (d->n < d->cap)
        return true;
    int ncap = d->cap ? d->cap * 2 : 16;
    void *p;
    if (zc__host_alloc(NULL, ZC_MEM_OTHER, (size_t)ncap * sizeof(zc_cfg_msg), "config messages",
                       &p) != ZC_OK)
        return false;
    if (d->n)
        memcpy(p, d->v, (size_t)d->n * sizeof(zc_cfg_msg));
    if (d->v)
        zc__host_free(NULL, ZC_MEM_OTHER, d->v, (size_t)d->cap * sizeof(zc_cfg_msg));
    d->v = p;
    d->cap = ncap;
    return true;
}

void zc__diag_add(zc_cfg_diag *d, zc_cfg_sev sev, zc_status st, const char *path,
                  const char *fmt, ...)
{
    if (!d)
        return;
    /* Counted first: validity is decided by the counts, not by what is kept. */
    if (sev == ZC_SEV_ERROR && d->nerr++ == 0)
        d->err_status = st;
    else if (sev == ZC_SEV_WARN)
        d->nwarn++;
    bool keep = zc__diag_keeps(d, sev);
    d->count[sev]++;
    if (!keep)
        return;
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *msg = NULL, *p = NULL;
    void *mem = NULL;
    if (len >= 0 && grow(d) &&
        zc__host_alloc(NULL, ZC_MEM_OTHER, (size_t)len + 1, "config message", &mem) == ZC_OK) {
        msg = mem;
        va_start(ap, fmt);
        vsnprintf(msg, (size_t)len + 1, fmt, ap);
        va_end(ap);
        p = dup_counted(path ? path : "");
    }
    if (!msg || !p) {
        free_counted(msg);
        d->oom = true;
        return;
    }
    d->v[d->n++] = (zc_cfg_msg){.sev = sev, .status = st, .path = p, .msg = msg};
    d->kept[sev]++;
}

void zc__diag_free(zc_cfg_diag *d)
{
    if (!d)
        return;
    for (int i = 0; i < d->n; i++) {
        free_counted(d->v[i].path);
        free_counted(d->v[i].msg);
    }
    if (d->v)
        zc__host_free(NULL, ZC_MEM_OTHER, d->v, (size_t)d->cap * sizeof(zc_cfg_msg));
    memset(d, 0, sizeof(*d));
}

const zc_cfg_msg *zc__diag_first_error(const zc_cfg_diag *d)
{
    for (int i = 0; i < d->n; i++)
        if (d->v[i].sev == ZC_SEV_ERROR)
            return &d->v[i];
    return NULL;
}

/* Appends "path: msg" to buf when it fits whole; a half message helps nobody. */
static bool append(char *buf, size_t cap, size_t *len, const char *sep, const zc_cfg_msg *m)
{
    int n = snprintf(buf + *len, cap - *len, "%s%s%s%s", sep, m->path, m->path[0] ? ": " : "",
                     m->msg);
    if (n < 0 || (size_t)n >= cap - *len) {
        buf[*len] = 0;
        return false;
    }
    *len += (size_t)n;
    return true;
}

zc_status zc__diag_report(const zc_cfg_diag *d, const char *what)
{
    const char *w = what ? what : "", *ws = what ? ": " : "";
    for (int i = 0; i < d->n; i++) {
        const zc_cfg_msg *m = &d->v[i];
        if (m->sev == ZC_SEV_WARN)
            ZC_LOGW("config", "%s%s%s: %s", w, ws, m->path, m->msg);
        else if (m->sev == ZC_SEV_INFO)
            ZC_LOGI("config", "%s%s%s: %s", w, ws, m->path, m->msg);
    }
    if (zc__diag_dropped(d, ZC_SEV_WARN))
        ZC_LOGW("config", "%s%s... and %d more warnings", w, ws,
                zc__diag_dropped(d, ZC_SEV_WARN));
    if (d->nerr == 0) {
        if (d->oom)
            return ZC_ERR(ZC_ERR_NO_MEMORY, "%s: out of memory recording config messages",
                          what ? what : "config");
        return ZC_OK;
    }
    /* Every error at once, so one run shows everything to fix. The budget
     * stays under zc_last_error's 1024 bytes with room for the location
     * prefix and the closing count. */
    char buf[900];
    /* What `what` (a file name, any length) takes is not available to the
     * errors, or zc_last_error would cut the text at a byte, not a message. */
    size_t wl = strlen(w) + strlen(ws);
    size_t cap = wl < sizeof buf - 200 ? sizeof buf - wl : 200;
    size_t len = 0;
    int shown = 0;
    buf[0] = 0;
    for (int i = 0; i < d->n; i++) {
        if (d->v[i].sev != ZC_SEV_ERROR)
            continue;
        if (!append(buf, cap, &len, shown ? "; " : "", &d->v[i])) {
            if (shown != 0)
                break;
            /* The first one alone is too long: cut it, it is all we have,
             * on a character boundary so the message stays UTF-8. */
            snprintf(buf, cap, "%s%s%s", d->v[i].path, d->v[i].path[0] ? ": " : "",
                     d->v[i].msg);
            size_t end = strlen(buf), lead = end;
            while (lead > 0 && ((unsigned char)buf[lead - 1] & 0xC0) == 0x80)
                lead--;
            if (lead > 0) { /* buf[lead - 1] starts the last character */
                unsigned char c = (unsigned char)buf[lead - 1];
                size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
                if (end - (lead - 1) < need)
                    end = lead - 1;
            }
            buf[end] = 0;
        }
        shown++;
    }
    if (shown == 0)
        snprintf(buf, sizeof buf, "%d errors (out of memory recording them)", d->nerr);
    int more = d->nerr - (shown ? shown : d->nerr);
    if (more > 0)
        return ZC_ERR(d->err_status, "%s%s%s (and %d more error%s)", w, ws, buf, more,
                      more > 1 ? "s" : "");
    return ZC_ERR(d->err_status, "%s%s%s", w, ws, buf);
}
