/* Parameter values: load, gather of the fp32 master, acquire and release.
 *
 * Host values enter and leave only through the device's copy op (H2D / D2H)
 * into a transient device buffer, so the same code serves the CUDA backend. */
#include <stdio.h>

#include "base/dtype.h"
#include "core/engine.h"

/* This rank's shard of chunk c intersected with [off, off + n): the overlap
 * [*a, *b) in chunk coordinates; false when empty. */
static bool own_overlap(const zc_engine *e, const zc_chunk *c, int64_t off, int64_t n,
                        int64_t *a, int64_t *b)
{
    int64_t lo = (int64_t)e->srank * c->shard, hi = lo + c->shard;
    *a = off > lo ? off : lo;
    *b = off + n < hi ? off + n : hi;
    return *a < *b;
}

/* The host values into the fp32 staging slot: as they are, or (round)
 * rounded to the working dtype first, in pieces through a small buffer on
 * the stack, so that nothing is allocated (the load is not collective: a
 * failure could not be agreed). The copy op has read its source when it
 * returns, so the buffer is reused at once. */
#define ROUND_PIECE 4096
static zc_status stage_values(zc_engine *e, void *tmp, const float *values, int64_t n, bool round)
{
    zc_device *d = e->dev;
    if (!round || e->pdt == ZC_DTYPE_F32)
        return d->ops->copy(d, tmp, values, (size_t)n * sizeof(float), ZC_COPY_H2D, e->stream);
    float piece[ROUND_PIECE];
    const bool bf16 = e->pdt == ZC_DTYPE_BF16;
    for (int64_t at = 0; at < n; at += ROUND_PIECE) {
        const int64_t m = n - at < ROUND_PIECE ? n - at : ROUND_PIECE;
        /* The rounding zc__eng_convert applies (round to nearest even). */
        for (int64_t j = 0; j < m; j++)
            piece[j] = bf16 ? zc__bf16_to_f32(zc__f32_to_bf16(values[at + j]))
                            : zc__f16_to_f32(zc__f32_to_f16(values[at + j]));
        ZC_CHECK(d->ops->copy(d, (float *)tmp + at, piece, (size_t)m * sizeof(float),
                              ZC_COPY_H2D, e->stream));
    }
    return ZC_OK;
}

ZC_API zc_status zc_param_load(zc_engine *e, zc_param *p, const float *values)
{
    return zc__param_load(e, p, values, false, "zc_param_load");
}

ZC_API zc_status zc_param_load_rounded(zc_engine *e, zc_param *p, const float *values)
{
    return zc__param_load(e, p, values, true, "zc_param_load_rounded");
}

zc_status zc__param_load(zc_engine *e, zc_param *p, const float *values, bool round,
                         const char *fn)
{
    ZC_CHECK(zc__eng_enter(e, fn, true));
    ZC_CHECK(zc__eng_check_param(e, p, fn));
    ZC_CHECK(zc__pass_train_only(e, fn));
    if (!values)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s('%s'): values is NULL", fn, p->name);
    if (e->window_started || e->micro > 0)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "%s('%s'): gradients of the current accumulation window were "
                      "already handed back; load parameters between optimizer steps",
                      fn, p->name);
    zc_device *d = e->dev;
    zc_chunk *c = &e->chunks[p->chunk];
    const size_t bytes = (size_t)p->numel * sizeof(float);
    void *tmp = NULL;
    zc_status rc = ZC_OK;
    /* Not a collective, so a failure here could not be agreed with the other
     * ranks: the staging slot is reserved at build (one chunk of fp32,
     * shared with zc_param_gather_master). With round, the slot holds the
     * rounded values: the master is made from them, and the working copy
     * (their exact conversion) is what rounding the caller's values makes.
     * The offloaded shards below are converted from the caller's values on
     * the host: rounding once gives the same working copy. */
    ZC_CHECK(zc__bufpool_get(&e->pool_stage, bytes, false, e->stream, &tmp));
    ZC_CHECK_GOTO(stage_values(e, tmp, values, p->numel, round), rc, out);

    int64_t a = p->offset, b = p->offset + p->numel;
    /* The master lives in the chunk's optimizer home (device, pinned host or
     * NVMe): written through it. */
    if (e->pol->full_optimizer) {
        ZC_CHECK_GOTO(zc__opt_master_write(e, p->chunk, p->offset, tmp, (size_t)p->numel), rc,
                      out);
    } else if (own_overlap(e, c, p->offset, p->numel, &a, &b)) {
        int64_t lo = (int64_t)e->srank * c->shard;
        ZC_CHECK_GOTO(zc__opt_master_write(e, p->chunk, a - lo,
                                           (const float *)tmp + (a - p->offset), (size_t)(b - a)),
                      rc, out);
    }
    if (e->pol->full_params) {
        ZC_CHECK_GOTO(zc__eng_convert(e, zc__elem(c->param, p->offset, e->pesz), e->pdt, tmp,
                                      ZC_DTYPE_F32, (size_t)p->numel),
                      rc, out);
    } else {
        /* An offloaded shard (offload_param) is converted on the host from
         * the caller's values into its home's memory, one write per chunk at
         * the next chunk or agreement point (param_state.c); prefetched
         * copies of the old values are dropped first. */
        zc__param_load_note(e);
        c->sec_valid = false; /* hpZ: its secondary copy holds the old values */
        if (own_overlap(e, c, p->offset, p->numel, &a, &b) && zc__param_offloaded(e, c)) {
            if (e->pol->quiesce)
                e->pol->quiesce(e);
            int64_t lo = (int64_t)e->srank * c->shard;
            ZC_CHECK_GOTO(zc__param_load_range(e, p->chunk, a - lo, values + (a - p->offset),
                                               (size_t)(b - a)),
                          rc, out);
        } else if (own_overlap(e, c, p->offset, p->numel, &a, &b)) {
            int64_t lo = (int64_t)e->srank * c->shard;
            ZC_CHECK_GOTO(zc__eng_convert(e, zc__elem(c->param, a - lo, e->pesz), e->pdt,
                                          (const float *)tmp + (a - p->offset), ZC_DTYPE_F32,
                                          (size_t)(b - a)),
                          rc, out);
        }
        /* Every rank loads the same values, so a gathered copy is refreshed
         * locally without communication. */
        if (c->gather)
            ZC_CHECK_GOTO(zc__eng_convert(e, zc__elem(c->gather, p->offset, e->pesz), e->pdt, tmp,
                                          ZC_DTYPE_F32, (size_t)p->numel),
                          rc, out);
    }
    rc = d->ops->stream_sync(d, e->stream);
out:
    zc__bufpool_put(&e->pool_stage, &tmp);
    return rc;
}

zc_status zc__master_gather_chunk(zc_engine *e, int k, const char *what, void **slot)
{
    zc_chunk *c = &e->chunks[k];
    /* Not part of a training step: the gather is not counted in the stats.
     * The buffer is the fp32 staging slot reserved at build (one chunk of
     * fp32, shared with zc_param_load: the two never overlap on a rank). The
     * master comes out of its home (device, pinned host or NVMe) into this
     * rank's slice of it, which is then all-gathered in place (stage 0 holds
     * the full chunk). */
    const size_t full = (size_t)c->padded * sizeof(float);
    const bool all = e->pol->full_optimizer;
    const size_t own = all ? (size_t)c->padded : (size_t)c->shard;
    void *tmp = NULL;
    ZC_CHECK(zc__bufpool_get(&e->pool_stage, full, false, e->stream, &tmp));
    float *slice = all ? (float *)tmp : (float *)tmp + (size_t)e->srank * (size_t)c->shard;
    zc_status rc = zc__opt_master_read(e, k, slice, own);
    /* Under nvme the read is rank-local I/O, and widening a bf16 master from
     * a host home on a GPU takes a host scratch: the outcome is agreed before
     * the all-gather, so a failing rank never leaves the others waiting. */
    if (zc__opt_rank_local_io(e) || e->sdt.master != ZC_DTYPE_F32)
        rc = zc__eng_agree(e, rc, what);
    if (rc == ZC_OK && !all)
        rc = zc__eng_grp_all_gather(e, ZC_GRP_SHARD, slice, tmp, (size_t)c->shard, ZC_DTYPE_F32,
                                    false, e->stream);
    if (rc != ZC_OK) {
        zc__bufpool_put(&e->pool_stage, &tmp);
        return rc;
    }
    *slot = tmp;
    return ZC_OK;
}

ZC_API zc_status zc_param_gather_master(zc_engine *e, zc_param *p, float *out_values)
{
    ZC_CHECK(zc__eng_enter(e, "zc_param_gather_master", true));
    ZC_CHECK(zc__eng_check_param(e, p, "zc_param_gather_master"));
    if (!out_values)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_param_gather_master('%s'): out is NULL", p->name);
    zc_device *d = e->dev;
    const size_t bytes = (size_t)p->numel * sizeof(float);
    void *tmp = NULL;
    zc_status rc = zc__master_gather_chunk(e, p->chunk,
                                           "zc_param_gather_master: reading the master", &tmp);
    if (rc == ZC_OK)
        rc = d->ops->copy(d, out_values, (const float *)tmp + p->offset, bytes, ZC_COPY_D2H,
                          e->stream);
    if (rc == ZC_OK)
        rc = d->ops->stream_sync(d, e->stream);
    zc__bufpool_put(&e->pool_stage, &tmp);
    if (rc != ZC_OK)
        zc__error_context("zc_param_gather_master('%s')", p->name);
    return rc;
}

zc_status zc__param_acquire(zc_engine *e, zc_param *p, void *stream, void **out)
{
    *out = NULL;
    ZC_CHECK(zc__eng_enter(e, "zc_param_acquire", true));
    ZC_CHECK(zc__eng_check_param(e, p, "zc_param_acquire"));
    void *ptr = NULL;
    zc__timers_begin(&e->timers);
    if (e->pol->acquire) {
        const double waited = zc__param_wait_begin(e);
        zc__timers_push(&e->timers, ZC_TIMER_GATHER);
        zc_status grc = e->pol->acquire(e, p, &ptr);
        zc__timers_pop(&e->timers);
        zc__param_wait_end(e, waited);
        ZC_CHECK(grc);
    } else
        ptr = zc__elem(e->chunks[p->chunk].param, p->offset, e->pesz);
    /* The gather (stage 3) and the last optimizer update are queued on the
     * engine's stream: the caller's stream waits for them by an event. */
    zc_status rc = zc__order_caller_after_engine(e, stream);
    if (rc != ZC_OK) {
        /* Undo the policy's acquire so the chunk is not left counted as in
         * use (stage 3 would never free it); keep the ordering error. */
        if (e->pol->release) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", zc_last_error());
            (void)e->pol->release(e, p);
            zc__error_clear();
            return ZC_ERR(rc, "%s", msg);
        }
        return rc;
    }
    p->acquired++;
    *out = ptr;
    return ZC_OK;
}

ZC_API void *zc_param_acquire(zc_engine *e, zc_param *p, void *stream)
{
    void *ptr = NULL;
    return zc__param_acquire(e, p, stream, &ptr) == ZC_OK ? ptr : NULL;
}

ZC_API zc_status zc_param_acquire_status(zc_engine *e, zc_param *p, void *stream, void **out)
{
    if (!out)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_param_acquire_status: out is NULL");
    return zc__param_acquire(e, p, stream, out);
}

ZC_API zc_status zc_param_release(zc_engine *e, zc_param *p, void *stream)
{
    ZC_CHECK(zc__eng_enter(e, "zc_param_release", true));
    ZC_CHECK(zc__eng_check_param(e, p, "zc_param_release"));
    if (p->acquired <= 0)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "zc_param_release('%s'): the parameter is not acquired", p->name);
    /* The caller's reads on `stream` must finish before the engine's stream
     * writes this memory again: the optimizer update, or a gather into the
     * stage-3 buffer once it is back in the pool. Every such write is queued
     * on the engine's stream, so an event it waits on is enough. */
    ZC_CHECK(zc__order_engine_after_caller(e, stream));
    if (e->pol->release)
        ZC_CHECK(e->pol->release(e, p));
    p->acquired--;
    zc__view_release(e, p);
    return ZC_OK;
}

ZC_API zc_status zc_param_chunk_base(zc_engine *e, const zc_param *p, void **base,
                                     int64_t *elem_offset)
{
    ZC_CHECK(zc__eng_enter(e, "zc_param_chunk_base", true));
    ZC_CHECK(zc__eng_check_param(e, p, "zc_param_chunk_base"));
    if (!base)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_param_chunk_base('%s'): base is NULL", p->name);
    const zc_chunk *c = &e->chunks[p->chunk];
    /* Stages 0-2 keep every chunk's working parameters resident; stage 3
     * has the full chunk only while one of its parameters is acquired. */
    void *b = e->pol->full_params ? c->param : (p->acquired > 0 ? c->gather : NULL);
    if (!b)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "zc_param_chunk_base('%s'): stage 3 holds chunk %d gathered only while one "
                      "of its parameters is acquired; acquire '%s' first",
                      p->name, p->chunk, p->name);
    *base = b;
    if (elem_offset)
        *elem_offset = p->offset;
    return ZC_OK;
}
