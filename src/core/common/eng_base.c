/* What every engine module needs from the engine, below all of them: the
 * checks at a public call's entry, breaking the engine, the collectives
 * (payload counted in the step stats; a failed one breaks the engine, so
 * the ranks agree that nothing more can be trusted), and device memory
 * counted on the engine's account. It calls nothing of the engine's own
 * modules (only the fault switch of zc__eng_alloc); the agreement on
 * rank-local work built on these collectives is agree.c. */
#include <stdio.h>

#include "core/engine.h"

/* The log rank is thread-local: every public entry sets it from the engine, so
 * a rank thread logs with its rank even when it never called create. */
zc_status zc__eng_enter(const zc_engine *e, const char *fn, bool need_built)
{
    zc__error_clear();
    if (!e || e->magic != ZC_ENGINE_MAGIC)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: engine handle is NULL or not an engine", fn);
    zc__log_set_rank(e->rank);
    /* This thread records into the engine's timeline while its window is
     * open or its comms logger is on (src/trace): the hooks below it read
     * it. */
    zc__tl_flush_due(e->tl); /* a window that ended at the last step: its file */
    zc__tl_enter(e->tl);
    if (e->state == ZC_ENG_FAILED)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "%s: zc_engine_build failed on this engine; it can only be destroyed", fn);
    if (e->state == ZC_ENG_BROKEN)
        return ZC_ERR(e->broken_rc,
                      "%s: this engine is broken, so the ranks may no longer agree on "
                      "gradients or parameters; destroy the engine and its communicator "
                      "(first failure: %s)",
                      fn, e->broken_msg);
    if (need_built && e->state != ZC_ENG_BUILT)
        return ZC_ERR(ZC_ERR_INVALID_STATE, "%s: call zc_engine_build first", fn);
    /* The caller may have switched the thread's GPU since its last call;
     * inside the call the device layer then trusts it (device.h). */
    if (e->dev && e->dev->ops->make_current) {
        zc_status rc = e->dev->ops->make_current(e->dev);
        if (rc != ZC_OK) {
            zc__error_context("%s", fn);
            return rc;
        }
    }
    return ZC_OK;
}

void zc__eng_break(zc_engine *e, zc_status rc, const char *why)
{
    if (e->state != ZC_ENG_BUILT)
        return; /* keep the first reason */
    snprintf(e->broken_msg, sizeof e->broken_msg, "%s", why);
    e->broken_rc = rc;
    e->state = ZC_ENG_BROKEN;
}

zc_status zc__eng_check_param(const zc_engine *e, const zc_param *p, const char *fn)
{
    if (!p)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: parameter handle is NULL", fn);
    if (p->magic != ZC_PARAM_MAGIC)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: %p is not a parameter handle of this engine", fn,
                      (const void *)p);
    if (p->eng != e)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "%s: parameter '%s' belongs to another engine (rank %d), not to this one "
                      "(rank %d)",
                      fn, p->name, p->eng ? p->eng->rank : -1, e->rank);
    return ZC_OK;
}

/* ---- collectives --------------------------------------------------------- */

/* The world's collectives are the world group's: groups_coll.c counts them
 * (payload and bytes by link) and records them in the timeline. */
zc_status zc__eng_all_reduce_at(zc_engine *e, void *buf, size_t n, zc_dtype dt, bool count_it,
                                void *stream, const char *site)
{
    return zc__eng_grp_all_reduce_at(e, ZC_GRP_WORLD, buf, n, dt, count_it, stream, site);
}

zc_status zc__eng_reduce_scatter_at(zc_engine *e, const void *send, void *recv, size_t recv_n,
                                    zc_dtype dt, bool count_it, void *stream, const char *site)
{
    return zc__eng_grp_reduce_scatter_at(e, ZC_GRP_WORLD, send, recv, recv_n, dt, count_it,
                                         stream, site);
}

zc_status zc__eng_all_gather_at(zc_engine *e, const void *send, void *recv, size_t send_n,
                                zc_dtype dt, bool count_it, void *stream, const char *site)
{
    return zc__eng_grp_all_gather_at(e, ZC_GRP_WORLD, send, recv, send_n, dt, count_it, stream,
                                     site);
}

/* A group's collectives are launched by group_end: a failure there is a
 * failure of those collectives (some ranks may have launched theirs), so it
 * breaks the engine exactly like one (groups_coll.c). */
zc_status zc__eng_group_start(zc_engine *e) { return zc__eng_grp_start(e, ZC_GRP_WORLD); }

zc_status zc__eng_group_end(zc_engine *e) { return zc__eng_grp_end(e, ZC_GRP_WORLD); }

/* ---- device helpers ------------------------------------------------------ */

zc_status zc__eng_alloc(zc_engine *e, zc_mem_category cat, size_t bytes, const char *what,
                        void **out)
{
    *out = NULL;
    if (bytes == 0)
        return ZC_OK;
    int64_t nth = 0;
    if (e->state == ZC_ENG_BUILT && zc__faults_hit(&e->faults, ZC_FAULT_ALLOC, &nth))
        return ZC_ERR(ZC_ERR_NO_MEMORY,
                      "%s: injected failure of allocation %lld after zc_engine_build on rank %d "
                      "(ZC_FAULTS), %zu bytes",
                      what, (long long)nth, e->rank, bytes);
    return e->dev->ops->alloc(e->dev, &e->acct, cat, bytes, what, out);
}

void zc__eng_free(zc_engine *e, zc_mem_category cat, void **p, size_t bytes)
{
    if (*p)
        e->dev->ops->free(e->dev, &e->acct, cat, *p, bytes);
    *p = NULL;
}

zc_status zc__eng_copy(zc_engine *e, void *dst, const void *src, size_t bytes, zc_copy_kind kind,
                       void *stream, int chunk)
{
    const int64_t t0 = zc__tl_begin();
    const zc_status rc = e->dev->ops->copy(e->dev, dst, src, bytes, kind, stream);
    if (rc == ZC_OK && (kind == ZC_COPY_H2D || kind == ZC_COPY_D2H))
        zc__tl_copy(t0, kind == ZC_COPY_D2H, (int64_t)bytes, chunk);
    return rc;
}

zc_status zc__eng_convert(zc_engine *e, void *dst, zc_dtype dst_dt, const void *src,
                          zc_dtype src_dt, size_t n)
{
    if (n == 0)
        return ZC_OK;
    if (dst_dt == src_dt)
        return e->dev->ops->copy(e->dev, dst, src, n * zc_dtype_size(dst_dt), ZC_COPY_D2D,
                                 e->stream);
    return e->dev->ops->cast(e->dev, dst, dst_dt, src, src_dt, n, e->stream);
}
