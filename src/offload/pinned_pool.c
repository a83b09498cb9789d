/* The pinned host pool: large slabs, pinned once, sub-allocated.
 *
 * Pinning is slow (cudaHostRegister and mlock fault in and lock every page;
 * hundreds of ms per GiB), so it happens per slab at setup, never per buffer.
 * Slabs are anonymous mmaps because io_uring can only register anonymous,
 * non-file-backed memory (cudaHostAlloc memory is a mapping of the NVIDIA
 * device file and is refused by some kernels); with a CUDA device the mmap is
 * registered with cudaHostRegister, without one it is mlock'd.
 *
 * Sub-allocation: each slab keeps its live allocations sorted by offset; free
 * space is the gaps between them (first fit). Offload buffers are few and large
 * (shards, swap buffers), so linear scans are cheap and nothing fragments the
 * bookkeeping. The bookkeeping lives in counted host memory (ZC_MEM_OTHER).
 *
 * Locking: one mutex per pool guards slabs and ranges. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

#include "zc_build_config.h"

#include "base/log.h"
#include "offload/numa.h"
#include "offload/offload.h"
#include "offload/offload_internal.h"

#if ZC_HAVE_CUDA
#include "cuda_plugin/load.h" /* the CUDA calls, in the plugin loaded on first need */
#endif

#define GRANULE 64u
#define MAX_SLAB ((size_t)1 << 30) /* io_uring: at most 1 GiB per registered buffer */
#define DEFAULT_SLAB ((size_t)64 << 20)

typedef struct range {
    size_t off, len;      /* len rounded to GRANULE */
    size_t req;           /* bytes asked for (what is counted) */
    zc_mem_category cat;
} range;

typedef struct slab {
    char *base;
    size_t bytes;
    bool locked;          /* mlock'd or cudaHostRegister'd */
    bool cuda;            /* cudaHostRegister'd */
    range *r;             /* live allocations sorted by off */
    int nr, capr;
} slab;

struct zc_pinned_pool {
    pthread_mutex_t mu;
    zc_pinned_pool_opts opts;
    slab *slabs;
    int nslabs, capslabs;
    size_t slab_total, used, locked_total;
    int64_t live;
    zc_pinned_mode mode;
    bool use_cuda;
    bool warned_unlocked;
    int numa_node;
    zc_numa *numa;
};

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* Grows an array of counted host memory to hold at least `need` items. */
static zc_status grow(void **arr, int *cap, int need, size_t item, const char *what)
{
    if (need <= *cap)
        return ZC_OK;
    int ncap = *cap ? *cap * 2 : 8;
    while (ncap < need)
        ncap *= 2;
    void *n;
    ZC_CHECK(zc__host_alloc(NULL, ZC_MEM_OTHER, (size_t)ncap * item, what, &n));
    if (*arr) {
        memcpy(n, *arr, (size_t)*cap * item);
        zc__host_free(NULL, ZC_MEM_OTHER, *arr, (size_t)*cap * item);
    }
    *arr = n;
    *cap = ncap;
    return ZC_OK;
}

#if ZC_HAVE_CUDA
/* The device to register with, or -1 without a usable CUDA device. Untested on
 * the CI machine (no GPU). */
static int cuda_device_for(int want)
{
    int n = zc__device_cuda_count();
    if (n <= 0)
        return -1;
    if (want < 0)
        return 0;
    return want < n ? want : -1;
}
#endif

static void slab_unpin_unmap(zc_pinned_pool *pool, slab *s)
{
#if ZC_HAVE_CUDA
    if (s->cuda)
        zc__cuda_host_unregister(s->base);
#endif
    if (s->locked && !s->cuda) {
        munlock(s->base, s->bytes);
        pool->locked_total -= s->bytes;
    }
    munmap(s->base, s->bytes);
    pool->slab_total -= s->bytes;
}

/* Maps, places and pins one slab of `bytes`. Called with the mutex held. */
static zc_status slab_add(zc_pinned_pool *pool, size_t bytes, const char *what)
{
    char a[32], b[32];
    zc_status rc;
    if (pool->opts.max_bytes && pool->slab_total + bytes > pool->opts.max_bytes)
        return ZC_ERR(ZC_ERR_NO_MEMORY,
                      "pinned pool: %s needs a new slab of %s but the pool is capped at %s "
                      "(%s in slabs already); raise the pool's max_bytes or free buffers",
                      what, zc__offload_fmt_bytes(a, bytes),
                      zc__offload_fmt_bytes(b, pool->opts.max_bytes),
                      zc__offload_fmt_bytes(a, pool->slab_total));
    zc_host_mem_limits lim;
    zc__host_mem_limits_read(NULL, &lim);
    bool need_lock = (pool->opts.flags & ZC_PINNED_REQUIRE_LOCK) && !pool->use_cuda;
    /* The memlock limit is per process: check the total this pool will hold. */
    zc_host_mem_limits lim_total = lim;
    if (need_lock && lim.memlock_limit != UINT64_MAX)
        lim_total.memlock_limit =
            lim.memlock_limit > pool->locked_total ? lim.memlock_limit - pool->locked_total : 0;
    ZC_CHECK(zc__host_mem_check(&lim_total, bytes, need_lock, "pinned pool slab"));
    ZC_CHECK(grow((void **)&pool->slabs, &pool->capslabs, pool->nslabs + 1, sizeof(slab),
                  "pinned pool slab table"));

    void *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "pinned pool: mmap of a %s slab for %s failed: %s",
                      zc__offload_fmt_bytes(a, bytes), what, strerror(errno));
    /* Bind before the first touch: pinning faults the pages in, and first
     * touch would otherwise place them on whichever node runs this thread. */
    if (pool->numa)
        zc__numa_bind(pool->numa, base, bytes, pool->numa_node);
    /* Ask for transparent huge pages before the pages are faulted in: an
     * O_DIRECT request on a registered buffer takes one segment per page, and
     * with 4 KiB pages a 1 MiB request exceeds the usual max_segments (127 or
     * 254) and reaches the drive split in two (see bench/RESULTS.md, NVMe).
     * Pinned memory (mlock, cudaHostRegister) cannot be collapsed later, so
     * this is the only moment to ask. A refusal only costs request size. */
    if (bytes >= (2u << 20))
        (void)madvise(base, bytes, MADV_HUGEPAGE);

    slab s = {.base = base, .bytes = bytes};
#if ZC_HAVE_CUDA
    if (pool->use_cuda) {
        char why[256];
        if (zc__cuda_host_register(base, bytes, why, sizeof why) != 0) {
            munmap(base, bytes);
            return ZC_ERR(ZC_ERR_DEVICE, "pinned pool: cudaHostRegister of a %s slab for %s: %s",
                          zc__offload_fmt_bytes(a, bytes), what, why);
        }
        s.locked = s.cuda = true;
    }
#endif
    if (!s.cuda && !(pool->opts.flags & ZC_PINNED_NO_LOCK)) {
        if (mlock(base, bytes) == 0) {
            s.locked = true;
            pool->locked_total += bytes;
        } else {
            int e = errno;
            if (pool->opts.flags & ZC_PINNED_REQUIRE_LOCK) {
                munmap(base, bytes);
                return ZC_ERR(ZC_ERR_NO_MEMORY,
                              "pinned pool: mlock of a %s slab for %s failed (%s) with %s "
                              "locked already and RLIMIT_MEMLOCK %s; raise it (ulimit -l "
                              "unlimited, LimitMEMLOCK=infinity, docker --ulimit memlock=-1) "
                              "or grant CAP_IPC_LOCK",
                              zc__offload_fmt_bytes(a, bytes), what, strerror(e),
                              zc__offload_fmt_bytes(b, pool->locked_total),
                              zc__offload_fmt_bytes(a, lim.memlock_limit));
            }
            if (!pool->warned_unlocked) {
                pool->warned_unlocked = true;
                ZC_LOGW("offload",
                        "pinned pool: cannot lock %s (%s; RLIMIT_MEMLOCK is %s): using "
                        "unlocked memory, which the kernel may swap and which makes "
                        "device copies slower; raise 'ulimit -l' or grant CAP_IPC_LOCK",
                        zc__offload_fmt_bytes(a, bytes), strerror(e),
                        zc__offload_fmt_bytes(b, lim.memlock_limit));
            }
            pool->mode = ZC_PINNED_UNLOCKED;
        }
    }
    pool->slabs[pool->nslabs++] = s;
    pool->slab_total += bytes;
    ZC_LOGD("offload", "pinned pool: slab %d of %s at %p (%s, node %d)", pool->nslabs - 1,
            zc__offload_fmt_bytes(a, bytes), base,
            s.cuda ? "cudaHostRegister" : s.locked ? "mlock" : "unlocked", pool->numa_node);
    rc = ZC_OK;
    return rc;
}

/* First fit inside one slab. Returns the offset or SIZE_MAX; *pos gets the
 * insertion index. */
static size_t slab_fit(const slab *s, size_t len, size_t align, int *pos)
{
    size_t cursor = 0;
    for (int i = 0; i <= s->nr; i++) {
        size_t end = i < s->nr ? s->r[i].off : s->bytes;
        size_t off = round_up(cursor, align);
        if (off <= end && end - off >= len) {
            *pos = i;
            return off;
        }
        if (i < s->nr)
            cursor = s->r[i].off + s->r[i].len;
    }
    return SIZE_MAX;
}

zc_status zc__pinned_pool_create(zc_pinned_pool **out, const zc_pinned_pool_opts *opts)
{
    zc_pinned_pool_opts def = ZC_PINNED_POOL_OPTS_INIT;
    zc_status rc = ZC_OK;
    if (!out)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc__pinned_pool_create: out is NULL");
    *out = NULL;
    if (opts && opts->size < sizeof(zc_pinned_pool_opts))
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "zc__pinned_pool_create: opts->size %zu, expected %zu (use "
                      "ZC_PINNED_POOL_OPTS_INIT)",
                      opts->size, sizeof(zc_pinned_pool_opts));
    if (opts)
        def = *opts;
    if ((def.flags & ZC_PINNED_REQUIRE_LOCK) && (def.flags & ZC_PINNED_NO_LOCK))
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "zc__pinned_pool_create: ZC_PINNED_REQUIRE_LOCK and ZC_PINNED_NO_LOCK "
                      "contradict each other");
    size_t ps = zc__offload_page_size();
    if (!def.slab_bytes)
        def.slab_bytes = DEFAULT_SLAB;
    def.slab_bytes = round_up(def.slab_bytes, ps);
    if (def.slab_bytes > MAX_SLAB)
        def.slab_bytes = MAX_SLAB;

    zc_pinned_pool *pool;
    ZC_CHECK(zc__host_alloc(NULL, ZC_MEM_OTHER, sizeof *pool, "pinned pool", (void **)&pool));
    pthread_mutex_init(&pool->mu, NULL);
    pool->opts = def;
    pool->mode = ZC_PINNED_MLOCKED;
    pool->numa_node = -1;
    if (def.flags & ZC_PINNED_NO_LOCK)
        pool->mode = ZC_PINNED_UNLOCKED;

    int dev = -1;
#if ZC_HAVE_CUDA
    if (!(def.flags & ZC_PINNED_NO_CUDA)) {
        dev = cuda_device_for(def.device_index);
        if (dev >= 0) {
            pool->use_cuda = true;
            pool->mode = ZC_PINNED_CUDA_REGISTERED;
        }
    }
#endif
    ZC_CHECK_GOTO(zc__numa_open(&pool->numa, dev, def.numa_node, &pool->numa_node), rc, fail);

    if (def.reserve_bytes) {
        /* Check the whole reservation at once so the message names the total. */
        zc_host_mem_limits lim;
        zc__host_mem_limits_read(NULL, &lim);
        bool need_lock = (def.flags & ZC_PINNED_REQUIRE_LOCK) && !pool->use_cuda;
        ZC_CHECK_GOTO(zc__host_mem_check(&lim, def.reserve_bytes, need_lock,
                                         "pinned pool reservation"),
                      rc, fail);
        size_t left = round_up(def.reserve_bytes, ps);
        while (left) {
            size_t b = left < def.slab_bytes ? left : def.slab_bytes;
            ZC_CHECK_GOTO(slab_add(pool, b, "the pool reservation"), rc, fail);
            left -= b;
        }
    }
    ZC_LOGI("offload", "pinned pool: %s, slabs of %zu MiB, NUMA node %d",
            pool->mode == ZC_PINNED_CUDA_REGISTERED ? "cudaHostRegister"
            : pool->mode == ZC_PINNED_MLOCKED       ? "mlock"
                                                    : "unlocked",
            def.slab_bytes >> 20, pool->numa_node);
    *out = pool;
    return ZC_OK;
fail:
    zc__pinned_pool_destroy(pool);
    return rc;
}

zc_status zc__pinned_alloc(zc_pinned_pool *pool, size_t bytes, size_t align, zc_mem_category cat,
                           const char *what, void **out)
{
    char a[32];
    if (!out)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc__pinned_alloc: out is NULL");
    *out = NULL;
    if (!what)
        what = "pinned buffer";
    if (!pool || !bytes)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc__pinned_alloc(%s): %s", what,
                      !pool ? "pool is NULL" : "size is 0");
    size_t ps = zc__offload_page_size();
    if (!align)
        align = ps;
    if (align & (align - 1) || align > ps)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "zc__pinned_alloc(%s): alignment %zu must be a power of two <= %zu", what,
                      align, ps);
    if ((int)cat < 0 || cat >= ZC_MEM__COUNT)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc__pinned_alloc(%s): bad category %d", what, (int)cat);
    if (bytes > SIZE_MAX / 2)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "zc__pinned_alloc(%s): %zu bytes is not a size", what,
                      bytes);
    if (align < GRANULE)
        align = GRANULE;
    if (zc__mem_should_fail(ZC_MEMKIND_PINNED))
        return ZC_ERR(ZC_ERR_NO_MEMORY, "pinned allocation of %s for %s failed (injected fault)",
                      zc__offload_fmt_bytes(a, bytes), what);
    size_t len = round_up(bytes, GRANULE);
    zc_status rc = ZC_OK;
    pthread_mutex_lock(&pool->mu);
    int si = -1, pos = 0;
    size_t off = SIZE_MAX;
    for (int i = 0; i < pool->nslabs && off == SIZE_MAX; i++) {
        off = slab_fit(&pool->slabs[i], len, align, &pos);
        if (off != SIZE_MAX)
            si = i;
    }
    if (off == SIZE_MAX) {
        size_t sb = pool->opts.slab_bytes;
        if (len > sb)
            sb = round_up(len, ps);
        ZC_CHECK_GOTO(slab_add(pool, sb, what), rc, out);
        si = pool->nslabs - 1;
        off = slab_fit(&pool->slabs[si], len, align, &pos);
    }
    slab *s = &pool->slabs[si];
    ZC_CHECK_GOTO(grow((void **)&s->r, &s->capr, s->nr + 1, sizeof(range), "pinned pool ranges"),
                  rc, out);
    memmove(&s->r[pos + 1], &s->r[pos], (size_t)(s->nr - pos) * sizeof(range));
    s->r[pos] = (range){.off = off, .len = len, .req = bytes, .cat = cat};
    s->nr++;
    pool->used += len;
    pool->live++;
    zc__mem_count(pool->opts.acct, ZC_MEMKIND_PINNED, cat, (int64_t)bytes);
    *out = s->base + off;
out:
    pthread_mutex_unlock(&pool->mu);
    return rc;
}

void zc__pinned_free(zc_pinned_pool *pool, void *p)
{
    if (!pool || !p)
        return;
    pthread_mutex_lock(&pool->mu);
    char *c = p;
    for (int i = 0; i < pool->nslabs; i++) {
        slab *s = &pool->slabs[i];
        if (c < s->base || c >= s->base + s->bytes)
            continue;
        size_t off = (size_t)(c - s->base);
        int lo = 0, hi = s->nr - 1;
        while (lo <= hi) {
            int mid = (lo + hi) / 2;
            if (s->r[mid].off == off) {
                range r = s->r[mid];
                memmove(&s->r[mid], &s->r[mid + 1], (size_t)(s->nr - mid - 1) * sizeof(range));
                s->nr--;
                pool->used -= r.len;
                pool->live--;
                zc__mem_count(pool->opts.acct, ZC_MEMKIND_PINNED, r.cat, -(int64_t)r.req);
                pthread_mutex_unlock(&pool->mu);
                return;
            }
            if (s->r[mid].off < off)
                lo = mid + 1;
            else
                hi = mid - 1;
        }
        break;
    }
    pthread_mutex_unlock(&pool->mu);
    ZC_LOGE("offload", "zc__pinned_free: %p was not allocated from this pool (ignored)", p);
}

void zc__pinned_pool_stats_get(zc_pinned_pool *pool, zc_pinned_pool_stats *out)
{
    memset(out, 0, sizeof *out);
    out->numa_node = -1;
    if (!pool)
        return;
    pthread_mutex_lock(&pool->mu);
    out->slab_bytes = pool->slab_total;
    out->used_bytes = pool->used;
    out->live_allocs = pool->live;
    out->nslabs = pool->nslabs;
    out->numa_node = pool->numa_node;
    out->mode = pool->mode;
    pthread_mutex_unlock(&pool->mu);
}

int zc__pinned_pool_regions(zc_pinned_pool *pool, zc_mem_region *regions, int cap)
{
    if (!pool)
        return 0;
    pthread_mutex_lock(&pool->mu);
    int n = pool->nslabs;
    for (int i = 0; i < n && i < cap; i++)
        regions[i] = (zc_mem_region){pool->slabs[i].base, pool->slabs[i].bytes};
    pthread_mutex_unlock(&pool->mu);
    return n;
}

void zc__pinned_pool_destroy(zc_pinned_pool *pool)
{
    if (!pool)
        return;
    int64_t leaked = 0;
    for (int i = 0; i < pool->nslabs; i++) {
        slab *s = &pool->slabs[i];
        /* Leaked allocations stay counted: a leak check after teardown must
         * see the consumer's bug rather than have it hidden here. */
        leaked += s->nr;
        if (s->r)
            zc__host_free(NULL, ZC_MEM_OTHER, s->r, (size_t)s->capr * sizeof(range));
        slab_unpin_unmap(pool, s);
    }
    if (leaked)
        ZC_LOGW("offload", "pinned pool destroyed with %lld allocation(s) still live",
                (long long)leaked);
    if (pool->slabs)
        zc__host_free(NULL, ZC_MEM_OTHER, pool->slabs, (size_t)pool->capslabs * sizeof(slab));
    zc__numa_close(pool->numa);
    pthread_mutex_destroy(&pool->mu);
    zc__host_free(NULL, ZC_MEM_OTHER, pool, sizeof *pool);
}
