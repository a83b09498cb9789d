/* fp32 views of a block (the public calls): zc_block_view_f32 and
 * zc_block_grad_buffers_f32 over the per-parameter views and slots of
 * f32_view.c, which explains them. Above both blocks.c and f32_view.c: the
 * gradient path (grads.c) narrows through f32_view.c and never needs a
 * block. */
#include <string.h>

#include "core/engine.h"

/* The checks every view call makes before touching anything. */
static zc_status view_enter(zc_engine *e, zc_block *b, const void *out, const char *fn)
{
    ZC_CHECK(zc__eng_enter(e, fn, true));
    if (zc_block_size(b) < 1)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: %p is not a block handle", fn, (const void *)b);
    if (zc_block_param(b, 0)->eng != e)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: the block belongs to another engine", fn);
    if (!out)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: the output array is NULL", fn);
    if (strcmp(e->dev->ops->name, "host") != 0)
        return ZC_ERR(ZC_ERR_UNSUPPORTED,
                      "%s: fp32 views are for the host path; the parameters live on the %s "
                      "device (widen them in your kernels)",
                      fn, e->dev->ops->name);
    return ZC_OK;
}

/* How many of the block's chunks need a slot (have none yet and are not
 * counted already); has(c) says whether chunk c holds one. Each chunk is
 * counted at the first of its parameters in the block. */
static int slots_needed(const zc_engine *e, const zc_block *b, bool gradient)
{
    const int n = zc_block_size(b);
    int need = 0;
    for (int i = 0; i < n; i++) {
        const zc_param *p = zc_block_param(b, i);
        const zc_chunk *c = &e->chunks[p->chunk];
        if (gradient ? c->gview_slot != NULL : c->view_slot != NULL)
            continue;
        bool seen = false;
        for (int j = 0; j < i && !seen; j++)
            seen = zc_block_param(b, j)->chunk == p->chunk;
        need += !seen;
    }
    return need;
}

static zc_status check_slots(zc_engine *e, const zc_block *b, bool gradient, const char *fn)
{
    zc_bufpool *pool = gradient ? &e->pool_gview : &e->pool_view;
    const int need = slots_needed(e, b, gradient);
    if (need == 0 || (gradient && e->dbg_gview))
        return ZC_OK;
    if (e->f32_view_chunks == 0)
        return ZC_ERR(ZC_ERR_NO_MEMORY,
                      "%s: fp32 views of %s parameters need slots reserved at build: set "
                      "zc_engine_options.f32_view_chunks (2 covers a block and a tied "
                      "embedding)",
                      fn, zc_dtype_name(e->pdt));
    const int have = zc__bufpool_free(pool, zc__view_slot_bytes(e));
    if (have < need)
        return ZC_ERR(ZC_ERR_NO_MEMORY,
                      "%s: the block's parameters lie in %d chunks without a %s view slot and "
                      "%d of the %d reserved (zc_engine_options.f32_view_chunks) are free; "
                      "%s the views of other chunks first, or raise f32_view_chunks",
                      fn, need, gradient ? "gradient" : "parameter", have, e->f32_view_chunks,
                      gradient ? "make ready" : "release");
    return ZC_OK;
}

ZC_API zc_status zc_block_view_f32(zc_engine *e, zc_block *b, float **views)
{
    static const char fn[] = "zc_block_view_f32";
    ZC_CHECK(view_enter(e, b, views, fn));
    const int n = zc_block_size(b);
    for (int i = 0; i < n; i++) {
        const zc_param *p = zc_block_param(b, i);
        if (p->acquired <= 0)
            return ZC_ERR(ZC_ERR_INVALID_STATE,
                          "%s: parameter %d of %d ('%s') is not acquired; a view is of acquired "
                          "parameters (zc_block_acquire first)",
                          fn, i, n, p->name);
    }
    if (!zc__view_copies(e)) {
        for (int i = 0; i < n; i++)
            views[i] = (float *)zc__view_acquired(e, zc_block_param(b, i));
        return ZC_OK;
    }
    ZC_CHECK(check_slots(e, b, false, fn));
    for (int i = 0; i < n; i++) {
        zc_param *p = zc_block_param(b, i);
        zc_chunk *c = &e->chunks[p->chunk];
        if (!p->view) {
            if (!c->view_slot) /* checked above: a free slot exists */
                ZC_CHECK(zc__bufpool_get(&e->pool_view, zc__view_slot_bytes(e), false, NULL,
                                         (void **)&c->view_slot));
            p->view = c->view_slot + p->offset;
            c->view_refs++;
        }
        /* Widened at every call, so a view taken again after zc_param_load
         * sees the new values. */
        ZC_CHECK(zc__view_widen(e, p));
        views[i] = p->view;
    }
    return ZC_OK;
}

ZC_API zc_status zc_block_grad_buffers_f32(zc_engine *e, zc_block *b, float **bufs)
{
    static const char fn[] = "zc_block_grad_buffers_f32";
    ZC_CHECK(view_enter(e, b, bufs, fn));
    ZC_CHECK(zc__pass_train_only(e, fn));
    if (!zc__view_copies(e))
        return zc_block_grad_buffers(e, b, (void **)bufs);
    /* Both checks before anything is taken: the fp32 slots here, the
     * 16-bit buffers (and the ready flags) inside zc_block_grad_buffers,
     * which takes nothing when it fails. */
    ZC_CHECK(check_slots(e, b, true, fn));
    const int n = zc_block_size(b);
    /* bufs first receives the working-dtype buffers the views narrow into. */
    ZC_CHECK(zc_block_grad_buffers(e, b, (void **)bufs));
    for (int i = 0; i < n; i++) {
        zc_param *p = zc_block_param(b, i);
        zc_chunk *c = &e->chunks[p->chunk];
        if (!p->gview) {
            if (!c->gview_slot && e->dbg_gview)
                c->gview_slot = e->dbg_gview[p->chunk];
            else if (!c->gview_slot)
                ZC_CHECK(zc__bufpool_get(&e->pool_gview, zc__view_slot_bytes(e), false, NULL,
                                         (void **)&c->gview_slot));
            p->gview = c->gview_slot + p->offset;
            /* ZC_DEBUG: a write through the pointer of an earlier window. */
            zc__view_debug_check(e, p, "at its next zc_block_grad_buffers_f32");
            p->gview_poisoned = false;
            p->gview_dst = bufs[i];
            memset(p->gview, 0, (size_t)p->numel * sizeof(float));
            c->gview_refs++;
        }
        bufs[i] = p->gview;
    }
    return ZC_OK;
}
