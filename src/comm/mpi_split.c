/* zc_comm_split on the MPI communicator (the mpi_ops' split; zc_comm_from_mpi
 * is mpi_from.c). mpi.h is the communicator's contract, zeroc.h the call's.
 *
 * A split first exchanges every rank's colour and key with the
 * communicator's own all-gather, which waits at most ZC_COMM_TIMEOUT: a
 * rank that never comes fails the others there, and a bad colour fails
 * every rank alike before MPI is asked. Only then MPI_Comm_split, which MPI
 * offers only blocking - but every rank is known to have arrived. The new
 * communicators are made and their outcome all-gathered over the parent, so
 * a failure on one rank (memory) fails every rank.
 *
 * zc_comm_from_mpi duplicates the caller's communicator with MPI_Comm_idup,
 * polled against ZC_COMM_TIMEOUT, and never initialises or finalises MPI:
 * the program did the one and will do the other. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "comm/comm.h"
#include "comm/mpi.h"
#include "comm/mpi_parts.h"

zc_status zc__mpi_split(zc_comm *base, int colour, int key, zc_comm **out)
{
    *out = NULL;
    const int W = base->world, r = base->rank;
    int32_t *rec = zc__mpi_split_records(base);
    int32_t *mine = rec + (size_t)ZC_SPLIT_REC * (size_t)W;
    mine[0] = colour;
    mine[1] = key;
    ZC_CHECK(base->ops->all_gather(base, mine, rec, ZC_SPLIT_REC, ZC_DTYPE_I32, NULL));
    ZC_CHECK(zc__split_validate(rec, W, "mpi"));
    int want_rank, want_world;
    zc__split_rank_of(rec, W, r, &want_rank, &want_world);

    zc_status rc = ZC_OK;
    zc_comm *made = NULL;
    MPI_Comm nc = MPI_COMM_NULL;
    int e = MPI_Comm_split(zc__mpi_handle(base), colour < 0 ? MPI_UNDEFINED : colour, key, &nc);
    if (e != MPI_SUCCESS) {
        rc = zc__mpi_errstr(e, "zc_comm_split: MPI_Comm_split");
    } else if (nc != MPI_COMM_NULL) {
        int got_rank = -1, got_world = -1;
        MPI_Comm_rank(nc, &got_rank);
        MPI_Comm_size(nc, &got_world);
        /* MPI's order is the one zc__split_members states; a library that
         * ordered otherwise would make zeroc's other backends disagree. */
        if (got_rank != want_rank || got_world != want_world) {
            rc = ZC_ERR(ZC_ERR_INTERNAL,
                        "zc_comm_split: MPI_Comm_split made rank %d of %d where colour %d key %d "
                        "gives rank %d of %d", got_rank, got_world, colour, key, want_rank,
                        want_world);
            MPI_Comm_free(&nc);
        } else if ((rc = zc__mpi_ref()) == ZC_OK) {
            double timeout = 0;
            rc = zc__comm_timeout_env(&timeout);
            if (rc == ZC_OK) {
                rc = zc__mpi_wrap(nc, timeout, base->world_rank, base->node_ranks,
                                  "zc_comm_split", &made);
                if (rc == ZC_OK)
                    made->world_size = base->world_size;
            } else {
                MPI_Comm_free(&nc);
                zc__mpi_unref(1);
            }
        } else {
            MPI_Comm_free(&nc);
        }
    }
    /* The outcome over the parent: the same records, so the same verdict. */
    char why[256];
    snprintf(why, sizeof why, "%s", rc == ZC_OK ? "" : zc_last_error());
    mine[0] = (int32_t)rc;
    mine[1] = 0;
    zc_status arc = base->ops->all_gather(base, mine, rec, ZC_SPLIT_REC, ZC_DTYPE_I32, NULL);
    int failed = -1;
    for (int k = 0; arc == ZC_OK && k < W && failed < 0; k++)
        if (rec[(size_t)k * ZC_SPLIT_REC] != ZC_OK)
            failed = k;
    if (arc != ZC_OK || failed >= 0) {
        if (made)
            made->ops->destroy(made);
        if (arc != ZC_OK)
            return arc;
        const zc_status fs = (zc_status)rec[(size_t)failed * ZC_SPLIT_REC];
        if (failed == r)
            return ZC_ERR(fs, "zc_comm_split (mpi): rank %d of %d: %s", r, W, why);
        return ZC_ERR(fs, "zc_comm_split (mpi): making the new communicator failed on rank %d "
                          "of %d", failed, W);
    }
    *out = made;
    return ZC_OK;
}
