/* What every engine module needs from the engine, below all of them
 * (eng_base.c, agree.c): the checks at a public call's entry, breaking the
 * engine, the collectives through the engine (payload counted; a failure
 * breaks it) and the agreement on rank-local work built on them, and device
 * memory counted on the engine's account. engine.c (create, build, destroy)
 * stands above the modules and calls into them; nothing calls back into it.
 */
#ifndef ZC_CORE_ENG_BASE_H
#define ZC_CORE_ENG_BASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/alloc.h"
#include "base/error.h"
#include "device/device.h"
#include "plan/plan.h"
#include "zeroc/zeroc.h"

/* Validates a public call's engine (and built state when need_built), sets
 * the log rank of this thread and makes the engine's device current on it
 * (device.h make_current: the device layer then trusts it for the rest of
 * the call). `fn` names the call in the message. */
zc_status zc__eng_enter(const zc_engine *e, const char *fn, bool need_built);
/* Marks a built engine broken with status rc and reason `why` (the first
 * reason is kept). Only zc_engine_destroy is allowed afterwards; every other
 * call returns rc and names the reason. */
void zc__eng_break(zc_engine *e, zc_status rc, const char *why);
/* Validates that p belongs to e. */
zc_status zc__eng_check_param(const zc_engine *e, const zc_param *p, const char *fn);

/* Collectives through the engine: count payload bytes for the step stats
 * (all_reduce: count; reduce_scatter and all_gather: world * count; in the
 * communicated dtype) unless count_it is false, and record each for the
 * timeline and the comms logger (src/trace), named after the calling
 * function (DeepSpeed's comms_logger.debug "Caller Func"). With the comms
 * logger profiling the kind on an asynchronous device, the engine's stream
 * is synchronized before and after the collective, as DeepSpeed's logger
 * does, so that its latency is its own. */
#define zc__eng_all_reduce(e, buf, n, dt, count_it) \
    zc__eng_all_reduce_at(e, buf, n, dt, count_it, (e)->stream, __func__)
#define zc__eng_reduce_scatter(e, send, recv, recv_n, dt, count_it) \
    zc__eng_reduce_scatter_at(e, send, recv, recv_n, dt, count_it, (e)->stream, __func__)
#define zc__eng_all_gather(e, send, recv, send_n, dt, count_it) \
    zc__eng_all_gather_at(e, send, recv, send_n, dt, count_it, (e)->stream, __func__)
/* The same on an explicit stream (comm_stream, ctl_stream). */
#define zc__eng_all_reduce_on(e, buf, n, dt, count_it, stream) \
    zc__eng_all_reduce_at(e, buf, n, dt, count_it, stream, __func__)
#define zc__eng_reduce_scatter_on(e, send, recv, recv_n, dt, count_it, stream) \
    zc__eng_reduce_scatter_at(e, send, recv, recv_n, dt, count_it, stream, __func__)
#define zc__eng_all_gather_on(e, send, recv, send_n, dt, count_it, stream) \
    zc__eng_all_gather_at(e, send, recv, send_n, dt, count_it, stream, __func__)
zc_status zc__eng_all_reduce_at(zc_engine *e, void *buf, size_t n, zc_dtype dt, bool count_it,
                                void *stream, const char *site);
zc_status zc__eng_reduce_scatter_at(zc_engine *e, const void *send, void *recv, size_t recv_n,
                                    zc_dtype dt, bool count_it, void *stream, const char *site);
zc_status zc__eng_all_gather_at(zc_engine *e, const void *send, void *recv, size_t send_n,
                                zc_dtype dt, bool count_it, void *stream, const char *site);
/* A communicator group around collectives issued back to back (NCCL launches
 * them together). A failed group_start or group_end breaks the engine like a
 * failed collective; group_end must follow every group_start that succeeded. */
zc_status zc__eng_group_start(zc_engine *e);
zc_status zc__eng_group_end(zc_engine *e);

/* Agrees on the outcome of rank-local work before the next collective
 * (agree.c). Collective: every rank calls it at the same point with its own
 * status. Returns ZC_OK when every rank succeeded; otherwise every rank
 * returns the status of the first failed rank with the same message
 * ("<what> failed on rank R of W: <its message>") and its engine is broken. */
zc_status zc__eng_agree(zc_engine *e, zc_status local, const char *what);
/* The same, for rank-local work that changed nothing observable (checkpoint
 * files, the verification of a load): every rank returns the same status and
 * message, and the engine stays usable (broken only if the exchange itself
 * fails). */
zc_status zc__eng_agree_keep(zc_engine *e, zc_status local, const char *what);
/* zc__eng_agree_keep carrying data: a rank that succeeded sends `bytes`
 * bytes of payload (at most ZC_AGREE_PAYLOAD_BYTES; the same size on every
 * rank), and when every rank succeeded each rank's payload is readable at
 * zc__eng_agreed_payload(e, rank) - the same bytes on every rank - until
 * the next agreement. The public scalar all-reduce (scalars.c) is built on
 * it, so it needs no buffer of its own and fails like an agreement. */
#define ZC_AGREE_PAYLOAD_BYTES 1016
/* One rank's status record in device memory: ZC_AGREE_RECORD_BYTES
 * (plan/plan.h; the planner counts W + 1). */
zc_status zc__eng_agree_keep_with(zc_engine *e, zc_status local, const char *what,
                                  const void *payload, size_t bytes);
const void *zc__eng_agreed_payload(const zc_engine *e, int rank);
zc_status zc__agree_alloc(zc_engine *e);
void zc__agree_free(zc_engine *e);

/* Device helpers. */
zc_status zc__eng_alloc(zc_engine *e, zc_mem_category cat, size_t bytes, const char *what,
                        void **out);
void zc__eng_free(zc_engine *e, zc_mem_category cat, void **p, size_t bytes);
/* A host<->device copy of the offload (kind ZC_COPY_H2D or ZC_COPY_D2H)
 * through the engine's device on `stream`, recorded on the timeline as
 * chunk `chunk`'s (-1: none). Returns what the device's copy returns. */
zc_status zc__eng_copy(zc_engine *e, void *dst, const void *src, size_t bytes, zc_copy_kind kind,
                       void *stream, int chunk);
/* dst (dst_dt) = src (src_dt), n elements, device to device. */
zc_status zc__eng_convert(zc_engine *e, void *dst, zc_dtype dst_dt, const void *src,
                          zc_dtype src_dt, size_t n);
static inline char *zc__elem(void *base, int64_t i, size_t esz)
{
    return (char *)base + (size_t)i * esz;
}

#endif
