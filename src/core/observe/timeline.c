/* The engine's side of the timeline and the comms logger: the window's
 * course over the steps, the loop's spans, the end, and the comms logger's
 * public calls (timeline.h; recording is src/trace). */
#include <stdio.h>
#include <string.h>

#include "core/engine.h"

void zc__timeline_start(zc_engine *e)
{
    if (!e->tl || !zc__tl_pending(e->tl))
        return;
    zc__tl_start(e->tl);
    zc__timers_trace(&e->timers, e->tl);
    zc__tl_enter(e->tl); /* this thread records from now on */
}

void zc__timeline_step_end(zc_engine *e)
{
    zc_tl *t = e->tl;
    if (!t || !zc__tl_pending(t))
        return;
    if (zc__tl_keeping(t) && !zc__tl_traces_step(t, e->steps + 1)) {
        /* The window's last step is done: recording stops now, and the
         * file is written at the engine's next call, so that no traced step
         * pays for the write. */
        zc__timers_trace(&e->timers, NULL);
        zc__tl_finish(t);
        zc__tl_enter(t);
    } else if (!zc__tl_keeping(t) && zc__tl_traces_step(t, e->steps + 1)) {
        zc__timeline_start(e);
    }
}

int64_t zc__timeline_loop_begin(zc_engine *e)
{
    if (!zc__tl_keeping(e->tl))
        return 0;
    zc__tl_loop_open(e->tl);
    return zc__tl_clock();
}

void zc__timeline_loop_end(zc_engine *e, int64_t t0, const char *name)
{
    if (t0)
        zc__tl_loop_close(e->tl, t0, name);
}

void zc__timeline_destroy(zc_engine *e)
{
    zc_tl *t = e->tl;
    if (!t)
        return;
    if (zc__tl_keeping(t) && zc__tl_pending(t)) {
        /* The run ended inside the window: its complete steps go out. */
        ZC_LOGI("core", "the run ended at step %lld, inside the timeline's window: writing the "
                "steps it completed", (long long)e->steps);
        zc__timers_trace(&e->timers, NULL);
        zc__tl_finish(t);
    }
    zc__tl_flush_due(t);
    zc_comms_stats cs = {.size = sizeof cs};
    zc__tl_comms_stats(t, &cs);
    if (cs.enabled && zc__log_enabled(ZC_LOG_INFO)) {
        char buf[16384];
        zc__tl_comms_table(t, buf, sizeof buf);
        for (char *line = buf, *nl; *line; line = nl + 1) {
            nl = strchr(line, '\n');
            if (!nl)
                break;
            *nl = '\0';
            ZC_LOGI("comm", "%s", line);
        }
    }
    zc__tl_destroy(t, &e->acct);
    e->tl = NULL;
}

ZC_API zc_status zc_engine_comms_stats(const zc_engine *e, zc_comms_stats *out)
{
    ZC_CHECK(zc__eng_enter(e, "zc_engine_comms_stats", false));
    ZC_CHECK(zc__out_check("zc_engine_comms_stats", "zc_comms_stats", out ? &out->size : NULL,
                           sizeof(zc_comms_stats)));
    zc__tl_comms_stats(e->tl, out); /* the bandwidths too */
    out->world = e->world;
    return ZC_OK;
}

ZC_API zc_status zc_engine_comms_summary(const zc_engine *e, char *buf, size_t cap, size_t *len)
{
    ZC_CHECK(zc__eng_enter(e, "zc_engine_comms_summary", false));
    if (!buf && cap)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_engine_comms_summary: buf is NULL with cap %zu",
                      cap);
    const size_t need = zc__tl_comms_table(e->tl, buf, cap);
    if (len)
        *len = need;
    return ZC_OK;
}
