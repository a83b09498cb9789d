/* The calls a training loop makes (src/core/loop), as the other rooms of the
 * engine reach them: gradients (grads.c: the averaging factors, the
 * accumulation window stages 0/1 share, the buffers the backward pass writes
 * and the ready protocol), the reduction bucket (grad_bucket.c), parameters
 * as the caller sees them (params.c), adopted blocks (adopt.c) and the
 * evaluation pass (pass.c). Each stage's reduction is its own (step/stage0.c,
 * src/zero1, src/zero2); the public block calls (blocks.c, block_values.c,
 * block_f32.c) and the scalar all-reduce (scalar_reduce.c) need no header. */
#ifndef ZC_CORE_LOOP_H
#define ZC_CORE_LOOP_H

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
/* With 16-bit accumulation (e->acc_dt, grads.c): multiplies this
 * micro-step's n P-dtype gradient elements at buf by 1 / K, rounded to the
 * working dtype, on the engine's stream, before anything else touches them;
 * nothing otherwise. */
zc_status zc__grads_micro_scale(zc_engine *e, void *buf, size_t n);

/* Stages 0/1: the work on chunk c's full P-dtype gradient before the stage's
 * collective. With accumulation (K > 1) the window is summed in the full
 * fp32 accumulator; a micro-step that is not the window's last ends there
 * (*reduce false; the gradient buffer is cleared for the next). At the
 * window's end the fp32 sum is divided by K and rounded back into the
 * gradient (with 16-bit accumulation each micro-step is divided by K and the
 * sum rounded after every add instead, grads.c); then the prescale, and
 * comm_stream is ordered after the engine's
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

/* ---- params.c: parameters as the caller sees them -------------------- */

/* zc_param_load (round false) and zc_param_load_rounded (round true: the
 * master is made from the values rounded to the working dtype); fn names the
 * public call in messages. */
zc_status zc__param_load(zc_engine *e, zc_param *p, const float *values, bool round,
                         const char *fn);
/* zc_param_acquire with its status (block calls need it to fail alike). */
zc_status zc__param_acquire(zc_engine *e, zc_param *p, void *stream, void **out);
/* The full fp32 master of chunk k (zc_param_gather_master, and the block
 * form in block_values.c): read from its home (the read agreed across ranks
 * when it is rank-local I/O) into a staging slot of pool_stage, all-gathered
 * in stages 1-3 (collective there). On success *slot holds the chunk's
 * padded elements and the caller puts it back (zc__bufpool_put); on failure
 * nothing is held. `what` names the read in the agreed failure message. */
zc_status zc__master_gather_chunk(zc_engine *e, int k, const char *what, void **slot);

/* ---- publish.c: the working parameters after a load ---------------------- */

/* Chunk k's working parameters of this rank's optimizer range (n elements
 * from chunk element r0: the whole chunk at stage 0, else the shard) from
 * its master (the home's memory, in the state's master dtype: host memory
 * when `host`), as the step writes them; an offloaded stage-3 shard goes to its home. */
zc_status zc__params_from_master(zc_engine *e, int k, int64_t r0, const void *master,
                                 bool host, size_t n);
/* After every chunk's zc__params_from_master: the working parameters on
 * every rank, as after a step's publish (stages 1-2 and stage 3's gathered
 * chunks all-gathered, not counted in the step's communication stats), the
 * parameter home's writes flushed and agreed first (`what` names them in
 * the agreed failure). Collective. */
zc_status zc__params_publish(zc_engine *e, const char *what);

/* ---- adopt.c: blocks in the caller's memory ---------------------------- */

/* Whether parameter i starts a chunk because of adoption: 1 yes, 0 no (inside
 * an adopted block), -1 adoption does not decide (layout.c). */
int zc__adopt_starts_chunk(const zc_engine *e, int i);
/* After build: the adopted memory's current values become the parameters'
 * initial values (master included), and the chunk padding is zeroed. */
zc_status zc__adopt_load(zc_engine *e);

/* ---- pass.c: evaluation passes ----------------------------------------- */

/* ZC_OK outside an evaluation pass; inside one ZC_ERR_INVALID_STATE naming
 * `fn`, a call that computes gradients or changes parameters. Changes
 * nothing. */
zc_status zc__pass_train_only(const zc_engine *e, const char *fn);

#endif
