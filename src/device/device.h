/* The device seam (internal): where buffers live and where elementwise work runs.
 *
 * The engine, the stage policies and the local communicator touch parameter,
 * gradient and optimizer memory only through these operations, so the same
 * code drives the host backend (plain memory, synchronous "streams") and the
 * CUDA backend (cudaMalloc'd memory, streams and events).
 *
 * Streams and events are opaque pointers. NULL stream = the backend's default
 * stream (CUDA: the legacy default stream, which every blocking stream waits
 * for and which waits for them). Operations on one stream run in order; the
 * host backend runs every operation synchronously, so its streams and events
 * are trivial and every "_async" operation has finished when it returns.
 *
 * What is asynchronous on CUDA (returns once enqueued, ordered on `stream`):
 * copy (except as noted there), memset0, every kernel (cast .. adam),
 * sumsq_async, nonfinite_async, event_record, stream_wait_event. What waits
 * for the host: alloc (zero-fill, build time), stream_sync, event_sync, sumsq
 * and nonfinite (their result is a host value). A caller that owns a
 * non-blocking stream orders it after another stream with event_record on the
 * producer + stream_wait_event on the consumer, never with a host wait.
 *
 * Errors: an operation reports why it could not be enqueued. A fault while
 * enqueued work runs surfaces at the next waiting call on that stream (or any
 * call, once the CUDA context is broken); the CUDA backend's message then
 * names the work enqueued on the stream since its last successful wait
 * (how many operations, the first and the last), so the culprit is among
 * them (CUDA_LAUNCH_BLOCKING=1 narrows it to one).
 *
 * Reductions are deterministic: the sum of squares accumulates in fp64 in
 * the one order device/sumsq_order.h defines (block partials of
 * ZC_SUMSQ_BLOCK elements, then a fixed tree of runs of ZC_SUMSQ_FANIN), so
 * the host and CUDA backends return the same bits.
 */
#ifndef ZC_DEVICE_DEVICE_H
#define ZC_DEVICE_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "base/alloc.h"
#include "device/sumsq_order.h"
#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/lion.h"

typedef struct zc_device zc_device;

/* Doubles of scratch sumsq_async needs for n elements: one per level-1 node
 * of the order's tree (ZC_SUMSQ_FANIN blocks), about n / 131072. */
static inline size_t zc__sumsq_scratch_elems(size_t n)
{
    return zc__sumsq_ngroups(n);
}

typedef enum zc_copy_kind {
    ZC_COPY_H2D = 0, /* host memory -> device memory */
    ZC_COPY_D2H,
    ZC_COPY_D2D,
    ZC_COPY_H2H
} zc_copy_kind;

typedef struct zc_device_ops {
    const char *name; /* "host", "cuda" */

    /* Memory. alloc zero-fills and counts the bytes under (kind of this
     * device, cat) on acct; free must get the same bytes and cat. On CUDA
     * both wait: alloc for its zero-fill (so any stream may use the memory),
     * free inside cudaFree, which waits for the whole device. Allocate at
     * build time or from a pool, never per chunk per micro-step. */
    zc_status (*alloc)(zc_device *d, zc_mem_account *acct, zc_mem_category cat, size_t bytes,
                       const char *what, void **out);
    void (*free)(zc_device *d, zc_mem_account *acct, zc_mem_category cat, void *p, size_t bytes);

    /* Streams and events (ordering only; host: no-ops that succeed). */
    /* A stream that orders with the legacy default stream (NULL), so code
     * mixing NULL and created streams stays correct. */
    zc_status (*stream_create)(zc_device *d, void **stream);
    /* A stream that does not order with the legacy default stream
     * (cudaStreamNonBlocking): what the engine's own stream and a comm stream
     * must be, so that work the user queues on the legacy stream does not
     * serialise with them. Everything shared with such a stream is ordered
     * by events. */
    zc_status (*stream_create_nonblocking)(zc_device *d, void **stream);
    void (*stream_destroy)(zc_device *d, void *stream);
    /* Waits for all work enqueued on the stream. */
    zc_status (*stream_sync)(zc_device *d, void *stream);
    /* Events without timing (cheaper to record and wait on). */
    zc_status (*event_create)(zc_device *d, void **event);
    void (*event_destroy)(zc_device *d, void *event);
    /* Captures the work enqueued on `stream` so far; re-recording moves it. */
    zc_status (*event_record)(zc_device *d, void *event, void *stream);
    /* Work enqueued on `stream` after this call starts after the event's
     * captured work finished; the host does not wait. */
    zc_status (*stream_wait_event)(zc_device *d, void *stream, void *event);
    /* Waits on the host for the event's captured work. */
    zc_status (*event_sync)(zc_device *d, void *event);
    /* *done = 1 if the event's captured work finished (or it was never
     * recorded), 0 if not yet; never waits. A fault in the captured work is
     * an error here. */
    zc_status (*event_query)(zc_device *d, void *event, int *done);

    /* Data movement. */
    /* Ordered on `stream`. Host memory may be pageable or pinned
     * (cudaHostAlloc / cudaHostRegister); only pinned memory makes a CUDA copy
     * truly asynchronous. With pageable memory the CUDA rules hold: H2D
     * returns once the source was staged (the caller may reuse it), D2H
     * returns when the data arrived. With pinned memory the host buffer must
     * stay untouched (H2D) or unread (D2H) until the stream is synced or an
     * event recorded after the copy completes. */
    zc_status (*copy)(zc_device *d, void *dst, const void *src, size_t bytes, zc_copy_kind kind,
                      void *stream);
    /* Zeroes `bytes` of device memory, ordered on `stream`; never waits. */
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
    /* acc[i] (fp32) = round_acc_dt(acc[i] + src[i]): the sum in fp32, then
     * rounded to acc_dt (RNE; F32: none, accumulate's result) and kept in
     * fp32 storage. A running sum held in a 16-bit dtype the way torch adds
     * into a 16-bit tensor (both operands widened, added in fp32, the sum
     * rounded once), so a 16-bit accumulator's values live in an fp32 buffer
     * (data_types.grad_accum_dtype). */
    zc_status (*accumulate_rounded)(zc_device *d, float *acc, const void *src, zc_dtype src_dt,
                                    zc_dtype acc_dt, size_t n, void *stream);
    /* dst[i] = sum over k = 0..nsrc-1, in that order, of srcs[k][i], summed in
     * fp32 and stored in dt (RNE). dst may equal one of srcs. This is the
     * local communicator's reduction. */
    zc_status (*reduce_sum)(zc_device *d, void *dst, const void *const *srcs, int nsrc,
                            zc_dtype dt, size_t n, void *stream);
    /* *out (host) = sum of x[i]^2 in fp64, in the order of
     * device/sumsq_order.h. Synchronises the stream. */
    zc_status (*sumsq)(zc_device *d, const void *x, zc_dtype dt, size_t n, double *out,
                       void *stream);
    /* *flag (host) = 1 if any x[i] is inf or NaN, else 0. Synchronises. */
    zc_status (*nonfinite)(zc_device *d, const void *x, zc_dtype dt, size_t n, int *flag,
                           void *stream);
    /* The stream-ordered forms, for one host wait per step instead of one per
     * chunk: *out (device memory, one double) = exactly what sumsq returns,
     * computed on the device; scratch is device memory of
     * zc__sumsq_scratch_elems(n) doubles, busy until the stream passes this
     * operation (one scratch per stream, or reuse it on the same stream);
     * what it holds afterwards is no part of the contract. */
    zc_status (*sumsq_async)(zc_device *d, const void *x, zc_dtype dt, size_t n, double *scratch,
                             double *out, void *stream);
    /* *flag (device int) |= 1 if any x[i] is inf or NaN; never cleared here
     * (memset0 it once, OR every chunk into it, read it once). */
    zc_status (*nonfinite_async)(zc_device *d, const void *x, zc_dtype dt, size_t n, int *flag,
                                 void *stream);
    /* Fused Adam/AdamW over one shard resident on this device. */
    zc_status (*adam)(zc_device *d, const zc_adam_shard *s, const zc_adam_coeffs *c, void *stream);
    /* Adam over 16-bit optimizer state (optim/adam.h), the shard
     * resident on this device: bitwise zc__adam_lp_scalar on every backend.
     * ZC_ERR_INVALID_ARG for a shard zc__adam_lp_check refuses. */
    zc_status (*adam_lp)(zc_device *d, const zc_adam_lp_shard *s, const zc_adam_coeffs *c,
                         void *stream);
    /* Lion and Adagrad (optim/lion.h, optim/adagrad.h) over one shard
     * resident on this device: bitwise zc__lion_scalar / zc__adagrad_scalar
     * on every backend. ZC_ERR_INVALID_ARG for a shard zc__lion_check /
     * zc__adagrad_check refuses. */
    zc_status (*lion)(zc_device *d, const zc_lion_shard *s, const zc_lion_coeffs *c,
                      void *stream);
    zc_status (*adagrad)(zc_device *d, const zc_adagrad_shard *s, const zc_adagrad_coeffs *c,
                         void *stream);
    /* DeepSpeed's symmetric int8 groups (quant/quant.h) over buffers on this
     * device: q (n bytes) and scales (groups floats) from x (n values of
     * dt), and back; bitwise the host's zc__quant_int8 / zc__dequant_int8 on
     * every backend, with their refusals. */
    zc_status (*quant_int8)(zc_device *d, const void *x, zc_dtype dt, size_t n, size_t groups,
                            int8_t *q, float *scales, void *stream);
    zc_status (*dequant_int8)(zc_device *d, const int8_t *q, const float *scales, size_t n,
                              size_t groups, void *out, zc_dtype dt, void *stream);

    /* Memory of the device itself, in bytes: what is free now and its total
     * (CUDA: cudaMemGetInfo, which counts every process's allocations). The
     * host backend has no memory of its own and reports 0 and 0; the build's
     * pre-flight then checks host memory only. */
    zc_status (*mem_info)(zc_device *d, size_t *free_bytes, size_t *total_bytes);

    /* Optional (NULL: nothing to do, the host). Makes the device current on
     * the calling thread whatever was current before (CUDA: cudaSetDevice).
     * The other operations make it current only when this library has not
     * already done so on the thread, so that a launch costs no runtime call
     * but itself; the engine calls this at each public entry, so a caller
     * that switches the thread's device between two calls is followed. */
    zc_status (*make_current)(zc_device *d);

    void (*destroy)(zc_device *d);
} zc_device_ops;

struct zc_device {
    const zc_device_ops *ops;
    zc_mem_kind mem_kind; /* ZC_MEMKIND_HOST or ZC_MEMKIND_DEVICE: where its memory
                             lives (host-addressable or not). Both count what
                             ops->alloc gives as ZC_MEMKIND_DEVICE in the
                             accounts: the host path reports as a GPU would. */
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
