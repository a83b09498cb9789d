/* wall_clock_breakdown (core/observe/timers.c) and zc_engine_timers.
 *
 * Each rank thread times every t_train_step itself (CLOCK_MONOTONIC just
 * before the first acquire and just after zc_step returns) and checks, for
 * stages 0-3 at world 2 with two micro-steps, and for nvme offload:
 *   - every phase is >= 0 and the phases add up to last_total (the window);
 *   - the window fits inside the wall time measured around the step;
 *   - a phase the configuration does not have is exactly 0: gather in stage
 *     0 (nothing is gathered), io_wait without nvme offload;
 *   - the phases every step has (forward, backward, reduce, optimizer; gather
 *     in stages 1-3) are not 0: they were charged at all;
 *   - the sums over the run are the sums of the per-step values, step and
 *     timed_steps count the steps;
 *   - at stage 3 with offload_param nvme (and no optimizer offload), io_wait
 *     is exactly the time the parameter home's own clock says it waited for
 *     shard reads during the step, and it was not 0 over the run when the
 *     home did wait.
 * No threshold on any duration. Without the key the call succeeds with zeros;
 * a short out->size is refused. The progress line carries the means. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/engine.h"
#include "helpers.h"
#include "t_engine.h"
#include "t_offload.h"

#define STEPS 4

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct job {
    t_run run;
    zc_comm *comms[T_MAX_WORLD];
    bool has_gather, has_io;
    bool param_io;                /* offload_param nvme: io_wait is the home's waits */
    char err[T_MAX_WORLD][512];
} job;

#define FAIL(...)                                               \
    do {                                                        \
        if (!j->err[rank][0])                                   \
            snprintf(j->err[rank], sizeof j->err[rank], __VA_ARGS__); \
        goto out;                                               \
    } while (0)

static void rank_fn(int rank, void *arg)
{
    job *j = arg;
    t_ctx x;
    if (t_ctx_open(&x, &j->run, rank, j->comms[rank]) != ZC_OK) {
        snprintf(j->err[rank], sizeof j->err[rank], "open: %s", zc_last_error());
        return;
    }
    double sums[ZC_TIMER__COUNT] = {0}, total = 0;
    zc_param_home_io io_start;
    zc__param_io(x.eng, &io_start);
    for (int s = 0; s < STEPS; s++) {
        zc_step_info info;
        zc_param_home_io io0, io1;
        zc__param_io(x.eng, &io0);
        const double t0 = now_s();
        if (t_train_step(&x, s, &info) != ZC_OK)
            FAIL("step %d: %s", s, zc_last_error());
        const double wall = now_s() - t0;
        zc__param_io(x.eng, &io1);
        zc_timers t = {.size = sizeof t};
        if (zc_engine_timers(x.eng, &t) != ZC_OK)
            FAIL("zc_engine_timers: %s", zc_last_error());
        if (!t.enabled || t.step != info.step || t.timed_steps != s + 1)
            FAIL("step %d: enabled %d, step %lld (want %lld), timed %lld", s, t.enabled,
                 (long long)t.step, (long long)info.step, (long long)t.timed_steps);
        double sum = 0;
        for (int i = 0; i < ZC_TIMER__COUNT; i++) {
            if (!(t.last[i] >= 0))
                FAIL("step %d: %s = %g < 0", s, zc_timer_name(i), t.last[i]);
            sum += t.last[i];
            sums[i] += t.last[i];
        }
        total += t.last_total;
        if (sum != t.last_total)
            FAIL("step %d: the phases add up to %.9f, the window is %.9f", s, sum, t.last_total);
        if (t.last_total > wall)
            FAIL("step %d: the window %.9f s is longer than the %.9f s measured around it", s,
                 t.last_total, wall);
        const bool want[ZC_TIMER__COUNT] = {true, true, true, j->has_gather, true, j->has_io};
        for (int i = 0; i < ZC_TIMER__COUNT; i++) {
            if (i == ZC_TIMER_IO_WAIT && j->has_io)
                continue; /* may be 0: a read can be complete before it is waited for */
            if (want[i] != (t.last[i] > 0))
                FAIL("step %d: %s = %g, expected %s", s, zc_timer_name(i), t.last[i],
                     want[i] ? "> 0" : "0");
        }
        if (j->param_io) {
            const double waited = io1.wait_s - io0.wait_s;
            if (!(t.last[ZC_TIMER_IO_WAIT] >= waited - 1e-9 &&
                  t.last[ZC_TIMER_IO_WAIT] <= waited + 1e-9))
                FAIL("step %d: io_wait %.9f s, the parameter home waited %.9f s", s,
                     t.last[ZC_TIMER_IO_WAIT], waited);
        }
        if (s == STEPS - 1) {
            if (j->param_io && io1.waits > io_start.waits && !(t.sum[ZC_TIMER_IO_WAIT] > 0))
                FAIL("the parameter home waited %lld times, io_wait is 0",
                     (long long)(io1.waits - io_start.waits));
            for (int i = 0; i < ZC_TIMER__COUNT; i++)
                if (t.sum[i] != sums[i])
                    FAIL("sum of %s %.9f, the steps add up to %.9f", zc_timer_name(i), t.sum[i],
                         sums[i]);
            if (t.sum_total != total)
                FAIL("sum_total %.9f, the steps add up to %.9f", t.sum_total, total);
        }
    }
out:
    t_ctx_close(&x);
}

static void run_job_param(int stage, const char *offload, const char *path_json,
                          const char *param_path_json)
{
    job *j = calloc(1, sizeof *j);
    t_run_init(&j->run, stage, 2, ZC_DTYPE_BF16);
    j->run.accum = 2;
    j->run.wall_clock_breakdown = true;
    j->run.offload = offload;
    j->run.nvme_path_json = path_json;
    if (param_path_json) {
        j->run.offload_param = "nvme";
        j->run.param_nvme_path_json = param_path_json;
        j->param_io = !offload;
    }
    j->has_gather = stage > 0;
    j->has_io = (offload && !strcmp(offload, "nvme")) || param_path_json;
    cr_assert_eq(zc_comm_local_world(2, j->comms), ZC_OK);
    t_run_ranks(2, rank_fn, j);
    for (int r = 0; r < 2; r++)
        zc_comm_destroy(j->comms[r]);
    for (int r = 0; r < 2; r++)
        cr_assert_eq(j->err[r][0], '\0', "stage %d rank %d: %s", stage, r, j->err[r]);
    free(j);
}

static void run_job(int stage, const char *offload, const char *path_json)
{
    run_job_param(stage, offload, path_json, NULL);
}

Test(timers, consistent_in_every_stage)
{
    for (int stage = 0; stage <= 3; stage++)
        run_job(stage, NULL, NULL);
}

Test(timers, nvme_offload_has_io_wait)
{
    t_swapdir d;
    t_swapdir_make(&d, "zc-timers");
    run_job(2, "nvme", d.json);
    run_job(1, "cpu", NULL);
    t_swapdir_remove(&d);
}

/* Stage 3's parameter shards on NVMe: the acquires' and the publish's waits
 * for their reads are io_wait, not gather; with the optimizer state on NVMe
 * too, both kinds of wait add up there (only the consistency checks). */
Test(timers, param_offload_waits_are_io_wait)
{
    t_swapdir d;
    t_swapdir_make(&d, "zc-timers");
    run_job_param(3, NULL, NULL, d.json);
    run_job_param(3, "nvme", d.json, d.json);
    t_swapdir_remove(&d);
}

Test(timers, off_by_default_and_size_checked)
{
    zc_config *cfg = NULL;
    zc_comm *comm = NULL;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    zc_engine *e = NULL;
    cr_assert_eq(zc_engine_create(&e, cfg, comm, &eo), ZC_OK);
    zc_param *p = zc_param_add(e, "w", (int64_t[]){256}, 1, 0);
    cr_assert_not_null(p);
    cr_assert_eq(zc_engine_build(e), ZC_OK, "%s", zc_last_error());
    cr_assert_not_null(zc_param_acquire(e, p, NULL));
    cr_assert_eq(zc_param_release(e, p, NULL), ZC_OK);
    cr_assert_not_null(zc_grad_buffer(e, p));
    cr_assert_eq(zc_grad_ready(e, p), ZC_OK);
    cr_assert_eq(zc_step(e, NULL), ZC_OK, "%s", zc_last_error());
    zc_timers t = {.size = sizeof t};
    cr_assert_eq(zc_engine_timers(e, &t), ZC_OK);
    cr_assert(!t.enabled);
    cr_assert_eq(t.timed_steps, 0);
    for (int i = 0; i < ZC_TIMER__COUNT; i++)
        cr_assert_eq(t.last[i] + t.sum[i], 0.0);
    t.size = sizeof t - 1;
    cr_assert_eq(zc_engine_timers(e, &t), ZC_ERR_INVALID_ARG);
    cr_assert_not_null(strstr(zc_last_error(), "out->size"));
    cr_assert_eq(zc_engine_timers(e, NULL), ZC_ERR_INVALID_ARG);
    cr_assert_str_eq(zc_timer_name(ZC_TIMER_IO_WAIT), "io_wait");
    cr_assert_str_eq(zc_timer_name(ZC_TIMER__COUNT), "unknown");
    /* The stats' high-water mark by kind: on the host path the engine's
     * "device" buffers count as device memory and its bookkeeping as host
     * memory, each peak at least what is allocated now; nothing pinned or on
     * NVMe without offload. */
    zc_stats st = {.size = sizeof st};
    cr_assert_eq(zc_engine_stats(e, &st), ZC_OK);
    cr_assert_gt(st.bytes_by_kind[ZC_KIND_HOST], 0);
    cr_assert_gt(st.bytes_by_kind[ZC_KIND_DEVICE], 0);
    cr_assert_geq(st.peak_bytes_by_kind[ZC_KIND_HOST], st.bytes_by_kind[ZC_KIND_HOST]);
    cr_assert_geq(st.peak_bytes_by_kind[ZC_KIND_DEVICE], st.bytes_by_kind[ZC_KIND_DEVICE]);
    cr_assert_eq(st.peak_bytes_by_kind[ZC_KIND_PINNED] + st.peak_bytes_by_kind[ZC_KIND_NVME], 0);
    zc_engine_destroy(e);
    zc_comm_destroy(comm);
    zc_config_destroy(cfg);
}

/* Trains r (then freed) with the log at INFO going to sink. */
static void run_logged(t_run *r, zc_log_sink sink)
{
    zc_log_set_sink(sink, NULL);
    zc_log_set_level(ZC_LOG_INFO);
    cr_assert(t_engine_run(r), "%s", t_run_error(r));
    zc_log_set_level(ZC_LOG_WARN);
    zc_log_set_sink(NULL, NULL);
    free(r->master);
    free(r);
}

/* The progress line with the key: the means of the two steps since the last
 * line, each phase by name, and step, which is their sum (to the printed
 * rounding). */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char line[1024];

static void sink(zc_log_level level, const char *subsys, int rank, const char *l, void *user)
{
    (void)user;
    (void)rank;
    if (level != ZC_LOG_INFO || strcmp(subsys, "core") || !strstr(l, "samples/s="))
        return;
    pthread_mutex_lock(&mu);
    snprintf(line, sizeof line, "%s", l);
    pthread_mutex_unlock(&mu);
}

Test(timers, progress_line_means)
{
    t_run *r = calloc(1, sizeof *r);
    t_run_init(r, 3, 2, ZC_DTYPE_BF16);
    r->steps = 4;
    r->steps_per_print = 2;
    r->wall_clock_breakdown = true;
    run_logged(r, sink);
    const char *t = strstr(line, ", time (ms, mean of 2 steps): forward=");
    cr_assert_not_null(t, "%s", line);
    double v[ZC_TIMER__COUNT + 1], sum = 0;
    for (int i = 0; i <= ZC_TIMER__COUNT; i++) {
        char key[32];
        snprintf(key, sizeof key, " %s=", i < ZC_TIMER__COUNT ? zc_timer_name(i) : "step");
        const char *at = strstr(t, key);
        cr_assert_not_null(at, "%s lacks %s", line, key);
        v[i] = strtod(at + strlen(key), NULL);
        cr_assert_geq(v[i], 0.0, "%s", line);
        if (i < ZC_TIMER__COUNT)
            sum += v[i];
    }
    /* Six values rounded to 0.001 ms each. */
    cr_assert_leq(sum - v[ZC_TIMER__COUNT], 0.004, "%s", line);
    cr_assert_geq(sum - v[ZC_TIMER__COUNT], -0.004, "%s", line);
}

/* A stage-3 first step says what it is doing: rank 0 logs, once each, that
 * the first step records the acquire order (gathering on demand) and that
 * the order is recorded; later steps add nothing. */
static int n_record, n_recorded;

static void z3_sink(zc_log_level level, const char *subsys, int rank, const char *l, void *user)
{
    (void)user;
    if (level != ZC_LOG_INFO || strcmp(subsys, "zero3") || rank != 0)
        return;
    pthread_mutex_lock(&mu);
    n_record += strstr(l, "first step: recording the order of parameter acquires") != NULL;
    n_recorded += strstr(l, "step 1: acquire order recorded") != NULL;
    pthread_mutex_unlock(&mu);
}

Test(timers, stage3_first_step_says_what_it_does)
{
    t_run *r = calloc(1, sizeof *r);
    t_run_init(r, 3, 2, ZC_DTYPE_BF16);
    r->steps = 3;
    run_logged(r, z3_sink);
    cr_assert_eq(n_record, 1);
    cr_assert_eq(n_recorded, 1);
}
