/* zc_load_safetensors: pretrained weights into the engine's shards.
 *
 *   1. every rank reads the set's headers (load.h), matches the tensors to
 *      the parameters (match.c), plans the bytes behind its own range of
 *      every chunk (plan.c), and opens the files and the staging ring
 *      (reader.c); the outcome is agreed (zc__eng_agree_keep), so a bad file
 *      is the same error on every rank and nothing has changed;
 *   2. in one pass over the optimizer homes (the NVMe home reads nothing and
 *      writes the master alone: zc__opt_visit_master) each rank converts its
 *      pieces into its range of the fp32 master - at stage 0 the master is
 *      then all-gathered, agreed chunk by chunk before the collective - and
 *      derives the working copy from it as the step does; the pass's outcome
 *      is agreed with zc__eng_agree: a read error anywhere breaks every
 *      rank's engine, whose parameters are then partly loaded;
 *   3. the working copies are all-gathered (zc__params_publish).
 *
 * The values are bitwise those of zc_param_load of the same fp32 values:
 * the master takes them exactly (bf16 and fp16 widen exactly), the working
 * copy is the master rounded to nearest even, as both calls make it. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "load/import.h"

#define RING_DEFAULT ((size_t)32 << 20)
#define RING_MIN ((size_t)4 << 20)
#define RING_MAX ((size_t)1 << 30)

typedef struct import_ctx {
    const zc_ld_plan *plan;
    zc_ld_reader *reader;
    float *bounce;           /* a GPU's device-resident state: one range, host */
    const char *path;
    bool broke;              /* a chunk's agreement (stage 0) already failed */
} import_ctx;

static zc_status check_opts(const zc_load_options *o, const char *path)
{
    if (!path || !*path)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_load_safetensors: path is NULL or empty");
    if (o->size < sizeof(zc_load_options))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_load_safetensors: opts->size %zu, expected %zu "
                      "(start from ZC_LOAD_OPTIONS_INIT)", o->size, sizeof(zc_load_options));
    if (o->n_names < 0 || (o->n_names > 0 && !o->names))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_load_safetensors: %d names and a %s table",
                      o->n_names, o->names ? "non-NULL" : "NULL");
    for (int i = 0; i < o->n_names; i++)
        if (!o->names[i].file_name)
            return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_load_safetensors: names[%d].file_name is NULL",
                          i);
    if (o->ring_bytes && (o->ring_bytes < RING_MIN || o->ring_bytes > RING_MAX ||
                          o->ring_bytes % ((size_t)1 << 20)))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_load_safetensors: ring_bytes %zu must be 0 (32 MiB) "
                      "or a multiple of 1 MiB in [4 MiB, 1 GiB]", o->ring_bytes);
    return ZC_OK;
}

static zc_status check_state(const zc_engine *e)
{
    if (e->window_started || e->micro > 0)
        return ZC_ERR(ZC_ERR_INVALID_STATE, "zc_load_safetensors: gradients of the current "
                      "accumulation window were already handed back; load between optimizer "
                      "steps");
    for (int i = 0; i < e->nparams; i++)
        if (e->params[i]->acquired)
            return ZC_ERR(ZC_ERR_INVALID_STATE, "zc_load_safetensors: parameter '%s' is "
                          "acquired; release every parameter before loading",
                          e->params[i]->name);
    return ZC_OK;
}

/* Elements of [q0, q1) that no parameter of chunk c covers (the padding,
 * which the file does not fill): zeroed, as the build left them. */
static void zero_padding(const zc_engine *e, const zc_chunk *c, int64_t q0, int64_t q1,
                         float *fill)
{
    int64_t at = q0;
    for (int i = c->first; i < c->first + c->count && at < q1; i++) {
        const zc_param *p = e->params[i];
        const int64_t b = p->offset + p->numel;
        if (b <= at)
            continue;
        if (p->offset > at)
            memset(fill + (at - q0), 0,
                   (size_t)((p->offset < q1 ? p->offset : q1) - at) * sizeof(float));
        at = b;
    }
    if (at < q1)
        memset(fill + (at - q0), 0, (size_t)(q1 - at) * sizeof(float));
}

/* On the host path, outside a parameter home, the working copy of each
 * parameter is rounded from the master as soon as its last piece is in
 * (the reads ahead keep the disk busy meanwhile): element by element what
 * zc__params_from_master does for the whole range. */
static bool convert_early(const zc_engine *e, const zc_chunk *c, bool bounce)
{
    return !bounce && !e->pol->full_optimizer && e->dev->mem_kind == ZC_MEMKIND_HOST &&
           !zc__param_offloaded(e, c);
}

/* n fp32 values at src (the host bounce) rounded to nearest even into a
 * bf16 master at dst: on the host where the CPU can write the master, else
 * copied to the device's staging slot and cast there. */
static zc_status narrow_into(zc_engine *e, bool host, void *dst, const float *src, size_t n)
{
    zc_device *d = e->dev;
    if (host || d->mem_kind == ZC_MEMKIND_HOST) {
        zc_device *hd = zc__device_host();
        return hd->ops->cast(hd, dst, e->sdt.master, src, ZC_DTYPE_F32, n, NULL);
    }
    void *stage = NULL;
    ZC_CHECK(zc__bufpool_get(&e->pool_stage, n * sizeof(float), false, e->stream, &stage));
    zc_status rc = d->ops->copy(d, stage, src, n * sizeof(float), ZC_COPY_H2D, e->stream);
    if (rc == ZC_OK)
        rc = d->ops->cast(d, dst, e->sdt.master, stage, ZC_DTYPE_F32, n, e->stream);
    if (rc == ZC_OK)
        rc = d->ops->stream_sync(d, e->stream);
    zc__bufpool_put(&e->pool_stage, &stage);
    return rc;
}

/* Chunk k: this rank's range of the master from the file, then (stage 0)
 * the whole master by an all-gather, then the working copy. */
static zc_status import_chunk(zc_engine *e, int k, const zc_opt_view *v, bool host, void *arg)
{
    import_ctx *x = arg;
    zc_chunk *c = &e->chunks[k];
    zc_device *d = e->dev;
    const bool all = e->pol->full_optimizer;
    int64_t q0, q1;
    zc__ld_range(e, k, &q0, &q1);
    const size_t n = (size_t)(q1 - q0);
    const bool lp = e->sdt.master != ZC_DTYPE_F32;
    /* the range in the home's memory */
    char *mine = zc__elem(v->master, all ? q0 : 0, zc_dtype_size(e->sdt.master));
    /* Device memory on a GPU is filled through the host bounce; a host
     * home's fp32 master (cpu, nvme) is written in place. A bf16 master is
     * filled in fp32 through the bounce and rounded into place (to nearest
     * even) once the range is in. */
    float *bounce = x->bounce && (!host || lp) ? x->bounce : NULL;
    float *fill = bounce ? bounce : (float *)mine;
    zero_padding(e, c, q0, q1, fill);
    const bool early = convert_early(e, c, bounce != NULL);
    zc_status rc = ZC_OK;
    const zc_ld_plan *pl = x->plan;
    for (int64_t i = pl->chunk_first[k]; i < pl->chunk_first[k + 1] && rc == ZC_OK; i++) {
        rc = zc__ld_reader_next(x->reader, i, fill);
        /* A parameter's pieces follow each other (they lie in its tensor). */
        const zc_ld_piece *pc = &pl->pieces[i];
        if (rc == ZC_OK && early &&
            (i + 1 == pl->chunk_first[k + 1] || pl->pieces[i + 1].tensor != pc->tensor)) {
            const int64_t at = pc->a + pc->dst_off; /* range element of [a, b) */
            void *dst = zc__elem(c->param, e->pol->full_params ? q0 + at : at, e->pesz);
            rc = zc__eng_convert(e, dst, e->pdt, fill + at, ZC_DTYPE_F32, (size_t)(pc->b - pc->a));
        }
    }
    if (rc == ZC_OK && bounce && lp)
        rc = narrow_into(e, host, mine, bounce, n);
    else if (rc == ZC_OK && bounce)
        rc = d->ops->copy(d, mine, bounce, n * sizeof(float), ZC_COPY_H2D, e->stream);
    /* The bounce takes the next chunk's values: the copy must be done. */
    if (rc == ZC_OK && bounce)
        rc = d->ops->stream_sync(d, e->stream);
    if (all) {
        /* Each rank read a 1/W slice; the master is whole on every rank. */
        char what[600];
        snprintf(what, sizeof what, "zc_load_safetensors: reading %s into the parameters "
                 "(they are partly loaded: load them again into fresh engines)", x->path);
        rc = zc__eng_agree(e, rc, what);
        x->broke = rc != ZC_OK;
        if (rc == ZC_OK)
            rc = zc__eng_all_gather(e, mine, v->master, n, ZC_DTYPE_F32, false);
        if (rc != ZC_OK)
            return rc;
        return zc__params_from_master(e, k, 0, v->master, host, (size_t)c->padded);
    }
    if (rc == ZC_OK && !early)
        rc = zc__params_from_master(e, k, q0, v->master, host, n);
    return rc;
}

static size_t bounce_elems(const zc_engine *e)
{
    size_t most = 0;
    for (int k = 0; k < e->nchunks; k++)
        if ((size_t)e->chunks[k].shard > most)
            most = (size_t)e->chunks[k].shard;
    return most;
}

/* Whether the import fills a bounce: some chunk's master is device memory
 * the CPU cannot write, or the master is bf16. */
static bool needs_bounce(const zc_engine *e)
{
    if (e->sdt.master != ZC_DTYPE_F32)
        return true; /* the master is filled in fp32 and rounded into place */
    if (e->dev->mem_kind != ZC_MEMKIND_DEVICE)
        return false;
    for (int k = 0; k < e->nchunks; k++)
        if (!e->homes[e->chunks[k].home]->ops->host)
            return true;
    return false;
}

static void fill_stats(zc_load_stats *st, const zc_st_set *set, const zc_ld_match *m,
                       const zc_ld_reader *r, double seconds)
{
    if (!st || st->size < sizeof *st)
        return;
    const size_t size = st->size;
    memset(st, 0, sizeof *st);
    st->size = size;
    st->files = set->nfiles;
    st->header_bytes = (int64_t)set->index_bytes;
    for (int f = 0; f < set->nfiles; f++) {
        st->file_bytes += (int64_t)set->files[f].bytes;
        st->header_bytes += (int64_t)set->files[f].header_bytes;
    }
    zc__ld_reader_stats(r, &st->bytes_read, &st->direct, &st->ring_bytes);
    st->bytes_read += st->header_bytes;
    st->tensors = m->loaded;
    st->skipped = m->skipped;
    st->seconds = seconds;
}

ZC_API zc_status zc_load_safetensors(zc_engine *e, const char *path,
                                     const zc_load_options *opts, zc_load_stats *stats)
{
    ZC_CHECK(zc__eng_enter(e, "zc_load_safetensors", true));
    ZC_CHECK(zc__pass_train_only(e, "zc_load_safetensors"));
    const double t0 = zc__now_s();
    const zc_load_options defaults = ZC_LOAD_OPTIONS_INIT;
    const zc_load_options *o = opts ? opts : &defaults;
    /* Shards still being filled by zc_param_load go home first (collective,
     * agreed: a failure there breaks every engine alike). */
    ZC_CHECK(zc__param_loads_agree(e));

    zc_st_set set = {0};
    zc_ld_match m = {0};
    zc_ld_plan plan = {0};
    zc_ld_reader *reader = NULL;
    float *bounce = NULL;
    size_t bounce_bytes = 0;
    zc_status rc = check_opts(o, path);
    if (rc == ZC_OK)
        rc = check_state(e);
    if (rc == ZC_OK)
        rc = zc__st_set_open(&set, path);
    if (rc == ZC_OK)
        rc = zc__ld_match(e, &set, o, path, &m);
    if (rc == ZC_OK)
        rc = zc__ld_plan_make(e, &set, &m, &plan);
    if (rc == ZC_OK && needs_bounce(e)) {
        bounce_bytes = bounce_elems(e) * sizeof(float);
        rc = zc__host_alloc(&e->acct, ZC_MEM_OTHER, bounce_bytes, "the import's bounce buffer",
                            (void **)&bounce);
    }
    if (rc == ZC_OK)
        rc = zc__ld_reader_open(&reader, &set, &plan, o->ring_bytes ? o->ring_bytes
                                : RING_DEFAULT, o->buffered, e);
    char what[600];
    snprintf(what, sizeof what, "zc_load_safetensors: checking %s", path ? path : "(null)");
    rc = zc__eng_agree_keep(e, rc, what);
    if (rc == ZC_OK) {
        /* Reads started ahead of the old values are dropped (stage 3). */
        if (e->pol->quiesce)
            e->pol->quiesce(e);
        import_ctx x = {.plan = &plan, .reader = reader, .bounce = bounce, .path = path};
        rc = zc__opt_visit_master(e, import_chunk, &x);
        if (!x.broke) {
            snprintf(what, sizeof what, "zc_load_safetensors: reading %s into the parameters "
                     "(they are partly loaded: load them again into fresh engines)", path);
            rc = zc__eng_agree(e, rc, what);
        }
    }
    if (rc == ZC_OK)
        rc = zc__params_publish(e, "zc_load_safetensors: writing the parameter shards home");
    if (rc == ZC_OK) {
        const double dt = zc__now_s() - t0;
        fill_stats(stats, &set, &m, reader, dt);
        int64_t bytes = 0, ring = 0;
        bool direct = false;
        zc__ld_reader_stats(reader, &bytes, &direct, &ring);
        ZC_LOGI("load", "%s: %" PRId64 " tensors into %d parameters (%" PRId64 " skipped); this "
                "rank read %.1f MiB%s in %.2f s through a %.0f MiB ring", path, m.loaded,
                e->nparams, m.skipped, (double)bytes / 1048576.0, direct ? " (O_DIRECT)" : "",
                dt, (double)ring / 1048576.0);
    }
    zc__ld_reader_close(reader);
    zc__host_free(&e->acct, ZC_MEM_OTHER, bounce, bounce_bytes);
    zc__ld_plan_free(&plan);
    zc__ld_match_free(&m);
    zc__st_set_free(&set);
    return rc;
}
