/* bench_ckpt: checkpoint save and load throughput next to the NVMe store
 * (src/offload/nvme_store.c: O_DIRECT, io_uring) writing and reading the same
 * number of bytes in the same directory, in the same run.
 *
 *   bench_ckpt --dir DIR [--params N] [--iters K] [--runs R]
 *
 * One rank, stage 1, fp32; the optimizer state (master, exp_avg, exp_avg_sq:
 * 12 bytes per parameter) is what a checkpoint writes. save = zc_checkpoint_save
 * (O_DIRECT writes, checksums, fsync, renames); load = zc_checkpoint_load
 * (checks, then one O_DIRECT read of every entry into place, hashed on the
 * way, and the working parameters rebuilt). The store's write is timed from
 * the creation of its directory and file and the reservation of the file's
 * size (zc__nvme_open: fallocate), as the save creates its staging directory
 * and its shard file and reserves it within its own time, to the fsync of the
 * file, as the save's files are fsync'd. The open is also reported on its own
 * ("store_open_s", "nvme_store_open_s"), with the save's ratio to the bare
 * write without it ("ratio_to_bare_write"; the figure before the open was
 * counted, bench/RESULTS.md).
 *
 * A run is one warm-up iteration (not counted) and K timed ones. It prints
 * one JSON line per iteration ("bench":"ckpt_iter": the save's, the load's
 * and the store's seconds, and the process's CPU seconds during the save and
 * the load, every thread counted), then one per operation ("bench":"ckpt"):
 * bytes, the median seconds of the K iterations, their min and max, GB/s at
 * the median, the same for the store, and the ratio: the median over the
 * iterations of store seconds / checkpoint seconds, each iteration's two
 * sides timed back to back (the disk's speed drifts between iterations, by
 * up to 2x on the virtual disk measured; a pair shares most of the drift).
 * Both sides read cold: the save and the store write with O_DIRECT, so
 * neither file is in the page cache when it is read, and both read with
 * O_DIRECT into huge-page buffers.
 *
 * R runs (default 1) follow each other in one process, each in a new
 * directory of its own whose files are removed at its end, then a pause of
 * PAUSE_S seconds (the device trims what was deleted). Last come one line per
 * operation ("bench":"ckpt_runs") with the R run ratios, their min, median and
 * max, and the load average at the start and the end: the figure a bar such
 * as "0.90x in every run of ten" is checked against (--runs 10); and one
 * ("op":"save_to_bare_write") with the save's run ratios to the bare write.
 *
 * Both sides write under the same conditions, which matter on a thin
 * virtual disk mounted with `discard` (bench/RESULTS.md, "Checkpoints"):
 * - Each store write goes to a new directory of its own beside the tag
 *   directories, as each save's does: the filesystem places a new
 *   directory's files in other block groups than an old one's, and writing
 *   blocks the host has not backed yet was twice as slow as rewriting ones it
 *   has (0.14 s against 0.07 s for 400 MB).
 * - No file is deleted before every iteration of the run has run: a deleted
 *   file's blocks are still being trimmed for a while, and what is timed next
 *   writes more slowly (a save timed right after the previous iteration's
 *   cleanup took 0.20 s instead of 0.14 s).
 * - The iterations alternate which side goes first, and the first, whose
 *   files land where the previous run's were just deleted, is not counted.
 * DIR needs 2 x (K + 1) x the bytes free. SIGINT, SIGTERM and SIGHUP are held
 * until the iteration under way ends, then the run's files are removed and
 * the signal is taken. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "cliarg.h"
#include "offload/offload.h"
#include "zeroc/zeroc.h"

#define NPARAMS 8
#define MAX_RUNS 100
/* Seconds between runs, after a run's files are removed. */
#define PAUSE_S 1

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* CPU seconds of the whole process (every thread) so far. */
static double cpu_now(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec +
           (double)u.ru_stime.tv_sec + 1e-6 * (double)u.ru_stime.tv_usec;
}

static int die(const char *what)
{
    fprintf(stderr, "bench_ckpt: %s: %s\n", what, zc_last_error());
    return 1;
}


/* The store writing (then fsyncing) and reading `bytes` (rounded up to 4 KiB,
 * the O_DIRECT alignment) through one aligned buffer of 64 MiB, in requests
 * of up to 64 MiB, in a file of its own in the new directory `dir`; the file
 * stays until *st is closed. */
static int store_ceiling(const char *dir, uint64_t bytes, void *buf, size_t buf_bytes,
                         zc_nvme_store **st, double *wr_s, double *rd_s, double *open_s)
{
    /* The write is timed from the directory's creation: a save creates its
     * staging directory and its file and reserves the file's size within its
     * own time, so the ceiling it is held to does the same (zc__nvme_open
     * creates the file and fallocates it; the open also counts the
     * registration of the store's buffer, about half a millisecond). */
    double t0 = now();
    if (mkdir(dir, 0700) != 0) {
        fprintf(stderr, "bench_ckpt: mkdir %s: %s\n", dir, strerror(errno));
        return 1;
    }
    const char *dirs[1] = {dir};
    zc_nvme_opts o = ZC_NVME_OPTS_INIT;
    o.dirs = dirs;
    o.ndirs = 1;
    o.purpose = "bench_ckpt";
    o.capacity = (bytes + 4095) / 4096 * 4096;
    if (zc__nvme_open(st, &o) != ZC_OK)
        return die("zc__nvme_open");
    zc_mem_region reg = {buf, buf_bytes};
    (void)zc__nvme_register_buffers(*st, &reg, 1);
    *open_s = now() - t0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass)
            t0 = now();
        for (uint64_t at = 0; at < o.capacity; at += buf_bytes) {
            const size_t n = o.capacity - at < buf_bytes ? (size_t)(o.capacity - at) : buf_bytes;
            zc_nvme_ticket t;
            zc_status s = pass ? zc__nvme_read(*st, at, buf, n, &t)
                               : zc__nvme_write(*st, at, buf, n, &t);
            if (s != ZC_OK || zc__nvme_wait(*st, t, NULL) != ZC_OK)
                return die(pass ? "store read" : "store write");
        }
        if (!pass && zc__nvme_fsync(*st) != ZC_OK)
            return die("store fsync");
        *(pass ? rd_s : wr_s) = now() - t0;
    }
    return 0;
}

/* Per iteration: save, load, store write (from its directory's creation),
 * store read, write / save, read / load, the CPU seconds of the save and the
 * load, the store's open (directory, file, reservation: part of its write)
 * and (write - open) / save, the ratio to the bare write. */
enum { T_SAVE, T_LOAD, T_WRITE, T_READ, T_SAVE_RATIO, T_LOAD_RATIO, T_SAVE_CPU, T_LOAD_CPU,
       T_OPEN, T_BARE_RATIO, T_COLS };

/* The checkpoint saved, then loaded, under `tag`. */
static int checkpoint_pass(zc_engine *eng, const char *ckdir, const char *tag, double *t)
{
    double c0 = cpu_now(), t0 = now();
    if (zc_checkpoint_save(eng, ckdir, tag) != ZC_OK)
        return die("zc_checkpoint_save");
    double t1 = now(), c1 = cpu_now();
    if (zc_checkpoint_load(eng, ckdir, tag) != ZC_OK)
        return die("zc_checkpoint_load");
    t[T_LOAD] = now() - t1;
    t[T_LOAD_CPU] = cpu_now() - c1;
    t[T_SAVE] = t1 - t0;
    t[T_SAVE_CPU] = c1 - c0;
    return 0;
}

typedef struct summary {
    double median, min, max;
} summary;

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static summary summarize_values(double *v, int n)
{
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    const double median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    return (summary){median, v[0], v[n - 1]};
}

/* Column k of the timed iterations (rows 1 .. runs-1 of times[runs][T_COLS]). */
static summary summarize(const double *times, int runs, int k)
{
    double v[MAX_RUNS + 1];
    const int n = runs - 1;
    for (int i = 0; i < n; i++)
        v[i] = times[T_COLS * (i + 1) + k];
    return summarize_values(v, n);
}

typedef struct bench {
    zc_engine *eng;
    const char *dir;
    uint64_t bytes;
    int iters;
    void *buf;                /* the store's */
    size_t buf_bytes;
    sigset_t stop_signals;
} bench;

/* Whether a stop signal is pending (held since the start). */
static bool stop_pending(const bench *b)
{
    sigset_t pending;
    sigpending(&pending);
    for (int sig = 1; sig < NSIG; sig++)
        if (sigismember(&b->stop_signals, sig) && sigismember(&pending, sig))
            return true;
    return false;
}

/* Removes only what run `run` made: the stores' directories, the tag
 * directories it saved, `latest`, and its directory. */
static void remove_run(const char *ckdir, zc_nvme_store **stores, int nits)
{
    char p[4200];
    for (int it = 0; it < nits; it++) {
        if (stores[it])
            zc__nvme_close(stores[it], ZC_NVME_CLOSE_WAIT);
        snprintf(p, sizeof p, "%s/store_it%d", ckdir, it);
        rmdir(p);
        static const char *const names[] = {"manifest.json", "rank_00000.bin"};
        for (int k = 0; k < 2; k++) {
            snprintf(p, sizeof p, "%s/it%d/%s", ckdir, it, names[k]);
            unlink(p);
        }
        snprintf(p, sizeof p, "%s/it%d", ckdir, it);
        rmdir(p);
    }
    snprintf(p, sizeof p, "%s/latest", ckdir);
    unlink(p);
    rmdir(ckdir);
}

/* One run: a warm-up and b->iters timed iterations in a new directory; its
 * two summary lines; the save's and the load's ratio into ratio[0..1], the
 * save's to the bare write (without the store's open) into ratio[2].
 * Returns non-zero on failure or a stop signal (the files are removed). */
static int one_run(const bench *b, int run, double ratio[3])
{
    char ckdir[4096], p[4200];
    snprintf(ckdir, sizeof ckdir, "%s/bench_ckpt.%d.run%d", b->dir, (int)getpid(), run);
    const int nits = b->iters + 1; /* the first is the warm-up */
    zc_nvme_store **stores = calloc((size_t)nits, sizeof *stores);
    double *times = calloc((size_t)T_COLS * (size_t)nits, sizeof *times);
    if (!stores || !times) {
        fprintf(stderr, "bench_ckpt: out of memory\n");
        free(stores);
        free(times);
        return 1;
    }
    int rc = 0;
    for (int it = 0; it < nits && !rc; it++) {
        char tag[32];
        snprintf(tag, sizeof tag, "it%d", it);
        snprintf(p, sizeof p, "%s/store_it%d", ckdir, it);
        double *t = &times[T_COLS * it];
        for (int side = 0; side < 2 && !rc; side++)
            rc = (side ^ (it & 1)) ? store_ceiling(p, b->bytes, b->buf, b->buf_bytes,
                                                   &stores[it], &t[T_WRITE], &t[T_READ],
                                                   &t[T_OPEN])
                                   : checkpoint_pass(b->eng, ckdir, tag, t);
        if (rc)
            break;
        t[T_SAVE_RATIO] = t[T_WRITE] / t[T_SAVE];
        t[T_LOAD_RATIO] = t[T_READ] / t[T_LOAD];
        t[T_BARE_RATIO] = (t[T_WRITE] - t[T_OPEN]) / t[T_SAVE];
        printf("{\"bench\":\"ckpt_iter\",\"run\":%d,\"iter\":%d,\"warmup\":%s,"
               "\"save_s\":%.4f,\"store_write_s\":%.4f,\"store_open_s\":%.4f,\"load_s\":%.4f,"
               "\"store_read_s\":%.4f,\"save_cpu_s\":%.4f,\"load_cpu_s\":%.4f}\n",
               run, it, it ? "false" : "true", t[T_SAVE], t[T_WRITE], t[T_OPEN], t[T_LOAD],
               t[T_READ], t[T_SAVE_CPU], t[T_LOAD_CPU]);
        fflush(stdout);
        if (stop_pending(b))
            rc = 1;
    }
    remove_run(ckdir, stores, nits);
    free(stores);
    if (rc) {
        free(times);
        return rc;
    }
    const summary bare = summarize(times, nits, T_BARE_RATIO),
                  store_open = summarize(times, nits, T_OPEN);
    ratio[2] = bare.median;
    static const char *const ops[2] = {"save", "load"};
    for (int k = 0; k < 2; k++) {
        const summary c = summarize(times, nits, T_SAVE + k),
                      io = summarize(times, nits, T_WRITE + k),
                      r = summarize(times, nits, T_SAVE_RATIO + k),
                      cpu = summarize(times, nits, T_SAVE_CPU + k);
        ratio[k] = r.median;
        printf("{\"bench\":\"ckpt\",\"run\":%d,\"op\":\"%s\",\"bytes\":%" PRIu64
               ",\"iters\":%d,\"seconds\":%.4f,\"min_s\":%.4f,\"max_s\":%.4f,"
               "\"gb_s\":%.3f,\"cpu_s\":%.4f,\"nvme_store_seconds\":%.4f,"
               "\"nvme_store_min_s\":%.4f,\"nvme_store_max_s\":%.4f,\"nvme_store_gb_s\":%.3f,"
               "\"ratio\":%.3f,\"ratio_min\":%.3f,\"ratio_max\":%.3f",
               run, ops[k], b->bytes, b->iters, c.median, c.min, c.max,
               (double)b->bytes / c.median / 1e9, cpu.median, io.median, io.min, io.max,
               (double)b->bytes / io.median / 1e9, r.median, r.min, r.max);
        if (!k)
            printf(",\"nvme_store_open_s\":%.4f,\"ratio_to_bare_write\":%.3f",
                   store_open.median, bare.median);
        printf("}\n");
    }
    fflush(stdout);
    free(times);
    return 0;
}

int main(int argc, char **argv)
{
    const char *dir = NULL;
    int64_t params = (int64_t)32 << 20;
    int iters = 5, runs = 1;
    char err[ZC_ARG_ERRLEN];
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) {
            fprintf(stderr, "usage: bench_ckpt --dir DIR [--params N] [--iters K] [--runs R]\n");
            return 2;
        }
        const char *a = argv[i], *v = argv[++i];
        bool ok = true;
        if (!strcmp(a, "--dir"))
            dir = v;
        else if (!strcmp(a, "--params"))
            ok = zc__arg_i64(a, v, 4096, (int64_t)1 << 34, 0, &params, err, sizeof err);
        else if (!strcmp(a, "--iters"))
            ok = zc__arg_int(a, v, 1, MAX_RUNS, &iters, err, sizeof err);
        else if (!strcmp(a, "--runs"))
            ok = zc__arg_int(a, v, 1, MAX_RUNS, &runs, err, sizeof err);
        else {
            snprintf(err, sizeof err, "unknown flag '%s'", a);
            ok = false;
        }
        if (!ok) {
            fprintf(stderr, "bench_ckpt: %s\n", err);
            return 2;
        }
    }
    if (!dir) {
        fprintf(stderr, "bench_ckpt: --dir DIR is required\n");
        return 2;
    }
    double load_start[3] = {0, 0, 0}, load_end[3] = {0, 0, 0};
    (void)getloadavg(load_start, 3);

    /* Held from here, before any thread starts, so every thread inherits it. */
    bench b = {.dir = dir, .iters = iters, .buf_bytes = (size_t)64 << 20};
    sigemptyset(&b.stop_signals);
    sigaddset(&b.stop_signals, SIGINT);
    sigaddset(&b.stop_signals, SIGTERM);
    sigaddset(&b.stop_signals, SIGHUP);
    sigprocmask(SIG_BLOCK, &b.stop_signals, NULL);

    zc_comm *comm = NULL;
    zc_config *cfg = NULL;
    if (zc_comm_local_world(1, &comm) != ZC_OK || zc_config_create(&cfg) != ZC_OK ||
        zc_config_set_int(cfg, "zero_optimization.stage", 1) != ZC_OK)
        return die("setup");
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = params / NPARAMS;
    if (zc_engine_create(&b.eng, cfg, comm, &eo) != ZC_OK)
        return die("zc_engine_create");
    for (int i = 0; i < NPARAMS; i++) {
        char name[32];
        int64_t n = params / NPARAMS;
        snprintf(name, sizeof name, "w%d", i);
        if (!zc_param_add(b.eng, name, &n, 1, 0))
            return die("zc_param_add");
    }
    if (zc_engine_build(b.eng) != ZC_OK)
        return die("zc_engine_build");
    b.bytes = (uint64_t)(params / NPARAMS) * NPARAMS * 12;
    const uint64_t need = 2 * (uint64_t)(iters + 1) * (b.bytes + b.buf_bytes);
    struct statvfs vf;
    if (statvfs(dir, &vf) == 0 && (uint64_t)vf.f_bavail * vf.f_frsize < need) {
        fprintf(stderr, "bench_ckpt: %s has %llu bytes free; %d iterations keep %llu bytes of "
                "files until the end of a run\n", dir,
                (unsigned long long)((uint64_t)vf.f_bavail * vf.f_frsize), iters + 1,
                (unsigned long long)need);
        return 1;
    }
    if (posix_memalign(&b.buf, 1 << 21, b.buf_bytes) != 0) {
        fprintf(stderr, "bench_ckpt: out of memory for the store's buffer\n");
        return 1;
    }
    memset(b.buf, 0x5a, b.buf_bytes);
    double ratios[3][MAX_RUNS];
    int rc = 0;
    for (int run = 0; run < runs && !rc; run++) {
        double r[3] = {0, 0, 0};
        rc = one_run(&b, run, r);
        ratios[0][run] = r[0];
        ratios[1][run] = r[1];
        ratios[2][run] = r[2];
        if (!rc && run + 1 < runs)
            sleep(PAUSE_S);
        if (!rc && stop_pending(&b))
            rc = 1;
    }
    free(b.buf);
    zc_engine_destroy(b.eng);
    zc_config_destroy(cfg);
    zc_comm_destroy(comm);
    sigprocmask(SIG_UNBLOCK, &b.stop_signals, NULL); /* a pending one ends the process here */
    if (rc)
        return rc;
    (void)getloadavg(load_end, 3);
    /* The third: the save against the store's bare write (its open left
     * out), for comparison with figures taken before the open was counted. */
    static const char *const run_ops[3] = {"save", "load", "save_to_bare_write"};
    for (int k = 0; k < 3; k++) {
        printf("{\"bench\":\"ckpt_runs\",\"op\":\"%s\",\"bytes\":%" PRIu64 ",\"runs\":%d,"
               "\"iters\":%d,\"ratios\":[", run_ops[k], b.bytes, runs, iters);
        for (int run = 0; run < runs; run++)
            printf("%s%.3f", run ? "," : "", ratios[k][run]);
        const summary s = summarize_values(ratios[k], runs);
        printf("],\"ratio_min\":%.3f,\"ratio_median\":%.3f,\"ratio_max\":%.3f,"
               "\"loadavg_start\":[%.2f,%.2f,%.2f],\"loadavg_end\":[%.2f,%.2f,%.2f]}\n",
               s.min, s.median, s.max, load_start[0], load_start[1], load_start[2],
               load_end[0], load_end[1], load_end[2]);
    }
    return 0;
}
