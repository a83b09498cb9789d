/* Reading a saved checkpoint (source.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/regfile.h"
#include "ckpt/fsio.h"
#include "ckpt/hash.h"
#include "ckpt/source.h"

/* Verification reads through a bounded buffer, so checking a tensor of any
 * size needs 8 MiB. */
#define VERIFY_BUF ((size_t)8 << 20)

/* A tensor the file holds, for messages. */
static const char *some_tensor(const zc_ck_manifest *m, int f)
{
    for (int64_t i = 0; i < m->nentries; i++)
        if (m->entries[i].file == f)
            return m->params[m->entries[i].param].name;
    return "(none)";
}

zc_status zc__ck_source_open(zc_ck_source *s, const char *dir, const char *tag)
{
    memset(s, 0, sizeof *s);
    char t[ZC_CK_TAG_MAX + 1], mp[ZC_CK_PATH_MAX];
    ZC_CHECK(zc__ck_resolve_tag(dir, tag, t));
    ZC_CHECK(zc__ck_join(s->dir, sizeof s->dir, dir, t));
    ZC_CHECK(zc__ck_join(mp, sizeof mp, s->dir, ZC_CK_MANIFEST));
    ZC_CHECK(zc__ck_manifest_read(mp, &s->m));
    zc_ck_manifest *m = &s->m;
    zc_status rc = ZC_OK;
    s->fds = malloc((size_t)m->nfiles * sizeof *s->fds);
    s->verified = calloc((size_t)m->nentries + 1, 1);
    s->buf = malloc(VERIFY_BUF);
    if (!s->fds || !s->verified || !s->buf) {
        free(s->fds);
        s->fds = NULL;
        rc = ZC_ERR(ZC_ERR_NO_MEMORY, "%s: reading buffers", s->dir);
        goto fail;
    }
    for (int f = 0; f < m->nfiles; f++)
        s->fds[f] = -1;
    for (int f = 0; f < m->nfiles && rc == ZC_OK; f++) {
        char p[ZC_CK_PATH_MAX];
        ZC_CHECK_GOTO(zc__ck_join(p, sizeof p, s->dir, m->files[f].name), rc, fail);
        struct stat st;
        char why[ZC_CK_PATH_MAX + 128], what[200];
        snprintf(what, sizeof what, "a checkpoint shard file (rank %d's; holds tensor '%.100s')",
                 m->files[f].rank, some_tensor(m, f));
        const zc_open_result o = zc__open_regular(p, 0, what, &s->fds[f], &st, why, sizeof why);
        if (o == ZC_OPEN_FAILED && errno == ENOENT)
            rc = ZC_ERR(ZC_ERR_IO, "%s: missing shard file (rank %d's; holds tensor '%s')", p,
                        m->files[f].rank, some_tensor(m, f));
        else if (o != ZC_OPEN_OK)
            rc = ZC_ERR(ZC_ERR_IO, "%s", why);
        else if ((uint64_t)st.st_size != m->files[f].bytes)
            rc = ZC_ERR(ZC_ERR_IO, "%s: %lld bytes where the manifest says %" PRIu64 " (%s; "
                        "holds tensor '%s')", p, (long long)st.st_size, m->files[f].bytes,
                        (uint64_t)st.st_size < m->files[f].bytes ? "truncated" : "grown",
                        some_tensor(m, f));
    }
    if (rc == ZC_OK)
        return ZC_OK;
fail:
    zc__ck_source_close(s);
    return rc;
}

void zc__ck_source_close(zc_ck_source *s)
{
    for (int f = 0; s->fds && f < s->m.nfiles; f++)
        if (s->fds[f] >= 0)
            close(s->fds[f]);
    free(s->fds);
    free(s->verified);
    free(s->buf);
    zc__ck_manifest_free(&s->m);
    memset(s, 0, sizeof *s);
}

zc_status zc__ck_source_mismatch(const zc_ck_source *s, const zc_ck_entry *e)
{
    const zc_ck_manifest *m = &s->m;
    return ZC_ERR(ZC_ERR_IO, "%s/%s: checksum mismatch in tensor '%s' (%s, elements [%" PRId64
                  ", %" PRId64 ") at byte offset %" PRIu64 "): the file is damaged",
                  s->dir, m->files[e->file].name, m->params[e->param].name,
                  zc__ck_kind_name(e->kind), e->begin, e->end, e->offset);
}

zc_status zc__ck_source_verify(zc_ck_source *s, int64_t i)
{
    if (s->verified[i])
        return ZC_OK;
    const zc_ck_entry *e = &s->m.entries[i];
    const zc_ck_file *f = &s->m.files[e->file];
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "xxHash state");
    XXH3_64bits_reset(st);
    uint64_t left = zc__ck_entry_bytes(&s->m, e), off = e->offset;
    zc_status rc = ZC_OK;
    while (left && rc == ZC_OK) {
        size_t n = left < VERIFY_BUF ? (size_t)left : VERIFY_BUF;
        char p[ZC_CK_PATH_MAX + 40];
        snprintf(p, sizeof p, "%s/%s", s->dir, f->name);
        rc = zc__ck_pread(s->fds[e->file], s->buf, n, off, p);
        if (rc == ZC_OK)
            XXH3_64bits_update(st, s->buf, n);
        left -= n;
        off += n;
    }
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    if (rc != ZC_OK) {
        zc__error_context("tensor '%s' (%s)", s->m.params[e->param].name,
                          zc__ck_kind_name(e->kind));
        return rc;
    }
    if (h != e->xxh3)
        return zc__ck_source_mismatch(s, e);
    s->verified[i] = 1;
    return ZC_OK;
}

/* Calls fn for every entry overlapping [a, b) of (param, kind). */
static zc_status each_entry(zc_ck_source *s, int param, int kind, int64_t a, int64_t b,
                            void *dst)
{
    const zc_ck_manifest *m = &s->m;
    const uint64_t esz = zc__ck_elem_bytes(m->kdt[kind]);
    const int64_t lo = m->first_entry[param * ZC_CK__KINDS + kind];
    const int64_t hi = m->first_entry[param * ZC_CK__KINDS + kind + 1];
    for (int64_t i = lo; i < hi; i++) {
        const zc_ck_entry *e = &m->entries[i];
        if (e->end <= a || e->begin >= b)
            continue;
        ZC_CHECK(zc__ck_source_verify(s, i));
        if (!dst)
            continue;
        const int64_t x0 = e->begin > a ? e->begin : a, x1 = e->end < b ? e->end : b;
        char p[ZC_CK_PATH_MAX + 40];
        snprintf(p, sizeof p, "%s/%s", s->dir, m->files[e->file].name);
        ZC_CHECK(zc__ck_pread(s->fds[e->file], (char *)dst + (uint64_t)(x0 - a) * esz,
                              (size_t)((uint64_t)(x1 - x0) * esz),
                              e->offset + (uint64_t)(x0 - e->begin) * esz, p));
    }
    return ZC_OK;
}

zc_status zc__ck_source_verify_range(zc_ck_source *s, int param, int kind, int64_t a, int64_t b)
{
    return each_entry(s, param, kind, a, b, NULL);
}

zc_status zc__ck_source_read(zc_ck_source *s, int param, int kind, int64_t a, int64_t b,
                             void *dst)
{
    return each_entry(s, param, kind, a, b, dst);
}

void zc__ck_widen_bf16(void *buf, int64_t n)
{
    /* Back to front: element j's fp32 (bytes [4j, 4j + 4)) covers bf16
     * elements 2j and 2j + 1, at or after j: read already, or (j itself)
     * read just before the store. */
    unsigned char *p = buf;
    for (int64_t j = n - 1; j >= 0; j--) {
        uint16_t h;
        memcpy(&h, p + 2 * j, 2);
        const uint32_t u = (uint32_t)h << 16;
        memcpy(p + 4 * j, &u, 4);
    }
}

zc_status zc__ck_source_read_f32(zc_ck_source *s, int param, int kind, int64_t a, int64_t b,
                                 float *dst)
{
    ZC_CHECK(each_entry(s, param, kind, a, b, dst));
    if (s->m.kdt[kind] == ZC_DTYPE_BF16)
        zc__ck_widen_bf16(dst, b - a);
    return ZC_OK;
}
