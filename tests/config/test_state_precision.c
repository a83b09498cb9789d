/* The optimizer state's precision keys (src/config/precision.c): what they
 * resolve to, the combinations DeepSpeed refuses (refused with its reason)
 * and zeroc's own rules for its per-moment dtypes. */
#include <criterion/criterion.h>
#include <string.h>

#include "config/config.h"
#include "zeroc/zeroc.h"

static zc_config *load(const char *text)
{
    zc_config *cfg = NULL;
    cr_assert_eq(zc_config_load_string(&cfg, text, "t.json", 0), ZC_OK, "%s: %s", text,
                 zc_last_error());
    return cfg;
}

/* The engine's check refuses text with every needle in its message. */
static void expect_refused(const char *text, const char *const *needles)
{
    zc_config *cfg = load(text);
    cr_assert_eq(zc__config_engine_check(cfg), ZC_ERR_CONFIG, "accepted: %s", text);
    const char *msg = zc_last_error();
    for (int i = 0; needles[i]; i++)
        cr_assert_not_null(strstr(msg, needles[i]), "'%s' not in: %s", needles[i], msg);
    zc_config_destroy(cfg);
}

static zc_state_dtypes accepted(const char *text)
{
    zc_config *cfg = load(text);
    cr_assert_eq(zc__config_engine_check(cfg), ZC_OK, "%s: %s", text, zc_last_error());
    const zc_state_dtypes s = zc__config_state_dtypes(cfg);
    zc_config_destroy(cfg);
    return s;
}

#define Z(stage, rest) "{\"zero_optimization\": {\"stage\": " #stage rest "}, "
#define CPU ", \"offload_optimizer\": {\"device\": \"cpu\"}"

Test(state_precision, resolves_each_tensor)
{
    zc_state_dtypes s = accepted("{\"bf16\": {\"enabled\": true}}");
    cr_assert(s.master == ZC_DTYPE_F32 && s.m == ZC_DTYPE_F32 && s.v == ZC_DTYPE_F32);
    s = accepted(Z(2, "") "\"bf16\": {\"enabled\": true, \"bf16_master_weights_and_grads\": "
                 "true, \"bf16_optimizer_states\": true}}");
    cr_assert(s.master == ZC_DTYPE_BF16 && s.m == ZC_DTYPE_BF16 && s.v == ZC_DTYPE_BF16);
    s = accepted(Z(1, CPU) "\"bf16\": {\"enabled\": true, \"bf16_master_weights_and_grads\": "
                 "true}}");
    cr_assert(s.master == ZC_DTYPE_BF16 && s.m == ZC_DTYPE_F32 && s.v == ZC_DTYPE_F32);
    /* zeroc's moments alone, at stage 0 too, with fp32 parameters. */
    s = accepted(Z(0, "") "\"bf16\": {\"exp_avg_sq_dtype\": \"bf16\"}}");
    cr_assert(s.master == ZC_DTYPE_F32 && s.m == ZC_DTYPE_F32 && s.v == ZC_DTYPE_BF16);
    s = accepted(Z(3, "") "\"bf16\": {\"enabled\": true, \"bf16_master_weights_and_grads\": "
                 "true, \"exp_avg_dtype\": \"bf16\"}}");
    cr_assert(s.master == ZC_DTYPE_BF16 && s.m == ZC_DTYPE_BF16 && s.v == ZC_DTYPE_F32);
}

Test(state_precision, deepspeed_refusals_with_its_reason)
{
    expect_refused(Z(0, "") "\"bf16\": {\"enabled\": true, \"bf16_master_weights_and_grads\": "
                   "true, \"bf16_optimizer_states\": true}}",
                   (const char *[]){"bf16.bf16_master_weights_and_grads",
                                    "only supported with ZeRO Stage 1, 2, or 3", NULL});
    expect_refused(Z(2, "") "\"bf16\": {\"enabled\": true, \"bf16_optimizer_states\": true}}",
                   (const char *[]){"bf16.bf16_optimizer_states",
                                    "requires bf16_master_weights_and_grads", NULL});
    expect_refused(Z(2, "") "\"bf16\": {\"enabled\": true, \"bf16_master_weights_and_grads\": "
                   "true}}",
                   (const char *[]){"bf16.bf16_master_weights_and_grads", "ZeRO Offload",
                                    "DeepSpeedCPUAdam", "offload_optimizer.device", NULL});
}

Test(state_precision, zeroc_rules)
{
    expect_refused(Z(2, "") "\"bf16\": {\"enabled\": true, \"exp_avg_dtype\": \"fp16\"}}",
                   (const char *[]){"bf16.exp_avg_dtype", "\"fp16\"", "scale", NULL});
    expect_refused(Z(2, "") "\"bf16\": {\"enabled\": true, \"bf16_master_weights_and_grads\": "
                   "true, \"bf16_optimizer_states\": true, \"exp_avg_sq_dtype\": \"fp32\"}}",
                   (const char *[]){"bf16.exp_avg_sq_dtype", "bf16_optimizer_states", NULL});
    expect_refused(Z(2, CPU) "\"fp16\": {\"enabled\": true}, \"bf16\": "
                   "{\"bf16_master_weights_and_grads\": true}}",
                   (const char *[]){"bf16.bf16_master_weights_and_grads", "bf16.enabled", NULL});
    expect_refused(Z(2, "") "\"optimizer\": {\"type\": \"AdamW\", \"params\": "
                   "{\"deepspeed_arithmetic\": true}}, \"bf16\": {\"enabled\": true, "
                   "\"exp_avg_dtype\": \"bf16\"}}",
                   (const char *[]){"optimizer.params.deepspeed_arithmetic", "16-bit", NULL});
}

Test(state_precision, seed_is_parsed_strictly)
{
    zc_config *cfg = NULL;
    cr_assert_eq(zc_config_load_string(&cfg, "{\"bf16\": {\"stochastic_rounding_seed\": -1}}",
                                       "t.json", 0), ZC_ERR_CONFIG);
    cr_assert_not_null(strstr(zc_last_error(), "bf16.stochastic_rounding_seed"), "%s",
                       zc_last_error());
    cr_assert_eq(zc_config_load_string(&cfg, "{\"bf16\": {\"stochastic_rounding_seed\": 1.5}}",
                                       "t.json", 0), ZC_ERR_CONFIG);
}
