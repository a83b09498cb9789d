/* Elementwise kernels: cast, scale, accumulate and the ordered multi-source
 * sum the local communicator reduces with. One element per thread per
 * iteration of a grid-stride loop (consecutive threads touch consecutive
 * elements, so loads coalesce for any dtype and alignment); each mirrors its
 * host twin in src/device/host.c, rounding step for rounding step. */
#include "kernels/common.cuh"

namespace zck {
namespace {

template <int SD, int DD>
__global__ void __launch_bounds__(kThreads)
cast_kernel(void *__restrict__ dst, const void *__restrict__ src, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        store_f32(dst, (zc_dtype)DD, i, load_f32(src, (zc_dtype)SD, i));
}

template <int SD>
cudaError_t cast_to(void *dst, zc_dtype dd, const void *src, size_t n, unsigned blocks,
                    cudaStream_t st)
{
    cudaError_t e;
    switch (dd) {
    case ZC_DTYPE_F32: e = launch_k(cast_kernel<SD, ZC_DTYPE_F32>, blocks, st, dst, src, n); break;
    case ZC_DTYPE_F16: e = launch_k(cast_kernel<SD, ZC_DTYPE_F16>, blocks, st, dst, src, n); break;
    case ZC_DTYPE_BF16: e = launch_k(cast_kernel<SD, ZC_DTYPE_BF16>, blocks, st, dst, src, n); break;
    default: return cudaErrorInvalidValue;
    }
    return e;
}

template <int DT>
__global__ void __launch_bounds__(kThreads) scale_kernel(void *x, size_t n, float a)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        if (DT == ZC_DTYPE_F64)
            /* The host multiplies a double by the float a promoted to double. */
            ((double *)x)[i] = __dmul_rn(((double *)x)[i], (double)a);
        else
            store_f32(x, (zc_dtype)DT, i, __fmul_rn(load_f32(x, (zc_dtype)DT, i), a));
    }
}

template <int SD>
__global__ void __launch_bounds__(kThreads)
accumulate_kernel(float *__restrict__ acc, const void *__restrict__ src, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        acc[i] = __fadd_rn(acc[i], load_f32(src, (zc_dtype)SD, i));
}

/* The host twin (host.c host_accumulate_rounded) rounds the fp32 sum once
 * through the 16-bit encoding; so does this. */
template <int SD, int AD>
__global__ void __launch_bounds__(kThreads)
accumulate_rounded_kernel(float *__restrict__ acc, const void *__restrict__ src, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        acc[i] = to_f32(from_f32(__fadd_rn(acc[i], load_f32(src, (zc_dtype)SD, i)), (zc_dtype)AD),
                        (zc_dtype)AD);
}

template <int AD>
cudaError_t accumulate_rounded_from(float *acc, const void *src, zc_dtype sd, size_t n,
                                    unsigned blocks, cudaStream_t st)
{
    switch (sd) {
    case ZC_DTYPE_F32: return launch_k(accumulate_rounded_kernel<ZC_DTYPE_F32, AD>, blocks, st, acc, src, n);
    case ZC_DTYPE_F16: return launch_k(accumulate_rounded_kernel<ZC_DTYPE_F16, AD>, blocks, st, acc, src, n);
    case ZC_DTYPE_BF16: return launch_k(accumulate_rounded_kernel<ZC_DTYPE_BF16, AD>, blocks, st, acc, src, n);
    default: return cudaErrorInvalidValue;
    }
}

/* The source pointers travel by value in the kernel's argument block. */
struct srcs_arg {
    const void *p[ZC_K_MAX_REDUCE_SRCS];
};

/* dst may be one of the sources: each element is read from every source
 * before the same thread writes it, and no other thread touches it. */
template <int DT>
__global__ void __launch_bounds__(kThreads)
reduce_sum_kernel(void *dst, srcs_arg s, int nsrc, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        if (DT == ZC_DTYPE_F64) {
            double acc = ((const double *)s.p[0])[i];
            for (int k = 1; k < nsrc; k++)
                acc = __dadd_rn(acc, ((const double *)s.p[k])[i]);
            ((double *)dst)[i] = acc;
        } else if (DT == ZC_DTYPE_I32) {
            int64_t acc = 0;
            for (int k = 0; k < nsrc; k++)
                acc += ((const int32_t *)s.p[k])[i];
            ((int32_t *)dst)[i] = (int32_t)acc;
        } else {
            /* Start from source 0 (not from 0.0f, which would turn -0 into +0)
             * and add in source order, as the host does. */
            float acc = load_f32(s.p[0], (zc_dtype)DT, i);
            for (int k = 1; k < nsrc; k++)
                acc = __fadd_rn(acc, load_f32(s.p[k], (zc_dtype)DT, i));
            store_f32(dst, (zc_dtype)DT, i, acc);
        }
    }
}

} // namespace
} // namespace zck

using namespace zck;

extern "C" cudaError_t zc_k_cast(const zc_k_geometry *g, void *dst, zc_dtype dst_dt, const void *src, zc_dtype src_dt,
                                 size_t n, cudaStream_t stream)
{
    if (!g || !is_float_dtype(dst_dt) || !is_float_dtype(src_dt))
        return cudaErrorInvalidValue;
    if (n == 0)
        return cudaSuccess;
    const unsigned blocks = grid_for(n, g->stream_blocks);
    switch (src_dt) {
    case ZC_DTYPE_F32: return cast_to<ZC_DTYPE_F32>(dst, dst_dt, src, n, blocks, stream);
    case ZC_DTYPE_F16: return cast_to<ZC_DTYPE_F16>(dst, dst_dt, src, n, blocks, stream);
    default: return cast_to<ZC_DTYPE_BF16>(dst, dst_dt, src, n, blocks, stream);
    }
}

extern "C" cudaError_t zc_k_scale(const zc_k_geometry *g, void *x, zc_dtype dt, size_t n, float a, cudaStream_t stream)
{
    if (!g || (!is_float_dtype(dt) && dt != ZC_DTYPE_F64))
        return cudaErrorInvalidValue;
    if (n == 0)
        return cudaSuccess;
    const unsigned blocks = grid_for(n, g->stream_blocks);
    cudaError_t e;
    switch (dt) {
    case ZC_DTYPE_F32: e = launch_k(scale_kernel<ZC_DTYPE_F32>, blocks, stream, x, n, a); break;
    case ZC_DTYPE_F16: e = launch_k(scale_kernel<ZC_DTYPE_F16>, blocks, stream, x, n, a); break;
    case ZC_DTYPE_BF16: e = launch_k(scale_kernel<ZC_DTYPE_BF16>, blocks, stream, x, n, a); break;
    default: e = launch_k(scale_kernel<ZC_DTYPE_F64>, blocks, stream, x, n, a); break;
    }
    return e;
}

extern "C" cudaError_t zc_k_accumulate(const zc_k_geometry *g, float *acc, const void *src, zc_dtype src_dt, size_t n,
                                       cudaStream_t stream)
{
    if (!g || !is_float_dtype(src_dt))
        return cudaErrorInvalidValue;
    if (n == 0)
        return cudaSuccess;
    const unsigned blocks = grid_for(n, g->stream_blocks);
    cudaError_t e;
    switch (src_dt) {
    case ZC_DTYPE_F32: e = launch_k(accumulate_kernel<ZC_DTYPE_F32>, blocks, stream, acc, src, n); break;
    case ZC_DTYPE_F16: e = launch_k(accumulate_kernel<ZC_DTYPE_F16>, blocks, stream, acc, src, n); break;
    default: e = launch_k(accumulate_kernel<ZC_DTYPE_BF16>, blocks, stream, acc, src, n); break;
    }
    return e;
}

extern "C" cudaError_t zc_k_accumulate_rounded(const zc_k_geometry *g, float *acc, const void *src, zc_dtype src_dt,
                                               zc_dtype acc_dt, size_t n, cudaStream_t stream)
{
    if (!g || !is_float_dtype(src_dt) || !is_float_dtype(acc_dt))
        return cudaErrorInvalidValue;
    if (acc_dt == ZC_DTYPE_F32)
        return zc_k_accumulate(g, acc, src, src_dt, n, stream);
    if (n == 0)
        return cudaSuccess;
    const unsigned blocks = grid_for(n, g->stream_blocks);
    if (acc_dt == ZC_DTYPE_F16)
        return accumulate_rounded_from<ZC_DTYPE_F16>(acc, src, src_dt, n, blocks, stream);
    return accumulate_rounded_from<ZC_DTYPE_BF16>(acc, src, src_dt, n, blocks, stream);
}

extern "C" cudaError_t zc_k_reduce_sum(const zc_k_geometry *g, void *dst, const void *const *srcs, int nsrc, zc_dtype dt,
                                       size_t n, cudaStream_t stream)
{
    if (!g || nsrc < 1 || nsrc > ZC_K_MAX_REDUCE_SRCS || !srcs)
        return cudaErrorInvalidValue;
    if (!is_float_dtype(dt) && dt != ZC_DTYPE_F64 && dt != ZC_DTYPE_I32)
        return cudaErrorInvalidValue;
    if (n == 0)
        return cudaSuccess;
    srcs_arg s = {};
    for (int k = 0; k < nsrc; k++)
        s.p[k] = srcs[k];
    const unsigned blocks = grid_for(n, g->stream_blocks);
    cudaError_t e;
    switch (dt) {
    case ZC_DTYPE_F32: e = launch_k(reduce_sum_kernel<ZC_DTYPE_F32>, blocks, stream, dst, s, nsrc, n); break;
    case ZC_DTYPE_F16: e = launch_k(reduce_sum_kernel<ZC_DTYPE_F16>, blocks, stream, dst, s, nsrc, n); break;
    case ZC_DTYPE_BF16: e = launch_k(reduce_sum_kernel<ZC_DTYPE_BF16>, blocks, stream, dst, s, nsrc, n); break;
    case ZC_DTYPE_F64: e = launch_k(reduce_sum_kernel<ZC_DTYPE_F64>, blocks, stream, dst, s, nsrc, n); break;
    default: e = launch_k(reduce_sum_kernel<ZC_DTYPE_I32>, blocks, stream, dst, s, nsrc, n); break;
    }
    return e;
}

namespace zck {
namespace {
__device__ __forceinline__ uint64_t global_ns()
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Wall-clock bound (the global timer), not an iteration count: __nanosleep
 * may return early. */
__global__ void sleep_kernel(unsigned ms)
{
    uint64_t end = global_ns() + (uint64_t)ms * 1000000u;
    while (global_ns() < end)
        __nanosleep(100000);
}
} // namespace
} // namespace zck

extern "C" cudaError_t zc_k_sleep(unsigned ms, cudaStream_t stream)
{
    return zck::launch_kt(zck::sleep_kernel, 1, 1, stream, ms);
}

extern "C" cudaError_t zc_k_geometry_query(int device, zc_k_geometry *g)
{
    if (!g)
        return cudaErrorInvalidValue;
    int sms = 0, threads = 0;
    cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&threads, cudaDevAttrMaxThreadsPerMultiProcessor, device);
    if (e != cudaSuccess)
        return e;
    *g = zc_k_geometry{};
    g->sms = sms > 0 ? sms : 1;
    const int per_sm = threads >= kThreads ? threads / kThreads : 1;
    g->stream_blocks = g->sms * per_sm;
    return zck::adam_occupancy(g);
}
