/* The NCCL communicator's splits and the program's own NCCL communicators
 * (in the CUDA plugin, beside nccl.c): zc_comm_split through ncclCommSplit
 * and zc_comm_from_nccl. zeroc.h has the contracts.
 *
 * A split exchanges every rank's colour and key first (an all-gather on the
 * communicator's own stream, timed by its watchdog), so a bad colour fails
 * every rank alike and a rank that never comes fails the others within
 * ZC_COMM_TIMEOUT; then ncclCommSplit (non-blocking, polled against the
 * same timeout), whose new rank and size are held to MPI_Comm_split's order
 * (zc__split_rank_of: the host twin the local and MPI backends share), and
 * the outcome of making the new handle is all-gathered over the parent, so
 * a failure on one rank fails every rank.
 *
 * A borrowed communicator (zc_comm_from_nccl) is used as it is: NCCL's
 * rules for it are the program's (one thread at a time, the same order of
 * collectives on every rank), and nothing zeroc does ends it. */
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "base/clock.h"
#include "base/log.h"
#include "comm/nccl.h"
#include "comm/nccl_internal.h"
#include "device/cuda_guard.h"

/* `count` int32 per rank from host `mine` all-gathered into host `all`. */
static zc_status exchange(nccl_comm *c, const int32_t *mine, int32_t *all, size_t count)
{
    const size_t W = (size_t)c->base.world;
    int32_t *d_send = c->d_split + ZC_SPLIT_REC * W, *d_recv = c->d_split;
    cudaError_t e = cudaMemcpyAsync(d_send, mine, count * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return ZC_ERR(ZC_ERR_DEVICE, "zc_comm_split (nccl rank %d): %s", c->base.rank,
                      cudaGetErrorString(e));
    }
    ZC_CHECK(zc__nccl_exchange(c, d_send, d_recv, count));
    e = cudaMemcpy(all, d_recv, count * W * sizeof(int32_t), cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return ZC_ERR(ZC_ERR_DEVICE, "zc_comm_split (nccl rank %d): %s", c->base.rank,
                      cudaGetErrorString(e));
    }
    return ZC_OK;
}

/* The handle over nc (new from a split, or borrowed), on c's device. */
static zc_status wrap_on_device(ncclComm_t nc, int rank, int world, int device, void *stream,
                                bool borrowed, int world_rank, int node_ranks, double timeout_s,
                                zc_comm **out)
{
    nccl_comm *c = NULL;
    ZC_CHECK(zc__nccl_alloc(rank, world, device, timeout_s, &c));
    c->base.world_rank = world_rank;
    c->base.node_ranks = node_ranks;
    c->borrowed_nc = borrowed;
    c->stream = stream;
    c->borrowed_stream = stream != NULL;
    zc_status rc = zc__nccl_cuda_setup(c);
    if (rc == ZC_OK) {
        c->nc = nc;
        rc = zc__nccl_start(c);
    }
    if (rc != ZC_OK) {
        if (!borrowed && !c->nc)
            ncclCommAbort(nc); /* made for this handle, which did not come about */
        zc__nccl_destroy(&c->base);
        return rc;
    }
    *out = &c->base;
    return ZC_OK;
}

zc_status zc__nccl_split(zc_comm *base, int colour, int key, zc_comm **out)
{
    nccl_comm *c = (nccl_comm *)base;
    *out = NULL;
    const int W = base->world, r = base->rank;
    int32_t rec[(size_t)ZC_SPLIT_REC * (size_t)W], mine[ZC_SPLIT_REC] = {colour, key};
    zc_cuda_guard dev_guard;
    zc__cuda_guard_enter(&dev_guard, c->device);
    zc_status rc = exchange(c, mine, rec, ZC_SPLIT_REC);
    if (rc == ZC_OK)
        rc = zc__split_validate(rec, W, "nccl");
    if (rc != ZC_OK) {
        zc__cuda_guard_leave(&dev_guard);
        return rc;
    }
    int want_rank, want_world;
    zc__split_rank_of(rec, W, r, &want_rank, &want_world);

    ncclComm_t nc = NULL;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    pthread_mutex_lock(&c->mu);
    const int failed = c->failed;
    c->in_call = 1;
    ncclComm_t parent = c->nc;
    pthread_mutex_unlock(&c->mu);
    ncclResult_t res = failed || !parent ? ncclInvalidUsage
                                         : ncclCommSplit(parent, colour < 0 ? NCCL_SPLIT_NOCOLOR
                                                                            : colour,
                                                         key, &nc, &cfg);
    if ((res == ncclSuccess || res == ncclInProgress) && nc)
        res = zc__nccl_settle(NULL, nc, ncclInProgress, zc__now_s() + c->timeout_s);
    pthread_mutex_lock(&c->mu);
    c->in_call = 0;
    zc__nccl_abort_if_failed_locked(c);
    pthread_mutex_unlock(&c->mu);
    zc_comm *made = NULL;
    if (res != ncclSuccess) {
        rc = ZC_ERR(ZC_ERR_COMM, "zc_comm_split: ncclCommSplit on nccl rank %d of %d: %s", r, W,
                    failed ? "the communicator failed earlier"
                           : res == ncclInProgress ? "not done within ZC_COMM_TIMEOUT"
                                                   : ncclGetErrorString(res));
        if (nc)
            ncclCommAbort(nc);
        nc = NULL;
    } else if (nc) {
        int got_rank = -1, got_world = -1;
        ncclCommUserRank(nc, &got_rank);
        ncclCommCount(nc, &got_world);
        if (got_rank != want_rank || got_world != want_world) {
            rc = ZC_ERR(ZC_ERR_INTERNAL,
                        "zc_comm_split: ncclCommSplit made rank %d of %d where colour %d key %d "
                        "gives rank %d of %d", got_rank, got_world, colour, key, want_rank,
                        want_world);
            ncclCommAbort(nc);
        } else {
            rc = wrap_on_device(nc, want_rank, want_world, c->device, NULL, false,
                                base->world_rank, base->node_ranks, c->timeout_s, &made);
            if (rc == ZC_OK)
                made->world_size = base->world_size;
        }
    }
    /* The outcome over the parent, so every rank returns the same. */
    char why[256];
    snprintf(why, sizeof why, "%s", rc == ZC_OK ? "" : zc_last_error());
    mine[0] = (int32_t)rc;
    mine[1] = 0;
    zc_status arc = exchange(c, mine, rec, ZC_SPLIT_REC);
    int bad = -1;
    for (int k = 0; arc == ZC_OK && k < W && bad < 0; k++)
        if (rec[(size_t)k * ZC_SPLIT_REC] != ZC_OK)
            bad = k;
    zc__cuda_guard_leave(&dev_guard);
    if (arc != ZC_OK || bad >= 0) {
        if (made)
            made->ops->destroy(made);
        if (arc != ZC_OK)
            return arc;
        const zc_status fs = (zc_status)rec[(size_t)bad * ZC_SPLIT_REC];
        if (bad == r)
            return ZC_ERR(fs, "zc_comm_split (nccl): rank %d of %d: %s", r, W, why);
        return ZC_ERR(fs, "zc_comm_split (nccl): making the new communicator failed on rank %d "
                          "of %d", bad, W);
    }
    if (made)
        ZC_LOGI("comm", "nccl split: rank %d of %d (colour %d) from rank %d of %d", want_rank,
                want_world, colour, r, W);
    *out = made;
    return ZC_OK;
}

zc_status zc__comm_nccl_wrap(void *ncv, int rank, int world, void *stream, int world_rank,
                             int node_ranks, zc_comm **out)
{
    *out = NULL;
    ncclComm_t nc = (ncclComm_t)ncv;
    int n_rank = -1, n_world = -1, device = -1;
    ncclResult_t r = ncclCommUserRank(nc, &n_rank);
    if (r == ncclSuccess)
        r = ncclCommCount(nc, &n_world);
    if (r == ncclSuccess)
        r = ncclCommCuDevice(nc, &device);
    if (r != ncclSuccess)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_comm_from_nccl: the communicator does not answer "
                                          "(ncclCommUserRank/Count/CuDevice: %s); pass an "
                                          "initialised ncclComm_t", ncclGetErrorString(r));
    if (n_rank != rank || n_world != world)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_comm_from_nccl: rank %d of %d was passed but the "
                                          "communicator is rank %d of %d", rank, world, n_rank,
                      n_world);
    double timeout_s = 0;
    ZC_CHECK(zc__comm_timeout_env(&timeout_s));
    zc_cuda_guard dev_guard; /* the caller's thread stays on its own device */
    zc__cuda_guard_enter(&dev_guard, device);
    zc_status rc = wrap_on_device(nc, rank, world, device, stream, true, world_rank, node_ranks,
                                  timeout_s, out);
    zc__cuda_guard_leave(&dev_guard);
    if (rc == ZC_OK)
        ZC_LOGI("comm", "nccl rank %d of %d on cuda:%d: the program's communicator%s", rank,
                world, device, stream ? " and stream" : "");
    return rc;
}
