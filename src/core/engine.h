/* The engine's internal state (one per rank), shared by the files of
 * src/core/engine*.c, layout.c, grads.c, step.c and the stage policies in
 * src/zero1, src/zero2, src/zero3.
 *
 * Memory model. Parameters are packed in registration order into chunks
 * (layout.c); chunk c holds `padded` elements, a multiple of world*64, and
 * rank r owns the shard [r*shard, (r+1)*shard). Every buffer below is device
 * memory (zc_device ops) counted on eng->acct by category; the engine never
 * reads or writes it with the CPU. What each stage keeps per chunk:
 *
 *   stage | param (P dtype)   | grad                               | master, m, v
 *   ------+-------------------+------------------------------------+-------------
 *   0     | full              | full, P dtype (+ full fp32 acc, K>1)| full
 *   1     | full              | full, P dtype (+ full fp32 acc, K>1)| shard
 *   2     | full              | fp32 shard + transient full P buf  | shard
 *   3     | shard (+ gathered | fp32 shard + transient full P buf  | shard
 *         | full copy, buffers)|                                   |
 *
 * P is the working precision (fp32, fp16 or bf16). The fp32 master is kept
 * separately even for fp32 parameters, so every dtype runs the same code.
 * master, m and v are not chunk fields: they live in the chunk's optimizer
 * home (core/opt_home.h: device memory, pinned host memory or NVMe) and are
 * reached only through the passes of opt_state.c.
 */
#ifndef ZC_CORE_ENGINE_H
#define ZC_CORE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/log.h"
#include "comm/comm.h"
#include "config/config.h"
#include "core/loss_scaler.h"
#include "core/opt_home.h"
#include "device/device.h"
#include "optim/adam.h"

#define ZC_ENGINE_MAGIC 0x5a43454eu /* "ZCEN" */
#define ZC_PARAM_MAGIC 0x5a435041u  /* "ZCPA" */
#define ZC_PARAM_MAX_NDIM 8
/* Chunks are padded to a multiple of world * ZC_CHUNK_ALIGN elements, so every
 * shard starts 64-element (>= 128-byte) aligned. */
#define ZC_CHUNK_ALIGN 64
/* Default chunk size cap when reduce_bucket_size (DeepSpeed default 5e8
 * elements) is larger: a chunk is the unit of the transient gradient buffer
 * and of the stage-3 gather buffer, so 2^24 elements (32 MiB in bf16) keeps
 * those bounded while collectives stay large. zc_engine_options.bucket_elems
 * overrides it. */
#define ZC_CHUNK_CAP_ELEMS ((int64_t)1 << 24)

typedef struct zc_stage_policy zc_stage_policy;

typedef enum zc_engine_state {
    ZC_ENG_CREATED = 0, /* registering groups and parameters */
    ZC_ENG_BUILT,       /* buffers allocated; training */
    ZC_ENG_FAILED,      /* build failed: only destroy is allowed */
    ZC_ENG_BROKEN       /* a collective failed: ranks may disagree, only destroy */
} zc_engine_state;

struct zc_param {
    uint32_t magic;
    zc_engine *eng;     /* owner: a handle from another engine is rejected */
    char *name;
    size_t name_bytes;
    int64_t shape[ZC_PARAM_MAX_NDIM];
    int ndim;
    int64_t numel;
    int group;
    int index;          /* registration order */
    bool chunk_start;   /* zc_chunk_boundary was called just before this one */
    int chunk;          /* set by build */
    int64_t offset;     /* element offset inside its chunk */
    bool ready;         /* gradient handed back in the current micro-step */
    int acquired;       /* outstanding zc_param_acquire calls */
};

typedef struct zc_group {
    double weight_decay, lr_scale;
} zc_group;

/* A run of elements of one parameter group inside one rank's shard: the unit
 * Adam is called on. Every stage splits the work into the same segments, so a
 * vectorised kernel sees every element at the same position in every stage
 * (this is what keeps stages 0-3 bitwise identical). Chunk-relative offsets. */
typedef struct zc_seg {
    int64_t start, n;
    int group;
} zc_seg;

typedef struct zc_chunk {
    int first, count;          /* parameters [first, first + count) */
    int64_t used;              /* sum of their numel */
    int64_t padded;            /* S: multiple of world * ZC_CHUNK_ALIGN */
    int64_t shard;             /* S / world */
    zc_seg *segs;              /* Adam segments, rank by rank */
    int *seg_begin;            /* rank r's segments: [seg_begin[r], seg_begin[r+1]) */
    size_t segs_bytes, seg_begin_bytes;

    /* Device buffers (see the table at the top). */
    void *param;               /* P dtype; full (stages 0-2) or shard (stage 3) */
    int home;                  /* e->homes[home] holds master, m, v (full at
                                  stage 0, else this rank's shard) */
    void *grad;                /* stages 0/1: full P-dtype gradient */
    float *acc;                /* stages 0/1 with K > 1: full fp32 accumulator;
                                  stages 2/3: fp32 gradient shard */
    bool acc_host;             /* acc is held by the chunk's host home (cpu
                                  offload), not device memory */
    bool acc_swap;             /* nvme with accumulation: the fp32 gradient
                                  shard lives in the swap files (acc is NULL) */
    double acc_sumsq;          /* acc_swap: its sum of squares, taken when the
                                  window's last slice was added */
    void *gbuf;                /* stages 2/3: transient full P-dtype gradient */
    void *gather;              /* stage 3: gathered full parameters, or NULL */

    int nready;                /* parameters ready in this micro-step */
    bool reduced;              /* reduction of this micro-step done */

    /* Stage 3 */
    int acq;                   /* outstanding acquires over its parameters */
    bool persistent;           /* kept gathered (param_persistence_threshold) */
    bool prefetched;           /* gathered ahead of its next use, not yet acquired */
    int64_t gathers_cur, gathers_last; /* gathers in this / the last step */
} zc_chunk;

/* Stage 3's acquire trace (src/zero3/gather.c). */
typedef enum zc_trace_mode { ZC_TRACE_RECORD = 0, ZC_TRACE_COMPLETE } zc_trace_mode;

typedef struct zc_trace {
    zc_trace_mode mode;
    int *order;                /* chunk activations (acquire with acq 0 -> 1) */
    int64_t len, cap;
    int64_t pos;               /* next expected activation (complete mode) */
    int64_t pf_end;            /* trace entries [pos, pf_end) were considered for prefetch */
} zc_trace;

struct zc_engine {
    uint32_t magic;
    zc_engine_state state;
    char broken_msg[256];      /* first collective failure (state ZC_ENG_BROKEN) */
    zc_config *cfg;            /* own copy */
    zc_comm *comm;             /* borrowed */
    zc_device *dev;
    void *stream;              /* NULL: the device's default stream */
    int rank, world, stage;
    zc_dtype pdt;              /* working precision */
    size_t pesz;
    int64_t gas;               /* gradient_accumulation_steps */
    int64_t bucket;            /* chunk size target (elements), set at build */
    int64_t bucket_option;     /* zc_engine_options.bucket_elems (<= 0: from config) */
    bool check_overflow;       /* fp16, or bf16 with check_grad_overflow */
    const zc_stage_policy *pol;
    zc_mem_account acct;

    zc_group *groups;
    int ngroups, groups_cap;
    zc_param **params;
    int nparams, params_cap;
    int64_t registered_elems;  /* sum of numel, bounded so byte counts fit int64 */
    bool boundary_pending;

    zc_chunk *chunks;
    int nchunks;
    int64_t num_elems, padded_elems;

    /* Accumulation window. */
    int64_t micro;             /* index of the current micro-step in the window */
    int nready;                /* parameters ready in the current micro-step */
    bool window_started;       /* a gradient was handed back in this window */

    /* Optimizer. */
    zc_loss_scaler scaler;
    int64_t steps, skipped, adam_steps;
    double *partials;          /* host: nchunks * world sum-of-squares partials */
    double *part_send, *part_recv; /* device buffers for the fp64 all-gather */

    /* Stats: the current window and the last completed step. */
    int64_t comm_cur[ZC_COLL__COUNT], comm_last[ZC_COLL__COUNT];
    int64_t gathers_cur, gathers_last;
    int64_t live_elems, live_peak_cur, live_peak_last;
    int64_t invalidations;

    /* Stage 3. */
    int64_t max_live, prefetch_elems, prefetched_elems;
    zc_trace trace;

    /* Optimizer state homes (opt_state.c): [0] device, [1] the offload home
     * (cpu or nvme) when offload_optimizer is on. */
    zc_opt_home *homes[2];
    int nhomes;
    bool opt_staging;          /* host homes stage the gradient and the output */
    bool opt_agree;            /* rank-local I/O in the step: agree on its outcome */
    int *pass_ks;              /* nchunks: a pass's chunk list, per home */
    int32_t *agree_host;       /* world * ZC_AGREE_WORDS */
    void *agree_send, *agree_recv; /* device buffers of the agreement all-gather */
};

/* Words of one rank's status in the offload agreement (status + message). */
#define ZC_AGREE_WORDS 128

/* A stage policy: what a stage keeps, reduces and gathers. The step pipeline
 * (grads.c, step.c, params.c) calls these; everything else is shared. */
struct zc_stage_policy {
    int stage;
    const char *name;
    bool full_params;     /* every rank holds the full working parameters */
    bool full_optimizer;  /* every rank holds full master / m / v (stage 0) */
    bool sharded_grads;   /* fp32 gradient shards + transient full buffers */
    /* Allocates the per-chunk buffers of this stage at build. */
    zc_status (*alloc_chunk)(zc_engine *e, zc_chunk *c);
    void (*free_chunk)(zc_engine *e, zc_chunk *c);
    /* Reduces chunk c once all its parameters are ready in this micro-step. */
    zc_status (*reduce_chunk)(zc_engine *e, zc_chunk *c, bool last_micro);
    /* After a non-skipped optimizer pass: make the updated working params
     * visible (stage 1/2 all-gather; stage 3 refreshes what is gathered). */
    zc_status (*publish)(zc_engine *e, bool updated);
    /* Stage 3: gather on acquire / free on release. NULL: resident params. */
    zc_status (*acquire)(zc_engine *e, zc_param *p, void **out);
    zc_status (*release)(zc_engine *e, zc_param *p);
    /* After every chunk is allocated at build (stage 3: persistence). May be
     * NULL. */
    void (*built)(zc_engine *e);
    /* Before the chunks are freed at destroy (stage 3: drop what is
     * gathered). May be NULL. */
    void (*teardown)(zc_engine *e);
};

extern const zc_stage_policy zc__stage0_policy;
extern const zc_stage_policy zc__stage1_policy;
extern const zc_stage_policy zc__stage2_policy;
extern const zc_stage_policy zc__stage3_policy;

/* ---- engine.c ------------------------------------------------------------ */

/* Validates a public call's engine (and built state when need_built) and sets
 * the log rank of this thread. `fn` names the call in the message. */
zc_status zc__eng_enter(const zc_engine *e, const char *fn, bool need_built);
/* Validates that p belongs to e. */
zc_status zc__eng_check_param(const zc_engine *e, const zc_param *p, const char *fn);

/* Collectives through the engine: count payload bytes for the step stats
 * (all_reduce: count; reduce_scatter and all_gather: world * count; in the
 * communicated dtype) unless count_it is false. */
zc_status zc__eng_all_reduce(zc_engine *e, void *buf, size_t n, zc_dtype dt, bool count_it);
zc_status zc__eng_reduce_scatter(zc_engine *e, const void *send, void *recv, size_t recv_n,
                                 zc_dtype dt, bool count_it);
zc_status zc__eng_all_gather(zc_engine *e, const void *send, void *recv, size_t send_n,
                             zc_dtype dt, bool count_it);

/* Device helpers. */
zc_status zc__eng_alloc(zc_engine *e, zc_mem_category cat, size_t bytes, const char *what,
                        void **out);
void zc__eng_free(zc_engine *e, zc_mem_category cat, void **p, size_t bytes);
/* dst (dst_dt) = src (src_dt), n elements, device to device. */
zc_status zc__eng_convert(zc_engine *e, void *dst, zc_dtype dst_dt, const void *src,
                          zc_dtype src_dt, size_t n);
static inline char *zc__elem(void *base, int64_t i, size_t esz)
{
    return (char *)base + (size_t)i * esz;
}

/* ---- layout.c ------------------------------------------------------------ */

/* Packs parameters into chunks, pads them and computes Adam segments. */
zc_status zc__layout_build(zc_engine *e);
void zc__layout_free(zc_engine *e);
/* Frees the norm-partial buffers (before zc__layout_free: sized by nchunks). */
void zc__partials_free(zc_engine *e);

/* ---- opt_state.c --------------------------------------------------------- */

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
    float *master, *m, *v;
    int64_t opt_base;
    const char *grad;
    zc_dtype grad_dtype;
    int64_t grad_base;
    char *pout;
    int64_t pout_base;
    zc_opt_view view;
    bool staged;
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
/* c->acc += own (this rank's reduced P-dtype slice, device memory): a
 * device kernel, or D2H into pinned staging and a host add for a host-held
 * shard. */
zc_status zc__opt_grad_accumulate(zc_engine *e, zc_chunk *c, const void *own);
/* While Adam runs on chunk k: keeps the home's I/O moving (non-blocking). */
void zc__opt_progress(zc_engine *e, int k);

/* After rank-local offload I/O (the step's pass, the read of
 * zc_param_gather_master), before the next collective: every rank learns every
 * rank's outcome (one all-gather of ZC_AGREE_WORDS words). When any rank
 * failed, every engine is marked broken with the same message, naming the
 * first failing rank, and the call returns its status on every rank. A no-op
 * returning rc without offload I/O. */
zc_status zc__opt_agree(zc_engine *e, zc_status rc, const char *what);

/* n fp32 values between device memory and chunk k's master at element `at`
 * of its home tensor (parameter loading and gathering). */
zc_status zc__opt_master_write(zc_engine *e, int k, int64_t at, const float *src, size_t n);
zc_status zc__opt_master_read(zc_engine *e, int k, float *dst, size_t n);

/* Tests: make host homes stage through pinned buffers even when device
 * memory is host memory, so the host path runs the CUDA path's copies. */
void zc__opt_force_staging(bool on);
/* Tests and the bench: the offload home of an engine, or NULL. */
zc_opt_home *zc__opt_offload_home(zc_engine *e);

/* ---- chunk_mem.c --------------------------------------------------------- */

/* Allocates / frees a chunk's buffers as the engine's policy says. */
zc_status zc__chunk_alloc(zc_engine *e, zc_chunk *c);
void zc__chunk_free(zc_engine *e, zc_chunk *c);

/* Stages 1/2 publish (src/zero2/zero2.c): all-gather each chunk's updated
 * working parameters in place. */
zc_status zc__publish_all_gather(zc_engine *e, bool updated);

/* ---- grads.c (shared reduction paths) ------------------------------------ */

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

/* Stages 0/1: reduce the full P-dtype gradient of chunk c (all-reduce or
 * reduce-scatter), accumulating in fp32 across micro-steps when K > 1. */
zc_status zc__grads_reduce_full(zc_engine *e, zc_chunk *c, bool last_micro, bool scatter);
/* Stages 2/3: reduce-scatter the transient buffer into the fp32 shard and
 * free the buffer. */
zc_status zc__grads_reduce_shard(zc_engine *e, zc_chunk *c);
/* The first parameter whose gradient is missing in this micro-step, or NULL. */
const zc_param *zc__grads_first_missing(const zc_engine *e);
/* Resets every gradient for the next window (after a step). */
zc_status zc__grads_reset(zc_engine *e);

#endif
