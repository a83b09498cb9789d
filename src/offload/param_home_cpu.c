/* The cpu parameter home: every stage-3 shard homed here lives in the pinned
 * host pool (NUMA-placed near the GPU, registered with CUDA when there is
 * one), allocated and zeroed at prepare. A gather copies it H2D; the
 * optimizer writes the new shard into it in place. No I/O, so nothing here
 * can fail after prepare. */
#include <string.h>

#include "base/log.h"
#include "offload/home_alloc.h"
#include "offload/home_pool.h"
#include "offload/homes.h"
#include "offload/offload.h"

#define ALIGN 64

typedef struct pcpu_home {
    zc_param_home base;
    zc_param_home_params p;
    size_t *n;                 /* elements per chunk, 0 = not homed here */
    void **shard;
    size_t table_bytes;
    zc_pinned_pool *pool;
} pcpu_home;

static zc_status pc_add(zc_param_home *hh, int k, size_t n)
{
    pcpu_home *h = (pcpu_home *)hh;
    if (k < 0 || k >= h->p.env.nchunks || h->n[k] || !n)
        return ZC_ERR(ZC_ERR_INTERNAL, "cpu parameter home: chunk %d added twice or out of "
                      "range", k);
    h->n[k] = n;
    return ZC_OK;
}

static zc_status pc_prepare(zc_param_home *hh)
{
    pcpu_home *h = (pcpu_home *)hh;
    uint64_t need = 0;
    int nchunks = 0;
    for (int k = 0; k < h->p.env.nchunks; k++) {
        need += (uint64_t)h->n[k] * h->p.env.param_bytes;
        nchunks += h->n[k] > 0;
    }
    if (!need)
        return ZC_OK;
    /* Host memory was checked with the whole plan by the engine's pre-flight
     * (core/engine/preflight.c); plan/estimate.c plans these shards. */
    ZC_CHECK(zc__home_pool_create(h->p.env.acct, (size_t)need + (size_t)(nchunks + 1) * ALIGN,
                                  h->p.env.device_index, h->p.pin_memory, &h->pool));
    for (int k = 0; k < h->p.env.nchunks; k++) {
        if (!h->n[k])
            continue;
        const size_t bytes = h->n[k] * h->p.env.param_bytes;
        zc_status rc = zc__pinned_alloc(h->pool, bytes, ALIGN, ZC_MEM_PARAMS,
                                        "parameter shard (cpu offload)", &h->shard[k]);
        if (rc != ZC_OK) {
            zc__error_context("offload_param \"cpu\": chunk %d (rank %d)", k, h->p.env.rank);
            return rc;
        }
        memset(h->shard[k], 0, bytes);
    }
    ZC_LOGI("offload", "parameter shards of %.1f MiB in pinned host memory (rank %d)",
            (double)need / 1048576.0, h->p.env.rank);
    return ZC_OK;
}

static bool pc_rank_local_io(const zc_param_home *hh, int k)
{
    (void)hh; (void)k;
    return false;
}

static void pc_read_start(zc_param_home *hh, int k, bool *started)
{
    (void)hh; (void)k;
    *started = true;
}

static bool pc_read_started(const zc_param_home *hh, int k)
{
    (void)hh; (void)k;
    return true;
}

static zc_status pc_read_wait(zc_param_home *hh, int k, const void **shard)
{
    pcpu_home *h = (pcpu_home *)hh;
    if (!h->shard[k])
        return ZC_ERR(ZC_ERR_INTERNAL, "cpu parameter home: chunk %d is not homed here", k);
    *shard = h->shard[k];
    return ZC_OK;
}

static void pc_read_end(zc_param_home *hh, int k) { (void)hh; (void)k; }

static zc_status pc_write_begin(zc_param_home *hh, int k, void **dst)
{
    pcpu_home *h = (pcpu_home *)hh;
    if (!h->shard[k])
        return ZC_ERR(ZC_ERR_INTERNAL, "cpu parameter home: chunk %d is not homed here", k);
    *dst = h->shard[k];
    return ZC_OK;
}

static zc_status pc_write_end(zc_param_home *hh, int k)
{
    (void)hh; (void)k;
    return ZC_OK;
}

static zc_status pc_flush(zc_param_home *hh)
{
    (void)hh;
    return ZC_OK;
}

static void pc_io(const zc_param_home *hh, zc_param_home_io *out)
{
    (void)hh;
    memset(out, 0, sizeof *out);
}

static void pc_destroy(zc_param_home *hh)
{
    pcpu_home *h = (pcpu_home *)hh;
    for (int k = 0; h->shard && k < h->p.env.nchunks; k++)
        zc__pinned_free(h->pool, h->shard[k]);
    zc__pinned_pool_destroy(h->pool);
    zc__host_free(h->p.env.acct, ZC_MEM_OTHER, h->shard, (size_t)h->p.env.nchunks * sizeof(void *));
    zc__home_free(h->p.env.acct, h, sizeof *h, h->n, h->table_bytes);
}

static const zc_param_home_ops pc_ops = {
    .name = "cpu",
    .add_chunk = pc_add,
    .prepare = pc_prepare,
    .rank_local_io = pc_rank_local_io,
    .read_start = pc_read_start,
    .read_started = pc_read_started,
    .read_wait = pc_read_wait,
    .read_end = pc_read_end,
    .write_begin = pc_write_begin,
    .write_end = pc_write_end,
    .flush = pc_flush,
    .io = pc_io,
    .destroy = pc_destroy,
};

zc_status zc__param_home_cpu_create(const zc_param_home_params *p, zc_param_home **out)
{
    pcpu_home *h;
    size_t *n;
    size_t table_bytes;
    *out = NULL;
    ZC_CHECK(zc__home_alloc(p->env.acct, "cpu parameter home", sizeof *h, (void **)&h,
                            p->env.nchunks, sizeof *n, (void **)&n, &table_bytes));
    h->base.ops = &pc_ops;
    h->p = *p;
    h->p.dirs = NULL;
    h->n = n;
    h->table_bytes = table_bytes;
    zc_status rc = zc__host_alloc(p->env.acct, ZC_MEM_OTHER,
                                  (size_t)p->env.nchunks * sizeof(void *),
                                  "cpu parameter home table", (void **)&h->shard);
    if (rc != ZC_OK) {
        pc_destroy(&h->base);
        return rc;
    }
    *out = &h->base;
    return ZC_OK;
}
