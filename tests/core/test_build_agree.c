/* zc_engine_build's agreement check: ranks (threads on the local
 * communicator) that register different models or resolve different
 * settings all fail with ZC_ERR_CONFIG and the same message, naming the
 * first difference, what rank 0 and the first differing rank have, and the
 * ranks that differ; ranks that agree build. */
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "base/alloc.h"
#include "helpers.h"
#include "zeroc/zeroc.h"

#define W 4

typedef struct ba_run {
    zc_comm *comms[W];
    zc_config *cfg[W];
    /* per-rank deviations */
    int64_t shape1[W];   /* shape of parameter 1 ("b"), second dimension */
    int extra[W];        /* registers a fourth parameter */
    int group2[W];       /* group of parameter 2 */
    int rename[W];       /* names parameter 0 "z" instead of "a" (same length) */
    const char *budget[W]; /* zero_optimization.max_memory.device (NULL: none) */
    zc_status rc[W];
    char msg[W][1024];
} ba_run;

static void ba_rank(int rank, void *arg)
{
    ba_run *r = arg;
    zc_engine_options o = ZC_ENGINE_OPTIONS_INIT;
    o.device = ZC_DEVICE_HOST;
    zc_engine *e = NULL;
    zc_status rc = zc_engine_create(&e, r->cfg[rank], r->comms[rank], &o);
    int g1 = -1;
    if (rc == ZC_OK)
        rc = zc_group_add(e, 0.0, 1.0, &g1);
    int64_t s0[1] = {100}, s1[2] = {4, r->shape1[rank]}, s2[1] = {33}, s3[1] = {5};
    if (rc == ZC_OK && (!zc_param_add(e, r->rename[rank] ? "z" : "a", s0, 1, 0) || !zc_param_add(e, "b", s1, 2, 0) ||
                        !zc_param_add(e, "c", s2, 1, r->group2[rank] ? g1 : 0) ||
                        (r->extra[rank] && !zc_param_add(e, "d", s3, 1, 0))))
        rc = ZC_ERR_INTERNAL;
    if (rc == ZC_OK)
        rc = zc_engine_build(e);
    r->rc[rank] = rc;
    snprintf(r->msg[rank], sizeof r->msg[rank], "%s", rc == ZC_OK ? "" : zc_last_error());
    zc_engine_destroy(e);
}

static void ba_go(ba_run *r, int stage_of_rank3)
{
    cr_assert_eq(zc_comm_local_world(W, r->comms), ZC_OK);
    for (int k = 0; k < W; k++) {
        cr_assert_eq(zc_config_create(&r->cfg[k]), ZC_OK);
        int stage = k == 3 && stage_of_rank3 >= 0 ? stage_of_rank3 : 2;
        cr_assert_eq(zc_config_set_int(r->cfg[k], "zero_optimization.stage", stage), ZC_OK);
        if (r->budget[k])
            cr_assert_eq(zc_config_set(r->cfg[k], "zero_optimization.max_memory.device",
                                       r->budget[k]), ZC_OK);
        if (!r->shape1[k])
            r->shape1[k] = 8;
    }
    t_run_ranks(W, ba_rank, r);
    for (int k = 0; k < W; k++) {
        zc_comm_destroy(r->comms[k]);
        zc_config_destroy(r->cfg[k]);
    }
}

/* Every rank failed with ZC_ERR_CONFIG and rank 0's message, which contains
 * each of the needles. */
static void expect_all(const ba_run *r, const char *const *needles)
{
    for (int k = 0; k < W; k++) {
        cr_assert_eq(r->rc[k], ZC_ERR_CONFIG, "rank %d: %d %s", k, r->rc[k], r->msg[k]);
        /* The text after the file:line prefix is the same everywhere. */
        const char *a = strstr(r->msg[k], "the ranks disagree"),
                   *b = strstr(r->msg[0], "the ranks disagree");
        cr_assert(a && b && !strcmp(a, b), "rank %d: '%s' vs rank 0: '%s'", k, r->msg[k],
                  r->msg[0]);
    }
    for (int i = 0; needles[i]; i++)
        cr_assert(strstr(r->msg[0], needles[i]), "'%s' not in: %s", needles[i], r->msg[0]);
}

Test(build_agree, same_model_builds)
{
    static ba_run r;
    memset(&r, 0, sizeof r);
    ba_go(&r, -1);
    for (int k = 0; k < W; k++)
        cr_assert_eq(r.rc[k], ZC_OK, "rank %d: %s", k, r.msg[k]);
    t_assert_no_leaks();
}

Test(build_agree, a_shape_is_named_with_the_ranks)
{
    static ba_run r;
    memset(&r, 0, sizeof r);
    r.shape1[2] = 9;
    ba_go(&r, -1);
    static const char *const n[] = {"rank 0 has parameter 1 'b' shape [4, 8] group 0",
                                    "rank 2 has parameter 1 'b' shape [4, 9] group 0",
                                    "differ from rank 0: 2; 1 of 4", NULL};
    expect_all(&r, n);
    t_assert_no_leaks();
}

Test(build_agree, a_group_and_an_extra_parameter)
{
    static ba_run r;
    memset(&r, 0, sizeof r);
    r.group2[1] = r.group2[3] = 1;
    ba_go(&r, -1);
    static const char *const n[] = {"rank 0 has parameter 2 'c' shape [33] group 0",
                                    "rank 1 has parameter 2 'c' shape [33] group 1",
                                    "differ from rank 0: 1, 3; 2 of 4", NULL};
    expect_all(&r, n);

    memset(&r, 0, sizeof r);
    r.extra[3] = 1;
    ba_go(&r, -1);
    /* Rank 0's list goes on with the layout where rank 3 has a fourth
     * parameter. */
    static const char *const m[] = {"rank 0 has layout:", "rank 3 has parameter 3 'd' shape [5]",
                                    "differ from rank 0: 3;", NULL};
    expect_all(&r, m);
    t_assert_no_leaks();
}

Test(build_agree, a_stage_is_named)
{
    static ba_run r;
    memset(&r, 0, sizeof r);
    ba_go(&r, 1);
    static const char *const n[] = {"rank 0 has zero_optimization.stage 2",
                                    "rank 3 has zero_optimization.stage 1", NULL};
    expect_all(&r, n);
    t_assert_no_leaks();
}

/* Budgets decide the placement and whether the build's budget agreement (a
 * collective) runs: a rank with another budget, or none, is named rather
 * than left waiting in that collective. Equal budgets build. */
Test(build_agree, a_budget_is_named)
{
    static ba_run r;
    memset(&r, 0, sizeof r);
    for (int k = 0; k < W; k++)
        r.budget[k] = "\"1GiB\"";
    r.budget[2] = NULL;
    ba_go(&r, -1);
    static const char *const n[] = {"rank 0 has zero_optimization.max_memory given 1: device 1/"
                                    "1073741824",
                                    "rank 2 has zero_optimization.max_memory given 0",
                                    "differ from rank 0: 2;", NULL};
    expect_all(&r, n);
    memset(&r, 0, sizeof r);
    for (int k = 0; k < W; k++)
        r.budget[k] = "\"1GiB\"";
    ba_go(&r, -1);
    for (int k = 0; k < W; k++)
        cr_assert_eq(r.rc[k], ZC_OK, "rank %d: %s", k, r.msg[k]);
    t_assert_no_leaks();
}

/* A failure after the agreement is rank-local (one rank's allocation, its
 * pre-flight): every rank must fail alike, naming that rank, rather than the
 * others returning built and waiting in their first collective. The
 * allocator's countdown is process-wide, so it is armed for the first host
 * allocation after the agreement, whichever rank makes it: a probe run
 * whose ranks disagree (rank 3 names a parameter differently) stops at the
 * agreement and so counts the host allocations that come before it; the
 * ranks make the same ones in the real run. */
Test(build_agree, a_rank_local_failure_after_it_fails_every_rank)
{
    const int64_t armed = INT64_MAX / 2;
    ba_run probe = {.rename = {0, 0, 0, 1}};
    zc__mem_fail_after(ZC_MEMKIND_HOST, armed);
    ba_go(&probe, -1);
    const int64_t before = armed - zc__mem_fail_pending(ZC_MEMKIND_HOST);
    for (int k = 0; k < W; k++)
        cr_assert_eq(probe.rc[k], ZC_ERR_CONFIG, "probe rank %d: %s", k, probe.msg[k]);
    cr_assert_gt(before, 0);

    ba_run r = {0};
    zc__mem_fail_after(ZC_MEMKIND_HOST, before + 1);
    ba_go(&r, -1);
    zc__mem_fail_after(ZC_MEMKIND_HOST, 0);
    const char *ref = strstr(r.msg[0], "zc_engine_build failed on rank ");
    cr_assert(ref, "rank 0: %d %s", r.rc[0], r.msg[0]);
    for (int k = 0; k < W; k++) {
        cr_assert_eq(r.rc[k], ZC_ERR_NO_MEMORY, "rank %d: %d %s", k, r.rc[k], r.msg[k]);
        const char *m = strstr(r.msg[k], "zc_engine_build failed on rank ");
        cr_assert(m && !strcmp(m, ref), "rank %d: '%s' vs rank 0: '%s'", k, r.msg[k], r.msg[0]);
    }
    t_assert_no_leaks();
}
