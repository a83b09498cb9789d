/* What the engine tells the offload engine's homes about itself
 * (offload/homes.h, zc_home_env): the optimizer's homes (opt_state.c) and
 * the stage-3 parameter homes (param_state.c) are made from the same
 * description of the engine, with the engine's ZC_FAULTS io items as their
 * fault hook. */
#include "core/engine.h"

/* ZC_FAULTS io items: each read or write of the swap files after build is
 * one event of the rank's count. */
bool zc__eng_io_fault(void *arg, int64_t *nth)
{
    zc_engine *e = arg;
    return e->state == ZC_ENG_BUILT && zc__faults_hit(&e->faults, ZC_FAULT_IO, nth);
}

bool zc__eng_load_fault(void *arg, int64_t *nth)
{
    zc_engine *e = arg;
    return e->state == ZC_ENG_BUILT && zc__faults_hit(&e->faults, ZC_FAULT_LOAD, nth);
}

zc_home_env zc__eng_home_env(zc_engine *e)
{
    return (zc_home_env){
        .acct = &e->acct,
        .rank = e->rank,
        .nchunks = e->nchunks,
        .param_bytes = e->pesz,
        .device_index = e->dev->mem_kind == ZC_MEMKIND_DEVICE ? e->dev->index : -1,
        .aio_block_size = e->cfg->aio.block_size,
        .aio_queue_depth = e->cfg->aio.queue_depth,
        .aio_intra_op = e->cfg->aio.intra_op_parallelism,
        .io_fault = zc__eng_io_fault,
        .io_fault_arg = e,
    };
}
