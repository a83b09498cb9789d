/* The buffer pool: size classes reserved at build, slots taken and returned
 * without allocating (see bufpool.h). */
#include <assert.h>
#include <string.h>

#include "core/common/bufpool.h"

void zc__bufpool_init(zc_bufpool *bp, const char *what, zc_mem_category cat, zc_device *d,
                      zc_mem_account *acct)
{
    memset(bp, 0, sizeof *bp);
    bp->what = what;
    bp->cat = cat;
    bp->dev = d;
    bp->acct = acct;
}

static zc_status grow_classes(zc_bufpool *bp)
{
    if (bp->ncls < bp->cls_cap)
        return ZC_OK;
    if (bp->cls_cap > INT32_MAX / 2)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "%s: too many slot sizes", bp->what);
    const int ncap = bp->cls_cap ? bp->cls_cap * 2 : 4;
    void *mem = NULL;
    ZC_CHECK(zc__host_alloc(bp->acct, ZC_MEM_OTHER, (size_t)ncap * sizeof *bp->cls,
                            "buffer pool classes", &mem));
    if (bp->cls)
        memcpy(mem, bp->cls, (size_t)bp->ncls * sizeof *bp->cls);
    zc__host_free(bp->acct, ZC_MEM_OTHER, bp->cls, (size_t)bp->cls_cap * sizeof *bp->cls);
    bp->cls = mem;
    bp->cls_cap = ncap;
    return ZC_OK;
}

zc_status zc__bufpool_plan(zc_bufpool *bp, size_t bytes, int count)
{
    if (bp->reserved)
        return ZC_ERR(ZC_ERR_INTERNAL, "%s: planned after the pool was reserved", bp->what);
    if (count <= 0 || bytes == 0)
        return ZC_OK;
    if (bytes > SIZE_MAX - (ZC_BUFPOOL_ALIGN - 1))
        return ZC_ERR(ZC_ERR_NO_MEMORY, "%s: a slot of %zu bytes is too large", bp->what, bytes);
    const size_t slot = (bytes + ZC_BUFPOOL_ALIGN - 1) / ZC_BUFPOOL_ALIGN * ZC_BUFPOOL_ALIGN;
    int i = 0;
    while (i < bp->ncls && bp->cls[i].bytes != slot)
        i++;
    if (i == bp->ncls) {
        ZC_CHECK(grow_classes(bp));
        bp->cls[bp->ncls++] = (zc_bufpool_class){.bytes = slot};
    }
    zc_bufpool_class *c = &bp->cls[i];
    size_t total = 0;
    if (count > INT32_MAX - c->count ||
        __builtin_mul_overflow((size_t)(c->count + count), slot, &total) ||
        total > SIZE_MAX - ZC_BUFPOOL_ALIGN)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "%s: %d slots of %zu bytes overflow the address space",
                      bp->what, c->count + count, slot);
    c->count += count;
    return ZC_OK;
}

zc_status zc__bufpool_reserve(zc_bufpool *bp)
{
    zc_device *d = bp->dev;
    zc_mem_account *acct = bp->acct;
    bp->reserved = true;
    for (int i = 0; i < bp->ncls; i++) {
        zc_bufpool_class *c = &bp->cls[i];
        const size_t total = (size_t)c->count * c->bytes; /* checked by plan */
        void *mem = NULL;
        ZC_CHECK(zc__host_alloc(acct, ZC_MEM_OTHER, (size_t)c->count, "buffer pool slot flags",
                                &mem));
        c->used = mem;
        ZC_CHECK(d->ops->alloc(d, acct, ZC_MEM_RESERVED, total + ZC_BUFPOOL_ALIGN, bp->what,
                               &mem));
        c->raw = mem;
        const uintptr_t a = ((uintptr_t)mem + ZC_BUFPOOL_ALIGN - 1) & ~(uintptr_t)(ZC_BUFPOOL_ALIGN - 1);
        c->base = (char *)a;
        c->base_bytes = total;
    }
    return ZC_OK;
}

/* Moves bytes between two categories of the owner's account (the memory
 * stays allocated, so the process-wide counters do not move). */
static void move_bytes(zc_mem_account *acct, zc_mem_category from, zc_mem_category to,
                       size_t bytes)
{
    if (!acct)
        return;
    atomic_fetch_sub(&acct->bytes[from], (int64_t)bytes);
    int64_t now = atomic_fetch_add(&acct->bytes[to], (int64_t)bytes) + (int64_t)bytes;
    int64_t peak = atomic_load(&acct->peak[to]);
    while (now > peak && !atomic_compare_exchange_weak(&acct->peak[to], &peak, now)) {
    }
}

zc_status zc__bufpool_get(zc_bufpool *bp, size_t bytes, bool zero, void *stream, void **out)
{
    *out = NULL;
    zc_bufpool_class *best = NULL;
    for (int i = 0; i < bp->ncls; i++) {
        zc_bufpool_class *c = &bp->cls[i];
        if (c->bytes >= bytes && c->base && c->nused < c->count &&
            (!best || c->bytes < best->bytes))
            best = c;
    }
    if (!best)
        return ZC_ERR(ZC_ERR_NO_MEMORY,
                      "%s: no free slot of %zu bytes (%d slots in use of those reserved at "
                      "zc_engine_build)",
                      bp->what, bytes, zc__bufpool_in_use(bp));
    int s = best->next;
    while (best->used[s])
        s = (s + 1) % best->count;
    best->next = (s + 1) % best->count;
    char *p = best->base + (size_t)s * best->bytes;
    if (zero && bytes) {
        zc_status rc = bp->dev->ops->memset0(bp->dev, p, bytes, stream);
        if (rc != ZC_OK)
            return rc;
    }
    best->used[s] = 1;
    best->nused++;
    move_bytes(bp->acct, ZC_MEM_RESERVED, bp->cat, best->bytes);
    *out = p;
    return ZC_OK;
}

void zc__bufpool_put(zc_bufpool *bp, void **p)
{
    if (!*p)
        return;
    char *q = *p;
    for (int i = 0; i < bp->ncls; i++) {
        zc_bufpool_class *c = &bp->cls[i];
        if (!c->base || q < c->base || q >= c->base + c->base_bytes)
            continue;
        const size_t s = (size_t)(q - c->base) / c->bytes;
        /* A pointer that is not a slot of this pool, or a slot returned
         * twice, is a bug in the engine. */
        assert((size_t)(q - c->base) % c->bytes == 0 && c->used[s]);
        c->used[s] = 0;
        c->nused--;
        move_bytes(bp->acct, bp->cat, ZC_MEM_RESERVED, c->bytes);
        *p = NULL;
        return;
    }
    assert(!"zc__bufpool_put: pointer is not from this pool");
    *p = NULL;
}

int zc__bufpool_slot(const zc_bufpool *bp, const void *p)
{
    const char *q = p;
    int first = 0;
    for (int i = 0; i < bp->ncls; i++) {
        const zc_bufpool_class *c = &bp->cls[i];
        if (q && c->base && q >= c->base && q < c->base + c->base_bytes &&
            (size_t)(q - c->base) % c->bytes == 0)
            return first + (int)((size_t)(q - c->base) / c->bytes);
        first += c->count;
    }
    return -1;
}

int zc__bufpool_slots(const zc_bufpool *bp)
{
    int n = 0;
    for (int i = 0; i < bp->ncls; i++)
        n += bp->cls[i].count;
    return n;
}

int zc__bufpool_in_use(const zc_bufpool *bp)
{
    int n = 0;
    for (int i = 0; i < bp->ncls; i++)
        n += bp->cls[i].nused;
    return n;
}

int zc__bufpool_free(const zc_bufpool *bp, size_t bytes)
{
    int n = 0;
    for (int i = 0; i < bp->ncls; i++)
        if (bp->cls[i].bytes >= bytes)
            n += bp->cls[i].count - bp->cls[i].nused;
    return n;
}

size_t zc__bufpool_bytes(const zc_bufpool *bp)
{
    size_t n = 0;
    for (int i = 0; i < bp->ncls; i++)
        if (bp->cls[i].raw)
            n += bp->cls[i].base_bytes + ZC_BUFPOOL_ALIGN;
    return n;
}

void zc__bufpool_destroy(zc_bufpool *bp)
{
    for (int i = 0; i < bp->ncls; i++) {
        zc_bufpool_class *c = &bp->cls[i];
        if (c->base) {
            /* Slots still held (an engine destroyed mid-step) go back first so
             * the free matches what the account holds under RESERVED. */
            for (int s = 0; s < c->count; s++)
                if (c->used[s])
                    move_bytes(bp->acct, bp->cat, ZC_MEM_RESERVED, c->bytes);
            bp->dev->ops->free(bp->dev, bp->acct, ZC_MEM_RESERVED, c->raw,
                               c->base_bytes + ZC_BUFPOOL_ALIGN);
        }
        if (c->used)
            zc__host_free(bp->acct, ZC_MEM_OTHER, c->used, (size_t)c->count);
    }
    zc__host_free(bp->acct, ZC_MEM_OTHER, bp->cls, (size_t)bp->cls_cap * sizeof *bp->cls);
    zc__bufpool_init(bp, bp->what, bp->cat, bp->dev, bp->acct);
}
