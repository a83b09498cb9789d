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
 * home (offload/opt_home.h: device memory, pinned host memory or NVMe) and are
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
#include "core/bufpool.h"
#include "core/faults.h"
#include "core/loss_scaler.h"
#include "offload/homes.h"
#include "core/timers.h"
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
/* Stage 2/3 transient gradient buffers reserved at build: two sets, each
 * able to hold the buffers of the largest unit (the chunks between two
 * zc_chunk_boundary calls, or one chunk without boundaries; reserve.c), like
 * DeepSpeed's pair of reduce buckets with overlap_comm and FSDP's unsharded
 * gradient of the unit in backward beside the one still being reduced: one
 * unit's gradients are written while the previous unit's are reduced. A
 * backward pass that holds more at once gets ZC_ERR_NO_MEMORY from
 * zc_grad_buffer on every rank alike. */
#define ZC_GRAD_SETS 2
/* Bounds of the stage-3 acquire trace reserved at build (entries). */
#define ZC_TRACE_MIN 64
#define ZC_TRACE_MAX ((int64_t)1 << 22)

typedef struct zc_stage_policy zc_stage_policy;

typedef enum zc_engine_state {
    ZC_ENG_CREATED = 0, /* registering groups and parameters */
    ZC_ENG_BUILT,       /* buffers allocated; training */
    ZC_ENG_FAILED,      /* build failed: only destroy is allowed */
    ZC_ENG_BROKEN       /* a collective failed, or rank-local work between two
                           collectives failed on some rank (agreed by every rank):
                           ranks may disagree, only destroy */
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
    void *adopt_mem;    /* first parameter of an adopted block: the caller's
                           memory its chunk uses as working parameters */
    size_t adopt_bytes; /* its size */
    bool adopt_inner;   /* a later parameter of an adopted block */
    bool dbg_taken;     /* ZC_DEBUG: its shadow slice was handed out (and
                           zeroed) in this micro-step */
    bool dbg_poisoned;  /* ZC_DEBUG: its shadow slice holds the poison of its
                           last zc_grad_ready */
    float *view;        /* fp32 view (f32_view.c): its widened values in its
                           chunk's view slot while acquired, else NULL */
    float *gview;       /* fp32 gradient handed out in this micro-step (its
                           slice of the chunk's gradient view slot), or NULL */
    void *gview_dst;    /* the working-dtype gradient buffer gview is narrowed
                           into at zc_grad_ready */
    bool gview_poisoned; /* ZC_DEBUG: its slice of the chunk's fp32 gradient
                            slot holds the poison of its last zc_grad_ready */
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
    bool adopted;              /* param is the caller's memory (zc_block_adopt):
                                  never allocated or freed here */
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
    int64_t gmark;             /* blocks.c's scratch: the block call that last
                                  counted this chunk (e->gmark_seq) */
    void *gather;              /* stage 3: gathered full parameters, or NULL */
    bool gather_own;           /* gather was allocated beyond the reserve (agreed),
                                  not taken from pool_gather */

    int nready;                /* parameters ready in this micro-step */
    bool reduced;              /* reduction of this micro-step done */

    /* Stage 3 */
    int acq;                   /* outstanding acquires over its parameters */
    bool persistent;           /* kept gathered (param_persistence_threshold) */
    bool prefetched;           /* gathered (or its shard being read) ahead of its next
                                  use, not yet acquired */
    bool kept;                 /* released but kept gathered: used again within
                                  stage3_max_reuse_distance */
    bool reading;              /* offloaded shard read started ahead (prefetch): counted
                                  live and prefetched, not gathered yet */
    int64_t read_act;          /* the activation that started that read */
    int64_t gathers_cur, gathers_last; /* gathers in this / the last step */

    /* fp32 views (f32_view.c): slots of pool_view / pool_gview and how many
     * of the chunk's parameters use them. */
    float *view_slot, *gview_slot;
    int view_refs, gview_refs;
    /* Stage 3 with offload_param (param_state.c). */
    bool poff;                 /* the shard lives in e->phome, not c->param */
    int64_t reads_cur, reads_last; /* shard reads from NVMe in this / the last step */
    void *pout_home, *pout_dev; /* the optimizer's output for the home (between
                                   zc__param_out_begin and _end) */
} zc_chunk;

/* Stage 3's acquire trace (src/zero3/gather.c). */
typedef enum zc_trace_mode { ZC_TRACE_RECORD = 0, ZC_TRACE_COMPLETE } zc_trace_mode;

typedef struct zc_trace {
    zc_trace_mode mode;
    int *order;                /* chunk activations (acquire with acq 0 -> 1) */
    int64_t len, cap;
    int64_t pos;               /* next expected activation (complete mode) */
    bool truncated;            /* more activations than cap were recorded: the trace
                                  holds the first cap, and nothing is prefetched
                                  beyond them */
} zc_trace;

struct zc_engine {
    uint32_t magic;
    zc_engine_state state;
    char broken_msg[512];      /* why it broke (state ZC_ENG_BROKEN) */
    zc_status broken_rc;       /* the status that broke it; later calls return it */
    zc_faults faults;          /* ZC_FAULTS items for this rank */
    zc_config *cfg;            /* own copy */
    zc_comm *comm;             /* borrowed */
    zc_device *dev;
    /* Streams and events (streams.c). Until zc_engine_build creates them the
     * engine works on the legacy default stream (NULL). */
    void *stream;              /* the engine's own stream: everything but what follows */
    void *comm_stream;         /* gradient reductions: its own with overlap_comm,
                                  else == stream */
    void *ctl_stream;          /* zc__eng_agree's status exchange, so agreeing
                                  never waits for queued model work */
    void *user_stream;         /* zc_engine_options.stream: where gradients are written */
    bool streams_created;
    void *ev_engine;           /* recorded on stream for a caller's stream to wait on */
    void *ev_caller;           /* recorded on a caller's stream for stream to wait on */
    void *ev_handoff;          /* stream -> comm_stream before a reduction */
    void *ev_reduced;          /* comm_stream -> stream: every reduction so far */
    /* Stage-3 parameter offload (param_state.c): the H2D copies of shards
     * out of their home run on a copy stream of their own; ev_h2d_in orders
     * the copy after the engine's stream (the gather buffer's earlier
     * users), ev_h2d_done the engine's stream after the copy (the
     * all-gather waits on the device). NULL without offload_param. */
    void *h2d_stream, *ev_h2d_in, *ev_h2d_done;
    /* With asynchronous copies (a GPU): chunk h2d_k's home buffer is still
     * being copied from; it is given back (read_end) after ev_h2d_done, at
     * the next send or home operation. */
    bool h2d_pending;
    int h2d_k;
    /* Per gradient pool slot (ngslots of them, made with the pool at build,
     * reserve.c): the event of its last reduction, and whether one is
     * pending. */
    void **ev_gslot;
    bool *gslot_pending;
    int ngslots;
    int rank, world, stage;
    zc_dtype pdt;              /* working precision */
    size_t pesz;
    int64_t gas;               /* gradient_accumulation_steps */
    int64_t bucket;            /* chunk size target (elements), set at build */
    int64_t bucket_option;     /* zc_engine_options.bucket_elems (<= 0: from config) */
    int64_t gmark_seq;         /* blocks.c: stamps for zc_chunk.gmark */
    int64_t chunk_cap;         /* the most elements reduce_bucket_size may give a chunk:
                                  ZC_CHUNK_CAP_ELEMS, or ZC_CHUNK_CAP when set */
    bool chunk_cap_forced;     /* ZC_CHUNK_CAP is set: it caps bucket_option too */
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
    double *part_send, *part_recv; /* device buffers for the fp64 all-gather; stage 0
                                      writes its (chunk, rank) partials into part_recv */
    double *norm_scratch;      /* device: sumsq_async scratch, largest shard */
    size_t norm_scratch_elems;

    /* Progress lines (progress.c): when and at which step the last one was
     * printed (or the engine was built). */
    double prog_t0;
    int64_t prog_steps0;
    double prog_tsum0[ZC_TIMER__COUNT], prog_ttotal0; /* timer sums at that line */
    int64_t prog_timed0;

    /* wall_clock_breakdown (timers.c). */
    zc_step_timers timers;

    /* Stats: the current window and the last completed step. */
    int64_t comm_cur[ZC_COLL__COUNT], comm_last[ZC_COLL__COUNT];
    int64_t gathers_cur, gathers_last;
    int64_t live_elems, live_peak_cur, live_peak_last;
    int64_t invalidations;

    /* Stage 3. */
    int64_t max_live, prefetch_elems, prefetched_elems;
    int64_t reuse_elems;       /* stage3_max_reuse_distance */
    int64_t activations;       /* chunk activations so far (orders prefetch reads) */
    zc_trace trace;
    /* Parameter offload (param_state.c): the home of offloaded shards, or
     * NULL; the per-step counters of zc_engine_offload_stats. */
    zc_param_home *phome;
    /* zc_param_load's shard being filled (param_state.c): chunk pload_k's
     * shard stays in the home's write buffer at pload_dst while consecutive
     * loads hit the same chunk, and goes home when another chunk is loaded
     * or at the next agreement point (pload_unagreed: loads were made since
     * the last one; every rank loads the same parameters, so it is the same
     * on every rank). */
    bool pload_pending, pload_unagreed;
    int pload_k;
    void *pload_dst;
    struct zc_offload_step {
        int64_t hits, misses, io_wait_acquires;
        double io_wait_s;
    } off_cur, off_last;
    zc_param_home_io pio_mark; /* home counters at the start of the step */
    int64_t pread_last, pwrite_last, preads_last; /* NVMe parameter bytes and
                                                     reads of the last step */
    int64_t oread_mark, owrite_mark, oread_last, owrite_last; /* optimizer ones */

    /* Reserved at build (bufpool.h, reserve.c): stage 2/3 gradient buffers,
     * stage 3 gather buffers, fp32 staging of zc_param_load and
     * zc_param_gather_master. */
    zc_bufpool pool_grad, pool_gather, pool_stage;
    /* fp32 views of 16-bit parameters and gradients (f32_view.c): slots of
     * the largest chunk in fp32, f32_view_chunks each. */
    zc_bufpool pool_view, pool_gview;
    int f32_view_chunks;
    /* Status records of zc__eng_agree (agree.c). */
    void *agree_host, *agree_send, *agree_recv;

    /* Optimizer state homes (opt_state.c): [0] device, [1] the offload home
     * (cpu or nvme) when offload_optimizer is on. */
    zc_opt_home *homes[2];
    int nhomes;
    bool opt_staging;          /* host homes stage the gradient and the output */
    int *pass_ks;              /* nchunks: a pass's chunk list, per home */
    /* Asynchronous copies of a staging home with landing buffers (cpu on a
     * device, opt_copy.c); copy_stream is NULL otherwise. ev_copy_in orders
     * the copy stream after a producer stream; ev_land[k] is chunk k's last
     * gradient D2H, land_pending[k] whether its consumer has not run yet;
     * ev_out[s] the last H2D out of output buffer s; ev_copy_tail the copy
     * stream's work so far, for the gradient reset to wait on; gslot_land[s]
     * the chunk whose D2H last read gradient pool slot s (-1: none). */
    void *copy_stream, *ev_copy_in, *ev_copy_tail, *ev_out[2];
    void **ev_land;
    bool *land_pending;
    bool out_pending[2];
    int *gslot_land;           /* ngslots entries, beside ev_gslot */

    /* ZC_DEBUG=1 (grad_debug.c). */
    bool debug;
    void **dbg_shadow;         /* nchunks device buffers handed out as gradients */
    void *dbg_pattern, *dbg_read; /* host: the poison, a slice read back */
    size_t dbg_host_bytes;
    float **dbg_gview;         /* with fp32 views: nchunks fp32 gradient slots, one
                                  per chunk (f32_view.c), instead of the pool */
    bool dbg_found;            /* a late write was seen (dbg_msg says where) */
    char dbg_msg[384];
};

/* A stage policy: what a stage keeps, reduces and gathers - the one way the
 * engine reaches a stage (stage0.c, src/zero1, src/zero2, src/zero3). The
 * step pipeline (grads.c, step.c, params.c) calls these; everything else is
 * shared. */
struct zc_stage_policy {
    int stage;
    const char *name;
    bool full_params;     /* every rank holds the full working parameters */
    bool full_optimizer;  /* every rank holds full master / m / v (stage 0) */
    bool sharded_grads;   /* fp32 gradient shards + transient full buffers */
    /* Allocates the per-chunk buffers of this stage at build. */
    zc_status (*alloc_chunk)(zc_engine *e, zc_chunk *c);
    void (*free_chunk)(zc_engine *e, zc_chunk *c);
    /* The buffer chunk c's gradients are written into in this micro-step,
     * zeroed (zc_grad_buffer hands out slices of it): stages 0/1 the resident
     * full gradient (zc__grads_full_buffer), stages 2/3 a transient buffer
     * from the gradient pool (src/zero2). */
    zc_status (*grad_buffer)(zc_engine *e, zc_chunk *c, void **out);
    /* Reduces chunk c once all its parameters are ready in this micro-step
     * (stage0.c, src/zero1, src/zero2; stage 3 reduces as stage 2). */
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
    /* Drops work done ahead of use that nothing holds (stage 3: prefetched
     * and kept chunks, shard reads in flight), before the optimizer writes
     * the shards and before zc_param_load. Not collective: every rank drops
     * the same chunks. May be NULL. */
    void (*quiesce)(zc_engine *e);
};

extern const zc_stage_policy zc__stage0_policy;
extern const zc_stage_policy zc__stage1_policy;
extern const zc_stage_policy zc__stage2_policy;
extern const zc_stage_policy zc__stage3_policy;

/* ---- eng_base.c (what every engine module needs; below all of them) ----- */

/* Validates a public call's engine (and built state when need_built) and sets
 * the log rank of this thread. `fn` names the call in the message. */
zc_status zc__eng_enter(const zc_engine *e, const char *fn, bool need_built);
/* The checks of an output struct the caller sizes (zc_stats, zc_timers,
 * zc_offload_stats): size is &out->size, or NULL when out is NULL; need is
 * sizeof the struct, named `type`. ZC_ERR_INVALID_ARG naming `fn` when out
 * is NULL or out->size is smaller. */
zc_status zc__eng_out_check(const char *fn, const char *type, const size_t *size, size_t need);
/* Marks a built engine broken with status rc and reason `why` (the first
 * reason is kept). Only zc_engine_destroy is allowed afterwards; every other
 * call returns rc and names the reason. */
void zc__eng_break(zc_engine *e, zc_status rc, const char *why);
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
/* The same on an explicit stream (comm_stream, ctl_stream). */
zc_status zc__eng_all_reduce_on(zc_engine *e, void *buf, size_t n, zc_dtype dt, bool count_it,
                                void *stream);
zc_status zc__eng_reduce_scatter_on(zc_engine *e, const void *send, void *recv, size_t recv_n,
                                    zc_dtype dt, bool count_it, void *stream);
zc_status zc__eng_all_gather_on(zc_engine *e, const void *send, void *recv, size_t send_n,
                                zc_dtype dt, bool count_it, void *stream);
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
zc_status zc__agree_alloc(zc_engine *e);
void zc__agree_free(zc_engine *e);
/* Compares, across ranks, a digest of the registered model and the settings
 * that must match (build_agree.c); collective, at zc_engine_build after the
 * layout. A mismatch is ZC_ERR_CONFIG on every rank, with the same message
 * naming the first difference and the ranks involved. */
zc_status zc__build_agree(zc_engine *e);

/* The working precision: zc_engine_options.param_dtype when set (cfg's
 * fp16/bf16 blocks are made to follow it), else cfg's fp16/bf16 blocks;
 * ZC_ERR_CONFIG when both are enabled, ZC_ERR_INVALID_ARG for an option that
 * is not fp32, fp16 or bf16 (plan.c; zc_engine_create and zc_plan_memory). */
zc_status zc__pick_dtype(zc_config *cfg, const zc_engine_options *o, zc_dtype *out);

/* ---- streams.c ----------------------------------------------------------- */

/* Creates the engine's streams and events (zc_engine_build): a non-blocking
 * stream of its own, a communication stream when overlap_comm, a control
 * stream. The host device's streams are its synchronous sentinel. */
zc_status zc__streams_create(zc_engine *e);
/* The per-slot state of the gradient pool (ev_gslot, gslot_pending,
 * gslot_land), for its n slots: made by reserve.c once the pool is planned
 * (n is known only then), freed by zc__streams_destroy. */
zc_status zc__streams_grad_slots(zc_engine *e, int n);
/* Waits for everything queued on the engine's streams, then destroys them
 * (zc_engine_destroy). Errors are logged: there is no one left to tell. */
void zc__streams_destroy(zc_engine *e);
/* Work enqueued on `stream` (a caller's; NULL = legacy default) from now on
 * runs after the work enqueued on the engine's stream so far. */
zc_status zc__order_caller_after_engine(zc_engine *e, void *stream);
/* Work enqueued on the engine's stream from now on runs after the work
 * enqueued on `stream` (a caller's) so far. */
zc_status zc__order_engine_after_caller(zc_engine *e, void *stream);
/* Before a reduction on comm_stream: it runs after the engine's stream so far
 * (the gradient, its prescale). No-op without overlap_comm. */
zc_status zc__order_comm_after_engine(zc_engine *e);
/* After a reduction on comm_stream that read gradient pool slot `slot` (-1:
 * none): records ev_reduced (and that slot's event). No-op without overlap. */
zc_status zc__reduction_done(zc_engine *e, int slot);
/* Before the engine's stream touches reduced gradients (norm, Adam, reset):
 * it waits for every reduction so far. No-op without overlap_comm. */
zc_status zc__order_engine_after_reductions(zc_engine *e);
/* Before gradient pool slot `slot` is zero-filled on the engine's stream for
 * another chunk: it waits for the reduction that last read the slot. */
zc_status zc__order_engine_after_slot(zc_engine *e, int slot);

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
/* The norm partials' buffers (step.c), allocated at build after the layout;
 * freed before zc__layout_free (sized by nchunks). */
zc_status zc__partials_alloc(zc_engine *e);
void zc__partials_free(zc_engine *e);
/* The registry (registry.c): group 0 at zc_engine_create; at destroy the
 * parameters and groups registered. */
zc_status zc__registry_init(zc_engine *e);
void zc__registry_free(zc_engine *e);
/* Progress lines (progress.c). progress_start records the time at build;
 * progress_step, after every zc_step, logs one DeepSpeed-style INFO line
 * ("core") every steps_per_print steps: step, skipped steps, lr, loss scale,
 * samples/s since the last line, and MemAllocated / MaxMemAllocated by kind. */
void zc__progress_start(zc_engine *e);
void zc__progress_step(zc_engine *e, double lr);
/* Plans and reserves the buffer pools and the stage-3 trace from the layout
 * and the configuration (reserve.c); zc__reserve_free releases them. */
zc_status zc__reserve_build(zc_engine *e);
void zc__reserve_free(zc_engine *e);
/* The units of the gradient pool (estimate.h, zc__grad_pool_plan): *out gets
 * nchunks flags, true where a zc_chunk_boundary starts a unit (counted on the
 * engine's account; the caller frees nchunks bytes), or NULL when no
 * boundary was registered. After the layout. */
zc_status zc__grad_units(zc_engine *e, bool **out);

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
/* c->acc += own (this rank's reduced P-dtype slice, device memory, produced
 * on `stream`): a device kernel on `stream`, or D2H into pinned staging (after
 * `stream`) and a host add for a host-held or swapped shard. */
zc_status zc__opt_grad_accumulate(zc_engine *e, zc_chunk *c, const void *own, void *stream);
/* While Adam runs on chunk k: keeps the home's I/O moving (non-blocking). */
void zc__opt_progress(zc_engine *e, int k);

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
 * of its home tensor (parameter loading and gathering). */
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

/* ---- param_state.c (stage-3 parameter offload, offload/param_home.h) -------- */

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

/* ---- adopt.c ------------------------------------------------------------- */

/* Whether parameter i starts a chunk because of adoption: 1 yes, 0 no (inside
 * an adopted block), -1 adoption does not decide (layout.c). */
int zc__adopt_starts_chunk(const zc_engine *e, int i);
/* After build: the adopted memory's current values become the parameters'
 * initial values (master included), and the chunk padding is zeroed. */
zc_status zc__adopt_load(zc_engine *e);

/* ---- grad_debug.c (ZC_DEBUG) ---------------------------------------------- */

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

/* ---- f32_view.c (fp32 views of 16-bit parameters and gradients) ---------- */

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

/* ---- params.c ------------------------------------------------------------ */

/* zc_param_acquire with its status (block calls need it to fail alike). */
zc_status zc__param_acquire(zc_engine *e, zc_param *p, void *stream, void **out);

/* ---- chunk_mem.c --------------------------------------------------------- */

/* Allocates / frees a chunk's buffers as the engine's policy says. */
zc_status zc__chunk_alloc(zc_engine *e, zc_chunk *c);
void zc__chunk_free(zc_engine *e, zc_chunk *c);

/* ---- grads.c (gradient buffers, the ready protocol, averaging) ---------- */

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

#endif
