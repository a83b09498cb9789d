/* bench_trace_hooks: what one timeline hook costs, off and on (src/trace).
 *
 *   bench_trace_hooks [--calls N]
 *
 * Times N calls of the commonest hook pair (zc__tl_begin then zc__tl_span,
 * what every engine span does) three ways: with no timeline on the thread
 * (the cost of every hook in a run without tracing: a thread-local load and
 * a branch), with a timeline that keeps spans (the cost while the window is
 * open: two clock reads, the record copied into the preallocated buffer),
 * and the collective hook, which also feeds the comms logger's table. The
 * floor beside them is an empty loop of the same length. One JSON line:
 *   {"bench": "trace_hooks", "calls": N, "off_ns": .., "on_ns": ..,
 *    "coll_on_ns": .., "loop_ns": .., "loadavg": ..}
 * bench/trace/run_bench.py multiplies these by the records of a traced step
 * and sets them against the step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cliarg.h"
#include "trace/trace.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static volatile int64_t sink;

static double time_pairs(int64_t n)
{
    const double t0 = now_s();
    for (int64_t i = 0; i < n; i++) {
        const int64_t b = zc__tl_begin();
        sink += i;
        zc__tl_span(b, ZC_TLK_SPAN, "bench", -1, i);
    }
    return (now_s() - t0) / (double)n * 1e9;
}

static double time_colls(int64_t n)
{
    const double t0 = now_s();
    for (int64_t i = 0; i < n; i++) {
        const int64_t b = zc__tl_begin();
        sink += i;
        zc__tl_coll(b, ZC_COLL_ALL_GATHER, ZC_DTYPE_BF16, 1 << 20, 1 << 19, "bench", 0, 2);
    }
    return (now_s() - t0) / (double)n * 1e9;
}

static double time_loop(int64_t n)
{
    const double t0 = now_s();
    for (int64_t i = 0; i < n; i++)
        sink += i;
    return (now_s() - t0) / (double)n * 1e9;
}

int main(int argc, char **argv)
{
    int64_t n = 2000000;
    for (int i = 1; i < argc; i++) {
        char err[ZC_ARG_ERRLEN];
        if (!strcmp(argv[i], "--calls") && i + 1 < argc) {
            if (!zc__arg_i64("--calls", argv[++i], 1000, 50000000, 0, &n, err, sizeof err)) {
                fprintf(stderr, "bench_trace_hooks: %s\n", err);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: bench_trace_hooks [--calls 1000..50000000]\n");
            return 2;
        }
    }
    /* A timeline that keeps spans: its file in a directory of our own,
     * removed (with the unwritten file) at the end. */
    char dir[] = "/tmp/zc-bench-trace-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("bench_trace_hooks: mkdtemp");
        return 1;
    }
    char path[64];
    snprintf(path, sizeof path, "%s/t.json", dir);
    zc_mem_account acct;
    memset(&acct, 0, sizeof acct);
    zc_tl_opts o = {.rank = 0, .world = 2, .path = path, .steps = {1, 1}, .capacity = 2 * n + 16,
                    .comms = {.enabled = true, .prof_all = true}};
    zc_tl *t = NULL;
    if (zc__tl_create(&o, &acct, "bench", &t) != ZC_OK) {
        fprintf(stderr, "bench_trace_hooks: %s\n", zc_last_error());
        rmdir(dir);
        return 1;
    }
    /* Warm-up, then each way twice, the better kept (the machine is shared). */
    zc__tl_enter(NULL);
    double off = time_pairs(n / 10), loop = time_loop(n / 10);
    off = time_pairs(n);
    const double off2 = time_pairs(n);
    loop = time_loop(n);
    const double loop2 = time_loop(n);
    zc__tl_start(t);
    zc__tl_loop_open(t);
    zc__tl_enter(t);
    const double on = time_pairs(n / 2), on2 = time_pairs(n / 2);
    const double coll = time_colls(n / 2);
    zc__tl_enter(NULL);
    const int64_t dropped = zc__tl_dropped(t);
    zc__tl_destroy(t, &acct); /* never written: its file goes */
    rmdir(dir);
    double la[3] = {0, 0, 0};
    if (getloadavg(la, 3) < 1)
        la[0] = -1;
    printf("{\"bench\":\"trace_hooks\",\"calls\":%lld,\"off_ns\":%.3f,\"on_ns\":%.3f,"
           "\"coll_on_ns\":%.3f,\"loop_ns\":%.3f,\"dropped\":%lld,\"loadavg\":%.2f}\n",
           (long long)n, off < off2 ? off : off2, on < on2 ? on : on2, coll,
           loop < loop2 ? loop : loop2, (long long)dropped, la[0]);
    return 0;
}
