/* Chunk layout (zc_engine_build calls it once the model is registered).
 *
 * Parameters are packed in registration order into chunks of about
 * `e->bucket` elements: a parameter never straddles two chunks, one larger
 * than the bucket gets a chunk of its own, and zc_chunk_boundary() starts a
 * new chunk. Each chunk is padded to a multiple of world * ZC_CHUNK_ALIGN
 * elements of the shard group (sworld: the world, or MiCS's group; the padding
 * is zero in every buffer and stays zero: its gradient is zero, so Adam
 * leaves it at 0), and shard rank q owns the shard [q * S / sW, (q + 1) * S / sW). A chunk may mix parameter groups; Adam is run
 * per segment (a run of one group inside one shard), see zc_seg. */
#include <string.h>

#include "core/engine.h"
#include "plan/plan.h"

/* The rule is shared with the memory planner (plan/plan.h). */
static bool starts_chunk(const zc_engine *e, int i, int64_t cur_used)
{
    const zc_param *p = e->params[i];
    /* An adopted block is exactly one chunk, whatever the bucket (the
     * memory planner, which knows no adoption, sees the bucket rule). */
    if (i > 0 && !p->chunk_start) {
        int a = zc__adopt_starts_chunk(e, i);
        if (a >= 0)
            return a == 1;
    }
    return zc__chunk_starts(i, p->chunk_start, cur_used, p->numel, e->bucket);
}

/* Shard rank r's Adam segments of chunk c (chunk-relative, real elements only). */
static int make_segments(const zc_engine *e, const zc_chunk *c, int r, zc_seg *out)
{
    int64_t lo = (int64_t)r * c->shard, hi = lo + c->shard;
    int n = 0;
    for (int i = c->first; i < c->first + c->count; i++) {
        const zc_param *p = e->params[i];
        int64_t a = p->offset > lo ? p->offset : lo;
        int64_t b = p->offset + p->numel < hi ? p->offset + p->numel : hi;
        if (a >= b)
            continue;
        if (n > 0 && out[n - 1].group == p->group && out[n - 1].start + out[n - 1].n == a) {
            out[n - 1].n += b - a;
        } else {
            out[n++] = (zc_seg){a, b - a, p->group};
        }
    }
    return n;
}

zc_status zc__layout_build(zc_engine *e)
{
    int n = 0;
    int64_t cur = 0;
    for (int i = 0; i < e->nparams; i++) {
        if (starts_chunk(e, i, cur)) {
            n++;
            cur = 0;
        }
        cur += e->params[i]->numel;
    }
    void *mem = NULL;
    ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, (size_t)n * sizeof(zc_chunk), "chunk table",
                            &mem));
    e->chunks = mem;
    e->nchunks = n;

    int ci = -1;
    cur = 0;
    for (int i = 0; i < e->nparams; i++) {
        zc_param *p = e->params[i];
        if (starts_chunk(e, i, cur)) {
            ci++;
            e->chunks[ci].first = i;
            cur = 0;
        }
        zc_chunk *c = &e->chunks[ci];
        p->chunk = ci;
        p->offset = cur;
        c->count++;
        cur += p->numel;
        c->used = cur;
    }
    e->num_elems = e->padded_elems = 0;
    for (int k = 0; k < n; k++) {
        zc_chunk *c = &e->chunks[k];
        c->gbase = e->num_elems;
        c->padded = zc__chunk_padded(c->used, e->sworld);
        c->shard = c->padded / e->sworld;
        e->num_elems += c->used;
        e->padded_elems += c->padded;

        /* A shard boundary splits at most one parameter per rank, so
         * count + world segments always suffice. */
        int cap = c->count + e->sworld;
        c->segs_bytes = (size_t)cap * sizeof(zc_seg);
        c->seg_begin_bytes = (size_t)(e->sworld + 1) * sizeof(int);
        ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, c->segs_bytes, "adam segments", &mem));
        c->segs = mem;
        ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, c->seg_begin_bytes, "adam segments",
                                &mem));
        c->seg_begin = mem;
        int ns = 0;
        for (int r = 0; r < e->sworld; r++) {
            c->seg_begin[r] = ns;
            ns += make_segments(e, c, r, c->segs + ns);
        }
        c->seg_begin[e->sworld] = ns;
    }
    return ZC_OK;
}

void zc__layout_free(zc_engine *e)
{
    if (!e->chunks)
        return;
    for (int k = 0; k < e->nchunks; k++) {
        zc_chunk *c = &e->chunks[k];
        if (e->pol && e->pol->free_chunk)
            e->pol->free_chunk(e, c);
        zc__host_free(&e->acct, ZC_MEM_OTHER, c->segs, c->segs_bytes);
        zc__host_free(&e->acct, ZC_MEM_OTHER, c->seg_begin, c->seg_begin_bytes);
    }
    zc__host_free(&e->acct, ZC_MEM_OTHER, e->chunks, (size_t)e->nchunks * sizeof(zc_chunk));
    e->chunks = NULL;
    e->nchunks = 0;
}
