/* Evaluation passes: zc_pass_begin / zc_pass_end mark a forward-only pass
 * (validation, sampling) so that it changes nothing of the training.
 *
 * What a pass touches and how each is kept apart:
 *   - gradients and parameters: not at all. The calls that would
 *     (zc__pass_train_only) are refused inside a pass, before they change
 *     anything;
 *   - stage 3's acquire trace: the pass follows a trace of its own
 *     (e->trace is switched; src/zero3/gather.c), and what was gathered or
 *     read ahead for the training is dropped at the pass's start (quiesce),
 *     what the pass gathered ahead at its end (eval_end), so the training
 *     resumes from a state it reaches without the pass too, and its
 *     collectives, which follow only the acquire sequence, stay the same on
 *     every rank;
 *   - the step's figures (gathers, collective payload, prefetch hits, reads
 *     and waits, the live peak): the training's counters are set aside at
 *     the start and restored at the end; what the pass counted in between
 *     becomes its own figures (zc_engine_pass_stats). The parameter home's
 *     counters run on, so the step's mark moves past the pass's reads;
 *   - the wall_clock_breakdown timers: paused.
 * Nothing here communicates or allocates, so the marks cannot fail on one
 * rank alone. */
#include <string.h>

#include "core/engine.h"

zc_status zc__pass_train_only(const zc_engine *e, const char *fn)
{
    if (e->pass.kind != ZC_PASS_EVAL)
        return ZC_OK;
    return ZC_ERR(ZC_ERR_INVALID_STATE,
                  "%s: an evaluation pass is open (zc_pass_begin(ZC_PASS_EVAL)); it computes no "
                  "gradients and changes no parameter: call zc_pass_end first (nothing was "
                  "changed)",
                  fn);
}

/* The first parameter still acquired, or NULL. */
static const zc_param *first_acquired(const zc_engine *e)
{
    for (int i = 0; i < e->nparams; i++)
        if (e->params[i]->acquired > 0)
            return e->params[i];
    return NULL;
}

/* The training's step figures go aside; the pass counts from zero. */
static void set_aside(zc_engine *e)
{
    zc_pass_state *ps = &e->pass;
    memcpy(ps->comm, e->comm_cur, sizeof ps->comm);
    memset(e->comm_cur, 0, sizeof e->comm_cur);
    ps->gathers = e->gathers_cur;
    e->gathers_cur = 0;
    ps->off = e->off_cur;
    e->off_cur = (zc_offload_step){0};
    ps->live_peak = e->live_peak_cur;
    e->live_peak_cur = e->live_elems;
    zc__param_io(e, &ps->io0);
}

/* What the pass counted becomes its figures; the training's come back. */
static void take_back(zc_engine *e)
{
    zc_pass_state *ps = &e->pass;
    zc_param_home_io io;
    zc__param_io(e, &io);
    ps->last = (zc_pass_stats){
        .size = sizeof(zc_pass_stats),
        .evals = ps->evals,
        .gathers = e->gathers_cur,
        .all_gather_bytes = e->comm_cur[ZC_COLL_ALL_GATHER],
        .prefetch_hits = e->off_cur.hits,
        .prefetch_misses = e->off_cur.misses,
        .io_wait_acquires = e->off_cur.io_wait_acquires,
        .io_wait_s = e->off_cur.io_wait_s,
        .param_nvme_read_bytes = io.read_bytes - ps->io0.read_bytes,
        .param_reads = io.reads - ps->io0.reads,
        .max_live_elems = e->live_peak_cur,
    };
    memcpy(e->comm_cur, ps->comm, sizeof e->comm_cur);
    e->gathers_cur = ps->gathers;
    e->off_cur = ps->off;
    e->live_peak_cur = ps->live_peak;
    /* The step's read figures are the home's counters since its mark: the
     * mark moves past what the pass read (and wrote: nothing). */
    e->pio_mark.read_bytes += io.read_bytes - ps->io0.read_bytes;
    e->pio_mark.write_bytes += io.write_bytes - ps->io0.write_bytes;
    e->pio_mark.reads += io.reads - ps->io0.reads;
}

ZC_API zc_status zc_pass_begin(zc_engine *e, zc_pass_kind kind)
{
    ZC_CHECK(zc__eng_enter(e, "zc_pass_begin", true));
    if (kind == ZC_PASS_TRAIN)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "zc_pass_begin: ZC_PASS_TRAIN is the pass every call belongs to unless "
                      "marked; only ZC_PASS_EVAL is begun and ended");
    if (kind != ZC_PASS_EVAL)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_pass_begin: unknown pass kind %d (ZC_PASS_EVAL "
                      "is %d)", (int)kind, (int)ZC_PASS_EVAL);
    if (e->pass.kind == ZC_PASS_EVAL)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "zc_pass_begin: an evaluation pass is already open; passes do not nest: "
                      "call zc_pass_end first");
    const zc_param *held = first_acquired(e);
    if (held)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "zc_pass_begin: parameter '%s' is acquired; release every parameter "
                      "before an evaluation pass begins",
                      held->name);
    /* What was gathered or read ahead for the training goes: the pass
     * starts, as its record did, with only persistent chunks gathered. */
    if (e->pol->quiesce)
        e->pol->quiesce(e);
    zc__timers_pause(&e->timers);
    e->pass.tl_t0 = zc__timeline_loop_begin(e);
    set_aside(e);
    e->pass.kind = ZC_PASS_EVAL;
    e->trace = &e->traces[ZC_PASS_EVAL];
    return ZC_OK;
}

ZC_API zc_status zc_pass_end(zc_engine *e)
{
    ZC_CHECK(zc__eng_enter(e, "zc_pass_end", true));
    if (e->pass.kind != ZC_PASS_EVAL)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "zc_pass_end: no evaluation pass is open (zc_pass_begin(ZC_PASS_EVAL) "
                      "opens one)");
    const zc_param *held = first_acquired(e);
    if (held)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "zc_pass_end: parameter '%s' is still acquired; release it before the "
                      "evaluation pass ends (the pass stays open)",
                      held->name);
    if (e->pol->eval_end)
        e->pol->eval_end(e);
    e->pass.evals++;
    take_back(e);
    e->trace = &e->traces[ZC_PASS_TRAIN];
    e->pass.kind = ZC_PASS_TRAIN;
    zc__timeline_loop_end(e, e->pass.tl_t0, "evaluation pass");
    e->pass.tl_t0 = 0;
    zc__timers_resume(&e->timers);
    return ZC_OK;
}

ZC_API zc_pass_kind zc_pass_current(const zc_engine *e)
{
    if (!e || e->magic != ZC_ENGINE_MAGIC)
        return ZC_PASS_TRAIN;
    return e->pass.kind;
}

ZC_API zc_status zc_engine_pass_stats(const zc_engine *e, zc_pass_stats *out)
{
    ZC_CHECK(zc__eng_enter(e, "zc_engine_pass_stats", false));
    ZC_CHECK(zc__out_check("zc_engine_pass_stats", "zc_pass_stats", out ? &out->size : NULL,
                               sizeof(zc_pass_stats)));
    zc_pass_stats r = e->pass.last;
    r.size = sizeof r;
    r.evals = e->pass.evals;
    *out = r;
    return ZC_OK;
}
