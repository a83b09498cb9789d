/* Swap files have no name: nothing of them can outlive the process.
 *
 * A store opened over two directories leaves both empty while its files hold
 * data (O_TMPFILE), and so it does where O_TMPFILE is refused (the file is
 * created under its name and unlinked at once; fault "notmpfile"). Only where
 * the unlink fails too ("nounlink") does the name stay, reported once, and
 * close removes it. A file already there under the swap file's name is never
 * taken over nor removed. Each case writes and reads back a pattern, so the
 * unnamed files are the store's real backing. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "offload/offload.h"
#include "offload/ot.h"

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

TestSuite(nvme_unnamed, .init = setup, .fini = teardown, .timeout = 120);

static int entries(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s", dir);
    for (struct dirent *de; (de = readdir(d));)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

static zc_status open_store(zc_nvme_store **st, const zc_nvme_faults *f)
{
    const char *dirs[2] = {sub[0], sub[1]};
    zc_nvme_opts o = ZC_NVME_OPTS_INIT;
    o.dirs = dirs;
    o.ndirs = 2;
    o.rank = 1;
    o.purpose = "optimizer";
    o.capacity = 2 * MiB;
    o.block_size = 256 * KiB;
    o.faults = f;
    return zc__nvme_open(st, &o);
}

/* Writes 2 MiB of pattern and reads it back through the store. */
static void round_trip(zc_nvme_store *st)
{
    zc_pinned_pool_opts po = ZC_PINNED_POOL_OPTS_INIT;
    po.slab_bytes = 4 * MiB;
    po.reserve_bytes = 4 * MiB;
    po.flags = ZC_PINNED_NO_CUDA;
    zc_pinned_pool *pool;
    cr_assert_eq(zc__pinned_pool_create(&pool, &po), ZC_OK, "%s", zc_last_error());
    unsigned char *w, *r;
    cr_assert_eq(zc__pinned_alloc(pool, 2 * MiB, 0, ZC_MEM_BUFFERS, "w", (void **)&w), ZC_OK);
    cr_assert_eq(zc__pinned_alloc(pool, 2 * MiB, 0, ZC_MEM_BUFFERS, "r", (void **)&r), ZC_OK);
    ot_fill(w, 2 * MiB, 11, 0);
    memset(r, 0, 2 * MiB);
    zc_nvme_ticket t;
    cr_assert_eq(zc__nvme_write(st, 0, w, 2 * MiB, &t), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc__nvme_wait(st, t, NULL), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc__nvme_read(st, 0, r, 2 * MiB, &t), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc__nvme_wait(st, t, NULL), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(ot_check(r, 2 * MiB, 11, 0), -1, "the data did not round-trip");
    zc__pinned_free(pool, w);
    zc__pinned_free(pool, r);
    zc__pinned_pool_destroy(pool);
}

static void unnamed_case(const zc_nvme_faults *f)
{
    zc_nvme_store *st;
    cr_assert_eq(open_store(&st, f), ZC_OK, "%s", zc_last_error());
    zc_nvme_stats s;
    zc__nvme_stats_get(st, &s);
    cr_assert(s.unnamed, "the store reports named files");
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(entries(sub[i]), 0, "%s holds a name while the store is open", sub[i]);
        cr_assert_eq(zc__nvme_file_size(st, i), (int64_t)MiB, "file %d's size", i);
    }
    round_trip(st);
    cr_assert_eq(zc__nvme_close(st, ZC_NVME_CLOSE_WAIT), ZC_OK, "%s", zc_last_error());
    for (int i = 0; i < 2; i++)
        cr_assert_eq(entries(sub[i]), 0);
    t_assert_no_leaks();
}

Test(nvme_unnamed, tmpfile_leaves_no_name) { unnamed_case(NULL); }

Test(nvme_unnamed, without_tmpfile_the_name_goes_at_once)
{
    zc_nvme_faults f = {.refuse_tmpfile = true};
    unnamed_case(&f);
}

/* Neither O_TMPFILE nor the unlink: the name stays while the store is open
 * (said once, as a warning) and close removes it. */
Test(nvme_unnamed, name_kept_only_when_unlink_fails_and_close_removes_it)
{
    ot_capture_logs();
    zc_nvme_faults f = {.refuse_tmpfile = true, .refuse_unlink = true};
    zc_nvme_store *st;
    cr_assert_eq(open_store(&st, &f), ZC_OK, "%s", zc_last_error());
    zc_nvme_stats s;
    zc__nvme_stats_get(st, &s);
    cr_assert(!s.unnamed);
    for (int i = 0; i < 2; i++) {
        char p[1300];
        snprintf(p, sizeof p, "%s/zeroc-r1-optimizer.swp", sub[i]);
        cr_assert_eq(access(p, F_OK), 0, "%s", p);
    }
    cr_assert_eq(ot_warnings_with("cannot unlink the open swap file"), 1, "not said exactly once");
    round_trip(st);
    cr_assert_eq(zc__nvme_close(st, ZC_NVME_CLOSE_WAIT), ZC_OK, "%s", zc_last_error());
    for (int i = 0; i < 2; i++)
        cr_assert_eq(entries(sub[i]), 0, "close left the name in %s", sub[i]);
    t_assert_no_leaks();
}

/* A file already there under the swap file's name (another process's, or
 * a crashed run's) is not taken over when the store needs a name, and stays
 * as it was. */
Test(nvme_unnamed, existing_file_of_the_name_is_neither_taken_nor_removed)
{
    char p[1300];
    snprintf(p, sizeof p, "%s/zeroc-r1-optimizer.swp", sub[1]);
    FILE *fp = fopen(p, "wx");
    cr_assert_not_null(fp);
    fputs("someone else's", fp);
    fclose(fp);
    zc_nvme_faults f = {.refuse_tmpfile = true};
    zc_nvme_store *st = NULL;
    cr_assert_eq(open_store(&st, &f), ZC_ERR_IO);
    cr_assert_null(st);
    cr_assert_not_null(strstr(zc_last_error(), "File exists"), "%s", zc_last_error());
    fp = fopen(p, "r");
    char b[32] = "";
    cr_assert_not_null(fp);
    cr_assert_not_null(fgets(b, sizeof b, fp));
    fclose(fp);
    cr_assert_str_eq(b, "someone else's");
    cr_assert_eq(entries(sub[0]), 0, "the failed open left a file in %s", sub[0]);
    /* With O_TMPFILE the name is never looked at: it opens. */
    cr_assert_eq(open_store(&st, NULL), ZC_OK, "%s", zc_last_error());
    cr_assert_eq(zc__nvme_close(st, ZC_NVME_CLOSE_WAIT), ZC_OK);
    cr_assert_eq(entries(sub[1]), 1);
    t_assert_no_leaks();
}
