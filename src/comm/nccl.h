/* The NCCL communicator (internal; built when NCCL is found).
 *
 * One rank per GPU. Collectives run on the communicator's own stream: the
 * caller's stream is fenced into it with an event before the call and the
 * caller's stream waits on the collective's completion event after it, so
 * communication overlaps whatever else the caller queues, and ordering with
 * compute is kept without host synchronisation.
 *
 * Non-blocking NCCL (ncclConfig_t.blocking = 0) and a watchdog thread: a
 * collective not finished ZC_COMM_TIMEOUT seconds (default 600) after it
 * started, or an asynchronous NCCL error, aborts the communicator
 * (ncclCommAbort). "Started" is when the collective reached the head of the
 * comm stream with its inputs ready (an event recorded just before it): from
 * then on it only waits for its peers, which is what a timeout can blame.
 * Time spent queued behind the caller's compute or behind earlier
 * collectives does not count, so a deep queue cannot abort a healthy job;
 * the flip side is that a collective whose inputs never become ready (the
 * caller's stream hangs) is never timed out by this communicator, and
 * barrier()/destroy then wait for it as cudaStreamSynchronize would.
 * The error is sticky: every later call on the handle returns ZC_ERR_COMM
 * with the message naming the rank, the collective, its sequence number and
 * size. barrier() waits for completion, so it reports a timeout itself.
 *
 * The issuing thread never holds the communicator's mutex while it waits in
 * NCCL (a launch, ncclGroupEnd), so the watchdog keeps timing meanwhile; the
 * watchdog never calls into NCCL while the issuing thread is inside it or has
 * a group open (NCCL: one thread per communicator at a time), and leaves the
 * abort to that thread. group_start/group_end (comm.h) wrap ncclGroupStart/
 * ncclGroupEnd: the collectives between them launch as one group.
 *
 * 16-bit sums are NCCL's (ring/tree order, rounded per step), not the local
 * backend's fp32-then-round-once: NCCL results are not bitwise reproducible
 * across world sizes. */
#ifndef ZC_COMM_NCCL_H
#define ZC_COMM_NCCL_H

#include "comm/comm.h"

/* Creates rank `rank` of `world` on CUDA device `device` from a 128-byte
 * ncclUniqueId every rank got from rank 0. Waits for the non-blocking init up
 * to init_timeout_s seconds (then aborts and fails). */
zc_status zc__comm_nccl_create(int rank, int world, int device, const void *unique_id,
                               double init_timeout_s, zc_comm **out);

/* zc_comm_from_nccl (nccl_wrap.c): a handle over the program's ncclComm_t
 * nc and, when not NULL, its stream; world_rank and node_ranks are the
 * node map's coordinates (comm.h), found by libzeroc. */
zc_status zc__comm_nccl_wrap(void *nc, int rank, int world, void *stream, int world_rank,
                             int node_ranks, zc_comm **out);

/* Test hook: the next collective (or group) issued stalls ~ms milliseconds
 * on the communicator's stream after it started and before NCCL runs it, as a
 * collective whose peer never arrives would (exercises the watchdog with one
 * GPU). */
zc_status zc__comm_nccl_stall(zc_comm *c, unsigned ms);

#endif
