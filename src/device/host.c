/* The host device backend: plain memory and synchronous kernels.
 *
 * Every operation completes before it returns, so streams and events only
 * need to exist (a stream handle is a sentinel). This backend is the
 * reference the CUDA backend is checked against: keep its arithmetic simple
 * and its summation order fixed. */
#include <math.h>
#include <string.h>

#include "base/dtype.h"
#include "device/device.h"
#include "quant/quant.h"

static char host_stream_sentinel, host_event_sentinel;

static zc_status host_alloc(zc_device *d, zc_mem_account *acct, zc_mem_category cat, size_t bytes,
                            const char *what, void **out)
{
    (void)d;
    /* Host memory standing for device memory: reported and budgeted as the
     * device kind, as on a GPU (docs/placement.md). */
    return zc__host_alloc_as(acct, ZC_MEMKIND_DEVICE, cat, bytes, what, out);
}

static void host_free(zc_device *d, zc_mem_account *acct, zc_mem_category cat, void *p,
                      size_t bytes)
{
    (void)d;
    zc__host_free_as(acct, ZC_MEMKIND_DEVICE, cat, p, bytes);
}

static zc_status host_stream_create(zc_device *d, void **s)
{
    (void)d;
    *s = &host_stream_sentinel;
    return ZC_OK;
}
static void host_stream_destroy(zc_device *d, void *s) { (void)d; (void)s; }
static zc_status host_stream_sync(zc_device *d, void *s) { (void)d; (void)s; return ZC_OK; }
static zc_status host_event_create(zc_device *d, void **e)
{
    (void)d;
    *e = &host_event_sentinel;
    return ZC_OK;
}
/* Same sentinel as a blocking stream: the host has no concurrency to order. */
static zc_status host_stream_create_nonblocking(zc_device *d, void **s)
{
    return host_stream_create(d, s);
}
static void host_event_destroy(zc_device *d, void *e) { (void)d; (void)e; }
/* Every operation finished before it returned, so every event is complete. */
static zc_status host_event_query(zc_device *d, void *e, int *done)
{
    (void)d; (void)e;
    *done = 1;
    return ZC_OK;
}
static zc_status host_event_record(zc_device *d, void *e, void *s)
{
    (void)d; (void)e; (void)s;
    return ZC_OK;
}
static zc_status host_stream_wait_event(zc_device *d, void *s, void *e)
{
    (void)d; (void)s; (void)e;
    return ZC_OK;
}
static zc_status host_event_sync(zc_device *d, void *e) { (void)d; (void)e; return ZC_OK; }

static zc_status host_copy(zc_device *d, void *dst, const void *src, size_t bytes,
                           zc_copy_kind kind, void *stream)
{
    (void)d; (void)kind; (void)stream;
    if (bytes && dst != src)
        memmove(dst, src, bytes);
    return ZC_OK;
}

static zc_status host_memset0(zc_device *d, void *dst, size_t bytes, void *stream)
{
    (void)d; (void)stream;
    if (bytes)
        memset(dst, 0, bytes);
    return ZC_OK;
}

static int is_float_dtype(zc_dtype dt)
{
    return dt == ZC_DTYPE_F32 || dt == ZC_DTYPE_F16 || dt == ZC_DTYPE_BF16;
}

/* The working copy from the master (loads, the publish): the rounding of
 * zc__f32_to_bf16 written as selects, in a loop the compiler vectorises
 * (the build's -O2 leaves it scalar: a fifth of the speed). */
__attribute__((optimize("O3"))) static void f32_to_bf16(uint16_t *restrict o,
                                                        const uint32_t *restrict s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const uint32_t x = s[i];
        const uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
        o[i] = (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u : r);
    }
}

static zc_status host_cast(zc_device *d, void *dst, zc_dtype dst_dt, const void *src,
                           zc_dtype src_dt, size_t n, void *stream)
{
    (void)d; (void)stream;
    if (!is_float_dtype(dst_dt) || !is_float_dtype(src_dt))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "cast: unsupported dtypes %s -> %s",
                      zc_dtype_name(src_dt), zc_dtype_name(dst_dt));
    if (dst_dt == src_dt) {
        if (dst != src)
            memmove(dst, src, n * zc_dtype_size(dst_dt));
        return ZC_OK;
    }
    if (src_dt == ZC_DTYPE_F32 && dst_dt == ZC_DTYPE_BF16 && dst != src) {
        f32_to_bf16(dst, src, n);
        return ZC_OK;
    }
    for (size_t i = 0; i < n; i++)
        zc__store_f32(dst, dst_dt, i, zc__load_f32(src, src_dt, i));
    return ZC_OK;
}

static zc_status host_scale(zc_device *d, void *x, zc_dtype dt, size_t n, float a, void *stream)
{
    (void)d; (void)stream;
    if (dt == ZC_DTYPE_F64) {
        double *p = x;
        for (size_t i = 0; i < n; i++)
            p[i] *= a;
        return ZC_OK;
    }
    if (!is_float_dtype(dt))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "scale: unsupported dtype %s", zc_dtype_name(dt));
    for (size_t i = 0; i < n; i++)
        zc__store_f32(x, dt, i, zc__load_f32(x, dt, i) * a);
    return ZC_OK;
}

static zc_status host_accumulate(zc_device *d, float *acc, const void *src, zc_dtype src_dt,
                                 size_t n, void *stream)
{
    (void)d; (void)stream;
    if (!is_float_dtype(src_dt))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "accumulate: unsupported dtype %s",
                      zc_dtype_name(src_dt));
    for (size_t i = 0; i < n; i++)
        acc[i] += zc__load_f32(src, src_dt, i);
    return ZC_OK;
}

static zc_status host_accumulate_rounded(zc_device *d, float *acc, const void *src,
                                         zc_dtype src_dt, zc_dtype acc_dt, size_t n,
                                         void *stream)
{
    if (!is_float_dtype(src_dt) || !is_float_dtype(acc_dt))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "accumulate_rounded: unsupported dtypes %s into %s",
                      zc_dtype_name(src_dt), zc_dtype_name(acc_dt));
    if (acc_dt == ZC_DTYPE_F32)
        return host_accumulate(d, acc, src, src_dt, n, stream);
    for (size_t i = 0; i < n; i++) {
        /* The fp32 sum, rounded once through the 16-bit encoding. */
        uint16_t h;
        zc__store_f32(&h, acc_dt, 0, acc[i] + zc__load_f32(src, src_dt, i));
        acc[i] = zc__load_f32(&h, acc_dt, 0);
    }
    return ZC_OK;
}

/* The fp32 form of reduce_sum: the same sum per element (source order,
 * fp32), element by element independent, so it runs as vector code. A chunk
 * goes through a local buffer, since dst may be any of the sources. */
static void reduce_sum_f32(void *dst, const void *const *srcs, int nsrc, size_t n)
{
    enum { CHUNK = 512 };
    float acc[CHUNK];
    for (size_t b = 0; b < n; b += CHUNK) {
        const size_t m = n - b < CHUNK ? n - b : CHUNK;
        const float *s0 = (const float *)srcs[0] + b;
        for (size_t i = 0; i < m; i++) acc[i] = s0[i];
        for (int k = 1; k < nsrc; k++) {
            const float *sk = (const float *)srcs[k] + b;
            for (size_t i = 0; i < m; i++) acc[i] += sk[i];
        }
        memcpy((float *)dst + b, acc, m * sizeof(float));
    }
}

static zc_status host_reduce_sum(zc_device *d, void *dst, const void *const *srcs, int nsrc,
                                 zc_dtype dt, size_t n, void *stream)
{
    (void)d; (void)stream;
    if (nsrc < 1)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "reduce_sum: nsrc = %d", nsrc);
    switch (dt) {
    case ZC_DTYPE_F64:
        for (size_t i = 0; i < n; i++) {
            double s = ((const double *)srcs[0])[i];
            for (int k = 1; k < nsrc; k++)
                s += ((const double *)srcs[k])[i];
            ((double *)dst)[i] = s;
        }
        return ZC_OK;
    case ZC_DTYPE_I32:
        for (size_t i = 0; i < n; i++) {
            int64_t s = 0;
            for (int k = 0; k < nsrc; k++)
                s += ((const int32_t *)srcs[k])[i];
            ((int32_t *)dst)[i] = (int32_t)s;
        }
        return ZC_OK;
    case ZC_DTYPE_F32:
        reduce_sum_f32(dst, srcs, nsrc, n);
        return ZC_OK;
    case ZC_DTYPE_F16:
    case ZC_DTYPE_BF16:
        /* Sum in fp32 in source (rank) order, round once: every rank and every
         * stage that reduces the same element gets the same bits. */
        for (size_t i = 0; i < n; i++) {
            float s = zc__load_f32(srcs[0], dt, i);
            for (int k = 1; k < nsrc; k++)
                s += zc__load_f32(srcs[k], dt, i);
            zc__store_f32(dst, dt, i, s);
        }
        return ZC_OK;
    default:
        return ZC_ERR(ZC_ERR_INVALID_ARG, "reduce_sum: unsupported dtype %d", (int)dt);
    }
}

/* The order of device/sumsq_order.h: each block's partial left to right
 * from +0.0, the partials through the fixed tree of runs. The CUDA kernels
 * add the same numbers in the same order. */
static double sumsq_ordered(const void *x, zc_dtype dt, size_t n)
{
    zc_sumsq_tree tree;
    zc__sumsq_tree_init(&tree);
    /* Each block's partial is one chain of dependent additions; LANES whole
     * blocks side by side are LANES independent chains that the processor
     * runs at once (each still left to right, pushed in block order: the
     * same bits as one block after another). */
    enum { LANES = 8 };
    size_t b = 0;
    if (dt == ZC_DTYPE_F32)
        for (; n - b >= (size_t)LANES * ZC_SUMSQ_BLOCK; b += (size_t)LANES * ZC_SUMSQ_BLOCK) {
            const float *f = (const float *)x + b;
            double part[LANES] = {0.0};
            for (size_t i = 0; i < ZC_SUMSQ_BLOCK; i++)
                for (int l = 0; l < LANES; l++) {
                    double v = f[(size_t)l * ZC_SUMSQ_BLOCK + i];
                    part[l] += v * v;
                }
            for (int l = 0; l < LANES; l++) zc__sumsq_tree_push(&tree, 0, part[l]);
        }
    for (; b < n; b += ZC_SUMSQ_BLOCK) {
        size_t e = b + ZC_SUMSQ_BLOCK < n ? b + ZC_SUMSQ_BLOCK : n;
        double part = 0.0;
        for (size_t i = b; i < e; i++) {
            double v = zc__load_f32(x, dt, i);
            part += v * v;
        }
        zc__sumsq_tree_push(&tree, 0, part);
    }
    return zc__sumsq_tree_finish(&tree);
}

static zc_status host_sumsq(zc_device *d, const void *x, zc_dtype dt, size_t n, double *out,
                            void *stream)
{
    (void)d; (void)stream;
    if (!is_float_dtype(dt))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "sumsq: unsupported dtype %s", zc_dtype_name(dt));
    *out = sumsq_ordered(x, dt, n);
    return ZC_OK;
}

/* The stream-ordered form: the same value, written through the pointer the
 * engine would pass on CUDA (here host memory, at once). The scratch is
 * checked but not needed: the tree keeps its running sums itself. */
static zc_status host_sumsq_async(zc_device *d, const void *x, zc_dtype dt, size_t n,
                                  double *scratch, double *out, void *stream)
{
    (void)d; (void)stream;
    if (!is_float_dtype(dt))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "sumsq_async: unsupported dtype %s",
                      zc_dtype_name(dt));
    if (!out || (n && !scratch))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "sumsq_async: NULL %s", out ? "scratch" : "out");
    *out = sumsq_ordered(x, dt, n);
    return ZC_OK;
}

static zc_status host_nonfinite(zc_device *d, const void *x, zc_dtype dt, size_t n, int *flag,
                                void *stream)
{
    (void)d; (void)stream;
    if (!is_float_dtype(dt))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "nonfinite: unsupported dtype %s", zc_dtype_name(dt));
    int bad = 0;
    if (dt == ZC_DTYPE_F32) {
        const uint32_t *u = x;
        for (size_t i = 0; i < n; i++)
            bad |= (u[i] & 0x7f800000u) == 0x7f800000u;
    } else {
        /* fp16: exponent 0x7c00; bf16: exponent 0x7f80. */
        const uint16_t *u = x;
        uint16_t mask = dt == ZC_DTYPE_F16 ? 0x7c00 : 0x7f80;
        for (size_t i = 0; i < n; i++)
            bad |= (u[i] & mask) == mask;
    }
    *flag = bad;
    return ZC_OK;
}

/* ORs into *flag (never clears it), like the CUDA kernel: one flag can
 * collect every chunk of a step before the single read. */
static zc_status host_nonfinite_async(zc_device *d, const void *x, zc_dtype dt, size_t n,
                                      int *flag, void *stream)
{
    int bad = 0;
    if (!flag)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "nonfinite_async: flag is NULL");
    ZC_CHECK(host_nonfinite(d, x, dt, n, &bad, stream));
    if (bad)
        *flag = 1;
    return ZC_OK;
}

static zc_status host_adam(zc_device *d, const zc_adam_shard *s, const zc_adam_coeffs *c,
                           void *stream)
{
    (void)d; (void)stream;
    return zc__adam_host(s, c);
}

static zc_status host_adam_lp(zc_device *d, const zc_adam_lp_shard *s, const zc_adam_coeffs *c,
                              void *stream)
{
    (void)d; (void)stream;
    return zc__adam_lp_host(s, c);
}

static zc_status host_lion(zc_device *d, const zc_lion_shard *s, const zc_lion_coeffs *c,
                           void *stream)
{
    (void)d; (void)stream;
    return zc__lion_host(s, c);
}

static zc_status host_adagrad(zc_device *d, const zc_adagrad_shard *s,
                              const zc_adagrad_coeffs *c, void *stream)
{
    (void)d; (void)stream;
    return zc__adagrad_host(s, c);
}

static zc_status host_quant_int8(zc_device *d, const void *x, zc_dtype dt, size_t n,
                                 size_t groups, int8_t *q, float *scales, void *stream)
{
    (void)d; (void)stream;
    return zc__quant_int8(x, dt, n, groups, q, scales);
}

static zc_status host_dequant_int8(zc_device *d, const int8_t *q, const float *scales, size_t n,
                                   size_t groups, void *out, zc_dtype dt, void *stream)
{
    (void)d; (void)stream;
    return zc__dequant_int8(q, scales, n, groups, out, dt);
}

/* The host's "device" memory is host memory, which the pre-flight checks
 * against MemAvailable and the cgroup: no device capacity to report. */
static zc_status host_mem_info(zc_device *d, size_t *free_bytes, size_t *total_bytes)
{
    (void)d;
    *free_bytes = 0;
    *total_bytes = 0;
    return ZC_OK;
}

static void host_destroy(zc_device *d) { (void)d; }

static const zc_device_ops host_ops = {
    .name = "host",
    .alloc = host_alloc,
    .free = host_free,
    .stream_create = host_stream_create,
    .stream_create_nonblocking = host_stream_create_nonblocking,
    .stream_destroy = host_stream_destroy,
    .stream_sync = host_stream_sync,
    .event_create = host_event_create,
    .event_destroy = host_event_destroy,
    .event_record = host_event_record,
    .stream_wait_event = host_stream_wait_event,
    .event_sync = host_event_sync,
    .event_query = host_event_query,
    .copy = host_copy,
    .memset0 = host_memset0,
    .cast = host_cast,
    .scale = host_scale,
    .accumulate = host_accumulate,
    .accumulate_rounded = host_accumulate_rounded,
    .reduce_sum = host_reduce_sum,
    .sumsq = host_sumsq,
    .nonfinite = host_nonfinite,
    .sumsq_async = host_sumsq_async,
    .nonfinite_async = host_nonfinite_async,
    .adam = host_adam,
    .adam_lp = host_adam_lp,
    .lion = host_lion,
    .adagrad = host_adagrad,
    .quant_int8 = host_quant_int8,
    .dequant_int8 = host_dequant_int8,
    .mem_info = host_mem_info,
    .destroy = host_destroy,
};

static zc_device host_device = {.ops = &host_ops, .mem_kind = ZC_MEMKIND_HOST, .index = -1};

zc_device *zc__device_host(void) { return &host_device; }
