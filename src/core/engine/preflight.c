/* zc_engine_build's pre-flight: the built engine's layout handed to the
 * planner (src/plan) before the engine allocates its buffers - with
 * zero_optimization.max_memory or stage "auto", through the placement of
 * place_build.c first - and the plan held to what the machine can give
 * (zc__plan_fits). */
#include "core/engine.h"
#include "plan/plan.h"

zc_status zc__preflight(zc_engine *e)
{
    const size_t n = (size_t)e->nchunks;
    int64_t *padded = NULL;
    bool *pers = NULL, *units = NULL;
    zc_status rc = ZC_OK;
    ZC_CHECK_GOTO(zc__host_alloc(&e->acct, ZC_MEM_OTHER, n * sizeof *padded, "memory plan",
                                 (void **)&padded), rc, out);
    ZC_CHECK_GOTO(zc__host_alloc(&e->acct, ZC_MEM_OTHER, n * sizeof *pers, "memory plan",
                                 (void **)&pers), rc, out);
    for (int k = 0; k < e->nchunks; k++) {
        padded[k] = e->chunks[k].padded;
        pers[k] = e->chunks[k].persistent;
    }
    ZC_CHECK_GOTO(zc__grad_units(e, &units), rc, out);
    const zc_offload_cfg *o = &e->cfg->zero.offload_optimizer;
    const zc_offload_cfg *p = &e->cfg->zero.offload_param;
    zc_est_in in = {
        .world = e->world,
        .stage = e->stage,
        .pesz = e->pesz,
        .sesz = {zc_dtype_size(e->sdt.master), zc_dtype_size(e->sdt.m), zc_dtype_size(e->sdt.v)},
        .gas = e->gas,
        .bucket = e->bucket,
        .offload = (int)o->device,
        .ratio = o->ratio,
        .staging = e->dev->mem_kind == ZC_MEMKIND_DEVICE,
        .dev_kind = e->dev->mem_kind,
        .buffer_count = o->buffer_count,
        .nvme_round = e->cfg->aio.block_size * zc__nvme_path_count(o->nvme_path),
        .max_live = e->max_live,
        .prefetch_elems = e->prefetch_elems,
        .nchunks = e->nchunks,
        .padded = padded,
        .persistent = pers,
        .unit_start = units,
        .view_chunks = e->f32_view_chunks,
        .poffload = (int)p->device,
        .pbuffer_count = p->buffer_count,
        .max_in_cpu = p->max_in_cpu,
        .pnvme_round = e->cfg->aio.block_size * zc__nvme_path_count(p->nvme_path),
        /* Hybrid sharding (core/common/groups.h): what chunk_mem.c and
         * groups.c allocate for it. */
        .shard_world = e->sworld,
        .replicas = e->sworld > 0 ? e->world / e->sworld : 1,
        .hpz = e->topo.hpz,
        .hier_j = e->topo.hier ? e->topo.g[ZC_GRP_INTER].size : 0,
        .act = e->act_spec, /* state/act_state.c builds exactly this */
    };
    if (e->stage_auto || e->budgets) {
        /* The placement from max_memory (and with stage "auto" the stage) is
         * chosen from this very plan input (place_build.c), and the checks
         * below then hold its plan to what the machine has too. */
        if (e->stage_auto)
            ZC_CHECK_GOTO(zc__place_stage(e, &in, pers), rc, out);
        else
            ZC_CHECK_GOTO(zc__place_build(e, &in), rc, out);
        in.opt_place = e->opt_place;
        in.param_place = e->param_place;
        in.nvme_round = e->cfg->aio.block_size *
                        zc__nvme_path_count(zc__place_nvme_path(e->cfg, false));
        in.pnvme_round = e->cfg->aio.block_size *
                         zc__nvme_path_count(zc__place_nvme_path(e->cfg, true));
    }
    zc_est est;
    /* Configuration errors (stage 0 with offload, a bad ratio) are left to
     * the code that reports them with the engine's own words (zc_engine_create
     * refuses them first, src/config/support.c). A plan that could not be
     * made for want of memory (its scratch table) or that passes 64-bit byte
     * counts fails the build: skipping the checks would hide both. */
    const zc_status erc = zc__estimate(&in, &est);
    if (erc == ZC_ERR_NO_MEMORY)
        rc = erc;
    if (erc != ZC_OK)
        goto out;
    /* Says what the build is about to allocate: with a large model the
     * zero-fills and the swap files take a while, and the line tells the
     * user what is being waited for. */
    ZC_LOGI("core", "build plan (rank %d, stage %d, %d chunks): device %.1f MiB, pinned %.1f "
            "MiB, host %.1f MiB, NVMe %.1f MiB (host bookkeeping not included)", e->rank,
            e->stage, e->nchunks, (double)est.kind_total[ZC_MEMKIND_DEVICE] / 1048576.0,
            (double)est.kind_total[ZC_MEMKIND_PINNED] / 1048576.0,
            (double)est.kind_total[ZC_MEMKIND_HOST] / 1048576.0,
            (double)est.kind_total[ZC_MEMKIND_NVME] / 1048576.0);
    const zc_plan_who who = {.rank = e->rank, .stage = e->stage, .nchunks = e->nchunks};
    rc = zc__plan_fits(&who, e->cfg, e->dev, &in, &est);
out:
    zc__host_free(&e->acct, ZC_MEM_OTHER, padded, n * sizeof *padded);
    zc__host_free(&e->acct, ZC_MEM_OTHER, pers, n * sizeof *pers);
    zc__host_free(&e->acct, ZC_MEM_OTHER, units, n * sizeof *units);
    return rc;
}
