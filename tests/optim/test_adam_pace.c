/* Host Adam paced to the I/O (optim/adam_pace.h): the rule's thread counts
 * worked out by hand, the counts a pass gets from its clock (a pass waiting
 * for reads keeps one thread, one that is all Adam climbs to the pool's
 * size), and results bitwise those of zc__adam_host whatever the counts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "adam_case.h"
#include "helpers.h"
#include "optim/adam_isa.h"
#include "optim/adam_pace.h"
#include "optim/threadpool.h"

/* threads = the smallest t in [1, T-1] with 2 A <= t W, else T. */
Test(optim_pace, rule_by_hand)
{
    const struct {
        int T;
        double A, W;
        int want;
    } cases[] = {
        {1, 5.0, 1.0, 1},   /* one thread is all there is */
        {0, 5.0, 1.0, 1},   /* T < 1 counts as 1 */
        {2, 0.0, 0.0, 1},   /* nothing measured yet: 0 <= 0 */
        {2, 0.4, 1.0, 1},   /* Adam 0.4 of the pass on 1 thread: within half */
        {2, 0.5, 1.0, 1},   /* exactly half */
        {2, 0.6, 1.0, 2},   /* more than half on 1: both */
        {4, 3.0, 2.0, 3},   /* 6 <= 3 * 2 */
        {4, 3.1, 2.0, 4},   /* 6.2 > 3 * 2: T */
        {16, 1.6, 1.0, 4},  /* 3.2 <= 4 */
        {16, 7.6, 1.0, 16}, /* 15.2 > 15 */
        {8, NAN, 1.0, 1},   /* NaN A counts as 0 */
        {8, 1.0, NAN, 8},   /* NaN W counts as 0: 2 > 0 for every t */
        {8, -1.0, 0.0, 1},  /* negative A counts as 0 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_expect_eq(zc__adam_pace_threads(cases[i].T, cases[i].A, cases[i].W), cases[i].want,
                     "T %d, A %g, W %g: got %d threads, want %d", cases[i].T, cases[i].A,
                     cases[i].W, zc__adam_pace_threads(cases[i].T, cases[i].A, cases[i].W),
                     cases[i].want);
}

/* The pass's clock: the readings the pace takes, in order (the start and the
 * end of each call). */
static const double *fake_readings;
static int fake_next, fake_count;
static double fake_now(void)
{
    cr_assert_lt(fake_next, fake_count, "the pace read the clock more often than expected");
    return fake_readings[fake_next++];
}

Test(optim_pace, threads_follow_the_pass_and_results_stay_bitwise)
{
    cr_assert_eq(setenv("ZC_CPU_THREADS", "4", 1), 0);
    uint64_t rng = t_seed("optim_pace/threads_follow_the_pass_and_results_stay_bitwise");
    const size_t piece = (size_t)1 << 18, n = 7 * piece + 5; /* the last piece uneven */
    ta_case c;
    ta_case_init(&c, &rng, n, ZC_DTYPE_F32, ZC_DTYPE_BF16, 1, false, true);
    zc_adam_hparams hp = ta_random_hparams(&rng, true, true);
    zc_adam_coeffs co = zc__adam_coeffs(&hp, 3);
    cr_assert_eq(zc__adam_host(&c.ref, &co), ZC_OK, "%s", zc_last_error());

    /* Begin at 0. Calls 1-5 are all Adam (each 1 s, no gap): A after each
     * call 1, 3, 6, 10, 14 thread-seconds at W 1..5, so the threads climb
     * 1 (0 <= 0), 2 (2 <= 2 * 1), 3 (6 <= 3 * 2), 4 (12 > 3 * 3: T), 4.
     * Then the pass waits for a read until 40: 2 * 14 <= 1 * 40, one thread.
     * The last piece has no I/O beside it (the pass's last write done): all
     * four, though the rule alone would give one. */
    static const double readings[] = {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 40, 41, 41, 42};
    const int want[] = {1, 2, 3, 4, 4, 1, 4};
    const bool io[] = {true, true, true, true, true, true, false};
    fake_readings = readings;
    fake_next = 0;
    fake_count = (int)(sizeof readings / sizeof readings[0]);

    zc_adam_pace p;
    cr_assert_eq(zc__adam_pace_begin(&p), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(p.max_threads, 4, "T comes from ZC_CPU_THREADS");
    p.now = fake_now;
    p.begin_s = p.now();
    for (int k = 0; k < 7; k++) {
        const size_t lo = (size_t)k * piece, hi = k == 6 ? n : lo + piece;
        zc_adam_shard s = zc__adam_shard_slice(&c.test, lo, hi);
        cr_assert_eq(zc__adam_pace_run(&p, &s, &co, io[k]), ZC_OK, "%s", zc_last_error());
        cr_expect_eq(p.last_threads, want[k], "call %d ran on %d threads, want %d", k + 1,
                     p.last_threads, want[k]);
    }
    cr_assert_eq(fake_next, fake_count, "every reading used");
    cr_expect_eq(p.calls, 7);
    cr_expect_eq(p.calls_below, 4, "calls 1, 2, 3 and 6 ran below T");
    /* A = 14 + 1 (call 6: 1 s on 1 thread) + 4 (call 7) over 7 s of Adam. */
    cr_expect_float_eq(p.thread_s, 19.0, 1e-12);
    cr_expect_float_eq(zc__adam_pace_mean_threads(&p), 19.0 / 7.0, 1e-12);
    ta_case_assert_bitwise(&c, "paced pieces vs one zc__adam_host call");
    ta_case_free(&c);

    /* A bad ZC_CPU_THREADS fails the pass's start, naming it. */
    cr_assert_eq(setenv("ZC_CPU_THREADS", "0", 1), 0);
    cr_expect_eq(zc__adam_pace_begin(&p), ZC_ERR_CONFIG);
    cr_expect(strstr(zc_last_error(), "ZC_CPU_THREADS"), "%s", zc_last_error());
    unsetenv("ZC_CPU_THREADS");
    zc__pool_shutdown();
    t_assert_no_leaks();
}
