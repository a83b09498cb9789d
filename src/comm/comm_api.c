/* Public accessors shared by every communicator backend. */
#include <string.h>

#include "zc_build_config.h"

#include "comm/comm.h"
#include "base/env.h"
#include "base/log.h"

int zc_comm_rank(const zc_comm *comm) { return comm ? comm->rank : -1; }
int zc_comm_world(const zc_comm *comm) { return comm ? comm->world : -1; }
int zc_comm_local_size(const zc_comm *comm)
{
    return comm ? (comm->local_world > 0 ? comm->local_world : 0) : -1;
}

void zc_comm_destroy(zc_comm *comm)
{
    if (comm)
        comm->ops->destroy(comm);
}

const char *zc__coll_kind_name(int kind)
{
    switch (kind) {
    case K_ALL_REDUCE: return "all_reduce";
    case K_REDUCE_SCATTER: return "reduce_scatter";
    case K_ALL_GATHER: return "all_gather";
    case K_BROADCAST: return "broadcast";
    case K_ALL_TO_ALL: return "all_to_all";
    default: return "barrier";
    }
}

zc_status zc__comm_timeout_env(double *out)
{
    double t = ZC_COMM_TIMEOUT_DEFAULT_S;
    ZC_CHECK(zc__env_seconds("ZC_COMM_TIMEOUT", ZC_COMM_TIMEOUT_MIN_S, ZC_COMM_TIMEOUT_MAX_S,
                             NULL, &t));
    *out = t;
    return ZC_OK;
}

ZC_API zc_status zc_comm_split(zc_comm *comm, int colour, int key, zc_comm **out)
{
    zc__error_clear();
    if (!out)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_comm_split: out is NULL");
    *out = NULL;
    if (!comm)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_comm_split: comm is NULL");
    if (!comm->ops->split)
        return ZC_ERR(ZC_ERR_UNSUPPORTED, "zc_comm_split: the %s communicator cannot be split",
                      comm->ops->name);
    zc_status rc = comm->ops->split(comm, colour, key, out);
    if (rc != ZC_OK)
        *out = NULL;
    return rc;
}

bool zc__comm_wait_counts(const zc_comm *c, zc_comm_wait_counts *out)
{
    *out = (zc_comm_wait_counts){0};
    if (!c || !c->ops || !c->ops->wait_counts)
        return false;
    c->ops->wait_counts(c, out);
    return true;
}
