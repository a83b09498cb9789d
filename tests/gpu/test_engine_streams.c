/* The engine on CUDA with the caller's work on its own streams, through the
 * public API, against the same loop on the host backend (bitwise: every
 * device op equals its host twin, tests/gpu/test_kernels.c). The engine
 * works on a non-blocking stream of its own, so every ordering with the
 * caller's streams goes through the events it records and waits on:
 *
 *   - a non-blocking caller stream S (no ordering with the legacy stream),
 *     made busy for 100 ms before every acquire, on which the parameter is
 *     read (zc_param_acquire(p, S)) and the gradient written, with pinned
 *     host staging buffers; the gradient copy is waited for before
 *     zc_grad_ready (zc_engine_options.stream is left NULL);
 *   - the gradient written on a second, blocking stream G and handed back
 *     without a host wait, zc_engine_options.stream NULL: zc_grad_ready
 *     records its event on the legacy default stream, which CUDA orders
 *     after all earlier work of blocking streams, so the reduction waits
 *     for G;
 *   - zc_engine_options.stream = U, a non-blocking stream: the backward
 *     pass makes no host wait at all. Each gradient is copied on U after
 *     U was made busy for 100 ms (a reduction that did not wait for U would
 *     read a zero or stale gradient), and each release follows 100 ms of
 *     work on S, which the engine's stream must wait for - so the next
 *     chunk's zero-fill on the engine's stream lands late, and a U that
 *     did not wait for it (zc_grad_buffer) would have its gradient
 *     overwritten by zeros (stages 2/3, whose buffers are zeroed per chunk).
 *
 * Stages 0-3, W = 1 and 2 ranks as threads sharing one GPU (local
 * communicator), bf16; overlap_comm as the stage defaults it (on for stage
 * 3). Skips without a GPU. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "base/dtype.h"
#include "gpu_common.h"
#include "helpers.h"
#include "kernels/kernels.h"
#include "zeroc/zeroc.h"

#define NP 4
#define STEPS 3
static const int64_t SIZES[NP] = {900, 31, 4097, 2};

typedef enum grad_path { VIA_CALLER_STREAM, VIA_BLOCKING_STREAM, VIA_OPTIONS_STREAM } grad_path;

typedef struct run {
    zc_device_kind kind;
    grad_path path;
    int stage, world;
    zc_comm *comms[2];
    zc_config *cfg;
    float *master[NP];
    double norm[STEPS];
    char failure[512];
    pthread_mutex_t mu;
} run;

static void fail(run *R, int rank, const char *what)
{
    pthread_mutex_lock(&R->mu);
    if (!R->failure[0])
        snprintf(R->failure, sizeof R->failure, "rank %d: %s: %s", rank, what, zc_last_error());
    pthread_mutex_unlock(&R->mu);
    /* A rank that stops would leave the others waiting in a collective. */
    fprintf(stderr, "%s\n", R->failure);
    abort();
}

#define RCHECK(call)                      \
    do {                                  \
        if ((call) != ZC_OK)              \
            fail(R, rank, #call);         \
    } while (0)
#define CCHECK(call)                      \
    do {                                  \
        if ((call) != cudaSuccess)        \
            fail(R, rank, #call);         \
    } while (0)

/* Host side of one rank: the same arithmetic on either backend; only where
 * the bytes move differs. */
static void rank_main(int rank, void *arg)
{
    run *R = arg;
    const int cuda = R->kind == ZC_DEVICE_CUDA;
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = R->kind;
    eo.device_index = 0;
    eo.bucket_elems = 1024;
    cudaStream_t U = NULL; /* the compute stream named in the options */
    if (cuda && R->path == VIA_OPTIONS_STREAM) {
        CCHECK(cudaStreamCreateWithFlags(&U, cudaStreamNonBlocking));
        eo.stream = U;
    }
    zc_engine *eng = NULL;
    RCHECK(zc_engine_create(&eng, R->cfg, R->comms[rank], &eo));
    zc_param *P[NP];
    for (int i = 0; i < NP; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        P[i] = zc_param_add(eng, name, &SIZES[i], 1, 0);
        if (!P[i])
            fail(R, rank, "zc_param_add");
    }
    RCHECK(zc_engine_build(eng));
    for (int i = 0; i < NP; i++) {
        float *v = malloc((size_t)SIZES[i] * sizeof(float));
        for (int64_t k = 0; k < SIZES[i]; k++)
            v[k] = 0.25f * (float)t_noise(5, 0, 0, 0, i, k);
        RCHECK(zc_param_load(eng, P[i], v));
        free(v);
    }
    cudaStream_t S = NULL, G = NULL;
    uint16_t *hp = NULL, *hg = NULL; /* pinned staging on CUDA */
    uint16_t *hgs[NP] = {0};         /* per parameter: VIA_OPTIONS_STREAM */
    size_t maxn = 0;
    for (int i = 0; i < NP; i++)
        maxn = (size_t)SIZES[i] > maxn ? (size_t)SIZES[i] : maxn;
    if (cuda) {
        CCHECK(cudaStreamCreateWithFlags(&S, cudaStreamNonBlocking));
        CCHECK(cudaStreamCreate(&G));
        CCHECK(cudaMallocHost((void **)&hp, maxn * 2));
        CCHECK(cudaMallocHost((void **)&hg, maxn * 2));
        for (int i = 0; i < NP; i++)
            CCHECK(cudaMallocHost((void **)&hgs[i], maxn * 2));
    } else {
        hp = malloc(maxn * 2);
        hg = malloc(maxn * 2);
        for (int i = 0; i < NP; i++)
            hgs[i] = malloc(maxn * 2);
    }
    for (int s = 0; s < STEPS && R->path == VIA_OPTIONS_STREAM; s++) {
        /* Forward: read every parameter on S and compute its gradient. */
        for (int i = 0; i < NP; i++) {
            size_t n = (size_t)SIZES[i];
            if (cuda)
                CCHECK(zc_k_sleep(100, S));
            void *pv = zc_param_acquire(eng, P[i], cuda ? (void *)S : NULL);
            if (!pv)
                fail(R, rank, "zc_param_acquire");
            if (cuda) {
                CCHECK(cudaMemcpyAsync(hp, pv, n * 2, cudaMemcpyDeviceToHost, S));
                CCHECK(cudaStreamSynchronize(S));
            } else {
                memcpy(hp, pv, n * 2);
            }
            for (size_t k = 0; k < n; k++) {
                float g = (float)t_noise(9, rank, s, 0, i, (int64_t)k) +
                          0.05f * zc__load_f32(hp, ZC_DTYPE_BF16, k);
                zc__store_f32(hgs[i], ZC_DTYPE_BF16, k, g);
            }
            RCHECK(zc_param_release(eng, P[i], cuda ? (void *)S : NULL));
        }
        /* Backward in reverse, without a host wait: the gradient lands late
         * on U, and every release hands the engine's stream 100 ms of S. */
        for (int i = NP - 1; i >= 0; i--) {
            size_t n = (size_t)SIZES[i];
            if (!zc_param_acquire(eng, P[i], cuda ? (void *)S : NULL))
                fail(R, rank, "zc_param_acquire");
            void *gv = zc_grad_buffer(eng, P[i]);
            if (!gv)
                fail(R, rank, "zc_grad_buffer");
            if (cuda) {
                CCHECK(zc_k_sleep(100, U));
                CCHECK(cudaMemcpyAsync(gv, hgs[i], n * 2, cudaMemcpyHostToDevice, U));
            } else {
                memcpy(gv, hgs[i], n * 2);
            }
            RCHECK(zc_grad_ready(eng, P[i]));
            if (cuda)
                CCHECK(zc_k_sleep(100, S));
            RCHECK(zc_param_release(eng, P[i], cuda ? (void *)S : NULL));
        }
        zc_step_info info;
        RCHECK(zc_step(eng, &info));
        if (cuda)
            CCHECK(cudaStreamSynchronize(U)); /* hgs[] are rewritten next step */
        if (rank == 0)
            R->norm[s] = info.grad_norm;
    }
    for (int s = 0; s < STEPS && R->path != VIA_OPTIONS_STREAM; s++) {
        for (int i = 0; i < NP; i++) {
            size_t n = (size_t)SIZES[i];
            /* Busy caller stream: whatever the engine does not order after
             * S would run first and be caught by the comparison. */
            if (cuda)
                CCHECK(zc_k_sleep(100, S));
            void *pv = zc_param_acquire(eng, P[i], cuda ? (void *)S : NULL);
            void *gv = zc_grad_buffer(eng, P[i]);
            if (!pv || !gv)
                fail(R, rank, "acquire/grad_buffer");
            if (cuda) {
                CCHECK(cudaMemcpyAsync(hp, pv, n * 2, cudaMemcpyDeviceToHost, S));
                CCHECK(cudaStreamSynchronize(S));
            } else {
                memcpy(hp, pv, n * 2);
            }
            for (size_t k = 0; k < n; k++) {
                float g = (float)t_noise(9, rank, s, 0, i, (int64_t)k) +
                          0.05f * zc__load_f32(hp, ZC_DTYPE_BF16, k);
                zc__store_f32(hg, ZC_DTYPE_BF16, k, g);
            }
            if (!cuda) {
                memcpy(gv, hg, n * 2);
            } else if (R->path == VIA_CALLER_STREAM) {
                CCHECK(cudaMemcpyAsync(gv, hg, n * 2, cudaMemcpyHostToDevice, S));
                CCHECK(cudaStreamSynchronize(S)); /* S is not options.stream */
            } else {
                /* Blocking stream G, made busy so the copy lands late, and
                 * no host wait before zc_grad_ready: its event is recorded
                 * on the legacy stream (options.stream NULL), which waits
                 * for blocking streams. */
                CCHECK(zc_k_sleep(100, G));
                CCHECK(cudaMemcpyAsync(gv, hg, n * 2, cudaMemcpyHostToDevice, G));
            }
            RCHECK(zc_grad_ready(eng, P[i]));
            RCHECK(zc_param_release(eng, P[i], cuda ? (void *)S : NULL));
            if (cuda && R->path == VIA_BLOCKING_STREAM)
                CCHECK(cudaStreamSynchronize(G)); /* hg is reused next parameter */
        }
        zc_step_info info;
        RCHECK(zc_step(eng, &info));
        if (rank == 0)
            R->norm[s] = info.grad_norm;
    }
    for (int i = 0; i < NP; i++) {
        float *buf = malloc((size_t)SIZES[i] * sizeof(float));
        RCHECK(zc_param_gather_master(eng, P[i], buf));
        if (rank == 0)
            R->master[i] = buf;
        else
            free(buf);
    }
    /* The engine first: it waits for its work, which may wait on U. */
    zc_engine_destroy(eng);
    if (cuda) {
        cudaStreamDestroy(S);
        cudaStreamDestroy(G);
        if (U)
            cudaStreamDestroy(U);
        cudaFreeHost(hp);
        cudaFreeHost(hg);
        for (int i = 0; i < NP; i++)
            cudaFreeHost(hgs[i]);
    } else {
        free(hp);
        free(hg);
        for (int i = 0; i < NP; i++)
            free(hgs[i]);
    }
}

static void run_once(run *R)
{
    cr_assert_eq(zc_config_create(&R->cfg), ZC_OK);
    char v[16];
    snprintf(v, sizeof v, "%d", R->stage);
    cr_assert_eq(zc_config_set(R->cfg, "zero_optimization.stage", v), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc_config_set(R->cfg, "train_micro_batch_size_per_gpu", "1"), ZC_OK);
    cr_assert_eq(zc_config_set(R->cfg, "bf16.enabled", "true"), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc_comm_local_world(R->world, R->comms), ZC_OK, "%s", zc_last_error());
    pthread_mutex_init(&R->mu, NULL);
    t_run_ranks(R->world, rank_main, R);
    cr_assert_eq(R->failure[0], 0, "%s", R->failure);
    for (int r = 0; r < R->world; r++)
        zc_comm_destroy(R->comms[r]);
    zc_config_destroy(R->cfg);
    pthread_mutex_destroy(&R->mu);
}

static void equivalence(grad_path path)
{
    zc_device *probe;
    g_open_or_skip(&probe);
    probe->ops->destroy(probe);
    for (int stage = 0; stage <= 3; stage++)
        for (int world = 1; world <= 2; world++) {
            run H = {.kind = ZC_DEVICE_HOST, .path = path, .stage = stage, .world = world};
            run G = {.kind = ZC_DEVICE_CUDA, .path = path, .stage = stage, .world = world};
            run_once(&H);
            run_once(&G);
            for (int s = 0; s < STEPS; s++)
                cr_assert(memcmp(&G.norm[s], &H.norm[s], sizeof(double)) == 0,
                          "stage %d W %d step %d: norm %a vs host %a", stage, world, s, G.norm[s],
                          H.norm[s]);
            for (int i = 0; i < NP; i++) {
                for (int64_t k = 0; k < SIZES[i]; k++)
                    cr_assert_eq(zc__f32_bits(G.master[i][k]), zc__f32_bits(H.master[i][k]),
                                 "stage %d W %d w%d[%lld]: gpu %a host %a", stage, world, i,
                                 (long long)k, G.master[i][k], H.master[i][k]);
                free(H.master[i]), free(G.master[i]);
            }
        }
    t_assert_no_leaks();
}

Test(gpu_engine_streams, nonblocking_caller_stream_and_pinned_buffers, .timeout = 600)
{
    equivalence(VIA_CALLER_STREAM);
}

Test(gpu_engine_streams, gradient_written_on_another_blocking_stream, .timeout = 600)
{
    equivalence(VIA_BLOCKING_STREAM);
}

Test(gpu_engine_streams, gradient_written_on_options_stream_without_host_wait, .timeout = 600)
{
    equivalence(VIA_OPTIONS_STREAM);
}
