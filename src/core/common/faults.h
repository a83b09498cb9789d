/* Fault injection from the environment (internal): ZC_FAULTS.
 *
 * ZC_FAULTS is a comma-separated list of KIND:RANK:K items; each makes the
 * K-th event of KIND on rank RANK (counted from 1, per engine) fail. RANK
 * is the rank in the job: for an engine over a communicator split from
 * another (zc_comm_split), its rank in the world the split came from.
 *
 *   alloc  an allocation the engine makes after zc_engine_build returned
 *          (memory reserved by build is not counted: it cannot fail later)
 *   io     a read or write in the swap files - the optimizer state
 *          (offload_optimizer "nvme") or, at stage 3, a parameter shard
 *          (offload_param "nvme") - after zc_engine_build returned; it fails
 *          with ZC_ERR_IO, not retried. Refused by zc_engine_create when the
 *          configuration does no such I/O (an item that could never fire
 *          would hide a typo)
 *
 * The engine parses it once at zc_engine_create, so every rank reads the
 * same text and a malformed value fails create on every rank alike.
 * docs/faults.md is the user-facing description. */
#ifndef ZC_CORE_FAULTS_H
#define ZC_CORE_FAULTS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"

#define ZC_FAULTS_MAX 16

/* alloc: pinned allocations; io: swap-file reads and writes; load: the
 * payload reads of zc_load_safetensors (docs/faults.md). */
typedef enum zc_fault_kind {
    ZC_FAULT_ALLOC = 0, ZC_FAULT_IO, ZC_FAULT_LOAD, ZC_FAULT__COUNT
} zc_fault_kind;

/* The items of one rank, and how many events of each kind it has seen. */
typedef struct zc_faults {
    int n;
    zc_fault_kind kind[ZC_FAULTS_MAX];
    int64_t at[ZC_FAULTS_MAX];
    int64_t seen[ZC_FAULT__COUNT];
} zc_faults;

/* Parses spec (NULL or "": no faults) and keeps the items for `rank` of a
 * world of `world` ranks. ZC_ERR_CONFIG naming the bad item and what was
 * expected; *out is then empty. */
zc_status zc__faults_parse(const char *spec, int rank, int world, zc_faults *out);

/* Counts one event of `kind`; true when an item says this one fails (then
 * *nth is its number). */
bool zc__faults_hit(zc_faults *f, zc_fault_kind kind, int64_t *nth);

#endif
