/* The engine's side of the parameter-shard seam (offload/param_home.h): which
 * stage-3 shards are offloaded, and the few operations the gather, the
 * optimizer and zc_param_load need from wherever a shard lives. This is the
 * only file that tells a device-resident shard (c->param) from an offloaded
 * one.
 *
 * Placement. With zero_optimization.offload_param.device "cpu" or "nvme"
 * (at stage 3; below it the block is ignored, as DeepSpeed does) every
 * chunk's shard goes to the offload home except the persistent chunks
 * (stage3_param_persistence_threshold), which stay gathered on the device for
 * the whole run, as DeepSpeed keeps them. With a placement from
 * zero_optimization.max_memory (plan/plan.h) each chunk's shard is where
 * the placement says: on the device, in pinned memory or on NVMe - a
 * three-way split, the pinned shards being the nvme home's cached chunks.
 *
 * Gathering an offloaded chunk: the shard comes out of its home (nvme: the
 * read started ahead by the prefetcher, or one started now), is copied H2D
 * into this rank's slice of the gather buffer, and the all-gather runs in
 * place. The copy runs on a copy stream of its own (h2d_stream, streams.c):
 * it waits for the engine's stream (the gather buffer's earlier users) and
 * the all-gather waits for it on the device, never on the host; the home's
 * buffer is given back only after the copy's event, at the next send or
 * home operation (h2d_retire). On the host path copies are synchronous and
 * the buffer goes back at once, as before.
 *
 * The optimizer's output. A host Adam (offload_optimizer cpu / nvme) writes
 * the new 16-bit shard straight into the home's memory (the shard itself, or
 * an nvme buffer that is then written to the file): no round trip through
 * the device. A device Adam writes into device memory that is copied D2H into
 * the home (on the host path that memory is host memory, so the same code
 * runs). Either way the kernel and its segmenting are the device home's, so
 * offloading parameters changes where bytes are, never their values. */
#include <stdio.h>
#include <string.h>

#include "core/engine.h"
#include "plan/plan.h"

bool zc__param_offloaded(const zc_engine *e, const zc_chunk *c)
{
    return e->phome && c->poff;
}

/* Sends the shard zc_param_load was filling home (nvme: submits its
 * write; an error of it is also kept by the home for the next flush). */
static zc_status load_settle(zc_engine *e)
{
    if (!e->pload_pending)
        return ZC_OK;
    e->pload_pending = false;
    e->pload_dst = NULL;
    return e->phome->ops->write_end(e->phome, e->pload_k);
}

/* Gives back the home buffer of the last shard copied H2D once the copy is
 * done (a GPU: the copy runs on h2d_stream while the host goes on). Called
 * before the home is asked for anything, always at the same points of the
 * call sequence and waiting rather than polling, so which buffers are free
 * never depends on timing: every rank makes the same prefetch decisions. */
static zc_status h2d_retire(zc_engine *e)
{
    if (!e->h2d_pending)
        return ZC_OK;
    e->h2d_pending = false;
    zc_status rc = e->dev->ops->event_sync(e->dev, e->ev_h2d_done);
    e->phome->ops->read_end(e->phome, e->h2d_k);
    return rc;
}

/* Which shards are offloaded and whether the home is the nvme one: a
 * placement from max_memory says it per chunk (pinned shards are then the
 * nvme home's cached chunks when any shard is on NVMe, else the cpu home's);
 * otherwise offload_param.device takes every non-persistent shard. */
static bool plan_homes(zc_engine *e, bool *nvme)
{
    const zc_offload_cfg *o = &e->cfg->zero.offload_param;
    bool any = false;
    int64_t cached = 0;
    *nvme = false;
    for (int k = 0; k < e->nchunks; k++) {
        zc_chunk *c = &e->chunks[k];
        uint8_t pl = e->param_place ? e->param_place[k]
                     : o->device == ZC_OFFLOAD_NONE ? ZC_PLACE_DEVICE
                     : o->device == ZC_OFFLOAD_CPU  ? ZC_PLACE_PINNED
                                                    : ZC_PLACE_NVME;
        if (c->persistent)
            pl = ZC_PLACE_DEVICE;
        if (!e->param_place && pl == ZC_PLACE_NVME && cached + c->shard <= o->max_in_cpu) {
            /* the nvme home's max_in_cpu rule (param_home_nvme.c) */
            cached += c->shard;
            pl = ZC_PLACE_PINNED;
            *nvme = true;
        }
        c->param_kind = pl;
        c->poff = pl != ZC_PLACE_DEVICE;
        any = any || c->poff;
        *nvme = *nvme || (c->poff && pl == ZC_PLACE_NVME);
    }
    if (!e->param_place)
        *nvme = o->device == ZC_OFFLOAD_NVME;
    return any;
}

zc_status zc__param_build(zc_engine *e)
{
    const zc_offload_cfg *o = &e->cfg->zero.offload_param;
    /* Below stage 3 there is no shard to offload: ignored, as DeepSpeed
     * does (the configuration loader warned that it has no effect). */
    if (e->stage != 3)
        return ZC_OK;
    bool nvme = false;
    if (!plan_homes(e, &nvme))
        return ZC_OK;
    zc_param_home_params hp = {
        .env = zc__eng_home_env(e),
        .pin_memory = o->pin_memory,
        .buffer_count = o->buffer_count,
        .buffer_size = o->buffer_size,
        .max_in_cpu = o->max_in_cpu,
    };
    char buf[16 * 512];
    const char *dirs[16];
    uint8_t *cache = NULL;
    const size_t n = (size_t)e->nchunks;
    zc_status rc = ZC_OK;
    if (!nvme) {
        ZC_CHECK(zc__param_home_cpu_create(&hp, &e->phome));
    } else {
        ZC_CHECK(zc__split_nvme_paths("offload_param", zc__place_nvme_path(e->cfg, true), buf,
                                      sizeof buf, dirs, &hp.ndirs));
        hp.dirs = dirs;
        if (e->param_place) {
            ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, n, "parameter cache flags",
                                    (void **)&cache));
            for (int k = 0; k < e->nchunks; k++)
                cache[k] = e->param_place[k] == ZC_PLACE_PINNED;
            hp.cache = cache;
        }
        rc = zc__param_home_nvme_create(&hp, &e->phome);
    }
    int64_t offloaded = 0;
    for (int k = 0; k < e->nchunks && rc == ZC_OK; k++) {
        zc_chunk *c = &e->chunks[k];
        if (!c->poff)
            continue;
        rc = e->phome->ops->add_chunk(e->phome, k, (size_t)c->shard);
        offloaded += c->padded;
    }
    if (rc == ZC_OK)
        rc = e->phome->ops->prepare(e->phome);
    if (cache)
        zc__host_free(&e->acct, ZC_MEM_OTHER, cache, n);
    ZC_CHECK(rc);
    ZC_LOGI("core", "parameters: %lld of %lld padded elements offloaded (%s); the other chunks' "
            "shards stay on the device", (long long)offloaded, (long long)e->padded_elems,
            e->phome->ops->name);
    return ZC_OK;
}

void zc__param_free(zc_engine *e)
{
    zc__param_home_destroy(e->phome);
    e->phome = NULL;
}

bool zc__param_rank_local_io(const zc_engine *e, int k)
{
    return zc__param_offloaded(e, &e->chunks[k]) && e->phome->ops->rank_local_io(e->phome, k);
}

void zc__param_read_ahead(zc_engine *e, int k, bool *started)
{
    *started = true;
    /* Loads are settled at the agreement points before any read; should one
     * still be pending, its write goes first (an error is kept by the home
     * for the next flush, which is agreed). A buffer still being copied
     * from (h2d_pending) counts as taken: it is taken after every send and
     * given back at fixed points, so the home's free buffers still follow
     * the call sequence alone. */
    (void)load_settle(e);
    if (zc__param_offloaded(e, &e->chunks[k]))
        e->phome->ops->read_start(e->phome, k, started);
}

void zc__param_read_cancel(zc_engine *e, int k)
{
    if (zc__param_offloaded(e, &e->chunks[k]))
        e->phome->ops->read_end(e->phome, k);
}

zc_status zc__param_send(zc_engine *e, int k, void *gather, const void **send)
{
    zc_chunk *c = &e->chunks[k];
    if (!zc__param_offloaded(e, c)) {
        *send = c->param;
        return ZC_OK;
    }
    zc_param_home *h = e->phome;
    zc_device *d = e->dev;
    ZC_CHECK(h2d_retire(e));
    ZC_CHECK(load_settle(e));
    const bool io = h->ops->rank_local_io(h, k);
    const void *src = NULL;
    zc_status rc = h->ops->read_wait(h, k, &src);
    char *slot = zc__elem(gather, (int64_t)e->srank * c->shard, e->pesz);
    const size_t bytes = (size_t)c->shard * e->pesz;
    /* The copy on the copy stream: after what the engine's stream queued
     * for the gather buffer, and the all-gather (on the engine's stream)
     * after the copy, both ordered on the device. */
    if (rc == ZC_OK)
        rc = d->ops->event_record(d, e->ev_h2d_in, e->stream);
    if (rc == ZC_OK)
        rc = d->ops->stream_wait_event(d, e->h2d_stream, e->ev_h2d_in);
    if (rc == ZC_OK)
        rc = zc__eng_copy(e, slot, src, bytes, ZC_COPY_H2D, e->h2d_stream, k);
    if (rc == ZC_OK)
        rc = d->ops->event_record(d, e->ev_h2d_done, e->h2d_stream);
    if (rc == ZC_OK)
        rc = d->ops->stream_wait_event(d, e->stream, e->ev_h2d_done);
    if (rc == ZC_OK && d->mem_kind == ZC_MEMKIND_DEVICE) {
        /* The home buffer is read by the copy until ev_h2d_done: given
         * back at the next send or home operation (h2d_retire). */
        e->h2d_pending = true;
        e->h2d_k = k;
    } else {
        /* Host path (copies are synchronous: done here), or a failed copy,
         * after which the device is unusable anyway: given back now. */
        h->ops->read_end(h, k);
    }
    if (rc != ZC_OK)
        return rc;
    if (io)
        c->reads_cur++;
    *send = slot;
    return ZC_OK;
}

zc_status zc__param_out_begin(zc_engine *e, int k, bool host_adam, char **pout)
{
    zc_chunk *c = &e->chunks[k];
    void *dst = NULL;
    ZC_CHECK(h2d_retire(e));
    ZC_CHECK(load_settle(e));
    ZC_CHECK(e->phome->ops->write_begin(e->phome, k, &dst));
    c->pout_home = dst;
    if (host_adam || e->dev->mem_kind == ZC_MEMKIND_HOST) {
        *pout = dst;
        return ZC_OK;
    }
    /* A device Adam writes device memory: the fp32 staging slot reserved at
     * build (one chunk of fp32 >= one shard of the parameter dtype) takes it,
     * copied D2H at out_end. */
    void *tmp = NULL;
    ZC_CHECK(zc__bufpool_get(&e->pool_stage, (size_t)c->shard * e->pesz, false, e->stream, &tmp));
    c->pout_dev = tmp;
    *pout = tmp;
    return ZC_OK;
}

zc_status zc__param_out_end(zc_engine *e, int k)
{
    zc_chunk *c = &e->chunks[k];
    zc_status rc = ZC_OK;
    if (c->pout_dev) {
        zc_device *d = e->dev;
        rc = zc__eng_copy(e, c->pout_home, c->pout_dev, (size_t)c->shard * e->pesz,
                          ZC_COPY_D2H, e->stream, k);
        if (rc == ZC_OK)
            rc = d->ops->stream_sync(d, e->stream);
        zc__bufpool_put(&e->pool_stage, &c->pout_dev);
    }
    c->pout_home = NULL;
    if (rc == ZC_OK)
        rc = e->phome->ops->write_end(e->phome, k);
    return rc;
}

zc_status zc__param_flush(zc_engine *e)
{
    if (!e->phome)
        return ZC_OK;
    zc_status rc = h2d_retire(e);
    zc_status lrc = load_settle(e);
    zc_status frc = e->phome->ops->flush(e->phome);
    return rc != ZC_OK ? rc : lrc != ZC_OK ? lrc : frc;
}

zc_status zc__param_load_range(zc_engine *e, int k, int64_t at, const float *values, size_t n)
{
    zc_param_home *h = e->phome;
    zc_chunk *c = &e->chunks[k];
    zc_device *hd = zc__device_host();
    ZC_CHECK(h2d_retire(e));
    if (!e->pload_pending || e->pload_k != k) {
        /* Loads moved on to chunk k: the previous chunk's write is submitted
         * (it proceeds while k is read), then k's shard as it is (nvme: read
         * now) becomes the write buffer: the homes hand the read's memory
         * back for writing. */
        ZC_CHECK(load_settle(e));
        const void *src = NULL;
        void *dst = NULL;
        zc_status rc = h->ops->read_wait(h, k, &src);
        if (rc == ZC_OK)
            rc = h->ops->write_begin(h, k, &dst);
        if (rc != ZC_OK) {
            h->ops->read_end(h, k);
            return rc;
        }
        if (dst != src)
            memcpy(dst, src, (size_t)c->shard * e->pesz);
        e->pload_pending = true;
        e->pload_k = k;
        e->pload_dst = dst;
    }
    /* The host's conversion, round to nearest even like the device's. */
    return hd->ops->cast(hd, zc__elem(e->pload_dst, at, e->pesz), e->pdt, values, ZC_DTYPE_F32,
                         n, NULL);
}

void zc__param_load_note(zc_engine *e)
{
    if (e->phome)
        e->pload_unagreed = true;
}

zc_status zc__param_loads_agree(zc_engine *e)
{
    if (!e->pload_unagreed)
        return ZC_OK;
    e->pload_unagreed = false;
    zc_status rc = load_settle(e);
    zc_status frc = e->phome->ops->flush(e->phome);
    if (rc == ZC_OK)
        rc = frc;
    /* Whether the home does rank-local I/O follows its layout, the same on
     * every rank: either every rank agrees here or none does. A cpu home
     * (and an nvme one whose shards are all cached) cannot fail. */
    bool io = false;
    for (int k = 0; k < e->nchunks && !io; k++)
        io = zc__param_rank_local_io(e, k);
    if (!io)
        return rc;
    return zc__eng_agree(e, rc, "zc_param_load: writing the loaded parameter shards home");
}

double zc__param_wait_begin(const zc_engine *e)
{
    if (!e->timers.on || !e->phome)
        return 0;
    zc_param_home_io io;
    zc__param_io(e, &io);
    return io.wait_s;
}

void zc__param_wait_end(zc_engine *e, double since)
{
    if (!e->timers.on || !e->phome)
        return;
    zc__timers_move(&e->timers, ZC_TIMER_GATHER, ZC_TIMER_IO_WAIT,
                    zc__param_wait_begin(e) - since);
}

void zc__param_io(const zc_engine *e, zc_param_home_io *out)
{
    memset(out, 0, sizeof *out);
    if (e->phome)
        e->phome->ops->io(e->phome, out);
}
