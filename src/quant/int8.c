/* DeepSpeed's symmetric int8 groups on the host (quant.h): the reference the
 * GPU kernel is held to and the host path's own qwZ. */
#include <math.h>

#include "base/dtype.h"
#include "quant/quant.h"

zc_status zc__quant_groups(size_t n, size_t *out)
{
    *out = 0;
    if (n == 0 || n % 8)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "quantized weights: %zu elements; DeepSpeed's "
                      "quantizer requires a multiple of 8", n);
    size_t g = (n + 7999) / 8000;
    while (g < n && n % (8 * g))
        g++;
    while (n % (16 * g) == 0 && n / g > 8000)
        g *= 2;
    if (n % (8 * g) || n / g >= 16000 || n <= g)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "quantized weights: no group size for %zu elements "
                      "(DeepSpeed's adaptive grouping needs a multiple of 8 x groups, each "
                      "group under 16k elements)", n);
    *out = g;
    return ZC_OK;
}

static zc_status check(const void *a, const void *b, const void *c, zc_dtype dt, size_t n,
                       size_t groups, const char *who)
{
    if (dt != ZC_DTYPE_F32 && dt != ZC_DTYPE_F16 && dt != ZC_DTYPE_BF16)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: dtype %s is not fp32, fp16 or bf16", who,
                      zc_dtype_name(dt));
    if (n && (!a || !b || !c))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: NULL buffer for %zu elements", who, n);
    if (groups == 0 || n % groups)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: %zu groups do not divide %zu elements", who,
                      groups, n);
    return ZC_OK;
}

/* The fp16 value DeepSpeed's kernel reads. */
static float as_half(const void *x, zc_dtype dt, size_t i)
{
    return dt == ZC_DTYPE_F16 ? zc__f16_to_f32(((const uint16_t *)x)[i])
                              : zc__f16_to_f32(zc__f32_to_f16(zc__load_f32(x, dt, i)));
}

zc_status zc__quant_int8(const void *x, zc_dtype dt, size_t n, size_t groups, int8_t *q,
                         float *scales)
{
    ZC_CHECK(check(x, q, scales, dt, n, groups, "zc__quant_int8"));
    const size_t per = n / groups;
    for (size_t g = 0; g < groups; g++) {
        /* The group's absmax in fp16, as the kernel's __hmax2 reduction takes
         * it: a NaN loses to the other operand. */
        float max = 0.0f;
        for (size_t i = g * per; i < (g + 1) * per; i++) {
            const float a = fabsf(as_half(x, dt, i));
            if (a > max)
                max = a;
        }
        const float scale = max == 0.0f ? 1.0f : 256.0f / (2.0f * max);
        for (size_t i = g * per; i < (g + 1) * per; i++) {
            const float v = as_half(x, dt, i) * scale;
            /* __float2int_rn: nearest, ties to even, saturating; NaN -> 0
             * (an infinite max makes the scale 0 and inf x 0 a NaN). */
            long r = isnan(v) ? 0 : v >= 2147483647.0f ? 2147483647L
                   : v <= -2147483648.0f ? -2147483647L - 1 : lrintf(v);
            if (r < -128)
                r = -128;
            if (r > 127)
                r = 127;
            q[i] = (int8_t)r;
        }
        scales[g] = 1.0f / scale;
    }
    return ZC_OK;
}

zc_status zc__dequant_int8(const int8_t *q, const float *scales, size_t n, size_t groups,
                           void *out, zc_dtype dt)
{
    ZC_CHECK(check(q, scales, out, dt, n, groups, "zc__dequant_int8"));
    const size_t per = n / groups;
    for (size_t i = 0; i < n; i++) {
        const uint16_t h = zc__f32_to_f16((float)q[i] * scales[i / per]);
        if (dt == ZC_DTYPE_F16)
            ((uint16_t *)out)[i] = h;
        else
            zc__store_f32(out, dt, i, zc__f16_to_f32(h));
    }
    return ZC_OK;
}
