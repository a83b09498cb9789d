/* zc_param_load_rounded and zc_block_load_rounded: DeepSpeed's master, made
 * from the values rounded to the working dtype.
 *
 * Held to what the call promises, with the rounding computed independently
 * (t_round_to: the compiler's _Float16, and the nearer bf16 neighbour in
 * double arithmetic): loading the model's initial values with the _rounded
 * calls trains exactly - every master, step info and norm, bitwise - as
 * loading the values this test rounded with the plain calls, at stages 0-3,
 * worlds 1-3, bf16 and fp16, through zc_param_load and zc_block_load, with
 * the optimizer state in pinned host memory (offload_optimizer "cpu") and,
 * at stage 3, the parameter shards too (offload_param "cpu", whose shards
 * are converted from the caller's unrounded values on the host). And it
 * must make a difference: the plain load of the unrounded values trains to
 * other masters, while for fp32 parameters the two calls are the same. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "helpers.h"
#include "t_engine.h"
#include "t_runs.h"

typedef struct lr_case {
    int stage, world;
    zc_dtype dt;
    bool blocks, offload;
} lr_case;

static t_run *run_one(const lr_case *c, int load)
{
    t_run cfg;
    t_run_init(&cfg, c->stage, c->world, c->dt);
    cfg.steps = 6;
    cfg.init_load = load;
    cfg.block_values = c->blocks;
    if (c->offload && c->stage > 0)
        cfg.offload = "cpu";
    if (c->offload && c->stage == 3)
        cfg.offload_param = "cpu";
    return t_run_trained(&cfg);
}

static void describe(const lr_case *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s stage %d world %d%s%s", zc_dtype_name(c->dt), c->stage, c->world,
             c->blocks ? " (block calls)" : "", c->offload ? " (offloaded)" : "");
}

static void check_rounded_is_prerounded(zc_dtype dt, bool blocks, bool offload)
{
    for (int world = 1; world <= 3; world++)
        for (int stage = 0; stage <= 3; stage++) {
            if (offload && stage == 0)
                continue; /* the optimizer's offload runs at stages 1-3 */
            const lr_case c = {stage, world, dt, blocks, offload};
            char what[128];
            describe(&c, what, sizeof what);
            t_run *rounded = run_one(&c, T_LOAD_ROUNDED);
            t_run *pre = run_one(&c, T_LOAD_PREROUNDED);
            t_assert_trained(rounded);
            t_assert_same_training(rounded, pre, what);
            t_run_free(rounded);
            t_run_free(pre);
        }
    t_assert_no_leaks();
}

Test(load_rounded, bf16_is_the_prerounded_load) { check_rounded_is_prerounded(ZC_DTYPE_BF16, false, false); }
Test(load_rounded, fp16_is_the_prerounded_load) { check_rounded_is_prerounded(ZC_DTYPE_F16, false, false); }
Test(load_rounded, bf16_block_calls) { check_rounded_is_prerounded(ZC_DTYPE_BF16, true, false); }
Test(load_rounded, bf16_offloaded) { check_rounded_is_prerounded(ZC_DTYPE_BF16, false, true); }
Test(load_rounded, fp16_offloaded_block_calls) { check_rounded_is_prerounded(ZC_DTYPE_F16, true, true); }

/* The master differs from the plain load's, and the values it starts from
 * are not all representable (else the test would prove nothing). */
Test(load_rounded, differs_from_the_plain_load)
{
    int unrepresentable = 0;
    for (int i = 0; i < T_NPARAMS; i++)
        for (int64_t k = 0; k < t_numel[i]; k++)
            unrepresentable += t_round_to(t_init_value(i, k), ZC_DTYPE_BF16) !=
                               t_init_value(i, k);
    cr_assert_gt(unrepresentable, t_total_numel() / 2, "only %d of %lld initial values are not "
                 "bf16 values", unrepresentable, (long long)t_total_numel());
    for (int stage = 0; stage <= 3; stage += 3) {
        const lr_case c = {stage, 2, ZC_DTYPE_BF16, false, false};
        t_run *rounded = run_one(&c, T_LOAD_ROUNDED);
        t_run *plain = run_one(&c, T_LOAD_PLAIN);
        cr_assert(memcmp(rounded->master, plain->master,
                         (size_t)t_total_numel() * sizeof(float)) != 0,
                  "stage %d: the rounded load's master equals the plain load's", stage);
        t_run_free(rounded);
        t_run_free(plain);
    }
    t_assert_no_leaks();
}

Test(load_rounded, fp32_is_the_plain_load)
{
    for (int stage = 0; stage <= 3; stage++) {
        const lr_case c = {stage, 2, ZC_DTYPE_F32, stage % 2 == 1, false};
        char what[128];
        describe(&c, what, sizeof what);
        t_run *rounded = run_one(&c, T_LOAD_ROUNDED);
        t_run *plain = run_one(&c, T_LOAD_PLAIN);
        t_assert_same_training(rounded, plain, what);
        t_run_free(rounded);
        t_run_free(plain);
    }
    t_assert_no_leaks();
}
