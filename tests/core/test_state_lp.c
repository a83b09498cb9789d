/* Optimizer state in bf16 (bf16.bf16_master_weights_and_grads,
 * bf16.bf16_optimizer_states, bf16.exp_avg_dtype / exp_avg_sq_dtype): the
 * stochastic rounding's random bits are a function of (seed, step, the
 * element's flat index in the model), so where the state lives and how it
 * is sharded changes no bit:
 *
 *   - stages 1-3 bitwise equal at every world 1-4 (a bf16 master needs
 *     stage 1-3, as DeepSpeed); bf16 moments alone at stages 0-3;
 *   - worlds 1-4 bitwise equal when every rank writes the same gradients
 *     (of five significant bits, so that the bf16 sum of W equal values and
 *     the average are exact at every W); at W = 3 the reported gradient
 *     norm, scaled by 1/3 in double, may differ in its last bit, so there
 *     it is held within two ulps while the state stays bitwise;
 *   - the device, cpu and nvme homes bitwise equal (a bf16 master with fp32
 *     moments lives under offload only: cpu against nvme);
 *   - the state is bf16: every gathered master value has zero low 16 bits;
 *   - the rounding is used: stochastic and nearest-even runs differ, and a
 *     different seed gives different bits. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "helpers.h"
#include "t_engine.h"
#include "t_offload.h"
#include "t_runs.h"

static const char *const all_bf16[] = {"bf16.bf16_master_weights_and_grads", "true",
                                       "bf16.bf16_optimizer_states", "true", NULL};
static const char *const moments_bf16[] = {"bf16.exp_avg_dtype", "\"bf16\"",
                                           "bf16.exp_avg_sq_dtype", "\"bf16\"", NULL};
static const char *const v_bf16[] = {"bf16.exp_avg_sq_dtype", "\"bf16\"", NULL};
static const char *const master_bf16[] = {"bf16.bf16_master_weights_and_grads", "true", NULL};
static const char *const all_bf16_rne[] = {"bf16.bf16_master_weights_and_grads", "true",
                                           "bf16.bf16_optimizer_states", "true",
                                           "bf16.stochastic_rounding", "false", NULL};
static const char *const all_bf16_seed7[] = {"bf16.bf16_master_weights_and_grads", "true",
                                             "bf16.bf16_optimizer_states", "true",
                                             "bf16.stochastic_rounding_seed", "7", NULL};

static t_run *run(int stage, int world, zc_dtype dt, const char *const *keys, const char *off,
                  const char *path_json, bool same_grads)
{
    t_run cfg;
    t_run_init(&cfg, stage, world, dt);
    cfg.keys = keys;
    cfg.offload = off;
    cfg.nvme_path_json = path_json;
    cfg.same_grads = same_grads;
    return t_run_trained(&cfg);
}

static bool master_is_bf16(const t_run *r)
{
    for (int64_t i = 0; i < t_total_numel(); i++) {
        uint32_t u;
        memcpy(&u, &r->master[i], 4);
        if (u & 0xFFFFu)
            return false;
    }
    return true;
}

static void stages_bitwise(const char *const *keys, int first_stage, zc_dtype dt)
{
    for (int world = 1; world <= 4; world++) {
        t_run *ref = run(first_stage, world, dt, keys, NULL, NULL, false);
        t_assert_trained(ref);
        for (int stage = first_stage + 1; stage <= 3; stage++) {
            t_run *r = run(stage, world, dt, keys, NULL, NULL, false);
            char what[96];
            snprintf(what, sizeof what, "world %d: stage %d against stage %d", world, stage,
                     first_stage);
            t_assert_same_training(r, ref, what);
            t_run_free(r);
        }
        t_run_free(ref);
    }
    t_assert_no_leaks();
}

Test(state_lp, bf16_master_and_moments_stages_1_to_3_bitwise)
{
    stages_bitwise(all_bf16, 1, ZC_DTYPE_BF16);
}

Test(state_lp, bf16_moments_stages_0_to_3_bitwise)
{
    stages_bitwise(moments_bf16, 0, ZC_DTYPE_BF16);
    stages_bitwise(v_bf16, 0, ZC_DTYPE_F32);
}

/* r's master bitwise ref's and each step's gradient norm within two ulps. */
static void assert_same_masters_norm_2ulp(const t_run *r, const t_run *ref, const char *what)
{
    cr_assert_eq(memcmp(r->master, ref->master, (size_t)t_total_numel() * sizeof(float)), 0,
                 "%s: the masters differ", what);
    for (int s = 0; s < ref->steps; s++) {
        const double a = ref->info[s].grad_norm;
        const double lo = nextafter(nextafter(a, -INFINITY), -INFINITY);
        const double hi = nextafter(nextafter(a, INFINITY), INFINITY);
        cr_assert(r->info[s].grad_norm >= lo && r->info[s].grad_norm <= hi,
                  "%s step %d: norm %.17g vs %.17g", what, s, r->info[s].grad_norm, a);
        cr_assert_eq(r->info[s].skipped, ref->info[s].skipped, "%s step %d skipped", what, s);
    }
}

Test(state_lp, worlds_1_to_4_bitwise_with_equal_gradients)
{
    for (int stage = 1; stage <= 3; stage++) {
        t_run *ref = run(stage, 1, ZC_DTYPE_BF16, all_bf16, NULL, NULL, true);
        t_assert_trained(ref);
        cr_assert(master_is_bf16(ref), "stage %d: a master value has low bits set", stage);
        for (int world = 2; world <= 4; world++) {
            t_run *r = run(stage, world, ZC_DTYPE_BF16, all_bf16, NULL, NULL, true);
            char what[96];
            snprintf(what, sizeof what, "stage %d: world %d against world 1", stage, world);
            if (world == 3)
                assert_same_masters_norm_2ulp(r, ref, what);
            else
                t_assert_same_training(r, ref, what);
            t_run_free(r);
        }
        t_run_free(ref);
    }
    t_assert_no_leaks();
}

Test(state_lp, homes_bitwise)
{
    t_swapdir dir;
    t_swapdir_make(&dir, "zc-state-lp");
    for (int world = 1; world <= 2; world++)
        for (int stage = 1; stage <= 3; stage++) {
            t_run *ref = run(stage, world, ZC_DTYPE_BF16, all_bf16, NULL, NULL, false);
            char what[96];
            t_run *cpu = run(stage, world, ZC_DTYPE_BF16, all_bf16, "cpu", NULL, false);
            snprintf(what, sizeof what, "bf16 state, world %d stage %d: cpu", world, stage);
            t_assert_same_training(cpu, ref, what);
            t_run *nv = run(stage, world, ZC_DTYPE_BF16, all_bf16, "nvme", dir.json, false);
            snprintf(what, sizeof what, "bf16 state, world %d stage %d: nvme", world, stage);
            t_assert_same_training(nv, ref, what);
            /* bf16 master, fp32 moments: offload only (DeepSpeed's rule). */
            t_run *mc = run(stage, world, ZC_DTYPE_BF16, master_bf16, "cpu", NULL, false);
            t_run *mn = run(stage, world, ZC_DTYPE_BF16, master_bf16, "nvme", dir.json, false);
            snprintf(what, sizeof what, "bf16 master, world %d stage %d: nvme vs cpu", world,
                     stage);
            t_assert_same_training(mn, mc, what);
            cr_assert(master_is_bf16(mc), "%s: a master value has low bits set", what);
            cr_assert_eq(t_dir_entries(dir.path), 0, "swap files left in %s", dir.path);
            t_run_free(ref);
            t_run_free(cpu);
            t_run_free(nv);
            t_run_free(mc);
            t_run_free(mn);
        }
    t_swapdir_remove(&dir);
    t_assert_no_leaks();
}

static bool same_master(const t_run *a, const t_run *b)
{
    return memcmp(a->master, b->master, (size_t)t_total_numel() * sizeof(float)) == 0;
}

Test(state_lp, rounding_and_seed_change_the_bits)
{
    t_run *sr = run(2, 2, ZC_DTYPE_BF16, all_bf16, NULL, NULL, false);
    t_run *rne = run(2, 2, ZC_DTYPE_BF16, all_bf16_rne, NULL, NULL, false);
    t_run *seed = run(2, 2, ZC_DTYPE_BF16, all_bf16_seed7, NULL, NULL, false);
    t_run *f32 = run(2, 2, ZC_DTYPE_BF16, NULL, NULL, NULL, false);
    t_assert_trained(sr);
    cr_assert(master_is_bf16(rne) && master_is_bf16(seed));
    cr_assert(!master_is_bf16(f32), "the fp32-state run's master should not be bf16 values");
    cr_assert(!same_master(sr, rne), "stochastic and nearest-even rounding gave the same bits");
    cr_assert(!same_master(sr, seed), "seeds 0 and 7 gave the same bits");
    cr_assert(!same_master(sr, f32), "bf16 state and fp32 state gave the same master");
    t_run_free(sr);
    t_run_free(rne);
    t_run_free(seed);
    t_run_free(f32);
    t_assert_no_leaks();
}
