/* The element-wise optimizers' split over the host thread pool: the tiles
 * and the static assignment of zc__adam_host_run (adam_host.c), shared so
 * that every host optimizer is bitwise independent of the thread count in
 * the same way. */
#include "optim/ew_split.h"

#include "base/error.h"
#include "optim/adam_isa.h"
#include "optim/threadpool.h"

static bool float_dtype(zc_dtype dt)
{
    return dt == ZC_DTYPE_F32 || dt == ZC_DTYPE_F16 || dt == ZC_DTYPE_BF16;
}

typedef struct ew_job {
    zc_ew_range_fn run;
    const void *ctx;
    size_t n, ntiles;
} ew_job;

static void ew_part(void *arg, int k, int nparts)
{
    const ew_job *j = arg;
    size_t t0 = j->ntiles * (size_t)k / (size_t)nparts;
    size_t t1 = j->ntiles * (size_t)(k + 1) / (size_t)nparts;
    size_t lo = t0 * ZC_ADAM_TILE;
    size_t hi = t1 * ZC_ADAM_TILE < j->n ? t1 * ZC_ADAM_TILE : j->n;
    if (lo < hi)
        j->run(j->ctx, lo, hi);
}

zc_status zc__ew_split(size_t n, int nthreads, zc_ew_range_fn run, const void *ctx,
                       const void *near)
{
    if (n == 0)
        return ZC_OK;
    int t = nthreads;
    if (t <= 0)
        ZC_CHECK(zc__pool_default_threads(&t));
    ew_job j = {.run = run, .ctx = ctx, .n = n, .ntiles = (n + ZC_ADAM_TILE - 1) / ZC_ADAM_TILE};
    return zc__pool_run(zc__adam_host_threads(n, t), ew_part, &j, near);
}

zc_status zc__ew_shard_check(const char *who, const float *master, const float *state,
                             const char *state_name, const void *grad, zc_dtype grad_dtype,
                             const void *param_out, zc_dtype param_out_dtype, size_t n)
{
    if (n == 0)
        return ZC_OK;
    if (!master || !state || !grad)
        return ZC_ERR(ZC_ERR_INVALID_ARG,
                      "%s: NULL buffer in a shard of %zu elements (master %p, %s %p, grad %p)",
                      who, n, (const void *)master, state_name, (const void *)state, grad);
    if (!float_dtype(grad_dtype))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: gradient dtype %s is not fp32, fp16 or bf16", who,
                      zc_dtype_name(grad_dtype));
    if (param_out && !float_dtype(param_out_dtype))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: parameter copy dtype %s is not fp32, fp16 or bf16",
                      who, zc_dtype_name(param_out_dtype));
    return ZC_OK;
}
