/* bench_nvme: sequential read and write through the NVMe store, next to fio.
 *
 * For each (block size, queue depth) the same file is written and read by the
 * store (O_DIRECT, io_uring, registered buffers from the pinned pool), by fio
 * with ioengine=io_uring and by fio with ioengine=libaio (--direct=1, same
 * block size and depth). Runs alternate ours / fio io_uring / fio libaio in
 * each repetition (the first of the three rotating) so drift of the drive
 * (SLC cache, thermal, the host's other tenants) hits all three alike; the
 * median of the repetitions is reported, each repetition on stderr.
 * One JSON object per case on stdout:
 *   {"op","block","depth","gbps","fio_io_uring_gbps","fio_libaio_gbps",
 *    "ratio_io_uring","ratio_libaio",
 *    "ratio_io_uring_paired","ratio_libaio_paired","reps",
 *    "req_kib","fio_io_uring_req_kib","fio_libaio_req_kib","fio_buffers"}
 * ratio_* are ratios of the medians; ratio_*_paired are medians of the
 * per-repetition ratios (ours against the fio run of the same repetition, a
 * few seconds apart), which a burst of the disk landing on one run moves less.
 * req_kib is the median average size of the requests the device saw during
 * each run (from /sys/dev/block/M:m/stat, so the device's other traffic is
 * counted too): it shows when the block layer split requests or merged them.
 * GB/s are decimal (1e9 bytes per second), as fio's bw_bytes. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/regfile.h"
#include "bench/nvme/bench_nvme.h"
#include "cliarg.h"
#include "offload/offload.h"

extern char **environ;

#define GiB (UINT64_C(1) << 30)
#define MAXLIST 16
/* Largest --size: 1 PiB. Anything larger is a typo, not a disk. */
#define MAX_SIZE (UINT64_C(1) << 50)
/* The store's file name in its directory (offload/nvme_store.c names it
 * zeroc-r<rank>-<purpose>.swp; rank 0, purpose "bench" below). */
#define STORE_FILE "zeroc-r0-bench.swp"
/* The bench's own directory under --dir: mkdtemp fills in the Xs. */
#define TMP_TEMPLATE "zeroc-bench-io.XXXXXX"

typedef struct cfg {
    const char *dir;      /* --dir: where the bench makes its own directory */
    char work[PATH_MAX];  /* that directory (mkdtemp), which holds the test file */
    uint64_t size;
    uint64_t blocks[MAXLIST];
    int nblocks;
    int depths[MAXLIST];
    int ndepths;
    bool do_read, do_write;
    int reps;
    bool fio;
    const char *fio_bin;
    bool keep;
    bool fio_huge;        /* fio's buffers on transparent huge pages too */
    unsigned flags;
    char devstat[128];    /* /sys/dev/block/M:m/stat of the directory's device, or "" */
} cfg;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s [options]\n"
            "  --dir DIR        where to make the bench's own directory (zeroc-bench-io.XXXXXX)\n"
            "                   for the test file; both are removed at exit, also on\n"
            "                   SIGINT/SIGTERM (default: current directory)\n"
            "  --size SIZE      file size, 1..2^50 with K/M/G/T suffixes (default: a quarter\n"
            "                   of the free space, 1-8 GiB)\n"
            "  --block LIST     block sizes, powers of two in 4K..64M (default 128K,1M,8M)\n"
            "  --depth LIST     queue depths, each 1..4096 (default 1,8,32,64)\n"
            "  --op LIST        read, write, read,write or write,read (default both)\n"
            "  --reps N         alternating repetitions per case, 1..100, median reported\n"
            "                   (default 3)\n"
            "  --no-fio         skip the fio ceiling (ratios are null)\n"
            "  --fio PATH       fio binary (default: fio in PATH)\n"
            "  --sqpoll         store uses an SQPOLL ring\n"
            "  --no-hugepage    store leaves its buffers on 4 KiB pages (ZC_NVME_NO_HUGEPAGE)\n"
            "  --fio-hugepage   fio's buffers on transparent huge pages too\n"
            "                   (GLIBC_TUNABLES=glibc.malloc.hugetlb=1)\n"
            "  --keep           keep the test file (its path is printed)\n",
            prog);
}

static int parse_args(int argc, char **argv, cfg *c)
{
    static const struct option lo[] = {
        {"dir", required_argument, 0, 'd'},   {"size", required_argument, 0, 's'},
        {"block", required_argument, 0, 'b'}, {"depth", required_argument, 0, 'q'},
        {"op", required_argument, 0, 'o'},    {"reps", required_argument, 0, 'r'},
        {"no-fio", no_argument, 0, 'n'},      {"fio", required_argument, 0, 'f'},
        {"sqpoll", no_argument, 0, 'p'},      {"keep", no_argument, 0, 'k'},
        {"no-hugepage", no_argument, 0, 'H'}, {"fio-hugepage", no_argument, 0, 'F'},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    memset(c, 0, sizeof *c);
    c->dir = ".";
    c->blocks[0] = 128 << 10, c->blocks[1] = 1 << 20, c->blocks[2] = 8 << 20;
    c->nblocks = 3;
    c->depths[0] = 1, c->depths[1] = 8, c->depths[2] = 32, c->depths[3] = 64;
    c->ndepths = 4;
    c->do_read = c->do_write = true;
    c->reps = 3;
    c->fio = true;
    c->fio_bin = "fio";
    optind = 1;
    opterr = 0; /* getopt's own messages do not name the range: ours below do */
    int o;
    char err[ZC_ARG_ERRLEN];
    uint64_t tmp[MAXLIST];
    int n;
    while ((o = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
        switch (o) {
        case 'd': c->dir = optarg; break;
        case 's':
            if (!zc__arg_u64("--size", optarg, 1, MAX_SIZE, ZC_ARG_SUFFIX, &c->size, err,
                             sizeof err)) {
                fprintf(stderr, "bench_nvme: %s\n", err);
                return 2;
            }
            break;
        case 'b':
            if (!zc__arg_u64_list("--block", optarg, 4096, UINT64_C(64) << 20, ZC_ARG_SUFFIX,
                                  c->blocks, MAXLIST, &c->nblocks, err, sizeof err)) {
                fprintf(stderr, "bench_nvme: %s\n", err);
                return 2;
            }
            break;
        case 'q':
            if (!zc__arg_u64_list("--depth", optarg, 1, 4096, 0, tmp, MAXLIST, &n, err,
                                  sizeof err)) {
                fprintf(stderr, "bench_nvme: %s\n", err);
                return 2;
            }
            for (int i = 0; i < n; i++)
                c->depths[i] = (int)tmp[i];
            c->ndepths = n;
            break;
        case 'o':
            if (!strcmp(optarg, "read"))
                c->do_read = true, c->do_write = false;
            else if (!strcmp(optarg, "write"))
                c->do_read = false, c->do_write = true;
            else if (!strcmp(optarg, "read,write") || !strcmp(optarg, "write,read"))
                c->do_read = c->do_write = true;
            else {
                fprintf(stderr, "bench_nvme: --op '%.200s': use read, write or read,write\n",
                        optarg);
                return 2;
            }
            break;
        case 'r':
            if (!zc__arg_int("--reps", optarg, 1, 100, &c->reps, err, sizeof err)) {
                fprintf(stderr, "bench_nvme: %s\n", err);
                return 2;
            }
            break;
        case 'n': c->fio = false; break;
        case 'f': c->fio_bin = optarg; break;
        case 'p': c->flags |= ZC_NVME_SQPOLL; break;
        case 'k': c->keep = true; break;
        case 'H': c->flags |= ZC_NVME_NO_HUGEPAGE; break;
        case 'F': c->fio_huge = true; break;
        case 'h': usage(stdout, argv[0]); return -1;
        case ':':
            fprintf(stderr, "bench_nvme: option '%.200s' needs a value\n", argv[optind - 1]);
            usage(stderr, argv[0]);
            return 2;
        default:
            if (optopt)
                fprintf(stderr, "bench_nvme: unknown option '-%c'\n", optopt);
            else
                fprintf(stderr, "bench_nvme: unknown option '%.200s'\n", argv[optind - 1]);
            usage(stderr, argv[0]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "bench_nvme: unexpected argument '%.200s'\n", argv[optind]);
        return 2;
    }
    for (int i = 0; i < c->nblocks; i++)
        if (c->blocks[i] & (c->blocks[i] - 1)) {
            fprintf(stderr, "bench_nvme: block %" PRIu64 " must be a power of two, 4K..64M\n",
                    c->blocks[i]);
            return 2;
        }
    return 0;
}

/* Size the file: a quarter of the free space, 1-8 GiB, rounded to the largest
 * block; an explicit size must leave 10% + 1 GiB of the free space. */
static int pick_size(cfg *c)
{
    struct statvfs vf;
    if (statvfs(c->dir, &vf) != 0) {
        fprintf(stderr, "bench_nvme: cannot examine '%s': %s\n", c->dir, strerror(errno));
        return 1;
    }
    uint64_t free_b = (uint64_t)vf.f_bavail * vf.f_frsize;
    uint64_t margin = free_b / 10 + GiB;
    uint64_t maxblk = 0;
    for (int i = 0; i < c->nblocks; i++)
        if (c->blocks[i] > maxblk)
            maxblk = c->blocks[i];
    if (!c->size) {
        uint64_t s = free_b / 4;
        if (s > 8 * GiB)
            s = 8 * GiB;
        if (s < GiB) {
            fprintf(stderr, "bench_nvme: '%s' has %.2f GiB free; the default 1-8 GiB file does "
                    "not fit with a margin. Pass a smaller --size\n", c->dir,
                    (double)free_b / (double)GiB);
            return 1;
        }
        c->size = s;
    } else if ((c->size > UINT64_MAX - margin || c->size + margin > free_b) &&
               c->size > free_b / 2) {
        fprintf(stderr, "bench_nvme: --size %.2f GiB does not fit '%s' (%.2f GiB free, keeping "
                "10%% + 1 GiB spare)\n", (double)c->size / (double)GiB, c->dir,
                (double)free_b / (double)GiB);
        return 1;
    }
    c->size = c->size / maxblk * maxblk;
    if (!c->size) {
        fprintf(stderr, "bench_nvme: --size is smaller than the block size %" PRIu64 "\n", maxblk);
        return 1;
    }
    return 0;
}

/* The block device's counters for the directory's filesystem, so each run
 * can say how many requests (of what average size) the device saw. */
static void find_devstat(cfg *c)
{
    struct stat sb;
    c->devstat[0] = '\0';
    if (stat(c->dir, &sb) != 0)
        return;
    snprintf(c->devstat, sizeof c->devstat, "/sys/dev/block/%u:%u/stat", major(sb.st_dev),
             minor(sb.st_dev));
    if (access(c->devstat, R_OK) != 0)
        c->devstat[0] = '\0'; /* e.g. tmpfs, overlay: no block device */
}

typedef struct devsnap {
    unsigned long long ios[2], sectors[2]; /* [0] reads, [1] writes */
} devsnap;

static bool devstat_read(const cfg *c, devsnap *d)
{
    unsigned long long v[7];
    char why[256];
    FILE *f = c->devstat[0] ? zc__fopen_regular(c->devstat, NULL, why, sizeof why) : NULL;
    if (!f)
        return false;
    int n = fscanf(f, "%llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
                   &v[5], &v[6]);
    fclose(f);
    if (n != 7)
        return false;
    d->ios[0] = v[0], d->sectors[0] = v[2], d->ios[1] = v[4], d->sectors[1] = v[6];
    return true;
}

/* Average request size in KiB between two snapshots; -1 when unknown. */
static double devstat_kib(const devsnap *a, const devsnap *b, bool ok, bool write)
{
    int w = write;
    if (!ok || b->ios[w] <= a->ios[w])
        return -1;
    return (double)(b->sectors[w] - a->sectors[w]) * 512.0 / 1024.0 /
           (double)(b->ios[w] - a->ios[w]);
}

/* ------------------------------------------------------------------------- */
/* Ours                                                                      */
/* ------------------------------------------------------------------------- */

typedef struct ours {
    zc_nvme_store *st;
    zc_pinned_pool *pool;
    unsigned char *buf; /* depth * block */
    zc_nvme_ticket *q;
    int depth;
    uint64_t block;
    int64_t max_inflight; /* most requests seen in the kernel at once */
} ours;

static void ours_close(ours *o)
{
    if (o->st)
        zc__nvme_close(o->st, ZC_NVME_CLOSE_CANCEL);
    if (o->buf)
        zc__pinned_free(o->pool, o->buf);
    zc__pinned_pool_destroy(o->pool);
    free(o->q);
    memset(o, 0, sizeof *o);
}

static int ours_open(ours *o, const cfg *c, uint64_t block, int depth)
{
    memset(o, 0, sizeof *o);
    o->depth = depth;
    o->block = block;
    const char *dirs[1] = {c->work};
    zc_nvme_opts no = ZC_NVME_OPTS_INIT;
    no.dirs = dirs;
    no.ndirs = 1;
    no.purpose = "bench";
    no.capacity = c->size;
    no.block_size = block;
    no.queue_depth = depth;
    no.flags = ZC_NVME_KEEP_FILES | c->flags;
    zc_pinned_pool_opts po = ZC_PINNED_POOL_OPTS_INIT;
    uint64_t bytes;
    if (!zc__mul_u64(block, (uint64_t)depth, &bytes)) { /* <= 64M x 4096 by the parser */
        fprintf(stderr, "bench_nvme: --block %" PRIu64 " x --depth %d overflows\n", block, depth);
        return 1;
    }
    po.slab_bytes = bytes > GiB ? GiB : bytes;
    po.reserve_bytes = bytes;
    o->q = calloc((size_t)depth, sizeof *o->q);
    if (!o->q || zc__nvme_open(&o->st, &no) != ZC_OK ||
        zc__pinned_pool_create(&o->pool, &po) != ZC_OK ||
        zc__pinned_alloc(o->pool, bytes, 0, ZC_MEM_BUFFERS, "bench buffers", (void **)&o->buf) !=
            ZC_OK) {
        fprintf(stderr, "bench_nvme: %s\n", zc_last_error());
        ours_close(o);
        return 1;
    }
    zc_mem_region r[4];
    int n = zc__pinned_pool_regions(o->pool, r, 4);
    if (zc__nvme_register_buffers(o->st, r, n) != ZC_OK) {
        fprintf(stderr, "bench_nvme: %s\n", zc_last_error());
        ours_close(o);
        return 1;
    }
    /* Incompressible, non-zero data: some virtual disks short-cut zeros. */
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (uint64_t i = 0; i < bytes; i += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(o->buf + i, &x, 8);
    }
    return 0;
}

/* One sequential pass: depth tickets in flight, each waited for in order. */
static double ours_pass(ours *o, bool write, uint64_t size)
{
    uint64_t n = size / o->block;
    double t0 = now_s();
    for (uint64_t i = 0; i < n; i++) {
        int k = (int)(i % (uint64_t)o->depth);
        if (i >= (uint64_t)o->depth && zc__nvme_wait(o->st, o->q[k], NULL) != ZC_OK)
            goto fail;
        unsigned char *b = o->buf + (uint64_t)k * o->block;
        zc_status rc = write ? zc__nvme_write(o->st, i * o->block, b, o->block, &o->q[k])
                             : zc__nvme_read(o->st, i * o->block, b, o->block, &o->q[k]);
        if (rc != ZC_OK)
            goto fail;
        zc_nvme_stats ss;
        zc__nvme_stats_get(o->st, &ss);
        if (ss.inflight > o->max_inflight)
            o->max_inflight = ss.inflight;
    }
    if (zc__nvme_wait_all(o->st) != ZC_OK)
        goto fail;
    return (double)size / (now_s() - t0) / 1e9;
fail:
    fprintf(stderr, "bench_nvme: %s\n", zc_last_error());
    return -1;
}

/* ------------------------------------------------------------------------- */
/* fio                                                                       */
/* ------------------------------------------------------------------------- */

/* The child fio while it runs, so a signal handler can stop it. */
static volatile pid_t fio_child = -1;

/* Paths the signal handler removes; set before the handler is armed and not
 * changed while it is. Only what the bench created is named here: its
 * mkdtemp directory and the store file inside it, so nothing that existed
 * before the run can be touched. */
static char clean_dir[PATH_MAX], clean_file[PATH_MAX];
static volatile sig_atomic_t clean_armed;
/* The signals that remove them (SIGPIPE: a closed stdout kills the bench). */
static const int clean_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE};
#define NSIG_CLEAN ((int)(sizeof clean_signals / sizeof clean_signals[0]))

/* Runs `bin args...` without a shell (no quoting to get wrong: a directory or
 * fio path holding quotes, spaces or $(...) is only ever a path), with
 * GLIBC_TUNABLES added when hugetlb is set, in directory `cwd` (NULL: ours).
 * With out != NULL its stdout is collected there (malloc'd, NUL-terminated);
 * otherwise it goes to /dev/null, as stderr always does. timeout_s > 0 (only
 * without out) kills it after that long. Returns the wait status, or -1 with
 * errno when it could not be started, read or did not finish in time. */
static int spawn_fio(const char *bin, char *const args[], const char *cwd, bool hugetlb,
                     double timeout_s, char **out)
{
    int pfd[2] = {-1, -1}, st = -1, err = 0;
    char **env = NULL;
    posix_spawn_file_actions_t fa;
    if (out)
        *out = NULL;
    if (posix_spawn_file_actions_init(&fa) != 0)
        return -1;
    if (out && pipe2(pfd, O_CLOEXEC) != 0) {
        err = errno;
        goto done;
    }
    if ((out ? posix_spawn_file_actions_adddup2(&fa, pfd[1], STDOUT_FILENO)
             : posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0)) ||
        posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0) ||
        (cwd && posix_spawn_file_actions_addchdir_np(&fa, cwd))) {
        err = ENOMEM;
        goto done;
    }
    size_t nenv = 0;
    while (environ && environ[nenv])
        nenv++;
    env = calloc(nenv + 2, sizeof *env);
    if (!env) {
        err = ENOMEM;
        goto done;
    }
    size_t k = 0;
    for (size_t i = 0; i < nenv; i++)
        if (!hugetlb || strncmp(environ[i], "GLIBC_TUNABLES=", 15))
            env[k++] = environ[i];
    if (hugetlb)
        env[k++] = "GLIBC_TUNABLES=glibc.malloc.hugetlb=1";
    pid_t pid;
    /* The cleanup signals stay blocked from the spawn until fio_child is
     * set, so the handler never misses a fio it should stop; the child
     * starts with an empty mask and default dispositions. */
    posix_spawnattr_t at;
    sigset_t block, old, none;
    sigemptyset(&block);
    sigemptyset(&none);
    for (int i = 0; i < NSIG_CLEAN; i++)
        sigaddset(&block, clean_signals[i]);
    if (posix_spawnattr_init(&at) != 0) {
        err = ENOMEM;
        goto done;
    }
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &block);
    sigprocmask(SIG_BLOCK, &block, &old);
    /* A name without a slash is looked up in PATH, as a shell would. */
    int e = strchr(bin, '/') ? posix_spawn(&pid, bin, &fa, &at, args, env)
                             : posix_spawnp(&pid, bin, &fa, &at, args, env);
    if (!e)
        fio_child = pid;
    sigprocmask(SIG_SETMASK, &old, NULL);
    posix_spawnattr_destroy(&at);
    if (e) {
        err = e;
        goto done;
    }
    if (out) {
        close(pfd[1]);
        pfd[1] = -1;
        size_t cap = 1 << 16, len = 0;
        char *buf = malloc(cap);
        for (;;) {
            if (!buf) {
                err = ENOMEM;
                break;
            }
            ssize_t r = read(pfd[0], buf + len, cap - len - 1);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) {
                if (r < 0)
                    err = errno;
                break;
            }
            len += (size_t)r;
            if (len + 1 == cap) {
                /* fio's JSON for one job is a few KiB: more than 16 MiB is
                 * not fio, and is not worth the memory. */
                char *nb = cap < (16u << 20) ? realloc(buf, cap * 2) : NULL;
                if (!nb) {
                    err = cap < (16u << 20) ? ENOMEM : EMSGSIZE; /* "message too long" */
                    free(buf);
                    buf = NULL;
                    break;
                }
                buf = nb;
                cap *= 2;
            }
        }
        if (buf) {
            buf[len] = '\0';
            *out = buf;
        }
        /* Close the pipe first: a fio still writing gets EPIPE instead of
         * blocking forever while we wait for it. */
        close(pfd[0]);
        pfd[0] = -1;
    }
    if (timeout_s > 0) {
        /* Only `fio --version` has a bound: a program that does not answer
         * it in time is not a usable fio, and must not hang the bench. */
        double end = now_s() + timeout_s;
        pid_t w;
        while ((w = waitpid(pid, &st, WNOHANG)) == 0 || (w < 0 && errno == EINTR)) {
            if (now_s() > end) {
                kill(pid, SIGKILL);
                while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
                    ;
                st = -1;
                err = ETIMEDOUT;
                break;
            }
            nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
        }
    } else {
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
    }
    fio_child = -1;
    if (err && out) {
        free(*out);
        *out = NULL;
        st = -1;
    }
done:
    for (int i = 0; i < 2; i++)
        if (pfd[i] >= 0)
            close(pfd[i]);
    free(env);
    posix_spawn_file_actions_destroy(&fa);
    if (st == -1 && err)
        errno = err;
    return st;
}

static double fio_pass(const cfg *c, const char *engine, bool write, uint64_t block, int depth)
{
    char bs[40], qd[40], eng[40], size[48], rw[16];
    snprintf(bs, sizeof bs, "--bs=%" PRIu64, block);
    snprintf(qd, sizeof qd, "--iodepth=%d", depth);
    snprintf(eng, sizeof eng, "--ioengine=%s", engine);
    snprintf(size, sizeof size, "--size=%" PRIu64, c->size);
    snprintf(rw, sizeof rw, "--rw=%s", write ? "write" : "read");
    /* fio runs in the bench's own directory and is given the file by its
     * bare name: fio splits --filename at ':' and the name is ours, so no
     * part of --dir reaches fio's option parser. */
    char *const args[] = {(char *)c->fio_bin, "--name=zc", "--filename=" STORE_FILE, rw, bs, qd,
                          "--direct=1", eng, size, "--numjobs=1", "--thread", "--invalidate=1",
                          "--fallocate=none", "--output-format=json", NULL};
    char *out = NULL;
    int st = spawn_fio(c->fio_bin, args, c->work, c->fio_huge, 0, &out);
    if (st == -1 && !out) {
        fprintf(stderr, "bench_nvme: cannot run fio '%s': %s\n", c->fio_bin, strerror(errno));
        return -1;
    }
    double gbps = -1;
    /* fio may print notes before the JSON object. */
    const char *js = out ? strchr(out, '{') : NULL;
    json_error_t je;
    json_t *root = js ? json_loads(js, JSON_DISABLE_EOF_CHECK, &je) : NULL;
    json_t *job = root ? json_array_get(json_object_get(root, "jobs"), 0) : NULL;
    json_t *bw = job ? json_object_get(json_object_get(job, write ? "write" : "read"), "bw_bytes")
                     : NULL;
    if (bw && json_is_number(bw) && isfinite(json_number_value(bw)) && json_number_value(bw) > 0)
        gbps = json_number_value(bw) / 1e9;
    else
        fprintf(stderr, "bench_nvme: fio (%s) failed (%s %d): %s %s %s %s %s %s\n", engine,
                WIFSIGNALED(st) ? "signal" : "exit status",
                WIFSIGNALED(st) ? WTERMSIG(st) : WIFEXITED(st) ? WEXITSTATUS(st) : -1,
                c->fio_bin, rw, bs, qd, eng, size);
    json_decref(root);
    free(out);
    return gbps;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void print_num(const char *key, double v, bool last)
{
    if (v < 0 || !isfinite(v)) /* unknown, or a zero time: null, never inf or nan */
        printf("\"%s\":null%s", key, last ? "" : ",");
    else
        printf("\"%s\":%.4f%s", key, v, last ? "" : ",");
}

static int run_case(const cfg *c, uint64_t block, int depth, bool *prefilled)
{
    ours o;
    if (ours_open(&o, c, block, depth) != 0)
        return 1;
    if (strcmp(zc__nvme_path(o.st, 0), clean_file) != 0) {
        /* The cleanup names the file in advance (STORE_FILE): it must be
         * the one the store made. */
        fprintf(stderr, "bench_nvme: internal: the store file is '%s', expected '%s'\n",
                zc__nvme_path(o.st, 0), clean_file);
        ours_close(&o);
        return 1;
    }
    zc_nvme_stats ss;
    zc__nvme_stats_get(o.st, &ss);
    if (!ss.direct)
        fprintf(stderr, "bench_nvme: warning: '%s' is not on O_DIRECT: results include the page "
                "cache\n", c->dir);
    if (!*prefilled) {
        /* Write the file once, unmeasured: reading never-written
         * (unwritten-extent) blocks would not touch the disk, and the first
         * write into fallocated space also converts extents, a cost the
         * later fio runs would not pay. */
        if (ours_pass(&o, true, c->size) < 0) {
            ours_close(&o);
            return 1;
        }
        *prefilled = true;
    }
    for (int w = 1; w >= 0; w--) {
        bool write = w;
        if ((write && !c->do_write) || (!write && !c->do_read))
            continue;
        /* [engine][rep]: 0 ours, 1 fio io_uring, 2 fio libaio. */
        double v[3][100], kib[3][100];
        for (int r = 0; r < c->reps; r++) {
            /* Rotate who goes first, so a drive (or a host cache) that
             * favours the first or last run of a round favours each alike. */
            for (int k = 0; k < 3; k++) {
                int e = (r + k) % 3;
                devsnap d0, d1;
                bool ok = devstat_read(c, &d0);
                if (e == 0)
                    v[0][r] = ours_pass(&o, write, c->size);
                else
                    v[e][r] = c->fio ? fio_pass(c, e == 1 ? "io_uring" : "libaio", write, block,
                                                depth)
                                     : -1;
                ok = ok && devstat_read(c, &d1);
                kib[e][r] = devstat_kib(&d0, &d1, ok, write);
                if (e == 0 && v[0][r] < 0) {
                    ours_close(&o);
                    return 1;
                }
            }
        }
        /* The spread goes to stderr: on shared or virtual disks it is often
         * wider than the differences between engines. */
        fprintf(stderr, "bench_nvme: %s block %" PRIu64 " depth %d, GB/s (avg request KiB) "
                "per rep:\n", write ? "write" : "read", block, depth);
        for (int r = 0; r < c->reps; r++)
            fprintf(stderr, "bench_nvme:   ours %.3f (%.0f)  fio_io_uring %.3f (%.0f)  "
                    "fio_libaio %.3f (%.0f)\n", v[0][r], kib[0][r], v[1][r], kib[1][r], v[2][r],
                    kib[2][r]);
        fprintf(stderr, "bench_nvme: ours kept up to %lld requests in flight (depth %d)\n",
                (long long)o.max_inflight, depth);
        double med[3], mkib[3], paired[2];
        for (int e = 0; e < 3; e++) {
            double tmp[100];
            bool failed = false;
            for (int r = 0; r < c->reps; r++) {
                tmp[r] = v[e][r];
                failed |= v[e][r] < 0; /* a failed fio run: no median */
            }
            med[e] = failed ? -1 : median(tmp, c->reps);
            bool known = true;
            for (int r = 0; r < c->reps; r++) {
                tmp[r] = kib[e][r];
                known &= kib[e][r] > 0;
            }
            mkib[e] = known ? median(tmp, c->reps) : -1;
        }
        for (int e = 1; e < 3; e++) {
            double tmp[100];
            for (int r = 0; r < c->reps; r++)
                tmp[r] = v[e][r] > 0 ? v[0][r] / v[e][r] : -1;
            paired[e - 1] = med[e] > 0 ? median(tmp, c->reps) : -1;
        }
        printf("{\"op\":\"%s\",\"block\":%" PRIu64 ",\"depth\":%d,", write ? "write" : "read",
               block, depth);
        print_num("gbps", med[0], false);
        print_num("fio_io_uring_gbps", med[1], false);
        print_num("fio_libaio_gbps", med[2], false);
        print_num("ratio_io_uring", med[1] > 0 ? med[0] / med[1] : -1, false);
        print_num("ratio_libaio", med[2] > 0 ? med[0] / med[2] : -1, false);
        print_num("ratio_io_uring_paired", paired[0], false);
        print_num("ratio_libaio_paired", paired[1], false);
        printf("\"reps\":%d,", c->reps);
        print_num("req_kib", mkib[0], false);
        print_num("fio_io_uring_req_kib", mkib[1], false);
        print_num("fio_libaio_req_kib", mkib[2], false);
        printf("\"fio_buffers\":\"%s\"}\n", !c->fio ? "none" : c->fio_huge ? "hugepage" : "malloc");
        fflush(stdout);
    }
    ours_close(&o);
    return 0;
}

/* ---- the bench's own directory, removed on every way out ------------------ */

static struct sigaction clean_old[NSIG_CLEAN];

/* Async-signal-safe: kill, unlink, rmdir, sigaction and raise only. Stops a
 * running fio (it holds the file open and would keep writing), removes the
 * file and the directory, then dies of the same signal with the default
 * action so the parent sees what happened. */
static void clean_on_signal(int sig)
{
    int saved = errno;
    pid_t child = fio_child;
    if (child > 0)
        kill(child, SIGKILL);
    if (clean_armed) {
        unlink(clean_file);
        rmdir(clean_dir);
    }
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig); /* delivered when the handler returns: sig is blocked in it */
    errno = saved;
}

static void clean_arm(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = clean_on_signal;
    sigemptyset(&sa.sa_mask);
    /* One handler at a time: a second signal waits until the first one's
     * cleanup is done (and then finds the default action). */
    for (int i = 0; i < NSIG_CLEAN; i++)
        sigaddset(&sa.sa_mask, clean_signals[i]);
    for (int i = 0; i < NSIG_CLEAN; i++)
        sigaction(clean_signals[i], &sa, &clean_old[i]);
    clean_armed = 1;
}

/* Removes the file (unless kept) and the directory, and puts the caller's
 * signal dispositions back. */
static void clean_disarm(bool keep)
{
    sigset_t all, old;
    sigemptyset(&all);
    for (int i = 0; i < NSIG_CLEAN; i++)
        sigaddset(&all, clean_signals[i]);
    sigprocmask(SIG_BLOCK, &all, &old);
    clean_armed = 0;
    if (!keep) {
        if (unlink(clean_file) != 0 && errno != ENOENT)
            fprintf(stderr, "bench_nvme: cannot remove '%s': %s\n", clean_file, strerror(errno));
        if (rmdir(clean_dir) != 0)
            fprintf(stderr, "bench_nvme: cannot remove '%s': %s\n", clean_dir, strerror(errno));
    }
    for (int i = 0; i < NSIG_CLEAN; i++)
        sigaction(clean_signals[i], &clean_old[i], NULL);
    sigprocmask(SIG_SETMASK, &old, NULL);
}

int zc__bench_nvme_main(int argc, char **argv)
{
    cfg c;
    int rc = parse_args(argc, argv, &c);
    if (rc)
        return rc < 0 ? 0 : rc;
    /* The store takes directories of up to 400 bytes; ours adds the
     * template. Checked here so the message names --dir. */
    size_t maxdir = 400 - 1 - strlen(TMP_TEMPLATE);
    if (!*c.dir || strlen(c.dir) > maxdir) {
        fprintf(stderr, "bench_nvme: --dir must be a directory path of 1..%zu bytes (got %zu)\n",
                maxdir, strlen(c.dir));
        return 2;
    }
    if (pick_size(&c) != 0)
        return 1;
    find_devstat(&c);
    static char fio_abs[PATH_MAX];
    if (c.fio && strchr(c.fio_bin, '/') && c.fio_bin[0] != '/') {
        /* fio runs in the bench's directory: a relative --fio must be made
         * absolute first, or it would be looked up there. */
        if (!realpath(c.fio_bin, fio_abs)) {
            fprintf(stderr, "bench_nvme: --fio '%s': %s\n", c.fio_bin, strerror(errno));
            return 1;
        }
        c.fio_bin = fio_abs;
    }
    if (c.fio) {
        char *const args[] = {(char *)c.fio_bin, "--version", NULL};
        int st = spawn_fio(c.fio_bin, args, NULL, false, 10, NULL);
        if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "bench_nvme: fio not usable ('%s': %s); install it (apt-get install "
                    "fio, or bench/nvme/run_bench.sh does) or pass --no-fio\n", c.fio_bin,
                    st != -1          ? "'--version' failed"
                    : errno == ETIMEDOUT ? "no answer to --version in 10 s"
                                         : strerror(errno));
            return 1;
        }
    }
    /* A fresh directory of our own (mode 0700): the store file is created in
     * it with O_EXCL, and nothing else is ever there for us to overwrite or
     * delete. Blocked signals while it is made and the handler armed, so an
     * interrupt cannot leave it behind in between. */
    snprintf(c.work, sizeof c.work, "%s/%s", c.dir, TMP_TEMPLATE);
    sigset_t block, old;
    sigemptyset(&block);
    for (int i = 0; i < NSIG_CLEAN; i++)
        sigaddset(&block, clean_signals[i]);
    sigprocmask(SIG_BLOCK, &block, &old);
    if (!mkdtemp(c.work)) {
        int e = errno;
        sigprocmask(SIG_SETMASK, &old, NULL);
        fprintf(stderr, "bench_nvme: cannot make the bench's directory in --dir '%s': %s\n",
                c.dir, strerror(e));
        return 1;
    }
    snprintf(clean_dir, sizeof clean_dir, "%s", c.work);
    snprintf(clean_file, sizeof clean_file, "%.420s/%s", c.work, STORE_FILE); /* work <= 400 */
    clean_arm();
    sigprocmask(SIG_SETMASK, &old, NULL);

    fprintf(stderr, "bench_nvme: %s, file of %.2f GiB in '%s', %d rep(s) per case\n",
            c.fio ? "ours vs fio io_uring / libaio" : "ours only", (double)c.size / (double)GiB,
            c.work, c.reps);
    bool prefilled = false;
    int status = 0;
    for (int bi = 0; bi < c.nblocks && !status; bi++)
        for (int di = 0; di < c.ndepths && !status; di++)
            status = run_case(&c, c.blocks[bi], c.depths[di], &prefilled);
    bool kept = c.keep && access(clean_file, F_OK) == 0;
    if (kept)
        fprintf(stderr, "bench_nvme: kept the test file '%s'\n", clean_file);
    clean_disarm(kept);
    return status;
}
