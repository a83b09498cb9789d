/* A block's values in one array: zc_block_load and zc_block_gather_master,
 * the per-parameter zc_param_load and zc_param_gather_master over the
 * block's parameters, their values back to back in the block's order.
 *
 * The load is zc_param_load per parameter (same effect, bitwise, and the
 * same handling of offloaded shards). The gather reads and all-gathers each
 * chunk of the master once for every run of the block's parameters that lie
 * in it, where the per-parameter call gathers the chunk once per parameter:
 * the collectives follow the block alone, so every rank calls the same ones.
 * Both check their arguments and the engine's state before touching
 * anything, so bad input changes nothing. */
#include <string.h>

#include "core/engine.h"

/* The checks of both calls: a block of this engine, an array, and `count`
 * equal to the block's elements. */
static zc_status values_enter(zc_engine *e, const zc_block *b, const void *array, size_t count,
                              const char *fn)
{
    ZC_CHECK(zc__eng_enter(e, fn, true));
    const int n = zc_block_size(b);
    if (n < 1)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: %p is not a block handle", fn, (const void *)b);
    if (zc_block_param(b, 0)->eng != e)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: the block belongs to another engine", fn);
    if (!array)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: the values array is NULL", fn);
    /* numel is positive and a block has at most INT_MAX parameters, each
     * below 2^62 elements; checked all the same. */
    size_t total = 0;
    for (int i = 0; i < n; i++)
        if (__builtin_add_overflow(total, (size_t)zc_block_param(b, i)->numel, &total))
            return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: the block's elements overflow size_t", fn);
    if (count != total)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "%s: count is %zu floats, but the block's %d parameters hold %zu ('%s' "
                      "first)",
                      fn, count, n, total, zc_block_param(b, 0)->name);
    return ZC_OK;
}

static zc_status block_load(zc_engine *e, zc_block *b, const float *values, size_t count,
                            bool round, const char *fn)
{
    ZC_CHECK(values_enter(e, b, values, count, fn));
    ZC_CHECK(zc__pass_train_only(e, fn));
    /* zc_param_load's own state check, made once before the first load so
     * that a misplaced call loads nothing. */
    if (e->window_started || e->micro > 0)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "%s: gradients of the current accumulation window were already handed "
                      "back; load parameters between optimizer steps", fn);
    const int n = zc_block_size(b);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        zc_param *p = zc_block_param(b, i);
        zc_status rc = zc__param_load(e, p, values + at, round,
                                      round ? "zc_param_load_rounded" : "zc_param_load");
        if (rc != ZC_OK) {
            /* A device or offload I/O failure: the parameters before i hold
             * their new values (a load cannot be taken back), as after the
             * same per-parameter calls. */
            zc__error_context("%s: parameter %d of %d ('%s')", fn, i, n, p->name);
            return rc;
        }
        at += (size_t)p->numel;
    }
    return ZC_OK;
}

ZC_API zc_status zc_block_load(zc_engine *e, zc_block *b, const float *values, size_t count)
{
    return block_load(e, b, values, count, false, "zc_block_load");
}

ZC_API zc_status zc_block_load_rounded(zc_engine *e, zc_block *b, const float *values,
                                       size_t count)
{
    return block_load(e, b, values, count, true, "zc_block_load_rounded");
}

ZC_API zc_status zc_block_gather_master(zc_engine *e, zc_block *b, float *out, size_t count)
{
    ZC_CHECK(values_enter(e, b, out, count, "zc_block_gather_master"));
    zc_device *d = e->dev;
    const int n = zc_block_size(b);
    size_t at = 0;
    for (int i = 0; i < n;) {
        /* The run [i, j) of parameters in the chunk of parameter i. */
        const int k = zc_block_param(b, i)->chunk;
        int j = i;
        while (j < n && zc_block_param(b, j)->chunk == k)
            j++;
        void *full = NULL;
        zc_status rc =
            zc__master_gather_chunk(e, k, "zc_block_gather_master: reading the master", &full);
        for (int q = i; q < j && rc == ZC_OK; q++) {
            const zc_param *p = zc_block_param(b, q);
            rc = d->ops->copy(d, out + at, (const float *)full + p->offset,
                              (size_t)p->numel * sizeof(float), ZC_COPY_D2H, e->stream);
            at += (size_t)p->numel;
        }
        if (rc == ZC_OK)
            rc = d->ops->stream_sync(d, e->stream);
        zc__bufpool_put(&e->pool_stage, &full);
        if (rc != ZC_OK) {
            /* A failed read is agreed and a failed gather is a failed
             * collective: either breaks every rank's engine, as the
             * per-parameter call's would. */
            zc__error_context("zc_block_gather_master: parameters %d-%d of %d (chunk %d, '%s')",
                              i, j - 1, n, k, zc_block_param(b, i)->name);
            return rc;
        }
        i = j;
    }
    return ZC_OK;
}
