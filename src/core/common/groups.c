/* The engine's communicator groups and node map: groups.h says what each
 * group is for and how the node map is read. */
#include <stdio.h>
#include <string.h>

#include "base/env.h"
#include "comm/bootstrap.h"
#include "core/engine.h"

#define RANKS_PER_NODE_MAX (1 << 20)

static void hier_index(const zc_engine *e, int k, int *l, int *j, int *J);

/* What every rank contributes to the node map's exchange. */
typedef struct node_rec {
    int32_t world_rank, ranks_per_node, from_env;
    /* The hybrid settings, compared before any split: ranks that disagree
     * would split into groups the others never join. */
    int32_t mics, hier, hpz;
} node_rec;

/* This rank's ranks per node: ZC_RANKS_PER_NODE, the launcher's, the
 * communicator's; 0 when none says (then the world is one node). */
static zc_status ranks_per_node(const zc_engine *e, int *out, int *from_env)
{
    bool set = false;
    int n = 0;
    ZC_CHECK(zc__env_int("ZC_RANKS_PER_NODE", 1, RANKS_PER_NODE_MAX,
                         "(the ranks of the job on each node)", &set, &n));
    *from_env = set;
    if (set) {
        *out = n;
        return ZC_OK;
    }
    /* Threads of one process share its node whatever a launcher says. */
    if (strcmp(e->comm->ops->name, "local") != 0) {
        zc_launch_env env;
        if (zc__launch_env_read(&env, false) == ZC_OK && env.local_world > 0) {
            *out = env.local_world;
            return ZC_OK;
        }
        zc__error_clear();
    }
    *out = e->comm->node_ranks > 0 ? e->comm->node_ranks : 0;
    return ZC_OK;
}

/* The node map, agreed: every rank's world rank and ranks per node. */
static zc_status node_map(zc_engine *e, zc_status prior)
{
    zc_eng_groups *G = &e->topo;
    const int W = e->world;
    const zc_config *cfg = e->cfg;
    node_rec mine = {e->comm->world_rank, 0, 0,
                     (int32_t)(cfg->zero.mics_shard_size > 0 ? cfg->zero.mics_shard_size : 0),
                     cfg->zero.mics_hierarchical_params_gather,
                     (int32_t)(cfg->zero.zero_hpz_partition_size > 1
                                   ? cfg->zero.zero_hpz_partition_size : 0)};
    int rpn = 0, env = 0;
    zc_status rc = prior != ZC_OK ? prior : ranks_per_node(e, &rpn, &env);
    mine.ranks_per_node = rpn;
    mine.from_env = env;
    if (mine.world_rank < 0)
        mine.world_rank = e->rank;
    ZC_CHECK(zc__eng_agree_keep_with(e, rc, "zc_engine_build: the node map", &mine, sizeof mine));
    node_rec r0;
    memcpy(&r0, zc__eng_agreed_payload(e, 0), sizeof r0);
    int nodes = 0, last = -1;
    for (int r = 0; r < W; r++) {
        node_rec x;
        memcpy(&x, zc__eng_agreed_payload(e, r), sizeof x);
        if (x.mics != r0.mics || x.hier != r0.hier || x.hpz != r0.hpz)
            return ZC_ERR(ZC_ERR_CONFIG,
                          "zc_engine_build: the ranks disagree: rank 0 has "
                          "zero_optimization.mics_shard_size %d, mics_hierarchical_params_gather "
                          "%d, zero_hpz_partition_size %d but rank %d has %d, %d, %d; every rank "
                          "must use the same configuration", r0.mics, r0.hier, r0.hpz, r, x.mics,
                          x.hier, x.hpz);
        if (x.ranks_per_node != r0.ranks_per_node)
            return ZC_ERR(ZC_ERR_CONFIG,
                          "zc_engine_build: the ranks disagree on the ranks per node: rank 0 has "
                          "%d%s, rank %d has %d%s; set ZC_RANKS_PER_NODE alike on every rank",
                          r0.ranks_per_node, r0.from_env ? " (ZC_RANKS_PER_NODE)" : "", r,
                          x.ranks_per_node, x.from_env ? " (ZC_RANKS_PER_NODE)" : "");
        const int n = r0.ranks_per_node > 0 ? x.world_rank / r0.ranks_per_node : 0;
        G->node_of[r] = n;
        if (n != last)
            nodes++;
        last = n;
    }
    G->ranks_per_node = r0.ranks_per_node > 0 ? r0.ranks_per_node : W;
    G->nodes = nodes;
    return ZC_OK;
}

/* Members of rank r's group of each kind, in group-rank order (engine
 * ranks), and the colour of that group. members has room for W. */
static int members_of(const zc_engine *e, zc_grp g, int r, int *members, int *colour)
{
    const zc_eng_groups *G = &e->topo;
    const int W = e->world, S = G->mics;
    const int g0 = r / S * S; /* this rank's shard group starts here */
    int n = 0;
    switch (g) {
    case ZC_GRP_SHARD:
        for (int k = g0; k < g0 + S; k++)
            members[n++] = k;
        *colour = g0;
        return n;
    case ZC_GRP_REPLICA: {
        int q0 = -1;
        int mem[S];
        members_of(e, ZC_GRP_SHARD, r, mem, colour);
        for (int q = 0; q < S; q++)
            if (mem[q] == r)
                q0 = q;
        for (int h = 0; h < W; h += S) {
            int m2[S], c2;
            members_of(e, ZC_GRP_SHARD, h, m2, &c2);
            members[n++] = m2[q0];
        }
        *colour = q0;
        return n;
    }
    case ZC_GRP_INTER:
    case ZC_GRP_INTRA: {
        int l = 0, j = 0, J = 0;
        hier_index(e, r, &l, &j, &J);
        for (int k = g0; k < g0 + S; k++) {
            int lk, jk, Jk;
            hier_index(e, k, &lk, &jk, &Jk);
            if (g == ZC_GRP_INTER ? lk == l : jk == j)
                members[n++] = k; /* rank order is j order (inter), l order (intra) */
        }
        *colour = g0 + (g == ZC_GRP_INTER ? l : j); /* unique: l, j < S */
        return n;
    }
    case ZC_GRP_HPZ:
        for (int k = r / G->hpz * G->hpz; k < (r / G->hpz + 1) * G->hpz; k++)
            members[n++] = k;
        *colour = r / G->hpz * G->hpz;
        return n;
    default:
        for (int k = 0; k < W; k++)
            members[n++] = k;
        *colour = 0;
        return n;
    }
}

/* Rank k's place in its shard group for the hierarchical gather: the l-th
 * rank (in rank order) on the j-th of the J nodes its shard group spans. */
static void hier_index(const zc_engine *e, int k, int *l, int *j, int *J)
{
    const zc_eng_groups *G = &e->topo;
    const int S = G->mics, g0 = k / S * S;
    *l = *j = 0;
    *J = 1;
    int nodes = 0, prev = -1;
    for (int m = g0; m < g0 + S; m++) {
        if (G->node_of[m] != prev)
            nodes++;
        prev = G->node_of[m];
        if (m == k)
            *j = nodes - 1;
        if (m < k && G->node_of[m] == G->node_of[k])
            (*l)++;
    }
    *J = nodes;
}

/* The hierarchical gather's shape: every shard group spans J >= 2 nodes
 * with the same number of its ranks on each, and each node's ranks are
 * consecutive (ranks are laid out by node, as launchers number them). */
static zc_status check_hier(const zc_engine *e)
{
    const zc_eng_groups *G = &e->topo;
    const int W = e->world, S = G->mics;
    for (int g0 = 0; g0 < W; g0 += S) {
        int J = 0, prev = -1, run = 0, per = -1;
        for (int m = g0; m <= g0 + S; m++) {
            if (m < g0 + S && G->node_of[m] == prev) {
                run++;
                continue;
            }
            if (prev >= 0) {
                if (per >= 0 && run != per)
                    return ZC_ERR(ZC_ERR_CONFIG,
                                  "zero_optimization.mics_hierarchical_params_gather: the shard "
                                  "group of ranks %d-%d has %d ranks on one node and %d on "
                                  "another; a hierarchical gather needs the same number on each "
                                  "(ranks per node %d)", g0, g0 + S - 1, per, run,
                                  G->ranks_per_node);
                per = run;
                J++;
            }
            if (m < g0 + S) {
                for (int k = g0; k < m; k++)
                    if (G->node_of[k] == G->node_of[m])
                        return ZC_ERR(ZC_ERR_CONFIG,
                                      "zero_optimization.mics_hierarchical_params_gather: the "
                                      "ranks of a node are not consecutive in the shard group of "
                                      "ranks %d-%d", g0, g0 + S - 1);
                prev = G->node_of[m];
                run = 1;
            }
        }
        if (J < 2)
            return ZC_ERR(ZC_ERR_CONFIG,
                          "zero_optimization.mics_hierarchical_params_gather: the shard group of "
                          "mics_shard_size %d ranks lies within one node (%d ranks per node): "
                          "there is nothing to gather across nodes (DeepSpeed refuses it too); "
                          "set it to false", S, G->ranks_per_node);
    }
    return ZC_OK;
}

/* Group g's members and node table, before any split: every allocation of
 * the groups is made (and agreed) before the first collective of them. */
static zc_status plan_group(zc_engine *e, zc_grp g, int *colour, int *me)
{
    zc_eng_groups *G = &e->topo;
    const int W = e->world;
    int members[W];
    const int n = members_of(e, g, e->rank, members, colour);
    *me = -1;
    for (int i = 0; i < n; i++)
        if (members[i] == e->rank)
            *me = i;
    zc_eng_group *grp = &G->g[g];
    ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, sizeof(int) * (size_t)n, "group nodes",
                            (void **)&grp->node));
    grp->size = n;
    grp->rank = *me;
    for (int i = 0; i < n; i++)
        grp->node[i] = G->node_of[members[i]];
    return ZC_OK;
}

/* Splits the engine's communicator for planned group g (collective: every
 * rank calls it for every group, in the same order; the split agrees its
 * own outcome). */
static zc_status split_group(zc_engine *e, zc_grp g, int colour, int me)
{
    zc_eng_group *grp = &e->topo.g[g];
    zc_comm *c = NULL;
    ZC_CHECK(zc_comm_split(e->comm, colour, me, &c));
    grp->comm = c;
    grp->owned = true;
    if (!c || zc_comm_rank(c) != me || zc_comm_world(c) != grp->size)
        return ZC_ERR(ZC_ERR_INTERNAL, "zc_engine_build: group %d: rank %d of %d where %d of %d "
                                       "was planned", (int)g, c ? zc_comm_rank(c) : -1,
                      c ? zc_comm_world(c) : -1, me, grp->size);
    return ZC_OK;
}

/* The world itself as a group (the engine's communicator, not owned). */
static zc_status world_group(zc_engine *e, zc_grp g)
{
    zc_eng_group *grp = &e->topo.g[g];
    grp->comm = e->comm;
    grp->owned = false;
    grp->rank = e->rank;
    grp->size = e->world;
    ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, sizeof(int) * (size_t)e->world,
                            "group nodes", (void **)&grp->node));
    memcpy(grp->node, e->topo.node_of, sizeof(int) * (size_t)e->world);
    return ZC_OK;
}

zc_status zc__groups_build(zc_engine *e)
{
    zc_eng_groups *G = &e->topo;
    const zc_config *cfg = e->cfg;
    const int W = e->world;
    /* Its outcome rides on the node map's agreement. */
    const zc_status arc = zc__host_alloc(&e->acct, ZC_MEM_OTHER, sizeof(int) * (size_t)W,
                                         "node map", (void **)&G->node_of);
    ZC_CHECK(node_map(e, arc));
    G->mics = cfg->zero.mics_shard_size > 0 ? (int)cfg->zero.mics_shard_size : W;
    G->hier = cfg->zero.mics_shard_size > 0 && cfg->zero.mics_hierarchical_params_gather;
    G->hpz = e->stage == 3 && !e->stage_auto && cfg->zero.zero_hpz_partition_size > 1
                 ? (int)cfg->zero.zero_hpz_partition_size : 0;
    /* The sizes were held to W at zc_engine_create (zc__groups_check). */
    if (G->hier)
        ZC_CHECK(check_hier(e));
    /* The groups this engine splits, in an order every rank shares. */
    zc_grp split[ZC_GRP__COUNT];
    int nsplit = 0, colour[ZC_GRP__COUNT], me[ZC_GRP__COUNT];
    if (G->mics < W) {
        split[nsplit++] = ZC_GRP_SHARD;
        split[nsplit++] = ZC_GRP_REPLICA;
    }
    if (G->hier) {
        split[nsplit++] = ZC_GRP_INTER;
        split[nsplit++] = ZC_GRP_INTRA;
    }
    if (G->hpz > 1 && G->hpz < W)
        split[nsplit++] = ZC_GRP_HPZ;
    /* Rank-local first, agreed: the tables. */
    zc_status rc = world_group(e, ZC_GRP_WORLD);
    if (rc == ZC_OK && G->mics == W)
        rc = world_group(e, ZC_GRP_SHARD);
    if (rc == ZC_OK && G->hpz == W)
        rc = world_group(e, ZC_GRP_HPZ);
    for (int i = 0; i < nsplit && rc == ZC_OK; i++)
        rc = plan_group(e, split[i], &colour[i], &me[i]);
    ZC_CHECK(zc__eng_agree_keep(e, rc, "zc_engine_build: the hybrid sharding groups"));
    /* The splits, each agreed by itself; then the devices, agreed. */
    for (int i = 0; i < nsplit; i++)
        ZC_CHECK(split_group(e, split[i], colour[i], me[i]));
    rc = ZC_OK;
    for (int i = 0; i < nsplit && rc == ZC_OK; i++)
        rc = G->g[split[i]].comm->ops->bind_device(G->g[split[i]].comm, e->dev);
    ZC_CHECK(zc__eng_agree_keep(e, rc, "zc_engine_build: binding the groups' communicators"));
    e->srank = G->g[ZC_GRP_SHARD].rank;
    e->sworld = G->g[ZC_GRP_SHARD].size;
    if (G->mics < W || G->hpz)
        ZC_LOGI("core", "hybrid sharding: %s %d of %d (shard group %d of %d ranks%s), %d nodes "
                "of %d ranks", G->mics < W ? "MiCS replica" : "hpZ group",
                G->mics < W ? G->g[ZC_GRP_REPLICA].rank : e->rank / (G->hpz ? G->hpz : 1),
                G->mics < W ? W / G->mics : W / (G->hpz ? G->hpz : 1), e->srank, e->sworld,
                G->hier ? ", gathered across nodes, then inside each" : "", G->nodes,
                G->ranks_per_node);
    return ZC_OK;
}

void zc__groups_free(zc_engine *e)
{
    zc_eng_groups *G = &e->topo;
    zc__eng_free(e, ZC_MEM_BUFFERS, &G->hier_scratch, G->hier_scratch_bytes);
    G->hier_scratch_bytes = 0;
    for (int g = 0; g < ZC_GRP__COUNT; g++) {
        zc_eng_group *grp = &G->g[g];
        if (grp->owned && grp->comm) {
            if (grp->comm->ops->unbind_device)
                grp->comm->ops->unbind_device(grp->comm);
            zc_comm_destroy(grp->comm);
        }
        zc__host_free(&e->acct, ZC_MEM_OTHER, grp->node, sizeof(int) * (size_t)grp->size);
        *grp = (zc_eng_group){0};
    }
    zc__host_free(&e->acct, ZC_MEM_OTHER, G->node_of, sizeof(int) * (size_t)e->world);
    G->node_of = NULL;
}

zc_status zc__groups_reserve(zc_engine *e)
{
    zc_eng_groups *G = &e->topo;
    if (!G->hier)
        return ZC_OK;
    size_t most = 0;
    for (int k = 0; k < e->nchunks; k++) {
        const size_t b = (size_t)(e->chunks[k].shard * G->g[ZC_GRP_INTER].size) * e->pesz;
        if (b > most)
            most = b;
    }
    ZC_CHECK(zc__eng_alloc(e, ZC_MEM_BUFFERS, most, "hierarchical gather scratch",
                           &G->hier_scratch));
    G->hier_scratch_bytes = most;
    return ZC_OK;
}
