/* zc_comm_split's rules, shared by every backend (local.c, mpi_split.c,
 * nccl_wrap.c): the check of the exchanged colours and MPI_Comm_split's
 * order of the new ranks. Pure functions of the records every rank holds
 * alike, so every rank reaches the same verdict and the same groups. Built
 * into libzeroc and into the CUDA plugin (whose NCCL split uses it). */
#include <stdlib.h>

#include "comm/comm.h"
#include "zeroc/zeroc.h"

zc_status zc__split_validate(const int32_t *rec, int W, const char *backend)
{
    for (int r = 0; r < W; r++) {
        const int32_t colour = rec[(size_t)r * ZC_SPLIT_REC];
        if (colour < ZC_COMM_SPLIT_NONE)
            return ZC_ERR(ZC_ERR_INVALID_ARG,
                          "zc_comm_split (%s): rank %d of %d passed colour %d; a colour is "
                          ">= 0, or ZC_COMM_SPLIT_NONE (-1) to join no new communicator",
                          backend, r, W, (int)colour);
    }
    return ZC_OK;
}

/* Insertion into the sorted prefix: groups are small, and the order must be
 * exactly (key, old rank), which a stable insertion keeps without a
 * comparator's context. O(n^2) in the group's size n, n <= W. */
int zc__split_members(const int32_t *rec, int W, int colour, int *members)
{
    int n = 0;
    for (int r = 0; r < W; r++) {
        if (colour < 0 || rec[(size_t)r * ZC_SPLIT_REC] != colour)
            continue;
        const int32_t key = rec[(size_t)r * ZC_SPLIT_REC + 1];
        int at = n;
        /* r is larger than every rank already placed: among equal keys it
         * goes last, so ties stay in old-rank order. */
        while (at > 0 && rec[(size_t)members[at - 1] * ZC_SPLIT_REC + 1] > key) {
            members[at] = members[at - 1];
            at--;
        }
        members[at] = r;
        n++;
    }
    return n;
}

void zc__split_rank_of(const int32_t *rec, int W, int r, int *new_rank, int *new_world)
{
    const int32_t colour = rec[(size_t)r * ZC_SPLIT_REC], key = rec[(size_t)r * ZC_SPLIT_REC + 1];
    *new_rank = *new_world = -1;
    if (colour < 0)
        return;
    int before = 0, n = 0;
    for (int k = 0; k < W; k++) {
        if (rec[(size_t)k * ZC_SPLIT_REC] != colour)
            continue;
        n++;
        const int32_t kk = rec[(size_t)k * ZC_SPLIT_REC + 1];
        if (kk < key || (kk == key && k < r))
            before++;
    }
    *new_rank = before;
    *new_world = n;
}
