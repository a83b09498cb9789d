/* What the engine's save and load share (internal): the range of a chunk
 * whose optimizer state this rank holds, and a host bounce buffer for
 * device-resident state. */
#ifndef ZC_CKPT_ENGINE_IO_H
#define ZC_CKPT_ENGINE_IO_H

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

/* Bytes of the bounce buffer: the largest home range, in fp32. */
size_t zc__ck_bounce_bytes(const zc_engine *e);

#endif
