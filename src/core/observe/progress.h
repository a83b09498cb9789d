/* Progress lines (progress.c): DeepSpeed's steps_per_print. */
#ifndef ZC_CORE_PROGRESS_H
#define ZC_CORE_PROGRESS_H

#include "zeroc/zeroc.h"

/* progress_start records the time at build; progress_step, after every
 * zc_step, logs one DeepSpeed-style INFO line ("core") every steps_per_print
 * steps: step, skipped steps, lr, loss scale, samples/s since the last line,
 * and MemAllocated / MaxMemAllocated by kind. */
void zc__progress_start(zc_engine *e);
void zc__progress_step(zc_engine *e, double lr);

#endif
