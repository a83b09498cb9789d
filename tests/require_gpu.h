/* The GPU tests' way of saying that what they need is not there.
 *
 * Normally a GPU test without a CUDA device (or without the build feature it
 * exercises, such as NCCL) skips and says why, so CI without a GPU stays
 * green. With ZC_REQUIRE_GPU=1 the same test fails instead, with the same
 * reason: on a machine that is meant to have a GPU, a run in which nothing
 * ran must not look like a pass (scripts/gpu_check.sh sets it). Tests that
 * need more than one GPU are the exception: on a machine with one GPU they
 * still skip (cr_skip_test), since nothing there can make them run; with no
 * GPU at all they fail like the others.
 *
 * ZC_REQUIRE_GPU is "1", or "0" / empty / unset; any other value fails the
 * test naming the variable rather than guessing. */
#ifndef ZC_TESTS_REQUIRE_GPU_H
#define ZC_TESTS_REQUIRE_GPU_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Whether ZC_REQUIRE_GPU=1; fails the calling test on a malformed value. */
static inline bool gpu_required(void)
{
    const char *v = getenv("ZC_REQUIRE_GPU");
    if (!v || !*v || !strcmp(v, "0"))
        return false;
    if (!strcmp(v, "1"))
        return true;
    cr_assert_fail("ZC_REQUIRE_GPU='%s': expected 1 (fail when the GPU test cannot run) or 0", v);
    return true; /* not reached */
}

/* Skips the test with the reason, or fails it under ZC_REQUIRE_GPU=1. */
#define gpu_unavailable(...)                                                   \
    do {                                                                       \
        if (gpu_required())                                                    \
            cr_assert_fail("ZC_REQUIRE_GPU=1 but the test cannot run: " __VA_ARGS__); \
        cr_skip_test(__VA_ARGS__);                                             \
    } while (0)

#endif
