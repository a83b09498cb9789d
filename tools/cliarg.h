/* Strict parsing of numbers given on a command line.
 *
 * Shared by the zeroc CLI, the benches (bench/) and the examples (examples/):
 * it is plain C17 with no dependency on the engine, so an example that uses
 * only the public API can link it too.
 *
 * The rule every flag follows: the whole text is the number (no leading or
 * trailing blanks, no trailing junk), it is finite, whole where it counts
 * something, and inside the range the caller states. Nothing is clamped,
 * rounded or replaced by a default: a value that does not satisfy the rule is
 * refused with a message that names the flag, repeats the value and gives the
 * range, e.g.
 *   --n '1e30' is out of range: expected a whole number in [1, 17179869184]
 * Whole numbers are parsed exactly (no trip through double), so 2^53 + 1 and
 * 1.5K are what they say; "5e8" and "1.5K" are accepted because DeepSpeed
 * configs and people write sizes that way. */
#ifndef ZC_TOOLS_CLIARG_H
#define ZC_TOOLS_CLIARG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Flags for zc__arg_u64 / zc__arg_i64 / zc__arg_u64_list. */
enum {
    /* Accept a binary suffix: K, M, G, T (x 2^10 .. 2^40), optionally followed
     * by "i", "B" or "iB" (1M, 1MB, 1MiB are all 2^20). */
    ZC_ARG_SUFFIX = 1u << 0,
};

/* Longest message the functions below write (including the terminator). */
#define ZC_ARG_ERRLEN 320

/* Parses `text` as a whole number in [lo, hi]. On success stores it in *out
 * and returns true; otherwise writes a message naming `flag` into err (up to
 * errlen bytes) and returns false, leaving *out unchanged. */
bool zc__arg_u64(const char *flag, const char *text, uint64_t lo, uint64_t hi, unsigned flags,
                 uint64_t *out, char *err, size_t errlen);
bool zc__arg_i64(const char *flag, const char *text, int64_t lo, int64_t hi, unsigned flags,
                 int64_t *out, char *err, size_t errlen);
/* zc__arg_i64 for a value that is stored in an int. */
bool zc__arg_int(const char *flag, const char *text, int lo, int hi, int *out, char *err,
                 size_t errlen);

/* Parses `text` as a finite decimal number in [lo, hi] (hex floats, "inf" and
 * "nan" are refused). Same contract as zc__arg_u64. */
bool zc__arg_double(const char *flag, const char *text, double lo, double hi, double *out,
                    char *err, size_t errlen);

/* Parses a comma-separated list of whole numbers, each in [lo, hi], into
 * out[0..max). Empty items ("1,,2", a trailing comma) and more than `max`
 * items are refused. On success stores the count in *n; on failure leaves
 * *n and out unchanged. */
bool zc__arg_u64_list(const char *flag, const char *text, uint64_t lo, uint64_t hi,
                      unsigned flags, uint64_t *out, int max, int *n, char *err, size_t errlen);

/* Memory a new allocation can use without swapping or the OOM killer
 * (MemAvailable of /proc/meminfo, else the free pages). A size computed from
 * flags is held to it before it is allocated: allocations are overcommitted,
 * so an absurd size would otherwise fail only when touched, as a kill.
 * Returns false when the figure is unknown. */
bool zc__mem_available(uint64_t *bytes);

/* a * b and a + b, or false when the result does not fit (checked arithmetic
 * for sizes computed from flags). */
static inline bool zc__mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool zc__add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

#endif
