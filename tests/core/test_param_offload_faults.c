/* Faults in parameter-shard I/O (stage 3, offload_param "nvme"), injected at
 * every position of a short layer-wise run, on one rank only, with prefetch
 * off and on, compared with the fault-free run of the same configuration:
 *   - EIO on one store request (transient): retried, every rank finishes
 *     with master parameters bitwise equal to the fault-free run;
 *   - ENOSPC on one shard write (persistent): every rank fails in the same
 *     step with ZC_ERR_IO, every engine is broken with the same message
 *     naming the failing rank, the chunk, the file and the offset;
 *   - ZC_FAULTS io:RANK:K (a read or write that fails, not retried): either
 *     every rank is broken with the same message naming the chunk, or (never
 *     here) every rank ends with the fault-free parameters - never a split,
 *     never a hang (the local communicator's timeout would fail the run);
 *   - the allocator: the steps allocate nothing (an alloc item has nothing
 *     to fire on), and each pinned allocation of the build failing fails
 *     zc_engine_build with ZC_ERR_NO_MEMORY, leaving no swap file.
 * Positions are counted from the moment the faults are set (after build and
 * zc_param_load), so they cover every read and write of the steps: the
 * gathers' reads (on demand or started ahead), the optimizer's writes, and
 * the write of the last shard zc_param_load filled, which goes home at the
 * first acquire. The runs and sweeps are t_offload.h's. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "t_engine.h"
#include "t_offload.h"

#define STEPS 3
#define W 2

static t_swapdir dir;

static void setup(void)
{
    t_swapdir_make(&dir, "zc-poff-faults");
    unsetenv("ZC_FAULTS");
}

static void teardown(void)
{
    unsetenv("ZC_FAULTS");
    t_swapdir_remove(&dir);
}

/* Stage 3 bf16 on W ranks, 3 layer-wise steps, parameter shards on NVMe
 * (4 buffers), reuse distance 0; with offload_opt the optimizer state too. */
static t_fault_setup setup_for(bool prefetch, const char *offload_opt)
{
    t_fault_setup s = {.store = T_STORE_PARAM, .swapdir = dir.path};
    t_run_init(&s.cfg, 3, W, ZC_DTYPE_BF16);
    s.cfg.steps = STEPS;
    s.cfg.layerwise = true;
    s.cfg.prefetch = prefetch ? 1 << 20 : 0;
    s.cfg.reuse = 0;
    s.cfg.offload_param = "nvme";
    s.cfg.param_nvme_path_json = dir.json;
    s.cfg.param_buffer_count = 4;
    if (offload_opt) {
        s.cfg.offload = offload_opt;
        s.cfg.nvme_path_json = dir.json;
        s.cfg.buffer_count = 4;
    }
    return s;
}

static void store_sweep(bool prefetch)
{
    const t_fault_setup s = setup_for(prefetch, NULL);
    t_frun *ref = t_frun_run(&s, T_NO_FAULT);
    cr_assert_str_empty(t_run_error(&ref->run), "fault-free run: %s", t_run_error(&ref->run));
    for (int fr = 0; fr < W; fr++) {
        /* 6 chunks written once a step, and the write of the last chunk
         * zc_param_load filled, deferred to the first acquire (where its
         * outcome is agreed), so it is a position too; the rest are the
         * gathers' reads. */
        cr_assert_gt(ref->requests[fr], ref->writes[fr], "rank %d: %lld requests", fr,
                     (long long)ref->requests[fr]);
        cr_assert_eq(ref->writes[fr], 6 * STEPS + 1, "rank %d: %lld writes", fr,
                     (long long)ref->writes[fr]);
    }
    /* A failed zc_param_acquire makes the step's status the harness's
     * ZC_ERR_INTERNAL: any status, the same on every rank. */
    t_store_fault_sweep(&s, ref, ZC_OK, "params.swp");
    t_frun_free(ref);
    t_assert_no_leaks();
}

Test(param_offload_faults, store_faults_every_position_no_prefetch, .init = setup,
     .fini = teardown)
{
    store_sweep(false);
}

Test(param_offload_faults, store_faults_every_position_prefetch, .init = setup,
     .fini = teardown)
{
    store_sweep(true);
}

/* ZC_FAULTS io:RANK:K at every read and write of the steps; with the
 * optimizer's state on NVMe too, its I/O counts in the same sequence. */
static void zc_faults_sweep(bool prefetch, const char *offload_opt)
{
    const t_fault_setup s = setup_for(prefetch, offload_opt);
    t_frun *ref = t_frun_run(&s, T_NO_FAULT);
    t_zc_faults_io_sweep(&s, ref, ZC_OK);
    t_frun_free(ref);
    t_assert_no_leaks();
}

Test(param_offload_faults, zc_faults_io_every_k_no_prefetch, .init = setup, .fini = teardown)
{
    zc_faults_sweep(false, NULL);
}

Test(param_offload_faults, zc_faults_io_every_k_prefetch, .init = setup, .fini = teardown)
{
    zc_faults_sweep(true, NULL);
}

Test(param_offload_faults, zc_faults_io_every_k_with_optimizer_nvme, .init = setup,
     .fini = teardown)
{
    zc_faults_sweep(true, "nvme");
}

/* An io item is accepted for parameter offload alone (it has I/O to fire
 * on) and still refused where nothing is swapped. */
Test(param_offload_faults, zc_faults_io_accepted_with_param_nvme, .init = setup,
     .fini = teardown)
{
    const t_fault_setup s = setup_for(false, NULL);
    setenv("ZC_FAULTS", "io:0:1000000", 1);
    t_frun *f = t_frun_run(&s, T_NO_FAULT);
    unsetenv("ZC_FAULTS");
    cr_assert_str_empty(t_run_error(&f->run), "%s", t_run_error(&f->run));
    t_frun_free(f);
    t_assert_no_leaks();
}

/* The steps allocate nothing: the homes take their pinned memory at build
 * and the layer-wise loop stays within the reserved gather buffers. So an
 * alloc:RANK:K item has nothing to fire on and the run ends like the
 * fault-free one. */
Test(param_offload_faults, no_allocation_after_build, .init = setup, .fini = teardown)
{
    const t_fault_setup s = setup_for(true, NULL);
    t_frun *ref = t_frun_run(&s, T_NO_FAULT);
    cr_assert_str_empty(t_run_error(&ref->run), "%s", t_run_error(&ref->run));
    for (int r = 0; r < W; r++)
        cr_assert_eq(ref->alloc_total[r], ref->alloc_after_open[r], "rank %d allocated %lld "
                     "times during the steps", r,
                     (long long)(ref->alloc_total[r] - ref->alloc_after_open[r]));
    setenv("ZC_FAULTS", "alloc:1:1", 1);
    t_frun *f = t_frun_run(&s, T_NO_FAULT);
    unsetenv("ZC_FAULTS");
    cr_assert_str_empty(t_run_error(&f->run), "%s", t_run_error(&f->run));
    cr_assert(!memcmp(f->run.master, ref->run.master, (size_t)t_total_numel() * sizeof(float)));
    t_frun_free(f);
    t_frun_free(ref);
    t_assert_no_leaks();
}

/* Every pinned allocation of the build with offload_param cpu and nvme,
 * failed in turn (world 1, so the countdown cannot split ranks):
 * ZC_ERR_NO_MEMORY from zc_engine_build, no swap file left behind. */
Test(param_offload_faults, pinned_allocation_at_build, .init = setup, .fini = teardown)
{
    const char *devs[2] = {"cpu", "nvme"};
    for (int d = 0; d < 2; d++) {
        t_run cfg;
        t_run_init(&cfg, 3, 1, ZC_DTYPE_BF16);
        cfg.steps = 2;
        cfg.layerwise = true;
        cfg.offload_param = devs[d];
        cfg.param_nvme_path_json = dir.json;
        cr_assert_gt(t_pinned_build_sweep(&cfg, dir.path, devs[d]), 0,
                     "%s made no pinned allocation", devs[d]);
    }
    t_assert_no_leaks();
}
