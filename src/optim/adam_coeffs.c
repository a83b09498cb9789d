/* Per-step Adam coefficients, computed in double and rounded once to float so
 * every variant (scalar, SIMD, CUDA) sees the same constants. */
#include <math.h>

#include "optim/adam.h"

zc_adam_coeffs zc__adam_coeffs(const zc_adam_hparams *hp, int64_t step)
{
    double t = (double)(step < 1 ? 1 : step);
    double step_size = hp->lr;
    double bc2_rsqrt = 1.0;
    if (hp->bias_correction) {
        /* In double, 1 - beta^t loses at most a few bits of 53 even for beta
         * close to 1: far below what the float rounding keeps. */
        double bc1 = 1.0 - pow(hp->beta1, t);
        double bc2 = 1.0 - pow(hp->beta2, t);
        step_size = hp->lr / bc1;
        bc2_rsqrt = 1.0 / sqrt(bc2);
    }
    zc_adam_coeffs c = {
        .beta1 = (float)hp->beta1,
        .beta2 = (float)hp->beta2,
        .one_minus_beta1 = (float)(1.0 - hp->beta1),
        .one_minus_beta2 = (float)(1.0 - hp->beta2),
        .eps = (float)hp->eps,
        .step_size = (float)step_size,
        .bc2_rsqrt = (float)bc2_rsqrt,
        .decoupled_decay = hp->adamw ? (float)(hp->lr * hp->weight_decay) : 0.0f,
        .l2_decay = hp->adamw ? 0.0f : (float)hp->weight_decay,
        .arith = ZC_ADAM_ARITH_ZEROC,
    };
    return c;
}
