/* The reduction bucket: a micro-step's gradient reductions issued a bucket
 * at a time, each bucket as one communicator group, instead of one
 * collective per chunk.
 *
 * Why. Every collective is a rendezvous: the rank that arrives first waits
 * for the last. On a machine whose cores other jobs share, the rank waited
 * for is often not running, and each rendezvous can cost the waiter a
 * scheduler slice. A model laid out in many small chunks (a chunk per
 * transformer block, as stage 3 wants) paid one rendezvous per chunk; a
 * bucket pays one for all of its chunks (the local communicator runs a
 * group as one rendezvous, MPI posts a group's messages together, NCCL
 * launches it as one).
 *
 * How much. DeepSpeed's reduce_bucket_size, the elements of gradient
 * reduced together: a ready chunk joins the bucket, and the bucket is
 * reduced when it holds at least e->bucket elements (the chunk size target,
 * reduce_bucket_size or zc_engine_options.bucket_elems), when the
 * micro-step's last gradient is ready, or - stages 2/3 - when a chunk needs
 * a gradient buffer that only the bucket's held buffers could give (the
 * pool reserved at build does not grow for the bucket, so stage 2's memory
 * is what it was; the bucket is then as large as the pool allows).
 *
 * Every decision reads only the call sequence and the layout, which are the
 * same on every rank, so every rank issues the same groups. A chunk's
 * collective is the one it had alone (same buffers, counts and rank-order
 * sums), so the results carry the same bits as one collective per chunk.
 *
 * A failure while the bucket is reduced leaves some of its chunks reduced
 * and others not, so it breaks the engine (like a failed collective). */
#include "core/engine.h"

/* The all-reduce across MiCS's replicas of the bucket's shards, on the
 * reductions' stream: stage 1's fp32 copy of its slice (rgrad), stages 2/3's
 * fp32 gradient shard. */
static zc_status replica_reduce(zc_engine *e)
{
    ZC_CHECK(zc__eng_grp_start(e, ZC_GRP_REPLICA));
    zc_status rc = ZC_OK;
    for (int k = 0; k < e->nchunks && rc == ZC_OK; k++) {
        zc_chunk *c = &e->chunks[k];
        if (c->in_bucket)
            rc = zc__eng_grp_all_reduce(e, ZC_GRP_REPLICA, c->rgrad ? c->rgrad : c->acc,
                                        (size_t)c->shard, ZC_DTYPE_F32, true, e->comm_stream);
    }
    const zc_status end = zc__eng_grp_end(e, ZC_GRP_REPLICA);
    if (rc == ZC_OK)
        rc = end;
    return rc == ZC_OK ? zc__reduction_done(e, -1) : rc;
}

zc_status zc__bucket_flush(zc_engine *e)
{
    if (e->bucket_chunks == 0)
        return ZC_OK;
    const bool last = e->bucket_last_micro;
    const int n = e->bucket_chunks;
    e->bucket_chunks = 0;
    e->bucket_held = 0;
    zc__timers_push(&e->timers, ZC_TIMER_REDUCE);
    const int64_t t0 = zc__tl_begin();
    zc_status rc = zc__eng_group_start(e);
    if (rc == ZC_OK) {
        /* In chunk order: the same on every rank whatever the order the
         * chunks became ready in. */
        for (int k = 0; k < e->nchunks && rc == ZC_OK; k++) {
            zc_chunk *c = &e->chunks[k];
            if (!c->in_bucket)
                continue;
            bool launched = false;
            rc = e->pol->reduce_launch(e, c, last, &launched);
            if (rc == ZC_OK && !launched) {
                c->in_bucket = false;
                c->reduced = true;
            }
        }
        /* Closed even after a failure inside (a group is per thread). */
        const zc_status end = zc__eng_group_end(e);
        if (rc == ZC_OK)
            rc = end;
    }
    for (int k = 0; k < e->nchunks && rc == ZC_OK; k++) {
        zc_chunk *c = &e->chunks[k];
        if (c->in_bucket)
            rc = e->pol->reduce_finish(e, c);
    }
    /* MiCS: the window's reduced shards are all-reduced across the replicas
     * (every replica holds the same shard index), once per window like
     * DeepSpeed's MiCS_Optimizer, in fp32, as one communicator group. */
    if (rc == ZC_OK && last && zc__grp_on(e, ZC_GRP_REPLICA))
        rc = replica_reduce(e);
    for (int k = 0; k < e->nchunks; k++) {
        zc_chunk *c = &e->chunks[k];
        if (!c->in_bucket)
            continue;
        c->in_bucket = false;
        c->reduced = rc == ZC_OK;
    }
    zc__tl_span(t0, ZC_TLK_SPAN, "reduce bucket", -1, n);
    zc__timers_pop(&e->timers);
    if (rc != ZC_OK) {
        zc__error_context("reducing a bucket of %d chunks", n);
        zc__eng_break(e, rc, zc_last_error());
    }
    return rc;
}

zc_status zc__bucket_add(zc_engine *e, zc_chunk *c, bool last_micro)
{
    /* Stages 2/3: the chunk's buffer is taken now if no gradient was
     * written (its zero gradient), flushing the bucket when the pool is
     * out of slots, so that reducing the bucket never needs a slot. Stages
     * 0/1 return the resident buffer. */
    void *buf = NULL;
    ZC_CHECK(e->pol->grad_buffer(e, c, &buf));
    c->in_bucket = true;
    e->bucket_chunks++;
    e->bucket_held += c->padded;
    e->bucket_last_micro = last_micro;
    if (e->bucket_held >= e->bucket || e->nready == e->nparams)
        return zc__bucket_flush(e);
    return ZC_OK;
}

void zc__bucket_clear(zc_engine *e)
{
    for (int k = 0; k < e->nchunks; k++)
        e->chunks[k].in_bucket = false;
    e->bucket_chunks = 0;
    e->bucket_held = 0;
}
