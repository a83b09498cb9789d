/* ZeRO stage 3: gather on acquire, free on release, persistence, the
 * max_live_parameters bound, and prefetch from the recorded acquire trace.
 *
 * Live elements. A chunk is live while its gathered copy exists (acquired,
 * persistent, or prefetched ahead of its next use); live_elems sums their
 * padded sizes. No gather ever makes live_elems exceed max_live_parameters:
 * a demand gather first evicts idle prefetched chunks and otherwise fails
 * with ZC_ERR_NO_MEMORY; a prefetch that does not fit is not issued. Gather
 * buffers come from a pool reserved at build (core/engine/reserve.c); a prefetch
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
 * Evaluation passes (zc_pass_begin, core/loop/pass.c) have a trace of their own
 * (e->trace points at the open pass's), recorded over the first pass and
 * followed by the later ones in the same way, so a validation pass between
 * steps neither lands in the training's trace nor finds it changed.
 *
 * Offloaded shards (offload_param, core/state/param_state.c). A gather first
 * brings this rank's shard in from its home; under nvme that is a read, and
 * the prefetcher starts those reads ahead: at each activation it walks the
 * trace from the next expected activation and starts the reads of the next
 * chunks whose shards are on disk, at most ZC_Z3_READS_AHEAD in flight, in
 * trace order, while the prefetch budget, max_live and the home's buffers
 * allow. A chunk whose read is in flight is gathered by its own activation,
 * so the read has the compute of every chunk in between to finish in and
 * the host waits for no read before it is needed. The bound is a count of
 * trace positions, not a guess at timing: every rank starts the same reads
 * and issues the same collectives. It keeps the drive on the read needed
 * next: more reads at once share it, and the first of them (the one the
 * next activation waits for) takes longer (bench/RESULTS.md, parameter
 * offload). A chunk whose read is in flight counts as live and prefetched
 * with its full padded size, so gathered plus in-flight elements never
 * exceed max_live. A read is rank-local I/O before a collective: its
 * outcome is agreed (zc__eng_agree) before the all-gather that sends it.
 *
 * Reuse distance. In a recorded step, a chunk released by its last user is
 * kept gathered when its next activation in the trace comes within
 * stage3_max_reuse_distance elements (the padded sizes of the activations in
 * between), so it is neither gathered nor read again. Kept and prefetched
 * chunks nothing holds are the first evicted when a demand gather needs room
 * (max_live) or a reserved buffer.
 *
 * Collective order. Gathers are collectives, so every rank must acquire the
 * same parameters in the same order; then every rank makes the same
 * prefetch, read-ahead, keep and eviction decisions (none depends on I/O
 * timing). */
#include <stdio.h>
#include <string.h>

#include "zero3/zero3.h"

/* Shard reads in flight ahead of the activations that need them (see the
 * comment at the top). One read ahead has a whole chunk's compute to run in;
 * the second covers a chunk whose compute is shorter than its read. */
#define ZC_Z3_READS_AHEAD 2

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

static void count_live(zc_engine *e, int64_t n)
{
    e->live_elems += n;
    if (e->live_elems > e->live_peak_cur)
        e->live_peak_cur = e->live_elems;
}

/* Frees what chunk c holds ahead of or after its use: its gathered copy or
 * the read of its shard in flight. */
static void drop_chunk(zc_engine *e, zc_chunk *c)
{
    if (!c->gather && !c->reading)
        return;
    if (c->reading)
        zc__param_read_cancel(e, (int)(c - e->chunks));
    else
        zc__z3_gather_free(e, c);
    c->reading = false;
    c->kept = false;
    e->live_elems -= c->padded;
    if (c->prefetched) {
        c->prefetched = false;
        e->prefetched_elems -= c->padded;
    }
}

static bool idle(const zc_chunk *c)
{
    return c->acq == 0 && (c->prefetched || c->kept) && (c->gather || c->reading);
}

/* The buffer of a gather. Taken from the pool reserved at build
 * (core/engine/reserve.c) when a slot is free; which slots are free follows the
 * acquire sequence, the same on every rank, so every rank takes the same
 * branch here. Without a free slot a prefetch is not issued (*skip: every
 * rank skips it together); a demand gather first evicts idle kept and
 * prefetched chunks (latest first) and otherwise allocates its buffer: an
 * allocation can fail on one rank alone, so its outcome is agreed before the
 * all-gather, and a failure on any rank breaks the engine on every rank. */
static zc_status gather_buffer(zc_engine *e, zc_chunk *c, int k, bool demand, bool *skip)
{
    const size_t bytes = gather_bytes(e, c);
    *skip = false;
    for (int j = e->nchunks - 1; demand && j >= 0 && !zc__bufpool_free(&e->pool_gather, bytes);
         j--) {
        zc_chunk *o = &e->chunks[j];
        if (o != c && idle(o) && o->gather && !o->gather_own)
            drop_chunk(e, o);
    }
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

/* Brings this rank's shard in (its home: device memory, pinned memory or a
 * read from NVMe) and all-gathers the chunk. A chunk with a read in flight
 * is already counted live; any other is counted now. */
static zc_status gather_chunk(zc_engine *e, int k, bool demand, bool *skip)
{
    zc_chunk *c = &e->chunks[k];
    ZC_CHECK(gather_buffer(e, c, k, demand, skip));
    if (*skip)
        return ZC_OK;
    const void *send = NULL;
    zc_status rc = zc__param_send(e, k, c->gather, &send);
    if (zc__param_rank_local_io(e, k)) {
        char what[96];
        snprintf(what, sizeof what, "stage 3: reading the parameter shard of chunk %d", k);
        rc = zc__eng_agree(e, rc, what);
    }
    if (rc == ZC_OK)
        rc = zc__z3_gather_into(e, k, send);
    if (rc != ZC_OK) {
        zc__z3_gather_free(e, c);
        zc__error_context("stage 3: gathering chunk %d (%lld elements)", k, (long long)c->padded);
        return rc;
    }
    e->gathers_cur++;
    c->gathers_cur++;
    if (c->reading)
        c->reading = false;
    else
        count_live(e, c->padded);
    return ZC_OK;
}

/* Evicts idle kept and prefetched chunks (latest chunk first) until need
 * more elements fit under max_live. When even evicting all of them would not
 * make room, evicts nothing: the acquire is refused and must leave them (and
 * the gathers they cost) in place. */
static bool make_room(zc_engine *e, int64_t need)
{
    if (e->live_elems + need <= e->max_live)
        return true;
    int64_t free_able = 0;
    for (int k = 0; k < e->nchunks; k++)
        if (idle(&e->chunks[k]))
            free_able += e->chunks[k].padded;
    if (e->live_elems - free_able + need > e->max_live)
        return false;
    for (int k = e->nchunks - 1; k >= 0 && e->live_elems + need > e->max_live; k--)
        if (idle(&e->chunks[k]))
            drop_chunk(e, &e->chunks[k]);
    return e->live_elems + need <= e->max_live;
}

/* The chunk of activation j of the trace, or -1 past what it predicts: its
 * record, continued with its period when it has one. */
static int trace_at(const zc_trace *t, int64_t j)
{
    if (j < t->len)
        return t->order[j];
    if (t->period <= 0)
        return -1;
    return t->order[t->len - t->period + (j - t->len) % t->period];
}

/* Where a walk ahead of activation `from` stops: the record's end, or one
 * record's length on when the period continues it (so a walk over chunks
 * that are all gathered ends). */
static int64_t trace_end(const zc_trace *t, int64_t from)
{
    return t->period > 0 ? from + t->len : t->len;
}

/* The smallest period of a record that repeats, at least twice: the
 * positions holding its first chunk are the candidates (the first 64 of
 * them, so that an irregular record costs at most 64 passes over it); 0
 * when none fits. Every rank has the same record, so the same period. */
static int64_t trace_period(const zc_trace *t)
{
    int tries = 0;
    for (int64_t p = 1; p <= t->len / 2 && tries < 64; p++) {
        if (t->order[p] != t->order[0])
            continue;
        tries++;
        int64_t i = p;
        while (i < t->len && t->order[i] == t->order[i - p])
            i++;
        if (i == t->len)
            return p;
    }
    return 0;
}

/* Which pass a trace line speaks of: "step N" or "evaluation pass N". */
static void pass_name(const zc_engine *e, char *b, size_t cap)
{
    if (e->trace == &e->traces[ZC_PASS_EVAL])
        snprintf(b, cap, "evaluation pass %lld", (long long)e->pass.evals + 1);
    else
        snprintf(b, cap, "step %lld", (long long)e->steps);
}

/* Records or checks one activation. The trace's capacity is reserved at
 * build (core/engine/reserve.c), so recording never allocates between collectives:
 * past the capacity the activation is not recorded and the trace is marked
 * truncated - the same on every rank, since every rank activates the same
 * chunks in the same order - and prefetch stops where the record ends.
 * An evaluation pass that goes on past its recorded activations (more
 * batches than the one recorded) extends the record: that changes no order
 * already seen, so it is no invalidation. */
static void trace_activate(zc_engine *e, const zc_param *p)
{
    zc_trace *t = e->trace;
    const bool eval = t == &e->traces[ZC_PASS_EVAL];
    const int k = p->chunk;
    char where[64];
    if (t->mode == ZC_TRACE_COMPLETE) {
        const int want = trace_at(t, t->pos);
        if (want == k) {
            t->pos++;
            return;
        }
        if (t->pos >= t->len && t->truncated) {
            /* Beyond the recorded prefix: nothing to check. A period that
             * stopped fitting predicts nothing more in this pass. */
            if (want >= 0)
                ZC_LOGD("zero3", "activation %lld: chunk %d where the period of %lld "
                        "predicted %d; no prefetch for the rest of the pass",
                        (long long)t->pos, k, (long long)t->period, want);
            t->period = 0;
            t->pos++;
            return;
        }
        pass_name(e, where, sizeof where);
        if (eval && t->pos >= t->len) {
            ZC_LOGD("zero3", "%s: more activations than the %lld recorded; extending the record",
                    where, (long long)t->len);
        } else {
            e->invalidations++;
            if (t->pos < t->len)
                ZC_LOGW("zero3",
                        "%s: acquire order changed at trace position %lld: '%s' (chunk %d) "
                        "where chunk %d was recorded; prefetch is off until the trace is "
                        "re-recorded",
                        where, (long long)t->pos, p->name, k, t->order[t->pos]);
            else
                ZC_LOGW("zero3",
                        "%s: acquire of '%s' (chunk %d) after the %lld recorded ones; "
                        "re-recording the trace",
                        where, p->name, k, (long long)t->len);
        }
        t->len = t->pos;
        t->mode = ZC_TRACE_RECORD;
        t->truncated = false;
        t->period = 0;
    }
    if (t->len == 0 && (eval ? e->pass.evals == 0 : e->steps == 0))
        /* The first step (or evaluation pass) runs without prefetch and
         * gathers each chunk when it is asked for: on a large model it is
         * much slower than the next ones, and this says why. */
        ZC_LOGI("zero3", "first %s: recording the order of parameter acquires (%d chunks); "
                "each chunk is gathered on demand until the order is known, then up to "
                "%lld elements are prefetched ahead",
                eval ? "evaluation pass" : "step", e->nchunks, (long long)e->prefetch_elems);
    if (t->len < t->cap) {
        t->order[t->len++] = k;
    } else if (!t->truncated) {
        t->truncated = true;
        pass_name(e, where, sizeof where);
        ZC_LOGI("zero3",
                "%s: more than %lld chunk activations in one %s; the trace holds the first "
                "%lld%s",
                where, (long long)t->cap, eval ? "evaluation pass" : "step", (long long)t->cap,
                eval ? " (and their period, if they repeat)" : ", and prefetch covers them");
    }
}

/* Works ahead along the trace from the next expected activation. Stops at
 * the first chunk that is acquired right now (it will be released before its
 * next use, so it cannot be counted as prefetched), that does not fit the
 * prefetch budget or max_live, for which no reserved buffer is free (a
 * prefetch never allocates), whose shard would be the (ZC_Z3_READS_AHEAD +
 * 1)th read in flight, or whose shard the home cannot start reading (no
 * buffer to spare). A shard read started ahead is gathered by the
 * activation of its chunk. */
static zc_status prefetch(zc_engine *e, int *issued)
{
    zc_trace *t = e->trace;
    *issued = 0;
    if (t->mode != ZC_TRACE_COMPLETE || e->prefetch_elems <= 0)
        return ZC_OK;
    const int64_t end = trace_end(t, t->pos);
    int reads = 0; /* shard reads in flight from here on in the trace */
    for (int64_t j = t->pos; j < end; j++) {
        const int k = trace_at(t, j);
        if (k < 0)
            break;
        zc_chunk *c = &e->chunks[k];
        if (c->gather) {
            if (c->acq > 0 && !c->persistent)
                break;
            continue; /* persistent, kept or already prefetched */
        }
        bool skip = false;
        if (c->reading) {
            reads++; /* gathered by its own activation */
            continue;
        }
        if (e->prefetched_elems + c->padded > e->prefetch_elems ||
            e->live_elems + c->padded > e->max_live)
            break;
        if (zc__param_rank_local_io(e, k)) {
            if (reads >= ZC_Z3_READS_AHEAD)
                break; /* the next activations' reads come first */
            reads++;
            bool started = false;
            zc__param_read_ahead(e, k, &started);
            if (!started)
                break; /* no buffer to spare: considered again at the next activation */
            c->reading = true;
            count_live(e, c->padded);
        } else {
            ZC_CHECK(gather_chunk(e, k, false, &skip));
            if (skip)
                break; /* no reserved buffer free: considered again at the next activation */
        }
        c->prefetched = true;
        e->prefetched_elems += c->padded;
        (*issued)++;
    }
    return ZC_OK;
}

zc_status zc__z3_acquire(zc_engine *e, zc_param *p, void **out)
{
    zc_chunk *c = &e->chunks[p->chunk];
    const bool activation = c->acq == 0;
    /* The timeline: each activation is a span, with how it found its chunk
     * (and how long it waited for a shard read started ahead). */
    const int64_t t0 = activation ? zc__tl_begin() : 0;
    zc_tl_acq how = c->gather ? ZC_TL_ACQ_HIT : c->reading ? ZC_TL_ACQ_PREFETCHED
                                                            : ZC_TL_ACQ_DEMAND;
    /* Shards written by zc_param_load since the last acquire or step go
     * home first, their outcome agreed (every rank loaded the same
     * parameters, so every rank agrees here). */
    ZC_CHECK(zc__param_loads_agree(e));
    zc_param_home_io io0;
    zc__param_io(e, &io0);
    if (activation && !c->persistent) {
        if (c->gather || c->reading)
            e->off_cur.hits++;
        else
            e->off_cur.misses++;
    }
    if (!c->gather) {
        /* A chunk whose read is in flight is counted live already. */
        if (!c->reading && !make_room(e, c->padded))
            return ZC_ERR(ZC_ERR_NO_MEMORY,
                          "zc_param_acquire('%s'): gathering chunk %d (%lld elements) would "
                          "exceed stage3_max_live_parameters = %lld (%lld elements are gathered "
                          "and in use); raise it or release parameters earlier",
                          p->name, p->chunk, (long long)c->padded, (long long)e->max_live,
                          (long long)e->live_elems);
        bool skip = false;
        zc_status rc = gather_chunk(e, p->chunk, true, &skip);
        if (rc != ZC_OK) {
            if (c->reading)
                drop_chunk(e, c);
            return rc;
        }
    }
    if (t0) {
        zc_param_home_io io_mid;
        zc__param_io(e, &io_mid);
        if (how == ZC_TL_ACQ_PREFETCHED && io_mid.waits > io0.waits)
            how = ZC_TL_ACQ_WAITED;
        zc__tl_acquire(t0, p->chunk, how,
                       how == ZC_TL_ACQ_HIT ? 0 : (int64_t)gather_bytes(e, c),
                       (int64_t)((io_mid.wait_s - io0.wait_s) * 1e9));
    }
    if (activation) {
        e->activations++;
        trace_activate(e, p);
    }
    if (c->prefetched) {
        c->prefetched = false;
        e->prefetched_elems -= c->padded;
    }
    c->kept = false;
    c->acq++;
    *out = zc__elem(c->gather, p->offset, e->pesz);
    /* A prefetch is a gather, a collective: a rank that skipped it would
     * issue different collectives than the others from here on. Its buffer
     * cannot fail (reserved), so what can fail is the all-gather itself (or
     * the agreed read of a shard), which breaks the engine; the acquire
     * reports it rather than going on. */
    const int64_t tp = activation ? zc__tl_begin() : 0;
    int issued = 0;
    zc_status rc = activation ? prefetch(e, &issued) : ZC_OK;
    if (issued)
        zc__tl_span(tp, ZC_TLK_SPAN, "prefetch", p->chunk, issued);
    zc_param_home_io io1;
    zc__param_io(e, &io1);
    if (io1.waits > io0.waits) {
        e->off_cur.io_wait_acquires++;
        e->off_cur.io_wait_s += io1.wait_s - io0.wait_s;
    }
    if (rc != ZC_OK) {
        zc__eng_break(e, rc, zc_last_error());
        zc__error_context("zc_param_acquire('%s'): prefetching after chunk %d", p->name,
                          p->chunk);
        return rc;
    }
    return ZC_OK;
}

/* Elements activated before chunk k's next activation in the recorded
 * trace, or -1 when it has none in this step. */
static int64_t reuse_distance(const zc_engine *e, int k)
{
    const zc_trace *t = e->trace;
    if (t->mode != ZC_TRACE_COMPLETE)
        return -1;
    int64_t d = 0;
    const int64_t end = trace_end(t, t->pos);
    for (int64_t j = t->pos; j < end; j++) {
        const int at = trace_at(t, j);
        if (at < 0)
            break;
        if (at == k)
            return d;
        d += e->chunks[at].padded;
        if (d > e->reuse_elems)
            return -1;
    }
    return -1;
}

zc_status zc__z3_release(zc_engine *e, zc_param *p)
{
    zc_chunk *c = &e->chunks[p->chunk];
    if (--c->acq > 0 || c->persistent)
        return ZC_OK;
    /* Kept when used again soon (stage3_max_reuse_distance): it stays live
     * and is the first evicted when room is needed. Otherwise freed, so a
     * chunk is gathered once per use window. */
    const int64_t d = e->reuse_elems > 0 ? reuse_distance(e, p->chunk) : -1;
    if (d >= 0 && d <= e->reuse_elems) {
        c->kept = true;
        return ZC_OK;
    }
    drop_chunk(e, c);
    return ZC_OK;
}

/* Drops every chunk that nothing holds and that is not persistent. */
static void drop_unheld(zc_engine *e)
{
    for (int k = 0; k < e->nchunks; k++) {
        zc_chunk *c = &e->chunks[k];
        if ((c->gather || c->reading) && c->acq == 0 && !c->persistent)
            drop_chunk(e, c);
    }
}

void zc__z3_quiesce(zc_engine *e)
{
    for (int k = 0; k < e->nchunks; k++)
        if (idle(&e->chunks[k]))
            drop_chunk(e, &e->chunks[k]);
}

zc_status zc__z3_step_end(zc_engine *e, bool updated)
{
    zc_trace *t = &e->traces[ZC_PASS_TRAIN];
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
    drop_unheld(e);
    if (!updated)
        return ZC_OK;
    /* hpZ: the secondary partitions hold the old parameters. */
    zc__z3_hpz_invalidate(e);
    /* What stays gathered (in use or persistent) is refreshed in place, so
     * pointers handed out stay valid and see the new values. Offloaded
     * shards come in first (reads agreed across ranks); the all-gathers are
     * independent and issued back to back: one communicator group. */
    zc_status rc = ZC_OK;
    bool io = false;
    for (int k = 0; k < e->nchunks; k++) {
        zc_chunk *c = &e->chunks[k];
        if (!c->gather || !zc__param_offloaded(e, c))
            continue;
        /* Looked at for every gathered chunk, also after a failure: a rank
         * that stopped early must still agree when the others do. */
        io = io || zc__param_rank_local_io(e, k);
        const void *send = NULL;
        if (rc == ZC_OK)
            rc = zc__param_send(e, k, c->gather, &send);
    }
    /* Whether a shard is read is the same on every rank (the homes' layout
     * and the gathered chunks are), so either every rank agrees here or none
     * does. */
    if (io)
        rc = zc__eng_agree(e, rc, "stage 3: reading the parameter shards to refresh");
    ZC_CHECK(rc);
    /* From the primary shards over the shard group, PUBLISH_BATCH chunks to
     * a communicator group. */
    enum { PUBLISH_BATCH = 64 };
    zc_gather_req req[PUBLISH_BATCH];
    int n = 0;
    for (int k = 0; k <= e->nchunks; k++) {
        zc_chunk *c = k < e->nchunks ? &e->chunks[k] : NULL;
        if (n == PUBLISH_BATCH || (!c && n)) {
            ZC_CHECK(zc__eng_shard_gathers(e, req, n, e->pdt, true));
            n = 0;
        }
        if (!c || !c->gather)
            continue;
        const void *send = zc__param_offloaded(e, c)
                               ? zc__elem(c->gather, (int64_t)e->srank * c->shard, e->pesz)
                               : c->param;
        req[n++] = (zc_gather_req){send, c->gather, (size_t)c->shard};
        e->gathers_cur++;
        c->gathers_cur++;
    }
    return ZC_OK;
}

/* The end of an evaluation pass (its trace is e->trace): the pass's
 * activations become the recorded order. A pass that stopped before the
 * recorded activations ran out (fewer batches) keeps the longer record: its
 * activations were a prefix of it, so nothing changed. What the pass
 * gathered ahead and holds no more is dropped. */
void zc__z3_eval_end(zc_engine *e)
{
    zc_trace *t = e->trace;
    /* A record cut at its capacity goes on with its period, if it has one:
     * an evaluation pass is usually one forward, batch after batch. */
    t->period = t->truncated ? trace_period(t) : 0;
    if (t->mode == ZC_TRACE_RECORD && e->pass.evals == 0)
        ZC_LOGI("zero3", "evaluation pass 1: acquire order recorded (%lld chunk activations%s); "
                "prefetch is on from the next one",
                (long long)t->len, t->truncated ? ", truncated" : "");
    if (t->truncated && t->mode == ZC_TRACE_RECORD)
        ZC_LOGI("zero3", "evaluation pass %lld: the trace holds the first %lld activations; %s",
                (long long)e->pass.evals + 1, (long long)t->len,
                t->period ? "they repeat, so prefetch follows their period past them"
                          : "prefetch stops where it ends");
    t->mode = ZC_TRACE_COMPLETE;
    t->pos = 0;
    zc__z3_quiesce(e);
}

void zc__z3_free_all(zc_engine *e)
{
    for (int k = 0; k < e->nchunks; k++)
        drop_chunk(e, &e->chunks[k]);
}
