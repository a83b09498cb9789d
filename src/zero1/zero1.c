/* ZeRO stage 1: the fp32 master and Adam moments are sharded. Gradients stay
 * full in the parameter dtype and are reduce-scattered once per window (at
 * the last micro-step, like DeepSpeed's stage 1); after the optimizer pass
 * each rank's updated 16-bit slice is all-gathered in place (the publish,
 * which stage 2 shares). Both over the shard group (core/common/groups.h):
 * with MiCS the slice is then all-reduced across the replicas in fp32 (the
 * bucket does it, grad_bucket.c), from c->rgrad, which the norm and Adam
 * read instead of the slice. */
#include "zero1/zero1.h"

/* The window's work before the collective is stage 0's too (grads.c); then
 * this rank's slice of the full gradient is reduced. */
static zc_status launch(zc_engine *e, zc_chunk *c, bool last_micro, bool *launched)
{
    ZC_CHECK(zc__grads_full_window(e, c, last_micro, launched));
    if (!*launched)
        return ZC_OK;
    void *own = zc__elem(c->grad, e->srank * c->shard, e->pesz);
    return zc__eng_grp_reduce_scatter(e, ZC_GRP_SHARD, c->grad, own, (size_t)c->shard, e->pdt,
                                      true, e->comm_stream);
}

static zc_status finish(zc_engine *e, zc_chunk *c)
{
    void *own = zc__elem(c->grad, e->srank * c->shard, e->pesz);
    /* MiCS: the slice in fp32, for the all-reduce across the replicas that
     * the bucket issues next (on comm_stream, after the reduce-scatter). */
    if (c->rgrad)
        ZC_CHECK(e->dev->ops->cast(e->dev, c->rgrad, ZC_DTYPE_F32, own, e->pdt,
                                   (size_t)c->shard, e->comm_stream));
    /* c->grad is next read by the norm (zc_step waits for ev_reduced first)
     * and next written by the reset after it. */
    ZC_CHECK(zc__reduction_done(e, -1));
    /* Under cpu offload on a device: this rank's reduced slice goes D2H now,
     * on the copy stream, overlapping the rest of backward; Adam waits for
     * this chunk's copy alone (opt_copy.c). */
    if (zc__opt_copy_on(e, c))
        ZC_CHECK(zc__opt_copy_grad_d2h(e, c, own, e->comm_stream));
    return ZC_OK;
}

/* Each rank wrote its own slice in the Adam pass. The chunks' gathers are
 * independent and issued back to back, so they form one communicator group:
 * NCCL launches them together instead of one kernel each, the local backend
 * runs them in one rendezvous, MPI posts their messages together. */
zc_status zc__z1_publish(zc_engine *e, bool updated)
{
    if (!updated)
        return ZC_OK;
    /* Over the shard group (two steps with MiCS's hierarchical gather), a
     * communicator group of up to PUBLISH_BATCH chunks at a time. */
    enum { PUBLISH_BATCH = 64 };
    zc_gather_req req[PUBLISH_BATCH];
    for (int k0 = 0; k0 < e->nchunks; k0 += PUBLISH_BATCH) {
        int n = 0;
        for (int k = k0; k < e->nchunks && n < PUBLISH_BATCH; k++, n++) {
            zc_chunk *c = &e->chunks[k];
            req[n] = (zc_gather_req){zc__elem(c->param, (int64_t)e->srank * c->shard, e->pesz),
                                     c->param, (size_t)c->shard};
        }
        ZC_CHECK(zc__eng_shard_gathers(e, req, n, e->pdt, true));
    }
    return ZC_OK;
}

const zc_stage_policy zc__stage1_policy = {
    .stage = 1,
    .name = "ZeRO-1",
    .full_params = true,
    .full_optimizer = false,
    .sharded_grads = false,
    .alloc_chunk = zc__chunk_alloc,
    .free_chunk = zc__chunk_free,
    .grad_buffer = zc__grads_full_buffer,
    .reduce_launch = launch,
    .reduce_finish = finish,
    .publish = zc__z1_publish,
};
