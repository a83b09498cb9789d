/* The CUDA device backend: cudaMalloc'd memory counted by the allocator,
 * CUDA streams and events, and the kernels of kernels/ through their C
 * launchers (cuda_kernels.c; cuda_internal.h is what the two share).
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
 *   - alloc zero-fills on the handle's own non-blocking stream and waits for
 *     that fill's event alone (not the legacy default stream, which would
 *     wait for every blocking stream's work too), so memory is usable from
 *     any stream on return.
 *   - A launch asks the runtime nothing but the launch: the grids come from
 *     the geometry queried when the handle opens (SM count, each kernel's
 *     occupancy: zc_k_geometry), and the handle's GPU is made current on a
 *     thread once, not per call (see zc__cuda_use()).
 *   - Every kernel follows its host twin operation for operation (see
 *     kernels/kernels.h), so results are meant to be bitwise equal.
 *
 * Each zc__device_cuda_open returns a separate handle (W ranks sharing one
 * GPU each open their own); a handle's scratch buffers (sumsq partials, the
 * nonfinite flag) are guarded by its mutex. Every call runs with the
 * handle's GPU current on the calling thread. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "base/log.h"
#include "device/cuda_internal.h"

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

void zc__cuda_note(cuda_device *c, void *stream, const char *what, int dt, size_t n)
{
    zc__optrack_note(&c->track, stream, what, dt, n);
}

zc_status zc__cuda_fail(cudaError_t e, const char *file, int line, int dev, const char *what)
{
    (void)cudaGetLastError(); /* clear a non-sticky error so the next call starts clean */
    return zc__error(ZC_ERR_DEVICE, file, line, "cuda:%d %s: %s (%s)", dev, what,
                     cudaGetErrorString(e), cudaGetErrorName(e));
}

/* A failure that may be an earlier execution fault surfacing: at a wait on
 * `stream` (the work noted on it is the suspect), at an event wait (the
 * event's stream is not known: every stream's work is), or at an enqueue
 * that found the context already broken (every stream's work is). */
zc_status zc__cuda_fail_work(cuda_device *c, cudaError_t e, const char *file, int line,
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

/* The CUDA device this library last made current on the calling thread
 * (-1: none yet). cudaSetDevice is then skipped while the thread stays on
 * one GPU, so a launch costs no runtime call but itself. The engine calls
 * make_current at each of its public entries, so a caller that switches the
 * thread's device between two zeroc calls is followed. */
static _Thread_local int thread_current = -1;

/* Every call starts here; in a context an earlier fault broke, this is
 * usually where the fault shows, so it gets the enqueue-time explanation. */
zc_status zc__cuda_use(zc_device *d)
{
    if (thread_current == d->index)
        return ZC_OK;
    cudaError_t e = cudaSetDevice(d->index);
    if (e != cudaSuccess) {
        thread_current = -1;
        return zc__cuda_fail_work((cuda_device *)d, e, __FILE__, __LINE__, "cudaSetDevice", NULL,
                            AT_ENQUEUE);
    }
    thread_current = d->index;
    return ZC_OK;
}

static zc_status cuda_make_current(zc_device *d)
{
    thread_current = -1;
    return zc__cuda_use(d);
}

/* ---- memory ------------------------------------------------------------ */

zc_status zc__cuda_alloc(zc_device *d, zc_mem_account *acct, zc_mem_category cat, size_t bytes,
                         const char *what, void **out)
{
    *out = NULL;
    if (bytes == 0)
        bytes = 1; /* a valid, freeable pointer for empty buffers, as on the host */
    if (!what)
        what = "allocation";
    if (zc__mem_should_fail(ZC_MEMKIND_DEVICE))
        return ZC_ERR(ZC_ERR_NO_MEMORY, "%s: injected failure allocating %zu bytes on cuda:%d",
                      what, bytes, d->index);
    ZC_CHECK(zc__cuda_use(d));
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
    /* Zero-fill on the handle's non-blocking stream and wait for this fill's
     * event alone, so any stream may use the memory: the legacy default
     * stream would also wait for the work of every blocking stream of the
     * device (the other ranks' on a shared GPU). */
    cudaEvent_t filled = NULL;
    e = cudaEventCreateWithFlags(&filled, cudaEventDisableTiming);
    if (e == cudaSuccess) {
        e = cudaMemsetAsync(p, 0, bytes, ((cuda_device *)d)->fill);
        if (e == cudaSuccess)
            e = cudaEventRecord(filled, ((cuda_device *)d)->fill);
        if (e == cudaSuccess)
            e = cudaEventSynchronize(filled);
        (void)cudaEventDestroy(filled);
    }
    if (e != cudaSuccess) {
        cudaFree(p);
        return zc__cuda_fail(e, __FILE__, __LINE__, d->index, "zero-filling a new allocation");
    }
    zc__mem_count(acct, ZC_MEMKIND_DEVICE, cat, (int64_t)bytes);
    *out = p;
    return ZC_OK;
}

void zc__cuda_free(zc_device *d, zc_mem_account *acct, zc_mem_category cat, void *p,
                    size_t bytes)
{
    if (!p)
        return;
    if (bytes == 0)
        bytes = 1;
    if (zc__cuda_use(d) == ZC_OK) {
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
    ZC_CHECK(zc__cuda_use(d));
    cudaStream_t st;
    CU(d, cudaStreamCreate(&st), "cudaStreamCreate");
    *s = st;
    return ZC_OK;
}

static zc_status cuda_stream_create_nonblocking(zc_device *d, void **s)
{
    *s = NULL;
    ZC_CHECK(zc__cuda_use(d));
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
    if (zc__cuda_use(d) == ZC_OK)
        (void)cudaStreamDestroy((cudaStream_t)s);
}

static zc_status cuda_stream_sync(zc_device *d, void *s)
{
    ZC_CHECK(zc__cuda_use(d));
    CU_WAIT((cuda_device *)d, cudaStreamSynchronize((cudaStream_t)s), "cudaStreamSynchronize",
            s);
    return ZC_OK;
}

static zc_status cuda_event_create(zc_device *d, void **e)
{
    *e = NULL;
    ZC_CHECK(zc__cuda_use(d));
    cudaEvent_t ev;
    CU(d, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
    *e = ev;
    return ZC_OK;
}

static void cuda_event_destroy(zc_device *d, void *e)
{
    if (e && zc__cuda_use(d) == ZC_OK)
        (void)cudaEventDestroy((cudaEvent_t)e);
}

static zc_status cuda_event_record(zc_device *d, void *e, void *s)
{
    ZC_CHECK(zc__cuda_use(d));
    CU_ENQ((cuda_device *)d, cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s),
           "cudaEventRecord", s, -1, 0);
    return ZC_OK;
}

static zc_status cuda_stream_wait_event(zc_device *d, void *s, void *e)
{
    ZC_CHECK(zc__cuda_use(d));
    CU_ENQ((cuda_device *)d, cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0),
           "cudaStreamWaitEvent", s, -1, 0);
    return ZC_OK;
}

static zc_status cuda_event_sync(zc_device *d, void *e)
{
    ZC_CHECK(zc__cuda_use(d));
    cudaError_t ce = cudaEventSynchronize((cudaEvent_t)e);
    if (ce != cudaSuccess)
        return zc__cuda_fail_work((cuda_device *)d, ce, __FILE__, __LINE__, "cudaEventSynchronize",
                            NULL, AT_EVENT_WAIT);
    return ZC_OK;
}

static zc_status cuda_event_query(zc_device *d, void *e, int *done)
{
    *done = 0;
    ZC_CHECK(zc__cuda_use(d));
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
    return zc__cuda_fail_work((cuda_device *)d, ce, __FILE__, __LINE__, "cudaEventQuery", NULL,
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
    ZC_CHECK(zc__cuda_use(d));
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
    ZC_CHECK(zc__cuda_use(d));
    CU_ENQ((cuda_device *)d, cudaMemsetAsync(dst, 0, bytes, (cudaStream_t)s), "cudaMemsetAsync",
           s, -1, bytes);
    return ZC_OK;
}

static zc_status cuda_mem_info(zc_device *d, size_t *free_bytes, size_t *total_bytes)
{
    ZC_CHECK(zc__cuda_use(d));
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
        zc__cuda_free(d, NULL, ZC_MEM_BUFFERS, c->d_partials, c->partials_cap * sizeof(double));
    if (c->d_flag)
        zc__cuda_free(d, NULL, ZC_MEM_BUFFERS, c->d_flag, sizeof(int));
    if (c->fill && zc__cuda_use(d) == ZC_OK)
        (void)cudaStreamDestroy(c->fill);
    zc__optrack_destroy(&c->track);
    pthread_mutex_destroy(&c->mu);
    zc__host_free(NULL, ZC_MEM_OTHER, c, sizeof *c);
}

static const zc_device_ops cuda_ops = {
    .name = "cuda",
    .alloc = zc__cuda_alloc,
    .free = zc__cuda_free,
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
    .cast = zc__cuda_cast,
    .scale = zc__cuda_scale,
    .accumulate = zc__cuda_accumulate,
    .accumulate_rounded = zc__cuda_accumulate_rounded,
    .reduce_sum = zc__cuda_reduce_sum,
    .sumsq = zc__cuda_sumsq,
    .nonfinite = zc__cuda_nonfinite,
    .sumsq_async = zc__cuda_sumsq_async,
    .nonfinite_async = zc__cuda_nonfinite_async,
    .adam = zc__cuda_adam,
    .adam_lp = zc__cuda_adam_lp,
    .lion = zc__cuda_lion,
    .adagrad = zc__cuda_adagrad,
    .quant_int8 = zc__cuda_quant_int8,
    .dequant_int8 = zc__cuda_dequant_int8,
    .mem_info = cuda_mem_info,
    .make_current = cuda_make_current,
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
    zc_status rc = cuda_make_current(&c->base);
    if (rc == ZC_OK) {
        cudaError_t ce = zc_k_geometry_query(index, &c->geo);
        if (ce != cudaSuccess)
            rc = zc__cuda_fail(ce, __FILE__, __LINE__, index, "querying the launch geometry");
    }
    if (rc == ZC_OK) {
        cudaError_t ce = cudaStreamCreateWithFlags(&c->fill, cudaStreamNonBlocking);
        if (ce != cudaSuccess)
            rc = zc__cuda_fail(ce, __FILE__, __LINE__, index, "creating the zero-fill stream");
    }
    if (rc == ZC_OK) {
        struct cudaDeviceProp prop;
        if (cudaGetDeviceProperties(&prop, index) == cudaSuccess)
            ZC_LOGD("device", "cuda:%d %s, sm_%d%d, %d SMs, %.1f GiB; grids: %d blocks "
                    "(elementwise), %d (bf16 Adam)", index, prop.name, prop.major, prop.minor,
                    prop.multiProcessorCount,
                    (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0),
                    c->geo.stream_blocks, c->geo.adam_blocks[1][ZC_DTYPE_BF16][1 + ZC_DTYPE_BF16]);
        *out = &c->base;
        return ZC_OK;
    }
    zc__optrack_destroy(&c->track);
    pthread_mutex_destroy(&c->mu);
    zc__host_free(NULL, ZC_MEM_OTHER, c, sizeof *c);
    return rc;
}
