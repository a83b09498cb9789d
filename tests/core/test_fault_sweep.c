/* A failure on one rank between two collectives never splits the ranks.
 *
 * World 4, stages 2 and 3 (stage 3 with prefetch), the t_engine model, two
 * accumulation windows of two micro-steps, then every rank gathers the fp32
 * master. A clean run counts the allocations each rank makes after
 * zc_engine_build (the engine counts them for ZC_FAULTS even when no item is
 * set). Then for every rank R and every K up to that count (at least
 * SWEEP_MIN_K, so the sweep runs even when nothing is left to hit),
 * ZC_FAULTS = alloc:R:K and the run is repeated. Allowed outcomes:
 *   - every rank finishes with ZC_OK and its master equal, bit for bit, to
 *     the clean run's;
 *   - every rank fails, with the same status and the same message, and the
 *     message names rank R; the engine is broken on every rank afterwards
 *     (a further call is refused, naming rank R's failure).
 * Anything else - some ranks OK and others not, different messages, or ZC_OK
 * with different parameters - is a split. The communicator's timeout is
 * short, so a split shows as a timeout on the waiting ranks, not a hang.
 *
 * Two models. The t_engine model's buffers all fit what zc_engine_build
 * reserves (the buffer pools, the stage-3 trace), so it makes no allocation
 * after build and the test asserts that. The hold-all model (below) makes
 * stage 3 gather more chunks at once than the reserve holds, so its forward
 * passes allocate, agreed across ranks, and every such K must break every
 * rank alike. Before the pools, the very first injected fault of the
 * t_engine model (rank 0's zc_param_load staging) failed rank 0 alone while
 * ranks 1-3 waited for it in their next collective. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "helpers.h"
#include "t_engine.h"

#define W 4
#define STEPS 2
#define ACCUM 2
#define SWEEP_MIN_K 3

/* The second model: HA_NP equal chunks, a forward pass that acquires every
 * parameter before releasing any (as a model without per-layer release
 * would), prefetch 512 elements: stage 3 reserves gather buffers for a
 * working set of 3 chunks (reserve.c), so every forward gathers 5 chunks
 * into buffers allocated beyond the reserve - allocations after build whose
 * outcome the ranks agree on - and skips prefetches that find no buffer. */
#define HA_NP 8
#define HA_N 500

/* Room for either model's gathered master. */
static size_t master_elems(void)
{
    const int64_t t = t_total_numel();
    return (size_t)(t > HA_NP * HA_N ? t : HA_NP * HA_N);
}

typedef enum sweep_model { MODEL_T_ENGINE = 0, MODEL_HOLD_ALL } sweep_model;

typedef struct sweep_run {
    sweep_model model;
    int stage;
    t_run run;
    zc_comm *comms[W];
    zc_status rc[W];
    char msg[W][512];
    zc_status after_rc[W];
    char after_msg[W][1024];
    int64_t allocs_after_build[W];
    float *master[W]; /* each rank's own gathered copy */
} sweep_run;

static zc_status drive(t_ctx *x, float *master)
{
    for (int s = 0; s < STEPS; s++) {
        zc_step_info info;
        ZC_CHECK(t_train_step(x, s, &info));
    }
    int64_t off = 0;
    for (int i = 0; i < T_NPARAMS; i++) {
        ZC_CHECK(zc_param_gather_master(x->eng, x->p[i], master + off));
        off += t_numel[i];
    }
    return ZC_OK;
}

static float ha_grad(int rank, int s, int m, int i, int64_t j, float w)
{
    return 0.05f * w + (float)t_noise(0x5eed, rank, s, m, i, j);
}

/* Fails with ZC_ERR_INTERNAL when a call returns NULL; zc_last_error holds
 * the library's message. */
static zc_status ha_drive(zc_engine *e, zc_param **p, int rank, float *master)
{
    for (int s = 0; s < STEPS; s++) {
        for (int m = 0; m < ACCUM; m++) {
            for (int i = 0; i < HA_NP; i++)
                if (!zc_param_acquire(e, p[i], NULL))
                    return ZC_ERR_INTERNAL;
            for (int i = 0; i < HA_NP; i++)
                ZC_CHECK(zc_param_release(e, p[i], NULL));
            for (int i = HA_NP - 1; i >= 0; i--) {
                const float *w = zc_param_acquire(e, p[i], NULL);
                float *g = w ? zc_grad_buffer(e, p[i]) : NULL;
                if (!g)
                    return ZC_ERR_INTERNAL;
                for (int64_t j = 0; j < HA_N; j++)
                    g[j] = ha_grad(rank, s, m, i, j, w[j]);
                ZC_CHECK(zc_grad_ready(e, p[i]));
                ZC_CHECK(zc_param_release(e, p[i], NULL));
            }
            if (m + 1 < ACCUM)
                ZC_CHECK(zc_micro_step_end(e));
        }
        ZC_CHECK(zc_step(e, NULL));
    }
    for (int i = 0; i < HA_NP; i++)
        ZC_CHECK(zc_param_gather_master(e, p[i], master + (int64_t)i * HA_N));
    return ZC_OK;
}

static void ha_rank(sweep_run *sr, int rank)
{
    zc_config *cfg = NULL;
    zc_engine *e = NULL;
    zc_param *p[HA_NP];
    static float init[W][HA_N];
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage", sr->stage), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "gradient_accumulation_steps", ACCUM), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage3_param_persistence_threshold",
                                   0), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage3_prefetch_bucket_size", 512),
                 ZC_OK);
    /* Released chunks are freed (reuse distance 0), the schedule the gather
     * counts below describe. */
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage3_max_reuse_distance", 0), ZC_OK);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = 512; /* one chunk per parameter, 512 padded elements at W = 4 */
    zc_status rc = zc_engine_create(&e, cfg, sr->comms[rank], &eo);
    for (int i = 0; i < HA_NP && rc == ZC_OK; i++) {
        char name[8];
        snprintf(name, sizeof name, "h%d", i);
        const int64_t n = HA_N;
        p[i] = zc_param_add(e, name, &n, 1, 0);
        rc = p[i] ? ZC_OK : ZC_ERR_INTERNAL;
    }
    if (rc == ZC_OK)
        rc = zc_engine_build(e);
    for (int i = 0; i < HA_NP && rc == ZC_OK; i++) {
        for (int64_t j = 0; j < HA_N; j++)
            init[rank][j] = 0.5f * (float)t_noise(0x1417, 0, 0, 0, i, j);
        rc = zc_param_load(e, p[i], init[rank]);
    }
    if (rc == ZC_OK)
        rc = ha_drive(e, p, rank, sr->master[rank]);
    sr->rc[rank] = rc;
    if (rc != ZC_OK) {
        snprintf(sr->msg[rank], sizeof sr->msg[rank], "%s", zc_last_error());
        zc_stats st = {.size = sizeof st};
        sr->after_rc[rank] = e ? zc_engine_stats(e, &st) : ZC_ERR_INVALID_ARG;
        snprintf(sr->after_msg[rank], sizeof sr->after_msg[rank], "%s", zc_last_error());
    }
    if (e)
        sr->allocs_after_build[rank] = e->faults.seen[ZC_FAULT_ALLOC];
    zc_engine_destroy(e);
    zc_config_destroy(cfg);
}

static void sweep_rank(int rank, void *arg)
{
    sweep_run *sr = arg;
    if (sr->model == MODEL_HOLD_ALL) {
        ha_rank(sr, rank);
        return;
    }
    t_ctx x;
    zc_status rc = t_ctx_open(&x, &sr->run, rank, sr->comms[rank]);
    if (rc == ZC_OK)
        rc = drive(&x, sr->master[rank]);
    sr->rc[rank] = rc;
    if (rc != ZC_OK) {
        snprintf(sr->msg[rank], sizeof sr->msg[rank], "%s", zc_last_error());
        zc_stats st = {.size = sizeof st};
        sr->after_rc[rank] = x.eng ? zc_engine_stats(x.eng, &st) : ZC_ERR_INVALID_ARG;
        snprintf(sr->after_msg[rank], sizeof sr->after_msg[rank], "%s", zc_last_error());
    }
    if (x.eng)
        sr->allocs_after_build[rank] = x.eng->faults.seen[ZC_FAULT_ALLOC];
    t_ctx_close(&x);
}

static void run_sweep_once(sweep_run *sr, sweep_model model, int stage, const char *faults)
{
    for (int r = 0; r < W; r++)
        free(sr->master[r]);
    memset(sr, 0, sizeof *sr);
    sr->model = model;
    sr->stage = stage;
    t_run_init(&sr->run, stage, W, ZC_DTYPE_BF16);
    sr->run.steps = STEPS;
    sr->run.accum = ACCUM;
    if (faults)
        setenv("ZC_FAULTS", faults, 1);
    else
        unsetenv("ZC_FAULTS");
    for (int r = 0; r < W; r++)
        sr->master[r] = calloc(master_elems(), sizeof(float));
    cr_assert_eq(zc_comm_local_world(W, sr->comms), ZC_OK);
    t_run_ranks(W, sweep_rank, sr);
    for (int r = 0; r < W; r++)
        zc_comm_destroy(sr->comms[r]);
    unsetenv("ZC_FAULTS");
}

static void free_sweep(sweep_run *sr)
{
    for (int r = 0; r < W; r++) {
        free(sr->master[r]);
        sr->master[r] = NULL;
    }
}

static void check_stage(sweep_model model, int stage)
{
    /* A split makes the waiting ranks time out: keep that short. */
    setenv("ZC_COMM_TIMEOUT", "2", 1);
    static sweep_run clean, got;
    const size_t bytes = master_elems() * sizeof(float);
    run_sweep_once(&clean, model, stage, NULL);
    for (int r = 0; r < W; r++)
        cr_assert_eq(clean.rc[r], ZC_OK, "clean run, rank %d: %s", r, clean.msg[r]);
    for (int r = 1; r < W; r++)
        cr_assert(memcmp(clean.master[r], clean.master[0], bytes) == 0,
                  "clean run: rank %d's master differs from rank 0's", r);
    int64_t total_k = 0, broken = 0, harmless = 0, allocs = 0;
    for (int R = 0; R < W; R++) {
        const int64_t n = clean.allocs_after_build[R];
        allocs += n;
        for (int64_t k = 1; k <= (n > SWEEP_MIN_K ? n : SWEEP_MIN_K); k++) {
            char spec[64];
            snprintf(spec, sizeof spec, "alloc:%d:%lld", R, (long long)k);
            run_sweep_once(&got, model, stage, spec);
            total_k++;
            int nok = 0;
            for (int r = 0; r < W; r++)
                nok += got.rc[r] == ZC_OK;
            if (nok == W) {
                harmless++;
                for (int r = 0; r < W; r++)
                    cr_assert(memcmp(got.master[r], clean.master[r], bytes) == 0,
                              "stage %d %s: every rank returned ZC_OK but rank %d's "
                              "parameters differ from the clean run",
                              stage, spec, r);
                continue;
            }
            cr_assert_eq(nok, 0,
                         "stage %d %s: %d of %d ranks finished and the others failed (rank %d: "
                         "%s)",
                         stage, spec, nok, W, R, got.msg[R]);
            broken++;
            char rank_tag[32];
            snprintf(rank_tag, sizeof rank_tag, "rank %d", R);
            for (int r = 0; r < W; r++) {
                cr_assert_eq(got.rc[r], got.rc[0], "stage %d %s: rank %d failed with %s, rank 0 "
                             "with %s", stage, spec, r, zc_status_str(got.rc[r]),
                             zc_status_str(got.rc[0]));
                cr_assert_str_eq(got.msg[r], got.msg[0],
                                 "stage %d %s: rank %d and rank 0 report different failures",
                                 stage, spec, r);
                cr_assert(strstr(got.msg[r], rank_tag), "stage %d %s: '%s' does not name %s",
                          stage, spec, got.msg[r], rank_tag);
                cr_assert_neq(got.after_rc[r], ZC_OK,
                              "stage %d %s: rank %d's engine still works after the failure",
                              stage, spec, r);
                cr_assert(strstr(got.after_msg[r], "broken") &&
                              strstr(got.after_msg[r], rank_tag),
                          "stage %d %s: rank %d: a later call says '%s', not that the engine "
                          "is broken by the failure on %s",
                          stage, spec, r, got.after_msg[r], rank_tag);
            }
        }
    }
    cr_log_info("%s, stage %d: %lld allocations after build on %d ranks; %lld faults set: "
                "%lld broke every rank alike, %lld finished equal to the clean run",
                model == MODEL_HOLD_ALL ? "hold-all model" : "t_engine model", stage,
                (long long)allocs, W, (long long)total_k, (long long)broken,
                (long long)harmless);
    for (int R = 0; R < W; R++) {
        if (model == MODEL_T_ENGINE || stage != 3)
            cr_assert_eq(clean.allocs_after_build[R], 0,
                         "stage %d rank %d: %lld allocations after zc_engine_build; this "
                         "model's buffers are all reserved at build",
                         stage, R, (long long)clean.allocs_after_build[R]);
        else
            cr_assert_eq(clean.allocs_after_build[R], (int64_t)STEPS * ACCUM * (HA_NP - 3),
                         "stage 3 rank %d: %lld gather buffers beyond the reserve, expected "
                         "%d per forward pass",
                         R, (long long)clean.allocs_after_build[R], HA_NP - 3);
    }
    if (model == MODEL_HOLD_ALL && stage == 3)
        cr_assert_eq(broken, allocs, "every fault that hit must break every rank alike");
    free_sweep(&clean);
    free_sweep(&got);
    t_assert_no_leaks();
}

Test(fault_sweep, stage2_world4, .timeout = 600) { check_stage(MODEL_T_ENGINE, 2); }
Test(fault_sweep, stage3_world4, .timeout = 600) { check_stage(MODEL_T_ENGINE, 3); }
Test(fault_sweep, stage2_world4_hold_all, .timeout = 600) { check_stage(MODEL_HOLD_ALL, 2); }
Test(fault_sweep, stage3_world4_hold_all, .timeout = 600) { check_stage(MODEL_HOLD_ALL, 3); }
