/* The engine's lifecycle: zc_engine_create, zc_engine_build and
 * zc_engine_destroy. It sits above the engine's modules: create and build
 * call their set-up and build functions in order, destroy their free
 * functions in the reverse one, and none of them calls back here (what every
 * module needs from the engine - allocation with accounting, breaking it,
 * the collectives - is eng_base.c, below them). */
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "core/engine.h"
#include "plan/plan.h"

/* ---- create / destroy ---------------------------------------------------- */

static const zc_stage_policy *policy_for(int stage) { return zc__stage_policy(stage); }

#define OPT_HAS(o, field) \
    ((o)->size >= offsetof(zc_engine_options, field) + sizeof((o)->field))

/* Resolves the engine's private configuration for this world (batch rules,
 * program "auto" values, semantic checks) and reads the accumulation steps. */
static zc_status resolve_gas(zc_config *cfg, int world, int64_t *gas)
{
    ZC_CHECK(zc__config_resolve_for_engine(cfg, world));
    *gas = cfg->gradient_accumulation_steps > 0 ? cfg->gradient_accumulation_steps : 1;
    return ZC_OK;
}

static zc_status pick_dtype(zc_engine *e, const zc_engine_options *o)
{
    zc_config *cfg = e->cfg;
    ZC_CHECK(zc__pick_dtype(cfg, o, &e->pdt));
    e->pesz = zc_dtype_size(e->pdt);
    e->check_overflow = cfg->fp16.enabled || (cfg->bf16.enabled && cfg->bf16.check_grad_overflow);
    return ZC_OK;
}

ZC_API zc_status zc_engine_create(zc_engine **out, const zc_config *cfg, zc_comm *comm,
                                  const zc_engine_options *opts)
{
    zc__error_clear();
    if (!out)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_engine_create: out is NULL");
    *out = NULL;
    if (!cfg || !comm)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_engine_create: %s is NULL",
                      !cfg ? "cfg" : "comm");
    if (opts && opts->size < offsetof(zc_engine_options, device) + sizeof(opts->device))
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "zc_engine_create: opts->size %zu is too small (start from "
                      "ZC_ENGINE_OPTIONS_INIT)", opts->size);
    int world = zc_comm_world(comm), rank = zc_comm_rank(comm);
    if (world < 1 || rank < 0 || rank >= world)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_engine_create: communicator has rank %d of world %d",
                      rank, world);
    /* "auto": the lowest stage whose placement fits the budgets, chosen at
     * build (place_build.c); stage 1 until then. */
    const bool stage_auto = zc__config_stage_auto(cfg);
    int stage = stage_auto ? 1 : cfg->zero.stage;
    if (!policy_for(stage))
        return ZC_ERR(ZC_ERR_CONFIG, "zero_optimization.stage is %d; it must be 0, 1, 2 or 3",
                      stage);
    /* The rule lives in src/config so `zeroc config check` gives the same verdict. */
    ZC_CHECK(zc__config_engine_check(cfg));
    ZC_CHECK(zc__config_hybrid_check(cfg, world));
    /* Variables read where no status can carry their error (a log line, the
     * host Adam of a later step) fail here, on every rank alike. */
    ZC_CHECK(zc__log_env_check());
    ZC_CHECK(zc__adam_env_check());
    zc__log_set_rank(rank);

    zc_status rc = ZC_OK;
    zc_engine *e = NULL;
    void *mem = NULL;
    ZC_CHECK(zc__host_alloc(NULL, ZC_MEM_OTHER, sizeof *e, "engine", &mem));
    e = mem;
    e->magic = ZC_ENGINE_MAGIC;
    e->state = ZC_ENG_CREATED;
    e->comm = comm;
    e->rank = rank;
    e->world = world;
    e->srank = rank; /* until zc_engine_build makes the groups */
    e->sworld = world;
    e->stage = stage;
    e->pol = policy_for(stage);
    e->trace = &e->traces[ZC_PASS_TRAIN];
    e->stage_auto = stage_auto;

    /* Read once here: every rank parses the same text, so a malformed value
     * fails create on every rank alike. */
    const char *faults = zc__env("ZC_FAULTS");
    /* Items name a rank of the job (the world a split communicator comes
     * from), so one rank of one data-parallel group can be made to fail. */
    const bool in_world = comm->world_size >= world && comm->world_rank >= 0 &&
                          comm->world_rank < comm->world_size;
    ZC_CHECK_GOTO(zc__faults_parse(faults, in_world ? comm->world_rank : rank,
                                   in_world ? comm->world_size : world, &e->faults),
                  rc, fail);
    if (faults) {
        if (rank == 0)
            ZC_LOGW("core", "ZC_FAULTS=%s: fault injection is on", faults);
        for (int i = 0; i < e->faults.n; i++)
            ZC_LOGW("core", "ZC_FAULTS: %s %lld after zc_engine_build will fail on this rank",
                    e->faults.kind[i] == ZC_FAULT_IO     ? "swap-file read or write"
                    : e->faults.kind[i] == ZC_FAULT_LOAD ? "zc_load_safetensors read"
                                                         : "allocation",
                    (long long)e->faults.at[i]);
    }
    /* io items fire only on swap-file I/O (optimizer state or, at stage 3,
     * parameter shards under nvme): without it, an item that can never fire
     * is refused rather than passing silently. */
    int64_t nvme_budget = 0;
    const bool swap_io = cfg->act.nvme_checkpointing ||
                         cfg->zero.offload_optimizer.device == ZC_OFFLOAD_NVME ||
                         (stage == 3 && cfg->zero.offload_param.device == ZC_OFFLOAD_NVME) ||
                         zc__config_budget(cfg, ZC_BUDGET_NVME, &nvme_budget) != ZC_BUDGET_NONE;
    for (int i = 0; i < e->faults.n; i++)
        if (e->faults.kind[i] == ZC_FAULT_IO && !swap_io) {
            rc = ZC_ERR(ZC_ERR_CONFIG,
                        "ZC_FAULTS='%s': io items apply to the swap-file reads and writes of "
                        "zero_optimization.offload_optimizer.device \"nvme\", (stage 3) "
                        "offload_param.device \"nvme\" or "
                        "activation_checkpointing.nvme_checkpointing, which this configuration "
                        "does not do",
                        faults);
            goto fail;
        }
    /* Strict like ZC_FAULTS, and read here for the same reason. */
    ZC_CHECK_GOTO(zc__debug_parse(zc__env("ZC_DEBUG"), &e->debug), rc, fail);
    ZC_CHECK_GOTO(zc__chunk_cap_env(&e->chunk_cap, &e->chunk_cap_forced), rc, fail);
    /* Once per process, by rank 0: the rank whose lines are shown by default
     * (another rank's thread may get here first and be filtered). */
    static atomic_bool cap_logged;
    if (e->chunk_cap_forced && e->rank == 0 && !atomic_exchange(&cap_logged, true))
        ZC_LOGI("core", "ZC_CHUNK_CAP=%lld: chunks hold at most that many elements (a test "
                "switch)", (long long)e->chunk_cap);
    ZC_CHECK_GOTO(zc__config_clone(cfg, &e->cfg), rc, fail);
    e->cfg->zero.stage = stage;
    ZC_CHECK_GOTO(resolve_gas(e->cfg, world, &e->gas), rc, fail);
    ZC_CHECK_GOTO(pick_dtype(e, opts), rc, fail);

    zc_device_kind kind = opts ? opts->device : ZC_DEVICE_AUTO;
    int index = opts && OPT_HAS(opts, device_index) ? opts->device_index : -1;
    ZC_CHECK_GOTO(zc__device_open(kind, index, &e->dev), rc, fail);
    ZC_CHECK_GOTO(comm->ops->bind_device(comm, e->dev), rc, fail);
    /* Empty until zc_engine_build sizes them (reserve.c). */
    zc__bufpool_init(&e->pool_grad, "chunk gradient buffers", ZC_MEM_BUFFERS, e->dev, &e->acct);
    zc__bufpool_init(&e->pool_gather, "stage-3 gather buffers", ZC_MEM_BUFFERS, e->dev, &e->acct);
    zc__bufpool_init(&e->pool_stage, "parameter load staging", ZC_MEM_BUFFERS, e->dev, &e->acct);

    e->bucket_option = opts && OPT_HAS(opts, bucket_elems) ? opts->bucket_elems : 0;
    e->user_stream = opts && OPT_HAS(opts, stream) ? opts->stream : NULL;
    ZC_CHECK_GOTO(zc__view_option(e, opts && OPT_HAS(opts, f32_view_chunks)
                                         ? opts->f32_view_chunks
                                         : 0),
                  rc, fail);
    /* The activation store's bound and home (built with the engine). */
    ZC_CHECK_GOTO(zc__act_setup(e, opts, opts && OPT_HAS(opts, act_mp_comm)), rc, fail);
    if (e->cfg->communication_data_type >= 0 && e->cfg->communication_data_type != (int)e->pdt)
        ZC_LOGW("core", "communication_data_type %s is not supported yet: gradients are "
                        "reduced in the parameter dtype %s",
                zc_dtype_name((zc_dtype)e->cfg->communication_data_type), zc_dtype_name(e->pdt));

    /* The window's sum: fp32 unless data_types.grad_accum_dtype names the
     * 16-bit working dtype (src/core/loop/grads.c); the key is checked
     * against the dtype picked here too, since zc_engine_options.param_dtype
     * may differ from the precision blocks the first check read. */
    ZC_CHECK_GOTO(zc__config_grad_accum_check(e->cfg, e->pdt), rc, fail);
    /* The optimizer state's precision. A bf16 master holds bf16 parameters
     * (the working copy is its value); bf16_master_weights_and_grads also
     * means bf16 gradients, so without data_types.grad_accum_dtype a window
     * sums in bf16 as DeepSpeed's does. */
    e->sdt = zc__config_state_dtypes(e->cfg);
    e->state_lp = zc__config_state_lp(e->cfg);
    e->sround = e->cfg->bf16.stochastic_rounding;
    e->sround_seed = (uint64_t)e->cfg->bf16.stochastic_rounding_seed;
    if (e->sdt.master != ZC_DTYPE_F32 && e->pdt != ZC_DTYPE_BF16) {
        rc = ZC_ERR(ZC_ERR_CONFIG, "zc_engine_create: bf16.bf16_master_weights_and_grads with "
                    "%s parameters (zc_engine_options.param_dtype): a bf16 master needs bf16 "
                    "parameters", zc_dtype_name(e->pdt));
        goto fail;
    }
    const bool acc16 = e->cfg->grad_accum_dtype == (int)e->pdt ||
                       (e->cfg->grad_accum_dtype < 0 && e->sdt.master == ZC_DTYPE_BF16);
    e->acc_dt = acc16 && e->gas > 1 ? e->pdt : ZC_DTYPE_F32;

    zc__scaler_init(&e->scaler, e->cfg);

    /* Group 0: the optimizer's weight decay. */
    ZC_CHECK_GOTO(zc__registry_init(e), rc, fail);
    e->adam_ds = zc__adam_ds_fresh(e->cfg->optimizer.beta1, e->cfg->optimizer.beta2);

    ZC_LOGI("core", "engine: ZeRO stage %d%s, world %d, %s parameters, accumulation %lld, device %s",
            stage, stage_auto ? " (auto: chosen at build)" : "", world, zc_dtype_name(e->pdt), (long long)e->gas, e->dev->ops->name);
    *out = e;
    return ZC_OK;
fail:
    zc_engine_destroy(e);
    return rc;
}

/* ---- build ------------------------------------------------------------- */

/* Hidden size H of the "auto" rules (plan/plan.h; 0 without a 2-D
 * parameter). */
static int64_t model_hidden_size(const zc_engine *e)
{
    int64_t best_numel = 0, h = 0;
    for (int i = 0; i < e->nparams; i++)
        zc__hidden_step(e->params[i]->shape, e->params[i]->ndim, e->params[i]->numel,
                        &best_numel, &h);
    return h;
}

/* Sizes that depend on the registered model: "auto" buckets and thresholds
 * resolve from H now, then the chunk size, the live bound and the prefetch
 * window are read from the resolved configuration. */
static zc_status size_from_model(zc_engine *e)
{
    /* With stage "auto" the stage-3 keys resolve as for stage 3: unused if
     * another stage is chosen. */
    if (e->stage_auto)
        e->cfg->zero.stage = 3;
    const zc_status rc = zc__config_resolve_model_auto(e->cfg, model_hidden_size(e));
    e->cfg->zero.stage = e->stage;
    ZC_CHECK(rc);
    e->bucket = zc__bucket_elems(e->bucket_option, e->cfg->zero.reduce_bucket_size,
                                 e->chunk_cap, e->chunk_cap_forced);
    e->max_live = e->cfg->zero.max_live_parameters > 0 ? e->cfg->zero.max_live_parameters
                                                       : INT64_MAX;
    e->prefetch_elems = e->cfg->zero.prefetch_bucket_size > 0 ? e->cfg->zero.prefetch_bucket_size
                                                              : 0;
    e->reuse_elems = e->cfg->zero.max_reuse_distance > 0 ? e->cfg->zero.max_reuse_distance : 0;
    return ZC_OK;
}

/* The rank-local part of zc_engine_build, after the layout is agreed. */
static zc_status build_local(zc_engine *e)
{
    ZC_CHECK(zc__preflight(e));
    /* The streams that depend on the stage, now that it is known. */
    if (e->stage_auto)
        ZC_CHECK(zc__streams_stage(e));
    ZC_CHECK(zc__opt_build(e));
    ZC_CHECK(zc__param_build(e));
    for (int k = 0; k < e->nchunks; k++)
        ZC_CHECK(e->pol->alloc_chunk(e, &e->chunks[k]));
    ZC_CHECK(zc__reserve_build(e));
    ZC_CHECK(zc__groups_reserve(e));
    ZC_CHECK(zc__view_build(e));
    ZC_CHECK(zc__debug_build(e));
    ZC_CHECK(zc__act_build(e));
    ZC_CHECK(zc__trace_build(e));
    e->state = ZC_ENG_BUILT;
    /* Needs the built engine (it loads through zc_param_load). */
    return zc__adopt_load(e);
}

ZC_API zc_status zc_engine_build(zc_engine *e)
{
    ZC_CHECK(zc__eng_enter(e, "zc_engine_build", false));
    if (e->state != ZC_ENG_CREATED)
        return ZC_ERR(ZC_ERR_INVALID_STATE, "zc_engine_build: the engine is already built");
    if (e->nparams == 0)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "zc_engine_build: no parameters registered (zc_param_add)");
    zc_status rc = ZC_OK;
    /* First: every later build step (the layout check's collective, the
     * zero-fills) is queued on the engine's own stream. */
    ZC_CHECK_GOTO(zc__streams_create(e), rc, fail);
    /* The status records come before the first collective: everything from
     * the pre-flight on is rank-local (MemAvailable, free disk space,
     * allocations) and its outcome is agreed with them below. */
    ZC_CHECK_GOTO(zc__agree_alloc(e), rc, fail);
    /* The node map and hybrid sharding's groups: the layout shards over
     * the shard group. */
    ZC_CHECK_GOTO(zc__groups_build(e), rc, fail);
    ZC_CHECK_GOTO(size_from_model(e), rc, fail);
    ZC_CHECK_GOTO(zc__layout_build(e), rc, fail);
    ZC_CHECK_GOTO(zc__partials_alloc(e), rc, fail);
    /* Every rank must register the same model with the same settings
     * (build_agree.c): a mismatch fails here, named, on every rank, rather
     * than as a collective mismatch or a hang in the first step. */
    ZC_CHECK_GOTO(zc__build_agree(e), rc, fail);
    /* The budgets of zero_optimization.max_memory, agreed across ranks; the
     * placement is then chosen by the pre-flight (place_build.c). */
    ZC_CHECK_GOTO(zc__place_agree(e), rc, fail);
    /* Persistence first (the stage policy's built hook: stage 3 marks
     * persistent chunks, from the layout alone): the stage-3 reserve keeps a
     * buffer per persistent chunk, and the pre-flight plans that reserve. */
    if (e->pol->built && !e->stage_auto)
        e->pol->built(e); /* stage "auto": once chosen (zc__place_stage) */
    /* Before the optimizer state, the chunks' buffers and the reserve: a
     * configuration the machine cannot hold is refused with nothing large
     * allocated. */
    rc = build_local(e);
    /* A pre-flight refusal or an allocation failure can happen on one rank
     * alone; returning there would leave the others built and waiting in
     * their first collective. Every rank fails alike, naming that rank. */
    ZC_CHECK_GOTO(zc__eng_agree(e, rc, "zc_engine_build"), rc, fail);
    zc__timers_init(&e->timers, e->cfg->wall_clock_breakdown);
    zc__timeline_step_end(e); /* a window from step 1 opens now */
    zc__progress_start(e);
    ZC_LOGI("core", "built: %d parameters, %lld elements in %d chunks of <= %lld (%lld padded)",
            e->nparams, (long long)e->num_elems, e->nchunks, (long long)e->bucket,
            (long long)e->padded_elems);
    return ZC_OK;
fail:
    zc__error_context("zc_engine_build (rank %d, stage %d)", e->rank, e->stage);
    e->state = ZC_ENG_FAILED;
    return rc;
}

ZC_API void zc_engine_destroy(zc_engine *e)
{
    if (!e || e->magic != ZC_ENGINE_MAGIC)
        return;
    /* The caller may have switched the thread's GPU since its last call. */
    if (e->dev && e->dev->ops->make_current)
        (void)e->dev->ops->make_current(e->dev);
    /* First: queued work may still read or write the buffers freed below. */
    zc__streams_destroy(e);
    /* A window the run ended inside goes out before anything it names. */
    zc__timeline_destroy(e);
    if (e->pol && e->pol->teardown && e->chunks)
        e->pol->teardown(e);
    zc__opt_free(e);
    zc__param_free(e);
    zc__act_free(e);
    zc__place_free(e); /* sized by nchunks: before the layout */
    zc__partials_free(e);
    /* Before the layout: the shadows are sized by the chunks. */
    zc__debug_free(e);
    zc__layout_free(e);
    /* After the chunks: they return their pool slots first. */
    zc__reserve_free(e);
    zc__view_free(e);
    zc__registry_free(e);
    if (e->ck_ring_release)
        e->ck_ring_release(&e->ck_ring);
    zc_config_destroy(e->cfg);
    /* The communicator outlives the engine: what it made on the engine's
     * device goes before the device. */
    zc__groups_free(e);
    if (e->dev && e->comm && e->comm->dev == e->dev && e->comm->ops->unbind_device)
        e->comm->ops->unbind_device(e->comm);
    if (e->dev)
        e->dev->ops->destroy(e->dev);
    e->magic = 0;
    zc__host_free(NULL, ZC_MEM_OTHER, e, sizeof *e);
}
