/* Stage 3 schedule: gathers per chunk and step, the max_live_parameters
 * bound, prefetch from the trace, trace invalidation, persistence.
 *
 * The model is the harness's (six chunks, one per layer with a bucket of
 * 2048); the training loop acquires a layer's parameters together in forward
 * and again in backward (layer-wise), as a model would. Per-chunk gather
 * counts come from the engine's chunk table, read on each rank after every
 * step. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "helpers.h"
#include "t_engine.h"

#define STEPS 8

typedef struct gathers {
    int64_t per_chunk[T_MAX_WORLD][STEPS][T_NLAYERS];
    int64_t live_peak[T_MAX_WORLD][STEPS];
    bool persistent[T_NLAYERS];
} gathers;

static void record(t_ctx *x, int step, void *arg)
{
    gathers *g = arg;
    for (int k = 0; k < x->eng->nchunks && k < T_NLAYERS; k++) {
        g->per_chunk[x->rank][step][k] = x->eng->chunks[k].gathers_last;
        g->persistent[k] = x->eng->chunks[k].persistent;
    }
    g->live_peak[x->rank][step] = x->eng->live_peak_last;
}

static t_run *new_run(int stage, int world, gathers *g)
{
    t_run *r = calloc(1, sizeof *r);
    t_run_init(r, stage, world, ZC_DTYPE_BF16);
    r->steps = STEPS;
    r->layerwise = true;
    r->persistence = 0;
    r->after_step = g ? record : NULL;
    r->hook_arg = g;
    return r;
}

static void go(t_run *r)
{
    cr_assert(t_engine_run(r), "%s", t_run_error(r));
}

static void free_run(t_run *r)
{
    free(r->master);
    free(r);
}

static void assert_same_master(const t_run *a, const t_run *b, const char *what)
{
    const int64_t n = t_total_numel();
    cr_assert(memcmp(a->master, b->master, (size_t)n * sizeof(float)) == 0,
              "%s: master parameters differ from stage 0", what);
}

static int64_t padded(int l, int world)
{
    int64_t a = 64 * (int64_t)world;
    return (t_layer_numel[l] + a - 1) / a * a;
}

Test(zero3_schedule, each_chunk_gathered_twice_per_step)
{
    for (int W = 1; W <= 3; W++) {
        gathers *g = calloc(1, sizeof *g);
        t_run *r = new_run(3, W, g);
        go(r);
        for (int rank = 0; rank < W; rank++)
            for (int s = 1; s < STEPS; s++)
                for (int k = 0; k < T_NLAYERS; k++)
                    cr_assert_eq(g->per_chunk[rank][s][k], 2,
                                 "W %d rank %d step %d chunk %d gathered %lld times", W, rank, s,
                                 k, (long long)g->per_chunk[rank][s][k]);
        t_run *ref = new_run(0, W, NULL);
        go(ref);
        assert_same_master(r, ref, "stage 3");
        free_run(ref);
        free_run(r);
        free(g);
    }
    t_assert_no_leaks();
}

/* max_live_parameters below the model size: the prefetcher must stay under
 * it (and prefetch still happens: with prefetch off the peak is lower). */
Test(zero3_schedule, max_live_never_exceeded)
{
    const int W = 2;
    const int64_t max_live = padded(4, W) + padded(1, W); /* the two largest chunks */
    int64_t total = 0;
    for (int l = 0; l < T_NLAYERS; l++)
        total += padded(l, W);
    cr_assert_lt(max_live, total);
    gathers *g = calloc(1, sizeof *g);
    t_run *r = new_run(3, W, g);
    r->max_live = max_live;
    go(r);
    for (int rank = 0; rank < W; rank++)
        for (int s = 0; s < STEPS; s++) {
            cr_assert_leq(g->live_peak[rank][s], max_live, "rank %d step %d: %lld live > %lld",
                          rank, s, (long long)g->live_peak[rank][s], (long long)max_live);
            cr_assert_eq(r->stats[rank].max_live_elems_last_step, g->live_peak[rank][STEPS - 1]);
            if (s > 0)
                for (int k = 0; k < T_NLAYERS; k++)
                    cr_assert_eq(g->per_chunk[rank][s][k], 2);
        }
    /* Prefetching fills the budget: the peak exceeds what demand alone
     * needs (one layer, the largest chunk). */
    cr_assert_gt(g->live_peak[0][STEPS - 1], padded(4, W));
    t_run *ref = new_run(0, W, NULL);
    go(ref);
    assert_same_master(r, ref, "stage 3 with max_live");
    free_run(ref);
    free_run(r);
    free(g);
    t_assert_no_leaks();
}

Test(zero3_schedule, no_prefetch_keeps_one_layer_live)
{
    const int W = 2;
    gathers *g = calloc(1, sizeof *g);
    t_run *r = new_run(3, W, g);
    r->prefetch = 0;
    go(r);
    int64_t largest = 0;
    for (int l = 0; l < T_NLAYERS; l++)
        largest = padded(l, W) > largest ? padded(l, W) : largest;
    for (int s = 0; s < STEPS; s++)
        cr_assert_eq(g->live_peak[0][s], largest, "step %d: peak %lld", s,
                     (long long)g->live_peak[0][s]);
    free_run(r);
    free(g);
    t_assert_no_leaks();
}

/* A chunk larger than max_live cannot be gathered: a clear error on every
 * rank (the same decision everywhere, so no rank is left in a collective). */
Test(zero3_schedule, max_live_too_small_is_an_error)
{
    t_run *r = new_run(3, 2, NULL);
    r->max_live = 1000;
    cr_assert_not(t_engine_run(r));
    cr_assert(strstr(t_run_error(r), "max_live_parameters"), "%s", t_run_error(r));
    free_run(r);
    t_assert_no_leaks();
}

static int order_warnings;
static void count_sink(zc_log_level level, const char *subsys, int rank, const char *line,
                       void *user)
{
    (void)rank;
    (void)user;
    if (level == ZC_LOG_WARN && !strcmp(subsys, "zero3") && strstr(line, "order changed"))
        __atomic_fetch_add(&order_warnings, 1, __ATOMIC_RELAXED);
}

Test(zero3_schedule, changed_order_detected_logged_counted_and_equal)
{
    const int W = 2;
    order_warnings = 0;
    zc_log_set_sink(count_sink, NULL);
    gathers *g = calloc(1, sizeof *g);
    t_run *r = new_run(3, W, g);
    r->permute_step = 4; /* step 4 changes the forward order, step 5 restores it */
    go(r);
    zc_log_set_sink(NULL, NULL);
    for (int rank = 0; rank < W; rank++)
        cr_assert_eq(r->stats[rank].trace_invalidations, 2, "rank %d: %lld invalidations", rank,
                     (long long)r->stats[rank].trace_invalidations);
    cr_assert_eq(r->step_stats[3].trace_invalidations, 0);
    cr_assert_eq(r->step_stats[4].trace_invalidations, 1);
    cr_assert_eq(r->step_stats[5].trace_invalidations, 2);
    cr_assert_eq(r->step_stats[7].trace_invalidations, 2);
    cr_assert_geq(order_warnings, 2, "the changes were not logged (%d warnings)", order_warnings);
    /* Every chunk is still used twice a step, whatever the order. */
    for (int s = 1; s < STEPS; s++)
        for (int k = 0; k < T_NLAYERS; k++)
            cr_assert_eq(g->per_chunk[0][s][k], 2, "step %d chunk %d", s, k);
    t_run *ref = new_run(0, W, NULL);
    ref->permute_step = 4;
    go(ref);
    assert_same_master(r, ref, "stage 3 with a changed order");
    free_run(ref);
    free_run(r);
    free(g);
    t_assert_no_leaks();
}

/* param_persistence_threshold: chunks whose parameters are all small stay
 * gathered; they are refreshed once per step (after the update) instead of
 * gathered twice, and results do not change. */
Test(zero3_schedule, persistent_chunks_stay_gathered)
{
    const int W = 2;
    gathers *g = calloc(1, sizeof *g);
    t_run *r = new_run(3, W, g);
    r->persistence = 200; /* layers 2 (64), 3 (129) and 5 (1) */
    go(r);
    const bool want[T_NLAYERS] = {false, false, true, true, false, true};
    for (int k = 0; k < T_NLAYERS; k++) {
        cr_assert_eq(g->persistent[k], want[k], "chunk %d persistent", k);
        for (int s = 1; s < STEPS; s++)
            cr_assert_eq(g->per_chunk[0][s][k], want[k] ? 1 : 2, "step %d chunk %d: %lld", s, k,
                         (long long)g->per_chunk[0][s][k]);
    }
    t_run *ref = new_run(0, W, NULL);
    go(ref);
    assert_same_master(r, ref, "stage 3 with persistence");
    free_run(ref);
    free_run(r);
    free(g);
    t_assert_no_leaks();
}
