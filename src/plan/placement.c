/* Placement from memory budgets: the rule is stated in plan.h. The
 * bytes of every candidate come from zc__estimate, so a placement is held to
 * the same plan the pre-flight checks and the engine allocates. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "plan/plan.h"

static const char *const budget_key[ZC_BUDGET__COUNT] = {
    "zero_optimization.max_memory.device", "zero_optimization.max_memory.cpu",
    "zero_optimization.max_memory.nvme"};

/* Tests: a placement to take instead of the planner's (place_force). */
static _Atomic(const uint8_t *) forced_opt, forced_param;
static _Atomic int forced_n;

void zc__place_force(const uint8_t *opt, const uint8_t *param, int nchunks)
{
    atomic_store(&forced_n, nchunks);
    atomic_store(&forced_opt, opt);
    atomic_store(&forced_param, param);
}

bool zc__place_forced(int nchunks, uint8_t *opt, uint8_t *param)
{
    const uint8_t *fo = atomic_load(&forced_opt), *fp = atomic_load(&forced_param);
    if (!fo || !fp || atomic_load(&forced_n) != nchunks)
        return false;
    memcpy(opt, fo, (size_t)nchunks);
    memcpy(param, fp, (size_t)nchunks);
    return true;
}

const char *zc__place_kind_name(int place)
{
    return place == ZC_PLACE_DEVICE ? "device" : place == ZC_PLACE_PINNED ? "pinned host" : "NVMe";
}

bool zc__place_nvme_ok(const zc_config *cfg, bool param)
{
    if (!zc__place_nvme_path(cfg, param))
        return false;
    /* The rules zc_engine_build holds an NVMe home to (support.c): a
     * configuration that breaks them keeps that home off NVMe rather than
     * failing a build that did not ask for it. */
    bool ok = zc__config_aio_check(cfg->aio.block_size, cfg->aio.queue_depth,
                                   cfg->aio.intra_op_parallelism) == ZC_OK &&
              (!param || zc__config_param_buffers_check(cfg->zero.offload_param.buffer_count) ==
                             ZC_OK) &&
              (param || zc__config_opt_buffers_check(cfg->zero.offload_optimizer.buffer_count) ==
                            ZC_OK);
    zc__error_clear();
    return ok;
}

const char *zc__place_nvme_path(const zc_config *cfg, bool param)
{
    const char *own = param ? cfg->zero.offload_param.nvme_path
                            : cfg->zero.offload_optimizer.nvme_path;
    const char *other = param ? cfg->zero.offload_optimizer.nvme_path
                              : cfg->zero.offload_param.nvme_path;
    return own && *own ? own : other;
}

void zc__place_usage(const zc_est_in *in, const zc_est *est, int64_t used[ZC_BUDGET__COUNT])
{
    const int64_t *t = est->kind_total;
    (void)in;
    used[ZC_BUDGET_DEVICE] = t[ZC_MEMKIND_DEVICE]; /* the host path's stand-in too */
    used[ZC_BUDGET_CPU] = t[ZC_MEMKIND_PINNED] + t[ZC_MEMKIND_HOST];
    used[ZC_BUDGET_NVME] = t[ZC_MEMKIND_NVME];
}

/* The budget a place draws on. */
static int budget_of(int place)
{
    return place == ZC_PLACE_DEVICE ? ZC_BUDGET_DEVICE
           : place == ZC_PLACE_PINNED ? ZC_BUDGET_CPU
                                      : ZC_BUDGET_NVME;
}

/* The keys' own rules, as arrays (estimate.c and the homes apply the same):
 * the optimizer's offload takes the first chunks up to ratio x its elements;
 * offload_param takes every non-persistent shard, nvme caching the first
 * ones up to max_in_cpu elements in pinned memory. */
void zc__place_rules(const zc_est_in *in, uint8_t *opt, uint8_t *param)
{
    const bool full_opt = in->stage == 0;
    int64_t total = 0, acc = 0, cached = 0;
    for (int k = 0; k < in->nchunks; k++)
        total += full_opt ? in->padded[k] : in->padded[k] / in->world;
    const double want = in->offload != ZC_OFFLOAD_NONE ? in->ratio * (double)total : 0;
    for (int k = 0; k < in->nchunks; k++) {
        const int64_t n = full_opt ? in->padded[k] : in->padded[k] / in->world;
        opt[k] = ZC_PLACE_DEVICE;
        if (in->offload != ZC_OFFLOAD_NONE && (double)acc < want) {
            opt[k] = in->offload == ZC_OFFLOAD_CPU ? ZC_PLACE_PINNED : ZC_PLACE_NVME;
            acc += n;
        }
        param[k] = ZC_PLACE_DEVICE;
        if (in->stage != 3 || in->poffload == ZC_OFFLOAD_NONE ||
            (in->persistent && in->persistent[k]))
            continue;
        const int64_t shard = in->padded[k] / in->world;
        if (in->poffload == ZC_OFFLOAD_CPU) {
            param[k] = ZC_PLACE_PINNED;
        } else if (cached <= in->max_in_cpu - shard) {
            cached += shard;
            param[k] = ZC_PLACE_PINNED;
        } else {
            param[k] = ZC_PLACE_NVME;
        }
    }
}

/* The items the planner moves, most preferred first: parameter shards, then
 * optimizer state, each in chunk order. Item i < np is parameter chunk
 * pk[i]; the others optimizer chunk ok[i - np]. */
typedef struct items {
    int *pk, *ok;
    int np, no;
} items;

static uint8_t *item_slot(const items *it, int i, uint8_t *opt, uint8_t *param)
{
    return i < it->np ? &param[it->pk[i]] : &opt[it->ok[i - it->np]];
}

/* Whether an item may live on a place: NVMe needs a swap directory for its
 * home, and stage 0 keeps its full optimizer state on the device. */
static bool allowed(const zc_place_in *in, const items *it, int i, int place)
{
    if (place == ZC_PLACE_NVME)
        return i < it->np ? in->param_nvme : in->opt_nvme;
    return place == ZC_PLACE_DEVICE || i < it->np || in->est.stage > 0;
}

/* Plans the current arrays; *over is the fastest kind over its budget, or
 * -1. */
static zc_status try_plan(const zc_place_in *in, uint8_t *opt, uint8_t *param, zc_est *est,
                          int64_t used[ZC_BUDGET__COUNT], int *over)
{
    zc_est_in e = in->est;
    e.opt_place = opt;
    e.param_place = param;
    ZC_CHECK(zc__estimate(&e, est));
    zc__place_usage(&e, est, used);
    *over = -1;
    for (int b = 0; b < ZC_BUDGET__COUNT && *over < 0; b++)
        if (used[b] > in->budget[b])
            *over = b;
    return ZC_OK;
}

/* Bytes for a message: MiB with a decimal, or bytes below one MiB. */
typedef struct btext {
    char s[40];
} btext;

static btext bt(int64_t b)
{
    btext t;
    if (b >= 1048576)
        snprintf(t.s, sizeof t.s, "%.1f MiB", (double)b / 1048576.0);
    else
        snprintf(t.s, sizeof t.s, "%lld bytes", (long long)b);
    return t;
}

/* No placement was found. The headline figures are those of the plan the
 * planner stopped at; beside them, the device's floor: its bytes with every
 * movable item in pinned memory (off the device, and costing it least), which
 * no placement goes below. */
static zc_status refuse(const zc_place_in *in, const items *it, uint8_t *opt, uint8_t *param,
                        const int64_t used[ZC_BUDGET__COUNT], int over)
{
    int64_t floor_used[ZC_BUDGET__COUNT];
    int floor_over = -1;
    zc_est est;
    for (int i = 0; i < it->np + it->no; i++)
        if (allowed(in, it, i, ZC_PLACE_PINNED))
            *item_slot(it, i, opt, param) = ZC_PLACE_PINNED;
    ZC_CHECK(try_plan(in, opt, param, &est, floor_used, &floor_over));
    const int64_t dev_floor = floor_used[ZC_BUDGET_DEVICE];
    char alt[1024] = "";
    size_t n = 0;
#define ALT(...) (n += (size_t)snprintf(alt + n, n < sizeof alt ? sizeof alt - n : 0, __VA_ARGS__))
    if (dev_floor > in->budget[ZC_BUDGET_DEVICE])
        ALT("%s to at least %s (what must stay on the device: %s more)",
            budget_key[ZC_BUDGET_DEVICE], bt(dev_floor).s,
            bt(dev_floor - in->budget[ZC_BUDGET_DEVICE]).s);
    for (int b = 0; b < ZC_BUDGET__COUNT; b++)
        if (used[b] > in->budget[b] && !(b == ZC_BUDGET_DEVICE &&
                                         dev_floor > in->budget[ZC_BUDGET_DEVICE]))
            ALT("%s%s to at least %s (%s more)", n ? ", " : "", budget_key[b], bt(used[b]).s,
                bt(used[b] - in->budget[b]).s);
    if (over != ZC_BUDGET_NVME && in->budget[ZC_BUDGET_NVME] == 0 && in->est.stage > 0)
        ALT("; or NVMe: a zero_optimization.max_memory.nvme budget with an nvme_path");
    if (over == ZC_BUDGET_DEVICE && in->est.stage < 3)
        ALT("; or a higher zero_optimization.stage (%d shards more of the state)",
            in->est.stage + 1);
    if (!in->opt_free && in->est.stage > 0)
        ALT("; or let zero_optimization.offload_optimizer.device be \"auto\" (it is set "
            "explicitly, so its placement is kept)");
    if (!in->param_free && in->est.stage == 3)
        ALT("; or let zero_optimization.offload_param.device be \"auto\" (it is set "
            "explicitly, so its placement is kept)");
#undef ALT
    return ZC_ERR(ZC_ERR_NO_MEMORY,
                  "zero_optimization.max_memory: no placement fits (stage %d, world %d, %d "
                  "chunks): the %s kind needs %s in the closest placement found, but its budget "
                  "%s is %s, %s short; raise %s",
                  in->est.stage, in->est.world, in->est.nchunks,
                  over == ZC_BUDGET_DEVICE ? "device" : over == ZC_BUDGET_CPU ? "cpu" : "nvme",
                  bt(used[over]).s, budget_key[over], bt(in->budget[over]).s,
                  bt(used[over] - in->budget[over]).s, alt);
}

/* Bytes of master, m and v per optimizer element (each fp32 or bf16). */
static int64_t state_bytes(const zc_est_in *e)
{
    int64_t b = 0;
    for (int i = 0; i < 3; i++)
        b += e->sesz[i] ? (int64_t)e->sesz[i] : 4;
    return b;
}

/* The fewest bytes an item's state takes in the kind it lives in: the
 * master, m and v of its optimizer elements (in their dtypes), or its parameter shard in the
 * working precision. Moving it off a kind frees at least this much there, and
 * moving it onto one adds at least this much, less whatever swap ring the
 * move lets go (bounded by the kind's buffers). */
static int64_t item_bytes(const zc_place_in *in, const items *it, int i)
{
    const zc_est_in *e = &in->est;
    if (i < it->np)
        return e->padded[it->pk[i]] / e->world * (int64_t)e->pesz;
    const int k = it->ok[i - it->np];
    return (e->stage == 0 ? e->padded[k] : e->padded[k] / e->world) * state_bytes(e);
}

/* The most bytes moving an item down from kind `from` can free in that
 * kind's budget (estimate.c's sizes): off the device, an optimizer chunk's
 * master, m, v and, sharded, its fp32 gradient shard, or a parameter shard;
 * out of pinned memory, the same plus the cpu home's landing buffer and its
 * share of the two output buffers, or a cached shard rounded to the swap
 * alignment. */
static int64_t item_free_max(const zc_place_in *in, const items *it, int i, int from)
{
    const zc_est_in *e = &in->est;
    const int64_t pesz = (int64_t)e->pesz;
    if (i < it->np) {
        const int64_t b = e->padded[it->pk[i]] / e->world * pesz;
        return from == ZC_PLACE_DEVICE ? b : (b + 4095) / 4096 * 4096;
    }
    const int k = it->ok[i - it->np];
    const int64_t n = e->stage == 0 ? e->padded[k] : e->padded[k] / e->world;
    const int64_t state = (state_bytes(e) + (e->stage >= 2 ? 4 : 0)) * n;
    return from == ZC_PLACE_DEVICE ? state : state + 3 * pesz * n;
}

static zc_status place(const zc_place_in *in, const items *it, uint8_t *opt, uint8_t *param,
                       zc_est *est)
{
    int64_t used[ZC_BUDGET__COUNT];
    int over = -1;
    const int ni = it->np + it->no;
    for (int i = 0; i < ni; i++)
        *item_slot(it, i, opt, param) = ZC_PLACE_DEVICE;
    /* 2. Demote the least preferred items of the fastest kind over budget:
     * as many at once as must move for the most they can free to cover the
     * excess - fewer cannot fit, so this moves what moving one at a time
     * would, with a plan per batch rather than per item. */
    for (;;) {
        ZC_CHECK(try_plan(in, opt, param, est, used, &over));
        if (over < 0)
            break;
        const int64_t need = used[over] - in->budget[over];
        int64_t freed = 0;
        bool moved = false;
        for (int i = ni - 1; i >= 0 && (!moved || freed < need); i--) {
            uint8_t *s = item_slot(it, i, opt, param);
            if (budget_of(*s) != over)
                continue;
            for (int p = *s + 1; p < ZC_PLACE__COUNT; p++)
                if (allowed(in, it, i, p)) {
                    freed += item_free_max(in, it, i, *s);
                    *s = (uint8_t)p;
                    moved = true;
                    break;
                }
        }
        if (!moved)
            return refuse(in, it, opt, param, used, over);
    }
    /* 3. Promote: most preferred first, to the fastest kind that fits. A
     * kind whose room is below what the item needs there at least is not
     * tried (a plan saved); the plan decides the rest. */
    for (bool changed = true; changed;) {
        changed = false;
        for (int i = 0; i < ni; i++) {
            uint8_t *s = item_slot(it, i, opt, param);
            const uint8_t was = *s;
            for (int p = ZC_PLACE_DEVICE; p < was; p++) {
                if (!allowed(in, it, i, p))
                    continue;
                const int b = budget_of(p);
                const int64_t ring = est->bytes[ZC_MEMKIND_PINNED][ZC_MEM_BUFFERS];
                const int64_t least = item_bytes(in, it, i) - (p == ZC_PLACE_PINNED ? ring : 0);
                if (least > in->budget[b] - used[b])
                    continue;
                *s = (uint8_t)p;
                int64_t tried[ZC_BUDGET__COUNT];
                zc_est test;
                ZC_CHECK(try_plan(in, opt, param, &test, tried, &over));
                if (over < 0) {
                    memcpy(used, tried, sizeof used);
                    *est = test;
                    changed = true;
                    break;
                }
                *s = was;
            }
        }
    }
    /* The plan of the arrays as they stand. */
    ZC_CHECK(try_plan(in, opt, param, est, used, &over));
    return over < 0 ? ZC_OK : refuse(in, it, opt, param, used, over);
}

zc_status zc__place_plan(const zc_place_in *in, uint8_t *opt, uint8_t *param, zc_est *est)
{
    const zc_est_in *e = &in->est;
    if (e->nchunks < 1 || !e->padded)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc__place_plan: no chunks");
    for (int b = 0; b < ZC_BUDGET__COUNT; b++)
        if (in->budget[b] < 0)
            return ZC_ERR(ZC_ERR_INVALID_ARG, "zc__place_plan: budget %d is %lld", b,
                          (long long)in->budget[b]);
    zc__place_rules(e, opt, param);
    int *tab = NULL;
    const size_t n = (size_t)e->nchunks;
    ZC_CHECK(zc__host_alloc(NULL, ZC_MEM_OTHER, 2 * n * sizeof *tab, "placement items",
                            (void **)&tab));
    items it = {.pk = tab, .ok = tab + n};
    const bool params = in->param_free && e->stage == 3;
    for (int k = 0; k < e->nchunks; k++) {
        if (params && !(e->persistent && e->persistent[k]))
            it.pk[it.np++] = k;
        if (in->opt_free)
            it.ok[it.no++] = k;
    }
    zc_status rc = place(in, &it, opt, param, est);
    zc__host_free(NULL, ZC_MEM_OTHER, tab, 2 * n * sizeof *tab);
    return rc;
}
