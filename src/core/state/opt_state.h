/* The engine's side of the optimizer-state homes (offload/homes.h): which
 * home each chunk's master, m and v live in and the passes over them
 * (opt_state.c), the copy stream of a staging home (opt_copy.c), and what
 * every home is told about the engine (offload_env.c). */
#ifndef ZC_CORE_OPT_STATE_H
#define ZC_CORE_OPT_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "device/device.h"
#include "offload/homes.h"
#include "zeroc/zeroc.h"

typedef struct zc_chunk zc_chunk; /* engine.h */

/* Reads offload_optimizer, creates the homes, places every chunk (ratio: the
 * first chunks, by elements, go to the offload home), pre-flights and
 * allocates their state. Called by build before the chunk buffers. */
zc_status zc__opt_build(zc_engine *e);
void zc__opt_free(zc_engine *e);

/* One chunk's optimizer inputs and outputs for the Adam loop, in the
 * coordinates of the chunk: element x of the chunk is master[x - opt_base],
 * grad + (x - grad_base) * grad element size, pout + (x - pout_base) * pesz. */
typedef struct zc_opt_chunk {
    zc_device *dev;            /* runs Adam (the host for host homes) */
    void *master, *m, *v;      /* in the engine's state dtypes (e->sdt) */
    int64_t opt_base;
    const char *grad;
    zc_dtype grad_dtype;
    int64_t grad_base;
    char *pout;
    int64_t pout_base;
    zc_opt_view view;
    bool staged;
    bool pout_home;            /* pout is the parameter home's (offload_param) */
} zc_opt_chunk;

/* The step's pass over every chunk in order: begin, then per chunk fetch
 * (state in, gradient staged in) -> Adam -> put (output staged out, state
 * written back), then end (waits for every write; returns the first error).
 * After a failure the caller skips to end. */
zc_status zc__opt_pass_begin(zc_engine *e);
zc_status zc__opt_fetch(zc_engine *e, int k, zc_opt_chunk *out);
zc_status zc__opt_put(zc_engine *e, int k, zc_opt_chunk *oc);
zc_status zc__opt_pass_end(zc_engine *e);
/* Stages 2/3: the fp32 gradient shard of chunk c when its home keeps it
 * (cpu offload), else NULL (chunk_mem.c allocates it on the device). */
float *zc__opt_grad_home(zc_engine *e, const zc_chunk *c);
/* Stages 2/3 with accumulation under nvme: the shard lives in the swap files
 * and has no memory of its own (c->acc stays NULL). */
bool zc__opt_grad_swapped(zc_engine *e, const zc_chunk *c);
/* The device whose ops address c->acc (the host for a host-held shard). */
zc_device *zc__opt_acc_dev(zc_engine *e, const zc_chunk *c);
/* acc (fp32, n elements) += src (n P-dtype gradient elements), both
 * addressed by d's ops, on `stream`, in the window's accumulation dtype
 * e->acc_dt: an fp32 add, or the sum rounded to the 16-bit working dtype
 * (src/core/loop/grads.c). Every add into a window's accumulator goes
 * through here. */
zc_status zc__grad_acc_add(zc_engine *e, zc_device *d, float *acc, const void *src, size_t n,
                           void *stream);
/* c->acc += own (this rank's reduced P-dtype slice, device memory, produced
 * on `stream`), as zc__grad_acc_add adds: a device kernel on `stream`, or D2H
 * into pinned staging (after `stream`) and a host add for a host-held or
 * swapped shard. */
zc_status zc__opt_grad_accumulate(zc_engine *e, zc_chunk *c, const void *own, void *stream);
/* While Adam runs on chunk k: keeps the home's I/O moving (non-blocking).
 * Returns whether I/O is still in flight. */
bool zc__opt_progress(zc_engine *e, int k);

/* ---- opt_copy.c ---------------------------------------------------------- */

/* Creates the optimizer's copy stream and its events when the offload home
 * stages through landing buffers (cpu home on a device, or forced staging);
 * nothing otherwise. Called by zc__opt_build once the homes are prepared. */
zc_status zc__opt_copy_build(zc_engine *e);
/* Waits for the copy stream and destroys it (before the homes are freed). */
void zc__opt_copy_free(zc_engine *e);
/* Whether chunk c's reduced gradient goes D2H into its landing buffer on the
 * copy stream (and its output H2D from a parity buffer on it). */
bool zc__opt_copy_on(const zc_engine *e, const zc_chunk *c);
/* Queues the D2H of this rank's reduced slice `src` (shard elements of the
 * working dtype, produced on `from`) into c's landing buffer: the copy
 * stream waits for `from`, copies, records ev_land[k]. No host wait. A
 * gradient pool slot the slice lies in is not zeroed for another chunk
 * before the copy read it (zc__order_engine_after_slot). */
zc_status zc__opt_copy_grad_d2h(zc_engine *e, zc_chunk *c, const void *src, void *from);
/* Consumes chunk k's landed gradient: waits on the host for ev_land[k] only,
 * then (a host-held fp32 shard, stages 2/3) adds it to c->acc. Nothing when
 * no copy is pending. */
zc_status zc__opt_copy_settle(zc_engine *e, int k);
/* Settles every chunk in order (zc_micro_step_end: the landing buffers take
 * the next micro-step's slices). */
zc_status zc__opt_copy_settle_all(zc_engine *e);
/* Before Adam writes chunk k's output into parity buffer k & 1: waits on the
 * host for that buffer's last H2D (chunk k - 2's), if one is pending. */
zc_status zc__opt_copy_out_begin(zc_engine *e, int k);
/* Queues the H2D of chunk k's output (bytes from src, a parity buffer, to
 * dst, device memory): after the engine's stream so far (dst's earlier
 * users), on the copy stream; the engine's stream then waits for it, so
 * the publish reads the new shard. No host wait. */
zc_status zc__opt_copy_out_end(zc_engine *e, int k, void *dst, const void *src, size_t bytes);
/* Before the engine's stream clears the gradients the D2H copies read (the
 * reset): it waits for the copy stream so far; unconsumed copies (a skipped
 * stage-1 step) are dropped. */
zc_status zc__opt_copy_order_reset(zc_engine *e);

/* Whether reading or writing the optimizer state can fail on one rank alone
 * (nvme: I/O), so collective callers agree on its outcome first. */
bool zc__opt_rank_local_io(const zc_engine *e);

/* n fp32 values between device memory and chunk k's master at element `at`
 * of its home tensor (parameter loading and gathering). A bf16 master takes
 * them rounded to nearest even and gives them back widened exactly. */
zc_status zc__opt_master_write(zc_engine *e, int k, int64_t at, const float *src, size_t n);
zc_status zc__opt_master_read(zc_engine *e, int k, float *dst, size_t n);

/* A pass over every chunk in chunk order for checkpoints: fn sees chunk k's
 * state (the view's tensors hold this rank's range of the chunk: the whole
 * chunk at stage 0, else its shard) and whether that memory is host memory.
 * dirty: each chunk is written back after fn (a load). The first failure
 * stops the pass, which is still drained; it is returned. */
typedef zc_status (*zc_opt_visit_fn)(zc_engine *e, int k, const zc_opt_view *v, bool host,
                                     void *arg);
zc_status zc__opt_visit(zc_engine *e, bool dirty, zc_opt_visit_fn fn, void *arg);
/* The same pass for an import that overwrites every chunk's master in this
 * rank's range and leaves m and v as they are: the view's master is to be
 * written whole (an NVMe home hands out a buffer it did not read, m and v
 * NULL, and writes the master alone); each chunk is written back after fn. */
zc_status zc__opt_visit_master(zc_engine *e, zc_opt_visit_fn fn, void *arg);

/* Tests: make host homes stage through pinned buffers even when device
 * memory is host memory, so the host path runs the CUDA path's copies. */
void zc__opt_force_staging(bool on);
/* Tests and the bench: the offload home of an engine, or NULL. */
zc_opt_home *zc__opt_offload_home(zc_engine *e);

/* ---- offload_env.c ------------------------------------------------------ */

/* What every home is told about e (offload/homes.h), its ZC_FAULTS io hook
 * included: true when that swap-file read or write is to fail. */
zc_home_env zc__eng_home_env(zc_engine *e);
bool zc__eng_io_fault(void *arg, int64_t *nth);
/* ZC_FAULTS load items: true when this payload read of zc_load_safetensors
 * is to fail (src/load asks before each). */
bool zc__eng_load_fault(void *arg, int64_t *nth);

#endif
