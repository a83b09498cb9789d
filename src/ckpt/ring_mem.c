/* Buffers for O_DIRECT shard I/O (ring_mem.h). */
#include <string.h>

#include "ckpt/ring_mem.h"

zc_status zc__ck_ring_alloc(zc_ck_ring_mem *r, size_t bytes, zc_mem_account *acct,
                            const char *what)
{
    memset(r, 0, sizeof *r);
    zc_pinned_pool_opts po = ZC_PINNED_POOL_OPTS_INIT;
    po.slab_bytes = bytes;
    po.reserve_bytes = bytes;
    po.flags = ZC_PINNED_NO_LOCK | ZC_PINNED_NO_CUDA;
    po.acct = acct;
    ZC_CHECK(zc__pinned_pool_create(&r->pool, &po));
    zc_status rc = zc__pinned_alloc(r->pool, bytes, 0, ZC_MEM_OTHER, what, (void **)&r->base);
    if (rc != ZC_OK) {
        zc__ck_ring_free(r);
        return rc;
    }
    r->bytes = bytes;
    return ZC_OK;
}

void zc__ck_ring_free(zc_ck_ring_mem *r)
{
    if (r->pool) {
        zc__pinned_free(r->pool, r->base);
        zc__pinned_pool_destroy(r->pool);
    }
    memset(r, 0, sizeof *r);
}
