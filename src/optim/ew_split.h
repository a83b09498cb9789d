/* How the element-wise optimizers (Lion, Adagrad) split a shard over the
 * host thread pool (internal to src/optim). */
#ifndef ZC_OPTIM_EW_SPLIT_H
#define ZC_OPTIM_EW_SPLIT_H

#include <stddef.h>

#include "zeroc/zeroc.h"

/* The buffer and dtype checks Lion's and Adagrad's shards share: for n > 0,
 * master, the state tensor (named `state` in the message) and grad present;
 * the gradient's dtype, and the copy's when there is one, F32, F16 or BF16.
 * ZC_ERR_INVALID_ARG naming `who`. */
zc_status zc__ew_shard_check(const char *who, const float *master, const float *state,
                             const char *state_name, const void *grad, zc_dtype grad_dtype,
                             const void *param_out, zc_dtype param_out_dtype, size_t n);

/* Runs elements [lo, hi) of the caller's shard. */
typedef void (*zc_ew_range_fn)(const void *ctx, size_t lo, size_t hi);

/* Runs run(ctx, lo, hi) over [0, n) as zc__adam_host_run splits an Adam
 * shard: tiles of ZC_ADAM_TILE elements, part k of T taking the contiguous
 * tiles [k*ntiles/T, (k+1)*ntiles/T), one part below ZC_ADAM_SMALL elements,
 * so which thread computes an element never changes what it computes.
 * nthreads <= 0: the pool's default. `near`: an address in the streamed
 * memory (zc__pool_run). Returns the pool's errors. */
zc_status zc__ew_split(size_t n, int nthreads, zc_ew_range_fn run, const void *ctx,
                       const void *near);

#endif
