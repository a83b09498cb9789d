/* The activation store in a memory plan (plan.h, zc__est_act): the bytes of
 * src/act's reservation - its layout is the store's own (zc__act_layout),
 * so the plan follows every size the store allocates - and the key that
 * changes them. */
#include "plan/plan.h"

zc_status zc__est_act(const zc_est_in *in, zc_est *out)
{
    zc_act_layout lay;
    ZC_CHECK(zc__act_layout(&in->act, &lay));
    for (int k = 0; k < ZC_MEMKIND__COUNT; k++) {
        /* On the host path the store's device slots are the host memory that
         * stands for the device's (the host device counts them as device). */
        int64_t *b = &out->bytes[k][ZC_MEM_ACTIVATIONS];
        if (__builtin_add_overflow(*b, lay.bytes[k], b))
            return ZC_ERR(ZC_ERR_NO_MEMORY, "the memory plan overflows 64-bit byte counts");
    }
    out->act_nvme = lay.bytes[ZC_MEMKIND_NVME];
    return ZC_OK;
}

const char *zc__est_act_key(const zc_est_in *in, zc_mem_kind kind)
{
    switch (kind) {
    case ZC_MEMKIND_NVME:
        return "activation_checkpointing.nvme_path";
    case ZC_MEMKIND_PINNED:
        return in->act.home == ZC_ACT_HOME_NVME ? "activation_checkpointing.buffer_count"
                                                : "activation_checkpointing.nvme_checkpointing";
    default:
        return in->act.home == ZC_ACT_HOME_DEVICE
                   ? "activation_checkpointing.cpu_checkpointing (or "
                     "zc_engine_options.act_checkpoints)"
                   : "zc_engine_options.act_checkpoint_bytes";
    }
}

const char *zc__act_nvme_path(const zc_config *cfg)
{
    return cfg->act.nvme_path                 ? cfg->act.nvme_path
           : cfg->zero.offload_param.nvme_path ? cfg->zero.offload_param.nvme_path
                                               : cfg->zero.offload_optimizer.nvme_path;
}

zc_status zc__act_spec_from(const zc_config *cfg, int64_t slots, int64_t bytes, int mp_world,
                            bool device_memory, zc_act_spec *out)
{
    *out = (zc_act_spec){.parts = 1};
    if (slots < 0 || slots > ZC_ACT_SLOTS_MAX)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_engine_options.act_checkpoints %lld is outside "
                      "[0, %lld]", (long long)slots, (long long)ZC_ACT_SLOTS_MAX);
    if (bytes < 0 || bytes > ZC_ACT_BYTES_MAX)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_engine_options.act_checkpoint_bytes %lld is "
                      "outside [0, 2^40]", (long long)bytes);
    const struct zc_act_cfg *a = &cfg->act;
    if (!slots && a->number_checkpoints > 0)
        slots = a->number_checkpoints;
    if (!slots || !bytes)
        return ZC_OK; /* no store: zc_act_save refuses, saying what is missing */
    int parts = 1;
    if (a->partition_activations) {
        if (mp_world < 1)
            return ZC_ERR(ZC_ERR_CONFIG, "activation_checkpointing.partition_activations: the "
                          "engine has no model-parallel group to split the checkpoints over; "
                          "give it one (zc_engine_options.act_mp_comm, e.g. a zc_comm_split of "
                          "the world by tensor-parallel group) or set the key to false");
        parts = mp_world;
    }
    out->slots = slots;
    out->bytes = bytes;
    out->parts = parts;
    out->home = a->nvme_checkpointing  ? ZC_ACT_HOME_NVME
                : a->cpu_checkpointing ? ZC_ACT_HOME_CPU
                                       : ZC_ACT_HOME_DEVICE;
    out->buffer_count = a->buffer_count;
    out->staging = out->home != ZC_ACT_HOME_DEVICE && (device_memory || zc__act_staging_forced());
    if (out->home == ZC_ACT_HOME_NVME)
        out->nvme_round = cfg->aio.block_size * zc__nvme_path_count(zc__act_nvme_path(cfg));
    zc_act_layout lay;
    return zc__act_layout(out, &lay); /* the bounds, and overflow, refused here */
}
