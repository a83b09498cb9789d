/* The communication seam (internal): collectives between data-parallel ranks.
 *
 * Backends: local (ranks are threads of one process), nccl (one rank per GPU),
 * mpi (host buffers across processes). The engine uses only these calls.
 *
 * Counts are in elements. Buffers live on the device the communicator was
 * bound to (zc__comm_bind_device; the host until then). Sums of 16-bit
 * payloads are accumulated in fp32 and rounded once; the local backend sums in
 * rank order so results are deterministic and identical on every rank.
 * In-place use is allowed where noted. Every call is collective: each rank of
 * the world calls the same sequence with the same counts and dtypes.
 */
#ifndef ZC_COMM_COMM_H
#define ZC_COMM_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device/device.h"

typedef enum zc_red_op { ZC_RED_SUM = 0, ZC_RED_MAX } zc_red_op;

/* How a rank's collectives waited, counted by the backends that can
 * (zc__comm_wait_counts, below, says what each count is). */
typedef struct zc_comm_wait_counts {
    uint64_t meetings, waits, sleeps, restarts;
} zc_comm_wait_counts;

typedef struct zc_comm_ops {
    const char *name; /* "local", "nccl", "mpi" */
    /* recv[i] = op over ranks of send[i], count elements; send == recv allowed. */
    zc_status (*all_reduce)(zc_comm *c, const void *send, void *recv, size_t count, zc_dtype dt,
                            zc_red_op op, void *stream);
    /* recv (recv_count elements) = this rank's slice
     * [rank*recv_count, (rank+1)*recv_count) of the sum over ranks of send
     * (world*recv_count elements). recv may alias that slice of send. */
    zc_status (*reduce_scatter)(zc_comm *c, const void *send, void *recv, size_t recv_count,
                                zc_dtype dt, void *stream);
    /* recv (world*send_count elements) = concatenation in rank order of every
     * rank's send. send may alias recv + rank*send_count. */
    zc_status (*all_gather)(zc_comm *c, const void *send, void *recv, size_t send_count,
                            zc_dtype dt, void *stream);
    /* recv (world*count elements): block k (count elements) = rank k's
     * block r of its send (world*count elements), r this rank - MPI_Alltoall
     * with equal blocks. send and recv must not overlap. Rank order and the
     * bytes are exact (no arithmetic): every backend gives the same bits. */
    zc_status (*all_to_all)(zc_comm *c, const void *send, void *recv, size_t count, zc_dtype dt,
                            void *stream);
    /* buf (count elements) = root's buf on every rank. */
    zc_status (*broadcast)(zc_comm *c, void *buf, size_t count, zc_dtype dt, int root,
                           void *stream);
    zc_status (*barrier)(zc_comm *c);
    /* Optional (NULL: the backend runs each collective at once, and the
     * wrappers below succeed without doing anything). Collectives issued
     * between group_start and group_end, by the same thread, may be launched
     * together at group_end (NCCL: ncclGroupStart/ncclGroupEnd; local: one
     * rendezvous, all on one stream; MPI: messages posted at once), so their
     * buffers must stay valid and unchanged until then, and their results
     * are ready only after it (ordered on each caller stream used). Every
     * group_start that succeeded needs its group_end, also after a failure
     * inside the group; groups do not nest; no barrier inside a group. */
    zc_status (*group_start)(zc_comm *c);
    zc_status (*group_end)(zc_comm *c);
    /* Attaches the device whose buffers this rank will pass (called once by the
     * engine before the first collective). */
    zc_status (*bind_device)(zc_comm *c, zc_device *dev);
    /* Optional: drops what the communicator made on its bound device (the
     * local backend's events) and binds the host. The engine calls it before
     * it destroys the device it bound. */
    void (*unbind_device)(zc_comm *c);
    void (*destroy)(zc_comm *c);
    /* Optional (NULL: zc_comm_split is ZC_ERR_UNSUPPORTED): zc_comm_split
     * on this backend (zeroc.h has the contract). Collective over c; the
     * ranks' colours and keys are exchanged first, so a bad colour on any
     * rank fails every rank alike (zc__split_validate). */
    zc_status (*split)(zc_comm *c, int colour, int key, zc_comm **out);
    /* Optional (NULL: zc__comm_wait_counts returns false): the counts of
     * the waits of this rank's collectives (zc_comm_wait_counts). */
    void (*wait_counts)(const zc_comm *c, zc_comm_wait_counts *out);
} zc_comm_ops;

struct zc_comm {
    const zc_comm_ops *ops;
    int rank, world;
    int local_rank, local_world;
    zc_device *dev; /* bound device, host by default */
    /* Where this rank stands in the job, for the engine's node map (which
     * ranks share a node: core/common/groups.c): its rank in the world its
     * communicators descend from (the launcher's, MPI_COMM_WORLD's, the
     * thread world's; a split keeps its parent's), its size, and the ranks per node
     * of that world as the backend knows them (MPI: the ranks sharing
     * memory; threads: the whole thread world; -1: unknown). */
    int world_rank;
    int node_ranks;
    int world_size; /* that world's ranks (>= world; ZC_FAULTS' RANK is a world rank) */
};

/* Convenience wrappers that validate and dispatch. */
static inline zc_status zc__all_reduce(zc_comm *c, const void *s, void *r, size_t n, zc_dtype dt,
                                       zc_red_op op, void *stream)
{ return c->ops->all_reduce(c, s, r, n, dt, op, stream); }
static inline zc_status zc__reduce_scatter(zc_comm *c, const void *s, void *r, size_t n,
                                           zc_dtype dt, void *stream)
{ return c->ops->reduce_scatter(c, s, r, n, dt, stream); }
static inline zc_status zc__all_gather(zc_comm *c, const void *s, void *r, size_t n, zc_dtype dt,
                                       void *stream)
{ return c->ops->all_gather(c, s, r, n, dt, stream); }
static inline zc_status zc__all_to_all(zc_comm *c, const void *s, void *r, size_t n, zc_dtype dt,
                                       void *stream)
{ return c->ops->all_to_all(c, s, r, n, dt, stream); }
static inline zc_status zc__broadcast(zc_comm *c, void *b, size_t n, zc_dtype dt, int root,
                                      void *stream)
{ return c->ops->broadcast(c, b, n, dt, root, stream); }
static inline zc_status zc__barrier(zc_comm *c) { return c->ops->barrier(c); }
static inline zc_status zc__comm_group_start(zc_comm *c)
{ return c->ops->group_start ? c->ops->group_start(c) : ZC_OK; }
static inline zc_status zc__comm_group_end(zc_comm *c)
{ return c->ops->group_end ? c->ops->group_end(c) : ZC_OK; }

/* ---- splits (split.c; zc_comm_split) ------------------------------------ */

/* Words of one rank's record in a split's exchange: its colour and key. */
#define ZC_SPLIT_REC 2
/* ZC_ERR_INVALID_ARG naming the first rank (of W) whose colour is neither
 * >= 0 nor ZC_COMM_SPLIT_NONE in the exchanged records rec[r * ZC_SPLIT_REC
 * + {0, 1}] = {colour, key}: the same verdict on every rank. */
zc_status zc__split_validate(const int32_t *rec, int W, const char *backend);
/* The ranks of colour `colour` in their new order - by key, ties by rank -
 * into members (W entries of room); returns how many. MPI_Comm_split's
 * order. */
int zc__split_members(const int32_t *rec, int W, int colour, int *members);
/* Rank r's place in its colour's new communicator, and that
 * communicator's size (both -1 for ZC_COMM_SPLIT_NONE). */
void zc__split_rank_of(const int32_t *rec, int W, int r, int *new_rank, int *new_world);

/* ---- bytes by link (links.c) --------------------------------------------- */

/* The bytes rank `me` of a group of n ranks sends in one collective, split
 * by whether the peer is on its node (out[0]) or another one (out[1]):
 * node[i] is member i's node. The model is a direct exchange between the
 * group's ranks - what the local and MPI communicators do (mpi.h): an
 * all-gather or reduce-scatter of `count` elements per rank sends count to
 * every peer; an all-reduce of count elements sends peer k its slice
 * [count*k/n, count*(k+1)/n) and then its own slice to every peer. NCCL's
 * rings and trees send the same total per rank but route part of it
 * differently. kind is K_ALL_REDUCE, K_REDUCE_SCATTER, K_ALL_GATHER or
 * K_ALL_TO_ALL (count to every peer, as an all-gather). */
void zc__link_bytes(int kind, size_t count, size_t esz, const int *node, int n, int me,
                    int64_t out[2]);
/* The same when the members on this rank's node are exactly the group
 * ranks [lo, hi) (me among them), in O(1): for groups whose members are in
 * node order, as the planner's are. */
void zc__link_bytes_range(int kind, size_t count, size_t esz, int n, int me, int lo, int hi,
                          int64_t out[2]);

/* The collective kinds the host backends (local, mpi) tag their in-flight
 * operations with, and their names in messages ("all_reduce", ...). */
enum { K_ALL_REDUCE = 1, K_REDUCE_SCATTER, K_ALL_GATHER, K_BROADCAST, K_BARRIER, K_ALL_TO_ALL };
const char *zc__coll_kind_name(int kind);

/* How a rank's meetings with its peers went, counted over the
 * communicator's life. Tests and benches hold the waiting to its design by
 * these counts rather than by a time (a time depends on what else the
 * machine runs):
 *   meetings: local: rendezvous of the ranks (one per collective or barrier
 *             outside a group, one per up to 64 collectives inside); MPI: 0;
 *   waits:    meetings (local) or poll loops (MPI) that found a peer missing
 *             after their first look (local: after the spin);
 *   sleeps:   times the waiting thread gave up its core - a futex sleep
 *             (local) or a backoff nap (MPI, base/backoff.h);
 *   restarts: MPI: polls that made progress and so started a new spin.
 * zc__comm_wait_counts fills *out for the backends that count (local, MPI:
 * the ops' wait_counts) and returns false (leaving *out zeroed) for another.
 * The local backend's counts may be read from another thread while the rank
 * runs; the MPI backend's by the rank's own thread. */
bool zc__comm_wait_counts(const zc_comm *c, zc_comm_wait_counts *out);

/* ZC_COMM_TIMEOUT, the seconds one collective may wait for its peers, the
 * same on every backend (local, mpi, nccl): unset or empty gives 600;
 * anything but a decimal number in [0.001, 604800] (one week) is
 * ZC_ERR_CONFIG naming the value and the range (src/base/env.h). Read by
 * each communicator's creation, which fails on a bad value. */
#define ZC_COMM_TIMEOUT_DEFAULT_S 600.0
#define ZC_COMM_TIMEOUT_MIN_S 0.001
#define ZC_COMM_TIMEOUT_MAX_S 604800.0
zc_status zc__comm_timeout_env(double *out);

#endif
