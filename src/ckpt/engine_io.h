/* What the engine's save and load share (internal): the range of a chunk
 * whose optimizer state this rank holds, and a host bounce buffer for
 * device-resident state. */
#ifndef ZC_CKPT_ENGINE_IO_H
#define ZC_CKPT_ENGINE_IO_H

#include "ckpt/format.h"
#include "core/engine.h"

/* Elements [*r0, *r1) of chunk c that this rank's optimizer home holds: the
 * whole chunk at stage 0, else the rank's shard (its shard index: srank). View index 0 is *r0. */
static inline void zc__ck_home_range(const zc_engine *e, const zc_chunk *c, int64_t *r0,
                                     int64_t *r1)
{
    *r0 = e->pol->full_optimizer ? 0 : (int64_t)e->srank * c->shard;
    *r1 = e->pol->full_optimizer ? c->padded : *r0 + c->shard;
}

/* Device memory the CPU cannot address: state in a device home travels
 * through a host bounce buffer of one chunk range. */
static inline bool zc__ck_needs_bounce(const zc_engine *e, bool host_home)
{
    return !host_home && e->dev->mem_kind == ZC_MEMKIND_DEVICE;
}

/* Bytes of the bounce buffer: the largest home range, in fp32 (the widest
 * stored dtype: a bf16 kind uses the first half, and a load widening bf16
 * to fp32 needs all of it). */
size_t zc__ck_bounce_bytes(const zc_engine *e);

/* The engine's stored dtype of each checkpoint kind (zc_ck_kind order). */
static inline void zc__ck_engine_kdt(const zc_engine *e, zc_dtype kdt[ZC_CK__KINDS])
{
    kdt[ZC_CK_MASTER] = e->sdt.master;
    kdt[ZC_CK_EXP_AVG] = e->sdt.m;
    kdt[ZC_CK_EXP_AVG_SQ] = e->sdt.v;
}

#endif
