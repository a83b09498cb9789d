/* The CUDA device backend: cudaMalloc'd memory counted by the allocator,
 * CUDA streams and events, and the kernels of kernels/ through their C
 * launchers.
 *
 * Semantics next to the host backend (src/device/host.c), which stays the
 * reference:
 *   - Work is stream-ordered and asynchronous; only sumsq, nonfinite and
 *     stream_sync/event_sync wait. NULL stream = the legacy default stream.
 *     Streams are created blocking (they order with the legacy stream), so
 *     code that mixes NULL and created streams stays correct.
 *   - A D2H copy into pageable memory returns when the copy is done (CUDA
 *     rule); into pinned memory it is asynchronous like every other copy.
 *   - alloc zero-fills and waits for the fill, so memory is usable from any
 *     stream on return.
 *   - Every kernel follows its host twin operation for operation (see
 *     kernels/kernels.h), so results are meant to be bitwise equal.
 *
 * Each zc__device_cuda_open returns a separate handle (W ranks sharing one
 * GPU each open their own); a handle's scratch buffers (sumsq partials, the
 * nonfinite flag) are guarded by its mutex. Every call first makes the
 * handle's GPU current on the calling thread. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "base/log.h"
#include "device/device.h"
#include "kernels/kernels.h"

#if ZC_SUMSQ_BLOCK != ZC_K_SUMSQ_BLOCK
#error "kernels/kernels.h ZC_K_SUMSQ_BLOCK must equal device.h ZC_SUMSQ_BLOCK"
#endif

typedef struct cuda_device {
    zc_device base;
    pthread_mutex_t mu; /* guards the scratch buffers */
    double *d_partials; /* device: sumsq partials */
    double *h_partials; /* host copy of them */
    size_t partials_cap;
    int *d_flag;        /* device: nonfinite flag */
} cuda_device;

static zc_status cu_fail(cudaError_t e, const char *file, int line, int dev, const char *what)
{
    (void)cudaGetLastError(); /* clear a non-sticky error so the next call starts clean */
    return zc__error(ZC_ERR_DEVICE, file, line, "cuda:%d %s: %s (%s)", dev, what,
                     cudaGetErrorString(e), cudaGetErrorName(e));
}

#define CU(dev, call, what)                                             \
    do {                                                                \
        cudaError_t cu_e_ = (call);                                     \
        if (cu_e_ != cudaSuccess)                                       \
            return cu_fail(cu_e_, __FILE__, __LINE__, (dev)->index, what); \
    } while (0)

static zc_status use(zc_device *d)
{
    CU(d, cudaSetDevice(d->index), "cudaSetDevice");
    return ZC_OK;
}

static int is_float_dtype(zc_dtype dt)
{
    return dt == ZC_DTYPE_F32 || dt == ZC_DTYPE_F16 || dt == ZC_DTYPE_BF16;
}

/* ---- memory ------------------------------------------------------------ */

static zc_status cuda_alloc(zc_device *d, zc_mem_account *acct, zc_mem_category cat,
                            size_t bytes, const char *what, void **out)
{
    *out = NULL;
    if (bytes == 0)
        bytes = 1; /* a valid, freeable pointer for empty buffers, as on the host */
    if (!what)
        what = "allocation";
    if (zc__mem_should_fail(ZC_MEMKIND_DEVICE))
        return ZC_ERR(ZC_ERR_NO_MEMORY, "%s: injected failure allocating %zu bytes on cuda:%d",
                      what, bytes, d->index);
    ZC_CHECK(use(d));
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        (void)cudaGetLastError();
        (void)cudaMemGetInfo(&free_b, &total_b);
        return ZC_ERR(e == cudaErrorMemoryAllocation ? ZC_ERR_NO_MEMORY : ZC_ERR_DEVICE,
                      "%s: cannot allocate %zu bytes (%.1f MiB) on cuda:%d: %s "
                      "(%.1f MiB free of %.1f MiB)",
                      what, bytes, (double)bytes / 1048576.0, d->index, cudaGetErrorString(e),
                      (double)free_b / 1048576.0, (double)total_b / 1048576.0);
    }
    /* Zero-fill on the legacy stream and wait, so any stream may use it. */
    e = cudaMemsetAsync(p, 0, bytes, 0);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(0);
    if (e != cudaSuccess) {
        cudaFree(p);
        return cu_fail(e, __FILE__, __LINE__, d->index, "zero-filling a new allocation");
    }
    zc__mem_count(acct, ZC_MEMKIND_DEVICE, cat, (int64_t)bytes);
    *out = p;
    return ZC_OK;
}

static void cuda_free(zc_device *d, zc_mem_account *acct, zc_mem_category cat, void *p,
                      size_t bytes)
{
    if (!p)
        return;
    if (bytes == 0)
        bytes = 1;
    if (use(d) == ZC_OK) {
        cudaError_t e = cudaFree(p);
        if (e != cudaSuccess)
            ZC_LOGW("device", "cuda:%d cudaFree(%p, %zu bytes): %s", d->index, p, bytes,
                    cudaGetErrorString(e));
    }
    zc__mem_count(acct, ZC_MEMKIND_DEVICE, cat, -(int64_t)bytes);
}

/* ---- streams and events -------------------------------------------------- */

static zc_status cuda_stream_create(zc_device *d, void **s)
{
    *s = NULL;
    ZC_CHECK(use(d));
    cudaStream_t st;
    CU(d, cudaStreamCreate(&st), "cudaStreamCreate");
    *s = st;
    return ZC_OK;
}

static void cuda_stream_destroy(zc_device *d, void *s)
{
    if (s && use(d) == ZC_OK)
        (void)cudaStreamDestroy((cudaStream_t)s);
}

static zc_status cuda_stream_sync(zc_device *d, void *s)
{
    ZC_CHECK(use(d));
    CU(d, cudaStreamSynchronize((cudaStream_t)s), "cudaStreamSynchronize");
    return ZC_OK;
}

static zc_status cuda_event_create(zc_device *d, void **e)
{
    *e = NULL;
    ZC_CHECK(use(d));
    cudaEvent_t ev;
    CU(d, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
    *e = ev;
    return ZC_OK;
}

static void cuda_event_destroy(zc_device *d, void *e)
{
    if (e && use(d) == ZC_OK)
        (void)cudaEventDestroy((cudaEvent_t)e);
}

static zc_status cuda_event_record(zc_device *d, void *e, void *s)
{
    ZC_CHECK(use(d));
    CU(d, cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s), "cudaEventRecord");
    return ZC_OK;
}

static zc_status cuda_stream_wait_event(zc_device *d, void *s, void *e)
{
    ZC_CHECK(use(d));
    CU(d, cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0), "cudaStreamWaitEvent");
    return ZC_OK;
}

static zc_status cuda_event_sync(zc_device *d, void *e)
{
    ZC_CHECK(use(d));
    CU(d, cudaEventSynchronize((cudaEvent_t)e), "cudaEventSynchronize");
    return ZC_OK;
}

/* ---- data movement ------------------------------------------------------- */

static zc_status cuda_copy(zc_device *d, void *dst, const void *src, size_t bytes,
                           zc_copy_kind kind, void *s)
{
    static const enum cudaMemcpyKind kinds[] = {
        [ZC_COPY_H2D] = cudaMemcpyHostToDevice,
        [ZC_COPY_D2H] = cudaMemcpyDeviceToHost,
        [ZC_COPY_D2D] = cudaMemcpyDeviceToDevice,
        [ZC_COPY_H2H] = cudaMemcpyHostToHost,
    };
    if ((unsigned)kind > ZC_COPY_H2H)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "copy: unknown copy kind %d", (int)kind);
    if (!bytes || dst == src)
        return ZC_OK;
    ZC_CHECK(use(d));
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kinds[kind], (cudaStream_t)s);
    if (e != cudaSuccess) {
        char what[96];
        snprintf(what, sizeof what, "cudaMemcpyAsync(%zu bytes, kind %d)", bytes, (int)kind);
        return cu_fail(e, __FILE__, __LINE__, d->index, what);
    }
    return ZC_OK;
}

static zc_status cuda_memset0(zc_device *d, void *dst, size_t bytes, void *s)
{
    if (!bytes)
        return ZC_OK;
    ZC_CHECK(use(d));
    CU(d, cudaMemsetAsync(dst, 0, bytes, (cudaStream_t)s), "cudaMemsetAsync");
    return ZC_OK;
}

/* ---- kernels ------------------------------------------------------------- */

static zc_status launched(zc_device *d, cudaError_t e, const char *kernel, zc_dtype dt, size_t n)
{
    if (e == cudaSuccess)
        return ZC_OK;
    char what[96];
    snprintf(what, sizeof what, "%s kernel (%s, %zu elements)", kernel, zc_dtype_name(dt), n);
    return cu_fail(e, __FILE__, __LINE__, d->index, what);
}

static zc_status cuda_cast(zc_device *d, void *dst, zc_dtype dst_dt, const void *src,
                           zc_dtype src_dt, size_t n, void *s)
{
    if (!is_float_dtype(dst_dt) || !is_float_dtype(src_dt))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "cast: unsupported dtypes %s -> %s",
                      zc_dtype_name(src_dt), zc_dtype_name(dst_dt));
    if (dst_dt == src_dt)
        return cuda_copy(d, dst, src, n * zc_dtype_size(dst_dt), ZC_COPY_D2D, s);
    ZC_CHECK(use(d));
    return launched(d, zc_k_cast(dst, dst_dt, src, src_dt, n, (cudaStream_t)s), "cast", src_dt, n);
}

static zc_status cuda_scale(zc_device *d, void *x, zc_dtype dt, size_t n, float a, void *s)
{
    if (!is_float_dtype(dt) && dt != ZC_DTYPE_F64)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "scale: unsupported dtype %s", zc_dtype_name(dt));
    ZC_CHECK(use(d));
    return launched(d, zc_k_scale(x, dt, n, a, (cudaStream_t)s), "scale", dt, n);
}

static zc_status cuda_accumulate(zc_device *d, float *acc, const void *src, zc_dtype src_dt,
                                 size_t n, void *s)
{
    if (!is_float_dtype(src_dt))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "accumulate: unsupported dtype %s",
                      zc_dtype_name(src_dt));
    ZC_CHECK(use(d));
    return launched(d, zc_k_accumulate(acc, src, src_dt, n, (cudaStream_t)s), "accumulate",
                    src_dt, n);
}

static zc_status cuda_reduce_sum(zc_device *d, void *dst, const void *const *srcs, int nsrc,
                                 zc_dtype dt, size_t n, void *s)
{
    if (nsrc < 1 || nsrc > ZC_K_MAX_REDUCE_SRCS)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "reduce_sum: nsrc = %d (the CUDA kernel takes 1..%d)",
                      nsrc, ZC_K_MAX_REDUCE_SRCS);
    if (!is_float_dtype(dt) && dt != ZC_DTYPE_F64 && dt != ZC_DTYPE_I32)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "reduce_sum: unsupported dtype %d", (int)dt);
    ZC_CHECK(use(d));
    return launched(d, zc_k_reduce_sum(dst, srcs, nsrc, dt, n, (cudaStream_t)s), "reduce_sum",
                    dt, n);
}

/* Grows the partials scratch to hold nb doubles; called with c->mu held. */
static zc_status ensure_partials(cuda_device *c, size_t nb)
{
    if (nb <= c->partials_cap)
        return ZC_OK;
    size_t cap = nb < 1024 ? 1024 : nb;
    double *dp = NULL, *hp = NULL;
    zc_status rc = cuda_alloc(&c->base, NULL, ZC_MEM_BUFFERS, cap * sizeof(double),
                              "sum-of-squares partials", (void **)&dp);
    if (rc != ZC_OK)
        return rc;
    rc = zc__host_alloc(NULL, ZC_MEM_BUFFERS, cap * sizeof(double), "sum-of-squares partials",
                        (void **)&hp);
    if (rc != ZC_OK) {
        cuda_free(&c->base, NULL, ZC_MEM_BUFFERS, dp, cap * sizeof(double));
        return rc;
    }
    if (c->partials_cap) {
        cuda_free(&c->base, NULL, ZC_MEM_BUFFERS, c->d_partials, c->partials_cap * sizeof(double));
        zc__host_free(NULL, ZC_MEM_BUFFERS, c->h_partials, c->partials_cap * sizeof(double));
    }
    c->d_partials = dp;
    c->h_partials = hp;
    c->partials_cap = cap;
    return ZC_OK;
}

static zc_status sumsq_locked(cuda_device *c, const void *x, zc_dtype dt, size_t n, double *out,
                              cudaStream_t st)
{
    zc_device *d = &c->base;
    size_t nb = zc_k_sumsq_nblocks(n);
    ZC_CHECK(ensure_partials(c, nb));
    ZC_CHECK(launched(d, zc_k_sumsq_partials(x, dt, n, c->d_partials, st), "sumsq", dt, n));
    CU(d, cudaMemcpyAsync(c->h_partials, c->d_partials, nb * sizeof(double),
                          cudaMemcpyDeviceToHost, st), "copying sumsq partials");
    CU(d, cudaStreamSynchronize(st), "cudaStreamSynchronize after sumsq");
    /* Partials in block order, as the host backend adds them. */
    double total = 0.0;
    for (size_t b = 0; b < nb; b++)
        total += c->h_partials[b];
    *out = total;
    return ZC_OK;
}

static zc_status cuda_sumsq(zc_device *d, const void *x, zc_dtype dt, size_t n, double *out,
                            void *s)
{
    if (!is_float_dtype(dt))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "sumsq: unsupported dtype %s", zc_dtype_name(dt));
    *out = 0.0;
    if (n == 0)
        return ZC_OK;
    ZC_CHECK(use(d));
    cuda_device *c = (cuda_device *)d;
    pthread_mutex_lock(&c->mu);
    zc_status rc = sumsq_locked(c, x, dt, n, out, (cudaStream_t)s);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static zc_status nonfinite_locked(cuda_device *c, const void *x, zc_dtype dt, size_t n,
                                  int *flag, cudaStream_t st)
{
    zc_device *d = &c->base;
    if (!c->d_flag)
        ZC_CHECK(cuda_alloc(d, NULL, ZC_MEM_BUFFERS, sizeof(int), "nonfinite flag",
                            (void **)&c->d_flag));
    int h = 0;
    CU(d, cudaMemsetAsync(c->d_flag, 0, sizeof(int), st), "clearing the nonfinite flag");
    ZC_CHECK(launched(d, zc_k_nonfinite(x, dt, n, c->d_flag, st), "nonfinite", dt, n));
    CU(d, cudaMemcpyAsync(&h, c->d_flag, sizeof(int), cudaMemcpyDeviceToHost, st),
       "copying the nonfinite flag");
    CU(d, cudaStreamSynchronize(st), "cudaStreamSynchronize after nonfinite");
    *flag = h != 0;
    return ZC_OK;
}

static zc_status cuda_nonfinite(zc_device *d, const void *x, zc_dtype dt, size_t n, int *flag,
                                void *s)
{
    if (!is_float_dtype(dt))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "nonfinite: unsupported dtype %s", zc_dtype_name(dt));
    *flag = 0;
    if (n == 0)
        return ZC_OK;
    ZC_CHECK(use(d));
    cuda_device *c = (cuda_device *)d;
    pthread_mutex_lock(&c->mu);
    zc_status rc = nonfinite_locked(c, x, dt, n, flag, (cudaStream_t)s);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static zc_status cuda_adam(zc_device *d, const zc_adam_shard *s, const zc_adam_coeffs *c,
                           void *stream)
{
    if (!s || !c)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "cuda adam: NULL shard or coefficients");
    if (s->n == 0)
        return ZC_OK;
    if (!s->master || !s->m || !s->v || !s->grad)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "cuda adam: NULL buffer in a shard of %zu elements",
                      s->n);
    if (!is_float_dtype(s->grad_dtype))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "cuda adam: gradient dtype %s is not fp32/fp16/bf16",
                      zc_dtype_name(s->grad_dtype));
    if (s->param_out && !is_float_dtype(s->param_out_dtype))
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "cuda adam: parameter copy dtype %s is not fp32/fp16/bf16",
                      zc_dtype_name(s->param_out_dtype));
    ZC_CHECK(use(d));
    return launched(d, zc_k_adam(s, c, (cudaStream_t)stream), "adam", s->grad_dtype, s->n);
}

static void cuda_destroy(zc_device *d)
{
    if (!d)
        return;
    cuda_device *c = (cuda_device *)d;
    if (c->partials_cap) {
        cuda_free(d, NULL, ZC_MEM_BUFFERS, c->d_partials, c->partials_cap * sizeof(double));
        zc__host_free(NULL, ZC_MEM_BUFFERS, c->h_partials, c->partials_cap * sizeof(double));
    }
    if (c->d_flag)
        cuda_free(d, NULL, ZC_MEM_BUFFERS, c->d_flag, sizeof(int));
    pthread_mutex_destroy(&c->mu);
    zc__host_free(NULL, ZC_MEM_OTHER, c, sizeof *c);
}

static const zc_device_ops cuda_ops = {
    .name = "cuda",
    .alloc = cuda_alloc,
    .free = cuda_free,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_sync = cuda_stream_sync,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .stream_wait_event = cuda_stream_wait_event,
    .event_sync = cuda_event_sync,
    .copy = cuda_copy,
    .memset0 = cuda_memset0,
    .cast = cuda_cast,
    .scale = cuda_scale,
    .accumulate = cuda_accumulate,
    .reduce_sum = cuda_reduce_sum,
    .sumsq = cuda_sumsq,
    .nonfinite = cuda_nonfinite,
    .adam = cuda_adam,
    .destroy = cuda_destroy,
};

/* ---- discovery ------------------------------------------------------------ */

int zc__device_cuda_count(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        /* No driver, no device, or a broken install: the host path it is. */
        (void)cudaGetLastError();
        ZC_LOGD("device", "cudaGetDeviceCount: %s", cudaGetErrorString(e));
        return 0;
    }
    return n;
}

/* Why CUDA is unusable, for the error message. */
static const char *count_reason(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    (void)cudaGetLastError();
    return e == cudaSuccess ? "no CUDA device is visible" : cudaGetErrorString(e);
}

zc_status zc__device_cuda_open(int index, zc_device **out)
{
    *out = NULL;
    int count = zc__device_cuda_count();
    if (count <= 0)
        return ZC_ERR(ZC_ERR_UNSUPPORTED, "device 'cuda' requested but unusable: %s",
                      count_reason());
    char why[256] = "zc_engine_options.device_index";
    if (index < 0) {
        /* -1: the launcher's local rank, read by the one function the NCCL
         * communicator uses too (src/device/select.c). */
        ZC_CHECK(zc__device_pick_from_env(count, &index, why, sizeof why));
        ZC_LOGD("device", "cuda:%d chosen by %s", index, why);
    } else if (index >= count) {
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s = %d but only %d CUDA device%s visible", why, index,
                      count, count == 1 ? " is" : "s are");
    }

    cuda_device *c = NULL;
    ZC_CHECK(zc__host_alloc(NULL, ZC_MEM_OTHER, sizeof *c, "cuda device handle", (void **)&c));
    c->base.ops = &cuda_ops;
    c->base.mem_kind = ZC_MEMKIND_DEVICE;
    c->base.index = index;
    pthread_mutex_init(&c->mu, NULL);
    zc_status rc = use(&c->base);
    if (rc == ZC_OK) {
        struct cudaDeviceProp prop;
        if (cudaGetDeviceProperties(&prop, index) == cudaSuccess)
            ZC_LOGD("device", "cuda:%d %s, sm_%d%d, %d SMs, %.1f GiB", index, prop.name,
                    prop.major, prop.minor, prop.multiProcessorCount,
                    (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
        *out = &c->base;
        return ZC_OK;
    }
    pthread_mutex_destroy(&c->mu);
    zc__host_free(NULL, ZC_MEM_OTHER, c, sizeof *c);
    return rc;
}
