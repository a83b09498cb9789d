/* The activation store's order and bookkeeping (act.h): the stack of the
 * checkpoints a micro-step holds, their names, the refusals of a save or a
 * restore, and the reservation made at create. The copies between the
 * caller's memory and the slots are transfer.c's.
 *
 * Names. Every save gets the next number of a counter that starts at 1 and
 * never repeats for the store's life, so a name restored already, or one of
 * an earlier micro-step, can never be taken for the checkpoint that reuses
 * its slot: a restore must name the checkpoint on top of the stack, and any
 * other name is told apart by comparing it with the counter, the first name
 * of the micro-step and the names on the stack. */
#include <stdio.h>
#include <string.h>

#include "act/transfer.h"
#include "base/log.h"

static bool forced_staging;

void zc__act_force_staging(bool on) { forced_staging = on; }
bool zc__act_staging_forced(void) { return forced_staging; }

static zc_status make_home(zc_act_store *s)
{
    if (s->p.spec.home == ZC_ACT_HOME_DEVICE) {
        s->dslots_bytes = (size_t)s->lay.bytes[ZC_MEMKIND_DEVICE] -
                          (s->p.spec.parts > 1 ? ZC_ACT_DEVICE_ALIGN : 0);
        return s->dev->ops->alloc(s->dev, s->p.acct, ZC_MEM_ACTIVATIONS, s->dslots_bytes,
                                  "activation checkpoints (device)", (void **)&s->dslots);
    }
    zc_act_home_params hp = {
        .env = s->p.env,
        .slot_bytes = (size_t)s->lay.part_bytes,
        .pin_memory = s->p.pin_memory,
        .dirs = s->p.dirs,
        .ndirs = s->p.ndirs,
        .buffer_count = s->p.spec.buffer_count,
    };
    hp.env.nchunks = (int)s->p.spec.slots;
    ZC_CHECK(s->p.spec.home == ZC_ACT_HOME_CPU ? zc__act_home_cpu_create(&hp, &s->home)
                                               : zc__act_home_nvme_create(&hp, &s->home));
    return s->home->ops->prepare(s->home);
}

zc_status zc__act_create(const zc_act_params *p, zc_act_store **out)
{
    *out = NULL;
    zc_act_layout lay;
    ZC_CHECK(zc__act_layout(&p->spec, &lay));
    if (!p->spec.slots)
        return ZC_ERR(ZC_ERR_INTERNAL, "activation store without slots");
    if (p->spec.parts > 1 && (!p->mp || p->mp->world != p->spec.parts))
        return ZC_ERR(ZC_ERR_INTERNAL, "activation store: %d parts without their group",
                      p->spec.parts);
    zc_act_store *s = NULL;
    ZC_CHECK(zc__host_alloc(p->acct, ZC_MEM_OTHER, sizeof *s, "activation store", (void **)&s));
    s->p = *p;
    s->p.dirs = NULL; /* not kept: the home copies what it needs */
    s->lay = lay;
    s->dev = p->dev;
    s->next_id = 1;
    s->micro_first = 1;
    s->mp_rank = p->spec.parts > 1 ? p->mp->rank : 0;
    s->stack_bytes = (size_t)p->spec.slots * sizeof *s->stack;
    zc_status rc = zc__host_alloc(p->acct, ZC_MEM_OTHER, s->stack_bytes, "activation stack",
                                  (void **)&s->stack);
    s->p.dirs = p->dirs; /* make_home passes them on */
    if (rc == ZC_OK)
        rc = make_home(s);
    s->p.dirs = NULL;
    if (rc == ZC_OK)
        rc = zc__act_transfer_init(s);
    if (rc != ZC_OK) {
        zc__error_context("the activation store (rank %d: %lld checkpoints of %lld bytes, %s)",
                          p->env.rank, (long long)p->spec.slots, (long long)p->spec.bytes,
                          zc__act_home_name(p->spec.home));
        zc__act_destroy(s);
        return rc;
    }
    s->st.home = (zc_act_home_kind)p->spec.home;
    s->st.slots = p->spec.slots;
    s->st.slot_bytes = p->spec.bytes;
    s->st.part_bytes = lay.part_bytes;
    s->st.parts = p->spec.parts;
    ZC_LOGI("offload", "activation store of rank %d: %lld checkpoints of up to %lld bytes%s, "
            "%s; %.1f MiB device, %.1f MiB pinned, %.1f MiB NVMe", p->env.rank,
            (long long)p->spec.slots, (long long)p->spec.bytes,
            p->spec.parts > 1 ? " (a part of each per model-parallel rank)" : "",
            zc__act_home_name(p->spec.home), (double)lay.bytes[ZC_MEMKIND_DEVICE] / 1048576.0,
            (double)lay.bytes[ZC_MEMKIND_PINNED] / 1048576.0,
            (double)lay.bytes[ZC_MEMKIND_NVME] / 1048576.0);
    *out = s;
    return ZC_OK;
}

void zc__act_destroy(zc_act_store *s)
{
    if (!s)
        return;
    zc__act_transfer_free(s);
    zc__act_home_destroy(s->home);
    if (s->dslots)
        s->dev->ops->free(s->dev, s->p.acct, ZC_MEM_ACTIVATIONS, s->dslots, s->dslots_bytes);
    zc__host_free(s->p.acct, ZC_MEM_OTHER, s->stack, s->stack_bytes);
    zc__host_free(s->p.acct, ZC_MEM_OTHER, s, sizeof *s);
}

const char *zc__act_home_name(int home)
{
    return home == ZC_ACT_HOME_CPU    ? "pinned host memory (cpu_checkpointing)"
           : home == ZC_ACT_HOME_NVME ? "NVMe (nvme_checkpointing)"
                                      : "device memory";
}

/* ---- refusals ------------------------------------------------------------ */

zc_status zc__act_check_save(const zc_act_store *s, const void *src, size_t bytes,
                             const char *fn)
{
    if (!src)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: src is NULL", fn);
    if (bytes == 0 || bytes > (size_t)s->p.spec.bytes)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: a checkpoint of %zu bytes; the store holds "
                      "checkpoints of 1 to %lld bytes (zc_engine_options.act_checkpoint_bytes)",
                      fn, bytes, (long long)s->p.spec.bytes);
    const int parts = s->p.spec.parts;
    if (parts > 1 && bytes % (4 * (size_t)parts))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: %zu bytes cannot be split into %d equal parts of "
                      "whole 4-byte words (activation_checkpointing.partition_activations over "
                      "a model-parallel group of %d)", fn, bytes, parts, parts);
    if (s->depth >= s->p.spec.slots)
        return ZC_ERR(ZC_ERR_INVALID_STATE, "%s: this micro-step holds %lld checkpoints already, "
                      "the store's bound (zc_engine_options.act_checkpoints, or "
                      "activation_checkpointing.number_checkpoints): restore one first or raise "
                      "the bound", fn, (long long)s->depth);
    return ZC_OK;
}

zc_status zc__act_check_restore(const zc_act_store *s, zc_act_id id, const void *dst,
                                size_t bytes, const char *fn)
{
    if (id == 0 || id >= s->next_id)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: %llu names no checkpoint saved by this engine "
                      "(%llu saved so far)", fn, (unsigned long long)id,
                      (unsigned long long)(s->next_id - 1));
    if (id < s->micro_first)
        return ZC_ERR(ZC_ERR_INVALID_STATE, "%s: checkpoint %llu was saved in an earlier "
                      "micro-step (this one's start at %llu); a micro-step's end forgets what it "
                      "did not restore", fn, (unsigned long long)id,
                      (unsigned long long)s->micro_first);
    int64_t at = -1;
    for (int64_t k = 0; k < s->depth && at < 0; k++)
        if (s->stack[k].id == id)
            at = k;
    if (at < 0)
        return ZC_ERR(ZC_ERR_INVALID_STATE, "%s: checkpoint %llu was restored already (each is "
                      "restored once)", fn, (unsigned long long)id);
    if (at != s->depth - 1)
        return ZC_ERR(ZC_ERR_INVALID_STATE, "%s: checkpoint %llu restored out of order: %llu "
                      "was saved after it and is not restored yet (restores go last saved "
                      "first)", fn, (unsigned long long)id,
                      (unsigned long long)s->stack[s->depth - 1].id);
    if (!dst)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: dst is NULL", fn);
    if (bytes != s->stack[at].bytes)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: checkpoint %llu holds %zu bytes; %zu asked for",
                      fn, (unsigned long long)id, s->stack[at].bytes, bytes);
    return ZC_OK;
}

/* ---- save, restore ------------------------------------------------------- */

static zc_status sync_boundary(zc_act_store *s, void *stream)
{
    return s->p.sync_boundary ? zc__act_sync_all(s, stream) : ZC_OK;
}

zc_status zc__act_save(zc_act_store *s, const void *src, size_t bytes, void *stream,
                       zc_act_id *id)
{
    const double t0 = zc__now_s();
    const int64_t slot = s->depth;
    ZC_CHECK(sync_boundary(s, stream));
    ZC_CHECK(zc__act_copy_out(s, (int)slot, src, bytes, stream));
    ZC_CHECK(sync_boundary(s, stream));
    s->stack[slot] = (act_entry){.id = s->next_id, .bytes = bytes};
    *id = s->next_id++;
    s->depth++;
    const double dt = zc__now_s() - t0;
    s->st.saves++;
    s->st.saved_bytes += (int64_t)bytes;
    s->st.save_s += dt;
    s->st.held = s->depth;
    if (s->depth > s->st.peak_held)
        s->st.peak_held = s->depth;
    if (s->p.profile)
        ZC_LOGI("offload", "zc_act_save: checkpoint %llu (slot %lld, %zu bytes, %s): %.3f ms",
                (unsigned long long)*id, (long long)slot, bytes, zc__act_home_name(s->p.spec.home),
                dt * 1e3);
    return ZC_OK;
}

zc_status zc__act_restore(zc_act_store *s, zc_act_id id, void *dst, size_t bytes, void *stream)
{
    const double t0 = zc__now_s();
    const int64_t slot = s->depth - 1;
    bool hit = true;
    zc_status rc = sync_boundary(s, stream);
    if (rc == ZC_OK)
        rc = zc__act_copy_in(s, (int)slot, dst, bytes, stream, &hit);
    if (rc == ZC_OK)
        rc = sync_boundary(s, stream);
    const double dt = zc__now_s() - t0;
    s->st.restore_s += dt;
    if (rc != ZC_OK)
        return rc;
    s->depth--;
    s->st.restores++;
    s->st.restored_bytes += (int64_t)bytes;
    s->st.held = s->depth;
    if (hit)
        s->st.restore_hits++;
    else
        s->st.restore_misses++;
    /* The next restores' reads start now, while the caller recomputes. */
    zc__act_read_ahead(s, (int)slot - 1);
    if (s->p.profile)
        ZC_LOGI("offload", "zc_act_restore: checkpoint %llu (slot %lld, %zu bytes, %s): %.3f ms",
                (unsigned long long)id, (long long)slot, bytes, hit ? "ready" : "waited for",
                dt * 1e3);
    return ZC_OK;
}

bool zc__act_agrees(const zc_act_store *s)
{
    return s->home && s->home->ops->rank_local_io(s->home);
}

void zc__act_micro_end(zc_act_store *s)
{
    if (!s)
        return;
    zc__act_transfer_quiesce(s);
    if (s->home)
        s->home->ops->drop(s->home);
    s->depth = 0;
    s->st.held = 0;
    s->micro_first = s->next_id;
}

void zc__act_stats(const zc_act_store *s, zc_act_stats *out)
{
    const size_t size = out->size;
    memset(out, 0, sizeof *out);
    out->size = size;
    out->home = ZC_ACT_ON_NONE;
    if (!s)
        return;
    *out = s->st;
    out->size = size;
    if (s->home) {
        zc_act_home_io io;
        s->home->ops->io(s->home, &io);
        out->nvme_write_bytes = io.write_bytes;
        out->nvme_read_bytes = io.read_bytes;
        out->restore_wait_s = io.wait_s;
    }
}

void zc__act_set_nvme_faults(zc_act_store *s, const struct zc_nvme_faults *f)
{
    if (s && s->home)
        zc__act_home_nvme_set_faults(s->home, f);
}
