/* The nvme activation home (activation_checkpointing.nvme_checkpointing, a
 * zeroc extension): checkpoints live in a swap file under nvme_path and
 * stream through buffer_count pinned buffers (homes.h part 4).
 *
 * Files, as the other NVMe homes: each engine makes its own directory under
 * every nvme_path entry, the io_uring store creates zeroc-r<rank>-acts.swp
 * in it with no name, O_DIRECT where the filesystem allows, striped over the
 * directories (home_store.h, swap_dirs.h).
 *
 * Layout. Slot s owns the extent [s T, (s + 1) T), T = slot_bytes rounded up
 * to ZC_SWAP_ALIGN: one write and one read per checkpoint, of its bytes
 * rounded up to the alignment.
 *
 * Buffers. buffer_count buffers of T bytes. A buffer is free (holding
 * nothing), filling (the caller copies a checkpoint in), holding slot s (its
 * write submitted or done; the data stays valid until the buffer is taken
 * again) or reading slot s. Writes take the free buffers first, then the
 * holding one filled longest ago (waiting for its write), so after a forward
 * pass the buffers hold the last checkpoints saved - the first restored -
 * and those come back without a read. Reads started ahead take free
 * buffers only and leave the last free one for a read on demand, so a
 * restore never waits for a buffer and every decision follows the sequence
 * of calls alone: the same on every rank of a model that saves and restores
 * the same way (parameter offload's rule, param_home_nvme.c).
 *
 * Faults. The store retries short transfers and EAGAIN; a ticket that fails
 * with EIO is submitted again up to RETRIES times; anything else is ZC_ERR_IO
 * naming the slot, the file and the offset. ZC_FAULTS io items fire before
 * each submission (not before retries), as for the other NVMe homes. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/checked.h"
#include "base/clock.h"
#include "base/log.h"
#include "offload/home_alloc.h"
#include "offload/home_pool.h"
#include "offload/home_store.h"
#include "offload/homes.h"
#include "offload/offload.h"
#include "offload/swap_dirs.h"

#define RETRIES 2
#define MAX_BUFS 256 /* activation_checkpointing.buffer_count's range (schema.c) */

typedef enum an_use { AN_FREE = 0, AN_FILL, AN_HOLD, AN_READ } an_use;

typedef struct an_buf {
    char *mem;
    an_use use;
    int slot;                  /* AN_FILL, AN_HOLD, AN_READ: whose data */
    uint64_t filled;           /* AN_HOLD: when it was filled (a sequence number) */
    zc_nvme_ticket rt, wt;     /* read / write in flight, 0 = none */
    int wslot;                 /* the slot of the write in flight */
    size_t wbytes;             /* its bytes (aligned) */
    zc_kept_error rerr;        /* the read failed to start (kept for read_wait) */
} an_buf;

typedef struct an_slot {
    int buf;                   /* the buffer holding or reading it, -1 = none */
    size_t tbytes;             /* bytes of its last write (aligned), 0 = none */
} an_slot;

typedef struct anvme_home {
    zc_act_home base;
    zc_act_home_params p;
    an_slot *slots;
    size_t slots_bytes;
    size_t stride;             /* T */
    int nbufs;
    an_buf *bufs;
    size_t bufs_bytes;
    uint64_t fills;
    uint64_t capacity, counted_nvme;
    zc_swap_dirs sd;
    zc_pinned_pool *pool;
    zc_nvme_store *store;
    zc_kept_error werr;        /* first write error since the last settle */
    zc_act_home_io io;
} anvme_home;

static const char *const KEY = "activation_checkpointing";

/* ---- setup --------------------------------------------------------------- */

static zc_status an_prepare(zc_act_home *hh)
{
    anvme_home *h = (anvme_home *)hh;
    const size_t nslots = (size_t)h->p.env.nchunks;
    uint64_t cap = 0;
    if (!zc__aligned_bytes(h->p.slot_bytes, 1, ZC_SWAP_ALIGN, &h->stride) ||
        __builtin_mul_overflow((uint64_t)h->stride, (uint64_t)nslots, &cap))
        return ZC_ERR(ZC_ERR_CONFIG, "%s.nvme_checkpointing: %zu slots of %zu bytes overflow",
                      KEY, nslots, h->p.slot_bytes);
    h->capacity = cap;
    for (size_t s = 0; s < nslots; s++)
        h->slots[s].buf = -1;
    /* Host memory and disk space were checked with the whole plan by the
     * engine's pre-flight; src/act's layout plans these buffers and the
     * store's round-up. */
    size_t pinned = 0;
    if (__builtin_mul_overflow(h->stride, (size_t)h->nbufs, &pinned))
        return ZC_ERR(ZC_ERR_CONFIG, "%s.buffer_count %d buffers of %zu bytes overflow", KEY,
                      h->nbufs, h->stride);
    ZC_CHECK(zc__home_pool_create(h->p.env.acct, pinned + (size_t)(h->nbufs + 1) * ZC_SWAP_ALIGN,
                                  h->p.env.device_index, h->p.pin_memory, &h->pool));
    for (int j = 0; j < h->nbufs; j++)
        ZC_CHECK(zc__pinned_alloc(h->pool, h->stride, ZC_SWAP_ALIGN, ZC_MEM_ACTIVATIONS,
                                  "NVMe activation buffers", (void **)&h->bufs[j].mem));
    /* Every buffer's transfer wholly in the kernel (its pieces, and two more
     * where stripe boundaries cut it), so a read started ahead runs to its
     * end while the caller computes (param_home_nvme.c's reason). */
    const int64_t block = h->p.env.aio_block_size > 0 ? h->p.env.aio_block_size : 1;
    const int64_t pieces = (int64_t)(h->stride / (uint64_t)block) + 2;
    const zc_home_store_spec ss = {
        .block = "activation_checkpointing",
        .purpose = "acts",
        .env = &h->p.env,
        .capacity = h->capacity,
        .min_requests = pieces > 4096 / h->nbufs ? 4096 : pieces * h->nbufs,
    };
    zc_nvme_stats ns;
    ZC_CHECK(zc__home_store_open(&h->sd, &ss, &h->store, &ns));
    h->counted_nvme = ns.capacity;
    zc__mem_count(h->p.env.acct, ZC_MEMKIND_NVME, ZC_MEM_ACTIVATIONS, (int64_t)h->counted_nvme);
    ZC_CHECK(zc__home_store_register(h->store, h->pool));
    ZC_LOGI("offload", "activation checkpoints of rank %d: %zu slots of %zu bytes in %d %sswap "
            "file(s) under '%s'%s, %d buffers", h->p.env.rank, nslots,
            h->stride, h->sd.n, ns.unnamed ? "unnamed " : "",
            ns.unnamed ? h->sd.given[0] : h->sd.made[0],
            ns.direct ? " (O_DIRECT)" : " (buffered: the filesystem refused O_DIRECT)", h->nbufs);
    return ZC_OK;
}

/* ---- I/O ----------------------------------------------------------------- */

static uint64_t offset_of(const anvme_home *h, int slot) { return (uint64_t)slot * h->stride; }

/* ZC_FAULTS io items: this read or write fails as a persistent I/O error. */
static zc_status injected(anvme_home *h, bool write, int slot)
{
    int64_t nth = 0;
    if (!h->p.env.io_fault || !h->p.env.io_fault(h->p.env.io_fault_arg, &nth))
        return ZC_OK;
    return ZC_ERR(ZC_ERR_IO, "ZC_FAULTS: offload %s %lld of rank %d fails (activation "
                  "checkpoint in slot %d, store offset %llu of '%s')", write ? "write" : "read",
                  (long long)nth, h->p.env.rank, slot, (unsigned long long)offset_of(h, slot),
                  zc__nvme_path(h->store, 0));
}

static zc_status submit(anvme_home *h, an_buf *b, int slot, size_t bytes, bool write, bool retry)
{
    zc_status rc = retry ? ZC_OK : injected(h, write, slot);
    if (rc == ZC_OK)
        rc = write ? zc__nvme_write(h->store, offset_of(h, slot), b->mem, bytes, &b->wt)
                   : zc__nvme_read(h->store, offset_of(h, slot), b->mem, bytes, &b->rt);
    if (rc != ZC_OK)
        zc__error_context("%s nvme: %s the checkpoint in slot %d (rank %d)", KEY,
                          write ? "writing" : "reading", slot, h->p.env.rank);
    return rc;
}

/* Waits for a buffer's read or write; a one-off EIO is submitted again. */
static zc_status wait_io(anvme_home *h, an_buf *b, bool write)
{
    zc_nvme_ticket *t = write ? &b->wt : &b->rt;
    const int slot = write ? b->wslot : b->slot;
    const size_t bytes = write ? b->wbytes : h->slots[slot].tbytes;
    zc_status rc = ZC_OK;
    for (int tries = 0; *t;) {
        zc_nvme_error err;
        rc = zc__nvme_wait(h->store, *t, &err);
        *t = 0;
        if (rc == ZC_OK)
            break;
        if (err.err == EIO && tries++ < RETRIES) {
            ZC_LOGW("offload", "%s nvme: %s of slot %d failed with EIO at offset %llu of '%s'; "
                    "trying again (%d of %d)", KEY, write ? "write" : "read", slot,
                    (unsigned long long)err.file_offset, err.path, tries, RETRIES);
            zc__error_clear();
            rc = submit(h, b, slot, bytes, write, true);
            if (rc != ZC_OK)
                break;
            continue;
        }
        zc__error_context("%s nvme: %s the checkpoint in slot %d (rank %d)", KEY,
                          write ? "writing" : "reading", slot, h->p.env.rank);
        break;
    }
    return rc;
}

/* Makes buffer b's write finish (its error is kept for settle and reads). */
static void settle_write(anvme_home *h, an_buf *b)
{
    if (!b->wt)
        return;
    const double t0 = zc__now_s();
    const bool waited = !zc__nvme_done(h->store, b->wt);
    zc__kept_error_keep(&h->werr, wait_io(h, b, true));
    if (waited) {
        h->io.write_waits++;
        h->io.write_wait_s += zc__now_s() - t0;
    }
}

/* Gives buffer j up: the slot it held or read no longer has it. */
static void detach(anvme_home *h, int j)
{
    an_buf *b = &h->bufs[j];
    if (b->use != AN_FREE && b->slot >= 0 && h->slots[b->slot].buf == j)
        h->slots[b->slot].buf = -1;
    if (b->rt) { /* abandoned: the kernel must not write the buffer after this */
        (void)zc__nvme_wait(h->store, b->rt, NULL);
        b->rt = 0;
        zc__error_clear();
    }
    zc__kept_error_clear(&b->rerr);
    b->use = AN_FREE;
    b->slot = -1;
}

static int free_buffers(const anvme_home *h)
{
    int n = 0;
    for (int j = 0; j < h->nbufs; j++)
        n += h->bufs[j].use == AN_FREE;
    return n;
}

/* A buffer for slot's new data: a free one, else the holding one filled
 * longest ago (for writes only: reads never evict a held checkpoint). Waits
 * for the buffer's earlier write. -1 when none can be taken. */
static int take_buffer(anvme_home *h, int slot, an_use use, bool may_evict)
{
    int best = -1;
    for (int j = 0; j < h->nbufs && best < 0; j++)
        if (h->bufs[j].use == AN_FREE)
            best = j;
    if (best < 0 && may_evict)
        for (int j = 0; j < h->nbufs; j++)
            if (h->bufs[j].use == AN_HOLD &&
                (best < 0 || h->bufs[j].filled < h->bufs[best].filled))
                best = j;
    if (best < 0)
        return -1;
    detach(h, best);
    settle_write(h, &h->bufs[best]);
    an_buf *b = &h->bufs[best];
    b->use = use;
    b->slot = slot;
    h->slots[slot].buf = best;
    return best;
}

static bool an_rank_local_io(const zc_act_home *hh)
{
    (void)hh;
    return true;
}

static zc_status check_slot(const anvme_home *h, int slot, const char *what)
{
    if (slot < 0 || slot >= h->p.env.nchunks || !h->store)
        return ZC_ERR(ZC_ERR_INTERNAL, "nvme activation home: %s of slot %d of %d", what, slot,
                      h->p.env.nchunks);
    return ZC_OK;
}

static zc_status an_write_begin(zc_act_home *hh, int slot, void **dst)
{
    anvme_home *h = (anvme_home *)hh;
    ZC_CHECK(check_slot(h, slot, "write"));
    if (h->slots[slot].buf >= 0)
        detach(h, h->slots[slot].buf); /* a stale copy of an earlier checkpoint */
    const int j = take_buffer(h, slot, AN_FILL, true);
    if (j < 0)
        return ZC_ERR(ZC_ERR_INTERNAL, "nvme activation home: no buffer to write slot %d (%d "
                      "buffers, %d reading)", slot, h->nbufs, h->nbufs - free_buffers(h));
    *dst = h->bufs[j].mem;
    return ZC_OK;
}

static zc_status an_write_end(zc_act_home *hh, int slot, size_t bytes)
{
    anvme_home *h = (anvme_home *)hh;
    ZC_CHECK(check_slot(h, slot, "write"));
    const int j = h->slots[slot].buf;
    if (j < 0 || h->bufs[j].use != AN_FILL || bytes > h->p.slot_bytes)
        return ZC_ERR(ZC_ERR_INTERNAL, "nvme activation home: slot %d written without "
                      "write_begin (%zu bytes)", slot, bytes);
    an_buf *b = &h->bufs[j];
    size_t tb = 0;
    (void)zc__aligned_bytes(bytes, 1, ZC_SWAP_ALIGN, &tb); /* <= stride: no overflow */
    /* An earlier write of this slot (a micro-step before, from a buffer
     * given up since) finishes first: two writes of one extent in flight
     * could land in either order. */
    for (int i = 0; i < h->nbufs; i++)
        if (i != j && h->bufs[i].wt && h->bufs[i].wslot == slot)
            settle_write(h, &h->bufs[i]);
    b->use = AN_HOLD;
    b->filled = ++h->fills;
    b->wslot = slot;
    b->wbytes = tb;
    h->slots[slot].tbytes = tb;
    /* A failed submission is kept, not returned: the store agrees on the
     * outcome at the restore (homes.h part 4). */
    if (zc__kept_error_keep(&h->werr, submit(h, b, slot, tb, true, false)) == ZC_OK) {
        h->io.writes++;
        h->io.write_bytes += (int64_t)tb;
    }
    return ZC_OK;
}

static void start_read(anvme_home *h, int slot, int j)
{
    an_buf *b = &h->bufs[j];
    zc__kept_error_keep(&b->rerr, submit(h, b, slot, h->slots[slot].tbytes, false, false));
}

static void an_read_start(zc_act_home *hh, int slot, size_t bytes, bool *started)
{
    anvme_home *h = (anvme_home *)hh;
    (void)bytes;
    *started = false;
    if (check_slot(h, slot, "read") != ZC_OK || !h->slots[slot].tbytes) {
        zc__error_clear();
        return;
    }
    if (h->slots[slot].buf >= 0) {
        *started = true; /* held, or its read runs */
        return;
    }
    /* The last free buffer is kept for a read on demand. */
    if (free_buffers(h) <= 1)
        return;
    start_read(h, slot, take_buffer(h, slot, AN_READ, false));
    *started = true;
}

static zc_status an_read_wait(zc_act_home *hh, int slot, size_t bytes, const void **src)
{
    anvme_home *h = (anvme_home *)hh;
    ZC_CHECK(check_slot(h, slot, "read"));
    /* A lost write may have been this slot's (or may take the disk's state
     * with it): no checkpoint is handed out after one. */
    if (h->werr.rc != ZC_OK)
        return ZC_KEPT_RAISE(&h->werr);
    an_slot *sl = &h->slots[slot];
    if (!sl->tbytes || bytes > sl->tbytes)
        return ZC_ERR(ZC_ERR_INTERNAL, "nvme activation home: slot %d read for %zu bytes, "
                      "written with %zu", slot, bytes, sl->tbytes);
    if (sl->buf >= 0 && h->bufs[sl->buf].use == AN_HOLD) {
        h->io.buffer_hits++;
        *src = h->bufs[sl->buf].mem;
        return ZC_OK;
    }
    if (sl->buf < 0) {
        /* On demand: the free buffer kept for it, else the holding one
         * filled longest ago. */
        if (take_buffer(h, slot, AN_READ, true) < 0)
            return ZC_ERR(ZC_ERR_INTERNAL, "nvme activation home: no buffer to read slot %d "
                          "(%d buffers)", slot, h->nbufs);
        start_read(h, slot, sl->buf);
    }
    an_buf *b = &h->bufs[sl->buf];
    if (b->rerr.rc != ZC_OK)
        return ZC_KEPT_RAISE(&b->rerr);
    const double t0 = zc__now_s();
    const bool waited = b->rt && !zc__nvme_done(h->store, b->rt);
    ZC_CHECK(wait_io(h, b, false));
    if (waited) {
        h->io.waits++;
        h->io.wait_s += zc__now_s() - t0;
    }
    h->io.reads++;
    h->io.read_bytes += (int64_t)sl->tbytes;
    *src = b->mem;
    return ZC_OK;
}

static void an_read_end(zc_act_home *hh, int slot)
{
    anvme_home *h = (anvme_home *)hh;
    if (slot < 0 || slot >= h->p.env.nchunks || h->slots[slot].buf < 0)
        return;
    detach(h, h->slots[slot].buf);
}

static void an_drop(zc_act_home *hh)
{
    anvme_home *h = (anvme_home *)hh;
    for (int j = 0; j < h->nbufs; j++)
        if (h->bufs[j].use != AN_FREE)
            detach(h, j);
    for (int s = 0; s < h->p.env.nchunks; s++)
        h->slots[s] = (an_slot){.buf = -1};
}

static zc_status an_settle(zc_act_home *hh)
{
    anvme_home *h = (anvme_home *)hh;
    for (int j = 0; j < h->nbufs; j++)
        settle_write(h, &h->bufs[j]);
    if (h->werr.rc == ZC_OK)
        return ZC_OK;
    zc_status rc = ZC_KEPT_RAISE(&h->werr);
    zc__kept_error_clear(&h->werr);
    return rc;
}

static void an_io(const zc_act_home *hh, zc_act_home_io *out)
{
    const anvme_home *h = (const anvme_home *)hh;
    *out = h->io;
    if (h->store) {
        zc_nvme_stats ns;
        zc__nvme_stats_get(h->store, &ns);
        out->requests = ns.requests;
        out->write_requests = ns.write_requests;
    }
}

static void an_destroy(zc_act_home *hh)
{
    anvme_home *h = (anvme_home *)hh;
    zc__home_store_close(h->store, "activation swap store");
    if (h->counted_nvme)
        zc__mem_count(h->p.env.acct, ZC_MEMKIND_NVME, ZC_MEM_ACTIVATIONS,
                      -(int64_t)h->counted_nvme);
    zc__swap_dirs_remove(&h->sd);
    for (int j = 0; h->bufs && j < h->nbufs; j++)
        zc__pinned_free(h->pool, h->bufs[j].mem);
    zc__pinned_pool_destroy(h->pool);
    zc__host_free(h->p.env.acct, ZC_MEM_OTHER, h->bufs, h->bufs_bytes);
    zc__home_free(h->p.env.acct, h, sizeof *h, h->slots, h->slots_bytes);
}

static const zc_act_home_ops an_ops = {
    .name = "nvme",
    .prepare = an_prepare,
    .rank_local_io = an_rank_local_io,
    .write_begin = an_write_begin,
    .write_end = an_write_end,
    .read_start = an_read_start,
    .read_wait = an_read_wait,
    .read_end = an_read_end,
    .drop = an_drop,
    .settle = an_settle,
    .io = an_io,
    .destroy = an_destroy,
};

zc_status zc__act_home_nvme_create(const zc_act_home_params *p, zc_act_home **out)
{
    *out = NULL;
    if (p->env.nchunks < 1 || !p->slot_bytes)
        return ZC_ERR(ZC_ERR_INTERNAL, "nvme activation home: %d slots of %zu bytes",
                      p->env.nchunks, p->slot_bytes);
    if (p->buffer_count < 2 || p->buffer_count > MAX_BUFS)
        return ZC_ERR(ZC_ERR_CONFIG, "%s.buffer_count %lld: the NVMe home needs 2 to %d (one is "
                      "kept for reads on demand)", KEY, (long long)p->buffer_count, MAX_BUFS);
    ZC_CHECK(zc__swap_aio_check(p->env.aio_block_size, p->env.aio_queue_depth,
                                p->env.aio_intra_op));
    anvme_home *h;
    an_slot *slots;
    size_t slots_bytes;
    ZC_CHECK(zc__home_alloc(p->env.acct, "nvme activation home", sizeof *h, (void **)&h,
                            p->env.nchunks, sizeof *slots, (void **)&slots, &slots_bytes));
    h->base.ops = &an_ops;
    h->p = *p;
    h->p.dirs = NULL;
    h->slots = slots;
    h->slots_bytes = slots_bytes;
    h->nbufs = (int)p->buffer_count;
    h->bufs_bytes = (size_t)h->nbufs * sizeof *h->bufs;
    zc_status rc = zc__host_alloc(p->env.acct, ZC_MEM_OTHER, h->bufs_bytes,
                                  "nvme activation home buffers", (void **)&h->bufs);
    if (rc == ZC_OK)
        rc = zc__swap_dirs_init(&h->sd, p->dirs, p->ndirs, KEY);
    if (rc != ZC_OK) {
        zc__host_free(p->env.acct, ZC_MEM_OTHER, h->bufs, h->bufs_bytes);
        zc__home_free(p->env.acct, h, sizeof *h, slots, slots_bytes);
        return rc;
    }
    for (int j = 0; j < h->nbufs; j++)
        h->bufs[j].slot = -1;
    *out = &h->base;
    return ZC_OK;
}

void zc__act_home_nvme_set_faults(zc_act_home *hh, const struct zc_nvme_faults *f)
{
    if (!hh || hh->ops != &an_ops)
        return;
    anvme_home *h = (anvme_home *)hh;
    if (h->store)
        zc__nvme_set_faults(h->store, f);
}
