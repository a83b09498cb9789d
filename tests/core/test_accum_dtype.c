/* data_types.grad_accum_dtype: a window's micro-step gradients summed in
 * the 16-bit working dtype, as DeepSpeed's default does, against a
 * reference written here.
 *
 * The reference (ref_grads) computes, element by element in double with
 * every rounding explicit (fp32 through a cast, 16 bits through
 * t_round_to, which does not use the library's converters), the averaged
 * gradient the optimizer must apply:
 *   16-bit, the key set to the working dtype:
 *     q = r16(r32(g * (float)(1 / K)))                 each micro-step
 *     stages 0/1: a_r = r16(r32(a_r + q)) per rank, then the window's one
 *                 reduction r16(r32(sum over ranks in rank order))
 *     stages 2/3: each micro-step's reduction r16(r32(sum over ranks)),
 *                 added to the shard: acc = r16(r32(acc + red))
 *     and divided by world x loss scale;
 *   fp32, the key unset (zeroc's default): stages 0/1 sum in fp32, divide
 *     by K in fp32 and round once before the reduction; stages 2/3 add each
 *     reduction to an fp32 shard, divided by world x K x loss scale.
 * Adam (no decay, no clipping) is then run on it in double for STEPS
 * windows and every fp32 master held to it within 2 ulp; the gradient
 * norm zc_step reports within 1e-12. With eps close to |g| an Adam step
 * moves by lr * g / (|g| + eps), so one 16-bit ulp of a gradient moves a
 * master by tens (fp16) to hundreds (bf16) of fp32 ulps: the two
 * references differ far beyond the tolerance wherever a rounding differs,
 * and the test asserts that they do (K = 3, or stages 2/3) - except at
 * K = 2 on stages 0/1, where a sum of two halves rounds once either way
 * (DeepSpeed's ZeRO-1 runs are bitwise alike with and without the key).
 *
 * The gradients are 16-bit values of magnitude 0.25..2, halved each
 * micro-step, so running sums need more bits than 16-bit types hold. fp16
 * uses a static loss scale of 8 (exact). Covered: stages 0-3, worlds 1 and
 * 2, accumulation 2 and 3, bf16 and fp16; the accumulator in device memory,
 * in the cpu home (in place; and through the copy stream and pinned
 * staging a GPU uses, forced on the host) and in the nvme home's swap
 * files (with and without staging). And the refusals: a key that is
 * neither fp32 nor the working dtype. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/dtype.h"   /* zc__store_f32: writing the exact gradients */
#include "core/engine.h" /* zc__opt_force_staging */
#include "helpers.h"
#include "t_engine.h"    /* t_round_to */
#include "t_offload.h"

#define NP 3
#define N 508
#define W_MAX 2
#define STEPS 2
#define LR 1e-2
#define EPS 0.5
#define B1 0.9
#define B2 0.999
#define FP16_SCALE 8.0f
static const int64_t numel[NP] = {301, 77, 130};

typedef struct ad_run {
    int stage, world, accum;
    zc_dtype dt;
    bool key;              /* data_types.grad_accum_dtype = dt; else unset */
    const char *offload;   /* NULL, "cpu" or "nvme" */
    const char *nvme_json;
    zc_comm *comms[W_MAX];
    float master[N];       /* rank 0's gathered fp32 master after STEPS */
    double norm[STEPS];
    char err[W_MAX][512];
} ad_run;

static float init_value(int64_t i) { return (float)(0.5 + 0.25 * t_noise(77, 0, 0, 0, 0, i)); }

/* The gradient rank r writes at micro-step m of step t, unscaled: a 16-bit
 * value (the test's own rounding), exact in fp32 and after the loss scale. */
static float grad_value(zc_dtype dt, int r, int t, int m, int64_t i)
{
    const double u = t_noise(78, r, t, m, 0, i);
    const double mag = (0.25 + 1.75 * fabs(u)) * ldexp(1.0, -m);
    return t_round_to((float)(u < 0 ? -mag : mag), dt);
}

static float r32(double v) { return (float)v; }

/* The averaged, unscaled gradient of step t the optimizer must apply
 * (see the top). */
static void ref_grads(const ad_run *R, bool acc16, int t, double *out)
{
    const zc_dtype dt = R->dt;
    const int W = R->world, K = R->accum;
    const float S = dt == ZC_DTYPE_F16 ? FP16_SCALE : 1.0f;
    const float inv = (float)(1.0 / K);
    for (int64_t i = 0; i < N; i++) {
        float gs[W_MAX][3];
        for (int r = 0; r < W; r++)
            for (int m = 0; m < K; m++)
                gs[r][m] = grad_value(dt, r, t, m, i) * S; /* what the rank writes */
        double g;
        if (acc16 && R->stage <= 1) {
            float a[W_MAX] = {0};
            for (int r = 0; r < W; r++) {
                a[r] = 0.0f;
                for (int m = 0; m < K; m++) {
                    const float q = t_round_to(r32((double)gs[r][m] * inv), dt);
                    a[r] = t_round_to(r32((double)a[r] + q), dt);
                }
            }
            float red = a[0];
            for (int r = 1; r < W; r++)
                red = r32((double)red + a[r]);
            g = (double)t_round_to(red, dt) / (W * (double)S);
        } else if (acc16) {
            float acc = 0.0f;
            for (int m = 0; m < K; m++) {
                float red = t_round_to(r32((double)gs[0][m] * inv), dt);
                for (int r = 1; r < W; r++)
                    red = r32((double)red + t_round_to(r32((double)gs[r][m] * inv), dt));
                acc = t_round_to(r32((double)acc + t_round_to(red, dt)), dt);
            }
            g = (double)acc / (W * (double)S);
        } else if (R->stage <= 1) {
            float a[W_MAX] = {0};
            for (int r = 0; r < W; r++) {
                a[r] = 0.0f;
                for (int m = 0; m < K; m++)
                    a[r] = r32((double)a[r] + gs[r][m]);
                a[r] = t_round_to(r32((double)a[r] * inv), dt);
            }
            float red = a[0];
            for (int r = 1; r < W; r++)
                red = r32((double)red + a[r]);
            g = (double)t_round_to(red, dt) / (W * (double)S);
        } else {
            float acc = 0.0f;
            for (int m = 0; m < K; m++) {
                float red = gs[0][m];
                for (int r = 1; r < W; r++)
                    red = r32((double)red + gs[r][m]);
                acc = r32((double)acc + t_round_to(red, dt));
            }
            g = (double)acc / ((double)W * K * S);
        }
        out[i] = g;
    }
}

/* Adam (bias-corrected, no decay) in double over STEPS windows. */
static void ref_train(const ad_run *R, bool acc16, float *master, double *norm)
{
    static double m[N], v[N], x[N], g[N];
    for (int64_t i = 0; i < N; i++) {
        m[i] = v[i] = 0.0;
        x[i] = init_value(i);
    }
    for (int t = 0; t < STEPS; t++) {
        ref_grads(R, acc16, t, g);
        double sq = 0.0;
        for (int64_t i = 0; i < N; i++) {
            sq += g[i] * g[i];
            m[i] = B1 * m[i] + (1 - B1) * g[i];
            v[i] = B2 * v[i] + (1 - B2) * g[i] * g[i];
            const double mh = m[i] / (1 - pow(B1, t + 1)), vh = v[i] / (1 - pow(B2, t + 1));
            x[i] -= LR * mh / (sqrt(vh) + EPS);
        }
        norm[t] = sqrt(sq);
    }
    for (int64_t i = 0; i < N; i++)
        master[i] = (float)x[i];
}

#define RCHECK(call)                                                                     \
    do {                                                                                 \
        zc_status rc_ = (call);                                                          \
        if (rc_ != ZC_OK) {                                                              \
            snprintf(R->err[rank], sizeof R->err[rank], "rank %d: %s: %s", rank, #call,  \
                     zc_last_error());                                                   \
            goto out;                                                                    \
        }                                                                                \
    } while (0)

static zc_status make_config(const ad_run *R, zc_config **out)
{
    zc_config *cfg = NULL;
    zc_status rc = zc_config_create(&cfg);
#define SET(call)                                                                        \
    if (rc == ZC_OK)                                                                     \
    rc = (call)
    SET(zc_config_set_int(cfg, "zero_optimization.stage", R->stage));
    SET(zc_config_set_int(cfg, "gradient_accumulation_steps", R->accum));
    SET(zc_config_set_double(cfg, "gradient_clipping", 0.0));
    SET(zc_config_set_double(cfg, "optimizer.params.lr", LR));
    SET(zc_config_set_double(cfg, "optimizer.params.eps", EPS));
    SET(zc_config_set_double(cfg, "optimizer.params.weight_decay", 0.0));
    SET(zc_config_set_bool(cfg, R->dt == ZC_DTYPE_F16 ? "fp16.enabled" : "bf16.enabled", true));
    if (R->dt == ZC_DTYPE_F16)
        SET(zc_config_set_double(cfg, "fp16.loss_scale", FP16_SCALE));
    if (R->key)
        SET(zc_config_set(cfg, "data_types.grad_accum_dtype",
                          R->dt == ZC_DTYPE_F16 ? "\"fp16\"" : "\"bf16\""));
    if (R->offload) {
        char dev[16];
        snprintf(dev, sizeof dev, "\"%s\"", R->offload);
        SET(zc_config_set(cfg, "zero_optimization.offload_optimizer.device", dev));
        if (R->nvme_json)
            SET(zc_config_set(cfg, "zero_optimization.offload_optimizer.nvme_path",
                              R->nvme_json));
    }
#undef SET
    if (rc != ZC_OK)
        zc_config_destroy(cfg);
    else
        *out = cfg;
    return rc;
}

static void ad_rank(int rank, void *arg)
{
    ad_run *R = arg;
    zc_config *cfg = NULL;
    zc_engine *e = NULL;
    static float scratch[W_MAX][N];
    RCHECK(make_config(R, &cfg));
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = 128;
    RCHECK(zc_engine_create(&e, cfg, R->comms[rank], &eo));
    zc_param *p[NP];
    for (int k = 0; k < NP; k++) {
        char name[8] = {'p', (char)('0' + k), 0};
        p[k] = zc_param_add(e, name, &numel[k], 1, 0);
        RCHECK(p[k] ? ZC_OK : ZC_ERR_INVALID_ARG);
    }
    RCHECK(zc_engine_build(e));
    for (int k = 0, off = 0; k < NP; off += (int)numel[k], k++) {
        for (int64_t j = 0; j < numel[k]; j++)
            scratch[rank][j] = init_value(off + j);
        RCHECK(zc_param_load(e, p[k], scratch[rank]));
    }
    const float S = (float)zc_loss_scale(e);
    for (int t = 0; t < STEPS; t++) {
        for (int m = 0; m < R->accum; m++) {
            for (int k = NP - 1, off = N; k >= 0; k--) {
                off -= (int)numel[k];
                RCHECK(zc_param_acquire(e, p[k], NULL) ? ZC_OK : ZC_ERR_INVALID_ARG);
                void *g = zc_grad_buffer(e, p[k]);
                RCHECK(g ? ZC_OK : ZC_ERR_INVALID_ARG);
                for (int64_t j = 0; j < numel[k]; j++)
                    zc__store_f32(g, R->dt, (size_t)j, grad_value(R->dt, rank, t, m, off + j) * S);
                RCHECK(zc_grad_ready(e, p[k]));
                RCHECK(zc_param_release(e, p[k], NULL));
            }
            if (m + 1 < R->accum)
                RCHECK(zc_micro_step_end(e));
        }
        zc_step_info info;
        RCHECK(zc_step(e, &info));
        if (rank == 0)
            R->norm[t] = info.grad_norm;
    }
    for (int k = 0, off = 0; k < NP; off += (int)numel[k], k++)
        RCHECK(zc_param_gather_master(e, p[k], rank == 0 ? R->master + off : scratch[rank]));
out:
    zc_engine_destroy(e);
    zc_config_destroy(cfg);
}

static void train(ad_run *R)
{
    setenv("ZC_COMM_TIMEOUT", "60", 0);
    cr_assert_eq(zc_comm_local_world(R->world, R->comms), ZC_OK, "%s", zc_last_error());
    t_run_ranks(R->world, ad_rank, R);
    for (int k = 0; k < R->world; k++)
        zc_comm_destroy(R->comms[k]);
    for (int k = 0; k < R->world; k++)
        cr_assert_eq(R->err[k][0], 0, "%s", R->err[k]);
}

static uint32_t max_ulp(const float *a, const float *b, int64_t *at)
{
    uint32_t worst = 0;
    *at = 0;
    for (int64_t i = 0; i < N; i++) {
        const uint32_t d = t_ulp_diff_f32(a[i], b[i]);
        if (d > worst) {
            worst = d;
            *at = i;
        }
    }
    return worst;
}

/* One run against its reference; with the key, also the check that the
 * reference tells 16-bit from fp32 accumulation where they differ. */
static void check(int stage, int world, int accum, zc_dtype dt, bool key, const char *offload,
                  const char *nvme_json, const char *how)
{
    static ad_run R;
    memset(&R, 0, sizeof R);
    R = (ad_run){.stage = stage, .world = world, .accum = accum, .dt = dt, .key = key,
                 .offload = offload, .nvme_json = nvme_json};
    train(&R);
    static float want[N], other[N];
    double norm[STEPS], onorm[STEPS];
    ref_train(&R, key, want, norm);
    char what[160];
    snprintf(what, sizeof what, "%s stage %d world %d accum %d, grad_accum_dtype %s%s%s",
             zc_dtype_name(dt), stage, world, accum, key ? zc_dtype_name(dt) : "unset",
             offload ? ", offload " : "", offload ? how : "");
    int64_t at;
    const uint32_t d = max_ulp(R.master, want, &at);
    cr_expect(d <= 2, "%s: master[%lld] %.9g, reference %.9g (%u ulp)", what, (long long)at,
              (double)R.master[at], (double)want[at], d);
    for (int t = 0; t < STEPS; t++)
        cr_expect(fabs(R.norm[t] - norm[t]) <= 1e-12 * norm[t],
                  "%s, step %d: norm %.17g, reference %.17g", what, t + 1, R.norm[t], norm[t]);
    if (!key)
        return;
    ref_train(&R, false, other, onorm);
    const uint32_t apart = max_ulp(want, other, &at);
    const bool differ = accum > 2 || stage >= 2;
    if (differ)
        cr_expect(apart > 16, "%s: the 16-bit and fp32 references are only %u ulp apart", what,
                  apart);
    else
        cr_expect(apart == 0, "%s: a window of two halves rounds once either way, yet the "
                  "references are %u ulp apart", what, apart);
}

/* Stages 0-3, worlds 1-2, accumulation 2 and 3: the key, and without it. */
static void device_sweep(zc_dtype dt)
{
    for (int stage = 0; stage <= 3; stage++)
        for (int world = 1; world <= 2; world++)
            for (int accum = 2; accum <= 3; accum++) {
                check(stage, world, accum, dt, true, NULL, NULL, "");
                check(stage, world, accum, dt, false, NULL, NULL, "");
            }
    t_assert_no_leaks();
}

Test(accum_dtype, bf16_device) { device_sweep(ZC_DTYPE_BF16); }
Test(accum_dtype, fp16_device) { device_sweep(ZC_DTYPE_F16); }

/* The offload homes: the cpu home adds in place on the host path, through
 * the copy stream's landing buffers and the pinned staging with staging
 * forced (what a GPU does); the nvme home rounds between its read-back and
 * its write, with and without staging. Stage 1 keeps its window on the
 * device (the full accumulator) whatever the home. */
static void offload_sweep(zc_dtype dt)
{
    t_swapdir dir;
    t_swapdir_make(&dir, "zc-accum-dtype");
    for (int staged = 0; staged <= 1; staged++) {
        zc__opt_force_staging(staged);
        for (int stage = 1; stage <= 3; stage++)
            for (int world = 1; world <= 2; world++)
                for (int accum = 2; accum <= 3; accum++) {
                    check(stage, world, accum, dt, true, "cpu", NULL,
                          staged ? "cpu, staged" : "cpu");
                    check(stage, world, accum, dt, true, "nvme", dir.json,
                          staged ? "nvme, staged" : "nvme");
                    cr_assert_eq(t_dir_entries(dir.path), 0, "swap files left in %s",
                                 dir.path);
                }
    }
    zc__opt_force_staging(false);
    t_swapdir_remove(&dir);
    t_assert_no_leaks();
}

Test(accum_dtype, bf16_offload) { offload_sweep(ZC_DTYPE_BF16); }
Test(accum_dtype, fp16_offload) { offload_sweep(ZC_DTYPE_F16); }

/* ---- refusals ------------------------------------------------------------ */

static zc_status create_with(const char *precision, const char *key, zc_dtype param_dtype)
{
    zc_config *cfg = NULL;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "gradient_accumulation_steps", 2), ZC_OK);
    if (precision)
        cr_assert_eq(zc_config_set_bool(cfg, precision, true), ZC_OK, "%s", zc_last_error());
    if (key)
        cr_assert_eq(zc_config_set(cfg, "data_types.grad_accum_dtype", key), ZC_OK, "%s",
                     zc_last_error());
    zc_comm *comm = NULL;
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.param_dtype = param_dtype;
    zc_engine *e = (zc_engine *)0x1;
    zc_status rc = zc_engine_create(&e, cfg, comm, &eo);
    if (rc == ZC_OK)
        zc_engine_destroy(e);
    else
        cr_assert_null(e, "a refused zc_engine_create left *out set");
    zc_comm_destroy(comm);
    zc_config_destroy(cfg);
    return rc;
}

/* DeepSpeed raises NotImplementedError for these mixes without ZeRO and
 * its ZeRO stages disagree on them: refused at create, naming the key. */
Test(accum_dtype, other_mixes_refused)
{
    static const struct {
        const char *precision, *key;
        zc_dtype param_dtype;
        const char *says;
    } bad[] = {
        {"bf16.enabled", "\"fp16\"", ZC_DTYPE_INVALID, "\"fp16\" with bf16 parameters"},
        {"fp16.enabled", "\"bf16\"", ZC_DTYPE_INVALID, "\"bf16\" with fp16 parameters"},
        {NULL, "\"bf16\"", ZC_DTYPE_INVALID, "\"bf16\" with fp32 parameters"},
        {NULL, "\"fp16\"", ZC_DTYPE_INVALID, "\"fp16\" with fp32 parameters"},
        /* The working dtype the engine picks, not only the blocks'. */
        {"bf16.enabled", "\"bf16\"", ZC_DTYPE_F32, "\"bf16\" with fp32 parameters"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        zc_status rc = create_with(bad[i].precision, bad[i].key, bad[i].param_dtype);
        const char *msg = zc_last_error();
        cr_expect_eq(rc, ZC_ERR_CONFIG, "case %zu: %s", i, zc_status_str(rc));
        cr_expect(strstr(msg, "data_types.grad_accum_dtype") && strstr(msg, bad[i].says),
                  "case %zu: %s", i, msg);
    }
    /* What is honoured: fp32 and the working dtype, unset, and accumulation 1. */
    cr_expect_eq(create_with("bf16.enabled", "\"bf16\"", ZC_DTYPE_INVALID), ZC_OK, "%s",
                 zc_last_error());
    cr_expect_eq(create_with("fp16.enabled", "\"fp16\"", ZC_DTYPE_INVALID), ZC_OK, "%s",
                 zc_last_error());
    cr_expect_eq(create_with("bf16.enabled", "\"fp32\"", ZC_DTYPE_INVALID), ZC_OK, "%s",
                 zc_last_error());
    cr_expect_eq(create_with(NULL, "\"fp32\"", ZC_DTYPE_INVALID), ZC_OK, "%s", zc_last_error());
    cr_expect_eq(create_with("bf16.enabled", NULL, ZC_DTYPE_BF16), ZC_OK, "%s",
                 zc_last_error());
    t_assert_no_leaks();
}

/* zc_plan_memory refuses what zc_engine_create refuses. */
Test(accum_dtype, plan_refuses_alike)
{
    zc_config *cfg = NULL;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set_bool(cfg, "bf16.enabled", true), ZC_OK);
    cr_assert_eq(zc_config_set(cfg, "data_types.grad_accum_dtype", "\"fp16\""), ZC_OK);
    const int64_t shape[1] = {1000};
    zc_plan_tensor t = {.shape = shape, .ndim = 1};
    zc_memory_plan plan = {.size = sizeof plan};
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    zc_status rc = zc_plan_memory(cfg, 1, &t, 1, &eo, &plan);
    cr_expect_eq(rc, ZC_ERR_CONFIG, "%s", zc_status_str(rc));
    cr_expect(strstr(zc_last_error(), "data_types.grad_accum_dtype"), "%s", zc_last_error());
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}
