/* Writing one rank's shard file with O_DIRECT (shard_write.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/fsio.h"
#include "ckpt/shard_write.h"

/* Ring buffers of 4 MiB (ZC_CK_RING_SLOTS of them: shard_write.h). */
#define SLOT_BYTES ((size_t)4 << 20)
/* The store's requests: 1 MiB (its default), and a queue deep enough for
 * every buffer of the ring in flight at once, so each one is handed to the
 * kernel whole at its submission (32, the store's default). */
#define IO_BLOCK ((size_t)1 << 20)
#define IO_DEPTH ((int)(ZC_CK_RING_SLOTS * (SLOT_BYTES / IO_BLOCK)))
/* Copied and handed to the checksum worker in pieces small enough to be
 * still in the shared cache when the worker reads them, and large enough
 * that the queue costs nothing next to hashing them. */
#define PIECE ((size_t)256 << 10)
/* Kept values (zc__ck_shard_put_kept) are written straight from their memory
 * in writes of a ring buffer's size, as many in flight as the ring has
 * buffers, each hashed as one piece; a stretch shorter than DIRECT_MIN is
 * copied (a request of its own would cost more than the copy). */
#define DIRECT_MIN PIECE

static void free_buffers(zc_ck_shard *s)
{
    /* The worker first: it may still be reading the ring. */
    zc__ck_hasher_stop(s->hasher);
    s->hasher = NULL;
    zc__ck_ring_free(&s->ring_mem);
    s->ring = NULL;
    free(s->ents);
    s->ents = NULL;
}

zc_status zc__ck_shard_open(zc_ck_shard *s, const char *dir, const char *tag, int rank,
                            uint64_t capacity, const zc_dtype kdt[ZC_CK__KINDS],
                            zc_mem_account *acct, zc_ck_ring_mem **keep)
{
    memset(s, 0, sizeof *s);
    s->fd = s->sfd = -1;
    s->rank = rank;
    for (int k = 0; k < ZC_CK__KINDS; k++)
        s->esz[k] = zc__ck_elem_bytes(kdt[k]);
    zc__ck_file_name(rank, s->final_name);
    snprintf(s->tmp_name, sizeof s->tmp_name, "%s.tmp", s->final_name);
    ZC_CHECK(zc__ck_staging_path(s->dir, dir, tag));
    snprintf(s->tmp, sizeof s->tmp, "%s/%s", s->dir, s->tmp_name);
    if (capacity % ZC_CK_ALIGN)
        return ZC_ERR(ZC_ERR_INTERNAL, "%s: size %" PRIu64 " is not a multiple of %d", s->tmp,
                      capacity, ZC_CK_ALIGN);
    s->capacity = capacity;
    ZC_CHECK(zc__ck_staging_open(dir, tag, NULL, &s->sfd));
    if (!capacity) { /* a rank whose shards are all padding */
        ZC_CHECK(zc__ck_create_at(s->sfd, s->dir, s->tmp_name, &s->fd));
        s->created = true;
        return ZC_OK;
    }
    zc_nvme_opts o = ZC_NVME_OPTS_INIT;
    o.file = s->tmp;
    o.flags = ZC_NVME_FILE_AT;
    o.dirfd = s->sfd;
    o.name = s->tmp_name;
    o.capacity = capacity;
    o.alignment = ZC_CK_ALIGN;
    o.block_size = IO_BLOCK;
    o.queue_depth = IO_DEPTH;
    ZC_CHECK(zc__nvme_open(&s->st, &o));
    zc_nvme_stats stats;
    zc__nvme_stats_get(s->st, &stats);
    zc_status rc = ZC_OK;
    if (stats.alignment > ZC_CK_ALIGN)
        rc = ZC_ERR(ZC_ERR_IO, "%s: the file system needs O_DIRECT alignment %zu, more than the "
                    "checkpoint format's %d", s->tmp, stats.alignment, ZC_CK_ALIGN);
    if (rc == ZC_OK)
        rc = zc__ck_ring_alloc(&s->ring_mem, ZC_CK_RING_SLOTS * SLOT_BYTES, acct,
                               "checkpoint write buffers", keep);
    if (rc == ZC_OK)
        rc = zc__ck_hasher_start(&s->hasher, s->tmp);
    if (rc != ZC_OK) {
        zc__nvme_close(s->st, ZC_NVME_CLOSE_CANCEL);
        s->st = NULL;
        unlinkat(s->sfd, s->tmp_name, 0);
        free_buffers(s);
        return rc;
    }
    s->ring = s->ring_mem.base;
    s->created = true;
    return ZC_OK;
}

/* Hands the buffer being filled to the disk and moves to the next one. */
static zc_status flush_slot(zc_ck_shard *s)
{
    if (!s->fill)
        return ZC_OK;
    char *buf = s->ring + (size_t)s->slot * SLOT_BYTES;
    zc_status rc = zc__nvme_write(s->st, s->slot_off, buf, s->fill, &s->slot_ticket[s->slot]);
    if (rc != ZC_OK) {
        zc__error_context("writing %s", s->tmp);
        return rc;
    }
    zc__ck_hasher_kick(s->hasher);
    s->slot = (s->slot + 1) % ZC_CK_RING_SLOTS;
    s->fill = 0;
    s->slot_off = s->bytes;
    return ZC_OK;
}

/* Room in the ring for up to n bytes at the current position: *dst and the
 * byte count it may take (> 0). Waits for a buffer's previous write, and for
 * the worker to have hashed what was copied into it, before reusing it. */
static zc_status room(zc_ck_shard *s, size_t n, char **dst, size_t *k)
{
    if (!s->fill) {
        zc_nvme_ticket *t = &s->slot_ticket[s->slot];
        if (*t) {
            zc_nvme_ticket w = *t;
            *t = 0;
            ZC_CHECK(zc__nvme_wait(s->st, w, NULL));
        }
        zc__ck_hasher_wait(s->hasher, s->slot_hashed[s->slot]);
        s->slot_off = s->bytes;
    }
    *dst = s->ring + (size_t)s->slot * SLOT_BYTES + s->fill;
    *k = SLOT_BYTES - s->fill < n ? SLOT_BYTES - s->fill : n;
    return ZC_OK;
}

static zc_status advance(zc_ck_shard *s, size_t k)
{
    s->fill += k;
    s->bytes += k;
    /* Each buffer is at most four of the store's requests, all handed to
     * the kernel at submission (IO_DEPTH): no polling needed in between. */
    if (s->fill == SLOT_BYTES)
        ZC_CHECK(flush_slot(s));
    return ZC_OK;
}

static zc_status grow_entries(zc_ck_shard *s)
{
    if (s->n < s->cap)
        return ZC_OK;
    int64_t cap = s->cap ? 2 * s->cap : 64;
    zc_ck_entry *e = realloc(s->ents, (size_t)cap * sizeof *e);
    if (!e)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "%s: %" PRId64 " tensor entries", s->tmp, cap);
    s->ents = e;
    s->cap = cap;
    return ZC_OK;
}

/* Bytes of [p, p + left) to copy before the file can be written straight
 * from p: the head up to where the file offset and the address are both
 * ZC_CK_ALIGN-aligned. (size_t)-1 when they never are together, or when
 * what would be left to write directly is under DIRECT_MIN. */
static size_t direct_head(const zc_ck_shard *s, const char *p, size_t left)
{
    const uint64_t a = ZC_CK_ALIGN;
    if (((uintptr_t)p - s->bytes) % a)
        return (size_t)-1;
    const size_t head = (size_t)((a - s->bytes % a) % a);
    return left >= head + DIRECT_MIN ? head : (size_t)-1;
}

/* Writes the aligned bulk of [*p, *p + *left) straight from memory: the
 * ring's partly filled buffer goes first (it ends on an aligned offset
 * here), then writes of SLOT_BYTES, each waiting for the write submitted
 * ZC_CK_RING_SLOTS writes before it, each hashed from the same memory. The
 * bytes must stay unchanged until zc__ck_shard_close: the writes and the
 * hashing are waited for there (or cancelled by zc__ck_shard_discard). */
static zc_status put_direct(zc_ck_shard *s, const char **p, size_t *left, bool *first)
{
    ZC_CHECK(flush_slot(s));
    size_t n = *left / ZC_CK_ALIGN * ZC_CK_ALIGN;
    while (n) {
        const size_t k = n < SLOT_BYTES ? n : SLOT_BYTES;
        zc_nvme_ticket *t = &s->direct_ticket[s->direct_slot];
        if (*t) {
            zc_nvme_ticket w = *t;
            *t = 0;
            ZC_CHECK(zc__nvme_wait(s->st, w, NULL));
        }
        zc_status rc = zc__nvme_write(s->st, s->bytes, *p, k, t);
        if (rc != ZC_OK) {
            zc__error_context("writing %s", s->tmp);
            return rc;
        }
        s->direct_slot = (s->direct_slot + 1) % ZC_CK_RING_SLOTS;
        ZC_CHECK(zc__ck_hasher_feed(s->hasher, *p, k, *first, k == *left, &s->fed));
        zc__ck_hasher_kick(s->hasher);
        *first = false;
        *p += k;
        *left -= k;
        n -= k;
        s->bytes += k;
        s->direct_bytes += k;
        s->slot_off = s->bytes;
    }
    return ZC_OK;
}

static zc_status put(zc_ck_shard *s, int param, int kind, int64_t begin, int64_t end,
                     const void *values, bool kept)
{
    if (kind < 0 || kind >= ZC_CK__KINDS)
        return ZC_ERR(ZC_ERR_INTERNAL, "%s: tensor kind %d", s->tmp, kind);
    ZC_CHECK(grow_entries(s));
    size_t left = (size_t)(end - begin) * s->esz[kind];
    if (!left || zc__ck_run_bytes(s->bytes + left) > s->capacity) /* with the run's padding */
        return ZC_ERR(ZC_ERR_INTERNAL, "%s: %zu bytes at %" PRIu64 " do not fit the %" PRIu64
                      " bytes reserved, or are none", s->tmp, left, s->bytes, s->capacity);
    const uint64_t offset = s->bytes;
    const char *p = (const char *)values;
    bool first = true;
    while (left) {
        size_t most = left < PIECE ? left : PIECE;
        if (kept && s->st) {
            const size_t head = direct_head(s, p, left);
            if (head == 0) {
                ZC_CHECK(put_direct(s, &p, &left, &first));
                continue;
            }
            if (head != (size_t)-1 && head < most)
                most = head; /* copy up to where the direct write can start */
        }
        char *dst;
        size_t k;
        ZC_CHECK(room(s, most, &dst, &k));
        memcpy(dst, p, k);
        /* Hashed from the copy: the checksum is of the bytes written. */
        ZC_CHECK(zc__ck_hasher_feed(s->hasher, dst, k, first, k == left, &s->fed));
        s->slot_hashed[s->slot] = s->fed;
        first = false;
        p += k;
        left -= k;
        ZC_CHECK(advance(s, k));
    }
    s->ents[s->n++] = (zc_ck_entry){.param = param, .kind = kind, .file = s->rank,
                                    .begin = begin, .end = end, .offset = offset};
    return ZC_OK;
}

zc_status zc__ck_shard_put(zc_ck_shard *s, int param, int kind, int64_t begin, int64_t end,
                           const void *values)
{
    return put(s, param, kind, begin, end, values, false);
}

zc_status zc__ck_shard_put_kept(zc_ck_shard *s, int param, int kind, int64_t begin, int64_t end,
                                const void *values)
{
    return put(s, param, kind, begin, end, values, true);
}

zc_status zc__ck_shard_pad(zc_ck_shard *s)
{
    size_t left = (size_t)(zc__ck_run_bytes(s->bytes) - s->bytes);
    while (left) {
        char *dst;
        size_t k;
        ZC_CHECK(room(s, left, &dst, &k));
        memset(dst, 0, k);
        left -= k;
        ZC_CHECK(advance(s, k));
    }
    return ZC_OK;
}

zc_status zc__ck_shard_append(zc_ck_shard *s, int param, int kind, int64_t begin, int64_t end,
                              const void *values)
{
    ZC_CHECK(zc__ck_shard_put(s, param, kind, begin, end, values));
    return zc__ck_shard_pad(s);
}

/* Every piece hashed: the entries' checksums, in the order they were put. */
static zc_status take_checksums(zc_ck_shard *s)
{
    zc__ck_hasher_wait(s->hasher, s->fed);
    int64_t n;
    const uint64_t *d = zc__ck_hasher_digests(s->hasher, &n);
    if (n != s->n)
        return ZC_ERR(ZC_ERR_INTERNAL, "%s: %" PRId64 " checksums for %" PRId64 " entries",
                      s->tmp, n, s->n);
    for (int64_t i = 0; i < n; i++)
        s->ents[i].xxh3 = d[i];
    return ZC_OK;
}

zc_status zc__ck_shard_seal(zc_ck_shard *s)
{
    if (s->sealed)
        return ZC_OK;
    if (s->st) {
        ZC_CHECK(flush_slot(s));
        if (s->bytes != s->capacity)
            return ZC_ERR(ZC_ERR_INTERNAL, "%s: %" PRIu64 " bytes written, %" PRIu64 " reserved",
                          s->tmp, s->bytes, s->capacity);
        /* Hashing runs ahead of the disk: this waits for the worker, not
         * for the writes still in flight. */
        ZC_CHECK(take_checksums(s));
    }
    /* The final name now, before the bytes are durable: the staging
     * directory is published only after every rank's zc__ck_shard_close, and
     * a crash before that discards it whole (dirwrite.h). The name becomes
     * durable with the commit's fsync of the staging directory. */
    if (renameat(s->sfd, s->tmp_name, s->sfd, s->final_name) != 0)
        return ZC_ERR(ZC_ERR_IO, "rename %s -> %s: %s", s->tmp, s->final_name, strerror(errno));
    s->renamed = true;
    ZC_CHECK(zc__ck_index_write(s->sfd, s->dir, s->rank, s->ents, s->n, s->bytes));
    s->sealed = true;
    return ZC_OK;
}

zc_status zc__ck_shard_close(zc_ck_shard *s)
{
    ZC_CHECK(zc__ck_shard_seal(s));
    zc_status rc = ZC_OK;
    if (s->st) {
        /* fsync waits for every write still in flight first. */
        rc = zc__nvme_fsync(s->st);
        zc_nvme_store *st = s->st;
        s->st = NULL;
        zc_status crc = zc__nvme_close(st, rc == ZC_OK ? ZC_NVME_CLOSE_WAIT : ZC_NVME_CLOSE_CANCEL);
        if (rc == ZC_OK)
            rc = crc;
    } else {
        rc = zc__ck_sync_close(s->fd, s->dir, s->final_name, true);
        s->fd = -1;
    }
    if (rc != ZC_OK)
        return rc; /* zc__ck_shard_discard removes the file and its index */
    free_buffers(s);
    close(s->sfd);
    s->sfd = -1;
    return ZC_OK;
}

void zc__ck_shard_discard(zc_ck_shard *s)
{
    if (s->st) {
        /* Cancel, and wait for what the kernel cannot: no write may read
         * freed buffers. */
        zc__nvme_close(s->st, ZC_NVME_CLOSE_CANCEL);
        s->st = NULL;
    }
    if (s->fd >= 0) {
        close(s->fd);
        s->fd = -1;
    }
    if (s->sfd >= 0) {
        /* Not closed successfully (that closes sfd): the file goes, under
         * whichever name it has, and the index a seal wrote. */
        if (s->created)
            unlinkat(s->sfd, s->renamed ? s->final_name : s->tmp_name, 0);
        if (s->sealed) {
            char idx[32];
            zc__ck_index_name(s->rank, idx);
            unlinkat(s->sfd, idx, 0);
        }
        close(s->sfd);
        s->sfd = -1;
    }
    free_buffers(s);
}
