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
 * rounded to float, so every variant sees the same constants.
 *
 * A second arithmetic, ZC_ADAM_ARITH_DEEPSPEED (optimizer.params.
 * deepspeed_arithmetic), evaluates the same update as DeepSpeedCPUAdam does
 * (csrc/includes/cpu_adam.h Step_AVX, what DeepSpeed runs on the CPU and
 * under offload_optimizer), coefficients and fused multiply-adds included:
 *
 *   g  = fma(p, l2_decay, g)                 (Adam mode only)
 *   m  = fma(g, one_minus_beta1, m * beta1)
 *   v  = fma(g * g, one_minus_beta2, v * beta2)
 *   d  = fma(sqrtf(v), bc2_rsqrt, eps)
 *   p  = fma(p, -decoupled_decay, p)         (AdamW mode only)
 *   p  = fma(m / d, -step_size, p)
 *
 * with the coefficients of zc__adam_coeffs_ds, all in fp32 as DeepSpeed
 * derives them. Every variant evaluates it with the same fused operations in
 * the same order, so it too is bitwise alike in all of them.
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

/* zc_adam_coeffs.arith: which element update the kernels evaluate. */
enum {
    ZC_ADAM_ARITH_ZEROC = 0,     /* unfused, coefficients from double (the default) */
    ZC_ADAM_ARITH_DEEPSPEED = 1, /* DeepSpeedCPUAdam's: fp32 coefficients, its FMAs */
};

typedef struct zc_adam_coeffs {
    float beta1, beta2, one_minus_beta1, one_minus_beta2;
    float eps;
    float step_size;       /* lr / bc1 (lr without bias correction) */
    float bc2_rsqrt;       /* 1 / sqrt(bc2) (1 without bias correction) */
    float decoupled_decay; /* lr * wd in AdamW mode, else 0 */
    float l2_decay;        /* wd in Adam (L2) mode, else 0 */
    uint32_t arith;        /* ZC_ADAM_ARITH_* */
} zc_adam_coeffs;

/* Computes the coefficients for optimizer step `step` (1-based: the first
 * update uses step 1). */
zc_adam_coeffs zc__adam_coeffs(const zc_adam_hparams *hp, int64_t step);

/* What DeepSpeedCPUAdam keeps between steps to derive its bias corrections
 * (Adam_Optimizer::_betta1, _betta2, _betta1_t, _betta2_t, _step of
 * csrc/includes/cpu_adam.h): the fp32 betas of the last step and their
 * powers beta^step as it computes them. */
typedef struct zc_adam_ds_state {
    float beta1, beta2;
    float beta1_t, beta2_t;
    int64_t step;
} zc_adam_ds_state;

/* The state of a freshly constructed DeepSpeed optimizer (step 0, powers 1),
 * which is also what a DeepSpeed run resumed from a checkpoint starts from:
 * the checkpoint holds the step count, not the running powers. */
zc_adam_ds_state zc__adam_ds_fresh(double beta1, double beta2);

/* DeepSpeed's IncrementStep(step, beta1, beta2), the betas rounded to fp32
 * as its binding does: betas other than the state's, or a step that is not
 * the next one (the first after a resume), take beta^step from pow() in
 * double rounded to fp32; the next step multiplies the running fp32 powers
 * by the betas; the same step again changes nothing. */
void zc__adam_ds_increment(zc_adam_ds_state *st, int64_t step, double beta1, double beta2);

/* The coefficients of DeepSpeed's update_state and Step_AVX from the state
 * after zc__adam_ds_increment (hp's betas are not read: the state's are the
 * step's), all in fp32 from lr, eps and weight_decay rounded to fp32:
 * 1 - beta, bias corrections 1 - beta1_t and 1 / sqrtf(1 - beta2_t),
 * step size lr / bc1, decoupled decay lr * wd; weight decay only when > 0.
 * arith = ZC_ADAM_ARITH_DEEPSPEED. */
zc_adam_coeffs zc__adam_coeffs_ds(const zc_adam_ds_state *st, const zc_adam_hparams *hp);

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
 * (compiled with -ffp-contract=off; the DeepSpeed arithmetic's fused
 * operations are explicit fmaf calls). */
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

/* ---- Adam over 16-bit state (adam_lp_*.c) --------------------------------
 *
 * The master weights, the first moment m and the second moment v are each
 * stored as fp32 or bf16 (DeepSpeed's bf16.bf16_master_weights_and_grads
 * and bf16.bf16_optimizer_states, Megatron-core's main_params_dtype,
 * exp_avg_dtype and exp_avg_sq_dtype). The update is the zeroc
 * arithmetic, evaluated in fp32 registers from the stored values widened
 * exactly; each bf16 tensor is written back rounded stochastically
 * (sround.h: the random bits a function of the seed, the step, the stream
 * and the element's global index, so the result does not depend on the
 * sharding, the thread count or the ISA variant) or, when `stochastic` is
 * false, to nearest even. fp32 tensors are stored as they are, so a shard
 * whose three tensors are fp32 is updated bitwise as zc__adam_scalar updates
 * it.
 *
 * The 16-bit working copy (param_out): from a bf16 master it is the stored
 * master's value (bf16: the same bits; fp16: that value rounded to nearest
 * even), so the model runs on exactly the weights the optimizer keeps; from
 * an fp32 master, the master rounded to nearest even as above.
 *
 * Every variant (the scalar reference, AVX2, AVX-512) evaluates the same
 * operations in the same order without contraction and agrees with the
 * reference bitwise. DeepSpeed's arithmetic (ZC_ADAM_ARITH_DEEPSPEED) is not
 * offered over 16-bit state. */

/* One shard. master, m, v: n values each of their dtype (F32 or BF16),
 * updated in place. grad: n values of grad_dtype (F32, F16, BF16), read
 * only. param_out: NULL or n values of param_out_dtype (F32, F16, BF16).
 * index0: the global index of element 0 - its position in the whole
 * model's flat order, the same on every rank and at every stage - which
 * with seed and step selects each element's random bits. */
typedef struct zc_adam_lp_shard {
    void *master, *m, *v;
    zc_dtype master_dtype, m_dtype, v_dtype;
    const void *grad;
    zc_dtype grad_dtype;
    float grad_scale;
    void *param_out;
    zc_dtype param_out_dtype;
    size_t n;
    uint64_t index0;
    uint64_t seed;
    int64_t step;     /* the optimizer step (1-based), as the coefficients' */
    bool stochastic;  /* false: round to nearest even */
} zc_adam_lp_shard;

/* Elements [lo, hi) of s as a shard of its own (index0 moves with them). */
zc_adam_lp_shard zc__adam_lp_slice(const zc_adam_lp_shard *s, size_t lo, size_t hi);

/* The scalar reference: one element at a time, -ffp-contract=off. Its range
 * must not cross a multiple of 2^32 of the global index (the host entry
 * splits there). */
void zc__adam_lp_scalar(const zc_adam_lp_shard *s, const zc_adam_coeffs *c);

/* Validates a shard: buffers present for n > 0, state dtypes F32 or BF16,
 * gradient and copy dtypes F32, F16 or BF16, the zeroc arithmetic.
 * ZC_ERR_INVALID_ARG naming `who` and the field otherwise. */
zc_status zc__adam_lp_check(const zc_adam_lp_shard *s, const zc_adam_coeffs *c, const char *who);

/* Runs variant `variant` (adam_isa.h's table; -1: the selected one) over s
 * with `nthreads` threads of the host pool (0: the pool's default), split
 * as zc__adam_host_run splits (static tiles, so the thread count changes no
 * bit) and at every multiple of 2^32 of the global index. Returns
 * zc__adam_lp_check's error, ZC_ERR_UNSUPPORTED for a variant this build or
 * CPU lacks, or the pool's error. */
zc_status zc__adam_lp_host_run(const zc_adam_lp_shard *s, const zc_adam_coeffs *c, int variant,
                               int nthreads);

/* The engine's entry: the selected variant on the default threads. */
zc_status zc__adam_lp_host(const zc_adam_lp_shard *s, const zc_adam_coeffs *c);

/* The SIMD kernels (each in its ISA's library when built; adam_isa.h's
 * table points to them). Their range must not cross a multiple of 2^32. */
void zc__adam_lp_avx2(const zc_adam_lp_shard *s, const zc_adam_coeffs *c);
void zc__adam_lp_avx512(const zc_adam_lp_shard *s, const zc_adam_coeffs *c);

#endif
