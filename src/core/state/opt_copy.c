/* The optimizer offload's copies between the device and the cpu home's
 * pinned staging, on a copy stream of the engine's own (ZeRO-Offload on a
 * GPU).
 *
 * Gradients in. As each chunk's reduction finishes (on comm_stream), the copy
 * stream waits for it (ev_copy_in) and copies this rank's reduced slice D2H
 * into the chunk's own landing buffer (opt_home_cpu.c), then records
 * ev_land[k]. Nothing waits on the host during backward: the copy overlaps
 * the rest of backward. The slice is consumed later, after a host wait for
 * that chunk's event alone:
 *   stage 1      Adam reads the landed slice at the step (zc__opt_fetch);
 *   stages 2/3   the host adds it to the pinned fp32 shard at
 *                zc_micro_step_end (every chunk, in order: the landing
 *                buffers take the next micro-step's slices) and, in the
 *                window's last micro-step, chunk by chunk in the norm
 *                (step.c), which reads the shard next.
 * A landing buffer per chunk (not a ring) is what lets every copy of a
 * backward pass be queued without waiting for a consumer that only runs at
 * the step; its cost (shard x working-dtype bytes per chunk) is planned in
 * estimate.c and documented in docs/offload.md.
 *
 * Outputs out. Adam writes chunk k's new working-precision shard into output
 * buffer k & 1; the copy stream waits for the engine's stream (the shard's
 * earlier readers), copies it H2D and records ev_out[k & 1], which the
 * engine's stream waits for (the publish reads the shard). The host waits
 * for ev_out[s] only before Adam writes buffer s again, two chunks later: the
 * copy of chunk k's output overlaps Adam on chunk k + 1.
 *
 * The gradient pool slot a stage-2/3 slice lies in must not be zero-filled
 * for another chunk before the copy read it: gslot_land[s] names the chunk
 * whose copy read slot s, and zc__order_engine_after_slot waits for its
 * event on the device. The reset (after the step) waits for the whole copy
 * stream on the device before it clears the gradients the copies read.
 *
 * All of this exists only with staging and a home that has landing buffers
 * (the cpu home on a device; on the host path when tests force staging).
 * Without a device nothing here runs: device memory is host memory and the
 * home is used in place. The events and the stream are created at build, so
 * nothing here allocates or can fail on one rank alone between collectives
 * (a failed enqueue is a device error, sticky like any other). */
#include "core/engine.h"

static zc_opt_home *land_home(const zc_engine *e)
{
    zc_opt_home *h = e->nhomes > 1 ? e->homes[1] : NULL;
    return h && h->ops->host && h->ops->grad_land ? h : NULL;
}

zc_status zc__opt_copy_build(zc_engine *e)
{
    /* gslot_land is made, all -1, with the gradient pool (reserve.c). */
    if (!e->opt_staging || !land_home(e))
        return ZC_OK;
    zc_device *d = e->dev;
    const zc_device_ops *o = d->ops;
    const size_t n = (size_t)e->nchunks;
    ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, n * sizeof(void *), "gradient copy events",
                            (void **)&e->ev_land));
    ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, n * sizeof(bool), "gradient copy flags",
                            (void **)&e->land_pending));
    ZC_CHECK(o->stream_create_nonblocking(d, &e->copy_stream));
    ZC_CHECK(o->event_create(d, &e->ev_copy_in));
    ZC_CHECK(o->event_create(d, &e->ev_copy_tail));
    for (int s = 0; s < 2; s++)
        ZC_CHECK(o->event_create(d, &e->ev_out[s]));
    for (int k = 0; k < e->nchunks; k++)
        if (zc__opt_copy_on(e, &e->chunks[k]))
            ZC_CHECK(o->event_create(d, &e->ev_land[k]));
    return ZC_OK;
}

void zc__opt_copy_free(zc_engine *e)
{
    zc_device *d = e->dev;
    if (e->copy_stream) {
        /* The landing and output buffers are freed next. */
        if (d->ops->stream_sync(d, e->copy_stream) != ZC_OK)
            ZC_LOGE("core", "zc_engine_destroy: waiting for the optimizer copy stream: %s",
                    zc_last_error());
        d->ops->stream_destroy(d, e->copy_stream);
        e->copy_stream = NULL;
    }
    void **evs[] = {&e->ev_copy_in, &e->ev_copy_tail, &e->ev_out[0], &e->ev_out[1]};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++) {
        if (*evs[i])
            d->ops->event_destroy(d, *evs[i]);
        *evs[i] = NULL;
    }
    for (int k = 0; e->ev_land && k < e->nchunks; k++)
        if (e->ev_land[k])
            d->ops->event_destroy(d, e->ev_land[k]);
    zc__host_free(&e->acct, ZC_MEM_OTHER, e->ev_land, (size_t)e->nchunks * sizeof(void *));
    zc__host_free(&e->acct, ZC_MEM_OTHER, e->land_pending, (size_t)e->nchunks * sizeof(bool));
    e->ev_land = NULL;
    e->land_pending = NULL;
}

bool zc__opt_copy_on(const zc_engine *e, const zc_chunk *c)
{
    return e->copy_stream && c->home == 1 && land_home(e);
}

zc_status zc__opt_copy_grad_d2h(zc_engine *e, zc_chunk *c, const void *src, void *from)
{
    zc_device *d = e->dev;
    zc_opt_home *h = land_home(e);
    const int k = (int)(c - e->chunks);
    void *land = h->ops->grad_land(h, k);
    /* A slice landed earlier and not consumed yet would be overwritten: the
     * settle points (micro-step end, the step) make this an engine bug. */
    if (e->land_pending[k])
        return ZC_ERR(ZC_ERR_INTERNAL, "chunk %d: a gradient copy lands on one not consumed", k);
    ZC_CHECK(d->ops->event_record(d, e->ev_copy_in, from));
    ZC_CHECK(d->ops->stream_wait_event(d, e->copy_stream, e->ev_copy_in));
    ZC_CHECK(zc__eng_copy(e, land, src, (size_t)c->shard * e->pesz, ZC_COPY_D2H,
                          e->copy_stream, k));
    ZC_CHECK(d->ops->event_record(d, e->ev_land[k], e->copy_stream));
    e->land_pending[k] = true;
    const int slot = c->gbuf ? zc__bufpool_slot(&e->pool_grad, c->gbuf) : -1;
    if (slot >= 0 && slot < e->ngslots)
        e->gslot_land[slot] = k;
    return ZC_OK;
}

zc_status zc__opt_copy_settle(zc_engine *e, int k)
{
    if (!e->land_pending || !e->land_pending[k])
        return ZC_OK;
    zc_chunk *c = &e->chunks[k];
    zc_device *d = e->dev;
    ZC_CHECK(d->ops->event_sync(d, e->ev_land[k]));
    e->land_pending[k] = false;
    if (!c->acc_host)
        return ZC_OK; /* stage 1: Adam reads the landed slice itself */
    zc_opt_home *h = land_home(e);
    zc_device *hd = zc__device_host();
    return zc__grad_acc_add(e, hd, c->acc, h->ops->grad_land(h, k), (size_t)c->shard, NULL);
}

zc_status zc__opt_copy_settle_all(zc_engine *e)
{
    for (int k = 0; e->land_pending && k < e->nchunks; k++)
        ZC_CHECK(zc__opt_copy_settle(e, k));
    return ZC_OK;
}

zc_status zc__opt_copy_out_begin(zc_engine *e, int k)
{
    const int s = k & 1;
    if (!e->out_pending[s])
        return ZC_OK;
    ZC_CHECK(e->dev->ops->event_sync(e->dev, e->ev_out[s]));
    e->out_pending[s] = false;
    return ZC_OK;
}

zc_status zc__opt_copy_out_end(zc_engine *e, int k, void *dst, const void *src, size_t bytes)
{
    zc_device *d = e->dev;
    const int s = k & 1;
    ZC_CHECK(d->ops->event_record(d, e->ev_copy_in, e->stream));
    ZC_CHECK(d->ops->stream_wait_event(d, e->copy_stream, e->ev_copy_in));
    ZC_CHECK(zc__eng_copy(e, dst, src, bytes, ZC_COPY_H2D, e->copy_stream, k));
    ZC_CHECK(d->ops->event_record(d, e->ev_out[s], e->copy_stream));
    e->out_pending[s] = true;
    return d->ops->stream_wait_event(d, e->stream, e->ev_out[s]);
}

zc_status zc__opt_copy_order_reset(zc_engine *e)
{
    if (!e->copy_stream)
        return ZC_OK;
    zc_device *d = e->dev;
    ZC_CHECK(d->ops->event_record(d, e->ev_copy_tail, e->copy_stream));
    ZC_CHECK(d->ops->stream_wait_event(d, e->stream, e->ev_copy_tail));
    for (int k = 0; k < e->nchunks; k++)
        e->land_pending[k] = false;
    for (int s = 0; s < e->ngslots; s++)
        e->gslot_land[s] = -1;
    return ZC_OK;
}
