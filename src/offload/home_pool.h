/* The pinned pool of a host home (internal).
 *
 * Every home that keeps state in host memory (the optimizer's cpu and nvme
 * homes, the parameter's cpu and nvme homes) allocates it from a pinned pool
 * of its own, made the same way from the offload block's pin_memory and the
 * engine's device: NUMA-placed near the GPU and registered with CUDA when
 * there is one, page-locked unless pin_memory is false. */
#ifndef ZC_OFFLOAD_HOME_POOL_H
#define ZC_OFFLOAD_HOME_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/alloc.h"
#include "base/error.h"
#include "offload/offload.h"

/* Creates the pool with one slab of slab_bytes (what the home will allocate
 * plus its alignment slack, not the pool's 64 MiB default: a small model must
 * not lock 64 MiB per rank). device_index < 0: no CUDA device. The caller
 * owns *out (zc__pinned_pool_destroy); errors as zc__pinned_pool_create. */
zc_status zc__home_pool_create(zc_mem_account *acct, size_t slab_bytes, int device_index,
                               bool pin_memory, zc_pinned_pool **out);

/* Whether bytes of pinned memory will fall back to unlocked memory: they
 * exceed RLIMIT_MEMLOCK, the process cannot raise it, and no CUDA device
 * pins them instead. The homes warn when it does. */
bool zc__home_pool_unlocked(const zc_host_mem_limits *lim, bool pin_memory, int device_index,
                            uint64_t bytes);

#endif
