/* The memory planner (core/estimate.c) against what the engine allocates.
 *
 * For stages 0-3 x offload none/cpu/nvme (offload from stage 1) x world 1..4
 * x accumulation 1, 2, the plan made from the built engine's layout (chunk
 * sizes, persistence, live bound, read in a step hook) equals zc_stats after
 * the run, exactly, for every kind (host, pinned, NVMe) and every category
 * but ZC_MEM_OTHER; transient buffers and the idle reserve are compared as
 * one sum (a pool slot in use moves from RESERVED to BUFFERS). ZC_MEM_OTHER
 * (bookkeeping the plan leaves out) stays below OTHER_BOUND bytes per rank
 * for this model; the NVMe files' stripe round-up (counted as NVMe OTHER)
 * is planned exactly.
 *
 * The same with fp32 view slots reserved (f32_view_chunks 1 and 3), and with
 * the cpu home's staging forced on (what a GPU allocates).
 *
 * The pre-flight: with a fake /proc/meminfo of too little MemAvailable, build
 * fails with ZC_ERR_NO_MEMORY naming the biggest consumer and its key, and
 * nothing stays allocated; with a device capacity below the plan's device
 * bytes it fails the same way naming the device. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "core/engine.h"
#include "core/estimate.h"
#include "helpers.h"
#include "t_engine.h"

#define OTHER_BOUND (2 * 1024 * 1024)

typedef struct layout {
    int64_t padded[64];
    bool persistent[64];
    int nchunks;
    int64_t max_live, prefetch, buffer_count, nvme_round;
    double ratio;
} layout;

static void grab(t_ctx *x, int step, void *arg)
{
    layout *l = arg;
    if (step != 0 || x->rank != 0)
        return;
    const zc_engine *e = x->eng;
    cr_assert(e->nchunks <= 64);
    l->nchunks = e->nchunks;
    for (int k = 0; k < e->nchunks; k++) {
        l->padded[k] = e->chunks[k].padded;
        l->persistent[k] = e->chunks[k].persistent;
    }
    l->max_live = e->max_live;
    l->prefetch = e->prefetch_elems;
    l->buffer_count = e->cfg->zero.offload_optimizer.buffer_count;
    l->nvme_round = e->cfg->aio.block_size *
                    zc__nvme_path_count(e->cfg->zero.offload_optimizer.nvme_path);
    l->ratio = e->cfg->zero.offload_optimizer.ratio;
}

static const int kind_of[ZC_MEMKIND__COUNT] = {
    [ZC_MEMKIND_HOST] = ZC_KIND_HOST, [ZC_MEMKIND_PINNED] = ZC_KIND_PINNED,
    [ZC_MEMKIND_DEVICE] = ZC_KIND_DEVICE, [ZC_MEMKIND_NVME] = ZC_KIND_NVME};

static void check_one_staged(int stage, int world, int accum, int off, const char *nvme_json,
                             int views, bool staged)
{
    static const char *const names[] = {NULL, "cpu", "nvme"};
    layout l = {0};
    t_run *r = calloc(1, sizeof *r);
    t_run_init(r, stage, world, ZC_DTYPE_BF16);
    r->accum = accum;
    r->steps = 2;
    r->offload = names[off];
    r->nvme_path_json = off == 2 ? nvme_json : NULL;
    r->after_step = grab;
    r->hook_arg = &l;
    r->f32_views = views;
    zc__opt_force_staging(staged);
    const bool ran = t_engine_run(r);
    zc__opt_force_staging(false);
    cr_assert(ran, "%s", t_run_error(r));
    zc_est_in in = {
        .world = world, .stage = stage, .pesz = 2, .gas = accum,
        .offload = off == 0 ? ZC_OFFLOAD_NONE : off == 1 ? ZC_OFFLOAD_CPU : ZC_OFFLOAD_NVME,
        .ratio = l.ratio, .staging = staged, .dev_kind = ZC_MEMKIND_HOST,
        .buffer_count = l.buffer_count, .nvme_round = l.nvme_round, .max_live = l.max_live, .prefetch_elems = l.prefetch,
        .nchunks = l.nchunks, .padded = l.padded, .persistent = l.persistent,
        .view_chunks = views,
    };
    zc_est est;
    cr_assert_eq(zc__estimate(&in, &est), ZC_OK, "%s", zc_last_error());
    for (int rank = 0; rank < world; rank++) {
        const zc_stats *s = &r->stats[rank];
        for (int mk = 0; mk < ZC_MEMKIND__COUNT; mk++) {
            const int k = kind_of[mk];
            for (int c = 0; c < ZC_MEM__COUNT; c++) {
                if (c == ZC_MEM_OTHER || c == ZC_MEM_BUFFERS || c == ZC_MEM_RESERVED)
                    continue;
                cr_assert_eq(est.bytes[mk][c], s->bytes_by_kind_cat[k][c],
                             "stage %d world %d accum %d offload %d rank %d kind %d cat %d: "
                             "planned %lld, allocated %lld", stage, world, accum, off, rank, k,
                             c, (long long)est.bytes[mk][c],
                             (long long)s->bytes_by_kind_cat[k][c]);
            }
            const int64_t pb = est.bytes[mk][ZC_MEM_BUFFERS] + est.bytes[mk][ZC_MEM_RESERVED];
            const int64_t sb = s->bytes_by_kind_cat[k][ZC_MEM_BUFFERS] +
                               s->bytes_by_kind_cat[k][ZC_MEM_RESERVED];
            cr_assert_eq(pb, sb, "stage %d world %d accum %d offload %d kind %d buffers: "
                         "planned %lld, allocated %lld", stage, world, accum, off, k,
                         (long long)pb, (long long)sb);
        }
        cr_assert_lt(s->bytes_by_kind_cat[ZC_KIND_HOST][ZC_MEM_OTHER] +
                         s->bytes_by_kind_cat[ZC_KIND_PINNED][ZC_MEM_OTHER], OTHER_BOUND);
        cr_assert_eq(s->bytes_by_kind_cat[ZC_KIND_NVME][ZC_MEM_OTHER],
                     est.bytes[ZC_MEMKIND_NVME][ZC_MEM_OTHER], "stripe round-up: planned %lld, "
                     "counted %lld", (long long)est.bytes[ZC_MEMKIND_NVME][ZC_MEM_OTHER],
                     (long long)s->bytes_by_kind_cat[ZC_KIND_NVME][ZC_MEM_OTHER]);
    }
    free(r->master);
    free(r);
}

static void check_one(int stage, int world, int accum, int off, const char *nvme_json,
                      int views)
{
    check_one_staged(stage, world, accum, off, nvme_json, views, false);
}

Test(estimate, plan_equals_allocation)
{
    char dir[64], json[96];
    snprintf(dir, sizeof dir, "zc-estimate-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(json, sizeof json, "\"%s\"", dir);
    for (int stage = 0; stage <= 3; stage++)
        for (int world = 1; world <= 4; world++)
            for (int accum = 1; accum <= 2; accum++)
                for (int off = 0; off <= 2; off++)
                    if (off == 0 || stage > 0)
                        check_one(stage, world, accum, off, json, 0);
    rmdir(dir);
}

/* The staging a GPU adds under cpu offload (forced on the host): a gradient
 * landing buffer per offloaded chunk and two output buffers, exactly. */
Test(estimate, plan_equals_allocation_with_cpu_staging)
{
    for (int stage = 1; stage <= 3; stage++)
        for (int world = 1; world <= 3; world++)
            for (int accum = 1; accum <= 2; accum++)
                check_one_staged(stage, world, accum, 1, NULL, 0, true);
}

/* The fp32 view pools (zc_engine_options.f32_view_chunks) are in the plan. */
Test(estimate, plan_equals_allocation_with_fp32_views)
{
    for (int stage = 0; stage <= 3; stage++)
        for (int world = 1; world <= 3; world += 2)
            for (int views = 1; views <= 3; views += 2)
                check_one(stage, world, 1, 0, NULL, views);
}

/* Hand-computed: 3 chunks of 1000, 64 and 4096 elements at world 2 pad to
 * 1024, 128 and 4096; stage 2, bf16, no offload, accumulation 1:
 *   params 2 x 5248 = 10496; fp32 grad shards 4 x 2624 = 10496;
 *   master 4 x 2624 = 10496; Adam 8 x 2624 = 20992;
 *   grad pool: 2 slots of 2 x 4096 = 8192 + 256 slack = 16640;
 *   staging pool: 1 slot of 4 x 4096 = 16384 + 256 = 16640. */
Test(estimate, hand_computed_stage2)
{
    int64_t padded[3] = {zc__chunk_padded(1000, 2), zc__chunk_padded(64, 2),
                         zc__chunk_padded(4096, 2)};
    cr_assert_eq(padded[0], 1024);
    cr_assert_eq(padded[1], 128);
    cr_assert_eq(padded[2], 4096);
    zc_est_in in = {.world = 2, .stage = 2, .pesz = 2, .gas = 1, .offload = ZC_OFFLOAD_NONE,
                    .dev_kind = ZC_MEMKIND_DEVICE, .max_live = INT64_MAX, .nchunks = 3,
                    .padded = padded};
    zc_est e;
    cr_assert_eq(zc__estimate(&in, &e), ZC_OK);
    const int64_t *d = e.bytes[ZC_MEMKIND_DEVICE];
    cr_assert_eq(d[ZC_MEM_PARAMS], 10496);
    cr_assert_eq(d[ZC_MEM_GRADS], 10496);
    cr_assert_eq(d[ZC_MEM_MASTER], 10496);
    cr_assert_eq(d[ZC_MEM_ADAM], 20992);
    cr_assert_eq(d[ZC_MEM_RESERVED], 16640 + 16640);
    cr_assert_eq(e.kind_total[ZC_MEMKIND_DEVICE], 10496 * 3 + 20992 + 33280);
    cr_assert_eq(e.kind_total[ZC_MEMKIND_HOST] + e.kind_total[ZC_MEMKIND_PINNED], 0);
    cr_assert_eq(zc__est_part_bytes(&e, ZC_MEMKIND_DEVICE, ZC_EST_OPTIMIZER), 10496 + 20992);
    cr_assert_eq(zc__est_part_bytes(&e, ZC_MEMKIND_DEVICE, ZC_EST_BUFFERS), 33280);
}

Test(estimate, refuses_bad_input_and_overflow)
{
    int64_t bad[1] = {100};
    zc_est_in in = {.world = 1, .stage = 1, .pesz = 2, .gas = 1, .max_live = 1, .nchunks = 1,
                    .padded = bad};
    zc_est e;
    cr_assert_eq(zc__estimate(&in, &e), ZC_ERR_INVALID_ARG);
    int64_t huge[2] = {INT64_MAX / 64 * 64, INT64_MAX / 64 * 64};
    in.padded = huge;
    in.nchunks = 2;
    cr_assert_eq(zc__estimate(&in, &e), ZC_ERR_NO_MEMORY);
    in.nchunks = 1;
    in.padded = (int64_t[]){64};
    in.stage = 0;
    in.offload = ZC_OFFLOAD_CPU;
    in.ratio = 1;
    cr_assert_eq(zc__estimate(&in, &e), ZC_ERR_CONFIG);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

Test(estimate, build_refuses_beyond_memavailable)
{
    char root[64], path[128];
    snprintf(root, sizeof root, "zc-est-root-XXXXXX");
    cr_assert_not_null(mkdtemp(root));
    snprintf(path, sizeof path, "%s/proc", root);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/proc/meminfo", root);
    /* 4 KiB available: less than any plan of the test model. */
    write_file(path, "MemTotal:       1000 kB\nMemAvailable:       4 kB\n");
    zc__preflight_limits_root(root);
    /* By hand rather than through t_engine_run, to look at the memory
     * between the refused build and destroy: nothing pinned, and only the
     * layout's bookkeeping in host memory. */
    zc_config *cfg = NULL;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage", 1), ZC_OK);
    cr_assert_eq(zc_config_set(cfg, "zero_optimization.offload_optimizer.device", "\"cpu\""),
                 ZC_OK);
    zc_comm *comm = NULL;
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    zc_engine *e = NULL;
    cr_assert_eq(zc_engine_create(&e, cfg, comm, &eo), ZC_OK, "%s", zc_last_error());
    const int64_t shape[2] = {1024, 1024};
    cr_assert_not_null(zc_param_add(e, "w", shape, 2, 0), "%s", zc_last_error());
    const int64_t host_before = zc__mem_global_bytes(ZC_MEMKIND_HOST);
    const zc_status rc = zc_engine_build(e);
    zc__preflight_limits_root(NULL);
    cr_assert_eq(rc, ZC_ERR_NO_MEMORY, "build must refuse: %s", zc_last_error());
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", zc_last_error());
    cr_assert_eq(zc__mem_global_bytes(ZC_MEMKIND_PINNED), 0);
    /* The 1 Mi-element model would need 8 MiB for its parameters alone. */
    cr_assert_lt(zc__mem_global_bytes(ZC_MEMKIND_HOST) - host_before, 64 * 1024,
                 "the refused build allocated %lld bytes",
                 (long long)(zc__mem_global_bytes(ZC_MEMKIND_HOST) - host_before));
    zc_engine_destroy(e);
    zc_comm_destroy(comm);
    zc_config_destroy(cfg);
    cr_assert_not_null(strstr(msg, "MemAvailable"), "%s", msg);
    cr_assert_not_null(strstr(msg, "biggest consumer is optimizer state (fp32 master, Adam m and v) in pinned host"), "%s", msg);
    cr_assert_not_null(strstr(msg, "zero_optimization.offload_optimizer.device"), "%s", msg);
    cr_assert_not_null(strstr(msg, "the plan needs"), "%s", msg);
    remove(path);
    snprintf(path, sizeof path, "%s/proc", root);
    rmdir(path);
    rmdir(root);
}

/* A one-rank engine over a 1 Mi-element weight, built under a device
 * capacity set for the test (the host backend has none of its own): returns
 * the build's status, the message in msg, and the host bytes the build left
 * allocated beyond the registration's. */
static zc_status build_with_device_free(int64_t free_bytes, int stage, const char *offload,
                                        char *msg, size_t cap, int64_t *host_left)
{
    zc_config *cfg = NULL;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage", stage), ZC_OK);
    if (offload)
        cr_assert_eq(zc_config_set(cfg, "zero_optimization.offload_optimizer.device", offload),
                     ZC_OK);
    zc_comm *comm = NULL;
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    zc_engine *e = NULL;
    cr_assert_eq(zc_engine_create(&e, cfg, comm, &eo), ZC_OK, "%s", zc_last_error());
    const int64_t shape[2] = {1024, 1024};
    cr_assert_not_null(zc_param_add(e, "w", shape, 2, 0), "%s", zc_last_error());
    const int64_t host_before = zc__mem_global_bytes(ZC_MEMKIND_HOST);
    zc__preflight_device_free(free_bytes);
    const zc_status rc = zc_engine_build(e);
    zc__preflight_device_free(-1);
    snprintf(msg, cap, "%s", rc == ZC_OK ? "" : zc_last_error());
    *host_left = zc__mem_global_bytes(ZC_MEMKIND_HOST) - host_before;
    cr_assert_eq(zc__mem_global_bytes(ZC_MEMKIND_PINNED), 0);
    zc_engine_destroy(e);
    zc_comm_destroy(comm);
    zc_config_destroy(cfg);
    return rc;
}

/* The device check: stage 2 at world 1 keeps the 1 Mi-element fp32 weight's
 * master, m and v (12 MiB) in device memory, next to the parameters and the
 * gradient shard (4 MiB each) and the gradient and staging pools (a chunk
 * each, 4 MiB each): 1 MiB free cannot hold it, and the message names the
 * device, the numbers, the optimizer state as the biggest consumer and the
 * key that moves it off the device. With cpu offload the optimizer state and
 * the gradient shard leave the device and the pools (8 MiB) are the biggest
 * device consumer, changed by the bucket size. A capacity of 1 TiB lets the
 * same build through. */
Test(estimate, build_refuses_beyond_device_free)
{
    char msg[2048];
    int64_t left = 0;
    zc_status rc = build_with_device_free(1 << 20, 2, NULL, msg, sizeof msg, &left);
    cr_assert_eq(rc, ZC_ERR_NO_MEMORY, "build must refuse: %s", msg);
    cr_assert_lt(left, 64 * 1024, "the refused build allocated %lld bytes", (long long)left);
    cr_assert_not_null(strstr(msg, "device memory but the device has 1.0 MiB free"), "%s", msg);
    cr_assert_not_null(strstr(msg, "biggest consumer is optimizer state (fp32 master, Adam m "
                                   "and v) (12.0 MiB): change "
                                   "zero_optimization.offload_optimizer.device"), "%s", msg);
    rc = build_with_device_free(1 << 20, 2, "\"cpu\"", msg, sizeof msg, &left);
    cr_assert_eq(rc, ZC_ERR_NO_MEMORY, "build must refuse: %s", msg);
    cr_assert_not_null(strstr(msg, "biggest consumer is buffers (gradient, gather and staging "
                                   "pools, swap buffers) (8.0 MiB): change "
                                   "zero_optimization.reduce_bucket_size"), "%s", msg);
    cr_assert_lt(left, 64 * 1024, "the refused build allocated %lld bytes", (long long)left);
    rc = build_with_device_free((int64_t)1 << 40, 2, NULL, msg, sizeof msg, &left);
    cr_assert_eq(rc, ZC_OK, "%s", msg);
}

/* DeepSpeed's estimators (reference/deepspeed.md section 6), by hand:
 *   stage 2, no offload, P 1e9, 8 GPUs on a node: GPU 2e9 + 18e9 / 8 = 4.25e9,
 *     CPU 4e9 x 8 x 1.5 = 48e9;
 *   stage 2, offload: GPU 2e9; CPU 1e9 x max(32, 16) x 1.5 = 48e9, and with 2
 *     GPUs 1e9 x max(8, 16) x 1.5 = 24e9;
 *   stage 3, no offload, P 1e9, LL 1e8, 16 GPUs, 8 per node: GPU 4e8 +
 *     18e9 / 16 = 1.525e9, CPU 4e8 x 8 x 1.5 = 4.8e9;
 *   stage 3, optimizer offload: GPU 4e8 + 2e9 / 16 = 5.25e8, CPU 16e9 / 2 x
 *     1.5 = 12e9. */
Test(estimate, deepspeed_formulas)
{
    uint64_t g = 0, c = 0;
    cr_assert_eq(zc__est_deepspeed(2, false, 1000000000, 0, 8, 8, &g, &c), ZC_OK);
    cr_assert_eq(g, 4250000000u);
    cr_assert_eq(c, 48000000000u);
    cr_assert_eq(zc__est_deepspeed(1, false, 1000000000, 0, 8, 8, &g, &c), ZC_OK);
    cr_assert_eq(g, 4250000000u);
    cr_assert_eq(zc__est_deepspeed(2, true, 1000000000, 0, 8, 8, &g, &c), ZC_OK);
    cr_assert_eq(g, 2000000000u);
    cr_assert_eq(c, 48000000000u);
    cr_assert_eq(zc__est_deepspeed(2, true, 1000000000, 0, 2, 2, &g, &c), ZC_OK);
    cr_assert_eq(c, 24000000000u);
    cr_assert_eq(zc__est_deepspeed(3, false, 1000000000, 100000000, 16, 8, &g, &c), ZC_OK);
    cr_assert_eq(g, 1525000000u);
    cr_assert_eq(c, 4800000000u);
    cr_assert_eq(zc__est_deepspeed(3, true, 1000000000, 100000000, 16, 8, &g, &c), ZC_OK);
    cr_assert_eq(g, 525000000u);
    cr_assert_eq(c, 12000000000u);
    cr_assert_eq(zc__est_deepspeed(0, false, 1, 1, 1, 1, &g, &c), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc__est_deepspeed(2, false, 1, 1, 6, 4, &g, &c), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc__est_deepspeed(2, false, UINT64_MAX / 4, 1, 1, 1, &g, &c), ZC_ERR_NO_MEMORY);
}
