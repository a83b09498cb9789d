/* NUMA placement of the pinned pool (private to src/offload), through hwloc.
 *
 * The pool's slabs go to the NUMA node closest to the GPU (a device copy from a
 * remote node runs at a fraction of the local bandwidth), else to the node of
 * the thread that creates the pool. Without hwloc nothing is bound. */
#ifndef ZC_OFFLOAD_NUMA_H
#define ZC_OFFLOAD_NUMA_H

#include <stddef.h>

#include "base/error.h"

typedef struct zc_numa zc_numa;

/* Loads the topology and picks the node: `forced` >= 0 if it exists (else
 * ZC_ERR_INVALID_ARG naming the nodes there are), else the node of CUDA device
 * `cuda_dev` (>= 0, CUDA builds), else the calling thread's. *node is -1 when
 * nothing will be bound (no hwloc, single node). *out may be NULL on success
 * (nothing to bind); zc__numa_close accepts NULL. Not thread-safe. */
zc_status zc__numa_open(zc_numa **out, int cuda_dev, int forced, int *node);

/* Binds [addr, addr+len) to `node` before the pages are touched. Failure is
 * logged (debug) and ignored: placement is a performance matter. */
void zc__numa_bind(zc_numa *numa, void *addr, size_t len, int node);

void zc__numa_close(zc_numa *numa);

#endif
