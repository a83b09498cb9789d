/* The timeline: creation, the traced window, keeping records (trace.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "trace/tl_internal.h"

_Thread_local zc_tl *zc__tl_cur;

zc_status zc__tl_rank_path(const char *path, int rank, int world, const char *what, char *buf,
                           size_t cap)
{
    const char *mark = strstr(path, "{rank}");
    int n;
    if (mark) {
        n = snprintf(buf, cap, "%.*s%d%s", (int)(mark - path), path, rank, mark + 6);
    } else if (world > 1) {
        /* Before the extension of the last component: trace.json ->
         * trace.rank1.json; a name without one gets the suffix at its end. */
        const char *slash = strrchr(path, '/');
        const char *dot = strrchr(slash ? slash + 1 : path, '.');
        if (dot && dot != (slash ? slash + 1 : path))
            n = snprintf(buf, cap, "%.*s.rank%d%s", (int)(dot - path), path, rank, dot);
        else
            n = snprintf(buf, cap, "%s.rank%d", path, rank);
    } else {
        n = snprintf(buf, cap, "%s", path);
    }
    if (n < 0 || (size_t)n >= cap)
        return ZC_ERR(ZC_ERR_CONFIG, "%s: the file name of rank %d is longer than %zu bytes",
                      what, rank, cap - 1);
    return ZC_OK;
}

zc_status zc__tl_create(const zc_tl_opts *o, zc_mem_account *acct, const char *key,
                        zc_tl **out)
{
    *out = NULL;
    if (o->path && o->capacity < 1)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: a timeline needs room for records", key);
    zc_tl *t = NULL;
    ZC_CHECK(zc__host_alloc(acct, ZC_MEM_OTHER, sizeof *t, "timeline", (void **)&t));
    memset(t, 0, sizeof *t);
    t->fd = -1;
    t->rank = o->rank;
    t->world = o->world;
    t->comms = o->comms;
    t->stage = o->stage;
    snprintf(t->dtype, sizeof t->dtype, "%s", o->dtype ? o->dtype : "");
    snprintf(t->device, sizeof t->device, "%s", o->device ? o->device : "");
    zc_status rc = ZC_OK;
    if (o->path) {
        t->has_file = true;
        t->steps = o->steps;
        t->cap = o->capacity;
        size_t bytes = 0;
        if (__builtin_mul_overflow((size_t)o->capacity, sizeof(zc_tl_rec), &bytes)) {
            rc = ZC_ERR(ZC_ERR_CONFIG, "%s: %lld records do not fit in memory", key,
                        (long long)o->capacity);
            goto fail;
        }
        ZC_CHECK_GOTO(zc__tl_rank_path(o->path, o->rank, o->world, key, t->file,
                                       sizeof t->file), rc, fail);
        ZC_CHECK_GOTO(zc__host_alloc(acct, ZC_MEM_OTHER, bytes, "timeline records",
                                     (void **)&t->recs), rc, fail);
        ZC_CHECK_GOTO(zc__host_alloc(acct, ZC_MEM_OTHER, ZC_TL_WBUF_BYTES,
                                     "timeline writer buffer", (void **)&t->wbuf), rc, fail);
        t->wcap = ZC_TL_WBUF_BYTES;
        /* Created now, never over an existing file (or through a link), so
         * that a path that cannot be written fails the build rather than
         * the end of the window. */
        t->fd = open(t->file, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (t->fd < 0) {
            const int err = errno;
            rc = ZC_ERR(ZC_ERR_CONFIG,
                        "%s: cannot create the timeline file '%s' of rank %d: %s%s", key,
                        t->file, o->rank, strerror(err),
                        err == EEXIST ? " (a timeline is never written over an existing "
                                        "file: remove it or choose another path)"
                                      : "");
            goto fail;
        }
    }
    *out = t;
    return ZC_OK;
fail:
    zc__tl_destroy(t, acct);
    return rc;
}

/* The file as created is empty: it goes when nothing was written into it,
 * unless its name now points at something else. */
static void remove_unwritten(zc_tl *t)
{
    if (t->fd < 0)
        return;
    struct stat a, b;
    if (!t->written && fstat(t->fd, &a) == 0 && a.st_size == 0 &&
        lstat(t->file, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev)
        (void)unlink(t->file);
    close(t->fd);
    t->fd = -1;
}

void zc__tl_destroy(zc_tl *t, zc_mem_account *acct)
{
    if (!t)
        return;
    zc__tl_leave(t);
    remove_unwritten(t);
    if (t->recs)
        zc__host_free(acct, ZC_MEM_OTHER, t->recs, (size_t)t->cap * sizeof(zc_tl_rec));
    if (t->wbuf)
        zc__host_free(acct, ZC_MEM_OTHER, t->wbuf, t->wcap);
    zc__host_free(acct, ZC_MEM_OTHER, t, sizeof *t);
}

void zc__tl_enter(zc_tl *t)
{
    zc__tl_cur = t && (t->keeping || t->comms.enabled) ? t : NULL;
}

void zc__tl_leave(zc_tl *t)
{
    if (zc__tl_cur == t)
        zc__tl_cur = NULL;
}

bool zc__tl_keeping(const zc_tl *t) { return t && t->keeping; }

void zc__tl_push(zc_tl *t, const zc_tl_rec *r)
{
    if (!t || !t->keeping)
        return;
    if (r->track == ZC_TL_TRACK_MAIN && t->depth <= 0) {
        t->outside++; /* e.g. a checkpoint between two steps: no container */
        return;
    }
    const int64_t i = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed);
    if (i >= t->cap) {
        atomic_fetch_add_explicit(&t->dropped, 1, memory_order_relaxed);
        return;
    }
    t->recs[i] = *r;
    t->recs[i].seq = (uint32_t)i;
}

/* ---- the window ---------------------------------------------------------- */

bool zc__tl_traces_step(const zc_tl *t, int64_t step)
{
    return t && t->has_file && step >= t->steps.first && step <= t->steps.last;
}

void zc__tl_start(zc_tl *t)
{
    if (!t || !t->has_file || t->written || t->keeping)
        return;
    t->keeping = true;
    t->window_t0 = zc__tl_clock();
    t->depth = 0;
}

void zc__tl_finish(zc_tl *t)
{
    if (!t || !t->keeping)
        return;
    t->keeping = false;
    t->due = true;
}

void zc__tl_flush_due(zc_tl *t)
{
    if (!t || !t->due)
        return;
    t->due = false;
    if (zc__tl_write(t) != ZC_OK)
        ZC_LOGE("core", "%s (the training goes on without it)", zc_last_error());
}

bool zc__tl_pending(const zc_tl *t) { return t && t->has_file && !t->written; }
const char *zc__tl_file(const zc_tl *t) { return t ? t->file : ""; }

int64_t zc__tl_kept(const zc_tl *t)
{
    if (!t)
        return 0;
    const int64_t n = atomic_load(&t->next);
    return n < t->cap ? n : t->cap;
}

int64_t zc__tl_dropped(const zc_tl *t) { return t ? atomic_load(&t->dropped) : 0; }

static void push_main(zc_tl *t, zc_tl_kind kind, const char *name, int64_t t0, int64_t t1)
{
    zc_tl_rec r = {.t0 = t0, .t1 = t1, .name = name, .kind = (uint8_t)kind,
                   .track = ZC_TL_TRACK_MAIN, .chunk = -1};
    zc__tl_push(t, &r);
}

void zc__tl_step_open(zc_tl *t, int64_t t0)
{
    if (!t || !t->keeping)
        return;
    t->step_t0 = t0;
    t->depth++;
}

void zc__tl_step_close(zc_tl *t, int64_t t1, int64_t step, int micro_steps, bool skipped)
{
    if (!t || !t->keeping || t->depth <= 0)
        return;
    zc_tl_rec r = {.t0 = t->step_t0, .t1 = t1, .name = "step", .kind = ZC_TLK_STEP,
                   .track = ZC_TL_TRACK_MAIN, .chunk = -1, .i1 = micro_steps,
                   .a = step, .b = skipped};
    zc__tl_push(t, &r);
    t->depth--;
    t->last_close = t1;
    if (t->steps_kept++ == 0)
        t->first_kept = step;
    t->last_kept = step;
}

void zc__tl_phase(zc_tl *t, const char *name, int64_t t0, int64_t t1)
{
    if (t && t->keeping && t1 > t0)
        push_main(t, ZC_TLK_PHASE, name, t0, t1);
}

void zc__tl_loop_open(zc_tl *t)
{
    if (t && t->keeping)
        t->depth++;
}

void zc__tl_loop_close(zc_tl *t, int64_t t0, const char *name)
{
    if (!t || !t->keeping || t->depth <= 0)
        return;
    if (t0)
        push_main(t, ZC_TLK_LOOP, name, t0, zc__tl_clock());
    t->depth--;
}
