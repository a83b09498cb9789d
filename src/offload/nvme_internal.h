/* The NVMe store's private state, shared by nvme_open.c (options, files,
 * their space, the tables), nvme_store.c (tickets, waiting, closing) and
 * nvme_engine.c (io_uring / pread engine). */
#ifndef ZC_OFFLOAD_NVME_INTERNAL_H
#define ZC_OFFLOAD_NVME_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "zc_build_config.h"

#include "offload/offload.h"

#if ZC_HAVE_URING
#include <liburing.h>
#endif

#define ZC_NVME_MAX_DIRS 16
#define ZC_NVME_MAX_REGIONS 64
#define NIL UINT32_MAX

/* One request in the kernel (or about to be): a piece of one ticket. Its
 * index + 1 is the io_uring user_data. */
typedef struct nvme_req {
    bool active;
    bool queued_retry;    /* on the retry list, waiting for a free SQE */
    bool write;
    bool counted_fault;   /* the fault counters already saw this request */
    int file;             /* directory index */
    int buf_index;        /* registered buffer or -1 */
    uint32_t ticket;      /* ticket slot */
    uint64_t foff;        /* next file offset to transfer */
    char *buf;            /* next byte to transfer */
    uint32_t len;         /* bytes still to transfer */
    uint64_t piece_foff;  /* the piece as first issued, for error reports */
    uint32_t piece_len;
    int64_t seq;          /* request number (fault injection) */
    int64_t wseq;         /* write number (fault injection) */
    uint32_t next_retry;
} nvme_req;

typedef struct nvme_ticket {
    uint32_t gen;         /* bumped on retire, so stale tickets are detected */
    bool live;
    bool write;
    uint64_t off, len;    /* the extent in store space */
    char *buf;
    uint64_t issued;      /* bytes of the extent turned into requests */
    int inflight;         /* requests of this ticket active */
    int64_t order;        /* submission order (wait_all reports the first error) */
    uint32_t next_pending;
    bool pending;         /* in the pending FIFO */
    zc_nvme_error err;
    int64_t tl_t0;        /* the timeline: when it was submitted (0: not recorded) */
    int tl_inflight;      /* the timeline: requests active at its submission */
} nvme_ticket;

typedef struct nvme_region {
    char *base;
    size_t bytes;
} nvme_region;

struct zc_nvme_store {
    zc_nvme_opts opts;
    int ndirs;
    char dirs[ZC_NVME_MAX_DIRS][512];
    char paths[ZC_NVME_MAX_DIRS][512];
    int fds[ZC_NVME_MAX_DIRS];
    bool created[ZC_NVME_MAX_DIRS];
    int at_dirfd;         /* ZC_NVME_FILE_AT: the named file's directory (the
                             caller's descriptor), else -1 */
    char at_name[256];    /* ZC_NVME_FILE_AT: its name there */
    uint64_t file_bytes;  /* per file */
    uint64_t capacity;
    size_t align, block, stripe;
    int qd;

    bool direct, use_uring, fixed_files, fixed_bufs;
    bool warned_register, warned_eof, warned_hugepage;
#if ZC_HAVE_URING
    struct io_uring ring;
    bool ring_ok;
#endif
    nvme_region *regions;
    int nregions;

    nvme_req *reqs;       /* qd entries */
    uint32_t *free_reqs;  /* stack of free request slots */
    int nfree_reqs;
    int active;           /* requests active (in the kernel or queued for retry) */
    int kernel_inflight;  /* requests handed to the kernel, CQE not yet seen */
    uint32_t retry_head, retry_tail;
    int prepped;          /* SQEs prepared, not yet submitted */

    nvme_ticket *tickets;
    int nticket_slots, cap_tickets;
    uint32_t free_ticket; /* free list through next_pending */
    uint32_t pend_head, pend_tail;
    int64_t live_tickets;
    int64_t order;

    zc_nvme_faults faults;
    int64_t seq, wseq;
    zc_nvme_stats st;
};

/* nvme_engine.c */
zc_status zc__nvme_engine_init(zc_nvme_store *st);
void zc__nvme_engine_fini(zc_nvme_store *st);
/* Issues queued work up to queue_depth and submits it in one batch. */
zc_status zc__nvme_engine_fill(zc_nvme_store *st);
/* Reaps completions; with wait, blocks until at least one arrives (only
 * called when something is in the kernel). */
zc_status zc__nvme_engine_reap(zc_nvme_store *st, bool wait);
/* Asks the kernel to cancel every request in flight (best effort). */
void zc__nvme_engine_cancel_all(zc_nvme_store *st);
zc_status zc__nvme_engine_register(zc_nvme_store *st);

/* nvme_store.c: a request finished; res as a CQE's (bytes or -errno). */
void zc__nvme_complete(zc_nvme_store *st, uint32_t ri, int res);
/* nvme_open.c: closes the files' descriptors and removes the names this
 * store made (only those it created, with only_created); frees the store
 * and its tables (the io_uring engine first). */
void zc__nvme_remove_files(zc_nvme_store *st, bool only_created);
void zc__nvme_free_store(zc_nvme_store *st);

#endif
