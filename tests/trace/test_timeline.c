/* The timeline (src/trace, docs/trace.md): the file each rank writes for
 * the traced steps, read back with jansson and held to the Chrome
 * trace-event format and to the clock measured here.
 *
 * Each rank thread trains the harness's model (tests/core/t_engine.h) with
 * a stretch of busy compute after each forward and each backward (so a
 * step lasts tens of milliseconds), times every step itself (CLOCK_MONOTONIC
 * just before the first acquire and just after zc_step returns) and
 * records zc_stats after it. Then, for every rank's file:
 *   - format: an object with "traceEvents" (complete events "X" with name,
 *     cat, ts, dur >= 0, pid = the rank, tid, args; metadata "M") and
 *     "displayTimeUnit"; otherData names the rank, the window and no
 *     dropped records;
 *   - every span closed and properly nested: on each track the spans come
 *     in order of their start, and each one lies inside the one still open
 *     before it or after its end (a stack); on the rank's track every span
 *     lies inside a step (or a loop call between steps, or an evaluation
 *     pass), the other tracks' spans begin inside one;
 *   - the steps: exactly those of the window, each once;
 *   - the sum: each step's top-level spans (its direct children) add up to
 *     the step's span to the nanosecond, and to the time measured here
 *     within 5%;
 *   - what the spans say: each step's collectives marked as model payload
 *     carry, by kind, the bytes zc_stats.comm_bytes_last_step counted for
 *     that step; at stage 3 with both offloads on NVMe the acquires name
 *     their outcome, NVMe reads and writes carry their bytes and queue
 *     depth, and the optimizer's outcome is an agreement span.
 * And the refusals: trace.max_events below what the window needs (the
 * message names the key and the size, and that size builds), a file that
 * exists, a malformed window; a window the run never reaches leaves no file,
 * one the run ends inside of holds the steps it completed. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "t_engine.h"
#include "t_offload.h"

#define STEPS 6
#define FIRST 2
#define LAST 4

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Busy compute, standing for a model's layers: ms milliseconds of work. */
static void compute(double ms)
{
    const int64_t end = now_ns() + (int64_t)(ms * 1e6);
    volatile double x = 1.0;
    while (now_ns() < end)
        for (int i = 0; i < 1000; i++)
            x = x * 1.0000001 + 1e-9;
}

typedef struct job {
    t_run run;
    zc_comm *comms[T_MAX_WORLD];
    int64_t wall_ns[T_MAX_WORLD][STEPS + 1]; /* by step number */
    zc_stats stats[T_MAX_WORLD][STEPS + 1];
    int steps;                               /* steps to run */
    char err[T_MAX_WORLD][512];
} job;

#define FAIL(...)                                                       \
    do {                                                                \
        if (!j->err[rank][0])                                           \
            snprintf(j->err[rank], sizeof j->err[rank], __VA_ARGS__);   \
        goto out;                                                       \
    } while (0)

static void rank_fn(int rank, void *arg)
{
    job *j = arg;
    t_ctx x;
    if (t_ctx_open(&x, &j->run, rank, j->comms[rank]) != ZC_OK) {
        snprintf(j->err[rank], sizeof j->err[rank], "open: %s", zc_last_error());
        t_ctx_close(&x);
        return;
    }
    for (int s = 0; s < j->steps; s++) {
        const int64_t t0 = now_ns();
        for (int m = 0; m < j->run.accum; m++) {
            if (t_forward(&x, NULL) != ZC_OK)
                FAIL("step %d forward: %s", s, zc_last_error());
            compute(6.0);
            if (t_backward(&x, s, m, -1) != ZC_OK)
                FAIL("step %d backward: %s", s, zc_last_error());
            compute(6.0);
            if (m + 1 < j->run.accum && zc_micro_step_end(x.eng) != ZC_OK)
                FAIL("step %d micro-step end: %s", s, zc_last_error());
        }
        zc_step_info info;
        if (zc_step(x.eng, &info) != ZC_OK)
            FAIL("step %d: %s", s, zc_last_error());
        j->wall_ns[rank][info.step] = now_ns() - t0;
        j->stats[rank][info.step] = (zc_stats){.size = sizeof(zc_stats)};
        if (zc_engine_stats(x.eng, &j->stats[rank][info.step]) != ZC_OK)
            FAIL("stats: %s", zc_last_error());
        /* A loop call between steps, as a trainer reduces its loss. */
        double loss = 1.0;
        if (zc_all_reduce_f64(x.eng, &loss, 1, ZC_REDUCE_SUM) != ZC_OK)
            FAIL("zc_all_reduce_f64: %s", zc_last_error());
    }
out:
    t_ctx_close(&x);
}

static bool run_job(job *j, int world)
{
    cr_assert_eq(zc_comm_local_world(world, j->comms), ZC_OK);
    t_run_ranks(world, rank_fn, j);
    for (int r = 0; r < world; r++)
        zc_comm_destroy(j->comms[r]);
    for (int r = 0; r < world; r++)
        if (j->err[r][0])
            return false;
    return true;
}

/* ---- reading a file back ------------------------------------------------ */

typedef struct span {
    const char *name, *cat;
    int64_t t0, t1; /* ns */
    int tid;
    json_t *args;
} span;

/* "ts" and "dur" are microseconds written with three decimals: back to ns. */
static int64_t us_to_ns(const json_t *v) { return (int64_t)(json_number_value(v) * 1e3 + 0.5); }

/* Loads path, checks the format of every event; returns the complete events
 * in file order (caller frees *spans and decrefs *root). */
static int load(const char *path, int rank, json_t **root, span **spans)
{
    json_error_t jerr;
    json_t *r = json_load_file(path, 0, &jerr);
    cr_assert_not_null(r, "%s: not JSON: %s (line %d)", path, jerr.text, jerr.line);
    cr_assert(json_is_object(r));
    json_t *ev = json_object_get(r, "traceEvents");
    cr_assert(json_is_array(ev), "%s: no traceEvents array", path);
    cr_assert_str_eq(json_string_value(json_object_get(r, "displayTimeUnit")), "ms");
    json_t *od = json_object_get(r, "otherData");
    cr_assert_eq(json_integer_value(json_object_get(od, "rank")), rank);
    cr_assert_eq(json_integer_value(json_object_get(od, "dropped")), 0, "%s dropped records",
                 path);
    span *v = calloc(json_array_size(ev), sizeof *v);
    int n = 0;
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        cr_assert_not_null(ph, "%s: event %zu has no ph", path, i);
        cr_assert_eq(json_integer_value(json_object_get(e, "pid")), rank);
        cr_assert(json_is_integer(json_object_get(e, "tid")));
        cr_assert(json_is_string(json_object_get(e, "name")));
        if (!strcmp(ph, "M")) {
            cr_assert(json_is_object(json_object_get(e, "args")));
            continue;
        }
        cr_assert_str_eq(ph, "X", "%s: event %zu: ph %s (every span is a complete event)", path,
                         i, ph);
        cr_assert(json_is_string(json_object_get(e, "cat")));
        cr_assert(json_is_number(json_object_get(e, "ts")) &&
                  json_is_number(json_object_get(e, "dur")));
        cr_assert(json_is_object(json_object_get(e, "args")));
        span s = {.name = json_string_value(json_object_get(e, "name")),
                  .cat = json_string_value(json_object_get(e, "cat")),
                  .t0 = us_to_ns(json_object_get(e, "ts")),
                  .tid = (int)json_integer_value(json_object_get(e, "tid")),
                  .args = json_object_get(e, "args")};
        const int64_t dur = us_to_ns(json_object_get(e, "dur"));
        cr_assert_geq(dur, 0, "%s: %s has a negative duration", path, s.name);
        s.t1 = s.t0 + dur;
        v[n++] = s;
    }
    *root = r;
    *spans = v;
    return n;
}

static bool inside(const span *a, const span *b) { return a->t0 >= b->t0 && a->t1 <= b->t1; }
static bool container(const span *s)
{
    return !strcmp(s->cat, "step") || !strcmp(s->cat, "loop");
}

/* Nesting and order on every track; every span inside (or, off the rank's
 * track, beginning inside) a container. */
static void check_nesting(const char *path, const span *v, int n)
{
    for (int i = 0; i < n; i++) {
        /* The previous span on the same track: starts no later. */
        for (int k = i - 1; k >= 0; k--) {
            if (v[k].tid != v[i].tid)
                continue;
            cr_assert_leq(v[k].t0, v[i].t0, "%s: track %d: '%s' starts before '%s' above it",
                          path, v[i].tid, v[i].name, v[k].name);
            break;
        }
    }
    /* A stack per track: each span inside the innermost open one, or after
     * it (which closes it). */
    for (int tid_i = 0; tid_i < n; tid_i++) {
        const int tid = v[tid_i].tid;
        bool first = true;
        for (int k = 0; k < tid_i; k++)
            if (v[k].tid == tid)
                first = false;
        if (!first)
            continue;
        const span *open[64];
        int depth = 0;
        for (int i = 0; i < n; i++) {
            if (v[i].tid != tid)
                continue;
            while (depth > 0 && v[i].t0 >= open[depth - 1]->t1 &&
                   !(v[i].t0 == open[depth - 1]->t1 && v[i].t1 == v[i].t0))
                depth--;
            if (depth > 0)
                cr_assert(inside(&v[i], open[depth - 1]),
                          "%s: track %d: '%s' [%lld, %lld] overlaps '%s' [%lld, %lld] without "
                          "nesting in it", path, tid, v[i].name, (long long)v[i].t0,
                          (long long)v[i].t1, open[depth - 1]->name, (long long)open[depth - 1]->t0,
                          (long long)open[depth - 1]->t1);
            else if (tid == 0)
                cr_assert(container(&v[i]), "%s: '%s' on the rank's track is in no step", path,
                          v[i].name);
            cr_assert_lt(depth, 64);
            open[depth++] = &v[i];
        }
    }
    for (int i = 0; i < n; i++) {
        if (v[i].tid == 0)
            continue;
        bool in = false;
        for (int k = 0; k < n && !in; k++)
            in = v[k].tid == 0 && container(&v[k]) && v[i].t0 >= v[k].t0 && v[i].t0 <= v[k].t1;
        cr_assert(in, "%s: '%s' on track %d begins outside every step", path, v[i].name, v[i].tid);
    }
}

static int64_t arg_int(const span *s, const char *key)
{
    return json_integer_value(json_object_get(s->args, key));
}

/* The file's checks against what the rank measured. */
static void check_file(job *j, const char *path, int rank, bool offloaded)
{
    json_t *root;
    span *v;
    const int n = load(path, rank, &root, &v);
    check_nesting(path, v, n);
    int steps = 0, acquires = 0, nvme = 0, outcome_agree = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(v[i].cat, "step"))
            continue;
        const int64_t step = arg_int(&v[i], "step");
        cr_assert(step >= FIRST && step <= LAST, "%s: step %lld outside the window", path,
                  (long long)step);
        steps++;
        /* Its direct children on the rank's track, and the payload of its
         * collectives. */
        int64_t sum = 0, payload[ZC_COLL__COUNT] = {0};
        for (int k = 0; k < n; k++) {
            if (k == i || v[k].tid != 0 || !inside(&v[k], &v[i]))
                continue;
            bool direct = true;
            for (int m = 0; m < n && direct; m++)
                if (m != k && m != i && v[m].tid == 0 && inside(&v[k], &v[m]) &&
                    inside(&v[m], &v[i]) && !(v[m].t0 == v[k].t0 && v[m].t1 == v[k].t1))
                    direct = false;
            if (direct) {
                cr_assert_str_eq(v[k].cat, "phase", "%s: step %lld has '%s' at its top level",
                                 path, (long long)step, v[k].name);
                sum += v[k].t1 - v[k].t0;
            }
            if (!strcmp(v[k].cat, "comm") && json_is_true(json_object_get(v[k].args, "payload"))) {
                static const char *const kinds[] = {"all_reduce", "reduce_scatter",
                                                    "all_gather", "broadcast"};
                for (int c = 0; c < ZC_COLL__COUNT; c++)
                    if (!strcmp(v[k].name, kinds[c]))
                        payload[c] += arg_int(&v[k], "bytes");
            }
        }
        const int64_t dur = v[i].t1 - v[i].t0;
        cr_assert_eq(sum, dur, "%s: step %lld: its top-level spans add up to %lld ns, the step "
                     "is %lld ns", path, (long long)step, (long long)sum, (long long)dur);
        const int64_t wall = j->wall_ns[rank][step];
        cr_assert(llabs(sum - wall) <= wall / 20,
                  "%s: step %lld: top-level spans %.3f ms, measured around the step %.3f ms",
                  path, (long long)step, sum / 1e6, wall / 1e6);
        for (int c = 0; c < ZC_COLL__COUNT; c++)
            cr_assert_eq(payload[c], j->stats[rank][step].comm_bytes_last_step[c],
                         "%s: step %lld, collective kind %d: %lld payload bytes on the "
                         "timeline, zc_stats counted %lld", path, (long long)step, c,
                         (long long)payload[c],
                         (long long)j->stats[rank][step].comm_bytes_last_step[c]);
    }
    cr_assert_eq(steps, LAST - FIRST + 1, "%s: %d steps, the window has %d", path, steps,
                 LAST - FIRST + 1);
    for (int i = 0; i < n; i++) {
        if (!strcmp(v[i].name, "acquire")) {
            const char *o = json_string_value(json_object_get(v[i].args, "outcome"));
            cr_assert(o && (!strcmp(o, "hit") || !strcmp(o, "prefetched") ||
                            !strcmp(o, "waited") || !strcmp(o, "gathered")));
            acquires++;
        }
        if (!strcmp(v[i].cat, "nvme") && strcmp(v[i].name, "nvme wait")) {
            cr_assert_gt(arg_int(&v[i], "bytes"), 0);
            cr_assert_gt(arg_int(&v[i], "queue_depth"), 0);
            nvme++;
        }
        if (!strcmp(v[i].cat, "agree") &&
            !strcmp(json_string_value(json_object_get(v[i].args, "what")),
                    "zc_step: the optimizer update"))
            outcome_agree++;
    }
    cr_assert_eq(outcome_agree, LAST - FIRST + 1, "%s: %d optimizer-outcome agreements", path,
                 outcome_agree);
    if (offloaded) {
        cr_assert_gt(acquires, 0, "%s: no stage-3 acquire spans", path);
        cr_assert_gt(nvme, 0, "%s: no NVMe request spans", path);
    }
    free(v);
    json_decref(root);
}

static void trace_run_with(int stage, int world, int accum, bool offload, const char *mics)
{
    t_swapdir d, swap;
    t_swapdir_make(&d, "zc-trace");
    if (offload)
        t_swapdir_make(&swap, "zc-trace-swap");
    char path_json[160];
    snprintf(path_json, sizeof path_json, "\"%s/tl.json\"", d.path);
    const char *keys[] = {"trace.path", path_json, "trace.steps", "\"2-4\"",
                          mics ? "zero_optimization.mics_shard_size" : NULL, mics, NULL};
    job *j = calloc(1, sizeof *j);
    t_run_init(&j->run, stage, world, ZC_DTYPE_BF16);
    j->run.accum = accum;
    j->run.layerwise = true;
    j->run.keys = keys;
    j->steps = STEPS;
    if (offload) {
        j->run.offload = "nvme";
        j->run.nvme_path_json = swap.json;
        j->run.offload_param = "nvme";
        j->run.param_nvme_path_json = swap.json;
    }
    const bool ok = run_job(j, world);
    for (int r = 0; r < world; r++)
        cr_assert(ok, "stage %d rank %d: %s", stage, r, j->err[r]);
    for (int r = 0; r < world; r++) {
        char file[128];
        if (world > 1)
            snprintf(file, sizeof file, "%s/tl.rank%d.json", d.path, r);
        else
            snprintf(file, sizeof file, "%s/tl.json", d.path);
        check_file(j, file, r, offload);
        cr_assert_eq(unlink(file), 0);
    }
    t_swapdir_remove(&d);
    if (offload)
        t_swapdir_remove(&swap);
    free(j);
}

static void trace_run(int stage, int world, int accum, bool offload)
{
    trace_run_with(stage, world, accum, offload, NULL);
}

Test(timeline, stage2_accumulation_two_ranks) { trace_run(2, 2, 2, false); }
/* A traced run under MiCS (shard groups of one, replicated over two ranks):
 * the spans, payloads and agreements hold as without it. Two ranks, as the
 * other cases: the spans are held to the step's wall time, which four rank
 * threads on two cores do not keep. */
Test(timeline, mics_two_ranks_replicated) { trace_run_with(2, 2, 1, false, "1"); }
Test(timeline, stage0_one_rank) { trace_run(0, 1, 1, false); }
Test(timeline, stage3_nvme_offload_three_ranks) { trace_run(3, 3, 1, true); }

/* ---- refusals and windows the run does not complete ---------------------- */

/* One rank's build with these keys; returns the build's status (the
 * message in msg). */
static zc_status build_with(const char *const *keys, char *msg, size_t cap)
{
    t_run run;
    t_run_init(&run, 2, 1, ZC_DTYPE_F32);
    run.keys = keys;
    zc_comm *comm = NULL;
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    t_ctx x;
    const zc_status rc = t_ctx_open(&x, &run, 0, comm);
    snprintf(msg, cap, "%s", rc == ZC_OK ? "" : zc_last_error());
    t_ctx_close(&x); /* also after a failed open: what it made */
    zc_comm_destroy(comm);
    return rc;
}

Test(timeline, refused_at_build)
{
    t_swapdir d;
    t_swapdir_make(&d, "zc-trace");
    char path_json[160], msg[1024];
    snprintf(path_json, sizeof path_json, "\"%s/tl.json\"", d.path);
    /* Too small a buffer: the key and the size needed are named... */
    const char *small[] = {"trace.path", path_json, "trace.max_events", "10", NULL};
    cr_assert_eq(build_with(small, msg, sizeof msg), ZC_ERR_CONFIG);
    cr_assert_not_null(strstr(msg, "trace.max_events = 10 is too small"), "%s", msg);
    const char *at = strstr(msg, "raise it to ");
    cr_assert_not_null(at, "%s", msg);
    long long need = atoll(at + strlen("raise it to "));
    cr_assert_gt(need, 10);
    char need_s[32], less_s[32];
    snprintf(need_s, sizeof need_s, "%lld", need);
    snprintf(less_s, sizeof less_s, "%lld", need - 1);
    cr_assert_eq(t_dir_entries(d.path), 0, "a refused build leaves no file");
    /* ... one less is refused too, and that size builds. */
    const char *less[] = {"trace.path", path_json, "trace.max_events", less_s, NULL};
    cr_assert_eq(build_with(less, msg, sizeof msg), ZC_ERR_CONFIG);
    const char *fits[] = {"trace.path", path_json, "trace.max_events", need_s, NULL};
    cr_assert_eq(build_with(fits, msg, sizeof msg), ZC_OK, "%s", msg);
    /* Built and destroyed before its window: no file is left. */
    cr_assert_eq(t_dir_entries(d.path), 0);
    /* A file that exists is never written over. */
    char file[128];
    snprintf(file, sizeof file, "%s/tl.json", d.path);
    FILE *f = fopen(file, "w");
    cr_assert_not_null(f);
    fputs("mine", f);
    fclose(f);
    const char *plain[] = {"trace.path", path_json, NULL};
    cr_assert_eq(build_with(plain, msg, sizeof msg), ZC_ERR_CONFIG);
    cr_assert_not_null(strstr(msg, "never written over an existing file"), "%s", msg);
    f = fopen(file, "r");
    char got[8] = "";
    cr_assert_not_null(fgets(got, sizeof got, f));
    fclose(f);
    cr_assert_str_eq(got, "mine");
    cr_assert_eq(unlink(file), 0);
    /* A malformed window, in the key or the variable. */
    zc_config *cfg = NULL;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set(cfg, "trace.steps", "\"4-2\""), ZC_OK);
    cr_assert_eq(zc_config_resolve(cfg, 1), ZC_ERR_CONFIG);
    cr_assert_not_null(strstr(zc_last_error(), "trace.steps"), "%s", zc_last_error());
    zc_config_destroy(cfg);
    setenv("ZC_TRACE_STEPS", "3-", 1);
    cr_assert_eq(build_with(plain, msg, sizeof msg), ZC_ERR_CONFIG);
    unsetenv("ZC_TRACE_STEPS");
    cr_assert_not_null(strstr(msg, "ZC_TRACE_STEPS='3-'"), "%s", msg);
    cr_assert_eq(t_dir_entries(d.path), 0);
    t_swapdir_remove(&d);
}

/* The run ends inside the window: the steps it completed are written. */
Test(timeline, run_ends_inside_the_window)
{
    t_swapdir d;
    t_swapdir_make(&d, "zc-trace");
    char path[160];
    snprintf(path, sizeof path, "%s/tl.json", d.path);
    setenv("ZC_TRACE", path, 1);
    setenv("ZC_TRACE_STEPS", "2-10", 1);
    job *j = calloc(1, sizeof *j);
    t_run_init(&j->run, 1, 1, ZC_DTYPE_F32);
    j->steps = 4;
    cr_assert(run_job(j, 1), "%s", j->err[0]);
    unsetenv("ZC_TRACE");
    unsetenv("ZC_TRACE_STEPS");
    json_error_t jerr;
    json_t *r = json_load_file(path, 0, &jerr);
    cr_assert_not_null(r, "%s", jerr.text);
    json_t *od = json_object_get(r, "otherData");
    cr_assert_str_eq(json_string_value(json_object_get(od, "steps")), "2-4");
    cr_assert_str_eq(json_string_value(json_object_get(od, "steps_requested")), "2-10");
    json_decref(r);
    cr_assert_eq(unlink(path), 0);
    t_swapdir_remove(&d);
    free(j);
}
