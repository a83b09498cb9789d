/* bench_offload: the offloaded optimizer step against its parts, each timed
 * alone in the same run.
 *
 * The step is the engine's optimizer pass through its home
 * (offload/opt_home.h): for every chunk, fetch master/m/v, run the host Adam
 * (src/optim, the kernel zc_step uses) with an fp32 gradient shard and a bf16
 * output, put it back. Model: --params fp32 elements in chunks of --chunk
 * (the engine's default chunk cap, 2^24), one rank.
 *
 *   nvme: step_s   the pass over swap files (pipeline_read/write both on, or
 *                  both off), buffer_count 12 (three chunks in flight);
 *         read_s   reading all of the state (12 B/param) through a second
 *                  store of the same geometry in the same directory, alone;
 *         write_s  writing it, alone;
 *         adam_s   Adam over every chunk from one pinned slot, alone.
 *         duplex_s reading and writing it at the same time (what the pipeline
 *                  asks of the drive), alone: the I/O floor of a pipelined step
 *                  on a drive that does not read and write at full speed at once;
 *   cpu:  step_s   the pass over the pinned pool; adam_s Adam over the same
 *                  buffers, alone; read_s = write_s = 0 (on the host path
 *                  there is no copy: the gradient and the output are read
 *                  and written in place).
 *
 * One JSON line per case on stdout:
 *   {"bench":"offload_optimizer","params","device","pipeline","step_s",
 *    "read_s","adam_s","write_s","ratio_to_max"}
 * with ratio_to_max = step_s / max(read_s, adam_s, write_s). Each figure is
 * the median of --iters passes after one warm-up pass (which also writes the
 * whole state, so reads never hit unwritten extents). After each nvme line,
 *   {"bench":"offload_optimizer_breakdown","params","pipeline","step_s",
 *    "adam_in_pass_s","adam_threads","pool_threads","read_wait_s","write_wait_s",
 *    "io_pass_s","sleep_pass_s","step_all_threads_s","adam_in_pass_all_threads_s",
 *    "ratio_to_duplex_all_threads","ratio_to_io_pass"}
 * says where the pass's time went (its Adam calls with the I/O moved along
 * between pieces, its waits for reads and for writes) and io_pass_s is the
 * same pass's reads and writes through the home without Adam, timed just
 * before each measured pass: the floor of that very I/O schedule at that
 * moment; sleep_pass_s is the pass with Adam replaced by sleeping as long
 * (adam_s, in the same pieces, the I/O moved along between them): the
 * schedule's cost without Adam's use of the cores and memory. The step's
 * Adam is paced as in zc_step (optim/adam_pace.h): adam_threads is the
 * average number of threads it ran on, of pool_threads; step_all_threads_s
 * (and adam_in_pass_all_threads_s, ratio_to_duplex_all_threads) is the same
 * pass with Adam on every thread, as the step ran before it was paced,
 * interleaved with the paced one in the same iterations. ratio_to_io_pass =
 * step_s / max(io_pass_s, adam_s): against the I/O floor timed next to each
 * pass, which the disk's drift during a run does not move as it moves duplex_s
 * (timed once, before the passes).
 *
 * --case param runs the stage-3 parameter offload cases instead
 * (offload_param_case.c: {"bench":"offload_param", ...}), with --buffers
 * offload_param.buffer_count (2..16, default 3); --case all both.
 *
 * Usage: bench_offload [--params N] [--chunk N] [--dir PATH] [--iters N]
 *                      [--device cpu|nvme|both] [--block BYTES] [--depth N]
 *                      [--case optimizer|param|all] */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/dtype.h"
#include "offload/homes.h"
#include "offload/offload.h"
#include "optim/adam.h"
#include "optim/adam_pace.h"
#include "offload_param_case.h"

#define MAXITER 15

typedef struct bopts {
    long long params, chunk, block, depth, buffers;
    int iters;
    const char *dir;
    bool cpu, nvme;
    bool opt_case, param_case;
} bopts;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static long long parse_ll(const char *flag, const char *v, long long lo, long long hi)
{
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (errno || *end || d != floor(d) || d < (double)lo || d > (double)hi) {
        fprintf(stderr, "bench_offload: %s expects an integer in [%lld, %lld], got '%s'\n", flag,
                lo, hi, v);
        exit(2);
    }
    return (long long)d;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_offload: %s: %s\n", what, zc_last_error());
    exit(1);
}

static double median(double *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct model {
    int nchunks;
    size_t *n;        /* elements per chunk */
    size_t *base;     /* first element */
    float *grad;      /* params fp32 */
    uint16_t *pout;   /* params bf16 */
    zc_adam_coeffs coeffs;
} model;

/* Adam over chunk k in the pieces zc_step uses (src/core/step/step.c), moving the
 * home's I/O along between pieces like the step does (h may be NULL). With
 * `pace` each piece runs on the threads the step gives it on an NVMe home
 * (optim/adam_pace.h), without on every thread of the pool. */
#define PIECE ((size_t)1 << 18)
static void adam_chunk(const model *m, int k, float *master, float *mm, float *vv,
                       zc_opt_home *h, zc_adam_pace *pace)
{
    for (size_t x = 0; x < m->n[k]; x += PIECE) {
        size_t n = m->n[k] - x < PIECE ? m->n[k] - x : PIECE;
        const bool io = h && h->ops->progress && h->ops->progress(h);
        zc_adam_shard s = {
            .master = master + x, .m = mm + x, .v = vv + x,
            .grad = m->grad + m->base[k] + x, .grad_dtype = ZC_DTYPE_F32, .grad_scale = 1.0f,
            .param_out = m->pout + m->base[k] + x, .param_out_dtype = ZC_DTYPE_BF16,
            .n = n,
        };
        if ((pace ? zc__adam_pace_run(pace, &s, &m->coeffs, io) : zc__adam_host(&s, &m->coeffs)) !=
            ZC_OK)
            die("adam");
    }
}

/* What a pass does with each chunk between its acquire and its release:
 * nothing (the I/O alone), Adam (paced as in zc_step when `pace` is set,
 * else on every thread), or a sleep per piece as long as Adam's, with the
 * home's progress between pieces as Adam has: the pipeline's schedule with
 * a compute that takes no core and no memory bandwidth from the I/O. */
typedef enum { BODY_NONE, BODY_ADAM, BODY_SLEEP } pass_body;

/* One pass through a home; returns seconds. BODY_ADAM adds the time its
 * Adam calls took (the home's progress between pieces included) to *adam_s
 * (may be NULL); BODY_SLEEP spreads adam_in evenly over the pieces. */
static double home_pass_body(zc_opt_home *h, const model *m, int *ks, pass_body body,
                             double *adam_s, double adam_in, zc_adam_pace *pace)
{
    struct timespec nap = {0, 0};
    if (body == BODY_SLEEP) {
        size_t pieces = 0;
        for (int k = 0; k < m->nchunks; k++)
            pieces += (m->n[k] + PIECE - 1) / PIECE;
        const double per = adam_in / (double)pieces;
        nap.tv_sec = (time_t)per;
        nap.tv_nsec = (long)((per - (double)(time_t)per) * 1e9);
    }
    double t0 = now_s();
    if (pace && zc__adam_pace_begin(pace) != ZC_OK)
        die("pace");
    if (h->ops->pass_begin(h, ks, m->nchunks) != ZC_OK)
        die("pass_begin");
    for (int k = 0; k < m->nchunks; k++) {
        zc_opt_view v;
        if (h->ops->acquire(h, k, &v) != ZC_OK)
            die("acquire");
        if (body == BODY_ADAM) {
            const double ta = now_s();
            adam_chunk(m, k, v.master, v.m, v.v, h, pace);
            if (adam_s)
                *adam_s += now_s() - ta;
        } else if (body == BODY_SLEEP) {
            for (size_t x = 0; x < m->n[k]; x += PIECE) {
                if (h->ops->progress)
                    h->ops->progress(h);
                nanosleep(&nap, NULL);
            }
        }
        /* Every chunk written back, as a step's pass writes its state. */
        if (h->ops->release(h, k, true) != ZC_OK)
            die("release");
    }
    if (h->ops->pass_end(h) != ZC_OK)
        die("pass_end");
    return now_s() - t0;
}

/* The pass as zc_step runs it: Adam, its state written back. */
static double home_pass(zc_opt_home *h, const model *m, int *ks, double *adam_s,
                        zc_adam_pace *pace)
{
    return home_pass_body(h, m, ks, BODY_ADAM, adam_s, 0.0, pace);
}

static zc_opt_home *make_home(const bopts *o, const model *m, zc_mem_account *acct, bool nvme,
                              bool pipeline)
{
    const char *dirs[1] = {o->dir};
    zc_opt_home_params hp = {
        .env = {.acct = acct, .rank = 0, .nchunks = m->nchunks, .param_bytes = 2,
                .device_index = -1, .aio_block_size = o->block, .aio_queue_depth = o->depth,
                .aio_intra_op = 1},
        .dev = NULL, .staging = false, .pin_memory = true,
        .dirs = dirs, .ndirs = 1, .buffer_count = 12,
        .pipeline_read = pipeline, .pipeline_write = pipeline,
        .fast_init = true, /* the warm-up pass writes everything */
        .aio_overlap_events = true,
        .state_bytes = {4, 4, 4},
    };
    zc_opt_home *h = NULL;
    if ((nvme ? zc__opt_home_nvme_create(&hp, &h) : zc__opt_home_cpu_create(&hp, &h)) != ZC_OK)
        die("home create");
    for (int k = 0; k < m->nchunks; k++)
        if (h->ops->add_chunk(h, k, m->n[k]) != ZC_OK)
            die("add_chunk");
    if (h->ops->prepare(h) != ZC_OK)
        die("prepare");
    return h;
}

/* Reading and writing the whole state alone, through a store of the same
 * geometry (three tickets in flight, one 3-tensor chunk each, like the ring),
 * and both at once (three reads and three writes in flight). */
static void io_alone(const bopts *o, const model *m, double *read_s, double *write_s,
                     double *duplex_s)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/zeroc-bench-XXXXXX", o->dir);
    if (!mkdtemp(dir)) {
        fprintf(stderr, "bench_offload: mkdtemp in %s: %s\n", o->dir, strerror(errno));
        exit(1);
    }
    size_t tb = 0;
    uint64_t cap = 0;
    for (int k = 0; k < m->nchunks; k++) {
        size_t t = (m->n[k] * 4 + 4095) / 4096 * 4096;
        if (t > tb)
            tb = t;
        cap += 3 * (uint64_t)t;
    }
    const char *dirs[1] = {dir};
    zc_nvme_opts no = ZC_NVME_OPTS_INIT;
    no.dirs = dirs;
    no.ndirs = 1;
    no.purpose = "bench";
    no.capacity = cap;
    no.block_size = (size_t)o->block;
    no.alignment = 4096;
    no.queue_depth = (int)o->depth;
    zc_nvme_store *st;
    if (zc__nvme_open(&st, &no) != ZC_OK)
        die("store open");
    zc_pinned_pool *pool;
    zc_pinned_pool_opts po = ZC_PINNED_POOL_OPTS_INIT;
    po.flags = ZC_PINNED_NO_CUDA;
    if (zc__pinned_pool_create(&pool, &po) != ZC_OK)
        die("pool");
    char *buf[6];
    for (int j = 0; j < 6; j++) {
        if (zc__pinned_alloc(pool, 3 * tb, 4096, ZC_MEM_BUFFERS, "bench buffer",
                             (void **)&buf[j]) != ZC_OK)
            die("pinned alloc");
        memset(buf[j], 0, 3 * tb);
    }
    zc_mem_region reg[64];
    int nr = zc__pinned_pool_regions(pool, reg, 64);
    if (zc__nvme_register_buffers(st, reg, nr > 64 ? 64 : nr) != ZC_OK)
        die("register");
    double rs[MAXITER], ws[MAXITER], ds[MAXITER];
    for (int it = 0; it <= o->iters; it++) {
        /* duplex: chunk k is written while chunk k + nchunks/2 is read. */
        zc_nvme_ticket rt[3] = {0}, wt[3] = {0};
        uint64_t *offs = calloc((size_t)m->nchunks + 1, sizeof *offs);
        for (int k = 0; k < m->nchunks; k++)
            offs[k + 1] = offs[k] + 3 * ((m->n[k] * 4 + 4095) / 4096 * 4096);
        double td0 = now_s();
        for (int k = 0; k < m->nchunks; k++) {
            int j = k % 3, kr = (k + m->nchunks / 2) % m->nchunks;
            if ((rt[j] && zc__nvme_wait(st, rt[j], NULL) != ZC_OK) ||
                (wt[j] && zc__nvme_wait(st, wt[j], NULL) != ZC_OK))
                die("wait");
            if (zc__nvme_read(st, offs[kr], buf[j], offs[kr + 1] - offs[kr], &rt[j]) != ZC_OK ||
                zc__nvme_write(st, offs[k], buf[3 + j], offs[k + 1] - offs[k], &wt[j]) != ZC_OK)
                die("submit");
        }
        if (zc__nvme_wait_all(st) != ZC_OK)
            die("wait_all");
        if (it > 0)
            ds[it - 1] = now_s() - td0;
        free(offs);
        for (int pass = 0; pass < 2; pass++) {
            const bool write = pass == 0;
            zc_nvme_ticket t[3] = {0};
            uint64_t off = 0;
            double t0 = now_s();
            for (int k = 0; k < m->nchunks; k++) {
                size_t len = 3 * ((m->n[k] * 4 + 4095) / 4096 * 4096);
                int j = k % 3;
                if (t[j] && zc__nvme_wait(st, t[j], NULL) != ZC_OK)
                    die("wait");
                zc_status rc = write ? zc__nvme_write(st, off, buf[j], len, &t[j])
                                     : zc__nvme_read(st, off, buf[j], len, &t[j]);
                if (rc != ZC_OK)
                    die("submit");
                off += len;
            }
            if (zc__nvme_wait_all(st) != ZC_OK)
                die("wait_all");
            double dt = now_s() - t0;
            if (it > 0)
                (write ? ws : rs)[it - 1] = dt;
        }
    }
    *read_s = median(rs, o->iters);
    *write_s = median(ws, o->iters);
    *duplex_s = median(ds, o->iters);
    for (int j = 0; j < 6; j++)
        zc__pinned_free(pool, buf[j]);
    if (zc__nvme_close(st, ZC_NVME_CLOSE_WAIT) != ZC_OK)
        die("close");
    zc__pinned_pool_destroy(pool);
    rmdir(dir);
}

static void emit(const bopts *o, const char *dev, bool pipeline, double step, double rd,
                 double adam, double wr, double duplex)
{
    double mx = fmax(rd, fmax(adam, wr));
    printf("{\"bench\":\"offload_optimizer\",\"params\":%lld,\"device\":\"%s\","
           "\"pipeline\":%s,\"step_s\":%.4f,\"read_s\":%.4f,\"adam_s\":%.4f,\"write_s\":%.4f,"
           "\"ratio_to_max\":%.3f,\"serial_sum_s\":%.4f,\"duplex_s\":%.4f,"
           "\"ratio_to_duplex\":%.3f}\n",
           o->params, dev, pipeline ? "true" : "false", step, rd, adam, wr, step / mx,
           rd + adam + wr, duplex, duplex > 0 ? step / fmax(duplex, adam) : 0.0);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    bopts o = {.params = 256LL << 20, .chunk = 1LL << 24, .block = 1 << 20, .depth = 32, .buffers = 3,
               .iters = 3, .dir = ".", .cpu = true, .nvme = true, .opt_case = true};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "bench_offload: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--params")) o.params = parse_ll(a, v, 64, 1LL << 36);
        else if (!strcmp(a, "--chunk")) o.chunk = parse_ll(a, v, 64, 1LL << 28);
        else if (!strcmp(a, "--block")) o.block = parse_ll(a, v, 4096, 1LL << 30);
        else if (!strcmp(a, "--depth")) o.depth = parse_ll(a, v, 1, 4096);
        else if (!strcmp(a, "--buffers")) o.buffers = parse_ll(a, v, 2, 16);
        else if (!strcmp(a, "--iters")) o.iters = (int)parse_ll(a, v, 1, MAXITER);
        else if (!strcmp(a, "--dir")) o.dir = v;
        else if (!strcmp(a, "--case")) {
            o.opt_case = !strcmp(v, "optimizer") || !strcmp(v, "all");
            o.param_case = !strcmp(v, "param") || !strcmp(v, "all");
            if (!o.opt_case && !o.param_case) {
                fprintf(stderr, "bench_offload: --case optimizer|param|all, got '%s'\n", v);
                return 2;
            }
        }
        else if (!strcmp(a, "--device")) {
            o.cpu = !strcmp(v, "cpu") || !strcmp(v, "both");
            o.nvme = !strcmp(v, "nvme") || !strcmp(v, "both");
            if (!o.cpu && !o.nvme) {
                fprintf(stderr, "bench_offload: --device cpu|nvme|both, got '%s'\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "bench_offload: unknown flag '%s'\n", a);
            return 2;
        }
    }
    if (o.param_case)
        zc_bench_offload_param(o.dir, o.params, o.chunk, o.buffers, o.iters);
    if (!o.opt_case)
        return 0;
    model m = {0};
    m.nchunks = (int)((o.params + o.chunk - 1) / o.chunk);
    m.n = calloc((size_t)m.nchunks, sizeof *m.n);
    m.base = calloc((size_t)m.nchunks, sizeof *m.base);
    for (int k = 0; k < m.nchunks; k++) {
        m.base[k] = (size_t)k * (size_t)o.chunk;
        long long left = o.params - (long long)m.base[k];
        m.n[k] = (size_t)(left < o.chunk ? left : o.chunk);
    }
    m.grad = aligned_alloc(64, ((size_t)o.params * 4 + 63) / 64 * 64);
    m.pout = aligned_alloc(64, ((size_t)o.params * 2 + 63) / 64 * 64);
    if (!m.grad || !m.pout || !m.n || !m.base) {
        fprintf(stderr, "bench_offload: out of memory for %lld parameters\n", o.params);
        return 1;
    }
    for (long long i = 0; i < o.params; i++)
        m.grad[i] = 1e-3f * (float)((i * 2654435761u) % 2001 - 1000) / 1000.0f;
    zc_adam_hparams hp = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                          .weight_decay = 0.01, .adamw = true, .bias_correction = true};
    m.coeffs = zc__adam_coeffs(&hp, 1);
    int *ks = calloc((size_t)m.nchunks, sizeof *ks);
    for (int k = 0; k < m.nchunks; k++)
        ks[k] = k;
    zc_mem_account acct;
    memset(&acct, 0, sizeof acct);

    if (o.nvme) {
        double rd, wr, dx;
        io_alone(&o, &m, &rd, &wr, &dx);
        /* Adam alone, from one slot's worth of state per chunk. */
        float *st = aligned_alloc(4096, (size_t)o.chunk * 12);
        memset(st, 0, (size_t)o.chunk * 12);
        double as[MAXITER];
        for (int it = 0; it <= o.iters; it++) {
            double t0 = now_s();
            for (int k = 0; k < m.nchunks; k++)
                adam_chunk(&m, k, st, st + o.chunk, st + 2 * o.chunk, NULL, NULL);
            if (it > 0)
                as[it - 1] = now_s() - t0;
        }
        free(st);
        double adam = median(as, o.iters);
        for (int pl = 1; pl >= 0; pl--) {
            zc_opt_home *nh = make_home(&o, &m, &acct, true, pl == 1);
            double ss[MAXITER], ai[MAXITER], rw[MAXITER], ww[MAXITER], io[MAXITER];
            double sl[MAXITER], sa[MAXITER], aa[MAXITER], th[MAXITER];
            zc_adam_pace pace;
            /* warm-up: writes the whole state */
            home_pass(nh, &m, ks, NULL, &pace);
            for (int it = 0; it < o.iters; it++) {
                /* The same reads and writes through the home without Adam,
                 * next to each measured pass. */
                io[it] = home_pass_body(nh, &m, ks, BODY_NONE, NULL, 0.0, NULL);
                sl[it] = home_pass_body(nh, &m, ks, BODY_SLEEP, NULL, adam, NULL);
                /* The step as zc_step runs it (Adam paced) and as it ran
                 * before (Adam on every thread), interleaved, the one that
                 * goes first alternating. */
                for (int j = 0; j < 2; j++) {
                    const bool paced = (j == 0) == (it % 2 == 0);
                    double a = 0;
                    double t = home_pass(nh, &m, ks, &a, paced ? &pace : NULL);
                    if (!paced) {
                        sa[it] = t;
                        aa[it] = a;
                        continue;
                    }
                    ss[it] = t;
                    ai[it] = a;
                    th[it] = zc__adam_pace_mean_threads(&pace);
                    zc_opt_nvme_info ni;
                    zc__opt_home_nvme_info(nh, &ni);
                    rw[it] = ni.read_wait_s;
                    ww[it] = ni.write_wait_s;
                }
            }
            zc__opt_home_destroy(nh);
            emit(&o, "nvme", pl == 1, median(ss, o.iters), rd, adam, wr, dx);
            /* Where the pass's time went: Adam (with the I/O moved along
             * between its pieces), waiting for reads, waiting for writes,
             * the rest (acquire/release bookkeeping); and the pass's I/O
             * through the home without Adam (io_pass_s). */
            const double all_s = median(sa, o.iters);
            printf("{\"bench\":\"offload_optimizer_breakdown\",\"params\":%lld,"
                   "\"pipeline\":%s,\"step_s\":%.4f,\"adam_in_pass_s\":%.4f,"
                   "\"adam_threads\":%.2f,\"pool_threads\":%d,"
                   "\"read_wait_s\":%.4f,\"write_wait_s\":%.4f,\"io_pass_s\":%.4f,\"sleep_pass_s\":%.4f,"
                   "\"step_all_threads_s\":%.4f,\"adam_in_pass_all_threads_s\":%.4f,"
                   "\"ratio_to_duplex_all_threads\":%.3f,\"ratio_to_io_pass\":%.3f}\n",
                   o.params, pl == 1 ? "true" : "false", median(ss, o.iters),
                   median(ai, o.iters), median(th, o.iters), pace.max_threads,
                   median(rw, o.iters), median(ww, o.iters),
                   median(io, o.iters), median(sl, o.iters), all_s, median(aa, o.iters),
                   dx > 0 ? all_s / fmax(dx, adam) : 0.0,
                   median(ss, o.iters) / fmax(median(io, o.iters), adam));
            fflush(stdout);
        }
    }
    if (o.cpu) {
        zc_opt_home *h = make_home(&o, &m, &acct, false, false);
        double ss[MAXITER], as[MAXITER];
        /* The views of a cpu home are fixed: collect them once, so Adam
         * alone runs over the very buffers the pass uses. */
        zc_opt_view *views = calloc((size_t)m.nchunks, sizeof *views);
        for (int k = 0; k < m.nchunks; k++)
            if (h->ops->pass_begin(h, &ks[k], 1) != ZC_OK ||
                h->ops->acquire(h, k, &views[k]) != ZC_OK ||
                h->ops->release(h, k, false) != ZC_OK || h->ops->pass_end(h) != ZC_OK)
                die("cpu home views");
        home_pass(h, &m, ks, NULL, NULL);
        for (int it = 0; it < o.iters; it++) {
            double t0 = now_s();
            for (int k = 0; k < m.nchunks; k++)
                adam_chunk(&m, k, views[k].master, views[k].m, views[k].v, NULL, NULL);
            as[it] = now_s() - t0;
            ss[it] = home_pass(h, &m, ks, NULL, NULL);
        }
        free(views);
        zc__opt_home_destroy(h);
        emit(&o, "cpu", false, median(ss, o.iters), 0, median(as, o.iters), 0, 0);
    }
    free(ks);
    free(m.grad);
    free(m.pout);
    free(m.n);
    free(m.base);
    return 0;
}
