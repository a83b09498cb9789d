/* The config handle: DeepSpeed code defaults, set/get round trips, clone,
 * program values and "auto" resolution (Hugging Face rules), the model-derived
 * "auto" keys and the batch derivation. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cfg_helpers.h"
#include "config/config.h"
#include "helpers.h"

static void get_eq(const zc_config *cfg, const char *key, const char *want)
{
    char buf[128];
    cr_assert_eq(zc_config_get(cfg, key, buf, sizeof buf), ZC_OK, "%s: %s", key, zc_last_error());
    cr_assert_str_eq(buf, want, "%s = %s, want %s", key, buf, want);
}

Test(config_api, code_defaults)
{
    zc_config *cfg;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    /* Code defaults where the DeepSpeed docs differ. */
    get_eq(cfg, "gradient_clipping", "1.0");
    get_eq(cfg, "steps_per_print", "null");
    get_eq(cfg, "zero_optimization.overlap_comm", "false");
    get_eq(cfg, "optimizer.params.adam_w_mode", "true");
    get_eq(cfg, "zero_optimization.sub_group_size", "1000000000");
    get_eq(cfg, "zero_optimization.reduce_bucket_size", "500000000");
    get_eq(cfg, "zero_optimization.stage3_prefetch_bucket_size", "50000000");
    get_eq(cfg, "zero_optimization.stage3_param_persistence_threshold", "100000");
    get_eq(cfg, "zero_optimization.stage3_model_persistence_threshold", "9223372036854775807");
    get_eq(cfg, "bf16.check_grad_overflow", "true");
    get_eq(cfg, "fp16.initial_scale_power", "16");
    get_eq(cfg, "zero_optimization.offload_optimizer.buffer_count", "4");
    get_eq(cfg, "zero_optimization.offload_param.buffer_count", "5");
    get_eq(cfg, "aio.queue_depth", "8");
    get_eq(cfg, "aio.block_size", "1048576");
    get_eq(cfg, "optimizer.params.betas", "[0.9, 0.999]");
    get_eq(cfg, "scheduler.type", "null");
    /* The struct holds the same values the engine reads. */
    cr_assert_eq(cfg->zero.stage, 0);
    cr_assert_eq(cfg->train_batch_size, -1);
    cr_assert_eq(cfg->zero.overlap_comm, -1);
    cr_assert_eq(cfg->communication_data_type, -1);
    cr_assert(cfg->zero_force_ds_cpu_optimizer);
    cr_assert_eq(cfg->optimizer.eps, 1e-8);
    cr_assert_eq(cfg->zero.offload_optimizer.ratio, 1.0);
    cr_assert(cfg->zero.offload_param.pin_memory);
    /* Stage 3 flips the overlap_comm default. */
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage", 3), ZC_OK);
    get_eq(cfg, "zero_optimization.overlap_comm", "true");
    cr_assert(zc__cfg_overlap_comm(cfg));
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

Test(config_api, typed_setters_and_synonyms)
{
    zc_config *cfg;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set_double(cfg, "optimizer.params.lr", 2.5e-4), ZC_OK);
    cr_assert_eq(cfg->optimizer.lr, 2.5e-4);
    cr_assert_eq(zc_config_set_bool(cfg, "fp16.enabled", true), ZC_OK);
    cr_assert(cfg->fp16.enabled);
    cr_assert_eq(zc_config_set_string(cfg, "optimizer.type", "adamw"), ZC_OK);
    get_eq(cfg, "optimizer.type", "\"AdamW\"");
    cr_assert_eq(zc_config_set(cfg, "zero_optimization.prefetch_bucket_size", "1e6"), ZC_OK);
    cr_assert_eq(cfg->zero.prefetch_bucket_size, 1000000);
    cr_assert_eq(zc_config_set_string(cfg, "zero_optimization.offload_param.nvme_path", "/tmp/x y"),
                 ZC_OK);
    get_eq(cfg, "zero_optimization.offload_param.nvme_path", "\"/tmp/x y\"");
    cr_assert_eq(zc_config_set(cfg, "fp16", "{\"loss_scale\": 128, \"hysteresis\": 4}"), ZC_OK);
    cr_assert_eq(cfg->fp16.loss_scale, 128.0);
    cr_assert_eq(cfg->fp16.hysteresis, 4);
    cr_assert_eq(zc_config_set(cfg, "zero_optimization", "true"), ZC_OK);
    cr_assert_eq(cfg->zero.stage, 1);
    cr_assert_eq(zc_config_set(cfg, "bfloat16.check_grad_overflow", "false"), ZC_OK);
    cr_assert(!cfg->bf16.check_grad_overflow);
    cr_assert_eq(zc_config_set(cfg, "zero_optimization.cpu_offload", "true"), ZC_OK);
    cr_assert_eq(cfg->zero.offload_optimizer.device, ZC_OFFLOAD_CPU);
    cr_assert_eq(zc_config_set(cfg, "zero_optimization.overlap_comm", "null"), ZC_OK);
    cr_assert_eq(cfg->zero.overlap_comm, -1);

    /* The clone is deep: destroying the original leaves it intact. */
    zc_config *copy;
    cr_assert_eq(zc__config_clone(cfg, &copy), ZC_OK);
    char *a = t_cfg_snapshot(cfg);
    zc_config_destroy(cfg);
    char *b = t_cfg_snapshot(copy);
    cr_assert_str_eq(a, b);
    cr_assert_str_eq(copy->zero.offload_param.nvme_path, "/tmp/x y");
    free(a);
    free(b);
    zc_config_destroy(copy);
    t_assert_no_leaks();
}

/* The Hugging Face template shape: everything the Trainer fills is "auto". */
static const char *hf_template =
    "{\"fp16\": {\"enabled\": \"auto\"}, \"bf16\": {\"enabled\": \"auto\"},"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"auto\", \"betas\": \"auto\","
    "   \"eps\": \"auto\", \"weight_decay\": \"auto\"}},"
    " \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"warmup_min_lr\": \"auto\","
    "   \"warmup_max_lr\": \"auto\", \"warmup_num_steps\": \"auto\", \"total_num_steps\": \"auto\"}},"
    " \"zero_optimization\": {\"stage\": 3, \"reduce_bucket_size\": \"auto\","
    "   \"stage3_prefetch_bucket_size\": \"auto\", \"stage3_param_persistence_threshold\": \"auto\","
    "   \"stage3_max_live_parameters\": \"auto\"},"
    " \"gradient_accumulation_steps\": \"auto\", \"gradient_clipping\": \"auto\","
    " \"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": \"auto\"}";

Test(config_api, auto_resolved_from_program_and_model)
{
    zc_config *cfg;
    cr_assert_eq(zc_config_load_string(&cfg, hf_template, "hf.json", 0), ZC_OK, "%s",
                 zc_last_error());
    get_eq(cfg, "optimizer.params.lr", "\"auto\"");
    get_eq(cfg, "train_batch_size", "\"auto\"");
    /* A key without a resolution rule takes DeepSpeed's default at load. */
    get_eq(cfg, "zero_optimization.stage3_max_live_parameters", "1000000000");

    zc_program_values pv = ZC_PROGRAM_VALUES_INIT;
    pv.micro_batch_per_gpu = 4;
    pv.gradient_accumulation_steps = 2;
    pv.lr = 3e-4;
    pv.beta1 = 0.9;
    pv.beta2 = 0.95;
    pv.eps = 1e-6;
    pv.weight_decay = 0.1;
    pv.max_grad_norm = 0.5;
    pv.dtype = ZC_DTYPE_BF16;
    pv.total_num_steps = 1000;
    pv.warmup_num_steps = 50;
    cr_assert_eq(zc_config_set_program_values(cfg, &pv), ZC_OK);
    cr_assert_eq(zc_config_resolve(cfg, 8), ZC_OK, "%s", zc_last_error());
    get_eq(cfg, "train_micro_batch_size_per_gpu", "4");
    get_eq(cfg, "gradient_accumulation_steps", "2");
    get_eq(cfg, "train_batch_size", "64"); /* 4 * 2 * 8 */
    get_eq(cfg, "optimizer.params.lr", "0.0003");
    get_eq(cfg, "optimizer.params.betas", "[0.9, 0.95]");
    get_eq(cfg, "optimizer.params.eps", "1e-06");
    get_eq(cfg, "optimizer.params.weight_decay", "0.1");
    get_eq(cfg, "gradient_clipping", "0.5");
    get_eq(cfg, "bf16.enabled", "true");
    get_eq(cfg, "fp16.enabled", "false");
    get_eq(cfg, "scheduler.params.warmup_min_lr", "0.0");
    get_eq(cfg, "scheduler.params.warmup_max_lr", "0.0003");
    get_eq(cfg, "scheduler.params.warmup_num_steps", "50");
    get_eq(cfg, "scheduler.params.total_num_steps", "1000");
    /* Model keys stay "auto" until the engine knows H. */
    get_eq(cfg, "zero_optimization.reduce_bucket_size", "\"auto\"");
    cr_assert_eq(cfg->zero.reduce_bucket_size, 500000000, "pending auto holds the default");
    cr_assert_eq(zc__config_resolve_model_auto(cfg, 1024), ZC_OK);
    get_eq(cfg, "zero_optimization.reduce_bucket_size", "1048576");            /* H^2 */
    get_eq(cfg, "zero_optimization.stage3_prefetch_bucket_size", "943718");    /* 0.9 H^2 */
    get_eq(cfg, "zero_optimization.stage3_param_persistence_threshold", "10240"); /* 10 H */
    /* lr of the resolved WarmupDecayLR at the end of warmup (t = 50 >= W):
     * gamma = (1000 - 50) / (1000 - 50) = 1. */
    cr_assert(fabs(zc_config_lr_at(cfg, 51, NULL) - 3e-4) < 1e-15);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

Test(config_api, unresolved_auto_falls_back_and_model_keys_below_stage3)
{
    zc_config *cfg;
    cr_assert_eq(zc_config_load_string(&cfg, hf_template, "hf.json", 0), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage", 2), ZC_OK);
    zc_program_values pv = ZC_PROGRAM_VALUES_INIT;
    pv.micro_batch_per_gpu = 2;
    pv.gradient_accumulation_steps = 3;
    pv.total_num_steps = 100;
    cr_assert_eq(zc_config_set_program_values(cfg, &pv), ZC_OK);
    cr_assert_eq(zc_config_resolve(cfg, 1), ZC_OK, "%s", zc_last_error());
    get_eq(cfg, "train_batch_size", "6"); /* micro * accumulation * world 1 */
    get_eq(cfg, "optimizer.params.lr", "0.001");     /* unresolved: default */
    get_eq(cfg, "scheduler.params.warmup_max_lr", "0.001");
    get_eq(cfg, "gradient_clipping", "1.0");
    /* Without the program's accumulation the batch "auto" is an error. */
    zc_config *c2;
    cr_assert_eq(zc_config_load_string(&c2, hf_template, "hf.json", 0), ZC_OK);
    pv.gradient_accumulation_steps = -1;
    cr_assert_eq(zc_config_set_program_values(c2, &pv), ZC_OK);
    cr_assert_eq(zc_config_resolve(c2, 1), ZC_ERR_CONFIG);
    cr_assert(strstr(zc_last_error(), "gradient_accumulation_steps: \"auto\" must be resolved"));
    zc_config_destroy(c2);
    cr_assert_eq(zc__config_resolve_model_auto(cfg, 0), ZC_OK);
    get_eq(cfg, "zero_optimization.reduce_bucket_size", "500000000");
    get_eq(cfg, "zero_optimization.stage3_prefetch_bucket_size", "50000000");
    zc_config_destroy(cfg);

    cr_assert_eq(zc_config_load_string(&cfg, hf_template, "hf.json", 0), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage", 2), ZC_OK);
    cr_assert_eq(zc__config_resolve_model_auto(cfg, 100), ZC_OK);
    get_eq(cfg, "zero_optimization.reduce_bucket_size", "10000");
    get_eq(cfg, "zero_optimization.stage3_param_persistence_threshold", "100000"); /* stage < 3 */
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

Test(config_api, batch_derivation_rules)
{
    /* Each DeepSpeed rule with world 4. */
    struct {
        int64_t tb, mb, ga;
        int64_t want_tb, want_mb, want_ga;
    } cases[] = {
        {64, 4, -1, 64, 4, 4},  /* TB+MB: GA = 64 // 4 // 4 */
        {64, -1, 2, 64, 8, 2},  /* TB+GA: MB = 64 // 4 // 2 */
        {-1, 3, 5, 60, 3, 5},   /* MB+GA: TB = 3 * 5 * 4 */
        {32, -1, -1, 32, 8, 1}, /* TB only: GA 1, MB = 32 // 4 */
        {-1, 6, -1, 24, 6, 1},  /* MB only: GA 1, TB = 6 * 4 */
        {48, 4, 3, 48, 4, 3},   /* all three, consistent */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        zc_config *cfg;
        cr_assert_eq(zc_config_create(&cfg), ZC_OK);
        if (cases[i].tb > 0)
            zc_config_set_int(cfg, "train_batch_size", cases[i].tb);
        if (cases[i].mb > 0)
            zc_config_set_int(cfg, "train_micro_batch_size_per_gpu", cases[i].mb);
        if (cases[i].ga > 0)
            zc_config_set_int(cfg, "gradient_accumulation_steps", cases[i].ga);
        cr_assert_eq(zc_config_resolve(cfg, 4), ZC_OK, "case %zu: %s", i, zc_last_error());
        cr_assert_eq(cfg->train_batch_size, cases[i].want_tb, "case %zu", i);
        cr_assert_eq(cfg->train_micro_batch_size_per_gpu, cases[i].want_mb, "case %zu", i);
        cr_assert_eq(cfg->gradient_accumulation_steps, cases[i].want_ga, "case %zu", i);
        zc_config_destroy(cfg);
    }
    t_assert_no_leaks();
}

Test(config_api, allocation_failure_leaves_nothing_behind)
{
    zc_config *cfg;
    for (int k = 1; k <= 3; k++) {
        zc__mem_fail_after(ZC_MEMKIND_HOST, k);
        zc_status rc = zc_config_create(&cfg);
        zc__mem_fail_after(ZC_MEMKIND_HOST, 0);
        if (rc == ZC_OK)
            zc_config_destroy(cfg);
        else
            cr_assert_eq(rc, ZC_ERR_NO_MEMORY);
    }
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    char *before = t_cfg_snapshot(cfg);
    zc__mem_fail_after(ZC_MEMKIND_HOST, 1);
    cr_assert_eq(zc_config_set(cfg, "zero_optimization.stage", "2"), ZC_ERR_NO_MEMORY);
    zc__mem_fail_after(ZC_MEMKIND_HOST, 0);
    char *after = t_cfg_snapshot(cfg);
    cr_assert_str_eq(before, after);
    free(before);
    free(after);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}
