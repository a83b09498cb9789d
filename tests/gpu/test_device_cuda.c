/* The CUDA device backend's ordering and error contract (src/device/device.h),
 * below the engine: non-blocking caller streams, data produced on one stream
 * and consumed on another through an event, pageable, pinned and registered
 * host buffers, the stream-ordered norm and overflow ops against the
 * host-returning ones, where errors are reported (a launch reports its own
 * failure only; a fault surfaces at the wait and names the work), and which
 * GPU a launched process opens. Every expected value is computed on the host
 * independently. Without a GPU every test skips and says why. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "base/dtype.h"
#include "gpu_common.h"
#include "helpers.h"
#include "kernels/kernels.h"

static void *dev_alloc(zc_device *d, size_t bytes)
{
    void *p = NULL;
    cr_assert_eq(d->ops->alloc(d, NULL, ZC_MEM_BUFFERS, bytes, "test", &p), ZC_OK, "%s",
                 zc_last_error());
    return p;
}

/* A stream that does not order with the legacy default stream, with 300 ms
 * of work queued first, so anything that fails to wait for it reads stale
 * data deterministically instead of by chance. */
static void *busy_nonblocking_stream(zc_device *d)
{
    void *s = NULL;
    cr_assert_eq(d->ops->stream_create_nonblocking(d, &s), ZC_OK, "%s", zc_last_error());
    cr_assert_not_null(s);
    cr_assert_eq(zc_k_sleep(300, (cudaStream_t)s), cudaSuccess);
    return s;
}

/* H2D, scale, D2H on a busy non-blocking stream: ordered on that stream
 * alone, the result arrives after stream_sync, and the event recorded after
 * the work is not complete while the stream is still busy. Both host
 * buffers are pinned: a copy from pageable memory may be staged
 * synchronously, waiting out the stream's sleep before it returns, and the
 * event would then be complete by chance. */
Test(gpu_device, nonblocking_caller_stream_orders_its_own_work)
{
    zc_device *d;
    g_open_or_skip(&d);
    const size_t n = (1 << 18) + 7;
    float *h = NULL, *got = NULL;
    cr_assert_eq(cudaMallocHost((void **)&h, n * 4), cudaSuccess);
    cr_assert_eq(cudaMallocHost((void **)&got, n * 4), cudaSuccess);
    for (size_t i = 0; i < n; i++) {
        h[i] = (float)(i % 1000) * 0.5f;
        got[i] = -1.0f;
    }
    float *x = dev_alloc(d, n * 4);
    void *s = busy_nonblocking_stream(d), *ev = NULL;
    cr_assert_eq(d->ops->event_create(d, &ev), ZC_OK);
    cr_assert_eq(d->ops->copy(d, x, h, n * 4, ZC_COPY_H2D, s), ZC_OK);
    cr_assert_eq(d->ops->scale(d, x, ZC_DTYPE_F32, n, 4.0f, s), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(d->ops->copy(d, got, x, n * 4, ZC_COPY_D2H, s), ZC_OK);
    cr_assert_eq(d->ops->event_record(d, ev, s), ZC_OK);
    int done = -1;
    cr_assert_eq(d->ops->event_query(d, ev, &done), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(done, 0, "the event completed while its stream was still sleeping");
    /* A not-ready query leaves no error behind for the next caller. */
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    /* The legacy stream does not wait for a non-blocking stream. */
    cr_assert_eq(d->ops->stream_sync(d, NULL), ZC_OK);
    cr_assert_eq(d->ops->stream_sync(d, s), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(d->ops->event_query(d, ev, &done), ZC_OK);
    cr_assert_eq(done, 1);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(got[i], 4.0f * h[i], "element %zu", i);
    d->ops->event_destroy(d, ev);
    d->ops->stream_destroy(d, s);
    d->ops->free(d, NULL, ZC_MEM_BUFFERS, x, n * 4);
    cudaFreeHost(got);
    cudaFreeHost(h);
    d->ops->destroy(d);
    t_assert_no_leaks();
}

/* A gradient written on one non-blocking stream (after 300 ms of other work)
 * and reduced on another: event_record on the producer, stream_wait_event on
 * the consumer, no host wait in between. The consumer must see the written
 * gradient, not the zeros before it - the ordering the engine needs between
 * the caller's backward stream and its own. */
Test(gpu_device, gradient_written_on_another_stream_via_event)
{
    zc_device *d;
    g_open_or_skip(&d);
    const size_t n = 100003;
    uint16_t *hg = malloc(n * 2);
    float *got = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        hg[i] = zc__f32_to_bf16((float)((int)(i % 97) - 48) * 0.25f); /* exact in bf16 */
    void *grad = dev_alloc(d, n * 2);
    float *acc = dev_alloc(d, n * 4);
    void *producer = busy_nonblocking_stream(d), *consumer = NULL, *ready = NULL;
    cr_assert_eq(d->ops->stream_create_nonblocking(d, &consumer), ZC_OK);
    cr_assert_eq(d->ops->event_create(d, &ready), ZC_OK);
    cr_assert_eq(d->ops->copy(d, grad, hg, n * 2, ZC_COPY_H2D, producer), ZC_OK);
    cr_assert_eq(d->ops->event_record(d, ready, producer), ZC_OK);
    cr_assert_eq(d->ops->stream_wait_event(d, consumer, ready), ZC_OK);
    cr_assert_eq(d->ops->accumulate(d, acc, grad, ZC_DTYPE_BF16, n, consumer), ZC_OK);
    cr_assert_eq(d->ops->accumulate(d, acc, grad, ZC_DTYPE_BF16, n, consumer), ZC_OK);
    cr_assert_eq(d->ops->copy(d, got, acc, n * 4, ZC_COPY_D2H, consumer), ZC_OK);
    cr_assert_eq(d->ops->stream_sync(d, consumer), ZC_OK, "%s", zc_last_error());
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(got[i], 2.0f * zc__bf16_to_f32(hg[i]), "element %zu", i);
    d->ops->event_destroy(d, ready);
    d->ops->stream_destroy(d, producer);
    d->ops->stream_destroy(d, consumer);
    d->ops->free(d, NULL, ZC_MEM_BUFFERS, grad, n * 2);
    d->ops->free(d, NULL, ZC_MEM_BUFFERS, acc, n * 4);
    free(hg), free(got);
    d->ops->destroy(d);
    t_assert_no_leaks();
}

/* Round trips through pageable (malloc), pinned (cudaMallocHost) and
 * registered (cudaHostRegister) host memory on a busy non-blocking stream,
 * 64 MiB so the runtime stages pageable copies in several pieces. Pageable
 * H2D may return before the stream ran it (the source was staged), so the
 * source is overwritten right after the call: the device must still get the
 * old values. */
Test(gpu_device, pageable_pinned_and_registered_host_buffers, .timeout = 120)
{
    zc_device *d;
    g_open_or_skip(&d);
    const size_t n = 16u << 20, bytes = n * 4;
    void *x = dev_alloc(d, bytes);
    for (int kind = 0; kind < 3; kind++) {
        float *src = NULL, *dst = NULL;
        if (kind == 0) {
            src = malloc(bytes);
            dst = malloc(bytes);
        } else if (kind == 1) {
            cr_assert_eq(cudaMallocHost((void **)&src, bytes), cudaSuccess);
            cr_assert_eq(cudaMallocHost((void **)&dst, bytes), cudaSuccess);
        } else {
            src = aligned_alloc(4096, bytes);
            dst = aligned_alloc(4096, bytes);
            cr_assert_eq(cudaHostRegister(src, bytes, cudaHostRegisterDefault), cudaSuccess);
            cr_assert_eq(cudaHostRegister(dst, bytes, cudaHostRegisterDefault), cudaSuccess);
        }
        for (size_t i = 0; i < n; i++) {
            src[i] = (float)(i * 3 + (size_t)kind);
            dst[i] = -1.0f;
        }
        void *s = busy_nonblocking_stream(d);
        cr_assert_eq(d->ops->copy(d, x, src, bytes, ZC_COPY_H2D, s), ZC_OK, "%s", zc_last_error());
        if (kind == 0)
            memset(src, 0xff, bytes); /* staged already: the copy must not see this */
        cr_assert_eq(d->ops->scale(d, x, ZC_DTYPE_F32, n, 2.0f, s), ZC_OK);
        cr_assert_eq(d->ops->copy(d, dst, x, bytes, ZC_COPY_D2H, s), ZC_OK, "%s", zc_last_error());
        cr_assert_eq(d->ops->stream_sync(d, s), ZC_OK, "%s", zc_last_error());
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(dst[i], 2.0f * (float)(i * 3 + (size_t)kind), "kind %d element %zu",
                         kind, i);
        d->ops->stream_destroy(d, s);
        if (kind == 1) {
            cudaFreeHost(src);
            cudaFreeHost(dst);
        } else {
            if (kind == 2) {
                cudaHostUnregister(src);
                cudaHostUnregister(dst);
            }
            free(src);
            free(dst);
        }
    }
    d->ops->free(d, NULL, ZC_MEM_BUFFERS, x, bytes);
    d->ops->destroy(d);
    t_assert_no_leaks();
}

/* sumsq_async leaves bitwise the value sumsq returns (and the host twin) on
 * the device; nonfinite_async ORs several chunks into one device flag; one
 * host wait at the end, as a step would do it. */
Test(gpu_device, stream_ordered_norm_and_overflow_equal_the_waiting_ops)
{
    zc_device *d;
    g_open_or_skip(&d);
    zc_device *h = zc__device_host();
    const size_t n = 5 * ZC_SUMSQ_BLOCK + 333;
    float *x = malloc(n * 4);
    uint64_t seed = 77;
    for (size_t i = 0; i < n; i++)
        x[i] = t_rand_range(&seed, -8, 8);
    float *dx = dev_alloc(d, n * 4);
    size_t nb = zc__sumsq_scratch_elems(n);
    double *scratch = dev_alloc(d, nb * 8), *dout = dev_alloc(d, 2 * 8);
    int *dflag = dev_alloc(d, sizeof(int));
    void *s = busy_nonblocking_stream(d);
    cr_assert_eq(d->ops->copy(d, dx, x, n * 4, ZC_COPY_H2D, s), ZC_OK);
    cr_assert_eq(d->ops->sumsq_async(d, dx, ZC_DTYPE_F32, n, scratch, &dout[0], s), ZC_OK, "%s",
                 zc_last_error());
    cr_assert_eq(d->ops->sumsq_async(d, dx, ZC_DTYPE_F32, 0, scratch, &dout[1], s), ZC_OK);
    cr_assert_eq(d->ops->memset0(d, dflag, sizeof(int), s), ZC_OK);
    cr_assert_eq(d->ops->nonfinite_async(d, dx, ZC_DTYPE_F32, n, dflag, s), ZC_OK);
    double got[2] = {-1, -1};
    int flag = -1;
    cr_assert_eq(d->ops->copy(d, got, dout, sizeof got, ZC_COPY_D2H, s), ZC_OK);
    cr_assert_eq(d->ops->copy(d, &flag, dflag, sizeof flag, ZC_COPY_D2H, s), ZC_OK);
    cr_assert_eq(d->ops->stream_sync(d, s), ZC_OK, "%s", zc_last_error());
    double want = -2, waited = -3;
    cr_assert_eq(h->ops->sumsq(h, x, ZC_DTYPE_F32, n, &want, NULL), ZC_OK);
    cr_assert_eq(d->ops->sumsq(d, dx, ZC_DTYPE_F32, n, &waited, s), ZC_OK);
    cr_assert(memcmp(&got[0], &want, 8) == 0, "async %a host %a", got[0], want);
    cr_assert(memcmp(&waited, &want, 8) == 0, "sumsq %a host %a", waited, want);
    cr_assert(got[1] == 0.0 && !signbit(got[1]), "empty sumsq_async gave %a", got[1]);
    cr_assert_eq(flag, 0);
    /* A second chunk with an inf sets the flag; a third clean one keeps it. */
    float inf = INFINITY;
    cr_assert_eq(d->ops->copy(d, dx + 17, &inf, 4, ZC_COPY_H2D, s), ZC_OK);
    cr_assert_eq(d->ops->nonfinite_async(d, dx, ZC_DTYPE_F32, n, dflag, s), ZC_OK);
    cr_assert_eq(d->ops->nonfinite_async(d, dx + 100, ZC_DTYPE_F32, 50, dflag, s), ZC_OK);
    cr_assert_eq(d->ops->copy(d, &flag, dflag, sizeof flag, ZC_COPY_D2H, s), ZC_OK);
    cr_assert_eq(d->ops->stream_sync(d, s), ZC_OK);
    cr_assert_eq(flag, 1);
    d->ops->stream_destroy(d, s);
    d->ops->free(d, NULL, ZC_MEM_BUFFERS, dx, n * 4);
    d->ops->free(d, NULL, ZC_MEM_BUFFERS, scratch, nb * 8);
    d->ops->free(d, NULL, ZC_MEM_BUFFERS, dout, 2 * 8);
    d->ops->free(d, NULL, ZC_MEM_BUFFERS, dflag, sizeof(int));
    free(x);
    d->ops->destroy(d);
    t_assert_no_leaks();
}

/* An error another call left pending on this thread (a failed cudaMalloc,
 * not cleared) is not this launch's: the kernel still runs and reports
 * success, and the caller's error is still there for the caller. */
Test(gpu_device, launch_does_not_report_an_earlier_error)
{
    zc_device *d;
    g_open_or_skip(&d);
    void *huge = NULL;
    cr_assert_neq(cudaMalloc(&huge, (size_t)1 << 62), cudaSuccess);
    float *x = dev_alloc(d, 64 * 4);
    cr_assert_eq(d->ops->scale(d, x, ZC_DTYPE_F32, 64, 2.0f, NULL), ZC_OK,
                 "a launch reported an earlier error: %s", zc_last_error());
    cr_assert_eq(d->ops->stream_sync(d, NULL), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(cudaGetLastError(), cudaErrorMemoryAllocation,
                 "the caller's pending error was cleared by zeroc");
    d->ops->free(d, NULL, ZC_MEM_BUFFERS, x, 64 * 4);
    d->ops->destroy(d);
    t_assert_no_leaks();
}

/* A kernel that faults (a wild pointer) launches fine; the fault surfaces at
 * the stream's wait, whose message names what was enqueued on that stream
 * since its last wait (first and last op, how many). A later launch into the
 * broken context says the device had already failed. The process's CUDA
 * context is unusable afterwards: Criterion runs this test alone in its own
 * process. */
Test(gpu_device, fault_surfaces_at_the_wait_naming_the_work)
{
    zc_device *d;
    g_open_or_skip(&d);
    float *x = dev_alloc(d, 1024 * 4);
    void *s = NULL;
    cr_assert_eq(d->ops->stream_create_nonblocking(d, &s), ZC_OK);
    cr_assert_eq(d->ops->stream_sync(d, s), ZC_OK);
    cr_assert_eq(d->ops->memset0(d, x, 1024 * 4, s), ZC_OK);
    float *wild = (float *)(uintptr_t)0x10; /* never mapped */
    cr_assert_eq(d->ops->scale(d, wild, ZC_DTYPE_F32, 1000, 2.0f, s), ZC_OK,
                 "the launch itself must succeed: %s", zc_last_error());
    cr_assert_eq(d->ops->stream_sync(d, s), ZC_ERR_DEVICE);
    const char *m = zc_last_error();
    cr_assert(strstr(m, "cudaStreamSynchronize") && strstr(m, "2 operations") &&
                  strstr(m, "first cudaMemsetAsync (4096 bytes)") &&
                  strstr(m, "last scale kernel (fp32, 1000 elements)"),
              "%s", m);
    zc_status rc = d->ops->cast(d, x, ZC_DTYPE_BF16, x, ZC_DTYPE_F32, 16, s);
    cr_assert_eq(rc, ZC_ERR_DEVICE);
    cr_assert(strstr(zc_last_error(), "already failed"), "%s", zc_last_error());
}

/* ---- which GPU a launched process opens --------------------------------- */

static const char *const launcher_vars[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
    "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_PROCID",
    "SLURM_NTASKS", "SLURM_LOCALID", NULL};

/* For each launcher's local-rank variable: device_index -1 opens the GPU the
 * one mapping picks (the last visible one when there are several, to tell it
 * from the default 0), and the backend works on it. */
Test(gpu_device, device_index_minus_one_follows_each_launcher)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1)
        gpu_unavailable("no CUDA device");
    static const char *const local_vars[] = {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                             "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK",
                                             "SLURM_LOCALID"};
    char val[16];
    snprintf(val, sizeof val, "%d", count - 1);
    for (size_t k = 0; k < sizeof local_vars / sizeof local_vars[0]; k++) {
        for (int i = 0; launcher_vars[i]; i++)
            unsetenv(launcher_vars[i]);
        setenv(local_vars[k], val, 1);
        int ord = -1; /* the public resolver a program selects its GPU with */
        cr_assert_eq(zc_cuda_device_index(-1, &ord), ZC_OK, "%s", zc_last_error());
        cr_assert_eq(ord, count - 1, "%s=%s: zc_cuda_device_index gave %d", local_vars[k], val,
                     ord);
        zc_device *d = NULL;
        cr_assert_eq(zc__device_open(ZC_DEVICE_CUDA, -1, &d), ZC_OK, "%s: %s", local_vars[k],
                     zc_last_error());
        cr_assert_eq(d->index, count - 1, "%s=%s opened cuda:%d", local_vars[k], val, d->index);
        float *x = dev_alloc(d, 16);
        int cur = -1;
        struct cudaPointerAttributes at;
        cr_assert_eq(cudaPointerGetAttributes(&at, x), cudaSuccess);
        cr_assert_eq(at.device, count - 1, "%s: memory landed on cuda:%d", local_vars[k],
                     at.device);
        cr_assert_eq(cudaGetDevice(&cur), cudaSuccess);
        cr_assert_eq(cur, count - 1);
        d->ops->free(d, NULL, ZC_MEM_BUFFERS, x, 16);
        d->ops->destroy(d);
    }
    t_assert_no_leaks();
}
