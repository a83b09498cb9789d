/* The activation store's copies (transfer.h): the caller's checkpoint into
 * its slot and back, through the device home's memory, or a host home's
 * (offload/homes.h part 4) directly on the host path and through device
 * staging slots on a GPU; the reads ahead of the restores; the gather of a
 * partitioned checkpoint.
 *
 * Streams, on a GPU (the host device runs each operation synchronously, so
 * there the events are sentinels and the waits return at once):
 *   save     the caller's stream copies the checkpoint into staging slot i
 *            (it first waits for ev_free[i], the copy out of i two saves
 *            ago) and records ev_filled[i]; the copy stream waits for it,
 *            copies i into the home's host memory and records ev_free[i].
 *            An NVMe home's write is submitted once ev_free[i] has passed:
 *            polled at every later call, waited for when the stage is
 *            needed again or a restore begins. So the caller's buffer may be
 *            overwritten as soon as the call returns (stream order), and the
 *            copy to the host overlaps the next block's forward.
 *   restore  the copies out of the stages still in flight are ordered
 *            before it (the caller's stream waits for them, or the host for
 *            an NVMe home's), the home hands its host memory - read ahead
 *            while the caller recomputed the block above - and the caller's
 *            stream copies it to dst; the home gets the memory back once
 *            ev_restored (recorded after that copy) has passed: an NVMe
 *            home's buffer at the next call that needs it (its next read is
 *            the host's), a pinned slot at once, the copy stream waiting for
 *            the event before any later copy into pinned memory (the host
 *            never waits for a restore's copy). */
#include <string.h>

#include "act/transfer.h"
#include "base/log.h"

static size_t part_of(const zc_act_store *s, size_t bytes)
{
    return s->p.spec.parts > 1 ? bytes / (size_t)s->p.spec.parts : bytes;
}

static char *dslot(zc_act_store *s, int slot)
{
    return s->dslots + (size_t)slot * (size_t)s->lay.slot_stride;
}

static char *stage_at(zc_act_store *s, int i) { return s->stage + (size_t)i * s->stage_stride; }

zc_status zc__act_transfer_init(zc_act_store *s)
{
    zc_device *d = s->dev;
    s->release_slot = -1;
    if (s->home && s->p.spec.staging) {
        s->stage_stride = ((size_t)s->lay.part_bytes + ZC_ACT_DEVICE_ALIGN - 1) /
                          ZC_ACT_DEVICE_ALIGN * ZC_ACT_DEVICE_ALIGN;
        s->stage_bytes = s->stage_stride * ZC_ACT_STAGE_SLOTS;
        ZC_CHECK(d->ops->alloc(d, s->p.acct, ZC_MEM_ACTIVATIONS, s->stage_bytes,
                               "activation staging (device)", (void **)&s->stage));
        ZC_CHECK(d->ops->stream_create_nonblocking(d, &s->copy_stream));
        for (int i = 0; i < ZC_ACT_STAGE_SLOTS; i++) {
            ZC_CHECK(d->ops->event_create(d, &s->ev_filled[i]));
            ZC_CHECK(d->ops->event_create(d, &s->ev_free[i]));
        }
        ZC_CHECK(d->ops->event_create(d, &s->ev_restored));
    }
    if (s->p.spec.parts > 1)
        ZC_CHECK(d->ops->alloc(d, s->p.acct, ZC_MEM_ACTIVATIONS, ZC_ACT_DEVICE_ALIGN,
                               "activation gather status", (void **)&s->status_dev));
    return ZC_OK;
}

void zc__act_transfer_free(zc_act_store *s)
{
    zc_device *d = s->dev;
    zc__act_transfer_quiesce(s);
    if (s->copy_stream)
        d->ops->stream_destroy(d, s->copy_stream);
    for (int i = 0; i < ZC_ACT_STAGE_SLOTS; i++) {
        if (s->ev_filled[i])
            d->ops->event_destroy(d, s->ev_filled[i]);
        if (s->ev_free[i])
            d->ops->event_destroy(d, s->ev_free[i]);
    }
    if (s->ev_restored)
        d->ops->event_destroy(d, s->ev_restored);
    if (s->stage)
        d->ops->free(d, s->p.acct, ZC_MEM_ACTIVATIONS, s->stage, s->stage_bytes);
    if (s->status_dev)
        d->ops->free(d, s->p.acct, ZC_MEM_ACTIVATIONS, s->status_dev, ZC_ACT_DEVICE_ALIGN);
    s->copy_stream = s->stage = NULL;
    s->status_dev = NULL;
}

/* The home's memory of the last restore, back to it once its copy passed. */
static zc_status release_pending(zc_act_store *s)
{
    if (s->release_slot < 0)
        return ZC_OK;
    const zc_status rc = s->dev->ops->event_sync(s->dev, s->ev_restored);
    s->home->ops->read_end(s->home, s->release_slot);
    s->release_slot = -1;
    return rc;
}

/* Stage i's copy out has landed (waited for on the host): the home's write
 * of its slot can go (an NVMe home submits it; the cpu home has nothing to
 * do). */
static zc_status land_stage(zc_act_store *s, int i)
{
    if (!s->pend[i])
        return ZC_OK;
    ZC_CHECK(s->dev->ops->event_sync(s->dev, s->ev_free[i]));
    s->pend[i] = false;
    return s->home->ops->write_end(s->home, s->pend_slot[i], s->pend_bytes[i]);
}

/* Lands the stages whose copy out has passed, without waiting. */
static zc_status poll_stages(zc_act_store *s)
{
    for (int i = 0; i < ZC_ACT_STAGE_SLOTS; i++) {
        int done = 0;
        if (!s->pend[i])
            continue;
        ZC_CHECK(s->dev->ops->event_query(s->dev, s->ev_free[i], &done));
        if (done)
            ZC_CHECK(land_stage(s, i));
    }
    return ZC_OK;
}

/* Stage i's copy out ordered before work enqueued on `stream` from now: a
 * cpu home's slot is read by the stream itself (a device-side wait keeps the
 * host running ahead); an NVMe home's write must be submitted first, which
 * takes the host. */
static zc_status order_stage(zc_act_store *s, int i, void *stream)
{
    if (!s->pend[i])
        return ZC_OK;
    if (s->home->ops->rank_local_io(s->home))
        return land_stage(s, i);
    ZC_CHECK(s->dev->ops->stream_wait_event(s->dev, stream, s->ev_free[i]));
    s->pend[i] = false;
    return s->home->ops->write_end(s->home, s->pend_slot[i], s->pend_bytes[i]);
}

static zc_status order_stages(zc_act_store *s, void *stream)
{
    for (int i = 0; i < ZC_ACT_STAGE_SLOTS; i++)
        ZC_CHECK(order_stage(s, i, stream));
    return ZC_OK;
}

static zc_status save_staged(zc_act_store *s, int slot, const char *from, size_t pb,
                             void *stream)
{
    zc_device *d = s->dev;
    const int i = s->next_stage;
    s->next_stage = (i + 1) % ZC_ACT_STAGE_SLOTS;
    /* Stage i is free once its copy out (saves ago) is done. */
    ZC_CHECK(order_stage(s, i, stream));
    ZC_CHECK(d->ops->copy(d, stage_at(s, i), from, pb, ZC_COPY_D2D, stream));
    ZC_CHECK(d->ops->event_record(d, s->ev_filled[i], stream));
    ZC_CHECK(d->ops->stream_wait_event(d, s->copy_stream, s->ev_filled[i]));
    void *dst = NULL;
    ZC_CHECK(s->home->ops->write_begin(s->home, slot, &dst));
    ZC_CHECK(d->ops->copy(d, dst, stage_at(s, i), pb, ZC_COPY_D2H, s->copy_stream));
    ZC_CHECK(d->ops->event_record(d, s->ev_free[i], s->copy_stream));
    s->pend[i] = true;
    s->pend_slot[i] = slot;
    s->pend_bytes[i] = pb;
    return poll_stages(s);
}

zc_status zc__act_copy_out(zc_act_store *s, int slot, const void *src, size_t bytes,
                           void *stream)
{
    zc_device *d = s->dev;
    const size_t pb = part_of(s, bytes);
    const char *from = (const char *)src + (size_t)s->mp_rank * pb;
    if (!s->home)
        return d->ops->copy(d, dslot(s, slot), from, pb, ZC_COPY_D2D, stream);
    ZC_CHECK(release_pending(s));
    if (s->p.spec.staging)
        return save_staged(s, slot, from, pb, stream);
    /* The host path: the copy is done when it returns. */
    void *dst = NULL;
    ZC_CHECK(s->home->ops->write_begin(s->home, slot, &dst));
    ZC_CHECK(d->ops->copy(d, dst, from, pb, ZC_COPY_D2H, stream));
    return s->home->ops->write_end(s->home, slot, pb);
}

zc_status zc__act_copy_in(zc_act_store *s, int slot, void *dst, size_t bytes, void *stream,
                          bool *hit)
{
    zc_device *d = s->dev;
    const size_t pb = part_of(s, bytes);
    char *to = (char *)dst + (size_t)s->mp_rank * pb;
    *hit = true;
    if (!s->home)
        return d->ops->copy(d, to, dslot(s, slot), pb, ZC_COPY_D2D, stream);
    ZC_CHECK(release_pending(s));
    if (s->p.spec.staging)
        ZC_CHECK(order_stages(s, stream));
    zc_act_home_io before, after;
    s->home->ops->io(s->home, &before);
    const void *src = NULL;
    zc_status rc = s->home->ops->read_wait(s->home, slot, pb, &src);
    s->home->ops->io(s->home, &after);
    *hit = after.waits == before.waits;
    if (rc == ZC_OK)
        rc = d->ops->copy(d, to, src, pb, ZC_COPY_H2D, stream);
    if (rc == ZC_OK && s->p.spec.staging) {
        /* The copy reads the home's memory after this returns. */
        rc = d->ops->event_record(d, s->ev_restored, stream);
        if (rc == ZC_OK && s->home->ops->rank_local_io(s->home)) {
            /* An NVMe buffer: its next read is the host's (io_uring), so
             * the buffer goes back once the copy has passed, at the next
             * call (release_pending). */
            s->release_slot = slot;
            return ZC_OK;
        }
        /* Pinned slots: only a later save's copy out, on the copy stream,
         * writes this memory again; that stream waits for the copy on the
         * device (the wait takes the event as recorded now), and the host
         * never does. */
        if (rc == ZC_OK)
            rc = d->ops->stream_wait_event(d, s->copy_stream, s->ev_restored);
    }
    s->home->ops->read_end(s->home, slot);
    return rc;
}

void zc__act_read_ahead(zc_act_store *s, int from)
{
    if (!s->home || !s->home->ops->rank_local_io(s->home) || from < 0)
        return;
    /* A read started ahead takes a buffer; the home keeps one for a read on
     * demand and says when none is left. */
    const int64_t ahead = s->p.spec.buffer_count - 1;
    for (int64_t k = from; k >= 0 && k > from - ahead; k--) {
        bool started = false;
        s->home->ops->read_start(s->home, (int)k, part_of(s, s->stack[k].bytes), &started);
        if (!started)
            break;
    }
}

void zc__act_transfer_quiesce(zc_act_store *s)
{
    if (!s->home || !s->p.spec.staging)
        return;
    zc_status rc = release_pending(s);
    for (int i = 0; i < ZC_ACT_STAGE_SLOTS; i++) {
        const zc_status r = land_stage(s, i);
        if (rc == ZC_OK)
            rc = r;
    }
    if (s->copy_stream) {
        const zc_status r = s->dev->ops->stream_sync(s->dev, s->copy_stream);
        if (rc == ZC_OK)
            rc = r;
    }
    /* Nobody is left to tell (a micro-step's end, destroy): a device error
     * comes back at the engine's next wait; an NVMe write's error stays kept
     * by the home for the next restore. */
    if (rc != ZC_OK) {
        ZC_LOGW("offload", "activation store: finishing the copies in flight: %s",
                zc_last_error());
        zc__error_clear();
    }
}

zc_status zc__act_sync_all(zc_act_store *s, void *stream)
{
    ZC_CHECK(s->dev->ops->stream_sync(s->dev, stream));
    return s->copy_stream ? s->dev->ops->stream_sync(s->dev, s->copy_stream) : ZC_OK;
}

zc_status zc__act_gather(zc_act_store *s, zc_status local, void *dst, size_t bytes,
                         void *stream)
{
    if (s->p.spec.parts <= 1)
        return local;
    zc_device *d = s->dev;
    zc_comm *mp = s->p.mp;
    /* Every member learns whether all of them have their part before any
     * gathers: one that failed skips the gather, and so must the others. */
    float flag = local == ZC_OK ? 0.0f : 1.0f;
    ZC_CHECK(d->ops->copy(d, s->status_dev, &flag, sizeof flag, ZC_COPY_H2D, stream));
    ZC_CHECK(zc__all_reduce(mp, s->status_dev, s->status_dev, 1, ZC_DTYPE_F32, ZC_RED_MAX,
                            stream));
    ZC_CHECK(d->ops->copy(d, &flag, s->status_dev, sizeof flag, ZC_COPY_D2H, stream));
    ZC_CHECK(d->ops->stream_sync(d, stream));
    if (local != ZC_OK)
        return local;
    if (flag != 0.0f)
        return ZC_ERR(ZC_ERR_IO, "zc_act_restore: a member of the model-parallel group (%d "
                      "ranks) could not restore its part of the checkpoint",
                      s->p.spec.parts);
    const size_t pb = part_of(s, bytes);
    char *mine = (char *)dst + (size_t)s->mp_rank * pb;
    return zc__all_gather(mp, mine, dst, pb / 4, ZC_DTYPE_I32, stream);
}
