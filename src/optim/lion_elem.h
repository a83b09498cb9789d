/* One Lion element update, written once (internal to src/optim).
 *
 * The scalar reference loops over it and the SIMD variants use it for the
 * elements their vector loop does not cover. Every file that includes it is
 * compiled with -ffp-contract=off, and the SIMD variants evaluate the same
 * operations in the same order (lion.h), so they agree with it bitwise. */
#ifndef ZC_OPTIM_LION_ELEM_H
#define ZC_OPTIM_LION_ELEM_H

#include <math.h>

#include "base/dtype.h"
#include "optim/lion.h"

/* lr with the sign c gives it under the rule (lion.h); p moves by minus
 * this. A NaN c gives -lr under both rules: FusedLion's c > 0 is false for
 * it, and for DeepSpeedCPULion's sign bit zeroc takes the sign of the NaN
 * x86 arithmetic generates (the default NaN, sign bit set). Which of two NaN
 * operands an addition passes on is not fixed by C, so the sign of a NaN c
 * computed from a NaN m and a NaN g could differ between compilations and
 * between the variants; this rule keeps them bitwise alike. */
static inline float zc__lion_signed_lr(float c, const zc_lion_coeffs *k)
{
    if (isnan(c))
        return -k->lr;
    if (k->sign_rule == ZC_LION_SIGN_GT0)
        return c > 0.0f ? k->lr : -k->lr; /* false for +-0 */
    return copysignf(k->lr, c);
}

static inline void zc__lion_elem(const zc_lion_shard *s, const zc_lion_coeffs *k, size_t i)
{
    float p = s->master[i];
    float m = s->m[i];
    float g = zc__load_f32(s->grad, s->grad_dtype, i) * s->grad_scale;
    float c = k->beta1 * m + k->one_minus_beta1 * g;
    float u = zc__lion_signed_lr(c, k);
    if (k->decay != 1.0f) /* skipped, not multiplied by 1: a signalling NaN stays as it is */
        p = p * k->decay;
    p = p - u;
    m = k->beta2 * m + k->one_minus_beta2 * g;
    s->master[i] = p;
    s->m[i] = m;
    if (s->param_out)
        zc__store_f32(s->param_out, s->param_out_dtype, i, p);
}

#endif
