/* What every home is told about the engine (internal).
 *
 * The homes of optimizer state (opt_home.h) and of stage-3 parameter shards
 * (param_home.h) are created by the engine from two different config blocks
 * (offload_optimizer, offload_param), but what they need to know about the
 * engine itself is the same: where to count memory, which rank and chunks,
 * the working precision, the device to place pinned memory near, the aio
 * block their NVMe stores use and the fault-injection hook. The engine fills
 * it once (zc__eng_home_env); each home's params embed it as `env`. */
#ifndef ZC_OFFLOAD_HOME_ENV_H
#define ZC_OFFLOAD_HOME_ENV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/alloc.h"

typedef struct zc_home_env {
    zc_mem_account *acct;    /* the engine's account (bytes by kind) */
    int rank;
    int nchunks;
    size_t param_bytes;      /* bytes per working-precision element */
    int device_index;        /* CUDA device for NUMA placement, -1 = none */
    int64_t aio_block_size, aio_queue_depth, aio_intra_op; /* the aio block (nvme) */
    /* Fault injection (the engine's ZC_FAULTS io items): asked before every
     * read and write an NVMe home submits (not before retries); true makes
     * that one fail with ZC_ERR_IO, *nth its number. NULL: none. */
    bool (*io_fault)(void *arg, int64_t *nth);
    void *io_fault_arg;
} zc_home_env;

#endif
