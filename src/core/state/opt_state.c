/* The engine's side of the optimizer-state seam (offload/opt_home.h): which
 * home each chunk's master, m and v live in, and the passes the step and the
 * parameter calls make over them.
 *
 * Placement. Without offload every chunk is homed on the device. With
 * zero_optimization.offload_optimizer.device "cpu" or "nvme", the first
 * chunks in registration order, up to ratio * (all optimizer elements), go to
 * the offload home and the rest stay on the device and are updated there
 * (ratio is 1 unless stage 3, as DeepSpeed requires). Stage 0 keeps full
 * optimizer state on every rank and cannot offload. With a placement from
 * zero_optimization.max_memory (plan/plan.h) each chunk goes where it says,
 * which may split the chunks three ways: device, cpu and nvme homes.
 *
 * The gradient and the output. Adam reads the chunk's reduced gradient shard
 * and writes the new working-precision shard. A host home runs Adam on the
 * host: with a real device (or zc__opt_force_staging) the gradient shard is
 * copied D2H into the home's pinned staging buffer and the output goes to a
 * pinned staging buffer, then H2D into the chunk's parameters; on the host
 * path device memory is host memory and Adam reads and writes it in place.
 * Either way the kernel, its inputs and its segmenting are those of the
 * device home, so none / cpu / nvme give bitwise-identical results on the
 * host path. Under cpu offload the copies are asynchronous on a copy stream
 * (opt_copy.c): the gradient lands in a per-chunk buffer during backward and
 * the output goes back while Adam runs on the next chunk.
 *
 * Failures. The nvme home does rank-local I/O between two collectives (the
 * gradient reductions before the step and the publish after it). The step
 * agrees on the pass's outcome with zc__eng_agree before the next collective
 * (issue 18's rule): on a failure anywhere, every engine is broken with the
 * same message. The step is not all-or-nothing: a failure can come after
 * some chunks were written back, so the engine refuses further steps
 * (recovery is a checkpoint), also when the failing rank had written nothing. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/engine.h"
#include "plan/plan.h"

static atomic_bool force_staging;

void zc__opt_force_staging(bool on) { atomic_store(&force_staging, on); }

/* The nvme home when there is one (a placement may use cpu and nvme
 * together: [0] device, [1] cpu, [2] nvme), else the offload home. */
zc_opt_home *zc__opt_offload_home(zc_engine *e)
{
    return e->nhomes > 1 ? e->homes[e->nhomes - 1] : NULL;
}

bool zc__opt_rank_local_io(const zc_engine *e)
{
    return e->nhomes > 1 && !strcmp(e->homes[e->nhomes - 1]->ops->name, "nvme");
}

static size_t opt_elems(const zc_engine *e, const zc_chunk *c)
{
    return (size_t)(e->pol->full_optimizer ? c->padded : c->shard);
}

zc_status zc__opt_build(zc_engine *e)
{
    const zc_offload_cfg *o = &e->cfg->zero.offload_optimizer;
    ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, (size_t)e->nchunks * sizeof(int),
                            "optimizer pass order", (void **)&e->pass_ks));
    zc_opt_home_params hp = {
        .env = zc__eng_home_env(e),
        .dev = e->dev,
        .pin_memory = o->pin_memory,
        .buffer_count = o->buffer_count,
        .pipeline_read = o->pipeline_read,
        .pipeline_write = o->pipeline_write,
        .fast_init = o->fast_init,
        .aio_single_submit = e->cfg->aio.single_submit,
        .aio_overlap_events = e->cfg->aio.overlap_events,
        .state_bytes = {zc_dtype_size(e->sdt.master), zc_dtype_size(e->sdt.m),
                        zc_dtype_size(e->sdt.v)},
    };
    e->opt_staging = e->dev->mem_kind == ZC_MEMKIND_DEVICE || atomic_load(&force_staging);
    hp.staging = e->opt_staging;
    hp.hold_grads = e->pol->sharded_grads;
    hp.swap_grads = e->pol->sharded_grads && e->gas > 1;
    ZC_CHECK(zc__opt_home_device_create(&hp, &e->homes[0]));
    e->nhomes = 1;

    /* Where each chunk goes: the placement chosen from max_memory
     * (placement.c), or the offload device's rule - the first chunks in
     * registration order, up to ratio x all optimizer elements, offloaded.
     * Every rank computes the same split from the same layout. */
    int64_t total = 0, offloaded = 0;
    for (int k = 0; k < e->nchunks; k++)
        total += (int64_t)opt_elems(e, &e->chunks[k]);
    const double want = o->device != ZC_OFFLOAD_NONE ? o->ratio * (double)total : 0;
    const uint8_t rule_place = o->device == ZC_OFFLOAD_CPU ? ZC_PLACE_PINNED : ZC_PLACE_NVME;
    bool used[ZC_PLACE__COUNT] = {true, false, false};
    int64_t acc = 0;
    for (int k = 0; k < e->nchunks; k++) {
        uint8_t pl = ZC_PLACE_DEVICE;
        if (e->opt_place)
            pl = e->opt_place[k];
        else if (o->device != ZC_OFFLOAD_NONE && (double)acc < want)
            pl = rule_place;
        if (pl != ZC_PLACE_DEVICE)
            acc += (int64_t)opt_elems(e, &e->chunks[k]);
        e->chunks[k].home = pl; /* a kind for now; the home's index below */
        e->chunks[k].opt_kind = pl;
        used[pl] = true;
    }
    int index[ZC_PLACE__COUNT] = {0, 0, 0};
    if (used[ZC_PLACE_PINNED] || used[ZC_PLACE_NVME])
        /* zc_engine_create refused what the engine cannot take (offload at
         * stage 0, the ratio, ...); the same rules (support.c) hold here. */
        ZC_CHECK(zc__config_engine_rules(e->cfg, "zc_engine_build"));
    if (used[ZC_PLACE_PINNED]) {
        ZC_CHECK(zc__opt_home_cpu_create(&hp, &e->homes[e->nhomes]));
        index[ZC_PLACE_PINNED] = e->nhomes++;
    }
    if (used[ZC_PLACE_NVME]) {
        char buf[16 * 512];
        const char *dirs[16];
        ZC_CHECK(zc__split_nvme_paths("offload_optimizer", zc__place_nvme_path(e->cfg, false),
                                      buf, sizeof buf, dirs, &hp.ndirs));
        hp.dirs = dirs;
        ZC_CHECK(zc__opt_home_nvme_create(&hp, &e->homes[e->nhomes]));
        index[ZC_PLACE_NVME] = e->nhomes++;
    }
    for (int k = 0; k < e->nchunks; k++) {
        zc_chunk *c = &e->chunks[k];
        const size_t n = opt_elems(e, c);
        if (c->home != ZC_PLACE_DEVICE)
            offloaded += (int64_t)n;
        c->home = index[c->home];
        ZC_CHECK(e->homes[c->home]->ops->add_chunk(e->homes[c->home], k, n));
    }
    /* The offload home first: its pre-flight runs before device memory for
     * the state is taken. */
    for (int h = e->nhomes - 1; h >= 0; h--)
        ZC_CHECK(e->homes[h]->ops->prepare(e->homes[h]));
    if (e->nhomes > 1 && !e->opt_place)
        ZC_LOGI("core", "optimizer state: %lld of %lld elements offloaded (%s, ratio %g)",
                (long long)offloaded, (long long)total, e->homes[1]->ops->name,
                e->cfg->zero.offload_optimizer.ratio);
    return zc__opt_copy_build(e);
}

void zc__opt_free(zc_engine *e)
{
    zc__opt_copy_free(e); /* its copies read and write the homes' buffers */
    for (int h = 0; h < e->nhomes; h++) {
        zc__opt_home_destroy(e->homes[h]);
        e->homes[h] = NULL;
    }
    e->nhomes = 0;
    zc__host_free(&e->acct, ZC_MEM_OTHER, e->pass_ks, (size_t)e->nchunks * sizeof(int));
    e->pass_ks = NULL;
}

/* ---- passes -------------------------------------------------------------- */

/* Starts a pass over the chunks of every home whose k is in [k0, k1). */
static zc_status begin_range(zc_engine *e, int k0, int k1)
{
    for (int h = 0; h < e->nhomes; h++) {
        int n = 0;
        for (int k = k0; k < k1; k++)
            if (e->chunks[k].home == h)
                e->pass_ks[n++] = k;
        ZC_CHECK(e->homes[h]->ops->pass_begin(e->homes[h], e->pass_ks, n));
    }
    return ZC_OK;
}

static zc_status end_all(zc_engine *e)
{
    zc_status first = ZC_OK;
    int failed = 0;
    char msg[1024] = "";
    for (int h = 0; h < e->nhomes; h++) {
        zc_status rc = e->homes[h]->ops->pass_end(e->homes[h]);
        if (rc != ZC_OK && failed++ == 0) {
            first = rc;
            snprintf(msg, sizeof msg, "%s", zc_last_error());
        }
    }
    /* The first failure's text stands as it is unless a later home's
     * failure overwrote it. */
    if (failed > 1)
        return ZC_ERR(first, "%s", msg);
    return first;
}

zc_status zc__opt_pass_begin(zc_engine *e) { return begin_range(e, 0, e->nchunks); }

zc_status zc__opt_pass_end(zc_engine *e) { return end_all(e); }

float *zc__opt_grad_home(zc_engine *e, const zc_chunk *c)
{
    zc_opt_home *h = e->homes[c->home];
    if (!e->pol->sharded_grads || !h->ops->grad_shard)
        return NULL;
    return h->ops->grad_shard(h, (int)(c - e->chunks));
}

bool zc__opt_grad_swapped(zc_engine *e, const zc_chunk *c)
{
    zc_opt_home *h = e->homes[c->home];
    return e->pol->sharded_grads && e->gas > 1 && h->ops->grad_add;
}

zc_device *zc__opt_acc_dev(zc_engine *e, const zc_chunk *c)
{
    return c->acc_host ? zc__device_host() : e->dev;
}

zc_status zc__grad_acc_add(zc_engine *e, zc_device *d, float *acc, const void *src, size_t n,
                           void *stream)
{
    if (e->acc_dt == ZC_DTYPE_F32)
        return d->ops->accumulate(d, acc, src, e->pdt, n, stream);
    return d->ops->accumulate_rounded(d, acc, src, e->pdt, e->acc_dt, n, stream);
}

zc_status zc__opt_grad_accumulate(zc_engine *e, zc_chunk *c, const void *own, void *stream)
{
    zc_device *d = e->dev;
    const size_t n = (size_t)c->shard;
    if (c->acc_swap) {
        /* Into the swap files: the slice must be host memory (staged D2H
         * with a device). I/O errors are kept by the home for the step. */
        zc_opt_home *hm = e->homes[c->home];
        const void *src = own;
        if (e->opt_staging) {
            void *st = hm->ops->grad_in_stage(hm);
            ZC_CHECK(zc__eng_copy(e, st, own, n * e->pesz, ZC_COPY_D2H, stream,
                                  (int)(c - e->chunks)));
            ZC_CHECK(d->ops->stream_sync(d, stream));
            src = st;
        }
        return hm->ops->grad_add(hm, (int)(c - e->chunks), src, e->pdt, e->acc_dt,
                                 e->micro == 0, e->micro == e->gas - 1, &c->acc_sumsq);
    }
    if (!c->acc_host)
        return zc__grad_acc_add(e, d, c->acc, own, n, stream);
    zc_device *h = zc__device_host();
    if (!e->opt_staging) /* device memory is host memory: add in place */
        return zc__grad_acc_add(e, h, c->acc, own, n, NULL);
    /* D2H on the copy stream into the chunk's landing buffer; the host adds
     * it at the micro-step's end or in the norm (opt_copy.c). */
    if (zc__opt_copy_on(e, c))
        return zc__opt_copy_grad_d2h(e, c, own, stream);
    /* D2H into the home's pinned gradient staging (free during backward:
     * the optimizer pass uses it only inside zc_step), then a host add. */
    zc_opt_home *hm = e->homes[c->home];
    const int k = (int)(c - e->chunks);
    ZC_CHECK(hm->ops->pass_begin(hm, &k, 1));
    zc_opt_view v;
    zc_status rc = hm->ops->acquire(hm, k, &v);
    if (rc == ZC_OK)
        rc = zc__eng_copy(e, v.grad_stage, own, n * e->pesz, ZC_COPY_D2H, stream, k);
    if (rc == ZC_OK)
        rc = d->ops->stream_sync(d, stream);
    if (rc == ZC_OK)
        rc = zc__grad_acc_add(e, h, c->acc, v.grad_stage, n, NULL);
    if (rc == ZC_OK)
        rc = hm->ops->release(hm, k, false);
    zc_status erc = hm->ops->pass_end(hm);
    return rc != ZC_OK ? rc : erc;
}

bool zc__opt_progress(zc_engine *e, int k)
{
    zc_opt_home *h = e->homes[e->chunks[k].home];
    return h->ops->progress && h->ops->progress(h);
}

zc_status zc__opt_fetch(zc_engine *e, int k, zc_opt_chunk *out)
{
    zc_chunk *c = &e->chunks[k];
    zc_opt_home *h = e->homes[c->home];
    zc_opt_view v;
    ZC_CHECK(h->ops->acquire(h, k, &v));
    const int64_t shard_base = (int64_t)e->srank * c->shard;
    *out = (zc_opt_chunk){
        .dev = h->ops->host ? zc__device_host() : e->dev,
        .master = v.master, .m = v.m, .v = v.v,
        .opt_base = e->pol->full_optimizer ? 0 : shard_base,
        .view = v,
    };
    /* Where the reduced gradient is: the fp32 shard (stages 2/3) or the full
     * P-dtype buffer whose rank slice was reduce-scattered (stages 0/1). */
    const bool sharded = e->pol->sharded_grads;
    const char *g = sharded ? (const char *)c->acc : (const char *)c->grad;
    out->grad_dtype = sharded ? ZC_DTYPE_F32 : e->pdt;
    out->grad_base = sharded ? shard_base : 0;
    out->grad = g;
    if (c->rgrad) {
        /* MiCS at stage 1: the slice reduced across the replicas, in fp32. */
        out->grad = (const char *)c->rgrad;
        out->grad_dtype = ZC_DTYPE_F32;
        out->grad_base = shard_base;
    }
    out->pout = (char *)c->param;
    out->pout_base = e->pol->full_params ? 0 : shard_base;
    if (sharded && c->acc_swap) {
        /* Read from the swap files with the state, into host memory. */
        out->grad = (const char *)v.grad;
        out->grad_base = shard_base;
    }
    /* An offloaded parameter shard (offload_param) takes the output in its
     * home's memory (param_state.c). */
    const bool poff = zc__param_offloaded(e, c);
    if (poff) {
        ZC_CHECK(zc__param_out_begin(e, k, h->ops->host, &out->pout));
        out->pout_base = shard_base;
        out->pout_home = true;
    }
    if (!h->ops->host || !e->opt_staging)
        return ZC_OK;
    zc_device *d = e->dev;
    if (zc__opt_copy_on(e, c)) {
        /* The slice landed during backward (stage 1; stages 2/3 added it to
         * the host shard already): wait for this chunk's copy alone. */
        ZC_CHECK(zc__opt_copy_settle(e, k));
        if (!sharded) {
            out->grad = v.grad_stage;
            out->grad_base = shard_base;
        }
    } else if (!(sharded && (c->acc_swap || c->acc_host))) {
        /* Stage this rank's gradient shard into pinned memory (D2H); a
         * host-held fp32 shard is already there. */
        const size_t gesz = zc_dtype_size(out->grad_dtype);
        const char *src = g + (size_t)(shard_base - out->grad_base) * gesz;
        ZC_CHECK(zc__eng_copy(e, v.grad_stage, src, (size_t)c->shard * gesz, ZC_COPY_D2H,
                              e->stream, k));
        ZC_CHECK(d->ops->stream_sync(d, e->stream));
        out->grad = v.grad_stage;
        out->grad_base = shard_base;
    }
    if (poff)
        return ZC_OK;
    /* The parity buffer's last H2D (two chunks back) must be done. */
    if (zc__opt_copy_on(e, c))
        ZC_CHECK(zc__opt_copy_out_begin(e, k));
    out->pout = v.pout_stage;
    out->pout_base = shard_base;
    out->staged = true;
    return ZC_OK;
}

zc_status zc__opt_put(zc_engine *e, int k, zc_opt_chunk *oc)
{
    zc_chunk *c = &e->chunks[k];
    zc_opt_home *h = e->homes[c->home];
    if (oc->pout_home) {
        ZC_CHECK(zc__param_out_end(e, k));
    } else if (oc->staged) {
        /* The new working-precision shard goes back to the device (H2D):
         * on the copy stream when the home has parity buffers, else
         * synchronous, so the one staging buffer can take the next chunk. */
        zc_device *d = e->dev;
        const int64_t shard_base = (int64_t)e->srank * c->shard;
        char *dst = zc__elem(c->param, e->pol->full_params ? shard_base : 0, e->pesz);
        if (zc__opt_copy_on(e, c)) {
            ZC_CHECK(zc__opt_copy_out_end(e, k, dst, oc->pout, (size_t)c->shard * e->pesz));
        } else {
            ZC_CHECK(zc__eng_copy(e, dst, oc->pout, (size_t)c->shard * e->pesz, ZC_COPY_H2D,
                                  e->stream, k));
            ZC_CHECK(d->ops->stream_sync(d, e->stream));
        }
    }
    return h->ops->release(h, k, true);
}

zc_status zc__opt_visit(zc_engine *e, bool dirty, zc_opt_visit_fn fn, void *arg)
{
    ZC_CHECK(begin_range(e, 0, e->nchunks));
    zc_status rc = ZC_OK;
    for (int k = 0; k < e->nchunks && rc == ZC_OK; k++) {
        zc_opt_home *h = e->homes[e->chunks[k].home];
        zc_opt_view v;
        rc = h->ops->acquire(h, k, &v);
        if (rc != ZC_OK)
            break;
        rc = fn(e, k, &v, h->ops->host, arg);
        /* Released also after a failure: a streaming home must see every
         * acquire handed back before pass_end drains it. */
        zc_status rrc = h->ops->release(h, k, dirty && rc == ZC_OK);
        if (rc == ZC_OK)
            rc = rrc;
    }
    zc_status erc = end_all(e);
    return rc != ZC_OK ? rc : erc;
}

zc_status zc__opt_visit_master(zc_engine *e, zc_opt_visit_fn fn, void *arg)
{
    /* As zc__opt_visit, each home in a pass of its own kind: a home with a
     * master-only pass (nvme) reads nothing and writes the master alone. */
    for (int h = 0; h < e->nhomes; h++) {
        int n = 0;
        for (int k = 0; k < e->nchunks; k++)
            if (e->chunks[k].home == h)
                e->pass_ks[n++] = k;
        zc_opt_home *hm = e->homes[h];
        ZC_CHECK(hm->ops->pass_begin_master ? hm->ops->pass_begin_master(hm, e->pass_ks, n)
                                            : hm->ops->pass_begin(hm, e->pass_ks, n));
    }
    zc_status rc = ZC_OK;
    for (int k = 0; k < e->nchunks && rc == ZC_OK; k++) {
        zc_opt_home *h = e->homes[e->chunks[k].home];
        zc_opt_view v;
        rc = h->ops->acquire(h, k, &v);
        if (rc != ZC_OK)
            break;
        rc = fn(e, k, &v, h->ops->host, arg);
        zc_status rrc = h->ops->release(h, k, rc == ZC_OK);
        if (rc == ZC_OK)
            rc = rrc;
    }
    zc_status erc = end_all(e);
    return rc != ZC_OK ? rc : erc;
}

/* ---- master access ------------------------------------------------------- */

/* n fp32 values at src into a bf16 master at dst (round to nearest even),
 * src device memory, dst the home's (host memory when host): a host home's
 * values come to the host first, through a scratch of the engine's account. */
static zc_status narrow_master(zc_engine *e, bool host, void *dst, const float *src, size_t n)
{
    zc_device *d = e->dev;
    if (!host || d->mem_kind == ZC_MEMKIND_HOST) {
        ZC_CHECK(d->ops->cast(d, dst, e->sdt.master, src, ZC_DTYPE_F32, n, e->stream));
        return d->ops->stream_sync(d, e->stream);
    }
    float *tmp = NULL;
    ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, n * sizeof(float), "master narrowing",
                            (void **)&tmp));
    zc_status rc = d->ops->copy(d, tmp, src, n * sizeof(float), ZC_COPY_D2H, e->stream);
    if (rc == ZC_OK)
        rc = d->ops->stream_sync(d, e->stream);
    zc_device *hd = zc__device_host();
    if (rc == ZC_OK)
        rc = hd->ops->cast(hd, dst, e->sdt.master, tmp, ZC_DTYPE_F32, n, NULL);
    zc__host_free(&e->acct, ZC_MEM_OTHER, tmp, n * sizeof(float));
    return rc;
}

/* The other way: n master values at src (the home's) widened exactly into
 * fp32 at dst (device memory); a host home's on the host, then copied. */
static zc_status widen_master(zc_engine *e, bool host, float *dst, const void *src, size_t n)
{
    zc_device *d = e->dev;
    if (!host || d->mem_kind == ZC_MEMKIND_HOST) {
        ZC_CHECK(d->ops->cast(d, dst, ZC_DTYPE_F32, src, e->sdt.master, n, e->stream));
        return d->ops->stream_sync(d, e->stream);
    }
    float *tmp = NULL;
    ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, n * sizeof(float), "master widening",
                            (void **)&tmp));
    zc_device *hd = zc__device_host();
    zc_status rc = hd->ops->cast(hd, tmp, ZC_DTYPE_F32, src, e->sdt.master, n, NULL);
    if (rc == ZC_OK)
        rc = d->ops->copy(d, dst, tmp, n * sizeof(float), ZC_COPY_H2D, e->stream);
    if (rc == ZC_OK)
        rc = d->ops->stream_sync(d, e->stream);
    zc__host_free(&e->acct, ZC_MEM_OTHER, tmp, n * sizeof(float));
    return rc;
}

zc_status zc__opt_master_write(zc_engine *e, int k, int64_t at, const float *src, size_t n)
{
    zc_chunk *c = &e->chunks[k];
    zc_opt_home *h = e->homes[c->home];
    zc_device *d = e->dev;
    ZC_CHECK(begin_range(e, k, k + 1));
    zc_opt_view v;
    zc_status rc = h->ops->acquire(h, k, &v);
    char *dst = rc == ZC_OK ? zc__elem(v.master, at, zc_dtype_size(e->sdt.master)) : NULL;
    if (rc == ZC_OK && e->sdt.master != ZC_DTYPE_F32)
        rc = narrow_master(e, h->ops->host, dst, src, n);
    else if (rc == ZC_OK)
        rc = d->ops->copy(d, dst, src, n * sizeof(float),
                          h->ops->host ? ZC_COPY_D2H : ZC_COPY_D2D, e->stream);
    if (rc == ZC_OK)
        rc = d->ops->stream_sync(d, e->stream);
    if (rc == ZC_OK)
        rc = h->ops->release(h, k, true);
    zc_status erc = end_all(e);
    return rc != ZC_OK ? rc : erc;
}

zc_status zc__opt_master_read(zc_engine *e, int k, float *dst, size_t n)
{
    zc_chunk *c = &e->chunks[k];
    zc_opt_home *h = e->homes[c->home];
    zc_device *d = e->dev;
    ZC_CHECK(begin_range(e, k, k + 1));
    zc_opt_view v;
    zc_status rc = h->ops->acquire(h, k, &v);
    if (rc == ZC_OK && e->sdt.master != ZC_DTYPE_F32)
        rc = widen_master(e, h->ops->host, dst, v.master, n);
    else if (rc == ZC_OK)
        rc = d->ops->copy(d, dst, v.master, n * sizeof(float),
                          h->ops->host ? ZC_COPY_H2D : ZC_COPY_D2D, e->stream);
    if (rc == ZC_OK)
        rc = d->ops->stream_sync(d, e->stream);
    if (rc == ZC_OK)
        rc = h->ops->release(h, k, false);
    zc_status erc = end_all(e);
    return rc != ZC_OK ? rc : erc;
}
