/* The engine's use of the configuration: DeepSpeed's batch rules and semantic
 * checks run at create, and model-derived "auto" keys resolve at build from
 * the registered parameters (H = largest dimension of the largest 2-D one). */
#include <math.h>
#include <string.h>

#include "helpers.h"
#include "zeroc/zeroc.h"

static zc_engine *create_one(zc_config *cfg, zc_comm **comm, zc_status *rc)
{
    cr_assert_eq(zc_comm_local_world(1, comm), ZC_OK);
    zc_engine_options o = ZC_ENGINE_OPTIONS_INIT;
    o.device = ZC_DEVICE_HOST;
    zc_engine *e = NULL;
    *rc = zc_engine_create(&e, cfg, *comm, &o);
    return e;
}

Test(engine_config, batch_mismatch_fails_at_create_with_the_four_numbers)
{
    zc_config *cfg;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "train_batch_size", 10), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "train_micro_batch_size_per_gpu", 2), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "gradient_accumulation_steps", 3), ZC_OK);
    zc_comm *comm;
    zc_status rc;
    zc_engine *e = create_one(cfg, &comm, &rc);
    cr_assert_eq(rc, ZC_ERR_CONFIG, "%s", zc_last_error());
    cr_assert_null(e);
    cr_assert(strstr(zc_last_error(), "10 != 2 * 3 * 1"), "%s", zc_last_error());
    zc_comm_destroy(comm);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

Test(engine_config, accumulation_derived_from_batch_rules)
{
    /* train_batch_size 12 and micro batch 3 in a world of 1: accumulation 4.
     * Four micro-steps then make one optimizer step. */
    zc_config *cfg;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "train_batch_size", 12), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "train_micro_batch_size_per_gpu", 3), ZC_OK);
    zc_comm *comm;
    zc_status rc;
    zc_engine *e = create_one(cfg, &comm, &rc);
    cr_assert_eq(rc, ZC_OK, "%s", zc_last_error());
    int64_t shape[1] = {100};
    zc_param *p = zc_param_add(e, "w", shape, 1, 0);
    cr_assert_not_null(p);
    cr_assert_eq(zc_engine_build(e), ZC_OK, "%s", zc_last_error());
    for (int k = 0; k < 3; k++) {
        cr_assert_not_null(zc_grad_buffer(e, p));
        cr_assert_eq(zc_grad_ready(e, p), ZC_OK);
        cr_assert_eq(zc_micro_step_end(e), ZC_OK, "micro-step %d: %s", k, zc_last_error());
    }
    cr_assert_not_null(zc_grad_buffer(e, p));
    cr_assert_eq(zc_grad_ready(e, p), ZC_OK);
    zc_step_info info;
    cr_assert_eq(zc_step(e, &info), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(info.step, 1);
    zc_engine_destroy(e);
    zc_comm_destroy(comm);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

Test(engine_config, auto_bucket_resolves_from_hidden_size)
{
    /* H = 24 (the largest 2-D parameter is 24 x 16): reduce_bucket_size
     * "auto" = H^2 = 576 elements, so a 400-element and a 300-element
     * parameter cannot share a chunk, while two 200-element ones can. */
    zc_config *cfg;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set(cfg, "zero_optimization.reduce_bucket_size", "\"auto\""), ZC_OK,
                 "%s", zc_last_error());
    zc_comm *comm;
    zc_status rc;
    zc_engine *e = create_one(cfg, &comm, &rc);
    cr_assert_eq(rc, ZC_OK, "%s", zc_last_error());
    int64_t big[2] = {24, 16}, small[2] = {10, 20}, v400[1] = {400}, v300[1] = {300},
            v200[1] = {200};
    cr_assert_not_null(zc_param_add(e, "big", big, 2, 0));     /* 384 elems */
    cr_assert_not_null(zc_param_add(e, "small", small, 2, 0)); /* 200 elems */
    cr_assert_not_null(zc_param_add(e, "a", v400, 1, 0));
    cr_assert_not_null(zc_param_add(e, "b", v300, 1, 0));
    cr_assert_not_null(zc_param_add(e, "c", v200, 1, 0));
    cr_assert_not_null(zc_param_add(e, "d", v200, 1, 0));
    cr_assert_eq(zc_engine_build(e), ZC_OK, "%s", zc_last_error());
    zc_stats st = {.size = sizeof st};
    cr_assert_eq(zc_engine_stats(e, &st), ZC_OK);
    /* Packing in order with a 576-element bucket: {big} (384 + 200 > 576),
     * {small} (200 + 400 > 576), {a} (400 + 300 > 576), {b 300} (+200 = 500),
     * then {b, c} full (500 + 200 > 576), {d}: chunks {big} {small} {a} {b c} {d}.
     * With the default bucket (5e8) everything would share one chunk. */
    cr_assert_eq(st.num_chunks, 5, "chunks %lld", (long long)st.num_chunks);
    zc_engine_destroy(e);
    zc_comm_destroy(comm);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

/* ---- prescale_gradients / gradient_predivide_factor ----------------------
 * DeepSpeed moves the averaging division around (before the reduction, split
 * by the predivide factor, or after); the averaged gradient must not change.
 * A factor applied twice or never shows in the reported norm (linear in the
 * gradient) even where Adam's scale invariance would hide it. */

enum { PD_N = 1000, PD_STEPS = 3, PD_W = 2 };

typedef struct pd_run {
    zc_config *cfg;
    int stage;
    zc_comm *comms[PD_W];
    double norm[PD_STEPS];
    float master[PD_N];
    zc_status rc[PD_W];
} pd_run;

static void pd_rank(int rank, void *arg)
{
    pd_run *r = arg;
    zc_engine_options o = ZC_ENGINE_OPTIONS_INIT;
    o.device = ZC_DEVICE_HOST;
    zc_engine *e = NULL;
    zc_status rc = zc_engine_create(&e, r->cfg, r->comms[rank], &o);
    int64_t shape[1] = {PD_N};
    zc_param *p = rc == ZC_OK ? zc_param_add(e, "w", shape, 1, 0) : NULL;
    if (rc == ZC_OK && !p)
        rc = ZC_ERR_INTERNAL;
    if (rc == ZC_OK)
        rc = zc_engine_build(e);
    static float init[PD_N];
    for (int i = 0; i < PD_N; i++)
        init[i] = (float)(i % 17) * 0.01f - 0.08f;
    if (rc == ZC_OK)
        rc = zc_param_load(e, p, init);
    for (int s = 0; s < PD_STEPS && rc == ZC_OK; s++) {
        float *g = zc_grad_buffer(e, p);
        for (int i = 0; i < PD_N; i++)
            g[i] = (float)((rank + 1) * ((i * 7 + s * 3) % 23) - 11) * 0.125f;
        rc = zc_grad_ready(e, p);
        zc_step_info info;
        if (rc == ZC_OK)
            rc = zc_step(e, &info);
        if (rc == ZC_OK && rank == 0)
            r->norm[s] = info.grad_norm;
    }
    if (rc == ZC_OK)
        rc = zc_param_gather_master(e, p, rank == 0 ? r->master : (float[PD_N]){0});
    r->rc[rank] = rc;
    zc_engine_destroy(e);
}

static void pd_train(pd_run *r, int stage, bool prescale, double predivide)
{
    memset(r, 0, sizeof *r);
    cr_assert_eq(zc_config_create(&r->cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(r->cfg, "zero_optimization.stage", stage), ZC_OK);
    cr_assert_eq(zc_config_set_bool(r->cfg, "prescale_gradients", prescale), ZC_OK);
    cr_assert_eq(zc_config_set_double(r->cfg, "gradient_predivide_factor", predivide), ZC_OK,
                 "%s", zc_last_error());
    cr_assert_eq(zc_config_set_double(r->cfg, "gradient_clipping", 0.0), ZC_OK);
    cr_assert_eq(zc_comm_local_world(PD_W, r->comms), ZC_OK);
    t_run_ranks(PD_W, pd_rank, r);
    for (int k = 0; k < PD_W; k++) {
        cr_assert_eq(r->rc[k], ZC_OK, "rank %d: %s", k, zc_last_error());
        zc_comm_destroy(r->comms[k]);
    }
    zc_config_destroy(r->cfg);
}

Test(engine_config, prescale_and_predivide_keep_the_average)
{
    static pd_run base, other;
    for (int stage = 0; stage <= 3; stage += 2) {
        pd_train(&base, stage, false, 1.0);
        /* Reference norm of the first step's averaged gradient, in fp64. */
        double ss = 0;
        for (int i = 0; i < PD_N; i++) {
            double avg = 0;
            for (int rank = 0; rank < PD_W; rank++)
                avg += (double)((rank + 1) * ((i * 7) % 23) - 11) * 0.125;
            avg /= PD_W;
            ss += avg * avg;
        }
        cr_assert(fabs(base.norm[0] - sqrt(ss)) <= 1e-6 * sqrt(ss), "stage %d: norm %.9g vs %.9g",
                  stage, base.norm[0], sqrt(ss));
        const struct { bool prescale; double predivide; } cases[] = {
            {true, 1.0}, {false, 4.0}, {true, 4.0}, {true, 3.0}};
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            pd_train(&other, stage, cases[c].prescale, cases[c].predivide);
            for (int s = 0; s < PD_STEPS; s++)
                cr_assert(fabs(other.norm[s] - base.norm[s]) <= 1e-6 * base.norm[s],
                          "stage %d prescale %d predivide %g step %d: norm %.9g vs %.9g", stage,
                          cases[c].prescale, cases[c].predivide, s, other.norm[s], base.norm[s]);
            for (int i = 0; i < PD_N; i++)
                cr_assert(fabsf(other.master[i] - base.master[i]) <=
                              1e-6f * fmaxf(1.0f, fabsf(base.master[i])),
                          "stage %d case %zu elem %d: %.9g vs %.9g", stage, c, i,
                          other.master[i], base.master[i]);
        }
    }
    t_assert_no_leaks();
}
