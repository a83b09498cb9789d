/* Waiting by polling without holding a core: see backoff.h. */
#include <time.h>

#include "base/backoff.h"
#include "base/clock.h"

void zc__backoff_init(zc_backoff *b)
{
    b->spin_from = zc__now_s();
    b->spin_s = ZC_BACKOFF_SPIN_S;
    b->nap_ns = 0;
    b->naps = 0;
}

void zc__backoff_progress(zc_backoff *b, double took)
{
    b->spin_from = zc__now_s();
    /* NaN and negatives fail the first test: the shortest spin. */
    b->spin_s = took > ZC_BACKOFF_SPIN_S
                    ? (took < ZC_BACKOFF_SPIN_MAX_S ? took : ZC_BACKOFF_SPIN_MAX_S)
                    : ZC_BACKOFF_SPIN_S;
    b->nap_ns = 0;
}

double zc__backoff_idle(zc_backoff *b)
{
    const double now = zc__now_s(), waited = now - b->spin_from;
    if (b->nap_ns == 0 && waited < b->spin_s) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause(); /* the sibling hyperthread gets the pipeline */
#endif
        return now;
    }
    /* An eighth of the wait so far, clamped in seconds (a wait of any
     * length converts without overflow). */
    const double nap_s = waited / ZC_BACKOFF_NAP_FRACTION;
    long ns = nap_s >= (double)ZC_BACKOFF_NAP_MAX_NS * 1e-9 ? ZC_BACKOFF_NAP_MAX_NS
              : nap_s > (double)ZC_BACKOFF_NAP_MIN_NS * 1e-9 ? (long)(nap_s * 1e9)
                                                             : ZC_BACKOFF_NAP_MIN_NS;
    b->nap_ns = ns;
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
    b->naps++;
    return zc__now_s();
}
