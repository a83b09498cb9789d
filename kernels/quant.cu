/* DeepSpeed's symmetric int8 groups on the GPU (src/quant/quant.h): one
 * block per group. The values are read as fp16 (common.cuh's conversions,
 * the host's bit for bit), the group's absmax is a block reduction (max is
 * exact in any order), the scale 256 / (2 max) in fp32 with IEEE division,
 * q = __float2int_rn(x * scale) clamped to [-128, 127] - the host
 * reference's operations, so q and the stored scales equal zc__quant_int8's
 * bitwise. Dequantizing is elementwise: q x scale in fp32, to fp16, to the
 * buffer's dtype. */
#include "kernels/common.cuh"

namespace zck {
namespace {

__device__ __forceinline__ float read_half(const void *x, zc_dtype dt, size_t i)
{
    return dt == ZC_DTYPE_F16 ? f16_to_f32(((const uint16_t *)x)[i])
                              : f16_to_f32(f32_to_f16(load_f32(x, dt, i)));
}

__global__ void __launch_bounds__(kThreads)
quant_int8_kernel(const void *__restrict__ x, zc_dtype dt, size_t per, int8_t *__restrict__ q,
                  float *__restrict__ scales)
{
    __shared__ float part[kThreads];
    const size_t base = (size_t)blockIdx.x * per;
    float m = 0.0f;
    for (size_t i = threadIdx.x; i < per; i += blockDim.x) {
        const float a = fabsf(read_half(x, dt, base + i));
        m = a > m ? a : m; /* a NaN loses, as on the host */
    }
    part[threadIdx.x] = m;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s && part[threadIdx.x + s] > part[threadIdx.x])
            part[threadIdx.x] = part[threadIdx.x + s];
        __syncthreads();
    }
    const float max = part[0];
    const float scale = max == 0.0f ? 1.0f : __fdiv_rn(256.0f, __fmul_rn(2.0f, max));
    for (size_t i = threadIdx.x; i < per; i += blockDim.x) {
        const float v = __fmul_rn(read_half(x, dt, base + i), scale);
        int r = isnan(v) ? 0 : __float2int_rn(v);
        r = r < -128 ? -128 : r > 127 ? 127 : r;
        q[base + i] = (int8_t)r;
    }
    if (threadIdx.x == 0)
        scales[blockIdx.x] = __fdiv_rn(1.0f, scale);
}

__global__ void __launch_bounds__(kThreads)
dequant_int8_kernel(const int8_t *__restrict__ q, const float *__restrict__ scales, size_t n,
                    size_t per, void *__restrict__ out, zc_dtype dt)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const uint16_t h = f32_to_f16(__fmul_rn((float)q[i], scales[i / per]));
        if (dt == ZC_DTYPE_F16)
            ((uint16_t *)out)[i] = h;
        else
            store_f32(out, dt, i, f16_to_f32(h));
    }
}

} // namespace
} // namespace zck

extern "C" cudaError_t zc_k_quant_int8(const zc_k_geometry *g, const void *x, zc_dtype dt,
                                       size_t n, size_t groups, int8_t *q, float *scales,
                                       cudaStream_t stream)
{
    if (!g || !groups || n % groups || !zck::is_float_dtype(dt) || groups > 0x7fffffffu)
        return cudaErrorInvalidValue;
    if (!n)
        return cudaSuccess;
    return zck::launch_k(zck::quant_int8_kernel, (unsigned)groups, stream, x, dt, n / groups, q,
                         scales);
}

extern "C" cudaError_t zc_k_dequant_int8(const zc_k_geometry *g, const int8_t *q,
                                         const float *scales, size_t n, size_t groups, void *out,
                                         zc_dtype dt, cudaStream_t stream)
{
    if (!g || !groups || n % groups || !zck::is_float_dtype(dt))
        return cudaErrorInvalidValue;
    if (!n)
        return cudaSuccess;
    return zck::launch_k(zck::dequant_int8_kernel, zck::grid_for(n, g->sms > 0 ? g->sms * 8 : 1),
                         stream, q, scales, n, n / groups, out, dt);
}
