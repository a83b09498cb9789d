/* The device seam (internal): where buffers live and where elementwise work runs.
 *
 * The engine, the stage policies and the local communicator touch parameter,
 * gradient and optimizer memory only through these operations, so the same
 * code drives the host backend (plain memory, synchronous "streams") and the
 * CUDA backend (cudaMalloc'd memory, streams and events).
 *
 * Streams and events are opaque pointers. NULL stream = the backend's default
 * stream. Operations on one stream run in order; the host backend runs every
 * operation synchronously, so its streams and events are trivial.
 *
 * Reductions are deterministic: sum of squares accumulates in fp64 over fixed
 * blocks of ZC_SUMSQ_BLOCK elements (block partials, then the partials summed
 * in block order), so the host and CUDA backends agree to rounding of fp64.
 */
#ifndef ZC_DEVICE_DEVICE_H
#define ZC_DEVICE_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "base/alloc.h"
#include "optim/adam.h"

#define ZC_SUMSQ_BLOCK 4096

typedef struct zc_device zc_device;

typedef enum zc_copy_kind {
    ZC_COPY_H2D = 0, /* host memory -> device memory */
    ZC_COPY_D2H,
    ZC_COPY_D2D,
    ZC_COPY_H2H
} zc_copy_kind;

typedef struct zc_device_ops {
    const char *name; /* "host", "cuda" */

    /* Memory. alloc zero-fills and counts the bytes under (kind of this
     * device, cat) on acct; free must get the same bytes and cat. */
    zc_status (*alloc)(zc_device *d, zc_mem_account *acct, zc_mem_category cat, size_t bytes,
                       const char *what, void **out);
    void (*free)(zc_device *d, zc_mem_account *acct, zc_mem_category cat, void *p, size_t bytes);

    /* Streams and events (ordering only; host: no-ops that succeed). */
    zc_status (*stream_create)(zc_device *d, void **stream);
    void (*stream_destroy)(zc_device *d, void *stream);
    zc_status (*stream_sync)(zc_device *d, void *stream);
    zc_status (*event_create)(zc_device *d, void **event);
    void (*event_destroy)(zc_device *d, void *event);
    zc_status (*event_record)(zc_device *d, void *event, void *stream);
    zc_status (*stream_wait_event)(zc_device *d, void *stream, void *event);
    zc_status (*event_sync)(zc_device *d, void *event);

    /* Data movement. */
    zc_status (*copy)(zc_device *d, void *dst, const void *src, size_t bytes, zc_copy_kind kind,
                      void *stream);
    zc_status (*memset0)(zc_device *d, void *dst, size_t bytes, void *stream);

    /* Elementwise kernels over n elements. */
    /* dst[i] = convert(src[i]) (RNE to 16-bit). dst and src may not overlap
     * unless they are the same dtype and pointer. */
    zc_status (*cast)(zc_device *d, void *dst, zc_dtype dst_dt, const void *src, zc_dtype src_dt,
                      size_t n, void *stream);
    /* x[i] = x[i] * a. */
    zc_status (*scale)(zc_device *d, void *x, zc_dtype dt, size_t n, float a, void *stream);
    /* acc[i] (fp32) += src[i] (any float dtype). */
    zc_status (*accumulate)(zc_device *d, float *acc, const void *src, zc_dtype src_dt, size_t n,
                            void *stream);
    /* dst[i] = sum over k = 0..nsrc-1, in that order, of srcs[k][i], summed in
     * fp32 and stored in dt (RNE). dst may equal one of srcs. This is the
     * local communicator's reduction. */
    zc_status (*reduce_sum)(zc_device *d, void *dst, const void *const *srcs, int nsrc,
                            zc_dtype dt, size_t n, void *stream);
    /* *out (host) = sum of x[i]^2 in fp64, blocked as described above.
     * Synchronises the stream. */
    zc_status (*sumsq)(zc_device *d, const void *x, zc_dtype dt, size_t n, double *out,
                       void *stream);
    /* *flag (host) = 1 if any x[i] is inf or NaN, else 0. Synchronises. */
    zc_status (*nonfinite)(zc_device *d, const void *x, zc_dtype dt, size_t n, int *flag,
                           void *stream);
    /* Fused Adam/AdamW over one shard resident on this device. */
    zc_status (*adam)(zc_device *d, const zc_adam_shard *s, const zc_adam_coeffs *c, void *stream);

    void (*destroy)(zc_device *d);
} zc_device_ops;

struct zc_device {
    const zc_device_ops *ops;
    zc_mem_kind mem_kind; /* ZC_MEMKIND_HOST or ZC_MEMKIND_DEVICE */
    int index;            /* CUDA ordinal, -1 for the host */
};

/* The host backend (a process-wide singleton; destroy is a no-op). */
zc_device *zc__device_host(void);

/* Opens the requested device. ZC_DEVICE_AUTO picks CUDA when the build has it
 * and a device is present, else the host, logging the choice once at INFO.
 * ZC_DEVICE_CUDA without a usable device is ZC_ERR_UNSUPPORTED. */
zc_status zc__device_open(zc_device_kind kind, int index, zc_device **out);

/* The CUDA device a process of a launched job uses, given `visible` devices
 * (cudaGetDeviceCount) and the environment: the launcher's local rank, taken
 * from the first of LOCAL_RANK (torchrun, deepspeed), OMPI_COMM_WORLD_LOCAL_RANK
 * (Open MPI), MPI_LOCALRANKID (MPICH/Intel MPI hydra), MV2_COMM_WORLD_LOCAL_RANK
 * (MVAPICH2), SLURM_LOCALID (srun) that is set - the launcher order of
 * src/comm/bootstrap.c. No local rank: 0. A local rank below `visible`: that
 * device. Beyond it: with CUDA_VISIBLE_DEVICES set (each task sees its own
 * subset, e.g. srun --gpus-per-task) the local rank modulo `visible`, else
 * ZC_ERR_CONFIG (more processes than GPUs). A malformed local rank is
 * ZC_ERR_CONFIG naming the variable; visible <= 0 is ZC_ERR_UNSUPPORTED.
 * `why` (may be NULL) receives which variable decided, for logs and errors.
 * The CUDA backend (device_index -1) and the NCCL communicator both call this,
 * so they cannot pick different GPUs. Pure host logic; thread-safe as getenv. */
zc_status zc__device_pick_from_env(int visible, int *index, char *why, size_t why_len);

/* Defined by the CUDA backend when built (src/device/cuda.c); otherwise by a
 * fallback that reports ZC_ERR_UNSUPPORTED. */
zc_status zc__device_cuda_open(int index, zc_device **out);
/* Number of usable CUDA devices (0 without CUDA or without a GPU). */
int zc__device_cuda_count(void);

#endif
