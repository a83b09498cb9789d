/* A small TCP rendezvous between the processes of one job (internal).
 *
 * Rank 0 listens; every other rank connects, says who it is, receives rank
 * 0's blob (e.g. an ncclUniqueId) and acknowledges it; rank 0 releases
 * everyone once all have it, so the call is also a barrier. Independent of
 * any GPU library, so it is tested on the host with processes on loopback.
 *
 * Wire format (all integers big-endian):
 *   peer -> 0:  magic "ZCRV", version 1, rank, world, blob length (u32 each)
 *   0 -> peer:  status (u32: 0 ok, else error), then the blob if ok
 *   peer -> 0:  "ACK!"      0 -> peer: "GO!!"
 * A peer whose world size or blob length differs from rank 0's is refused
 * (both sides fail with a message naming the mismatch). */
#ifndef ZC_COMM_RENDEZVOUS_H
#define ZC_COMM_RENDEZVOUS_H

#include <stddef.h>

#include "base/error.h"

typedef struct zc_rdv_opts {
    const char *addr; /* rank 0's host name or address, as the others reach it */
    int port;         /* TCP port rank 0 listens on (any interface) */
    int rank, world;
    double timeout_s; /* for the whole exchange, connect retries included */
} zc_rdv_opts;

/* Sends rank 0's `len` bytes at blob to every rank (others' blob is
 * overwritten) and returns when every rank has it. world == 1 returns at once.
 * Errors: ZC_ERR_INVALID_ARG (bad options), ZC_ERR_CONFIG (address cannot be
 * resolved), ZC_ERR_COMM (cannot listen, connection refused or timed out,
 * protocol mismatch), each naming the address, port, rank and what to check. */
zc_status zc__rendezvous(const zc_rdv_opts *o, void *blob, size_t len);

#endif
