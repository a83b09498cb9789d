/* zc_comm_split on the local communicator: the ranks are threads sharing
 * memory, so the exchange needs no collective - each rank writes its record
 * into the group's reserved split area and meets the others.
 *
 *   A  every rank posts {colour, key, world rank}; barrier;
 *      every rank checks every colour (zc__split_validate: the same verdict
 *      everywhere); the leader of each colour (its lowest old rank) makes
 *      the new group and one handle per member, in MPI_Comm_split's order
 *      (zc__split_members), and posts them (NULL: it failed);
 *   B  barrier; every rank checks every leader's outcome: if any failed,
 *      every rank fails alike and each leader that succeeded frees what it
 *      made; else each member takes its handle from its leader;
 *   C  barrier, so that no rank's next split overwrites the records while
 *      another still reads them; the leaders free their pointer arrays.
 *
 * The new group is a local group like zc_comm_local_world's (the parent's
 * timeout, the world ranks and node size of the members' parents), with no
 * tie to the parent: either may be destroyed first. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "comm/comm.h"
#include "comm/local_internal.h"

/* The lowest old rank of colour `colour` (the one that makes its group). */
static int leader_of(const local_group *g, int colour)
{
    for (int r = 0; r < g->world; r++)
        if (g->split_rec[(size_t)r * (ZC_SPLIT_REC + 1)] == colour)
            return r;
    return -1;
}

/* The records as zc__split_* read them: colour and key, ZC_SPLIT_REC words
 * a rank, without the world ranks. */
static void pack_records(const local_group *g, int32_t *rec)
{
    for (int r = 0; r < g->world; r++)
        memcpy(&rec[(size_t)r * ZC_SPLIT_REC], &g->split_rec[(size_t)r * (ZC_SPLIT_REC + 1)],
               sizeof(int32_t) * ZC_SPLIT_REC);
}

/* The leader's work: the group of its colour and its members' handles. */
static zc_status make_colour(local_comm *c, const int32_t *rec, int colour,
                             local_comm_ptrs *made, int *n_made)
{
    local_group *g = c->g;
    const int W = g->world;
    int *members = NULL, *wranks = NULL;
    local_comm_ptrs arr = NULL;
    zc_status rc = zc__host_alloc(NULL, ZC_MEM_OTHER, sizeof(int) * 2 * (size_t)W,
                                  "zc_comm_split members", (void **)&members);
    if (rc != ZC_OK)
        return rc;
    wranks = members + W;
    const int n = zc__split_members(rec, W, colour, members);
    for (int i = 0; i < n; i++)
        wranks[i] = g->split_rec[(size_t)members[i] * (ZC_SPLIT_REC + 1) + ZC_SPLIT_REC];
    rc = zc__host_alloc(NULL, ZC_MEM_OTHER, sizeof(local_comm *) * (size_t)n,
                        "zc_comm_split handles", (void **)&arr);
    if (rc == ZC_OK) {
        rc = zc__local_make(n, g->timeout_s, wranks, c->base.world_size, c->base.node_ranks,
                            (zc_comm **)arr);
        if (rc != ZC_OK) {
            zc__host_free(NULL, ZC_MEM_OTHER, arr, sizeof(local_comm *) * (size_t)n);
            arr = NULL;
        }
    }
    zc__host_free(NULL, ZC_MEM_OTHER, members, sizeof(int) * 2 * (size_t)W);
    *made = arr;
    *n_made = arr ? n : 0;
    return rc;
}

zc_status zc__local_split(zc_comm *base, int colour, int key, zc_comm **out)
{
    local_comm *c = (local_comm *)base;
    local_group *g = c->g;
    const int W = g->world, r = base->rank;
    *out = NULL;
    if (c->in_group)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_comm_split: local comm rank %d is inside a "
                                          "communicator group", r);
    int32_t *mine = &g->split_rec[(size_t)r * (ZC_SPLIT_REC + 1)];
    mine[0] = colour;
    mine[1] = key;
    mine[2] = base->world_rank;
    c->seq++;
    g->slots[r] = (local_slot){NULL, 0, c->ev_ready, c->ev_done};
    ZC_CHECK(zc__local_wait(c)); /* A */
    /* The packed records, on the stack for small worlds (a split is rare;
     * 4096 ranks x 8 bytes at most, zc_comm_local_world's bound). */
    int32_t rec[(size_t)W * ZC_SPLIT_REC];
    pack_records(g, rec);
    zc_status vrc = zc__split_validate(rec, W, "local");
    local_comm_ptrs made = NULL;
    int n_made = 0;
    const bool leader = vrc == ZC_OK && colour >= 0 && leader_of(g, colour) == r;
    zc_status mrc = ZC_OK;
    if (leader) {
        mrc = make_colour(c, rec, colour, &made, &n_made);
        g->split_out[r] = made;
    }
    zc_status rc = zc__local_wait(c); /* B */
    if (rc != ZC_OK) {
        /* Nobody passed B (it never opened for this rank): what this
         * leader made is nobody's. */
        for (int i = 0; i < n_made; i++)
            made[i]->base.ops->destroy(&made[i]->base);
        if (made)
            zc__host_free(NULL, ZC_MEM_OTHER, made, sizeof(local_comm *) * (size_t)n_made);
        return rc;
    }
    int failed = -1;
    for (int k = 0; k < W && vrc == ZC_OK && failed < 0; k++) {
        const int32_t ck = rec[(size_t)k * ZC_SPLIT_REC];
        if (ck >= 0 && leader_of(g, ck) == k && !g->split_out[k])
            failed = k;
    }
    local_comm *got = NULL;
    if (vrc == ZC_OK && failed < 0 && colour >= 0) {
        int nr, nw;
        zc__split_rank_of(rec, W, r, &nr, &nw);
        got = g->split_out[leader_of(g, colour)][nr];
    }
    rc = zc__local_wait(c); /* C */
    /* Nobody took a handle when the split failed: the leaders drop them. */
    const bool refused = vrc != ZC_OK || failed >= 0;
    for (int i = 0; refused && i < n_made; i++)
        made[i]->base.ops->destroy(&made[i]->base);
    if (made)
        zc__host_free(NULL, ZC_MEM_OTHER, made, sizeof(local_comm *) * (size_t)n_made);
    if (vrc != ZC_OK)
        return zc__split_validate(rec, W, "local");
    if (failed >= 0)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "zc_comm_split (local): making the new communicator "
                                        "failed on rank %d of %d, its colour's leader%s",
                      failed, W, leader && mrc != ZC_OK ? " (this rank)" : "");
    if (rc != ZC_OK) {
        /* C failed after B: every member took its handle; this rank's is
         * its own to drop. */
        if (got)
            got->base.ops->destroy(&got->base);
        return rc;
    }
    *out = got ? &got->base : NULL;
    return ZC_OK;
}
