/* The bytes of an activation store (act.h, zc__act_layout): the one
 * definition the store allocates by (store.c) and the planner counts by
 * (src/plan/act_est.c). */
#include "act/act.h"

static bool round_up(int64_t v, int64_t a, int64_t *out)
{
    int64_t t = 0;
    if (__builtin_add_overflow(v, a - 1, &t))
        return false;
    *out = t / a * a;
    return true;
}

static zc_status too_big(const zc_act_spec *s)
{
    return ZC_ERR(ZC_ERR_NO_MEMORY, "the activation store of %lld checkpoints of %lld bytes "
                  "passes 2^63 bytes", (long long)s->slots, (long long)s->bytes);
}

zc_status zc__act_layout(const zc_act_spec *s, zc_act_layout *out)
{
    *out = (zc_act_layout){0};
    if (s->slots == 0)
        return ZC_OK;
    if (s->slots < 0 || s->slots > ZC_ACT_SLOTS_MAX)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_engine_options.act_checkpoints %lld is outside "
                      "[0, %lld]", (long long)s->slots, (long long)ZC_ACT_SLOTS_MAX);
    if (s->bytes < 1 || s->bytes > ZC_ACT_BYTES_MAX)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_engine_options.act_checkpoint_bytes %lld is "
                      "outside [1, 2^40] (the store has %lld checkpoints)", (long long)s->bytes,
                      (long long)s->slots);
    if (s->parts < 1 || s->home < ZC_ACT_HOME_DEVICE || s->home > ZC_ACT_HOME_NVME ||
        (s->home == ZC_ACT_HOME_NVME && s->buffer_count < 2))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "activation store: %d parts, home %d, %lld buffers",
                      s->parts, s->home, (long long)s->buffer_count);
    /* A rank keeps bytes / parts (zc_act_save requires the division to be
     * exact); the slot holds the largest such part. */
    out->part_bytes = (s->bytes + s->parts - 1) / s->parts;
    const int64_t align = s->home == ZC_ACT_HOME_DEVICE ? ZC_ACT_DEVICE_ALIGN : ZC_SWAP_ALIGN;
    int64_t stride = 0, dstride = 0, all = 0;
    if (!round_up(out->part_bytes, align, &stride) ||
        !round_up(out->part_bytes, ZC_ACT_DEVICE_ALIGN, &dstride))
        return too_big(s);
    out->slot_stride = stride;
    switch (s->home) {
    case ZC_ACT_HOME_DEVICE: /* store.c: one device allocation of every slot */
        if (__builtin_mul_overflow(stride, s->slots, &out->bytes[ZC_MEMKIND_DEVICE]))
            return too_big(s);
        break;
    case ZC_ACT_HOME_CPU: /* act_home_cpu.c: one pinned allocation of every slot */
        if (__builtin_mul_overflow(stride, s->slots, &out->bytes[ZC_MEMKIND_PINNED]))
            return too_big(s);
        break;
    default: /* act_home_nvme.c: the buffers, and the swap file in whole stripes */
        if (__builtin_mul_overflow(stride, s->buffer_count, &out->bytes[ZC_MEMKIND_PINNED]) ||
            __builtin_mul_overflow(stride, s->slots, &all))
            return too_big(s);
        if (s->nvme_round > 0 && !round_up(all, s->nvme_round, &all))
            return too_big(s);
        out->bytes[ZC_MEMKIND_NVME] = all;
        break;
    }
    /* store.c: the staging slots of a host home on a GPU, and the status word
     * of a partitioned restore's exchange (one device alignment unit). */
    int64_t dev = 0;
    if (s->home != ZC_ACT_HOME_DEVICE && s->staging &&
        __builtin_mul_overflow(dstride, (int64_t)ZC_ACT_STAGE_SLOTS, &dev))
        return too_big(s);
    if (s->parts > 1)
        dev += ZC_ACT_DEVICE_ALIGN;
    if (__builtin_add_overflow(out->bytes[ZC_MEMKIND_DEVICE], dev, &out->bytes[ZC_MEMKIND_DEVICE]))
        return too_big(s);
    return ZC_OK;
}
