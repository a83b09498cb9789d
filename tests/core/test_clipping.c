/* Global norm, clipping and loss scaling in the engine, against fp64
 * references computed here.
 *
 *  - The reported grad_norm is the L2 norm of the full gradient averaged over
 *    ranks and micro-steps (fp64 reference), for every stage and world size.
 *  - Clipping applies once: with a tiny max_norm and an eps of the order of
 *    the clipped gradient, Adam's first update depends on the clip factor, so
 *    the update must equal the reference with one clip (and the test checks
 *    that a double clip or no clip would be told apart).
 *  - fp16 with a loss scale: the gradients handed over are multiplied by
 *    zc_loss_scale(); the reported norm is unscaled, and the clip uses
 *    (norm/scale + 1e-6) / max_norm.
 *  - An overflow skips the step on every rank and changes neither parameters
 *    nor Adam moments (a run with the overflowing window removed ends
 *    bitwise equal); an overflow at the minimum scale makes zc_step fail on
 *    every rank with ZC_ERR_LOSS_SCALE. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "helpers.h"
#include "zeroc/zeroc.h"

#define NP 5
#define MAX_WORLD 4
#define MAX_STEPS 6
#define ALL_WINDOWS 1000 /* overflow_window: inject in every window */

static const struct {
    const char *name;
    int64_t shape[2];
    int ndim;
} PARAMS[NP] = {
    {"a.weight", {23, 15}, 2}, /* 345: its own chunk with a 256 bucket */
    {"a.bias", {23}, 1},
    {"b.weight", {11, 7}, 2},
    {"b.bias", {11}, 1},
    {"c.weight", {130}, 1},
};

static int64_t numel(int i)
{
    int64_t n = 1;
    for (int d = 0; d < PARAMS[i].ndim; d++)
        n *= PARAMS[i].shape[d];
    return n;
}

static int64_t total_numel(void)
{
    int64_t n = 0;
    for (int i = 0; i < NP; i++)
        n += numel(i);
    return n;
}

static double noise(int rank, int data, int micro, int p, int64_t i)
{
    return t_noise(0xc11bull, rank, data, micro, p, i);
}

static float init_value(int p, int64_t i)
{
    double u = noise(77, 5, 3, p, i);
    return (float)(u < 0 ? -(0.5 + 0.5 * fabs(u)) : 0.5 + 0.5 * fabs(u));
}

/* The unscaled gradient; parameter-independent, so reference norms need no
 * optimizer trajectory. Parameter p gets its own magnitude so the norm mixes
 * scales. */
static float grad_unscaled(int rank, int data, int micro, int p, int64_t i)
{
    return (float)(noise(rank, data, micro, p, i) * 0.01 * (1 + p));
}

/* What a rank writes into the gradient buffer: the gradient times the loss
 * scale, in the parameter dtype. Returned widened to fp32. */
static float grad_written(zc_dtype dt, double scale, int rank, int data, int micro, int p,
                          int64_t i)
{
    float g = grad_unscaled(rank, data, micro, p, i) * (float)scale;
    return dt == ZC_DTYPE_F16 ? zc__f16_to_f32(zc__f32_to_f16(g)) : g;
}

/* ---- one configurable run --------------------------------------------------- */

typedef struct run {
    int stage, world, accum, steps;
    zc_dtype dtype;
    zc_config *cfg;
    zc_comm *comms[MAX_WORLD];
    int data_of_window[MAX_STEPS];   /* which data index window w uses */
    int overflow_window;             /* window where the last rank writes +inf (-1: none) */
    /* Outputs, per rank and step. */
    zc_step_info info[MAX_WORLD][MAX_STEPS];
    zc_status status[MAX_WORLD][MAX_STEPS];
    char msg[MAX_WORLD][256];
    double scale_used[MAX_WORLD][MAX_STEPS]; /* zc_loss_scale() during the window */
    float *master[MAX_WORLD][MAX_STEPS + 1]; /* gathered after build, after each step */
    int64_t skipped_steps[MAX_WORLD];
} run;

static void rank_fail(const run *R, int rank, const char *what, zc_status rc)
{
    fprintf(stderr, "stage %d world %d rank %d: %s -> %s: %s\n", R->stage, R->world, rank, what,
            zc_status_str(rc), zc_last_error());
    fflush(stderr);
    abort(); /* no cr_assert outside the test's thread; do not strand other ranks */
}

#define RCHECK(call)                                \
    do {                                            \
        zc_status rc_ = (call);                     \
        if (rc_ != ZC_OK)                           \
            rank_fail(R, rank, #call, rc_);         \
    } while (0)

static float *gather_all(run *R, int rank, zc_engine *eng, zc_param **P)
{
    float *out = malloc((size_t)total_numel() * sizeof(float));
    int64_t off = 0;
    for (int i = 0; i < NP; i++) {
        RCHECK(zc_param_gather_master(eng, P[i], out + off));
        off += numel(i);
    }
    return out;
}

static void rank_main(int rank, void *arg)
{
    run *R = arg;
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = 256;
    zc_engine *eng = NULL;
    RCHECK(zc_engine_create(&eng, R->cfg, R->comms[rank], &eo));
    zc_param *P[NP];
    for (int i = 0; i < NP; i++)
        if (!(P[i] = zc_param_add(eng, PARAMS[i].name, PARAMS[i].shape, PARAMS[i].ndim, 0)))
            rank_fail(R, rank, "zc_param_add", ZC_ERR_INVALID_ARG);
    RCHECK(zc_engine_build(eng));
    for (int i = 0; i < NP; i++) {
        float *init = malloc((size_t)numel(i) * sizeof(float));
        for (int64_t k = 0; k < numel(i); k++)
            init[k] = init_value(i, k);
        RCHECK(zc_param_load(eng, P[i], init));
        free(init);
    }
    R->master[rank][0] = gather_all(R, rank, eng, P);

    for (int w = 0; w < R->steps; w++) {
        double scale = zc_loss_scale(eng);
        R->scale_used[rank][w] = scale;
        for (int mi = 0; mi < R->accum; mi++) {
            for (int i = 0; i < NP; i++) {
                void *pv = zc_param_acquire(eng, P[i], NULL);
                void *gv = zc_grad_buffer(eng, P[i]);
                if (!pv || !gv)
                    rank_fail(R, rank, "zc_param_acquire/zc_grad_buffer", ZC_ERR_INVALID_ARG);
                for (int64_t k = 0; k < numel(i); k++) {
                    float g = grad_written(R->dtype, scale, rank, R->data_of_window[w], mi, i, k);
                    if ((w == R->overflow_window || R->overflow_window == ALL_WINDOWS) &&
                        rank == R->world - 1 && i == NP - 1 && k == 3 && mi == 0)
                        g = INFINITY;
                    zc__store_f32(gv, R->dtype, (size_t)k, g);
                }
                RCHECK(zc_grad_ready(eng, P[i]));
                RCHECK(zc_param_release(eng, P[i], NULL));
            }
            if (mi + 1 < R->accum)
                RCHECK(zc_micro_step_end(eng));
        }
        zc_status rc = zc_step(eng, &R->info[rank][w]);
        R->status[rank][w] = rc;
        if (rc != ZC_OK) {
            snprintf(R->msg[rank], sizeof R->msg[rank], "%s", zc_last_error());
            /* Every rank sees the same agreed failure; the engine must still
             * be usable and unchanged. */
            R->master[rank][w + 1] = gather_all(R, rank, eng, P);
            break;
        }
        R->master[rank][w + 1] = gather_all(R, rank, eng, P);
    }
    zc_stats st = {.size = sizeof st};
    RCHECK(zc_engine_stats(eng, &st));
    R->skipped_steps[rank] = st.skipped_steps;
    zc_engine_destroy(eng);
}

typedef struct cfg_opts {
    int stage, accum;
    double clip, lr, eps;
    bool fp16;
    int scale_power, hysteresis;
    double min_scale;
} cfg_opts;

static zc_config *make_cfg(const cfg_opts *o)
{
    zc_config *cfg = NULL;
    char v[64];
    cr_assert_eq(zc_config_create(&cfg), ZC_OK, "%s", zc_last_error());
#define SET(k, ...)                                                                         \
    do {                                                                                    \
        snprintf(v, sizeof v, __VA_ARGS__);                                                 \
        cr_assert_eq(zc_config_set(cfg, k, v), ZC_OK, "%s = %s: %s", k, v, zc_last_error()); \
    } while (0)
    SET("zero_optimization.stage", "%d", o->stage);
    SET("train_micro_batch_size_per_gpu", "1");
    SET("gradient_accumulation_steps", "%d", o->accum);
    SET("gradient_clipping", "%.17g", o->clip);
    SET("optimizer.type", "\"AdamW\"");
    SET("optimizer.params.lr", "%.17g", o->lr);
    SET("optimizer.params.eps", "%.17g", o->eps);
    SET("optimizer.params.weight_decay", "0");
    SET("zero_optimization.stage3_param_persistence_threshold", "0");
    if (o->fp16) {
        SET("fp16.enabled", "true");
        SET("fp16.initial_scale_power", "%d", o->scale_power);
        SET("fp16.hysteresis", "%d", o->hysteresis);
        SET("fp16.min_loss_scale", "%.17g", o->min_scale);
    }
#undef SET
    return cfg;
}

static run *run_new(const cfg_opts *o, int world, int steps, zc_dtype dt)
{
    run *R = calloc(1, sizeof *R);
    R->stage = o->stage;
    R->world = world;
    R->accum = o->accum;
    R->steps = steps;
    R->dtype = dt;
    R->overflow_window = -1;
    for (int w = 0; w < MAX_STEPS; w++)
        R->data_of_window[w] = w;
    R->cfg = make_cfg(o);
    cr_assert_eq(zc_comm_local_world(world, R->comms), ZC_OK, "%s", zc_last_error());
    return R;
}

static void run_go(run *R) { t_run_ranks(R->world, rank_main, R); }

static void run_free(run *R)
{
    for (int r = 0; r < R->world; r++) {
        for (int s = 0; s <= MAX_STEPS; s++)
            free(R->master[r][s]);
        zc_comm_destroy(R->comms[r]);
    }
    zc_config_destroy(R->cfg);
    free(R);
}

/* fp64 average over ranks and micro-steps of what the ranks wrote, unscaled. */
static void ref_avg_grad(const run *R, int data, double scale, double *g)
{
    int64_t off = 0;
    for (int i = 0; i < NP; i++) {
        for (int64_t k = 0; k < numel(i); k++) {
            double s = 0;
            for (int r = 0; r < R->world; r++)
                for (int mi = 0; mi < R->accum; mi++)
                    s += grad_written(R->dtype, scale, r, data, mi, i, k) / scale;
            g[off + k] = s / (R->world * R->accum);
        }
        off += numel(i);
    }
}

/* How far fp16 communication may move element (p, i) of the averaged
 * unscaled gradient: the engine rounds to fp16 each rank's window sum before
 * the reduction (stages 0/1 with K > 1), each micro-step's reduced sum
 * (stages 2/3), and the final sum, each by at most half an fp16 ulp (2^-11
 * relative). Cancellation between ranks makes that large relative to a small
 * average, so the bound is on the magnitudes that were rounded. */
static double fp16_comm_bound(const run *R, int data, double scale, int p, int64_t i)
{
    double per_rank = 0, per_micro = 0, total = 0;
    for (int r = 0; r < R->world; r++) {
        double s = 0;
        for (int mi = 0; mi < R->accum; mi++)
            s += grad_written(R->dtype, scale, r, data, mi, p, i);
        per_rank += fabs(s);
        total += s;
    }
    for (int mi = 0; mi < R->accum; mi++) {
        double s = 0;
        for (int r = 0; r < R->world; r++)
            s += grad_written(R->dtype, scale, r, data, mi, p, i);
        per_micro += fabs(s);
    }
    return 0x1p-11 * (per_rank + per_micro + fabs(total)) / (scale * R->world * R->accum);
}

static double l2(const double *g, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += g[i] * g[i];
    return sqrt(s);
}

/* ---- the reported norm ----------------------------------------------------- */

static void check_norms(int stage)
{
    const int64_t N = total_numel();
    double *g = malloc((size_t)N * sizeof(double));
    for (int world = 1; world <= MAX_WORLD; world++) {
        cfg_opts o = {.stage = stage, .accum = 2, .clip = 0, .lr = 1e-3, .eps = 1e-8};
        run *R = run_new(&o, world, 3, ZC_DTYPE_F32);
        run_go(R);
        for (int s = 0; s < 3; s++) {
            ref_avg_grad(R, s, 1.0, g);
            double ref = l2(g, N);
            for (int r = 0; r < world; r++) {
                cr_assert_eq(R->status[r][s], ZC_OK);
                cr_assert(fabs(R->info[r][s].grad_norm - ref) <= 1e-6 * ref,
                          "stage %d W=%d rank %d step %d: grad_norm %.10g, fp64 reference %.10g",
                          stage, world, r, s + 1, R->info[r][s].grad_norm, ref);
            }
        }
        run_free(R);
        t_assert_no_leaks();
    }
    free(g);
}

Test(clipping, norm_stage0) { check_norms(0); }
Test(clipping, norm_stage1) { check_norms(1); }
Test(clipping, norm_stage2) { check_norms(2); }
Test(clipping, norm_stage3) { check_norms(3); }

/* ---- clipping applies once ------------------------------------------------ */

/* Adam's first step on gradient g (after clip): m_hat = g, v_hat = g^2, so
 * the update is lr * g / (|g| + eps) (weight decay 0). */
static double first_update(double g, double lr, double eps) { return -lr * g / (fabs(g) + eps); }

static void check_clip_once(int stage, zc_dtype dt)
{
    const int64_t N = total_numel();
    double *g = malloc((size_t)N * sizeof(double));
    const double lr = 1e-2, max_norm = 1e-3;
    /* eps near the clipped gradient's rms, so the update depends on the clip. */
    const double eps = max_norm / sqrt((double)N);
    for (int world = 1; world <= 3; world++) {
        cfg_opts o = {.stage = stage, .accum = 2, .clip = max_norm, .lr = lr, .eps = eps,
                      .fp16 = dt == ZC_DTYPE_F16, .scale_power = 10, .hysteresis = 2,
                      .min_scale = 1};
        run *R = run_new(&o, world, 1, dt);
        run_go(R);
        double scale = R->scale_used[0][0];
        if (dt == ZC_DTYPE_F16)
            cr_assert(scale == 1024.0, "fp16 initial scale %g, expected 2^10", scale);
        ref_avg_grad(R, 0, scale, g);
        double norm = l2(g, N);
        double clip = (norm + 1e-6) / max_norm; /* norm is already unscaled */
        cr_assert(clip > 10, "test design: clip factor %g should be large", clip);
        /* fp32: rounding of the update only. fp16: plus the norm's error
         * (2e-3 relative, through the clip factor) and the communication
         * bound above, through d(update)/dg <= lr / eps. */
        const double tol_rel = dt == ZC_DTYPE_F16 ? 3e-3 : 1e-4;
        for (int r = 0; r < world; r++) {
            cr_assert_eq(R->status[r][0], ZC_OK, "%s", R->msg[r]);
            cr_assert(!R->info[r][0].skipped);
            cr_assert(fabs(R->info[r][0].grad_norm - norm) <= (dt == ZC_DTYPE_F16 ? 2e-3 : 1e-6) * norm,
                      "stage %d W=%d %s: reported norm %.9g, unscaled reference %.9g", stage,
                      world, zc_dtype_name(dt), R->info[r][0].grad_norm, norm);
            int64_t told_apart = 0;
            int pidx[1024];
            int64_t pelem[1024];
            cr_assert(N <= 1024);
            for (int i = 0, k = 0; i < NP; i++)
                for (int64_t j = 0; j < numel(i); j++, k++) {
                    pidx[k] = i;
                    pelem[k] = j;
                }
            for (int64_t k = 0; k < N; k++) {
                double want = first_update(g[k] / clip, lr, eps);
                double twice = first_update(g[k] / (clip * clip), lr, eps);
                double none = first_update(g[k], lr, eps);
                double got = (double)R->master[r][1][k] - (double)R->master[r][0][k];
                double tol = tol_rel * fabs(want) + 3e-7;
                if (dt == ZC_DTYPE_F16)
                    tol += lr / eps * fp16_comm_bound(R, 0, scale, pidx[k], pelem[k]) / clip;
                cr_assert(fabs(got - want) <= tol,
                          "stage %d W=%d %s rank %d element %lld: update %.9g, reference "
                          "(clipped once) %.9g (tolerance %.3g); clipped twice would be %.9g, "
                          "unclipped %.9g",
                          stage, world, zc_dtype_name(dt), r, (long long)k, got, want, tol, twice,
                          none);
                if (fabs(twice - want) > tol && fabs(none - want) > tol)
                    told_apart++;
            }
            cr_assert(told_apart > N / 2, "test design: only %lld of %lld elements tell one clip "
                      "from two or none", (long long)told_apart, (long long)N);
        }
        run_free(R);
        t_assert_no_leaks();
    }
    free(g);
}

Test(clipping, once_stage0) { check_clip_once(0, ZC_DTYPE_F32); }
Test(clipping, once_stage1) { check_clip_once(1, ZC_DTYPE_F32); }
Test(clipping, once_stage2) { check_clip_once(2, ZC_DTYPE_F32); }
Test(clipping, once_stage3) { check_clip_once(3, ZC_DTYPE_F32); }
Test(clipping, fp16_scaled_stage0) { check_clip_once(0, ZC_DTYPE_F16); }
Test(clipping, fp16_scaled_stage1) { check_clip_once(1, ZC_DTYPE_F16); }
Test(clipping, fp16_scaled_stage2) { check_clip_once(2, ZC_DTYPE_F16); }
Test(clipping, fp16_scaled_stage3) { check_clip_once(3, ZC_DTYPE_F16); }

/* ---- overflow: skip on every rank, nothing changes ------------------------- */

static void check_skip(int stage)
{
    const int64_t N = total_numel();
    const int world = 2;
    cfg_opts o = {.stage = stage, .accum = 1, .clip = 1.0, .lr = 1e-2, .eps = 1e-8,
                  .fp16 = true, .scale_power = 10, .hysteresis = 2, .min_scale = 1};
    /* A: windows use data 0,1,2,3 and window 1 overflows. B: data 0,2,3. */
    run *A = run_new(&o, world, 4, ZC_DTYPE_F16);
    A->overflow_window = 1;
    run_go(A);
    run *B = run_new(&o, world, 3, ZC_DTYPE_F16);
    B->data_of_window[0] = 0;
    B->data_of_window[1] = 2;
    B->data_of_window[2] = 3;
    run_go(B);
    for (int r = 0; r < world; r++) {
        for (int w = 0; w < 4; w++) {
            cr_assert_eq(A->status[r][w], ZC_OK, "stage %d rank %d window %d: %s", stage, r, w,
                         A->msg[r]);
            cr_assert_eq(A->info[r][w].skipped, w == 1,
                         "stage %d rank %d window %d: skipped=%d", stage, r, w,
                         (int)A->info[r][w].skipped);
            cr_assert_eq(A->info[r][w].step, w + 1, "skipped steps still count");
            /* Hysteresis 2: the first overflow keeps the scale. */
            cr_assert(A->info[r][w].loss_scale == 1024.0, "scale %g", A->info[r][w].loss_scale);
        }
        cr_assert(A->info[r][1].grad_norm == -1.0, "norm of an overflowing step is -1, got %g",
                  A->info[r][1].grad_norm);
        cr_assert(memcmp(A->master[r][1], A->master[r][2], (size_t)N * sizeof(float)) == 0,
                  "stage %d rank %d: the skipped step changed the master parameters", stage, r);
        cr_assert(memcmp(A->master[r][4], B->master[r][3], (size_t)N * sizeof(float)) == 0,
                  "stage %d rank %d: after the skip, training differs from a run without the "
                  "overflowing window (Adam state or step count touched)", stage, r);
        cr_assert(memcmp(A->master[r][4], A->master[0][4], (size_t)N * sizeof(float)) == 0,
                  "ranks disagree");
        cr_assert_eq(A->skipped_steps[r], 1);
        cr_assert_eq(B->skipped_steps[r], 0);
    }
    run_free(A);
    run_free(B);
    t_assert_no_leaks();
}

Test(overflow, skip_stage0) { check_skip(0); }
Test(overflow, skip_stage1) { check_skip(1); }
Test(overflow, skip_stage2) { check_skip(2); }
Test(overflow, skip_stage3) { check_skip(3); }

/* Scale 2, hysteresis 1, min 1: the first overflow halves to 1, the second
 * fails on every rank with ZC_ERR_LOSS_SCALE and changes nothing. */
Test(overflow, min_scale_error)
{
    for (int stage = 0; stage <= 3; stage++) {
        const int world = 2;
        cfg_opts o = {.stage = stage, .accum = 1, .clip = 1.0, .lr = 1e-2, .eps = 1e-8,
                      .fp16 = true, .scale_power = 1, .hysteresis = 1, .min_scale = 1};
        run *R = run_new(&o, world, 3, ZC_DTYPE_F16);
        R->overflow_window = ALL_WINDOWS;
        run_go(R);
        for (int r = 0; r < world; r++) {
            cr_assert_eq(R->status[r][0], ZC_OK, "stage %d rank %d: first overflow: %s", stage, r,
                         R->msg[r]);
            cr_assert(R->info[r][0].skipped);
            cr_assert(R->scale_used[r][1] == 1.0, "scale after the first overflow %g",
                      R->scale_used[r][1]);
            cr_assert_eq(R->status[r][1], ZC_ERR_LOSS_SCALE,
                         "stage %d rank %d: second overflow at the minimum scale returned %d",
                         stage, r, (int)R->status[r][1]);
            cr_assert(strstr(R->msg[r], "minimum") != NULL, "message: '%s'", R->msg[r]);
            /* The header's contract for this failure: info as for a skipped
             * step, and neither the step counter nor the scale advances
             * (the failed step is not counted as skipped either). */
            cr_assert(R->info[r][1].skipped && R->info[r][1].grad_norm == -1.0,
                      "skipped %d, norm %g", (int)R->info[r][1].skipped, R->info[r][1].grad_norm);
            cr_assert(R->info[r][1].loss_scale == 1.0, "scale %g", R->info[r][1].loss_scale);
            cr_assert_eq(R->info[r][1].step, 1, "the step counter moved to %lld",
                         (long long)R->info[r][1].step);
            cr_assert_eq(R->skipped_steps[r], 1, "skipped steps %lld",
                         (long long)R->skipped_steps[r]);
            cr_assert(memcmp(R->master[r][0], R->master[r][1],
                             (size_t)total_numel() * sizeof(float)) == 0,
                      "the skipped step changed parameters");
            cr_assert(memcmp(R->master[r][1], R->master[r][2],
                             (size_t)total_numel() * sizeof(float)) == 0,
                      "the failed step changed parameters");
        }
        run_free(R);
        t_assert_no_leaks();
    }
}
