/* The cpu home (ZeRO-Offload): master, m and v of every chunk homed here live
 * in the pinned host pool (NUMA-placed near the GPU, registered with CUDA when
 * there is one), and at stages 2/3 the fp32 gradient shard too, all allocated
 * at prepare, so a step never allocates. The host Adam updates them in place.
 * With staging (a GPU) each chunk also has a pinned landing buffer of its
 * shard in the working precision, where its reduced gradient slice lands (D2H
 * on the engine's copy stream as the reduction finishes, opt_copy.c), and two
 * pinned output buffers, used by chunk parity, carry the new working-precision
 * shards out (H2D), so the copy of one chunk's output overlaps Adam on the
 * next. */
#include <string.h>

#include "base/log.h"
#include "offload/home_alloc.h"
#include "offload/home_pool.h"
#include "offload/homes.h"
#include "offload/offload.h"

#define ALIGN 64 /* SIMD and cache lines; shards are 64-element multiples */
/* master, m, v and the gradient shard start on a page: a checkpoint save
 * writes them with O_DIRECT from where they are (ckpt/shard_write.h). */
#define TENSOR_ALIGN 4096

typedef struct cpu_chunk {
    size_t n;
    void *t[4];  /* master, m, v (state_bytes each), and (hold_grads) the fp32
                    gradient shard */
    void *land;  /* staging: the gradient slice's landing buffer (n * param_bytes) */
} cpu_chunk;

typedef struct cpu_home {
    zc_opt_home base;
    zc_opt_home_params p;
    cpu_chunk *chunks;
    size_t chunks_bytes;
    size_t maxn;
    zc_pinned_pool *pool;
    void *pout_stage[2];  /* staging: output buffers, by chunk parity */
} cpu_home;

static const zc_mem_category cats[4] = {ZC_MEM_MASTER, ZC_MEM_ADAM, ZC_MEM_ADAM, ZC_MEM_GRADS};
static const char *const names[4] = {"master weights (cpu offload)", "Adam m (cpu offload)",
                                     "Adam v (cpu offload)", "fp32 gradient shard (cpu offload)"};

static int ntensors(const cpu_home *h) { return h->p.hold_grads ? 4 : 3; }

/* Bytes per element of tensor i: the state's precision, fp32 for the
 * gradient shard. */
static size_t tensor_esz(const cpu_home *h, int i)
{
    return i < 3 ? h->p.state_bytes[i] : sizeof(float);
}

static zc_status cpu_add(zc_opt_home *hh, int k, size_t n)
{
    cpu_home *h = (cpu_home *)hh;
    if (k < 0 || k >= h->p.env.nchunks || h->chunks[k].n)
        return ZC_ERR(ZC_ERR_INTERNAL, "cpu home: chunk %d added twice or out of range", k);
    h->chunks[k].n = n;
    if (n > h->maxn)
        h->maxn = n;
    return ZC_OK;
}

/* Pinned bytes prepare will ask for (checked before anything is allocated). */
static uint64_t cpu_bytes(const cpu_home *h)
{
    uint64_t b = 0;
    for (int k = 0; k < h->p.env.nchunks; k++) {
        for (int i = 0; i < ntensors(h); i++)
            b += (uint64_t)h->chunks[k].n * tensor_esz(h, i);
        if (h->p.staging)
            b += (uint64_t)h->chunks[k].n * h->p.env.param_bytes;
    }
    if (h->p.staging)
        b += 2 * (uint64_t)h->maxn * h->p.env.param_bytes;
    return b;
}

static zc_status cpu_prepare(zc_opt_home *hh)
{
    cpu_home *h = (cpu_home *)hh;
    const uint64_t need = cpu_bytes(h);
    zc_host_mem_limits lim;
    zc__host_mem_limits_read(NULL, &lim);
    if (zc__host_mem_check(&lim, need, false, "pinned host memory for the optimizer state") !=
        ZC_OK) {
        zc__error_context("zero_optimization.offload_optimizer.device \"cpu\" (rank %d): set "
                          "device to \"nvme\", lower offload_optimizer.ratio (stage 3) or use "
                          "more ranks",
                          h->p.env.rank);
        return ZC_ERR_NO_MEMORY;
    }
    if (zc__home_pool_unlocked(&lim, h->p.pin_memory, h->p.env.device_index, need))
        ZC_LOGW("offload", "offload_optimizer: %.1f MiB of optimizer state exceed RLIMIT_MEMLOCK "
                "(%.1f MiB); the pinned pool falls back to unlocked memory (raise 'ulimit -l' or "
                "set offload_optimizer.pin_memory false to silence this)",
                (double)need / 1048576.0, (double)lim.memlock_limit / 1048576.0);

    /* Slabs sized to the need plus alignment slack; the pool caps a slab at
     * 1 GiB and adds more as needed. */
    ZC_CHECK(zc__home_pool_create(h->p.env.acct,
                                  (size_t)need +
                                      (size_t)(ntensors(h) * h->p.env.nchunks) * TENSOR_ALIGN +
                                      (size_t)(h->p.env.nchunks + 2) * ALIGN,
                                  h->p.env.device_index, h->p.pin_memory, &h->pool));
    for (int k = 0; k < h->p.env.nchunks; k++) {
        cpu_chunk *c = &h->chunks[k];
        for (int i = 0; c->n && i < ntensors(h); i++) {
            void *mem = NULL;
            zc_status rc = zc__pinned_alloc(h->pool, c->n * tensor_esz(h, i), TENSOR_ALIGN,
                                            cats[i], names[i], &mem);
            if (rc != ZC_OK) {
                zc__error_context("offload_optimizer \"cpu\": chunk %d (rank %d)", k,
                                  h->p.env.rank);
                return rc;
            }
            memset(mem, 0, c->n * tensor_esz(h, i));
            c->t[i] = mem;
        }
        if (h->p.staging && c->n) {
            zc_status rc = zc__pinned_alloc(h->pool, c->n * h->p.env.param_bytes, ALIGN,
                                            ZC_MEM_BUFFERS, "gradient landing (cpu offload)",
                                            &c->land);
            if (rc != ZC_OK) {
                zc__error_context("offload_optimizer \"cpu\": chunk %d (rank %d)", k,
                                  h->p.env.rank);
                return rc;
            }
        }
    }
    for (int i = 0; h->p.staging && h->maxn && i < 2; i++)
        ZC_CHECK(zc__pinned_alloc(h->pool, h->maxn * h->p.env.param_bytes, ALIGN, ZC_MEM_BUFFERS,
                                  "parameter staging (cpu offload)", &h->pout_stage[i]));
    ZC_LOGI("offload", "optimizer state of %.1f MiB in pinned host memory (rank %d)",
            (double)need / 1048576.0, h->p.env.rank);
    return ZC_OK;
}

static float *cpu_grad_shard(zc_opt_home *hh, int k)
{
    cpu_home *h = (cpu_home *)hh;
    return h->p.hold_grads ? h->chunks[k].t[3] : NULL;
}

static void *cpu_grad_land(zc_opt_home *hh, int k)
{
    return ((cpu_home *)hh)->chunks[k].land;
}

static zc_status cpu_pass_begin(zc_opt_home *hh, const int *ks, int nk)
{
    (void)hh; (void)ks; (void)nk;
    return ZC_OK;
}

static zc_status cpu_acquire(zc_opt_home *hh, int k, zc_opt_view *out)
{
    cpu_home *h = (cpu_home *)hh;
    const cpu_chunk *c = &h->chunks[k];
    if (!c->t[0])
        return ZC_ERR(ZC_ERR_INTERNAL, "cpu home: chunk %d is not homed here", k);
    *out = (zc_opt_view){.master = c->t[0], .m = c->t[1], .v = c->t[2],
                         .grad_stage = c->land, .pout_stage = h->pout_stage[k & 1]};
    return ZC_OK;
}

static zc_status cpu_release(zc_opt_home *hh, int k, bool dirty)
{
    (void)hh; (void)k; (void)dirty;
    return ZC_OK;
}

static zc_status cpu_pass_end(zc_opt_home *hh)
{
    (void)hh;
    return ZC_OK;
}

static void cpu_destroy(zc_opt_home *hh)
{
    cpu_home *h = (cpu_home *)hh;
    for (int k = 0; h->chunks && k < h->p.env.nchunks; k++) {
        for (int i = 0; i < 4; i++)
            zc__pinned_free(h->pool, h->chunks[k].t[i]);
        zc__pinned_free(h->pool, h->chunks[k].land);
    }
    for (int i = 0; i < 2; i++)
        zc__pinned_free(h->pool, h->pout_stage[i]);
    zc__pinned_pool_destroy(h->pool);
    zc__home_free(h->p.env.acct, h, sizeof *h, h->chunks, h->chunks_bytes);
}

static const zc_opt_home_ops cpu_ops = {
    .name = "cpu",
    .host = true,
    .resident = true,
    .add_chunk = cpu_add,
    .prepare = cpu_prepare,
    .pass_begin = cpu_pass_begin,
    .acquire = cpu_acquire,
    .release = cpu_release,
    .pass_end = cpu_pass_end,
    .grad_shard = cpu_grad_shard,
    .grad_land = cpu_grad_land,
    .destroy = cpu_destroy,
};

zc_status zc__opt_home_cpu_create(const zc_opt_home_params *p, zc_opt_home **out)
{
    cpu_home *h;
    cpu_chunk *chunks;
    size_t chunks_bytes;
    *out = NULL;
    ZC_CHECK(zc__opt_home_params_check(p, "cpu home"));
    ZC_CHECK(zc__home_alloc(p->env.acct, "cpu home", sizeof *h, (void **)&h, p->env.nchunks,
                            sizeof *chunks, (void **)&chunks, &chunks_bytes));
    h->base.ops = &cpu_ops;
    h->p = *p;
    h->p.dirs = NULL;
    h->chunks = chunks;
    h->chunks_bytes = chunks_bytes;
    *out = &h->base;
    return ZC_OK;
}
