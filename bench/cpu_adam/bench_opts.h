/* What the host optimizer benches (bench/cpu_adam: cpu_adam.c, lp.c, ew.c)
 * share: their common flags, the variant list, timing, the static split of
 * zc__adam_host_run, and the measurement of a kernel against its streaming
 * ceiling. */
#ifndef ZC_BENCH_CPU_ADAM_BENCH_OPTS_H
#define ZC_BENCH_CPU_ADAM_BENCH_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define ZC_BENCH_MAX_N_LIST 8
#define ZC_BENCH_MAX_THREADS 64
#define ZC_BENCH_MAX_VARIANTS 8
#define ZC_BENCH_MAX_REPS 200 /* the largest any bench allows */
#define ZC_BENCH_MAX_CEIL 4   /* ceiling loops one measurement takes the fastest of */

/* The flags every bench takes: --n LIST, --variant NAME, --threads LIST,
 * --reps R. */
typedef struct zc_bench_opts {
    size_t ns[ZC_BENCH_MAX_N_LIST];
    int nn;
    int reps; /* 0 when --reps was not given and the bench has no default */
    int threads[ZC_BENCH_MAX_THREADS];
    int nthr; /* 0 until zc__bench_resolve fills 1..physical cores */
    const char *variant; /* --variant, NULL: every usable one */
    int variants[ZC_BENCH_MAX_VARIANTS]; /* zc__bench_resolve: the variants to run */
    int nv;
    int cores; /* physical cores (zc__bench_resolve) */
    uint64_t max_n; /* --n's upper bound */
    int max_reps;   /* --reps's upper bound, <= ZC_BENCH_MAX_REPS */
} zc_bench_opts;

/* Handles argv[*i] when it is one of the common flags (its value in
 * argv[*i + 1], *i moved past it). Returns 1 when it was (and the value
 * parsed), 0 when it is not a common flag or lacks its value (the caller's
 * own flag, or its "unknown or incomplete option" error), -1 after printing
 * "PROG: <the parser's message naming the flag>" for a value the strict
 * parsers (tools/cliarg.h) refuse: the caller exits 2. */
int zc__bench_opt(zc_bench_opts *o, int argc, char **argv, int *i, const char *prog);

/* The common flags' lines of a usage message. */
void zc__bench_opts_usage(FILE *f, const zc_bench_opts *o, const char *n_default,
                          const char *reps_default);

/* Fills the default thread counts (1..physical cores) and the variant list:
 * every variant this build and CPU run, or the one --variant names. Returns
 * 0; 1 after printing "PROG: variant NAME: <why>" when the named variant is
 * one this CPU or build cannot run; 2 after printing "PROG: no variant named
 * 'NAME'" when none has that name. */
int zc__bench_resolve(zc_bench_opts *o, const char *prog);

/* The largest of the --n values. */
size_t zc__bench_nmax(const zc_bench_opts *o);

/* Refuses buffers of `bytes_per_param` bytes for each of nmax parameters
 * that do not fit the address space or exceed 7/8 of the memory available
 * (allocations are overcommitted: too large a size would end in the OOM
 * killer, not an error). Returns 0; 2 after printing why for a size past
 * the address space, 1 for one past the memory. */
int zc__bench_check_memory(const char *prog, size_t nmax, unsigned bytes_per_param);

/* CLOCK_MONOTONIC in seconds. */
double zc__bench_now(void);

/* The median of v[0..n), n >= 1 (sorts v). */
double zc__bench_median(double *v, int n);

/* A JSON number, or null when v is not finite (a zero time on a tiny n would
 * otherwise print inf or nan, which is not JSON). */
typedef struct zc_jnum {
    char s[40];
} zc_jnum;
zc_jnum zc__bench_jnum(const char *fmt, double v);

/* Part k of nparts of [0, n) as zc__adam_host_run splits a shard: tiles of
 * ZC_ADAM_TILE elements, part k taking the contiguous tiles
 * [k*ntiles/nparts, (k+1)*ntiles/nparts). The ceiling loops run on the same
 * parts as the kernel, so each thread streams the memory the kernel's same
 * thread does. */
void zc__bench_range(size_t n, int k, int nparts, size_t *lo, size_t *hi);

/* Runs fn(ctx, lo, hi) on each part of [0, n) (zc__bench_range) with
 * `nthreads` threads of the host pool; `near` as zc__pool_run's. */
typedef void (*zc_bench_range_fn)(void *ctx, size_t lo, size_t hi);
void zc__bench_split(int nthreads, size_t n, zc_bench_range_fn fn, void *ctx, const void *near);

/* A kernel and its ceiling loops: kernel(ctx) runs one step (false after
 * printing why it failed); ceiling(ctx, q) runs ceiling loop q of nceil
 * (e.g. one per software-prefetch distance). */
typedef struct zc_bench_pair {
    bool (*kernel)(void *ctx);
    void (*ceiling)(void *ctx, int q);
    int nceil; /* 1..ZC_BENCH_MAX_CEIL */
    void *ctx;
} zc_bench_pair;

/* One warm-up, then `reps` repetitions (1..ZC_BENCH_MAX_REPS) of the kernel
 * followed by each ceiling loop, alternating so machine noise hits both
 * alike. *sec: the kernel's median; *ceil_sec: the fastest ceiling loop's
 * median. Returns false when the kernel failed. */
bool zc__bench_measure(const zc_bench_pair *p, int reps, double *sec, double *ceil_sec);

#endif
