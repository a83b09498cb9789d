/* What the engine accepts, as a config-level rule.
 *
 * A configuration can be valid DeepSpeed and still be one this build's engine
 * refuses: optimizer offload at stage 0 has nothing to offload from (stage 0
 * keeps the whole optimizer state on every rank). Parameter offload below
 * stage 3 is accepted and ignored, as DeepSpeed does (the loader warns that
 * it has no effect, src/config/semantic.c). zc_engine_create and `zeroc config
 * check` both call this one function, so the checker's verdict is the
 * engine's. */
#include "config/internal.h"
#include "base/error.h"

static const char *device_name(zc_offload_device dev)
{
    return dev == ZC_OFFLOAD_CPU ? "cpu" : dev == ZC_OFFLOAD_NVME ? "nvme" : "none";
}

void zc__cfg_engine_support(const zc_config *cfg, zc_cfg_diag *d)
{
    const zc_offload_cfg *opt = &cfg->zero.offload_optimizer;
    if (opt->device != ZC_OFFLOAD_NONE && cfg->zero.stage == 0)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "zero_optimization.offload_optimizer.device",
                     "\"%s\" at stage 0, which keeps the whole optimizer state on every rank: "
                     "zc_engine_create refuses it; set zero_optimization.stage to 1, 2 or 3 or "
                     "remove offload_optimizer",
                     device_name(opt->device));
}

zc_status zc__config_engine_check(const zc_config *cfg)
{
    zc_cfg_diag d = {0};
    zc__cfg_engine_support(cfg, &d);
    zc_status rc = zc__diag_report(&d, "zc_engine_create");
    zc__diag_free(&d);
    return rc;
}
