/* The host optimizer entry point: validates the shard, picks the variant and
 * splits the shard over the host thread pool. */
#include <pthread.h>

#include "base/error.h"
#include "optim/adam_isa.h"
#include "optim/threadpool.h"
#include "trace/trace.h"

/* Shards whose buffers exceed this many bytes get non-temporal stores
 * (ZC_ADAM_NT); 0 disables them. Disabled: on the machine we bench (2-core
 * Zen 3 VM, bench/RESULTS.md) streaming stores of master/m/v/copy made a 64M
 * shard 2-3x slower than regular stores (the lines were just read, so there
 * is no read-for-ownership to save). The kernels keep the path for machines
 * where it pays. */
#define ZC_ADAM_NT_MIN_BYTES ((size_t)0)

zc_status zc__adam_shard_check(const zc_adam_shard *s, const char *who)
{
    if (!s)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: NULL shard", who);
    if (s->n == 0)
        return ZC_OK;
    if (!s->master || !s->m || !s->v || !s->grad)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "%s: NULL buffer in a shard of %zu elements (master %p, m %p, v %p, grad %p)",
                      who, s->n, (void *)s->master, (void *)s->m, (void *)s->v, s->grad);
    if (s->grad_dtype != ZC_DTYPE_F32 && s->grad_dtype != ZC_DTYPE_F16 &&
        s->grad_dtype != ZC_DTYPE_BF16)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: gradient dtype %s is not fp32, fp16 or bf16", who,
                      zc_dtype_name(s->grad_dtype));
    if (s->param_out && s->param_out_dtype != ZC_DTYPE_F32 &&
        s->param_out_dtype != ZC_DTYPE_F16 && s->param_out_dtype != ZC_DTYPE_BF16)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "%s: parameter copy dtype %s is not fp32, fp16 or bf16", who,
                      zc_dtype_name(s->param_out_dtype));
    return ZC_OK;
}

unsigned zc__adam_flags_for(const zc_adam_shard *s)
{
    size_t bytes = s->n * (12 + zc_dtype_size(s->grad_dtype) +
                           (s->param_out ? zc_dtype_size(s->param_out_dtype) : 0));
    return ZC_ADAM_NT_MIN_BYTES > 0 && bytes > ZC_ADAM_NT_MIN_BYTES ? ZC_ADAM_NT : 0;
}

typedef struct job {
    const zc_adam_shard *s;
    const zc_adam_coeffs *c;
    zc_adam_kernel_fn fn;
    unsigned flags;
    size_t ntiles;
    zc_tl *tl;           /* the submitter's timeline while it keeps spans, else NULL */
    pthread_t submitter; /* parts it runs itself go on its own track */
} job;

/* Part k of T takes tiles [k*ntiles/T, (k+1)*ntiles/T): a static split, so
 * which thread computes an element never changes what it computes. */
static void run_part(void *arg, int k, int nparts)
{
    const job *j = arg;
    size_t t0 = j->ntiles * (size_t)k / (size_t)nparts;
    size_t t1 = j->ntiles * (size_t)(k + 1) / (size_t)nparts;
    size_t lo = t0 * ZC_ADAM_TILE;
    size_t hi = t1 * ZC_ADAM_TILE < j->s->n ? t1 * ZC_ADAM_TILE : j->s->n;
    if (lo >= hi)
        return;
    zc_adam_shard part = zc__adam_shard_slice(j->s, lo, hi);
    const int64_t began = j->tl ? zc__tl_clock() : 0;
    j->fn(&part, j->c, j->flags);
    if (began)
        zc__tl_adam_part(j->tl, began, (int64_t)(hi - lo), k, nparts,
                         pthread_equal(pthread_self(), j->submitter) ? 0 : k);
}

zc_status zc__adam_host_run(const zc_adam_shard *s, const zc_adam_coeffs *c, int variant,
                            int nthreads)
{
    ZC_CHECK(zc__adam_shard_check(s, "host Adam"));
    if (!c)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "host Adam: NULL coefficients");
    ZC_CHECK(zc__adam_variant_resolve(&variant));
    if (s->n == 0)
        return ZC_OK;
    job j = {
        .s = s,
        .c = c,
        .fn = zc__adam_variant(variant)->fn,
        .flags = zc__adam_flags_for(s),
        .ntiles = (s->n + ZC_ADAM_TILE - 1) / ZC_ADAM_TILE,
    };
    int t = nthreads;
    if (t <= 0)
        ZC_CHECK(zc__pool_default_threads(&t));
    /* The timeline: the piece as one span, each thread's part inside it. */
    const int64_t t0 = zc__tl_begin();
    j.tl = zc__tl_keeping(zc__tl_cur) ? zc__tl_cur : NULL;
    j.submitter = pthread_self();
    const int parts = zc__adam_host_threads(s->n, t);
    const zc_status rc = zc__pool_run(parts, run_part, &j, s->master);
    zc__tl_adam(t0, (int64_t)s->n, parts, zc__adam_variant(variant)->name);
    return rc;
}

int zc__adam_host_threads(size_t n, int want)
{
    if (want < 1 || n < ZC_ADAM_SMALL)
        return 1; /* no wake-up cost for small shards */
    const size_t ntiles = (n + ZC_ADAM_TILE - 1) / ZC_ADAM_TILE;
    return (size_t)want > ntiles ? (int)ntiles : want;
}

zc_status zc__adam_env_check(void)
{
    int variant = -1, threads = 0;
    ZC_CHECK(zc__adam_variant_selected(&variant));
    return zc__pool_default_threads(&threads);
}

zc_status zc__adam_host(const zc_adam_shard *s, const zc_adam_coeffs *c)
{
    return zc__adam_host_run(s, c, -1, 0);
}
