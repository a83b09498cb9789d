/* The NCCL communicator's private state, shared by nccl.c (issuing
 * collectives and groups, creation, destroy) and nccl_watchdog.c (the
 * thread that reaps and times every collective and fails the communicator).
 * nccl.h is the contract. */
#ifndef ZC_COMM_NCCL_INTERNAL_H
#define ZC_COMM_NCCL_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "comm/comm.h"

/* Collectives that may be in flight at once; the issuing thread waits for the
 * oldest when the ring is full. A group holds at most this many too. */
#define RING 256

/* Distinct caller streams one group may order after itself. */
#define GROUP_STREAMS 8

/* One collective. Its clock (the watchdog's timeout) starts when `began`
 * completes, not when the call queued it: `began` is recorded on the comm
 * stream right before the NCCL kernel, so it completes when every earlier
 * collective of this communicator finished and the caller's stream reached
 * the point where the inputs are ready (the fence). Only from then on is the
 * collective waiting for its peers, which is what the timeout bounds. Timing
 * from the enqueue counted the caller's queued compute and the collectives
 * queued ahead (each with its own full timeout) against it, so a deep queue
 * or a long backward pass aborted a healthy communicator. */
typedef struct pending {
    cudaEvent_t began; /* recorded on the comm stream just before the collective */
    cudaEvent_t done;  /* recorded on the comm stream after it */
    uint64_t seq;
    const char *op;
    size_t bytes;
    int grouped;       /* issued inside zc__comm_group_start/_end */
    int started;       /* began observed complete; start is then valid */
    double start;
} pending;

typedef struct nccl_comm {
    zc_comm base;
    ncclComm_t nc;
    int device;
    cudaStream_t stream;  /* the communicator's own stream */
    cudaEvent_t fence;    /* caller's stream -> comm stream */
    int32_t *d_scratch;   /* barrier payload */
    double timeout_s;
    unsigned stall_ms;    /* test hook: stall inside the next collective */

    /* Guards everything below. Never held while this thread is inside an
     * NCCL call that can wait (a launch, ncclGroupEnd, settle): the watchdog
     * must be able to time out and fail the communicator meanwhile. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pending ring[RING];
    unsigned head, count; /* in flight, oldest at head */
    unsigned staged;      /* issued in the open group, after the in-flight ones */
    uint64_t seq;
    int failed;           /* sticky: aborted or errored */
    char failure[512];
    /* NCCL allows one thread at a time on a communicator, and a group's calls
     * from one thread only: while the issuing thread is inside an NCCL call
     * (in_call) or has a group open, the watchdog neither queries nor aborts
     * the communicator; a failure it detects then is recorded and the
     * issuing thread aborts when it leaves NCCL (abort_if_failed_locked). */
    int in_call;
    int group_open;
    void *group_streams[GROUP_STREAMS];
    int ngroup_streams;
    int stop;
    pthread_t watchdog;
    int watchdog_started;
    /* zc_comm_from_nccl: nc (and, when given, stream) are the program's:
     * never finalised, destroyed or aborted here (a failure only stops
     * zeroc using them). */
    int borrowed_nc, borrowed_stream;
    int32_t *d_split;     /* zc_comm_split's exchange: ZC_SPLIT_REC * (world + 1) int32 */
} nccl_comm;

/* ---- nccl.c, for nccl_wrap.c ---------------------------------------------- */

/* A communicator struct for rank `rank` of `world` on `device`, its mutex
 * and condition made, nothing on the device yet (free with
 * zc__nccl_destroy). */
zc_status zc__nccl_alloc(int rank, int world, int device, double timeout_s, nccl_comm **out);
/* Its stream (unless c->stream was set: the caller's), events and device
 * scratch, on its device (current). */
zc_status zc__nccl_cuda_setup(nccl_comm *c);
/* Starts the watchdog once c->nc is set. */
zc_status zc__nccl_start(nccl_comm *c);
/* The ops' destroy: waits for what is queued, releases what zeroc made. */
void zc__nccl_destroy(zc_comm *base);
/* An all-gather of `count` int32 per rank on the communicator's own
 * stream, waited for (for exchanges of a few words: zc_comm_split). */
zc_status zc__nccl_exchange(nccl_comm *c, const int32_t *d_send, int32_t *d_recv, size_t count);

/* ---- nccl_wrap.c ----------------------------------------------------------- */

/* zc_comm_split on NCCL (ncclCommSplit): the nccl ops' split. */
zc_status zc__nccl_split(zc_comm *base, int colour, int key, zc_comm **out);

/* ---- nccl_watchdog.c ----------------------------------------------------- */

/* The CLOCK_REALTIME time ns nanoseconds from now (pthread_cond_timedwait). */
struct timespec zc__nccl_in_ns(long ns);
/* Aborts NCCL once the communicator failed and no thread is inside it, so
 * queued kernels exit and streams drain. Called with c->mu held; the mutex is
 * released around ncclCommAbort (which may wait for the device). */
void zc__nccl_abort_if_failed_locked(nccl_comm *c);
/* Marks the communicator failed (first failure wins) and aborts it unless
 * the issuing thread is inside NCCL (it aborts on the way out). Called with
 * c->mu held; may release it, so callers must not rely on state read before. */
void zc__nccl_fail_locked(nccl_comm *c, const char *msg);
/* ZC_ERR_COMM with the communicator's first failure. */
zc_status zc__nccl_sticky(nccl_comm *c);
/* Pops completed collectives; fails the communicator on an asynchronous
 * NCCL error or when the oldest one has waited for its peers longer than the
 * timeout. Called with c->mu held. */
void zc__nccl_reap_locked(nccl_comm *c);
/* The watchdog thread (arg: the nccl_comm): reaps every 20 ms until stop. */
void *zc__nccl_watchdog_main(void *arg);
/* Waits for a non-blocking NCCL call to leave ncclInProgress, polling
 * without c->mu (c may be NULL before the watchdog exists). Gives up, still
 * ncclInProgress, at the deadline or once the watchdog failed the
 * communicator. */
ncclResult_t zc__nccl_settle(nccl_comm *c, ncclComm_t nc, ncclResult_t r, double deadline);

#endif
