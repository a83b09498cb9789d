/* Stage 3 logs once at INFO, at build, what it will keep gathered and why:
 * the persistent chunks and the threshold that made them so (and the model
 * budget that stopped more), the prefetch window against the sharded rest,
 * and whether stage3_max_live_parameters binds. The line is captured from the
 * log sink; the numbers it must hold are computed here from the layout (one
 * chunk per parameter, each padded to a multiple of 64 elements). Other
 * stages log no such line. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "helpers.h"
#include "zeroc/zeroc.h"

static char line[2048];
static int nlines;

static void sink(zc_log_level level, const char *subsys, int rank, const char *text, void *user)
{
    (void)rank;
    (void)user;
    if (level == ZC_LOG_INFO && !strcmp(subsys, "zero3") &&
        strstr(text, "stage 3 keeps gathered")) {
        snprintf(line, sizeof line, "%s", text);
        nlines++;
    }
}

/* One chunk per parameter: numel 1000, 64, 1, 5000 -> padded 1024, 64, 64,
 * 5056 (world 1, multiples of 64): 6208 padded elements in all. */
static const int64_t numel[4] = {1000, 64, 1, 5000};
#define PADDED_ALL 6208

static void build(int stage, const char *const *kv, int nkv)
{
    nlines = 0;
    line[0] = 0;
    zc_log_set_sink(sink, NULL);
    zc_log_set_level(ZC_LOG_INFO);
    zc_config *cfg = NULL;
    zc_comm *comm = NULL;
    zc_engine *eng = NULL;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage", stage), ZC_OK);
    for (int i = 0; i < nkv; i += 2)
        cr_assert_eq(zc_config_set(cfg, kv[i], kv[i + 1]), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    cr_assert_eq(zc_engine_create(&eng, cfg, comm, &eo), ZC_OK, "%s", zc_last_error());
    for (int i = 0; i < 4; i++) {
        char name[8];
        snprintf(name, sizeof name, "p%d", i);
        cr_assert_eq(zc_chunk_boundary(eng), ZC_OK);
        cr_assert_not_null(zc_param_add(eng, name, &numel[i], 1, 0));
    }
    cr_assert_eq(zc_engine_build(eng), ZC_OK, "%s", zc_last_error());
    zc_stats st = {.size = sizeof st};
    cr_assert_eq(zc_engine_stats(eng, &st), ZC_OK);
    cr_assert_eq(st.num_chunks, 4);
    cr_assert_eq(st.padded_params, PADDED_ALL);
    zc_engine_destroy(eng);
    zc_comm_destroy(comm);
    zc_config_destroy(cfg);
    zc_log_set_level(ZC_LOG_WARN);
    zc_log_set_sink(NULL, NULL);
    t_assert_no_leaks();
}

#define HAS(s) cr_assert_not_null(strstr(line, s), "want \"%s\" in: %s", s, line)

/* DeepSpeed's defaults on a small model: everything persistent. */
Test(keep_log, defaults_keep_the_whole_model)
{
    build(3, NULL, 0);
    cr_assert_eq(nlines, 1, "the line is logged once per build, got %d", nlines);
    HAS("4 of 4 chunks persistent (6208 of 6208 elements");
    HAS("stage3_param_persistence_threshold 100000 elements");
    HAS("the whole model stays gathered as in stage 2");
    HAS("prefetch: nothing to prefetch");
    HAS("stage3_max_live_parameters 1000000000 does not bind (the model is 6208 padded "
        "elements)");
}

/* No persistence: the default prefetch bucket covers the whole model. */
Test(keep_log, prefetch_covers_the_model)
{
    const char *kv[] = {"zero_optimization.stage3_param_persistence_threshold", "0"};
    build(3, kv, 2);
    cr_assert_eq(nlines, 1);
    HAS("0 of 4 chunks persistent (0 of 6208 elements");
    HAS("stage3_prefetch_bucket_size 50000000 covers all 6208 sharded elements, so from the "
        "second step the whole model is gathered ahead of use");
    cr_assert_null(strstr(line, "whole model stays gathered"), "%s", line);
}

/* Threshold 100 makes p1 and p2 candidates (64 and 64 padded), the model
 * budget of 64 elements admits only the first; a prefetch bucket and a live
 * bound below the sharded rest (1024 + 64 + 5056 = 6144) both bind. */
Test(keep_log, budget_window_and_bound)
{
    const char *kv[] = {"zero_optimization.stage3_param_persistence_threshold", "100",
                        "zero_optimization.stage3_model_persistence_threshold", "64",
                        "zero_optimization.stage3_prefetch_bucket_size", "2000",
                        "zero_optimization.stage3_max_live_parameters", "6000"};
    build(3, kv, 8);
    cr_assert_eq(nlines, 1);
    HAS("1 of 4 chunks persistent (64 of 6208 elements");
    HAS("(1 more would be, but stage3_model_persistence_threshold 64 is reached)");
    HAS("up to stage3_prefetch_bucket_size 2000 of the 6144 sharded elements");
    HAS("stage3_max_live_parameters 6000 bounds what is gathered at once");
}

Test(keep_log, other_stages_say_nothing)
{
    for (int stage = 0; stage <= 2; stage++) {
        build(stage, NULL, 0);
        cr_assert_eq(nlines, 0, "stage %d: %s", stage, line);
    }
}
