/* `zeroc report`: io_uring and the NVMe directories (report.h).
 *
 * The directories are probed through zeroc's own NVMe store (the path the
 * offload takes: O_DIRECT where the filesystem takes it, io_uring where the
 * kernel gives it), on a nameless file (O_TMPFILE, or created and unlinked
 * at once), so nothing is left in the directory whatever ends the report.
 * The probe writes the file over and over for about probe_s seconds, then
 * reads it back as long: with O_DIRECT that is the drive; without it the
 * page cache, and the report says so. Its size is at most 256 MiB and 5% of
 * the free space. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <time.h>

#include "base/clock.h"
#include "offload/offload.h"
#include "report.h"
#include "zc_build_config.h"
#include "zeroc/zeroc.h"

#if ZC_HAVE_URING
#include <liburing.h>
#endif

json_t *zc__report_io_uring(void)
{
    json_t *o = json_object();
    struct utsname u;
    if (uname(&u) == 0)
        json_object_set_new(o, "kernel", json_string(u.release));
#if ZC_HAVE_URING
    json_object_set_new(o, "built", json_true());
#if defined(IO_URING_VERSION_MAJOR)
    char v[32];
    snprintf(v, sizeof v, "%d.%d", IO_URING_VERSION_MAJOR, IO_URING_VERSION_MINOR);
    json_object_set_new(o, "liburing", json_string(v));
#endif
    struct io_uring ring;
    int rc = io_uring_queue_init(4, &ring, 0);
    if (rc < 0) {
        json_object_set_new(o, "works", json_false());
        char e[160];
        snprintf(e, sizeof e, "io_uring_queue_init: %s%s", strerror(-rc),
                 -rc == EPERM || -rc == ENOSYS ? " (disabled by the kernel or a seccomp "
                                                  "policy: the store uses pread/pwrite)"
                                                : "");
        json_object_set_new(o, "error", json_string(e));
        return o;
    }
    /* A request through the ring: a NOP submitted and completed. */
    struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
    struct io_uring_cqe *cqe = NULL;
    bool ok = false;
    if (sqe) {
        io_uring_prep_nop(sqe);
        ok = io_uring_submit(&ring) == 1 && io_uring_wait_cqe(&ring, &cqe) == 0 && cqe &&
             cqe->res == 0;
        if (cqe)
            io_uring_cqe_seen(&ring, cqe);
    }
    json_object_set_new(o, "works", json_boolean(ok));
    if (!ok)
        json_object_set_new(o, "error", json_string("a NOP request did not complete"));
    struct io_uring_probe *pr = io_uring_get_probe_ring(&ring);
    if (pr) {
        json_t *ops = json_object();
        static const struct {
            const char *name;
            int op;
        } want[] = {{"read", IORING_OP_READ},           {"write", IORING_OP_WRITE},
                    {"read_fixed", IORING_OP_READ_FIXED}, {"write_fixed", IORING_OP_WRITE_FIXED},
                    {"fsync", IORING_OP_FSYNC},           {"async_cancel", IORING_OP_ASYNC_CANCEL}};
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
            json_object_set_new(ops, want[i].name,
                                json_boolean(io_uring_opcode_supported(pr, want[i].op)));
        json_object_set_new(o, "ops", ops);
        io_uring_free_probe(pr);
    }
    io_uring_queue_exit(&ring);
#else
    json_object_set_new(o, "built", json_false());
    json_object_set_new(o, "works", json_false());
    json_object_set_new(o, "error", json_string("built without liburing (-Dio_uring=disabled "
                                                "or liburing-dev missing): the NVMe store uses "
                                                "pread/pwrite"));
#endif
    return o;
}

static const char *fs_name(long type)
{
    switch ((unsigned long)type) {
    case 0xEF53: return "ext4";
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x01021994: return "tmpfs";
    case 0x794C7630: return "overlayfs";
    case 0x6969: return "nfs";
    case 0x2FC12FC1: return "zfs";
    case 0xF2F52010: return "f2fs";
    default: return "other";
    }
}

/* Writes (or reads) the store's extent [0, cap) in `chunk` pieces, around
 * and around, for about seconds: bytes per second, or -1 with err set. */
static double probe_pass(zc_nvme_store *st, char *buf, size_t chunk, uint64_t cap, bool write,
                         double seconds, char *err, size_t errcap)
{
    const double t0 = zc__now_s();
    uint64_t off = 0, moved = 0;
    double t = t0;
    while (t - t0 < seconds || moved == 0) {
        zc_nvme_ticket tk;
        zc_nvme_error ne;
        zc_status rc = write ? zc__nvme_write(st, off, buf, chunk, &tk)
                             : zc__nvme_read(st, off, buf, chunk, &tk);
        if (rc == ZC_OK)
            rc = zc__nvme_wait(st, tk, &ne);
        if (rc != ZC_OK) {
            snprintf(err, errcap, "%s", zc_last_error());
            return -1;
        }
        moved += chunk;
        off = off + chunk >= cap ? 0 : off + chunk;
        t = zc__now_s();
        if (!write && moved >= cap && t - t0 >= seconds)
            break;
    }
    return (double)moved / (t - t0);
}

static json_t *probe_dir(const char *dir, double probe_s)
{
    json_t *o = json_object();
    json_object_set_new(o, "path", json_string(dir));
    struct statfs sf;
    struct statvfs sv;
    if (statfs(dir, &sf) != 0 || statvfs(dir, &sv) != 0) {
        char e[600];
        snprintf(e, sizeof e, "'%s': %s", dir, strerror(errno));
        json_object_set_new(o, "error", json_string(e));
        return o;
    }
    json_object_set_new(o, "filesystem", json_string(fs_name((long)sf.f_type)));
    const uint64_t free_b = (uint64_t)sv.f_bavail * sv.f_frsize;
    json_object_set_new(o, "free_bytes", json_integer((json_int_t)free_b));
    const size_t chunk = (size_t)8 << 20;
    uint64_t cap = (uint64_t)256 << 20;
    if (cap > free_b / 20)
        cap = free_b / 20 / chunk * chunk;
    if (cap < chunk) {
        json_object_set_new(o, "error", json_string("less than 160 MiB free: no probe"));
        return o;
    }
    zc_nvme_opts opts = ZC_NVME_OPTS_INIT;
    const char *dirs[1] = {dir};
    opts.dirs = dirs;
    opts.ndirs = 1;
    opts.purpose = "report";
    opts.capacity = cap;
    zc_nvme_store *st = NULL;
    if (zc__nvme_open(&st, &opts) != ZC_OK) {
        json_object_set_new(o, "error", json_string(zc_last_error()));
        return o;
    }
    zc_nvme_stats ns;
    zc__nvme_stats_get(st, &ns);
    json_object_set_new(o, "o_direct", json_boolean(ns.direct));
    json_object_set_new(o, "io_uring", json_boolean(ns.uring));
    json_object_set_new(o, "registered_files", json_boolean(ns.fixed_files));
    json_object_set_new(o, "alignment", json_integer((json_int_t)ns.alignment));
    json_object_set_new(o, "nameless_file", json_boolean(ns.unnamed));
    json_object_set_new(o, "probe_bytes", json_integer((json_int_t)cap));
    char *buf = NULL;
    if (posix_memalign((void **)&buf, 4096, chunk) != 0) {
        json_object_set_new(o, "error", json_string("no memory for the probe's buffer"));
        zc__nvme_close(st, ZC_NVME_CLOSE_CANCEL);
        return o;
    }
    for (size_t i = 0; i < chunk; i++)
        buf[i] = (char)(i * 131u + 7u);
    char err[600] = "";
    const double t0 = zc__now_s();
    const double w = probe_pass(st, buf, chunk, cap, true, probe_s / 2, err, sizeof err);
    const double r = w < 0 ? -1 : probe_pass(st, buf, chunk, cap, false, probe_s / 2, err,
                                             sizeof err);
    json_object_set_new(o, "probe_s", json_real(zc__now_s() - t0));
    json_object_set_new(o, "write_GBps", w < 0 ? json_null() : json_real(w / 1e9));
    json_object_set_new(o, "read_GBps", r < 0 ? json_null() : json_real(r / 1e9));
    if (!ns.direct)
        json_object_set_new(o, "note", json_string("buffered I/O (the filesystem refused "
                                                   "O_DIRECT): the figures are the page "
                                                   "cache's, not the drive's"));
    if (err[0])
        json_object_set_new(o, "error", json_string(err));
    free(buf);
    if (zc__nvme_close(st, ZC_NVME_CLOSE_WAIT) != ZC_OK && !err[0])
        json_object_set_new(o, "error", json_string(zc_last_error()));
    return o;
}

json_t *zc__report_nvme(const char *const *paths, int n, double probe_s)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, probe_dir(paths[i], probe_s));
    return a;
}
