/* The NCCL communicator's watchdog: every collective is issued with two
 * events on the communicator's stream (nccl.c), and this thread reaps them,
 * starts a collective's clock when its inputs are ready and fails (aborts)
 * the communicator on an asynchronous NCCL error or when the oldest
 * collective has waited for its peers longer than ZC_COMM_TIMEOUT. The rules
 * on who may call NCCL when are nccl_internal.h's (struct nccl_comm). */
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "comm/nccl_internal.h"

struct timespec zc__nccl_in_ns(long ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += ns;
    while (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* Aborts NCCL once the communicator failed and no thread is inside it, so
 * queued kernels exit and streams drain. Called with c->mu held; the mutex is
 * released around ncclCommAbort (which may wait for the device). */
void zc__nccl_abort_if_failed_locked(nccl_comm *c)
{
    if (!c->failed || !c->nc || c->in_call || c->group_open)
        return;
    ncclComm_t nc = c->nc;
    c->nc = NULL; /* no NCCL call after this point: every caller checks failed */
    if (c->borrowed_nc) {
        /* The program's communicator (zc_comm_from_nccl): zeroc stops using
         * it and leaves the abort to the program. */
        ZC_LOGE("comm", "nccl rank %d/%d: zeroc no longer uses the program's communicator; "
                "abort it (ncclCommAbort) before making a new one", c->base.rank, c->base.world);
        return;
    }
    pthread_mutex_unlock(&c->mu);
    ncclCommAbort(nc);
    pthread_mutex_lock(&c->mu);
}

/* Marks the communicator failed (first failure wins) and aborts it unless
 * the issuing thread is inside NCCL (it aborts on the way out). Called with
 * c->mu held; may release it, so callers must not rely on state read before. */
void zc__nccl_fail_locked(nccl_comm *c, const char *msg)
{
    if (c->failed)
        return;
    c->failed = 1;
    snprintf(c->failure, sizeof c->failure, "%s", msg);
    ZC_LOGE("comm", "%s", msg);
    pthread_cond_broadcast(&c->cv);
    zc__nccl_abort_if_failed_locked(c);
}

zc_status zc__nccl_sticky(nccl_comm *c)
{
    return ZC_ERR(ZC_ERR_COMM, "%s", c->failure);
}

/* 1 done, 0 not yet, -1 failed (the communicator is then failed). */
static int query_locked(nccl_comm *c, cudaEvent_t ev, const pending *p, const char *which)
{
    cudaError_t q = cudaEventQuery(ev);
    if (q == cudaSuccess)
        return 1;
    if (q == cudaErrorNotReady) {
        /* Not an error, but the runtime may still record it as the thread's
         * last error; this runs on the caller's thread too, and a later
         * cudaGetLastError() there would blame other work for it. Clear it
         * (PyTorch's stream/event queries do the same). */
        (void)cudaGetLastError();
        return 0;
    }
    (void)cudaGetLastError();
    char msg[512];
    snprintf(msg, sizeof msg, "nccl rank %d/%d: %s #%llu (%zu bytes) failed on cuda:%d (%s): %s",
             c->base.rank, c->base.world, p->op, (unsigned long long)p->seq, p->bytes, c->device,
             which, cudaGetErrorString(q));
    zc__nccl_fail_locked(c, msg);
    return -1;
}

/* Pops completed collectives; fails the communicator on an asynchronous
 * NCCL error or when the oldest one has waited for its peers longer than the
 * timeout. Only the oldest is timed: the ones behind it on the comm stream
 * cannot start before it ends. Called with c->mu held. */
void zc__nccl_reap_locked(nccl_comm *c)
{
    while (c->count && !c->failed) {
        pending *p = &c->ring[c->head];
        int q = query_locked(c, p->done, p, "completion");
        if (q < 0)
            return;
        if (q == 1) {
            c->head = (c->head + 1) % RING;
            c->count--;
            pthread_cond_broadcast(&c->cv);
            continue;
        }
        if (!p->started) {
            q = query_locked(c, p->began, p, "start");
            if (q < 0)
                return;
            if (q == 1) {
                p->started = 1;
                p->start = zc__now_s(); /* late by at most one watchdog period */
            }
        }
        char msg[512];
        ncclResult_t st = ncclSuccess;
        if (c->nc && !c->in_call && !c->group_open &&
            ncclCommGetAsyncError(c->nc, &st) == ncclSuccess && st != ncclSuccess &&
            st != ncclInProgress) {
            snprintf(msg, sizeof msg,
                     "nccl rank %d/%d: asynchronous NCCL error during %s #%llu (%zu bytes): %s",
                     c->base.rank, c->base.world, p->op, (unsigned long long)p->seq, p->bytes,
                     ncclGetErrorString(st));
            zc__nccl_fail_locked(c, msg);
            return;
        }
        if (p->started && zc__now_s() - p->start > c->timeout_s) {
            snprintf(msg, sizeof msg,
                     "nccl rank %d/%d: %s #%llu (%zu bytes) did not finish within %.0f s of "
                     "starting (ZC_COMM_TIMEOUT): a rank skipped or reordered a collective, or "
                     "died; communicator aborted",
                     c->base.rank, c->base.world, p->op, (unsigned long long)p->seq, p->bytes,
                     c->timeout_s);
            zc__nccl_fail_locked(c, msg);
        }
        return;
    }
}

void *zc__nccl_watchdog_main(void *arg)
{
    nccl_comm *c = arg;
    (void)cudaSetDevice(c->device);
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        zc__nccl_reap_locked(c);
        struct timespec ts = zc__nccl_in_ns(20 * 1000 * 1000); /* 20 ms: cheap; timeouts are seconds */
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Waits for a non-blocking NCCL call to leave ncclInProgress, polling
 * without c->mu (c may be NULL before the watchdog exists). Gives up, still
 * ncclInProgress, at the deadline or once the watchdog failed the
 * communicator. */
ncclResult_t zc__nccl_settle(nccl_comm *c, ncclComm_t nc, ncclResult_t r, double deadline)
{
    while (r == ncclInProgress) {
        if (zc__now_s() > deadline)
            return ncclInProgress;
        struct timespec ts = {0, 100 * 1000};
        nanosleep(&ts, NULL);
        if (c) {
            pthread_mutex_lock(&c->mu);
            int failed = c->failed;
            pthread_mutex_unlock(&c->mu);
            if (failed)
                return ncclInProgress;
        }
        if (ncclCommGetAsyncError(nc, &r) != ncclSuccess)
            return ncclInternalError;
    }
    return r;
}
