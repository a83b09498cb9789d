#include "adam_case.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/dtype.h"
#include "helpers.h"

static void *alloc_buf(ta_case *c, int slot, size_t bytes)
{
    void *p = NULL;
    cr_assert_eq(zc__host_alloc(NULL, ZC_MEM_OTHER, bytes, "test buffer", &p), ZC_OK, "%s",
                 zc_last_error());
    c->bufs[slot] = p;
    c->sizes[slot] = bytes;
    return p;
}

static float rand_special_f32(uint64_t *rng)
{
    switch (t_rand_u64(rng) % 6) {
    case 0: return INFINITY;
    case 1: return -INFINITY;
    case 2: return NAN;
    case 3: return zc__bits_f32(0x7fa00001u); /* signalling NaN with a payload */
    case 4: return t_rand_range(rng, -1.0f, 1.0f) * 0x1p-140f; /* denormal */
    default: return t_rand_range(rng, -1.0f, 1.0f) * 0x1p-126f;
    }
}

/* A value whose bf16 or fp16 rounding is an exact tie, or that overflows fp16. */
static float rand_tie(uint64_t *rng)
{
    uint32_t r = (uint32_t)t_rand_u64(rng);
    switch (r % 3) {
    case 0: return zc__bits_f32((0x3f000000u + (r & 0x00ff0000u)) | 0x8000u); /* bf16 tie */
    case 1: return zc__bits_f32(0x3f000000u | ((r >> 8) & 0x7fc000u) | 0x1000u); /* fp16 tie */
    default: return (r & 8 ? 1.0f : -1.0f) * (65520.0f + (float)(r % 5000)); /* fp16 inf */
    }
}

static void fill_grad(ta_case *c, void *g, uint64_t *rng, bool specials)
{
    for (size_t i = 0; i < c->n; i++) {
        float x = t_rand_range(rng, -1.0f, 1.0f) * (c->gdt == ZC_DTYPE_F16 ? 8.0f : 1.0f);
        bool sp = specials && t_rand_u64(rng) % 64 == 0;
        if (c->gdt == ZC_DTYPE_F32) {
            ((float *)g)[i] = sp ? rand_special_f32(rng) : x;
        } else {
            uint16_t h = c->gdt == ZC_DTYPE_F16 ? zc__f32_to_f16(x) : zc__f32_to_bf16(x);
            if (sp) {
                uint16_t sign = (uint16_t)(t_rand_u64(rng) & 0x8000u);
                bool f16 = c->gdt == ZC_DTYPE_F16;
                switch (t_rand_u64(rng) % 4) {
                case 0: h = sign | (f16 ? 0x7c00 : 0x7f80); break;        /* inf */
                case 1: h = sign | (f16 ? 0x7e01 : 0x7fc1); break;        /* NaN */
                case 2: h = sign | (uint16_t)(1 + t_rand_u64(rng) % (f16 ? 0x3ff : 0x7f)); break;
                default: h = sign; break;                                 /* zero */
                }
            }
            ((uint16_t *)g)[i] = h;
        }
    }
}

void ta_case_init(ta_case *c, uint64_t *rng, size_t n, zc_dtype gdt, int odt, int offset,
                  bool mixed, bool specials)
{
    memset(c, 0, sizeof *c);
    c->n = n;
    c->gdt = gdt;
    c->odt = odt;
    c->offset = offset;
    c->mixed = mixed;
    size_t off = (size_t)offset;
    size_t f32b = (n + 1) * sizeof(float);
    float *master = (float *)alloc_buf(c, 0, f32b) + off;
    float *m = (float *)alloc_buf(c, 1, f32b) + (mixed ? 0 : off);
    float *v = (float *)alloc_buf(c, 2, f32b) + (mixed ? 0 : off);
    size_t gsz = zc_dtype_size(gdt);
    void *g = (char *)alloc_buf(c, 3, (n + 1) * gsz) + (mixed ? 0 : off) * gsz;
    for (size_t i = 0; i < n; i++) {
        float p = t_rand_range(rng, -2.0f, 2.0f);
        uint64_t r = t_rand_u64(rng) % 128;
        if (specials && r == 0)
            p = rand_special_f32(rng);
        else if (specials && r < 4)
            p = rand_tie(rng);
        master[i] = p;
        m[i] = t_rand_range(rng, -0.05f, 0.05f);
        v[i] = t_rand_range(rng, 0.0f, 1e-3f);
        if (specials && t_rand_u64(rng) % 64 == 0)
            v[i] = t_rand_unit(rng) < 0.5 ? 0.0f : 0x1p-140f;
    }
    fill_grad(c, g, rng, specials);
    c->ref = (zc_adam_shard){
        .master = master, .m = m, .v = v, .grad = g, .grad_dtype = gdt,
        .grad_scale = (float)(t_rand_unit(rng) < 0.5 ? 1.0 : 0.25 + t_rand_unit(rng)), .n = n,
    };
    c->test = c->ref;
    c->test.master = (float *)alloc_buf(c, 4, f32b) + off;
    c->test.m = (float *)alloc_buf(c, 5, f32b) + (mixed ? 0 : off);
    c->test.v = (float *)alloc_buf(c, 6, f32b) + (mixed ? 0 : off);
    memcpy(c->test.master, master, n * sizeof(float));
    memcpy(c->test.m, m, n * sizeof(float));
    memcpy(c->test.v, v, n * sizeof(float));
    if (odt >= 0) {
        size_t osz = zc_dtype_size((zc_dtype)odt);
        c->ref.param_out = (char *)alloc_buf(c, 7, (n + 1) * osz) + (mixed ? 0 : off) * osz;
        c->test.param_out = (char *)alloc_buf(c, 8, (n + 1) * osz) + (mixed ? 0 : off) * osz;
        c->ref.param_out_dtype = c->test.param_out_dtype = (zc_dtype)odt;
    }
}

void ta_case_free(ta_case *c)
{
    for (int i = 0; i < 9; i++)
        if (c->bufs[i])
            zc__host_free(NULL, ZC_MEM_OTHER, c->bufs[i], c->sizes[i]);
    memset(c, 0, sizeof *c);
}

static uint32_t ulp16(uint16_t a, uint16_t b, bool f16)
{
    uint16_t expo = f16 ? 0x7c00 : 0x7f80;
    bool na = (a & 0x7fff) > expo, nb = (b & 0x7fff) > expo;
    if (na || nb)
        return na && nb ? 0 : UINT32_MAX;
    int32_t ia = a & 0x8000 ? -(int32_t)(a & 0x7fff) : (int32_t)a;
    int32_t ib = b & 0x8000 ? -(int32_t)(b & 0x7fff) : (int32_t)b;
    return (uint32_t)abs(ia - ib);
}

uint32_t ta_case_compare(const ta_case *c, const char *what)
{
    const float *rf[3] = {c->ref.master, c->ref.m, c->ref.v};
    const float *tf[3] = {c->test.master, c->test.m, c->test.v};
    static const char *names[3] = {"master", "m", "v"};
    uint32_t worst = 0;
    for (int b = 0; b < 3; b++)
        for (size_t i = 0; i < c->n; i++) {
            uint32_t d = t_ulp_diff_f32(rf[b][i], tf[b][i]);
            if (d > worst)
                worst = d;
            if (d > 2)
                cr_assert_fail("%s: %s[%zu] = %a, reference %a (%u ulp apart, limit 2)", what,
                         names[b], i, (double)tf[b][i], (double)rf[b][i], d);
        }
    if (c->odt == ZC_DTYPE_F32) {
        for (size_t i = 0; i < c->n; i++) {
            float a = ((const float *)c->ref.param_out)[i], t = ((const float *)c->test.param_out)[i];
            if (t_ulp_diff_f32(a, t) > 2)
                cr_assert_fail("%s: copy[%zu] = %a, reference %a", what, i, (double)t, (double)a);
        }
    } else if (c->odt >= 0) {
        for (size_t i = 0; i < c->n; i++) {
            uint16_t a = ((const uint16_t *)c->ref.param_out)[i];
            uint16_t t = ((const uint16_t *)c->test.param_out)[i];
            if (ulp16(a, t, c->odt == ZC_DTYPE_F16) > 1)
                cr_assert_fail("%s: 16-bit copy[%zu] = 0x%04x, reference 0x%04x (limit 1 ulp)", what,
                         i, t, a);
        }
    }
    return worst;
}

void ta_case_assert_bitwise(const ta_case *c, const char *what)
{
    cr_assert_eq(memcmp(c->ref.master, c->test.master, c->n * 4), 0, "%s: master differs", what);
    cr_assert_eq(memcmp(c->ref.m, c->test.m, c->n * 4), 0, "%s: m differs", what);
    cr_assert_eq(memcmp(c->ref.v, c->test.v, c->n * 4), 0, "%s: v differs", what);
    if (c->odt >= 0)
        cr_assert_eq(memcmp(c->ref.param_out, c->test.param_out,
                            c->n * zc_dtype_size((zc_dtype)c->odt)),
                     0, "%s: copy differs", what);
}

zc_adam_hparams ta_random_hparams(uint64_t *rng, bool adamw, bool bias_correction)
{
    return (zc_adam_hparams){
        .lr = 1e-4 + 1e-2 * t_rand_unit(rng),
        .beta1 = 0.8 + 0.15 * t_rand_unit(rng),
        .beta2 = 0.99 + 0.0099 * t_rand_unit(rng),
        .eps = t_rand_unit(rng) < 0.5 ? 1e-8 : 1e-6,
        .weight_decay = t_rand_unit(rng) < 0.25 ? 0.0 : 0.1 * t_rand_unit(rng),
        .adamw = adamw,
        .bias_correction = bias_correction,
    };
}
