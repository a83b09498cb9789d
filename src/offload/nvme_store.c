/* The NVMe store: tickets and their errors, submission, waiting, closing
 * (opening it - its files and their space - is nvme_open.c).
 *
 * Store space [0, capacity) is cut into stripes of stripe_bytes dealt round
 * robin over the directories (stripe u lives in file u % ndirs at offset
 * (u / ndirs) * stripe), so a user with two drives streams from both. Each
 * ticket is an extent; the engine (nvme_engine.c) cuts it into requests of at
 * most block_size that never cross a stripe.
 *
 * Lifetime of a ticket: submit puts it in the pending FIFO; fill cuts pieces
 * while request slots are free; each completion either finishes its piece,
 * queues the remainder (short transfer, -EAGAIN) or records the ticket's first
 * error and stops cutting; wait retires it. A ticket id carries its slot and
 * generation so a stale id is rejected, not confused with a newer ticket. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/env.h"
#include "offload/nvme_internal.h"
#include "offload/offload_internal.h"
#include "trace/trace.h"

static const char *errname(int e)
{
    const char *n = strerrorname_np(e);
    return n ? n : "?";
}

static zc_nvme_ticket make_ticket(uint32_t slot, uint32_t gen)
{
    return ((uint64_t)gen << 32) | ((uint64_t)slot + 1);
}

static nvme_ticket *lookup(zc_nvme_store *st, zc_nvme_ticket id, uint32_t *slot)
{
    uint64_t s = id & 0xffffffffu;
    if (!st || s == 0 || s > (uint64_t)st->nticket_slots)
        return NULL;
    nvme_ticket *t = &st->tickets[s - 1];
    if (!t->live || t->gen != (uint32_t)(id >> 32))
        return NULL;
    if (slot)
        *slot = (uint32_t)(s - 1);
    return t;
}

static bool ticket_done(const nvme_ticket *t) { return t->issued >= t->len && t->inflight == 0; }

/* ------------------------------------------------------------------------- */
/* Completion (called by the engine)                                         */
/* ------------------------------------------------------------------------- */

static void record_error(zc_nvme_store *st, nvme_ticket *t, const nvme_req *r, int err)
{
    if (t->err.err)
        return;
    t->err.err = err;
    t->err.is_write = r->write;
    snprintf(t->err.path, sizeof t->err.path, "%s", st->paths[r->file]);
    t->err.file_offset = r->piece_foff;
    t->err.length = r->piece_len;
    t->err.store_offset = t->off;
    t->err.store_length = t->len;
    /* Stop cutting the rest of the extent: the ticket has failed. */
    t->issued = t->len;
}

static void push_retry(zc_nvme_store *st, uint32_t ri)
{
    nvme_req *r = &st->reqs[ri];
    r->queued_retry = true;
    r->next_retry = NIL;
    if (st->retry_tail == NIL)
        st->retry_head = ri;
    else
        st->reqs[st->retry_tail].next_retry = ri;
    st->retry_tail = ri;
    st->st.resubmitted++;
}

void zc__nvme_complete(zc_nvme_store *st, uint32_t ri, int res)
{
    nvme_req *r = &st->reqs[ri];
    nvme_ticket *t = &st->tickets[r->ticket];
    const zc_nvme_faults *f = &st->faults;
    if (!r->counted_fault) {
        /* Faults apply to the first completion of a request only, so an
         * injected short transfer is followed by a genuine remainder. */
        r->counted_fault = true;
        if (f->eio_at && r->seq == f->eio_at)
            res = -EIO;
        else if (f->enospc_write_at && r->write && r->wseq == f->enospc_write_at)
            res = -ENOSPC;
        else if (f->eagain_at && r->seq == f->eagain_at)
            res = -EAGAIN;
        else if (f->short_at && r->seq == f->short_at && res > 0) {
            size_t half = ((size_t)res / 2) / st->align * st->align;
            res = (int)(half ? half : (size_t)res);
        }
    }
    if (res == -EAGAIN || res == -EINTR) {
        push_retry(st, ri);
        return;
    }
    if (res > 0 && (uint32_t)res < r->len && !t->err.err) {
        /* Short transfer: continue where it stopped. */
        r->buf += res;
        r->foff += (uint64_t)res;
        r->len -= (uint32_t)res;
        push_retry(st, ri);
        return;
    }
    if (res == 0 && r->len)
        res = -ENODATA; /* end of file inside the reserved size: never expected */
    if (res < 0)
        record_error(st, t, r, -res);
    r->active = false;
    st->free_reqs[st->nfree_reqs++] = ri;
    st->active--;
    t->inflight--;
    if (t->tl_t0 && ticket_done(t)) {
        /* The timeline: the request from its submission to its last piece. */
        zc__tl_nvme(t->tl_t0, t->write, (int64_t)t->len, t->tl_inflight, st->qd);
        t->tl_t0 = 0;
    }
}

/* ------------------------------------------------------------------------- */
/* Submission and waiting                                                    */
/* ------------------------------------------------------------------------- */

static zc_status submit_extent(zc_nvme_store *st, bool write, uint64_t offset, void *buf,
                               size_t len, zc_nvme_ticket *ticket)
{
    const char *op = write ? "write" : "read";
    if (!st || !buf || !ticket)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "NVMe %s: %s is NULL", op,
                      !st ? "store" : !buf ? "buffer" : "ticket");
    *ticket = 0;
    if (!len)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "NVMe %s of 0 bytes at offset %llu", op,
                      (unsigned long long)offset);
    if (offset % st->align || len % st->align || (uintptr_t)buf % st->align)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "NVMe %s: offset %llu, length %zu and buffer %p must all be multiples of "
                      "%zu bytes (the required alignment of '%s')",
                      op, (unsigned long long)offset, len, buf, st->align, st->paths[0]);
    if (offset > st->capacity || len > st->capacity - offset)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "NVMe %s of %zu bytes at offset %llu is beyond the "
                      "store's capacity %llu", op, len, (unsigned long long)offset,
                      (unsigned long long)st->capacity);
    uint32_t slot = st->free_ticket;
    if (slot == NIL) {
        if (st->nticket_slots == st->cap_tickets) {
            int ncap = st->cap_tickets ? st->cap_tickets * 2 : 64;
            nvme_ticket *n;
            ZC_CHECK(zc__host_alloc(NULL, ZC_MEM_OTHER, (size_t)ncap * sizeof *n, "NVMe tickets",
                                    (void **)&n));
            if (st->tickets) {
                memcpy(n, st->tickets, (size_t)st->cap_tickets * sizeof *n);
                zc__host_free(NULL, ZC_MEM_OTHER, st->tickets,
                              (size_t)st->cap_tickets * sizeof *n);
            }
            st->tickets = n;
            st->cap_tickets = ncap;
        }
        slot = (uint32_t)st->nticket_slots++;
    } else {
        st->free_ticket = st->tickets[slot].next_pending;
    }
    nvme_ticket *t = &st->tickets[slot];
    uint32_t gen = t->gen;
    memset(t, 0, sizeof *t);
    t->gen = gen;
    t->live = true;
    t->write = write;
    t->off = offset;
    t->len = len;
    t->buf = buf;
    t->order = ++st->order;
    t->tl_t0 = zc__tl_begin();
    t->tl_inflight = st->active;
    t->next_pending = NIL;
    t->pending = true;
    if (st->pend_tail == NIL)
        st->pend_head = slot;
    else
        st->tickets[st->pend_tail].next_pending = slot;
    st->pend_tail = slot;
    st->live_tickets++;
    *ticket = make_ticket(slot, gen);
    /* Hand what fits to the kernel now: submission is where overlap starts. */
    return zc__nvme_engine_fill(st);
}

zc_status zc__nvme_write(zc_nvme_store *st, uint64_t offset, const void *buf, size_t len,
                         zc_nvme_ticket *ticket)
{
    return submit_extent(st, true, offset, (void *)buf, len, ticket);
}

zc_status zc__nvme_read(zc_nvme_store *st, uint64_t offset, void *buf, size_t len,
                        zc_nvme_ticket *ticket)
{
    return submit_extent(st, false, offset, buf, len, ticket);
}

/* Drives the engine until ticket slot `slot` is done. */
static zc_status drive_until(zc_nvme_store *st, uint32_t slot)
{
    nvme_ticket *t = &st->tickets[slot];
    while (!ticket_done(t)) {
        ZC_CHECK(zc__nvme_engine_fill(st));
        if (ticket_done(t))
            break;
        if (!st->kernel_inflight)
            return ZC_ERR(ZC_ERR_INTERNAL, "NVMe store: ticket at offset %llu is not done but "
                          "nothing is in flight", (unsigned long long)t->off);
        ZC_CHECK(zc__nvme_engine_reap(st, true));
    }
    return ZC_OK;
}

static zc_status retire(zc_nvme_store *st, uint32_t slot, zc_nvme_error *err)
{
    nvme_ticket *t = &st->tickets[slot];
    zc_nvme_error e = t->err;
    bool write = t->write;
    t->live = false;
    t->gen++;
    t->next_pending = st->free_ticket;
    st->free_ticket = slot;
    st->live_tickets--;
    if (err)
        *err = e;
    if (!e.err)
        return ZC_OK;
    char a[32];
    return ZC_ERR(ZC_ERR_IO,
                  "NVMe %s of %s at offset %llu of '%s' (store extent %llu+%llu) failed: %s (%s)",
                  write ? "write" : "read", zc__offload_fmt_bytes(a, e.length),
                  (unsigned long long)e.file_offset, e.path, (unsigned long long)e.store_offset,
                  (unsigned long long)e.store_length, strerror(e.err), errname(e.err));
}

zc_status zc__nvme_wait(zc_nvme_store *st, zc_nvme_ticket ticket, zc_nvme_error *err)
{
    uint32_t slot;
    if (err)
        memset(err, 0, sizeof *err);
    if (!lookup(st, ticket, &slot))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "NVMe wait: ticket %#llx is unknown or already waited "
                      "for", (unsigned long long)ticket);
    /* The timeline: the host waiting, when it has to. */
    const nvme_ticket *t = &st->tickets[slot];
    const int64_t t0 = ticket_done(t) ? 0 : zc__tl_begin();
    const int64_t bytes = (int64_t)t->len;
    ZC_CHECK(drive_until(st, slot));
    zc__tl_nvme_wait(t0, bytes);
    return retire(st, slot, err);
}

bool zc__nvme_done(zc_nvme_store *st, zc_nvme_ticket ticket)
{
    uint32_t slot;
    nvme_ticket *t = lookup(st, ticket, &slot);
    if (!t)
        return false;
    if (zc__nvme_engine_fill(st) != ZC_OK || zc__nvme_engine_reap(st, false) != ZC_OK)
        return true; /* an engine failure: the wait will report it */
    (void)zc__nvme_engine_fill(st);
    return ticket_done(t);
}

bool zc__nvme_busy(const zc_nvme_store *st)
{
    return st && (st->active > 0 || st->pend_head != NIL);
}

zc_status zc__nvme_wait_all(zc_nvme_store *st)
{
    if (!st)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc__nvme_wait_all: store is NULL");
    /* Finish everything first, then retire in submission order so the error
     * reported is the earliest one. */
    zc_status first = ZC_OK;
    char msg[1024] = "";
    const int64_t t0 = st->live_tickets ? zc__tl_begin() : 0;
    while (st->live_tickets) {
        uint32_t best = NIL;
        for (int i = 0; i < st->nticket_slots; i++)
            if (st->tickets[i].live && (best == NIL || st->tickets[i].order < st->tickets[best].order))
                best = (uint32_t)i;
        ZC_CHECK(drive_until(st, best));
        zc_status rc = retire(st, best, NULL);
        if (rc != ZC_OK && first == ZC_OK) {
            first = rc;
            snprintf(msg, sizeof msg, "%s", zc_last_error());
        }
    }
    zc__tl_nvme_wait(t0, 0);
    if (first != ZC_OK)
        return ZC_ERR(first, "%s", msg);
    return ZC_OK;
}

void zc__nvme_stats_get(const zc_nvme_store *st, zc_nvme_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!st)
        return;
    *out = st->st;
    out->tickets_live = st->live_tickets;
    out->inflight = st->kernel_inflight;
    out->direct = st->direct;
    out->fixed_buffers = st->fixed_bufs;
    out->fixed_files = st->fixed_files;
    out->uring = st->use_uring;
    out->alignment = st->align;
    out->capacity = st->capacity;
    out->unnamed = !st->opts.file && !(st->opts.flags & ZC_NVME_KEEP_FILES);
    for (int i = 0; i < st->ndirs; i++)
        out->unnamed = out->unnamed && !st->created[i];
    out->requests = st->seq;
    out->write_requests = st->wseq;
}

const char *zc__nvme_path(const zc_nvme_store *st, int i)
{
    if (!st || i < 0 || i >= st->ndirs)
        return NULL;
    return st->paths[i];
}

int64_t zc__nvme_file_size(const zc_nvme_store *st, int i)
{
    struct stat sb;
    if (!st || i < 0 || i >= st->ndirs || fstat(st->fds[i], &sb) != 0)
        return -1;
    return (int64_t)sb.st_size;
}

zc_status zc__nvme_close(zc_nvme_store *st, zc_nvme_close_mode mode)
{
    if (!st)
        return ZC_OK;
    zc_status rc = ZC_OK;
    if (mode == ZC_NVME_CLOSE_CANCEL) {
        /* Nothing new reaches the kernel: queued pieces and retries end as
         * ECANCELED on their tickets. */
        for (uint32_t s = st->pend_head; s != NIL; s = st->tickets[s].next_pending) {
            nvme_ticket *t = &st->tickets[s];
            if (!t->err.err && t->issued < t->len) {
                t->err.err = ECANCELED;
                t->err.store_offset = t->off;
                t->err.store_length = t->len;
            }
            t->issued = t->len;
        }
        st->pend_head = st->pend_tail = NIL;
        while (st->retry_head != NIL) {
            uint32_t ri = st->retry_head;
            st->retry_head = st->reqs[ri].next_retry;
            st->reqs[ri].queued_retry = false;
            zc__nvme_complete(st, ri, -ECANCELED);
        }
        st->retry_tail = NIL;
        zc__nvme_engine_cancel_all(st);
        /* Whatever the kernel could not cancel completes normally: wait for
         * every CQE so no request writes into freed buffers after close. */
        while (st->kernel_inflight) {
            zc_status r = zc__nvme_engine_reap(st, true);
            if (r != ZC_OK) {
                rc = r;
                break;
            }
            /* Completions may queue retries (short transfers): drop them. */
            while (st->retry_head != NIL) {
                uint32_t ri = st->retry_head;
                st->retry_head = st->reqs[ri].next_retry;
                zc__nvme_complete(st, ri, -ECANCELED);
            }
            st->retry_tail = NIL;
        }
        st->live_tickets = 0;
    } else {
        rc = zc__nvme_wait_all(st);
    }
    /* Only a name this store made and still holds (a swap file whose
     * unlink failed at open); unnamed files go with their descriptors. */
    if (!(st->opts.flags & ZC_NVME_KEEP_FILES) && !st->opts.file)
        zc__nvme_remove_files(st, true);
    zc__nvme_free_store(st);
    return rc;
}

zc_status zc__nvme_fsync(zc_nvme_store *st)
{
    if (!st)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc__nvme_fsync: store is NULL");
    ZC_CHECK(zc__nvme_wait_all(st));
    for (int i = 0; i < st->ndirs; i++)
        if (fsync(st->fds[i]) != 0)
            return ZC_ERR(ZC_ERR_IO, "%s: fsync: %s", st->paths[i], strerror(errno));
    return ZC_OK;
}

/* ------------------------------------------------------------------------- */
/* Fault injection                                                           */
/* ------------------------------------------------------------------------- */

void zc__nvme_set_faults(zc_nvme_store *st, const zc_nvme_faults *f)
{
    if (!st)
        return;
    if (f)
        st->faults = *f;
    else
        memset(&st->faults, 0, sizeof st->faults);
}

zc_status zc__nvme_parse_faults(const char *spec, zc_nvme_faults *out)
{
    memset(out, 0, sizeof *out);
    if (!spec)
        return ZC_OK;
    /* Strict like every variable (base/env.h): whole items, no empty one,
     * counts that are whole numbers >= 1. */
    char buf[256], shown[ZC_ENV_SHOWN_MAX];
    if (strlen(spec) >= sizeof buf)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "ZC_NVME_FAULTS='%s' is longer than %zu bytes",
                      zc__env_shown(spec, shown, sizeof shown), sizeof buf - 1);
    snprintf(buf, sizeof buf, "%s", spec);
    for (char *it = buf, *next; it; it = next) {
        char *comma = strchr(it, ',');
        next = comma ? comma + 1 : NULL;
        if (comma)
            *comma = '\0';
        char *eq = strchr(it, '=');
        int64_t k = 0;
        if (eq) {
            *eq = '\0';
            if (!zc__parse_i64(eq + 1, strlen(eq + 1), 1, INT64_MAX, &k))
                return ZC_ERR(ZC_ERR_INVALID_ARG, "ZC_NVME_FAULTS: '%s=%s' needs a request "
                              "number, a whole number in [1, %lld]", it,
                              zc__env_shown(eq + 1, shown, sizeof shown), (long long)INT64_MAX);
        }
        if (!strcmp(it, "eio") && eq)
            out->eio_at = k;
        else if (!strcmp(it, "short") && eq)
            out->short_at = k;
        else if (!strcmp(it, "eagain") && eq)
            out->eagain_at = k;
        else if (!strcmp(it, "enospc") && eq)
            out->enospc_write_at = k;
        else if (!strcmp(it, "nodirect") && !eq)
            out->refuse_direct = true;
        else if (!strcmp(it, "noregister") && !eq)
            out->refuse_register = true;
        else if (!strcmp(it, "notmpfile") && !eq)
            out->refuse_tmpfile = true;
        else if (!strcmp(it, "nounlink") && !eq)
            out->refuse_unlink = true;
        else
            return ZC_ERR(ZC_ERR_INVALID_ARG, "ZC_NVME_FAULTS: unknown item '%s' (known: eio=K, "
                          "short=K, eagain=K, enospc=K, nodirect, noregister, notmpfile, "
                          "nounlink; no empty item)",
                          zc__env_shown(it, shown, sizeof shown));
    }
    return ZC_OK;
}
