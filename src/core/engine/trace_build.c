/* The timeline and the comms logger at build (src/trace; the window's
 * course is observe/timeline.c): their settings from the configuration and
 * the environment, and the most records the traced window can need, which
 * the buffer is sized to (or a configured size is held to).
 *
 *   trace.path / ZC_TRACE          the file (the variable wins)
 *   trace.steps / ZC_TRACE_STEPS   the window, "A-B" (default 2-4)
 *   trace.max_events               records; unset: the bound below
 *   comms_logger.*                 DeepSpeed's keys
 *
 * The bound counts, per step of the window, what the engine records: the
 * step and its top-level spans, per micro-step and chunk the reduction
 * (span, collective, group, agreement, a swapped gradient's two NVMe
 * requests and waits), per stage-3 activation (the trace's capacity: four
 * per parameter and micro-step) the acquire, its gather, the read of an
 * offloaded shard with its agreement, wait and copy, and the prefetch, per
 * chunk the optimizer's home traffic (copies, NVMe requests and waits) and
 * the publish, per Adam piece its span and one per thread of the pool, and
 * the loop's calls between steps; a quarter more for what varies with
 * timing (an NVMe wait more or less). An evaluation pass inside the window
 * is not in the bound: its records may be dropped, and the file says how
 * many. */
#include <stdio.h>
#include <string.h>

#include "base/env.h"
#include "core/engine.h"
#include "optim/adam_pace.h"

/* The most records one optimizer step of this engine makes. */
static int64_t step_bound(const zc_engine *e, int threads)
{
    const int64_t N = e->nchunks, K = e->gas;
    int64_t b = 64 + 16;                    /* the step, its phases, norm, pass, loop calls */
    b += K * (4 + 12 * N);                  /* forward, backward; each chunk's reduction */
    if (e->stage == 3) {
        const int64_t act = e->traces[ZC_PASS_TRAIN].cap;
        b += act * 8 + N * 8;               /* activations; the publish refresh */
    } else {
        b += N * 2;                         /* the publish all-gathers */
    }
    b += N * 32;                            /* the optimizer's home traffic per chunk */
    b += zc__step_adam_calls(e) * (1 + (int64_t)threads);
    return b;
}

/* The file's path: ZC_TRACE, else trace.path; NULL for none. */
static zc_status trace_path(const zc_engine *e, const char **out)
{
    *out = e->cfg->trace.path;
    const char *env = zc__env("ZC_TRACE");
    if (!env)
        return ZC_OK;
    for (const char *p = env; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            char shown[ZC_ENV_SHOWN_MAX];
            return ZC_ERR(ZC_ERR_CONFIG, "ZC_TRACE='%s': want the path of the timeline file "
                          "(no control characters)", zc__env_shown(env, shown, sizeof shown));
        }
    if (strlen(env) > 400)
        return ZC_ERR(ZC_ERR_CONFIG, "ZC_TRACE: a path of %zu bytes; at most 400", strlen(env));
    *out = env;
    return ZC_OK;
}

zc_status zc__trace_build(zc_engine *e)
{
    const zc_config *cfg = e->cfg;
    const char *path = NULL;
    ZC_CHECK(trace_path(e, &path));
    const char *steps_text = cfg->trace.steps ? cfg->trace.steps : ZC_TRACE_STEPS_DEFAULT;
    const char *steps_what = "trace.steps";
    if (zc__env("ZC_TRACE_STEPS")) {
        steps_text = zc__env("ZC_TRACE_STEPS");
        steps_what = "ZC_TRACE_STEPS";
    }
    zc_tl_opts o = {.rank = e->rank, .world = e->world, .stage = e->stage,
                    .dtype = zc_dtype_name(e->pdt), .device = e->dev->ops->name};
    if (zc__config_step_range(steps_text, steps_what, &o.steps.first, &o.steps.last) != ZC_OK) {
        if (strcmp(steps_what, "ZC_TRACE_STEPS"))
            return ZC_ERR(ZC_ERR_CONFIG, "%s", zc_last_error());
        /* A variable's value as every variable's message shows it. */
        char shown[ZC_ENV_SHOWN_MAX];
        zc__error_clear();
        return ZC_ERR(ZC_ERR_CONFIG,
                      "ZC_TRACE_STEPS='%s': want a window of optimizer steps \"A-B\" or \"A\" "
                      "(whole numbers, 1 <= A <= B <= 2^53; the first step is 1)",
                      zc__env_shown(steps_text, shown, sizeof shown));
    }
    ZC_CHECK(zc__config_comms_ops(cfg->comms_logger.prof_ops, &o.comms.prof_ops));
    o.comms.enabled = cfg->comms_logger.enabled;
    o.comms.verbose = cfg->comms_logger.verbose;
    o.comms.prof_all = cfg->comms_logger.prof_all;
    o.comms.debug = cfg->comms_logger.debug;
    if (!path && !o.comms.enabled)
        return ZC_OK;
    if (path) {
        zc_adam_pace pace;
        ZC_CHECK(zc__adam_pace_begin(&pace)); /* the pool's threads (ZC_CPU_THREADS) */
        const int64_t nsteps = o.steps.last - o.steps.first + 1;
        const int64_t per = step_bound(e, pace.max_threads);
        const int64_t max = (int64_t)1 << 26; /* trace.max_events' range */
        int64_t need = 0;
        bool over = __builtin_mul_overflow(per, nsteps, &need) || need > max;
        if (!over)
            need += need / 4 + 1024;
        over = over || need > max;
        const int64_t asked = cfg->trace.max_events;
        if (over)
            return ZC_ERR(ZC_ERR_CONFIG,
                          "%s = %s: %lld steps of this model can need more than %lld timeline "
                          "records (%lld per step, %zu bytes each), trace.max_events' limit; "
                          "trace fewer steps",
                          steps_what, steps_text, (long long)nsteps, (long long)max,
                          (long long)per, sizeof(zc_tl_rec));
        if (asked >= 0 && asked < need)
            return ZC_ERR(ZC_ERR_CONFIG,
                          "trace.max_events = %lld is too small for %s = %s: the window can "
                          "need %lld records (%lld per step, %zu bytes each, %.1f MiB); raise "
                          "it to %lld or leave it unset",
                          (long long)asked, steps_what, steps_text, (long long)need,
                          (long long)per, sizeof(zc_tl_rec),
                          (double)need * (double)sizeof(zc_tl_rec) / 1048576.0,
                          (long long)need);
        o.capacity = asked >= 0 ? asked : need;
        o.path = path;
    }
    ZC_CHECK(zc__tl_create(&o, &e->acct, path ? (zc__env("ZC_TRACE") ? "ZC_TRACE" : "trace.path")
                                              : "comms_logger", &e->tl));
    if (path) {
        ZC_LOGI("core", "timeline: steps %lld-%lld to '%s' (%lld records, %.1f MiB)",
                (long long)o.steps.first, (long long)o.steps.last, zc__tl_file(e->tl),
                (long long)o.capacity,
                (double)o.capacity * (double)sizeof(zc_tl_rec) / 1048576.0);
    }
    return ZC_OK;
}
