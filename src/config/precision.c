/* The optimizer's state precision: in which dtype the fp32 master weights
 * and Adam's moments are stored (docs/config.md, "Optimizer state
 * precision").
 *
 * DeepSpeed's keys (runtime/precision_config.py, checked in runtime/config.py
 * and runtime/base_optimizer.py _configure_master_weights):
 *
 *   bf16.bf16_master_weights_and_grads  the master (and the gradient the
 *                                       optimizer reads) in bf16; stages 1-3
 *   bf16.bf16_optimizer_states          the moments in bf16; stages 1-3, and
 *                                       only with bf16_master_weights_and_grads
 *
 * and DeepSpeed's rule that a bf16 master with fp32 moments lives under
 * optimizer offload with DeepSpeedCPUAdam (its moments could not stay on the
 * GPU otherwise): zeroc's host Adam is that optimizer, so the rule reads
 * "offload_optimizer.device cpu or nvme".
 *
 * zeroc adds each moment's dtype on its own (Megatron-core's exp_avg_dtype /
 * exp_avg_sq_dtype): fp32 or bf16, at every stage, with an fp32 or bf16
 * master. fp16 is refused: a moment in fp16 needs a scale of its own (v of a
 * small gradient underflows fp16's range), which zeroc does not keep. */
#include "config/internal.h"

zc_state_dtypes zc__config_state_dtypes(const zc_config *cfg)
{
    const zc_dtype moments = cfg->bf16.optimizer_states ? ZC_DTYPE_BF16 : ZC_DTYPE_F32;
    return (zc_state_dtypes){
        .master = cfg->bf16.master_weights_and_grads ? ZC_DTYPE_BF16 : ZC_DTYPE_F32,
        .m = cfg->bf16.exp_avg_dtype >= 0 ? (zc_dtype)cfg->bf16.exp_avg_dtype : moments,
        .v = cfg->bf16.exp_avg_sq_dtype >= 0 ? (zc_dtype)cfg->bf16.exp_avg_sq_dtype : moments,
    };
}

bool zc__config_state_lp(const zc_config *cfg)
{
    const zc_state_dtypes s = zc__config_state_dtypes(cfg);
    return s.master != ZC_DTYPE_F32 || s.m != ZC_DTYPE_F32 || s.v != ZC_DTYPE_F32;
}

/* One moment key: fp32 or bf16, and not against bf16_optimizer_states. */
static void rule_moment(const zc_config *cfg, const char *key, int dt, zc_cfg_diag *d)
{
    if (dt < 0)
        return;
    if (dt != (int)ZC_DTYPE_F32 && dt != (int)ZC_DTYPE_BF16)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, key,
                     "\"%s\": a moment is stored in fp32 or bf16; fp16 would need a scale of "
                     "its own (the second moment of small gradients underflows fp16), which "
                     "zeroc does not keep",
                     zc_dtype_name((zc_dtype)dt));
    else if (cfg->bf16.optimizer_states && dt == (int)ZC_DTYPE_F32)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, key,
                     "\"fp32\" with bf16.bf16_optimizer_states true, which stores both moments "
                     "in bf16; remove one of them");
}

void zc__cfg_rule_state_precision(const zc_config *cfg, int stage, bool stage_auto,
                                  zc_cfg_diag *d)
{
    const bool master = cfg->bf16.master_weights_and_grads;
    const bool states = cfg->bf16.optimizer_states;
    rule_moment(cfg, "bf16.exp_avg_dtype", cfg->bf16.exp_avg_dtype, d);
    rule_moment(cfg, "bf16.exp_avg_sq_dtype", cfg->bf16.exp_avg_sq_dtype, d);
    /* DeepSpeed's assertions, with its words. */
    if (master && stage == 0 && !stage_auto)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "bf16.bf16_master_weights_and_grads",
                     "true at stage 0: Bf16_master_weights_and_grads is only supported with "
                     "ZeRO Stage 1, 2, or 3 (DeepSpeed)");
    if (states && stage == 0 && !stage_auto)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "bf16.bf16_optimizer_states",
                     "true at stage 0: bf16_optimizer_states is only supported with ZeRO "
                     "Stage 1, 2, or 3 (DeepSpeed)");
    if (states && !master)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "bf16.bf16_optimizer_states",
                     "true without bf16.bf16_master_weights_and_grads: bf16_optimizer_states "
                     "requires bf16_master_weights_and_grads to be enabled (DeepSpeed)");
    if (master && !cfg->bf16.enabled)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "bf16.bf16_master_weights_and_grads",
                     "true with bf16.enabled false: a bf16 master belongs to bf16 parameters "
                     "(fp16's is fp16.fp16_master_weights_and_grads, which zeroc does not "
                     "implement); set bf16.enabled");
    const zc_state_dtypes s = zc__config_state_dtypes(cfg);
    const bool moments32 = s.m == ZC_DTYPE_F32 && s.v == ZC_DTYPE_F32;
    if (master && moments32 && cfg->zero.offload_optimizer.device == ZC_OFFLOAD_NONE)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "bf16.bf16_master_weights_and_grads",
                     "true with fp32 moments and no optimizer offload: DeepSpeed keeps a bf16 "
                     "master with fp32 moments only under ZeRO Offload with DeepSpeedCPUAdam "
                     "(\"Master weights feature requires ZeRO Offload with DeepSpeedCPUAdam\"); "
                     "set zero_optimization.offload_optimizer.device to \"cpu\" or \"nvme\", or "
                     "bf16.bf16_optimizer_states to true");
    if (cfg->optimizer.deepspeed_arithmetic && zc__config_state_lp(cfg))
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "optimizer.params.deepspeed_arithmetic",
                     "true with 16-bit optimizer state: DeepSpeedCPUAdam's fp32 arithmetic is "
                     "offered over fp32 state only; remove one of them");
}
