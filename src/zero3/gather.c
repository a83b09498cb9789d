/* ZeRO stage 3: gather on acquire, free on release, persistence, the
 * max_live_parameters bound, and prefetch from the recorded acquire trace.
 *
 * Live elements. A chunk is live while its gathered copy exists (acquired,
 * persistent, or prefetched ahead of its next use); live_elems sums their
 * padded sizes. No gather ever makes live_elems exceed max_live_parameters:
 * a demand gather first evicts idle prefetched chunks and otherwise fails
 * with ZC_ERR_NO_MEMORY; a prefetch that does not fit is not issued. Gather
 * buffers come from a pool reserved at build (core/reserve.c); a prefetch
 * without a free slot is not issued, and a demand gather without one
 * allocates, its outcome agreed across ranks before the all-gather (a
 * failure on one rank alone would otherwise split the collectives).
 *
 * Trace. An activation is an acquire that takes a chunk from 0 to 1
 * outstanding acquires. The first step records the activation sequence over
 * the whole accumulation window (each micro-step acquires again); later steps
 * check each activation against it and, on a match, gather the next chunks of
 * the trace ahead of time, up to prefetch_bucket_size elements not yet
 * acquired. A mismatch (a changed order, or a different number of
 * activations at the end of the step) is logged, counted in
 * trace_invalidations, and the trace is re-recorded from that point; results
 * do not depend on it, only the timing of gathers does. On the host path a
 * prefetch is a gather issued early (synchronous).
 *
 * Collective order. Gathers are collectives, so every rank must acquire the
 * same parameters in the same order; then every rank makes the same
 * prefetch and eviction decisions. */
#include <stdio.h>
#include <string.h>

#include "zero3/zero3.h"

static size_t gather_bytes(const zc_engine *e, const zc_chunk *c)
{
    return (size_t)c->padded * e->pesz;
}

void zc__z3_gather_free(zc_engine *e, zc_chunk *c)
{
    if (c->gather_own)
        zc__eng_free(e, ZC_MEM_BUFFERS, &c->gather, gather_bytes(e, c));
    else
        zc__bufpool_put(&e->pool_gather, &c->gather);
    c->gather_own = false;
}

/* The buffer of a gather. Taken from the pool reserved at build
 * (core/reserve.c) when a slot is free; which slots are free follows the
 * acquire sequence, the same on every rank, so every rank takes the same
 * branch here. Without a free slot a prefetch is not issued (*skip: every
 * rank skips it together), and a demand gather allocates its buffer: an
 * allocation can fail on one rank alone, so its outcome is agreed before the
 * all-gather, and a failure on any rank breaks the engine on every rank. */
static zc_status gather_buffer(zc_engine *e, zc_chunk *c, int k, bool demand, bool *skip)
{
    const size_t bytes = gather_bytes(e, c);
    *skip = false;
    if (zc__bufpool_get(&e->pool_gather, bytes, false, e->stream, &c->gather) == ZC_OK)
        return ZC_OK;
    zc__error_clear(); /* no free slot: not an error by itself */
    if (!demand) {
        *skip = true;
        return ZC_OK;
    }
    void *mem = NULL;
    zc_status rc = zc__eng_alloc(e, ZC_MEM_BUFFERS, bytes, "stage-3 gather buffer", &mem);
    char what[128];
    snprintf(what, sizeof what,
             "stage 3: a gather buffer for chunk %d (%lld elements), all %d reserved ones "
             "being in use,",
             k, (long long)c->padded, zc__bufpool_in_use(&e->pool_gather));
    rc = zc__eng_agree(e, rc, what);
    if (rc != ZC_OK) {
        zc__eng_free(e, ZC_MEM_BUFFERS, &mem, bytes);
        return rc;
    }
    c->gather = mem;
    c->gather_own = true;
    return ZC_OK;
}

static zc_status gather_chunk(zc_engine *e, int k, bool demand, bool *skip)
{
    zc_chunk *c = &e->chunks[k];
    ZC_CHECK(gather_buffer(e, c, k, demand, skip));
    if (*skip)
        return ZC_OK;
    zc_status rc = zc__eng_all_gather(e, c->param, c->gather, (size_t)c->shard, e->pdt, true);
    if (rc != ZC_OK) {
        zc__z3_gather_free(e, c);
        zc__error_context("stage 3: gathering chunk %d (%lld elements)", k, (long long)c->padded);
        return rc;
    }
    e->gathers_cur++;
    c->gathers_cur++;
    e->live_elems += c->padded;
    if (e->live_elems > e->live_peak_cur)
        e->live_peak_cur = e->live_elems;
    return ZC_OK;
}

static void drop_chunk(zc_engine *e, zc_chunk *c)
{
    if (!c->gather)
        return;
    zc__z3_gather_free(e, c);
    e->live_elems -= c->padded;
    if (c->prefetched) {
        c->prefetched = false;
        e->prefetched_elems -= c->padded;
    }
}

static void rewind_prefetch(zc_engine *e, int k);

/* Evicts idle prefetched chunks (latest chunk first) until need more elements
 * fit under max_live. When even evicting all of them would not make room,
 * evicts nothing: the acquire is refused and must leave the prefetched
 * chunks (and the gathers they cost) in place. */
static bool make_room(zc_engine *e, int64_t need)
{
    if (e->live_elems + need <= e->max_live)
        return true;
    int64_t idle = 0;
    for (int k = 0; k < e->nchunks; k++) {
        const zc_chunk *c = &e->chunks[k];
        if (c->gather && c->prefetched && c->acq == 0)
            idle += c->padded;
    }
    if (e->live_elems - idle + need > e->max_live)
        return false;
    for (int k = e->nchunks - 1; k >= 0 && e->live_elems + need > e->max_live; k--) {
        zc_chunk *c = &e->chunks[k];
        if (c->gather && c->prefetched && c->acq == 0) {
            drop_chunk(e, c);
            rewind_prefetch(e, k);
        }
    }
    return e->live_elems + need <= e->max_live;
}

/* Records or checks one activation. The trace's capacity is reserved at
 * build (core/reserve.c), so recording never allocates between collectives:
 * past the capacity the activation is not recorded and the trace is marked
 * truncated - the same on every rank, since every rank activates the same
 * chunks in the same order - and prefetch stops where the record ends. */
static void trace_activate(zc_engine *e, const zc_param *p)
{
    zc_trace *t = &e->trace;
    const int k = p->chunk;
    if (t->mode == ZC_TRACE_COMPLETE) {
        if (t->pos < t->len && t->order[t->pos] == k) {
            t->pos++;
            return;
        }
        if (t->pos >= t->len && t->truncated) {
            t->pos++; /* beyond the recorded prefix: nothing to check or prefetch */
            return;
        }
        e->invalidations++;
        if (t->pos < t->len)
            ZC_LOGW("zero3",
                    "step %lld: acquire order changed at trace position %lld: '%s' (chunk %d) "
                    "where chunk %d was recorded; prefetch is off until the trace is "
                    "re-recorded",
                    (long long)e->steps, (long long)t->pos, p->name, k, t->order[t->pos]);
        else
            ZC_LOGW("zero3",
                    "step %lld: acquire of '%s' (chunk %d) after the %lld recorded ones; "
                    "re-recording the trace",
                    (long long)e->steps, p->name, k, (long long)t->len);
        t->len = t->pos;
        t->mode = ZC_TRACE_RECORD;
        t->pf_end = t->pos;
        t->truncated = false;
    }
    if (t->len == 0 && e->steps == 0)
        /* The first step runs without prefetch and gathers each chunk when
         * it is asked for: on a large model it is much slower than the
         * next ones, and this says why. */
        ZC_LOGI("zero3", "first step: recording the order of parameter acquires (%d chunks); "
                "each chunk is gathered on demand until the order is known, then up to "
                "%lld elements are prefetched ahead",
                e->nchunks, (long long)e->prefetch_elems);
    if (t->len < t->cap) {
        t->order[t->len++] = k;
    } else if (!t->truncated) {
        t->truncated = true;
        ZC_LOGI("zero3",
                "step %lld: more than %lld chunk activations in one step; prefetch covers "
                "the first %lld",
                (long long)e->steps, (long long)t->cap, (long long)t->cap);
    }
}

/* A chunk freed on release may have been counted by the prefetch scan as
 * already live for a later use; rewind the scan to that use so the next
 * activation prefetches it again. */
static void rewind_prefetch(zc_engine *e, int k)
{
    zc_trace *t = &e->trace;
    if (t->mode != ZC_TRACE_COMPLETE)
        return;
    for (int64_t j = t->pos; j < t->pf_end && j < t->len; j++)
        if (t->order[j] == k) {
            t->pf_end = j;
            return;
        }
}

/* Gathers the next chunks of the trace ahead of their use. Stops at the first
 * chunk that is acquired right now (it will be released before its next use,
 * so it cannot be counted as prefetched), that does not fit the prefetch
 * budget or max_live, or for which no reserved buffer is free (a prefetch
 * never allocates). */
static zc_status prefetch(zc_engine *e)
{
    zc_trace *t = &e->trace;
    if (t->mode != ZC_TRACE_COMPLETE || e->prefetch_elems <= 0)
        return ZC_OK;
    int64_t j = t->pf_end > t->pos ? t->pf_end : t->pos;
    for (; j < t->len; j++) {
        zc_chunk *c = &e->chunks[t->order[j]];
        if (c->gather) {
            if (c->acq > 0 && !c->persistent)
                break;
            continue; /* persistent or already prefetched */
        }
        if (e->prefetched_elems + c->padded > e->prefetch_elems ||
            e->live_elems + c->padded > e->max_live)
            break;
        bool skip = false;
        ZC_CHECK(gather_chunk(e, t->order[j], false, &skip));
        if (skip)
            break; /* no reserved buffer free: considered again at the next activation */
        c->prefetched = true;
        e->prefetched_elems += c->padded;
    }
    t->pf_end = j;
    return ZC_OK;
}

zc_status zc__z3_acquire(zc_engine *e, zc_param *p, void **out)
{
    zc_chunk *c = &e->chunks[p->chunk];
    const bool activation = c->acq == 0;
    if (!c->gather) {
        if (!make_room(e, c->padded))
            return ZC_ERR(ZC_ERR_NO_MEMORY,
                          "zc_param_acquire('%s'): gathering chunk %d (%lld elements) would "
                          "exceed stage3_max_live_parameters = %lld (%lld elements are gathered "
                          "and in use); raise it or release parameters earlier",
                          p->name, p->chunk, (long long)c->padded, (long long)e->max_live,
                          (long long)e->live_elems);
        bool skip = false;
        ZC_CHECK(gather_chunk(e, p->chunk, true, &skip));
    }
    if (activation)
        trace_activate(e, p);
    if (c->prefetched) {
        c->prefetched = false;
        e->prefetched_elems -= c->padded;
    }
    c->acq++;
    *out = zc__elem(c->gather, p->offset, e->pesz);
    /* A prefetch is a gather, a collective: a rank that skipped it would
     * issue different collectives than the others from here on. Its buffer
     * cannot fail (reserved), so what can fail is the all-gather itself,
     * which breaks the engine; the acquire reports it rather than going on. */
    if (activation) {
        zc_status rc = prefetch(e);
        if (rc != ZC_OK) {
            zc__eng_break(e, rc, zc_last_error());
            zc__error_context("zc_param_acquire('%s'): prefetching after chunk %d", p->name,
                              p->chunk);
            return rc;
        }
    }
    return ZC_OK;
}

zc_status zc__z3_release(zc_engine *e, zc_param *p)
{
    zc_chunk *c = &e->chunks[p->chunk];
    if (--c->acq > 0 || c->persistent)
        return ZC_OK;
    /* Freed as soon as nothing uses it (stage3_max_reuse_distance is not
     * implemented: it behaves as 0), so a chunk is gathered once per use
     * window: in forward and again in backward. */
    drop_chunk(e, c);
    rewind_prefetch(e, p->chunk);
    return ZC_OK;
}

zc_status zc__z3_step_end(zc_engine *e, bool updated)
{
    zc_trace *t = &e->trace;
    const bool cut = t->truncated && t->pos >= t->len; /* truncated record, all of it seen */
    if (t->mode == ZC_TRACE_COMPLETE && t->pos != t->len && !cut) {
        e->invalidations++;
        ZC_LOGW("zero3",
                "step %lld: %lld chunk acquires where the trace recorded %lld; re-recording "
                "the trace",
                (long long)e->steps, (long long)t->pos, (long long)t->len);
        t->len = t->pos < t->cap ? t->pos : t->cap;
        t->truncated = t->pos > t->cap;
    }
    if (t->mode == ZC_TRACE_RECORD && e->steps <= 1)
        ZC_LOGI("zero3", "step %lld: acquire order recorded (%lld chunk activations%s); "
                "prefetch is on from the next step",
                (long long)e->steps, (long long)t->len, t->truncated ? ", truncated" : "");
    t->mode = ZC_TRACE_COMPLETE;
    t->pos = 0;
    t->pf_end = 0;
    for (int k = 0; k < e->nchunks; k++) {
        zc_chunk *c = &e->chunks[k];
        if (c->gather && c->acq == 0 && !c->persistent)
            drop_chunk(e, c);
    }
    if (!updated)
        return ZC_OK;
    /* What stays gathered (in use or persistent) is refreshed in place, so
     * pointers handed out stay valid and see the new values. The refreshes
     * are independent and issued back to back: one communicator group. */
    ZC_CHECK(zc__eng_group_start(e));
    zc_status rc = ZC_OK;
    for (int k = 0; k < e->nchunks && rc == ZC_OK; k++) {
        zc_chunk *c = &e->chunks[k];
        if (!c->gather)
            continue;
        rc = zc__eng_all_gather(e, c->param, c->gather, (size_t)c->shard, e->pdt, true);
        if (rc == ZC_OK) {
            e->gathers_cur++;
            c->gathers_cur++;
        }
    }
    zc_status end = zc__eng_group_end(e); /* also after a failure inside */
    return rc != ZC_OK ? rc : end;
}

void zc__z3_free_all(zc_engine *e)
{
    for (int k = 0; k < e->nchunks; k++)
        drop_chunk(e, &e->chunks[k]);
}
