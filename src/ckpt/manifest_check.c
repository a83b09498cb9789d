/* The checks of a manifest that relate its fields to each other.
 *
 * manifest.c takes each field's type and range as it parses; here, once the
 * whole manifest is in memory, what must hold between fields: the step
 * counters, the layout (chunks against parameters), unique tensor names, the
 * files against the world size, and every entry inside its file. Every
 * reader goes through zc__ck_manifest_read, which calls this, so the engine's
 * load, `zeroc ckpt inspect/export/reshard` and the reshard's check of its
 * own output all refuse the same manifests with the same message. After it,
 * no size computed from the manifest can overflow: a chunk's padded size, a
 * shard, an entry's byte range. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "ckpt/format.h"

/* Largest chunk (elements): the sum of its tensors (each at most 2^50
 * elements, manifest.c). Padding it for a world of 2^20 ranks stays far from
 * int64_t's limit. */
#define CHUNK_MAX ((int64_t)1 << 50)
/* Largest model (elements) and largest checkpoint (bytes): sums over all
 * chunks or files (inspect's totals, a reader's offsets) stay in range. */
#define MODEL_MAX ((int64_t)1 << 60)

static zc_status bad(const char *path, const char *fmt, ...) ZC_PRINTF(2, 3);
static zc_status bad(const char *path, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: %s", path, what);
}

static zc_status check_counters(const zc_ck_manifest *m, const char *path)
{
    /* Each step is either applied (an optimizer update) or skipped (fp16
     * overflow): zc_step counts both, and the next one adds to one of them. */
    if (m->skipped + m->adam_steps != m->steps)
        return bad(path, "\"skipped_steps\" (%" PRId64 ") and \"scheduler.optimizer_steps\" "
                   "(%" PRId64 ") must add up to \"step\" (%" PRId64 ")", m->skipped,
                   m->adam_steps, m->steps);
    return ZC_OK;
}

/* The chunks tile the parameters in order, and each chunk holds its
 * parameters back to back from element 0 (src/core/engine/layout.c). */
static zc_status check_layout(const zc_ck_manifest *m, const char *path)
{
    if (m->nchunks < 1)
        return bad(path, "\"chunks\": %d tensors need at least one chunk", m->nparams);
    int next = 0;
    int64_t total = 0;
    for (int k = 0; k < m->nchunks; k++) {
        const zc_ck_chunk *c = &m->chunks[k];
        if (c->first != next)
            return bad(path, "chunks[%d] must start at tensor %d, after the previous chunk's "
                       "last, not at %d", k, next, c->first);
        int64_t at = 0;
        for (int i = c->first; i < c->first + c->count; i++) {
            const zc_ck_param *p = &m->params[i];
            if (p->chunk != k || p->offset != at)
                return bad(path, "tensor '%s': \"chunk\" %d and \"offset\" %" PRId64 " do not "
                           "match the chunks (chunks[%d] holds it at offset %" PRId64 ")",
                           p->name, p->chunk, p->offset, k, at);
            at += p->numel;
            if (at > CHUNK_MAX)
                return bad(path, "chunks[%d] holds more than %" PRId64 " elements", k,
                           CHUNK_MAX);
        }
        if (c->used != at)
            return bad(path, "chunks[%d]: \"used\" is %" PRId64 ", its tensors hold %" PRId64
                       " elements", k, c->used, at);
        total += at;
        if (total > MODEL_MAX)
            return bad(path, "the tensors hold more than %" PRId64 " elements", MODEL_MAX);
        next = c->first + c->count;
    }
    if (next != m->nparams)
        return bad(path, "\"chunks\" hold %d of the %d tensors", next, m->nparams);
    return ZC_OK;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp((*(const zc_ck_param *const *)a)->name, (*(const zc_ck_param *const *)b)->name);
}

/* Two tensors of one name: which of them a reader would find depends on the
 * reader (the engine matches by name, safetensors keys by name). */
static zc_status check_names(const zc_ck_manifest *m, const char *path)
{
    const zc_ck_param **byname = malloc((size_t)m->nparams * sizeof *byname);
    if (!byname)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "%s: %d tensor names", path, m->nparams);
    for (int i = 0; i < m->nparams; i++)
        byname[i] = &m->params[i];
    qsort(byname, (size_t)m->nparams, sizeof *byname, cmp_name);
    zc_status rc = ZC_OK;
    for (int i = 1; i < m->nparams && rc == ZC_OK; i++)
        if (!strcmp(byname[i - 1]->name, byname[i]->name))
            rc = bad(path, "tensor name '%s' appears twice (params[%td] and params[%td])",
                     byname[i]->name, byname[i - 1] - m->params, byname[i] - m->params);
    free(byname);
    return rc;
}

static zc_status check_files(const zc_ck_manifest *m, const char *path)
{
    /* One file per saving rank, in rank order (dirwrite.c writes them so). */
    if (m->nfiles != m->world)
        return bad(path, "\"files\": %d files for a world of %d ranks (one per rank)",
                   m->nfiles, m->world);
    uint64_t total = 0;
    for (int f = 0; f < m->nfiles; f++) {
        total += m->files[f].bytes; /* each at most INT64_MAX: no wrap in two */
        if (total > (uint64_t)INT64_MAX)
            return bad(path, "\"files\" add up to more than %" PRId64 " bytes", INT64_MAX);
        if (m->files[f].rank != f)
            return bad(path, "files[%d] must be the file of rank %d", f, f);
        /* Version 2: O_DIRECT reads round extents out to ZC_CK_ALIGN; the
         * file's end is aligned, so they stay inside it. */
        if (m->version >= 2 && m->files[f].bytes % ZC_CK_ALIGN)
            return bad(path, "files[%d]: \"bytes\" %" PRIu64 " is not a multiple of %d", f,
                       m->files[f].bytes, ZC_CK_ALIGN);
    }
    for (int64_t i = 0; i < m->nentries; i++) {
        const zc_ck_entry *e = &m->entries[i];
        const uint64_t len = zc__ck_entry_bytes(m, e);
        const uint64_t size = m->files[e->file].bytes;
        if (e->offset > size || len > size - e->offset)
            return bad(path, "tensor '%s' (%s, elements [%" PRId64 ", %" PRId64 ")) lies beyond "
                       "the end of %s", m->params[e->param].name, zc__ck_kind_name(e->kind),
                       e->begin, e->end, m->files[e->file].name);
    }
    return ZC_OK;
}

zc_status zc__ck_manifest_check(const zc_ck_manifest *m, const char *path)
{
    ZC_CHECK(check_counters(m, path));
    ZC_CHECK(check_layout(m, path));
    ZC_CHECK(check_names(m, path));
    return check_files(m, path);
}
