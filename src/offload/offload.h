/* Offload I/O (internal): the pinned host pool and the NVMe store.
 *
 * These are the two foundations ZeRO-Offload and ZeRO-Infinity stand on: host
 * memory the device can DMA from (and io_uring can register), and a file store
 * that streams shards to and from NVMe at the drive's speed. The homes of
 * src/offload (homes.h) build on them. The engine reaches the homes through
 * homes.h and uses only the host memory limits of this header (the
 * pre-flight); the checkpoints (src/ckpt) read and write through the store.
 *
 * Conventions for every function below (same as the public header):
 *   - Fallible calls return zc_status and leave zc_last_error() with context
 *     (paths, sizes, offsets, errno text). On failure nothing observable has
 *     changed: no memory is held, no file is left behind.
 *   - destroy/close functions accept NULL.
 *   - Thread-safety is stated per object.
 */
#ifndef ZC_OFFLOAD_OFFLOAD_H
#define ZC_OFFLOAD_OFFLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/alloc.h"
#include "base/error.h"

/* ========================================================================= */
/* Host memory limits                                                        */
/* ========================================================================= */

/* What the machine can give this process, read from /proc and /sys. Fields
 * that cannot be read are UINT64_MAX ("no limit known"). */
typedef struct zc_host_mem_limits {
    uint64_t mem_available;  /* /proc/meminfo MemAvailable */
    uint64_t cgroup_limit;   /* cgroup v2 memory.max or v1 memory.limit_in_bytes
                                (the smallest along the path to the root) */
    uint64_t cgroup_usage;   /* memory.current / memory.usage_in_bytes of that cgroup */
    uint64_t memlock_limit;  /* RLIMIT_MEMLOCK soft limit */
    bool can_lock_unlimited; /* CAP_IPC_LOCK: the memlock limit does not apply */
    char cgroup_path[704];   /* the file the cgroup limit came from, or "" */
} zc_host_mem_limits;

/* Reads the limits. `root` prefixes every path ("/" or NULL for the real
 * system; tests point it at a directory of fake proc/sys files). Never fails:
 * unreadable values stay UINT64_MAX. Thread-safe. */
void zc__host_mem_limits_read(const char *root, zc_host_mem_limits *out);

/* Checks a request of `bytes` of host memory (`what` names it in the message)
 * against lim: more than MemAvailable or than the cgroup's remaining headroom
 * fails with ZC_ERR_NO_MEMORY saying how much was asked, how much is available
 * and what to change. With need_lock, a request above RLIMIT_MEMLOCK (without
 * CAP_IPC_LOCK) fails the same way. Pure function of its arguments; thread-safe. */
zc_status zc__host_mem_check(const zc_host_mem_limits *lim, uint64_t bytes, bool need_lock,
                             const char *what);

/* ========================================================================= */
/* Pinned host pool                                                          */
/* ========================================================================= */

typedef struct zc_pinned_pool zc_pinned_pool;

/* Pool flags. */
#define ZC_PINNED_REQUIRE_LOCK 0x1u /* fail instead of falling back to unlocked memory */
#define ZC_PINNED_NO_LOCK      0x2u /* never lock (plain page-aligned memory, no warning) */
#define ZC_PINNED_NO_CUDA      0x4u /* do not cudaHostRegister even with a device */

typedef struct zc_pinned_pool_opts {
    size_t size;          /* sizeof(zc_pinned_pool_opts) */
    size_t slab_bytes;    /* slab size; 0 = 64 MiB. Rounded up to the page size,
                             at most 1 GiB (io_uring's limit per registered buffer).
                             A larger request gets a slab of its own. */
    size_t reserve_bytes; /* slabs created up front (0 = none; grow on demand) */
    size_t max_bytes;     /* cap on all slabs together (0 = no cap) */
    int numa_node;        /* -1 = the device's node when known, else the calling
                             thread's node; >= 0 forces that node */
    int device_index;     /* CUDA device whose node to use and with which to
                             register; -1 = device 0 when present */
    unsigned flags;       /* ZC_PINNED_* */
    zc_mem_account *acct; /* owner account for zc__mem_count (may be NULL) */
} zc_pinned_pool_opts;

#define ZC_PINNED_POOL_OPTS_INIT { sizeof(zc_pinned_pool_opts), 0, 0, 0, -1, -1, 0u, NULL }

/* How the pool's slabs were obtained. */
typedef enum zc_pinned_mode {
    ZC_PINNED_CUDA_REGISTERED = 0, /* anonymous mmap + cudaHostRegister */
    ZC_PINNED_MLOCKED,             /* anonymous mmap + mlock */
    ZC_PINNED_UNLOCKED             /* anonymous mmap, not locked (one warning said why) */
} zc_pinned_mode;

typedef struct zc_pinned_pool_stats {
    size_t slab_bytes;     /* bytes held in slabs (mapped and, if locked, locked) */
    size_t used_bytes;     /* bytes handed out (rounded to the pool's granule) */
    int64_t live_allocs;   /* allocations not yet freed */
    int nslabs;
    int numa_node;         /* node the slabs are bound to, -1 if not bound */
    zc_pinned_mode mode;
} zc_pinned_pool_stats;

/* A contiguous slab, for registering the pool's memory elsewhere (io_uring). */
typedef struct zc_mem_region {
    void *base;
    size_t bytes;
} zc_mem_region;

/* Creates a pool. opts may be NULL (defaults). Decides once how memory is
 * pinned: with a CUDA device (and not ZC_PINNED_NO_CUDA) slabs are anonymous
 * mmaps registered with cudaHostRegister; otherwise they are mlock'd, and when
 * RLIMIT_MEMLOCK forbids that, plain memory with one warning (or
 * ZC_ERR_NO_MEMORY with ZC_PINNED_REQUIRE_LOCK). reserve_bytes is checked
 * against the machine's limits first (zc__host_mem_check). The caller owns
 * *out; destroy with zc__pinned_pool_destroy. */
zc_status zc__pinned_pool_create(zc_pinned_pool **out, const zc_pinned_pool_opts *opts);

/* Hands out `bytes` (> 0) aligned to `align` (a power of two <= page size; 0 =
 * page size), from an existing slab or a new one. The memory is not zeroed.
 * Counted as ZC_MEMKIND_PINNED in category `cat` (global counters and the
 * pool's account). Fails with ZC_ERR_NO_MEMORY naming `what`, the size and the
 * limit that stopped it (pool cap, MemAvailable, cgroup), and when the
 * allocator's fault injection says so (zc__mem_fail_after(ZC_MEMKIND_PINNED, k)).
 * Thread-safe. */
zc_status zc__pinned_alloc(zc_pinned_pool *pool, size_t bytes, size_t align, zc_mem_category cat,
                           const char *what, void **out);

/* Returns memory from zc__pinned_alloc. NULL is a no-op; a pointer the pool did
 * not hand out is reported as an internal error (logged) and ignored.
 * Thread-safe. */
void zc__pinned_free(zc_pinned_pool *pool, void *p);

/* Fills *out. Thread-safe. */
void zc__pinned_pool_stats_get(zc_pinned_pool *pool, zc_pinned_pool_stats *out);

/* Copies up to cap slab regions into regions; returns how many slabs exist.
 * Regions stay valid until the pool is destroyed (slabs are never unmapped
 * while the pool lives). Thread-safe. */
int zc__pinned_pool_regions(zc_pinned_pool *pool, zc_mem_region *regions, int cap);

/* Unmaps every slab. Allocations still live are reported (one warning with
 * their count) and stay counted, so a leak check after teardown sees them.
 * NULL is a no-op.
 * Not thread-safe with other calls on the pool. */
void zc__pinned_pool_destroy(zc_pinned_pool *pool);

/* ========================================================================= */
/* NVMe store                                                                */
/* ========================================================================= */

typedef struct zc_nvme_store zc_nvme_store;

/* A ticket names one submitted read or write; 0 is never a valid ticket. */
typedef uint64_t zc_nvme_ticket;

/* Store flags. */
#define ZC_NVME_KEEP_FILES   0x01u /* do not remove the files on close */
#define ZC_NVME_SQPOLL       0x02u /* kernel submission thread (burns a core) */
#define ZC_NVME_BUFFERED     0x04u /* never use O_DIRECT */
#define ZC_NVME_NO_FIXED     0x08u /* do not register buffers (plain read/write) */
#define ZC_NVME_SYNC         0x10u /* pread/pwrite instead of io_uring */
#define ZC_NVME_NO_FALLOCATE 0x20u /* size with ftruncate only (sparse) */
#define ZC_NVME_NO_HUGEPAGE  0x40u /* leave registered regions' pages as they are */
#define ZC_NVME_SINGLE_SUBMIT 0x80u /* aio.single_submit: one io_uring_submit per
                                      request instead of one per batch */
#define ZC_NVME_NO_OVERLAP   0x100u /* aio.overlap_events false: submit the next
                                      batch only once the kernel has completed
                                      every request of the previous one */
#define ZC_NVME_READ_ONLY    0x200u /* with opts.file: open the existing file
                                      read-only, reserve nothing */
#define ZC_NVME_FILE_AT      0x400u /* with opts.file: the file is opts.name in
                                      the directory opts.dirfd (opened and
                                      checked by the caller); opts.file is its
                                      path for messages */

typedef struct zc_nvme_opts {
    size_t size;              /* sizeof(zc_nvme_opts) */
    const char *const *dirs;  /* ndirs directories (each an nvme_path); extents
                                 are striped across them */
    int ndirs;
    int rank;                 /* file name: zeroc-r<rank>-<purpose>.swp */
    const char *purpose;      /* e.g. "optimizer", "params"; [A-Za-z0-9_-]+ */
    uint64_t capacity;        /* bytes of store space (rounded up to whole stripes) */
    size_t block_size;        /* aio.block_size: largest single I/O; 0 = 1 MiB */
    size_t stripe_bytes;      /* stripe unit across dirs; 0 = block_size */
    size_t alignment;         /* 0 = statx(STATX_DIOALIGN), else 4096; larger
                                 values are honoured */
    int queue_depth;          /* aio.queue_depth: requests in flight; 0 = 32 */
    unsigned flags;           /* ZC_NVME_* */
    const struct zc_nvme_faults *faults; /* tests: faults from open on (NULL =
                                 the ZC_NVME_FAULTS environment variable) */
    const char *file;         /* one named file instead of dirs/rank/purpose
                                 (checkpoint shards): created with O_EXCL (an
                                 existing file is an error) or, with
                                 ZC_NVME_READ_ONLY, opened as it is; capacity
                                 is rounded to the alignment only; never
                                 removed by close (the caller owns the name) */
    int dirfd;                /* ZC_NVME_FILE_AT: the file's directory */
    const char *name;         /* ZC_NVME_FILE_AT: the file's name in it (no '/') */
} zc_nvme_opts;

#define ZC_NVME_OPTS_INIT                                                                     \
    { sizeof(zc_nvme_opts), NULL, 0, 0, NULL, 0, 0, 0, 0, 0, 0u, NULL, NULL, -1, NULL }

/* What went wrong with a ticket (zc__nvme_wait). */
typedef struct zc_nvme_error {
    int err;              /* positive errno, 0 = success */
    bool is_write;
    char path[512];       /* the file of the failing piece */
    uint64_t file_offset; /* of the failing piece in that file */
    uint64_t length;      /* of the failing piece */
    uint64_t store_offset, store_length; /* the whole extent of the ticket */
} zc_nvme_error;

typedef struct zc_nvme_stats {
    int64_t tickets_live;     /* submitted, not yet waited for */
    int64_t inflight;         /* requests in the kernel now */
    int64_t submitted;        /* requests handed to the kernel (resubmits included) */
    int64_t resubmitted;      /* short transfers and -EAGAIN continued */
    int64_t submit_calls;     /* io_uring_submit calls (batching: << submitted) */
    int64_t overlapped_submits; /* refills that added requests while requests of
                                 an earlier refill were still in the kernel
                                 (0 with ZC_NVME_NO_OVERLAP) */
    int64_t requests;         /* requests numbered so far (what fault positions count) */
    int64_t write_requests;   /* of which writes (enospc=K counts these) */
    bool direct;              /* O_DIRECT in use */
    bool fixed_buffers;       /* registered buffers in use */
    bool fixed_files;         /* registered files in use */
    bool uring;               /* io_uring (false: pread/pwrite) */
    size_t alignment;         /* required for offsets, lengths and buffers */
    uint64_t capacity;        /* usable bytes */
    bool unnamed;             /* every swap file has no name (O_TMPFILE or
                                 unlinked at open): its directory may go */
} zc_nvme_stats;

/* Opens (creates) one file per directory, named zeroc-r<rank>-<purpose>.swp
 * in messages, with no name on disk: O_TMPFILE in the directory, or where the
 * filesystem refuses that, created under that name with O_EXCL and unlinked
 * at once (the descriptor keeps the file); only where the unlink fails too
 * (said once, as a warning) does the name stay until close. So the swap
 * bytes go with the process however it ends, SIGKILL included.
 * ZC_NVME_KEEP_FILES (benches, tests) and opts.file keep a name. It
 * reserves capacity/ndirs (rounded to stripes) in each with fallocate so a full
 * disk shows here, with the path, not mid-step. Tries O_DIRECT and falls back
 * to buffered I/O with one warning where the filesystem refuses it. Sets up
 * io_uring (registered files; SQPOLL on request); if io_uring is unavailable
 * (not built, or refused by the kernel/seccomp) uses pread/pwrite with one
 * warning. Errors: ZC_ERR_INVALID_ARG (bad options), ZC_ERR_IO naming the
 * directory (missing, not a directory, not writable) or the file (ENOSPC with
 * the sizes; with opts.file: it exists, or with ZC_NVME_READ_ONLY it is
 * missing or shorter than capacity). On failure no file is left behind
 * (none is created read-only). The caller owns *out.
 * A store is used by one thread at a time (not thread-safe). */
zc_status zc__nvme_open(zc_nvme_store **out, const zc_nvme_opts *opts);

/* Registers up to 64 memory regions (e.g. zc__pinned_pool_regions) as io_uring fixed
 * buffers; later requests whose buffer lies inside one use read_fixed /
 * write_fixed. Before pinning them it asks the kernel to back the regions with
 * transparent huge pages (MADV_HUGEPAGE + MADV_COLLAPSE; contents are kept,
 * best effort, skipped with ZC_NVME_NO_HUGEPAGE): a buffer of 4 KiB pages is
 * one segment per page, so the block layer splits a 1 MiB request at
 * max_segments (often 254 or 127) into two or more device requests, and a
 * device that is bound by requests (virtio disks) then reads at half speed.
 * Replaces any earlier registration; no requests may be in flight
 * (ZC_ERR_INVALID_STATE). When the kernel refuses (RLIMIT_MEMLOCK, > 1 GiB,
 * not anonymous memory) the store says so once (warning) and keeps using plain
 * reads/writes: that is not an error. The regions stay owned by the caller and
 * must outlive the store or the next registration. */
zc_status zc__nvme_register_buffers(zc_nvme_store *st, const zc_mem_region *regions, int n);

/* Submit a write (read) of len bytes between buf and the store's [offset,
 * offset+len). offset, len and buf must be multiples of the store's alignment
 * (ZC_ERR_INVALID_ARG naming it), len > 0 and offset+len <= capacity. Returns a
 * ticket at once; the extent is split into pieces (at stripe and block_size
 * boundaries) that are submitted in batches up to queue_depth in flight. buf
 * must stay valid (and, for writes, unchanged) until the ticket is waited for. */
zc_status zc__nvme_write(zc_nvme_store *st, uint64_t offset, const void *buf, size_t len,
                         zc_nvme_ticket *ticket);
zc_status zc__nvme_read(zc_nvme_store *st, uint64_t offset, void *buf, size_t len,
                        zc_nvme_ticket *ticket);

/* Waits (blocking in the kernel, no busy loop) until the ticket's extent is
 * done, then retires the ticket. Returns ZC_OK or ZC_ERR_IO whose message (and
 * *err, may be NULL) name the file, file offset, length and errno text of the
 * piece that failed. An unknown or already retired ticket is ZC_ERR_INVALID_ARG. */
zc_status zc__nvme_wait(zc_nvme_store *st, zc_nvme_ticket ticket, zc_nvme_error *err);

/* True when the ticket is done (its wait would not block). Drives completions
 * without blocking. Unknown ticket: false. */
bool zc__nvme_done(zc_nvme_store *st, zc_nvme_ticket ticket);

/* True while the store has requests in the kernel or extents not yet turned
 * into requests: I/O the caller is sharing the machine with. Drives nothing. */
bool zc__nvme_busy(const zc_nvme_store *st);

/* Waits for and retires every live ticket. Returns the first error (by
 * submission order) as zc__nvme_wait would, after all have finished. */
zc_status zc__nvme_wait_all(zc_nvme_store *st);

void zc__nvme_stats_get(const zc_nvme_store *st, zc_nvme_stats *out);

/* Makes what was written durable: waits for every live ticket, then fsyncs
 * each file. ZC_ERR_IO names the file (or the first failed ticket). */
zc_status zc__nvme_fsync(zc_nvme_store *st);

/* Path of the file for directory i (0 <= i < ndirs), or NULL (a swap file
 * has no name on disk: the path is its name in messages). */
const char *zc__nvme_path(const zc_nvme_store *st, int i);

/* Size of the file for directory i as fstat reports it on its descriptor
 * (the swap file has no name to stat), or -1. */
int64_t zc__nvme_file_size(const zc_nvme_store *st, int i);

/* How close deals with requests still in flight. */
typedef enum zc_nvme_close_mode {
    ZC_NVME_CLOSE_WAIT = 0, /* finish every submitted ticket, then close */
    ZC_NVME_CLOSE_CANCEL    /* drop queued pieces, ask the kernel to cancel the
                               rest, wait for what it cannot cancel */
} zc_nvme_close_mode;

/* Closes the store: deals with outstanding tickets per mode, unregisters,
 * closes and (unless ZC_NVME_KEEP_FILES) removes the files. Returns the first
 * I/O error of tickets that were never waited for (CLOSE_WAIT), else ZC_OK;
 * the store is freed in every case. NULL is a no-op returning ZC_OK. */
zc_status zc__nvme_close(zc_nvme_store *st, zc_nvme_close_mode mode);

/* ------------------------------------------------------------------------- */
/* Fault injection (tests)                                                   */
/* ------------------------------------------------------------------------- */

/* Requests are counted from 1 in the order they are first handed to the
 * kernel (resubmissions of a remainder are not counted), per store since
 * open. 0 disables a fault. Faults are applied to the completion of that
 * request: the data transfer itself happens, the result is replaced. */
typedef struct zc_nvme_faults {
    int64_t eio_at;        /* request k completes with -EIO */
    int64_t short_at;      /* request k transfers only half (rounded to the
                              alignment); the remainder is resubmitted */
    int64_t eagain_at;     /* request k completes with -EAGAIN (resubmitted) */
    int64_t enospc_write_at; /* the k-th write request completes with -ENOSPC */
    bool refuse_direct;    /* open: behave as if O_DIRECT were refused (EINVAL) */
    bool refuse_register;  /* register_buffers: behave as if the kernel said ENOMEM */
    bool refuse_tmpfile;   /* open: behave as if O_TMPFILE were refused (EOPNOTSUPP) */
    bool refuse_unlink;    /* open: behave as if unlinking a swap file failed (EPERM) */
} zc_nvme_faults;

/* Sets the faults of a store. Also read at open from ZC_NVME_FAULTS, e.g.
 * "eio=3,short=2,eagain=5,enospc=1,nodirect,noregister,notmpfile,nounlink". */
void zc__nvme_set_faults(zc_nvme_store *st, const zc_nvme_faults *f);

/* Parses the ZC_NVME_FAULTS syntax; ZC_ERR_INVALID_ARG naming the bad item. */
zc_status zc__nvme_parse_faults(const char *spec, zc_nvme_faults *out);

#endif
