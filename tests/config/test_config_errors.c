/* One test per error class of the config loader and setter: the message
 * names the exact JSON path (and the value / range / hint), the call fails
 * with the right status, and a failed call leaves the handle unchanged. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cfg_helpers.h"
#include "helpers.h"

/* Loads text expecting failure; asserts the status and that every needle
 * appears in the message. */
static void expect_load_error(const char *text, zc_status want, const char *const *needles)
{
    zc_config *cfg = (zc_config *)0x1;
    zc_status rc = zc_config_load_string(&cfg, text, "t.json", 0);
    cr_assert_eq(rc, want, "status %d (%s), want %d; message: %s", rc, zc_status_str(rc), want,
                 zc_last_error());
    cr_assert_null(cfg, "a failed load must leave *out NULL");
    for (int i = 0; needles[i]; i++)
        cr_assert(strstr(zc_last_error(), needles[i]), "message '%s' lacks '%s'", zc_last_error(),
                  needles[i]);
}

/* Applies a block with zc_config_set expecting failure and asserts the handle
 * is unchanged afterwards. */
static void expect_set_error(const char *key, const char *value, zc_status want,
                             const char *const *needles)
{
    zc_config *cfg;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set(cfg, "train_batch_size", "64"), ZC_OK);
    char *before = t_cfg_snapshot(cfg);
    zc_status rc = zc_config_set(cfg, key, value);
    cr_assert_eq(rc, want, "%s=%s: status %d, want %d; message: %s", key, value, rc, want,
                 zc_last_error());
    for (int i = 0; needles[i]; i++)
        cr_assert(strstr(zc_last_error(), needles[i]), "message '%s' lacks '%s'", zc_last_error(),
                  needles[i]);
    char *after = t_cfg_snapshot(cfg);
    cr_assert_str_eq(before, after, "the failed set changed the configuration");
    free(before);
    free(after);
    zc_config_destroy(cfg);
}

#define NEEDLES(...) ((const char *const[]){__VA_ARGS__, NULL})

Test(config_errors, bad_json_reports_line_and_column)
{
    /* The trailing comma sits on line 3; jansson reports the '}' that follows
     * it at line 4, column 3. */
    expect_load_error("{\n  \"fp16\": {\n    \"enabled\": true,\n  }\n}\n", ZC_ERR_CONFIG,
                      NEEDLES("t.json", "line 4, column 3"));
    expect_load_error("[1, 2]", ZC_ERR_CONFIG, NEEDLES("must be a JSON object"));
    expect_load_error("{\"fp16\": {}, \"fp16\": {}}", ZC_ERR_CONFIG, NEEDLES("duplicate"));
    t_assert_no_leaks();
}

Test(config_errors, unknown_nested_key_did_you_mean)
{
    expect_load_error("{\"zero_optimization\": {\"stage\": 3, "
                      "\"stage3_param_persitance_threshold\": 1e5}}",
                      ZC_ERR_CONFIG,
                      NEEDLES("t.json: zero_optimization.stage3_param_persitance_threshold: "
                              "unknown key; did you mean stage3_param_persistence_threshold?"));
    expect_load_error("{\"zero_optimization\": {\"comm_overlap\": true}}", ZC_ERR_CONFIG,
                      NEEDLES("zero_optimization.comm_overlap: unknown key; did you mean "
                              "overlap_comm?"));
    expect_set_error("zero_optimization",
                     "{\"stage\": 2, \"reduce_bucket_sise\": 5}", ZC_ERR_CONFIG,
                     NEEDLES("zero_optimization.reduce_bucket_sise: unknown key; did you mean "
                             "reduce_bucket_size?"));
    expect_set_error("zero_optimization.stage3_max_live_parameter", "1", ZC_ERR_INVALID_ARG,
                     NEEDLES("zero_optimization.stage3_max_live_parameter: unknown key; did you "
                             "mean stage3_max_live_parameters?"));
    t_assert_no_leaks();
}

Test(config_errors, misplaced_key_names_its_block)
{
    expect_load_error("{\"bf16\": {\"enabled\": true, \"loss_scale\": 0}}", ZC_ERR_CONFIG,
                      NEEDLES("bf16.loss_scale: unknown key; it belongs under fp16 "
                              "(fp16.loss_scale)"));
    expect_load_error("{\"zero_optimization\": {\"gradient_clipping\": 1.0}}", ZC_ERR_CONFIG,
                      NEEDLES("zero_optimization.gradient_clipping: unknown key; it belongs at "
                              "the top level"));
    expect_set_error("bf16.hysteresis", "2", ZC_ERR_INVALID_ARG,
                     NEEDLES("bf16.hysteresis", "belongs under fp16"));
    t_assert_no_leaks();
}

Test(config_errors, all_errors_of_a_file_are_shown_at_once)
{
    /* Three errors fit zc_last_error whole: each is named, none is summarised. */
    expect_load_error("{\"bf16\": {\"loss_scale\": 0, \"hysteresis\": 2},"
                      " \"zero_optimization\": {\"stage\": 7}}",
                      ZC_ERR_CONFIG,
                      NEEDLES("bf16.loss_scale: unknown key", "; bf16.hysteresis: unknown key",
                              "; zero_optimization.stage: 7 is out of range [0, 3]"));
    cr_assert_null(strstr(zc_last_error(), "more error"), "%s", zc_last_error());
    /* Forty errors do not fit: the ones shown are whole, the rest counted. */
    char text[4096] = "{\"zero_optimization\": {";
    for (int i = 0; i < 40; i++)
        snprintf(text + strlen(text), sizeof text - strlen(text), "%s\"bogus_%02d\": 1",
                 i ? ", " : "", i);
    strcat(text, "}}");
    zc_config *cfg = NULL;
    cr_assert_eq(zc_config_load_string(&cfg, text, "t.json", 0), ZC_ERR_CONFIG);
    const char *m = zc_last_error();
    int shown = 0;
    for (const char *p = m; (p = strstr(p, ": unknown key")); p++)
        shown++;
    char tail[64];
    snprintf(tail, sizeof tail, "(and %d more errors)", 40 - shown);
    cr_assert(shown >= 5 && shown < 40, "%d shown: %s", shown, m);
    cr_assert(strstr(m, tail), "'%s' lacks '%s'", m, tail);
    t_assert_no_leaks();
}

Test(config_errors, wrong_type_names_path_and_value)
{
    expect_load_error("{\"fp16\": {\"enabled\": \"yes\"}}", ZC_ERR_CONFIG,
                      NEEDLES("fp16.enabled: expected true or false, got a string (\"yes\")"));
    expect_load_error("{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": 0.9}}}",
                      ZC_ERR_CONFIG, NEEDLES("optimizer.params.betas: expected [beta1, beta2]"));
    expect_set_error("zero_optimization.offload_param", "{\"device\": \"gpu\"}", ZC_ERR_CONFIG,
                     NEEDLES("zero_optimization.offload_param.device: \"gpu\" is not one of: none, "
                             "cpu, nvme"));
    expect_set_error("communication_data_type", "\"bfp16\"", ZC_ERR_CONFIG,
                     NEEDLES("communication_data_type: \"bfp16\" is not a dtype"));
    expect_set_error("gradient_clipping", "null", ZC_ERR_CONFIG,
                     NEEDLES("gradient_clipping: null is not allowed"));
    expect_set_error("fp16.enabled", "not json", ZC_ERR_INVALID_ARG,
                     NEEDLES("fp16.enabled: value is not JSON text"));
    t_assert_no_leaks();
}

Test(config_errors, out_of_range_names_path_value_and_range)
{
    expect_load_error("{\"zero_optimization\": {\"stage\": 4}}", ZC_ERR_CONFIG,
                      NEEDLES("zero_optimization.stage: 4 is out of range [0, 3]"));
    expect_set_error("zero_optimization.stage3_max_reuse_distance", "-1", ZC_ERR_CONFIG,
                     NEEDLES("zero_optimization.stage3_max_reuse_distance: -1 is out of range "
                             "[0, 1125899906842624]"));
    expect_set_error("optimizer.params.betas", "[0.9, 1.5]", ZC_ERR_CONFIG,
                     NEEDLES("optimizer.params.betas: beta2 = 1.5 is out of range [0, 1)"));
    expect_set_error("fp16.min_loss_scale", "0", ZC_ERR_CONFIG,
                     NEEDLES("fp16.min_loss_scale: 0 is out of range (0, 3.4028234663852886e+38]"));
    t_assert_no_leaks();
}

Test(config_errors, integers_as_deepspeed_writes_them)
{
    zc_config *cfg;
    char buf[64];
    cr_assert_eq(zc_config_load_string(&cfg,
                                       "{\"zero_optimization\": {\"reduce_bucket_size\": 2e8,"
                                       " \"stage3_max_live_parameters\": 1.000000e+09,"
                                       " \"stage3_prefetch_bucket_size\": 6.039798e+07}}",
                                       "t.json", 0),
                 ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc_config_get(cfg, "zero_optimization.reduce_bucket_size", buf, sizeof buf), ZC_OK);
    cr_assert_str_eq(buf, "200000000");
    cr_assert_eq(zc_config_get(cfg, "zero_optimization.stage3_max_live_parameters", buf, sizeof buf),
                 ZC_OK);
    cr_assert_str_eq(buf, "1000000000");
    cr_assert_eq(zc_config_get(cfg, "zero_optimization.stage3_prefetch_bucket_size", buf, sizeof buf),
                 ZC_OK);
    cr_assert_str_eq(buf, "60397980");
    zc_config_destroy(cfg);
    expect_load_error("{\"zero_optimization\": {\"reduce_bucket_size\": 2.5}}", ZC_ERR_CONFIG,
                      NEEDLES("zero_optimization.reduce_bucket_size: expected an integer in [0, "
                              "1125899906842624], got 2.5"));
    expect_set_error("train_batch_size", "\"32\"", ZC_ERR_CONFIG,
                     NEEDLES("train_batch_size: expected an integer", "a string"));
    /* Integral but far beyond the key's range: the range is what is wrong. */
    expect_set_error("train_batch_size", "1e30", ZC_ERR_CONFIG,
                     NEEDLES("train_batch_size: 1e30 is out of range [1, 2147483647]"));
    t_assert_no_leaks();
}

Test(config_errors, deprecated_alias_warns_and_both_is_an_error)
{
    t_log_capture cap = {{0}};
    zc_log_set_level(ZC_LOG_WARN);
    zc_log_set_sink(t_log_sink, &cap);
    zc_config *cfg;
    cr_assert_eq(zc_config_load_string(&cfg,
                                       "{\"zero_optimization\": {\"stage\": 2, \"cpu_offload\": "
                                       "true}, \"bfloat16\": {\"enabled\": true},"
                                       " \"aio\": {\"thread_count\": 4}}",
                                       "t.json", 0),
                 ZC_OK, "%s", zc_last_error());
    zc_log_set_sink(NULL, NULL);
    cr_assert(strstr(cap.text, "zero_optimization.cpu_offload: deprecated; use "
                               "zero_optimization.offload_optimizer.device"),
              "warnings: %s", cap.text);
    cr_assert(strstr(cap.text, "bfloat16 is the old name of bf16"), "warnings: %s", cap.text);
    cr_assert(strstr(cap.text, "aio.thread_count: deprecated; use aio.intra_op_parallelism"),
              "warnings: %s", cap.text);
    char buf[64];
    zc_config_get(cfg, "zero_optimization.offload_optimizer.device", buf, sizeof buf);
    cr_assert_str_eq(buf, "\"cpu\"");
    zc_config_get(cfg, "bf16.enabled", buf, sizeof buf);
    cr_assert_str_eq(buf, "true");
    zc_config_get(cfg, "aio.intra_op_parallelism", buf, sizeof buf);
    cr_assert_str_eq(buf, "4");
    zc_config_destroy(cfg);

    expect_load_error("{\"zero_optimization\": {\"cpu_offload\": true,"
                      " \"offload_optimizer\": {\"device\": \"cpu\"}}}",
                      ZC_ERR_CONFIG,
                      NEEDLES("zero_optimization.cpu_offload: deprecated key given together with "
                              "its replacement offload_optimizer"));
    expect_load_error("{\"bf16\": {\"enabled\": true}, \"bfloat16\": {\"enabled\": true}}",
                      ZC_ERR_CONFIG, NEEDLES("bfloat16: deprecated key given together"));
    expect_load_error("{\"aio\": {\"thread_count\": 1, \"intra_op_parallelism\": 2}}",
                      ZC_ERR_CONFIG, NEEDLES("aio.thread_count: deprecated key given together"));
    expect_load_error("{\"zero_optimization\": {\"stage3_prefetch_bucket_size\": 1,"
                      " \"prefetch_bucket_size\": 2}}",
                      ZC_ERR_CONFIG,
                      NEEDLES("zero_optimization.prefetch_bucket_size: given twice (also as "
                              "zero_optimization.stage3_prefetch_bucket_size)"));
    t_assert_no_leaks();
}

Test(config_errors, unsupported_optimizer_and_misplaced_clip)
{
    expect_load_error("{\"optimizer\": {\"type\": \"Lamb\", \"params\": {\"max_coeff\": 0.3}}}",
                      ZC_ERR_UNSUPPORTED,
                      NEEDLES("optimizer.type: \"Lamb\" is not supported by zeroc"));
    expect_load_error("{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"max_grad_norm\": 1}}}",
                      ZC_ERR_CONFIG,
                      NEEDLES("optimizer.params.max_grad_norm", "gradient_clipping"));
    expect_set_error("optimizer", "{\"type\": \"OneBitAdam\"}", ZC_ERR_UNSUPPORTED,
                     NEEDLES("optimizer.type: \"OneBitAdam\" is not supported"));
    t_assert_no_leaks();
}

Test(config_errors, lenient_and_top_level_unknown_keys_load)
{
    zc_config *cfg;
    const char *text = "{\"zero_optimization\": {\"stage\": 1, \"unknown_knob\": 3},"
                       " \"gradient_clipp1ng\": 1.0, \"flops_profiler\": {\"enabled\": true}}";
    cr_assert_eq(zc_config_load_string(&cfg, text, "t.json", 0), ZC_ERR_CONFIG);
    cr_assert(strstr(zc_last_error(), "zero_optimization.unknown_knob: unknown key"));
    t_log_capture cap = {{0}};
    zc_log_set_level(ZC_LOG_WARN);
    zc_log_set_sink(t_log_sink, &cap);
    cr_assert_eq(zc_config_load_string(&cfg, text, "t.json", ZC_CONFIG_LENIENT), ZC_OK, "%s",
                 zc_last_error());
    zc_log_set_sink(NULL, NULL);
    cr_assert(strstr(cap.text, "zero_optimization.unknown_knob: unknown key, ignored (lenient)"),
              "%s", cap.text);
    cr_assert(strstr(cap.text, "gradient_clipp1ng: unknown top-level key, ignored as DeepSpeed "
                               "does; did you mean gradient_clipping?"),
              "%s", cap.text);
    cr_assert_null(strstr(cap.text, "flops_profiler"), "a DeepSpeed feature is ignored quietly");
    zc_config_destroy(cfg);
    cap.text[0] = 0;
    zc_log_set_sink(t_log_sink, &cap);
    cr_assert_eq(zc_config_load_string(&cfg, "{\"log\": {\"steps_per_print\": 50}}", "t.json", 0),
                 ZC_OK);
    zc_log_set_sink(NULL, NULL);
    cr_assert(strstr(cap.text, "log: unknown top-level key, ignored as DeepSpeed does; its key "
                               "steps_per_print belongs at the top level"),
              "%s", cap.text);
    cr_assert_eq(cfg->steps_per_print, -1);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

Test(config_errors, semantic_checks_say_what_to_change)
{
    expect_load_error("{\"fp16\": {\"enabled\": true}, \"bf16\": {\"enabled\": true}}",
                      ZC_ERR_CONFIG, NEEDLES("bf16.enabled: fp16.enabled and bf16.enabled are both "
                                             "true; enable only one"));
    expect_load_error("{\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": "
                      "\"nvme\"}}}",
                      ZC_ERR_CONFIG,
                      NEEDLES("zero_optimization.offload_param.nvme_path: required with device "
                              "\"nvme\""));
    char file[] = "/tmp/zc_cfg_notdir_XXXXXX";
    int fd = mkstemp(file);
    cr_assert(fd >= 0);
    close(fd);
    char text[512];
    snprintf(text, sizeof text,
             "{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": "
             "\"nvme\", \"nvme_path\": \"%s\"}}}",
             file);
    expect_load_error(text, ZC_ERR_CONFIG,
                      NEEDLES("zero_optimization.offload_optimizer.nvme_path: '", "is not a "
                                                                                  "directory"));
    unlink(file);
    char dir[] = "/tmp/zc_cfg_dir_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    snprintf(text, sizeof text,
             "{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": "
             "\"nvme\", \"nvme_path\": \"%s\", \"buffer_count\": 3}}}",
             dir);
    expect_load_error(text, ZC_ERR_CONFIG,
                      NEEDLES("zero_optimization.offload_optimizer.buffer_count: 3 is too small"));
    rmdir(dir);
    expect_load_error("{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": "
                      "\"cpu\", \"ratio\": 0.5}}}",
                      ZC_ERR_CONFIG,
                      NEEDLES("zero_optimization.offload_optimizer.ratio: 0.5 < 1", "stage 3"));
    expect_load_error("{\"zero_optimization\": {\"allgather_bucket_size\": 5}}", ZC_ERR_CONFIG,
                      NEEDLES("zero_optimization.allgather_bucket_size: 5 is odd"));
    expect_load_error("{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"total_num_steps\": "
                      "10}}}",
                      ZC_ERR_CONFIG,
                      NEEDLES("scheduler.params.total_num_steps: not a parameter of WarmupLR"));
    expect_load_error("{\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {}}}",
                      ZC_ERR_CONFIG,
                      NEEDLES("scheduler.params.total_num_steps: required by WarmupDecayLR"));
    expect_load_error("{\"scheduler\": {\"type\": \"OneCycle\", \"params\": {\"cycle_max_lr\": 1}}}",
                      ZC_ERR_CONFIG, NEEDLES("scheduler.params.cycle_min_lr: required by OneCycle"));

    /* offload_param below stage 3 is only a warning. */
    t_log_capture cap = {{0}};
    zc_log_set_level(ZC_LOG_WARN);
    zc_log_set_sink(t_log_sink, &cap);
    zc_config *cfg;
    cr_assert_eq(zc_config_load_string(&cfg, "{\"zero_optimization\": {\"stage\": 2,"
                                             " \"offload_param\": {\"device\": \"cpu\"}}}",
                                       "t.json", 0),
                 ZC_OK, "%s", zc_last_error());
    zc_log_set_sink(NULL, NULL);
    cr_assert(strstr(cap.text, "zero_optimization.offload_param: parameter offload has no effect "
                               "below stage 3"),
              "%s", cap.text);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

Test(config_errors, resolve_batch_errors_leave_config_unchanged)
{
    zc_config *cfg;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "train_batch_size", 64), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "train_micro_batch_size_per_gpu", 4), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "gradient_accumulation_steps", 4), ZC_OK);
    char *before = t_cfg_snapshot(cfg);
    cr_assert_eq(zc_config_resolve(cfg, 2), ZC_ERR_CONFIG);
    cr_assert(strstr(zc_last_error(), "train_batch_size: Check batch related parameters. "
                                      "train_batch_size is not equal to micro_batch_per_gpu * "
                                      "gradient_acc_step * world_size 64 != 4 * 4 * 2"),
              "%s", zc_last_error());
    char *after = t_cfg_snapshot(cfg);
    cr_assert_str_eq(before, after);
    free(before);
    free(after);
    cr_assert_eq(zc_config_resolve(cfg, 4), ZC_OK, "%s", zc_last_error());
    zc_config_destroy(cfg);

    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_resolve(cfg, 1), ZC_ERR_CONFIG);
    cr_assert(strstr(zc_last_error(), "train_batch_size: Either train_batch_size or "
                                      "train_micro_batch_size_per_gpu needs to be provided"));
    /* TB 4 with world 8: micro = 4 // 8 = 0. */
    cr_assert_eq(zc_config_set_int(cfg, "train_batch_size", 4), ZC_OK);
    cr_assert_eq(zc_config_resolve(cfg, 8), ZC_ERR_CONFIG);
    cr_assert(strstr(zc_last_error(), "train_micro_batch_size_per_gpu: Micro batch size per gpu: "
                                      "0 has to be greater than 0"),
              "%s", zc_last_error());
    /* "auto" batch keys must be resolved by the program. */
    cr_assert_eq(zc_config_set(cfg, "train_micro_batch_size_per_gpu", "\"auto\""), ZC_OK);
    cr_assert_eq(zc_config_set(cfg, "train_batch_size", "\"auto\""), ZC_OK);
    cr_assert_eq(zc_config_resolve(cfg, 1), ZC_ERR_CONFIG);
    cr_assert(strstr(zc_last_error(), "train_micro_batch_size_per_gpu: \"auto\" must be resolved "
                                      "by the program"),
              "%s", zc_last_error());
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

Test(config_errors, null_arguments)
{
    zc_config *cfg;
    cr_assert_eq(zc_config_load_string(NULL, "{}", "x", 0), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_config_load(&cfg, "/nonexistent/zc.json"), ZC_ERR_IO);
    cr_assert(strstr(zc_last_error(), "/nonexistent/zc.json: cannot open"));
    cr_assert_null(cfg);
    cr_assert_eq(zc_config_set(NULL, "fp16.enabled", "true"), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_config_resolve(NULL, 1), ZC_ERR_INVALID_ARG);
    char buf[8];
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_get(cfg, "fp16.nope", buf, sizeof buf), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_config_resolve(cfg, 0), ZC_ERR_INVALID_ARG);
    zc_config_destroy(cfg);
    zc_config_destroy(NULL);
    t_assert_no_leaks();
}
