/* Stage 0 (DDP): every rank keeps everything; gradients are all-reduced
 * chunk by chunk and every rank runs Adam over the full buffers, so no
 * parameter communication is needed after the step. */
#include "core/engine.h"

static zc_status reduce(zc_engine *e, zc_chunk *c, bool last_micro)
{
    return zc__grads_reduce_full(e, c, last_micro, false);
}

static zc_status publish(zc_engine *e, bool updated)
{
    (void)e;
    (void)updated;
    return ZC_OK;
}

const zc_stage_policy zc__stage0_policy = {
    .stage = 0,
    .name = "DDP",
    .full_params = true,
    .full_optimizer = true,
    .sharded_grads = false,
    .alloc_chunk = zc__chunk_alloc,
    .free_chunk = zc__chunk_free,
    .reduce_chunk = reduce,
    .publish = publish,
};
