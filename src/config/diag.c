/* Collected validation messages (errors, warnings, infos) with their paths. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "config/internal.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/log.h"

void zc__diag_add(zc_cfg_diag *d, zc_cfg_sev sev, zc_status st, const char *path,
                  const char *fmt, ...)
{
    if (!d)
        return;
    if (d->n == d->cap) {
        int ncap = d->cap ? d->cap * 2 : 16;
        void *p;
        if (zc__host_alloc(NULL, ZC_MEM_OTHER, (size_t)ncap * sizeof(zc_cfg_msg),
                           "config messages", &p) != ZC_OK) {
            d->oom = true;
            return;
        }
        if (d->n)
            memcpy(p, d->v, (size_t)d->n * sizeof(zc_cfg_msg));
        if (d->v)
            zc__host_free(NULL, ZC_MEM_OTHER, d->v, (size_t)d->cap * sizeof(zc_cfg_msg));
        d->v = p;
        d->cap = ncap;
    }
    zc_cfg_msg *m = &d->v[d->n++];
    m->sev = sev;
    m->status = st;
    snprintf(m->path, sizeof m->path, "%s", path ? path : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->msg, sizeof m->msg, fmt, ap);
    va_end(ap);
    if (sev == ZC_SEV_ERROR)
        d->nerr++;
    else if (sev == ZC_SEV_WARN)
        d->nwarn++;
}

void zc__diag_free(zc_cfg_diag *d)
{
    if (d && d->v)
        zc__host_free(NULL, ZC_MEM_OTHER, d->v, (size_t)d->cap * sizeof(zc_cfg_msg));
    if (d)
        memset(d, 0, sizeof(*d));
}

const zc_cfg_msg *zc__diag_first_error(const zc_cfg_diag *d)
{
    for (int i = 0; i < d->n; i++)
        if (d->v[i].sev == ZC_SEV_ERROR)
            return &d->v[i];
    return NULL;
}

zc_status zc__diag_report(const zc_cfg_diag *d, const char *what)
{
    for (int i = 0; i < d->n; i++) {
        const zc_cfg_msg *m = &d->v[i];
        if (m->sev == ZC_SEV_WARN)
            ZC_LOGW("config", "%s%s%s: %s", what ? what : "", what ? ": " : "", m->path, m->msg);
        else if (m->sev == ZC_SEV_INFO)
            ZC_LOGI("config", "%s%s%s: %s", what ? what : "", what ? ": " : "", m->path, m->msg);
    }
    const zc_cfg_msg *e = zc__diag_first_error(d);
    if (!e) {
        if (d->oom)
            return ZC_ERR(ZC_ERR_NO_MEMORY, "%s: out of memory recording config messages",
                          what ? what : "config");
        return ZC_OK;
    }
    if (d->nerr > 1)
        return ZC_ERR(e->status, "%s%s%s: %s (and %d more error%s)", what ? what : "",
                      what ? ": " : "", e->path, e->msg, d->nerr - 1, d->nerr > 2 ? "s" : "");
    return ZC_ERR(e->status, "%s%s%s: %s", what ? what : "", what ? ": " : "", e->path, e->msg);
}
