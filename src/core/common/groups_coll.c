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

static int grp_size(const zc_engine *e, const zc_eng_group *grp)
{
    return grp ? grp->size : e->world;
}

static void count(zc_engine *e, const zc_eng_group *grp, int kind, int coll, size_t n,
                  zc_dtype dt)
{
    const size_t es = zc_dtype_size(dt);
    e->comm_cur[coll] += (int64_t)(n * es * (kind == K_ALL_REDUCE ? 1 : (size_t)grp_size(e, grp)));
    if (!grp || !grp->node)
        return;
    int64_t b[2];
    zc__link_bytes(kind, n, es, grp->node, grp->size, grp->rank, b);
    e->link_cur[0] += b[0];
    e->link_cur[1] += b[1];
}

/* The timeline's and the comms logger's part of a collective: when the
 * comms logger profiles this kind on an asynchronous device, the stream is
 * drained first (and again after it, coll_end), so the time measured is
 * the collective's (DeepSpeed's logger synchronizes the same way). */
static int64_t coll_begin(zc_engine *e, int coll, void *stream)
{
    const int64_t t0 = zc__tl_begin();
    if (t0 && e->dev->mem_kind == ZC_MEMKIND_DEVICE && zc__tl_comms_profiles(e->tl, coll) &&
        !zc__tl_in_group()) {
        (void)e->dev->ops->stream_sync(e->dev, stream);
        return zc__tl_clock();
    }
    return t0;
}

/* `bytes` is nccl-tests' size over the group (trace.h: zc__tl_coll). */
static void coll_end(zc_engine *e, int64_t t0, int coll, zc_dtype dt, int64_t bytes,
                     size_t elems, bool count_it, void *stream, const char *site, int ranks)
{
    if (!t0)
        return;
    if (e->dev->mem_kind == ZC_MEMKIND_DEVICE && zc__tl_comms_profiles(e->tl, coll) &&
        !zc__tl_in_group())
        (void)e->dev->ops->stream_sync(e->dev, stream);
    zc__tl_coll(t0, coll, dt, bytes, (int64_t)elems, site, count_it ? ZC_TLF_COUNTED : 0,
                ranks);
}

zc_status zc__eng_grp_all_reduce_at(zc_engine *e, zc_grp g, void *buf, size_t n, zc_dtype dt,
                                    bool count_it, void *stream, const char *site)
{
    const zc_eng_group *grp = group(e, g);
    const int64_t t0 = coll_begin(e, ZC_COLL_ALL_REDUCE, stream);
    zc_status rc = zc__all_reduce(grp ? grp->comm : e->comm, buf, buf, n, dt, ZC_RED_SUM, stream);
    if (rc != ZC_OK)
        return failed(e, rc);
    if (count_it)
        count(e, grp, K_ALL_REDUCE, ZC_COLL_ALL_REDUCE, n, dt);
    coll_end(e, t0, ZC_COLL_ALL_REDUCE, dt, (int64_t)(n * zc_dtype_size(dt)), n, count_it,
             stream, site, grp_size(e, grp));
    return ZC_OK;
}

zc_status zc__eng_grp_reduce_scatter_at(zc_engine *e, zc_grp g, const void *send, void *recv,
                                        size_t recv_n, zc_dtype dt, bool count_it, void *stream,
                                        const char *site)
{
    const zc_eng_group *grp = group(e, g);
    const int64_t t0 = coll_begin(e, ZC_COLL_REDUCE_SCATTER, stream);
    zc_status rc = zc__reduce_scatter(grp ? grp->comm : e->comm, send, recv, recv_n, dt, stream);
    if (rc != ZC_OK)
        return failed(e, rc);
    if (count_it)
        count(e, grp, K_REDUCE_SCATTER, ZC_COLL_REDUCE_SCATTER, recv_n, dt);
    coll_end(e, t0, ZC_COLL_REDUCE_SCATTER, dt,
             (int64_t)(recv_n * (size_t)grp_size(e, grp) * zc_dtype_size(dt)), recv_n, count_it,
             stream, site, grp_size(e, grp));
    return ZC_OK;
}

zc_status zc__eng_grp_all_gather_at(zc_engine *e, zc_grp g, const void *send, void *recv,
                                    size_t send_n, zc_dtype dt, bool count_it, void *stream,
                                    const char *site)
{
    const zc_eng_group *grp = group(e, g);
    const int64_t t0 = coll_begin(e, ZC_COLL_ALL_GATHER, stream);
    zc_status rc = zc__all_gather(grp ? grp->comm : e->comm, send, recv, send_n, dt, stream);
    if (rc != ZC_OK)
        return failed(e, rc);
    if (count_it)
        count(e, grp, K_ALL_GATHER, ZC_COLL_ALL_GATHER, send_n, dt);
    coll_end(e, t0, ZC_COLL_ALL_GATHER, dt,
             (int64_t)(send_n * (size_t)grp_size(e, grp) * zc_dtype_size(dt)), send_n, count_it,
             stream, site, grp_size(e, grp));
    return ZC_OK;
}

zc_status zc__eng_grp_start(zc_engine *e, zc_grp g)
{
    const zc_eng_group *grp = group(e, g);
    zc_status rc = zc__comm_group_start(grp ? grp->comm : e->comm);
    if (rc == ZC_OK)
        zc__tl_group_open(grp_size(e, grp));
    return rc == ZC_OK ? ZC_OK : failed(e, rc);
}

zc_status zc__eng_grp_end(zc_engine *e, zc_grp g)
{
    const zc_eng_group *grp = group(e, g);
    const int64_t t0 = zc__tl_begin();
    zc_status rc = zc__comm_group_end(grp ? grp->comm : e->comm);
    zc__tl_group_end(t0);
    return rc == ZC_OK ? ZC_OK : failed(e, rc);
}

/* The shard gathers as one communicator group over the shard group. */
static zc_status flat_gathers(zc_engine *e, const zc_gather_req *req, int nreq, zc_dtype dt,
                              bool count_it, const char *site)
{
    ZC_CHECK(zc__eng_grp_start(e, ZC_GRP_SHARD));
    zc_status rc = ZC_OK;
    for (int i = 0; i < nreq && rc == ZC_OK; i++)
        rc = zc__eng_grp_all_gather_at(e, ZC_GRP_SHARD, req[i].send, req[i].recv, req[i].n, dt,
                                       count_it, e->stream, site);
    zc_status end = zc__eng_grp_end(e, ZC_GRP_SHARD); /* also after a failure inside */
    return rc != ZC_OK ? rc : end;
}

/* One chunk's two-step gather: across nodes, this rank's shard with the
 * ranks of its index on the J nodes into the scratch (J shards, node order),
 * then inside the node, each of those J shards with the node's ranks into
 * its place - shard j * Nn + l of node j's l-th rank. Ownership and sums
 * are the flat gather's; only the route differs. */
static zc_status hier_gather(zc_engine *e, const zc_gather_req *r, zc_dtype dt, bool count_it,
                             const char *site)
{
    const zc_eng_groups *G = &e->topo;
    const int J = G->g[ZC_GRP_INTER].size, Nn = G->g[ZC_GRP_INTRA].size;
    const size_t es = zc_dtype_size(dt);
    if ((size_t)J * r->n * es > G->hier_scratch_bytes)
        return ZC_ERR(ZC_ERR_INTERNAL, "hierarchical gather: %d x %zu elements exceed the "
                                       "scratch reserved at build", J, r->n);
    ZC_CHECK(zc__eng_grp_all_gather_at(e, ZC_GRP_INTER, r->send, G->hier_scratch, r->n, dt,
                                       count_it, e->stream, site));
    ZC_CHECK(zc__eng_grp_start(e, ZC_GRP_INTRA));
    zc_status rc = ZC_OK;
    for (int j = 0; j < J && rc == ZC_OK; j++)
        rc = zc__eng_grp_all_gather_at(e, ZC_GRP_INTRA,
                                       (const char *)G->hier_scratch + j * r->n * es,
                                       (char *)r->recv + (size_t)j * (size_t)Nn * r->n * es, r->n,
                                       dt, count_it, e->stream, site);
    zc_status end = zc__eng_grp_end(e, ZC_GRP_INTRA);
    return rc != ZC_OK ? rc : end;
}

zc_status zc__eng_shard_gathers_at(zc_engine *e, const zc_gather_req *req, int nreq, zc_dtype dt,
                                   bool count_it, const char *site)
{
    if (!e->topo.hier)
        return flat_gathers(e, req, nreq, dt, count_it, site);
    for (int i = 0; i < nreq; i++)
        ZC_CHECK(hier_gather(e, &req[i], dt, count_it, site));
    return ZC_OK;
}

