/* The homes: where each chunk's optimizer state and, at stage 3, its
 * parameter shard live - device memory, the pinned host pool, or swap files
 * on NVMe - and how the engine reaches them. This is the seam of the offload
 * engine: src/core includes this header (opt_state.c and param_state.c are
 * the only engine files that ask a home for state) and nothing of the homes'
 * own (home_alloc.h, home_pool.h, home_store.h, swap_dirs.h); the homes
 * include no header of src/core. Three parts:
 *
 *   1. what every home is told about the engine (zc_home_env);
 *   2. optimizer-state homes (opt_home_device.c, opt_home_cpu.c,
 *      opt_home_nvme.c);
 *   3. stage-3 parameter homes (param_home_cpu.c, param_home_nvme.c);
 *   4. activation checkpoint homes (act_home_cpu.c, act_home_nvme.c), which
 *      the activation store (src/act) drives;
 *
 * and the nvme_path helpers both NVMe homes and the engine's planner use
 * (swap_dirs.c). */
#ifndef ZC_OFFLOAD_HOMES_H
#define ZC_OFFLOAD_HOMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/alloc.h"
#include "base/error.h"
#include "device/device.h"

/* ---- 1. what every home is told about the engine ------------------------- */

/* The homes of optimizer state (part 2) and of stage-3 parameter shards
 * (part 3) are created by the engine from two different config blocks
 * (offload_optimizer, offload_param), but what they need to know about the
 * engine itself is the same: where to count memory, which rank and chunks,
 * the working precision, the device to place pinned memory near, the aio
 * block their NVMe stores use and the fault-injection hook. The engine fills
 * it once (zc__eng_home_env); each home's params embed it as `env`. */

typedef struct zc_home_env {
    zc_mem_account *acct;    /* the engine's account (bytes by kind) */
    int rank;
    int nchunks;
    size_t param_bytes;      /* bytes per working-precision element */
    int device_index;        /* CUDA device for NUMA placement, -1 = none */
    int64_t aio_block_size, aio_queue_depth, aio_intra_op; /* the aio block (nvme) */
    /* Fault injection (the engine's ZC_FAULTS io items): asked before every
     * read and write an NVMe home submits (not before retries); true makes
     * that one fail with ZC_ERR_IO, *nth its number. NULL: none. */
    bool (*io_fault)(void *arg, int64_t *nth);
    void *io_fault_arg;
} zc_home_env;

/* ---- 2. optimizer-state homes -------------------------------------------- */

/* Each chunk's fp32 master and Adam m, v (this rank's shard, or the whole
 * chunk at stage 0) live in one "home":
 *
 *   device  device memory (the engine's zc_device), updated there;
 *   cpu     the pinned host pool (src/offload), updated by the host Adam;
 *   nvme    swap files under nvme_path (src/offload's io_uring store),
 *           streamed through a ring of pinned swap buffers.
 *
 * The engine never branches on the home: chunk allocation registers each
 * chunk with its home (add_chunk, then prepare once), and every access to the
 * state is a pass over a list of chunks:
 *
 *   pass_begin(ks) ; for k in ks: acquire(k) -> view ; ... ; release(k, dirty)
 *   pass_end()
 *
 * acquire returns the chunk's state in memory the home's Adam device can
 * address (the nvme home waits for the read it started earlier); release hands
 * it back (the nvme home writes a dirty chunk back, at once or pipelined);
 * pass_end waits for everything the pass started. A home that streams may read
 * ahead along ks, so a pass must acquire the chunks in exactly that order,
 * each once, and release each before acquiring the chunk buffer_count/4
 * places later (the step releases each chunk before acquiring the next).
 *
 * Errors: any call may fail with the store's ZC_ERR_IO (chunk, file, offset in
 * the message); after a failure the caller still calls pass_end, which drains
 * the I/O in flight (buffers must not be written by the kernel after the pass)
 * and returns the first error of the pass. Homes are used by one thread.
 *
 * Stage-3 parameter shards have homes of their own (part 3): with
 * offload_param the pass's output (pout) is the parameter home's memory. */

typedef struct zc_opt_home zc_opt_home;

/* One chunk's state, valid from acquire until release. */
typedef struct zc_opt_view {
    void *master, *m, *v;    /* n values each, in the dtypes the home was told
                                (zc_opt_home_params.state_bytes: fp32 or bf16) */
    float *grad;             /* the fp32 gradient shard when the home keeps it
                                in the swap files (read with the state), or NULL */
    void *grad_stage;        /* host staging of >= n * 4 bytes for the gradient
                                shard, or NULL (Adam reads it where it is) */
    void *pout_stage;        /* host staging of >= n * param_bytes for the new
                                working-precision shard, or NULL (written in
                                place). The cpu home alternates two buffers by
                                the parity of k, so the H2D copy of chunk k's
                                output can run while Adam writes chunk k+1's;
                                the engine waits for a buffer's last copy
                                before handing it to Adam again (opt_copy.c) */
} zc_opt_view;

typedef struct zc_opt_home_ops {
    const char *name;   /* "device", "cpu", "nvme" */
    bool host;          /* state is host memory: Adam runs on the host */
    bool resident;      /* acquire hands out the chunk's own tensors, which
                           stay at their address and change only by the
                           engine's calls until destroy (not a swap buffer
                           the home reuses): a checkpoint save may leave
                           them to the disk without a copy (ckpt/save.c) */
    /* Homes chunk k (0 <= k < nchunks, each once, any order) with n
     * elements per tensor (of state_bytes[t] bytes each). */
    zc_status (*add_chunk)(zc_opt_home *h, int k, size_t n);
    /* After every add_chunk: checks the machine (pre-flight), allocates and
     * zero-fills. Nothing is allocated before it. */
    zc_status (*prepare)(zc_opt_home *h);
    zc_status (*pass_begin)(zc_opt_home *h, const int *ks, int nk);
    zc_status (*acquire)(zc_opt_home *h, int k, zc_opt_view *out);
    zc_status (*release)(zc_opt_home *h, int k, bool dirty);
    zc_status (*pass_end)(zc_opt_home *h);
    /* The chunk's fp32 gradient shard when this home keeps it (host memory,
     * n floats, zeroed at prepare, valid until destroy), or NULL: it stays in
     * device memory. Only asked when params.hold_grads. May be NULL. */
    float *(*grad_shard)(zc_opt_home *h, int k);
    /* params.swap_grads: the chunk's fp32 gradient shard lives in the swap
     * files. grad_add adds src (n values of dt, host-addressable) to it: on
     * the window's first micro-step onto zeros, else onto what is read back,
     * the sum rounded to acc_dt (F32: none; a 16-bit dtype: the running sum
     * of data_types.grad_accum_dtype, device.h accumulate_rounded) before it
     * is written;
     * on the last one it also returns the shard's blocked fp64 sum of squares
     * (the norm's partial) in *sumsq. I/O errors do not fail the call (the
     * ranks must keep issuing the same collectives): they are kept and fail
     * the next pass. grad_in_stage is a pinned buffer of >= n * 4 bytes for
     * staging src from a device. May be NULL. */
    /* With staging: chunk k's own pinned landing buffer of n * param_bytes
     * for its reduced working-precision gradient slice, copied D2H on the
     * engine's copy stream as the chunk's reduction finishes (opt_copy.c);
     * one per chunk, so no copy waits for another chunk's consumer. Valid
     * from prepare until destroy; it is also the view's grad_stage. NULL
     * without staging, or when the home has none (nvme: bounded memory;
     * it stages synchronously through its swap slots). May be NULL. */
    void *(*grad_land)(zc_opt_home *h, int k);
    zc_status (*grad_add)(zc_opt_home *h, int k, const void *src, zc_dtype dt, zc_dtype acc_dt,
                          bool first, bool last, double *sumsq);
    void *(*grad_in_stage)(zc_opt_home *h);
    /* Called often while Adam runs on an acquired chunk: moves the I/O in
     * flight along without blocking (the store only reaps completions and
     * refills its queue when called, so without this the drive idles once
     * queue_depth requests are done). Returns whether I/O is still in flight
     * (the next piece of Adam shares the machine with it). May be NULL. */
    bool (*progress)(zc_opt_home *h);
    /* A pass that overwrites the master of every chunk it acquires and
     * leaves m and v as they are (an import of weights): acquire reads
     * nothing and hands out the master alone (m and v NULL, its contents
     * undefined: the caller writes all n values), release(dirty) writes the
     * master alone. Otherwise as pass_begin. May be NULL: the home's state is
     * resident and a plain pass costs no I/O. */
    zc_status (*pass_begin_master)(zc_opt_home *h, const int *ks, int nk);
    /* Frees memory, removes swap files. NULL-safe through zc__opt_home_destroy. */
    void (*destroy)(zc_opt_home *h);
} zc_opt_home_ops;

struct zc_opt_home {
    const zc_opt_home_ops *ops;
};

/* What a home needs to know, filled by the engine from its configuration. */
typedef struct zc_opt_home_params {
    zc_home_env env;         /* the engine: account, rank, chunks, aio, faults */
    zc_device *dev;          /* the engine's device (device home) */
    bool staging;            /* host homes: stage gradient and output */
    bool hold_grads;         /* stages 2/3: a host home may keep the fp32
                                gradient shard too (cpu does) */
    bool swap_grads;         /* nvme, stages 2/3 with accumulation: the fp32
                                gradient shard, which outlives a micro-step,
                                goes to the swap files too */
    bool pin_memory;         /* offload_optimizer.pin_memory */
    size_t state_bytes[3];   /* bytes per element of master, m, v: 4 (fp32) or
                                2 (bf16), the engine's state precision */
    /* nvme */
    const char *const *dirs; /* nvme_path directories (striped) */
    int ndirs;
    int64_t buffer_count;    /* offload_optimizer.buffer_count */
    bool pipeline_read, pipeline_write, fast_init;
    bool aio_single_submit, aio_overlap_events;
} zc_opt_home_params;

zc_status zc__opt_home_device_create(const zc_opt_home_params *p, zc_opt_home **out);
zc_status zc__opt_home_cpu_create(const zc_opt_home_params *p, zc_opt_home **out);
zc_status zc__opt_home_nvme_create(const zc_opt_home_params *p, zc_opt_home **out);

/* The create functions' check of state_bytes (each 4 or 2):
 * ZC_ERR_INVALID_ARG naming `who` otherwise. */
static inline zc_status zc__opt_home_params_check(const zc_opt_home_params *p, const char *who)
{
    for (int i = 0; i < 3; i++)
        if (p->state_bytes[i] != 4 && p->state_bytes[i] != 2)
            return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: state_bytes[%d] is %zu (4 for fp32 state, "
                          "2 for bf16)", who, i, p->state_bytes[i]);
    return ZC_OK;
}

static inline void zc__opt_home_destroy(zc_opt_home *h)
{
    if (h)
        h->ops->destroy(h);
}

/* nvme home, for tests and the bench: the swap buffer geometry and the
 * store's faults. */
typedef struct zc_opt_nvme_info {
    size_t buffer_bytes;     /* one swap buffer: the largest tensor, aligned */
    int64_t buffer_count;    /* swap buffers allocated */
    int slots;               /* chunks in flight (buffer_count / 4) */
    uint64_t file_bytes;     /* swap space of this rank, all directories */
    int64_t file0_size;      /* st_size of the swap file under nvme_path[0] (fstat
                                on its descriptor: it has no name), -1 unknown */
    char dir[512];           /* this engine's swap directory under nvme_path[0]
                                (removed once the unnamed files are open) */
    /* time spent in the last pass, seconds: waiting for reads, waiting for
     * writes (the bench's breakdown) */
    double read_wait_s, write_wait_s;
    int64_t reads, writes;   /* tickets in the last pass */
    int64_t requests, write_requests; /* the store's request numbers so far (the
                                         positions zc_nvme_faults counts) */
    int64_t read_bytes, write_bytes;  /* bytes read and written since prepare (state
                                         and swapped gradient shards) */
} zc_opt_nvme_info;

void zc__opt_home_nvme_info(const zc_opt_home *h, zc_opt_nvme_info *out);
struct zc_nvme_faults;
void zc__opt_home_nvme_set_faults(zc_opt_home *h, const struct zc_nvme_faults *f);

/* ---- 3. stage-3 parameter homes ------------------------------------------ */

/* At stage 3 each rank owns one shard of every chunk's working-precision
 * parameters (c->shard elements of the parameter dtype). Without
 * offload_param it is device memory (c->param, allocated by chunk_mem.c) and
 * no home object is involved. With zero_optimization.offload_param it lives
 * in a home:
 *
 *   cpu     the pinned host pool (src/offload);
 *   nvme    a swap file under nvme_path (src/offload's io_uring store),
 *           read into a ring of pinned buffers when the chunk is gathered;
 *           the first chunks up to max_in_cpu elements stay in pinned host
 *           memory instead ("cached": never read from or written to NVMe).
 *
 * The engine reaches a home only through param_state.c, the seam's engine
 * side; the stage-3 gather (src/zero3) asks it for "this rank's shard where
 * the all-gather can send it from" and never learns where it was.
 *
 * Reading. read_start begins bringing chunk k's shard into host memory
 * without waiting (nvme: an io_uring read into a free buffer). read_wait
 * returns it (starting the read first when nobody did), read_end gives its
 * buffer back. Between read_wait and read_end the caller copies the shard
 * out (H2D into the gather buffer). A home without I/O (cpu, cached chunks)
 * returns its memory at once and its read_start is a no-op that "starts".
 * An I/O error of a read started ahead is kept with the read and returned by
 * its read_wait (or dropped by read_end when the read is abandoned), so a
 * prefetch never fails the call that issued it.
 *
 * Writing. write_begin returns host memory for chunk k's new shard (cpu and
 * cached chunks: the shard itself, so the optimizer writes in place; nvme:
 * a free buffer, or the buffer of chunk k's completed read, which then ends
 * with the write: zc_param_load changes part of a shard read back),
 * write_end sends it home (nvme: submits the write), flush waits for every
 * write and returns the first error since the last flush.
 *
 * Buffers. The nvme home has buffer_count buffers, each one shard of the
 * largest chunk (aligned). read_start takes one only while more than one is
 * free: the last one is kept for a read on demand, which is released before
 * the next one starts, so a read on demand never waits for a buffer and the
 * buffer decisions depend only on the sequence of calls - the same on every
 * rank when every rank acquires the same parameters in the same order.
 * Homes are used by one thread. */

typedef struct zc_param_home zc_param_home;

/* Counters since the home was prepared (the engine takes differences per
 * step). */
typedef struct zc_param_home_io {
    int64_t read_bytes, write_bytes; /* NVMe */
    int64_t reads, writes;           /* shard transfers */
    double wait_s;                   /* time read_wait spent waiting for reads */
    int64_t waits;                   /* read_wait calls that had to wait */
    /* The store's request counters (nvme; what ZC_NVME_FAULTS positions
     * count), for the fault tests. */
    int64_t requests, write_requests;
} zc_param_home_io;

typedef struct zc_param_home_ops {
    const char *name;  /* "cpu", "nvme" */
    /* Homes chunk k (0 <= k < nchunks, each once) with a shard of n
     * elements. */
    zc_status (*add_chunk)(zc_param_home *h, int k, size_t n);
    /* After every add_chunk: allocation; shards start as zeros. Nothing is
     * allocated before it. Host memory and disk space are not checked here:
     * the engine's pre-flight (core/engine/preflight.c) checks them with the whole
     * memory plan (plan/estimate.c, which must follow every size a home
     * allocates). */
    zc_status (*prepare)(zc_param_home *h);
    /* Whether reading chunk k can fail on one rank alone (NVMe I/O): the
     * caller agrees on the outcome before the next collective. */
    bool (*rank_local_io)(const zc_param_home *h, int k);
    /* Starts the read of chunk k if it is not started; *started says
     * whether it now is (false: no buffer to spare, nothing changed). */
    void (*read_start)(zc_param_home *h, int k, bool *started);
    bool (*read_started)(const zc_param_home *h, int k);
    zc_status (*read_wait)(zc_param_home *h, int k, const void **shard);
    void (*read_end)(zc_param_home *h, int k);
    zc_status (*write_begin)(zc_param_home *h, int k, void **dst);
    zc_status (*write_end)(zc_param_home *h, int k);
    zc_status (*flush)(zc_param_home *h);
    void (*io)(const zc_param_home *h, zc_param_home_io *out);
    /* Frees memory, removes swap files. */
    void (*destroy)(zc_param_home *h);
} zc_param_home_ops;

struct zc_param_home {
    const zc_param_home_ops *ops;
};

/* What a home needs to know, filled by the engine from offload_param. */
typedef struct zc_param_home_params {
    zc_home_env env;         /* the engine: account, rank, chunks, aio, faults */
    bool pin_memory;         /* offload_param.pin_memory */
    /* nvme */
    const char *const *dirs;
    int ndirs;
    int64_t buffer_count, buffer_size, max_in_cpu;
    /* Per chunk (nchunks entries, read at prepare only): nonzero keeps the
     * shard in pinned memory ("cached"), zero puts it in the swap file - a
     * placement chosen from memory budgets. NULL: max_in_cpu decides. */
    const uint8_t *cache;
} zc_param_home_params;

zc_status zc__param_home_cpu_create(const zc_param_home_params *p, zc_param_home **out);
zc_status zc__param_home_nvme_create(const zc_param_home_params *p, zc_param_home **out);

/* Tests: sets the store faults of an nvme home (ZC_NVME_FAULTS syntax,
 * positions counted from the store's open); no-op for another home. */
struct zc_nvme_faults;
void zc__param_home_nvme_set_faults(zc_param_home *h, const struct zc_nvme_faults *f);

static inline void zc__param_home_destroy(zc_param_home *h)
{
    if (h)
        h->ops->destroy(h);
}

/* ---- 4. activation checkpoint homes -------------------------------------- */

/* The activation store (src/act/act.h) keeps the checkpoints a training loop
 * hands it in slots: slot s holds the s-th checkpoint held at once in a
 * micro-step (saved in forward, restored last-in first-out in backward).
 * Without activation_checkpointing.cpu_checkpointing the slots are device
 * memory of the store's own; with it they live in one of these homes, which
 * hold host memory only (the store copies between it and the device):
 *
 *   cpu     the pinned host pool: one slot of slot_bytes per checkpoint;
 *   nvme    a swap file under nvme_path (zeroc's nvme_checkpointing), one
 *           extent per slot, streamed through buffer_count pinned buffers.
 *
 * Writing. write_begin(s) returns host memory of slot_bytes for slot s's new
 * checkpoint (cpu: the slot itself; nvme: a buffer - a free one, else the
 * one filled longest ago, whose write is waited for first), the caller
 * fills `bytes`, write_end(s, bytes) sends it home (nvme: submits the write
 * of the bytes rounded up to ZC_SWAP_ALIGN). The buffer keeps the data until
 * it is taken again, so the slots written last - the first ones restored -
 * are read back from their buffers without I/O.
 *
 * Reading. read_start(s, bytes) begins bringing slot s back without waiting
 * (nvme: a read into a free buffer, taken only while more than one is free:
 * the last is kept for a read on demand, as the parameter home does, so the
 * decisions follow the call sequence alone); read_wait returns its host
 * memory (reading on demand when nobody started it), read_end gives the
 * buffer back. drop() forgets every slot (the micro-step ended: what they
 * hold is stale), abandoning reads in flight; writes in flight go on.
 *
 * Errors. A one-off EIO is submitted again (twice); any other I/O error is
 * ZC_ERR_IO naming the slot, the file and the offset. A write's error is
 * kept and returned by the next read_wait of any slot and by settle (which
 * waits for every write and clears it), so the call that submitted it never
 * fails on one rank alone; the store agrees on read_wait's outcome across
 * ranks (src/act). Homes are used by one thread. */

typedef struct zc_act_home zc_act_home;

/* Counters since prepare. */
typedef struct zc_act_home_io {
    int64_t read_bytes, write_bytes; /* NVMe, whole requests */
    int64_t reads, writes;           /* slot transfers from / to the file */
    int64_t buffer_hits;             /* read_wait served from a buffer still holding
                                        the slot (no read) */
    int64_t waits;                   /* read_wait calls that waited for a read */
    double wait_s;                   /* ... and the time they waited */
    int64_t write_waits;             /* write_begin calls that waited for a write */
    double write_wait_s;
    int64_t requests, write_requests; /* the store's (ZC_NVME_FAULTS positions) */
} zc_act_home_io;

typedef struct zc_act_home_ops {
    const char *name; /* "cpu", "nvme" */
    /* Allocates the slots (cpu) or the buffers and the swap file (nvme).
     * Host memory and disk space were checked by the engine's pre-flight with
     * the whole plan (src/plan counts what these files allocate, through
     * zc__act_layout in src/act/act.h). */
    zc_status (*prepare)(zc_act_home *h);
    /* Whether a read or write can fail on one rank alone (NVMe I/O). */
    bool (*rank_local_io)(const zc_act_home *h);
    zc_status (*write_begin)(zc_act_home *h, int slot, void **dst);
    zc_status (*write_end)(zc_act_home *h, int slot, size_t bytes);
    void (*read_start)(zc_act_home *h, int slot, size_t bytes, bool *started);
    zc_status (*read_wait)(zc_act_home *h, int slot, size_t bytes, const void **src);
    void (*read_end)(zc_act_home *h, int slot);
    void (*drop)(zc_act_home *h);
    zc_status (*settle)(zc_act_home *h);
    void (*io)(const zc_act_home *h, zc_act_home_io *out);
    /* Frees memory, closes the swap file. */
    void (*destroy)(zc_act_home *h);
} zc_act_home_ops;

struct zc_act_home {
    const zc_act_home_ops *ops;
};

/* What a home needs, filled by the store from activation_checkpointing. */
typedef struct zc_act_home_params {
    zc_home_env env;         /* the engine; env.nchunks is the number of slots */
    size_t slot_bytes;       /* the largest checkpoint (this rank's part of it) */
    bool pin_memory;
    /* nvme */
    const char *const *dirs; /* nvme_path directories (striped) */
    int ndirs;
    int64_t buffer_count;    /* activation_checkpointing.buffer_count, >= 2 */
} zc_act_home_params;

zc_status zc__act_home_cpu_create(const zc_act_home_params *p, zc_act_home **out);
zc_status zc__act_home_nvme_create(const zc_act_home_params *p, zc_act_home **out);

/* Tests: the store faults of an nvme home (ZC_NVME_FAULTS syntax, counted
 * from its open); no-op for another home. */
void zc__act_home_nvme_set_faults(zc_act_home *h, const struct zc_nvme_faults *f);

static inline void zc__act_home_destroy(zc_act_home *h)
{
    if (h)
        h->ops->destroy(h);
}

/* ---- nvme_path ----------------------------------------------------------- */

/* Request sizes and alignment of both NVMe homes' swap layouts: >= every
 * O_DIRECT requirement seen (plan/estimate.c plans with it too). */
#define ZC_SWAP_ALIGN 4096u

/* Splits nvme_path into its directories (the configuration stores a JSON
 * list joined with '\n', see src/config/schema.c); dirs point into buf. key
 * names the setting in messages (offload_optimizer or offload_param); more
 * than 16 directories is ZC_ERR_CONFIG. */
zc_status zc__split_nvme_paths(const char *key, const char *s, char *buf, size_t cap,
                               const char **dirs, int *n);

#endif
