/* Introspection of registered parameters and the status form of acquire,
 * through the public header only: every answer is checked against what the
 * test registered, and bad handles get the documented sentinels. */
#include <stdint.h>
#include <string.h>

#include <criterion/criterion.h>

#include "helpers.h"
#include "zeroc/zeroc.h"

static zc_engine *make_engine(zc_comm **comm, zc_config **cfg, int stage)
{
    cr_assert_eq(zc_comm_local_world(1, comm), ZC_OK);
    cr_assert_eq(zc_config_create(cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(*cfg, "zero_optimization.stage", stage), ZC_OK);
    zc_engine_options o = ZC_ENGINE_OPTIONS_INIT;
    o.device = ZC_DEVICE_HOST;
    o.param_dtype = ZC_DTYPE_BF16;
    zc_engine *e = NULL;
    cr_assert_eq(zc_engine_create(&e, *cfg, *comm, &o), ZC_OK, "%s", zc_last_error());
    return e;
}

Test(introspect, getters_answer_what_was_registered)
{
    zc_comm *comm;
    zc_config *cfg;
    zc_engine *e = make_engine(&comm, &cfg, 2);
    int g = -1;
    cr_assert_eq(zc_group_add(e, 0.0, 1.0, &g), ZC_OK);
    const int64_t s0[2] = {3, 5}, s1[3] = {2, 3, 7}, s2[1] = {11};
    zc_param *p0 = zc_param_add(e, "w0", s0, 2, 0);
    zc_param *p1 = zc_param_add(e, "layer.w1", s1, 3, g);
    cr_assert_eq(zc_param_count(e), 2);
    zc_param *p2 = zc_param_add(e, "b", s2, 1, 0);
    cr_assert(p0 && p1 && p2, "%s", zc_last_error());
    cr_assert_eq(zc_engine_build(e), ZC_OK, "%s", zc_last_error());

    cr_assert_eq(zc_param_count(e), 3);
    cr_assert_eq(zc_param_at(e, 0), p0);
    cr_assert_eq(zc_param_at(e, 1), p1);
    cr_assert_eq(zc_param_at(e, 2), p2);
    cr_assert_null(zc_param_at(e, 3));
    cr_assert_null(zc_param_at(e, -1));
    cr_assert_eq(zc_param_find(e, "layer.w1"), p1);
    cr_assert_eq(zc_param_find(e, "b"), p2);
    cr_assert_null(zc_param_find(e, "layer"));
    cr_assert_null(zc_param_find(e, NULL));

    cr_assert_str_eq(zc_param_name(p1), "layer.w1");
    cr_assert_eq(zc_param_numel(p0), 15);
    cr_assert_eq(zc_param_numel(p1), 42);
    cr_assert_eq(zc_param_group(p1), g);
    cr_assert_eq(zc_param_group(p2), 0);
    cr_assert_eq(zc_param_dtype(p0), ZC_DTYPE_BF16);
    int64_t shape[4] = {-7, -7, -7, -7};
    cr_assert_eq(zc_param_shape(p1, shape, 4), 3);
    cr_assert(shape[0] == 2 && shape[1] == 3 && shape[2] == 7 && shape[3] == -7);
    int64_t one[1] = {-7};
    cr_assert_eq(zc_param_shape(p1, one, 1), 3); /* ndim, with only cap copied */
    cr_assert_eq(one[0], 2);
    cr_assert_eq(zc_param_shape(p1, NULL, 0), 3);
    cr_assert_eq(zc_param_shape(p1, NULL, 2), -1);

    zc_engine_destroy(e);
    zc_config_destroy(cfg);
    zc_comm_destroy(comm);
    t_assert_no_leaks();
}

Test(introspect, bad_handles_get_sentinels)
{
    cr_assert_null(zc_param_name(NULL));
    cr_assert_eq(zc_param_numel(NULL), -1);
    cr_assert_eq(zc_param_shape(NULL, NULL, 0), -1);
    cr_assert_eq(zc_param_group(NULL), -1);
    cr_assert_eq(zc_param_dtype(NULL), ZC_DTYPE_INVALID);
    cr_assert_eq(zc_param_count(NULL), -1);
    cr_assert_null(zc_param_at(NULL, 0));
    cr_assert_null(zc_param_find(NULL, "w"));
    /* Memory that is not a handle (the magic does not match). */
    uint64_t junk[64];
    memset(junk, 0, sizeof junk);
    cr_assert_null(zc_param_name((const zc_param *)junk));
    cr_assert_eq(zc_param_count((const zc_engine *)junk), -1);
}

Test(introspect, acquire_status_matches_acquire_and_reports_failures)
{
    for (int stage = 0; stage <= 3; stage++) {
        zc_comm *comm;
        zc_config *cfg;
        zc_engine *e = make_engine(&comm, &cfg, stage);
        const int64_t s[1] = {100};
        zc_param *p = zc_param_add(e, "w", s, 1, 0);
        cr_assert_not_null(p);
        void *out = (void *)&out;
        /* Before build: an error status and a NULL pointer, like acquire. */
        cr_assert_eq(zc_param_acquire_status(e, p, NULL, &out), ZC_ERR_INVALID_STATE);
        cr_assert_null(out);
        cr_assert_eq(zc_engine_build(e), ZC_OK, "%s", zc_last_error());
        cr_assert_eq(zc_param_acquire_status(e, p, NULL, NULL), ZC_ERR_INVALID_ARG);
        cr_assert_eq(zc_param_acquire_status(e, p, NULL, &out), ZC_OK, "%s", zc_last_error());
        void *again = zc_param_acquire(e, p, NULL);
        cr_assert_not_null(out);
        cr_assert_eq(again, out, "stage %d: the two forms see one buffer", stage);
        cr_assert_eq(zc_param_release(e, p, NULL), ZC_OK);
        cr_assert_eq(zc_param_release(e, p, NULL), ZC_OK);
        out = (void *)&out;
        cr_assert_neq(zc_param_acquire_status(e, (zc_param *)s, NULL, &out), ZC_OK);
        cr_assert_null(out);
        zc_engine_destroy(e);
        zc_config_destroy(cfg);
        zc_comm_destroy(comm);
    }
    t_assert_no_leaks();
}
