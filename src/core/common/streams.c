/* The engine's streams and the events that order them with the caller's.
 *
 * On CUDA the engine queues its work on a non-blocking stream of its own, so
 * nothing the caller queues on the legacy default stream serialises with it
 * and nothing of ours waits for theirs by accident. Every hand-over between a
 * caller's stream and ours is therefore an event: recorded on the producer,
 * waited on by the consumer, no host wait. cudaStreamWaitEvent captures the
 * event's state when it is called, so one event per direction is re-recorded
 * for every hand-over.
 *
 *   acquire      ev_engine on stream, the caller's stream waits (the gather,
 *                the last optimizer update are done before it reads);
 *   release      ev_caller on the caller's stream, stream waits (its reads
 *                finish before the optimizer or a new gather writes the
 *                memory, or a stage-3 buffer goes back to the pool);
 *   grad_buffer  ev_engine on stream, user_stream waits (the zero-fill);
 *   grad_ready   ev_caller on user_stream, stream waits (the gradient);
 *   overlap_comm ev_handoff on stream, comm_stream waits (the prescaled
 *                gradient); ev_reduced on comm_stream after each reduction,
 *                stream waits before the norm, Adam and the reset read or
 *                clear reduced gradients; ev_gslot[s] on comm_stream after
 *                the reduction that read gradient pool slot s, stream waits
 *                before zero-filling that slot for another chunk, so the
 *                next chunk's backward never waits for the previous
 *                chunk's reduction (the two slots double-buffer);
 *   offload_param ev_h2d_in on stream, h2d_stream waits (the gather buffer's
 *                earlier users); a shard's H2D copy from its pinned home
 *                buffer on h2d_stream; ev_h2d_done on h2d_stream, stream
 *                waits (the all-gather); the host syncs ev_h2d_done only
 *                before the home buffer is reused (param_state.c).
 *   offload_optimizer (cpu, on a device) the gradient D2H and the output
 *                H2D on copy_stream, each chunk's with an event of its own
 *                (opt_copy.c); a gradient pool slot is not zeroed before
 *                the copy that read it (ev_land of gslot_land[s]).
 *
 * The host device runs everything synchronously: its streams and events are
 * sentinels and these calls do nothing, but they are made all the same, so
 * the ordering is the same code on both backends (and tested on the host
 * with a recording device). */
#include "config/config.h"
#include "core/engine.h"

zc_status zc__streams_create(zc_engine *e)
{
    zc_device *d = e->dev;
    const zc_device_ops *o = d->ops;
    e->streams_created = true; /* destroy releases whatever was created */
    ZC_CHECK(o->stream_create_nonblocking(d, &e->stream));
    e->comm_stream = e->stream;
    ZC_CHECK(o->stream_create_nonblocking(d, &e->ctl_stream));
    ZC_CHECK(o->event_create(d, &e->ev_engine));
    ZC_CHECK(o->event_create(d, &e->ev_caller));
    ZC_CHECK(o->event_create(d, &e->ev_handoff));
    ZC_CHECK(o->event_create(d, &e->ev_reduced));
    /* With stage "auto" these wait for the stage (zc_engine_build). */
    return e->stage_auto ? ZC_OK : zc__streams_stage(e);
}

zc_status zc__streams_stage(zc_engine *e)
{
    zc_device *d = e->dev;
    const zc_device_ops *o = d->ops;
    if (zc__cfg_overlap_comm(e->cfg))
        ZC_CHECK(o->stream_create_nonblocking(d, &e->comm_stream));
    /* Stage-3 parameter offload: the shards' H2D copies get a stream of
     * their own, so a copy overlaps the engine's work (param_state.c). */
    if (e->stage == 3 && (e->cfg->zero.offload_param.device != ZC_OFFLOAD_NONE ||
                          zc__config_place_free(e->cfg, true))) {
        ZC_CHECK(o->stream_create_nonblocking(d, &e->h2d_stream));
        ZC_CHECK(o->event_create(d, &e->ev_h2d_in));
        ZC_CHECK(o->event_create(d, &e->ev_h2d_done));
    }
    return ZC_OK;
}

zc_status zc__streams_grad_slots(zc_engine *e, int n)
{
    zc_device *d = e->dev;
    void *mem = NULL;
    const size_t m = n > 0 ? (size_t)n : 1;
    ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, m * sizeof(void *),
                            "gradient slot events", &mem));
    e->ev_gslot = mem;
    e->ngslots = n; /* destroy frees what was made so far */
    for (int i = 0; i < n; i++)
        e->ev_gslot[i] = NULL;
    ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, m * sizeof(bool), "gradient slot flags",
                            &mem));
    e->gslot_pending = mem;
    ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, m * sizeof(int), "gradient slot copies",
                            &mem));
    e->gslot_land = mem;
    for (int i = 0; i < n; i++) {
        e->gslot_pending[i] = false;
        e->gslot_land[i] = -1;
    }
    for (int i = 0; i < n; i++)
        ZC_CHECK(d->ops->event_create(d, &e->ev_gslot[i]));
    return ZC_OK;
}

static void free_grad_slots(zc_engine *e)
{
    const size_t m = e->ngslots > 0 ? (size_t)e->ngslots : 1;
    if (e->ev_gslot)
        for (int i = 0; i < e->ngslots; i++)
            if (e->ev_gslot[i])
                e->dev->ops->event_destroy(e->dev, e->ev_gslot[i]);
    zc__host_free(&e->acct, ZC_MEM_OTHER, e->ev_gslot, m * sizeof(void *));
    zc__host_free(&e->acct, ZC_MEM_OTHER, e->gslot_pending, m * sizeof(bool));
    zc__host_free(&e->acct, ZC_MEM_OTHER, e->gslot_land, m * sizeof(int));
    e->ev_gslot = NULL;
    e->gslot_pending = NULL;
    e->gslot_land = NULL;
    e->ngslots = 0;
}

static void sync_quietly(zc_engine *e, void *stream, const char *which)
{
    if (stream && e->dev->ops->stream_sync(e->dev, stream) != ZC_OK)
        ZC_LOGE("core", "zc_engine_destroy: waiting for the %s stream: %s", which,
                zc_last_error());
}

void zc__streams_destroy(zc_engine *e)
{
    if (!e->dev || !e->streams_created)
        return;
    zc_device *d = e->dev;
    const zc_device_ops *o = d->ops;
    /* The buffers are freed next: nothing queued may still use them. */
    sync_quietly(e, e->stream, "engine");
    if (e->comm_stream != e->stream)
        sync_quietly(e, e->comm_stream, "communication");
    sync_quietly(e, e->ctl_stream, "control");
    sync_quietly(e, e->h2d_stream, "parameter copy");
    void **evs[] = {&e->ev_engine, &e->ev_caller, &e->ev_handoff, &e->ev_reduced,
                    &e->ev_h2d_in, &e->ev_h2d_done};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++) {
        if (*evs[i])
            o->event_destroy(d, *evs[i]);
        *evs[i] = NULL;
    }
    free_grad_slots(e);
    if (e->comm_stream && e->comm_stream != e->stream)
        o->stream_destroy(d, e->comm_stream);
    if (e->ctl_stream)
        o->stream_destroy(d, e->ctl_stream);
    if (e->h2d_stream)
        o->stream_destroy(d, e->h2d_stream);
    if (e->stream)
        o->stream_destroy(d, e->stream);
    e->stream = e->comm_stream = e->ctl_stream = e->h2d_stream = NULL;
    e->streams_created = false;
}

zc_status zc__order_caller_after_engine(zc_engine *e, void *stream)
{
    if (stream == e->stream)
        return ZC_OK;
    zc_device *d = e->dev;
    ZC_CHECK(d->ops->event_record(d, e->ev_engine, e->stream));
    return d->ops->stream_wait_event(d, stream, e->ev_engine);
}

zc_status zc__order_engine_after_caller(zc_engine *e, void *stream)
{
    if (stream == e->stream)
        return ZC_OK;
    zc_device *d = e->dev;
    ZC_CHECK(d->ops->event_record(d, e->ev_caller, stream));
    return d->ops->stream_wait_event(d, e->stream, e->ev_caller);
}

zc_status zc__order_comm_after_engine(zc_engine *e)
{
    if (e->comm_stream == e->stream)
        return ZC_OK;
    zc_device *d = e->dev;
    ZC_CHECK(d->ops->event_record(d, e->ev_handoff, e->stream));
    return d->ops->stream_wait_event(d, e->comm_stream, e->ev_handoff);
}

zc_status zc__reduction_done(zc_engine *e, int slot)
{
    if (e->comm_stream == e->stream)
        return ZC_OK;
    zc_device *d = e->dev;
    if (slot >= 0 && slot < e->ngslots) {
        ZC_CHECK(d->ops->event_record(d, e->ev_gslot[slot], e->comm_stream));
        e->gslot_pending[slot] = true;
    }
    return d->ops->event_record(d, e->ev_reduced, e->comm_stream);
}

zc_status zc__order_engine_after_reductions(zc_engine *e)
{
    if (e->comm_stream == e->stream)
        return ZC_OK;
    zc_device *d = e->dev;
    ZC_CHECK(d->ops->stream_wait_event(d, e->stream, e->ev_reduced));
    /* ev_reduced follows every slot's reduction on the same stream. */
    for (int i = 0; i < e->ngslots; i++)
        e->gslot_pending[i] = false;
    return ZC_OK;
}

zc_status zc__order_engine_after_slot(zc_engine *e, int slot)
{
    if (slot < 0 || slot >= e->ngslots)
        return ZC_OK;
    zc_device *d = e->dev;
    if (e->gslot_pending[slot]) {
        ZC_CHECK(d->ops->stream_wait_event(d, e->stream, e->ev_gslot[slot]));
        e->gslot_pending[slot] = false;
    }
    /* cpu offload on a device: the slot's slice may still be copied D2H on
     * the optimizer's copy stream (opt_copy.c). */
    const int k = e->gslot_land[slot];
    if (e->copy_stream && k >= 0) {
        ZC_CHECK(d->ops->stream_wait_event(d, e->stream, e->ev_land[k]));
        e->gslot_land[slot] = -1;
    }
    return ZC_OK;
}
