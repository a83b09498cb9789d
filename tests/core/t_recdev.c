/* The recording device of the engine tests (t_recdev.h). */
#include "t_recdev.h"

#include <criterion/criterion.h>
#include <string.h>

static const zc_device_ops *H(void) { return zc__device_host()->ops; }
static rec_dev *RD(zc_device *d) { return (rec_dev *)d; }

static void rec_note(zc_device *d, int op, void *stream, void *event)
{
    rec_dev *f = RD(d);
    if (f->n == LOGMAX) {
        f->overflow = true;
        return;
    }
    f->log[f->n++] = (rec){op, stream, event};
}

static void *handle(rec_dev *f, bool nonblocking)
{
    cr_assert_lt(f->nhandles, NHANDLES);
    f->nonblocking[f->nhandles] = nonblocking;
    return &f->handles[f->nhandles++];
}

bool rec_is_nonblocking(const rec_dev *f, const void *s)
{
    const char *c = s;
    return c >= f->handles && c < f->handles + f->nhandles && f->nonblocking[c - f->handles];
}

static zc_status r_alloc(zc_device *d, zc_mem_account *a, zc_mem_category cat, size_t bytes,
                         const char *what, void **out)
{
    RD(d)->allocs++;
    return H()->alloc(d, a, cat, bytes, what, out);
}
static zc_status r_stream_create(zc_device *d, void **s)
{
    *s = handle(RD(d), false);
    return ZC_OK;
}
static zc_status r_stream_create_nb(zc_device *d, void **s)
{
    *s = handle(RD(d), true);
    return ZC_OK;
}
static void r_stream_destroy(zc_device *d, void *s) { (void)d; (void)s; }
static zc_status r_stream_sync(zc_device *d, void *s)
{
    rec_note(d, R_SYNC, s, NULL);
    return ZC_OK;
}
static zc_status r_event_create(zc_device *d, void **e)
{
    *e = handle(RD(d), false);
    return ZC_OK;
}
static void r_event_destroy(zc_device *d, void *e) { (void)d; (void)e; }
static zc_status r_event_record(zc_device *d, void *e, void *s)
{
    rec_note(d, R_RECORD, s, e);
    return ZC_OK;
}
static zc_status r_wait(zc_device *d, void *s, void *e)
{
    rec_note(d, R_WAIT, s, e);
    return ZC_OK;
}
static zc_status r_event_sync(zc_device *d, void *e)
{
    rec_note(d, R_EVSYNC, NULL, e);
    return ZC_OK;
}
static zc_status r_copy(zc_device *d, void *dst, const void *src, size_t b, zc_copy_kind k,
                        void *s)
{
    rec_note(d, R_COPY, s, NULL);
    return H()->copy(d, dst, src, b, k, s);
}
static zc_status r_memset0(zc_device *d, void *dst, size_t b, void *s)
{
    rec_note(d, R_MEMSET, s, NULL);
    return H()->memset0(d, dst, b, s);
}
static zc_status r_cast(zc_device *d, void *dst, zc_dtype ddt, const void *src, zc_dtype sdt,
                        size_t n, void *s)
{
    rec_note(d, R_CAST, s, NULL);
    return H()->cast(d, dst, ddt, src, sdt, n, s);
}
static zc_status r_scale(zc_device *d, void *x, zc_dtype dt, size_t n, float a, void *s)
{
    rec_note(d, R_SCALE, s, NULL);
    return H()->scale(d, x, dt, n, a, s);
}
static zc_status r_accum(zc_device *d, float *acc, const void *src, zc_dtype dt, size_t n,
                         void *s)
{
    rec_note(d, R_ACCUM, s, NULL);
    return H()->accumulate(d, acc, src, dt, n, s);
}
static zc_status r_accum_rounded(zc_device *d, float *acc, const void *src, zc_dtype dt,
                                 zc_dtype acc_dt, size_t n, void *s)
{
    rec_note(d, R_ACCUM, s, NULL);
    return H()->accumulate_rounded(d, acc, src, dt, acc_dt, n, s);
}
static zc_status r_reduce(zc_device *d, void *dst, const void *const *srcs, int nsrc,
                          zc_dtype dt, size_t n, void *s)
{
    rec_note(d, R_REDUCE, s, NULL);
    return H()->reduce_sum(d, dst, srcs, nsrc, dt, n, s);
}
static zc_status r_sumsq(zc_device *d, const void *x, zc_dtype dt, size_t n, double *out,
                         void *s)
{
    rec_note(d, R_SUMSQ, s, NULL);
    return H()->sumsq(d, x, dt, n, out, s);
}
static zc_status r_nonfinite(zc_device *d, const void *x, zc_dtype dt, size_t n, int *flag,
                             void *s)
{
    rec_note(d, R_NONFINITE, s, NULL);
    return H()->nonfinite(d, x, dt, n, flag, s);
}
static zc_status r_sumsq_async(zc_device *d, const void *x, zc_dtype dt, size_t n,
                               double *scratch, double *out, void *s)
{
    rec_note(d, R_SUMSQ_ASYNC, s, NULL);
    return H()->sumsq_async(d, x, dt, n, scratch, out, s);
}
static zc_status r_nonfinite_async(zc_device *d, const void *x, zc_dtype dt, size_t n,
                                   int *flag, void *s)
{
    rec_note(d, R_NONFINITE_ASYNC, s, NULL);
    return H()->nonfinite_async(d, x, dt, n, flag, s);
}
static zc_status r_adam(zc_device *d, const zc_adam_shard *sh, const zc_adam_coeffs *c, void *s)
{
    rec_note(d, R_ADAM, s, NULL);
    return H()->adam(d, sh, c, s);
}
static zc_status r_make_current(zc_device *d)
{
    rec_note(d, R_CURRENT, NULL, NULL);
    return ZC_OK;
}
static void r_destroy(zc_device *d) { (void)d; }

void rec_init(rec_dev *f, const zc_device *under)
{
    memset(f, 0, sizeof *f);
    f->base = *under;
    f->ops = *under->ops;
    f->ops.alloc = r_alloc;
    f->ops.stream_create = r_stream_create;
    f->ops.stream_create_nonblocking = r_stream_create_nb;
    f->ops.stream_destroy = r_stream_destroy;
    f->ops.stream_sync = r_stream_sync;
    f->ops.event_create = r_event_create;
    f->ops.event_destroy = r_event_destroy;
    f->ops.event_record = r_event_record;
    f->ops.stream_wait_event = r_wait;
    f->ops.event_sync = r_event_sync;
    f->ops.copy = r_copy;
    f->ops.memset0 = r_memset0;
    f->ops.cast = r_cast;
    f->ops.scale = r_scale;
    f->ops.accumulate = r_accum;
    f->ops.accumulate_rounded = r_accum_rounded;
    f->ops.reduce_sum = r_reduce;
    f->ops.sumsq = r_sumsq;
    f->ops.nonfinite = r_nonfinite;
    f->ops.sumsq_async = r_sumsq_async;
    f->ops.nonfinite_async = r_nonfinite_async;
    f->ops.adam = r_adam;
    f->ops.make_current = r_make_current;
    f->ops.destroy = r_destroy;
    f->base.ops = &f->ops;
}

/* Routes e's device calls (and its pools') through f from now on: before
 * build, so the streams and events it creates are f's handles. */
void rec_install(zc_engine *e, rec_dev *f)
{
    rec_init(f, e->dev);
    e->dev = &f->base;
    e->pool_grad.dev = e->pool_gather.dev = e->pool_stage.dev = &f->base;
}


/* Index of the first entry in [from, to) matching op, stream and event
 * (ANY matches anything), or -1. */
int rec_find(const rec_dev *f, int from, int to, int op, void *stream, void *event)
{
    for (int i = from; i < to && i < f->n; i++) {
        const rec *r = &f->log[i];
        if (r->op == op && (stream == ANY || r->stream == stream) &&
            (event == ANY || r->event == event))
            return i;
    }
    return -1;
}

bool rec_is_host_wait(int op)
{
    return op == R_SYNC || op == R_EVSYNC || op == R_SUMSQ || op == R_NONFINITE;
}

int rec_count_host_waits(const rec_dev *f, int from, int to, void *stream)
{
    int k = 0;
    for (int i = from; i < to; i++)
        if (rec_is_host_wait(f->log[i].op) && (stream == ANY || f->log[i].stream == stream))
            k++;
    return k;
}

/* Work enqueued on a stream (not an ordering call). */
bool rec_is_work(int op)
{
    return op == R_MEMSET || op == R_COPY || op == R_ACCUM || op == R_SCALE || op == R_CAST ||
           op == R_SUMSQ_ASYNC || op == R_NONFINITE_ASYNC || op == R_ADAM || op == R_REDUCE;
}

