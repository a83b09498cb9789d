/* Adagrad over one shard (internal optimizer seam).
 *
 * One formula for every variant (scalar reference, AVX2, AVX-512), in fp32:
 *
 *   g   = grad[i] * grad_scale       (unscale, clip, averaging: one factor)
 *   gd  = g + l2_decay * p           (L2 weight decay; skipped when l2_decay is 0)
 *   sum = sum + gd * gd
 *   d   = sqrtf(sum) + eps           (eps after the square root)
 *   p   = p - step_size * (num / d)  (num: gd, or g, by `numerator`)
 *   param_out[i] = round_to_nearest_even(p)  (optional 16-bit copy)
 *
 * Where the rules come from (microsoft/DeepSpeed at 38327e0, and torch):
 *  - deepspeed/runtime/engine.py _configure_basic_optimizer: type Adagrad is
 *    DeepSpeedCPUAdagrad under optimizer offload, torch.optim.Adagrad
 *    otherwise, each built from optimizer.params as keyword arguments;
 *  - DeepSpeedCPUAdagrad (deepspeed/ops/adagrad/cpu_adagrad.py): lr 1e-2,
 *    eps 1e-10, weight_decay 0; the accumulator exp_avg_sq starts at zeros;
 *    csrc/adagrad/cpu_adagrad.cpp Step_1 and csrc/includes/cpu_adagrad.h
 *    Step_AVX: the L2 term param * wd + grad (only when wd > 0) enters the
 *    accumulator, the square root, eps added after it, and the update
 *    p + (-lr) * (grad / d) whose numerator is the gradient read before
 *    the L2 term was added (ZC_ADAGRAD_NUM_RAW); no lr decay;
 *  - torch.optim.Adagrad (torch/optim/adagrad.py _single_tensor_adagrad):
 *    the same defaults (lr 1e-2, eps 1e-10, weight_decay 0), the L2 term
 *    grad + wd * param in the numerator too (ZC_ADAGRAD_NUM_DECAYED), the
 *    accumulator starting at initial_accumulator_value (default 0), and
 *    clr = lr / (1 + (step - 1) * lr_decay) (lr_decay default 0).
 * With weight_decay 0 the two are the same formula. The engine picks the
 * numerator as DeepSpeed picks the optimizer.
 *
 * The coefficients are computed once per step in double (zc__adagrad_coeffs)
 * and rounded to float. Every file of the formula is compiled with
 * -ffp-contract=off and the SIMD variants evaluate the same operations in
 * the same order (sqrt and div are correctly rounded), so they agree with
 * the scalar reference bitwise. */
#ifndef ZC_OPTIM_ADAGRAD_H
#define ZC_OPTIM_ADAGRAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zeroc/zeroc.h"

/* zc_adagrad_hparams.numerator / zc_adagrad_coeffs.numerator. */
enum {
    ZC_ADAGRAD_NUM_RAW = 0,     /* DeepSpeedCPUAdagrad: g without the L2 term */
    ZC_ADAGRAD_NUM_DECAYED = 1, /* torch.optim.Adagrad: g + wd * p */
};

typedef struct zc_adagrad_hparams {
    double lr, eps, weight_decay;
    double lr_decay;    /* torch.optim.Adagrad's; 0 for DeepSpeedCPUAdagrad */
    uint32_t numerator; /* ZC_ADAGRAD_NUM_* */
} zc_adagrad_hparams;

typedef struct zc_adagrad_coeffs {
    float step_size; /* lr / (1 + (step - 1) * lr_decay) */
    float eps;
    float l2_decay;  /* wd; 0: no L2 term */
    uint32_t numerator;
} zc_adagrad_coeffs;

/* The coefficients for optimizer step `step` (1-based). */
zc_adagrad_coeffs zc__adagrad_coeffs(const zc_adagrad_hparams *hp, int64_t step);

/* One shard. master, sum: n fp32 values, updated in place (sum starts at the
 * initial accumulator value: the engine's to fill). grad: n values of
 * grad_dtype (F32, F16 or BF16), read only. param_out: NULL, or n values of
 * param_out_dtype (F32, F16 or BF16). */
typedef struct zc_adagrad_shard {
    float *master, *sum;
    const void *grad;
    zc_dtype grad_dtype;
    float grad_scale;
    void *param_out;
    zc_dtype param_out_dtype;
    size_t n;
} zc_adagrad_shard;

/* Elements [lo, hi) of s as a shard of its own. */
zc_adagrad_shard zc__adagrad_slice(const zc_adagrad_shard *s, size_t lo, size_t hi);

/* The scalar reference, one element at a time (-ffp-contract=off). */
void zc__adagrad_scalar(const zc_adagrad_shard *s, const zc_adagrad_coeffs *c);

/* Validates a shard: buffers present for n > 0, gradient and copy dtypes
 * F32, F16 or BF16, a known numerator. ZC_ERR_INVALID_ARG naming `who`. */
zc_status zc__adagrad_check(const zc_adagrad_shard *s, const zc_adagrad_coeffs *c,
                            const char *who);

/* Runs variant `variant` (adam_isa.h's table; -1: the selected one) with
 * `nthreads` threads of the host pool (0: the pool's default), split into
 * the static tiles zc__adam_host_run uses, so the thread count changes no
 * bit. Returns zc__adagrad_check's error, ZC_ERR_UNSUPPORTED for a variant
 * this build or CPU lacks, or the pool's error. */
zc_status zc__adagrad_host_run(const zc_adagrad_shard *s, const zc_adagrad_coeffs *c,
                               int variant, int nthreads);

/* The engine's entry: the selected variant on the default threads. */
zc_status zc__adagrad_host(const zc_adagrad_shard *s, const zc_adagrad_coeffs *c);

/* The SIMD kernels (each in its ISA's library when built). */
void zc__adagrad_avx2(const zc_adagrad_shard *s, const zc_adagrad_coeffs *c);
void zc__adagrad_avx512(const zc_adagrad_shard *s, const zc_adagrad_coeffs *c);

#endif
