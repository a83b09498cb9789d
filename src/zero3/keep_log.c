/* Stage 3's one INFO line at build: what it will actually keep gathered,
 * and which setting decides it.
 *
 * DeepSpeed's defaults surprise on a small model: with
 * stage3_param_persistence_threshold 1e5 every chunk of small tensors is
 * persistent (gathered once, kept on every rank like stage 2), and a
 * prefetch bucket of 5e7 elements gathers the whole model ahead of use.
 * zeroc keeps those defaults and says what they do instead. */
#include <inttypes.h>
#include <stdio.h>

#include "zero3/zero3.h"

/* What a sentence about the prefetch window says. */
static void prefetch_text(const zc_engine *e, int64_t sharded, char *b, size_t cap)
{
    const int64_t pf = e->cfg->zero.prefetch_bucket_size;
    if (sharded == 0)
        snprintf(b, cap, "prefetch: nothing to prefetch, every chunk is persistent");
    else if (pf <= 0)
        snprintf(b, cap, "prefetch: off (stage3_prefetch_bucket_size %" PRId64 "), each of the "
                 "%" PRId64 " sharded elements is gathered when acquired", pf, sharded);
    else if (pf >= sharded)
        snprintf(b, cap, "prefetch: stage3_prefetch_bucket_size %" PRId64 " covers all %" PRId64
                 " sharded elements, so from the second step the whole model is gathered ahead "
                 "of use (lower it to gather less at once)", pf, sharded);
    else
        snprintf(b, cap, "prefetch: up to stage3_prefetch_bucket_size %" PRId64 " of the %"
                 PRId64 " sharded elements are gathered ahead of use, from the second step",
                 pf, sharded);
}

void zc__z3_log_plan(const zc_engine *e)
{
    if (!zc__log_enabled(ZC_LOG_INFO))
        return;
    const zc_config *cfg = e->cfg;
    int npers = 0, capped = 0;
    int64_t pers = 0, sharded = 0;
    for (int k = 0; k < e->nchunks; k++) {
        const zc_chunk *c = &e->chunks[k];
        const int64_t big = zc__z3_largest_param(e, c);
        if (c->persistent) {
            npers++;
            pers += c->padded;
        } else {
            sharded += c->padded;
            /* Small enough, but the model-wide budget was spent. */
            capped += cfg->zero.param_persistence_threshold > 0 &&
                      big <= cfg->zero.param_persistence_threshold;
        }
    }
    char why[256], cap_text[160] = "", pf[320], live[200];
    snprintf(why, sizeof why,
             "%d of %d chunks persistent (%" PRId64 " of %" PRId64 " elements, gathered once and "
             "kept on every rank): each holds only parameters of <= "
             "stage3_param_persistence_threshold %" PRId64 " elements",
             npers, e->nchunks, pers, pers + sharded, cfg->zero.param_persistence_threshold);
    if (capped)
        snprintf(cap_text, sizeof cap_text,
                 " (%d more would be, but stage3_model_persistence_threshold %" PRId64
                 " is reached)",
                 capped, cfg->zero.model_persistence_threshold);
    prefetch_text(e, sharded, pf, sizeof pf);
    if (e->max_live >= pers + sharded)
        snprintf(live, sizeof live, "stage3_max_live_parameters %" PRId64 " does not bind (the "
                 "model is %" PRId64 " padded elements)",
                 cfg->zero.max_live_parameters, pers + sharded);
    else
        snprintf(live, sizeof live, "stage3_max_live_parameters %" PRId64 " bounds what is "
                 "gathered at once to that many of the %" PRId64 " padded elements",
                 cfg->zero.max_live_parameters, pers + sharded);
    ZC_LOGI("zero3", "stage 3 keeps gathered: %s%s%s; %s; %s", why, cap_text,
            npers == e->nchunks ? ", so the whole model stays gathered as in stage 2 (lower the "
                                  "threshold to shard it)"
                                : "",
            pf, live);
}
