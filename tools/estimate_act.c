/* `zeroc estimate`'s activations (estimate_act.h). */
#include "estimate_act.h"

/* One layer's activations, S B (34 D + 5 A S) values of 2 bytes scaled to
 * esz: exact in 128 bits (every factor below 2^24 within the flags'
 * ranges), multiplying before dividing. */
static zc_u128 per_layer(const ea_gpt *g)
{
    const zc_u128 S = (zc_u128)g->S, D = (zc_u128)g->D, b = (zc_u128)g->B;
    const zc_u128 sbd = S * b * D;
    return (sbd * 34 + 5 * (zc_u128)g->A * S * S * b) * (zc_u128)g->esz / 2;
}

zc_u128 zc__ea_activations(const ea_gpt *g, bool ckpt)
{
    const zc_u128 S = (zc_u128)g->S, b = (zc_u128)g->B, e = (zc_u128)g->esz;
    const zc_u128 rest = S * b * (zc_u128)g->D * e + S * b * (zc_u128)g->V * (e + 4);
    return per_layer(g) * (ckpt ? 1 : (zc_u128)g->L) + rest;
}

zc_status zc__ea_store_spec(const zc_config *cfg, const ea_gpt *g, bool ckpt, bool host_device,
                            zc_act_spec *out)
{
    *out = (zc_act_spec){.parts = 1};
    /* Every block's input but the last's: the last block runs on into its
     * backward and keeps its activations (the one block's working set that
     * zc__ea_activations counts). One layer: no store. */
    if (!ckpt || g->L < 2)
        return ZC_OK;
    /* One block input: S x B x D values of esz bytes (within 2^40 for the
     * flags' ranges that fit a machine; the planner refuses beyond). */
    const zc_u128 bytes = (zc_u128)g->S * (zc_u128)g->B * (zc_u128)g->D * (zc_u128)g->esz;
    if (bytes > (zc_u128)ZC_ACT_BYTES_MAX)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "a block's input of %.3g bytes is beyond the "
                      "activation store's 2^40 (zc_engine_options.act_checkpoint_bytes)",
                      (double)bytes);
    return zc__act_spec_from(cfg, g->L - 1, (int64_t)bytes, 0, !host_device, out);
}

zc_status zc__ea_set_home(zc_config *cfg, int home)
{
    if (home < 0)
        return ZC_OK;
    ZC_CHECK(zc_config_set_bool(cfg, "activation_checkpointing.cpu_checkpointing", home == 1));
    return zc_config_set_bool(cfg, "activation_checkpointing.nvme_checkpointing", home == 2);
}
