/* Block calls (zc_block_*): a loop that acquires, releases, takes gradient
 * buffers and makes gradients ready a block at a time trains bitwise the
 * same as the same loop calling the per-parameter functions, at every stage
 * and world size; misuse changes nothing. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "t_engine.h"

/* Layers ending exactly at the harness's one zc_chunk_boundary (before p5),
 * so zc_block_span at each layer's first parameter is the layer. */
static const int span_layers[3] = {0, 5, 8};

static void run_pair(int stage, int world, zc_dtype dt, int mode)
{
    t_run ref, blk;
    t_run_init(&ref, stage, world, dt);
    ref.steps = 6;
    ref.layerwise = true;
    if (mode == T_BLOCK_SPAN) {
        /* One chunk per span (3971 and 4130 elements): stages 2/3 hold at
         * most the two reserved gradient buffers per block. */
        ref.bucket = 8192;
        ref.layers = span_layers;
        ref.nlayers = 2;
    }
    blk = ref;
    blk.blocks = mode;
    cr_assert(t_engine_run(&ref), "stage %d W %d per-parameter: %s", stage, world,
              t_run_error(&ref));
    cr_assert(t_engine_run(&blk), "stage %d W %d blocks: %s", stage, world, t_run_error(&blk));
    const size_t n = (size_t)t_total_numel();
    cr_assert(memcmp(ref.master, blk.master, n * sizeof(float)) == 0,
              "stage %d W %d %s: block calls differ from per-parameter calls", stage, world,
              zc_dtype_name(dt));
    /* The training moved the parameters: equal masters are not two
     * untouched initial states. */
    cr_assert_gt(blk.info[ref.steps - 1].grad_norm, 0.0);
    for (int s = 0; s < ref.steps; s++)
        cr_assert_eq(ref.info[s].grad_norm, blk.info[s].grad_norm, "step %d norm", s);
    free(ref.master);
    free(blk.master);
}

Test(blocks, list_equals_per_param_stages_worlds)
{
    for (int stage = 0; stage <= 3; stage++)
        for (int w = 1; w <= 4; w++)
            run_pair(stage, w, ZC_DTYPE_F32, T_BLOCK_LIST);
    t_assert_no_leaks();
}

Test(blocks, list_equals_per_param_bf16)
{
    for (int stage = 0; stage <= 3; stage++)
        run_pair(stage, 3, ZC_DTYPE_BF16, T_BLOCK_LIST);
    t_assert_no_leaks();
}

Test(blocks, span_equals_per_param_stages_worlds)
{
    for (int stage = 0; stage <= 3; stage++)
        for (int w = 1; w <= 4; w++)
            run_pair(stage, w, ZC_DTYPE_F32, T_BLOCK_SPAN);
    t_assert_no_leaks();
}

/* One engine on the test's thread (world 1). */
static void open1(t_run *run, t_ctx *x, zc_comm **comm, int stage, int64_t bucket)
{
    t_run_init(run, stage, 1, ZC_DTYPE_F32);
    run->bucket = bucket;
    cr_assert_eq(zc_comm_local_world(1, comm), ZC_OK);
    cr_assert_eq(t_ctx_open(x, run, 0, *comm), ZC_OK, "%s", t_run_error(run));
}

static void close1(t_ctx *x, zc_comm *comm)
{
    t_ctx_close(x);
    zc_comm_destroy(comm);
}

Test(blocks, span_ends_at_chunk_boundary)
{
    t_run run;
    t_ctx x;
    zc_comm *comm;
    open1(&run, &x, &comm, 0, 2048);
    zc_block *b = NULL;
    /* The boundary is before p5; automatic splits (p3 is larger than the
     * bucket) do not end a span. */
    cr_assert_eq(zc_block_span(x.eng, x.p[0], &b), ZC_OK);
    cr_assert_eq(zc_block_size(b), 5);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(zc_block_param(b, i), x.p[i]);
    cr_assert_null(zc_block_param(b, 5));
    cr_assert_null(zc_block_param(b, -1));
    zc_block_destroy(b);
    cr_assert_eq(zc_block_span(x.eng, x.p[2], &b), ZC_OK);
    cr_assert_eq(zc_block_size(b), 3);
    cr_assert_eq(zc_block_param(b, 0), x.p[2]);
    zc_block_destroy(b);
    cr_assert_eq(zc_block_span(x.eng, x.p[5], &b), ZC_OK);
    cr_assert_eq(zc_block_size(b), 3);
    cr_assert_eq(zc_block_param(b, 2), x.p[7]);
    zc_block_destroy(b);
    cr_assert_eq(zc_block_size(NULL), -1);
    zc_block_destroy(NULL);
    close1(&x, comm);
    t_assert_no_leaks();
}

Test(blocks, create_refuses_bad_lists)
{
    t_run run;
    t_ctx x;
    zc_comm *comm;
    open1(&run, &x, &comm, 0, 2048);
    zc_block *b = (zc_block *)&run; /* must be reset to NULL on failure */
    zc_param *dup[3] = {x.p[1], x.p[2], x.p[1]};
    cr_assert_eq(zc_block_create(x.eng, dup, 3, &b), ZC_ERR_INVALID_ARG);
    cr_assert_null(b);
    cr_assert(strstr(zc_last_error(), "'p1' is listed twice"), "%s", zc_last_error());
    cr_assert_eq(zc_block_create(x.eng, dup, 0, &b), ZC_ERR_INVALID_ARG);
    zc_param *withnull[2] = {x.p[1], NULL};
    cr_assert_eq(zc_block_create(x.eng, withnull, 2, &b), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_block_acquire(x.eng, NULL, NULL, NULL), ZC_ERR_INVALID_ARG);
    close1(&x, comm);
    t_assert_no_leaks();
}

Test(blocks, misuse_changes_nothing)
{
    t_run run;
    t_ctx x;
    zc_comm *comm;
    open1(&run, &x, &comm, 2, 2048);
    zc_block *b = NULL;
    zc_param *two[2] = {x.p[0], x.p[1]};
    cr_assert_eq(zc_block_create(x.eng, two, 2, &b), ZC_OK);
    /* Release without acquire: nothing released. */
    cr_assert_eq(zc_block_release(x.eng, b, NULL), ZC_ERR_INVALID_STATE);
    cr_assert(strstr(zc_last_error(), "('p0') is not acquired"), "%s", zc_last_error());
    /* One of two acquired: the block release refuses and p0 stays acquired. */
    void *w0 = zc_param_acquire(x.eng, x.p[0], NULL);
    cr_assert_not_null(w0);
    cr_assert_eq(zc_block_release(x.eng, b, NULL), ZC_ERR_INVALID_STATE);
    cr_assert(strstr(zc_last_error(), "('p1') is not acquired"), "%s", zc_last_error());
    cr_assert_eq(zc_param_release(x.eng, x.p[0], NULL), ZC_OK);
    /* Ready twice: the second block call makes nothing ready. */
    void *g[2];
    cr_assert_eq(zc_block_grad_buffers(x.eng, b, g), ZC_OK);
    cr_assert_eq(g[0], zc_grad_buffer(x.eng, x.p[0]));
    cr_assert_eq(g[1], zc_grad_buffer(x.eng, x.p[1]));
    cr_assert_eq(zc_grad_ready(x.eng, x.p[1]), ZC_OK);
    cr_assert_eq(zc_block_grad_ready(x.eng, b), ZC_ERR_INVALID_STATE);
    cr_assert(strstr(zc_last_error(), "('p1') was already made ready"), "%s", zc_last_error());
    cr_assert_eq(zc_block_grad_buffers(x.eng, b, g), ZC_ERR_INVALID_STATE);
    /* p0 is still not ready: the per-parameter call accepts it. */
    cr_assert_eq(zc_grad_ready(x.eng, x.p[0]), ZC_OK);
    zc_block_destroy(b);
    close1(&x, comm);
    t_assert_no_leaks();
}

/* Three one-dimensional parameters of one chunk each (a bucket of 256),
 * registered with or without a zc_chunk_boundary before the first: with
 * one, the three chunks are one unit and the build reserves two sets of
 * their buffers (capped at three, one per chunk); without, each chunk is a
 * unit and two buffers are reserved. World 1. */
static zc_engine *open3(int stage, bool boundary, zc_config **cfg, zc_comm **comm,
                        zc_param **p)
{
    static const int64_t numel[3] = {300, 500, 700};
    zc_engine *e = NULL;
    cr_assert_eq(zc_comm_local_world(1, comm), ZC_OK);
    cr_assert_eq(zc_config_create(cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(*cfg, "zero_optimization.stage", stage), ZC_OK);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = 256;
    cr_assert_eq(zc_engine_create(&e, *cfg, *comm, &eo), ZC_OK, "%s", zc_last_error());
    if (boundary)
        cr_assert_eq(zc_chunk_boundary(e), ZC_OK);
    for (int i = 0; i < 3; i++) {
        char name[4] = {'p', (char)('0' + i), 0};
        p[i] = zc_param_add(e, name, &numel[i], 1, 0);
        cr_assert_not_null(p[i]);
    }
    cr_assert_eq(zc_engine_build(e), ZC_OK, "%s", zc_last_error());
    return e;
}

/* Without a boundary a block over three chunks needs three of the two
 * reserved buffers: it fails before taking any, and the per-parameter calls
 * still get both. With a boundary before it the block is a unit, reserved
 * for at build: the same block call succeeds, and the buffers are its
 * chunks' (ZC_MEM_BUFFERS: all three chunks in the working dtype). */
Test(blocks, grad_buffers_beyond_reserve_take_nothing)
{
    for (int stage = 2; stage <= 3; stage++)
        for (int boundary = 0; boundary <= 1; boundary++) {
            zc_config *cfg;
            zc_comm *comm;
            zc_param *p[3];
            zc_engine *e = open3(stage, boundary, &cfg, &comm, p);
            zc_block *b = NULL;
            cr_assert_eq(zc_block_create(e, p, 3, &b), ZC_OK);
            void *g[3] = {NULL, NULL, NULL};
            zc_stats s = {.size = sizeof s};
            if (!boundary) {
                cr_assert_eq(zc_block_grad_buffers(e, b, g), ZC_ERR_NO_MEMORY);
                cr_assert(strstr(zc_last_error(), "lie in 3 chunks without a gradient buffer") &&
                              strstr(zc_last_error(), "the build reserved 2"),
                          "%s", zc_last_error());
                cr_assert_null(g[0]);
                cr_assert_eq(zc_engine_stats(e, &s), ZC_OK);
                cr_assert_eq(s.bytes[ZC_MEM_BUFFERS], 0, "stage %d: a buffer was taken", stage);
                cr_assert_not_null(zc_grad_buffer(e, p[1]));
                cr_assert_not_null(zc_grad_buffer(e, p[2]));
            } else {
                cr_assert_eq(zc_block_grad_buffers(e, b, g), ZC_OK, "stage %d: %s", stage,
                             zc_last_error());
                for (int i = 0; i < 3; i++)
                    cr_assert_eq(g[i], zc_grad_buffer(e, p[i]));
                cr_assert_eq(zc_engine_stats(e, &s), ZC_OK);
                /* Chunks of 320, 512 and 704 padded elements: two sets of
                 * them capped at three slots are the three largest, 704, 704
                 * and 512, and the block's chunks took all three. */
                cr_assert_eq(s.bytes[ZC_MEM_BUFFERS], (704 + 704 + 512) * 4, "%lld",
                             (long long)s.bytes[ZC_MEM_BUFFERS]);
                cr_assert_eq(zc_block_grad_ready(e, b), ZC_OK, "%s", zc_last_error());
            }
            zc_block_destroy(b);
            zc_engine_destroy(e);
            zc_config_destroy(cfg);
            zc_comm_destroy(comm);
        }
    t_assert_no_leaks();
}

/* Stage 3 with stage3_max_live_parameters below the block: the acquire that
 * crosses it fails, and the parameters the block call acquired before are
 * released again. */
Test(blocks, acquire_failure_releases_what_it_took)
{
    t_run run;
    t_ctx x;
    zc_comm *comm;
    t_run_init(&run, 3, 1, ZC_DTYPE_F32);
    run.max_live = 3000; /* {p0 p1 p2} (1307) fits, with {p3} (2500) it does not */
    run.prefetch = 0;
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    cr_assert_eq(t_ctx_open(&x, &run, 0, comm), ZC_OK, "%s", t_run_error(&run));
    zc_block *b = NULL;
    zc_param *two[2] = {x.p[0], x.p[3]};
    cr_assert_eq(zc_block_create(x.eng, two, 2, &b), ZC_OK);
    void *w[2];
    zc_status rc = zc_block_acquire(x.eng, b, NULL, w);
    cr_assert_neq(rc, ZC_OK);
    cr_assert(strstr(zc_last_error(), "parameter 1 of 2 ('p3')"), "%s", zc_last_error());
    /* p0 was released by the failed call. */
    cr_assert_eq(zc_param_release(x.eng, x.p[0], NULL), ZC_ERR_INVALID_STATE);
    zc_stats s = {.size = sizeof s};
    cr_assert_eq(zc_engine_stats(x.eng, &s), ZC_OK);
    zc_block_destroy(b);
    close1(&x, comm);
    t_assert_no_leaks();
}
