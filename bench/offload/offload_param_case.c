/* bench_offload's offload_param cases: a stage-3 step (one rank, bf16) whose
 * shards live in a swap file (offload_param nvme, max_in_cpu 0), with a
 * synthetic compute delay per chunk in forward and backward, run with
 * prefetch (stage3_prefetch_bucket_size large) and without (0); reuse
 * distance 0, so every chunk is read twice a step. buffer_count is --buffers
 * (2..16, default 3); the engine keeps at most two reads ahead whatever it is
 * (src/zero3/gather.c).
 *
 * Calibration, in the same run: a step without prefetch and without delay
 * makes every acquire wait for its read; the exposed I/O of that step over
 * its reads is the per-chunk read time, and the delay is 1.5 x that (the
 * issue's condition: compute per chunk >= read time per chunk). During the
 * measurement a calibration step runs before each measured pair, so every
 * measured step is compared with the read time of the same moment:
 * read_s = its reads x that step's per-chunk read time, and
 * exposed_over_read = exposed_io_s / read_s (near 1 without prefetch).
 *
 * One JSON line per case:
 *   {"bench":"offload_param","params","prefetch","step_s","exposed_io_s",
 *    "exposed_io_fraction","read_s","exposed_over_read","read_s_per_chunk",
 *    "compute_s_per_chunk","reads","buffers"}
 * medians of --iters steps after two warm-up steps (the first records the
 * trace). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zeroc/zeroc.h>

#include "offload_param_case.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void compute(double s)
{
    if (s <= 0)
        return;
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

#define CK(x) do { zc_status rc_ = (x); if (rc_ != ZC_OK) { \
    fprintf(stderr, "bench_offload: %s: %s\n", #x, zc_last_error()); exit(1); } } while (0)

typedef struct prun {
    zc_engine *eng;
    zc_comm *comm;
    zc_config *cfg;
    zc_param **p;
    int n;
} prun;

static void open_run(prun *r, const char *dir, long long params, long long chunk,
                     long long buffers, bool prefetch)
{
    char v[700];
    CK(zc_comm_local_world(1, &r->comm));
    CK(zc_config_create(&r->cfg));
    CK(zc_config_set(r->cfg, "zero_optimization.stage", "3"));
    CK(zc_config_set(r->cfg, "bf16.enabled", "true"));
    CK(zc_config_set(r->cfg, "optimizer.type", "\"AdamW\""));
    CK(zc_config_set(r->cfg, "zero_optimization.stage3_param_persistence_threshold", "0"));
    CK(zc_config_set(r->cfg, "zero_optimization.stage3_max_reuse_distance", "0"));
    CK(zc_config_set(r->cfg, "zero_optimization.stage3_prefetch_bucket_size",
                     prefetch ? "1000000000" : "0"));
    CK(zc_config_set(r->cfg, "zero_optimization.offload_param.device", "\"nvme\""));
    snprintf(v, sizeof v, "\"%s\"", dir);
    CK(zc_config_set(r->cfg, "zero_optimization.offload_param.nvme_path", v));
    CK(zc_config_set(r->cfg, "zero_optimization.offload_param.max_in_cpu", "0"));
    snprintf(v, sizeof v, "%lld", buffers);
    CK(zc_config_set(r->cfg, "zero_optimization.offload_param.buffer_count", v));
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = chunk;
    CK(zc_engine_create(&r->eng, r->cfg, r->comm, &eo));
    r->n = (int)((params + chunk - 1) / chunk);
    r->p = calloc((size_t)r->n, sizeof *r->p);
    for (int i = 0; i < r->n; i++) {
        char name[32];
        snprintf(name, sizeof name, "w%d", i);
        int64_t numel = params - (long long)i * chunk < chunk ? params - (long long)i * chunk
                                                               : chunk;
        r->p[i] = zc_param_add(r->eng, name, &numel, 1, 0);
        if (!r->p[i]) {
            fprintf(stderr, "bench_offload: zc_param_add: %s\n", zc_last_error());
            exit(1);
        }
    }
    CK(zc_engine_build(r->eng));
}

static void close_run(prun *r)
{
    zc_engine_destroy(r->eng);
    zc_config_destroy(r->cfg);
    zc_comm_destroy(r->comm);
    free(r->p);
}

/* One step: forward (acquire, compute, release per chunk), backward in
 * reverse with a zero gradient, zc_step. Returns its time. */
static double step(prun *r, double delay, zc_offload_stats *os)
{
    const double t0 = now_s();
    for (int i = 0; i < r->n; i++) {
        void *w = NULL;
        CK(zc_param_acquire_status(r->eng, r->p[i], NULL, &w));
        compute(delay);
        CK(zc_param_release(r->eng, r->p[i], NULL));
    }
    for (int i = r->n - 1; i >= 0; i--) {
        void *w = NULL;
        CK(zc_param_acquire_status(r->eng, r->p[i], NULL, &w));
        compute(delay);
        if (!zc_grad_buffer(r->eng, r->p[i])) {
            fprintf(stderr, "bench_offload: zc_grad_buffer: %s\n", zc_last_error());
            exit(1);
        }
        CK(zc_grad_ready(r->eng, r->p[i]));
        CK(zc_param_release(r->eng, r->p[i], NULL));
    }
    CK(zc_step(r->eng, NULL));
    const double t = now_s() - t0;
    os->size = sizeof *os;
    CK(zc_engine_offload_stats(r->eng, os));
    return t;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void zc_bench_offload_param(const char *dir, long long params, long long chunk, long long buffers,
                            int iters)
{
    /* Calibration of the delay: no prefetch, no compute: every read is
     * exposed, so the exposed I/O over the reads is the read time per
     * chunk. */
    prun r;
    zc_offload_stats os;
    open_run(&r, dir, params, chunk, buffers, false);
    double per_read = 0;
    for (int it = 0; it < 2 + iters; it++) {
        step(&r, 0, &os);
        if (it >= 2 && os.param_reads > 0)
            per_read += os.io_wait_s / (double)os.param_reads / iters;
    }
    const double delay = 1.5 * per_read;
    /* The measurement: the calibration engine, the prefetch run and the run
     * without prefetch step in turn, so the read time each iteration is
     * compared with was measured next to it, at the disk speed of that
     * moment (on a shared machine it drifts between passes). */
    prun pr[2];
    open_run(&pr[0], dir, params, chunk, buffers, false);
    open_run(&pr[1], dir, params, chunk, buffers, true);
    double st[2][64], ex[2][64], rd[2][64];
    int64_t reads[2] = {0, 0};
    if (iters > 64)
        iters = 64;
    for (int it = 0; it < 2 + iters; it++) {
        step(&r, 0, &os);
        const double read_now = os.param_reads > 0 ? os.io_wait_s / (double)os.param_reads : 0;
        for (int pf = 1; pf >= 0; pf--) {
            double t = step(&pr[pf], delay, &os);
            if (it >= 2) {
                st[pf][it - 2] = t;
                ex[pf][it - 2] = os.io_wait_s;
                rd[pf][it - 2] = read_now * (double)os.param_reads;
                reads[pf] = os.param_reads;
            }
        }
    }
    close_run(&r);
    for (int pf = 1; pf >= 0; pf--) {
        close_run(&pr[pf]);
        qsort(st[pf], (size_t)iters, sizeof(double), cmp);
        qsort(ex[pf], (size_t)iters, sizeof(double), cmp);
        qsort(rd[pf], (size_t)iters, sizeof(double), cmp);
        const double s = st[pf][iters / 2], e = ex[pf][iters / 2], rs = rd[pf][iters / 2];
        printf("{\"bench\":\"offload_param\",\"params\":%lld,\"prefetch\":%s,\"step_s\":%.6f,"
               "\"exposed_io_s\":%.6f,\"exposed_io_fraction\":%.4f,\"read_s\":%.6f,"
               "\"exposed_over_read\":%.4f,\"read_s_per_chunk\":%.6f,"
               "\"compute_s_per_chunk\":%.6f,\"reads\":%lld,\"buffers\":%lld}\n",
               params, pf ? "true" : "false", s, e, s > 0 ? e / s : 0.0, rs,
               rs > 0 ? e / rs : 0.0, per_read, delay, (long long)reads[pf], buffers);
        fflush(stdout);
    }
}
