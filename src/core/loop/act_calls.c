/* The public calls of the activation store (zeroc.h: zc_act_save,
 * zc_act_restore, zc_engine_act_stats): the engine's checks at their entry,
 * the refusals of src/act made before anything changes, and the agreement of
 * a restore's outcome across ranks where it can differ (NVMe I/O), so that a
 * failed read or write on one rank breaks every rank's engine with the same
 * message instead of leaving the others in the next collective. */
#include "core/engine.h"

static zc_status enter(const zc_engine *e, const char *fn)
{
    ZC_CHECK(zc__eng_enter(e, fn, true));
    if (!e->act)
        return ZC_ERR(ZC_ERR_INVALID_STATE, "%s: the engine has no activation store: give "
                      "zc_engine_options.act_checkpoint_bytes (the largest checkpoint) and "
                      "act_checkpoints or activation_checkpointing.number_checkpoints (how many "
                      "a micro-step holds) before zc_engine_build", fn);
    return ZC_OK;
}

ZC_API zc_status zc_act_save(zc_engine *e, const void *src, size_t bytes, void *stream,
                             zc_act_id *id)
{
    ZC_CHECK(enter(e, "zc_act_save"));
    if (!id)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_act_save: id is NULL");
    if (e->pass.kind == ZC_PASS_EVAL)
        return ZC_ERR(ZC_ERR_INVALID_STATE, "zc_act_save: inside an evaluation pass "
                      "(zc_pass_begin), which has no backward to restore it; run the blocks "
                      "without saving their inputs");
    ZC_CHECK(zc__act_check_save(e->act, src, bytes, "zc_act_save"));
    return zc__act_save(e->act, src, bytes, stream, id);
}

ZC_API zc_status zc_act_restore(zc_engine *e, zc_act_id id, void *dst, size_t bytes,
                                void *stream)
{
    ZC_CHECK(enter(e, "zc_act_restore"));
    ZC_CHECK(zc__act_check_restore(e->act, id, dst, bytes, "zc_act_restore"));
    zc_status rc = zc__act_restore(e->act, id, dst, bytes, stream);
    /* NVMe: a read or an earlier write may have failed here alone. Every
     * rank restores in the same order, so every rank agrees here. */
    if (zc__act_agrees(e->act))
        rc = zc__eng_agree(e, rc, "zc_act_restore");
    if (e->act_mp) {
        /* partition_activations: the group's exchange tells every member
         * whether all of them have their part; a failure breaks this engine
         * too (its ranks all see it: each one's peer reports it). */
        rc = zc__act_gather(e->act, rc, dst, bytes, stream);
        if (rc != ZC_OK && e->state != ZC_ENG_BROKEN)
            zc__eng_break(e, rc, zc_last_error());
    }
    return rc;
}

ZC_API zc_status zc_engine_act_stats(const zc_engine *e, zc_act_stats *out)
{
    ZC_CHECK(zc__out_check("zc_engine_act_stats", "zc_act_stats", out ? &out->size : NULL,
                           sizeof *out));
    ZC_CHECK(zc__eng_enter(e, "zc_engine_act_stats", false));
    zc__act_stats(e->act, out);
    return ZC_OK;
}
