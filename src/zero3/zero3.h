/* Stage 3's gather machinery (private to src/zero3): zero3.c builds the
 * policy from these; the engine reaches them only through the policy, so
 * src/core does not depend on src/zero3's internals. */
#ifndef ZC_ZERO3_ZERO3_H
#define ZC_ZERO3_ZERO3_H

#include "core/engine.h"

/* Frees chunk c's gathered copy (pool slot or agreed allocation), if any. */
void zc__z3_gather_free(zc_engine *e, zc_chunk *c);
zc_status zc__z3_acquire(zc_engine *e, zc_param *p, void **out);
zc_status zc__z3_release(zc_engine *e, zc_param *p);
/* End of a step: checks the trace, frees what is not needed, refreshes the
 * gathered copies that stay (updated says whether parameters changed). */
zc_status zc__z3_step_end(zc_engine *e, bool updated);
/* Drops kept and prefetched chunks nothing holds, and shard reads in flight
 * (the policy's quiesce). */
void zc__z3_quiesce(zc_engine *e);
/* The end of an evaluation pass: completes its trace, drops what it
 * gathered ahead (the policy's eval_end). */
void zc__z3_eval_end(zc_engine *e);
/* hpZ (hpz.c): all-gathers chunk k into its gather buffer - from the
 * secondary partitions over the hpZ group when they hold the current
 * parameters, else from the primary shards (send: this rank's) over the
 * shard group, keeping this rank's secondary partition - counted. */
zc_status zc__z3_gather_into(zc_engine *e, int k, const void *send);
/* The parameters changed: every secondary partition is stale. */
void zc__z3_hpz_invalidate(zc_engine *e);
/* Drops every gathered copy (engine teardown). */
void zc__z3_free_all(zc_engine *e);
/* The numel of chunk c's largest parameter (DeepSpeed's persistence rule
 * looks at it). */
int64_t zc__z3_largest_param(const zc_engine *e, const zc_chunk *c);
/* Logs once, at INFO, what stage 3 keeps gathered and why: persistent
 * chunks, the prefetch window, the live bound (keep_log.c; at build). */
void zc__z3_log_plan(const zc_engine *e);

#endif
