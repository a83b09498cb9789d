/* The engine's internal state (one per rank) and the stage-policy table: the
 * seam of src/core for the stage modules (src/zero1, src/zero2, src/zero3)
 * and the checkpoints (src/ckpt), and the one header the files of src/core's
 * rooms include. It includes the headers of the rooms (common/, observe/,
 * state/, loop/, step/, engine/: what each holds is in DEVELOPERS.md), so one
 * include gives a file the whole engine; none of those includes this one
 * back.
 *
 * Memory model. Parameters are packed in registration order into chunks
 * (engine/layout.c); chunk c holds `padded` elements, a multiple of sworld*64, and
 * shard rank q (e->srank: the rank itself without MiCS) owns the shard
 * [q*shard, (q+1)*shard). Every buffer below is device
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
 * home (offload/homes.h: device memory, pinned host memory or NVMe) and are
 * reached only through the passes of state/opt_state.c.
 */
#ifndef ZC_CORE_ENGINE_H
#define ZC_CORE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/log.h"
#include "act/act.h"
#include "comm/comm.h"
#include "config/config.h"
#include "device/device.h"
#include "offload/homes.h"
#include "optim/adam.h"
#include "plan/plan.h"
#include "trace/trace.h"
/* The headers of the engine's rooms, for every file that uses the engine. */
#include "core/common/bufpool.h"
#include "core/common/eng_base.h"
#include "core/common/faults.h"
#include "core/common/groups.h"
#include "core/common/streams.h"
#include "core/observe/progress.h"
#include "core/observe/timeline.h"
#include "core/observe/timers.h"
#include "core/state/opt_state.h"
#include "core/state/param_state.h"
#include "core/state/act_state.h"
#include "core/state/views.h"
#include "core/loop/loop.h"
#include "core/step/loss_scaler.h"
#include "core/step/step.h"
#include "core/engine/build.h"

#define ZC_ENGINE_MAGIC 0x5a43454eu /* "ZCEN" */
#define ZC_PARAM_MAGIC 0x5a435041u  /* "ZCPA" */
/* ZC_PARAM_MAX_NDIM, ZC_CHUNK_ALIGN, ZC_CHUNK_CAP_ELEMS and ZC_GRAD_SETS: the
 * sizing rules the planner defines (plan/plan.h) and the engine applies. */
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
    int64_t gbase;             /* the model's flat index of element 0: the
                                  parameters before it, summed (the same at every
                                  stage and world; the stochastic rounding's
                                  counter) */
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
    bool in_bucket;            /* ready, its reduction waiting in the bucket
                                  (grad_bucket.c) */

    /* Stage 3 */
    int acq;                   /* outstanding acquires over its parameters */
    bool persistent;           /* kept gathered (param_persistence_threshold) */
    bool prefetched;           /* gathered (or its shard being read) ahead of its next
                                  use, not yet acquired */
    bool kept;                 /* released but kept gathered: used again within
                                  stage3_max_reuse_distance */
    bool reading;              /* offloaded shard read started ahead (prefetch): counted
                                  live and prefetched, not gathered yet */
    int64_t gathers_cur, gathers_last; /* gathers in this / the last step */

    /* fp32 views (f32_view.c): slots of pool_view / pool_gview and how many
     * of the chunk's parameters use them. */
    float *view_slot, *gview_slot;
    int view_refs, gview_refs;
    /* Stage 3 with offload_param (param_state.c). */
    bool poff;                 /* the shard lives in e->phome, not c->param */
    /* Where the optimizer state and the (stage 3) parameter shard live, as
     * ZC_PLACE_* kinds (plan/plan.h), for zc_engine_stats. */
    uint8_t opt_kind, param_kind;
    int64_t reads_cur, reads_last; /* shard reads from NVMe in this / the last step */
    void *pout_home, *pout_dev; /* the optimizer's output for the home (between
                                   zc__param_out_begin and _end) */
    /* MiCS at stage 1 (groups.h): this rank's reduced gradient shard in
     * fp32, all-reduced across the replicas; NULL otherwise. */
    float *rgrad;
    /* hpZ (src/zero3/hpz.c): the secondary partition, this rank's padded/H
     * elements of the gathered chunk in the working dtype, and whether it
     * holds the current parameters (set by the step's first gather). */
    void *sec;
    bool sec_valid;
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
                                  beyond them (unless `period` continues them) */
    int64_t period;            /* an evaluation pass's truncated record that repeats
                                  (the same forward, batch after batch): its period,
                                  which continues it past the record; 0: none */
} zc_trace;

/* Stage 3's prefetch and offload figures of the step (or evaluation pass)
 * in progress and of the last one. */
typedef struct zc_offload_step {
    int64_t hits, misses, io_wait_acquires;
    double io_wait_s;
} zc_offload_step;

/* Evaluation passes (pass.c): the open pass, and the training's step figures
 * set aside while an evaluation pass runs, so that its gathers, reads and
 * waits are reported apart (zc_engine_pass_stats) and the step's figures are
 * the training's own. */
typedef struct zc_pass_state {
    zc_pass_kind kind;         /* the open pass (ZC_PASS_TRAIN: none marked) */
    int64_t evals;             /* evaluation passes completed */
    int64_t comm[ZC_COLL__COUNT], gathers, live_peak; /* the training's, set aside */
    zc_offload_step off;
    zc_param_home_io io0;      /* the parameter home's counters at zc_pass_begin */
    zc_pass_stats last;        /* the last completed evaluation pass */
    int64_t tl_t0;             /* the timeline: the open pass's start (0: not recorded) */
} zc_pass_state;

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
    /* The shard group (core/common/groups.h): this rank's shard index and
     * the ranks a chunk is sharded over - rank and world without MiCS. */
    int srank, sworld;
    zc_eng_groups topo;  /* the groups and the node map */
    zc_dtype pdt;              /* working precision */
    /* The optimizer state's precision (config/precision.c): each tensor's
     * dtype, and for bf16 state the rounding back (stochastic: the counter
     * hash of optim/sround.h keyed by this seed) */
    zc_state_dtypes sdt;
    bool state_lp;             /* any of them bf16: Adam over 16-bit state */
    bool sround;
    uint64_t sround_seed;
    size_t pesz;
    int64_t gas;               /* gradient_accumulation_steps */
    zc_dtype acc_dt;           /* what a window's micro-step gradients are summed
                                  in: F32, or the 16-bit pdt with
                                  data_types.grad_accum_dtype = pdt and gas > 1
                                  (the sum rounded to it after every add;
                                  src/core/loop/grads.c) */
    int64_t bucket;            /* chunk size target (elements), set at build */
    int64_t bucket_option;     /* zc_engine_options.bucket_elems (<= 0: from config) */
    int64_t gmark_seq;         /* blocks.c: stamps for zc_chunk.gmark */
    int64_t chunk_cap;         /* the most elements reduce_bucket_size may give a chunk:
                                  ZC_CHUNK_CAP_ELEMS, or ZC_CHUNK_CAP when set */
    bool chunk_cap_forced;     /* ZC_CHUNK_CAP is set: it caps bucket_option too */
    bool check_overflow;       /* fp16, or bf16 with check_grad_overflow */
    const zc_stage_policy *pol;
    zc_mem_account acct;
    struct zc_ck_ring_mem *ck_ring; /* the checkpoint I/O buffers, kept from the
                                       first save or load to the destroy
                                       (ckpt/ring_mem.h); NULL before */
    /* How the destroy releases ck_ring: set by src/ckpt with it, since the
     * checkpoints stand above the engine and it includes nothing of them. */
    void (*ck_ring_release)(struct zc_ck_ring_mem **ring);

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
    int bucket_chunks;         /* chunks waiting in the reduction bucket */
    int64_t bucket_held;       /* their padded elements */
    bool bucket_last_micro;    /* they complete the window's last micro-step */

    /* Optimizer. */
    zc_loss_scaler scaler;
    int64_t steps, skipped, adam_steps;
    /* optimizer.params.deepspeed_arithmetic: DeepSpeed's running beta powers
     * (optim/adam.h), fresh at create and after a checkpoint load, as a
     * DeepSpeed optimizer is when it is built or resumed. */
    zc_adam_ds_state adam_ds;
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
    /* The timeline and the comms logger (src/trace; observe/timeline.c),
     * made at build when configured, else NULL. */
    zc_tl *tl;
    /* What the program said a step computes (zc_engine_set_workload), for
     * the progress lines' throughput; zeros: nothing stated. */
    zc_workload workload;
    double peak_flops;         /* the MFU's peak: stated, or the host's estimate (0: none) */
    char peak_how[96];

    /* Stats: the current window and the last completed step. */
    int64_t comm_cur[ZC_COLL__COUNT], comm_last[ZC_COLL__COUNT];
    int64_t link_cur[ZC_LINK__COUNT], link_last[ZC_LINK__COUNT]; /* bytes sent, by link */
    int64_t gathers_cur, gathers_last;
    int64_t live_elems, live_peak_cur, live_peak_last;
    int64_t invalidations;

    /* Stage 3. */
    int64_t max_live, prefetch_elems, prefetched_elems;
    int64_t reuse_elems;       /* stage3_max_reuse_distance */
    int64_t activations;       /* chunk activations so far (orders prefetch reads) */
    zc_trace traces[2];        /* one per kind of pass (zc_pass_kind): the training's
                                  over a step, an evaluation pass's over the pass */
    zc_trace *trace;           /* the open pass's */
    zc_pass_state pass;        /* evaluation passes (pass.c) */
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
    zc_offload_step off_cur, off_last;
    zc_param_home_io pio_mark; /* home counters at the start of the step */
    int64_t pread_last, pwrite_last, preads_last; /* NVMe parameter bytes and
                                                     reads of the last step */
    int64_t oread_mark, owrite_mark, oread_last, owrite_last; /* optimizer ones */

    /* Reserved at build (bufpool.h, reserve.c): stage 2/3 gradient buffers,
     * stage 3 gather buffers, fp32 staging of zc_param_load and
     * zc_param_gather_master. */
    zc_bufpool pool_grad, pool_gather, pool_stage;
    int grad_set_units; /* units one set of pool_grad holds (zc__grad_pool_plan) */
    /* fp32 views of 16-bit parameters and gradients (f32_view.c): slots of
     * the largest chunk in fp32, f32_view_chunks each. */
    zc_bufpool pool_view, pool_gview;
    int f32_view_chunks;
    /* Status records of zc__eng_agree (agree.c). */
    void *agree_host, *agree_send, *agree_recv;

    /* Optimizer state homes (opt_state.c): [0] device, then the cpu home and
     * the nvme home, each when some chunk lives there (offload_optimizer's
     * one, or both under a placement from max_memory). */
    zc_opt_home *homes[3];
    /* Placement from zero_optimization.max_memory (place_build.c): the
     * agreed budgets by zc_budget_kind, and per chunk the kind (ZC_PLACE_*)
     * of its optimizer state and (stage 3) parameter shard; NULL without
     * budgets (the offload keys' rules hold). */
    bool budgets;
    bool stage_auto;           /* zero_optimization.stage "auto": chosen at build */
    int64_t budget[ZC_BUDGET__COUNT];
    uint8_t *opt_place, *param_place;
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

    /* The activation store (state/act_state.c, src/act): what the build
     * reserves (slots 0: none), the store, and the model-parallel group a
     * partitioned checkpoint is gathered over (bound to dev; NULL: none). */
    zc_act_spec act_spec;
    zc_act_store *act;
    zc_comm *act_mp;

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
    /* Chunk c's reduction once all its parameters are ready in this
     * micro-step (stage0.c, src/zero1, src/zero2; stage 3 reduces as stage
     * 2), in two halves around a communicator group (grad_bucket.c issues a
     * bucket of chunks' collectives as one group): launch does the work
     * before the collective and issues it - its result exists only after
     * the group ends - and sets *launched (false: no collective in this
     * micro-step, stages 0/1 before the window's end); finish, called only
     * for a launched chunk, after the group, does the work on the result. */
    zc_status (*reduce_launch)(zc_engine *e, zc_chunk *c, bool last_micro, bool *launched);
    zc_status (*reduce_finish)(zc_engine *e, zc_chunk *c);
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
     * the shards, before zc_param_load and at both ends of an evaluation
     * pass. Not collective: every rank drops the same chunks. May be NULL. */
    void (*quiesce)(zc_engine *e);
    /* An evaluation pass ends (pass.c; its trace is e->trace): stage 3
     * completes the pass's trace. May be NULL. */
    void (*eval_end)(zc_engine *e);
};

extern const zc_stage_policy zc__stage0_policy;
extern const zc_stage_policy zc__stage1_policy;
extern const zc_stage_policy zc__stage2_policy;
extern const zc_stage_policy zc__stage3_policy;

#endif
