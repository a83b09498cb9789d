/* DeepSpeedCPUAdam's per-step coefficients (optimizer.params.
 * deepspeed_arithmetic), as DeepSpeed 0.19.8 computes them in
 * csrc/includes/cpu_adam.h: IncrementStep (lines 71-92) keeps beta^t as a
 * running fp32 product, update_state (94-106) derives the bias corrections
 * from it in fp32, and Step_AVX (148-168) the kernel's constants. Everything
 * here is fp32 arithmetic on values rounded to fp32 where DeepSpeed's
 * binding rounds them (lr, betas, eps, weight decay are C++ floats there);
 * only pow() runs in double, as std::pow(float, size_t) does. No expression
 * here is a multiply-add, so no compiler contraction can change a bit. */
#include <math.h>

#include "optim/adam.h"

zc_adam_ds_state zc__adam_ds_fresh(double beta1, double beta2)
{
    /* Adam_Optimizer's constructor: _betta1_t = _betta2_t = 1, _step = 0.
     * (The CPU FusedAdam builds it with placeholder betas of 0, so its first
     * step takes the pow path; pow(beta, 1) is beta exactly, the same as the
     * product 1 * beta, so the two constructions give the same powers.) */
    return (zc_adam_ds_state){.beta1 = (float)beta1, .beta2 = (float)beta2, .beta1_t = 1.0f,
                              .beta2_t = 1.0f, .step = 0};
}

void zc__adam_ds_increment(zc_adam_ds_state *st, int64_t step, double beta1, double beta2)
{
    const float b1 = (float)beta1, b2 = (float)beta2;
    if (b1 != st->beta1 || b2 != st->beta2) {
        /* New betas (OneCycle's cycle_momentum): both powers from pow(). */
        st->step = step;
        st->beta1 = b1;
        st->beta2 = b2;
        st->beta1_t = (float)pow((double)b1, (double)step);
        st->beta2_t = (float)pow((double)b2, (double)step);
    } else if (step == st->step + 1) {
        st->step++;
        st->beta1_t *= st->beta1;
        st->beta2_t *= st->beta2;
    } else if (step != st->step) {
        /* A jump: the first step after a resume, whose optimizer was fresh. */
        st->beta1_t = (float)pow((double)st->beta1, (double)step);
        st->beta2_t = (float)pow((double)st->beta2, (double)step);
        st->step = step;
    }
}

zc_adam_coeffs zc__adam_coeffs_ds(const zc_adam_ds_state *st, const zc_adam_hparams *hp)
{
    const float alpha = (float)hp->lr, eps = (float)hp->eps, wd = (float)hp->weight_decay;
    float bc1 = 1.0f, bc2 = 1.0f;
    if (hp->bias_correction) {
        bc1 = 1.0f - st->beta1_t;
        bc2 = 1.0f / sqrtf(1.0f - st->beta2_t);
    }
    /* Step_AVX: step_size = -alpha / bc1 and w_decay = -alpha * wd; the
     * kernels apply them negated (fma(x, -c, p)), and -(a / b), -(a * b) are
     * those values exactly. */
    zc_adam_coeffs c = {
        .beta1 = st->beta1,
        .beta2 = st->beta2,
        .one_minus_beta1 = 1.0f - st->beta1,
        .one_minus_beta2 = 1.0f - st->beta2,
        .eps = eps,
        .step_size = alpha / bc1,
        .bc2_rsqrt = bc2,
        .decoupled_decay = hp->adamw && wd > 0.0f ? alpha * wd : 0.0f,
        .l2_decay = !hp->adamw && wd > 0.0f ? wd : 0.0f,
        .arith = ZC_ADAM_ARITH_DEEPSPEED,
    };
    return c;
}
