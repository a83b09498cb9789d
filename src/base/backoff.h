/* Waiting by polling without holding a core (internal).
 *
 * Some waits can only poll: Open MPI's shared-memory transfers move when a
 * rank calls MPI_Test, and no call blocks until they do. A poller that spins
 * for the whole wait keeps its core busy while the rank it waits for - on a
 * machine whose cores are shared with other jobs, or with more ranks than
 * cores - needs that core, and the kernel's fair share counts the spin as
 * the waiter's: the waiter then computes its own next step at a lower
 * priority. So a wait spins only briefly (on an idle machine the answer
 * mostly comes within microseconds, and a sleep costs a timer wake-up of
 * 50-100 us) and then naps, in nanosleep, each nap an eighth of the time
 * waited so far, from ZC_BACKOFF_NAP_MIN_NS up to ZC_BACKOFF_NAP_MAX_NS.
 * The answer is then seen at most an eighth (plus the shortest nap) after
 * it came - a peer 2 ms late costs 2.25 ms, not the 3-4 ms of naps that
 * double - and a long wait costs a wake-up per millisecond: 2-3% of a core
 * where a nanosleep costs ~20 us of CPU (a virtual machine's timer), well
 * under 1% elsewhere.
 *
 * Not sched_yield: with another process runnable on the core it hands the
 * core away for that process's whole time slice (milliseconds) and counts
 * the yielder as having run, while a nap ends at its timer and a task that
 * slept is placed ahead of CPU-bound ones when it wakes.
 *
 * Progress - a request completed, a poll that moved data - starts a new
 * spin: a transfer that moves in pieces keeps being driven at full speed.
 * The caller may lengthen that spin to the time the progress itself took,
 * up to ZC_BACKOFF_SPIN_MAX_S: ranks exchanging equal halves finish their
 * copies at about the same time, so a rank that spent 300 us copying its
 * half expects the peer's signal within about that, and a nap there would
 * only add its length to the collective.
 *
 * Usage:
 *   zc_backoff b;
 *   zc__backoff_init(&b);
 *   for (;;) {
 *       poll; if done: break;
 *       if (moved something) zc__backoff_progress(&b, seconds it took);
 *       double now = zc__backoff_idle(&b);   // spins (returns at once) or naps
 *       if (now > deadline) fail;
 *   }
 */
#ifndef ZC_BASE_BACKOFF_H
#define ZC_BASE_BACKOFF_H

#include <stdint.h>

#define ZC_BACKOFF_SPIN_S 50e-6           /* spin this long after progress */
#define ZC_BACKOFF_SPIN_MAX_S 1e-3        /* ... or as long as it took, up to this */
#define ZC_BACKOFF_NAP_MIN_NS 50000L      /* the shortest nap (the timer slack) */
#define ZC_BACKOFF_NAP_MAX_NS 1000000L    /* the longest */
#define ZC_BACKOFF_NAP_FRACTION 8         /* a nap is 1/8 of the time waited */

typedef struct zc_backoff {
    double spin_from; /* start of the current spin: the last progress */
    double spin_s;    /* length of the current spin */
    long nap_ns;      /* the last nap, 0 while spinning */
    uint64_t naps;    /* naps taken so far (tests and diagnostics) */
} zc_backoff;

/* A new wait: spinning, from now. */
void zc__backoff_init(zc_backoff *b);

/* Something moved: spin again from now, for ZC_BACKOFF_SPIN_S or `took`
 * seconds (the time the progress took; 0 when unknown), whichever is
 * longer, at most ZC_BACKOFF_SPIN_MAX_S; the time waited, and so the naps,
 * start again from zero. */
void zc__backoff_progress(zc_backoff *b, double took);

/* One idle turn of the wait: returns at once while the spin lasts, else
 * naps for 1/ZC_BACKOFF_NAP_FRACTION of the time since the spin began,
 * within [ZC_BACKOFF_NAP_MIN_NS, ZC_BACKOFF_NAP_MAX_NS]. Returns the
 * monotonic time after the turn (zc__now_s), for the caller's deadline
 * check; a nap interrupted by a signal just ends early. */
double zc__backoff_idle(zc_backoff *b);

#endif
