/* Bytes by link: what one rank sends to the peers on its node and on other
 * nodes in one collective (comm.h has the model). The engine counts every
 * model collective with it (core/common/groups.c) and the planner estimates
 * a step with it (src/plan), so the figures zc_stats reports and the ones
 * `zeroc estimate` prints come from one formula. */
#include "comm/comm.h"

void zc__link_bytes(int kind, size_t count, size_t esz, const int *node, int n, int me,
                    int64_t out[2])
{
    out[0] = out[1] = 0;
    if (n <= 1)
        return;
    const size_t mine_lo = count * (size_t)me / (size_t)n,
                 mine_hi = count * (size_t)(me + 1) / (size_t)n;
    for (int k = 0; k < n; k++) {
        if (k == me)
            continue;
        size_t elems = count; /* all-gather, reduce-scatter: count to every peer */
        if (kind == K_ALL_REDUCE) {
            /* Peer k's slice to k, then this rank's summed slice back. */
            const size_t lo = count * (size_t)k / (size_t)n, hi = count * (size_t)(k + 1) / (size_t)n;
            elems = (hi - lo) + (mine_hi - mine_lo);
        }
        out[node[k] == node[me] ? 0 : 1] += (int64_t)(elems * esz);
    }
}

void zc__link_bytes_range(int kind, size_t count, size_t esz, int n, int me, int lo, int hi,
                          int64_t out[2])
{
    out[0] = out[1] = 0;
    if (n <= 1)
        return;
    const int64_t same = hi - lo - 1, other = n - (hi - lo);
    if (kind != K_ALL_REDUCE) {
        out[0] = same * (int64_t)(count * esz);
        out[1] = other * (int64_t)(count * esz);
        return;
    }
    /* Slices [count*k/n, count*(k+1)/n): the peers' of [lo, hi) sum to
     * F(hi) - F(lo) less this rank's own. */
    const size_t N = (size_t)n;
#define F(x) (count * (size_t)(x) / N)
    const size_t mine = F(me + 1) - F(me), band = F(hi) - F(lo);
#undef F
    out[0] = (int64_t)(((band - mine) + (size_t)same * mine) * esz);
    out[1] = (int64_t)(((count - band) + (size_t)other * mine) * esz);
}
