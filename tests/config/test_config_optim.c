/* optimizer.type Lion and Adagrad: DeepSpeed's spellings (any case), their
 * parameters stored with DeepSpeed's defaults (Lion lr 1e-3, betas
 * (0.9, 0.999), weight_decay 0, deepspeed/ops/lion; Adagrad lr 1e-2,
 * eps 1e-10, weight_decay 0, deepspeed/ops/adagrad/cpu_adagrad.py, plus
 * torch.optim.Adagrad's lr_decay and initial_accumulator_value 0), strict
 * ranges naming the key, the parameters a type's optimizer does not take
 * refused, and zc_engine_create refusing both types with a message that
 * names optimizer.type (the engine's step runs Adam/AdamW only). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "helpers.h"

static zc_config *load(const char *json)
{
    zc_config *cfg = NULL;
    cr_assert_eq(zc_config_load_string(&cfg, json, "test.json", 0), ZC_OK, "%s: %s", json,
                 zc_last_error());
    return cfg;
}

static void refused(const char *json, const char *key, const char *words)
{
    zc_config *cfg = NULL;
    zc_status st = zc_config_load_string(&cfg, json, "test.json", 0);
    cr_assert_neq(st, ZC_OK, "%s loaded", json);
    cr_assert_null(cfg);
    cr_assert(strstr(zc_last_error(), key), "%s: message without %s: %s", json, key,
              zc_last_error());
    cr_assert(strstr(zc_last_error(), words), "%s: message without '%s': %s", json, words,
              zc_last_error());
}

static void get_eq(const zc_config *cfg, const char *key, const char *want)
{
    char buf[128];
    cr_assert_eq(zc_config_get(cfg, key, buf, sizeof buf), ZC_OK, "%s: %s", key, zc_last_error());
    cr_assert_str_eq(buf, want, "%s = %s, want %s", key, buf, want);
}

Test(config_optim, lion_is_parsed_with_deepspeeds_defaults)
{
    zc_config *cfg = load("{\"optimizer\": {\"type\": \"Lion\"}}");
    cr_assert_eq(cfg->optimizer.type, ZC_OPT_LION);
    cr_assert(!cfg->optimizer.adamw_type);
    cr_assert(cfg->optimizer.lr == 1e-3 && cfg->optimizer.beta1 == 0.9 &&
              cfg->optimizer.beta2 == 0.999 && cfg->optimizer.weight_decay == 0.0);
    get_eq(cfg, "optimizer.type", "\"Lion\"");
    zc_config_destroy(cfg);

    cfg = load("{\"optimizer\": {\"type\": \"lion\", \"params\": {\"lr\": 3e-4, "
               "\"betas\": [0.95, 0.98], \"weight_decay\": 0.1}}}");
    cr_assert_eq(cfg->optimizer.type, ZC_OPT_LION);
    cr_assert(cfg->optimizer.lr == 3e-4 && cfg->optimizer.beta1 == 0.95 &&
              cfg->optimizer.beta2 == 0.98 && cfg->optimizer.weight_decay == 0.1);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

Test(config_optim, adagrad_is_parsed_with_deepspeeds_defaults)
{
    zc_config *cfg = load("{\"optimizer\": {\"type\": \"ADAGRAD\"}}");
    cr_assert_eq(cfg->optimizer.type, ZC_OPT_ADAGRAD);
    cr_assert(cfg->optimizer.lr == 1e-2, "lr %g", cfg->optimizer.lr);
    cr_assert(cfg->optimizer.eps == 1e-10, "eps %g", cfg->optimizer.eps);
    cr_assert(cfg->optimizer.weight_decay == 0.0 && cfg->optimizer.lr_decay == 0.0 &&
              cfg->optimizer.initial_accumulator_value == 0.0);
    get_eq(cfg, "optimizer.params.lr", "0.01");
    zc_config_destroy(cfg);

    /* Given values are kept, whichever comes first in the block. */
    cfg = load("{\"optimizer\": {\"params\": {\"lr\": 0.5, \"eps\": 1e-6, \"weight_decay\": 0.01, "
               "\"lr_decay\": 0.25, \"initial_accumulator_value\": 0.1}, \"type\": \"Adagrad\"}}");
    cr_assert(cfg->optimizer.lr == 0.5 && cfg->optimizer.eps == 1e-6 &&
              cfg->optimizer.weight_decay == 0.01 && cfg->optimizer.lr_decay == 0.25 &&
              cfg->optimizer.initial_accumulator_value == 0.1);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

/* The defaults follow the type also when zc_config_set changes it; a value
 * the program set stays. */
Test(config_optim, defaults_follow_the_type_set_later)
{
    zc_config *cfg;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert(cfg->optimizer.type == ZC_OPT_ADAM && cfg->optimizer.lr == 1e-3 &&
              cfg->optimizer.eps == 1e-8);
    cr_assert_eq(zc_config_set(cfg, "optimizer.type", "\"Adagrad\""), ZC_OK, "%s",
                 zc_last_error());
    cr_assert(cfg->optimizer.lr == 1e-2 && cfg->optimizer.eps == 1e-10);
    cr_assert_eq(zc_config_set(cfg, "optimizer.type", "\"AdamW\""), ZC_OK);
    cr_assert(cfg->optimizer.lr == 1e-3 && cfg->optimizer.eps == 1e-8 &&
              cfg->optimizer.adamw_type);
    cr_assert_eq(zc_config_set(cfg, "optimizer.params.lr", "0.2"), ZC_OK);
    cr_assert_eq(zc_config_set(cfg, "optimizer.type", "\"Adagrad\""), ZC_OK);
    cr_assert(cfg->optimizer.lr == 0.2 && cfg->optimizer.eps == 1e-10 &&
              !cfg->optimizer.adamw_type);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

Test(config_optim, values_out_of_range_name_their_key)
{
    refused("{\"optimizer\": {\"type\": \"Lion\", \"params\": {\"lr\": -1}}}",
            "optimizer.params.lr", "out of range");
    refused("{\"optimizer\": {\"type\": \"Lion\", \"params\": {\"betas\": [0.9, 1.0]}}}",
            "optimizer.params.betas", "");
    refused("{\"optimizer\": {\"type\": \"Lion\", \"params\": {\"weight_decay\": \"0.1\"}}}",
            "optimizer.params.weight_decay", "");
    refused("{\"optimizer\": {\"type\": \"Adagrad\", \"params\": {\"lr_decay\": -0.5}}}",
            "optimizer.params.lr_decay", "out of range");
    refused("{\"optimizer\": {\"type\": \"Adagrad\", \"params\": "
            "{\"initial_accumulator_value\": -1e-3}}}",
            "optimizer.params.initial_accumulator_value", "out of range");
    refused("{\"optimizer\": {\"type\": \"Adagrad\", \"params\": {\"eps\": \"1e-10\"}}}",
            "optimizer.params.eps", "");
    refused("{\"optimizer\": {\"type\": \"Adagrad\", \"params\": {\"lr_decay\": true}}}",
            "optimizer.params.lr_decay", "");
    /* JSON cannot write them; the setters can: inf and NaN are refused. */
    zc_config *cfg;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set(cfg, "optimizer.type", "\"Adagrad\""), ZC_OK);
    static const char *const keys[] = {"optimizer.params.lr_decay",
                                       "optimizer.params.initial_accumulator_value",
                                       "optimizer.params.eps", "optimizer.params.lr"};
    for (int i = 0; i < 4; i++) {
        cr_assert_neq(zc_config_set_double(cfg, keys[i], INFINITY), ZC_OK, "%s inf", keys[i]);
        cr_assert(strstr(zc_last_error(), keys[i]), "%s", zc_last_error());
        cr_assert_neq(zc_config_set_double(cfg, keys[i], NAN), ZC_OK, "%s NaN", keys[i]);
    }
    cr_assert(cfg->optimizer.lr_decay == 0.0 && cfg->optimizer.lr == 1e-2);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

/* DeepSpeed passes optimizer.params to the constructor as keyword
 * arguments: DeepSpeedCPULion(lr, betas, weight_decay) has no eps,
 * DeepSpeedCPUAdagrad(lr, eps, weight_decay, amsgrad) no betas, and
 * neither takes Adam's switches. */
Test(config_optim, parameters_the_type_does_not_take_are_refused)
{
    refused("{\"optimizer\": {\"type\": \"Lion\", \"params\": {\"eps\": 1e-8}}}",
            "optimizer.params.eps", "not a parameter of Lion");
    refused("{\"optimizer\": {\"type\": \"Lion\", \"params\": {\"adam_w_mode\": false}}}",
            "optimizer.params.adam_w_mode", "not a parameter of Lion");
    refused("{\"optimizer\": {\"type\": \"Lion\", \"params\": {\"lr_decay\": 0.1}}}",
            "optimizer.params.lr_decay", "belongs to Adagrad");
    refused("{\"optimizer\": {\"type\": \"Adagrad\", \"params\": {\"betas\": [0.9, 0.99]}}}",
            "optimizer.params.betas", "not a parameter of Adagrad");
    refused("{\"optimizer\": {\"type\": \"Adagrad\", \"params\": {\"bias_correction\": true}}}",
            "optimizer.params.bias_correction", "not a parameter of Adagrad");
    refused("{\"optimizer\": {\"type\": \"AdamW\", \"params\": "
            "{\"initial_accumulator_value\": 0.1}}}",
            "optimizer.params.initial_accumulator_value", "not a parameter of AdamW");
    /* Still unsupported: the other DeepSpeed types. */
    refused("{\"optimizer\": {\"type\": \"Lamb\"}}", "optimizer.type",
            "supported: Adam, AdamW, Lion, Adagrad");
    /* Adam takes its own parameters as before. */
    zc_config *cfg = load("{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"eps\": 1e-6, "
                          "\"betas\": [0.8, 0.9], \"adam_w_mode\": false}}}");
    cr_assert(cfg->optimizer.eps == 1e-6 && !cfg->optimizer.adam_w_mode);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}

static void engine_refuses(const char *json, const char *name)
{
    zc_config *cfg = load(json);
    zc_comm *comm = NULL;
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK, "%s", zc_last_error());
    zc_engine_options o = ZC_ENGINE_OPTIONS_INIT;
    o.device = ZC_DEVICE_HOST;
    zc_engine *e = NULL;
    zc_status st = zc_engine_create(&e, cfg, comm, &o);
    cr_assert_eq(st, ZC_ERR_UNSUPPORTED, "%s: zc_engine_create gave %d (%s)", name, (int)st,
                 zc_last_error());
    cr_assert_null(e);
    char want[64];
    snprintf(want, sizeof want, "optimizer.type: \"%s\" is parsed", name);
    cr_assert(strstr(zc_last_error(), want), "message: %s", zc_last_error());
    cr_assert(strstr(zc_last_error(), "Adam/AdamW only"), "message: %s", zc_last_error());
    zc_comm_destroy(comm);
    zc_config_destroy(cfg);
}

Test(config_optim, engine_create_refuses_lion_and_adagrad)
{
    engine_refuses("{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"Lion\"}}",
                   "Lion");
    engine_refuses("{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": "
                   "\"adagrad\", \"params\": {\"lr\": 0.1}}}",
                   "Adagrad");
    /* The same engine takes AdamW. */
    zc_config *cfg = load("{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": "
                          "\"AdamW\"}}");
    zc_comm *comm = NULL;
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    zc_engine_options o = ZC_ENGINE_OPTIONS_INIT;
    o.device = ZC_DEVICE_HOST;
    zc_engine *e = NULL;
    cr_assert_eq(zc_engine_create(&e, cfg, comm, &o), ZC_OK, "%s", zc_last_error());
    zc_engine_destroy(e);
    zc_comm_destroy(comm);
    zc_config_destroy(cfg);
    t_assert_no_leaks();
}
