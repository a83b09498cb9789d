/* Size arithmetic that says when it overflows (internal).
 *
 * Sizes built from configuration values (chunk elements times element bytes,
 * rounded up to an I/O alignment) must not wrap around silently: a wrapped
 * size allocates or reads too little. Each helper returns false on overflow
 * and leaves *out unchanged then. */
#ifndef ZC_BASE_CHECKED_H
#define ZC_BASE_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* *out = v rounded up to a multiple of a (a > 0). */
static inline bool zc__round_up(size_t v, size_t a, size_t *out)
{
    size_t s;
    if (__builtin_add_overflow(v, a - 1, &s))
        return false;
    *out = s / a * a;
    return true;
}

/* *out = n elements of elem bytes, rounded up to a multiple of align. */
static inline bool zc__aligned_bytes(size_t n, size_t elem, size_t align, size_t *out)
{
    size_t b;
    if (__builtin_mul_overflow(n, elem, &b))
        return false;
    return zc__round_up(b, align, out);
}

/* The most optimizer steps an engine counts (taken, skipped or applied), and
 * the most a loss scaler's iteration counter reaches: far below INT64_MAX, so
 * a difference or sum of two counters (steps since an overflow, the progress
 * line's steps since a mark) cannot overflow either. zc_step refuses to count
 * past it, and a checkpoint whose counters exceed it is refused on load. */
#define ZC_STEPS_MAX ((int64_t)1 << 62)

/* ++*counter, or false (counter unchanged) when it is at ZC_STEPS_MAX. */
static inline bool zc__count_step(int64_t *counter)
{
    int64_t next;
    if (__builtin_add_overflow(*counter, 1, &next) || next > ZC_STEPS_MAX)
        return false;
    *counter = next;
    return true;
}

#endif
