/* fp32 views: a float training loop over fp16/bf16 parameters, host path.
 * This file keeps the views and their slots per parameter; the public block
 * calls are block_f32.c.
 *
 * zc_block_view_f32 widens an acquired block's parameters into an fp32 slot
 * of their chunk; zc_block_grad_buffers_f32 hands out fp32 gradient buffers
 * from another slot of the chunk, narrowed (round to nearest even) into the
 * working-dtype gradient buffers at each parameter's zc_grad_ready. The
 * loop's arithmetic is then the same as a loop that widens and narrows by
 * itself, bit for bit: widening is exact and the narrowing rounds as
 * src/base/dtype.h does everywhere else.
 *
 * Slots. Both pools hold f32_view_chunks slots of the largest padded chunk,
 * reserved at build, so handing out a view never allocates: like the
 * gradient pool, which slots are in use follows the call sequence, the same
 * on every rank, and running out is the same error everywhere. A chunk takes
 * a slot when the first of its parameters gets a view and gives it back when
 * the last one's view ends (release; zc_grad_ready for gradients); a
 * parameter lies at its layout offset in the slot, as in the chunk.
 *
 * fp32 parameters need no copy: their views are the acquired pointers and
 * the gradient buffers themselves, and no slot is reserved.
 *
 * ZC_DEBUG=1 (grad_debug.c, docs/debug.md): each chunk gets an fp32
 * gradient slot of its own instead of the pool, and zc_grad_ready fills the
 * parameter's slice with the poison after narrowing it; a pooled slot would
 * go to another chunk, whose use would look like a late write. The slices
 * are checked where the 16-bit shadows are. */
#include <stdio.h>
#include <string.h>

#include "core/engine.h"

/* Most slots f32_view_chunks may ask for: a view is for the few chunks a
 * loop touches at once, and the bound keeps the reserve's size arithmetic
 * far from overflow. */
#define ZC_F32_VIEW_MAX 64

bool zc__view_copies(const zc_engine *e)
{
    return e->pdt != ZC_DTYPE_F32;
}

size_t zc__view_slot_bytes(const zc_engine *e)
{
    int64_t big = 0;
    for (int k = 0; k < e->nchunks; k++)
        if (e->chunks[k].padded > big)
            big = e->chunks[k].padded;
    return (size_t)big * sizeof(float);
}

zc_status zc__view_option(zc_engine *e, int chunks)
{
    if (chunks < 0 || chunks > ZC_F32_VIEW_MAX)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_engine_options.f32_view_chunks %d: must be 0..%d",
                      chunks, ZC_F32_VIEW_MAX);
    if (chunks > 0 && strcmp(e->dev->ops->name, "host") != 0)
        return ZC_ERR(ZC_ERR_UNSUPPORTED,
                      "zc_engine_options.f32_view_chunks %d: fp32 views are for the host path; "
                      "the parameters live on the %s device (widen them in your kernels)",
                      chunks, e->dev->ops->name);
    e->f32_view_chunks = chunks;
    zc__bufpool_init(&e->pool_view, "fp32 parameter views", ZC_MEM_BUFFERS, e->dev, &e->acct);
    zc__bufpool_init(&e->pool_gview, "fp32 gradient views", ZC_MEM_BUFFERS, e->dev, &e->acct);
    return ZC_OK;
}

static size_t debug_slot_bytes(const zc_chunk *c)
{
    return (size_t)c->padded * sizeof(float);
}

/* ZC_DEBUG: the per-chunk fp32 gradient slots. */
static zc_status debug_build(zc_engine *e)
{
    ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, (size_t)e->nchunks * sizeof(float *),
                            "ZC_DEBUG fp32 gradient slot table", (void **)&e->dbg_gview));
    memset(e->dbg_gview, 0, (size_t)e->nchunks * sizeof(float *));
    for (int k = 0; k < e->nchunks; k++)
        ZC_CHECK(zc__eng_alloc(e, ZC_MEM_GRADS, debug_slot_bytes(&e->chunks[k]),
                               "ZC_DEBUG fp32 gradient view slot", (void **)&e->dbg_gview[k]));
    return ZC_OK;
}

zc_status zc__view_build(zc_engine *e)
{
    if (e->f32_view_chunks == 0 || !zc__view_copies(e))
        return ZC_OK;
    const size_t bytes = zc__view_slot_bytes(e);
    ZC_CHECK(zc__bufpool_plan(&e->pool_view, bytes, e->f32_view_chunks));
    ZC_CHECK(zc__bufpool_reserve(&e->pool_view));
    if (e->debug) {
        ZC_CHECK(debug_build(e));
    } else {
        ZC_CHECK(zc__bufpool_plan(&e->pool_gview, bytes, e->f32_view_chunks));
        ZC_CHECK(zc__bufpool_reserve(&e->pool_gview));
    }
    ZC_LOGI("core", "fp32 views: %d chunk slots for parameters and %d for gradients, %zu bytes "
                    "each (%s parameters widened on the host)",
            e->f32_view_chunks, e->f32_view_chunks, bytes, zc_dtype_name(e->pdt));
    return ZC_OK;
}

void zc__view_free(zc_engine *e)
{
    zc__bufpool_destroy(&e->pool_view);
    zc__bufpool_destroy(&e->pool_gview);
}

void zc__view_debug_free(zc_engine *e)
{
    if (e->dbg_gview) {
        for (int k = 0; k < e->nchunks; k++)
            if (e->dbg_gview[k])
                zc__eng_free(e, ZC_MEM_GRADS, (void **)&e->dbg_gview[k],
                             debug_slot_bytes(&e->chunks[k]));
        zc__host_free(&e->acct, ZC_MEM_OTHER, e->dbg_gview, (size_t)e->nchunks * sizeof(float *));
        e->dbg_gview = NULL;
    }
}

void zc__view_debug_check(zc_engine *e, const zc_param *p, const char *when)
{
    if (p->gview_poisoned)
        zc__debug_compare(e, p, e->dbg_gview[p->chunk] + p->offset,
                          (size_t)p->numel * sizeof(float), sizeof(float),
                          "fp32 gradient buffer", "zc_block_grad_buffers_f32", when);
}

/* The acquired full parameter: resident (stages 0-2) or gathered (3). */
const void *zc__view_acquired(const zc_engine *e, const zc_param *p)
{
    const zc_chunk *c = &e->chunks[p->chunk];
    return zc__elem(e->pol->full_params ? c->param : c->gather, p->offset, e->pesz);
}

zc_status zc__view_widen(zc_engine *e, const zc_param *p)
{
    return zc__eng_convert(e, p->view, ZC_DTYPE_F32, zc__view_acquired(e, p), e->pdt,
                           (size_t)p->numel);
}

void zc__view_release(zc_engine *e, zc_param *p)
{
    if (!p->view || p->acquired > 0)
        return;
    zc_chunk *c = &e->chunks[p->chunk];
    p->view = NULL;
    if (--c->view_refs == 0)
        zc__bufpool_put(&e->pool_view, (void **)&c->view_slot);
}

zc_status zc__view_refresh(zc_engine *e)
{
    for (int i = 0; i < e->nparams; i++)
        if (e->params[i]->view)
            ZC_CHECK(zc__view_widen(e, e->params[i]));
    return ZC_OK;
}

zc_status zc__view_grad_ready(zc_engine *e, zc_param *p)
{
    if (!p->gview)
        return ZC_OK;
    ZC_CHECK(zc__eng_convert(e, p->gview_dst, e->pdt, p->gview, ZC_DTYPE_F32, (size_t)p->numel));
    zc_chunk *c = &e->chunks[p->chunk];
    if (e->dbg_gview) {
        memset(p->gview, ZC_DEBUG_POISON, (size_t)p->numel * sizeof(float));
        p->gview_poisoned = true;
    }
    p->gview = NULL;
    p->gview_dst = NULL;
    if (--c->gview_refs == 0) {
        if (e->dbg_gview)
            c->gview_slot = NULL; /* the chunk's own: nothing to give back */
        else
            zc__bufpool_put(&e->pool_gview, (void **)&c->gview_slot);
    }
    return ZC_OK;
}
