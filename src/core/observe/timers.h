/* wall_clock_breakdown (internal): where the host's wall time of a step goes.
 *
 * A step's window opens at its first timed engine call (zc_param_acquire,
 * zc_grad_buffer, zc_grad_ready, zc_step; the block calls go through them)
 * and closes when zc_step returns having taken the step. In between, the
 * time is charged to exactly one phase at a time, so the phases sum to the
 * window's wall time:
 *
 *   - the base phase is forward until the micro-step's first gradient buffer
 *     request, backward from then to the end of the micro-step
 *     (zc_micro_step_end returns to forward for the next one);
 *   - engine work inside them is a nested phase that the enclosing one does
 *     not get: gather (stage 3's gathers and prefetches in acquire, the
 *     publish all-gather of stages 1-3 in zc_step), reduce (a chunk's
 *     reduction in zc_grad_ready), optimizer (the rest of zc_step: norm,
 *     clip, Adam, the scaler);
 *   - io_wait is the part of the optimizer phase spent waiting for NVMe
 *     reads and writes of the optimizer state (the nvme home's own clock),
 *     moved out of the optimizer after the pass.
 *
 * Time inside an evaluation pass (zc_pass_begin .. zc_pass_end) is left out
 * of every window: the timers are paused.
 *
 * Everything is host time: on CUDA the asynchronous work is charged to
 * whichever phase waits for it. Disabled (wall_clock_breakdown false and no
 * timeline window open), every call is a branch on `on`. One engine, one
 * thread: no locking.
 *
 * The timeline (src/trace) takes its step windows and their top-level spans
 * from here while its window is open (`tl`): the window is its step span,
 * and it is tiled by "forward" and "backward" (the base phases, one span per
 * stretch) and "optimizer step" (zc_step, opened by the push of optimizer
 * at depth 0), cut at the same clock reads, so they add up to the step's
 * span exactly. The nested phases are not spans of their own: the engine's
 * hooks record what runs inside them. */
#ifndef ZC_CORE_TIMERS_H
#define ZC_CORE_TIMERS_H

#include <stdbool.h>
#include <stdint.h>

#include "zeroc/zeroc.h"

#define ZC_TIMER_DEPTH 8

struct zc_tl;

typedef struct zc_step_timers {
    bool on, running;             /* on: the machine runs (report or a timeline window) */
    bool report;                  /* wall_clock_breakdown: zc_engine_timers, progress lines */
    struct zc_tl *tl;             /* the timeline whose window is open, else NULL */
    int64_t top0;                 /* the timeline: start of the open top-level span (ns) */
    bool in_step_phase;           /* the timeline: zc_step's span is the open one */
    bool paused;                  /* an evaluation pass is open: its time is no step's */
    int phase;                    /* charged now */
    int stack[ZC_TIMER_DEPTH];    /* enclosing phases of a nested one */
    int depth;
    double mark;                  /* when `phase` was last charged up to */
    double start;                 /* the window's opening */
    double cur[ZC_TIMER__COUNT];  /* the open window */
    double last[ZC_TIMER__COUNT], last_total;
    int64_t last_step;
    double sum[ZC_TIMER__COUNT], sum_total;
    int64_t timed;                /* windows closed since build */
} zc_step_timers;

/* Clears t; report = on = wall_clock_breakdown. */
void zc__timers_init(zc_step_timers *t, bool on);
/* Gives the step windows to timeline tl from the next one on (NULL: no
 * more). Only between windows. */
void zc__timers_trace(zc_step_timers *t, struct zc_tl *tl);
/* Opens the window (base phase forward) unless it is open. */
void zc__timers_begin(zc_step_timers *t);
/* A gradient buffer was requested: the base phase becomes backward. */
void zc__timers_backward(zc_step_timers *t);
/* A micro-step ended: the base phase is forward again. */
void zc__timers_forward(zc_step_timers *t);
/* Enters / leaves a nested phase (opening the window if needed). */
void zc__timers_push(zc_step_timers *t, zc_timer_phase phase);
void zc__timers_pop(zc_step_timers *t);
/* Moves s seconds of the open window from one phase to another (at most
 * what `from` holds). */
void zc__timers_move(zc_step_timers *t, zc_timer_phase from, zc_timer_phase to, double s);
/* An evaluation pass begins / ends (pass.c): the time in between belongs to
 * no step. While paused nothing is charged and no window opens; an open
 * window goes on at resume as if the pass had taken no time. */
void zc__timers_pause(zc_step_timers *t);
void zc__timers_resume(zc_step_timers *t);
/* Closes the window as the timings of optimizer step `step` (of
 * micro_steps micro-steps; skipped: the overflow skipped it). */
void zc__timers_end(zc_step_timers *t, int64_t step, int micro_steps, bool skipped);

#endif
