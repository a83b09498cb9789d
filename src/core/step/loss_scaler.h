/* DeepSpeed's loss scaler, bit for bit (internal).
 *
 * Dynamic (fp16 with loss_scale == 0), static (fp16 with loss_scale > 0) or
 * none (fp32, bf16: scale 1). zc__scaler_update() is called once per optimizer
 * step with the overflow flag already agreed across ranks. DeepSpeed's rules
 * (runtime/fp16/loss_scaler.py DynamicLossScaler.update_scale):
 *   overflow:    if delayed_shift == 1 or cur_hysteresis == 1: at scale == min
 *                it is an error ("already at minimum"), else scale = max(scale/2,
 *                min); otherwise cur_hysteresis -= 1. last_overflow_iter = iter.
 *                Hysteresis is not refilled on a decrease.
 *   no overflow: if consecutive_hysteresis: cur_hysteresis = hysteresis.
 *                stable = iter - last_overflow_iter - 1; if stable > 0 and
 *                stable % window == 0: (non-consecutive mode) cur_hysteresis =
 *                hysteresis, and scale *= 2.
 *   always:      iter += 1.
 * Every overflow step is skipped by the caller, whatever the scaler did. */
#ifndef ZC_CORE_LOSS_SCALER_H
#define ZC_CORE_LOSS_SCALER_H

#include <stdbool.h>
#include <stdint.h>

#include "config/config.h"

typedef struct zc_loss_scaler {
    bool dynamic;
    double scale, min_scale;
    int64_t window;
    int64_t hysteresis, cur_hysteresis;
    bool consecutive_hysteresis;
    int64_t cur_iter, last_overflow_iter;
} zc_loss_scaler;

/* Initialises from the fp16 block (scale 2^initial_scale_power when dynamic,
 * loss_scale when static, 1 when fp16 is off). */
void zc__scaler_init(zc_loss_scaler *s, const zc_config *cfg);

/* Applies one step's overflow flag. Returns ZC_ERR_LOSS_SCALE (state unchanged
 * apart from nothing) when an overflow must lower a scale already at the
 * minimum; ZC_OK otherwise. */
zc_status zc__scaler_update(zc_loss_scaler *s, bool overflow);

#endif
