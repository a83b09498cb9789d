/* The aligned buffers shard files are written from and read into with
 * O_DIRECT (internal; shard_write.c, shard_read.c).
 *
 * An anonymous mapping of their own, unlocked, with MADV_HUGEPAGE asked
 * before the first touch, so the buffers are huge pages from the start: a
 * 1 MiB request from 4 KiB pages is 256 segments, over the usual
 * max_segments, and the block layer splits it (offload.h,
 * zc__nvme_register_buffers). Not a pinned pool: a pool loads the machine's
 * topology to place its slabs on a NUMA node, which cost milliseconds at
 * every save and load; these buffers are placed by first touch, on the node
 * of the thread that fills them. They are not registered with io_uring
 * either: pinning and collapsing them at every save and load cost more than
 * it saved on the loaded machine measured (bench/RESULTS.md), and
 * registration counts against RLIMIT_MEMLOCK. */
#ifndef ZC_CKPT_RING_MEM_H
#define ZC_CKPT_RING_MEM_H

#include <stdbool.h>
#include <stddef.h>

#include "offload/offload.h"

typedef struct zc_ck_ring_mem {
    zc_mem_account *acct; /* where the bytes are counted (may be NULL) */
    char *base;  /* page-aligned (huge-page aligned where the kernel aligns
                    large anonymous mappings) */
    size_t bytes;
    bool borrowed; /* an engine's kept buffers (keep below): not unmapped */
} zc_ck_ring_mem;

/* bytes of buffer memory, counted in acct (may be NULL) as ZC_MEM_OTHER
 * pinned memory. ZC_ERR_NO_MEMORY naming `what` on failure (nothing held).
 *
 * keep (may be NULL) holds buffers an engine keeps between its saves and
 * loads: the first call maps them there (counted in acct until
 * zc__ck_ring_release), later calls borrow them, so the pages are faulted in
 * once per engine and not at every save (a fresh huge page may wait for the
 * kernel to compact memory: tens of milliseconds, bench/RESULTS.md). A
 * request for more than is kept replaces them. One user at a time. */
zc_status zc__ck_ring_alloc(zc_ck_ring_mem *r, size_t bytes, zc_mem_account *acct,
                            const char *what, zc_ck_ring_mem **keep);
/* Unmaps r's buffers, or gives borrowed ones back. NULL-safe on a zeroed or
 * freed ring. */
void zc__ck_ring_free(zc_ck_ring_mem *r);
/* Unmaps the kept buffers (the engine's destroy). *keep NULL: a no-op. */
void zc__ck_ring_release(zc_ck_ring_mem **keep);

#endif
