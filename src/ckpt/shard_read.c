/* Reading a load's entries once, with O_DIRECT (shard_read.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/hash_worker.h"
#include "ckpt/ring_mem.h"
#include "ckpt/shard_read.h"
#include "offload/offload.h"

/* Eight buffers of 4 MiB: while one is hashed and copied, seven (28 of the
 * store's 1 MiB requests) are being read, as many as the save keeps in
 * flight (shard_write.h), for the same reason: the copy and the hash share
 * two cores with everything else, and with three buffers ahead a few
 * milliseconds off the CPU let the disk run dry (bench/RESULTS.md). The ring
 * is the engine's, faulted in once (ring_mem.h). 8 MiB buffers read no
 * faster on the machine measured. */
#define SLOTS 8
#define SLOT_BYTES ((size_t)4 << 20)
#define IO_BLOCK ((size_t)1 << 20)
#define IO_DEPTH 32
#define RING_BYTES (SLOTS * SLOT_BYTES)
/* Copied, then handed to the checksum worker, in pieces of 256 KiB (as the
 * save's: shard_write.c). */
#define PIECE ((size_t)256 << 10)

typedef struct extent {
    int file;
    uint64_t off, len; /* ZC_CK_ALIGN-aligned */
} extent;

typedef struct slot {
    int64_t ext;       /* extent whose bytes it holds, -1: free */
    uint64_t off, len; /* file range */
    zc_nvme_ticket ticket;
    bool ready;        /* the read was waited for */
    uint64_t hashed;   /* the last piece fed to the worker from it */
} slot;

struct zc_ck_reader {
    const zc_ck_source *src;
    zc_nvme_store **stores; /* per file of the manifest, NULL when not read */
    const int64_t *plan;
    int64_t *plan_ext;      /* the extent of each plan entry */
    int64_t n, pos;         /* plan length, next plan entry */
    extent *ext;
    int64_t n_ext;          /* extents */
    /* reading ahead: the next piece to submit is (sub_ext, sub_off) */
    int64_t sub_ext;
    uint64_t sub_off;
    slot slots[SLOTS];
    int head, live;         /* oldest slot in use, slots in use */
    zc_ck_ring_mem mem;     /* the ring: SLOTS buffers */
    char *ring;
    zc_ck_hasher *hasher;   /* the entries' checksums, in plan order */
    uint64_t fed;           /* the last piece fed */
    int64_t checked;        /* plan entries whose checksum was compared */
};

static uint64_t align_down(uint64_t x) { return x / ZC_CK_ALIGN * ZC_CK_ALIGN; }
static uint64_t align_up(uint64_t x) { return (x + ZC_CK_ALIGN - 1) / ZC_CK_ALIGN * ZC_CK_ALIGN; }

static void file_path(const zc_ck_source *s, int f, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", s->dir, s->m.files[f].name);
}

/* Cuts the plan into extents: an entry joins the previous one's extent when
 * it lies in the same file at or after the previous entry's end and its
 * aligned start touches the extent (a run read whole is one extent). */
static zc_status make_extents(zc_ck_reader *r)
{
    const zc_ck_manifest *m = &r->src->m;
    r->ext = malloc((size_t)r->n * sizeof *r->ext);
    r->plan_ext = malloc((size_t)r->n * sizeof *r->plan_ext);
    if (!r->ext || !r->plan_ext)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "%s: reading plan of %" PRId64 " entries", r->src->dir,
                      r->n);
    uint64_t prev_end = 0;
    for (int64_t i = 0; i < r->n; i++) {
        const zc_ck_entry *e = &m->entries[r->plan[i]];
        const uint64_t end = e->offset + zc__ck_entry_bytes(m, e);
        const uint64_t a0 = align_down(e->offset), a1 = align_up(end);
        extent *x = r->n_ext ? &r->ext[r->n_ext - 1] : NULL;
        if (x && x->file == e->file && e->offset >= prev_end && a0 <= x->off + x->len) {
            if (a1 > x->off + x->len)
                x->len = a1 - x->off;
        } else {
            r->ext[r->n_ext++] = (extent){e->file, a0, a1 - a0};
        }
        r->plan_ext[i] = r->n_ext - 1;
        prev_end = end;
    }
    return ZC_OK;
}

static zc_status open_stores(zc_ck_reader *r)
{
    const zc_ck_manifest *m = &r->src->m;
    r->stores = calloc((size_t)m->nfiles, sizeof *r->stores);
    if (!r->stores)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "%s: %d file handles", r->src->dir, m->nfiles);
    for (int64_t x = 0; x < r->n_ext; x++) {
        const int f = r->ext[x].file;
        if (r->stores[f])
            continue;
        char p[ZC_CK_PATH_MAX + 40];
        file_path(r->src, f, p, sizeof p);
        zc_nvme_opts o = ZC_NVME_OPTS_INIT;
        o.file = p;
        o.flags = ZC_NVME_READ_ONLY;
        o.capacity = m->files[f].bytes;
        o.alignment = ZC_CK_ALIGN;
        o.block_size = IO_BLOCK;
        o.queue_depth = IO_DEPTH;
        ZC_CHECK(zc__nvme_open(&r->stores[f], &o));
        zc_nvme_stats st;
        zc__nvme_stats_get(r->stores[f], &st);
        if (st.alignment > ZC_CK_ALIGN)
            return ZC_ERR(ZC_ERR_IO, "%s: the file system needs O_DIRECT alignment %zu, more "
                          "than the checkpoint format's %d", p, st.alignment, ZC_CK_ALIGN);
    }
    return ZC_OK;
}

zc_status zc__ck_reader_open(zc_ck_reader **out, const zc_ck_source *s, zc_mem_account *acct,
                             zc_ck_ring_mem **keep, const int64_t *plan, int64_t n)
{
    *out = NULL;
    if (s->m.version < 2)
        return ZC_ERR(ZC_ERR_INTERNAL, "%s: format version %d has unaligned entries", s->dir,
                      s->m.version);
    zc_ck_reader *r = calloc(1, sizeof *r);
    if (!r)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "%s: reader", s->dir);
    r->src = s;
    r->plan = plan;
    r->n = n;
    for (int i = 0; i < SLOTS; i++)
        r->slots[i].ext = -1;
    zc_status rc = make_extents(r);
    if (rc == ZC_OK && n > 0) {
        rc = zc__ck_ring_alloc(&r->mem, RING_BYTES, acct, "checkpoint read buffers", keep);
        r->ring = r->mem.base;
        if (rc == ZC_OK)
            rc = zc__ck_hasher_start(&r->hasher, s->dir);
        if (rc == ZC_OK)
            rc = open_stores(r);
    }
    if (rc != ZC_OK) {
        zc__ck_reader_close(r);
        return rc;
    }
    *out = r;
    return ZC_OK;
}

void zc__ck_reader_close(zc_ck_reader *r)
{
    if (!r)
        return;
    /* Cancel, and wait for what the kernel cannot: no read may land in the
     * ring after it is freed. */
    for (int f = 0; r->stores && f < r->src->m.nfiles; f++)
        zc__nvme_close(r->stores[f], ZC_NVME_CLOSE_CANCEL);
    free(r->stores);
    zc__ck_hasher_stop(r->hasher); /* it may still be reading the ring */
    zc__ck_ring_free(&r->mem);
    free(r->ext);
    free(r->plan_ext);
    free(r);
}

/* Starts reading the next piece into free slot i; *any is false when every
 * extent has been submitted already. */
static zc_status submit(zc_ck_reader *r, int i, bool *any)
{
    *any = false;
    while (r->sub_ext < r->n_ext && r->sub_off >= r->ext[r->sub_ext].len) {
        r->sub_ext++;
        r->sub_off = 0;
    }
    if (r->sub_ext >= r->n_ext)
        return ZC_OK;
    const extent *x = &r->ext[r->sub_ext];
    const uint64_t left = x->len - r->sub_off;
    slot *s = &r->slots[i];
    s->ext = r->sub_ext;
    s->off = x->off + r->sub_off;
    s->len = left < SLOT_BYTES ? left : SLOT_BYTES;
    s->ready = false;
    r->sub_off += s->len;
    zc_status rc = zc__nvme_read(r->stores[x->file], s->off, r->ring + (size_t)i * SLOT_BYTES,
                                 (size_t)s->len, &s->ticket);
    if (rc != ZC_OK) {
        s->ext = -1;
        return rc;
    }
    *any = true;
    return ZC_OK;
}

/* Keeps every free slot reading. */
static zc_status fill(zc_ck_reader *r)
{
    while (r->live < SLOTS) {
        bool any;
        ZC_CHECK(submit(r, (r->head + r->live) % SLOTS, &any));
        if (!any)
            break;
        r->live++;
    }
    return ZC_OK;
}

/* Hands the oldest slot back and starts the next read in it, once the
 * worker has hashed what was fed from it. */
static zc_status retire(zc_ck_reader *r)
{
    slot *s = &r->slots[r->head];
    if (!s->ready && s->ext >= 0)
        ZC_CHECK(zc__nvme_wait(r->stores[r->ext[s->ext].file], s->ticket, NULL));
    zc__ck_hasher_wait(r->hasher, s->hashed);
    s->ext = -1;
    r->head = (r->head + 1) % SLOTS;
    r->live--;
    return fill(r);
}

/* Copies the part of entry bytes [eb, eb + k) (at src, in the head slot)
 * that falls in the wanted bytes [w0, w1) to dst (which holds [w0, w1)),
 * then hands them to the worker; the entry has `bytes` bytes. */
static zc_status consume(zc_ck_reader *r, const char *src, uint64_t eb, uint64_t k, uint64_t w0,
                         uint64_t w1, uint64_t bytes, char *dst)
{
    for (uint64_t done = 0; done < k;) {
        const uint64_t n = k - done < PIECE ? k - done : PIECE;
        const uint64_t b0 = eb + done, b1 = b0 + n;
        const uint64_t c0 = b0 > w0 ? b0 : w0, c1 = b1 < w1 ? b1 : w1;
        if (c0 < c1)
            memcpy(dst + (c0 - w0), src + (c0 - eb), (size_t)(c1 - c0));
        ZC_CHECK(zc__ck_hasher_feed(r->hasher, src + done, (size_t)n, b0 == 0, b1 == bytes,
                                    &r->fed));
        r->slots[r->head].hashed = r->fed;
        done += n;
    }
    return ZC_OK;
}

/* Compares the checksums the worker has computed so far (all of them, after
 * a wait for the last piece fed) with the manifest's, in plan order. */
static zc_status compare_hashed(zc_ck_reader *r)
{
    int64_t n;
    const uint64_t *d = zc__ck_hasher_digests(r->hasher, &n);
    for (; r->checked < n; r->checked++) {
        const zc_ck_entry *e = &r->src->m.entries[r->plan[r->checked]];
        if (d[r->checked] != e->xxh3)
            return zc__ck_source_mismatch(r->src, e);
    }
    return ZC_OK;
}

zc_status zc__ck_reader_next(zc_ck_reader *r, int64_t entry, int64_t x0, int64_t x1, void *dst)
{
    const zc_ck_manifest *m = &r->src->m;
    if (r->pos >= r->n || r->plan[r->pos] != entry)
        return ZC_ERR(ZC_ERR_INTERNAL, "%s: entry %" PRId64 " read out of the planned order",
                      r->src->dir, entry);
    const zc_ck_entry *e = &m->entries[entry];
    const int64_t xi = r->plan_ext[r->pos];
    if (r->pos == 0)
        ZC_CHECK(fill(r));
    /* Slots of earlier extents hold nothing more that is needed. */
    while (r->live && r->slots[r->head].ext < xi)
        ZC_CHECK(retire(r));
    const uint64_t esz = zc__ck_elem_bytes(m->kdt[e->kind]);
    const uint64_t bytes = zc__ck_entry_bytes(m, e);
    const uint64_t w0 = (uint64_t)(x0 - e->begin) * esz;
    const uint64_t w1 = (uint64_t)(x1 - e->begin) * esz;
    ZC_CHECK(compare_hashed(r));
    uint64_t eb = 0; /* entry bytes consumed */
    while (eb < bytes) {
        slot *s = &r->slots[r->head];
        const uint64_t at = e->offset + eb;
        if (!r->live || s->ext != xi || at < s->off)
            return ZC_ERR(ZC_ERR_INTERNAL, "%s: entry %" PRId64 " is not in the read-ahead ring",
                          r->src->dir, entry);
        if (at >= s->off + s->len) {
            ZC_CHECK(retire(r));
            continue;
        }
        if (!s->ready) {
            zc_status rc = zc__nvme_wait(r->stores[e->file], s->ticket, NULL);
            s->ready = true; /* waited for, even when it failed */
            if (rc != ZC_OK) {
                zc__error_context("tensor '%s' (%s)", m->params[e->param].name,
                                  zc__ck_kind_name(e->kind));
                return rc;
            }
        }
        const uint64_t k = bytes - eb < s->off + s->len - at ? bytes - eb : s->off + s->len - at;
        ZC_CHECK(consume(r, r->ring + (size_t)r->head * SLOT_BYTES + (at - s->off), eb, k, w0,
                         w1, bytes, (char *)dst));
        eb += k;
        if (at + k == s->off + s->len)
            ZC_CHECK(retire(r));
    }
    r->pos++;
    /* The end of an extent: what is left of it in the ring is padding. */
    while (r->live && (r->pos == r->n || r->plan_ext[r->pos] != xi) &&
           r->slots[r->head].ext == xi)
        ZC_CHECK(retire(r));
    return ZC_OK;
}

zc_status zc__ck_reader_finish(zc_ck_reader *r)
{
    if (!r)
        return ZC_OK;
    if (r->pos != r->n)
        return ZC_ERR(ZC_ERR_INTERNAL, "%s: %" PRId64 " of %" PRId64 " planned entries read",
                      r->src->dir, r->pos, r->n);
    if (r->hasher)
        zc__ck_hasher_wait(r->hasher, r->fed);
    return r->hasher ? compare_hashed(r) : ZC_OK;
}
