/* The record of enqueued work the CUDA backend puts in its errors
 * (src/device/optrack.c): per stream, the count, first and last operation
 * since the last successful wait; reuse of the least recently noted slot;
 * forgetting a destroyed stream; and the text, which the GPU test
 * gpu_device::fault_surfaces_at_the_wait_naming_the_work relies on. */
#include <string.h>

#include <criterion/criterion.h>

#include "device/optrack.h"
#include "helpers.h"
#include "zeroc/zeroc.h"

static char A, B, C; /* distinct stream handles */

Test(optrack, first_last_and_count_since_the_last_wait)
{
    zc_optrack t;
    zc__optrack_init(&t);
    char buf[512];
    zc__optrack_describe(&t, &A, 1, buf, sizeof buf);
    cr_assert(strstr(buf, "no zeroc work was pending on this stream"), "%s", buf);

    zc__optrack_note(&t, &A, "cudaMemsetAsync", -1, 4096);
    zc__optrack_describe(&t, &A, 1, buf, sizeof buf);
    cr_assert(strstr(buf, "1 operation, cudaMemsetAsync (4096 bytes)"), "%s", buf);

    zc__optrack_note(&t, &A, "cast kernel", ZC_DTYPE_BF16, 77);
    zc__optrack_note(&t, &A, "scale kernel", ZC_DTYPE_F32, 1000);
    zc__optrack_note(&t, &B, "cudaEventRecord", -1, 0);
    zc__optrack_describe(&t, &A, 1, buf, sizeof buf);
    cr_assert(strstr(buf, "3 operations, first cudaMemsetAsync (4096 bytes), last scale kernel "
                          "(fp32, 1000 elements)"),
              "%s", buf);
    cr_assert(strstr(buf, "CUDA_LAUNCH_BLOCKING=1"), "%s", buf);
    cr_assert_null(strstr(buf, "cudaEventRecord"), "another stream's work leaked in: %s", buf);

    /* Every stream with pending work, for a broken context. */
    zc__optrack_describe(&t, NULL, 0, buf, sizeof buf);
    cr_assert(strstr(buf, "3 operations") && strstr(buf, "1 operation, cudaEventRecord") &&
                  !strstr(buf, "cudaEventRecord (0 bytes)"),
              "%s", buf);

    /* A successful wait clears the stream's record; the next op is first. */
    zc__optrack_waited(&t, &A);
    zc__optrack_describe(&t, &A, 1, buf, sizeof buf);
    cr_assert(strstr(buf, "no zeroc work was pending"), "%s", buf);
    zc__optrack_note(&t, &A, "adam kernel", ZC_DTYPE_F16, 5);
    zc__optrack_describe(&t, &A, 1, buf, sizeof buf);
    cr_assert(strstr(buf, "1 operation, adam kernel (fp16, 5 elements)"), "%s", buf);

    /* The NULL (legacy) stream is a stream like any other. */
    zc__optrack_note(&t, NULL, "cudaMemcpyAsync D2H", -1, 8);
    zc__optrack_describe(&t, NULL, 1, buf, sizeof buf);
    cr_assert(strstr(buf, "cudaMemcpyAsync D2H (8 bytes)") && !strstr(buf, "adam"), "%s", buf);
    zc__optrack_destroy(&t);
}

Test(optrack, least_recently_noted_stream_is_reused_and_forget_clears)
{
    zc_optrack t;
    zc__optrack_init(&t);
    static char many[ZC_OPTRACK_STREAMS + 1];
    for (int i = 0; i < ZC_OPTRACK_STREAMS; i++)
        zc__optrack_note(&t, &many[i], "cast kernel", ZC_DTYPE_F32, (size_t)i);
    /* Touch the oldest so the second oldest becomes the victim. */
    zc__optrack_note(&t, &many[0], "scale kernel", ZC_DTYPE_F32, 1);
    zc__optrack_note(&t, &many[ZC_OPTRACK_STREAMS], "accumulate kernel", ZC_DTYPE_F32, 9);
    char buf[512];
    zc__optrack_describe(&t, &many[1], 1, buf, sizeof buf);
    cr_assert(strstr(buf, "no zeroc work was pending"), "the victim kept its record: %s", buf);
    zc__optrack_describe(&t, &many[0], 1, buf, sizeof buf);
    cr_assert(strstr(buf, "2 operations") && strstr(buf, "last scale kernel"), "%s", buf);
    zc__optrack_describe(&t, &many[ZC_OPTRACK_STREAMS], 1, buf, sizeof buf);
    cr_assert(strstr(buf, "accumulate kernel (fp32, 9 elements)"), "%s", buf);

    zc__optrack_note(&t, &C, "cast kernel", ZC_DTYPE_F32, 3);
    zc__optrack_forget(&t, &C);
    zc__optrack_note(&t, &C, "scale kernel", ZC_DTYPE_F32, 4);
    zc__optrack_describe(&t, &C, 1, buf, sizeof buf);
    cr_assert(strstr(buf, "1 operation, scale kernel (fp32, 4 elements)"), "%s", buf);
    zc__optrack_destroy(&t);
}

/* A short buffer is truncated, never overrun, and stays NUL-terminated. */
Test(optrack, describe_fits_any_buffer)
{
    zc_optrack t;
    zc__optrack_init(&t);
    for (int i = 0; i < 4; i++) {
        zc__optrack_note(&t, &A, "a rather long operation name for the message", -1, 1);
        zc__optrack_note(&t, &B, "another rather long operation name", ZC_DTYPE_F32, 2);
    }
    char buf[40];
    memset(buf, 'x', sizeof buf);
    zc__optrack_describe(&t, NULL, 0, buf, 24);
    cr_assert_eq(buf[23], '\0');
    cr_assert_eq(strlen(buf), 23);
    cr_assert_eq(buf[24], 'x', "wrote past the given length");
    zc__optrack_describe(&t, NULL, 0, buf, 1);
    cr_assert_eq(buf[0], '\0');
    zc__optrack_destroy(&t);
}
