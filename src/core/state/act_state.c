/* The engine's side of the activation store (act_state.h): the bound taken
 * at create, the store made at build from the same spec the pre-flight
 * planned (core/engine/preflight.c hands e->act_spec to the planner), and
 * its end. The store itself is src/act's; its homes are src/offload's. */
#include "core/engine.h"

zc_status zc__act_setup(zc_engine *e, const zc_engine_options *o, bool has_fields)
{
    const int64_t slots = has_fields ? o->act_checkpoints : 0;
    const int64_t bytes = has_fields ? o->act_checkpoint_bytes : 0;
    zc_comm *mp = has_fields ? o->act_mp_comm : NULL;
    if (mp && (mp->world < 1 || mp->rank < 0 || mp->rank >= mp->world))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_engine_create: zc_engine_options.act_mp_comm has "
                      "rank %d of world %d", mp->rank, mp->world);
    if (mp && mp == e->comm)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_engine_create: zc_engine_options.act_mp_comm is "
                      "the engine's own (data-parallel) communicator; the checkpoints split "
                      "over a model-parallel group");
    ZC_CHECK(zc__act_spec_from(e->cfg, slots, bytes, mp ? mp->world : 0,
                               e->dev->mem_kind == ZC_MEMKIND_DEVICE, &e->act_spec));
    if (!e->act_spec.slots)
        return ZC_OK;
    /* The group's collectives move the engine's device buffers. A group of
     * one needs no binding: nothing is gathered. */
    if (e->act_spec.parts > 1) {
        ZC_CHECK(mp->ops->bind_device(mp, e->dev));
        e->act_mp = mp;
    }
    return ZC_OK;
}

zc_status zc__act_build(zc_engine *e)
{
    if (!e->act_spec.slots)
        return ZC_OK;
    const struct zc_act_cfg *a = &e->cfg->act;
    char buf[16 * 512];
    const char *dirs[16];
    int nd = 0;
    if (e->act_spec.home == ZC_ACT_HOME_NVME)
        ZC_CHECK(zc__split_nvme_paths("activation_checkpointing", zc__act_nvme_path(e->cfg), buf,
                                      sizeof buf, dirs, &nd));
    const zc_act_params p = {
        .spec = e->act_spec,
        .dev = e->dev,
        .acct = &e->acct,
        .env = zc__eng_home_env(e),
        /* The checkpoints' pinned memory follows offload_param's setting. */
        .pin_memory = e->cfg->zero.offload_param.pin_memory,
        .dirs = dirs,
        .ndirs = nd,
        .mp = e->act_mp,
        .sync_boundary = a->synchronize_checkpoint_boundary,
        .profile = a->profile,
    };
    if (a->contiguous_memory_optimization && e->rank == 0)
        ZC_LOGI("core", "activation_checkpointing.contiguous_memory_optimization: the store is "
                "one reservation made at build whatever the key says");
    return zc__act_create(&p, &e->act);
}

void zc__act_free(zc_engine *e)
{
    zc__act_destroy(e->act);
    e->act = NULL;
    if (e->act_mp && e->act_mp->dev == e->dev && e->act_mp->ops->unbind_device)
        e->act_mp->ops->unbind_device(e->act_mp);
    e->act_mp = NULL;
}

void zc__act_micro_done(zc_engine *e)
{
    zc__act_micro_end(e->act);
}
