/* The bytes one rank sends per optimizer step, by link (plan.h,
 * zc__plan_link_bytes): the collectives the engine issues in a step, each
 * counted with the engine's own formula (comm.h, zc__link_bytes) over the
 * groups the engine would make (core/common/groups.h), so the figure is
 * what zc_stats.comm_bytes_last_step_by_link reports for the same layout. */
#include <stdlib.h>

#include "comm/comm.h"
#include "plan/plan.h"

/* A group of the plan: its members' nodes and this rank's place. */
typedef struct pgroup {
    int n, me;
    int lo, hi;  /* the members on this rank's node: [lo, hi) (members in node order) */
    int *node;
} pgroup;

static zc_status group_make(pgroup *g, const int *members, int n, int me, int rpn)
{
    g->node = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    if (!g->node)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "zc__plan_link_bytes: a group of %d ranks", n);
    for (int i = 0; i < n; i++) {
        g->node[i] = members[i] / rpn;
        if (members[i] == me)
            g->me = i;
    }
    g->n = n;
    g->lo = g->hi = g->me;
    while (g->lo > 0 && g->node[g->lo - 1] == g->node[g->me])
        g->lo--;
    while (g->hi < n && g->node[g->hi] == g->node[g->me])
        g->hi++;
    return ZC_OK;
}

/* `times` collectives of kind over g, count elements of esz bytes. */
static void add(int64_t out[2], const pgroup *g, int kind, int64_t count, size_t esz, int64_t times)
{
    if (!g->node || g->n <= 1 || times <= 0)
        return;
    int64_t b[2];
    zc__link_bytes_range(kind, (size_t)count, esz, g->n, g->me, g->lo, g->hi, b);
    out[0] += b[0] * times;
    out[1] += b[1] * times;
}

zc_status zc__plan_link_bytes(const zc_link_plan_in *in, int64_t out[2])
{
    out[0] = out[1] = 0;
    const int W = in->world, S = in->shard_world > 0 ? in->shard_world : W;
    const int rpn = in->ranks_per_node > 0 ? in->ranks_per_node : W;
    const int H = in->stage == 3 && in->hpz > 1 ? in->hpz : 0;
    const int r = in->rank;
    if (W < 1 || S < 1 || W % S || r < 0 || r >= W || (H && W % H) || in->gas < 1 ||
        in->nchunks < 0)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc__plan_link_bytes: world %d, shard world %d, "
                      "hpz %d, rank %d", W, S, H, r);
    int *m = malloc(sizeof(int) * (size_t)W);
    if (!m)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "zc__plan_link_bytes: %d ranks", W);
    pgroup world = {0}, shard = {0}, repl = {0}, hpz = {0}, inter = {0}, intra = {0};
    zc_status rc = ZC_OK;
    const int g0 = r / S * S;
    for (int k = 0; k < W; k++)
        m[k] = k;
    rc = group_make(&world, m, W, r, rpn);
    if (rc == ZC_OK) {
        for (int k = 0; k < S; k++)
            m[k] = g0 + k;
        rc = group_make(&shard, m, S, r, rpn);
    }
    if (rc == ZC_OK) {
        int n = 0;
        for (int k = r % S; k < W; k += S)
            m[n++] = k;
        rc = group_make(&repl, m, n, r, rpn);
    }
    if (rc == ZC_OK && H) {
        for (int k = 0; k < H; k++)
            m[k] = r / H * H + k;
        rc = group_make(&hpz, m, H, r, rpn);
    }
    /* The hierarchical gather: the shard group's ranks of this one's index
     * on each of its nodes, and the ones on its node (nodes are rpn
     * consecutive ranks; zc__plan_hier_j says whether the shape allows it). */
    const int J = in->hier ? zc__plan_hier_j(S, rpn) : 0;
    if (rc == ZC_OK && J) {
        const int l = (r - g0) % rpn, j = (r - g0) / rpn;
        for (int q = 0; q < J; q++)
            m[q] = g0 + q * rpn + l;
        rc = group_make(&inter, m, J, r, rpn);
        for (int q = 0; rc == ZC_OK && q < rpn; q++)
            m[q] = g0 + j * rpn + q;
        if (rc == ZC_OK)
            rc = group_make(&intra, m, rpn, r, rpn);
    }
    const size_t e = in->pesz;
    const int64_t K = in->gas;
    for (int k = 0; rc == ZC_OK && k < in->nchunks; k++) {
        const int64_t P = in->padded[k], n = P / S;
        const bool pers = in->persistent && in->persistent[k];
        /* gathers of the chunk from the primary shards this step */
        int64_t primary = 0, secondary = 0;
        switch (in->stage) {
        case 0:
            add(out, &world, K_ALL_REDUCE, P, e, 1);
            continue;
        case 1:
            add(out, &shard, K_REDUCE_SCATTER, n, e, 1);
            primary = 1;
            break;
        case 2:
            add(out, &shard, K_REDUCE_SCATTER, n, e, K);
            primary = 1;
            break;
        default:
            add(out, &shard, K_REDUCE_SCATTER, n, e, K);
            /* Forward and backward of every micro-step; hpZ serves all but
             * the first from the secondary partition. A persistent chunk is
             * refreshed once, after the update. */
            if (pers) {
                primary = 1;
            } else if (H) {
                primary = 1;
                secondary = 2 * K - 1;
            } else {
                primary = 2 * K;
            }
            break;
        }
        /* MiCS: the fp32 shard all-reduced across the replicas, once. */
        add(out, &repl, K_ALL_REDUCE, n, 4, 1);
        if (J) {
            add(out, &inter, K_ALL_GATHER, n, e, primary);
            add(out, &intra, K_ALL_GATHER, n, e, primary * J);
        } else {
            add(out, &shard, K_ALL_GATHER, n, e, primary);
        }
        add(out, &hpz, K_ALL_GATHER, H ? P / H : 0, e, secondary);
    }
    free(world.node), free(shard.node), free(repl.node), free(hpz.node), free(inter.node),
        free(intra.node);
    free(m);
    return rc;
}
