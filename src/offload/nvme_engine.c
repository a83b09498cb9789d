/* The NVMe store's I/O engine: turns queued tickets into requests and hands
 * them to io_uring (or, without it, to pread/pwrite).
 *
 * io_uring path: requests are prepared into SQEs (read_fixed/write_fixed when
 * the buffer lies in a registered region, registered file indices when the
 * files are registered) and submitted in one io_uring_submit per fill, so a
 * queue of N requests costs one syscall, not N. Completions are reaped in
 * batches (io_uring_for_each_cqe + one cq_advance); waiting blocks in the
 * kernel (io_uring_submit_and_wait / wait_cqe), never spins. SQPOLL is an
 * option (it burns a core). Retries of short transfers and -EAGAIN go ahead of
 * new pieces so a ticket's remainder is never starved.
 *
 * pread/pwrite path: the same bookkeeping, each request run to completion at
 * issue time. Used when the build has no liburing or the kernel refuses
 * io_uring (seccomp filters in some containers). */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/log.h"
#include "offload/nvme_internal.h"

#define CANCEL_UD UINT64_MAX

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1; older kernels answer EINVAL */
#endif

/* Asks for huge pages under the regions about to be registered. Each 4 KiB
 * page of a registered buffer is a bio segment of its own (io_uring merges
 * only whole huge folios into one segment), so with 4 KiB pages a 1 MiB
 * request is 256 segments: more than most queues' max_segments (254 on
 * virtio-blk, 127 on many NVMe drives), and the block layer splits it. On a
 * device bound by its request rate that halves throughput; fio's unregistered
 * buffers escape the split only when their pages happen to be physically
 * contiguous, which is why it looked faster in some runs. MADV_COLLAPSE copies
 * populated pages into huge pages now (mlock'd memory included); it fails
 * harmlessly for memory pinned elsewhere (cudaHostRegister) or on kernels
 * without it, and the registration goes on with 4 KiB pages. */
static void want_huge_pages(zc_nvme_store *st)
{
    const uintptr_t huge = (uintptr_t)2 << 20;
    int failed = 0, first_err = 0;
    for (int i = 0; i < st->nregions; i++) {
        uintptr_t b = ((uintptr_t)st->regions[i].base + huge - 1) & ~(huge - 1);
        uintptr_t e = ((uintptr_t)st->regions[i].base + st->regions[i].bytes) & ~(huge - 1);
        if (e <= b)
            continue;
        if (madvise((void *)b, e - b, MADV_HUGEPAGE) != 0 ||
            madvise((void *)b, e - b, MADV_COLLAPSE) != 0) {
            if (!failed++)
                first_err = errno;
        }
    }
    if (failed && !st->warned_hugepage) {
        st->warned_hugepage = true;
        ZC_LOGI("offload", "huge pages for %d of %d I/O buffer region(s) refused (%s): requests "
                "over 4 KiB pages may be split by the block layer", failed, st->nregions,
                strerror(first_err));
    }
}

#if ZC_HAVE_URING
static int find_region(const zc_nvme_store *st, const char *buf, uint32_t len)
{
    for (int i = 0; i < st->nregions; i++) {
        const nvme_region *r = &st->regions[i];
        if (buf >= r->base && buf + len <= r->base + r->bytes)
            return i;
    }
    return -1;
}
#endif

/* Whether this process already said it cannot use io_uring: every store
 * would otherwise repeat it. */
static atomic_bool warned_no_uring;

zc_status zc__nvme_engine_init(zc_nvme_store *st)
{
    st->use_uring = false;
#if ZC_HAVE_URING
    if (!(st->opts.flags & ZC_NVME_SYNC)) {
        unsigned entries = 1;
        while (entries < (unsigned)st->qd + 1)
            entries <<= 1;
        struct io_uring_params p;
        memset(&p, 0, sizeof p);
        if (st->opts.flags & ZC_NVME_SQPOLL) {
            p.flags |= IORING_SETUP_SQPOLL;
            p.sq_thread_idle = 1000; /* ms before the kernel thread sleeps */
        }
        int ret = io_uring_queue_init_params(entries, &st->ring, &p);
        if (ret < 0 && (st->opts.flags & ZC_NVME_SQPOLL)) {
            ZC_LOGW("offload", "io_uring SQPOLL refused (%s): using interrupt-driven completions",
                    strerror(-ret));
            memset(&p, 0, sizeof p);
            ret = io_uring_queue_init_params(entries, &st->ring, &p);
        }
        if (ret < 0) {
            if (!atomic_exchange(&warned_no_uring, true))
                ZC_LOGW("offload", "io_uring unavailable (%s): the NVMe store uses pread/pwrite, "
                        "one request at a time", strerror(-ret));
        } else {
            st->ring_ok = st->use_uring = true;
            ret = io_uring_register_files(&st->ring, st->fds, (unsigned)st->ndirs);
            if (ret == 0)
                st->fixed_files = true;
            else
                ZC_LOGI("offload", "io_uring: registering files failed (%s): using plain fds",
                        strerror(-ret));
        }
    }
#else
    if (!(st->opts.flags & ZC_NVME_SYNC) && !atomic_exchange(&warned_no_uring, true))
        ZC_LOGW("offload", "this build has no liburing: the NVMe store uses pread/pwrite");
#endif
    return ZC_OK;
}

void zc__nvme_engine_fini(zc_nvme_store *st)
{
#if ZC_HAVE_URING
    if (st->ring_ok) {
        /* queue_exit unregisters buffers and files with the ring. */
        io_uring_queue_exit(&st->ring);
        st->ring_ok = false;
    }
#endif
    st->use_uring = false;
}

zc_status zc__nvme_engine_register(zc_nvme_store *st)
{
    st->fixed_bufs = false;
#if ZC_HAVE_URING
    if (!st->ring_ok || (st->opts.flags & ZC_NVME_NO_FIXED))
        return ZC_OK;
    (void)io_uring_unregister_buffers(&st->ring);
    if (!st->nregions)
        return ZC_OK;
    /* After unregistering: pages the ring still pinned could not be collapsed. */
    if (!(st->opts.flags & ZC_NVME_NO_HUGEPAGE))
        want_huge_pages(st);
    int ret;
    if (st->faults.refuse_register) {
        ret = -ENOMEM;
    } else {
        struct iovec iov[ZC_NVME_MAX_REGIONS];
        for (int i = 0; i < st->nregions; i++)
            iov[i] = (struct iovec){st->regions[i].base, st->regions[i].bytes};
        ret = io_uring_register_buffers(&st->ring, iov, (unsigned)st->nregions);
    }
    if (ret == 0) {
        st->fixed_bufs = true;
    } else {
        if (!st->warned_register) {
            st->warned_register = true;
            ZC_LOGW("offload",
                    "io_uring refused to register the I/O buffers (%s%s): using plain "
                    "reads/writes, which pin pages per request",
                    strerror(-ret),
                    ret == -ENOMEM ? "; registered buffers count against RLIMIT_MEMLOCK: "
                                     "raise 'ulimit -l' or grant CAP_IPC_LOCK"
                                   : "");
        }
    }
#endif
    return ZC_OK;
}

/* Runs one request synchronously (pread/pwrite engine). */
static int sync_io(zc_nvme_store *st, nvme_req *r)
{
    ssize_t n;
    do {
        n = r->write ? pwrite(st->fds[r->file], r->buf, r->len, (off_t)r->foff)
                     : pread(st->fds[r->file], r->buf, r->len, (off_t)r->foff);
    } while (n < 0 && errno == EINTR);
    return n < 0 ? -errno : (int)n;
}

#if ZC_HAVE_URING
static zc_status submit(zc_nvme_store *st)
{
    if (!st->prepped)
        return ZC_OK;
    st->st.submit_calls++;
    int ret;
    do {
        ret = io_uring_submit(&st->ring);
    } while (ret == -EINTR);
    if (ret < 0)
        return ZC_ERR(ZC_ERR_IO, "io_uring_submit of %d requests failed: %s", st->prepped,
                      strerror(-ret));
    st->prepped = 0;
    return ZC_OK;
}

static zc_status prep(zc_nvme_store *st, uint32_t ri)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&st->ring);
    if (!sqe) {
        /* The SQ holds queue_depth + 1 entries and at most queue_depth are
         * prepared, so this only happens if the kernel has not consumed the
         * previous batch yet (SQPOLL): submit and try again. */
        ZC_CHECK(submit(st));
        sqe = io_uring_get_sqe(&st->ring);
        if (!sqe)
            return ZC_ERR(ZC_ERR_INTERNAL, "io_uring: no free SQE with %d requests active",
                          st->active);
    }
    nvme_req *r = &st->reqs[ri];
    int fd = st->fixed_files ? r->file : st->fds[r->file];
    int bi = st->fixed_bufs ? find_region(st, r->buf, r->len) : -1;
    if (bi >= 0) {
        if (r->write)
            io_uring_prep_write_fixed(sqe, fd, r->buf, r->len, r->foff, bi);
        else
            io_uring_prep_read_fixed(sqe, fd, r->buf, r->len, r->foff, bi);
    } else {
        if (r->write)
            io_uring_prep_write(sqe, fd, r->buf, r->len, r->foff);
        else
            io_uring_prep_read(sqe, fd, r->buf, r->len, r->foff);
    }
    if (st->fixed_files)
        sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, (uint64_t)ri + 1);
    st->prepped++;
    st->kernel_inflight++;
    return ZC_OK;
}
#endif

/* Hands one request to the engine. */
static zc_status issue(zc_nvme_store *st, uint32_t ri)
{
    st->st.submitted++;
#if ZC_HAVE_URING
    if (st->use_uring) {
        ZC_CHECK(prep(st, ri));
        /* aio.single_submit: each request is its own submission (DeepSpeed's
         * "individual requests" mode; a syscall per request). */
        return (st->opts.flags & ZC_NVME_SINGLE_SUBMIT) ? submit(st) : ZC_OK;
    }
#endif
    zc__nvme_complete(st, ri, sync_io(st, &st->reqs[ri]));
    return ZC_OK;
}

/* Cuts the next piece of the ticket at the head of the pending FIFO into a
 * free request slot (the caller checked there is one) and returns its index;
 * NIL when the head had nothing left to cut (finished or stopped by an error).
 * A ticket leaves the FIFO once fully cut. */
static uint32_t next_piece(zc_nvme_store *st)
{
    uint32_t ti = st->pend_head, ri = NIL;
    nvme_ticket *t = &st->tickets[ti];
    if (t->issued < t->len) {
        ri = st->free_reqs[--st->nfree_reqs];
        nvme_req *r = &st->reqs[ri];
        uint64_t o = t->off + t->issued;
        uint64_t unit = o / st->stripe, within = o % st->stripe;
        uint64_t len = t->len - t->issued;
        if (len > st->stripe - within)
            len = st->stripe - within;
        if (len > st->block)
            len = st->block;
        memset(r, 0, sizeof *r);
        r->active = true;
        r->write = t->write;
        r->ticket = ti;
        r->file = (int)(unit % (uint64_t)st->ndirs);
        r->foff = (unit / (uint64_t)st->ndirs) * st->stripe + within;
        r->buf = t->buf + t->issued;
        r->len = (uint32_t)len;
        r->piece_foff = r->foff;
        r->piece_len = r->len;
        r->seq = ++st->seq;
        if (r->write)
            r->wseq = ++st->wseq;
        r->next_retry = NIL;
        t->issued += len;
        t->inflight++;
        st->active++;
    }
    if (t->issued >= t->len) {
        st->pend_head = t->next_pending;
        if (st->pend_head == NIL)
            st->pend_tail = NIL;
        t->pending = false;
        t->next_pending = NIL;
    }
    return ri;
}

zc_status zc__nvme_engine_fill(zc_nvme_store *st)
{
    /* aio.overlap_events false: no new request while the kernel still holds
     * some; the caller's wait reaps them and fills again (so a caller that
     * finds nothing in flight after a fill always has something to wait
     * for). */
    if ((st->opts.flags & ZC_NVME_NO_OVERLAP) && st->kernel_inflight > 0)
        return ZC_OK;
    const int64_t issued_before = st->st.submitted;
    const bool earlier_in_kernel = st->kernel_inflight > 0;
    bool progress = true;
    while (progress) {
        progress = false;
        while (st->retry_head != NIL) {
            uint32_t ri = st->retry_head;
            nvme_req *r = &st->reqs[ri];
            st->retry_head = r->next_retry;
            if (st->retry_head == NIL)
                st->retry_tail = NIL;
            r->queued_retry = false;
            r->next_retry = NIL;
            ZC_CHECK(issue(st, ri));
            progress = true;
        }
        while (st->nfree_reqs > 0 && st->pend_head != NIL) {
            uint32_t ri = next_piece(st);
            if (ri != NIL) {
                ZC_CHECK(issue(st, ri));
                progress = true;
            }
        }
    }
#if ZC_HAVE_URING
    if (st->use_uring)
        ZC_CHECK(submit(st));
#endif
    if (earlier_in_kernel && st->st.submitted > issued_before)
        st->st.overlapped_submits++;
    return ZC_OK;
}

zc_status zc__nvme_engine_reap(zc_nvme_store *st, bool wait)
{
#if ZC_HAVE_URING
    if (!st->use_uring)
        return ZC_OK;
    struct io_uring_cqe *cqe;
    int ret;
    if (wait) {
        do {
            ret = st->prepped ? io_uring_submit_and_wait(&st->ring, 1)
                              : io_uring_wait_cqe(&st->ring, &cqe);
        } while (ret == -EINTR);
        if (ret < 0)
            return ZC_ERR(ZC_ERR_IO, "io_uring wait for completions failed: %s", strerror(-ret));
        if (st->prepped) {
            st->st.submit_calls++;
            st->prepped = 0;
        }
    }
    unsigned head, n = 0;
    io_uring_for_each_cqe(&st->ring, head, cqe)
    {
        n++;
        uint64_t ud = io_uring_cqe_get_data64(cqe);
        if (ud == CANCEL_UD || ud == 0 || ud > (uint64_t)st->qd)
            continue;
        st->kernel_inflight--;
        zc__nvme_complete(st, (uint32_t)(ud - 1), cqe->res);
    }
    io_uring_cq_advance(&st->ring, n);
#else
    (void)wait;
#endif
    return ZC_OK;
}

void zc__nvme_engine_cancel_all(zc_nvme_store *st)
{
#if ZC_HAVE_URING
    if (!st->use_uring || !st->kernel_inflight)
        return;
    if (submit(st) != ZC_OK)
        return;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&st->ring);
    if (!sqe)
        return;
    /* Block-device reads and writes that already reached the driver cannot be
     * cancelled (-EALREADY); those still queued in io-wq can. Either way the
     * caller waits for every CQE afterwards. */
    io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);
    io_uring_sqe_set_data64(sqe, CANCEL_UD);
    st->prepped++;
    (void)submit(st);
#else
    (void)st;
#endif
}
