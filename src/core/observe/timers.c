/* wall_clock_breakdown and the timeline's step windows: see timers.h. */
#include <string.h>

#include "core/engine.h"
#include "core/observe/timers.h"
#include "trace/trace.h"

void zc__timers_init(zc_step_timers *t, bool on)
{
    memset(t, 0, sizeof *t);
    t->on = t->report = on;
}

void zc__timers_trace(zc_step_timers *t, struct zc_tl *tl)
{
    if (t->running)
        return; /* only between windows */
    t->tl = tl;
    t->on = t->report || tl;
}

/* One clock read per transition: the timers' seconds and the timeline's
 * nanoseconds are the same instant. */
static int64_t now_ns(void) { return zc__tl_clock(); }

/* Charges the time since the last mark to the current phase. */
static void charge(zc_step_timers *t, int64_t ns)
{
    const double now = (double)ns * 1e-9;
    t->cur[t->phase] += now - t->mark;
    t->mark = now;
}

/* The name of the timeline's open top-level span. */
static const char *top_name(const zc_step_timers *t)
{
    if (t->in_step_phase)
        return "optimizer step";
    const int base = t->depth ? t->stack[0] : t->phase;
    return base == ZC_TIMER_BACKWARD ? "backward" : "forward";
}

/* Ends the open top-level span at ns and starts the next one there. */
static void top_cut(zc_step_timers *t, int64_t ns)
{
    if (t->tl)
        zc__tl_phase(t->tl, top_name(t), t->top0, ns);
    t->top0 = ns;
}

void zc__timers_begin(zc_step_timers *t)
{
    if (!t->on || t->running || t->paused)
        return;
    const int64_t ns = now_ns();
    t->running = true;
    t->phase = ZC_TIMER_FORWARD;
    t->depth = 0;
    t->in_step_phase = false;
    t->start = t->mark = (double)ns * 1e-9;
    t->top0 = ns;
    memset(t->cur, 0, sizeof t->cur);
    if (t->tl)
        zc__tl_step_open(t->tl, ns);
}

/* Switches the base phase (only when no nested phase is open: a gradient
 * buffer asked for inside engine work is not the caller's backward). */
static void base_phase(zc_step_timers *t, zc_timer_phase p)
{
    zc__timers_begin(t);
    if (!t->on || t->paused || !t->running || t->depth || t->phase == (int)p)
        return;
    const int64_t ns = now_ns();
    charge(t, ns);
    top_cut(t, ns);
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
    const int64_t ns = now_ns();
    charge(t, ns);
    if (t->depth == 0 && p == ZC_TIMER_OPTIMIZER) {
        /* zc_step: the base phase's span ends, the step's own begins. */
        top_cut(t, ns);
        t->in_step_phase = true;
    }
    if (t->depth < ZC_TIMER_DEPTH)
        t->stack[t->depth] = t->phase;
    t->depth++;
    t->phase = p;
}

void zc__timers_pop(zc_step_timers *t)
{
    if (!t->on || t->paused || !t->running || t->depth == 0)
        return;
    const int64_t ns = now_ns();
    charge(t, ns);
    t->depth--;
    /* Deeper than the stack: the phase below is the deepest recorded. */
    t->phase = t->stack[t->depth < ZC_TIMER_DEPTH ? t->depth : ZC_TIMER_DEPTH - 1];
    if (t->depth == 0 && t->in_step_phase) {
        top_cut(t, ns);
        t->in_step_phase = false;
    }
}

void zc__timers_move(zc_step_timers *t, zc_timer_phase from, zc_timer_phase to, double s)
{
    if (!t->on || t->paused || !t->running || !(s > 0))
        return;
    /* The open phase's time up to now, so `from` holds all it has. */
    charge(t, now_ns());
    if (s > t->cur[from])
        s = t->cur[from];
    t->cur[from] -= s;
    t->cur[to] += s;
}

void zc__timers_pause(zc_step_timers *t)
{
    if (!t->on || t->paused)
        return;
    if (t->running) {
        const int64_t ns = now_ns();
        charge(t, ns);
        top_cut(t, ns); /* the pass's own span lies between the two cuts */
    }
    t->paused = true;
}

void zc__timers_resume(zc_step_timers *t)
{
    if (!t->on || !t->paused)
        return;
    t->paused = false;
    if (t->running) {
        const int64_t ns = now_ns();
        t->mark = (double)ns * 1e-9; /* the pass's time is charged to nothing */
        t->top0 = ns;
    }
}

void zc__timers_end(zc_step_timers *t, int64_t step, int micro_steps, bool skipped)
{
    if (!t->on || !t->running)
        return;
    const int64_t ns = now_ns();
    charge(t, ns);
    /* The timeline's step ends where its last span (zc_step's) did: the
     * spans tile it to the nanosecond. */
    if (t->tl) {
        if (t->in_step_phase || t->depth)
            top_cut(t, ns);
        zc__tl_step_close(t->tl, t->top0, step, micro_steps, skipped);
    }
    t->in_step_phase = false;
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
    zc_timers r = {.size = sizeof r, .enabled = t->report};
    if (!t->report) {
        *out = r; /* the machine may run for a timeline: its figures are not reported */
        return ZC_OK;
    }
    r = (zc_timers){.size = sizeof r, .enabled = t->report, .step = t->last_step,
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
