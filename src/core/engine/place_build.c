/* zc_engine_build's placement from memory budgets (the rule: plan/plan.h).
 *
 * zero_optimization.max_memory gives one rank's budget of each kind, or
 * "auto": what this machine has (preflight.c reads it: the device's free
 * memory, this rank's share of the host's, the swap directories' free
 * space). Machines differ, so an "auto" budget differs between ranks; the
 * placement must not (every rank gathers and reduces the same chunks the
 * same way), so the ranks agree first on the outcome of reading them and
 * then take, kind by kind, the smallest budget of any rank. From there the
 * plan is a pure function of the agreed layout, configuration and budgets:
 * every rank computes the same one, and a placement that cannot fit fails on
 * every rank with the same message. */
#include <stdio.h>
#include <string.h>

#include "core/engine.h"
#include "plan/plan.h"

static const char *const kind_key[ZC_BUDGET__COUNT] = {"device", "cpu", "nvme"};

/* Ranks on this node: the launcher's figure, all of them for in-process
 * ranks, else this one alone. */
static int local_ranks(const zc_engine *e)
{
    if (e->comm->local_world > 0)
        return e->comm->local_world;
    return !strcmp(e->comm->ops->name, "local") ? e->world : 1;
}

zc_status zc__place_agree(zc_engine *e)
{
    const zc_config *c = e->cfg;
    if (!zc__config_has_budgets(c))
        return ZC_OK;
    /* Rank-local: the "auto" figures and the exchange buffer. */
    double vals[ZC_BUDGET__COUNT] = {0};
    void *buf = NULL;
    zc_status rc = ZC_OK;
    for (int b = 0; b < ZC_BUDGET__COUNT && rc == ZC_OK; b++) {
        int64_t bytes = 0;
        if (zc__config_budget(c, (zc_budget_kind)b, &bytes) == ZC_BUDGET_AUTO)
            rc = zc__preflight_auto_budget(c, e->dev, local_ranks(e), (zc_budget_kind)b,
                                           &bytes);
        e->budget[b] = bytes;
        /* The smallest as the largest negation; exact below 2^53 bytes. */
        vals[b] = -(double)bytes;
    }
    if (rc == ZC_OK)
        rc = zc__eng_alloc(e, ZC_MEM_OTHER, sizeof vals, "budget agreement", &buf);
    rc = zc__eng_agree(e, rc, "zc_engine_build (zero_optimization.max_memory \"auto\")");
    if (rc == ZC_OK) {
        zc_device *d = e->dev;
        void *cs = e->ctl_stream;
        rc = d->ops->copy(d, buf, vals, sizeof vals, ZC_COPY_H2D, cs);
        if (rc == ZC_OK)
            rc = zc__all_reduce(e->comm, buf, buf, ZC_BUDGET__COUNT, ZC_DTYPE_F64, ZC_RED_MAX, cs);
        if (rc == ZC_OK)
            rc = d->ops->copy(d, vals, buf, sizeof vals, ZC_COPY_D2H, cs);
        if (rc == ZC_OK)
            rc = d->ops->stream_sync(d, cs);
        if (rc != ZC_OK)
            zc__eng_break(e, rc, zc_last_error());
    }
    zc__eng_free(e, ZC_MEM_OTHER, &buf, sizeof vals);
    if (rc != ZC_OK)
        return rc;
    for (int b = 0; b < ZC_BUDGET__COUNT; b++) {
        int64_t own = e->budget[b];
        e->budget[b] = (int64_t)-vals[b];
        int64_t bytes = 0;
        if (zc__config_budget(c, (zc_budget_kind)b, &bytes) == ZC_BUDGET_AUTO)
            ZC_LOGI("core", "zero_optimization.max_memory.%s \"auto\": %.1f MiB (this rank "
                    "found %.1f MiB; the smallest of all ranks is used)", kind_key[b],
                    (double)e->budget[b] / 1048576.0, (double)own / 1048576.0);
    }
    e->budgets = true;
    return ZC_OK;
}

zc_status zc__place_build(zc_engine *e, const zc_est_in *base)
{
    if (!e->budgets)
        return ZC_OK;
    const size_t n = (size_t)e->nchunks;
    ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, n, "optimizer placement",
                            (void **)&e->opt_place));
    ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, n, "parameter placement",
                            (void **)&e->param_place));
    const zc_config *c = e->cfg;
    zc_place_in in = {
        .est = *base,
        .opt_free = zc__config_place_free(c, false),
        .param_free = zc__config_place_free(c, true),
        .opt_nvme = zc__place_nvme_ok(c, false),
        .param_nvme = zc__place_nvme_ok(c, true),
    };
    in.est.opt_place = in.est.param_place = NULL;
    /* The homes round their swap files to whole stripes of their own
     * directories: when a home borrows the other block's nvme_path, its
     * round-up follows that list. */
    in.est.nvme_round = c->aio.block_size * zc__nvme_path_count(zc__place_nvme_path(c, false));
    in.est.pnvme_round = c->aio.block_size * zc__nvme_path_count(zc__place_nvme_path(c, true));
    memcpy(in.budget, e->budget, sizeof in.budget);
    zc_est est;
    if (zc__place_forced(e->nchunks, e->opt_place, e->param_place)) {
        in.est.opt_place = e->opt_place;
        in.est.param_place = e->param_place;
        ZC_CHECK(zc__estimate(&in.est, &est));
    } else {
        ZC_CHECK(zc__place_plan(&in, e->opt_place, e->param_place, &est));
    }
    zc__place_log(e, &in.est, &est);
    return ZC_OK;
}

void zc__place_log(const zc_engine *e, const zc_est_in *in, const zc_est *est)
{
    int64_t used[ZC_BUDGET__COUNT];
    zc__place_usage(in, est, used);
    int oc[ZC_PLACE__COUNT] = {0}, pc[ZC_PLACE__COUNT] = {0};
    for (int k = 0; k < e->nchunks; k++) {
        oc[e->opt_place[k]]++;
        if (e->stage == 3)
            pc[e->param_place[k]]++;
    }
    ZC_LOGI("core", "placement (rank %d, stage %d, %d chunks): optimizer state on device / "
            "pinned / NVMe: %d / %d / %d chunks; parameter shards: %d / %d / %d; device %.1f "
            "of %.1f MiB, cpu %.1f of %.1f MiB, nvme %.1f of %.1f MiB", e->rank, e->stage,
            e->nchunks, oc[0], oc[1], oc[2], pc[0], pc[1], pc[2],
            (double)used[0] / 1048576.0, (double)e->budget[0] / 1048576.0,
            (double)used[1] / 1048576.0, (double)e->budget[1] / 1048576.0,
            (double)used[2] / 1048576.0, (double)e->budget[2] / 1048576.0);
}

/* Makes the engine one of stage s (the policy, the configuration's stage,
 * stage 3's persistence marks), as zc_engine_create and the policy's built
 * hook would have. */
static void set_stage(zc_engine *e, int s)
{
    e->stage = s;
    e->pol = zc__stage_policy(s);
    e->cfg->zero.stage = s;
    for (int k = 0; k < e->nchunks; k++)
        e->chunks[k].persistent = false;
    if (e->pol->built)
        e->pol->built(e);
}

zc_status zc__place_stage(zc_engine *e, zc_est_in *in, bool *pers)
{
    if (!e->budgets)
        return ZC_ERR(ZC_ERR_CONFIG, "zero_optimization.stage \"auto\" is chosen from "
                      "zero_optimization.max_memory, which is not given");
    char last[1024] = "";
    for (int s = 1; s <= 3; s++) {
        set_stage(e, s);
        for (int k = 0; k < e->nchunks; k++)
            pers[k] = e->chunks[k].persistent;
        in->stage = s;
        zc__place_free(e);
        const zc_status rc = zc__place_build(e, in);
        if (rc == ZC_OK) {
            ZC_LOGI("core", "zero_optimization.stage \"auto\": stage %d, the lowest whose "
                    "placement fits the budgets", s);
            return ZC_OK;
        }
        if (rc != ZC_ERR_NO_MEMORY)
            return rc;
        snprintf(last, sizeof last, "%s", zc_last_error());
    }
    return ZC_ERR(ZC_ERR_NO_MEMORY, "zero_optimization.stage \"auto\": no stage of 1-3 fits "
                  "the budgets; at stage 3, %s", last);
}

void zc__place_free(zc_engine *e)
{
    const size_t n = (size_t)e->nchunks;
    if (e->opt_place)
        zc__host_free(&e->acct, ZC_MEM_OTHER, e->opt_place, n);
    if (e->param_place)
        zc__host_free(&e->acct, ZC_MEM_OTHER, e->param_place, n);
    e->opt_place = e->param_place = NULL;
}
