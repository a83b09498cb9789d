/* The activation store's contract (zc_act_save / zc_act_restore, zeroc.h):
 * every home (device, pinned, NVMe; and the GPU's staging path run on the
 * host), the order - last saved first, saves and restores interleaved as a
 * stack - and the reuse of the slots across micro-steps and accumulation
 * windows, every byte restored checked against the pattern it was saved
 * from; the figures the store reports. The refusals, the accounting and the
 * faults are test_act_refuse.c, test_act_memory.c and test_act_faults.c. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "t_act.h"
#include "t_offload.h"

static void expect_clean(const ta_run *r, int64_t restores_per_rank)
{
    for (int t = 0; t < r->world * (r->mp > 0 ? r->mp : 1); t++) {
        cr_assert_eq(r->rc[t], ZC_OK, "rank %d: %s", t, r->err[t]);
        cr_assert_eq(r->bad_bytes[t], 0, "rank %d: %lld bytes differ", t,
                     (long long)r->bad_bytes[t]);
        cr_assert_eq(r->restores[t], restores_per_rank, "rank %d: %lld restores", t,
                     (long long)r->restores[t]);
        cr_assert_eq(r->st[t].restores, restores_per_rank);
        cr_assert_eq(r->st[t].saves, restores_per_rank);
        cr_assert_eq(r->st[t].held, 0);
        cr_assert_eq(r->st[t].peak_held, r->peak[t], "rank %d: peak %lld, held %lld", t,
                     (long long)r->st[t].peak_held, (long long)r->peak[t]);
        if (!r->interleave)
            cr_assert_eq(r->peak[t], r->slots);
    }
}

static void run_home(const char *home, int world, int gas, bool staging, bool interleave,
                     int64_t buffers)
{
    t_swapdir dir;
    const bool nvme = !strcmp(home, "nvme");
    if (nvme)
        t_swapdir_make(&dir, "zc-act-store");
    ta_run r;
    ta_run_init(&r, home, world);
    r.gas = gas;
    r.staging = staging;
    r.interleave = interleave;
    r.buffer_count = buffers;
    r.nvme_json = nvme ? dir.json : NULL;
    ta_run_go(&r);
    expect_clean(&r, r.steps * r.gas * r.slots);
    for (int t = 0; t < world; t++) {
        const zc_act_home_kind want = nvme ? ZC_ACT_ON_NVME
                                     : !strcmp(home, "cpu") ? ZC_ACT_ON_PINNED
                                                            : ZC_ACT_ON_DEVICE;
        cr_assert_eq(r.st[t].home, want);
        cr_assert_eq(r.st[t].slots, r.slots);
        cr_assert_eq(r.st[t].parts, 1);
        int64_t sum = 0;
        for (int k = 0; k < r.slots; k++)
            sum += (int64_t)ta_size(r.bytes, k);
        cr_assert_eq(r.st[t].saved_bytes, sum * r.steps * r.gas);
        cr_assert_eq(r.st[t].restored_bytes, r.st[t].saved_bytes);
        cr_assert_eq(r.st[t].restore_hits + r.st[t].restore_misses, r.st[t].restores);
        if (nvme) {
            /* Every checkpoint is written once (whole 4 KiB pages); what is
             * read back is what the buffers did not still hold. */
            int64_t pages = 0;
            for (int k = 0; k < r.slots; k++)
                pages += ((int64_t)ta_size(r.bytes, k) + 4095) / 4096;
            cr_assert_eq(r.st[t].nvme_write_bytes, pages * 4096 * r.steps * r.gas);
            cr_assert_gt(r.st[t].nvme_read_bytes, 0, "rank %d: nothing read back", t);
            cr_assert_lt(r.st[t].nvme_read_bytes, r.st[t].nvme_write_bytes,
                         "rank %d: the buffers still holding the last checkpoints are read "
                         "from again", t);
        } else {
            cr_assert_eq(r.st[t].nvme_write_bytes, 0);
            cr_assert_eq(r.st[t].restore_misses, 0);
        }
    }
    if (nvme)
        t_swapdir_remove(&dir);
    t_assert_no_leaks();
}

Test(act_store, device_home) { run_home("device", 1, 1, false, false, 0); }
Test(act_store, cpu_home) { run_home("cpu", 1, 1, false, false, 0); }
Test(act_store, nvme_home) { run_home("nvme", 1, 1, false, false, 2); }
Test(act_store, nvme_home_more_buffers) { run_home("nvme", 1, 1, false, false, 4); }

/* Accumulation: the slots serve every micro-step of the window, on two
 * ranks whose data differ. */
Test(act_store, accumulation_two_ranks)
{
    run_home("device", 2, 3, false, false, 0);
    run_home("cpu", 2, 3, false, false, 0);
    run_home("nvme", 2, 3, false, false, 3);
}

/* Saves and restores interleaved as a stack (a pipeline's schedule). */
Test(act_store, interleaved)
{
    run_home("device", 1, 2, false, true, 0);
    run_home("cpu", 1, 2, false, true, 0);
    run_home("nvme", 1, 2, false, true, 2);
}

/* The GPU's path of a host home - a device staging slot, the copy stream,
 * the NVMe write submitted once the copy landed - run on the host device. */
Test(act_store, staging_path)
{
    run_home("cpu", 2, 2, true, false, 0);
    run_home("nvme", 2, 2, true, false, 2);
    run_home("nvme", 1, 1, true, true, 3);
}

/* The reads ahead: with enough buffers and a stack deeper than them, the
 * checkpoints not still in a buffer are read while the previous ones are
 * restored, so restores find them done (ready) or started. Counted by the
 * store: every restore is a hit or a miss, and the buffers' last
 * checkpoints are hits. */
Test(act_store, reads_ahead)
{
    t_swapdir dir;
    t_swapdir_make(&dir, "zc-act-ahead");
    ta_run r;
    ta_run_init(&r, "nvme", 1);
    r.slots = 12;
    r.buffer_count = 4;
    r.nvme_json = dir.json;
    ta_run_go(&r);
    expect_clean(&r, r.steps * r.slots);
    /* The last 4 saved are still in the buffers: at least those hit. */
    cr_assert_geq(r.st[0].restore_hits, 4 * r.steps, "hits %lld",
                  (long long)r.st[0].restore_hits);
    t_swapdir_remove(&dir);
    t_assert_no_leaks();
}

/* partition_activations over a model-parallel group (zc_engine_options.
 * act_mp_comm): each rank keeps 1/MP of every checkpoint and the restore
 * all-gathers it back; the members save the same activations (a tensor-
 * parallel block's replicated input), every byte comes back on each, and the
 * store holds a part's bytes. Data-parallel groups of 1 and 2 beside groups
 * of 2 model-parallel ranks (threads on local communicators). */
static void run_partition(const char *home, int world)
{
    t_swapdir dir;
    const bool nvme = !strcmp(home, "nvme");
    if (nvme)
        t_swapdir_make(&dir, "zc-act-part");
    ta_run r;
    ta_run_init(&r, home, world);
    r.mp = 2;
    r.gas = 2;
    r.bytes = 8192;
    r.buffer_count = 2;
    r.nvme_json = nvme ? dir.json : NULL;
    ta_run_go(&r);
    expect_clean(&r, r.steps * r.gas * r.slots);
    for (int t = 0; t < world * 2; t++) {
        cr_assert_eq(r.st[t].parts, 2);
        cr_assert_eq(r.st[t].part_bytes, 4096);
        /* The slots hold a part each: half of what a whole checkpoint
         * takes (the device's 256-byte units, or pages). */
        const int64_t unit = nvme || !strcmp(home, "cpu") ? 4096 : 256;
        const int kind = nvme ? ZC_KIND_NVME : !strcmp(home, "cpu") ? ZC_KIND_PINNED
                                                                      : ZC_KIND_DEVICE;
        int64_t want = r.slots * ((4096 + unit - 1) / unit * unit);
        if (nvme)
            want = (want + (1 << 20) - 1) / (1 << 20) * (1 << 20);
        cr_assert_eq(r.es[t].bytes_by_kind_cat[kind][ZC_MEM_ACTIVATIONS] -
                         (kind == ZC_KIND_DEVICE ? 256 : 0),
                     want, "rank %d: %lld bytes", t,
                     (long long)r.es[t].bytes_by_kind_cat[kind][ZC_MEM_ACTIVATIONS]);
    }
    if (nvme)
        t_swapdir_remove(&dir);
    t_assert_no_leaks();
}

Test(act_store, partition_device) { run_partition("device", 1); run_partition("device", 2); }
Test(act_store, partition_cpu) { run_partition("cpu", 2); }
Test(act_store, partition_nvme) { run_partition("nvme", 2); }
