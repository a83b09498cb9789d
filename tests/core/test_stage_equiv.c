/* Stage equivalence: for a fixed world size, ZeRO stages 0-3 give bitwise
 * identical fp32 master parameters after 20 steps with accumulation 1 (fp32
 * and bf16 parameters; fp16 too, with the dynamic loss scaler skipping the
 * same overflow steps everywhere), and agree within 1e-6 relative with
 * accumulation 4 (fp32). The reference for each world size is stage 0 (DDP). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "t_engine.h"

static t_run *run_one(int stage, int world, zc_dtype dt, int accum)
{
    t_run *r = calloc(1, sizeof *r);
    t_run_init(r, stage, world, dt);
    r->accum = accum;
    bool ok = t_engine_run(r);
    cr_assert(ok, "stage %d world %d %s accum %d: %s", stage, world, zc_dtype_name(dt), accum,
              t_run_error(r));
    return r;
}

static void free_run(t_run *r)
{
    free(r->master);
    free(r);
}

static void check_bitwise(zc_dtype dt)
{
    const int64_t n = t_total_numel();
    for (int world = 1; world <= 4; world++) {
        t_run *ref = run_one(0, world, dt, 1);
        /* The run must have trained: parameters moved from their start. */
        int skipped = 0;
        for (int s = 0; s < ref->steps; s++)
            skipped += ref->info[s].skipped;
        cr_assert_lt(skipped, ref->steps, "every step skipped");
        for (int stage = 1; stage <= 3; stage++) {
            t_run *r = run_one(stage, world, dt, 1);
            int64_t diff = 0, first = -1;
            for (int64_t i = 0; i < n; i++)
                if (memcmp(&r->master[i], &ref->master[i], sizeof(float))) {
                    diff++;
                    if (first < 0)
                        first = i;
                }
            cr_assert_eq(diff, 0,
                         "%s world %d: stage %d differs from stage 0 in %lld of %lld elements "
                         "(first %lld: %a vs %a)",
                         zc_dtype_name(dt), world, stage, (long long)diff, (long long)n,
                         (long long)first, first >= 0 ? r->master[first] : 0.0f,
                         first >= 0 ? ref->master[first] : 0.0f);
            for (int s = 0; s < ref->steps; s++) {
                cr_assert(r->info[s].grad_norm == ref->info[s].grad_norm,
                          "%s world %d stage %d step %d: norm %.17g vs stage 0 %.17g",
                          zc_dtype_name(dt), world, stage, s, r->info[s].grad_norm,
                          ref->info[s].grad_norm);
                cr_assert_eq(r->info[s].skipped, ref->info[s].skipped);
                cr_assert(r->info[s].loss_scale == ref->info[s].loss_scale);
            }
            free_run(r);
        }
        free_run(ref);
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
            free_run(r);
        }
        free_run(ref);
    }
    t_assert_no_leaks();
}
