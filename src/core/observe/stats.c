/* What the engine reports about itself: the loss scale, the memory and
 * communication stats of zc_engine_stats and the offload figures of
 * zc_engine_offload_stats (the last completed step's; step.c takes them). */
#include <stdatomic.h>

#include "core/engine.h"

ZC_API double zc_loss_scale(const zc_engine *e)
{
    if (!e || e->magic != ZC_ENGINE_MAGIC)
        return 1.0;
    return e->scaler.scale;
}

ZC_API zc_status zc_engine_stats(const zc_engine *e, zc_stats *out)
{
    ZC_CHECK(zc__eng_enter(e, "zc_engine_stats", false));
    ZC_CHECK(zc__out_check("zc_engine_stats", "zc_stats", out ? &out->size : NULL,
                               sizeof(zc_stats)));
    zc_stats s = {.size = sizeof s};
    s.rank = e->rank;
    s.world = e->world;
    s.stage = e->stage;
    for (int i = 0; i < e->nparams; i++)
        s.num_params += e->params[i]->numel;
    s.padded_params = e->padded_elems;
    s.num_chunks = e->nchunks;
    for (int k = 0; k < ZC_MEM__COUNT; k++) {
        s.bytes[k] = atomic_load(&e->acct.bytes[k]);
        s.peak_bytes[k] = atomic_load(&e->acct.peak[k]);
    }
    /* Internal kinds -> the public order of zc_mem_kind_stat. */
    static const zc_mem_kind to_internal[ZC_KIND__COUNT] = {
        [ZC_KIND_DEVICE] = ZC_MEMKIND_DEVICE, [ZC_KIND_PINNED] = ZC_MEMKIND_PINNED,
        [ZC_KIND_HOST] = ZC_MEMKIND_HOST, [ZC_KIND_NVME] = ZC_MEMKIND_NVME};
    for (int kind = 0; kind < ZC_KIND__COUNT; kind++)
        s.peak_bytes_by_kind[kind] = atomic_load(&e->acct.kind_peak[to_internal[kind]]);
    for (int kind = 0; kind < ZC_KIND__COUNT; kind++)
        for (int k = 0; k < ZC_MEM__COUNT; k++) {
            int64_t b = atomic_load(&e->acct.kind_bytes[to_internal[kind]][k]);
            s.bytes_by_kind_cat[kind][k] = b;
            s.bytes_by_kind[kind] += b;
        }
    for (int k = 0; k < ZC_COLL__COUNT; k++)
        s.comm_bytes_last_step[k] = e->comm_last[k];
    if (e->state != ZC_ENG_CREATED)
        for (int k = 0; k < e->nchunks; k++) {
            const zc_chunk *c = &e->chunks[k];
            s.opt_chunks_by_place[c->opt_kind]++;
            s.opt_elems_by_place[c->opt_kind] += e->pol->full_optimizer ? c->padded : c->shard;
            if (e->stage == 3) {
                s.param_chunks_by_place[c->param_kind]++;
                s.param_elems_by_place[c->param_kind] += c->shard;
            }
        }
    for (int b = 0; b < ZC_BUDGET_INDEX__COUNT; b++)
        s.budget[b] = e->budgets ? e->budget[b] : -1;
    for (int l = 0; l < ZC_LINK__COUNT; l++)
        s.comm_bytes_last_step_by_link[l] = e->link_last[l];
    s.ranks_per_node = e->topo.ranks_per_node;
    s.nodes = e->topo.nodes;
    s.shard_world = e->sworld;
    s.shard_rank = e->srank;
    s.replicas = e->sworld > 0 ? e->world / e->sworld : 1;
    s.hpz_partition_size = e->topo.hpz;
    s.gathers_last_step = e->gathers_last;
    s.max_live_elems_last_step = e->live_peak_last;
    s.trace_invalidations = e->invalidations;
    s.steps = e->steps;
    s.skipped_steps = e->skipped;
    *out = s;
    return ZC_OK;
}

ZC_API zc_status zc_engine_offload_stats(const zc_engine *e, zc_offload_stats *out)
{
    ZC_CHECK(zc__eng_enter(e, "zc_engine_offload_stats", false));
    ZC_CHECK(zc__out_check("zc_engine_offload_stats", "zc_offload_stats",
                               out ? &out->size : NULL, sizeof(zc_offload_stats)));
    *out = (zc_offload_stats){
        .size = sizeof *out,
        .param_nvme_read_bytes = e->pread_last,
        .param_nvme_write_bytes = e->pwrite_last,
        .optim_nvme_read_bytes = e->oread_last,
        .optim_nvme_write_bytes = e->owrite_last,
        .param_reads = e->preads_last,
        .prefetch_hits = e->off_last.hits,
        .prefetch_misses = e->off_last.misses,
        .io_wait_acquires = e->off_last.io_wait_acquires,
        .io_wait_s = e->off_last.io_wait_s,
        .max_live_elems = e->live_peak_last,
    };
    return ZC_OK;
}
