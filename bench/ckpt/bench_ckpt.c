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
 * operation with the best of K iterations: bytes, seconds, GB/s, the store's
 * GB/s and the ratio. Both sides read cold: the save and the store write
 * with O_DIRECT, so neither file is in the page cache when it is read, and
 * both read with O_DIRECT into huge-page buffers. */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* The store writing then reading `bytes` through one aligned buffer of 64 MiB. */
static int store_ceiling(const char *dir, uint64_t bytes, double *wr_s, double *rd_s)
{
    const size_t buf_bytes = (size_t)64 << 20;
    void *buf = NULL;
    if (posix_memalign(&buf, 1 << 21, buf_bytes) != 0)
        return 1;
    memset(buf, 0x5a, buf_bytes);
    const char *dirs[1] = {dir};
    zc_nvme_opts o = ZC_NVME_OPTS_INIT;
    o.dirs = dirs;
    o.ndirs = 1;
    o.purpose = "bench_ckpt";
    o.capacity = (bytes + buf_bytes - 1) / buf_bytes * buf_bytes;
    zc_nvme_store *st = NULL;
    if (zc__nvme_open(&st, &o) != ZC_OK) {
        free(buf);
        return die("zc__nvme_open");
    }
    zc_mem_region reg = {buf, buf_bytes};
    (void)zc__nvme_register_buffers(st, &reg, 1);
    int rc = 0;
    for (int pass = 0; pass < 2 && !rc; pass++) {
        double t0 = now();
        for (uint64_t at = 0; at < o.capacity && !rc; at += buf_bytes) {
            zc_nvme_ticket t;
            zc_status s = pass ? zc__nvme_read(st, at, buf, buf_bytes, &t)
                               : zc__nvme_write(st, at, buf, buf_bytes, &t);
            if (s != ZC_OK || zc__nvme_wait(st, t, NULL) != ZC_OK)
                rc = die(pass ? "store read" : "store write");
        }
        if (!pass) {
            int fd = open(zc__nvme_path(st, 0), O_RDONLY);
            if (fd >= 0) {
                fsync(fd);
                close(fd);
            }
        }
        *(pass ? rd_s : wr_s) = now() - t0;
    }
    zc__nvme_close(st, ZC_NVME_CLOSE_WAIT);
    free(buf);
    return rc;
}

int main(int argc, char **argv)
{
    const char *dir = NULL;
    int64_t params = (int64_t)32 << 20;
    int iters = 3;
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
    double save_s = 1e30, load_s = 1e30, wr_s = 1e30, rd_s = 1e30;
    for (int it = 0; it < iters; it++) {
        char tag[32];
        snprintf(tag, sizeof tag, "it%d", it);
        double t0 = now();
        if (zc_checkpoint_save(eng, ckdir, tag) != ZC_OK)
            return die("zc_checkpoint_save");
        double t1 = now();
        if (zc_checkpoint_load(eng, ckdir, tag) != ZC_OK)
            return die("zc_checkpoint_load");
        double t2 = now();
        save_s = t1 - t0 < save_s ? t1 - t0 : save_s;
        load_s = t2 - t1 < load_s ? t2 - t1 : load_s;
        double w = 0, r = 0;
        if (store_ceiling(dir, bytes, &w, &r))
            return 1;
        wr_s = w < wr_s ? w : wr_s;
        rd_s = r < rd_s ? r : rd_s;
        /* Only this run's files: the tag directories it saved. */
        char p[4200];
        static const char *const names[] = {"manifest.json", "rank_00000.bin"};
        for (int k = 0; k < 2; k++) {
            snprintf(p, sizeof p, "%s/%s/%s", ckdir, tag, names[k]);
            unlink(p);
        }
        snprintf(p, sizeof p, "%s/%s", ckdir, tag);
        rmdir(p);
    }
    char p[4200];
    snprintf(p, sizeof p, "%s/latest", ckdir);
    unlink(p);
    rmdir(ckdir);
    zc_engine_destroy(eng);
    zc_config_destroy(cfg);
    zc_comm_destroy(comm);
    const double g = 1e9;
    printf("{\"bench\":\"ckpt\",\"op\":\"save\",\"bytes\":%" PRIu64 ",\"seconds\":%.4f,"
           "\"gb_s\":%.3f,\"nvme_store_gb_s\":%.3f,\"ratio\":%.3f}\n",
           bytes, save_s, bytes / save_s / g, bytes / wr_s / g, wr_s / save_s);
    printf("{\"bench\":\"ckpt\",\"op\":\"load\",\"bytes\":%" PRIu64 ",\"seconds\":%.4f,"
           "\"gb_s\":%.3f,\"nvme_store_gb_s\":%.3f,\"ratio\":%.3f}\n",
           bytes, load_s, bytes / load_s / g, bytes / rd_s / g, rd_s / load_s);
    return 0;
}
