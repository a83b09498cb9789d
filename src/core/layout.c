/* Chunk layout and zc_engine_build.
 *
 * Parameters are packed in registration order into chunks of about
 * `e->bucket` elements: a parameter never straddles two chunks, one larger
 * than the bucket gets a chunk of its own, and zc_chunk_boundary() starts a
 * new chunk. Each chunk is padded to a multiple of world * ZC_CHUNK_ALIGN
 * elements (the padding is zero in every buffer and stays zero: its gradient
 * is zero, so Adam leaves it at 0), and rank r owns the shard
 * [r * S / W, (r + 1) * S / W). A chunk may mix parameter groups; Adam is run
 * per segment (a run of one group inside one shard), see zc_seg. */
#include <string.h>

#include "core/engine.h"
#include "core/estimate.h"

_Static_assert(ZC_CHUNK_ALIGN == ZC_EST_CHUNK_ALIGN, "estimate.h repeats the chunk alignment");

/* The rule is shared with the memory planner (estimate.h). */
static bool starts_chunk(const zc_engine *e, int i, int64_t cur_used)
{
    const zc_param *p = e->params[i];
    /* An adopted block is exactly one chunk, whatever the bucket (the
     * memory planner, which knows no adoption, sees the bucket rule). */
    if (i > 0 && !p->chunk_start) {
        int a = zc__adopt_starts_chunk(e, i);
        if (a >= 0)
            return a == 1;
    }
    return zc__chunk_starts(i, p->chunk_start, cur_used, p->numel, e->bucket);
}

/* Rank r's Adam segments of chunk c (chunk-relative, real elements only). */
static int make_segments(const zc_engine *e, const zc_chunk *c, int r, zc_seg *out)
{
    int64_t lo = (int64_t)r * c->shard, hi = lo + c->shard;
    int n = 0;
    for (int i = c->first; i < c->first + c->count; i++) {
        const zc_param *p = e->params[i];
        int64_t a = p->offset > lo ? p->offset : lo;
        int64_t b = p->offset + p->numel < hi ? p->offset + p->numel : hi;
        if (a >= b)
            continue;
        if (n > 0 && out[n - 1].group == p->group && out[n - 1].start + out[n - 1].n == a) {
            out[n - 1].n += b - a;
        } else {
            out[n++] = (zc_seg){a, b - a, p->group};
        }
    }
    return n;
}

zc_status zc__layout_build(zc_engine *e)
{
    int n = 0;
    int64_t cur = 0;
    for (int i = 0; i < e->nparams; i++) {
        if (starts_chunk(e, i, cur)) {
            n++;
            cur = 0;
        }
        cur += e->params[i]->numel;
    }
    void *mem = NULL;
    ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, (size_t)n * sizeof(zc_chunk), "chunk table",
                            &mem));
    e->chunks = mem;
    e->nchunks = n;

    int ci = -1;
    cur = 0;
    for (int i = 0; i < e->nparams; i++) {
        zc_param *p = e->params[i];
        if (starts_chunk(e, i, cur)) {
            ci++;
            e->chunks[ci].first = i;
            cur = 0;
        }
        zc_chunk *c = &e->chunks[ci];
        p->chunk = ci;
        p->offset = cur;
        c->count++;
        cur += p->numel;
        c->used = cur;
    }
    e->num_elems = e->padded_elems = 0;
    for (int k = 0; k < n; k++) {
        zc_chunk *c = &e->chunks[k];
        c->padded = zc__chunk_padded(c->used, e->world);
        c->shard = c->padded / e->world;
        e->num_elems += c->used;
        e->padded_elems += c->padded;

        /* A shard boundary splits at most one parameter per rank, so
         * count + world segments always suffice. */
        int cap = c->count + e->world;
        c->segs_bytes = (size_t)cap * sizeof(zc_seg);
        c->seg_begin_bytes = (size_t)(e->world + 1) * sizeof(int);
        ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, c->segs_bytes, "adam segments", &mem));
        c->segs = mem;
        ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, c->seg_begin_bytes, "adam segments",
                                &mem));
        c->seg_begin = mem;
        int ns = 0;
        for (int r = 0; r < e->world; r++) {
            c->seg_begin[r] = ns;
            ns += make_segments(e, c, r, c->segs + ns);
        }
        c->seg_begin[e->world] = ns;
    }
    return ZC_OK;
}

void zc__layout_free(zc_engine *e)
{
    if (!e->chunks)
        return;
    for (int k = 0; k < e->nchunks; k++) {
        zc_chunk *c = &e->chunks[k];
        if (e->pol && e->pol->free_chunk)
            e->pol->free_chunk(e, c);
        zc__host_free(&e->acct, ZC_MEM_OTHER, c->segs, c->segs_bytes);
        zc__host_free(&e->acct, ZC_MEM_OTHER, c->seg_begin, c->seg_begin_bytes);
    }
    zc__host_free(&e->acct, ZC_MEM_OTHER, e->chunks, (size_t)e->nchunks * sizeof(zc_chunk));
    e->chunks = NULL;
    e->nchunks = 0;
}

/* Buffers for the fp64 norm partials: every stage sums the same
 * (chunk, rank) partials in the same order (step.c). Sized for the layout
 * check too (3 values per rank). */
static size_t partial_count(const zc_engine *e)
{
    return (size_t)(e->nchunks > 3 ? e->nchunks : 3);
}

/* Doubles of sumsq_async scratch for the largest shard the norm reads (every
 * shard of a chunk has the same length): one scratch serves every partial,
 * reused in the engine's stream order. */
static size_t scratch_elems(const zc_engine *e)
{
    size_t m = 1;
    for (int k = 0; k < e->nchunks; k++) {
        size_t b = zc__sumsq_scratch_elems((size_t)e->chunks[k].shard);
        if (b > m)
            m = b;
    }
    return m;
}

static zc_status alloc_partials(zc_engine *e)
{
    size_t n = partial_count(e);
    void *mem = NULL;
    e->norm_scratch_elems = scratch_elems(e);
    ZC_CHECK(zc__eng_alloc(e, ZC_MEM_OTHER, e->norm_scratch_elems * sizeof(double),
                           "norm scratch", &mem));
    e->norm_scratch = mem;
    ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, n * (size_t)e->world * sizeof(double),
                            "norm partials", &mem));
    e->partials = mem;
    ZC_CHECK(zc__eng_alloc(e, ZC_MEM_OTHER, n * sizeof(double), "norm partials (send)", &mem));
    e->part_send = mem;
    ZC_CHECK(zc__eng_alloc(e, ZC_MEM_OTHER, n * (size_t)e->world * sizeof(double),
                           "norm partials (recv)", &mem));
    e->part_recv = mem;
    return ZC_OK;
}

void zc__partials_free(zc_engine *e)
{
    size_t n = partial_count(e);
    zc__host_free(&e->acct, ZC_MEM_OTHER, e->partials, n * (size_t)e->world * sizeof(double));
    e->partials = NULL;
    void *p = e->part_send;
    zc__eng_free(e, ZC_MEM_OTHER, &p, n * sizeof(double));
    p = e->part_recv;
    zc__eng_free(e, ZC_MEM_OTHER, &p, n * (size_t)e->world * sizeof(double));
    e->part_send = e->part_recv = NULL;
    p = e->norm_scratch;
    zc__eng_free(e, ZC_MEM_OTHER, &p, e->norm_scratch_elems * sizeof(double));
    e->norm_scratch = NULL;
    e->norm_scratch_elems = 0;
}

/* Hidden size H of the "auto" rules (estimate.h; 0 without a 2-D
 * parameter). */
static int64_t model_hidden_size(const zc_engine *e)
{
    int64_t best_numel = 0, h = 0;
    for (int i = 0; i < e->nparams; i++)
        zc__hidden_step(e->params[i]->shape, e->params[i]->ndim, e->params[i]->numel,
                        &best_numel, &h);
    return h;
}

/* Sizes that depend on the registered model: "auto" buckets and thresholds
 * resolve from H now, then the chunk size, the live bound and the prefetch
 * window are read from the resolved configuration. */
static zc_status size_from_model(zc_engine *e)
{
    ZC_CHECK(zc__config_resolve_model_auto(e->cfg, model_hidden_size(e)));
    e->bucket = zc__bucket_elems(e->bucket_option, e->cfg->zero.reduce_bucket_size,
                                 e->chunk_cap, e->chunk_cap_forced);
    e->max_live = e->cfg->zero.max_live_parameters > 0 ? e->cfg->zero.max_live_parameters
                                                       : INT64_MAX;
    e->prefetch_elems = e->cfg->zero.prefetch_bucket_size > 0 ? e->cfg->zero.prefetch_bucket_size
                                                              : 0;
    e->reuse_elems = e->cfg->zero.max_reuse_distance > 0 ? e->cfg->zero.max_reuse_distance : 0;
    return ZC_OK;
}

/* The rank-local part of zc_engine_build, after the layout is agreed. */
static zc_status build_local(zc_engine *e)
{
    ZC_CHECK(zc__preflight(e));
    ZC_CHECK(zc__opt_build(e));
    ZC_CHECK(zc__param_build(e));
    for (int k = 0; k < e->nchunks; k++)
        ZC_CHECK(e->pol->alloc_chunk(e, &e->chunks[k]));
    ZC_CHECK(zc__reserve_build(e));
    ZC_CHECK(zc__view_build(e));
    ZC_CHECK(zc__debug_build(e));
    e->state = ZC_ENG_BUILT;
    /* Needs the built engine (it loads through zc_param_load). */
    return zc__adopt_load(e);
}

ZC_API zc_status zc_engine_build(zc_engine *e)
{
    ZC_CHECK(zc__eng_enter(e, "zc_engine_build", false));
    if (e->state != ZC_ENG_CREATED)
        return ZC_ERR(ZC_ERR_INVALID_STATE, "zc_engine_build: the engine is already built");
    if (e->nparams == 0)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "zc_engine_build: no parameters registered (zc_param_add)");
    zc_status rc = ZC_OK;
    /* First: every later build step (the layout check's collective, the
     * zero-fills) is queued on the engine's own stream. */
    ZC_CHECK_GOTO(zc__streams_create(e), rc, fail);
    /* The status records come before the first collective: everything from
     * the pre-flight on is rank-local (MemAvailable, free disk space,
     * allocations) and its outcome is agreed with them below. */
    ZC_CHECK_GOTO(zc__agree_alloc(e), rc, fail);
    ZC_CHECK_GOTO(size_from_model(e), rc, fail);
    ZC_CHECK_GOTO(zc__layout_build(e), rc, fail);
    ZC_CHECK_GOTO(alloc_partials(e), rc, fail);
    /* Every rank must register the same model with the same settings
     * (build_agree.c): a mismatch fails here, named, on every rank, rather
     * than as a collective mismatch or a hang in the first step. */
    ZC_CHECK_GOTO(zc__build_agree(e), rc, fail);
    /* Persistence first (the stage policy's built hook: stage 3 marks
     * persistent chunks, from the layout alone): the stage-3 reserve keeps a
     * buffer per persistent chunk, and the pre-flight plans that reserve. */
    if (e->pol->built)
        e->pol->built(e);
    /* Before the optimizer state, the chunks' buffers and the reserve: a
     * configuration the machine cannot hold is refused with nothing large
     * allocated. */
    rc = build_local(e);
    /* A pre-flight refusal or an allocation failure can happen on one rank
     * alone; returning there would leave the others built and waiting in
     * their first collective. Every rank fails alike, naming that rank. */
    ZC_CHECK_GOTO(zc__eng_agree(e, rc, "zc_engine_build"), rc, fail);
    zc__timers_init(&e->timers, e->cfg->wall_clock_breakdown);
    zc__progress_start(e);
    ZC_LOGI("core", "built: %d parameters, %lld elements in %d chunks of <= %lld (%lld padded)",
            e->nparams, (long long)e->num_elems, e->nchunks, (long long)e->bucket,
            (long long)e->padded_elems);
    return ZC_OK;
fail:
    zc__error_context("zc_engine_build (rank %d, stage %d)", e->rank, e->stage);
    e->state = ZC_ENG_FAILED;
    return rc;
}
