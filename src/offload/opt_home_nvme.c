/* The nvme home (ZeRO-Infinity): master, m and v of every chunk homed here
 * live in swap files, streamed through a ring of pinned swap buffers.
 *
 * Files. Each engine makes its own directory zeroc-swap-r<rank>-XXXXXX under
 * every nvme_path entry (mkdtemp: exclusive to this run and rank), where the
 * io_uring store creates zeroc-r<rank>-optimizer.swp, striped over them; a
 * crash leaves only these clearly named directories; destroy removes both.
 *
 * Layout. Chunk k owns one store extent: master, m and v back to back, each
 * n_k times its element size (4 fp32, 2 bf16) rounded up to the I/O
 * alignment, so a chunk is one read and one write: 12 Psi / W bytes per rank
 * with fp32 state, 6 with bf16 (+ the store's stripe round-up). With
 * gradient accumulation at stages 2/3 (swap_grads) the fp32 gradient shard,
 * which outlives a micro-step, is a fourth tensor (nt = 4, + 4 Psi / W):
 * each micro-step adds its reduced slice to it through one pinned gradient
 * buffer (read back, add, write; a window's first micro-step starts from
 * zeros; 16-bit accumulation rounds the sum to the working dtype before the
 * write), and the step reads it with the state.
 *
 * Buffers. A slot holds the largest chunk's tensors; a chunk in flight takes
 * four buffers, as DeepSpeed counts them (master, m, v, gradient), so the
 * ring has S = buffer_count / 4 slots: S slots of state (+ S gradient and
 * output staging buffers with a device, where Adam cannot read in place),
 * whatever the model size.
 *
 * Pipeline. The chunk at position i of a pass uses slot i % S. acquire(i)
 * waits for its read; with pipeline_read it then starts the reads of the next
 * R = S - 1 (S - 2 with pipeline_write) chunks, so chunk i+1 is read while
 * Adam runs on chunk i. release(i) starts the write-back; without
 * pipeline_write it waits for it, with it the write overlaps the next chunks
 * and is waited for only when its slot is needed again (or at pass_end). With
 * both false every chunk is read, updated and written one after the other.
 *
 * Faults. The store retries short transfers and EAGAIN itself; a ticket that
 * fails with EIO is submitted again (up to ZC_NVME_RETRIES times: the same
 * bytes, idempotent); any other error or a repeated EIO fails the call with
 * ZC_ERR_IO naming chunk, file and offset, sticky until pass_end. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/checked.h"
#include "base/clock.h"
#include "base/log.h"
#include "config/config.h"
#include "offload/home_alloc.h"
#include "offload/home_pool.h"
#include "offload/home_store.h"
#include "offload/homes.h"
#include "offload/swap_dirs.h"
#include "offload/offload.h"

#define ZC_NVME_RETRIES 2  /* extra attempts of a ticket that failed with EIO */
#define MAX_SLOTS 64

typedef struct nv_chunk {
    size_t n;          /* elements per tensor, 0 = not homed here */
    uint64_t off;      /* store offset of the chunk's extent */
    size_t tb[4];      /* master, m, v, gradient: each tensor's bytes, aligned */
    size_t at[4];      /* their offsets in the extent (at[3]: the state's bytes) */
} nv_chunk;

typedef struct nv_slot {
    char *buf;                 /* nt * buffer_bytes: master, m, v (, gradient) */
    void *grad_stage, *pout_stage;
    int pos;                   /* pass position held, -1 = free */
    zc_nvme_ticket rt, wt;     /* read / write in flight, 0 = none */
    int rtries, wtries;
} nv_slot;

typedef struct nvme_home {
    zc_opt_home base;
    zc_opt_home_params p;
    nv_chunk *chunks;
    size_t chunks_bytes;
    int *ks;                   /* the pass order (copy) */
    int nk, pos, next_read;
    size_t maxn, buf_bytes;    /* buf_bytes: the largest chunk's fp32 tensor */
    size_t slot_bytes;         /* a slot: the largest chunk's nt tensors */
    int nt;                    /* tensors per chunk in the files: 3, or 4 with
                                  swap_grads */
    bool master_only;          /* a pass_begin_master pass: no reads, the
                                  master alone written */
    char *gbuf;                /* swap_grads: the gradient buffer (buf_bytes) */
    void *gin;                 /* swap_grads with staging: the slice staged in */
    zc_nvme_ticket gwt;        /* write of gbuf in flight */
    int gwk;                   /* its chunk */
    zc_kept_error gerr;        /* first gradient I/O error, reported by the
                                  next pass */
    uint64_t capacity;
    int nslots, ahead;
    nv_slot slots[MAX_SLOTS];
    zc_swap_dirs sd;           /* nvme_path entries and our directories under them */
    zc_pinned_pool *pool;
    zc_nvme_store *store;
    zc_kept_error err;         /* first error of the pass (sticky) */
    double read_wait, write_wait;
    int64_t reads, writes;
    int64_t read_bytes, write_bytes; /* since prepare (the engine's step stats) */
    int64_t counted_nvme[4];   /* bytes counted as ZC_MEMKIND_NVME: master, Adam,
                                  gradient, padding of the stripe round-up */
} nvme_home;

/* Bytes per element of tensor i (master, m, v, gradient), and one chunk's
 * extent in the files (its gradient too with swap_grads). */
#define tensor_esz(h, i) ((i) < 3 ? (h)->p.state_bytes[i] : sizeof(float))
#define extent_bytes(h, c) ((h)->nt == 4 ? (c)->at[3] + (c)->tb[3] : (c)->at[3])

static const zc_mem_category nvme_cats[4] = {ZC_MEM_MASTER, ZC_MEM_ADAM, ZC_MEM_GRADS,
                                             ZC_MEM_OTHER};

static zc_status nv_add(zc_opt_home *hh, int k, size_t n)
{
    nvme_home *h = (nvme_home *)hh;
    if (k < 0 || k >= h->p.env.nchunks || h->chunks[k].n)
        return ZC_ERR(ZC_ERR_INTERNAL, "nvme home: chunk %d added twice or out of range", k);
    h->chunks[k].n = n;
    if (n > h->maxn)
        h->maxn = n;
    return ZC_OK;
}

/* ---- pre-flight ---------------------------------------------------------- */

static zc_status preflight(nvme_home *h, uint64_t pinned)
{
    /* Each directory holds capacity / ndirs (the store rounds to stripes). */
    const uint64_t stripe = (uint64_t)h->p.env.aio_block_size * (uint64_t)h->sd.n;
    const uint64_t per_dir =
        (h->capacity + stripe - 1) / stripe * (uint64_t)h->p.env.aio_block_size;
    for (int i = 0; i < h->sd.n; i++) {
        struct statvfs vf;
        if (statvfs(h->sd.given[i], &vf) != 0)
            return ZC_ERR(ZC_ERR_IO,
                          "zero_optimization.offload_optimizer.nvme_path '%s' cannot be "
                          "examined: %s; point nvme_path at a writable directory",
                          h->sd.given[i], strerror(errno));
        uint64_t avail = (uint64_t)vf.f_bavail * (uint64_t)vf.f_frsize;
        if (per_dir > avail)
            return ZC_ERR(ZC_ERR_IO,
                          "zero_optimization.offload_optimizer.nvme_path '%s': rank %d's swap "
                          "file needs %.1f MiB but the filesystem has %.1f MiB free; free space, "
                          "give nvme_path more directories (a list) or lower "
                          "offload_optimizer.ratio (stage 3)",
                          h->sd.given[i], h->p.env.rank, (double)per_dir / 1048576.0,
                          (double)avail / 1048576.0);
    }
    zc_host_mem_limits lim;
    zc__host_mem_limits_read(NULL, &lim);
    if (zc__host_mem_check(&lim, pinned, false, "pinned swap buffers") != ZC_OK) {
        zc__error_context("zero_optimization.offload_optimizer (rank %d, %lld swap buffers of "
                          "%zu bytes): lower offload_optimizer.buffer_count or the chunk size "
                          "(reduce_bucket_size)",
                          h->p.env.rank, (long long)h->p.buffer_count, h->buf_bytes);
        return ZC_ERR_NO_MEMORY;
    }
    if (zc__home_pool_unlocked(&lim, h->p.pin_memory, h->p.env.device_index, pinned))
        ZC_LOGW("offload", "offload_optimizer: %.1f MiB of swap buffers exceed RLIMIT_MEMLOCK "
                "(%.1f MiB); they fall back to unlocked memory (raise 'ulimit -l' or set "
                "offload_optimizer.pin_memory false)",
                (double)pinned / 1048576.0, (double)lim.memlock_limit / 1048576.0);
    return ZC_OK;
}

/* ---- tickets ------------------------------------------------------------- */

static zc_status fail(nvme_home *h, zc_status rc) { return zc__kept_error_keep(&h->err, rc); }

static zc_status sticky(nvme_home *h)
{
    if (h->err.rc != ZC_OK)
        return ZC_KEPT_RAISE(&h->err);
    return ZC_OK;
}

/* ZC_FAULTS io items: this read or write fails as a persistent I/O error. */
static zc_status injected(nvme_home *h, bool write, int k, uint64_t off)
{
    int64_t nth = 0;
    if (!h->p.env.io_fault || !h->p.env.io_fault(h->p.env.io_fault_arg, &nth))
        return ZC_OK;
    return ZC_ERR(ZC_ERR_IO, "ZC_FAULTS: offload %s %lld of rank %d fails (chunk %d, store "
                  "offset %llu of '%s')", write ? "write" : "read", (long long)nth, h->p.env.rank,
                  k,
                  (unsigned long long)off, zc__nvme_path(h->store, 0));
}

/* retry: a resubmission after EIO, not a new read or write (not offered to
 * the injection hook). */
static zc_status submit(nvme_home *h, nv_slot *s, int k, bool write, bool retry)
{
    const nv_chunk *c = &h->chunks[k];
    zc_status irc = retry ? ZC_OK : injected(h, write, k, c->off);
    if (irc != ZC_OK) {
        zc__error_context("offload_optimizer nvme: %s chunk %d (rank %d)",
                          write ? "writing" : "reading", k, h->p.env.rank);
        return fail(h, irc);
    }
    /* The gradient (nt = 4) is read with the state but never written back
     * from a slot: the next window's first micro-step starts it afresh. */
    zc_status rc = write ? zc__nvme_write(h->store, c->off, s->buf,
                                          h->master_only ? c->tb[0] : c->at[3], &s->wt)
                         : zc__nvme_read(h->store, c->off, s->buf, extent_bytes(h, c), &s->rt);
    if (rc != ZC_OK) {
        zc__error_context("offload_optimizer nvme: %s chunk %d (rank %d)",
                          write ? "writing" : "reading", k, h->p.env.rank);
        return fail(h, rc);
    }
    if (write) {
        h->writes++;
        h->write_bytes += (int64_t)(h->master_only ? c->tb[0] : c->at[3]);
    } else {
        h->reads++;
        h->read_bytes += (int64_t)extent_bytes(h, c);
    }
    return ZC_OK;
}

/* Waits for the slot's read or write; a one-off EIO is submitted again. */
static zc_status wait_io(nvme_home *h, nv_slot *s, int k, bool write)
{
    zc_nvme_ticket *t = write ? &s->wt : &s->rt;
    int *tries = write ? &s->wtries : &s->rtries;
    double t0 = zc__now_s();
    zc_status rc = ZC_OK;
    while (*t) {
        zc_nvme_error err;
        rc = zc__nvme_wait(h->store, *t, &err);
        *t = 0;
        if (rc == ZC_OK)
            break;
        if (err.err == EIO && *tries < ZC_NVME_RETRIES) {
            (*tries)++;
            ZC_LOGW("offload", "offload_optimizer nvme: %s of chunk %d failed with EIO at "
                    "offset %llu of '%s'; trying again (%d of %d)",
                    write ? "write" : "read", k, (unsigned long long)err.file_offset, err.path,
                    *tries, ZC_NVME_RETRIES);
            zc__error_clear();
            rc = submit(h, s, k, write, true);
            if (rc != ZC_OK)
                break;
            continue;
        }
        zc__error_context("offload_optimizer nvme: %s chunk %d (rank %d)",
                          write ? "writing" : "reading", k, h->p.env.rank);
        fail(h, rc);
        break;
    }
    *tries = 0;
    if (write)
        h->write_wait += zc__now_s() - t0;
    else
        h->read_wait += zc__now_s() - t0;
    return rc;
}

/* Starts the read of the chunk at pass position i into its slot, after the
 * slot's previous write (pipeline_write) has finished. */
static zc_status start_read(nvme_home *h, int i)
{
    nv_slot *s = &h->slots[i % h->nslots];
    if (s->wt)
        ZC_CHECK(wait_io(h, s, h->ks[s->pos], true));
    s->pos = i;
    return h->master_only ? ZC_OK : submit(h, s, h->ks[i], false, false);
}

/* ---- the gradient (swap_grads) -------------------------------------------- */

static void grad_fail(nvme_home *h, zc_status rc, int k, const char *what)
{
    if (h->gerr.rc != ZC_OK)
        return;
    zc__error_context("offload_optimizer nvme: %s the gradient of chunk %d (rank %d)", what, k,
                      h->p.env.rank);
    zc__kept_error_keep(&h->gerr, rc);
}

/* Waits for the gradient buffer's write (EIO retried like the state's). */
static void grad_wait_write(nvme_home *h)
{
    const nv_chunk *c = &h->chunks[h->gwk];
    for (int tries = 0; h->gwt; tries++) {
        zc_nvme_error err;
        zc_status rc = zc__nvme_wait(h->store, h->gwt, &err);
        h->gwt = 0;
        if (rc == ZC_OK)
            return;
        if (err.err == EIO && tries < ZC_NVME_RETRIES) {
            zc__error_clear();
            rc = zc__nvme_write(h->store, c->off + c->at[3], h->gbuf, c->tb[3], &h->gwt);
        }
        if (rc != ZC_OK && !h->gwt) {
            grad_fail(h, rc, h->gwk, "writing");
            return;
        }
    }
}

static zc_status nv_grad_add(zc_opt_home *hh, int k, const void *src, zc_dtype dt,
                             zc_dtype acc_dt, bool first, bool last, double *sumsq)
{
    nvme_home *h = (nvme_home *)hh;
    const nv_chunk *c = &h->chunks[k];
    zc_device *hd = zc__device_host();
    *sumsq = 0.0;
    if (h->gwt)
        grad_wait_write(h);
    if (h->gerr.rc != ZC_OK)
        return ZC_OK; /* the window's gradient is lost; the next pass says so */
    const uint64_t at = c->off + c->at[3];
    if (first) {
        memset(h->gbuf, 0, c->n * sizeof(float));
    } else {
        zc_status rc = ZC_OK;
        for (int tries = 0; tries <= ZC_NVME_RETRIES; tries++) {
            zc_nvme_ticket t;
            zc_nvme_error err = {0};
            zc__error_clear();
            if (tries == 0 && (rc = injected(h, false, k, at)) != ZC_OK)
                break;
            rc = zc__nvme_read(h->store, at, h->gbuf, c->tb[3], &t);
            if (rc == ZC_OK)
                rc = zc__nvme_wait(h->store, t, &err);
            if (rc == ZC_OK)
                h->read_bytes += (int64_t)c->tb[3];
            if (rc == ZC_OK || err.err != EIO)
                break;
        }
        if (rc != ZC_OK) {
            grad_fail(h, rc, k, "reading");
            return ZC_OK;
        }
    }
    /* The device path's own kernel on the host: acc += src in fp32, or
     * rounded to acc_dt (16-bit accumulation: the shard is in memory between
     * its read-back and its write anyway, so rounding costs no I/O). */
    ZC_CHECK(hd->ops->accumulate_rounded(hd, (float *)h->gbuf, src, dt, acc_dt, c->n, NULL));
    if (last)
        ZC_CHECK(hd->ops->sumsq(hd, h->gbuf, ZC_DTYPE_F32, c->n, sumsq, NULL));
    h->gwk = k;
    zc_status rc = injected(h, true, k, at);
    if (rc == ZC_OK)
        rc = zc__nvme_write(h->store, at, h->gbuf, c->tb[3], &h->gwt);
    if (rc != ZC_OK)
        grad_fail(h, rc, k, "writing");
    else
        h->write_bytes += (int64_t)c->tb[3];
    return ZC_OK;
}

static void *nv_grad_in_stage(zc_opt_home *hh) { return ((nvme_home *)hh)->gin; }

/* ---- the pass ------------------------------------------------------------ */

static zc_status nv_pass_begin(zc_opt_home *hh, const int *ks, int nk)
{
    nvme_home *h = (nvme_home *)hh;
    if (nk < 0 || nk > h->p.env.nchunks)
        return ZC_ERR(ZC_ERR_INTERNAL, "nvme home: a pass of %d chunks", nk);
    memcpy(h->ks, ks, (size_t)nk * sizeof(int));
    h->nk = nk;
    h->master_only = false;
    h->pos = h->next_read = 0;
    zc__kept_error_clear(&h->err);
    /* The last gradient write must be on disk before the pass reads it, and
     * a gradient I/O error of the window fails this pass. */
    if (h->gwt)
        grad_wait_write(h);
    if (h->gerr.rc != ZC_OK) {
        h->err = h->gerr;
        zc__kept_error_clear(&h->gerr);
    }
    h->read_wait = h->write_wait = 0;
    h->reads = h->writes = 0;
    for (int i = 0; i < nk; i++)
        if (ks[i] < 0 || ks[i] >= h->p.env.nchunks || !h->chunks[ks[i]].n)
            return ZC_ERR(ZC_ERR_INTERNAL, "nvme home: chunk %d is not homed here", ks[i]);
    return ZC_OK;
}

static zc_status nv_pass_begin_master(zc_opt_home *hh, const int *ks, int nk)
{
    ZC_CHECK(nv_pass_begin(hh, ks, nk));
    ((nvme_home *)hh)->master_only = true;
    return ZC_OK;
}

static zc_status nv_acquire(zc_opt_home *hh, int k, zc_opt_view *out)
{
    nvme_home *h = (nvme_home *)hh;
    ZC_CHECK(sticky(h));
    const int i = h->pos;
    if (i >= h->nk || h->ks[i] != k)
        return ZC_ERR(ZC_ERR_INTERNAL, "nvme home: chunk %d acquired out of the pass order", k);
    if (h->next_read <= i) {
        ZC_CHECK(start_read(h, i));
        h->next_read = i + 1;
    }
    nv_slot *s = &h->slots[i % h->nslots];
    ZC_CHECK(wait_io(h, s, k, false));
    /* Read ahead while Adam runs on this chunk. */
    while (h->next_read < h->nk && h->next_read <= i + h->ahead) {
        ZC_CHECK(start_read(h, h->next_read));
        h->next_read++;
    }
    const nv_chunk *c = &h->chunks[k];
    const bool mo = h->master_only;
    *out = (zc_opt_view){.master = s->buf,
                         .m = mo ? NULL : s->buf + c->at[1],
                         .v = mo ? NULL : s->buf + c->at[2],
                         .grad = h->nt == 4 ? (float *)(s->buf + c->at[3]) : NULL,
                         .grad_stage = s->grad_stage,
                         .pout_stage = s->pout_stage};
    return ZC_OK;
}

static zc_status nv_release(zc_opt_home *hh, int k, bool dirty)
{
    nvme_home *h = (nvme_home *)hh;
    ZC_CHECK(sticky(h));
    const int i = h->pos;
    if (i >= h->nk || h->ks[i] != k)
        return ZC_ERR(ZC_ERR_INTERNAL, "nvme home: chunk %d released out of the pass order", k);
    nv_slot *s = &h->slots[i % h->nslots];
    h->pos++;
    if (!dirty)
        return ZC_OK;
    ZC_CHECK(submit(h, s, k, true, false));
    if (!h->p.pipeline_write)
        ZC_CHECK(wait_io(h, s, k, true));
    return ZC_OK;
}

static zc_status nv_pass_end(zc_opt_home *hh)
{
    nvme_home *h = (nvme_home *)hh;
    /* Drain everything still in flight (reads ahead of a failure, deferred
     * writes) so no transfer lands in a buffer after the pass. */
    for (int j = 0; j < h->nslots; j++) {
        nv_slot *s = &h->slots[j];
        int k = s->pos >= 0 && s->pos < h->nk ? h->ks[s->pos] : -1;
        if (s->rt && h->err.rc != ZC_OK) {
            (void)zc__nvme_wait(h->store, s->rt, NULL);
            s->rt = 0;
        } else if (s->rt) {
            (void)wait_io(h, s, k, false);
        }
        if (s->wt)
            (void)wait_io(h, s, k, true);
        s->pos = -1;
    }
    zc_status rc = sticky(h);
    h->nk = 0;
    return rc;
}

static bool nv_progress(zc_opt_home *hh)
{
    nvme_home *h = (nvme_home *)hh;
    /* zc__nvme_done refills and reaps for the whole store, whichever live
     * ticket it is asked about. No ticket in any slot: nothing in flight
     * (the serial pass between its read and its write). */
    for (int j = 0; j < h->nslots; j++) {
        const zc_nvme_ticket t = h->slots[j].rt ? h->slots[j].rt : h->slots[j].wt;
        if (t) {
            (void)zc__nvme_done(h->store, t);
            return zc__nvme_busy(h->store);
        }
    }
    return false;
}

/* ---- setup --------------------------------------------------------------- */

/* Writes zeros over every chunk's extent (m = v = 0, master 0 until loaded),
 * proving at build that the files take writes. */
static zc_status zero_fill(nvme_home *h)
{
    nv_slot *s = &h->slots[0];
    memset(s->buf, 0, h->slot_bytes);
    for (int k = 0; k < h->p.env.nchunks; k++) {
        const nv_chunk *c = &h->chunks[k];
        if (!c->n)
            continue;
        zc_nvme_ticket t;
        ZC_CHECK(zc__nvme_write(h->store, c->off, s->buf, extent_bytes(h, c), &t));
    }
    zc_status rc = zc__nvme_wait_all(h->store);
    if (rc != ZC_OK)
        zc__error_context("offload_optimizer nvme: initialising the swap files (rank %d)",
                          h->p.env.rank);
    return rc;
}

static zc_status nv_prepare(zc_opt_home *hh)
{
    nvme_home *h = (nvme_home *)hh;
    if (!h->maxn)
        return ZC_OK;
    /* Layout. No chunk's tensor is larger than a buffer, so once the buffer
     * size is computed without overflow, so is every tensor's. */
    h->nt = h->p.swap_grads ? 4 : 3;
    if (!zc__aligned_bytes(h->maxn, sizeof(float), ZC_SWAP_ALIGN, &h->buf_bytes))
        return ZC_ERR(ZC_ERR_CONFIG, "zero_optimization.offload_optimizer: a chunk shard of %zu "
                      "elements is too large to swap (its size overflows)", h->maxn);
    h->slot_bytes = 0;
    for (int i = 0; i < h->nt; i++) {
        size_t b = 0;
        (void)zc__aligned_bytes(h->maxn, tensor_esz(h, i), ZC_SWAP_ALIGN, &b);
        h->slot_bytes += b; /* at most 4 fp32 buffers: no overflow */
    }
    uint64_t off = 0;
    for (int k = 0; k < h->p.env.nchunks; k++) {
        nv_chunk *c = &h->chunks[k];
        for (int i = 0; c->n && i < 4; i++) {
            (void)zc__aligned_bytes(c->n, tensor_esz(h, i), ZC_SWAP_ALIGN, &c->tb[i]);
            c->at[i] = i ? c->at[i - 1] + c->tb[i - 1] : 0;
            h->counted_nvme[i < 3 ? (i ? 1 : 0) : 2] += i < h->nt ? (int64_t)c->tb[i] : 0;
        }
        c->off = off;
        off += c->n ? extent_bytes(h, c) : 0;
    }
    h->capacity = off;
    const int64_t slots = h->p.buffer_count / 4;
    h->nslots = slots < 1 ? 1 : slots > MAX_SLOTS ? MAX_SLOTS : (int)slots;
    h->ahead = h->p.pipeline_read ? h->nslots - (h->p.pipeline_write ? 2 : 1) : 0;
    h->ahead = h->ahead < 0 ? 0 : h->ahead;
    if ((h->p.pipeline_read && h->ahead < 1) || (h->p.pipeline_write && h->nslots < 2))
        ZC_LOGW("offload", "offload_optimizer: buffer_count %lld gives %d chunk(s) in flight "
                "(4 swap buffers each); pipeline_read needs %d and pipeline_write 2 to overlap "
                "(buffer_count >= %d), so the pipeline is partly serial",
                (long long)h->p.buffer_count, h->nslots, h->p.pipeline_write ? 3 : 2,
                h->p.pipeline_write ? 12 : 8);
    uint64_t pinned = (uint64_t)h->nslots * (uint64_t)h->slot_bytes;
    if (h->p.staging)
        pinned += (uint64_t)h->nslots * h->maxn * (sizeof(float) + h->p.env.param_bytes);
    if (h->nt == 4)
        pinned += h->buf_bytes + (h->p.staging ? h->maxn * sizeof(float) : 0);
    ZC_CHECK(preflight(h, pinned));

    /* Swap directories and the store. */
    zc_home_store_spec ss = {
        .block = "offload_optimizer",
        .purpose = "optimizer",
        .env = &h->p.env,
        .capacity = h->capacity,
        .flags = (h->p.aio_single_submit ? ZC_NVME_SINGLE_SUBMIT : 0u) |
                 (h->p.aio_overlap_events ? 0u : ZC_NVME_NO_OVERLAP),
    };
    zc_nvme_stats ns;
    ZC_CHECK(zc__home_store_open(&h->sd, &ss, &h->store, &ns));
    /* Count the files like memory (master, m and v, the gradient: summed
     * over the extents above); the store's stripe round-up is bookkeeping. */
    h->counted_nvme[3] = (int64_t)(ns.capacity - h->capacity);
    for (int i = 0; i < 4; i++)
        zc__mem_count(h->p.env.acct, ZC_MEMKIND_NVME, nvme_cats[i], h->counted_nvme[i]);

    /* Swap buffers: one slab of what the buffers need plus alignment slack. */
    ZC_CHECK(zc__home_pool_create(h->p.env.acct,
                                  (size_t)pinned + (size_t)(3 * h->nslots + 2) * ZC_SWAP_ALIGN,
                                  h->p.env.device_index, h->p.pin_memory, &h->pool));
    for (int j = 0; j < h->nslots; j++) {
        nv_slot *s = &h->slots[j];
        s->pos = -1;
        ZC_CHECK(zc__pinned_alloc(h->pool, h->slot_bytes, ZC_SWAP_ALIGN,
                                  ZC_MEM_BUFFERS, "NVMe swap buffers", (void **)&s->buf));
        if (h->p.staging) {
            ZC_CHECK(zc__pinned_alloc(h->pool, h->maxn * sizeof(float), 64, ZC_MEM_BUFFERS,
                                      "gradient staging (nvme offload)", &s->grad_stage));
            ZC_CHECK(zc__pinned_alloc(h->pool, h->maxn * h->p.env.param_bytes, 64, ZC_MEM_BUFFERS,
                                      "parameter staging (nvme offload)", &s->pout_stage));
        }
    }
    if (h->nt == 4) {
        ZC_CHECK(zc__pinned_alloc(h->pool, h->buf_bytes, ZC_SWAP_ALIGN, ZC_MEM_BUFFERS,
                                  "NVMe gradient buffer", (void **)&h->gbuf));
        if (h->p.staging)
            ZC_CHECK(zc__pinned_alloc(h->pool, h->maxn * sizeof(float), 64, ZC_MEM_BUFFERS,
                                      "gradient staging (nvme offload)", &h->gin));
    }
    ZC_CHECK(zc__home_store_register(h->store, h->pool));
    /* fast_init: the store reserved the files with fallocate (or sized them
     * sparse), and both read back as zeros, so the zero pass is skipped. */
    if (!h->p.fast_init)
        ZC_CHECK(zero_fill(h));
    ZC_LOGI("offload", "optimizer state of rank %d: %.1f MiB in %d %sswap file(s) under '%s'%s, "
            "%d chunk(s) in flight of %.1f MiB buffers, pipeline read %s / write %s",
            h->p.env.rank, (double)ns.capacity / 1048576.0, h->sd.n,
            ns.unnamed ? "unnamed " : "", ns.unnamed ? h->sd.given[0] : h->sd.made[0],
            ns.direct ? " (O_DIRECT)" : " (buffered: the filesystem refused O_DIRECT)",
            h->nslots, (double)h->buf_bytes / 1048576.0, h->p.pipeline_read ? "on" : "off",
            h->p.pipeline_write ? "on" : "off");
    return ZC_OK;
}

static void nv_destroy(zc_opt_home *hh)
{
    nvme_home *h = (nvme_home *)hh;
    zc__home_store_close(h->store, "swap store");
    for (int i = 0; i < 4; i++)
        if (h->counted_nvme[i])
            zc__mem_count(h->p.env.acct, ZC_MEMKIND_NVME, nvme_cats[i], -h->counted_nvme[i]);
    zc__swap_dirs_remove(&h->sd);
    zc__pinned_free(h->pool, h->gbuf);
    zc__pinned_free(h->pool, h->gin);
    for (int j = 0; j < h->nslots; j++) {
        zc__pinned_free(h->pool, h->slots[j].buf);
        zc__pinned_free(h->pool, h->slots[j].grad_stage);
        zc__pinned_free(h->pool, h->slots[j].pout_stage);
    }
    zc__pinned_pool_destroy(h->pool);
    zc__host_free(h->p.env.acct, ZC_MEM_OTHER, h->ks, (size_t)h->p.env.nchunks * sizeof(int));
    zc__home_free(h->p.env.acct, h, sizeof *h, h->chunks, h->chunks_bytes);
}

static const zc_opt_home_ops nv_ops = {
    .name = "nvme",
    .host = true,
    .add_chunk = nv_add,
    .prepare = nv_prepare,
    .pass_begin = nv_pass_begin,
    .pass_begin_master = nv_pass_begin_master,
    .acquire = nv_acquire,
    .release = nv_release,
    .pass_end = nv_pass_end,
    .progress = nv_progress,
    .grad_add = nv_grad_add,
    .grad_in_stage = nv_grad_in_stage,
    .destroy = nv_destroy,
};

zc_status zc__opt_home_nvme_create(const zc_opt_home_params *p, zc_opt_home **out)
{
    *out = NULL;
    ZC_CHECK(zc__opt_home_params_check(p, "nvme home"));
    /* The rules of zc_engine_create and `zeroc config check` (support.c). */
    ZC_CHECK(zc__config_opt_buffers_check(p->buffer_count));
    ZC_CHECK(zc__swap_aio_check(p->env.aio_block_size, p->env.aio_queue_depth,
                                p->env.aio_intra_op));
    nvme_home *h;
    nv_chunk *chunks;
    size_t chunks_bytes;
    ZC_CHECK(zc__home_alloc(p->env.acct, "nvme home", sizeof *h, (void **)&h, p->env.nchunks,
                            sizeof *chunks, (void **)&chunks, &chunks_bytes));
    h->base.ops = &nv_ops;
    h->p = *p;
    h->p.dirs = NULL;
    zc_status rc =
        zc__swap_dirs_init(&h->sd, p->dirs, p->ndirs, "zero_optimization.offload_optimizer");
    if (rc == ZC_OK)
        rc = zc__host_alloc(p->env.acct, ZC_MEM_OTHER, (size_t)p->env.nchunks * sizeof(int),
                            "nvme pass order", (void **)&h->ks);
    if (rc != ZC_OK) {
        zc__home_free(p->env.acct, h, sizeof *h, chunks, chunks_bytes);
        return rc;
    }
    for (int j = 0; j < MAX_SLOTS; j++)
        h->slots[j].pos = -1;
    h->chunks = chunks;
    h->chunks_bytes = chunks_bytes;
    *out = &h->base;
    return ZC_OK;
}

void zc__opt_home_nvme_info(const zc_opt_home *hh, zc_opt_nvme_info *out)
{
    memset(out, 0, sizeof *out);
    if (!hh || hh->ops != &nv_ops)
        return;
    const nvme_home *h = (const nvme_home *)hh;
    out->buffer_bytes = h->buf_bytes;
    out->buffer_count = (int64_t)h->nslots * (h->p.staging || h->nt == 4 ? 4 : 3);
    out->slots = h->nslots;
    out->file_bytes = h->capacity;
    snprintf(out->dir, sizeof out->dir, "%s", h->sd.made[0]);
    out->file0_size = zc__nvme_file_size(h->store, 0);
    out->read_wait_s = h->read_wait;
    out->write_wait_s = h->write_wait;
    out->reads = h->reads;
    out->writes = h->writes;
    out->read_bytes = h->read_bytes;
    out->write_bytes = h->write_bytes;
    if (h->store) {
        zc_nvme_stats ns;
        zc__nvme_stats_get(h->store, &ns);
        out->requests = ns.requests;
        out->write_requests = ns.write_requests;
    }
}

void zc__opt_home_nvme_set_faults(zc_opt_home *hh, const struct zc_nvme_faults *f)
{
    if (!hh || hh->ops != &nv_ops)
        return;
    zc__nvme_set_faults(((nvme_home *)hh)->store, f);
}
