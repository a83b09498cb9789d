/* Where a stage-3 chunk's parameter shard lives (internal seam).
 *
 * At stage 3 each rank owns one shard of every chunk's working-precision
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
#ifndef ZC_OFFLOAD_PARAM_HOME_H
#define ZC_OFFLOAD_PARAM_HOME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/alloc.h"
#include "base/error.h"
#include "offload/home_env.h"

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
     * the engine's pre-flight (core/preflight.c) checks them with the whole
     * memory plan (core/estimate.c, which must follow every size a home
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

#endif
