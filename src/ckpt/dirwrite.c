/* Writing a checkpoint directory (dirwrite.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/regfile.h"
#include "ckpt/dirwrite.h"
#include "ckpt/fsio.h"

/* The index a rank leaves next to its shard file for rank 0: a header and
 * the entries as they are in memory (same build, same machine family: it
 * never leaves the staging directory). */
#define IDX_MAGIC 0x49434b5aU /* "ZKCI" */
/* DIR/latest's next content, renamed over it at the publish. */
#define LATEST_TMP ZC_CK_LATEST ".tmp"

static void staging_name(char out[ZC_CK_TAG_MAX + 16], const char *tag)
{
    snprintf(out, ZC_CK_TAG_MAX + 16, ".%s.partial", tag);
}

zc_status zc__ck_staging_path(char *out, const char *dir, const char *tag)
{
    char name[ZC_CK_TAG_MAX + 16];
    staging_name(name, tag);
    return zc__ck_join(out, ZC_CK_PATH_MAX, dir, name);
}

/* Names a save writes inside the staging directory (the marker aside). */
static bool ours(const char *n)
{
    unsigned r;
    char tail[16] = "";
    if (!strcmp(n, ZC_CK_MANIFEST) || !strcmp(n, ZC_CK_MANIFEST ".tmp"))
        return true;
    return sscanf(n, "rank_%5u.%15s", &r, tail) == 2 && strlen(n) >= 14 &&
           (!strcmp(tail, "bin") || !strcmp(tail, "bin.tmp") || !strcmp(tail, "idx") ||
            !strcmp(tail, "idx.tmp"));
}

static zc_status open_dir(const char *dir, int *dfd)
{
    *dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (*dfd < 0)
        return ZC_ERR(ZC_ERR_IO, "checkpoint directory %s: cannot open: %s", dir,
                      errno == ENOTDIR ? "not a directory" : strerror(errno));
    return ZC_OK;
}

/* The staging directory `name` in dfd, opened without following a symbolic
 * link: *sfd = -1 when there is none. *marked: it holds the marker. Refuses
 * what a save cannot have made (a link, a file, another user's directory). */
static zc_status open_staging(int dfd, const char *name, const char *sp, int *sfd, bool *marked)
{
    *sfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    *marked = false;
    if (*sfd < 0) {
        if (errno == ENOENT)
            return ZC_OK;
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode))
            return ZC_ERR(ZC_ERR_IO, "%s is %s, not a staging directory a zeroc save made: "
                          "nothing there is touched; remove it by hand", sp,
                          zc__file_kind(st.st_mode));
        return ZC_ERR(ZC_ERR_IO, "%s: cannot open: %s", sp, strerror(errno));
    }
    struct stat st, mk;
    if (fstat(*sfd, &st) != 0 || st.st_uid != geteuid()) {
        close(*sfd);
        *sfd = -1;
        return ZC_ERR(ZC_ERR_IO, "%s belongs to another user: not a staging directory this "
                      "save made; nothing there is touched", sp);
    }
    *marked = fstatat(*sfd, ZC_CK_STAGING_MARK, &mk, AT_SYMLINK_NOFOLLOW) == 0 &&
              S_ISREG(mk.st_mode);
    return ZC_OK;
}

/* Removes the staging directory `name` of dfd and the names a save writes in
 * it. strict: anything else there, or a directory with entries but no
 * marker, is an error naming it, and nothing is removed; otherwise (abort)
 * only a marked directory is cleared, as far as it goes. Every removal is
 * relative to the directory's descriptor and never follows a link. */
static zc_status clear_staging(int dfd, const char *name, const char *sp, bool strict)
{
    int sfd;
    bool marked;
    zc_status rc = open_staging(dfd, name, sp, &sfd, &marked);
    if (rc != ZC_OK)
        return strict ? rc : ZC_OK;
    if (sfd < 0)
        return ZC_OK;
    int lfd = dup(sfd);
    DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
    if (!d) {
        rc = ZC_ERR(ZC_ERR_IO, "%s: cannot list: %s", sp, strerror(errno));
        if (lfd >= 0)
            close(lfd);
        close(sfd);
        return strict ? rc : ZC_OK;
    }
    /* First pass: decide; nothing is removed unless all of it may be. */
    struct dirent *de;
    bool any = false;
    char foreign[256] = "";
    while ((de = readdir(d))) {
        const char *n = de->d_name;
        if (!strcmp(n, ".") || !strcmp(n, "..") || !strcmp(n, ZC_CK_STAGING_MARK))
            continue;
        any = true;
        if (!ours(n) && !foreign[0])
            snprintf(foreign, sizeof foreign, "%s", n);
    }
    if (any && !marked)
        rc = ZC_ERR(ZC_ERR_IO, "%s was not made by a zeroc save (it lacks %s): nothing there is "
                    "touched; remove it by hand", sp, ZC_CK_STAGING_MARK);
    else if (foreign[0])
        rc = ZC_ERR(ZC_ERR_IO, "%s holds '%s', which a checkpoint save does not write: "
                    "remove it by hand", sp, foreign);
    if (strict ? rc == ZC_OK : marked) {
        rewinddir(d);
        while ((de = readdir(d)))
            if (ours(de->d_name))
                unlinkat(sfd, de->d_name, 0);
        unlinkat(sfd, ZC_CK_STAGING_MARK, 0);
        /* AT_REMOVEDIR removes only an empty directory, and never through a
         * link put in its place meanwhile. */
        if (unlinkat(dfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT && rc == ZC_OK && strict)
            rc = ZC_ERR(ZC_ERR_IO, "%s: cannot remove the stale staging directory: %s", sp,
                        strerror(errno));
    }
    closedir(d);
    close(sfd);
    return strict ? rc : ZC_OK;
}

zc_status zc__ck_stage_open(const char *dir, const char *tag)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return ZC_ERR(ZC_ERR_IO, "checkpoint directory %s: cannot create: %s", dir,
                      strerror(errno));
    int dfd, sfd = -1, mfd = -1;
    ZC_CHECK(open_dir(dir, &dfd));
    char name[ZC_CK_TAG_MAX + 16], p[ZC_CK_PATH_MAX], sp[ZC_CK_PATH_MAX];
    staging_name(name, tag);
    struct stat st;
    zc_status rc = zc__ck_join(p, sizeof p, dir, tag);
    if (rc == ZC_OK)
        rc = zc__ck_join(sp, sizeof sp, dir, name);
    if (rc == ZC_OK && fstatat(dfd, tag, &st, AT_SYMLINK_NOFOLLOW) == 0)
        rc = ZC_ERR(ZC_ERR_IO, "checkpoint %s exists already: save under another tag or "
                    "remove it", p);
    if (rc == ZC_OK)
        rc = clear_staging(dfd, name, sp, true);
    /* mkdirat never follows a link: a name that reappeared is EEXIST. */
    if (rc == ZC_OK && mkdirat(dfd, name, 0755) != 0)
        rc = ZC_ERR(ZC_ERR_IO, "%s: cannot create the staging directory: %s", sp,
                    strerror(errno));
    bool marked = false;
    if (rc == ZC_OK)
        rc = open_staging(dfd, name, sp, &sfd, &marked);
    if (rc == ZC_OK && sfd < 0)
        rc = ZC_ERR(ZC_ERR_IO, "%s vanished as it was made", sp);
    if (rc == ZC_OK)
        rc = zc__ck_create_at(sfd, sp, ZC_CK_STAGING_MARK, &mfd);
    if (rc == ZC_OK) {
        /* Durable before anything is written next to it: a crash leaves
         * either an empty directory or a marked one. */
        if (fsync(mfd) != 0)
            rc = ZC_ERR(ZC_ERR_IO, "%s/%s: fsync: %s", sp, ZC_CK_STAGING_MARK, strerror(errno));
        close(mfd);
    }
    /* No fsync of DIR: until the commit renames the staging directory (and
     * fsyncs DIR), a crash may lose it whole, with all it holds, which is as
     * good as an empty one. */
    if (rc == ZC_OK)
        rc = zc__ck_fsync_fd(sfd, sp);
    if (sfd >= 0)
        close(sfd);
    close(dfd);
    return rc;
}

zc_status zc__ck_staging_open(const char *dir, const char *tag, int *dfd, int *sfd)
{
    int d;
    *sfd = -1;
    ZC_CHECK(open_dir(dir, &d));
    char name[ZC_CK_TAG_MAX + 16], sp[ZC_CK_PATH_MAX];
    staging_name(name, tag);
    bool marked = false;
    zc_status rc = zc__ck_join(sp, sizeof sp, dir, name);
    if (rc == ZC_OK)
        rc = open_staging(d, name, sp, sfd, &marked);
    if (rc == ZC_OK && (*sfd < 0 || !marked))
        rc = ZC_ERR(ZC_ERR_IO, "%s is %s: the save that made it is gone", sp,
                    *sfd < 0 ? "missing" : "no longer marked as a zeroc staging directory");
    if (rc != ZC_OK && *sfd >= 0) {
        close(*sfd);
        *sfd = -1;
    }
    if (rc != ZC_OK || !dfd)
        close(d);
    else
        *dfd = d;
    return rc;
}

void zc__ck_stage_abort(const char *dir, const char *tag)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return;
    char name[ZC_CK_TAG_MAX + 16], sp[ZC_CK_PATH_MAX];
    staging_name(name, tag);
    if (zc__ck_join(sp, sizeof sp, dir, name) == ZC_OK)
        (void)clear_staging(dfd, name, sp, false);
    /* A prepared `latest` that was never published (zc__ck_stage_prepare). */
    unlinkat(dfd, LATEST_TMP, 0);
    close(dfd);
}

void zc__ck_index_name(int rank, char out[32]) { snprintf(out, 32, "rank_%05d.idx", rank); }

zc_status zc__ck_index_write(int sfd, const char *sp, int rank, const zc_ck_entry *ents,
                             int64_t n, uint64_t bytes)
{
    /* The index: header {magic, count, bytes}, then the entries. */
    char name[32], tmp[40];
    int fd;
    zc__ck_index_name(rank, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", name);
    ZC_CHECK(zc__ck_create_at(sfd, sp, tmp, &fd));
    uint64_t head[3] = {IDX_MAGIC, (uint64_t)n, bytes};
    zc_status rc = zc__ck_pwrite(fd, head, sizeof head, 0, tmp);
    if (rc == ZC_OK && n)
        rc = zc__ck_pwrite(fd, ents, (size_t)n * sizeof *ents, sizeof head, tmp);
    if (rc != ZC_OK) {
        close(fd);
        unlinkat(sfd, tmp, 0);
        return rc;
    }
    /* Read by rank 0 before the commit and never after a crash (a staging
     * directory left by one is cleared): no fsync. */
    return zc__ck_place_staged_at(fd, sfd, sp, tmp, name, false);
}

/* Reads rank r's index into m (appending its entries). The count is checked
 * against the file's size before anything is allocated from it. */
static zc_status read_index(int sfd, const char *sp, int r, zc_ck_manifest *m, int64_t *cap)
{
    char name[32], shown[ZC_CK_PATH_MAX + 40], why[ZC_CK_PATH_MAX + 128];
    zc__ck_index_name(r, name);
    snprintf(shown, sizeof shown, "%s/%s", sp, name);
    int fd;
    struct stat st;
    if (zc__open_regular_at(sfd, name, O_NOFOLLOW, shown, "a shard index a save wrote", &fd, &st,
                            why, sizeof why) != ZC_OPEN_OK)
        return ZC_ERR(ZC_ERR_IO, "%s", why);
    uint64_t head[3];
    zc_status rc = zc__ck_pread(fd, head, sizeof head, 0, shown);
    if (rc == ZC_OK &&
        (head[0] != IDX_MAGIC || head[1] > (uint64_t)INT64_MAX / sizeof(zc_ck_entry) ||
         (uint64_t)st.st_size != sizeof head + head[1] * sizeof(zc_ck_entry)))
        rc = ZC_ERR(ZC_ERR_IO, "%s: not a shard index of this build", shown);
    if (rc == ZC_OK && m->nentries + (int64_t)head[1] > *cap) {
        int64_t c = (m->nentries + (int64_t)head[1]) * 2 + 1;
        zc_ck_entry *e = realloc(m->entries, (size_t)c * sizeof *e);
        if (!e)
            rc = ZC_ERR(ZC_ERR_NO_MEMORY, "%s: %" PRIu64 " entries", shown, head[1]);
        else {
            m->entries = e;
            *cap = c;
        }
    }
    if (rc == ZC_OK && head[1])
        rc = zc__ck_pread(fd, m->entries + m->nentries, (size_t)head[1] * sizeof(zc_ck_entry),
                          sizeof head, shown);
    close(fd);
    if (rc != ZC_OK)
        return rc;
    m->nentries += (int64_t)head[1];
    zc__ck_file_name(r, m->files[r].name);
    m->files[r].rank = r;
    m->files[r].bytes = head[2];
    return ZC_OK;
}

/* The manifest into the staging directory, under its final name. */
static zc_status write_manifest(int sfd, const char *sp, const zc_ck_manifest *m)
{
    const char *tmp = ZC_CK_MANIFEST ".tmp";
    int fd;
    ZC_CHECK(zc__ck_create_at(sfd, sp, tmp, &fd));
    zc_status rc = zc__ck_manifest_write(m, fd, tmp);
    if (rc != ZC_OK) {
        close(fd);
        unlinkat(sfd, tmp, 0);
        return rc;
    }
    /* Its name is made durable with the staging directory's others, by the
     * commit's fsync of it before the rename. */
    return zc__ck_place_staged_at(fd, sfd, sp, tmp, ZC_CK_MANIFEST, true);
}

/* The written checkpoint as every reader will see it, before it is
 * published: the manifest read back through the loader's validation
 * (zc__ck_manifest_read: a save or reshard never publishes what a load would
 * refuse) and every shard file present with the size it records. */
static zc_status verify_written(int sfd, const char *sp, const zc_ck_manifest *m)
{
    char path[ZC_CK_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", sp, ZC_CK_MANIFEST);
    zc_ck_manifest back;
    zc_status rc = zc__ck_manifest_read_at(sfd, ZC_CK_MANIFEST, path, &back);
    if (rc != ZC_OK) {
        zc__error_context("the manifest just written does not read back");
        return rc;
    }
    if (back.nparams != m->nparams || back.nentries != m->nentries || back.nfiles != m->nfiles ||
        back.steps != m->steps || strcmp(back.tag, m->tag))
        rc = ZC_ERR(ZC_ERR_INTERNAL, "%s: read back, it differs from what was written", path);
    for (int f = 0; f < back.nfiles && rc == ZC_OK; f++) {
        struct stat st;
        if (fstatat(sfd, back.files[f].name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(st.st_mode) || (uint64_t)st.st_size != back.files[f].bytes)
            rc = ZC_ERR(ZC_ERR_IO, "%s/%s: not the %" PRIu64 "-byte shard file the manifest "
                        "records", sp, back.files[f].name, back.files[f].bytes);
    }
    zc__ck_manifest_free(&back);
    return rc;
}

/* DIR/latest.tmp naming tag, durable, for the publish to rename over
 * DIR/latest. */
static zc_status prepare_latest(int dfd, const char *dir, const char *tag)
{
    unlinkat(dfd, LATEST_TMP, 0); /* a crashed save's; the name is ours (a link
                                     is removed itself, never what it points to) */
    int fd;
    ZC_CHECK(zc__ck_create_at(dfd, dir, LATEST_TMP, &fd));
    char line[ZC_CK_TAG_MAX + 2];
    int n = snprintf(line, sizeof line, "%s\n", tag);
    zc_status rc = zc__ck_pwrite(fd, line, (size_t)n, 0, LATEST_TMP);
    const zc_status crc = zc__ck_sync_close(fd, dir, LATEST_TMP, rc == ZC_OK);
    if (rc == ZC_OK)
        rc = crc;
    if (rc != ZC_OK)
        unlinkat(dfd, LATEST_TMP, 0);
    return rc;
}

static zc_status prepare(int dfd, int sfd, const char *dir, const char *sp, zc_ck_manifest *m,
                         int nfiles)
{
    m->files = calloc((size_t)nfiles, sizeof *m->files);
    if (!m->files)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "checkpoint manifest: %d files", nfiles);
    m->nfiles = nfiles;
    int64_t cap = 0;
    for (int r = 0; r < nfiles; r++)
        ZC_CHECK(read_index(sfd, sp, r, m, &cap));
    ZC_CHECK(write_manifest(sfd, sp, m));
    ZC_CHECK(verify_written(sfd, sp, m));
    for (int r = 0; r < nfiles; r++) {
        char name[32];
        zc__ck_index_name(r, name);
        unlinkat(sfd, name, 0);
    }
    /* Every name the staging directory will hold is in place: made durable
     * at once. The shard files' bytes may still be on their way; the ranks
     * make them durable before the publish. */
    ZC_CHECK(zc__ck_fsync_fd(sfd, sp));
    return prepare_latest(dfd, dir, m->tag);
}

static zc_status publish(int dfd, int sfd, const char *dir, const char *sp, const char *tag)
{
    /* The checkpoint appears complete, in one rename that never replaces
     * an existing DIR/TAG... The marker goes through the rename: removed
     * before it, an interruption in between would leave a staging directory
     * that no longer says it is ours, and nothing would clear it. */
    char name[ZC_CK_TAG_MAX + 16];
    staging_name(name, tag);
    int r = renameat2(dfd, name, dfd, tag, RENAME_NOREPLACE);
    if (r != 0 && errno == EINVAL) {
        /* A filesystem without RENAME_NOREPLACE: check, then rename (an
         * existing empty DIR/TAG could otherwise be replaced silently). */
        struct stat st;
        if (fstatat(dfd, tag, &st, AT_SYMLINK_NOFOLLOW) == 0)
            errno = EEXIST;
        else
            r = renameat(dfd, name, dfd, tag);
    }
    if (r != 0)
        return ZC_ERR(ZC_ERR_IO, "rename %s -> %s/%s: %s", sp, dir, tag, strerror(errno));
    /* The checkpoint holds only what a reader reads (sfd is the same
     * directory under its new name). A marker left by a crash right here
     * is ignored by every reader. */
    unlinkat(sfd, ZC_CK_STAGING_MARK, 0);
    char tp[ZC_CK_PATH_MAX];
    ZC_CHECK(zc__ck_join(tp, sizeof tp, dir, tag));
    ZC_CHECK(zc__ck_fsync_fd(sfd, tp));
    ZC_CHECK(zc__ck_fsync_fd(dfd, dir));
    /* ...and only then does `latest` point at it. */
    if (renameat(dfd, LATEST_TMP, dfd, ZC_CK_LATEST) != 0)
        return ZC_ERR(ZC_ERR_IO, "rename %s/%s -> %s: %s", dir, LATEST_TMP, ZC_CK_LATEST,
                      strerror(errno));
    return zc__ck_fsync_fd(dfd, dir);
}

zc_status zc__ck_stage_prepare(const char *dir, zc_ck_manifest *m, int nfiles)
{
    char sp[ZC_CK_PATH_MAX];
    ZC_CHECK(zc__ck_staging_path(sp, dir, m->tag));
    int dfd, sfd;
    ZC_CHECK(zc__ck_staging_open(dir, m->tag, &dfd, &sfd));
    zc_status rc = prepare(dfd, sfd, dir, sp, m, nfiles);
    close(sfd);
    close(dfd);
    return rc;
}

zc_status zc__ck_stage_publish(const char *dir, const char *tag)
{
    char sp[ZC_CK_PATH_MAX];
    ZC_CHECK(zc__ck_staging_path(sp, dir, tag));
    int dfd, sfd;
    ZC_CHECK(zc__ck_staging_open(dir, tag, &dfd, &sfd));
    zc_status rc = publish(dfd, sfd, dir, sp, tag);
    close(sfd);
    close(dfd);
    return rc;
}

zc_status zc__ck_stage_commit(const char *dir, zc_ck_manifest *m, int nfiles)
{
    ZC_CHECK(zc__ck_stage_prepare(dir, m, nfiles));
    return zc__ck_stage_publish(dir, m->tag);
}
