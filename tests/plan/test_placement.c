/* Placement from memory budgets (plan/placement.c) as a pure function of a
 * layout and budgets, and the sizes zero_optimization.max_memory accepts.
 *
 * The grid: synthetic layouts of 1 to 64 chunks (equal and uneven sizes),
 * worlds 1-4, stages 1-3, the optimizer's and (stage 3) the parameters'
 * placement free, budgets from tight to loose in each kind. Every plan keeps
 * every budget (the planner's own bytes, zc__estimate), and is fastest-first:
 * moving any chunk's state to a faster kind breaks a budget.
 *
 * The formula: with equal chunks of S padded elements on the host path at
 * stage s (s >= 2 with gradient accumulation), moving one chunk's optimizer
 * state off the device frees c = (s >= 2 ? 16 : 12) x S/W bytes of device
 * memory (fp32 master, m, v and, sharded, the fp32 gradient shard) and takes
 * as much pinned memory; a chunk on NVMe takes t = round_up(4 S/W, 4096)
 * bytes per tensor (3, or 4 with the gradient shard) of swap file and, once
 * any chunk is there, the nvme home pins one ring slot (3 buffers of t, or
 * 4 and a gradient buffer). So for budgets (Bd, Bc, Bn) the device keeps
 * m = n - ceil((D_all - Bd) / c) chunks and pinned memory the most p of the
 * others that fit beside the ring, NVMe the rest: computed here from these
 * sizes, not by the planner.
 *
 * Refusals: a device, cpu or nvme budget too small names its key, the bytes
 * short, and the changes that would fit. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "plan/plan.h"
#include "helpers.h"

#define NMAX 64
#define BIG ((int64_t)1 << 50)

typedef struct lay {
    int64_t padded[NMAX];
    int n;
} lay;

static zc_est_in base_in(const lay *l, int stage, int world)
{
    return (zc_est_in){
        .world = world, .stage = stage, .pesz = 2, .gas = 1, .offload = ZC_OFFLOAD_NONE,
        .ratio = 1.0, .staging = false, .dev_kind = ZC_MEMKIND_HOST, .buffer_count = 4,
        .nvme_round = 0, .max_live = INT64_MAX, .prefetch_elems = 0, .nchunks = l->n,
        .padded = l->padded, .poffload = ZC_OFFLOAD_NONE, .pbuffer_count = 2,
        .max_in_cpu = 0, .pnvme_round = 0,
    };
}

static zc_place_in place_in(const lay *l, int stage, int world, int64_t bd, int64_t bc,
                            int64_t bn)
{
    zc_place_in in = {.est = base_in(l, stage, world), .budget = {bd, bc, bn},
                      .opt_free = true, .param_free = true, .opt_nvme = true,
                      .param_nvme = true};
    return in;
}

static void usage_of(const zc_place_in *in, const uint8_t *opt, const uint8_t *param,
                     int64_t used[3], zc_status *rc)
{
    zc_est_in e = in->est;
    e.opt_place = opt;
    e.param_place = param;
    zc_est est;
    *rc = zc__estimate(&e, &est);
    zc__place_usage(&e, &est, used);
}

static bool fits(const zc_place_in *in, const int64_t used[3])
{
    for (int b = 0; b < 3; b++)
        if (used[b] > in->budget[b])
            return false;
    return true;
}

/* Fits, and no item can move to a faster kind without breaking a budget. */
static void assert_fastest_first(const zc_place_in *in, uint8_t *opt, uint8_t *param,
                                 const char *what)
{
    int64_t used[3];
    zc_status rc;
    usage_of(in, opt, param, used, &rc);
    cr_assert_eq(rc, ZC_OK, "%s: %s", what, zc_last_error());
    cr_assert(fits(in, used), "%s: plan over budget (%lld/%lld, %lld/%lld, %lld/%lld)", what,
              (long long)used[0], (long long)in->budget[0], (long long)used[1],
              (long long)in->budget[1], (long long)used[2], (long long)in->budget[2]);
    for (int part = 0; part < 2; part++)
        for (int k = 0; k < in->est.nchunks; k++) {
            uint8_t *s = part ? &param[k] : &opt[k];
            if (part && in->est.stage != 3)
                continue;
            const uint8_t was = *s;
            for (int p = 0; p < was; p++) {
                *s = (uint8_t)p;
                usage_of(in, opt, param, used, &rc);
                cr_assert_eq(rc, ZC_OK);
                cr_assert(!fits(in, used), "%s: %s chunk %d is on kind %d but fits on kind %d",
                          what, part ? "parameter" : "optimizer", k, was, p);
            }
            *s = was;
        }
}

static void make_layout(lay *l, int n, int world, int pattern)
{
    l->n = n;
    const int64_t a = (int64_t)world * 64;
    for (int k = 0; k < n; k++)
        l->padded[k] = a * (pattern == 0 ? 8 : 1 + (k * 7 + 3) % 13);
}

Test(placement, grid_fits_and_is_fastest_first)
{
    static const int ns[] = {1, 2, 5, 16, 64};
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
        for (int world = 1; world <= 4; world++)
            for (int stage = 1; stage <= 3; stage++)
                for (int pattern = 0; pattern < 2; pattern++) {
                    lay l;
                    make_layout(&l, ns[ni], world, pattern);
                    /* D_all: the plan with everything on the device. */
                    zc_place_in all = place_in(&l, stage, world, BIG, BIG, BIG);
                    uint8_t opt[NMAX], param[NMAX];
                    zc_est est;
                    cr_assert_eq(zc__place_plan(&all, opt, param, &est), ZC_OK, "%s",
                                 zc_last_error());
                    int64_t used[3];
                    zc__place_usage(&all.est, &est, used);
                    for (int k = 0; k < l.n; k++)
                        cr_assert(opt[k] == ZC_PLACE_DEVICE && param[k] == ZC_PLACE_DEVICE);
                    const int64_t dall = used[0];
                    /* Tight to loose: the device at 40-100% of D_all, cpu at
                     * 0-200% of what the device gives up, NVMe none or ample. */
                    for (int dpct = 40; dpct <= 100; dpct += 15)
                        for (int cpct = 0; cpct <= 200; cpct += 50)
                            for (int nv = 0; nv < 2; nv++) {
                                const int64_t bd = dall * dpct / 100;
                                const int64_t bc = (dall - bd) * cpct / 100;
                                zc_place_in in = place_in(&l, stage, world, bd, bc,
                                                          nv ? BIG : 0);
                                char what[160];
                                snprintf(what, sizeof what,
                                         "n %d world %d stage %d pattern %d device %d%% cpu "
                                         "%d%% nvme %d", l.n, world, stage, pattern, dpct, cpct,
                                         nv);
                                zc_status rc = zc__place_plan(&in, opt, param, &est);
                                if (rc != ZC_OK) {
                                    cr_assert_eq(rc, ZC_ERR_NO_MEMORY, "%s: %s", what,
                                                 zc_last_error());
                                    /* Refused: even everything on the slowest
                                     * kind allowed breaks a budget. */
                                    uint8_t so[NMAX], sp[NMAX];
                                    for (int k = 0; k < l.n; k++) {
                                        so[k] = nv ? ZC_PLACE_NVME : ZC_PLACE_PINNED;
                                        sp[k] = so[k];
                                    }
                                    zc_status erc;
                                    usage_of(&in, so, sp, used, &erc);
                                    cr_assert(erc != ZC_OK || !fits(&in, used),
                                              "%s: refused, but all on the slowest kind fits",
                                              what);
                                    continue;
                                }
                                assert_fastest_first(&in, opt, param, what);
                            }
                }
}

static int64_t round4k(int64_t b) { return (b + 4095) / 4096 * 4096; }

static int ceil_div(int64_t a, int64_t b) { return a <= 0 ? 0 : (int)((a + b - 1) / b); }

/* The formula of the file comment, optimizer placement only. */
Test(placement, equal_chunks_follow_the_formula)
{
    for (int world = 1; world <= 4; world++)
        for (int stage = 1; stage <= 3; stage++)
            for (int n = 1; n <= 64; n = n * 3 + 1) {
                lay l;
                make_layout(&l, n, world, 0);
                const int64_t shard = l.padded[0] / world;
                /* Stages 2/3 with accumulation, so the fp32 gradient shard
                 * follows the state everywhere (a device-held shard would
                 * make NVMe cheaper to the device than pinned memory). */
                const int64_t gas = stage >= 2 ? 2 : 1, nt = stage >= 2 ? 4 : 3;
                const int64_t c = (stage >= 2 ? 16 : 12) * shard;
                const int64_t tb = nt * round4k(4 * shard); /* one chunk's swap bytes */
                const int64_t ring = (nt == 4 ? 5 : 3) * round4k(4 * shard);
                zc_place_in all = place_in(&l, stage, world, BIG, BIG, BIG);
                all.est.gas = gas;
                all.param_free = false;
                uint8_t opt[NMAX], param[NMAX];
                zc_est est;
                cr_assert_eq(zc__place_plan(&all, opt, param, &est), ZC_OK);
                int64_t used[3];
                zc__place_usage(&all.est, &est, used);
                const int64_t dall = used[0];
                for (int off = 0; off <= n; off++)
                    for (int pin = 0; pin <= off; pin++) {
                        /* Budgets that leave room for exactly n - off chunks on
                         * the device and pin of the others in pinned memory
                         * (plus the ring once NVMe is used), with a remainder
                         * below one chunk. */
                        const int q = off - pin; /* on NVMe */
                        const int64_t bd = dall - (int64_t)off * c + c / 3;
                        const int64_t bc = (int64_t)pin * c + (q > 0 ? ring : 0) + c / 2;
                        const int64_t bn = (int64_t)q * tb;
                        zc_place_in in = place_in(&l, stage, world, bd, bc, bn);
                        in.est.gas = gas;
                        in.param_free = false;
                        zc_status rc = zc__place_plan(&in, opt, param, &est);
                        cr_assert_eq(rc, ZC_OK, "world %d stage %d n %d off %d pin %d: %s",
                                     world, stage, n, off, pin, zc_last_error());
                        /* Expected from the formula alone: m on the device; of
                         * the other r, the most p whose pinned bytes (and the
                         * ring, when some are left for NVMe) and NVMe bytes
                         * fit. */
                        const int m = n - ceil_div(dall - bd, c);
                        const int r = n - m;
                        int ep = -1;
                        for (int pp = r; pp >= 0 && ep < 0; pp--)
                            if ((int64_t)pp * c + (pp < r ? ring : 0) <= bc &&
                                (int64_t)(r - pp) * tb <= bn)
                                ep = pp;
                        cr_assert_geq(ep, 0);
                        int cnt[3] = {0, 0, 0};
                        for (int k = 0; k < n; k++)
                            cnt[opt[k]]++;
                        cr_assert_eq(cnt[0], m, "world %d stage %d n %d: %d chunks on the "
                                     "device, the formula says %d", world, stage, n, cnt[0], m);
                        cr_assert_eq(cnt[1], ep, "world %d stage %d n %d off %d: %d pinned, "
                                     "expected %d", world, stage, n, off, cnt[1], ep);
                        cr_assert_eq(cnt[2], r - ep);
                        /* The budgets were made for pin pinned and q on NVMe:
                         * the formula gives that, or more pinned when a chunk
                         * costs less pinned than the ring it saves. */
                        cr_assert(ep == pin || (ep > pin && c <= ring + c / 2));
                        /* Device first in chunk order (equal chunks: a prefix). */
                        for (int k = 0; k < m; k++)
                            cr_assert_eq(opt[k], ZC_PLACE_DEVICE);
                        zc__place_usage(&in.est, &est, used);
                        cr_assert_eq(used[2], (int64_t)(r - ep) * tb);
                    }
            }
}

static void expect_refusal(zc_place_in *in, const char *key, const char *also)
{
    uint8_t opt[NMAX], param[NMAX];
    zc_est est;
    cr_assert_eq(zc__place_plan(in, opt, param, &est), ZC_ERR_NO_MEMORY);
    const char *msg = zc_last_error();
    cr_assert(strstr(msg, key), "message does not name %s: %s", key, msg);
    cr_assert(strstr(msg, "short"), "message does not say how much is short: %s", msg);
    if (also)
        cr_assert(strstr(msg, also), "message does not suggest '%s': %s", also, msg);
}

Test(placement, refusals_name_the_short_kind)
{
    lay l;
    make_layout(&l, 8, 2, 1);
    /* device: stage 2, budget below the parameters and pools alone */
    zc_place_in in = place_in(&l, 2, 2, 1000, BIG, 0);
    expect_refusal(&in, "zero_optimization.max_memory.device", "higher zero_optimization.stage");
    /* The device usage with the whole optimizer state on NVMe: the device
     * budget below which nothing can fit. */
    uint8_t opt[NMAX], param[NMAX];
    for (int k = 0; k < l.n; k++) {
        opt[k] = ZC_PLACE_NVME;
        param[k] = ZC_PLACE_DEVICE;
    }
    in = place_in(&l, 3, 2, BIG, BIG, BIG);
    int64_t used[3];
    zc_status rc;
    usage_of(&in, opt, param, used, &rc);
    cr_assert_eq(rc, ZC_OK);
    const int64_t dev_min = used[0];
    /* cpu: the host too small for the swap ring, no NVMe to spill to */
    in = place_in(&l, 3, 2, dev_min, 100, 0);
    in.param_free = false;
    expect_refusal(&in, "zero_optimization.max_memory.cpu", "max_memory.nvme");
    /* nvme: room for the ring, not for the swap files */
    in = place_in(&l, 3, 2, dev_min, used[1], 100);
    in.param_free = false;
    expect_refusal(&in, "zero_optimization.max_memory.nvme", NULL);
    /* an explicit offload_optimizer.device holds its placement */
    in = place_in(&l, 3, 2, dev_min, BIG, BIG);
    in.opt_free = in.param_free = false;
    expect_refusal(&in, "zero_optimization.max_memory.device",
                   "zero_optimization.offload_optimizer.device");
    t_assert_no_leaks();
}

/* Sizes as accelerate writes them, through the public config calls. */
static int64_t size_of(const char *json, zc_status *rc)
{
    zc_config *cfg = NULL;
    cr_assert_eq(zc_config_create(&cfg), ZC_OK);
    *rc = zc_config_set(cfg, "zero_optimization.max_memory.cpu", json);
    int64_t v = -7;
    char buf[64];
    if (*rc == ZC_OK) {
        cr_assert_eq(zc_config_get(cfg, "zero_optimization.max_memory.cpu", buf, sizeof buf),
                     ZC_OK);
        v = strtoll(buf, NULL, 10);
    }
    zc_config_destroy(cfg);
    return v;
}

Test(placement, sizes_parse_strictly)
{
    static const struct {
        const char *json;
        int64_t bytes;
    } ok[] = {
        {"\"44GiB\"", 44LL << 30},          {"\"500MB\"", 500000000},
        {"\"1.5TB\"", 1500000000000LL},     {"\"500Mb\"", 62500000},
        {"\"2tib\"", 2LL << 40},            {"\"0.5KiB\"", 512},
        {"\"123\"", 123},                   {"123456", 123456},
        {"\"1e3KB\"", 1000000},             {"\"70GIB\"", 70LL << 30},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        zc_status rc;
        const int64_t v = size_of(ok[i].json, &rc);
        cr_assert_eq(rc, ZC_OK, "%s: %s", ok[i].json, zc_last_error());
        cr_assert_eq(v, ok[i].bytes, "%s: %lld, expected %lld", ok[i].json, (long long)v,
                     (long long)ok[i].bytes);
    }
    static const char *const bad[] = {"\"\"", "\"GiB\"", "\"-1GiB\"", "\"1.5.5GB\"",
                                      "\"10XB\"", "\"inf\"", "\"1e400GB\"", "\" 1GB\"",
                                      "\"9e18GiB\"", "\"0x10\"", "-5", "true", "\"1 GB\"",
                                      "\"nanGB\""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        zc_status rc;
        size_of(bad[i], &rc);
        cr_assert_neq(rc, ZC_OK, "%s was accepted", bad[i]);
        cr_assert(strstr(zc_last_error(), "zero_optimization.max_memory.cpu"),
                  "%s: the message does not name the key: %s", bad[i], zc_last_error());
    }
    t_assert_no_leaks();
}

/* Stage 3 without persistent chunks and with a gather working set of two
 * chunks, so that it holds less than stage 2. */
static void set_stage3_bounds(zc_config *cfg)
{
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage3_param_persistence_threshold",
                                   0), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage3_max_live_parameters",
                                   1 << 18), ZC_OK);
    cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage3_prefetch_bucket_size", 0),
                 ZC_OK);
}

/* "stage": "auto" through zc_plan_memory on a model whose sharding pays
 * (256 tensors of 2^16 elements, world 4, host path): the device budget of
 * what stage t takes with everything on the device, nothing to spill to,
 * chooses stage t - the stages' all-device figures (planned with the stage
 * written out) fall from 1 to 3 - and a budget below stage 3's is refused
 * naming stage "auto". */
Test(placement, stage_auto_chooses_the_lowest_stage_that_fits)
{
    enum { NT = 256 };
    static int64_t shape[NT][2];
    zc_plan_tensor t[NT];
    for (int i = 0; i < NT; i++) {
        shape[i][0] = 256;
        shape[i][1] = 256;
        t[i] = (zc_plan_tensor){.shape = shape[i], .ndim = 2};
    }
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    eo.bucket_elems = 1 << 17;
    int64_t need[4] = {0};
    for (int s = 1; s <= 3; s++) {
        zc_config *cfg = NULL;
        cr_assert_eq(zc_config_create(&cfg), ZC_OK);
        cr_assert_eq(zc_config_set_int(cfg, "zero_optimization.stage", s), ZC_OK);
        set_stage3_bounds(cfg);
        cr_assert_eq(zc_config_set(cfg, "zero_optimization.max_memory.device", "\"1TiB\""),
                     ZC_OK);
        zc_memory_plan p = {.size = sizeof p};
        cr_assert_eq(zc_plan_memory(cfg, 4, t, NT, &eo, &p), ZC_OK, "%s", zc_last_error());
        need[s] = p.budget_used[ZC_BUDGET_INDEX_DEVICE];
        cr_assert_eq(p.stage, s);
        zc_config_destroy(cfg);
    }
    cr_assert(need[1] > need[2] && need[2] > need[3], "stages' device bytes %lld %lld %lld",
              (long long)need[1], (long long)need[2], (long long)need[3]);
    for (int s = 1; s <= 4; s++) {
        zc_config *cfg = NULL;
        cr_assert_eq(zc_config_create(&cfg), ZC_OK);
        cr_assert_eq(zc_config_set(cfg, "zero_optimization.stage", "\"auto\""), ZC_OK);
        set_stage3_bounds(cfg);
        char dev[32];
        snprintf(dev, sizeof dev, "%lld", (long long)(s <= 3 ? need[s] : need[3] - 1));
        cr_assert_eq(zc_config_set(cfg, "zero_optimization.max_memory.device", dev), ZC_OK);
        zc_memory_plan p = {.size = sizeof p};
        const zc_status rc = zc_plan_memory(cfg, 4, t, NT, &eo, &p);
        if (s <= 3) {
            cr_assert_eq(rc, ZC_OK, "%s", zc_last_error());
            cr_assert_eq(p.stage, s, "budget of stage %d chose stage %d", s, p.stage);
            cr_assert_eq(p.opt_chunks_by_place[ZC_PLACE_ON_DEVICE], p.num_chunks);
        } else {
            cr_assert_eq(rc, ZC_ERR_NO_MEMORY);
            cr_assert(strstr(zc_last_error(), "zero_optimization.stage \"auto\": no stage"),
                      "%s", zc_last_error());
            cr_assert(strstr(zc_last_error(), "short"), "%s", zc_last_error());
        }
        zc_config_destroy(cfg);
    }
    t_assert_no_leaks();
}
