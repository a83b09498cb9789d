/* The activation store's memory: what the build reserves, by kind, equals
 * the layout written out here from its rule (slots of the largest
 * checkpoint, each aligned to its home's unit: 256 bytes in device memory,
 * 4 KiB pages in host memory and on NVMe, whose file is rounded to whole
 * aio.block_size stripes; two device staging slots for a host home on a
 * GPU) and zc_plan_memory's plan of the same model, options and section,
 * byte for byte; saving and restoring allocate nothing; the pre-flight and
 * max_memory's placement count it (a device too small for the plan with the
 * store is refused naming it; a budget the store fills moves the optimizer
 * state off the device). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "plan/plan.h"
#include "t_act.h"
#include "t_offload.h"

#define SLOTS 5
#define BYTES 10000 /* not a multiple of 256 or 4096 */

static int64_t up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

/* The bytes by public kind the rule gives. */
static void rule(const char *home, bool staging, int64_t buffers, int64_t out[ZC_KIND__COUNT])
{
    memset(out, 0, sizeof(int64_t) * ZC_KIND__COUNT);
    if (!strcmp(home, "device")) {
        out[ZC_KIND_DEVICE] = SLOTS * up(BYTES, 256);
        return;
    }
    if (staging)
        out[ZC_KIND_DEVICE] = 2 * up(BYTES, 256);
    if (!strcmp(home, "cpu")) {
        out[ZC_KIND_PINNED] = SLOTS * up(BYTES, 4096);
        return;
    }
    out[ZC_KIND_PINNED] = buffers * up(BYTES, 4096);
    out[ZC_KIND_NVME] = up(SLOTS * up(BYTES, 4096), 1 << 20); /* aio.block_size, 1 directory */
}

static void check_home(const char *home, bool staging)
{
    t_swapdir dir;
    const bool nvme = !strcmp(home, "nvme");
    if (nvme)
        t_swapdir_make(&dir, "zc-act-mem");
    zc_config *cfg = ta_config(home, nvme ? dir.json : NULL, 2, 1, 1, 3);
    cr_assert_not_null(cfg);
    zc__act_force_staging(staging);
    zc_engine_options o = ZC_ENGINE_OPTIONS_INIT;
    o.device = ZC_DEVICE_HOST;
    o.act_checkpoints = SLOTS;
    o.act_checkpoint_bytes = BYTES;
    const int64_t shape[2] = {96, 40};
    const zc_plan_tensor t = {shape, 2, false};
    zc_memory_plan plan = {.size = sizeof plan};
    cr_assert_eq(zc_plan_memory(cfg, 1, &t, 1, &o, &plan), ZC_OK, "%s", zc_last_error());

    zc_comm *comm;
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    zc_engine *e = NULL;
    zc_param *p = NULL;
    cr_assert_eq(zc_engine_create(&e, cfg, comm, &o), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc_param_add_status(e, "w", shape, 2, 0, &p), ZC_OK);
    cr_assert_eq(zc_engine_build(e), ZC_OK, "%s", zc_last_error());
    zc_stats s = {.size = sizeof s};
    cr_assert_eq(zc_engine_stats(e, &s), ZC_OK);
    int64_t want[ZC_KIND__COUNT];
    rule(home, staging, 3, want);
    for (int k = 0; k < ZC_KIND__COUNT; k++) {
        cr_assert_eq(s.bytes_by_kind_cat[k][ZC_MEM_ACTIVATIONS], want[k],
                     "%s%s kind %d: built %lld, rule %lld", home, staging ? " staged" : "", k,
                     (long long)s.bytes_by_kind_cat[k][ZC_MEM_ACTIVATIONS], (long long)want[k]);
        cr_assert_eq(plan.bytes_by_kind_cat[k][ZC_MEM_ACTIVATIONS], want[k],
                     "%s kind %d: planned %lld, rule %lld", home, k,
                     (long long)plan.bytes_by_kind_cat[k][ZC_MEM_ACTIVATIONS],
                     (long long)want[k]);
    }
    /* Saves and restores allocate nothing (after the NVMe store's first
     * request, which makes its ticket table once). */
    uint8_t *buf = calloc(1, BYTES);
    zc_act_id id[SLOTS];
    int64_t host0 = 0, pin0 = 0;
    for (int round = 0; round < 2; round++) {
        host0 = zc__mem_global_count(ZC_MEMKIND_HOST);
        pin0 = zc__mem_global_count(ZC_MEMKIND_PINNED);
        for (int k = 0; k < SLOTS; k++)
            cr_assert_eq(zc_act_save(e, buf, BYTES - 16 * k, NULL, &id[k]), ZC_OK);
        for (int k = SLOTS - 1; k >= 0; k--)
            cr_assert_eq(zc_act_restore(e, id[k], buf, BYTES - 16 * k, NULL), ZC_OK);
    }
    cr_assert_eq(zc__mem_global_count(ZC_MEMKIND_HOST), host0);
    cr_assert_eq(zc__mem_global_count(ZC_MEMKIND_PINNED), pin0);
    zc_stats s2 = {.size = sizeof s2};
    cr_assert_eq(zc_engine_stats(e, &s2), ZC_OK);
    for (int k = 0; k < ZC_KIND__COUNT; k++)
        cr_assert_eq(s2.peak_bytes_by_kind[k], s.peak_bytes_by_kind[k], "kind %d grew", k);
    free(buf);
    zc_engine_destroy(e);
    zc_comm_destroy(comm);
    zc_config_destroy(cfg);
    zc__act_force_staging(false);
    if (nvme)
        t_swapdir_remove(&dir);
    t_assert_no_leaks();
}

Test(act_memory, device) { check_home("device", false); }
Test(act_memory, cpu) { check_home("cpu", false); }
Test(act_memory, cpu_staged) { check_home("cpu", true); }
Test(act_memory, nvme) { check_home("nvme", false); }
Test(act_memory, nvme_staged) { check_home("nvme", true); }

static zc_status build_with(zc_config *cfg, int64_t slots, char *msg, size_t cap,
                            zc_stats *stats)
{
    zc_comm *comm;
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    zc_engine_options o = ZC_ENGINE_OPTIONS_INIT;
    o.device = ZC_DEVICE_HOST;
    o.act_checkpoints = slots;
    o.act_checkpoint_bytes = slots ? 1 << 20 : 0;
    zc_engine *e = NULL;
    zc_param *p = NULL;
    const int64_t shape[2] = {256, 256};
    cr_assert_eq(zc_engine_create(&e, cfg, comm, &o), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc_param_add_status(e, "w", shape, 2, 0, &p), ZC_OK);
    zc_status rc = zc_engine_build(e);
    snprintf(msg, cap, "%s", rc == ZC_OK ? "" : zc_last_error());
    if (rc == ZC_OK && stats) {
        stats->size = sizeof *stats;
        zc_engine_stats(e, stats);
    }
    zc_engine_destroy(e);
    zc_comm_destroy(comm);
    return rc;
}

/* The pre-flight holds the plan with the store to the device: 8 MiB of
 * checkpoints do not fit a device of 6 MiB that holds the model alone. */
Test(act_memory, preflight_counts_the_store)
{
    zc_config *cfg = ta_config("device", NULL, 1, 1, 1, 0);
    char msg[2048];
    zc__preflight_device_free(6 << 20);
    cr_assert_eq(build_with(cfg, 0, msg, sizeof msg, NULL), ZC_OK, "%s", msg);
    const zc_status rc = build_with(cfg, 8, msg, sizeof msg, NULL);
    zc__preflight_device_free(-1);
    cr_assert_eq(rc, ZC_ERR_NO_MEMORY, "%s", msg);
    cr_assert_not_null(strstr(msg, "activation checkpoints"), "%s", msg);
    cr_assert_not_null(strstr(msg, "cpu_checkpointing"), "%s", msg);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

/* max_memory: with the store taking most of the device budget, the
 * placement moves the optimizer state to pinned memory. */
Test(act_memory, budgets_count_the_store)
{
    zc_config *cfg = ta_config("device", NULL, 1, 1, 1, 0);
    cr_assert_eq(zc_config_set(cfg, "zero_optimization.max_memory.device", "\"4MiB\""), ZC_OK);
    cr_assert_eq(zc_config_set(cfg, "zero_optimization.max_memory.cpu", "\"64MiB\""), ZC_OK);
    char msg[2048];
    zc_stats a, b;
    cr_assert_eq(build_with(cfg, 0, msg, sizeof msg, &a), ZC_OK, "%s", msg);
    cr_assert_eq(a.opt_chunks_by_place[ZC_PLACE_ON_DEVICE], 1);
    cr_assert_eq(build_with(cfg, 3, msg, sizeof msg, &b), ZC_OK, "%s", msg);
    cr_assert_eq(b.opt_chunks_by_place[ZC_PLACE_ON_PINNED], 1, "the optimizer state stayed on "
                 "the device beside 3 MiB of checkpoints");
    cr_assert_eq(b.bytes_by_kind_cat[ZC_KIND_DEVICE][ZC_MEM_ACTIVATIONS], 3 << 20);
    /* More checkpoints than the budget holds at all: refused by name. */
    const zc_status rc = build_with(cfg, 5, msg, sizeof msg, NULL);
    cr_assert_eq(rc, ZC_ERR_NO_MEMORY, "%s", msg);
    cr_assert_not_null(strstr(msg, "max_memory.device"), "%s", msg);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}
