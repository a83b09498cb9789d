/* The device home: master, m and v in the engine device's memory (what every
 * chunk had before offload), allocated per chunk at prepare and updated in
 * place by the device's Adam. Passes are free: acquire hands out the buffers. */
#include "offload/home_alloc.h"
#include "offload/homes.h"

typedef struct dev_chunk {
    size_t n;          /* elements per tensor; 0 = not homed here */
    void *t[3];        /* master, m, v (state_bytes[i] bytes an element) */
} dev_chunk;

typedef struct dev_home {
    zc_opt_home base;
    zc_opt_home_params p;
    dev_chunk *chunks;
    size_t chunks_bytes;
} dev_home;

static const zc_mem_category cats[3] = {ZC_MEM_MASTER, ZC_MEM_ADAM, ZC_MEM_ADAM};
static const char *const names[3] = {"master weights", "Adam m", "Adam v"};

static zc_status dev_add(zc_opt_home *hh, int k, size_t n)
{
    dev_home *h = (dev_home *)hh;
    if (k < 0 || k >= h->p.env.nchunks || h->chunks[k].n)
        return ZC_ERR(ZC_ERR_INTERNAL, "device home: chunk %d added twice or out of range", k);
    h->chunks[k].n = n;
    return ZC_OK;
}

static zc_status dev_prepare(zc_opt_home *hh)
{
    dev_home *h = (dev_home *)hh;
    zc_device *d = h->p.dev;
    for (int k = 0; k < h->p.env.nchunks; k++) {
        dev_chunk *c = &h->chunks[k];
        if (!c->n)
            continue;
        for (int i = 0; i < 3; i++) {
            void *mem = NULL;
            /* Device alloc zero-fills: m = v = 0, master 0 until loaded. */
            ZC_CHECK(d->ops->alloc(d, h->p.env.acct, cats[i], c->n * h->p.state_bytes[i],
                                   names[i], &mem));
            c->t[i] = mem;
        }
    }
    return ZC_OK;
}

static zc_status dev_pass_begin(zc_opt_home *hh, const int *ks, int nk)
{
    (void)hh; (void)ks; (void)nk;
    return ZC_OK;
}

static zc_status dev_acquire(zc_opt_home *hh, int k, zc_opt_view *out)
{
    dev_home *h = (dev_home *)hh;
    const dev_chunk *c = &h->chunks[k];
    if (!c->t[0])
        return ZC_ERR(ZC_ERR_INTERNAL, "device home: chunk %d is not homed here", k);
    *out = (zc_opt_view){.master = c->t[0], .m = c->t[1], .v = c->t[2]};
    return ZC_OK;
}

static zc_status dev_release(zc_opt_home *hh, int k, bool dirty)
{
    (void)hh; (void)k; (void)dirty;
    return ZC_OK;
}

static zc_status dev_pass_end(zc_opt_home *hh)
{
    (void)hh;
    return ZC_OK;
}

static void dev_destroy(zc_opt_home *hh)
{
    dev_home *h = (dev_home *)hh;
    zc_device *d = h->p.dev;
    for (int k = 0; h->chunks && k < h->p.env.nchunks; k++)
        for (int i = 0; i < 3; i++)
            if (h->chunks[k].t[i])
                d->ops->free(d, h->p.env.acct, cats[i], h->chunks[k].t[i],
                             h->chunks[k].n * h->p.state_bytes[i]);
    zc__home_free(h->p.env.acct, h, sizeof *h, h->chunks, h->chunks_bytes);
}

static const zc_opt_home_ops dev_ops = {
    .name = "device",
    .host = false,
    .resident = true,
    .add_chunk = dev_add,
    .prepare = dev_prepare,
    .pass_begin = dev_pass_begin,
    .acquire = dev_acquire,
    .release = dev_release,
    .pass_end = dev_pass_end,
    .destroy = dev_destroy,
};

zc_status zc__opt_home_device_create(const zc_opt_home_params *p, zc_opt_home **out)
{
    dev_home *h;
    dev_chunk *chunks;
    size_t chunks_bytes;
    *out = NULL;
    ZC_CHECK(zc__opt_home_params_check(p, "device home"));
    ZC_CHECK(zc__home_alloc(p->env.acct, "device home", sizeof *h, (void **)&h, p->env.nchunks,
                            sizeof *chunks, (void **)&chunks, &chunks_bytes));
    h->base.ops = &dev_ops;
    h->p = *p;
    h->chunks = chunks;
    h->chunks_bytes = chunks_bytes;
    *out = &h->base;
    return ZC_OK;
}
