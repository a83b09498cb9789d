/* Progress lines (core/observe/progress.c): with steps_per_print 2, a 5-step run at
 * world 2 logs exactly the lines of steps 2 and 4 (rank 0 only, the default
 * sink rule), each with step, skipped, lr, loss scale, a positive samples/s
 * and MemAllocated / MaxMemAllocated by kind; on the host path the engine's
 * "device" buffers are reported as device memory (as on a GPU) and the
 * bookkeeping as host memory, so both are > 0; MaxMemAllocated is
 * never below MemAllocated. Without steps_per_print nothing is logged but the
 * build's plan line, which says what the build is about to allocate. With a
 * stated workload the lines carry tokens/s, TFLOP/s and MFU (below). */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "t_engine.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char lines[8][512];
static int nlines;

static void sink(zc_log_level level, const char *subsys, int rank, const char *line, void *user)
{
    (void)user;
    if (level != ZC_LOG_INFO || strcmp(subsys, "core") ||
        !(strstr(line, "samples/s=") || strstr(line, "build plan")))
        return;
    pthread_mutex_lock(&mu);
    if (nlines < 8)
        snprintf(lines[nlines++], sizeof lines[0], "%d|%s", rank, line);
    pthread_mutex_unlock(&mu);
}

static void run_steps(int64_t every, int steps)
{
    nlines = 0;
    zc_log_set_sink(sink, NULL);
    zc_log_set_level(ZC_LOG_INFO);
    t_run *r = calloc(1, sizeof *r);
    t_run_init(r, 2, 2, ZC_DTYPE_BF16);
    r->steps = steps;
    r->steps_per_print = every;
    cr_assert(t_engine_run(r), "%s", t_run_error(r));
    zc_log_set_level(ZC_LOG_WARN);
    zc_log_set_sink(NULL, NULL);
    free(r->master);
    free(r);
}

/* The value after "key=" as a number of bytes (B, KiB, MiB, GiB). */
static double bytes_after(const char *s, const char *key)
{
    const char *p = strstr(s, key);
    cr_assert_not_null(p, "%s lacks %s", s, key);
    char *end = NULL;
    double v = strtod(p + strlen(key), &end);
    if (!strncmp(end, "KiB", 3))
        v *= 1024;
    else if (!strncmp(end, "MiB", 3))
        v *= 1048576;
    else if (!strncmp(end, "GiB", 3))
        v *= 1073741824.0;
    return v;
}

Test(progress, every_steps_per_print)
{
    run_steps(2, 5);
    cr_assert_eq(nlines, 3, "want the plan and the lines of steps 2 and 4, got %d", nlines);
    cr_assert_not_null(strstr(lines[0], "build plan (rank 0, stage 2"), "%s", lines[0]);
    for (int i = 0; i < 2; i++) {
        const char *l = lines[i + 1];
        char want[64];
        snprintf(want, sizeof want, "0|step=%d, skipped=0, lr=", 2 * (i + 1));
        cr_assert(!strncmp(l, want, strlen(want)), "%s", l);
        cr_assert_not_null(strstr(l, ", loss_scale=1, "), "%s", l);
        const char *sps = strstr(l, "samples/s=");
        cr_assert_gt(strtod(sps + 10, NULL), 0.0, "%s", l);
        const char *cur = strstr(l, "MemAllocated device=");
        const char *max = strstr(l, "MaxMemAllocated device=");
        cr_assert(cur && max, "%s", l);
        cr_assert_gt(bytes_after(cur, "device="), 0.0, "%s", l);
        cr_assert_gt(bytes_after(cur, "host="), 0.0, "%s", l);
        cr_assert_geq(bytes_after(max, "host="), bytes_after(cur, "host="), "%s", l);
        cr_assert_geq(bytes_after(max, "device="), bytes_after(cur, "device="), "%s", l);
        cr_assert_eq(bytes_after(cur, "pinned="), 0.0, "%s", l);
    }
}

Test(progress, silent_without_steps_per_print)
{
    run_steps(0, 3);
    cr_assert_eq(nlines, 1, "want only the plan line, got %d", nlines);
    /* On the host path the engine's "device" buffers are planned as device
     * memory; the plan holds no pageable host memory (bookkeeping aside). */
    cr_assert_null(strstr(lines[0], ": device 0.0 MiB,"), "%s", lines[0]);
    cr_assert_not_null(strstr(lines[0], " MiB, pinned 0.0 MiB, host 0.0 MiB, NVMe 0.0 MiB"), "%s",
                       lines[0]);
}

/* The throughput the program states (zc_engine_set_workload, after the
 * first step here): tokens/s, TFLOP/s per rank and MFU, consistent with
 * each other as printed - TFLOP/s = tokens/s x (FLOPs / tokens per step) /
 * world, MFU = that / the peak - and the peak the stated one; with none
 * stated on the host path, zc_host_peak_flops'. */
static double peak_stated;

static void state_workload(t_ctx *x, int step, void *arg)
{
    (void)arg;
    if (step != 0)
        return;
    zc_workload w = {.size = sizeof w, .tokens_per_step = 1000.0, .flops_per_step = 6e9,
                     .peak_flops = peak_stated};
    cr_assert_eq(zc_engine_set_workload(x->eng, &w), ZC_OK, "%s", zc_last_error());
}

static double after(const char *l, const char *key)
{
    const char *p = strstr(l, key);
    cr_assert_not_null(p, "%s lacks %s", l, key);
    return strtod(p + strlen(key), NULL);
}

static void run_workload(double peak)
{
    nlines = 0;
    peak_stated = peak;
    zc_log_set_sink(sink, NULL);
    zc_log_set_level(ZC_LOG_INFO);
    t_run *r = calloc(1, sizeof *r);
    t_run_init(r, 2, 2, ZC_DTYPE_BF16);
    r->steps = 5;
    r->steps_per_print = 2;
    r->after_step = state_workload;
    cr_assert(t_engine_run(r), "%s", t_run_error(r));
    zc_log_set_level(ZC_LOG_WARN);
    zc_log_set_sink(NULL, NULL);
    free(r->master);
    free(r);
    cr_assert_eq(nlines, 3);
}

Test(progress, throughput_of_the_stated_workload)
{
    run_workload(1e13);
    for (int i = 1; i < 3; i++) {
        const char *l = lines[i];
        const double tps = after(l, "tokens/s="), tf = after(l, "TFLOP/s="),
                     mfu = after(l, "MFU="), of = after(l, "% of ");
        const double want_tf = tps * (6e9 / 1000.0) / 2 / 1e12;
        cr_assert(fabs(tf - want_tf) <= 0.0005 + 1e-3 * want_tf, "%s: TFLOP/s %g, want %g", l,
                  tf, want_tf);
        cr_assert(fabs(mfu - 100.0 * want_tf * 1e12 / 1e13) <= 0.05 + 1e-3 * mfu, "%s", l);
        cr_assert(fabs(of - 10.0) < 1e-9, "%s: the peak %g TFLOP/s, stated 10", l, of);
    }
    /* No peak stated: the host's estimate. */
    run_workload(0);
    double host = 0;
    cr_assert_eq(zc_host_peak_flops(&host, NULL, 0), ZC_OK, "%s", zc_last_error());
    cr_assert(fabs(after(lines[1], "% of ") - host / 1e12) <= 0.0005 + 1e-3 * host / 1e12, "%s",
              lines[1]);
}

Test(progress, workload_refused)
{
    zc_config *cfg = NULL;
    zc_comm *comm = NULL;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    zc_engine *e = NULL;
    cr_assert_eq(zc_engine_create(&e, cfg, comm, NULL), ZC_OK, "%s", zc_last_error());
    zc_workload w = {.size = sizeof w, .tokens_per_step = NAN};
    cr_assert_eq(zc_engine_set_workload(e, &w), ZC_ERR_INVALID_ARG);
    cr_assert_not_null(strstr(zc_last_error(), "tokens_per_step"), "%s", zc_last_error());
    w = (zc_workload){.size = sizeof w, .flops_per_step = -1};
    cr_assert_eq(zc_engine_set_workload(e, &w), ZC_ERR_INVALID_ARG);
    cr_assert_not_null(strstr(zc_last_error(), "flops_per_step"), "%s", zc_last_error());
    w.size = sizeof w - 1;
    cr_assert_eq(zc_engine_set_workload(e, &w), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_engine_set_workload(e, NULL), ZC_ERR_INVALID_ARG);
    zc_engine_destroy(e);
    zc_comm_destroy(comm);
    zc_config_destroy(cfg);
}
