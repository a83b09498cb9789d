/* fp16 with gradient accumulation: a window whose sum overflows fp16 but
 * whose mean does not is not an overflow, in any stage.
 *
 * World 2, K = 8 micro-steps, dynamic loss scale 2^16 with hysteresis 1.
 * Every micro-step writes the same gradient g = +-V into every element on
 * both ranks (the sign alternates by element), so
 *   window sum per rank = 8 V,  window mean = V,  sum of the ranks' means = 2 V.
 * Window 0 and 2: V = 20000: the sum (160000) exceeds fp16's 65504, the mean
 *   and the reduced value 2 V = 40000 do not: no overflow.
 * Window 1: V = 40000: 2 V = 80000 overflows the reduction in every stage
 *   (stages 2/3 reduce each micro-step's 2 V too): skipped, scale halved.
 * Expected, whatever the stage: skipped {0, 1, 0}, scale used {2^16, 2^16,
 * 2^15}, final scale 2^15; and since the averaged unscaled gradient is the
 * same +-V / scale in every element, the two Adam steps (bias corrected, no
 * decay, no clipping) move every element by the same amount, computed here
 * in double, against the sign of its gradient. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/dtype.h"
#include "helpers.h"
#include "zeroc/zeroc.h"

#define W 2
#define K 8
#define WINDOWS 3
#define NP 2
static const int64_t numel[NP] = {300, 700};
static const float window_value[WINDOWS] = {20000.0f, 40000.0f, 20000.0f};
#define LR 1e-3
#define EPS 1e-8
#define B1 0.9
#define B2 0.999
#define INIT 0.5f

typedef struct fa_run {
    int stage;
    zc_comm *comms[W];
    zc_step_info info[W][WINDOWS];
    double final_scale[W];
    float master[NP][700]; /* rank 0's gathered fp32 master */
    char err[W][512];
} fa_run;

#define RCHECK(call)                                                                     \
    do {                                                                                 \
        zc_status rc_ = (call);                                                          \
        if (rc_ != ZC_OK) {                                                              \
            snprintf(r->err[rank], sizeof r->err[rank], "rank %d: %s: %s", rank, #call,  \
                     zc_last_error());                                                   \
            goto out;                                                                    \
        }                                                                                \
    } while (0)

static float grad_sign(int64_t j) { return (j & 1) ? -1.0f : 1.0f; }

static void fa_rank(int rank, void *arg)
{
    fa_run *r = arg;
    zc_config *cfg = NULL;
    zc_engine *e = NULL;
    static float scratch[W][700];
    RCHECK(zc_config_create(&cfg));
    RCHECK(zc_config_set_int(cfg, "zero_optimization.stage", r->stage));
    RCHECK(zc_config_set_int(cfg, "gradient_accumulation_steps", K));
    RCHECK(zc_config_set_bool(cfg, "fp16.enabled", true));
    RCHECK(zc_config_set_int(cfg, "fp16.initial_scale_power", 16));
    RCHECK(zc_config_set_int(cfg, "fp16.hysteresis", 1));
    RCHECK(zc_config_set_double(cfg, "gradient_clipping", 0.0));
    RCHECK(zc_config_set_double(cfg, "optimizer.params.lr", LR));
    RCHECK(zc_config_set_double(cfg, "optimizer.params.eps", EPS));
    RCHECK(zc_config_set(cfg, "optimizer.params.betas", "[0.9, 0.999]"));
    RCHECK(zc_config_set_double(cfg, "optimizer.params.weight_decay", 0.0));
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = 512;
    RCHECK(zc_engine_create(&e, cfg, r->comms[rank], &eo));
    zc_param *p[NP];
    for (int i = 0; i < NP; i++) {
        char name[8] = {'p', (char)('0' + i), 0};
        p[i] = zc_param_add(e, name, &numel[i], 1, 0);
        RCHECK(p[i] ? ZC_OK : ZC_ERR_INVALID_ARG);
    }
    RCHECK(zc_engine_build(e));
    for (int i = 0; i < NP; i++) {
        for (int64_t j = 0; j < numel[i]; j++)
            scratch[rank][j] = INIT;
        RCHECK(zc_param_load(e, p[i], scratch[rank]));
    }
    for (int w = 0; w < WINDOWS; w++) {
        for (int m = 0; m < K; m++) {
            for (int i = NP - 1; i >= 0; i--) {
                RCHECK(zc_param_acquire(e, p[i], NULL) ? ZC_OK : ZC_ERR_INVALID_ARG);
                void *g = zc_grad_buffer(e, p[i]);
                RCHECK(g ? ZC_OK : ZC_ERR_INVALID_ARG);
                for (int64_t j = 0; j < numel[i]; j++)
                    zc__store_f32(g, ZC_DTYPE_F16, (size_t)j, grad_sign(j) * window_value[w]);
                RCHECK(zc_grad_ready(e, p[i]));
                RCHECK(zc_param_release(e, p[i], NULL));
            }
            if (m + 1 < K)
                RCHECK(zc_micro_step_end(e));
        }
        RCHECK(zc_step(e, &r->info[rank][w]));
    }
    r->final_scale[rank] = zc_loss_scale(e);
    for (int i = 0; i < NP; i++)
        RCHECK(zc_param_gather_master(e, p[i], rank == 0 ? r->master[i] : scratch[rank]));
out:
    zc_engine_destroy(e);
    zc_config_destroy(cfg);
}

static void check_stage(int stage)
{
    static fa_run r;
    memset(&r, 0, sizeof r);
    r.stage = stage;
    setenv("ZC_COMM_TIMEOUT", "60", 0);
    cr_assert_eq(zc_comm_local_world(W, r.comms), ZC_OK);
    t_run_ranks(W, fa_rank, &r);
    for (int k = 0; k < W; k++)
        zc_comm_destroy(r.comms[k]);
    for (int k = 0; k < W; k++)
        cr_assert_eq(r.err[k][0], 0, "stage %d: %s", stage, r.err[k]);

    const bool want_skip[WINDOWS] = {false, true, false};
    const double want_scale[WINDOWS] = {65536.0, 65536.0, 32768.0};
    for (int rank = 0; rank < W; rank++) {
        for (int w = 0; w < WINDOWS; w++) {
            cr_assert_eq(r.info[rank][w].skipped, want_skip[w],
                         "stage %d rank %d window %d: skipped %d, expected %d (window sum %g > "
                         "65504 > window mean %g)",
                         stage, rank, w, r.info[rank][w].skipped, want_skip[w],
                         K * (double)window_value[w], (double)window_value[w]);
            cr_assert(r.info[rank][w].loss_scale == want_scale[w],
                      "stage %d rank %d window %d: loss scale %g, expected %g", stage, rank, w,
                      r.info[rank][w].loss_scale, want_scale[w]);
        }
        cr_assert(r.final_scale[rank] == 32768.0, "stage %d rank %d: final scale %g", stage,
                  rank, r.final_scale[rank]);
    }
    /* Adam (bias-corrected, no decay) on the same |g| in every element:
     * g = V / scale, averaged over ranks and micro-steps; skipped windows
     * change nothing, not even the step count. */
    double moved = 0.0, m = 0.0, v = 0.0;
    int t = 0;
    for (int w = 0; w < WINDOWS; w++) {
        if (want_skip[w])
            continue;
        const double g = (double)window_value[w] / want_scale[w];
        t++;
        m = B1 * m + (1 - B1) * g;
        v = B2 * v + (1 - B2) * g * g;
        const double mh = m / (1 - pow(B1, t)), vh = v / (1 - pow(B2, t));
        moved += LR * mh / (sqrt(vh) + EPS);
    }
    for (int i = 0; i < NP; i++)
        for (int64_t j = 0; j < numel[i]; j++) {
            const double want = (double)INIT - grad_sign(j) * moved;
            cr_assert_leq(fabs((double)r.master[i][j] - want), 1e-7,
                          "stage %d p%d[%lld]: %.9g, expected %.9g", stage, i, (long long)j,
                          (double)r.master[i][j], want);
        }
    t_assert_no_leaks();
}

Test(fp16_accum, window_sum_overflows_mean_fits_stage0) { check_stage(0); }
Test(fp16_accum, window_sum_overflows_mean_fits_stage1) { check_stage(1); }
Test(fp16_accum, window_sum_overflows_mean_fits_stage2) { check_stage(2); }
Test(fp16_accum, window_sum_overflows_mean_fits_stage3) { check_stage(3); }
