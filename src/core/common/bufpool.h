/* A pool of device buffers reserved once and reused (internal).
 *
 * Work between two collectives must not fail on one rank alone (the others
 * would go on into a collective it never joins). Buffers that such work needs
 * - a stage-2/3 chunk's transient gradient buffer, a stage-3 gather buffer,
 * the staging of zc_param_load - therefore come from a pool whose memory is
 * allocated by zc_engine_build, sized from the layout, the bucket and the
 * live limits. Taking a slot never allocates: it either succeeds or finds
 * every fitting slot in use, and which slots are in use follows the sequence
 * of calls, which is the same on every rank - so running out is the same
 * deterministic error everywhere, never a split.
 *
 * A pool has size classes (slots of equal bytes), planned with
 * zc__bufpool_plan() and allocated together by zc__bufpool_reserve(); each
 * class is one device allocation, so a backend with an expensive allocator
 * (cudaMalloc) pays it once per class at build instead of once per chunk per
 * micro-step. Accounting: an idle slot counts under ZC_MEM_RESERVED, a slot in
 * use under the pool's category (ZC_MEM_BUFFERS), so the stats' transient
 * buffers stay what is in use while the total is what is allocated.
 *
 * Not thread-safe: one engine (one rank) uses its pools from one thread. */
#ifndef ZC_CORE_BUFPOOL_H
#define ZC_CORE_BUFPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device/device.h"
#include "plan/plan.h"

/* Slots start ZC_BUFPOOL_ALIGN-aligned (plan/plan.h: the planner counts the
 * slack). */

typedef struct zc_bufpool_class {
    size_t bytes;   /* slot size, a multiple of ZC_BUFPOOL_ALIGN */
    int count;      /* slots */
    char *base;     /* count * bytes, ZC_BUFPOOL_ALIGN-aligned inside raw */
    size_t base_bytes;
    void *raw;      /* the allocation: base_bytes + ZC_BUFPOOL_ALIGN bytes, since
                       backends align less (host memory: 64 bytes) */
    uint8_t *used;  /* host flags, one per slot */
    int nused;
    int next;       /* where the search for a free slot starts (round robin) */
} zc_bufpool_class;

typedef struct zc_bufpool {
    const char *what;           /* names the pool in messages */
    zc_mem_category cat;        /* category of a slot in use */
    zc_device *dev;
    zc_mem_account *acct;       /* counts the memory and the class table */
    zc_bufpool_class *cls;      /* host array, grown by plan */
    int ncls, cls_cap;
    bool reserved;
} zc_bufpool;

/* An empty pool (no memory) named `what` for device d, counted on acct
 * (may be NULL); slots in use count under cat. */
void zc__bufpool_init(zc_bufpool *bp, const char *what, zc_mem_category cat, zc_device *d,
                      zc_mem_account *acct);

/* Plans `count` more slots of at least `bytes` (merged with a class of the
 * same rounded size). Before reserve only. ZC_ERR_NO_MEMORY when the sizes
 * overflow or the class table cannot grow. */
zc_status zc__bufpool_plan(zc_bufpool *bp, size_t bytes, int count);

/* Allocates every planned class (zero-filled), counted under
 * ZC_MEM_RESERVED. On failure what was allocated stays and is released by
 * zc__bufpool_destroy. */
zc_status zc__bufpool_reserve(zc_bufpool *bp);

/* Takes a slot of the smallest class whose slots hold `bytes` and one is
 * free - within the class, the first free one from where the last search
 * ended, so a slot just returned is taken last (work on another stream may
 * still read it: the other free slots let that work overlap the next
 * user); zeroes its first `bytes` on `stream` when zero is set. Never
 * allocates. ZC_ERR_NO_MEMORY (naming the pool, the size and the slots in
 * use) when no fitting slot is free. */
zc_status zc__bufpool_get(zc_bufpool *bp, size_t bytes, bool zero, void *stream, void **out);

/* Returns a slot from zc__bufpool_get; NULL is a no-op. *p is set to NULL. */
void zc__bufpool_put(zc_bufpool *bp, void **p);

/* The index of slot p over all classes (class by class, in plan order), or
 * -1 when p is not a slot of this pool: lets a caller keep per-slot state,
 * such as the event of the last stream work that read the slot. */
int zc__bufpool_slot(const zc_bufpool *bp, const void *p);

/* Slots planned, over all classes. */
int zc__bufpool_slots(const zc_bufpool *bp);
/* Slots in use, over all classes. */
int zc__bufpool_in_use(const zc_bufpool *bp);
/* Free slots of at least `bytes`, over all classes (what that many
 * zc__bufpool_get calls of `bytes` can take without failing). */
int zc__bufpool_free(const zc_bufpool *bp, size_t bytes);
/* Bytes reserved, over all classes (with each class's alignment slack). */
size_t zc__bufpool_bytes(const zc_bufpool *bp);

/* Frees the pool's memory (slots still in use are reclaimed with it) and
 * empties it. Safe on a pool that was only initialised. */
void zc__bufpool_destroy(zc_bufpool *bp);

#endif
