/* The hooks the engine and the machine rooms call (trace.h): each turns its
 * figures into one record of this thread's timeline. Every one returns at
 * once when t0 is 0 (nothing recorded when the span began). */
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "trace/tl_internal.h"

static void copy_text(char *dst, const char *src)
{
    snprintf(dst, ZC_TL_TEXT, "%s", src ? src : "");
}

static void push_main(int64_t t0, zc_tl_rec *r)
{
    r->t0 = t0;
    r->t1 = zc__tl_clock();
    r->track = ZC_TL_TRACK_MAIN;
    zc__tl_push(zc__tl_cur, r);
}

void zc__tl_span(int64_t t0, zc_tl_kind kind, const char *name, int chunk, int64_t a)
{
    if (!t0 || !zc__tl_cur)
        return;
    zc_tl_rec r = {.name = name, .kind = (uint8_t)kind, .chunk = chunk, .a = a};
    push_main(t0, &r);
}

void zc__tl_acquire(int64_t t0, int chunk, zc_tl_acq how, int64_t bytes, int64_t wait_ns)
{
    if (!t0 || !zc__tl_cur)
        return;
    zc_tl_rec r = {.name = "acquire", .kind = ZC_TLK_ACQUIRE, .chunk = chunk, .i0 = (int)how,
                   .a = bytes, .b = wait_ns};
    push_main(t0, &r);
}

void zc__tl_copy(int64_t t0, bool to_host, int64_t bytes, int chunk)
{
    if (!t0 || !zc__tl_cur)
        return;
    zc_tl_rec r = {.name = to_host ? "copy d2h" : "copy h2d", .kind = ZC_TLK_COPY,
                   .chunk = chunk, .i0 = to_host, .a = bytes};
    push_main(t0, &r);
}

void zc__tl_nvme_wait(int64_t t0, int64_t bytes)
{
    if (!t0 || !zc__tl_cur)
        return;
    zc_tl_rec r = {.name = "nvme wait", .kind = ZC_TLK_NVME_WAIT, .chunk = -1, .a = bytes};
    push_main(t0, &r);
}

void zc__tl_nvme(int64_t t0, bool write, int64_t bytes, int inflight, int qd)
{
    if (!t0 || !zc__tl_cur)
        return;
    zc_tl_rec r = {.t0 = t0, .t1 = zc__tl_clock(), .name = write ? "nvme write" : "nvme read",
                   .kind = ZC_TLK_NVME, .track = ZC_TL_TRACK_NVME, .chunk = -1,
                   .i0 = write, .i1 = inflight, .a = bytes, .b = qd};
    zc__tl_push(zc__tl_cur, &r);
}

void zc__tl_adam(int64_t t0, int64_t n, int threads, const char *variant)
{
    if (!t0 || !zc__tl_cur)
        return;
    zc_tl_rec r = {.name = "adam", .kind = ZC_TLK_ADAM, .chunk = -1, .i0 = threads, .a = n};
    copy_text(r.text, variant);
    push_main(t0, &r);
}

void zc__tl_adam_part(zc_tl *t, int64_t t0, int64_t n, int part, int parts, int worker)
{
    if (!t0 || !t)
        return;
    zc_tl_rec r = {.t0 = t0, .t1 = zc__tl_clock(), .name = "adam part",
                   .kind = ZC_TLK_ADAM_PART, .chunk = -1, .i0 = part, .i1 = parts, .a = n,
                   .track = (uint16_t)(worker <= 0 ? ZC_TL_TRACK_MAIN
                                                   : ZC_TL_TRACK_WORKER + worker)};
    zc__tl_push(t, &r);
}

void zc__tl_worker_begin(zc_tl *t) { zc__tl_cur = t; }
void zc__tl_worker_end(void) { zc__tl_cur = NULL; }

/* ---- collectives --------------------------------------------------------- */

const char *zc__tl_coll_name(int kind)
{
    switch (kind) {
    case ZC_COLL_ALL_REDUCE: return "all_reduce";
    case ZC_COLL_REDUCE_SCATTER: return "reduce_scatter";
    case ZC_COLL_ALL_GATHER: return "all_gather";
    case ZC_COLL_BROADCAST: return "broadcast";
    default: return "collective";
    }
}

bool zc__tl_in_group(void) { return zc__tl_cur && zc__tl_cur->group.open; }

void zc__tl_coll(int64_t t0, int kind, zc_dtype dt, int64_t bytes, int64_t elems,
                 const char *site, unsigned flags, int ranks)
{
    zc_tl *t = zc__tl_cur;
    if (!t0 || !t || kind < 0 || kind >= ZC_COLL__COUNT)
        return;
    const int64_t t1 = zc__tl_clock();
    if (t->group.open) {
        flags |= ZC_TLF_BATCHED;
        t->group.ops[kind]++;
        t->group.bytes[kind] += bytes;
    }
    zc_tl_rec r = {.t0 = t0, .t1 = t1, .name = zc__tl_coll_name(kind), .kind = ZC_TLK_COLL,
                   .flags = (uint8_t)flags, .track = ZC_TL_TRACK_MAIN, .chunk = -1,
                   .i0 = kind, .i1 = (int)dt, .a = bytes, .b = elems};
    copy_text(r.text, site);
    zc__tl_push(t, &r);
    if (zc__tl_comms_profiles(t, kind))
        zc__tl_comms_add(t, kind, bytes, site, flags, t1 - t0, ranks);
}

void zc__tl_group_open(int ranks)
{
    zc_tl *t = zc__tl_cur;
    if (!t)
        return;
    memset(&t->group, 0, sizeof t->group);
    t->group.open = true;
    t->group.ranks = ranks;
}

void zc__tl_group_end(int64_t t0)
{
    zc_tl *t = zc__tl_cur;
    if (!t || !t->group.open)
        return;
    t->group.open = false;
    if (!t0)
        return;
    const int64_t t1 = zc__tl_clock();
    int64_t n = 0, bytes = 0;
    for (int k = 0; k < ZC_COLL__COUNT; k++) {
        n += t->group.ops[k];
        bytes += t->group.bytes[k];
    }
    if (n == 0)
        return; /* an empty group launched nothing */
    zc_tl_rec r = {.t0 = t0, .t1 = t1, .name = "group launch", .kind = ZC_TLK_GROUP,
                   .track = ZC_TL_TRACK_MAIN, .chunk = -1, .i0 = (int)n, .a = bytes};
    zc__tl_push(t, &r);
    if (t->comms.enabled)
        zc__tl_comms_group(t, t1 - t0);
}

void zc__tl_agree(int64_t t0, const char *what, zc_status rc)
{
    if (!t0 || !zc__tl_cur)
        return;
    zc_tl_rec r = {.name = "agree", .kind = ZC_TLK_AGREE, .chunk = -1, .i0 = (int)rc};
    copy_text(r.text, what);
    push_main(t0, &r);
}
