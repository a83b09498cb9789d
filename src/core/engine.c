/* Engine lifecycle and registry: create / destroy, parameter groups,
 * parameter registration, chunk boundaries, loss scale and stats; plus the
 * collective and device helpers every engine file uses (so all comm payload is
 * counted in one place). */
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "core/engine.h"
#include "core/estimate.h"

/* The log rank is thread-local: every public entry sets it from the engine, so
 * a rank thread logs with its rank even when it never called create. */
zc_status zc__eng_enter(const zc_engine *e, const char *fn, bool need_built)
{
    zc__error_clear();
    if (!e || e->magic != ZC_ENGINE_MAGIC)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: engine handle is NULL or not an engine", fn);
    zc__log_set_rank(e->rank);
    if (e->state == ZC_ENG_FAILED)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "%s: zc_engine_build failed on this engine; it can only be destroyed", fn);
    if (e->state == ZC_ENG_BROKEN)
        return ZC_ERR(e->broken_rc,
                      "%s: this engine is broken, so the ranks may no longer agree on "
                      "gradients or parameters; destroy the engine and its communicator "
                      "(first failure: %s)",
                      fn, e->broken_msg);
    if (need_built && e->state != ZC_ENG_BUILT)
        return ZC_ERR(ZC_ERR_INVALID_STATE, "%s: call zc_engine_build first", fn);
    return ZC_OK;
}

zc_status zc__eng_out_check(const char *fn, const char *type, const size_t *size, size_t need)
{
    if (!size)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: out is NULL", fn);
    if (*size < need)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "%s: out->size %zu is smaller than sizeof(%s) %zu; set out->size", fn,
                      *size, type, need);
    return ZC_OK;
}

/* A failed collective (timeout, mismatch, NCCL abort) or device error inside
 * one leaves the ranks at different points of the step; nothing after it can
 * be trusted, so the engine refuses further work (like NCCL's communicators
 * after ncclCommAbort). Argument errors, identical on every rank, do not. */
static zc_status coll_failed(zc_engine *e, zc_status rc)
{
    if (rc == ZC_ERR_COMM || rc == ZC_ERR_DEVICE)
        zc__eng_break(e, rc, zc_last_error());
    return rc;
}

void zc__eng_break(zc_engine *e, zc_status rc, const char *why)
{
    if (e->state != ZC_ENG_BUILT)
        return; /* keep the first reason */
    snprintf(e->broken_msg, sizeof e->broken_msg, "%s", why);
    e->broken_rc = rc;
    e->state = ZC_ENG_BROKEN;
}

zc_status zc__eng_check_param(const zc_engine *e, const zc_param *p, const char *fn)
{
    if (!p)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: parameter handle is NULL", fn);
    if (p->magic != ZC_PARAM_MAGIC)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: %p is not a parameter handle of this engine", fn,
                      (const void *)p);
    if (p->eng != e)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "%s: parameter '%s' belongs to another engine (rank %d), not to this one "
                      "(rank %d)",
                      fn, p->name, p->eng ? p->eng->rank : -1, e->rank);
    return ZC_OK;
}

/* ---- collectives --------------------------------------------------------- */

zc_status zc__eng_all_reduce_on(zc_engine *e, void *buf, size_t n, zc_dtype dt, bool count_it,
                                void *stream)
{
    zc_status rc = zc__all_reduce(e->comm, buf, buf, n, dt, ZC_RED_SUM, stream);
    if (rc != ZC_OK)
        return coll_failed(e, rc);
    if (count_it)
        e->comm_cur[ZC_COLL_ALL_REDUCE] += (int64_t)(n * zc_dtype_size(dt));
    return ZC_OK;
}

zc_status zc__eng_reduce_scatter_on(zc_engine *e, const void *send, void *recv, size_t recv_n,
                                    zc_dtype dt, bool count_it, void *stream)
{
    zc_status rc = zc__reduce_scatter(e->comm, send, recv, recv_n, dt, stream);
    if (rc != ZC_OK)
        return coll_failed(e, rc);
    if (count_it)
        e->comm_cur[ZC_COLL_REDUCE_SCATTER] +=
            (int64_t)(recv_n * (size_t)e->world * zc_dtype_size(dt));
    return ZC_OK;
}

zc_status zc__eng_all_gather_on(zc_engine *e, const void *send, void *recv, size_t send_n,
                                zc_dtype dt, bool count_it, void *stream)
{
    zc_status rc = zc__all_gather(e->comm, send, recv, send_n, dt, stream);
    if (rc != ZC_OK)
        return coll_failed(e, rc);
    if (count_it)
        e->comm_cur[ZC_COLL_ALL_GATHER] +=
            (int64_t)(send_n * (size_t)e->world * zc_dtype_size(dt));
    return ZC_OK;
}

zc_status zc__eng_all_reduce(zc_engine *e, void *buf, size_t n, zc_dtype dt, bool count_it)
{
    return zc__eng_all_reduce_on(e, buf, n, dt, count_it, e->stream);
}

zc_status zc__eng_reduce_scatter(zc_engine *e, const void *send, void *recv, size_t recv_n,
                                 zc_dtype dt, bool count_it)
{
    return zc__eng_reduce_scatter_on(e, send, recv, recv_n, dt, count_it, e->stream);
}

zc_status zc__eng_all_gather(zc_engine *e, const void *send, void *recv, size_t send_n,
                             zc_dtype dt, bool count_it)
{
    return zc__eng_all_gather_on(e, send, recv, send_n, dt, count_it, e->stream);
}

/* A group's collectives are launched by group_end: a failure there is a
 * failure of those collectives (some ranks may have launched theirs), so it
 * breaks the engine exactly like one. */
zc_status zc__eng_group_start(zc_engine *e)
{
    zc_status rc = zc__comm_group_start(e->comm);
    return rc == ZC_OK ? ZC_OK : coll_failed(e, rc);
}

zc_status zc__eng_group_end(zc_engine *e)
{
    zc_status rc = zc__comm_group_end(e->comm);
    return rc == ZC_OK ? ZC_OK : coll_failed(e, rc);
}

/* ---- device helpers ------------------------------------------------------ */

zc_status zc__eng_alloc(zc_engine *e, zc_mem_category cat, size_t bytes, const char *what,
                        void **out)
{
    *out = NULL;
    if (bytes == 0)
        return ZC_OK;
    int64_t nth = 0;
    if (e->state == ZC_ENG_BUILT && zc__faults_hit(&e->faults, ZC_FAULT_ALLOC, &nth))
        return ZC_ERR(ZC_ERR_NO_MEMORY,
                      "%s: injected failure of allocation %lld after zc_engine_build on rank %d "
                      "(ZC_FAULTS), %zu bytes",
                      what, (long long)nth, e->rank, bytes);
    return e->dev->ops->alloc(e->dev, &e->acct, cat, bytes, what, out);
}

void zc__eng_free(zc_engine *e, zc_mem_category cat, void **p, size_t bytes)
{
    if (*p)
        e->dev->ops->free(e->dev, &e->acct, cat, *p, bytes);
    *p = NULL;
}

zc_status zc__eng_convert(zc_engine *e, void *dst, zc_dtype dst_dt, const void *src,
                          zc_dtype src_dt, size_t n)
{
    if (n == 0)
        return ZC_OK;
    if (dst_dt == src_dt)
        return e->dev->ops->copy(e->dev, dst, src, n * zc_dtype_size(dst_dt), ZC_COPY_D2D,
                                 e->stream);
    return e->dev->ops->cast(e->dev, dst, dst_dt, src, src_dt, n, e->stream);
}

/* ---- create / destroy ---------------------------------------------------- */

static const zc_stage_policy *policy_for(int stage)
{
    switch (stage) {
    case 0: return &zc__stage0_policy;
    case 1: return &zc__stage1_policy;
    case 2: return &zc__stage2_policy;
    case 3: return &zc__stage3_policy;
    default: return NULL;
    }
}

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

zc_status zc__pick_dtype(zc_config *cfg, const zc_engine_options *o, zc_dtype *out)
{
    if (o && OPT_HAS(o, param_dtype) && (int)o->param_dtype >= 0) {
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
    int stage = cfg->zero.stage;
    if (!policy_for(stage))
        return ZC_ERR(ZC_ERR_CONFIG, "zero_optimization.stage is %d; it must be 0, 1, 2 or 3",
                      stage);
    /* The rule lives in src/config so `zeroc config check` gives the same verdict. */
    ZC_CHECK(zc__config_engine_check(cfg));
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
    e->stage = stage;
    e->pol = policy_for(stage);

    /* Read once here: every rank parses the same text, so a malformed value
     * fails create on every rank alike. */
    const char *faults = zc__env("ZC_FAULTS");
    ZC_CHECK_GOTO(zc__faults_parse(faults, rank, world, &e->faults), rc, fail);
    if (faults) {
        if (rank == 0)
            ZC_LOGW("core", "ZC_FAULTS=%s: fault injection is on", faults);
        for (int i = 0; i < e->faults.n; i++)
            ZC_LOGW("core", "ZC_FAULTS: %s %lld after zc_engine_build will fail on this rank",
                    e->faults.kind[i] == ZC_FAULT_IO ? "swap-file read or write"
                                                     : "allocation",
                    (long long)e->faults.at[i]);
    }
    /* io items fire only on swap-file I/O (optimizer state or, at stage 3,
     * parameter shards under nvme): without it, an item that can never fire
     * is refused rather than passing silently. */
    const bool swap_io = cfg->zero.offload_optimizer.device == ZC_OFFLOAD_NVME ||
                         (stage == 3 && cfg->zero.offload_param.device == ZC_OFFLOAD_NVME);
    for (int i = 0; i < e->faults.n; i++)
        if (e->faults.kind[i] == ZC_FAULT_IO && !swap_io) {
            rc = ZC_ERR(ZC_ERR_CONFIG,
                        "ZC_FAULTS='%s': io items apply to the swap-file reads and writes of "
                        "zero_optimization.offload_optimizer.device \"nvme\" or (stage 3) "
                        "offload_param.device \"nvme\", which this configuration does not do",
                        faults);
            goto fail;
        }
    /* Strict like ZC_FAULTS, and read here for the same reason. */
    ZC_CHECK_GOTO(zc__debug_parse(zc__env("ZC_DEBUG"), &e->debug), rc, fail);
    ZC_CHECK_GOTO(zc__chunk_cap_env(&e->chunk_cap, &e->chunk_cap_forced), rc, fail);
    static atomic_bool cap_logged;
    if (e->chunk_cap_forced && !atomic_exchange(&cap_logged, true))
        ZC_LOGW("core", "ZC_CHUNK_CAP=%lld: chunks hold at most that many elements (a test "
                "switch)", (long long)e->chunk_cap);
    ZC_CHECK_GOTO(zc__config_clone(cfg, &e->cfg), rc, fail);
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
    if (e->cfg->communication_data_type >= 0 && e->cfg->communication_data_type != (int)e->pdt)
        ZC_LOGW("core", "communication_data_type %s is not supported yet: gradients are "
                        "reduced in the parameter dtype %s",
                zc_dtype_name((zc_dtype)e->cfg->communication_data_type), zc_dtype_name(e->pdt));

    if (e->cfg->grad_accum_dtype >= 0 && e->cfg->grad_accum_dtype != (int)ZC_DTYPE_F32)
        ZC_LOGW("core", "data_types.grad_accum_dtype %s is not supported: gradients are "
                        "accumulated in fp32 across micro-steps",
                zc_dtype_name((zc_dtype)e->cfg->grad_accum_dtype));

    zc__scaler_init(&e->scaler, e->cfg);

    /* Group 0: the optimizer's weight decay. */
    ZC_CHECK_GOTO(zc__host_alloc(&e->acct, ZC_MEM_OTHER, 4 * sizeof(zc_group), "groups", &mem),
                  rc, fail);
    e->groups = mem;
    e->groups_cap = 4;
    e->groups[0] = (zc_group){e->cfg->optimizer.weight_decay, 1.0};
    e->ngroups = 1;

    ZC_LOGI("core", "engine: ZeRO stage %d, world %d, %s parameters, accumulation %lld, device %s",
            stage, world, zc_dtype_name(e->pdt), (long long)e->gas, e->dev->ops->name);
    *out = e;
    return ZC_OK;
fail:
    zc_engine_destroy(e);
    return rc;
}

ZC_API void zc_engine_destroy(zc_engine *e)
{
    if (!e || e->magic != ZC_ENGINE_MAGIC)
        return;
    /* First: queued work may still read or write the buffers freed below. */
    zc__streams_destroy(e);
    if (e->pol && e->pol->teardown && e->chunks)
        e->pol->teardown(e);
    zc__opt_free(e);
    zc__param_free(e);
    zc__partials_free(e);
    /* Before the layout: the shadows are sized by the chunks. */
    zc__debug_free(e);
    zc__layout_free(e);
    /* After the chunks: they return their pool slots first. */
    zc__reserve_free(e);
    zc__view_free(e);
    for (int i = 0; i < e->nparams; i++) {
        zc_param *p = e->params[i];
        zc__host_free(&e->acct, ZC_MEM_OTHER, p->name, p->name_bytes);
        p->magic = 0;
        zc__host_free(&e->acct, ZC_MEM_OTHER, p, sizeof *p);
    }
    zc__host_free(&e->acct, ZC_MEM_OTHER, e->params, (size_t)e->params_cap * sizeof *e->params);
    zc__host_free(&e->acct, ZC_MEM_OTHER, e->groups, (size_t)e->groups_cap * sizeof *e->groups);
    zc_config_destroy(e->cfg);
    if (e->dev)
        e->dev->ops->destroy(e->dev);
    e->magic = 0;
    zc__host_free(NULL, ZC_MEM_OTHER, e, sizeof *e);
}

/* ---- registry ------------------------------------------------------------ */

/* Grows a host array of elem-sized items to hold at least need items. */
static zc_status grow(zc_engine *e, void **arr, int *cap, int need, size_t elem, const char *what)
{
    if (need <= *cap)
        return ZC_OK;
    int ncap = *cap ? *cap * 2 : 16;
    while (ncap < need)
        ncap *= 2;
    void *n = NULL;
    ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, (size_t)ncap * elem, what, &n));
    if (*arr)
        memcpy(n, *arr, (size_t)*cap * elem);
    zc__host_free(&e->acct, ZC_MEM_OTHER, *arr, (size_t)*cap * elem);
    *arr = n;
    *cap = ncap;
    return ZC_OK;
}

ZC_API zc_status zc_group_add(zc_engine *e, double weight_decay, double lr_scale, int *group_id)
{
    ZC_CHECK(zc__eng_enter(e, "zc_group_add", false));
    if (e->state != ZC_ENG_CREATED)
        return ZC_ERR(ZC_ERR_INVALID_STATE, "zc_group_add: groups must be added before "
                                            "zc_engine_build");
    if (!group_id)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_group_add: group_id is NULL");
    if (!(weight_decay >= 0) || !(lr_scale >= 0) || weight_decay > 1e30 || lr_scale > 1e30)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "zc_group_add: weight_decay %g and lr_scale %g must be finite and >= 0",
                      weight_decay, lr_scale);
    void *arr = e->groups;
    ZC_CHECK(grow(e, &arr, &e->groups_cap, e->ngroups + 1, sizeof(zc_group), "groups"));
    e->groups = arr;
    e->groups[e->ngroups] = (zc_group){weight_decay, lr_scale};
    *group_id = e->ngroups++;
    return ZC_OK;
}

ZC_API zc_param *zc_param_add(zc_engine *e, const char *name, const int64_t *shape, int ndim,
                              int group)
{
    if (zc__eng_enter(e, "zc_param_add", false) != ZC_OK)
        return NULL;
    if (e->state != ZC_ENG_CREATED) {
        ZC_ERR(ZC_ERR_INVALID_STATE,
               "zc_param_add('%s'): parameters must be added before zc_engine_build",
               name ? name : "(null)");
        return NULL;
    }
    if (!name || !*name) {
        ZC_ERR(ZC_ERR_INVALID_ARG, "zc_param_add: name is NULL or empty");
        return NULL;
    }
    if (!shape || ndim < 1 || ndim > ZC_PARAM_MAX_NDIM) {
        ZC_ERR(ZC_ERR_INVALID_ARG, "zc_param_add('%s'): ndim %d must be 1..%d with a shape",
               name, ndim, ZC_PARAM_MAX_NDIM);
        return NULL;
    }
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] <= 0) {
            ZC_ERR(ZC_ERR_INVALID_ARG,
                   "zc_param_add('%s'): dimension %d is %lld; every dimension must be > 0", name,
                   d, (long long)shape[d]);
            return NULL;
        }
        if (numel > INT64_MAX / 4 / shape[d]) {
            ZC_ERR(ZC_ERR_INVALID_ARG, "zc_param_add('%s'): shape is too large", name);
            return NULL;
        }
        numel *= shape[d];
    }
    /* Every size derived from the model (padded totals, fp32 and Adam bytes,
     * stats) is int64: bound the sum like a single parameter. */
    if (numel > INT64_MAX / 4 - e->registered_elems) {
        ZC_ERR(ZC_ERR_INVALID_ARG,
               "zc_param_add('%s'): %lld elements on top of the %lld registered exceed the "
               "engine's limit of %lld elements in all",
               name, (long long)numel, (long long)e->registered_elems,
               (long long)(INT64_MAX / 4));
        return NULL;
    }
    if (group < 0 || group >= e->ngroups) {
        ZC_ERR(ZC_ERR_INVALID_ARG,
               "zc_param_add('%s'): unknown group %d (this engine has %d; see zc_group_add)",
               name, group, e->ngroups);
        return NULL;
    }
    for (int i = 0; i < e->nparams; i++)
        if (!strcmp(e->params[i]->name, name)) {
            ZC_ERR(ZC_ERR_INVALID_ARG, "zc_param_add: a parameter named '%s' already exists",
                   name);
            return NULL;
        }

    void *arr = e->params;
    if (grow(e, &arr, &e->params_cap, e->nparams + 1, sizeof(zc_param *), "param table") != ZC_OK)
        return NULL;
    e->params = arr;
    void *mem = NULL;
    if (zc__host_alloc(&e->acct, ZC_MEM_OTHER, sizeof(zc_param), "param", &mem) != ZC_OK)
        return NULL;
    zc_param *p = mem;
    size_t nb = strlen(name) + 1;
    if (zc__host_alloc(&e->acct, ZC_MEM_OTHER, nb, "param name", &mem) != ZC_OK) {
        zc__host_free(&e->acct, ZC_MEM_OTHER, p, sizeof *p);
        return NULL;
    }
    memcpy(mem, name, nb);
    p->name = mem;
    p->name_bytes = nb;
    p->magic = ZC_PARAM_MAGIC;
    p->eng = e;
    memcpy(p->shape, shape, (size_t)ndim * sizeof *shape);
    p->ndim = ndim;
    p->numel = numel;
    p->group = group;
    p->index = e->nparams;
    p->chunk_start = e->boundary_pending;
    p->chunk = -1;
    e->boundary_pending = false;
    e->registered_elems += numel;
    e->params[e->nparams++] = p;
    return p;
}

ZC_API zc_status zc_chunk_boundary(zc_engine *e)
{
    ZC_CHECK(zc__eng_enter(e, "zc_chunk_boundary", false));
    if (e->state != ZC_ENG_CREATED)
        return ZC_ERR(ZC_ERR_INVALID_STATE,
                      "zc_chunk_boundary: chunk boundaries must be set before zc_engine_build");
    e->boundary_pending = true;
    return ZC_OK;
}

ZC_API double zc_loss_scale(const zc_engine *e)
{
    if (!e || e->magic != ZC_ENGINE_MAGIC)
        return 1.0;
    return e->scaler.scale;
}

ZC_API zc_status zc_engine_stats(const zc_engine *e, zc_stats *out)
{
    ZC_CHECK(zc__eng_enter(e, "zc_engine_stats", false));
    ZC_CHECK(zc__eng_out_check("zc_engine_stats", "zc_stats", out ? &out->size : NULL,
                               sizeof(zc_stats)));
    zc_stats s = {.size = sizeof s};
    s.rank = e->rank;
    s.world = e->world;
    s.stage = e->stage;
    for (int i = 0; i < e->nparams; i++)
        s.num_params += e->params[i]->numel;
    s.padded_params = e->padded_elems;
    s.num_chunks = e->nchunks;
    for (int k = 0; k < ZC_MEM__COUNT; k++) {
        s.bytes[k] = atomic_load(&e->acct.bytes[k]);
        s.peak_bytes[k] = atomic_load(&e->acct.peak[k]);
    }
    /* Internal kinds -> the public order of zc_mem_kind_stat. */
    static const zc_mem_kind to_internal[ZC_KIND__COUNT] = {
        [ZC_KIND_DEVICE] = ZC_MEMKIND_DEVICE, [ZC_KIND_PINNED] = ZC_MEMKIND_PINNED,
        [ZC_KIND_HOST] = ZC_MEMKIND_HOST, [ZC_KIND_NVME] = ZC_MEMKIND_NVME};
    for (int kind = 0; kind < ZC_KIND__COUNT; kind++)
        s.peak_bytes_by_kind[kind] = atomic_load(&e->acct.kind_peak[to_internal[kind]]);
    for (int kind = 0; kind < ZC_KIND__COUNT; kind++)
        for (int k = 0; k < ZC_MEM__COUNT; k++) {
            int64_t b = atomic_load(&e->acct.kind_bytes[to_internal[kind]][k]);
            s.bytes_by_kind_cat[kind][k] = b;
            s.bytes_by_kind[kind] += b;
        }
    for (int k = 0; k < ZC_COLL__COUNT; k++)
        s.comm_bytes_last_step[k] = e->comm_last[k];
    s.gathers_last_step = e->gathers_last;
    s.max_live_elems_last_step = e->live_peak_last;
    s.trace_invalidations = e->invalidations;
    s.steps = e->steps;
    s.skipped_steps = e->skipped;
    *out = s;
    return ZC_OK;
}

ZC_API zc_status zc_engine_offload_stats(const zc_engine *e, zc_offload_stats *out)
{
    ZC_CHECK(zc__eng_enter(e, "zc_engine_offload_stats", false));
    ZC_CHECK(zc__eng_out_check("zc_engine_offload_stats", "zc_offload_stats",
                               out ? &out->size : NULL, sizeof(zc_offload_stats)));
    *out = (zc_offload_stats){
        .size = sizeof *out,
        .param_nvme_read_bytes = e->pread_last,
        .param_nvme_write_bytes = e->pwrite_last,
        .optim_nvme_read_bytes = e->oread_last,
        .optim_nvme_write_bytes = e->owrite_last,
        .param_reads = e->preads_last,
        .prefetch_hits = e->off_last.hits,
        .prefetch_misses = e->off_last.misses,
        .io_wait_acquires = e->off_last.io_wait_acquires,
        .io_wait_s = e->off_last.io_wait_s,
        .max_live_elems = e->live_peak_last,
    };
    return ZC_OK;
}
