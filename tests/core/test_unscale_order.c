/* fp16.deepspeed_unscale_order: on a step on which the dynamic loss scale
 * grows, DeepSpeed updates the scaler first and divides the gradients (and
 * the norm it clips with) by the new, doubled scale. With the key, zeroc does
 * the same; without it, it unscales by the scale the gradients were made
 * with.
 *
 * Held by an identity, not by a copy of the rule: dividing by 2 * scale is
 * dividing a gradient of half the size by scale. So an engine with the key
 * (run A) must equal, bitwise and at every step, an engine without it that is
 * fed half the gradient on exactly the growth steps (run B) - halving an fp16
 * value, the fp64 sum of squares, its square root and the float grad_scale
 * are all exact here - while an engine without the key fed the same gradients
 * as A (run C) must equal A up to the first growth step and differ after it.
 * The growth steps are DeepSpeed's (tests/core/test_loss_scaler.c holds the
 * scaler to them): initial scale 2^4, window 2, no overflow, so the scale
 * doubles at the end of steps 2, 4, 6, ... (0-based). Clipping is on, with
 * max_norm below the gradients' norm, so the clip factor is exercised too.
 * Stages 0 and 3, worlds 1 and 2, where the key also reports a growth
 * step's norm over the new scale, as DeepSpeed's stage 3 does. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/dtype.h"
#include "helpers.h"
#include "zeroc/zeroc.h"

#define MAXW 2
#define STEPS 7
#define NP 2
static const int64_t numel[NP] = {96, 160};
#define MAXN 160

typedef enum { RUN_KEY, RUN_HALVED, RUN_PLAIN } run_kind;

typedef struct uo_run {
    int stage, world;
    run_kind kind;
    zc_comm *comms[MAXW];
    zc_step_info info[STEPS];
    float master[STEPS][NP][MAXN]; /* rank 0's gathered fp32 master after each step */
    char err[MAXW][512];
} uo_run;

#define RCHECK(call)                                                                     \
    do {                                                                                 \
        zc_status rc_ = (call);                                                          \
        if (rc_ != ZC_OK) {                                                              \
            snprintf(r->err[rank], sizeof r->err[rank], "rank %d: %s: %s", rank, #call,  \
                     zc_last_error());                                                   \
            goto out;                                                                    \
        }                                                                                \
    } while (0)

/* The unscaled gradient of element j of parameter i at step t on a rank:
 * a few bits of mantissa, so that times a power-of-two scale it is an exact
 * fp16 value, and so is half of it. */
static float unscaled_grad(int rank, int t, int i, int64_t j)
{
    const int v = (int)((j * 7 + i * 13 + t * 5 + rank * 3) % 31) - 15; /* -15..15 */
    return (float)v / 64.0f;
}

/* 0-based steps at whose end the scale doubles (initial 2^4, window 2). */
static bool growth_step(int t) { return t > 0 && t % 2 == 0; }

static void uo_rank(int rank, void *arg)
{
    uo_run *r = arg;
    zc_config *cfg = NULL;
    zc_engine *e = NULL;
    float vals[MAXN], scratch[MAXN];
    RCHECK(zc_config_create(&cfg));
    RCHECK(zc_config_set_int(cfg, "zero_optimization.stage", r->stage));
    RCHECK(zc_config_set_bool(cfg, "fp16.enabled", true));
    RCHECK(zc_config_set_int(cfg, "fp16.initial_scale_power", 4));
    RCHECK(zc_config_set_int(cfg, "fp16.loss_scale_window", 2));
    RCHECK(zc_config_set_int(cfg, "fp16.hysteresis", 1));
    RCHECK(zc_config_set_bool(cfg, "fp16.deepspeed_unscale_order", r->kind == RUN_KEY));
    RCHECK(zc_config_set_double(cfg, "gradient_clipping", 0.5));
    RCHECK(zc_config_set_double(cfg, "optimizer.params.lr", 1e-2));
    RCHECK(zc_config_set_double(cfg, "optimizer.params.eps", 1e-3));
    RCHECK(zc_config_set_double(cfg, "optimizer.params.weight_decay", 0.01));
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = 128;
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
            vals[j] = 0.25f + (float)(j % 9) / 32.0f;
        RCHECK(zc_param_load(e, p[i], vals));
    }
    for (int t = 0; t < STEPS; t++) {
        const float scale = zc_loss_scale(e);
        const float half = r->kind == RUN_HALVED && growth_step(t) ? 0.5f : 1.0f;
        for (int i = NP - 1; i >= 0; i--) {
            RCHECK(zc_param_acquire(e, p[i], NULL) ? ZC_OK : ZC_ERR_INVALID_ARG);
            void *g = zc_grad_buffer(e, p[i]);
            RCHECK(g ? ZC_OK : ZC_ERR_INVALID_ARG);
            for (int64_t j = 0; j < numel[i]; j++)
                zc__store_f32(g, ZC_DTYPE_F16, (size_t)j,
                              unscaled_grad(rank, t, i, j) * scale * half);
            RCHECK(zc_grad_ready(e, p[i]));
            RCHECK(zc_param_release(e, p[i], NULL));
        }
        zc_step_info info;
        RCHECK(zc_step(e, &info));
        if (rank == 0)
            r->info[t] = info;
        for (int i = 0; i < NP; i++)
            RCHECK(zc_param_gather_master(e, p[i], rank == 0 ? r->master[t][i] : scratch));
    }
out:
    zc_engine_destroy(e);
    zc_config_destroy(cfg);
}

static void run(uo_run *r, int stage, int world, run_kind kind)
{
    memset(r, 0, sizeof *r);
    r->stage = stage;
    r->world = world;
    r->kind = kind;
    setenv("ZC_COMM_TIMEOUT", "60", 0);
    cr_assert_eq(zc_comm_local_world(world, r->comms), ZC_OK);
    t_run_ranks(world, uo_rank, r);
    for (int k = 0; k < world; k++)
        zc_comm_destroy(r->comms[k]);
    for (int k = 0; k < world; k++)
        cr_assert_eq(r->err[k][0], 0, "stage %d world %d run %d: %s", stage, world, kind,
                     r->err[k]);
}

static bool same_master(const uo_run *a, const uo_run *b, int t)
{
    for (int i = 0; i < NP; i++)
        if (memcmp(a->master[t][i], b->master[t][i], (size_t)numel[i] * sizeof(float)) != 0)
            return false;
    return true;
}

static void check(int stage, int world)
{
    static uo_run a, b, c;
    run(&a, stage, world, RUN_KEY);
    run(&b, stage, world, RUN_HALVED);
    run(&c, stage, world, RUN_PLAIN);
    bool clipped = false;
    for (int t = 0; t < STEPS; t++) {
        /* The scaler and what zc_step reports do not depend on the key. */
        cr_assert(a.info[t].loss_scale == c.info[t].loss_scale && !a.info[t].skipped,
                  "stage %d world %d step %d: loss scale %g vs %g", stage, world, t,
                  a.info[t].loss_scale, c.info[t].loss_scale);
        /* At stages 0 and 3 the key reports a growth step's norm as
         * DeepSpeed's stage 3 and FP16_Optimizer do, over the new scale:
         * the norm of half the gradient, which is run B's, and half run C's
         * (halving is exact). On the other steps it is the gradient's. */
        const bool growth = t == 2 || t == 4 || t == 6;
        cr_assert(a.info[t].grad_norm == b.info[t].grad_norm &&
                      a.info[t].grad_norm == (growth ? c.info[t].grad_norm / 2
                                                     : c.info[t].grad_norm),
                  "stage %d world %d step %d: the reported norm %.9g (halved run %.9g, "
                  "without the key %.9g)", stage, world, t, a.info[t].grad_norm,
                  b.info[t].grad_norm, c.info[t].grad_norm);
        clipped = clipped || a.info[t].grad_norm > 0.5;
        cr_assert(same_master(&a, &b, t),
                  "stage %d world %d step %d: with the key, a growth step must unscale like "
                  "half the gradient without it", stage, world, t);
        const bool grown_yet = t >= 2; /* the first growth step is step 2 */
        cr_assert(same_master(&a, &c, t) == !grown_yet,
                  "stage %d world %d step %d: with and without the key the masters must be "
                  "%s", stage, world, t, grown_yet ? "different" : "identical");
    }
    cr_assert(clipped, "no step clipped: the clip factor is not exercised");
    /* The scale doubled at the end of steps 2, 4 and 6: 16, 16, 16, 32, 32, 64, 64. */
    const double want[STEPS] = {16, 16, 16, 32, 32, 64, 64};
    for (int t = 0; t < STEPS; t++)
        cr_assert(a.info[t].loss_scale == want[t], "step %d: scale %g, expected %g", t,
                  a.info[t].loss_scale, want[t]);
    t_assert_no_leaks();
}

Test(unscale_order, growth_steps_stage0_world1) { check(0, 1); }
Test(unscale_order, growth_steps_stage3_world1) { check(3, 1); }
Test(unscale_order, growth_steps_stage0_world2) { check(0, 2); }
Test(unscale_order, growth_steps_stage3_world2) { check(3, 2); }
