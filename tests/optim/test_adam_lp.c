/* Adam over 16-bit optimizer state (src/optim/adam.h) and its stochastic
 * rounding (sround.h).
 *
 *  - The rounding: every result is one of the two bf16 neighbours of x (x
 *    itself when representable, infinities kept, NaN -> 0x7FC0); over
 *    2^20 counters the fraction rounded up matches (x - a) / (b - a) within
 *    6 standard deviations of a binomial draw for each of the element's
 *    three tensors' bits, the mean of the rounded values is x within the
 *    same bound, and the bits are a pure function of
 *    (seed, step, stream, index): recomputing gives the same, changing any
 *    one gives other bits (about half of them differ).
 *  - The update against an independent reference: with all-fp32 state it is
 *    zc__adam_scalar bitwise; with bf16 state each stored value is the
 *    stochastic (or nearest-even) rounding of the value the fp32 formula,
 *    evaluated here in double from the same widened inputs and then rounded
 *    to fp32 step by step as adam.h writes it, gives - checked element by
 *    element against sround.h's functions.
 *  - Every ISA variant this CPU runs equals the scalar reference bitwise,
 *    every state-dtype combination, gradient and copy dtype, odd lengths and
 *    offsets, with specials; a variant the CPU lacks is skipped with its
 *    reason.
 *  - Independence of the split: 1 to 4 threads, and the shard cut into
 *    pieces at any points with index0 moved along (what a sharding does),
 *    give the same bits; a range across 2^32 of the global index equals its
 *    two halves run apart. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "helpers.h"
#include "optim/adam_isa.h"
#include "optim/adam.h"
#include "optim/adam_lp_elem.h"
#include "optim/sround.h"

static uint64_t rng_next(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float rnd_uniform(uint64_t *s) { return (float)((double)(rng_next(s) >> 11) * 0x1p-53); }

/* ---- the rounding ------------------------------------------------------ */

/* The two bf16 neighbours of a finite x (a <= x <= b, a == b when x is
 * representable), as values. */
static void neighbours(float x, float *a, float *b)
{
    const uint32_t u = zc__f32_bits(x);
    const float t = zc__bits_f32(u & 0xffff0000u); /* truncation: toward zero */
    if ((u & 0xffffu) == 0) {
        *a = *b = t;
        return;
    }
    const float away = zc__bits_f32((u & 0xffff0000u) + 0x10000u);
    *a = x > 0 ? t : away;
    *b = x > 0 ? away : t;
}

Test(sround, rounds_to_a_neighbour_and_keeps_specials)
{
    uint64_t rng = 11;
    for (int i = 0; i < 200000; i++) {
        const float x = zc__bits_f32((uint32_t)rng_next(&rng));
        const uint16_t h = zc__sr_bf16(x, (uint32_t)rng_next(&rng));
        if (isnan(x)) {
            cr_assert_eq(h, 0x7fc0, "NaN %08x -> %04x", zc__f32_bits(x), h);
            continue;
        }
        if (isinf(x)) {
            cr_assert_eq(zc__bf16_to_f32(h), x, "inf kept");
            continue;
        }
        float a, b;
        neighbours(x, &a, &b);
        const float y = zc__bf16_to_f32(h);
        /* b may be an infinity for x above the largest bf16: allowed. */
        cr_assert(y == a || y == b, "%a -> %a, not %a or %a", (double)x, (double)y, (double)a,
                  (double)b);
    }
    cr_assert_eq(zc__sr_bf16(1.0f, 0xffffu), 0x3f80, "representable values stay");
    cr_assert_eq(zc__sr_bf16(-0.0f, 0xffffu), 0x8000);
}

/* Over N counters of one key, the share of x rounded up is p = (x - a) /
 * (b - a) within 6 sigma, and the mean of the rounded values is x within 6
 * sigma of the mean. */
Test(sround, unbiased_over_many_draws)
{
    const int N = 1 << 20;
    const float xs[] = {1.0f + 0x1p-9f, 3.14159265f, -2.718281828f, 1e-30f, -7.5e20f,
                        1.0f + 0x1.fcp-8f, 0.1f};
    for (size_t t = 0; t < sizeof xs / sizeof xs[0]; t++) {
        const float x = xs[t];
        float a, b;
        neighbours(x, &a, &b);
        const double p = ((double)x - a) / ((double)b - a);
        const uint32_t keys[ZC_SR__DRAWS] = {zc__sr_key(42, 7 + (int64_t)t, ZC_SR_DRAW_PM, 0),
                                             zc__sr_key(42, 7 + (int64_t)t, ZC_SR_DRAW_V, 0)};
        /* Each tensor's bits (master, m, v: two draws an element). */
        for (int st = 0; st < ZC_SR__STREAMS; st++) {
            long up = 0;
            double sum = 0;
            for (int i = 0; i < N; i++) {
                uint32_t r[ZC_SR__STREAMS];
                zc__sr_element_bits(keys, (uint32_t)i, r);
                const float y = zc__bf16_to_f32(zc__sr_bf16(x, r[st]));
                up += y == b;
                sum += y;
            }
            const double sigma = sqrt(p * (1 - p) / N);
            cr_assert(fabs((double)up / N - p) <= 6 * sigma + 1e-12,
                      "%a tensor %d: rounded up %.6f of %d draws, expected %.6f (sigma %.2g)",
                      (double)x, st, (double)up / N, N, p, sigma);
            const double mean_err = fabs(sum / N - x) / ((double)b - a);
            cr_assert(mean_err <= 6 * sigma + 1e-12, "%a tensor %d: mean off by %.3g of an ulp "
                      "(sigma %.2g)", (double)x, st, mean_err, sigma);
        }
    }
}

static int popcount32(uint32_t x) { return __builtin_popcount(x); }

Test(sround, bits_are_a_function_of_seed_step_stream_index)
{
    const uint32_t k = zc__sr_key(5, 100, ZC_SR_DRAW_PM, 0);
    cr_assert_eq(k, zc__sr_key(5, 100, ZC_SR_DRAW_PM, 0), "the same inputs, the same key");
    const uint32_t others[] = {zc__sr_key(6, 100, ZC_SR_DRAW_PM, 0),
                               zc__sr_key(5, 101, ZC_SR_DRAW_PM, 0),
                               zc__sr_key(5, 100, ZC_SR_DRAW_V, 0),
                               zc__sr_key(5, 100, ZC_SR_DRAW_PM, 1)};
    for (int o = 0; o < 4; o++) {
        long differ = 0;
        for (uint32_t i = 0; i < 4096; i++)
            differ += popcount32(zc__sr_bits(k, i) ^ zc__sr_bits(others[o], i));
        const double frac = (double)differ / (4096.0 * 32);
        cr_assert(frac > 0.48 && frac < 0.52, "change %d: %.3f of the bits differ", o, frac);
    }
    /* Neighbouring counters are unrelated too. */
    long differ = 0;
    for (uint32_t i = 0; i < 4096; i++)
        differ += popcount32(zc__sr_bits(k, i) ^ zc__sr_bits(k, i + 1));
    cr_assert(differ > 0.48 * 4096 * 32 && differ < 0.52 * 4096 * 32);
}

/* ---- shards ------------------------------------------------------------ */

typedef struct lp_bufs {
    size_t n;
    void *master, *m, *v, *grad, *out;
    zc_adam_lp_shard s;
} lp_bufs;

static void *alloc_fill(size_t n, zc_dtype dt)
{
    void *p = malloc((n + 1) * zc_dtype_size(dt));
    cr_assert(p);
    return p;
}

/* Random state in the given dtypes; specials (inf/NaN gradients and
 * masters, zeros) in a few elements when `specials`. */
static void lp_make(lp_bufs *b, uint64_t *rng, size_t n, zc_dtype mdt, zc_dtype mmdt,
                    zc_dtype vdt, zc_dtype gdt, int odt, bool specials)
{
    memset(b, 0, sizeof *b);
    b->n = n;
    b->master = alloc_fill(n, mdt);
    b->m = alloc_fill(n, mmdt);
    b->v = alloc_fill(n, vdt);
    b->grad = alloc_fill(n, gdt);
    b->out = odt >= 0 ? alloc_fill(n, (zc_dtype)odt) : NULL;
    for (size_t i = 0; i < n; i++) {
        float p = (rnd_uniform(rng) - 0.5f) * 4.0f;
        float g = (rnd_uniform(rng) - 0.5f) * 0.2f;
        const float m = (rnd_uniform(rng) - 0.5f) * 0.02f;
        const float v = rnd_uniform(rng) * 1e-3f;
        if (specials && i % 97 == 5)
            g = (i / 97) % 3 == 0 ? INFINITY : (i / 97) % 3 == 1 ? NAN : 0.0f;
        if (specials && i % 89 == 7)
            p = (i / 89) % 2 ? -INFINITY : NAN;
        zc__store_f32(b->master, mdt, i, p);
        zc__store_f32(b->m, mmdt, i, m);
        zc__store_f32(b->v, vdt, i, v);
        zc__store_f32(b->grad, gdt, i, g);
        if (b->out)
            zc__store_f32(b->out, (zc_dtype)odt, i, 0.0f);
    }
    b->s = (zc_adam_lp_shard){.master = b->master, .m = b->m, .v = b->v, .master_dtype = mdt,
                              .m_dtype = mmdt, .v_dtype = vdt, .grad = b->grad,
                              .grad_dtype = gdt, .grad_scale = 0.75f, .param_out = b->out,
                              .param_out_dtype = odt >= 0 ? (zc_dtype)odt : ZC_DTYPE_F32,
                              .n = n, .index0 = 1000, .seed = 1234, .step = 3,
                              .stochastic = true};
}

static void lp_copy(lp_bufs *dst, const lp_bufs *src)
{
    const zc_adam_lp_shard *s = &src->s;
    *dst = *src;
    dst->master = alloc_fill(s->n, s->master_dtype);
    dst->m = alloc_fill(s->n, s->m_dtype);
    dst->v = alloc_fill(s->n, s->v_dtype);
    memcpy(dst->master, src->master, s->n * zc_dtype_size(s->master_dtype));
    memcpy(dst->m, src->m, s->n * zc_dtype_size(s->m_dtype));
    memcpy(dst->v, src->v, s->n * zc_dtype_size(s->v_dtype));
    dst->grad = src->grad; /* read only: shared */
    dst->out = NULL;
    if (src->out) {
        dst->out = alloc_fill(s->n, s->param_out_dtype);
        memcpy(dst->out, src->out, s->n * zc_dtype_size(s->param_out_dtype));
    }
    dst->s.master = dst->master;
    dst->s.m = dst->m;
    dst->s.v = dst->v;
    dst->s.param_out = dst->out;
}

static void lp_free(lp_bufs *b, bool owns_grad)
{
    free(b->master);
    free(b->m);
    free(b->v);
    free(b->out);
    if (owns_grad)
        free(b->grad);
}

static void assert_same(const lp_bufs *a, const lp_bufs *b, const char *what)
{
    const zc_adam_lp_shard *s = &a->s;
    cr_assert(!memcmp(a->master, b->master, s->n * zc_dtype_size(s->master_dtype)),
              "%s: master differs", what);
    cr_assert(!memcmp(a->m, b->m, s->n * zc_dtype_size(s->m_dtype)), "%s: m differs", what);
    cr_assert(!memcmp(a->v, b->v, s->n * zc_dtype_size(s->v_dtype)), "%s: v differs", what);
    if (a->out)
        cr_assert(!memcmp(a->out, b->out, s->n * zc_dtype_size(s->param_out_dtype)),
                  "%s: the copy differs", what);
}

static zc_adam_coeffs coeffs(bool adamw, int64_t step)
{
    const zc_adam_hparams hp = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                .weight_decay = 0.1, .adamw = adamw, .bias_correction = true};
    return zc__adam_coeffs(&hp, step);
}

static const zc_dtype sdt[2] = {ZC_DTYPE_F32, ZC_DTYPE_BF16};
static const zc_dtype gdts[3] = {ZC_DTYPE_F32, ZC_DTYPE_F16, ZC_DTYPE_BF16};

Test(adam_lp, fp32_state_is_the_fp32_adam)
{
    uint64_t rng = 3;
    for (int mode = 0; mode < 2; mode++)
        for (int gi = 0; gi < 3; gi++) {
            lp_bufs b, ref;
            lp_make(&b, &rng, 1001, ZC_DTYPE_F32, ZC_DTYPE_F32, ZC_DTYPE_F32, gdts[gi],
                    ZC_DTYPE_BF16, true);
            lp_copy(&ref, &b);
            const zc_adam_coeffs c = coeffs(mode, 3);
            zc__adam_lp_scalar(&b.s, &c);
            const zc_adam_shard fs = {.master = ref.master, .m = ref.m, .v = ref.v,
                                      .grad = ref.grad, .grad_dtype = gdts[gi],
                                      .grad_scale = ref.s.grad_scale, .param_out = ref.out,
                                      .param_out_dtype = ZC_DTYPE_BF16, .n = ref.n};
            zc__adam_scalar(&fs, &c);
            assert_same(&b, &ref, "fp32 state");
            lp_free(&ref, false);
            lp_free(&b, true);
        }
}

/* The fp32 value the update gives for one element, evaluated step by step
 * in double and rounded to fp32 after each operation, as adam.h's formula
 * (every fp32 operation is correctly rounded, so this is the same value by
 * an independent route). */
static void reference_elem(const zc_adam_coeffs *c, float p, float g, float m, float v,
                           float *po, float *mo, float *vo)
{
#define R(x) ((float)(x))
    g = R((double)g);
    if (c->l2_decay != 0.0f)
        g = R((double)g + (double)R((double)c->l2_decay * p));
    const float mn = R((double)R((double)c->beta1 * m) + (double)R((double)c->one_minus_beta1 * g));
    const float vn = R((double)R((double)c->beta2 * v) +
                       (double)R((double)R((double)c->one_minus_beta2 * g) * g));
    const float d = R((double)R((double)R(sqrt((double)vn)) * c->bc2_rsqrt) + (double)c->eps);
    if (c->decoupled_decay != 0.0f)
        p = R((double)p - (double)R((double)c->decoupled_decay * p));
    p = R((double)p - (double)R((double)c->step_size * (double)R((double)mn / d)));
#undef R
    *po = p;
    *mo = mn;
    *vo = vn;
}

Test(adam_lp, bf16_state_rounds_the_fp32_update)
{
    uint64_t rng = 5;
    for (int sr = 0; sr < 2; sr++)
        for (int mode = 0; mode < 2; mode++) {
            lp_bufs b, before;
            lp_make(&b, &rng, 3000, ZC_DTYPE_BF16, ZC_DTYPE_BF16, ZC_DTYPE_BF16, ZC_DTYPE_BF16,
                    ZC_DTYPE_F16, false);
            b.s.stochastic = sr;
            b.s.index0 = 77777;
            lp_copy(&before, &b);
            const zc_adam_coeffs c = coeffs(mode, 5);
            zc__adam_lp_scalar(&b.s, &c);
            /* sround.h's mapping, written out: draw 0's low half for the
             * master, its high half for m, draw 1 for v. */
            const uint32_t k0 = zc__sr_key(b.s.seed, b.s.step, 0, 0);
            const uint32_t k1 = zc__sr_key(b.s.seed, b.s.step, 1, 0);
            int up = 0, inexact = 0;
            for (size_t i = 0; i < b.n; i++) {
                const uint16_t *P = before.master, *M = before.m, *V = before.v, *G = b.grad;
                float po, mo, vo;
                reference_elem(&c, zc__bf16_to_f32(P[i]),
                               zc__bf16_to_f32(G[i]) * b.s.grad_scale, zc__bf16_to_f32(M[i]),
                               zc__bf16_to_f32(V[i]), &po, &mo, &vo);
                const uint32_t ctr = (uint32_t)(b.s.index0 + i);
                const uint32_t d0 = zc__sr_mix32(ctr ^ k0), d1 = zc__sr_mix32(ctr ^ k1);
                const uint32_t bits[3] = {d0 & 0xffffu, d0 >> 16, d1 & 0xffffu};
                const float want[3] = {po, mo, vo};
                const uint16_t *got[3] = {b.master, b.m, b.v};
                for (int t = 0; t < 3; t++) {
                    const uint16_t expect =
                        sr ? zc__sr_bf16(want[t], bits[t])
                           : zc__f32_to_bf16(want[t]);
                    cr_assert_eq(got[t][i], expect, "element %zu tensor %d: %04x, expected "
                                 "%04x from %a", i, t, got[t][i], expect, (double)want[t]);
                }
                const uint16_t *out = b.out;
                cr_assert_eq(out[i], zc__f32_to_f16(zc__bf16_to_f32(got[0][i])),
                             "element %zu: the copy is the kept master", i);
                if ((zc__f32_bits(po) & 0xffffu) != 0) {
                    inexact++;
                    up += fabsf(zc__bf16_to_f32(got[0][i])) > fabsf(po);
                }
            }
            /* Stochastic rounding goes both ways; to nearest too, by the data. */
            cr_assert(inexact > 2500 && up > 0 && up < inexact, "%d of %d rounded away", up,
                      inexact);
            lp_free(&before, false);
            lp_free(&b, true);
        }
}

/* Runs variant vi on a copy of b and the scalar reference on another, and
 * asserts the bits equal. */
static void variant_equals_scalar(int vi, const lp_bufs *b, const zc_adam_coeffs *c,
                                  const char *what)
{
    lp_bufs ref, t;
    lp_copy(&ref, b);
    lp_copy(&t, b);
    zc__adam_lp_scalar(&ref.s, c);
    zc__adam_variant(vi)->lp_fn(&t.s, c);
    assert_same(&t, &ref, what);
    lp_free(&ref, false);
    lp_free(&t, false);
}

Test(adam_lp, every_variant_equals_the_scalar_reference)
{
    uint64_t rng = 9;
    int ran = 0;
    for (int vi = 0; vi < zc__adam_variant_count(); vi++) {
        const char *why = NULL;
        if (!zc__adam_variant_usable(vi, &why)) {
            cr_log_warn("adam_lp: variant %s skipped: %s", zc__adam_variant(vi)->name, why);
            continue;
        }
        ran++;
        for (int combo = 0; combo < 8; combo++)
            for (int gi = 0; gi < 3; gi++)
                for (int odt = -1; odt < 3; odt++)
                    for (int sr = 0; sr < 2; sr++) {
                        const size_t n = 1 + (size_t)(rng_next(&rng) % 301);
                        lp_bufs b;
                        lp_make(&b, &rng, n, sdt[combo & 1], sdt[(combo >> 1) & 1],
                                sdt[(combo >> 2) & 1], gdts[gi], odt, true);
                        b.s.stochastic = sr;
                        b.s.index0 = rng_next(&rng) % 100000;
                        const zc_adam_coeffs c = coeffs((combo + gi) & 1, 2 + sr);
                        char what[128];
                        snprintf(what, sizeof what, "%s state %d grad %d out %d sr %d n %zu",
                                 zc__adam_variant(vi)->name, combo, gi, odt, sr, n);
                        variant_equals_scalar(vi, &b, &c, what);
                        lp_free(&b, true);
                    }
    }
    cr_assert(ran >= 1);
}

/* A shard whose buffers start one element off their allocation. */
Test(adam_lp, misaligned_buffers)
{
    uint64_t rng = 13;
    for (int vi = 0; vi < zc__adam_variant_count(); vi++) {
        if (!zc__adam_variant_usable(vi, NULL))
            continue;
        lp_bufs b;
        lp_make(&b, &rng, 513, ZC_DTYPE_BF16, ZC_DTYPE_BF16, ZC_DTYPE_F32, ZC_DTYPE_BF16,
                ZC_DTYPE_BF16, true);
        const zc_adam_coeffs c = coeffs(true, 4);
        lp_bufs ref, t;
        lp_copy(&ref, &b);
        lp_copy(&t, &b);
        zc_adam_lp_shard rs = zc__adam_lp_slice(&ref.s, 1, 513), ts = zc__adam_lp_slice(&t.s, 1, 513);
        zc__adam_lp_scalar(&rs, &c);
        zc__adam_variant(vi)->lp_fn(&ts, &c);
        assert_same(&t, &ref, zc__adam_variant(vi)->name);
        lp_free(&ref, false);
        lp_free(&t, false);
        lp_free(&b, true);
    }
}

/* The split does not matter: threads, pieces with index0 moved along, and
 * a range across 2^32 of the global index. */
Test(adam_lp, independent_of_threads_and_sharding)
{
    uint64_t rng = 17;
    const size_t n = 300000; /* above ZC_ADAM_SMALL: several tiles */
    lp_bufs b;
    lp_make(&b, &rng, n, ZC_DTYPE_BF16, ZC_DTYPE_BF16, ZC_DTYPE_BF16, ZC_DTYPE_BF16,
            ZC_DTYPE_BF16, true);
    const zc_adam_coeffs c = coeffs(true, 9);
    lp_bufs one;
    lp_copy(&one, &b);
    cr_assert_eq(zc__adam_lp_host_run(&one.s, &c, -1, 1), ZC_OK, "%s", zc_last_error());
    for (int t = 2; t <= 4; t++) {
        lp_bufs x;
        lp_copy(&x, &b);
        cr_assert_eq(zc__adam_lp_host_run(&x.s, &c, -1, t), ZC_OK, "%s", zc_last_error());
        char what[32];
        snprintf(what, sizeof what, "%d threads", t);
        assert_same(&x, &one, what);
        lp_free(&x, false);
    }
    /* Pieces at random cuts, each with its own index0 (ranks' shards). */
    lp_bufs x;
    lp_copy(&x, &b);
    size_t at = 0;
    while (at < n) {
        size_t len = 1 + (size_t)(rng_next(&rng) % 40000);
        if (len > n - at)
            len = n - at;
        const zc_adam_lp_shard piece = zc__adam_lp_slice(&x.s, at, at + len);
        cr_assert_eq(zc__adam_lp_host_run(&piece, &c, -1, 2), ZC_OK);
        at += len;
    }
    assert_same(&x, &one, "pieces");
    lp_free(&x, false);
    lp_free(&one, false);

    /* Across 2^32: index0 just below it, against the two halves run apart. */
    lp_bufs whole, halves;
    lp_copy(&whole, &b);
    lp_copy(&halves, &b);
    whole.s.index0 = halves.s.index0 = ((uint64_t)1 << 32) - 1000;
    cr_assert_eq(zc__adam_lp_host_run(&whole.s, &c, -1, 2), ZC_OK);
    const zc_adam_lp_shard lo = zc__adam_lp_slice(&halves.s, 0, 1000);
    const zc_adam_lp_shard hi = zc__adam_lp_slice(&halves.s, 1000, n);
    zc__adam_lp_scalar(&lo, &c);
    zc__adam_lp_scalar(&hi, &c);
    assert_same(&whole, &halves, "across 2^32");
    lp_free(&whole, false);
    lp_free(&halves, false);
    lp_free(&b, true);
}

Test(adam_lp, refusals)
{
    lp_bufs b;
    uint64_t rng = 1;
    lp_make(&b, &rng, 16, ZC_DTYPE_BF16, ZC_DTYPE_BF16, ZC_DTYPE_BF16, ZC_DTYPE_BF16, -1, false);
    zc_adam_coeffs c = coeffs(true, 1);
    zc_adam_lp_shard s = b.s;
    s.m_dtype = ZC_DTYPE_F16;
    cr_assert_eq(zc__adam_lp_host_run(&s, &c, -1, 1), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "fp32 or bf16"), "%s", zc_last_error());
    s = b.s;
    c.arith = ZC_ADAM_ARITH_DEEPSPEED;
    cr_assert_eq(zc__adam_lp_host_run(&s, &c, -1, 1), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "DeepSpeed"), "%s", zc_last_error());
    c.arith = ZC_ADAM_ARITH_ZEROC;
    s.index0 = UINT64_MAX - 3;
    cr_assert_eq(zc__adam_lp_host_run(&s, &c, -1, 1), ZC_ERR_INVALID_ARG);
    lp_free(&b, true);
}
