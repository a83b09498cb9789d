/* The polling backoff (src/base/backoff.h): the spin ends after its length,
 * the naps then are an eighth of the time waited, from 50 us up to 1 ms,
 * progress restarts both with the spin lengthened to what the progress took
 * (clamped), and a long wait naps no more often than that schedule says. */
#include <math.h>
#include <time.h>

#include <criterion/criterion.h>

#include "base/backoff.h"
#include "base/clock.h"
#include "helpers.h"

/* The nap an idle turn should take, given the time waited when it began. */
static double want_nap_s(double waited)
{
    double n = waited / ZC_BACKOFF_NAP_FRACTION;
    double lo = (double)ZC_BACKOFF_NAP_MIN_NS * 1e-9, hi = (double)ZC_BACKOFF_NAP_MAX_NS * 1e-9;
    return n < lo ? lo : n > hi ? hi : n;
}

Test(backoff, spins_then_naps_an_eighth_of_the_wait)
{
    zc_backoff b;
    zc__backoff_init(&b);
    const double t0 = b.spin_from;
    cr_assert_eq(b.spin_s, ZC_BACKOFF_SPIN_S);
    /* No nap while the spin lasts; the first nap comes once it has, and is
     * the shortest unless the thread was preempted for a while (an eighth
     * of 50 us is less): bounded by the time waited before and after. */
    double t = t0, before = t0;
    while (b.naps == 0) {
        before = zc__now_s();
        t = zc__backoff_idle(&b);
    }
    cr_assert_geq(t - t0, ZC_BACKOFF_SPIN_S, "napped %.1f us into a %.0f us spin",
                  (t - t0) * 1e6, ZC_BACKOFF_SPIN_S * 1e6);
    cr_assert_geq((double)b.nap_ns * 1e-9, want_nap_s(before - t0) * (1 - 1e-9));
    cr_assert_leq((double)b.nap_ns * 1e-9, want_nap_s(t - t0) * (1 + 1e-9));
    /* Each nap: an eighth of the time waited when it began (the clock is
     * read just before, so between the time waited at the previous turn's
     * end and at this turn's end), within the bounds; after 8 ms, the cap. */
    uint64_t naps = b.naps;
    while (t - t0 < 0.012) {
        before = zc__now_s();
        const double after = zc__backoff_idle(&b);
        cr_assert_eq(b.naps, ++naps, "every turn after the spin naps");
        const double nap = (double)b.nap_ns * 1e-9;
        cr_assert_geq(nap, want_nap_s(before - t0) * (1 - 1e-9), "nap %.1f us after %.2f ms",
                      nap * 1e6, (before - t0) * 1e3);
        cr_assert_leq(nap, want_nap_s(after - t0) * (1 + 1e-9), "nap %.1f us after %.2f ms",
                      nap * 1e6, (after - t0) * 1e3);
        /* nanosleep sleeps at least what it was asked (no signal here). */
        cr_assert_geq(after - before, nap, "slept %.1f us of a %.1f us nap",
                      (after - before) * 1e6, nap * 1e6);
        t = after;
    }
    zc__backoff_idle(&b);
    cr_assert_eq(b.nap_ns, ZC_BACKOFF_NAP_MAX_NS, "after %.1f ms of waiting", (t - t0) * 1e3);
}

Test(backoff, progress_restarts_the_spin_with_a_clamped_length)
{
    zc_backoff b;
    zc__backoff_init(&b);
    while (b.nap_ns <= ZC_BACKOFF_NAP_MIN_NS) /* napping longer than the shortest */
        zc__backoff_idle(&b);
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

/* The naps of a fresh wait until they reach the cap: the schedule above
 * with every nap exactly its length (a nap sleeps at least that, so a real
 * wait reaches the cap in at most this many). */
static int ramp_naps(void)
{
    double t = ZC_BACKOFF_SPIN_S;
    int n = 0;
    while (want_nap_s(t) < (double)ZC_BACKOFF_NAP_MAX_NS * 1e-9) {
        t += want_nap_s(t);
        n++;
    }
    return n;
}

/* The point of it all: a waiter whose answer takes 300 ms leaves its core -
 * it naps, a wake-up per nap, never more often than the schedule says. Held
 * by counting: every turn after the spin naps, once the time waited passes
 * 8 x the longest nap every nap is the longest, and the naps are at most
 * what the schedule fits in the time waited (each sleeps at least its
 * length; more would be shorter naps, a spin in disguise). What the naps
 * cost in CPU time depends on the machine: bench_mpi_comm's idle_wait
 * reports it next to a wait that spins. */
Test(backoff, a_long_wait_naps_on_the_schedule)
{
    zc_backoff b;
    zc__backoff_init(&b);
    const double t0 = b.spin_from, cap_s = (double)ZC_BACKOFF_NAP_MAX_NS * 1e-9;
    double t = t0;
    uint64_t turns = 0, spins = 0;
    while (t - t0 < 0.3) {
        const double before = zc__now_s();
        const uint64_t naps = b.naps;
        t = zc__backoff_idle(&b);
        turns++;
        if (b.naps == naps) {
            spins++;
            cr_assert_lt(t - t0, ZC_BACKOFF_SPIN_S, "a turn %.1f us into the wait did not nap",
                         (t - t0) * 1e6);
        } else if (before - t0 >= ZC_BACKOFF_NAP_FRACTION * cap_s) {
            cr_assert_eq(b.nap_ns, ZC_BACKOFF_NAP_MAX_NS, "a nap of %ld ns after %.1f ms",
                         b.nap_ns, (before - t0) * 1e3);
        }
    }
    cr_assert_eq(b.naps, turns - spins);
    const uint64_t most = (uint64_t)ramp_naps() + 1 + (uint64_t)((t - t0) / cap_s) + 1;
    cr_assert_geq(b.naps, 1, "waiting %.0f ms took no nap", (t - t0) * 1e3);
    cr_assert_leq(b.naps, most, "%llu naps in %.1f ms, more than the schedule's %llu",
                  (unsigned long long)b.naps, (t - t0) * 1e3, (unsigned long long)most);
}
