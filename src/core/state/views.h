/* The fp32 views of 16-bit parameters and gradients (f32_view.c; the public
 * block calls are loop/block_f32.c), ZC_DEBUG's shadow of the gradient
 * buffers, which checks them for late writes (grad_debug.c), and the
 * per-chunk buffers every stage allocates (chunk_mem.c). */
#ifndef ZC_CORE_VIEWS_H
#define ZC_CORE_VIEWS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "zeroc/zeroc.h"

typedef struct zc_chunk zc_chunk; /* engine.h */

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

/* ---- chunk_mem.c: the per-chunk buffers ---------------------------------- */

/* Allocates / frees a chunk's buffers as the engine's policy says. */
zc_status zc__chunk_alloc(zc_engine *e, zc_chunk *c);
void zc__chunk_free(zc_engine *e, zc_chunk *c);

/* ---- grad_debug.c: ZC_DEBUG ---------------------------------------------- */

/* Parses ZC_DEBUG strictly: unset, "" or "0" off, "1" on, else ZC_ERR_CONFIG. */
zc_status zc__debug_parse(const char *text, bool *on);
/* Allocates the shadows at build (no-op when off); freed by zc__debug_free. */
zc_status zc__debug_build(zc_engine *e);
void zc__debug_free(zc_engine *e);
/* zc_grad_buffer: replaces *buf by p's shadow slice (zeroed on first use in
 * a micro-step, after checking it still holds the last poison). */
zc_status zc__debug_grad_buffer(zc_engine *e, zc_param *p, void **buf);
/* zc_grad_ready, before the reduction: copies p's shadow slice into `real`
 * (p's slice of the buffer the reduction reads) and poisons the shadow. */
zc_status zc__debug_grad_ready(zc_engine *e, zc_param *p, void *real);
/* zc_step / zc_micro_step_end: checks every poisoned slice (the 16-bit
 * shadows' and the fp32 gradient views'); collective (the outcome is agreed,
 * so a late write breaks the engine on every rank). */
zc_status zc__debug_check(zc_engine *e, const char *fn);
/* Records the first late write found (e->dbg_found, e->dbg_msg): `got` is
 * what p's poisoned slice of `bytes` holds now, compared with the poison;
 * `buffer` names the buffer ("gradient buffer", "fp32 gradient buffer"),
 * `source` the call that handed it out, `when` where it was seen. */
void zc__debug_compare(zc_engine *e, const zc_param *p, const void *got, size_t bytes,
                       size_t elem_bytes, const char *buffer, const char *source,
                       const char *when);
/* The poison byte of ZC_DEBUG slices. */
#define ZC_DEBUG_POISON 0xA5

#endif
