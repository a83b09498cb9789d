/* The timeline and the comms logger (internal): the seam of src/trace.
 *
 * A timeline belongs to one engine (one rank). It records spans - what ran,
 * when, and its figures (bytes, elements, queue depth) - into a bounded
 * buffer of records preallocated when the engine is built, and writes them,
 * at the end of the traced window, as one file in the Chrome trace-event
 * format (trace-event JSON: opens in Perfetto and chrome://tracing). The
 * same records of the collectives feed the comms logger (DeepSpeed's
 * `comms_logger`): a fixed table of count, message size and latency per
 * collective kind, and with `verbose` one line per operation.
 *
 * Who writes. The engine and the rooms under it (src/comm's collectives
 * through the engine, src/offload's NVMe I/O and copies, src/optim's Adam
 * pieces, src/zero3's acquires) call the hooks below, thin and cheap when
 * nothing records: each reads this thread's recording timeline, zc__tl_cur,
 * set by the engine at every public entry (NULL unless the engine's window
 * is open or its comms logger is on) and returns on NULL - one load and a
 * branch. The host thread pool's workers record into the timeline of the
 * job they run (zc__tl_worker_begin).
 *
 * Recording never allocates: a record is a fixed-size struct copied into
 * the next free slot of the buffer (an atomic index, so pool workers write
 * beside the rank's thread); past the capacity a record is counted as
 * dropped and the file says how many. The capacity is checked at build
 * against the most records the window can need (the engine's bound), and a
 * smaller configured one is refused there.
 *
 * Clock: CLOCK_MONOTONIC in nanoseconds, the same on every rank of a
 * machine, so per-rank files line up when opened together.
 *
 * Layer 2 (beside the machine rooms): includes only src/base and the public
 * header; the engine includes it. */
#ifndef ZC_TRACE_TRACE_H
#define ZC_TRACE_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "base/alloc.h"
#include "zeroc/zeroc.h"

typedef struct zc_tl zc_tl;

/* What a record is: its Chrome category ("cat") and which args it carries. */
typedef enum zc_tl_kind {
    ZC_TLK_STEP = 0, /* an optimizer step's window: a step, b skipped, i1 micro-steps */
    ZC_TLK_PHASE,    /* a top-level span of a step: forward, backward, optimizer step */
    ZC_TLK_SPAN,     /* engine work (reduce, publish, norm, Adam pass, prefetch): chunk, a n */
    ZC_TLK_ACQUIRE,  /* a stage-3 activation: chunk, i0 outcome (zc_tl_acq), a bytes,
                        b wait ns */
    ZC_TLK_COLL,     /* a collective: i0 zc_coll_kind, i1 dtype, a bytes (nccl-tests' S),
                        b elements, text site, flags ZC_TLF_* */
    ZC_TLK_GROUP,    /* a communicator group's launch: i0 collectives, a bytes */
    ZC_TLK_AGREE,    /* an agreement of rank-local outcomes: i0 status, text what */
    ZC_TLK_NVME,     /* an NVMe request (asynchronous: submit to completion):
                        i0 write?, i1 requests in flight at submit, a bytes, b queue depth */
    ZC_TLK_NVME_WAIT,/* the host waiting for NVMe: a bytes of the waited request */
    ZC_TLK_COPY,     /* a host<->device copy: i0 zc_copy direction (0 h2d, 1 d2h), a bytes */
    ZC_TLK_ADAM,     /* an Adam piece: a elements, i0 threads, text variant */
    ZC_TLK_ADAM_PART,/* one thread's part of a piece: a elements, i0 part, i1 parts */
    ZC_TLK_LOOP,     /* a loop call between steps, or an evaluation pass */
    ZC_TLK__COUNT
} zc_tl_kind;

/* How a stage-3 activation found its chunk. */
typedef enum zc_tl_acq {
    ZC_TL_ACQ_HIT = 0,    /* gathered already (persistent, kept, prefetched) */
    ZC_TL_ACQ_PREFETCHED, /* its shard read was started ahead and had finished */
    ZC_TL_ACQ_WAITED,     /* its shard read was started ahead; the acquire waited for it */
    ZC_TL_ACQ_DEMAND,     /* gathered on demand (a miss) */
} zc_tl_acq;

#define ZC_TLF_BATCHED 0x1u /* issued inside a communicator group: launched by its end */
#define ZC_TLF_COUNTED 0x2u /* model payload: counted in zc_stats.comm_bytes_last_step */

#define ZC_TL_TEXT 44

/* One record: a span [t0, t1] on a track (104 bytes). */
typedef struct zc_tl_rec {
    int64_t t0, t1;        /* ns, CLOCK_MONOTONIC */
    const char *name;      /* static text */
    uint8_t kind;          /* zc_tl_kind */
    uint8_t flags;
    uint16_t track;        /* 0 the rank's thread, ZC_TL_TRACK_WORKER + w pool worker w */
    int32_t chunk;         /* -1: none */
    int32_t i0, i1;
    int64_t a, b;
    uint32_t seq;          /* order of recording (set by zc__tl_push) */
    char text[ZC_TL_TEXT]; /* a short copied label (site, agreement, variant) */
} zc_tl_rec;

#define ZC_TL_TRACK_MAIN 0
#define ZC_TL_TRACK_NVME 1      /* NVMe requests: laid out in lanes when written */
#define ZC_TL_TRACK_WORKER 16   /* + pool worker index */
#define ZC_TL_NVME_LANES 32

/* ---- the recording thread's timeline ------------------------------------ */

/* This thread's recording timeline, or NULL (nothing records). Set by the
 * engine at each public entry (zc__tl_enter) and by pool workers for the
 * job they run. */
extern _Thread_local zc_tl *zc__tl_cur;

static inline int64_t zc__tl_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The start of a hook's span: now when this thread records, else 0 (and
 * the matching end does nothing). */
static inline int64_t zc__tl_begin(void) { return zc__tl_cur ? zc__tl_clock() : 0; }

/* Whether this thread's timeline keeps spans now (its window is open), as
 * opposed to feeding only the comms logger. */
bool zc__tl_keeping(const zc_tl *t);

/* Appends a finished span to t's buffer (t may be NULL: nothing). Counts it
 * as dropped when the buffer is full, or when it is a span of the rank's
 * thread recorded outside any step, evaluation pass or loop call. */
void zc__tl_push(zc_tl *t, const zc_tl_rec *r);

/* Hooks: each records one span from t0 (a zc__tl_begin) to now into this
 * thread's timeline; nothing when t0 is 0. */
void zc__tl_span(int64_t t0, zc_tl_kind kind, const char *name, int chunk, int64_t a);
void zc__tl_acquire(int64_t t0, int chunk, zc_tl_acq how, int64_t bytes, int64_t wait_ns);
void zc__tl_copy(int64_t t0, bool to_host, int64_t bytes, int chunk);
void zc__tl_nvme_wait(int64_t t0, int64_t bytes);
/* An NVMe request submitted at t0 finished now: i/o direction, bytes,
 * requests in flight when it was submitted and the queue depth. */
void zc__tl_nvme(int64_t t0, bool write, int64_t bytes, int inflight, int qd);
/* An Adam piece (the rank's thread) and one thread's part of it. */
void zc__tl_adam(int64_t t0, int64_t n, int threads, const char *variant);
void zc__tl_adam_part(zc_tl *t, int64_t t0, int64_t n, int part, int parts, int worker);

/* A collective of kind `kind` (zc_coll_kind) over `ranks` ranks (the
 * communicator's: the world's, or a sub-group's under hybrid sharding) that
 * ran from t0 to now: `bytes` is nccl-tests' size S (all-reduce and
 * broadcast: the buffer; reduce-scatter and all-gather: the full buffer over
 * those ranks), `elems` the elements of the call, `site` who issued it
 * (static text), flags ZC_TLF_*. Feeds the span and the comms logger, whose
 * bus bandwidth uses `ranks`. */
void zc__tl_coll(int64_t t0, int kind, zc_dtype dt, int64_t bytes, int64_t elems,
                 const char *site, unsigned flags, int ranks);
/* A communicator group over `ranks` ranks: opened (the collectives after it
 * are batched until its end) and launched from t0 to now. */
void zc__tl_group_open(int ranks);
void zc__tl_group_end(int64_t t0);
/* Whether the collectives issued now are batched in a group. */
bool zc__tl_in_group(void);
/* An agreement (`what`, copied) that ended with status rc. */
void zc__tl_agree(int64_t t0, const char *what, zc_status rc);

/* Pool workers: run a part of a job of timeline t (may be NULL) on worker
 * w; the hooks of the part record into t. */
void zc__tl_worker_begin(zc_tl *t);
void zc__tl_worker_end(void);

/* ---- the engine's side -------------------------------------------------- */

/* A window of optimizer steps "A-B" (or "A"), 1-based and inclusive. */
typedef struct zc_tl_steps {
    int64_t first, last;
} zc_tl_steps;

/* DeepSpeed's comms_logger settings (config keys comms_logger.*). prof_ops:
 * the collective kinds profiled when prof_all is false, one bit per
 * zc_coll_kind. */
typedef struct zc_tl_comms_opts {
    bool enabled, verbose, prof_all, debug;
    unsigned prof_ops;
} zc_tl_comms_opts;

typedef struct zc_tl_opts {
    int rank, world;
    /* The timeline: path NULL for none. The file written is the path with
     * "{rank}" replaced by the rank, or, without it and with world > 1,
     * with ".rank<R>" before its extension. */
    const char *path;
    zc_tl_steps steps;
    int64_t capacity;      /* records */
    zc_tl_comms_opts comms;
    /* What the file's metadata says of the run (otherData). */
    int stage;
    const char *dtype, *device;
} zc_tl_opts;

/* The file name rank `rank` of `world` writes for `path`, in buf: ZC_OK, or
 * ZC_ERR_CONFIG when it does not fit (naming `what`). */
zc_status zc__tl_rank_path(const char *path, int rank, int world, const char *what, char *buf,
                           size_t cap);

/* Makes a timeline (counted on acct): its records (o->capacity of them) and
 * the comms logger's table, and, with a path, creates its file (O_EXCL:
 * never over an existing one) so that a path that cannot be written is
 * refused at build. *out NULL and an error naming `key` otherwise. */
zc_status zc__tl_create(const zc_tl_opts *o, zc_mem_account *acct, const char *key,
                        zc_tl **out);
/* Removes the file if nothing was written into it, frees everything. NULL:
 * nothing. */
void zc__tl_destroy(zc_tl *t, zc_mem_account *acct);

/* Sets this thread's recording timeline for an engine's call: t when it
 * keeps spans or logs collectives, else NULL. */
void zc__tl_enter(zc_tl *t);
/* Forgets t as this thread's timeline (its engine is being destroyed). */
void zc__tl_leave(zc_tl *t);

/* A step window opens at t0 / closes at t1 as optimizer step `step` (the
 * caller's clock reads, so that the phases tile it exactly). */
void zc__tl_step_open(zc_tl *t, int64_t t0);
void zc__tl_step_close(zc_tl *t, int64_t t1, int64_t step, int micro_steps, bool skipped);
/* A top-level span of the open window ("forward", "backward", "optimizer
 * step") from t0 to t1. */
void zc__tl_phase(zc_tl *t, const char *name, int64_t t0, int64_t t1);
/* A container outside a step (an evaluation pass, a loop call): opened,
 * then closed as a span named `name` from t0 to now. */
void zc__tl_loop_open(zc_tl *t);
void zc__tl_loop_close(zc_tl *t, int64_t t0, const char *name);

/* Window: whether optimizer step `step` (1-based) is traced, and the
 * configured window. */
bool zc__tl_traces_step(const zc_tl *t, int64_t step);
/* Starts keeping spans (the next step is the window's first). */
void zc__tl_start(zc_tl *t);
/* Writes what was kept (sorted by track and time, NVMe requests laid out
 * in lanes) as the timeline's file and stops keeping spans; the file is
 * written once. ZC_OK, or ZC_ERR_IO naming the file. No allocation: the
 * records are sorted in place and formatted through a buffer made at
 * create. */
zc_status zc__tl_write(zc_tl *t);
/* Ends the window after its last step: stops keeping spans; the file is
 * written by the next zc__tl_flush_due, so that the write lands outside the
 * traced steps (in the engine's next call). */
void zc__tl_finish(zc_tl *t);
/* Writes the file of a finished window (zc__tl_write), once; a failure is
 * an ERROR line naming the file (the training goes on). NULL: nothing. */
void zc__tl_flush_due(zc_tl *t);
/* Whether the timeline has a file still to write / the file's name. */
bool zc__tl_pending(const zc_tl *t);
const char *zc__tl_file(const zc_tl *t);
/* Records kept and dropped so far. */
int64_t zc__tl_kept(const zc_tl *t);
int64_t zc__tl_dropped(const zc_tl *t);

/* ---- the comms logger ---------------------------------------------------- */

/* Whether t logs collectives of kind `kind` (comms_logger enabled, and
 * prof_all or the kind in prof_ops): the engine then synchronizes the
 * device around such a collective on an asynchronous device, as DeepSpeed
 * does, so its latency is the collective's own. */
bool zc__tl_comms_profiles(const zc_tl *t, int kind);
/* Fills the public figures (zc_comms_stats; out->size checked by the
 * caller). */
void zc__tl_comms_stats(const zc_tl *t, zc_comms_stats *out);
/* Writes DeepSpeed's summary table into buf (cap bytes, NUL-terminated,
 * cut at a line when short); returns the length the whole table needs. */
size_t zc__tl_comms_table(const zc_tl *t, char *buf, size_t cap);
/* nccl-tests' bus bandwidth factor of kind `kind` (zc_coll_kind) over n
 * ranks: all-reduce 2(n-1)/n, reduce-scatter and all-gather (n-1)/n,
 * broadcast 1. */
double zc__tl_busbw_factor(int kind, int n);

#endif
