/* The host optimizer benches' common flags, variant list, timing and
 * measurement loop (bench_opts.h). */
#include "bench/cpu_adam/bench_opts.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>

#include "cliarg.h"
#include "optim/adam_isa.h"
#include "optim/threadpool.h"

int zc__bench_opt(zc_bench_opts *o, int argc, char **argv, int *i, const char *prog)
{
    const char *a = argv[*i], *val = *i + 1 < argc ? argv[*i + 1] : NULL;
    char err[ZC_ARG_ERRLEN];
    if (!val)
        return 0;
    if (!strcmp(a, "--n")) {
        uint64_t v[ZC_BENCH_MAX_N_LIST];
        int k;
        if (!zc__arg_u64_list("--n", val, 1, o->max_n, ZC_ARG_SUFFIX, v, ZC_BENCH_MAX_N_LIST, &k,
                              err, sizeof err))
            goto bad;
        for (int q = 0; q < k; q++)
            o->ns[q] = (size_t)v[q]; /* <= max_n (2^34): fits */
        o->nn = k;
    } else if (!strcmp(a, "--variant")) {
        o->variant = val;
    } else if (!strcmp(a, "--threads")) {
        uint64_t v[ZC_BENCH_MAX_THREADS];
        int k;
        if (!zc__arg_u64_list("--threads", val, 1, ZC_POOL_MAX_THREADS, 0, v,
                              ZC_BENCH_MAX_THREADS, &k, err, sizeof err))
            goto bad;
        for (int q = 0; q < k; q++)
            o->threads[q] = (int)v[q];
        o->nthr = k;
    } else if (!strcmp(a, "--reps")) {
        if (!zc__arg_int("--reps", val, 1, o->max_reps, &o->reps, err, sizeof err))
            goto bad;
    } else {
        return 0;
    }
    (*i)++;
    return 1;
bad:
    fprintf(stderr, "%s: %s\n", prog, err);
    return -1;
}

void zc__bench_opts_usage(FILE *f, const zc_bench_opts *o, const char *n_default,
                          const char *reps_default)
{
    int log2 = 0;
    while (log2 < 63 && (UINT64_C(1) << log2) < o->max_n)
        log2++;
    fprintf(f,
            "  --n LIST        parameter counts, comma separated, K/M/G/T suffixes,\n"
            "                  each 1..2^%d (default %s)\n"
            "  --variant NAME  only this variant (scalar, avx2, avx512, avx512bf16)\n"
            "  --threads LIST  thread counts, each 1..%d (default 1..physical cores)\n"
            "  --reps R        timed repetitions per case, 1..%d (default %s)\n",
            log2, n_default, ZC_POOL_MAX_THREADS, o->max_reps, reps_default);
}

int zc__bench_resolve(zc_bench_opts *o, const char *prog)
{
    o->cores = zc__pool_physical_cores();
    if (!o->nthr)
        for (int t = 1; t <= o->cores && t <= ZC_BENCH_MAX_THREADS; t++)
            o->threads[o->nthr++] = t;
    o->nv = 0;
    for (int i = 0; i < zc__adam_variant_count() && o->nv < ZC_BENCH_MAX_VARIANTS; i++) {
        const char *why;
        const bool usable = zc__adam_variant_usable(i, &why);
        if (o->variant && strcmp(o->variant, zc__adam_variant(i)->name))
            continue;
        if (!usable) {
            if (o->variant) {
                fprintf(stderr, "%s: variant %s: %s\n", prog, o->variant, why);
                return 1;
            }
            continue;
        }
        o->variants[o->nv++] = i;
    }
    if (!o->nv) {
        fprintf(stderr, "%s: no variant named '%s'\n", prog, o->variant ? o->variant : "?");
        return 2;
    }
    return 0;
}

size_t zc__bench_nmax(const zc_bench_opts *o)
{
    size_t nmax = 0;
    for (int i = 0; i < o->nn; i++)
        nmax = o->ns[i] > nmax ? o->ns[i] : nmax;
    return nmax;
}

int zc__bench_check_memory(const char *prog, size_t nmax, unsigned bytes_per_param)
{
    uint64_t total, avail;
    size_t b4;
    if (__builtin_mul_overflow(nmax, (size_t)4, &b4) ||
        !zc__mul_u64(nmax, bytes_per_param, &total)) {
        fprintf(stderr, "%s: --n %zu: the buffers do not fit in the address space\n", prog, nmax);
        return 2;
    }
    /* An eighth is left to the rest of the machine. */
    if (zc__mem_available(&avail) && total > avail - avail / 8) {
        fprintf(stderr, "%s: --n %zu needs %.2f GiB of buffers (%u bytes per parameter); the "
                "machine has %.2f GiB available, of which it takes at most 7/8. Pass a smaller "
                "--n\n", prog, nmax, (double)total / 1073741824.0, bytes_per_param,
                (double)avail / 1073741824.0);
        return 1;
    }
    return 0;
}

double zc__bench_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double zc__bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

zc_jnum zc__bench_jnum(const char *fmt, double v)
{
    zc_jnum j;
    if (isfinite(v))
        snprintf(j.s, sizeof j.s, fmt, v);
    else
        snprintf(j.s, sizeof j.s, "null");
    return j;
}

void zc__bench_range(size_t n, int k, int nparts, size_t *lo, size_t *hi)
{
    const size_t ntiles = (n + ZC_ADAM_TILE - 1) / ZC_ADAM_TILE;
    const size_t t0 = ntiles * (size_t)k / (size_t)nparts;
    const size_t t1 = ntiles * (size_t)(k + 1) / (size_t)nparts;
    *lo = t0 * ZC_ADAM_TILE;
    *hi = t1 * ZC_ADAM_TILE < n ? t1 * ZC_ADAM_TILE : n;
}

typedef struct split_job {
    size_t n;
    zc_bench_range_fn fn;
    void *ctx;
} split_job;

static void split_part(void *arg, int k, int nparts)
{
    const split_job *j = arg;
    size_t lo, hi;
    zc__bench_range(j->n, k, nparts, &lo, &hi);
    if (lo < hi)
        j->fn(j->ctx, lo, hi);
}

void zc__bench_split(int nthreads, size_t n, zc_bench_range_fn fn, void *ctx, const void *near)
{
    split_job j = {.n = n, .fn = fn, .ctx = ctx};
    zc__pool_run(nthreads, split_part, &j, near);
}

bool zc__bench_measure(const zc_bench_pair *p, int reps, double *sec, double *ceil_sec)
{
    double ta[ZC_BENCH_MAX_REPS], ts[ZC_BENCH_MAX_CEIL][ZC_BENCH_MAX_REPS];
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
        const double t0 = zc__bench_now();
        if (!p->kernel(p->ctx))
            return false;
        const double t1 = zc__bench_now();
        if (r >= 0)
            ta[r] = t1 - t0;
        for (int q = 0; q < p->nceil; q++) {
            const double t2 = zc__bench_now();
            p->ceiling(p->ctx, q);
            if (r >= 0)
                ts[q][r] = zc__bench_now() - t2;
        }
    }
    *sec = zc__bench_median(ta, reps);
    *ceil_sec = zc__bench_median(ts[0], reps);
    for (int q = 1; q < p->nceil; q++) {
        const double x = zc__bench_median(ts[q], reps);
        *ceil_sec = x < *ceil_sec ? x : *ceil_sec;
    }
    return true;
}
