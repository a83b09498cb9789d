/* DeepSpeed's DynamicLossScaler (runtime/fp16/loss_scaler.py), bit for bit.
 *
 * The rules are in loss_scaler.h. Two details are easy to get wrong and are
 * kept exactly as DeepSpeed has them:
 *   - the halving happens when EITHER the configured hysteresis is 1 OR the
 *     running counter has reached 1, and the counter is not refilled by the
 *     halving itself (only by clean steps), so after the first delayed halving
 *     every further overflow halves at once until a refill;
 *   - growth counts clean steps since the last overflow with the -1 offset
 *     (stable = iter - last_overflow_iter - 1), so from a fresh start the
 *     first doubling happens at the end of the window+1-th clean step. */
#include "core/step/loss_scaler.h"

#include <math.h>

#include "base/checked.h"
#include "base/error.h"
#include "base/log.h"

void zc__scaler_init(zc_loss_scaler *s, const zc_config *cfg)
{
    *s = (zc_loss_scaler){
        .dynamic = false,
        .scale = 1.0,
        .min_scale = 1.0,
        .window = 1,
        .hysteresis = 1,
        .cur_hysteresis = 1,
        .consecutive_hysteresis = false,
        .cur_iter = 0,
        .last_overflow_iter = -1,
    };
    if (!cfg->fp16.enabled)
        return; /* fp32 and bf16 train unscaled */
    if (cfg->fp16.loss_scale > 0) {
        /* Static scale: DeepSpeed's LossScaler never changes it. */
        s->scale = cfg->fp16.loss_scale;
        s->min_scale = cfg->fp16.loss_scale;
        return;
    }
    s->dynamic = true;
    s->scale = ldexp(1.0, (int)cfg->fp16.initial_scale_power);
    s->min_scale = cfg->fp16.min_loss_scale;
    s->window = cfg->fp16.loss_scale_window > 0 ? cfg->fp16.loss_scale_window : 1;
    s->hysteresis = cfg->fp16.hysteresis;
    s->cur_hysteresis = cfg->fp16.hysteresis;
    s->consecutive_hysteresis = cfg->fp16.consecutive_hysteresis;
}

zc_status zc__scaler_update(zc_loss_scaler *s, bool overflow)
{
    if (!s->dynamic) {
        /* A static or absent scaler has nothing to adapt; the caller still
         * skips the overflowing step. */
        return zc__count_step(&s->cur_iter)
                   ? ZC_OK
                   : ZC_ERR(ZC_ERR_INVALID_STATE, "loss scaler: iteration counter at its "
                            "limit %lld", (long long)ZC_STEPS_MAX);
    }
    if (overflow) {
        if (s->hysteresis == 1 || s->cur_hysteresis == 1) {
            if (s->scale == s->min_scale)
                return ZC_ERR(ZC_ERR_LOSS_SCALE,
                              "fp16 overflow at step %lld with the loss scale already at "
                              "its minimum (fp16.min_loss_scale = %g): cannot decrease the "
                              "scale anymore; lower the learning rate, check the data for "
                              "inf/nan, or train in bf16",
                              (long long)s->cur_iter, s->min_scale);
            double next = s->scale / 2.0;
            if (next < s->min_scale)
                next = s->min_scale;
            ZC_LOGI("core", "fp16 overflow at step %lld: loss scale %g -> %g",
                    (long long)s->cur_iter, s->scale, next);
            s->scale = next;
        } else {
            ZC_LOGI("core", "fp16 overflow at step %lld: loss scale stays %g (hysteresis %lld left)",
                    (long long)s->cur_iter, s->scale, (long long)(s->cur_hysteresis - 1));
            s->cur_hysteresis--;
        }
        s->last_overflow_iter = s->cur_iter;
    } else {
        if (s->consecutive_hysteresis)
            s->cur_hysteresis = s->hysteresis;
        int64_t stable = s->cur_iter - s->last_overflow_iter - 1;
        if (stable > 0 && stable % s->window == 0) {
            if (!s->consecutive_hysteresis)
                s->cur_hysteresis = s->hysteresis;
            s->scale *= 2.0;
        }
    }
    /* zc_step refuses a step at the limit before anything changes, so this
     * cannot fail there; it is checked all the same. */
    if (!zc__count_step(&s->cur_iter))
        return ZC_ERR(ZC_ERR_INVALID_STATE, "loss scaler: iteration counter at its limit %lld",
                      (long long)ZC_STEPS_MAX);
    return ZC_OK;
}
