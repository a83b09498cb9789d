/* The polling backoff (src/base/backoff.h): the spin ends after its length,
 * the naps then double from 50 us up to 1 ms, progress restarts both with
 * the spin lengthened to what the progress took (clamped), and a long wait
 * costs its thread little CPU time. */
#include <math.h>
#include <time.h>

#include <criterion/criterion.h>

#include "base/backoff.h"
#include "base/clock.h"
#include "helpers.h"

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

Test(backoff, spins_then_naps_doubling_to_the_cap)
{
    zc_backoff b;
    zc__backoff_init(&b);
    const double t0 = b.spin_from;
    cr_assert_eq(b.spin_s, ZC_BACKOFF_SPIN_S);
    /* No nap while the spin lasts; the first nap comes once it has. */
    double t = t0;
    while (b.naps == 0)
        t = zc__backoff_idle(&b);
    cr_assert_geq(t - t0, ZC_BACKOFF_SPIN_S, "napped %.1f us into a %.0f us spin",
                  (t - t0) * 1e6, ZC_BACKOFF_SPIN_S * 1e6);
    /* The nap just taken was the shortest; each next one doubles, to 1 ms. */
    const long want[] = {100000, 200000, 400000, 800000, 1000000, 1000000, 1000000};
    cr_assert_eq(b.nap_ns, want[0]);
    for (size_t i = 1; i < sizeof want / sizeof want[0]; i++) {
        double before = zc__now_s();
        double after = zc__backoff_idle(&b);
        /* nanosleep sleeps at least what it was asked (no signal here). */
        cr_assert_geq(after - before, (double)want[i - 1] * 1e-9, "nap %zu", i);
        cr_assert_eq(b.nap_ns, want[i], "after nap %zu: next %ld ns, want %ld", i, b.nap_ns,
                     want[i]);
        cr_assert_eq(b.naps, (uint64_t)i + 1);
    }
}

Test(backoff, progress_restarts_the_spin_with_a_clamped_length)
{
    zc_backoff b;
    zc__backoff_init(&b);
    while (b.naps < 3)
        zc__backoff_idle(&b);
    cr_assert_gt(b.nap_ns, ZC_BACKOFF_NAP_MIN_NS);
    const struct { double took, spin; } cases[] = {
        {0, ZC_BACKOFF_SPIN_S},        {-1, ZC_BACKOFF_SPIN_S},
        {NAN, ZC_BACKOFF_SPIN_S},      {10e-6, ZC_BACKOFF_SPIN_S},
        {300e-6, 300e-6},              {ZC_BACKOFF_SPIN_MAX_S, ZC_BACKOFF_SPIN_MAX_S},
        {5.0, ZC_BACKOFF_SPIN_MAX_S},  {INFINITY, ZC_BACKOFF_SPIN_MAX_S},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        zc__backoff_progress(&b, cases[i].took);
        cr_assert_eq(b.spin_s, cases[i].spin, "took %g: spin %g, want %g", cases[i].took,
                     b.spin_s, cases[i].spin);
        cr_assert_eq(b.nap_ns, 0, "progress must stop the naps");
    }
    /* After progress the waiter spins again: no nap within the spin. */
    zc__backoff_progress(&b, 300e-6);
    const uint64_t naps = b.naps;
    const double from = b.spin_from;
    double t = from;
    while (b.naps == naps)
        t = zc__backoff_idle(&b);
    cr_assert_geq(t - from, 300e-6, "napped %.1f us into a 300 us spin", (t - from) * 1e6);
}

/* The point of it all: a waiter whose answer takes 300 ms leaves its core.
 * A spinning waiter would burn the whole 300 ms; the backoff spends the
 * spin (50 us) and a few microseconds per nap of up to 1 ms. */
Test(backoff, a_long_wait_costs_little_cpu)
{
    zc_backoff b;
    zc__backoff_init(&b);
    const double c0 = thread_cpu_s(), t0 = zc__now_s();
    double t = t0;
    while (t - t0 < 0.3)
        t = zc__backoff_idle(&b);
    const double cpu = thread_cpu_s() - c0;
    cr_assert_lt(cpu, 0.015, "waiting %.0f ms used %.1f ms of CPU (%llu naps)", (t - t0) * 1e3,
                 cpu * 1e3, (unsigned long long)b.naps);
    /* It napped (300 ms would be about 300 naps of 1 ms; fewer when the
     * machine is busy and each wake-up comes late). */
    cr_assert_geq(b.naps, 10);
}
