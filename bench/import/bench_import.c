/* bench_import: zc_load_safetensors against the sequential read of the same
 * file, in the same run.
 *
 *   bench_import --dir DIR [--size 2G] [--dtype fp32|bf16|fp16] [--world W]
 *                [--stage S] [--runs R] [--ring 32M] [--drop-caches]
 *
 * Writes DIR/zc-bench-import.XXXXXX/model.safetensors: `size` bytes of
 * tensors of 32 Mi random finite values of the dtype (each [8192, 4096],
 * the last one shorter), fsync'd. W rank threads build engines of the same
 * parameters (bf16 working copy, stage S, no offload, host device) once.
 * Then R runs, each timing, in alternating order:
 *   - seq_read: the whole file read once, sequentially, with O_DIRECT
 *     through the NVMe store's io_uring engine (src/offload) in 4 MiB reads,
 *     28 MiB in flight - the ceiling: the disk's own speed for this file;
 *   - import: zc_load_safetensors on every rank (the ranks start together,
 *     after an all-reduce; the time is the slowest rank's), which reads the
 *     same bytes, spread over the ranks, and converts them into the
 *     engines' fp32 masters and bf16 working copies.
 * Both read cold: O_DIRECT bypasses the page cache; with --drop-caches
 * (root) the kernel's caches are also dropped before each side.
 *
 * Prints one JSON line per run ("bench":"import_run": both sides' seconds
 * and GB/s and their ratio, seq_read_s / import_s: 1 is the disk's speed),
 * then one summary ("bench":"import": the ratios, their min, median and
 * max, the ring's bytes, whether O_DIRECT was used, and the load average at
 * the start and the end). The file and its directory are removed at the
 * end, also on SIGINT, SIGTERM and SIGHUP.
 *
 *   bench_import --file FILE [--runs R] [--drop-caches]
 *
 * times only the sequential read of an existing file (the ceiling of an
 * import measured elsewhere, as for scripts/big_gpt.sh --init-from): one
 * JSON line per run ("bench":"seq_read") and none of the above. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/dtype.h"
#include "cliarg.h"
#include "offload/offload.h"
#include "zeroc/zeroc.h"

#define TENSOR_ROWS 8192
#define TENSOR_COLS 4096
#define MAX_WORLD 16
#define MAX_RUNS 64

static char g_dir[4096], g_file[4200];

static void cleanup(void)
{
    if (g_file[0])
        unlink(g_file);
    if (g_dir[0])
        rmdir(g_dir);
}

static void on_signal(int sig)
{
    cleanup();
    signal(sig, SIG_DFL);
    raise(sig);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_import: %s: %s\n", what, zc_last_error());
    cleanup();
    exit(1);
}

typedef struct model {
    zc_dtype dt;
    int ntensors;
    int64_t rows[4096];
    char names[4096][16];
} model;

/* Random finite values of the dtype, |x| < 2: xorshift bits with the
 * exponent held below the maximum. */
static void fill(void *buf, zc_dtype dt, size_t n, uint64_t *s)
{
    for (size_t i = 0; i < n; i++) {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        const float x = (float)((double)(*s >> 11) * 0x1p-53 * 2.0 - 1.0);
        zc__store_f32(buf, dt, i, x);
    }
}

static void write_model(const char *path, uint64_t size, zc_dtype dt, model *m)
{
    const size_t esz = zc_dtype_size(dt), per = (size_t)TENSOR_ROWS * TENSOR_COLS * esz;
    m->dt = dt;
    m->ntensors = 0;
    char *head = malloc(1 << 20);
    size_t at = (size_t)sprintf(head, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    while (off < size && m->ntensors < 4096) {
        const uint64_t left = size - off;
        int64_t rows = left >= per ? TENSOR_ROWS : (int64_t)(left / (TENSOR_COLS * esz));
        if (rows < 1)
            break;
        const int i = m->ntensors++;
        m->rows[i] = rows;
        snprintf(m->names[i], sizeof m->names[i], "t%04d", i);
        const uint64_t bytes = (uint64_t)rows * TENSOR_COLS * esz;
        at += (size_t)sprintf(head + at, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%" PRId64 ",%d],"
                              "\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", m->names[i],
                              dt == ZC_DTYPE_F32 ? "F32" : dt == ZC_DTYPE_BF16 ? "BF16" : "F16",
                              rows, TENSOR_COLS, off, off + bytes);
        off += bytes;
    }
    head[at++] = '}';
    while ((at + 8) % 4096) /* the data starts on a block, as large writers align it */
        head[at++] = ' ';
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "bench_import: %s: %s\n", path, strerror(errno));
        cleanup();
        exit(1);
    }
    uint64_t len = at;
    size_t block = (size_t)64 << 20;
    char *buf = malloc(block);
    uint64_t s = 0x9e3779b97f4a7c15ull, pos = 8 + len;
    bool ok = buf && pwrite(fd, &len, 8, 0) == 8 && pwrite(fd, head, at, 8) == (ssize_t)at;
    for (uint64_t done = 0; ok && done < off;) {
        const size_t n = off - done < block ? (size_t)(off - done) : block;
        fill(buf, dt, n / esz, &s);
        ok = pwrite(fd, buf, n, (off_t)pos) == (ssize_t)n;
        pos += n;
        done += n;
    }
    ok = ok && fsync(fd) == 0;
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    free(buf);
    free(head);
    if (!ok) {
        fprintf(stderr, "bench_import: writing %s: %s\n", path, strerror(errno));
        cleanup();
        exit(1);
    }
}

static void drop_caches(bool on)
{
    if (!on)
        return;
    sync();
    int fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, "3", 1) != 1) {
        fprintf(stderr, "bench_import: --drop-caches: /proc/sys/vm/drop_caches: %s (root "
                "only)\n", strerror(errno));
        cleanup();
        exit(2);
    }
    close(fd);
}

/* The ceiling: the file's whole blocks read in order, 4 MiB at a time, seven
 * reads in flight, into a ring of eight buffers. */
static double seq_read(const char *path, uint64_t bytes, bool *direct)
{
    enum { SLOTS = 8 };
    const size_t slot = (size_t)4 << 20;
    const uint64_t aligned = bytes / 4096 * 4096;
    zc_nvme_opts o = ZC_NVME_OPTS_INIT;
    o.file = path;
    o.flags = ZC_NVME_READ_ONLY;
    o.capacity = aligned;
    o.alignment = 4096;
    o.block_size = (size_t)1 << 20;
    o.queue_depth = 32;
    zc_nvme_store *st;
    char *ring = aligned_alloc(1 << 21, SLOTS * slot);
    if (!ring || zc__nvme_open(&st, &o) != ZC_OK)
        die("seq_read: open");
    zc_nvme_stats ns;
    zc__nvme_stats_get(st, &ns);
    *direct = ns.direct;
    zc_nvme_ticket t[SLOTS] = {0};
    const double t0 = now_s();
    uint64_t sub = 0, done = 0;
    int head = 0, live = 0;
    while (done < aligned) {
        while (live < SLOTS && sub < aligned) {
            const size_t n = aligned - sub < slot ? (size_t)(aligned - sub) : slot;
            if (zc__nvme_read(st, sub, ring + (size_t)((head + live) % SLOTS) * slot, n,
                              &t[(head + live) % SLOTS]) != ZC_OK)
                die("seq_read: read");
            sub += n;
            live++;
        }
        if (zc__nvme_wait(st, t[head], NULL) != ZC_OK)
            die("seq_read: wait");
        done += aligned - done < slot ? aligned - done : slot;
        head = (head + 1) % SLOTS;
        live--;
    }
    const double dt = now_s() - t0;
    zc__nvme_close(st, ZC_NVME_CLOSE_WAIT);
    free(ring);
    return dt;
}

typedef struct shared {
    const model *m;
    const char *path;
    int world, stage, runs;
    size_t ring;
    zc_comm *comms[MAX_WORLD];
    pthread_barrier_t bar;
    double t_start[MAX_RUNS], t_end[MAX_WORLD][MAX_RUNS];
    bool direct;
    int64_t bytes_read[MAX_WORLD];
} shared;

typedef struct rank_arg {
    shared *sh;
    int rank;
} rank_arg;

static void *rank_main(void *arg)
{
    rank_arg *ra = arg;
    shared *sh = ra->sh;
    zc_config *cfg;
    zc_engine *e;
    if (zc_config_create(&cfg) != ZC_OK ||
        zc_config_set_int(cfg, "zero_optimization.stage", sh->stage) != ZC_OK ||
        zc_config_set_bool(cfg, "bf16.enabled", true) != ZC_OK)
        die("config");
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    if (zc_engine_create(&e, cfg, sh->comms[ra->rank], &eo) != ZC_OK)
        die("zc_engine_create");
    for (int i = 0; i < sh->m->ntensors; i++) {
        const int64_t shape[2] = {sh->m->rows[i], TENSOR_COLS};
        if (!zc_param_add(e, sh->m->names[i], shape, 2, 0))
            die("zc_param_add");
    }
    if (zc_engine_build(e) != ZC_OK)
        die("zc_engine_build");
    zc_load_options lo = ZC_LOAD_OPTIONS_INIT;
    lo.ring_bytes = sh->ring;
    for (int r = 0; r < sh->runs; r++) {
        /* The main thread times the sequential read between these. */
        pthread_barrier_wait(&sh->bar);
        pthread_barrier_wait(&sh->bar);
        double one = 1.0;
        if (zc_all_reduce_f64(e, &one, 1, ZC_REDUCE_SUM) != ZC_OK)
            die("zc_all_reduce_f64");
        if (ra->rank == 0)
            sh->t_start[r] = now_s();
        zc_load_stats st = {.size = sizeof st};
        if (zc_load_safetensors(e, sh->path, &lo, &st) != ZC_OK)
            die("zc_load_safetensors");
        sh->t_end[ra->rank][r] = now_s();
        sh->bytes_read[ra->rank] = st.bytes_read;
        if (ra->rank == 0)
            sh->direct = st.direct;
        pthread_barrier_wait(&sh->bar);
    }
    zc_engine_destroy(e);
    zc_config_destroy(cfg);
    return NULL;
}

static int cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *file = NULL;
    uint64_t size = (uint64_t)2 << 30, ring = (uint64_t)32 << 20;
    int world = 1, stage = 1, runs = 3;
    zc_dtype dt = ZC_DTYPE_F32;
    bool drop = false;
    char err[ZC_ARG_ERRLEN];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(a, "--drop-caches")) {
            drop = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "bench_import: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--dir"))
            dir = v;
        else if (!strcmp(a, "--file"))
            file = v;
        else if (!strcmp(a, "--size"))
            ok = zc__arg_u64(a, v, (uint64_t)64 << 20, (uint64_t)1 << 40, ZC_ARG_SUFFIX, &size,
                             err, sizeof err);
        else if (!strcmp(a, "--ring"))
            ok = zc__arg_u64(a, v, (uint64_t)4 << 20, (uint64_t)1 << 30, ZC_ARG_SUFFIX, &ring,
                             err, sizeof err);
        else if (!strcmp(a, "--world"))
            ok = zc__arg_int(a, v, 1, MAX_WORLD, &world, err, sizeof err);
        else if (!strcmp(a, "--stage"))
            ok = zc__arg_int(a, v, 0, 3, &stage, err, sizeof err);
        else if (!strcmp(a, "--runs"))
            ok = zc__arg_int(a, v, 1, MAX_RUNS, &runs, err, sizeof err);
        else if (!strcmp(a, "--dtype")) {
            dt = !strcmp(v, "fp32") ? ZC_DTYPE_F32 : !strcmp(v, "bf16") ? ZC_DTYPE_BF16
               : !strcmp(v, "fp16") ? ZC_DTYPE_F16 : ZC_DTYPE__COUNT;
            if (dt == ZC_DTYPE__COUNT) {
                fprintf(stderr, "bench_import: --dtype '%s': fp32, bf16 or fp16\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: bench_import --dir DIR [--size 2G] [--dtype fp32|bf16|fp16]"
                    " [--world W] [--stage S] [--runs R] [--ring 32M] [--drop-caches]\n");
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "bench_import: %s\n", err);
            return 2;
        }
    }
    if (file) {
        struct stat fst;
        if (stat(file, &fst) != 0 || !S_ISREG(fst.st_mode)) {
            fprintf(stderr, "bench_import: --file %s: not a regular file\n", file);
            return 2;
        }
        double l0[3] = {0};
        (void)getloadavg(l0, 3);
        for (int r = 0; r < runs; r++) {
            bool direct = false;
            drop_caches(drop);
            const double s = seq_read(file, (uint64_t)fst.st_size, &direct);
            printf("{\"bench\":\"seq_read\",\"run\":%d,\"file_bytes\":%lld,\"seconds\":%.4f,"
                   "\"gbps\":%.3f,\"direct\":%s,\"drop_caches\":%s,"
                   "\"loadavg\":[%.2f,%.2f,%.2f]}\n", r, (long long)fst.st_size, s,
                   (double)fst.st_size / s / 1e9, direct ? "true" : "false",
                   drop ? "true" : "false", l0[0], l0[1], l0[2]);
            fflush(stdout);
        }
        return 0;
    }
    if (!dir) {
        fprintf(stderr, "bench_import: --dir DIR is needed\n");
        return 2;
    }
    if (ring % ((uint64_t)1 << 20)) {
        fprintf(stderr, "bench_import: --ring must be a multiple of 1 MiB\n");
        return 2;
    }
    snprintf(g_dir, sizeof g_dir, "%s/zc-bench-import.XXXXXX", dir);
    if (!mkdtemp(g_dir)) {
        fprintf(stderr, "bench_import: %s: %s\n", g_dir, strerror(errno));
        g_dir[0] = '\0';
        return 1;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    snprintf(g_file, sizeof g_file, "%s/model.safetensors", g_dir);
    double load0[3] = {0}, load1[3] = {0};
    (void)getloadavg(load0, 3);
    static model m;
    write_model(g_file, size, dt, &m);
    struct stat fs;
    stat(g_file, &fs);
    const uint64_t bytes = (uint64_t)fs.st_size;

    shared *sh = calloc(1, sizeof *sh);
    *sh = (shared){.m = &m, .path = g_file, .world = world, .stage = stage, .runs = runs,
                   .ring = (size_t)ring};
    if (zc_comm_local_world(world, sh->comms) != ZC_OK)
        die("zc_comm_local_world");
    pthread_barrier_init(&sh->bar, NULL, (unsigned)world + 1);
    pthread_t th[MAX_WORLD];
    rank_arg ra[MAX_WORLD];
    for (int r = 0; r < world; r++) {
        ra[r] = (rank_arg){sh, r};
        pthread_create(&th[r], NULL, rank_main, &ra[r]);
    }
    double ratios[MAX_RUNS];
    bool direct = false;
    for (int r = 0; r < runs; r++) {
        /* Alternating which side goes first, as bench_ckpt does. */
        double seq = 0;
        if (r % 2 == 0) {
            drop_caches(drop);
            seq = seq_read(g_file, bytes, &direct);
        }
        drop_caches(drop);
        pthread_barrier_wait(&sh->bar);
        pthread_barrier_wait(&sh->bar); /* the import runs */
        pthread_barrier_wait(&sh->bar);
        double imp = 0;
        for (int k = 0; k < world; k++)
            imp = sh->t_end[k][r] - sh->t_start[r] > imp ? sh->t_end[k][r] - sh->t_start[r] : imp;
        if (r % 2 == 1) {
            drop_caches(drop);
            seq = seq_read(g_file, bytes, &direct);
        }
        int64_t read_all = 0;
        for (int k = 0; k < world; k++)
            read_all += sh->bytes_read[k];
        ratios[r] = seq / imp;
        printf("{\"bench\":\"import_run\",\"run\":%d,\"file_bytes\":%" PRIu64 ",\"seq_read_s\":%.4f,"
               "\"seq_read_gbps\":%.3f,\"import_s\":%.4f,\"import_gbps\":%.3f,"
               "\"bytes_read_all_ranks\":%" PRId64 ",\"ratio\":%.3f}\n", r, bytes, seq,
               (double)bytes / seq / 1e9, imp, (double)bytes / imp / 1e9, read_all, ratios[r]);
        fflush(stdout);
    }
    for (int r = 0; r < world; r++)
        pthread_join(th[r], NULL);
    (void)getloadavg(load1, 3);
    double sorted[MAX_RUNS];
    memcpy(sorted, ratios, sizeof(double) * (size_t)runs);
    qsort(sorted, (size_t)runs, sizeof(double), cmp);
    printf("{\"bench\":\"import\",\"file_bytes\":%" PRIu64 ",\"dtype\":\"%s\",\"world\":%d,"
           "\"stage\":%d,\"ring_bytes\":%" PRIu64 ",\"direct\":%s,\"seq_direct\":%s,"
           "\"drop_caches\":%s,\"ceiling\":\"seq_read\",\"ratios\":[", bytes,
           zc_dtype_name(dt), world, stage, ring, sh->direct ? "true" : "false",
           direct ? "true" : "false", drop ? "true" : "false");
    for (int r = 0; r < runs; r++)
        printf("%s%.3f", r ? "," : "", ratios[r]);
    printf("],\"ratio_min\":%.3f,\"ratio_median\":%.3f,\"ratio_max\":%.3f,"
           "\"loadavg_start\":[%.2f,%.2f,%.2f],\"loadavg_end\":[%.2f,%.2f,%.2f]}\n", sorted[0],
           sorted[runs / 2], sorted[runs - 1], load0[0], load0[1], load0[2], load1[0], load1[1],
           load1[2]);
    for (int r = 0; r < world; r++)
        zc_comm_destroy(sh->comms[r]);
    free(sh);
    cleanup();
    return 0;
}
