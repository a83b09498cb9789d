/* A home's object and its per-chunk table: see home_alloc.h. */
#include <stdio.h>

#include "offload/home_alloc.h"

zc_status zc__home_alloc(zc_mem_account *acct, const char *what, size_t home_bytes,
                         void **home, int nchunks, size_t entry_bytes, void **table,
                         size_t *table_bytes)
{
    *home = *table = NULL;
    *table_bytes = (size_t)nchunks * entry_bytes;
    ZC_CHECK(zc__host_alloc(acct, ZC_MEM_OTHER, home_bytes, what, home));
    char table_what[96];
    snprintf(table_what, sizeof table_what, "%s table", what);
    zc_status rc = zc__host_alloc(acct, ZC_MEM_OTHER, *table_bytes, table_what, table);
    if (rc != ZC_OK) {
        zc__host_free(acct, ZC_MEM_OTHER, *home, home_bytes);
        *home = NULL;
    }
    return rc;
}

void zc__home_free(zc_mem_account *acct, void *home, size_t home_bytes, void *table,
                   size_t table_bytes)
{
    zc__host_free(acct, ZC_MEM_OTHER, table, table_bytes);
    zc__host_free(acct, ZC_MEM_OTHER, home, home_bytes);
}
