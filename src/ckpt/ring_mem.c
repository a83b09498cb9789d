/* Buffers for O_DIRECT shard I/O (ring_mem.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/alloc.h"
#include "ckpt/ring_mem.h"

static zc_status map_ring(zc_ck_ring_mem *r, size_t bytes, zc_mem_account *acct,
                          const char *what)
{
    memset(r, 0, sizeof *r);
    if (zc__mem_should_fail(ZC_MEMKIND_PINNED))
        return ZC_ERR(ZC_ERR_NO_MEMORY, "%s: allocation of %zu bytes failed (injected fault)",
                      what, bytes);
    void *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "%s: mmap of %zu bytes failed: %s", what, bytes,
                      strerror(errno));
    /* Before the first touch: the pages are faulted in as huge pages. A
     * refusal only costs request size (the block layer splits them). */
    (void)madvise(base, bytes, MADV_HUGEPAGE);
    zc__mem_count(acct, ZC_MEMKIND_PINNED, ZC_MEM_OTHER, (int64_t)bytes);
    r->base = base;
    r->bytes = bytes;
    r->acct = acct;
    return ZC_OK;
}

static void unmap_ring(zc_ck_ring_mem *r)
{
    if (r->base) {
        munmap(r->base, r->bytes);
        zc__mem_count(r->acct, ZC_MEMKIND_PINNED, ZC_MEM_OTHER, -(int64_t)r->bytes);
    }
    memset(r, 0, sizeof *r);
}

zc_status zc__ck_ring_alloc(zc_ck_ring_mem *r, size_t bytes, zc_mem_account *acct,
                            const char *what, zc_ck_ring_mem **keep)
{
    if (!keep)
        return map_ring(r, bytes, acct, what);
    memset(r, 0, sizeof *r);
    if (*keep && (*keep)->bytes < bytes)
        zc__ck_ring_release(keep);
    if (!*keep) {
        zc_ck_ring_mem *k = calloc(1, sizeof *k);
        if (!k)
            return ZC_ERR(ZC_ERR_NO_MEMORY, "%s: %zu bytes", what, sizeof *k);
        zc_status rc = map_ring(k, bytes, acct, what);
        if (rc != ZC_OK) {
            free(k);
            return rc;
        }
        *keep = k;
    }
    *r = **keep;
    r->borrowed = true;
    return ZC_OK;
}

void zc__ck_ring_free(zc_ck_ring_mem *r)
{
    if (r->borrowed)
        memset(r, 0, sizeof *r);
    else
        unmap_ring(r);
}

void zc__ck_ring_release(zc_ck_ring_mem **keep)
{
    if (!*keep)
        return;
    unmap_ring(*keep);
    free(*keep);
    *keep = NULL;
}
