/* The memory planner (plan/estimate.c) against what the engine allocates.
 *
 * For stages 0-3 x offload none/cpu/nvme (offload from stage 1) x world 1..4
 * x accumulation 1, 2, the plan made from the built engine's layout (chunk
 * sizes, persistence, live bound, read in a step hook) equals zc_stats after
 * the run, exactly, for every kind (host, pinned, NVMe) and every category
 * but ZC_MEM_OTHER; transient buffers and the idle reserve are compared as
 * one sum (a pool slot in use moves from RESERVED to BUFFERS). Host
 * ZC_MEM_OTHER (bookkeeping the plan leaves out) stays below OTHER_BOUND
 * bytes per rank for this model; the device's (status records, norm
 * partials) and the NVMe files' stripe round-up (counted as NVMe OTHER) are
 * planned exactly.
 *
 * The same with fp32 view slots reserved (f32_view_chunks 1 and 3), and at
 * stage 3 with offload_param cpu and nvme (x offload_optimizer none/cpu/nvme
 * x world 1..4 x accumulation 1, 2; nvme also with max_in_cpu caching some
 * chunks and with persistent chunks that stay on the device): the pinned
 * shards, the cached shards, the swap buffers and the parameter swap file
 * (its stripe round-up included) as the homes allocate them.
 * And with the cpu home's staging forced on (what a GPU allocates).
 *
 * The pre-flight: with a fake /proc/meminfo of too little MemAvailable, build
 * fails with ZC_ERR_NO_MEMORY naming the biggest consumer and its key, and
 * nothing stays allocated; with a device capacity below the plan's device
 * bytes it fails the same way naming the device. With offload_param the
 * homes no longer check for themselves: too little MemAvailable names the
 * pinned parameter shards and offload_param's key, too little disk space
 * (a capacity set for the test) the parameter swap file and
 * offload_param.nvme_path, and nothing stays allocated or on disk. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "core/engine.h"
#include "plan/plan.h"
#include "helpers.h"
#include "t_engine.h"

#define OTHER_BOUND (2 * 1024 * 1024)

typedef struct layout {
    int64_t padded[64];
    bool persistent[64];
    bool units[64];    /* a zc_chunk_boundary starts a unit at the chunk */
    bool has_units;    /* some parameter follows a zc_chunk_boundary */
    int nchunks;
    int64_t max_live, prefetch, buffer_count, nvme_round;
    int64_t pbuffer_count, max_in_cpu, pnvme_round;
    double ratio;
    zc_memory_plan plan;   /* zc_plan_memory of the run's configuration and model */
    zc_status plan_rc;
    char plan_err[512];
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
        l->units[k] = e->params[e->chunks[k].first]->chunk_start;
        l->has_units = l->has_units || l->units[k];
    }
    l->max_live = e->max_live;
    l->prefetch = e->prefetch_elems;
    l->buffer_count = e->cfg->zero.offload_optimizer.buffer_count;
    l->nvme_round = e->cfg->aio.block_size *
                    zc__nvme_path_count(e->cfg->zero.offload_optimizer.nvme_path);
    l->ratio = e->cfg->zero.offload_optimizer.ratio;
    l->pbuffer_count = e->cfg->zero.offload_param.buffer_count;
    l->max_in_cpu = e->cfg->zero.offload_param.max_in_cpu;
    l->pnvme_round = e->cfg->aio.block_size *
                     zc__nvme_path_count(e->cfg->zero.offload_param.nvme_path);
    /* The public planner, from what the harness registers (t_ctx_open). */
    zc_plan_tensor t[T_NPARAMS];
    for (int i = 0; i < T_NPARAMS; i++)
        t[i] = (zc_plan_tensor){&t_numel[i], 1, t_boundary[i]};
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = x->run->bucket;
    eo.f32_view_chunks = x->run->f32_views;
    l->plan.size = sizeof l->plan;
    l->plan_rc = zc_plan_memory(x->cfg, x->run->world, t, T_NPARAMS, &eo, &l->plan);
    snprintf(l->plan_err, sizeof l->plan_err, "%s", zc_last_error());
}

static const int kind_of[ZC_MEMKIND__COUNT] = {
    [ZC_MEMKIND_HOST] = ZC_KIND_HOST, [ZC_MEMKIND_PINNED] = ZC_KIND_PINNED,
    [ZC_MEMKIND_DEVICE] = ZC_KIND_DEVICE, [ZC_MEMKIND_NVME] = ZC_KIND_NVME};

/* Parameter offload of a run (stage 3): none/cpu/nvme, max_in_cpu (nvme)
 * and stage3_param_persistence_threshold (< 0: none). */
typedef struct poff_opts {
    int dev;
    int64_t max_in_cpu, persistence;
} poff_opts;

static const poff_opts NO_POFF = {0, 0, -1};

/* The optimizer state's precision of the next check_with runs: extra
 * config keys and the bytes per element of master, m, v they give (the
 * planner's input, stated independently of the engine). */
static const char *const *state_keys;
static size_t state_sesz[3];

static void check_with(int stage, int world, int accum, int off, const char *nvme_json,
                       int views, poff_opts po, bool staged)
{
    static const char *const names[] = {NULL, "cpu", "nvme"};
    static const int dev_of[] = {ZC_OFFLOAD_NONE, ZC_OFFLOAD_CPU, ZC_OFFLOAD_NVME};
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
    r->offload_param = names[po.dev];
    r->param_nvme_path_json = po.dev == 2 ? nvme_json : NULL;
    r->max_in_cpu = po.max_in_cpu;
    r->persistence = po.persistence;
    r->keys = state_keys;
    zc__opt_force_staging(staged);
    const bool ran = t_engine_run(r);
    zc__opt_force_staging(false);
    cr_assert(ran, "%s", t_run_error(r));
    zc_est_in in = {
        .world = world, .stage = stage, .pesz = 2, .gas = accum,
        .sesz = {state_sesz[0], state_sesz[1], state_sesz[2]},
        .offload = off == 0 ? ZC_OFFLOAD_NONE : off == 1 ? ZC_OFFLOAD_CPU : ZC_OFFLOAD_NVME,
        .ratio = l.ratio, .staging = staged, .dev_kind = ZC_MEMKIND_HOST,
        .buffer_count = l.buffer_count, .nvme_round = l.nvme_round, .max_live = l.max_live, .prefetch_elems = l.prefetch,
        .nchunks = l.nchunks, .padded = l.padded, .persistent = l.persistent,
        .unit_start = l.has_units ? l.units : NULL, .view_chunks = views,
        .poffload = dev_of[po.dev], .pbuffer_count = l.pbuffer_count,
        .max_in_cpu = l.max_in_cpu, .pnvme_round = l.pnvme_round,
    };
    zc_est est;
    cr_assert_eq(zc__estimate(&in, &est), ZC_OK, "%s", zc_last_error());
    /* zc_plan_memory makes the same plan from the model and configuration
     * alone (forced staging is a test hook it does not see). */
    cr_assert_eq(l.plan_rc, ZC_OK, "zc_plan_memory: %s", l.plan_err);
    for (int mk = 0; mk < ZC_MEMKIND__COUNT && !staged; mk++) {
        cr_assert_eq(l.plan.bytes_by_kind[kind_of[mk]], est.kind_total[mk],
                     "stage %d world %d accum %d offload %d/%d: zc_plan_memory kind %d %lld, "
                     "the planner %lld", stage, world, accum, off, po.dev, kind_of[mk],
                     (long long)l.plan.bytes_by_kind[kind_of[mk]],
                     (long long)est.kind_total[mk]);
        for (int c = 0; c < ZC_MEM__COUNT; c++)
            cr_assert_eq(l.plan.bytes_by_kind_cat[kind_of[mk]][c], est.bytes[mk][c]);
    }
    cr_assert_eq(l.plan.num_chunks, l.nchunks);
    cr_assert_eq(l.plan.dtype, ZC_DTYPE_BF16);
    cr_assert(l.plan.host_device);
    cr_assert_eq(l.plan.grad_buffer_bytes, est.grad_pool);
    cr_assert_eq(l.plan.grad_buffer_bytes > 0, stage >= 2);
    if (stage == 3 && po.dev == 2 && po.max_in_cpu == 0)
        cr_assert_gt(est.param_nvme, 0, "offload_param nvme planned no swap file");
    for (int rank = 0; rank < world; rank++) {
        const zc_stats *s = &r->stats[rank];
        for (int mk = 0; mk < ZC_MEMKIND__COUNT; mk++) {
            const int k = kind_of[mk];
            for (int c = 0; c < ZC_MEM__COUNT; c++) {
                if (c == ZC_MEM_OTHER || c == ZC_MEM_BUFFERS || c == ZC_MEM_RESERVED)
                    continue;
                cr_assert_eq(est.bytes[mk][c], s->bytes_by_kind_cat[k][c],
                             "stage %d world %d accum %d offload %d/%d rank %d kind %d cat %d: "
                             "planned %lld, allocated %lld", stage, world, accum, off, po.dev,
                             rank, k,
                             c, (long long)est.bytes[mk][c],
                             (long long)s->bytes_by_kind_cat[k][c]);
            }
            const int64_t pb = est.bytes[mk][ZC_MEM_BUFFERS] + est.bytes[mk][ZC_MEM_RESERVED];
            const int64_t sb = s->bytes_by_kind_cat[k][ZC_MEM_BUFFERS] +
                               s->bytes_by_kind_cat[k][ZC_MEM_RESERVED];
            cr_assert_eq(pb, sb, "stage %d world %d accum %d offload %d/%d kind %d buffers: "
                         "planned %lld, allocated %lld", stage, world, accum, off, po.dev, k,
                         (long long)pb, (long long)sb);
        }
        cr_assert_lt(s->bytes_by_kind_cat[ZC_KIND_HOST][ZC_MEM_OTHER] +
                         s->bytes_by_kind_cat[ZC_KIND_PINNED][ZC_MEM_OTHER], OTHER_BOUND);
        /* The device's bookkeeping (status records, norm partials) is
         * planned exactly, so budgets hold it. */
        cr_assert_eq(s->bytes_by_kind_cat[ZC_KIND_DEVICE][ZC_MEM_OTHER],
                     est.bytes[ZC_MEMKIND_DEVICE][ZC_MEM_OTHER], "device bookkeeping: planned "
                     "%lld, counted %lld", (long long)est.bytes[ZC_MEMKIND_DEVICE][ZC_MEM_OTHER],
                     (long long)s->bytes_by_kind_cat[ZC_KIND_DEVICE][ZC_MEM_OTHER]);
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
    check_with(stage, world, accum, off, nvme_json, views, NO_POFF, false);
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

/* bf16 optimizer state: master and moments (stages 1-3, every home), the
 * moments alone (stages 0-3), a bf16 master with fp32 moments (offload
 * only): the plan is what the engine allocates. */
Test(estimate, plan_equals_allocation_bf16_state)
{
    char dir[64], json[96];
    snprintf(dir, sizeof dir, "zc-estimate-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(json, sizeof json, "\"%s\"", dir);
    static const char *const all[] = {"bf16.bf16_master_weights_and_grads", "true",
                                      "bf16.bf16_optimizer_states", "true", NULL};
    static const char *const moments[] = {"bf16.exp_avg_dtype", "\"bf16\"",
                                          "bf16.exp_avg_sq_dtype", "\"bf16\"", NULL};
    static const char *const master[] = {"bf16.bf16_master_weights_and_grads", "true", NULL};
    for (int world = 1; world <= 3; world++)
        for (int accum = 1; accum <= 2; accum++)
            for (int stage = 0; stage <= 3; stage++)
                for (int off = 0; off <= 2; off++) {
                    if (off > 0 && stage == 0)
                        continue;
                    state_keys = moments;
                    memcpy(state_sesz, (size_t[3]){4, 2, 2}, sizeof state_sesz);
                    check_one(stage, world, accum, off, json, 0);
                    if (stage == 0)
                        continue;
                    state_keys = all;
                    memcpy(state_sesz, (size_t[3]){2, 2, 2}, sizeof state_sesz);
                    check_one(stage, world, accum, off, json, 0);
                    if (off == 0)
                        continue;
                    state_keys = master;
                    memcpy(state_sesz, (size_t[3]){2, 4, 4}, sizeof state_sesz);
                    check_one(stage, world, accum, off, json, 0);
                }
    state_keys = NULL;
    memset(state_sesz, 0, sizeof state_sesz);
    rmdir(dir);
}

/* The hand-computed stage-2 plan with bf16 master and moments: a third of
 * the bytes per element of fp32's 12 halves to 6. */
Test(estimate, hand_computed_stage2_bf16_state)
{
    int64_t padded[3] = {1024, 128, 4096};
    zc_est_in in = {.world = 2, .stage = 2, .pesz = 2, .sesz = {2, 2, 2}, .gas = 1,
                    .offload = ZC_OFFLOAD_NONE, .dev_kind = ZC_MEMKIND_DEVICE,
                    .max_live = INT64_MAX, .nchunks = 3, .padded = padded};
    zc_est e;
    cr_assert_eq(zc__estimate(&in, &e), ZC_OK);
    const int64_t shard = (1024 + 128 + 4096) / 2; /* 2624 elements per rank */
    cr_assert_eq(e.bytes[ZC_MEMKIND_DEVICE][ZC_MEM_MASTER], shard * 2);
    cr_assert_eq(e.bytes[ZC_MEMKIND_DEVICE][ZC_MEM_ADAM], shard * 4);
    in.sesz[0] = 3;
    cr_assert_eq(zc__estimate(&in, &e), ZC_ERR_INVALID_ARG);
}

/* Stage 3 with offload_param cpu and nvme, every offload_optimizer. */
Test(estimate, plan_equals_allocation_offload_param)
{
    char dir[64], json[96];
    snprintf(dir, sizeof dir, "zc-estimate-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(json, sizeof json, "\"%s\"", dir);
    for (int world = 1; world <= 4; world++)
        for (int accum = 1; accum <= 2; accum++)
            for (int off = 0; off <= 2; off++)
                for (int pdev = 1; pdev <= 2; pdev++)
                    check_with(3, world, accum, off, json, 0, (poff_opts){pdev, 0, -1}, false);
    rmdir(dir);
}

/* nvme with max_in_cpu caching the chunks that fit (the test model's shards
 * at world 2 are 1024, 1024, ... elements: 2500 caches two of them and skips
 * to smaller ones), a list of two directories (the store's round-up is two
 * stripes), and persistent chunks (threshold 600: the small parameters'
 * chunks) that keep their shard on the device. */
Test(estimate, plan_equals_allocation_offload_param_cached_and_persistent)
{
    char d1[64], d2[64], json[200];
    snprintf(d1, sizeof d1, "zc-estimate-XXXXXX");
    snprintf(d2, sizeof d2, "zc-estimate-XXXXXX");
    cr_assert_not_null(mkdtemp(d1));
    cr_assert_not_null(mkdtemp(d2));
    snprintf(json, sizeof json, "[\"%s\", \"%s\"]", d1, d2);
    for (int world = 1; world <= 3; world++)
        for (int off = 0; off <= 2; off += 2) {
            check_with(3, world, 1, off, json, 0, (poff_opts){2, 2500, -1}, false);
            check_with(3, world, 1, off, json, 0, (poff_opts){2, 0, 600}, false);
            check_with(3, world, 1, off, json, 0, (poff_opts){1, 0, 600}, false);
            check_with(3, world, 2, off, json, 0, (poff_opts){2, 1 << 20, -1}, false);
        }
    rmdir(d1);
    rmdir(d2);
}

/* The staging a GPU adds under cpu offload (forced on the host): a gradient
 * landing buffer per offloaded chunk and two output buffers, exactly. */
Test(estimate, plan_equals_allocation_with_cpu_staging)
{
    for (int stage = 1; stage <= 3; stage++)
        for (int world = 1; world <= 3; world++)
            for (int accum = 1; accum <= 2; accum++)
                check_with(stage, world, accum, 1, NULL, 0, NO_POFF, true);
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
    /* Device bookkeeping: 1 KiB status records, a send record and one per
     * rank; norm partials, 3 chunks x (send + 2 ranks) doubles; one double
     * of sumsq scratch (the largest shard, 2048, is one block). */
    cr_assert_eq(d[ZC_MEM_OTHER], 1024 * 3 + 8 * 3 * 3 + 8);
    cr_assert_eq(e.kind_total[ZC_MEMKIND_DEVICE], 10496 * 3 + 20992 + 33280 + 3152);
    cr_assert_eq(e.kind_total[ZC_MEMKIND_HOST] + e.kind_total[ZC_MEMKIND_PINNED], 0);
    cr_assert_eq(zc__est_part_bytes(&e, ZC_MEMKIND_DEVICE, ZC_EST_OPTIMIZER), 10496 + 20992);
    cr_assert_eq(zc__est_part_bytes(&e, ZC_MEMKIND_DEVICE, ZC_EST_BUFFERS), 33280);
}

/* The stage-2/3 gradient pool by units (zc__grad_pool_plan): two sets, each
 * holding the chunks of any k units together, k as many units as fit in the
 * bucket (at least one), at most one slot per chunk, classes largest first. */
typedef struct classes {
    int64_t elems[8];
    int count[8];
    int n;
} classes;

static zc_status collect(void *arg, int64_t elems, int count)
{
    classes *c = arg;
    cr_assert_lt(c->n, 8);
    c->elems[c->n] = elems;
    c->count[c->n++] = count;
    return ZC_OK;
}

static void expect_pool_k(const int64_t *padded, const bool *units, int n, int64_t set_elems,
                          int set_units, const int64_t *elems, const int *count, int nclasses)
{
    classes c = {0};
    int k = -1;
    cr_assert_eq(zc__grad_pool_plan(padded, units, n, set_elems, collect, &c, &k), ZC_OK);
    cr_assert_eq(k, set_units, "%d units per set, expected %d", k, set_units);
    cr_assert_eq(c.n, nclasses, "%d classes, expected %d", c.n, nclasses);
    for (int i = 0; i < nclasses; i++) {
        cr_assert_eq(c.elems[i], elems[i], "class %d: %lld elements", i, (long long)c.elems[i]);
        cr_assert_eq(c.count[i], count[i], "class %d: %d slots", i, c.count[i]);
    }
}

/* A bucket smaller than any unit: one unit per set. */
static void expect_pool(const int64_t *padded, const bool *units, int n, const int64_t *elems,
                        const int *count, int nclasses)
{
    expect_pool_k(padded, units, n, 1, 1, elems, count, nclasses);
}

Test(estimate, grad_pool_by_units)
{
    const int64_t p4[4] = {640, 64, 320, 320};
    /* units {640, 64} and {320, 320}: a set is {640, 320} */
    expect_pool(p4, (bool[]){true, false, true, false}, 4, (int64_t[]){640, 320},
                (int[]){2, 2}, 2);
    /* no boundary: each chunk a unit, two of the largest */
    expect_pool(p4, NULL, 4, (int64_t[]){640}, (int[]){2}, 1);
    /* one unit of all four: two sets would be 8 slots, the 4 largest stay */
    expect_pool(p4, (bool[]){true, false, false, false}, 4, (int64_t[]){640, 320},
                (int[]){2, 2}, 2);
    /* one unit of three: {704, 704, 512} */
    expect_pool((int64_t[]){320, 512, 704}, (bool[]){true, false, false}, 3,
                (int64_t[]){704, 512}, (int[]){2, 1}, 2);
    /* a single chunk: one slot */
    expect_pool((int64_t[]){128}, NULL, 1, (int64_t[]){128}, (int[]){1}, 1);
    /* units of 2, 2 and 1 equal chunks: two sets of two */
    expect_pool((int64_t[]){64, 64, 64, 64, 64}, (bool[]){true, false, true, false, true}, 5,
                (int64_t[]){64}, (int[]){4}, 1);

    /* Sets of as many units as fit in the bucket. Units of 2, 2 and 1
     * chunks of 64: a bucket of 200 holds one unit of 128 (not two: 256),
     * so four slots as above; one of 256 holds two units, two sets of four
     * chunks would be 8 slots, the 5 chunks stay; one of 320 holds all. */
    const bool *u221 = (bool[]){true, false, true, false, true};
    const int64_t p5[5] = {64, 64, 64, 64, 64};
    expect_pool_k(p5, u221, 5, 200, 1, (int64_t[]){64}, (int[]){4}, 1);
    expect_pool_k(p5, u221, 5, 256, 2, (int64_t[]){64}, (int[]){5}, 1);
    expect_pool_k(p5, u221, 5, 320, 3, (int64_t[]){64}, (int[]){5}, 1);
    /* Six chunks of 100 without boundaries: a bucket of 250 holds two, so
     * two sets of two; a large bucket holds all six, each its own slot. */
    const int64_t p6[6] = {100, 100, 100, 100, 100, 100};
    expect_pool_k(p6, NULL, 6, 250, 2, (int64_t[]){100}, (int[]){4}, 1);
    expect_pool_k(p6, NULL, 6, INT64_MAX, 6, (int64_t[]){100}, (int[]){6}, 1);
    /* Chunks of 300, 200, 100 and 50 without boundaries: a bucket of 500
     * holds the two largest together (300 + 200), so a set needs a slot of
     * 300 and one of 200 (any two chunks fit those); a bucket of 499 holds
     * one, so a set is one slot of 300. */
    const int64_t pm[4] = {300, 200, 100, 50};
    expect_pool_k(pm, NULL, 4, 500, 2, (int64_t[]){300, 200}, (int[]){2, 2}, 2);
    expect_pool_k(pm, NULL, 4, 499, 1, (int64_t[]){300}, (int[]){2}, 1);
    /* Units {300, 200}, {100, 50}, {100, 50}: a bucket of 650 holds the
     * largest and one other (500 + 150), whose chunks of at least 100 are
     * three: a set is {300, 200, 100}; of 600 a set is the largest unit's
     * {300, 200}, which any other unit's chunks fit too. */
    const int64_t pu[6] = {300, 200, 100, 50, 100, 50};
    const bool *u222 = (bool[]){true, false, true, false, true, false};
    expect_pool_k(pu, u222, 6, 650, 2, (int64_t[]){300, 200, 100}, (int[]){2, 2, 2}, 3);
    expect_pool_k(pu, u222, 6, 600, 1, (int64_t[]){300, 200}, (int[]){2, 2}, 2);

    /* The plan counts it: stage 2, world 1, fp32, units {640, 64} and
     * {320, 320}: slots 2 x 640 x 4 and 2 x 320 x 4 bytes, 256 bytes of
     * slack per class; the staging pool adds one fp32 slot of 640. */
    zc_est_in in = {.world = 1, .stage = 2, .pesz = 4, .gas = 1, .offload = ZC_OFFLOAD_NONE,
                    .dev_kind = ZC_MEMKIND_DEVICE, .max_live = INT64_MAX, .nchunks = 4,
                    .padded = p4, .unit_start = (bool[]){true, false, true, false}};
    zc_est e;
    cr_assert_eq(zc__estimate(&in, &e), ZC_OK, "%s", zc_last_error());
    const int64_t grad = 2 * 640 * 4 + 256 + 2 * 320 * 4 + 256, stage = 640 * 4 + 256;
    cr_assert_eq(e.bytes[ZC_MEMKIND_DEVICE][ZC_MEM_RESERVED], grad + stage);
    in.unit_start = NULL;
    cr_assert_eq(zc__estimate(&in, &e), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(e.bytes[ZC_MEMKIND_DEVICE][ZC_MEM_RESERVED], 2 * 640 * 4 + 256 + stage);
}

/* zc_plan_memory refuses bad input, naming it, and leaves *out alone; a
 * configuration the engine refuses is refused alike; a CUDA plan needs no
 * device and puts the engine's buffers in device memory. */
Test(estimate, plan_memory_refuses_bad_input)
{
    zc_config *cfg = NULL;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    const int64_t shape[2] = {64, 32}, bad_shape[2] = {64, 0};
    zc_plan_tensor t[2] = {{shape, 2, false}, {shape, 1, true}};
    zc_memory_plan p = {.size = sizeof p};
    p.num_chunks = -7;
    cr_assert_eq(zc_plan_memory(cfg, 0, t, 2, NULL, &p), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_plan_memory(NULL, 1, t, 2, NULL, &p), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_plan_memory(cfg, 1, t, 0, NULL, &p), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_plan_memory(cfg, 1, t, 2, NULL, NULL), ZC_ERR_INVALID_ARG);
    zc_memory_plan shortp = {.size = 8};
    cr_assert_eq(zc_plan_memory(cfg, 1, t, 2, NULL, &shortp), ZC_ERR_INVALID_ARG);
    zc_plan_tensor bad[2] = {{shape, 2, false}, {bad_shape, 2, false}};
    cr_assert_eq(zc_plan_memory(cfg, 1, bad, 2, NULL, &p), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "tensor 1: dimension 1 is 0"), "%s", zc_last_error());
    bad[1] = (zc_plan_tensor){shape, 9, false};
    cr_assert_eq(zc_plan_memory(cfg, 1, bad, 2, NULL, &p), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_config_set(cfg, "zero_optimization.offload_optimizer.device", "\"cpu\""),
                 ZC_OK);
    cr_assert_eq(zc_plan_memory(cfg, 1, t, 2, NULL, &p), ZC_ERR_CONFIG, "%s", zc_last_error());
    cr_assert_eq(p.num_chunks, -7, "a failed plan wrote its output");
    /* Stage 2, cpu offload, bf16, world 2: on the host path nothing stages,
     * on CUDA the landing and output buffers are pinned and the engine's
     * buffers are device memory. */
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage", 2), ZC_OK);
    cr_assert_eq(zc_config_set_bool(cfg, "bf16.enabled", true), ZC_OK);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    zc_memory_plan host = {.size = sizeof host}, cuda = {.size = sizeof cuda};
    cr_assert_eq(zc_plan_memory(cfg, 2, t, 2, &eo, &host), ZC_OK, "%s", zc_last_error());
    eo.device = ZC_DEVICE_CUDA;
    cr_assert_eq(zc_plan_memory(cfg, 2, t, 2, &eo, &cuda), ZC_OK, "%s", zc_last_error());
    cr_assert(host.host_device && !cuda.host_device);
    cr_assert_eq(host.dtype, ZC_DTYPE_BF16);
    /* The host path's "device" buffers are reported as device memory, as a
     * GPU's are: the same bytes, nothing in pageable host memory. */
    cr_assert_eq(host.bytes_by_kind[ZC_KIND_HOST], 0);
    cr_assert_eq(cuda.bytes_by_kind[ZC_KIND_DEVICE], host.bytes_by_kind[ZC_KIND_DEVICE]);
    cr_assert_gt(cuda.bytes_by_kind[ZC_KIND_PINNED], host.bytes_by_kind[ZC_KIND_PINNED]);
    /* 2048 + 64 elements: the first chunk {64 x 32} and, after the
     * boundary, {64}, each padded to world x 64. */
    cr_assert_eq(host.num_params, 2048 + 64);
    cr_assert_eq(host.num_chunks, 2);
    cr_assert_eq(host.padded_params, 2048 + 128);
    zc_config_destroy(cfg);
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
    cr_assert_not_null(strstr(msg, "biggest consumer is optimizer state (master, Adam m and v) in pinned host"), "%s", msg);
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
    cr_assert_not_null(strstr(msg, "biggest consumer is optimizer state (master, Adam m and "
                                   "v) (12.0 MiB): change "
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
 *     1.5 = 12e9;
 *   stage 3, optimizer and parameter offload: GPU 4e8, CPU 18e9 / 2 x 1.5 =
 *     13.5e9. */
Test(estimate, deepspeed_formulas)
{
    uint64_t g = 0, c = 0;
    cr_assert_eq(zc__est_deepspeed(2, false, false, 1000000000, 0, 8, 8, &g, &c), ZC_OK);
    cr_assert_eq(g, 4250000000u);
    cr_assert_eq(c, 48000000000u);
    cr_assert_eq(zc__est_deepspeed(1, false, false, 1000000000, 0, 8, 8, &g, &c), ZC_OK);
    cr_assert_eq(g, 4250000000u);
    cr_assert_eq(zc__est_deepspeed(2, true, false, 1000000000, 0, 8, 8, &g, &c), ZC_OK);
    cr_assert_eq(g, 2000000000u);
    cr_assert_eq(c, 48000000000u);
    cr_assert_eq(zc__est_deepspeed(2, true, false, 1000000000, 0, 2, 2, &g, &c), ZC_OK);
    cr_assert_eq(c, 24000000000u);
    cr_assert_eq(zc__est_deepspeed(3, false, false, 1000000000, 100000000, 16, 8, &g, &c), ZC_OK);
    cr_assert_eq(g, 1525000000u);
    cr_assert_eq(c, 4800000000u);
    cr_assert_eq(zc__est_deepspeed(3, true, false, 1000000000, 100000000, 16, 8, &g, &c), ZC_OK);
    cr_assert_eq(g, 525000000u);
    cr_assert_eq(c, 12000000000u);
    cr_assert_eq(zc__est_deepspeed(3, true, true, 1000000000, 100000000, 16, 8, &g, &c), ZC_OK);
    cr_assert_eq(g, 400000000u);
    cr_assert_eq(c, 13500000000u);
    cr_assert_eq(zc__est_deepspeed(3, false, true, 1, 1, 1, 1, &g, &c), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc__est_deepspeed(2, true, true, 1, 1, 1, 1, &g, &c), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc__est_deepspeed(0, false, false, 1, 1, 1, 1, &g, &c), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc__est_deepspeed(2, false, false, 1, 1, 6, 4, &g, &c), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc__est_deepspeed(2, false, false, UINT64_MAX / 4, 1, 1, 1, &g, &c), ZC_ERR_NO_MEMORY);
}

/* A one-rank stage-3 engine of 16 fp32 weights of 64 Ki elements, a chunk
 * each (reduce_bucket_size 65536), none persistent, no prefetch window, configured by the
 * key/value pairs kv (NULL-terminated), built under the fake limits root
 * and NVMe capacity given (NULL / < 0: the real ones). Returns the build's
 * status with the message in msg; asserts that a refused build left nothing
 * pinned, almost nothing in host memory and nothing under the dirs. */
static zc_status build_offload_param(const char *const *kv, const char *root,
                                     int64_t nvme_free, const char *const *dirs, char *msg,
                                     size_t cap)
{
    zc_config *cfg = NULL;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage", 3), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.reduce_bucket_size", 65536), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage3_prefetch_bucket_size", 0),
                 ZC_OK);
    /* No persistent chunks (the default threshold would keep every one). */
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage3_param_persistence_threshold",
                                   0), ZC_OK);
    for (int i = 0; kv[i]; i += 2)
        cr_assert_eq(zc_config_set(cfg, kv[i], kv[i + 1]), ZC_OK, "%s: %s", kv[i],
                     zc_last_error());
    zc_comm *comm = NULL;
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    zc_engine *e = NULL;
    cr_assert_eq(zc_engine_create(&e, cfg, comm, &eo), ZC_OK, "%s", zc_last_error());
    for (int i = 0; i < 16; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        const int64_t shape[2] = {256, 256};
        cr_assert_not_null(zc_param_add(e, name, shape, 2, 0), "%s", zc_last_error());
    }
    const int64_t host_before = zc__mem_global_bytes(ZC_MEMKIND_HOST);
    zc__preflight_limits_root(root);
    zc__preflight_nvme_free(nvme_free);
    const zc_status rc = zc_engine_build(e);
    zc__preflight_limits_root(NULL);
    zc__preflight_nvme_free(-1);
    snprintf(msg, cap, "%s", rc == ZC_OK ? "" : zc_last_error());
    if (rc != ZC_OK) {
        cr_assert_eq(zc__mem_global_bytes(ZC_MEMKIND_PINNED), 0);
        cr_assert_lt(zc__mem_global_bytes(ZC_MEMKIND_HOST) - host_before, 64 * 1024,
                     "the refused build allocated %lld bytes",
                     (long long)(zc__mem_global_bytes(ZC_MEMKIND_HOST) - host_before));
        for (int i = 0; dirs && dirs[i]; i++)
            cr_assert_eq(rmdir(dirs[i]), 0, "the refused build left files in %s", dirs[i]);
    }
    zc_engine_destroy(e);
    zc_comm_destroy(comm);
    zc_config_destroy(cfg);
    return rc;
}

/* Host memory: with offload_param cpu the 16 shards (4 MiB fp32) are the
 * biggest host consumer (the optimizer state is on NVMe, its gradients
 * swapped with accumulation 2, its buffers a chunk each): MemAvailable of
 * 1 MiB refuses the build naming them and offload_param's key. */
Test(estimate, build_refuses_offload_param_beyond_memavailable)
{
    char root[64], path[128], dir[64], json[96], msg[2048];
    snprintf(root, sizeof root, "zc-est-root-XXXXXX");
    cr_assert_not_null(mkdtemp(root));
    snprintf(path, sizeof path, "%s/proc", root);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/proc/meminfo", root);
    write_file(path, "MemTotal:       100000 kB\nMemAvailable:       1024 kB\n");
    snprintf(dir, sizeof dir, "zc-estimate-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(json, sizeof json, "\"%s\"", dir);
    const char *const kv[] = {"zero_optimization.offload_param.device", "\"cpu\"",
                              "zero_optimization.offload_optimizer.device", "\"nvme\"",
                              "zero_optimization.offload_optimizer.nvme_path", json,
                              "gradient_accumulation_steps", "2", NULL};
    const char *const dirs[] = {dir, NULL};
    const zc_status rc = build_offload_param(kv, root, -1, dirs, msg, sizeof msg);
    cr_assert_eq(rc, ZC_ERR_NO_MEMORY, "build must refuse: %s", msg);
    cr_assert_not_null(strstr(msg, "MemAvailable"), "%s", msg);
    cr_assert_not_null(strstr(msg, "the biggest consumer is working-precision parameters in "
                                   "pinned host memory (4.0 MiB): change "
                                   "zero_optimization.offload_param.device (\"nvme\")"),
                       "%s", msg);
    remove(path);
    snprintf(path, sizeof path, "%s/proc", root);
    rmdir(path);
    rmdir(root);
}

/* Disk space: offload_param nvme puts the 16 shards in a 4 MiB swap file.
 * With 1 MiB free the build is refused naming offload_param.nvme_path and
 * the file; with 14 MiB free the file fits, and so do the optimizer's swap
 * files (master, m, v: 12 MiB) on their own, but not both on one
 * filesystem (two directories side by side): refused, naming the optimizer's
 * store, the larger share. Nothing is created under either directory. */
/* Two new directories side by side (one filesystem), and each as a JSON
 * string; a refused build must leave them empty (build_offload_param
 * removes them). */
static void fresh_dirs(char d1[64], char d2[64], char j1[96], char j2[96])
{
    snprintf(d1, 64, "zc-estimate-XXXXXX");
    snprintf(d2, 64, "zc-estimate-XXXXXX");
    cr_assert_not_null(mkdtemp(d1));
    cr_assert_not_null(mkdtemp(d2));
    snprintf(j1, 96, "\"%s\"", d1);
    snprintf(j2, 96, "\"%s\"", d2);
}

Test(estimate, build_refuses_swap_beyond_free_space)
{
    char d1[64], d2[64], j1[96], j2[96], msg[2048];
    fresh_dirs(d1, d2, j1, j2);
    const char *const dirs[] = {d1, d2, NULL};
    const char *const alone[] = {"zero_optimization.offload_param.device", "\"nvme\"",
                                 "zero_optimization.offload_param.nvme_path", j1,
                                 "zero_optimization.offload_param.max_in_cpu", "0", NULL};
    zc_status rc = build_offload_param(alone, NULL, 1 << 20, dirs, msg, sizeof msg);
    cr_assert_eq(rc, ZC_ERR_IO, "build must refuse: %s", msg);
    char want[512];
    snprintf(want, sizeof want, "zero_optimization.offload_param.nvme_path '%s': the swap files "
             "need 4.0 MiB on its filesystem (optimizer 0.0 MiB, parameters 4.0 MiB, activations "
             "0.0 MiB) but it "
             "has 1.0 MiB free (as set by a test); the biggest consumer is the parameter "
             "shards' swap file (offload_param)", d1);
    cr_assert_not_null(strstr(msg, want), "%s", msg);
    fresh_dirs(d1, d2, j1, j2);
    const char *const both[] = {"zero_optimization.offload_param.device", "\"nvme\"",
                                "zero_optimization.offload_param.nvme_path", j1,
                                "zero_optimization.offload_param.max_in_cpu", "0",
                                "zero_optimization.offload_optimizer.device", "\"nvme\"",
                                "zero_optimization.offload_optimizer.nvme_path", j2, NULL};
    rc = build_offload_param(both, NULL, 14 << 20, dirs, msg, sizeof msg);
    cr_assert_eq(rc, ZC_ERR_IO, "build must refuse: %s", msg);
    snprintf(want, sizeof want, "zero_optimization.offload_optimizer.nvme_path '%s': the swap "
             "files need 16.0 MiB on its filesystem (optimizer 12.0 MiB, parameters 4.0 MiB, "
             "activations 0.0 MiB) but it has 14.0 MiB free", d2);
    cr_assert_not_null(strstr(msg, want), "%s", msg);
    /* 16 MiB free: both fit, the build goes through and trains nothing. */
    fresh_dirs(d1, d2, j1, j2);
    rc = build_offload_param(both, NULL, 16 << 20, dirs, msg, sizeof msg);
    cr_assert_eq(rc, ZC_OK, "%s", msg);
    rmdir(d1);
    rmdir(d2);
}
