/* Chunk layout rules, checked on the engine's chunk table for random models:
 *  - parameters are packed in registration order, contiguously, and never
 *    straddle two chunks;
 *  - a new chunk starts exactly at a forced boundary or when the next
 *    parameter would overflow the bucket; a larger parameter is alone;
 *  - each chunk is padded to the smallest multiple of W*64 elements;
 *  - the per-rank Adam segments tile the real elements exactly, each inside
 *    its rank's shard [r*S/W, (r+1)*S/W) and of its parameter's group. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "helpers.h"

#define NP 40
#define BUCKET 1000

typedef struct model {
    int64_t numel[NP];
    bool boundary[NP];
    int group[NP];
    zc_comm *comms[4];
    char err[4][256];
} model;

static bool fail(model *m, int rank, const char *msg)
{
    if (!m->err[rank][0])
        snprintf(m->err[rank], sizeof m->err[rank], "rank %d: %s (%s)", rank, msg,
                 zc_last_error());
    return false;
}

static bool check_layout(model *m, int rank, const zc_engine *e)
{
    const int W = e->world;
    /* Expected chunk starts, from the rules. */
    int expect_chunk[NP];
    int nch = 0;
    int64_t cur = 0;
    for (int i = 0; i < NP; i++) {
        if (i == 0 || m->boundary[i] || (cur > 0 && cur + m->numel[i] > BUCKET)) {
            nch++;
            cur = 0;
        }
        expect_chunk[i] = nch - 1;
        cur += m->numel[i];
    }
    if (e->nchunks != nch)
        return fail(m, rank, "chunk count");
    int64_t off = 0;
    for (int i = 0; i < NP; i++) {
        const zc_param *p = e->params[i];
        if (p->chunk != expect_chunk[i])
            return fail(m, rank, "parameter in the wrong chunk");
        if (i > 0 && p->chunk != e->params[i - 1]->chunk)
            off = 0;
        if (p->offset != off)
            return fail(m, rank, "parameters not contiguous in registration order");
        off += p->numel;
        if (p->offset + p->numel > e->chunks[p->chunk].used)
            return fail(m, rank, "parameter straddles its chunk");
        if (p->numel > BUCKET && e->chunks[p->chunk].count != 1)
            return fail(m, rank, "a parameter larger than the bucket is not alone");
    }
    for (int k = 0; k < e->nchunks; k++) {
        const zc_chunk *c = &e->chunks[k];
        const int64_t a = 64 * (int64_t)W;
        if (c->padded % a || c->padded < c->used || c->padded - c->used >= a)
            return fail(m, rank, "padding");
        if (c->shard * W != c->padded)
            return fail(m, rank, "shard size");
        /* Segments tile [0, used): walk them in rank order. */
        int64_t next = 0;
        for (int r = 0; r < W; r++)
            for (int s = c->seg_begin[r]; s < c->seg_begin[r + 1]; s++) {
                const zc_seg *sg = &c->segs[s];
                if (sg->start != next || sg->n <= 0)
                    return fail(m, rank, "segments do not tile the chunk");
                if (sg->start < r * c->shard || sg->start + sg->n > (r + 1) * c->shard)
                    return fail(m, rank, "segment outside its rank's shard");
                for (int i = c->first; i < c->first + c->count; i++) {
                    const zc_param *p = e->params[i];
                    bool overlap = p->offset < sg->start + sg->n && sg->start < p->offset + p->numel;
                    if (overlap && m->group[i] != sg->group)
                        return fail(m, rank, "segment mixes groups");
                }
                next += sg->n;
            }
        if (next != c->used)
            return fail(m, rank, "segments miss elements");
    }
    return true;
}

static void rank_main(int rank, void *arg)
{
    model *m = arg;
    zc_config *cfg = NULL;
    zc_engine *e = NULL;
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = BUCKET;
    if (zc_config_create(&cfg) != ZC_OK || zc_config_set_int(cfg, "zero_optimization.stage", 2) ||
        zc_engine_create(&e, cfg, m->comms[rank], &eo) != ZC_OK) {
        fail(m, rank, "create");
        goto out;
    }
    int g1;
    if (zc_group_add(e, 0.0, 1.0, &g1) != ZC_OK) {
        fail(m, rank, "group");
        goto out;
    }
    for (int i = 0; i < NP; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        if (m->boundary[i] && zc_chunk_boundary(e) != ZC_OK)
            fail(m, rank, "boundary");
        if (!zc_param_add(e, name, &m->numel[i], 1, m->group[i] ? g1 : 0)) {
            fail(m, rank, "add");
            goto out;
        }
    }
    if (zc_engine_build(e) != ZC_OK) {
        fail(m, rank, "build");
        goto out;
    }
    check_layout(m, rank, e);
out:
    zc_engine_destroy(e);
    zc_config_destroy(cfg);
}

Test(layout, random_models_follow_the_rules)
{
    uint64_t seed = t_seed("layout");
    for (int trial = 0; trial < 12; trial++) {
        model *m = calloc(1, sizeof *m);
        for (int i = 0; i < NP; i++) {
            /* Mostly small, some larger than the bucket, a few of size 1. */
            double u = t_rand_unit(&seed);
            m->numel[i] = u < 0.1 ? 1 : u < 0.85 ? 1 + (int64_t)(t_rand_unit(&seed) * 400)
                                                 : BUCKET + (int64_t)(t_rand_unit(&seed) * 3000);
            m->boundary[i] = t_rand_unit(&seed) < 0.1;
            m->group[i] = t_rand_unit(&seed) < 0.4;
        }
        const int W = 1 + trial % 4;
        cr_assert_eq(zc_comm_local_world(W, m->comms), ZC_OK);
        t_run_ranks(W, rank_main, m);
        for (int r = 0; r < W; r++) {
            zc_comm_destroy(m->comms[r]);
            cr_assert(m->err[r][0] == '\0', "trial %d W %d: %s", trial, W, m->err[r]);
        }
        free(m);
    }
    t_assert_no_leaks();
}
