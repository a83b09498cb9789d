/* ZeRO++ hpZ (zero_hpz_partition_size H): a secondary partition of the
 * parameters inside groups of H ranks (core/common/groups.h, ZC_GRP_HPZ),
 * DeepSpeed's ds_secondary_tensor.
 *
 * A chunk's first gather after its parameters changed (a step, a load)
 * all-gathers from the primary shards over the shard group - the whole
 * world - and keeps this rank's 1/H of the gathered chunk as its secondary
 * partition; every later gather of the chunk until the parameters change
 * again (the backward's, the next micro-steps') all-gathers the secondary
 * partitions over the H ranks of the group, inside the node when H is at
 * most the ranks per node. Gathers only move bytes, so the parameters
 * gathered are the same bits either way: hpZ changes where the bytes
 * travel and costs padded / H working-precision elements per chunk that is
 * not kept gathered (persistent chunks are never gathered again). The
 * secondary partition is invalidated, as DeepSpeed's is at each step, by
 * the optimizer step (zc__z3_step_end), zc_param_load of the chunk
 * (core/loop/params.c) and a checkpoint load (src/ckpt/load.c). */
#include "zero3/zero3.h"

zc_status zc__z3_gather_into(zc_engine *e, int k, const void *send)
{
    zc_chunk *c = &e->chunks[k];
    const int H = e->topo.hpz;
    if (c->sec && c->sec_valid && zc__grp_on(e, ZC_GRP_HPZ)) {
        ZC_CHECK(zc__eng_grp_all_gather(e, ZC_GRP_HPZ, c->sec, c->gather,
                                        (size_t)(c->padded / H), e->pdt, true, e->stream));
        return ZC_OK;
    }
    const zc_gather_req req = {send, c->gather, (size_t)c->shard};
    ZC_CHECK(zc__eng_shard_gathers(e, &req, 1, e->pdt, true));
    if (c->sec) {
        /* This rank's part of the gathered chunk, in the group's order. */
        const int64_t n = c->padded / H, at = (int64_t)e->topo.g[ZC_GRP_HPZ].rank * n;
        const zc_copy_kind kind = e->dev->mem_kind == ZC_MEMKIND_DEVICE ? ZC_COPY_D2D
                                                                         : ZC_COPY_H2H;
        ZC_CHECK(e->dev->ops->copy(e->dev, c->sec, zc__elem(c->gather, at, e->pesz),
                                   (size_t)n * e->pesz, kind, e->stream));
        c->sec_valid = true;
    }
    return ZC_OK;
}

void zc__z3_hpz_invalidate(zc_engine *e)
{
    for (int k = 0; k < e->nchunks; k++)
        e->chunks[k].sec_valid = false;
}
