/* Reductions that decide the step: the sum of squares behind the global
 * gradient norm, and the inf/NaN flag behind the fp16 skip decision.
 *
 * Sum of squares, deterministic and equal to the host's bitwise: the input is
 * cut into blocks of ZC_K_SUMSQ_BLOCK elements; one warp owns one block. Its
 * lanes load 32 consecutive elements at a time (coalesced) and square them in
 * fp64 (exact: a float's 24-bit significand squared fits in 53 bits); then
 * every lane adds the 32 squares into its running partial in lane order, by
 * broadcast shuffles, so the partial is the plain left-to-right sum
 * ((0 + x0^2) + x1^2) + ... over the block, exactly the host loop of
 * src/device/host.c. The launcher's caller adds the partials in block order
 * on the host. The cost is one dependent fp64 add per element per warp, far
 * below memory time when many warps are resident. */
#include "kernels/common.cuh"

namespace zck {
namespace {

template <int DT>
__global__ void __launch_bounds__(kThreads)
sumsq_kernel(const void *__restrict__ x, size_t n, double *__restrict__ partials)
{
    const unsigned lane = threadIdx.x & 31u;
    const size_t warps_per_grid = (size_t)gridDim.x * (blockDim.x / 32);
    const size_t nblocks = (n + ZC_K_SUMSQ_BLOCK - 1) / ZC_K_SUMSQ_BLOCK;
    for (size_t b = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; b < nblocks;
         b += warps_per_grid) {
        size_t lo = b * ZC_K_SUMSQ_BLOCK;
        size_t hi = lo + ZC_K_SUMSQ_BLOCK < n ? lo + ZC_K_SUMSQ_BLOCK : n;
        double part = 0.0;
        for (size_t base = lo; base < hi; base += 32) {
            size_t i = base + lane;
            double v = i < hi ? (double)load_f32(x, (zc_dtype)DT, i) : 0.0;
            double sq = __dmul_rn(v, v);
            /* Lanes past the end contribute +0.0, which leaves the sum
             * unchanged (part is never -0.0: it starts at +0.0 and only
             * non-negative squares are added). */
            int cnt = hi - base < 32 ? (int)(hi - base) : 32;
            for (int j = 0; j < cnt; j++)
                part = __dadd_rn(part, __shfl_sync(0xffffffffu, sq, j));
        }
        if (lane == 0)
            partials[b] = part;
    }
}

template <int DT>
__global__ void __launch_bounds__(kThreads)
nonfinite_kernel(const void *__restrict__ x, size_t n, int *flag)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    int bad = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        if (DT == ZC_DTYPE_F32)
            bad |= (((const uint32_t *)x)[i] & 0x7f800000u) == 0x7f800000u;
        else {
            const uint16_t mask = DT == ZC_DTYPE_F16 ? 0x7c00 : 0x7f80;
            bad |= (((const uint16_t *)x)[i] & mask) == mask;
        }
    }
    /* One store per block; every block that sees a bad value stores the same
     * 1, so the race between blocks is benign. */
    if (__syncthreads_or(bad) && threadIdx.x == 0)
        atomicOr(flag, 1);
}

/* One thread: the order of the additions is the claim (bitwise equal to the
 * host loop), and nb is n / 4096, so this is a few microseconds. */
__global__ void sum_partials_kernel(const double *__restrict__ p, size_t nb, double *out)
{
    double total = 0.0;
    for (size_t b = 0; b < nb; b++)
        total = __dadd_rn(total, p[b]);
    *out = total;
}

} // namespace
} // namespace zck

using namespace zck;

extern "C" cudaError_t zc_k_sum_partials(const double *partials, size_t nb, double *out,
                                         cudaStream_t stream)
{
    if (!out || (nb && !partials))
        return cudaErrorInvalidValue;
    return launch_kt(sum_partials_kernel, 1, 1, stream, partials, nb, out);
}

extern "C" cudaError_t zc_k_sumsq_partials(const void *x, zc_dtype dt, size_t n, double *partials,
                                           cudaStream_t stream)
{
    if (!is_float_dtype(dt))
        return cudaErrorInvalidValue;
    if (n == 0)
        return cudaSuccess;
    unsigned blocks;
    /* Work items are warps (one per partial); grid_for counts threads. */
    cudaError_t e = grid_for(zc_k_sumsq_nblocks(n) * 32, &blocks);
    if (e != cudaSuccess)
        return e;
    switch (dt) {
    case ZC_DTYPE_F32: e = launch_k(sumsq_kernel<ZC_DTYPE_F32>, blocks, stream, x, n, partials); break;
    case ZC_DTYPE_F16: e = launch_k(sumsq_kernel<ZC_DTYPE_F16>, blocks, stream, x, n, partials); break;
    default: e = launch_k(sumsq_kernel<ZC_DTYPE_BF16>, blocks, stream, x, n, partials); break;
    }
    return e;
}

extern "C" cudaError_t zc_k_nonfinite(const void *x, zc_dtype dt, size_t n, int *flag,
                                      cudaStream_t stream)
{
    if (!is_float_dtype(dt))
        return cudaErrorInvalidValue;
    if (n == 0)
        return cudaSuccess;
    unsigned blocks;
    cudaError_t e = grid_for(n, &blocks);
    if (e != cudaSuccess)
        return e;
    switch (dt) {
    case ZC_DTYPE_F32: e = launch_k(nonfinite_kernel<ZC_DTYPE_F32>, blocks, stream, x, n, flag); break;
    case ZC_DTYPE_F16: e = launch_k(nonfinite_kernel<ZC_DTYPE_F16>, blocks, stream, x, n, flag); break;
    default: e = launch_k(nonfinite_kernel<ZC_DTYPE_BF16>, blocks, stream, x, n, flag); break;
    }
    return e;
}
