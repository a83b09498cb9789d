/* Agreeing on the outcome of rank-local work before the next collective.
 *
 * Some work between two collectives can fail on one rank alone (an
 * allocation that is not reserved at build, Adam on a device, and with
 * offload every NVMe read and write). If that rank simply returned, the
 * others would go on into a collective it never joins: a timeout, or with
 * NCCL a hang or mixed-up data. So every rank takes part in one small
 * all-gather of a status record - its status and, when it failed, its error
 * message - and all of them read the same records: when any rank failed,
 * every rank breaks its engine with the same message, naming the first
 * failed rank and what failed, and returns that rank's status.
 *
 * The exchange runs on the engine's control stream (ctl_stream), not on its
 * main stream: the statuses are host values, so the one host wait it needs
 * covers the small exchange only, never the model work queued before it (on
 * CUDA the optimizer pass keeps running while the host reads the records and
 * queues what follows).
 *
 * The record buffers are reserved at zc_engine_build, so agreeing cannot
 * itself fail on one rank; a failure of the all-gather is a failed
 * collective, which breaks the engine like any other. The exchange is not
 * counted in the step's communication stats (it is not model payload). */
#include <stdio.h>
#include <string.h>

#include "core/engine.h"

/* int32 words per rank: the status, then the message bytes. 1 KiB, so an
 * offload I/O error keeps its chunk, file, offset and errno text. */
#define REC_WORDS 256
#define REC_BYTES (REC_WORDS * sizeof(int32_t))
#define MSG_BYTES (REC_BYTES - sizeof(int32_t))
/* A payload starts 8 bytes into the record, so it is as aligned as the
 * record (the host allocation). */
#define PAYLOAD_AT 8
_Static_assert(ZC_AGREE_PAYLOAD_BYTES == REC_BYTES - PAYLOAD_AT, "the payload fills the record");
_Static_assert(ZC_AGREE_RECORD_BYTES == REC_BYTES, "the planner counts the record's size");

zc_status zc__agree_alloc(zc_engine *e)
{
    void *mem = NULL;
    const size_t all = REC_BYTES * (size_t)e->world;
    ZC_CHECK(zc__host_alloc(&e->acct, ZC_MEM_OTHER, all, "status records", &mem));
    e->agree_host = mem;
    ZC_CHECK(zc__eng_alloc(e, ZC_MEM_OTHER, REC_BYTES, "status record (send)", &mem));
    e->agree_send = mem;
    ZC_CHECK(zc__eng_alloc(e, ZC_MEM_OTHER, all, "status records (recv)", &mem));
    e->agree_recv = mem;
    return ZC_OK;
}

void zc__agree_free(zc_engine *e)
{
    const size_t all = REC_BYTES * (size_t)e->world;
    zc__host_free(&e->acct, ZC_MEM_OTHER, e->agree_host, all);
    e->agree_host = NULL;
    zc__eng_free(e, ZC_MEM_OTHER, &e->agree_send, REC_BYTES);
    zc__eng_free(e, ZC_MEM_OTHER, &e->agree_recv, all);
}

/* The exchange; `keep` leaves the engine usable after a failure agreed by
 * the ranks (a failed exchange always breaks it). A rank that succeeded
 * sends `payload` (bytes, at most ZC_AGREE_PAYLOAD_BYTES) in its record. */
static zc_status exchange(zc_engine *e, zc_status local, const char *what, bool keep,
                          const void *payload, size_t bytes);

/* Every agreement is one span of the timeline, named by `what`. */
static zc_status agree(zc_engine *e, zc_status local, const char *what, bool keep,
                       const void *payload, size_t bytes)
{
    const int64_t t0 = zc__tl_begin();
    const zc_status rc = exchange(e, local, what, keep, payload, bytes);
    zc__tl_agree(t0, what, rc);
    return rc;
}

static zc_status exchange(zc_engine *e, zc_status local, const char *what, bool keep,
                          const void *payload, size_t bytes)
{
    zc_device *d = e->dev;
    /* The local record: the status and, on failure, this rank's message,
     * else the payload. */
    unsigned char *mine = e->agree_host; /* rank slot 0 as scratch before the exchange */
    memset(mine, 0, REC_BYTES);
    int32_t st = (int32_t)local;
    memcpy(mine, &st, sizeof st);
    if (local != ZC_OK)
        snprintf((char *)mine + sizeof st, MSG_BYTES, "%s", zc_last_error());
    else if (bytes > 0)
        memcpy(mine + PAYLOAD_AT, payload, bytes);
    /* Before build (no streams yet) the control stream is NULL, the legacy
     * default stream, like everything else then. */
    void *cs = e->ctl_stream;
    ZC_CHECK(d->ops->copy(d, e->agree_send, mine, REC_BYTES, ZC_COPY_H2D, cs));
    zc_status rc = zc__eng_all_gather_on(e, e->agree_send, e->agree_recv, REC_WORDS,
                                         ZC_DTYPE_I32, false, cs);
    if (rc == ZC_OK)
        rc = d->ops->copy(d, e->agree_host, e->agree_recv, REC_BYTES * (size_t)e->world,
                          ZC_COPY_D2H, cs);
    if (rc == ZC_OK)
        rc = d->ops->stream_sync(d, cs);
    if (rc != ZC_OK) {
        /* The exchange itself failed: a failed collective (already broken)
         * or a device error; either way the ranks can no longer agree. */
        zc__eng_break(e, rc, zc_last_error());
        return rc;
    }
    const unsigned char *all = e->agree_host;
    for (int r = 0; r < e->world; r++) {
        int32_t s;
        memcpy(&s, all + REC_BYTES * (size_t)r, sizeof s);
        if (s == ZC_OK)
            continue;
        /* Same records on every rank, so the same status and text. The text
         * is rebuilt from scratch, without this rank's own context. */
        char msg[MSG_BYTES];
        memcpy(msg, all + REC_BYTES * (size_t)r + sizeof s, MSG_BYTES);
        msg[MSG_BYTES - 1] = '\0';
        zc_status fs = s > ZC_OK && s <= ZC_ERR_INTERNAL ? (zc_status)s : ZC_ERR_INTERNAL;
        zc__error_clear();
        rc = ZC_ERR(fs, "%s failed on rank %d of %d: %s", what, r, e->world, msg);
        if (!keep)
            zc__eng_break(e, fs, zc_last_error());
        return rc;
    }
    return ZC_OK;
}

zc_status zc__eng_agree(zc_engine *e, zc_status local, const char *what)
{
    return agree(e, local, what, false, NULL, 0);
}

zc_status zc__eng_agree_keep(zc_engine *e, zc_status local, const char *what)
{
    return agree(e, local, what, true, NULL, 0);
}

zc_status zc__eng_agree_keep_with(zc_engine *e, zc_status local, const char *what,
                                  const void *payload, size_t bytes)
{
    if (bytes > ZC_AGREE_PAYLOAD_BYTES)
        return ZC_ERR(ZC_ERR_INTERNAL, "%s: a payload of %zu bytes exceeds the record's %d",
                      what, bytes, ZC_AGREE_PAYLOAD_BYTES);
    return agree(e, local, what, true, payload, bytes);
}

const void *zc__eng_agreed_payload(const zc_engine *e, int rank)
{
    return (const unsigned char *)e->agree_host + REC_BYTES * (size_t)rank + PAYLOAD_AT;
}
