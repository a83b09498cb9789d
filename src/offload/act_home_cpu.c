/* The cpu activation home (activation_checkpointing.cpu_checkpointing): one
 * slot of pinned host memory per checkpoint a micro-step holds, allocated at
 * prepare from a pool of its own (NUMA-placed near the GPU and registered
 * with CUDA when there is one, homes.h part 4). The store copies a
 * checkpoint into its slot as it is saved and back as it is restored; no
 * I/O, so nothing here fails after prepare. */
#include <string.h>

#include "base/checked.h"
#include "base/log.h"
#include "offload/home_pool.h"
#include "offload/homes.h"
#include "offload/offload.h"

/* Slots start on page boundaries: the copies from and to a GPU run at the
 * DMA engines' best alignment, and a slot never shares a page with another
 * (src/act/act.h's layout plans the same stride). */
#define SLOT_ALIGN 4096

typedef struct acpu_home {
    zc_act_home base;
    zc_act_home_params p;
    size_t stride;             /* slot_bytes rounded up to SLOT_ALIGN */
    char *mem;                 /* slots x stride */
    zc_pinned_pool *pool;
} acpu_home;

static zc_status ac_prepare(zc_act_home *hh)
{
    acpu_home *h = (acpu_home *)hh;
    const size_t slots = (size_t)h->p.env.nchunks;
    size_t all = 0;
    if (!zc__aligned_bytes(h->p.slot_bytes, 1, SLOT_ALIGN, &h->stride) ||
        __builtin_mul_overflow(h->stride, slots, &all))
        return ZC_ERR(ZC_ERR_CONFIG, "activation_checkpointing.cpu_checkpointing: %zu slots of "
                      "%zu bytes overflow", slots, h->p.slot_bytes);
    ZC_CHECK(zc__home_pool_create(h->p.env.acct, all + SLOT_ALIGN, h->p.env.device_index,
                                  h->p.pin_memory, &h->pool));
    zc_status rc = zc__pinned_alloc(h->pool, all, SLOT_ALIGN, ZC_MEM_ACTIVATIONS,
                                    "activation checkpoints (cpu_checkpointing)",
                                    (void **)&h->mem);
    if (rc != ZC_OK) {
        zc__error_context("activation_checkpointing.cpu_checkpointing (rank %d)", h->p.env.rank);
        return rc;
    }
    ZC_LOGI("offload", "activation checkpoints of rank %d: %zu slots of %zu bytes in pinned host "
            "memory", h->p.env.rank, slots, h->stride);
    return ZC_OK;
}

static bool ac_rank_local_io(const zc_act_home *hh)
{
    (void)hh;
    return false;
}

static char *slot_mem(acpu_home *h, int slot) { return h->mem + (size_t)slot * h->stride; }

static zc_status ac_write_begin(zc_act_home *hh, int slot, void **dst)
{
    acpu_home *h = (acpu_home *)hh;
    if (slot < 0 || slot >= h->p.env.nchunks || !h->mem)
        return ZC_ERR(ZC_ERR_INTERNAL, "cpu activation home: slot %d of %d", slot,
                      h->p.env.nchunks);
    *dst = slot_mem(h, slot);
    return ZC_OK;
}

static zc_status ac_write_end(zc_act_home *hh, int slot, size_t bytes)
{
    (void)hh; (void)slot; (void)bytes;
    return ZC_OK;
}

static void ac_read_start(zc_act_home *hh, int slot, size_t bytes, bool *started)
{
    (void)hh; (void)slot; (void)bytes;
    *started = true;
}

static zc_status ac_read_wait(zc_act_home *hh, int slot, size_t bytes, const void **src)
{
    (void)bytes;
    void *p = NULL;
    ZC_CHECK(ac_write_begin(hh, slot, &p));
    *src = p;
    return ZC_OK;
}

static void ac_read_end(zc_act_home *hh, int slot) { (void)hh; (void)slot; }
static void ac_drop(zc_act_home *hh) { (void)hh; }

static zc_status ac_settle(zc_act_home *hh)
{
    (void)hh;
    return ZC_OK;
}

static void ac_io(const zc_act_home *hh, zc_act_home_io *out)
{
    (void)hh;
    memset(out, 0, sizeof *out);
}

static void ac_destroy(zc_act_home *hh)
{
    acpu_home *h = (acpu_home *)hh;
    zc__pinned_free(h->pool, h->mem);
    zc__pinned_pool_destroy(h->pool);
    zc__host_free(h->p.env.acct, ZC_MEM_OTHER, h, sizeof *h);
}

static const zc_act_home_ops ac_ops = {
    .name = "cpu",
    .prepare = ac_prepare,
    .rank_local_io = ac_rank_local_io,
    .write_begin = ac_write_begin,
    .write_end = ac_write_end,
    .read_start = ac_read_start,
    .read_wait = ac_read_wait,
    .read_end = ac_read_end,
    .drop = ac_drop,
    .settle = ac_settle,
    .io = ac_io,
    .destroy = ac_destroy,
};

zc_status zc__act_home_cpu_create(const zc_act_home_params *p, zc_act_home **out)
{
    *out = NULL;
    if (p->env.nchunks < 1 || !p->slot_bytes)
        return ZC_ERR(ZC_ERR_INTERNAL, "cpu activation home: %d slots of %zu bytes",
                      p->env.nchunks, p->slot_bytes);
    acpu_home *h;
    ZC_CHECK(zc__host_alloc(p->env.acct, ZC_MEM_OTHER, sizeof *h, "cpu activation home",
                            (void **)&h));
    h->base.ops = &ac_ops;
    h->p = *p;
    h->p.dirs = NULL;
    *out = &h->base;
    return ZC_OK;
}
