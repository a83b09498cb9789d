/* Where a chunk's optimizer state lives (internal seam).
 *
 * Each chunk's fp32 master and Adam m, v (this rank's shard, or the whole
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
 * Stage-3 parameter shards have a seam of their own (offload/param_home.h): with
 * offload_param the pass's output (pout) is the parameter home's memory. */
#ifndef ZC_OFFLOAD_OPT_HOME_H
#define ZC_OFFLOAD_OPT_HOME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/alloc.h"
#include "base/error.h"
#include "offload/home_env.h"
#include "device/device.h"

typedef struct zc_opt_home zc_opt_home;

/* One chunk's state, valid from acquire until release. */
typedef struct zc_opt_view {
    float *master, *m, *v;   /* n fp32 values each */
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
    /* Homes chunk k (0 <= k < nchunks, each once, any order) with n fp32
     * elements per tensor. */
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
     * the window's first micro-step onto zeros, else onto what is read back;
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
    zc_status (*grad_add)(zc_opt_home *h, int k, const void *src, zc_dtype dt, bool first,
                          bool last, double *sumsq);
    void *(*grad_in_stage)(zc_opt_home *h);
    /* Called often while Adam runs on an acquired chunk: moves the I/O in
     * flight along without blocking (the store only reaps completions and
     * refills its queue when called, so without this the drive idles once
     * queue_depth requests are done). May be NULL. */
    void (*progress)(zc_opt_home *h);
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

#endif
