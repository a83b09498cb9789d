/* The XXH3 checksums of a shard file's entries, computed on a thread of their
 * own (internal; shard_write.c).
 *
 * The thread that writes a shard copies each entry into the write ring and
 * hands the disk full buffers; hashing the copied bytes on that thread too
 * delayed the next submission by as long again (bench/RESULTS.md,
 * "Checkpoints"). So the writer *feeds* each copied piece here and goes on;
 * one worker thread hashes the pieces in the order they were fed, with one
 * XXH3 streaming state, so an entry's digest is XXH3_64bits of its bytes,
 * the same bits as hashing them in one go (the checkpoint format is
 * unchanged).
 *
 * A piece's bytes must stay unchanged until zc__ck_hasher_wait says it was
 * hashed: the writer waits before it reuses a ring buffer. Not for concurrent
 * feeders: one writer thread feeds and waits. */
#ifndef ZC_CKPT_HASH_WORKER_H
#define ZC_CKPT_HASH_WORKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct zc_ck_hasher zc_ck_hasher;

/* Starts the worker. `what` names the file in messages. ZC_ERR_NO_MEMORY
 * (memory, or the thread could not be started: its errno text) leaves nothing
 * behind. */
zc_status zc__ck_hasher_start(zc_ck_hasher **out, const char *what);

/* Queues n bytes at p (n may be 0). first: they begin an entry (its state is
 * reset); last: they end it, and its digest becomes the next of the worker's
 * digests. Sets *seq to the piece's number (1, 2, ...). A sleeping worker is
 * not woken (see kick) unless the queue is full; the call then wakes it and
 * blocks until there is room. ZC_ERR_NO_MEMORY when the digest table cannot
 * grow. */
zc_status zc__ck_hasher_feed(zc_ck_hasher *h, const void *p, size_t n, bool first, bool last,
                             uint64_t *seq);

/* Wakes the worker if it sleeps with pieces queued (one wake-up for a batch
 * of pieces: the writer kicks when it hands the disk a buffer). */
void zc__ck_hasher_kick(zc_ck_hasher *h);

/* Kicks, then blocks (no busy loop) until pieces 1 .. seq are hashed. */
void zc__ck_hasher_wait(zc_ck_hasher *h, uint64_t seq);

/* After every piece fed was waited for: the digests of the entries ended so
 * far, in the order they ended; *n their count. Valid until the next feed or
 * zc__ck_hasher_stop. */
const uint64_t *zc__ck_hasher_digests(zc_ck_hasher *h, int64_t *n);

/* Stops the worker once it has finished the piece it is hashing (pieces
 * still queued are dropped), joins it and frees. NULL is a no-op. */
void zc__ck_hasher_stop(zc_ck_hasher *h);

/* Tests: the worker pauses usec_per_piece microseconds before each piece
 * (0: never), so it falls behind the writer and a buffer reused before its
 * pieces were hashed shows as a wrong checksum. */
void zc__ck_hasher_slow_for_tests(unsigned usec_per_piece);

#endif
