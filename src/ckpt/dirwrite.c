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

#include "ckpt/dirwrite.h"
#include "ckpt/fsio.h"

/* The index a rank leaves next to its shard file for rank 0: a header and
 * the entries as they are in memory (same build, same machine family: it
 * never leaves the staging directory). */
#define IDX_MAGIC 0x49434b5aU /* "ZKCI" */

zc_status zc__ck_staging_path(char *out, const char *dir, const char *tag)
{
    char name[ZC_CK_TAG_MAX + 16];
    snprintf(name, sizeof name, ".%s.partial", tag);
    return zc__ck_join(out, ZC_CK_PATH_MAX, dir, name);
}

/* Names a save writes inside the staging directory. */
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

static zc_status clear_staging(const char *sp, bool strict)
{
    DIR *d = opendir(sp);
    if (!d) {
        if (errno == ENOENT)
            return ZC_OK;
        return ZC_ERR(ZC_ERR_IO, "%s: %s", sp, strerror(errno));
    }
    zc_status rc = ZC_OK;
    struct dirent *de;
    char p[ZC_CK_PATH_MAX];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (!ours(de->d_name)) {
            if (strict && rc == ZC_OK)
                rc = ZC_ERR(ZC_ERR_IO, "%s holds '%s', which a checkpoint save does not write: "
                            "remove it by hand", sp, de->d_name);
            continue;
        }
        if (zc__ck_join(p, sizeof p, sp, de->d_name) == ZC_OK)
            unlink(p);
    }
    closedir(d);
    if (rc == ZC_OK && rmdir(sp) != 0 && errno != ENOENT && strict)
        rc = ZC_ERR(ZC_ERR_IO, "%s: cannot remove the stale staging directory: %s", sp,
                    strerror(errno));
    return rc;
}

zc_status zc__ck_stage_open(const char *dir, const char *tag)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return ZC_ERR(ZC_ERR_IO, "checkpoint directory %s: cannot create: %s", dir,
                      strerror(errno));
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return ZC_ERR(ZC_ERR_IO, "checkpoint directory %s is not a directory", dir);
    char p[ZC_CK_PATH_MAX], sp[ZC_CK_PATH_MAX];
    ZC_CHECK(zc__ck_join(p, sizeof p, dir, tag));
    if (lstat(p, &st) == 0)
        return ZC_ERR(ZC_ERR_IO, "checkpoint %s exists already: save under another tag or "
                      "remove it", p);
    ZC_CHECK(zc__ck_staging_path(sp, dir, tag));
    ZC_CHECK(clear_staging(sp, true));
    if (mkdir(sp, 0755) != 0)
        return ZC_ERR(ZC_ERR_IO, "%s: cannot create the staging directory: %s", sp,
                      strerror(errno));
    return ZC_OK;
}

void zc__ck_stage_abort(const char *dir, const char *tag)
{
    char sp[ZC_CK_PATH_MAX];
    if (zc__ck_staging_path(sp, dir, tag) == ZC_OK)
        (void)clear_staging(sp, false);
}

zc_status zc__ck_index_write(const char *sp, int rank, const zc_ck_entry *ents, int64_t n,
                             uint64_t bytes)
{
    /* The index: header {magic, count, bytes}, then the entries. */
    char ip[ZC_CK_PATH_MAX], it[ZC_CK_PATH_MAX + 8];
    char name[32];
    int fd;
    snprintf(name, sizeof name, "rank_%05d.idx", rank);
    ZC_CHECK(zc__ck_join(ip, sizeof ip, sp, name));
    snprintf(it, sizeof it, "%s.tmp", ip);
    ZC_CHECK(zc__ck_create(it, &fd));
    uint64_t head[3] = {IDX_MAGIC, (uint64_t)n, bytes};
    zc_status rc = zc__ck_pwrite(fd, head, sizeof head, 0, it);
    if (rc == ZC_OK && n)
        rc = zc__ck_pwrite(fd, ents, (size_t)n * sizeof *ents, sizeof head, it);
    if (rc != ZC_OK) {
        close(fd);
        unlink(it);
        return rc;
    }
    return zc__ck_commit_file(fd, it, ip, sp);
}

/* Reads rank r's index into m (appending its entries). */
static zc_status read_index(const char *sp, int r, zc_ck_manifest *m, int64_t *cap)
{
    char name[32], ip[ZC_CK_PATH_MAX];
    snprintf(name, sizeof name, "rank_%05d.idx", r);
    ZC_CHECK(zc__ck_join(ip, sizeof ip, sp, name));
    int fd = open(ip, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ZC_ERR(ZC_ERR_IO, "%s: %s", ip, strerror(errno));
    uint64_t head[3];
    zc_status rc = zc__ck_pread(fd, head, sizeof head, 0, ip);
    if (rc == ZC_OK && (head[0] != IDX_MAGIC || head[1] > (uint64_t)1 << 40))
        rc = ZC_ERR(ZC_ERR_IO, "%s: not a shard index", ip);
    if (rc == ZC_OK && m->nentries + (int64_t)head[1] > *cap) {
        int64_t c = (m->nentries + (int64_t)head[1]) * 2 + 1;
        zc_ck_entry *e = realloc(m->entries, (size_t)c * sizeof *e);
        if (!e)
            rc = ZC_ERR(ZC_ERR_NO_MEMORY, "%s: %" PRIu64 " entries", ip, head[1]);
        else {
            m->entries = e;
            *cap = c;
        }
    }
    if (rc == ZC_OK && head[1])
        rc = zc__ck_pread(fd, m->entries + m->nentries, (size_t)head[1] * sizeof(zc_ck_entry),
                          sizeof head, ip);
    close(fd);
    if (rc != ZC_OK)
        return rc;
    m->nentries += (int64_t)head[1];
    zc__ck_file_name(r, m->files[r].name);
    m->files[r].rank = r;
    m->files[r].bytes = head[2];
    return ZC_OK;
}

zc_status zc__ck_stage_commit(const char *dir, zc_ck_manifest *m, int nfiles)
{
    char sp[ZC_CK_PATH_MAX], p[ZC_CK_PATH_MAX], t[ZC_CK_PATH_MAX + 8];
    ZC_CHECK(zc__ck_staging_path(sp, dir, m->tag));
    m->files = calloc((size_t)nfiles, sizeof *m->files);
    if (!m->files)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "checkpoint manifest: %d files", nfiles);
    m->nfiles = nfiles;
    int64_t cap = 0;
    for (int r = 0; r < nfiles; r++)
        ZC_CHECK(read_index(sp, r, m, &cap));

    ZC_CHECK(zc__ck_join(p, sizeof p, sp, ZC_CK_MANIFEST));
    snprintf(t, sizeof t, "%s.tmp", p);
    int fd;
    ZC_CHECK(zc__ck_create(t, &fd));
    zc_status rc = zc__ck_manifest_write(m, fd, t);
    if (rc != ZC_OK) {
        close(fd);
        unlink(t);
        return rc;
    }
    ZC_CHECK(zc__ck_commit_file(fd, t, p, sp));
    for (int r = 0; r < nfiles; r++) {
        char name[32];
        snprintf(name, sizeof name, "rank_%05d.idx", r);
        if (zc__ck_join(p, sizeof p, sp, name) == ZC_OK)
            unlink(p);
    }
    ZC_CHECK(zc__ck_fsync_dir(sp));
    /* The checkpoint appears complete, in one rename... */
    ZC_CHECK(zc__ck_join(p, sizeof p, dir, m->tag));
    if (rename(sp, p) != 0)
        return ZC_ERR(ZC_ERR_IO, "rename %s -> %s: %s", sp, p, strerror(errno));
    ZC_CHECK(zc__ck_fsync_dir(dir));
    /* ...and only then does `latest` point at it. */
    ZC_CHECK(zc__ck_join(p, sizeof p, dir, ZC_CK_LATEST));
    snprintf(t, sizeof t, "%s.tmp", p);
    unlink(t); /* a crashed save's; the name is ours */
    ZC_CHECK(zc__ck_create(t, &fd));
    char line[ZC_CK_TAG_MAX + 2];
    int n = snprintf(line, sizeof line, "%s\n", m->tag);
    rc = zc__ck_pwrite(fd, line, (size_t)n, 0, t);
    if (rc != ZC_OK) {
        close(fd);
        unlink(t);
        return rc;
    }
    return zc__ck_commit_file(fd, t, p, dir);
}
