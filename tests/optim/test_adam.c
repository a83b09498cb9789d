/* Host Adam: the scalar reference against an independent double-precision
 * evaluation of the formula, every compiled SIMD variant that this CPU runs
 * against the scalar reference, and the ZC_CPU_ISA selection. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "adam_case.h"
#include "base/dtype.h"
#include "helpers.h"
#include "optim/adam_isa.h"
#include "optim/threadpool.h"

/* ---- coefficients and the scalar reference ------------------------------- */

Test(optim_adam, coefficients_match_double_formulas)
{
    zc_adam_hparams hp = {.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                          .weight_decay = 0.1, .adamw = true, .bias_correction = true};
    for (int64_t t = 1; t <= 2000; t += 37) {
        zc_adam_coeffs c = zc__adam_coeffs(&hp, t);
        double bc1 = 1.0, bc2 = 1.0;
        for (int64_t k = 0; k < t; k++) { /* beta^t by repeated products, not pow */
            bc1 *= 0.9;
            bc2 *= 0.95;
        }
        bc1 = 1.0 - bc1;
        bc2 = 1.0 - bc2;
        cr_assert_leq(t_ulp_diff_f32(c.step_size, (float)(3e-4 / bc1)), 1, "step %lld", (long long)t);
        cr_assert_leq(t_ulp_diff_f32(c.bc2_rsqrt, (float)(1.0 / sqrt(bc2))), 1);
        cr_assert_eq(c.decoupled_decay, (float)(3e-4 * 0.1));
        cr_assert_eq(c.l2_decay, 0.0f);
        cr_assert_eq(c.one_minus_beta2, (float)0.05);
    }
    hp.adamw = false;
    hp.bias_correction = false;
    zc_adam_coeffs c = zc__adam_coeffs(&hp, 7);
    cr_assert_eq(c.step_size, (float)3e-4);
    cr_assert_eq(c.bc2_rsqrt, 1.0f);
    cr_assert_eq(c.l2_decay, (float)0.1);
    cr_assert_eq(c.decoupled_decay, 0.0f);
}

/* DeepSpeedCPUAdam's coefficients (optimizer.params.deepspeed_arithmetic):
 * its beta powers are a running fp32 product, taken from pow() when the
 * step jumps (a resume) or the betas change (OneCycle), and the bias
 * corrections are fp32 expressions of them. Recomputed here in fp32. */
Test(optim_adam, deepspeed_coefficients_follow_its_running_powers)
{
    zc_adam_hparams hp = {.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                          .weight_decay = 0.01, .adamw = true, .bias_correction = true};
    zc_adam_ds_state st = zc__adam_ds_fresh(hp.beta1, hp.beta2);
    float b1t = 1.0f, b2t = 1.0f;
    for (int64_t t = 1; t <= 300; t++) {
        zc__adam_ds_increment(&st, t, hp.beta1, hp.beta2);
        b1t *= 0.9f;
        b2t *= 0.999f;
        cr_assert(st.beta1_t == b1t && st.beta2_t == b2t, "step %lld: powers %a %a, want %a %a",
                  (long long)t, (double)st.beta1_t, (double)st.beta2_t, (double)b1t, (double)b2t);
        zc_adam_coeffs c = zc__adam_coeffs_ds(&st, &hp);
        cr_assert(c.step_size == 3e-4f / (1.0f - b1t), "step %lld step size", (long long)t);
        cr_assert(c.bc2_rsqrt == 1.0f / sqrtf(1.0f - b2t), "step %lld bc2", (long long)t);
        cr_assert(c.decoupled_decay == 3e-4f * 0.01f && c.l2_decay == 0.0f);
        cr_assert(c.one_minus_beta1 == 1.0f - 0.9f && c.eps == 1e-8f);
        cr_assert_eq(c.arith, ZC_ADAM_ARITH_DEEPSPEED);
    }
    /* The same step again changes nothing (a skipped step's replay). */
    zc_adam_ds_state again = st;
    zc__adam_ds_increment(&again, 300, hp.beta1, hp.beta2);
    cr_assert(!memcmp(&again, &st, sizeof st));
    /* A jump (the first step after a resume): pow in double, rounded. */
    zc_adam_ds_state r = zc__adam_ds_fresh(hp.beta1, hp.beta2);
    zc__adam_ds_increment(&r, 1000, hp.beta1, hp.beta2);
    cr_assert(r.beta1_t == (float)pow((double)0.9f, 1000.0) &&
              r.beta2_t == (float)pow((double)0.999f, 1000.0) && r.step == 1000);
    /* New betas: both powers from pow at the step. */
    zc__adam_ds_increment(&st, 301, 0.85, 0.99);
    cr_assert(st.beta1_t == (float)pow((double)0.85f, 301.0) &&
              st.beta2_t == (float)pow((double)0.99f, 301.0) && st.beta1 == 0.85f);
    /* Adam (L2) mode, no bias correction, no decay. */
    hp.adamw = false;
    hp.bias_correction = false;
    zc_adam_coeffs c = zc__adam_coeffs_ds(&st, &hp);
    cr_assert(c.l2_decay == 0.01f && c.decoupled_decay == 0.0f && c.step_size == 3e-4f &&
              c.bc2_rsqrt == 1.0f);
    hp.weight_decay = 0.0;
    c = zc__adam_coeffs_ds(&st, &hp);
    cr_assert(c.l2_decay == 0.0f && c.decoupled_decay == 0.0f);
}

/* fp16 decoding written here, independently of base/dtype.h. */
static double f16_value(uint16_t h)
{
    int e = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double s = h & 0x8000 ? -1.0 : 1.0;
    if (e == 0)
        return s * ldexp(mant, -24);
    return s * ldexp(1024 + mant, e - 25);
}

/* |got - want| in units of 2^-24 * scale (scale: the magnitude of the terms). */
static double err_units(float got, double want, double scale)
{
    return fabs((double)got - want) / (ldexp(scale, -24) + 1e-300);
}

Test(optim_adam, scalar_matches_double_reference)
{
    uint64_t rng = t_seed("optim_adam/scalar_matches_double_reference");
    size_t n = 4096;
    for (int mode = 0; mode < 4; mode++) {
        bool adamw = mode & 1, bc = mode & 2;
        zc_dtype gdt = mode == 1 ? ZC_DTYPE_F16 : ZC_DTYPE_F32;
        ta_case c;
        ta_case_init(&c, &rng, n, gdt, -1, 0, false, false);
        zc_adam_hparams hp = ta_random_hparams(&rng, adamw, bc);
        int64_t t = 1 + (int64_t)(t_rand_u64(&rng) % 100);
        zc_adam_coeffs co = zc__adam_coeffs(&hp, t);
        zc__adam_scalar(&c.test, &co);
        double b1t = pow(hp.beta1, (double)t), b2t = pow(hp.beta2, (double)t);
        double bc1 = bc ? 1.0 - b1t : 1.0, bc2 = bc ? 1.0 - b2t : 1.0;
        for (size_t i = 0; i < n; i++) {
            double p = c.ref.master[i], m = c.ref.m[i], v = c.ref.v[i];
            double g = gdt == ZC_DTYPE_F16 ? f16_value(((const uint16_t *)c.ref.grad)[i])
                                           : ((const float *)c.ref.grad)[i];
            g *= c.ref.grad_scale;
            double gs = fabs(g);
            if (!adamw) {
                gs += fabs(hp.weight_decay * p);
                g += hp.weight_decay * p;
            }
            /* The magnitudes each result's rounding error scales with: g may
             * carry an error of a few units of gs (L2 term cancelling), which
             * m and v inherit, and p inherits m's and v's. */
            double ms = hp.beta1 * fabs(m) + (1 - hp.beta1) * gs;
            double vs = hp.beta2 * v + (1 - hp.beta2) * gs * gs;
            m = hp.beta1 * m + (1 - hp.beta1) * g;
            v = hp.beta2 * v + (1 - hp.beta2) * g * g;
            double d = sqrt(v / bc2) + hp.eps;
            double u = (m / bc1) / d;
            double ps = fabs(p) * (1 + hp.lr * hp.weight_decay) +
                        hp.lr * fabs(u) * (1 + (v > 0 ? vs / v : 0)) + /* d's error via v */
                        hp.lr * (ms / bc1) / d * 8;                     /* m's error */
            if (adamw)
                p -= hp.lr * hp.weight_decay * p;
            p -= hp.lr * u;
            /* Each fp32 rounding (a coefficient, a product, a sum) is at most
             * one unit (2^-24) of its result. g carries kg units of gs: the
             * scale's product (1), and with the L2 term the rounded decay, its
             * product and the sum (3). Then m = b1 m + (1 - b1) g is within
             * 2 units of b1 |m| (coefficient, product), 2 + kg of
             * (1 - b1) gs and 1 of the result: 3 + kg units of ms. v = b2 v +
             * ((1 - b2) g) g is within 2 units of b2 v and 3 + 2 kg of
             * (1 - b2) gs^2 (coefficient, two products, g squared), plus 1:
             * 4 + 2 kg units of vs (6 without the L2 term, 10 with it). */
            const double kg = adamw ? 1.0 : 3.0;
            cr_assert_leq(err_units(c.test.m[i], m, ms), 3.0 + kg, "m[%zu] = %a, double %a", i,
                          (double)c.test.m[i], m);
            cr_assert_leq(err_units(c.test.v[i], v, vs), 4.0 + 2.0 * kg, "v[%zu] = %a, double %a",
                          i, (double)c.test.v[i], v);
            cr_assert_leq(err_units(c.test.master[i], p, ps), 8.0, "p[%zu] = %a, double %a", i,
                          (double)c.test.master[i], p);
        }
        ta_case_free(&c);
    }
    t_assert_no_leaks();
}

/* From zero moments the first bias-corrected step moves every parameter by
 * lr in the direction of -sign(g) (|g| >> eps): Adam's defining property. */
Test(optim_adam, first_step_moves_by_lr)
{
    float master[4] = {1.0f, -2.0f, 0.5f, 3.0f}, m[4] = {0}, v[4] = {0};
    float grad[4] = {0.3f, -4.0f, 1e-3f, -0.02f};
    uint16_t copy[4];
    zc_adam_hparams hp = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                          .adamw = true, .bias_correction = true};
    zc_adam_coeffs c = zc__adam_coeffs(&hp, 1);
    zc_adam_shard s = {.master = master, .m = m, .v = v, .grad = grad, .grad_dtype = ZC_DTYPE_F32,
                       .grad_scale = 1.0f, .param_out = copy, .param_out_dtype = ZC_DTYPE_BF16,
                       .n = 4};
    cr_assert_eq(zc__adam_host(&s, &c), ZC_OK, "%s", zc_last_error());
    float want[4] = {0.99f, -1.99f, 0.49f, 3.01f};
    for (int i = 0; i < 4; i++) {
        cr_assert_float_eq(master[i], want[i], 2e-6, "p[%d] = %g, want %g", i, master[i], want[i]);
        cr_assert_float_eq(m[i], 0.1f * grad[i], 1e-7f * fabsf(grad[i]));
        cr_assert_eq(copy[i], zc__f32_to_bf16(master[i]));
    }
    t_assert_no_leaks();
}

/* ---- SIMD variants against the scalar reference --------------------------- */

static int variant_index(const char *name)
{
    for (int i = 0; i < zc__adam_variant_count(); i++)
        if (!strcmp(zc__adam_variant(i)->name, name))
            return i;
    return -1;
}

static void check_variant(const char *name)
{
    int idx = variant_index(name);
    cr_assert_geq(idx, 0, "variant %s missing from the table", name);
    const char *why = NULL;
    if (!zc__adam_variant_usable(idx, &why))
        cr_skip_test("variant %s: %s (needs %s)", name, why, zc__adam_variant(idx)->needs);
    char label[64];
    snprintf(label, sizeof label, "optim_variants/%s", name);
    uint64_t rng = t_seed(label);
    zc_adam_kernel_fn fn = zc__adam_variant(idx)->fn;
    static const size_t sizes[] = {1, 7, 63, 1000, (1u << 20) + 13};
    static const zc_dtype gdts[] = {ZC_DTYPE_F32, ZC_DTYPE_F16, ZC_DTYPE_BF16};
    static const int odts[] = {-1, ZC_DTYPE_F16, ZC_DTYPE_BF16, ZC_DTYPE_F32};
    uint32_t worst = 0;
    int cases = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
        for (int layout = 0; layout < 3; layout++) /* aligned, all +1, master only +1 */
            for (int gi = 0; gi < 3; gi++)
                for (int oi = 0; oi < 4; oi++)
                    for (int mode = 0; mode < 8; mode++) {
                        /* bit 2: DeepSpeed's arithmetic (fp32 coefficients, FMAs) */
                        bool adamw = mode & 1, bc = mode & 2, ds = mode & 4;
                        size_t n = sizes[si];
                        /* The large size covers every dtype pair once per layout. */
                        if (n > 1000 && (mode & 3) != 3 && !(gi == 0 && oi == 2))
                            continue;
                        ta_case c;
                        ta_case_init(&c, &rng, n, gdts[gi], odts[oi], layout ? 1 : 0,
                                     layout == 2, true);
                        zc_adam_hparams hp = ta_random_hparams(&rng, adamw, bc);
                        int64_t t = 1 + (int64_t)(t_rand_u64(&rng) % 1000);
                        zc_adam_coeffs co = zc__adam_coeffs(&hp, t);
                        if (ds) {
                            zc_adam_ds_state st = zc__adam_ds_fresh(hp.beta1, hp.beta2);
                            zc__adam_ds_increment(&st, t, hp.beta1, hp.beta2);
                            co = zc__adam_coeffs_ds(&st, &hp);
                        }
                        zc__adam_scalar(&c.ref, &co);
                        unsigned flags = (t_rand_u64(&rng) & 1) ? ZC_ADAM_NT : 0;
                        fn(&c.test, &co, flags);
                        char what[160];
                        snprintf(what, sizeof what,
                                 "%s n=%zu layout=%d grad=%s copy=%s %s bc=%d %s flags=%u", name,
                                 n, layout, zc_dtype_name(gdts[gi]),
                                 odts[oi] < 0 ? "none" : zc_dtype_name((zc_dtype)odts[oi]),
                                 adamw ? "adamw" : "l2", bc, ds ? "deepspeed" : "zeroc", flags);
                        uint32_t w = ta_case_compare(&c, what);
                        worst = w > worst ? w : worst;
                        ta_case_free(&c);
                        cases++;
                    }
    cr_log_info("%s: %d cases, largest fp32 difference %u ulp", name, cases, worst);
    t_assert_no_leaks();
}

Test(optim_variants, avx2) { check_variant("avx2"); }
Test(optim_variants, avx512) { check_variant("avx512"); }
Test(optim_variants, avx512bf16) { check_variant("avx512bf16"); }

/* With lr = 0 the parameters do not move, so the copy is the 16-bit rounding
 * of the master values we chose: ties, fp16 overflow, denormals, inf, NaN. */
static void check_copy_rounding(int idx)
{
    uint64_t rng = t_seed("optim_variants/copy_rounding");
    for (int odt = ZC_DTYPE_F16; odt <= ZC_DTYPE_BF16; odt++) {
        ta_case c;
        ta_case_init(&c, &rng, 4099, ZC_DTYPE_F32, odt, 1, false, true);
        memset((void *)c.ref.grad, 0, 4099 * sizeof(float));
        zc_adam_hparams hp = {.lr = 0.0, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                              .adamw = true, .bias_correction = true};
        zc_adam_coeffs co = zc__adam_coeffs(&hp, 3);
        zc__adam_variant(idx)->fn(&c.test, &co, 0);
        for (size_t i = 0; i < c.n; i++) {
            float p = c.ref.master[i]; /* the reference copy was never run: originals */
            uint16_t got = ((const uint16_t *)c.test.param_out)[i];
            uint16_t want = odt == ZC_DTYPE_F16 ? zc__f32_to_f16(p) : zc__f32_to_bf16(p);
            if (isnan(p))
                cr_assert(odt == ZC_DTYPE_F16 ? (got & 0x7fff) > 0x7c00 : got == 0x7fc0,
                          "copy of NaN at %zu: 0x%04x", i, got);
            else if (p != 0.0f)
                cr_assert_eq(got, want, "%s copy of %a at %zu: 0x%04x, want 0x%04x",
                             zc_dtype_name((zc_dtype)odt), (double)p, i, got, want);
        }
        ta_case_free(&c);
    }
    t_assert_no_leaks();
}

Test(optim_variants, copy_rounding_all_usable)
{
    int tested = 0;
    for (int i = 0; i < zc__adam_variant_count(); i++)
        if (zc__adam_variant_usable(i, NULL)) {
            check_copy_rounding(i);
            tested++;
        }
    cr_assert_geq(tested, 1, "the scalar variant is always usable");
}

/* ---- selection ----------------------------------------------------------- */

Test(optim_isa, bad_or_unavailable_cpu_isa_is_an_error)
{
    float master[3] = {1, 2, 3}, m[3] = {0}, v[3] = {0}, g[3] = {1, 1, 1};
    zc_adam_shard s = {.master = master, .m = m, .v = v, .grad = g, .grad_dtype = ZC_DTYPE_F32,
                       .grad_scale = 1.0f, .n = 3};
    zc_adam_hparams hp = {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                          .adamw = true, .bias_correction = true};
    zc_adam_coeffs c = zc__adam_coeffs(&hp, 1);

    setenv("ZC_CPU_ISA", "sse9", 1);
    zc__adam_variant_reset();
    cr_assert_eq(zc__adam_host(&s, &c), ZC_ERR_CONFIG);
    cr_assert(strstr(zc_last_error(), "ZC_CPU_ISA='sse9'"), "message: %s", zc_last_error());
    cr_assert_eq(master[0], 1.0f, "a refused step must not touch the shard");

    int unusable = 0;
    for (int i = 0; i < zc__adam_variant_count(); i++) {
        if (zc__adam_variant_usable(i, NULL))
            continue;
        unusable++;
        setenv("ZC_CPU_ISA", zc__adam_variant(i)->name, 1);
        zc__adam_variant_reset();
        cr_assert_eq(zc__adam_host(&s, &c), ZC_ERR_UNSUPPORTED, "%s", zc__adam_variant(i)->name);
        cr_assert(strstr(zc_last_error(), "cannot run"), "message: %s", zc_last_error());
        cr_assert_eq(master[0], 1.0f);
    }
    if (!unusable)
        cr_log_info("every variant runs on this CPU: only the unknown-name error was checked");

    setenv("ZC_CPU_ISA", "scalar", 1);
    zc__adam_variant_reset();
    int idx = -1;
    cr_assert_eq(zc__adam_variant_selected(&idx), ZC_OK);
    cr_assert_str_eq(zc__adam_variant(idx)->name, "scalar");
    cr_assert_eq(zc__adam_host(&s, &c), ZC_OK, "%s", zc_last_error());
    cr_assert_lt(master[0], 1.0f);

    unsetenv("ZC_CPU_ISA");
    zc__adam_variant_reset();
    cr_assert_eq(zc__adam_variant_selected(&idx), ZC_OK);
    cr_assert(zc__adam_variant_usable(idx, NULL));
    for (int i = 0; i < idx; i++) /* best first: nothing better is usable */
        cr_assert(!zc__adam_variant_usable(i, NULL), "%s is usable but %s was chosen",
                  zc__adam_variant(i)->name, zc__adam_variant(idx)->name);
    zc__pool_shutdown();
    t_assert_no_leaks();
}

Test(optim_isa, bad_shards_are_refused)
{
    float x[2] = {0};
    zc_adam_hparams hp = {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
    zc_adam_coeffs c = zc__adam_coeffs(&hp, 1);
    zc_adam_shard s = {.master = x, .m = NULL, .v = x, .grad = x, .grad_dtype = ZC_DTYPE_F32,
                       .grad_scale = 1.0f, .n = 2};
    cr_assert_eq(zc__adam_host(&s, &c), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "NULL buffer"), "%s", zc_last_error());
    s.m = x;
    s.grad_dtype = ZC_DTYPE_F64;
    cr_assert_eq(zc__adam_host(&s, &c), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "fp64"), "%s", zc_last_error());
    s.grad_dtype = ZC_DTYPE_F32;
    s.param_out = x;
    s.param_out_dtype = ZC_DTYPE_I32;
    cr_assert_eq(zc__adam_host(&s, &c), ZC_ERR_INVALID_ARG);
    cr_assert_eq(x[0], 0.0f);
    t_assert_no_leaks();
}
