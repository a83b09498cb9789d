/* The reduction bucket (src/core/loop/grad_bucket.c): a micro-step's chunk
 * reductions are issued a bucket at a time, each bucket as one communicator
 * group, up to reduce_bucket_size elements (here the engine option
 * bucket_elems) and, at stages 2/3, as many chunks as the gradient pool
 * holds buffers for. One rank on a local communicator whose ops gain
 * counting group_start / group_end; the reduce collectives record the group
 * they were issued in. */
#include <string.h>

#include "comm/comm.h"
#include "core/engine.h"
#include "helpers.h"

#define NP 4
static const int64_t numel = 100; /* each parameter its own chunk (boundaries): 128 padded */

static const zc_comm_ops *base_ops;
static zc_comm_ops rec_ops;
static int g_in, g_groups, g_sizes[16], g_outside, g_fail_at;

static zc_status r_start(zc_comm *c)
{
    (void)c;
    g_in = 1;
    g_sizes[g_groups] = 0;
    return ZC_OK;
}
static zc_status r_end(zc_comm *c)
{
    (void)c;
    g_in = 0;
    if (g_sizes[g_groups] > 0 && g_groups < 15)
        g_groups++;
    return ZC_OK;
}
static void note(void)
{
    if (g_in)
        g_sizes[g_groups]++;
    else
        g_outside++;
}
static zc_status r_reduce_scatter(zc_comm *c, const void *s, void *r, size_t n, zc_dtype dt,
                                  void *stream)
{
    note();
    if (g_fail_at && g_groups + 1 == g_fail_at)
        return ZC_ERR(ZC_ERR_COMM, "reduce_scatter: injected failure");
    return base_ops->reduce_scatter(c, s, r, n, dt, stream);
}
static zc_status r_all_reduce(zc_comm *c, const void *s, void *r, size_t n, zc_dtype dt,
                              zc_red_op op, void *stream)
{
    /* The gradient all-reduce of stage 0 (the step's small exchanges are
     * all-gathers). */
    note();
    if (g_fail_at && g_groups + 1 == g_fail_at)
        return ZC_ERR(ZC_ERR_COMM, "all_reduce: injected failure");
    return base_ops->all_reduce(c, s, r, n, dt, op, stream);
}

typedef struct bk {
    zc_comm *comm;
    zc_config *cfg;
    zc_engine *e;
    zc_param *p[NP];
} bk;

static void open_bk(bk *x, int stage, int64_t bucket)
{
    memset(x, 0, sizeof *x);
    cr_assert_eq(zc_comm_local_world(1, &x->comm), ZC_OK);
    base_ops = x->comm->ops;
    rec_ops = *x->comm->ops;
    rec_ops.group_start = r_start;
    rec_ops.group_end = r_end;
    rec_ops.reduce_scatter = r_reduce_scatter;
    rec_ops.all_reduce = r_all_reduce;
    x->comm->ops = &rec_ops;
    cr_assert_eq(zc_config_create(&x->cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(x->cfg, "zero_optimization.stage", stage), ZC_OK);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = bucket;
    cr_assert_eq(zc_engine_create(&x->e, x->cfg, x->comm, &eo), ZC_OK, "%s", zc_last_error());
    for (int i = 0; i < NP; i++) {
        char name[4] = {'p', (char)('0' + i), 0};
        if (i > 0)
            cr_assert_eq(zc_chunk_boundary(x->e), ZC_OK);
        x->p[i] = zc_param_add(x->e, name, &numel, 1, 0);
        cr_assert_not_null(x->p[i]);
    }
    cr_assert_eq(zc_engine_build(x->e), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(x->e->nchunks, NP);
}

static void close_bk(bk *x)
{
    zc_engine_destroy(x->e);
    zc_config_destroy(x->cfg);
    x->comm->ops = base_ops;
    zc_comm_destroy(x->comm);
    t_assert_no_leaks();
}

/* Backward in reverse order: each gradient written and made ready before
 * the next buffer is taken, as a training loop's backward does. */
static zc_status backward(bk *x)
{
    for (int i = NP - 1; i >= 0; i--) {
        if (!zc_param_acquire(x->e, x->p[i], NULL))
            return ZC_ERR_INVALID_STATE;
        float *g = zc_grad_buffer(x->e, x->p[i]);
        if (!g)
            return ZC_ERR_INVALID_STATE;
        for (int64_t j = 0; j < numel; j++)
            g[j] = 0.01f * (float)((j + i) % 13) - 0.05f;
        ZC_CHECK(zc_grad_ready(x->e, x->p[i]));
        ZC_CHECK(zc_param_release(x->e, x->p[i], NULL));
    }
    return ZC_OK;
}

/* Two steps; the second one's reductions are counted. want[] lists the
 * collectives of each group, in order. */
static void check(int stage, int64_t bucket, const int *want, int nwant)
{
    bk x;
    open_bk(&x, stage, bucket);
    cr_assert_eq(backward(&x), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc_step(x.e, NULL), ZC_OK, "%s", zc_last_error());
    g_in = g_groups = g_outside = g_fail_at = 0;
    cr_assert_eq(backward(&x), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(g_outside, 0, "stage %d: %d reductions outside a group", stage, g_outside);
    cr_assert_eq(g_groups, nwant, "stage %d bucket %lld: %d groups, want %d", stage,
                 (long long)bucket, g_groups, nwant);
    for (int k = 0; k < nwant; k++)
        cr_assert_eq(g_sizes[k], want[k], "stage %d bucket %lld: group %d has %d reductions",
                     stage, (long long)bucket, k, g_sizes[k]);
    cr_assert_eq(zc_step(x.e, NULL), ZC_OK, "%s", zc_last_error());
    close_bk(&x);
}

/* Stages 0/1 keep their full gradients: the bucket is bounded by its size
 * alone. 4 chunks of 128 in a bucket of 4096: one group at the last
 * gradient; in a bucket of 256: a group whenever two chunks are in. */
Test(grad_bucket, stages_0_and_1_fill_the_bucket)
{
    for (int s = 0; s <= 1; s++) {
        check(s, 4096, (const int[]){4}, 1);
        check(s, 256, (const int[]){2, 2}, 2);
        /* a chunk as large as the bucket is reduced alone, as before */
        check(s, 128, (const int[]){1, 1, 1, 1}, 4);
    }
}

/* Stage 2: each of the pool's two sets holds as many units (here one
 * chunk of 128 each) as fit in the bucket, so the bucket, not the pool,
 * decides: a bucket of 4096 holds the four chunks and is reduced once, at
 * the last gradient; one of 384 when three are in; one of 256 when two
 * are; one of 128 holds a chunk alone. */
Test(grad_bucket, stage_2_fills_the_bucket)
{
    check(2, 4096, (const int[]){4}, 1);
    check(2, 384, (const int[]){3, 1}, 2);
    check(2, 256, (const int[]){2, 2}, 2);
    check(2, 128, (const int[]){1, 1, 1, 1}, 4);
}

/* Stage 3: the pool reserved at build holds two units' buffers whatever
 * the bucket (zc__grad_set_elems), so the bucket is reduced when the third
 * chunk needs a buffer: two groups of two. */
Test(grad_bucket, stage_3_fills_what_the_pool_holds)
{
    check(3, 4096, (const int[]){2, 2}, 2);
    check(3, 128, (const int[]){1, 1, 1, 1}, 4);
}

/* A failed collective in a bucket breaks the engine: some of its chunks may
 * be reduced and others not. Stages 0/1 reduce their one bucket in the last
 * zc_grad_ready, which returns the failure. */
Test(grad_bucket, a_failed_bucket_breaks_the_engine)
{
    bk x;
    open_bk(&x, 0, 4096);
    g_in = g_groups = g_outside = 0;
    g_fail_at = 1;
    cr_assert_eq(backward(&x), ZC_ERR_COMM);
    g_fail_at = 0;
    cr_assert(strstr(zc_last_error(), "bucket") && strstr(zc_last_error(), "injected"), "%s",
              zc_last_error());
    zc_stats st = {.size = sizeof st};
    cr_assert_eq(zc_engine_stats(x.e, &st), ZC_ERR_COMM);
    cr_assert(strstr(zc_last_error(), "broken"), "%s", zc_last_error());
    close_bk(&x);
}
