/* Stage 3 with offload_param "nvme": the read schedule, the live bound with
 * reads in flight, max_in_cpu, and the memory bound.
 *
 * The harness's model (six chunks, one per layer with a bucket of 2048),
 * trained layer-wise (a layer's parameters acquired together in forward and
 * again in backward). Per-chunk reads and gathers come from the engine's
 * chunk table and zc_engine_offload_stats, read on each rank after every
 * step; everything after the first step (which records the trace) is
 * checked. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/engine.h"
#include "helpers.h"
#include "t_engine.h"
#include "t_offload.h"

#define STEPS 6
#define W 2

typedef struct seen {
    int64_t reads[W][STEPS][T_NLAYERS], gathers[W][STEPS][T_NLAYERS];
    zc_offload_stats os[W][STEPS];
    int64_t live_peak[W][STEPS];
    /* memory, rank 0 after the last step */
    int64_t dev_params, pinned_params, pinned_buffers, nvme_params;
    size_t gather_pool_bytes;
} seen;

static void record(t_ctx *x, int step, void *arg)
{
    seen *g = arg;
    for (int k = 0; k < x->eng->nchunks && k < T_NLAYERS; k++) {
        g->reads[x->rank][step][k] = x->eng->chunks[k].reads_last;
        g->gathers[x->rank][step][k] = x->eng->chunks[k].gathers_last;
    }
    g->os[x->rank][step].size = sizeof(zc_offload_stats);
    cr_assert_eq(zc_engine_offload_stats(x->eng, &g->os[x->rank][step]), ZC_OK);
    g->live_peak[x->rank][step] = x->eng->live_peak_last;
    if (x->rank == 0 && step == STEPS - 1) {
        zc_stats s = {.size = sizeof s};
        cr_assert_eq(zc_engine_stats(x->eng, &s), ZC_OK);
        g->dev_params = s.bytes_by_kind_cat[ZC_KIND_DEVICE][ZC_MEM_PARAMS] +
                        s.bytes_by_kind_cat[ZC_KIND_HOST][ZC_MEM_PARAMS];
        g->pinned_params = s.bytes_by_kind_cat[ZC_KIND_PINNED][ZC_MEM_PARAMS];
        g->pinned_buffers = s.bytes_by_kind_cat[ZC_KIND_PINNED][ZC_MEM_BUFFERS];
        g->nvme_params = s.bytes_by_kind_cat[ZC_KIND_NVME][ZC_MEM_PARAMS];
        g->gather_pool_bytes = zc__bufpool_bytes(&x->eng->pool_gather);
    }
}

static t_swapdir dir;

static void setup(void) { t_swapdir_make(&dir, "zc-poff-sched"); }

static void teardown(void) { t_swapdir_remove(&dir); }

static t_run *new_run(seen *g, int64_t prefetch, int64_t reuse)
{
    t_run *r = calloc(1, sizeof *r);
    t_run_init(r, 3, W, ZC_DTYPE_BF16);
    r->steps = STEPS;
    r->layerwise = true;
    r->prefetch = prefetch;
    r->reuse = reuse;
    r->offload_param = "nvme";
    r->param_nvme_path_json = dir.json;
    r->after_step = record;
    r->hook_arg = g;
    return r;
}

static int64_t padded(int l)
{
    const int64_t a = 64 * (int64_t)W;
    return (t_layer_numel[l] + a - 1) / a * a;
}

static void go(t_run *r)
{
    cr_assert(t_engine_run(r), "%s", t_run_error(r));
}

static void free_run(t_run *r)
{
    free(r->master);
    free(r);
}

/* Without reuse every chunk is read exactly as often as it is gathered:
 * twice a step (forward and backward), with prefetch 0 and large alike. */
Test(offload_schedule, reads_equal_gathers_twice_a_step, .init = setup, .fini = teardown)
{
    for (int pf = 0; pf < 2; pf++) {
        seen *g = calloc(1, sizeof *g);
        t_run *r = new_run(g, pf ? 1 << 20 : 0, 0);
        go(r);
        for (int rank = 0; rank < W; rank++)
            for (int s = 1; s < STEPS; s++) {
                int64_t sum = 0;
                for (int k = 0; k < T_NLAYERS; k++) {
                    cr_assert_eq(g->reads[rank][s][k], 2, "prefetch %d rank %d step %d chunk %d: "
                                 "%lld reads", pf, rank, s, k, (long long)g->reads[rank][s][k]);
                    cr_assert_eq(g->gathers[rank][s][k], 2);
                    sum += g->reads[rank][s][k];
                }
                cr_assert_eq(g->os[rank][s].param_reads, sum);
                cr_assert_gt(g->os[rank][s].param_nvme_read_bytes, 0);
                /* without prefetch every activation gathers on demand */
                if (!pf)
                    cr_assert_eq(g->os[rank][s].prefetch_misses, 2 * T_NLAYERS);
                else
                    cr_assert_gt(g->os[rank][s].prefetch_hits, 0);
            }
        free_run(r);
        free(g);
    }
    t_assert_no_leaks();
}

/* With a large reuse distance a chunk used again soon is kept: fewer reads
 * (at most one per chunk and step here: backward finds forward's copies),
 * still one read per gather. */
Test(offload_schedule, reuse_distance_reads_less, .init = setup, .fini = teardown)
{
    seen *g = calloc(1, sizeof *g);
    t_run *r = new_run(g, 1 << 20, 1 << 20);
    go(r);
    for (int rank = 0; rank < W; rank++)
        for (int s = 1; s < STEPS; s++)
            for (int k = 0; k < T_NLAYERS; k++) {
                cr_assert_eq(g->reads[rank][s][k], g->gathers[rank][s][k]);
                cr_assert_eq(g->reads[rank][s][k], 1, "rank %d step %d chunk %d: %lld reads",
                             rank, s, k, (long long)g->reads[rank][s][k]);
            }
    free_run(r);
    free(g);
    t_assert_no_leaks();
}

/* stage3_max_live_parameters bounds gathered plus in-flight elements: the two
 * largest chunks, with a prefetch budget of the whole model. */
Test(offload_schedule, live_bound_counts_reads_in_flight, .init = setup, .fini = teardown)
{
    int64_t big[2] = {0, 0};
    for (int l = 0; l < T_NLAYERS; l++) {
        if (padded(l) > big[0]) {
            big[1] = big[0];
            big[0] = padded(l);
        } else if (padded(l) > big[1]) {
            big[1] = padded(l);
        }
    }
    const int64_t max_live = big[0] + big[1];
    seen *g = calloc(1, sizeof *g);
    t_run *r = new_run(g, 1 << 20, 0);
    r->max_live = max_live;
    go(r);
    for (int rank = 0; rank < W; rank++)
        for (int s = 0; s < STEPS; s++) {
            cr_assert_leq(g->live_peak[rank][s], max_live);
            cr_assert_eq(g->os[rank][s].max_live_elems, g->live_peak[rank][s]);
            if (s > 0)
                for (int k = 0; k < T_NLAYERS; k++)
                    cr_assert_eq(g->reads[rank][s][k], 2);
        }
    free_run(r);
    free(g);
    t_assert_no_leaks();
}

/* max_in_cpu covering the model: every shard stays in pinned host memory,
 * nothing is read from NVMe (nor written), and no swap file is needed. */
Test(offload_schedule, max_in_cpu_covering_the_model_reads_nothing, .init = setup,
     .fini = teardown)
{
    seen *g = calloc(1, sizeof *g);
    t_run *r = new_run(g, 1 << 20, 0);
    r->max_in_cpu = 1 << 20;
    go(r);
    for (int rank = 0; rank < W; rank++)
        for (int s = 0; s < STEPS; s++) {
            cr_assert_eq(g->os[rank][s].param_nvme_read_bytes, 0);
            cr_assert_eq(g->os[rank][s].param_nvme_write_bytes, 0);
            cr_assert_eq(g->os[rank][s].io_wait_acquires, 0);
            for (int k = 0; k < T_NLAYERS; k++)
                cr_assert_eq(g->reads[rank][s][k], 0);
        }
    cr_assert_eq(g->nvme_params, 0);
    cr_assert_gt(g->pinned_params, 0);
    free_run(r);
    free(g);
    t_assert_no_leaks();
}

/* Memory: with nvme and max_in_cpu 0, no parameter shard is in device or
 * plain host memory, the pinned memory for parameters is the buffer_count
 * swap buffers (each the largest shard, 4 KiB aligned), the shards are in
 * the swap file, and the gathered copies come from the reserved pool, which
 * is bounded by the live bound (max_live elements of bf16, plus one 4 KiB
 * alignment slack per size class). The bound stated: parameter bytes in
 * device and host memory <= 2 * max_live + buffer_count * aligned shard +
 * slack. */
Test(offload_schedule, memory_within_live_bound_plus_buffers, .init = setup, .fini = teardown)
{
    int64_t max_shard = 0, total = 0;
    for (int l = 0; l < T_NLAYERS; l++) {
        max_shard = padded(l) / W > max_shard ? padded(l) / W : max_shard;
        total += padded(l);
    }
    const int64_t max_live = 3 * 2048; /* below the model (a few chunks) */
    cr_assert_lt(max_live, total);
    seen *g = calloc(1, sizeof *g);
    t_run *r = new_run(g, 1 << 20, 1 << 20);
    r->max_live = max_live;
    r->param_buffer_count = 4;
    go(r);
    const int64_t buf = (2 * max_shard + 4095) / 4096 * 4096;
    cr_assert_eq(g->dev_params, 0);
    cr_assert_eq(g->pinned_params, 0);
    cr_assert_eq(g->pinned_buffers, 4 * buf);
    cr_assert_geq(g->nvme_params, 2 * total / W);
    cr_assert_leq((int64_t)g->gather_pool_bytes, 2 * max_live + T_NLAYERS * 4096);
    for (int s = 0; s < STEPS; s++)
        cr_assert_leq(g->live_peak[0][s], max_live);
    free_run(r);
    free(g);
    t_assert_no_leaks();
}
