/* The record of enqueued work behind the CUDA backend's error messages; see
 * optrack.h. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "device/optrack.h"

void zc__optrack_init(zc_optrack *t)
{
    memset(t, 0, sizeof *t);
    pthread_mutex_init(&t->mu, NULL);
}

void zc__optrack_destroy(zc_optrack *t) { pthread_mutex_destroy(&t->mu); }

void zc__optrack_note(zc_optrack *t, void *stream, const char *what, int dt, size_t n)
{
    zc_op_note op = {what, dt, n};
    pthread_mutex_lock(&t->mu);
    zc_op_stream *hit = NULL, *victim = NULL;
    for (int i = 0; i < ZC_OPTRACK_STREAMS; i++) {
        zc_op_stream *s = &t->s[i];
        if (s->live && s->stream == stream) {
            hit = s;
            break;
        }
        /* A free slot first, else the least recently noted stream. */
        if (!victim || (victim->live && (!s->live || s->used < victim->used)))
            victim = s;
    }
    if (!hit) {
        hit = victim;
        hit->stream = stream;
        hit->live = 1;
        hit->nops = 0;
    }
    if (hit->nops++ == 0)
        hit->first = op;
    hit->last = op;
    hit->used = ++t->tick;
    pthread_mutex_unlock(&t->mu);
}

void zc__optrack_waited(zc_optrack *t, void *stream)
{
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < ZC_OPTRACK_STREAMS; i++)
        if (t->s[i].live && t->s[i].stream == stream)
            t->s[i].nops = 0;
    pthread_mutex_unlock(&t->mu);
}

void zc__optrack_forget(zc_optrack *t, void *stream)
{
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < ZC_OPTRACK_STREAMS; i++)
        if (t->s[i].live && t->s[i].stream == stream)
            t->s[i].live = 0;
    pthread_mutex_unlock(&t->mu);
}

static void op_text(char *buf, size_t len, const zc_op_note *op)
{
    if (op->dt < 0 && op->n == 0)
        snprintf(buf, len, "%s", op->what);
    else if (op->dt < 0)
        snprintf(buf, len, "%s (%zu bytes)", op->what, op->n);
    else
        snprintf(buf, len, "%s (%s, %zu elements)", op->what, zc_dtype_name((zc_dtype)op->dt),
                 op->n);
}

/* Appends with snprintf semantics, keeping `at` inside buf. */
static size_t append(char *buf, size_t len, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static size_t append(char *buf, size_t len, size_t at, const char *fmt, ...)
{
    if (at + 1 >= len)
        return at;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + at, len - at, fmt, ap);
    va_end(ap);
    if (k < 0)
        return at;
    return at + (size_t)k < len ? at + (size_t)k : len - 1;
}

void zc__optrack_describe(zc_optrack *t, void *stream, int one_stream, char *buf, size_t len)
{
    if (!len)
        return;
    buf[0] = '\0';
    size_t at = 0;
    int any = 0;
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < ZC_OPTRACK_STREAMS; i++) {
        const zc_op_stream *s = &t->s[i];
        if (!s->live || !s->nops || (one_stream && s->stream != stream))
            continue;
        char a[128], b[128];
        op_text(a, sizeof a, &s->first);
        op_text(b, sizeof b, &s->last);
        if (s->nops == 1)
            at = append(buf, len, at, "; enqueued on stream %p since its last wait: 1 operation, %s",
                        s->stream, a);
        else
            at = append(buf, len, at,
                        "; enqueued on stream %p since its last wait: %llu operations, first %s, "
                        "last %s",
                        s->stream, (unsigned long long)s->nops, a, b);
        any = 1;
    }
    pthread_mutex_unlock(&t->mu);
    if (any)
        append(buf, len, at, " (rerun with CUDA_LAUNCH_BLOCKING=1 to find the failing one)");
    else
        snprintf(buf, len, "; no zeroc work was pending on %s (the fault is in other work on this "
                 "GPU)", one_stream ? "this stream" : "any stream");
}
