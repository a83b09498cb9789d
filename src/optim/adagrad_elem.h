/* One Adagrad element update, written once (internal to src/optim).
 *
 * The scalar reference loops over it and the SIMD variants use it for the
 * elements their vector loop does not cover. Every file that includes it is
 * compiled with -ffp-contract=off, and the SIMD variants evaluate the same
 * operations in the same order (adagrad.h), so they agree with it bitwise. */
#ifndef ZC_OPTIM_ADAGRAD_ELEM_H
#define ZC_OPTIM_ADAGRAD_ELEM_H

#include <math.h>

#include "base/dtype.h"
#include "optim/adagrad.h"

/* The L2 term is applied only when its coefficient is non-zero (as
 * DeepSpeed's `if (_weight_decay > 0)`), which also keeps an inf parameter
 * from turning the gradient into NaN through 0 * inf. */
static inline void zc__adagrad_elem(const zc_adagrad_shard *s, const zc_adagrad_coeffs *k,
                                    size_t i)
{
    float p = s->master[i];
    float g = zc__load_f32(s->grad, s->grad_dtype, i) * s->grad_scale;
    float gd = g;
    if (k->l2_decay != 0.0f)
        gd = g + k->l2_decay * p;
    float sum = s->sum[i] + gd * gd;
    float d = sqrtf(sum) + k->eps;
    float num = k->numerator == ZC_ADAGRAD_NUM_DECAYED ? gd : g;
    p = p - k->step_size * (num / d);
    s->master[i] = p;
    s->sum[i] = sum;
    if (s->param_out)
        zc__store_f32(s->param_out, s->param_out_dtype, i, p);
}

#endif
