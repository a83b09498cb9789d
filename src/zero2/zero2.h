/* Stage 2's gradient path (src/zero2/zero2.c), which stage 3 shares: a
 * chunk's gradient in a transient full buffer from the gradient pool, then
 * reduce-scattered into this rank's fp32 shard. */
#ifndef ZC_ZERO2_ZERO2_H
#define ZC_ZERO2_ZERO2_H

#include "core/engine.h"

/* The policy's grad_buffer: chunk c's transient gradient buffer, taken from
 * the pool reserved at build and zeroed on first use in a micro-step. When
 * every fitting slot is held by other chunks, ZC_ERR_NO_MEMORY on every rank
 * alike (the slots follow the call sequence). */
zc_status zc__z2_grad_buffer(zc_engine *e, zc_chunk *c, void **out);
/* The policy's reduce_chunk: prescales the transient buffer, reduce-scatters
 * it on comm_stream, adds this rank's slice to its fp32 gradient shard
 * wherever its home keeps it (zc__opt_grad_accumulate), and gives the buffer
 * back to the pool. */
zc_status zc__z2_reduce(zc_engine *e, zc_chunk *c);

#endif
