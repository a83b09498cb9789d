/* The monotonic clock in seconds (internal).
 *
 * Every wait, timeout and timer in zeroc measures intervals, never dates, so
 * it reads CLOCK_MONOTONIC: a wall-clock step (NTP, a user setting the date)
 * must not stretch a timeout or make a waited time negative. */
#ifndef ZC_BASE_CLOCK_H
#define ZC_BASE_CLOCK_H

#include <math.h>
#include <stdint.h>
#include <time.h>

/* Seconds since an arbitrary fixed point; only differences mean anything. */
static inline double zc__now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The CLOCK_MONOTONIC time `seconds` from now, for pthread_cond_timedwait on
 * a condition variable whose clock attribute is CLOCK_MONOTONIC. Checked:
 * a negative or NaN interval is now, and a deadline past what time_t holds
 * (an interval of 1e30 s, or infinity) is the largest time_t, never a wrapped
 * one in the past. Timeouts read from the environment are bounded long before
 * that (src/base/env.h); this keeps a wait correct whatever it is given. */
static inline struct timespec zc__deadline_in(double seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    if (!(seconds > 0))
        return ts;
    /* time_t is a signed 64-bit integer on every platform zeroc builds for;
     * the monotonic clock counts from boot, far below 2^62, so any interval
     * under 2^62 s adds without overflow (doubles up to it convert exactly
     * enough: their whole part is an integer below 2^62). */
    const double whole = floor(seconds);
    if (whole >= 4611686018427387904.0 /* 2^62 */) {
        ts.tv_sec = (time_t)INT64_MAX;
        ts.tv_nsec = 999999999L;
        return ts;
    }
    long nsec = ts.tv_nsec + (long)((seconds - whole) * 1e9);
    ts.tv_sec += (time_t)whole;
    if (nsec >= 1000000000L) {
        ts.tv_sec++;
        nsec -= 1000000000L;
    }
    ts.tv_nsec = nsec;
    return ts;
}

_Static_assert(sizeof(time_t) == sizeof(int64_t), "zc__deadline_in assumes a 64-bit time_t");

#endif
