/* The bytes this rank reads (import.h).
 *
 * Shard rank r (the rank itself without MiCS) fills elements [r S, (r + 1) S)
 * of every chunk (S the shard): its
 * optimizer shard at stages 1-3, and at stage 0 the slice that is then
 * all-gathered. Each parameter overlapping that range needs elements [a, b)
 * of its tensor: one contiguous byte range of the file, or for a tensor
 * stored transposed (the file's [cols, rows] of a [rows, cols] parameter)
 * rows a / cols .. (b - 1) / cols of the parameter, which are a run of
 * elements in each of the file's rows - one piece per file row, unless the
 * rank takes every row (then the whole tensor is one piece). Pieces are
 * sorted by file and offset inside each chunk, and the pieces that follow
 * each other in a file are read as one extent of whole O_DIRECT blocks, so
 * the ranks together read each block of the data about once. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "load/import.h"

void zc__ld_range(const zc_engine *e, int k, int64_t *q0, int64_t *q1)
{
    const zc_chunk *c = &e->chunks[k];
    *q0 = (int64_t)e->srank * c->shard;
    *q1 = *q0 + c->shard;
}

void zc__ld_plan_free(zc_ld_plan *p)
{
    free(p->pieces);
    free(p->chunk_first);
    free(p->piece_ext);
    free(p->ext);
    free(p->aligned_end);
    free(p->tail_needed);
    free(p->used);
    memset(p, 0, sizeof *p);
}

typedef struct piece_list {
    zc_ld_piece *v;
    int64_t n, cap;
} piece_list;

static zc_status push(piece_list *l, const zc_ld_piece *pc)
{
    if (l->n == l->cap) {
        const int64_t cap = l->cap ? 2 * l->cap : 256;
        zc_ld_piece *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v)
            return ZC_ERR(ZC_ERR_NO_MEMORY, "zc_load_safetensors: a plan of %" PRId64 " pieces",
                          cap);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *pc;
    return ZC_OK;
}

static int by_offset(const void *a, const void *b)
{
    const zc_ld_piece *x = a, *y = b;
    if (x->file != y->file)
        return x->file < y->file ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* The pieces of parameter elements [a, b) of parameter i. */
static zc_status param_pieces(const zc_engine *e, const zc_st_set *set, const zc_ld_match *m,
                              int i, int64_t a, int64_t b, int64_t dst_off, piece_list *l)
{
    const zc_param *p = e->params[i];
    const zc_st_tensor *t = &set->tensors[m->tensor[i]];
    const size_t esz = zc__st_esz(t->dtype);
    zc_ld_piece pc = {.tensor = m->tensor[i], .file = t->file, .a = a, .b = b,
                      .dst_off = dst_off, .transposed = m->transposed[i], .dtype = t->dtype};
    if (!pc.transposed) {
        pc.y0 = a;
        pc.y1 = b;
        pc.off = t->begin + (uint64_t)a * esz;
        pc.len = (uint64_t)(b - a) * esz;
        return push(l, &pc);
    }
    pc.rows = p->shape[0];
    pc.cols = p->shape[1];
    const int64_t R = pc.rows, C = pc.cols, lo = a / C, hi = (b - 1) / C;
    if (lo == 0 && hi == R - 1) { /* every row: the whole tensor, filtered */
        pc.y0 = 0;
        pc.y1 = p->numel;
        pc.off = t->begin;
        pc.len = (uint64_t)p->numel * esz;
        return push(l, &pc);
    }
    for (int64_t j = 0; j < C; j++) { /* file row j holds column j of each row */
        pc.y0 = j * R + lo;
        pc.y1 = j * R + hi + 1;
        pc.off = t->begin + (uint64_t)pc.y0 * esz;
        pc.len = (uint64_t)(pc.y1 - pc.y0) * esz;
        ZC_CHECK(push(l, &pc));
    }
    return ZC_OK;
}

zc_status zc__ld_plan_make(const zc_engine *e, const zc_st_set *set, const zc_ld_match *m,
                           zc_ld_plan *p)
{
    memset(p, 0, sizeof *p);
    piece_list l = {0};
    p->chunk_first = calloc((size_t)e->nchunks + 1, sizeof *p->chunk_first);
    p->aligned_end = calloc((size_t)set->nfiles, sizeof *p->aligned_end);
    p->tail_needed = calloc((size_t)set->nfiles, sizeof *p->tail_needed);
    p->used = calloc((size_t)set->nfiles, sizeof *p->used);
    zc_status rc = p->chunk_first && p->aligned_end && p->tail_needed && p->used
                       ? ZC_OK
                       : ZC_ERR(ZC_ERR_NO_MEMORY, "zc_load_safetensors: the plan's tables");
    for (int k = 0; k < e->nchunks && rc == ZC_OK; k++) {
        const zc_chunk *c = &e->chunks[k];
        int64_t q0, q1;
        zc__ld_range(e, k, &q0, &q1);
        p->chunk_first[k] = l.n;
        for (int i = c->first; i < c->first + c->count && rc == ZC_OK; i++) {
            const zc_param *pr = e->params[i];
            const int64_t x0 = pr->offset > q0 ? pr->offset : q0;
            const int64_t x1 = pr->offset + pr->numel < q1 ? pr->offset + pr->numel : q1;
            if (x0 < x1)
                rc = param_pieces(e, set, m, i, x0 - pr->offset, x1 - pr->offset,
                                  pr->offset - q0, &l);
        }
        qsort(l.v + p->chunk_first[k], (size_t)(l.n - p->chunk_first[k]), sizeof *l.v,
              by_offset);
    }
    p->chunk_first[e->nchunks] = l.n;
    p->pieces = l.v;
    p->npieces = l.n;
    if (rc == ZC_OK && !(p->piece_ext = malloc((size_t)(l.n ? l.n : 1) * sizeof(int64_t))))
        rc = ZC_ERR(ZC_ERR_NO_MEMORY, "zc_load_safetensors: a plan of %" PRId64 " pieces", l.n);
    if (rc == ZC_OK && !(p->ext = malloc((size_t)(l.n ? l.n : 1) * sizeof *p->ext)))
        rc = ZC_ERR(ZC_ERR_NO_MEMORY, "zc_load_safetensors: a plan of %" PRId64 " pieces", l.n);
    if (rc == ZC_OK)
        rc = zc__ld_plan_extents(p, set, 4096);
    if (rc != ZC_OK)
        zc__ld_plan_free(p);
    return rc;
}

zc_status zc__ld_plan_extents(zc_ld_plan *p, const zc_st_set *set, size_t align)
{
    for (int f = 0; f < set->nfiles; f++) {
        p->aligned_end[f] = set->files[f].bytes / align * align;
        p->tail_needed[f] = p->used[f] = false;
    }
    p->n_ext = 0;
    uint64_t prev_end = 0;
    int prev_file = -1;
    for (int64_t i = 0; i < p->npieces; i++) {
        const zc_ld_piece *pc = &p->pieces[i];
        const uint64_t lim = p->aligned_end[pc->file], end = pc->off + pc->len;
        p->used[pc->file] = true;
        if (end > lim)
            p->tail_needed[pc->file] = true;
        p->piece_ext[i] = -1;
        if (pc->off >= lim || !pc->len)
            continue; /* in the tail alone (or empty) */
        const uint64_t a0 = pc->off / align * align;
        uint64_t a1 = (end + align - 1) / align * align;
        a1 = a1 < lim ? a1 : lim;
        zc_ld_extent *x = p->n_ext ? &p->ext[p->n_ext - 1] : NULL;
        /* The previous piece's extent goes on when this piece starts at or
         * after it in the same file and its first block touches the extent
         * (a piece before it would need bytes already handed back). */
        if (x && x->file == pc->file && prev_file == pc->file && pc->off >= prev_end &&
            a0 <= x->off + x->len) {
            if (a1 > x->off + x->len)
                x->len = a1 - x->off;
        } else {
            p->ext[p->n_ext++] = (zc_ld_extent){pc->file, a0, a1 - a0};
        }
        p->piece_ext[i] = p->n_ext - 1;
        prev_end = end;
        prev_file = pc->file;
    }
    return ZC_OK;
}
