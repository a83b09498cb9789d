/* The NVMe store: files, space reservation, tickets and their errors.
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
#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/env.h"
#include "base/log.h"
#include "base/regfile.h"
#include "offload/nvme_internal.h"
#include "offload/offload_internal.h"

#define DEFAULT_BLOCK ((size_t)1 << 20)
#define DEFAULT_QD 32
#define FALLBACK_ALIGN 4096u

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
}

/* ------------------------------------------------------------------------- */
/* Setup                                                                     */
/* ------------------------------------------------------------------------- */

static bool valid_purpose(const char *p)
{
    if (!p || !*p || strlen(p) > 64)
        return false;
    for (; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_' || *p == '-'))
            return false;
    return true;
}

static bool pow2(size_t v) { return v && !(v & (v - 1)); }

/* Required alignment of the open file: STATX_DIOALIGN (Linux 6.1+), else 4096. */
static size_t dio_alignment(int fd, bool direct)
{
    struct statx sx;
    memset(&sx, 0, sizeof sx);
    if (direct && statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 &&
        (sx.stx_mask & STATX_DIOALIGN) && sx.stx_dio_offset_align) {
        size_t a = sx.stx_dio_offset_align;
        if (sx.stx_dio_mem_align > a)
            a = sx.stx_dio_mem_align;
        return a;
    }
    return FALLBACK_ALIGN;
}

static zc_status check_dir(const char *dir)
{
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return ZC_ERR(ZC_ERR_IO, "nvme_path '%s' %s: %s", dir,
                      errno == ENOENT ? "does not exist" : "cannot be examined", strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return ZC_ERR(ZC_ERR_IO, "nvme_path '%s' is not a directory", dir);
    if (access(dir, W_OK | X_OK) != 0)
        return ZC_ERR(ZC_ERR_IO, "nvme_path '%s' is not writable: %s", dir, strerror(errno));
    return ZC_OK;
}

/* Said once per process: every store of every rank would repeat it. */
static atomic_bool warned_tmpfile, warned_unlink;

/* A swap file made with a name (the filesystem refused O_TMPFILE) loses it
 * at once: the descriptor keeps the file, and nothing of it can outlive the
 * process. Only where the unlink fails does the name stay, until close. */
static void drop_name(zc_nvme_store *st, int i)
{
    errno = EPERM;
    if (!st->faults.refuse_unlink && unlink(st->paths[i]) == 0) {
        st->created[i] = false;
        return;
    }
    if (!atomic_exchange(&warned_unlink, true))
        ZC_LOGW("offload", "cannot unlink the open swap file '%s' (%s): it keeps its name until "
                "the store closes, and a killed process leaves it behind", st->paths[i],
                strerror(errno));
}

static zc_status open_file(zc_nvme_store *st, int i, bool *warned_direct)
{
    const char *path = st->paths[i];
    bool want_direct = !(st->opts.flags & ZC_NVME_BUFFERED);
    /* A named file (opts.file) is the caller's: created exclusively, or
     * opened read-only as it is. A swap file has no name (O_TMPFILE) unless
     * the caller keeps its files (ZC_NVME_KEEP_FILES: a bench reusing its
     * file, which it may then take over); one made under a name because
     * O_TMPFILE is refused never takes over an existing file. */
    const bool named = st->opts.file != NULL;
    const bool read_only = named && (st->opts.flags & ZC_NVME_READ_ONLY);
    const bool keep = !named && (st->opts.flags & ZC_NVME_KEEP_FILES);
    bool tmpfile = !named && !keep && !st->faults.refuse_tmpfile;
    if (!named && !keep && st->faults.refuse_tmpfile && !atomic_exchange(&warned_tmpfile, true))
        ZC_LOGI("offload", "O_TMPFILE refused (fault injection): swap files are created under a "
                "name and unlinked at once");
    int base = (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC;
    int fd = -1, e = 0;
    /* Each retry turns want_direct or tmpfile off: at most two. */
    for (;;) {
        int fl = base | (want_direct ? O_DIRECT : 0);
        if (want_direct && st->faults.refuse_direct) {
            e = EINVAL;
        } else if (read_only) {
            /* Read-only is a checkpoint's shard: a directory, FIFO or device
             * there is refused by what it is, without blocking. */
            char why[600];
            const zc_open_result o = zc__open_regular(path, want_direct ? O_DIRECT : 0, NULL,
                                                      &fd, NULL, why, sizeof why);
            if (o == ZC_OPEN_NOT_REGULAR)
                return ZC_ERR(ZC_ERR_IO, "%s", why);
            e = fd < 0 ? errno : 0;
        } else if (tmpfile) {
            fd = open(st->dirs[i], fl | O_TMPFILE, 0600);
            e = fd < 0 ? errno : 0;
            /* EOPNOTSUPP: the filesystem has no O_TMPFILE; EISDIR: the
             * kernel predates it; EINVAL without O_DIRECT: either. */
            if (fd < 0 && (e == EOPNOTSUPP || e == EISDIR || (e == EINVAL && !want_direct))) {
                tmpfile = false;
                if (!atomic_exchange(&warned_tmpfile, true))
                    ZC_LOGI("offload", "the filesystem of '%s' refuses O_TMPFILE (%s): swap "
                            "files are created under a name and unlinked at once",
                            st->dirs[i], strerror(e));
                continue;
            }
        } else {
            /* O_EXCL: a failed open removes only what it created, and an
             * existing file (or a link) of the name is never taken over. */
            if (st->at_dirfd >= 0)
                fd = openat(st->at_dirfd, st->at_name, fl | O_CREAT | O_EXCL | O_NOFOLLOW, 0644);
            else
                fd = open(path, fl | O_CREAT | O_EXCL | O_NOFOLLOW, named ? 0644 : 0600);
            e = fd < 0 ? errno : 0;
            st->created[i] = fd >= 0;
            if (fd < 0 && e == EEXIST && keep) {
                fd = open(path, fl | O_NOFOLLOW);
                e = fd < 0 ? errno : 0;
            }
        }
        if (fd < 0 && e == EINVAL && want_direct) {
            want_direct = false;
            if (named) {
                /* A checkpoint on tmpfs is normal: not worth a warning per file. */
                ZC_LOGI("offload", "%s: the filesystem refuses O_DIRECT: buffered I/O", path);
            } else if (!*warned_direct) {
                *warned_direct = true;
                ZC_LOGW("offload", "the filesystem of '%s' refuses O_DIRECT: the NVMe store "
                        "uses buffered I/O through the page cache (slower, and it takes "
                        "host memory)", st->dirs[i]);
            }
            continue;
        }
        break;
    }
    if (fd < 0 && named)
        return ZC_ERR(ZC_ERR_IO, "%s: cannot %s it: %s", path,
                      read_only ? "open" : "create", strerror(e));
    if (fd < 0)
        return ZC_ERR(ZC_ERR_IO, "cannot create the NVMe store file '%s' in nvme_path '%s': %s",
                      path, st->dirs[i], strerror(e));
    st->fds[i] = fd;
    if (!named && !keep && !tmpfile)
        drop_name(st, i);
    if (i == 0)
        st->direct = want_direct;
    else if (st->direct != want_direct)
        st->direct = false; /* mixed: report buffered */
    size_t a = dio_alignment(fd, want_direct);
    if (a > st->align)
        st->align = a;
    return ZC_OK;
}

static zc_status reserve(zc_nvme_store *st, int i)
{
    char a[32], b[32];
    int fd = st->fds[i];
    if (st->opts.file && (st->opts.flags & ZC_NVME_READ_ONLY)) {
        struct stat sb;
        if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size < st->file_bytes)
            return ZC_ERR(ZC_ERR_IO, "%s: shorter than the %llu bytes to be read", st->paths[i],
                          (unsigned long long)st->file_bytes);
        return ZC_OK;
    }
    if (!(st->opts.flags & ZC_NVME_NO_FALLOCATE)) {
        if (fallocate(fd, 0, 0, (off_t)st->file_bytes) == 0)
            return ZC_OK;
        int e = errno;
        if (e == ENOSPC) {
            struct statvfs vf;
            uint64_t avail = 0;
            if (fstatvfs(fd, &vf) == 0)
                avail = (uint64_t)vf.f_bavail * vf.f_frsize;
            return ZC_ERR(ZC_ERR_IO,
                          "no space for the NVMe store file '%s': reserving %s failed (ENOSPC); "
                          "the filesystem has %s free. Free space, offload less, or add another "
                          "nvme_path",
                          st->paths[i], zc__offload_fmt_bytes(a, st->file_bytes),
                          zc__offload_fmt_bytes(b, avail));
        }
        if (e != EOPNOTSUPP)
            return ZC_ERR(ZC_ERR_IO, "reserving %s for the NVMe store file '%s' failed: %s",
                          zc__offload_fmt_bytes(a, st->file_bytes), st->paths[i], strerror(e));
        ZC_LOGW("offload", "the filesystem of '%s' cannot preallocate: space for the NVMe store "
                "is not reserved and a full disk will show as a write error", st->dirs[i]);
    }
    struct stat sb;
    if (fstat(fd, &sb) == 0 && (uint64_t)sb.st_size >= st->file_bytes)
        return ZC_OK;
    if (ftruncate(fd, (off_t)st->file_bytes) != 0)
        return ZC_ERR(ZC_ERR_IO, "sizing the NVMe store file '%s' to %s failed: %s", st->paths[i],
                      zc__offload_fmt_bytes(a, st->file_bytes), strerror(errno));
    return ZC_OK;
}

static void remove_files(zc_nvme_store *st, bool only_created)
{
    for (int i = 0; i < st->ndirs; i++) {
        if (st->fds[i] >= 0) {
            close(st->fds[i]);
            st->fds[i] = -1;
        }
        if (st->at_dirfd >= 0 && st->created[i])
            unlinkat(st->at_dirfd, st->at_name, 0);
        else if (st->paths[i][0] && (!only_created || st->created[i]))
            unlink(st->paths[i]);
    }
}

static void free_store(zc_nvme_store *st)
{
    zc__nvme_engine_fini(st);
    for (int i = 0; i < st->ndirs; i++)
        if (st->fds[i] >= 0)
            close(st->fds[i]);
    if (st->reqs)
        zc__host_free(NULL, ZC_MEM_OTHER, st->reqs, (size_t)st->qd * sizeof(nvme_req));
    if (st->free_reqs)
        zc__host_free(NULL, ZC_MEM_OTHER, st->free_reqs, (size_t)st->qd * sizeof(uint32_t));
    if (st->tickets)
        zc__host_free(NULL, ZC_MEM_OTHER, st->tickets, (size_t)st->cap_tickets * sizeof(nvme_ticket));
    if (st->regions)
        zc__host_free(NULL, ZC_MEM_OTHER, st->regions, (size_t)st->nregions * sizeof(nvme_region));
    zc__host_free(NULL, ZC_MEM_OTHER, st, sizeof *st);
}

static zc_status validate(const zc_nvme_opts *o)
{
    if (o->size < sizeof(zc_nvme_opts))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "NVMe store: opts->size %zu, expected %zu (use "
                      "ZC_NVME_OPTS_INIT)", o->size, sizeof(zc_nvme_opts));
    if (o->file) {
        if (!*o->file || strlen(o->file) > 500)
            return ZC_ERR(ZC_ERR_INVALID_ARG, "NVMe store: file name is empty or longer than "
                          "500 bytes");
    } else if (o->flags & (ZC_NVME_READ_ONLY | ZC_NVME_FILE_AT)) {
        return ZC_ERR(ZC_ERR_INVALID_ARG, "NVMe store: ZC_NVME_READ_ONLY and ZC_NVME_FILE_AT "
                      "need opts.file");
    }
    if ((o->flags & ZC_NVME_FILE_AT) &&
        (o->dirfd < 0 || !o->name || !*o->name || strchr(o->name, '/') || strlen(o->name) > 255))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "NVMe store: ZC_NVME_FILE_AT needs a directory "
                      "descriptor and a plain file name of 1-255 bytes");
    if (o->file) {
        /* One named file: no directories, rank or purpose. */
    } else if (!o->dirs || o->ndirs < 1 || o->ndirs > ZC_NVME_MAX_DIRS)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "NVMe store: %d directories given (need 1..%d)",
                      o->ndirs, ZC_NVME_MAX_DIRS);
    for (int i = 0; !o->file && i < o->ndirs; i++)
        if (!o->dirs[i] || !*o->dirs[i] || strlen(o->dirs[i]) > 400)
            return ZC_ERR(ZC_ERR_INVALID_ARG, "NVMe store: directory %d is empty or too long", i);
    if (!o->file && !valid_purpose(o->purpose))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "NVMe store: purpose '%s' must be 1-64 characters of "
                      "[A-Za-z0-9_-]", o->purpose ? o->purpose : "(null)");
    if (o->rank < 0)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "NVMe store: rank %d is negative", o->rank);
    if (!o->capacity)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "NVMe store: capacity is 0");
    if (o->block_size && (!pow2(o->block_size) || o->block_size > ((size_t)1 << 30)))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "NVMe store: aio.block_size %zu must be a power of two "
                      "<= 1 GiB", o->block_size);
    if (o->stripe_bytes && !pow2(o->stripe_bytes))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "NVMe store: stripe %zu must be a power of two",
                      o->stripe_bytes);
    if (o->alignment && !pow2(o->alignment))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "NVMe store: alignment %zu must be a power of two",
                      o->alignment);
    if (o->queue_depth < 0 || o->queue_depth > 4096)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "NVMe store: aio.queue_depth %d must be 1..4096",
                      o->queue_depth);
    return ZC_OK;
}

zc_status zc__nvme_open(zc_nvme_store **out, const zc_nvme_opts *opts)
{
    char a[32];
    zc_status rc = ZC_OK;
    if (!out || !opts)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc__nvme_open: %s is NULL", !out ? "out" : "opts");
    *out = NULL;
    ZC_CHECK(validate(opts));
    zc_nvme_store *st;
    ZC_CHECK(zc__host_alloc(NULL, ZC_MEM_OTHER, sizeof *st, "NVMe store", (void **)&st));
    st->opts = *opts;
    st->ndirs = opts->file ? 1 : opts->ndirs;
    for (int i = 0; i < ZC_NVME_MAX_DIRS; i++)
        st->fds[i] = -1;
    st->retry_head = st->retry_tail = st->pend_head = st->pend_tail = st->free_ticket = NIL;
    st->block = opts->block_size ? opts->block_size : DEFAULT_BLOCK;
    st->qd = opts->queue_depth ? opts->queue_depth : DEFAULT_QD;
    st->align = opts->alignment ? opts->alignment : 1;
    if (opts->faults) {
        st->faults = *opts->faults;
    } else if (zc__env("ZC_NVME_FAULTS")) {
        ZC_CHECK_GOTO(zc__nvme_parse_faults(zc__env("ZC_NVME_FAULTS"), &st->faults), rc, fail);
        ZC_LOGW("offload", "ZC_NVME_FAULTS=%s: injecting I/O faults", zc__env("ZC_NVME_FAULTS"));
    }
    st->at_dirfd = -1;
    if (opts->flags & ZC_NVME_FILE_AT) {
        st->at_dirfd = opts->dirfd; /* the caller's: not closed here */
        snprintf(st->at_name, sizeof st->at_name, "%s", opts->name);
    }
    st->opts.dirs = NULL; /* not kept: copied below */
    st->opts.name = NULL;
    st->opts.faults = NULL;

    if (opts->file) {
        snprintf(st->paths[0], sizeof st->paths[0], "%s", opts->file);
        /* Messages about "the directory" name the file's. */
        snprintf(st->dirs[0], sizeof st->dirs[0], "%s", opts->file);
        char *slash = strrchr(st->dirs[0], '/');
        if (slash)
            slash[slash == st->dirs[0]] = '\0';
        else
            snprintf(st->dirs[0], sizeof st->dirs[0], ".");
        st->opts.file = st->paths[0];
    }
    for (int i = 0; !opts->file && i < st->ndirs; i++) {
        snprintf(st->dirs[i], sizeof st->dirs[i], "%s", opts->dirs[i]);
        ZC_CHECK_GOTO(check_dir(st->dirs[i]), rc, fail);
        for (int j = 0; j < i; j++)
            if (!strcmp(st->dirs[i], st->dirs[j])) {
                rc = ZC_ERR(ZC_ERR_INVALID_ARG, "NVMe store: directory '%s' is given twice",
                            st->dirs[i]);
                goto fail;
            }
        char purpose[72], dir[512];
        snprintf(purpose, sizeof purpose, "%s", opts->purpose);
        memcpy(dir, st->dirs[i], sizeof dir);
        /* Lengths were validated (dir <= 400, purpose <= 64): this fits. */
        snprintf(st->paths[i], sizeof st->paths[i], "%.400s/zeroc-r%d-%.64s.swp", dir,
                 opts->rank, purpose);
    }
    bool warned_direct = false;
    for (int i = 0; i < st->ndirs; i++)
        ZC_CHECK_GOTO(open_file(st, i, &warned_direct), rc, fail);
    if (st->align < FALLBACK_ALIGN && !opts->alignment && !st->direct)
        st->align = FALLBACK_ALIGN;
    st->stripe = opts->stripe_bytes ? opts->stripe_bytes : st->block;
    if (st->block % st->align || st->stripe % st->align) {
        rc = ZC_ERR(ZC_ERR_INVALID_ARG, "NVMe store: aio.block_size %zu and stripe %zu must be "
                    "multiples of the required alignment %zu of '%s'", st->block, st->stripe,
                    st->align, st->dirs[0]);
        goto fail;
    }
    /* Swap files hold whole stripes; a named file holds what was asked,
     * rounded to the alignment (a checkpoint shard's exact size). */
    uint64_t per_round = opts->file ? st->align : (uint64_t)st->stripe * (uint64_t)st->ndirs;
    st->capacity = (opts->capacity + per_round - 1) / per_round * per_round;
    st->file_bytes = st->capacity / (uint64_t)st->ndirs;
    for (int i = 0; i < st->ndirs; i++)
        ZC_CHECK_GOTO(reserve(st, i), rc, fail);

    ZC_CHECK_GOTO(zc__host_alloc(NULL, ZC_MEM_OTHER, (size_t)st->qd * sizeof(nvme_req),
                                 "NVMe requests", (void **)&st->reqs), rc, fail);
    ZC_CHECK_GOTO(zc__host_alloc(NULL, ZC_MEM_OTHER, (size_t)st->qd * sizeof(uint32_t),
                                 "NVMe request slots", (void **)&st->free_reqs), rc, fail);
    for (int i = 0; i < st->qd; i++)
        st->free_reqs[i] = (uint32_t)(st->qd - 1 - i);
    st->nfree_reqs = st->qd;
    ZC_CHECK_GOTO(zc__nvme_engine_init(st), rc, fail);
    ZC_LOGI("offload", "NVMe store %s: %d file(s) of %s, %s, alignment %zu, block %zu, depth %d, %s",
            st->paths[0], st->ndirs, zc__offload_fmt_bytes(a, st->file_bytes),
            st->direct ? "O_DIRECT" : "buffered", st->align, st->block, st->qd,
            st->use_uring ? "io_uring" : "pread/pwrite");
    *out = st;
    return ZC_OK;
fail:
    remove_files(st, true);
    free_store(st);
    return rc;
}

zc_status zc__nvme_register_buffers(zc_nvme_store *st, const zc_mem_region *regions, int n)
{
    if (!st || n < 0 || n > ZC_NVME_MAX_REGIONS || (n && !regions))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc__nvme_register_buffers: %d regions (0..%d, "
                      "non-NULL array)", n, ZC_NVME_MAX_REGIONS);
    if (st->active || st->live_tickets)
        return ZC_ERR(ZC_ERR_INVALID_STATE, "zc__nvme_register_buffers: %lld ticket(s) still live "
                      "on '%s'; wait for them first", (long long)st->live_tickets, st->paths[0]);
    if (st->regions)
        zc__host_free(NULL, ZC_MEM_OTHER, st->regions, (size_t)st->nregions * sizeof(nvme_region));
    st->regions = NULL;
    st->nregions = 0;
    if (n) {
        ZC_CHECK(zc__host_alloc(NULL, ZC_MEM_OTHER, (size_t)n * sizeof(nvme_region),
                                "NVMe registered regions", (void **)&st->regions));
        for (int i = 0; i < n; i++)
            st->regions[i] = (nvme_region){regions[i].base, regions[i].bytes};
        st->nregions = n;
    }
    zc_status rc = zc__nvme_engine_register(st);
    return rc;
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
    ZC_CHECK(drive_until(st, slot));
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

zc_status zc__nvme_wait_all(zc_nvme_store *st)
{
    if (!st)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc__nvme_wait_all: store is NULL");
    /* Finish everything first, then retire in submission order so the error
     * reported is the earliest one. */
    zc_status first = ZC_OK;
    char msg[1024] = "";
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
        remove_files(st, true);
    free_store(st);
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
