/* Communicators from the program's own NCCL handles, on one GPU (the only
 * NCCL world a single GPU allows on NCCL 2.28): zc_comm_from_nccl over an
 * ncclComm_t the test made itself as llm.c does (ncclCommInitRank,
 * blocking) with and without the program's stream, zc_comm_split of it
 * (ncclCommSplit), an engine built over it, and after zc_comm_destroy the
 * program's communicator still working and destroyed by the program. Every
 * collective's result is held to its host twin: the same calls on the local
 * communicator (one thread), bit for bit. Skips without a GPU. */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "comm/comm.h"
#include "gpu_common.h"
#include "helpers.h"

enum { N = 4099 };

/* all_reduce, scale-free gather, reduce-scatter and all-to-all of one rank: the values
 * come back as they went, through every collective the engine uses. */
static void run_sequence(zc_comm *c, zc_device *d, void *stream, const float *in, float *out)
{
    float *a = NULL, *b = NULL;
    cr_assert_eq(d->ops->alloc(d, NULL, ZC_MEM_BUFFERS, N * 4, "a", (void **)&a), ZC_OK);
    cr_assert_eq(d->ops->alloc(d, NULL, ZC_MEM_BUFFERS, N * 4, "b", (void **)&b), ZC_OK);
    const zc_copy_kind up = d->mem_kind == ZC_MEMKIND_DEVICE ? ZC_COPY_H2D : ZC_COPY_H2H;
    const zc_copy_kind down = d->mem_kind == ZC_MEMKIND_DEVICE ? ZC_COPY_D2H : ZC_COPY_H2H;
    cr_assert_eq(d->ops->copy(d, a, in, N * 4, up, stream), ZC_OK);
    cr_assert_eq(zc__all_reduce(c, a, b, N, ZC_DTYPE_F32, ZC_RED_SUM, stream), ZC_OK, "%s",
                 zc_last_error());
    cr_assert_eq(zc__all_gather(c, b, a, N, ZC_DTYPE_F32, stream), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc__reduce_scatter(c, a, b, N, ZC_DTYPE_F32, stream), ZC_OK, "%s",
                 zc_last_error());
    cr_assert_eq(zc__all_to_all(c, b, a, N, ZC_DTYPE_F32, stream), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc__all_to_all(c, a, b, N, ZC_DTYPE_F32, stream), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc__all_reduce(c, b, b, N, ZC_DTYPE_F32, ZC_RED_MAX, stream), ZC_OK);
    cr_assert_eq(d->ops->copy(d, out, b, N * 4, down, stream), ZC_OK);
    cr_assert_eq(d->ops->stream_sync(d, stream), ZC_OK);
    d->ops->free(d, NULL, ZC_MEM_BUFFERS, a, N * 4);
    d->ops->free(d, NULL, ZC_MEM_BUFFERS, b, N * 4);
}

/* The host twin's result: the local communicator, one thread. */
static void host_twin(const float *in, float *out)
{
    zc_comm *c;
    cr_assert_eq(zc_comm_local_world(1, &c), ZC_OK);
    run_sequence(c, zc__device_host(), NULL, in, out);
    zc_comm_destroy(c);
}

static ncclComm_t program_comm(void)
{
    ncclUniqueId id;
    ncclComm_t nc = NULL;
    cr_assert_eq(ncclGetUniqueId(&id), ncclSuccess);
    cr_assert_eq(ncclCommInitRank(&nc, 1, id, 0), ncclSuccess);
    return nc;
}

Test(gpu_nccl_wrap, the_programs_comm_and_stream_borrowed_not_destroyed, .timeout = 120)
{
    zc_device *d;
    g_open_or_skip(&d);
    float *in = malloc(N * 4), *want = malloc(N * 4), *got = malloc(N * 4);
    for (int i = 0; i < N; i++)
        in[i] = (float)i * 0.37f - 11.0f;
    host_twin(in, want);
    cr_assert_eq(cudaSetDevice(0), cudaSuccess);
    ncclComm_t nc = program_comm();
    cudaStream_t prog_stream;
    cr_assert_eq(cudaStreamCreate(&prog_stream), cudaSuccess);
    for (int with_stream = 0; with_stream < 2; with_stream++) {
        zc_comm *c = NULL;
        cr_assert_eq(zc_comm_from_nccl(nc, 0, 2, NULL, &c), ZC_ERR_INVALID_ARG);
        cr_assert(strstr(zc_last_error(), "rank 0 of 1"), "%s", zc_last_error());
        cr_assert_null(c);
        cr_assert_eq(zc_comm_from_nccl(nc, 0, 1, with_stream ? (void *)prog_stream : NULL, &c),
                     ZC_OK, "%s", zc_last_error());
        cr_assert_str_eq(c->ops->name, "nccl");
        cr_assert_eq(c->ops->bind_device(c, d), ZC_OK, "%s", zc_last_error());
        void *st;
        cr_assert_eq(d->ops->stream_create(d, &st), ZC_OK);
        memset(got, 0, N * 4);
        run_sequence(c, d, st, in, got);
        cr_assert_eq(memcmp(got, want, N * 4), 0, "the NCCL results differ from the host twin");
        /* The split: colour 0 makes a one-rank communicator, NONE none. */
        zc_comm *s = (zc_comm *)&s;
        cr_assert_eq(zc_comm_split(c, ZC_COMM_SPLIT_NONE, 0, &s), ZC_OK, "%s", zc_last_error());
        cr_assert_null(s);
        cr_assert_eq(zc_comm_split(c, 0, 7, &s), ZC_OK, "%s", zc_last_error());
        cr_assert_eq(zc_comm_rank(s), 0);
        cr_assert_eq(zc_comm_world(s), 1);
        cr_assert_eq(s->ops->bind_device(s, d), ZC_OK, "%s", zc_last_error());
        memset(got, 0, N * 4);
        run_sequence(s, d, st, in, got);
        cr_assert_eq(memcmp(got, want, N * 4), 0, "the split's results differ from the twin");
        cr_assert_eq(zc_comm_split(c, -3, 0, &s), ZC_ERR_INVALID_ARG);
        zc_comm_destroy(s);
        d->ops->stream_destroy(d, st);
        zc_comm_destroy(c);
        /* The program's communicator and stream still work. */
        float *x = NULL;
        cr_assert_eq(cudaMalloc((void **)&x, 64 * 4), cudaSuccess);
        cr_assert_eq(ncclAllReduce(x, x, 64, ncclFloat32, ncclSum, nc, prog_stream), ncclSuccess);
        cr_assert_eq(cudaStreamSynchronize(prog_stream), cudaSuccess);
        cudaFree(x);
    }
    cr_assert_eq(ncclCommDestroy(nc), ncclSuccess, "zeroc destroyed the program's communicator");
    cudaStreamDestroy(prog_stream);
    d->ops->destroy(d);
    free(in), free(want), free(got);
    t_assert_no_leaks();
}

/* An engine over the program's communicator: its build agreement and its
 * scalar all-reduce run through it. */
Test(gpu_nccl_wrap, an_engine_over_the_programs_comm, .timeout = 120)
{
    zc_device *d;
    g_open_or_skip(&d);
    d->ops->destroy(d);
    cr_assert_eq(cudaSetDevice(0), cudaSuccess);
    ncclComm_t nc = program_comm();
    zc_comm *c = NULL;
    cr_assert_eq(zc_comm_from_nccl(nc, 0, 1, NULL, &c), ZC_OK, "%s", zc_last_error());
    zc_config *cfg;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage", 3), ZC_OK);
    zc_engine_options o = ZC_ENGINE_OPTIONS_INIT;
    o.device = ZC_DEVICE_CUDA;
    o.device_index = 0;
    zc_engine *e = NULL;
    cr_assert_eq(zc_engine_create(&e, cfg, c, &o), ZC_OK, "%s", zc_last_error());
    const int64_t shape = 1000;
    cr_assert_not_null(zc_param_add(e, "w", &shape, 1, 0));
    cr_assert_eq(zc_engine_build(e), ZC_OK, "%s", zc_last_error());
    double v[2] = {0.1, -3.0};
    cr_assert_eq(zc_all_reduce_f64(e, v, 2, ZC_REDUCE_SUM), ZC_OK, "%s", zc_last_error());
    cr_assert(v[0] == 0.1 && v[1] == -3.0);
    zc_engine_destroy(e);
    zc_config_destroy(cfg);
    zc_comm_destroy(c);
    cr_assert_eq(ncclCommDestroy(nc), ncclSuccess);
    t_assert_no_leaks();
}
