/* Opening the NVMe store: its options checked, its files made in the
 * directories given (unnamed where the filesystem allows: O_TMPFILE, or
 * unlinked at once), O_DIRECT where possible, their space reserved, the
 * request and ticket tables allocated, and the caller's pinned buffers
 * registered with io_uring. Tickets, waiting and closing are nvme_store.c. */
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

void zc__nvme_remove_files(zc_nvme_store *st, bool only_created)
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

void zc__nvme_free_store(zc_nvme_store *st)
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
    zc__nvme_remove_files(st, true);
    zc__nvme_free_store(st);
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
