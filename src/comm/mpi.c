/* The MPI communicator: see mpi.h for the contract and the algorithms. MPI's
 * process-wide lifetime is mpi_lib.c, the arithmetic of the sums mpi_sum.c. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "comm/mpi.h"
#include "base/backoff.h"
#include "base/clock.h"
#include "base/alloc.h"
#include "base/log.h"
#include "comm/mpi_parts.h"

/* Collectives one group may hold in flight; a longer group finishes its
 * oldest collective early (allowed: results are only promised after
 * group_end). */
#define MAX_INFLIGHT 64

/* One collective in flight: point-to-point requests with every other rank
 * (phase 1: the exchange; all_reduce's phase 2: spreading the sums, posted
 * once phase 1 is done and the slice summed), or one request (barrier). */
typedef struct mpi_op {
    int kind, phase; /* phase 0: slot free */
    zc_dtype dt;
    zc_red_op red;
    size_t count; /* all_reduce: n; reduce_scatter: recv_count; others: count */
    void *recv;
    MPI_Request *reqs; /* 2W, allocated with the communicator */
    int nreq;
    uint64_t seq;
    void *scratch; /* W contributions of this rank's slice; kept between calls */
    const void *own; /* fp32 sums: this rank's contribution read in place from
                      * the send buffer (NULL: it was copied into scratch) */
    size_t scratch_bytes;
    double post_s; /* seconds posting the phase took: a receive whose data had
                    * already come is copied inside MPI_Irecv (wait_req) */
} mpi_op;

typedef struct mpi_comm {
    zc_comm base;
    MPI_Comm mc;
    double timeout_s;
    uint64_t seq;
    int in_group;
    mpi_op ops[MAX_INFLIGHT];
    unsigned head, n; /* in-flight ring, oldest at head */
    int *done_idx;    /* MPI_Testsome's indices: 2W, one wait at a time */
    int broken;
    char failure[512];
    int32_t *split_buf; /* zc_comm_split's exchange (mpi_split.c): ZC_SPLIT_REC words per
                           rank and this rank's own, reserved with the communicator */
    zc_comm_wait_counts counts; /* zc__comm_wait_counts: waits, naps, spin restarts */
} mpi_comm;

static size_t split_buf_bytes(int world)
{
    return sizeof(int32_t) * ZC_SPLIT_REC * ((size_t)world + 1);
}

/* ---- helpers ------------------------------------------------------------- */

/* Element types MPI moves. 16-bit floats travel as uint16: MPI never
 * computes on them, and Open MPI has no bf16 type anyway. */
static MPI_Datatype mpi_type(zc_dtype dt)
{
    switch (dt) {
    case ZC_DTYPE_F32: return MPI_FLOAT;
    case ZC_DTYPE_F64: return MPI_DOUBLE;
    case ZC_DTYPE_I32: return MPI_INT32_T;
    case ZC_DTYPE_F16:
    case ZC_DTYPE_BF16: return MPI_UINT16_T;
    default: return MPI_DATATYPE_NULL;
    }
}

static zc_status broken_err(mpi_comm *c, const char *what)
{
    return ZC_ERR(ZC_ERR_COMM, "mpi comm rank %d/%d: %s: the communicator is broken by an "
                               "earlier failure: %s",
                  c->base.rank, c->base.world, what, c->failure);
}

/* Records the first failure (sticky) and returns it as the call's error. */
static zc_status fail(mpi_comm *c, const char *fmt, ...) ZC_PRINTF(2, 3);
static zc_status fail(mpi_comm *c, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!c->broken) {
        c->broken = 1;
        snprintf(c->failure, sizeof c->failure, "%s", msg);
        ZC_LOGE("comm", "%s", msg);
    }
    return ZC_ERR(ZC_ERR_COMM, "%s", msg);
}

static zc_status mpi_fail(mpi_comm *c, const mpi_op *op, const char *call, int code)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof s, "MPI error %d", code);
    return fail(c, "mpi comm rank %d/%d: %s #%llu (%zu x %s): %s: %s", c->base.rank,
                c->base.world, zc__coll_kind_name(op->kind), (unsigned long long)op->seq, op->count,
                zc_dtype_name(op->dt), call, s);
}

/* A poll that took this long moved data (a fragment copied, a
 * single-copy read of a peer's buffer), not just looked: progress. */
#define POLL_WORK_S 5e-6

/* Polls the op's requests until all complete or the deadline passes.
 * MPI_Testsome is what progresses Open MPI's shared-memory transfers (the
 * receiver copies a large message out of the sender's memory inside the
 * call, fragments move as both sides poll), and nothing blocks until they
 * move, so this polls - with base/backoff.h: a short spin after each sign of
 * progress (a poll that did work; after one that completed a request, as
 * long as that poll took, up to 1 ms: the peer copying its equal half is
 * about as far), then naps of an eighth of the time waited, 50 us to 1 ms
 * (a late peer is seen at most an eighth late). A rank waiting for a
 * late peer leaves its core within 50 us instead of spinning on it: the
 * peer, or whatever else the machine runs, gets the core, and the waiter is
 * not charged for a spin when its own work resumes. (The earlier 2 ms spin
 * and 18 ms of sched_yield cost rank 0 about 20 ms per step waiting in the
 * gradient reduction on a machine whose cores other jobs shared.) The
 * deadline is read after every poll, so a timeout is seen at most one nap
 * (1 ms) late. */
static zc_status wait_req(mpi_comm *c, mpi_op *op, double deadline)
{
    int left = op->nreq;
    zc_backoff b;
    zc__backoff_init(&b);
    double t = b.spin_from - op->post_s; /* the first poll's "took" covers the posting */
    bool waited = false;
    while (left > 0) {
        int n = 0;
        int e = MPI_Testsome(op->nreq, op->reqs, &n, c->done_idx, MPI_STATUSES_IGNORE);
        if (e != MPI_SUCCESS)
            return mpi_fail(c, op, "MPI_Testsome", e);
        if (n == MPI_UNDEFINED) /* every request is MPI_REQUEST_NULL: all completed */
            break;
        left -= n;
        if (left <= 0)
            break;
        /* A poll that completed a request spins on as long as it took; one
         * that only did work spins the shortest time (a poll that lasted
         * because the rank was preempted must not buy a long spin). */
        double took = zc__now_s() - t;
        if (n > 0 || took > POLL_WORK_S) {
            zc__backoff_progress(&b, n > 0 ? took : 0);
            c->counts.restarts++;
        }
        if (!waited) {
            waited = true;
            c->counts.waits++;
        }
        const uint64_t naps = b.naps;
        t = zc__backoff_idle(&b);
        c->counts.sleeps += b.naps - naps;
        if (t > deadline)
            return fail(c, "mpi comm rank %d/%d: %s #%llu (%zu x %s) timed out after %g s "
                           "waiting for the other ranks (ZC_COMM_TIMEOUT)",
                        c->base.rank, c->base.world, zc__coll_kind_name(op->kind),
                        (unsigned long long)op->seq, op->count, zc_dtype_name(op->dt),
                        c->timeout_s);
    }
    return ZC_OK;
}

static zc_status grow(void **buf, size_t *have, size_t need, const char *what)
{
    if (need <= *have)
        return ZC_OK;
    void *p = NULL;
    ZC_CHECK(zc__host_alloc(NULL, ZC_MEM_BUFFERS, need, what, &p));
    zc__host_free(NULL, ZC_MEM_BUFFERS, *buf, *have);
    *buf = p;
    *have = need;
    return ZC_OK;
}

/* ---- the op ring ---------------------------------------------------------- */

static zc_status finish_op(mpi_comm *c, mpi_op *op, double deadline);

/* A free slot, finishing the oldest collective when the ring is full. */
static zc_status take_slot(mpi_comm *c, mpi_op **out)
{
    if (c->n == MAX_INFLIGHT) {
        mpi_op *old = &c->ops[c->head];
        ZC_CHECK(finish_op(c, old, zc__now_s() + c->timeout_s));
    }
    /* An empty ring restarts at slot 0: each slot keeps its scratch between
     * calls, so a step's collectives reuse the same few warm buffers instead
     * of walking all MAX_INFLIGHT slots (each first use page-faults its
     * scratch in, which cost more than the exchange itself). */
    if (c->n == 0)
        c->head = 0;
    mpi_op *op = &c->ops[(c->head + c->n) % MAX_INFLIGHT];
    op->phase = 0;
    *out = op;
    return ZC_OK;
}

static void push(mpi_comm *c) { c->n++; }

/* Tags keep each op's messages apart: the sequence number (mod 2^14, far
 * more than can be in flight) and the phase. Matching would be right without
 * them (every rank posts the same messages in the same order and MPI does not
 * let messages of one pair overtake), the tags make a mismatch fail loudly
 * instead of pairing the wrong buffers. MPI_TAG_UB is at least 32767. */
static int tag_of(const mpi_op *op, int phase)
{
    return (int)((op->seq & 0x3fff) << 1) | (phase - 1);
}

/* Posts, for every other rank k, a receive of rcnt(k) elements at rbuf(k)
 * and a send of scnt(k) elements from sbuf(k); receives first, so a peer's
 * message lands in place. Element offsets are computed in size_t; MPI's int
 * counts were checked against INT_MAX on entry. */
typedef struct xfer {
    const char *sbase; size_t sstride; /* send to k: sbase + k * sstride (or sfix) */
    const char *sfix;                  /* non-NULL: the same send buffer for every k */
    size_t scount;
    char *rbase; size_t rstride;       /* receive from k: rbase + k * rstride */
    size_t rcount;
    const size_t *los;                 /* non-NULL: all_reduce ranges, [W+1] */
    int split_send;                    /* send slice k of los; else receive slice k */
} xfer;

static zc_status post_p2p(mpi_comm *c, mpi_op *op, int phase, const xfer *x)
{
    const int W = c->base.world, r = c->base.rank;
    MPI_Datatype t = mpi_type(op->dt);
    size_t es = zc_dtype_size(op->dt);
    int tag = tag_of(op, phase);
    const double t0 = zc__now_s();
    op->nreq = 0;
    for (int k = 0; k < W; k++) {
        if (k == r)
            continue;
        char *rb = x->rbase + (size_t)k * x->rstride * es;
        size_t rn = x->rcount;
        if (x->los && !x->split_send) {
            rb = x->rbase + x->los[k] * es;
            rn = x->los[k + 1] - x->los[k];
        }
        int e = MPI_Irecv(rb, (int)rn, t, k, tag, c->mc, &op->reqs[op->nreq]);
        if (e != MPI_SUCCESS)
            return mpi_fail(c, op, "MPI_Irecv", e);
        op->nreq++;
    }
    for (int k = 0; k < W; k++) {
        if (k == r)
            continue;
        const char *sb = x->sfix ? x->sfix : x->sbase + (size_t)k * x->sstride * es;
        size_t sn = x->scount;
        if (x->los && x->split_send) {
            sb = x->sbase + x->los[k] * es;
            sn = x->los[k + 1] - x->los[k];
        }
        int e = MPI_Isend(sb, (int)sn, t, k, tag, c->mc, &op->reqs[op->nreq]);
        if (e != MPI_SUCCESS)
            return mpi_fail(c, op, "MPI_Isend", e);
        op->nreq++;
    }
    op->post_s = zc__now_s() - t0;
    return ZC_OK;
}

/* Whether an fp32 sum may read this rank's contribution `own` in place
 * instead of copying it into scratch: the sum writes dst as
 * dst = c0 + c1, then dst += ck for k >= 2, so own may only be dst itself
 * when this rank is 0 or 1 (read before dst is first written). */
static int own_in_place(const mpi_op *op, int rank, const void *own, const void *dst,
                        size_t n)
{
    if (op->dt != ZC_DTYPE_F32 || op->red != ZC_RED_SUM)
        return 0;
    if (!zc__mpi_overlaps(own, dst, n * sizeof(float)))
        return 1;
    return own == dst && rank < 2;
}

/* The rank-order sum (or MAX) of the W contributions in scratch into dst. */
static zc_status reduce_slice(mpi_comm *c, mpi_op *op, void *dst, size_t mine)
{
    const int W = c->base.world;
    if (!mine)
        return ZC_OK;
    if (op->red == ZC_RED_MAX) {
        zc__mpi_max_rank_order(dst, op->scratch, mine, W, op->dt);
        return ZC_OK;
    }
    if (op->dt == ZC_DTYPE_F32) {
        /* The host reduce_sum's fp32 case, reordered only across elements:
         * each element is still ((s0 + s1) + s2) + ..., plain fp32 adds
         * (dst never aliases scratch; own_in_place says when it may alias
         * this rank's own contribution), so the bits are the same. */
        const int r = c->base.rank;
        const float *in = op->scratch;
#define CONTRIB(k) (((k) == r && op->own) ? (const float *)op->own : in + (size_t)(k) * mine)
        float *d = dst;
        if (W == 1) {
            if (d != CONTRIB(0))
                memcpy(d, CONTRIB(0), mine * sizeof(float));
            return ZC_OK;
        }
        zc__mpi_add2_f32(d, CONTRIB(0), CONTRIB(1), mine);
        for (int k = 2; k < W; k++)
            zc__mpi_add_f32(d, CONTRIB(k), mine);
#undef CONTRIB
        return ZC_OK;
    }
    size_t es = zc_dtype_size(op->dt);
    const void *srcs[W];
    for (int k = 0; k < W; k++)
        srcs[k] = (const char *)op->scratch + (size_t)k * mine * es;
    /* The local communicator's reduction: same code, same bits. */
    zc_device *h = zc__device_host();
    zc_status rc = h->ops->reduce_sum(h, dst, srcs, W, op->dt, mine, NULL);
    if (rc != ZC_OK)
        return fail(c, "mpi comm rank %d/%d: %s #%llu: %s", c->base.rank, W, zc__coll_kind_name(op->kind),
                    (unsigned long long)op->seq, zc_last_error());
    return ZC_OK;
}

/* Drives one op to completion. Ops complete in issue order (the oldest is
 * always at head), so every rank posts each phase-2 exchange in the same
 * order. */
static zc_status finish_op(mpi_comm *c, mpi_op *op, double deadline)
{
    const int W = c->base.world, r = c->base.rank;
    ZC_CHECK(wait_req(c, op, deadline));
    if (op->phase == 1 && op->kind == K_REDUCE_SCATTER)
        ZC_CHECK(reduce_slice(c, op, op->recv, op->count));
    if (op->phase == 1 && op->kind == K_ALL_REDUCE) {
        size_t los[W + 1], es = zc_dtype_size(op->dt);
        zc__mpi_ranges(op->count, W, los);
        size_t mine = los[r + 1] - los[r];
        /* recv may be send: every send of phase 1 has completed. */
        ZC_CHECK(reduce_slice(c, op, (char *)op->recv + los[r] * es, mine));
        op->phase = 2;
        xfer x = {.sfix = (const char *)op->recv + los[r] * es, .scount = mine,
                  .rbase = op->recv, .los = los, .split_send = 0};
        ZC_CHECK(post_p2p(c, op, 2, &x));
        ZC_CHECK(wait_req(c, op, deadline));
    }
    op->phase = 0;
    c->head = (c->head + 1) % MAX_INFLIGHT;
    c->n--;
    return ZC_OK;
}

/* Finishes every op in flight (each against its own full timeout from now:
 * the group's collectives were posted together). */
static zc_status drain(mpi_comm *c)
{
    while (c->n) {
        ZC_CHECK(finish_op(c, &c->ops[c->head], zc__now_s() + c->timeout_s));
    }
    return ZC_OK;
}

/* After posting: outside a group the call waits for its result. */
static zc_status posted(mpi_comm *c)
{
    push(c);
    return c->in_group ? ZC_OK : drain(c);
}

static zc_status enter(mpi_comm *c, const char *what, zc_dtype dt, size_t count, size_t limit,
                       void *stream)
{
    if (c->broken)
        return broken_err(c, what);
    if (mpi_type(dt) == MPI_DATATYPE_NULL)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "mpi comm rank %d %s: unknown dtype %d", c->base.rank,
                      what, (int)dt);
    /* Every rank passes the same count, so every rank refuses together. */
    if (count > limit)
        return ZC_ERR(ZC_ERR_UNSUPPORTED,
                      "mpi comm rank %d %s: %zu elements exceed MPI's int counts (at most %zu "
                      "here); use smaller buckets", c->base.rank, what, count, limit);
    /* Host streams are synchronous; this keeps the contract if that changes. */
    return c->base.dev->ops->stream_sync(c->base.dev, stream);
}

/* A slot for a new op, set up; the scratch keeps its buffer. */
static zc_status new_op(mpi_comm *c, int kind, zc_dtype dt, zc_red_op red, size_t count,
                        void *recv, mpi_op **out)
{
    mpi_op *op;
    ZC_CHECK(take_slot(c, &op));
    op->kind = kind;
    op->phase = 1;
    op->dt = dt;
    op->red = red;
    op->count = count;
    op->recv = recv;
    op->nreq = 0;
    op->own = NULL;
    op->post_s = 0;
    op->seq = c->seq;
    *out = op;
    return ZC_OK;
}

/* ---- collectives ---------------------------------------------------------- */

static zc_status mpi_all_reduce(zc_comm *base, const void *send, void *recv, size_t count,
                                zc_dtype dt, zc_red_op red, void *stream)
{
    mpi_comm *c = (mpi_comm *)base;
    const int W = base->world, r = base->rank;
    if (red != ZC_RED_SUM && red != ZC_RED_MAX)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "mpi comm rank %d all_reduce: unknown op %d", r,
                      (int)red);
    if (red == ZC_RED_MAX && dt != ZC_DTYPE_F32 && dt != ZC_DTYPE_F64 && dt != ZC_DTYPE_I32)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "mpi comm rank %d all_reduce MAX: dtype %s not supported (use fp32, fp64 "
                      "or int32)", r, zc_dtype_name(dt));
    ZC_CHECK(enter(c, "all_reduce", dt, count, INT_MAX, stream));
    c->seq++;
    if (!count)
        return ZC_OK;
    mpi_op *op;
    ZC_CHECK(new_op(c, K_ALL_REDUCE, dt, red, count, recv, &op));
    size_t es = zc_dtype_size(dt), los[W + 1];
    zc__mpi_ranges(count, W, los);
    size_t mine = los[r + 1] - los[r], bytes;
    if (__builtin_mul_overflow(mine, (size_t)W * es, &bytes))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "mpi comm all_reduce: %zu elements overflow", count);
    ZC_CHECK(grow(&op->scratch, &op->scratch_bytes, bytes ? bytes : 1, "mpi comm scratch"));
    /* Slice k of this rank's buffer goes to rank k; rank k's copy of slice r
     * lands at scratch + k * mine; this rank's own is read in place where the
     * sum allows it, else copied now (send is valid and unchanged until the
     * op completes). */
    const char *own = (const char *)send + los[r] * es;
    op->own = own_in_place(op, r, own, (char *)recv + los[r] * es, mine) ? own : NULL;
    if (mine && !op->own)
        memcpy((char *)op->scratch + (size_t)r * mine * es, own, mine * es);
    xfer x = {.sbase = send, .rbase = op->scratch, .rstride = mine, .rcount = mine, .los = los,
              .split_send = 1};
    ZC_CHECK(post_p2p(c, op, 1, &x));
    return posted(c);
}

static zc_status mpi_reduce_scatter(zc_comm *base, const void *send, void *recv,
                                    size_t recv_count, zc_dtype dt, void *stream)
{
    mpi_comm *c = (mpi_comm *)base;
    const int W = base->world, r = base->rank;
    size_t limit = (size_t)INT_MAX / (size_t)W; /* keeps W * recv_count in range */
    ZC_CHECK(enter(c, "reduce_scatter", dt, recv_count, limit, stream));
    c->seq++;
    if (!recv_count)
        return ZC_OK;
    mpi_op *op;
    ZC_CHECK(new_op(c, K_REDUCE_SCATTER, dt, ZC_RED_SUM, recv_count, recv, &op));
    size_t es = zc_dtype_size(dt), bytes = recv_count * (size_t)W * es; /* < INT_MAX * 8 */
    ZC_CHECK(grow(&op->scratch, &op->scratch_bytes, bytes, "mpi comm scratch"));
    /* recv may alias slice r of send: only scratch is written until every
     * exchange completed, and recv only after (own_in_place says when the
     * sum may still read slice r in place). */
    const char *own = (const char *)send + (size_t)r * recv_count * es;
    op->own = own_in_place(op, r, own, recv, recv_count) ? own : NULL;
    if (!op->own)
        memcpy((char *)op->scratch + (size_t)r * recv_count * es, own, recv_count * es);
    xfer x = {.sbase = send, .sstride = recv_count, .scount = recv_count,
              .rbase = op->scratch, .rstride = recv_count, .rcount = recv_count};
    ZC_CHECK(post_p2p(c, op, 1, &x));
    return posted(c);
}

/* All-gather (every peer gets this rank's send) and all-to-all (peer k
 * gets block k of it): blocks of `count` into recv in rank order, this
 * rank's own block copied, the others exchanged directly. */
static zc_status exchange_blocks(zc_comm *base, int kind, const void *send, void *recv,
                                 size_t count, zc_dtype dt, void *stream)
{
    mpi_comm *c = (mpi_comm *)base;
    const int r = base->rank;
    /* Each message is `count` elements: MPI's int count is the limit. */
    ZC_CHECK(enter(c, zc__coll_kind_name(kind), dt, count, INT_MAX, stream));
    c->seq++;
    if (!count)
        return ZC_OK;
    mpi_op *op;
    ZC_CHECK(new_op(c, kind, dt, ZC_RED_SUM, count, recv, &op));
    size_t es = zc_dtype_size(dt);
    char *own = (char *)recv + (size_t)r * count * es;
    const char *mine = kind == K_ALL_TO_ALL ? (const char *)send + (size_t)r * count * es : send;
    /* An all-gather may be in place (send == own); memmove covers it. */
    if (mine != own)
        memmove(own, mine, count * es);
    xfer x = {.sfix = kind == K_ALL_TO_ALL ? NULL : own, .sbase = send, .sstride = count,
              .scount = count, .rbase = recv, .rstride = count, .rcount = count};
    ZC_CHECK(post_p2p(c, op, 1, &x));
    return posted(c);
}

static zc_status mpi_all_gather(zc_comm *base, const void *send, void *recv, size_t send_count,
                                zc_dtype dt, void *stream)
{
    return exchange_blocks(base, K_ALL_GATHER, send, recv, send_count, dt, stream);
}

static zc_status mpi_all_to_all(zc_comm *base, const void *send, void *recv, size_t count,
                                zc_dtype dt, void *stream)
{
    return exchange_blocks(base, K_ALL_TO_ALL, send, recv, count, dt, stream);
}

static zc_status mpi_broadcast(zc_comm *base, void *buf, size_t count, zc_dtype dt, int root,
                               void *stream)
{
    mpi_comm *c = (mpi_comm *)base;
    if (root < 0 || root >= base->world)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "mpi comm broadcast: root %d outside 0..%d", root,
                      base->world - 1);
    ZC_CHECK(enter(c, "broadcast", dt, count, INT_MAX, stream));
    c->seq++;
    if (!count)
        return ZC_OK;
    mpi_op *op;
    ZC_CHECK(new_op(c, K_BROADCAST, dt, ZC_RED_SUM, count, buf, &op));
    int e = MPI_Ibcast(buf, (int)count, mpi_type(dt), root, c->mc, &op->reqs[0]);
    if (e != MPI_SUCCESS)
        return mpi_fail(c, op, "MPI_Ibcast", e);
    op->nreq = 1;
    return posted(c);
}

static zc_status mpi_barrier(zc_comm *base)
{
    mpi_comm *c = (mpi_comm *)base;
    if (c->broken)
        return broken_err(c, "barrier");
    if (c->in_group)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "mpi comm rank %d: barrier inside a group", base->rank);
    c->seq++;
    mpi_op *op;
    ZC_CHECK(new_op(c, K_BARRIER, ZC_DTYPE_F32, ZC_RED_SUM, 0, NULL, &op));
    int e = MPI_Ibarrier(c->mc, &op->reqs[0]);
    if (e != MPI_SUCCESS)
        return mpi_fail(c, op, "MPI_Ibarrier", e);
    op->nreq = 1;
    return posted(c);
}

static zc_status mpi_group_start(zc_comm *base)
{
    mpi_comm *c = (mpi_comm *)base;
    if (c->in_group)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "mpi comm rank %d: groups do not nest", base->rank);
    c->in_group = 1;
    return ZC_OK;
}

static zc_status mpi_group_end(zc_comm *base)
{
    mpi_comm *c = (mpi_comm *)base;
    if (!c->in_group)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "mpi comm rank %d: group_end without group_start",
                      base->rank);
    c->in_group = 0;
    if (c->broken)
        return broken_err(c, "group_end");
    return drain(c);
}

static zc_status mpi_bind_device(zc_comm *base, zc_device *dev)
{
    if (!dev)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "mpi comm bind_device: NULL device");
    if (dev->mem_kind != ZC_MEMKIND_HOST)
        return ZC_ERR(ZC_ERR_UNSUPPORTED,
                      "the MPI communicator moves host buffers only (rank %d was given device "
                      "%d): use the host device (ZC_DEVICE_HOST) or the NCCL communicator",
                      base->rank, dev->index);
    base->dev = dev;
    return ZC_OK;
}

static void mpi_destroy(zc_comm *base)
{
    mpi_comm *c = (mpi_comm *)base;
    const int W = base->world;
    /* A healthy communicator has nothing in flight between calls (outside a
     * group every call drains); a broken one keeps requests MPI cannot
     * cancel, so its MPI_Comm is left alone and MPI is never finalised. */
    int healthy = !c->broken && c->n == 0;
    if (healthy)
        MPI_Comm_free(&c->mc);
    for (int i = 0; i < MAX_INFLIGHT; i++) {
        zc__host_free(NULL, ZC_MEM_BUFFERS, c->ops[i].scratch, c->ops[i].scratch_bytes);
        zc__host_free(NULL, ZC_MEM_OTHER, c->ops[i].reqs, 2 * sizeof(MPI_Request) * (size_t)W);
    }
    zc__host_free(NULL, ZC_MEM_OTHER, c->done_idx, 2 * sizeof(int) * (size_t)W);
    zc__host_free(NULL, ZC_MEM_OTHER, c->split_buf, split_buf_bytes(W));
    zc__host_free(NULL, ZC_MEM_OTHER, c, sizeof *c);
    zc__mpi_unref(healthy);
}

static void mpi_wait_counts(const zc_comm *comm, zc_comm_wait_counts *out)
{
    *out = ((const mpi_comm *)comm)->counts;
}

static const zc_comm_ops mpi_ops = {
    .name = "mpi",
    .all_reduce = mpi_all_reduce,
    .reduce_scatter = mpi_reduce_scatter,
    .all_gather = mpi_all_gather,
    .all_to_all = mpi_all_to_all,
    .broadcast = mpi_broadcast,
    .barrier = mpi_barrier,
    .group_start = mpi_group_start,
    .group_end = mpi_group_end,
    .bind_device = mpi_bind_device,
    .destroy = mpi_destroy,
    .split = zc__mpi_split,
    .wait_counts = mpi_wait_counts,
};

zc_status zc__mpi_wrap(MPI_Comm mc, double timeout, int world_rank, int node_ranks,
                       const char *what, zc_comm **out)
{
    *out = NULL;
    zc_status rc = ZC_OK;
    mpi_comm *c = NULL;
    MPI_Comm node = MPI_COMM_NULL;
    int rank = 0, world = 0, lrank = 0, lworld = 0, e;
    /* Errors come back as codes (ZC_ERR_COMM), never abort the process. */
    MPI_Comm_set_errhandler(mc, MPI_ERRORS_RETURN);
    MPI_Comm_rank(mc, &rank);
    MPI_Comm_size(mc, &world);
    const size_t reqs = 2 * sizeof(MPI_Request) * (size_t)world;
    if ((e = MPI_Comm_split_type(mc, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node)) !=
        MPI_SUCCESS) {
        char w[160];
        snprintf(w, sizeof w, "%s: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)", what);
        rc = zc__mpi_errstr(e, w);
        goto fail;
    }
    MPI_Comm_rank(node, &lrank);
    MPI_Comm_size(node, &lworld);
    MPI_Comm_free(&node);

    ZC_CHECK_GOTO(zc__host_alloc(NULL, ZC_MEM_OTHER, sizeof *c, "mpi comm", (void **)&c), rc,
                  fail);
    for (int i = 0; i < MAX_INFLIGHT; i++) {
        ZC_CHECK_GOTO(zc__host_alloc(NULL, ZC_MEM_OTHER, reqs, "mpi comm requests",
                                     (void **)&c->ops[i].reqs), rc, fail);
    }
    ZC_CHECK_GOTO(zc__host_alloc(NULL, ZC_MEM_OTHER, 2 * sizeof(int) * (size_t)world,
                                 "mpi comm request indices", (void **)&c->done_idx), rc, fail);
    ZC_CHECK_GOTO(zc__host_alloc(NULL, ZC_MEM_OTHER, split_buf_bytes(world),
                                 "mpi comm split records", (void **)&c->split_buf), rc, fail);
    c->base.ops = &mpi_ops;
    c->base.rank = rank;
    c->base.world = world;
    c->base.local_rank = lrank;
    c->base.local_world = lworld;
    c->base.world_rank = world_rank;
    c->base.node_ranks = node_ranks > 0 ? node_ranks : lworld;
    c->base.dev = zc__device_host();
    c->mc = mc;
    c->timeout_s = timeout;
    ZC_LOGI("comm", "mpi rank %d of %d (local %d of %d), timeout %g s", rank, world, lrank,
            lworld, timeout);
    *out = &c->base;
    return ZC_OK;
fail:
    if (c) {
        for (int i = 0; i < MAX_INFLIGHT; i++)
            zc__host_free(NULL, ZC_MEM_OTHER, c->ops[i].reqs, reqs);
        zc__host_free(NULL, ZC_MEM_OTHER, c->done_idx, 2 * sizeof(int) * (size_t)world);
        zc__host_free(NULL, ZC_MEM_OTHER, c, sizeof *c);
    }
    MPI_Comm_free(&mc);
    zc__mpi_unref(1);
    return rc;
}

MPI_Comm zc__mpi_handle(const zc_comm *base) { return ((const mpi_comm *)base)->mc; }
int32_t *zc__mpi_split_records(zc_comm *base) { return ((mpi_comm *)base)->split_buf; }
