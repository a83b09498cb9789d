/* Stage 2's gradient path (src/zero2/zero2.c), which stage 3 shares: a
 * chunk's gradient in a transient full buffer from the gradient pool, then
 * reduce-scattered into this rank's fp32 shard. */
#ifndef ZC_ZERO2_ZERO2_H
#define ZC_ZERO2_ZERO2_H

#include "core/engine.h"

/* The policy's grad_buffer: chunk c's transient gradient buffer, taken from
 * the pool reserved at build and zeroed on first use in a micro-step. When
 * every fitting slot is held by other chunks - after the reduction bucket
 * gave back the slots it held (zc__bucket_flush) - ZC_ERR_NO_MEMORY on every
 * rank alike (the slots follow the call sequence). */
zc_status zc__z2_grad_buffer(zc_engine *e, zc_chunk *c, void **out);
/* The policy's reduce_launch: prescales the transient buffer and
 * reduce-scatters it on comm_stream (*launched always true). */
zc_status zc__z2_reduce_launch(zc_engine *e, zc_chunk *c, bool last_micro, bool *launched);
/* The policy's reduce_finish: adds this rank's reduced slice to its fp32
 * gradient shard wherever its home keeps it (zc__opt_grad_accumulate) and
 * gives the buffer back to the pool. */
zc_status zc__z2_reduce_finish(zc_engine *e, zc_chunk *c);

#endif
