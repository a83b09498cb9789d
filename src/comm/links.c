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
