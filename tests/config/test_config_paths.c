/* offload_optimizer.nvme_path as a list (a zeroc extension): set, read back,
 * cloned, loaded from a file and checked directory by directory; a single
 * string keeps DeepSpeed's meaning (one directory, commas included); bad
 * lists are refused with the entry named and nothing changed. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "helpers.h"

#define KEY "zero_optimization.offload_optimizer.nvme_path"

static void get_eq(const zc_config *cfg, const char *want)
{
    char buf[512];
    cr_assert_eq(zc_config_get(cfg, KEY, buf, sizeof buf), ZC_OK, "%s", zc_last_error());
    cr_assert_str_eq(buf, want);
}

Test(config_paths, list_round_trip_and_clone)
{
    zc_config *cfg, *copy;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set(cfg, KEY, "[\"/a/x\", \"/b/y\"]"), ZC_OK, "%s", zc_last_error());
    get_eq(cfg, "[\"/a/x\", \"/b/y\"]");
    /* The engine reads the directories joined with newlines. */
    cr_assert_str_eq(cfg->zero.offload_optimizer.nvme_path, "/a/x\n/b/y");
    cr_assert_eq(zc__config_clone(cfg, &copy), ZC_OK);
    cr_assert_str_eq(copy->zero.offload_optimizer.nvme_path, "/a/x\n/b/y");
    /* A one-entry list and a plain string both mean one directory; a comma
     * in a string is part of the name, as in DeepSpeed. */
    cr_assert_eq(zc_config_set(cfg, KEY, "[\"/only\"]"), ZC_OK);
    cr_assert_str_eq(cfg->zero.offload_optimizer.nvme_path, "/only");
    cr_assert_eq(zc_config_set(cfg, KEY, "\"/with,comma\""), ZC_OK);
    get_eq(cfg, "\"/with,comma\"");
    zc_config_destroy(copy);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

Test(config_paths, bad_lists_are_refused_unchanged)
{
    zc_config *cfg;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set(cfg, KEY, "\"/keep\""), ZC_OK);
    const char *bad[] = {
        "[]",
        "[\"/a\", 3]",
        "[\"/a\", \"\"]",
        "[\"/a\\nb\"]",
        "\"/a\\nb\"",
        "[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\",\"11\",\"12\",\"13\",\"14\","
        "\"15\",\"16\",\"17\"]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_neq(zc_config_set(cfg, KEY, bad[i]), ZC_OK, "%s accepted", bad[i]);
        cr_assert(strstr(zc_last_error(), "nvme_path"), "%s: %s", bad[i], zc_last_error());
        get_eq(cfg, "\"/keep\"");
    }
    /* The list form is for the nvme_path keys only (both offload blocks). */
    cr_assert_eq(zc_config_set(cfg, "zero_optimization.offload_param.nvme_path", "[\"/a\"]"),
                 ZC_OK, "%s", zc_last_error());
    cr_assert_neq(zc_config_set(cfg, "optimizer.type", "[\"/a\"]"), ZC_OK);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

Test(config_paths, file_with_a_list_checks_each_directory)
{
    char d1[64] = "zc-cfg-paths-XXXXXX", path[128];
    cr_assert_not_null(mkdtemp(d1));
    snprintf(path, sizeof path, "%s/ds.json", d1);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 2, "
               "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": [\"%s\", "
               "\"%s/missing\"]}}}",
            d1, d1);
    fclose(f);
    zc_config *cfg = NULL;
    cr_assert_neq(zc_config_load(&cfg, path), ZC_OK, "a missing directory in the list");
    cr_assert(strstr(zc_last_error(), "missing"), "%s", zc_last_error());
    zc_config_destroy(cfg);
    f = fopen(path, "w");
    fprintf(f, "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 2, "
               "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": [\"%s\", \".\"]}}}",
            d1);
    fclose(f);
    cfg = NULL;
    cr_assert_eq(zc_config_load(&cfg, path), ZC_OK, "%s", zc_last_error());
    zc_config_destroy(cfg);
    unlink(path);
    rmdir(d1);
    t_assert_no_leaks();
}
