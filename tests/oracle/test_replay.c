/* DeepSpeed as the oracle: every case of tests/oracle/fixtures replayed
 * through zeroc at stages 0-3 (README.md beside this file says what each
 * case is, how the fixtures were made and what was measured).
 *
 * Each "match" case runs twice at every zeroc stage:
 *   - with optimizer.params.deepspeed_arithmetic (DeepSpeedCPUAdam's fp32
 *     coefficients and FMAs, what made the fixtures), held after every step
 *     to: every fp32 master within O_TOL_ULP ulps of DeepSpeed's (o_ulp_dist:
 *     ulps of DeepSpeed's value, values below the case's peak learning rate
 *     counted in ulps of that learning rate: README.md "The measure"); the
 *     loss scale the step used, whether it was skipped and the learning rate
 *     it applied exactly DeepSpeed's; the gradient norm within O_NORM_REL of
 *     DeepSpeed's (both "not finite" on an overflow step);
 *   - in zeroc's own arithmetic (the default), held to the same sequences
 *     and every master to the bound o_arith_bound derives for the difference
 *     of the two arithmetics (bound.c);
 * and across zeroc's own stages, at accumulation 1, each arithmetic's runs
 * are the same bits.
 *
 * The differences zeroc keeps on purpose (docs/config.md) are held as
 * differences and, where a switch reproduces DeepSpeed, to equality under
 * it: D1 (the fp16 growth step, fp16.deepspeed_unscale_order), D5 (16-bit
 * initial values, zc_block_load_rounded), D2 and D4 (DeepSpeed's stage-0
 * fp16/bf16 path, not copied); D3 (16-bit accumulation) per zeroc stage. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "oracle.h"
#include "zeroc/zeroc.h"

#define O_TOL_ULP 4.0
/* Two fp32 ulps, relative: DeepSpeed's ZeRO-1/2 norm is an fp32 value. */
#define O_NORM_REL 2.4e-7

static o_fixtures F;

static void setup(void) { o_load(&F); }
static void teardown(void) { o_free(&F); }

TestSuite(oracle, .init = setup, .fini = teardown, .timeout = 240);

/* ---- comparing one run with its case ------------------------------------- */

typedef struct agree {
    /* The masters, after every step, in ulps (o_ulp_dist): max_dist,
     * worst_step, worst and first_over leave out the elements of DeepSpeed's
     * scalar tail where a tail mask is given (those are in tail_max). */
    double max_dist;
    int worst_step;         /* 1-based */
    o_worst worst;
    int first_over;         /* first step (1-based) beyond O_TOL_ULP, -1 if none */
    double tail_max;        /* DeepSpeed's scalar-tail elements (-1: no mask) */
    int first_over_bound;   /* first step a master exceeds the bound, -1 if none */
    double max_abs;         /* largest |zeroc - DeepSpeed| */
    double master0_dist;    /* the initial master */
    double step1_dist;      /* after the first step */
    int64_t bitwise;        /* masters (all steps) equal to DeepSpeed's bit for bit */
    double bound_used;      /* largest |zeroc - DeepSpeed| / o_arith_bound, when computed */
    int scale_diff, skip_diff, lr_diff; /* first differing step, -1 if none */
    int norm_diff;          /* first step whose norm is not the expected one, -1 if none */
    double norm_rel;        /* largest relative difference of finite norms */
} agree;

static const char *param_of(int64_t elem, int64_t *local)
{
    for (int i = 0; i < F.nparams; i++) {
        if (elem < F.numel[i]) {
            *local = elem;
            return F.names[i];
        }
        elem -= F.numel[i];
    }
    *local = -1;
    return "?";
}

/* Whether a stage reports the norm of a step on which the fp16 loss scale
 * grows over the grown scale: DeepSpeed's stage 3 (stage3.py step(), line
 * 2897, after _update_scale) and its stage-0 FP16_Optimizer
 * (fused_optimizer.py 340); zeroc's stages 0 and 3 with
 * fp16.deepspeed_unscale_order. DeepSpeed's stages 1-2 divide by the
 * previous scale (stage_1_and_2.py 3071), as zeroc does everywhere else. */
static bool ds_norm_over_new_scale(int stage) { return stage == 0 || stage == 3; }

static bool grows_at(const o_run *r, const o_case *C, int t)
{
    const double next = t + 1 < C->steps ? r->loss_scale[t + 1] : r->final_scale;
    return !r->skipped[t] && next > r->loss_scale[t];
}

/* The norm zeroc's run should report at step t: DeepSpeed's, times 2 on a
 * growth step where one of the two divides by the grown scale and the other
 * does not. */
static double expected_norm(const o_case *C, const o_run *r, const o_replay_opts *o, int t)
{
    const bool zc_new = o->extra && ds_norm_over_new_scale(r->stage) &&
                        json_is_true(json_object_get(C->zeroc_extra,
                                                     "fp16.deepspeed_unscale_order"));
    const bool ds_new = ds_norm_over_new_scale(C->ds_stage);
    if (!grows_at(r, C, t) || zc_new == ds_new)
        return C->grad_norm[t];
    return zc_new ? C->grad_norm[t] / 2.0 : C->grad_norm[t] * 2.0;
}

static agree compare(const o_case *C, const o_run *r, const o_replay_opts *o, const double *B,
                     const bool *tail)
{
    const int64_t n = F.n;
    agree a = {.first_over = -1, .scale_diff = -1, .skip_diff = -1, .lr_diff = -1,
               .norm_diff = -1, .bound_used = B ? 0.0 : -1.0, .tail_max = tail ? 0.0 : -1.0,
               .first_over_bound = -1};
    a.master0_dist = o_step_worst(r->master0, C->master0, n).dist;
    for (int t = 0; t < C->steps; t++) {
        const float *z = r->masters + (size_t)t * (size_t)n;
        const float *d = C->masters + (size_t)t * (size_t)n;
        o_worst w = {0, -1, 0, 0};
        for (int64_t i = 0; i < n; i++) {
            const double u = o_ulp_dist(z[i], d[i]);
            if (tail && tail[i]) {
                a.tail_max = fmax(a.tail_max, u);
            } else if (u > w.dist || w.elem < 0) {
                w = (o_worst){u, i, z[i], d[i]};
            }
        }
        if (w.dist > a.max_dist || t == 0) {
            a.max_dist = w.dist;
            a.worst_step = t + 1;
            a.worst = w;
        }
        if (t == 0)
            a.step1_dist = w.dist;
        if (w.dist > O_TOL_ULP && a.first_over < 0)
            a.first_over = t + 1;
        for (int64_t i = 0; i < n; i++) {
            double ad = fabs((double)z[i] - (double)d[i]);
            if (ad > a.max_abs)
                a.max_abs = ad;
            a.bitwise += !memcmp(&z[i], &d[i], sizeof(float));
            if (B) {
                const double b = B[(size_t)t * (size_t)n + (size_t)i];
                const double used = ad == 0 ? 0.0 : b > 0 ? ad / b : INFINITY;
                if (used > a.bound_used)
                    a.bound_used = used;
                if (used > 1.0 && a.first_over_bound < 0)
                    a.first_over_bound = t + 1;
            }
        }
        if (r->loss_scale[t] != C->loss_scale[t] && a.scale_diff < 0)
            a.scale_diff = t + 1;
        if (r->skipped[t] != C->skipped[t] && a.skip_diff < 0)
            a.skip_diff = t + 1;
        if (r->lr[t] != C->lr[t] && a.lr_diff < 0)
            a.lr_diff = t + 1;
        const bool zfin = r->grad_norm[t] >= 0, dfin = !isnan(C->grad_norm[t]);
        if (zfin != dfin) {
            if (a.norm_diff < 0)
                a.norm_diff = t + 1;
        } else if (zfin) {
            const double want = expected_norm(C, r, o, t);
            double rel = fabs(r->grad_norm[t] - want) / want;
            if (rel > a.norm_rel)
                a.norm_rel = rel;
            if (rel > O_NORM_REL && a.norm_diff < 0)
                a.norm_diff = t + 1;
        }
    }
    return a;
}

/* One line per run: the agreement table of README.md is made of them. */
static void report(const o_case *C, const o_run *r, const agree *a, const char *what)
{
    int64_t k;
    const char *p = param_of(a->worst.elem, &k);
    fprintf(stderr,
            "oracle %-26s %-5s zeroc stage %d vs DeepSpeed stage %d (%s): masters max %.2f ulp "
            "(step %d, %s[%lld]: zeroc %.9g, DeepSpeed %.9g), max |diff| %.3g, initial %.2f ulp, "
            "step 1 %.2f ulp, first beyond %g ulp: step %d; scalar tail max %.2f ulp; bitwise "
            "%lld of %lld; bound used %.3g; loss scale %s, skipped %s, lr %s, norm %s (rel %.2g)\n",
            C->name, C->dtype, r->stage, C->ds_stage, what, a->max_dist, a->worst_step, p,
            (long long)k, a->worst.zc, a->worst.ds, a->max_abs, a->master0_dist, a->step1_dist,
            O_TOL_ULP, a->first_over, a->tail_max, (long long)a->bitwise,
            (long long)(F.n * C->steps), a->bound_used, a->scale_diff < 0 ? "same" : "DIFFER",
            a->skip_diff < 0 ? "same" : "DIFFER", a->lr_diff < 0 ? "same" : "DIFFER",
            a->norm_diff < 0 ? "same" : "DIFFER", a->norm_rel);
}

/* Loss scale, skips, learning rate (exactly) and norm: DeepSpeed's. */
static void assert_sequences(const o_case *C, const o_run *r, const agree *a)
{
    if (a->scale_diff > 0)
        cr_expect(false, "%s, zeroc stage %d, step %d: loss scale %g, DeepSpeed %g", C->name,
                  r->stage, a->scale_diff, r->loss_scale[a->scale_diff - 1],
                  C->loss_scale[a->scale_diff - 1]);
    if (a->skip_diff > 0)
        cr_expect(false, "%s, zeroc stage %d, step %d: skipped %d, DeepSpeed %d", C->name,
                  r->stage, a->skip_diff, r->skipped[a->skip_diff - 1],
                  C->skipped[a->skip_diff - 1]);
    if (a->lr_diff > 0)
        cr_expect(false, "%s, zeroc stage %d, step %d: lr %.17g, DeepSpeed %.17g", C->name,
                  r->stage, a->lr_diff, r->lr[a->lr_diff - 1], C->lr[a->lr_diff - 1]);
    if (a->norm_diff > 0)
        cr_expect(false, "%s, zeroc stage %d, step %d: grad norm %.9g, DeepSpeed %.9g (NaN: "
                  "none reported, an overflow; -1: zeroc's not finite; DeepSpeed's stage %d "
                  "reports a growth step's norm over the %s scale)",
                  C->name, r->stage, a->norm_diff, r->grad_norm[a->norm_diff - 1],
                  C->grad_norm[a->norm_diff - 1], C->ds_stage,
                  ds_norm_over_new_scale(C->ds_stage) ? "grown" : "previous");
}

/* Which clip arithmetic DeepSpeed runs (src/core/step/step.c
 * ds_grad_scale): 0 the engine's clip_grad_norm_ in fp32 (stage 0, fp32:
 * FusedAdam alone), 1 ZeRO-1/2's fp32 (DeepSpeedZeroOptimizer), 2 fp64
 * (stage 3), 3 BF16_Optimizer's clip_tensors_by_global_norm, which zeroc
 * does not reproduce. */
static int ds_clip_class(const o_case *C)
{
    const char *o = C->ds_optimizer;
    return !strcmp(o, "FusedAdam")                       ? 0
           : !strcmp(o, "DeepSpeedZeroOptimizer")        ? 1
           : !strcmp(o, "DeepSpeedZeroOptimizer_Stage3") ? 2
                                                         : 3;
}

/* zeroc's, under optimizer.params.deepspeed_arithmetic, at a stage. */
static int zc_clip_class(const o_case *C, int stage)
{
    return stage == 1 || stage == 2 ? 1 : stage == 0 && !strcmp(C->dtype, "fp32") ? 0 : 2;
}

/* DeepSpeed's arithmetic: every master after every step within the bound of
 * the same arithmetic (DeepSpeed's scalar tail and, at a stage whose clip
 * arithmetic is not the fixture's, the clip factor, are all that may move
 * one), the initial master exactly; and where zeroc's stage clips as the
 * fixture's did, every master outside DeepSpeed's scalar tail bit for bit
 * (0 ulp: stricter than the 4, and what every such run measures). */
static void assert_match(const o_case *C, const o_run *r, const agree *a)
{
    assert_sequences(C, r, a);
    int64_t k;
    const char *p = param_of(a->worst.elem, &k);
    cr_expect(a->master0_dist == 0, "%s, zeroc stage %d: the initial master is %.2f ulp from "
              "DeepSpeed's",
              C->name, r->stage, a->master0_dist);
    cr_expect(a->bound_used >= 0 && a->bound_used <= 1.0,
              "%s, zeroc stage %d, deepspeed_arithmetic: a master is %.3g times the rounding "
              "bound from DeepSpeed's (scalar tail max %.2f ulp)",
              C->name, r->stage, a->bound_used, a->tail_max);
    if (zc_clip_class(C, r->stage) == ds_clip_class(C))
        cr_expect(a->max_dist == 0,
                  "%s, zeroc stage %d, deepspeed_arithmetic: master %s[%lld] after step %d is "
                  "%.9g, DeepSpeed %.9g: %.2f ulp (outside DeepSpeed's scalar tail the run is "
                  "DeepSpeed's bit for bit)",
                  C->name, r->stage, p, (long long)k, a->worst_step, a->worst.zc, a->worst.ds,
                  a->max_dist);
}

/* zeroc's arithmetic: DeepSpeed's sequences, the initial master exactly,
 * every master within o_arith_bound. */
static void assert_bounded(const o_case *C, const o_run *r, const agree *a)
{
    assert_sequences(C, r, a);
    cr_expect(a->master0_dist == 0, "%s, zeroc stage %d: the initial master is %.2f ulp from "
              "DeepSpeed's",
              C->name, r->stage, a->master0_dist);
    cr_expect(a->bound_used >= 0 && a->bound_used <= 1.0,
              "%s, zeroc stage %d, zeroc's arithmetic: a master is %.3g times the bound on "
              "the two arithmetics' difference from DeepSpeed's (worst %.2f ulp after step %d)",
              C->name, r->stage, a->bound_used, a->max_dist, a->worst_step);
}

/* Runs C with o and compares it with the bound of its arithmetic (into *B,
 * which the caller frees); in DeepSpeed's arithmetic the ulps leave out
 * DeepSpeed's scalar tail. */
static agree run_case(const o_case *C, const o_replay_opts *o, o_run *r, double **B)
{
    o_replay(&F, C, o, r);
    *B = malloc((size_t)C->steps * (size_t)F.n * sizeof(double));
    bool *tail = malloc((size_t)F.n * sizeof(bool));
    cr_assert(*B && tail);
    o_arith_bound(&F, C, r, o->ds_arith, *B);
    o_ds_tail(&F, C, tail);
    agree a = compare(C, r, o, *B, o->ds_arith ? tail : NULL);
    free(tail);
    return a;
}

/* Two zeroc runs took the same steps, bit for bit. */
static bool same_run(const o_case *C, const o_run *a, const o_run *b, char *why, size_t cap)
{
    const size_t n = (size_t)F.n, S = (size_t)C->steps;
    if (memcmp(a->master0, b->master0, n * sizeof(float))) {
        snprintf(why, cap, "the initial masters differ");
        return false;
    }
    for (size_t t = 0; t < S; t++) {
        const float *x = a->masters + t * n, *y = b->masters + t * n;
        if (memcmp(x, y, n * sizeof(float))) {
            size_t i = 0;
            while (i < n && !memcmp(&x[i], &y[i], sizeof(float)))
                i++;
            int64_t k;
            const char *p = param_of((int64_t)i, &k);
            snprintf(why, cap, "after step %zu %s[%lld] is %.9g vs %.9g", t + 1, p,
                     (long long)k, x[i], y[i]);
            return false;
        }
        if (a->grad_norm[t] != b->grad_norm[t] || a->loss_scale[t] != b->loss_scale[t] ||
            a->lr[t] != b->lr[t] || a->skipped[t] != b->skipped[t]) {
            snprintf(why, cap, "step %zu reports a different norm, scale, lr or skip", t + 1);
            return false;
        }
    }
    return true;
}

static void assert_same_run(const o_case *C, const o_run *a, const o_run *b)
{
    char why[256];
    cr_expect(same_run(C, a, b, why, sizeof why), "%s: zeroc stage %d and stage %d: %s",
              C->name, a->stage, b->stage, why);
}

/* D3, per zeroc stage. With gradient accumulation in fp16/bf16 DeepSpeed
 * sums the micro-steps in the model dtype when data_types.grad_accum_dtype
 * is unset (engine.get_data_types; stage_1_and_2.py and stage3.py
 * gradient_accumulation_dtype), rounding the running sum after every add,
 * and its ZeRO-2/3 sum them in fp32 with "fp32" (its ZeRO-1 rounds the
 * window to the model dtype either way). zeroc's default (unset or "fp32")
 * sums in fp32: its stages 0/1 round the window's mean once (what a 16-bit
 * sum of two halves gives at one rank), its stages 2/3 keep the sum of the
 * reductions in fp32. The index marks the zeroc stages that therefore
 * differ when the case's config is replayed as it is (make_fixtures.py
 * d3_stages), and those that differ when zeroc is told to accumulate in the
 * model dtype (d3_key_stages: at two ranks, where the reduction falls);
 * they differ from the first step on, the loss scale, skip and lr
 * sequences staying DeepSpeed's. */
static void check_d3_stage(const o_case *C, const o_run *r, const agree *a)
{
    cr_expect(a->scale_diff < 0 && a->skip_diff < 0 && a->lr_diff < 0,
              "%s, zeroc stage %d: loss scale / skip / lr sequences differ", C->name, r->stage);
    cr_expect(a->master0_dist == 0 && a->step1_dist > O_TOL_ULP,
              "%s, zeroc stage %d: the first step is %.2f ulp from DeepSpeed's: if zeroc "
              "accumulates as DeepSpeed does there now, update d3_stages / d3_key_stages in "
              "make_fixtures.py (--reindex)",
              C->name, r->stage, a->step1_dist);
}

/* Every "match" case of `dtype`, at every zeroc stage, in both arithmetics. */
static void match_cases(const char *dtype)
{
    int ran = 0;
    for (int c = 0; c < F.ncases; c++) {
        const o_case *C = &F.cases[c];
        if (strcmp(C->expect, "match") || strcmp(C->dtype, dtype))
            continue;
        for (int ds = 1; ds >= 0; ds--) {
            o_run runs[4];
            for (int s = 0; s < 4; s++) {
                const o_replay_opts o = {.stage = s, .ds_arith = ds};
                double *B;
                agree a = run_case(C, &o, &runs[s], &B);
                char what[64];
                snprintf(what, sizeof what, "%s, %s arithmetic", C->expect_at[s],
                         ds ? "deepspeed" : "zeroc");
                report(C, &runs[s], &a, what);
                if (!strcmp(C->expect_at[s], "D3")) {
                    if (!ds)
                        check_d3_stage(C, &runs[s], &a);
                } else if (ds) {
                    assert_match(C, &runs[s], &a);
                } else {
                    assert_bounded(C, &runs[s], &a);
                }
                free(B);
            }
            /* The host path is bitwise across stages at a fixed world size
             * and accumulation 1 (with accumulation stages 0/1 round the
             * window's mean to the working dtype once, stages 2/3 keep each
             * micro-step's reduced gradient in fp32); in DeepSpeed's
             * arithmetic across the stages that clip alike (zc_clip_class:
             * DeepSpeed's stages do not). */
            if (C->accum == 1)
                for (int s = 1; s < 4; s++)
                    if (!ds || zc_clip_class(C, s) == zc_clip_class(C, 1))
                        assert_same_run(C, &runs[ds ? 1 : 0], &runs[s]);
            for (int s = 0; s < 4; s++)
                o_run_free(&runs[s]);
        }
        ran++;
    }
    cr_assert(ran > 0, "no %s case in the fixtures", dtype);
    t_assert_no_leaks();
}

Test(oracle, fp32) { match_cases("fp32"); }
Test(oracle, bf16) { match_cases("bf16"); }
Test(oracle, fp16) { match_cases("fp16"); }

/* ---- what the fixtures cover ---------------------------------------------- */

static int count_cases(const char *expect, const char *dtype, int ds_stage, const char *text)
{
    int n = 0;
    for (int c = 0; c < F.ncases; c++) {
        const o_case *C = &F.cases[c];
        if ((!expect || !strcmp(C->expect, expect)) && (!dtype || !strcmp(C->dtype, dtype)) &&
            (ds_stage < 0 || C->ds_stage == ds_stage) && (!text || strstr(C->config_json, text)))
            n++;
    }
    return n;
}

Test(oracle, matrix)
{
    fprintf(stderr, "oracle fixtures: DeepSpeed %s, torch %s, %d cases, %lld elements\n",
            F.ds_version, F.torch_version, F.ncases, (long long)F.n);
    cr_expect(*F.ds_version && *F.torch_version, "the fixtures name no DeepSpeed or torch version");
    for (int s = 0; s < 4; s++)
        cr_expect(count_cases("match", "fp32", s, NULL) > 0, "no fp32 case at DeepSpeed stage %d",
                  s);
    for (int s = 1; s < 4; s++) {
        cr_expect(count_cases("match", "bf16", s, NULL) > 0, "no bf16 case at DeepSpeed stage %d",
                  s);
        cr_expect(count_cases("match", "fp16", s, NULL) > 0, "no fp16 case at DeepSpeed stage %d",
                  s);
    }
    static const char *const covered[] = {
        "\"type\":\"AdamW\"", "\"type\":\"Adam\"", "\"adam_w_mode\":false",
        "\"bias_correction\":false", "\"gradient_clipping\":0.0", "\"gradient_clipping\":0.29",
        "\"type\":\"WarmupLR\"", "\"warmup_type\":\"linear\"", "\"type\":\"WarmupDecayLR\"",
        "\"type\":\"WarmupCosineLR\"", "\"type\":\"OneCycle\"", "\"cycle_momentum\":true",
        "\"gradient_accumulation_steps\":2", "\"hysteresis\":2",
        "\"grad_accum_dtype\":\"fp32\"",
    };
    for (size_t i = 0; i < sizeof covered / sizeof *covered; i++)
        cr_expect(count_cases("match", NULL, -1, covered[i]) > 0, "no match case has %s",
                  covered[i]);
    int world2 = 0, skips = 0, default_clip = 0;
    for (int c = 0; c < F.ncases; c++) {
        const o_case *C = &F.cases[c];
        if (strcmp(C->expect, "match"))
            continue;
        world2 += C->world == 2;
        default_clip += !strstr(C->config_json, "gradient_clipping");
        for (int t = 0; t < C->steps; t++)
            skips += C->skipped[t] && strcmp(C->dtype, "fp32");
    }
    cr_expect(world2 > 0 && skips > 0 && default_clip > 0,
              "match cases: %d of world 2, %d skipped 16-bit steps, %d with the default clip",
              world2, skips, default_clip);
    static const char *const kinds[] = {"D1", "D2", "D4", "D5"};
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
        cr_expect(count_cases(kinds[i], NULL, -1, NULL) > 0, "no %s case", kinds[i]);
    int d3[4] = {0};
    for (int c = 0; c < F.ncases; c++)
        for (int s = 0; s < 4; s++)
            d3[s] += !strcmp(F.cases[c].expect_at[s], "D3");
    cr_expect(d3[0] && d3[1] && d3[2] && d3[3], "D3 runs by zeroc stage: %d %d %d %d", d3[0],
              d3[1], d3[2], d3[3]);
}

/* ---- differences held as differences -------------------------------------- */

/* Runs every case of kind `expect` at every zeroc stage with the options o
 * (its stage replaced), calling check on each run. */
static int each_case(const char *expect, o_replay_opts o, const char *what,
                     void (*check)(const o_case *C, const o_run *r, const agree *a))
{
    int ran = 0;
    for (int c = 0; c < F.ncases; c++) {
        const o_case *C = &F.cases[c];
        if (strcmp(C->expect, expect))
            continue;
        for (int s = 0; s < 4; s++) {
            o_run r;
            o.stage = s;
            double *B;
            agree a = run_case(C, &o, &r, &B);
            report(C, &r, &a, what);
            check(C, &r, &a);
            free(B);
            o_run_free(&r);
        }
        ran++;
    }
    return ran;
}

/* The step (0-based) on which DeepSpeed's loss scale grows, -1 if none: the
 * scale recorded for the next step is larger. */
static int first_growth(const o_case *C)
{
    for (int t = 0; t + 1 < C->steps; t++)
        if (C->loss_scale[t + 1] > C->loss_scale[t])
            return t;
    return -1;
}

/* D1. On a step whose loss scale grows, DeepSpeed (stage_1_and_2.py and
 * stage3.py step(), FP16_Optimizer.step) updates the scale before it
 * unscales, so it divides that step's gradient by the doubled scale; zeroc
 * unscales with the scale the gradients were computed with. The loss
 * scale, skip and lr sequences stay DeepSpeed's, the norms are the
 * gradient's (DeepSpeed's stage 3 reports the growth step's over the grown
 * scale: expected_norm), and in DeepSpeed's arithmetic the masters agree
 * up to the first growth step and differ from it on. */
static void check_d1_default(const o_case *C, const o_run *r, const agree *a)
{
    const int g = first_growth(C);
    cr_assert(g >= 1, "%s: no growth step after the first in the fixture", C->name);
    assert_sequences(C, r, a);
    cr_expect(a->master0_dist == 0 && a->first_over == g + 1,
              "%s, zeroc stage %d: the first step beyond %g ulp (outside DeepSpeed's scalar "
              "tail) is %d; DeepSpeed's loss scale grows on step %d, where the difference "
              "should start",
              C->name, r->stage, O_TOL_ULP, a->first_over, g + 1);
}

/* With fp16.deepspeed_unscale_order (the case's zeroc_extra) the run is
 * DeepSpeed's, its norms too: zeroc's stages 0 and 3 report the growth
 * step's norm over the grown scale as DeepSpeed's stage 3 does, its stages
 * 1-2 the gradient's as DeepSpeed's stages 1-2 (expected_norm). */
static void check_d1_key(const o_case *C, const o_run *r, const agree *a)
{
    assert_match(C, r, a);
}

Test(oracle, d1_unscale_order)
{
    cr_assert(each_case("D1", (o_replay_opts){.ds_arith = true}, "D1, deepspeed arithmetic",
                        check_d1_default) > 0,
              "no D1 case in the fixtures");
    each_case("D1", (o_replay_opts){.ds_arith = true, .extra = true},
              "D1 key, deepspeed arithmetic", check_d1_key);
    t_assert_no_leaks();
}

/* D3 (check_d3_stage above). DeepSpeed's own pairs: a run with
 * grad_accum_dtype unset is its "fp32" twin's at ZeRO-1 only, and its run
 * with the key naming the model dtype (its default). zeroc's default sums
 * in fp32 whatever the key says of fp32: a run with the key unset is its
 * "fp32" twin's at every zeroc stage, bit for bit. And with
 * data_types.grad_accum_dtype set to the model dtype zeroc accumulates as
 * DeepSpeed does: every run DeepSpeed took with the key unset, replayed
 * with it, is held to DeepSpeed's at every zeroc stage (assert_match, as
 * the match cases are), except where the index says the ranks' reduction
 * falls elsewhere (two ranks: check_d3_stage); at one rank zeroc's four
 * stages are then the same run, bit for bit, as DeepSpeed's three are. */
Test(oracle, d3_grad_accum_dtype)
{
    int pairs = 0, keyed = 0;
    int covered[2][4][4] = {{{0}}}; /* [bf16, fp16][DeepSpeed stage][accum] */
    for (int c = 0; c < F.ncases; c++) {
        const o_case *C = &F.cases[c];
        if (C->key_unset_twin) {
            const o_case *T = o_find(&F, C->key_unset_twin);
            cr_assert(T && T->accum == C->accum && !strstr(T->config_json, "grad_accum_dtype"),
                      "%s: no twin %s with grad_accum_dtype unset", C->name, C->key_unset_twin);
            cr_expect(C->key_unset_twin_bitwise_equal,
                      "%s: DeepSpeed's run with grad_accum_dtype %s is not its run with the key "
                      "unset (%s)", C->name, C->dtype, T->name);
        }
        if (C->twin) {
            const o_case *T = o_find(&F, C->twin);
            cr_assert(T && T->accum > 1 &&
                          strstr(T->config_json, "\"grad_accum_dtype\":\"fp32\""),
                      "%s: no twin %s with grad_accum_dtype fp32", C->name, C->twin);
            cr_expect(C->twin_bitwise_equal == (C->ds_stage == 1),
                      "%s: DeepSpeed's run %s its twin's", C->name,
                      C->twin_bitwise_equal ? "is" : "is not");
            for (int s = 0; s < 4; s++) {
                o_run r, rt;
                o_replay(&F, C, &(o_replay_opts){.stage = s}, &r);
                o_replay(&F, T, &(o_replay_opts){.stage = s}, &rt);
                char why[256];
                cr_expect(same_run(C, &r, &rt, why, sizeof why),
                          "%s, zeroc stage %d: not its twin %s's run (%s): zeroc's default "
                          "accumulation is fp32, whether the key is unset or \"fp32\"",
                          C->name, s, T->name, why);
                o_run_free(&r);
                o_run_free(&rt);
            }
            pairs++;
        }
        if (!C->d3_key)
            continue;
        for (int ds = 1; ds >= 0; ds--) {
            o_run runs[4];
            for (int s = 0; s < 4; s++) {
                const o_replay_opts o = {.stage = s, .ds_arith = ds,
                                         .grad_accum_dtype = C->d3_key};
                double *B;
                agree a = run_case(C, &o, &runs[s], &B);
                const bool d3 = !strcmp(C->d3_key_expect_at[s], "D3");
                char what[80];
                snprintf(what, sizeof what, "%s, grad_accum_dtype %s, %s arithmetic",
                         d3 ? "D3" : "match", C->d3_key, ds ? "deepspeed" : "zeroc");
                report(C, &runs[s], &a, what);
                if (d3) {
                    if (!ds)
                        check_d3_stage(C, &runs[s], &a);
                } else if (ds) {
                    assert_match(C, &runs[s], &a);
                } else {
                    assert_bounded(C, &runs[s], &a);
                }
                free(B);
            }
            if (C->world == 1)
                for (int s = 1; s < 4; s++)
                    if (!ds || zc_clip_class(C, s) == zc_clip_class(C, 1))
                        assert_same_run(C, &runs[ds ? 1 : 0], &runs[s]);
            for (int s = 0; s < 4; s++)
                o_run_free(&runs[s]);
        }
        const int dt = !strcmp(C->dtype, "fp16");
        if (C->ds_stage >= 1 && C->ds_stage <= 3 && C->accum <= 3)
            covered[dt][C->ds_stage][C->accum]++;
        keyed++;
    }
    cr_assert(pairs > 0 && keyed > 0, "no grad_accum_dtype pair (%d) or keyed replay (%d) in "
              "the fixtures", pairs, keyed);
    /* What the fixtures hold zeroc's 16-bit accumulation to: bf16 and fp16,
     * DeepSpeed's stages 1-3, three micro-steps (a sum that rounds twice),
     * and two (bf16 at every stage, fp16 at ZeRO-2). */
    for (int dt = 0; dt < 2; dt++)
        for (int st = 1; st <= 3; st++)
            cr_expect(covered[dt][st][3] > 0 && (covered[dt][st][2] > 0 || dt == 1),
                      "no %s run at DeepSpeed stage %d with accumulation 2 and 3 (%d, %d)",
                      dt ? "fp16" : "bf16", st, covered[dt][st][2], covered[dt][st][3]);
    cr_expect(covered[1][2][2] > 0, "no fp16 run at ZeRO-2 with accumulation 2");
    t_assert_no_leaks();
}

/* D5. DeepSpeed casts the module to fp16/bf16 before it builds the fp32
 * master, so the master starts from the rounded values (to nearest even:
 * the fixture's initial master is exactly that); zc_block_load keeps the
 * caller's fp32 values as the master, so zeroc differs from the start;
 * loaded with zc_block_load_rounded the run is DeepSpeed's: within
 * O_TOL_ULP in DeepSpeed's arithmetic, within the bound in zeroc's. */
static void check_d5_unrounded(const o_case *C, const o_run *r, const agree *a)
{
    cr_expect(a->master0_dist > 0 && a->first_over == 1,
              "%s, zeroc stage %d: the unrounded load gives DeepSpeed's master (initial %.2f "
              "ulp, first beyond %g ulp: step %d)",
              C->name, r->stage, a->master0_dist, O_TOL_ULP, a->first_over);
    for (int64_t i = 0; i < F.n; i++)
        cr_assert_eq(r->master0[i], C->init[i], "%s: zc_block_load did not keep value %lld",
                     C->name, (long long)i);
}

Test(oracle, d5_rounded_load)
{
    cr_assert(each_case("D5", (o_replay_opts){.ds_arith = true}, "D5, deepspeed arithmetic",
                        check_d5_unrounded) > 0,
              "no D5 case in the fixtures");
    each_case("D5", (o_replay_opts){.ds_arith = true, .round_init = true},
              "rounded load, deepspeed arithmetic", assert_match);
    each_case("D5", (o_replay_opts){.round_init = true}, "rounded load, zeroc arithmetic",
              assert_bounded);
    t_assert_no_leaks();
}

/* D2, D4. DeepSpeed's stage-0 fp16/bf16 path (FP16_Optimizer) takes an
 * optimizer step on zero gradients when it is built (fused_optimizer.py
 * initialize_optimizer_states), so the Adam step count is one ahead and
 * decoupled weight decay has moved the master before the first step: the
 * fixture's initial master is init * (1 - lr * weight_decay), to an ulp.
 * And the engine scales the loss only for ZeRO optimizers (engine.backward,
 * scale_if_loss), so in fp16 the gradients it unscales were never scaled:
 * the norm it reports is the true one divided by the loss scale. zeroc
 * copies neither: its stage 0 is its stages 1-3 (the fp16 and bf16 match
 * cases hold zeroc's stage 0 to DeepSpeed's stages 1-3). */
static void check_stage0_defect(const o_case *C, const o_run *r, const agree *a)
{
    cr_expect(a->first_over > 0, "%s, zeroc stage %d: zeroc agrees with DeepSpeed's stage-0 "
              "16-bit path (max %.2f ulp)",
              C->name, r->stage, a->max_dist);
    if (strcmp(C->expect, "D2"))
        return;
    for (int t = 0; t < C->steps; t++) {
        if (C->skipped[t])
            continue;
        const double want = r->grad_norm[t] / C->loss_scale[t];
        cr_expect(fabs(C->grad_norm[t] - want) <= O_NORM_REL * want,
                  "%s, step %d: DeepSpeed's norm %.9g is not zeroc's %.9g over the loss scale %g",
                  C->name, t + 1, C->grad_norm[t], r->grad_norm[t], C->loss_scale[t]);
    }
}

Test(oracle, deepspeed_stage0_16bit)
{
    for (int c = 0; c < F.ncases; c++) {
        const o_case *C = &F.cases[c];
        if (strcmp(C->expect, "D2") && strcmp(C->expect, "D4"))
            continue;
        cr_assert(C->has_master0, "%s: DeepSpeed's initial master is the initial values: no "
                  "construction step",
                  C->name);
        json_t *cfg = json_loads(C->config_json, 0, NULL);
        json_t *op = json_object_get(json_object_get(cfg, "optimizer"), "params");
        const float decay = (float)(json_number_value(json_object_get(op, "lr")) *
                                    json_number_value(json_object_get(op, "weight_decay")));
        json_decref(cfg);
        cr_assert(decay > 0, "%s: no decoupled weight decay to show the construction step",
                  C->name);
        for (int64_t i = 0; i < F.n; i++) {
            const float want = C->init[i] - decay * C->init[i];
            cr_expect(t_ulp_diff_f32(C->master0[i], want) <= 1,
                      "%s: DeepSpeed's initial master[%lld] %.9g, not init %.9g less one "
                      "decay step (%.9g)",
                      C->name, (long long)i, C->master0[i], C->init[i], want);
        }
    }
    cr_assert(each_case("D2", (o_replay_opts){0}, "D2", check_stage0_defect) > 0,
              "no D2 case in the fixtures");
    cr_assert(each_case("D4", (o_replay_opts){0}, "D4", check_stage0_defect) > 0,
              "no D4 case in the fixtures");
    t_assert_no_leaks();
}
