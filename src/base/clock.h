/* The monotonic clock in seconds (internal).
 *
 * Every wait, timeout and timer in zeroc measures intervals, never dates, so
 * it reads CLOCK_MONOTONIC: a wall-clock step (NTP, a user setting the date)
 * must not stretch a timeout or make a waited time negative. */
#ifndef ZC_BASE_CLOCK_H
#define ZC_BASE_CLOCK_H

#include <time.h>

/* Seconds since an arbitrary fixed point; only differences mean anything. */
static inline double zc__now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
