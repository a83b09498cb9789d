/* zc_checkpoint_save: every rank writes the state its optimizer home holds,
 * chunk by chunk, straight from the home (an NVMe home streams its swap
 * files through its swap buffers: one chunk in memory at a time), and rank 0
 * writes the manifest and moves `latest`.
 *
 * Ranks never split: each phase's rank-local outcome (directory, shard
 * files handed to the disk, manifest and durable shard files, publish) is
 * agreed before the next, with zc__eng_agree_keep, so a failure anywhere is
 * the same error on every rank and the engine keeps training (a save changes
 * no engine state). The manifest is written while the disk finishes the
 * shard files (dirwrite.h), so what a save costs beyond its bytes is the
 * directory's preparation and the publish's renames. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/dirwrite.h"
#include "ckpt/engine_io.h"
#include "ckpt/format.h"
#include "ckpt/shard_write.h"

size_t zc__ck_bounce_bytes(const zc_engine *e)
{
    size_t most = 0;
    for (int k = 0; k < e->nchunks; k++) {
        int64_t r0, r1;
        zc__ck_home_range(e, &e->chunks[k], &r0, &r1);
        if ((size_t)(r1 - r0) > most)
            most = (size_t)(r1 - r0);
    }
    return most * sizeof(float);
}

/* This rank's part of chunk c: elements [*lo, *hi) of the chunk, the
 * parameters in its own shard's range (also at stage 0, where each rank holds
 * the whole chunk: together the ranks write each element once). Empty when
 * the shard is all padding. */
static void own_part(const zc_engine *e, const zc_chunk *c, int64_t *lo, int64_t *hi)
{
    *lo = (int64_t)e->srank * c->shard;
    const int64_t end = *lo + c->shard;
    *hi = end < c->used ? end : c->used;
    if (*hi < *lo)
        *hi = *lo;
}

/* The shard file's size: one run per chunk and kind (shard_write.h), each
 * of the kind's stored dtype. */
static uint64_t shard_bytes(const zc_engine *e, const zc_dtype kdt[ZC_CK__KINDS])
{
    uint64_t total = 0;
    for (int k = 0; k < e->nchunks; k++) {
        int64_t lo, hi;
        own_part(e, &e->chunks[k], &lo, &hi);
        for (int kind = 0; kind < ZC_CK__KINDS; kind++)
            total += zc__ck_run_bytes((uint64_t)(hi - lo) * zc__ck_elem_bytes(kdt[kind]));
    }
    return total;
}

typedef struct save_ctx {
    zc_ck_shard *shard;
    void *bounce;         /* device-resident state comes through it */
    size_t bounce_bytes;
    zc_dtype kdt[ZC_CK__KINDS];
} save_ctx;

/* Each tensor of the chunk is one run: its parameters lie back to back in
 * the home as in the file. */
static zc_status save_chunk(zc_engine *e, int k, const zc_opt_view *v, bool host, void *arg)
{
    save_ctx *x = arg;
    const zc_chunk *c = &e->chunks[k];
    int64_t r0, r1, lo, hi;
    zc__ck_home_range(e, c, &r0, &r1);
    own_part(e, c, &lo, &hi);
    if (hi == lo)
        return ZC_OK;
    const char *tensors[ZC_CK__KINDS] = {v->master, v->m, v->v};
    /* The home's own tensors stay as they are until the shard file is
     * closed: the save is synchronous (zc__eng_enter: nothing of a step is
     * in flight), and write_shard closes the file before it returns. They
     * may be written from directly. A bounce buffer or an NVMe home's swap
     * buffer is reused for the next kind or chunk: copied. */
    const bool kept = !zc__ck_needs_bounce(e, host) && e->homes[c->home]->ops->resident;
    for (int kind = 0; kind < ZC_CK__KINDS; kind++) {
        /* Each tensor in its own dtype, written as it is: the file keeps the
         * bits (a bf16 kind's 2-byte elements). */
        const size_t esz = zc__ck_elem_bytes(x->kdt[kind]);
        const char *src = tensors[kind] + (size_t)(lo - r0) * esz;
        if (zc__ck_needs_bounce(e, host)) {
            zc_device *d = e->dev;
            ZC_CHECK(d->ops->copy(d, x->bounce, src, (size_t)(hi - lo) * esz, ZC_COPY_D2H,
                                  e->stream));
            ZC_CHECK(d->ops->stream_sync(d, e->stream));
            src = x->bounce;
        }
        for (int i = c->first; i < c->first + c->count; i++) {
            const zc_param *p = e->params[i];
            const int64_t a = p->offset > lo ? p->offset : lo;
            const int64_t b = p->offset + p->numel < hi ? p->offset + p->numel : hi;
            if (a < b)
                ZC_CHECK((kept ? zc__ck_shard_put_kept : zc__ck_shard_put)(
                    x->shard, i, kind, a - p->offset, b - p->offset,
                    src + (size_t)(a - lo) * esz));
        }
        ZC_CHECK(zc__ck_shard_pad(x->shard));
    }
    return ZC_OK;
}

/* This rank's shard file, written and sealed (shard_write.h): its last
 * bytes may still be on their way to the disk; x->shard is closed or
 * discarded by the caller, and x->bounce freed with free_bounce. */
static zc_status write_shard(zc_engine *e, const char *dir, const char *tag, save_ctx *x)
{
    e->ck_ring_release = zc__ck_ring_release;
    zc_status rc = zc__ck_shard_open(x->shard, dir, tag, e->srank, shard_bytes(e, x->kdt),
                                     x->kdt, &e->acct, &e->ck_ring);
    if (rc == ZC_OK && e->dev->mem_kind == ZC_MEMKIND_DEVICE) {
        x->bounce_bytes = zc__ck_bounce_bytes(e);
        rc = zc__host_alloc(&e->acct, ZC_MEM_OTHER, x->bounce_bytes, "checkpoint bounce buffer",
                            &x->bounce);
        if (rc != ZC_OK)
            x->bounce_bytes = 0;
    }
    if (rc == ZC_OK)
        rc = zc__opt_visit(e, false, save_chunk, x);
    if (rc == ZC_OK)
        rc = zc__ck_shard_seal(x->shard);
    return rc;
}

static void free_bounce(zc_engine *e, save_ctx *x)
{
    zc__host_free(&e->acct, ZC_MEM_OTHER, x->bounce, x->bounce_bytes);
    x->bounce = NULL;
    x->bounce_bytes = 0;
}

/* Rank 0: the manifest's head and model (the entries come from the ranks). */
static zc_status describe(zc_engine *e, const char *tag, zc_ck_manifest *m)
{
    memset(m, 0, sizeof *m);
    zc__ck_engine_kdt(e, m->kdt);
    m->version = zc__ck_version_for(m->kdt);
    snprintf(m->tag, sizeof m->tag, "%s", tag);
    m->world = e->sworld; /* the shard files: MiCS's replicas hold the same ones */
    m->stage = e->stage;
    m->dtype = e->pdt;
    m->steps = e->steps;
    m->skipped = e->skipped;
    m->adam_steps = e->adam_steps;
    m->lr = zc_config_lr_at(e->cfg, e->adam_steps, NULL);
    m->config_digest = zc__ck_config_digest(e->cfg);
    m->scaler = (zc_ck_scaler){e->scaler.dynamic, e->scaler.scale, e->scaler.cur_hysteresis,
                               e->scaler.cur_iter, e->scaler.last_overflow_iter};
    m->params = calloc((size_t)e->nparams, sizeof *m->params);
    m->chunks = calloc((size_t)e->nchunks, sizeof *m->chunks);
    if (!m->params || !m->chunks)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "checkpoint manifest: %d parameters", e->nparams);
    m->nparams = e->nparams;
    m->nchunks = e->nchunks;
    for (int i = 0; i < e->nparams; i++) {
        const zc_param *p = e->params[i];
        zc_ck_param *q = &m->params[i];
        q->name = strdup(p->name);
        if (!q->name)
            return ZC_ERR(ZC_ERR_NO_MEMORY, "checkpoint manifest: names");
        q->ndim = p->ndim;
        memcpy(q->shape, p->shape, sizeof(int64_t) * (size_t)p->ndim);
        q->numel = p->numel;
        q->group = p->group;
        q->chunk = p->chunk;
        q->offset = p->offset;
    }
    for (int k = 0; k < e->nchunks; k++)
        m->chunks[k] = (zc_ck_chunk){e->chunks[k].first, e->chunks[k].count, e->chunks[k].used};
    return ZC_OK;
}

ZC_API zc_status zc_checkpoint_save(zc_engine *e, const char *dir, const char *tag)
{
    ZC_CHECK(zc__eng_enter(e, "zc_checkpoint_save", true));
    if (!dir || !*dir)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_checkpoint_save: dir is NULL or empty");
    char t[ZC_CK_TAG_MAX + 1];
    if (tag) {
        ZC_CHECK(zc__ck_resolve_tag(dir, tag, t));
    } else {
        snprintf(t, sizeof t, "global_step%" PRId64, e->steps);
    }
    if (strlen(dir) + strlen(t) + 64 > ZC_CK_PATH_MAX)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_checkpoint_save: directory path '%s' is too long",
                      dir);
    if (e->window_started || e->micro > 0)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "zc_checkpoint_save('%s'): gradients of the current accumulation window "
                      "were already handed back; save between optimizer steps", t);

    zc_status rc = e->rank == 0 ? zc__ck_stage_open(dir, t) : ZC_OK;
    /* Only what this save staged is removed after a failure: a staging
     * directory it refused to clear stays as it was. */
    const bool staged = rc == ZC_OK;
    ZC_CHECK(zc__eng_agree_keep(e, rc, "zc_checkpoint_save: preparing the directory"));
    /* With MiCS every replica holds the same shards: the first replica (the
     * ranks of the first shard group) writes them, as DeepSpeed's
     * is_first_weights_partition_group; the others take part in every
     * agreement. */
    const bool writer = !zc__grp_on(e, ZC_GRP_REPLICA) || e->topo.g[ZC_GRP_REPLICA].rank == 0;
    zc_ck_shard sh;
    save_ctx x = {&sh, NULL, 0, {ZC_DTYPE_F32}};
    zc__ck_engine_kdt(e, x.kdt);
    rc = writer ? write_shard(e, dir, t, &x) : ZC_OK;
    rc = zc__eng_agree_keep(e, rc, "zc_checkpoint_save: writing the shard files");
    if (rc == ZC_OK) {
        /* Every index is written: rank 0 writes the manifest while the disk
         * finishes every rank's shard file, then each rank waits for its own. */
        zc_status mrc = ZC_OK;
        if (e->rank == 0) {
            zc_ck_manifest m;
            mrc = describe(e, t, &m);
            if (mrc == ZC_OK)
                mrc = zc__ck_stage_prepare(dir, &m, e->sworld);
            zc__ck_manifest_free(&m);
        }
        zc_status crc = writer ? zc__ck_shard_close(&sh) : ZC_OK;
        rc = zc__eng_agree_keep(e, crc != ZC_OK ? crc : mrc,
                                "zc_checkpoint_save: making the shard files durable and writing "
                                "the manifest");
    }
    if (writer)
        zc__ck_shard_discard(&sh);
    free_bounce(e, &x);
    if (rc == ZC_OK) {
        zc_status prc = e->rank == 0 ? zc__ck_stage_publish(dir, t) : ZC_OK;
        rc = zc__eng_agree_keep(e, prc, "zc_checkpoint_save: publishing the checkpoint");
    }
    if (rc != ZC_OK && e->rank == 0 && staged)
        zc__ck_stage_abort(dir, t);
    if (rc == ZC_OK)
        ZC_LOGI("ckpt", "saved %s/%s at step %" PRId64, dir, t, e->steps);
    return rc;
}
