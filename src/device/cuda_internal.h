/* What the two files of the CUDA device backend share (internal to the
 * CUDA plugin): the handle, the error helpers and the enqueue/wait macros.
 * cuda.c holds the handle, memory, streams, events and copies;
 * cuda_kernels.c the operations that launch kernels of kernels/. */
#ifndef ZC_DEVICE_CUDA_INTERNAL_H
#define ZC_DEVICE_CUDA_INTERNAL_H

#include <pthread.h>

#include <cuda_runtime_api.h>

#include "device/device.h"
#include "device/optrack.h"
#include "kernels/kernels.h"

typedef struct cuda_device {
    zc_device base;
    pthread_mutex_t mu; /* guards the scratch buffers */
    double *d_partials; /* device: sumsq level-1 sums, then the total */
    size_t partials_cap;
    int *d_flag;        /* device: nonfinite flag */
    cudaStream_t fill;  /* non-blocking: alloc's zero-fills */
    zc_k_geometry geo;  /* grids of the kernels, queried at open */

    /* Work enqueued per stream since its last wait, for error messages. Its
     * mutex is taken inside mu (sumsq notes its kernels holding mu) and
     * never held across a CUDA call. */
    zc_optrack track;
} cuda_device;

/* Where a failure was noticed (zc__cuda_fail_work). */
enum { AT_ENQUEUE = 0, AT_STREAM_WAIT = 1, AT_EVENT_WAIT = 2 };

/* Notes work enqueued on `stream` (for error messages). */
void zc__cuda_note(cuda_device *c, void *stream, const char *what, int dt, size_t n);
/* A failed runtime call, cleared from the thread's last error. */
zc_status zc__cuda_fail(cudaError_t e, const char *file, int line, int dev, const char *what);
/* A failure that may be an earlier execution fault surfacing: at a wait on
 * `stream` (the work noted on it is the suspect), at an event wait (the
 * event's stream is not known: every stream's work is), or at an enqueue
 * that found the context already broken (every stream's work is). */
zc_status zc__cuda_fail_work(cuda_device *c, cudaError_t e, const char *file, int line,
                             const char *what, void *stream, int at);
/* Makes the handle's GPU current on the calling thread unless this library
 * already did (cuda.c says why that is enough). */
zc_status zc__cuda_use(zc_device *d);
/* The alloc and free operations (zero-filled, counted). */
zc_status zc__cuda_alloc(zc_device *d, zc_mem_account *acct, zc_mem_category cat, size_t bytes,
                         const char *what, void **out);
void zc__cuda_free(zc_device *d, zc_mem_account *acct, zc_mem_category cat, void *p,
                   size_t bytes);

/* Fails with the context of the stream's work (a wait) when e is an error. */
#define CU_WAIT(c, call, what, stream)                                                     \
    do {                                                                                   \
        cudaError_t cu_e_ = (call);                                                        \
        if (cu_e_ != cudaSuccess)                                                          \
            return zc__cuda_fail_work((c), cu_e_, __FILE__, __LINE__, what, (stream), AT_STREAM_WAIT); \
        zc__optrack_waited(&(c)->track, (stream));                                         \
    } while (0)

/* An enqueue on `stream`: noted on success, explained on failure. */
#define CU_ENQ(c, call, what, stream, dt, n)                                               \
    do {                                                                                   \
        cudaError_t cu_e_ = (call);                                                        \
        if (cu_e_ != cudaSuccess)                                                          \
            return zc__cuda_fail_work((c), cu_e_, __FILE__, __LINE__, what, (stream), AT_ENQUEUE); \
        zc__cuda_note((c), (stream), what, (dt), (n));                                              \
    } while (0)

#define CU(dev, call, what)                                             \
    do {                                                                \
        cudaError_t cu_e_ = (call);                                     \
        if (cu_e_ != cudaSuccess)                                       \
            return zc__cuda_fail(cu_e_, __FILE__, __LINE__, (dev)->index, what); \
    } while (0)

static inline const zc_k_geometry *zc__cuda_geo(zc_device *d)
{
    return &((cuda_device *)d)->geo;
}

static inline int zc__cuda_float_dtype(zc_dtype dt)
{
    return dt == ZC_DTYPE_F32 || dt == ZC_DTYPE_F16 || dt == ZC_DTYPE_BF16;
}

/* The kernel operations (cuda_kernels.c), as device.h describes them. */
zc_status zc__cuda_cast(zc_device *d, void *dst, zc_dtype dst_dt, const void *src,
                        zc_dtype src_dt, size_t n, void *s);
zc_status zc__cuda_scale(zc_device *d, void *x, zc_dtype dt, size_t n, float a, void *s);
zc_status zc__cuda_accumulate(zc_device *d, float *acc, const void *src, zc_dtype src_dt,
                              size_t n, void *s);
zc_status zc__cuda_accumulate_rounded(zc_device *d, float *acc, const void *src,
                                      zc_dtype src_dt, zc_dtype acc_dt, size_t n, void *s);
zc_status zc__cuda_reduce_sum(zc_device *d, void *dst, const void *const *srcs, int nsrc,
                              zc_dtype dt, size_t n, void *s);
zc_status zc__cuda_sumsq(zc_device *d, const void *x, zc_dtype dt, size_t n, double *out,
                         void *s);
zc_status zc__cuda_nonfinite(zc_device *d, const void *x, zc_dtype dt, size_t n, int *flag,
                             void *s);
zc_status zc__cuda_sumsq_async(zc_device *d, const void *x, zc_dtype dt, size_t n,
                               double *scratch, double *out, void *s);
zc_status zc__cuda_nonfinite_async(zc_device *d, const void *x, zc_dtype dt, size_t n,
                                   int *flag, void *s);
zc_status zc__cuda_adam_lp(zc_device *d, const zc_adam_lp_shard *s, const zc_adam_coeffs *c,
                           void *stream);
zc_status zc__cuda_lion(zc_device *d, const zc_lion_shard *s, const zc_lion_coeffs *c,
                        void *stream);
zc_status zc__cuda_adagrad(zc_device *d, const zc_adagrad_shard *s, const zc_adagrad_coeffs *c,
                           void *stream);
zc_status zc__cuda_quant_int8(zc_device *d, const void *x, zc_dtype dt, size_t n, size_t groups,
                              int8_t *q, float *scales, void *stream);
zc_status zc__cuda_dequant_int8(zc_device *d, const int8_t *q, const float *scales, size_t n,
                                size_t groups, void *out, zc_dtype dt, void *stream);
zc_status zc__cuda_adam(zc_device *d, const zc_adam_shard *s, const zc_adam_coeffs *c,
                        void *stream);

#endif
