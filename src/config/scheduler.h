/* Learning-rate schedules with DeepSpeed's formulas (internal).
 *
 * `step` is the number of scheduler steps taken so far, i.e. optimizer steps
 * that were not skipped (DeepSpeed does not step the scheduler on an overflow
 * step). The result is the lr the NEXT optimizer update uses: DeepSpeed builds
 * the scheduler with last_batch_iteration = -1 and calls step() after each
 * update, so after `step` updates last_batch_iteration t = step - 1, and
 * step = 0 gives the initial value (t = -1: warmup_min_lr for WarmupLR and
 * WarmupDecayLR, 0 for WarmupCosineLR, cycle_min_lr for OneCycle,
 * lr_range_test_min_lr for LRRangeTest). base_lr is the optimizer's lr.
 * Returns the lr; *beta1 (may be NULL) receives OneCycle's momentum when
 * cycle_momentum is on, else base_beta1. *beta2 likewise (OneCycle sets
 * 0.99), may be NULL. */
#ifndef ZC_CONFIG_SCHEDULER_H
#define ZC_CONFIG_SCHEDULER_H

#include "config/config.h"

double zc__sched_lr(const zc_sched_cfg *s, double base_lr, double base_beta1, double base_beta2,
                    int64_t step, double *beta1, double *beta2);

#endif
