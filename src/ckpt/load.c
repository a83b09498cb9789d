/* zc_checkpoint_load: check what needs no payload, then read once into place.
 *
 *   1. every rank reads the manifest, matches the checkpoint's tensors to the
 *      engine's parameters by name and shape and each kind's stored dtype to
 *      the engine's (match_dtypes), checks every shard file's presence and
 *      size, lists the entries its own optimizer range reads (the plan) and
 *      opens the files and read buffers for them; the outcome
 *      is agreed (zc__eng_agree_keep): a bad checkpoint is the same error on
 *      every rank and nothing has changed;
 *   2. every rank reads its planned entries once (shard_read.c: O_DIRECT,
 *      read ahead through a ring) into its range of master, exp_avg and
 *      exp_avg_sq in its optimizer home (chunk by chunk: an NVMe home
 *      streams; a bf16 kind widened in place into an fp32 one), checking each entry's checksum on the way, and writes its
 *      working parameters from the master (as the step derives them); agreed
 *      with zc__eng_agree, since a damaged entry or an I/O error here leaves
 *      a half-restored engine: broken on every rank;
 *   3. the working parameters are all-gathered as after a step (stages 1-2,
 *      and stage 3's gathered chunks), and the step counters, scheduler
 *      position and loss scaler are restored.
 *
 * Format version 1 (entries not aligned for O_DIRECT) keeps the older way:
 * every checksum verified in step 1 by pread, the entries read again in 2.
 *
 * The data is looked up by parameter name and element range, so the saving
 * world size, stage and chunk size do not matter (docs/checkpoint.md). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/engine_io.h"
#include "ckpt/format.h"
#include "ckpt/shard_read.h"
#include "ckpt/source.h"

static void shape_text(const int64_t *sh, int nd, char *b, size_t cap)
{
    size_t n = (size_t)snprintf(b, cap, "[");
    for (int d = 0; d < nd && n < cap; d++)
        n += (size_t)snprintf(b + n, cap - n, "%s%" PRId64, d ? ", " : "", sh[d]);
    if (n < cap)
        snprintf(b + n, cap - n, "]");
}

/* map[i]: the checkpoint's index of engine parameter i. */
static zc_status match_model(const zc_engine *e, const zc_ck_source *s, int *map)
{
    const zc_ck_manifest *m = &s->m;
    for (int i = 0; i < e->nparams; i++) {
        const zc_param *p = e->params[i];
        int j = i < m->nparams && !strcmp(m->params[i].name, p->name) ? i : -1;
        for (int q = 0; j < 0 && q < m->nparams; q++)
            if (!strcmp(m->params[q].name, p->name))
                j = q;
        if (j < 0)
            return ZC_ERR(ZC_ERR_INVALID_ARG, "%s/%s: no tensor '%s' (the engine's parameter %d): "
                          "a checkpoint of another model?", s->dir, ZC_CK_MANIFEST, p->name, i);
        const zc_ck_param *q = &m->params[j];
        if (q->ndim != p->ndim || memcmp(q->shape, p->shape, sizeof(int64_t) * (size_t)p->ndim)) {
            char a[160], b[160];
            shape_text(q->shape, q->ndim, a, sizeof a);
            shape_text(p->shape, p->ndim, b, sizeof b);
            return ZC_ERR(ZC_ERR_INVALID_ARG, "%s/%s: tensor '%s' has shape %s, the engine's "
                          "parameter has %s", s->dir, ZC_CK_MANIFEST, p->name, a, b);
        }
        map[i] = j;
    }
    if (m->nparams != e->nparams) {
        /* Every engine parameter was found: the checkpoint has more. */
        for (int q = 0; q < m->nparams; q++) {
            bool found = false;
            for (int i = 0; i < e->nparams && !found; i++)
                found = map[i] == q;
            if (!found)
                return ZC_ERR(ZC_ERR_INVALID_ARG, "%s/%s: tensor '%s' is not a parameter of the "
                              "engine (%d tensors saved, %d registered): a checkpoint of another "
                              "model?", s->dir, ZC_CK_MANIFEST, m->params[q].name, m->nparams,
                              e->nparams);
        }
    }
    /* fp16's loss-scaler state has no meaning elsewhere: the precision
     * matters exactly when one side has a scaler. */
    const bool ck16 = m->dtype == ZC_DTYPE_F16, eng16 = e->pdt == ZC_DTYPE_F16;
    if (ck16 != eng16 || (eng16 && m->scaler.dynamic != e->scaler.dynamic))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s/%s: saved with %s parameters (%s loss scale), the "
                      "engine trains in %s (%s loss scale): the loss scaler state does not carry "
                      "over; load it into an engine of the same precision", s->dir,
                      ZC_CK_MANIFEST, zc_dtype_name(m->dtype),
                      m->scaler.dynamic ? "dynamic" : "no dynamic", zc_dtype_name(e->pdt),
                      e->scaler.dynamic ? "dynamic" : "no dynamic");
    return ZC_OK;
}

/* The engine's key that decides where a kind is stored, for messages. */
static const char *kind_key(int kind)
{
    switch (kind) {
    case ZC_CK_MASTER:
        return "bf16.bf16_master_weights_and_grads false";
    case ZC_CK_EXP_AVG:
        return "bf16.exp_avg_dtype \"fp32\", and bf16.bf16_optimizer_states false";
    default:
        return "bf16.exp_avg_sq_dtype \"fp32\", and bf16.bf16_optimizer_states false";
    }
}

/* Each kind loads bitwise into the same dtype and widens exactly from bf16
 * into fp32. fp32 into the engine's bf16 is refused: rounding would change
 * the saved values without a word, and which rounding (nearest or the
 * engine's stochastic) would be a guess. Checked from the manifest, before
 * anything is read. */
static zc_status match_dtypes(const zc_engine *e, const zc_ck_source *s)
{
    zc_dtype kdt[ZC_CK__KINDS];
    zc__ck_engine_kdt(e, kdt);
    for (int k = 0; k < ZC_CK__KINDS; k++)
        if (s->m.kdt[k] == ZC_DTYPE_F32 && kdt[k] != ZC_DTYPE_F32)
            return ZC_ERR(ZC_ERR_INVALID_ARG, "%s/%s: %s is stored in %s, the engine keeps it in "
                          "%s: loading would round the saved values; load it into an engine "
                          "that keeps %s in fp32 (%s)", s->dir, ZC_CK_MANIFEST,
                          zc__ck_kind_name(k), zc_dtype_name(s->m.kdt[k]),
                          zc_dtype_name(kdt[k]), zc__ck_kind_name(k), kind_key(k));
    return ZC_OK;
}

/* Calls fn(param, a, b, at) for each parameter of chunk c overlapping the
 * chunk range [r0, r1): its elements [a, b), at element `at` of the range. */
#define EACH_OVERLAP(e, c, r0, r1, BODY)                                              \
    for (int i_ = (c)->first; i_ < (c)->first + (c)->count; i_++) {                  \
        const zc_param *p_ = (e)->params[i_];                                         \
        const int64_t x0_ = p_->offset > (r0) ? p_->offset : (r0);                    \
        const int64_t x1_ = p_->offset + p_->numel < (r1) ? p_->offset + p_->numel : (r1); \
        if (x0_ >= x1_)                                                               \
            continue;                                                                 \
        const int pi = i_;                                                            \
        const int64_t a = x0_ - p_->offset, b = x1_ - p_->offset, at = x0_ - (r0);    \
        BODY                                                                          \
    }

/* Calls fn for every entry elements [r0, r1) of chunk k's tensor `kind`
 * come from, in element order: the entry, its elements [x0, x1) that are
 * read, and where they go (element `at` of the range). The plan of the
 * reader and the restore both walk the chunks this way, so they agree on
 * the order. */
typedef zc_status (*entry_fn)(void *arg, int64_t entry, int64_t x0, int64_t x1, int64_t at);

static zc_status chunk_entries(const zc_engine *e, const zc_ck_source *s, const int *map, int k,
                               int kind, entry_fn fn, void *arg)
{
    const zc_chunk *c = &e->chunks[k];
    const zc_ck_manifest *m = &s->m;
    int64_t r0, r1;
    zc__ck_home_range(e, c, &r0, &r1);
    EACH_OVERLAP(e, c, r0, r1, {
        const int q = map[pi];
        const int64_t lo = m->first_entry[q * ZC_CK__KINDS + kind];
        const int64_t hi = m->first_entry[q * ZC_CK__KINDS + kind + 1];
        for (int64_t i = lo; i < hi; i++) {
            const zc_ck_entry *en = &m->entries[i];
            if (en->end <= a || en->begin >= b)
                continue;
            const int64_t x0 = en->begin > a ? en->begin : a;
            const int64_t x1 = en->end < b ? en->end : b;
            ZC_CHECK(fn(arg, i, x0, x1, at + (x0 - a)));
        }
    })
    return ZC_OK;
}

typedef struct plan {
    int64_t *idx;
    int64_t n, cap;
} plan;

static zc_status plan_add(void *arg, int64_t entry, int64_t x0, int64_t x1, int64_t at)
{
    (void)x0;
    (void)x1;
    (void)at;
    plan *p = arg;
    if (p->n == p->cap) {
        int64_t cap = p->cap ? 2 * p->cap : 256;
        int64_t *idx = realloc(p->idx, (size_t)cap * sizeof *idx);
        if (!idx)
            return ZC_ERR(ZC_ERR_NO_MEMORY, "zc_checkpoint_load: plan of %" PRId64 " entries",
                          cap);
        p->idx = idx;
        p->cap = cap;
    }
    p->idx[p->n++] = entry;
    return ZC_OK;
}

/* The entries this rank reads, in the order it reads them. */
static zc_status make_plan(const zc_engine *e, const zc_ck_source *s, const int *map, plan *p)
{
    for (int k = 0; k < e->nchunks; k++)
        for (int kind = 0; kind < ZC_CK__KINDS; kind++)
            ZC_CHECK(chunk_entries(e, s, map, k, kind, plan_add, p));
    return ZC_OK;
}

static zc_status verify_entry(void *arg, int64_t entry, int64_t x0, int64_t x1, int64_t at)
{
    (void)x0;
    (void)x1;
    (void)at;
    return zc__ck_source_verify(arg, entry);
}

/* Version 1 (entries not aligned): every checksum first, by pread. */
static zc_status verify_own(const zc_engine *e, zc_ck_source *s, const int *map)
{
    for (int k = 0; k < e->nchunks; k++)
        for (int kind = 0; kind < ZC_CK__KINDS; kind++)
            ZC_CHECK(chunk_entries(e, s, map, k, kind, verify_entry, s));
    return ZC_OK;
}

typedef struct load_ctx {
    zc_ck_source *src;
    const int *map;
    zc_ck_reader *reader; /* version 2: one O_DIRECT read; NULL: pread */
    char *bounce;
    zc_dtype kdt[ZC_CK__KINDS]; /* the engine's */
    /* the tensor being restored: elements of the file's dtype */
    char *dst;
    size_t esz;           /* bytes per element in the file */
    int64_t filled;       /* elements of dst written or zeroed */
} load_ctx;

/* One entry's elements into place; the gap before them is chunk padding
 * (entries tile every parameter, parameters lie in offset order). */
static zc_status restore_entry(void *arg, int64_t entry, int64_t x0, int64_t x1, int64_t at)
{
    load_ctx *x = arg;
    if (at > x->filled)
        memset(x->dst + (size_t)x->filled * x->esz, 0, (size_t)(at - x->filled) * x->esz);
    x->filled = at + (x1 - x0);
    char *to = x->dst + (size_t)at * x->esz;
    if (x->reader)
        return zc__ck_reader_next(x->reader, entry, x0, x1, to);
    const zc_ck_entry *en = &x->src->m.entries[entry];
    return zc__ck_source_read(x->src, en->param, en->kind, x0, x1, to);
}

static zc_status load_chunk(zc_engine *e, int k, const zc_opt_view *v, bool host, void *arg)
{
    load_ctx *x = arg;
    zc_chunk *c = &e->chunks[k];
    zc_device *d = e->dev;
    int64_t r0, r1;
    zc__ck_home_range(e, c, &r0, &r1);
    const size_t n = (size_t)(r1 - r0);
    char *tensors[ZC_CK__KINDS] = {v->master, v->m, v->v};
    const bool bounce = zc__ck_needs_bounce(e, host);
    for (int kind = 0; kind < ZC_CK__KINDS; kind++) {
        /* The file's values land as stored at the start of the tensor (or
         * the bounce buffer); a bf16 kind loaded into an fp32 one is then
         * widened there, in place (match_dtypes allows no other change). */
        const zc_dtype fdt = x->src->m.kdt[kind];
        x->dst = bounce ? x->bounce : tensors[kind];
        x->esz = zc__ck_elem_bytes(fdt);
        x->filled = 0;
        ZC_CHECK(chunk_entries(e, x->src, x->map, k, kind, restore_entry, x));
        if ((size_t)x->filled < n) /* the padding after the last parameter */
            memset(x->dst + (size_t)x->filled * x->esz, 0, (n - (size_t)x->filled) * x->esz);
        if (fdt != x->kdt[kind])
            zc__ck_widen_bf16(x->dst, (int64_t)n);
        if (bounce)
            ZC_CHECK(d->ops->copy(d, tensors[kind], x->dst, n * zc__ck_elem_bytes(x->kdt[kind]),
                                  ZC_COPY_H2D, e->stream));
    }
    /* The working parameters of the range, from the master, as the step
     * writes them (an offloaded stage-3 shard to its home). */
    return zc__params_from_master(e, k, r0, v->master, host, n);
}

static void restore_counters(zc_engine *e, const zc_ck_manifest *m)
{
    e->steps = m->steps;
    e->skipped = m->skipped;
    e->adam_steps = m->adam_steps;
    /* A DeepSpeed run resumed from a checkpoint builds a fresh optimizer:
     * its first step derives beta^t from pow() (the step jumps), and so
     * does this engine's under optimizer.params.deepspeed_arithmetic. */
    e->adam_ds = zc__adam_ds_fresh(e->cfg->optimizer.beta1, e->cfg->optimizer.beta2);
    e->prog_steps0 = m->steps;
    if (e->pdt == ZC_DTYPE_F16) {
        e->scaler.scale = m->scaler.scale;
        e->scaler.cur_hysteresis = m->scaler.cur_hysteresis;
        e->scaler.cur_iter = m->scaler.cur_iter;
        e->scaler.last_overflow_iter = m->scaler.last_overflow_iter;
    }
}

ZC_API zc_status zc_checkpoint_load(zc_engine *e, const char *dir, const char *tag)
{
    ZC_CHECK(zc__eng_enter(e, "zc_checkpoint_load", true));
    ZC_CHECK(zc__pass_train_only(e, "zc_checkpoint_load"));
    if (!dir || !*dir)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_checkpoint_load: dir is NULL or empty");
    if (e->window_started || e->micro > 0)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "zc_checkpoint_load: gradients of the current accumulation window were "
                      "already handed back; load between optimizer steps");
    for (int i = 0; i < e->nparams; i++)
        if (e->params[i]->acquired)
            return ZC_ERR(ZC_ERR_INVALID_STATE, "zc_checkpoint_load: parameter '%s' is acquired; "
                          "release every parameter before loading", e->params[i]->name);

    zc_ck_source src;
    int *map = calloc((size_t)e->nparams, sizeof *map);
    void *bounce = NULL;
    size_t bounce_bytes = 0;
    zc_status rc = map ? zc__ck_source_open(&src, dir, tag)
                       : ZC_ERR(ZC_ERR_NO_MEMORY, "zc_checkpoint_load: parameter map");
    const bool opened = rc == ZC_OK;
    if (rc == ZC_OK)
        rc = match_model(e, &src, map);
    if (rc == ZC_OK)
        rc = match_dtypes(e, &src);
    /* Version 2 is read once, after the agreement: here only what needs no
     * payload (the plan, opening the files, the buffers). Version 1 is
     * verified whole here and read again below. */
    plan pl = {0};
    zc_ck_reader *reader = NULL;
    if (rc == ZC_OK && src.m.version >= 2) {
        rc = make_plan(e, &src, map, &pl);
        e->ck_ring_release = zc__ck_ring_release;
        if (rc == ZC_OK)
            rc = zc__ck_reader_open(&reader, &src, &e->acct, &e->ck_ring, pl.idx, pl.n);
    } else if (rc == ZC_OK) {
        rc = verify_own(e, &src, map);
    }
    if (rc == ZC_OK && e->dev->mem_kind == ZC_MEMKIND_DEVICE) {
        bounce_bytes = zc__ck_bounce_bytes(e);
        rc = zc__host_alloc(&e->acct, ZC_MEM_OTHER, bounce_bytes, "checkpoint bounce buffer",
                            &bounce);
    }
    rc = zc__eng_agree_keep(e, rc, "zc_checkpoint_load: reading and verifying the checkpoint");
    if (rc == ZC_OK) {
        if (src.m.config_digest != zc__ck_config_digest(e->cfg))
            ZC_LOGW("ckpt", "%s was saved with other optimizer, scheduler or precision settings "
                    "than this engine's; they take effect from here", src.dir);
        load_ctx x = {.src = &src, .map = map, .reader = reader, .bounce = bounce};
        zc__ck_engine_kdt(e, x.kdt);
        rc = zc__opt_visit(e, true, load_chunk, &x);
        /* The checksums of the last entries read. */
        if (rc == ZC_OK)
            rc = zc__ck_reader_finish(reader);
        /* From here the state is partly overwritten: a damaged entry or a
         * read error breaks the engine on every rank. */
        rc = zc__eng_agree(e, rc, "zc_checkpoint_load: reading the checkpoint into the "
                           "optimizer state");
    }
    if (rc == ZC_OK)
        rc = zc__params_publish(e, "zc_checkpoint_load: writing and reading the parameter "
                                "shards");
    if (rc == ZC_OK) {
        restore_counters(e, &src.m);
        ZC_LOGI("ckpt", "loaded %s (step %" PRId64 ", saved by %d ranks at stage %d)", src.dir,
                src.m.steps, src.m.world, src.m.stage);
    }
    zc__ck_reader_close(reader);
    free(pl.idx);
    if (opened)
        zc__ck_source_close(&src);
    zc__host_free(&e->acct, ZC_MEM_OTHER, bounce, bounce_bytes);
    free(map);
    return rc;
}
