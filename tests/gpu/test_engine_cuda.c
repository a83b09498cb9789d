/* The engine on the CUDA backend equals the engine on the host, through the
 * public API only: stages 0-3, W = 1..4 ranks as threads of this process
 * sharing one GPU (the local communicator, each rank its own engine and
 * streams), fp32, bf16 and fp16 (with an injected overflow so a step is
 * skipped). The gradients are a deterministic function of (rank, step,
 * parameter, element) plus a term in the parameter value read back from the
 * acquired buffer, so both runs see the same inputs only if the parameters
 * agree at every step.
 *
 * Claim checked: bitwise equal fp32 masters, norms and skip decisions - every
 * device op is bitwise equal to its host twin (tests/gpu/test_kernels.c) and
 * the reductions run in the same order. Skips without a GPU. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zc_build_config.h"

#if ZC_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "comm/comm.h"
#include "base/dtype.h"
#include "gpu_common.h"
#include "helpers.h"
#include "zeroc/zeroc.h"

#define NP 5
#define STEPS 4
static const int64_t SIZES[NP] = {700, 33, 128, 1, 515};

typedef struct run {
    zc_device_kind kind;
    int stage, world;
    zc_dtype dt;
    int accum;           /* micro-steps per step (0: 1) */
    bool acc16;          /* data_types.grad_accum_dtype = dt (16-bit accumulation) */
    const char *offload; /* offload_optimizer.device, or NULL */
    int nccl;            /* world 1 through zc_comm_init_env (NCCL) */
    zc_comm *comms[4];
    zc_config *cfg;
    float *master[NP];   /* rank 0's gathered masters */
    double norm[STEPS];
    int skipped[STEPS];
    double scale[STEPS];
    char failure[512];
    pthread_mutex_t mu;
} run;

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static float noise(int rank, int step, int p, int64_t i)
{
    uint64_t h = mix(mix(mix((uint64_t)rank + 1) ^ (uint64_t)step) ^ ((uint64_t)p << 32) ^ (uint64_t)i);
    return (float)((double)(h >> 11) * 0x1p-52 - 1.0);
}

static void copy_any(zc_device_kind kind, void *dst, const void *src, size_t bytes)
{
#if ZC_HAVE_CUDA
    if (kind == ZC_DEVICE_CUDA) {
        cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
        return;
    }
#endif
    memcpy(dst, src, bytes);
}

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

/* Micro-step m of step s: every parameter's gradient written and made
 * ready. The noise's step is s * K + m (s itself without accumulation). */
static void micro_step(run *R, int rank, zc_engine *eng, zc_param **P, int s, int m, int K)
{
    const size_t es = zc_dtype_size(R->dt);
    const float scale = (float)zc_loss_scale(eng);
    for (int i = 0; i < NP; i++) {
        size_t n = (size_t)SIZES[i];
        void *pv = zc_param_acquire(eng, P[i], NULL);
        void *gv = zc_grad_buffer(eng, P[i]);
        if (!pv || !gv)
            fail(R, rank, "acquire/grad_buffer");
        void *hp = malloc(n * es), *hg = malloc(n * es);
        copy_any(R->kind, hp, pv, n * es);
        for (size_t k = 0; k < n; k++) {
            float g = noise(rank, s * K + m, i, (int64_t)k) + 0.02f * zc__load_f32(hp, R->dt, k);
            /* fp16: one overflow on the last rank at step 2 (skipped). */
            if (R->dt == ZC_DTYPE_F16 && s == 2 && m == K - 1 && rank == R->world - 1 &&
                i == 1 && k == 3)
                g = INFINITY;
            zc__store_f32(hg, R->dt, k, g * scale);
        }
        copy_any(R->kind, gv, hg, n * es);
        free(hp), free(hg);
        RCHECK(zc_grad_ready(eng, P[i]));
        RCHECK(zc_param_release(eng, P[i], NULL));
    }
}

static void rank_main(int rank, void *arg)
{
    run *R = arg;
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = R->kind;
    eo.device_index = 0;
    eo.bucket_elems = 256;
    zc_engine *eng = NULL;
    RCHECK(zc_engine_create(&eng, R->cfg, R->comms[rank], &eo));
    zc_param *P[NP];
    for (int i = 0; i < NP; i++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", i);
        P[i] = zc_param_add(eng, name, &SIZES[i], 1, 0);
        if (!P[i])
            fail(R, rank, "zc_param_add");
    }
    RCHECK(zc_engine_build(eng));
    for (int i = 0; i < NP; i++) {
        float *v = malloc((size_t)SIZES[i] * sizeof(float));
        for (int64_t k = 0; k < SIZES[i]; k++)
            v[k] = 0.5f * noise(99, 0, i, k);
        RCHECK(zc_param_load(eng, P[i], v));
        free(v);
    }
    const int K = R->accum > 0 ? R->accum : 1;
    for (int s = 0; s < STEPS; s++) {
        for (int m = 0; m < K; m++) {
            micro_step(R, rank, eng, P, s, m, K);
            if (m + 1 < K)
                RCHECK(zc_micro_step_end(eng));
        }
        zc_step_info info;
        RCHECK(zc_step(eng, &info));
        if (rank == 0) {
            R->norm[s] = info.grad_norm;
            R->skipped[s] = info.skipped;
            R->scale[s] = info.loss_scale;
        }
    }
    for (int i = 0; i < NP; i++) {
        float *buf = malloc((size_t)SIZES[i] * sizeof(float));
        RCHECK(zc_param_gather_master(eng, P[i], buf));
        if (rank == 0)
            R->master[i] = buf;
        else
            free(buf);
    }
    zc_engine_destroy(eng);
}

static void run_once(run *R)
{
    cr_assert_eq(zc_config_create(&R->cfg), ZC_OK);
    char v[16];
    snprintf(v, sizeof v, "%d", R->stage);
    cr_assert_eq(zc_config_set(R->cfg, "zero_optimization.stage", v), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc_config_set(R->cfg, "train_micro_batch_size_per_gpu", "1"), ZC_OK);
    cr_assert_eq(zc_config_set(R->cfg, "gradient_clipping", "0.5"), ZC_OK);
    if (R->dt == ZC_DTYPE_BF16)
        cr_assert_eq(zc_config_set(R->cfg, "bf16.enabled", "true"), ZC_OK, "%s", zc_last_error());
    if (R->dt == ZC_DTYPE_F16) {
        cr_assert_eq(zc_config_set(R->cfg, "fp16.enabled", "true"), ZC_OK, "%s", zc_last_error());
        cr_assert_eq(zc_config_set(R->cfg, "fp16.initial_scale_power", "8"), ZC_OK);
    }
    if (R->accum > 1) {
        snprintf(v, sizeof v, "%d", R->accum);
        cr_assert_eq(zc_config_set(R->cfg, "gradient_accumulation_steps", v), ZC_OK, "%s",
                     zc_last_error());
    }
    if (R->acc16)
        cr_assert_eq(zc_config_set(R->cfg, "data_types.grad_accum_dtype",
                                   R->dt == ZC_DTYPE_F16 ? "\"fp16\"" : "\"bf16\""),
                     ZC_OK, "%s", zc_last_error());
    if (R->offload) {
        char dev[16];
        snprintf(dev, sizeof dev, "\"%s\"", R->offload);
        cr_assert_eq(zc_config_set(R->cfg, "zero_optimization.offload_optimizer.device", dev),
                     ZC_OK, "%s", zc_last_error());
    }
    if (R->nccl) {
        unsetenv("SLURM_PROCID");
        unsetenv("OMPI_COMM_WORLD_RANK");
        setenv("RANK", "0", 1);
        setenv("WORLD_SIZE", "1", 1);
        setenv("LOCAL_RANK", "0", 1);
        cr_assert_eq(zc_comm_init_env(&R->comms[0]), ZC_OK, "%s", zc_last_error());
        cr_assert_str_eq(R->comms[0]->ops->name, "nccl");
    } else {
        cr_assert_eq(zc_comm_local_world(R->world, R->comms), ZC_OK, "%s", zc_last_error());
    }
    pthread_mutex_init(&R->mu, NULL);
    t_run_ranks(R->world, rank_main, R);
    cr_assert_eq(R->failure[0], 0, "%s", R->failure);
    for (int r = 0; r < R->world; r++)
        zc_comm_destroy(R->comms[r]);
    zc_config_destroy(R->cfg);
    pthread_mutex_destroy(&R->mu);
}

static void compare(const run *H, const run *G)
{
    for (int s = 0; s < STEPS; s++) {
        cr_assert_eq(G->skipped[s], H->skipped[s], "stage %d W %d %s step %d: skip %d vs host %d",
                     H->stage, H->world, zc_dtype_name(H->dt), s, G->skipped[s], H->skipped[s]);
        cr_assert(memcmp(&G->norm[s], &H->norm[s], sizeof(double)) == 0,
                  "stage %d W %d %s step %d: norm %a vs host %a", H->stage, H->world,
                  zc_dtype_name(H->dt), s, G->norm[s], H->norm[s]);
        cr_assert_eq(G->scale[s], H->scale[s]);
    }
    for (int i = 0; i < NP; i++)
        for (int64_t k = 0; k < SIZES[i]; k++)
            cr_assert_eq(zc__f32_bits(G->master[i][k]), zc__f32_bits(H->master[i][k]),
                         "stage %d W %d %s p%d[%lld]: gpu %a host %a (%u ulp)", H->stage, H->world,
                         zc_dtype_name(H->dt), i, (long long)k, G->master[i][k], H->master[i][k],
                         t_ulp_diff_f32(G->master[i][k], H->master[i][k]));
}

static void equivalence(zc_dtype dt)
{
    zc_device *probe;
    g_open_or_skip(&probe);
    probe->ops->destroy(probe);
    for (int stage = 0; stage <= 3; stage++)
        for (int world = 1; world <= 4; world++) {
            run H = {.kind = ZC_DEVICE_HOST, .stage = stage, .world = world, .dt = dt};
            run G = {.kind = ZC_DEVICE_CUDA, .stage = stage, .world = world, .dt = dt};
            run_once(&H);
            run_once(&G);
            compare(&H, &G);
            if (dt == ZC_DTYPE_F16)
                cr_assert(H.skipped[2], "the injected overflow did not skip step 2");
            for (int i = 0; i < NP; i++)
                free(H.master[i]), free(G.master[i]);
        }
    t_assert_no_leaks();
}

Test(gpu_engine, cuda_equals_host_fp32, .timeout = 600) { equivalence(ZC_DTYPE_F32); }
Test(gpu_engine, cuda_equals_host_bf16, .timeout = 600) { equivalence(ZC_DTYPE_BF16); }
Test(gpu_engine, cuda_equals_host_fp16_with_skip, .timeout = 600) { equivalence(ZC_DTYPE_F16); }

/* 16-bit gradient accumulation (data_types.grad_accum_dtype = the working
 * dtype, three micro-steps): the device's accumulate_rounded and the 1 / K
 * scale at stages 0/1 (the full accumulator) and 2/3 (the device shard), and
 * under cpu offload the shard in pinned host memory fed by the copy stream -
 * bitwise the host path, which tests/core/test_accum_dtype.c holds to its
 * reference. */
Test(gpu_engine, cuda_equals_host_16bit_accumulation, .timeout = 600)
{
    zc_device *probe;
    g_open_or_skip(&probe);
    probe->ops->destroy(probe);
    static const zc_dtype dts[] = {ZC_DTYPE_BF16, ZC_DTYPE_F16};
    for (int di = 0; di < 2; di++)
        for (int stage = 0; stage <= 3; stage++)
            for (int world = 1; world <= 2; world++)
                for (int off = 0; off < (stage ? 2 : 1); off++) {
                    run H = {.kind = ZC_DEVICE_HOST, .stage = stage, .world = world,
                             .dt = dts[di], .accum = 3, .acc16 = true,
                             .offload = off ? "cpu" : NULL};
                    run G = H;
                    G.kind = ZC_DEVICE_CUDA;
                    run_once(&H);
                    run_once(&G);
                    compare(&H, &G);
                    for (int i = 0; i < NP; i++)
                        free(H.master[i]), free(G.master[i]);
                }
    t_assert_no_leaks();
}

/* NCCL with one rank (all a single GPU allows on NCCL 2.28) against the host
 * path's local communicator, every stage. */
Test(gpu_engine, nccl_one_rank_equals_host, .timeout = 600)
{
    if (!ZC_HAVE_NCCL)
        gpu_unavailable("no NCCL in this build");
    zc_device *probe;
    g_open_or_skip(&probe);
    probe->ops->destroy(probe);
    for (int stage = 0; stage <= 3; stage++) {
        run H = {.kind = ZC_DEVICE_HOST, .stage = stage, .world = 1, .dt = ZC_DTYPE_BF16};
        run G = {.kind = ZC_DEVICE_CUDA, .stage = stage, .world = 1, .dt = ZC_DTYPE_BF16,
                 .nccl = 1};
        run_once(&H);
        run_once(&G);
        compare(&H, &G);
        for (int i = 0; i < NP; i++)
            free(H.master[i]), free(G.master[i]);
    }
    t_assert_no_leaks();
}

/* fp32 views are for the host path: on a CUDA device the option is refused
 * at create, and without it the view calls are refused, naming the device
 * and changing nothing (the block can still be released). */
Test(gpu_engine, f32_views_refused_on_the_device)
{
    zc_device *probe;
    g_open_or_skip(&probe);
    probe->ops->destroy(probe);
    zc_config *cfg = NULL;
    zc_comm *comm = NULL;
    zc_engine *eng = NULL;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set_bool(cfg, "bf16.enabled", true), ZC_OK);
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_CUDA;
    eo.f32_view_chunks = 2;
    cr_assert_eq(zc_engine_create(&eng, cfg, comm, &eo), ZC_ERR_UNSUPPORTED);
    cr_assert_not_null(strstr(zc_last_error(), "host path"), "%s", zc_last_error());
    eo.f32_view_chunks = 0;
    cr_assert_eq(zc_engine_create(&eng, cfg, comm, &eo), ZC_OK, "%s", zc_last_error());
    const int64_t n = 100;
    zc_param *p = zc_param_add(eng, "w", &n, 1, 0);
    cr_assert_not_null(p);
    cr_assert_eq(zc_engine_build(eng), ZC_OK, "%s", zc_last_error());
    zc_block *b = NULL;
    cr_assert_eq(zc_block_create(eng, &p, 1, &b), ZC_OK);
    cr_assert_eq(zc_block_acquire(eng, b, NULL, NULL), ZC_OK);
    float *v[1];
    cr_assert_eq(zc_block_view_f32(eng, b, v), ZC_ERR_UNSUPPORTED);
    cr_assert_not_null(strstr(zc_last_error(), "cuda device"), "%s", zc_last_error());
    cr_assert_eq(zc_block_grad_buffers_f32(eng, b, v), ZC_ERR_UNSUPPORTED);
    cr_assert_eq(zc_block_release(eng, b, NULL), ZC_OK);
    zc_block_destroy(b);
    zc_engine_destroy(eng);
    zc_comm_destroy(comm);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}
