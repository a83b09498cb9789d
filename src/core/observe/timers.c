/* wall_clock_breakdown: see timers.h. */
#include <string.h>

#include "base/clock.h"
#include "core/engine.h"
#include "core/observe/timers.h"

void zc__timers_init(zc_step_timers *t, bool on)
{
    memset(t, 0, sizeof *t);
    t->on = on;
}

/* Charges the time since the last mark to the current phase. */
static void charge(zc_step_timers *t, double now)
{
    t->cur[t->phase] += now - t->mark;
    t->mark = now;
}

void zc__timers_begin(zc_step_timers *t)
{
    if (!t->on || t->running || t->paused)
        return;
    t->running = true;
    t->phase = ZC_TIMER_FORWARD;
    t->depth = 0;
    t->start = t->mark = zc__now_s();
    memset(t->cur, 0, sizeof t->cur);
}

/* Switches the base phase (only when no nested phase is open: a gradient
 * buffer asked for inside engine work is not the caller's backward). */
static void base_phase(zc_step_timers *t, zc_timer_phase p)
{
    zc__timers_begin(t);
    if (!t->on || t->paused || !t->running || t->depth || t->phase == (int)p)
        return;
    charge(t, zc__now_s());
    t->phase = p;
}

void zc__timers_backward(zc_step_timers *t) { base_phase(t, ZC_TIMER_BACKWARD); }

void zc__timers_forward(zc_step_timers *t)
{
    if (t->running)
        base_phase(t, ZC_TIMER_FORWARD);
}

void zc__timers_push(zc_step_timers *t, zc_timer_phase p)
{
    zc__timers_begin(t);
    if (!t->on || t->paused || !t->running)
        return;
    charge(t, zc__now_s());
    if (t->depth < ZC_TIMER_DEPTH)
        t->stack[t->depth] = t->phase;
    t->depth++;
    t->phase = p;
}

void zc__timers_pop(zc_step_timers *t)
{
    if (!t->on || t->paused || !t->running || t->depth == 0)
        return;
    charge(t, zc__now_s());
    t->depth--;
    /* Deeper than the stack: the phase below is the deepest recorded. */
    t->phase = t->stack[t->depth < ZC_TIMER_DEPTH ? t->depth : ZC_TIMER_DEPTH - 1];
}

void zc__timers_move(zc_step_timers *t, zc_timer_phase from, zc_timer_phase to, double s)
{
    if (!t->on || t->paused || !t->running || !(s > 0))
        return;
    /* The open phase's time up to now, so `from` holds all it has. */
    charge(t, zc__now_s());
    if (s > t->cur[from])
        s = t->cur[from];
    t->cur[from] -= s;
    t->cur[to] += s;
}

void zc__timers_pause(zc_step_timers *t)
{
    if (!t->on || t->paused)
        return;
    if (t->running)
        charge(t, zc__now_s());
    t->paused = true;
}

void zc__timers_resume(zc_step_timers *t)
{
    if (!t->on || !t->paused)
        return;
    t->paused = false;
    if (t->running)
        t->mark = zc__now_s(); /* the pass's time is charged to nothing */
}

void zc__timers_end(zc_step_timers *t, int64_t step)
{
    if (!t->on || !t->running)
        return;
    const double now = zc__now_s();
    charge(t, now);
    /* The total is the sum of the phases rather than now - start: the same
     * time, without a rounding difference between the two. */
    double total = 0;
    for (int i = 0; i < ZC_TIMER__COUNT; i++) {
        t->last[i] = t->cur[i];
        t->sum[i] += t->cur[i];
        total += t->cur[i];
    }
    t->last_total = total;
    t->sum_total += total;
    t->last_step = step;
    t->timed++;
    t->running = false;
    t->depth = 0;
}

ZC_API zc_status zc_engine_timers(const zc_engine *e, zc_timers *out)
{
    ZC_CHECK(zc__eng_enter(e, "zc_engine_timers", false));
    ZC_CHECK(zc__out_check("zc_engine_timers", "zc_timers", out ? &out->size : NULL,
                               sizeof(zc_timers)));
    const zc_step_timers *t = &e->timers;
    zc_timers r = {.size = sizeof r, .enabled = t->on, .step = t->last_step,
                   .last_total = t->last_total, .sum_total = t->sum_total,
                   .timed_steps = t->timed};
    for (int i = 0; i < ZC_TIMER__COUNT; i++) {
        r.last[i] = t->last[i];
        r.sum[i] = t->sum[i];
    }
    *out = r;
    return ZC_OK;
}

ZC_API const char *zc_timer_name(zc_timer_phase phase)
{
    static const char *const names[ZC_TIMER__COUNT] = {"forward",   "backward",  "reduce",
                                                        "gather",    "optimizer", "io_wait"};
    return (int)phase >= 0 && phase < ZC_TIMER__COUNT ? names[phase] : "unknown";
}
