/* zc_checkpoint_reshard: rewrite a checkpoint's shard files for another
 * world size, offline. The saving engine's chunks are kept (the manifest
 * records them); only the padding and the shard cut change, by the layout's
 * rule (a chunk is padded to a multiple of world * 64 elements and rank r
 * holds the r-th equal part), so rank r of the new world finds its whole
 * range in its own file. Values are copied, never converted: bitwise, each
 * kind in the dtype it was saved in (the manifest's kdt carries over). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "ckpt/dirwrite.h"
#include "ckpt/shard_write.h"
#include "ckpt/source.h"

/* Writes rank r's file of the new world. */
static zc_status write_rank(zc_ck_source *s, const char *out_dir, const char *tag, int world,
                            int r, void *buf)
{
    const zc_ck_manifest *m = &s->m;
    /* One run per entry: an entry of the new cut per parameter piece. */
    uint64_t bytes = 0;
    for (int k = 0; k < m->nchunks; k++) {
        const zc_ck_chunk *c = &m->chunks[k];
        const int64_t shard = zc__ck_padded(c->used, world) / world;
        const int64_t lo = (int64_t)r * shard, hi = lo + shard;
        for (int i = c->first; i < c->first + c->count; i++) {
            const zc_ck_param *p = &m->params[i];
            const int64_t a = p->offset > lo ? p->offset : lo;
            const int64_t b = p->offset + p->numel < hi ? p->offset + p->numel : hi;
            for (int kind = 0; a < b && kind < ZC_CK__KINDS; kind++)
                bytes += zc__ck_run_bytes((uint64_t)(b - a) * zc__ck_elem_bytes(m->kdt[kind]));
        }
    }
    zc_ck_shard sh;
    ZC_CHECK(zc__ck_shard_open(&sh, out_dir, tag, r, bytes, m->kdt, NULL, NULL));
    zc_status rc = ZC_OK;
    for (int k = 0; k < m->nchunks && rc == ZC_OK; k++) {
        const zc_ck_chunk *c = &m->chunks[k];
        const int64_t shard = zc__ck_padded(c->used, world) / world;
        const int64_t lo = (int64_t)r * shard, hi = lo + shard;
        for (int kind = 0; kind < ZC_CK__KINDS && rc == ZC_OK; kind++) {
            for (int i = c->first; i < c->first + c->count && rc == ZC_OK; i++) {
                const zc_ck_param *p = &m->params[i];
                const int64_t a = p->offset > lo ? p->offset : lo;
                const int64_t b = p->offset + p->numel < hi ? p->offset + p->numel : hi;
                if (a >= b)
                    continue;
                rc = zc__ck_source_read(s, i, kind, a - p->offset, b - p->offset, buf);
                if (rc == ZC_OK)
                    rc = zc__ck_shard_append(&sh, i, kind, a - p->offset, b - p->offset, buf);
            }
        }
    }
    if (rc == ZC_OK)
        rc = zc__ck_shard_close(&sh);
    zc__ck_shard_discard(&sh);
    return rc;
}

ZC_API zc_status zc_checkpoint_reshard(const char *in_dir, const char *tag, const char *out_dir,
                                       int world)
{
    zc__error_clear();
    if (!in_dir || !*in_dir || !out_dir || !*out_dir)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_checkpoint_reshard: in_dir and out_dir are needed");
    if (world < 1 || world > ZC_CK_MAX_WORLD)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "zc_checkpoint_reshard: world %d is not in [1, %d]",
                      world, ZC_CK_MAX_WORLD);
    /* The output is written under the tag of the input's directory (the
     * name DIR/latest gives, or `tag`), whatever the manifest's own "tag"
     * says: the name the caller resolved is the name it finds. */
    char t[ZC_CK_TAG_MAX + 1];
    ZC_CHECK(zc__ck_resolve_tag(in_dir, tag, t));
    zc_ck_source s;
    ZC_CHECK(zc__ck_source_open(&s, in_dir, t));
    zc_ck_manifest *m = &s.m;
    int64_t most = 1;
    for (int k = 0; k < m->nchunks; k++) {
        const int64_t shard = zc__ck_padded(m->chunks[k].used, world) / world;
        most = shard > most ? shard : most;
    }
    /* fp32, the widest stored element: enough for any kind. */
    void *buf = malloc((size_t)most * sizeof(float));
    zc_status rc = buf ? zc__ck_stage_open(out_dir, t)
                       : ZC_ERR(ZC_ERR_NO_MEMORY, "reshard buffer of %" PRId64 " floats", most);
    const bool staged = rc == ZC_OK;
    for (int r = 0; r < world && rc == ZC_OK; r++)
        rc = write_rank(&s, out_dir, t, world, r, buf);
    if (rc == ZC_OK) {
        /* The same head and model; the files and entries are the new ones. */
        zc_ck_manifest out = *m;
        /* Written in this build's layout: aligned runs (2), with the
         * kinds' dtypes when one is bf16 (3). */
        out.version = zc__ck_version_for(m->kdt);
        snprintf(out.tag, sizeof out.tag, "%s", t);
        out.world = world;
        out.files = NULL;
        out.entries = NULL;
        out.first_entry = NULL;
        out.nfiles = 0;
        out.nentries = 0;
        rc = zc__ck_stage_commit(out_dir, &out, world);
        free(out.files);
        free(out.entries);
    }
    if (rc != ZC_OK && staged)
        zc__ck_stage_abort(out_dir, t);
    free(buf);
    zc__ck_source_close(&s);
    return rc;
}
