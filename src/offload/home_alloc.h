/* A home's object and its per-chunk table (internal).
 *
 * Every home of optimizer state (opt_home_*.c) and of parameter shards
 * (param_home_*.c) is an object that starts with its ops, followed by a table
 * with one entry per chunk of the engine, both allocated at create, before
 * any chunk is added, and freed last at destroy. */
#ifndef ZC_OFFLOAD_HOME_ALLOC_H
#define ZC_OFFLOAD_HOME_ALLOC_H

#include <stddef.h>

#include "base/alloc.h"
#include "base/error.h"

/* Allocates the home object (home_bytes) and its table (nchunks entries of
 * entry_bytes, *table_bytes in all), zero-filled plain host memory counted as
 * ZC_MEM_OTHER on acct; `what` names the home in errors ("cpu home": the
 * table is "cpu home table"). On failure nothing stays allocated and *home,
 * *table are NULL. */
zc_status zc__home_alloc(zc_mem_account *acct, const char *what, size_t home_bytes,
                         void **home, int nchunks, size_t entry_bytes, void **table,
                         size_t *table_bytes);

/* Frees what zc__home_alloc allocated (table first; either may be NULL). */
void zc__home_free(zc_mem_account *acct, void *home, size_t home_bytes, void *table,
                   size_t table_bytes);

#endif
