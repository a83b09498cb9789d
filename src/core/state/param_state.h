/* The engine's side of the stage-3 parameter homes (offload/homes.h,
 * param_state.c): which shards are offloaded, and what the gather, the
 * optimizer and zc_param_load ask of wherever a shard lives. */
#ifndef ZC_CORE_PARAM_STATE_H
#define ZC_CORE_PARAM_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "offload/homes.h"
#include "zeroc/zeroc.h"

typedef struct zc_chunk zc_chunk; /* engine.h */

/* Reads offload_param, creates the home and places every non-persistent
 * chunk's shard in it (after persistence is marked, before chunk buffers). */
zc_status zc__param_build(zc_engine *e);
void zc__param_free(zc_engine *e);
/* Whether c's shard lives in the offload home (chunk_mem.c then allocates no
 * device shard). */
bool zc__param_offloaded(const zc_engine *e, const zc_chunk *c);
/* Whether bringing chunk k's shard in can fail on one rank alone (NVMe): the
 * gather agrees on it before the all-gather. */
bool zc__param_rank_local_io(const zc_engine *e, int k);
/* Starts reading chunk k's shard ahead of its gather; *started false when no
 * buffer can be spared (nothing changed). Never fails: an error is reported
 * by the gather that uses the read. */
void zc__param_read_ahead(zc_engine *e, int k, bool *started);
/* Abandons a read started ahead (waits for it, frees its buffer). */
void zc__param_read_cancel(zc_engine *e, int k);
/* Puts this rank's shard of chunk k where the all-gather into `gather` can
 * send it from (*send: c->param, or the rank's slice of gather after an H2D
 * copy from the home; the all-gather then runs in place). */
zc_status zc__param_send(zc_engine *e, int k, void *gather, const void **send);
/* The optimizer's output for an offloaded chunk k: *pout is where Adam writes
 * the new shard (host memory when host_adam, or on the host path; else
 * device memory copied D2H by out_end); out_end sends it home. flush waits
 * for every write (first error since the last flush). */
zc_status zc__param_out_begin(zc_engine *e, int k, bool host_adam, char **pout);
zc_status zc__param_out_end(zc_engine *e, int k);
zc_status zc__param_flush(zc_engine *e);
/* zc_param_load into an offloaded shard: n fp32 host values at shard element
 * `at`, converted on the host (round to nearest even) into the chunk's
 * shard, which goes home once loads move to another chunk or at
 * zc__param_loads_agree (one write per chunk, not per parameter). Errors are
 * this rank's (reading the shard, or the write of the previous chunk). */
zc_status zc__param_load_range(zc_engine *e, int k, int64_t at, const float *values, size_t n);
/* Every zc_param_load at stage 3 with a parameter home calls it (on every
 * rank, whether or not its shard overlaps the parameter). */
void zc__param_load_note(zc_engine *e);
/* The agreement point of loads (the first acquire and the step after them):
 * the shard still being filled goes home, the home's writes are waited for,
 * and when the home does NVMe I/O the outcome is agreed across ranks, so a
 * failed write breaks every rank's engine with the same message. Does
 * nothing when no load was made since the last one. Collective. */
zc_status zc__param_loads_agree(zc_engine *e);
/* The home's counters (zeros without a home). */
void zc__param_io(const zc_engine *e, zc_param_home_io *out);
/* wall_clock_breakdown: notes the time the parameter home has waited for
 * NVMe reads so far (0 without timers or a home); zc__param_wait_end moves
 * what it waited since out of the gather phase into io_wait. */
double zc__param_wait_begin(const zc_engine *e);
void zc__param_wait_end(zc_engine *e, double since);

#endif
