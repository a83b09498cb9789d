/* Adam/AdamW over 16-bit optimizer state (src/optim/adam.h): master, m
 * and v each fp32 or bf16, widened exactly, updated with the host's
 * zc__adam_elem operations (__fmul_rn / __fadd_rn / __fsqrt_rn / __fdiv_rn:
 * no contraction) and rounded back stochastically - sround.h's hash of the
 * element's counter and the stream's key - or to nearest even, so every
 * output equals the host reference's (zc__adam_lp_scalar) bitwise.
 *
 * The keys are computed on the host per launch from (seed, step, stream,
 * the high word of the global index); a shard that crosses a multiple of
 * 2^32 of the global index is launched in two parts. One element per thread
 * per iteration, grid-stride; the state's dtypes and the rounding are
 * template parameters, the gradient's and the copy's dtypes uniform
 * branches. */
#include "kernels/common.cuh"
#include "optim/adam.h"
#include "optim/sround.h"

namespace zck {
namespace {

__device__ __forceinline__ uint32_t mix32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

__device__ __forceinline__ uint16_t sr_bf16(float x, uint32_t r)
{
    const uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0x7fc0;
    return (uint16_t)((u + (r & 0xffffu)) >> 16);
}

template <bool BF> __device__ __forceinline__ float load_state(const void *p, size_t i)
{
    return BF ? bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* Stores x (bf16: rounded with the random bits r); returns the value kept. */
template <bool BF, bool SR>
__device__ __forceinline__ float store_state(void *p, size_t i, float x, uint32_t r)
{
    if (!BF) {
        ((float *)p)[i] = x;
        return x;
    }
    const uint16_t h = SR ? sr_bf16(x, r) : f32_to_bf16(x);
    ((uint16_t *)p)[i] = h;
    return bf16_to_f32(h);
}

struct lp_args {
    void *master, *m, *v;
    const void *grad;
    void *out;
    zc_dtype gdt, odt;
    float gscale;
    size_t n;
    uint32_t ctr0;
    uint32_t key[ZC_SR__DRAWS];
};

template <bool MB, bool MMB, bool VB, bool SR>
__global__ void __launch_bounds__(kThreads) adam_lp_kernel(lp_args a, zc_adam_coeffs c)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += stride) {
        const uint32_t ctr = a.ctr0 + (uint32_t)i;
        float p = load_state<MB>(a.master, i);
        float g = __fmul_rn(load_f32(a.grad, a.gdt, i), a.gscale);
        if (c.l2_decay != 0.0f)
            g = __fadd_rn(g, __fmul_rn(c.l2_decay, p));
        const float m = __fadd_rn(__fmul_rn(c.beta1, load_state<MMB>(a.m, i)),
                                  __fmul_rn(c.one_minus_beta1, g));
        const float v = __fadd_rn(__fmul_rn(c.beta2, load_state<VB>(a.v, i)),
                                  __fmul_rn(__fmul_rn(c.one_minus_beta2, g), g));
        const float d = __fadd_rn(__fmul_rn(__fsqrt_rn(v), c.bc2_rsqrt), c.eps);
        if (c.decoupled_decay != 0.0f)
            p = __fsub_rn(p, __fmul_rn(c.decoupled_decay, p));
        p = __fsub_rn(p, __fmul_rn(c.step_size, __fdiv_rn(m, d)));
        /* sround.h's draws: 0 for the master (low half) and m (high), 1 for v. */
        const uint32_t d0 = SR && (MB || MMB) ? mix32(ctr ^ a.key[ZC_SR_DRAW_PM]) : 0u;
        const uint32_t d1 = SR && VB ? mix32(ctr ^ a.key[ZC_SR_DRAW_V]) : 0u;
        store_state<MMB, SR>(a.m, i, m, d0 >> 16);
        store_state<VB, SR>(a.v, i, v, d1);
        const float kept = store_state<MB, SR>(a.master, i, p, d0);
        if (a.out)
            store_f32(a.out, a.odt, i, kept);
    }
}

/* Bytes of an element of a float dtype (fp32, fp16, bf16). */
__host__ __device__ __forceinline__ size_t esz(zc_dtype dt) { return dt == ZC_DTYPE_F32 ? 4 : 2; }

/* Blocks of one launch: enough for every SM several times over, never more
 * than the work needs (the kernel is light on registers). */
unsigned lp_blocks(const zc_k_geometry *g, size_t n)
{
    return grid_for(n, g->sms > 0 ? g->sms * 8 : 1);
}

template <bool MB, bool MMB, bool VB>
cudaError_t launch3(const zc_k_geometry *g, const lp_args &a, bool sr, const zc_adam_coeffs &c,
                    cudaStream_t st)
{
    if (sr)
        return launch_k(adam_lp_kernel<MB, MMB, VB, true>, lp_blocks(g, a.n), st, a, c);
    return launch_k(adam_lp_kernel<MB, MMB, VB, false>, lp_blocks(g, a.n), st, a, c);
}

cudaError_t launch(const zc_k_geometry *g, const lp_args &a, int mask, bool sr,
                   const zc_adam_coeffs &c, cudaStream_t st)
{
    switch (mask) {
    case 0: return launch3<false, false, false>(g, a, sr, c, st);
    case 1: return launch3<true, false, false>(g, a, sr, c, st);
    case 2: return launch3<false, true, false>(g, a, sr, c, st);
    case 3: return launch3<true, true, false>(g, a, sr, c, st);
    case 4: return launch3<false, false, true>(g, a, sr, c, st);
    case 5: return launch3<true, false, true>(g, a, sr, c, st);
    case 6: return launch3<false, true, true>(g, a, sr, c, st);
    default: return launch3<true, true, true>(g, a, sr, c, st);
    }
}

} // namespace
} // namespace zck

extern "C" cudaError_t zc_k_adam_lp(const zc_k_geometry *g, const zc_adam_lp_shard *s,
                                    const zc_adam_coeffs *c, cudaStream_t stream)
{
    if (!g || !s || !c)
        return cudaErrorInvalidValue;
    const int mask = (s->master_dtype == ZC_DTYPE_BF16 ? 1 : 0) |
                     (s->m_dtype == ZC_DTYPE_BF16 ? 2 : 0) | (s->v_dtype == ZC_DTYPE_BF16 ? 4 : 0);
    size_t lo = 0;
    while (lo < s->n) {
        /* One part per high word of the global index. */
        const uint64_t at = s->index0 + lo;
        const uint64_t to_wrap = ((at >> 32) + 1) * ((uint64_t)1 << 32) - at;
        const size_t hi = (uint64_t)(s->n - lo) > to_wrap ? lo + (size_t)to_wrap : s->n;
        zck::lp_args a = {};
        using zck::esz;
        a.master = (char *)s->master + lo * esz(s->master_dtype);
        a.m = (char *)s->m + lo * esz(s->m_dtype);
        a.v = (char *)s->v + lo * esz(s->v_dtype);
        a.grad = (const char *)s->grad + lo * esz(s->grad_dtype);
        a.out = s->param_out ? (char *)s->param_out + lo * esz(s->param_out_dtype)
                             : nullptr;
        a.gdt = s->grad_dtype;
        a.odt = s->param_out_dtype;
        a.gscale = s->grad_scale;
        a.n = hi - lo;
        a.ctr0 = (uint32_t)at;
        for (int k = 0; k < ZC_SR__DRAWS; k++)
            a.key[k] = zc__sr_key(s->seed, s->step, k, (uint32_t)(at >> 32));
        const cudaError_t e = zck::launch(g, a, mask, s->stochastic, *c, stream);
        if (e != cudaSuccess)
            return e;
        lo = hi;
    }
    return cudaSuccess;
}
