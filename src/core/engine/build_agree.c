/* Agreement at zc_engine_build: every rank must run the same model the same
 * way.
 *
 * Ranks that registered different parameters (a shape, a group, the order, a
 * chunk boundary) or resolved a different stage, precision, bucket or
 * optimizer setting would issue collectives of different sizes or apply
 * different updates: a hang or silently wrong parameters in the first step
 * (DeepSpeed users get the hang). So build compares, across ranks, a digest
 * of an ordered list of items - each a short text naming one setting or one
 * parameter - and on a mismatch every rank fails with ZC_ERR_CONFIG and the
 * same message: the first item that differs, what rank 0 has, what the first
 * differing rank has, and which ranks differ from rank 0.
 *
 * Cost: one all-gather of 16 bytes per rank when the ranks agree. Only on a
 * mismatch, a binary search for the first differing item (all-gathers of
 * prefix digests, log2(items) of them; every rank sees the same records, so
 * every rank takes the same path) and one all-gather of the item texts. The
 * digest is 64-bit FNV-1a over the texts: a collision lets a mismatch through
 * with probability 2^-64, which is not an adversarial setting. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/engine.h"

/* Bytes of one item's text as exchanged (longer texts are cut; the digest
 * still covers the whole text). A multiple of 8: exchanged as fp64 words,
 * which every backend's all-gather moves bit for bit. */
#define ITEM_BYTES 256

/* Items before the groups and parameters (settings), and after them. */
enum { N_HEAD = 11, N_TAIL = 1 };

static int64_t n_items(const zc_engine *e)
{
    return N_HEAD + (int64_t)e->ngroups + (int64_t)e->nparams + N_TAIL;
}

/* Writes item i's text (always NUL-terminated, truncated to cap). */
static void item_text(const zc_engine *e, int64_t i, char *b, size_t cap)
{
    const zc_config *c = e->cfg;
    if (i < N_HEAD) {
        switch (i) {
        case 0: snprintf(b, cap, "zero_optimization.stage %d", e->stage); return;
        case 1:
            /* The view slots are taken per call like the gradient pool's: a
             * rank with fewer would run out where the others do not. */
            snprintf(b, cap, "parameter dtype %s, f32_view_chunks %d", zc_dtype_name(e->pdt),
                     e->f32_view_chunks);
            return;
        case 2: snprintf(b, cap, "chunk size (reduce_bucket_size) %" PRId64 " elements", e->bucket);
            return;
        case 3: snprintf(b, cap, "gradient_accumulation_steps %" PRId64, e->gas); return;
        case 4:
            snprintf(b, cap, "gradient_clipping %.17g, prescale_gradients %d, "
                     "gradient_predivide_factor %.17g, communication_data_type %d",
                     c->gradient_clipping, (int)c->prescale_gradients,
                     c->gradient_predivide_factor, c->communication_data_type);
            return;
        case 5:
            snprintf(b, cap, "fp16 enabled %d loss_scale %.17g initial_scale_power %" PRId64
                     " loss_scale_window %" PRId64 " hysteresis %" PRId64
                     " consecutive_hysteresis %d min_loss_scale %.17g; bf16 enabled %d "
                     "check_grad_overflow %d",
                     (int)c->fp16.enabled, c->fp16.loss_scale, c->fp16.initial_scale_power,
                     c->fp16.loss_scale_window, c->fp16.hysteresis,
                     (int)c->fp16.consecutive_hysteresis, c->fp16.min_loss_scale,
                     (int)c->bf16.enabled, (int)c->bf16.check_grad_overflow);
            return;
        case 6:
            snprintf(b, cap, "optimizer %s lr %.17g betas (%.17g, %.17g) eps %.17g "
                     "weight_decay %.17g adam_w_mode %d bias_correction %d "
                     "deepspeed_arithmetic %d",
                     c->optimizer.adamw_type ? "AdamW" : "Adam", c->optimizer.lr,
                     c->optimizer.beta1, c->optimizer.beta2, c->optimizer.eps,
                     c->optimizer.weight_decay, (int)c->optimizer.adam_w_mode,
                     (int)c->optimizer.bias_correction, (int)c->optimizer.deepspeed_arithmetic);
            return;
        case 7:
            snprintf(b, cap, "zero overlap_comm %d stage3_prefetch_bucket_size %" PRId64
                     " stage3_param_persistence_threshold %" PRId64
                     " stage3_max_live_parameters %" PRId64 " stage3_max_reuse_distance %" PRId64,
                     c->zero.overlap_comm, c->zero.prefetch_bucket_size,
                     c->zero.param_persistence_threshold, c->zero.max_live_parameters,
                     c->zero.max_reuse_distance);
            return;
        case 8:
            snprintf(b, cap, "offload_optimizer.device %d, offload_param.device %d",
                     (int)c->zero.offload_optimizer.device, (int)c->zero.offload_param.device);
            return;
        case 9:
            /* A restore agrees across ranks when the checkpoints are on NVMe
             * (a collective): every rank must keep them alike. */
            snprintf(b, cap, "activation store: %" PRId64 " checkpoints of %" PRId64
                     " bytes, home %d, %d parts, %" PRId64 " buffers",
                     e->act_spec.slots, e->act_spec.bytes, e->act_spec.home,
                     e->act_spec.parts, e->act_spec.buffer_count);
            return;
        default: {
            /* The budgets decide the placement and, with them, whether the
             * build's budget agreement runs (a collective): they must
             * match. An "auto" budget is agreed later (its smallest). */
            int64_t v[ZC_BUDGET__COUNT] = {0};
            int st[ZC_BUDGET__COUNT];
            for (int k = 0; k < ZC_BUDGET__COUNT; k++)
                st[k] = (int)zc__config_budget(c, (zc_budget_kind)k, &v[k]);
            snprintf(b, cap, "zero_optimization.max_memory given %d: device %d/%" PRId64
                     " cpu %d/%" PRId64 " nvme %d/%" PRId64 "; placement free: optimizer %d "
                     "parameters %d; stage auto %d",
                     (int)zc__config_has_budgets(c), st[0], v[0], st[1], v[1], st[2], v[2],
                     (int)zc__config_place_free(c, false), (int)zc__config_place_free(c, true),
                     (int)e->stage_auto);
            return;
        }
        }
    }
    i -= N_HEAD;
    if (i < e->ngroups) {
        snprintf(b, cap, "group %d: weight_decay %.17g lr_scale %.17g", (int)i,
                 e->groups[i].weight_decay, e->groups[i].lr_scale);
        return;
    }
    i -= e->ngroups;
    if (i < e->nparams) {
        const zc_param *p = e->params[i];
        char shape[128] = "";
        size_t at = 0;
        for (int d = 0; d < p->ndim && at < sizeof shape; d++)
            at += (size_t)snprintf(shape + at, sizeof shape - at, "%s%" PRId64, d ? ", " : "",
                                   p->shape[d]);
        snprintf(b, cap, "parameter %d '%s' shape [%s] group %d%s", (int)i, p->name, shape,
                 p->group, p->chunk_start ? ", starts a chunk" : "");
        return;
    }
    snprintf(b, cap, "layout: %d chunks, %" PRId64 " elements, %" PRId64 " padded", e->nchunks,
             e->num_elems, e->padded_elems);
}

/* FNV-1a, 64-bit, over the full texts (longer than ITEM_BYTES included). */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* Digest of the first min(m, count) items and of that number, so a rank
 * with fewer items stops changing once its list ends. */
static uint64_t prefix_digest(const zc_engine *e, int64_t m)
{
    int64_t n = n_items(e);
    if (m > n)
        m = n;
    uint64_t h = 0xcbf29ce484222325ull;
    char t[1024];
    for (int64_t i = 0; i < m; i++) {
        item_text(e, i, t, sizeof t);
        h = fnv(h, t, strlen(t) + 1);
    }
    return fnv(h, &m, sizeof m);
}

typedef struct gbuf {
    void *send, *recv; /* on the engine's device */
    unsigned char *host; /* world * ITEM_BYTES */
} gbuf;

/* All-gathers `bytes` (<= ITEM_BYTES, a multiple of 8) from every rank into
 * g->host (rank r's at r * ITEM_BYTES). */
static zc_status gather(zc_engine *e, gbuf *g, const void *mine, size_t bytes)
{
    zc_device *d = e->dev;
    ZC_CHECK(d->ops->copy(d, g->send, mine, bytes, ZC_COPY_H2D, e->stream));
    ZC_CHECK(zc__eng_all_gather(e, g->send, g->recv, bytes / 8, ZC_DTYPE_F64, false));
    ZC_CHECK(d->ops->copy(d, g->host, g->recv, bytes * (size_t)e->world, ZC_COPY_D2H, e->stream));
    return d->ops->stream_sync(d, e->stream);
}

/* 1 when every rank's `bytes` at g->host equal rank 0's. */
static int all_equal(const zc_engine *e, const gbuf *g, size_t bytes)
{
    for (int r = 1; r < e->world; r++)
        if (memcmp(g->host + (size_t)r * bytes, g->host, bytes))
            return 0;
    return 1;
}

static zc_status compare(zc_engine *e, gbuf *g)
{
    const int W = e->world;
    uint64_t mine[2] = {(uint64_t)n_items(e), prefix_digest(e, n_items(e))};
    ZC_CHECK(gather(e, g, mine, sizeof mine));
    if (all_equal(e, g, sizeof mine))
        return ZC_OK;
    /* Smallest m whose prefix digests differ: prefix(0) agrees, the whole
     * lists (prefix(max count)) do not. Every rank holds the same records,
     * so every rank runs the same search. */
    int64_t lo = 0, hi = 0;
    for (int r = 0; r < W; r++) {
        uint64_t n;
        memcpy(&n, g->host + (size_t)r * sizeof mine, sizeof n);
        if ((int64_t)n > hi)
            hi = (int64_t)n;
    }
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        uint64_t h = prefix_digest(e, mid);
        ZC_CHECK(gather(e, g, &h, sizeof h));
        if (all_equal(e, g, sizeof h))
            lo = mid;
        else
            hi = mid;
    }
    int64_t idx = hi - 1;
    char t[ITEM_BYTES];
    memset(t, 0, sizeof t);
    if (idx < n_items(e))
        item_text(e, idx, t, sizeof t);
    else
        snprintf(t, sizeof t, "nothing (its list ends after %d parameters)", e->nparams);
    ZC_CHECK(gather(e, g, t, sizeof t));
    const char *t0 = (const char *)g->host;
    int first = -1;
    char others[96] = "";
    size_t at = 0;
    int listed = 0;
    for (int r = 1; r < W; r++) {
        const char *tr = (const char *)g->host + (size_t)r * ITEM_BYTES;
        if (!strncmp(tr, t0, ITEM_BYTES))
            continue;
        if (first < 0)
            first = r;
        if (listed < 8 && at < sizeof others)
            at += (size_t)snprintf(others + at, sizeof others - at, "%s%d", listed ? ", " : "", r);
        else if (listed == 8 && at < sizeof others)
            at += (size_t)snprintf(others + at, sizeof others - at, ", ...");
        listed++;
    }
    if (first < 0) /* the texts were cut or the digests collided */
        return ZC_ERR(ZC_ERR_CONFIG,
                      "zc_engine_build: the ranks' models or settings differ at item %" PRId64
                      " ('%.*s' on rank 0), beyond what the message can show; every rank must "
                      "register the same parameters with the same configuration",
                      idx, ITEM_BYTES, t0);
    return ZC_ERR(ZC_ERR_CONFIG,
                  "zc_engine_build: the ranks disagree: rank 0 has %.*s but rank %d has %.*s "
                  "(ranks that differ from rank 0: %s; %d of %d). Every rank must register the "
                  "same parameters (names, shapes, groups, order, chunk boundaries) with the "
                  "same configuration",
                  ITEM_BYTES, t0, first, ITEM_BYTES,
                  (const char *)g->host + (size_t)first * ITEM_BYTES, others, listed, W);
}

zc_status zc__build_agree(zc_engine *e)
{
    gbuf g = {0};
    const size_t all = (size_t)ITEM_BYTES * (size_t)e->world;
    zc_status rc = zc__eng_alloc(e, ZC_MEM_OTHER, ITEM_BYTES, "build agreement (send)", &g.send);
    if (rc == ZC_OK)
        rc = zc__eng_alloc(e, ZC_MEM_OTHER, all, "build agreement (recv)", &g.recv);
    if (rc == ZC_OK)
        rc = zc__host_alloc(&e->acct, ZC_MEM_OTHER, all, "build agreement", (void **)&g.host);
    if (rc == ZC_OK)
        rc = compare(e, &g);
    zc__host_free(&e->acct, ZC_MEM_OTHER, g.host, all);
    zc__eng_free(e, ZC_MEM_OTHER, &g.recv, all);
    zc__eng_free(e, ZC_MEM_OTHER, &g.send, ITEM_BYTES);
    return rc;
}
