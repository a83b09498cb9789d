/* ZeRO stage 3: parameters are sharded too. A chunk's full parameters exist
 * only while gathered for use (gather.c); gradients follow stage 2 (transient
 * full buffer, reduce-scatter into an fp32 shard as soon as the chunk is
 * complete); the optimizer writes the updated 16-bit shard directly, so the
 * step does not all-gather: parameters are gathered again on the next
 * acquire (chunks still in use or persistent are refreshed in place). */
#include "zero3/zero3.h"
#include "plan/plan.h"
#include "zero2/zero2.h"

/* Stage 3 persistence, DeepSpeed's rule applied per chunk: a chunk whose
 * parameters all have numel <= param_persistence_threshold stays gathered,
 * while the persisted total stays <= model_persistence_threshold. The rule
 * is shared with the memory planner (plan/plan.h). */
int64_t zc__z3_largest_param(const zc_engine *e, const zc_chunk *c)
{
    int64_t big = 0;
    for (int i = c->first; i < c->first + c->count; i++)
        if (e->params[i]->numel > big)
            big = e->params[i]->numel;
    return big;
}

static void mark_persistent(zc_engine *e)
{
    int64_t total = 0;
    for (int k = 0; k < e->nchunks; k++) {
        zc_chunk *c = &e->chunks[k];
        const int64_t big = zc__z3_largest_param(e, c);
        c->persistent = zc__chunk_persists(big, c->padded, e->cfg->zero.param_persistence_threshold,
                                           e->cfg->zero.model_persistence_threshold, &total);
    }
    zc__z3_log_plan(e);
}

/* The gathered copy goes back to its pool slot (or is freed) before the
 * buffers every stage has. */
static void free_chunk(zc_engine *e, zc_chunk *c)
{
    zc__z3_gather_free(e, c);
    zc__chunk_free(e, c);
}

const zc_stage_policy zc__stage3_policy = {
    .stage = 3,
    .name = "ZeRO-3",
    .full_params = false,
    .full_optimizer = false,
    .sharded_grads = true,
    .alloc_chunk = zc__chunk_alloc,
    .free_chunk = free_chunk,
    .grad_buffer = zc__z2_grad_buffer,
    /* Gradients as stage 2 reduces them (src/zero2). */
    .reduce_launch = zc__z2_reduce_launch,
    .reduce_finish = zc__z2_reduce_finish,
    .publish = zc__z3_step_end,
    .acquire = zc__z3_acquire,
    .release = zc__z3_release,
    .built = mark_persistent,
    .teardown = zc__z3_free_all,
    .quiesce = zc__z3_quiesce,
    .eval_end = zc__z3_eval_end,
};
