/* The io_uring store of an NVMe home (internal).
 *
 * Both NVMe homes (optimizer state: opt_home_nvme.c, stage-3 parameter
 * shards: param_home_nvme.c) keep their swap file in an io_uring store
 * (src/offload) opened the same way: in the private directories they make
 * under nvme_path (swap_dirs.h), with the aio block's block size and queue
 * depth, laid out in ZC_SWAP_ALIGN units, and with the home's pinned buffers
 * registered as fixed buffers. What differs (the layout, the buffers, the
 * counting) stays in each home. */
#ifndef ZC_OFFLOAD_HOME_STORE_H
#define ZC_OFFLOAD_HOME_STORE_H

#include <stdint.h>

#include "base/error.h"
#include "offload/homes.h"
#include "offload/swap_dirs.h"
#include "offload/offload.h"

typedef struct zc_home_store_spec {
    const char *block;     /* "offload_optimizer" or "offload_param": the config
                              block under zero_optimization that errors name */
    const char *purpose;   /* the swap file's name part ("optimizer", "params") */
    const zc_home_env *env; /* rank and the aio block */
    uint64_t capacity;     /* bytes the home's layout needs */
    unsigned flags;        /* ZC_NVME_* flags the home adds */
    int64_t min_requests;  /* requests the home needs in the kernel at once (0 =
                              none): the queue depth is raised to it */
} zc_home_store_spec;

/* Makes the swap directories of sd and opens the store in them (*out, owned
 * by the caller: zc__home_store_close), queue depth queue_depth *
 * intra_op_parallelism, or min_requests where that is larger, capped at
 * 4096; *ns receives its stats. The store's files have no name
 * (offload.h), so the directories are removed as soon as it is open; only
 * where a name stays do they wait for the home's destroy. Fails with the
 * store's error in the context of the config block (rank, aio.block_size,
 * aio.queue_depth), or ZC_ERR_UNSUPPORTED when the filesystem needs a larger
 * I/O alignment than ZC_SWAP_ALIGN. The directories made stay recorded in sd
 * on failure (zc__swap_dirs_remove cleans up), and so does a store that
 * opened (*out). */
zc_status zc__home_store_open(zc_swap_dirs *sd, const zc_home_store_spec *s,
                              zc_nvme_store **out, zc_nvme_stats *ns);

/* Registers the pool's slabs (the first 64) as the store's fixed buffers,
 * after the home has allocated every buffer it will do I/O from. */
zc_status zc__home_store_register(zc_nvme_store *st, zc_pinned_pool *pool);

/* Closes st (NULL: nothing), cancelling what is queued; a failure is only
 * logged ("closing the <what>: ..."), as destroy cannot fail. */
void zc__home_store_close(zc_nvme_store *st, const char *what);

#endif
