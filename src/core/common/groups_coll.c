/* The collectives over the engine's groups (groups.h): each one's payload
 * and bytes by link counted, a failure breaking the engine, and the shard
 * group's gathers, flat or in two steps. The groups themselves are made by
 * groups.c at zc_engine_build. */
#include "core/engine.h"

bool zc__grp_on(const zc_engine *e, zc_grp g)
{
    return e->topo.g[g].comm && e->topo.g[g].size > 1;
}

/* ---- collectives over a group ------------------------------------------- */

/* A failed collective breaks the engine (eng_base.c's rule). */
static zc_status failed(zc_engine *e, zc_status rc)
{
    if (rc == ZC_ERR_COMM || rc == ZC_ERR_DEVICE)
        zc__eng_break(e, rc, zc_last_error());
    return rc;
}

/* The group, or the world before build made the groups. */
static const zc_eng_group *group(const zc_engine *e, zc_grp g)
{
    const zc_eng_group *grp = &e->topo.g[g];
    return grp->comm ? grp : NULL;
}

static void count(zc_engine *e, const zc_eng_group *grp, int kind, int coll, size_t n,
                  zc_dtype dt)
{
    const size_t es = zc_dtype_size(dt);
    const int size = grp ? grp->size : e->world;
    e->comm_cur[coll] += (int64_t)(n * es * (kind == K_ALL_REDUCE ? 1 : (size_t)size));
    if (!grp || !grp->node)
        return;
    int64_t b[2];
    zc__link_bytes(kind, n, es, grp->node, grp->size, grp->rank, b);
    e->link_cur[0] += b[0];
    e->link_cur[1] += b[1];
}

zc_status zc__eng_grp_all_reduce(zc_engine *e, zc_grp g, void *buf, size_t n, zc_dtype dt,
                                 bool count_it, void *stream)
{
    const zc_eng_group *grp = group(e, g);
    zc_status rc = zc__all_reduce(grp ? grp->comm : e->comm, buf, buf, n, dt, ZC_RED_SUM, stream);
    if (rc != ZC_OK)
        return failed(e, rc);
    if (count_it)
        count(e, grp, K_ALL_REDUCE, ZC_COLL_ALL_REDUCE, n, dt);
    return ZC_OK;
}

zc_status zc__eng_grp_reduce_scatter(zc_engine *e, zc_grp g, const void *send, void *recv,
                                     size_t recv_n, zc_dtype dt, bool count_it, void *stream)
{
    const zc_eng_group *grp = group(e, g);
    zc_status rc = zc__reduce_scatter(grp ? grp->comm : e->comm, send, recv, recv_n, dt, stream);
    if (rc != ZC_OK)
        return failed(e, rc);
    if (count_it)
        count(e, grp, K_REDUCE_SCATTER, ZC_COLL_REDUCE_SCATTER, recv_n, dt);
    return ZC_OK;
}

zc_status zc__eng_grp_all_gather(zc_engine *e, zc_grp g, const void *send, void *recv,
                                 size_t send_n, zc_dtype dt, bool count_it, void *stream)
{
    const zc_eng_group *grp = group(e, g);
    zc_status rc = zc__all_gather(grp ? grp->comm : e->comm, send, recv, send_n, dt, stream);
    if (rc != ZC_OK)
        return failed(e, rc);
    if (count_it)
        count(e, grp, K_ALL_GATHER, ZC_COLL_ALL_GATHER, send_n, dt);
    return ZC_OK;
}

zc_status zc__eng_grp_start(zc_engine *e, zc_grp g)
{
    const zc_eng_group *grp = group(e, g);
    zc_status rc = zc__comm_group_start(grp ? grp->comm : e->comm);
    return rc == ZC_OK ? ZC_OK : failed(e, rc);
}

zc_status zc__eng_grp_end(zc_engine *e, zc_grp g)
{
    const zc_eng_group *grp = group(e, g);
    zc_status rc = zc__comm_group_end(grp ? grp->comm : e->comm);
    return rc == ZC_OK ? ZC_OK : failed(e, rc);
}

/* The shard gathers as one communicator group over the shard group. */
static zc_status flat_gathers(zc_engine *e, const zc_gather_req *req, int nreq, zc_dtype dt,
                              bool count_it)
{
    ZC_CHECK(zc__eng_grp_start(e, ZC_GRP_SHARD));
    zc_status rc = ZC_OK;
    for (int i = 0; i < nreq && rc == ZC_OK; i++)
        rc = zc__eng_grp_all_gather(e, ZC_GRP_SHARD, req[i].send, req[i].recv, req[i].n, dt,
                                    count_it, e->stream);
    zc_status end = zc__eng_grp_end(e, ZC_GRP_SHARD); /* also after a failure inside */
    return rc != ZC_OK ? rc : end;
}

/* One chunk's two-step gather: across nodes, this rank's shard with the
 * ranks of its index on the J nodes into the scratch (J shards, node order),
 * then inside the node, each of those J shards with the node's ranks into
 * its place - shard j * Nn + l of node j's l-th rank. Ownership and sums
 * are the flat gather's; only the route differs. */
static zc_status hier_gather(zc_engine *e, const zc_gather_req *r, zc_dtype dt, bool count_it)
{
    const zc_eng_groups *G = &e->topo;
    const int J = G->g[ZC_GRP_INTER].size, Nn = G->g[ZC_GRP_INTRA].size;
    const size_t es = zc_dtype_size(dt);
    if ((size_t)J * r->n * es > G->hier_scratch_bytes)
        return ZC_ERR(ZC_ERR_INTERNAL, "hierarchical gather: %d x %zu elements exceed the "
                                       "scratch reserved at build", J, r->n);
    ZC_CHECK(zc__eng_grp_all_gather(e, ZC_GRP_INTER, r->send, G->hier_scratch, r->n, dt, count_it,
                                    e->stream));
    ZC_CHECK(zc__eng_grp_start(e, ZC_GRP_INTRA));
    zc_status rc = ZC_OK;
    for (int j = 0; j < J && rc == ZC_OK; j++)
        rc = zc__eng_grp_all_gather(e, ZC_GRP_INTRA, (const char *)G->hier_scratch + j * r->n * es,
                                    (char *)r->recv + (size_t)j * (size_t)Nn * r->n * es, r->n, dt,
                                    count_it, e->stream);
    zc_status end = zc__eng_grp_end(e, ZC_GRP_INTRA);
    return rc != ZC_OK ? rc : end;
}

zc_status zc__eng_shard_gathers(zc_engine *e, const zc_gather_req *req, int nreq, zc_dtype dt,
                                bool count_it)
{
    if (!e->topo.hier)
        return flat_gathers(e, req, nreq, dt, count_it);
    for (int i = 0; i < nreq; i++)
        ZC_CHECK(hier_gather(e, &req[i], dt, count_it));
    return ZC_OK;
}

