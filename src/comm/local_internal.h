/* The local communicator's state (internal), shared by local.c (the
 * collectives, groups, creation) and local_split.c (zc_comm_split on
 * threads). local.c's top comment is the contract. */
#ifndef ZC_COMM_LOCAL_INTERNAL_H
#define ZC_COMM_LOCAL_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"

/* One collective as a rank posts it. */
typedef struct local_op {
    const void *send;
    void *recv;
    size_t count;
    int dt, op, root, kind;
} local_op;

/* What a rank posts for one rendezvous: its collectives (one, or a group's;
 * none for a barrier) and its events. */
typedef struct local_slot {
    const local_op *ops;
    int nops;
    void *ready, *done; /* the rank's events (local_comm), on its device */
} local_slot;

/* Collectives one group runs in one rendezvous; a longer group runs in
 * several, LOCAL_GROUP_MAX at a time (allowed: a group's results are only
 * promised after group_end). Reserved with the rank, so queueing never
 * allocates. */
#define LOCAL_GROUP_MAX 64

typedef struct local_comm **local_comm_ptrs;

typedef struct local_group {
    int world;
    int refs;           /* under mu */
    pthread_mutex_t mu; /* refs only: the barrier takes no lock */
    int arrived;        /* atomic: ranks in the barrier now */
    unsigned long generation; /* atomic: barriers opened */
    int broken;         /* atomic */
    /* The futex word sleepers wait on: moves (atomically) whenever the
     * generation moves or the group breaks, after either, so a rank that
     * read it before checking both cannot miss the change and sleep on. */
    uint32_t wake;
    double timeout_s;
    local_slot *slots;
    /* zc_comm_split (local_split.c): each rank's record (ZC_SPLIT_REC words,
     * then its world rank), and what each colour's leader made (a
     * local_comm * per new rank, or NULL when it failed). Reserved with the
     * group, so a split allocates nothing before its ranks agree. */
    int32_t *split_rec;
    local_comm_ptrs *split_out;
} local_group;

typedef struct local_comm {
    zc_comm base;
    local_group *g;
    unsigned long seq; /* collectives issued by this rank, for messages */
    /* On base.dev: recorded on the caller's stream when this rank's buffers
     * are final (ready) and when its share of the work is queued (done). */
    void *ev_ready, *ev_done;
    /* Between group_start and group_end: the collectives queued, all on one
     * stream, run together at group_end (or when LOCAL_GROUP_MAX are). */
    bool in_group;
    int nqueued;
    void *group_stream;
    local_op queued[LOCAL_GROUP_MAX];
    /* Counted for zc__comm_wait_counts (comm.h): rendezvous, those this
     * rank waited in past the spin, its futex sleeps. Written by the rank's
     * thread, read by any (relaxed atomics: counts, not synchronisation). */
    uint64_t meetings, waits, sleeps;
} local_comm;



/* Barrier over the group with ZC_COMM_TIMEOUT; ZC_ERR_COMM when the group
 * is or becomes broken. */
zc_status zc__local_wait(local_comm *c);
/* A group of `world` ranks and its rank handles (comms[r], rank r; world
 * ranks from world_rank[r] (NULL: r), world_size and node_ranks as given), each bound to the host.
 * On failure nothing is left. */
zc_status zc__local_make(int world, double timeout_s, const int *world_rank, int world_size,
                         int node_ranks, zc_comm **comms);
/* zc_comm_split on threads (local_split.c): the local_ops' split. */
zc_status zc__local_split(zc_comm *base, int colour, int key, zc_comm **out);

#endif
