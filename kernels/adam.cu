/* Fused Adam/AdamW over one shard: unscale/clip factor, (L2 | decoupled)
 * decay, moment updates, bias-corrected step, fp32 master write and the
 * optional 16-bit (or fp32) parameter copy, in one pass over memory.
 *
 * Arithmetic is the host's zc__adam_elem (src/optim/adam_elem.h) operation
 * for operation: __fmul_rn/__fadd_rn keep nvcc from contracting into FMA
 * (the host reference is built with -ffp-contract=off), __fsqrt_rn/__fdiv_rn
 * are the IEEE operations, and the two decay terms are skipped when their
 * coefficient is zero, as on the host. So every output is meant to equal the
 * host's bitwise. The DeepSpeed arithmetic (ZC_ADAM_ARITH_DEEPSPEED,
 * src/optim/adam.h) is the host's zc__adam_elem_ds the same way, its fmaf
 * calls as __fmaf_rn; which one runs is one uniform branch on the
 * coefficients, the same for every thread of a launch.
 *
 * Memory: the step is bandwidth-bound (28-30 bytes per element). When every
 * buffer is aligned (shards start on 64-element boundaries, so they are), each
 * thread moves 4 elements per iteration with 16-byte loads of master, m, v (and
 * fp32 grads; 8-byte loads of 16-bit grads), grid-stride over one full wave
 * of the kernel's resident blocks (its occupancy, queried once per device:
 * zc_k_geometry); 4 elements x 4 loads per thread in flight. One launch covers
 * a whole segment of any length. */
#include "kernels/common.cuh"

namespace zck {
namespace {

enum { OUT_NONE = -1 };

/* zc__adam_elem_ds: DeepSpeedCPUAdam's operations and fused multiply-adds. */
__device__ __forceinline__ float adam_elem_ds(float &p, float &m, float &v, float graw,
                                              float gscale, const zc_adam_coeffs &c)
{
    float g = __fmul_rn(graw, gscale);
    if (c.l2_decay != 0.0f)
        g = __fmaf_rn(p, c.l2_decay, g);
    m = __fmaf_rn(g, c.one_minus_beta1, __fmul_rn(m, c.beta1));
    v = __fmaf_rn(__fmul_rn(g, g), c.one_minus_beta2, __fmul_rn(v, c.beta2));
    float d = __fmaf_rn(__fsqrt_rn(v), c.bc2_rsqrt, c.eps);
    float u = __fdiv_rn(m, d);
    if (c.decoupled_decay != 0.0f)
        p = __fmaf_rn(p, -c.decoupled_decay, p);
    p = __fmaf_rn(u, -c.step_size, p);
    return p;
}

__device__ __forceinline__ float adam_elem(float &p, float &m, float &v, float graw, float gscale,
                                           const zc_adam_coeffs &c)
{
    if (c.arith == ZC_ADAM_ARITH_DEEPSPEED)
        return adam_elem_ds(p, m, v, graw, gscale, c);
    float g = __fmul_rn(graw, gscale);
    if (c.l2_decay != 0.0f)
        g = __fadd_rn(g, __fmul_rn(c.l2_decay, p));
    m = __fadd_rn(__fmul_rn(c.beta1, m), __fmul_rn(c.one_minus_beta1, g));
    /* one_minus_beta2 * g * g parses as (one_minus_beta2 * g) * g on the host. */
    v = __fadd_rn(__fmul_rn(c.beta2, v), __fmul_rn(__fmul_rn(c.one_minus_beta2, g), g));
    float d = __fadd_rn(__fmul_rn(__fsqrt_rn(v), c.bc2_rsqrt), c.eps);
    if (c.decoupled_decay != 0.0f)
        p = __fsub_rn(p, __fmul_rn(c.decoupled_decay, p));
    p = __fsub_rn(p, __fmul_rn(c.step_size, __fdiv_rn(m, d)));
    return p;
}

template <int GT> __device__ __forceinline__ float grad_at(const void *g, size_t i)
{
    return load_f32(g, (zc_dtype)GT, i);
}

template <int OT> __device__ __forceinline__ void out_at(void *o, size_t i, float p)
{
    if (OT != OUT_NONE)
        store_f32(o, (zc_dtype)OT, i, p);
}

/* One element per iteration: any alignment. */
template <int GT, int OT>
__global__ void __launch_bounds__(kThreads)
adam_scalar_kernel(float *__restrict__ master, float *__restrict__ m, float *__restrict__ v,
                   const void *__restrict__ grad, float gscale, void *__restrict__ out, size_t n,
                   zc_adam_coeffs c)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float p = master[i], mi = m[i], vi = v[i];
        adam_elem(p, mi, vi, grad_at<GT>(grad, i), gscale, c);
        m[i] = mi;
        v[i] = vi;
        master[i] = p;
        out_at<OT>(out, i, p);
    }
}

/* Four grads as fp32 from one 16-byte (fp32) or 8-byte (16-bit) load. */
template <int GT> __device__ __forceinline__ float4 load_grad4(const void *g, size_t q)
{
    if (GT == ZC_DTYPE_F32)
        return reinterpret_cast<const float4 *>(g)[q];
    uint2 h = reinterpret_cast<const uint2 *>(g)[q];
    return make_float4(to_f32((uint16_t)(h.x & 0xffffu), (zc_dtype)GT), to_f32((uint16_t)(h.x >> 16), (zc_dtype)GT),
                       to_f32((uint16_t)(h.y & 0xffffu), (zc_dtype)GT), to_f32((uint16_t)(h.y >> 16), (zc_dtype)GT));
}

template <int OT> __device__ __forceinline__ void store_out4(void *o, size_t q, float4 p)
{
    if (OT == OUT_NONE)
        return;
    if (OT == ZC_DTYPE_F32) {
        reinterpret_cast<float4 *>(o)[q] = p;
        return;
    }
    uint2 h;
    h.x = (uint32_t)from_f32(p.x, (zc_dtype)OT) | ((uint32_t)from_f32(p.y, (zc_dtype)OT) << 16);
    h.y = (uint32_t)from_f32(p.z, (zc_dtype)OT) | ((uint32_t)from_f32(p.w, (zc_dtype)OT) << 16);
    reinterpret_cast<uint2 *>(o)[q] = h;
}

/* Four elements per iteration with vector loads; the n % 4 tail elements are
 * done one each by the first threads of the grid. */
template <int GT, int OT>
__global__ void __launch_bounds__(kThreads)
adam_vec4_kernel(float *__restrict__ master, float *__restrict__ m, float *__restrict__ v,
                 const void *__restrict__ grad, float gscale, void *__restrict__ out, size_t n,
                 zc_adam_coeffs c)
{
    size_t nq = n / 4;
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    float4 *P = reinterpret_cast<float4 *>(master);
    float4 *M = reinterpret_cast<float4 *>(m);
    float4 *V = reinterpret_cast<float4 *>(v);
    for (size_t q = tid; q < nq; q += stride) {
        float4 p = P[q], mm = M[q], vv = V[q];
        float4 g = load_grad4<GT>(grad, q);
        adam_elem(p.x, mm.x, vv.x, g.x, gscale, c);
        adam_elem(p.y, mm.y, vv.y, g.y, gscale, c);
        adam_elem(p.z, mm.z, vv.z, g.z, gscale, c);
        adam_elem(p.w, mm.w, vv.w, g.w, gscale, c);
        P[q] = p;
        M[q] = mm;
        V[q] = vv;
        store_out4<OT>(out, q, p);
    }
    size_t i = nq * 4 + tid;
    if (i < n) {
        float p = master[i], mi = m[i], vi = v[i];
        adam_elem(p, mi, vi, grad_at<GT>(grad, i), gscale, c);
        m[i] = mi;
        v[i] = vi;
        master[i] = p;
        out_at<OT>(out, i, p);
    }
}

/* Index of an output dtype in zc_k_geometry.adam_blocks (OUT_NONE first). */
constexpr int out_index(int ot) { return ot + 1; }

template <int GT, int OT>
cudaError_t launch(const zc_k_geometry *g, const zc_adam_shard *s, const zc_adam_coeffs *c,
                   cudaStream_t stream)
{
    size_t gbytes = GT == ZC_DTYPE_F32 ? 16 : 8;
    size_t obytes = OT == ZC_DTYPE_F32 ? 16 : 8;
    bool vec = aligned16(s->master) && aligned16(s->m) && aligned16(s->v) &&
               ((uintptr_t)s->grad % gbytes) == 0 &&
               (OT == OUT_NONE || ((uintptr_t)s->param_out % obytes) == 0);
    const unsigned blocks =
        grid_for(vec ? s->n / 4 + 1 : s->n, g->adam_blocks[vec ? 1 : 0][GT][out_index(OT)]);
    if (vec)
        return launch_k(adam_vec4_kernel<GT, OT>, blocks, stream, s->master, s->m, s->v, s->grad,
                        s->grad_scale, s->param_out, s->n, *c);
    return launch_k(adam_scalar_kernel<GT, OT>, blocks, stream, s->master, s->m, s->v, s->grad,
                    s->grad_scale, s->param_out, s->n, *c);
}

template <int GT>
cudaError_t launch_out(const zc_k_geometry *g, const zc_adam_shard *s, const zc_adam_coeffs *c,
                       cudaStream_t stream)
{
    if (!s->param_out)
        return launch<GT, OUT_NONE>(g, s, c, stream);
    switch (s->param_out_dtype) {
    case ZC_DTYPE_F32: return launch<GT, ZC_DTYPE_F32>(g, s, c, stream);
    case ZC_DTYPE_F16: return launch<GT, ZC_DTYPE_F16>(g, s, c, stream);
    case ZC_DTYPE_BF16: return launch<GT, ZC_DTYPE_BF16>(g, s, c, stream);
    default: return cudaErrorInvalidValue;
    }
}

/* Resident blocks per SM of one kernel, times the SMs: one full wave. */
template <typename K> cudaError_t wave(K kernel, int sms, int *out)
{
    int per_sm = 0;
    cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0);
    if (e != cudaSuccess)
        return e;
    *out = sms * (per_sm > 0 ? per_sm : 1);
    return cudaSuccess;
}

template <int GT, int OT> cudaError_t occupancy_of(zc_k_geometry *g)
{
    cudaError_t e = wave(adam_scalar_kernel<GT, OT>, g->sms, &g->adam_blocks[0][GT][out_index(OT)]);
    if (e == cudaSuccess)
        e = wave(adam_vec4_kernel<GT, OT>, g->sms, &g->adam_blocks[1][GT][out_index(OT)]);
    return e;
}

template <int GT> cudaError_t occupancy_grad(zc_k_geometry *g)
{
    cudaError_t e = occupancy_of<GT, OUT_NONE>(g);
    if (e == cudaSuccess)
        e = occupancy_of<GT, ZC_DTYPE_F32>(g);
    if (e == cudaSuccess)
        e = occupancy_of<GT, ZC_DTYPE_F16>(g);
    if (e == cudaSuccess)
        e = occupancy_of<GT, ZC_DTYPE_BF16>(g);
    return e;
}

} // namespace

cudaError_t adam_occupancy(zc_k_geometry *g)
{
    cudaError_t e = occupancy_grad<ZC_DTYPE_F32>(g);
    if (e == cudaSuccess)
        e = occupancy_grad<ZC_DTYPE_F16>(g);
    if (e == cudaSuccess)
        e = occupancy_grad<ZC_DTYPE_BF16>(g);
    return e;
}

} // namespace zck

extern "C" cudaError_t zc_k_adam(const zc_k_geometry *g, const zc_adam_shard *s,
                                 const zc_adam_coeffs *c, cudaStream_t stream)
{
    if (!g || !s || !c)
        return cudaErrorInvalidValue;
    if (s->n == 0)
        return cudaSuccess;
    switch (s->grad_dtype) {
    case ZC_DTYPE_F32: return zck::launch_out<ZC_DTYPE_F32>(g, s, c, stream);
    case ZC_DTYPE_F16: return zck::launch_out<ZC_DTYPE_F16>(g, s, c, stream);
    case ZC_DTYPE_BF16: return zck::launch_out<ZC_DTYPE_BF16>(g, s, c, stream);
    default: return cudaErrorInvalidValue;
    }
}
