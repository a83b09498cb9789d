/* Blocks: the per-parameter calls (acquire, release, gradient buffer,
 * gradient ready) over a list of parameters at once, e.g. the dozen tensors
 * of a transformer block.
 *
 * A block call is its per-parameter calls in the block's order, with the
 * same effect and the same collectives in the same order, so a loop that
 * switches to blocks trains bitwise the same. What a block call adds is
 * all-or-nothing: it checks up front what would make one of its calls fail
 * on this rank alone (a handle, a state), and undoes what it did when a later
 * call fails, so on failure the block is as it was. */
#include <stdio.h>
#include <string.h>

#include "core/engine.h"

#define ZC_BLOCK_MAGIC 0x5a43424cu /* "ZCBL" */

struct zc_block {
    uint32_t magic;
    zc_engine *eng;
    int n;
    zc_param **params; /* n handles, in the order the block calls visit them */
    size_t bytes;      /* of this allocation: the struct and the array after it */
};

static zc_status block_new(zc_engine *e, zc_param *const *params, int n, const char *fn,
                           zc_block **out)
{
    /* Checked: n is an int, the array of n pointers follows the struct. */
    size_t arr = 0, bytes = 0;
    if (__builtin_mul_overflow((size_t)n, sizeof(zc_param *), &arr) ||
        __builtin_add_overflow(sizeof(zc_block), arr, &bytes))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: %d parameters overflow the block's size", fn, n);
    void *mem = NULL;
    ZC_CHECK(zc__host_alloc(NULL, ZC_MEM_OTHER, bytes, "block", &mem));
    zc_block *b = mem;
    b->magic = ZC_BLOCK_MAGIC;
    b->eng = e;
    b->n = n;
    b->params = (zc_param **)(b + 1);
    memcpy(b->params, params, arr);
    b->bytes = bytes;
    *out = b;
    return ZC_OK;
}

ZC_API zc_status zc_block_create(zc_engine *e, zc_param *const *params, int n, zc_block **out)
{
    if (!out)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_block_create: out is NULL");
    *out = NULL;
    ZC_CHECK(zc__eng_enter(e, "zc_block_create", false));
    if (!params || n < 1)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "zc_block_create: a block needs at least one parameter (params %s, n %d)",
                      params ? "given" : "NULL", n);
    for (int i = 0; i < n; i++) {
        ZC_CHECK(zc__eng_check_param(e, params[i], "zc_block_create"));
        /* A parameter twice would be acquired twice and made ready twice:
         * the second grad_ready is an error, so refuse it here. Quadratic,
         * but blocks are a few dozen tensors and this runs once. */
        for (int j = 0; j < i; j++)
            if (params[j] == params[i])
                return ZC_ERR(ZC_ERR_INVALID_ARG,
                              "zc_block_create: parameter '%s' is listed twice (positions %d "
                              "and %d)",
                              params[i]->name, j, i);
    }
    return block_new(e, params, n, "zc_block_create", out);
}

ZC_API zc_status zc_block_span(zc_engine *e, zc_param *first, zc_block **out)
{
    if (!out)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_block_span: out is NULL");
    *out = NULL;
    ZC_CHECK(zc__eng_enter(e, "zc_block_span", false));
    ZC_CHECK(zc__eng_check_param(e, first, "zc_block_span"));
    /* chunk_start marks the parameters registered right after a
     * zc_chunk_boundary: the span ends before the next one. */
    int end = first->index + 1;
    while (end < e->nparams && !e->params[end]->chunk_start)
        end++;
    return block_new(e, &e->params[first->index], end - first->index, "zc_block_span", out);
}

ZC_API int zc_block_size(const zc_block *b)
{
    return b && b->magic == ZC_BLOCK_MAGIC ? b->n : -1;
}

ZC_API zc_status zc_block_numel(const zc_block *b, size_t *count)
{
    if (!b || b->magic != ZC_BLOCK_MAGIC || !count)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_block_numel: %s",
                      !count ? "count is NULL" : "not a block handle");
    /* The registry bounds the engine's elements in all by INT64_MAX / 4. */
    _Static_assert(sizeof(size_t) >= sizeof(int64_t), "a block's count fits size_t");
    int64_t n = 0;
    for (int i = 0; i < b->n; i++)
        n += b->params[i]->numel;
    *count = (size_t)n;
    return ZC_OK;
}

ZC_API zc_param *zc_block_param(const zc_block *b, int i)
{
    if (!b || b->magic != ZC_BLOCK_MAGIC || i < 0 || i >= b->n)
        return NULL;
    return b->params[i];
}

ZC_API void zc_block_destroy(zc_block *b)
{
    if (!b || b->magic != ZC_BLOCK_MAGIC)
        return;
    b->magic = 0;
    zc__host_free(NULL, ZC_MEM_OTHER, b, b->bytes);
}

static zc_status block_enter(zc_engine *e, const zc_block *b, const char *fn)
{
    ZC_CHECK(zc__eng_enter(e, fn, true));
    if (!b || b->magic != ZC_BLOCK_MAGIC)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: %p is not a block handle", fn, (const void *)b);
    if (b->eng != e)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: the block belongs to another engine (rank %d)",
                      fn, b->eng ? b->eng->rank : -1);
    return ZC_OK;
}

/* Releases params [0, upto) of b after a failure, keeping that failure's
 * message and status. */
static zc_status undo_acquire(zc_engine *e, zc_block *b, int upto, void *stream, zc_status rc)
{
    char msg[512];
    snprintf(msg, sizeof msg, "%s", zc_last_error());
    for (int i = upto - 1; i >= 0; i--)
        (void)zc_param_release(e, b->params[i], stream);
    zc__error_clear();
    return ZC_ERR(rc, "%s", msg);
}

ZC_API zc_status zc_block_acquire(zc_engine *e, zc_block *b, void *stream, void **ptrs)
{
    ZC_CHECK(block_enter(e, b, "zc_block_acquire"));
    for (int i = 0; i < b->n; i++) {
        void *p = NULL;
        zc_status rc = zc__param_acquire(e, b->params[i], stream, &p);
        if (rc != ZC_OK) {
            zc__error_context("zc_block_acquire: parameter %d of %d ('%s')", i, b->n,
                              b->params[i]->name);
            return undo_acquire(e, b, i, stream, rc);
        }
        if (ptrs)
            ptrs[i] = p;
    }
    return ZC_OK;
}

ZC_API zc_status zc_block_release(zc_engine *e, zc_block *b, void *stream)
{
    ZC_CHECK(block_enter(e, b, "zc_block_release"));
    /* Every parameter must be acquired before any is released, so a
     * misplaced release changes nothing. */
    for (int i = 0; i < b->n; i++)
        if (b->params[i]->acquired <= 0)
            return ZC_ERR(ZC_ERR_INVALID_STATE,
                          "zc_block_release: parameter %d of %d ('%s') is not acquired", i, b->n,
                          b->params[i]->name);
    for (int i = 0; i < b->n; i++) {
        zc_status rc = zc_param_release(e, b->params[i], stream);
        if (rc != ZC_OK) {
            zc__error_context("zc_block_release: parameter %d of %d", i, b->n);
            return rc;
        }
    }
    return ZC_OK;
}

/* Stages 2/3: whether the gradient pool can give a free slot to every chunk
 * of b that holds no gradient buffer yet. Chunks fit any slot at least their
 * size, so they all fit exactly when, for each of their sizes x, at least as
 * many free slots hold x as chunks need x or more (Hall's condition); the
 * pool then takes the smallest fitting slot for each in any order and never
 * fails. *need gets the chunks without a buffer; when they do not fit,
 * *bytes, *want and *have the first size that is short, how many of the
 * chunks need that much and how many free slots hold it. Stamps chunks
 * (gmark) instead of allocating: nothing here can fail on one rank alone. */
static bool grad_slots_fit(zc_engine *e, const zc_block *b, int *need, size_t *bytes,
                           int *want, int *have)
{
    const int64_t mark = ++e->gmark_seq;
    *need = 0;
    for (int i = 0; i < b->n; i++) {
        zc_chunk *c = &e->chunks[b->params[i]->chunk];
        if (!c->gbuf && c->gmark != mark) {
            c->gmark = mark;
            (*need)++;
        }
    }
    for (int k = 0; k < e->nchunks; k++) {
        if (e->chunks[k].gmark != mark)
            continue;
        const size_t x = (size_t)e->chunks[k].padded * e->pesz;
        int n = 0;
        for (int j = 0; j < e->nchunks; j++)
            n += e->chunks[j].gmark == mark && (size_t)e->chunks[j].padded * e->pesz >= x;
        const int free = zc__bufpool_free(&e->pool_grad, x);
        if (n > free) {
            *bytes = x;
            *want = n;
            *have = free;
            return false;
        }
    }
    return true;
}

ZC_API zc_status zc_block_grad_buffers(zc_engine *e, zc_block *b, void **bufs)
{
    ZC_CHECK(block_enter(e, b, "zc_block_grad_buffers"));
    ZC_CHECK(zc__pass_train_only(e, "zc_block_grad_buffers"));
    if (!bufs)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_block_grad_buffers: bufs is NULL");
    for (int i = 0; i < b->n; i++)
        if (b->params[i]->ready)
            return ZC_ERR(ZC_ERR_INVALID_STATE,
                          "zc_block_grad_buffers: the gradient of parameter %d of %d ('%s') was "
                          "already made ready in this micro-step",
                          i, b->n, b->params[i]->name);
    /* Stages 2/3 take a slot of the gradient pool reserved at build for every
     * chunk of the block that holds none yet. Checked first, so a block that
     * cannot get them all fails before taking any, on every rank alike: the
     * slots in use follow the same calls. The pool holds two units' buffers
     * (reserve.c), so a loop that makes each block ready before the next
     * takes its buffers never gets here. */
    int need = 0, want = 0, have = 0;
    size_t bytes = 0;
    /* Chunks waiting in the reduction bucket hold slots: reduced first when
     * the block needs them (every rank holds the same, so flushes alike). */
    if (e->pol->sharded_grads && e->bucket_chunks > 0 &&
        !grad_slots_fit(e, b, &need, &bytes, &want, &have))
        ZC_CHECK(zc__bucket_flush(e));
    if (e->pol->sharded_grads && !grad_slots_fit(e, b, &need, &bytes, &want, &have))
        return ZC_ERR(ZC_ERR_NO_MEMORY,
                      "zc_block_grad_buffers: the block's parameters lie in %d chunks without "
                      "a gradient buffer, %d of them of %zu bytes or more, and %d free "
                      "gradient buffers hold that much (the build reserved %d, room for the "
                      "chunks of %d units: a unit is the parameters between two "
                      "zc_chunk_boundary calls, or one chunk without boundaries); make the "
                      "gradients written so far ready first, or register the block after a "
                      "zc_chunk_boundary so the build reserves for it",
                      need, want, bytes, have, zc__bufpool_slots(&e->pool_grad),
                      ZC_GRAD_SETS * e->grad_set_units);
    for (int i = 0; i < b->n; i++) {
        zc_status rc = zc__grad_buffer(e, b->params[i], &bufs[i]);
        if (rc != ZC_OK) {
            /* Checked above; a device failure (zero-fill, ordering) is the
             * only way here. The buffers taken stay with their chunks, as
             * zc_grad_buffer's would: grad_ready or the next step's reset
             * gives them back. */
            zc__error_context("zc_block_grad_buffers: parameter %d of %d", i, b->n);
            return rc;
        }
    }
    return ZC_OK;
}

ZC_API zc_status zc_block_grad_ready(zc_engine *e, zc_block *b)
{
    ZC_CHECK(block_enter(e, b, "zc_block_grad_ready"));
    ZC_CHECK(zc__pass_train_only(e, "zc_block_grad_ready"));
    for (int i = 0; i < b->n; i++)
        if (b->params[i]->ready)
            return ZC_ERR(ZC_ERR_INVALID_STATE,
                          "zc_block_grad_ready: parameter %d of %d ('%s') was already made ready "
                          "in micro-step %lld; each parameter is made ready once per micro-step",
                          i, b->n, b->params[i]->name, (long long)e->micro);
    for (int i = 0; i < b->n; i++) {
        zc_status rc = zc_grad_ready(e, b->params[i]);
        if (rc != ZC_OK) {
            /* A reduction failed: a collective, so the engine is broken on
             * every rank and undoing the earlier ones would not help. */
            zc__error_context("zc_block_grad_ready: parameter %d of %d", i, b->n);
            return rc;
        }
    }
    return ZC_OK;
}

ZC_API zc_status zc_block_base(zc_engine *e, const zc_block *b, void **base)
{
    ZC_CHECK(block_enter(e, b, "zc_block_base"));
    if (!base)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_block_base: base is NULL");
    /* One base pointer describes the block only when its parameters are
     * laid out back to back: consecutive in registration order, which
     * within one chunk means consecutive in memory (layout.c packs a chunk
     * in registration order without gaps). */
    const zc_param *p0 = b->params[0];
    for (int i = 1; i < b->n; i++) {
        const zc_param *p = b->params[i];
        if (p->index != p0->index + i || p->chunk != p0->chunk)
            return ZC_ERR(ZC_ERR_INVALID_ARG,
                          "zc_block_base: parameter %d of %d ('%s') does not follow '%s' in the "
                          "same chunk (chunks %d and %d); a base pointer needs consecutive "
                          "parameters of one chunk",
                          i, b->n, p->name, b->params[i - 1]->name, p->chunk,
                          b->params[i - 1]->chunk);
    }
    void *cb = NULL;
    int64_t off = 0;
    ZC_CHECK(zc_param_chunk_base(e, p0, &cb, &off));
    *base = zc__elem(cb, off, e->pesz);
    return ZC_OK;
}
