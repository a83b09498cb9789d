/* The NCCL communicator: see nccl.h for the contract. This file issues the
 * collectives and groups and creates and destroys the communicator; the
 * watchdog that times them is nccl_watchdog.c, the start from a launcher's
 * environment nccl_env.c. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "comm/nccl.h"
#include "comm/nccl_internal.h"
#include "base/clock.h"
#include "base/log.h"
#include "device/cuda_guard.h"
#include "kernels/kernels.h"

static int nccl_dtype(zc_dtype dt, ncclDataType_t *out)
{
    switch (dt) {
    case ZC_DTYPE_F32: *out = ncclFloat32; return 1;
    case ZC_DTYPE_F16: *out = ncclFloat16; return 1;
    case ZC_DTYPE_BF16: *out = ncclBfloat16; return 1;
    case ZC_DTYPE_F64: *out = ncclFloat64; return 1;
    case ZC_DTYPE_I32: *out = ncclInt32; return 1;
    default: return 0;
    }
}

/* Makes room for one more slot (in flight + staged < RING): the oldest
 * in-flight collective must finish first (or the watchdog fails it). Called
 * with c->mu held. */
static zc_status reserve_locked(nccl_comm *c, const char *op)
{
    while (c->count + c->staged == RING && c->count && !c->failed) {
        zc__nccl_reap_locked(c);
        if (c->count + c->staged == RING && c->count && !c->failed) {
            struct timespec ts = zc__nccl_in_ns(1000 * 1000);
            pthread_cond_timedwait(&c->cv, &c->mu, &ts);
        }
    }
    if (c->failed)
        return zc__nccl_sticky(c);
    if (c->count + c->staged == RING)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "nccl rank %d: %s: more than %d collectives in one group",
                      c->base.rank, op, RING);
    return ZC_OK;
}

/* Queues one collective: fence the caller's stream into the comm stream,
 * record its start, run `launch`, record its completion, make the caller's
 * stream wait on it. Inside a group the launch only adds to NCCL's group:
 * start and completion are recorded by group_end around ncclGroupEnd. */
typedef ncclResult_t (*launch_fn)(nccl_comm *c, const void *a);

static zc_status issue(nccl_comm *c, const char *op, size_t bytes, launch_fn launch,
                       const void *args, void *stream)
{
    zc_status rc = ZC_OK;
    pthread_mutex_lock(&c->mu);
    if (c->failed) {
        rc = zc__nccl_sticky(c);
        pthread_mutex_unlock(&c->mu);
        return rc;
    }
    rc = reserve_locked(c, op);
    if (rc != ZC_OK) {
        pthread_mutex_unlock(&c->mu);
        return rc;
    }
    int grouped = c->group_open;
    if (grouped) {
        int k = 0;
        while (k < c->ngroup_streams && c->group_streams[k] != stream)
            k++;
        if (k == c->ngroup_streams) {
            if (k == GROUP_STREAMS) {
                pthread_mutex_unlock(&c->mu);
                return ZC_ERR(ZC_ERR_INVALID_ARG,
                              "nccl rank %d: %s: more than %d caller streams in one group",
                              c->base.rank, op, GROUP_STREAMS);
            }
            c->group_streams[c->ngroup_streams++] = stream;
        }
    }
    pending *p = &c->ring[(c->head + c->count + c->staged) % RING];
    uint64_t seq = ++c->seq;
    unsigned stall = grouped ? 0 : c->stall_ms;
    c->stall_ms = grouped ? c->stall_ms : 0;
    c->in_call = 1;
    pthread_mutex_unlock(&c->mu);

    /* Outside the mutex: the slot is beyond what the watchdog reads, and
     * in_call keeps it off the communicator. */
    char msg[512];
    msg[0] = '\0';
    int fatal = 0;
    zc_cuda_guard dev_guard; /* the caller's thread stays on its own device */
    zc__cuda_guard_enter(&dev_guard, c->device);
    cudaError_t ce = cudaEventRecord(c->fence, (cudaStream_t)stream);
    if (ce == cudaSuccess)
        ce = cudaStreamWaitEvent(c->stream, c->fence, 0);
    if (ce == cudaSuccess && !grouped)
        ce = cudaEventRecord(p->began, c->stream);
    if (ce == cudaSuccess && stall)
        ce = zc_k_sleep(stall, c->stream);
    if (ce != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(msg, sizeof msg, "nccl rank %d: ordering %s #%llu after the caller's stream: %s",
                 c->base.rank, op, (unsigned long long)seq, cudaGetErrorString(ce));
    }
    ncclResult_t r = ncclSuccess;
    if (!msg[0]) {
        r = launch(c, args);
        if (!grouped)
            r = zc__nccl_settle(c, c->nc, r, zc__now_s() + c->timeout_s);
        if (r != ncclSuccess) {
            snprintf(msg, sizeof msg, "nccl rank %d/%d: %s #%llu (%zu bytes): %s", c->base.rank,
                     c->base.world, op, (unsigned long long)seq, bytes,
                     r == ncclInProgress ? "still in progress after ZC_COMM_TIMEOUT"
                                         : ncclGetErrorString(r));
            /* Outside a group, an invalid argument had no effect and the
             * communicator is still usable; inside one, NCCL's group state
             * is unknown. */
            fatal = grouped || r != ncclInvalidArgument;
        }
    }
    if (!msg[0] && !grouped) {
        ce = cudaEventRecord(p->done, c->stream);
        if (ce == cudaSuccess && stream != (void *)c->stream)
            ce = cudaStreamWaitEvent((cudaStream_t)stream, p->done, 0);
        if (ce != cudaSuccess) {
            (void)cudaGetLastError();
            snprintf(msg, sizeof msg, "nccl rank %d: recording completion of %s #%llu: %s",
                     c->base.rank, op, (unsigned long long)seq, cudaGetErrorString(ce));
            fatal = 1;
        }
    }

    pthread_mutex_lock(&c->mu);
    c->in_call = 0;
    if (msg[0] && !fatal) {
        rc = ZC_ERR(ZC_ERR_INVALID_ARG, "%s", msg);
    } else if (msg[0] || c->failed) {
        zc__nccl_fail_locked(c, msg[0] ? msg : c->failure); /* no-op if the watchdog failed it first */
        rc = zc__nccl_sticky(c);
    } else {
        p->seq = seq;
        p->op = op;
        p->bytes = bytes;
        p->grouped = grouped;
        p->started = 0;
        p->start = 0.0;
        if (grouped) {
            c->staged++;
        } else {
            c->count++;
            pthread_cond_broadcast(&c->cv);
        }
    }
    zc__nccl_abort_if_failed_locked(c);
    pthread_mutex_unlock(&c->mu);
    zc__cuda_guard_leave(&dev_guard);
    return rc;
}

/* Waits until every queued collective finished, or the communicator failed.
 * A collective whose inputs never become ready (the caller's stream is
 * stuck) is not timed, so this then waits like cudaStreamSynchronize. */
static zc_status drain(nccl_comm *c)
{
    zc_status rc = ZC_OK;
    pthread_mutex_lock(&c->mu);
    while (c->count && !c->failed) {
        zc__nccl_reap_locked(c);
        if (c->count && !c->failed) {
            struct timespec ts = zc__nccl_in_ns(500 * 1000);
            pthread_cond_timedwait(&c->cv, &c->mu, &ts);
        }
    }
    if (c->failed)
        rc = zc__nccl_sticky(c);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* ---- groups -------------------------------------------------------------- */

/* Collectives issued until group_end are launched together by ncclGroupEnd:
 * one launch for a bucket's chunks instead of one each, and NCCL may run
 * them concurrently. Same thread for the whole group (NCCL's rule). */
static zc_status nccl_group_start(zc_comm *base)
{
    nccl_comm *c = (nccl_comm *)base;
    zc_status rc = ZC_OK;
    pthread_mutex_lock(&c->mu);
    if (c->failed) {
        rc = zc__nccl_sticky(c);
    } else if (c->group_open) {
        rc = ZC_ERR(ZC_ERR_INVALID_STATE, "nccl rank %d: group_start inside an open group",
                    base->rank);
    } else {
        c->in_call = 1;
        pthread_mutex_unlock(&c->mu);
        ncclResult_t r = ncclGroupStart();
        pthread_mutex_lock(&c->mu);
        c->in_call = 0;
        if (r != ncclSuccess) {
            char msg[256];
            snprintf(msg, sizeof msg, "nccl rank %d: ncclGroupStart: %s", base->rank,
                     ncclGetErrorString(r));
            zc__nccl_fail_locked(c, msg);
            rc = zc__nccl_sticky(c);
        } else {
            c->group_open = 1;
            c->staged = 0;
            c->ngroup_streams = 0;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Ends the group even after a failure inside it (NCCL's group depth is per
 * thread and must return to zero); then aborts if anything failed. */
static zc_status nccl_group_end(zc_comm *base)
{
    nccl_comm *c = (nccl_comm *)base;
    pthread_mutex_lock(&c->mu);
    if (!c->group_open) {
        zc_status rc = c->failed ? zc__nccl_sticky(c)
                                 : ZC_ERR(ZC_ERR_INVALID_STATE,
                                          "nccl rank %d: group_end without group_start",
                                          base->rank);
        pthread_mutex_unlock(&c->mu);
        return rc;
    }
    unsigned first = (c->head + c->count) % RING, n = c->staged;
    unsigned stall = n ? c->stall_ms : 0;
    if (stall)
        c->stall_ms = 0;
    int already_failed = c->failed;
    c->in_call = 1;
    pthread_mutex_unlock(&c->mu);

    char msg[512];
    msg[0] = '\0';
    zc_cuda_guard dev_guard;
    zc__cuda_guard_enter(&dev_guard, c->device);
    /* Every collective's fence wait is already on the comm stream: the start
     * events recorded now complete when the whole group can run. */
    cudaError_t ce = cudaSuccess;
    for (unsigned i = 0; i < n && ce == cudaSuccess; i++)
        ce = cudaEventRecord(c->ring[(first + i) % RING].began, c->stream);
    if (ce == cudaSuccess && stall)
        ce = zc_k_sleep(stall, c->stream);
    ncclResult_t r = ncclGroupEnd();
    if (!already_failed)
        r = zc__nccl_settle(c, c->nc, r, zc__now_s() + c->timeout_s);
    for (unsigned i = 0; i < n && ce == cudaSuccess && r == ncclSuccess; i++)
        ce = cudaEventRecord(c->ring[(first + i) % RING].done, c->stream);
    if (n && ce == cudaSuccess && r == ncclSuccess) {
        cudaEvent_t last = c->ring[(first + n - 1) % RING].done;
        for (int k = 0; k < c->ngroup_streams && ce == cudaSuccess; k++)
            if (c->group_streams[k] != (void *)c->stream)
                ce = cudaStreamWaitEvent((cudaStream_t)c->group_streams[k], last, 0);
    }
    if (ce != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(msg, sizeof msg, "nccl rank %d: ordering a group of %u collectives: %s",
                 base->rank, n, cudaGetErrorString(ce));
    } else if (r != ncclSuccess && !already_failed) {
        snprintf(msg, sizeof msg, "nccl rank %d/%d: group of %u collectives (#%llu..#%llu): %s",
                 base->rank, base->world, n, (unsigned long long)(c->seq - n + 1),
                 (unsigned long long)c->seq,
                 r == ncclInProgress ? "still in progress after ZC_COMM_TIMEOUT"
                                     : ncclGetErrorString(r));
    }

    zc_status rc = ZC_OK;
    pthread_mutex_lock(&c->mu);
    c->in_call = 0;
    c->group_open = 0;
    if (msg[0] || c->failed) {
        c->staged = 0;
        zc__nccl_fail_locked(c, msg[0] ? msg : c->failure);
        rc = zc__nccl_sticky(c);
    } else {
        c->count += c->staged;
        c->staged = 0;
        pthread_cond_broadcast(&c->cv);
    }
    zc__nccl_abort_if_failed_locked(c);
    pthread_mutex_unlock(&c->mu);
    zc__cuda_guard_leave(&dev_guard);
    return rc;
}

/* ---- collectives --------------------------------------------------------- */

typedef struct coll_args {
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t dt;
    ncclRedOp_t op;
    int root;
    size_t es; /* all_to_all: the bytes of an element */
} coll_args;

static ncclResult_t do_all_reduce(nccl_comm *c, const void *a)
{
    const coll_args *x = a;
    return ncclAllReduce(x->send, x->recv, x->count, x->dt, x->op, c->nc, c->stream);
}
static ncclResult_t do_reduce_scatter(nccl_comm *c, const void *a)
{
    const coll_args *x = a;
    return ncclReduceScatter(x->send, x->recv, x->count, x->dt, ncclSum, c->nc, c->stream);
}
static ncclResult_t do_all_gather(nccl_comm *c, const void *a)
{
    const coll_args *x = a;
    return ncclAllGather(x->send, x->recv, x->count, x->dt, c->nc, c->stream);
}
/* NCCL has no all-to-all collective: one send and one receive per peer in
 * one NCCL group (nested inside an open zeroc group, which NCCL allows). */
static ncclResult_t do_all_to_all(nccl_comm *c, const void *a)
{
    const coll_args *x = a;
    const size_t bytes = x->count * x->es;
    ncclResult_t r = ncclGroupStart();
    for (int k = 0; k < c->base.world && r == ncclSuccess; k++) {
        r = ncclSend((const char *)x->send + (size_t)k * bytes, x->count, x->dt, k, c->nc,
                     c->stream);
        if (r == ncclSuccess)
            r = ncclRecv((char *)x->recv + (size_t)k * bytes, x->count, x->dt, k, c->nc,
                         c->stream);
    }
    const ncclResult_t e = ncclGroupEnd(); /* closes the group after a failure too */
    return r != ncclSuccess ? r : e;
}
static ncclResult_t do_broadcast(nccl_comm *c, const void *a)
{
    const coll_args *x = a;
    return ncclBroadcast(x->recv, x->recv, x->count, x->dt, x->root, c->nc, c->stream);
}

static zc_status check_args(nccl_comm *c, const char *op, zc_dtype dt, ncclDataType_t *ndt)
{
    if (!nccl_dtype(dt, ndt))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "nccl rank %d %s: unsupported dtype %d", c->base.rank,
                      op, (int)dt);
    if (c->base.dev == NULL || c->base.dev->mem_kind != ZC_MEMKIND_DEVICE)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "nccl rank %d %s: NCCL moves GPU buffers; bind a CUDA device first "
                      "(zc_engine_options.device = ZC_DEVICE_CUDA or AUTO)", c->base.rank, op);
    return ZC_OK;
}

static zc_status nccl_all_reduce(zc_comm *base, const void *send, void *recv, size_t count,
                                 zc_dtype dt, zc_red_op op, void *stream)
{
    nccl_comm *c = (nccl_comm *)base;
    coll_args a = {send, recv, count, ncclFloat32, op == ZC_RED_MAX ? ncclMax : ncclSum, 0, 0};
    ZC_CHECK(check_args(c, "all_reduce", dt, &a.dt));
    if (op != ZC_RED_SUM && op != ZC_RED_MAX)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "nccl all_reduce: unknown op %d", (int)op);
    return issue(c, "all_reduce", count * zc_dtype_size(dt), do_all_reduce, &a, stream);
}

static zc_status nccl_reduce_scatter(zc_comm *base, const void *send, void *recv,
                                     size_t recv_count, zc_dtype dt, void *stream)
{
    nccl_comm *c = (nccl_comm *)base;
    coll_args a = {send, recv, recv_count, ncclFloat32, ncclSum, 0, 0};
    ZC_CHECK(check_args(c, "reduce_scatter", dt, &a.dt));
    return issue(c, "reduce_scatter", recv_count * (size_t)base->world * zc_dtype_size(dt),
                 do_reduce_scatter, &a, stream);
}

static zc_status nccl_all_gather(zc_comm *base, const void *send, void *recv, size_t send_count,
                                 zc_dtype dt, void *stream)
{
    nccl_comm *c = (nccl_comm *)base;
    coll_args a = {send, recv, send_count, ncclFloat32, ncclSum, 0, 0};
    ZC_CHECK(check_args(c, "all_gather", dt, &a.dt));
    return issue(c, "all_gather", send_count * (size_t)base->world * zc_dtype_size(dt),
                 do_all_gather, &a, stream);
}

static zc_status nccl_all_to_all(zc_comm *base, const void *send, void *recv, size_t count,
                                 zc_dtype dt, void *stream)
{
    nccl_comm *c = (nccl_comm *)base;
    coll_args a = {send, recv, count, ncclFloat32, ncclSum, 0, zc_dtype_size(dt)};
    ZC_CHECK(check_args(c, "all_to_all", dt, &a.dt));
    return issue(c, "all_to_all", count * (size_t)base->world * zc_dtype_size(dt),
                 do_all_to_all, &a, stream);
}

static zc_status nccl_broadcast(zc_comm *base, void *buf, size_t count, zc_dtype dt, int root,
                                void *stream)
{
    nccl_comm *c = (nccl_comm *)base;
    if (root < 0 || root >= base->world)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "nccl broadcast: root %d outside 0..%d", root,
                      base->world - 1);
    coll_args a = {buf, buf, count, ncclFloat32, ncclSum, root, 0};
    ZC_CHECK(check_args(c, "broadcast", dt, &a.dt));
    return issue(c, "broadcast", count * zc_dtype_size(dt), do_broadcast, &a, stream);
}

/* A one-element all-reduce on the comm stream, waited for: every collective
 * queued before it on this rank has finished when it returns. */
static zc_status nccl_barrier(zc_comm *base)
{
    nccl_comm *c = (nccl_comm *)base;
    pthread_mutex_lock(&c->mu);
    int in_group = c->group_open;
    pthread_mutex_unlock(&c->mu);
    if (in_group) /* its wait would never see the group's collectives launched */
        return ZC_ERR(ZC_ERR_INVALID_STATE, "nccl rank %d: barrier inside a group",
                      base->rank);
    coll_args a = {c->d_scratch, c->d_scratch, 1, ncclInt32, ncclSum, 0, 0};
    ZC_CHECK(issue(c, "barrier", sizeof(int32_t), do_all_reduce, &a, c->stream));
    return drain(c);
}

static zc_status nccl_bind_device(zc_comm *base, zc_device *dev)
{
    nccl_comm *c = (nccl_comm *)base;
    if (!dev)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "nccl bind_device: NULL device");
    if (dev->mem_kind != ZC_MEMKIND_DEVICE || dev->index != c->device)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "nccl rank %d lives on cuda:%d but the engine's device is %s%d: use "
                      "ZC_DEVICE_CUDA with device_index %d (or -1 for the launcher's local rank)",
                      base->rank, c->device, dev->ops->name,
                      dev->mem_kind == ZC_MEMKIND_DEVICE ? dev->index : 0, c->device);
    base->dev = dev;
    return ZC_OK;
}

void zc__nccl_destroy(zc_comm *base)
{
    nccl_comm *c = (nccl_comm *)base;
    zc_cuda_guard dev_guard;
    zc__cuda_guard_enter(&dev_guard, c->device);
    pthread_mutex_lock(&c->mu);
    int open_group = c->group_open;
    pthread_mutex_unlock(&c->mu);
    if (open_group) /* NCCL's group depth is per thread: leave it at zero */
        (void)nccl_group_end(base);
    zc_status rc = drain(c); /* bounded by the watchdog's timeout once started */
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (c->watchdog_started)
        pthread_join(c->watchdog, NULL);
    if (c->nc && c->borrowed_nc) {
        /* The program's: left as it is (its collectives are drained). */
    } else if (c->nc) {
        /* Finalize then destroy; destroying an unfinalized comm can block. */
        ncclResult_t r = rc == ZC_OK ? ncclCommFinalize(c->nc) : ncclInternalError;
        if (r == ncclSuccess || r == ncclInProgress)
            r = zc__nccl_settle(NULL, c->nc, r == ncclInProgress ? ncclInProgress : ncclSuccess,
                       zc__now_s() + c->timeout_s);
        if (r == ncclSuccess)
            ncclCommDestroy(c->nc);
        else
            ncclCommAbort(c->nc);
    }
    /* A failed borrowed communicator was not aborted: kernels of it may
     * never finish, so zeroc does not wait on its stream. */
    if (c->stream && !(c->borrowed_nc && c->failed))
        (void)cudaStreamSynchronize(c->stream);
    for (int i = 0; i < RING; i++) {
        if (c->ring[i].done)
            (void)cudaEventDestroy(c->ring[i].done);
        if (c->ring[i].began)
            (void)cudaEventDestroy(c->ring[i].began);
    }
    if (c->fence)
        (void)cudaEventDestroy(c->fence);
    if (c->d_scratch) {
        (void)cudaFree(c->d_scratch);
        zc__mem_count(NULL, ZC_MEMKIND_DEVICE, ZC_MEM_BUFFERS, -(int64_t)sizeof(int32_t));
    }
    if (c->d_split) {
        const size_t b = sizeof(int32_t) * ZC_SPLIT_REC * ((size_t)c->base.world + 1);
        (void)cudaFree(c->d_split);
        zc__mem_count(NULL, ZC_MEMKIND_DEVICE, ZC_MEM_BUFFERS, -(int64_t)b);
    }
    if (c->stream && !c->borrowed_stream)
        (void)cudaStreamDestroy(c->stream);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    zc__host_free(NULL, ZC_MEM_OTHER, c, sizeof *c);
    zc__cuda_guard_leave(&dev_guard);
}

static const zc_comm_ops nccl_ops = {
    .name = "nccl",
    .all_reduce = nccl_all_reduce,
    .reduce_scatter = nccl_reduce_scatter,
    .all_gather = nccl_all_gather,
    .all_to_all = nccl_all_to_all,
    .broadcast = nccl_broadcast,
    .barrier = nccl_barrier,
    .group_start = nccl_group_start,
    .group_end = nccl_group_end,
    .bind_device = nccl_bind_device,
    .destroy = zc__nccl_destroy,
    .split = zc__nccl_split,
};

/* ---- creation ------------------------------------------------------------ */

/* On the communicator's device (made current by the caller, create). */
zc_status zc__nccl_cuda_setup(nccl_comm *c)
{
    cudaError_t e = cudaSetDevice(c->device);
    if (e == cudaSuccess && !c->stream)
        e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&c->fence, cudaEventDisableTiming);
    for (int i = 0; i < RING && e == cudaSuccess; i++) {
        e = cudaEventCreateWithFlags(&c->ring[i].done, cudaEventDisableTiming);
        if (e == cudaSuccess)
            e = cudaEventCreateWithFlags(&c->ring[i].began, cudaEventDisableTiming);
    }
    if (e == cudaSuccess) {
        e = cudaMalloc((void **)&c->d_scratch, sizeof(int32_t));
        if (e == cudaSuccess)
            zc__mem_count(NULL, ZC_MEMKIND_DEVICE, ZC_MEM_BUFFERS, (int64_t)sizeof(int32_t));
    }
    if (e == cudaSuccess)
        e = cudaMemset(c->d_scratch, 0, sizeof(int32_t));
    if (e == cudaSuccess) {
        const size_t b = sizeof(int32_t) * ZC_SPLIT_REC * ((size_t)c->base.world + 1);
        e = cudaMalloc((void **)&c->d_split, b);
        if (e == cudaSuccess)
            zc__mem_count(NULL, ZC_MEMKIND_DEVICE, ZC_MEM_BUFFERS, (int64_t)b);
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return ZC_ERR(ZC_ERR_DEVICE, "nccl rank %d: setting up cuda:%d: %s", c->base.rank,
                      c->device, cudaGetErrorString(e));
    }
    return ZC_OK;
}

zc_status zc__nccl_alloc(int rank, int world, int device, double timeout_s, nccl_comm **out)
{
    nccl_comm *c = NULL;
    *out = NULL;
    ZC_CHECK(zc__host_alloc(NULL, ZC_MEM_OTHER, sizeof *c, "nccl communicator", (void **)&c));
    c->base.ops = &nccl_ops;
    c->base.rank = rank;
    c->base.world = world;
    c->base.local_rank = device;
    c->base.local_world = -1;
    c->base.world_rank = rank;
    c->base.node_ranks = -1;
    c->base.world_size = world;
    c->base.dev = zc__device_host();
    c->device = device;
    c->timeout_s = timeout_s;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    *out = c;
    return ZC_OK;
}

zc_status zc__nccl_start(nccl_comm *c)
{
    if (pthread_create(&c->watchdog, NULL, zc__nccl_watchdog_main, c) != 0)
        return ZC_ERR(ZC_ERR_INTERNAL, "nccl rank %d: cannot start the watchdog thread",
                      c->base.rank);
    c->watchdog_started = 1;
    return ZC_OK;
}

/* zc__comm_nccl_create with its arguments checked and `device` current. */
static zc_status create_on_device(int rank, int world, int device, const void *unique_id,
                                  double init_timeout_s, double timeout_s, zc_comm **out)
{
    nccl_comm *c = NULL;
    ZC_CHECK(zc__nccl_alloc(rank, world, device, timeout_s, &c));
    zc_status rc = zc__nccl_cuda_setup(c);
    if (rc == ZC_OK) {
        ncclUniqueId id;
        memcpy(&id, unique_id, sizeof id);
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = 0; /* so a missing peer cannot hang init: we poll with a deadline */
        ncclResult_t r = ncclCommInitRankConfig(&c->nc, world, id, rank, &cfg);
        if (r == ncclSuccess || r == ncclInProgress)
            r = zc__nccl_settle(NULL, c->nc, ncclInProgress, zc__now_s() + init_timeout_s);
        if (r != ncclSuccess) {
            rc = ZC_ERR(ZC_ERR_COMM,
                        "nccl rank %d of %d on cuda:%d: communicator init %s%s",
                        rank, world, device,
                        r == ncclInProgress ? "timed out after " : "failed: ",
                        r == ncclInProgress ? "ZC_BOOTSTRAP_TIMEOUT (are all ranks running?)"
                                            : ncclGetErrorString(r));
            if (c->nc)
                ncclCommAbort(c->nc);
            c->nc = NULL;
        }
    }
    if (rc == ZC_OK)
        rc = zc__nccl_start(c);
    if (rc != ZC_OK) {
        zc__nccl_destroy(&c->base);
        return rc;
    }
    ZC_LOGI("comm", "nccl rank %d of %d on cuda:%d (NCCL %d, timeout %.0f s)", rank, world,
            device, NCCL_VERSION_CODE, c->timeout_s);
    *out = &c->base;
    return ZC_OK;
}

zc_status zc__nccl_exchange(nccl_comm *c, const int32_t *d_send, int32_t *d_recv, size_t count)
{
    coll_args a = {d_send, d_recv, count, ncclInt32, ncclSum, 0, 0};
    ZC_CHECK(issue(c, "split exchange", count * (size_t)c->base.world * sizeof(int32_t),
                   do_all_gather, &a, c->stream));
    return drain(c);
}

zc_status zc__comm_nccl_create(int rank, int world, int device, const void *unique_id,
                               double init_timeout_s, zc_comm **out)
{
    *out = NULL;
    if (world < 1 || rank < 0 || rank >= world || device < 0 || !unique_id)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "nccl create: rank %d of %d on cuda:%d", rank, world,
                      device);
    double timeout_s = 0;
    ZC_CHECK(zc__comm_timeout_env(&timeout_s));
    if (!(init_timeout_s >= ZC_COMM_TIMEOUT_MIN_S && init_timeout_s <= ZC_COMM_TIMEOUT_MAX_S))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "nccl create: init timeout %g s is outside [%g, %g]",
                      init_timeout_s, ZC_COMM_TIMEOUT_MIN_S, ZC_COMM_TIMEOUT_MAX_S);
    zc_cuda_guard dev_guard; /* the caller's thread stays on its own device */
    zc__cuda_guard_enter(&dev_guard, device);
    zc_status rc = create_on_device(rank, world, device, unique_id, init_timeout_s, timeout_s,
                                    out);
    zc__cuda_guard_leave(&dev_guard);
    return rc;
}

zc_status zc__comm_nccl_stall(zc_comm *base, unsigned ms)
{
    nccl_comm *c = (nccl_comm *)base;
    pthread_mutex_lock(&c->mu);
    c->stall_ms = ms; /* consumed by the next collective (or group) issued */
    pthread_mutex_unlock(&c->mu);
    return ZC_OK;
}
