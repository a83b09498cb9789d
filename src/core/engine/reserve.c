/* What zc_engine_build reserves so that no work between two collectives has
 * to allocate (see bufpool.h for why):
 *
 *   pool_grad    stages 2/3: the transient full gradient buffers, in the
 *                parameter dtype (below);
 *   pool_gather  stage 3: one slot per persistent chunk (gathered once, kept),
 *                and for every other chunk size s (padded elements) the slots
 *                of a working set: min(chunks of size s, floor(ws / s)), at
 *                least one, with ws = prefetch_bucket_size + 2 x the largest
 *                chunk (the chunks a pass uses at once plus the prefetch
 *                window), at most stage3_max_live_parameters. Sizing by the
 *                live bound alone would reserve the whole model with the
 *                default bound of 1e9 elements. A prefetch that finds no free
 *                slot is not issued (the pools are in the same state on every
 *                rank, so every rank skips it together); a demand gather that
 *                finds none allocates its buffer, agreed across ranks
 *                (zero3/gather.c);
 *   pool_stage   one fp32 slot of the largest chunk: the staging of
 *                zc_param_load and the receive buffer of
 *                zc_param_gather_master (and of their block forms);
 *   the stage-3 trace, 4 activations per parameter and micro-step (forward,
 *                backward, and room for a recomputing forward), at least
 *                ZC_TRACE_MIN and at most ZC_TRACE_MAX entries;
 *   (the status records of zc__eng_agree are allocated first of all, by
 *   zc_engine_build, which agrees its own outcome with them).
 *
 * The gradient pool. A chunk holds its gradient buffer from its first
 * zc_grad_buffer to its last zc_grad_ready, and a block call takes the
 * buffers of every chunk of its block at once - a transformer block of 64 M
 * parameters lies in several chunks of at most 2^24 elements. So the pool is
 * sized by units, not chunks: a unit is what the loop treats as one piece,
 * the parameters between two zc_chunk_boundary calls (zc_block_span's block;
 * with no boundary at all, each chunk). It holds ZC_GRAD_SETS (two) sets,
 * each with room for the buffers of any k units together, never more slots
 * than chunks: one set's gradients are written while the other's are
 * reduced, as DeepSpeed double-buffers its reduce buckets (two of
 * reduce_bucket_size elements with overlap_comm). k is as many units as fit
 * in the reduction bucket (e->bucket: reduce_bucket_size, at most 2^24
 * elements unless zc_engine_options.bucket_elems says more), at least one,
 * at stage 2; one at stage 3, whose point is to bound what a rank holds at
 * once (zc__grad_set_elems).
 * Why not one unit per set: the bucket can hold no more than the pool, and
 * each bucket is a rendezvous of the ranks; with a pool of two units a
 * transformer's backward stops for one every second block, and on cores
 * other jobs share each stop costs the waiting rank a scheduler slice
 * (grad_bucket.c). With k units a model whose gradients fit in the bucket
 * reduces once per micro-step, at its end. Memory: about two buckets of full
 * gradients in the working dtype, and never less than two of the largest
 * unit (two of the largest chunk without boundaries); the whole model's
 * gradients when they fit in a bucket. The planner counts it with the same
 * rule (zc__grad_pool_plan); a smaller reduce_bucket_size trades meetings
 * for memory, as in DeepSpeed. Reserving for the unit rather than handing a block's
 * gradients over chunk by chunk keeps zc_block_grad_buffers one call that
 * returns every pointer, and derives from the layout alone, which build
 * agrees across ranks, so every rank reserves the same slots. */
#include "core/engine.h"
#include "plan/plan.h"

static int64_t largest_chunk(const zc_engine *e)
{
    int64_t m = 0;
    for (int k = 0; k < e->nchunks; k++)
        if (e->chunks[k].padded > m)
            m = e->chunks[k].padded;
    return m;
}

/* Bytes of n elements of size esz; padded totals are bounded by
 * zc_param_add (INT64_MAX / 4 elements), so this cannot overflow, but the
 * check keeps that coupling explicit. */
static zc_status elem_bytes(int64_t n, size_t esz, size_t *out)
{
    if (n < 0 || __builtin_mul_overflow((size_t)n, esz, out))
        return ZC_ERR(ZC_ERR_NO_MEMORY, "a buffer of %lld elements of %zu bytes is too large",
                      (long long)n, esz);
    return ZC_OK;
}

static zc_status grad_emit(void *arg, int64_t elems, int count)
{
    zc_engine *e = arg;
    size_t bytes = 0;
    ZC_CHECK(elem_bytes(elems, e->pesz, &bytes));
    return zc__bufpool_plan(&e->pool_grad, bytes, count);
}

/* The working-set rule lives in estimate.c (zc__gather_plan) so that the
 * planner and this reserve cannot drift apart. */
static zc_status gather_emit(void *arg, int64_t elems, int count)
{
    zc_engine *e = arg;
    size_t bytes = 0;
    ZC_CHECK(elem_bytes(elems, e->pesz, &bytes));
    return zc__bufpool_plan(&e->pool_gather, bytes, count);
}

zc_status zc__grad_units(zc_engine *e, bool **out)
{
    *out = NULL;
    bool any = false;
    for (int i = 0; i < e->nparams && !any; i++)
        any = e->params[i]->chunk_start;
    if (!any)
        return ZC_OK;
    bool *unit = NULL;
    ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, (size_t)e->nchunks * sizeof *unit,
                            "gradient pool units", (void **)&unit));
    /* A boundary always starts a chunk (layout.c), so units are whole chunks. */
    for (int k = 0; k < e->nchunks; k++)
        unit[k] = e->params[e->chunks[k].first]->chunk_start;
    *out = unit;
    return ZC_OK;
}

/* Stages 2/3: the gradient pool by units (above). */
static zc_status plan_grad(zc_engine *e)
{
    const size_t n = (size_t)e->nchunks;
    bool *unit = NULL;
    int64_t *padded = NULL;
    zc_status rc = ZC_OK;
    ZC_CHECK_GOTO(zc__grad_units(e, &unit), rc, out);
    ZC_CHECK_GOTO(zc__host_alloc(&e->acct, ZC_MEM_OTHER, n * sizeof *padded,
                                 "gradient pool plan", (void **)&padded), rc, out);
    for (int k = 0; k < e->nchunks; k++)
        padded[k] = e->chunks[k].padded;
    rc = zc__grad_pool_plan(padded, unit, e->nchunks, zc__grad_set_elems(e->stage, e->bucket),
                            grad_emit, e, &e->grad_set_units);
out:
    zc__host_free(&e->acct, ZC_MEM_OTHER, padded, n * sizeof *padded);
    zc__host_free(&e->acct, ZC_MEM_OTHER, unit, n * sizeof *unit);
    return rc;
}

static zc_status plan_gather(zc_engine *e)
{
    int64_t *padded = NULL;
    bool *pers = NULL;
    zc_status rc = ZC_OK;
    const size_t n = (size_t)e->nchunks;
    ZC_CHECK_GOTO(zc__host_alloc(&e->acct, ZC_MEM_OTHER, n * sizeof *padded, "gather plan",
                                 (void **)&padded), rc, out);
    ZC_CHECK_GOTO(zc__host_alloc(&e->acct, ZC_MEM_OTHER, n * sizeof *pers, "gather plan",
                                 (void **)&pers), rc, out);
    for (int k = 0; k < e->nchunks; k++) {
        padded[k] = e->chunks[k].padded;
        pers[k] = e->chunks[k].persistent;
    }
    rc = zc__gather_plan(padded, pers, e->nchunks, e->max_live, e->prefetch_elems, gather_emit, e);
out:
    zc__host_free(&e->acct, ZC_MEM_OTHER, padded, n * sizeof *padded);
    zc__host_free(&e->acct, ZC_MEM_OTHER, pers, n * sizeof *pers);
    return rc;
}

/* The acquire traces, one per kind of pass, of the same capacity. */
static zc_status reserve_trace(zc_engine *e)
{
    int64_t cap = 0;
    if (__builtin_mul_overflow((int64_t)e->nparams, (int64_t)4, &cap) ||
        __builtin_mul_overflow(cap, e->gas, &cap) || cap > ZC_TRACE_MAX)
        cap = ZC_TRACE_MAX;
    if (cap < ZC_TRACE_MIN)
        cap = ZC_TRACE_MIN;
    for (int i = 0; i < 2; i++) {
        void *mem = NULL;
        ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, (size_t)cap * sizeof(int),
                                "stage-3 trace", &mem));
        e->traces[i].order = mem;
        e->traces[i].cap = cap;
    }
    return ZC_OK;
}

zc_status zc__reserve_build(zc_engine *e)
{
    const int64_t big = largest_chunk(e);
    size_t bytes = 0;
    if (e->pol->sharded_grads)
        ZC_CHECK(plan_grad(e));
    if (e->stage == 3) {
        ZC_CHECK(plan_gather(e));
        ZC_CHECK(reserve_trace(e));
    }
    ZC_CHECK(elem_bytes(big, sizeof(float), &bytes));
    ZC_CHECK(zc__bufpool_plan(&e->pool_stage, bytes, 1));
    ZC_CHECK(zc__bufpool_reserve(&e->pool_grad));
    ZC_CHECK(zc__streams_grad_slots(e, zc__bufpool_slots(&e->pool_grad)));
    ZC_CHECK(zc__bufpool_reserve(&e->pool_gather));
    ZC_CHECK(zc__bufpool_reserve(&e->pool_stage));
    return ZC_OK;
}

void zc__reserve_free(zc_engine *e)
{
    zc__bufpool_destroy(&e->pool_grad);
    zc__bufpool_destroy(&e->pool_gather);
    zc__bufpool_destroy(&e->pool_stage);
    zc__agree_free(e);
    for (int i = 0; i < 2; i++) {
        zc__host_free(&e->acct, ZC_MEM_OTHER, e->traces[i].order,
                      (size_t)e->traces[i].cap * sizeof(int));
        e->traces[i].order = NULL;
        e->traces[i].cap = 0;
    }
}
