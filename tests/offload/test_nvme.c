/* The NVMe store: round trips, striping, alignment, setup errors, fault
 * injection, fallbacks and closing with requests in flight. Files live under
 * a temporary directory on the local disk (ZC_TEST_TMPDIR = the build dir). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "helpers.h"
#include "offload/offload.h"
#include "ot.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static char tdir[512];
static char sub[2][600];

static void setup(void)
{
    ot_mkdtemp(tdir);
    for (int i = 0; i < 2; i++) {
        snprintf(sub[i], sizeof sub[i], "%s/d%d", tdir, i);
        mkdir(sub[i], 0755);
    }
}
static void teardown(void) { ot_rmtree(tdir); }

TestSuite(nvme, .init = setup, .fini = teardown, .timeout = 120);

static zc_nvme_store *open_store(int ndirs, uint64_t cap, size_t block, size_t stripe, int qd,
                                 unsigned flags, const zc_nvme_faults *f)
{
    const char *dirs[2] = {sub[0], sub[1]};
    zc_nvme_opts o = ZC_NVME_OPTS_INIT;
    o.dirs = dirs;
    o.ndirs = ndirs;
    o.rank = 3;
    o.purpose = "optimizer";
    o.capacity = cap;
    o.block_size = block;
    o.stripe_bytes = stripe;
    o.queue_depth = qd;
    o.flags = flags;
    o.faults = f;
    zc_nvme_store *st = NULL;
    zc_status rc = zc__nvme_open(&st, &o);
    cr_assert_eq(rc, ZC_OK, "open: %s", zc_last_error());
    return st;
}

static zc_pinned_pool *pool_for(zc_nvme_store *st, size_t bytes)
{
    zc_pinned_pool_opts po = ZC_PINNED_POOL_OPTS_INIT;
    po.slab_bytes = bytes;
    po.reserve_bytes = bytes;
    po.flags = ZC_PINNED_NO_CUDA;
    zc_pinned_pool *p;
    cr_assert_eq(zc__pinned_pool_create(&p, &po), ZC_OK, "%s", zc_last_error());
    if (st) {
        zc_mem_region r[8];
        int n = zc__pinned_pool_regions(p, r, 8);
        cr_assert_eq(zc__nvme_register_buffers(st, r, n), ZC_OK, "%s", zc_last_error());
    }
    return p;
}

/* ------------------------------------------------------------------------- */
/* Property: random extents, random interleaving of reads and writes          */
/* ------------------------------------------------------------------------- */

typedef struct op {
    zc_nvme_ticket t;
    bool write;
    uint64_t off, len;
    unsigned char *buf;
} op;

/* The model: seed of the last write of each granule (0 = never written: the
 * store reads zeros there, fallocate'd space is zero-filled). */
static uint64_t *model;
static size_t granule;

static bool overlaps(const op *a, uint64_t off, uint64_t len)
{
    return a->off < off + len && off < a->off + a->len;
}

static void verify_read(const op *o, uint64_t seed)
{
    for (uint64_t g = 0; g < o->len; g += granule) {
        uint64_t s = model[(o->off + g) / granule];
        const unsigned char *b = o->buf + g;
        if (!s) {
            for (size_t i = 0; i < granule; i++)
                cr_assert_eq(b[i], 0, "seed %llu: byte %llu should be 0 (never written)",
                             (unsigned long long)seed, (unsigned long long)(o->off + g + i));
        } else {
            long long bad = ot_check(b, granule, s, o->off + g);
            cr_assert_eq(bad, -1, "seed %llu: read [%llu,+%llu) differs at store byte %llu",
                         (unsigned long long)seed, (unsigned long long)o->off,
                         (unsigned long long)o->len, (unsigned long long)(o->off + g + bad));
        }
    }
}

static void finish(zc_nvme_store *st, zc_pinned_pool *pool, op *o, uint64_t seed)
{
    zc_nvme_error e;
    zc_status rc = zc__nvme_wait(st, o->t, &e);
    cr_assert_eq(rc, ZC_OK, "seed %llu: %s", (unsigned long long)seed, zc_last_error());
    if (!o->write)
        verify_read(o, seed);
    zc__pinned_free(pool, o->buf);
    o->t = 0;
}

static void property(int ndirs, unsigned flags, int qd, uint64_t seed, int nops)
{
    const uint64_t cap = 8 * MiB;
    zc_nvme_store *st = open_store(ndirs, cap, 64 * KiB, 32 * KiB, qd, flags, NULL);
    zc_nvme_stats ss;
    zc__nvme_stats_get(st, &ss);
    granule = ss.alignment;
    cr_assert_eq(ss.capacity, cap);
    model = calloc(cap / granule, sizeof *model);
    zc_pinned_pool *pool = pool_for(st, 4 * MiB);
    op inflight[12] = {0};
    uint64_t rng = seed;
    const uint64_t ngran = cap / granule;
    for (int i = 0; i < nops; i++) {
        /* Either retire a random in-flight op or start a new one. */
        int slot = (int)(t_rand_u64(&rng) % 12);
        if (inflight[slot].t) {
            finish(st, pool, &inflight[slot], seed);
            continue;
        }
        bool write = t_rand_u64(&rng) % 2;
        /* Extents from one granule to ~200 KiB: several pieces, stripes. */
        uint64_t maxg = (200 * KiB) / granule;
        uint64_t len = (1 + t_rand_u64(&rng) % maxg) * granule;
        uint64_t off = (t_rand_u64(&rng) % (ngran - len / granule + 1)) * granule;
        /* Order is only defined between non-conflicting ops: wait for any
         * in-flight op that a write would race with (or a read would race
         * with a write). */
        for (int k = 0; k < 12; k++)
            if (inflight[k].t && (write || inflight[k].write) && overlaps(&inflight[k], off, len))
                finish(st, pool, &inflight[k], seed);
        op *o = &inflight[slot];
        *o = (op){.write = write, .off = off, .len = len};
        cr_assert_eq(zc__pinned_alloc(pool, len, granule, ZC_MEM_BUFFERS, "io", (void **)&o->buf),
                     ZC_OK, "%s", zc_last_error());
        zc_status rc;
        if (write) {
            uint64_t s = t_rand_u64(&rng) | 1;
            for (uint64_t g = 0; g < len; g += granule) {
                ot_fill(o->buf + g, granule, s, off + g);
                model[(off + g) / granule] = s;
            }
            rc = zc__nvme_write(st, off, o->buf, len, &o->t);
        } else {
            memset(o->buf, 0x5a, len);
            rc = zc__nvme_read(st, off, o->buf, len, &o->t);
        }
        cr_assert_eq(rc, ZC_OK, "seed %llu: %s", (unsigned long long)seed, zc_last_error());
        cr_assert_neq(o->t, 0);
    }
    for (int k = 0; k < 12; k++)
        if (inflight[k].t)
            finish(st, pool, &inflight[k], seed);
    /* A final full read checks everything against the model. */
    op all = {.off = 0, .len = cap};
    cr_assert_eq(zc__pinned_alloc(pool, cap, 0, ZC_MEM_BUFFERS, "all", (void **)&all.buf), ZC_OK);
    cr_assert_eq(zc__nvme_read(st, 0, all.buf, cap, &all.t), ZC_OK);
    finish(st, pool, &all, seed);
    zc__nvme_stats_get(st, &ss);
    cr_assert_eq(ss.tickets_live, 0);
    cr_assert_eq(ss.inflight, 0);
    if (ss.uring && qd > 1 && !(flags & ZC_NVME_SINGLE_SUBMIT))
        cr_assert_lt(ss.submit_calls, ss.submitted, "submissions are batched");
    if (ss.uring && (flags & ZC_NVME_SINGLE_SUBMIT))
        cr_assert_eq(ss.submit_calls, ss.submitted, "aio.single_submit: one submit per request");
    if (flags & ZC_NVME_NO_OVERLAP)
        cr_assert_eq(ss.overlapped_submits, 0,
                     "aio.overlap_events false: no submit while requests are in the kernel");
    cr_assert_eq(zc__nvme_close(st, ZC_NVME_CLOSE_WAIT), ZC_OK);
    zc_pinned_pool_stats ps;
    zc__pinned_pool_stats_get(pool, &ps);
    cr_assert_eq(ps.live_allocs, 0);
    zc__pinned_pool_destroy(pool);
    free(model);
    t_assert_no_leaks();
}

Test(nvme, roundtrip_fixed_seed_one_dir) { property(1, 0, 8, 12345, 600); }
Test(nvme, roundtrip_fixed_seed_two_dirs) { property(2, 0, 8, 12345, 600); }
Test(nvme, roundtrip_random_seed_one_dir) { property(1, 0, 4, t_seed("nvme/roundtrip_random_one"), 600); }
Test(nvme, roundtrip_random_seed_two_dirs) { property(2, 0, 16, t_seed("nvme/roundtrip_random_two"), 600); }
Test(nvme, roundtrip_depth_one) { property(2, 0, 1, 777, 200); }
Test(nvme, roundtrip_single_submit) { property(2, ZC_NVME_SINGLE_SUBMIT, 8, 4242, 300); }
Test(nvme, roundtrip_no_overlap) { property(2, ZC_NVME_NO_OVERLAP, 8, 4343, 300); }
Test(nvme, roundtrip_single_submit_no_overlap)
{
    property(1, ZC_NVME_SINGLE_SUBMIT | ZC_NVME_NO_OVERLAP, 4, 4444, 200);
}
Test(nvme, roundtrip_buffered_unregistered) { property(2, ZC_NVME_BUFFERED | ZC_NVME_NO_FIXED, 8, 99, 300); }
Test(nvme, roundtrip_pread_engine) { property(2, ZC_NVME_SYNC, 8, 4242, 300); }

/* ------------------------------------------------------------------------- */
/* Layout on disk                                                            */
/* ------------------------------------------------------------------------- */

Test(nvme, stripes_alternate_between_directories_and_files_are_named)
{
    const size_t stripe = 64 * KiB;
    zc_nvme_store *st = open_store(2, 1 * MiB, stripe, stripe, 8, ZC_NVME_KEEP_FILES, NULL);
    char expect[2][1300];
    for (int i = 0; i < 2; i++) {
        snprintf(expect[i], sizeof expect[i], "%s/zeroc-r3-optimizer.swp", sub[i]);
        cr_assert_str_eq(zc__nvme_path(st, i), expect[i]);
        struct stat sb;
        cr_assert_eq(stat(expect[i], &sb), 0);
        cr_assert_eq(sb.st_size, 512 * KiB, "each file holds half the capacity");
        cr_assert_geq((uint64_t)sb.st_blocks * 512, 512 * KiB, "space is reserved (fallocate)");
    }
    zc_pinned_pool *pool = pool_for(st, 2 * MiB);
    unsigned char *buf;
    cr_assert_eq(zc__pinned_alloc(pool, MiB, 0, ZC_MEM_BUFFERS, "b", (void **)&buf), ZC_OK);
    ot_fill(buf, MiB, 7, 0);
    zc_nvme_ticket t;
    cr_assert_eq(zc__nvme_write(st, 0, buf, MiB, &t), ZC_OK);
    cr_assert_eq(zc__nvme_wait(st, t, NULL), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc__nvme_close(st, ZC_NVME_CLOSE_WAIT), ZC_OK);
    /* Stripe u of store space is at ((u / 2) * stripe) in file u % 2. */
    unsigned char *chunk = malloc(stripe);
    for (int u = 0; u < 16; u++) {
        int fd = open(expect[u % 2], O_RDONLY);
        cr_assert_eq(pread(fd, chunk, stripe, (off_t)((u / 2) * stripe)), (ssize_t)stripe);
        close(fd);
        cr_assert_eq(ot_check(chunk, stripe, 7, (unsigned long long)u * stripe), -1,
                     "stripe %d is not where the layout says", u);
    }
    free(chunk);
    zc__pinned_free(pool, buf);
    zc__pinned_pool_destroy(pool);
    /* Kept files: reopening them (KEEP_FILES takes an existing file over)
     * sees the data. */
    st = open_store(2, 1 * MiB, stripe, stripe, 8, ZC_NVME_KEEP_FILES, NULL);
    pool = pool_for(st, 2 * MiB);
    cr_assert_eq(zc__pinned_alloc(pool, MiB, 0, ZC_MEM_BUFFERS, "b", (void **)&buf), ZC_OK);
    cr_assert_eq(zc__nvme_read(st, 0, buf, MiB, &t), ZC_OK);
    cr_assert_eq(zc__nvme_wait(st, t, NULL), ZC_OK);
    cr_assert_eq(ot_check(buf, MiB, 7, 0), -1);
    zc__pinned_free(pool, buf);
    cr_assert_eq(zc__nvme_close(st, ZC_NVME_CLOSE_WAIT), ZC_OK);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(unlink(expect[i]), 0, "%s", expect[i]);
    zc__pinned_pool_destroy(pool);
    t_assert_no_leaks();
}

/* ------------------------------------------------------------------------- */
/* Misuse and setup errors                                                   */
/* ------------------------------------------------------------------------- */

Test(nvme, misaligned_requests_are_rejected_naming_the_alignment)
{
    zc_nvme_store *st = open_store(1, MiB, 64 * KiB, 0, 4, 0, NULL);
    zc_nvme_stats ss;
    zc__nvme_stats_get(st, &ss);
    char want[64];
    snprintf(want, sizeof want, "multiples of %zu", ss.alignment);
    zc_pinned_pool *pool = pool_for(st, MiB);
    unsigned char *buf;
    cr_assert_eq(zc__pinned_alloc(pool, 64 * KiB, 0, ZC_MEM_BUFFERS, "b", (void **)&buf), ZC_OK);
    zc_nvme_ticket t = 99;
    cr_assert_eq(zc__nvme_write(st, 100, buf, 4096, &t), ZC_ERR_INVALID_ARG);
    cr_assert_eq(t, 0);
    cr_assert(strstr(zc_last_error(), want), "%s", zc_last_error());
    cr_assert_eq(zc__nvme_read(st, 0, buf + 1, 4096, &t), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), want), "%s", zc_last_error());
    cr_assert_eq(zc__nvme_read(st, 0, buf, 4096 + 1, &t), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc__nvme_read(st, 0, buf, 0, &t), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc__nvme_read(st, MiB - 4096, buf, 8192, &t), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "capacity"), "%s", zc_last_error());
    /* A ticket waited twice, and one never issued. */
    cr_assert_eq(zc__nvme_read(st, 0, buf, 4096, &t), ZC_OK);
    cr_assert_eq(zc__nvme_wait(st, t, NULL), ZC_OK);
    cr_assert_eq(zc__nvme_wait(st, t, NULL), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc__nvme_wait(st, 12345678, NULL), ZC_ERR_INVALID_ARG);
    zc_nvme_stats after;
    zc__nvme_stats_get(st, &after);
    cr_assert_eq(after.tickets_live, 0, "rejected requests left nothing behind");
    zc__pinned_free(pool, buf);
    cr_assert_eq(zc__nvme_close(st, ZC_NVME_CLOSE_WAIT), ZC_OK);
    zc__pinned_pool_destroy(pool);
    t_assert_no_leaks();
}

static zc_status try_open(const char *dir, uint64_t cap, zc_nvme_store **st)
{
    const char *dirs[1] = {dir};
    zc_nvme_opts o = ZC_NVME_OPTS_INIT;
    o.dirs = dirs;
    o.ndirs = 1;
    o.purpose = "params";
    o.capacity = cap;
    return zc__nvme_open(st, &o);
}

Test(nvme, missing_or_non_directory_paths_are_reported_at_setup)
{
    char p[700];
    zc_nvme_store *st = (zc_nvme_store *)1;
    snprintf(p, sizeof p, "%s/no/such/dir", tdir);
    cr_assert_eq(try_open(p, MiB, &st), ZC_ERR_IO);
    cr_assert_null(st);
    cr_assert(strstr(zc_last_error(), p) && strstr(zc_last_error(), "does not exist"), "%s",
              zc_last_error());
    snprintf(p, sizeof p, "%s/afile", tdir);
    close(open(p, O_CREAT | O_WRONLY, 0644));
    cr_assert_eq(try_open(p, MiB, &st), ZC_ERR_IO);
    cr_assert(strstr(zc_last_error(), p) && strstr(zc_last_error(), "not a directory"), "%s",
              zc_last_error());
    const char *dirs[2] = {sub[0], sub[0]};
    zc_nvme_opts o = ZC_NVME_OPTS_INIT;
    o.dirs = dirs;
    o.ndirs = 2;
    o.purpose = "bad/name";
    o.capacity = MiB;
    cr_assert_eq(zc__nvme_open(&st, &o), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "purpose"), "%s", zc_last_error());
    o.purpose = "ok";
    cr_assert_eq(zc__nvme_open(&st, &o), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "twice"), "%s", zc_last_error());
    t_assert_no_leaks();
}

Test(nvme, unwritable_directory_is_reported_at_setup)
{
    char p[700];
    snprintf(p, sizeof p, "%s/ro", tdir);
    mkdir(p, 0755);
    char why[256];
    bool mounted = false;
    if (geteuid() == 0) {
        /* root ignores permission bits: use a read-only filesystem. */
        if (!ot_mount_tmpfs(p, "1m", "ro", why))
            cr_skip_test("%s", why);
        mounted = true;
    } else {
        chmod(p, 0555);
    }
    zc_nvme_store *st;
    zc_status rc = try_open(p, MiB, &st);
    if (mounted)
        ot_umount(p);
    cr_assert_eq(rc, ZC_ERR_IO);
    cr_assert(strstr(zc_last_error(), p) && strstr(zc_last_error(), "not writable"), "%s",
              zc_last_error());
    t_assert_no_leaks();
}

Test(nvme, full_disk_is_reported_at_setup_with_the_path)
{
    char p[700], why[256];
    snprintf(p, sizeof p, "%s/small", tdir);
    mkdir(p, 0755);
    if (!ot_mount_tmpfs(p, "1m", NULL, why))
        cr_skip_test("%s", why);
    zc_nvme_store *st;
    zc_status rc = try_open(p, 4 * MiB, &st);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", zc_last_error());
    /* Nothing is left behind on the full filesystem. */
    char f[800];
    snprintf(f, sizeof f, "%s/zeroc-r0-params.swp", p);
    int left = access(f, F_OK) == 0;
    /* What fits, fits. */
    zc_status rc2 = try_open(p, 512 * KiB, &st);
    if (rc2 == ZC_OK)
        zc__nvme_close(st, ZC_NVME_CLOSE_WAIT);
    ot_umount(p);
    cr_assert_eq(rc, ZC_ERR_IO);
    cr_assert(strstr(msg, f) && strstr(msg, "ENOSPC") && strstr(msg, "4.00 MiB"), "%s", msg);
    cr_assert(!left, "the failed open left %s behind", f);
    cr_assert_eq(rc2, ZC_OK, "%s", zc_last_error());
    t_assert_no_leaks();
}

/* ------------------------------------------------------------------------- */
/* Fault injection                                                           */
/* ------------------------------------------------------------------------- */

/* Writes n one-piece extents of `blk` (seed = index + 1), with faults. */
static void write_n(zc_nvme_store *st, unsigned char *buf, int n, size_t blk, zc_nvme_ticket *t)
{
    for (int i = 0; i < n; i++) {
        ot_fill(buf + i * blk, blk, (unsigned long long)i + 1, i * blk);
        cr_assert_eq(zc__nvme_write(st, i * blk, buf + i * blk, blk, &t[i]), ZC_OK);
    }
}

Test(nvme, injected_eio_lands_on_the_right_ticket_and_nothing_else_changes)
{
    const size_t blk = 64 * KiB;
    zc_nvme_faults f = {0};
    f.eio_at = 3;
    zc_nvme_store *st = open_store(1, MiB, blk, 0, 4, 0, &f);
    zc_pinned_pool *pool = pool_for(st, 2 * MiB);
    unsigned char *buf;
    cr_assert_eq(zc__pinned_alloc(pool, 8 * blk, 0, ZC_MEM_BUFFERS, "b", (void **)&buf), ZC_OK);
    zc_nvme_ticket t[6];
    write_n(st, buf, 6, blk, t);
    for (int i = 0; i < 6; i++) {
        zc_nvme_error e;
        zc_status rc = zc__nvme_wait(st, t[i], &e);
        if (i == 2) {
            cr_assert_eq(rc, ZC_ERR_IO);
            cr_assert_eq(e.err, EIO);
            cr_assert(e.is_write);
            cr_assert_str_eq(e.path, zc__nvme_path(st, 0));
            cr_assert_eq(e.file_offset, 2 * blk);
            cr_assert_eq(e.length, blk);
            const char *m = zc_last_error();
            cr_assert(strstr(m, zc__nvme_path(st, 0)) && strstr(m, "Input/output error") &&
                          strstr(m, "offset 131072") && strstr(m, "64.00 KiB"), "%s", m);
        } else {
            cr_assert_eq(rc, ZC_OK, "ticket %d: %s", i, zc_last_error());
            cr_assert_eq(e.err, 0);
        }
    }
    /* Every other extent reads back intact. */
    memset(buf, 0, 8 * blk);
    zc_nvme_ticket r;
    cr_assert_eq(zc__nvme_read(st, 0, buf, 6 * blk, &r), ZC_OK);
    cr_assert_eq(zc__nvme_wait(st, r, NULL), ZC_OK, "%s", zc_last_error());
    for (int i = 0; i < 6; i++)
        if (i != 2)
            cr_assert_eq(ot_check(buf + i * blk, blk, (unsigned long long)i + 1, i * blk), -1,
                         "extent %d", i);
    zc__pinned_free(pool, buf);
    cr_assert_eq(zc__nvme_close(st, ZC_NVME_CLOSE_WAIT), ZC_OK);
    zc__pinned_pool_destroy(pool);
    t_assert_no_leaks();
}

Test(nvme, eio_on_a_middle_piece_names_that_piece_and_stops_the_ticket)
{
    const size_t blk = 32 * KiB;
    zc_nvme_faults f = {0};
    f.eio_at = 5; /* request 5 = piece 2 of the second ticket (4 pieces each) */
    zc_nvme_store *st = open_store(2, MiB, blk, blk, 2, 0, &f);
    zc_pinned_pool *pool = pool_for(st, MiB);
    unsigned char *buf;
    cr_assert_eq(zc__pinned_alloc(pool, 8 * blk, 0, ZC_MEM_BUFFERS, "b", (void **)&buf), ZC_OK);
    zc_nvme_ticket a, b;
    cr_assert_eq(zc__nvme_read(st, 0, buf, 4 * blk, &a), ZC_OK);
    cr_assert_eq(zc__nvme_read(st, 4 * blk, buf + 4 * blk, 4 * blk, &b), ZC_OK);
    zc_nvme_error e;
    cr_assert_eq(zc__nvme_wait_all(st), ZC_ERR_IO);
    cr_assert(strstr(zc_last_error(), "read"), "%s", zc_last_error());
    cr_assert_eq(zc__nvme_wait(st, a, &e), ZC_ERR_INVALID_ARG, "wait_all retired it");
    /* With io_uring at depth 2, b's pieces 1-2 were in flight when piece 1
     * failed (4 + 2 requests); the pread engine runs one at a time (4 + 1).
     * Either way pieces 3-4 were never issued. */
    zc_nvme_stats s;
    zc__nvme_stats_get(st, &s);
    cr_assert_eq(s.submitted, s.uring ? 6 : 5);
    /* Again with individual waits to see the error record: b's 2nd piece. */
    f.eio_at = s.submitted + 4 + 2;
    zc__nvme_set_faults(st, &f);
    cr_assert_eq(zc__nvme_read(st, 0, buf, 4 * blk, &a), ZC_OK);
    cr_assert_eq(zc__nvme_read(st, 4 * blk, buf + 4 * blk, 4 * blk, &b), ZC_OK);
    cr_assert_eq(zc__nvme_wait(st, b, &e), ZC_ERR_IO);
    /* Store stripe 5 is file 1's second stripe. */
    cr_assert_str_eq(e.path, zc__nvme_path(st, 1));
    cr_assert_eq(e.file_offset, 2 * blk);
    cr_assert_eq(e.store_offset, 4 * blk);
    cr_assert_eq(e.store_length, 4 * blk);
    cr_assert_eq(zc__nvme_wait(st, a, &e), ZC_OK);
    zc__pinned_free(pool, buf);
    cr_assert_eq(zc__nvme_close(st, ZC_NVME_CLOSE_WAIT), ZC_OK);
    zc__pinned_pool_destroy(pool);
    t_assert_no_leaks();
}

Test(nvme, short_reads_and_eagain_are_resubmitted_transparently)
{
    const size_t blk = 64 * KiB;
    zc_nvme_store *st = open_store(1, MiB, blk, 0, 4, 0, NULL);
    zc_pinned_pool *pool = pool_for(st, 2 * MiB);
    unsigned char *buf;
    cr_assert_eq(zc__pinned_alloc(pool, 8 * blk, 0, ZC_MEM_BUFFERS, "b", (void **)&buf), ZC_OK);
    zc_nvme_ticket t[6];
    write_n(st, buf, 6, blk, t);
    cr_assert_eq(zc__nvme_wait_all(st), ZC_OK, "%s", zc_last_error());
    zc_nvme_stats s0;
    zc__nvme_stats_get(st, &s0);
    /* Requests 7 (short) and 9 (EAGAIN) are the 1st and 3rd reads below;
     * request 8 gets a short write... no: the 2nd read. Writes go first. */
    zc_nvme_faults f = {0};
    f.short_at = 7;
    f.eagain_at = 9;
    zc__nvme_set_faults(st, &f);
    memset(buf, 0, 8 * blk);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(zc__nvme_read(st, i * blk, buf + i * blk, blk, &t[i]), ZC_OK);
    for (int i = 0; i < 6; i++) {
        cr_assert_eq(zc__nvme_wait(st, t[i], NULL), ZC_OK, "%s", zc_last_error());
        cr_assert_eq(ot_check(buf + i * blk, blk, (unsigned long long)i + 1, i * blk), -1,
                     "extent %d", i);
    }
    zc_nvme_stats s1;
    zc__nvme_stats_get(st, &s1);
    cr_assert_eq(s1.resubmitted - s0.resubmitted, 2, "one short read and one EAGAIN continued");
    cr_assert_eq(s1.submitted - s0.submitted, 8, "6 requests + 2 resubmissions");
    zc__pinned_free(pool, buf);
    cr_assert_eq(zc__nvme_close(st, ZC_NVME_CLOSE_WAIT), ZC_OK);
    zc__pinned_pool_destroy(pool);
    t_assert_no_leaks();
}

Test(nvme, injected_enospc_on_a_write)
{
    const size_t blk = 64 * KiB;
    zc_nvme_faults f;
    cr_assert_eq(zc__nvme_parse_faults("enospc=2", &f), ZC_OK);
    zc_nvme_store *st = open_store(1, MiB, blk, 0, 4, 0, &f);
    zc_pinned_pool *pool = pool_for(st, 2 * MiB);
    unsigned char *buf;
    cr_assert_eq(zc__pinned_alloc(pool, 8 * blk, 0, ZC_MEM_BUFFERS, "b", (void **)&buf), ZC_OK);
    /* A read first: ENOSPC counts writes only. */
    zc_nvme_ticket r, t[3];
    cr_assert_eq(zc__nvme_read(st, 7 * blk, buf + 7 * blk, blk, &r), ZC_OK);
    write_n(st, buf, 3, blk, t);
    cr_assert_eq(zc__nvme_wait(st, r, NULL), ZC_OK);
    cr_assert_eq(zc__nvme_wait(st, t[0], NULL), ZC_OK);
    zc_nvme_error e;
    cr_assert_eq(zc__nvme_wait(st, t[1], &e), ZC_ERR_IO);
    cr_assert_eq(e.err, ENOSPC);
    cr_assert(strstr(zc_last_error(), "No space left on device"), "%s", zc_last_error());
    cr_assert_eq(zc__nvme_wait(st, t[2], NULL), ZC_OK);
    zc__pinned_free(pool, buf);
    cr_assert_eq(zc__nvme_close(st, ZC_NVME_CLOSE_WAIT), ZC_OK);
    zc__pinned_pool_destroy(pool);
    t_assert_no_leaks();
}

Test(nvme, fault_spec_parsing)
{
    zc_nvme_faults f;
    cr_assert_eq(zc__nvme_parse_faults("eio=3,short=2,eagain=5,enospc=1,nodirect,noregister", &f),
                 ZC_OK);
    cr_assert_eq(f.eio_at, 3);
    cr_assert_eq(f.short_at, 2);
    cr_assert_eq(f.eagain_at, 5);
    cr_assert_eq(f.enospc_write_at, 1);
    cr_assert(f.refuse_direct && f.refuse_register);
    cr_assert_eq(zc__nvme_parse_faults("eio=0", &f), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc__nvme_parse_faults("bogus=1", &f), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "bogus"), "%s", zc_last_error());
}

Test(nvme, env_switch_injects_faults)
{
    setenv("ZC_NVME_FAULTS", "eio=1", 1);
    zc_nvme_store *st = open_store(1, MiB, 64 * KiB, 0, 4, 0, NULL);
    unsetenv("ZC_NVME_FAULTS");
    void *buf = aligned_alloc(4096, 4096);
    zc_nvme_ticket t;
    cr_assert_eq(zc__nvme_read(st, 0, buf, 4096, &t), ZC_OK);
    cr_assert_eq(zc__nvme_wait(st, t, NULL), ZC_ERR_IO);
    free(buf);
    cr_assert_eq(zc__nvme_close(st, ZC_NVME_CLOSE_WAIT), ZC_OK);
    t_assert_no_leaks();
}

/* ------------------------------------------------------------------------- */
/* Fallbacks                                                                 */
/* ------------------------------------------------------------------------- */

Test(nvme, refused_o_direct_falls_back_to_buffered_with_one_warning)
{
    ot_capture_logs();
    zc_nvme_faults f = {0};
    f.refuse_direct = true;
    zc_nvme_store *st = open_store(2, MiB, 64 * KiB, 0, 4, 0, &f);
    zc_nvme_stats s;
    zc__nvme_stats_get(st, &s);
    cr_assert(!s.direct);
    cr_assert_eq(ot_warnings_with("O_DIRECT"), 1, "one warning for two directories");
    zc_pinned_pool *pool = pool_for(st, MiB);
    unsigned char *buf;
    cr_assert_eq(zc__pinned_alloc(pool, 256 * KiB, 0, ZC_MEM_BUFFERS, "b", (void **)&buf), ZC_OK);
    ot_fill(buf, 256 * KiB, 5, 0);
    zc_nvme_ticket t;
    cr_assert_eq(zc__nvme_write(st, 0, buf, 256 * KiB, &t), ZC_OK);
    cr_assert_eq(zc__nvme_wait(st, t, NULL), ZC_OK);
    memset(buf, 0, 256 * KiB);
    cr_assert_eq(zc__nvme_read(st, 0, buf, 256 * KiB, &t), ZC_OK);
    cr_assert_eq(zc__nvme_wait(st, t, NULL), ZC_OK);
    cr_assert_eq(ot_check(buf, 256 * KiB, 5, 0), -1);
    zc__pinned_free(pool, buf);
    cr_assert_eq(zc__nvme_close(st, ZC_NVME_CLOSE_WAIT), ZC_OK);
    zc__pinned_pool_destroy(pool);
    zc_log_set_sink(NULL, NULL);
    t_assert_no_leaks();
}

static void register_fallback(bool real_limit)
{
    ot_capture_logs();
    zc_nvme_faults f = {0};
    f.refuse_register = !real_limit;
    zc_nvme_store *st = open_store(1, MiB, 64 * KiB, 0, 4, 0, &f);
    zc_pinned_pool *pool = pool_for(st, 4 * MiB); /* 4 MiB > a 1 MiB memlock limit */
    zc_nvme_stats s;
    zc__nvme_stats_get(st, &s);
    if (!s.uring) {
        zc__nvme_close(st, ZC_NVME_CLOSE_WAIT);
        zc__pinned_pool_destroy(pool);
        cr_skip_test("io_uring is not available here");
    }
    cr_assert(!s.fixed_buffers);
    cr_assert_geq(ot_warnings(), 1);
    cr_assert(strstr(ot_last_warning(), "register") && strstr(ot_last_warning(), "RLIMIT_MEMLOCK"),
              "%s", ot_last_warning());
    int w = ot_warnings();
    /* A second registration does not warn again. */
    zc_mem_region r[4];
    int n = zc__pinned_pool_regions(pool, r, 4);
    cr_assert_eq(zc__nvme_register_buffers(st, r, n), ZC_OK);
    cr_assert_eq(ot_warnings(), w);
    unsigned char *buf;
    cr_assert_eq(zc__pinned_alloc(pool, 128 * KiB, 0, ZC_MEM_BUFFERS, "b", (void **)&buf), ZC_OK);
    ot_fill(buf, 128 * KiB, 9, 4096);
    zc_nvme_ticket t;
    cr_assert_eq(zc__nvme_write(st, 4096, buf, 128 * KiB, &t), ZC_OK);
    cr_assert_eq(zc__nvme_wait(st, t, NULL), ZC_OK);
    memset(buf, 0, 128 * KiB);
    cr_assert_eq(zc__nvme_read(st, 4096, buf, 128 * KiB, &t), ZC_OK);
    cr_assert_eq(zc__nvme_wait(st, t, NULL), ZC_OK);
    cr_assert_eq(ot_check(buf, 128 * KiB, 9, 4096), -1);
    zc__pinned_free(pool, buf);
    cr_assert_eq(zc__nvme_close(st, ZC_NVME_CLOSE_WAIT), ZC_OK);
    zc__pinned_pool_destroy(pool);
    zc_log_set_sink(NULL, NULL);
    t_assert_no_leaks();
}

Test(nvme, refused_buffer_registration_falls_back_once) { register_fallback(false); }

Test(nvme, memlock_limit_blocks_registration_and_io_still_works)
{
    if (!ot_limit_memlock(1 * MiB))
        cr_skip_test("cannot drop CAP_IPC_LOCK / set RLIMIT_MEMLOCK here");
    register_fallback(true);
}

Test(nvme, registered_buffers_and_files_are_used_when_allowed)
{
    zc_nvme_store *st = open_store(1, MiB, 64 * KiB, 0, 4, 0, NULL);
    zc_pinned_pool *pool = pool_for(st, MiB);
    zc_nvme_stats s;
    zc__nvme_stats_get(st, &s);
    if (!s.uring)
        cr_skip_test("io_uring is not available here");
    zc_host_mem_limits l;
    zc__host_mem_limits_read(NULL, &l);
    if (l.can_lock_unlimited || l.memlock_limit >= 2 * MiB)
        cr_assert(s.fixed_buffers, "a 1 MiB region fits the memlock limit");
    cr_assert(s.fixed_files);
    cr_assert_eq(zc__nvme_close(st, ZC_NVME_CLOSE_WAIT), ZC_OK);
    zc__pinned_pool_destroy(pool);
    t_assert_no_leaks();
}

/* ------------------------------------------------------------------------- */
/* Closing with requests in flight                                           */
/* ------------------------------------------------------------------------- */

static void close_in_flight(zc_nvme_close_mode mode)
{
    const size_t blk = 256 * KiB;
    const int n = 48;
    zc_nvme_store *st = open_store(2, (uint64_t)n * blk, blk, 0, 4, ZC_NVME_KEEP_FILES, NULL);
    zc_pinned_pool *pool = pool_for(st, (size_t)n * blk);
    unsigned char *buf;
    cr_assert_eq(zc__pinned_alloc(pool, (size_t)n * blk, 0, ZC_MEM_BUFFERS, "b", (void **)&buf), ZC_OK);
    zc_nvme_ticket t[48];
    write_n(st, buf, n, blk, t);
    zc_nvme_stats s;
    zc__nvme_stats_get(st, &s);
    cr_assert_eq(s.tickets_live, n);
    zc_status rc = zc__nvme_close(st, mode);
    cr_assert_eq(rc, ZC_OK, "%s", zc_last_error());
    /* The buffers can be freed now: no request touches them after close. */
    zc__pinned_free(pool, buf);
    if (mode == ZC_NVME_CLOSE_WAIT) {
        /* Every write landed: reopen the kept files and check. */
        st = open_store(2, (uint64_t)n * blk, blk, 0, 4, ZC_NVME_KEEP_FILES, NULL);
        zc_mem_region r[4];
        int nr = zc__pinned_pool_regions(pool, r, 4);
        cr_assert_eq(zc__nvme_register_buffers(st, r, nr), ZC_OK);
        cr_assert_eq(zc__pinned_alloc(pool, (size_t)n * blk, 0, ZC_MEM_BUFFERS, "b", (void **)&buf), ZC_OK);
        memset(buf, 0, (size_t)n * blk);
        zc_nvme_ticket rt;
        cr_assert_eq(zc__nvme_read(st, 0, buf, (size_t)n * blk, &rt), ZC_OK);
        cr_assert_eq(zc__nvme_wait(st, rt, NULL), ZC_OK);
        for (int i = 0; i < n; i++)
            cr_assert_eq(ot_check(buf + i * blk, blk, (unsigned long long)i + 1, i * blk), -1,
                         "extent %d", i);
        zc__pinned_free(pool, buf);
        /* Cancel with nothing in flight is fine too. */
        cr_assert_eq(zc__nvme_close(st, ZC_NVME_CLOSE_CANCEL), ZC_OK);
    }
    {
        char p[800];
        for (int i = 0; i < 2; i++) {
            snprintf(p, sizeof p, "%s/zeroc-r3-optimizer.swp", sub[i]);
            unlink(p);
        }
    }
    zc__pinned_pool_destroy(pool);
    t_assert_no_leaks();
}

Test(nvme, close_waits_for_requests_in_flight) { close_in_flight(ZC_NVME_CLOSE_WAIT); }
Test(nvme, close_cancels_requests_in_flight) { close_in_flight(ZC_NVME_CLOSE_CANCEL); }

Test(nvme, close_reports_an_unwaited_error)
{
    zc_nvme_faults f = {0};
    f.eio_at = 2;
    zc_nvme_store *st = open_store(1, MiB, 64 * KiB, 0, 4, 0, &f);
    void *buf = aligned_alloc(4096, 3 * 64 * KiB);
    zc_nvme_ticket t[3];
    write_n(st, buf, 3, 64 * KiB, t);
    cr_assert_eq(zc__nvme_close(st, ZC_NVME_CLOSE_WAIT), ZC_ERR_IO);
    cr_assert(strstr(zc_last_error(), "Input/output error"), "%s", zc_last_error());
    free(buf);
    t_assert_no_leaks();
}

/* ------------------------------------------------------------------------- */
/* A named file (checkpoint shards)                                          */
/* ------------------------------------------------------------------------- */

static zc_status open_named(const char *path, uint64_t cap, unsigned flags, zc_nvme_store **st)
{
    zc_nvme_opts o = ZC_NVME_OPTS_INIT;
    o.file = path;
    o.capacity = cap;
    o.alignment = 4096;
    o.block_size = 64 * KiB;
    o.queue_depth = 4;
    o.flags = flags;
    return zc__nvme_open(st, &o);
}

Test(nvme, named_file_is_created_exclusively_sized_exactly_kept_and_read_back)
{
    char path[700];
    snprintf(path, sizeof path, "%s/shard.bin", sub[0]);
    /* 300 KiB: a multiple of the alignment, not of the 64 KiB block. */
    const size_t len = 300 * KiB;
    unsigned char *buf = aligned_alloc(4096, len), *back = aligned_alloc(4096, len);
    cr_assert(buf && back);
    ot_fill(buf, len, 31, 0);
    zc_nvme_store *st;
    cr_assert_eq(open_named(path, len, 0, &st), ZC_OK, "%s", zc_last_error());
    zc_nvme_ticket t;
    cr_assert_eq(zc__nvme_write(st, 0, buf, len, &t), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc__nvme_fsync(st), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc__nvme_close(st, ZC_NVME_CLOSE_WAIT), ZC_OK);

    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0, "close keeps a named file");
    cr_assert_eq((uint64_t)sb.st_size, len, "sized to the capacity, not to whole stripes");

    /* An existing name is never taken over. */
    zc_nvme_store *again = NULL;
    cr_assert_eq(open_named(path, len, 0, &again), ZC_ERR_IO);
    cr_assert(strstr(zc_last_error(), path) && strstr(zc_last_error(), "File exists"), "%s",
              zc_last_error());
    cr_assert_null(again);

    /* Read-only: what was written, and nothing beyond the file. */
    cr_assert_eq(open_named(path, len, ZC_NVME_READ_ONLY, &st), ZC_OK, "%s", zc_last_error());
    memset(back, 0, len);
    cr_assert_eq(zc__nvme_read(st, 0, back, len, &t), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc__nvme_wait(st, t, NULL), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(ot_check(back, len, 31, 0), -1);
    cr_assert_eq(zc__nvme_close(st, ZC_NVME_CLOSE_WAIT), ZC_OK);
    cr_assert_eq(stat(path, &sb), 0, "a read-only store removes nothing");

    cr_assert_eq(open_named(path, len + 4096, ZC_NVME_READ_ONLY, &st), ZC_ERR_IO);
    cr_assert(strstr(zc_last_error(), "shorter"), "%s", zc_last_error());
    snprintf(path, sizeof path, "%s/missing.bin", sub[0]);
    cr_assert_eq(open_named(path, len, ZC_NVME_READ_ONLY, &st), ZC_ERR_IO);
    cr_assert(strstr(zc_last_error(), "missing.bin"), "%s", zc_last_error());
    cr_assert_eq(access(path, F_OK), -1, "a read-only open creates nothing");

    /* READ_ONLY means a named file. */
    const char *dirs[1] = {sub[1]};
    zc_nvme_opts o = ZC_NVME_OPTS_INIT;
    o.dirs = dirs;
    o.ndirs = 1;
    o.purpose = "x";
    o.capacity = MiB;
    o.flags = ZC_NVME_READ_ONLY;
    cr_assert_eq(zc__nvme_open(&st, &o), ZC_ERR_INVALID_ARG);
    free(buf);
    free(back);
    t_assert_no_leaks();
}
