/* Every CUDA device op against its host twin (src/device/host.c, the scalar
 * Adam reference) on fresh random data, with the GPU's outputs poisoned (all
 * bits set) before each launch so an element the kernel forgets shows up.
 *
 * Tolerances: fp32 within 2 ulp and 16-bit within 1 ulp (the bar).
 * NaNs produced by a conversion must match bitwise (the dtype.h rules: bf16
 * NaN -> 0x7FC0, fp16 keeps sign and payload). NaNs produced by arithmetic
 * only have to be NaN on both sides: x86 returns the default NaN 0xFFC00000
 * or propagates an input's payload, an NVIDIA GPU returns the canonical
 * 0x7FFFFFFF, and IEEE 754 leaves the choice open. The kernels are written to
 * match bitwise otherwise (no FMA
 * contraction, IEEE div/sqrt, the host's summation order), so the sum of
 * squares and the inf/NaN flag - which decide clipping and skipping - must be
 * exactly equal. Without a GPU every test skips and says why. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "gpu_common.h"
#include "helpers.h"
#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/lion.h"
#include "quant/quant.h"

/* ---- buffers ------------------------------------------------------------- */

static void *dev_alloc(zc_device *d, size_t bytes)
{
    void *p = NULL;
    cr_assert_eq(d->ops->alloc(d, NULL, ZC_MEM_BUFFERS, bytes, "test", &p), ZC_OK, "%s",
                 zc_last_error());
    return p;
}

static void dev_free(zc_device *d, void *p, size_t bytes)
{
    d->ops->free(d, NULL, ZC_MEM_BUFFERS, p, bytes);
}

static void h2d(zc_device *d, void *dst, const void *src, size_t bytes)
{
    cr_assert_eq(d->ops->copy(d, dst, src, bytes, ZC_COPY_H2D, NULL), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(d->ops->stream_sync(d, NULL), ZC_OK, "%s", zc_last_error());
}

static void d2h(zc_device *d, void *dst, const void *src, size_t bytes)
{
    cr_assert_eq(d->ops->copy(d, dst, src, bytes, ZC_COPY_D2H, NULL), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(d->ops->stream_sync(d, NULL), ZC_OK, "%s", zc_last_error());
}

static void poison(zc_device *d, void *dst, size_t bytes)
{
    void *h = malloc(bytes);
    memset(h, 0xff, bytes);
    h2d(d, dst, h, bytes);
    free(h);
}

/* ---- data ---------------------------------------------------------------- */

/* Random values over many binades; with specials, some infinities, NaNs with
 * payloads, subnormals of every dtype, signed zeros and fp16 overflow.
 * Without specials every value is finite in every dtype (|v| < 2^15, below
 * fp16's 65504), so "clean" data has no inf once stored as fp16. */
static float rand_value(uint64_t *s, int specials)
{
    if (specials && t_rand_u64(s) % 16 == 0) {
        static const uint32_t sp[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffa12345u,
                                      0x7f812345u, 0x00000001u, 0x80000123u, 0x80000000u,
                                      0x00000000u, 0x387fe000u, 0x33800000u, 0x477ff000u,
                                      0x477fefffu, 0xc77ff000u, 0x7f7fffffu, 0x3f808000u};
        return zc__bits_f32(sp[t_rand_u64(s) % (sizeof sp / sizeof sp[0])]);
    }
    float m = t_rand_range(s, -1.0f, 1.0f);
    int e = (int)(t_rand_u64(s) % (specials ? 41 : 36)) - 20;
    return ldexpf(m, e);
}

static void fill(uint64_t *s, void *buf, zc_dtype dt, size_t n, int specials)
{
    for (size_t i = 0; i < n; i++) {
        if (dt == ZC_DTYPE_F64)
            ((double *)buf)[i] = (double)rand_value(s, specials) * (1.0 + 0x1p-40 * (double)(i % 7));
        else if (dt == ZC_DTYPE_I32)
            ((int32_t *)buf)[i] = (int32_t)t_rand_u64(s);
        else
            zc__store_f32(buf, dt, i, rand_value(s, specials));
    }
}

static int is_nan16(uint16_t h, int is_f16)
{
    uint16_t exp = is_f16 ? 0x7c00 : 0x7f80;
    return (h & exp) == exp && (h & (uint16_t)~(exp | 0x8000u)) != 0;
}

/* Asserts a GPU result matches the host's within the suite's tolerances.
 * nan_bits: NaNs must be equal bitwise (conversions); else any NaN matches
 * any NaN (arithmetic, see the top of the file). */
static void expect_close(const char *what, zc_dtype dt, const void *want, const void *got, size_t n,
                         int nan_bits)
{
    for (size_t i = 0; i < n; i++) {
        switch (dt) {
        case ZC_DTYPE_F32: {
            float a = ((const float *)want)[i], b = ((const float *)got)[i];
            if ((isnan(a) || isnan(b)) && (nan_bits || !isnan(a) || !isnan(b)))
                cr_assert_eq(zc__f32_bits(a), zc__f32_bits(b), "%s[%zu]: NaN bits %08x vs %08x",
                             what, i, zc__f32_bits(a), zc__f32_bits(b));
            else
                cr_assert_leq(t_ulp_diff_f32(a, b), 2, "%s[%zu]: host %a gpu %a", what, i, a, b);
            break;
        }
        case ZC_DTYPE_F16:
        case ZC_DTYPE_BF16: {
            uint16_t a = ((const uint16_t *)want)[i], b = ((const uint16_t *)got)[i];
            int f16 = dt == ZC_DTYPE_F16;
            if (!nan_bits && is_nan16(a, f16) && is_nan16(b, f16))
                break;
            cr_assert_leq(g_ulp16(a, b, f16), 1, "%s[%zu]: host 0x%04x gpu 0x%04x", what, i, a, b);
            break;
        }
        case ZC_DTYPE_F64: {
            double a = ((const double *)want)[i], b = ((const double *)got)[i];
            if (!nan_bits && isnan(a) && isnan(b))
                break;
            cr_assert(memcmp(&a, &b, 8) == 0, "%s[%zu]: host %a gpu %a", what, i, a, b);
            break;
        }
        default:
            cr_assert_eq(((const int32_t *)want)[i], ((const int32_t *)got)[i], "%s[%zu]", what, i);
        }
    }
}

static const zc_dtype FLOATS[] = {ZC_DTYPE_F32, ZC_DTYPE_F16, ZC_DTYPE_BF16};
#define N_ODD 100003 /* not a multiple of any vector width or block */

/* ---- tests --------------------------------------------------------------- */

Test(gpu_kernels, cast_every_pair)
{
    zc_device *d;
    g_open_or_skip(&d);
    zc_device *h = zc__device_host();
    uint64_t s = t_seed("gpu cast");
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            zc_dtype st = FLOATS[a], dt = FLOATS[b];
            size_t sb = N_ODD * zc_dtype_size(st), db = N_ODD * zc_dtype_size(dt);
            void *src = malloc(sb), *want = malloc(db), *got = malloc(db);
            fill(&s, src, st, N_ODD, 1);
            void *dsrc = dev_alloc(d, sb), *ddst = dev_alloc(d, db);
            h2d(d, dsrc, src, sb);
            poison(d, ddst, db);
            cr_assert_eq(d->ops->cast(d, ddst, dt, dsrc, st, N_ODD, NULL), ZC_OK, "%s",
                         zc_last_error());
            d2h(d, got, ddst, db);
            cr_assert_eq(h->ops->cast(h, want, dt, src, st, N_ODD, NULL), ZC_OK);
            char what[64];
            snprintf(what, sizeof what, "cast %s->%s", zc_dtype_name(st), zc_dtype_name(dt));
            expect_close(what, dt, want, got, N_ODD, 1);
            dev_free(d, dsrc, sb);
            dev_free(d, ddst, db);
            free(src), free(want), free(got);
        }
    d->ops->destroy(d);
    t_assert_no_leaks();
}

Test(gpu_kernels, scale_and_accumulate)
{
    zc_device *d;
    g_open_or_skip(&d);
    zc_device *h = zc__device_host();
    uint64_t s = t_seed("gpu scale/accumulate");
    static const zc_dtype SC[] = {ZC_DTYPE_F32, ZC_DTYPE_F16, ZC_DTYPE_BF16, ZC_DTYPE_F64};
    for (int k = 0; k < 4; k++) {
        zc_dtype dt = SC[k];
        size_t bytes = N_ODD * zc_dtype_size(dt);
        float a = t_rand_range(&s, 0.001f, 3.0f);
        void *x = malloc(bytes), *got = malloc(bytes);
        fill(&s, x, dt, N_ODD, 1);
        void *dx = dev_alloc(d, bytes);
        h2d(d, dx, x, bytes);
        cr_assert_eq(d->ops->scale(d, dx, dt, N_ODD, a, NULL), ZC_OK, "%s", zc_last_error());
        d2h(d, got, dx, bytes);
        cr_assert_eq(h->ops->scale(h, x, dt, N_ODD, a, NULL), ZC_OK);
        expect_close("scale", dt, x, got, N_ODD, 0);
        dev_free(d, dx, bytes);
        free(x), free(got);
    }
    for (int k = 0; k < 3; k++) {
        zc_dtype dt = FLOATS[k];
        size_t sb = N_ODD * zc_dtype_size(dt), ab = N_ODD * sizeof(float);
        float *acc = malloc(ab), *got = malloc(ab);
        void *src = malloc(sb);
        fill(&s, acc, ZC_DTYPE_F32, N_ODD, 1);
        fill(&s, src, dt, N_ODD, 1);
        void *dacc = dev_alloc(d, ab), *dsrc = dev_alloc(d, sb);
        h2d(d, dacc, acc, ab);
        h2d(d, dsrc, src, sb);
        cr_assert_eq(d->ops->accumulate(d, dacc, dsrc, dt, N_ODD, NULL), ZC_OK, "%s",
                     zc_last_error());
        d2h(d, got, dacc, ab);
        cr_assert_eq(h->ops->accumulate(h, acc, src, dt, N_ODD, NULL), ZC_OK);
        expect_close("accumulate", ZC_DTYPE_F32, acc, got, N_ODD, 0);
        dev_free(d, dacc, ab);
        dev_free(d, dsrc, sb);
        free(acc), free(got), free(src);
    }
    d->ops->destroy(d);
    t_assert_no_leaks();
}

/* The 16-bit running sum (data_types.grad_accum_dtype): every source dtype
 * into an accumulator rounded to each float dtype (F32: accumulate), the
 * accumulator holding values of that dtype as the engine's do. Bitwise the
 * host twin, except that a NaN made by the addition (inf + -inf) only has to
 * be a NaN on both sides (see the top). */
Test(gpu_kernels, accumulate_rounded_every_pair)
{
    zc_device *d;
    g_open_or_skip(&d);
    zc_device *h = zc__device_host();
    uint64_t s = t_seed("gpu accumulate_rounded");
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            const zc_dtype st = FLOATS[a], at = FLOATS[b];
            const size_t sb = N_ODD * zc_dtype_size(st), ab = N_ODD * sizeof(float);
            void *src = malloc(sb), *acc16 = malloc(N_ODD * zc_dtype_size(at));
            float *acc = malloc(ab), *got = malloc(ab);
            fill(&s, src, st, N_ODD, 1);
            fill(&s, acc16, at, N_ODD, 1);
            cr_assert_eq(h->ops->cast(h, acc, ZC_DTYPE_F32, acc16, at, N_ODD, NULL), ZC_OK);
            float *dacc = dev_alloc(d, ab);
            void *dsrc = dev_alloc(d, sb);
            h2d(d, dacc, acc, ab);
            h2d(d, dsrc, src, sb);
            cr_assert_eq(d->ops->accumulate_rounded(d, dacc, dsrc, st, at, N_ODD, NULL), ZC_OK,
                         "%s", zc_last_error());
            d2h(d, got, dacc, ab);
            cr_assert_eq(h->ops->accumulate_rounded(h, acc, src, st, at, N_ODD, NULL), ZC_OK);
            for (size_t i = 0; i < N_ODD; i++) {
                if (isnan(acc[i]) && isnan(got[i]))
                    continue;
                cr_assert_eq(zc__f32_bits(got[i]), zc__f32_bits(acc[i]),
                             "accumulate_rounded %s into %s [%zu]: host %a gpu %a",
                             zc_dtype_name(st), zc_dtype_name(at), i, (double)acc[i],
                             (double)got[i]);
            }
            dev_free(d, dacc, ab);
            dev_free(d, dsrc, sb);
            free(src), free(acc16), free(acc), free(got);
        }
    d->ops->destroy(d);
    t_assert_no_leaks();
}

/* The local communicator's reduction: 1..5 sources in order, into a fresh
 * buffer and in place (dst == srcs[0]). */
Test(gpu_kernels, reduce_sum_in_order)
{
    zc_device *d;
    g_open_or_skip(&d);
    zc_device *h = zc__device_host();
    uint64_t s = t_seed("gpu reduce_sum");
    static const zc_dtype RD[] = {ZC_DTYPE_F32, ZC_DTYPE_F16, ZC_DTYPE_BF16, ZC_DTYPE_F64,
                                  ZC_DTYPE_I32};
    const size_t n = 20011;
    for (int k = 0; k < 5; k++)
        for (int nsrc = 1; nsrc <= 5; nsrc++)
            for (int inplace = 0; inplace < 2; inplace++) {
                zc_dtype dt = RD[k];
                size_t bytes = n * zc_dtype_size(dt);
                void *hs[5], *ds[5];
                for (int j = 0; j < nsrc; j++) {
                    hs[j] = malloc(bytes);
                    fill(&s, hs[j], dt, n, 1);
                    ds[j] = dev_alloc(d, bytes);
                    h2d(d, ds[j], hs[j], bytes);
                }
                void *want = malloc(bytes), *got = malloc(bytes);
                void *ddst = inplace ? ds[0] : dev_alloc(d, bytes);
                if (!inplace)
                    poison(d, ddst, bytes);
                cr_assert_eq(d->ops->reduce_sum(d, ddst, (const void *const *)ds, nsrc, dt, n, NULL),
                             ZC_OK, "%s", zc_last_error());
                d2h(d, got, ddst, bytes);
                cr_assert_eq(h->ops->reduce_sum(h, want, (const void *const *)hs, nsrc, dt, n, NULL),
                             ZC_OK);
                char what[64];
                snprintf(what, sizeof what, "reduce_sum %s x%d%s", zc_dtype_name(dt), nsrc,
                         inplace ? " in place" : "");
                expect_close(what, dt, want, got, n, 0);
                if (!inplace)
                    dev_free(d, ddst, bytes);
                for (int j = 0; j < nsrc; j++) {
                    dev_free(d, ds[j], bytes);
                    free(hs[j]);
                }
                free(want), free(got);
            }
    d->ops->destroy(d);
    t_assert_no_leaks();
}

/* The norm behind clipping: equal to the host's bitwise (the order of
 * device/sumsq_order.h), through sumsq and sumsq_async (poisoned scratch and
 * result), for each case's dtypes. */
typedef struct sumsq_case {
    size_t n, off; /* elements; start this many elements past 16-byte alignment */
    int bf16_only;
} sumsq_case;

static void check_sumsq(const sumsq_case *cases, size_t ncases, const char *seed_name)
{
    zc_device *d;
    g_open_or_skip(&d);
    zc_device *h = zc__device_host();
    uint64_t s = t_seed(seed_name);
    for (int k = 0; k < 3; k++)
        for (size_t c = 0; c < ncases; c++) {
            zc_dtype dt = FLOATS[k];
            if (cases[c].bf16_only && dt != ZC_DTYPE_BF16)
                continue;
            size_t n = cases[c].n, esz = zc_dtype_size(dt), off = cases[c].off * esz;
            size_t bytes = n * esz;
            void *x = malloc(bytes);
            fill(&s, x, dt, n, 0);
            unsigned char *dx = dev_alloc(d, bytes + off);
            h2d(d, dx + off, x, bytes);
            double want = -1, got = -2, async = -3;
            cr_assert_eq(d->ops->sumsq(d, dx + off, dt, n, &got, NULL), ZC_OK, "%s",
                         zc_last_error());
            cr_assert_eq(h->ops->sumsq(h, x, dt, n, &want, NULL), ZC_OK);
            cr_assert(memcmp(&want, &got, sizeof want) == 0, "sumsq %s n=%zu +%zu: host %a gpu %a",
                      zc_dtype_name(dt), n, off, want, got);
            /* The stream-ordered form: the same two kernels into a caller's
             * scratch, poisoned first, and a device result. */
            size_t ng = zc__sumsq_scratch_elems(n);
            double *scratch = dev_alloc(d, ng * sizeof(double)), *dout = dev_alloc(d, 8);
            poison(d, scratch, ng * sizeof(double));
            poison(d, dout, 8);
            cr_assert_eq(d->ops->sumsq_async(d, dx + off, dt, n, scratch, dout, NULL), ZC_OK, "%s",
                         zc_last_error());
            d2h(d, &async, dout, 8);
            cr_assert(memcmp(&want, &async, sizeof want) == 0,
                      "sumsq_async %s n=%zu +%zu: host %a gpu %a", zc_dtype_name(dt), n, off,
                      want, async);
            dev_free(d, scratch, ng * sizeof(double));
            dev_free(d, dout, 8);
            dev_free(d, dx, bytes + off);
            free(x);
        }
    d->ops->destroy(d);
    t_assert_no_leaks();
}

/* Within one block, one group, the tree's second level (33 groups: a run of
 * 32 and one more) with a short last block and group, and starts one element
 * past 16-byte alignment (the kernel's scalar path). */
Test(gpu_kernels, sumsq_equals_host_bitwise)
{
    const size_t B = ZC_SUMSQ_BLOCK, G = (size_t)ZC_SUMSQ_FANIN * ZC_SUMSQ_BLOCK;
    const sumsq_case cases[] = {{1, 0, 0},          {31, 0, 0},         {33, 0, 0},
                                {B, 0, 0},          {B + 1, 0, 0},      {3 * B - 5, 0, 0},
                                {1000003, 0, 0},    {33 * G + B + 5, 0, 0},
                                {2 * G + 9, 1, 0},  {77, 1, 0}};
    check_sumsq(cases, sizeof cases / sizeof cases[0], "gpu sumsq");
}

/* 1025 groups and a short one: three levels above the blocks (269 MB of
 * bf16). Left out of the sanitizer runs (gpu_check.py: too large to track;
 * the same kernels run above). */
Test(gpu_kernels, sumsq_three_tree_levels)
{
    const size_t B = ZC_SUMSQ_BLOCK, G = (size_t)ZC_SUMSQ_FANIN * ZC_SUMSQ_BLOCK;
    const sumsq_case cases[] = {{1025 * G + 3 * B + 11, 0, 1}};
    check_sumsq(cases, 1, "gpu sumsq three levels");
}

/* The fp16 skip decision: clean data, one inf, one NaN, at a random place. */
Test(gpu_kernels, nonfinite_flags_match)
{
    zc_device *d;
    g_open_or_skip(&d);
    zc_device *h = zc__device_host();
    uint64_t s = t_seed("gpu nonfinite");
    for (int k = 0; k < 3; k++)
        for (int kind = 0; kind < 3; kind++) {
            zc_dtype dt = FLOATS[k];
            size_t bytes = N_ODD * zc_dtype_size(dt);
            void *x = malloc(bytes);
            fill(&s, x, dt, N_ODD, 0);
            size_t at = (size_t)(t_rand_u64(&s) % N_ODD);
            if (kind == 1)
                zc__store_f32(x, dt, at, -INFINITY);
            if (kind == 2)
                zc__store_f32(x, dt, at, NAN);
            void *dx = dev_alloc(d, bytes);
            h2d(d, dx, x, bytes);
            int want = -1, got = -2;
            cr_assert_eq(d->ops->nonfinite(d, dx, dt, N_ODD, &got, NULL), ZC_OK, "%s",
                         zc_last_error());
            cr_assert_eq(h->ops->nonfinite(h, x, dt, N_ODD, &want, NULL), ZC_OK);
            cr_assert_eq(want, kind != 0);
            cr_assert_eq(got, want, "nonfinite %s kind %d at %zu", zc_dtype_name(dt), kind, at);
            dev_free(d, dx, bytes);
            free(x);
        }
    d->ops->destroy(d);
    t_assert_no_leaks();
}

/* Fused Adam: every grad dtype x parameter-copy dtype, AdamW and Adam (L2),
 * in zeroc's arithmetic and DeepSpeed's (mode 2-3: fp32 coefficients and
 * FMAs), an aligned shard (vector path) and one starting one element late
 * (scalar path), two steps with a clip/unscale factor. */
Test(gpu_kernels, adam_matches_scalar_reference, .timeout = 300)
{
    zc_device *d;
    g_open_or_skip(&d);
    uint64_t s = t_seed("gpu adam");
    const size_t n = 65536 + 37;
    static const int OUTS[] = {-1, ZC_DTYPE_F32, ZC_DTYPE_F16, ZC_DTYPE_BF16};
    for (int gk = 0; gk < 3; gk++)
        for (int ok = 0; ok < 4; ok++)
            for (int mode = 0; mode < 4; mode++)
                for (int off = 0; off < 2; off++) {
                    zc_dtype gdt = FLOATS[gk];
                    int odt = OUTS[ok];
                    zc_adam_hparams hp = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                          .weight_decay = 0.01, .adamw = (mode & 1) == 0,
                                          .bias_correction = true};
                    zc_adam_ds_state dst = zc__adam_ds_fresh(hp.beta1, hp.beta2);
                    size_t fb = (n + 1) * sizeof(float), gb = (n + 1) * zc_dtype_size(gdt),
                           ob = odt < 0 ? 0 : (n + 1) * zc_dtype_size((zc_dtype)odt);
                    float *hm = malloc(fb), *hmm = malloc(fb), *hv = malloc(fb);
                    void *hg = malloc(gb), *ho = ob ? malloc(ob) : NULL;
                    float *gm = malloc(fb), *gmm = malloc(fb), *gv = malloc(fb);
                    void *go = ob ? malloc(ob) : NULL;
                    fill(&s, hm, ZC_DTYPE_F32, n + 1, 0);
                    for (size_t i = 0; i <= n; i++) {
                        hmm[i] = t_rand_range(&s, -0.01f, 0.01f);
                        hv[i] = t_rand_range(&s, 0.0f, 1e-4f);
                    }
                    float *dm = dev_alloc(d, fb), *dmm = dev_alloc(d, fb), *dv = dev_alloc(d, fb);
                    void *dg = dev_alloc(d, gb), *dout = ob ? dev_alloc(d, ob) : NULL;
                    h2d(d, dm, hm, fb);
                    h2d(d, dmm, hmm, fb);
                    h2d(d, dv, hv, fb);
                    if (dout)
                        poison(d, dout, ob);
                    size_t es = zc_dtype_size(gdt), os = odt < 0 ? 0 : zc_dtype_size((zc_dtype)odt);
                    for (int step = 1; step <= 2; step++) {
                        fill(&s, hg, gdt, n + 1, 0);
                        h2d(d, dg, hg, gb);
                        zc_adam_coeffs c = zc__adam_coeffs(&hp, step);
                        if (mode >= 2) {
                            zc__adam_ds_increment(&dst, step, hp.beta1, hp.beta2);
                            c = zc__adam_coeffs_ds(&dst, &hp);
                        }
                        float gs = step == 1 ? 0.5f : 0.25f;
                        zc_adam_shard hs = {hm + off, hmm + off, hv + off, (char *)hg + off * es,
                                            gdt, gs, ho ? (char *)ho + off * os : NULL,
                                            odt < 0 ? ZC_DTYPE_F32 : (zc_dtype)odt, n};
                        zc_adam_shard ds = {dm + off, dmm + off, dv + off, (char *)dg + off * es,
                                            gdt, gs, dout ? (char *)dout + off * os : NULL,
                                            hs.param_out_dtype, n};
                        cr_assert_eq(d->ops->adam(d, &ds, &c, NULL), ZC_OK, "%s", zc_last_error());
                        zc__adam_scalar(&hs, &c);
                    }
                    d2h(d, gm, dm, fb);
                    d2h(d, gmm, dmm, fb);
                    d2h(d, gv, dv, fb);
                    char what[96];
                    snprintf(what, sizeof what, "adam%s%s grad %s out %s offset %d master",
                             mode & 1 ? "" : "w", mode >= 2 ? " deepspeed" : "", zc_dtype_name(gdt),
                             odt < 0 ? "none" : zc_dtype_name((zc_dtype)odt), off);
                    expect_close(what, ZC_DTYPE_F32, hm + off, gm + off, n, 0);
                    expect_close("adam m", ZC_DTYPE_F32, hmm + off, gmm + off, n, 0);
                    expect_close("adam v", ZC_DTYPE_F32, hv + off, gv + off, n, 0);
                    if (dout) {
                        d2h(d, go, dout, ob);
                        expect_close(what, (zc_dtype)odt, (char *)ho + off * os,
                                     (char *)go + off * os, n, 0);
                    }
                    dev_free(d, dm, fb), dev_free(d, dmm, fb), dev_free(d, dv, fb);
                    dev_free(d, dg, gb);
                    if (dout)
                        dev_free(d, dout, ob);
                    free(hm), free(hmm), free(hv), free(hg), free(ho);
                    free(gm), free(gmm), free(gv), free(go);
                }
    d->ops->destroy(d);
    t_assert_no_leaks();
}

/* Adam over 16-bit state (adam.h): every master/m/v dtype mix, every
 * gradient dtype, stochastic and nearest rounding, a bf16 copy, a shard
 * one element late, the global index crossing 2^32 inside the shard
 * (the launcher splits there): bitwise zc__adam_lp_scalar (NaN = NaN). */
Test(gpu_kernels, adam_lp_matches_scalar_reference, .timeout = 300)
{
    zc_device *d;
    g_open_or_skip(&d);
    uint64_t s = t_seed("gpu adam lp");
    const size_t n = 20000 + 13;
    const zc_adam_hparams hp = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                .weight_decay = 0.01, .adamw = true, .bias_correction = true};
    for (int mask = 0; mask < 8; mask++)
        for (int gk = 0; gk < 3; gk++)
            for (int sr = 0; sr < 2; sr++) {
                const zc_dtype st[3] = {mask & 1 ? ZC_DTYPE_BF16 : ZC_DTYPE_F32,
                                        mask & 2 ? ZC_DTYPE_BF16 : ZC_DTYPE_F32,
                                        mask & 4 ? ZC_DTYPE_BF16 : ZC_DTYPE_F32};
                const zc_dtype gdt = FLOATS[gk];
                const int off = (mask + gk + sr) & 1;
                void *h[5], *g[5], *dv[5];
                size_t b[5];
                const zc_dtype dts[5] = {st[0], st[1], st[2], gdt, ZC_DTYPE_BF16};
                for (int t = 0; t < 5; t++) {
                    b[t] = (n + 1) * zc_dtype_size(dts[t]);
                    h[t] = malloc(b[t]);
                    g[t] = malloc(b[t]);
                    fill(&s, h[t], dts[t], n + 1, t == 3);
                    dv[t] = dev_alloc(d, b[t]);
                    h2d(d, dv[t], h[t], b[t]);
                }
                for (size_t i = 0; i <= n; i++) /* v >= 0 */
                    zc__store_f32(h[2], st[2], i, fabsf(zc__load_f32(h[2], st[2], i)) * 1e-4f);
                h2d(d, dv[2], h[2], b[2]);
                poison(d, dv[4], b[4]);
                zc_adam_lp_shard hs = {.master_dtype = st[0], .m_dtype = st[1], .v_dtype = st[2],
                                       .grad_dtype = gdt, .grad_scale = 0.5f,
                                       .param_out_dtype = ZC_DTYPE_BF16, .n = n,
                                       .index0 = ((uint64_t)1 << 32) - 777, .seed = 99,
                                       .step = 4, .stochastic = sr};
                zc_adam_lp_shard ds = hs;
                void **hp_[5] = {&hs.master, &hs.m, &hs.v, (void **)&hs.grad, &hs.param_out};
                void **dp_[5] = {&ds.master, &ds.m, &ds.v, (void **)&ds.grad, &ds.param_out};
                for (int t = 0; t < 5; t++) {
                    *hp_[t] = (char *)h[t] + off * zc_dtype_size(dts[t]);
                    *dp_[t] = (char *)dv[t] + off * zc_dtype_size(dts[t]);
                }
                const zc_adam_coeffs c = zc__adam_coeffs(&hp, 4);
                cr_assert_eq(d->ops->adam_lp(d, &ds, &c, NULL), ZC_OK, "%s", zc_last_error());
                zc__adam_lp_scalar(&hs, &c);
                for (int t = 0; t < 5; t++) {
                    if (t == 3)
                        continue;
                    d2h(d, g[t], dv[t], b[t]);
                    char what[96];
                    snprintf(what, sizeof what, "adam lp state %d grad %s sr %d tensor %d", mask,
                             zc_dtype_name(gdt), sr, t);
                    for (size_t i = off; i < n + off; i++) { /* bitwise; NaN = NaN in fp32 */
                        const float a = zc__load_f32(h[t], dts[t], i), e = zc__load_f32(g[t], dts[t], i);
                        cr_assert(dts[t] == ZC_DTYPE_F32 && isnan(a) && isnan(e)
                                      ? 1 : !memcmp((char *)h[t] + i * zc_dtype_size(dts[t]),
                                                    (char *)g[t] + i * zc_dtype_size(dts[t]),
                                                    zc_dtype_size(dts[t])),
                                  "%s[%zu]: host %a gpu %a", what, i, (double)a, (double)e);
                    }
                }
                for (int t = 0; t < 5; t++) {
                    dev_free(d, dv[t], b[t]);
                    free(h[t]);
                    free(g[t]);
                }
            }
    d->ops->destroy(d);
    t_assert_no_leaks();
}

/* Lion and Adagrad (optim/lion.h, adagrad.h): master, state, copy bitwise
 * the host's scalar reference (NaN = NaN) for every gradient dtype, every
 * copy dtype and none, both rules of each (Lion's sign, Adagrad's
 * numerator), with and without weight decay, a shard one element late. */
static void ew_case(zc_device *d, uint64_t *s, bool lion, zc_dtype gdt, int odt, uint32_t rule,
                    double wd, int off)
{
    const size_t n = 20000 + 13;
    const zc_dtype dts[4] = {ZC_DTYPE_F32, ZC_DTYPE_F32, gdt,
                             odt < 0 ? ZC_DTYPE_F32 : (zc_dtype)odt};
    void *h[4], *g[4], *dv[4];
    size_t b[4];
    for (int t = 0; t < 4; t++) {
        b[t] = (n + 1) * zc_dtype_size(dts[t]);
        h[t] = malloc(b[t]);
        g[t] = malloc(b[t]);
        fill(s, h[t], dts[t], n + 1, t == 2);
        if (t == 1 && !lion) /* Adagrad's sum of squares >= 0 */
            for (size_t i = 0; i <= n; i++)
                ((float *)h[1])[i] = fabsf(((float *)h[1])[i]);
        dv[t] = dev_alloc(d, b[t]);
        h2d(d, dv[t], h[t], b[t]);
    }
    poison(d, dv[3], b[3]);
    void *hb[4], *db[4];
    for (int t = 0; t < 4; t++) {
        hb[t] = (char *)h[t] + off * zc_dtype_size(dts[t]);
        db[t] = (char *)dv[t] + off * zc_dtype_size(dts[t]);
    }
    if (lion) {
        const zc_lion_hparams hp = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99,
                                    .weight_decay = wd, .sign_rule = rule};
        const zc_lion_coeffs c = zc__lion_coeffs(&hp);
        zc_lion_shard hs = {.master = hb[0], .m = hb[1], .grad = hb[2], .grad_dtype = gdt,
                            .grad_scale = 0.5f, .param_out = odt < 0 ? NULL : hb[3],
                            .param_out_dtype = dts[3], .n = n};
        zc_lion_shard ds = {.master = db[0], .m = db[1], .grad = db[2], .grad_dtype = gdt,
                            .grad_scale = 0.5f, .param_out = odt < 0 ? NULL : db[3],
                            .param_out_dtype = dts[3], .n = n};
        cr_assert_eq(d->ops->lion(d, &ds, &c, NULL), ZC_OK, "%s", zc_last_error());
        zc__lion_scalar(&hs, &c);
    } else {
        const zc_adagrad_hparams hp = {.lr = 1e-2, .eps = 1e-10, .weight_decay = wd,
                                       .numerator = rule};
        const zc_adagrad_coeffs c = zc__adagrad_coeffs(&hp, 3);
        zc_adagrad_shard hs = {.master = hb[0], .sum = hb[1], .grad = hb[2], .grad_dtype = gdt,
                               .grad_scale = 0.5f, .param_out = odt < 0 ? NULL : hb[3],
                               .param_out_dtype = dts[3], .n = n};
        zc_adagrad_shard ds = {.master = db[0], .sum = db[1], .grad = db[2], .grad_dtype = gdt,
                               .grad_scale = 0.5f, .param_out = odt < 0 ? NULL : db[3],
                               .param_out_dtype = dts[3], .n = n};
        cr_assert_eq(d->ops->adagrad(d, &ds, &c, NULL), ZC_OK, "%s", zc_last_error());
        zc__adagrad_scalar(&hs, &c);
    }
    for (int t = 0; t < 4; t++) {
        if (t == 2 || (t == 3 && odt < 0))
            continue;
        d2h(d, g[t], dv[t], b[t]);
        for (size_t i = off; i < n + off; i++) {
            const size_t es = zc_dtype_size(dts[t]);
            const float a = zc__load_f32(h[t], dts[t], i), e = zc__load_f32(g[t], dts[t], i);
            cr_assert((isnan(a) && isnan(e)) || !memcmp((char *)h[t] + i * es,
                                                        (char *)g[t] + i * es, es),
                      "%s grad %s copy %d rule %u wd %g tensor %d [%zu]: host %a gpu %a",
                      lion ? "lion" : "adagrad", zc_dtype_name(gdt), odt, (unsigned)rule, wd, t,
                      i, (double)a, (double)e);
        }
    }
    for (int t = 0; t < 4; t++) {
        dev_free(d, dv[t], b[t]);
        free(h[t]);
        free(g[t]);
    }
}

Test(gpu_kernels, lion_and_adagrad_match_scalar_reference, .timeout = 300)
{
    zc_device *d;
    g_open_or_skip(&d);
    uint64_t s = t_seed("gpu lion adagrad");
    for (int lion = 0; lion < 2; lion++)
        for (int gk = 0; gk < 3; gk++)
            for (int ok = -1; ok < 3; ok++)
                for (uint32_t rule = 0; rule < 2; rule++)
                    for (int w = 0; w < 2; w++)
                        ew_case(d, &s, lion, FLOATS[gk], ok < 0 ? -1 : (int)FLOATS[ok], rule,
                                w ? 0.1 : 0.0, (gk + ok + w) & 1);
    d->ops->destroy(d);
    t_assert_no_leaks();
}

/* DeepSpeed's symmetric int8 groups (quant/quant.h): quantize and back on
 * the device against the host's functions - q and the stored scales
 * bitwise, the values back within the suite's tolerance (the kernels are
 * written to equal them; NaN = NaN) - for fp32, fp16 and bf16 buffers with specials (an
 * infinite value makes its group's scale 0: NaN * 0 = NaN -> q 0, on both),
 * 24000 elements in 3 groups and 65536 in DeepSpeed's 16. */
Test(gpu_kernels, quant_int8_matches_host, .timeout = 120)
{
    zc_device *d, *h = zc__device_host();
    g_open_or_skip(&d);
    uint64_t s = t_seed("gpu quant int8");
    static const size_t ns[] = {24000, 65536};
    for (int k = 0; k < 3; k++)
        for (int ni = 0; ni < 2; ni++) {
            const zc_dtype dt = FLOATS[k];
            const size_t n = ns[ni], es = zc_dtype_size(dt);
            size_t groups;
            cr_assert_eq(zc__quant_groups(n, &groups), ZC_OK);
            char *x = malloc(n * es), *hb = malloc(n * es), *gb = malloc(n * es);
            int8_t *hq = malloc(n), *gq = malloc(n);
            float *hs = malloc(groups * 4), *gs = malloc(groups * 4);
            fill(&s, x, dt, n, ni); /* specials in the second size */
            void *dx = dev_alloc(d, n * es), *dq = dev_alloc(d, n), *ds = dev_alloc(d, groups * 4),
                 *db = dev_alloc(d, n * es);
            h2d(d, dx, x, n * es);
            poison(d, dq, n);
            poison(d, db, n * es);
            cr_assert_eq(d->ops->quant_int8(d, dx, dt, n, groups, dq, ds, NULL), ZC_OK, "%s",
                         zc_last_error());
            cr_assert_eq(d->ops->dequant_int8(d, dq, ds, n, groups, db, dt, NULL), ZC_OK, "%s",
                         zc_last_error());
            cr_assert_eq(h->ops->quant_int8(h, x, dt, n, groups, hq, hs, NULL), ZC_OK);
            cr_assert_eq(h->ops->dequant_int8(h, hq, hs, n, groups, hb, dt, NULL), ZC_OK);
            d2h(d, gq, dq, n);
            d2h(d, gs, ds, groups * 4);
            d2h(d, gb, db, n * es);
            char what[64];
            snprintf(what, sizeof what, "quant %s n %zu", zc_dtype_name(dt), n);
            cr_assert(!memcmp(hq, gq, n), "%s: q differs", what);
            for (size_t g = 0; g < groups; g++)
                cr_assert(!memcmp(&hs[g], &gs[g], 4) || (isnan(hs[g]) && isnan(gs[g])),
                          "%s: scale %zu host %a gpu %a", what, g, (double)hs[g], (double)gs[g]);
            expect_close(what, dt, hb, gb, n, 0);
            dev_free(d, dx, n * es), dev_free(d, dq, n), dev_free(d, ds, groups * 4);
            dev_free(d, db, n * es);
            free(x), free(hb), free(gb), free(hq), free(gq), free(hs), free(gs);
        }
    d->ops->destroy(d);
    t_assert_no_leaks();
}

/* One launch over a segment of several grid waves (the engine's device home
 * runs a whole segment at once) gives the bits of the same segment cut into
 * the NVMe home's 2^18-element pieces, and the host's: bf16 gradients and
 * parameter copy, AdamW. */
Test(gpu_kernels, adam_one_launch_per_segment_equals_pieces, .timeout = 300)
{
    zc_device *d;
    g_open_or_skip(&d);
    uint64_t s = t_seed("gpu adam segment");
    const size_t n = ((size_t)3 << 20) + 4 * 37, piece = (size_t)1 << 18;
    const size_t fb = n * sizeof(float), hb = n * sizeof(uint16_t);
    zc_adam_hparams hp = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                          .weight_decay = 0.01, .adamw = true, .bias_correction = true};
    const zc_adam_coeffs c = zc__adam_coeffs(&hp, 3);
    float *h[3], *got[2][3];
    for (int t = 0; t < 3; t++) {
        h[t] = malloc(fb);
        got[0][t] = malloc(fb);
        got[1][t] = malloc(fb);
    }
    uint16_t *hg = malloc(hb), *hout = malloc(hb), *gout[2] = {malloc(hb), malloc(hb)};
    fill(&s, h[0], ZC_DTYPE_F32, n, 0);
    for (size_t i = 0; i < n; i++) {
        h[1][i] = t_rand_range(&s, -0.01f, 0.01f);
        h[2][i] = t_rand_range(&s, 0.0f, 1e-4f);
    }
    fill(&s, hg, ZC_DTYPE_BF16, n, 0);
    void *dg = dev_alloc(d, hb);
    h2d(d, dg, hg, hb);
    for (int way = 0; way < 2; way++) {
        float *dt[3];
        for (int t = 0; t < 3; t++) {
            dt[t] = dev_alloc(d, fb);
            h2d(d, dt[t], h[t], fb);
        }
        void *dout = dev_alloc(d, hb);
        const size_t step = way == 0 ? n : piece;
        for (size_t x = 0; x < n; x += step) {
            const size_t len = n - x < step ? n - x : step;
            zc_adam_shard ds = {dt[0] + x, dt[1] + x, dt[2] + x, (uint16_t *)dg + x,
                                ZC_DTYPE_BF16, 0.5f, (uint16_t *)dout + x, ZC_DTYPE_BF16, len};
            cr_assert_eq(d->ops->adam(d, &ds, &c, NULL), ZC_OK, "%s", zc_last_error());
        }
        for (int t = 0; t < 3; t++) {
            d2h(d, got[way][t], dt[t], fb);
            dev_free(d, dt[t], fb);
        }
        d2h(d, gout[way], dout, hb);
        dev_free(d, dout, hb);
    }
    for (int t = 0; t < 3; t++)
        cr_assert(memcmp(got[0][t], got[1][t], fb) == 0,
                  "tensor %d: one launch and 2^18-element pieces differ", t);
    cr_assert(memcmp(gout[0], gout[1], hb) == 0, "bf16 copy: one launch and pieces differ");
    zc_adam_shard hs = {h[0], h[1], h[2], hg, ZC_DTYPE_BF16, 0.5f, hout, ZC_DTYPE_BF16, n};
    zc__adam_scalar(&hs, &c);
    expect_close("segment master", ZC_DTYPE_F32, h[0], got[0][0], n, 0);
    expect_close("segment m", ZC_DTYPE_F32, h[1], got[0][1], n, 0);
    expect_close("segment v", ZC_DTYPE_F32, h[2], got[0][2], n, 0);
    expect_close("segment bf16 copy", ZC_DTYPE_BF16, hout, gout[0], n, 0);
    dev_free(d, dg, hb);
    for (int t = 0; t < 3; t++)
        free(h[t]), free(got[0][t]), free(got[1][t]);
    free(hg), free(hout), free(gout[0]), free(gout[1]);
    d->ops->destroy(d);
    t_assert_no_leaks();
}

/* Ordering across streams by events, injected allocation failure, and the
 * device counters returning to zero. */
Test(gpu_kernels, streams_events_and_allocation_failure)
{
    zc_device *d;
    g_open_or_skip(&d);
    const size_t n = 1 << 22, bytes = n * sizeof(float);
    float *h = malloc(bytes), *got = malloc(bytes);
    for (size_t i = 0; i < n; i++)
        h[i] = (float)(i % 1000);
    void *a, *b, *ev;
    cr_assert_eq(d->ops->stream_create(d, &a), ZC_OK);
    cr_assert_eq(d->ops->stream_create(d, &b), ZC_OK);
    cr_assert_eq(d->ops->event_create(d, &ev), ZC_OK);
    float *x = dev_alloc(d, bytes);
    /* Copy on a, scale on b after an event: b must see the copied data. */
    cr_assert_eq(d->ops->copy(d, x, h, bytes, ZC_COPY_H2D, a), ZC_OK);
    cr_assert_eq(d->ops->event_record(d, ev, a), ZC_OK);
    cr_assert_eq(d->ops->stream_wait_event(d, b, ev), ZC_OK);
    cr_assert_eq(d->ops->scale(d, x, ZC_DTYPE_F32, n, 2.0f, b), ZC_OK);
    cr_assert_eq(d->ops->stream_sync(d, b), ZC_OK);
    d2h(d, got, x, bytes);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(got[i], 2.0f * (float)(i % 1000), "element %zu", i);
    dev_free(d, x, bytes);

    int64_t before = zc__mem_global_bytes(ZC_MEMKIND_DEVICE);
    zc__mem_fail_after(ZC_MEMKIND_DEVICE, 1);
    void *p = (void *)1;
    cr_assert_eq(d->ops->alloc(d, NULL, ZC_MEM_PARAMS, 4096, "probe", &p), ZC_ERR_NO_MEMORY);
    cr_assert_null(p);
    cr_assert(strstr(zc_last_error(), "probe"), "%s", zc_last_error());
    cr_assert_eq(zc__mem_global_bytes(ZC_MEMKIND_DEVICE), before);

    d->ops->event_destroy(d, ev);
    d->ops->stream_destroy(d, a);
    d->ops->stream_destroy(d, b);
    d->ops->destroy(d);
    free(h), free(got);
    t_assert_no_leaks();
}
