/* Placement from memory budgets changes where the state lives, never the
 * numbers, and holds the budgets: for stages 1-3, worlds 1-4 and
 * fp32/bf16/fp16, the harness model trained with zero_optimization.max_memory
 * budgets and "auto" offload devices gives the same fp32 master parameters
 * (bitwise), grad norms and loss scales as the same run without offload, for
 * budgets that split the optimizer state over device, pinned host and NVMe
 * and (stage 3) the parameter shards over the three as well. The budgets are
 * found through zc_plan_memory (the planner the build uses); the build must
 * then place the chunks as that plan says, allocate what it plans (zc_stats by
 * kind and category, bookkeeping aside) and stay within every budget. The
 * swap directory is left empty. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "plan/plan.h"

#include "core/engine.h"
#include "helpers.h"
#include "t_engine.h"
#include "t_offload.h"
#include "t_runs.h"

#define BIG_BUDGET ((int64_t)1 << 40)

typedef enum { MIX_OPT3, MIX_PARAM3 } mix;

typedef struct budgets {
    char val[3][32];
    const char *keys[15];
} budgets;

static void set_budgets(budgets *b, t_run *r, const int64_t v[3], const char *dir_json)
{
    static const char *const names[3] = {"zero_optimization.max_memory.device",
                                         "zero_optimization.max_memory.cpu",
                                         "zero_optimization.max_memory.nvme"};
    int n = 0;
    for (int i = 0; i < 3; i++) {
        snprintf(b->val[i], sizeof b->val[i], "%lld", (long long)v[i]);
        b->keys[n++] = names[i];
        b->keys[n++] = b->val[i];
    }
    b->keys[n++] = "zero_optimization.offload_optimizer.device";
    b->keys[n++] = "\"auto\"";
    b->keys[n++] = "zero_optimization.offload_param.device";
    b->keys[n++] = "\"auto\"";
    /* Two parameter swap buffers (the least NVMe takes): with this small
     * model the default five cost more pinned memory than any shard they
     * let go to NVMe. */
    b->keys[n++] = "zero_optimization.offload_param.buffer_count";
    b->keys[n++] = "2";
    b->keys[n++] = "zero_optimization.offload_optimizer.nvme_path";
    b->keys[n++] = dir_json;
    b->keys[n] = NULL;
    r->keys = b->keys;
}

static bool three_way(const zc_memory_plan *p, mix m)
{
    const int64_t *c = m == MIX_OPT3 ? p->opt_chunks_by_place : p->param_chunks_by_place;
    return c[0] > 0 && c[1] > 0 && c[2] > 0;
}

/* Budgets under which the plan splits the mix's part three ways: the device
 * at a share of what everything on the device takes, the host from what the
 * rest then takes in pinned memory down, NVMe ample. */
static bool find_budgets(t_run *r, mix m, const char *dir_json, int64_t v[3],
                         zc_memory_plan *plan)
{
    budgets b;
    const int64_t all[3] = {BIG_BUDGET, BIG_BUDGET, BIG_BUDGET};
    set_budgets(&b, r, all, dir_json);
    cr_assert_eq(t_plan(r, plan), ZC_OK, "%s", zc_last_error());
    const int64_t dall = plan->budget_used[0];
    for (int d = 98; d >= 2; d -= 2) {
        const int64_t host[3] = {dall * d / 100, BIG_BUDGET, BIG_BUDGET};
        set_budgets(&b, r, host, dir_json);
        if (t_plan(r, plan) != ZC_OK)
            continue;
        /* Down from what the host takes when it may take everything, in
         * steps of a page. */
        for (int64_t c = plan->budget_used[1]; c >= 0; c -= 4096) {
            v[0] = host[0];
            v[1] = c;
            v[2] = BIG_BUDGET;
            set_budgets(&b, r, v, dir_json);
            zc_status qrc = t_plan(r, plan);
            if (qrc == ZC_OK && three_way(plan, m)) {
                r->keys = NULL;
                return true;
            }
        }
    }
    r->keys = NULL;
    return false;
}

/* One kind's bytes in the library's accounting against the plan: equal
 * category by category (pools as one sum); returns the bytes a budget holds.
 * ZC_MEM_OTHER is planned in device memory (status records, norm partials)
 * and on NVMe (the stripe round-up), not in host memory (chunk tables). */
static int64_t kind_used(const zc_stats *s, const zc_memory_plan *plan, int k, const char *what,
                         int rank)
{
    int64_t used = 0;
    for (int c = 0; c < ZC_MEM__COUNT; c++) {
        const bool planned = c != ZC_MEM_OTHER || k == ZC_KIND_NVME || k == ZC_KIND_DEVICE;
        if (planned)
            used += s->bytes_by_kind_cat[k][c];
        if (!planned || c == ZC_MEM_BUFFERS || c == ZC_MEM_RESERVED)
            continue;
        cr_assert_eq(s->bytes_by_kind_cat[k][c], plan->bytes_by_kind_cat[k][c],
                     "%s rank %d kind %d category %d: allocated %lld, planned %lld", what, rank,
                     k, c, (long long)s->bytes_by_kind_cat[k][c],
                     (long long)plan->bytes_by_kind_cat[k][c]);
    }
    cr_assert_eq(s->bytes_by_kind_cat[k][ZC_MEM_BUFFERS] + s->bytes_by_kind_cat[k][ZC_MEM_RESERVED],
                 plan->bytes_by_kind_cat[k][ZC_MEM_BUFFERS] +
                     plan->bytes_by_kind_cat[k][ZC_MEM_RESERVED],
                 "%s rank %d kind %d: pools", what, rank, k);
    return used;
}

static void check_run(const t_run *run, const zc_memory_plan *plan, const int64_t v[3],
                      const char *what)
{
    /* The kinds each budget holds: on the host path the engine's "device"
     * memory is reported as ZC_KIND_DEVICE, as on a GPU (docs/placement.md). */
    static const int kinds[3][2] = {{ZC_KIND_DEVICE, -1},
                                    {ZC_KIND_PINNED, ZC_KIND_HOST},
                                    {ZC_KIND_NVME, -1}};
    for (int rank = 0; rank < run->world; rank++) {
        const zc_stats *s = &run->stats[rank];
        for (int p = 0; p < ZC_PLACE_ON__COUNT; p++) {
            cr_assert_eq(s->opt_chunks_by_place[p], plan->opt_chunks_by_place[p],
                         "%s rank %d: %lld optimizer chunks on kind %d, planned %lld", what,
                         rank, (long long)s->opt_chunks_by_place[p], p,
                         (long long)plan->opt_chunks_by_place[p]);
            cr_assert_eq(s->opt_elems_by_place[p], plan->opt_elems_by_place[p]);
            cr_assert_eq(s->param_chunks_by_place[p], plan->param_chunks_by_place[p],
                         "%s rank %d: %lld parameter chunks on kind %d, planned %lld", what,
                         rank, (long long)s->param_chunks_by_place[p], p,
                         (long long)plan->param_chunks_by_place[p]);
            cr_assert_eq(s->param_elems_by_place[p], plan->param_elems_by_place[p]);
        }
        for (int b = 0; b < 3; b++) {
            cr_assert_eq(s->budget[b], v[b]);
            int64_t used = 0;
            for (int j = 0; j < 2 && kinds[b][j] >= 0; j++)
                used += kind_used(s, plan, kinds[b][j], what, rank);
            cr_assert_leq(used, v[b], "%s rank %d: %lld bytes against budget %d of %lld", what,
                          rank, (long long)used, b, (long long)v[b]);
            /* The device's and the pinned memory's high-water marks: every
             * byte of them is planned, so within the budget exactly. */
            cr_assert_leq(s->peak_bytes_by_kind[kinds[b][0]], v[b],
                          "%s rank %d: peak %lld over budget %d of %lld", what, rank,
                          (long long)s->peak_bytes_by_kind[kinds[b][0]], b, (long long)v[b]);
        }
    }
}

/* The placement a build took, against the one expected. */
static void check_forced(const t_run *run, const uint8_t *opt, const uint8_t *param, int n,
                         const char *what)
{
    int64_t oc[3] = {0, 0, 0}, pc[3] = {0, 0, 0};
    for (int k = 0; k < n; k++) {
        oc[opt[k]]++;
        if (run->stage == 3)
            pc[param[k]]++;
    }
    for (int rank = 0; rank < run->world; rank++)
        for (int p = 0; p < ZC_PLACE_ON__COUNT; p++) {
            cr_assert_eq(run->stats[rank].opt_chunks_by_place[p], oc[p], "%s: kind %d", what,
                         p);
            cr_assert_eq(run->stats[rank].param_chunks_by_place[p], pc[p], "%s: kind %d", what,
                         p);
        }
}

/* One mix at one stage and world against its reference run. MIX_OPT3 finds
 * budgets that split the optimizer state three ways. MIX_PARAM3 forces a
 * placement (zc__place_force) with the parameter shards and the optimizer
 * state of consecutive chunks on the three kinds in turn, with gradient
 * accumulation: with this small model no budget sends a parameter shard to
 * NVMe (its two swap buffers of the largest shard cost more pinned memory
 * than any set of shards they would let go there), so the engine's
 * three-way parameter split is exercised directly. */
static void one(zc_dtype dt, int world, int stage, mix m, const t_swapdir *dir, bool staged)
{
    t_run cfg;
    t_run_init(&cfg, stage, world, dt);
    cfg.steps = 8;
    cfg.accum = m == MIX_PARAM3 ? 2 : 1;
    char what[128];
    snprintf(what, sizeof what, "%s world %d stage %d accum %d %s%s", zc_dtype_name(dt), world,
             stage, cfg.accum, m == MIX_OPT3 ? "optimizer over three kinds (budgets)"
                                             : "both over three kinds (forced)",
             staged ? ", staged as on a GPU" : "");
    t_run *ref = t_run_trained(&cfg);
    t_assert_trained(ref);
    int64_t v[3] = {BIG_BUDGET, BIG_BUDGET, BIG_BUDGET};
    zc_memory_plan plan;
    t_run r = cfg;
    budgets b;
    uint8_t opt[64], param[64];
    int n = 0;
    if (m == MIX_OPT3) {
        cr_assert(find_budgets(&r, m, dir->json, v, &plan), "%s: no budgets found", what);
    } else {
        set_budgets(&b, &r, v, dir->json);
        cr_assert_eq(t_plan(&r, &plan), ZC_OK, "%s", zc_last_error());
        n = (int)plan.num_chunks;
        cr_assert(n >= 3 && n <= 64);
        for (int k = 0; k < n; k++) {
            param[k] = (uint8_t)(k % 3);
            opt[k] = (uint8_t)((k + 1) % 3);
        }
        zc__place_force(opt, param, n);
        cr_assert_eq(t_plan(&r, &plan), ZC_OK, "%s", zc_last_error());
    }
    set_budgets(&b, &r, v, dir->json);
    zc__opt_force_staging(staged);
    t_run *run = t_run_trained(&r);
    zc__opt_force_staging(false);
    zc__place_force(NULL, NULL, 0);
    t_assert_same_training(run, ref, what);
    if (!staged) /* the plan is the host path's: staging adds pinned buffers */
        check_run(run, &plan, v, what);
    if (m == MIX_PARAM3)
        check_forced(run, opt, param, n, what);
    t_run_free(run);
    t_run_free(ref);
    cr_assert_eq(t_dir_entries(dir->path), 0, "swap files left in %s", dir->path);
}

static void sweep(zc_dtype dt)
{
    t_swapdir dir;
    t_swapdir_make(&dir, "zc-place-test");
    for (int world = 1; world <= 4; world++)
        for (int stage = 1; stage <= 3; stage++) {
            one(dt, world, stage, MIX_OPT3, &dir, false);
            if (stage == 3)
                one(dt, world, stage, MIX_PARAM3, &dir, false);
            /* The GPU's path on the host: the gradient staged D2H into the
             * cpu home's landing buffers on the copy stream, outputs H2D,
             * beside the nvme home. */
            if (world == 2)
                one(dt, world, stage, MIX_PARAM3, &dir, true);
        }
    t_swapdir_remove(&dir);
    t_assert_no_leaks();
}

Test(placement_equiv, fp32) { sweep(ZC_DTYPE_F32); }
Test(placement_equiv, bf16) { sweep(ZC_DTYPE_BF16); }
Test(placement_equiv, fp16) { sweep(ZC_DTYPE_F16); }

/* A one-rank engine over a 1 Mi-element fp32 weight at stage 3 with the
 * given settings ({key, JSON value, ..., NULL}): the build's status and
 * message, its stats when it built, and nothing left allocated when it did
 * not. */
static zc_status build_one(const char *const *keys, zc_stats *st, char *msg, size_t cap)
{
    zc_config *cfg = NULL;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage", 3), ZC_OK);
    for (int i = 0; keys[i]; i += 2)
        cr_assert_eq(zc_config_set(cfg, keys[i], keys[i + 1]), ZC_OK, "%s: %s", keys[i],
                     zc_last_error());
    zc_comm *comm = NULL;
    cr_assert_eq(zc_comm_local_world(1, &comm), ZC_OK);
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = 1 << 18; /* four chunks */
    zc_engine *e = NULL;
    cr_assert_eq(zc_engine_create(&e, cfg, comm, &eo), ZC_OK, "%s", zc_last_error());
    for (int i = 0; i < 4; i++) {
        const int64_t shape[2] = {512, 512};
        char name[8];
        snprintf(name, sizeof name, "w%d", i);
        cr_assert_not_null(zc_param_add(e, name, shape, 2, 0), "%s", zc_last_error());
    }
    const zc_status rc = zc_engine_build(e);
    snprintf(msg, cap, "%s", rc == ZC_OK ? "" : zc_last_error());
    st->size = sizeof *st;
    if (rc == ZC_OK)
        cr_assert_eq(zc_engine_stats(e, st), ZC_OK);
    else
        cr_assert_eq(zc__mem_global_bytes(ZC_MEMKIND_PINNED), 0);
    zc_engine_destroy(e);
    zc_comm_destroy(comm);
    zc_config_destroy(cfg);
    return rc;
}

/* Refusals at build, before anything large is allocated: a device budget
 * below what the parameters and pools need names the device budget and how
 * much is short; a host budget too small with no NVMe names the cpu budget
 * and suggests NVMe; an explicit offload_optimizer.device "none" that a
 * budget cannot hold names both. */
Test(placement_equiv, build_refusals)
{
    zc_stats st;
    char msg[2048];
    const char *dev[] = {"zero_optimization.max_memory.device", "\"1MiB\"",
                         "zero_optimization.max_memory.cpu", "\"1GiB\"", NULL};
    cr_assert_eq(build_one(dev, &st, msg, sizeof msg), ZC_ERR_NO_MEMORY);
    cr_assert(strstr(msg, "zero_optimization.max_memory.device is 1.0 MiB"), "%s", msg);
    cr_assert(strstr(msg, "short"), "%s", msg);
    const char *cpu[] = {"zero_optimization.max_memory.device", "\"12MiB\"",
                         "zero_optimization.max_memory.cpu", "\"1MiB\"", NULL};
    cr_assert_eq(build_one(cpu, &st, msg, sizeof msg), ZC_ERR_NO_MEMORY);
    cr_assert(strstr(msg, "zero_optimization.max_memory.cpu is 1.0 MiB"), "%s", msg);
    cr_assert(strstr(msg, "max_memory.nvme budget with an nvme_path"), "%s", msg);
    const char *expl[] = {"zero_optimization.max_memory.device", "\"12MiB\"",
                          "zero_optimization.max_memory.cpu", "\"1GiB\"",
                          "zero_optimization.offload_optimizer.device", "\"none\"", NULL};
    cr_assert_eq(build_one(expl, &st, msg, sizeof msg), ZC_ERR_NO_MEMORY);
    cr_assert(strstr(msg, "let zero_optimization.offload_optimizer.device be \"auto\""), "%s",
              msg);
    /* The same budgets with the offload device free to choose build, the
     * optimizer state partly off the device. */
    const char *fits[] = {"zero_optimization.max_memory.device", "\"12MiB\"",
                          "zero_optimization.max_memory.cpu", "\"1GiB\"", NULL};
    cr_assert_eq(build_one(fits, &st, msg, sizeof msg), ZC_OK, "%s", msg);
    cr_assert_gt(st.opt_chunks_by_place[ZC_PLACE_ON_PINNED], 0);
    cr_assert_eq(st.budget[ZC_BUDGET_INDEX_DEVICE], 12 << 20);
    t_assert_no_leaks();
}

/* "auto" budgets: the device's free memory (a capacity set for the test),
 * MemAvailable over the node's ranks (a fake /proc/meminfo), the swap
 * directory's free space (set for the test), less their margins. */
Test(placement_equiv, auto_budgets)
{
    char root[64], path[128];
    snprintf(root, sizeof root, "zc-place-root-XXXXXX");
    cr_assert_not_null(mkdtemp(root));
    snprintf(path, sizeof path, "%s/proc", root);
    cr_assert_eq(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/proc/meminfo", root);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("MemTotal:       8000000 kB\nMemAvailable:    4000000 kB\n", f);
    fclose(f);
    t_swapdir dir;
    t_swapdir_make(&dir, "zc-place-test");
    const char *keys[] = {"zero_optimization.max_memory.device", "\"auto\"",
                          "zero_optimization.max_memory.cpu", "\"auto\"",
                          "zero_optimization.max_memory.nvme", "\"auto\"",
                          "zero_optimization.offload_optimizer.nvme_path", dir.json, NULL};
    zc__preflight_limits_root(root);
    zc__preflight_device_free(24 << 20);
    zc__preflight_nvme_free(1 << 30);
    zc_stats st;
    char msg[2048];
    const zc_status rc = build_one(keys, &st, msg, sizeof msg);
    zc__preflight_limits_root(NULL);
    zc__preflight_device_free(-1);
    zc__preflight_nvme_free(-1);
    cr_assert_eq(rc, ZC_OK, "%s", msg);
    /* Less 10% (device, host) and 5% (NVMe), in whole percents. */
    const int64_t dev = 24 << 20, host = 4000000LL * 1024, nv = 1 << 30;
    cr_assert_eq(st.budget[ZC_BUDGET_INDEX_DEVICE], dev - dev / 100 * 10);
    cr_assert_eq(st.budget[ZC_BUDGET_INDEX_CPU], host - host / 100 * 10);
    cr_assert_eq(st.budget[ZC_BUDGET_INDEX_NVME], nv - nv / 100 * 5);
    /* 24 MiB less 10% cannot hold the optimizer state with the rest (about
     * 27 MiB): some of it is placed off the device. */
    cr_assert_gt(st.opt_chunks_by_place[ZC_PLACE_ON_PINNED], 0);
    remove(path);
    snprintf(path, sizeof path, "%s/proc", root);
    rmdir(path);
    rmdir(root);
    t_swapdir_remove(&dir);
    t_assert_no_leaks();
}

/* "stage": "auto" picks the lowest of stages 1-3 whose plan fits: with the
 * device budget set to what stage t takes with everything on the device
 * (and nothing else to spill to), the choice is the lowest stage s whose
 * all-device plan takes no more (the per-stage figures from zc_plan_memory
 * with the stage written out), and training equals that stage's run
 * without budgets, bitwise. Worlds 1-4, fp32/bf16/fp16. With this small
 * model the buffer pools outweigh what sharding saves, so every budget
 * chooses stage 1 here; tests/plan/test_placement.c holds the choice of 2
 * and 3 on a larger model through zc_plan_memory. */
Test(placement_equiv, stage_auto)
{
    const zc_dtype dts[] = {ZC_DTYPE_F32, ZC_DTYPE_BF16, ZC_DTYPE_F16};
    for (int di = 0; di < 3; di++)
        for (int world = 1; world <= 4; world++) {
            int64_t need[4] = {0};
            for (int s = 1; s <= 3; s++) {
                t_run r;
                t_run_init(&r, s, world, dts[di]);
                char dev[32];
                snprintf(dev, sizeof dev, "%lld", (long long)BIG_BUDGET);
                const char *keys[] = {"zero_optimization.max_memory.device", dev, NULL};
                r.keys = keys;
                zc_memory_plan p;
                cr_assert_eq(t_plan(&r, &p), ZC_OK, "%s", zc_last_error());
                need[s] = p.budget_used[0];
            }
            bool seen[4] = {false};
            for (int t = 1; t <= 3; t++) {
                int expect = 1;
                while (need[expect] > need[t])
                    expect++;
                if (seen[expect])
                    continue;
                seen[expect] = true;
                char what[96];
                snprintf(what, sizeof what, "%s world %d stage auto (budget of stage %d)",
                         zc_dtype_name(dts[di]), world, t);
                t_run r;
                t_run_init(&r, expect, world, dts[di]);
                r.steps = 6;
                t_run *ref = t_run_trained(&r);
                char dev[32];
                snprintf(dev, sizeof dev, "%lld", (long long)need[t]);
                const char *keys[] = {"zero_optimization.stage", "\"auto\"",
                                      "zero_optimization.max_memory.device", dev, NULL};
                r.keys = keys;
                zc_memory_plan p;
                cr_assert_eq(t_plan(&r, &p), ZC_OK, "%s: %s", what, zc_last_error());
                cr_assert_eq(p.stage, expect, "%s: zc_plan_memory chose stage %d, expected %d",
                             what, p.stage, expect);
                t_run *run = t_run_trained(&r);
                for (int rank = 0; rank < world; rank++)
                    cr_assert_eq(run->stats[rank].stage, expect, "%s: built stage %d", what,
                                 run->stats[rank].stage);
                t_assert_same_training(run, ref, what);
                t_run_free(run);
                t_run_free(ref);
            }
        }
    t_assert_no_leaks();
}
