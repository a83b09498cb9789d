/* The nvme parameter home (ZeRO-Infinity's parameter offload): stage-3
 * shards live in a swap file and are read through a ring of pinned buffers
 * when their chunk is gathered.
 *
 * Files. As for the optimizer's nvme home: each engine makes its own
 * directory under every nvme_path entry (zeroc-swap-r<rank>-XXXXXX, mkdtemp),
 * and the io_uring store creates zeroc-r<rank>-params.swp in it, striped over
 * the directories, opened O_DIRECT where the filesystem allows it (so the
 * page cache neither hides reads nor doubles the memory). Destroy removes
 * both.
 *
 * Layout. Chunk k owns the store extent [off_k, off_k + T_k), T_k = its shard
 * bytes rounded up to the I/O alignment: one read and one write per chunk.
 * The chunks first in registration order, up to max_in_cpu shard elements in
 * all, are "cached": they live in pinned host memory like the cpu home and
 * never touch the file (DeepSpeed's max_in_cpu). The file starts as zeros
 * (fallocate or a sparse file both read back as zeros), as every shard does.
 *
 * Buffers. buffer_count buffers of the largest non-cached shard (aligned);
 * buffer_size (elements) must hold that shard, as DeepSpeed requires. Host
 * memory for parameters is therefore buffer_count buffers plus the cached
 * shards, whatever the model size. A buffer is free, reading for a chunk
 * (owner), being filled by the optimizer for a chunk, or writing (wt).
 *
 * Faults. The store retries short transfers and EAGAIN itself; a ticket that
 * fails with EIO is submitted again up to ZC_PNVME_RETRIES times (reads and
 * writes of the same bytes are idempotent); anything else fails with
 * ZC_ERR_IO naming the chunk, the file and the offset. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/checked.h"
#include "base/clock.h"
#include "base/log.h"
#include "config/config.h"
#include "offload/home_alloc.h"
#include "offload/home_pool.h"
#include "offload/home_store.h"
#include "offload/homes.h"
#include "offload/swap_dirs.h"
#include "offload/offload.h"

#define ZC_PNVME_RETRIES 2
#define MAX_BUFS ZC_CFG_PARAM_SWAP_BUFFERS_MAX /* the configuration's bound (support.c) */

typedef struct pn_chunk {
    size_t n;          /* shard elements, 0 = not homed here */
    size_t tbytes;     /* shard bytes, aligned */
    uint64_t off;      /* store offset (not cached) */
    void *cache;       /* cached in pinned memory (max_in_cpu), or NULL */
    int buf;           /* buffer reading or being filled for it, -1 = none */
} pn_chunk;

typedef enum pn_use { PN_FREE = 0, PN_READ, PN_FILL } pn_use;

typedef struct pn_buf {
    char *mem;
    pn_use use;
    int k;                     /* owner chunk (PN_READ, PN_FILL) */
    zc_nvme_ticket rt, wt;     /* read / write in flight, 0 = none */
    int wk;                    /* chunk of the write */
    zc_kept_error rerr;        /* the read failed to start (kept for read_wait) */
} pn_buf;

typedef struct pnvme_home {
    zc_param_home base;
    zc_param_home_params p;
    pn_chunk *chunks;
    size_t chunks_bytes;
    size_t buf_bytes;
    int nbufs, next_fill;
    pn_buf *bufs;
    size_t bufs_bytes;
    uint64_t capacity, counted_nvme;
    zc_swap_dirs sd;           /* nvme_path entries and our directories under them */
    zc_pinned_pool *pool;
    zc_nvme_store *store;
    zc_kept_error werr;        /* first write error since the last flush */
    zc_param_home_io io;
} pnvme_home;

static zc_status pn_add(zc_param_home *hh, int k, size_t n)
{
    pnvme_home *h = (pnvme_home *)hh;
    if (k < 0 || k >= h->p.env.nchunks || h->chunks[k].n || !n)
        return ZC_ERR(ZC_ERR_INTERNAL, "nvme parameter home: chunk %d added twice or out of "
                      "range", k);
    h->chunks[k].n = n;
    return ZC_OK;
}

/* ---- setup --------------------------------------------------------------- */

static zc_status pn_prepare(zc_param_home *hh)
{
    pnvme_home *h = (pnvme_home *)hh;
    /* Layout: the first chunks up to max_in_cpu elements are cached. */
    int64_t cached = 0;
    uint64_t off = 0, cache_bytes = 0;
    size_t maxn = 0;
    for (int k = 0; k < h->p.env.nchunks; k++) {
        pn_chunk *c = &h->chunks[k];
        c->buf = -1;
        if (!c->n)
            continue;
        if (!zc__aligned_bytes(c->n, h->p.env.param_bytes, ZC_SWAP_ALIGN, &c->tbytes))
            return ZC_ERR(ZC_ERR_CONFIG, "zero_optimization.offload_param: the shard of chunk %d "
                          "(%zu elements) is too large to swap (its size overflows)", k, c->n);
        const bool cache = h->p.cache ? h->p.cache[k] != 0
                                      : cached + (int64_t)c->n <= h->p.max_in_cpu;
        if (cache) {
            cached += (int64_t)c->n;
            cache_bytes += c->tbytes;
            c->cache = (void *)1; /* placeholder until allocated below */
            continue;
        }
        c->off = off;
        off += c->tbytes;
        if (c->n > maxn)
            maxn = c->n;
    }
    h->capacity = off;
    if (maxn > (size_t)h->p.buffer_size)
        return ZC_ERR(ZC_ERR_CONFIG, "zero_optimization.offload_param.buffer_size %lld is "
                      "smaller than the largest parameter shard (%zu elements); raise it or "
                      "lower the chunk size (reduce_bucket_size)",
                      (long long)h->p.buffer_size, maxn);
    /* maxn is one of the shards sized above: no overflow. */
    (void)zc__aligned_bytes(maxn, h->p.env.param_bytes, ZC_SWAP_ALIGN, &h->buf_bytes);
    h->nbufs = h->capacity ? (int)h->p.buffer_count : 0;
    /* Host memory and the swap file's disk space were checked with the whole
     * plan by the engine's pre-flight (core/engine/preflight.c): plan/estimate.c
     * plans this layout, these buffers and the store's round-up. */
    const uint64_t pinned = (uint64_t)h->nbufs * h->buf_bytes + cache_bytes;

    ZC_CHECK(zc__home_pool_create(
        h->p.env.acct, (size_t)pinned + (size_t)(h->nbufs + h->p.env.nchunks + 2) * ZC_SWAP_ALIGN,
        h->p.env.device_index, h->p.pin_memory, &h->pool));
    for (int k = 0; k < h->p.env.nchunks; k++) {
        pn_chunk *c = &h->chunks[k];
        if (!c->cache)
            continue;
        c->cache = NULL;
        ZC_CHECK(zc__pinned_alloc(h->pool, c->tbytes, ZC_SWAP_ALIGN, ZC_MEM_PARAMS,
                                  "parameter shard (nvme offload, max_in_cpu)", &c->cache));
        memset(c->cache, 0, c->tbytes);
    }
    if (!h->capacity) {
        ZC_LOGI("offload", "parameter shards of rank %d: all %lld elements within max_in_cpu, "
                "kept in pinned host memory", h->p.env.rank, (long long)cached);
        return ZC_OK;
    }
    h->bufs_bytes = (size_t)h->nbufs * sizeof(pn_buf);
    ZC_CHECK(zc__host_alloc(h->p.env.acct, ZC_MEM_OTHER, h->bufs_bytes, "parameter swap buffers",
                            (void **)&h->bufs));
    for (int j = 0; j < h->nbufs; j++)
        ZC_CHECK(zc__pinned_alloc(h->pool, h->buf_bytes, ZC_SWAP_ALIGN, ZC_MEM_BUFFERS,
                                  "NVMe parameter buffers", (void **)&h->bufs[j].mem));

    /* Every buffer's transfer wholly in the kernel (its pieces, two more for
     * where stripe boundaries cut it): a read started ahead then runs to its end while
     * the caller computes, where with aio.queue_depth pieces (8 MiB by
     * default) a 32 MiB shard read only its first quarter before the gather
     * came to wait for it (bench/RESULTS.md, parameter offload). */
    const int64_t block = h->p.env.aio_block_size > 0 ? h->p.env.aio_block_size : 1;
    const int64_t pieces = (int64_t)(h->buf_bytes / (uint64_t)block) + 2;
    const zc_home_store_spec ss = {
        .block = "offload_param",
        .purpose = "params",
        .env = &h->p.env,
        .capacity = h->capacity,
        .min_requests = pieces > 4096 / h->nbufs ? 4096 : pieces * h->nbufs,
    };
    zc_nvme_stats ns;
    ZC_CHECK(zc__home_store_open(&h->sd, &ss, &h->store, &ns));
    h->counted_nvme = ns.capacity;
    zc__mem_count(h->p.env.acct, ZC_MEMKIND_NVME, ZC_MEM_PARAMS, (int64_t)h->counted_nvme);
    ZC_CHECK(zc__home_store_register(h->store, h->pool));
    ZC_LOGI("offload", "parameter shards of rank %d: %.1f MiB in %d %sswap file(s) under '%s'%s, "
            "%lld elements cached (max_in_cpu), %d buffers of %.1f MiB",
            h->p.env.rank, (double)h->capacity / 1048576.0, h->sd.n,
            ns.unnamed ? "unnamed " : "", ns.unnamed ? h->sd.given[0] : h->sd.made[0],
            ns.direct ? " (O_DIRECT)" : " (buffered: the filesystem refused O_DIRECT)",
            (long long)cached, h->nbufs, (double)h->buf_bytes / 1048576.0);
    return ZC_OK;
}

/* ---- I/O ----------------------------------------------------------------- */

/* ZC_FAULTS io items: this read or write fails as a persistent I/O error. */
static zc_status injected(pnvme_home *h, bool write, int k)
{
    int64_t nth = 0;
    if (!h->p.env.io_fault || !h->p.env.io_fault(h->p.env.io_fault_arg, &nth))
        return ZC_OK;
    return ZC_ERR(ZC_ERR_IO, "ZC_FAULTS: offload %s %lld of rank %d fails (parameter shard of "
                  "chunk %d, store offset %llu of '%s')", write ? "write" : "read",
                  (long long)nth, h->p.env.rank, k, (unsigned long long)h->chunks[k].off,
                  zc__nvme_path(h->store, 0));
}

static zc_status submit(pnvme_home *h, pn_buf *b, int k, bool write, bool retry)
{
    const pn_chunk *c = &h->chunks[k];
    zc_status rc = retry ? ZC_OK : injected(h, write, k);
    if (rc == ZC_OK)
        rc = write ? zc__nvme_write(h->store, c->off, b->mem, c->tbytes, &b->wt)
                   : zc__nvme_read(h->store, c->off, b->mem, c->tbytes, &b->rt);
    if (rc != ZC_OK)
        zc__error_context("offload_param nvme: %s the shard of chunk %d (rank %d)",
                          write ? "writing" : "reading", k, h->p.env.rank);
    return rc;
}

/* Waits for a buffer's read or write; a one-off EIO is submitted again. */
static zc_status wait_io(pnvme_home *h, pn_buf *b, int k, bool write)
{
    zc_nvme_ticket *t = write ? &b->wt : &b->rt;
    zc_status rc = ZC_OK;
    for (int tries = 0; *t;) {
        zc_nvme_error err;
        rc = zc__nvme_wait(h->store, *t, &err);
        *t = 0;
        if (rc == ZC_OK)
            break;
        if (err.err == EIO && tries++ < ZC_PNVME_RETRIES) {
            ZC_LOGW("offload", "offload_param nvme: %s of chunk %d failed with EIO at offset "
                    "%llu of '%s'; trying again (%d of %d)", write ? "write" : "read", k,
                    (unsigned long long)err.file_offset, err.path, tries, ZC_PNVME_RETRIES);
            zc__error_clear();
            rc = submit(h, b, k, write, true);
            if (rc != ZC_OK)
                break;
            continue;
        }
        zc__error_context("offload_param nvme: %s the shard of chunk %d (rank %d)",
                          write ? "writing" : "reading", k, h->p.env.rank);
        break;
    }
    return rc;
}

/* Makes buffer b free of its write (the write's error is kept for flush). */
static void settle_write(pnvme_home *h, pn_buf *b)
{
    if (b->wt)
        zc__kept_error_keep(&h->werr, wait_io(h, b, b->wk, true));
}

static int free_buffers(const pnvme_home *h)
{
    int n = 0;
    for (int j = 0; j < h->nbufs; j++)
        n += h->bufs[j].use == PN_FREE && !h->bufs[j].wt;
    return n;
}

static int take_buffer(pnvme_home *h, int k, pn_use use, bool allow_writing)
{
    for (int i = 0; i < h->nbufs; i++) {
        const int j = (h->next_fill + i) % h->nbufs;
        pn_buf *b = &h->bufs[j];
        if (b->use != PN_FREE || (b->wt && !allow_writing))
            continue;
        settle_write(h, b);
        b->use = use;
        b->k = k;
        h->chunks[k].buf = j;
        h->next_fill = (j + 1) % h->nbufs;
        return j;
    }
    return -1;
}

static void start_read(pnvme_home *h, int k, int j)
{
    pn_buf *b = &h->bufs[j];
    zc__kept_error_keep(&b->rerr, submit(h, b, k, false, false));
}

static bool pn_rank_local_io(const zc_param_home *hh, int k)
{
    const pnvme_home *h = (const pnvme_home *)hh;
    return !h->chunks[k].cache;
}

static void pn_read_start(zc_param_home *hh, int k, bool *started)
{
    pnvme_home *h = (pnvme_home *)hh;
    pn_chunk *c = &h->chunks[k];
    *started = true;
    if (c->cache || c->buf >= 0)
        return;
    /* The last free buffer is kept for a read on demand. */
    if (free_buffers(h) <= 1) {
        *started = false;
        return;
    }
    start_read(h, k, take_buffer(h, k, PN_READ, false));
}

static bool pn_read_started(const zc_param_home *hh, int k)
{
    const pnvme_home *h = (const pnvme_home *)hh;
    return h->chunks[k].cache || h->chunks[k].buf >= 0;
}

static zc_status pn_read_wait(zc_param_home *hh, int k, const void **shard)
{
    pnvme_home *h = (pnvme_home *)hh;
    pn_chunk *c = &h->chunks[k];
    if (c->cache) {
        *shard = c->cache;
        return ZC_OK;
    }
    if (c->buf < 0) {
        if (take_buffer(h, k, PN_READ, true) < 0)
            return ZC_ERR(ZC_ERR_INTERNAL, "nvme parameter home: no buffer free for a read of "
                          "chunk %d (%d buffers)", k, h->nbufs);
        start_read(h, k, c->buf);
    }
    pn_buf *b = &h->bufs[c->buf];
    if (b->rerr.rc != ZC_OK)
        return ZC_KEPT_RAISE(&b->rerr);
    const double t0 = zc__now_s();
    const bool waited = b->rt && !zc__nvme_done(h->store, b->rt);
    ZC_CHECK(wait_io(h, b, k, false));
    if (waited) {
        h->io.waits++;
        h->io.wait_s += zc__now_s() - t0;
    }
    h->io.reads++;
    h->io.read_bytes += (int64_t)c->tbytes;
    *shard = b->mem;
    return ZC_OK;
}

static void pn_read_end(zc_param_home *hh, int k)
{
    pnvme_home *h = (pnvme_home *)hh;
    pn_chunk *c = &h->chunks[k];
    if (c->cache || c->buf < 0)
        return;
    pn_buf *b = &h->bufs[c->buf];
    if (b->rt) { /* abandoned: the buffer must not be written after this */
        (void)zc__nvme_wait(h->store, b->rt, NULL);
        b->rt = 0;
        zc__error_clear();
    }
    b->use = PN_FREE;
    zc__kept_error_clear(&b->rerr);
    c->buf = -1;
}

static zc_status pn_write_begin(zc_param_home *hh, int k, void **dst)
{
    pnvme_home *h = (pnvme_home *)hh;
    pn_chunk *c = &h->chunks[k];
    if (c->cache) {
        *dst = c->cache;
        return ZC_OK;
    }
    if (c->buf >= 0 && h->bufs[c->buf].use == PN_READ && !h->bufs[c->buf].rt &&
        h->bufs[c->buf].rerr.rc == ZC_OK) {
        /* A completed read becomes the write (zc_param_load changes part of
         * the shard read back): the buffer already holds the shard. */
        h->bufs[c->buf].use = PN_FILL;
        *dst = h->bufs[c->buf].mem;
        return ZC_OK;
    }
    if (c->buf >= 0 || take_buffer(h, k, PN_FILL, true) < 0)
        return ZC_ERR(ZC_ERR_INTERNAL, "nvme parameter home: no buffer to write chunk %d "
                      "(%d buffers, chunk holds %d)", k, h->nbufs, c->buf);
    *dst = h->bufs[c->buf].mem;
    return ZC_OK;
}

static zc_status pn_write_end(zc_param_home *hh, int k)
{
    pnvme_home *h = (pnvme_home *)hh;
    pn_chunk *c = &h->chunks[k];
    if (c->cache)
        return ZC_OK;
    if (c->buf < 0 || h->bufs[c->buf].use != PN_FILL)
        return ZC_ERR(ZC_ERR_INTERNAL, "nvme parameter home: chunk %d written without "
                      "write_begin", k);
    pn_buf *b = &h->bufs[c->buf];
    b->use = PN_FREE;
    c->buf = -1;
    b->wk = k;
    zc_status rc = submit(h, b, k, true, false);
    zc__kept_error_keep(&h->werr, rc);
    if (rc == ZC_OK) {
        h->io.writes++;
        h->io.write_bytes += (int64_t)c->tbytes;
    }
    return rc;
}

static zc_status pn_flush(zc_param_home *hh)
{
    pnvme_home *h = (pnvme_home *)hh;
    for (int j = 0; j < h->nbufs; j++)
        settle_write(h, &h->bufs[j]);
    if (h->werr.rc == ZC_OK)
        return ZC_OK;
    zc_status rc = ZC_KEPT_RAISE(&h->werr);
    zc__kept_error_clear(&h->werr);
    return rc;
}

static void pn_io(const zc_param_home *hh, zc_param_home_io *out)
{
    const pnvme_home *h = (const pnvme_home *)hh;
    *out = h->io;
    if (h->store) {
        zc_nvme_stats ns;
        zc__nvme_stats_get(h->store, &ns);
        out->requests = ns.requests;
        out->write_requests = ns.write_requests;
    }
}

static void pn_destroy(zc_param_home *hh)
{
    pnvme_home *h = (pnvme_home *)hh;
    zc__home_store_close(h->store, "parameter swap store");
    if (h->counted_nvme)
        zc__mem_count(h->p.env.acct, ZC_MEMKIND_NVME, ZC_MEM_PARAMS, -(int64_t)h->counted_nvme);
    zc__swap_dirs_remove(&h->sd);
    for (int j = 0; h->bufs && j < h->nbufs; j++)
        zc__pinned_free(h->pool, h->bufs[j].mem);
    for (int k = 0; h->chunks && k < h->p.env.nchunks; k++)
        if (h->chunks[k].cache != (void *)1)
            zc__pinned_free(h->pool, h->chunks[k].cache);
    zc__pinned_pool_destroy(h->pool);
    zc__host_free(h->p.env.acct, ZC_MEM_OTHER, h->bufs, h->bufs_bytes);
    zc__home_free(h->p.env.acct, h, sizeof *h, h->chunks, h->chunks_bytes);
}

static const zc_param_home_ops pn_ops = {
    .name = "nvme",
    .add_chunk = pn_add,
    .prepare = pn_prepare,
    .rank_local_io = pn_rank_local_io,
    .read_start = pn_read_start,
    .read_started = pn_read_started,
    .read_wait = pn_read_wait,
    .read_end = pn_read_end,
    .write_begin = pn_write_begin,
    .write_end = pn_write_end,
    .flush = pn_flush,
    .io = pn_io,
    .destroy = pn_destroy,
};

zc_status zc__param_home_nvme_create(const zc_param_home_params *p, zc_param_home **out)
{
    *out = NULL;
    /* The rules of zc_engine_create and `zeroc config check` (support.c). */
    ZC_CHECK(zc__config_param_buffers_check(p->buffer_count));
    ZC_CHECK(zc__swap_aio_check(p->env.aio_block_size, p->env.aio_queue_depth,
                                p->env.aio_intra_op));
    pnvme_home *h;
    pn_chunk *chunks;
    size_t chunks_bytes;
    ZC_CHECK(zc__home_alloc(p->env.acct, "nvme parameter home", sizeof *h, (void **)&h,
                            p->env.nchunks, sizeof *chunks, (void **)&chunks, &chunks_bytes));
    h->base.ops = &pn_ops;
    h->p = *p;
    h->p.dirs = NULL;
    zc_status rc =
        zc__swap_dirs_init(&h->sd, p->dirs, p->ndirs, "zero_optimization.offload_param");
    if (rc != ZC_OK) {
        zc__home_free(p->env.acct, h, sizeof *h, chunks, chunks_bytes);
        return rc;
    }
    h->chunks = chunks;
    h->chunks_bytes = chunks_bytes;
    *out = &h->base;
    return ZC_OK;
}

void zc__param_home_nvme_set_faults(zc_param_home *hh, const struct zc_nvme_faults *f)
{
    if (!hh || hh->ops != &pn_ops)
        return;
    pnvme_home *h = (pnvme_home *)hh;
    if (h->store)
        zc__nvme_set_faults(h->store, f);
}
