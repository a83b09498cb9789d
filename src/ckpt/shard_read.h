/* Reading the entries a load needs, once, with O_DIRECT through the NVMe
 * store's io_uring engine (internal; format version 2, whose runs start at
 * multiples of ZC_CK_ALIGN and whose files are multiples of it).
 *
 * The load knows up front which entries it reads and in which order (its
 * chunks, kinds and parameters): that list is the reader's *plan*. The plan is
 * cut into *extents*, aligned byte ranges of one file covering entries that
 * follow each other in the file (a run of the saving engine is one extent
 * when the loading engine reads it whole), and the extents into pieces of one
 * ring buffer each. Pieces are read ahead through a ring of aligned buffers
 * while earlier ones are copied into place and hashed on the checksum
 * worker's thread (hash_worker.h), so the disk is read once and the CPU work
 * overlaps it; a buffer is read into again only once its bytes are hashed.
 *
 * Everything that can fail without touching the payload - opening every file
 * of the plan, the buffers - happens in zc__ck_reader_open, before the
 * engine's state is touched. A checksum mismatch is found only after the
 * entry's bytes were copied to their destination, and it is reported by a
 * later call (the worker hashes behind the copy): the caller has then
 * overwritten state (load.c breaks the engine on every rank). */
#ifndef ZC_CKPT_SHARD_READ_H
#define ZC_CKPT_SHARD_READ_H

#include <stdint.h>

#include "base/alloc.h"
#include "ckpt/ring_mem.h"
#include "ckpt/source.h"

typedef struct zc_ck_reader zc_ck_reader;

/* Opens the files the n plan entries (indices into s->m.entries, in the
 * order zc__ck_reader_next will ask for them) lie in, read-only with
 * O_DIRECT, and takes the ring from keep (an engine's buffers, ring_mem.h;
 * NULL: mapped for this reader alone), counted in acct (may be NULL). s must be a
 * version-2 source and outlive the reader. Errors name the file. */
zc_status zc__ck_reader_open(zc_ck_reader **out, const zc_ck_source *s, zc_mem_account *acct,
                             zc_ck_ring_mem **keep, const int64_t *plan, int64_t n);

/* The next plan entry, which must be `entry`: reads all of its bytes, copies
 * its elements [x0, x1) (of the parameter, inside the entry) to dst (host
 * memory; as stored, in the kind's dtype: s->m.kdt) and hands the bytes to the checksum worker. Compares the checksums
 * of the earlier entries the worker has finished. Errors: ZC_ERR_IO naming
 * the file, the tensor and the element range (checksum mismatch of this or
 * an earlier entry, I/O error), ZC_ERR_INTERNAL when the plan is not
 * followed. */
zc_status zc__ck_reader_next(zc_ck_reader *r, int64_t entry, int64_t x0, int64_t x1, void *dst);

/* After the last entry: waits for the worker and compares the checksums not
 * compared yet (the same errors). ZC_ERR_INTERNAL when entries of the plan
 * were not read. NULL: ZC_OK. */
zc_status zc__ck_reader_finish(zc_ck_reader *r);

/* Cancels reads still in flight, closes the files, frees. NULL is a no-op. */
void zc__ck_reader_close(zc_ck_reader *r);

#endif
