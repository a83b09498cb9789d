/* The layout guarantee of zeroc.h: a chunk's parameters lie back to back in
 * registration order from a base aligned to ZC_CHUNK_BASE_ALIGN bytes, and
 * zc_param_chunk_base / zc_block_base return that memory - the same pointers
 * zc_param_acquire gives - at every stage and world size. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "helpers.h"
#include "t_engine.h"

/* The harness model with a bucket of 2048 elements, worked out by hand from
 * t_numel: {p0 p1 p2} {p3} {p4} | {p5} {p6} {p7}. */
static const int want_chunk_first[T_NPARAMS] = {0, 0, 0, 3, 4, 5, 6, 7};
static const int64_t want_offset[T_NPARAMS] = {0, 300, 1300, 0, 0, 0, 0, 0};

typedef struct shared {
    t_run *run;
    zc_comm *comms[T_MAX_WORLD];
} shared;

#define EXPECT(cond, ...)                                                               \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            int n_ = snprintf(x->run->err[x->rank], sizeof x->run->err[x->rank],        \
                              "rank %d line %d: ", x->rank, __LINE__);                  \
            snprintf(x->run->err[x->rank] + n_, sizeof x->run->err[x->rank] - (size_t)n_, \
                     __VA_ARGS__);                                                      \
            goto out;                                                                   \
        }                                                                               \
    } while (0)

static void layout_rank(int rank, void *arg)
{
    shared *sh = arg;
    t_ctx ctx, *x = &ctx;
    zc_block *blk = NULL, *gap = NULL, *cross = NULL;
    if (t_ctx_open(x, sh->run, rank, sh->comms[rank]) != ZC_OK)
        goto out;
    const size_t esz = zc_dtype_size(sh->run->dtype);
    const bool s3 = sh->run->stage == 3;
    void *base = NULL;
    int64_t off = -1;
    if (s3) {
        /* Not acquired: stage 3 has no full chunk to point at. */
        EXPECT(zc_param_chunk_base(x->eng, x->p[0], &base, &off) == ZC_ERR_INVALID_STATE,
               "unacquired stage-3 base: %s", zc_last_error());
        EXPECT(strstr(zc_last_error(), "acquire 'p0' first"), "%s", zc_last_error());
    }
    void *w[T_NPARAMS];
    for (int i = 0; i < T_NPARAMS; i++) {
        w[i] = zc_param_acquire(x->eng, x->p[i], NULL);
        EXPECT(w[i], "acquire p%d: %s", i, zc_last_error());
    }
    for (int i = 0; i < T_NPARAMS; i++) {
        EXPECT(zc_param_chunk_base(x->eng, x->p[i], &base, &off) == ZC_OK, "base p%d: %s", i,
               zc_last_error());
        EXPECT(off == want_offset[i], "p%d offset %lld, want %lld", i, (long long)off,
               (long long)want_offset[i]);
        EXPECT((uintptr_t)base % ZC_CHUNK_BASE_ALIGN == 0, "p%d chunk base %p not aligned", i,
               base);
        /* Pointer identity: the chunk base plus the offset is the acquired
         * memory, and the chunk's base is its first parameter. */
        EXPECT((char *)base + (size_t)off * esz == (char *)w[i], "p%d: base + offset != acquire",
               i);
        EXPECT(base == w[want_chunk_first[i]], "p%d: base is not p%d's memory", i,
               want_chunk_first[i]);
    }
    /* Back to back: each parameter starts where the previous one of the
     * chunk ends. */
    for (int i = 1; i <= 2; i++)
        EXPECT((char *)w[i] == (char *)w[i - 1] + (size_t)t_numel[i - 1] * esz,
               "p%d does not follow p%d", i, i - 1);

    EXPECT(zc_block_span(x->eng, x->p[0], &blk) == ZC_OK, "span");
    zc_block_destroy(blk);
    blk = NULL;
    EXPECT(zc_block_create(x->eng, x->p, 3, &blk) == ZC_OK, "block p0..p2");
    EXPECT(zc_block_base(x->eng, blk, &base) == ZC_OK, "block base: %s", zc_last_error());
    EXPECT(base == w[0], "block base is not p0's memory");
    EXPECT(zc_block_create(x->eng, &x->p[1], 1, &gap) == ZC_OK, "block p1");
    EXPECT(zc_block_base(x->eng, gap, &base) == ZC_OK && base == w[1], "one-parameter base");
    zc_block_destroy(gap);
    zc_param *skip[2] = {x->p[0], x->p[2]};
    EXPECT(zc_block_create(x->eng, skip, 2, &gap) == ZC_OK, "block p0 p2");
    EXPECT(zc_block_base(x->eng, gap, &base) == ZC_ERR_INVALID_ARG, "a gap has no base");
    EXPECT(strstr(zc_last_error(), "does not follow 'p0'"), "%s", zc_last_error());
    EXPECT(zc_block_create(x->eng, &x->p[2], 2, &cross) == ZC_OK, "block p2 p3");
    EXPECT(zc_block_base(x->eng, cross, &base) == ZC_ERR_INVALID_ARG, "two chunks, no base");
    for (int i = T_NPARAMS - 1; i >= 0; i--)
        EXPECT(zc_param_release(x->eng, x->p[i], NULL) == ZC_OK, "release p%d", i);
out:
    zc_block_destroy(blk);
    zc_block_destroy(gap);
    zc_block_destroy(cross);
    t_ctx_close(x);
}

static void run_layout(int stage, int world, zc_dtype dt)
{
    t_run run;
    t_run_init(&run, stage, world, dt);
    shared sh = {.run = &run};
    cr_assert_eq(zc_comm_local_world(world, sh.comms), ZC_OK);
    t_run_ranks(world, layout_rank, &sh);
    for (int r = 0; r < world; r++)
        zc_comm_destroy(sh.comms[r]);
    cr_assert_str_empty(t_run_error(&run), "stage %d W %d %s: %s", stage, world,
                        zc_dtype_name(dt), t_run_error(&run));
}

Test(chunk_layout, contiguous_aligned_every_stage_world)
{
    for (int stage = 0; stage <= 3; stage++)
        for (int w = 1; w <= 4; w++) {
            run_layout(stage, w, ZC_DTYPE_F32);
            run_layout(stage, w, ZC_DTYPE_BF16);
        }
    t_assert_no_leaks();
}
