/* Adam / AdamW over one shard (internal optimizer seam).
 *
 * One formula everywhere (scalar reference, SIMD variants, CUDA kernel), the
 * torch.optim.AdamW / DeepSpeed FusedAdam math, evaluated in fp32:
 *
 *   g  = grad[i] * grad_scale                (unscale, clip, averaging: one factor)
 *   g += l2_decay * p                        (Adam mode only; l2_decay = wd)
 *   m  = beta1 * m + one_minus_beta1 * g
 *   v  = beta2 * v + one_minus_beta2 * g * g
 *   d  = sqrtf(v) * bc2_rsqrt + eps          (eps after the bias-corrected sqrt)
 *   p  = p - decoupled_decay * p             (AdamW mode only; lr * wd, on the pre-update p)
 *   p  = p - step_size * (m / d)             (step_size = lr / (1 - beta1^t))
 *   param_out[i] = round_to_nearest_even(p)  (optional 16-bit copy)
 *
 * Coefficients are computed once per step in double (zc__adam_coeffs) and
 * rounded to float, so every variant sees the same constants. FMA contraction
 * is allowed in variants (tolerance: 2 ulp on fp32 outputs).
 *
 * Notes from the host variants (src/optim): a weight-decay term whose
 * coefficient is 0 is skipped, not multiplied by 0 (so an inf parameter does
 * not become NaN through 0 * inf). The host SIMD variants do not contract:
 * when the two terms of the m update (or of the final p update) nearly cancel,
 * a fused multiply-add differs from the unfused reference by far more than 2
 * ulp of the small result (69 ulp seen on random data), so they evaluate the
 * same operations as the reference and match it bitwise. A contracting
 * variant needs a tolerance relative to the terms' magnitudes, not to the
 * result. */
#ifndef ZC_OPTIM_ADAM_H
#define ZC_OPTIM_ADAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zeroc/zeroc.h"

typedef struct zc_adam_hparams {
    double lr, beta1, beta2, eps, weight_decay;
    bool adamw;           /* decoupled decay (adam_w_mode) */
    bool bias_correction;
} zc_adam_hparams;

typedef struct zc_adam_coeffs {
    float beta1, beta2, one_minus_beta1, one_minus_beta2;
    float eps;
    float step_size;       /* lr / bc1 (lr without bias correction) */
    float bc2_rsqrt;       /* 1 / sqrt(bc2) (1 without bias correction) */
    float decoupled_decay; /* lr * wd in AdamW mode, else 0 */
    float l2_decay;        /* wd in Adam (L2) mode, else 0 */
} zc_adam_coeffs;

/* Computes the coefficients for optimizer step `step` (1-based: the first
 * update uses step 1). */
zc_adam_coeffs zc__adam_coeffs(const zc_adam_hparams *hp, int64_t step);

/* One shard's buffers. master, m, v: n fp32 values, updated in place. grad: n
 * values of grad_dtype (F32, F16 or BF16), read only. param_out: NULL, or n
 * values of param_out_dtype (F16 or BF16; F32 copies the master). */
typedef struct zc_adam_shard {
    float *master, *m, *v;
    const void *grad;
    zc_dtype grad_dtype;
    float grad_scale;
    void *param_out;
    zc_dtype param_out_dtype;
    size_t n;
} zc_adam_shard;

/* The scalar reference: plain C, one element at a time, no FMA contraction
 * (compiled with -ffp-contract=off). */
void zc__adam_scalar(const zc_adam_shard *s, const zc_adam_coeffs *c);

/* The host optimizer entry point the engine calls: the best variant for this
 * CPU (or ZC_CPU_ISA), split over the host thread pool. Results do not depend
 * on the number of threads. Returns ZC_ERR_CONFIG if ZC_CPU_ISA is not a
 * variant's name or ZC_CPU_THREADS is not a thread count, ZC_ERR_UNSUPPORTED
 * if ZC_CPU_ISA names a variant this CPU or build lacks. */
zc_status zc__adam_host(const zc_adam_shard *s, const zc_adam_coeffs *c);

/* What zc__adam_host would refuse of ZC_CPU_ISA and ZC_CPU_THREADS, checked
 * without running it: zc_engine_create fails with it up front rather than at
 * the first step. */
zc_status zc__adam_env_check(void);

/* What `zeroc report` says of the host Adam: for each variant, best first
 * (i < zc__adam_isa_count()), its name, whether this build compiled it,
 * whether this CPU runs it (else a static reason in *why), and which one
 * zc__adam_host uses (ZC_CPU_ISA or the best usable; -1 with the reason in
 * zc_last_error when none can be chosen). */
int zc__adam_isa_count(void);
const char *zc__adam_isa_name(int i, bool *compiled, bool *usable, const char **why);
int zc__adam_isa_selected(void);

#endif
