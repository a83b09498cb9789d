/* zc_plan_memory: the memory zc_engine_build would allocate for a model,
 * planned before anything exists.
 *
 * It walks the steps of zc_engine_create and zc_engine_build that decide
 * sizes, with the engine's own rules: the configuration resolved for the
 * world (batch keys, "auto" from the hidden size), the working precision
 * (zc__pick_dtype), the chunk size (zc__bucket_elems, ZC_CHUNK_CAP), the
 * chunking and padding (zc__chunk_starts, zc__chunk_padded), stage 3's
 * persistence (zc__chunk_persists), the gradient pool's units (boundaries)
 * - and hands the layout to the planner the pre-flight uses (estimate.c).
 * tests/plan/test_estimate.c holds it equal to the planner fed a built
 * engine's layout, and so to its zc_stats, over stages, offloads and worlds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "comm/bootstrap.h"
#include "config/config.h"
#include "device/device.h"
#include "plan/plan.h"

#define PLAN_HAS(o, field) \
    ((o)->size >= offsetof(zc_engine_options, field) + sizeof((o)->field))

/* The working precision, zc_engine_create's rule too (engine.h). */
zc_status zc__pick_dtype(zc_config *cfg, const zc_engine_options *o, zc_dtype *out)
{
    if (o && PLAN_HAS(o, param_dtype) && (int)o->param_dtype >= 0) {
        zc_dtype dt = o->param_dtype;
        if (dt != ZC_DTYPE_F32 && dt != ZC_DTYPE_F16 && dt != ZC_DTYPE_BF16)
            return ZC_ERR(ZC_ERR_INVALID_ARG,
                          "zc_engine_options.param_dtype %d: parameters must be fp32, fp16 or "
                          "bf16", (int)dt);
        /* The option wins over the precision blocks; keep the copy coherent so
         * the loss scaler and the overflow check follow it. */
        if (dt != ZC_DTYPE_F16)
            cfg->fp16.enabled = false;
        if (dt != ZC_DTYPE_BF16)
            cfg->bf16.enabled = false;
        if (dt == ZC_DTYPE_F16)
            cfg->fp16.enabled = true;
        if (dt == ZC_DTYPE_BF16)
            cfg->bf16.enabled = true;
        *out = dt;
    } else if (cfg->fp16.enabled && cfg->bf16.enabled) {
        return ZC_ERR(ZC_ERR_CONFIG, "fp16.enabled and bf16.enabled are both true; enable one");
    } else {
        *out = cfg->fp16.enabled ? ZC_DTYPE_F16
               : cfg->bf16.enabled ? ZC_DTYPE_BF16
                                   : ZC_DTYPE_F32;
    }
    return ZC_OK;
}

static const int kind_of[ZC_MEMKIND__COUNT] = {
    [ZC_MEMKIND_HOST] = ZC_KIND_HOST, [ZC_MEMKIND_PINNED] = ZC_KIND_PINNED,
    [ZC_MEMKIND_DEVICE] = ZC_KIND_DEVICE, [ZC_MEMKIND_NVME] = ZC_KIND_NVME};

/* The tensors' sizes, checked as zc_param_add checks them. */
static zc_status tensor_numel(const zc_plan_tensor *t, int i, int64_t *numel, int64_t *total)
{
    if (!t->shape || t->ndim < 1 || t->ndim > ZC_PARAM_MAX_NDIM)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_plan_memory: tensor %d: ndim %d (1..%d) or shape "
                      "NULL", i, t->ndim, ZC_PARAM_MAX_NDIM);
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 1)
            return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_plan_memory: tensor %d: dimension %d is %lld",
                          i, d, (long long)t->shape[d]);
        if (n > INT64_MAX / 4 / t->shape[d])
            return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_plan_memory: tensor %d has more than 2^61 "
                          "elements", i);
        n *= t->shape[d];
    }
    if (n > INT64_MAX / 4 - *total)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_plan_memory: the tensors hold more than 2^61 "
                      "elements together (tensor %d)", i);
    *total += n;
    *numel = n;
    return ZC_OK;
}

/* The layout zc__layout_build makes, into padded[] / pers[] / units[] (n
 * entries each, at most one chunk per tensor); returns the chunks. */
static int layout(const zc_plan_tensor *t, const int64_t *numel, int n, const zc_config *cfg,
                  int world, int64_t bucket, int64_t *padded, bool *pers, bool *units,
                  int64_t *padded_total)
{
    int nc = -1;
    int64_t cur = 0, big = 0, ptotal = 0;
    *padded_total = 0;
    for (int i = 0; i <= n; i++) {
        if (i == n || zc__chunk_starts(i, t[i].boundary, cur, numel[i], bucket)) {
            if (nc >= 0) {
                padded[nc] = zc__chunk_padded(cur, world);
                *padded_total += padded[nc];
                /* zero3.c's mark_persistent, in chunk order */
                if (cfg->zero.stage == 3)
                    pers[nc] = zc__chunk_persists(big, padded[nc],
                                                  cfg->zero.param_persistence_threshold,
                                                  cfg->zero.model_persistence_threshold, &ptotal);
            }
            if (i == n)
                break;
            units[++nc] = t[i].boundary;
            cur = big = 0;
        }
        cur += numel[i];
        if (numel[i] > big)
            big = numel[i];
    }
    return nc + 1;
}

/* With zero_optimization.max_memory: the budgets ("auto" as this machine
 * has them: the host path's device is host memory, a GPU's cannot be read
 * without opening it; the node's ranks taken as the world) and the
 * placement chosen under them, into opt[] / param[] and *est. Without it,
 * the offload keys' rules into the arrays. */
static zc_status place(const zc_config *cfg, zc_est_in *in, uint8_t *opt, uint8_t *param,
                       zc_est *est, zc_memory_plan *res)
{
    for (int b = 0; b < ZC_BUDGET__COUNT; b++)
        res->budget[b] = -1;
    if (!zc__config_has_budgets(cfg)) {
        zc__place_rules(in, opt, param);
        return zc__estimate(in, est);
    }
    zc_place_in pin = {
        .est = *in,
        .opt_free = zc__config_place_free(cfg, false),
        .param_free = zc__config_place_free(cfg, true),
        .opt_nvme = zc__place_nvme_ok(cfg, false),
        .param_nvme = zc__place_nvme_ok(cfg, true),
    };
    pin.est.nvme_round = cfg->aio.block_size * zc__nvme_path_count(zc__place_nvme_path(cfg, false));
    pin.est.pnvme_round = cfg->aio.block_size * zc__nvme_path_count(zc__place_nvme_path(cfg, true));
    for (int b = 0; b < ZC_BUDGET__COUNT; b++) {
        int64_t bytes = 0;
        if (zc__config_budget(cfg, (zc_budget_kind)b, &bytes) == ZC_BUDGET_AUTO)
            ZC_CHECK(zc__preflight_auto_budget(
                cfg, in->dev_kind == ZC_MEMKIND_HOST ? zc__device_host() : NULL, in->world,
                (zc_budget_kind)b, &bytes));
        pin.budget[b] = res->budget[b] = bytes;
    }
    if (zc__place_forced(in->nchunks, opt, param)) {
        pin.est.opt_place = opt;
        pin.est.param_place = param;
        ZC_CHECK(zc__estimate(&pin.est, est));
    } else {
        ZC_CHECK(zc__place_plan(&pin, opt, param, est));
    }
    *in = pin.est;
    in->opt_place = opt;
    in->param_place = param;
    res->placed = true;
    return ZC_OK;
}

zc_status zc__plan_ranks_per_node(int world, int *out)
{
    bool set = false;
    int n = 0;
    ZC_CHECK(zc__env_int("ZC_RANKS_PER_NODE", 1, 1 << 20, "(the ranks of the job on each node)",
                         &set, &n));
    if (!set) {
        zc_launch_env env;
        if (zc__launch_env_read(&env, false) == ZC_OK && env.local_world > 0)
            n = env.local_world;
        zc__error_clear();
    }
    *out = n > 0 && n < world ? n : world;
    return ZC_OK;
}

int zc__plan_hier_j(int shard_world, int ranks_per_node)
{
    if (ranks_per_node < 1 || shard_world <= ranks_per_node || shard_world % ranks_per_node)
        return 0;
    return shard_world / ranks_per_node;
}

static zc_status plan(zc_config *cfg, int world, const zc_plan_tensor *t, int n,
                      const zc_engine_options *o, int64_t *numel, int64_t *padded, bool *pers,
                      bool *units, uint8_t *opt, uint8_t *param, zc_memory_plan *res)
{
    ZC_CHECK(zc__config_engine_check(cfg)); /* as zc_engine_create, first */
    ZC_CHECK(zc__config_hybrid_check(cfg, world));
    ZC_CHECK(zc__config_resolve_for_engine(cfg, world));
    /* MiCS: chunks are padded and sharded over the shard group. */
    const int sw = cfg->zero.mics_shard_size > 0 ? (int)cfg->zero.mics_shard_size : world;
    const int64_t gas =
        cfg->gradient_accumulation_steps > 0 ? cfg->gradient_accumulation_steps : 1;
    zc_dtype dt;
    ZC_CHECK(zc__pick_dtype(cfg, o, &dt));
    ZC_CHECK(zc__config_grad_accum_check(cfg, dt)); /* as zc_engine_create */
    const int views = o && PLAN_HAS(o, f32_view_chunks) ? o->f32_view_chunks : 0;
    zc_device_kind kind = o ? o->device : ZC_DEVICE_AUTO;
    if (kind == ZC_DEVICE_AUTO)
        kind = zc__device_cuda_count() > 0 ? ZC_DEVICE_CUDA : ZC_DEVICE_HOST;
    if (kind != ZC_DEVICE_HOST && kind != ZC_DEVICE_CUDA)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_plan_memory: zc_engine_options.device: unknown "
                      "device kind %d", (int)kind);
    if (views < 0 || views > 64 || (views > 0 && kind != ZC_DEVICE_HOST))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_plan_memory: zc_engine_options.f32_view_chunks "
                      "%d: 0..64, and 0 off the host path", views);

    int64_t total = 0, best = 0, hidden = 0;
    bool any_boundary = false;
    for (int i = 0; i < n; i++) {
        ZC_CHECK(tensor_numel(&t[i], i, &numel[i], &total));
        zc__hidden_step(t[i].shape, t[i].ndim, numel[i], &best, &hidden);
        any_boundary = any_boundary || t[i].boundary;
    }
    ZC_CHECK(zc__config_resolve_model_auto(cfg, hidden));
    int64_t cap = 0;
    bool forced = false;
    ZC_CHECK(zc__chunk_cap_env(&cap, &forced));
    const int64_t option = o && PLAN_HAS(o, bucket_elems) ? o->bucket_elems : 0;
    const int64_t bucket = zc__bucket_elems(option, cfg->zero.reduce_bucket_size, cap, forced);
    int64_t padded_total = 0;
    const int nc = layout(t, numel, n, cfg, sw, bucket, padded, pers, units, &padded_total);
    int rpn = world;
    if (cfg->zero.mics_hierarchical_params_gather && sw > 1)
        ZC_CHECK(zc__plan_ranks_per_node(world, &rpn));

    const zc_offload_cfg *oo = &cfg->zero.offload_optimizer, *op = &cfg->zero.offload_param;
    const zc_state_dtypes sdt = zc__config_state_dtypes(cfg);
    const zc_mem_kind dk = kind == ZC_DEVICE_HOST ? ZC_MEMKIND_HOST : ZC_MEMKIND_DEVICE;
    zc_est_in in = {
        .world = world,
        .stage = cfg->zero.stage,
        .pesz = zc_dtype_size(dt),
        .sesz = {zc_dtype_size(sdt.master), zc_dtype_size(sdt.m), zc_dtype_size(sdt.v)},
        .gas = gas,
        .bucket = bucket,
        .offload = (int)oo->device,
        .ratio = oo->ratio,
        .staging = dk == ZC_MEMKIND_DEVICE,
        .dev_kind = dk,
        .buffer_count = oo->buffer_count,
        .nvme_round = cfg->aio.block_size * zc__nvme_path_count(oo->nvme_path),
        .max_live = cfg->zero.max_live_parameters > 0 ? cfg->zero.max_live_parameters
                                                      : INT64_MAX,
        .prefetch_elems = cfg->zero.prefetch_bucket_size > 0 ? cfg->zero.prefetch_bucket_size : 0,
        .nchunks = nc,
        .padded = padded,
        .persistent = pers,
        .unit_start = any_boundary ? units : NULL,
        .view_chunks = views,
        .poffload = (int)op->device,
        .pbuffer_count = op->buffer_count,
        .max_in_cpu = op->max_in_cpu,
        .pnvme_round = cfg->aio.block_size * zc__nvme_path_count(op->nvme_path),
        .shard_world = sw,
        .replicas = world / sw,
        .hpz = cfg->zero.stage == 3 && cfg->zero.zero_hpz_partition_size > 1
                   ? (int)cfg->zero.zero_hpz_partition_size : 0,
        .hier_j = cfg->zero.mics_shard_size > 0 && cfg->zero.mics_hierarchical_params_gather
                      ? zc__plan_hier_j(sw, rpn) : 0,
    };
    /* The activation store, as zc_engine_create takes it from the options. */
    const zc_comm *mp = o && PLAN_HAS(o, act_mp_comm) ? o->act_mp_comm : NULL;
    ZC_CHECK(zc__act_spec_from(cfg, o && PLAN_HAS(o, act_checkpoints) ? o->act_checkpoints : 0,
                               o && PLAN_HAS(o, act_checkpoint_bytes) ? o->act_checkpoint_bytes
                                                                      : 0,
                               mp ? zc_comm_world(mp) : 0, dk == ZC_MEMKIND_DEVICE, &in.act));
    zc_est est;
    memset(res, 0, sizeof *res);
    ZC_CHECK(place(cfg, &in, opt, param, &est, res));
    zc__place_usage(&in, &est, res->budget_used);
    for (int k = 0; k < nc; k++) {
        const int64_t n_opt = in.stage == 0 ? padded[k] : padded[k] / sw;
        const int pk = in.stage == 3 && pers[k] ? ZC_PLACE_DEVICE : param[k];
        res->opt_chunks_by_place[opt[k]]++;
        res->opt_elems_by_place[opt[k]] += n_opt;
        if (in.stage == 3) {
            res->param_chunks_by_place[pk]++;
            res->param_elems_by_place[pk] += padded[k] / sw;
        }
    }
    for (int k = 0; k < ZC_MEMKIND__COUNT; k++) {
        res->bytes_by_kind[kind_of[k]] = est.kind_total[k];
        for (int c = 0; c < ZC_MEM__COUNT; c++)
            res->bytes_by_kind_cat[kind_of[k]][c] = est.bytes[k][c];
    }
    res->num_params = total;
    res->padded_params = padded_total;
    res->num_chunks = nc;
    res->grad_buffer_bytes = est.grad_pool;
    res->dtype = dt;
    res->stage = cfg->zero.stage;
    res->host_device = kind == ZC_DEVICE_HOST;
    return ZC_OK;
}

ZC_API zc_status zc_plan_memory(const zc_config *cfg, int world, const zc_plan_tensor *tensors,
                                int n, const zc_engine_options *opts, zc_memory_plan *out)
{
    return zc__plan_memory_placed(cfg, world, tensors, n, opts, out, NULL);
}

zc_status zc__plan_memory_placed(const zc_config *cfg, int world, const zc_plan_tensor *tensors,
                                 int n, const zc_engine_options *opts, zc_memory_plan *out,
                                 zc_plan_chunks *chunks)
{
    if (!cfg || !tensors || n < 1 || world < 1)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_plan_memory: cfg %s, tensors %s, n %d, world %d "
                      "(a configuration, at least one tensor and one rank)",
                      cfg ? "given" : "NULL", tensors ? "given" : "NULL", n, world);
    ZC_CHECK(zc__out_check("zc_plan_memory", "zc_memory_plan", out ? &out->size : NULL,
                               sizeof *out));
    if (opts && opts->size < offsetof(zc_engine_options, device) + sizeof(opts->device))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_plan_memory: opts->size %zu is too small (start "
                      "from ZC_ENGINE_OPTIONS_INIT)", opts->size);
    if (cfg->zero.stage < 0 || cfg->zero.stage > 3)
        return ZC_ERR(ZC_ERR_CONFIG, "zero_optimization.stage is %d; it must be 0, 1, 2 or 3",
                      cfg->zero.stage);
    zc_config *c = NULL;
    ZC_CHECK(zc__config_clone(cfg, &c));
    const size_t m = (size_t)n;
    int64_t *numel = calloc(m, sizeof *numel), *padded = calloc(m, sizeof *padded);
    bool *pers = calloc(m, sizeof *pers), *units = calloc(m, sizeof *units);
    uint8_t *opt = calloc(m, 1), *param = calloc(m, 1);
    zc_status rc;
    zc_memory_plan res;
    if (!numel || !padded || !pers || !units || !opt || !param)
        rc = ZC_ERR(ZC_ERR_NO_MEMORY, "zc_plan_memory: no memory for the tables of %d tensors",
                    n);
    else if (!zc__config_stage_auto(c))
        rc = plan(c, world, tensors, n, opts, numel, padded, pers, units, opt, param, &res);
    else
        /* stage "auto": the lowest stage whose placement fits, as the build
         * chooses it (place_build.c). */
        for (int s = 1, more = 1; s <= 3 && more; s++) {
            zc_config *cs = NULL;
            rc = zc__config_clone(c, &cs);
            if (rc == ZC_OK)
                rc = zc_config_set_int(cs, "zero_optimization.stage", s);
            if (rc == ZC_OK)
                rc = plan(cs, world, tensors, n, opts, numel, padded, pers, units, opt, param,
                          &res);
            zc_config_destroy(cs);
            more = rc == ZC_ERR_NO_MEMORY && s < 3;
            if (more)
                zc__error_clear();
            else if (rc == ZC_ERR_NO_MEMORY) {
                /* Copied first: the message is formatted into the same buffer. */
                char why[1024];
                snprintf(why, sizeof why, "%s", zc_last_error());
                rc = ZC_ERR(ZC_ERR_NO_MEMORY, "zero_optimization.stage \"auto\": no stage of "
                            "1-3 fits the budgets; at stage 3, %s", why);
            }
        }
    if (rc == ZC_OK) {
        res.size = out->size;
        *out = res;
        if (chunks) {
            /* Handed over: the caller frees them. */
            *chunks = (zc_plan_chunks){.n = (int)res.num_chunks, .padded = padded,
                                       .persistent = pers, .opt = opt, .param = param};
            padded = NULL;
            pers = NULL;
            opt = param = NULL;
        }
    }
    free(numel);
    free(padded);
    free(pers);
    free(units);
    free(opt);
    free(param);
    zc_config_destroy(c);
    return rc;
}

void zc__plan_chunks_free(zc_plan_chunks *c)
{
    free(c->padded);
    free(c->persistent);
    free(c->opt);
    free(c->param);
    *c = (zc_plan_chunks){0};
}
