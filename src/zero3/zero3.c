/* ZeRO stage 3: parameters are sharded too. A chunk's full parameters exist
 * only while gathered for use (gather.c); gradients follow stage 2 (transient
 * full buffer, reduce-scatter into an fp32 shard as soon as the chunk is
 * complete); the optimizer writes the updated 16-bit shard directly, so the
 * step does not all-gather: parameters are gathered again on the next
 * acquire (chunks still in use or persistent are refreshed in place). */
#include "core/engine.h"

static zc_status reduce(zc_engine *e, zc_chunk *c, bool last_micro)
{
    (void)last_micro;
    return zc__grads_reduce_shard(e, c);
}

const zc_stage_policy zc__stage3_policy = {
    .stage = 3,
    .name = "ZeRO-3",
    .full_params = false,
    .full_optimizer = false,
    .sharded_grads = true,
    .alloc_chunk = zc__chunk_alloc,
    .free_chunk = zc__chunk_free,
    .reduce_chunk = reduce,
    .publish = zc__z3_step_end,
    .acquire = zc__z3_acquire,
    .release = zc__z3_release,
};
