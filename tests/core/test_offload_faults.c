/* Faults in optimizer-state I/O (offload_optimizer "nvme"), injected at every
 * swap position of a 3-step run, on one rank only, compared with the
 * fault-free run:
 *   - EIO on one request (transient): retried, every rank finishes with
 *     master parameters bitwise equal to the fault-free run;
 *   - ENOSPC on one write (persistent): zc_step fails with ZC_ERR_IO on every
 *     rank in the same step, every engine is broken with the same message
 *     (naming the failing rank, the chunk and the file), and no rank returns
 *     ZC_OK with different parameters; no hang;
 *   - a pinned allocation failure (the allocator countdown) at build fails
 *     zc_engine_build with ZC_ERR_NO_MEMORY and leaves nothing behind.
 * Positions are counted by the store from the moment the faults are set
 * (after build and load), so K = 1..(requests of 3 steps) covers every read
 * and write of the steps (with accumulation, the gradient's too). The runs
 * and sweeps are t_offload.h's. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "t_engine.h"
#include "t_offload.h"

#define STEPS 3
#define WORLD 2   /* the store-fault sweeps */
#define MAXW 4    /* the ZC_FAULTS sweep (issue 18: world 4) */

/* bf16 on `world` ranks, 3 steps, optimizer state on NVMe with pipelined
 * swapping over 12 buffers. */
static void setup_world(t_fault_setup *s, const t_swapdir *dir, int world, int stage,
                        int accum)
{
    t_run_init(&s->cfg, stage, world, ZC_DTYPE_BF16);
    s->cfg.accum = accum;
    s->cfg.steps = STEPS;
    s->cfg.offload = "nvme";
    s->cfg.nvme_path_json = dir->json;
    s->cfg.pipeline = true;
    s->cfg.buffer_count = 12;
    s->store = T_STORE_OPTIMIZER;
    s->swapdir = dir->path;
}

static void sweep(int stage, int accum)
{
    t_swapdir dir;
    t_swapdir_make(&dir, "zc-offload-faults");
    t_fault_setup s;
    setup_world(&s, &dir, WORLD, stage, accum);
    t_frun *ref = t_frun_run(&s, T_NO_FAULT);
    cr_assert_str_empty(t_run_error(&ref->run), "fault-free run: %s", t_run_error(&ref->run));
    cr_assert_gt(ref->requests[0], 0);
    /* ENOSPC: zc_step itself fails with ZC_ERR_IO on every rank. */
    t_store_fault_sweep(&s, ref, ZC_ERR_IO, ".swp");
    t_frun_free(ref);
    t_swapdir_remove(&dir);
    t_assert_no_leaks();
}

Test(offload_faults, every_position_stage2) { sweep(2, 1); }
Test(offload_faults, every_position_stage3) { sweep(3, 1); }
/* With accumulation the gradient shard is swapped too: its reads and writes
 * during backward are positions as well, and their failures surface at the
 * step, on every rank. */
Test(offload_faults, every_position_stage2_accum2) { sweep(2, 2); }

/* Every pinned allocation of the build, failed in turn (world 1, so the
 * countdown cannot split ranks): ZC_ERR_NO_MEMORY, nothing left behind. */
Test(offload_faults, pinned_allocation_at_build)
{
    t_swapdir dir;
    t_swapdir_make(&dir, "zc-offload-faults");
    const char *devs[2] = {"cpu", "nvme"};
    for (int d = 0; d < 2; d++) {
        t_run cfg;
        t_run_init(&cfg, 2, 1, ZC_DTYPE_F32);
        cfg.steps = 2;
        cfg.offload = devs[d];
        cfg.nvme_path_json = dir.json;
        cr_assert_gt(t_pinned_build_sweep(&cfg, dir.path, devs[d]), 0,
                     "%s made no pinned allocation", devs[d]);
    }
    t_swapdir_remove(&dir);
    t_assert_no_leaks();
}

/* ZC_FAULTS io:RANK:K (issue 18), world 4, stages 2 and 3: for every K of
 * every rank's optimizer-state reads and writes in the three steps, no hang,
 * and either every rank is broken with the same message or every rank ends
 * with the fault-free parameters - never ZC_OK with other parameters. (K
 * during zc_param_load, which is not collective, fails that call on that
 * rank alone: the caller's to handle, so the sweep starts after it.) */
static void zc_faults_sweep(int stage)
{
    t_swapdir dir;
    t_swapdir_make(&dir, "zc-offload-faults");
    unsetenv("ZC_FAULTS");
    t_fault_setup s;
    setup_world(&s, &dir, MAXW, stage, 1);
    t_frun *ref = t_frun_run(&s, T_NO_FAULT);
    t_zc_faults_io_sweep(&s, ref, ZC_ERR_IO);
    t_frun_free(ref);
    t_swapdir_remove(&dir);
    t_assert_no_leaks();
}

Test(offload_faults, zc_faults_io_every_k_stage2_world4) { zc_faults_sweep(2); }
Test(offload_faults, zc_faults_io_every_k_stage3_world4) { zc_faults_sweep(3); }

/* An io item with no optimizer-state I/O to fire on is refused at create. */
Test(offload_faults, zc_faults_io_without_nvme_is_refused)
{
    setenv("ZC_FAULTS", "io:0:1", 1);
    t_run r;
    t_run_init(&r, 2, 1, ZC_DTYPE_F32);
    r.steps = 1;
    r.offload = "cpu";
    cr_assert(!t_engine_run(&r));
    cr_assert(strstr(t_run_error(&r), "ZC_FAULTS") && strstr(t_run_error(&r), "nvme"), "%s",
              t_run_error(&r));
    unsetenv("ZC_FAULTS");
    free(r.master);
    t_assert_no_leaks();
}
