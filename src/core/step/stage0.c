/* Stage 0 (DDP): every rank keeps everything; gradients are all-reduced
 * chunk by chunk and every rank runs Adam over the full buffers, so no
 * parameter communication is needed after the step. */
#include "core/engine.h"

/* The window's work before the collective is stage 1's too (grads.c); then
 * the whole gradient is all-reduced. */
static zc_status launch(zc_engine *e, zc_chunk *c, bool last_micro, bool *launched)
{
    ZC_CHECK(zc__grads_full_window(e, c, last_micro, launched));
    if (!*launched)
        return ZC_OK;
    return zc__eng_all_reduce_on(e, c->grad, (size_t)c->padded, e->pdt, true, e->comm_stream);
}

/* c->grad is next read by the norm (zc_step waits for ev_reduced first) and
 * next written by the reset after it. */
static zc_status finish(zc_engine *e, zc_chunk *c)
{
    (void)c;
    return zc__reduction_done(e, -1);
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
    .grad_buffer = zc__grads_full_buffer,
    .reduce_launch = launch,
    .reduce_finish = finish,
    .publish = publish,
};
