/* ZeRO stage 2: gradients are sharded too. Each micro-step a chunk's
 * gradient lives in a transient full buffer only until the chunk is complete;
 * it is then reduce-scattered, this rank's slice is added to its fp32
 * gradient shard and the buffer is freed. Parameters are published like
 * stage 1 (src/zero1). Stage 3 reduces its gradients the same way (its
 * policy uses this file's two functions, zero2.h). */
#include "zero1/zero1.h"
#include "zero2/zero2.h"

/* The chunk's transient gradient buffer, zeroed: this micro-step's zero
 * gradient. It comes from the pool reserved at build, so taking it between
 * two collectives never allocates: either it works, or every fitting slot is
 * held by other chunks - which follows the call sequence, the same on every
 * rank, so every rank gets the same error. */
static zc_status ensure_gbuf(zc_engine *e, zc_chunk *c)
{
    if (c->gbuf)
        return ZC_OK;
    const size_t bytes = (size_t)c->padded * e->pesz;
    zc_status rc = zc__bufpool_get(&e->pool_grad, bytes, false, e->stream, &c->gbuf);
    if (rc == ZC_ERR_NO_MEMORY && e->bucket_chunks > 0) {
        /* Chunks waiting in the reduction bucket hold slots: reducing them
         * now gives those back (every rank holds the same ones, so every
         * rank flushes here alike). */
        zc__error_clear();
        ZC_CHECK(zc__bucket_flush(e));
        rc = zc__bufpool_get(&e->pool_grad, bytes, false, e->stream, &c->gbuf);
    }
    if (rc == ZC_ERR_NO_MEMORY)
        zc__error_context("chunk %d's gradient buffer: the build reserved %d for stages 2-3, "
                          "room for the chunks of %d units (a unit: the parameters between two "
                          "zc_chunk_boundary calls, or one chunk without boundaries); make the "
                          "gradients of the chunks written so far ready first",
                          (int)(c - e->chunks), zc__bufpool_slots(&e->pool_grad),
                          ZC_GRAD_SETS * e->grad_set_units);
    if (rc != ZC_OK)
        return rc;
    /* The slot's previous chunk may still be being reduced on comm_stream
     * (overlap_comm): zero it only after that reduction read it. */
    rc = zc__order_engine_after_slot(e, zc__bufpool_slot(&e->pool_grad, c->gbuf));
    if (rc == ZC_OK)
        rc = e->dev->ops->memset0(e->dev, c->gbuf, bytes, e->stream);
    if (rc != ZC_OK)
        zc__bufpool_put(&e->pool_grad, &c->gbuf);
    return rc;
}

zc_status zc__z2_reduce_launch(zc_engine *e, zc_chunk *c, bool last_micro, bool *launched)
{
    (void)last_micro;
    *launched = false;
    /* The bucket took the buffer when the chunk became ready (a chunk with
     * no gradient written gets its zero one there), so this cannot take a
     * slot in the middle of the bucket's group. */
    ZC_CHECK(ensure_gbuf(e, c));
    /* With 16-bit accumulation the micro-step's 1 / K comes first, rounded,
     * as DeepSpeed's loss scaling puts it into the gradient it reduces. */
    ZC_CHECK(zc__grads_micro_scale(e, c->gbuf, (size_t)c->padded));
    ZC_CHECK(zc__grads_apply_prescale(e, c->gbuf, (size_t)c->padded));
    ZC_CHECK(zc__order_comm_after_engine(e));
    void *own = zc__elem(c->gbuf, e->srank * c->shard, e->pesz);
    ZC_CHECK(zc__eng_grp_reduce_scatter(e, ZC_GRP_SHARD, c->gbuf, own, (size_t)c->shard, e->pdt,
                                        true, e->comm_stream));
    *launched = true;
    return ZC_OK;
}

zc_status zc__z2_reduce_finish(zc_engine *e, zc_chunk *c)
{
    void *own = zc__elem(c->gbuf, e->srank * c->shard, e->pesz);
    /* On comm_stream too: c->acc is otherwise touched only by the norm, Adam
     * and the reset, which wait for ev_reduced, and the reset's clearing is
     * ordered before this by the hand-over above. Into the fp32 shard
     * wherever its home keeps it (device memory; pinned host memory under
     * cpu offload; the swap files under nvme with accumulation), rounded to
     * the working dtype with 16-bit accumulation. */
    ZC_CHECK(zc__opt_grad_accumulate(e, c, own, e->comm_stream));
    /* The slot goes back to the pool now; its next zero-fill waits for this
     * reduction's event (ensure_gbuf). */
    ZC_CHECK(zc__reduction_done(e, zc__bufpool_slot(&e->pool_grad, c->gbuf)));
    zc__bufpool_put(&e->pool_grad, &c->gbuf);
    return ZC_OK;
}

zc_status zc__z2_grad_buffer(zc_engine *e, zc_chunk *c, void **out)
{
    ZC_CHECK(ensure_gbuf(e, c));
    *out = c->gbuf;
    return ZC_OK;
}

const zc_stage_policy zc__stage2_policy = {
    .stage = 2,
    .name = "ZeRO-2",
    .full_params = true,
    .full_optimizer = false,
    .sharded_grads = true,
    .alloc_chunk = zc__chunk_alloc,
    .free_chunk = zc__chunk_free,
    .grad_buffer = zc__z2_grad_buffer,
    .reduce_launch = zc__z2_reduce_launch,
    .reduce_finish = zc__z2_reduce_finish,
    .publish = zc__z1_publish,
};
