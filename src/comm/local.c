/* The local communicator: W ranks as threads of one process.
 *
 * Each collective is three phases: every rank records an event on its stream
 * ("my buffers are final here"), posts it with its buffer pointers and counts
 * in its slot and meets the others at a barrier; each rank's stream then waits
 * on the other ranks' events and does the rank's share of the work reading
 * the others' buffers (through the bound device's copy and reduce_sum, so the
 * same code runs on host memory and on one GPU shared by the ranks); each
 * rank records a second event after its share, meets the others again, and
 * its stream waits on their second events, so no rank's later work changes a
 * buffer another rank is still reading or writing. The barriers are between
 * the ranks' threads only: the host never waits for device work here (one
 * GPU shared by thread ranks keeps every CPU thread ahead of its stream).
 * Results are ordered on the caller's stream, as with NCCL. Sums run in rank
 * order, so every rank and every stage that reduces an element gets the same
 * bits.
 *
 * Who writes what (this is what makes in-place use safe):
 *   all_reduce:     rank r owns the element range [count*r/W, count*(r+1)/W):
 *                   it is the only rank that reads that range of any send
 *                   buffer, and it writes the range into every recv buffer
 *                   only after computing the sum into its own recv.
 *   reduce_scatter: rank r reads only slice r of every send buffer and writes
 *                   only its own recv.
 *   all_gather:     rank r writes only its own recv; it reads the other ranks'
 *                   send buffers, which lie outside its recv.
 *
 * Why two events per rank are enough: rank r re-records its first event only
 * in its next collective, after that one's first barrier, which every other
 * rank passes only after it queued its waits on this collective's events
 * (a stream waits on what the event captured when the wait was queued); the
 * second event likewise. The MAX reduction (small control payloads) reads
 * values on the host and so still waits for its stream.
 *
 * Groups. Collectives issued between group_start and group_end are queued
 * (they must share one stream) and run at group_end in one rendezvous - one
 * pair of barriers for all of them, their shares queued in issue order -
 * so a step's grouped gathers or bucket of reductions costs one meeting of
 * the ranks, not one per collective. A group of more than LOCAL_GROUP_MAX
 * runs in several. Every rank must queue the same collectives in the same
 * order (checked, like a single collective).
 *
 * Waiting. A rank that arrives first spins for SPIN_S by the clock, then
 * sleeps on a futex: it never holds its core for longer than that while the
 * rank it waits for may need it. The barrier takes no lock: arrivals are an
 * atomic count, the last one opens it by moving the generation and wakes the
 * sleepers with one futex call. A mutex with a condition variable cost a
 * second sleep when the cores are shared: the woken rank had to take the
 * mutex back, and when the rank that opened the barrier lost its core while
 * still holding it, the woken one slept again until that rank's next turn,
 * a scheduler slice for nothing (bench/RESULTS.md, "Contention").
 *
 * A rank that never arrives makes the others fail after ZC_COMM_TIMEOUT
 * seconds (default 600) instead of hanging, and the group stays broken. */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/local_internal.h"
#include "base/clock.h"
#include "base/log.h"

static void count(uint64_t *n) { __atomic_fetch_add(n, 1, __ATOMIC_RELAXED); }


/* What a rank posted, for messages: its first collective (a group is named
 * by it), or a barrier. */
static const char *slot_kind(const local_slot *s)
{
    return zc__coll_kind_name(s->nops ? s->ops[0].kind : K_BARRIER);
}

static size_t slot_count(const local_slot *s)
{
    return s->nops ? s->ops[0].count : 0;
}

/* A short spin before sleeping: a peer that arrives within it (the ranks
 * of a step meet its small exchanges a few microseconds apart once the
 * gradient reduction has lined them up) is met without the futex sleep and
 * wake-up, whose latency on a busy machine is a scheduler slice, not
 * microseconds. Bounded by the clock, never by a count, so it is as short
 * on every CPU; after it the wait blocks on the condition variable and
 * leaves the core to the rank it waits for. */
#define SPIN_S 30e-6

/* Spins until the generation moves past gen (or the group breaks) or
 * SPIN_S passes. True when the barrier opened or the group broke. */
static bool spin_for(local_group *g, unsigned long gen)
{
    const double until = zc__now_s() + SPIN_S;
    do {
        for (int i = 0; i < 64; i++) {
            if (__atomic_load_n(&g->generation, __ATOMIC_ACQUIRE) != gen ||
                __atomic_load_n(&g->broken, __ATOMIC_ACQUIRE))
                return true;
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        }
    } while (zc__now_s() < until);
    return false;
}

/* Sleeps until g->wake differs from w or the CLOCK_MONOTONIC deadline
 * passes (or a signal or spurious wake-up: the caller checks again). */
static void futex_sleep(local_group *g, uint32_t w, const struct timespec *deadline)
{
    syscall(SYS_futex, &g->wake, FUTEX_WAIT_BITSET_PRIVATE, w, deadline, NULL,
            FUTEX_BITSET_MATCH_ANY);
}

/* Moves the futex word and wakes every sleeper. */
static void futex_wake_all(local_group *g)
{
    __atomic_fetch_add(&g->wake, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, &g->wake, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Barrier with a deadline. Returns ZC_ERR_COMM when the group is broken or the
 * deadline passes (which breaks the group for everyone). */
zc_status zc__local_wait(local_comm *c)
{
    local_group *g = c->g;
    const local_slot *mine = &g->slots[c->base.rank];
    if (__atomic_load_n(&g->broken, __ATOMIC_ACQUIRE))
        return ZC_ERR(ZC_ERR_COMM, "local comm rank %d: %s #%lu: the group is broken by an "
                                   "earlier failure or timeout",
                      c->base.rank, slot_kind(mine), c->seq);
    /* Read before arriving: the barrier cannot open until this rank has. */
    const unsigned long gen = __atomic_load_n(&g->generation, __ATOMIC_ACQUIRE);
    /* acq_rel: the last arrival sees every rank's slot (the counts' release
     * sequence), and opens the barrier with a release the others acquire. */
    if (__atomic_add_fetch(&g->arrived, 1, __ATOMIC_ACQ_REL) == g->world) {
        __atomic_store_n(&g->arrived, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&g->generation, gen + 1, __ATOMIC_RELEASE);
        futex_wake_all(g);
        return ZC_OK;
    }
    if (!spin_for(g, gen)) {
        count(&c->waits);
        /* The futex sleeps to the CLOCK_MONOTONIC deadline (a wall-clock
         * step cannot stretch it); the loop checks the same clock. */
        const double end = zc__now_s() + g->timeout_s; /* read first: <= deadline */
        const struct timespec deadline = zc__deadline_in(g->timeout_s);
        for (;;) {
            const uint32_t w = __atomic_load_n(&g->wake, __ATOMIC_ACQUIRE);
            if (__atomic_load_n(&g->generation, __ATOMIC_ACQUIRE) != gen ||
                __atomic_load_n(&g->broken, __ATOMIC_ACQUIRE))
                break;
            if (zc__now_s() >= end) {
                if (__atomic_load_n(&g->generation, __ATOMIC_ACQUIRE) != gen)
                    break;
                const int waiting_for =
                    g->world - __atomic_load_n(&g->arrived, __ATOMIC_ACQUIRE);
                __atomic_store_n(&g->broken, 1, __ATOMIC_RELEASE);
                futex_wake_all(g);
                return ZC_ERR(ZC_ERR_COMM,
                              "local comm rank %d: %s #%lu (%zu elements) timed out after %g s "
                              "waiting for %d of %d ranks (ZC_COMM_TIMEOUT)",
                              c->base.rank, slot_kind(mine), c->seq, slot_count(mine),
                              g->timeout_s, waiting_for, g->world);
            }
            count(&c->sleeps);
            futex_sleep(g, w, &deadline);
        }
    }
    if (__atomic_load_n(&g->generation, __ATOMIC_ACQUIRE) == gen)
        return ZC_ERR(ZC_ERR_COMM, "local comm rank %d: %s #%lu: another rank failed",
                      c->base.rank, slot_kind(mine), c->seq);
    return ZC_OK;
}

static bool same_op(const local_op *a, const local_op *b)
{
    return a->kind == b->kind && a->count == b->count && a->dt == b->dt && a->op == b->op &&
           a->root == b->root;
}

/* Phase 1: mark this rank's buffers final on its stream, post the calls and
 * check every rank made the same ones, in the same order. */
static zc_status post(local_comm *c, const local_op *ops, int nops, void *stream)
{
    local_group *g = c->g;
    zc_device *d = c->base.dev;
    c->seq += (unsigned long)nops;
    ZC_CHECK(d->ops->event_record(d, c->ev_ready, stream));
    g->slots[c->base.rank] = (local_slot){ops, nops, c->ev_ready, c->ev_done};
    ZC_CHECK(zc__local_wait(c));
    for (int r = 0; r < g->world; r++) {
        const local_slot *o = &g->slots[r];
        int bad = o->nops != nops ? (o->nops < nops ? o->nops : nops) : -1;
        for (int i = 0; i < nops && bad < 0; i++)
            if (!same_op(&o->ops[i], &ops[i]))
                bad = i;
        if (bad < 0)
            continue;
        /* Both sides of the first difference: a collective, or the end of
         * one rank's calls (a barrier, a shorter group). */
        const local_op none = {.kind = K_BARRIER};
        const local_op *a = bad < nops ? &ops[bad] : &none;
        const local_op *b = bad < o->nops ? &o->ops[bad] : &none;
        zc_status rc = ZC_ERR(ZC_ERR_COMM,
                              "local comm: collective mismatch at #%lu: rank %d called %s "
                              "(%zu x %s) but rank %d called %s (%zu x %s)",
                              c->seq - (unsigned long)nops + (unsigned long)bad + 1, c->base.rank,
                              zc__coll_kind_name(a->kind), a->count,
                              zc_dtype_name((zc_dtype)a->dt), r, zc__coll_kind_name(b->kind),
                              b->count, zc_dtype_name((zc_dtype)b->dt));
        zc__local_wait(c); /* everyone sees the mismatch; keep phases aligned */
        return rc;
    }
    return ZC_OK;
}

/* Orders this rank's stream after every other rank's event of one phase
 * (offset of ready or done in the slot). */
static zc_status wait_peers(local_comm *c, size_t which, void *stream)
{
    local_group *g = c->g;
    zc_device *d = c->base.dev;
    for (int r = 0; r < g->world; r++) {
        if (r == c->base.rank)
            continue;
        void *ev = *(void **)((char *)&g->slots[r] + which);
        ZC_CHECK(d->ops->stream_wait_event(d, stream, ev));
    }
    return ZC_OK;
}

/* Phase 2's start: the others' buffers are final on this rank's stream. */
static zc_status after_peers_ready(local_comm *c, void *stream)
{
    return wait_peers(c, offsetof(local_slot, ready), stream);
}

/* Phase 3: every rank has queued its reads and writes; this rank's stream
 * goes on only after all of them. */
static zc_status finish(local_comm *c, zc_status work_rc, void *stream)
{
    zc_device *d = c->base.dev;
    zc_status rc = d->ops->event_record(d, c->ev_done, stream);
    if (work_rc == ZC_OK)
        work_rc = rc;
    rc = zc__local_wait(c);
    if (rc == ZC_OK)
        rc = wait_peers(c, offsetof(local_slot, done), stream);
    return work_rc != ZC_OK ? work_rc : rc;
}

static zc_status check_dtype(local_comm *c, const char *what, zc_dtype dt)
{
    if (zc_dtype_size(dt) == 0)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "local comm rank %d %s: unknown dtype %d", c->base.rank,
                      what, (int)dt);
    return ZC_OK;
}

/* Rank r's part of the i-th collective of this rendezvous. */
static const local_op *peer_op(const local_comm *c, int r, int i)
{
    return &c->g->slots[r].ops[i];
}

static zc_status max_reduce_host(local_comm *c, int i, size_t lo, size_t hi, zc_dtype dt,
                                 void *stream)
{
    /* MAX is for small control payloads (overflow flags): stage through host
     * memory element by element. */
    local_group *g = c->g;
    zc_device *d = c->base.dev;
    size_t es = zc_dtype_size(dt);
    zc_copy_kind from = d->mem_kind == ZC_MEMKIND_DEVICE ? ZC_COPY_D2H : ZC_COPY_H2H;
    zc_copy_kind to = d->mem_kind == ZC_MEMKIND_DEVICE ? ZC_COPY_H2D : ZC_COPY_H2H;
    for (size_t x = lo; x < hi; x++) {
        double best = 0;
        unsigned char buf[8], out[8] = {0};
        for (int r = 0; r < g->world; r++) {
            ZC_CHECK(d->ops->copy(d, buf, (const char *)peer_op(c, r, i)->send + x * es, es,
                                  from, stream));
            ZC_CHECK(d->ops->stream_sync(d, stream));
            double v;
            switch (dt) {
            case ZC_DTYPE_F64: { double y; memcpy(&y, buf, 8); v = y; break; }
            case ZC_DTYPE_I32: { int32_t y; memcpy(&y, buf, 4); v = y; break; }
            case ZC_DTYPE_F32: { float y; memcpy(&y, buf, 4); v = y; break; }
            default:
                return ZC_ERR(ZC_ERR_INVALID_ARG, "local comm all_reduce MAX: dtype %s not "
                                                  "supported (use fp32, fp64 or int32)",
                              zc_dtype_name(dt));
            }
            if (r == 0 || v > best || v != v) { /* NaN wins, like an overflow flag */
                best = v;
                memcpy(out, buf, es);
            }
        }
        for (int r = 0; r < g->world; r++)
            ZC_CHECK(d->ops->copy(d, (char *)peer_op(c, r, i)->recv + x * es, out, es, to,
                                  stream));
        ZC_CHECK(d->ops->stream_sync(d, stream));
    }
    return ZC_OK;
}

/* This rank's share of the i-th collective, queued on its stream after the
 * peers' ready events. */
static zc_status work(local_comm *c, int i, void *stream)
{
    local_group *g = c->g;
    zc_device *d = c->base.dev;
    const local_op *o = peer_op(c, c->base.rank, i);
    const int r = c->base.rank, W = g->world;
    const zc_dtype dt = (zc_dtype)o->dt;
    const size_t es = zc_dtype_size(dt);
    const zc_copy_kind same = d->mem_kind == ZC_MEMKIND_DEVICE ? ZC_COPY_D2D : ZC_COPY_H2H;
    const void *srcs[W];
    switch (o->kind) {
    case K_ALL_REDUCE: {
        size_t lo = o->count * (size_t)r / (size_t)W, hi = o->count * (size_t)(r + 1) / (size_t)W;
        if (hi <= lo)
            return ZC_OK;
        if (o->op == ZC_RED_MAX)
            return max_reduce_host(c, i, lo, hi, dt, stream);
        for (int k = 0; k < W; k++)
            srcs[k] = (const char *)peer_op(c, k, i)->send + lo * es;
        void *mine = (char *)o->recv + lo * es;
        zc_status rc = d->ops->reduce_sum(d, mine, srcs, W, dt, hi - lo, stream);
        for (int k = 0; k < W && rc == ZC_OK; k++)
            if (k != r)
                rc = d->ops->copy(d, (char *)peer_op(c, k, i)->recv + lo * es, mine,
                                  (hi - lo) * es, same, stream);
        return rc;
    }
    case K_REDUCE_SCATTER:
        if (!o->count)
            return ZC_OK;
        for (int k = 0; k < W; k++)
            srcs[k] = (const char *)peer_op(c, k, i)->send + (size_t)r * o->count * es;
        return d->ops->reduce_sum(d, o->recv, srcs, W, dt, o->count, stream);
    case K_ALL_GATHER: {
        const size_t bytes = o->count * es;
        zc_status rc = ZC_OK;
        for (int k = 0; k < W && rc == ZC_OK && bytes; k++)
            rc = d->ops->copy(d, (char *)o->recv + (size_t)k * bytes, peer_op(c, k, i)->send,
                              bytes, same, stream);
        return rc;
    }
    case K_ALL_TO_ALL: {
        /* Block k of this rank's recv is block r of rank k's send. */
        const size_t bytes = o->count * es;
        zc_status rc = ZC_OK;
        for (int k = 0; k < W && rc == ZC_OK && bytes; k++)
            rc = d->ops->copy(d, (char *)o->recv + (size_t)k * bytes,
                              (const char *)peer_op(c, k, i)->send + (size_t)r * bytes, bytes,
                              same, stream);
        return rc;
    }
    case K_BROADCAST:
        if (r == o->root || !o->count)
            return ZC_OK;
        return d->ops->copy(d, o->recv, peer_op(c, o->root, i)->send, o->count * es, same,
                            stream);
    default:
        return ZC_ERR(ZC_ERR_INTERNAL, "local comm: unknown collective kind %d", o->kind);
    }
}

/* One rendezvous for nops collectives on one stream: post, every rank's
 * share of each in order, finish. */
static zc_status run(local_comm *c, const local_op *ops, int nops, void *stream)
{
    count(&c->meetings);
    ZC_CHECK(post(c, ops, nops, stream));
    zc_status rc = after_peers_ready(c, stream);
    for (int i = 0; i < nops && rc == ZC_OK; i++)
        rc = work(c, i, stream);
    return finish(c, rc, stream);
}

/* Runs what the group has queued. */
static zc_status run_queued(local_comm *c)
{
    const int n = c->nqueued;
    c->nqueued = 0;
    return n ? run(c, c->queued, n, c->group_stream) : ZC_OK;
}

/* A collective now, or queued in the open group (run when the group ends or
 * holds LOCAL_GROUP_MAX). A group's collectives share one stream: the
 * rendezvous orders that stream once for all of them. */
static zc_status issue(local_comm *c, const local_op *op, void *stream)
{
    if (!c->in_group)
        return run(c, op, 1, stream);
    if (c->nqueued && stream != c->group_stream)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "local comm rank %d: %s in a group on another stream than the group's "
                      "first collective (the local communicator runs a group on one stream)",
                      c->base.rank, zc__coll_kind_name(op->kind));
    if (c->nqueued == LOCAL_GROUP_MAX)
        ZC_CHECK(run_queued(c));
    c->group_stream = stream;
    c->queued[c->nqueued++] = *op;
    return ZC_OK;
}

static zc_status local_all_reduce(zc_comm *base, const void *send, void *recv, size_t count,
                                  zc_dtype dt, zc_red_op op, void *stream)
{
    local_comm *c = (local_comm *)base;
    ZC_CHECK(check_dtype(c, "all_reduce", dt));
    /* Checked before posting, from arguments every rank shares, so all ranks
     * refuse the call (a rank whose share of a short buffer is empty would
     * otherwise return success with nothing written). */
    if (op != ZC_RED_SUM && op != ZC_RED_MAX)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "local comm rank %d all_reduce: unknown op %d",
                      base->rank, (int)op);
    if (op == ZC_RED_MAX && dt != ZC_DTYPE_F32 && dt != ZC_DTYPE_F64 && dt != ZC_DTYPE_I32)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "local comm rank %d all_reduce MAX: dtype %s not supported (use fp32, "
                      "fp64 or int32)",
                      base->rank, zc_dtype_name(dt));
    const local_op o = {send, recv, count, (int)dt, (int)op, 0, K_ALL_REDUCE};
    return issue(c, &o, stream);
}

static zc_status local_reduce_scatter(zc_comm *base, const void *send, void *recv,
                                      size_t recv_count, zc_dtype dt, void *stream)
{
    local_comm *c = (local_comm *)base;
    ZC_CHECK(check_dtype(c, "reduce_scatter", dt));
    const local_op o = {send, recv, recv_count, (int)dt, 0, 0, K_REDUCE_SCATTER};
    return issue(c, &o, stream);
}

static zc_status local_all_gather(zc_comm *base, const void *send, void *recv, size_t send_count,
                                  zc_dtype dt, void *stream)
{
    local_comm *c = (local_comm *)base;
    ZC_CHECK(check_dtype(c, "all_gather", dt));
    const local_op o = {send, recv, send_count, (int)dt, 0, 0, K_ALL_GATHER};
    return issue(c, &o, stream);
}

static zc_status local_all_to_all(zc_comm *base, const void *send, void *recv, size_t count,
                                  zc_dtype dt, void *stream)
{
    local_comm *c = (local_comm *)base;
    ZC_CHECK(check_dtype(c, "all_to_all", dt));
    const local_op o = {send, recv, count, (int)dt, 0, 0, K_ALL_TO_ALL};
    return issue(c, &o, stream);
}

static zc_status local_broadcast(zc_comm *base, void *buf, size_t count, zc_dtype dt, int root,
                                 void *stream)
{
    local_comm *c = (local_comm *)base;
    ZC_CHECK(check_dtype(c, "broadcast", dt));
    if (root < 0 || root >= c->g->world)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "local comm broadcast: root %d outside 0..%d", root,
                      c->g->world - 1);
    const local_op o = {buf, buf, count, (int)dt, 0, root, K_BROADCAST};
    return issue(c, &o, stream);
}

static zc_status local_barrier(zc_comm *base)
{
    local_comm *c = (local_comm *)base;
    if (c->in_group)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "local comm rank %d: barrier inside a group",
                      base->rank);
    c->seq++;
    count(&c->meetings);
    c->g->slots[base->rank] = (local_slot){NULL, 0, c->ev_ready, c->ev_done};
    return zc__local_wait(c);
}

static zc_status local_group_start(zc_comm *base)
{
    local_comm *c = (local_comm *)base;
    if (c->in_group)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "local comm rank %d: groups do not nest", base->rank);
    c->in_group = true;
    c->nqueued = 0;
    return ZC_OK;
}

static zc_status local_group_end(zc_comm *base)
{
    local_comm *c = (local_comm *)base;
    if (!c->in_group)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "local comm rank %d: group_end without group_start",
                      base->rank);
    c->in_group = false;
    return run_queued(c);
}

static void drop_events(local_comm *c)
{
    zc_device *d = c->base.dev;
    if (c->ev_ready)
        d->ops->event_destroy(d, c->ev_ready);
    if (c->ev_done)
        d->ops->event_destroy(d, c->ev_done);
    c->ev_ready = c->ev_done = NULL;
}

/* Makes this rank's events on dev, then drops the old ones: a failure
 * changes nothing. */
static zc_status local_bind_device(zc_comm *base, zc_device *dev)
{
    if (!dev)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "local comm bind_device: NULL device");
    local_comm *c = (local_comm *)base;
    void *ready = NULL, *done = NULL;
    zc_status rc = dev->ops->event_create(dev, &ready);
    if (rc == ZC_OK)
        rc = dev->ops->event_create(dev, &done);
    if (rc != ZC_OK) {
        if (ready)
            dev->ops->event_destroy(dev, ready);
        zc__error_context("local comm rank %d: its events on device %s", base->rank,
                          dev->ops->name);
        return rc;
    }
    drop_events(c);
    c->ev_ready = ready;
    c->ev_done = done;
    base->dev = dev;
    return ZC_OK;
}

/* Before the bound device goes: its events go first, the host takes over
 * (its events cannot fail). */
static void local_unbind_device(zc_comm *base)
{
    local_comm *c = (local_comm *)base;
    drop_events(c);
    base->dev = zc__device_host();
    (void)local_bind_device(base, base->dev);
}

/* The group's memory (its mutex aside). */
static void free_group_mem(local_group *g)
{
    const size_t W = (size_t)g->world;
    zc__host_free(NULL, ZC_MEM_OTHER, g->slots, sizeof(local_slot) * W);
    zc__host_free(NULL, ZC_MEM_OTHER, g->split_rec, sizeof(int32_t) * (ZC_SPLIT_REC + 1) * W);
    zc__host_free(NULL, ZC_MEM_OTHER, g->split_out, sizeof(local_comm_ptrs) * W);
    zc__host_free(NULL, ZC_MEM_OTHER, g, sizeof *g);
}

static void group_unref(local_group *g)
{
    pthread_mutex_lock(&g->mu);
    int left = --g->refs;
    pthread_mutex_unlock(&g->mu);
    if (left)
        return;
    pthread_mutex_destroy(&g->mu);
    free_group_mem(g);
}

static void local_destroy(zc_comm *base)
{
    local_comm *c = (local_comm *)base;
    local_group *g = c->g;
    drop_events(c);
    zc__host_free(NULL, ZC_MEM_OTHER, c, sizeof *c);
    group_unref(g);
}

static void local_wait_counts(const zc_comm *comm, zc_comm_wait_counts *out)
{
    const local_comm *c = (const local_comm *)comm;
    *out = (zc_comm_wait_counts){.meetings = __atomic_load_n(&c->meetings, __ATOMIC_RELAXED),
                                 .waits = __atomic_load_n(&c->waits, __ATOMIC_RELAXED),
                                 .sleeps = __atomic_load_n(&c->sleeps, __ATOMIC_RELAXED)};
}

static const zc_comm_ops local_ops = {
    .name = "local",
    .all_reduce = local_all_reduce,
    .reduce_scatter = local_reduce_scatter,
    .all_gather = local_all_gather,
    .all_to_all = local_all_to_all,
    .broadcast = local_broadcast,
    .barrier = local_barrier,
    .group_start = local_group_start,
    .group_end = local_group_end,
    .bind_device = local_bind_device,
    .unbind_device = local_unbind_device,
    .destroy = local_destroy,
    .split = zc__local_split,
    .wait_counts = local_wait_counts,
};

zc_status zc__local_make(int world, double timeout_s, const int *world_rank, int world_size,
                         int node_ranks, zc_comm **comms)
{
    local_group *g = NULL;
    zc_status rc;
    int made = 0;
    const size_t W = (size_t)world;
    ZC_CHECK(zc__host_alloc(NULL, ZC_MEM_OTHER, sizeof *g, "local comm group", (void **)&g));
    rc = zc__host_alloc(NULL, ZC_MEM_OTHER, sizeof(local_slot) * W, "local comm slots",
                        (void **)&g->slots);
    if (rc == ZC_OK)
        rc = zc__host_alloc(NULL, ZC_MEM_OTHER, sizeof(int32_t) * (ZC_SPLIT_REC + 1) * W,
                            "local comm split records", (void **)&g->split_rec);
    if (rc == ZC_OK)
        rc = zc__host_alloc(NULL, ZC_MEM_OTHER, sizeof(local_comm_ptrs) * W,
                            "local comm split results", (void **)&g->split_out);
    if (rc != ZC_OK) {
        g->world = world; /* free_group_mem's sizes */
        free_group_mem(g);
        return rc;
    }
    g->world = world;
    g->refs = world;
    g->timeout_s = timeout_s;
    pthread_mutex_init(&g->mu, NULL);
    for (; made < world; made++) {
        local_comm *c;
        rc = zc__host_alloc(NULL, ZC_MEM_OTHER, sizeof *c, "local comm rank", (void **)&c);
        if (rc != ZC_OK)
            goto fail;
        c->base.ops = &local_ops;
        c->base.rank = made;
        c->base.world = world;
        c->base.local_rank = made;
        c->base.local_world = world;
        c->base.world_rank = world_rank ? world_rank[made] : made;
        c->base.node_ranks = node_ranks;
        c->base.world_size = world_size;
        c->g = g;
        comms[made] = &c->base;
        c->base.dev = zc__device_host();
        rc = local_bind_device(&c->base, c->base.dev); /* the host's events: cannot fail */
        if (rc != ZC_OK) {
            made++;
            goto fail;
        }
    }
    return ZC_OK;
fail:
    /* Drop the references of the ranks never made, then the ones made. */
    g->refs = made ? made : 1;
    for (int r = 0; r < made; r++)
        local_destroy(comms[r]);
    if (!made)
        group_unref(g);
    for (int r = 0; r < world; r++)
        comms[r] = NULL;
    return rc;
}

zc_status zc_comm_local_world(int world, zc_comm **comms)
{
    zc__error_clear();
    if (!comms)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_comm_local_world: comms is NULL");
    if (world <= 0)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_comm_local_world: world size %d (must be >= 1)",
                      world);
    if (world > 4096)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_comm_local_world: world size %d is too large "
                                          "for in-process ranks (max 4096)", world);
    /* Before anything is made: a bad value fails here, never as a wait
     * that does not end. */
    double timeout_s = 0;
    ZC_CHECK(zc__comm_timeout_env(&timeout_s));
    ZC_CHECK(zc__log_env_check());
    /* Threads of one process share its node. */
    return zc__local_make(world, timeout_s, NULL, world, world, comms);
}
