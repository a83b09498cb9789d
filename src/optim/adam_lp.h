/* Adam / AdamW over a shard whose optimizer state is kept in 16 bits
 * (internal optimizer seam, beside adam.h).
 *
 * The master weights, the first moment m and the second moment v are each
 * stored as fp32 or bf16 (DeepSpeed's bf16.bf16_master_weights_and_grads
 * and bf16.bf16_optimizer_states, Megatron-core's main_params_dtype,
 * exp_avg_dtype and exp_avg_sq_dtype). The update is adam.h's zeroc
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
 * an fp32 master, the master rounded to nearest even as adam.h does.
 *
 * Every variant (the scalar reference, AVX2, AVX-512) evaluates the same
 * operations in the same order without contraction and agrees with the
 * reference bitwise. DeepSpeed's arithmetic (ZC_ADAM_ARITH_DEEPSPEED) is not
 * offered over 16-bit state. */
#ifndef ZC_OPTIM_ADAM_LP_H
#define ZC_OPTIM_ADAM_LP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "optim/adam.h"

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
