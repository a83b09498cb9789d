/* The optimizer block's type rules: what follows from optimizer.type.
 *
 * DeepSpeed (runtime/config.py) lowercases optimizer.type and matches it
 * against its names; runtime/engine.py _configure_basic_optimizer then builds
 * the class of that type with optimizer.params as keyword arguments:
 *   Adam, AdamW  FusedAdam / DeepSpeedCPUAdam (torch.optim.Adam(W) with
 *                torch_adam);
 *   Lion         FusedLion, or DeepSpeedCPULion under optimizer offload
 *                (deepspeed/ops/lion: lr 1e-3, betas (0.9, 0.999),
 *                weight_decay 0);
 *   Adagrad      torch.optim.Adagrad, or DeepSpeedCPUAdagrad under optimizer
 *                offload (deepspeed/ops/adagrad/cpu_adagrad.py: lr 1e-2,
 *                eps 1e-10, weight_decay 0; torch's adds lr_decay 0 and
 *                initial_accumulator_value 0).
 * So the defaults of lr and eps depend on the type, and a parameter the
 * class does not take is an error (a TypeError in DeepSpeed).
 *
 * The host kernels of Lion and Adagrad exist (src/optim/lion.h, adagrad.h);
 * the engine's step runs Adam and AdamW only, so zc_engine_create refuses
 * the other two (zc__cfg_rule_optimizer, from support.c). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "config/internal.h"
#include "config/schema.h"

static const char *type_name(int type)
{
    static const char *const names[] = {"Adam", "AdamW", "Lion", "Adagrad"};
    return type >= 0 && type <= ZC_OPT_ADAGRAD ? names[type] : "?";
}

/* DeepSpeed's default of lr and eps for the type. */
static double type_lr(int type) { return type == ZC_OPT_ADAGRAD ? 1e-2 : 1e-3; }
static double type_eps(int type) { return type == ZC_OPT_ADAGRAD ? 1e-10 : 1e-8; }

static bool origin_default(const zc_config *cfg, const char *path)
{
    int k = zc__cfg_key_find(path);
    return k < 0 || !cfg->meta || cfg->meta->origin[k] == ZC_ORIGIN_DEFAULT;
}

void zc__cfg_optimizer_type_stored(zc_config *cfg)
{
    const int t = cfg->optimizer.type;
    cfg->optimizer.adamw_type = t == ZC_OPT_ADAMW;
    /* A value the config gave (or "auto") is kept; a default follows the
     * type, also when zc_config_set changes the type afterwards. */
    if (origin_default(cfg, "optimizer.params.lr"))
        cfg->optimizer.lr = type_lr(t);
    if (origin_default(cfg, "optimizer.params.eps"))
        cfg->optimizer.eps = type_eps(t);
}

static void users(unsigned mask, char *buf, size_t cap)
{
    buf[0] = 0;
    for (int t = ZC_OPT_ADAM; t <= ZC_OPT_ADAGRAD; t++)
        if (mask & (1u << t)) {
            size_t n = strlen(buf);
            snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", type_name(t));
        }
}

void zc__cfg_check_optimizer(const zc_config *cfg, zc_cfg_diag *d)
{
    if (!cfg->meta)
        return;
    const int t = cfg->optimizer.type;
    for (int i = 0; i < zc__cfg_nkeys; i++) {
        const zc_cfg_key *k = &zc__cfg_keys[i];
        if (!k->opt_mask || cfg->meta->origin[i] == ZC_ORIGIN_DEFAULT ||
            (k->opt_mask & (1u << t)))
            continue;
        char who[64];
        users(k->opt_mask, who, sizeof who);
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, k->path,
                     "not a parameter of %s (DeepSpeed passes optimizer.params to the "
                     "optimizer's constructor, which would refuse it); it belongs to %s",
                     type_name(t), who);
    }
}

void zc__cfg_rule_optimizer(const zc_config *cfg, zc_cfg_diag *d)
{
    const int t = cfg->optimizer.type;
    if (t == ZC_OPT_LION || t == ZC_OPT_ADAGRAD)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_UNSUPPORTED, "optimizer.type",
                     "\"%s\" is parsed, but the engine's step runs Adam/AdamW only: "
                     "zc_engine_create refuses it; use \"Adam\" or \"AdamW\"",
                     type_name(t));
}
