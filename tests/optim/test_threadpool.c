/* The host thread pool under the optimizer: results independent of the thread
 * count (bitwise), concurrent submitters, ZC_CPU_THREADS, clean teardown, a
 * size that follows the CPU affinity, idle workers that sleep. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>

#include "adam_case.h"
#include "helpers.h"
#include "optim/adam_isa.h"
#include "optim/threadpool.h"

Test(optim_pool, bitwise_identical_across_thread_counts)
{
    uint64_t rng = t_seed("optim_pool/bitwise_identical_across_thread_counts");
    int cores = zc__pool_physical_cores();
    int counts[3] = {2, 3, cores}; /* 3: an uneven split of the tiles */
    size_t n = (3u << 20) + 13;
    for (int variant = 0; variant < zc__adam_variant_count(); variant++) {
        if (!zc__adam_variant_usable(variant, NULL))
            continue;
        for (int layout = 0; layout < 2; layout++) {
            ta_case c;
            ta_case_init(&c, &rng, n, ZC_DTYPE_BF16, ZC_DTYPE_BF16, layout, false, true);
            zc_adam_hparams hp = ta_random_hparams(&rng, true, true);
            zc_adam_coeffs co = zc__adam_coeffs(&hp, 5);
            /* The test copy's inputs, to restart from for each thread count. */
            float *orig = malloc(3 * n * sizeof(float));
            cr_assert(orig);
            float *bufs[3] = {c.test.master, c.test.m, c.test.v};
            for (int b = 0; b < 3; b++)
                memcpy(orig + (size_t)b * n, bufs[b], n * sizeof(float));
            cr_assert_eq(zc__adam_host_run(&c.ref, &co, variant, 1), ZC_OK, "%s", zc_last_error());
            for (int k = 0; k < 3; k++) {
                for (int b = 0; b < 3; b++)
                    memcpy(bufs[b], orig + (size_t)b * n, n * sizeof(float));
                memset(c.test.param_out, 0, n * 2);
                cr_assert_eq(zc__adam_host_run(&c.test, &co, variant, counts[k]), ZC_OK, "%s",
                             zc_last_error());
                char what[96];
                snprintf(what, sizeof what, "%s, %d threads vs 1, layout %d",
                         zc__adam_variant(variant)->name, counts[k], layout);
                ta_case_assert_bitwise(&c, what);
            }
            free(orig);
            ta_case_free(&c);
        }
    }
    if (cores >= 2)
        cr_assert_geq(zc__pool_live_workers(), 1, "a multi-threaded run started no worker");
    zc__pool_shutdown();
    cr_assert_eq(zc__pool_live_workers(), 0);
    t_assert_no_leaks();
}

typedef struct conc_arg {
    ta_case cases[4];
    zc_adam_coeffs co;
    zc_status st[4];
} conc_arg;

static void conc_rank(int rank, void *p)
{
    conc_arg *a = p;
    for (int rep = 0; rep < 5 && a->st[rank] == ZC_OK; rep++)
        a->st[rank] = zc__adam_host_run(&a->cases[rank].test, &a->co, -1, 2);
}

/* Ranks driven from several threads share the pool: one gets it, the others
 * run their shards themselves; every result must equal the reference. */
Test(optim_pool, concurrent_submitters)
{
    uint64_t rng = t_seed("optim_pool/concurrent_submitters");
    conc_arg *a = calloc(1, sizeof *a);
    cr_assert(a);
    zc_adam_hparams hp = ta_random_hparams(&rng, false, true);
    a->co = zc__adam_coeffs(&hp, 9);
    for (int r = 0; r < 4; r++)
        ta_case_init(&a->cases[r], &rng, 300000 + (size_t)r * 1001, ZC_DTYPE_F16, ZC_DTYPE_F16, 0,
                     false, true);
    t_run_ranks(4, conc_rank, a);
    for (int r = 0; r < 4; r++) {
        cr_assert_eq(a->st[r], ZC_OK);
        for (int rep = 0; rep < 5; rep++)
            zc__adam_scalar(&a->cases[r].ref, &a->co);
        ta_case_compare(&a->cases[r], "concurrent rank");
        ta_case_free(&a->cases[r]);
    }
    free(a);
    zc__pool_shutdown();
    cr_assert_eq(zc__pool_live_workers(), 0);
    t_assert_no_leaks();
}

static _Atomic int hits[8];

static void count_part(void *arg, int part, int nparts)
{
    (void)arg;
    cr_assert_eq(nparts, 8);
    hits[part]++;
}

Test(optim_pool, cpu_threads_override_and_restart)
{
    int n = 0;
    setenv("ZC_CPU_THREADS", "3", 1);
    cr_assert_eq(zc__pool_default_threads(&n), ZC_OK);
    cr_assert_eq(n, 3);
    setenv("ZC_CPU_THREADS", "many", 1);
    n = -1;
    cr_assert_eq(zc__pool_default_threads(&n), ZC_ERR_CONFIG,
                 "a bad ZC_CPU_THREADS is an error, not the core count");
    cr_assert_eq(n, -1);
    cr_assert(strstr(zc_last_error(), "ZC_CPU_THREADS='many'"), "%s", zc_last_error());
    unsetenv("ZC_CPU_THREADS");
    cr_assert_eq(zc__pool_default_threads(&n), ZC_OK);
    cr_assert_eq(n, zc__pool_physical_cores());
    cr_assert_geq(zc__pool_physical_cores(), 1);

    /* The pool restarts after a shutdown and runs every part exactly once. */
    for (int round = 0; round < 3; round++) {
        for (int k = 0; k < 8; k++)
            hits[k] = 0;
        cr_assert_eq(zc__pool_run(8, count_part, NULL, NULL), ZC_OK);
        for (int k = 0; k < 8; k++)
            cr_assert_eq(hits[k], 1, "round %d: part %d ran %d times", round, k, (int)hits[k]);
        cr_assert_geq(zc__pool_live_workers(), 1);
        zc__pool_shutdown();
        cr_assert_eq(zc__pool_live_workers(), 0);
    }
    t_assert_no_leaks();
}

/* mpirun binds each rank to one core by default: the pool must count the
 * cores the rank may run on, not the machine's, or it starts a worker that
 * shares the rank's one core with it. */
Test(optim_pool, sized_by_the_cpu_affinity)
{
    cpu_set_t all, one;
    cr_assert_eq(sched_getaffinity(0, sizeof all, &all), 0);
    if (CPU_COUNT(&all) < 2)
        cr_skip_test("this process may run on one CPU only: nothing to restrict");
    int first = 0;
    while (!CPU_ISSET(first, &all))
        first++;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    /* Before the pool's first use: it reads the topology once. The calling
     * thread's affinity is what the workers it starts inherit. */
    cr_assert_eq(sched_setaffinity(0, sizeof one, &one), 0);
    cr_assert_eq(zc__pool_physical_cores(), 1, "bound to CPU %d, the pool counts %d cores",
                 first, zc__pool_physical_cores());
    int n = 0;
    unsetenv("ZC_CPU_THREADS");
    cr_assert_eq(zc__pool_default_threads(&n), ZC_OK);
    cr_assert_eq(n, 1);
    /* An explicit count still splits the job (and still runs it right). */
    for (int k = 0; k < 8; k++)
        hits[k] = 0;
    cr_assert_eq(zc__pool_run(8, count_part, NULL, NULL), ZC_OK);
    for (int k = 0; k < 8; k++)
        cr_assert_eq(hits[k], 1, "part %d ran %d times", k, (int)hits[k]);
    zc__pool_shutdown();
    t_assert_no_leaks();
}

/* Between jobs the workers sleep on the condition variable after a spin of
 * 20 us. Held by where they are, not by a CPU time (which depends on what
 * else the cores run): every live worker gets to the condition variable's
 * wait - a spinning worker never would, and the test would not end - and
 * in the next 300 ms none wakes there without a job (a worker that polled
 * on a timer would). */
Test(optim_pool, idle_workers_sleep)
{
    for (int k = 0; k < 8; k++)
        hits[k] = 0;
    cr_assert_eq(zc__pool_run(8, count_part, NULL, NULL), ZC_OK);
    int live = zc__pool_live_workers();
    cr_assert_geq(live, 1);
    uint64_t woken = 0, woken_after = 0;
    while (zc__pool_sleeping_workers(&woken) < live)
        nanosleep(&(struct timespec){0, 1000000L}, NULL);
    nanosleep(&(struct timespec){0, 300 * 1000 * 1000}, NULL);
    const int asleep = zc__pool_sleeping_workers(&woken_after);
    cr_assert_eq(woken_after, woken, "idle workers woke %llu times in 300 ms without a job",
                 (unsigned long long)(woken_after - woken));
    cr_assert_eq(asleep, live, "%d of %d idle workers are awake", live - asleep, live);
    zc__pool_shutdown();
    t_assert_no_leaks();
}
