/* ZeRO stage 1: the fp32 master and Adam moments are sharded. Gradients stay
 * full in the parameter dtype and are reduce-scattered once per window (at
 * the last micro-step, like DeepSpeed's stage 1); after the optimizer pass
 * each rank's updated 16-bit slice is all-gathered in place. */
#include "core/engine.h"

static zc_status reduce(zc_engine *e, zc_chunk *c, bool last_micro)
{
    return zc__grads_reduce_full(e, c, last_micro, true);
}

const zc_stage_policy zc__stage1_policy = {
    .stage = 1,
    .name = "ZeRO-1",
    .full_params = true,
    .full_optimizer = false,
    .sharded_grads = false,
    .alloc_chunk = zc__chunk_alloc,
    .free_chunk = zc__chunk_free,
    .reduce_chunk = reduce,
    .publish = zc__publish_all_gather,
};
