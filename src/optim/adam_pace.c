/* Host Adam paced to the I/O it hides behind: the rule and its bookkeeping
 * (adam_pace.h says why). */
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "optim/adam_isa.h"
#include "optim/adam_pace.h"
#include "optim/threadpool.h"

static double clock_now(void) { return zc__now_s(); }

int zc__adam_pace_threads(int max_threads, double thread_s, double elapsed_s)
{
    if (max_threads <= 1)
        return 1;
    const double a = thread_s > 0 ? thread_s : 0;  /* also NaN -> 0 */
    const double w = elapsed_s > 0 ? elapsed_s : 0;
    /* A / t <= W / 2, i.e. 2 A <= t W: the smallest such t below T. */
    for (int t = 1; t < max_threads; t++)
        if (2.0 * a <= (double)t * w)
            return t;
    return max_threads;
}

zc_status zc__adam_pace_begin(zc_adam_pace *p)
{
    memset(p, 0, sizeof *p);
    int t = 0;
    ZC_CHECK(zc__pool_default_threads(&t));
    p->max_threads = t;
    p->now = clock_now;
    p->begin_s = p->now();
    return ZC_OK;
}

/* The threads for a call of n elements now; pace_done adds its time. */
static int pace_threads(zc_adam_pace *p, size_t n, bool io_in_flight, double t0)
{
    const int want = io_in_flight
                         ? zc__adam_pace_threads(p->max_threads, p->thread_s, t0 - p->begin_s)
                         : p->max_threads;
    return zc__adam_host_threads(n, want);
}

static void pace_done(zc_adam_pace *p, double t0, int threads)
{
    const double dt = p->now() - t0;
    if (dt > 0) {
        p->adam_s += dt;
        p->thread_s += dt * threads;
    }
    p->last_threads = threads;
    p->calls++;
    if (threads < p->max_threads)
        p->calls_below++;
}

zc_status zc__adam_pace_run(zc_adam_pace *p, const zc_adam_shard *s, const zc_adam_coeffs *c,
                            bool io_in_flight)
{
    const double t0 = p->now();
    const int threads = pace_threads(p, s ? s->n : 0, io_in_flight, t0);
    ZC_CHECK(zc__adam_host_run(s, c, -1, threads));
    pace_done(p, t0, threads);
    return ZC_OK;
}

zc_status zc__adam_pace_run_lp(zc_adam_pace *p, const zc_adam_lp_shard *s,
                               const zc_adam_coeffs *c, bool io_in_flight)
{
    const double t0 = p->now();
    const int threads = pace_threads(p, s ? s->n : 0, io_in_flight, t0);
    ZC_CHECK(zc__adam_lp_host_run(s, c, -1, threads));
    pace_done(p, t0, threads);
    return ZC_OK;
}

double zc__adam_pace_mean_threads(const zc_adam_pace *p)
{
    return p->adam_s > 0 ? p->thread_s / p->adam_s : 0.0;
}
