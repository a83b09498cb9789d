/* bench_ckpt: checkpoint save and load throughput next to the NVMe store
 * (src/offload/nvme_store.c: O_DIRECT, io_uring) writing and reading the same
 * number of bytes in the same directory, in the same run.
 *
 *   bench_ckpt --dir DIR [--params N] [--iters K]
 *
 * One rank, stage 1, fp32; the optimizer state (master, exp_avg, exp_avg_sq:
 * 12 bytes per parameter) is what a checkpoint writes. save = zc_checkpoint_save
 * (O_DIRECT writes, checksums, fsync, renames); load = zc_checkpoint_load
 * (checks, then one O_DIRECT read of every entry into place, hashed on the
 * way, and the working parameters rebuilt). The store's write is followed by
 * an fsync of its file, as the save's files are. Prints one JSON line per
 * iteration ("bench":"ckpt_iter": the save's, the load's and the store's
 * seconds), then one per operation: bytes, the median seconds of K
 * iterations (after one warm-up iteration, not counted), their min and max,
 * GB/s at the median, the same for the store, and the ratio: the median over
 * the iterations of store seconds / checkpoint seconds, each iteration's two
 * sides timed back to back (the disk's speed drifts between iterations, by
 * up to 2x on the virtual disk measured; a pair shares most of the drift).
 * Both sides read cold: the save and the store write with O_DIRECT, so
 * neither file is in the page cache when it is read, and both read with
 * O_DIRECT into huge-page buffers.
 *
 * Both sides write under the same conditions, which matter on a thin
 * virtual disk mounted with `discard` (bench/RESULTS.md, "Checkpoints"):
 * - Each store write goes to a new directory of its own beside the tag
 *   directories, as each save's does: the filesystem places a new
 *   directory's files in other block groups than an old one's, and writing
 *   blocks the host has not backed yet was twice as slow as rewriting ones it
 *   has (0.14 s against 0.07 s for 400 MB).
 * - No file is deleted before every iteration has run: a deleted file's
 *   blocks are still being trimmed for a while, and what is timed next writes
 *   more slowly (a save timed right after the previous iteration's cleanup
 *   took 0.20 s instead of 0.14 s).
 * - The iterations alternate which side goes first, and the first, whose
 *   files land where the previous run's were just deleted, is not counted.
 * DIR needs 2 x (K + 1) x the bytes free. SIGINT, SIGTERM and SIGHUP are held
 * until the iteration under way ends, then the files are removed and the
 * signal is taken. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "cliarg.h"
#include "offload/offload.h"
#include "zeroc/zeroc.h"

#define NPARAMS 8

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int die(const char *what)
{
    fprintf(stderr, "bench_ckpt: %s: %s\n", what, zc_last_error());
    return 1;
}

/* The store writing (then fsyncing) and reading `bytes` through one aligned
 * buffer of 64 MiB, in a file of its own in the new directory `dir`; the file
 * stays until *st is closed. */
static int store_ceiling(const char *dir, uint64_t bytes, void *buf, size_t buf_bytes,
                         zc_nvme_store **st, double *wr_s, double *rd_s)
{
    if (mkdir(dir, 0700) != 0) {
        fprintf(stderr, "bench_ckpt: mkdir %s: %s\n", dir, strerror(errno));
        return 1;
    }
    const char *dirs[1] = {dir};
    zc_nvme_opts o = ZC_NVME_OPTS_INIT;
    o.dirs = dirs;
    o.ndirs = 1;
    o.purpose = "bench_ckpt";
    o.capacity = (bytes + buf_bytes - 1) / buf_bytes * buf_bytes;
    if (zc__nvme_open(st, &o) != ZC_OK)
        return die("zc__nvme_open");
    zc_mem_region reg = {buf, buf_bytes};
    (void)zc__nvme_register_buffers(*st, &reg, 1);
    for (int pass = 0; pass < 2; pass++) {
        double t0 = now();
        for (uint64_t at = 0; at < o.capacity; at += buf_bytes) {
            zc_nvme_ticket t;
            zc_status s = pass ? zc__nvme_read(*st, at, buf, buf_bytes, &t)
                               : zc__nvme_write(*st, at, buf, buf_bytes, &t);
            if (s != ZC_OK || zc__nvme_wait(*st, t, NULL) != ZC_OK)
                return die(pass ? "store read" : "store write");
        }
        if (!pass && zc__nvme_fsync(*st) != ZC_OK)
            return die("store fsync");
        *(pass ? rd_s : wr_s) = now() - t0;
    }
    return 0;
}

/* The checkpoint saved, then loaded, under `tag`. */
static int checkpoint_pass(zc_engine *eng, const char *ckdir, const char *tag, double *save_s,
                           double *load_s)
{
    double t0 = now();
    if (zc_checkpoint_save(eng, ckdir, tag) != ZC_OK)
        return die("zc_checkpoint_save");
    double t1 = now();
    if (zc_checkpoint_load(eng, ckdir, tag) != ZC_OK)
        return die("zc_checkpoint_load");
    *save_s = t1 - t0;
    *load_s = now() - t1;
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

/* Column k of the timed iterations (rows 1 .. runs-1 of times[runs][6]). */
static summary summarize(const double *times, int runs, int k)
{
    double v[101];
    const int n = runs - 1;
    for (int i = 0; i < n; i++)
        v[i] = times[6 * (i + 1) + k];
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    const double median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    return (summary){median, v[0], v[n - 1]};
}

int main(int argc, char **argv)
{
    const char *dir = NULL;
    int64_t params = (int64_t)32 << 20;
    int iters = 5;
    char err[ZC_ARG_ERRLEN];
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) {
            fprintf(stderr, "usage: bench_ckpt --dir DIR [--params N] [--iters K]\n");
            return 2;
        }
        const char *a = argv[i], *v = argv[++i];
        bool ok = true;
        if (!strcmp(a, "--dir"))
            dir = v;
        else if (!strcmp(a, "--params"))
            ok = zc__arg_i64(a, v, 4096, (int64_t)1 << 34, 0, &params, err, sizeof err);
        else if (!strcmp(a, "--iters"))
            ok = zc__arg_int(a, v, 1, 100, &iters, err, sizeof err);
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
    char ckdir[4096];
    snprintf(ckdir, sizeof ckdir, "%s/bench_ckpt.%d", dir, (int)getpid());

    /* Held from here, before any thread starts, so every thread inherits it. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGHUP);
    sigprocmask(SIG_BLOCK, &stop_signals, NULL);

    zc_comm *comm = NULL;
    zc_config *cfg = NULL;
    zc_engine *eng = NULL;
    if (zc_comm_local_world(1, &comm) != ZC_OK || zc_config_create(&cfg) != ZC_OK ||
        zc_config_set_int(cfg, "zero_optimization.stage", 1) != ZC_OK)
        return die("setup");
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = params / NPARAMS;
    if (zc_engine_create(&eng, cfg, comm, &eo) != ZC_OK)
        return die("zc_engine_create");
    for (int i = 0; i < NPARAMS; i++) {
        char name[32];
        int64_t n = params / NPARAMS;
        snprintf(name, sizeof name, "w%d", i);
        if (!zc_param_add(eng, name, &n, 1, 0))
            return die("zc_param_add");
    }
    if (zc_engine_build(eng) != ZC_OK)
        return die("zc_engine_build");
    const uint64_t bytes = (uint64_t)(params / NPARAMS) * NPARAMS * 12;
    const size_t buf_bytes = (size_t)64 << 20;
    const int runs = iters + 1; /* the first is the warm-up */
    const uint64_t need = 2 * (uint64_t)runs * (bytes + buf_bytes);
    struct statvfs vf;
    if (statvfs(dir, &vf) == 0 && (uint64_t)vf.f_bavail * vf.f_frsize < need) {
        fprintf(stderr, "bench_ckpt: %s has %llu bytes free; %d iterations keep %llu bytes of "
                "files until the end\n", dir,
                (unsigned long long)((uint64_t)vf.f_bavail * vf.f_frsize), runs,
                (unsigned long long)need);
        return 1;
    }
    void *buf = NULL;
    zc_nvme_store **stores = calloc((size_t)runs, sizeof *stores);
    /* Per iteration: save, load, store write, store read, write / save,
     * read / load. */
    double *times = calloc(6 * (size_t)runs, sizeof *times);
    if (!stores || !times || posix_memalign(&buf, 1 << 21, buf_bytes) != 0) {
        fprintf(stderr, "bench_ckpt: out of memory for the store's buffer\n");
        return 1;
    }
    memset(buf, 0x5a, buf_bytes);
    int rc = 0;
    char p[4200];
    for (int it = 0; it < runs && !rc; it++) {
        char tag[32];
        snprintf(tag, sizeof tag, "it%d", it);
        snprintf(p, sizeof p, "%s/store_it%d", ckdir, it);
        double *t = &times[6 * it];
        for (int side = 0; side < 2 && !rc; side++)
            rc = (side ^ (it & 1)) ? store_ceiling(p, bytes, buf, buf_bytes, &stores[it], &t[2],
                                                   &t[3])
                                   : checkpoint_pass(eng, ckdir, tag, &t[0], &t[1]);
        if (rc)
            break;
        t[4] = t[2] / t[0];
        t[5] = t[3] / t[1];
        printf("{\"bench\":\"ckpt_iter\",\"iter\":%d,\"warmup\":%s,\"save_s\":%.4f,"
               "\"store_write_s\":%.4f,\"load_s\":%.4f,\"store_read_s\":%.4f}\n",
               it, it ? "false" : "true", t[0], t[2], t[1], t[3]);
        fflush(stdout);
        sigset_t pending;
        sigpending(&pending);
        for (int sig = 1; sig < NSIG && !rc; sig++)
            if (sigismember(&stop_signals, sig) && sigismember(&pending, sig))
                rc = 1;
    }
    /* Only this run's files: the stores' and the tag directories it saved. */
    for (int it = 0; it < runs; it++) {
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
    free(stores);
    free(buf);
    snprintf(p, sizeof p, "%s/latest", ckdir);
    unlink(p);
    rmdir(ckdir);
    zc_engine_destroy(eng);
    zc_config_destroy(cfg);
    zc_comm_destroy(comm);
    sigprocmask(SIG_UNBLOCK, &stop_signals, NULL); /* a pending one ends the process here */
    if (rc) {
        free(times);
        return rc;
    }
    summary st[6];
    for (int k = 0; k < 6; k++)
        st[k] = summarize(times, runs, k);
    free(times);
    static const char *const ops[2] = {"save", "load"};
    for (int k = 0; k < 2; k++) {
        const summary *c = &st[k], *io = &st[k + 2], *ratio = &st[k + 4];
        printf("{\"bench\":\"ckpt\",\"op\":\"%s\",\"bytes\":%" PRIu64 ",\"iters\":%d,"
               "\"seconds\":%.4f,\"min_s\":%.4f,\"max_s\":%.4f,\"gb_s\":%.3f,"
               "\"nvme_store_seconds\":%.4f,\"nvme_store_min_s\":%.4f,\"nvme_store_max_s\":%.4f,"
               "\"nvme_store_gb_s\":%.3f,\"ratio\":%.3f,\"ratio_min\":%.3f,\"ratio_max\":%.3f}\n",
               ops[k], bytes, iters, c->median, c->min, c->max, bytes / c->median / 1e9,
               io->median, io->min, io->max, bytes / io->median / 1e9, ratio->median, ratio->min,
               ratio->max);
    }
    return 0;
}
