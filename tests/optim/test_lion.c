/* Host Lion (src/optim/lion.h):
 *  - the coefficients against their double formulas;
 *  - the two sign rules on chosen values (+0, -0, NaN, +-inf, +-x), in the
 *    vector bodies and the tails of every variant this CPU runs: the moves
 *    are written here as the rules say, not computed by the formula;
 *  - the scalar reference and every SIMD variant against the float64
 *    trajectories of scripts/make_optim_fixtures.py (the paper's rule),
 *    within 1e-6 relative per step (ew_check.h: relative to the largest
 *    magnitude the value has had);
 *  - every SIMD variant bitwise equal to the scalar reference on random
 *    data: odd lengths and offsets (heads and tails), inf/NaN gradients and
 *    parameters, fp16/bf16 gradients and copies, both rules, with and
 *    without decay, and c nearly cancelling in a quarter of the elements
 *    (a variant the CPU lacks is skipped with its reason);
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
#include "optim/adam_isa.h"
#include "optim/lion.h"
#include "optim/threadpool.h"

Test(optim_lion, coefficients_match_double_formulas)
{
    zc_lion_hparams hp = {.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1};
    zc_lion_coeffs c = zc__lion_coeffs(&hp);
    cr_assert(c.lr == (float)3e-4 && c.beta1 == (float)0.9 && c.beta2 == (float)0.99);
    cr_assert(c.one_minus_beta1 == (float)0.1 && c.one_minus_beta2 == (float)(1.0 - 0.99));
    cr_assert(c.decay == (float)(1.0 - 3e-5), "decay %a", (double)c.decay);
    cr_assert_eq(c.sign_rule, ZC_LION_SIGN_BIT);
    hp.weight_decay = 0.0;
    hp.sign_rule = ZC_LION_SIGN_GT0;
    c = zc__lion_coeffs(&hp);
    cr_assert(c.decay == 1.0f && c.sign_rule == ZC_LION_SIGN_GT0);
}

/* ---- the sign rules on chosen values --------------------------------------- */

enum { NPAT = 8 };

/* Pattern k: (m, g) and the direction p moves under each rule (-1 down by
 * lr, +1 up), from lion.h's description of DeepSpeedCPULion (the sign bit
 * of c = b1 m + (1 - b1) g) and FusedLion (c > 0 moves down). */
typedef struct pat {
    float m, g;
    int bit, gt0;
} pat;

static pat pattern(int k)
{
    static const pat p[NPAT] = {
        {0.0f, 0.0f, -1, +1},        /* c = +0 */
        {-0.0f, -0.0f, +1, +1},      /* c = -0 */
        {0.0f, NAN, +1, +1},         /* c NaN (sign bit clear): up under both */
        {0.0f, -NAN, +1, +1},        /* c NaN (sign bit set) */
        {0.0f, 0.5f, -1, -1},        /* c > 0 */
        {0.01f, -0.5f, +1, +1},      /* c = 0.009 - 0.05 < 0 */
        {0.0f, INFINITY, -1, -1},    /* c = +inf */
        {0.0f, -INFINITY, +1, +1},   /* c = -inf */
    };
    return p[k];
}

static void check_rules(int variant, size_t n, uint32_t rule, bool decay)
{
    float *master = malloc(n * 4), *m = malloc(n * 4), *grad = malloc(n * 4);
    uint16_t *copy = malloc(n * 2);
    cr_assert(master && m && grad && copy);
    for (size_t i = 0; i < n; i++) {
        pat q = pattern((int)(i % NPAT));
        master[i] = 1.5f;
        m[i] = q.m;
        grad[i] = q.g;
    }
    zc_lion_hparams hp = {.lr = 0.125, .beta1 = 0.9, .beta2 = 0.99,
                          .weight_decay = decay ? 0.5 : 0.0, .sign_rule = rule};
    zc_lion_coeffs c = zc__lion_coeffs(&hp);
    zc_lion_shard s = {.master = master, .m = m, .grad = grad, .grad_dtype = ZC_DTYPE_F32,
                       .grad_scale = 1.0f, .param_out = copy, .param_out_dtype = ZC_DTYPE_BF16,
                       .n = n};
    cr_assert_eq(zc__lion_host_run(&s, &c, variant, 1), ZC_OK, "%s", zc_last_error());
    /* 1.5 * (1 - 0.0625) = 1.40625 and +-0.125 are exact in fp32. */
    const float base = decay ? 1.40625f : 1.5f;
    for (size_t i = 0; i < n; i++) {
        pat q = pattern((int)(i % NPAT));
        int dir = rule == ZC_LION_SIGN_GT0 ? q.gt0 : q.bit;
        float want = base + (float)dir * 0.125f;
        cr_assert(master[i] == want, "%s rule %u n=%zu: element %zu (m %g, g %g): p = %.9g, want %.9g",
                  zc__adam_variant(variant)->name, rule, n, i, (double)q.m, (double)q.g,
                  (double)master[i], (double)want);
        cr_assert_eq(copy[i], zc__f32_to_bf16(want));
        double mw = 0.99 * (double)q.m + (1.0 - 0.99) * (double)q.g;
        if (isnan(mw))
            cr_assert(isnan(m[i]), "m[%zu] = %g, want NaN", i, (double)m[i]);
        else if (isinf(mw) || mw == 0.0)
            cr_assert(m[i] == (float)mw, "m[%zu] = %g, want %g", i, (double)m[i], mw);
        else
            cr_assert(fabs(m[i] - mw) <= 1e-6 * fabs(mw), "m[%zu] = %.9g, want %.9g", i,
                      (double)m[i], mw);
    }
    free(master);
    free(m);
    free(grad);
    free(copy);
}

Test(optim_lion, sign_rules_on_chosen_values_in_every_variant)
{
    int tested = 0;
    for (int v = 0; v < zc__adam_variant_count(); v++) {
        const char *why = NULL;
        if (!zc__adam_variant_usable(v, &why)) {
            cr_log_info("variant %s skipped: %s", zc__adam_variant(v)->name, why);
            continue;
        }
        for (uint32_t rule = 0; rule < 2; rule++)
            for (int decay = 0; decay < 2; decay++) {
                check_rules(v, 3, rule, decay);       /* tail only */
                check_rules(v, 32 + 5, rule, decay);  /* vector bodies and a tail */
            }
        tested++;
    }
    cr_assert_geq(tested, 1);
    zc__pool_shutdown();
    t_assert_no_leaks();
}

/* ---- against the float64 reference trajectories ---------------------------- */

Test(optim_lion, variants_follow_the_reference_trajectories)
{
    json_t *root = ew_fixture_load("lion.json");
    const json_t *cases = json_object_get(root, "cases");
    int checked = 0;
    for (size_t ci = 0; ci < json_array_size(cases); ci++) {
        const json_t *fc = json_array_get(cases, ci);
        const char *name = json_string_value(json_object_get(fc, "name"));
        const size_t n = (size_t)ew_fixture_num(fc, "n");
        const int steps = (int)ew_fixture_num(fc, "steps");
        double *p0 = malloc(n * 8), *m0 = malloc(n * 8), *g = malloc(n * 8);
        double *pw = malloc(n * 8), *mw = malloc(n * 8), *ppeak = malloc(n * 8),
               *mpeak = malloc(n * 8);
        float *master = malloc(n * 4), *m = malloc(n * 4), *gf = malloc(n * 4);
        ew_fixture_array(fc, "master0", -1, p0, n);
        ew_fixture_array(fc, "state0", -1, m0, n);
        zc_lion_hparams hp = {.lr = ew_fixture_num(fc, "lr"),
                              .beta1 = ew_fixture_num(fc, "beta1"),
                              .beta2 = ew_fixture_num(fc, "beta2"),
                              .weight_decay = ew_fixture_num(fc, "weight_decay")};
        for (int v = 0; v < zc__adam_variant_count(); v++) {
            if (!zc__adam_variant_usable(v, NULL))
                continue;
            for (uint32_t rule = 0; rule < 2; rule++) { /* no c near 0: the rules agree */
                hp.sign_rule = rule;
                zc_lion_coeffs c = zc__lion_coeffs(&hp);
                for (size_t i = 0; i < n; i++) {
                    master[i] = (float)p0[i];
                    m[i] = (float)m0[i];
                    ppeak[i] = fabs(p0[i]);
                    mpeak[i] = fabs(m0[i]);
                }
                double worst = 0;
                for (int t = 0; t < steps; t++) {
                    ew_fixture_array(fc, "grads", t, g, n);
                    for (size_t i = 0; i < n; i++)
                        gf[i] = (float)g[i];
                    zc_lion_shard s = {.master = master, .m = m, .grad = gf,
                                       .grad_dtype = ZC_DTYPE_F32, .grad_scale = 1.0f, .n = n};
                    cr_assert_eq(zc__lion_host_run(&s, &c, v, 1), ZC_OK, "%s", zc_last_error());
                    ew_fixture_array(fc, "master", t, pw, n);
                    ew_fixture_array(fc, "state", t, mw, n);
                    char what[128];
                    snprintf(what, sizeof what, "%s %s rule %u step %d master", name,
                             zc__adam_variant(v)->name, rule, t + 1);
                    worst = fmax(worst, ew_assert_close(master, pw, ppeak, n, 1e-6, what));
                    snprintf(what, sizeof what, "%s %s rule %u step %d m", name,
                             zc__adam_variant(v)->name, rule, t + 1);
                    worst = fmax(worst, ew_assert_close(m, mw, mpeak, n, 1e-6, what));
                }
                cr_log_info("%s %s rule %u: largest relative difference %.3g", name,
                            zc__adam_variant(v)->name, rule, worst);
                checked++;
            }
        }
        free(p0), free(m0), free(g), free(pw), free(mw), free(ppeak), free(mpeak);
        free(master), free(m), free(gf);
    }
    cr_assert_geq(checked, 2 * (int)json_array_size(cases));
    json_decref(root);
    zc__pool_shutdown();
    t_assert_no_leaks();
}

/* ---- SIMD variants against the scalar reference ---------------------------- */

static zc_lion_shard lion_view(const zc_adam_shard *a)
{
    return (zc_lion_shard){.master = a->master, .m = a->m, .grad = a->grad,
                           .grad_dtype = a->grad_dtype, .grad_scale = a->grad_scale,
                           .param_out = a->param_out, .param_out_dtype = a->param_out_dtype,
                           .n = a->n};
}

static size_t assert_case_same(const ta_case *c, const char *what)
{
    size_t nan = ew_assert_same(c->ref.master, c->test.master, c->n, ZC_DTYPE_F32, what, "master");
    nan += ew_assert_same(c->ref.m, c->test.m, c->n, ZC_DTYPE_F32, what, "m");
    if (c->odt >= 0)
        nan += ew_assert_same(c->ref.param_out, c->test.param_out, c->n, (zc_dtype)c->odt, what,
                              "copy");
    return nan;
}

/* Makes c = b1 m + (1 - b1) g nearly cancel in every fourth element: m =
 * -(1 - b1) g / b1 rounded, so c is a rounding residue whose sign (all that
 * c contributes) tells apart arithmetics that round differently - an FMA
 * would flip many of them. */
static void near_cancel(ta_case *c, const zc_lion_coeffs *co)
{
    for (size_t i = 0; i < c->n; i += 4) {
        float g = zc__load_f32(c->ref.grad, c->ref.grad_dtype, i) * c->ref.grad_scale;
        float m = -(co->one_minus_beta1 * g) / co->beta1;
        if (isfinite(m))
            c->ref.m[i] = c->test.m[i] = m;
    }
}

static zc_lion_hparams random_hparams(uint64_t *rng, uint32_t rule, bool decay)
{
    return (zc_lion_hparams){
        .lr = 1e-4 + 1e-2 * t_rand_unit(rng),
        .beta1 = 0.8 + 0.15 * t_rand_unit(rng),
        .beta2 = 0.95 + 0.049 * t_rand_unit(rng),
        .weight_decay = decay ? 0.01 + t_rand_unit(rng) : 0.0,
        .sign_rule = rule,
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
    snprintf(label, sizeof label, "optim_lion_variants/%s", name);
    uint64_t rng = t_seed(label);
    zc_lion_fn fn = zc__adam_variant(idx)->lion_fn;
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
                        zc_lion_hparams hp = random_hparams(&rng, mode & 1, mode & 2);
                        zc_lion_coeffs co = zc__lion_coeffs(&hp);
                        near_cancel(&c, &co);
                        zc_lion_shard ref = lion_view(&c.ref), test = lion_view(&c.test);
                        zc__lion_scalar(&ref, &co);
                        fn(&test, &co);
                        char what[160];
                        snprintf(what, sizeof what, "%s n=%zu layout=%d grad=%s copy=%s rule=%d "
                                 "decay=%d", name, n, layout, zc_dtype_name(gdts[gi]),
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

Test(optim_lion_variants, avx2) { check_variant("avx2"); }
Test(optim_lion_variants, avx512) { check_variant("avx512"); }
Test(optim_lion_variants, avx512bf16) { check_variant("avx512bf16"); }

/* ---- the host entry ------------------------------------------------------- */

Test(optim_lion, host_entry_is_bitwise_alike_on_1_to_4_threads)
{
    uint64_t rng = t_seed("optim_lion/host_threads");
    const size_t n = 3 * ZC_ADAM_SMALL + 77; /* several tiles: the split is used */
    ta_case c;
    ta_case_init(&c, &rng, n, ZC_DTYPE_BF16, ZC_DTYPE_BF16, 1, false, true);
    float *p0 = malloc(n * 4), *m0 = malloc(n * 4);
    memcpy(p0, c.test.master, n * 4);
    memcpy(m0, c.test.m, n * 4);
    zc_lion_hparams hp = random_hparams(&rng, ZC_LION_SIGN_BIT, true);
    zc_lion_coeffs co = zc__lion_coeffs(&hp);
    zc_lion_shard ref = lion_view(&c.ref), test = lion_view(&c.test);
    zc__lion_scalar(&ref, &co);
    for (int t = 1; t <= 4; t++) {
        memcpy(c.test.master, p0, n * 4);
        memcpy(c.test.m, m0, n * 4);
        cr_assert_eq(zc__adam_host_threads(n, t), t);
        cr_assert_eq(zc__lion_host_run(&test, &co, -1, t), ZC_OK, "%s", zc_last_error());
        char what[64];
        snprintf(what, sizeof what, "host Lion on %d threads", t);
        assert_case_same(&c, what);
    }
    memcpy(c.test.master, p0, n * 4);
    memcpy(c.test.m, m0, n * 4);
    cr_assert_eq(zc__lion_host(&test, &co), ZC_OK, "%s", zc_last_error());
    assert_case_same(&c, "zc__lion_host");
    free(p0);
    free(m0);
    ta_case_free(&c);
    zc__pool_shutdown();
    t_assert_no_leaks();
}

Test(optim_lion, bad_shards_and_variants_are_refused)
{
    float x[2] = {1.0f, 2.0f};
    zc_lion_hparams hp = {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.99};
    zc_lion_coeffs c = zc__lion_coeffs(&hp);
    zc_lion_shard s = {.master = x, .m = NULL, .grad = x, .grad_dtype = ZC_DTYPE_F32,
                       .grad_scale = 1.0f, .n = 2};
    cr_assert_eq(zc__lion_host(&s, &c), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "NULL buffer"), "%s", zc_last_error());
    s.m = x;
    s.grad_dtype = ZC_DTYPE_F64;
    cr_assert_eq(zc__lion_host(&s, &c), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "fp64"), "%s", zc_last_error());
    s.grad_dtype = ZC_DTYPE_F32;
    s.param_out = x;
    s.param_out_dtype = ZC_DTYPE_I32;
    cr_assert_eq(zc__lion_host(&s, &c), ZC_ERR_INVALID_ARG);
    s.param_out = NULL;
    c.sign_rule = 7;
    cr_assert_eq(zc__lion_host(&s, &c), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "sign rule"), "%s", zc_last_error());
    cr_assert_eq(zc__lion_host(NULL, &c), ZC_ERR_INVALID_ARG);
    cr_assert(x[0] == 1.0f && x[1] == 2.0f, "a refused step must not touch the shard");
    c.sign_rule = ZC_LION_SIGN_BIT;
    for (int v = 0; v < zc__adam_variant_count(); v++)
        if (!zc__adam_variant_usable(v, NULL)) {
            cr_assert_eq(zc__lion_host_run(&s, &c, v, 1), ZC_ERR_UNSUPPORTED);
            cr_assert(x[0] == 1.0f);
        }
    cr_assert_eq(zc__lion_host_run(&s, &c, zc__adam_variant_count(), 1), ZC_ERR_UNSUPPORTED);
    t_assert_no_leaks();
}
