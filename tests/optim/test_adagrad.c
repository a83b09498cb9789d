/* Host Adagrad (src/optim/adagrad.h):
 *  - the coefficients against their double formulas (lr_decay);
 *  - the update on chosen values whose results are exact, written here from
 *    the rules (L2 term into the accumulator, eps after the square root, the
 *    numerator with or without the L2 term), in the vector bodies and the
 *    tails of every variant this CPU runs;
 *  - the scalar reference and every SIMD variant against the float64
 *    trajectories of scripts/make_optim_fixtures.py (torch.optim.Adagrad,
 *    and DeepSpeedCPUAdagrad's rule), within 1e-6 relative per step
 *    (ew_check.h: relative to the largest magnitude the value has had);
 *  - every SIMD variant bitwise equal to the scalar reference on random
 *    data: odd lengths and offsets, inf/NaN gradients and parameters,
 *    fp16/bf16 gradients and copies, both numerators, with and without
 *    decay (a variant the CPU lacks is skipped with its reason);
 *  - the host entry bitwise alike on 1 to 4 threads, and its refusals. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "adam_case.h"
#include "base/dtype.h"
#include "ew_check.h"
#include "helpers.h"
#include "optim/adagrad.h"
#include "optim/adam_isa.h"
#include "optim/threadpool.h"

Test(optim_adagrad, coefficients_match_double_formulas)
{
    zc_adagrad_hparams hp = {.lr = 1e-2, .eps = 1e-10, .weight_decay = 0.1, .lr_decay = 0.25,
                             .numerator = ZC_ADAGRAD_NUM_DECAYED};
    for (int64_t t = 1; t <= 50; t++) {
        zc_adagrad_coeffs c = zc__adagrad_coeffs(&hp, t);
        double clr = 1e-2 / (1.0 + 0.25 * (double)(t - 1));
        cr_assert(c.step_size == (float)clr, "step %lld: %a, want %a", (long long)t,
                  (double)c.step_size, (double)(float)clr);
        cr_assert(c.eps == (float)1e-10 && c.l2_decay == (float)0.1);
        cr_assert_eq(c.numerator, ZC_ADAGRAD_NUM_DECAYED);
    }
    hp.lr_decay = 0.0;
    hp.weight_decay = 0.0;
    hp.numerator = ZC_ADAGRAD_NUM_RAW;
    zc_adagrad_coeffs c = zc__adagrad_coeffs(&hp, 1000);
    cr_assert(c.step_size == (float)1e-2 && c.l2_decay == 0.0f);
    cr_assert_eq(c.numerator, ZC_ADAGRAD_NUM_RAW);
}

/* ---- the update on chosen values ------------------------------------------ */

/* (p, sum before, g) and the results under each numerator, exact in fp32.
 * Set A: lr 0.25, eps 0, weight_decay 0.5: gd = g + 0.5 p enters the sum;
 * DeepSpeedCPUAdagrad divides g, torch.optim.Adagrad gd. Set B: lr 0.25,
 * eps 1, no decay: eps is added after the square root (sqrt(9) + 1 = 4). */
typedef struct pat {
    float p, s0, g;
    float sum, p_raw, p_decayed; /* NaN: NaN expected */
} pat;

enum { NPAT = 4 };

static const pat set_a[NPAT] = {
    {1.0f, 0.4375f, 0.25f, 1.0f, 0.9375f, 0.8125f},    /* gd 0.75: sum 1, d 1 */
    {-1.0f, 0.4375f, -0.25f, 1.0f, -0.9375f, -0.8125f},
    {2.0f, 0.0f, 0.0f, 1.0f, 2.0f, 1.75f},             /* no gradient, gd 1 */
    {1.0f, 0.0f, NAN, NAN, NAN, NAN},
};
static const pat set_b[NPAT] = {
    {1.0f, 0.0f, 3.0f, 9.0f, 0.8125f, 0.8125f},        /* 1 - 0.25 * 3 / (3 + 1) */
    {1.0f, 0.0f, -3.0f, 9.0f, 1.1875f, 1.1875f},
    {1.0f, 0.0f, 0.0f, 0.0f, 1.0f, 1.0f},              /* d = eps: no NaN */
    {INFINITY, 4.0f, 0.0f, 4.0f, INFINITY, INFINITY},
};

static void check_values(int variant, size_t n, const pat *set, bool decay, uint32_t num)
{
    float *master = malloc(n * 4), *sum = malloc(n * 4), *grad = malloc(n * 4);
    uint16_t *copy = malloc(n * 2);
    cr_assert(master && sum && grad && copy);
    for (size_t i = 0; i < n; i++) {
        master[i] = set[i % NPAT].p;
        sum[i] = set[i % NPAT].s0;
        grad[i] = set[i % NPAT].g;
    }
    zc_adagrad_hparams hp = {.lr = 0.25, .eps = decay ? 0.0 : 1.0,
                             .weight_decay = decay ? 0.5 : 0.0, .numerator = num};
    zc_adagrad_coeffs c = zc__adagrad_coeffs(&hp, 1);
    zc_adagrad_shard s = {.master = master, .sum = sum, .grad = grad,
                          .grad_dtype = ZC_DTYPE_F32, .grad_scale = 1.0f, .param_out = copy,
                          .param_out_dtype = ZC_DTYPE_F16, .n = n};
    cr_assert_eq(zc__adagrad_host_run(&s, &c, variant, 1), ZC_OK, "%s", zc_last_error());
    for (size_t i = 0; i < n; i++) {
        const pat *q = &set[i % NPAT];
        float want = num == ZC_ADAGRAD_NUM_RAW ? q->p_raw : q->p_decayed;
        if (isnan(want)) {
            cr_assert(isnan(master[i]) && isnan(sum[i]), "element %zu: p %g sum %g, want NaN", i,
                      (double)master[i], (double)sum[i]);
            continue;
        }
        cr_assert(master[i] == want && sum[i] == q->sum,
                  "%s numerator %u n=%zu element %zu (p %g, sum %g, g %g): p = %.9g sum = %.9g, "
                  "want %.9g and %.9g", zc__adam_variant(variant)->name, num, n, i,
                  (double)q->p, (double)q->s0, (double)q->g, (double)master[i], (double)sum[i],
                  (double)want, (double)q->sum);
        cr_assert_eq(copy[i], zc__f32_to_f16(want));
    }
    free(master);
    free(sum);
    free(grad);
    free(copy);
}

Test(optim_adagrad, chosen_values_in_every_variant)
{
    int tested = 0;
    for (int v = 0; v < zc__adam_variant_count(); v++) {
        const char *why = NULL;
        if (!zc__adam_variant_usable(v, &why)) {
            cr_log_info("variant %s skipped: %s", zc__adam_variant(v)->name, why);
            continue;
        }
        for (uint32_t num = 0; num < 2; num++) {
            check_values(v, 3, set_a, true, num);
            check_values(v, 32 + 5, set_a, true, num);
            check_values(v, 3, set_b, false, num);
            check_values(v, 32 + 5, set_b, false, num);
        }
        tested++;
    }
    cr_assert_geq(tested, 1);
    zc__pool_shutdown();
    t_assert_no_leaks();
}

/* ---- against the float64 reference trajectories ---------------------------- */

Test(optim_adagrad, variants_follow_the_reference_trajectories)
{
    json_t *root = ew_fixture_load("adagrad.json");
    const json_t *cases = json_object_get(root, "cases");
    int checked = 0;
    for (size_t ci = 0; ci < json_array_size(cases); ci++) {
        const json_t *fc = json_array_get(cases, ci);
        const char *name = json_string_value(json_object_get(fc, "name"));
        const char *numer = json_string_value(json_object_get(fc, "numerator"));
        cr_assert(numer, "%s: no numerator", name);
        const size_t n = (size_t)ew_fixture_num(fc, "n");
        const int steps = (int)ew_fixture_num(fc, "steps");
        double *p0 = malloc(n * 8), *s0 = malloc(n * 8), *g = malloc(n * 8);
        double *pw = malloc(n * 8), *sw = malloc(n * 8), *ppeak = malloc(n * 8),
               *speak = malloc(n * 8);
        float *master = malloc(n * 4), *sum = malloc(n * 4), *gf = malloc(n * 4);
        ew_fixture_array(fc, "master0", -1, p0, n);
        ew_fixture_array(fc, "state0", -1, s0, n);
        zc_adagrad_hparams hp = {
            .lr = ew_fixture_num(fc, "lr"), .eps = ew_fixture_num(fc, "eps"),
            .weight_decay = ew_fixture_num(fc, "weight_decay"),
            .lr_decay = ew_fixture_num(fc, "lr_decay"),
            .numerator = !strcmp(numer, "decayed") ? ZC_ADAGRAD_NUM_DECAYED : ZC_ADAGRAD_NUM_RAW};
        for (size_t i = 0; i < n; i++) /* the accumulator starts at the initial value */
            cr_assert(s0[i] == ew_fixture_num(fc, "initial_accumulator_value"));
        for (int v = 0; v < zc__adam_variant_count(); v++) {
            if (!zc__adam_variant_usable(v, NULL))
                continue;
            for (size_t i = 0; i < n; i++) {
                master[i] = (float)p0[i];
                sum[i] = (float)s0[i];
                ppeak[i] = fabs(p0[i]);
                speak[i] = fabs(s0[i]);
            }
            double worst = 0;
            for (int t = 0; t < steps; t++) {
                zc_adagrad_coeffs c = zc__adagrad_coeffs(&hp, t + 1);
                ew_fixture_array(fc, "grads", t, g, n);
                for (size_t i = 0; i < n; i++)
                    gf[i] = (float)g[i];
                zc_adagrad_shard s = {.master = master, .sum = sum, .grad = gf,
                                      .grad_dtype = ZC_DTYPE_F32, .grad_scale = 1.0f, .n = n};
                cr_assert_eq(zc__adagrad_host_run(&s, &c, v, 1), ZC_OK, "%s", zc_last_error());
                ew_fixture_array(fc, "master", t, pw, n);
                ew_fixture_array(fc, "state", t, sw, n);
                char what[128];
                snprintf(what, sizeof what, "%s %s step %d master", name,
                         zc__adam_variant(v)->name, t + 1);
                worst = fmax(worst, ew_assert_close(master, pw, ppeak, n, 1e-6, what));
                snprintf(what, sizeof what, "%s %s step %d sum", name, zc__adam_variant(v)->name,
                         t + 1);
                worst = fmax(worst, ew_assert_close(sum, sw, speak, n, 1e-6, what));
            }
            cr_log_info("%s %s: largest relative difference %.3g", name,
                        zc__adam_variant(v)->name, worst);
            checked++;
        }
        free(p0), free(s0), free(g), free(pw), free(sw), free(ppeak), free(speak);
        free(master), free(sum), free(gf);
    }
    cr_assert_geq(checked, (int)json_array_size(cases));
    json_decref(root);
    zc__pool_shutdown();
    t_assert_no_leaks();
}

/* ---- SIMD variants against the scalar reference ---------------------------- */

/* The case's v (non-negative, with zeros and denormals among the specials)
 * is the accumulator. */
static zc_adagrad_shard adagrad_view(const zc_adam_shard *a)
{
    return (zc_adagrad_shard){.master = a->master, .sum = a->v, .grad = a->grad,
                              .grad_dtype = a->grad_dtype, .grad_scale = a->grad_scale,
                              .param_out = a->param_out, .param_out_dtype = a->param_out_dtype,
                              .n = a->n};
}

static size_t assert_case_same(const ta_case *c, const char *what)
{
    size_t nan = ew_assert_same(c->ref.master, c->test.master, c->n, ZC_DTYPE_F32, what, "master");
    nan += ew_assert_same(c->ref.v, c->test.v, c->n, ZC_DTYPE_F32, what, "sum");
    if (c->odt >= 0)
        nan += ew_assert_same(c->ref.param_out, c->test.param_out, c->n, (zc_dtype)c->odt, what,
                              "copy");
    return nan;
}

static zc_adagrad_hparams random_hparams(uint64_t *rng, uint32_t num, bool decay)
{
    return (zc_adagrad_hparams){
        .lr = 1e-4 + 1e-1 * t_rand_unit(rng),
        .eps = t_rand_unit(rng) < 0.5 ? 1e-10 : 1e-6,
        .weight_decay = decay ? 0.01 + t_rand_unit(rng) : 0.0,
        .lr_decay = t_rand_unit(rng) < 0.5 ? 0.0 : t_rand_unit(rng),
        .numerator = num,
    };
}

static void check_variant(const char *name)
{
    int idx = -1;
    for (int i = 0; i < zc__adam_variant_count(); i++)
        if (!strcmp(zc__adam_variant(i)->name, name))
            idx = i;
    cr_assert_geq(idx, 0, "variant %s missing from the table", name);
    const char *why = NULL;
    if (!zc__adam_variant_usable(idx, &why))
        cr_skip_test("variant %s: %s (needs %s)", name, why, zc__adam_variant(idx)->needs);
    char label[64];
    snprintf(label, sizeof label, "optim_adagrad_variants/%s", name);
    uint64_t rng = t_seed(label);
    zc_adagrad_fn fn = zc__adam_variant(idx)->adagrad_fn;
    static const size_t sizes[] = {1, 7, 15, 63, 1000, (1u << 18) + 13};
    static const zc_dtype gdts[] = {ZC_DTYPE_F32, ZC_DTYPE_F16, ZC_DTYPE_BF16};
    static const int odts[] = {-1, ZC_DTYPE_F16, ZC_DTYPE_BF16, ZC_DTYPE_F32};
    int cases = 0;
    size_t nan_differ = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
        for (int layout = 0; layout < 3; layout++) /* aligned, all +1, master only +1 */
            for (int gi = 0; gi < 3; gi++)
                for (int oi = 0; oi < 4; oi++)
                    for (int mode = 0; mode < 4; mode++) {
                        size_t n = sizes[si];
                        if (n > 1000 && mode != 3 && !(gi == 0 && oi == 2))
                            continue;
                        ta_case c;
                        ta_case_init(&c, &rng, n, gdts[gi], odts[oi], layout ? 1 : 0,
                                     layout == 2, true);
                        zc_adagrad_hparams hp = random_hparams(&rng, mode & 1, mode & 2);
                        int64_t t = 1 + (int64_t)(t_rand_u64(&rng) % 100);
                        zc_adagrad_coeffs co = zc__adagrad_coeffs(&hp, t);
                        zc_adagrad_shard ref = adagrad_view(&c.ref), test = adagrad_view(&c.test);
                        zc__adagrad_scalar(&ref, &co);
                        fn(&test, &co);
                        char what[160];
                        snprintf(what, sizeof what, "%s n=%zu layout=%d grad=%s copy=%s "
                                 "numerator=%d decay=%d", name, n, layout, zc_dtype_name(gdts[gi]),
                                 odts[oi] < 0 ? "none" : zc_dtype_name((zc_dtype)odts[oi]),
                                 mode & 1, (mode & 2) != 0);
                        nan_differ += assert_case_same(&c, what);
                        ta_case_free(&c);
                        cases++;
                    }
    cr_log_info("%s: %d cases bitwise equal; %zu NaN elements with other payloads", name, cases,
                nan_differ);
    t_assert_no_leaks();
}

Test(optim_adagrad_variants, avx2) { check_variant("avx2"); }
Test(optim_adagrad_variants, avx512) { check_variant("avx512"); }
Test(optim_adagrad_variants, avx512bf16) { check_variant("avx512bf16"); }

/* ---- the host entry ------------------------------------------------------- */

Test(optim_adagrad, host_entry_is_bitwise_alike_on_1_to_4_threads)
{
    uint64_t rng = t_seed("optim_adagrad/host_threads");
    const size_t n = 3 * ZC_ADAM_SMALL + 77; /* several tiles: the split is used */
    ta_case c;
    ta_case_init(&c, &rng, n, ZC_DTYPE_BF16, ZC_DTYPE_BF16, 1, false, true);
    float *p0 = malloc(n * 4), *m0 = malloc(n * 4);
    memcpy(p0, c.test.master, n * 4);
    memcpy(m0, c.test.v, n * 4);
    zc_adagrad_hparams hp = random_hparams(&rng, ZC_ADAGRAD_NUM_RAW, true);
    zc_adagrad_coeffs co = zc__adagrad_coeffs(&hp, 3);
    zc_adagrad_shard ref = adagrad_view(&c.ref), test = adagrad_view(&c.test);
    zc__adagrad_scalar(&ref, &co);
    for (int t = 1; t <= 4; t++) {
        memcpy(c.test.master, p0, n * 4);
        memcpy(c.test.v, m0, n * 4);
        cr_assert_eq(zc__adam_host_threads(n, t), t);
        cr_assert_eq(zc__adagrad_host_run(&test, &co, -1, t), ZC_OK, "%s", zc_last_error());
        char what[64];
        snprintf(what, sizeof what, "host Adagrad on %d threads", t);
        assert_case_same(&c, what);
    }
    memcpy(c.test.master, p0, n * 4);
    memcpy(c.test.v, m0, n * 4);
    cr_assert_eq(zc__adagrad_host(&test, &co), ZC_OK, "%s", zc_last_error());
    assert_case_same(&c, "zc__adagrad_host");
    free(p0);
    free(m0);
    ta_case_free(&c);
    zc__pool_shutdown();
    t_assert_no_leaks();
}

Test(optim_adagrad, bad_shards_and_variants_are_refused)
{
    float x[2] = {1.0f, 2.0f};
    zc_adagrad_hparams hp = {.lr = 0.1, .eps = 1e-10};
    zc_adagrad_coeffs c = zc__adagrad_coeffs(&hp, 1);
    zc_adagrad_shard s = {.master = x, .sum = NULL, .grad = x, .grad_dtype = ZC_DTYPE_F32,
                          .grad_scale = 1.0f, .n = 2};
    cr_assert_eq(zc__adagrad_host(&s, &c), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "NULL buffer"), "%s", zc_last_error());
    s.sum = x;
    s.grad_dtype = ZC_DTYPE_F64;
    cr_assert_eq(zc__adagrad_host(&s, &c), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "fp64"), "%s", zc_last_error());
    s.grad_dtype = ZC_DTYPE_F32;
    s.param_out = x;
    s.param_out_dtype = ZC_DTYPE_I32;
    cr_assert_eq(zc__adagrad_host(&s, &c), ZC_ERR_INVALID_ARG);
    s.param_out = NULL;
    c.numerator = 9;
    cr_assert_eq(zc__adagrad_host(&s, &c), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "numerator"), "%s", zc_last_error());
    cr_assert_eq(zc__adagrad_host(NULL, &c), ZC_ERR_INVALID_ARG);
    cr_assert(x[0] == 1.0f && x[1] == 2.0f, "a refused step must not touch the shard");
    c.numerator = ZC_ADAGRAD_NUM_RAW;
    for (int v = 0; v < zc__adam_variant_count(); v++)
        if (!zc__adam_variant_usable(v, NULL)) {
            cr_assert_eq(zc__adagrad_host_run(&s, &c, v, 1), ZC_ERR_UNSUPPORTED);
            cr_assert(x[0] == 1.0f);
        }
    cr_assert_eq(zc__adagrad_host_run(&s, &c, zc__adam_variant_count(), 1), ZC_ERR_UNSUPPORTED);
    t_assert_no_leaks();
}
