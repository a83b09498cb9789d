/* DeepSpeed's symmetric int8 groups (src/quant/quant.h), against the rules
 * evaluated here in double:
 *  - the adaptive group count for known sizes, worked out from DeepSpeed's
 *    loop by hand (65536 -> 16 groups of 4096, 2^20 -> 256 of 4096, 8000 ->
 *    1, 24000 -> 3 of 8000, 16008 -> 3 of 5336, 8 x 2003 -> 2003 groups of 8:
 *    2003 is prime, so the loop climbs to it), and its refusal of a size
 *    that is not a multiple of 8 (for a multiple of 8 the loop always ends
 *    at a valid count: n / 8 groups at worst);
 *  - each element's q: the nearest integer (ties to even) to x * 128 / max
 *    over its group in fp16, clamped to [-128, 127]; the stored scale
 *    max / 128; a zero group's scale 1;
 *  - dequantized values within half a step (max / 256) of the fp16 input,
 *    plus the fp16 and target rounding; exact for values on the grid;
 *  - bf16 input is read through fp16 as DeepSpeed's kernel reads it. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "helpers.h"
#include "quant/quant.h"

Test(quant, group_counts)
{
    static const size_t n[] = {65536, 1u << 20, 8000, 24000, 16008, 64, 8 * 2003};
    static const size_t want[] = {16, 256, 1, 3, 3, 1, 2003};
    for (size_t i = 0; i < sizeof n / sizeof n[0]; i++) {
        size_t g = 0;
        cr_assert_eq(zc__quant_groups(n[i], &g), ZC_OK, "%zu: %s", n[i], zc_last_error());
        cr_assert_eq(g, want[i], "%zu elements: %zu groups, want %zu", n[i], g, want[i]);
    }
    size_t g = 7;
    cr_assert_eq(zc__quant_groups(100, &g), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "multiple of 8"), "%s", zc_last_error());
    cr_assert_eq(g, 0);
}

static uint64_t rng = 77;
static double unif(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) * 0x1p-53;
}

static void check_dtype(zc_dtype dt)
{
    const size_t n = 24000, groups = 3, per = n / groups;
    const size_t es = zc_dtype_size(dt);
    char *x = malloc(n * es), *back = malloc(n * es);
    int8_t *q = malloc(n);
    float sc[3];
    for (size_t i = 0; i < n; i++) {
        double v = (unif() - 0.5) * (i < per ? 1.0 : i < 2 * per ? 1e-3 : 300.0);
        if (i >= 2 * per && i < 2 * per + 8)
            v = 0.0;
        zc__store_f32(x, dt, i, (float)v);
    }
    cr_assert_eq(zc__quant_int8(x, dt, n, groups, q, sc), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc__dequant_int8(q, sc, n, groups, back, dt), ZC_OK);
    for (size_t g = 0; g < groups; g++) {
        double max = 0;
        for (size_t i = g * per; i < (g + 1) * per; i++) {
            const double h = zc__f16_to_f32(zc__f32_to_f16(zc__load_f32(x, dt, i)));
            max = fabs(h) > max ? fabs(h) : max;
        }
        const float scale = (float)(256.0 / (2.0 * max));
        cr_assert_eq(sc[g], 1.0f / scale, "group %zu: stored scale %a, want %a", g,
                     (double)sc[g], (double)(1.0f / scale));
        for (size_t i = g * per; i < (g + 1) * per; i++) {
            const double h = zc__f16_to_f32(zc__f32_to_f16(zc__load_f32(x, dt, i)));
            const double t = (double)(float)(h * scale); /* the kernel's fp32 product */
            double r = nearbyint(t);
            r = r < -128 ? -128 : r > 127 ? 127 : r;
            cr_assert_eq(q[i], (int8_t)r, "%s [%zu]: q %d, want %.0f (x %a)", zc_dtype_name(dt),
                         i, q[i], r, h);
            const double got = zc__load_f32(back, dt, i);
            const double step = max / 128.0;
            /* Half a step, the fp16 rounding of the result (relative, or
             * absolute among fp16's subnormals), the target's, the clamp. */
            const double tol = 0.5 * step + fabs(h) * (dt == ZC_DTYPE_BF16 ? 0x1p-8 : 0x1p-11) +
                               0x1p-25 + (r == 127 ? step : 0);
            cr_assert(fabs(got - h) <= tol, "%s [%zu]: %a back as %a (step %a)",
                      zc_dtype_name(dt), i, h, got, step);
        }
    }
    free(x), free(back), free(q);
}

Test(quant, int8_each_dtype_against_the_rules)
{
    check_dtype(ZC_DTYPE_F32);
    check_dtype(ZC_DTYPE_F16);
    check_dtype(ZC_DTYPE_BF16);
}

Test(quant, grid_values_come_back_exact_and_zero_groups)
{
    /* max 2.0: scale 64, step 1/64; k/64 for k in [-128, 127] is exact. */
    float x[256], back[256];
    int8_t q[256];
    float sc[1];
    for (int k = 0; k < 256; k++)
        x[k] = (float)(k - 128) / 64.0f;
    x[0] = -2.0f; /* the group's max */
    cr_assert_eq(zc__quant_int8(x, ZC_DTYPE_F32, 256, 1, q, sc), ZC_OK);
    cr_assert_eq(sc[0], 1.0f / 64.0f);
    cr_assert_eq(zc__dequant_int8(q, sc, 256, 1, back, ZC_DTYPE_F32), ZC_OK);
    for (int k = 0; k < 256; k++)
        cr_assert_eq(back[k], x[k], "%d: %a back as %a", k, (double)x[k], (double)back[k]);
    /* A group of zeros: scale 1, q 0, back 0. */
    float z[8] = {0}, zb[8];
    cr_assert_eq(zc__quant_int8(z, ZC_DTYPE_F32, 8, 1, q, sc), ZC_OK);
    cr_assert_eq(sc[0], 1.0f);
    cr_assert_eq(zc__dequant_int8(q, sc, 8, 1, zb, ZC_DTYPE_F32), ZC_OK);
    for (int k = 0; k < 8; k++)
        cr_assert_eq(zb[k], 0.0f);
    /* The largest value clamps one step short, as DeepSpeed's does. */
    float m[8] = {1, 0, 0, 0, 0, 0, 0, 0};
    cr_assert_eq(zc__quant_int8(m, ZC_DTYPE_F32, 8, 1, q, sc), ZC_OK);
    cr_assert_eq(q[0], 127);
    /* Refusals. */
    cr_assert_eq(zc__quant_int8(m, ZC_DTYPE_F32, 8, 3, q, sc), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc__quant_int8(m, ZC_DTYPE_I32, 8, 1, q, sc), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc__quant_int8(NULL, ZC_DTYPE_F32, 8, 1, q, sc), ZC_ERR_INVALID_ARG);
}
