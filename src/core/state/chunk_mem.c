/* Per-chunk buffers, sized from the stage policy's flags (one place, so every
 * free matches its allocation). See the table in engine.h. The optimizer
 * state (master, m, v) is not here: opt_state.c places it in a home. */
#include "core/engine.h"

static size_t param_elems(const zc_engine *e, const zc_chunk *c)
{
    return (size_t)(e->pol->full_params ? c->padded : c->shard);
}

/* Stages 0/1 keep the gradient in the parameter dtype at full size (what the
 * user writes and what is reduced); with K > 1 a full fp32 accumulator sums
 * the window. Stages 2/3 keep an fp32 shard. */
static size_t acc_elems(const zc_engine *e, const zc_chunk *c)
{
    if (e->pol->sharded_grads)
        return (size_t)c->shard;
    return e->gas > 1 ? (size_t)c->padded : 0;
}

/* MiCS at stage 1: the fp32 copy of the reduced slice that is all-reduced
 * across the replicas (plan/estimate.c counts it: mics_rgrad). */
static size_t rgrad_elems(const zc_engine *e, const zc_chunk *c)
{
    const bool stage1 = !e->pol->sharded_grads && !e->pol->full_optimizer;
    return stage1 && zc__grp_on(e, ZC_GRP_REPLICA) ? (size_t)c->shard : 0;
}

/* hpZ: the secondary partition of a chunk that is not kept gathered
 * (plan/estimate.c: hpz_sec). */
static size_t sec_bytes(const zc_engine *e, const zc_chunk *c)
{
    if (e->stage != 3 || !e->topo.hpz || c->persistent)
        return 0;
    return (size_t)(c->padded / e->topo.hpz) * e->pesz;
}

zc_status zc__chunk_alloc(zc_engine *e, zc_chunk *c)
{
    void *p = NULL;
    const zc_param *first = e->params[c->first];
    if (first->adopt_mem) {
        /* zc_block_adopt checked the size against this very padding rule
         * (world * ZC_CHUNK_ALIGN); check again, the layout is the truth. */
        if (param_elems(e, c) * e->pesz > first->adopt_bytes)
            return ZC_ERR(ZC_ERR_INTERNAL,
                          "chunk %d: adopted memory of %zu bytes, the chunk needs %zu",
                          (int)(c - e->chunks), first->adopt_bytes, param_elems(e, c) * e->pesz);
        c->param = first->adopt_mem;
        c->adopted = true;
    } else if (!zc__param_offloaded(e, c)) {
        /* An offloaded stage-3 shard lives in its home (param_state.c). */
        ZC_CHECK(
            zc__eng_alloc(e, ZC_MEM_PARAMS, param_elems(e, c) * e->pesz, "parameters", &p));
        c->param = p;
    }
    if (!e->pol->sharded_grads) {
        ZC_CHECK(zc__eng_alloc(e, ZC_MEM_GRADS, (size_t)c->padded * e->pesz, "gradients", &p));
        c->grad = p;
    }
    if (rgrad_elems(e, c)) {
        ZC_CHECK(zc__eng_alloc(e, ZC_MEM_GRADS, rgrad_elems(e, c) * sizeof(float),
                               "fp32 gradient shard (MiCS replicas)", &p));
        c->rgrad = p;
    }
    if (sec_bytes(e, c)) {
        ZC_CHECK(zc__eng_alloc(e, ZC_MEM_PARAMS, sec_bytes(e, c),
                               "secondary parameter partition (hpZ)", &p));
        c->sec = p;
        c->sec_valid = false;
    }
    /* A cpu-offloaded chunk's fp32 gradient shard lives in its home (pinned
     * host memory, allocated and zeroed there); every other one here. */
    c->acc = zc__opt_grad_home(e, c);
    c->acc_host = c->acc != NULL;
    c->acc_swap = zc__opt_grad_swapped(e, c);
    if (c->acc_host || c->acc_swap)
        return ZC_OK;
    ZC_CHECK(zc__eng_alloc(e, ZC_MEM_GRADS, acc_elems(e, c) * sizeof(float),
                           "fp32 gradient accumulator", &p));
    c->acc = p;
    return ZC_OK;
}

void zc__chunk_free(zc_engine *e, zc_chunk *c)
{
    void *p;
    p = c->adopted ? NULL : c->param; /* adopted memory is the caller's */
    zc__eng_free(e, ZC_MEM_PARAMS, &p, param_elems(e, c) * e->pesz);
    c->adopted = false;
    p = c->grad;
    zc__eng_free(e, ZC_MEM_GRADS, &p, (size_t)c->padded * e->pesz);
    p = c->rgrad;
    zc__eng_free(e, ZC_MEM_GRADS, &p, rgrad_elems(e, c) * sizeof(float));
    c->rgrad = NULL;
    zc__eng_free(e, ZC_MEM_PARAMS, &c->sec, sec_bytes(e, c));
    c->sec_valid = false;
    p = c->acc_host ? NULL : c->acc; /* a home-held shard is the home's to free */
    zc__eng_free(e, ZC_MEM_GRADS, &p, acc_elems(e, c) * sizeof(float));
    zc__bufpool_put(&e->pool_grad, &c->gbuf);
    c->param = c->grad = NULL;
    c->acc = NULL;
    c->acc_host = c->acc_swap = false;
}
