/* Lion and Adagrad over one shard (src/optim/lion.h, src/optim/adagrad.h):
 * the host's zc__lion_elem and zc__adagrad_elem operation for operation.
 *
 * __fmul_rn/__fadd_rn/__fsub_rn keep nvcc from contracting into FMA (the host
 * reference is built with -ffp-contract=off), __fsqrt_rn/__fdiv_rn are the
 * IEEE operations, and the terms the host skips when their coefficient makes
 * them no-ops (Lion's decay of 1, Adagrad's L2 of 0) are skipped here too, so
 * every output is meant to equal the host's bitwise. Lion's sign of a NaN c
 * is the host's (lion_elem.h: p moves up by lr under both rules).
 *
 * Memory: each step reads master, the one state tensor and the gradient and
 * writes master, the state and the optional copy (20-26 bytes an element):
 * bandwidth-bound, one element per thread per iteration of a grid-stride
 * loop over enough blocks to fill every SM several times. The 4-wide vector
 * path of adam.cu is the next step if a bench shows this one short of the
 * device copy's bandwidth. */
#include "kernels/common.cuh"
#include "optim/adagrad.h"
#include "optim/lion.h"

namespace zck {
namespace {

__device__ __forceinline__ float lion_signed_lr(float c, const zc_lion_coeffs &k)
{
    if (isnan(c))
        return -k.lr;
    if (k.sign_rule == ZC_LION_SIGN_GT0)
        return c > 0.0f ? k.lr : -k.lr;
    return copysignf(k.lr, c);
}

__global__ void __launch_bounds__(kThreads)
lion_kernel(float *__restrict__ master, float *__restrict__ m, const void *__restrict__ grad,
            zc_dtype gdt, float gscale, void *__restrict__ out, zc_dtype odt, size_t n,
            zc_lion_coeffs k)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float p = master[i];
        float mi = m[i];
        const float g = __fmul_rn(load_f32(grad, gdt, i), gscale);
        const float c = __fadd_rn(__fmul_rn(k.beta1, mi), __fmul_rn(k.one_minus_beta1, g));
        const float u = lion_signed_lr(c, k);
        if (k.decay != 1.0f)
            p = __fmul_rn(p, k.decay);
        p = __fsub_rn(p, u);
        mi = __fadd_rn(__fmul_rn(k.beta2, mi), __fmul_rn(k.one_minus_beta2, g));
        master[i] = p;
        m[i] = mi;
        if (out)
            store_f32(out, odt, i, p);
    }
}

__global__ void __launch_bounds__(kThreads)
adagrad_kernel(float *__restrict__ master, float *__restrict__ sum, const void *__restrict__ grad,
               zc_dtype gdt, float gscale, void *__restrict__ out, zc_dtype odt, size_t n,
               zc_adagrad_coeffs k)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float p = master[i];
        const float g = __fmul_rn(load_f32(grad, gdt, i), gscale);
        float gd = g;
        if (k.l2_decay != 0.0f)
            gd = __fadd_rn(g, __fmul_rn(k.l2_decay, p));
        const float s = __fadd_rn(sum[i], __fmul_rn(gd, gd));
        const float d = __fadd_rn(__fsqrt_rn(s), k.eps);
        const float num = k.numerator == ZC_ADAGRAD_NUM_DECAYED ? gd : g;
        p = __fsub_rn(p, __fmul_rn(k.step_size, __fdiv_rn(num, d)));
        master[i] = p;
        sum[i] = s;
        if (out)
            store_f32(out, odt, i, p);
    }
}

/* Blocks of one launch: every SM several times over, never more than the
 * work needs. */
unsigned ew_blocks(const zc_k_geometry *g, size_t n)
{
    return grid_for(n, g->sms > 0 ? g->sms * 8 : 1);
}

} // namespace
} // namespace zck

extern "C" cudaError_t zc_k_lion(const zc_k_geometry *g, const zc_lion_shard *s,
                                 const zc_lion_coeffs *c, cudaStream_t stream)
{
    if (!g || !s || !c)
        return cudaErrorInvalidValue;
    if (s->n == 0)
        return cudaSuccess;
    return zck::launch_k(zck::lion_kernel, zck::ew_blocks(g, s->n), stream, s->master, s->m,
                         s->grad, s->grad_dtype, s->grad_scale, s->param_out,
                         s->param_out_dtype, s->n, *c);
}

extern "C" cudaError_t zc_k_adagrad(const zc_k_geometry *g, const zc_adagrad_shard *s,
                                    const zc_adagrad_coeffs *c, cudaStream_t stream)
{
    if (!g || !s || !c)
        return cudaErrorInvalidValue;
    if (s->n == 0)
        return cudaSuccess;
    return zck::launch_k(zck::adagrad_kernel, zck::ew_blocks(g, s->n), stream, s->master, s->sum,
                         s->grad, s->grad_dtype, s->grad_scale, s->param_out,
                         s->param_out_dtype, s->n, *c);
}
