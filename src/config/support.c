/* What the engine accepts, as a config-level rule.
 *
 * A configuration can be valid DeepSpeed and still be one this build's engine
 * refuses (offload is parsed and checked, but the engine does not run it).
 * zc_engine_create and `zeroc config check` both call this one function, so
 * the checker's verdict is the engine's: when the engine learns to offload,
 * the rule changes here and both follow. */
#include "config/internal.h"
#include "core/error.h"

static const char *device_name(zc_offload_device dev)
{
    return dev == ZC_OFFLOAD_CPU ? "cpu" : dev == ZC_OFFLOAD_NVME ? "nvme" : "none";
}

void zc__cfg_engine_support(const zc_config *cfg, zc_cfg_diag *d)
{
    static const char *const blocks[2] = {"zero_optimization.offload_optimizer.device",
                                          "zero_optimization.offload_param.device"};
    const zc_offload_cfg *o[2] = {&cfg->zero.offload_optimizer, &cfg->zero.offload_param};
    for (int i = 0; i < 2; i++) {
        if (o[i]->device == ZC_OFFLOAD_NONE)
            continue;
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_UNSUPPORTED, blocks[i],
                     "\"%s\": valid for DeepSpeed, but the zeroc engine does not offload yet, "
                     "so zc_engine_create refuses it; set it to \"none\" or remove the block",
                     device_name(o[i]->device));
    }
}

zc_status zc__config_engine_check(const zc_config *cfg)
{
    zc_cfg_diag d = {0};
    zc__cfg_engine_support(cfg, &d);
    zc_status rc = zc__diag_report(&d, "zc_engine_create");
    zc__diag_free(&d);
    return rc;
}
