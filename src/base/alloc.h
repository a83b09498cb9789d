/* The counting allocator (internal).
 *
 * Every byte zeroc allocates goes through here, by kind (plain host, pinned
 * host, device) and by category (zc_mem_category). Two sets of counters move
 * together: a process-wide one per kind (tests assert it returns to zero after
 * teardown) and an optional per-owner account (an engine's per-rank stats).
 *
 * Host memory is allocated here; pinned and device memory are allocated by
 * their backends, which report each allocation with zc__mem_count().
 *
 * Fault injection (tests): zc__mem_fail_after(kind, k) makes the k-th next
 * allocation of that kind fail with ZC_ERR_NO_MEMORY (k = 1: the next one). */
#ifndef ZC_BASE_ALLOC_H
#define ZC_BASE_ALLOC_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef enum zc_mem_kind {
    ZC_MEMKIND_HOST = 0,
    ZC_MEMKIND_PINNED,
    ZC_MEMKIND_DEVICE,
    ZC_MEMKIND_NVME,   /* bytes of swap files (not memory; counted so stats and
                          leak checks see them like any other kind) */
    ZC_MEMKIND__COUNT
} zc_mem_kind;

/* Per-owner counters (e.g. one per engine). Zero-initialise. */
typedef struct zc_mem_account {
    _Atomic int64_t bytes[ZC_MEM__COUNT];
    _Atomic int64_t peak[ZC_MEM__COUNT];
    _Atomic int64_t kind_bytes[ZC_MEMKIND__COUNT][ZC_MEM__COUNT]; /* the same, by kind */
    _Atomic int64_t kind_total[ZC_MEMKIND__COUNT]; /* by kind, all categories */
    _Atomic int64_t kind_peak[ZC_MEMKIND__COUNT];  /* high-water mark of kind_total (the
                                                      progress lines' MaxMemAllocated) */
} zc_mem_account;

/* Records delta bytes (negative on free) of `kind` in category `cat` on the
 * global counters and on acct (may be NULL). */
void zc__mem_count(zc_mem_account *acct, zc_mem_kind kind, zc_mem_category cat, int64_t delta);

/* Consumes one allocation of `kind` from the fault-injection countdown; returns
 * true when this allocation must fail. Backends call it before allocating. */
int zc__mem_should_fail(zc_mem_kind kind);

/* Test hook: the k-th next allocation of `kind` fails (0 disables). */
void zc__mem_fail_after(zc_mem_kind kind, int64_t k);
/* Allocations of `kind` still to go before the armed failure (0: none
 * armed). Lets a test measure how many allocations a phase makes. */
int64_t zc__mem_fail_pending(zc_mem_kind kind);

/* Bytes currently allocated of one kind, over all categories and owners. */
int64_t zc__mem_global_bytes(zc_mem_kind kind);
/* Number of live allocations of one kind. */
int64_t zc__mem_global_count(zc_mem_kind kind);

/* Allocations of at least this many bytes start on a 2 MiB boundary, on
 * transparent huge pages where the kernel has them (alloc.c says why). */
#define ZC_HOST_HUGE_BYTES ((size_t)2 << 20)

/* Plain host memory, 64-byte aligned (so SIMD and shard boundaries align;
 * ZC_HOST_HUGE_BYTES and larger: 2 MiB aligned), zero-filled. Returns
 * ZC_ERR_NO_MEMORY naming `what` and the size. */
zc_status zc__host_alloc(zc_mem_account *acct, zc_mem_category cat, size_t bytes,
                         const char *what, void **out);
/* Frees memory from zc__host_alloc; bytes and cat must match the allocation.
 * NULL is a no-op. */
void zc__host_free(zc_mem_account *acct, zc_mem_category cat, void *p, size_t bytes);

/* The same, counted as `counted_as` instead of ZC_MEMKIND_HOST: the host
 * device (device/host.c) gives the engine host memory that stands for device
 * memory and counts it as ZC_MEMKIND_DEVICE, so that the host path reports
 * and budgets it as a GPU would. Fault injection still counts it as host
 * memory (zc__mem_fail_after(ZC_MEMKIND_HOST, k)): it is malloc that fails. */
zc_status zc__host_alloc_as(zc_mem_account *acct, zc_mem_kind counted_as, zc_mem_category cat,
                            size_t bytes, const char *what, void **out);
void zc__host_free_as(zc_mem_account *acct, zc_mem_kind counted_as, zc_mem_category cat, void *p,
                      size_t bytes);

#endif
