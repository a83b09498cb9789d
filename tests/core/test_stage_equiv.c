/* Stage equivalence: for a fixed world size, ZeRO stages 0-3 give bitwise
 * identical fp32 master parameters after 20 steps with accumulation 1 (fp32
 * and bf16 parameters; fp16 too, with the dynamic loss scaler skipping the
 * same overflow steps everywhere), and agree within 1e-6 relative with
 * accumulation 4 (fp32). The reference for each world size is stage 0 (DDP). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>

#include "helpers.h"
#include "t_engine.h"
#include "t_runs.h"

static t_run *run_one(int stage, int world, zc_dtype dt, int accum)
{
    t_run cfg;
    t_run_init(&cfg, stage, world, dt);
    cfg.accum = accum;
    return t_run_trained(&cfg);
}

static void check_bitwise(zc_dtype dt)
{
    for (int world = 1; world <= 4; world++) {
        t_run *ref = run_one(0, world, dt, 1);
        /* The run must have trained: parameters moved from their start. */
        t_assert_trained(ref);
        for (int stage = 1; stage <= 3; stage++) {
            t_run *r = run_one(stage, world, dt, 1);
            char what[96];
            snprintf(what, sizeof what, "%s world %d: stage %d against stage 0",
                     zc_dtype_name(dt), world, stage);
            t_assert_same_training(r, ref, what);
            t_run_free(r);
        }
        t_run_free(ref);
    }
    t_assert_no_leaks();
}

Test(stage_equiv, bitwise_fp32) { check_bitwise(ZC_DTYPE_F32); }
Test(stage_equiv, bitwise_bf16) { check_bitwise(ZC_DTYPE_BF16); }
Test(stage_equiv, bitwise_fp16_dynamic_scale) { check_bitwise(ZC_DTYPE_F16); }

Test(stage_equiv, accumulation4_fp32_within_1e6)
{
    const int64_t n = t_total_numel();
    for (int world = 1; world <= 4; world++) {
        t_run *ref = run_one(0, world, ZC_DTYPE_F32, 4);
        for (int stage = 1; stage <= 3; stage++) {
            t_run *r = run_one(stage, world, ZC_DTYPE_F32, 4);
            /* Relative to each element's magnitude, floored at the model's RMS
             * value: an element that crosses zero is judged on the model's
             * scale. And the whole vector: ||a - b|| <= 1e-6 ||b||. */
            double ss_ref = 0, ss_diff = 0;
            for (int64_t i = 0; i < n; i++)
                ss_ref += (double)ref->master[i] * ref->master[i];
            const double rms = sqrt(ss_ref / (double)n);
            for (int64_t i = 0; i < n; i++) {
                double a = r->master[i], b = ref->master[i];
                ss_diff += (a - b) * (a - b);
                cr_assert_leq(fabs(a - b), 1e-6 * fmax(fabs(b), rms),
                              "world %d stage %d element %lld: %.9g vs stage 0 %.9g", world,
                              stage, (long long)i, a, b);
            }
            cr_assert_leq(sqrt(ss_diff), 1e-6 * sqrt(ss_ref), "world %d stage %d", world, stage);
            for (int s = 0; s < ref->steps; s++)
                cr_assert_leq(fabs(r->info[s].grad_norm - ref->info[s].grad_norm),
                              1e-6 * ref->info[s].grad_norm, "world %d stage %d step %d norm",
                              world, stage, s);
            t_run_free(r);
        }
        t_run_free(ref);
    }
    t_assert_no_leaks();
}
