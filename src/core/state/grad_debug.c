/* ZC_DEBUG=1: catches a write into a gradient buffer after that parameter's
 * zc_grad_ready, the same way at every stage.
 *
 * Without it such a write is silent and stage-dependent: stages 0/1 change
 * only this rank's already-reduced gradient, stages 2/3 write a pool slot
 * that may by then hold another chunk's gradient. With it, zc_grad_buffer
 * hands out a shadow buffer the engine owns (one per chunk, the chunk's size
 * in the working dtype, allocated at build), never the buffer the reduction
 * reads: zc_grad_ready copies the parameter's gradient from the shadow into
 * the real buffer and then fills the shadow slice with a poison pattern. The
 * slice must still hold the pattern when it is checked - at zc_step and
 * zc_micro_step_end (every slice made ready), and at the parameter's next
 * zc_grad_buffer (a write after the step) - otherwise the check fails with
 * one message naming the parameter and the first changed element, agreed
 * across ranks at the next zc_step or zc_micro_step_end. The pattern is 0xA5
 * in every byte, not a NaN: a late `g += x` must change it (a NaN would
 * propagate unchanged). Memory checks go through the device's copy op, so
 * the CUDA path checks the same way. */
#include <stdio.h>
#include <string.h>

#include "base/env.h"
#include "core/engine.h"

zc_status zc__debug_parse(const char *text, bool *on)
{
    *on = false;
    if (!text || !*text || strcmp(text, "0") == 0)
        return ZC_OK;
    if (strcmp(text, "1") == 0) {
        *on = true;
        return ZC_OK;
    }
    char shown[ZC_ENV_SHOWN_MAX];
    return ZC_ERR(ZC_ERR_CONFIG, "ZC_DEBUG='%s': want 0 (off, the default) or 1 (check "
                                 "gradient buffer lifetimes, docs/debug.md)",
                  zc__env_shown(text, shown, sizeof shown));
}

static size_t shadow_bytes(const zc_engine *e, const zc_chunk *c)
{
    return (size_t)c->padded * e->pesz;
}

zc_status zc__debug_build(zc_engine *e)
{
    if (!e->debug)
        return ZC_OK;
    ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, (size_t)e->nchunks * sizeof(void *),
                            "ZC_DEBUG shadow table", (void **)&e->dbg_shadow));
    size_t most = 0;
    for (int k = 0; k < e->nchunks; k++) {
        const size_t bytes = shadow_bytes(e, &e->chunks[k]);
        ZC_CHECK(zc__eng_alloc(e, ZC_MEM_GRADS, bytes, "ZC_DEBUG gradient shadow",
                               &e->dbg_shadow[k]));
        ZC_CHECK(e->dev->ops->memset0(e->dev, e->dbg_shadow[k], bytes, e->stream));
        if (bytes > most)
            most = bytes;
    }
    /* Host copies of one chunk: the pattern to upload and the slice read
     * back for the comparison. */
    e->dbg_host_bytes = most;
    ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, most, "ZC_DEBUG pattern", &e->dbg_pattern));
    ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, most, "ZC_DEBUG readback", &e->dbg_read));
    memset(e->dbg_pattern, ZC_DEBUG_POISON, most);
    ZC_LOGI("core", "ZC_DEBUG=1: gradient buffers are shadows checked for writes after "
                    "zc_grad_ready (%zu bytes more)",
            (size_t)e->padded_elems * e->pesz);
    return ZC_OK;
}

void zc__debug_free(zc_engine *e)
{
    zc__view_debug_free(e);
    if (e->dbg_shadow) {
        for (int k = 0; k < e->nchunks; k++)
            if (e->dbg_shadow[k])
                zc__eng_free(e, ZC_MEM_GRADS, &e->dbg_shadow[k], shadow_bytes(e, &e->chunks[k]));
        zc__host_free(&e->acct, ZC_MEM_OTHER, e->dbg_shadow, (size_t)e->nchunks * sizeof(void *));
        e->dbg_shadow = NULL;
    }
    zc__host_free(&e->acct, ZC_MEM_OTHER, e->dbg_pattern, e->dbg_host_bytes);
    zc__host_free(&e->acct, ZC_MEM_OTHER, e->dbg_read, e->dbg_host_bytes);
    e->dbg_pattern = e->dbg_read = NULL;
}

static void *slice(const zc_engine *e, const zc_param *p)
{
    return zc__elem(e->dbg_shadow[p->chunk], p->offset, e->pesz);
}

void zc__debug_compare(zc_engine *e, const zc_param *p, const void *got, size_t bytes,
                       size_t elem_bytes, const char *buffer, const char *source,
                       const char *when)
{
    /* The first late write is kept: it names the parameter to fix. */
    if (e->dbg_found)
        return;
    const unsigned char *r = got;
    size_t at = 0;
    while (at < bytes && r[at] == ZC_DEBUG_POISON)
        at++;
    if (at == bytes)
        return;
    e->dbg_found = true;
    snprintf(e->dbg_msg, sizeof e->dbg_msg,
             "ZC_DEBUG: the %s of parameter '%s' was written after its zc_grad_ready "
             "(element %zu of %lld changed, seen %s); the pointer from %s is valid only "
             "until the parameter's zc_grad_ready",
             buffer, p->name, at / elem_bytes, (long long)p->numel, when, source);
}

/* Reads p's poisoned shadow slice back and compares it with the poison. */
static zc_status check_slice(zc_engine *e, const zc_param *p, const char *when)
{
    zc_device *d = e->dev;
    const size_t bytes = (size_t)p->numel * e->pesz;
    /* The caller's writes are on its stream: read after them. */
    ZC_CHECK(zc__order_engine_after_caller(e, e->user_stream));
    ZC_CHECK(d->ops->copy(d, e->dbg_read, slice(e, p), bytes, ZC_COPY_D2H, e->stream));
    ZC_CHECK(d->ops->stream_sync(d, e->stream));
    zc__debug_compare(e, p, e->dbg_read, bytes, e->pesz, "gradient buffer", "zc_grad_buffer",
                      when);
    return ZC_OK;
}

zc_status zc__debug_grad_buffer(zc_engine *e, zc_param *p, void **buf)
{
    if (!e->debug)
        return ZC_OK;
    if (!p->dbg_taken) {
        /* First use in this micro-step: the slice still holds the poison
         * of the last zc_grad_ready (or the zeros of build). */
        if (p->dbg_poisoned)
            ZC_CHECK(check_slice(e, p, "at its next zc_grad_buffer"));
        ZC_CHECK(e->dev->ops->memset0(e->dev, slice(e, p), (size_t)p->numel * e->pesz,
                                      e->stream));
        p->dbg_taken = true;
        p->dbg_poisoned = false;
    }
    *buf = slice(e, p);
    return ZC_OK;
}

zc_status zc__debug_grad_ready(zc_engine *e, zc_param *p, void *real)
{
    if (!e->debug)
        return ZC_OK;
    zc_device *d = e->dev;
    const size_t bytes = (size_t)p->numel * e->pesz;
    ZC_CHECK(zc__order_engine_after_caller(e, e->user_stream));
    /* A parameter made ready without zc_grad_buffer in this micro-step has
     * a zero gradient, which the real buffer already holds. */
    if (p->dbg_taken)
        ZC_CHECK(d->ops->copy(d, real, slice(e, p), bytes, ZC_COPY_D2D, e->stream));
    ZC_CHECK(d->ops->copy(d, slice(e, p), e->dbg_pattern, bytes, ZC_COPY_H2D, e->stream));
    /* The host pattern must outlive the upload; and the caller may have
     * no more work queued, so wait here (debug only). */
    ZC_CHECK(d->ops->stream_sync(d, e->stream));
    p->dbg_taken = false;
    p->dbg_poisoned = true;
    return ZC_OK;
}

zc_status zc__debug_check(zc_engine *e, const char *fn)
{
    if (!e->debug)
        return ZC_OK;
    zc_status rc = ZC_OK;
    for (int i = 0; i < e->nparams && rc == ZC_OK; i++) {
        if (e->params[i]->dbg_poisoned)
            rc = check_slice(e, e->params[i], "at the end of the micro-step");
        zc__view_debug_check(e, e->params[i], "at the end of the micro-step");
    }
    if (rc == ZC_OK && e->dbg_found)
        rc = ZC_ERR(ZC_ERR_INVALID_STATE, "%s", e->dbg_msg);
    /* Every rank checks at the same call: agreeing keeps one rank's finding
     * from leaving the others in the step's collectives. */
    (void)fn;
    return zc__eng_agree(e, rc, "the ZC_DEBUG gradient lifetime check");
}
