/* The working parameters from a newly written master, for the calls that
 * write the master wholesale between steps: zc_checkpoint_load (src/ckpt)
 * and zc_load_safetensors (src/load). They derive the working copy as the
 * step does (round to nearest even, the same kernels), so a load leaves the
 * state a step would have left. */
#include "core/engine.h"

/* An offloaded stage-3 shard (offload_param): the new 16-bit shard from its
 * master, into the shard's home (param_state.c): host memory when the
 * optimizer home is host or the device is the host, else a device staging
 * slot copied home at _end. */
static zc_status from_master_offloaded(zc_engine *e, int k, const void *master, bool host,
                                       size_t n)
{
    char *pout = NULL;
    ZC_CHECK(zc__param_out_begin(e, k, host, &pout));
    zc_status rc;
    if (host || e->dev->mem_kind == ZC_MEMKIND_HOST) {
        zc_device *hd = zc__device_host();
        rc = hd->ops->cast(hd, pout, e->pdt, master, e->sdt.master, n, NULL);
    } else {
        rc = zc__eng_convert(e, pout, e->pdt, master, e->sdt.master, n);
    }
    zc_status erc = zc__param_out_end(e, k);
    return rc != ZC_OK ? rc : erc;
}

zc_status zc__params_from_master(zc_engine *e, int k, int64_t r0, const void *master,
                                 bool host, size_t n)
{
    zc_chunk *c = &e->chunks[k];
    zc_device *d = e->dev;
    if (zc__param_offloaded(e, c))
        return from_master_offloaded(e, k, master, host, n);
    /* A host home's master is not device memory on a GPU: it goes through
     * the fp32 staging slot (one chunk, reserved at build). */
    void *pdst = zc__elem(c->param, e->pol->full_params ? r0 : 0, e->pesz);
    const void *msrc = master;
    const size_t mb = n * zc_dtype_size(e->sdt.master);
    void *stage = NULL;
    zc_status rc = ZC_OK;
    if (host && d->mem_kind == ZC_MEMKIND_DEVICE) {
        ZC_CHECK(zc__bufpool_get(&e->pool_stage, mb, false, e->stream, &stage));
        rc = d->ops->copy(d, stage, master, mb, ZC_COPY_H2D, e->stream);
        msrc = stage;
    }
    if (rc == ZC_OK)
        rc = zc__eng_convert(e, pdst, e->pdt, msrc, e->sdt.master, n);
    if (rc == ZC_OK)
        rc = d->ops->stream_sync(d, e->stream);
    zc__bufpool_put(&e->pool_stage, &stage);
    return rc;
}

zc_status zc__params_publish(zc_engine *e, const char *what)
{
    /* Stage 3 with offload_param: the shards written home are flushed, and
     * an offloaded shard of a chunk that stays gathered comes into its slot
     * of the gather buffer. Both are rank-local I/O, so their outcome is
     * agreed before the all-gathers (whether a parameter home exists is the
     * same on every rank). */
    zc_status rc = zc__param_flush(e);
    for (int k = 0; k < e->nchunks && rc == ZC_OK; k++) {
        zc_chunk *c = &e->chunks[k];
        if (e->pol->full_params || !c->gather || !zc__param_offloaded(e, c))
            continue;
        const void *send = NULL;
        rc = zc__param_send(e, k, c->gather, &send);
    }
    if (e->phome)
        rc = zc__eng_agree(e, rc, what);
    /* Over the shard group (MiCS's, perhaps in two steps), a chunk at a
     * time; hpZ's secondary partitions hold the old parameters. */
    for (int k = 0; k < e->nchunks && rc == ZC_OK; k++) {
        zc_chunk *c = &e->chunks[k];
        c->sec_valid = false;
        zc_gather_req req = {NULL, NULL, (size_t)c->shard};
        if (e->pol->full_params && !e->pol->full_optimizer)
            req = (zc_gather_req){zc__elem(c->param, (int64_t)e->srank * c->shard, e->pesz),
                                  c->param, (size_t)c->shard};
        else if (!e->pol->full_params && c->gather)
            req = (zc_gather_req){zc__param_offloaded(e, c)
                                      ? zc__elem(c->gather, (int64_t)e->srank * c->shard, e->pesz)
                                      : c->param,
                                  c->gather, (size_t)c->shard};
        if (req.recv)
            rc = zc__eng_shard_gathers(e, &req, 1, e->pdt, false);
    }
    if (rc == ZC_OK)
        rc = e->dev->ops->stream_sync(e->dev, e->stream);
    return rc;
}
