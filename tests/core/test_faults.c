/* ZC_FAULTS parsing: strict syntax, the items of one rank kept, counting. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/common/faults.h"
#include "helpers.h"

static void expect_bad(const char *spec, const char *needle)
{
    zc_faults f;
    memset(&f, 0xab, sizeof f);
    zc_status rc = zc__faults_parse(spec, 0, 4, &f);
    cr_assert_eq(rc, ZC_ERR_CONFIG, "'%s' was accepted", spec);
    cr_assert(strstr(zc_last_error(), needle), "'%s': message '%s' lacks '%s'", spec,
              zc_last_error(), needle);
    cr_assert(strstr(zc_last_error(), "ZC_FAULTS"), "%s", zc_last_error());
    cr_assert_eq(f.n, 0, "'%s': items kept after an error", spec);
}

Test(faults, unset_or_empty_means_none)
{
    zc_faults f;
    cr_assert_eq(zc__faults_parse(NULL, 0, 1, &f), ZC_OK);
    cr_assert_eq(f.n, 0);
    cr_assert_eq(zc__faults_parse("", 0, 1, &f), ZC_OK);
    cr_assert_eq(f.n, 0);
}

Test(faults, keeps_the_items_of_this_rank)
{
    zc_faults f;
    cr_assert_eq(zc__faults_parse("alloc:1:3,alloc:0:7,alloc:1:12", 1, 2, &f), ZC_OK);
    cr_assert_eq(f.n, 2);
    cr_assert_eq(f.kind[0], ZC_FAULT_ALLOC);
    cr_assert_eq(f.at[0], 3);
    cr_assert_eq(f.at[1], 12);
    cr_assert_eq(zc__faults_parse("alloc:1:3,alloc:0:7,alloc:1:12", 0, 2, &f), ZC_OK);
    cr_assert_eq(f.n, 1);
    cr_assert_eq(f.at[0], 7);
    /* The largest K. */
    cr_assert_eq(zc__faults_parse("alloc:0:9223372036854775807", 0, 1, &f), ZC_OK);
    cr_assert_eq(f.at[0], INT64_MAX);
}

/* io items parse like alloc ones (zc_engine_create refuses them without
 * nvme optimizer offload: tests/core/test_offload_faults.c). */
Test(faults, io_items_parse)
{
    zc_faults f;
    cr_assert_eq(zc__faults_parse("io:1:3,alloc:1:2", 1, 2, &f), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(f.n, 2);
    cr_assert_eq(f.kind[0], ZC_FAULT_IO);
    cr_assert_eq(f.at[0], 3);
    cr_assert_eq(f.kind[1], ZC_FAULT_ALLOC);
}

Test(faults, the_kth_event_fails_once)
{
    zc_faults f;
    cr_assert_eq(zc__faults_parse("alloc:0:2,alloc:0:4", 0, 1, &f), ZC_OK);
    int64_t nth = 0;
    const bool want[6] = {false, true, false, true, false, false};
    for (int i = 0; i < 6; i++) {
        nth = -1;
        bool hit = zc__faults_hit(&f, ZC_FAULT_ALLOC, &nth);
        cr_assert_eq(hit, want[i], "event %d", i + 1);
        if (hit)
            cr_assert_eq(nth, i + 1);
    }
    cr_assert_eq(f.seen[ZC_FAULT_ALLOC], 6);
}

Test(faults, malformed_values_are_refused)
{
    expect_bad("alloc", "is not KIND:RANK:K");
    expect_bad("alloc:0", "is not KIND:RANK:K");
    expect_bad("alloc:0:1,", "item 2");
    expect_bad(",alloc:0:1", "item 1");
    expect_bad("alloc:0:1,,alloc:0:2", "item 2");
    expect_bad("malloc:0:1", "unknown kind 'malloc'");
    expect_bad("ALLOC:0:1", "unknown kind");
    expect_bad("alloc:4:1", "RANK '4' is not an integer in [0, 3]");
    expect_bad("alloc:-1:1", "RANK '-1'");
    expect_bad("alloc:+1:1", "RANK '+1'");
    expect_bad("alloc: 1:1", "RANK ' 1'");
    expect_bad("alloc:x:1", "RANK 'x'");
    expect_bad("alloc::1", "RANK ''");
    expect_bad("alloc:0:0", "K '0' is not an integer in [1, 9223372036854775807]");
    expect_bad("alloc:0:-3", "K '-3'");
    expect_bad("alloc:0:1e3", "K '1e3'");
    expect_bad("alloc:0:3 ", "K '3 '");
    expect_bad("alloc:0:0x10", "K '0x10'");
    expect_bad("alloc:0:9223372036854775808", "K '9223372036854775808'");
    expect_bad("alloc:0:1:2", "K '1:2'");
    expect_bad("alloc:0:", "K ''");
}

Test(faults, too_many_items_for_one_rank)
{
    char spec[1024] = "";
    for (int i = 1; i <= ZC_FAULTS_MAX + 1; i++) {
        char item[32];
        snprintf(item, sizeof item, "%salloc:0:%d", i > 1 ? "," : "", i);
        strcat(spec, item);
    }
    zc_faults f;
    cr_assert_eq(zc__faults_parse(spec, 0, 1, &f), ZC_ERR_CONFIG);
    cr_assert(strstr(zc_last_error(), "more than"), "%s", zc_last_error());
    /* Items of other ranks do not count against this one. */
    cr_assert_eq(zc__faults_parse(spec, 0, 2, &f), ZC_ERR_CONFIG);
    cr_assert_eq(zc__faults_parse(spec, 1, 2, &f), ZC_OK);
    cr_assert_eq(f.n, 0);
}

/* A malformed value fails zc_engine_create with the parser's message. */
Test(faults, engine_create_refuses_a_malformed_value)
{
    zc_comm *comm = NULL;
    zc_config *cfg = NULL;
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    setenv("ZC_FAULTS", "alloc:0:zero", 1);
    zc_engine *e = NULL;
    cr_assert_eq(zc_engine_create(&e, cfg, comm, &eo), ZC_ERR_CONFIG);
    cr_assert_null(e);
    cr_assert(strstr(zc_last_error(), "K 'zero'"), "%s", zc_last_error());
    setenv("ZC_FAULTS", "alloc:0:5", 1);
    cr_assert_eq(zc_engine_create(&e, cfg, comm, &eo), ZC_OK, "%s", zc_last_error());
    unsetenv("ZC_FAULTS");
    zc_engine_destroy(e);
    zc_config_destroy(cfg);
    zc_comm_destroy(comm);
    t_assert_no_leaks();
}
