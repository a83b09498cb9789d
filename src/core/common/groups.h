/* The engine's communicator groups and node map (groups.c): hybrid
 * sharding's groups inside one engine and the bytes of every collective by
 * link.
 *
 * The engine runs over one communicator (its world: W ranks, perhaps a
 * data-parallel group split from a larger job). Hybrid sharding adds groups
 * made from it with zc_comm_split at zc_engine_build:
 *
 *   SHARD    the ranks a chunk is sharded over: the world, or with MiCS
 *            (mics_shard_size S) the S consecutive ranks of this one. Its
 *            rank q is this rank's shard index everywhere (layout, Adam,
 *            reductions, gathers, checkpoints): e->srank, e->sworld.
 *   REPLICA  MiCS: the W/S ranks holding the same shard, one per shard
 *            group; gradients are all-reduced over it once per window.
 *   INTER, INTRA  MiCS with mics_hierarchical_params_gather: the shard
 *            group's ranks with this one's index on each of the J nodes it
 *            spans, and the ones on this rank's node. A shard group gathers
 *            in two steps, across nodes first (into a scratch of J shards,
 *            reserved at build for the largest chunk), then inside each
 *            node (DeepSpeed's order), so each rank sends only its own
 *            shard across nodes; shards are owned as without it, so the
 *            sums and the parameters are the same bits.
 *   HPZ      hpZ (zero_hpz_partition_size H, stage 3): the H consecutive
 *            ranks of this one; the gathers of a chunk after its first of a
 *            step read its secondary partition there (src/zero3/hpz.c).
 *
 * The node map: rank r of the engine sits on node world_rank(r) / N, N the
 * ranks per node: ZC_RANKS_PER_NODE when set (a whole number in [1, 2^20];
 * tests use it to make one machine look like several nodes), else the
 * launcher's (LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE, ...,
 * SLURM_NTASKS_PER_NODE), else the communicator's (MPI: the ranks that
 * share memory; threads: all of them - one node). world_rank is the rank in
 * the job the communicator descends from, so an engine over a split group
 * still knows which of its peers share its node. Every rank must find the
 * same N (checked at build).
 *
 * Bytes by link: every model collective (the ones counted in zc_stats'
 * comm_bytes_last_step) adds what this rank sends to peers on its node and
 * on other nodes (comm.h, zc__link_bytes) to e->link_cur. */
#ifndef ZC_CORE_GROUPS_H
#define ZC_CORE_GROUPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/dtype.h"
#include "config/config.h"
#include "zeroc/zeroc.h"

typedef enum zc_grp {
    ZC_GRP_WORLD = 0,
    ZC_GRP_SHARD,
    ZC_GRP_REPLICA,
    ZC_GRP_INTER,
    ZC_GRP_INTRA,
    ZC_GRP_HPZ,
    ZC_GRP__COUNT
} zc_grp;

typedef struct zc_eng_group {
    zc_comm *comm;   /* NULL: this engine has no such group */
    bool owned;      /* split by the engine; destroyed with it */
    int rank, size;
    int *node;       /* size entries: each member's node, in group-rank order */
} zc_eng_group;

typedef struct zc_eng_groups {
    zc_eng_group g[ZC_GRP__COUNT];
    int ranks_per_node, nodes; /* the node map: N, and the nodes the world spans */
    int *node_of;              /* world entries: each engine rank's node */
    int mics;                  /* the shard group's size: S, or W without MiCS */
    int hpz;                   /* H, or 0 without hpZ */
    bool hier;                 /* two-step gathers of the shard group */
    void *hier_scratch;        /* their first step's output: J shards of the largest chunk */
    size_t hier_scratch_bytes;
} zc_eng_groups;

/* Collective, at zc_engine_build before the layout: the node map, the
 * checks that need it (MiCS and hpZ sizes against W, the hierarchical
 * gather's shape), and the splits. On failure every rank returns the same
 * error (ZC_ERR_CONFIG naming the key and both sizes) and nothing is left
 * to free but what zc__groups_free frees. */
zc_status zc__groups_build(zc_engine *e);
/* After the layout (zc_engine_build): the hierarchical gather's scratch. */
zc_status zc__groups_reserve(zc_engine *e);
/* Destroys the engine's own communicators (before its device goes). */
void zc__groups_free(zc_engine *e);
/* Whether group g exists (more than one rank in it). */
bool zc__grp_on(const zc_engine *e, zc_grp g);

/* The collectives over group g (eng_base.h's world ones are these with
 * ZC_GRP_WORLD): payload counted in comm_cur (all_reduce: n; the others: the
 * group's size x n, in dt) and bytes by link in link_cur, when count_it;
 * each recorded in the timeline and the comms logger as issued by `site`
 * (static text; the macros give the caller's function). A failure breaks
 * the engine. */
zc_status zc__eng_grp_all_reduce_at(zc_engine *e, zc_grp g, void *buf, size_t n, zc_dtype dt,
                                    bool count_it, void *stream, const char *site);
zc_status zc__eng_grp_reduce_scatter_at(zc_engine *e, zc_grp g, const void *send, void *recv,
                                        size_t recv_n, zc_dtype dt, bool count_it, void *stream,
                                        const char *site);
zc_status zc__eng_grp_all_gather_at(zc_engine *e, zc_grp g, const void *send, void *recv,
                                    size_t send_n, zc_dtype dt, bool count_it, void *stream,
                                    const char *site);
#define zc__eng_grp_all_reduce(e, g, buf, n, dt, count_it, stream) \
    zc__eng_grp_all_reduce_at(e, g, buf, n, dt, count_it, stream, __func__)
#define zc__eng_grp_reduce_scatter(e, g, send, recv, recv_n, dt, count_it, stream) \
    zc__eng_grp_reduce_scatter_at(e, g, send, recv, recv_n, dt, count_it, stream, __func__)
#define zc__eng_grp_all_gather(e, g, send, recv, send_n, dt, count_it, stream) \
    zc__eng_grp_all_gather_at(e, g, send, recv, send_n, dt, count_it, stream, __func__)
/* A communicator group over group g: its collectives batched until _end,
 * which launches them (a failure there breaks the engine as one would). */
zc_status zc__eng_grp_start(zc_engine *e, zc_grp g);
zc_status zc__eng_grp_end(zc_engine *e, zc_grp g);

/* All-gathers of chunks over the shard group, on the engine's stream: recv
 * (n elements per shard rank) gets every shard in shard-rank order from
 * send (this rank's n elements; it may be recv + e->srank * n). One
 * communicator group over the requests; with the hierarchical gather, two
 * steps per request (across nodes, then inside the node). */
typedef struct zc_gather_req {
    const void *send;
    void *recv;
    size_t n;
} zc_gather_req;
zc_status zc__eng_shard_gathers_at(zc_engine *e, const zc_gather_req *req, int nreq, zc_dtype dt,
                                   bool count_it, const char *site);
#define zc__eng_shard_gathers(e, req, nreq, dt, count_it) \
    zc__eng_shard_gathers_at(e, req, nreq, dt, count_it, __func__)

#endif
