/* Shared test helpers (t_ prefix). */
#ifndef ZC_TESTS_HELPERS_H
#define ZC_TESTS_HELPERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <criterion/criterion.h>

#include "base/alloc.h"

/* Asserts that every allocator kind is back to zero bytes and zero live
 * allocations (call after destroying everything a test created). */
#define t_assert_no_leaks()                                                                  \
    do {                                                                                     \
        for (int t_k_ = 0; t_k_ < ZC_MEMKIND__COUNT; t_k_++) {                               \
            cr_assert_eq(zc__mem_global_bytes((zc_mem_kind)t_k_), 0,                         \
                         "allocator kind %d still holds %lld bytes", t_k_,                   \
                         (long long)zc__mem_global_bytes((zc_mem_kind)t_k_));                \
            cr_assert_eq(zc__mem_global_count((zc_mem_kind)t_k_), 0,                         \
                         "allocator kind %d still holds %lld allocations", t_k_,             \
                         (long long)zc__mem_global_count((zc_mem_kind)t_k_));                \
        }                                                                                    \
    } while (0)

/* A seed for randomized tests: ZC_TEST_SEED if set, else time-based. The
 * seed is printed so a failure can be reproduced. */
uint64_t t_seed(const char *test_name);

/* splitmix64: deterministic pseudo-random stream. */
uint64_t t_rand_u64(uint64_t *state);
/* Uniform double in [0, 1). */
double t_rand_unit(uint64_t *state);
/* Uniform float in [lo, hi). */
float t_rand_range(uint64_t *state, float lo, float hi);

/* A pure function of its arguments, uniform in [-1, 1): deterministic test
 * data per (rank, step, micro-step, parameter, element); salt separates
 * the streams of different tests. */
double t_noise(uint64_t salt, int rank, int step, int micro, int param, int64_t i);

/* Distance in units in the last place between two floats (0 when bitwise
 * equal; NaN vs NaN counts as equal; +0 and -0 are 0 apart). */
uint32_t t_ulp_diff_f32(float a, float b);

/* Whether this process maps a file whose /proc/self/maps line contains
 * `name` (a library loaded or not). */
bool t_mapped(const char *name);

/* Removes a test's own temporary tree (links are removed, never followed);
 * asserts it went. */
void t_rm_tree(const char *dir);

/* Runs fn(rank, arg) on `world` threads and joins them. */
void t_run_ranks(int world, void (*fn)(int rank, void *arg), void *arg);

#endif
