/* The pinned pool of a host home: see home_pool.h. */
#include "offload/home_pool.h"

zc_status zc__home_pool_create(zc_mem_account *acct, size_t slab_bytes, int device_index,
                               bool pin_memory, zc_pinned_pool **out)
{
    zc_pinned_pool_opts o = ZC_PINNED_POOL_OPTS_INIT;
    o.acct = acct;
    o.slab_bytes = slab_bytes;
    o.device_index = device_index;
    if (device_index < 0)
        o.flags |= ZC_PINNED_NO_CUDA;
    if (!pin_memory)
        o.flags |= ZC_PINNED_NO_LOCK;
    return zc__pinned_pool_create(out, &o);
}

bool zc__home_pool_unlocked(const zc_host_mem_limits *lim, bool pin_memory, int device_index,
                            uint64_t bytes)
{
    return pin_memory && !lim->can_lock_unlimited && lim->memlock_limit != UINT64_MAX &&
           bytes > lim->memlock_limit && device_index < 0;
}
