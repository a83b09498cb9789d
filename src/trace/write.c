/* Writing a timeline: the Chrome trace-event JSON format (the "JSON Object
 * Format" of the Trace Event Format document, which Perfetto and
 * chrome://tracing open):
 *
 *   {"traceEvents": [ {"name", "cat", "ph": "X", "ts", "dur", "pid", "tid",
 *                      "args"}, ... metadata ("ph": "M") ... ],
 *    "displayTimeUnit": "ms", "otherData": {...}}
 *
 * Every span is a complete event ("X": begin and duration), so none is left
 * open. ts and dur are microseconds with nanosecond digits, on
 * CLOCK_MONOTONIC. pid is the rank, tid the track: 0 the rank's thread (the
 * step, its phases, the engine's work inside them), 1000 + lane the NVMe
 * requests (asynchronous: each lane holds requests that do not overlap, so
 * every track stays a proper nesting), 2000 + w the host pool's worker w.
 * Events are written in order of their start on each track (a parent before
 * its children), which is the order a reader needs.
 *
 * No allocation: the records are sorted in place (heapsort) and formatted
 * through the buffer made at create, written with write(2). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "trace/tl_internal.h"

#define TID_NVME 1000
#define TID_WORKER 2000

typedef struct out {
    zc_tl *t;
    size_t len;
    int err; /* errno of the first failed write */
} out;

static void flush(out *o)
{
    size_t off = 0;
    while (off < o->len && !o->err) {
        ssize_t n = write(o->t->fd, o->t->wbuf + off, o->len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            o->err = n < 0 ? errno : EIO;
            break;
        }
        off += (size_t)n;
    }
    o->len = 0;
}

static void emit(out *o, const char *fmt, ...) ZC_PRINTF(2, 3);
static void emit(out *o, const char *fmt, ...)
{
    for (int tries = 0; tries < 2; tries++) {
        va_list ap;
        va_start(ap, fmt);
        const size_t room = o->t->wcap - o->len;
        int n = vsnprintf(o->t->wbuf + o->len, room, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if ((size_t)n < room) {
            o->len += (size_t)n;
            return;
        }
        o->t->wbuf[o->len] = '\0';
        flush(o); /* one event is far below the buffer's size */
    }
}

/* A JSON string of static or copied text (names, sites, agreements). */
static void emit_str(out *o, const char *s)
{
    char b[2 * ZC_TL_TEXT + 64];
    size_t n = 0;
    for (; *s && n + 7 < sizeof b; s++) {
        const unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') {
            b[n++] = '\\';
            b[n++] = (char)ch;
        } else if (ch < 0x20) {
            n += (size_t)snprintf(b + n, sizeof b - n, "\\u%04x", ch);
        } else {
            b[n++] = (char)ch;
        }
    }
    b[n] = '\0';
    emit(o, "\"%s\"", b);
}

/* ---- order ---------------------------------------------------------------- */

/* The track a record is sorted by: NVMe requests share one until their lanes
 * are given while writing. */
static int sort_track(const zc_tl_rec *r) { return r->track; }

/* a before b: by track, start, longer first (a parent before its children),
 * then the later-recorded first (a parent is recorded after its children). */
static bool before(const zc_tl_rec *a, const zc_tl_rec *b)
{
    const int ta = sort_track(a), tb = sort_track(b);
    if (ta != tb)
        return ta < tb;
    if (a->t0 != b->t0)
        return a->t0 < b->t0;
    if (a->t1 != b->t1)
        return a->t1 > b->t1;
    return a->seq > b->seq;
}

static void swap(zc_tl_rec *a, zc_tl_rec *b)
{
    zc_tl_rec x = *a;
    *a = *b;
    *b = x;
}

static void sift(zc_tl_rec *v, size_t i, size_t n)
{
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            return;
        if (c + 1 < n && before(&v[c], &v[c + 1]))
            c++;
        if (!before(&v[i], &v[c]))
            return;
        swap(&v[i], &v[c]);
        i = c;
    }
}

static void sort_records(zc_tl_rec *v, size_t n)
{
    for (size_t i = n / 2; i-- > 0;)
        sift(v, i, n);
    for (size_t end = n; end-- > 1;) {
        swap(&v[0], &v[end]);
        sift(v, 0, end);
    }
}

/* ---- events --------------------------------------------------------------- */

static const char *cat_of(const zc_tl_rec *r)
{
    static const char *const cats[ZC_TLK__COUNT] = {
        [ZC_TLK_STEP] = "step",     [ZC_TLK_PHASE] = "phase",    [ZC_TLK_SPAN] = "engine",
        [ZC_TLK_ACQUIRE] = "zero3", [ZC_TLK_COLL] = "comm",      [ZC_TLK_GROUP] = "comm",
        [ZC_TLK_AGREE] = "agree",   [ZC_TLK_NVME] = "nvme",      [ZC_TLK_NVME_WAIT] = "nvme",
        [ZC_TLK_COPY] = "copy",     [ZC_TLK_ADAM] = "optim",     [ZC_TLK_ADAM_PART] = "optim",
        [ZC_TLK_LOOP] = "loop"};
    return r->kind < ZC_TLK__COUNT && cats[r->kind] ? cats[r->kind] : "engine";
}

static void emit_us(out *o, int64_t ns)
{
    /* Microseconds with three decimals: the nanoseconds, exactly. */
    emit(o, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
}

static void emit_args(out *o, const zc_tl_rec *r)
{
    static const char *const acq[] = {"hit", "prefetched", "waited", "gathered"};
    const double dur_s = (double)(r->t1 - r->t0) / 1e9;
    switch ((zc_tl_kind)r->kind) {
    case ZC_TLK_STEP:
        emit(o, "{\"step\":%lld,\"micro_steps\":%d,\"skipped\":%s}", (long long)r->a, r->i1,
             r->b ? "true" : "false");
        return;
    case ZC_TLK_SPAN:
        emit(o, "{\"chunk\":%d,\"n\":%lld}", r->chunk, (long long)r->a);
        return;
    case ZC_TLK_ACQUIRE:
        emit(o, "{\"chunk\":%d,\"outcome\":\"%s\",\"bytes\":%lld,\"wait_us\":%.3f}", r->chunk,
             r->i0 >= 0 && r->i0 < 4 ? acq[r->i0] : "?", (long long)r->a, (double)r->b / 1e3);
        return;
    case ZC_TLK_COLL:
        emit(o, "{\"bytes\":%lld,\"elements\":%lld,\"dtype\":\"%s\",\"group\":\"world\","
             "\"group_size\":%d,\"batched\":%s,\"payload\":%s,\"site\":",
             (long long)r->a, (long long)r->b, zc_dtype_name((zc_dtype)r->i1), o->t->world,
             r->flags & ZC_TLF_BATCHED ? "true" : "false",
             r->flags & ZC_TLF_COUNTED ? "true" : "false");
        emit_str(o, r->text);
        emit(o, "}");
        return;
    case ZC_TLK_GROUP:
        emit(o, "{\"collectives\":%d,\"bytes\":%lld}", r->i0, (long long)r->a);
        return;
    case ZC_TLK_AGREE:
        emit(o, "{\"status\":\"%s\",\"what\":", zc_status_str((zc_status)r->i0));
        emit_str(o, r->text);
        emit(o, "}");
        return;
    case ZC_TLK_NVME:
        emit(o, "{\"bytes\":%lld,\"in_flight_at_submit\":%d,\"queue_depth\":%lld,"
             "\"GB_per_s\":%.3f}", (long long)r->a, r->i1, (long long)r->b,
             dur_s > 0 ? (double)r->a / dur_s / 1e9 : 0.0);
        return;
    case ZC_TLK_NVME_WAIT:
        emit(o, "{\"bytes\":%lld}", (long long)r->a);
        return;
    case ZC_TLK_COPY:
        emit(o, "{\"chunk\":%d,\"bytes\":%lld,\"GB_per_s\":%.3f}", r->chunk, (long long)r->a,
             dur_s > 0 ? (double)r->a / dur_s / 1e9 : 0.0);
        return;
    case ZC_TLK_ADAM:
        emit(o, "{\"elements\":%lld,\"threads\":%d,\"variant\":", (long long)r->a, r->i0);
        emit_str(o, r->text);
        emit(o, "}");
        return;
    case ZC_TLK_ADAM_PART:
        emit(o, "{\"elements\":%lld,\"part\":%d,\"parts\":%d}", (long long)r->a, r->i0, r->i1);
        return;
    default:
        emit(o, "{}");
        return;
    }
}

static void emit_event(out *o, const zc_tl_rec *r, int tid, bool *first)
{
    emit(o, "%s\n{\"name\":", *first ? "" : ",");
    *first = false;
    emit_str(o, r->name);
    emit(o, ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":", cat_of(r), o->t->rank,
         tid);
    emit_us(o, r->t0);
    emit(o, ",\"dur\":");
    emit_us(o, r->t1 - r->t0);
    emit(o, ",\"args\":");
    emit_args(o, r);
    emit(o, "}");
}

static void emit_meta(out *o, const char *what, int tid, const char *name, int sort, bool *first)
{
    emit(o, "%s\n{\"name\":\"%s_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":",
         *first ? "" : ",", what, o->t->rank, tid);
    *first = false;
    emit_str(o, name);
    emit(o, "}}");
    emit(o, ",\n{\"name\":\"%s_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
         "\"args\":{\"sort_index\":%d}}", what, o->t->rank, tid, sort);
}

zc_status zc__tl_write(zc_tl *t)
{
    if (!t || !t->has_file || t->written)
        return ZC_OK;
    t->keeping = false;
    t->due = false;
    t->written = true;
    /* What was recorded up to the last closed step: a step still open (the
     * run ended inside the window) has no record of its own yet. */
    int64_t n = zc__tl_kept(t), kept = 0;
    for (int64_t i = 0; i < n; i++)
        if (t->recs[i].t1 <= t->last_close && t->steps_kept > 0)
            t->recs[kept++] = t->recs[i];
    const int64_t cut = n - kept;
    sort_records(t->recs, (size_t)kept);

    out o = {.t = t};
    bool first = true;
    char pname[32];
    snprintf(pname, sizeof pname, "rank %d", t->rank);
    emit(&o, "{\"traceEvents\":[");
    emit_meta(&o, "process", 0, pname, t->rank, &first);
    emit_meta(&o, "thread", 0, "engine (rank thread)", 0, &first);
    int64_t lane_end[ZC_TL_NVME_LANES] = {0};
    bool lane_named[ZC_TL_NVME_LANES] = {false}, worker_named[256] = {false};
    for (int64_t i = 0; i < kept; i++) {
        const zc_tl_rec *r = &t->recs[i];
        int tid = r->track;
        if (r->track == ZC_TL_TRACK_NVME) {
            /* The first lane free at its start (sorted by start, so every
             * lane's requests come in order); the last one takes what is
             * left. */
            int l = 0;
            while (l < ZC_TL_NVME_LANES - 1 && lane_end[l] > r->t0)
                l++;
            if (lane_end[l] < r->t1)
                lane_end[l] = r->t1;
            tid = TID_NVME + l;
            if (!lane_named[l]) {
                char nm[32];
                snprintf(nm, sizeof nm, "nvme requests %d", l);
                emit_meta(&o, "thread", tid, nm, 100 + l, &first);
                lane_named[l] = true;
            }
        } else if (r->track >= ZC_TL_TRACK_WORKER) {
            const int w = r->track - ZC_TL_TRACK_WORKER;
            tid = TID_WORKER + w;
            if (w < 256 && !worker_named[w]) {
                char nm[32];
                snprintf(nm, sizeof nm, "host pool worker %d", w);
                emit_meta(&o, "thread", tid, nm, 200 + w, &first);
                worker_named[w] = true;
            }
        }
        emit_event(&o, r, tid, &first);
    }
    char steps[64] = "none";
    if (t->steps_kept > 0)
        snprintf(steps, sizeof steps, "%lld-%lld", (long long)t->first_kept,
                 (long long)t->last_kept);
    emit(&o, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"zeroc %d.%d.%d\","
         "\"rank\":%d,\"world\":%d,\"stage\":%d,\"dtype\":\"%s\",\"device\":\"%s\","
         "\"steps_requested\":\"%lld-%lld\",\"steps\":\"%s\",\"records\":%lld,"
         "\"dropped\":%lld,\"after_last_step\":%lld,\"outside_steps\":%lld,"
         "\"capacity\":%lld,\"clock\":\"CLOCK_MONOTONIC\"}}\n",
         ZEROC_VERSION_MAJOR, ZEROC_VERSION_MINOR, ZEROC_VERSION_PATCH, t->rank, t->world,
         t->stage, t->dtype, t->device, (long long)t->steps.first, (long long)t->steps.last,
         steps, (long long)kept, (long long)zc__tl_dropped(t), (long long)cut,
         (long long)t->outside, (long long)t->cap);
    flush(&o);
    const int err = o.err;
    if (!err && fsync(t->fd) != 0 && errno != EINVAL && errno != EROFS)
        o.err = errno;
    if (close(t->fd) != 0 && !o.err)
        o.err = errno;
    t->fd = -1;
    if (o.err)
        return ZC_ERR(ZC_ERR_IO, "writing the timeline '%s' of rank %d: %s", t->file, t->rank,
                      strerror(o.err));
    if (zc__tl_dropped(t) > 0)
        ZC_LOGW("core", "timeline '%s': %lld records did not fit the %lld kept (trace.max_events)"
                " and were dropped", t->file, (long long)zc__tl_dropped(t), (long long)t->cap);
    ZC_LOGI("core", "timeline of steps %s written to '%s' (%lld spans)", steps, t->file,
            (long long)kept);
    return ZC_OK;
}
