/* Reading the plan's pieces through the staging ring (import.h).
 *
 * The extents are read in plan order into a ring of aligned slots with
 * O_DIRECT through the NVMe store's io_uring engine (src/offload: 1 MiB
 * requests, 32 in flight per file), as the checkpoint reader does
 * (ckpt/shard_read.c): while one slot's bytes are converted into the state,
 * the others are being read. A slot is read into again only once every
 * piece that needs its bytes has been converted. The last bytes of a file
 * that do not fill an O_DIRECT block (a safetensors file has any length)
 * are read once, by pread, when the reader opens. The ring is the import's
 * only host buffer: a tensor larger than it streams through it. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/checked.h"
#include "base/dtype.h"
#include "base/regfile.h"
#include "ckpt/ring_mem.h"
#include "load/import.h"
#include "offload/offload.h"

#define IO_BLOCK ((size_t)1 << 20)
#define IO_DEPTH 32
#define MAX_SLOTS 256
#define ALIGN 4096 /* the extents' blocks (plan.c) */
/* Tensors stored transposed (Conv1D's [in, out]) are converted a band of
 * file rows at a time into a tile and written out transposed, so each store
 * fills a run of the parameter's row instead of one element a file row
 * apart (a page apart: a TLB miss per element). The tile holds at least
 * TILE_MIN_ROWS file rows of the widest transposed tensor, and 1 MiB. */
#define TILE_BYTES ((size_t)1 << 20)
#define TILE_MIN_ROWS 8

typedef struct slot {
    int64_t ext;       /* extent whose bytes it holds, -1: free */
    uint64_t off, len; /* file range */
    zc_nvme_ticket ticket;
    bool ready;        /* the read was waited for */
} slot;

struct zc_ld_reader {
    const zc_st_set *set;
    const zc_ld_plan *plan;
    zc_nvme_store **stores;  /* per file, NULL when not read with the store */
    unsigned char **tails;   /* per file: bytes [aligned_end, size), or NULL */
    int64_t pos;             /* next piece */
    int64_t sub_ext;         /* reading ahead: the next slot read is (sub_ext, sub_off) */
    uint64_t sub_off;
    slot slots[MAX_SLOTS];
    int nslots, head, live;
    size_t slot_bytes;
    zc_ck_ring_mem mem;
    int64_t bytes;           /* read so far */
    bool direct;
    float *tile;             /* the transpose tile (tile_bytes), or NULL */
    size_t tile_bytes;
    zc_mem_account *acct;
    bool (*io_fault)(void *arg, int64_t *nth); /* ZC_FAULTS load items */
    void *io_fault_arg;
    int rank;
};

static zc_status open_stores(zc_ld_reader *r, bool buffered)
{
    const zc_st_set *set = r->set;
    const zc_ld_plan *p = r->plan;
    r->direct = !buffered;
    for (int f = 0; f < set->nfiles; f++) {
        if (!p->used[f] || !p->aligned_end[f])
            continue;
        zc_nvme_opts o = ZC_NVME_OPTS_INIT;
        o.file = set->files[f].path;
        o.flags = ZC_NVME_READ_ONLY | (buffered ? ZC_NVME_BUFFERED : 0);
        o.capacity = p->aligned_end[f];
        o.alignment = ALIGN;
        o.block_size = IO_BLOCK;
        o.queue_depth = IO_DEPTH;
        ZC_CHECK(zc__nvme_open(&r->stores[f], &o));
        zc_nvme_stats st;
        zc__nvme_stats_get(r->stores[f], &st);
        r->direct = r->direct && st.direct;
        if (st.alignment > ALIGN)
            return ZC_ERR(ZC_ERR_IO, "%s: the file system needs O_DIRECT alignment %zu, more "
                          "than the import's %d; import it buffered (zc_load_options.buffered)",
                          o.file, st.alignment, ALIGN);
    }
    return ZC_OK;
}

/* Bytes [aligned_end, size) of every file some piece needs them of. */
static zc_status read_tails(zc_ld_reader *r)
{
    for (int f = 0; f < r->set->nfiles; f++) {
        if (!r->plan->tail_needed[f])
            continue;
        const zc_st_file *sf = &r->set->files[f];
        const uint64_t at = r->plan->aligned_end[f], n = sf->bytes - at;
        if (!(r->tails[f] = malloc((size_t)n + 1)))
            return ZC_ERR(ZC_ERR_NO_MEMORY, "%s: its last %" PRIu64 " bytes", sf->path, n);
        char err[600];
        int fd = -1;
        if (zc__open_regular(sf->path, 0, "a safetensors file", &fd, NULL, err, sizeof err) !=
            ZC_OPEN_OK)
            return ZC_ERR(ZC_ERR_IO, "%s", err);
        uint64_t done = 0;
        while (done < n) {
            ssize_t k = pread(fd, r->tails[f] + done, (size_t)(n - done), (off_t)(at + done));
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                const int e = errno;
                close(fd);
                return ZC_ERR(ZC_ERR_IO, "%s: reading bytes %" PRIu64 "-%" PRIu64 ": %s", sf->path,
                              at, sf->bytes, k < 0 ? strerror(e) : "the file got shorter");
            }
            done += (uint64_t)k;
        }
        close(fd);
        r->bytes += (int64_t)n;
    }
    return ZC_OK;
}

zc_status zc__ld_reader_open(zc_ld_reader **out, const zc_st_set *set, zc_ld_plan *plan,
                             size_t ring_bytes, bool buffered, zc_engine *e)
{
    zc_mem_account *acct = &e->acct;
    *out = NULL;
    zc_ld_reader *r = calloc(1, sizeof *r);
    if (!r)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "zc_load_safetensors: reader");
    r->set = set;
    r->plan = plan;
    r->io_fault = zc__eng_load_fault;
    r->io_fault_arg = e;
    r->rank = e->rank;
    /* 4 MiB slots (28 MiB in flight with the default ring, as the
     * checkpoint reader keeps), smaller ones in a small ring. */
    r->slot_bytes = ring_bytes >= ((size_t)16 << 20) ? (size_t)4 << 20 : ring_bytes / 4;
    r->nslots = (int)(ring_bytes / r->slot_bytes);
    if (r->nslots > MAX_SLOTS)
        r->nslots = MAX_SLOTS;
    for (int i = 0; i < MAX_SLOTS; i++)
        r->slots[i].ext = -1;
    r->stores = calloc((size_t)set->nfiles, sizeof *r->stores);
    r->tails = calloc((size_t)set->nfiles, sizeof *r->tails);
    zc_status rc = r->stores && r->tails ? ZC_OK
                                         : ZC_ERR(ZC_ERR_NO_MEMORY, "zc_load_safetensors: files");
    if (rc == ZC_OK && plan->n_ext)
        rc = zc__ck_ring_alloc(&r->mem, (size_t)r->nslots * r->slot_bytes, acct,
                               "the import's staging ring", NULL);
    /* The tile: TILE_MIN_ROWS file rows of the widest transposed piece. */
    size_t tile = 0;
    for (int64_t i = 0; rc == ZC_OK && i < plan->npieces; i++) {
        const zc_ld_piece *pc = &plan->pieces[i];
        size_t need;
        if (!pc->transposed)
            continue;
        if (!zc__aligned_bytes((size_t)pc->rows, TILE_MIN_ROWS * sizeof(float), 64, &need))
            rc = ZC_ERR(ZC_ERR_NO_MEMORY, "zc_load_safetensors: a transpose tile of %" PRId64
                        " rows", pc->rows);
        else if (need > tile)
            tile = need;
    }
    if (tile && tile < TILE_BYTES)
        tile = TILE_BYTES;
    r->acct = acct;
    if (rc == ZC_OK && tile) {
        rc = zc__host_alloc(acct, ZC_MEM_OTHER, tile, "the import's transpose tile",
                            (void **)&r->tile);
        r->tile_bytes = rc == ZC_OK ? tile : 0;
    }
    if (rc == ZC_OK)
        rc = open_stores(r, buffered);
    if (rc == ZC_OK)
        rc = read_tails(r);
    if (rc != ZC_OK) {
        zc__ld_reader_close(r);
        return rc;
    }
    *out = r;
    return ZC_OK;
}

void zc__ld_reader_close(zc_ld_reader *r)
{
    if (!r)
        return;
    /* No read may land in the ring after it is unmapped. */
    for (int f = 0; r->stores && f < r->set->nfiles; f++)
        zc__nvme_close(r->stores[f], ZC_NVME_CLOSE_CANCEL);
    for (int f = 0; r->tails && f < r->set->nfiles; f++)
        free(r->tails[f]);
    free(r->stores);
    free(r->tails);
    zc__ck_ring_free(&r->mem);
    zc__host_free(r->acct, ZC_MEM_OTHER, r->tile, r->tile_bytes);
    free(r);
}

void zc__ld_reader_stats(const zc_ld_reader *r, int64_t *bytes, bool *direct,
                         int64_t *ring_bytes)
{
    *bytes = r ? r->bytes : 0;
    *direct = r && r->direct;
    *ring_bytes = r ? (int64_t)r->mem.bytes : 0;
}

/* ---- reading ahead -------------------------------------------------------- */

static zc_status submit(zc_ld_reader *r, int i, bool *any)
{
    const zc_ld_plan *p = r->plan;
    *any = false;
    while (r->sub_ext < p->n_ext && r->sub_off >= p->ext[r->sub_ext].len) {
        r->sub_ext++;
        r->sub_off = 0;
    }
    if (r->sub_ext >= p->n_ext)
        return ZC_OK;
    const zc_ld_extent *x = &p->ext[r->sub_ext];
    const uint64_t left = x->len - r->sub_off;
    slot *s = &r->slots[i];
    s->ext = r->sub_ext;
    s->off = x->off + r->sub_off;
    s->len = left < r->slot_bytes ? left : r->slot_bytes;
    s->ready = false;
    r->sub_off += s->len;
    int64_t nth = 0;
    if (r->io_fault && r->io_fault(r->io_fault_arg, &nth)) {
        s->ext = -1;
        return ZC_ERR(ZC_ERR_IO, "ZC_FAULTS: import read %" PRId64 " of rank %d fails (%s, "
                      "offset %" PRIu64 ")", nth, r->rank, r->set->files[x->file].path, s->off);
    }
    zc_status rc = zc__nvme_read(r->stores[x->file], s->off, r->mem.base + (size_t)i *
                                 r->slot_bytes, (size_t)s->len, &s->ticket);
    if (rc != ZC_OK) {
        s->ext = -1;
        return rc;
    }
    r->bytes += (int64_t)s->len;
    *any = true;
    return ZC_OK;
}

static zc_status fill(zc_ld_reader *r)
{
    while (r->live < r->nslots) {
        bool any;
        ZC_CHECK(submit(r, (r->head + r->live) % r->nslots, &any));
        if (!any)
            break;
        r->live++;
    }
    return ZC_OK;
}

static zc_status retire(zc_ld_reader *r)
{
    slot *s = &r->slots[r->head];
    if (!s->ready && s->ext >= 0) {
        const int f = r->plan->ext[s->ext].file;
        zc_status rc = zc__nvme_wait(r->stores[f], s->ticket, NULL);
        s->ready = true;
        if (rc != ZC_OK)
            return rc;
    }
    s->ext = -1;
    r->head = (r->head + 1) % r->nslots;
    r->live--;
    return fill(r);
}

/* ---- converting ----------------------------------------------------------- */

/* A piece's elements as they arrive: y is the next file element, carry holds
 * the first bytes of an element split between two slots. */
typedef struct conv {
    const zc_ld_piece *pc;
    float *dst;
    size_t esz;
    int64_t y;
    unsigned char carry[4];
    size_t ncarry;
    int64_t bad_y;         /* the first element that is a NaN or an infinity, or -1 */
    /* Transposed pieces: file rows [tj0, tj0 + tile_cap / R) converted
     * into the tile (row t at tile + t * R), file elements [ty0, ty1) of
     * them filled; written out transposed when the tile is full or the
     * piece ends (tile_flush). */
    float *tile;
    int64_t tile_cap;
    int64_t tj0, ty0, ty1;
} conv;

/* Whether element k of src is a NaN or an infinity (its exponent all ones). */
static bool nonfinite(const void *src, zc_dtype dt, int64_t k)
{
    if (dt == ZC_DTYPE_F32) {
        uint32_t u;
        memcpy(&u, (const char *)src + 4 * k, 4);
        return (u & 0x7f800000u) == 0x7f800000u;
    }
    const uint16_t h = ((const uint16_t *)src)[k];
    return dt == ZC_DTYPE_BF16 ? (h & 0x7f80u) == 0x7f80u : (h & 0x7c00u) == 0x7c00u;
}

/* After a run of n elements at src whose exponents OR-ed to `bad`: the first
 * non-finite one, found again only when there is one. */
static void note_bad(conv *c, const void *src, int64_t n, bool bad)
{
    for (int64_t k = 0; bad && c->bad_y < 0 && k < n; k++)
        if (nonfinite(src, c->pc->dtype, k))
            c->bad_y = c->y + k;
}

/* Runs of elements into fp32, each returning whether some exponent was all
 * ones (a NaN or an infinity): the flags OR-ed together, one test per run,
 * so the loops stay vector loops (the build's -O2 leaves them scalar). */
__attribute__((optimize("O3"))) static bool from_f32(uint32_t *restrict o,
                                                     const uint32_t *restrict u, int64_t n)
{
    uint32_t ones = 0;
    for (int64_t k = 0; k < n; k++) {
        o[k] = u[k];
        ones |= (u[k] & 0x7f800000u) == 0x7f800000u;
    }
    return ones;
}

__attribute__((optimize("O3"))) static bool from_bf16(uint32_t *restrict o,
                                                      const uint16_t *restrict h, int64_t n)
{
    uint32_t ones = 0;
    for (int64_t k = 0; k < n; k++) {
        o[k] = (uint32_t)h[k] << 16; /* bf16 is the high half of an fp32: exact */
        ones |= (h[k] & 0x7f80u) == 0x7f80u;
    }
    return ones;
}

static bool from_f16(float *restrict o, const uint16_t *restrict h, int64_t n)
{
    uint32_t ones = 0;
    for (int64_t k = 0; k < n; k++) {
        o[k] = zc__f16_to_f32(h[k]); /* exact */
        ones |= (h[k] & 0x7c00u) == 0x7c00u;
    }
    return ones;
}

/* Whether file element y of a transposed piece lands in [a, b). */
static bool in_range(const zc_ld_piece *pc, int64_t y)
{
    const int64_t x = (y % pc->rows) * pc->cols + y / pc->rows;
    return x >= pc->a && x < pc->b;
}

/* Writes the tile's filled elements to their places: for each parameter
 * row i, the file rows of the tile are a contiguous run of columns
 * (x = i * C + tj0 + t), clipped to [a, b) and to the filled [ty0, ty1). */
static void tile_flush(conv *c)
{
    if (c->ty1 <= c->ty0)
        return;
    const zc_ld_piece *pc = c->pc;
    const int64_t R = pc->rows, C = pc->cols, j0 = c->tj0;
    const int64_t nrows = (c->ty1 - 1) / R - j0 + 1;
    const int64_t first_i = c->ty0 - j0 * R;                 /* row 0 starts here */
    const int64_t last_end = c->ty1 - (j0 + nrows - 1) * R;  /* the last row ends here */
    float *out = c->dst + pc->dst_off;
    for (int64_t i = 0; i < R; i++) {
        int64_t t0 = i < first_i ? 1 : 0, t1 = i >= last_end ? nrows - 1 : nrows;
        const int64_t x0 = i * C + j0; /* x of t = 0 */
        if (pc->a - x0 > t0)
            t0 = pc->a - x0;
        if (pc->b - x0 < t1)
            t1 = pc->b - x0;
        const float *in = c->tile + i;
        for (int64_t t = t0; t < t1; t++)
            out[x0 + t] = in[t * R];
    }
    c->ty0 = c->ty1;
}

/* n elements in file order into the tile, flushing it when a file row
 * beyond it begins. NaN and infinity are looked for among the elements in
 * [a, b) only, in file order, as the strided path does. */
static void tile_convert(conv *c, const void *src, int64_t n)
{
    const zc_ld_piece *pc = c->pc;
    const int64_t R = pc->rows, T = c->tile_cap / R;
    const size_t esz = c->esz;
    for (int64_t k = 0; k < n;) {
        const int64_t y = c->ty1;
        if (c->ty1 == c->ty0 || y / R >= c->tj0 + T) {
            tile_flush(c);
            c->tj0 = y / R;
            c->ty0 = c->ty1 = y;
        }
        /* Up to the end of the tile's last row. */
        const int64_t room = (c->tj0 + T) * R - y;
        const int64_t len = room < n - k ? room : n - k;
        const unsigned char *in = (const unsigned char *)src + (size_t)k * esz;
        uint32_t *to = (uint32_t *)(c->tile + (y - c->tj0 * R));
        const bool ones = pc->dtype == ZC_DTYPE_F32    ? from_f32(to, (const void *)in, len)
                          : pc->dtype == ZC_DTYPE_BF16 ? from_bf16(to, (const void *)in, len)
                                                       : from_f16((float *)to, (const void *)in, len);
        for (int64_t q = 0; ones && c->bad_y < 0 && q < len; q++)
            if (nonfinite(in, pc->dtype, q) && in_range(pc, y + q))
                c->bad_y = y + q;
        c->ty1 += len;
        k += len;
    }
    c->y = c->ty1;
}

/* n whole elements at src (aligned for their type). */
static void convert(conv *c, const void *src, int64_t n)
{
    const zc_ld_piece *pc = c->pc;
    if (!pc->transposed) {
        float *d = c->dst + pc->dst_off + c->y;
        const bool ones = pc->dtype == ZC_DTYPE_F32  ? from_f32((uint32_t *)d, src, n)
                          : pc->dtype == ZC_DTYPE_BF16 ? from_bf16((uint32_t *)d, src, n)
                                                       : from_f16(d, src, n);
        note_bad(c, src, n, ones);
        c->y += n;
        return;
    }
    /* The file's row j, column i is the parameter's row i, column j. */
    tile_convert(c, src, n);
}

static void feed(conv *c, const unsigned char *p, size_t n)
{
    const size_t esz = c->esz;
    if (c->ncarry) {
        const size_t take = esz - c->ncarry < n ? esz - c->ncarry : n;
        memcpy(c->carry + c->ncarry, p, take);
        c->ncarry += take;
        p += take;
        n -= take;
        if (c->ncarry < esz)
            return;
        convert(c, c->carry, 1);
        c->ncarry = 0;
    }
    const size_t whole = n / esz;
    if ((uintptr_t)p % esz == 0) {
        convert(c, p, (int64_t)whole);
    } else {
        /* A tensor at an offset its dtype does not divide (the format
         * allows it): through an aligned buffer. */
        _Alignas(16) unsigned char tmp[4096];
        for (size_t done = 0; done < whole;) {
            const size_t k = whole - done < sizeof tmp / esz ? whole - done : sizeof tmp / esz;
            memcpy(tmp, p + done * esz, k * esz);
            convert(c, tmp, (int64_t)k);
            done += k;
        }
    }
    memcpy(c->carry, p + whole * esz, n - whole * esz);
    c->ncarry = n - whole * esz;
}

static zc_status io_error(const zc_ld_reader *r, const zc_ld_piece *pc, zc_status rc)
{
    zc__error_context("tensor '%s' of %s", r->set->tensors[pc->tensor].name,
                      r->set->files[pc->file].path);
    return rc;
}

zc_status zc__ld_reader_next(zc_ld_reader *r, int64_t piece, float *dst)
{
    const zc_ld_plan *p = r->plan;
    if (r->pos >= p->npieces || piece != r->pos)
        return ZC_ERR(ZC_ERR_INTERNAL, "zc_load_safetensors: piece %" PRId64 " read out of the "
                      "planned order", piece);
    const zc_ld_piece *pc = &p->pieces[piece];
    conv c = {.pc = pc, .dst = dst, .esz = zc__st_esz(pc->dtype), .y = pc->y0, .bad_y = -1,
              .tile = pc->transposed ? r->tile : NULL,
              .tile_cap = pc->transposed ? (int64_t)(r->tile_bytes / sizeof(float)) : 0,
              .ty0 = pc->y0, .ty1 = pc->y0};
    const int64_t xi = p->piece_ext[piece];
    const uint64_t lim = p->aligned_end[pc->file], end = pc->off + pc->len;
    if (r->pos == 0)
        ZC_CHECK(fill(r));
    if (xi >= 0) {
        /* Slots of earlier extents hold nothing more that is needed. */
        while (r->live && r->slots[r->head].ext < xi)
            ZC_CHECK(retire(r));
        const uint64_t stop = end < lim ? end : lim;
        for (uint64_t at = pc->off; at < stop;) {
            slot *s = &r->slots[r->head];
            if (!r->live || s->ext != xi || at < s->off)
                return ZC_ERR(ZC_ERR_INTERNAL, "zc_load_safetensors: piece %" PRId64 " is not "
                              "in the ring", piece);
            if (at >= s->off + s->len) {
                ZC_CHECK(retire(r));
                continue;
            }
            if (!s->ready) {
                zc_status rc = zc__nvme_wait(r->stores[pc->file], s->ticket, NULL);
                s->ready = true; /* waited for, even when it failed */
                if (rc != ZC_OK)
                    return io_error(r, pc, rc);
            }
            const uint64_t k = stop - at < s->off + s->len - at ? stop - at : s->off + s->len - at;
            feed(&c, (const unsigned char *)r->mem.base + (size_t)r->head * r->slot_bytes +
                         (at - s->off), (size_t)k);
            at += k;
            if (at == s->off + s->len)
                ZC_CHECK(retire(r));
        }
    }
    if (end > lim) { /* the file's last bytes, read at open */
        const uint64_t from = pc->off > lim ? pc->off : lim;
        feed(&c, r->tails[pc->file] + (from - lim), (size_t)(end - from));
    }
    tile_flush(&c);
    if (c.bad_y >= 0)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: tensor '%s' holds a NaN or an infinity at element "
                      "%" PRId64 " (byte %" PRIu64 "): not weights to train from",
                      r->set->files[pc->file].path, r->set->tensors[pc->tensor].name, c.bad_y,
                      r->set->tensors[pc->tensor].begin + (uint64_t)c.bad_y * c.esz);
    if (c.y != pc->y1 || c.ncarry)
        return ZC_ERR(ZC_ERR_INTERNAL, "zc_load_safetensors: piece %" PRId64 " converted %" PRId64
                      " of %" PRId64 " elements", piece, c.y - pc->y0, pc->y1 - pc->y0);
    r->pos++;
    /* The end of an extent: what is left of it in the ring is padding. */
    while (xi >= 0 && r->live && (r->pos == p->npieces || p->piece_ext[r->pos] != xi) &&
           r->slots[r->head].ext == xi)
        ZC_CHECK(retire(r));
    return ZC_OK;
}
