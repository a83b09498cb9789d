/* Writing one rank's shard file with O_DIRECT through the NVMe store's
 * io_uring engine (internal), shared by the engine's save and the reshard.
 *
 * The file is a sequence of *runs*, each starting at a multiple of
 * ZC_CK_ALIGN: a run holds entries back to back (a chunk range's parameters
 * for one tensor kind, contiguous in the engine's memory too) and is padded
 * with zeros to the alignment. An entry's values are bytes of its kind's
 * stored dtype (fixed for the file at zc__ck_shard_open: 4 bytes an element
 * for fp32, 2 for bf16); nothing here converts.
 *
 * Bytes reach the disk through a ring of aligned bounce buffers (huge pages:
 * ring_mem.h): each entry is copied in pieces, each piece is handed to the
 * checksum worker (hash_worker.h), which hashes it on its own thread, and a
 * full buffer is submitted at once while the next one is filled, so the
 * copying, the hashing and the writes overlap. A buffer is refilled only once
 * its write is done and its pieces are hashed.
 *
 * Values the caller keeps unchanged until the file is closed (an optimizer
 * home's own tensors during a save: zc__ck_shard_put_kept) skip the copy
 * where they can: where an entry's address and its file offset are both
 * ZC_CK_ALIGN-aligned, its bytes are written with O_DIRECT from where they
 * are and hashed there, and only an unaligned head or tail goes through the
 * ring. The engine's large host buffers are 2 MiB aligned on transparent
 * huge pages for this (base/alloc.h): on 4 KiB pages every 1 MiB request is
 * split at the disk's segment limit, which made writing from the engine
 * slower than copying (bench/RESULTS.md, "Checkpoints").
 *
 * The file is created as TMP = FINAL.tmp with O_EXCL and reserved at its exact
 * size up front (a full disk shows at open). zc__ck_shard_seal gives it its
 * final name and writes its index as soon as the last bytes are handed to the
 * disk, while they are still being written, and zc__ck_shard_close makes
 * them durable (fsync): between the two a caller has the disk's last
 * milliseconds of work for itself (rank 0 writes the manifest then:
 * dirwrite.h). The names become durable with the commit's fsync of the
 * staging directory. */
#ifndef ZC_CKPT_SHARD_WRITE_H
#define ZC_CKPT_SHARD_WRITE_H

#include <stdint.h>

#include "ckpt/dirwrite.h"
#include "ckpt/hash_worker.h"
#include "ckpt/ring_mem.h"
#include "offload/offload.h"

/* Buffers of 4 MiB in the write ring: seven in flight while one is filled,
 * 28-32 MiB, as many of the store's 1 MiB requests as its queue depth. The
 * thread that fills them shares two cores with the hashing worker, the
 * kernel's I/O completions and whatever else runs: with four (12 MiB in
 * flight, about 5 ms of the disk) a few milliseconds off the CPU let the
 * disk run dry (bench/RESULTS.md, "Checkpoints"). The engine keeps the ring
 * (ring_mem.h), so its size is faulted in once, not at every save. */
#define ZC_CK_RING_SLOTS 8

/* One rank's shard file being written. */
typedef struct zc_ck_shard {
    zc_nvme_store *st;        /* NULL for an empty shard (fd instead) */
    int fd, rank;
    int sfd;                  /* the staging directory, opened and checked
                                 (zc__ck_staging_open); the files are made
                                 relative to it */
    char tmp_name[40], final_name[32]; /* rank_R.bin.tmp, rank_R.bin */
    char tmp[ZC_CK_PATH_MAX + 40], dir[ZC_CK_PATH_MAX]; /* paths, for messages */
    uint64_t capacity;        /* the file's size, fixed at open */
    size_t esz[ZC_CK__KINDS]; /* bytes per element of each kind, fixed at open */
    uint64_t bytes;           /* written so far: the next byte's offset */
    zc_ck_ring_mem ring_mem;  /* allocation behind ring */
    char *ring;               /* ZC_CK_RING_SLOTS buffers, page aligned */
    zc_nvme_ticket slot_ticket[ZC_CK_RING_SLOTS];
    uint64_t slot_hashed[ZC_CK_RING_SLOTS]; /* the last piece fed from each
                                               buffer (its hasher sequence) */
    uint64_t fed;             /* the last piece fed, from a buffer or not */
    zc_nvme_ticket direct_ticket[ZC_CK_RING_SLOTS]; /* writes from kept values */
    int direct_slot;          /* the next of them to reuse */
    uint64_t direct_bytes;    /* written from kept values, not copied */
    int slot;                 /* the buffer being filled */
    size_t fill;              /* bytes in it */
    uint64_t slot_off;        /* file offset of its first byte */
    zc_ck_hasher *hasher;     /* the entries' checksums */
    zc_ck_entry *ents;        /* their xxh3 is filled in at the seal */
    int64_t n, cap;
    bool created;             /* the file exists (under tmp_name or final_name) */
    bool renamed;             /* the file has its final name */
    bool sealed;              /* zc__ck_shard_seal done: index written */
} zc_ck_shard;

/* Bytes a run of `bytes` takes in the file (padded to ZC_CK_ALIGN). */
static inline uint64_t zc__ck_run_bytes(uint64_t bytes)
{
    return (bytes + ZC_CK_ALIGN - 1) / ZC_CK_ALIGN * ZC_CK_ALIGN;
}

/* Creates DIR/.TAG.partial/rank_R.bin.tmp (O_EXCL, relative to the staging
 * directory's descriptor: zc__ck_staging_open refuses one that is a link or
 * not marked) of exactly `capacity` bytes (the sum of zc__ck_run_bytes of the
 * runs to come), whose kind k holds values of dtype kdt[k] (fp32 or bf16,
 * as the manifest's kdt will say). The ring comes from keep (an engine's buffers, ring_mem.h;
 * NULL: mapped for this file alone), counted in acct (may be NULL). On
 * failure nothing is left behind (zc__ck_shard_discard is still safe). */
zc_status zc__ck_shard_open(zc_ck_shard *s, const char *dir, const char *tag, int rank,
                            uint64_t capacity, const zc_dtype kdt[ZC_CK__KINDS],
                            zc_mem_account *acct, zc_ck_ring_mem **keep);

/* Appends elements [begin, end) of parameter `param`'s tensor `kind` (values
 * of the kind's dtype in host memory, (end - begin) * esz[kind] bytes; read
 * before the call returns) right after the
 * previous entry of the run, and records its entry; its checksum is
 * computed on the worker and recorded by zc__ck_shard_seal. */
zc_status zc__ck_shard_put(zc_ck_shard *s, int param, int kind, int64_t begin, int64_t end,
                           const void *values);

/* The same for values that stay unchanged, at the same address, until
 * zc__ck_shard_close or zc__ck_shard_discard returns: where they are aligned
 * they are written and hashed where they are, not copied (above). The file
 * and the checksums are the same as zc__ck_shard_put's. */
zc_status zc__ck_shard_put_kept(zc_ck_shard *s, int param, int kind, int64_t begin, int64_t end,
                                const void *values);

/* Ends the run: zero padding up to ZC_CK_ALIGN. */
zc_status zc__ck_shard_pad(zc_ck_shard *s);

/* A run of one entry: zc__ck_shard_put + zc__ck_shard_pad. */
zc_status zc__ck_shard_append(zc_ck_shard *s, int param, int kind, int64_t begin, int64_t end,
                              const void *values);

/* Ends the writing: hands the last buffer to the disk, waits for the
 * checksums (not for the writes), gives the file its final name and writes
 * its index (zc__ck_index_write). Nothing may be put after it. The values of
 * zc__ck_shard_put_kept must still stay unchanged: they may still be in
 * flight until zc__ck_shard_close. */
zc_status zc__ck_shard_seal(zc_ck_shard *s);
/* Seals the file if that was not done, then waits for every write and makes
 * the bytes durable (fsync), and frees the ring and the worker. On failure
 * zc__ck_shard_discard removes the file and its index. The names become
 * durable at the commit (dirwrite.h). */
zc_status zc__ck_shard_close(zc_ck_shard *s);
/* Cancels what is in flight, frees, and removes the file and its index when
 * they were not closed successfully (after a failure; a no-op after a
 * successful close). */
void zc__ck_shard_discard(zc_ck_shard *s);

#endif
