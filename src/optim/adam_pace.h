/* Host Adam paced to the I/O it hides behind (internal).
 *
 * An optimizer pass through swap files (the NVMe home) runs Adam in pieces
 * and moves the home's reads and writes along between them; when Adam keeps
 * ahead of the I/O the pass takes what its I/O takes, and Adam's speed does
 * not show. Adam on every core then only takes cores and memory bandwidth
 * from that I/O: the kernel's completion work, the thread that submits the
 * next requests between pieces, and, on a virtual machine, the host's work
 * for a virtio disk, which runs on the cores the guest's threads occupy
 * (bench/RESULTS.md, "Optimizer offload": Adam on both cores of the bench VM
 * ran 2.3x slower inside the pass than alone and slowed the reads with it).
 *
 * So while the pass has I/O in flight, Adam runs on the fewest threads that
 * keep it within half of the pass so far:
 *
 *   threads = the smallest t in [1, T-1] with  A / t <= W / 2,  else T
 *
 * T is the pool's thread count (ZC_CPU_THREADS, else the cores the process
 * may run on), A the thread-seconds Adam has taken in this pass so far (each
 * call's wall time times the threads it ran on), W the wall time since the
 * pass began. A / t is what the same work takes on t threads if it scaled
 * perfectly: an upper bound for a kernel bound by memory bandwidth, so the
 * rule errs towards more threads. A pass whose Adam is the longer part gets
 * T threads after its first piece (A / (T-1) > W / 2 once Adam fills the
 * pass); one that waits for its reads keeps Adam on fewer threads as long as
 * Adam stays the smaller half. The half leaves room for Adam to run slower
 * inside the pass than the rate it was measured at.
 *
 * The count is timing-dependent and local to the rank, and it decides only
 * how many threads compute an element, never what is computed: the pool's
 * split is static and Adam elementwise (zc__adam_host_run), so the results
 * are bitwise those of zc__adam_host, and no collective depends on it. */
#ifndef ZC_OPTIM_ADAM_PACE_H
#define ZC_OPTIM_ADAM_PACE_H

#include <stdbool.h>
#include <stdint.h>

#include "optim/adam.h"

typedef struct zc_adam_pace {
    int max_threads;     /* T */
    double begin_s;      /* when the pass began, by `now` */
    double thread_s;     /* A: Adam's thread-seconds in this pass */
    double adam_s;       /* Adam's wall time in this pass */
    int last_threads;    /* threads of the last call (after the shard's own limits) */
    int64_t calls;       /* Adam calls in this pass */
    int64_t calls_below; /* of which on fewer than T threads */
    double (*now)(void); /* the clock: zc__now_s; a test may set its own after begin */
} zc_adam_pace;

/* The rule above: threads for the next call given T, A and W. T < 1 counts
 * as 1; a negative or NaN A or W counts as 0. Pure. */
int zc__adam_pace_threads(int max_threads, double thread_s, double elapsed_s);

/* Starts a pass now, with T = the pool's default thread count. Fails only
 * as zc__pool_default_threads does (ZC_ERR_CONFIG for a bad ZC_CPU_THREADS),
 * leaving *p zeroed. */
zc_status zc__adam_pace_begin(zc_adam_pace *p);

/* Runs the host Adam (the selected variant, as zc__adam_host) over s on the
 * threads the rule gives when `io_in_flight` (the home still has reads or
 * writes going), else on all T: with nothing to make room for, as in a
 * serial pass or once the pass's last I/O is done, Adam is what the pass
 * waits for. Adds its time to the pass. Returns what zc__adam_host would. */
zc_status zc__adam_pace_run(zc_adam_pace *p, const zc_adam_shard *s, const zc_adam_coeffs *c,
                            bool io_in_flight);

/* The same for Adam over 16-bit state (zc__adam_lp_host_run's split). */
zc_status zc__adam_pace_run_lp(zc_adam_pace *p, const zc_adam_lp_shard *s,
                               const zc_adam_coeffs *c, bool io_in_flight);

/* The average number of threads Adam ran on in the pass (A over Adam's wall
 * time), 0 before the first call. */
double zc__adam_pace_mean_threads(const zc_adam_pace *p);

#endif
