/* The CUDA device backend: cudaMalloc'd memory counted by the allocator,
 * CUDA streams and events, and the kernels of kernels/ through their C
 * launchers.
 *
 * Semantics next to the host backend (src/device/host.c), which stays the
 * reference:
 *   - Work is stream-ordered and asynchronous; only alloc (its zero-fill),
 *     sumsq, nonfinite and stream_sync/event_sync wait. NULL stream = the
 *     legacy default stream. stream_create makes blocking streams (they order
 *     with the legacy stream, so code that mixes NULL and created streams
 *     stays correct); stream_create_nonblocking makes streams that do not,
 *     ordered only by events.
 *   - Every enqueued operation is noted against its stream (what, dtype,
 *     elements; the first and the last since the stream's last successful
 *     wait, and how many). A fault of enqueued work surfaces at a later wait,
 *     or at any call once the context is broken; the error then names that
 *     work instead of blaming the call that happened to notice.
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
#include "device/optrack.h"
#include "kernels/kernels.h"

typedef struct cuda_device {
    zc_device base;
    pthread_mutex_t mu; /* guards the scratch buffers */
    double *d_partials; /* device: sumsq level-1 sums, then the total */
    size_t partials_cap;
    int *d_flag;        /* device: nonfinite flag */

    /* Work enqueued per stream since its last wait, for error messages. Its
     * mutex is taken inside mu (sumsq notes its kernels holding mu) and
     * never held across a CUDA call. */
    zc_optrack track;
} cuda_device;

/* Errors a kernel's execution raises, reported later by whichever call
 * notices; they break the context (every later call fails the same way). */
static int is_execution_fault(cudaError_t e)
{
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
        return 1;
    default:
        return 0;
    }
}

static void note(cuda_device *c, void *stream, const char *what, int dt, size_t n)
{
    zc__optrack_note(&c->track, stream, what, dt, n);
}

static zc_status cu_fail(cudaError_t e, const char *file, int line, int dev, const char *what)
{
    (void)cudaGetLastError(); /* clear a non-sticky error so the next call starts clean */
    return zc__error(ZC_ERR_DEVICE, file, line, "cuda:%d %s: %s (%s)", dev, what,
                     cudaGetErrorString(e), cudaGetErrorName(e));
}

enum { AT_ENQUEUE = 0, AT_STREAM_WAIT = 1, AT_EVENT_WAIT = 2 };

/* A failure that may be an earlier execution fault surfacing: at a wait on
 * `stream` (the work noted on it is the suspect), at an event wait (the
 * event's stream is not known: every stream's work is), or at an enqueue
 * that found the context already broken (every stream's work is). */
static zc_status cu_fail_work(cuda_device *c, cudaError_t e, const char *file, int line,
                              const char *what, void *stream, int at)
{
    (void)cudaGetLastError();
    int waiting = at != AT_ENQUEUE;
    char work[1024];
    if (waiting || is_execution_fault(e))
        zc__optrack_describe(&c->track, stream, at == AT_STREAM_WAIT && !is_execution_fault(e),
                             work, sizeof work);
    else
        work[0] = '\0';
    return zc__error(ZC_ERR_DEVICE, file, line, "cuda:%d %s: %s (%s)%s%s", c->base.index, what,
                     cudaGetErrorString(e), cudaGetErrorName(e),
                     !waiting && is_execution_fault(e)
                         ? " - the device had already failed running earlier work"
                         : "",
                     work);
}

/* Fails with the context of the stream's work (a wait) when e is an error. */
#define CU_WAIT(c, call, what, stream)                                                     \
    do {                                                                                   \
        cudaError_t cu_e_ = (call);                                                        \
        if (cu_e_ != cudaSuccess)                                                          \
            return cu_fail_work((c), cu_e_, __FILE__, __LINE__, what, (stream), AT_STREAM_WAIT); \
        zc__optrack_waited(&(c)->track, (stream));                                         \
    } while (0)

/* An enqueue on `stream`: noted on success, explained on failure. */
#define CU_ENQ(c, call, what, stream, dt, n)                                               \
    do {                                                                                   \
        cudaError_t cu_e_ = (call);                                                        \
        if (cu_e_ != cudaSuccess)                                                          \
            return cu_fail_work((c), cu_e_, __FILE__, __LINE__, what, (stream), AT_ENQUEUE); \
        note((c), (stream), what, (dt), (n));                                              \
    } while (0)

#define CU(dev, call, what)                                             \
    do {                                                                \
        cudaError_t cu_e_ = (call);                                     \
        if (cu_e_ != cudaSuccess)                                       \
            return cu_fail(cu_e_, __FILE__, __LINE__, (dev)->index, what); \
    } while (0)

/* Every call starts here; in a context an earlier fault broke, this is
 * usually where the fault shows, so it gets the enqueue-time explanation. */
static zc_status use(zc_device *d)
{
    cudaError_t e = cudaSetDevice(d->index);
    if (e != cudaSuccess)
        return cu_fail_work((cuda_device *)d, e, __FILE__, __LINE__, "cudaSetDevice", NULL,
                            AT_ENQUEUE);
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

static zc_status cuda_stream_create_nonblocking(zc_device *d, void **s)
{
    *s = NULL;
    ZC_CHECK(use(d));
    cudaStream_t st;
    CU(d, cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking),
       "cudaStreamCreateWithFlags(cudaStreamNonBlocking)");
    *s = st;
    return ZC_OK;
}

static void cuda_stream_destroy(zc_device *d, void *s)
{
    if (!s)
        return;
    /* A later stream may get the same handle: its notes must start empty. */
    zc__optrack_forget(&((cuda_device *)d)->track, s);
    if (use(d) == ZC_OK)
        (void)cudaStreamDestroy((cudaStream_t)s);
}

static zc_status cuda_stream_sync(zc_device *d, void *s)
{
    ZC_CHECK(use(d));
    CU_WAIT((cuda_device *)d, cudaStreamSynchronize((cudaStream_t)s), "cudaStreamSynchronize",
            s);
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
    CU_ENQ((cuda_device *)d, cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s),
           "cudaEventRecord", s, -1, 0);
    return ZC_OK;
}

static zc_status cuda_stream_wait_event(zc_device *d, void *s, void *e)
{
    ZC_CHECK(use(d));
    CU_ENQ((cuda_device *)d, cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0),
           "cudaStreamWaitEvent", s, -1, 0);
    return ZC_OK;
}

static zc_status cuda_event_sync(zc_device *d, void *e)
{
    ZC_CHECK(use(d));
    cudaError_t ce = cudaEventSynchronize((cudaEvent_t)e);
    if (ce != cudaSuccess)
        return cu_fail_work((cuda_device *)d, ce, __FILE__, __LINE__, "cudaEventSynchronize",
                            NULL, AT_EVENT_WAIT);
    return ZC_OK;
}

static zc_status cuda_event_query(zc_device *d, void *e, int *done)
{
    *done = 0;
    ZC_CHECK(use(d));
    cudaError_t ce = cudaEventQuery((cudaEvent_t)e);
    if (ce == cudaSuccess) {
        *done = 1;
        return ZC_OK;
    }
    if (ce == cudaErrorNotReady) {
        /* Not an error, but the runtime records it as the thread's last
         * error; clear it so no later cudaGetLastError() blames other work
         * for it. */
        (void)cudaGetLastError();
        return ZC_OK;
    }
    return cu_fail_work((cuda_device *)d, ce, __FILE__, __LINE__, "cudaEventQuery", NULL,
                        AT_EVENT_WAIT);
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
    static const char *const names[] = {
        [ZC_COPY_H2D] = "cudaMemcpyAsync H2D",
        [ZC_COPY_D2H] = "cudaMemcpyAsync D2H",
        [ZC_COPY_D2D] = "cudaMemcpyAsync D2D",
        [ZC_COPY_H2H] = "cudaMemcpyAsync H2H",
    };
    ZC_CHECK(use(d));
    /* Pageable host memory is staged by the runtime (H2D returns once staged,
     * D2H once done); pinned memory is copied by the DMA engine while this
     * returns at once. Either way the copy is ordered on s. */
    CU_ENQ((cuda_device *)d, cudaMemcpyAsync(dst, src, bytes, kinds[kind], (cudaStream_t)s),
           names[kind], s, -1, bytes);
    return ZC_OK;
}

static zc_status cuda_memset0(zc_device *d, void *dst, size_t bytes, void *s)
{
    if (!bytes)
        return ZC_OK;
    ZC_CHECK(use(d));
    CU_ENQ((cuda_device *)d, cudaMemsetAsync(dst, 0, bytes, (cudaStream_t)s), "cudaMemsetAsync",
           s, -1, bytes);
    return ZC_OK;
}

/* ---- kernels ------------------------------------------------------------- */

/* The kernel launchers return their own launch's status (kernels/kernels.h):
 * an error here is this launch's, or a context that earlier work broke. */
static zc_status launched(zc_device *d, cudaError_t e, const char *kernel, zc_dtype dt, size_t n,
                          void *stream)
{
    cuda_device *c = (cuda_device *)d;
    if (e == cudaSuccess) {
        note(c, stream, kernel, (int)dt, n);
        return ZC_OK;
    }
    char what[128];
    snprintf(what, sizeof what, "launching %s (%s, %zu elements)", kernel, zc_dtype_name(dt), n);
    return cu_fail_work(c, e, __FILE__, __LINE__, what, stream, AT_ENQUEUE);
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
    return launched(d, zc_k_cast(dst, dst_dt, src, src_dt, n, (cudaStream_t)s), "cast kernel", src_dt, n, s);
}

static zc_status cuda_scale(zc_device *d, void *x, zc_dtype dt, size_t n, float a, void *s)
{
    if (!is_float_dtype(dt) && dt != ZC_DTYPE_F64)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "scale: unsupported dtype %s", zc_dtype_name(dt));
    ZC_CHECK(use(d));
    return launched(d, zc_k_scale(x, dt, n, a, (cudaStream_t)s), "scale kernel", dt, n, s);
}

static zc_status cuda_accumulate(zc_device *d, float *acc, const void *src, zc_dtype src_dt,
                                 size_t n, void *s)
{
    if (!is_float_dtype(src_dt))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "accumulate: unsupported dtype %s",
                      zc_dtype_name(src_dt));
    ZC_CHECK(use(d));
    return launched(d, zc_k_accumulate(acc, src, src_dt, n, (cudaStream_t)s), "accumulate kernel",
                    src_dt, n, s);
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
    return launched(d, zc_k_reduce_sum(dst, srcs, nsrc, dt, n, (cudaStream_t)s), "reduce_sum kernel",
                    dt, n, s);
}

/* Grows the partials scratch to hold nb doubles; called with c->mu held. */
static zc_status ensure_partials(cuda_device *c, size_t nb)
{
    if (nb <= c->partials_cap)
        return ZC_OK;
    size_t cap = nb < 1024 ? 1024 : nb;
    double *dp = NULL;
    ZC_CHECK(cuda_alloc(&c->base, NULL, ZC_MEM_BUFFERS, cap * sizeof(double),
                        "sum-of-squares partials", (void **)&dp));
    if (c->partials_cap)
        cuda_free(&c->base, NULL, ZC_MEM_BUFFERS, c->d_partials, c->partials_cap * sizeof(double));
    c->d_partials = dp;
    c->partials_cap = cap;
    return ZC_OK;
}

/* The two kernels of sumsq_async into the handle's scratch (level-1 sums,
 * then the total after them), and one double back. */
static zc_status sumsq_locked(cuda_device *c, const void *x, zc_dtype dt, size_t n, double *out,
                              cudaStream_t st)
{
    zc_device *d = &c->base;
    size_t ng = zc__sumsq_ngroups(n);
    ZC_CHECK(ensure_partials(c, ng + 1));
    double *total = c->d_partials + ng;
    ZC_CHECK(launched(d, zc_k_sumsq_groups(x, dt, n, c->d_partials, st), "sumsq kernel", dt, n,
                      st));
    ZC_CHECK(launched(d, zc_k_sumsq_tree(c->d_partials, ng, total, st), "sumsq tree kernel",
                      ZC_DTYPE_F64, ng, st));
    double v = 0.0;
    CU_ENQ(c, cudaMemcpyAsync(&v, total, sizeof v, cudaMemcpyDeviceToHost, st),
           "copying the sum of squares", st, -1, sizeof v);
    CU_WAIT(c, cudaStreamSynchronize(st), "cudaStreamSynchronize after sumsq", st);
    *out = v;
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
    CU_ENQ(c, cudaMemsetAsync(c->d_flag, 0, sizeof(int), st), "clearing the nonfinite flag", st,
           -1, sizeof(int));
    ZC_CHECK(launched(d, zc_k_nonfinite(x, dt, n, c->d_flag, st), "nonfinite kernel", dt, n, st));
    CU_ENQ(c, cudaMemcpyAsync(&h, c->d_flag, sizeof(int), cudaMemcpyDeviceToHost, st),
           "copying the nonfinite flag", st, -1, sizeof(int));
    CU_WAIT(c, cudaStreamSynchronize(st), "cudaStreamSynchronize after nonfinite", st);
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

/* No handle scratch and no lock: the caller's scratch and result live on
 * the device and are ordered by its stream, so any number of streams can run
 * this at once. */
static zc_status cuda_sumsq_async(zc_device *d, const void *x, zc_dtype dt, size_t n,
                                  double *scratch, double *out, void *s)
{
    if (!is_float_dtype(dt))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "sumsq_async: unsupported dtype %s",
                      zc_dtype_name(dt));
    if (!out || (n && !scratch))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "sumsq_async: NULL %s", out ? "scratch" : "out");
    ZC_CHECK(use(d));
    size_t ng = zc__sumsq_ngroups(n);
    if (n)
        ZC_CHECK(launched(d, zc_k_sumsq_groups(x, dt, n, scratch, (cudaStream_t)s),
                          "sumsq kernel", dt, n, s));
    /* The tree over the level-1 sums; n = 0 still writes +0.0 so *out is
     * defined on the stream. */
    return launched(d, zc_k_sumsq_tree(scratch, ng, out, (cudaStream_t)s), "sumsq tree kernel",
                    ZC_DTYPE_F64, ng, s);
}

static zc_status cuda_nonfinite_async(zc_device *d, const void *x, zc_dtype dt, size_t n,
                                      int *flag, void *s)
{
    if (!is_float_dtype(dt))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "nonfinite_async: unsupported dtype %s",
                      zc_dtype_name(dt));
    if (!flag)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "nonfinite_async: flag is NULL");
    if (n == 0)
        return ZC_OK;
    ZC_CHECK(use(d));
    return launched(d, zc_k_nonfinite(x, dt, n, flag, (cudaStream_t)s), "nonfinite kernel", dt,
                    n, s);
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
    return launched(d, zc_k_adam(s, c, (cudaStream_t)stream), "adam kernel",
                    s->grad_dtype, s->n, stream);
}

static zc_status cuda_mem_info(zc_device *d, size_t *free_bytes, size_t *total_bytes)
{
    ZC_CHECK(use(d));
    size_t f = 0, t = 0;
    CU(d, cudaMemGetInfo(&f, &t), "cudaMemGetInfo");
    *free_bytes = f;
    *total_bytes = t;
    return ZC_OK;
}

static void cuda_destroy(zc_device *d)
{
    if (!d)
        return;
    cuda_device *c = (cuda_device *)d;
    if (c->partials_cap)
        cuda_free(d, NULL, ZC_MEM_BUFFERS, c->d_partials, c->partials_cap * sizeof(double));
    if (c->d_flag)
        cuda_free(d, NULL, ZC_MEM_BUFFERS, c->d_flag, sizeof(int));
    zc__optrack_destroy(&c->track);
    pthread_mutex_destroy(&c->mu);
    zc__host_free(NULL, ZC_MEM_OTHER, c, sizeof *c);
}

static const zc_device_ops cuda_ops = {
    .name = "cuda",
    .alloc = cuda_alloc,
    .free = cuda_free,
    .stream_create = cuda_stream_create,
    .stream_create_nonblocking = cuda_stream_create_nonblocking,
    .stream_destroy = cuda_stream_destroy,
    .stream_sync = cuda_stream_sync,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .stream_wait_event = cuda_stream_wait_event,
    .event_sync = cuda_event_sync,
    .event_query = cuda_event_query,
    .copy = cuda_copy,
    .memset0 = cuda_memset0,
    .cast = cuda_cast,
    .scale = cuda_scale,
    .accumulate = cuda_accumulate,
    .reduce_sum = cuda_reduce_sum,
    .sumsq = cuda_sumsq,
    .nonfinite = cuda_nonfinite,
    .sumsq_async = cuda_sumsq_async,
    .nonfinite_async = cuda_nonfinite_async,
    .adam = cuda_adam,
    .mem_info = cuda_mem_info,
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
    zc__optrack_init(&c->track);
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
    zc__optrack_destroy(&c->track);
    pthread_mutex_destroy(&c->mu);
    zc__host_free(NULL, ZC_MEM_OTHER, c, sizeof *c);
    return rc;
}
