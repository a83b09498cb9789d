/* Lion over one shard (internal optimizer seam).
 *
 * Lion (Chen et al., "Symbolic Discovery of Optimization Algorithms", 2023)
 * as DeepSpeed runs it, one formula for every variant (scalar reference,
 * AVX2, AVX-512), evaluated in fp32:
 *
 *   g  = grad[i] * grad_scale        (unscale, clip, averaging: one factor)
 *   c  = beta1 * m + one_minus_beta1 * g
 *   u  = lr with the sign of c, by sign_rule (below)
 *   p  = p * decay                   (decoupled decay 1 - lr * wd, on the pre-update p;
 *                                     not applied when decay is 1)
 *   p  = p - u
 *   m  = beta2 * m + one_minus_beta2 * g   (the old m: c is computed first)
 *   param_out[i] = round_to_nearest_even(p)  (optional 16-bit copy)
 *
 * Where the rules come from (DeepSpeed, microsoft/DeepSpeed at 38327e0):
 *  - the update order, c from the old m, m updated after p with beta2, and
 *    the decay p * (1 - lr * wd) + u applied only when weight_decay > 0:
 *    csrc/lion/cpu_lion_impl.cpp (Lion_Optimizer::Step_1) and
 *    csrc/includes/cpu_lion.h (Step_AVX); the CUDA kernel
 *    csrc/lion/multi_tensor_lion.cu (LionFunctor) has the same order and
 *    always multiplies by 1 - lr * wd;
 *  - defaults lr 1e-3, betas (0.9, 0.999), weight_decay 0:
 *    deepspeed/ops/lion/cpu_lion.py (DeepSpeedCPULion) and fused_lion.py
 *    (FusedLion) alike; the paper suggests betas (0.9, 0.99), DeepSpeed's
 *    code defaults are what a config without betas gets;
 *  - the state: one tensor, exp_avg, zeros at the first step (both .py);
 *  - which sign, where the two DeepSpeed optimizers differ
 *    (deepspeed/runtime/engine.py _configure_basic_optimizer runs
 *    DeepSpeedCPULion under optimizer offload, FusedLion otherwise):
 *      ZC_LION_SIGN_BIT (DeepSpeedCPULion, Step_1's -copysign(lr, c)): the
 *        sign bit of c decides, so +0 moves p by -lr, -0 by +lr, a NaN by
 *        the opposite of its sign bit;
 *      ZC_LION_SIGN_GT0 (FusedLion, `c > 0 ? -lr : lr`): only c > 0 moves p
 *        down; +0, -0 and NaN move it up by lr.
 *    Neither is the paper's sign(0) = 0 (no move). Both keep p finite for a
 *    NaN gradient (m becomes NaN; the paper's rule would make p NaN); zeroc
 *    moves p up by lr for every NaN c under both rules (lion_elem.h: for
 *    DeepSpeedCPULion that is what the NaN x86 arithmetic generates does,
 *    its sign bit being set).
 *    (cpu_lion.h's AVX body masks c with the bits of -1.0f rather than
 *    -0.0f before the XOR with -lr, so its vector lanes do not produce
 *    +-lr for nonzero c; Step_1's copysign is the rule it means.)
 *
 * The coefficients are computed once per step in double (zc__lion_coeffs)
 * and rounded to float, so every variant sees the same constants. Every
 * file of the formula is compiled with -ffp-contract=off and the SIMD
 * variants evaluate the same operations in the same order, so they agree
 * with the scalar reference bitwise. */
#ifndef ZC_OPTIM_LION_H
#define ZC_OPTIM_LION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zeroc/zeroc.h"

/* zc_lion_hparams.sign_rule / zc_lion_coeffs.sign_rule. */
enum {
    ZC_LION_SIGN_BIT = 0, /* DeepSpeedCPULion: u = copysign(lr, c) */
    ZC_LION_SIGN_GT0 = 1, /* FusedLion: u = c > 0 ? lr : -lr */
};

typedef struct zc_lion_hparams {
    double lr, beta1, beta2, weight_decay;
    uint32_t sign_rule; /* ZC_LION_SIGN_* */
} zc_lion_hparams;

typedef struct zc_lion_coeffs {
    float beta1, beta2, one_minus_beta1, one_minus_beta2;
    float lr;
    float decay; /* 1 - lr * wd; 1: no decay (the multiply is skipped) */
    uint32_t sign_rule;
} zc_lion_coeffs;

/* The coefficients of one step (Lion's do not depend on the step count). */
zc_lion_coeffs zc__lion_coeffs(const zc_lion_hparams *hp);

/* One shard. master, m: n fp32 values, updated in place. grad: n values of
 * grad_dtype (F32, F16 or BF16), read only. param_out: NULL, or n values of
 * param_out_dtype (F32, F16 or BF16). */
typedef struct zc_lion_shard {
    float *master, *m;
    const void *grad;
    zc_dtype grad_dtype;
    float grad_scale;
    void *param_out;
    zc_dtype param_out_dtype;
    size_t n;
} zc_lion_shard;

/* Elements [lo, hi) of s as a shard of its own. */
zc_lion_shard zc__lion_slice(const zc_lion_shard *s, size_t lo, size_t hi);

/* The scalar reference, one element at a time (-ffp-contract=off). */
void zc__lion_scalar(const zc_lion_shard *s, const zc_lion_coeffs *c);

/* Validates a shard: buffers present for n > 0, gradient and copy dtypes
 * F32, F16 or BF16, a known sign rule. ZC_ERR_INVALID_ARG naming `who`. */
zc_status zc__lion_check(const zc_lion_shard *s, const zc_lion_coeffs *c, const char *who);

/* Runs variant `variant` (adam_isa.h's table; -1: the selected one) with
 * `nthreads` threads of the host pool (0: the pool's default), split into
 * the static tiles zc__adam_host_run uses, so the thread count changes no
 * bit. Returns zc__lion_check's error, ZC_ERR_UNSUPPORTED for a variant this
 * build or CPU lacks, or the pool's error. */
zc_status zc__lion_host_run(const zc_lion_shard *s, const zc_lion_coeffs *c, int variant,
                            int nthreads);

/* The engine's entry: the selected variant (ZC_CPU_ISA or the best one) on
 * the default threads. */
zc_status zc__lion_host(const zc_lion_shard *s, const zc_lion_coeffs *c);

/* The SIMD kernels (each in its ISA's library when built). */
void zc__lion_avx2(const zc_lion_shard *s, const zc_lion_coeffs *c);
void zc__lion_avx512(const zc_lion_shard *s, const zc_lion_coeffs *c);

#endif
