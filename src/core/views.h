/* The parameters as the caller sees them: zc_param_acquire's status form
 * and the chunk gather of the fp32 master (params.c), and the fp32 views of
 * 16-bit parameters and gradients (f32_view.c; the public block calls are
 * block_f32.c). */
#ifndef ZC_CORE_VIEWS_H
#define ZC_CORE_VIEWS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "zeroc/zeroc.h"

/* zc_param_acquire with its status (block calls need it to fail alike). */
zc_status zc__param_acquire(zc_engine *e, zc_param *p, void *stream, void **out);
/* The full fp32 master of chunk k (zc_param_gather_master, and the block
 * form in block_values.c): read from its home (the read agreed across ranks
 * when it is rank-local I/O) into a staging slot of pool_stage, all-gathered
 * in stages 1-3 (collective there). On success *slot holds the chunk's
 * padded elements and the caller puts it back (zc__bufpool_put); on failure
 * nothing is held. `what` names the read in the agreed failure message. */
zc_status zc__master_gather_chunk(zc_engine *e, int k, const char *what, void **slot);

/* ---- f32_view.c ---------------------------------------------------------- */

/* zc_engine_create: checks zc_engine_options.f32_view_chunks (0..64, host
 * device only) and sets up the (empty) view pools. */
zc_status zc__view_option(zc_engine *e, int chunks);
/* Reserves the view pools at build (none for fp32 parameters or
 * f32_view_chunks 0); with ZC_DEBUG, one fp32 gradient slot per chunk
 * instead of the gradient pool. zc__view_free releases them. */
zc_status zc__view_build(zc_engine *e);
void zc__view_free(zc_engine *e);
/* ZC_DEBUG: frees the per-chunk fp32 gradient slots (zc__debug_free, while
 * the chunks that size them exist). */
void zc__view_debug_free(zc_engine *e);
/* ZC_DEBUG: checks p's poisoned fp32 gradient slice (a no-op when it holds
 * none), recording a late write as zc__debug_compare does. */
void zc__view_debug_check(zc_engine *e, const zc_param *p, const char *when);
/* zc_param_release, once p has no outstanding acquire: its view ends. */
void zc__view_release(zc_engine *e, zc_param *p);
/* zc_grad_ready, before anything else: p's fp32 gradient, if one was handed
 * out, is narrowed (round to nearest even) into its working-dtype buffer. */
zc_status zc__view_grad_ready(zc_engine *e, zc_param *p);
/* After zc_step published the update: live views are widened again. */
zc_status zc__view_refresh(zc_engine *e);
/* For the block calls (block_f32.c): whether views are copies (16-bit
 * parameters), a slot's bytes (the largest chunk in fp32), p's acquired full
 * parameter, and widening it into p->view. */
bool zc__view_copies(const zc_engine *e);
size_t zc__view_slot_bytes(const zc_engine *e);
const void *zc__view_acquired(const zc_engine *e, const zc_param *p);
zc_status zc__view_widen(zc_engine *e, const zc_param *p);

#endif
