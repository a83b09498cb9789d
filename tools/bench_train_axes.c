/* `zeroc bench train`: the sweep's axes (bench_train.h) - which points of
 * the optimizer-state axis DeepSpeed allows, and each result against the
 * references measured in the same run: plain data parallelism, the same
 * configuration without activation checkpointing, and with fp32 state. */
#include <string.h>

#include "bench_train.h"

/* DeepSpeed's rules as src/config/precision.c checks them, so that the sweep
 * holds no point the config check would refuse. */
bool bt_state_allowed(const bt_config *c)
{
    const char *st = bt_state(c);
    const bool master = !strcmp(st, "bf16") || !strcmp(st, "bf16_master");
    if (master && (strcmp(c->dtype, "bf16") || c->stage == 0))
        return false;
    if (!strcmp(st, "bf16_master") && (c->budgeted || !strcmp(c->offload_optimizer, "none")))
        return false;
    return true;
}

/* Whether a and b are one configuration but for the activation and the
 * optimizer-state axes. */
static bool same_but_axes(const bt_config *a, const bt_config *b)
{
    return a->stage == b->stage && !strcmp(a->offload_optimizer, b->offload_optimizer) &&
           !strcmp(a->offload_param, b->offload_param) && a->world == b->world &&
           !strcmp(a->dtype, b->dtype) && a->budgeted == b->budgeted &&
           !memcmp(a->budget, b->budget, sizeof a->budget);
}

/* Whether a and b are one configuration but for the activation axis. */
static bool same_but_acts(const bt_config *a, const bt_config *b)
{
    return same_but_axes(a, b) && !strcmp(bt_state(a), bt_state(b));
}

/* Whether a and b are one configuration but for the optimizer-state axis. */
static bool same_but_state(const bt_config *a, const bt_config *b)
{
    return same_but_axes(a, b) && !strcmp(bt_act(a), bt_act(b));
}

/* The optimizer-state axis against its reference in this sweep: r's step
 * and the bytes it saves against the same configuration with fp32 state. */
static void pair_with_fp32_state(bt_result *r, const bt_result *fp32)
{
    if (fp32->status != BT_OK || r->status != BT_OK || !strcmp(bt_state(&r->cfg), "fp32"))
        return;
    if (!r->have_peak || !fp32->have_peak || fp32->step_med <= 0)
        return;
    r->have_fp32_pair = true;
    r->step_over_fp32_state = r->step_med / fp32->step_med;
    for (int k = 0; k < BT_KINDS; k++) {
        r->state_saved_peak[k] = fp32->peak[k] - r->peak[k];
        r->state_saved_estimate[k] = r->have_estimate && fp32->have_estimate
                                         ? fp32->estimate[k] - r->estimate[k]
                                         : 0;
    }
    r->state_saved_files = fp32->nvme_files - r->nvme_files;
}

/* The activation axis against its reference in this sweep: r's step, its
 * device-side activations and its VmHWM against the same configuration
 * without checkpointing (none). */
static void pair_with_none(bt_result *r, const bt_result *none)
{
    if (none->status != BT_OK || r->status != BT_OK || !strcmp(bt_act(&r->cfg), "none"))
        return;
    if (none->step_med > 0)
        r->step_over_none = r->step_med / none->step_med;
    const int64_t d0 = bt_device_acts(none, false);
    if (r->have_act && none->have_act && d0 > 0)
        r->device_acts_over_none = (double)bt_device_acts(r, false) / (double)d0;
    const int64_t planned = none->plan_host_peak - r->plan_host_peak;
    if (r->have_plan && none->have_plan && planned > 0 && none->vmhwm > r->vmhwm)
        r->vmhwm_drop_over_plan = (double)(none->vmhwm - r->vmhwm) / (double)planned;
}

void bt_pair_with_references(bt_result *rs, int i)
{
    /* Plain data parallelism: stage 0 without offload, every activation
     * kept, fp32 state, at the same world and dtype, which the sweep runs
     * first. */
    for (int k = 0; k <= i && rs[i].status == BT_OK; k++)
        if (rs[k].status == BT_OK && rs[k].cfg.stage == 0 &&
            !strcmp(bt_act(&rs[k].cfg), "none") && !strcmp(bt_state(&rs[k].cfg), "fp32") &&
            rs[k].cfg.world == rs[i].cfg.world && !strcmp(rs[k].cfg.dtype, rs[i].cfg.dtype))
            rs[i].step_over_ddp = rs[i].step_med / rs[k].step_med;
    for (int k = 0; k < i; k++)
        if (!strcmp(bt_act(&rs[k].cfg), "none") && same_but_acts(&rs[k].cfg, &rs[i].cfg))
            pair_with_none(&rs[i], &rs[k]);
    for (int k = 0; k < i; k++)
        if (!strcmp(bt_state(&rs[k].cfg), "fp32") && same_but_state(&rs[k].cfg, &rs[i].cfg))
            pair_with_fp32_state(&rs[i], &rs[k]);
}
