/* The engine's side of the timeline and the comms logger (timeline.c; the
 * recording itself is src/trace, made at build by engine/trace_build.c). */
#ifndef ZC_CORE_TIMELINE_H
#define ZC_CORE_TIMELINE_H

#include <stdint.h>

#include "zeroc/zeroc.h"

/* The window opens: the timeline keeps spans and takes the step windows
 * from the timers (between two steps, or at build for a window from step
 * 1). */
void zc__timeline_start(zc_engine *e);
/* After every zc_step that took a step: at the end of the window's last
 * step, writes the file (a failure is an ERROR line naming the file on
 * that rank; the training goes on: no collective depends on the timeline);
 * before the window's first, opens it. */
void zc__timeline_step_end(zc_engine *e);
/* A loop call or an evaluation pass: a span of its own (kept only while
 * the window is open); begin returns the start to give to end. */
int64_t zc__timeline_loop_begin(zc_engine *e);
void zc__timeline_loop_end(zc_engine *e, int64_t t0, const char *name);
/* At destroy: writes a window the run ended inside of, logs the comms
 * logger's table (INFO, "comm"), frees the timeline. */
void zc__timeline_destroy(zc_engine *e);

#endif
