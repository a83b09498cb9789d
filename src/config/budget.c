/* zero_optimization.max_memory as the memory planner reads it: which kinds
 * have a budget, which are "auto", and which placement keys the planner may
 * choose (src/plan/placement.c). The values are the key table's
 * (schema.c); this file reads their origins, which say what the user wrote. */
#include "config/internal.h"
#include "config/schema.h"

static const char *const budget_keys[ZC_BUDGET__COUNT] = {
    [ZC_BUDGET_DEVICE] = "zero_optimization.max_memory.device",
    [ZC_BUDGET_CPU] = "zero_optimization.max_memory.cpu",
    [ZC_BUDGET_NVME] = "zero_optimization.max_memory.nvme",
};

static zc_cfg_origin origin_of(const zc_config *cfg, const char *path)
{
    const int k = zc__cfg_key_find(path);
    return k >= 0 && cfg->meta ? (zc_cfg_origin)cfg->meta->origin[k] : ZC_ORIGIN_DEFAULT;
}

bool zc__config_has_budgets(const zc_config *cfg)
{
    for (int b = 0; b < ZC_BUDGET__COUNT; b++)
        if (origin_of(cfg, budget_keys[b]) != ZC_ORIGIN_DEFAULT)
            return true;
    return false;
}

zc_budget_state zc__config_budget(const zc_config *cfg, zc_budget_kind kind, int64_t *bytes)
{
    *bytes = 0;
    if (origin_of(cfg, budget_keys[kind]) == ZC_ORIGIN_AUTO_PENDING)
        return ZC_BUDGET_AUTO;
    if (cfg->zero.max_memory[kind] < 0)
        return ZC_BUDGET_NONE;
    *bytes = cfg->zero.max_memory[kind];
    return ZC_BUDGET_BYTES;
}

bool zc__config_stage_auto(const zc_config *cfg)
{
    return origin_of(cfg, "zero_optimization.stage") == ZC_ORIGIN_AUTO_PENDING;
}

bool zc__config_place_free(const zc_config *cfg, bool param)
{
    const zc_cfg_origin o = origin_of(cfg, param ? "zero_optimization.offload_param.device"
                                                 : "zero_optimization.offload_optimizer.device");
    return o == ZC_ORIGIN_AUTO_PENDING || (o == ZC_ORIGIN_DEFAULT && zc__config_has_budgets(cfg));
}
