// What the CUDA layers share (layers_cuda.cu, attention_cuda.cu): the cuBLAS
// handle, status codes, a launch that reports its own failure only, and warp
// reductions. Everything here is static or inline: each .cu file gets its
// own copy.
#ifndef GPT_CUDA_COMMON_CUH
#define GPT_CUDA_COMMON_CUH

#include <cstddef>
#include <utility>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_plan.h"
#include "layers_cuda.h"

struct gpt_cublas {
    cublasHandle_t h;
    cudaStream_t s;
};

namespace gpt {

// Threads of the row kernels' blocks: 8 warps, a row each.
constexpr int kRowThreads = 256;
constexpr int kRowsPerBlock = kRowThreads / 32;

static inline int blocks_for(size_t n, int per_block)
{
    return (int)((n + (size_t)per_block - 1) / (size_t)per_block);
}

// A cuBLAS status as this example's status code (layers_cuda.h), so the
// caller reads cuBLAS's own reason instead of a generic CUDA error.
static inline int blas_code(cublasStatus_t st)
{
    return st == CUBLAS_STATUS_SUCCESS ? 0 : GPT_CUBLAS_ERROR_BASE + (int)st;
}

// Enqueues kernel k and returns the status of this launch alone. Not a launch
// followed by cudaGetLastError(): that returns (and clears) whatever error
// an earlier, unrelated call of this thread left behind, and would report it
// as this launch's. cudaLaunchKernelEx returns this launch's own result; the
// copy the runtime also keeps as the thread's last error is cleared, since
// the return value reports it. Faults while the kernel runs surface at the
// next synchronisation. A grid of 0 blocks (nothing to do) launches nothing.
template <typename... K, typename... A>
static int launch(void (*k)(K...), dim3 grid, int threads, cudaStream_t st, A &&...args)
{
    if (grid.x == 0 || grid.y == 0 || grid.z == 0) return 0;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3((unsigned)threads);
    cfg.stream = st;
    cudaError_t e = cudaLaunchKernelEx(&cfg, k, std::forward<A>(args)...);
    if (e != cudaSuccess) (void)cudaGetLastError();
    return (int)e;
}

// Returns from the calling function with the first failing status.
#define TRY(call)                    \
    do {                             \
        int try_rc_ = (call);        \
        if (try_rc_) return try_rc_; \
    } while (0)

// Sum and maximum over the 32 lanes of a warp (every lane gets the result;
// the butterfly's order is fixed, so results repeat run to run).
__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// The row a warp of a row kernel owns, and its lane.
__device__ __forceinline__ size_t warp_row() { return (size_t)blockIdx.x * kRowsPerBlock + threadIdx.x / 32; }
__device__ __forceinline__ int lane_id() { return (int)(threadIdx.x & 31u); }

} // namespace gpt

#endif
