/* Device-side helpers shared by the kernels: dtype conversions and launch
 * geometry.
 *
 * The conversions are the device copies of src/base/dtype.h and must stay
 * bit-for-bit equal to them (tests/gpu compares every kernel with its host
 * twin). CUDA's own __float2bfloat16_rn / __float2half_rn return 0x7FFF for
 * every NaN, which is why they are not used. */
#ifndef ZC_KERNELS_COMMON_CUH
#define ZC_KERNELS_COMMON_CUH

#include <cstddef>
#include <cstdint>
#include <utility>

#include <cuda_runtime.h>

#include "kernels/kernels.h"

namespace zck {

constexpr int kThreads = 256;

__device__ __forceinline__ float bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

__device__ __forceinline__ uint16_t f32_to_bf16(float f)
{
    uint32_t x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return 0x7fc0;
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

__device__ __forceinline__ float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        float v = __fmul_rn((float)mant, 0x1p-24f); /* exact: zero or subnormal */
        return __uint_as_float(__float_as_uint(v) | sign);
    }
    if (exp == 31)
        return __uint_as_float(sign | 0x7f800000u | (mant << 13));
    return __uint_as_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

__device__ __forceinline__ uint16_t f32_to_f16(float f)
{
    uint32_t x = __float_as_uint(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t a = x & 0x7fffffffu;
    if (a >= 0x7f800000u) {
        if (a > 0x7f800000u)
            return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
        return (uint16_t)(sign | 0x7c00u);
    }
    if (a >= 0x477ff000u)
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) {
        /* Subnormal or zero: adding 0.5 (whose ulp is the fp16 subnormal unit)
         * lets the FPU round to nearest even, as on the host. Denormals are
         * not flushed: kernels are built without -ftz. */
        float v = __fadd_rn(__uint_as_float(a), 0.5f);
        return (uint16_t)(sign | (__float_as_uint(v) - 0x3f000000u));
    }
    a += 0xc8000fffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | (a >> 13));
}

/* Element i of a fp32/fp16/bf16 buffer as fp32 (dt is uniform per launch, so
 * the switch does not diverge). */
__device__ __forceinline__ float load_f32(const void *p, zc_dtype dt, size_t i)
{
    switch (dt) {
    case ZC_DTYPE_F16: return f16_to_f32(((const uint16_t *)p)[i]);
    case ZC_DTYPE_BF16: return bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

__device__ __forceinline__ void store_f32(void *p, zc_dtype dt, size_t i, float v)
{
    switch (dt) {
    case ZC_DTYPE_F16: ((uint16_t *)p)[i] = f32_to_f16(v); break;
    case ZC_DTYPE_BF16: ((uint16_t *)p)[i] = f32_to_bf16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

__device__ __forceinline__ float to_f32(uint16_t h, zc_dtype dt)
{
    return dt == ZC_DTYPE_F16 ? f16_to_f32(h) : bf16_to_f32(h);
}

__device__ __forceinline__ uint16_t from_f32(float v, zc_dtype dt)
{
    return dt == ZC_DTYPE_F16 ? f32_to_f16(v) : f32_to_bf16(v);
}

__host__ __device__ __forceinline__ bool is_float_dtype(zc_dtype dt)
{
    return dt == ZC_DTYPE_F32 || dt == ZC_DTYPE_F16 || dt == ZC_DTYPE_BF16;
}

/* Grid for a grid-stride loop over `work` items: `cap` blocks (one full wave
 * of the kernel's resident blocks, from zc_k_geometry), never more than the
 * work needs. Pure arithmetic: no runtime call per launch. */
static inline unsigned grid_for(size_t work, int cap)
{
    size_t need = (work + kThreads - 1) / kThreads;
    size_t c = cap > 0 ? (size_t)cap : 1;
    return (unsigned)(need < c ? (need > 0 ? need : 1) : c);
}

/* Fills g->adam_blocks (adam.cu); sms already set. */
cudaError_t adam_occupancy(zc_k_geometry *g);

static inline bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Enqueues kernel k on `st` as `blocks` blocks of `threads` threads and
 * returns the status of this launch alone (launch_k: kThreads per block).
 *
 * Not <<<>>> followed by cudaGetLastError(): that returns - and clears -
 * whatever error the thread's last failing runtime call left behind,
 * including an unrelated earlier one, and reports it as this launch's
 * failure while the real culprit's error is lost. cudaLaunchKernelEx returns
 * this launch's own result: a bad configuration, a bad stream, or a context
 * an earlier kernel already broke (sticky errors fail every call; the device
 * backend then names the work last enqueued on the stream). Faults of this
 * kernel while it runs surface at the next synchronisation, never here. */
template <typename... K, typename... A>
static inline cudaError_t launch_kt(void (*k)(K...), unsigned blocks, unsigned threads,
                                    cudaStream_t st, A &&...args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = st;
    cfg.attrs = nullptr;
    cfg.numAttrs = 0;
    cudaError_t e = cudaLaunchKernelEx(&cfg, k, std::forward<A>(args)...);
    /* The runtime also recorded the failure as the thread's last error; it is
     * reported through the return value, so do not leave it for whichever
     * call of the thread asks next (no effect on a sticky error). */
    if (e != cudaSuccess)
        (void)cudaGetLastError();
    return e;
}

template <typename... K, typename... A>
static inline cudaError_t launch_k(void (*k)(K...), unsigned blocks, cudaStream_t st, A &&...args)
{
    return launch_kt(k, blocks, (unsigned)kThreads, st, std::forward<A>(args)...);
}

} // namespace zck

#endif
