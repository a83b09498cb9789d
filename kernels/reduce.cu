/* Reductions that decide the step: the sum of squares behind the global
 * gradient norm, and the inf/NaN flag behind the fp16 skip decision.
 *
 * Sum of squares, deterministic and equal to the host's bitwise: the order
 * is device/sumsq_order.h's (block partials of 4096 elements added left to
 * right, then a tree of runs of 32 added left to right), computed in two
 * launches.
 *   sumsq_groups_kernel: one warp per group of 32 blocks, lane r owning
 *     block r (kernels/sumsq_tile.h has the tile arithmetic). The warp
 *     stages the group through shared memory a 256-byte column strip at a
 *     time, loaded with coalesced 16-byte loads (the next strip's loads are
 *     in flight while the lanes add the current one); each lane then adds
 *     its own row's squares in index order, one fused multiply-add per
 *     element (exact square, one rounding: the same bits as the host's
 *     square-then-add). The 32 partials are added in lane order: level 1 of
 *     the tree, one double per group.
 *   sumsq_tree_kernel: one thread block adds the levels above, each run of
 *     32 by one thread, in place.
 * Per element: a shared load of 16 bytes per 4-8 elements, a conversion and
 * one fp64 FMA in a chain per lane, against 2-4 bytes of DRAM traffic. */
#include <cuda_fp16.h>

#include "kernels/common.cuh"
#include "kernels/sumsq_tile.h"

namespace zck {
namespace {

constexpr int kSumsqWarps = 4;
constexpr int kSumsqThreads = 32 * kSumsqWarps;
constexpr int kTreeThreads = 1024;
/* Largest grid of the groups kernel (a grid-stride loop covers the rest). */
constexpr size_t kSumsqMaxGrid = (size_t)1 << 20;

template <int DT>
struct sumsq_elem {
    static constexpr unsigned size = DT == ZC_DTYPE_F32 ? 4u : 2u;
    static constexpr unsigned per_vec = 16u / size;
};

/* The 16-byte vector of x whose first element is e (a multiple of its
 * elements per vector). Elements at or past n read as zero bits (+0.0, whose
 * square leaves a partial unchanged: partials are >= +0.0 or NaN). */
template <int DT, bool kAligned>
__device__ __forceinline__ uint4 load_vec(const void *__restrict__ x, size_t n, size_t e)
{
    constexpr unsigned esz = sumsq_elem<DT>::size, per = sumsq_elem<DT>::per_vec;
    if (kAligned && e + per <= n) /* read once: stream past the caches */
        return __ldcs((const uint4 *)((const unsigned char *)x + e * esz));
    uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
    for (unsigned j = 0; j < per; j++)
        if (e + j < n) {
            if (esz == 4)
                w[j] = ((const uint32_t *)x)[e + j];
            else
                w[j / 2] |= (uint32_t)((const uint16_t *)x)[e + j] << (16 * (j & 1));
        }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/* part + the squares of q's elements, added in index order (little-endian:
 * the low half of a word is the lower index). */
template <int DT>
__device__ __forceinline__ double add_squares(double part, uint4 q)
{
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        if (DT == ZC_DTYPE_F32) {
            const double v = (double)__uint_as_float(w[j]);
            part = __fma_rn(v, v, part);
        } else {
            float lo, hi;
            if (DT == ZC_DTYPE_BF16) {
                lo = __uint_as_float(w[j] << 16);
                hi = __uint_as_float(w[j] & 0xffff0000u);
            } else { /* exact widening (subnormals included: no -ftz) */
                lo = __half2float(__ushort_as_half((unsigned short)(w[j] & 0xffffu)));
                hi = __half2float(__ushort_as_half((unsigned short)(w[j] >> 16)));
            }
            const double a = (double)lo, b = (double)hi;
            part = __fma_rn(a, a, part);
            part = __fma_rn(b, b, part);
        }
    }
    return part;
}

/* One tile's loads for this lane: ZC_SUMSQ_LOADS_PER_LANE vectors. */
template <int DT, bool kAligned>
__device__ __forceinline__ void load_tile(uint4 (&stage)[ZC_SUMSQ_LOADS_PER_LANE],
                                          const void *__restrict__ x, size_t n, size_t g,
                                          unsigned t, unsigned lane)
{
#pragma unroll
    for (unsigned k = 0; k < ZC_SUMSQ_LOADS_PER_LANE; k++)
        stage[k] = load_vec<DT, kAligned>(
            x, n, zc__sumsq_elem(g, zc__sumsq_load_row(k, lane), t, zc__sumsq_load_vec(k, lane),
                                 sumsq_elem<DT>::size));
}

/* groups[g] = level 1 of the order's tree for group g (see the top). */
template <int DT, bool kAligned>
__global__ void __launch_bounds__(kSumsqThreads)
sumsq_groups_kernel(const void *__restrict__ x, size_t n, double *__restrict__ groups)
{
    __shared__ __align__(16) unsigned char smem[kSumsqWarps][ZC_SUMSQ_TILE_SMEM];
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    unsigned char *tile = smem[warp];
    const unsigned ntiles = zc__sumsq_tiles(sumsq_elem<DT>::size);
    const size_t nb = zc__sumsq_nblocks(n), ng = zc__sumsq_ngroups(n);
    for (size_t g = (size_t)blockIdx.x * kSumsqWarps + warp; g < ng;
         g += (size_t)gridDim.x * kSumsqWarps) {
        uint4 stage[ZC_SUMSQ_LOADS_PER_LANE];
        load_tile<DT, kAligned>(stage, x, n, g, 0, lane);
        double part = 0.0;
        for (unsigned t = 0; t < ntiles; t++) {
            __syncwarp(); /* every lane is done reading the previous tile */
#pragma unroll
            for (unsigned k = 0; k < ZC_SUMSQ_LOADS_PER_LANE; k++)
                *(uint4 *)(tile + zc__sumsq_smem_off(zc__sumsq_load_row(k, lane),
                                                      zc__sumsq_load_vec(k, lane))) = stage[k];
            __syncwarp(); /* the tile is complete */
            if (t + 1 < ntiles) /* in flight while this tile is added */
                load_tile<DT, kAligned>(stage, x, n, g, t + 1, lane);
#pragma unroll
            for (unsigned v = 0; v < ZC_SUMSQ_VECS_PER_ROW; v++)
                part = add_squares<DT>(part, *(const uint4 *)(tile + zc__sumsq_smem_off(lane, v)));
        }
        /* The group's blocks that exist (fewer in the last group), in lane
         * order; the count is the same on every lane. */
        const size_t left = nb - g * ZC_SUMSQ_FANIN;
        const unsigned rows = left < ZC_SUMSQ_FANIN ? (unsigned)left : ZC_SUMSQ_FANIN;
        double sum = __shfl_sync(0xffffffffu, part, 0);
        for (unsigned r = 1; r < rows; r++)
            sum = __dadd_rn(sum, __shfl_sync(0xffffffffu, part, (int)r));
        if (lane == 0)
            groups[g] = sum;
    }
}

/* The order's tree from level 1 up, in one thread block: at each level,
 * thread j adds run j (values 32j .. 32j+31 of the level) left to right.
 * A level's values live at s[i * stride] (stride = 32^(level-1)); run j's
 * sum goes to its first value's place, which no other thread of the level
 * reads, so the levels need only a barrier between them. */
__global__ void __launch_bounds__(kTreeThreads)
sumsq_tree_kernel(double *__restrict__ s, size_t m, double *__restrict__ out)
{
    size_t stride = 1;
    while (m > 1) {
        const size_t next = m / ZC_SUMSQ_FANIN + (m % ZC_SUMSQ_FANIN != 0);
        for (size_t j = threadIdx.x; j < next; j += blockDim.x) {
            const size_t lo = j * ZC_SUMSQ_FANIN;
            const size_t len = m - lo < ZC_SUMSQ_FANIN ? m - lo : ZC_SUMSQ_FANIN;
            double v[ZC_SUMSQ_FANIN]; /* every load issued before the first add */
#pragma unroll
            for (unsigned i = 0; i < ZC_SUMSQ_FANIN; i++)
                v[i] = i < len ? s[(lo + i) * stride] : 0.0;
            double acc = v[0];
#pragma unroll
            for (unsigned i = 1; i < ZC_SUMSQ_FANIN; i++)
                if (i < len)
                    acc = __dadd_rn(acc, v[i]);
            s[lo * stride] = acc;
        }
        __syncthreads(); /* also makes this level's global writes visible */
        stride *= ZC_SUMSQ_FANIN;
        m = next;
    }
    if (threadIdx.x == 0)
        *out = m ? s[0] : 0.0;
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

} // namespace
} // namespace zck

using namespace zck;

extern "C" cudaError_t zc_k_sumsq_groups(const void *x, zc_dtype dt, size_t n, double *groups,
                                         cudaStream_t stream)
{
    if (!is_float_dtype(dt))
        return cudaErrorInvalidValue;
    if (n == 0)
        return cudaSuccess;
    if (!x || !groups)
        return cudaErrorInvalidValue;
    /* A block per kSumsqWarps groups: every group is the same work, so no
     * device query is needed to size the grid. */
    const size_t need = (zc__sumsq_ngroups(n) + kSumsqWarps - 1) / kSumsqWarps;
    const unsigned blocks = (unsigned)(need < kSumsqMaxGrid ? need : kSumsqMaxGrid);
    const bool al = aligned16(x);
    switch (dt) {
    case ZC_DTYPE_F32:
        return al ? launch_kt(sumsq_groups_kernel<ZC_DTYPE_F32, true>, blocks, kSumsqThreads,
                              stream, x, n, groups)
                  : launch_kt(sumsq_groups_kernel<ZC_DTYPE_F32, false>, blocks, kSumsqThreads,
                              stream, x, n, groups);
    case ZC_DTYPE_F16:
        return al ? launch_kt(sumsq_groups_kernel<ZC_DTYPE_F16, true>, blocks, kSumsqThreads,
                              stream, x, n, groups)
                  : launch_kt(sumsq_groups_kernel<ZC_DTYPE_F16, false>, blocks, kSumsqThreads,
                              stream, x, n, groups);
    default:
        return al ? launch_kt(sumsq_groups_kernel<ZC_DTYPE_BF16, true>, blocks, kSumsqThreads,
                              stream, x, n, groups)
                  : launch_kt(sumsq_groups_kernel<ZC_DTYPE_BF16, false>, blocks, kSumsqThreads,
                              stream, x, n, groups);
    }
}

extern "C" cudaError_t zc_k_sumsq_tree(double *groups, size_t ng, double *out,
                                       cudaStream_t stream)
{
    if (!out || (ng && !groups))
        return cudaErrorInvalidValue;
    return launch_kt(sumsq_tree_kernel, 1, kTreeThreads, stream, groups, ng, out);
}

extern "C" cudaError_t zc_k_nonfinite(const zc_k_geometry *g, const void *x, zc_dtype dt,
                                      size_t n, int *flag, cudaStream_t stream)
{
    if (!g || !is_float_dtype(dt))
        return cudaErrorInvalidValue;
    if (n == 0)
        return cudaSuccess;
    const unsigned blocks = grid_for(n, g->stream_blocks);
    cudaError_t e;
    switch (dt) {
    case ZC_DTYPE_F32: e = launch_k(nonfinite_kernel<ZC_DTYPE_F32>, blocks, stream, x, n, flag); break;
    case ZC_DTYPE_F16: e = launch_k(nonfinite_kernel<ZC_DTYPE_F16>, blocks, stream, x, n, flag); break;
    default: e = launch_k(nonfinite_kernel<ZC_DTYPE_BF16>, blocks, stream, x, n, flag); break;
    }
    return e;
}
