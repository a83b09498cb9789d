/* Learning-rate schedules with DeepSpeed's formulas (internal).
 * `step` is DeepSpeed's last_batch_iteration after that many optimizer steps
 * (0 before the first update). base_lr is the optimizer's lr. Returns the lr;
 * *beta1 (may be NULL) receives OneCycle's momentum when cycle_momentum is on,
 * else base_beta1. *beta2 likewise (OneCycle sets 0.99), may be NULL. */
#ifndef ZC_CONFIG_SCHEDULER_H
#define ZC_CONFIG_SCHEDULER_H

#include "config/config.h"

double zc__sched_lr(const zc_sched_cfg *s, double base_lr, double base_beta1, double base_beta2,
                    int64_t step, double *beta1, double *beta2);

#endif
