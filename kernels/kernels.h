/* C interface to the CUDA kernels (internal).
 *
 * Device code lives in the .cu files of kernels/; host code never launches a kernel
 * itself, it calls these launchers. Each takes raw device pointers, element
 * counts and a stream (NULL = the legacy default stream), enqueues its work
 * and returns the status of that launch only (cudaSuccess, or why it could
 * not be enqueued: bad arguments or configuration, or a context an earlier
 * fault already broke). An error left behind by an earlier call of the thread
 * is neither returned nor cleared, and faults while the kernel runs surface at
 * the next synchronisation (the device backend names the work then). None of
 * them allocates or synchronises.
 *
 * Every kernel has a host twin in src/device/host.c (src/optim for Adam) and
 * follows it operation for operation: the same dtype rules as src/base/dtype.h
 * (round to nearest even; bf16 NaN -> 0x7FC0; fp16 NaN keeps sign and top
 * payload bits, quiet), no FMA contraction, IEEE division and square root, the
 * same summation order. The GPU results are therefore meant to be bitwise equal
 * to the host's; tests allow 2 ulp (fp32) and 1 ulp (16-bit). The exception is
 * the bits of a NaN that arithmetic produces: the GPU returns the canonical
 * NaN (0x7FFFFFFF in fp32) where x86 returns 0xFFC00000 or propagates an
 * input's payload (IEEE 754 allows both); conversions alone follow dtype.h
 * bit for bit.
 *
 * Pure C: included by src/device/cuda.c (gcc) and by the .cu files (nvcc). */
#ifndef ZC_KERNELS_KERNELS_H
#define ZC_KERNELS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "device/sumsq_order.h"
#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/lion.h"
#include "zeroc/zeroc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Launch geometry of one device, asked of the runtime once, when the device
 * backend opens its handle (zc_k_geometry_query), and passed to every
 * launcher that sizes a grid: a launch then asks the runtime nothing but the
 * launch itself (no cudaGetDevice, no attribute query). The grid-stride
 * kernels run one full wave of resident blocks, never more blocks than the
 * work needs. */
typedef struct zc_k_geometry {
    int sms;           /* multiprocessors */
    int stream_blocks; /* elementwise kernels (cast, scale, accumulate, reduce_sum,
                        * nonfinite; light on registers): sms x the SM's thread
                        * limit / 256 */
    /* Fused Adam: sms x the kernel's own occupancy (blocks of 256 resident
     * per SM, cudaOccupancyMaxActiveBlocksPerMultiprocessor), by
     * [vector path][gradient dtype F32, F16, BF16][output: none, F32, F16, BF16]. */
    int adam_blocks[2][3][4];
} zc_k_geometry;

/* Fills *g for `device`, which must be the calling thread's current device.
 * cudaSuccess, or why the runtime could not tell. */
cudaError_t zc_k_geometry_query(int device, zc_k_geometry *g);

/* Most source buffers one zc_k_reduce_sum launch accepts (the pointers travel
 * in the kernel's argument block). */
#define ZC_K_MAX_REDUCE_SRCS 64

/* Fused Adam/AdamW over one shard (zc_adam_shard fields are device pointers;
 * the structs themselves are read on the host at launch). Uses 16-byte vector
 * loads when every buffer is 16-byte aligned, else a scalar path. */
cudaError_t zc_k_adam(const zc_k_geometry *g, const zc_adam_shard *s, const zc_adam_coeffs *c,
                      cudaStream_t stream);

/* Adam/AdamW over 16-bit optimizer state (src/optim/adam.h; the shard's
 * buffers are device pointers, the struct is read on the host): bitwise the
 * host's zc__adam_lp_scalar. cudaErrorInvalidValue for a NULL argument. */
cudaError_t zc_k_adam_lp(const zc_k_geometry *g, const zc_adam_lp_shard *s,
                         const zc_adam_coeffs *c, cudaStream_t stream);

/* Lion and Adagrad over one shard (src/optim/lion.h, adagrad.h; the shards'
 * buffers are device pointers, the structs are read on the host): bitwise
 * the host's zc__lion_scalar and zc__adagrad_scalar. cudaErrorInvalidValue
 * for a NULL argument; the dtypes are the caller's to check. */
cudaError_t zc_k_lion(const zc_k_geometry *g, const zc_lion_shard *s, const zc_lion_coeffs *c,
                      cudaStream_t stream);
cudaError_t zc_k_adagrad(const zc_k_geometry *g, const zc_adagrad_shard *s,
                         const zc_adagrad_coeffs *c, cudaStream_t stream);

/* DeepSpeed's symmetric int8 groups (src/quant/quant.h), device buffers:
 * bitwise the host's zc__quant_int8 / zc__dequant_int8. cudaErrorInvalidValue
 * for a dtype other than fp32/fp16/bf16 or groups not dividing n. */
cudaError_t zc_k_quant_int8(const zc_k_geometry *g, const void *x, zc_dtype dt, size_t n,
                            size_t groups, int8_t *q, float *scales, cudaStream_t stream);
cudaError_t zc_k_dequant_int8(const zc_k_geometry *g, const int8_t *q, const float *scales,
                              size_t n, size_t groups, void *out, zc_dtype dt,
                              cudaStream_t stream);

/* dst[i] = convert(src[i]) for fp32/fp16/bf16 (dtypes differ). */
cudaError_t zc_k_cast(const zc_k_geometry *g, void *dst, zc_dtype dst_dt, const void *src,
                      zc_dtype src_dt, size_t n, cudaStream_t stream);

/* x[i] = x[i] * a, computed in fp32 (fp64 for F64) and stored RNE. */
cudaError_t zc_k_scale(const zc_k_geometry *g, void *x, zc_dtype dt, size_t n, float a,
                       cudaStream_t stream);

/* acc[i] += src[i] in fp32. */
cudaError_t zc_k_accumulate(const zc_k_geometry *g, float *acc, const void *src, zc_dtype src_dt,
                            size_t n, cudaStream_t stream);

/* acc[i] = round_acc_dt(acc[i] + src[i]): the fp32 sum rounded to acc_dt (RNE;
 * F32 is zc_k_accumulate) and stored back as fp32. */
cudaError_t zc_k_accumulate_rounded(const zc_k_geometry *g, float *acc, const void *src,
                                    zc_dtype src_dt, zc_dtype acc_dt, size_t n,
                                    cudaStream_t stream);

/* dst[i] = srcs[0][i] + srcs[1][i] + ... in that order: fp32 sums for
 * fp32/fp16/bf16 (rounded once), fp64 for F64, int64 then truncation for I32.
 * srcs is a host array of nsrc (1..ZC_K_MAX_REDUCE_SRCS) device pointers; dst
 * may equal one of them. */
cudaError_t zc_k_reduce_sum(const zc_k_geometry *g, void *dst, const void *const *srcs, int nsrc,
                            zc_dtype dt, size_t n, cudaStream_t stream);

/* The sum of squares in the order of device/sumsq_order.h, in two launches.
 *
 * groups[g] (device, zc__sumsq_ngroups(n) doubles) = level-1 node g of the
 * order's tree: the left-to-right fp64 sum of the partials of blocks
 * 32g .. 32g+31, each partial the left-to-right fp64 sum of its block's
 * squares. One warp per group, each lane summing its own block (see
 * kernels/sumsq_tile.h); reads x once, at memory speed. */
cudaError_t zc_k_sumsq_groups(const void *x, zc_dtype dt, size_t n, double *groups,
                              cudaStream_t stream);

/* *out (device double) = the order's tree over groups[0..ng) from level 1
 * up: the sum of squares itself (ng = 0 gives +0.0). One thread block; the
 * levels are summed in place, so groups is overwritten. Keeping the sum on
 * the device lets a norm be all-gathered without a host wait per chunk. */
cudaError_t zc_k_sumsq_tree(double *groups, size_t ng, double *out, cudaStream_t stream);

/* *flag (device int) |= 1 if some x[i] is inf or NaN. The caller zeroes *flag
 * first (this launcher only sets it). */
cudaError_t zc_k_nonfinite(const zc_k_geometry *g, const void *x, zc_dtype dt, size_t n, int *flag,
                           cudaStream_t stream);

/* Occupies `stream` for about `ms` milliseconds (one thread sleeping in
 * __nanosleep steps). Test hook: stalls a communicator's stream so its
 * watchdog can be exercised on a single GPU. */
cudaError_t zc_k_sleep(unsigned ms, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
