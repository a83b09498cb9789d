/* The host entry of Adam over 16-bit state (adam.h): validates the
 * shard, picks the variant (adam_isa.h's table, as zc__adam_host does) and
 * splits the shard over the host thread pool in static tiles and at every
 * multiple of 2^32 of the global index (the kernels' counters are the low
 * word; the key carries the high one). */
#include <pthread.h>

#include "base/error.h"
#include "optim/adam_isa.h"
#include "optim/adam.h"
#include "optim/threadpool.h"
#include "trace/trace.h"

static bool state_dtype(zc_dtype dt) { return dt == ZC_DTYPE_F32 || dt == ZC_DTYPE_BF16; }

static bool io_dtype(zc_dtype dt)
{
    return dt == ZC_DTYPE_F32 || dt == ZC_DTYPE_F16 || dt == ZC_DTYPE_BF16;
}

zc_status zc__adam_lp_check(const zc_adam_lp_shard *s, const zc_adam_coeffs *c, const char *who)
{
    if (!s || !c)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: NULL %s", who, s ? "coefficients" : "shard");
    if (c->arith != ZC_ADAM_ARITH_ZEROC)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: DeepSpeed's arithmetic is not offered over "
                                          "16-bit optimizer state", who);
    if (!state_dtype(s->master_dtype) || !state_dtype(s->m_dtype) || !state_dtype(s->v_dtype))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: state dtypes master %s, m %s, v %s (each must be "
                      "fp32 or bf16)", who, zc_dtype_name(s->master_dtype),
                      zc_dtype_name(s->m_dtype), zc_dtype_name(s->v_dtype));
    if (!io_dtype(s->grad_dtype) || (s->param_out && !io_dtype(s->param_out_dtype)))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: gradient dtype %s or copy dtype %s is not fp32, "
                      "fp16 or bf16", who, zc_dtype_name(s->grad_dtype),
                      zc_dtype_name(s->param_out_dtype));
    if (s->n && (!s->master || !s->m || !s->v || !s->grad))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: NULL buffer in a shard of %zu elements (master "
                      "%p, m %p, v %p, grad %p)", who, s->n, s->master, s->m, s->v, s->grad);
    if (s->n && s->index0 > UINT64_MAX - s->n)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: elements %llu + %zu pass 2^64", who,
                      (unsigned long long)s->index0, s->n);
    return ZC_OK;
}

zc_adam_lp_shard zc__adam_lp_slice(const zc_adam_lp_shard *s, size_t lo, size_t hi)
{
    zc_adam_lp_shard r = *s;
    r.master = (char *)s->master + lo * zc_dtype_size(s->master_dtype);
    r.m = (char *)s->m + lo * zc_dtype_size(s->m_dtype);
    r.v = (char *)s->v + lo * zc_dtype_size(s->v_dtype);
    r.grad = (const char *)s->grad + lo * zc_dtype_size(s->grad_dtype);
    if (s->param_out)
        r.param_out = (char *)s->param_out + lo * zc_dtype_size(s->param_out_dtype);
    r.index0 = s->index0 + lo;
    r.n = hi - lo;
    return r;
}

typedef struct job {
    const zc_adam_lp_shard *s;
    const zc_adam_coeffs *c;
    zc_adam_lp_fn fn;
    size_t ntiles;
    zc_tl *tl;
    pthread_t submitter;
} job;

/* Elements [lo, hi) of the job's shard, cut where the global index's high
 * word changes. */
static void run_range(const job *j, size_t lo, size_t hi)
{
    while (lo < hi) {
        const uint64_t at = j->s->index0 + lo;
        const uint64_t to_wrap = ((at >> 32) + 1) * ((uint64_t)1 << 32) - at;
        const size_t end = (uint64_t)(hi - lo) > to_wrap ? lo + (size_t)to_wrap : hi;
        const zc_adam_lp_shard part = zc__adam_lp_slice(j->s, lo, end);
        j->fn(&part, j->c);
        lo = end;
    }
}

static void run_part(void *arg, int k, int nparts)
{
    const job *j = arg;
    const size_t t0 = j->ntiles * (size_t)k / (size_t)nparts;
    const size_t t1 = j->ntiles * (size_t)(k + 1) / (size_t)nparts;
    const size_t lo = t0 * ZC_ADAM_TILE;
    const size_t hi = t1 * ZC_ADAM_TILE < j->s->n ? t1 * ZC_ADAM_TILE : j->s->n;
    if (lo >= hi)
        return;
    const int64_t began = j->tl ? zc__tl_clock() : 0;
    run_range(j, lo, hi);
    if (began)
        zc__tl_adam_part(j->tl, began, (int64_t)(hi - lo), k, nparts,
                         pthread_equal(pthread_self(), j->submitter) ? 0 : k);
}

zc_status zc__adam_lp_host_run(const zc_adam_lp_shard *s, const zc_adam_coeffs *c, int variant,
                               int nthreads)
{
    ZC_CHECK(zc__adam_lp_check(s, c, "host Adam (16-bit state)"));
    ZC_CHECK(zc__adam_variant_resolve(&variant));
    if (s->n == 0)
        return ZC_OK;
    job j = {
        .s = s,
        .c = c,
        .fn = zc__adam_variant(variant)->lp_fn,
        .ntiles = (s->n + ZC_ADAM_TILE - 1) / ZC_ADAM_TILE,
    };
    int t = nthreads;
    if (t <= 0)
        ZC_CHECK(zc__pool_default_threads(&t));
    const int64_t t0 = zc__tl_begin();
    j.tl = zc__tl_keeping(zc__tl_cur) ? zc__tl_cur : NULL;
    j.submitter = pthread_self();
    const int parts = zc__adam_host_threads(s->n, t);
    const zc_status rc = zc__pool_run(parts, run_part, &j, s->master);
    zc__tl_adam(t0, (int64_t)s->n, parts, zc__adam_variant(variant)->name);
    return rc;
}

zc_status zc__adam_lp_host(const zc_adam_lp_shard *s, const zc_adam_coeffs *c)
{
    return zc__adam_lp_host_run(s, c, -1, 0);
}
