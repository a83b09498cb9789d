/* The engine's streams and events (streams.c): the engine's own stream, the
 * communication stream of overlap_comm, the control stream of the status
 * exchange, and the orderings between them and the caller's stream. */
#ifndef ZC_CORE_STREAMS_H
#define ZC_CORE_STREAMS_H

#include "base/error.h"
#include "zeroc/zeroc.h"

/* Creates the engine's streams and events (zc_engine_build): a non-blocking
 * stream of its own, a communication stream when overlap_comm, a control
 * stream. The host device's streams are its synchronous sentinel. */
zc_status zc__streams_create(zc_engine *e);
/* The streams that depend on the stage (the comm stream with overlap_comm,
 * stage 3's H2D stream): part of zc__streams_create, or, with stage "auto",
 * called by zc_engine_build once the stage is chosen. */
zc_status zc__streams_stage(zc_engine *e);
/* The per-slot state of the gradient pool (ev_gslot, gslot_pending,
 * gslot_land), for its n slots: made by reserve.c once the pool is planned
 * (n is known only then), freed by zc__streams_destroy. */
zc_status zc__streams_grad_slots(zc_engine *e, int n);
/* Waits for everything queued on the engine's streams, then destroys them
 * (zc_engine_destroy). Errors are logged: there is no one left to tell. */
void zc__streams_destroy(zc_engine *e);
/* Work enqueued on `stream` (a caller's; NULL = legacy default) from now on
 * runs after the work enqueued on the engine's stream so far. */
zc_status zc__order_caller_after_engine(zc_engine *e, void *stream);
/* Work enqueued on the engine's stream from now on runs after the work
 * enqueued on `stream` (a caller's) so far. */
zc_status zc__order_engine_after_caller(zc_engine *e, void *stream);
/* Before a reduction on comm_stream: it runs after the engine's stream so far
 * (the gradient, its prescale). No-op without overlap_comm. */
zc_status zc__order_comm_after_engine(zc_engine *e);
/* After a reduction on comm_stream that read gradient pool slot `slot` (-1:
 * none): records ev_reduced (and that slot's event). No-op without overlap. */
zc_status zc__reduction_done(zc_engine *e, int slot);
/* Before the engine's stream touches reduced gradients (norm, Adam, reset):
 * it waits for every reduction so far. No-op without overlap_comm. */
zc_status zc__order_engine_after_reductions(zc_engine *e);
/* Before gradient pool slot `slot` is zero-filled on the engine's stream for
 * another chunk: it waits for the reduction that last read the slot. */
zc_status zc__order_engine_after_slot(zc_engine *e, int slot);

#endif
