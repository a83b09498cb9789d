/* DeepSpeed's DynamicLossScaler, step by step.
 *
 * Each script below was written out by hand from the rules of
 * runtime/fp16/loss_scaler.py (see src/core/step/loss_scaler.h), not produced by
 * running the code: for every step the overflow flag, then the expected scale
 * and running hysteresis after the update, and whether the update must fail
 * (overflow with the scale already at min_loss_scale). The comment on each
 * line gives the arithmetic (i = iteration before the update, L = last
 * overflow iteration, stable = i - L - 1). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "config/config.h"
#include "core/step/loss_scaler.h"
#include "helpers.h"

typedef struct {
    bool overflow;
    double scale;   /* after the update */
    int64_t hyst;   /* cur_hysteresis after the update */
    bool error;     /* update must return ZC_ERR_LOSS_SCALE (state unchanged) */
} script_step;

#define O(sc, h) { true, (sc), (h), false }
#define C(sc, h) { false, (sc), (h), false }
#define FAIL(sc, h) { true, (sc), (h), true }

/* An fp16 configuration built field by field, so the scaler is tested
 * independently of the config setter. */
static zc_config fp16_cfg(int64_t power, int64_t window, int64_t hysteresis, bool consecutive,
                          double min_scale)
{
    zc_config c;
    memset(&c, 0, sizeof c);
    c.fp16.enabled = true;
    c.fp16.loss_scale = 0;
    c.fp16.initial_scale_power = power;
    c.fp16.loss_scale_window = window;
    c.fp16.hysteresis = hysteresis;
    c.fp16.consecutive_hysteresis = consecutive;
    c.fp16.min_loss_scale = min_scale;
    return c;
}

static void run_script(const char *name, const zc_config *cfg, const script_step *steps, size_t n)
{
    zc_loss_scaler s;
    zc__scaler_init(&s, cfg);
    cr_assert(s.dynamic, "%s: scaler must be dynamic", name);
    for (size_t k = 0; k < n; k++) {
        zc_loss_scaler before = s;
        zc_status rc = zc__scaler_update(&s, steps[k].overflow);
        if (steps[k].error) {
            cr_assert_eq(rc, ZC_ERR_LOSS_SCALE, "%s step %zu: expected the min-scale error, got %d",
                         name, k, (int)rc);
            cr_assert(strstr(zc_last_error(), "minimum") != NULL,
                      "%s step %zu: message should say the scale is at its minimum: '%s'", name,
                      k, zc_last_error());
            cr_assert(memcmp(&before, &s, sizeof s) == 0,
                      "%s step %zu: a failed update must leave the scaler unchanged", name, k);
        } else {
            cr_assert_eq(rc, ZC_OK, "%s step %zu: unexpected error %d: %s", name, k, (int)rc,
                         zc_last_error());
            cr_assert_eq(s.cur_iter, before.cur_iter + 1, "%s step %zu: iteration must advance",
                         name, k);
        }
        /* Scales are powers of two or the min: exact comparison is the claim. */
        cr_assert(s.scale == steps[k].scale, "%s step %zu (%s): scale %g, expected %g", name, k,
                  steps[k].overflow ? "overflow" : "clean", s.scale, steps[k].scale);
        cr_assert_eq(s.cur_hysteresis, steps[k].hyst,
                     "%s step %zu (%s): hysteresis %lld, expected %lld", name, k,
                     steps[k].overflow ? "overflow" : "clean", (long long)s.cur_hysteresis,
                     (long long)steps[k].hyst);
    }
}

/* window 2, hysteresis 2, non-consecutive, start 2^4, min 1. */
Test(loss_scaler, window2_hyst2)
{
    zc_config c = fp16_cfg(4, 2, 2, false, 1);
    static const script_step s[] = {
        C(16, 2), /* i0 L-1 stable 0: no growth */
        C(16, 2), /* i1 stable 1 */
        C(32, 2), /* i2 stable 2 %2==0: x2, refill */
        O(32, 1), /* i3 hyst 2 -> 1, scale kept; L=3 */
        O(16, 1), /* i4 cur_hyst 1: halve; not refilled; L=4 */
        O(8, 1),  /* i5 halve again at once; L=5 */
        C(8, 1),  /* i6 stable 0 */
        O(4, 1),  /* i7 still 1: halve; L=7 */
        C(4, 1),  /* i8 stable 0 */
        C(4, 1),  /* i9 stable 1 */
        C(8, 2),  /* i10 stable 2: x2 and refill to 2 */
        O(8, 1),  /* i11 delayed again; L=11 */
        C(8, 1),  /* i12 stable 0 */
        C(8, 1),  /* i13 stable 1 */
        C(16, 2), /* i14 stable 2: x2, refill */
        C(16, 2), /* i15 stable 3 */
        C(32, 2), /* i16 stable 4 */
    };
    run_script("w2h2", &c, s, sizeof s / sizeof s[0]);
}

/* window 3, hysteresis 3, consecutive_hysteresis on, start 2^3, min 2. */
Test(loss_scaler, window3_hyst3_consecutive_to_min)
{
    zc_config c = fp16_cfg(3, 3, 3, true, 2);
    static const script_step s[] = {
        O(8, 2),    /* i0 3 -> 2; L=0 */
        C(8, 3),    /* i1 consecutive: refill to 3; stable 0 */
        O(8, 2),    /* i2 3 -> 2; L=2 */
        O(8, 1),    /* i3 2 -> 1; L=3 */
        C(8, 3),    /* i4 refill; stable 0 */
        O(8, 2),    /* i5 L=5 */
        O(8, 1),    /* i6 L=6 */
        O(4, 1),    /* i7 at 1: halve; L=7 */
        O(2, 1),    /* i8 halve to max(2, 2) = 2; L=8 */
        C(2, 3),    /* i9 refill; stable 0 */
        O(2, 2),    /* i10 L=10 */
        O(2, 1),    /* i11 L=11 */
        FAIL(2, 1), /* i12 at 1 and scale == min: error, iteration not advanced */
        C(2, 3),    /* i12 again, clean: refill; stable 12-11-1 = 0 */
        C(2, 3),    /* i13 stable 1 */
        C(2, 3),    /* i14 stable 2 */
        C(4, 3),    /* i15 stable 3 %3==0: x2 */
        C(4, 3),    /* i16 stable 4 */
    };
    run_script("w3h3c", &c, s, sizeof s / sizeof s[0]);
}

/* The same overflow pattern without consecutive hysteresis: clean steps do
 * not refill, so the scale drops sooner and reaches the minimum. */
Test(loss_scaler, window3_hyst3_non_consecutive_to_min)
{
    zc_config c = fp16_cfg(3, 3, 3, false, 2);
    static const script_step s[] = {
        O(8, 2),    /* i0 3 -> 2; L=0 */
        C(8, 2),    /* i1 no refill; stable 0 */
        O(8, 1),    /* i2 2 -> 1; L=2 */
        O(4, 1),    /* i3 halve; L=3 */
        C(4, 1),    /* i4 stable 0 */
        O(2, 1),    /* i5 halve to 2 = min; L=5 */
        FAIL(2, 1), /* i6 at min: error */
        C(2, 1),    /* i6 clean: stable 0 */
        C(2, 1),    /* i7 stable 1 */
        C(2, 1),    /* i8 stable 2 */
        C(4, 3),    /* i9 stable 3: x2 and refill (non-consecutive) */
        O(4, 2),    /* i10 delayed; L=10 */
    };
    run_script("w3h3", &c, s, sizeof s / sizeof s[0]);
}

/* hysteresis 1 (delayed_shift == 1): every overflow halves; window 4. */
Test(loss_scaler, window4_hyst1)
{
    zc_config c = fp16_cfg(2, 4, 1, false, 1);
    static const script_step s[] = {
        C(4, 1),    /* i0 stable 0 */
        C(4, 1),    /* i1 stable 1 */
        C(4, 1),    /* i2 stable 2 */
        C(4, 1),    /* i3 stable 3 */
        C(8, 1),    /* i4 stable 4 %4==0: x2 */
        O(4, 1),    /* i5 halve; L=5 */
        O(2, 1),    /* i6 L=6 */
        O(1, 1),    /* i7 L=7, now at min 1 */
        FAIL(1, 1), /* i8 error */
        C(1, 1),    /* i8 stable 0 */
        C(1, 1),    /* i9 stable 1 */
        C(1, 1),    /* i10 stable 2 */
        C(1, 1),    /* i11 stable 3 */
        C(2, 1),    /* i12 stable 4: x2 */
        C(2, 1),    /* i13 stable 5 */
    };
    run_script("w4h1", &c, s, sizeof s / sizeof s[0]);
}

/* hysteresis 2 with consecutive refills and window 2: isolated overflows
 * never lower the scale, growth resumes two clean steps after each. */
Test(loss_scaler, window2_hyst2_consecutive_isolated_overflows)
{
    zc_config c = fp16_cfg(5, 2, 2, true, 1);
    static const script_step s[] = {
        O(32, 1), /* i0 L=0 */
        C(32, 2), /* i1 refill; stable 0 */
        O(32, 1), /* i2 L=2 */
        C(32, 2), /* i3 stable 0 */
        C(32, 2), /* i4 stable 1 */
        C(64, 2), /* i5 stable 2: x2 */
        O(64, 1), /* i6 L=6 */
        O(32, 1), /* i7 two in a row: halve */
        C(32, 2), /* i8 stable 0 */
        C(32, 2), /* i9 stable 1 */
        C(64, 2), /* i10 stable 2 */
    };
    run_script("w2h2c", &c, s, sizeof s / sizeof s[0]);
}

/* A min_loss_scale that is not a power of two: the halving clamps to it. */
Test(loss_scaler, clamps_to_min)
{
    zc_config c = fp16_cfg(3, 2, 1, false, 3);
    static const script_step s[] = {
        O(4, 1),    /* 8/2 */
        O(3, 1),    /* max(4/2, 3) = 3 */
        FAIL(3, 1), /* scale == min */
        C(3, 1),    /* i2 stable 0 */
        C(3, 1),    /* i3 stable 1 */
        C(6, 1),    /* i4 stable 2: x2 */
    };
    run_script("min3", &c, s, sizeof s / sizeof s[0]);
}

/* DeepSpeed's defaults (2^16, window 1000, hysteresis 2, min 1) through the
 * public config: the first doubling comes after 1001 clean steps (stable
 * counts from last_overflow_iter = -1 with a -1 offset). */
Test(loss_scaler, defaults_from_config)
{
    zc_config *cfg = NULL;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc_config_set(cfg, "fp16.enabled", "true"), ZC_OK, "%s", zc_last_error());
    zc_loss_scaler s;
    zc__scaler_init(&s, cfg);
    cr_assert(s.dynamic);
    cr_assert(s.scale == 65536.0, "initial scale %g", s.scale);
    cr_assert_eq(s.cur_hysteresis, 2);
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(zc__scaler_update(&s, false), ZC_OK);
    cr_assert(s.scale == 65536.0, "after 1000 clean steps: %g", s.scale);
    cr_assert_eq(zc__scaler_update(&s, false), ZC_OK);
    cr_assert(s.scale == 131072.0, "after 1001 clean steps: %g", s.scale);

    /* initial_scale_power and the other keys are honoured. */
    cr_assert_eq(zc_config_set(cfg, "fp16.initial_scale_power", "10"), ZC_OK, "%s",
                 zc_last_error());
    cr_assert_eq(zc_config_set(cfg, "fp16.hysteresis", "1"), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc_config_set(cfg, "fp16.min_loss_scale", "512"), ZC_OK, "%s",
                 zc_last_error());
    zc__scaler_init(&s, cfg);
    cr_assert(s.scale == 1024.0, "2^10: %g", s.scale);
    cr_assert_eq(zc__scaler_update(&s, true), ZC_OK);
    cr_assert(s.scale == 512.0);
    cr_assert_eq(zc__scaler_update(&s, true), ZC_ERR_LOSS_SCALE);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

/* fp16.loss_scale > 0: a static scale that overflows never move nor fail. */
Test(loss_scaler, static_scale)
{
    zc_config c = fp16_cfg(16, 1000, 2, false, 1);
    c.fp16.loss_scale = 128;
    zc_loss_scaler s;
    zc__scaler_init(&s, &c);
    cr_assert(!s.dynamic);
    cr_assert(s.scale == 128.0);
    for (int i = 0; i < 50; i++) {
        cr_assert_eq(zc__scaler_update(&s, i % 3 != 0), ZC_OK);
        cr_assert(s.scale == 128.0, "static scale moved to %g at %d", s.scale, i);
    }
    t_assert_no_leaks();
}

/* fp32 and bf16: scale 1, unchanged by anything. */
Test(loss_scaler, no_fp16_is_unit_scale)
{
    zc_config c = fp16_cfg(16, 2, 1, false, 1);
    c.fp16.enabled = false;
    zc_loss_scaler s;
    zc__scaler_init(&s, &c);
    cr_assert(!s.dynamic);
    cr_assert(s.scale == 1.0);
    for (int i = 0; i < 10; i++) {
        cr_assert_eq(zc__scaler_update(&s, i & 1), ZC_OK);
        cr_assert(s.scale == 1.0);
    }
    t_assert_no_leaks();
}
