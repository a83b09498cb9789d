/* The NCCL communicator: one rank (the only NCCL world a single GPU allows on
 * NCCL 2.28), its watchdog (timed from a collective's start, not its
 * enqueue), groups, and - on machines with two GPUs - a rank that skips a
 * collective. Built only with NCCL; skips without a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "../comm/test_bootstrap_spawn.h"
#include "comm/comm.h"
#include "comm/nccl.h"
#include "gpu_common.h"
#include "helpers.h"
#include "kernels/kernels.h"

static void one_rank_env(void)
{
    static const char *const vars[] = {"SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK",
                                       "OMPI_COMM_WORLD_SIZE", "NCCL_COMM_ID", "MASTER_ADDR",
                                       "MASTER_PORT", NULL};
    for (int i = 0; vars[i]; i++)
        unsetenv(vars[i]);
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    setenv("LOCAL_RANK", "0", 1);
}

static void open_pair(zc_device **d, zc_comm **c)
{
    g_open_or_skip(d);
    one_rank_env();
    cr_assert_eq(zc_comm_init_env(c), ZC_OK, "%s", zc_last_error());
    cr_assert_str_eq((*c)->ops->name, "nccl");
    cr_assert_eq(zc_comm_rank(*c), 0);
    cr_assert_eq(zc_comm_world(*c), 1);
    cr_assert_eq((*c)->ops->bind_device(*c, *d), ZC_OK, "%s", zc_last_error());
}

/* With one rank every collective is the identity (sum of one, gather of
 * one); what is checked is that data crosses the comm stream in order with
 * the caller's stream, in place and out of place, for every dtype. */
Test(gpu_nccl, one_rank_collectives_on_the_callers_stream)
{
    zc_device *d;
    zc_comm *c;
    open_pair(&d, &c);
    const size_t n = (1 << 20) + 3;
    float *h = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        h[i] = (float)i * 0.25f;
    void *st;
    cr_assert_eq(d->ops->stream_create(d, &st), ZC_OK);
    float *a = NULL, *b = NULL;
    cr_assert_eq(d->ops->alloc(d, NULL, ZC_MEM_BUFFERS, n * 4, "a", (void **)&a), ZC_OK);
    cr_assert_eq(d->ops->alloc(d, NULL, ZC_MEM_BUFFERS, n * 4, "b", (void **)&b), ZC_OK);
    /* copy -> all_reduce -> scale -> all_gather -> reduce_scatter in place -> broadcast
     * -> all_to_all twice. */
    cr_assert_eq(d->ops->copy(d, a, h, n * 4, ZC_COPY_H2D, st), ZC_OK);
    cr_assert_eq(zc__all_reduce(c, a, b, n, ZC_DTYPE_F32, ZC_RED_SUM, st), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(d->ops->scale(d, b, ZC_DTYPE_F32, n, 2.0f, st), ZC_OK);
    cr_assert_eq(zc__all_gather(c, b, a, n, ZC_DTYPE_F32, st), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc__reduce_scatter(c, a, a, n, ZC_DTYPE_F32, st), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc__broadcast(c, a, n, ZC_DTYPE_F32, 0, st), ZC_OK, "%s", zc_last_error());
    /* All-to-all (grouped sends and receives) there and back. */
    cr_assert_eq(zc__all_to_all(c, a, b, n, ZC_DTYPE_F32, st), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc__all_to_all(c, b, a, n, ZC_DTYPE_F32, st), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc__all_reduce(c, a, a, n, ZC_DTYPE_F32, ZC_RED_MAX, st), ZC_OK);
    cr_assert_eq(d->ops->copy(d, got, a, n * 4, ZC_COPY_D2H, st), ZC_OK);
    cr_assert_eq(d->ops->stream_sync(d, st), ZC_OK);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(got[i], 2.0f * h[i], "element %zu", i);
    /* 16-bit and integer payloads are accepted too. */
    cr_assert_eq(zc__all_reduce(c, a, a, n, ZC_DTYPE_BF16, ZC_RED_SUM, st), ZC_OK);
    cr_assert_eq(zc__all_reduce(c, a, a, n, ZC_DTYPE_I32, ZC_RED_SUM, st), ZC_OK);
    cr_assert_eq(zc__barrier(c), ZC_OK, "%s", zc_last_error());
    d->ops->free(d, NULL, ZC_MEM_BUFFERS, a, n * 4);
    d->ops->free(d, NULL, ZC_MEM_BUFFERS, b, n * 4);
    d->ops->stream_destroy(d, st);
    zc_comm_destroy(c);
    d->ops->destroy(d);
    free(h), free(got);
    t_assert_no_leaks();
}

/* srun --gpus-per-task=1: each task sees one GPU (CUDA_VISIBLE_DEVICES) while
 * SLURM_LOCALID counts the node's tasks, and there is no LOCAL_RANK. The
 * communicator and device_index -1 must pick the same GPU - the device
 * backend used to wrap the local id and NCCL to refuse it. CUDA is not yet
 * initialised in this test's process, so CUDA_VISIBLE_DEVICES still applies. */
Test(gpu_nccl, srun_task_with_its_own_gpu_binds_the_same_device)
{
    static const char *const vars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK",
                                       "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                                       "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE",
                                       "NCCL_COMM_ID", "MASTER_ADDR", "MASTER_PORT", NULL};
    for (int i = 0; vars[i]; i++)
        unsetenv(vars[i]);
    /* Keep the first GPU the runner already allows, alone. */
    char first[64] = "0";
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (cvd && *cvd) {
        snprintf(first, sizeof first, "%s", cvd);
        first[strcspn(first, ",")] = '\0';
    }
    setenv("CUDA_VISIBLE_DEVICES", first, 1);
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_NTASKS", "1", 1);
    setenv("SLURM_LOCALID", "3", 1);
    zc_device *d;
    if (zc__device_open(ZC_DEVICE_CUDA, -1, &d) != ZC_OK)
        gpu_unavailable("no CUDA device: %s", zc_last_error());
    cr_assert_eq(d->index, 0);
    zc_comm *c;
    cr_assert_eq(zc_comm_init_env(&c), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(c->local_rank, 3);
    cr_assert_eq(c->ops->bind_device(c, d), ZC_OK, "%s", zc_last_error());
    float *a = NULL;
    cr_assert_eq(d->ops->alloc(d, NULL, ZC_MEM_BUFFERS, 64 * 4, "a", (void **)&a), ZC_OK);
    cr_assert_eq(zc__all_reduce(c, a, a, 64, ZC_DTYPE_F32, ZC_RED_SUM, NULL), ZC_OK, "%s",
                 zc_last_error());
    cr_assert_eq(zc__barrier(c), ZC_OK, "%s", zc_last_error());
    zc_comm_destroy(c);
    d->ops->free(d, NULL, ZC_MEM_BUFFERS, a, 64 * 4);
    d->ops->destroy(d);
    t_assert_no_leaks();
}

/* Binding the host device is refused with a message saying what to do. */
Test(gpu_nccl, host_buffers_are_refused)
{
    zc_device *d;
    zc_comm *c;
    g_open_or_skip(&d);
    one_rank_env();
    cr_assert_eq(zc_comm_init_env(&c), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(c->ops->bind_device(c, zc__device_host()), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "ZC_DEVICE_CUDA"), "%s", zc_last_error());
    zc_comm_destroy(c);
    d->ops->destroy(d);
    t_assert_no_leaks();
}

/* The watchdog on one GPU: the all-reduce stalls 8 s after it started (the
 * stall hook, as a missing peer would hold it), the timeout is 1 s. The barrier must fail
 * (not wait for the stall) with the rank, collective, sequence number and
 * size in the message, and the error must stick to the handle. */
Test(gpu_nccl, watchdog_aborts_an_overdue_collective, .timeout = 60)
{
    setenv("ZC_COMM_TIMEOUT", "1", 1);
    zc_device *d;
    zc_comm *c;
    open_pair(&d, &c);
    const size_t n = 1000;
    float *a = NULL;
    cr_assert_eq(d->ops->alloc(d, NULL, ZC_MEM_BUFFERS, n * 4, "a", (void **)&a), ZC_OK);
    cr_assert_eq(zc__comm_nccl_stall(c, 8000), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc__all_reduce(c, a, a, n, ZC_DTYPE_F32, ZC_RED_SUM, NULL), ZC_OK, "%s",
                 zc_last_error());
    cr_assert_eq(zc__barrier(c), ZC_ERR_COMM, "the barrier did not report the overdue all_reduce");
    const char *m = zc_last_error();
    cr_assert(strstr(m, "rank 0/1") && strstr(m, "all_reduce #1") && strstr(m, "4000 bytes") &&
                  strstr(m, "ZC_COMM_TIMEOUT"),
              "%s", m);
    cr_assert_eq(zc__all_reduce(c, a, a, n, ZC_DTYPE_F32, ZC_RED_SUM, NULL), ZC_ERR_COMM);
    cr_assert(strstr(zc_last_error(), "all_reduce #1"), "sticky error: %s", zc_last_error());
    zc_comm_destroy(c);
    d->ops->free(d, NULL, ZC_MEM_BUFFERS, a, n * 4);
    d->ops->destroy(d);
    t_assert_no_leaks();
}

/* A collective queued behind 3 s of the caller's own work, with a 1 s
 * timeout: it has not started (its inputs are not ready), so it must not be
 * timed out; it runs when the caller's stream reaches it and the data comes
 * through. Timing from the enqueue aborted this healthy communicator. */
Test(gpu_nccl, collective_queued_behind_callers_work_is_not_timed_out, .timeout = 60)
{
    setenv("ZC_COMM_TIMEOUT", "1", 1);
    zc_device *d;
    zc_comm *c;
    open_pair(&d, &c);
    const size_t n = 4096;
    float *h = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        h[i] = (float)i - 100.0f;
    void *st;
    cr_assert_eq(d->ops->stream_create_nonblocking(d, &st), ZC_OK, "%s", zc_last_error());
    float *a = NULL;
    cr_assert_eq(d->ops->alloc(d, NULL, ZC_MEM_BUFFERS, n * 4, "a", (void **)&a), ZC_OK);
    cr_assert_eq(zc_k_sleep(3000, (cudaStream_t)st), cudaSuccess);
    cr_assert_eq(d->ops->copy(d, a, h, n * 4, ZC_COPY_H2D, st), ZC_OK);
    cr_assert_eq(zc__all_reduce(c, a, a, n, ZC_DTYPE_F32, ZC_RED_SUM, st), ZC_OK, "%s",
                 zc_last_error());
    cr_assert_eq(d->ops->scale(d, a, ZC_DTYPE_F32, n, 0.5f, st), ZC_OK);
    cr_assert_eq(d->ops->copy(d, got, a, n * 4, ZC_COPY_D2H, st), ZC_OK);
    cr_assert_eq(zc__barrier(c), ZC_OK, "a queued collective was timed out: %s", zc_last_error());
    cr_assert_eq(d->ops->stream_sync(d, st), ZC_OK, "%s", zc_last_error());
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(got[i], 0.5f * h[i], "element %zu", i);
    d->ops->free(d, NULL, ZC_MEM_BUFFERS, a, n * 4);
    d->ops->stream_destroy(d, st);
    zc_comm_destroy(c);
    d->ops->destroy(d);
    free(h), free(got);
    t_assert_no_leaks();
}

/* Four collectives in one group on a non-blocking caller stream: results as
 * without the group, ready on the caller's stream after group_end; misuse
 * (barrier inside, nesting, end without start) is refused with
 * ZC_ERR_INVALID_STATE and leaves the communicator usable. */
Test(gpu_nccl, grouped_collectives_on_the_callers_stream, .timeout = 60)
{
    zc_device *d;
    zc_comm *c;
    open_pair(&d, &c);
    enum { K = 4 };
    const size_t n = 3000;
    float *h = malloc(K * n * sizeof(float)), *got = malloc(K * n * sizeof(float));
    for (size_t i = 0; i < K * n; i++)
        h[i] = 0.125f * (float)i;
    void *st;
    cr_assert_eq(d->ops->stream_create_nonblocking(d, &st), ZC_OK);
    float *a = NULL, *b = NULL;
    cr_assert_eq(d->ops->alloc(d, NULL, ZC_MEM_BUFFERS, K * n * 4, "a", (void **)&a), ZC_OK);
    cr_assert_eq(d->ops->alloc(d, NULL, ZC_MEM_BUFFERS, K * n * 4, "b", (void **)&b), ZC_OK);
    cr_assert_eq(d->ops->copy(d, a, h, K * n * 4, ZC_COPY_H2D, st), ZC_OK);
    cr_assert_eq(zc__comm_group_start(c), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc__comm_group_start(c), ZC_ERR_INVALID_STATE);
    cr_assert_eq(zc__barrier(c), ZC_ERR_INVALID_STATE);
    cr_assert_eq(zc__all_gather(c, a, b, n, ZC_DTYPE_F32, st), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc__all_reduce(c, a + n, b + n, n, ZC_DTYPE_F32, ZC_RED_SUM, st), ZC_OK);
    cr_assert_eq(zc__reduce_scatter(c, a + 2 * n, b + 2 * n, n, ZC_DTYPE_F32, st), ZC_OK);
    cr_assert_eq(zc__broadcast(c, a + 3 * n, n, ZC_DTYPE_F32, 0, st), ZC_OK);
    cr_assert_eq(zc__comm_group_end(c), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc__comm_group_end(c), ZC_ERR_INVALID_STATE);
    /* b[3n..4n) <- the broadcast buffer, on the caller's stream after the group. */
    cr_assert_eq(d->ops->copy(d, b + 3 * n, a + 3 * n, n * 4, ZC_COPY_D2D, st), ZC_OK);
    cr_assert_eq(d->ops->copy(d, got, b, K * n * 4, ZC_COPY_D2H, st), ZC_OK);
    cr_assert_eq(d->ops->stream_sync(d, st), ZC_OK, "%s", zc_last_error());
    for (size_t i = 0; i < K * n; i++)
        cr_assert_eq(got[i], h[i], "element %zu", i);
    cr_assert_eq(zc__barrier(c), ZC_OK, "%s", zc_last_error());
    d->ops->free(d, NULL, ZC_MEM_BUFFERS, a, K * n * 4);
    d->ops->free(d, NULL, ZC_MEM_BUFFERS, b, K * n * 4);
    d->ops->stream_destroy(d, st);
    zc_comm_destroy(c);
    d->ops->destroy(d);
    free(h), free(got);
    t_assert_no_leaks();
}

/* A group that starts and then cannot finish (the stall hook, inside the
 * group after its start): the watchdog fails it after the 1 s timeout. */
Test(gpu_nccl, watchdog_times_a_stalled_group, .timeout = 60)
{
    setenv("ZC_COMM_TIMEOUT", "1", 1);
    zc_device *d;
    zc_comm *c;
    open_pair(&d, &c);
    const size_t n = 1000;
    float *a = NULL;
    cr_assert_eq(d->ops->alloc(d, NULL, ZC_MEM_BUFFERS, 2 * n * 4, "a", (void **)&a), ZC_OK);
    cr_assert_eq(zc__comm_nccl_stall(c, 8000), ZC_OK);
    cr_assert_eq(zc__comm_group_start(c), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc__all_reduce(c, a, a, n, ZC_DTYPE_F32, ZC_RED_SUM, NULL), ZC_OK);
    cr_assert_eq(zc__all_reduce(c, a + n, a + n, n, ZC_DTYPE_F32, ZC_RED_SUM, NULL), ZC_OK);
    cr_assert_eq(zc__comm_group_end(c), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc__barrier(c), ZC_ERR_COMM, "the stalled group was not timed out");
    cr_assert(strstr(zc_last_error(), "all_reduce #1") && strstr(zc_last_error(), "of starting"),
              "%s", zc_last_error());
    zc_comm_destroy(c);
    d->ops->free(d, NULL, ZC_MEM_BUFFERS, a, 2 * n * 4);
    d->ops->destroy(d);
    t_assert_no_leaks();
}

/* Two processes, one GPU each: rank 1 never joins the all-reduce; rank 0 must
 * get the watchdog's error, not hang. Needs two GPUs (NCCL 2.28 refuses two
 * ranks on one GPU). */
Test(gpu_nccl, rank_skipping_a_collective_is_an_error, .timeout = 120)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1)
        gpu_unavailable("no CUDA device");
    if (ndev < 2) /* a skip even under ZC_REQUIRE_GPU=1: one GPU cannot run it */
        cr_skip_test("no CUDA device pair: needs 2 GPUs (found %d); NCCL before 2.30 refuses two "
                     "ranks on one GPU", ndev);
    const char *helper = getenv("ZC_NCCL_HELPER");
    cr_assert(helper && *helper, "ZC_NCCL_HELPER is not set: run through meson test");
    int port = t_free_port_pair();
    cr_assert_gt(port, 1);
    static const char *const extra[] = {"ZC_COMM_TIMEOUT=3", "ZC_BOOTSTRAP_TIMEOUT=60", NULL};
    t_rank_proc p[2];
    for (int r = 0; r < 2; r++)
        cr_assert_eq(t_spawn_rank(&p[r], helper, "skip1", r, 2, port - 1, extra), 0);
    cr_assert_eq(t_wait_ranks(p, 2, 90), 0, "a rank hung");
    const char *e0 = t_rank_stderr(&p[0]);
    cr_assert_eq(p[0].status, 0, "rank 0 exit %d: %s", p[0].status, e0);
    const char *e1 = t_rank_stderr(&p[1]);
    cr_assert_eq(p[1].status, 0, "rank 1 exit %d: %s", p[1].status, e1);
}

/* The communicator works on its own GPU without moving the caller: a thread
 * on cuda:1 that creates a rank on cuda:0 (LOCAL_RANK=0), runs a collective
 * and destroys the rank is still on cuda:1 after each call. Needs two GPUs
 * (with one, both devices are the same). */
Test(gpu_nccl, calls_leave_the_caller_on_its_device, .timeout = 120)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1)
        gpu_unavailable("no CUDA device");
    if (ndev < 2) /* a skip even under ZC_REQUIRE_GPU=1: one GPU cannot run it */
        cr_skip_test("needs 2 GPUs (found %d): with one the caller's device is the rank's", ndev);
    cr_assert_eq(cudaSetDevice(1), cudaSuccess);
    cr_assert_eq(cudaFree(NULL), cudaSuccess); /* the caller's own context on cuda:1 */
    zc_device *d;
    one_rank_env(); /* LOCAL_RANK=0: the rank lives on cuda:0 */
    cr_assert_eq(zc__device_open(ZC_DEVICE_CUDA, 0, &d), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(cudaSetDevice(1), cudaSuccess); /* opening the device moved us; start over */
    zc_comm *c;
    int cur = -1;
    cr_assert_eq(zc_comm_init_env(&c), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(cudaGetDevice(&cur), cudaSuccess);
    cr_assert_eq(cur, 1, "zc_comm_init_env left the caller on cuda:%d", cur);
    cr_assert_eq(c->ops->bind_device(c, d), ZC_OK, "%s", zc_last_error());
    float *a = NULL;
    cr_assert_eq(d->ops->alloc(d, NULL, ZC_MEM_BUFFERS, 64 * 4, "a", (void **)&a), ZC_OK);
    cr_assert_eq(cudaSetDevice(1), cudaSuccess);
    cr_assert_eq(zc__all_reduce(c, a, a, 64, ZC_DTYPE_F32, ZC_RED_SUM, NULL), ZC_OK, "%s",
                 zc_last_error());
    cr_assert_eq(cudaGetDevice(&cur), cudaSuccess);
    cr_assert_eq(cur, 1, "a collective left the caller on cuda:%d", cur);
    cr_assert_eq(zc__barrier(c), ZC_OK, "%s", zc_last_error());
    zc_comm_destroy(c);
    cr_assert_eq(cudaGetDevice(&cur), cudaSuccess);
    cr_assert_eq(cur, 1, "zc_comm_destroy left the caller on cuda:%d", cur);
    d->ops->free(d, NULL, ZC_MEM_BUFFERS, a, 64 * 4);
    d->ops->destroy(d);
    t_assert_no_leaks();
}
