/* Stage 3 acquire / release bookkeeping on one rank, through the public API:
 * nested acquires of one parameter, two parameters of one chunk, accumulation
 * over several micro-steps, and a demand gather refused by
 * stage3_max_live_parameters, which must not evict what was prefetched.
 *
 * Three chunks of 1024 (A), 1024 (B) and 3136 (C) elements (multiples of 64,
 * so no padding with one rank); A holds two parameters. */
#include <criterion/criterion.h>
#include <string.h>

#include "core/engine.h"
#include "helpers.h"

typedef struct model {
    zc_comm *comm;
    zc_config *cfg;
    zc_engine *e;
    zc_param *a0, *a1, *b, *c;
} model;

static void open_model(model *m, int stage, int accum, int64_t max_live, int64_t prefetch)
{
    memset(m, 0, sizeof *m);
    cr_assert_eq(zc_comm_local_world(1, &m->comm), ZC_OK);
    cr_assert_eq(zc_config_create(&m->cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(m->cfg, "zero_optimization.stage", stage), ZC_OK);
    cr_assert_eq(zc_config_set_int(m->cfg, "gradient_accumulation_steps", accum), ZC_OK);
    cr_assert_eq(zc_config_set_int(m->cfg, "zero_optimization.stage3_param_persistence_threshold",
                                   0), ZC_OK);
    cr_assert_eq(zc_config_set_int(m->cfg, "zero_optimization.stage3_max_live_parameters",
                                   max_live), ZC_OK);
    cr_assert_eq(zc_config_set_int(m->cfg, "zero_optimization.stage3_prefetch_bucket_size",
                                   prefetch), ZC_OK);
    /* Released chunks are freed (reuse distance 0): the gather counts below
     * are those of one gather per use window. */
    cr_assert_eq(zc_config_set_int(m->cfg, "zero_optimization.stage3_max_reuse_distance", 0),
                 ZC_OK);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = 1 << 20;
    eo.param_dtype = ZC_DTYPE_F32;
    cr_assert_eq(zc_engine_create(&m->e, m->cfg, m->comm, &eo), ZC_OK, "%s", zc_last_error());
    const int64_t s_a0[1] = {1000}, s_a1[1] = {24}, s_b[1] = {1024}, s_c[1] = {3136};
    m->a0 = zc_param_add(m->e, "a0", s_a0, 1, 0);
    m->a1 = zc_param_add(m->e, "a1", s_a1, 1, 0);
    cr_assert_eq(zc_chunk_boundary(m->e), ZC_OK);
    m->b = zc_param_add(m->e, "b", s_b, 1, 0);
    cr_assert_eq(zc_chunk_boundary(m->e), ZC_OK);
    m->c = zc_param_add(m->e, "c", s_c, 1, 0);
    cr_assert(m->a0 && m->a1 && m->b && m->c, "%s", zc_last_error());
    cr_assert_eq(zc_engine_build(m->e), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(m->e->nchunks, 3);
}

static void close_model(model *m)
{
    zc_engine_destroy(m->e);
    zc_config_destroy(m->cfg);
    zc_comm_destroy(m->comm);
    t_assert_no_leaks();
}

static void *acq(model *m, zc_param *p)
{
    void *ptr = zc_param_acquire(m->e, p, NULL);
    cr_assert_not_null(ptr, "acquire '%s': %s", p->name, zc_last_error());
    return ptr;
}

static void rel(model *m, zc_param *p)
{
    cr_assert_eq(zc_param_release(m->e, p, NULL), ZC_OK, "release '%s': %s", p->name,
                 zc_last_error());
}

static void all_grads_ready(model *m)
{
    zc_param *ps[4] = {m->c, m->b, m->a1, m->a0};
    for (int i = 0; i < 4; i++) {
        float *g = zc_grad_buffer(m->e, ps[i]);
        cr_assert_not_null(g, "%s", zc_last_error());
        for (int64_t j = 0; j < ps[i]->numel; j++)
            g[j] = 0.001f * (float)(j % 7);
        cr_assert_eq(zc_grad_ready(m->e, ps[i]), ZC_OK, "%s", zc_last_error());
    }
}

static int64_t gathers_last(model *m)
{
    zc_stats s = {.size = sizeof s};
    cr_assert_eq(zc_engine_stats(m->e, &s), ZC_OK);
    return s.gathers_last_step;
}

/* The forward pass of the scenario below: A, then B, then C. */
static void forward_abc(model *m)
{
    acq(m, m->a0);
    rel(m, m->a0);
    acq(m, m->b);
    rel(m, m->b);
    acq(m, m->c);
    rel(m, m->c);
}

/* With A acquired and B prefetched (live 2048 of 4096), C (3136) does not fit
 * even after evicting B: the acquire is refused and B stays prefetched, so
 * its use right after needs no gather. */
Test(zero3_acquire, refused_gather_keeps_prefetched_chunks)
{
    model m;
    open_model(&m, 3, 1, 4096, 1024);
    /* Step 1 records the trace A, B, C: one gather each. */
    forward_abc(&m);
    all_grads_ready(&m);
    cr_assert_eq(zc_step(m.e, NULL), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(gathers_last(&m), 3);

    /* Step 2: acquiring A prefetches B (the 1024-element prefetch budget). */
    acq(&m, m.a0);
    cr_assert_not_null(m.e->chunks[1].gather, "B was not prefetched");
    cr_assert_eq(m.e->live_elems, 2048);
    cr_assert_null(zc_param_acquire(m.e, m.c, NULL), "C must not fit next to A");
    cr_assert(strstr(zc_last_error(), "stage3_max_live_parameters"), "%s", zc_last_error());
    cr_assert_not_null(m.e->chunks[1].gather, "the refused acquire evicted the prefetched B");
    cr_assert_eq(m.e->live_elems, 2048);
    rel(&m, m.a0);
    acq(&m, m.b);
    rel(&m, m.b);
    acq(&m, m.c);
    rel(&m, m.c);
    all_grads_ready(&m);
    cr_assert_eq(zc_step(m.e, NULL), ZC_OK, "%s", zc_last_error());
    /* A on demand, B by prefetch, C on demand: the same three as step 1. */
    cr_assert_eq(gathers_last(&m), 3);
    zc_stats s = {.size = sizeof s};
    cr_assert_eq(zc_engine_stats(m.e, &s), ZC_OK);
    cr_assert_eq(s.trace_invalidations, 0);
    close_model(&m);
}

/* Nested acquires of one parameter and acquires of two parameters of one
 * chunk over an accumulation window of three micro-steps: the chunk is
 * gathered once per use window and freed only by the last release; results
 * equal stage 0's. */
static void run_nested(int stage, float out[4][3136], int64_t *gathers)
{
    model m;
    open_model(&m, stage, 3, 1 << 20, 0);
    zc_param *ps[4] = {m.a0, m.a1, m.b, m.c};
    for (int i = 0; i < 4; i++) {
        float v[3136];
        for (int64_t j = 0; j < ps[i]->numel; j++)
            v[j] = 0.01f * (float)((j * 3 + i) % 11) - 0.05f;
        cr_assert_eq(zc_param_load(m.e, ps[i], v), ZC_OK, "%s", zc_last_error());
    }
    for (int step = 0; step < 3; step++) {
        for (int micro = 0; micro < 3; micro++) {
            float *x = acq(&m, m.a0);
            float *y = acq(&m, m.a0);
            cr_assert_eq(x, y, "nested acquires return different pointers");
            float *z = acq(&m, m.a1);
            cr_assert_eq(z, x + 1000, "a1 is not next to a0 in the chunk");
            rel(&m, m.a0);
            if (stage == 3)
                cr_assert_not_null(m.e->chunks[0].gather, "freed while still acquired");
            rel(&m, m.a1);
            if (stage == 3)
                cr_assert_not_null(m.e->chunks[0].gather, "freed while still acquired");
            rel(&m, m.a0);
            if (stage == 3)
                cr_assert_null(m.e->chunks[0].gather, "not freed by the last release");
            cr_assert_eq(zc_param_release(m.e, m.a0, NULL), ZC_ERR_INVALID_STATE);
            acq(&m, m.b);
            acq(&m, m.c);
            rel(&m, m.c);
            rel(&m, m.b);
            all_grads_ready(&m);
            if (micro < 2)
                cr_assert_eq(zc_micro_step_end(m.e), ZC_OK, "%s", zc_last_error());
        }
        cr_assert_eq(zc_step(m.e, NULL), ZC_OK, "%s", zc_last_error());
        *gathers = gathers_last(&m);
        if (stage == 3)
            cr_assert_eq(m.e->live_elems, 0);
    }
    for (int i = 0; i < 4; i++)
        cr_assert_eq(zc_param_gather_master(m.e, ps[i], out[i]), ZC_OK, "%s", zc_last_error());
    close_model(&m);
}

Test(zero3_acquire, nested_and_shared_chunk_with_accumulation)
{
    static float ref[4][3136], got[4][3136];
    int64_t g0 = 0, g3 = 0;
    run_nested(0, ref, &g0);
    run_nested(3, got, &g3);
    cr_assert_eq(g0, 0);
    /* Each of the three chunks is gathered once per micro-step. */
    cr_assert_eq(g3, 3 * 3);
    cr_assert(memcmp(ref, got, sizeof ref) == 0, "stage 3 differs from stage 0");
}
