/* The stage policies by number: the one table zc_engine_create and
 * zero_optimization.stage "auto" (place_build.c) pick a stage's policy from. */
#include "core/engine.h"

const zc_stage_policy *zc__stage_policy(int stage)
{
    switch (stage) {
    case 0: return &zc__stage0_policy;
    case 1: return &zc__stage1_policy;
    case 2: return &zc__stage2_policy;
    case 3: return &zc__stage3_policy;
    default: return NULL;
    }
}
