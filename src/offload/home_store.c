/* The io_uring store of an NVMe home: see home_store.h. */
#include <stdio.h>

#include "base/log.h"
#include "offload/home_store.h"

zc_status zc__home_store_open(zc_swap_dirs *sd, const zc_home_store_spec *s,
                              zc_nvme_store **out, zc_nvme_stats *ns)
{
    const zc_home_env *env = s->env;
    char key[64];
    snprintf(key, sizeof key, "zero_optimization.%s", s->block);
    ZC_CHECK(zc__swap_dirs_make(sd, env->rank, key));
    const char *dirs[ZC_SWAP_MAX_DIRS];
    zc__swap_dirs_list(sd, dirs);
    /* aio.intra_op_parallelism is DeepSpeed's count of threads each keeping
     * queue_depth requests in flight: one ring keeps their sum. */
    int64_t qd = env->aio_queue_depth * (env->aio_intra_op > 0 ? env->aio_intra_op : 1);
    /* The store cuts the next pieces of a ticket only when it is called, so
     * a home whose reads must progress while the caller computes (the
     * parameter home's reads ahead) needs all their pieces in the kernel at
     * once. */
    if (s->min_requests > qd)
        qd = s->min_requests;
    zc_nvme_opts o = ZC_NVME_OPTS_INIT;
    o.dirs = dirs;
    o.ndirs = sd->n;
    o.rank = env->rank;
    o.purpose = s->purpose;
    o.capacity = s->capacity;
    o.block_size = (size_t)env->aio_block_size;
    o.alignment = ZC_SWAP_ALIGN;
    o.queue_depth = (int)(qd > 4096 ? 4096 : qd);
    o.flags = s->flags;
    zc_status rc = zc__nvme_open(out, &o);
    if (rc != ZC_OK) {
        zc__error_context("%s (rank %d; aio.block_size %lld, aio.queue_depth %lld)", key,
                          env->rank, (long long)env->aio_block_size,
                          (long long)env->aio_queue_depth);
        return rc;
    }
    zc__nvme_stats_get(*out, ns);
    /* The files have no name: their directories go now, so nothing is left
     * under nvme_path however the process ends. */
    if (ns->unnamed)
        zc__swap_dirs_remove(sd);
    if (ns->alignment > ZC_SWAP_ALIGN)
        return ZC_ERR(ZC_ERR_UNSUPPORTED, "%s nvme: '%s' needs %zu-byte aligned I/O, more than "
                      "the %u bytes the swap layout uses", s->block, sd->given[0], ns->alignment,
                      ZC_SWAP_ALIGN);
    return ZC_OK;
}

zc_status zc__home_store_register(zc_nvme_store *st, zc_pinned_pool *pool)
{
    zc_mem_region regions[64];
    const int nr = zc__pinned_pool_regions(pool, regions, 64);
    return zc__nvme_register_buffers(st, regions, nr > 64 ? 64 : nr);
}

void zc__home_store_close(zc_nvme_store *st, const char *what)
{
    if (!st)
        return;
    if (zc__nvme_close(st, ZC_NVME_CLOSE_CANCEL) != ZC_OK)
        ZC_LOGW("offload", "closing the %s: %s", what, zc_last_error());
}
