/* Optimizer offload changes where the state lives, never the numbers: for
 * stages 1-3, worlds 1-4, fp32/bf16/fp16 and accumulation 1 and 4, training
 * with offload_optimizer "cpu" and "nvme" gives the same fp32 master
 * parameters (bitwise), grad norms and loss-scale sequence after 20 steps as
 * the same run without offload (the independent reference: the device home,
 * which the stage-equivalence tests tie to the unsharded reference). Also:
 * nvme with ratio 0.5 (stage 3, part of the chunks stay on the device), nvme
 * striped over two directories, pipelined and serial swapping, and the
 * staging path a GPU takes (D2H gradient, H2D output) forced on the host.
 * Every run must leave its nvme_path directories empty. */
#include <criterion/criterion.h>
#include <stdio.h>

#include "core/engine.h"
#include "helpers.h"
#include "t_engine.h"
#include "t_offload.h"
#include "t_runs.h"

static t_run *run_cfg(int stage, int world, zc_dtype dt, int accum, const char *offload,
                      const char *path_json, double ratio, bool pipeline)
{
    t_run cfg;
    t_run_init(&cfg, stage, world, dt);
    cfg.accum = accum;
    cfg.offload = offload;
    cfg.nvme_path_json = path_json;
    cfg.offload_ratio = ratio;
    cfg.pipeline = pipeline;
    cfg.buffer_count = pipeline ? 12 : 0;
    return t_run_trained(&cfg);
}

static void sweep(zc_dtype dt, int accum)
{
    t_swapdir dir;
    t_swapdir_make(&dir, "zc-offload-test");
    for (int world = 1; world <= 4; world++)
        for (int stage = 1; stage <= 3; stage++) {
            t_run *ref = run_cfg(stage, world, dt, accum, NULL, NULL, 0, false);
            t_assert_trained(ref);
            char what[96];
            t_run *cpu = run_cfg(stage, world, dt, accum, "cpu", NULL, 0, false);
            snprintf(what, sizeof what, "%s accum %d world %d stage %d cpu", zc_dtype_name(dt),
                     accum, world, stage);
            t_assert_same_training(cpu, ref, what);
            t_run_free(cpu);
            /* Serial swapping on odd worlds, pipelined on even ones: both
             * orders of I/O must give the same numbers. */
            t_run *nv = run_cfg(stage, world, dt, accum, "nvme", dir.json, 0, world % 2 == 0);
            snprintf(what, sizeof what, "%s accum %d world %d stage %d nvme", zc_dtype_name(dt),
                     accum, world, stage);
            t_assert_same_training(nv, ref, what);
            t_run_free(nv);
            cr_assert_eq(t_dir_entries(dir.path), 0, "swap files left in %s", dir.path);
            t_run_free(ref);
        }
    t_swapdir_remove(&dir);
    t_assert_no_leaks();
}

Test(offload_equiv, fp32_accum1) { sweep(ZC_DTYPE_F32, 1); }
Test(offload_equiv, bf16_accum1) { sweep(ZC_DTYPE_BF16, 1); }
Test(offload_equiv, fp16_accum1) { sweep(ZC_DTYPE_F16, 1); }
Test(offload_equiv, fp32_accum4) { sweep(ZC_DTYPE_F32, 4); }
Test(offload_equiv, bf16_accum4) { sweep(ZC_DTYPE_BF16, 4); }
Test(offload_equiv, fp16_accum4) { sweep(ZC_DTYPE_F16, 4); }

/* ratio 0.5 (stage 3 only, as in DeepSpeed) and two striped directories. */
Test(offload_equiv, nvme_ratio_half_and_two_dirs)
{
    t_swapdir d1, d2;
    t_swapdir_make(&d1, "zc-offload-test");
    t_swapdir_make(&d2, "zc-offload-test");
    char two[200];
    snprintf(two, sizeof two, "[\"%s\", \"%s\"]", d1.path, d2.path);
    const zc_dtype dts[] = {ZC_DTYPE_F32, ZC_DTYPE_BF16, ZC_DTYPE_F16};
    for (int di = 0; di < 3; di++)
        for (int world = 1; world <= 4; world += 3)
            for (int accum = 1; accum <= 4; accum += 3) {
                char what[96];
                t_run *ref = run_cfg(3, world, dts[di], accum, NULL, NULL, 0, false);
                t_run *half = run_cfg(3, world, dts[di], accum, "nvme", d1.json, 0.5, true);
                snprintf(what, sizeof what, "%s world %d accum %d ratio 0.5",
                         zc_dtype_name(dts[di]), world, accum);
                t_assert_same_training(half, ref, what);
                t_run_free(half);
                for (int stage = 1; stage <= 3; stage++) {
                    t_run *sref = stage == 3 ? ref
                                             : run_cfg(stage, world, dts[di], accum, NULL, NULL,
                                                       0, false);
                    t_run *striped = run_cfg(stage, world, dts[di], accum, "nvme", two, 0, true);
                    snprintf(what, sizeof what, "%s world %d accum %d stage %d two dirs",
                             zc_dtype_name(dts[di]), world, accum, stage);
                    t_assert_same_training(striped, sref, what);
                    t_run_free(striped);
                    if (sref != ref)
                        t_run_free(sref);
                }
                t_run_free(ref);
                cr_assert_eq(t_dir_entries(d1.path) + t_dir_entries(d2.path), 0,
                             "swap files left behind");
            }
    t_swapdir_remove(&d1);
    t_swapdir_remove(&d2);
    t_assert_no_leaks();
}

/* The GPU path's copies (gradient shard D2H into pinned staging, output H2D
 * from it), run on the host: still bitwise the device-home result. */
Test(offload_equiv, staged_copies_as_on_a_gpu)
{
    t_swapdir dir;
    t_swapdir_make(&dir, "zc-offload-test");
    zc__opt_force_staging(true);
    const zc_dtype dts[] = {ZC_DTYPE_F32, ZC_DTYPE_BF16, ZC_DTYPE_F16};
    for (int di = 0; di < 3; di++)
        for (int stage = 1; stage <= 3; stage++)
            for (int accum = 1; accum <= 4; accum += 3) {
                char what[96];
                zc__opt_force_staging(false);
                t_run *ref = run_cfg(stage, 2, dts[di], accum, NULL, NULL, 0, false);
                zc__opt_force_staging(true);
                t_run *cpu = run_cfg(stage, 2, dts[di], accum, "cpu", NULL, 0, false);
                t_run *nv = run_cfg(stage, 2, dts[di], accum, "nvme", dir.json, 0, true);
                snprintf(what, sizeof what, "staged %s stage %d accum %d cpu",
                         zc_dtype_name(dts[di]), stage, accum);
                t_assert_same_training(cpu, ref, what);
                snprintf(what, sizeof what, "staged %s stage %d accum %d nvme",
                         zc_dtype_name(dts[di]), stage, accum);
                t_assert_same_training(nv, ref, what);
                t_run_free(cpu);
                t_run_free(nv);
                t_run_free(ref);
            }
    zc__opt_force_staging(false);
    t_swapdir_remove(&dir);
    t_assert_no_leaks();
}
