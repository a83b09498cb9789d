/* The counting allocator: global per-kind counters, per-owner accounts, fault
 * injection, and plain host memory. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/alloc.h"

static _Atomic int64_t global_bytes[ZC_MEMKIND__COUNT];
static _Atomic int64_t global_count[ZC_MEMKIND__COUNT];
static _Atomic int64_t fail_countdown[ZC_MEMKIND__COUNT];

static const char *kind_name(zc_mem_kind k)
{
    switch (k) {
    case ZC_MEMKIND_HOST: return "host";
    case ZC_MEMKIND_PINNED: return "pinned host";
    case ZC_MEMKIND_DEVICE: return "device";
    case ZC_MEMKIND_NVME: return "NVMe file";
    default: return "?";
    }
}

void zc__mem_count(zc_mem_account *acct, zc_mem_kind kind, zc_mem_category cat, int64_t delta)
{
    atomic_fetch_add(&global_bytes[kind], delta);
    atomic_fetch_add(&global_count[kind], delta > 0 ? 1 : (delta < 0 ? -1 : 0));
    if (!acct)
        return;
    atomic_fetch_add(&acct->kind_bytes[kind][cat], delta);
    const int64_t know = atomic_fetch_add(&acct->kind_total[kind], delta) + delta;
    int64_t kpeak = atomic_load(&acct->kind_peak[kind]);
    while (know > kpeak && !atomic_compare_exchange_weak(&acct->kind_peak[kind], &kpeak, know)) {
    }
    int64_t now = atomic_fetch_add(&acct->bytes[cat], delta) + delta;
    /* Peak: raise monotonically; a lost race only delays the update. */
    int64_t peak = atomic_load(&acct->peak[cat]);
    while (now > peak && !atomic_compare_exchange_weak(&acct->peak[cat], &peak, now)) {
    }
}

int zc__mem_should_fail(zc_mem_kind kind)
{
    int64_t left = atomic_load(&fail_countdown[kind]);
    while (left > 0) {
        if (atomic_compare_exchange_weak(&fail_countdown[kind], &left, left - 1))
            return left == 1;
    }
    return 0;
}

void zc__mem_fail_after(zc_mem_kind kind, int64_t k) { atomic_store(&fail_countdown[kind], k); }

int64_t zc__mem_fail_pending(zc_mem_kind kind) { return atomic_load(&fail_countdown[kind]); }

int64_t zc__mem_global_bytes(zc_mem_kind kind) { return atomic_load(&global_bytes[kind]); }
int64_t zc__mem_global_count(zc_mem_kind kind) { return atomic_load(&global_count[kind]); }

zc_status zc__host_alloc(zc_mem_account *acct, zc_mem_category cat, size_t bytes,
                         const char *what, void **out)
{
    return zc__host_alloc_as(acct, ZC_MEMKIND_HOST, cat, bytes, what, out);
}

zc_status zc__host_alloc_as(zc_mem_account *acct, zc_mem_kind counted_as, zc_mem_category cat,
                            size_t bytes, const char *what, void **out)
{
    *out = NULL;
    if (bytes == 0)
        bytes = 1; /* a valid, freeable pointer for empty buffers */
    if (zc__mem_should_fail(ZC_MEMKIND_HOST))
        return ZC_ERR(ZC_ERR_NO_MEMORY, "%s: injected failure allocating %zu bytes of %s memory",
                      what ? what : "allocation", bytes, kind_name(ZC_MEMKIND_HOST));
    size_t rounded = (bytes + 63) & ~(size_t)63;
    /* Large buffers (an engine's state: master, Adam moments, parameters)
     * start on a huge-page boundary and ask for transparent huge pages, so
     * a checkpoint can hand them to O_DIRECT writes as they are: the store
     * needs page-aligned buffers, and a buffer of 4 KiB pages is one segment
     * per page, which splits every 1 MiB request on a virtio disk
     * (ckpt/shard_write.h, bench/RESULTS.md "Checkpoints"). The slack is
     * address space only: the pages before the buffer are never touched. */
    const bool large = rounded >= ZC_HOST_HUGE_BYTES;
    void *p = NULL;
    if (posix_memalign(&p, large ? ZC_HOST_HUGE_BYTES : 64, rounded) != 0)
        p = NULL;
    if (p && large)
        (void)madvise(p, (rounded + 4095) & ~(size_t)4095, MADV_HUGEPAGE); /* best effort */
    if (!p)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "%s: cannot allocate %zu bytes (%.1f MiB) of host memory",
                      what ? what : "allocation", bytes, (double)bytes / (1024.0 * 1024.0));
    memset(p, 0, rounded);
    zc__mem_count(acct, counted_as, cat, (int64_t)bytes);
    *out = p;
    return ZC_OK;
}

void zc__host_free(zc_mem_account *acct, zc_mem_category cat, void *p, size_t bytes)
{
    zc__host_free_as(acct, ZC_MEMKIND_HOST, cat, p, bytes);
}

void zc__host_free_as(zc_mem_account *acct, zc_mem_kind counted_as, zc_mem_category cat, void *p,
                      size_t bytes)
{
    if (!p)
        return;
    if (bytes == 0)
        bytes = 1;
    free(p);
    zc__mem_count(acct, counted_as, cat, -(int64_t)bytes);
}
