/* ZeRO stage 2: gradients are sharded too. Each micro-step a chunk's
 * gradient lives in a transient full buffer only until the chunk is complete;
 * it is then reduce-scattered, this rank's slice is added to its fp32
 * gradient shard and the buffer is freed. Parameters are published like
 * stage 1. */
#include "core/engine.h"

static zc_status reduce(zc_engine *e, zc_chunk *c, bool last_micro)
{
    (void)last_micro;
    return zc__grads_reduce_shard(e, c);
}

/* Shared with stage 1: all-gather each chunk's updated working parameters in
 * place (each rank wrote its own slice in the Adam pass). The chunks' gathers
 * are independent and issued back to back, so they form one communicator
 * group: NCCL launches them together instead of one kernel each (the local
 * backend has no groups and runs each at once). */
zc_status zc__publish_all_gather(zc_engine *e, bool updated)
{
    if (!updated)
        return ZC_OK;
    ZC_CHECK(zc__eng_group_start(e));
    zc_status rc = ZC_OK;
    for (int k = 0; k < e->nchunks && rc == ZC_OK; k++) {
        zc_chunk *c = &e->chunks[k];
        rc = zc__eng_all_gather(e, zc__elem(c->param, (int64_t)e->rank * c->shard, e->pesz),
                                c->param, (size_t)c->shard, e->pdt, true);
    }
    /* Closed even after a failure inside: the group is per thread in NCCL.
     * A failed group_end breaks the engine like a failed collective. */
    zc_status end = zc__eng_group_end(e);
    return rc != ZC_OK ? rc : end;
}

const zc_stage_policy zc__stage2_policy = {
    .stage = 2,
    .name = "ZeRO-2",
    .full_params = true,
    .full_optimizer = false,
    .sharded_grads = true,
    .alloc_chunk = zc__chunk_alloc,
    .free_chunk = zc__chunk_free,
    .reduce_chunk = reduce,
    .publish = zc__publish_all_gather,
};
