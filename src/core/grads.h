/* Gradients (grads.c): the averaging factors, the accumulation window stages
 * 0/1 share, the buffers the backward pass writes and the ready protocol;
 * the per-chunk buffers every stage allocates (chunk_mem.c); and ZC_DEBUG's
 * check of late gradient writes (grad_debug.c). Each stage's reduction is
 * its own (stage0.c, src/zero1, src/zero2). */
#ifndef ZC_CORE_GRADS_H
#define ZC_CORE_GRADS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "zeroc/zeroc.h"

typedef struct zc_chunk zc_chunk; /* engine.h */

/* The factor applied to gradients before the reduction (DeepSpeed's
 * prescale_gradients / gradient_predivide_factor), and the one folded into
 * the optimizer's grad_scale afterwards; their product is 1 / world. */
double zc__grad_prescale(const zc_engine *e);
double zc__grad_postscale(const zc_engine *e);
/* The averaging factor the optimizer still applies to a reduced gradient:
 * zc__grad_postscale, and 1 / K where the reduction did not divide by the
 * accumulation steps K already. Its product with the prescale and any 1 / K
 * applied earlier is 1 / (world * K) in every stage. */
double zc__grad_avg(const zc_engine *e);
/* Multiplies n P-dtype gradient elements at buf by zc__grad_prescale, on the
 * engine's stream (nothing when it is 1). */
zc_status zc__grads_apply_prescale(zc_engine *e, void *buf, size_t n);

/* Stages 0/1: the work on chunk c's full P-dtype gradient before the stage's
 * collective. With accumulation (K > 1) the window is summed in the full
 * fp32 accumulator; a micro-step that is not the window's last ends there
 * (*reduce false; the gradient buffer is cleared for the next). At the
 * window's end the fp32 sum is divided by K and rounded back into the
 * gradient; then the prescale, and comm_stream is ordered after the engine's
 * stream: *reduce true, the collective comes next (stage0.c all-reduces,
 * src/zero1 reduce-scatters). */
zc_status zc__grads_full_window(zc_engine *e, zc_chunk *c, bool last_micro, bool *reduce);
/* Stages 0/1's grad_buffer: the chunk's resident full gradient. */
zc_status zc__grads_full_buffer(zc_engine *e, zc_chunk *c, void **out);
/* zc_grad_buffer with its status (block calls return it). */
zc_status zc__grad_buffer(zc_engine *e, zc_param *p, void **out);
/* The first parameter whose gradient is missing in this micro-step, or NULL. */
const zc_param *zc__grads_first_missing(const zc_engine *e);
/* Resets every gradient for the next window (after a step). */
zc_status zc__grads_reset(zc_engine *e);

/* ---- grad_bucket.c: the reduction bucket (why and how: there) ------------ */

/* Chunk c, all of whose parameters are ready in this micro-step (the
 * window's last when last_micro), joins the bucket; the bucket is reduced
 * (zc__bucket_flush) once it holds e->bucket elements or the micro-step's
 * last gradient is ready. A failure before c joined (no gradient buffer
 * free) changes nothing; one while reducing breaks the engine. */
zc_status zc__bucket_add(zc_engine *e, zc_chunk *c, bool last_micro);
/* Reduces the chunks in the bucket as one communicator group (nothing when
 * it is empty). Every rank calls it at the same point of the call
 * sequence. A failure breaks the engine. */
zc_status zc__bucket_flush(zc_engine *e);
/* Empties the bucket without reducing (the gradients' reset). */
void zc__bucket_clear(zc_engine *e);

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
