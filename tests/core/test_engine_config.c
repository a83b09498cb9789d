/* The engine's use of the configuration: DeepSpeed's batch rules and semantic
 * checks run at create, and model-derived "auto" keys resolve at build from
 * the registered parameters (H = largest dimension of the largest 2-D one). */
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
